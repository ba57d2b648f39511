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
}

/// The library's result type.
pub type Result<T, E = Error> = std::result::Result<T, E>;
