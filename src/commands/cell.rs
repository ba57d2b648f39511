//! `trickbench cell`: one cell, in its own process, started by `run`.

use anyhow::{Context, Result};

use trickbench::bench::cell::{self, CellJob};
use trickbench::results::store;

use crate::cli::CellArgs;

/// Reads the job, measures, writes the measurement.
pub fn cell(args: &CellArgs) -> Result<()> {
    let text = std::fs::read(&args.job).with_context(|| format!("reading {}", args.job.display()))?;
    let job: CellJob =
        serde_json::from_slice(&text).with_context(|| format!("parsing {}", args.job.display()))?;
    let measurement = cell::run(&job).with_context(|| format!("cell {}", job.key.id()))?;
    store::write_json_atomically(&measurement, &args.output)?;
    Ok(())
}
