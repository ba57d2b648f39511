//! `trickbench crosscheck`: the flags as a checked cross-check, the cross-check, then its summary.

use anyhow::{Context, Result};

use trickbench::crosscheck::config::{CrosscheckConfig, CrosscheckRequest};
use trickbench::crosscheck::results::RESULTS_FILE;
use trickbench::crosscheck::session;
use trickbench::crosscheck::summary::{terminal, SUMMARY_FILE};

use crate::cli::CrosscheckArgs;

/// Runs the cross-check the flags describe and prints its answer.
pub fn crosscheck(args: &CrosscheckArgs) -> Result<()> {
    let config = CrosscheckConfig::new(request(args)?, &|line| eprintln!("{line}"))?;
    eprintln!(
        "trickbench crosscheck: {} tricks, {} rounds, into {}",
        config.checks.len(),
        args.rounds,
        config.out.display()
    );
    let results = session::run(&config, &|line| eprintln!("{line}"))?;
    print!("{}", terminal(&results));
    println!("results: {}", config.out.join(RESULTS_FILE).display());
    println!("summary: {}", config.out.join(SUMMARY_FILE).display());
    Ok(())
}

/// The cross-check the flags ask for.
fn request(args: &CrosscheckArgs) -> Result<CrosscheckRequest> {
    let training = &args.training;
    Ok(CrosscheckRequest {
        tricks: args.tricks.clone(),
        profile: training.profile,
        device: training.device,
        seed: training.seed,
        batch_size: training.batch_size,
        rounds: args.rounds,
        pairs: args.pairs,
        steps_per_window: args.steps_per_window,
        host_allocator: args.host_allocator,
        python: args.python.clone(),
        trickbench: std::env::current_exe().context("locating the trickbench binary")?,
        data: training.data.clone(),
        text: training.text.clone(),
        out: args.out.clone(),
        command: std::env::args().collect(),
    })
}
