//! The generic training loop: one step of forward, loss, backward and optimizer update for any
//! [`Workload`], with the tricks that change how a step runs.

pub mod amp;
pub mod average;
pub mod checkpoint;
pub mod data_parallel;
pub mod ddp;
mod launch;
pub mod metrics;
mod micro_batch;
mod options;
pub mod parallel;
mod precision;
pub mod pytorch_terms;
pub mod recipe;
mod step;

use std::rc::Rc;

use tch::{Kind, Tensor};

use crate::data::loader::Batch;
use crate::device::DeviceSpec;
use crate::distributed::group::ProcessGroup;
use crate::error::Error;
use crate::ffi;
use crate::measure::flops::Precision;
use crate::measure::phases;
use crate::results::phases::StepPhase;
use crate::results::schema::{CellKey, CellKind, Memory, Phase};
use crate::standin;
use crate::tricks::{Trick, TrickSet};
use crate::vocabulary::StandIn;
use crate::workloads::gpt::{sdp_switches, AttentionBackend};
use crate::workloads::Workload;
use average::WeightAverage;
use data_parallel::Replicas;
use ddp::Ddp;
use launch::Launcher;
pub use launch::{StepLaunch, GRAPH_WARMUP_STEPS};
use metrics::MetricsLog;
pub use micro_batch::LossScale;
use options::StepOptions;
pub use options::TrainOptions;
use parallel::Parallel;
use precision::StepPrecision;
use step::Step;

/// Steps between metric reads when `avoid-sync` is on.
pub const LOG_INTERVAL_STEPS: usize = 50;

/// The quality of a model on a held-out set.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Evaluation {
    /// Fraction of predictions that were right (images classified, or next tokens predicted).
    pub accuracy: f64,
    /// Mean cross-entropy per prediction, nats.
    pub mean_loss: f64,
    /// Predictions evaluated (images, or tokens).
    pub predictions: usize,
}

/// Applies the process-wide switches of the cell `key`: cuDNN autotuning (`cudnn-benchmark`), the
/// caching allocator's expandable segments (`expandable-segments`), TF32, anomaly detection (on for
/// `debug-off`'s reference cell) and the `scaled_dot_product_attention` backends (exactly the one a
/// forced-backend trick names, else all of them, PyTorch's default). Call once, before building the
/// model.
///
/// Expandable segments are set explicitly on a CUDA device, on or off, so that a
/// `PYTORCH_ALLOC_CONF` (or `PYTORCH_CUDA_ALLOC_CONF`) in the user's environment cannot change the
/// baseline; its other keys are kept ([`allocator_settings`]). A rehearsed GPU stands in for
/// turning them on.
///
/// TF32 is set explicitly every time. The baseline keeps PyTorch 2.11's defaults, TF32 allowed in
/// cuDNN convolutions and fp32 matmuls at full precision; `tf32` allows it in matmuls too
/// (`torch.set_float32_matmul_precision("high")`); the `strict-fp32` reference cell forbids it in
/// both. The flags are process-wide and harmless on a CPU.
pub fn apply_process_tricks(key: &CellKey, device: DeviceSpec) -> Result<(), Error> {
    let expandable = key.tricks.has(Trick::ExpandableSegments);
    if device.rehearsed().is_some() && expandable {
        crate::standin::record(crate::vocabulary::StandIn::AllocatorSettings);
    }
    if device.cuda_index().is_some() {
        ffi::set_allocator_settings(&allocator_settings(user_allocator_conf().as_deref(), expandable))?;
        if ffi::expandable_segments_enabled() != expandable {
            return Err(Error::Torch(format!(
                "the caching allocator did not take expandable_segments:{}",
                if expandable { "True" } else { "False" }
            )));
        }
    }
    apply_switches(key, device)
}

/// The caching allocator's configuration as the environment gives it to PyTorch 2.11:
/// `PYTORCH_ALLOC_CONF`, else `PYTORCH_CUDA_ALLOC_CONF`.
fn user_allocator_conf() -> Option<String> {
    std::env::var("PYTORCH_ALLOC_CONF").or_else(|_| std::env::var("PYTORCH_CUDA_ALLOC_CONF")).ok()
}

/// The caching allocator's settings for a cell: the keys of the user's configuration `user` (in
/// `PYTORCH_ALLOC_CONF`'s syntax) with any `expandable_segments` key replaced by the cell's mode,
/// `expandable`. The user's other keys are passed on because each parse of the settings resets
/// those it does not name to their defaults. The PyTorch engine builds the same string
/// (`allocator_conf` in `scripts/engine/engine_tricks.py`).
pub fn allocator_settings(user: Option<&str>, expandable: bool) -> String {
    let mode = if expandable { "expandable_segments:True" } else { "expandable_segments:False" };
    let kept = user.unwrap_or_default().split(',').filter(|entry| {
        let key = entry.split(':').next().unwrap_or_default().trim();
        !key.is_empty() && key != "expandable_segments"
    });
    kept.chain([mode]).collect::<Vec<_>>().join(",")
}

/// Sets the switches of the cell `key` that can flip between two windows of one process: cuDNN
/// autotuning, anomaly detection, the `scaled_dot_product_attention` backends and TF32 (see
/// [`apply_process_tricks`], which sets them with the caching allocator's mode). A paired process
/// sets its sides' switches before each of their windows.
pub fn apply_switches(key: &CellKey, device: DeviceSpec) -> Result<(), Error> {
    if device.is_cuda() {
        tch::Cuda::cudnn_set_benchmark(key.tricks.has(Trick::CudnnBenchmark));
    }
    ffi::set_anomaly_mode(key.is_reference_for(Trick::DebugOff));
    ffi::set_sdp_enabled(attention_switches(key, device)?)?;
    let strict = key.is_reference_for(Trick::Tf32);
    Ok(ffi::set_tf32(ffi::Tf32 { matmul: key.tricks.has(Trick::Tf32), cudnn: !strict })?)
}

/// The `scaled_dot_product_attention` backends of the cell `key` on `device`: exactly the one a
/// forced-backend trick names, else all of them; on a rehearsed GPU with the math backend beside a
/// forced one the CPU has no kernel for ([`StandIn::AttentionKernel`]).
fn attention_switches(key: &CellKey, device: DeviceSpec) -> Result<ffi::SdpEnabled, Error> {
    let forced = key.tricks.forced_attention_backend();
    let mut enabled = sdp_switches(forced)?;
    if device.rehearsed().is_some() && forced.is_some_and(|backend| no_cpu_kernel(backend, key)) {
        standin::record(StandIn::AttentionKernel);
        enabled.math = true;
    }
    Ok(enabled)
}

/// Whether the CPU has no kernel for `backend` in the steps of the cell `key`: memory-efficient
/// and cuDNN attention never, FlashAttention not with dropout (in training, where the workload
/// applies it).
fn no_cpu_kernel(backend: AttentionBackend, key: &CellKey) -> bool {
    match backend {
        AttentionBackend::EfficientAttention | AttentionBackend::CudnnAttention => true,
        AttentionBackend::FlashAttention => {
            key.kind != (CellKind::Throughput { phase: Phase::Eval }) && key.workload.trains_with_dropout()
        }
        AttentionBackend::Explicit | AttentionBackend::Math | AttentionBackend::Overrideable => false,
    }
}

/// A model being trained: what its steps compute, how they are launched, and the metrics they
/// record.
#[derive(Debug)]
pub struct Trainer<W: Workload> {
    step: Step<W>,
    launcher: Launcher,
    metrics: MetricsLog,
    device: DeviceSpec,
    /// The weight average evaluated in place of the raw weights (`ema-weights`).
    average: Option<WeightAverage>,
    /// Evaluation logits averaged with the mirrored images' (`flip-tta`).
    flip_tta: bool,
}

impl<W: Workload> Trainer<W> {
    /// Prepares `workload` for training on `device` with `tricks` (moving weights to channels_last
    /// when asked) and `options`, launching steps as the tricks say.
    pub fn new(
        workload: W,
        tricks: &TrickSet,
        device: DeviceSpec,
        options: impl Into<TrainOptions>,
    ) -> Result<Self, Error> {
        Self::with_launch(workload, tricks, device, options, StepLaunch::for_tricks(tricks))
    }

    /// As [`Self::new`], with the step launched as `launch` says. A CUDA graph needs a CUDA device
    /// and a binary built with CUDA graph support. A weight average in `options` starts at the
    /// initial weights (in their final memory format).
    pub fn with_launch(
        mut workload: W,
        tricks: &TrickSet,
        device: DeviceSpec,
        options: impl Into<TrainOptions>,
        launch: StepLaunch,
    ) -> Result<Self, Error> {
        let options = options.into();
        let step_options = StepOptions::new(&options, tricks)?;
        if tricks.has(Trick::ChannelsLast) {
            params_to_channels_last(&mut workload)?;
        }
        let mut optimizer = options.optimizer_under(tricks).build(&workload);
        if launch != StepLaunch::Eager {
            optimizer.make_capturable();
        }
        let launcher = Launcher::new(launch, device)?;
        let average = options
            .weight_average
            .map(|config| WeightAverage::new(workload.var_store(), config))
            .transpose()?;
        let step = Step {
            workload,
            optimizer,
            options: step_options,
            precision: StepPrecision::for_tricks(tricks, device),
            parallel: Parallel::Single,
        };
        let metrics = MetricsLog::new(!tricks.has(Trick::AvoidSync), LOG_INTERVAL_STEPS);
        Ok(Self { step, launcher, metrics, device, average, flip_tta: options.flip_tta })
    }

    /// Makes this trainer one rank of DDP over `group` (the `ddp` trick): rank 0's weights and
    /// buffers are broadcast now, its buffers again before every forward pass, and gradients are
    /// averaged over the ranks in buckets of at most `bucket_bytes` while backward runs (once per
    /// step when accumulating micro-batches). Not with a CUDA graph launch, nor with DataParallel.
    pub fn with_ddp(mut self, group: Rc<ProcessGroup>, bucket_bytes: usize) -> Result<Self, Error> {
        self.refuse_graphs_with("ddp")?;
        self.step.parallel.refuse_second("ddp")?;
        self.step.parallel = Parallel::Ddp(Ddp::new(&self.step.workload, group, bucket_bytes)?);
        Ok(self)
    }

    /// Makes this trainer drive `replicas` of its model (built like it, one per further device) as
    /// `torch.nn.DataParallel` does (the `ddp` trick's "off" side): each step copies the weights
    /// into them, splits every (micro-)batch over the devices and adds their gradients onto this
    /// model's. Not with a CUDA graph launch, nor with DDP.
    pub fn with_replicas(mut self, replicas: Vec<W>) -> Result<Self, Error> {
        self.refuse_graphs_with("data-parallel")?;
        self.step.parallel.refuse_second("data-parallel")?;
        self.step.parallel = Parallel::DataParallel(Replicas::new(&self.step.workload, replicas)?);
        Ok(self)
    }

    /// Fails when the step is launched as a CUDA graph, which `what` cannot go with.
    fn refuse_graphs_with(&self, what: &str) -> Result<(), Error> {
        if self.launcher.kind() == StepLaunch::CudaGraph {
            return Err(Error::Invalid(format!(
                "{what}: the gradient exchange is driven from the host, which a CUDA graph cannot capture"
            )));
        }
        Ok(())
    }

    /// The number of DDP ranks this trainer is one of (1 without DDP).
    pub fn ddp_world_size(&self) -> usize {
        self.step.parallel.ddp_world_size()
    }

    /// Whether `flag` holds on any DDP rank (this process's `flag` without DDP): how ranks agree
    /// on decisions taken from their own clocks or statistics, such as whether to time another
    /// window. Every rank must ask, in the same order.
    pub fn any_rank(&self, flag: bool) -> Result<bool, Error> {
        self.step.parallel.any_rank(flag)
    }

    /// The number of devices DataParallel drives (1 without it).
    pub fn data_parallel_width(&self) -> usize {
        self.step.parallel.data_parallel_width()
    }

    /// The number of gradient buckets DDP all-reduces (0 without DDP).
    pub fn ddp_buckets(&self) -> usize {
        self.step.parallel.ddp_buckets()
    }

    /// One training step at learning rate `lr`: clear gradients, forward and loss (under autocast
    /// when on), backward (loss-scaled for fp16), optimizer update (skipped on fp16 overflow),
    /// launched as [`StepLaunch`] says; then the weight average's update when one is due (outside
    /// a CUDA graph, which leaves the weights where the average reads them).
    pub fn train_step(&mut self, batch: &Batch, lr: f64) -> Result<(), Error> {
        let step = &mut self.step;
        let (loss, correct) = match &mut self.launcher {
            Launcher::Eager => step.eager(&batch.inputs, &batch.targets, lr)?,
            Launcher::DeviceSide => {
                step.set_lr(lr);
                step.device_side(&batch.inputs, &batch.targets)?
            }
            Launcher::CudaGraph(graphed) => {
                step.set_lr(lr);
                phases::enter(StepPhase::GraphReplay);
                graphed.step(batch, |inputs, targets| step.device_side(inputs, targets))?
            }
        };
        if let Some(average) = &mut self.average {
            phases::enter(StepPhase::Optimizer);
            average.after_step()?;
        }
        phases::enter(StepPhase::Metrics);
        self.metrics.record(&loss, &correct, batch.len());
        Ok(())
    }

    /// The memory peaks right after the step was captured into a CUDA graph (`None` for a step
    /// not captured, or before its capture): its graph's private pool keeps the step's
    /// activations from then on, which no replay's peak shows.
    pub fn capture_peaks(&self) -> Option<Memory> {
        match &self.launcher {
            Launcher::CudaGraph(graphed) => graphed.capture_peaks(),
            Launcher::Eager | Launcher::DeviceSide => None,
        }
    }

    /// Training steps to run before timing so that the timed steps are the steady state (the
    /// warm-up and the capture of a CUDA graph, plus one replay).
    pub fn steps_before_steady_state(&self) -> usize {
        self.launcher.kind().steps_before_steady_state()
    }

    /// Sets the momentum of the next updates (1cycle cycles it): SGD's and LARS's momentum,
    /// Adam's and LAMB's β₁.
    pub fn set_momentum(&mut self, momentum: f64) {
        self.step.optimizer.set_momentum(momentum);
    }

    /// The model's outputs in evaluation mode, with the weights it holds now; under `flip-tta` the
    /// mean of the outputs of `inputs` and of their horizontal mirror images (two forward passes;
    /// the inputs must be image batches, N × C × H × W). With `no_grad` the forward passes run
    /// under no-grad; without it autograd records a graph, as forgetting `torch.no_grad()` does.
    pub fn eval_outputs(&self, inputs: &Tensor, no_grad: bool) -> Result<Tensor, Error> {
        let _autocast = self.step.precision.enter_autocast()?;
        let mirrored = if self.flip_tta { Some(mirror(inputs)?) } else { None };
        let forward = || {
            let outputs = self.step.workload.forward(inputs, false);
            match &mirrored {
                Some(mirrored) => (outputs + self.step.workload.forward(mirrored, false)) * 0.5,
                None => outputs,
            }
        };
        Ok(if no_grad { tch::no_grad(forward) } else { forward() })
    }

    /// Correct predictions on one evaluation batch (a device tensor); see [`Self::eval_outputs`].
    pub fn eval_batch(&self, batch: &Batch, no_grad: bool) -> Result<Tensor, Error> {
        let outputs = self.eval_outputs(&batch.inputs, no_grad)?;
        Ok(self.step.workload.correct(&outputs, &batch.targets))
    }

    /// Accuracy and mean plain cross-entropy over every prediction of `batches`, under no-grad or
    /// not (see [`Self::eval_outputs`]); sums stay on the device, with one host read at the end.
    /// Under `ema-weights` the weight average is swapped in for the whole pass and the raw weights
    /// back after it, so training continues from them.
    pub fn evaluate(
        &self,
        batches: impl Iterator<Item = Result<Batch, Error>>,
        no_grad: bool,
    ) -> Result<Evaluation, Error> {
        match &self.average {
            Some(average) => average.swapped_in(|| self.evaluate_held_weights(batches, no_grad)),
            None => self.evaluate_held_weights(batches, no_grad),
        }
    }

    /// [`Self::evaluate`] with the weights the model holds now.
    fn evaluate_held_weights(
        &self,
        batches: impl Iterator<Item = Result<Batch, Error>>,
        no_grad: bool,
    ) -> Result<Evaluation, Error> {
        let device = self.device.tch();
        let mut correct = Tensor::zeros([], (Kind::Int64, device));
        let mut loss_sum = Tensor::zeros([], (Kind::Double, device));
        let mut predictions = 0usize;
        for batch in batches {
            let batch = batch?;
            let outputs = self.eval_outputs(&batch.inputs, no_grad)?;
            correct += self.step.workload.correct(&outputs, &batch.targets);
            let mean_loss = self.step.workload.loss(&outputs.to_kind(Kind::Float), &batch.targets);
            loss_sum += mean_loss.detach().to_kind(Kind::Double) * batch.len() as f64;
            predictions += batch.len();
        }
        if predictions == 0 {
            return Err(Error::Invalid("evaluation: the held-out set yielded no batch".to_owned()));
        }
        let n = predictions as f64;
        Ok(Evaluation {
            accuracy: correct.int64_value(&[]) as f64 / n,
            mean_loss: loss_sum.double_value(&[]) / n,
            predictions,
        })
    }

    /// The arithmetic most of the model's FLOPs run in: half precision under autocast; on a GPU
    /// TF32 where the library doing most of the work allows it (cuDNN for a convolutional model,
    /// where PyTorch allows TF32 by default; cuBLAS for matmuls, where only `tf32` allows it);
    /// else fp32.
    pub fn precision(&self) -> Precision {
        self.step.precision.of_flops(self.step.workload.mostly_convolutions())
    }

    /// The kernel the model's attention runs as in a training step at `batch_size` samples, with
    /// this trainer's autocast (`None` for a model without attention).
    pub fn attention_backend(&self, batch_size: usize) -> Result<Option<AttentionBackend>, Error> {
        self.step.workload.attention_backend(self.step.precision.compute_kind(), batch_size)
    }

    /// The training metrics so far.
    pub fn metrics_mut(&mut self) -> &mut MetricsLog {
        &mut self.metrics
    }

    /// The workload being trained.
    pub fn workload(&self) -> &W {
        &self.step.workload
    }

    /// The weight average evaluated in place of the raw weights, under `ema-weights`.
    pub fn weight_average(&self) -> Option<&WeightAverage> {
        self.average.as_ref()
    }
}

/// The horizontal mirror images of a batch of images (N × C × H × W), for `flip-tta`.
fn mirror(inputs: &Tensor) -> Result<Tensor, Error> {
    if inputs.dim() != 4 {
        return Err(Error::Invalid(format!(
            "flip-tta mirrors batches of images (N × C × H × W); these inputs have shape {:?}",
            inputs.size()
        )));
    }
    Ok(inputs.f_flip([3])?)
}

/// Converts `workload`'s 4-d parameters (convolution weights) to channels_last (`channels-last`).
fn params_to_channels_last<W: Workload>(workload: &mut W) -> Result<(), Error> {
    for (_, mut var) in workload.var_store_mut().variables() {
        if var.dim() == 4 {
            ffi::param_to_channels_last(&mut var)?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::allocator_settings;

    #[test]
    fn the_cells_allocator_mode_replaces_the_users_and_keeps_the_users_other_keys() {
        assert_eq!(allocator_settings(None, false), "expandable_segments:False");
        assert_eq!(allocator_settings(Some(""), true), "expandable_segments:True");
        assert_eq!(allocator_settings(Some("expandable_segments:True"), false), "expandable_segments:False");
        let user = "max_split_size_mb:128, expandable_segments : True,roundup_power2_divisions:[256:1,512:2]";
        assert_eq!(
            allocator_settings(Some(user), false),
            "max_split_size_mb:128,roundup_power2_divisions:[256:1,512:2],expandable_segments:False"
        );
        assert_eq!(
            allocator_settings(Some("garbage_collection_threshold:0.6,"), true),
            "garbage_collection_threshold:0.6,expandable_segments:True"
        );
    }
}
