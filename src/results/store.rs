//! Reading and atomically writing `results.json`, and the atomic write every file a run keeps
//! goes through.

use std::io::Write;
use std::path::{Path, PathBuf};

use crate::results::migrate;
use crate::results::schema::{Results, SCHEMA_VERSION};

/// Why a results file, or another file a run keeps, could not be read or written. Every variant
/// names its file.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// The file could not be read.
    #[error("{}: {source}", path.display())]
    Read {
        /// The file.
        path: PathBuf,
        /// Why not.
        source: std::io::Error,
    },
    /// The file read is not JSON, or not JSON of the results' shape.
    #[error("{}: not a readable results file: {source}", path.display())]
    Parse {
        /// The file.
        path: PathBuf,
        /// What serde found.
        source: serde_json::Error,
    },
    /// The results did not serialise to JSON for the file.
    #[error("{}: {source}", path.display())]
    Json {
        /// The file.
        path: PathBuf,
        /// What serde found.
        source: serde_json::Error,
    },
    /// JSON without a `schema_version`: not a results file.
    #[error("{}: not a trickbench results file (no schema_version)", path.display())]
    NotResults {
        /// The file.
        path: PathBuf,
    },
    /// A results file of a schema newer than this build's.
    #[error(
        "{}: schema version {found} is newer than this trickbench understands ({SCHEMA_VERSION}); \
         upgrade trickbench to read it",
        path.display()
    )]
    NewerSchema {
        /// The file.
        path: PathBuf,
        /// Its schema version.
        found: u64,
    },
    /// The file could not be written; it was being replaced atomically, so whatever it held
    /// before is unchanged.
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
}

impl From<StoreError> for crate::error::Error {
    fn from(error: StoreError) -> Self {
        crate::error::Error::Module(Box::new(error))
    }
}

/// Writes `results` to `path` atomically: a temporary file in the same directory is written,
/// flushed to disk and renamed over `path`, so a crash or a full disk leaves the previous file whole.
pub fn save(results: &Results, path: &Path) -> Result<(), StoreError> {
    write_json_atomically(results, path)
}

/// Writes `value` as pretty JSON to `path` atomically (temporary file, fsync, rename). On failure
/// the error names `path` and says that its previous content is unchanged.
pub fn write_json_atomically<T: serde::Serialize>(value: &T, path: &Path) -> Result<(), StoreError> {
    let json =
        serde_json::to_vec_pretty(value).map_err(|source| StoreError::Json { path: path.into(), source })?;
    write_atomically(path, |tmp| {
        tmp.write_all(&json)
            .and_then(|()| tmp.write_all(b"\n"))
            .map_err(|source| StoreError::Write { path: path.into(), source })
    })
}

/// Writes `path` atomically: `fill` writes the content into a temporary file in the same directory
/// (named `.tmp…` with `path`'s extension), which is then flushed to disk and renamed over `path`,
/// so that a crash or a full disk leaves no partial file there. I/O errors name `path`; `fill`'s
/// own errors are returned as they are.
pub fn write_atomically<E: From<StoreError>>(
    path: &Path,
    fill: impl FnOnce(&mut tempfile::NamedTempFile) -> Result<(), E>,
) -> Result<(), E> {
    let failed = |source| StoreError::Write { path: path.into(), source };
    let dir = path.parent().filter(|d| !d.as_os_str().is_empty()).unwrap_or(Path::new("."));
    std::fs::create_dir_all(dir).map_err(failed)?;
    let suffix = path.extension().map(|e| format!(".{}", e.to_string_lossy())).unwrap_or_default();
    let mut tmp = tempfile::Builder::new().prefix(".tmp").suffix(&suffix).tempfile_in(dir).map_err(failed)?;
    fill(&mut tmp)?;
    tmp.as_file().sync_all().map_err(failed)?;
    tmp.persist(path).map_err(|e| failed(e.error))?;
    Ok(())
}

/// Reads a results file, refusing files written by a newer schema.
pub fn load(path: &Path) -> Result<Results, StoreError> {
    let bytes = std::fs::read(path).map_err(|source| StoreError::Read { path: path.into(), source })?;
    parse(&bytes, path)
}

/// Parses the content of a results file, refusing a newer schema and upgrading an older one;
/// `path` is only named in errors.
pub fn parse(bytes: &[u8], path: &Path) -> Result<Results, StoreError> {
    let json = |source| StoreError::Parse { path: path.into(), source };
    let mut file: serde_json::Value = serde_json::from_slice(bytes).map_err(json)?;
    let version = match file.get("schema_version").and_then(serde_json::Value::as_u64) {
        None => return Err(StoreError::NotResults { path: path.into() }),
        Some(found) if found > u64::from(SCHEMA_VERSION) => {
            return Err(StoreError::NewerSchema { path: path.into(), found })
        }
        Some(version) => version,
    };
    migrate::upgrade(&mut file, version);
    file["schema_version"] = SCHEMA_VERSION.into();
    serde_json::from_value(file).map_err(json)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_failed_write_names_the_file_and_leaves_the_old_one() {
        let dir = tempfile::tempdir().unwrap();
        // A directory where the file should be: the rename fails after the temporary file is
        // written, whoever runs the test (root ignores permissions, not file types).
        let blocked = dir.path().join("results.json");
        std::fs::create_dir(&blocked).unwrap();
        std::fs::write(blocked.join("keep"), "previous").unwrap();
        let error = write_json_atomically(&serde_json::json!({"a": 1}), &blocked).unwrap_err().to_string();
        assert!(error.contains("could not write") && error.contains("results.json"), "{error}");
        assert!(error.contains("unchanged"), "{error}");
        assert_eq!(std::fs::read_to_string(blocked.join("keep")).unwrap(), "previous");
        let left: Vec<_> = std::fs::read_dir(dir.path()).unwrap().collect();
        assert_eq!(left.len(), 1, "the temporary file is removed");

        // A parent that is a file: the directory cannot be created.
        let file = dir.path().join("plain");
        std::fs::write(&file, "x").unwrap();
        let error = write_json_atomically(&1, &file.join("results.json")).unwrap_err().to_string();
        assert!(error.contains("plain/results.json"), "{error}");
    }

    #[test]
    fn results_of_a_newer_schema_are_refused_with_both_versions() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("results.json");
        let newer = SCHEMA_VERSION + 1;
        std::fs::write(&path, format!("{{\"schema_version\": {newer}, \"run\": {{}}}}")).unwrap();
        let error = load(&path).unwrap_err().to_string();
        assert!(
            error.contains("results.json") && error.contains(&format!("schema version {newer}")),
            "{error}"
        );
        assert!(error.contains("upgrade trickbench"), "{error}");
        std::fs::write(&path, "{\"cells\": []}").unwrap();
        assert!(load(&path).unwrap_err().to_string().contains("no schema_version"));
        std::fs::write(&path, b"{\"schema_version\": 1, \"run\": \"\xff\"}").unwrap();
        assert!(load(&path).unwrap_err().to_string().contains("results.json"));
    }
}
