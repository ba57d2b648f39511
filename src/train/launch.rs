//! How a training step is launched: op by op from the host, op by op without host reads, or
//! captured once into a CUDA graph (`cuda-graphs`) and replayed; on a rehearsed GPU the graph's
//! warm-up, capture and replays run eagerly in its place ([`StandIn::GraphCapture`]).

use tch::Tensor;

use crate::data::loader::Batch;
use crate::device::DeviceSpec;
use crate::error::Error;
use crate::ffi;
use crate::measure::memory;
use crate::results::schema::Memory;
use crate::standin;
use crate::tricks::{Trick, TrickSet};
use crate::vocabulary::StandIn;

/// Steps run on the side stream before a CUDA graph is captured (as in PyTorch's whole-network
/// capture recipe): cuDNN autotuning, TorchScript profiling and lazy allocations happen in them.
pub const GRAPH_WARMUP_STEPS: usize = 3;

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

    /// Training steps to run before timing so that the timed steps are the steady state (the
    /// warm-up and the capture of a CUDA graph, plus one replay).
    pub fn steps_before_steady_state(self) -> usize {
        match self {
            StepLaunch::CudaGraph => GRAPH_WARMUP_STEPS + 2,
            StepLaunch::Eager | StepLaunch::DeviceSide => 1,
        }
    }
}

/// A trainer's launch, with the CUDA graph and its capture when the step is graphed.
#[derive(Debug)]
pub enum Launcher {
    /// [`StepLaunch::Eager`].
    Eager,
    /// [`StepLaunch::DeviceSide`].
    DeviceSide,
    /// [`StepLaunch::CudaGraph`].
    CudaGraph(GraphedStep),
}

impl Launcher {
    /// The launcher of `launch` on `device`. A CUDA graph needs a CUDA device and a binary built
    /// with CUDA graph support.
    pub fn new(launch: StepLaunch, device: DeviceSpec) -> Result<Self, Error> {
        Ok(match (launch, device) {
            (StepLaunch::Eager, _) => Launcher::Eager,
            (StepLaunch::DeviceSide, _) => Launcher::DeviceSide,
            (StepLaunch::CudaGraph, DeviceSpec::Cuda(_) | DeviceSpec::AsIfCuda(_)) => {
                Launcher::CudaGraph(GraphedStep::new(device)?)
            }
            (StepLaunch::CudaGraph, _) => {
                return Err(Error::Invalid(format!("cuda-graphs: needs a CUDA device, not {device}")))
            }
        })
    }

    /// The launch this launcher carries out.
    pub fn kind(&self) -> StepLaunch {
        match self {
            Launcher::Eager => StepLaunch::Eager,
            Launcher::DeviceSide => StepLaunch::DeviceSide,
            Launcher::CudaGraph(_) => StepLaunch::CudaGraph,
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

impl CapturedStep {
    /// Copies `batch` into the captured input tensors. Fails when its shape is not the one
    /// captured.
    fn load(&mut self, batch: &Batch) -> Result<(), Error> {
        if self.inputs.size() != batch.inputs.size() {
            return Err(Error::Invalid(format!(
                "cuda-graphs: the graph was captured for inputs of shape {:?}, not {:?}",
                self.inputs.size(),
                batch.inputs.size()
            )));
        }
        self.inputs.copy_(&batch.inputs);
        self.targets.copy_(&batch.targets);
        Ok(())
    }
}

/// The graph a step is captured into: CUDA's, or on a rehearsed GPU nothing, the capture and the
/// replays then running the step eagerly on the captured tensors.
#[derive(Debug)]
enum Graph {
    /// A CUDA graph with its side stream.
    Cuda(ffi::CudaGraph),
    /// The stand-in of a rehearsed GPU.
    StandIn,
}

/// A step captured into a CUDA graph: the graph, the warm-up before its capture, the captured
/// step's tensors once captured, and the memory peaks right after the capture.
#[derive(Debug)]
pub struct GraphedStep {
    graph: Graph,
    device: DeviceSpec,
    warmup_steps_done: usize,
    captured: Option<CapturedStep>,
    capture_peaks: Option<Memory>,
}

impl GraphedStep {
    /// An empty graph for `device` (a CUDA device, or a rehearsed one), nothing warmed up or
    /// captured yet.
    fn new(device: DeviceSpec) -> Result<Self, Error> {
        let graph = match device.cuda_index() {
            Some(index) => Graph::Cuda(ffi::CudaGraph::new(index)?),
            None => {
                standin::record(StandIn::GraphCapture);
                Graph::StandIn
            }
        };
        Ok(Self { graph, device, warmup_steps_done: 0, captured: None, capture_peaks: None })
    }

    /// The memory peaks since they were last reset, read right after the capture: the step's
    /// activations, which the graph's private pool keeps for as long as it lives (reserved, not
    /// allocated, so no replay's peak shows them). `None` before the capture.
    pub fn capture_peaks(&self) -> Option<Memory> {
        self.capture_peaks
    }

    /// One step of `batch`, where `run` is the device-side step of some inputs and targets: warm-up
    /// steps on the side stream, then one capture of `run` (whose step is run by a first replay),
    /// then a copy of the batch into the captured input tensors and a replay per step. Returns the
    /// captured loss and correct-count tensors.
    pub fn step(
        &mut self,
        batch: &Batch,
        mut run: impl FnMut(&Tensor, &Tensor) -> Result<(Tensor, Tensor), Error>,
    ) -> Result<(Tensor, Tensor), Error> {
        if self.warmup_steps_done < GRAPH_WARMUP_STEPS {
            self.warmup_steps_done += 1;
            return match &mut self.graph {
                Graph::Cuda(graph) => graph.on_side_stream(|| run(&batch.inputs, &batch.targets)),
                Graph::StandIn => run(&batch.inputs, &batch.targets),
            };
        }
        let (mut step, captured_now) = match self.captured.take() {
            Some(mut step) => {
                step.load(batch)?;
                (step, false)
            }
            None => (self.capture(batch, &mut run)?, true),
        };
        match &mut self.graph {
            Graph::Cuda(graph) => graph.replay()?,
            // The stand-in's capture ran the step already.
            Graph::StandIn if captured_now => {}
            Graph::StandIn => {
                let (loss, correct) = run(&step.inputs, &step.targets)?;
                step.loss.f_copy_(&loss)?;
                step.correct.f_copy_(&correct)?;
            }
        }
        let outputs = (step.loss.shallow_clone(), step.correct.shallow_clone());
        self.captured = Some(step);
        Ok(outputs)
    }

    /// Captures `run` on a copy of `batch`, with autocast's cache off for the capture alone (casts
    /// must be captured as kernels, not served from a cache the graph does not own; the setting is
    /// the thread's, so keeping it off longer would change every other model's autocast steps in
    /// the process), and keeps the peaks right after it.
    fn capture(
        &mut self,
        batch: &Batch,
        run: &mut impl FnMut(&Tensor, &Tensor) -> Result<(Tensor, Tensor), Error>,
    ) -> Result<CapturedStep, Error> {
        let inputs = batch.inputs.copy();
        let targets = batch.targets.copy();
        let cache_off = ffi::AutocastCacheOff::new();
        let (loss, correct) = match &mut self.graph {
            Graph::Cuda(graph) => graph.capture(|| run(&inputs, &targets))?,
            Graph::StandIn => run(&inputs, &targets)?,
        };
        drop(cache_off);
        self.capture_peaks = Some(memory::peaks(self.device)?);
        Ok(CapturedStep { inputs, targets, loss, correct })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A batch of one input and one target.
    fn batch(value: f64) -> Batch {
        Batch {
            inputs: Tensor::from_slice(&[value]).to_kind(tch::Kind::Float),
            targets: Tensor::from_slice(&[0i64]),
        }
    }

    #[test]
    fn a_rehearsed_graph_warms_up_captures_and_replays_eagerly_with_autocasts_cache_on_after() {
        let rehearsal = DeviceSpec::AsIfCuda(crate::device::RehearsedGpu::Sm90);
        let mut graphed = GraphedStep::new(rehearsal).unwrap();
        let cache_before = ffi::autocast_cache_enabled();
        let mut seen = Vec::new();
        for k in 0..GRAPH_WARMUP_STEPS + 3 {
            let (loss, _) = graphed
                .step(&batch(k as f64), |inputs, targets| {
                    seen.push(inputs.double_value(&[0]));
                    Ok((inputs * 2.0, targets.shallow_clone()))
                })
                .unwrap();
            assert_eq!(loss.double_value(&[0]), 2.0 * k as f64, "step {k} computes on its own batch");
            assert_eq!(ffi::autocast_cache_enabled(), cache_before, "step {k}: the cache is as it was");
        }
        assert_eq!(seen.len(), GRAPH_WARMUP_STEPS + 3, "the capture runs the step once, each replay once");
        assert!(graphed.capture_peaks().is_some());
    }

    #[test]
    fn the_peaks_after_the_capture_keep_what_the_capture_allocated() {
        crate::measure::memory::count_cpu_tensors().unwrap();
        let rehearsal = DeviceSpec::AsIfCuda(crate::device::RehearsedGpu::Sm90);
        let mut graphed = GraphedStep::new(rehearsal).unwrap();
        let mut calls = 0;
        for k in 0..GRAPH_WARMUP_STEPS + 2 {
            let _outputs = graphed
                .step(&batch(k as f64), |inputs, targets| {
                    calls += 1;
                    if calls == GRAPH_WARMUP_STEPS + 1 {
                        // The capture's activations: 64 MiB held while the step runs.
                        let activations =
                            Tensor::zeros([16, 1024, 1024], (tch::Kind::Float, tch::Device::Cpu));
                        drop(activations);
                    }
                    Ok((inputs * 1.0, targets.shallow_clone()))
                })
                .unwrap();
        }
        let peaks = graphed.capture_peaks().unwrap();
        assert!(peaks.peak_allocated_bytes.is_some_and(|b| b >= 64 << 20), "{peaks:?}");
    }

    #[test]
    fn a_cuda_graph_launch_needs_a_cuda_device() {
        let refused = Launcher::new(StepLaunch::CudaGraph, DeviceSpec::Cpu).unwrap_err().to_string();
        assert!(refused.contains("cuda-graphs: needs a CUDA device, not cpu"), "{refused}");
        assert_eq!(
            Launcher::new(StepLaunch::DeviceSide, DeviceSpec::Cpu).unwrap().kind(),
            StepLaunch::DeviceSide
        );
    }
}
