//! Measurement profiles: how big the models and data are, and how long each cell measures.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

use crate::error::Error;
use crate::workloads::WorkloadId;

/// A named profile.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum ProfileName {
    /// Seconds: checks the whole pipeline end to end with tiny measurements; its numbers are not
    /// meant to be read.
    Smoke,
    /// Minutes on a 2-core CPU: ResNet-8, a test subset, a modest accuracy target.
    Quick,
    /// The GPU default: ResNet-56 on full CIFAR-10, one time-to-accuracy seed.
    Standard,
    /// The GPU reference: ResNet-56 on full CIFAR-10 to 93% test accuracy, three seeds.
    Full,
}

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

    /// The settings of this profile.
    pub fn settings(self) -> Profile {
        match self {
            ProfileName::Smoke => Profile {
                name: self,
                workloads: vec![WorkloadId::Resnet8],
                batch_size: 32,
                warmup_steps: 1,
                windows_per_process: 2,
                steps_per_window: 1,
                rounds: 2,
                cell_timeout_s: 120.0,
                train_samples: Some(2_000),
                test_samples: Some(500),
                cpu_memory_budget_mib: 1536,
                tta: TtaSettings {
                    batch_size: 32,
                    target_accuracy: 0.25,
                    budget_s: 60.0,
                    planned_epochs: 3,
                    eval_every_steps: 20,
                    base_lr: 0.05,
                    seeds: 1,
                    large_batch_size: 128,
                },
            },
            ProfileName::Quick => Profile {
                name: self,
                workloads: vec![WorkloadId::Resnet8],
                batch_size: 128,
                warmup_steps: 3,
                windows_per_process: 5,
                steps_per_window: 3,
                rounds: 3,
                cell_timeout_s: 300.0,
                train_samples: None,
                test_samples: Some(1_000),
                cpu_memory_budget_mib: 2048,
                tta: TtaSettings {
                    batch_size: 64,
                    target_accuracy: 0.60,
                    budget_s: 240.0,
                    planned_epochs: 3,
                    eval_every_steps: 100,
                    base_lr: 0.05,
                    seeds: 1,
                    large_batch_size: 512,
                },
            },
            ProfileName::Standard => Profile {
                name: self,
                workloads: vec![WorkloadId::Resnet56],
                batch_size: 128,
                warmup_steps: 20,
                windows_per_process: 10,
                steps_per_window: 20,
                rounds: 3,
                cell_timeout_s: 600.0,
                train_samples: None,
                test_samples: None,
                cpu_memory_budget_mib: 16384,
                tta: TtaSettings {
                    batch_size: 128,
                    target_accuracy: 0.90,
                    budget_s: 1800.0,
                    planned_epochs: 40,
                    eval_every_steps: 390,
                    base_lr: 0.1,
                    seeds: 1,
                    large_batch_size: 1024,
                },
            },
            ProfileName::Full => {
                // The standard profile, measured longer and trained to He et al.'s accuracy with
                // their schedule: 64k iterations at batch 128 (164 epochs), ÷10 at 50% and 75%.
                let standard = ProfileName::Standard.settings();
                Profile {
                    name: self,
                    rounds: 5,
                    cell_timeout_s: 4200.0,
                    tta: TtaSettings {
                        target_accuracy: 0.93,
                        budget_s: 3600.0,
                        planned_epochs: 164,
                        seeds: 3,
                        ..standard.tta
                    },
                    ..standard
                }
            }
        }
    }
}

impl fmt::Display for ProfileName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.id())
    }
}

impl FromStr for ProfileName {
    type Err = Error;

    fn from_str(s: &str) -> Result<Self, Error> {
        ProfileName::ALL.into_iter().find(|p| p.id() == s).ok_or_else(|| {
            Error::Invalid(format!("unknown profile '{s}'; valid profiles: smoke, quick, standard, full"))
        })
    }
}

/// What a profile sets.
#[derive(Debug, Clone, PartialEq)]
pub struct Profile {
    /// Which profile this is.
    pub name: ProfileName,
    /// Workloads run by `--workload all`.
    pub workloads: Vec<WorkloadId>,
    /// Samples per step (the recipe's 128).
    pub batch_size: usize,
    /// Untimed steps before the first window.
    pub warmup_steps: usize,
    /// Timed windows per cell process.
    pub windows_per_process: usize,
    /// Steps per timed window.
    pub steps_per_window: usize,
    /// Processes per throughput cell (rounds of the interleaved schedule).
    pub rounds: usize,
    /// Wall-clock limit per cell process, seconds.
    pub cell_timeout_s: f64,
    /// Training images used (`None`: all).
    pub train_samples: Option<usize>,
    /// Test images used for evaluation (`None`: all).
    pub test_samples: Option<usize>,
    /// Peak memory a cell may use on a CPU, MiB (`run --memory-budget-mib` overrides it, on any
    /// device): the limit batch-size probing runs into there, below what the machine has.
    pub cpu_memory_budget_mib: u64,
    /// Time-to-accuracy settings.
    pub tta: TtaSettings,
}

/// How a time-to-accuracy cell trains and when it stops.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct TtaSettings {
    /// Samples per step of time-to-accuracy training.
    pub batch_size: usize,
    /// Test accuracy to reach (fraction).
    pub target_accuracy: f64,
    /// Training time allowed, seconds (evaluation excluded).
    pub budget_s: f64,
    /// Epochs the learning-rate schedule is planned over.
    pub planned_epochs: usize,
    /// Optimizer steps between evaluations at `batch_size` (other batch sizes evaluate after as
    /// many samples).
    pub eval_every_steps: usize,
    /// Learning rate of SGD at `batch_size` (scaled linearly for other batch sizes).
    pub base_lr: f64,
    /// Seeds per time-to-accuracy configuration.
    pub seeds: usize,
    /// The large batch at which `lars` and `lamb` are measured, against SGD at the same batch.
    pub large_batch_size: usize,
}
