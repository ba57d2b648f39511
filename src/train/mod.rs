//! The generic training loop: one step of forward, loss, backward and optimizer update for any
//! [`Workload`], with the tricks that change how a step runs.

pub mod amp;
pub mod checkpoint;
pub mod data_parallel;
pub mod ddp;
pub mod metrics;
pub mod recipe;

use std::rc::Rc;

use tch::{Kind, Tensor};

use crate::data::loader::Batch;
use crate::device::DeviceSpec;
use crate::distributed::group::ProcessGroup;
use crate::error::Error;
use crate::ffi;
use crate::measure::flops::Precision;
use crate::optim::clip::clip_grad_norm;
use crate::optim::sgd::SgdConfig;
use crate::optim::Optimizer;
use crate::results::schema::CellKey;
use crate::tricks::{Trick, TrickSet};
use crate::workloads::gpt::AttentionBackend;
use crate::workloads::Workload;
use amp::GradScaler;
use data_parallel::Replicas;
use ddp::Ddp;
use metrics::MetricsLog;
use recipe::{OptimizerChoice, Recipe};

/// Steps between metric reads when `avoid-sync` is on.
pub const LOG_INTERVAL_STEPS: usize = 50;

/// Steps run on the side stream before a CUDA graph is captured (as in PyTorch's whole-network
/// capture recipe): cuDNN autotuning, TorchScript profiling and lazy allocations happen in them.
pub const GRAPH_WARMUP_STEPS: usize = 3;

/// What a step does besides forward, backward and update: the optimizer, and the convergence and
/// memory tricks that change the step.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct TrainOptions {
    /// The optimizer (SGD's and Adam's fused kernels are chosen by the `fused-optimizer` trick).
    pub optimizer: OptimizerChoice,
    /// Micro-batches per optimizer step, gradients accumulated (1: the whole batch at once).
    pub micro_batches: usize,
    /// Global gradient norm to clip to, on the device (`None`: no clipping).
    pub clip_max_norm: Option<f64>,
    /// Recompute segments in backward instead of keeping their activations.
    pub checkpointing: bool,
}

impl From<SgdConfig> for TrainOptions {
    /// Plain SGD with `config`: the whole batch at once, no clipping, no checkpointing.
    fn from(config: SgdConfig) -> Self {
        Self {
            optimizer: OptimizerChoice::Sgd { config, fused: false },
            micro_batches: 1,
            clip_max_norm: None,
            checkpointing: false,
        }
    }
}

impl From<&Recipe> for TrainOptions {
    fn from(recipe: &Recipe) -> Self {
        Self {
            optimizer: recipe.optimizer,
            micro_batches: recipe.micro_batches,
            clip_max_norm: recipe.clip_max_norm,
            checkpointing: recipe.checkpointing,
        }
    }
}

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

/// How a training step is launched.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StepLaunch {
    /// Op by op from the host, as eager PyTorch does: the learning rate is a host number and the
    /// fp16 overflow check is a host read that decides whether to step.
    Eager,
    /// The step a CUDA graph captures, launched op by op: the learning rate lives in a device
    /// tensor and an fp16 overflow skips the update on the device, with no host read. Without a
    /// GPU this shows the captured step computes what the eager step computes.
    DeviceSide,
    /// The device-side step captured once into a CUDA graph after [`GRAPH_WARMUP_STEPS`] warm-up
    /// steps on a side stream, then replayed: one launch per step (`cuda-graphs`).
    CudaGraph,
}

impl StepLaunch {
    /// The launch `tricks` ask for.
    pub fn for_tricks(tricks: &TrickSet) -> Self {
        if tricks.has(Trick::CudaGraphs) {
            StepLaunch::CudaGraph
        } else {
            StepLaunch::Eager
        }
    }
}

/// The tensors a captured step reads and writes, which keep their addresses across replays.
#[derive(Debug)]
struct CapturedStep {
    inputs: Tensor,
    targets: Tensor,
    loss: Tensor,
    correct: Tensor,
}

/// Applies the process-wide switches of the cell `key`: cuDNN autotuning (`cudnn-benchmark`), TF32,
/// and anomaly detection (on for `debug-off`'s reference cell). Call once, before building the
/// model.
///
/// TF32 is set explicitly every time. The baseline keeps PyTorch 2.11's defaults, TF32 allowed in
/// cuDNN convolutions and fp32 matmuls at full precision; `tf32` allows it in matmuls too
/// (`torch.set_float32_matmul_precision("high")`); the `strict-fp32` reference cell forbids it in
/// both. The flags are process-wide and harmless on a CPU.
pub fn apply_process_tricks(key: &CellKey, device: DeviceSpec) -> Result<(), Error> {
    if device.is_cuda() {
        tch::Cuda::cudnn_set_benchmark(key.tricks.has(Trick::CudnnBenchmark));
    }
    ffi::set_anomaly_mode(key.is_reference_for(Trick::DebugOff));
    let strict = key.is_reference_for(Trick::Tf32);
    ffi::set_tf32(ffi::Tf32 { matmul: key.tricks.has(Trick::Tf32), cudnn: !strict })
}

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
    fn on(&self, device: tch::Device) -> LossScale {
        LossScale { scaler: self.scaler.as_ref().map(|s| s.to_device(device)), factor: self.factor }
    }

    /// This scale times `factor`.
    fn times(self, factor: f64) -> LossScale {
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

/// Forward pass, loss and backward of `workload` on one micro-batch, with the loss multiplied by
/// `loss_scale` before backward, checkpointed when asked. Under `autocast` (a kind, and
/// whether the device is CUDA) the forward pass runs in it and backward outside it, as PyTorch
/// advises, except that a checkpointed segment is recomputed (and so backpropagated) under
/// autocast, as `torch.utils.checkpoint` recomputes. Returns the mean loss (fp32, detached) and the
/// number of correct predictions, on the device.
fn forward_backward_one<W: Workload>(
    workload: &W,
    inputs: &Tensor,
    targets: &Tensor,
    loss_scale: &LossScale,
    checkpointing: bool,
    autocast: Option<(Kind, bool)>,
) -> Result<(Tensor, Tensor), Error> {
    let enter = || autocast.map(|(kind, on_cuda)| ffi::AutocastGuard::enter(on_cuda, kind)).transpose();
    if checkpointing {
        let _autocast = enter()?;
        return checkpoint::checkpointed_forward_backward(workload, inputs, targets, loss_scale);
    }
    let (loss, correct) = {
        let _autocast = enter()?;
        let outputs = workload.forward(inputs, true);
        let loss = workload.loss(&outputs.to_kind(Kind::Float), targets);
        (loss, workload.correct(&outputs, targets))
    };
    if loss_scale.is_identity() {
        loss.f_backward()?;
    } else {
        loss_scale.apply(&loss).f_backward()?;
    }
    Ok((loss.detach(), correct))
}

/// A model being trained, with its optimizer and the step-level tricks.
#[derive(Debug)]
pub struct Trainer<W: Workload> {
    workload: W,
    optimizer: Box<dyn Optimizer>,
    micro_batches: usize,
    clip_max_norm: Option<f64>,
    checkpointing: bool,
    scaler: Option<GradScaler>,
    autocast: Option<Kind>,
    device: DeviceSpec,
    /// The process's TF32 settings when the trainer was made (see [`apply_process_tricks`]).
    tf32: ffi::Tf32,
    set_grads_to_none: bool,
    metrics: MetricsLog,
    launch: StepLaunch,
    graph: Option<ffi::CudaGraph>,
    /// Keeps autocast's cache off while a CUDA graph is in use, restoring it when dropped.
    _autocast_cache_off: Option<ffi::AutocastCacheOff>,
    warmup_steps_done: usize,
    captured: Option<CapturedStep>,
    ddp: Option<Ddp>,
    replicas: Option<Replicas<W>>,
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
    /// and a binary built with CUDA graph support.
    pub fn with_launch(
        mut workload: W,
        tricks: &TrickSet,
        device: DeviceSpec,
        options: impl Into<TrainOptions>,
        launch: StepLaunch,
    ) -> Result<Self, Error> {
        let mut options = options.into();
        if let OptimizerChoice::Sgd { fused, .. } | OptimizerChoice::Adam { fused, .. } =
            &mut options.optimizer
        {
            *fused |= tricks.has(Trick::FusedOptimizer);
        }
        if options.micro_batches == 0 {
            return Err(Error::Invalid("gradient accumulation needs at least one micro-batch".to_owned()));
        }
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
        let mut optimizer = options.optimizer.build(workload.var_store().trainable_variables());
        if launch != StepLaunch::Eager {
            optimizer.make_capturable();
        }
        let graph = match (launch, device) {
            (StepLaunch::CudaGraph, DeviceSpec::Cuda(index)) => Some(ffi::CudaGraph::new(index)?),
            (StepLaunch::CudaGraph, _) => {
                return Err(Error::Invalid(format!("cuda-graphs: needs a CUDA device, not {device}")))
            }
            _ => None,
        };
        // Casts must be captured as kernels, not served from a cache the graph does not own.
        let autocast_cache_off = graph.is_some().then(ffi::AutocastCacheOff::new);
        Ok(Self {
            _autocast_cache_off: autocast_cache_off,
            launch,
            graph,
            warmup_steps_done: 0,
            captured: None,
            ddp: None,
            replicas: None,
            scaler: tricks.has(Trick::Amp).then(|| GradScaler::new(device.tch())),
            workload,
            optimizer,
            micro_batches: options.micro_batches,
            clip_max_norm: options.clip_max_norm,
            checkpointing: options.checkpointing,
            autocast,
            device,
            tf32: ffi::tf32(),
            set_grads_to_none: tricks.has(Trick::ZeroGradNone),
            metrics: MetricsLog::new(!tricks.has(Trick::AvoidSync), LOG_INTERVAL_STEPS),
        })
    }

    /// Makes this trainer one rank of DDP over `group` (the `ddp` trick): rank 0's weights and
    /// buffers are broadcast now, its buffers again before every forward pass, and gradients are
    /// averaged over the ranks in buckets of at most `bucket_bytes` while backward runs (once per
    /// step when accumulating micro-batches). Not with a CUDA graph launch.
    pub fn with_ddp(mut self, group: Rc<ProcessGroup>, bucket_bytes: usize) -> Result<Self, Error> {
        self.refuse_graphs_with("ddp")?;
        self.ddp = Some(Ddp::new(&self.workload, group, bucket_bytes)?);
        Ok(self)
    }

    /// Makes this trainer drive `replicas` of its model (built like it, one per further device) as
    /// `torch.nn.DataParallel` does (the `ddp` trick's "off" side): each step copies the weights
    /// into them, splits every (micro-)batch over the devices and adds their gradients onto this
    /// model's. Not with a CUDA graph launch.
    pub fn with_replicas(mut self, replicas: Vec<W>) -> Result<Self, Error> {
        self.refuse_graphs_with("data-parallel")?;
        self.replicas = Some(Replicas::new(&self.workload, replicas)?);
        Ok(self)
    }

    /// Fails when the step is launched as a CUDA graph, which `what` cannot go with.
    fn refuse_graphs_with(&self, what: &str) -> Result<(), Error> {
        if self.launch == StepLaunch::CudaGraph {
            return Err(Error::Invalid(format!(
                "{what}: the gradient exchange is driven from the host, which a CUDA graph cannot capture"
            )));
        }
        Ok(())
    }

    /// The number of DDP ranks this trainer is one of (1 without DDP).
    pub fn ddp_world_size(&self) -> usize {
        self.ddp.as_ref().map_or(1, Ddp::world_size)
    }

    /// Whether `flag` holds on any DDP rank (this process's `flag` without DDP): how ranks agree
    /// on decisions taken from their own clocks or statistics, such as whether to time another
    /// window. Every rank must ask, in the same order.
    pub fn any_rank(&self, flag: bool) -> Result<bool, Error> {
        match &self.ddp {
            Some(ddp) => ddp.any(flag),
            None => Ok(flag),
        }
    }

    /// The number of devices DataParallel drives (1 without it).
    pub fn data_parallel_width(&self) -> usize {
        self.replicas.as_ref().map_or(1, Replicas::width)
    }

    /// The number of gradient buckets DDP all-reduces (0 without DDP).
    pub fn ddp_buckets(&self) -> usize {
        self.ddp.as_ref().map_or(0, Ddp::buckets)
    }

    /// One training step at learning rate `lr`: clear gradients, forward and loss (under autocast
    /// when on), backward (loss-scaled for fp16), optimizer update (skipped on fp16 overflow),
    /// launched as [`StepLaunch`] says.
    pub fn train_step(&mut self, batch: &Batch, lr: f64) -> Result<(), Error> {
        let (loss, correct) = match self.launch {
            StepLaunch::Eager => self.eager_step(&batch.inputs, &batch.targets, lr)?,
            StepLaunch::DeviceSide => {
                self.optimizer.set_lr(lr);
                self.device_side_step(&batch.inputs, &batch.targets)?
            }
            StepLaunch::CudaGraph => self.graphed_step(batch, lr)?,
        };
        self.metrics.record(&loss, &correct, batch.len());
        Ok(())
    }

    /// Training steps to run before timing so that the timed steps are the steady state (the
    /// warm-up and the capture of a CUDA graph, plus one replay).
    pub fn steps_before_steady_state(&self) -> usize {
        match self.launch {
            StepLaunch::CudaGraph => GRAPH_WARMUP_STEPS + 2,
            StepLaunch::Eager | StepLaunch::DeviceSide => 1,
        }
    }

    /// Sets the momentum of the next updates (1cycle cycles it): SGD's and LARS's momentum,
    /// Adam's and LAMB's β₁.
    pub fn set_momentum(&mut self, momentum: f64) {
        self.optimizer.set_momentum(momentum);
    }

    /// Forward and backward over the batch, in micro-batches when accumulating, each checkpointed
    /// when on, with the loss multiplied by the fp16 loss scale (and divided by the micro-batch
    /// count) before backward. The forward runs under autocast when on and the backward outside
    /// it, as PyTorch advises, except that a checkpointed segment is recomputed (and so
    /// backpropagated) under autocast, as `torch.utils.checkpoint` recomputes. With DataParallel
    /// replicas each micro-batch is split over them; with DDP the gradients are averaged over the
    /// ranks before this returns. Returns the batch's mean loss (fp32) and number of correct
    /// predictions, on the device.
    fn forward_backward(&mut self, inputs: &Tensor, targets: &Tensor) -> Result<(Tensor, Tensor), Error> {
        let k = self.micro_batches;
        let (input_chunks, target_chunks) = if k > 1 {
            if inputs.size()[0] % k as i64 != 0 {
                return Err(Error::Invalid(format!(
                    "grad-accumulation: a batch of {} samples does not split into {k} equal micro-batches",
                    inputs.size()[0]
                )));
            }
            (inputs.chunk(k as i64, 0), targets.chunk(k as i64, 0))
        } else {
            (vec![inputs.shallow_clone()], vec![targets.shallow_clone()])
        };
        // The fp16 loss scale is a device tensor; 1/k is a number multiplied in, never a tensor
        // made from host data (a host-to-device copy, which a CUDA graph capture cannot hold).
        let loss_scale =
            LossScale { scaler: self.scaler.as_ref().map(GradScaler::factor), factor: 1.0 / k as f64 };
        let autocast = self.autocast.map(|kind| (kind, self.device.is_cuda()));
        let checkpointing = self.checkpointing;
        let one = |workload: &W, x: &Tensor, y: &Tensor, scale: &LossScale| {
            forward_backward_one(workload, x, y, scale, checkpointing, autocast)
        };
        if let Some(ddp) = &mut self.ddp {
            ddp.before_forward()?;
        }
        if let Some(replicas) = &self.replicas {
            replicas.broadcast_from(&self.workload)?;
        }
        let (mut loss_sum, mut correct_sum) = (None::<Tensor>, None::<Tensor>);
        for (i, (x, y)) in input_chunks.iter().zip(&target_chunks).enumerate() {
            if let Some(ddp) = &mut self.ddp {
                ddp.set_sync(i + 1 == k);
            }
            let (loss, correct) = match &self.replicas {
                None => one(&self.workload, x, y, &loss_scale)?,
                Some(replicas) => {
                    let batch = x.size()[0] as f64;
                    let home = x.device();
                    let (mut loss, mut correct) = (None::<Tensor>, None::<Tensor>);
                    let chunks = x
                        .chunk(replicas.width() as i64, 0)
                        .into_iter()
                        .zip(y.chunk(replicas.width() as i64, 0));
                    for (r, (xr, yr)) in chunks.enumerate() {
                        let replica = replicas.get(&self.workload, r);
                        let device = data_parallel::device_of(replica);
                        let share = xr.size()[0] as f64 / batch;
                        let scale = loss_scale.on(device).times(share);
                        let (l, c) = one(replica, &xr.to_device(device), &yr.to_device(device), &scale)?;
                        let l = l.to_device(home) * share;
                        let c = c.to_device(home);
                        loss = Some(loss.map_or_else(|| l.shallow_clone(), |sum| sum + &l));
                        correct = Some(correct.map_or_else(|| c.shallow_clone(), |sum| sum + &c));
                    }
                    (loss.expect("at least one chunk"), correct.expect("at least one chunk"))
                }
            };
            loss_sum = Some(loss_sum.map_or_else(|| loss.shallow_clone(), |sum| sum + &loss));
            correct_sum = Some(correct_sum.map_or_else(|| correct.shallow_clone(), |sum| sum + &correct));
        }
        if let Some(replicas) = &self.replicas {
            replicas.reduce_grads_into(&self.workload)?;
        }
        if let Some(ddp) = &mut self.ddp {
            ddp.finish()?;
        }
        let loss = loss_sum.expect("at least one micro-batch") / k as f64;
        Ok((loss, correct_sum.expect("at least one micro-batch")))
    }

    /// Clips the gradients to the global norm, on the device, when clipping is on.
    fn clip(&self) -> Result<(), Error> {
        if let Some(max_norm) = self.clip_max_norm {
            let _total_norm = clip_grad_norm(self.optimizer.params(), max_norm)?;
        }
        Ok(())
    }

    /// The eager step. Under fp16 loss scaling the overflow check is read on the host to decide
    /// whether to step, as `GradScaler.step` does, except with a fused optimizer, which takes the
    /// overflow flag on the device and skips there (no host read), as `GradScaler` arranges for
    /// `fused=True` optimizers.
    fn eager_step(&mut self, inputs: &Tensor, targets: &Tensor, lr: f64) -> Result<(Tensor, Tensor), Error> {
        self.optimizer.zero_grad(self.set_grads_to_none);
        let (loss, correct) = self.forward_backward(inputs, targets)?;
        let on_device = self.optimizer.skips_overflow_on_device();
        let params = self.optimizer.params();
        let mut found_inf = None;
        if let Some(scaler) = &mut self.scaler {
            if on_device {
                found_inf = Some(scaler.unscale_on_device(params)?.shallow_clone());
            } else if scaler.unscale(params)? {
                scaler.update();
                return Ok((loss, correct));
            }
        }
        self.clip()?;
        self.optimizer.set_lr(lr);
        self.optimizer.update(found_inf.as_ref())?;
        if let Some(scaler) = &mut self.scaler {
            scaler.update();
        }
        Ok((loss, correct))
    }

    /// The step without host reads, at the learning rate already set on the device: what a CUDA
    /// graph captures.
    fn device_side_step(&mut self, inputs: &Tensor, targets: &Tensor) -> Result<(Tensor, Tensor), Error> {
        self.optimizer.zero_grad(self.set_grads_to_none);
        let (loss, correct) = self.forward_backward(inputs, targets)?;
        let found_inf = match &mut self.scaler {
            Some(scaler) => Some(scaler.unscale_on_device(self.optimizer.params())?.shallow_clone()),
            None => None,
        };
        self.clip()?;
        self.optimizer.update(found_inf.as_ref())?;
        if let Some(scaler) = &mut self.scaler {
            scaler.update();
        }
        Ok((loss, correct))
    }

    /// A step of the CUDA graph launch: warm-up steps on the side stream, then one capture (whose
    /// step is run by a first replay), then a copy of the batch into the captured input tensors
    /// and a replay per step. Returns the captured loss and correct-count tensors.
    fn graphed_step(&mut self, batch: &Batch, lr: f64) -> Result<(Tensor, Tensor), Error> {
        let mut graph =
            self.graph.take().ok_or_else(|| Error::Torch("CUDA graph launch without a graph".to_owned()))?;
        let result = self.graphed_step_with(&mut graph, batch, lr);
        self.graph = Some(graph);
        result
    }

    fn graphed_step_with(
        &mut self,
        graph: &mut ffi::CudaGraph,
        batch: &Batch,
        lr: f64,
    ) -> Result<(Tensor, Tensor), Error> {
        self.optimizer.set_lr(lr);
        if self.warmup_steps_done < GRAPH_WARMUP_STEPS {
            self.warmup_steps_done += 1;
            return graph.on_side_stream(|| self.device_side_step(&batch.inputs, &batch.targets));
        }
        let step = match self.captured.take() {
            Some(mut step) => {
                if step.inputs.size() != batch.inputs.size() {
                    return Err(Error::Invalid(format!(
                        "cuda-graphs: the graph was captured for inputs of shape {:?}, not {:?}",
                        step.inputs.size(),
                        batch.inputs.size()
                    )));
                }
                step.inputs.copy_(&batch.inputs);
                step.targets.copy_(&batch.targets);
                step
            }
            None => {
                let inputs = batch.inputs.copy();
                let targets = batch.targets.copy();
                let (loss, correct) = graph.capture(|| self.device_side_step(&inputs, &targets))?;
                CapturedStep { inputs, targets, loss, correct }
            }
        };
        graph.replay()?;
        let outputs = (step.loss.shallow_clone(), step.correct.shallow_clone());
        self.captured = Some(step);
        Ok(outputs)
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

    /// Accuracy and mean loss over every prediction of `batches`, under no-grad or not (see
    /// [`Self::eval_outputs`]); sums stay on the device, with one host read at the end.
    pub fn evaluate(
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
            correct += self.workload.correct(&outputs, &batch.targets);
            let mean_loss = self.workload.loss(&outputs.to_kind(Kind::Float), &batch.targets);
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
        let tf32 = if self.workload.mostly_convolutions() { self.tf32.cudnn } else { self.tf32.matmul };
        if self.autocast.is_some() {
            Precision::Half
        } else if tf32 && self.device.is_cuda() {
            Precision::Tf32
        } else {
            Precision::Fp32
        }
    }

    /// The kernel the model's attention runs as in a training step at `batch_size` samples, with
    /// this trainer's autocast (`None` for a model without attention).
    pub fn attention_backend(&self, batch_size: usize) -> Result<Option<AttentionBackend>, Error> {
        self.workload.attention_backend(self.autocast.unwrap_or(Kind::Float), batch_size)
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
