//! The trick catalogue: which tricks there are and every fact about each, looked up in one table
//! (`table.rs`); where each can be measured on the hardware the caller describes
//! (`applicability.rs`); sets of tricks switched on together (`set.rs`); the `--tricks` list
//! (`list.rs`); the catalogue `trickbench list` prints (`catalogue.rs`).

mod applicability;
pub mod catalogue;
mod info;
mod list;
mod set;
mod table;

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

use crate::error::Error;
use crate::hardware::Hardware;
use crate::workloads::gpt::AttentionBackend;
use crate::workloads::Family;

pub use applicability::{Applicability, Need};
pub use info::{InPytorch, MemoryFigure, Metric, Pairing, Reference, Stage, TrickInfo, Wording};
pub use list::{parse_trick_list, TRICK_GROUPS};
pub use set::TrickSet;

/// One training speed-up trick. The order here is the order of `trickbench list` and of reports.
/// Results files spell a trick by its id ([`Trick::id`]), the kebab-case of the variant's name.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(into = "&'static str", try_from = "String")]
pub enum Trick {
    /// Automatic mixed precision: autocast to fp16 with dynamic loss scaling.
    Amp,
    /// Autocast to bf16 (no loss scaling needed).
    AmpBf16,
    /// cuDNN autotuner (`torch.backends.cudnn.benchmark = True`).
    CudnnBenchmark,
    /// Keep metrics on the device instead of reading them to the host every step.
    AvoidSync,
    /// No bias in convolutions that are followed by BatchNorm.
    NoBiasBeforeBn,
    /// Set gradients to None instead of zero-filling them.
    ZeroGradNone,
    /// Evaluate under no-grad instead of recording autograd graphs.
    NoGradEval,
    /// NHWC (channels_last) memory format for CNN activations and weights.
    ChannelsLast,
    /// Worker threads assemble and augment batches ahead of the training thread.
    LoaderWorkers,
    /// Pinned host staging buffers and non-blocking host-to-device copies.
    PinMemory,
    /// Tensors that view host memory instead of copying it.
    ZeroCopy,
    /// Random crop and flip of whole batches on the training device.
    GpuAugment,
    /// Read the pre-packed binary dataset instead of decoding image files.
    PackedDataset,
    /// The optimizer update as one fused multi-tensor kernel instead of a loop over parameters.
    FusedOptimizer,
    /// TensorFloat-32 tensor-core math in fp32 matmuls too (cuDNN convolutions already use it by
    /// PyTorch's default).
    Tf32,
    /// The residual epilogue (add + ReLU) as a TorchScript-compiled fused function.
    JitFusion,
    /// Debugging APIs (autograd anomaly detection) switched off.
    DebugOff,
    /// The whole training step captured once into a CUDA graph and replayed.
    CudaGraphs,
    /// The model compiled by `torch.compile` (TorchDynamo and inductor), measured through
    /// PyTorch by `trickbench parity --compile`: libtorch's C++ API cannot reach it.
    TorchCompile,
    /// The 1cycle learning-rate and momentum policy instead of the step schedule.
    OneCycle,
    /// The largest batch that fits, with the learning rate scaled linearly and warmed up.
    MaxBatch,
    /// AdamW (decoupled weight decay) instead of Adam with L2 in the gradient.
    Adamw,
    /// LARS (layer-wise trust ratios) for large-batch training.
    Lars,
    /// LAMB (layer-wise trust ratios on Adam updates) for large-batch training.
    Lamb,
    /// Muon (orthogonalised Nesterov momentum) for the hidden weights, the recipe's optimizer for
    /// the rest.
    Muon,
    /// Activation checkpointing: segments recomputed in backward instead of stored.
    Checkpointing,
    /// Several micro-batches per optimizer step at the same effective batch.
    GradAccumulation,
    /// The CUDA caching allocator's expandable segments instead of fixed-size segments.
    ExpandableSegments,
    /// Global-norm gradient clipping without a host sync.
    GradClipping,
    /// Per-channel standardised inputs instead of raw [0, 1] pixels.
    InputNorm,
    /// BatchNorm after every convolution instead of a plainly initialised net without it.
    BatchNorm,
    /// Cross-entropy against smoothed targets (label smoothing 0.2) as the training loss.
    LabelSmoothing,
    /// An exponential moving average of the weights, evaluated in place of the raw weights.
    EmaWeights,
    /// Test-time augmentation: each test image's logits averaged with its mirror image's.
    FlipTta,
    /// BatchNorm running statistics updated with airbench's momentum instead of PyTorch's 0.1.
    BnMomentum,
    /// Attention as one fused `scaled_dot_product_attention` kernel instead of op by op.
    FlashAttention,
    /// `scaled_dot_product_attention` with only its FlashAttention backend allowed.
    SdpaFlash,
    /// `scaled_dot_product_attention` with only cuDNN's fused attention allowed.
    SdpaCudnn,
    /// `scaled_dot_product_attention` with only memory-efficient attention allowed.
    SdpaMemEfficient,
    /// `scaled_dot_product_attention` with only its math (reference) backend allowed.
    SdpaMath,
    /// The GPT's attention and MLP projections as fp8 matmuls (`torch._scaled_mm`) with
    /// per-tensor dynamic scales.
    Fp8Matmul,
    /// One process per GPU with bucketed gradient all-reduce (DDP) instead of one process driving
    /// every GPU (DataParallel).
    Ddp,
}

impl Trick {
    /// Every trick, in catalogue order.
    pub const ALL: [Trick; 42] = [
        Trick::Amp,
        Trick::AmpBf16,
        Trick::CudnnBenchmark,
        Trick::AvoidSync,
        Trick::NoBiasBeforeBn,
        Trick::ZeroGradNone,
        Trick::NoGradEval,
        Trick::ChannelsLast,
        Trick::LoaderWorkers,
        Trick::PinMemory,
        Trick::ZeroCopy,
        Trick::GpuAugment,
        Trick::PackedDataset,
        Trick::FusedOptimizer,
        Trick::Tf32,
        Trick::JitFusion,
        Trick::DebugOff,
        Trick::CudaGraphs,
        Trick::TorchCompile,
        Trick::OneCycle,
        Trick::MaxBatch,
        Trick::Adamw,
        Trick::Lars,
        Trick::Lamb,
        Trick::Muon,
        Trick::Checkpointing,
        Trick::GradAccumulation,
        Trick::ExpandableSegments,
        Trick::GradClipping,
        Trick::InputNorm,
        Trick::BatchNorm,
        Trick::LabelSmoothing,
        Trick::EmaWeights,
        Trick::FlipTta,
        Trick::BnMomentum,
        Trick::FlashAttention,
        Trick::SdpaFlash,
        Trick::SdpaCudnn,
        Trick::SdpaMemEfficient,
        Trick::SdpaMath,
        Trick::Fp8Matmul,
        Trick::Ddp,
    ];

    /// The tricks that choose the optimizer; at most one can be on.
    pub const OPTIMIZERS: [Trick; 4] = [Trick::Adamw, Trick::Lars, Trick::Lamb, Trick::Muon];

    /// The tricks judged by training throughput that are also trained to the target beside the
    /// baseline: they change the arithmetic of the model's matmuls, so what they gain in speed
    /// could be lost in convergence.
    pub const ALSO_TIME_TO_ACCURACY: [Trick; 1] = [Trick::Fp8Matmul];

    /// The tricks that force one `scaled_dot_product_attention` backend; at most one can be on.
    pub const SDPA_BACKENDS: [Trick; 4] =
        [Trick::SdpaFlash, Trick::SdpaCudnn, Trick::SdpaMemEfficient, Trick::SdpaMath];

    /// The attention backend the trick forces `scaled_dot_product_attention` to, for the
    /// [`Trick::SDPA_BACKENDS`] (every other backend disabled); `None` for every other trick.
    pub fn forced_attention_backend(self) -> Option<AttentionBackend> {
        match self {
            Trick::SdpaFlash => Some(AttentionBackend::FlashAttention),
            Trick::SdpaCudnn => Some(AttentionBackend::CudnnAttention),
            Trick::SdpaMemEfficient => Some(AttentionBackend::EfficientAttention),
            Trick::SdpaMath => Some(AttentionBackend::Math),
            _ => None,
        }
    }

    /// Everything the catalogue says about the trick: its entry in the table.
    pub fn info(self) -> &'static TrickInfo {
        table::info(self)
    }

    /// The id used on the command line, in results files and in reports (kebab-case).
    pub fn id(self) -> &'static str {
        self.info().id
    }

    /// The trick's number in the 2021 guide "Faster Deep Learning Training with PyTorch";
    /// `None` for tricks that became standard after it.
    pub fn guide_number(self) -> Option<u8> {
        self.info().guide_number
    }

    /// What the baseline ("off") does for a workload of `family`.
    pub fn off(self, family: Family) -> &'static str {
        self.info().off.of(family)
    }

    /// What the trick ("on") does for a workload of `family`.
    pub fn on(self, family: Family) -> &'static str {
        self.info().on.of(family)
    }

    /// The metric the trick is judged by.
    pub fn metric(self) -> Metric {
        self.info().metric
    }

    /// Whether the trick, judged by training throughput, is also trained to the target (see
    /// [`Trick::ALSO_TIME_TO_ACCURACY`]).
    pub fn also_time_to_accuracy(self) -> bool {
        Trick::ALSO_TIME_TO_ACCURACY.contains(&self)
    }

    /// The part of training the trick changes.
    pub fn stage(self) -> Stage {
        self.info().stage
    }

    /// Which peak memory the trick's cells are compared by.
    pub fn memory_figure(self) -> MemoryFigure {
        table::memory_figure(self)
    }

    /// The label of the trick's own reference cell, for the tricks that have one (see
    /// [`Reference`]).
    pub fn reference_label(self) -> Option<&'static str> {
        self.info().reference.label()
    }

    /// Whether the trick is compared with its own reference cell rather than with the baseline.
    pub fn judged_against_own_reference(self) -> bool {
        matches!(self.info().reference, Reference::Own(_))
    }

    /// Whether the trick's throughput can be measured in pairs beside its reference, or why not.
    pub fn pairing(self) -> Pairing {
        self.info().pairing
    }

    /// Whether the trick's effect is measured against the plain recipe (the baseline), not against
    /// a reference of its own or another trick in its place.
    pub fn compared_with_baseline(self) -> bool {
        matches!(self.info().reference, Reference::Baseline | Reference::Beside(_))
    }

    /// What the trick is compared with when that is not the baseline, in words: "its own
    /// reference (debug-apis-on)", or the trick in its place ("flash-attention in its place");
    /// `None` for a trick compared with the baseline.
    pub fn reference_text(self) -> Option<String> {
        match self.info().reference {
            Reference::Baseline | Reference::Beside(_) => None,
            Reference::Own(label) => Some(format!("its own reference ({label})")),
            Reference::Swapped { with, .. } => Some(format!("{with} in its place")),
        }
    }

    /// The tricks on in the cell that measures this trick alone on `hardware`: the trick, and on a
    /// CUDA GPU the precision its reference asks for there ([`Reference::Swapped`]).
    pub fn ablation_set(self, hardware: &Hardware) -> TrickSet {
        match self.info().reference {
            Reference::Swapped { cuda_precision: Some(precision), .. } if hardware.device.is_cuda() => {
                [self, precision].into_iter().collect()
            }
            _ => TrickSet::only(self),
        }
    }

    /// What the guides claim for the trick, in one sentence naming its source.
    pub fn claim(self) -> &'static str {
        self.info().claim
    }

    /// The trick's colour in every plot, as sRGB red, green and blue.
    pub fn colour(self) -> [u8; 3] {
        self.info().colour
    }
}

impl fmt::Display for Trick {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.id())
    }
}

impl FromStr for Trick {
    type Err = Error;

    fn from_str(s: &str) -> Result<Self, Error> {
        Trick::ALL.into_iter().find(|t| t.id() == s).ok_or_else(|| {
            let valid: Vec<_> = Trick::ALL.iter().map(|t| t.id()).collect();
            Error::Invalid(format!("unknown trick '{s}'; valid tricks: {}", valid.join(", ")))
        })
    }
}

impl From<Trick> for &'static str {
    fn from(t: Trick) -> &'static str {
        t.id()
    }
}

impl TryFrom<String> for Trick {
    type Error = Error;

    fn try_from(s: String) -> Result<Self, Error> {
        s.parse()
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;

    use super::*;

    /// serde's kebab-case of a variant name: a hyphen before each capital but the first, all lower
    /// case (how results files written before the table spelled the tricks).
    fn kebab_case(variant: &str) -> String {
        let mut id = String::new();
        for (i, c) in variant.chars().enumerate() {
            if c.is_ascii_uppercase() && i > 0 {
                id.push('-');
            }
            id.push(c.to_ascii_lowercase());
        }
        id
    }

    #[test]
    fn ids_are_the_serde_names_unique_and_round_trip() {
        let ids: BTreeSet<_> = Trick::ALL.iter().map(|t| t.id()).collect();
        assert_eq!(ids.len(), Trick::ALL.len());
        for t in Trick::ALL {
            assert_eq!(t.id(), kebab_case(&format!("{t:?}")));
            assert_eq!(t.id().parse::<Trick>().unwrap(), t);
            let json = serde_json::to_string(&t).unwrap();
            assert_eq!(json, format!("\"{}\"", t.id()));
            assert_eq!(serde_json::from_str::<Trick>(&json).unwrap(), t);
        }
        let err = serde_json::from_str::<Trick>("\"turbo\"").unwrap_err().to_string();
        assert!(err.contains("unknown trick 'turbo'"), "{err}");
    }

    #[test]
    fn all_is_in_declaration_order_without_repeats() {
        assert!(Trick::ALL.windows(2).all(|pair| pair[0] < pair[1]));
        let optimizers: Vec<Trick> =
            Trick::ALL.into_iter().filter(|t| Trick::OPTIMIZERS.contains(t)).collect();
        assert_eq!(optimizers, Trick::OPTIMIZERS);
        let forcing: Vec<Trick> =
            Trick::ALL.into_iter().filter(|t| t.forced_attention_backend().is_some()).collect();
        assert_eq!(forcing, Trick::SDPA_BACKENDS);
    }
}
