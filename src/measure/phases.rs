//! Where a training step's time goes. The training code marks where each phase of a step begins
//! (waiting for the batch, the copy to the device, forward, backward, the all-reduce, the optimizer,
//! the metrics); a [`PhaseRecording`] on the same thread stamps each mark, with the host's clock on
//! a CPU and with CUDA events on the device's current stream on a GPU, and sums the time from
//! each mark to the next into its phase. Without a recording a mark costs one thread-local read,
//! so the marks stay in the code the timed windows run; recordings run in windows of their own.

use std::cell::RefCell;
use std::marker::PhantomData;
use std::time::Instant;

use serde::{Deserialize, Serialize};

use crate::device::DeviceSpec;
use crate::error::Error;
use crate::ffi::DeviceEvent;
use crate::measure::stats::median;
use crate::measure::timer::synchronize;

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

/// When a mark was made.
enum Stamp {
    Host(Instant),
    Device(DeviceEvent),
}

/// The marks of the recording on this thread.
struct Marks {
    device: DeviceSpec,
    marks: Vec<(StepPhase, Stamp)>,
    /// The first failure to stamp a mark (reported by [`PhaseRecording::finish`]).
    failure: Option<Error>,
}

impl Marks {
    fn stamp(device: DeviceSpec) -> Result<Stamp, Error> {
        match device {
            DeviceSpec::Cuda(index) => Ok(Stamp::Device(DeviceEvent::record(index)?)),
            DeviceSpec::Cpu | DeviceSpec::Auto => Ok(Stamp::Host(Instant::now())),
        }
    }

    fn push(&mut self, phase: StepPhase) {
        match Self::stamp(self.device) {
            Ok(stamp) => self.marks.push((phase, stamp)),
            Err(e) => {
                self.failure.get_or_insert(e);
            }
        }
    }
}

thread_local! {
    static RECORDING: RefCell<Option<Marks>> = const { RefCell::new(None) };
}

/// Marks that the training step on this thread enters `phase`: the time from here to the next mark
/// belongs to it. Does nothing when no [`PhaseRecording`] is on.
pub fn enter(phase: StepPhase) {
    RECORDING.with_borrow_mut(|recording| {
        if let Some(marks) = recording {
            marks.push(phase);
        }
    });
}

/// The phase marks of this thread's training steps, from [`Self::start`] to [`Self::finish`], and
/// the window's own time, with the device synchronised at its edges.
#[derive(Debug)]
pub struct PhaseRecording {
    device: DeviceSpec,
    started: Instant,
    /// A recording belongs to the thread it was started on.
    _thread: PhantomData<*const ()>,
}

impl PhaseRecording {
    /// Starts recording the marks made on this thread, stamped for `device`, once the work already
    /// queued on it has finished. Fails when a recording is already on, or when `device` is a GPU
    /// that cannot record CUDA events.
    pub fn start(device: DeviceSpec) -> Result<Self, Error> {
        Marks::stamp(device)?;
        RECORDING.with_borrow_mut(|recording| {
            if recording.is_some() {
                return Err(Error::Invalid("a step-phase recording is already on on this thread".to_owned()));
            }
            *recording = Some(Marks { device, marks: Vec::new(), failure: None });
            Ok(())
        })?;
        synchronize(device);
        Ok(PhaseRecording { device, started: Instant::now(), _thread: PhantomData })
    }

    /// Ends the recording of `steps` training steps of `samples` samples in all: each mark's time
    /// up to the next, the last one's up to now, summed per phase and divided by `steps`, and the
    /// window's throughput once the device has finished its work.
    pub fn finish(self, steps: usize, samples: usize) -> Result<StepBreakdown, Error> {
        let marks = RECORDING.take().expect("the recording this value stands for");
        let end = Marks::stamp(self.device);
        synchronize(self.device);
        let seconds = self.started.elapsed().as_secs_f64();
        if let Some(failure) = marks.failure {
            return Err(failure);
        }
        let end = end?;
        let clock = match self.device {
            DeviceSpec::Cuda(_) => PhaseClock::CudaEvents,
            DeviceSpec::Cpu | DeviceSpec::Auto => PhaseClock::Host,
        };
        let mut totals_ms = [0.0; StepPhase::ALL.len()];
        let mut entered = [false; StepPhase::ALL.len()];
        for (i, (phase, stamp)) in marks.marks.iter().enumerate() {
            let next = marks.marks.get(i + 1).map_or(&end, |(_, s)| s);
            let slot = StepPhase::ALL.iter().position(|p| p == phase).expect("every phase is in ALL");
            totals_ms[slot] += elapsed_ms(stamp, next)?;
            entered[slot] = true;
        }
        let per_step = steps.max(1) as f64;
        let phases = StepPhase::ALL
            .into_iter()
            .zip(totals_ms)
            .zip(entered)
            .filter(|(_, entered)| *entered)
            .map(|((phase, total_ms), _)| PhaseTime { phase, mean_ms: total_ms / per_step })
            .collect();
        Ok(StepBreakdown { clock, steps, phases, samples_per_s: samples as f64 / seconds })
    }
}

impl Drop for PhaseRecording {
    fn drop(&mut self) {
        RECORDING.set(None);
    }
}

/// Milliseconds from `from` to the later stamp `to`.
fn elapsed_ms(from: &Stamp, to: &Stamp) -> Result<f64, Error> {
    match (from, to) {
        (Stamp::Host(a), Stamp::Host(b)) => Ok(b.duration_since(*a).as_secs_f64() * 1e3),
        (Stamp::Device(a), Stamp::Device(b)) => a.elapsed_ms(b),
        _ => Err(Error::Invalid("a step-phase recording mixed host and device stamps".to_owned())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn breakdown(clock: PhaseClock, phases: &[(StepPhase, f64)], samples_per_s: f64) -> StepBreakdown {
        StepBreakdown {
            clock,
            steps: 3,
            phases: phases.iter().map(|&(phase, mean_ms)| PhaseTime { phase, mean_ms }).collect(),
            samples_per_s,
        }
    }

    #[test]
    fn marks_are_summed_per_phase_in_step_order_and_divided_by_the_steps() {
        let recording = PhaseRecording::start(DeviceSpec::Cpu).unwrap();
        for _ in 0..2 {
            enter(StepPhase::BatchWait);
            enter(StepPhase::Forward);
            enter(StepPhase::Backward);
            enter(StepPhase::Optimizer);
        }
        let b = recording.finish(2, 64).unwrap();
        assert_eq!(b.clock, PhaseClock::Host);
        let order: Vec<StepPhase> = b.phases.iter().map(|p| p.phase).collect();
        assert_eq!(
            order,
            [StepPhase::BatchWait, StepPhase::Forward, StepPhase::Backward, StepPhase::Optimizer]
        );
        assert!(b.phases.iter().all(|p| p.mean_ms >= 0.0 && p.mean_ms.is_finite()));
        assert_eq!(b.phase_ms(StepPhase::AllReduce), None, "never entered");
        assert_eq!(b.steps, 2);
        assert!(b.samples_per_s > 0.0 && b.samples_per_s.is_finite());
    }

    #[test]
    fn a_mark_without_a_recording_does_nothing_and_recordings_do_not_nest() {
        enter(StepPhase::Forward);
        let recording = PhaseRecording::start(DeviceSpec::Cpu).unwrap();
        let second = PhaseRecording::start(DeviceSpec::Cpu).unwrap_err();
        assert!(second.to_string().contains("already on"), "{second}");
        let b = recording.finish(1, 1).unwrap();
        assert!(b.phases.is_empty(), "the mark before the recording is not in it");
        let again = PhaseRecording::start(DeviceSpec::Cpu).unwrap();
        drop(again);
        PhaseRecording::start(DeviceSpec::Cpu).unwrap().finish(1, 1).unwrap();
    }

    #[test]
    fn a_gpu_recording_needs_cuda_events() {
        if tch::Cuda::is_available() {
            return;
        }
        let e = PhaseRecording::start(DeviceSpec::Cuda(0)).unwrap_err();
        assert!(e.to_string().contains("recording a CUDA event"), "{e}");
        enter(StepPhase::Forward);
    }

    #[test]
    fn the_median_over_processes_is_taken_per_phase_with_missing_phases_as_zero() {
        let (wait, fwd) = (StepPhase::BatchWait, StepPhase::Forward);
        let a = breakdown(PhaseClock::Host, &[(wait, 1.0), (fwd, 10.0)], 100.0);
        let b = breakdown(PhaseClock::Host, &[(fwd, 12.0)], 90.0);
        let c = breakdown(PhaseClock::Host, &[(wait, 3.0), (fwd, 11.0)], 95.0);
        let m = StepBreakdown::median_of(&[&a, &b, &c]).unwrap();
        assert_eq!(m.phase_ms(wait), Some(1.0));
        assert_eq!(m.phase_ms(fwd), Some(11.0));
        assert_eq!((m.steps, m.samples_per_s), (9, 95.0));
        assert_eq!(m.step_ms(), 12.0);
        let gpu = breakdown(PhaseClock::CudaEvents, &[(fwd, 1.0)], 1.0);
        assert_eq!(StepBreakdown::median_of(&[&a, &gpu]), None, "clocks differ");
        assert_eq!(StepBreakdown::median_of(&[]), None);
    }
}
