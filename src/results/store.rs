//! Reading and atomically writing `results.json`.

use std::io::Write;
use std::path::Path;

use crate::error::Error;
use crate::results::schema::{Results, SCHEMA_VERSION};

/// Writes `results` to `path` atomically: a temporary file in the same directory is written,
/// flushed to disk and renamed over `path`, so a crash or a full disk leaves the previous file whole.
pub fn save(results: &Results, path: &Path) -> Result<(), Error> {
    write_json_atomically(results, path)
}

/// Writes `value` as pretty JSON to `path` atomically (temporary file, fsync, rename).
pub fn write_json_atomically<T: serde::Serialize>(value: &T, path: &Path) -> Result<(), Error> {
    let dir = path.parent().filter(|d| !d.as_os_str().is_empty()).unwrap_or(Path::new("."));
    std::fs::create_dir_all(dir).map_err(|e| Error::io(dir, e))?;
    let json = serde_json::to_vec_pretty(value).map_err(|e| Error::Json { path: path.into(), source: e })?;
    let mut tmp = tempfile::NamedTempFile::new_in(dir).map_err(|e| Error::io(dir, e))?;
    tmp.write_all(&json).and_then(|()| tmp.write_all(b"\n")).map_err(|e| Error::io(tmp.path(), e))?;
    tmp.as_file().sync_all().map_err(|e| Error::io(tmp.path(), e))?;
    tmp.persist(path).map_err(|e| Error::io(path, e.error))?;
    Ok(())
}

/// Reads a results file, refusing files written by a newer schema.
pub fn load(path: &Path) -> Result<Results, Error> {
    let bytes = std::fs::read(path).map_err(|e| Error::io(path, e))?;
    let header: serde_json::Value =
        serde_json::from_slice(&bytes).map_err(|e| Error::Json { path: path.into(), source: e })?;
    let version = header.get("schema_version").and_then(serde_json::Value::as_u64);
    match version {
        None => {
            return Err(Error::Invalid(format!(
                "{}: not a trickbench results file (no schema_version)",
                path.display()
            )))
        }
        Some(v) if v > u64::from(SCHEMA_VERSION) => {
            return Err(Error::Invalid(format!(
                "{}: schema version {v} is newer than this trickbench understands ({SCHEMA_VERSION}); \
                 upgrade trickbench to read it",
                path.display()
            )))
        }
        Some(_) => {}
    }
    serde_json::from_value(header).map_err(|e| Error::Json { path: path.into(), source: e })
}
