//! What one training step computes, apart from how it is launched: clear the gradients, forward
//! and backward over the micro-batches (spread over devices when data-parallel), unscale, clip
//! and update, either with the host deciding (eager) or without host reads (what a CUDA graph
//! captures).

use tch::Tensor;

use crate::error::Error;
use crate::measure::phases;
use crate::optim::Optimizer;
use crate::results::phases::StepPhase;
use crate::train::micro_batch::{MicroBatchPass, Totals};
use crate::train::options::StepOptions;
use crate::train::parallel::Parallel;
use crate::train::precision::StepPrecision;
use crate::train::LossScale;
use crate::workloads::Workload;

/// The parts a step runs on: the model, its optimizer, the step options, the precision and how the
/// step is spread over devices.
#[derive(Debug)]
pub struct Step<W: Workload> {
    /// The model being trained (on DataParallel, the master the optimizer updates).
    pub workload: W,
    /// The optimizer over the model's trainable variables.
    pub optimizer: Box<dyn Optimizer>,
    /// Accumulation, clipping, checkpointing and how gradients are cleared.
    pub options: StepOptions,
    /// Autocast, loss scaling and TF32.
    pub precision: StepPrecision,
    /// On one device, as a DDP rank, or as DataParallel.
    pub parallel: Parallel<W>,
}

impl<W: Workload> Step<W> {
    /// Sets the learning rate of the next update (on the device when the optimizer is
    /// capturable).
    pub fn set_lr(&mut self, lr: f64) {
        self.optimizer.set_lr(lr);
    }

    /// The eager step at learning rate `lr`. Under fp16 loss scaling the overflow check is read on
    /// the host to decide whether to step, as `GradScaler.step` does, except with a fused
    /// optimizer, which takes the overflow flag on the device and skips there (no host read), as
    /// `GradScaler` arranges for `fused=True` optimizers. Returns the batch's mean loss and number
    /// of correct predictions, on the device.
    pub fn eager(&mut self, inputs: &Tensor, targets: &Tensor, lr: f64) -> Result<(Tensor, Tensor), Error> {
        phases::enter(StepPhase::Optimizer);
        self.options.clear_grads(self.optimizer.as_mut());
        let (loss, correct) = self.forward_backward(inputs, targets)?;
        phases::enter(StepPhase::Optimizer);
        let on_device = self.optimizer.skips_overflow_on_device();
        let params = self.optimizer.params();
        let mut found_inf = None;
        if let Some(scaler) = self.precision.scaler_mut() {
            if on_device {
                found_inf = Some(scaler.unscale_on_device(params)?.shallow_clone());
            } else if scaler.unscale(params)? {
                scaler.update();
                return Ok((loss, correct));
            }
        }
        self.options.clip(self.optimizer.params())?;
        self.optimizer.set_lr(lr);
        self.optimizer.update(found_inf.as_ref())?;
        if let Some(scaler) = self.precision.scaler_mut() {
            scaler.update();
        }
        Ok((loss, correct))
    }

    /// The step without host reads, at the learning rate already set on the device: what a CUDA
    /// graph captures. Returns as [`Self::eager`] does.
    pub fn device_side(&mut self, inputs: &Tensor, targets: &Tensor) -> Result<(Tensor, Tensor), Error> {
        phases::enter(StepPhase::Optimizer);
        self.options.clear_grads(self.optimizer.as_mut());
        let (loss, correct) = self.forward_backward(inputs, targets)?;
        phases::enter(StepPhase::Optimizer);
        let found_inf = match self.precision.scaler_mut() {
            Some(scaler) => Some(scaler.unscale_on_device(self.optimizer.params())?.shallow_clone()),
            None => None,
        };
        self.options.clip(self.optimizer.params())?;
        self.optimizer.update(found_inf.as_ref())?;
        if let Some(scaler) = self.precision.scaler_mut() {
            scaler.update();
        }
        Ok((loss, correct))
    }

    /// Forward and backward over the batch: split into micro-batches when accumulating, the
    /// parallelism's hook before the first forward pass, each micro-batch run (on this device or
    /// over the replicas) with its loss multiplied by the fp16 loss scale and divided by the
    /// micro-batch count before backward, then the parallelism's hook after the last backward
    /// pass (with DDP the gradients are then averaged over the ranks). Returns the batch's mean
    /// loss (fp32) and number of correct predictions, on the device.
    fn forward_backward(&mut self, inputs: &Tensor, targets: &Tensor) -> Result<(Tensor, Tensor), Error> {
        let micro_batches = self.options.micro_batches(inputs, targets)?;
        let k = micro_batches.len();
        // The fp16 loss scale is a device tensor; 1/k is a number multiplied in, never a tensor
        // made from host data (a host-to-device copy, which a CUDA graph capture cannot hold).
        let loss_scale = LossScale { scaler: self.precision.loss_scale(), factor: 1.0 / k as f64 };
        let pass = MicroBatchPass {
            autocast: self.precision.autocast(),
            label_smoothing: self.options.label_smoothing(),
            checkpointing: self.options.checkpointing(),
        };
        self.parallel.before_forward(&self.workload)?;
        let mut totals = Totals::default();
        for (i, (x, y)) in micro_batches.iter().enumerate() {
            let last = i + 1 == k;
            let (loss, correct) =
                self.parallel.forward_backward(&self.workload, &pass, x, y, &loss_scale, last)?;
            totals.add(loss, correct);
        }
        self.parallel.after_backward(&self.workload)?;
        let (loss_sum, correct) = totals.sums();
        Ok((loss_sum / k as f64, correct))
    }
}
