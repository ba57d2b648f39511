//! `merge` as a session over an output folder: the shards' results files found on disk, the
//! folder locked, a run's own results never overwritten, the shards' profiler traces copied beside
//! the merged results, which are then written. The join itself is
//! [`crate::results::merge::merge`].

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use crate::analysis::refresh_derived;
use crate::bench::runner::RESULTS_FILE;
use crate::bench::session::{hold_output, FinishedRun};
use crate::bench::trace::TRACES_DIR;
use crate::error::Error;
use crate::results::merge::{merge as merge_shards, ShardResults};
use crate::results::schema::{CellId, Results};
use crate::results::store::{self, StoreError};

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
    let trace_dirs = trace_dirs(&shards);
    let merged = merge_shards(shards, request.allow_missing)?;
    for warning in &merged.warnings {
        warn(&format!("warning: {warning}"));
    }
    let mut results = merged.results;
    refresh_derived(&mut results);
    copy_traces(&mut results, &trace_dirs, request, warn)?;
    if let Some(name) = request.out.file_name() {
        results.run.id = name.to_string_lossy().into_owned();
    }
    results.run.command = request.command.clone();
    store::save(&results, &out_file)?;
    Ok(FinishedRun { results, out_dir: request.out.clone(), shown: Vec::new(), lock })
}

/// The folder each traced cell's trace paths are relative to: its shard's results folder.
fn trace_dirs(shards: &[ShardResults]) -> HashMap<CellId, PathBuf> {
    shards
        .iter()
        .flat_map(|shard| {
            let dir = shard.path.parent().unwrap_or(Path::new("")).to_path_buf();
            shard.results.cells.iter().filter(|c| c.trace().is_some()).map(move |c| (c.id(), dir.clone()))
        })
        .collect()
}

/// Copies each trace of `results` from its shard's folder (`trace_dirs`) to the same relative path
/// in the merge's output folder, so that the merged results' trace paths hold. A trace file that
/// is missing is refused, naming it, unless the merge writes what there is (`--allow-missing`):
/// then it is left out of the merged results, with a warning.
fn copy_traces(
    results: &mut Results,
    trace_dirs: &HashMap<CellId, PathBuf>,
    request: &MergeRequest,
    warn: &dyn Fn(&str),
) -> Result<(), Error> {
    for cell in &mut results.cells {
        let id = cell.id();
        let Some(dir) = trace_dirs.get(&id) else { continue };
        for process in &mut cell.processes {
            let Some(trace) = &process.trace else { continue };
            let (from, to) = (dir.join(&trace.path), request.out.join(&trace.path));
            if same_file(&from, &to) {
                continue;
            }
            if !from.is_file() {
                let missing = format!("{}: the trace of cell {id} is missing", from.display());
                if !request.allow_missing {
                    return Err(Error::Invalid(format!(
                        "{missing}; copy the shard's {TRACES_DIR}/ folder beside its results file, or \
                         merge with --allow-missing to leave the trace out"
                    )));
                }
                warn(&format!("warning: {missing}; the merged results leave it out"));
                process.trace = None;
                continue;
            }
            copy_atomically(&from, &to)?;
        }
    }
    Ok(())
}

/// Copies `from` to `to` through a temporary file beside `to`, renamed once whole.
fn copy_atomically(from: &Path, to: &Path) -> Result<(), Error> {
    let mut source = std::fs::File::open(from).map_err(|e| Error::io(from, e))?;
    store::write_atomically(to, |tmp| {
        std::io::copy(&mut source, tmp)
            .map(drop)
            .map_err(|source| StoreError::Write { path: to.into(), source }.into())
    })
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
