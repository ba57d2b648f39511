//! What a training step does besides forward, backward and update: the optimizer it updates with,
//! the training loss, gradient accumulation over micro-batches, clipping, checkpointing and how
//! gradients are cleared; and how the trainer evaluates (a weight average, test-time mirroring).

use tch::Tensor;

use crate::error::Error;
use crate::optim::clip::clip_grad_norm;
use crate::optim::sgd::SgdConfig;
use crate::optim::Optimizer;
use crate::train::average::EmaConfig;
use crate::train::recipe::{OptimizerChoice, Recipe};
use crate::tricks::{Trick, TrickSet};

/// What a step does besides forward, backward and update: the optimizer, and the convergence and
/// memory tricks that change the step or the evaluation.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct TrainOptions {
    /// The optimizer (SGD's and Adam's fused kernels are chosen by the `fused-optimizer` trick).
    pub optimizer: OptimizerChoice,
    /// Label smoothing of the training loss (0: plain cross-entropy).
    pub label_smoothing: f64,
    /// Micro-batches per optimizer step, gradients accumulated (1: the whole batch at once).
    pub micro_batches: usize,
    /// Global gradient norm to clip to, on the device (`None`: no clipping).
    pub clip_max_norm: Option<f64>,
    /// Recompute segments in backward instead of keeping their activations.
    pub checkpointing: bool,
    /// The moving average of the weights evaluated in their place (`None`: the raw weights).
    pub weight_average: Option<EmaConfig>,
    /// Evaluation logits averaged with those of the horizontally mirrored images.
    pub flip_tta: bool,
}

impl From<SgdConfig> for TrainOptions {
    /// Plain SGD with `config` on plain cross-entropy: the whole batch at once, no clipping, no
    /// checkpointing, the raw weights evaluated once per image.
    fn from(config: SgdConfig) -> Self {
        Self {
            optimizer: OptimizerChoice::Sgd { config, fused: false },
            label_smoothing: 0.0,
            micro_batches: 1,
            clip_max_norm: None,
            checkpointing: false,
            weight_average: None,
            flip_tta: false,
        }
    }
}

impl From<&Recipe> for TrainOptions {
    fn from(recipe: &Recipe) -> Self {
        Self {
            optimizer: recipe.optimizer,
            label_smoothing: recipe.label_smoothing,
            micro_batches: recipe.micro_batches,
            clip_max_norm: recipe.clip_max_norm,
            checkpointing: recipe.checkpointing,
            weight_average: recipe.weight_average,
            flip_tta: recipe.flip_tta,
        }
    }
}

impl TrainOptions {
    /// The optimizer to build under `tricks`: SGD's and Adam's fused kernels (with Muon, for the
    /// parameters it leaves out) when `fused-optimizer` is on (or the options already ask for
    /// them).
    pub fn optimizer_under(&self, tricks: &TrickSet) -> OptimizerChoice {
        let mut optimizer = self.optimizer;
        if let OptimizerChoice::Sgd { fused, .. }
        | OptimizerChoice::Adam { fused, .. }
        | OptimizerChoice::Muon { fused, .. } = &mut optimizer
        {
            *fused |= tricks.has(Trick::FusedOptimizer);
        }
        optimizer
    }
}

/// The step-level tricks a trainer runs every step with.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct StepOptions {
    label_smoothing: f64,
    /// At least 1.
    micro_batches: usize,
    clip_max_norm: Option<f64>,
    checkpointing: bool,
    set_grads_to_none: bool,
}

impl StepOptions {
    /// The step options of `options` under `tricks` (`zero-grad-none` sets gradients to none
    /// instead of zero-filling them). Fails on zero micro-batches and on label smoothing outside
    /// [0, 1).
    pub fn new(options: &TrainOptions, tricks: &TrickSet) -> Result<Self, Error> {
        if options.micro_batches == 0 {
            return Err(Error::Invalid("gradient accumulation needs at least one micro-batch".to_owned()));
        }
        if !(0.0..1.0).contains(&options.label_smoothing) {
            return Err(Error::Invalid(format!(
                "label smoothing {} is outside [0, 1)",
                options.label_smoothing
            )));
        }
        Ok(Self {
            label_smoothing: options.label_smoothing,
            micro_batches: options.micro_batches,
            clip_max_norm: options.clip_max_norm,
            checkpointing: options.checkpointing,
            set_grads_to_none: tricks.has(Trick::ZeroGradNone),
        })
    }

    /// Label smoothing of the training loss (0: plain cross-entropy).
    pub fn label_smoothing(&self) -> f64 {
        self.label_smoothing
    }

    /// Whether each micro-batch's forward pass is checkpointed.
    pub fn checkpointing(&self) -> bool {
        self.checkpointing
    }

    /// `inputs` and `targets` as the step's micro-batches, in order: the whole batch when not
    /// accumulating. Fails when the batch does not split into equal micro-batches.
    pub fn micro_batches(&self, inputs: &Tensor, targets: &Tensor) -> Result<Vec<(Tensor, Tensor)>, Error> {
        let k = self.micro_batches;
        if k == 1 {
            return Ok(vec![(inputs.shallow_clone(), targets.shallow_clone())]);
        }
        let samples = inputs.size()[0];
        if samples % k as i64 != 0 {
            return Err(Error::Invalid(format!(
                "grad-accumulation: a batch of {samples} samples does not split into {k} equal micro-batches"
            )));
        }
        Ok(inputs.chunk(k as i64, 0).into_iter().zip(targets.chunk(k as i64, 0)).collect())
    }

    /// Clears the gradients of `optimizer`'s parameters before a step: set to none, or
    /// zero-filled.
    pub fn clear_grads(&self, optimizer: &mut dyn Optimizer) {
        optimizer.zero_grad(self.set_grads_to_none);
    }

    /// Clips the gradients of `params` to the global norm, on the device, when clipping is on.
    pub fn clip(&self, params: &[Tensor]) -> Result<(), Error> {
        if let Some(max_norm) = self.clip_max_norm {
            let _total_norm = clip_grad_norm(params, max_norm)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use tch::{Device, Kind, Tensor};

    use super::*;

    fn options(micro_batches: usize) -> TrainOptions {
        TrainOptions { micro_batches, ..SgdConfig { momentum: 0.9, weight_decay: 0.0 }.into() }
    }

    #[test]
    fn a_batch_splits_into_equal_micro_batches_or_is_refused() {
        let inputs = Tensor::arange(12, (Kind::Float, Device::Cpu)).view([6, 2]);
        let targets = Tensor::arange(6, (Kind::Int64, Device::Cpu));
        let three = StepOptions::new(&options(3), &TrickSet::baseline()).unwrap();
        let split = three.micro_batches(&inputs, &targets).unwrap();
        assert_eq!(split.len(), 3);
        assert!(split.iter().all(|(x, y)| x.size() == [2, 2] && y.size() == [2]));
        assert_eq!(Vec::<i64>::try_from(&split[2].1).unwrap(), [4, 5], "in order");

        let four = StepOptions::new(&options(4), &TrickSet::baseline()).unwrap();
        let refused = four.micro_batches(&inputs, &targets).unwrap_err().to_string();
        assert!(
            refused.contains("a batch of 6 samples does not split into 4 equal micro-batches"),
            "{refused}"
        );
        assert!(StepOptions::new(&options(0), &TrickSet::baseline()).is_err());
    }
}
