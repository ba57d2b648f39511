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
