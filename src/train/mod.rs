//! The generic training loop: one step of forward, loss, backward and optimizer update for any
//! [`Workload`], with the tricks that change how a step runs.

pub mod amp;
pub mod metrics;

use tch::{Kind, Tensor};

use crate::data::loader::Batch;
use crate::device::DeviceSpec;
use crate::error::Error;
use crate::ffi;
use crate::measure::flops::Precision;
use crate::optim::sgd::{Sgd, SgdConfig};
use crate::tricks::{Trick, TrickSet};
use crate::workloads::Workload;
use amp::GradScaler;
use metrics::MetricsLog;

/// Steps between metric reads when `avoid-sync` is on.
pub const LOG_INTERVAL_STEPS: usize = 50;

/// Applies the tricks that are process-wide switches rather than part of the step (cuDNN
/// autotuning, TF32). Call once, before building the model.
///
/// TF32 is set explicitly both ways, because PyTorch 2.11's defaults differ per library (cuDNN
/// convolutions allow TF32, cuBLAS matmuls do not): off means full fp32 in both, on allows it in
/// both. The flags are process-wide and harmless on a CPU.
pub fn apply_process_tricks(tricks: &TrickSet, device: DeviceSpec) -> Result<(), Error> {
    if device.is_cuda() {
        tch::Cuda::cudnn_set_benchmark(tricks.has(Trick::CudnnBenchmark));
    }
    let tf32 = tricks.has(Trick::Tf32);
    ffi::set_tf32(ffi::Tf32 { matmul: tf32, cudnn: tf32 })
}

/// A model being trained, with its optimizer and the step-level tricks.
#[derive(Debug)]
pub struct Trainer<W: Workload> {
    workload: W,
    optimizer: Sgd,
    scaler: Option<GradScaler>,
    autocast: Option<Kind>,
    device: DeviceSpec,
    tf32: bool,
    set_grads_to_none: bool,
    metrics: MetricsLog,
}

impl<W: Workload> Trainer<W> {
    /// Prepares `workload` for training on `device` with `tricks` (moving weights to channels_last
    /// when asked).
    pub fn new(
        mut workload: W,
        tricks: &TrickSet,
        device: DeviceSpec,
        sgd: SgdConfig,
    ) -> Result<Self, Error> {
        if tricks.has(Trick::ChannelsLast) {
            for (_, mut var) in workload.var_store_mut().variables() {
                if var.dim() == 4 {
                    ffi::param_to_channels_last(&mut var)?;
                }
            }
        }
        let autocast = if tricks.has(Trick::Amp) {
            Some(Kind::Half)
        } else if tricks.has(Trick::AmpBf16) {
            Some(Kind::BFloat16)
        } else {
            None
        };
        let params = workload.var_store().trainable_variables();
        let optimizer =
            if tricks.has(Trick::FusedOptimizer) { Sgd::fused(params, sgd) } else { Sgd::new(params, sgd) };
        Ok(Self {
            scaler: tricks.has(Trick::Amp).then(|| GradScaler::new(device.tch())),
            workload,
            optimizer,
            autocast,
            device,
            tf32: tricks.has(Trick::Tf32) && device.is_cuda(),
            set_grads_to_none: tricks.has(Trick::ZeroGradNone),
            metrics: MetricsLog::new(!tricks.has(Trick::AvoidSync), LOG_INTERVAL_STEPS),
        })
    }

    /// One training step at learning rate `lr`: clear gradients, forward and loss (under autocast
    /// when on), backward (loss-scaled for fp16), optimizer update (skipped on fp16 overflow).
    pub fn train_step(&mut self, batch: &Batch, lr: f64) -> Result<(), Error> {
        self.optimizer.zero_grad(self.set_grads_to_none);
        let (loss, correct) = {
            let _autocast = self
                .autocast
                .map(|kind| ffi::AutocastGuard::enter(self.device.is_cuda(), kind))
                .transpose()?;
            let outputs = self.workload.forward(&batch.inputs, true);
            let loss = self.workload.loss(&outputs.to_kind(Kind::Float), &batch.targets);
            let correct = self.workload.correct(&outputs, &batch.targets);
            (loss, correct)
        };
        match &mut self.scaler {
            Some(scaler) => {
                scaler.scale(&loss).f_backward()?;
                if !scaler.unscale(self.optimizer.params())? {
                    self.optimizer.step(lr)?;
                }
                scaler.update();
            }
            None => {
                loss.f_backward()?;
                self.optimizer.step(lr)?;
            }
        }
        self.metrics.record(&loss, &correct, batch.len());
        Ok(())
    }

    /// The model's outputs in evaluation mode. With `no_grad` the forward pass runs under
    /// no-grad; without it autograd records a graph, as forgetting `torch.no_grad()` does.
    pub fn eval_outputs(&self, inputs: &Tensor, no_grad: bool) -> Result<Tensor, Error> {
        let _autocast =
            self.autocast.map(|kind| ffi::AutocastGuard::enter(self.device.is_cuda(), kind)).transpose()?;
        let forward = || self.workload.forward(inputs, false);
        Ok(if no_grad { tch::no_grad(forward) } else { forward() })
    }

    /// Correct predictions on one evaluation batch (a device tensor); see [`Self::eval_outputs`].
    pub fn eval_batch(&self, batch: &Batch, no_grad: bool) -> Result<Tensor, Error> {
        let outputs = self.eval_outputs(&batch.inputs, no_grad)?;
        Ok(self.workload.correct(&outputs, &batch.targets))
    }

    /// Accuracy over `batches` (one host read at the end).
    pub fn evaluate(
        &self,
        batches: impl Iterator<Item = Result<Batch, Error>>,
        no_grad: bool,
    ) -> Result<f64, Error> {
        let mut correct = Tensor::zeros([], (Kind::Int64, self.device.tch()));
        let mut samples = 0usize;
        for batch in batches {
            let batch = batch?;
            correct += self.eval_batch(&batch, no_grad)?;
            samples += batch.len();
        }
        Ok(if samples == 0 { 0.0 } else { correct.int64_value(&[]) as f64 / samples as f64 })
    }

    /// The arithmetic matmuls and convolutions run in: half precision under autocast, TF32 when
    /// allowed on a GPU, else fp32.
    pub fn precision(&self) -> Precision {
        if self.autocast.is_some() {
            Precision::Half
        } else if self.tf32 {
            Precision::Tf32
        } else {
            Precision::Fp32
        }
    }

    /// The training metrics so far.
    pub fn metrics_mut(&mut self) -> &mut MetricsLog {
        &mut self.metrics
    }

    /// The workload being trained.
    pub fn workload(&self) -> &W {
        &self.workload
    }
}
