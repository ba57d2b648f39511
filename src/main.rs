//! The `trickbench` command line.
mod cli;
mod commands;

use std::process::ExitCode;

use clap::Parser;

fn main() -> ExitCode {
    match commands::dispatch(cli::Cli::parse()) {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("error: {}", commands::error_text(&error));
            // The first cause that decides: 2 for bad usage or input, 3 for a run with cells that
            // did not measure, 4 for a cell process whose cell is not applicable, 128 + the signal
            // for an interrupted run; 1 for anything else.
            let status = error.chain().find_map(commands::exit::exit_status);
            status.map_or(ExitCode::FAILURE, ExitCode::from)
        }
    }
}
