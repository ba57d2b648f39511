//! A cell's training recipe: the optimizer and its hyper-parameters, the learning-rate and
//! momentum schedule, and the step options the convergence and memory tricks change. One function
//! derives it from the cell's key, so every cell process and every test agrees on what a trick
//! means.

use tch::Tensor;

use crate::optim::adam::{Adam, AdamConfig};
use crate::optim::lamb::{Lamb, LambConfig};
use crate::optim::lars::{Lars, LarsConfig};
use crate::optim::muon::{Muon, MuonConfig};
use crate::optim::schedule::{OneCycle, StepSchedule, WarmupCosine};
use crate::optim::sgd::{Sgd, SgdConfig};
use crate::optim::Optimizer;
use crate::results::schema::CellKey;
use crate::train::average::EmaConfig;
use crate::tricks::Trick;
use crate::vocabulary::TtaSettings;
use crate::workloads::{split_hidden_weights, Family, Workload};

/// The recipe's SGD: momentum 0.9, weight decay 5e-4 (He et al.).
pub const RECIPE_SGD: SgdConfig = SgdConfig { momentum: 0.9, weight_decay: 5e-4 };
/// Micro-batches per optimizer step under `grad-accumulation`.
pub const ACCUMULATION_MICRO_BATCHES: usize = 4;
/// Global gradient norm `grad-clipping` clips to.
pub const CLIP_MAX_NORM: f64 = 2.0;
/// 1cycle's peak learning rate as a multiple of the step schedule's base rate.
pub const ONE_CYCLE_PEAK_FACTOR: f64 = 4.0;
/// Fraction of the planned steps over which a linearly scaled learning rate is warmed up from
/// the base rate (Goyal et al. warm up over 5 of 90 epochs).
pub const WARMUP_FRACTION: f64 = 0.05;
/// Adam's and AdamW's learning rate at the time-to-accuracy batch (Adam's usual 1e-3).
pub const ADAM_LR: f64 = 1e-3;
/// Adam's L2 penalty: the recipe's 5e-4, added to the gradient.
pub const ADAM_L2_WEIGHT_DECAY: f64 = 5e-4;
/// AdamW's decoupled decay: 0.05, so that at lr 1e-3 it shrinks weights by 5e-5 per step, as the
/// recipe's SGD (lr 0.1 × 5e-4) does.
pub const ADAMW_WEIGHT_DECAY: f64 = 0.05;
/// LARS's learning rate per 256 samples of batch (linear scaling; with the trust coefficient
/// 0.001 a step moves each layer by about lr × 0.001 of its norm).
pub const LARS_LR_PER_256: f64 = 2.0;
/// LAMB's learning rate at a batch of 256 (scaled with the square root of the batch, as You et
/// al. do; a step moves each layer by about lr of its norm).
pub const LAMB_LR_AT_256: f64 = 0.01;
/// Muon's learning rate for the ResNets' block convolutions at [`MUON_AIRBENCH_BATCH`]: airbench's
/// (whose convolutions are renormalised to Frobenius norm √out, about the Kaiming-initialised
/// norm √(2·out) here, so a step moves a weight by about lr/√2 of its norm). Scaled with the square
/// root of the batch, as for LAMB: Muon's step has a fixed size, and a smaller batch takes more of
/// them, each with a noisier direction.
pub const MUON_AIRBENCH_LR: f64 = 0.24;
/// The batch airbench trains at.
pub const MUON_AIRBENCH_BATCH: f64 = 2000.0;

/// Muon's learning rate for a ResNet's block convolutions at a batch of `batch_size` (0.043 at the
/// quick profile's 64).
pub fn resnet_muon_lr(batch_size: usize) -> f64 {
    MUON_AIRBENCH_LR * (batch_size as f64 / MUON_AIRBENCH_BATCH).sqrt()
}

/// Label smoothing of the training loss under `label-smoothing` (airbench94's 0.2).
pub const LABEL_SMOOTHING: f64 = 0.2;
/// The weight average `ema-weights` evaluates: airbench94's decay of 0.95 per step, updated every
/// 5 steps (0.95⁵ ≈ 0.774 per update), warmed up by the update count (see [`EmaConfig`]). Its
/// horizon, about 20 steps, is airbench's; airbench also ramps the decay up as the cube of the
/// fraction of training done, a schedule tied to its Lookahead copy-back, which this average,
/// only evaluated, does not do.
pub const EMA: EmaConfig = EmaConfig { every_steps: 5, decay_per_step: 0.95 };
/// BatchNorm's momentum in PyTorch's convention (the weight of the batch statistic): PyTorch's
/// default.
pub const BN_MOMENTUM: f64 = 0.1;
/// BatchNorm's momentum in PyTorch's convention under `bn-momentum`: airbench94 sets
/// `batchnorm_momentum = 0.6`, the weight its running statistics keep, and passes 1 − 0.6 to
/// PyTorch.
pub const AIRBENCH_BN_MOMENTUM: f64 = 0.4;

/// nanoGPT's shakespeare-char recipe for the character-level GPT (`config/train_shakespeare_char.py`
/// over `train.py`'s defaults).
pub mod gpt {
    use crate::optim::adam::AdamConfig;

    /// AdamW with β₂ = 0.99 (small batches of tokens) and decoupled weight decay 0.1. nanoGPT
    /// decays only the 2-d weights; here every parameter decays, which adds 0.1·lr shrinkage to
    /// the LayerNorm gains (a few hundred of the 10.6M parameters).
    pub const ADAMW: AdamConfig = AdamConfig { beta1: 0.9, beta2: 0.99, eps: 1e-8, weight_decay: 0.1 };
    /// The learning rate at the end of the cosine decay (the peak is the profile's base rate).
    pub const MIN_LR: f64 = 1e-4;
    /// Muon's peak learning rate for the attention and MLP matrices (modded-nanogpt's first Muon
    /// records). Muon's step has a spectral norm of about lr whatever the width, and the
    /// spectral norm of a width-384 matrix at init (0.02·2√384 ≈ 0.8) is close to that of
    /// modded-nanogpt's width 768 (≈ 1.1), so the rate carries over: about 2.5% of a matrix's
    /// spectral norm per step at the peak.
    pub const MUON_LR: f64 = 0.02;
    /// Steps of linear warm-up.
    pub const WARMUP_STEPS: usize = 100;
    /// Global gradient norm `grad-clipping` clips to (the recipe's).
    pub const CLIP_MAX_NORM: f64 = 1.0;
}

/// Smith & Topin's super-convergence settings for ResNet-56 (arXiv:1708.07120, Table 1): a
/// piecewise-constant schedule from 0.35, against 1cycle between 0.1 and 3.0; weight decay 1e-4.
pub mod super_convergence {
    /// The step schedule's base learning rate.
    pub const STEP_LR: f64 = 0.35;
    /// 1cycle's lowest learning rate.
    pub const ONE_CYCLE_MIN_LR: f64 = 0.1;
    /// 1cycle's peak learning rate.
    pub const ONE_CYCLE_MAX_LR: f64 = 3.0;
    /// Weight decay of both.
    pub const WEIGHT_DECAY: f64 = 1e-4;
}

/// Which optimizer a cell trains with.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum OptimizerChoice {
    /// SGD with momentum (the recipe), per parameter or fused (`fused-optimizer`).
    Sgd {
        /// Momentum and weight decay.
        config: SgdConfig,
        /// The fused multi-tensor kernel instead of the per-parameter loop.
        fused: bool,
    },
    /// Adam with L2 added to the gradient (`adamw`'s reference) or AdamW (`adamw`), per parameter or
    /// fused (`fused-optimizer`).
    Adam {
        /// β₁, β₂, ε and weight decay.
        config: AdamConfig,
        /// Decoupled weight decay (AdamW).
        decoupled: bool,
        /// The fused multi-tensor kernel instead of the per-parameter loop.
        fused: bool,
    },
    /// LARS (`lars`).
    Lars(LarsConfig),
    /// LAMB (`lamb`).
    Lamb(LambConfig),
    /// Muon for the hidden weights (`muon`), the recipe's optimizer for every other parameter.
    Muon {
        /// Muon's rate ratio, momentum, weight decay and Newton–Schulz steps.
        config: MuonConfig,
        /// The optimizer of the other parameters.
        rest: MuonRest,
        /// The other optimizer's fused multi-tensor kernel instead of its per-parameter loop.
        fused: bool,
    },
}

/// The optimizer of the parameters Muon leaves out: the recipe's.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum MuonRest {
    /// SGD with momentum (the ResNets').
    Sgd(SgdConfig),
    /// AdamW (the GPT's).
    Adamw(AdamConfig),
}

impl MuonRest {
    /// The optimizer over `params`, fused or per parameter.
    fn build(self, params: Vec<Tensor>, fused: bool) -> Box<dyn Optimizer> {
        match (self, fused) {
            (MuonRest::Sgd(config), true) => Box::new(Sgd::fused(params, config)),
            (MuonRest::Sgd(config), false) => Box::new(Sgd::new(params, config)),
            (MuonRest::Adamw(config), true) => Box::new(Adam::fused_adamw(params, config)),
            (MuonRest::Adamw(config), false) => Box::new(Adam::adamw(params, config)),
        }
    }
}

impl OptimizerChoice {
    /// The optimizer over `workload`'s trainable variables; Muon takes its hidden weights and
    /// leaves the others to the recipe's optimizer.
    pub fn build<W: Workload + ?Sized>(&self, workload: &W) -> Box<dyn Optimizer> {
        let params = workload.var_store().trainable_variables();
        match *self {
            OptimizerChoice::Sgd { config, fused: true } => Box::new(Sgd::fused(params, config)),
            OptimizerChoice::Sgd { config, fused: false } => Box::new(Sgd::new(params, config)),
            OptimizerChoice::Adam { config, decoupled: true, fused: true } => {
                Box::new(Adam::fused_adamw(params, config))
            }
            OptimizerChoice::Adam { config, decoupled: true, fused: false } => {
                Box::new(Adam::adamw(params, config))
            }
            OptimizerChoice::Adam { config, decoupled: false, fused: true } => {
                Box::new(Adam::fused(params, config))
            }
            OptimizerChoice::Adam { config, decoupled: false, fused: false } => {
                Box::new(Adam::new(params, config))
            }
            OptimizerChoice::Lars(config) => Box::new(Lars::new(params, config)),
            OptimizerChoice::Lamb(config) => Box::new(Lamb::new(params, config)),
            OptimizerChoice::Muon { config, rest, fused } => {
                let (hidden, others) = split_hidden_weights(workload);
                Box::new(Muon::new(hidden, config, rest.build(others, fused)))
            }
        }
    }
}

/// The learning rate (and, for 1cycle, the momentum) at each optimizer step.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Schedule {
    /// The step schedule from `peak_lr` (÷10 at 50% and 75%), reached by a linear warm-up from
    /// `warmup_from_lr` over `warmup_steps` when the batch is larger than the recipe's.
    Step {
        /// The schedule after warm-up.
        schedule: StepSchedule,
        /// Where the warm-up starts.
        warmup_from_lr: f64,
        /// Steps of warm-up (0: none).
        warmup_steps: usize,
    },
    /// 1cycle: learning rate up then down, momentum down then up.
    OneCycle(OneCycle),
    /// Linear warm-up, then cosine decay (the GPT's recipe).
    WarmupCosine(WarmupCosine),
}

impl Schedule {
    /// The learning rate of (0-based) step `step`.
    pub fn lr(&self, step: usize) -> f64 {
        match self {
            Schedule::Step { schedule, warmup_from_lr, warmup_steps } if step < *warmup_steps => {
                let done = step as f64 / *warmup_steps as f64;
                warmup_from_lr + (schedule.base_lr - warmup_from_lr) * done
            }
            Schedule::Step { schedule, .. } => schedule.lr(step),
            Schedule::OneCycle(cycle) => cycle.lr(step),
            Schedule::WarmupCosine(schedule) => schedule.lr(step),
        }
    }

    /// The optimizer steps the schedule is planned over.
    pub fn total_steps(&self) -> usize {
        match self {
            Schedule::Step { schedule, .. } => schedule.total_steps,
            Schedule::OneCycle(cycle) => cycle.total_steps,
            Schedule::WarmupCosine(schedule) => schedule.decay_steps,
        }
    }

    /// The momentum of step `step` when the schedule sets it (1cycle), else `None`.
    pub fn momentum(&self, step: usize) -> Option<f64> {
        match self {
            Schedule::Step { .. } | Schedule::WarmupCosine(_) => None,
            Schedule::OneCycle(cycle) => Some(cycle.momentum(step)),
        }
    }
}

/// How a cell trains: everything the tricks of its key change about the math of training.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Recipe {
    /// The optimizer.
    pub optimizer: OptimizerChoice,
    /// The learning-rate (and momentum) schedule.
    pub schedule: Schedule,
    /// Micro-batches per optimizer step (1: none).
    pub micro_batches: usize,
    /// Global gradient norm to clip to (`None`: no clipping).
    pub clip_max_norm: Option<f64>,
    /// Recompute segments in backward instead of storing their activations.
    pub checkpointing: bool,
    /// BatchNorm after every convolution (the recipe) or none.
    pub batch_norm: bool,
    /// Per-channel standardised inputs (the recipe) or raw pixels in [0, 1].
    pub standardise_inputs: bool,
    /// Label smoothing of the training loss (0: plain cross-entropy); evaluation always reports
    /// plain cross-entropy.
    pub label_smoothing: f64,
    /// The moving average of the weights evaluated in their place (`None`: the raw weights).
    pub weight_average: Option<EmaConfig>,
    /// Evaluation logits averaged with those of the mirrored images (test-time augmentation).
    pub flip_tta: bool,
    /// BatchNorm's momentum in PyTorch's convention: running = (1 − m)·running + m·batch.
    pub bn_momentum: f64,
}

impl Recipe {
    /// The recipe of the cell `key` trained for `total_steps` optimizer steps, with the
    /// profile's time-to-accuracy settings `tta` (the base learning rate is SGD's at `tta`'s batch
    /// and scales linearly with the cell's batch, warmed up when larger). `super_convergence`
    /// applies Smith & Topin's settings instead of the profile's.
    pub fn for_cell(key: &CellKey, tta: &TtaSettings, total_steps: usize, super_convergence: bool) -> Self {
        if key.workload.family() == Family::CharGpt {
            return Self::for_gpt_cell(key, tta, total_steps);
        }
        let tricks = &key.tricks;
        let batch_ratio = key.batch_size as f64 / tta.batch_size.max(1) as f64;
        let (optimizer, base_lr) = Self::resnet_optimizer(key, tta, super_convergence);
        let schedule = if tricks.has(Trick::OneCycle) {
            let mut cycle = OneCycle::new(ONE_CYCLE_PEAK_FACTOR * base_lr, total_steps);
            if super_convergence {
                cycle.max_lr = super_convergence::ONE_CYCLE_MAX_LR;
                cycle.div_factor = super_convergence::ONE_CYCLE_MAX_LR / super_convergence::ONE_CYCLE_MIN_LR;
            }
            Schedule::OneCycle(cycle)
        } else {
            let warmup_from_lr = base_lr / batch_ratio.max(1.0);
            let warmup_steps =
                if batch_ratio > 1.0 { (WARMUP_FRACTION * total_steps as f64).ceil() as usize } else { 0 };
            Schedule::Step { schedule: StepSchedule { base_lr, total_steps }, warmup_from_lr, warmup_steps }
        };
        Recipe {
            optimizer,
            schedule,
            micro_batches: if tricks.has(Trick::GradAccumulation) { ACCUMULATION_MICRO_BATCHES } else { 1 },
            clip_max_norm: tricks.has(Trick::GradClipping).then_some(CLIP_MAX_NORM),
            checkpointing: tricks.has(Trick::Checkpointing),
            batch_norm: !key.is_reference_for(Trick::BatchNorm),
            standardise_inputs: !key.is_reference_for(Trick::InputNorm),
            label_smoothing: if tricks.has(Trick::LabelSmoothing) { LABEL_SMOOTHING } else { 0.0 },
            weight_average: tricks.has(Trick::EmaWeights).then_some(EMA),
            flip_tta: tricks.has(Trick::FlipTta),
            bn_momentum: if tricks.has(Trick::BnMomentum) { AIRBENCH_BN_MOMENTUM } else { BN_MOMENTUM },
        }
    }

    /// A ResNet cell's optimizer and base learning rate: the recipe's SGD, or the optimizer trick's
    /// choice. Muon's convolutions get [`resnet_muon_lr`] where the schedule gives SGD its base
    /// rate, and a decoupled decay that shrinks them per step by SGD's steady-state L2 shrinkage
    /// `lr·wd/(1 − momentum)`.
    fn resnet_optimizer(key: &CellKey, tta: &TtaSettings, super_convergence: bool) -> (OptimizerChoice, f64) {
        let tricks = &key.tricks;
        let batch_ratio = key.batch_size as f64 / tta.batch_size.max(1) as f64;
        let sgd_weight_decay =
            if super_convergence { super_convergence::WEIGHT_DECAY } else { RECIPE_SGD.weight_decay };
        let fused = tricks.has(Trick::FusedOptimizer);
        if tricks.has(Trick::Lars) {
            let lr = LARS_LR_PER_256 * key.batch_size as f64 / 256.0;
            // Every layer adapted, as in the paper (excluded 1-d parameters would take plain SGD steps
            // at this large rate).
            let config =
                LarsConfig { weight_decay: sgd_weight_decay, exclude_1d: false, ..LarsConfig::default() };
            (OptimizerChoice::Lars(config), lr)
        } else if tricks.has(Trick::Lamb) {
            let lr = LAMB_LR_AT_256 * (key.batch_size as f64 / 256.0).sqrt();
            (OptimizerChoice::Lamb(LambConfig::default()), lr)
        } else if tricks.has(Trick::Adamw) || key.is_reference_for(Trick::Adamw) {
            let decoupled = tricks.has(Trick::Adamw);
            let weight_decay = if decoupled { ADAMW_WEIGHT_DECAY } else { ADAM_L2_WEIGHT_DECAY };
            let config = AdamConfig { weight_decay, ..AdamConfig::default() };
            (OptimizerChoice::Adam { config, decoupled, fused }, ADAM_LR * batch_ratio)
        } else {
            let config = SgdConfig { weight_decay: sgd_weight_decay, ..RECIPE_SGD };
            let lr = if super_convergence { super_convergence::STEP_LR } else { tta.base_lr * batch_ratio };
            if !tricks.has(Trick::Muon) {
                return (OptimizerChoice::Sgd { config, fused }, lr);
            }
            let ratio = resnet_muon_lr(key.batch_size) / lr;
            let decay = config.weight_decay / ((1.0 - config.momentum) * ratio);
            (
                OptimizerChoice::Muon {
                    config: MuonConfig::new(ratio, decay),
                    rest: MuonRest::Sgd(config),
                    fused,
                },
                lr,
            )
        }
    }

    /// The GPT's recipe (nanoGPT's shakespeare-char): AdamW at the profile's peak rate with a
    /// warm-up and cosine decay (or, with `one-cycle`, 1cycle at the same peak), no BatchNorm or
    /// input statistics to change, and the step tricks as for the ResNets (airbench's tricks do
    /// not apply: plain cross-entropy, raw weights, no mirror images). With `muon`, Muon trains
    /// the attention and MLP matrices at [`gpt::MUON_LR`] where the schedule gives AdamW its rate.
    fn for_gpt_cell(key: &CellKey, tta: &TtaSettings, total_steps: usize) -> Self {
        let tricks = &key.tricks;
        let schedule = if tricks.has(Trick::OneCycle) {
            Schedule::OneCycle(OneCycle::new(tta.base_lr, total_steps))
        } else {
            Schedule::WarmupCosine(WarmupCosine {
                peak_lr: tta.base_lr,
                min_lr: gpt::MIN_LR,
                warmup_steps: gpt::WARMUP_STEPS.min(total_steps / 2),
                decay_steps: total_steps,
            })
        };
        let fused = tricks.has(Trick::FusedOptimizer);
        let optimizer = if tricks.has(Trick::Muon) {
            // The same decoupled shrinkage per step as AdamW's: Muon's rate × its decay = AdamW's.
            let ratio = gpt::MUON_LR / tta.base_lr;
            let config = MuonConfig::new(ratio, gpt::ADAMW.weight_decay / ratio);
            OptimizerChoice::Muon { config, rest: MuonRest::Adamw(gpt::ADAMW), fused }
        } else {
            OptimizerChoice::Adam { config: gpt::ADAMW, decoupled: true, fused }
        };
        Recipe {
            optimizer,
            schedule,
            micro_batches: if tricks.has(Trick::GradAccumulation) { ACCUMULATION_MICRO_BATCHES } else { 1 },
            clip_max_norm: tricks.has(Trick::GradClipping).then_some(gpt::CLIP_MAX_NORM),
            checkpointing: tricks.has(Trick::Checkpointing),
            batch_norm: true,
            standardise_inputs: true,
            label_smoothing: 0.0,
            weight_average: None,
            flip_tta: false,
            bn_momentum: BN_MOMENTUM,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::Engine;
    use crate::results::schema::CellKind;
    use crate::tricks::TrickSet;
    use crate::vocabulary::ProfileName;
    use crate::workloads::WorkloadId;

    fn key(tricks: &[Trick], batch_size: usize, reference_for: Option<Trick>) -> CellKey {
        CellKey {
            workload: WorkloadId::Resnet8,
            tricks: tricks.iter().copied().collect::<TrickSet>(),
            batch_size,
            seed: 0,
            kind: CellKind::TimeToAccuracy,
            reference_for,
            aa_control: false,
            alone: false,
            engine: Engine::Libtorch,
        }
    }

    fn recipe(tricks: &[Trick], batch_size: usize, reference_for: Option<Trick>) -> Recipe {
        let tta = ProfileName::Quick.settings(Family::CifarResnet).tta;
        Recipe::for_cell(&key(tricks, batch_size, reference_for), &tta, 1000, false)
    }

    #[test]
    fn the_baseline_is_the_sgd_step_schedule_at_the_profile_rate() {
        let r = recipe(&[], 64, None);
        assert_eq!(r.optimizer, OptimizerChoice::Sgd { config: RECIPE_SGD, fused: false });
        assert_eq!((r.schedule.lr(0), r.schedule.lr(499), r.schedule.lr(500)), (0.05, 0.05, 0.005));
        assert_eq!(r.schedule.momentum(0), None);
        assert_eq!(r.schedule.total_steps(), 1000);
        assert_eq!((r.micro_batches, r.clip_max_norm, r.checkpointing), (1, None, false));
        assert!(r.batch_norm && r.standardise_inputs);
        assert_eq!((r.label_smoothing, r.weight_average, r.flip_tta), (0.0, None, false));
        assert_eq!(r.bn_momentum, 0.1, "PyTorch's default");
    }

    #[test]
    fn airbench_s_tricks_set_their_values() {
        assert_eq!(recipe(&[Trick::LabelSmoothing], 64, None).label_smoothing, 0.2);
        let ema = recipe(&[Trick::EmaWeights], 64, None).weight_average.unwrap();
        assert_eq!((ema.every_steps, ema.decay_per_step), (5, 0.95));
        assert!(recipe(&[Trick::FlipTta], 64, None).flip_tta);
        assert_eq!(recipe(&[Trick::BnMomentum], 64, None).bn_momentum, 0.4, "1 − airbench's 0.6");
        let all = [Trick::LabelSmoothing, Trick::EmaWeights, Trick::FlipTta, Trick::BnMomentum];
        let stacked = recipe(&all, 64, None);
        assert_eq!(stacked.optimizer, recipe(&[], 64, None).optimizer, "the optimizer is untouched");
        assert_eq!(stacked.schedule, recipe(&[], 64, None).schedule);
    }

    #[test]
    fn larger_batches_scale_the_rate_linearly_after_a_warm_up() {
        let r = recipe(&[], 512, None);
        // 8× the batch: 8× the rate, reached linearly over the first 5% (50 of 1000 steps).
        assert!((r.schedule.lr(0) - 0.05).abs() < 1e-12);
        assert!((r.schedule.lr(25) - (0.05 + 0.35 * 0.5)).abs() < 1e-12);
        assert!((r.schedule.lr(50) - 0.4).abs() < 1e-12);
        assert!((r.schedule.lr(800) - 0.004).abs() < 1e-12);
    }

    #[test]
    fn tricks_choose_the_optimizer_schedule_and_step_options() {
        let cycle = recipe(&[Trick::OneCycle], 64, None);
        let Schedule::OneCycle(c) = cycle.schedule else { panic!("1cycle expected") };
        assert!((c.max_lr - ONE_CYCLE_PEAK_FACTOR * 0.05).abs() < 1e-12);
        assert_eq!(cycle.schedule.momentum(0), Some(0.95));
        assert_eq!(cycle.schedule.total_steps(), 1000);
        let adamw = recipe(&[Trick::Adamw], 64, None);
        assert!(
            matches!(adamw.optimizer, OptimizerChoice::Adam { decoupled: true, fused: false, config } if config.weight_decay == ADAMW_WEIGHT_DECAY)
        );
        let adam_l2 = recipe(&[], 64, Some(Trick::Adamw));
        assert!(
            matches!(adam_l2.optimizer, OptimizerChoice::Adam { decoupled: false, fused: false, config } if config.weight_decay == ADAM_L2_WEIGHT_DECAY)
        );
        assert!((adam_l2.schedule.lr(0) - ADAM_LR).abs() < 1e-15);
        assert!(
            matches!(recipe(&[Trick::Lars], 512, None).optimizer, OptimizerChoice::Lars(c) if !c.exclude_1d)
        );
        assert!(matches!(recipe(&[Trick::Lamb], 512, None).optimizer, OptimizerChoice::Lamb(_)));
        assert_eq!(recipe(&[Trick::GradAccumulation], 64, None).micro_batches, ACCUMULATION_MICRO_BATCHES);
        assert_eq!(recipe(&[Trick::GradClipping], 64, None).clip_max_norm, Some(CLIP_MAX_NORM));
        assert!(recipe(&[Trick::Checkpointing], 64, None).checkpointing);
        assert!(!recipe(&[], 64, Some(Trick::BatchNorm)).batch_norm);
        assert!(!recipe(&[], 64, Some(Trick::InputNorm)).standardise_inputs);
        assert!(matches!(
            recipe(&[Trick::FusedOptimizer], 64, None).optimizer,
            OptimizerChoice::Sgd { fused: true, .. }
        ));
        assert!(matches!(
            recipe(&[Trick::Adamw, Trick::FusedOptimizer], 64, None).optimizer,
            OptimizerChoice::Adam { decoupled: true, fused: true, .. }
        ));
    }

    #[test]
    fn muon_takes_its_rate_where_the_schedule_gives_the_recipe_s_and_keeps_the_recipe_for_the_rest() {
        let baseline = recipe(&[], 64, None);
        let muon = recipe(&[Trick::Muon], 64, None);
        assert_eq!(muon.schedule, baseline.schedule);
        let OptimizerChoice::Muon { config, rest, fused: false } = muon.optimizer else {
            panic!("Muon expected")
        };
        assert_eq!(rest, MuonRest::Sgd(RECIPE_SGD));
        assert!((config.lr_ratio * 0.05 - 0.24 * (64.0f64 / 2000.0).sqrt()).abs() < 1e-12);
        // Decoupled decay per step (Muon's rate × λ) = SGD's steady-state lr·wd/(1 − momentum).
        assert!((config.lr_ratio * config.weight_decay - 5e-4 / 0.1).abs() < 1e-12);
        assert_eq!((config.momentum, config.newton_schulz_steps), (0.95, 5));
        let fused = recipe(&[Trick::Muon, Trick::FusedOptimizer], 64, None);
        assert!(matches!(fused.optimizer, OptimizerChoice::Muon { fused: true, .. }));

        let tta = ProfileName::Standard.settings(Family::CharGpt).tta;
        let gpt_key = CellKey { workload: WorkloadId::GptShakespeare, ..key(&[Trick::Muon], 64, None) };
        let gpt = Recipe::for_cell(&gpt_key, &tta, 5000, false);
        let OptimizerChoice::Muon { config, rest, .. } = gpt.optimizer else { panic!("Muon expected") };
        assert_eq!(rest, MuonRest::Adamw(gpt::ADAMW));
        assert!((config.lr_ratio * gpt.schedule.lr(100) - gpt::MUON_LR).abs() < 1e-12);
        assert!((config.lr_ratio * config.weight_decay - gpt::ADAMW.weight_decay).abs() < 1e-12);
    }

    #[test]
    fn muon_is_built_over_every_trainable_variable() {
        use crate::workloads::resnet::{CifarResnet, ResnetOptions};
        let options = ResnetOptions::for_workload(WorkloadId::Resnet8, false).unwrap();
        let net = CifarResnet::new(options, tch::Device::Cpu);
        let optimizer = recipe(&[Trick::Muon], 64, None).optimizer.build(&net);
        assert_eq!(optimizer.params().len(), net.var_store().trainable_variables().len());
    }

    #[test]
    fn super_convergence_uses_smith_and_topins_rates() {
        let tta = ProfileName::Standard.settings(Family::CifarResnet).tta;
        let step = Recipe::for_cell(&key(&[], 128, None), &tta, 1000, true);
        assert_eq!(step.schedule.lr(0), super_convergence::STEP_LR);
        let cycle = Recipe::for_cell(&key(&[Trick::OneCycle], 128, None), &tta, 1000, true);
        assert!((cycle.schedule.lr(0) - super_convergence::ONE_CYCLE_MIN_LR).abs() < 1e-12);
        assert!((cycle.schedule.lr(299) - super_convergence::ONE_CYCLE_MAX_LR).abs() < 1e-9);
        let OptimizerChoice::Sgd { config, .. } = cycle.optimizer else { panic!("SGD expected") };
        assert_eq!(config.weight_decay, super_convergence::WEIGHT_DECAY);
    }

    #[test]
    fn the_gpt_trains_with_nanogpts_adamw_and_cosine_schedule() {
        let tta = ProfileName::Standard.settings(Family::CharGpt).tta;
        let gpt_key =
            |tricks: &[Trick]| CellKey { workload: WorkloadId::GptShakespeare, ..key(tricks, 64, None) };
        let base = Recipe::for_cell(&gpt_key(&[]), &tta, 5000, false);
        assert!(matches!(
            base.optimizer,
            OptimizerChoice::Adam { decoupled: true, fused: false, config } if config == gpt::ADAMW
        ));
        let fused = Recipe::for_cell(&gpt_key(&[Trick::FusedOptimizer]), &tta, 5000, false);
        assert!(matches!(fused.optimizer, OptimizerChoice::Adam { fused: true, .. }));
        assert_eq!(base.schedule.lr(100), 1e-3);
        assert_eq!(base.schedule.lr(4999).max(base.schedule.lr(5000)), base.schedule.lr(4999));
        assert_eq!(base.schedule.lr(5000), gpt::MIN_LR);
        assert_eq!((base.clip_max_norm, base.schedule.momentum(0)), (None, None));
        let clipped = Recipe::for_cell(&gpt_key(&[Trick::GradClipping]), &tta, 5000, false);
        assert_eq!(clipped.clip_max_norm, Some(gpt::CLIP_MAX_NORM));
        // 1cycle at the cosine schedule's peak, with β₁ cycled.
        let cycle = Recipe::for_cell(&gpt_key(&[Trick::OneCycle]), &tta, 5000, false);
        let Schedule::OneCycle(c) = cycle.schedule else { panic!("1cycle expected") };
        assert_eq!((c.max_lr, cycle.schedule.momentum(0)), (1e-3, Some(0.95)));
    }
}
