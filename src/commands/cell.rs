//! `trickbench cell`: one cell, in its own process, started by `run` (see
//! [`trickbench::bench::cell_process`]; the fault tests' `TRICKBENCH_FAULT` is read there).

use anyhow::{Context, Result};

use trickbench::bench::cell_process::{serve, CellProcess};

use crate::cli::CellArgs;

/// Reads the job, measures, writes the measurement.
pub fn cell(args: &CellArgs) -> Result<()> {
    Ok(serve(&CellProcess {
        job: args.job.clone(),
        output: args.output.clone(),
        program: std::env::current_exe().context("finding the trickbench binary")?,
        args: std::env::args_os().skip(1).collect(),
    })?)
}
