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
    /// A dataset file was missing or malformed.
    #[error(transparent)]
    Data(#[from] crate::data::cifar::DataError),
    /// The cell needed more memory than the device has or the memory budget allows.
    #[error("out of memory: {0}")]
    OutOfMemory(String),
    /// A value given by the user (flag, name, file content) is not acceptable.
    #[error("{0}")]
    Invalid(String),
    /// The output folder could not be locked, or another process holds its lock.
    #[error(transparent)]
    Lock(#[from] crate::bench::lock::LockError),
    /// Shards that cannot be merged.
    #[error(transparent)]
    Merge(#[from] crate::results::merge::MergeError),
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
    /// A file could not be written; it was being replaced atomically, so whatever it held before
    /// is unchanged.
    #[error(
        "could not write {}: {source}; its previous content, if any, is unchanged (free disk space, \
         make the directory writable, or write elsewhere with --out)",
        path.display()
    )]
    Write {
        /// The file that was to be written.
        path: PathBuf,
        /// What failed (creating, writing, flushing or renaming the temporary file).
        source: std::io::Error,
    },
    /// The run was stopped by SIGINT or SIGTERM; the results file holds every cell that finished.
    #[error(
        "interrupted by {}: every finished cell is saved in {}; to run the rest, repeat the command \
         with --resume --out {}",
        crate::bench::interrupt::signal_name(*signal),
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

    /// This error in the context of `context`: the flag whose value failed, or the step.
    pub fn context(self, context: impl Into<String>) -> Self {
        Error::Context { context: context.into(), source: Box::new(self) }
    }
}

/// Exit status of a command refused before it did anything: a flag, value or input file is wrong
/// (named in the message), or another process is writing into the output folder. clap exits with
/// the same status for arguments it cannot parse.
pub const USAGE_STATUS: u8 = 2;

/// Exit status of a run that finished, its results and report written, with cells that failed,
/// timed out or ran out of memory ([`Error::CellsFailed`]).
pub const CELLS_FAILED_STATUS: u8 = 3;

/// The exit status one cause in an error's chain decides, if it decides one: 128 + the signal for
/// an interrupted run (130, 143), [`CELLS_FAILED_STATUS`], [`USAGE_STATUS`] for bad input
/// (invalid values, malformed or missing data files, shards that do not merge, a held output
/// folder, results that make no history), 1 for other failures of the library; `None` for causes that leave it to the next
/// one in the chain (a command takes the first decision, else exits with 1).
pub fn exit_status(cause: &(dyn std::error::Error + 'static)) -> Option<u8> {
    use crate::bench::lock::LockError;
    use crate::data::cifar::DataError;
    let data_status = |error: &DataError| match error {
        DataError::Io { .. } => None,
        _ => Some(USAGE_STATUS),
    };
    let lock_status = |error: &LockError| matches!(error, LockError::Held { .. }).then_some(USAGE_STATUS);
    if let Some(error) = cause.downcast_ref::<Error>() {
        return match error {
            Error::Interrupted { signal, .. } => u8::try_from(128 + signal).ok(),
            Error::CellsFailed { .. } => Some(CELLS_FAILED_STATUS),
            Error::Invalid(_) | Error::Merge(_) => Some(USAGE_STATUS),
            Error::Data(data) => data_status(data),
            Error::Lock(lock) => lock_status(lock),
            Error::Io { .. } | Error::Json { .. } | Error::Context { .. } => None,
            Error::Torch(_)
            | Error::OutOfMemory(_)
            | Error::Distributed(_)
            | Error::Process(_)
            | Error::Write { .. } => Some(1),
        };
    }
    if let Some(error) = cause.downcast_ref::<DataError>() {
        return data_status(error);
    }
    if let Some(error) = cause.downcast_ref::<LockError>() {
        return lock_status(error);
    }
    if cause.is::<crate::results::merge::MergeError>() {
        return Some(USAGE_STATUS);
    }
    if let Some(error) = cause.downcast_ref::<crate::report::ReportError>() {
        use crate::report::ReportError;
        let refused = matches!(error, ReportError::StartTime { .. } | ReportError::NothingShared { .. });
        return refused.then_some(USAGE_STATUS);
    }
    // A file named on the command line that is not there.
    let missing =
        cause.downcast_ref::<std::io::Error>().is_some_and(|e| e.kind() == std::io::ErrorKind::NotFound);
    missing.then_some(USAGE_STATUS)
}

/// The library's result type.
pub type Result<T, E = Error> = std::result::Result<T, E>;

#[cfg(test)]
mod tests {
    use super::*;
    use crate::data::cifar::DataError;

    fn status(error: impl std::error::Error + 'static) -> Option<u8> {
        exit_status(&error)
    }

    #[test]
    fn bad_input_failed_cells_and_signals_have_their_own_statuses() {
        let format = || DataError::Format { path: "x.bin".into(), problem: "size 5".into() };
        let not_found = || std::io::Error::from(std::io::ErrorKind::NotFound);
        assert_eq!(status(Error::Invalid("--seeds 0".into())), Some(USAGE_STATUS));
        assert_eq!(status(format()), Some(USAGE_STATUS));
        assert_eq!(status(Error::Data(format())), Some(USAGE_STATUS));
        assert_eq!(status(not_found()), Some(USAGE_STATUS));
        assert_eq!(status(Error::CellsFailed { failed: 1, cells: 2, results: "r.json".into() }), Some(3));
        assert_eq!(status(Error::Interrupted { signal: libc::SIGTERM, results: "r.json".into() }), Some(143));
        let write = Error::Write { path: "r.json".into(), source: not_found() };
        assert_eq!(status(write), Some(1), "a failed write is no bad usage, whatever its cause");
        // Left to the cause in the chain: an I/O error is bad usage only for a missing file.
        assert_eq!(status(Error::io("r.json", not_found())), None);
        let in_context = Error::Invalid("--seeds 0".into()).context("--text");
        let chain: Vec<Option<u8>> =
            std::iter::successors(Some(&in_context as &(dyn std::error::Error + 'static)), |e| e.source())
                .map(exit_status)
                .collect();
        assert_eq!(chain, [None, Some(USAGE_STATUS)], "a context leaves the status to what failed in it");
        assert_eq!(status(std::io::Error::from(std::io::ErrorKind::PermissionDenied)), None);
        let unshared = crate::report::ReportError::NothingShared { runs: "#1 a; #2 b".into() };
        assert_eq!(status(unshared), Some(USAGE_STATUS));
    }
}
