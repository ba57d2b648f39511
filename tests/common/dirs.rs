//! The folders the tests read and write: a temporary one, one kept under `target/test-output/`
//! for a person to look at, and the checkout's own files.

use std::path::{Path, PathBuf};

use tempfile::TempDir;

/// A new empty temporary folder, removed when the value is dropped.
pub fn temp_dir() -> TempDir {
    tempfile::Builder::new().prefix("trickbench-test-").tempdir().expect("a temporary folder")
}

/// `target/test-output/<name>`, emptied, kept after the test so that a person can look at what
/// was written there; canonical, as paths derived from it are compared.
pub fn kept_output_dir(name: &str) -> PathBuf {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("../test-output").join(name);
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir.canonicalize().unwrap()
}

/// `relative` in the checkout (committed reports, scripts, the `.venv` link).
pub fn checkout(relative: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join(relative)
}

/// The Python with PyTorch that `make setup` links into the checkout.
pub fn python() -> PathBuf {
    let python = checkout(".venv/bin/python");
    assert!(python.is_file(), "{} is missing: run `make setup` first", python.display());
    python
}
