//! `trickbench merge`: joins the shards of a sharded sweep into one results file and its report.

use std::path::{Path, PathBuf};

use anyhow::{Context, Result};

use trickbench::bench::runner::RESULTS_FILE;
use trickbench::bench::session;
use trickbench::results::merge::{merge as merge_shards, ShardResults};
use trickbench::results::store;
use trickbench::summary::summary_table;

use crate::cli::MergeArgs;

/// Merges the shards named on the command line into `--out`, then prints the summary, writes
/// the report and exits as `run` does (non-zero when a cell did not measure).
pub fn merge(args: &MergeArgs) -> Result<()> {
    let out_file = args.out.join(RESULTS_FILE);
    let _lock = session::hold_output(&args.out)?;
    let mut files = Vec::new();
    for path in &args.shards {
        files.extend(results_files(path, &out_file)?);
    }
    refuse_to_overwrite(&out_file, &files)?;
    let shards = files
        .into_iter()
        .map(|path| Ok(ShardResults { results: store::load(&path)?, path }))
        .collect::<Result<Vec<_>>>()?;
    let merged = merge_shards(shards, args.allow_missing)?;
    for warning in &merged.warnings {
        eprintln!("warning: {warning}");
    }
    let mut results = merged.results;
    if let Some(name) = args.out.file_name() {
        results.run.id = name.to_string_lossy().into_owned();
    }
    results.run.command = std::env::args().collect();
    store::save(&results, &out_file)?;
    println!("{}", summary_table(&results));
    println!("results: {}", out_file.display());
    super::write_report(std::slice::from_ref(&results), &args.out)?;
    Ok(session::refuse_failed_cells(&results, &args.out)?)
}

/// The results files `path` names: the file itself; a directory's results.json; or, for a
/// directory without one, the results.json of each of its subdirectories (one per shard) other
/// than the merge's own output, `out_file`.
fn results_files(path: &Path, out_file: &Path) -> Result<Vec<PathBuf>> {
    if !path.is_dir() {
        return Ok(vec![path.to_path_buf()]);
    }
    let own = path.join(RESULTS_FILE);
    if own.is_file() {
        return Ok(vec![own]);
    }
    let entries = std::fs::read_dir(path).with_context(|| format!("reading {}", path.display()))?;
    let mut files = Vec::new();
    for entry in entries {
        let entry = entry.with_context(|| format!("reading {}", path.display()))?;
        let file = entry.path().join(RESULTS_FILE);
        if file.is_file() && !same_file(&file, out_file) {
            files.push(file);
        }
    }
    files.sort();
    if files.is_empty() {
        refuse!("{}: no {RESULTS_FILE} in it or in its subdirectories", path.display());
    }
    Ok(files)
}

/// Refuses to write over one of the shards being merged, or over a results file that is not an
/// earlier merge (a run's own results); an earlier merge is replaced.
fn refuse_to_overwrite(out_file: &Path, inputs: &[PathBuf]) -> Result<()> {
    if !out_file.exists() {
        return Ok(());
    }
    if inputs.iter().any(|p| same_file(p, out_file)) {
        refuse!("--out: {} is one of the shards being merged; choose another --out", out_file.display());
    }
    let existing = store::load(out_file)?;
    if existing.run.merged.is_none() {
        refuse!(
            "--out: {} already exists and is not an earlier merge; choose another --out",
            out_file.display()
        );
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
