//! The trick catalogue: every trick's id, guide number, what "off" and "on" mean, the metric it is
//! judged by, and where it applies.

use std::collections::BTreeSet;
use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

use crate::device::DeviceSpec;
use crate::distributed;
use crate::error::Error;
use crate::ffi;
use crate::workloads::{Family, WorkloadId};

/// One training speed-up trick. The order here is the order of `trickbench list` and of reports.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
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
    // Data-pipeline tricks (#3)
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
    // Step tricks (#3)
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
    // Convergence and memory tricks (#5)
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
    /// Activation checkpointing: segments recomputed in backward instead of stored.
    Checkpointing,
    /// Several micro-batches per optimizer step at the same effective batch.
    GradAccumulation,
    /// Global-norm gradient clipping without a host sync.
    GradClipping,
    /// Per-channel standardised inputs instead of raw [0, 1] pixels.
    InputNorm,
    /// BatchNorm after every convolution instead of a plainly initialised net without it.
    BatchNorm,
    // Transformer tricks (#6)
    /// Attention as one fused `scaled_dot_product_attention` kernel instead of op by op.
    FlashAttention,
    // Data parallelism (#8)
    /// One process per GPU with bucketed gradient all-reduce (DDP) instead of one process driving
    /// every GPU (DataParallel).
    Ddp,
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

/// Whether a trick can be measured for a workload on a device.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Applicability {
    /// It can.
    Applies,
    /// It cannot, for the stated reason.
    NotApplicable(String),
}

impl Trick {
    /// Every trick, in catalogue order.
    pub const ALL: [Trick; 30] = [
        Trick::Amp,
        Trick::AmpBf16,
        Trick::CudnnBenchmark,
        Trick::AvoidSync,
        Trick::NoBiasBeforeBn,
        Trick::ZeroGradNone,
        Trick::NoGradEval,
        Trick::ChannelsLast,
        // Data-pipeline tricks (#3)
        Trick::LoaderWorkers,
        Trick::PinMemory,
        Trick::ZeroCopy,
        Trick::GpuAugment,
        Trick::PackedDataset,
        // Step tricks (#3)
        Trick::FusedOptimizer,
        Trick::Tf32,
        Trick::JitFusion,
        Trick::DebugOff,
        Trick::CudaGraphs,
        // Convergence and memory tricks (#5)
        Trick::OneCycle,
        Trick::MaxBatch,
        Trick::Adamw,
        Trick::Lars,
        Trick::Lamb,
        Trick::Checkpointing,
        Trick::GradAccumulation,
        Trick::GradClipping,
        Trick::InputNorm,
        Trick::BatchNorm,
        // Transformer tricks (#6)
        Trick::FlashAttention,
        // Data parallelism (#8)
        Trick::Ddp,
    ];

    /// The tricks that choose the optimizer; at most one can be on.
    pub const OPTIMIZERS: [Trick; 3] = [Trick::Adamw, Trick::Lars, Trick::Lamb];

    /// The id used on the command line and in results (kebab-case).
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
            // Data-pipeline tricks (#3)
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
            Trick::OneCycle => "one-cycle",
            Trick::MaxBatch => "max-batch",
            Trick::Adamw => "adamw",
            Trick::Lars => "lars",
            Trick::Lamb => "lamb",
            Trick::Checkpointing => "checkpointing",
            Trick::GradAccumulation => "grad-accumulation",
            Trick::GradClipping => "grad-clipping",
            Trick::InputNorm => "input-norm",
            Trick::BatchNorm => "batch-norm",
            Trick::FlashAttention => "flash-attention",
            Trick::Ddp => "ddp",
        }
    }

    /// The trick's number in the 2021 guide "Faster Deep Learning Training with PyTorch";
    /// `None` for tricks that became standard after it.
    pub fn guide_number(self) -> Option<u8> {
        match self {
            Trick::Amp | Trick::AmpBf16 => Some(4),
            Trick::CudnnBenchmark => Some(6),
            Trick::AvoidSync => Some(7),
            Trick::ZeroGradNone => Some(11),
            Trick::NoBiasBeforeBn => Some(15),
            Trick::NoGradEval => Some(16),
            Trick::ChannelsLast => None,
            // Data-pipeline tricks (#3)
            Trick::LoaderWorkers | Trick::PinMemory => Some(2),
            Trick::ZeroCopy => Some(12),
            Trick::GpuAugment | Trick::PackedDataset => None,
            // Step tricks (#3)
            Trick::Tf32 | Trick::CudaGraphs => None,
            Trick::FusedOptimizer => Some(5),
            Trick::JitFusion => Some(18),
            Trick::DebugOff => Some(13),
            // Convergence and memory tricks (#5)
            Trick::OneCycle => Some(1),
            Trick::MaxBatch => Some(3),
            Trick::Adamw | Trick::Lars | Trick::Lamb => Some(5),
            Trick::Checkpointing => Some(8),
            Trick::GradAccumulation => Some(9),
            Trick::GradClipping => Some(14),
            Trick::InputNorm | Trick::BatchNorm => Some(17),
            Trick::FlashAttention => None,
            Trick::Ddp => Some(10),
        }
    }

    /// What the baseline ("off") does for a workload of `family`.
    pub fn off(self, family: Family) -> &'static str {
        match (self, family) {
            (Trick::OneCycle, Family::CharGpt) => {
                "the recipe's schedule: linear warm-up over 100 steps to 1e-3, cosine decay to 1e-4"
            }
            (Trick::JitFusion, Family::CharGpt) => {
                "GELU and the residual dropout-add as eager ops (a kernel each)"
            }
            (Trick::ZeroCopy, Family::CharGpt) => "each batch's tokens copied into a new tensor",
            (Trick::LoaderWorkers, Family::CharGpt) => {
                "batches of random windows assembled on the training thread"
            }
            _ => self.cnn_off(),
        }
    }

    /// What the trick ("on") does for a workload of `family`.
    pub fn on(self, family: Family) -> &'static str {
        match (self, family) {
            (Trick::OneCycle, Family::CharGpt) => {
                "1cycle at the same peak of 1e-3: warmed up from 1/25 of it over 30% of training, then \
                 cosine-annealed to 1/250,000 of it, β₁ cycled inversely between 0.95 and 0.85"
            }
            (Trick::JitFusion, Family::CharGpt) => {
                "GELU and the residual dropout-add as TorchScript-compiled functions the fuser can run \
                 as one kernel each"
            }
            (Trick::GradClipping, Family::CharGpt) => {
                "gradients clipped to global norm 1.0 (the recipe's), computed on the device without a \
                 host read"
            }
            (Trick::ZeroCopy, Family::CharGpt) => "the host batch wrapped as a tensor without a copy",
            (Trick::LoaderWorkers, Family::CharGpt) => {
                "one worker thread per core (at least 2) assembles batches into a bounded prefetch \
                 queue; the same batches in the same order"
            }
            _ => self.cnn_on(),
        }
    }

    /// What "off" means in the CIFAR ResNet recipe (and wherever the GPT's does not differ).
    fn cnn_off(self) -> &'static str {
        match self {
            Trick::Amp | Trick::AmpBf16 => "fp32 everywhere",
            Trick::CudnnBenchmark => "cuDNN picks convolution algorithms by heuristics",
            Trick::AvoidSync => "loss and accuracy read to the host (.item()) every step",
            Trick::NoBiasBeforeBn => "convolutions followed by BatchNorm carry a bias",
            Trick::ZeroGradNone => "gradients zero-filled before each backward",
            Trick::NoGradEval => "evaluation records autograd graphs",
            Trick::ChannelsLast => "NCHW (contiguous) activations and weights",
            // Data-pipeline tricks (#3)
            Trick::LoaderWorkers => "batches assembled and augmented on the training thread",
            Trick::PinMemory => "pageable host tensors, blocking host-to-device copies",
            Trick::ZeroCopy => "each batch's pixels copied from host vectors into a new tensor",
            Trick::GpuAugment => "random crop and flip per image in a CPU loop",
            Trick::PackedDataset => {
                "with --images PATH, every batch decodes its JPEG/PNG files (else the packed split)"
            }
            Trick::FusedOptimizer => {
                "SGD or AdamW updates each parameter in turn (several small kernels each)"
            }
            Trick::Tf32 => {
                "PyTorch's default: TF32 in cuDNN convolutions, fp32 matmuls at full precision (a \
                 separate strict-fp32 reference cell forbids TF32 in both)"
            }
            Trick::JitFusion => "residual epilogue as eager ops: add, then ReLU (a kernel each)",
            Trick::DebugOff => "autograd anomaly detection left on (a separate debug-apis-on reference cell)",
            Trick::CudaGraphs => "every kernel of the step launched from the host, op by op",
            // Convergence and memory tricks (#5)
            Trick::OneCycle => "step schedule: the base rate, ÷10 at 50% and 75% of training, momentum 0.9",
            Trick::MaxBatch => "the recipe's batch and learning rate",
            Trick::Adamw => "Adam with L2 added to the gradient (a separate adam-l2 reference cell)",
            Trick::Lars | Trick::Lamb => {
                "SGD with momentum at the same large batch, learning rate scaled linearly and warmed up"
            }
            Trick::Checkpointing => "every activation kept for backward",
            Trick::GradAccumulation => "the whole batch in one forward and backward",
            Trick::GradClipping => "no clipping",
            Trick::InputNorm => "raw pixels scaled to [0, 1] (a separate raw-inputs reference cell)",
            Trick::BatchNorm => {
                "no BatchNorm: plainly initialised convolutions with biases (a separate \
                 no-batch-norm reference cell)"
            }
            Trick::FlashAttention => {
                "attention written out: softmax(QKᵀ/√d + causal mask)·V, the T×T weights kept for \
                 backward"
            }
            Trick::Ddp => {
                "DataParallel: one process drives every GPU, copying the weights to each every step, \
                 splitting a batch of N × the cell's batch over them and adding their gradients onto \
                 the first (a separate data-parallel reference cell)"
            }
        }
    }

    /// What "on" means in the CIFAR ResNet recipe (and wherever the GPT's does not differ).
    fn cnn_on(self) -> &'static str {
        match self {
            Trick::Amp => "autocast to fp16 with dynamic loss scaling",
            Trick::AmpBf16 => "autocast to bf16, no loss scaling",
            Trick::CudnnBenchmark => "cuDNN autotunes convolution algorithms on first use",
            Trick::AvoidSync => "metrics accumulated on the device, read once per log interval",
            Trick::NoBiasBeforeBn => "no bias in convolutions followed by BatchNorm",
            Trick::ZeroGradNone => "gradients set to None before each backward",
            Trick::NoGradEval => "evaluation under no-grad",
            Trick::ChannelsLast => "NHWC (channels_last) activations and weights",
            // Data-pipeline tricks (#3)
            Trick::LoaderWorkers => {
                "one worker thread per core (at least 2) assembles and augments batches into a \
                 bounded prefetch queue; the same batches in the same order"
            }
            Trick::PinMemory => "reused pinned host buffers, non-blocking host-to-device copies",
            Trick::ZeroCopy => {
                "host pixels wrapped as tensors without a copy; unaugmented batches (evaluation, or \
                 with gpu-augment) gathered from the packed split held as one tensor"
            }
            Trick::GpuAugment => "random crop and flip of the whole batch on the training device",
            Trick::PackedDataset => "the images decoded once and packed in memory",
            Trick::FusedOptimizer => "SGD or AdamW updates every parameter in one fused multi-tensor kernel",
            Trick::Tf32 => {
                "TF32 in fp32 matmuls too (torch.set_float32_matmul_precision(\"high\")), as well as in \
                 cuDNN convolutions"
            }
            Trick::JitFusion => "residual epilogue relu(x + shortcut) as a TorchScript-compiled function",
            Trick::DebugOff => "anomaly detection off, as in the plain recipe",
            Trick::CudaGraphs => {
                "after 3 warm-up steps on a side stream, the whole step (forward, backward, optimizer \
                 with its learning rate and fp16 overflow skip on the device) captured once into a \
                 CUDA graph and replayed: one launch per step"
            }
            // Convergence and memory tricks (#5)
            Trick::OneCycle => {
                "1cycle: learning rate warmed up from 1/25 of its peak (4× the base rate) over 30% of \
                 training, then cosine-annealed to 1/250,000 of the peak, momentum cycled inversely \
                 between 0.95 and 0.85"
            }
            Trick::MaxBatch => {
                "the largest batch that fits (probed in child processes, doubling until out of memory), \
                 learning rate scaled linearly with it and warmed up"
            }
            Trick::Adamw => "AdamW: weight decay decoupled from the adaptive update",
            Trick::Lars => "LARS: momentum SGD with a layer-wise trust ratio ‖w‖/‖∇w + λw‖",
            Trick::Lamb => "LAMB: Adam updates scaled by a layer-wise trust ratio ‖w‖/‖update‖",
            Trick::Checkpointing => "only each segment's input kept; segments recomputed in backward",
            Trick::GradAccumulation => "4 micro-batches per optimizer step, gradients accumulated",
            Trick::GradClipping => {
                "gradients clipped to global norm 2.0, computed on the device without a host read"
            }
            Trick::InputNorm => "per-channel standardised inputs, as in the recipe",
            Trick::BatchNorm => "BatchNorm after every convolution, as in the recipe",
            Trick::FlashAttention => {
                "scaled_dot_product_attention with is_causal: one fused kernel (FlashAttention or \
                 memory-efficient attention on a GPU) that never stores the T×T weights"
            }
            Trick::Ddp => {
                "DDP: one process per GPU, each with the cell's batch; gradients averaged by NCCL \
                 all-reduce in 25 MiB buckets launched while backward runs; throughput summed over \
                 the GPUs"
            }
        }
    }

    /// The metric the trick is judged by.
    pub fn metric(self) -> Metric {
        match self {
            Trick::NoGradEval => Metric::EvalThroughput,
            Trick::Checkpointing | Trick::GradAccumulation => Metric::Memory,
            Trick::OneCycle
            | Trick::MaxBatch
            | Trick::Adamw
            | Trick::Lars
            | Trick::Lamb
            | Trick::GradClipping
            | Trick::InputNorm
            | Trick::BatchNorm => Metric::TimeToAccuracy,
            _ => Metric::Throughput,
        }
    }

    /// The label of the trick's own reference ("off") cell, for the tricks whose "off" side is
    /// not the plain recipe: `debug-off` (debugging left on), `adamw` (Adam with L2), `ddp`
    /// (DataParallel over every GPU), and the tricks already in the recipe, `batch-norm` and
    /// `input-norm` (taken out).
    pub fn reference_label(self) -> Option<&'static str> {
        match self {
            Trick::DebugOff => Some("debug-apis-on"),
            Trick::Adamw => Some("adam-l2"),
            Trick::BatchNorm => Some("no-batch-norm"),
            Trick::InputNorm => Some("raw-inputs"),
            Trick::Ddp => Some("data-parallel"),
            Trick::Tf32 => Some("strict-fp32"),
            _ => None,
        }
    }

    /// Whether the trick is compared with its own reference cell rather than with the baseline.
    /// Every trick with a reference cell is, except `tf32`: its reference (`strict-fp32`, TF32
    /// forbidden everywhere) is not its "off" side, since the baseline keeps PyTorch's default of
    /// TF32 in cuDNN. So `tf32` is compared with the baseline, and the strict-fp32 cell is itself
    /// compared with the baseline, which shows what that default is worth.
    pub fn judged_against_own_reference(self) -> bool {
        self.reference_label().is_some() && self != Trick::Tf32
    }

    /// Whether the trick can be measured for `workload` on `device` (a resolved device).
    pub fn applicability(self, workload: WorkloadId, device: DeviceSpec) -> Applicability {
        let needs_cuda = |why: &str| {
            if device.is_cuda() {
                Applicability::Applies
            } else {
                Applicability::NotApplicable(format!("needs a CUDA GPU: {why}"))
            }
        };
        match self {
            Trick::Amp => {
                needs_cuda("fp16 autocast pays off on tensor cores; CPUs have no fast fp16 kernels")
            }
            Trick::AmpBf16 => {
                needs_cuda("bf16 autocast pays off on tensor cores; on this CPU it is emulated")
            }
            Trick::CudnnBenchmark if !workload.is_cnn() => Applicability::NotApplicable(format!(
                "{workload} has no convolutions, whose algorithms are what cuDNN autotunes"
            )),
            Trick::CudnnBenchmark => needs_cuda("cuDNN is NVIDIA's GPU library"),
            Trick::Tf32 => needs_cuda("TF32 is a tensor-core format of Ampere and newer NVIDIA GPUs"),
            Trick::CudaGraphs if !device.is_cuda() => {
                needs_cuda("a CUDA graph records GPU kernel launches; a CPU step has none")
            }
            Trick::CudaGraphs if !ffi::cuda_graphs_compiled() => Applicability::NotApplicable(
                "this binary was built without CUDA headers, so without CUDA graph support \
                 (run scripts/setup-libtorch, which installs nvidia-cuda-crt, then rebuild)"
                    .to_owned(),
            ),
            Trick::CudaGraphs => Applicability::Applies,
            Trick::ChannelsLast if !workload.is_cnn() => Applicability::NotApplicable(format!(
                "{workload} has no convolutions: channels_last is a layout of 4-d image activations"
            )),
            Trick::NoBiasBeforeBn if !workload.is_cnn() => Applicability::NotApplicable(format!(
                "{workload} has no BatchNorm (it uses LayerNorm, and its linear layers have no biases)"
            )),
            Trick::GpuAugment if !workload.is_cnn() => Applicability::NotApplicable(format!(
                "{workload} reads text windows, which are not augmented"
            )),
            Trick::PackedDataset if !workload.is_cnn() => Applicability::NotApplicable(format!(
                "{workload} reads one text file, held in memory as tokens: there are no image files \
                 to decode"
            )),
            Trick::FlashAttention if workload.is_cnn() => {
                Applicability::NotApplicable(format!("{workload} has no attention"))
            }
            Trick::FlashAttention => Applicability::Applies,
            Trick::Ddp => ddp_applicability(device),
            Trick::PinMemory => needs_cuda("pinned memory speeds host-to-GPU copies; there is no GPU"),
            Trick::AvoidSync
            | Trick::NoBiasBeforeBn
            | Trick::ZeroGradNone
            | Trick::NoGradEval
            | Trick::ChannelsLast
            | Trick::LoaderWorkers
            | Trick::ZeroCopy
            | Trick::GpuAugment
            | Trick::PackedDataset => Applicability::Applies,
            Trick::FusedOptimizer | Trick::JitFusion | Trick::DebugOff => Applicability::Applies,
            Trick::InputNorm if !workload.is_cnn() => Applicability::NotApplicable(format!(
                "{workload} reads token ids, which are embedded, not standardised"
            )),
            Trick::BatchNorm if !workload.is_cnn() => Applicability::NotApplicable(format!(
                "{workload} normalises with LayerNorm, as transformers do; BatchNorm is the CNN's"
            )),
            Trick::MaxBatch if !workload.is_cnn() => Applicability::NotApplicable(format!(
                "{workload}'s recipe keeps nanoGPT's fixed batch of windows; the batch-size study is \
                 the CIFAR ResNet's (--design batch-sweep)"
            )),
            Trick::Adamw if !workload.is_cnn() => Applicability::NotApplicable(format!(
                "{workload}'s recipe trains with AdamW in every cell, so there is no Adam-with-L2 side \
                 to compare"
            )),
            Trick::Lars | Trick::Lamb if !workload.is_cnn() => Applicability::NotApplicable(format!(
                "{workload}'s recipe is AdamW at a fixed batch of windows; the large-batch optimizers \
                 are measured on the CIFAR ResNet at its large batch"
            )),
            Trick::OneCycle
            | Trick::MaxBatch
            | Trick::Adamw
            | Trick::Lars
            | Trick::Lamb
            | Trick::Checkpointing
            | Trick::GradAccumulation
            | Trick::GradClipping
            | Trick::InputNorm
            | Trick::BatchNorm => Applicability::Applies,
        }
    }
}

/// Whether `ddp` can be measured on `device`: it compares two ways of training on every GPU of
/// the machine, so it needs at least 2 CUDA GPUs, a binary built with gloo's headers (the
/// distributed engine) and with NCCL's (the GPU all-reduce).
fn ddp_applicability(device: DeviceSpec) -> Applicability {
    let gpus = if device.is_cuda() { tch::Cuda::device_count().max(0) as usize } else { 0 };
    if gpus < 2 {
        let has = if device.is_cuda() {
            format!("this machine has {gpus}")
        } else {
            format!("running on {device}")
        };
        return Applicability::NotApplicable(format!(
            "needs ≥ 2 GPUs ({has}): DDP and DataParallel both spread training over several GPUs"
        ));
    }
    if let Some(reason) = distributed::group::unavailable_reason() {
        return Applicability::NotApplicable(reason);
    }
    if !distributed::group::nccl_compiled() {
        return Applicability::NotApplicable(
            "this binary was built without NCCL's headers, so it cannot all-reduce on GPUs (run \
             scripts/setup-libtorch, which installs nvidia-cuda-cccl, then rebuild)"
                .to_owned(),
        );
    }
    Applicability::Applies
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

    /// The first reason, if any, why this set cannot run for `workload` on `device`.
    pub fn not_applicable_reason(&self, workload: WorkloadId, device: DeviceSpec) -> Option<String> {
        self.iter()
            .find_map(|t| match t.applicability(workload, device) {
                Applicability::Applies => None,
                Applicability::NotApplicable(reason) => Some(format!("{t}: {reason}")),
            })
            .or_else(|| self.conflict_reason())
            .or_else(|| {
                (workload.trains_with_dropout()
                    && self.has(Trick::CudaGraphs)
                    && self.has(Trick::Checkpointing))
                .then(|| {
                    format!(
                        "{}: checkpointing replays {workload}'s dropout from a saved generator state, \
                             which cannot be read while a CUDA graph is captured",
                        Trick::CudaGraphs
                    )
                })
            })
    }

    /// Why these tricks cannot be on together, if they cannot: each optimizer trick replaces the
    /// optimizer, and `fused-optimizer` has fused kernels for SGD and AdamW only (not LARS or LAMB).
    pub fn conflict_reason(&self) -> Option<String> {
        let optimizers: Vec<&str> =
            Trick::OPTIMIZERS.iter().filter(|&&t| self.has(t)).map(|t| t.id()).collect();
        if optimizers.len() > 1 {
            return Some(format!(
                "{} each replace the optimizer; only one can be on",
                optimizers.join(" and ")
            ));
        }
        if self.has(Trick::CudaGraphs) && self.has(Trick::Ddp) {
            return Some(format!(
                "{}: DDP's gradient all-reduce is driven from the host while backward runs, which a \
                 captured graph cannot replay",
                Trick::CudaGraphs
            ));
        }
        if self.has(Trick::CudaGraphs) && self.has(Trick::OneCycle) {
            return Some(format!(
                "{}: 1cycle changes the momentum every step, and the SGD and fused kernels take it \
                 as a number, which a captured graph would freeze",
                Trick::CudaGraphs
            ));
        }
        let unfused = [Trick::Lars, Trick::Lamb].into_iter().find(|&t| self.has(t));
        unfused.filter(|_| self.has(Trick::FusedOptimizer)).map(|t| {
            format!("{}: there is no fused kernel for {t}, only for SGD and AdamW", Trick::FusedOptimizer)
        })
    }

    /// Why this set cannot run with the data sources at hand, if it cannot: `packed-dataset` is
    /// measured against decoding image files, so it needs `--images` (`has_images`).
    pub fn missing_source_reason(&self, has_images: bool) -> Option<String> {
        (self.has(Trick::PackedDataset) && !has_images)
            .then(|| format!("{}: needs --images PATH: the JPEG/PNG files to decode", Trick::PackedDataset))
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

/// The groups `--tricks` accepts besides trick ids, each with the metrics of its tricks.
pub const TRICK_GROUPS: [(&str, &[Metric]); 4] = [
    ("all", &[Metric::Throughput, Metric::EvalThroughput, Metric::Memory, Metric::TimeToAccuracy]),
    ("throughput", &[Metric::Throughput, Metric::EvalThroughput]),
    ("memory", &[Metric::Memory]),
    ("convergence", &[Metric::TimeToAccuracy]),
];

/// Parses `--tricks`: a comma-separated list of trick ids and groups (`all`, `throughput`,
/// `memory`, `convergence`: the tricks judged by that metric), in catalogue order within a group.
pub fn parse_trick_list(s: &str) -> Result<Vec<Trick>, Error> {
    let mut tricks = Vec::new();
    for id in s.split(',').map(str::trim).filter(|id| !id.is_empty()) {
        let group = TRICK_GROUPS.iter().find(|(name, _)| *name == id);
        let members: Vec<Trick> = match group {
            Some((_, metrics)) => Trick::ALL.into_iter().filter(|t| metrics.contains(&t.metric())).collect(),
            None => vec![id.parse().map_err(|e| {
                Error::Invalid(format!("--tricks: {e}; or a group: all, throughput, memory, convergence"))
            })?],
        };
        for trick in members {
            if !tricks.contains(&trick) {
                tricks.push(trick);
            }
        }
    }
    if tricks.is_empty() {
        return Err(Error::Invalid(
            "--tricks: empty list; give trick ids or groups such as 'all'".to_owned(),
        ));
    }
    Ok(tricks)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_round_trip_and_are_unique() {
        let ids: BTreeSet<_> = Trick::ALL.iter().map(|t| t.id()).collect();
        assert_eq!(ids.len(), Trick::ALL.len());
        for t in Trick::ALL {
            assert_eq!(t.id().parse::<Trick>().unwrap(), t);
            assert_eq!(serde_json::to_string(&t).unwrap(), format!("\"{}\"", t.id()));
        }
    }

    #[test]
    fn groups_select_tricks_by_metric_and_mix_with_ids() {
        let convergence = parse_trick_list("convergence").unwrap();
        assert!(convergence.contains(&Trick::OneCycle) && convergence.contains(&Trick::BatchNorm));
        assert!(convergence.iter().all(|t| t.metric() == Metric::TimeToAccuracy));
        let mixed = parse_trick_list("memory,amp,checkpointing").unwrap();
        assert_eq!(mixed, [Trick::Checkpointing, Trick::GradAccumulation, Trick::Amp]);
        assert_eq!(parse_trick_list("all").unwrap().len(), Trick::ALL.len());
    }

    #[test]
    fn optimizer_tricks_conflict_with_each_other() {
        let both: TrickSet = [Trick::Adamw, Trick::Lars].into_iter().collect();
        assert!(both.conflict_reason().unwrap().contains("adamw and lars"));
        assert!(TrickSet::only(Trick::Lamb).conflict_reason().is_none());
        assert!(both.not_applicable_reason(WorkloadId::Resnet8, DeviceSpec::Cpu).is_some());
        let graphed_cycle: TrickSet = [Trick::CudaGraphs, Trick::OneCycle].into_iter().collect();
        assert!(graphed_cycle.conflict_reason().unwrap().contains("momentum"));
    }

    #[test]
    fn fused_optimizer_goes_with_sgd_and_adamw_but_not_lars_or_lamb() {
        for optimizer in [Trick::Lars, Trick::Lamb] {
            let set: TrickSet = [Trick::FusedOptimizer, optimizer].into_iter().collect();
            let reason = set.conflict_reason().unwrap();
            assert_eq!(
                reason,
                format!("fused-optimizer: there is no fused kernel for {optimizer}, only for SGD and AdamW")
            );
        }
        assert!(TrickSet::only(Trick::FusedOptimizer).conflict_reason().is_none());
        let adamw: TrickSet = [Trick::FusedOptimizer, Trick::Adamw].into_iter().collect();
        assert!(adamw.conflict_reason().is_none());
    }

    #[test]
    fn unknown_trick_lists_the_valid_names() {
        let message = parse_trick_list("amp,turbo").unwrap_err().to_string();
        assert!(message.contains("'turbo'") && message.contains("channels-last"), "{message}");
        assert!(parse_trick_list(" , ").is_err());
    }

    #[test]
    fn gpu_only_tricks_are_not_applicable_on_cpu_with_a_reason() {
        for t in [Trick::Amp, Trick::AmpBf16, Trick::CudnnBenchmark, Trick::Tf32] {
            match t.applicability(WorkloadId::Resnet20, DeviceSpec::Cpu) {
                Applicability::NotApplicable(reason) => assert!(reason.contains("CUDA"), "{reason}"),
                Applicability::Applies => panic!("{t} must not apply on CPU"),
            }
            assert_eq!(t.applicability(WorkloadId::Resnet20, DeviceSpec::Cuda(0)), Applicability::Applies);
        }
        let set: TrickSet = [Trick::ChannelsLast, Trick::Amp].into_iter().collect();
        let reason = set.not_applicable_reason(WorkloadId::Resnet56, DeviceSpec::Cpu).unwrap();
        assert!(reason.starts_with("amp: needs a CUDA GPU"), "{reason}");
    }

    #[test]
    fn pin_memory_needs_a_gpu_and_packed_dataset_needs_image_files() {
        match Trick::PinMemory.applicability(WorkloadId::Resnet20, DeviceSpec::Cpu) {
            Applicability::NotApplicable(reason) => {
                assert!(
                    reason.contains("pinned memory speeds host-to-GPU copies; there is no GPU"),
                    "{reason}"
                )
            }
            Applicability::Applies => panic!("pin-memory must not apply on CPU"),
        }
        for t in [Trick::LoaderWorkers, Trick::ZeroCopy, Trick::GpuAugment, Trick::PackedDataset] {
            assert_eq!(t.applicability(WorkloadId::Resnet20, DeviceSpec::Cpu), Applicability::Applies, "{t}");
        }
        let packed = TrickSet::only(Trick::PackedDataset);
        let reason = packed.missing_source_reason(false).unwrap();
        assert_eq!(reason, "packed-dataset: needs --images PATH: the JPEG/PNG files to decode");
        assert_eq!(packed.missing_source_reason(true), None);
        assert_eq!(TrickSet::baseline().missing_source_reason(false), None);
    }

    #[test]
    fn ddp_needs_two_gpus_and_does_not_go_with_cuda_graphs() {
        match Trick::Ddp.applicability(WorkloadId::Resnet8, DeviceSpec::Cpu) {
            Applicability::NotApplicable(reason) => {
                assert!(reason.starts_with("needs ≥ 2 GPUs (running on cpu)"), "{reason}")
            }
            Applicability::Applies => panic!("ddp must not apply on a CPU"),
        }
        let gpus = tch::Cuda::device_count();
        if gpus < 2 {
            match Trick::Ddp.applicability(WorkloadId::GptMini, DeviceSpec::Cuda(0)) {
                Applicability::NotApplicable(reason) => {
                    assert!(
                        reason.starts_with(&format!("needs ≥ 2 GPUs (this machine has {gpus})")),
                        "{reason}"
                    )
                }
                Applicability::Applies => panic!("ddp must not apply with fewer than 2 GPUs"),
            }
        }
        let graphed: TrickSet = [Trick::Ddp, Trick::CudaGraphs].into_iter().collect();
        assert!(graphed.conflict_reason().unwrap().contains("all-reduce"));
        assert_eq!(Trick::Ddp.reference_label(), Some("data-parallel"));
        assert_eq!((Trick::Ddp.guide_number(), Trick::Ddp.metric()), (Some(10), Metric::Throughput));
    }

    #[test]
    fn labels_are_stable() {
        assert_eq!(TrickSet::baseline().label(), "baseline");
        let set: TrickSet = [Trick::ZeroGradNone, Trick::Amp].into_iter().collect();
        assert_eq!(set.label(), "amp+zero-grad-none");
    }

    #[test]
    fn the_gpt_runs_the_issue_list_and_reports_the_cnn_only_tricks_with_reasons() {
        let on_gpu = |t: Trick| t.applicability(WorkloadId::GptShakespeare, DeviceSpec::Cuda(0));
        let gpt_tricks = [
            Trick::Amp,
            Trick::AmpBf16,
            Trick::Tf32,
            Trick::FlashAttention,
            Trick::FusedOptimizer,
            Trick::GradClipping,
            Trick::Checkpointing,
            Trick::GradAccumulation,
            Trick::JitFusion,
            Trick::ZeroGradNone,
            Trick::AvoidSync,
            Trick::NoGradEval,
            Trick::DebugOff,
            Trick::LoaderWorkers,
            Trick::PinMemory,
            Trick::OneCycle,
        ];
        for t in gpt_tricks {
            assert_eq!(on_gpu(t), Applicability::Applies, "{t}");
        }
        let cnn_only = [
            (Trick::CudnnBenchmark, "convolutions"),
            (Trick::NoBiasBeforeBn, "BatchNorm"),
            (Trick::ChannelsLast, "convolutions"),
            (Trick::GpuAugment, "not augmented"),
            (Trick::PackedDataset, "text file"),
            (Trick::MaxBatch, "batch-sweep"),
            (Trick::Adamw, "AdamW in every cell"),
            (Trick::Lars, "large-batch"),
            (Trick::Lamb, "large-batch"),
            (Trick::InputNorm, "token ids"),
            (Trick::BatchNorm, "LayerNorm"),
        ];
        for (t, why) in cnn_only {
            match on_gpu(t) {
                Applicability::NotApplicable(reason) => {
                    assert!(reason.starts_with("gpt-shakespeare") && reason.contains(why), "{t}: {reason}")
                }
                Applicability::Applies => panic!("{t} must not apply to the GPT"),
            }
        }
        match Trick::FlashAttention.applicability(WorkloadId::Resnet56, DeviceSpec::Cuda(0)) {
            Applicability::NotApplicable(reason) => assert_eq!(reason, "resnet56 has no attention"),
            Applicability::Applies => panic!("flash-attention must not apply to a ResNet"),
        }
        // Checkpointing replays dropout from a saved generator state, which a capture forbids.
        let both: TrickSet = [Trick::CudaGraphs, Trick::Checkpointing].into_iter().collect();
        if ffi::cuda_graphs_compiled() {
            let reason = both.not_applicable_reason(WorkloadId::GptShakespeare, DeviceSpec::Cuda(0)).unwrap();
            assert!(reason.contains("dropout"), "{reason}");
            assert!(both.not_applicable_reason(WorkloadId::GptMini, DeviceSpec::Cuda(0)).is_none());
        }
    }

    #[test]
    fn off_and_on_read_in_the_workload_family_s_terms() {
        assert!(Trick::OneCycle.off(Family::CharGpt).contains("cosine"));
        assert!(Trick::OneCycle.off(Family::CifarResnet).contains("step schedule"));
        assert!(Trick::GradClipping.on(Family::CharGpt).contains("1.0"));
        assert!(Trick::JitFusion.on(Family::CharGpt).contains("GELU"));
        assert_eq!(Trick::Amp.on(Family::CharGpt), Trick::Amp.on(Family::CifarResnet));
    }
}
