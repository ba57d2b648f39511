//! A whole parity comparison: each workload's baseline cell exported as a case, trained on both
//! sides for the loss comparison, then both sides timed in interleaved processes, the report
//! rewritten after every workload.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::Duration;

use wait_timeout::ChildExt;

use crate::error::Error;
use crate::hardware::Hardware;
use crate::measure::host_allocator::HostAllocator;
use crate::parity::case::{self, ExportRequest};
use crate::parity::compare::{
    CompiledLosses, CompiledParity, CompiledRound, CompiledSpeed, LossAgreement, ParityReport,
    SpeedComparison, TimingRound, WorkloadParity, LOSS_RELATIVE_TOLERANCE,
};
use crate::parity::config::ParityConfig;
use crate::parity::side::{CompileMode, SideMode, SideOutput};
use crate::parity::stack::{StackParity, StackSource, StackSpeed};
use crate::parity::PYTORCH_SCRIPT;
use crate::results::schema::SpeedrunDecision;
use crate::results::store;
use crate::results::system::{git_commit, SystemInfo};
use crate::stats::median;
use crate::tricks::Trick;
use crate::workloads::WorkloadId;

/// The file a comparison writes after every workload.
pub const REPORT_FILE: &str = "parity.json";
/// The copy of the PyTorch script a comparison runs, left beside its report.
const SCRIPT_FILE: &str = "parity.py";
/// The longest a side's process may run before it is stopped.
const SIDE_TIMEOUT: Duration = Duration::from_secs(30 * 60);
/// Lines of a failed side's stderr quoted in the error.
const STDERR_TAIL_LINES: usize = 15;

/// Runs the comparison of `config`, telling the user on stderr; returns the report (also in
/// `config.out`).
pub fn run(config: &ParityConfig) -> Result<ParityReport, Error> {
    let started = chrono::Utc::now();
    std::fs::create_dir_all(&config.out).map_err(|e| Error::io(&config.out, e))?;
    let script = config.out.join(SCRIPT_FILE);
    std::fs::write(&script, PYTORCH_SCRIPT).map_err(|e| Error::io(&script, e))?;
    let mut report = ParityReport {
        started_at: started.to_rfc3339_opts(chrono::SecondsFormat::Secs, true),
        trickbench_version: env!("CARGO_PKG_VERSION").to_owned(),
        git_commit: git_commit(),
        command: config.request.command.clone(),
        device: config.device,
        system: SystemInfo::collect(config.device),
        profile: config.profile,
        loss_steps: config.request.steps,
        warmup_steps: config.request.timing.warmup_steps,
        windows_per_process: config.request.timing.windows,
        steps_per_window: config.request.timing.steps_per_window,
        workloads: Vec::new(),
    };
    let sides = Sides {
        trickbench: config.request.trickbench.clone(),
        python: config.python.clone(),
        script,
        hardware: Hardware::probe(config.device),
    };
    for &workload in &config.workloads {
        let request = ExportRequest {
            workload,
            profile: config.profile,
            batch_size: config
                .request
                .batch_size
                .unwrap_or(config.profile.settings(workload.family()).batch_size),
            seed: config.request.seed,
            device: config.device,
            data_dir: config.data_dir.clone(),
            text: Some(config.request.text.clone()),
            steps: config.request.steps,
        };
        report.workloads.push(compare_workload(&request, config, &sides)?);
        store::write_json_atomically(&report, &config.out.join(REPORT_FILE))?;
    }
    Ok(report)
}

/// The programs of the sides, and the machine they run on.
struct Sides {
    /// This binary.
    trickbench: PathBuf,
    /// The Python interpreter with PyTorch.
    python: PathBuf,
    /// The PyTorch script.
    script: PathBuf,
    /// What this machine and binary can run, for the stacked side's tricks.
    hardware: Hardware,
}

/// Which side a process runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Implementation {
    Trickbench,
    PyTorch,
    /// PyTorch with the model compiled by `torch.compile` in this mode.
    Compiled(CompileMode),
    /// trickbench with the workload's stack of tricks on.
    Stack,
}

impl Implementation {
    fn name(self) -> &'static str {
        match self {
            Implementation::Trickbench => "trickbench",
            Implementation::PyTorch => "pytorch",
            Implementation::Compiled(CompileMode::Default) => "pytorch-compile-default",
            Implementation::Compiled(CompileMode::MaxAutotuneNoCudagraphs) => {
                "pytorch-compile-max-autotune-no-cudagraphs"
            }
            Implementation::Stack => "trickbench-stack",
        }
    }
}

/// Runs one side of a workload's case in a mode, its files under a label.
type RunSide<'a> = dyn Fn(Implementation, SideMode, &str) -> Result<SideOutput, Error> + 'a;

/// Exports the case of `request`, compares the losses, then times every side.
fn compare_workload(
    request: &ExportRequest,
    config: &ParityConfig,
    sides: &Sides,
) -> Result<WorkloadParity, Error> {
    let workload = request.workload;
    let case_dir = config.out.join(workload.id());
    eprintln!(
        "{workload}: exporting the baseline cell's initial weights and {} batches of {} to {}",
        request.steps,
        request.batch_size,
        case_dir.display()
    );
    case::export(request, &case_dir)
        .map_err(|e| e.context(format!("exporting the {workload} parity case")))?;
    let mut stack = config.stack.as_ref().map(|source| stack_parity(workload, source, &sides.hardware));
    let stacked: Vec<Trick> = stack.as_ref().map(|s| s.tricks.clone()).unwrap_or_default();
    let run = |implementation, mode, label: &str| {
        let output = run_side(sides, implementation, &case_dir, mode, label, &stacked);
        match (implementation, output) {
            // A stack that cannot run here is reported; the other sides go on.
            (Implementation::Stack, Err(error)) => Ok(SideOutput {
                unavailable: Some(format!("its process failed: {error}")),
                ..SideOutput::new("trickbench", env!("CARGO_PKG_VERSION"))
            }),
            (_, output) => output,
        }
    };
    eprintln!("{workload}: training {} steps on each side", request.steps);
    let tb = run(Implementation::Trickbench, SideMode::Losses, "losses")?;
    let py = run(Implementation::PyTorch, SideMode::Losses, "losses")?;
    let losses = compare_losses(workload, &tb, &py)?;
    let mut compiled = Vec::new();
    for &mode in &config.request.compile {
        compiled.push(compiled_losses(workload, mode, &py.losses, &run)?);
    }
    let rounds = time_rounds(workload, config, &mut compiled, stack.as_mut(), &run)?;
    for side in &mut compiled {
        side.speed = rounds.as_ref().and_then(|r| CompiledSpeed::from_rounds(&side.rounds, r));
    }
    if let (Some(stack), Some(rounds)) = (stack.as_mut(), &rounds) {
        stack.speed = StackSpeed::from_rounds(&stack.rounds, rounds);
    }
    Ok(WorkloadParity {
        workload,
        batch_size: request.batch_size,
        sample_unit: workload.family().sample_unit().to_owned(),
        case_dir: workload.id().to_owned(),
        pytorch_version: py.version,
        trickbench_threads: tb.threads,
        pytorch_threads: py.threads,
        losses,
        speed: rounds.and_then(SpeedComparison::from_rounds),
        compiled,
        stack,
    })
}

/// trickbench's losses (`tb`) against eager PyTorch's (`py`), told to the user.
fn compare_losses(workload: WorkloadId, tb: &SideOutput, py: &SideOutput) -> Result<LossAgreement, Error> {
    let losses = LossAgreement::compare(tb.losses.clone(), py.losses.clone(), LOSS_RELATIVE_TOLERANCE)
        .map_err(|e| e.context(format!("{workload}: comparing the losses")))?;
    eprintln!(
        "{workload}: loss after {} steps: trickbench {:.6}, PyTorch {:.6}; largest difference {:.2e} ({:.2e} relative): {}",
        losses.trickbench_losses.len(),
        losses.trickbench_losses.last().copied().unwrap_or(f64::NAN),
        losses.pytorch_losses.last().copied().unwrap_or(f64::NAN),
        losses.max_abs_diff,
        losses.max_rel_diff,
        if losses.agrees() { "agree" } else { "DISAGREE" }
    );
    Ok(losses)
}

/// The stacked side of `workload` from `source` on `hardware`, told to the user: its tricks and
/// the ones left out, or why there is nothing to stack.
fn stack_parity(workload: WorkloadId, source: &StackSource, hardware: &Hardware) -> StackParity {
    let (tricks, considered) = source.choose(workload, hardware);
    let unavailable = tricks.is_empty().then(|| match source {
        StackSource::Tricks(_) => format!("none of the --stack tricks can run for {workload} here"),
        StackSource::From(_) => format!(
            "no trick in the --stack-from results was significantly faster than the baseline in {workload}'s \
             training throughput and can run here"
        ),
    });
    let stack = StackParity {
        evidence: source.evidence(workload),
        tricks,
        considered,
        unavailable,
        rounds: Vec::new(),
        speed: None,
    };
    match &stack.unavailable {
        Some(why) => eprintln!("{workload}: no stacked side: {why}"),
        None => eprintln!("{workload}: stacked side: {}", stack.label()),
    }
    for trick in stack.considered.iter().filter(|t| t.decision != SpeedrunDecision::Added) {
        eprintln!("  {} left out: {}", trick.trick, trick.reason.as_deref().unwrap_or_default());
    }
    stack
}

/// The loss run of the PyTorch side compiled in `mode`, compared with eager PyTorch's `eager`
/// losses; a side that cannot compile here is reported unavailable, with inductor's reason.
fn compiled_losses(
    workload: WorkloadId,
    mode: CompileMode,
    eager: &[f64],
    run: &RunSide,
) -> Result<CompiledParity, Error> {
    let output = run(Implementation::Compiled(mode), SideMode::Losses, "losses")?;
    if let Some(reason) = output.unavailable {
        eprintln!("{workload}: torch.compile {}: not available here: {reason}", mode.id());
        return Ok(CompiledParity::unavailable(mode, reason));
    }
    let losses = CompiledLosses::compare(output.losses, eager, output.compile_s.unwrap_or(f64::NAN))
        .map_err(|e| e.context(format!("{workload}: comparing torch.compile {}'s losses", mode.id())))?;
    eprintln!(
        "{workload}: torch.compile {}: built in {:.1} s; largest loss difference from eager {:.2e} relative: {}",
        mode.id(),
        losses.compile_s,
        losses.max_rel_diff,
        if losses.agrees() { "agree" } else { "DISAGREE" }
    );
    Ok(CompiledParity { mode, unavailable: None, losses: Some(losses), rounds: Vec::new(), speed: None })
}

/// The timing rounds of every side (`None` with `--rounds 0`); each available compiled side's
/// processes are added to its entry in `compiled`, and the stacked side's to `stack`. A side that
/// reports itself unavailable is not timed in later rounds.
fn time_rounds(
    workload: WorkloadId,
    config: &ParityConfig,
    compiled: &mut [CompiledParity],
    mut stack: Option<&mut StackParity>,
    run: &RunSide,
) -> Result<Option<Vec<TimingRound>>, Error> {
    if config.request.rounds == 0 {
        return Ok(None);
    }
    let unit = workload.family().sample_unit();
    let mut rounds = Vec::new();
    for round in 0..config.request.rounds {
        let mut extra: Vec<Implementation> = compiled
            .iter()
            .filter(|c| c.unavailable.is_none())
            .map(|c| Implementation::Compiled(c.mode))
            .collect();
        if stack.as_ref().is_some_and(|s| s.unavailable.is_none()) {
            extra.push(Implementation::Stack);
        }
        let (timing, outputs) = timing_round(round, &extra, &|implementation, label| {
            run(implementation, SideMode::Time(config.request.timing), label)
        })?;
        let mut line = format!(
            "{workload}: round {}/{}: trickbench {:.0} {unit}/s, PyTorch {:.0} {unit}/s",
            round + 1,
            config.request.rounds,
            median(&timing.trickbench_window_samples_per_s).unwrap_or(f64::NAN),
            median(&timing.pytorch_window_samples_per_s).unwrap_or(f64::NAN),
        );
        for (implementation, output) in extra.into_iter().zip(outputs) {
            let timed = match implementation {
                Implementation::Compiled(mode) => record_compiled(compiled, mode, output),
                _ => record_stack(stack.as_deref_mut().expect("a stack timed is a stack asked for"), output),
            };
            if let Some(samples_per_s) = timed {
                line.push_str(&format!(", {} {samples_per_s:.0} {unit}/s", label(implementation)));
            }
        }
        eprintln!("{line} (median window)");
        rounds.push(timing);
    }
    Ok(Some(rounds))
}

/// A side's name in the progress lines of the timing rounds.
fn label(implementation: Implementation) -> String {
    match implementation {
        Implementation::Compiled(mode) => format!("compiled ({})", mode.id()),
        other => other.name().to_owned(),
    }
}

/// Adds a timing process of the side compiled in `mode` to its entry in `compiled`, or marks the
/// side unavailable with the reason it gave; returns its median window when it was timed.
fn record_compiled(compiled: &mut [CompiledParity], mode: CompileMode, output: SideOutput) -> Option<f64> {
    let side = compiled.iter_mut().find(|c| c.mode == mode).expect("a mode timed is a side asked for");
    if let Some(reason) = output.unavailable {
        *side = CompiledParity::unavailable(mode, reason);
        return None;
    }
    let compile_s = output.compile_s.unwrap_or(f64::NAN);
    let timed = median(&output.window_samples_per_s);
    side.rounds.push(CompiledRound { window_samples_per_s: output.window_samples_per_s, compile_s });
    timed
}

/// Adds a timing process of the stacked side to `stack`, or marks it unavailable with the
/// reason (its windows timed so far are kept); returns its median window when it was timed.
fn record_stack(stack: &mut StackParity, output: SideOutput) -> Option<f64> {
    if let Some(reason) = output.unavailable {
        eprintln!("the stacked side is not timed further: {reason}");
        stack.unavailable = Some(reason);
        return None;
    }
    let timed = median(&output.window_samples_per_s);
    stack.rounds.push(output.window_samples_per_s);
    timed
}

/// Timing round `round`: one process of each side through `time`, trickbench, eager PyTorch, then
/// the `extra` sides (compiled, stacked), the order rotated by one side each round (with two
/// sides: trickbench first in even rounds, PyTorch in odd ones) so that drift spreads over the
/// sides. Returns the round and the extra sides' outputs, in the order of `extra`.
fn timing_round(
    round: usize,
    extra: &[Implementation],
    time: &dyn Fn(Implementation, &str) -> Result<SideOutput, Error>,
) -> Result<(TimingRound, Vec<SideOutput>), Error> {
    let mut order = vec![Implementation::Trickbench, Implementation::PyTorch];
    order.extend_from_slice(extra);
    let shift = round % order.len();
    order.rotate_left(shift);
    let position = |side| order.iter().position(|&s| s == side);
    let mut timing = TimingRound {
        trickbench_first: position(Implementation::Trickbench) < position(Implementation::PyTorch),
        trickbench_window_samples_per_s: Vec::new(),
        pytorch_window_samples_per_s: Vec::new(),
    };
    let mut outputs = vec![None; extra.len()];
    for &implementation in &order {
        let output = time(implementation, &format!("time-{round}"))?;
        match implementation {
            Implementation::Trickbench => {
                timing.trickbench_window_samples_per_s = output.window_samples_per_s
            }
            Implementation::PyTorch => timing.pytorch_window_samples_per_s = output.window_samples_per_s,
            side => {
                let k = extra.iter().position(|&s| s == side).expect("the side is in the order");
                outputs[k] = Some(output);
            }
        }
    }
    Ok((timing, outputs.into_iter().map(|o| o.expect("every side ran")).collect()))
}

/// Runs one side's process on the case in `case_dir` in `mode` (the stacked side with the tricks
/// of `stack`), its output and stderr kept in the case directory under `label`, and reads what it
/// wrote.
fn run_side(
    sides: &Sides,
    implementation: Implementation,
    case_dir: &Path,
    mode: SideMode,
    label: &str,
    stack: &[Trick],
) -> Result<SideOutput, Error> {
    let output = case_dir.join(format!("{}-{label}.json", implementation.name()));
    let stderr_path = case_dir.join(format!("{}-{label}.stderr", implementation.name()));
    let (mut command, program) = side_command(sides, implementation, stack);
    command.arg("--case").arg(case_dir).args(["--mode", mode.id(), "--output"]).arg(&output);
    if let SideMode::Time(timing) = mode {
        command
            .args(["--warmup-steps", &timing.warmup_steps.to_string()])
            .args(["--windows", &timing.windows.to_string()])
            .args(["--steps-per-window", &timing.steps_per_window.to_string()]);
    }
    let stderr = std::fs::File::create(&stderr_path).map_err(|e| Error::io(&stderr_path, e))?;
    let starting = match implementation {
        Implementation::PyTorch | Implementation::Compiled(_) => format!(
            "starting {} (the Python with PyTorch; pass --python PATH, or run `make setup` for .venv/bin/python)",
            sides.python.display()
        ),
        Implementation::Trickbench | Implementation::Stack => format!("starting {program}"),
    };
    let child = command
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(stderr)
        .spawn()
        .map_err(|e| Error::Context { context: starting, source: Box::new(e) })?;
    let status = wait_for_side(child, &program, mode, &stderr_path)?;
    if !status.success() {
        let text = std::fs::read_to_string(&stderr_path).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        let tail = lines[lines.len().saturating_sub(STDERR_TAIL_LINES)..].join("\n");
        return Err(Error::Process(format!(
            "the {} side ({}) failed with {status}: {program}\n{tail}",
            implementation.name(),
            mode.id()
        )));
    }
    let bytes = std::fs::read(&output).map_err(|e| Error::io(&output, e))?;
    serde_json::from_slice(&bytes).map_err(|e| Error::Json { path: output, source: e })
}

/// The command of `implementation`'s side before the case's arguments, and its program as the
/// user reads it: this binary's hidden `parity-side` (with `stack`'s tricks for the stacked side),
/// or the PyTorch script (with its compile mode for a compiled side).
fn side_command(sides: &Sides, implementation: Implementation, stack: &[Trick]) -> (Command, String) {
    match implementation {
        Implementation::Trickbench | Implementation::Stack => {
            let mut c = Command::new(&sides.trickbench);
            HostAllocator::Tuned.apply(&mut c).arg("parity-side");
            if implementation == Implementation::Stack {
                let ids: Vec<&str> = stack.iter().map(|t| t.id()).collect();
                c.args(["--tricks", &ids.join(",")]);
            }
            (c, sides.trickbench.display().to_string())
        }
        Implementation::PyTorch | Implementation::Compiled(_) => {
            let mut c = Command::new(&sides.python);
            HostAllocator::Tuned.apply(&mut c).arg(&sides.script);
            if let Implementation::Compiled(mode) = implementation {
                c.args(["--compile", mode.id()]);
            }
            (c, format!("{} {}", sides.python.display(), sides.script.display()))
        }
    }
}

/// Waits for a side's `child` up to [`SIDE_TIMEOUT`], stopping it past that.
fn wait_for_side(
    mut child: Child,
    program: &str,
    mode: SideMode,
    stderr_path: &Path,
) -> Result<ExitStatus, Error> {
    let waited = child
        .wait_timeout(SIDE_TIMEOUT)
        .map_err(|e| Error::Context { context: format!("waiting for {program}"), source: Box::new(e) })?;
    match waited {
        Some(status) => Ok(status),
        None => {
            child.kill().ok();
            child.wait().ok();
            Err(Error::Process(format!(
                "{program} ({}) ran past {} s and was stopped; its stderr is in {}",
                mode.id(),
                SIDE_TIMEOUT.as_secs(),
                stderr_path.display()
            )))
        }
    }
}
