//! Executes a plan: one child process per cell and round, or per multi-arm group and round
//! ([`processes`]), with a timeout and optionally a memory cap, the results file rewritten
//! atomically after every process, SIGINT/SIGTERM stopping the current process without recording
//! it, `--resume` skipping what is already measured, and a paired cell's later rounds skipped once
//! the sequential rule has decided its verdict ([`stopping`]).

mod process;
mod stderr;

use std::path::{Path, PathBuf};
use std::time::Duration;

pub use process::{LineSink, ProcessExecutor};
pub(in crate::bench) use stderr::says_out_of_memory;

use crate::analysis::{refresh_derived, summarise_cell};
use crate::bench::cell::{CellJob, Outcome};
use crate::bench::interrupt::Interrupt;
use crate::bench::plan::{Plan, Slot};
use crate::bench::processes::{self, ProcessSlots};
use crate::bench::stopping::{self, Decision};
use crate::bench::trace::{CellGlob, TraceTargets};
use crate::error::Error;
use crate::results::schema::{
    CellId, CellKey, CellResult, CellStatus, EarlyDecision, MeasurementDesign, Results, RunInfo,
    SpeedrunChoice,
};
use crate::results::store;
use crate::results::system::SystemInfo;
use crate::workloads::WorkloadId;

/// The name of the results file inside a run directory.
pub const RESULTS_FILE: &str = "results.json";

/// How one cell process ended.
#[derive(Debug, Clone, PartialEq)]
pub enum Execution {
    /// It ran to its end: what became of each cell of its job, in [`CellJob::members`] order (a
    /// measurement, or the status of a cell that dropped out while the process went on).
    Measured(Vec<Outcome>),
    /// It did not; the status says how it ended.
    Failed(CellStatus),
    /// It did not, and it ended while it worked on the side of cell `cell` (an id) alone, as its
    /// last announcement said: that cell failed; the status says how.
    FailedIn {
        /// The cell's id.
        cell: String,
        /// How the process ended.
        status: CellStatus,
    },
    /// It was stopped because the run was interrupted by this signal; nothing is recorded.
    Interrupted(i32),
}

/// Runs cell processes. The real one re-executes the trickbench binary; tests substitute a mock
/// that makes end-to-end runs deterministic.
pub trait CellExecutor {
    /// Runs `job`, stopping it after `timeout`.
    fn execute(&mut self, job: &CellJob, timeout: Duration) -> Execution;
}

/// Hooks called as a run progresses (all optional).
pub trait RunObserver {
    /// A process of `cells` (one, or the arms of a multi-arm process and their reference) in
    /// `round` is about to start; `done` of `total` processes have finished (`total` 0: a cell
    /// of a failed multi-arm process runs again on its own).
    fn process_started(&mut self, _done: usize, _total: usize, _cells: &[CellKey], _round: usize) {}
    /// `cell` needs no more processes from `round` on: the sequential rule decided its verdict.
    fn cell_decided(&mut self, _cell: &CellResult, _decision: Decision, _round: usize) {}
    /// A round's warm-up process (of `cell`, its measurement discarded) is about to start; `done`
    /// of `total` processes have finished.
    fn warmup_started(&mut self, _done: usize, _total: usize, _cell: &CellKey, _round: usize) {}
    /// A cell process has finished and its cells' results are updated.
    fn process_finished(&mut self, _cells: &[&CellResult]) {}
    /// The results file was rewritten.
    fn results_written(&mut self, _path: &Path) {}
}

/// An observer that does nothing.
#[derive(Debug, Default)]
pub struct Silent;

impl RunObserver for Silent {}

/// A run to execute.
#[derive(Debug, Clone)]
pub struct RunSpec {
    /// What the run is (written into the results as given).
    pub info: RunInfo,
    /// The machine record.
    pub system: SystemInfo,
    /// The cells.
    pub plan: Plan,
    /// Directory of the data, handed to each cell.
    pub data_dir: PathBuf,
    /// ImageFolder directory or tar of JPEG/PNG files to train on instead (`run --images`),
    /// handed to each cell.
    pub images: Option<PathBuf>,
    /// The text file the GPT workloads train on, handed to each cell.
    pub text: Option<PathBuf>,
    /// Directory of the results file.
    pub out_dir: PathBuf,
    /// Continue from an existing results file in `out_dir`.
    pub resume: bool,
    /// Stops the run before the next cell process once triggered (SIGINT, SIGTERM).
    pub interrupt: Interrupt,
    /// The cells whose first measured process records a profiler trace into `out_dir` (`run
    /// --trace`; `None`: no traces).
    pub trace: Option<CellGlob>,
    /// The speedrun design's choices so far, written into the results (each in place of an
    /// earlier one for its workload).
    pub speedrun: Vec<SpeedrunChoice>,
    /// The Python with torch handed to the cells of the PyTorch engine (`None`:
    /// [`crate::engine::default_python`]).
    pub python: Option<PathBuf>,
    /// The socket of the run's PyTorch engine fork server, handed to the cells (`None`: each
    /// cell of the PyTorch engine starts its own Python).
    pub pytorch_server: Option<PathBuf>,
    /// The folder the user's model was prepared in (`run --model`), handed to its cells.
    pub model_dir: Option<PathBuf>,
}

/// Runs the plan (the cells of its shard only, when `spec.info.shard` names one) and returns the
/// final results (also written to `out_dir/results.json`).
pub fn run(
    spec: &RunSpec,
    executor: &mut dyn CellExecutor,
    observer: &mut dyn RunObserver,
) -> Result<Results, Error> {
    let path = spec.out_dir.join(RESULTS_FILE);
    let this_shard;
    let spec = match &spec.info.shard {
        Some(record) => {
            this_shard = RunSpec { plan: record.part_of(&spec.plan, spec.info.design), ..spec.clone() };
            &this_shard
        }
        None => spec,
    };
    let (mut results, finished_before) = initial_results(spec, &path)?;
    // A resumed run's comparisons, floors and estimates are derived again by this build.
    refresh_derived(&mut results);
    let measured_before = measured(&results);
    for choice in &spec.speedrun {
        results.speedrun.retain(|c| (c.workload, c.engine) != (choice.workload, choice.engine));
        results.speedrun.push(choice.clone());
    }
    let pending = pending_slots(spec, &results);
    let multi_arm = spec.info.protocol.multi_arm();
    let processes = processes::group(&spec.plan, &pending, spec.info.design, multi_arm);
    store::save(&results, &path)?;
    let mut run = Running { spec, path: &path, results, executor, observer };
    for (n, process) in processes.iter().enumerate() {
        if let Some(signal) = spec.interrupt.signal() {
            return Err(Error::Interrupted { signal, results: path });
        }
        if process.is_warmup() {
            run.warm_up(process.arms[0], n, processes.len())?;
            continue;
        }
        let Some(process) = run.still_to_measure(process) else { continue };
        run.observer.process_started(n, processes.len(), &run.keys(&process), process.arms[0].round);
        run.measure(&process)?;
    }
    let mut results = run.results;
    // A resumed run that had nothing left to measure keeps the time it finished at.
    results.run.finished_at = match finished_before {
        Some(at) if measured(&results) == measured_before => Some(at),
        _ => Some(chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Secs, true)),
    };
    store::save(&results, &path)?;
    Ok(results)
}

/// The processes `results` holds, every cell's together.
fn measured(results: &Results) -> usize {
    results.cells.iter().map(|c| c.processes.len()).sum()
}

/// A run in progress: what it runs, where its results go, what they hold so far, and who runs and
/// watches its processes.
struct Running<'a> {
    spec: &'a RunSpec,
    path: &'a Path,
    results: Results,
    executor: &'a mut dyn CellExecutor,
    observer: &'a mut dyn RunObserver,
}

impl Running<'_> {
    /// Runs the warm-up process of `slot` (the `n`th of `total` processes); only an interruption
    /// matters: the measurement is discarded, and a cell that cannot run fails again, recorded,
    /// in its own slot.
    fn warm_up(&mut self, slot: Slot, n: usize, total: usize) -> Result<(), Error> {
        let key = &self.spec.plan.cells[slot.cell].key;
        self.observer.warmup_started(n, total, key, slot.round);
        let job = job_for(self.spec, &[slot], None);
        match self.executor.execute(&job, self.timeout(&job)) {
            Execution::Interrupted(signal) => {
                Err(Error::Interrupted { signal, results: self.path.to_owned() })
            }
            _ => Ok(()),
        }
    }

    /// `process` without the cells that need no more processes: those that ended unsuccessfully,
    /// and those whose verdict the sequential rule has decided ([`stopping::decision`], each
    /// told to the observer); `None` when nothing is left to measure. A reference left without
    /// arms is measured alone.
    fn still_to_measure(&mut self, process: &ProcessSlots) -> Option<ProcessSlots> {
        let mut arms = Vec::new();
        for slot in &process.arms {
            let key = &self.spec.plan.cells[slot.cell].key;
            if finished_unsuccessfully(&self.results.cells, key) {
                continue;
            }
            let results = &self.results;
            let found = results.cells.iter().position(|c| c.key == *key);
            match found.and_then(|i| stopping::decision(&results.cells[i], results).map(|d| (i, d))) {
                Some((i, decision)) => {
                    let cell = &mut self.results.cells[i];
                    cell.decided = Some(EarlyDecision { after_rounds: cell.processes.len(), decision });
                    self.observer.cell_decided(cell, decision, slot.round);
                }
                None => arms.push(*slot),
            }
        }
        let reference = process
            .reference
            .filter(|s| !finished_unsuccessfully(&self.results.cells, &self.spec.plan.cells[s.cell].key));
        match (arms.is_empty(), reference) {
            (true, None) => None,
            (true, Some(reference)) => Some(ProcessSlots { arms: vec![reference], reference: None }),
            (false, reference) => Some(ProcessSlots { arms, reference }),
        }
    }

    /// The keys of the cells `process` measures.
    fn keys(&self, process: &ProcessSlots) -> Vec<CellKey> {
        process.slots().map(|s| self.spec.plan.cells[s.cell].key.clone()).collect()
    }

    /// The cell timeout of `job`'s process: the protocol's for each cell it measures.
    fn timeout(&self, job: &CellJob) -> Duration {
        Duration::from_secs_f64(self.spec.info.protocol.cell_timeout_s * job.members().len() as f64)
    }

    /// Runs `process` and records what became of each cell (a cell that dropped out of a process
    /// that went on is recorded with its own status). Where a process of several cells dies
    /// while working on one arm's side alone, that cell failed and the others run again in one
    /// process; where it dies elsewhere (in the windows, in the reference's side), each of its
    /// cells runs again in a process of its own, so that the failure is recorded against the
    /// cell that caused it.
    fn measure(&mut self, process: &ProcessSlots) -> Result<(), Error> {
        let job = job_for(self.spec, &process.arms, process.reference);
        let slots: Vec<Slot> = process.slots().copied().collect();
        let outcomes: Vec<Outcome> = match self.executor.execute(&job, self.timeout(&job)) {
            Execution::Measured(measured) if measured.len() == slots.len() => measured,
            Execution::Measured(measured) => {
                let error = format!(
                    "the cell process returned {} measurements for {} cells",
                    measured.len(),
                    slots.len()
                );
                vec![Err(CellStatus::Failed { error, stderr_tail: String::new() }); slots.len()]
            }
            Execution::FailedIn { cell, status } if slots.len() > 1 => {
                return self.measure_without(process, &cell, status)
            }
            Execution::Failed(_) if slots.len() > 1 => return self.measure_apart(&slots),
            Execution::Failed(status) | Execution::FailedIn { status, .. } => vec![Err(status)],
            // The file on disk already holds every finished process; this one is not recorded.
            Execution::Interrupted(signal) => {
                return Err(Error::Interrupted { signal, results: self.path.to_owned() })
            }
        };
        self.record_outcomes(&slots, outcomes)
    }

    /// Records `outcomes`, those of the processes of `slots`, summarises their cells, tells the
    /// observer, and writes the results.
    fn record_outcomes(&mut self, slots: &[Slot], outcomes: Vec<Outcome>) -> Result<(), Error> {
        for (slot, outcome) in slots.iter().zip(outcomes) {
            record(&mut self.results, self.spec, slot, outcome);
        }
        let cells: Vec<&CellResult> = slots
            .iter()
            .filter_map(|s| self.results.cells.iter().find(|c| c.key == self.spec.plan.cells[s.cell].key))
            .collect();
        self.observer.process_finished(&cells);
        refresh_derived(&mut self.results);
        store::save(&self.results, self.path)?;
        self.observer.results_written(self.path);
        Ok(())
    }

    /// Records that the arm of cell `culprit` (an id) failed with `status`, its process having died
    /// while working on its side, and runs the process's other cells again in one process; where
    /// `culprit` is not one of its arms (the reference), each of its cells in a process of its
    /// own ([`Self::measure_apart`]).
    fn measure_without(
        &mut self,
        process: &ProcessSlots,
        culprit: &str,
        status: CellStatus,
    ) -> Result<(), Error> {
        let id = |slot: &Slot| self.spec.plan.cells[slot.cell].key.id();
        let Some(failed) = process.arms.iter().copied().find(|s| id(s) == culprit) else {
            let slots: Vec<Slot> = process.slots().copied().collect();
            return self.measure_apart(&slots);
        };
        self.record_outcomes(&[failed], vec![Err(status)])?;
        let arms: Vec<Slot> = process.arms.iter().copied().filter(|s| *s != failed).collect();
        let rest = match (arms.is_empty(), process.reference) {
            (true, Some(reference)) => ProcessSlots { arms: vec![reference], reference: None },
            (true, None) => return Ok(()),
            (false, reference) => ProcessSlots { arms, reference },
        };
        let keys = self.keys(&rest);
        self.observer.process_started(0, 0, &keys, failed.round);
        self.measure(&rest)
    }

    /// Runs each of `slots` (a failed multi-arm process's: its arms, then its reference) in a
    /// process of its own, the arms still paired with their reference.
    fn measure_apart(&mut self, slots: &[Slot]) -> Result<(), Error> {
        for slot in slots {
            let process = ProcessSlots { arms: vec![*slot], reference: None };
            let keys = self.keys(&process);
            self.observer.process_started(0, 0, &keys, slot.round);
            self.measure(&process)?;
        }
        Ok(())
    }
}

/// Records `outcome`, the process of `slot`, in its cell of `results`, and summarises the cell.
fn record(results: &mut Results, spec: &RunSpec, slot: &Slot, outcome: Outcome) {
    let cell = cell_mut(&mut results.cells, &spec.plan, slot.cell);
    match outcome {
        Ok(mut process) => {
            process.position = slot.position;
            cell.processes.retain(|p| p.round != slot.round);
            cell.processes.push(process);
            cell.processes.sort_by_key(|p| p.round);
            cell.status = CellStatus::Ok;
        }
        Err(status) => {
            // A cell found not applicable is so as a whole: rounds it measured before are dropped.
            if matches!(status, CellStatus::NotApplicable { .. }) {
                cell.processes.clear();
            }
            cell.status = status;
        }
    }
    summarise_cell(cell, &spec.system);
}

/// Whether the process of `slot` records a profiler trace: when the run traces its cell and this
/// is its first measured process (round 0, not a warm-up).
fn traced(spec: &RunSpec, slot: &Slot) -> bool {
    let key = &spec.plan.cells[slot.cell].key;
    spec.trace.as_ref().is_some_and(|glob| glob.traces(key)) && slot.round == 0 && !slot.is_warmup()
}

/// The schedule's processes still to run: measured ones not yet in `results`, and the warm-up of
/// a workload's round while any of that workload's processes in the round is pending.
fn pending_slots(spec: &RunSpec, results: &Results) -> Vec<Slot> {
    let protocol = &spec.info.protocol;
    let schedule = spec.plan.schedule(protocol.rounds, protocol.order_seed.unwrap_or(0));
    let todo = |s: &Slot| !is_done(&results.cells, &spec.plan.cells[s.cell].key, s.round);
    let workload = |s: &Slot| spec.plan.cells[s.cell].key.workload;
    let pending: Vec<(WorkloadId, usize)> =
        schedule.iter().filter(|s| !s.is_warmup() && todo(s)).map(|s| (workload(s), s.round)).collect();
    schedule
        .into_iter()
        .filter(|s| if s.is_warmup() { pending.contains(&(workload(s), s.round)) } else { todo(s) })
        .collect()
}

/// Where the process of `arms` and `reference` writes the profiler traces of the members the run
/// traces in their slots ([`traced`]); `None` where it traces none.
fn trace_targets(spec: &RunSpec, arms: &[Slot], reference: Option<Slot>) -> Option<TraceTargets> {
    let cells: Vec<CellId> = arms
        .iter()
        .chain(&reference)
        .filter(|s| traced(spec, s))
        .map(|s| spec.plan.cells[s.cell].key.id())
        .collect();
    (!cells.is_empty()).then(|| TraceTargets { results_dir: spec.out_dir.clone(), cells })
}

/// The job of the process of `arms` (slots of one round; their cells paired with one reference
/// when there are several) and of `reference`, the slot of that reference cell when the process
/// measures it too: with the traces to record of its members the run traces in these slots
/// ([`trace_targets`]).
fn job_for(spec: &RunSpec, arms: &[Slot], reference: Option<Slot>) -> CellJob {
    let slot = arms[0];
    let key = &spec.plan.cells[slot.cell].key;
    let paired = spec.info.protocol.pairing == MeasurementDesign::Paired && !slot.is_warmup();
    CellJob {
        key: key.clone(),
        device: spec.info.device,
        profile: spec.info.profile,
        data_dir: spec.data_dir.clone(),
        round: slot.round,
        images: spec.images.clone(),
        text: spec.text.clone(),
        memory_budget_bytes: spec.info.protocol.memory_budget_bytes,
        super_convergence: spec.info.design.trains_super_convergence(),
        protocol: Some(spec.info.protocol.clone()),
        family_settings: spec
            .info
            .profile_settings
            .families
            .iter()
            .find(|s| s.family == key.workload.family())
            .cloned(),
        trace: trace_targets(spec, arms, reference),
        paired_with: paired.then(|| spec.plan.paired_reference(slot.cell, spec.info.design)).flatten(),
        arms: arms[1..].iter().map(|s| spec.plan.cells[s.cell].key.clone()).collect(),
        measures_reference: reference.is_some(),
        python: spec.python.clone(),
        pytorch_server: spec.pytorch_server.clone(),
        model_dir: (key.workload == WorkloadId::Model).then(|| spec.model_dir.clone()).flatten(),
    }
}

/// A fresh results value with the not-applicable cells filled in, or the existing one to resume
/// (with the not-applicable cells of this plan added, and unfinished until it ends) with the time
/// it had finished at. Cells the file holds beyond this plan are kept: a run in phases (probes,
/// ablation, stack) resumes one phase at a time.
fn initial_results(spec: &RunSpec, path: &Path) -> Result<(Results, Option<String>), Error> {
    if spec.resume && path.exists() {
        let existing = store::load(path)?;
        let differing = differences(&existing.run, &spec.info);
        if !differing.is_empty() {
            return Err(Error::Invalid(format!(
                "--resume: {} was written by a different run (its {} differ); use the same flags and \
                 profile file as the original run or a new --out",
                path.display(),
                differing.join(", ")
            )));
        }
        let finished_at = existing.run.finished_at.clone();
        let mut results = Results { run: RunInfo { finished_at: None, ..existing.run }, ..existing };
        for planned in &spec.plan.cells {
            if let Some(reason) = &planned.not_applicable {
                if !results.cells.iter().any(|c| c.key == planned.key) {
                    let status = CellStatus::NotApplicable { reason: reason.clone(), when_run: false };
                    results.cells.push(CellResult::new(planned.key.clone(), status));
                }
            }
        }
        return Ok((results, finished_at));
    }
    if !spec.resume && path.exists() {
        return Err(Error::Invalid(format!(
            "{} already exists; pass --resume to continue that run or choose another --out",
            path.display()
        )));
    }
    let cells = spec
        .plan
        .cells
        .iter()
        .filter_map(|planned| {
            planned.not_applicable.as_ref().map(|reason| {
                CellResult::new(
                    planned.key.clone(),
                    CellStatus::NotApplicable { reason: reason.clone(), when_run: false },
                )
            })
        })
        .collect();
    let results = Results {
        schema_version: crate::results::schema::SCHEMA_VERSION,
        run: spec.info.clone(),
        system: spec.system.clone(),
        cells,
        comparisons: Vec::new(),
        time_to_accuracy: Vec::new(),
        noise_floors: Vec::new(),
        speedrun: Vec::new(),
        factorial: Vec::new(),
    };
    Ok((results, None))
}

/// What of `existing` a run described by `info` would measure differently: the profile, design,
/// device, protocol, settings of the families, shard, or the user's model (a file that changed
/// since the run began would mix two networks).
fn differences(existing: &RunInfo, info: &RunInfo) -> Vec<&'static str> {
    [
        ("profile", existing.profile == info.profile),
        ("design", existing.design == info.design),
        ("device", existing.device == info.device),
        ("protocol", existing.protocol == info.protocol),
        ("settings", existing.profile_settings.families == info.profile_settings.families),
        ("shard", existing.shard == info.shard),
        ("model", existing.model == info.model),
    ]
    .into_iter()
    .filter_map(|(what, same)| (!same).then_some(what))
    .collect()
}

/// Whether round `round` of cell `key` is already measured (or the cell cannot run at all, or
/// the sequential rule has stopped it).
fn is_done(cells: &[CellResult], key: &CellKey, round: usize) -> bool {
    cells.iter().any(|c| {
        c.key == *key
            && (c.status != CellStatus::Ok
                || c.decided.is_some()
                || c.processes.iter().any(|p| p.round == round))
    })
}

/// Whether cell `key` has ended in a status other than `Ok` (its later rounds are skipped).
fn finished_unsuccessfully(cells: &[CellResult], key: &CellKey) -> bool {
    cells.iter().any(|c| c.key == *key && c.status != CellStatus::Ok)
}

/// The result entry of planned cell `index`, created (in plan order) if it does not exist yet.
fn cell_mut<'a>(cells: &'a mut Vec<CellResult>, plan: &Plan, index: usize) -> &'a mut CellResult {
    let key = &plan.cells[index].key;
    let position = match cells.iter().position(|c| c.key == *key) {
        Some(p) => p,
        None => {
            let plan_position =
                |cell: &CellKey| plan.cells.iter().position(|c| c.key == *cell).unwrap_or(usize::MAX);
            let insert_at = cells.iter().position(|c| plan_position(&c.key) > index).unwrap_or(cells.len());
            cells.insert(insert_at, CellResult::new(key.clone(), CellStatus::Ok));
            insert_at
        }
    };
    &mut cells[position]
}
