//! What the catalogue says of sets of tricks switched on together ([`TrickSet`]): which trick a set
//! measures, what it is compared with, and the rules for tricks that cannot go together or cannot
//! run with the hardware and data sources at hand.

use super::{Applicability, Reference, Trick, TrickSet};
use crate::engine::Engine;
use crate::hardware::Hardware;
use crate::vocabulary::WorkloadId;

/// Pairs of tricks the PyTorch engine does not combine in one side, and why; its script refuses
/// the same pairs with the same reasons when a case asks for them (`CONFLICTS` in
/// `scripts/engine/pytorch_engine.py`).
pub const PYTORCH_ENGINE_CONFLICTS: [(Trick, Trick, &str); 5] = [
    (Trick::CudaGraphs, Trick::Amp, "GradScaler's step reads whether gradients overflowed on the host"),
    (
        Trick::CudaGraphs,
        Trick::TorchCompile,
        "torch.compile and a hand-captured CUDA graph would both own the step",
    ),
    (
        Trick::CudaGraphs,
        Trick::Checkpointing,
        "checkpoint saves the generator's state on the host in forward",
    ),
    (Trick::Checkpointing, Trick::TorchCompile, "the engine checkpoints the eager module's segments"),
    (Trick::Fp8Matmul, Trick::TorchCompile, "the engine's fp8 matmul is an eager autograd function"),
];

impl TrickSet {
    /// The trick this set measures alone, if it measures one: the set's only trick, or a trick
    /// with the precision its reference adds on a CUDA GPU ([`Trick::ablation_set`]:
    /// `amp-bf16+sdpa-flash` measures `sdpa-flash`).
    pub fn ablated_trick(&self) -> Option<Trick> {
        let mut tricks = self.iter();
        match (tricks.next(), tricks.next(), tricks.next()) {
            (Some(t), None, _) => Some(t),
            (Some(a), Some(b), None) => [(a, b), (b, a)].into_iter().find_map(|(t, other)| {
                let added = matches!(
                    t.info().reference,
                    Reference::Swapped { cuda_precision: Some(p), .. } if p == other
                );
                added.then_some(t)
            }),
            _ => None,
        }
    }

    /// The set a cell of this set is compared with in place of the baseline, where one of its
    /// tricks is compared with another in its place ([`Reference::Swapped`]): this set with that
    /// trick swapped for the other.
    pub fn swapped_reference(&self) -> Option<TrickSet> {
        self.iter().find_map(|t| match t.info().reference {
            Reference::Swapped { with, .. } => Some(self.iter().filter(|&x| x != t).chain([with]).collect()),
            _ => None,
        })
    }

    /// The first reason, if any, why this set cannot run for `workload` on `hardware` (on
    /// libtorch).
    pub fn not_applicable_reason(&self, workload: WorkloadId, hardware: &Hardware) -> Option<String> {
        self.not_applicable_reason_on(Engine::Libtorch, workload, hardware)
    }

    /// The first reason, if any, why this set cannot run for `workload` on `hardware` on `engine`.
    pub fn not_applicable_reason_on(
        &self,
        engine: Engine,
        workload: WorkloadId,
        hardware: &Hardware,
    ) -> Option<String> {
        self.iter()
            .find_map(|t| match t.applicability_on(engine, workload, hardware) {
                Applicability::Applies => None,
                Applicability::NotApplicable(reason) => Some(format!("{t}: {reason}")),
            })
            .or_else(|| self.conflict_reason_on(engine))
            .or_else(|| {
                self.iter().find_map(|t| {
                    let unmet = t.info().needs.iter().find_map(|need| need.unmet_in_set(self, hardware));
                    unmet.map(|reason| format!("{t}: {reason}"))
                })
            })
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

    /// Why these tricks cannot be on together, if they cannot: `amp` and `amp-bf16` each choose
    /// autocast's dtype; each optimizer trick replaces the optimizer (Muon that of the hidden
    /// weights); a CUDA graph cannot replay DDP's or 1cycle's
    /// host-driven steps; `flash-attention` (PyTorch's own backend choice) and each forced-backend
    /// trick decide how attention runs, and only one backend can be forced; `fused-optimizer` has
    /// fused kernels for SGD and AdamW only (not LARS or LAMB; with Muon, they update the parameters
    /// Muon leaves out).
    pub fn conflict_reason(&self) -> Option<String> {
        let attention: Vec<&str> = [Trick::FlashAttention]
            .iter()
            .chain(&Trick::SDPA_BACKENDS)
            .filter(|&&t| self.has(t))
            .map(|t| t.id())
            .collect();
        if attention.len() > 1 {
            return Some(format!(
                "{} each decide which scaled_dot_product_attention backend runs (PyTorch's choice, or \
                 exactly one forced with every other disabled); only one can be on",
                attention.join(" and ")
            ));
        }
        if self.has(Trick::Amp) && self.has(Trick::AmpBf16) {
            return Some(format!(
                "{} and {} each choose the dtype autocast runs in (fp16 with loss scaling, or bf16); \
                 only one can be on",
                Trick::Amp,
                Trick::AmpBf16
            ));
        }
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

    /// Why these tricks cannot be on together on `engine`: [`Self::conflict_reason`], and on the
    /// PyTorch engine the pairs it does not combine in one side ([`PYTORCH_ENGINE_CONFLICTS`]).
    pub fn conflict_reason_on(&self, engine: Engine) -> Option<String> {
        self.conflict_reason().or_else(|| {
            let pairs = PYTORCH_ENGINE_CONFLICTS.iter().filter(|_| engine == Engine::Pytorch);
            pairs.into_iter().find(|(a, b, _)| self.has(*a) && self.has(*b)).map(|(a, b, why)| {
                format!("{a} with {b}: {why}, so the PyTorch engine does not combine them")
            })
        })
    }

    /// Why this set cannot run with the data sources at hand, if it cannot: `packed-dataset` is
    /// measured against decoding image files, so it needs `--images` (`has_images`).
    pub fn missing_source_reason(&self, has_images: bool) -> Option<String> {
        (self.has(Trick::PackedDataset) && !has_images)
            .then(|| format!("{}: needs --images PATH: the JPEG/PNG files to decode", Trick::PackedDataset))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_pytorch_engine_refuses_the_pairs_its_script_refuses_for_the_same_reasons() {
        let script = include_str!("../../scripts/engine/pytorch_engine.py");
        for (a, b, why) in PYTORCH_ENGINE_CONFLICTS {
            assert!(script.contains(why), "the engine script does not refuse {a} with {b}: {why}");
            let both: TrickSet = [a, b].into_iter().collect();
            assert_eq!(both.conflict_reason_on(Engine::Libtorch), None, "{a} with {b} on libtorch");
            let reason = both.conflict_reason_on(Engine::Pytorch).unwrap();
            assert!(reason.starts_with(&format!("{a} with {b}: {why}")), "{reason}");
        }
        let compiled_checkpoints: TrickSet =
            [Trick::Checkpointing, Trick::TorchCompile].into_iter().collect();
        let reason = compiled_checkpoints.not_applicable_reason_on(
            Engine::Pytorch,
            WorkloadId::Resnet8,
            &Hardware::with_gpus(1),
        );
        assert!(reason.unwrap().contains("does not combine them"));
    }

    #[test]
    fn optimizer_tricks_conflict_with_each_other() {
        let both: TrickSet = [Trick::Adamw, Trick::Lars].into_iter().collect();
        assert!(both.conflict_reason().unwrap().contains("adamw and lars"));
        assert!(TrickSet::only(Trick::Lamb).conflict_reason().is_none());
        assert!(both.not_applicable_reason(WorkloadId::Resnet8, &Hardware::with_gpus(0)).is_some());
        let graphed_cycle: TrickSet = [Trick::CudaGraphs, Trick::OneCycle].into_iter().collect();
        assert!(graphed_cycle.conflict_reason().unwrap().contains("momentum"));
    }

    #[test]
    fn one_attention_backend_decision_per_set() {
        let two_forced: TrickSet = [Trick::SdpaMath, Trick::SdpaFlash].into_iter().collect();
        let reason = two_forced.conflict_reason().unwrap();
        assert!(reason.starts_with("sdpa-flash and sdpa-math each decide"), "{reason}");
        assert!(reason.ends_with("only one can be on"), "{reason}");
        let cpu = Hardware::with_gpus(0);
        let na = two_forced.not_applicable_reason(WorkloadId::GptMini, &cpu).unwrap();
        assert_eq!(na, reason);
        let chosen_and_forced: TrickSet = [Trick::FlashAttention, Trick::SdpaMath].into_iter().collect();
        assert!(chosen_and_forced.conflict_reason().unwrap().starts_with("flash-attention and sdpa-math"));
        for t in Trick::SDPA_BACKENDS {
            let with_others: TrickSet = [t, Trick::JitFusion, Trick::Amp].into_iter().collect();
            assert_eq!(with_others.conflict_reason(), None, "{t}");
            assert_eq!(with_others.forced_attention_backend(), t.forced_attention_backend());
        }
        assert_eq!(TrickSet::only(Trick::FlashAttention).forced_attention_backend(), None);
    }

    #[test]
    fn flash_and_cudnn_attention_need_half_precision_on_a_gpu_only() {
        let gpu = Hardware::with_gpus(1);
        for t in [Trick::SdpaFlash, Trick::SdpaCudnn] {
            let why = TrickSet::only(t).not_applicable_reason(WorkloadId::GptMini, &gpu).unwrap();
            let expected = format!("{t}: needs fp16 or bf16 on a CUDA GPU (amp or amp-bf16 on too): ");
            assert!(why.starts_with(&expected), "{why}");
            assert!(why.ends_with("in fp32 scaled_dot_product_attention finds no kernel and fails"), "{why}");
            for precision in [Trick::Amp, Trick::AmpBf16] {
                let half: TrickSet = [t, precision].into_iter().collect();
                assert_eq!(
                    half.not_applicable_reason(WorkloadId::GptMini, &gpu),
                    None,
                    "{t} with {precision}"
                );
            }
        }
        for t in [Trick::SdpaMemEfficient, Trick::SdpaMath] {
            assert_eq!(TrickSet::only(t).not_applicable_reason(WorkloadId::GptMini, &gpu), None, "{t}");
        }
        let cpu = Hardware::with_gpus(0);
        assert_eq!(TrickSet::only(Trick::SdpaMath).not_applicable_reason(WorkloadId::GptMini, &cpu), None);
    }

    #[test]
    fn a_forced_backend_is_measured_under_bf16_on_a_gpu_against_pytorchs_choice() {
        let set = |tricks: &[Trick]| tricks.iter().copied().collect::<TrickSet>();
        for t in Trick::SDPA_BACKENDS {
            assert_eq!(t.ablation_set(&Hardware::with_gpus(0)), TrickSet::only(t));
            let on_gpu = t.ablation_set(&Hardware::with_gpus(1));
            assert_eq!(on_gpu, set(&[t, Trick::AmpBf16]));
            assert_eq!(on_gpu.ablated_trick(), Some(t));
            assert_eq!(on_gpu.swapped_reference(), Some(set(&[Trick::AmpBf16, Trick::FlashAttention])));
            assert_eq!(TrickSet::only(t).swapped_reference(), Some(TrickSet::only(Trick::FlashAttention)));
            assert!(!t.compared_with_baseline());
            assert_eq!(t.reference_text().as_deref(), Some("flash-attention in its place"));
        }
        assert_eq!(set(&[Trick::AmpBf16, Trick::FlashAttention]).ablated_trick(), None);
        assert_eq!(
            set(&[Trick::Amp, Trick::SdpaFlash]).ablated_trick(),
            None,
            "not the ablation's precision"
        );
        assert_eq!(TrickSet::only(Trick::AmpBf16).ablated_trick(), Some(Trick::AmpBf16));
        assert_eq!(
            Trick::ChannelsLast.ablation_set(&Hardware::with_gpus(1)),
            TrickSet::only(Trick::ChannelsLast)
        );
        assert_eq!(TrickSet::only(Trick::FlashAttention).swapped_reference(), None);
    }

    #[test]
    fn fp16_and_bf16_autocast_cannot_both_be_on() {
        let both: TrickSet = [Trick::Amp, Trick::AmpBf16].into_iter().collect();
        let reason = both.conflict_reason().unwrap();
        assert!(reason.starts_with("amp and amp-bf16 each choose the dtype autocast runs in"), "{reason}");
        let gpu = Hardware::with_gpus(1);
        assert_eq!(both.not_applicable_reason(WorkloadId::Resnet56, &gpu), Some(reason));
        for one in [Trick::Amp, Trick::AmpBf16] {
            let with_others: TrickSet = [one, Trick::ChannelsLast, Trick::CudaGraphs].into_iter().collect();
            assert_eq!(with_others.not_applicable_reason(WorkloadId::Resnet56, &gpu), None, "{one}");
        }
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
    fn muon_replaces_the_optimizer_and_goes_with_fused_kernels_and_cuda_graphs() {
        let with_adamw: TrickSet = [Trick::Adamw, Trick::Muon].into_iter().collect();
        assert_eq!(
            with_adamw.conflict_reason().unwrap(),
            "adamw and muon each replace the optimizer; only one can be on"
        );
        for other in
            [Trick::FusedOptimizer, Trick::CudaGraphs, Trick::OneCycle, Trick::GradClipping, Trick::Amp]
        {
            let set: TrickSet = [Trick::Muon, other].into_iter().collect();
            assert_eq!(set.conflict_reason(), None, "{other}");
        }
    }

    #[test]
    fn the_first_trick_that_cannot_run_names_itself() {
        let set: TrickSet = [Trick::ChannelsLast, Trick::Amp].into_iter().collect();
        let reason = set.not_applicable_reason(WorkloadId::Resnet56, &Hardware::with_gpus(0)).unwrap();
        assert!(reason.starts_with("amp: needs a CUDA GPU"), "{reason}");
        assert_eq!(set.not_applicable_reason(WorkloadId::Resnet56, &Hardware::with_gpus(1)), None);
    }

    #[test]
    fn ddp_does_not_go_with_cuda_graphs() {
        let graphed: TrickSet = [Trick::Ddp, Trick::CudaGraphs].into_iter().collect();
        assert!(graphed.conflict_reason().unwrap().contains("all-reduce"));
        let reason = graphed.not_applicable_reason(WorkloadId::Resnet8, &Hardware::with_gpus(2)).unwrap();
        assert!(reason.starts_with("cuda-graphs: DDP's gradient all-reduce"), "{reason}");
    }

    #[test]
    fn checkpointing_a_dropout_model_cannot_be_captured_in_a_cuda_graph() {
        let both: TrickSet = [Trick::CudaGraphs, Trick::Checkpointing].into_iter().collect();
        let gpu = Hardware::with_gpus(1);
        let reason = both.not_applicable_reason(WorkloadId::GptShakespeare, &gpu).unwrap();
        assert!(
            reason.starts_with("cuda-graphs: checkpointing replays gpt-shakespeare's dropout"),
            "{reason}"
        );
        assert_eq!(both.not_applicable_reason(WorkloadId::GptMini, &gpu), None);
    }

    #[test]
    fn fp8_matmul_goes_with_autocast_cuda_graphs_and_checkpointing() {
        let gpu = Hardware::with_gpus(1);
        for with in
            [Trick::Amp, Trick::AmpBf16, Trick::CudaGraphs, Trick::Checkpointing, Trick::FlashAttention]
        {
            let set: TrickSet = [Trick::Fp8Matmul, with].into_iter().collect();
            assert_eq!(set.not_applicable_reason(WorkloadId::GptMini, &gpu), None, "{with}");
        }
    }

    #[test]
    fn packed_dataset_needs_image_files() {
        let packed = TrickSet::only(Trick::PackedDataset);
        let reason = packed.missing_source_reason(false).unwrap();
        assert_eq!(reason, "packed-dataset: needs --images PATH: the JPEG/PNG files to decode");
        assert_eq!(packed.missing_source_reason(true), None);
        assert_eq!(TrickSet::baseline().missing_source_reason(false), None);
    }
}
