//! `trickbench merge`: joins the shards of a sharded sweep into one results file and its report.

use anyhow::Result;

use trickbench::bench::merge::{merge as merge_sweep, MergeRequest};
use trickbench::bench::session;
use trickbench::summary::closing_summary;
use trickbench::terminal::Terminal;

use crate::cli::MergeArgs;

/// Merges the shards named on the command line into `--out`, then prints the summary, writes
/// the report and exits as `run` does (non-zero when a cell did not measure).
pub fn merge(args: &MergeArgs) -> Result<()> {
    let request = MergeRequest {
        shards: args.shards.clone(),
        out: args.out.clone(),
        allow_missing: args.allow_missing,
        command: std::env::args().collect(),
    };
    let merged = merge_sweep(&request, &|line| eprintln!("{line}"))?;
    println!("{}", closing_summary(&merged.results, &[], Terminal::detect(false)));
    println!("results: {}", merged.results_path().display());
    super::write_report(
        std::slice::from_ref(&merged.results),
        std::slice::from_ref(&merged.out_dir),
        &merged.out_dir,
    )?;
    Ok(session::refuse_failed_cells(&merged.results, &merged.out_dir)?)
}
