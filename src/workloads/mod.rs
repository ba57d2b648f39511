//! Reference workloads: a model, its loss and metric, behind one small trait that the training
//! loop is generic over, and the factories that build a cell's model as its tricks say.

pub mod build;
pub mod fp8;
pub mod gpt;
pub mod resnet;
pub mod scripted;
pub mod user;

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};
use tch::{nn, Kind, Tensor};

use crate::error::Error;
pub use crate::results::quality::QualityMetric;
use gpt::AttentionBackend;

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
    /// ([`user::UserModel`]). Not a reference workload: not in [`WorkloadId::ALL`].
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

    /// Whether training draws random numbers inside the model (dropout).
    pub fn trains_with_dropout(self) -> bool {
        self == WorkloadId::GptShakespeare
    }

    /// Whether the model is a convolutional network (CNN-only tricks apply).
    pub fn is_cnn(self) -> bool {
        self.family() == Family::CifarResnet
    }

    /// Basic blocks per stage, for the CIFAR ResNets (depth = 6n + 2); `None` for other models.
    pub fn resnet_blocks_per_stage(self) -> Option<i64> {
        match self {
            WorkloadId::Resnet8 => Some(1),
            WorkloadId::Resnet20 => Some(3),
            WorkloadId::Resnet56 => Some(9),
            WorkloadId::Resnet110 => Some(18),
            WorkloadId::GptMini | WorkloadId::GptShakespeare | WorkloadId::Model => None,
        }
    }
}

impl fmt::Display for WorkloadId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.id())
    }
}

impl FromStr for WorkloadId {
    type Err = Error;

    fn from_str(s: &str) -> Result<Self, Error> {
        WorkloadId::ALL.into_iter().find(|w| w.id() == s).ok_or_else(|| {
            let valid: Vec<_> = WorkloadId::ALL.iter().map(|w| w.id()).collect();
            Error::Invalid(format!(
                "unknown workload '{s}'; valid workloads: {}, resnet and gpt (the profile's member of \
                 each family), all",
                valid.join(", ")
            ))
        })
    }
}

/// A model with its loss and quality metric: what the generic training loop needs to know.
pub trait Workload {
    /// The variables (parameters and buffers) of the model.
    fn var_store(&self) -> &nn::VarStore;

    /// Mutable access to the variables (to change their memory format, say).
    fn var_store_mut(&mut self) -> &mut nn::VarStore;

    /// Runs the model on a batch of inputs; `train` selects training behaviour (BatchNorm batch
    /// statistics, dropout).
    fn forward(&self, inputs: &Tensor, train: bool) -> Tensor;

    /// Number of consecutive segments the forward pass is cut into for activation checkpointing
    /// (at least 1).
    fn segments(&self) -> usize;

    /// Runs segment `k` (below [`Self::segments`]) on `xs`: segment 0 takes the model's inputs,
    /// each later one the previous segment's output, and the last one returns the outputs, so
    /// running every segment in order is [`Self::forward`]. A segment must compute the same values
    /// every time it runs on the same input with the random generator in the same state, as
    /// recomputation relies on: it may draw random numbers (dropout) from the default generator
    /// of its input's device when [`Self::draws_random_numbers`] says so.
    fn forward_segment(&self, k: usize, xs: &Tensor, train: bool) -> Tensor;

    /// Whether a forward pass in training (`_train` true) or evaluation mode draws random numbers
    /// (dropout, say). Activation checkpointing then saves the random generator's state before
    /// each segment and restores it when the segment is recomputed, so the recomputation draws the
    /// same numbers. The default is no random numbers.
    fn draws_random_numbers(&self, _train: bool) -> bool {
        false
    }

    /// The mean cross-entropy of `outputs` against `targets` (a scalar tensor): the held-out loss
    /// evaluation reports, and the training loss without label smoothing.
    fn loss(&self, outputs: &Tensor, targets: &Tensor) -> Tensor;

    /// The loss a training step minimises: [`Self::loss`] when `label_smoothing` is 0, else the
    /// mean cross-entropy against targets smoothed by it as PyTorch's `label_smoothing` smooths
    /// them (1 − ε + ε/K on the target class, ε/K on each of the other K − 1). Outputs hold
    /// logits over the classes in their last dimension, targets one class per row of them (an
    /// image's, or a position's).
    fn training_loss(&self, outputs: &Tensor, targets: &Tensor, label_smoothing: f64) -> Tensor {
        if label_smoothing == 0.0 {
            return self.loss(outputs, targets);
        }
        let classes = outputs.size().last().copied().unwrap_or(1);
        outputs.reshape([-1, classes]).cross_entropy_loss(
            &targets.reshape([-1]),
            None::<Tensor>,
            tch::Reduction::Mean,
            -100,
            label_smoothing,
        )
    }

    /// How many predictions in the batch are correct (a scalar tensor on the device): images
    /// classified, or tokens predicted.
    fn correct(&self, outputs: &Tensor, targets: &Tensor) -> Tensor;

    /// Analytic forward-pass FLOPs for one sample, that is one prediction: an image, or a token
    /// (a multiply-add counts as 2).
    fn forward_flops_per_sample(&self) -> f64;

    /// Whether most of the model's arithmetic is convolutions (cuDNN's) rather than matmuls
    /// (cuBLAS's): which TF32 switch decides the precision it runs in. The default is matmuls.
    fn mostly_convolutions(&self) -> bool {
        false
    }

    /// The kernel the model's attention runs as in a training step at `batch_size` samples whose
    /// matmuls run in `kind` (fp32, or autocast's half type); `None` (the default) for a model
    /// without attention.
    fn attention_backend(&self, _kind: Kind, _batch_size: usize) -> Result<Option<AttentionBackend>, Error> {
        Ok(None)
    }

    /// The weights of the hidden layers (shallow clones of trainable variables, each of dimension
    /// ≥ 2): the matrices and convolutions between the input layer (embeddings, the first
    /// convolution) and the output head, which Muon orthogonalises. Embeddings, the head, biases
    /// and normalisation parameters are not among them.
    fn hidden_weights(&self) -> Vec<Tensor>;
}

/// The trainable variables of `workload`, split by role: its hidden weights
/// ([`Workload::hidden_weights`]) and every other trainable variable, each list in the var
/// store's order. A variable is recognised by the memory it holds.
pub fn split_hidden_weights<W: Workload + ?Sized>(workload: &W) -> (Vec<Tensor>, Vec<Tensor>) {
    let hidden: Vec<usize> = workload.hidden_weights().iter().map(|t| t.data_ptr() as usize).collect();
    workload
        .var_store()
        .trainable_variables()
        .into_iter()
        .partition(|t| hidden.contains(&(t.data_ptr() as usize)))
}

/// The var-store names of `tensors` (variables of `workload`), sorted: how the tests of
/// [`split_hidden_weights`] see the split.
#[cfg(test)]
pub(crate) fn variable_names<W: Workload + ?Sized>(workload: &W, tensors: &[Tensor]) -> Vec<String> {
    let variables = workload.var_store().variables();
    let mut names: Vec<String> = tensors
        .iter()
        .map(|t| {
            let found = variables.iter().find(|(_, v)| v.data_ptr() == t.data_ptr());
            found.map(|(name, _)| name.clone()).expect("a variable of the workload")
        })
        .collect();
    names.sort();
    names
}
