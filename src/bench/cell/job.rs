//! The job a cell process is handed as JSON: the cell, where and on what it runs, and the run's
//! settings that replace its profile's.

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use crate::bench::profile::{Profile, ProfileName};
use crate::bench::trace::{TraceTarget, TraceTargets};
use crate::device::DeviceSpec;
use crate::results::schema::{CellKey, FamilySettings, Protocol};

/// Everything a cell process needs to know, handed over as JSON.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CellJob {
    /// The cell to measure.
    pub key: CellKey,
    /// The (resolved) device.
    pub device: DeviceSpec,
    /// The profile whose settings apply.
    pub profile: ProfileName,
    /// Directory of the CIFAR-10 binary files to train on.
    pub data_dir: PathBuf,
    /// Which round of the schedule this process is (0-based).
    pub round: usize,
    /// An ImageFolder directory or tar of JPEG/PNG files to train on instead of `data_dir`
    /// (`run --images`): decoded for every batch unless `packed-dataset` is on.
    #[serde(default)]
    pub images: Option<PathBuf>,
    /// The UTF-8 text file the GPT workloads train on (`run --text`).
    #[serde(default)]
    pub text: Option<PathBuf>,
    /// Peak memory the cell may use, bytes ([`crate::results::schema::Memory::primary_bytes`]:
    /// device peak allocated on CUDA, peak resident set on CPU); beyond it the cell ends out of
    /// memory (`run --memory-budget-mib`, which makes batch-size probing testable on a CPU).
    #[serde(default)]
    pub memory_budget_bytes: Option<u64>,
    /// Train with Smith & Topin's super-convergence settings (`run --design super-convergence`)
    /// instead of the profile's.
    #[serde(default)]
    pub super_convergence: bool,
    /// The run's measurement protocol, which replaces the profile's (`None`: the profile's own).
    #[serde(default)]
    pub protocol: Option<Protocol>,
    /// The run's settings of this cell's family (batch size, data subsets, time-to-accuracy
    /// training), which replace the profile's (`None`: the profile's own).
    #[serde(default)]
    pub family_settings: Option<FamilySettings>,
    /// Where to write the profiler traces the process records after its timed windows, and of
    /// which of its members (the run's traced cells, in their first measured process; `None`: no
    /// trace).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub trace: Option<TraceTargets>,
    /// The reference cell the process builds beside this one and times in alternating windows
    /// (the paired design; `None`: the process measures this cell alone).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub paired_with: Option<CellKey>,
    /// More cells the process builds beside this one, each paired with `paired_with` as this one
    /// is, their windows interleaved with this cell's and the reference's (a multi-arm process;
    /// empty: this cell alone beside its reference).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub arms: Vec<CellKey>,
    /// Whether the reference's own windows, memory and energy are also the measurement of the
    /// reference cell's round (a reference that has no process of its own).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub measures_reference: bool,
    /// The Python with torch that runs a cell of the PyTorch engine (`run --python`; `None`:
    /// [`crate::engine::default_python`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub python: Option<PathBuf>,
    /// The socket of the run's fork server (the PyTorch engine's `PytorchServer`), which forks a
    /// cell of the PyTorch engine its engine with torch already imported (`None`: the cell starts
    /// `python`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pytorch_server: Option<PathBuf>,
    /// The folder the user's model was prepared in ([`crate::bench::user_model`]), for a cell of
    /// the `model` workload.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model_dir: Option<PathBuf>,
}

impl CellJob {
    /// The job of measuring `key` alone in round 0 on `device`, at `profile`'s settings and
    /// protocol, on the CIFAR-10 files in `data_dir`: no text, image files or user model, no
    /// memory budget, no trace, no reference beside it, the default Python and no fork server.
    pub fn new(key: CellKey, device: DeviceSpec, profile: ProfileName, data_dir: PathBuf) -> CellJob {
        CellJob {
            key,
            device,
            profile,
            data_dir,
            round: 0,
            images: None,
            text: None,
            memory_budget_bytes: None,
            super_convergence: false,
            protocol: None,
            family_settings: None,
            trace: None,
            paired_with: None,
            arms: Vec::new(),
            measures_reference: false,
            python: None,
            pytorch_server: None,
            model_dir: None,
        }
    }

    /// The folder the cell's user model was prepared in; an error for a cell without one.
    pub fn model_dir(&self) -> Result<&std::path::Path, crate::error::Error> {
        self.model_dir.as_deref().ok_or_else(|| {
            crate::error::Error::Invalid(format!("{}: the job names no prepared model folder", self.key.id()))
        })
    }

    /// The profile's settings for this cell's workload, measured as the run's protocol says and
    /// trained as the run's settings of the family say.
    pub fn settings(&self) -> Profile {
        let mut settings = self.profile.settings(self.key.workload.family());
        if let Some(protocol) = &self.protocol {
            settings = settings.following(protocol);
        }
        if let Some(family) = &self.family_settings {
            settings = settings.following_family(family);
        }
        settings
    }

    /// Where this job's own cell's trace goes, when its process traces it.
    pub fn trace_target(&self) -> Option<TraceTarget> {
        self.trace.as_ref()?.target(&self.key.id())
    }

    /// The job of the reference side of this paired job: the same process settings for the
    /// reference cell, with no pairing of its own.
    pub fn reference_side(&self) -> Option<CellJob> {
        let key = self.paired_with.clone()?;
        Some(CellJob { key, paired_with: None, arms: Vec::new(), measures_reference: false, ..self.clone() })
    }

    /// The cells this job's process measures, in the order its measurements come back: this
    /// cell, its further arms, then the reference where the job measures it.
    pub fn members(&self) -> Vec<CellKey> {
        let reference = self.paired_with.iter().filter(|_| self.measures_reference);
        std::iter::once(&self.key).chain(&self.arms).chain(reference).cloned().collect()
    }

    /// The job of each side this job's process builds: its arms ([`Self::arm_jobs`]), then the
    /// reference where it has one, measured or not.
    pub fn sides(&self) -> Vec<CellJob> {
        self.arm_jobs().into_iter().chain(self.reference_side()).collect()
    }

    /// The job of each arm of this job's process (this cell, then [`Self::arms`]), as a job of
    /// that cell alone beside the reference.
    pub fn arm_jobs(&self) -> Vec<CellJob> {
        let one = CellJob { arms: Vec::new(), measures_reference: false, ..self.clone() };
        let others = self.arms.iter().map(|key| CellJob { key: key.clone(), ..one.clone() });
        std::iter::once(one.clone()).chain(others).collect()
    }

    /// The seed of the batches of this job's process when it is DDP rank `rank` (0 without DDP):
    /// each round and each rank draws its own batches, while the weights are the same in every
    /// round.
    pub(super) fn round_seed(&self, rank: usize) -> u64 {
        self.key
            .seed
            .wrapping_mul(1_000_003)
            .wrapping_add(self.round as u64)
            .wrapping_add((rank as u64) << 40)
    }
}
