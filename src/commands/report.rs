//! `trickbench report` and `trickbench compare`.

use std::path::{Path, PathBuf};

use anyhow::{Context, Result};

use trickbench::analysis::time_to_accuracy_summaries;
use trickbench::report::{render_comparison, write_index};
use trickbench::results::schema::Results;
use trickbench::results::store;

use crate::cli::{CompareArgs, ReportArgs};

/// Re-renders the report of results files.
pub fn report(args: &ReportArgs) -> Result<()> {
    if let Some(dir) = &args.index {
        let index = write_index(dir).with_context(|| format!("writing the index of {}", dir.display()))?;
        println!("index:   {}", index.display());
        return Ok(());
    }
    let results = load_all(&args.results)?;
    let dirs: Vec<PathBuf> = args.results.iter().map(|p| folder_of(p)).collect();
    let out = args.out.clone().unwrap_or_else(|| dirs[0].clone());
    super::write_report(&results, &dirs, &out)
}

/// The folder of the file `path` (`.` for a bare file name).
fn folder_of(path: &Path) -> PathBuf {
    path.parent().filter(|p| !p.as_os_str().is_empty()).unwrap_or(Path::new(".")).to_path_buf()
}

/// Renders the comparison of results files, across devices or across versions.
pub fn compare(args: &CompareArgs) -> Result<()> {
    let results = load_all(&args.results)?;
    // A results file inside a rendered report (`index.html` beside it) gets a link to it.
    let reports: Vec<Option<PathBuf>> =
        args.results.iter().map(|p| Some(p.with_file_name("index.html")).filter(|i| i.is_file())).collect();
    let compared = render_comparison(&results, &reports, args.by, &args.out)
        .with_context(|| format!("rendering the comparison into {}", args.out.display()))?;
    println!("compared: {}", compared.lined_up);
    if compared.unshared_cells > 0 {
        println!("not shared: {} cells some runs lack, listed on the page", compared.unshared_cells);
    }
    super::print_files(&compared.files);
    Ok(())
}

/// Loads results files, re-deriving the time-to-accuracy summaries from the cells (so files from
/// earlier versions get today's summaries).
fn load_all(paths: &[PathBuf]) -> Result<Vec<Results>> {
    paths
        .iter()
        .map(|p| {
            let mut results = store::load(p)?;
            results.time_to_accuracy = time_to_accuracy_summaries(&results.cells);
            Ok(results)
        })
        .collect()
}
