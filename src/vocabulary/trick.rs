//! The tricks by name: [`Trick`], its id in results and on the command line, the labels of the
//! reference cells some tricks have, and [`TrickSet`], the tricks a cell switches on. What each
//! trick is and does is the catalogue's (`tricks/`).

use std::collections::BTreeSet;
use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

use super::{AttentionBackend, UnknownName};

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

    /// The id used on the command line, in results files and in reports: the kebab-case of the
    /// variant's name.
    pub fn id(self) -> &'static str {
        match self {
            Trick::Amp => "amp",
            Trick::AmpBf16 => "amp-bf16",
            Trick::CudnnBenchmark => "cudnn-benchmark",
            Trick::AvoidSync => "avoid-sync",
            Trick::NoBiasBeforeBn => "no-bias-before-bn",
            Trick::ZeroGradNone => "zero-grad-none",
            Trick::NoGradEval => "no-grad-eval",
            Trick::ChannelsLast => "channels-last",
            Trick::LoaderWorkers => "loader-workers",
            Trick::PinMemory => "pin-memory",
            Trick::ZeroCopy => "zero-copy",
            Trick::GpuAugment => "gpu-augment",
            Trick::PackedDataset => "packed-dataset",
            Trick::FusedOptimizer => "fused-optimizer",
            Trick::Tf32 => "tf32",
            Trick::JitFusion => "jit-fusion",
            Trick::DebugOff => "debug-off",
            Trick::CudaGraphs => "cuda-graphs",
            Trick::TorchCompile => "torch-compile",
            Trick::OneCycle => "one-cycle",
            Trick::MaxBatch => "max-batch",
            Trick::Adamw => "adamw",
            Trick::Lars => "lars",
            Trick::Lamb => "lamb",
            Trick::Muon => "muon",
            Trick::Checkpointing => "checkpointing",
            Trick::GradAccumulation => "grad-accumulation",
            Trick::ExpandableSegments => "expandable-segments",
            Trick::GradClipping => "grad-clipping",
            Trick::InputNorm => "input-norm",
            Trick::BatchNorm => "batch-norm",
            Trick::LabelSmoothing => "label-smoothing",
            Trick::EmaWeights => "ema-weights",
            Trick::FlipTta => "flip-tta",
            Trick::BnMomentum => "bn-momentum",
            Trick::FlashAttention => "flash-attention",
            Trick::SdpaFlash => "sdpa-flash",
            Trick::SdpaCudnn => "sdpa-cudnn",
            Trick::SdpaMemEfficient => "sdpa-mem-efficient",
            Trick::SdpaMath => "sdpa-math",
            Trick::Fp8Matmul => "fp8-matmul",
            Trick::Ddp => "ddp",
        }
    }

    /// The label of the trick's reference cell, for the tricks measured beside a cell of their own
    /// (a cell whose key names the trick in `reference_for`); the label is part of that cell's id.
    pub fn reference_label(self) -> Option<&'static str> {
        match self {
            Trick::DebugOff => Some("debug-apis-on"),
            Trick::Adamw => Some("adam-l2"),
            Trick::InputNorm => Some("raw-inputs"),
            Trick::BatchNorm => Some("no-batch-norm"),
            Trick::Ddp => Some("data-parallel"),
            Trick::Tf32 => Some("strict-fp32"),
            _ => None,
        }
    }
}

impl fmt::Display for Trick {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.id())
    }
}

impl FromStr for Trick {
    type Err = UnknownName;

    fn from_str(s: &str) -> Result<Self, UnknownName> {
        Trick::ALL.into_iter().find(|t| t.id() == s).ok_or_else(|| {
            let valid: Vec<_> = Trick::ALL.iter().map(|t| t.id()).collect();
            UnknownName { kind: "trick", given: s.to_owned(), valid: valid.join(", ") }
        })
    }
}

impl From<Trick> for &'static str {
    fn from(t: Trick) -> &'static str {
        t.id()
    }
}

impl TryFrom<String> for Trick {
    type Error = UnknownName;

    fn try_from(s: String) -> Result<Self, UnknownName> {
        s.parse()
    }
}

/// A set of tricks switched on together; the empty set is the baseline.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(transparent)]
pub struct TrickSet(BTreeSet<Trick>);

impl TrickSet {
    /// The baseline: every trick off.
    pub fn baseline() -> Self {
        Self::default()
    }

    /// The set holding just `trick`.
    pub fn only(trick: Trick) -> Self {
        Self(BTreeSet::from([trick]))
    }

    /// Whether `trick` is on.
    pub fn has(&self, trick: Trick) -> bool {
        self.0.contains(&trick)
    }

    /// How many tricks are on.
    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// Whether every trick is off (the same as [`Self::is_baseline`]).
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// Whether every trick is off.
    pub fn is_baseline(&self) -> bool {
        self.0.is_empty()
    }

    /// The tricks that are on, in catalogue order.
    pub fn iter(&self) -> impl Iterator<Item = Trick> + '_ {
        self.0.iter().copied()
    }

    /// The attention backend the set forces `scaled_dot_product_attention` to (one of the
    /// [`Trick::SDPA_BACKENDS`]), if it forces one.
    pub fn forced_attention_backend(&self) -> Option<AttentionBackend> {
        self.iter().find_map(Trick::forced_attention_backend)
    }

    /// A stable, human-readable label: `baseline`, or the ids joined by `+`.
    pub fn label(&self) -> String {
        if self.is_baseline() {
            "baseline".to_owned()
        } else {
            self.iter().map(Trick::id).collect::<Vec<_>>().join("+")
        }
    }
}

impl FromIterator<Trick> for TrickSet {
    fn from_iter<I: IntoIterator<Item = Trick>>(iter: I) -> Self {
        Self(iter.into_iter().collect())
    }
}

/// What a trick is judged by.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Metric {
    /// Training throughput (samples/s).
    Throughput,
    /// Evaluation throughput (samples/s) and memory.
    EvalThroughput,
    /// Peak memory (bytes).
    Memory,
    /// Time to reach a target accuracy (s).
    TimeToAccuracy,
}

impl Metric {
    /// A short label for tables.
    pub fn label(self) -> &'static str {
        match self {
            Metric::Throughput => "throughput",
            Metric::EvalThroughput => "eval throughput",
            Metric::Memory => "memory",
            Metric::TimeToAccuracy => "time-to-accuracy",
        }
    }
}

/// Which peak a trick judged by memory is judged by.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MemoryFigure {
    /// Bytes held by live tensors (the peak resident set where tensors are not counted).
    Live,
    /// Bytes the caching allocator reserved from the device, which is where fragmentation shows.
    Reserved,
}

#[cfg(test)]
mod tests {
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
    fn labels_are_stable() {
        assert_eq!(TrickSet::baseline().label(), "baseline");
        let set: TrickSet = [Trick::ZeroGradNone, Trick::Amp].into_iter().collect();
        assert_eq!(set.label(), "amp+zero-grad-none");
    }

    #[test]
    fn reference_labels_are_unique_and_unlike_any_trick_id() {
        let labels: Vec<&str> = Trick::ALL.into_iter().filter_map(Trick::reference_label).collect();
        let distinct: BTreeSet<&str> = labels.iter().copied().collect();
        assert_eq!(distinct.len(), labels.len());
        assert!(labels.iter().all(|label| label.parse::<Trick>().is_err()), "{labels:?}");
    }
}
