//! The parts of a training step a trick can act on ([`StepPart`]): what the catalogue says each
//! trick changes, and what a results file's ceilings are read from.

use serde::{Deserialize, Serialize};

/// A part of a training step, as a trick's ceiling reads it: a phase of the step's breakdown, a
/// kind of operator in its profiler trace, or the time between operators.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum StepPart {
    /// Getting the batch and its copy to the device: the breakdown's batch-wait and to-device
    /// phases.
    Loader,
    /// Clearing the gradients and the optimizer's update: the breakdown's optimizer phase.
    Optimizer,
    /// Recording the step's metrics and reading them to the host: the breakdown's metrics phase,
    /// which holds the step's synchronisation wait.
    Metrics,
    /// The convolution and matrix-multiply operators, forward and backward (their kernels on a
    /// GPU), from the trace.
    ConvolutionsAndMatmuls,
    /// The elementwise operators a fuser can merge (activations, their gradients, bias adds,
    /// dropout, scaling), from the trace.
    Elementwise,
    /// The attention operators, forward and backward, from the trace.
    Attention,
    /// The time outside operators: the interpreter, the harness and kernel launches on the host
    /// (and on a GPU the time the device sat idle), from the trace.
    Overhead,
    /// No part of the step's time: a trick that trades throughput for memory can only cost time.
    MemoryOnly,
}

impl StepPart {
    /// What the part is, in a sentence's words ("the optimizer and zeroing").
    pub fn label(self) -> &'static str {
        match self {
            StepPart::Loader => "batch wait and the copy to the device",
            StepPart::Optimizer => "the optimizer and zeroing",
            StepPart::Metrics => "metrics and the host's sync",
            StepPart::ConvolutionsAndMatmuls => "convolutions and matmuls",
            StepPart::Elementwise => "elementwise operators",
            StepPart::Attention => "attention",
            StepPart::Overhead => "time outside operators",
            StepPart::MemoryOnly => "memory, not time",
        }
    }

    /// A short name for a table's narrow column ("optimizer").
    pub fn short_label(self) -> &'static str {
        match self {
            StepPart::Loader => "loader",
            StepPart::Optimizer => "optimizer",
            StepPart::Metrics => "metrics",
            StepPart::ConvolutionsAndMatmuls => "conv+matmul",
            StepPart::Elementwise => "elementwise",
            StepPart::Attention => "attention",
            StepPart::Overhead => "outside ops",
            StepPart::MemoryOnly => "memory only",
        }
    }
}
