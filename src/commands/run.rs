//! `trickbench run`: plan, execute cell by cell, summarise.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use anyhow::{Context, Result};
use indicatif::{ProgressBar, ProgressStyle};

use trickbench::bench::cell::gpt_context;
use trickbench::bench::interrupt::Interrupt;
use trickbench::bench::lock::{Locked, OutputLock};
use trickbench::bench::plan::{Design, Plan, PlanRequest};
use trickbench::bench::profile::{ProfileName, ProtocolOverrides};
use trickbench::bench::runner::{self, ProcessExecutor, RunObserver, RunSpec, RESULTS_FILE};
use trickbench::bench::shard::shard_record;
use trickbench::data::text::TextCorpus;
use trickbench::data::{cifar, import};
use trickbench::device::DeviceSpec;
use trickbench::error::Error;
use trickbench::measure::stats::{BOOTSTRAP_RESAMPLES, CONFIDENCE_LEVEL};
use trickbench::results::schema::{
    CellKind, CellResult, CellStatus, DataInfo, Phase, Protocol, Results, RunInfo,
};
use trickbench::results::system::{git_commit, SystemInfo};
use trickbench::summary::{status_detail, summary_table};
use trickbench::tricks::{parse_trick_list, Applicability, Metric, Trick, TrickSet};
use trickbench::workloads::{Family, WorkloadId};

use crate::cli::RunArgs;

/// Where `run` generates synthetic data when the data directory holds no CIFAR-10.
const SYNTHETIC_DIR: &str = "data/synthetic-cifar10";

/// The first batch size a probe tries; each next one doubles it.
const PROBE_START_BATCH: usize = 64;
/// The largest batch size a probe tries.
const PROBE_MAX_BATCH: usize = 65_536;

/// Runs the plan the flags describe.
pub fn run(args: &RunArgs) -> Result<()> {
    let profile_name: ProfileName = args.profile.parse().context("--profile")?;
    let design: Design = args.design.parse().context("--design")?;
    let device = args.device.parse::<DeviceSpec>().context("--device")?.resolve()?;
    let tricks = parse_trick_list(&args.tricks)?;
    let workloads = resolve_workloads(&args.workload, profile_name, design)?;
    // The run-wide protocol (the same in every family's settings of a profile), as the flags say.
    let overrides = ProtocolOverrides {
        rounds: args.rounds,
        windows: args.windows,
        steps_per_window: args.steps_per_window,
        warmup_steps: args.warmup_steps,
    };
    let profile = profile_name.settings(workloads[0].family()).overridden(overrides)?;
    if args.batch_size == Some(0) {
        refuse!("--batch-size must be at least 1");
    }
    let seeds = args.seeds.unwrap_or(profile.tta.seeds);
    if seeds == 0 {
        refuse!("--seeds must be at least 1");
    }
    let memory_budget_bytes = match args.memory_budget_mib {
        Some(0) => refuse!("--memory-budget-mib must be at least 1"),
        Some(mib) => Some(mib << 20),
        None if !device.is_cuda() => Some(profile.cpu_memory_budget_mib << 20),
        None => None,
    };
    check_flag_combinations(args, design)?;
    let cell_timeout_s = match args.cell_timeout_s {
        Some(s) if !(s.is_finite() && s > 0.0) => {
            refuse!("--cell-timeout-s {s}: must be a positive number of seconds")
        }
        Some(s) => s,
        None => profile.cell_timeout_s,
    };
    let mut datasets = Vec::new();
    let cifar = profile_name.settings(Family::CifarResnet);
    let data_dir = if workloads.iter().any(|w| w.family() == Family::CifarResnet) {
        let (dir, info) = resolve_data(&args.data, cifar.train_samples, cifar.test_samples)?;
        if let Some(images) = &args.images {
            import::validate(images, cifar.train_samples, cifar.test_samples).context("--images")?;
        }
        datasets.push(info);
        dir
    } else {
        args.data.clone()
    };
    let gpts: Vec<WorkloadId> = workloads.iter().copied().filter(|w| w.family() == Family::CharGpt).collect();
    let text = if gpts.is_empty() {
        TextSource::NotNeeded
    } else {
        resolve_text(&args.text, &args.workload, profile_name, &gpts)?
    };
    if let TextSource::Found { info, .. } = &text {
        datasets.push(info.clone());
    }
    let mut datasets = datasets.into_iter();
    let data = datasets.next().context("no dataset to describe")?;
    let requests: Vec<PlanRequest> = workloads
        .iter()
        .map(|&workload| {
            let settings = profile_name.settings(workload.family());
            PlanRequest {
                workloads: vec![workload],
                tricks: tricks.clone(),
                device,
                batch_size: args.batch_size.unwrap_or(settings.batch_size),
                seed: args.seed,
                time_to_accuracy_batch_size: (!args.no_time_to_accuracy).then_some(settings.tta.batch_size),
                time_to_accuracy_seeds: seeds,
                large_batch_size: settings.tta.large_batch_size,
                max_batch_size: None,
                has_images: args.images.is_some(),
                missing_text: match &text {
                    TextSource::Missing(reason) => Some(reason.clone()),
                    TextSource::Found { .. } | TextSource::NotNeeded => None,
                },
            }
        })
        .collect();
    let started = chrono::Utc::now();
    let id = format!("{}-{}-{}", started.format("%Y%m%d-%H%M%S"), profile_name, design);
    let out_dir = args.out.clone().unwrap_or_else(|| PathBuf::from("reports/runs").join(&id));
    let mut info = RunInfo {
        id: out_dir.file_name().map_or(id, |n| n.to_string_lossy().into_owned()),
        started_at: started.to_rfc3339_opts(chrono::SecondsFormat::Secs, true),
        finished_at: None,
        trickbench_version: env!("CARGO_PKG_VERSION").to_owned(),
        git_commit: git_commit(),
        command: std::env::args().collect(),
        profile: profile_name.to_string(),
        design: design.to_string(),
        device,
        data,
        more_data: datasets.collect(),
        protocol: Protocol {
            warmup_steps: profile.warmup_steps,
            windows_per_process: profile.windows_per_process,
            steps_per_window: profile.steps_per_window,
            rounds: profile.rounds,
            bootstrap_resamples: BOOTSTRAP_RESAMPLES,
            confidence_level: CONFIDENCE_LEVEL,
            cell_timeout_s,
            time_to_accuracy_seeds: seeds,
            memory_budget_bytes,
            target_ci_half_width: Some(profile.target_ci_half_width),
            max_windows_per_process: Some(profile.max_windows_per_process),
            order_seed: Some(args.seed),
        },
        shard: None,
        merged: None,
    };
    if let Some(shard) = args.shard {
        let record = shard_record(shard, &info, &workloads, &known_plan(design, &requests))?;
        let units = record.units_of(shard.index).len();
        eprintln!(
            "note: shard {shard} holds {units} of the plan's {} units (plan fingerprint {})",
            record.units.len(),
            &record.fingerprint[..12]
        );
        info.shard = Some(record);
    }
    let spec = RunSpec {
        info,
        system: SystemInfo::collect(device),
        plan: Plan { cells: Vec::new() },
        data_dir,
        images: args.images.clone(),
        text: match &text {
            TextSource::Found { path, .. } => Some(path.clone()),
            TextSource::Missing(_) | TextSource::NotNeeded => None,
        },
        out_dir: out_dir.clone(),
        resume: args.resume,
        interrupt: Interrupt::new(),
    };
    let program = std::env::current_exe().context("finding the trickbench executable")?;
    let bar = ProgressBar::new(0).with_style(
        ProgressStyle::with_template("[{elapsed_precise}] {wide_bar} {pos}/{len} cell runs · {msg}")
            .expect("valid template"),
    );
    let echo = bar.clone();
    let mut executor = ProcessExecutor::new(program, out_dir.join(".cells"))
        .with_stderr_lines(Arc::new(move |line: &str| echo.println(format!("    {line}"))))
        .with_interrupt(spec.interrupt.clone());
    if let Some(mib) = args.memory_limit_mib {
        executor = executor.with_memory_limit(mib << 20);
    }
    let _lock = lock_output(&out_dir)?;
    spec.interrupt.catch_signals()?;
    let mut session = Session { spec, executor, progress: Progress { bar: bar.clone() }, results: None };
    for request in &requests {
        // The probe doubles the batch up to what the training split can fill.
        let probe_cap = match request.workloads[0].family() {
            Family::CifarResnet => session.spec.info.data.train_samples.min(PROBE_MAX_BATCH),
            Family::CharGpt => PROBE_MAX_BATCH,
        };
        match design {
            Design::BatchSweep => {
                for &workload in &request.workloads {
                    let probe = session.probe(request, workload, TrickSet::baseline(), probe_cap)?;
                    session.run(Plan::batch_sweep(request, workload, &probe.fitting))?;
                }
            }
            Design::SuperConvergence => session.run(Plan::super_convergence(request))?,
            Design::Ablation | Design::Stack | Design::LeaveOneOut => {
                let mut request = request.clone();
                if request.tricks.contains(&Trick::MaxBatch) && request.time_to_accuracy_batch_size.is_some()
                {
                    // Only where max-batch applies (not for the GPT, whose recipe fixes the batch).
                    let probed = request.workloads.clone().into_iter().filter(|&workload| {
                        Trick::MaxBatch.applicability(workload, device) == Applicability::Applies
                    });
                    for workload in probed {
                        let probe = session.probe(&request, workload, TrickSet::baseline(), probe_cap)?;
                        if request.tricks.contains(&Trick::Checkpointing) {
                            // How much larger a batch checkpointing lets fit.
                            session.probe(
                                &request,
                                workload,
                                TrickSet::only(Trick::Checkpointing),
                                probe_cap,
                            )?;
                        }
                        request.max_batch_size = probe.fitting.last().copied();
                    }
                }
                session.run(match design {
                    Design::LeaveOneOut => Plan::leave_one_out(&request),
                    _ => Plan::ablation(&request),
                })?;
                // Second half: add the tricks cumulatively, best measured first (in the shard that
                // measured them).
                let ranking = match design {
                    Design::Stack => stack_ranking(session.results()?, request.workloads[0]),
                    _ => Vec::new(),
                };
                if !ranking.is_empty() {
                    bar.println(format!(
                        "stacking tricks, best first: {}",
                        ranking.iter().map(|t| t.id()).collect::<Vec<_>>().join(", ")
                    ));
                    session.run(Plan::stack(&request, &ranking))?;
                }
            }
        }
    }
    bar.finish_and_clear();
    let results = session.results()?;
    let _ = std::fs::remove_dir(out_dir.join(".cells"));
    println!("{}", summary_table(results));
    println!("results: {}", out_dir.join(RESULTS_FILE).display());
    super::report::write_run_report(results, &out_dir)?;
    match results.cells.iter().filter(|c| c.failed()).count() {
        0 => Ok(()),
        failed => Err(Error::CellsFailed {
            failed,
            cells: results.cells.len(),
            results: out_dir.join(RESULTS_FILE),
        }
        .into()),
    }
}

/// Locks `out_dir` for as long as the returned lock lives, so that a second run (or merge) into
/// it is refused; says so when it takes over the lock of a run that did not end cleanly, or when
/// the folder's file system cannot lock.
pub(super) fn lock_output(out_dir: &Path) -> Result<Option<OutputLock>> {
    match OutputLock::acquire(out_dir)? {
        Locked::Held { lock, previous } => {
            if let Some(previous) = previous {
                eprintln!(
                    "note: {} was left by a run that ended without releasing it ({previous}); taking it over",
                    lock.path().display()
                );
            }
            Ok(Some(lock))
        }
        Locked::Unsupported { path, source } => {
            eprintln!(
                "warning: {}: cannot lock ({source}); nothing stops another run from writing into {} at the \
                 same time",
                path.display(),
                out_dir.display()
            );
            Ok(None)
        }
    }
}

/// The cells of the plans of `requests` known before anything is measured: what a sharded run
/// splits (probes, the cells planned from their answers and the stack's second half join their
/// workload's throughput unit).
fn known_plan(design: Design, requests: &[PlanRequest]) -> Plan {
    let mut plan = Plan { cells: Vec::new() };
    for request in requests {
        plan.extend(match design {
            Design::Ablation | Design::Stack => Plan::ablation(request).cells,
            Design::LeaveOneOut => Plan::leave_one_out(request).cells,
            Design::SuperConvergence => Plan::super_convergence(request).cells,
            Design::BatchSweep => Vec::new(),
        });
    }
    plan
}

/// Refuses flags that contradict each other, naming both.
fn check_flag_combinations(args: &RunArgs, design: Design) -> Result<()> {
    if args.no_time_to_accuracy && args.seeds.is_some() {
        refuse!(
            "--seeds sets the time-to-accuracy seeds, which --no-time-to-accuracy turns off; drop one of them"
        );
    }
    if design == Design::BatchSweep && args.batch_size.is_some() {
        refuse!(
            "--batch-size contradicts --design batch-sweep, which measures every batch size from 64 up to \
             the largest that fits; drop --batch-size or choose another design"
        );
    }
    match (args.memory_limit_mib, args.memory_budget_mib) {
        (Some(0), _) => refuse!("--memory-limit-mib must be at least 1 (about 1000 for a quick cell)"),
        (Some(limit), Some(budget)) if limit < budget => refuse!(
            "--memory-limit-mib {limit} is below --memory-budget-mib {budget}: no cell could reach the \
             budget; raise the limit or lower the budget"
        ),
        _ => Ok(()),
    }
}

/// The batch sizes a probe found to fit, smallest first.
struct ProbeOutcome {
    fitting: Vec<usize>,
}

/// A run in phases (probes, then the main plan, then the stack), each a plan that extends the
/// cells of the phases before it, all in one results file.
struct Session {
    spec: RunSpec,
    executor: ProcessExecutor,
    progress: Progress,
    results: Option<Results>,
}

impl Session {
    /// Runs the cells planned so far plus `plan`'s (what is already measured is skipped).
    fn run(&mut self, plan: Plan) -> Result<()> {
        let mut all = self.spec.plan.clone();
        all.extend(plan.cells);
        self.spec.plan = all;
        let results = runner::run(&self.spec, &mut self.executor, &mut self.progress)
            .with_context(|| format!("running into {}", self.spec.out_dir.display()))?;
        self.spec.resume = true;
        self.results = Some(results);
        Ok(())
    }

    /// Probes `tricks` on `workload` at batch sizes 64, 128, … up to `cap`, one process each,
    /// until one runs out of memory (or fails): each probe is a cell of the results.
    fn probe(
        &mut self,
        request: &PlanRequest,
        workload: WorkloadId,
        tricks: TrickSet,
        cap: usize,
    ) -> Result<ProbeOutcome> {
        let mut fitting = Vec::new();
        let mut batch = PROBE_START_BATCH;
        while batch <= cap {
            let cell = Plan::probe(request, workload, tricks.clone(), batch);
            if cell.not_applicable.is_some() {
                break;
            }
            let id = cell.key.id();
            self.run(Plan { cells: vec![cell] })?;
            let status = self.results()?.cells.iter().find(|c| c.id == id).map(|c| c.status.clone());
            match status {
                Some(CellStatus::Ok) => fitting.push(batch),
                Some(CellStatus::OutOfMemory { .. }) => {
                    self.progress
                        .bar
                        .println(format!("  {workload} {}: batch {batch} does not fit", tricks.label()));
                    break;
                }
                _ => break,
            }
            batch *= 2;
        }
        if let Some(largest) = fitting.last() {
            self.progress
                .bar
                .println(format!("  {workload} {}: largest batch that fits {largest}", tricks.label()));
        }
        Ok(ProbeOutcome { fitting })
    }

    /// The results so far.
    fn results(&self) -> Result<&Results> {
        self.results.as_ref().context("no cell has run yet")
    }
}

/// The workloads `--workload` names: one by id, the profile's member of a family (`resnet`,
/// `gpt`), or `all` (the profile's ResNet and GPT; ResNet-56 alone for the super-convergence
/// design, which is about it).
fn resolve_workloads(flag: &str, profile: ProfileName, design: Design) -> Result<Vec<WorkloadId>> {
    match (flag, design) {
        ("all", Design::SuperConvergence) => Ok(vec![WorkloadId::Resnet56]),
        _ => workloads_named(flag, profile),
    }
}

/// The workloads one name stands for: an id, the profile's member of a family (`resnet`,
/// `gpt`), or `all` (the profile's ResNet and GPT).
pub(super) fn workloads_named(name: &str, profile: ProfileName) -> Result<Vec<WorkloadId>> {
    Ok(match name {
        "all" => profile.workloads(),
        "resnet" => vec![profile.workload(Family::CifarResnet)],
        "gpt" => vec![profile.workload(Family::CharGpt)],
        one => vec![one.parse::<WorkloadId>().context("--workload")?],
    })
}

/// Where the GPT workloads' text comes from.
enum TextSource {
    /// No GPT runs.
    NotNeeded,
    /// The text file and its description.
    Found {
        /// The file.
        path: PathBuf,
        /// Its description in the results.
        info: DataInfo,
    },
    /// `--workload all` without a text file: the GPT cells are not applicable, for this reason.
    Missing(String),
}

/// The text the GPT workloads `gpts` train on: `path` read and checked now (UTF-8, not binary,
/// long enough for the longest context; so that a bad file fails before anything runs),
/// described with its split sizes. A missing file is an error when a GPT was asked for by name,
/// and makes the GPT cells not applicable under `--workload all`.
fn resolve_text(
    path: &Path,
    workload_flag: &str,
    profile: ProfileName,
    gpts: &[WorkloadId],
) -> Result<TextSource> {
    if !path.is_file() {
        let reason = format!(
            "no text file at {} (run `trickbench data fetch shakespeare --out {}`, or pass --text PATH \
             with any UTF-8 text)",
            path.display(),
            path.parent().filter(|p| !p.as_os_str().is_empty()).unwrap_or(Path::new(".")).display()
        );
        if workload_flag == "all" {
            eprintln!("note: {reason}; the GPT cells are not applicable");
            return Ok(TextSource::Missing(reason));
        }
        refuse!("--text: {reason}");
    }
    let corpus = TextCorpus::from_file(path).context("--text")?;
    let settings = profile.settings(Family::CharGpt);
    let context =
        gpts.iter().copied().map(gpt_context).collect::<Result<Vec<_>, _>>()?.into_iter().max().unwrap_or(1);
    corpus.check_context(context, &path.display().to_string()).context("--text")?;
    let windows = corpus.validation.len().saturating_sub(1) / context;
    let held_out_windows = settings.test_samples.map_or(windows, |n| n.min(windows));
    let info = DataInfo {
        name: path.file_name().map_or_else(|| "text".to_owned(), |n| n.to_string_lossy().into_owned()),
        path: path.display().to_string(),
        synthetic: false,
        train_samples: corpus.train.len(),
        test_samples: held_out_windows * context,
        sample_unit: "tokens".to_owned(),
    };
    Ok(TextSource::Found { path: path.to_path_buf(), info })
}

/// The data directory to train on and its description: real CIFAR-10 when `dir` holds it,
/// otherwise synthetic data generated once under `data/synthetic-cifar10` (said loudly). Every
/// file is checked as a cell would read it (size, labels), so that a damaged one is refused,
/// named, before any cell runs.
pub(super) fn resolve_data(
    dir: &Path,
    train_samples: Option<usize>,
    test_samples: Option<usize>,
) -> Result<(PathBuf, DataInfo)> {
    // A directory with some of the files is damaged, not absent: the check below names what is missing.
    let (dir, synthetic) = if cifar::has_cifar_file(dir) {
        (dir.to_path_buf(), cifar::is_synthetic_dir(dir))
    } else {
        let synthetic_dir = PathBuf::from(SYNTHETIC_DIR);
        eprintln!(
            "note: no CIFAR-10 in {} (run `trickbench data import PATH` or `trickbench data fetch cifar10 --out {}`); \
             using SYNTHETIC data from {} — every figure of this run is about synthetic images",
            dir.display(),
            dir.display(),
            synthetic_dir.display()
        );
        if !cifar::is_cifar_dir(&synthetic_dir) {
            super::data::write_synthetic(&synthetic_dir, 50_000, 10_000, 0)?;
        }
        (synthetic_dir, true)
    };
    let cifar::SplitSizes { train: train_total, test: test_total } = cifar::validate_dir(&dir)?;
    let info = DataInfo {
        name: "cifar10".to_owned(),
        path: dir.display().to_string(),
        synthetic,
        train_samples: train_samples.map_or(train_total, |n| n.min(train_total)),
        test_samples: test_samples.map_or(test_total, |n| n.min(test_total)),
        sample_unit: "images".to_owned(),
    };
    Ok((dir, info))
}

/// The tricks whose ablation cells of `workload` measured training throughput, fastest first.
fn stack_ranking(results: &Results, workload: WorkloadId) -> Vec<Trick> {
    let mut ranked: Vec<(Trick, f64)> = results
        .comparisons
        .iter()
        .filter_map(|c| {
            let cell =
                results.cells.iter().find(|cell| cell.id == c.cell && cell.key.workload == workload)?;
            let only: Vec<Trick> = cell.key.tricks.iter().collect();
            match (only.as_slice(), cell.key.kind) {
                // The stack starts from the plain recipe, in which debugging is already off.
                ([trick], CellKind::Throughput { phase: Phase::Train })
                    if *trick != Trick::DebugOff && trick.metric() == Metric::Throughput =>
                {
                    Some((*trick, c.speedup))
                }
                _ => None,
            }
        })
        .collect();
    ranked.sort_by(|a, b| b.1.total_cmp(&a.1));
    ranked.into_iter().map(|(t, _)| t).collect()
}

/// Shows progress on a bar.
struct Progress {
    bar: ProgressBar,
}

impl RunObserver for Progress {
    fn process_started(&mut self, done: usize, total: usize, cell: &str, round: usize) {
        self.bar.set_length(total as u64);
        self.bar.set_position(done as u64);
        self.bar.set_message(format!("{cell} (round {})", round + 1));
    }

    fn process_finished(&mut self, cell: &CellResult) {
        if let Some(t) = &cell.throughput {
            let unit = cell.key.workload.family().sample_unit();
            self.bar.println(format!("  {:<44} {:>8.0} {unit}/s", cell.id, t.median_samples_per_s));
        } else if cell.status != CellStatus::Ok {
            self.bar.println(format!("  {:<44} {}", cell.id, status_detail(cell).unwrap_or_default()));
        }
    }
}
