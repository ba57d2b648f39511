//! The record of where a cell process's training steps spent their time, phase by phase
//! (`measure::phases` records it).

use serde::{Deserialize, Serialize};

use crate::stats::median;

/// A part of a training step, in the order a step runs them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum StepPhase {
    /// Getting the next batch on the host: assembling and augmenting it on the training thread, or
    /// waiting for a loader worker to hand one over. On a GPU's timeline, the time the device sat
    /// idle until the host had the batch.
    BatchWait,
    /// The batch to the device and its preprocessing there: the host-to-device copy (through pinned
    /// memory with `pin-memory`), augmentation with `gpu-augment`, the conversion to float,
    /// standardisation and layout.
    HostToDevice,
    /// The forward pass and the loss (every micro-batch's).
    Forward,
    /// Backward (every micro-batch's), with a checkpointed model's recomputation.
    Backward,
    /// Gradient exchange left after backward: DDP's wait for the all-reduce that did not overlap
    /// backward, and its broadcast of buffers before the forward pass.
    AllReduce,
    /// Clearing gradients, unscaling and clipping them, and the optimizer's update.
    Optimizer,
    /// Recording the step's loss and accuracy, with the host read of them unless `avoid-sync`
    /// defers it.
    Metrics,
    /// Copying the batch into a CUDA graph's static inputs and replaying the captured forward,
    /// backward and update, which cannot be told apart inside the graph.
    GraphReplay,
}

impl StepPhase {
    /// Every phase, in the order a step runs them.
    pub const ALL: [StepPhase; 8] = [
        StepPhase::BatchWait,
        StepPhase::HostToDevice,
        StepPhase::Forward,
        StepPhase::Backward,
        StepPhase::AllReduce,
        StepPhase::Optimizer,
        StepPhase::Metrics,
        StepPhase::GraphReplay,
    ];

    /// A short name for legends and tables.
    pub fn label(self) -> &'static str {
        match self {
            StepPhase::BatchWait => "batch wait",
            StepPhase::HostToDevice => "to device",
            StepPhase::Forward => "forward",
            StepPhase::Backward => "backward",
            StepPhase::AllReduce => "all-reduce",
            StepPhase::Optimizer => "optimizer",
            StepPhase::Metrics => "metrics",
            StepPhase::GraphReplay => "graph replay",
        }
    }
}

/// The clock a breakdown's phases were timed with.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum PhaseClock {
    /// The host's monotonic clock (a CPU device, where every operation runs on the calling thread).
    Host,
    /// CUDA events on the device's current stream: a phase is the stream's time from its mark to
    /// the next, running its kernels or idle waiting for the host.
    CudaEvents,
}

/// The mean time of one phase per step.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct PhaseTime {
    /// The phase.
    pub phase: StepPhase,
    /// Mean time in the phase per recorded step, milliseconds.
    pub mean_ms: f64,
}

/// Where the time of a cell process's recorded training steps went.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StepBreakdown {
    /// How the phases were timed.
    pub clock: PhaseClock,
    /// Training steps recorded.
    pub steps: usize,
    /// Every phase the steps ran, in step order ([`StepPhase::ALL`]), with its mean time per step.
    pub phases: Vec<PhaseTime>,
    /// Throughput of the recorded steps, samples per second, from the host's clock with the device
    /// synchronised at the edges: beside the timed windows' throughput, what the marks cost.
    pub samples_per_s: f64,
}

impl StepBreakdown {
    /// The mean time of a recorded step, the sum of its phases, milliseconds.
    pub fn step_ms(&self) -> f64 {
        self.phases.iter().map(|p| p.mean_ms).sum()
    }

    /// `ms` as a percentage of the mean step ([`Self::step_ms`]; 0 when the step took no time).
    pub fn percent_of_step(&self, ms: f64) -> f64 {
        let step_ms = self.step_ms();
        if step_ms > 0.0 {
            ms / step_ms * 100.0
        } else {
            0.0
        }
    }

    /// The mean time per step in `phase`, milliseconds (`None`: the steps never entered it).
    pub fn phase_ms(&self, phase: StepPhase) -> Option<f64> {
        self.phases.iter().find(|p| p.phase == phase).map(|p| p.mean_ms)
    }

    /// The median over processes of each phase's time and of the throughput, as one breakdown
    /// (`None` without breakdowns, or when they were timed with different clocks). A phase some
    /// processes never entered counts as 0 ms in them.
    pub fn median_of(breakdowns: &[&StepBreakdown]) -> Option<StepBreakdown> {
        let first = breakdowns.first()?;
        if breakdowns.iter().any(|b| b.clock != first.clock) {
            return None;
        }
        let phases = StepPhase::ALL
            .into_iter()
            .filter(|&phase| breakdowns.iter().any(|b| b.phase_ms(phase).is_some()))
            .map(|phase| {
                let times: Vec<f64> = breakdowns.iter().map(|b| b.phase_ms(phase).unwrap_or(0.0)).collect();
                PhaseTime { phase, mean_ms: median(&times).unwrap_or(0.0) }
            })
            .collect();
        let throughputs: Vec<f64> = breakdowns.iter().map(|b| b.samples_per_s).collect();
        Some(StepBreakdown {
            clock: first.clock,
            steps: breakdowns.iter().map(|b| b.steps).sum(),
            phases,
            samples_per_s: median(&throughputs).unwrap_or(0.0),
        })
    }
}
