//! Where a trick can be measured: the needs in its table entry, checked against a workload and the
//! hardware facts the caller passes in (so any machine can be described, on any machine).

use super::{InPytorch, Trick, TrickSet};
use crate::engine::Engine;
use crate::hardware::Hardware;
use crate::vocabulary::WorkloadId;

/// Whether a trick can be measured for a workload on a device.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Applicability {
    /// It can.
    Applies,
    /// It cannot, for the stated reason.
    NotApplicable(String),
}

/// One thing measuring a trick needs. Texts that say why a workload cannot run the trick write
/// `{workload}` for the workload's id.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Need {
    /// A CUDA device; the text says why.
    Cuda(&'static str),
    /// A convolutional workload (a CIFAR ResNet); the text says why another cannot run the trick.
    Cnn(&'static str),
    /// A transformer workload (a GPT); the text says why another cannot run the trick.
    Transformer(&'static str),
    /// A CUDA GPU of at least this compute capability; the text says why.
    CudaCapability {
        /// The major version (8 for Ampere and Ada, 9 for Hopper).
        major: u32,
        /// The minor version.
        minor: u32,
        /// Why the trick needs it.
        why: &'static str,
    },
    /// A CUDA device when the workload trains with dropout, which the trick's CPU kernel cannot
    /// apply; the text says why.
    CudaForDropout(&'static str),
    /// A binary built with CUDA graph capture (CUDA headers at build time).
    CudaGraphsCompiled,
    /// At least 2 CUDA GPUs, the device being one of them; the text says why.
    SeveralGpus(&'static str),
    /// A binary built with the distributed engine (gloo's headers at build time).
    DataParallelCompiled,
    /// A binary built with NCCL, the GPU all-reduce (NCCL's headers at build time).
    NcclCompiled,
    /// Python PyTorch: the trick is measured beside eager PyTorch by `trickbench parity`, never in
    /// a trickbench cell; the text says why and where.
    ThroughPytorch(&'static str),
    /// A cuDNN library with which PyTorch 2.11's attention dispatcher (`can_use_cudnn_attention`)
    /// accepts cuDNN's fused attention for the workload on a CUDA GPU: cuDNN 9 or newer, and for a
    /// workload that trains with attention dropout, not cuDNN 9.11.1 to 9.13.x. Nothing on the CPU,
    /// where [`Need::Cuda`] gives the reason.
    CudnnAttention,
    /// A transformer workload (a GPT) on the PyTorch engine, whose counterpart of the trick takes
    /// what only the GPT has; the text says why the CNN cannot run it there. libtorch runs it on
    /// every workload.
    TransformerInPytorch(&'static str),
    /// Half precision on a CUDA GPU: a set holding the trick runs there only with `amp` or
    /// `amp-bf16` on too; the text says why. A need of the whole set, checked by
    /// [`Need::unmet_in_set`]: the trick alone applies, as its ablation cell adds `amp-bf16` there.
    HalfPrecisionOnCuda(&'static str),
}

impl Need {
    /// Why this need is not met for `workload` on `hardware`, if it is not. The needs of what a
    /// network is built of are the reference workloads' here: the user's model is judged by its
    /// features ([`crate::workloads::user::not_applicable`]).
    pub fn unmet_reason(self, workload: WorkloadId, hardware: &Hardware) -> Option<String> {
        let about = |text: &str| text.replace("{workload}", workload.id());
        let of_the_network = matches!(
            self,
            Need::Cnn(_) | Need::Transformer(_) | Need::TransformerInPytorch(_) | Need::CudaForDropout(_)
        );
        if of_the_network && workload == WorkloadId::Model {
            return None;
        }
        match self {
            Need::Cuda(why) => (!hardware.device.is_cuda()).then(|| format!("needs a CUDA GPU: {why}")),
            Need::Cnn(why) => (!workload.is_cnn()).then(|| about(why)),
            Need::Transformer(why) | Need::TransformerInPytorch(why) => workload.is_cnn().then(|| about(why)),
            Need::CudaCapability { major, minor, why } => {
                capability_missing(hardware, (major, minor)).map(|has| {
                    format!("needs a CUDA GPU of compute capability ≥ {major}.{minor} ({has}): {why}")
                })
            }
            Need::CudaForDropout(why) => (!hardware.device.is_cuda() && workload.trains_with_dropout())
                .then(|| format!("needs a CUDA GPU for {workload}, which trains with dropout: {why}")),
            Need::CudaGraphsCompiled => (!hardware.cuda_graphs_compiled).then(|| {
                "this binary was built without CUDA headers, so without CUDA graph support (run \
                 scripts/setup-libtorch, which installs nvidia-cuda-crt, then rebuild)"
                    .to_owned()
            }),
            Need::SeveralGpus(why) => {
                several_gpus_missing(hardware).map(|has| format!("needs ≥ 2 GPUs ({has}): {why}"))
            }
            Need::DataParallelCompiled => hardware.data_parallel_unavailable.clone(),
            Need::NcclCompiled => (!hardware.nccl_compiled).then(|| {
                "this binary was built without NCCL's headers, so it cannot all-reduce on GPUs (run \
                 scripts/setup-libtorch, which installs nvidia-cuda-cccl, then rebuild)"
                    .to_owned()
            }),
            Need::ThroughPytorch(why) => Some(format!("measured through PyTorch: {why}")),
            Need::CudnnAttention => cudnn_attention_refused(workload, hardware),
            Need::HalfPrecisionOnCuda(_) => None,
        }
    }

    /// Whether the need holds on `engine`: on libtorch every need but the PyTorch engine's own;
    /// on the PyTorch engine those of the workload and the device and its own, not those of this
    /// binary's build and of measuring through PyTorch.
    fn concerns(self, engine: Engine) -> bool {
        match engine {
            Engine::Libtorch => !matches!(self, Need::TransformerInPytorch(_)),
            Engine::Pytorch => !matches!(
                self,
                Need::CudaGraphsCompiled
                    | Need::DataParallelCompiled
                    | Need::NcclCompiled
                    | Need::ThroughPytorch(_)
            ),
        }
    }

    /// Why this need of a trick of `set` is not met by the set on `hardware`, if it is not: the
    /// needs of a whole set ([`Need::HalfPrecisionOnCuda`]); every other need is met by the set.
    pub fn unmet_in_set(self, set: &TrickSet, hardware: &Hardware) -> Option<String> {
        match self {
            Need::HalfPrecisionOnCuda(why) => {
                let half = set.has(Trick::Amp) || set.has(Trick::AmpBf16);
                (hardware.device.is_cuda() && !half).then(|| {
                    format!(
                        "needs fp16 or bf16 on a CUDA GPU ({} or {} on too): {why}",
                        Trick::Amp,
                        Trick::AmpBf16
                    )
                })
            }
            _ => None,
        }
    }
}

/// The cuDNN versions (as [`Hardware::cudnn_version`] writes them) with which PyTorch 2.11's
/// `can_use_cudnn_attention` refuses any attention dropout: above 9.11.0 and below 9.14.0.
const CUDNN_REFUSING_DROPOUT: std::ops::Range<i64> = 91101..91400;

/// Why PyTorch 2.11's dispatcher would find no cuDNN attention kernel for `workload` on
/// `hardware`, if it would not: no cuDNN, a cuDNN older than 9.0, or attention dropout with a
/// cuDNN that refuses it. `None` on the CPU, which [`Need::Cuda`] covers.
fn cudnn_attention_refused(workload: WorkloadId, hardware: &Hardware) -> Option<String> {
    if !hardware.device.is_cuda() {
        return None;
    }
    let Some(version) = hardware.cudnn_version else {
        return Some(
            "needs cuDNN: this libtorch has no usable cuDNN, so cuDNN attention has no kernel".to_owned(),
        );
    };
    let named = cudnn_version_name(version);
    if version < 90000 {
        return Some(format!(
            "needs cuDNN 9 or newer (this machine loads {named}): PyTorch 2.11 has no cuDNN attention before it"
        ));
    }
    (CUDNN_REFUSING_DROPOUT.contains(&version) && workload.trains_with_dropout()).then(|| {
        format!(
            "cuDNN {named} has no attention kernel with dropout, and {workload} trains with attention \
             dropout: PyTorch 2.11's dispatcher (can_use_cudnn_attention) turns cuDNN attention down \
             whenever dropout > 0 with cuDNN 9.11.1 to 9.13.x, so forced it would find no kernel"
        )
    })
}

/// A cuDNN version as cuDNN numbers it (major × 10000 + minor × 100 + patch from cuDNN 9 on,
/// major × 1000 + minor × 100 + patch before) written as `major.minor.patch`.
pub fn cudnn_version_name(version: i64) -> String {
    let major = if version >= 90000 { 10000 } else { 1000 };
    format!("{}.{}.{}", version / major, version % major / 100, version % 100)
}

/// What the run has instead of several GPUs, where it has fewer than 2: the machine's count when
/// the device is a GPU, else the device.
fn several_gpus_missing(hardware: &Hardware) -> Option<String> {
    if !hardware.device.is_cuda() {
        return Some(format!("running on {}", hardware.device));
    }
    (hardware.cuda_gpus < 2).then(|| format!("this machine has {}", hardware.cuda_gpus))
}

/// What the run has instead of a CUDA GPU of compute capability `least` (major, minor), where it
/// has none: the device, the GPU's capability, or that it is unknown.
fn capability_missing(hardware: &Hardware, least: (u32, u32)) -> Option<String> {
    if !hardware.device.is_cuda() {
        return Some(format!("running on {}", hardware.device));
    }
    match hardware.cuda_capability {
        Some(has) if has >= least => None,
        Some((major, minor)) => Some(format!("this GPU has {major}.{minor}")),
        None => Some("NVML could not read this GPU's".to_owned()),
    }
}

impl Trick {
    /// Whether trickbench cells can run the trick at all (not one measured through PyTorch, which
    /// the `--tricks` groups leave out).
    pub fn runs_in_cells(self) -> bool {
        !self.info().needs.iter().any(|need| matches!(need, Need::ThroughPytorch(_)))
    }

    /// Whether the trick can be measured for `workload` on `hardware` (whose device is resolved)
    /// on libtorch: not when one of its needs is unmet, the first such need giving the reason.
    pub fn applicability(self, workload: WorkloadId, hardware: &Hardware) -> Applicability {
        self.applicability_on(Engine::Libtorch, workload, hardware)
    }

    /// Whether the trick can be measured for `workload` on `hardware` on `engine`. On PyTorch, not
    /// where the engine does not apply it ([`InPytorch::NotApplied`]), nor where a need of the
    /// workload or the device is unmet; the needs of this binary's build are libtorch's alone, and
    /// what is measured through PyTorch is measured there.
    pub fn applicability_on(
        self,
        engine: Engine,
        workload: WorkloadId,
        hardware: &Hardware,
    ) -> Applicability {
        let info = self.info();
        if let (Engine::Pytorch, InPytorch::NotApplied(why)) = (engine, info.pytorch) {
            return Applicability::NotApplicable(format!("on the PyTorch engine: {why}"));
        }
        info.needs
            .iter()
            .filter(|need| need.concerns(engine))
            .find_map(|need| need.unmet_reason(workload, hardware))
            .map_or(Applicability::Applies, Applicability::NotApplicable)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::device::DeviceSpec;

    /// The reason `trick` cannot be measured for `workload` on `hardware`; panics if it can.
    fn reason(trick: Trick, workload: WorkloadId, hardware: &Hardware) -> String {
        match trick.applicability(workload, hardware) {
            Applicability::NotApplicable(reason) => reason,
            Applicability::Applies => panic!("{trick} must not apply to {workload} on {hardware:?}"),
        }
    }

    #[test]
    fn torch_compile_is_measured_through_pytorch_everywhere_never_on_libtorch() {
        for workload in [WorkloadId::Resnet8, WorkloadId::GptMini] {
            let why = reason(Trick::TorchCompile, workload, &Hardware::with_gpus(8));
            assert!(why.starts_with("measured through PyTorch: torch.compile cannot be reached"), "{why}");
            assert!(why.contains("--engine") && why.contains("trickbench parity --compile"), "{why}");
            let cpu = Hardware::probe(crate::device::DeviceSpec::Cpu);
            let on_pytorch = Trick::TorchCompile.applicability_on(Engine::Pytorch, workload, &cpu);
            assert_eq!(on_pytorch, Applicability::Applies);
        }
        assert!(!Trick::TorchCompile.runs_in_cells());
        assert!(Trick::ALL.into_iter().filter(|&t| t != Trick::TorchCompile).all(Trick::runs_in_cells));
    }

    #[test]
    fn on_the_pytorch_engine_a_trick_it_does_not_apply_says_so_and_device_needs_still_hold() {
        let cpu = Hardware::probe(crate::device::DeviceSpec::Cpu);
        let on = |t: Trick, w| t.applicability_on(Engine::Pytorch, w, &cpu);
        let Applicability::NotApplicable(why) = on(Trick::Ddp, WorkloadId::Resnet8) else {
            panic!("ddp must not apply on the PyTorch engine");
        };
        assert!(why.starts_with("on the PyTorch engine: ") && why.contains("one process"), "{why}");
        let Applicability::NotApplicable(why) = on(Trick::PinMemory, WorkloadId::Resnet8) else {
            panic!("pin-memory needs a GPU on the PyTorch engine too");
        };
        assert!(why.starts_with("needs a CUDA GPU: "), "{why}");
        assert_eq!(on(Trick::LoaderWorkers, WorkloadId::Resnet8), Applicability::Applies);
        assert_eq!(on(Trick::Checkpointing, WorkloadId::GptMini), Applicability::Applies);
        assert!(
            matches!(on(Trick::Amp, WorkloadId::Resnet8), Applicability::NotApplicable(w) if w.contains("CUDA"))
        );
        assert!(matches!(on(Trick::ChannelsLast, WorkloadId::GptMini), Applicability::NotApplicable(_)));
        assert_eq!(on(Trick::ChannelsLast, WorkloadId::Resnet8), Applicability::Applies);
        assert_eq!(on(Trick::DebugOff, WorkloadId::GptMini), Applicability::Applies);
    }

    #[test]
    fn gpu_only_tricks_are_not_applicable_on_cpu_with_a_reason() {
        for t in [Trick::Amp, Trick::AmpBf16, Trick::CudnnBenchmark, Trick::Tf32, Trick::CudaGraphs] {
            let why = reason(t, WorkloadId::Resnet20, &Hardware::with_gpus(0));
            assert!(why.starts_with("needs a CUDA GPU: "), "{why}");
            assert_eq!(
                t.applicability(WorkloadId::Resnet20, &Hardware::with_gpus(1)),
                Applicability::Applies
            );
        }
        assert_eq!(
            reason(Trick::PinMemory, WorkloadId::Resnet20, &Hardware::with_gpus(0)),
            "needs a CUDA GPU: pinned memory speeds host-to-GPU copies; there is no GPU"
        );
        for t in [Trick::LoaderWorkers, Trick::ZeroCopy, Trick::GpuAugment, Trick::PackedDataset] {
            assert_eq!(
                t.applicability(WorkloadId::Resnet20, &Hardware::with_gpus(0)),
                Applicability::Applies,
                "{t}"
            );
        }
    }

    #[test]
    fn a_gpu_on_the_machine_does_not_count_when_the_run_is_on_the_cpu() {
        let cpu_of_a_gpu_machine = Hardware { device: DeviceSpec::Cpu, ..Hardware::with_gpus(4) };
        let why = reason(Trick::Amp, WorkloadId::Resnet8, &cpu_of_a_gpu_machine);
        assert!(why.starts_with("needs a CUDA GPU"), "{why}");
        assert!(reason(Trick::Ddp, WorkloadId::Resnet8, &cpu_of_a_gpu_machine)
            .starts_with("needs ≥ 2 GPUs (running on cpu): DDP and DataParallel"));
    }

    #[test]
    fn cuda_graphs_need_a_gpu_first_and_then_a_binary_with_graph_support() {
        let without_graphs = Hardware { cuda_graphs_compiled: false, ..Hardware::with_gpus(1) };
        let why = reason(Trick::CudaGraphs, WorkloadId::Resnet8, &without_graphs);
        assert!(why.starts_with("this binary was built without CUDA headers"), "{why}");
        let on_cpu = Hardware { cuda_graphs_compiled: false, ..Hardware::with_gpus(0) };
        let why = reason(Trick::CudaGraphs, WorkloadId::Resnet8, &on_cpu);
        assert!(why.starts_with("needs a CUDA GPU: a CUDA graph records GPU kernel launches"), "{why}");
        assert_eq!(
            Trick::CudaGraphs.applicability(WorkloadId::GptMini, &Hardware::with_gpus(1)),
            Applicability::Applies
        );
    }

    #[test]
    fn ddp_needs_two_gpus_then_gloo_then_nccl() {
        let two_gpus = "DDP and DataParallel both spread training over several GPUs";
        assert_eq!(
            reason(Trick::Ddp, WorkloadId::Resnet8, &Hardware::with_gpus(0)),
            format!("needs ≥ 2 GPUs (running on cpu): {two_gpus}")
        );
        assert_eq!(
            reason(Trick::Ddp, WorkloadId::GptMini, &Hardware::with_gpus(1)),
            format!("needs ≥ 2 GPUs (this machine has 1): {two_gpus}")
        );
        assert_eq!(
            Trick::Ddp.applicability(WorkloadId::GptMini, &Hardware::with_gpus(2)),
            Applicability::Applies
        );
        assert_eq!(
            Trick::Ddp.applicability(WorkloadId::Resnet56, &Hardware::with_gpus(8)),
            Applicability::Applies
        );
        let without_gloo = Hardware {
            data_parallel_unavailable: Some("built without gloo".to_owned()),
            nccl_compiled: false,
            ..Hardware::with_gpus(4)
        };
        assert_eq!(reason(Trick::Ddp, WorkloadId::Resnet8, &without_gloo), "built without gloo");
        let without_nccl = Hardware { nccl_compiled: false, ..Hardware::with_gpus(4) };
        let why = reason(Trick::Ddp, WorkloadId::Resnet8, &without_nccl);
        assert!(why.starts_with("this binary was built without NCCL's headers"), "{why}");
    }

    #[test]
    fn the_gpt_runs_the_issue_list_and_reports_the_cnn_only_tricks_with_reasons() {
        let gpu = Hardware::with_gpus(1);
        let gpt_tricks = [
            Trick::Amp,
            Trick::AmpBf16,
            Trick::Tf32,
            Trick::FlashAttention,
            Trick::Fp8Matmul,
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
            Trick::Muon,
            Trick::CudaGraphs,
        ];
        for t in gpt_tricks {
            assert_eq!(t.applicability(WorkloadId::GptShakespeare, &gpu), Applicability::Applies, "{t}");
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
            (Trick::LabelSmoothing, "plain cross-entropy"),
            (Trick::EmaWeights, "raw weights"),
            (Trick::FlipTta, "no mirror image"),
            (Trick::BnMomentum, "no running statistics"),
        ];
        for (t, why) in cnn_only {
            let reason = reason(t, WorkloadId::GptShakespeare, &gpu);
            assert!(reason.starts_with("gpt-shakespeare") && reason.contains(why), "{t}: {reason}");
            assert!(!reason.contains("{workload}"), "{t}: {reason}");
        }
        assert_eq!(reason(Trick::FlashAttention, WorkloadId::Resnet56, &gpu), "resnet56 has no attention");
    }

    #[test]
    fn fp8_matmul_needs_a_gpt_on_a_gpu_of_compute_capability_8_9() {
        let why = "fp8 tensor-core matmuls (torch._scaled_mm) exist on Ada, Hopper and newer NVIDIA GPUs";
        let on = |capability| Hardware { cuda_capability: capability, ..Hardware::with_gpus(1) };
        assert_eq!(
            reason(Trick::Fp8Matmul, WorkloadId::GptMini, &Hardware::with_gpus(0)),
            format!("needs a CUDA GPU of compute capability ≥ 8.9 (running on cpu): {why}")
        );
        assert_eq!(
            reason(Trick::Fp8Matmul, WorkloadId::GptShakespeare, &on(Some((8, 0)))),
            format!("needs a CUDA GPU of compute capability ≥ 8.9 (this GPU has 8.0): {why}")
        );
        let unknown = reason(Trick::Fp8Matmul, WorkloadId::GptShakespeare, &on(None));
        assert!(unknown.contains("(NVML could not read this GPU's)"), "{unknown}");
        for capability in [(8, 9), (9, 0), (10, 0)] {
            let hardware = on(Some(capability));
            assert_eq!(
                Trick::Fp8Matmul.applicability(WorkloadId::GptShakespeare, &hardware),
                Applicability::Applies,
                "{capability:?}"
            );
        }
        let resnet = reason(Trick::Fp8Matmul, WorkloadId::Resnet20, &Hardware::with_gpus(1));
        assert!(resnet.starts_with("resnet20's work is convolutions"), "{resnet}");
    }

    #[test]
    fn forced_attention_backends_apply_where_their_kernels_run() {
        let (cpu, gpu) = (Hardware::with_gpus(0), Hardware::with_gpus(1));
        for t in [Trick::SdpaCudnn, Trick::SdpaMemEfficient] {
            let why = reason(t, WorkloadId::GptMini, &cpu);
            assert!(
                why.starts_with("needs a CUDA GPU: ") && why.contains("CPU build has only"),
                "{t}: {why}"
            );
            assert_eq!(t.applicability(WorkloadId::GptShakespeare, &gpu), Applicability::Applies, "{t}");
        }
        for workload in [WorkloadId::GptMini, WorkloadId::GptShakespeare] {
            assert_eq!(Trick::SdpaMath.applicability(workload, &cpu), Applicability::Applies);
            assert_eq!(Trick::SdpaFlash.applicability(workload, &gpu), Applicability::Applies);
        }
        assert_eq!(Trick::SdpaFlash.applicability(WorkloadId::GptMini, &cpu), Applicability::Applies);
        assert_eq!(
            reason(Trick::SdpaFlash, WorkloadId::GptShakespeare, &cpu),
            "needs a CUDA GPU for gpt-shakespeare, which trains with dropout: PyTorch's CPU flash kernel \
             cannot apply attention dropout"
        );
        for t in Trick::SDPA_BACKENDS {
            assert_eq!(reason(t, WorkloadId::Resnet8, &gpu), "resnet8 has no attention");
        }
    }

    #[test]
    fn forced_cudnn_attention_follows_the_dispatchers_cudnn_rules_on_both_engines() {
        let on = |version| Hardware { cudnn_version: version, ..Hardware::with_gpus(1) };
        let both = |workload, hardware: &Hardware| {
            [Engine::Libtorch, Engine::Pytorch]
                .map(|e| Trick::SdpaCudnn.applicability_on(e, workload, hardware))
        };
        let refused = on(Some(91200));
        for answer in both(WorkloadId::GptShakespeare, &refused) {
            let Applicability::NotApplicable(why) = answer else { panic!("cuDNN 9.12 refuses dropout") };
            assert!(why.starts_with("cuDNN 9.12.0 has no attention kernel with dropout"), "{why}");
            assert!(why.contains("gpt-shakespeare trains with attention dropout"), "{why}");
            assert!(why.contains("can_use_cudnn_attention") && why.contains("9.11.1 to 9.13.x"), "{why}");
        }
        assert_eq!(both(WorkloadId::GptMini, &refused), [Applicability::Applies, Applicability::Applies]);
        for version in [91100, 91400, 91900] {
            let answers = both(WorkloadId::GptShakespeare, &on(Some(version)));
            assert_eq!(answers, [Applicability::Applies, Applicability::Applies], "{version}");
        }
        assert_eq!(
            reason(Trick::SdpaCudnn, WorkloadId::GptShakespeare, &on(Some(91399))),
            reason(Trick::SdpaCudnn, WorkloadId::GptShakespeare, &on(Some(91200)))
                .replace("9.12.0", "9.13.99")
        );
        let none = reason(Trick::SdpaCudnn, WorkloadId::GptMini, &on(None));
        assert!(none.starts_with("needs cuDNN: this libtorch has no usable cuDNN"), "{none}");
        let old = reason(Trick::SdpaCudnn, WorkloadId::GptMini, &on(Some(8907)));
        assert!(old.starts_with("needs cuDNN 9 or newer (this machine loads 8.9.7)"), "{old}");
        let on_cpu = reason(Trick::SdpaCudnn, WorkloadId::GptShakespeare, &Hardware::with_gpus(0));
        assert!(on_cpu.starts_with("needs a CUDA GPU: "), "{on_cpu}");
    }

    #[test]
    fn a_cnn_only_trick_says_the_workload_first_even_on_a_cpu() {
        let why = reason(Trick::CudnnBenchmark, WorkloadId::GptMini, &Hardware::with_gpus(0));
        assert_eq!(why, "gpt-mini has no convolutions, whose algorithms are what cuDNN autotunes");
    }
}
