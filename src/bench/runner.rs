//! Executes a plan: one child process per cell and round, with a timeout and optionally a memory
//! cap, the results file rewritten atomically after every process, SIGINT/SIGTERM stopping the
//! current process without recording it, and `--resume` skipping what is already measured.

use std::io::Read;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use wait_timeout::ChildExt;

use crate::bench::cell::CellJob;
use crate::bench::interrupt::{signal_name, Interrupt};
use crate::bench::plan::{Plan, Slot};
use crate::error::Error;
use crate::results::analysis::{refresh_derived, summarise_cell};
use crate::results::schema::{CellKey, CellResult, CellStatus, ProcessMeasurement, Results, RunInfo};
use crate::results::store;
use crate::results::system::SystemInfo;
use crate::workloads::WorkloadId;

/// The name of the results file inside a run directory.
pub const RESULTS_FILE: &str = "results.json";

/// How one cell process ended.
#[derive(Debug, Clone, PartialEq)]
pub enum Execution {
    /// It measured.
    Measured(Box<ProcessMeasurement>),
    /// It did not; the status says how it ended.
    Failed(CellStatus),
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
    /// A process of `cell` in `round` is about to start; `done` of `total` processes have
    /// finished.
    fn process_started(&mut self, _done: usize, _total: usize, _cell: &CellKey, _round: usize) {}
    /// A round's warm-up process (of `cell`, its measurement discarded) is about to start; `done`
    /// of `total` processes have finished.
    fn warmup_started(&mut self, _done: usize, _total: usize, _cell: &CellKey, _round: usize) {}
    /// A cell process has finished and its cell's results are updated.
    fn process_finished(&mut self, _cell: &CellResult) {}
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
            this_shard =
                RunSpec { plan: record.part_of(&spec.plan, spec.info.design.parse()?), ..spec.clone() };
            &this_shard
        }
        None => spec,
    };
    let mut results = initial_results(spec, &path)?;
    let timeout = Duration::from_secs_f64(spec.info.protocol.cell_timeout_s);
    let pending = pending_slots(spec, &results);
    store::save(&results, &path)?;
    for (n, slot) in pending.iter().enumerate() {
        let key = &spec.plan.cells[slot.cell].key;
        let id = key.id();
        if finished_unsuccessfully(&results.cells, &id) {
            continue;
        }
        if let Some(signal) = spec.interrupt.signal() {
            return Err(Error::Interrupted { signal, results: path });
        }
        let job = job_for(spec, key, slot.round)?;
        if slot.is_warmup() {
            observer.warmup_started(n, pending.len(), key, slot.round);
            // Only an interruption matters: the measurement is discarded, and a cell that cannot
            // run fails again, recorded, in its own slot.
            if let Execution::Interrupted(signal) = executor.execute(&job, timeout) {
                return Err(Error::Interrupted { signal, results: path });
            }
            continue;
        }
        observer.process_started(n, pending.len(), key, slot.round);
        let outcome = match executor.execute(&job, timeout) {
            Execution::Measured(process) => Ok(process),
            Execution::Failed(status) => Err(status),
            // The file on disk already holds every finished process; this one is not recorded.
            Execution::Interrupted(signal) => return Err(Error::Interrupted { signal, results: path }),
        };
        let cell = cell_mut(&mut results.cells, &spec.plan, slot.cell);
        match outcome {
            Ok(mut process) => {
                process.position = slot.position;
                cell.processes.retain(|p| p.round != slot.round);
                cell.processes.push(*process);
                cell.processes.sort_by_key(|p| p.round);
                cell.status = CellStatus::Ok;
            }
            Err(status) => cell.status = status,
        }
        summarise_cell(cell, &spec.system);
        observer.process_finished(cell);
        refresh_derived(&mut results);
        store::save(&results, &path)?;
        observer.results_written(&path);
    }
    results.run.finished_at = Some(chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Secs, true));
    store::save(&results, &path)?;
    Ok(results)
}

/// The schedule's processes still to run: measured ones not yet in `results`, and the warm-up of
/// a workload's round while any of that workload's processes in the round is pending.
fn pending_slots(spec: &RunSpec, results: &Results) -> Vec<Slot> {
    let protocol = &spec.info.protocol;
    let schedule = spec.plan.schedule(protocol.rounds, protocol.order_seed.unwrap_or(0));
    let todo = |s: &Slot| !is_done(&results.cells, &spec.plan.cells[s.cell].key.id(), s.round);
    let workload = |s: &Slot| spec.plan.cells[s.cell].key.workload;
    let pending: Vec<(WorkloadId, usize)> =
        schedule.iter().filter(|s| !s.is_warmup() && todo(s)).map(|s| (workload(s), s.round)).collect();
    schedule
        .into_iter()
        .filter(|s| if s.is_warmup() { pending.contains(&(workload(s), s.round)) } else { todo(s) })
        .collect()
}

/// The job of the process of cell `key` in `round`.
fn job_for(spec: &RunSpec, key: &CellKey, round: usize) -> Result<CellJob, Error> {
    Ok(CellJob {
        key: key.clone(),
        device: spec.info.device,
        profile: spec.info.profile.parse()?,
        data_dir: spec.data_dir.clone(),
        round,
        images: spec.images.clone(),
        text: spec.text.clone(),
        memory_budget_bytes: spec.info.protocol.memory_budget_bytes,
        super_convergence: spec.info.design == "super-convergence",
        protocol: Some(spec.info.protocol.clone()),
        family_settings: spec
            .info
            .profile_settings
            .families
            .iter()
            .find(|s| s.family == key.workload.family())
            .cloned(),
    })
}

/// A fresh results value with the not-applicable cells filled in, or the existing one to resume
/// (with the not-applicable cells of this plan added). Cells the file holds beyond this plan are
/// kept: a run in phases (probes, ablation, stack) resumes one phase at a time.
fn initial_results(spec: &RunSpec, path: &Path) -> Result<Results, Error> {
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
        let mut results = Results { run: RunInfo { finished_at: None, ..existing.run }, ..existing };
        for planned in &spec.plan.cells {
            if let Some(reason) = &planned.not_applicable {
                if !results.cells.iter().any(|c| c.key == planned.key) {
                    let status = CellStatus::NotApplicable { reason: reason.clone() };
                    results.cells.push(CellResult::new(planned.key.clone(), status));
                }
            }
        }
        return Ok(results);
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
                CellResult::new(planned.key.clone(), CellStatus::NotApplicable { reason: reason.clone() })
            })
        })
        .collect();
    Ok(Results {
        schema_version: crate::results::schema::SCHEMA_VERSION,
        run: spec.info.clone(),
        system: spec.system.clone(),
        cells,
        comparisons: Vec::new(),
        time_to_accuracy: Vec::new(),
        noise_floors: Vec::new(),
    })
}

/// What of `existing` a run described by `info` would measure differently: the profile, design,
/// device, protocol, settings of the families, or shard.
fn differences(existing: &RunInfo, info: &RunInfo) -> Vec<&'static str> {
    [
        ("profile", existing.profile == info.profile),
        ("design", existing.design == info.design),
        ("device", existing.device == info.device),
        ("protocol", existing.protocol == info.protocol),
        ("settings", existing.profile_settings.families == info.profile_settings.families),
        ("shard", existing.shard == info.shard),
    ]
    .into_iter()
    .filter_map(|(what, same)| (!same).then_some(what))
    .collect()
}

/// Whether round `round` of cell `id` is already measured (or the cell cannot run at all).
fn is_done(cells: &[CellResult], id: &str, round: usize) -> bool {
    cells
        .iter()
        .any(|c| c.id == id && (c.status != CellStatus::Ok || c.processes.iter().any(|p| p.round == round)))
}

/// Whether cell `id` has ended in a status other than `Ok` (its later rounds are skipped).
fn finished_unsuccessfully(cells: &[CellResult], id: &str) -> bool {
    cells.iter().any(|c| c.id == id && c.status != CellStatus::Ok)
}

/// The result entry of planned cell `index`, created (in plan order) if it does not exist yet.
fn cell_mut<'a>(cells: &'a mut Vec<CellResult>, plan: &Plan, index: usize) -> &'a mut CellResult {
    let key = &plan.cells[index].key;
    let id = key.id();
    let position = match cells.iter().position(|c| c.id == id) {
        Some(p) => p,
        None => {
            let plan_position =
                |cid: &str| plan.cells.iter().position(|c| c.key.id() == cid).unwrap_or(usize::MAX);
            let insert_at = cells.iter().position(|c| plan_position(&c.id) > index).unwrap_or(cells.len());
            cells.insert(insert_at, CellResult::new(key.clone(), CellStatus::Ok));
            insert_at
        }
    };
    &mut cells[position]
}

/// Runs each cell in a fresh `trickbench cell` process, so global state (cuDNN autotuner cache,
/// allocator, TF32 flags) cannot leak between cells and a crash only costs that cell.
#[derive(Clone)]
pub struct ProcessExecutor {
    program: PathBuf,
    scratch_dir: PathBuf,
    stderr_lines: Option<LineSink>,
    memory_limit_bytes: Option<u64>,
    interrupt: Interrupt,
}

/// Where a child's stderr lines (progress of time-to-accuracy cells) are forwarded.
pub type LineSink = std::sync::Arc<dyn Fn(&str) + Send + Sync>;

impl std::fmt::Debug for ProcessExecutor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ProcessExecutor")
            .field("program", &self.program)
            .field("scratch_dir", &self.scratch_dir)
            .field("forwards_stderr", &self.stderr_lines.is_some())
            .field("memory_limit_bytes", &self.memory_limit_bytes)
            .field("interrupt", &self.interrupt)
            .finish()
    }
}

/// Bytes of a failed child's stderr kept in the results (less the frames of C++ backtraces).
const STDERR_TAIL_BYTES: usize = 4000;

/// How often a waiting executor looks at the interrupt.
const INTERRUPT_POLL: Duration = Duration::from_millis(50);

/// What a process writes to stderr when an allocation fails (lower case): libtorch's CPU and CUDA
/// allocators, the C library, C++'s `new` and Rust's global allocator.
const OUT_OF_MEMORY_MESSAGES: [&str; 5] = [
    "out of memory",
    "can't allocate memory",
    "cannot allocate memory",
    "std::bad_alloc",
    "memory allocation of",
];

impl ProcessExecutor {
    /// An executor that runs `program cell …`, keeping job and output files in `scratch_dir`.
    pub fn new(program: PathBuf, scratch_dir: PathBuf) -> Self {
        Self {
            program,
            scratch_dir,
            stderr_lines: None,
            memory_limit_bytes: None,
            interrupt: Interrupt::new(),
        }
    }

    /// Caps each cell process's data segment (`RLIMIT_DATA`: heap and private writable mappings,
    /// which includes the ≈0.5 GiB libtorch's libraries take when loaded) at `bytes`, so that a
    /// cell that needs more fails to allocate and is recorded as out of memory instead of
    /// swapping the machine or waking the kernel's OOM killer.
    pub fn with_memory_limit(mut self, bytes: u64) -> Self {
        self.memory_limit_bytes = Some(bytes);
        self
    }

    /// Stops the current cell process (its whole process group) as soon as `interrupt` triggers.
    pub fn with_interrupt(mut self, interrupt: Interrupt) -> Self {
        self.interrupt = interrupt;
        self
    }

    /// Forwards every line the child writes to stderr to `sink` as it arrives.
    pub fn with_stderr_lines(mut self, sink: LineSink) -> Self {
        self.stderr_lines = Some(sink);
        self
    }

    fn try_execute(&self, job: &CellJob, timeout: Duration) -> Result<Execution, Error> {
        std::fs::create_dir_all(&self.scratch_dir).map_err(|e| Error::io(&self.scratch_dir, e))?;
        let job_file = tempfile::Builder::new()
            .prefix("cell-job-")
            .suffix(".json")
            .tempfile_in(&self.scratch_dir)
            .map_err(|e| Error::io(&self.scratch_dir, e))?;
        let output = job_file.path().with_extension("out.json");
        let json =
            serde_json::to_vec(job).map_err(|e| Error::Json { path: job_file.path().into(), source: e })?;
        std::fs::write(job_file.path(), json).map_err(|e| Error::io(job_file.path(), e))?;
        let started = Instant::now();
        let mut command = Command::new(&self.program);
        command
            .arg("cell")
            .arg("--job")
            .arg(job_file.path())
            .arg("--output")
            .arg(&output)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            // Its own process group: a Ctrl-C in the terminal reaches only this process, which
            // then stops the child (and anything it started) itself.
            .process_group(0);
        let limit = self.memory_limit_bytes;
        // SAFETY: the closure runs between fork and exec and only makes two system calls, both
        // async-signal-safe; it touches no lock and allocates nothing.
        unsafe {
            command.pre_exec(move || limit_child(limit));
        }
        let mut child = command.spawn().map_err(|e| Error::io(&self.program, e))?;
        let mut stderr = child.stderr.take().expect("stderr is piped");
        let sink = self.stderr_lines.clone();
        let reader = std::thread::spawn(move || {
            let mut tail = Vec::new();
            let mut chunk = [0u8; 4096];
            let mut line = Vec::new();
            // Searched line by line: libtorch follows its allocator's message with a C++
            // backtrace longer than the tail that is kept.
            let mut out_of_memory = None;
            let mut finish_line = |line: &mut Vec<u8>| {
                let text = String::from_utf8_lossy(line);
                if let Some(sink) = &sink {
                    sink(&text);
                }
                if says_out_of_memory(&text) {
                    out_of_memory = Some(text.trim().to_owned());
                }
                // The frames of libtorch's C++ backtraces would crowd the message out of the tail.
                if !text.starts_with("frame #") {
                    tail.extend_from_slice(line);
                    tail.push(b'\n');
                    if tail.len() > 4 * STDERR_TAIL_BYTES {
                        tail.drain(..tail.len() - STDERR_TAIL_BYTES);
                    }
                }
                line.clear();
            };
            while let Ok(n) = stderr.read(&mut chunk) {
                if n == 0 {
                    break;
                }
                for &byte in &chunk[..n] {
                    if byte == b'\n' {
                        finish_line(&mut line);
                    } else {
                        line.push(byte);
                    }
                }
            }
            if !line.is_empty() {
                finish_line(&mut line);
            }
            (tail, out_of_memory)
        });
        let ended = self.wait(&mut child, timeout)?;
        if !matches!(ended, Waited::Exited) {
            kill_group(&mut child);
        }
        let status = child.wait().map_err(|e| Error::io(&self.program, e))?;
        let (stderr, out_of_memory) = reader.join().unwrap_or_default();
        let tail = tail_text(&stderr);
        let timed_out = match ended {
            Waited::Interrupted(signal) => {
                let _ = std::fs::remove_file(&output);
                return Ok(Execution::Interrupted(signal));
            }
            Waited::TimedOut => true,
            Waited::Exited => false,
        };
        let read_output = || -> Result<ProcessMeasurement, Error> {
            let bytes = std::fs::read(&output).map_err(|e| Error::io(&output, e))?;
            serde_json::from_slice(&bytes).map_err(|e| Error::Json { path: output.clone(), source: e })
        };
        let result = if timed_out {
            Execution::Failed(CellStatus::Timeout { limit_s: timeout.as_secs_f64(), stderr_tail: tail })
        } else if status.success() {
            match read_output() {
                Ok(measurement) => Execution::Measured(Box::new(measurement)),
                Err(e) => Execution::Failed(CellStatus::Failed { error: e.to_string(), stderr_tail: tail }),
            }
        } else if let Some(line) = out_of_memory {
            Execution::Failed(CellStatus::OutOfMemory { error: line, stderr_tail: tail })
        } else {
            let how = describe_exit(status, started.elapsed());
            Execution::Failed(CellStatus::Failed { error: how, stderr_tail: tail })
        };
        let _ = std::fs::remove_file(&output);
        Ok(result)
    }

    /// Waits for `child` until it exits, `timeout` passes or the run is interrupted.
    fn wait(&self, child: &mut std::process::Child, timeout: Duration) -> Result<Waited, Error> {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(signal) = self.interrupt.signal() {
                return Ok(Waited::Interrupted(signal));
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Ok(Waited::TimedOut);
            }
            let slice = left.min(INTERRUPT_POLL);
            if child.wait_timeout(slice).map_err(|e| Error::io(&self.program, e))?.is_some() {
                return Ok(Waited::Exited);
            }
        }
    }
}

/// How waiting for a cell process ended.
enum Waited {
    /// The process exited by itself.
    Exited,
    /// The cell timeout passed.
    TimedOut,
    /// The run was interrupted by this signal.
    Interrupted(i32),
}

/// In the child, before exec: the memory cap, and death with the parent (a killed `run` must not
/// leave a cell process training on its own).
fn limit_child(memory_limit_bytes: Option<u64>) -> std::io::Result<()> {
    if let Some(bytes) = memory_limit_bytes {
        let limit = libc::rlimit { rlim_cur: bytes, rlim_max: bytes };
        // SAFETY: setrlimit reads the struct it is given and nothing else.
        if unsafe { libc::setrlimit(libc::RLIMIT_DATA, &limit) } != 0 {
            return Err(std::io::Error::last_os_error());
        }
    }
    // SAFETY: prctl with PR_SET_PDEATHSIG takes a signal number and touches no memory.
    if unsafe { libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

/// Kills a cell process and everything in its process group. An already exited process is fine.
fn kill_group(child: &mut std::process::Child) {
    match libc::pid_t::try_from(child.id()) {
        // SAFETY: killpg only sends a signal; the group is the child's own (`process_group(0)`).
        Ok(group) => unsafe {
            libc::killpg(group, libc::SIGKILL);
        },
        Err(_) => {
            let _ = child.kill();
        }
    }
}

impl CellExecutor for ProcessExecutor {
    fn execute(&mut self, job: &CellJob, timeout: Duration) -> Execution {
        self.try_execute(job, timeout).unwrap_or_else(|e| {
            Execution::Failed(CellStatus::Failed {
                error: format!("could not run the cell process: {e}"),
                stderr_tail: String::new(),
            })
        })
    }
}

/// The last [`STDERR_TAIL_BYTES`] of a child's stderr, as text.
fn tail_text(bytes: &[u8]) -> String {
    let start = bytes.len().saturating_sub(STDERR_TAIL_BYTES);
    String::from_utf8_lossy(&bytes[start..]).trim().to_owned()
}

/// Whether a line a process wrote to stderr says that an allocation failed.
fn says_out_of_memory(line: &str) -> bool {
    let line = line.to_lowercase();
    OUT_OF_MEMORY_MESSAGES.iter().any(|message| line.contains(message))
}

/// How a child ended, in words.
fn describe_exit(status: std::process::ExitStatus, after: Duration) -> String {
    use std::os::unix::process::ExitStatusExt;
    match (status.code(), status.signal()) {
        (Some(code), _) => {
            format!("cell process exited with status {code} after {:.1} s", after.as_secs_f64())
        }
        (None, Some(libc::SIGKILL)) => format!(
            "cell process was killed (signal 9, SIGKILL, possibly the kernel's out-of-memory killer) after {:.1} s",
            after.as_secs_f64()
        ),
        (None, Some(signal)) => format!(
            "cell process died of signal {signal} ({}) after {:.1} s",
            signal_name(signal),
            after.as_secs_f64()
        ),
        (None, None) => "cell process ended without a status".to_owned(),
    }
}
