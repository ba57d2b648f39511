//! A whole cross-check: in each round, for each trick, one process of the PyTorch engine and one
//! of the plain script, in an order that alternates between rounds; the results rewritten after
//! every process.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use wait_timeout::ChildExt;

use crate::bench::cell::paired::build_order;
use crate::bench::cell::{CellJob, Outcome};
use crate::bench::design::Design;
use crate::bench::engines::{cell_engine, RunServer};
use crate::bench::plan::{Plan, PlanRequest};
use crate::bench::runner::{CellExecutor, Execution, ProcessExecutor};
use crate::crosscheck::config::CrosscheckConfig;
use crate::crosscheck::results::{
    CrosscheckResults, Source, SourceEffect, SourceProcess, TrickCheck, RESULTS_FILE,
};
use crate::crosscheck::summary::{markdown, SUMMARY_FILE};
use crate::crosscheck::PLAIN_SCRIPT;
use crate::engine::Engine;
use crate::error::Error;
use crate::hardware::Hardware;
use crate::results::schema::{
    CellKey, CellKind, CellStatus, MeasurementDesign, Phase, ProcessMeasurement, Protocol,
};
use crate::results::store::{self, StoreError};
use crate::results::system::{git_commit, SystemInfo};
use crate::stats::median;
use crate::tricks::Trick;
use crate::workloads::WorkloadId;

/// The copy of the plain script a cross-check runs, left beside its results.
pub const PLAIN_FILE: &str = "plain.py";

/// Runs the cross-check of `config`, telling `progress` of every process; returns the results
/// (also in `config.out`).
pub fn run(config: &CrosscheckConfig, progress: &dyn Fn(&str)) -> Result<CrosscheckResults, Error> {
    std::fs::create_dir_all(&config.out).map_err(|e| Error::io(&config.out, e))?;
    let script = config.out.join(PLAIN_FILE);
    std::fs::write(&script, PLAIN_SCRIPT).map_err(|e| Error::io(&script, e))?;
    let (mut results, keys) = empty_results(config)?;
    let server = cell_engine(Engine::Pytorch).start_run(&config.python, config.request.host_allocator)?;
    let scratch = tempfile::Builder::new()
        .prefix("trickbench-crosscheck-")
        .tempdir()
        .map_err(|e| Error::io(std::env::temp_dir(), e))?;
    let mut sources = Sources {
        config,
        script,
        server,
        executor: ProcessExecutor::new(config.request.trickbench.clone(), scratch.path().to_owned())
            .with_host_allocator(config.request.host_allocator),
        threads: results.threads,
        keys,
    };
    let total =
        config.request.rounds * results.checks.iter().filter(|c| c.not_applicable.is_none()).count() * 2;
    let mut done = 0;
    save(&results, &config.out)?;
    for round in 0..config.request.rounds {
        for index in round_order(results.checks.len(), round) {
            if results.checks[index].not_applicable.is_some() {
                continue;
            }
            for source in source_order(round) {
                done += 1;
                let check = &mut results.checks[index];
                let measured = sources.measure(check, index, source, round)?;
                progress(&progress_line(done, total, round, check, source, &measured));
                record(check, source, measured);
                save(&results, &config.out)?;
            }
        }
    }
    Ok(results)
}

/// Writes `results` and their summary into `out`, each atomically.
fn save(results: &CrosscheckResults, out: &Path) -> Result<(), Error> {
    store::write_json_atomically(results, &out.join(RESULTS_FILE))?;
    let summary = out.join(SUMMARY_FILE);
    store::write_atomically(&summary, |file| {
        file.write_all(markdown(results).as_bytes())
            .map_err(|source| StoreError::Write { path: summary.clone(), source })
    })?;
    Ok(())
}

/// What one process gave: its pairs, the trick found not applicable, or a failure.
#[derive(Debug)]
enum Measured {
    Process(SourceProcess),
    NotApplicable(String),
    Failed(String),
}

/// Adds what a process of `source` measured to `check`, and judges the two effects again.
fn record(check: &mut TrickCheck, source: Source, measured: Measured) {
    match measured {
        Measured::Process(process) => check.effect_of(source).add(process),
        Measured::NotApplicable(reason) => check.not_applicable = Some(reason),
        Measured::Failed(why) => check.effect_of(source).failures.push(why),
    }
    check.judge();
}

/// The line telling the user what a process measured.
fn progress_line(
    done: usize,
    total: usize,
    round: usize,
    check: &TrickCheck,
    source: Source,
    measured: &Measured,
) -> String {
    let what = match measured {
        Measured::Process(p) => {
            let effect = median(&p.pair_ratios).map_or_else(|| "no pairs".to_owned(), |m| format!("{m:.3}×"));
            format!("{effect} over {} pairs", p.pair_ratios.len())
        }
        Measured::NotApplicable(reason) => format!("not applicable: {reason}"),
        Measured::Failed(why) => format!("failed: {why}"),
    };
    let (workload, trick) = (check.workload.id(), check.trick.id());
    format!("[{done}/{total}] round {} · {workload} {trick} · {}: {what}", round + 1, source.label())
}

/// The checks in the order round `round` runs them: as asked in even rounds, reversed in odd ones.
fn round_order(checks: usize, round: usize) -> Vec<usize> {
    if round.is_multiple_of(2) {
        (0..checks).collect()
    } else {
        (0..checks).rev().collect()
    }
}

/// Which source's process of a trick runs first in round `round`: the engine's in even rounds.
fn source_order(round: usize) -> [Source; 2] {
    if round.is_multiple_of(2) {
        [Source::Engine, Source::Plain]
    } else {
        [Source::Plain, Source::Engine]
    }
}

/// Each check's cell and the cell it is paired with, where the trick applies.
type Keys = Vec<Option<(CellKey, CellKey)>>;

/// The results before anything is measured (how the check runs, each trick's check), and each
/// check's cell and reference.
fn empty_results(config: &CrosscheckConfig) -> Result<(CrosscheckResults, Keys), Error> {
    let settings = config.profile.settings(crate::workloads::Family::CifarResnet);
    let threads = usize::try_from(tch::get_num_threads()).unwrap_or(1);
    let hardware = Hardware::probe(config.device);
    let (checks, keys): (Vec<TrickCheck>, Keys) = config
        .checks
        .iter()
        .map(|&(workload, trick)| planned_check(config, &hardware, workload, trick))
        .collect::<Result<Vec<_>, _>>()?
        .into_iter()
        .unzip();
    let results = CrosscheckResults {
        started_at: chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Secs, true),
        trickbench_version: env!("CARGO_PKG_VERSION").to_owned(),
        git_commit: git_commit(),
        command: config.request.command.clone(),
        system: SystemInfo::collect(config.device),
        device: config.device,
        profile: config.profile,
        host_allocator: config.request.host_allocator,
        rounds: config.request.rounds,
        pairs_per_process: config.request.pairs,
        steps_per_window: config.steps_per_window(),
        warmup_steps: settings.warmup_steps,
        threads,
        checks,
    };
    Ok((results, keys))
}

/// `trick`'s check on `workload` (its cell on the PyTorch engine and the cell a run pairs it
/// with, as the ablation plans them on `hardware`, or why the engine cannot run it there), and
/// those two cells where it can.
fn planned_check(
    config: &CrosscheckConfig,
    hardware: &Hardware,
    workload: WorkloadId,
    trick: Trick,
) -> Result<(TrickCheck, Option<(CellKey, CellKey)>), Error> {
    let settings = config.profile.settings(workload.family());
    let batch_size = config.batch_size(workload);
    let request = PlanRequest {
        engines: vec![Engine::Pytorch],
        batch_size,
        seed: config.request.seed,
        multi_arm: false,
        ..PlanRequest::new(vec![workload], vec![trick], hardware.clone(), &settings)
    };
    let plan = Plan::ablation(&request);
    let train = CellKind::Throughput { phase: Phase::Train };
    let index = plan
        .cells
        .iter()
        .position(|c| c.key.kind == train && c.key.tricks.has(trick) && c.key.reference_for.is_none())
        .ok_or_else(|| {
            Error::Invalid(format!(
                "{}: the ablation plans no training cell of {}",
                workload.id(),
                trick.id()
            ))
        })?;
    let cell = &plan.cells[index];
    let reference = match &cell.not_applicable {
        Some(_) => None,
        None => Some(plan.paired_reference(index, Design::Ablation).ok_or_else(|| {
            Error::Invalid(format!("{}: a run does not pair {} with a reference", workload.id(), trick.id()))
        })?),
    };
    let check = TrickCheck {
        workload,
        trick,
        cell: cell.key.id(),
        reference: reference.as_ref().map(CellKey::id),
        batch_size,
        not_applicable: cell.not_applicable.clone(),
        engine: SourceEffect::default(),
        plain: SourceEffect::default(),
        agreement: None,
    };
    Ok((check, reference.map(|r| (cell.key.clone(), r))))
}

/// What runs the two sources' processes.
struct Sources<'c> {
    config: &'c CrosscheckConfig,
    script: PathBuf,
    server: Option<Box<dyn RunServer>>,
    executor: ProcessExecutor,
    threads: usize,
    /// Each check's cell and the cell it is paired with, in the order of the checks (`None`
    /// where the trick is not applicable).
    keys: Keys,
}

impl Sources<'_> {
    /// One process of `source` for `check` in `round`.
    fn measure(
        &mut self,
        check: &TrickCheck,
        index: usize,
        source: Source,
        round: usize,
    ) -> Result<Measured, Error> {
        match source {
            Source::Engine => self.engine_process(check, index, round),
            Source::Plain => self.plain_process(check, round),
        }
    }

    /// The engine's process of the trick's cell paired with its reference, as a run's process of
    /// one arm, timing exactly the cross-check's pairs.
    fn engine_process(&mut self, check: &TrickCheck, index: usize, round: usize) -> Result<Measured, Error> {
        let config = self.config;
        let Some((key, reference)) = self.keys[index].clone() else {
            return Ok(Measured::NotApplicable(check.not_applicable.clone().unwrap_or_default()));
        };
        let job = CellJob {
            round,
            text: Some(config.request.text.clone()),
            protocol: Some(self.protocol(check.workload)),
            paired_with: Some(reference),
            measures_reference: true,
            python: Some(config.python.clone()),
            pytorch_server: self.server.as_ref().map(|s| s.socket().to_owned()),
            ..CellJob::new(key, config.device, config.profile, config.data_dir.clone())
        };
        let timeout =
            Duration::from_secs_f64(config.profile.settings(check.workload.family()).cell_timeout_s);
        Ok(match self.executor.execute(&job, timeout) {
            Execution::Measured(outcomes) => engine_measured(outcomes, round, config.steps_per_window()),
            Execution::Failed(status) | Execution::FailedIn { status, .. } => status_of(status),
            Execution::Interrupted(signal) => Measured::Failed(format!("interrupted by signal {signal}")),
        })
    }

    /// The protocol of an engine's process: the profile's warm-up and window length, exactly the
    /// cross-check's pairs.
    fn protocol(&self, workload: WorkloadId) -> Protocol {
        let settings = self.config.profile.settings(workload.family());
        let pairs = self.config.request.pairs;
        let mut protocol = crate::bench::config::protocol(
            &settings,
            None,
            self.config.request.seed,
            (MeasurementDesign::Paired, crate::results::schema::ArmsPerProcess::One),
            self.config.request.host_allocator,
        );
        protocol.windows_per_process = pairs;
        protocol.steps_per_window = self.config.steps_per_window();
        protocol.max_windows_per_process = Some(pairs);
        protocol
    }

    /// The plain script's process of the trick, built and paired as the engine's process is.
    fn plain_process(&mut self, check: &TrickCheck, round: usize) -> Result<Measured, Error> {
        let config = self.config;
        let settings = config.profile.settings(check.workload.family());
        let output = tempfile::Builder::new()
            .prefix("plain-")
            .suffix(".json")
            .tempfile()
            .map_err(|e| Error::io(std::env::temp_dir(), e))?;
        let build_first = if build_order(1, round)[0] == 0 { "trick" } else { "reference" };
        let mut command = Command::new(&config.python);
        command.arg(&self.script).args([
            "--workload",
            check.workload.id(),
            "--trick",
            check.trick.id(),
            "--batch",
            &check.batch_size.to_string(),
            "--pairs",
            &config.request.pairs.to_string(),
            "--steps-per-window",
            &config.steps_per_window().to_string(),
            "--warmup-steps",
            &settings.warmup_steps.to_string(),
            "--build-first",
            build_first,
            "--threads",
            &self.threads.to_string(),
            "--seed",
            &(config.request.seed + round as u64).to_string(),
            "--device",
            &config.device.to_string(),
            "--output",
        ]);
        command.arg(output.path());
        config.request.host_allocator.apply(&mut command);
        let timeout = Duration::from_secs_f64(settings.cell_timeout_s);
        Ok(match run_plain(&mut command, timeout, &self.python_text())? {
            Ok(()) => read_plain(output.path(), round, config.steps_per_window())
                .unwrap_or_else(|e| Measured::Failed(e.to_string())),
            Err(why) => Measured::Failed(why),
        })
    }

    /// The plain script's command, for messages.
    fn python_text(&self) -> String {
        format!("{} {}", self.config.python.display(), self.script.display())
    }
}

/// What the engine's process of `steps_per_window`-step windows measured: the trick's side (its
/// pairs) and the reference's, in that order.
fn engine_measured(outcomes: Vec<Outcome>, round: usize, steps_per_window: usize) -> Measured {
    let mut outcomes = outcomes.into_iter();
    let (trick, reference) = match (outcomes.next(), outcomes.next()) {
        (Some(Ok(trick)), Some(Ok(reference))) => (trick, reference),
        (Some(Err(status)), _) | (_, Some(Err(status))) => return status_of(status),
        _ => return Measured::Failed("the engine's process measured fewer than its two sides".to_owned()),
    };
    let Some(paired) = &trick.paired else {
        return Measured::Failed("the engine's process timed no pairs".to_owned());
    };
    let per_step = |m: &ProcessMeasurement| {
        let steps = (m.window_samples_per_s.len() * steps_per_window).max(1) as f64;
        m.timed_page_faults.map(|faults| faults as f64 / steps)
    };
    Measured::Process(SourceProcess {
        round,
        ran_first: source_order(round)[0] == Source::Engine,
        pair_ratios: paired.ratios(),
        reference_samples_per_s: median(&paired.reference_samples_per_s()).unwrap_or(0.0),
        trick_page_faults_per_step: per_step(&trick),
        reference_page_faults_per_step: per_step(&reference),
    })
}

/// What a process that did not measure says: not applicable with its reason, else a failure.
fn status_of(status: CellStatus) -> Measured {
    match status {
        CellStatus::NotApplicable { reason, .. } => Measured::NotApplicable(reason),
        CellStatus::Failed { error, .. } | CellStatus::OutOfMemory { error, .. } => Measured::Failed(error),
        CellStatus::Timeout { limit_s, .. } => Measured::Failed(format!("ran past its {limit_s:.0} s")),
        CellStatus::Ok => Measured::Failed("the process ended without a measurement".to_owned()),
    }
}

/// Runs the plain script's `command` to its end within `timeout`: `Err` with the reason (its
/// stderr's last lines) where it fails; an error where it cannot start.
fn run_plain(command: &mut Command, timeout: Duration, program: &str) -> Result<Result<(), String>, Error> {
    let mut child = command
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| Error::Process(format!("starting the plain script ({program}): {e}")))?;
    let stderr = child.stderr.take().expect("stderr is piped");
    let reader = std::thread::spawn(move || std::io::read_to_string(stderr).unwrap_or_default());
    let status = child.wait_timeout(timeout).map_err(|e| Error::Process(format!("{program}: {e}")))?;
    let Some(status) = status else {
        let _ = child.kill();
        let _ = child.wait();
        return Ok(Err(format!("ran past its {:.0} s", timeout.as_secs_f64())));
    };
    let text = reader.join().unwrap_or_default();
    if status.success() {
        return Ok(Ok(()));
    }
    let tail: Vec<&str> = text.lines().rev().take(5).collect::<Vec<_>>().into_iter().rev().collect();
    Ok(Err(format!("{program} ended with {status}: {}", tail.join(" / "))))
}

/// The plain script's output file as a process of `round`, of `steps_per_window`-step windows.
fn read_plain(path: &Path, round: usize, steps_per_window: usize) -> Result<Measured, Error> {
    #[derive(serde::Deserialize)]
    struct Pair {
        trick_s: f64,
        reference_s: f64,
        trick_minor_faults: u64,
        reference_minor_faults: u64,
    }
    #[derive(serde::Deserialize)]
    struct Output {
        samples_per_window: f64,
        pairs: Vec<Pair>,
    }
    let text = std::fs::read_to_string(path).map_err(|e| Error::io(path, e))?;
    let output: Output =
        serde_json::from_str(&text).map_err(|e| Error::Json { path: path.into(), source: e })?;
    let reference: Vec<f64> =
        output.pairs.iter().map(|p| output.samples_per_window / p.reference_s).collect();
    let steps = (output.pairs.len() * steps_per_window).max(1) as f64;
    let per_step =
        |faults: fn(&Pair) -> u64| Some(output.pairs.iter().map(faults).sum::<u64>() as f64 / steps);
    Ok(Measured::Process(SourceProcess {
        round,
        ran_first: source_order(round)[0] == Source::Plain,
        pair_ratios: output.pairs.iter().map(|p| p.reference_s / p.trick_s).collect(),
        reference_samples_per_s: median(&reference).unwrap_or(0.0),
        trick_page_faults_per_step: per_step(|p| p.trick_minor_faults),
        reference_page_faults_per_step: per_step(|p| p.reference_minor_faults),
    }))
}
