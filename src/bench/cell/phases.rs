//! The step-phase breakdown of a training-throughput cell: one more window of training steps after
//! the timed ones, with the training code's phase marks recorded ([`crate::measure::phases`]), so
//! that the timed windows never carry a recording.

use super::data::BatchSource;
use super::measure::CellContext;
use crate::error::Error;
use crate::measure::phases::{self, PhaseRecording};
use crate::results::phases::{StepBreakdown, StepPhase};
use crate::results::schema::ProcessMeasurement;
use crate::train::Trainer;
use crate::workloads::Workload;

/// Training steps the breakdown covers at least, however short the profile's windows.
pub(in crate::bench) const MIN_STEPS: usize = 3;

/// Records where the time of one window's worth of training steps (at least [`MIN_STEPS`]) at
/// learning rate `lr` goes, into `measurement`'s step breakdown, or why it could not. Training
/// errors end the cell; a device that cannot time phases only leaves the breakdown out.
pub(super) fn record_breakdown<W: Workload>(
    process: &CellContext,
    trainer: &mut Trainer<W>,
    loader: &mut dyn BatchSource,
    lr: f64,
    measurement: &mut ProcessMeasurement,
) -> Result<(), Error> {
    if trainer.data_parallel_width() > 1 {
        measurement.step_breakdown_unavailable = Some(
            "DataParallel runs each step on several devices' streams, which one device's CUDA events \
             cannot split into phases"
                .to_owned(),
        );
        return Ok(());
    }
    match instrumented_window(process, trainer, loader, lr)? {
        Ok(breakdown) => measurement.step_breakdown = Some(breakdown),
        Err(reason) => measurement.step_breakdown_unavailable = Some(reason.to_string()),
    }
    Ok(())
}

/// The profile's `steps_per_window` training steps (at least [`MIN_STEPS`]) under a phase
/// recording: the outer error is a training step's, the inner one the recording's.
fn instrumented_window<W: Workload>(
    process: &CellContext,
    trainer: &mut Trainer<W>,
    loader: &mut dyn BatchSource,
    lr: f64,
) -> Result<Result<StepBreakdown, Error>, Error> {
    let recording = match PhaseRecording::start(process.device) {
        Ok(recording) => recording,
        Err(reason) => return Ok(Err(reason)),
    };
    let steps = process.profile.steps_per_window.max(MIN_STEPS);
    let mut samples = 0;
    for _ in 0..steps {
        phases::enter(StepPhase::BatchWait);
        let batch = loader.next_batch()?;
        trainer.train_step(&batch, lr)?;
        samples += batch.len();
    }
    Ok(recording.finish(steps, samples))
}
