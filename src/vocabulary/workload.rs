//! The workloads by name: the reference models ([`WorkloadId`]) and the families they belong to,
//! with their ids on the command line and in results. The models themselves are `workloads/`.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

use super::{QualityMetric, UnknownName};

/// A reference workload by name.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum WorkloadId {
    /// CIFAR ResNet-8 (3 stages × 1 basic block): the CPU-sized member of the family, for the
    /// quick profile.
    Resnet8,
    /// CIFAR ResNet-20 (3 stages × 3 basic blocks).
    Resnet20,
    /// CIFAR ResNet-56 (3 stages × 9 basic blocks).
    Resnet56,
    /// CIFAR ResNet-110 (3 stages × 18 basic blocks).
    Resnet110,
    /// A 2-layer character-level GPT (width 128, context 64): the CPU-sized GPT of the quick
    /// profile.
    GptMini,
    /// nanoGPT's shakespeare-char GPT (6 layers, 6 heads, width 384, context 256, dropout 0.2).
    GptShakespeare,
    /// The user's own network (`run --model SPEC`): what it is, the run's results record
    /// (`UserModel` in `results::model`). Not a reference workload: not in [`WorkloadId::ALL`].
    Model,
}

/// The family a workload belongs to: what it reads, how it is judged, what a sample is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Family {
    /// CIFAR ResNets: images in, class out; judged by test accuracy (higher is better).
    #[serde(rename = "resnet")]
    CifarResnet,
    /// Character-level GPTs: tokens in, next token out; judged by validation loss (lower is
    /// better).
    #[serde(rename = "gpt")]
    CharGpt,
    /// The user's own network: prepared batches in, its loss out; no held-out metric.
    #[serde(rename = "model")]
    UserModel,
}

impl Family {
    /// The family's name on the command line (`--workload resnet`), in profile files and in
    /// results: `resnet` or `gpt`.
    pub fn name(self) -> &'static str {
        match self {
            Family::CifarResnet => "resnet",
            Family::CharGpt => "gpt",
            Family::UserModel => "model",
        }
    }

    /// What one sample (one prediction) is, plural: the unit of throughput.
    pub fn sample_unit(self) -> &'static str {
        match self {
            Family::CifarResnet => "images",
            Family::CharGpt => "tokens",
            Family::UserModel => "samples",
        }
    }

    /// The held-out metric a time-to-target cell trains towards.
    pub fn quality_metric(self) -> QualityMetric {
        match self {
            Family::CifarResnet | Family::UserModel => QualityMetric::TestAccuracy,
            Family::CharGpt => QualityMetric::ValidationLoss,
        }
    }
}

impl WorkloadId {
    /// Every workload, in report order.
    pub const ALL: [WorkloadId; 6] = [
        WorkloadId::Resnet8,
        WorkloadId::Resnet20,
        WorkloadId::Resnet56,
        WorkloadId::Resnet110,
        WorkloadId::GptMini,
        WorkloadId::GptShakespeare,
    ];

    /// The id used on the command line and in results.
    pub fn id(self) -> &'static str {
        match self {
            WorkloadId::Resnet8 => "resnet8",
            WorkloadId::Resnet20 => "resnet20",
            WorkloadId::Resnet56 => "resnet56",
            WorkloadId::Resnet110 => "resnet110",
            WorkloadId::GptMini => "gpt-mini",
            WorkloadId::GptShakespeare => "gpt-shakespeare",
            WorkloadId::Model => "model",
        }
    }

    /// The family the workload belongs to.
    pub fn family(self) -> Family {
        match self {
            WorkloadId::Resnet8 | WorkloadId::Resnet20 | WorkloadId::Resnet56 | WorkloadId::Resnet110 => {
                Family::CifarResnet
            }
            WorkloadId::GptMini | WorkloadId::GptShakespeare => Family::CharGpt,
            WorkloadId::Model => Family::UserModel,
        }
    }
}

impl fmt::Display for WorkloadId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.id())
    }
}

impl FromStr for WorkloadId {
    type Err = UnknownName;

    fn from_str(s: &str) -> Result<Self, UnknownName> {
        WorkloadId::ALL.into_iter().find(|w| w.id() == s).ok_or_else(|| {
            let valid: Vec<_> = WorkloadId::ALL.iter().map(|w| w.id()).collect();
            let valid =
                format!("{}, resnet and gpt (the profile's member of each family), all", valid.join(", "));
            UnknownName { kind: "workload", given: s.to_owned(), valid }
        })
    }
}
