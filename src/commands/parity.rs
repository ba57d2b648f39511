//! `trickbench parity`: export each workload's baseline cell as a parity case, train it on both
//! sides for the loss comparison, then time both sides in interleaved processes.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use anyhow::{bail, Context, Result};
use wait_timeout::ChildExt;

use trickbench::bench::profile::ProfileName;
use trickbench::measure::stats::median;
use trickbench::parity::case::{self, ExportRequest};
use trickbench::parity::compare::{
    LossAgreement, ParityReport, SpeedComparison, TimingRound, WorkloadParity, LOSS_RELATIVE_TOLERANCE,
};
use trickbench::parity::side::{self, SideMode, SideOutput, TimingPlan};
use trickbench::parity::PYTORCH_SCRIPT;
use trickbench::results::schema::profile_text;
use trickbench::results::store;
use trickbench::results::system::{git_commit, SystemInfo};
use trickbench::workloads::{Family, WorkloadId};

use crate::cli::{ParityArgs, ParityMode, ParitySideArgs};

/// The file `parity` writes after every workload.
const REPORT_FILE: &str = "parity.json";
/// The copy of the PyTorch script `parity` runs, left beside the results.
const SCRIPT_FILE: &str = "parity.py";
/// The longest a side's process may run before it is stopped.
const SIDE_TIMEOUT: Duration = Duration::from_secs(30 * 60);
/// Lines of a failed side's stderr quoted in the error.
const STDERR_TAIL_LINES: usize = 15;

/// Runs the comparison the flags describe.
pub fn parity(args: &ParityArgs) -> Result<()> {
    let device = args.device.resolve().context("--device")?;
    let (profile, reason) = args.profile.pick(device, tch::Cuda::is_available());
    if let Some(reason) = reason {
        eprintln!("note: {}", profile_text(profile.id(), Some(&reason)));
    }
    let workloads = resolve_workloads(&args.workload, profile)?;
    for (flag, value) in
        [("--steps", args.steps), ("--windows", args.windows), ("--steps-per-window", args.steps_per_window)]
    {
        if value == 0 {
            refuse!("{flag} must be at least 1");
        }
    }
    if args.batch_size == Some(0) {
        refuse!("--batch-size must be at least 1");
    }
    let python = args.python.clone().unwrap_or_else(default_python);
    let data_dir = if workloads.iter().any(|w| w.family() == Family::CifarResnet) {
        let cifar = profile.settings(Family::CifarResnet);
        let note = |line: &str| eprintln!("{line}");
        super::run::resolve_data(&args.data, cifar.train_samples, cifar.test_samples, &note)?.0
    } else {
        args.data.clone()
    };
    if workloads.iter().any(|w| w.family() == Family::CharGpt) && !args.text.is_file() {
        refuse!(
            "--text {}: no such file; the GPT trains on it (`trickbench data fetch shakespeare --out \
             data/shakespeare` or `make data` writes the default), or pass --workload resnet",
            args.text.display()
        );
    }
    let started = chrono::Utc::now();
    let out = args.out.clone().unwrap_or_else(|| {
        PathBuf::from("reports/runs").join(format!("{}-{profile}-parity", started.format("%Y%m%d-%H%M%S")))
    });
    std::fs::create_dir_all(&out).with_context(|| format!("creating {}", out.display()))?;
    let script = out.join(SCRIPT_FILE);
    std::fs::write(&script, PYTORCH_SCRIPT).with_context(|| format!("writing {}", script.display()))?;
    let mut report = ParityReport {
        started_at: started.to_rfc3339_opts(chrono::SecondsFormat::Secs, true),
        trickbench_version: env!("CARGO_PKG_VERSION").to_owned(),
        git_commit: git_commit(),
        command: std::env::args().collect(),
        device,
        system: SystemInfo::collect(device),
        profile: profile.to_string(),
        loss_steps: args.steps,
        warmup_steps: args.warmup_steps,
        windows_per_process: args.windows,
        steps_per_window: args.steps_per_window,
        workloads: Vec::new(),
    };
    let sides = Sides {
        trickbench: std::env::current_exe().context("locating the trickbench binary")?,
        python,
        script,
    };
    let mut disagreeing = Vec::new();
    for workload in workloads {
        let request = ExportRequest {
            workload,
            profile,
            batch_size: args.batch_size.unwrap_or(profile.settings(workload.family()).batch_size),
            seed: args.seed,
            device,
            data_dir: data_dir.clone(),
            text: Some(args.text.clone()),
            steps: args.steps,
        };
        let parity = compare_workload(&request, &out, &sides, args)?;
        if !parity.losses.agrees() {
            disagreeing.push(workload);
        }
        report.workloads.push(parity);
        let path = out.join(REPORT_FILE);
        store::write_json_atomically(&report, &path)?;
    }
    print!("{}", summary(&report));
    println!("results: {}", out.join(REPORT_FILE).display());
    if !disagreeing.is_empty() {
        let names: Vec<&str> = disagreeing.iter().map(|w| w.id()).collect();
        bail!(
            "the losses of {} disagree with PyTorch's beyond the relative tolerance {LOSS_RELATIVE_TOLERANCE:e} \
             (both traces are in {})",
            names.join(", "),
            out.join(REPORT_FILE).display()
        );
    }
    Ok(())
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

/// The programs of the two sides.
struct Sides {
    /// This binary.
    trickbench: PathBuf,
    /// The Python interpreter with PyTorch.
    python: PathBuf,
    /// The PyTorch script.
    script: PathBuf,
}

/// Which side a process runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Implementation {
    Trickbench,
    PyTorch,
}

impl Implementation {
    fn name(self) -> &'static str {
        match self {
            Implementation::Trickbench => "trickbench",
            Implementation::PyTorch => "pytorch",
        }
    }
}

/// Exports the case of `request`, compares the losses, then times both sides.
fn compare_workload(
    request: &ExportRequest,
    out: &Path,
    sides: &Sides,
    args: &ParityArgs,
) -> Result<WorkloadParity> {
    let workload = request.workload;
    let case_dir = out.join(workload.id());
    eprintln!(
        "{workload}: exporting the baseline cell's initial weights and {} batches of {} to {}",
        request.steps,
        request.batch_size,
        case_dir.display()
    );
    case::export(request, &case_dir).with_context(|| format!("exporting the {workload} parity case"))?;
    eprintln!("{workload}: training {} steps on each side", request.steps);
    let tb = run_side(sides, Implementation::Trickbench, &case_dir, ParityMode::Losses, args, "losses")?;
    let py = run_side(sides, Implementation::PyTorch, &case_dir, ParityMode::Losses, args, "losses")?;
    let losses = LossAgreement::compare(tb.losses.clone(), py.losses.clone(), LOSS_RELATIVE_TOLERANCE)
        .with_context(|| format!("{workload}: comparing the losses"))?;
    eprintln!(
        "{workload}: loss after {} steps: trickbench {:.6}, PyTorch {:.6}; largest difference {:.2e} ({:.2e} relative): {}",
        request.steps,
        losses.trickbench_losses.last().copied().unwrap_or(f64::NAN),
        losses.pytorch_losses.last().copied().unwrap_or(f64::NAN),
        losses.max_abs_diff,
        losses.max_rel_diff,
        if losses.agrees() { "agree" } else { "DISAGREE" }
    );
    let unit = workload.family().sample_unit();
    let mut rounds = Vec::new();
    for round in 0..args.rounds {
        let trickbench_first = round % 2 == 0;
        let order = if trickbench_first {
            [Implementation::Trickbench, Implementation::PyTorch]
        } else {
            [Implementation::PyTorch, Implementation::Trickbench]
        };
        let mut timing = TimingRound {
            trickbench_first,
            trickbench_window_samples_per_s: Vec::new(),
            pytorch_window_samples_per_s: Vec::new(),
        };
        for implementation in order {
            let label = format!("time-{round}");
            let output = run_side(sides, implementation, &case_dir, ParityMode::Time, args, &label)?;
            match implementation {
                Implementation::Trickbench => {
                    timing.trickbench_window_samples_per_s = output.window_samples_per_s
                }
                Implementation::PyTorch => timing.pytorch_window_samples_per_s = output.window_samples_per_s,
            }
        }
        eprintln!(
            "{workload}: round {}/{}: trickbench {:.0} {unit}/s, PyTorch {:.0} {unit}/s (median window)",
            round + 1,
            args.rounds,
            median(&timing.trickbench_window_samples_per_s).unwrap_or(f64::NAN),
            median(&timing.pytorch_window_samples_per_s).unwrap_or(f64::NAN),
        );
        rounds.push(timing);
    }
    Ok(WorkloadParity {
        workload,
        batch_size: request.batch_size,
        sample_unit: unit.to_owned(),
        case_dir: workload.id().to_owned(),
        pytorch_version: py.version,
        trickbench_threads: tb.threads,
        pytorch_threads: py.threads,
        losses,
        speed: SpeedComparison::from_rounds(rounds),
    })
}

/// Runs one side's process on the case in `case_dir` in `mode`, its output and stderr kept in
/// the case directory under `label`, and reads what it wrote.
fn run_side(
    sides: &Sides,
    implementation: Implementation,
    case_dir: &Path,
    mode: ParityMode,
    args: &ParityArgs,
    label: &str,
) -> Result<SideOutput> {
    let output = case_dir.join(format!("{}-{label}.json", implementation.name()));
    let stderr_path = case_dir.join(format!("{}-{label}.stderr", implementation.name()));
    let mut command = match implementation {
        Implementation::Trickbench => {
            let mut c = Command::new(&sides.trickbench);
            c.arg("parity-side");
            c
        }
        Implementation::PyTorch => {
            let mut c = Command::new(&sides.python);
            c.arg(&sides.script);
            c
        }
    };
    command
        .arg("--case")
        .arg(case_dir)
        .args(["--mode", mode.id(), "--output"])
        .arg(&output)
        .args(["--warmup-steps", &args.warmup_steps.to_string()])
        .args(["--windows", &args.windows.to_string()])
        .args(["--steps-per-window", &args.steps_per_window.to_string()]);
    let stderr =
        std::fs::File::create(&stderr_path).with_context(|| format!("creating {}", stderr_path.display()))?;
    let program = match implementation {
        Implementation::Trickbench => sides.trickbench.display().to_string(),
        Implementation::PyTorch => format!("{} {}", sides.python.display(), sides.script.display()),
    };
    let mut child = command
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(stderr)
        .spawn()
        .with_context(|| match implementation {
            Implementation::PyTorch => format!(
                "starting {} (the Python with PyTorch; pass --python PATH, or run `make setup` for .venv/bin/python)",
                sides.python.display()
            ),
            Implementation::Trickbench => format!("starting {program}"),
        })?;
    let status = match child.wait_timeout(SIDE_TIMEOUT).with_context(|| format!("waiting for {program}"))? {
        Some(status) => status,
        None => {
            child.kill().ok();
            child.wait().ok();
            bail!(
                "{program} ({}) ran past {} s and was stopped; its stderr is in {}",
                mode.id(),
                SIDE_TIMEOUT.as_secs(),
                stderr_path.display()
            );
        }
    };
    if !status.success() {
        let text = std::fs::read_to_string(&stderr_path).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        let tail = lines[lines.len().saturating_sub(STDERR_TAIL_LINES)..].join("\n");
        bail!("the {} side ({}) failed with {status}: {program}\n{tail}", implementation.name(), mode.id());
    }
    let bytes = std::fs::read(&output).with_context(|| format!("reading {}", output.display()))?;
    serde_json::from_slice(&bytes).with_context(|| format!("parsing {}", output.display()))
}

/// The workloads of the comma-separated `flag`, each name as `run --workload` reads it, in order
/// and without repeats.
fn resolve_workloads(flag: &str, profile: ProfileName) -> Result<Vec<WorkloadId>> {
    let mut workloads = Vec::new();
    for name in flag.split(',').map(str::trim) {
        for workload in super::run::workloads_named(name, profile)? {
            if !workloads.contains(&workload) {
                workloads.push(workload);
            }
        }
    }
    Ok(workloads)
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

/// The terminal summary of a report.
fn summary(report: &ParityReport) -> String {
    let mut text = format!(
        "\nparity with PyTorch · {} · {} profile · losses over {} steps · timing: {} warm-up steps, then {} windows × {} steps per process\n",
        report.device, report.profile, report.loss_steps, report.warmup_steps, report.windows_per_process, report.steps_per_window
    );
    text.push_str(&format!(
        "{:<16} {:>6}  {:>22}  {:<9} {:>22} {:>22} {:>24}\n",
        "workload",
        "batch",
        "loss |Δ| max (rel.)",
        "losses",
        "trickbench",
        "PyTorch eager",
        "trickbench ÷ PyTorch"
    ));
    for w in &report.workloads {
        let agreement = format!("{:.1e} ({:.1e})", w.losses.max_abs_diff, w.losses.max_rel_diff);
        let verdict = if w.losses.agrees() { "agree" } else { "DISAGREE" };
        let (tb, py, ratio) = match &w.speed {
            Some(s) => (
                format!("{:.0} {}/s", s.trickbench_samples_per_s.point, w.sample_unit),
                format!("{:.0} {}/s", s.pytorch_samples_per_s.point, w.sample_unit),
                format!("{:.3}× [{:.3}, {:.3}]", s.speed_ratio.point, s.speed_ratio.low, s.speed_ratio.high),
            ),
            None => ("-".to_owned(), "-".to_owned(), "(not timed)".to_owned()),
        };
        text.push_str(&format!(
            "{:<16} {:>6}  {:>22}  {:<9} {:>22} {:>22} {:>24}\n",
            w.workload.id(),
            w.batch_size,
            agreement,
            verdict,
            tb,
            py,
            ratio
        ));
        if let Some(speed) = &w.speed {
            text.push_str(&format!(
                "{:<16} PyTorch {} with {} threads, trickbench with {}; {} rounds, processes alternating\n",
                "",
                w.pytorch_version,
                w.pytorch_threads,
                w.trickbench_threads,
                speed.rounds.len()
            ));
        }
    }
    text
}
