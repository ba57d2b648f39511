//! How a training step is launched: op by op from the host, op by op without host reads, or
//! captured once into a CUDA graph (`cuda-graphs`) and replayed.

use tch::Tensor;

use crate::data::loader::Batch;
use crate::device::DeviceSpec;
use crate::error::Error;
use crate::ffi;
use crate::tricks::{Trick, TrickSet};

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
            (StepLaunch::CudaGraph, DeviceSpec::Cuda(index)) => Launcher::CudaGraph(GraphedStep::new(index)?),
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

/// A step captured into a CUDA graph: the graph, the warm-up before its capture, and the captured
/// step's tensors once captured.
#[derive(Debug)]
pub struct GraphedStep {
    graph: ffi::CudaGraph,
    /// Keeps autocast's cache off while the graph is in use, restoring it when dropped: casts must
    /// be captured as kernels, not served from a cache the graph does not own.
    _autocast_cache_off: ffi::AutocastCacheOff,
    warmup_steps_done: usize,
    captured: Option<CapturedStep>,
}

impl GraphedStep {
    /// An empty graph for CUDA device `device_index`, nothing warmed up or captured yet.
    fn new(device_index: usize) -> Result<Self, Error> {
        let graph = ffi::CudaGraph::new(device_index)?;
        Ok(Self {
            graph,
            _autocast_cache_off: ffi::AutocastCacheOff::new(),
            warmup_steps_done: 0,
            captured: None,
        })
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
            return self.graph.on_side_stream(|| run(&batch.inputs, &batch.targets));
        }
        let step = match self.captured.take() {
            Some(mut step) => {
                step.load(batch)?;
                step
            }
            None => {
                let inputs = batch.inputs.copy();
                let targets = batch.targets.copy();
                let (loss, correct) = self.graph.capture(|| run(&inputs, &targets))?;
                CapturedStep { inputs, targets, loss, correct }
            }
        };
        self.graph.replay()?;
        let outputs = (step.loss.shallow_clone(), step.correct.shallow_clone());
        self.captured = Some(step);
        Ok(outputs)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
