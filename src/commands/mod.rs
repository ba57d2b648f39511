//! The commands behind the command line.

/// Returns from the enclosing function with a refusal of bad usage (a flag or value that cannot
/// work, named in the message): the library's `Error::Invalid`, for which `trickbench` exits with
/// status 2.
macro_rules! refuse {
    ($($message:tt)*) => {
        return Err(trickbench::error::Error::Invalid(format!($($message)*)).into())
    };
}

mod catalogue;
mod cell;
mod crosscheck;
mod data;
mod ddp;
pub mod exit;
mod merge;
mod parity;
mod plan;
mod report;
mod run;

use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use trickbench::report::{render_report_from, ReportFiles};
use trickbench::results::schema::Results;

use crate::cli::{Cli, Command, DataCommand};

/// An error and its causes on one line, "outer: inner: …", each cause once: the library's errors
/// already end with the cause they wrap, which the chain then names again.
pub fn error_text(error: &anyhow::Error) -> String {
    let mut text = String::new();
    for cause in error.chain() {
        let cause = cause.to_string();
        if text.ends_with(&cause) {
            continue;
        }
        if !text.is_empty() {
            text.push_str(": ");
        }
        text.push_str(&cause);
    }
    text
}

/// Runs the command the user asked for.
pub fn dispatch(cli: Cli) -> Result<()> {
    match cli.command {
        Command::Run(args) => {
            ddp::refuse_under_launcher("run")?;
            run::run(&args)
        }
        Command::Report(args) => report::report(&args),
        Command::Merge(args) => merge::merge(&args),
        Command::Compare(args) => report::compare(&args),
        Command::List(args) => catalogue::list(&args),
        Command::Plan(args) => plan::plan(&args),
        Command::Env => catalogue::env(),
        Command::Ops(args) => report::ops(&args),
        Command::Data(DataCommand::Fetch(args)) => data::fetch(&args),
        Command::Data(DataCommand::Import(args)) => data::import(&args),
        Command::Data(DataCommand::Synth(args)) => data::synth(&args),
        Command::Launch(args) => ddp::launch(&args),
        Command::DdpCheck(args) => ddp::check(&args),
        Command::Cell(args) => cell::cell(&args),
        Command::Crosscheck(args) => crosscheck::crosscheck(&args),
        Command::Parity(args) => parity::parity(&args),
        Command::ParitySide(args) => parity::side(&args),
    }
}

/// Renders the report of `results`, read from the folders `results_dirs` (one per file: their
/// profiler traces lie there), into `out` and says where its files are (`run`, `merge` and
/// `report` end with it).
pub fn write_report(results: &[Results], results_dirs: &[PathBuf], out: &Path) -> Result<()> {
    let files = render_report_from(results, results_dirs, out)
        .with_context(|| format!("rendering the report into {}", out.display()))?;
    print_files(&files);
    Ok(())
}

/// Says where a report's files are.
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

#[cfg(test)]
mod tests {
    use super::error_text;

    #[test]
    fn a_cause_the_message_already_ends_with_is_said_once() {
        let missing = std::io::Error::new(std::io::ErrorKind::NotFound, "No such file or directory");
        let error =
            anyhow::Error::new(trickbench::error::Error::Io { path: "r.json".into(), source: missing })
                .context("reading the results");
        assert_eq!(error_text(&error), "reading the results: r.json: No such file or directory");
        let plain = anyhow::anyhow!("inner").context("outer");
        assert_eq!(error_text(&plain), "outer: inner");
    }
}
