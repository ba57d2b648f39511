//! One micro-batch's forward pass, loss and backward: the autocast region and checkpointing it runs
//! under, the scale its loss is backpropagated at, and the sums of several passes' results.

use tch::{Kind, Tensor};

use crate::error::Error;
use crate::measure::phases;
use crate::results::phases::StepPhase;
use crate::train::amp::Autocast;
use crate::train::checkpoint;
use crate::workloads::Workload;

/// What the loss is multiplied by before backward: fp16 loss scaling's scale (a device tensor,
/// when on) times a number (1/k for k accumulated micro-batches, a replica's share of the batch).
#[derive(Debug)]
pub struct LossScale {
    /// The loss scaler's current scale, a 1-element float tensor on the device.
    pub scaler: Option<Tensor>,
    /// A plain number multiplied in as a scalar operand (no tensor is made of it).
    pub factor: f64,
}

impl LossScale {
    /// No scaling.
    pub const NONE: LossScale = LossScale { scaler: None, factor: 1.0 };

    /// This scale with the scaler's tensor moved to `device`.
    pub(crate) fn on(&self, device: tch::Device) -> LossScale {
        LossScale { scaler: self.scaler.as_ref().map(|s| s.to_device(device)), factor: self.factor }
    }

    /// This scale times `factor`.
    pub(crate) fn times(self, factor: f64) -> LossScale {
        LossScale { factor: self.factor * factor, ..self }
    }

    /// `loss` scaled: multiplied by the scaler's tensor and by the factor where not 1.
    pub fn apply(&self, loss: &Tensor) -> Tensor {
        let scaled = match &self.scaler {
            Some(scale) => loss * scale,
            None => loss.shallow_clone(),
        };
        if self.factor == 1.0 {
            scaled
        } else {
            scaled * self.factor
        }
    }

    /// Whether backward needs the loss scaled at all.
    pub fn is_identity(&self) -> bool {
        self.scaler.is_none() && self.factor == 1.0
    }
}

/// How every micro-batch's forward and backward run in a trainer's steps.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct MicroBatchPass {
    /// The autocast region of the forward pass (`None`: fp32).
    pub autocast: Option<Autocast>,
    /// Label smoothing of the training loss ([`Workload::training_loss`]; 0: plain
    /// cross-entropy).
    pub label_smoothing: f64,
    /// Recompute segments in backward instead of keeping their activations.
    pub checkpointing: bool,
}

impl MicroBatchPass {
    /// Forward pass, loss and backward of `workload` on one micro-batch, with the loss multiplied
    /// by `loss_scale` before backward, checkpointed when asked. Under autocast the forward pass
    /// runs in it and backward outside it, as PyTorch advises, except that a checkpointed segment
    /// is recomputed (and so backpropagated) under autocast, as `torch.utils.checkpoint`
    /// recomputes. Returns the mean training loss (fp32, detached) and the number of correct
    /// predictions, on the device.
    pub fn run<W: Workload>(
        &self,
        workload: &W,
        inputs: &Tensor,
        targets: &Tensor,
        loss_scale: &LossScale,
    ) -> Result<(Tensor, Tensor), Error> {
        let enter = || self.autocast.map(Autocast::enter).transpose();
        phases::enter(StepPhase::Forward);
        if self.checkpointing {
            let _autocast = enter()?;
            return checkpoint::checkpointed_forward_backward(
                workload,
                inputs,
                targets,
                self.label_smoothing,
                loss_scale,
            );
        }
        let (loss, correct) = {
            let _autocast = enter()?;
            let outputs = workload.forward(inputs, true);
            let loss = workload.training_loss(&outputs.to_kind(Kind::Float), targets, self.label_smoothing);
            (loss, workload.correct(&outputs, targets))
        };
        phases::enter(StepPhase::Backward);
        if loss_scale.is_identity() {
            loss.f_backward()?;
        } else {
            loss_scale.apply(&loss).f_backward()?;
        }
        Ok((loss.detach(), correct))
    }
}

/// The running sums of several passes' losses and correct counts, added in order.
#[derive(Debug, Default)]
pub struct Totals {
    loss: Option<Tensor>,
    correct: Option<Tensor>,
}

impl Totals {
    /// Adds one pass's loss and correct count.
    pub fn add(&mut self, loss: Tensor, correct: Tensor) {
        self.loss = Some(match self.loss.take() {
            Some(sum) => sum + &loss,
            None => loss,
        });
        self.correct = Some(match self.correct.take() {
            Some(sum) => sum + &correct,
            None => correct,
        });
    }

    /// The summed loss and correct count. Panics when nothing was added: every batch has at least
    /// one micro-batch and every micro-batch at least one chunk.
    pub fn sums(self) -> (Tensor, Tensor) {
        (self.loss.expect("at least one pass"), self.correct.expect("at least one pass"))
    }
}
