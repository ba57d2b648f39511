//! A cell process's profiler trace (`run --trace`): after its timed windows, one more step
//! untraced, then [`TRACED_STEPS`] under libtorch's profiler, the trace saved where the job says
//! and its operator table read back from the file into the measurement.

use super::measure::CellContext;
use crate::error::Error;
use crate::measure::trace::{read_trace_record, Profiling};
use crate::results::schema::ProcessMeasurement;

/// Steps (training steps or evaluation batches) recorded under the profiler.
pub const TRACED_STEPS: usize = 3;

/// When the job asks for a trace, runs `step` once, then [`TRACED_STEPS`] times under the
/// profiler, and records the trace in `measurement`. Every DDP rank runs the steps, so that they
/// stay in lock-step; rank 0 alone profiles and writes the file.
pub(super) fn record(
    process: &CellContext,
    measurement: &mut ProcessMeasurement,
    mut step: impl FnMut() -> Result<(), Error>,
) -> Result<(), Error> {
    let Some(target) = process.job.trace_target() else {
        return Ok(());
    };
    step()?;
    let profiling = if process.rank == 0 { Some(Profiling::start(process.device)?) } else { None };
    for _ in 0..TRACED_STEPS {
        step()?;
    }
    let Some(profiling) = profiling else {
        return Ok(());
    };
    let path = target.path();
    profiling.save(&path)?;
    measurement.trace = Some(read_trace_record(&path, &target.file, TRACED_STEPS)?);
    Ok(())
}
