//! `trickbench report` and `trickbench compare`.

use std::path::{Path, PathBuf};

use anyhow::{Context, Result};

use trickbench::report::{render_comparison, render_report, write_index, ReportFiles};
use trickbench::results::analysis::time_to_accuracy_summaries;
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
    let out = args.out.clone().unwrap_or_else(|| {
        args.results[0].parent().filter(|p| !p.as_os_str().is_empty()).unwrap_or(Path::new(".")).to_path_buf()
    });
    let files = render_report(&results, &out)
        .with_context(|| format!("rendering the report into {}", out.display()))?;
    print_files(&files);
    Ok(())
}

/// Renders the cross-device comparison of results files.
pub fn compare(args: &CompareArgs) -> Result<()> {
    let results = load_all(&args.results)?;
    // A results file inside a rendered report (`index.html` beside it) gets a link to it.
    let reports: Vec<Option<PathBuf>> =
        args.results.iter().map(|p| Some(p.with_file_name("index.html")).filter(|i| i.is_file())).collect();
    let files = render_comparison(&results, &reports, &args.out)
        .with_context(|| format!("rendering the comparison into {}", args.out.display()))?;
    print_files(&files);
    Ok(())
}

/// Writes the report of a run that just finished into `out_dir` and says where it is.
pub fn write_run_report(results: &Results, out_dir: &Path) -> Result<()> {
    let files = render_report(std::slice::from_ref(results), out_dir)
        .with_context(|| format!("rendering the report into {}", out_dir.display()))?;
    print_files(&files);
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

fn print_files(files: &ReportFiles) {
    println!("report:  {}", files.index_html.display());
    println!("summary: {}", files.summary_md.display());
    println!("cells:   {}", files.csv.display());
    println!(
        "plots:   {} files in {}",
        files.plots.len(),
        files.index_html.with_file_name("plots").display()
    );
}
