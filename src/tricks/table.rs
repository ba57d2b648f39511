//! The trick table: one entry per trick holding every fact about it (guide number, metric,
//! what "off" and "on" mean in each family's recipe, reference cell, needs, plot colour and the
//! guides' claim). The match is exhaustive: a new trick does not compile until it has its entry.

use super::info::Wording::{ByFamily, Same};
use super::info::{ActsOn, InPytorch, Pairing, Reference, Stage, TrickInfo};
use super::{MemoryFigure, Metric};
use super::{Need, Trick};
use crate::vocabulary::StepPart;

/// The baseline of both mixed-precision tricks.
const FP32_EVERYWHERE: &str = "fp32 everywhere";

/// The baseline of both large-batch optimizers.
const SGD_AT_THE_LARGE_BATCH: &str =
    "SGD with momentum at the same large batch, learning rate scaled linearly and warmed up";

/// Why neither large-batch optimizer is measured on the GPT.
const LARGE_BATCH_ONLY: &str = "{workload}'s recipe is AdamW at a fixed batch of windows; the large-batch \
                                optimizers are measured on the CIFAR ResNet at its large batch";

/// The attention written out op by op: the "off" side of `flash-attention`.
const ATTENTION_WRITTEN_OUT: &str =
    "attention written out: softmax(QKᵀ/√d + causal mask)·V, the T×T weights kept for backward";

/// The "off" side of every forced-backend trick: `flash-attention`, PyTorch's own choice of
/// backend, so that every forced backend is compared with the choice it overrides.
const SDPA_OFF: &str = "scaled_dot_product_attention with every backend allowed, PyTorch choosing one (the \
                        flash-attention trick); on a CUDA GPU both sides run under bf16 autocast \
                        (amp-bf16), since FlashAttention and cuDNN attention take only fp16 and bf16";

/// The reference of every forced-backend trick: `flash-attention` in its place, under `amp-bf16`
/// on a CUDA GPU.
const SDPA_REFERENCE: Reference =
    Reference::Swapped { with: Trick::FlashAttention, cuda_precision: Some(Trick::AmpBf16) };

/// Why a trick judged by time to accuracy has no ceiling.
const TRAINED_TO_TARGET_UNBOUNDED: &str =
    "judged by time to accuracy: it changes what the steps learn, not how fast one step runs";

/// Why `no-grad-eval` has no ceiling.
const EVALUATION_UNBOUNDED: &str = "it acts on evaluation, whose batches are not broken into phases: \
                                    autograd's recording inside every operator";

/// Why a trick judged by time to accuracy is not paired.
const TRAINED_TO_TARGET: Pairing =
    Pairing::Processes("judged by time to accuracy: each seed trains to the target in a process of its own");

/// Why the PyTorch engine does not apply a trick judged by time to accuracy.
/// Why anomaly detection costs libtorch far more than it costs eager PyTorch.
const ANOMALY_MODE_GAP: &str = "in libtorch, anomaly mode stores a symbolised C++ backtrace with every \
                                operation autograd records (torch::autograd::AnomalyMetadata::store_stack \
                                calls c10::get_backtrace, which names each frame through glibc's dladdr); \
                                Python's anomaly mode installs its own metadata, which stores the Python \
                                stack instead, so turning it off saves a PyTorch script far less. Sampled \
                                with perf on the 2-core VM, libtorch's debug-off processes spent 44–67% of \
                                their CPU time in dladdr's _dl_addr, the PyTorch engine's 0.02%";

const MICRO_BATCH_GAP: &str = "its throughput cost is larger in PyTorch because each micro-batch pays the \
                               interpreter's time between operators again: in traces of ResNet-8 at batch \
                               128 on the 2-core VM, four micro-batches added 6.5 ms a step outside \
                               operators in PyTorch (5.7 to 12.2 ms) against 2.3 ms on libtorch (2.1 to \
                               4.4), with the same arithmetic operators on both";

const ANOMALY_MODE_OPS: &str = "anomaly mode checks the outputs of each backward function for NaN \
                                (aten::ne and a host read each); in a ResNet-8 step PyTorch's checks one \
                                output more than libtorch's (69 against 68 a step), the GPT's the same 134";

const LOADER_WORKERS_OPS: &str = "PyTorch's DataLoader workers are processes that collate each batch and \
                                  hand it over in shared memory (aten::set_ in the training process instead \
                                  of the collating aten::copy_); trickbench's workers are threads of the \
                                  training process, which copy the batch as its own loader does";

const GPU_AUGMENT_OPS: &str = "both draw the same random numbers on the device (three aten::random_ a \
                               step) and crop and flip the whole batch with one pad and one gather, but \
                               the index is built with different operators: torch.where over aranges \
                               and advanced indexing (aten::index) in PyTorch, a flipped ramp and a \
                               multiplied mask (aten::eq, aten::mul) with aten::gather in trickbench";

/// Why a trick judged by its peak memory keeps a process of its own pair.
const PEAK_MEMORY_JUDGED: &str = "judged by its peak memory, which is measured best with no other arm's \
                                  model, optimizer state and batches held beside it";

/// The table entry of `trick`.
pub(super) fn info(trick: Trick) -> &'static TrickInfo {
    match trick {
        Trick::Amp => &TrickInfo {
            guide_number: Some(4),
            metric: Metric::Throughput,
            stage: Stage::Step,
            acts_on: ActsOn::Part(StepPart::ConvolutionsAndMatmuls),
            off: Same(FP32_EVERYWHERE),
            on: Same("autocast to fp16 with dynamic loss scaling"),
            reference: Reference::Baseline,
            pairing: Pairing::Paired,
            needs: &[Need::Cuda("fp16 autocast pays off on tensor cores; CPUs have no fast fp16 kernels")],
            pytorch: InPytorch::Applies("torch.autocast(\"cuda\", dtype=torch.float16) around the forward and the loss, with torch.amp.GradScaler scaling the loss"),
            engine_gap: None,
            ops_differ: None,
            colour: [31, 119, 180],
            claim: "Guide #4 and NVIDIA's tuning guide: autocast to fp16 with a gradient scaler runs matrix \
                    multiplies and convolutions on tensor cores, giving up to about 3× overall speed-up on \
                    arithmetically intense models on Volta and newer GPUs, and smaller activations.",
        },
        Trick::AmpBf16 => &TrickInfo {
            guide_number: Some(4),
            metric: Metric::Throughput,
            stage: Stage::Step,
            acts_on: ActsOn::Part(StepPart::ConvolutionsAndMatmuls),
            off: Same(FP32_EVERYWHERE),
            on: Same("autocast to bf16, no loss scaling"),
            reference: Reference::Baseline,
            pairing: Pairing::Paired,
            needs: &[Need::Cuda("bf16 autocast pays off on tensor cores; on this CPU it is emulated")],
            pytorch: InPytorch::Applies("torch.autocast(\"cuda\", dtype=torch.bfloat16) around the forward and the loss"),
            engine_gap: None,
            ops_differ: None,
            colour: [23, 190, 207],
            claim: "Modern addition to guide #4: bf16 has fp32's exponent range, so autocast needs no loss \
                    scaling, and on Ampere and newer it runs on tensor cores as fast as fp16.",
        },
        Trick::CudnnBenchmark => &TrickInfo {
            guide_number: Some(6),
            metric: Metric::Throughput,
            stage: Stage::Step,
            acts_on: ActsOn::Part(StepPart::ConvolutionsAndMatmuls),
            off: Same("cuDNN picks convolution algorithms by heuristics"),
            on: Same("cuDNN autotunes convolution algorithms on first use"),
            reference: Reference::Baseline,
            pairing: Pairing::Processes(
                "cuDNN keeps one cache of convolution plans per process, looked up before the benchmark \
                 flag is read and keyed without it (PyTorch 2.11's cuDNN v8 run_single_conv), so in one \
                 process whichever side ran a convolution first would choose the plan for both",
            ),
            needs: &[
                Need::Cnn("{workload} has no convolutions, whose algorithms are what cuDNN autotunes"),
                Need::Cuda("cuDNN is NVIDIA's GPU library"),
            ],
            pytorch: InPytorch::Applies("torch.backends.cudnn.benchmark = True"),
            engine_gap: None,
            ops_differ: None,
            colour: [255, 127, 14],
            claim: "Guide #6 and NVIDIA's tuning guide: with torch.backends.cudnn.benchmark = True cuDNN \
                    times several convolution algorithms and keeps the fastest, which speeds up CNNs whose \
                    input shapes do not change.",
        },
        Trick::AvoidSync => &TrickInfo {
            guide_number: Some(7),
            metric: Metric::Throughput,
            stage: Stage::Step,
            acts_on: ActsOn::Part(StepPart::Metrics),
            off: Same("loss and accuracy read to the host (.item()) every step"),
            on: Same("metrics accumulated on the device, read once per log interval"),
            reference: Reference::Baseline,
            pairing: Pairing::Paired,
            needs: &[],
            pytorch: InPytorch::Applies("the loss and the count of correct predictions summed on the device and read with .item() once per log interval"),
            engine_gap: None,
            ops_differ: None,
            colour: [44, 160, 44],
            claim: "Guide #7 and NVIDIA's tuning guide: host reads such as .item(), .cpu() or printing a \
                    tensor every step force a CPU-GPU synchronisation that stalls the pipeline; keep metrics \
                    on the device and read them rarely.",
        },
        Trick::NoBiasBeforeBn => &TrickInfo {
            guide_number: Some(15),
            metric: Metric::Throughput,
            stage: Stage::Step,
            acts_on: ActsOn::Part(StepPart::ConvolutionsAndMatmuls),
            off: Same("convolutions followed by BatchNorm carry a bias"),
            on: Same("no bias in convolutions followed by BatchNorm"),
            reference: Reference::Baseline,
            pairing: Pairing::Paired,
            needs: &[Need::Cnn(
                "{workload} has no BatchNorm (it uses LayerNorm, and its linear layers have no biases)",
            )],
            pytorch: InPytorch::Applies("nn.Conv2d(..., bias=False) before every BatchNorm2d"),
            engine_gap: None,
            ops_differ: None,
            colour: [148, 103, 189],
            claim: "Guide #15 and NVIDIA's tuning guide: a convolution bias directly before BatchNorm is \
                    cancelled by the normalisation, so dropping it saves parameters and work for free.",
        },
        Trick::ZeroGradNone => &TrickInfo {
            guide_number: Some(11),
            metric: Metric::Throughput,
            stage: Stage::Step,
            acts_on: ActsOn::Part(StepPart::Optimizer),
            off: Same("gradients zero-filled before each backward"),
            on: Same("gradients set to None before each backward"),
            reference: Reference::Baseline,
            pairing: Pairing::Paired,
            needs: &[],
            pytorch: InPytorch::Applies("optimizer.zero_grad(set_to_none=True)"),
            engine_gap: None,
            ops_differ: None,
            colour: [140, 86, 75],
            claim: "Guide #11 and NVIDIA's tuning guide: setting gradients to None instead of zero-filling \
                    them skips one memset per parameter and lets backward write instead of accumulate.",
        },
        Trick::NoGradEval => &TrickInfo {
            guide_number: Some(16),
            metric: Metric::EvalThroughput,
            stage: Stage::Evaluation,
            acts_on: ActsOn::Unbounded(EVALUATION_UNBOUNDED),
            off: Same("evaluation records autograd graphs"),
            on: Same("evaluation under no-grad"),
            reference: Reference::Baseline,
            pairing: Pairing::Paired,
            needs: &[],
            pytorch: InPytorch::Applies("evaluation under torch.no_grad()"),
            engine_gap: None,
            ops_differ: None,
            colour: [227, 119, 194],
            claim: "Guide #16: evaluating under torch.no_grad() records no autograd graph, so evaluation is \
                    faster and needs less memory.",
        },
        Trick::ChannelsLast => &TrickInfo {
            guide_number: None,
            metric: Metric::Throughput,
            stage: Stage::Step,
            acts_on: ActsOn::Part(StepPart::ConvolutionsAndMatmuls),
            off: Same("NCHW (contiguous) activations and weights"),
            on: Same("NHWC (channels_last) activations and weights"),
            reference: Reference::Baseline,
            pairing: Pairing::Paired,
            needs: &[Need::Cnn(
                "{workload} has no convolutions: channels_last is a layout of 4-d image activations",
            )],
            pytorch: InPytorch::Applies("model.to(memory_format=torch.channels_last), and inputs .contiguous(memory_format=torch.channels_last)"),
            engine_gap: None,
            ops_differ: None,
            colour: [188, 189, 34],
            claim:
                "Modern addition (NVIDIA's tuning guide, PyTorch channels_last tutorial): the NHWC memory \
                 format lets tensor-core convolution kernels run without layout transposes, which speeds up \
                 CNN training, most of all together with mixed precision.",
        },
        // Data-pipeline tricks
        Trick::LoaderWorkers => &TrickInfo {
            guide_number: Some(2),
            metric: Metric::Throughput,
            stage: Stage::Loader,
            acts_on: ActsOn::Part(StepPart::Loader),
            off: ByFamily {
                cifar_resnet: "batches assembled and augmented on the training thread",
                char_gpt: "batches of random windows assembled on the training thread",
            },
            on: ByFamily {
                cifar_resnet:
                    "one worker thread per core (at least 2) assembles and augments batches into a bounded \
                     prefetch queue; the same batches in the same order",
                char_gpt:
                    "one worker thread per core (at least 2) assembles batches into a bounded prefetch \
                     queue; the same batches in the same order",
            },
            reference: Reference::Baseline,
            pairing: Pairing::Processes(
                "its worker threads go on assembling batches while the other side's windows are timed, \
                 loading the machine that side runs on",
            ),
            needs: &[],
            pytorch: InPytorch::Applies("torch.utils.data.DataLoader(num_workers=N), N as many worker processes as libtorch's worker threads, against num_workers=0"),
            engine_gap: None,
            ops_differ: Some(LOADER_WORKERS_OPS),
            colour: [57, 59, 121],
            claim: "Guide #2 and NVIDIA's tuning guide: DataLoader(num_workers > 0) loads and augments \
                    batches in worker processes while the GPU trains, so the training loop no longer waits \
                    for data.",
        },
        Trick::PinMemory => &TrickInfo {
            guide_number: Some(2),
            metric: Metric::Throughput,
            stage: Stage::Loader,
            acts_on: ActsOn::Part(StepPart::Loader),
            off: Same("pageable host tensors, blocking host-to-device copies"),
            on: Same("reused pinned host buffers, non-blocking host-to-device copies"),
            reference: Reference::Baseline,
            pairing: Pairing::Paired,
            needs: &[Need::Cuda("pinned memory speeds host-to-GPU copies; there is no GPU")],
            pytorch: InPytorch::Applies("DataLoader(pin_memory=True) and .to(device, non_blocking=True)"),
            engine_gap: None,
            ops_differ: None,
            colour: [99, 121, 57],
            claim: "Guide #2 and NVIDIA's tuning guide: pin_memory=True stages batches in page-locked host \
                    memory, which makes host-to-GPU copies faster and lets them run asynchronously with \
                    non_blocking=True.",
        },
        Trick::ZeroCopy => &TrickInfo {
            guide_number: Some(12),
            metric: Metric::Throughput,
            stage: Stage::Loader,
            acts_on: ActsOn::Part(StepPart::Loader),
            off: ByFamily {
                cifar_resnet: "each batch's pixels copied from host vectors into a new tensor",
                char_gpt: "each batch's tokens copied into a new tensor",
            },
            on: ByFamily {
                cifar_resnet: "host pixels wrapped as tensors without a copy; unaugmented batches \
                               (evaluation, or with gpu-augment) gathered from the packed split held as one \
                               tensor",
                char_gpt: "the host batch wrapped as a tensor without a copy",
            },
            reference: Reference::Baseline,
            pairing: Pairing::Paired,
            needs: &[],
            pytorch: InPytorch::Applies("the host batch wrapped with torch.from_numpy instead of copied with torch.tensor; unaugmented batches gathered from the split held as one tensor (index_select)"),
            engine_gap: None,
            ops_differ: None,
            colour: [140, 109, 49],
            claim: "Guide #12: build tensors with torch.from_numpy or torch.as_tensor, which share the host \
                    memory, instead of torch.tensor, which copies it.",
        },
        Trick::GpuAugment => &TrickInfo {
            guide_number: None,
            metric: Metric::Throughput,
            stage: Stage::Loader,
            acts_on: ActsOn::Part(StepPart::Loader),
            off: Same("random crop and flip per image in a CPU loop"),
            on: Same("random crop and flip of the whole batch on the training device"),
            reference: Reference::Baseline,
            pairing: Pairing::Paired,
            needs: &[Need::Cnn("{workload} reads text windows, which are not augmented")],
            pytorch: InPytorch::Applies("random crop and flip of the whole batch on the device (torch.randint offsets, one gather), against numpy crops image by image in the DataLoader"),
            engine_gap: None,
            ops_differ: Some(GPU_AUGMENT_OPS),
            colour: [132, 60, 57],
            claim:
                "Reader tip: augmenting whole batches on the GPU instead of image by image in CPU workers \
                 removes the CPU bottleneck of small-image training.",
        },
        Trick::PackedDataset => &TrickInfo {
            guide_number: None,
            metric: Metric::Throughput,
            stage: Stage::Loader,
            acts_on: ActsOn::Part(StepPart::Loader),
            off: Same("with --images PATH, every batch decodes its JPEG/PNG files (else the packed split)"),
            on: Same("the images decoded once and packed in memory"),
            reference: Reference::Baseline,
            pairing: Pairing::Paired,
            needs: &[Need::Cnn(
                "{workload} reads one text file, held in memory as tokens: there are no image files to \
                 decode",
            )],
            pytorch: InPytorch::Applies("the JPEG/PNG files decoded once with Pillow when the side is built, against decoding them (Pillow, as torchvision's ImageFolder does) each time a batch takes them"),
            engine_gap: None,
            ops_differ: None,
            colour: [123, 65, 115],
            claim: "Reader tip: decoding thousands of small JPEG/PNG files every epoch costs more CPU time \
                    than the training step; pack the decoded dataset once into one binary file.",
        },
        // Step tricks
        Trick::FusedOptimizer => &TrickInfo {
            guide_number: Some(5),
            metric: Metric::Throughput,
            stage: Stage::Step,
            acts_on: ActsOn::Part(StepPart::Optimizer),
            off: Same("SGD or AdamW updates each parameter in turn (several small kernels each)"),
            on: Same("SGD or AdamW updates every parameter in one fused multi-tensor kernel"),
            reference: Reference::Baseline,
            pairing: Pairing::Paired,
            needs: &[],
            pytorch: InPytorch::Applies("the torch.optim optimizer built with fused=True, against PyTorch's default implementation (foreach on CUDA)"),
            engine_gap: None,
            ops_differ: None,
            colour: [174, 199, 232],
            claim: "Guide #5 and NVIDIA's tuning guide: fused optimizers apply the update to all parameters \
                    in a few multi-tensor kernel launches instead of several launches per parameter, which \
                    removes launch overhead and memory round trips and speeds up the optimizer step.",
        },
        Trick::Tf32 => &TrickInfo {
            guide_number: None,
            metric: Metric::Throughput,
            stage: Stage::Step,
            acts_on: ActsOn::Part(StepPart::ConvolutionsAndMatmuls),
            off: Same(
                "PyTorch's default: TF32 in cuDNN convolutions, fp32 matmuls at full precision (a separate \
                 strict-fp32 reference cell forbids TF32 in both)",
            ),
            on: Same(
                "TF32 in fp32 matmuls too (torch.set_float32_matmul_precision(\"high\")), as well as in \
                 cuDNN convolutions",
            ),
            reference: Reference::Beside,
            pairing: Pairing::Paired,
            needs: &[Need::Cuda("TF32 is a tensor-core format of Ampere and newer NVIDIA GPUs")],
            pytorch: InPytorch::Applies("torch.backends.cuda.matmul.allow_tf32 = True (cuDNN's convolutions already may use TF32 by default)"),
            engine_gap: None,
            ops_differ: None,
            colour: [255, 187, 120],
            claim: "Modern addition (NVIDIA's tuning guide, PyTorch's TF32 notes): on Ampere and newer GPUs \
                    TF32 runs fp32 matrix multiplies and convolutions on tensor cores with a 10-bit \
                    mantissa, up to about 8× faster than full fp32 math, with no code change beyond a flag. \
                    PyTorch already allows it in cuDNN convolutions by default; the flag adds the matmuls.",
        },
        Trick::JitFusion => &TrickInfo {
            guide_number: Some(18),
            metric: Metric::Throughput,
            stage: Stage::Step,
            acts_on: ActsOn::Part(StepPart::Elementwise),
            off: ByFamily {
                cifar_resnet: "residual epilogue as eager ops: add, then ReLU (a kernel each)",
                char_gpt: "GELU and the residual dropout-add as eager ops (a kernel each)",
            },
            on: ByFamily {
                cifar_resnet: "residual epilogue relu(x + shortcut) as a TorchScript-compiled function",
                char_gpt:
                    "GELU and the residual dropout-add as TorchScript-compiled functions the fuser can run \
                     as one kernel each",
            },
            reference: Reference::Baseline,
            pairing: Pairing::Paired,
            needs: &[],
            pytorch: InPytorch::Applies("the pointwise chains as torch.jit.script functions: the block's relu(x + shortcut); the GPT's exact GELU and residual dropout-add"),
            engine_gap: None,
            ops_differ: None,
            colour: [152, 223, 138],
            claim: "Bonus #18 and NVIDIA's tuning guide: scripting a chain of pointwise operations with \
                    TorchScript lets its fuser run them as one kernel, cutting kernel launches and memory \
                    reads and writes for memory-bound code.",
        },
        Trick::DebugOff => &TrickInfo {
            guide_number: Some(13),
            metric: Metric::Throughput,
            stage: Stage::Step,
            acts_on: ActsOn::Unbounded("the debugging APIs slow every operator of the step, so no one part of it bounds their removal"),
            off: Same("autograd anomaly detection left on (a separate debug-apis-on reference cell)"),
            on: Same("anomaly detection off, as in the plain recipe"),
            reference: Reference::Own,
            pairing: Pairing::Paired,
            needs: &[],
            pytorch: InPytorch::Applies("torch.autograd.set_detect_anomaly(False), against True in its reference"),
            engine_gap: Some(ANOMALY_MODE_GAP),
            ops_differ: Some(ANOMALY_MODE_OPS),
            colour: [196, 156, 148],
            claim: "Guide #13: anomaly detection (torch.autograd.set_detect_anomaly) and the autograd \
                    profiler record extra information for every operation and slow training down; switch \
                    them off once debugging is done.",
        },
        Trick::CudaGraphs => &TrickInfo {
            guide_number: None,
            metric: Metric::Throughput,
            stage: Stage::Step,
            acts_on: ActsOn::Part(StepPart::Overhead),
            off: Same("every kernel of the step launched from the host, op by op"),
            on: Same(
                "after 3 warm-up steps on a side stream, the whole step (forward, backward, optimizer with \
                 its learning rate and fp16 overflow skip on the device) captured once into a CUDA graph and \
                 replayed: one launch per step",
            ),
            reference: Reference::Baseline,
            pairing: Pairing::Paired,
            needs: &[
                Need::Cuda("a CUDA graph records GPU kernel launches; a CPU step has none"),
                Need::CudaGraphsCompiled,
            ],
            pytorch: InPytorch::Applies("three steps on a side stream, then the whole step captured with torch.cuda.graph(g) and replayed with g.replay(), the batch copied into static tensors (Adam and AdamW with capturable=True)"),
            engine_gap: None,
            ops_differ: None,
            colour: [247, 182, 210],
            claim: "Modern addition (PyTorch's CUDA Graphs blog post and NVIDIA's tuning guide): capturing \
                    the whole training step once and replaying it replaces thousands of kernel launches with \
                    one, which pays most when the GPU waits on the CPU (small batches, small models); NVIDIA \
                    reported up to 1.7× for Mask R-CNN and 1.12× for BERT at scale.",
        },
        Trick::TorchCompile => &TrickInfo {
            guide_number: None,
            metric: Metric::Throughput,
            stage: Stage::Step,
            acts_on: ActsOn::Part(StepPart::Overhead),
            off: Same("eager PyTorch: every operation dispatched one by one from Python"),
            on: Same(
                "the model wrapped in torch.compile: TorchDynamo captures the forward as a graph, \
                 AOTAutograd derives its backward, inductor fuses both into generated C++ (CPU) or Triton \
                 (GPU) kernels; the optimizer step stays eager",
            ),
            reference: Reference::Baseline,
            pairing: Pairing::Paired,
            needs: &[Need::ThroughPytorch(
                "torch.compile cannot be reached from libtorch's C++ API; the PyTorch engine (`run --engine \
                 pytorch` or `both`) measures it, and `trickbench parity --compile` beside eager PyTorch",
            )],
            pytorch: InPytorch::Applies("model = torch.compile(model); the loss, zero_grad and the optimizer step stay eager"),
            engine_gap: None,
            ops_differ: None,
            colour: [121, 33, 143],
            claim: "Modern addition (the PyTorch 2 paper, Ansel et al., ASPLOS 2024; nanoGPT's README): \
                    compiling the model with TorchDynamo and inductor fuses its operations into generated \
                    kernels; the paper reports geometric-mean speed-ups on an A100 over 180+ models of \
                    1.41× in training and 2.27× in inference, nanoGPT's README says compile takes an \
                    iteration from ~250 ms to 135 ms, and airbench and modded-nanogpt compile their models.",
        },
        // Convergence and memory tricks
        Trick::OneCycle => &TrickInfo {
            guide_number: Some(1),
            metric: Metric::TimeToAccuracy,
            stage: Stage::Schedule,
            acts_on: ActsOn::Unbounded(TRAINED_TO_TARGET_UNBOUNDED),
            off: ByFamily {
                cifar_resnet: "step schedule: the base rate, ÷10 at 50% and 75% of training, momentum 0.9",
                char_gpt: "the recipe's schedule: linear warm-up over 100 steps to 1e-3, cosine decay to \
                           1e-4",
            },
            on: ByFamily {
                cifar_resnet:
                    "1cycle: learning rate warmed up from 1/25 of its peak (4× the base rate) over 30% of \
                     training, then cosine-annealed to 1/250,000 of the peak, momentum cycled inversely \
                     between 0.95 and 0.85",
                char_gpt: "1cycle at the same peak of 1e-3: warmed up from 1/25 of it over 30% of training, \
                           then cosine-annealed to 1/250,000 of it, β₁ cycled inversely between 0.95 and \
                           0.85",
            },
            reference: Reference::Baseline,
            pairing: TRAINED_TO_TARGET,
            needs: &[],
            pytorch: InPytorch::Applies("torch.optim.lr_scheduler.OneCycleLR(optimizer, max_lr, total_steps) stepped after every optimizer step, momentum (Adam's beta1) cycled"),
            engine_gap: None,
            ops_differ: None,
            colour: [107, 110, 207],
            claim: "Guide #1 (Smith & Topin, Super-Convergence): the 1cycle policy (warm up to a large \
                    learning rate, anneal far below the start, momentum cycled inversely) reaches a given \
                    accuracy in a fraction of the iterations a step schedule needs, e.g. ResNet-56 on \
                    CIFAR-10 in about 10k instead of 80k iterations.",
        },
        Trick::MaxBatch => &TrickInfo {
            guide_number: Some(3),
            metric: Metric::TimeToAccuracy,
            stage: Stage::Schedule,
            acts_on: ActsOn::Unbounded("it changes the batch size, so its steps are not its reference's steps"),
            off: Same("the recipe's batch and learning rate"),
            on: Same(
                "the largest batch that fits (probed in child processes, doubling until out of memory), \
                 learning rate scaled linearly with it and warmed up",
            ),
            reference: Reference::Baseline,
            pairing: TRAINED_TO_TARGET,
            needs: &[Need::Cnn(
                "{workload}'s recipe keeps nanoGPT's fixed batch of windows; the batch-size study is the \
                 CIFAR ResNet's (--design batch-sweep)",
            )],
            pytorch: InPytorch::Applies("the probed batch size in the DataLoader, the rate scaled linearly and warmed up with LinearLR before MultiStepLR (SequentialLR)"),
            engine_gap: None,
            ops_differ: None,
            colour: [181, 207, 107],
            claim: "Guide #3: use the largest batch that fits in GPU memory, with the learning rate scaled \
                    up accordingly (Goyal et al.: linearly, after a warm-up), to use the hardware fully and \
                    train faster per epoch; generalisation may suffer at very large batches.",
        },
        Trick::Adamw => &TrickInfo {
            guide_number: Some(5),
            metric: Metric::TimeToAccuracy,
            stage: Stage::Step,
            acts_on: ActsOn::Unbounded(TRAINED_TO_TARGET_UNBOUNDED),
            off: Same("Adam with L2 added to the gradient (a separate adam-l2 reference cell)"),
            on: Same("AdamW: weight decay decoupled from the adaptive update"),
            reference: Reference::Own,
            pairing: TRAINED_TO_TARGET,
            needs: &[Need::Cnn(
                "{workload}'s recipe trains with AdamW in every cell, so there is no Adam-with-L2 side to \
                 compare",
            )],
            pytorch: InPytorch::Applies("torch.optim.AdamW(params, lr=1e-3, weight_decay=0.05) against torch.optim.Adam(params, weight_decay=5e-4)"),
            engine_gap: None,
            ops_differ: None,
            colour: [231, 186, 82],
            claim: "Guide #5 (Loshchilov & Hutter): AdamW decouples weight decay from the adaptive update, \
                    which regularises as intended and generalises better than Adam with L2, reaching better \
                    accuracy in the same time.",
        },
        Trick::Lars => &TrickInfo {
            guide_number: Some(5),
            metric: Metric::TimeToAccuracy,
            stage: Stage::Step,
            acts_on: ActsOn::Unbounded(TRAINED_TO_TARGET_UNBOUNDED),
            off: Same(SGD_AT_THE_LARGE_BATCH),
            on: Same("LARS: momentum SGD with a layer-wise trust ratio ‖w‖/‖∇w + λw‖"),
            reference: Reference::Baseline,
            pairing: TRAINED_TO_TARGET,
            needs: &[Need::Cnn(LARGE_BATCH_ONLY)],
            pytorch: InPytorch::Applies("a LARS torch.optim.Optimizer subclass (torch.optim has none) with trickbench's arithmetic, at batch 512"),
            engine_gap: None,
            ops_differ: None,
            colour: [214, 97, 107],
            claim: "Guide #5 (You, Gitman & Ginsburg): LARS's layer-wise trust ratio keeps large-batch \
                    training stable where plain SGD with a linearly scaled learning rate diverges or loses \
                    accuracy (ResNet-50 at batch 8k–32k).",
        },
        Trick::Lamb => &TrickInfo {
            guide_number: Some(5),
            metric: Metric::TimeToAccuracy,
            stage: Stage::Step,
            acts_on: ActsOn::Unbounded(TRAINED_TO_TARGET_UNBOUNDED),
            off: Same(SGD_AT_THE_LARGE_BATCH),
            on: Same("LAMB: Adam updates scaled by a layer-wise trust ratio ‖w‖/‖update‖"),
            reference: Reference::Baseline,
            pairing: TRAINED_TO_TARGET,
            needs: &[Need::Cnn(LARGE_BATCH_ONLY)],
            pytorch: InPytorch::Applies("a LAMB torch.optim.Optimizer subclass (torch.optim has none) with trickbench's arithmetic, at batch 512"),
            engine_gap: None,
            ops_differ: None,
            colour: [206, 109, 189],
            claim: "Guide #5 (You et al.): LAMB applies layer-wise trust ratios to Adam's updates, which \
                    made BERT pre-training at batch 32k–64k possible (76 minutes) without losing accuracy.",
        },
        Trick::Muon => &TrickInfo {
            guide_number: None,
            metric: Metric::TimeToAccuracy,
            stage: Stage::Step,
            acts_on: ActsOn::Unbounded(TRAINED_TO_TARGET_UNBOUNDED),
            off: ByFamily {
                cifar_resnet: "the recipe's SGD with momentum for every parameter",
                char_gpt: "the recipe's AdamW for every parameter",
            },
            on: ByFamily {
                cifar_resnet:
                    "Muon for the residual blocks' convolutions (Nesterov momentum 0.95, each update \
                     orthogonalised by 5 Newton–Schulz steps on the (out, in·3·3) matrix, lr 0.24·√(batch / \
                     2000) on the same schedule); SGD for the stem, classifier, biases and BatchNorm",
                char_gpt:
                    "Muon for the attention and MLP matrices (Nesterov momentum 0.95, each update \
                     orthogonalised by 5 Newton–Schulz steps, peak lr 0.02 on the same schedule); AdamW for \
                     the embeddings (the token one shared with the head) and the LayerNorm gains",
            },
            reference: Reference::Baseline,
            pairing: TRAINED_TO_TARGET,
            needs: &[Need::TransformerInPytorch(
                "{workload}'s hidden weights are 4-d convolution kernels, and torch.optim.Muon takes 2-d \
                 matrices only (airbench's own Muon flattens them; libtorch's does too)",
            )],
            pytorch: InPytorch::Applies("torch.optim.Muon(hidden 2-D weights, nesterov=True) beside torch.optim.AdamW for the rest, both scheduled"),
            engine_gap: None,
            ops_differ: None,
            colour: [93, 58, 155],
            claim: "Modern addition (Jordan 2024, \"Muon: An optimizer for hidden layers in neural \
                    networks\"): orthogonalising each hidden weight matrix's momentum update by a \
                    Newton–Schulz iteration set the NanoGPT speedrun's training-time records (modded-nanogpt) \
                    and airbench's CIFAR-10 ones, and Liu et al. 2025 (\"Muon is scalable for LLM \
                    training\") report about 2× the compute efficiency of AdamW.",
        },
        Trick::Checkpointing => &TrickInfo {
            guide_number: Some(8),
            metric: Metric::Memory,
            stage: Stage::Step,
            acts_on: ActsOn::Part(StepPart::MemoryOnly),
            off: Same("every activation kept for backward"),
            on: Same("only each segment's input kept; segments recomputed in backward"),
            reference: Reference::Baseline,
            pairing: Pairing::OwnPairs(PEAK_MEMORY_JUDGED),
            needs: &[],
            pytorch: InPytorch::Applies("torch.utils.checkpoint.checkpoint(segment, x, use_reentrant=False) around every segment of the forward but the last"),
            engine_gap: None,
            ops_differ: None,
            colour: [49, 130, 189],
            claim: "Guide #8: gradient (activation) checkpointing stores only some activations and \
                    recomputes the rest in backward, trading about one extra forward pass (~20–30% time) for \
                    much less activation memory, hence larger batches or models.",
        },
        Trick::GradAccumulation => &TrickInfo {
            guide_number: Some(9),
            metric: Metric::Memory,
            stage: Stage::Step,
            acts_on: ActsOn::Part(StepPart::MemoryOnly),
            off: Same("the whole batch in one forward and backward"),
            on: Same("4 micro-batches per optimizer step, gradients accumulated"),
            reference: Reference::Baseline,
            pairing: Pairing::OwnPairs(PEAK_MEMORY_JUDGED),
            needs: &[],
            pytorch: InPytorch::Applies("loss / 4 backpropagated for each of 4 micro-batches (tensor_split), then one optimizer.step()"),
            engine_gap: Some(MICRO_BATCH_GAP),
            ops_differ: None,
            colour: [230, 85, 13],
            claim:
                "Guide #9: accumulating gradients over several micro-batches gives the effective batch of a \
                 larger one in the memory of a smaller one, at the cost of some throughput.",
        },
        Trick::ExpandableSegments => &TrickInfo {
            guide_number: None,
            metric: Metric::Memory,
            stage: Stage::Step,
            acts_on: ActsOn::Part(StepPart::MemoryOnly),
            off: Same("the CUDA caching allocator's fixed-size segments (expandable_segments:False)"),
            on: Same(
                "expandable segments (PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True): one segment per \
                 stream that grows by mapping more physical pages, so blocks of changing sizes reuse it \
                 instead of fragmenting fixed segments; judged by peak reserved memory and by the largest \
                 batch that fits (probed with and without it)",
            ),
            reference: Reference::Baseline,
            pairing: Pairing::Processes(
                "the caching allocator's mode is set before the first allocation and holds for the whole \
                 process",
            ),
            needs: &[Need::Cuda("expandable segments are a mode of the CUDA caching allocator")],
            pytorch: InPytorch::Applies("PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True, set before the process's first CUDA allocation"),
            engine_gap: None,
            ops_differ: None,
            colour: [96, 186, 160],
            claim: "Modern addition (PyTorch's CUDA memory-management notes, torch.cuda docs): with \
                    expandable_segments:True the caching allocator maps physical pages into one growing \
                    segment instead of allocating fixed segments, which cuts the memory lost to \
                    fragmentation when allocation sizes change (varying batch or sequence shapes) and can \
                    let a larger batch fit; PyTorch recommends it when reserved memory far exceeds \
                    allocated memory.",
        },
        Trick::GradClipping => &TrickInfo {
            guide_number: Some(14),
            metric: Metric::TimeToAccuracy,
            stage: Stage::Step,
            acts_on: ActsOn::Unbounded(TRAINED_TO_TARGET_UNBOUNDED),
            off: Same("no clipping"),
            on: ByFamily {
                cifar_resnet: "gradients clipped to global norm 2.0, computed on the device without a host \
                               read",
                char_gpt: "gradients clipped to global norm 1.0 (the recipe's), computed on the device \
                           without a host read",
            },
            reference: Reference::Baseline,
            pairing: TRAINED_TO_TARGET,
            needs: &[],
            pytorch: InPytorch::Applies("torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm) between backward and the optimizer step"),
            engine_gap: None,
            ops_differ: None,
            colour: [49, 163, 84],
            claim: "Guide #14: clipping gradients to a maximum global norm stabilises training and permits \
                    higher learning rates, which can shorten training (long used for RNNs and transformers).",
        },
        Trick::InputNorm => &TrickInfo {
            guide_number: Some(17),
            metric: Metric::TimeToAccuracy,
            stage: Stage::Loader,
            acts_on: ActsOn::Unbounded(TRAINED_TO_TARGET_UNBOUNDED),
            off: Same("raw pixels scaled to [0, 1] (a separate raw-inputs reference cell)"),
            on: Same("per-channel standardised inputs, as in the recipe"),
            reference: Reference::Own,
            pairing: TRAINED_TO_TARGET,
            needs: &[Need::Cnn("{workload} reads token ids, which are embedded, not standardised")],
            pytorch: InPytorch::Applies("transforms.Normalize(CIFAR-10 mean, std) against raw pixels in [0, 1] (torchvision's ToTensor alone)"),
            engine_gap: None,
            ops_differ: None,
            colour: [117, 107, 177],
            claim: "Guide #17: standardising the inputs (zero mean, unit variance per channel) conditions \
                    the optimisation better, so training converges faster.",
        },
        Trick::BatchNorm => &TrickInfo {
            guide_number: Some(17),
            metric: Metric::TimeToAccuracy,
            stage: Stage::Step,
            acts_on: ActsOn::Unbounded(TRAINED_TO_TARGET_UNBOUNDED),
            off: Same(
                "no BatchNorm: plainly initialised convolutions with biases (a separate no-batch-norm \
                 reference cell)",
            ),
            on: Same("BatchNorm after every convolution, as in the recipe"),
            reference: Reference::Own,
            pairing: TRAINED_TO_TARGET,
            needs: &[Need::Cnn(
                "{workload} normalises with LayerNorm, as transformers do; BatchNorm is the CNN's",
            )],
            pytorch: InPytorch::Applies("nn.BatchNorm2d after every convolution against none (every nn.Conv2d with bias=True)"),
            engine_gap: None,
            ops_differ: None,
            colour: [99, 99, 99],
            claim: "Guide #17 (Ioffe & Szegedy): BatchNorm allows much higher learning rates and less care \
                    with initialisation; it reached Inception's accuracy in 14 times fewer steps.",
        },
        // airbench's convergence tricks
        Trick::LabelSmoothing => &TrickInfo {
            guide_number: None,
            metric: Metric::TimeToAccuracy,
            stage: Stage::Step,
            acts_on: ActsOn::Unbounded(TRAINED_TO_TARGET_UNBOUNDED),
            off: Same("training loss: cross-entropy against the one-hot targets"),
            on: Same(
                "training loss: cross-entropy against targets smoothed by 0.2 (airbench's value: 0.82 on the \
                 true class, 0.02 on each other); evaluation still reports plain cross-entropy",
            ),
            reference: Reference::Baseline,
            pairing: TRAINED_TO_TARGET,
            needs: &[Need::Cnn(
                "{workload}'s recipe is nanoGPT's, which trains on plain cross-entropy; label smoothing is \
                 measured where airbench uses it, on the CIFAR ResNets",
            )],
            pytorch: InPytorch::Applies("F.cross_entropy(logits, targets, label_smoothing=0.2) on the training loss; evaluation on plain cross-entropy"),
            engine_gap: None,
            ops_differ: None,
            colour: [72, 201, 176],
            claim: "Modern addition (Szegedy et al. 2016, Rethinking the Inception Architecture; airbench, \
                    Jordan 2024, arXiv:2404.00498): cross-entropy against targets smoothed by ε keeps the \
                    logits from growing without bound and regularises the classifier; airbench94 trains with \
                    ε = 0.2 to reach 94.01% on CIFAR-10 in 3.83 s on an A100.",
        },
        Trick::EmaWeights => &TrickInfo {
            guide_number: None,
            metric: Metric::TimeToAccuracy,
            stage: Stage::Step,
            acts_on: ActsOn::Unbounded(TRAINED_TO_TARGET_UNBOUNDED),
            off: Same("evaluation uses the raw trained weights"),
            on: Same(
                "an exponential moving average of every weight and BatchNorm running statistic, updated \
                 every 5 optimizer steps with decay min(0.95⁵, (1 + n)/(10 + n)) after n updates \
                 (airbench's 0.95 per step, every 5 steps; the warm-up keeps the early average from lagging), \
                 swapped in for every evaluation while training continues from the raw weights",
            ),
            reference: Reference::Baseline,
            pairing: TRAINED_TO_TARGET,
            needs: &[Need::Cnn(
                "{workload}'s recipe is nanoGPT's, evaluated on its raw weights; weight averaging is \
                 measured where airbench uses it, on the CIFAR ResNets",
            )],
            pytorch: InPytorch::Applies("torch.optim.swa_utils.AveragedModel(model, avg_fn, use_buffers=True), updated every 5 steps and evaluated in place of the model"),
            engine_gap: None,
            ops_differ: None,
            colour: [173, 73, 24],
            claim: "Modern addition (Polyak & Juditsky 1992 averaging, as an exponential average; airbench, \
                    Jordan 2024, arXiv:2404.00498): an average of the recent weights removes part of SGD's \
                    noise, so it evaluates better than the last iterate; airbench94 averages every 5 steps at \
                    0.95 per step and, Lookahead-style, copies the average back into the weights, where this \
                    trick only evaluates it.",
        },
        Trick::FlipTta => &TrickInfo {
            guide_number: None,
            metric: Metric::TimeToAccuracy,
            stage: Stage::Evaluation,
            acts_on: ActsOn::Unbounded(TRAINED_TO_TARGET_UNBOUNDED),
            off: Same("each test image evaluated once"),
            on: Same(
                "evaluation logits the mean of each test image's and its horizontal mirror's (airbench's \
                 tta_level=1): two forward passes per image",
            ),
            reference: Reference::Baseline,
            pairing: TRAINED_TO_TARGET,
            needs: &[Need::Cnn("{workload} reads text, which has no mirror image to evaluate")],
            pytorch: InPytorch::Applies("model(x) and model(x.flip(3)) averaged at evaluation, under torch.no_grad()"),
            engine_gap: None,
            ops_differ: None,
            colour: [93, 46, 140],
            claim: "Modern addition (test-time augmentation, as in Krizhevsky et al. 2012; airbench, Jordan \
                    2024, arXiv:2404.00498): a network trained on randomly flipped images predicts each \
                    test image better from the mean of its own and its mirror's logits; airbench94 \
                    evaluates this way and, by default (tta_level=2), on two translated views as well.",
        },
        Trick::BnMomentum => &TrickInfo {
            guide_number: None,
            metric: Metric::TimeToAccuracy,
            stage: Stage::Step,
            acts_on: ActsOn::Unbounded(TRAINED_TO_TARGET_UNBOUNDED),
            off: Same(
                "BatchNorm running statistics at PyTorch's momentum 0.1: running = 0.9·running + 0.1·batch",
            ),
            on: Same(
                "BatchNorm running statistics at airbench's momentum: running = 0.6·running + 0.4·batch \
                 (airbench writes batchnorm_momentum = 0.6, the weight kept, and passes 1 − 0.6 to \
                 PyTorch)",
            ),
            reference: Reference::Baseline,
            pairing: TRAINED_TO_TARGET,
            needs: &[Need::Cnn("{workload} has no BatchNorm: LayerNorm keeps no running statistics")],
            pytorch: InPytorch::Applies("nn.BatchNorm2d(channels, momentum=0.4)"),
            engine_gap: None,
            ops_differ: None,
            colour: [204, 171, 0],
            claim: "Modern addition (airbench, Jordan 2024, arXiv:2404.00498): airbench94's BatchNorm layers \
                    keep running statistics over only the last few batches (PyTorch momentum 0.4), so that \
                    in a short run the statistics evaluation uses follow the fast-changing weights instead \
                    of lagging behind them.",
        },
        // Transformer tricks
        Trick::FlashAttention => &TrickInfo {
            guide_number: None,
            metric: Metric::Throughput,
            stage: Stage::Step,
            acts_on: ActsOn::Part(StepPart::Attention),
            off: Same(ATTENTION_WRITTEN_OUT),
            on: Same(
                "scaled_dot_product_attention with is_causal: one fused kernel (FlashAttention or \
                 memory-efficient attention on a GPU) that never stores the T×T weights",
            ),
            reference: Reference::Baseline,
            pairing: Pairing::Paired,
            needs: &[Need::Transformer("{workload} has no attention")],
            pytorch: InPytorch::Applies("F.scaled_dot_product_attention(q, k, v, is_causal=True), PyTorch choosing the backend"),
            engine_gap: None,
            ops_differ: None,
            colour: [158, 1, 66],
            claim: "Modern addition (Dao et al. 2022, FlashAttention): computing attention in tiles inside \
                    one kernel, without writing the T×T attention matrix to GPU memory, gives 2–4× faster \
                    attention and memory linear instead of quadratic in the sequence length; PyTorch 2 \
                    exposes it as scaled_dot_product_attention, dispatching to whichever fused backend \
                    applies; the sdpa-* tricks force one backend each.",
        },
        Trick::SdpaFlash => &TrickInfo {
            guide_number: None,
            metric: Metric::Throughput,
            stage: Stage::Step,
            acts_on: ActsOn::Part(StepPart::Attention),
            off: Same(SDPA_OFF),
            on: Same(
                "scaled_dot_product_attention with only its FlashAttention backend allowed (FlashAttention-2 \
                 on a GPU, sm_80+; a tiled CPU kernel without dropout on a CPU)",
            ),
            reference: SDPA_REFERENCE,
            pairing: Pairing::Paired,
            needs: &[
                Need::Transformer("{workload} has no attention"),
                Need::CudaForDropout("PyTorch's CPU flash kernel cannot apply attention dropout"),
                Need::HalfPrecisionOnCuda(
                    "PyTorch's FlashAttention kernels on a CUDA GPU (sm_80 and newer) take only fp16 and \
                     bf16 inputs, so in fp32 scaled_dot_product_attention finds no kernel and fails",
                ),
            ],
            pytorch: InPytorch::Applies("scaled_dot_product_attention under torch.nn.attention.sdpa_kernel(SDPBackend.FLASH_ATTENTION)"),
            engine_gap: None,
            ops_differ: None,
            colour: [92, 14, 140],
            claim: "Modern addition (Dao 2023, FlashAttention-2; Shah et al. 2024, FlashAttention-3 for \
                    Hopper): better work partitioning across thread blocks and warps doubles FlashAttention's \
                    speed, reaching 50–73% of an A100's peak; PyTorch's SDPA ships FlashAttention-2.",
        },
        Trick::SdpaCudnn => &TrickInfo {
            guide_number: None,
            metric: Metric::Throughput,
            stage: Stage::Step,
            acts_on: ActsOn::Part(StepPart::Attention),
            off: Same(SDPA_OFF),
            on: Same("scaled_dot_product_attention with only cuDNN's fused attention allowed"),
            reference: SDPA_REFERENCE,
            pairing: Pairing::Paired,
            needs: &[
                Need::Transformer("{workload} has no attention"),
                Need::Cuda(
                    "cuDNN's fused attention is a CUDA kernel (sm_80+ with cuDNN 9 in PyTorch's CUDA build); \
                     a CPU build has only the math and flash backends",
                ),
                Need::CudnnAttention,
                Need::HalfPrecisionOnCuda(
                    "cuDNN's fused attention takes only fp16 and bf16 inputs, so in fp32 \
                     scaled_dot_product_attention finds no kernel and fails",
                ),
            ],
            pytorch: InPytorch::Applies("scaled_dot_product_attention under torch.nn.attention.sdpa_kernel(SDPBackend.CUDNN_ATTENTION)"),
            engine_gap: None,
            ops_differ: None,
            colour: [0, 153, 136],
            claim: "Modern addition (NVIDIA cuDNN 9 fused flash attention, exposed by PyTorch 2.5's SDPA): \
                    NVIDIA reports it up to 75% faster than FlashAttention-2 in bf16 on H100, the default \
                    backend there for some shapes.",
        },
        Trick::SdpaMemEfficient => &TrickInfo {
            guide_number: None,
            metric: Metric::Throughput,
            stage: Stage::Step,
            acts_on: ActsOn::Part(StepPart::Attention),
            off: Same(SDPA_OFF),
            on: Same("scaled_dot_product_attention with only memory-efficient attention (xFormers' kernel) allowed"),
            reference: SDPA_REFERENCE,
            pairing: Pairing::Paired,
            needs: &[
                Need::Transformer("{workload} has no attention"),
                Need::Cuda(
                    "memory-efficient attention is a CUDA kernel (sm_50+ in PyTorch's CUDA build); a CPU build \
                     has only the math and flash backends",
                ),
            ],
            pytorch: InPytorch::Applies("scaled_dot_product_attention under torch.nn.attention.sdpa_kernel(SDPBackend.EFFICIENT_ATTENTION)"),
            engine_gap: None,
            ops_differ: None,
            colour: [204, 187, 68],
            claim: "Modern addition (Rabe & Staats 2021, Self-attention Does Not Need O(n²) Memory; xFormers' \
                    CUTLASS kernel): attention by chunks with a running softmax needs memory linear in the \
                    sequence length, and runs on GPUs older than FlashAttention supports.",
        },
        Trick::SdpaMath => &TrickInfo {
            guide_number: None,
            metric: Metric::Throughput,
            stage: Stage::Step,
            acts_on: ActsOn::Part(StepPart::Attention),
            off: Same(SDPA_OFF),
            on: Same(
                "scaled_dot_product_attention with only its math backend allowed: the same ops as the \
                 written-out attention, behind one call",
            ),
            reference: SDPA_REFERENCE,
            pairing: Pairing::Paired,
            needs: &[Need::Transformer("{workload} has no attention")],
            pytorch: InPytorch::Applies("scaled_dot_product_attention under torch.nn.attention.sdpa_kernel(SDPBackend.MATH)"),
            engine_gap: None,
            ops_differ: None,
            colour: [238, 102, 119],
            claim: "Modern addition (PyTorch's scaled_dot_product_attention docs): the math backend is the \
                    reference implementation every fused backend must match, kept for inputs no fused kernel \
                    supports; forcing it shows what the call itself costs without a fused kernel.",
        },
        Trick::Fp8Matmul => &TrickInfo {
            guide_number: None,
            metric: Metric::Throughput,
            stage: Stage::Step,
            acts_on: ActsOn::Part(StepPart::ConvolutionsAndMatmuls),
            off: Same("the attention and MLP projections as matmuls in the activations' dtype"),
            on: Same(
                "the attention and MLP projections as fp8 matmuls (torch._scaled_mm) with outputs in bf16 \
                 (fp16 under amp): \
                 inputs and weights in e4m3, output gradients in e5m2, each scaled per tensor by the \
                 format's largest value over its largest magnitude; the embedding and tied head unchanged",
            ),
            reference: Reference::Baseline,
            pairing: Pairing::Paired,
            needs: &[
                Need::Transformer(
                    "{workload}'s work is convolutions; the fp8 linears replace the GPT's projection matmuls",
                ),
                Need::CudaCapability {
                    major: 8,
                    minor: 9,
                    why: "fp8 tensor-core matmuls (torch._scaled_mm) exist on Ada, Hopper and newer NVIDIA \
                          GPUs",
                },
            ],
            pytorch: InPytorch::Applies("the projections' nn.Linear replaced by a torch.autograd.Function calling torch._scaled_mm with per-tensor scales, e4m3 forward and e5m2 output gradients"),
            engine_gap: None,
            ops_differ: None,
            colour: [121, 28, 248],
            claim: "Modern addition (Micikevicius et al. 2022, FP8 Formats for Deep Learning; NVIDIA \
                    Transformer Engine; the modded-nanogpt speedrun's FP8 matmuls): e4m3 for weights and \
                    activations and e5m2 for gradients, each with its own scale, train transformers to the \
                    accuracy of bf16 while fp8 tensor cores on Hopper run matrix multiplies at twice the bf16 \
                    rate.",
        },
        // Data parallelism
        Trick::Ddp => &TrickInfo {
            guide_number: Some(10),
            metric: Metric::Throughput,
            stage: Stage::Processes,
            acts_on: ActsOn::Unbounded("it spreads the step over devices: its bound is the number of devices, not a part of one step"),
            off: Same(
                "DataParallel: one process drives every GPU, copying the weights to each every step, \
                 splitting a batch of N × the cell's batch over them and adding their gradients onto the \
                 first (a separate data-parallel reference cell)",
            ),
            on: Same(
                "DDP: one process per GPU, each with the cell's batch; gradients averaged by NCCL all-reduce \
                 in 25 MiB buckets launched while backward runs; throughput summed over the GPUs",
            ),
            reference: Reference::Own,
            pairing: Pairing::Processes("it runs one process per GPU"),
            needs: &[
                Need::SeveralGpus("DDP and DataParallel both spread training over several GPUs"),
                Need::DataParallelCompiled,
                Need::NcclCompiled,
            ],
            pytorch: InPytorch::NotApplied("the PyTorch engine runs in one process; DistributedDataParallel is measured on libtorch only"),
            engine_gap: None,
            ops_differ: None,
            colour: [0, 104, 55],
            claim: "Guide #10: DistributedDataParallel (one process per GPU, gradients all-reduced in \
                    buckets while backward runs) scales better than DataParallel, whose single process \
                    copies the model to every GPU each step and gathers outputs and gradients on the first; \
                    PyTorch recommends it even on one machine.",
        },
    }
}

/// The peak memory `trick`'s cells are compared by: reserved bytes for the allocator's own mode,
/// whose effect is on what it reserves, not on what tensors hold; live bytes for every other.
pub(super) fn memory_figure(trick: Trick) -> MemoryFigure {
    match trick {
        Trick::ExpandableSegments => MemoryFigure::Reserved,
        _ => MemoryFigure::Live,
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;

    use super::super::{Applicability, Wording};
    use super::*;
    use crate::hardware::Hardware;
    use crate::workloads::{Family, WorkloadId};

    /// Whether `trick` can be measured on some workload of `family` on a machine that has
    /// everything (several GPUs, every CUDA path compiled in).
    fn applies_to(trick: Trick, family: Family) -> bool {
        let everything = Hardware::with_gpus(8);
        WorkloadId::ALL
            .into_iter()
            .filter(|w| w.family() == family)
            .any(|w| trick.applicability(w, &everything) == Applicability::Applies)
    }

    #[test]
    fn every_trick_has_a_claim_naming_its_source_in_the_guide_or_as_an_addition() {
        for t in Trick::ALL {
            let claim = t.claim();
            assert!(claim.ends_with('.') && claim.len() > 40, "{t}: {claim}");
            match t.guide_number() {
                Some(n) => assert!(claim.contains(&format!("#{n}")), "{t}: {claim}"),
                None => {
                    assert!(claim.starts_with("Modern addition") || claim.starts_with("Reader tip"), "{t}")
                }
            }
        }
        let numbers: BTreeSet<u8> = Trick::ALL.into_iter().filter_map(Trick::guide_number).collect();
        assert_eq!(numbers, (1..=18).collect(), "each of the guide's 17 tips and its bonus #18");
    }

    #[test]
    fn every_trick_says_what_off_and_on_mean_in_each_family_it_applies_to() {
        for t in Trick::ALL {
            let families: Vec<Family> = [Family::CifarResnet, Family::CharGpt]
                .into_iter()
                .filter(|&f| applies_to(t, f) || !t.runs_in_cells())
                .collect();
            assert!(!families.is_empty(), "{t} applies nowhere");
            for &family in &families {
                let (off, on) = (t.off(family), t.on(family));
                assert!(!off.is_empty() && !on.is_empty() && off != on, "{t} in {family:?}: {off} / {on}");
            }
            for wording in [t.info().off, t.info().on] {
                if let Wording::ByFamily { cifar_resnet, char_gpt } = wording {
                    assert_ne!(cifar_resnet, char_gpt, "{t}: the same words need no per-family wording");
                    assert_eq!(families.len(), 2, "{t} has GPT wording but runs in one family only");
                }
            }
        }
    }

    #[test]
    fn workload_reasons_start_with_the_workload() {
        for t in Trick::ALL {
            for &need in t.info().needs {
                if let Need::Cnn(why) | Need::Transformer(why) = need {
                    assert!(why.starts_with("{workload}"), "{t}: {why}");
                }
            }
        }
    }

    #[test]
    fn colours_are_distinct_and_none_is_the_baseline_s_grey() {
        let colours: BTreeSet<[u8; 3]> = Trick::ALL.into_iter().map(Trick::colour).collect();
        assert_eq!(colours.len(), Trick::ALL.len());
        assert!(!colours.contains(&[127, 127, 127]));
    }

    #[test]
    fn reference_labels_are_distinct_from_each_other_and_from_trick_ids() {
        let labels: Vec<&str> = Trick::ALL.into_iter().filter_map(Trick::reference_label).collect();
        let distinct: BTreeSet<&str> = labels.iter().copied().collect();
        assert_eq!(distinct.len(), labels.len());
        for label in labels {
            assert!(label != "baseline" && label.parse::<Trick>().is_err(), "{label}");
        }
        assert_eq!(Trick::Ddp.reference_label(), Some("data-parallel"));
        let judged_beside: Vec<Trick> = Trick::ALL
            .into_iter()
            .filter(|t| t.reference_label().is_some() && !t.judged_against_own_reference())
            .collect();
        assert_eq!(judged_beside, [Trick::Tf32]);
    }

    #[test]
    fn off_and_on_read_in_the_workload_family_s_terms() {
        assert!(Trick::OneCycle.off(Family::CharGpt).contains("cosine"));
        assert!(Trick::OneCycle.off(Family::CifarResnet).contains("step schedule"));
        assert!(Trick::GradClipping.on(Family::CharGpt).contains("1.0"));
        assert!(Trick::JitFusion.on(Family::CharGpt).contains("GELU"));
        assert_eq!(Trick::Amp.on(Family::CharGpt), Trick::Amp.on(Family::CifarResnet));
        assert_eq!((Trick::Ddp.guide_number(), Trick::Ddp.metric()), (Some(10), Metric::Throughput));
    }
}
