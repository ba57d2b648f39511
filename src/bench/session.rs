//! A whole run from a checked [`RunConfig`]: its inputs, plan requests and record, the shard it
//! runs, the cell processes' executor, the lock on its output folder, and each workload's design
//! phases in turn, all measured into one results file; what each workload's results say is the
//! caller's to word, through a [`Presenter`].

use std::path::{Path, PathBuf};

use crate::bench::config::RunConfig;
use crate::bench::design::{Design, Phases};
use crate::bench::engines::{cell_engine, RunServer};
use crate::bench::inputs::resolve_inputs;
use crate::bench::interrupt::Interrupt;
use crate::bench::lock::{Locked, OutputLock};
use crate::bench::plan::{Plan, PlanRequest};
use crate::bench::processes;
use crate::bench::progress::Progress;
use crate::bench::runner::{self, ProcessExecutor, RunSpec, RESULTS_FILE};
use crate::bench::shard::shard_record;
use crate::bench::speedrun::{load_evidence, Evidence};
use crate::bench::user_model::{Preparation, PreparedModel, DEFAULT_IMAGE_SIZE};
use crate::engine::probe_python;
use crate::error::Error;
use crate::results::model::UserModel;
use crate::results::rehearsal::Rehearsed;
use crate::results::schema::{profile_text, CellResult, Results, SpeedrunChoice};
use crate::results::system::SystemInfo;
use crate::terminal::Terminal;
use crate::workloads::{Family, WorkloadId};

/// Where the cell processes' job and output files are kept, inside the output folder.
const SCRATCH_DIR: &str = ".cells";

/// A run that has measured every cell it could.
#[derive(Debug)]
pub struct FinishedRun {
    /// The final results (also in `out_dir`'s results file).
    pub results: Results,
    /// The output folder.
    pub out_dir: PathBuf,
    /// The workloads whose tables were shown while the run ran.
    pub shown: Vec<WorkloadId>,
    /// The output folder's lock, held until this value drops (through the report).
    pub lock: Option<OutputLock>,
}

/// What a run shows of its results while it runs. The benchmark measures; the caller, above it,
/// words what was measured (the binary's terminal summary).
pub trait Presenter {
    /// The text printed as soon as `workload` is measured, before the run goes on to the next
    /// workloads, fitted to `terminal`; `None` (what a presenter says unless it says otherwise)
    /// prints nothing there and leaves the workload to what the caller shows after the run.
    fn workload_measured(
        &mut self,
        _results: &Results,
        _workload: WorkloadId,
        _terminal: Terminal,
    ) -> Option<String> {
        None
    }
}

impl FinishedRun {
    /// The results file.
    pub fn results_path(&self) -> PathBuf {
        self.out_dir.join(RESULTS_FILE)
    }
}

/// Runs `config`, each cell in a process of `program` (the trickbench binary), telling the user
/// through `progress` what it does, and what each workload measured in the words of `presenter`.
pub fn run(
    config: &RunConfig,
    program: PathBuf,
    progress: &mut Progress,
    presenter: &mut dyn Presenter,
) -> Result<FinishedRun, Error> {
    let design = config.request.design;
    let spec = config.request.model.as_deref();
    let workload_ids: Vec<&str> = config
        .workloads
        .iter()
        .map(|w| if *w == WorkloadId::Model { spec.unwrap_or("model") } else { w.id() })
        .collect();
    progress.note(&format!(
        "trickbench run: {} · {design} design · {} · {}",
        profile_text(config.profile.id(), config.profile_reason.as_deref()),
        config.device,
        workload_ids.join(", ")
    ));
    progress.note(&format!("note: {}", config.request.host_allocator.description()));
    if let Some(why) = &config.engine_reason {
        progress.note(&format!("note: {why}"));
    }
    let evidence = load_evidence("--from", &config.request.from, config.device)?;
    // Before anything is written: a bad SPEC ends the run here, its prepared files gone with it.
    let prepared = prepare_model(config, progress)?;
    let model = prepared.as_ref().map(|p| &p.model);
    let inputs = resolve_inputs(config, model, &|line| progress.note(line))?;
    let requests = config.plan_requests(inputs.text.missing(), model)?;
    if let Some(glob) = &config.request.trace {
        glob.check(&design.known_plan(&requests))?;
    }
    let started = chrono::Utc::now();
    let id = format!("{}-{}-{design}", started.format("%Y%m%d-%H%M%S"), config.profile);
    let out_dir = config.request.out.clone().unwrap_or_else(|| PathBuf::from("reports/runs").join(&id));
    let id = out_dir.file_name().map_or(id, |n| n.to_string_lossy().into_owned());
    let mut info = config.run_info(id, started, inputs.data, inputs.more_data);
    info.model = model.cloned();
    if let Some(shard) = config.request.shard {
        let record = shard_record(shard, &info, &config.workloads, &design.known_plan(&requests))?;
        let units = record.units_of(shard.index).len();
        progress.note(&format!(
            "note: shard {shard} holds {units} of the plan's {} units (plan fingerprint {})",
            record.units.len(),
            &record.fingerprint[..12]
        ));
        info.shard = Some(record);
    }
    // Before any cell: a server that cannot start ends the run with nothing measured.
    let servers = start_servers(config)?;
    let spec = RunSpec {
        info,
        system: SystemInfo { pytorch: config.pytorch.clone(), ..SystemInfo::collect(config.device) },
        plan: Plan { cells: Vec::new() },
        data_dir: inputs.data_dir,
        images: config.request.inputs.images.clone(),
        text: inputs.text.path().map(Path::to_path_buf),
        out_dir: out_dir.clone(),
        resume: config.request.resume,
        interrupt: Interrupt::new(),
        trace: config.request.trace.clone(),
        speedrun: Vec::new(),
        python: Some(config.python.clone()),
        pytorch_server: servers.first().map(|s| s.socket().to_path_buf()),
        model_dir: prepared.as_ref().map(PreparedModel::dir),
    };
    let mut executor = ProcessExecutor::new(program, out_dir.join(SCRATCH_DIR))
        .with_host_allocator(config.request.host_allocator)
        .with_stderr_lines(progress.child_lines())
        .with_interrupt(spec.interrupt.clone());
    if let Some(mib) = config.request.memory_limit_mib {
        executor = executor.with_memory_limit(mib << 20);
    }
    let lock = hold_output(&out_dir)?;
    spec.interrupt.catch_signals()?;
    let mut session =
        Session { spec, executor, progress, presenter, results: None, evidence, _servers: servers };
    let (processes, cells) = session.planned(&requests, design);
    session.progress.note(&format!(
        "plan: {cells} cells in {processes} cell processes (multi-arm processes, rounds and warm-ups \
         counted; phases that depend on earlier results not yet); the time left shows once the first \
         processes have measured this machine's pace"
    ));
    let shown = session.run_requests(&requests, design)?;
    session.progress.finish();
    let results = session.results.ok_or_else(no_results)?;
    let _ = std::fs::remove_dir(out_dir.join(SCRATCH_DIR));
    Ok(FinishedRun { results, out_dir, shown, lock })
}

/// Starts what each engine of `config` keeps running for the whole run: the PyTorch engine's fork
/// server, whose socket the cell processes are handed (a job's `pytorch_server`).
fn start_servers(config: &RunConfig) -> Result<Vec<Box<dyn RunServer>>, Error> {
    let mut servers = Vec::new();
    for &engine in &config.engines {
        servers.extend(cell_engine(engine).start_run(&config.python, config.request.host_allocator)?);
    }
    Ok(servers)
}

/// Prepares the user's model of `config` (`run --model`), if it has one, in a temporary folder
/// that lives as long as the returned value, with the Python of the PyTorch engine: its
/// description, weights, batches and TorchScript export. A bad SPEC fails here, before anything is
/// measured or written.
fn prepare_model(config: &RunConfig, progress: &mut Progress) -> Result<Option<PreparedModel>, Error> {
    let Some(spec) = &config.request.model else {
        return Ok(None);
    };
    if config.pytorch.is_none() {
        probe_python(&config.python).map_err(|why| {
            Error::Invalid(format!(
                "--model {spec}: your model is built by a Python with torch, and {why} (pass --python PATH, or run \
                 `make setup` for .venv/bin/python)"
            ))
        })?;
    }
    progress.note(&format!("preparing {spec}: building it, its batches and its TorchScript export"));
    let preparation = Preparation {
        spec: spec.clone(),
        python: config.python.clone(),
        batch_size: config.batch_size(Family::UserModel)?,
        image_size: config.request.image_size.unwrap_or(DEFAULT_IMAGE_SIZE),
        seed: config.request.seed,
    };
    let prepared = preparation.prepare_temporary()?;
    progress.note(&model_line(&prepared.model));
    Ok(Some(prepared))
}

/// The user's model in one line: its class, parameters, FLOPs and export.
fn model_line(model: &UserModel) -> String {
    let flops = model
        .flops_per_sample
        .map_or_else(String::new, |f| format!(", {:.3} GFLOPs a sample forward", f / 1e9));
    let export = match model.export.method {
        Some(method) => format!("exported to TorchScript by {}", method.name()),
        None => "not exported: measured on the PyTorch engine only".to_owned(),
    };
    format!(
        "model: {} ({}, {:.2} M parameters{flops}), {export}",
        model.name,
        model.class,
        model.parameters as f64 / 1e6
    )
}

/// Locks `out_dir` for as long as the returned lock lives, so that a second run (or merge) into
/// it is refused; says so on stderr when it takes over the lock of a run that did not end
/// cleanly, or when the folder's file system cannot lock.
pub fn hold_output(out_dir: &Path) -> Result<Option<OutputLock>, Error> {
    match OutputLock::acquire(out_dir)? {
        Locked::Held { lock, previous } => {
            if let Some(previous) = previous {
                eprintln!(
                    "note: {} was left by a run that ended without releasing it ({previous}); taking it over",
                    lock.path().display()
                );
            }
            Ok(Some(lock))
        }
        Locked::Unsupported { path, source } => {
            eprintln!(
                "warning: {}: cannot lock ({source}); nothing stops another run from writing into {} at the \
                 same time",
                path.display(),
                out_dir.display()
            );
            Ok(None)
        }
    }
}

/// The error a run or a merge ends with when any of its cells did not measure (its own exit
/// status, apart from bad usage), after everything was written: on a rehearsal of a GPU run, also
/// when an engine refused a case the plan made ([`Rehearsed::Refused`]).
pub fn refuse_failed_cells(results: &Results, out_dir: &Path) -> Result<(), Error> {
    let refused = |c: &&CellResult| c.failed() || matches!(c.rehearsed(), Some(Rehearsed::Refused(_)));
    let rehearsal = results.run.device.rehearsed().is_some();
    match results.cells.iter().filter(|c| if rehearsal { refused(c) } else { c.failed() }).count() {
        0 => Ok(()),
        failed => Err(Error::CellsFailed {
            failed,
            cells: results.cells.len(),
            results: out_dir.join(RESULTS_FILE),
        }),
    }
}

/// The error for results asked for before any cell has run.
fn no_results() -> Error {
    Error::Invalid("no cell has run yet".to_owned())
}

/// A run in phases (probes, then the main plan, then the stack), each a plan that extends the
/// cells of the phases before it, all in one results file.
struct Session<'a> {
    spec: RunSpec,
    executor: ProcessExecutor,
    progress: &'a mut Progress,
    /// What words each workload's results as soon as it is measured.
    presenter: &'a mut dyn Presenter,
    results: Option<Results>,
    /// The `--from` files the speedrun design takes the tricks' effects from.
    evidence: Vec<Evidence>,
    /// What the run's engines keep running while the session lives.
    _servers: Vec<Box<dyn RunServer>>,
}

impl Session<'_> {
    /// Runs every request in turn. Each workload's text from the presenter is printed as soon as it
    /// is measured, with an estimate of what the rest will take; returns the workloads whose texts
    /// were shown.
    fn run_requests(&mut self, requests: &[PlanRequest], design: Design) -> Result<Vec<WorkloadId>, Error> {
        let mut shown = Vec::new();
        for (i, request) in requests.iter().enumerate() {
            let train_samples = self.spec.info.data.train_samples;
            design.run_phases(self, request, train_samples)?;
            let rest = &requests[i + 1..];
            if rest.is_empty() {
                break;
            }
            let results = self.results.as_ref().ok_or_else(no_results)?;
            for &workload in &request.workloads {
                let text = self.presenter.workload_measured(results, workload, self.progress.terminal());
                if let Some(text) = text {
                    self.progress.table(&text);
                    shown.push(workload);
                }
            }
            let (processes, _) = self.planned(rest, design);
            let names: Vec<String> = rest.iter().flat_map(|r| &r.workloads).map(|w| w.to_string()).collect();
            let estimate = self
                .progress
                .time_for(processes)
                .map_or_else(String::new, |t| format!(", {t} at this run's pace"));
            self.progress.note(&format!("next: {}, {processes} cell processes{estimate}", names.join(", ")));
        }
        Ok(shown)
    }
}

impl Session<'_> {
    /// The cell processes and the cells of the plan `design` knows for `requests` before it runs
    /// ([`Design::known_plan`]), grouped as the runner groups them ([`processes::group`]).
    fn planned(&self, requests: &[PlanRequest], design: Design) -> (usize, usize) {
        let protocol = &self.spec.info.protocol;
        let plan = design.known_plan(requests);
        let slots = plan.schedule(protocol.rounds, protocol.order_seed.unwrap_or(0));
        let processes = processes::group(&plan, &slots, design, protocol.multi_arm()).len();
        (processes, plan.cells.iter().filter(|c| c.not_applicable.is_none()).count())
    }
}

impl Phases for Session<'_> {
    fn run(&mut self, plan: Plan) -> Result<(), Error> {
        self.spec.plan.extend(plan.cells);
        self.progress.begin_phase();
        let results = runner::run(&self.spec, &mut self.executor, self.progress)
            .map_err(|e| e.context(format!("running into {}", self.spec.out_dir.display())))?;
        self.spec.resume = true;
        self.results = Some(results);
        Ok(())
    }

    fn results(&self) -> Result<&Results, Error> {
        self.results.as_ref().ok_or_else(no_results)
    }

    fn note(&self, line: &str) {
        self.progress.note(line);
    }

    fn evidence(&self) -> &[Evidence] {
        &self.evidence
    }

    fn record(&mut self, choice: SpeedrunChoice) {
        self.spec.speedrun.retain(|c| (c.workload, c.engine) != (choice.workload, choice.engine));
        self.spec.speedrun.push(choice);
    }
}
