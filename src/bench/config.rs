//! A run's configuration: what the user asks for ([`RunRequest`]), checked and resolved into the
//! device, profile, workloads, settings of each family and memory budget ([`RunConfig`]), and what
//! follows from it alone: the plan requests and the record of the run.

use std::path::PathBuf;
use std::str::FromStr;

use crate::bench::design::Design;
use crate::bench::overrides::{ProfileOverrides, RunProfiles};
use crate::bench::plan::PlanRequest;
use crate::bench::profile::{Profile, ProfileName, ProfileRequest};
use crate::bench::shard::Shard;
use crate::bench::trace::CellGlob;
use crate::device::DeviceSpec;
use crate::engine::{default_python, probe_python, setup_python, Engine, EngineChoice, PytorchInfo};
use crate::error::Error;
use crate::hardware::Hardware;
use crate::measure::host_allocator::HostAllocator;
use crate::results::model::UserModel;
use crate::results::schema::{
    multi_arm, ArmsPerProcess, DataInfo, MeasurementDesign, ProfileSettings, Protocol, RunInfo,
};
use crate::results::system::git_commit;
use crate::stats::{BOOTSTRAP_RESAMPLES, CONFIDENCE_LEVEL};
use crate::tricks::{parse_trick_list, Trick};
use crate::workloads::user;
use crate::workloads::{Family, WorkloadId};

/// What `--workload` names: one workload by id, the profile's member of a family (`resnet`,
/// `gpt`), or `all` (the profile's ResNet and GPT).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WorkloadChoice {
    /// The profile's ResNet and GPT.
    All,
    /// The profile's member of this family.
    Family(Family),
    /// This workload.
    One(WorkloadId),
}

impl WorkloadChoice {
    /// The workloads this choice stands for under `profile`.
    pub fn workloads(self, profile: ProfileName) -> Vec<WorkloadId> {
        match self {
            WorkloadChoice::All => profile.workloads(),
            WorkloadChoice::Family(family) => vec![profile.workload(family)],
            WorkloadChoice::One(workload) => vec![workload],
        }
    }
}

impl FromStr for WorkloadChoice {
    type Err = Error;

    fn from_str(s: &str) -> Result<Self, Error> {
        Ok(match s {
            "all" => WorkloadChoice::All,
            "resnet" => WorkloadChoice::Family(Family::CifarResnet),
            "gpt" => WorkloadChoice::Family(Family::CharGpt),
            one => WorkloadChoice::One(one.parse()?),
        })
    }
}

/// A `--tricks` list: trick ids and groups, comma-separated, resolved to tricks in order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TrickList(pub Vec<Trick>);

impl FromStr for TrickList {
    type Err = Error;

    fn from_str(s: &str) -> Result<Self, Error> {
        parse_trick_list(s).map(TrickList)
    }
}

/// Where a run's data comes from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InputPaths {
    /// Directory of CIFAR-10 binary files (synthetic data is generated when it holds none).
    pub data: PathBuf,
    /// ImageFolder directory or tar of JPEG/PNG files to decode instead of `data`.
    pub images: Option<PathBuf>,
    /// UTF-8 text file the GPT workloads train on.
    pub text: PathBuf,
}

/// A run as the user asks for it, before anything is checked.
#[derive(Debug, Clone)]
pub struct RunRequest {
    /// The workloads (`None`: all of them, or none beside `model`).
    pub workload: Option<WorkloadChoice>,
    /// The user's own network, measured as a workload of its own (`--model SPEC`).
    pub model: Option<String>,
    /// Side of the square images made for a `model` without its own batches (`None`: 224).
    pub image_size: Option<u32>,
    /// Whether the largest batch that fits the `model` is probed before its cells
    /// (`--no-batch-probe` turns it off).
    pub probe_model_batch: bool,
    /// The tricks to measure.
    pub tricks: Vec<Trick>,
    /// The experimental design.
    pub design: Design,
    /// The profile asked for.
    pub profile: ProfileRequest,
    /// The profile file whose values replace the profile's.
    pub profile_file: Option<PathBuf>,
    /// The flags' values, which replace the profile file's.
    pub flags: ProfileOverrides,
    /// The device asked for.
    pub device: DeviceSpec,
    /// Seed of weights, data order and augmentation; also draws the rounds' orders.
    pub seed: u64,
    /// Samples per step (`None`: each family's profile's).
    pub batch_size: Option<usize>,
    /// Whether the time-to-accuracy cells run.
    pub time_to_accuracy: bool,
    /// The shard of the plan to run, if the sweep is split.
    pub shard: Option<Shard>,
    /// Peak memory a cell may use, MiB (`None`: the profile's budget on a CPU, the device's own
    /// memory on a GPU).
    pub memory_budget_mib: Option<u64>,
    /// Hard cap on each cell process's data segment, MiB.
    pub memory_limit_mib: Option<u64>,
    /// How trick cells are measured against their references: in pairs where the trick allows
    /// it, or every one in processes of its own.
    pub pairing: MeasurementDesign,
    /// How many paired cells share a process.
    pub arms_per_process: ArmsPerProcess,
    /// The host allocator the measuring processes start with.
    pub host_allocator: HostAllocator,
    /// The data.
    pub inputs: InputPaths,
    /// Output directory (`None`: `reports/runs/<run id>`).
    pub out: Option<PathBuf>,
    /// Continue the run in `out`, skipping cells already measured.
    pub resume: bool,
    /// The throughput cells to record a profiler trace of, after the timed windows of their first
    /// measured process (`None`: no traces).
    pub trace: Option<CellGlob>,
    /// The results files the speedrun design takes the tricks' effects from instead of running
    /// the ablation first (`--from`, in order; empty: it measures its own).
    pub from: Vec<PathBuf>,
    /// The engines the cells train on (`None`: [`automatic_engines`]).
    pub engine: Option<EngineChoice>,
    /// The Python with torch that runs the PyTorch engine (`None`: [`default_python`]).
    pub python: Option<PathBuf>,
    /// The command line, as recorded in the results.
    pub command: Vec<String>,
}

/// A checked run: the request with its device, profile, workloads and settings resolved.
#[derive(Debug, Clone)]
pub struct RunConfig {
    /// What was asked for.
    pub request: RunRequest,
    /// The device, resolved.
    pub device: DeviceSpec,
    /// The profile picked.
    pub profile: ProfileName,
    /// Why `--profile auto` picked it, when it did.
    pub profile_reason: Option<String>,
    /// The workloads, in run order.
    pub workloads: Vec<WorkloadId>,
    /// The settings of each family the run trains.
    pub profiles: RunProfiles,
    /// Peak memory a cell may use, bytes (`None`: the device's own limit).
    pub memory_budget_bytes: Option<u64>,
    /// The engines the cells train on, libtorch first.
    pub engines: Vec<Engine>,
    /// The Python that runs the PyTorch engine, checked to import torch where that engine runs.
    pub python: PathBuf,
    /// That Python and its torch, where the PyTorch engine runs.
    pub pytorch: Option<PytorchInfo>,
    /// Which engines a run without `--engine` chose, and why (`None`: `--engine` said).
    pub engine_reason: Option<String>,
}

impl RunConfig {
    /// Checks `request` and resolves what it leaves open; a flag or value that cannot work is
    /// refused, named.
    pub fn new(request: RunRequest) -> Result<Self, Error> {
        let device = request.device.resolve().map_err(|e| e.context("--device"))?;
        let (profile, profile_reason) = request.profile.pick(device, tch::Cuda::is_available());
        let workloads = run_workloads(&request, profile)?;
        check_flag_combinations(&request)?;
        let profiles = run_profiles(&request, profile, &workloads)?;
        if request.batch_size == Some(0) {
            return Err(invalid("--batch-size must be at least 1"));
        }
        let memory_budget_bytes = match request.memory_budget_mib {
            Some(0) => return Err(invalid("--memory-budget-mib must be at least 1")),
            Some(mib) => Some(mib << 20),
            // A rehearsed GPU's tensors live on the CPU: they are held to the CPU's budget.
            None if device.cuda_index().is_none() => Some(profiles.run_wide().cpu_memory_budget_mib << 20),
            None => None,
        };
        let python = request.python.clone().unwrap_or_else(default_python);
        let (engines, pytorch, engine_reason) = match request.engine {
            Some(choice) => (choice.engines(), None, None),
            None => {
                let (engines, pytorch, why) = automatic_engines(&request);
                (engines, pytorch, Some(why))
            }
        };
        let pytorch = match pytorch {
            Some(info) => Some(info),
            None if engines.contains(&Engine::Pytorch) => Some(probe_python(&python).map_err(|why| {
                invalid(&format!(
                    "--engine: the PyTorch engine needs a Python with torch, and {why} (pass --python PATH, or \
                     run `make setup` for .venv/bin/python)"
                ))
            })?),
            None => None,
        };
        Ok(Self {
            request,
            device,
            profile,
            profile_reason,
            workloads,
            profiles,
            memory_budget_bytes,
            engines,
            python,
            pytorch,
            engine_reason,
        })
    }

    /// Whether the user's model trains to a target: the run trains to targets and one is set for
    /// the model (`--target`, or a profile file's).
    pub fn model_trains_to_target(&self) -> bool {
        self.request.model.is_some()
            && self.request.time_to_accuracy
            && self.profiles.target_set(Family::UserModel)
    }

    /// One plan request per workload, with its family's settings and the flags; `missing_text`
    /// says why the GPT cells cannot run, when their text is missing; `model` is the user's
    /// prepared network, where the run measures one (it trains to a target only where one is set
    /// for it, and only where it classifies CIFAR-10's images).
    pub fn plan_requests(
        &self,
        missing_text: Option<&str>,
        model: Option<&UserModel>,
    ) -> Result<Vec<PlanRequest>, Error> {
        let request = &self.request;
        let hardware = Hardware::probe(self.device);
        let refusal = model.filter(|_| self.model_trains_to_target()).and_then(user::target_refusal);
        if let Some(why) = refusal {
            return Err(Error::Invalid(format!(
                "--target: without a dataset() in its file, your model trains to a target on CIFAR-10's 32×32 \
                 images in 10 classes (--data or --images), and {why}; drop --target, define dataset() in \
                 the file, or give the model such inputs (--image-size 32, or a batch() of 32×32 images)"
            )));
        }
        self.workloads
            .iter()
            .map(|&workload| {
                let settings = self.profiles.of(workload.family())?;
                let own_model = workload == WorkloadId::Model;
                let trains_to_target =
                    request.time_to_accuracy && (!own_model || self.model_trains_to_target());
                Ok(PlanRequest {
                    batch_size: self.batch_size(workload.family())?,
                    seed: request.seed,
                    time_to_accuracy_batch_size: trains_to_target.then_some(settings.tta.batch_size),
                    model: model.filter(|_| own_model).cloned(),
                    probe_model_batch: request.probe_model_batch,
                    has_images: request.inputs.images.is_some(),
                    missing_text: missing_text.map(str::to_owned),
                    engines: self.engines.clone(),
                    multi_arm: multi_arm(request.pairing, request.arms_per_process),
                    ..PlanRequest::new(vec![workload], request.tricks.clone(), hardware.clone(), settings)
                })
            })
            .collect()
    }

    /// Samples per step of the throughput cells of `family`: `--batch-size`, else the profile's.
    pub fn batch_size(&self, family: Family) -> Result<usize, Error> {
        Ok(self.request.batch_size.unwrap_or(self.profiles.of(family)?.batch_size))
    }

    /// What the results record about run `id`, started at `started`, on `data` (and
    /// `more_data`), before anything is measured.
    pub fn run_info(
        &self,
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
            command: self.request.command.clone(),
            profile: self.profile,
            profile_settings: ProfileSettings {
                asked: Some(self.request.profile),
                reason: self.profile_reason.clone(),
                file: self.request.profile_file.as_ref().map(|f| f.display().to_string()),
                families: self.profiles.family_settings(),
            },
            design: self.request.design,
            device: self.device,
            data,
            more_data,
            protocol: protocol(
                self.profiles.run_wide(),
                self.memory_budget_bytes,
                self.request.seed,
                (self.request.pairing, self.request.arms_per_process),
                self.request.host_allocator,
            ),
            shard: None,
            merged: None,
            model: None,
        }
    }
}

/// The workloads of a run, in run order: those `--workload` names (all by default, none by
/// default beside `--model`), then the user's model.
fn run_workloads(request: &RunRequest, profile: ProfileName) -> Result<Vec<WorkloadId>, Error> {
    let mut workloads = match (request.workload, &request.model) {
        (None, Some(_)) => Vec::new(),
        (None | Some(WorkloadChoice::All), _) => {
            request.design.all_workloads().unwrap_or_else(|| profile.workloads())
        }
        (Some(choice), _) => choice.workloads(profile),
    };
    if let Some(spec) = &request.model {
        if !request.design.measures_own_model() {
            return Err(Error::Invalid(format!(
                "--model {spec}: the {} design measures the reference workloads only; the ablation and stack \
                 designs measure your model",
                request.design
            )));
        }
        workloads.push(WorkloadId::Model);
    }
    Ok(workloads)
}

/// The library's refusal of bad usage, `message` naming the flag.
fn invalid(message: &str) -> Error {
    Error::Invalid(message.to_owned())
}

/// The engines of a run without `--engine`: both where the set-up's Python (`--python`, else the checkout's `.venv/bin/python`; never a `python3` found
/// on the PATH) imports torch; libtorch alone otherwise. Returns that Python's torch where both
/// run, and a line saying which and why.
fn automatic_engines(request: &RunRequest) -> (Vec<Engine>, Option<PytorchInfo>, String) {
    let libtorch = |why: String| (vec![Engine::Libtorch], None, format!("engines: libtorch only, {why}"));
    let Some(python) = request.python.clone().or_else(setup_python) else {
        return libtorch(
            "as there is no .venv/bin/python here (`make setup` makes it; --python PATH names another Python \
             with torch)"
                .to_owned(),
        );
    };
    match probe_python(&python) {
        Ok(info) => {
            let why = format!(
                "engines: libtorch and pytorch (eager PyTorch {} with {}); --engine libtorch measures libtorch \
                 alone",
                info.torch_version,
                python.display()
            );
            (vec![Engine::Libtorch, Engine::Pytorch], Some(info), why)
        }
        Err(why) => libtorch(format!("as {why}")),
    }
}

/// Refuses flags that contradict each other, naming both.
fn check_flag_combinations(request: &RunRequest) -> Result<(), Error> {
    let (flags, tta) = (&request.flags, &request.flags.time_to_accuracy);
    let time_to_accuracy_flags = [
        ("--seeds", flags.time_to_accuracy_seeds.is_some()),
        ("--target", tta.target.is_some()),
        ("--epochs", tta.planned_epochs.is_some()),
        ("--steps", tta.planned_steps.is_some()),
        ("--budget-s", tta.budget_s.is_some()),
    ];
    if let Some((flag, _)) = time_to_accuracy_flags.iter().find(|(_, set)| *set && !request.time_to_accuracy)
    {
        return Err(Error::Invalid(format!(
            "{flag} sets time-to-accuracy training, which --no-time-to-accuracy turns off; drop one of them"
        )));
    }
    check_speedrun_flags(request)?;
    if request.design == Design::Factorial && request.pairing == MeasurementDesign::Processes {
        return Err(invalid(
            "--unpaired contradicts --design factorial, whose effects are contrasts of each configuration's \
             windows paired with the baseline's; drop --unpaired",
        ));
    }
    if request.design.probes_every_batch() && request.batch_size.is_some() {
        return Err(Error::Invalid(format!(
            "--batch-size contradicts --design {}, which measures every batch size from 64 up to the \
             largest that fits; drop --batch-size or choose another design",
            request.design
        )));
    }
    match (request.memory_limit_mib, request.memory_budget_mib) {
        (Some(0), _) => Err(invalid("--memory-limit-mib must be at least 1 (about 1000 for a quick cell)")),
        (Some(limit), Some(budget)) if limit < budget => Err(Error::Invalid(format!(
            "--memory-limit-mib {limit} is below --memory-budget-mib {budget}: no cell could reach the \
             budget; raise the limit or lower the budget"
        ))),
        _ => Ok(()),
    }
}

/// Refuses what the speedrun design cannot do and `--from` without it, naming the flag.
fn check_speedrun_flags(request: &RunRequest) -> Result<(), Error> {
    let speedrun = request.design.needs_whole_ablation();
    if !request.from.is_empty() && !speedrun {
        return Err(Error::Invalid(format!(
            "--from gives the speedrun design the tricks' measured effects; --design {} does not use it: \
             drop --from or choose --design speedrun",
            request.design
        )));
    }
    if speedrun && !request.time_to_accuracy {
        return Err(invalid(
            "--design speedrun trains the baseline and the combination to the target, which \
             --no-time-to-accuracy turns off; drop one of them",
        ));
    }
    if speedrun && request.shard.is_some() {
        return Err(invalid(
            "--shard cannot split --design speedrun: its combination is chosen from the whole ablation. \
             Shard a --design ablation run instead, merge the shards, and pass the merged results.json to \
             --design speedrun --from",
        ));
    }
    Ok(())
}

/// The run's profile for each family it trains: the profile's settings, replaced by the profile
/// file's, replaced by the flags'.
fn run_profiles(
    request: &RunRequest,
    name: ProfileName,
    workloads: &[WorkloadId],
) -> Result<RunProfiles, Error> {
    let file = request.profile_file.as_deref().map(ProfileOverrides::from_file).transpose()?;
    let mut families: Vec<Family> = workloads.iter().map(|w| w.family()).collect();
    families.dedup();
    let layers: Vec<&ProfileOverrides> = file.iter().chain([&request.flags]).collect();
    RunProfiles::new(name, &families, &layers)
}

/// The measurement protocol of a run with the run-wide settings of `profile`, its rounds' orders
/// drawn from `order_seed`.
pub(crate) fn protocol(
    profile: &Profile,
    memory_budget_bytes: Option<u64>,
    order_seed: u64,
    (pairing, arms_per_process): (MeasurementDesign, ArmsPerProcess),
    host_allocator: HostAllocator,
) -> Protocol {
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
        pairing,
        arms_per_process,
        host_allocator,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `trickbench run`'s defaults on the CPU with the quick profile.
    fn request() -> RunRequest {
        RunRequest {
            workload: Some(WorkloadChoice::All),
            model: None,
            image_size: None,
            probe_model_batch: true,
            tricks: vec![Trick::AvoidSync],
            design: Design::Ablation,
            profile: ProfileRequest::Named(ProfileName::Quick),
            profile_file: None,
            flags: ProfileOverrides::default(),
            device: DeviceSpec::Cpu,
            seed: 0,
            batch_size: None,
            time_to_accuracy: true,
            shard: None,
            memory_budget_mib: None,
            memory_limit_mib: None,
            pairing: MeasurementDesign::Paired,
            arms_per_process: ArmsPerProcess::Many,
            host_allocator: HostAllocator::Tuned,
            inputs: InputPaths { data: "data/cifar10".into(), images: None, text: "text.txt".into() },
            out: None,
            resume: false,
            trace: None,
            from: Vec::new(),
            engine: Some(EngineChoice::Libtorch),
            python: None,
            command: vec!["trickbench".into(), "run".into()],
        }
    }

    fn refusal(request: RunRequest) -> String {
        RunConfig::new(request).unwrap_err().to_string()
    }

    #[test]
    fn workload_names_stand_for_the_profile_s_members() {
        let quick = ProfileName::Quick;
        let parse = |s: &str| s.parse::<WorkloadChoice>().unwrap().workloads(quick);
        assert_eq!(parse("all"), [WorkloadId::Resnet8, WorkloadId::GptMini]);
        assert_eq!(parse("gpt"), [WorkloadId::GptMini]);
        assert_eq!(parse("resnet56"), [WorkloadId::Resnet56]);
        assert_eq!(
            "resnet".parse::<WorkloadChoice>().unwrap().workloads(ProfileName::Full),
            [WorkloadId::Resnet56]
        );
        let error = "vgg".parse::<WorkloadChoice>().unwrap_err().to_string();
        assert!(error.contains("'vgg'") && error.contains("resnet56"), "{error}");
    }

    #[test]
    fn a_checked_run_resolves_workloads_settings_and_the_cpu_memory_budget() {
        let config = RunConfig::new(request()).unwrap();
        assert_eq!((config.device, config.profile), (DeviceSpec::Cpu, ProfileName::Quick));
        assert_eq!(config.workloads, [WorkloadId::Resnet8, WorkloadId::GptMini]);
        assert_eq!(config.memory_budget_bytes, Some(config.profiles.run_wide().cpu_memory_budget_mib << 20));
        let requests = config.plan_requests(Some("no text"), None).unwrap();
        assert_eq!(requests.len(), 2);
        assert_eq!(requests[1].missing_text.as_deref(), Some("no text"));
        let data = DataInfo {
            name: "cifar10".into(),
            path: "data/cifar10".into(),
            synthetic: false,
            train_samples: 50_000,
            test_samples: 1000,
            sample_unit: "images".into(),
        };
        let info = config.run_info("r".into(), chrono::Utc::now(), data, Vec::new());
        assert_eq!(
            (info.design, info.profile, info.protocol.order_seed),
            (Design::Ablation, ProfileName::Quick, Some(0))
        );
        let super_convergence =
            RunConfig::new(RunRequest { design: Design::SuperConvergence, ..request() }).unwrap();
        assert_eq!(super_convergence.workloads, [WorkloadId::Resnet56], "the experiment is about ResNet-56");
    }

    #[test]
    fn without_engine_a_run_takes_both_where_its_python_has_torch_and_says_why_otherwise() {
        let auto = |design, python: Option<&str>| {
            let config = RunConfig::new(RunRequest {
                design,
                engine: None,
                python: python.map(PathBuf::from),
                ..request()
            })
            .unwrap();
            (config.engines, config.pytorch.is_some(), config.engine_reason.unwrap())
        };
        let (engines, pytorch, why) = auto(Design::Ablation, Some("/no/such/python"));
        assert_eq!((engines, pytorch), (vec![Engine::Libtorch], false));
        assert!(why.contains("libtorch only") && why.contains("/no/such/python"), "{why}");
        for design in Design::ALL {
            let (engines, _, _) = auto(design, None);
            assert_eq!(engines, [Engine::Libtorch, Engine::Pytorch], "{design} runs on both engines");
        }
        // Unit tests run in the checkout, whose `make setup` made .venv/bin/python with torch.
        let (engines, pytorch, why) = auto(Design::Ablation, None);
        assert_eq!((engines, pytorch), (vec![Engine::Libtorch, Engine::Pytorch], true));
        assert!(why.contains("libtorch and pytorch") && why.contains(".venv/bin/python"), "{why}");
        let chosen =
            RunConfig::new(RunRequest { engine: Some(EngineChoice::Libtorch), ..request() }).unwrap();
        assert_eq!((chosen.engines, chosen.engine_reason), (vec![Engine::Libtorch], None));
    }

    #[test]
    fn contradicting_flags_are_refused_naming_both() {
        let mut flags = ProfileOverrides::default();
        flags.time_to_accuracy.budget_s = Some(10.0);
        let error = refusal(RunRequest { flags, time_to_accuracy: false, ..request() });
        assert!(
            error.starts_with("--budget-s sets time-to-accuracy training, which --no-time-to-accuracy"),
            "{error}"
        );
        let error = refusal(RunRequest { design: Design::BatchSweep, batch_size: Some(64), ..request() });
        let unpaired = RunRequest { pairing: MeasurementDesign::Processes, ..request() };
        let factorial = refusal(RunRequest { design: Design::Factorial, ..unpaired });
        assert!(factorial.contains("--unpaired contradicts --design factorial"), "{factorial}");
        assert!(error.contains("--batch-size contradicts --design batch-sweep"), "{error}");
        let error =
            refusal(RunRequest { memory_limit_mib: Some(100), memory_budget_mib: Some(200), ..request() });
        assert!(error.contains("--memory-limit-mib 100 is below --memory-budget-mib 200"), "{error}");
        assert_eq!(
            refusal(RunRequest { batch_size: Some(0), ..request() }),
            "--batch-size must be at least 1"
        );
    }
}
