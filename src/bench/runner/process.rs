//! The real cell executor: each cell in a fresh `trickbench cell` child process, in its own
//! process group, with a timeout, an optional memory cap and death with the parent, its stderr
//! kept by a [`StderrTail`].

use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use wait_timeout::ChildExt;

use super::stderr::{StderrSummary, StderrTail};
use super::{CellExecutor, Execution};
use crate::bench::cell::{CellJob, Outcome};
use crate::bench::cell_process::NOT_APPLICABLE_STATUS;
use crate::bench::interrupt::Interrupt;
use crate::error::signal_name;
use crate::error::Error;
use crate::measure::host_allocator::HostAllocator;
use crate::results::schema::CellStatus;

/// Where a child's stderr lines (progress of time-to-accuracy cells) are forwarded.
pub type LineSink = std::sync::Arc<dyn Fn(&str) + Send + Sync>;

/// How often a waiting executor looks at the interrupt.
const INTERRUPT_POLL: Duration = Duration::from_millis(50);

/// How long a cell process that died of SIGINT or SIGTERM waits for the same signal to reach the
/// run, whose copy a scheduler sends microseconds later.
const SHARED_SIGNAL_GRACE: Duration = Duration::from_secs(1);

/// Runs each cell in a fresh `trickbench cell` process, so global state (cuDNN autotuner cache,
/// allocator, TF32 flags) cannot leak between cells and a crash only costs that cell.
#[derive(Clone)]
pub struct ProcessExecutor {
    program: PathBuf,
    scratch_dir: PathBuf,
    stderr_lines: Option<LineSink>,
    memory_limit_bytes: Option<u64>,
    host_allocator: HostAllocator,
    interrupt: Interrupt,
}

impl std::fmt::Debug for ProcessExecutor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ProcessExecutor")
            .field("program", &self.program)
            .field("scratch_dir", &self.scratch_dir)
            .field("forwards_stderr", &self.stderr_lines.is_some())
            .field("memory_limit_bytes", &self.memory_limit_bytes)
            .field("host_allocator", &self.host_allocator)
            .field("interrupt", &self.interrupt)
            .finish()
    }
}

impl ProcessExecutor {
    /// An executor that runs `program cell …`, keeping job and output files in `scratch_dir`.
    pub fn new(program: PathBuf, scratch_dir: PathBuf) -> Self {
        Self {
            program,
            scratch_dir,
            stderr_lines: None,
            memory_limit_bytes: None,
            host_allocator: HostAllocator::Tuned,
            interrupt: Interrupt::new(),
        }
    }

    /// Starts each cell process with `allocator`'s environment ([`HostAllocator::apply`]; by
    /// default [`HostAllocator::Tuned`]).
    pub fn with_host_allocator(mut self, allocator: HostAllocator) -> Self {
        self.host_allocator = allocator;
        self
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

    /// Runs `job` in a child process and says how it ended.
    fn try_execute(&self, job: &CellJob, timeout: Duration) -> Result<Execution, Error> {
        let job_file = self.write_job(job)?;
        let output = job_file.path().with_extension("out.json");
        let started = Instant::now();
        let mut child = self.spawn(job_file.path(), &output)?;
        let stderr = child.stderr.take().expect("stderr is piped");
        let tail = StderrTail::new(self.stderr_lines.clone());
        let reader = std::thread::spawn(move || tail.read_to_end(stderr));
        let ended = self.wait(&mut child, timeout)?;
        if !matches!(ended, Waited::Exited) {
            kill_group(&mut child);
        }
        let status = child.wait().map_err(|e| Error::io(&self.program, e))?;
        let ended = match ended {
            Waited::Exited => self.stopped_with_the_run(status).map_or(Waited::Exited, Waited::Interrupted),
            other => other,
        };
        let stderr = reader.join().unwrap_or_default();
        let result = match ended {
            Waited::Interrupted(signal) => Execution::Interrupted(signal),
            Waited::TimedOut => {
                let status = CellStatus::Timeout { limit_s: timeout.as_secs_f64(), stderr_tail: stderr.tail };
                failed_in(stderr.working_on, status)
            }
            Waited::Exited => outcome(status, started.elapsed(), &output, stderr),
        };
        let _ = std::fs::remove_file(&output);
        Ok(result)
    }

    /// Writes `job` to a fresh file in the scratch directory (removed when the handle drops).
    fn write_job(&self, job: &CellJob) -> Result<tempfile::NamedTempFile, Error> {
        std::fs::create_dir_all(&self.scratch_dir).map_err(|e| Error::io(&self.scratch_dir, e))?;
        let job_file = tempfile::Builder::new()
            .prefix("cell-job-")
            .suffix(".json")
            .tempfile_in(&self.scratch_dir)
            .map_err(|e| Error::io(&self.scratch_dir, e))?;
        let json =
            serde_json::to_vec(job).map_err(|e| Error::Json { path: job_file.path().into(), source: e })?;
        std::fs::write(job_file.path(), json).map_err(|e| Error::io(job_file.path(), e))?;
        Ok(job_file)
    }

    /// Starts `trickbench cell --job JOB --output OUTPUT`, stderr piped.
    fn spawn(&self, job: &Path, output: &Path) -> Result<Child, Error> {
        let mut command = Command::new(&self.program);
        self.host_allocator
            .apply(&mut command)
            .arg("cell")
            .arg("--job")
            .arg(job)
            .arg("--output")
            .arg(output)
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
        command.spawn().map_err(|e| Error::io(&self.program, e))
    }

    /// Waits for `child` until it exits, `timeout` passes or the run is interrupted.
    fn wait(&self, child: &mut Child, timeout: Duration) -> Result<Waited, Error> {
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

    /// The run's interrupt, when a cell process that ended with `status` was stopped by the
    /// signal that stops the run. A batch scheduler (Slurm's `scancel` or time limit) sends
    /// SIGTERM to every process of the job, and the cell process, killed by it first, may be
    /// seen dead before the run's own handler has noted the same signal: a cell process that died
    /// of SIGINT or SIGTERM waits up to [`SHARED_SIGNAL_GRACE`] for the interrupt, and is then
    /// an interruption (not recorded, run again by `--resume`) rather than a failed cell.
    fn stopped_with_the_run(&self, status: ExitStatus) -> Option<i32> {
        use std::os::unix::process::ExitStatusExt;
        if !matches!(status.signal(), Some(libc::SIGINT | libc::SIGTERM)) {
            return None;
        }
        let deadline = Instant::now() + SHARED_SIGNAL_GRACE;
        loop {
            if let Some(signal) = self.interrupt.signal() {
                return Some(signal);
            }
            if Instant::now() >= deadline {
                return None;
            }
            std::thread::sleep(INTERRUPT_POLL);
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

/// How waiting for a cell process ended.
enum Waited {
    /// The process exited by itself.
    Exited,
    /// The cell timeout passed.
    TimedOut,
    /// The run was interrupted by this signal.
    Interrupted(i32),
}

/// What a process that exited by itself after `elapsed` measured: the measurement in `output`
/// when it succeeded, else not applicable (with the reason its stderr gave) when it exited with
/// [`NOT_APPLICABLE_STATUS`], else out of memory when its stderr said so, else how it ended.
fn outcome(status: ExitStatus, elapsed: Duration, output: &Path, stderr: StderrSummary) -> Execution {
    let StderrSummary { tail, out_of_memory, not_applicable, working_on } = stderr;
    if status.success() {
        return match read_measurement(output) {
            Ok(measurements) => Execution::Measured(measurements),
            Err(e) => Execution::Failed(CellStatus::Failed { error: e.to_string(), stderr_tail: tail }),
        };
    }
    if status.code() == Some(i32::from(NOT_APPLICABLE_STATUS)) {
        let reason = not_applicable.unwrap_or_else(|| {
            format!("the cell process exited with status {NOT_APPLICABLE_STATUS} (not applicable) without a reason")
        });
        return failed_in(working_on, CellStatus::NotApplicable { reason, when_run: true });
    }
    failed_in(
        working_on,
        match out_of_memory {
            Some(line) => CellStatus::OutOfMemory { error: line, stderr_tail: tail },
            None => CellStatus::Failed { error: describe_exit(status, elapsed), stderr_tail: tail },
        },
    )
}

/// A process that failed with `status`, while working on the side of cell `working_on` where its
/// last announcement named one.
fn failed_in(working_on: Option<String>, status: CellStatus) -> Execution {
    match working_on {
        Some(cell) => Execution::FailedIn { cell, status },
        None => Execution::Failed(status),
    }
}

/// What a cell process wrote to `output`: what became of each cell of its job.
fn read_measurement(output: &Path) -> Result<Vec<Outcome>, Error> {
    let bytes = std::fs::read(output).map_err(|e| Error::io(output, e))?;
    serde_json::from_slice(&bytes).map_err(|e| Error::Json { path: output.to_path_buf(), source: e })
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
fn kill_group(child: &mut Child) {
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

/// How a child ended, in words.
fn describe_exit(status: ExitStatus, after: Duration) -> String {
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

#[cfg(test)]
mod tests {
    use std::os::unix::process::ExitStatusExt;

    use super::*;

    /// The exit status of a process that exited with `code`.
    fn exited(code: i32) -> ExitStatus {
        ExitStatus::from_raw(code << 8)
    }

    #[test]
    fn a_process_exiting_as_not_applicable_makes_its_cell_not_applicable_with_its_reason() {
        let output = Path::new("/nonexistent/cell.out.json");
        let stderr = |reason: Option<&str>| StderrSummary {
            tail: "error: cell x: not applicable: sdpa-flash: no kernel".to_owned(),
            out_of_memory: None,
            not_applicable: reason.map(str::to_owned),
            working_on: None,
        };
        let status =
            |code, reason| match outcome(exited(code), Duration::from_secs(1), output, stderr(reason)) {
                Execution::Failed(status) => status,
                other => panic!("expected a status, got {other:?}"),
            };
        let reason = Some("sdpa-flash: no kernel");
        let expected =
            CellStatus::NotApplicable { reason: "sdpa-flash: no kernel".to_owned(), when_run: true };
        assert_eq!(status(i32::from(NOT_APPLICABLE_STATUS), reason), expected);
        let CellStatus::NotApplicable { reason, .. } = status(i32::from(NOT_APPLICABLE_STATUS), None) else {
            panic!("status 4 without a reason line is still not applicable")
        };
        assert!(reason.contains("without a reason"), "{reason}");
        assert!(
            matches!(status(1, Some("ignored")), CellStatus::Failed { .. }),
            "only its own status counts"
        );
    }
}
