//! Reference workloads: a model, its loss and metric, behind one small trait that the training
//! loop is generic over, and the factories that build a cell's model as its tricks say.

pub mod build;
pub mod fp8;
pub mod gpt;
pub mod resnet;
pub mod scripted;
pub mod user;

use tch::{nn, Kind, Tensor};

use crate::error::Error;
use crate::vocabulary::AttentionBackend;
pub use crate::vocabulary::{Family, QualityMetric, WorkloadId};

impl WorkloadId {
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
/// [`split_hidden_weights`] see the split, and how the PyTorch engine's case names Muon's
/// parameters.
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
