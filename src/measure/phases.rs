//! Where a training step's time goes. The training code marks where each phase of a step begins
//! (waiting for the batch, the copy to the device, forward, backward, the all-reduce, the optimizer,
//! the metrics); a [`PhaseRecording`] on the same thread stamps each mark, with the host's clock on
//! a CPU (and on a rehearsed GPU) and with CUDA events on the device's current stream on a GPU, and sums the time from
//! each mark to the next into its phase. Without a recording a mark costs one thread-local read,
//! so the marks stay in the code the timed windows run; recordings run in windows of their own.

use std::cell::RefCell;
use std::marker::PhantomData;
use std::time::Instant;

use crate::device::DeviceSpec;
use crate::error::Error;
use crate::ffi::DeviceEvent;
use crate::measure::timer::synchronize;
use crate::results::phases::{PhaseClock, PhaseTime, StepBreakdown, StepPhase};

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
            DeviceSpec::AsIfCuda(_) => {
                crate::standin::record(crate::vocabulary::StandIn::CudaEvents);
                Ok(Stamp::Host(Instant::now()))
            }
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
            DeviceSpec::Cpu | DeviceSpec::Auto | DeviceSpec::AsIfCuda(_) => PhaseClock::Host,
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
        (Stamp::Device(a), Stamp::Device(b)) => Ok(a.elapsed_ms(b)?),
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
