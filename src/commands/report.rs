//! `trickbench report`, `trickbench compare` and `trickbench ops`.

use std::path::{Path, PathBuf};

use anyhow::{Context, Result};

use trickbench::analysis::time_to_accuracy_summaries;
use trickbench::report::gate::{self, FailOn, Gate, GateVerdict};
use trickbench::report::ops::{render_ops, traced_pairs};
use trickbench::report::{render_comparison, write_index};
use trickbench::results::schema::Results;
use trickbench::results::store;
use trickbench::terminal::{wrap, Terminal};

use crate::cli::{CompareArgs, OpsArgs, ReportArgs};
use crate::commands::exit::GateFailed;

/// Re-renders the report of results files, after printing the answer of each factorial design
/// among them.
pub fn report(args: &ReportArgs) -> Result<()> {
    if let Some(dir) = &args.index {
        let index = write_index(dir).with_context(|| format!("writing the index of {}", dir.display()))?;
        println!("index:   {}", index.display());
        return Ok(());
    }
    let results = load_all(&args.results)?;
    let dirs: Vec<PathBuf> = args.results.iter().map(|p| folder_of(p)).collect();
    let out = args.out.clone().unwrap_or_else(|| dirs[0].clone());
    let terminal = Terminal::detect(false);
    let answers: String =
        results.iter().map(|r| trickbench::summary::factorial_summary(r, terminal)).collect();
    if !answers.is_empty() {
        println!("{answers}");
    }
    super::write_report(&results, &dirs, &out)
}

/// The folder of the file `path` (`.` for a bare file name).
fn folder_of(path: &Path) -> PathBuf {
    path.parent().filter(|p| !p.as_os_str().is_empty()).unwrap_or(Path::new(".")).to_path_buf()
}

/// Renders the comparison of results files, across devices or across versions; with `--fail-on`,
/// gates the second file against the first as well.
pub fn compare(args: &CompareArgs) -> Result<()> {
    if args.fail_on.is_some() && args.results.len() != 2 {
        let given: Vec<String> = args.results.iter().map(|p| p.display().to_string()).collect();
        refuse!(
            "--fail-on gates exactly two results files, BASE then NEW; {} were given: {}",
            given.len(),
            given.join(", ")
        );
    }
    let results = load_all(&args.results)?;
    // Judged before anything is written, so that runs the gate refuses leave no files.
    let gate = args.fail_on.map(|fail_on| judge(args, &results).map(|gate| (gate, fail_on))).transpose()?;
    // A results file inside a rendered report (`index.html` beside it) gets a link to it.
    let reports: Vec<Option<PathBuf>> =
        args.results.iter().map(|p| Some(p.with_file_name("index.html")).filter(|i| i.is_file())).collect();
    let compared = render_comparison(&results, &reports, args.by, &args.out)
        .with_context(|| format!("rendering the comparison into {}", args.out.display()))?;
    let terminal = Terminal::detect(false);
    let columns = terminal.columns;
    println!("{}", wrap(&format!("compared: {}", compared.lined_up), columns, 4));
    if compared.machines {
        println!("\n{}", trickbench::summary::comparison_summary(&results, terminal));
    }
    if compared.unshared_cells > 0 {
        println!("not shared: {} cells some runs lack, listed on the page", compared.unshared_cells);
    }
    super::print_files(&compared.files);
    match gate {
        Some((gate, fail_on)) => finish_gate(&gate, fail_on, &args.out, columns),
        None => Ok(()),
    }
}

/// The gate of the second results file against the first.
fn judge(args: &CompareArgs, results: &[Results]) -> Result<Gate> {
    let (base, new) = (&args.results[0], &args.results[1]);
    gate::judge(&results[0], &results[1], args.allow_mismatch)
        .with_context(|| format!("gating {} (new) against {} (base)", new.display(), base.display()))
}

/// Writes the gate and prints it in `columns`; fails with [`GateFailed`] where it found a
/// regression and `fail_on` says to.
fn finish_gate(gate: &Gate, fail_on: FailOn, out: &Path, columns: usize) -> Result<()> {
    let files = gate::write_gate(gate, out)?;
    println!("{}", wrap(gate.terminal_text().trim_end(), columns, 4));
    println!("gate:    {}", files.markdown.display());
    println!("junit:   {}", files.junit.display());
    let regressions = gate.with_verdict(GateVerdict::Regression).count();
    if fail_on == FailOn::Regression && regressions > 0 {
        return Err(GateFailed { regressions, markdown: files.markdown }.into());
    }
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

/// Prints (and with --out writes) the operator comparison of a run's traced cells.
pub fn ops(args: &OpsArgs) -> Result<()> {
    let results =
        store::load(&args.results).with_context(|| format!("reading {}", args.results.display()))?;
    let dir = folder_of(&args.results);
    let pairs = traced_pairs(&results, &dir, args.cell.as_ref())?;
    if pairs.is_empty() && results.cells.iter().all(|c| c.trace().is_none()) {
        refuse!(
            "{} has no traced cell: it was run with --no-trace (or before runs traced by default); run \
             again without --no-trace to record the traces this compares",
            args.results.display()
        );
    }
    if let (true, Some(glob)) = (pairs.is_empty(), &args.cell) {
        let traced: Vec<String> =
            results.cells.iter().filter(|c| c.trace().is_some()).map(|c| c.id().to_string()).collect();
        refuse!(
            "--cell '{}' matches no traced cell of {} that has a traced reference; its traced cells: {}",
            glob.as_str(),
            args.results.display(),
            traced.join(", ")
        );
    }
    let text = render_ops(&pairs, args.top, Terminal::detect(false).columns);
    print!("{text}");
    if let Some(out) = &args.out {
        std::fs::write(out, &text).with_context(|| format!("writing {}", out.display()))?;
    }
    Ok(())
}
