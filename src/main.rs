//! The `trickbench` command line.
mod cli;
mod commands;

use std::process::ExitCode;

use clap::Parser;

fn main() -> ExitCode {
    match commands::dispatch(cli::Cli::parse()) {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("error: {error:#}");
            // Stopped by a signal: the shell's convention, 128 + the signal (130, 143).
            let signal = error.chain().find_map(|cause| match cause.downcast_ref() {
                Some(trickbench::error::Error::Interrupted { signal, .. }) => u8::try_from(128 + signal).ok(),
                _ => None,
            });
            signal.map_or(ExitCode::FAILURE, ExitCode::from)
        }
    }
}
