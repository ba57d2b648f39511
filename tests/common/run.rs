//! A run's description ([`RunInfo`]) and what the runner is handed to run it ([`RunSpec`]).

use std::path::{Path, PathBuf};

use trickbench::bench::design::Design;
use trickbench::bench::interrupt::Interrupt;
use trickbench::bench::plan::Plan;
use trickbench::bench::profile::ProfileName;
use trickbench::bench::runner::RunSpec;
use trickbench::device::DeviceSpec;
use trickbench::measure::host_allocator::HostAllocator;
use trickbench::results::schema::{ArmsPerProcess, DataInfo, MeasurementDesign, Protocol, RunInfo};
use trickbench::results::system::SystemInfo;

/// A short protocol: 1 warm-up step, 4 timed windows of 1 step, 2 rounds, 10 s per cell process,
/// one time-to-accuracy seed, no memory budget, windows never extended, the order seeded with 0.
pub fn protocol() -> Protocol {
    Protocol {
        warmup_steps: 1,
        windows_per_process: 4,
        steps_per_window: 1,
        rounds: 2,
        bootstrap_resamples: 2000,
        confidence_level: 0.95,
        cell_timeout_s: 10.0,
        time_to_accuracy_seeds: 1,
        memory_budget_bytes: None,
        target_ci_half_width: None,
        max_windows_per_process: None,
        order_seed: Some(0),
        pairing: MeasurementDesign::Processes,
        arms_per_process: ArmsPerProcess::One,
        host_allocator: HostAllocator::Tuned,
    }
}

/// Synthetic CIFAR-10 read from nowhere: a run whose cells a mock measures reads no data.
pub fn synthetic_cifar10() -> DataInfo {
    DataInfo {
        name: "cifar10".into(),
        path: "none".into(),
        synthetic: true,
        train_samples: 0,
        test_samples: 0,
        sample_unit: "images".into(),
    }
}

/// Builds a [`RunInfo`]: by default an unfinished smoke-profile ablation on the CPU, started
/// 2026-11-30T00:00:00Z by trickbench version "test" (no commit, no command line) on
/// [`synthetic_cifar10`] under [`protocol`], neither a shard nor merged.
pub struct RunInfoBuilder(RunInfo);

impl RunInfoBuilder {
    /// The default run, named `id`.
    pub fn new(id: &str) -> Self {
        RunInfoBuilder(RunInfo {
            id: id.into(),
            started_at: "2026-11-30T00:00:00Z".into(),
            finished_at: None,
            trickbench_version: "test".into(),
            git_commit: None,
            command: vec![],
            profile: ProfileName::Smoke,
            profile_settings: Default::default(),
            design: Design::Ablation,
            device: DeviceSpec::Cpu,
            data: synthetic_cifar10(),
            more_data: vec![],
            protocol: protocol(),
            shard: None,
            merged: None,
            model: None,
        })
    }

    /// Under `design`.
    pub fn with_design(mut self, design: Design) -> Self {
        self.0.design = design;
        self
    }

    /// Started at `started_at` and finished at `finished_at` (RFC 3339).
    pub fn with_times(mut self, started_at: &str, finished_at: &str) -> Self {
        (self.0.started_at, self.0.finished_at) = (started_at.into(), Some(finished_at.into()));
        self
    }

    /// Run by trickbench `version` built from `git_commit`, as `command`.
    pub fn with_build(mut self, version: &str, git_commit: &str, command: &[&str]) -> Self {
        self.0.trickbench_version = version.into();
        self.0.git_commit = Some(git_commit.into());
        self.0.command = command.iter().map(|&word| word.into()).collect();
        self
    }

    /// In `profile`.
    pub fn with_profile(mut self, profile: ProfileName) -> Self {
        self.0.profile = profile;
        self
    }

    /// On `device`.
    pub fn with_device(mut self, device: DeviceSpec) -> Self {
        self.0.device = device;
        self
    }

    /// On `data`.
    pub fn with_data(mut self, data: DataInfo) -> Self {
        self.0.data = data;
        self
    }

    /// Measured under `protocol`.
    pub fn with_protocol(mut self, protocol: Protocol) -> Self {
        self.0.protocol = protocol;
        self
    }

    /// The description.
    pub fn build(self) -> RunInfo {
        self.0
    }
}

/// What the runner is handed to run `plan` as `info` into `out_dir`: this machine's CPU, no data
/// or text to hand the cells (a mock measures them), a new run with an interrupt of its own and no
/// traces.
pub fn run_spec(info: RunInfo, plan: Plan, out_dir: &Path) -> RunSpec {
    RunSpec {
        info,
        system: SystemInfo::collect(DeviceSpec::Cpu),
        plan,
        images: None,
        text: None,
        data_dir: PathBuf::from("unused"),
        out_dir: out_dir.to_path_buf(),
        resume: false,
        interrupt: Interrupt::new(),
        trace: None,
        speedrun: Vec::new(),
        python: None,
        pytorch_server: None,
        model_dir: None,
    }
}
