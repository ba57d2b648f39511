//! `trickbench parity`: the flags as a checked comparison, the comparison (each workload's
//! baseline cell trained by trickbench and by eager PyTorch), then its summary; and the hidden
//! `parity-side` command that runs trickbench's side of a case.

use std::path::PathBuf;

use anyhow::{bail, Context, Result};

use trickbench::bench::config::WorkloadChoice;
use trickbench::bench::inputs::resolve_data;
use trickbench::bench::profile::ProfileName;
use trickbench::parity::compare::LOSS_RELATIVE_TOLERANCE;
use trickbench::parity::session::{self, ParityConfig, REPORT_FILE};
use trickbench::parity::side::{self, SideMode, TimingPlan};
use trickbench::results::schema::profile_text;
use trickbench::results::store;
use trickbench::workloads::{Family, WorkloadId};

use crate::cli::{ParityArgs, ParityMode, ParitySideArgs};

/// Runs the comparison the flags describe.
pub fn parity(args: &ParityArgs) -> Result<()> {
    let config = config(args)?;
    let report = session::run(&config)?;
    print!("{}", session::summary(&report));
    let path = config.out.join(REPORT_FILE);
    println!("results: {}", path.display());
    let disagreeing: Vec<&str> =
        report.workloads.iter().filter(|w| !w.losses.agrees()).map(|w| w.workload.id()).collect();
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

/// The comparison the flags ask for, checked: the device and profile resolved, the counts at
/// least 1, the data found.
fn config(args: &ParityArgs) -> Result<ParityConfig> {
    let training = &args.training;
    let device = training.device.resolve().context("--device")?;
    let (profile, reason) = training.profile.pick(device, tch::Cuda::is_available());
    if let Some(reason) = reason {
        eprintln!("note: {}", profile_text(profile.id(), Some(&reason)));
    }
    let workloads = resolve_workloads(&args.workload, profile);
    for (flag, value) in
        [("--steps", args.steps), ("--windows", args.windows), ("--steps-per-window", args.steps_per_window)]
    {
        if value == 0 {
            refuse!("{flag} must be at least 1");
        }
    }
    if training.batch_size == Some(0) {
        refuse!("--batch-size must be at least 1");
    }
    let data_dir = if workloads.iter().any(|w| w.family() == Family::CifarResnet) {
        let cifar = profile.settings(Family::CifarResnet);
        let note = |line: &str| eprintln!("{line}");
        resolve_data(&training.data, cifar.train_samples, cifar.test_samples, &note)?.0
    } else {
        training.data.clone()
    };
    if workloads.iter().any(|w| w.family() == Family::CharGpt) && !training.text.is_file() {
        refuse!(
            "--text {}: no such file; the GPT trains on it (`trickbench data fetch shakespeare --out \
             data/shakespeare` or `make data` writes the default), or pass --workload resnet",
            training.text.display()
        );
    }
    let started = chrono::Utc::now();
    let out = args.out.clone().unwrap_or_else(|| {
        PathBuf::from("reports/runs").join(format!("{}-{profile}-parity", started.format("%Y%m%d-%H%M%S")))
    });
    Ok(ParityConfig {
        workloads,
        profile,
        device,
        seed: training.seed,
        batch_size: training.batch_size,
        steps: args.steps,
        rounds: args.rounds,
        timing: TimingPlan {
            warmup_steps: args.warmup_steps,
            windows: args.windows,
            steps_per_window: args.steps_per_window,
        },
        python: args.python.clone().unwrap_or_else(default_python),
        trickbench: std::env::current_exe().context("locating the trickbench binary")?,
        data_dir,
        text: training.text.clone(),
        out,
        command: std::env::args().collect(),
    })
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
    let output =
        side::run(&args.case, mode).with_context(|| format!("parity case {}", args.case.display()))?;
    store::write_json_atomically(&output, &args.output)?;
    Ok(())
}

/// The workloads of `--workload`'s choices, in order and without repeats.
fn resolve_workloads(choices: &[WorkloadChoice], profile: ProfileName) -> Vec<WorkloadId> {
    let mut workloads = Vec::new();
    for workload in choices.iter().flat_map(|choice| choice.workloads(profile)) {
        if !workloads.contains(&workload) {
            workloads.push(workload);
        }
    }
    workloads
}

/// The checkout's `.venv/bin/python` (set up by `make setup`, with the PyTorch wheel) when
/// present, else `python3` from the PATH.
fn default_python() -> PathBuf {
    let venv = PathBuf::from(".venv/bin/python");
    if venv.is_file() {
        venv
    } else {
        PathBuf::from("python3")
    }
}
