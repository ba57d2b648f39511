//! A run's designs and profiles by name, and its time-to-accuracy settings, with their names on
//! the command line and in `results.json`. What each one means for a run (a design's phases, a
//! profile's numbers) is implemented where it acts, in `bench/`.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

use super::UnknownName;

/// An experimental design.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Design {
    /// The baseline against the baseline plus each trick, one at a time.
    Ablation,
    /// All tricks on against all on minus each one.
    LeaveOneOut,
    /// The ablation, then tricks added cumulatively, best measured first (a waterfall).
    Stack,
    /// Throughput, peak memory and time-to-accuracy of the baseline over batch sizes from 64 to
    /// the largest that fits (probed first; the out-of-memory point is part of the results).
    BatchSweep,
    /// Smith & Topin's super-convergence comparison: ResNet-56 trained to accuracy with a
    /// piecewise-constant step schedule and with 1cycle.
    SuperConvergence,
    /// The ablation (or the effects of `--from` results files), then the tricks whose effect was
    /// significant combined and trained to the target against the baseline.
    Speedrun,
    /// Every trick on and off in a two-level fractional factorial of resolution V or more: each
    /// trick's main effect and each pair's interaction, then the configuration the fitted model
    /// predicts best measured against the baseline.
    Factorial,
}

/// The designs' names.
impl Design {
    /// Every design, in the order `--help` lists them.
    pub const ALL: [Design; 7] = [
        Design::Ablation,
        Design::LeaveOneOut,
        Design::Stack,
        Design::BatchSweep,
        Design::SuperConvergence,
        Design::Speedrun,
        Design::Factorial,
    ];

    /// The name on the command line and in results.
    pub fn id(self) -> &'static str {
        match self {
            Design::Ablation => "ablation",
            Design::LeaveOneOut => "leave-one-out",
            Design::Stack => "stack",
            Design::BatchSweep => "batch-sweep",
            Design::SuperConvergence => "super-convergence",
            Design::Speedrun => "speedrun",
            Design::Factorial => "factorial",
        }
    }

    /// Whether a set lacking one trick is compared with the largest set rather than with the
    /// baseline (leave-one-out).
    pub fn compares_with_all_on(self) -> bool {
        self == Design::LeaveOneOut
    }
}

impl fmt::Display for Design {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.id())
    }
}

impl FromStr for Design {
    type Err = UnknownName;

    fn from_str(s: &str) -> Result<Self, UnknownName> {
        Design::ALL.into_iter().find(|d| d.id() == s).ok_or_else(|| {
            let valid: Vec<&str> = Design::ALL.iter().map(|d| d.id()).collect();
            UnknownName { kind: "design", given: s.to_owned(), valid: valid.join(", ") }
        })
    }
}

/// A named profile.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum ProfileName {
    /// Seconds: checks the whole pipeline end to end with tiny measurements; its numbers are not
    /// meant to be read.
    Smoke,
    /// Minutes on a 2-core CPU: ResNet-8 with a test subset and a modest accuracy target; the
    /// 2-layer GPT with a modest validation-loss target.
    Quick,
    /// The GPU default: ResNet-56 on full CIFAR-10 and nanoGPT's shakespeare-char GPT, one
    /// time-to-target seed.
    Standard,
    /// The GPU reference: ResNet-56 to 93% test accuracy and the GPT to validation loss 1.47,
    /// three seeds.
    Full,
}

/// The profiles' names.
impl ProfileName {
    /// Every profile.
    pub const ALL: [ProfileName; 4] =
        [ProfileName::Smoke, ProfileName::Quick, ProfileName::Standard, ProfileName::Full];

    /// The name on the command line and in results.
    pub fn id(self) -> &'static str {
        match self {
            ProfileName::Smoke => "smoke",
            ProfileName::Quick => "quick",
            ProfileName::Standard => "standard",
            ProfileName::Full => "full",
        }
    }
}

impl fmt::Display for ProfileName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.id())
    }
}

impl FromStr for ProfileName {
    type Err = UnknownName;

    fn from_str(s: &str) -> Result<Self, UnknownName> {
        ProfileName::ALL.into_iter().find(|p| p.id() == s).ok_or_else(|| UnknownName {
            kind: "profile",
            given: s.to_owned(),
            valid: "smoke, quick, standard, full".to_owned(),
        })
    }
}

/// What `--profile` asks for: a named profile, or `auto`, which picks one for the device.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(into = "String", try_from = "String")]
pub enum ProfileRequest {
    /// `standard` on a CUDA GPU, `quick` otherwise.
    Auto,
    /// This profile.
    Named(ProfileName),
}

/// Every value of `--profile`, `auto` first.
pub const PROFILE_REQUESTS: [ProfileRequest; 5] = [
    ProfileRequest::Auto,
    ProfileRequest::Named(ProfileName::Smoke),
    ProfileRequest::Named(ProfileName::Quick),
    ProfileRequest::Named(ProfileName::Standard),
    ProfileRequest::Named(ProfileName::Full),
];

impl fmt::Display for ProfileRequest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ProfileRequest::Auto => f.write_str("auto"),
            ProfileRequest::Named(name) => name.fmt(f),
        }
    }
}

impl FromStr for ProfileRequest {
    type Err = UnknownName;

    fn from_str(s: &str) -> Result<Self, UnknownName> {
        PROFILE_REQUESTS.into_iter().find(|p| p.to_string() == s).ok_or_else(|| {
            let valid = "auto, smoke, quick, standard, full".to_owned();
            UnknownName { kind: "profile", given: s.to_owned(), valid }
        })
    }
}

impl From<ProfileRequest> for String {
    fn from(p: ProfileRequest) -> String {
        p.to_string()
    }
}

impl TryFrom<String> for ProfileRequest {
    type Error = UnknownName;

    fn try_from(s: String) -> Result<Self, UnknownName> {
        s.parse()
    }
}

/// How a time-to-accuracy cell trains and when it stops.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct TtaSettings {
    /// Samples per step of time-to-target training (images, or windows for the GPT).
    pub batch_size: usize,
    /// The held-out metric to reach: test accuracy (a fraction, reached from below) for the
    /// ResNets, validation loss (nats per token, reached from above) for the GPT.
    pub target: f64,
    /// Optimizer steps the schedule is planned over, when set (the GPT's); otherwise
    /// `planned_epochs` epochs of the training split.
    pub planned_steps: Option<usize>,
    /// Training time allowed, seconds (evaluation excluded).
    pub budget_s: f64,
    /// Epochs of the training split the learning-rate schedule is planned over, unless
    /// `planned_steps` is set.
    pub planned_epochs: usize,
    /// Optimizer steps between evaluations at `batch_size` (other batch sizes evaluate after as
    /// many samples).
    pub eval_every_steps: usize,
    /// Learning rate at `batch_size`: SGD's for the ResNets (scaled linearly for other batch
    /// sizes), AdamW's peak for the GPT.
    pub base_lr: f64,
    /// The large batch at which `lars` and `lamb` are measured, against SGD at the same batch.
    pub large_batch_size: usize,
}

/// The host allocator the measuring processes of a run start with.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "kebab-case")]
pub enum HostAllocator {
    /// glibc's malloc keeping freed memory for the next step (MALLOC_MMAP_THRESHOLD_ at 32 MiB,
    /// MALLOC_TRIM_THRESHOLD_ at 16 GiB), so that paired models do not change each other's page
    /// faults (what results files without the field were measured with).
    #[default]
    Tuned,
    /// glibc's malloc with its defaults (or what the user's environment sets), as a plain Python
    /// training script gets it.
    System,
}

impl HostAllocator {
    /// Whether it is [`HostAllocator::Tuned`] (what a results file without the field means).
    pub fn is_tuned(&self) -> bool {
        *self == HostAllocator::Tuned
    }

    /// What it is, in words, for the run's first lines and the report.
    pub fn description(self) -> &'static str {
        match self {
            HostAllocator::Tuned => {
                "host allocator tuned (glibc malloc keeps freed memory for the next step)"
            }
            HostAllocator::System => {
                "host allocator system (glibc malloc's defaults, as a plain Python script)"
            }
        }
    }
}
