//! What one cell process does: train the cell on its engine ([`crate::bench::engines`]) and time
//! the process. Runs inside the child process.
//!
//! The process is handed a [`CellJob`] ([`job`]). The libtorch engine loads the cell's data
//! ([`data`]), spreads training over devices as the cell asks ([`parallel`]), and measures
//! throughput, memory ([`measure`]) or time to accuracy ([`tta`]), with where a training step's
//! time goes ([`phases`]) and a profiler trace after the timed windows when the job asks for one
//! ([`trace`]); the PyTorch engine shares the measurement's rules and the data's batches.

pub(super) mod data;
mod job;
pub(super) mod measure;
pub(super) mod paired;
pub(super) mod parallel;
pub(super) mod phases;
mod prepared;
mod samples;
mod trace;
pub(super) mod tta;

use std::time::Instant;

pub use data::{training_inputs, TrainingInputs};
pub use job::CellJob;
pub use measure::PROBE_STEPS;
pub use paired::{rotate, williams_rows};
pub use trace::TRACED_STEPS;

use crate::bench::engines::cell_engine;
use crate::distributed::env::DistEnv;
use crate::error::Error;
use crate::results::schema::ProcessMeasurement;

/// Runs one cell process on the cell's engine ([`cell_engine`]) and returns what it measured of
/// each of the job's cells ([`CellJob::members`]), with their shares of the process's wall
/// seconds; `dist` is the world a `ddp` cell runs as a rank of.
pub fn run(job: &CellJob, dist: Option<&DistEnv>) -> Result<Vec<ProcessMeasurement>, Error> {
    let started = Instant::now();
    let measurements = cell_engine(job.key.engine).run_cell(job, dist)?;
    let wall_s = started.elapsed().as_secs_f64();
    Ok(measurements.into_iter().map(|m| timed_since(m, wall_s)).collect())
}

/// `measurement` with its share of the process's `wall_s` (the whole of it for a process of one
/// cell), and the seconds of that share outside its timed windows.
fn timed_since(mut measurement: ProcessMeasurement, wall_s: f64) -> ProcessMeasurement {
    measurement.wall_s = wall_s / measurement.process_cells.max(1) as f64;
    measurement.setup_s = measurement.timed_s.map(|timed| (measurement.wall_s - timed).max(0.0));
    measurement
}
