//! The library's error type.

use std::path::PathBuf;

/// Everything that can go wrong inside the library. I/O errors always name their file.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// libtorch raised an error (through tch or the shim).
    #[error("libtorch: {0}")]
    Torch(String),
    /// Reading or writing a file failed.
    #[error("{}: {source}", path.display())]
    Io {
        /// The file or directory involved.
        path: PathBuf,
        /// The underlying error.
        source: std::io::Error,
    },
    /// A JSON file could not be parsed or written.
    #[error("{}: {source}", path.display())]
    Json {
        /// The file involved.
        path: PathBuf,
        /// The underlying error.
        source: serde_json::Error,
    },
    /// The cell needed more memory than the device has or the memory budget allows.
    #[error("out of memory: {0}")]
    OutOfMemory(String),
    /// The cell cannot run here, found only when it ran: a trick with no kernel for the cell's
    /// inputs (a forced attention backend libtorch or PyTorch finds none for). The reason is one
    /// line; the parent records the cell as not applicable with it.
    #[error("not applicable: {0}")]
    NotApplicable(String),
    /// A value given by the user (flag, name, file content) is not acceptable.
    #[error("{0}")]
    Invalid(String),
    /// A failure of a module with an error type of its own (a dataset file missing or malformed,
    /// the output folder's lock held by another process, shards that do not merge), kept whole:
    /// the binary reads its exit status from it.
    #[error("{0}")]
    Module(#[source] Box<dyn std::error::Error + Send + Sync>),
    /// What failed, in the context of the flag or step named (`--text`, "running into DIR").
    #[error("{context}")]
    Context {
        /// The flag or step.
        context: String,
        /// What failed in it (an [`Error`]).
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
    /// A child process (a side of a parity comparison) failed or ran past its time.
    #[error("{0}")]
    Process(String),
    /// Data-parallel training failed: rendezvous, a collective, or a worker process.
    #[error("distributed: {0}")]
    Distributed(String),
    /// The run was stopped by SIGINT or SIGTERM; the results file holds every cell that finished.
    #[error(
        "interrupted by {}: every finished cell is saved in {}; to run the rest, repeat the command \
         with --resume --out {}",
        signal_name(*signal),
        results.display(),
        results.parent().map_or_else(|| ".".into(), |dir| dir.display().to_string())
    )]
    Interrupted {
        /// The signal number.
        signal: i32,
        /// The results file.
        results: PathBuf,
    },
    /// The run finished, its results and report written, but some cells did not measure.
    #[error(
        "{failed} of {cells} cells failed, timed out or ran out of memory (the summary above says why); \
         every result is saved in {} and its report",
        results.display()
    )]
    CellsFailed {
        /// Cells that failed, timed out or ran out of memory.
        failed: usize,
        /// Cells of the run.
        cells: usize,
        /// The results file.
        results: PathBuf,
    },
}

impl From<tch::TchError> for Error {
    fn from(e: tch::TchError) -> Self {
        Error::Torch(e.to_string())
    }
}

impl Error {
    /// Wraps an I/O error with the path it concerns.
    pub fn io(path: impl Into<PathBuf>, source: std::io::Error) -> Self {
        Error::Io { path: path.into(), source }
    }

    /// [`Error::NotApplicable`] with `reason`, its lines joined into one.
    pub fn not_applicable(reason: &str) -> Self {
        let lines: Vec<&str> = reason.lines().map(str::trim).filter(|line| !line.is_empty()).collect();
        Error::NotApplicable(lines.join(" "))
    }

    /// This error in the context of `context`: the flag whose value failed, or the step.
    pub fn context(self, context: impl Into<String>) -> Self {
        Error::Context { context: context.into(), source: Box::new(self) }
    }
}

/// The library's result type.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// The conventional name of `signal` (SIGINT, SIGTERM, SIGSEGV, …), or `signal N`.
pub fn signal_name(signal: i32) -> String {
    match signal {
        libc::SIGINT => "SIGINT".to_owned(),
        libc::SIGTERM => "SIGTERM".to_owned(),
        libc::SIGKILL => "SIGKILL".to_owned(),
        libc::SIGSEGV => "SIGSEGV".to_owned(),
        libc::SIGABRT => "SIGABRT".to_owned(),
        libc::SIGBUS => "SIGBUS".to_owned(),
        libc::SIGFPE => "SIGFPE".to_owned(),
        libc::SIGILL => "SIGILL".to_owned(),
        other => format!("signal {other}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn signals_are_named_and_an_unnamed_one_by_its_number() {
        assert_eq!(signal_name(libc::SIGTERM), "SIGTERM");
        assert_eq!(signal_name(64), "signal 64");
    }

    #[test]
    fn a_not_applicable_reason_is_one_line() {
        let error = Error::not_applicable("sdpa-flash: no kernel\n  for these inputs\n");
        assert_eq!(error.to_string(), "not applicable: sdpa-flash: no kernel for these inputs");
    }

    #[test]
    fn a_modules_error_reads_as_itself_and_stays_in_the_chain() {
        let inner = std::io::Error::other("lock held");
        let error = Error::Module(Box::new(inner));
        assert_eq!(error.to_string(), "lock held");
        let source = std::error::Error::source(&error).unwrap();
        assert!(source.is::<std::io::Error>());
    }
}
