//! `merge` as a session over an output folder: the shards' results files found on disk, the
//! folder locked, a run's own results never overwritten, the merged results written. The join
//! itself is [`crate::results::merge::merge`].

use std::path::{Path, PathBuf};

use crate::bench::runner::RESULTS_FILE;
use crate::bench::session::{hold_output, FinishedRun};
use crate::error::Error;
use crate::results::merge::{merge as merge_shards, ShardResults};
use crate::results::store;

/// A merge as asked for.
#[derive(Debug, Clone)]
pub struct MergeRequest {
    /// Shards' results files, or directories holding one (or one per subdirectory).
    pub shards: Vec<PathBuf>,
    /// The output folder.
    pub out: PathBuf,
    /// Write what there is when shards are absent or unfinished, warning about each.
    pub allow_missing: bool,
    /// The command line, as recorded in the merged results.
    pub command: Vec<String>,
}

/// Merges the shards `request` names into its output folder, telling the user of anything
/// missing through `warn`; returns the merged results with the folder still locked.
pub fn merge(request: &MergeRequest, warn: &dyn Fn(&str)) -> Result<FinishedRun, Error> {
    let out_file = request.out.join(RESULTS_FILE);
    let lock = hold_output(&request.out)?;
    let mut files = Vec::new();
    for path in &request.shards {
        files.extend(results_files(path, &out_file)?);
    }
    refuse_to_overwrite(&out_file, &files)?;
    let shards = files
        .into_iter()
        .map(|path| Ok(ShardResults { results: store::load(&path)?, path }))
        .collect::<Result<Vec<_>, Error>>()?;
    let merged = merge_shards(shards, request.allow_missing)?;
    for warning in &merged.warnings {
        warn(&format!("warning: {warning}"));
    }
    let mut results = merged.results;
    if let Some(name) = request.out.file_name() {
        results.run.id = name.to_string_lossy().into_owned();
    }
    results.run.command = request.command.clone();
    store::save(&results, &out_file)?;
    Ok(FinishedRun { results, out_dir: request.out.clone(), shown: Vec::new(), lock })
}

/// The results files `path` names: the file itself; a directory's results.json; or, for a
/// directory without one, the results.json of each of its subdirectories (one per shard) other
/// than the merge's own output, `out_file`.
fn results_files(path: &Path, out_file: &Path) -> Result<Vec<PathBuf>, Error> {
    if !path.is_dir() {
        return Ok(vec![path.to_path_buf()]);
    }
    let own = path.join(RESULTS_FILE);
    if own.is_file() {
        return Ok(vec![own]);
    }
    let mut files = Vec::new();
    for entry in std::fs::read_dir(path).map_err(|e| Error::io(path, e))? {
        let file = entry.map_err(|e| Error::io(path, e))?.path().join(RESULTS_FILE);
        if file.is_file() && !same_file(&file, out_file) {
            files.push(file);
        }
    }
    files.sort();
    if files.is_empty() {
        return Err(Error::Invalid(format!(
            "{}: no {RESULTS_FILE} in it or in its subdirectories",
            path.display()
        )));
    }
    Ok(files)
}

/// Refuses to write over one of the shards being merged, or over a results file that is not an
/// earlier merge (a run's own results); an earlier merge is replaced.
fn refuse_to_overwrite(out_file: &Path, inputs: &[PathBuf]) -> Result<(), Error> {
    if !out_file.exists() {
        return Ok(());
    }
    if inputs.iter().any(|p| same_file(p, out_file)) {
        return Err(Error::Invalid(format!(
            "--out: {} is one of the shards being merged; choose another --out",
            out_file.display()
        )));
    }
    if store::load(out_file)?.run.merged.is_none() {
        return Err(Error::Invalid(format!(
            "--out: {} already exists and is not an earlier merge; choose another --out",
            out_file.display()
        )));
    }
    Ok(())
}

/// Whether `a` and `b` are the same existing file.
fn same_file(a: &Path, b: &Path) -> bool {
    match (a.canonicalize(), b.canonicalize()) {
        (Ok(a), Ok(b)) => a == b,
        _ => false,
    }
}
