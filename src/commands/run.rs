//! `trickbench run`: plan, execute cell by cell, summarise.

use std::path::{Path, PathBuf};

use anyhow::{Context, Result};

use trickbench::bench::cell::gpt_context;
use trickbench::bench::interrupt::Interrupt;
use trickbench::bench::lock::{Locked, OutputLock};
use trickbench::bench::overrides::{ProfileOverrides, RunProfiles, TtaOverrides};
use trickbench::bench::plan::{Design, Plan, PlanRequest};
use trickbench::bench::profile::{Profile, ProfileName};
use trickbench::bench::progress::{Progress, ProgressMode};
use trickbench::bench::runner::{self, ProcessExecutor, RunSpec, RESULTS_FILE};
use trickbench::bench::shard::shard_record;
use trickbench::data::text::TextCorpus;
use trickbench::data::{cifar, import};
use trickbench::device::{DeviceSpec, Hardware};
use trickbench::error::Error;
use trickbench::measure::stats::{BOOTSTRAP_RESAMPLES, CONFIDENCE_LEVEL};
use trickbench::results::schema::{
    profile_text, CellKind, CellStatus, DataInfo, Phase, ProfileSettings, Protocol, Results, RunInfo,
};
use trickbench::results::system::{git_commit, SystemInfo};
use trickbench::summary::{closing_table, workload_table};
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
    let progress = Progress::new(ProgressMode::detect(args.quiet));
    let setup = setup(args)?;
    let workload_ids = setup.workloads.iter().map(|w| w.id()).collect::<Vec<_>>().join(", ");
    progress.note(&format!(
        "trickbench run: {} · {} design · {} · {workload_ids}",
        profile_text(setup.profile.id(), setup.reason.as_deref()),
        setup.design,
        setup.device
    ));
    let inputs = resolve_inputs(args, &setup, &progress)?;
    let requests = plan_requests(args, &setup, &inputs.text)?;
    let started = chrono::Utc::now();
    let id = format!("{}-{}-{}", started.format("%Y%m%d-%H%M%S"), setup.profile, setup.design);
    let out_dir = args.out.clone().unwrap_or_else(|| PathBuf::from("reports/runs").join(&id));
    let id = out_dir.file_name().map_or(id, |n| n.to_string_lossy().into_owned());
    let mut info = run_info(args, &setup, id, started, inputs.data, inputs.more_data);
    if let Some(shard) = args.shard {
        let record = shard_record(shard, &info, &setup.workloads, &known_plan(setup.design, &requests))?;
        let units = record.units_of(shard.index).len();
        progress.note(&format!(
            "note: shard {shard} holds {units} of the plan's {} units (plan fingerprint {})",
            record.units.len(),
            &record.fingerprint[..12]
        ));
        info.shard = Some(record);
    }
    let spec = RunSpec {
        info,
        system: SystemInfo::collect(setup.device),
        plan: Plan { cells: Vec::new() },
        data_dir: inputs.data_dir,
        images: args.images.clone(),
        text: match &inputs.text {
            TextSource::Found { path, .. } => Some(path.clone()),
            TextSource::Missing(_) | TextSource::NotNeeded => None,
        },
        out_dir: out_dir.clone(),
        resume: args.resume,
        interrupt: Interrupt::new(),
    };
    let program = std::env::current_exe().context("finding the trickbench executable")?;
    let mut executor = ProcessExecutor::new(program, out_dir.join(".cells"))
        .with_stderr_lines(progress.child_lines())
        .with_interrupt(spec.interrupt.clone());
    if let Some(mib) = args.memory_limit_mib {
        executor = executor.with_memory_limit(mib << 20);
    }
    let _lock = lock_output(&out_dir)?;
    spec.interrupt.catch_signals()?;
    let mut session = Session { spec, executor, progress, results: None };
    let shown = session.run_requests(&requests, setup.design)?;
    session.progress.finish();
    let results = session.results()?;
    let _ = std::fs::remove_dir(out_dir.join(".cells"));
    session.progress.table(&closing_table(results, &shown));
    println!("results: {}", out_dir.join(RESULTS_FILE).display());
    super::report::write_run_report(results, &out_dir)?;
    refuse_failed_cells(results, &out_dir)
}

/// The error a run or a merge ends with when any of its cells did not measure (its own exit
/// status, apart from bad usage), after everything was written.
pub(super) fn refuse_failed_cells(results: &Results, out_dir: &Path) -> Result<()> {
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

/// What the flags decide before any file is read but the profile file.
struct Setup {
    design: Design,
    device: DeviceSpec,
    /// The profile picked, and why when `--profile auto` picked it.
    profile: ProfileName,
    reason: Option<String>,
    tricks: Vec<Trick>,
    workloads: Vec<WorkloadId>,
    profiles: RunProfiles,
    /// Peak memory a cell may use, bytes (`None`: the device's own limit).
    memory_budget_bytes: Option<u64>,
}

/// The design, device, profile, tricks, workloads, settings and memory budget the flags ask for,
/// checked.
fn setup(args: &RunArgs) -> Result<Setup> {
    let design = args.design;
    let device = args.device.resolve().context("--device")?;
    let (profile, reason) = args.profile.pick(device, tch::Cuda::is_available());
    let tricks = parse_trick_list(&args.tricks)?;
    let workloads = resolve_workloads(&args.workload, profile, design)?;
    check_flag_combinations(args, design)?;
    let profiles = run_profiles(args, profile, &workloads)?;
    if args.batch_size == Some(0) {
        refuse!("--batch-size must be at least 1");
    }
    let memory_budget_bytes = match args.memory_budget_mib {
        Some(0) => refuse!("--memory-budget-mib must be at least 1"),
        Some(mib) => Some(mib << 20),
        None if !device.is_cuda() => Some(profiles.run_wide().cpu_memory_budget_mib << 20),
        None => None,
    };
    Ok(Setup { design, device, profile, reason, tricks, workloads, profiles, memory_budget_bytes })
}

/// What the results record about run `id` before anything is measured.
fn run_info(
    args: &RunArgs,
    setup: &Setup,
    id: String,
    started: chrono::DateTime<chrono::Utc>,
    data: DataInfo,
    more_data: Vec<DataInfo>,
) -> RunInfo {
    RunInfo {
        id,
        started_at: started.to_rfc3339_opts(chrono::SecondsFormat::Secs, true),
        finished_at: None,
        trickbench_version: env!("CARGO_PKG_VERSION").to_owned(),
        git_commit: git_commit(),
        command: std::env::args().collect(),
        profile: setup.profile.to_string(),
        profile_settings: ProfileSettings {
            asked: Some(args.profile),
            reason: setup.reason.clone(),
            file: args.profile_file.as_ref().map(|f| f.display().to_string()),
            families: setup.profiles.family_settings(),
        },
        design: setup.design.to_string(),
        device: setup.device,
        data,
        more_data,
        protocol: protocol(setup.profiles.run_wide(), setup.memory_budget_bytes, args.seed),
        shard: None,
        merged: None,
    }
}

/// The run's profile for each family it trains: the profile's settings, replaced by the profile
/// file's (`--profile-file`), replaced by the flags'.
fn run_profiles(args: &RunArgs, name: ProfileName, workloads: &[WorkloadId]) -> Result<RunProfiles> {
    let file = args.profile_file.as_deref().map(ProfileOverrides::from_file).transpose()?;
    let flags = ProfileOverrides {
        rounds: args.rounds,
        windows_per_process: args.windows,
        // `--windows N` times exactly N windows.
        max_windows_per_process: args.windows,
        steps_per_window: args.steps_per_window,
        warmup_steps: args.warmup_steps,
        cell_timeout_s: args.cell_timeout_s,
        time_to_accuracy_seeds: args.seeds,
        time_to_accuracy: TtaOverrides {
            target: args.target,
            planned_epochs: args.epochs,
            planned_steps: args.steps,
            budget_s: args.budget_s,
            ..TtaOverrides::default()
        },
        ..ProfileOverrides::default()
    };
    let mut families: Vec<Family> = workloads.iter().map(|w| w.family()).collect();
    families.dedup();
    let layers: Vec<&ProfileOverrides> = file.iter().chain([&flags]).collect();
    Ok(RunProfiles::new(name, &families, &layers)?)
}

/// The measurement protocol of a run with the run-wide settings of `profile`, its rounds' orders
/// drawn from `order_seed`.
fn protocol(profile: &Profile, memory_budget_bytes: Option<u64>, order_seed: u64) -> Protocol {
    Protocol {
        warmup_steps: profile.warmup_steps,
        windows_per_process: profile.windows_per_process,
        steps_per_window: profile.steps_per_window,
        rounds: profile.rounds,
        bootstrap_resamples: BOOTSTRAP_RESAMPLES,
        confidence_level: CONFIDENCE_LEVEL,
        cell_timeout_s: profile.cell_timeout_s,
        time_to_accuracy_seeds: profile.time_to_accuracy_seeds,
        memory_budget_bytes,
        target_ci_half_width: Some(profile.target_ci_half_width),
        max_windows_per_process: Some(profile.max_windows_per_process),
        order_seed: Some(order_seed),
    }
}

/// What the cells read: the CIFAR-10 directory and the GPT's text, checked now, and their
/// descriptions for the results.
struct Inputs {
    data_dir: PathBuf,
    text: TextSource,
    data: DataInfo,
    more_data: Vec<DataInfo>,
}

/// The data the run's workloads train on: CIFAR-10 (or synthetic data) for the ResNets, the text
/// file for the GPTs, each cut to its family's settings.
fn resolve_inputs(args: &RunArgs, setup: &Setup, progress: &Progress) -> Result<Inputs> {
    let (profiles, workloads) = (&setup.profiles, &setup.workloads);
    let note = |line: &str| progress.note(line);
    let mut datasets = Vec::new();
    let data_dir = if workloads.iter().any(|w| w.family() == Family::CifarResnet) {
        let cifar = profiles.of(Family::CifarResnet)?;
        let (dir, info) = resolve_data(&args.data, cifar.train_samples, cifar.test_samples, &note)?;
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
        let held_out = profiles.of(Family::CharGpt)?.test_samples;
        resolve_text(&args.text, &args.workload, held_out, &gpts, &note)?
    };
    if let TextSource::Found { info, .. } = &text {
        datasets.push(info.clone());
    }
    let mut datasets = datasets.into_iter();
    let data = datasets.next().context("no dataset to describe")?;
    Ok(Inputs { data_dir, text, data, more_data: datasets.collect() })
}

/// One plan request per workload, with its family's settings and the flags.
fn plan_requests(args: &RunArgs, setup: &Setup, text: &TextSource) -> Result<Vec<PlanRequest>> {
    let hardware = Hardware::probe(setup.device);
    setup
        .workloads
        .iter()
        .map(|&workload| {
            let settings = setup.profiles.of(workload.family())?;
            Ok(PlanRequest {
                workloads: vec![workload],
                tricks: setup.tricks.clone(),
                hardware: hardware.clone(),
                batch_size: args.batch_size.unwrap_or(settings.batch_size),
                seed: args.seed,
                time_to_accuracy_batch_size: (!args.no_time_to_accuracy).then_some(settings.tta.batch_size),
                time_to_accuracy_seeds: settings.time_to_accuracy_seeds,
                large_batch_size: settings.tta.large_batch_size,
                max_batch_size: None,
                has_images: args.images.is_some(),
                missing_text: match text {
                    TextSource::Missing(reason) => Some(reason.clone()),
                    TextSource::Found { .. } | TextSource::NotNeeded => None,
                },
            })
        })
        .collect()
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
    let time_to_accuracy_flags = [
        ("--seeds", args.seeds.is_some()),
        ("--target", args.target.is_some()),
        ("--epochs", args.epochs.is_some()),
        ("--steps", args.steps.is_some()),
        ("--budget-s", args.budget_s.is_some()),
    ];
    if let Some((flag, _)) = time_to_accuracy_flags.iter().find(|(_, set)| *set && args.no_time_to_accuracy) {
        refuse!(
            "{flag} sets time-to-accuracy training, which --no-time-to-accuracy turns off; drop one of them"
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
    /// Runs every request in turn. Each workload's table is printed as soon as it is measured,
    /// with an estimate of what the rest will take; returns the workloads whose tables were shown.
    fn run_requests(&mut self, requests: &[PlanRequest], design: Design) -> Result<Vec<WorkloadId>> {
        let mut shown = Vec::new();
        for (i, request) in requests.iter().enumerate() {
            self.run_request(request, design)?;
            let rest = &requests[i + 1..];
            if rest.is_empty() {
                break;
            }
            let results = self.results()?;
            for &workload in &request.workloads {
                self.progress.table(&workload_table(results, workload));
                shown.push(workload);
            }
            let protocol = &self.spec.info.protocol;
            let processes =
                known_plan(design, rest).schedule(protocol.rounds, protocol.order_seed.unwrap_or(0)).len();
            let names: Vec<String> = rest.iter().flat_map(|r| &r.workloads).map(|w| w.to_string()).collect();
            let estimate = self
                .progress
                .time_for(processes)
                .map_or_else(String::new, |t| format!(", {t} at this run's pace"));
            self.progress.note(&format!("next: {}, {processes} cell processes{estimate}", names.join(", ")));
        }
        Ok(shown)
    }

    /// Runs the plan of `request` as `design` says: first the probes it needs, then its cells,
    /// and for the stack design the tricks added cumulatively.
    fn run_request(&mut self, request: &PlanRequest, design: Design) -> Result<()> {
        let hardware = request.hardware.clone();
        // The probe doubles the batch up to what the training split can fill.
        let probe_cap = match request.workloads[0].family() {
            Family::CifarResnet => self.spec.info.data.train_samples.min(PROBE_MAX_BATCH),
            Family::CharGpt => PROBE_MAX_BATCH,
        };
        match design {
            Design::BatchSweep => {
                for &workload in &request.workloads {
                    let probe = self.probe(request, workload, TrickSet::baseline(), probe_cap)?;
                    self.run(Plan::batch_sweep(request, workload, &probe.fitting))?;
                }
                return Ok(());
            }
            Design::SuperConvergence => return self.run(Plan::super_convergence(request)),
            Design::Ablation | Design::Stack | Design::LeaveOneOut => {}
        }
        let mut request = request.clone();
        if request.tricks.contains(&Trick::MaxBatch) && request.time_to_accuracy_batch_size.is_some() {
            // Only where max-batch applies (not for the GPT, whose recipe fixes the batch).
            let probed = request.workloads.clone().into_iter().filter(|&workload| {
                Trick::MaxBatch.applicability(workload, &hardware) == Applicability::Applies
            });
            for workload in probed {
                let probe = self.probe(&request, workload, TrickSet::baseline(), probe_cap)?;
                if request.tricks.contains(&Trick::Checkpointing) {
                    // How much larger a batch checkpointing lets fit.
                    self.probe(&request, workload, TrickSet::only(Trick::Checkpointing), probe_cap)?;
                }
                request.max_batch_size = probe.fitting.last().copied();
            }
        }
        self.run(match design {
            Design::LeaveOneOut => Plan::leave_one_out(&request),
            _ => Plan::ablation(&request),
        })?;
        // Second half: add the tricks cumulatively, best measured first (in the shard that
        // measured them).
        let ranking = match design {
            Design::Stack => stack_ranking(self.results()?, request.workloads[0]),
            _ => Vec::new(),
        };
        if !ranking.is_empty() {
            self.progress.note(&format!(
                "stacking tricks, best first: {}",
                ranking.iter().map(|t| t.id()).collect::<Vec<_>>().join(", ")
            ));
            self.run(Plan::stack(&request, &ranking))?;
        }
        Ok(())
    }

    /// Runs the cells planned so far plus `plan`'s (what is already measured is skipped).
    fn run(&mut self, plan: Plan) -> Result<()> {
        let mut all = self.spec.plan.clone();
        all.extend(plan.cells);
        self.spec.plan = all;
        self.progress.begin_phase();
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
                        .note(&format!("  {workload} {}: batch {batch} does not fit", tricks.label()));
                    break;
                }
                _ => break,
            }
            batch *= 2;
        }
        if let Some(largest) = fitting.last() {
            self.progress
                .note(&format!("  {workload} {}: largest batch that fits {largest}", tricks.label()));
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
    held_out_windows: Option<usize>,
    gpts: &[WorkloadId],
    note: &dyn Fn(&str),
) -> Result<TextSource> {
    if !path.is_file() {
        let reason = format!(
            "no text file at {} (run `trickbench data fetch shakespeare --out {}`, or pass --text PATH \
             with any UTF-8 text)",
            path.display(),
            path.parent().filter(|p| !p.as_os_str().is_empty()).unwrap_or(Path::new(".")).display()
        );
        if workload_flag == "all" {
            note(&format!("note: {reason}; the GPT cells are not applicable"));
            return Ok(TextSource::Missing(reason));
        }
        refuse!("--text: {reason}");
    }
    let corpus = TextCorpus::from_file(path).context("--text")?;
    let context =
        gpts.iter().copied().map(gpt_context).collect::<Result<Vec<_>, _>>()?.into_iter().max().unwrap_or(1);
    corpus.check_context(context, &path.display().to_string()).context("--text")?;
    let windows = corpus.validation.len().saturating_sub(1) / context;
    let held_out_windows = held_out_windows.map_or(windows, |n| n.min(windows));
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
    note: &dyn Fn(&str),
) -> Result<(PathBuf, DataInfo)> {
    // A directory with some of the files is damaged, not absent: the check below names what is missing.
    let (dir, synthetic) = if cifar::has_cifar_file(dir) {
        (dir.to_path_buf(), cifar::is_synthetic_dir(dir))
    } else {
        let synthetic_dir = PathBuf::from(SYNTHETIC_DIR);
        note(&format!(
            "note: no CIFAR-10 in {} (run `trickbench data import PATH` or `trickbench data fetch cifar10 --out {}`); \
             using SYNTHETIC data from {} — every figure of this run is about synthetic images",
            dir.display(),
            dir.display(),
            synthetic_dir.display()
        ));
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
