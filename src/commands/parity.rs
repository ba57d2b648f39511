//! `trickbench parity`: the flags as a checked comparison, the comparison (each workload's
//! baseline cell trained by trickbench and by eager PyTorch), then its summary; and the hidden
//! `parity-side` command that runs trickbench's side of a case.

use anyhow::{bail, Context, Result};

use trickbench::parity::compare::{COMPILED_LOSS_RELATIVE_TOLERANCE, LOSS_RELATIVE_TOLERANCE};
use trickbench::parity::config::{ParityConfig, ParityRequest};
use trickbench::parity::session::{self, REPORT_FILE};
use trickbench::parity::side::{self, SideMode, TimingPlan};
use trickbench::parity::stack::StackRequest;
use trickbench::parity::summary::summary;
use trickbench::results::store;
use trickbench::tricks::TrickSet;

use crate::cli::{ParityArgs, ParityMode, ParitySideArgs};

/// Runs the comparison the flags describe; fails when a workload's losses disagree.
pub fn parity(args: &ParityArgs) -> Result<()> {
    let config = ParityConfig::new(request(args)?, &|line| eprintln!("{line}"))?;
    let report = session::run(&config)?;
    print!("{}", summary(&report));
    let path = config.out.join(REPORT_FILE);
    println!("results: {}", path.display());
    let compiled: Vec<String> = report
        .compiled_disagreeing()
        .iter()
        .map(|(w, mode)| format!("{w} compiled in mode {}", mode.id()))
        .collect();
    if !compiled.is_empty() {
        eprintln!(
            "warning: the losses of {} disagree with eager PyTorch's beyond the relative tolerance \
             {COMPILED_LOSS_RELATIVE_TOLERANCE:e} (both traces are in {})",
            compiled.join(", "),
            path.display()
        );
    }
    let disagreeing: Vec<&str> = report.disagreeing().iter().map(|w| w.id()).collect();
    if !disagreeing.is_empty() {
        bail!(
            "the losses of {} disagree with PyTorch's beyond the relative tolerance {LOSS_RELATIVE_TOLERANCE:e} \
             (both traces are in {})",
            disagreeing.join(", "),
            path.display()
        );
    }
    Ok(())
}

/// The comparison the flags ask for.
fn request(args: &ParityArgs) -> Result<ParityRequest> {
    let training = &args.training;
    Ok(ParityRequest {
        workloads: args.workload.clone(),
        profile: training.profile,
        device: training.device,
        seed: training.seed,
        batch_size: training.batch_size,
        steps: args.steps,
        rounds: args.rounds,
        timing: TimingPlan {
            warmup_steps: args.warmup_steps,
            windows: args.windows,
            steps_per_window: args.steps_per_window,
        },
        compile: args.compile.clone(),
        stack: stack_request(args),
        python: args.python.clone(),
        trickbench: std::env::current_exe().context("locating the trickbench binary")?,
        data: training.data.clone(),
        text: training.text.clone(),
        out: args.out.clone(),
        command: std::env::args().collect(),
    })
}

/// The stacked side the flags ask for: `--stack` tricks, `--stack-from` files, or none.
fn stack_request(args: &ParityArgs) -> Option<StackRequest> {
    if !args.stack_from.is_empty() {
        Some(StackRequest::From(args.stack_from.clone()))
    } else if !args.stack.is_empty() {
        Some(StackRequest::Tricks(args.stack.clone()))
    } else {
        None
    }
}

/// Runs trickbench's side of a case (the hidden `parity-side` command).
pub fn side(args: &ParitySideArgs) -> Result<()> {
    let mode = match args.mode {
        ParityMode::Losses => SideMode::Losses,
        ParityMode::Time => SideMode::Time(TimingPlan {
            warmup_steps: args.warmup_steps,
            windows: args.windows,
            steps_per_window: args.steps_per_window,
        }),
    };
    let stack: TrickSet = args.tricks.iter().copied().collect();
    let output = side::run(&args.case, mode, &stack)
        .with_context(|| format!("parity case {}", args.case.display()))?;
    store::write_json_atomically(&output, &args.output)?;
    Ok(())
}
