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
pub(crate) mod paired;
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
use crate::bench::runner::says_out_of_memory;
use crate::distributed::env::DistEnv;
use crate::error::Error;
use crate::results::schema::{CellId, CellStatus, ProcessMeasurement};

/// What became of one cell of a process: its measurement, or how it ended where it dropped out
/// (its build, warm-up, a window or what follows them failed) while the process went on with its
/// other cells.
pub type Outcome = Result<ProcessMeasurement, CellStatus>;

/// Runs one cell process on the cell's engine ([`cell_engine`]) and returns what became of each
/// of the job's cells ([`CellJob::members`]), the measured ones with their shares of the
/// process's wall seconds; `dist` is the world a `ddp` cell runs as a rank of.
pub fn run(job: &CellJob, dist: Option<&DistEnv>) -> Result<Vec<Outcome>, Error> {
    let started = Instant::now();
    let outcomes = cell_engine(job.key.engine).run_cell(job, dist)?;
    let wall_s = started.elapsed().as_secs_f64();
    Ok(outcomes.into_iter().map(|o| o.map(|m| timed_since(m, wall_s))).collect())
}

/// The start of the line a cell process writes to stderr as it begins work on one of its sides
/// (building it, measuring it alone, finishing it), followed by the side's cell id; or by nothing
/// as it begins the windows that alternate between its sides. The runner reads the last one of a
/// process that died to know which cell's side it died in ([`announce`]).
pub const SIDE_MARKER: &str = "trickbench: working on the side of cell ";

/// Says on stderr that the process begins work on the side of cell `id` alone, or, with `None`,
/// on the windows that alternate between its sides.
pub(in crate::bench) fn announce(id: Option<&CellId>) {
    eprintln!("{SIDE_MARKER}{}", id.map_or("", |id| id.as_str()));
}

/// The status of a cell that dropped out of its process with `error`: not applicable with its
/// reason (a forced attention backend with no kernel), out of memory where the error says an
/// allocation failed, else failed.
pub(in crate::bench) fn dropped_out(error: &Error) -> CellStatus {
    let message = error_chain(error);
    match error {
        Error::NotApplicable(reason) => CellStatus::NotApplicable { reason: reason.clone(), when_run: true },
        _ if matches!(error, Error::OutOfMemory(_)) || says_out_of_memory(&message) => {
            CellStatus::OutOfMemory { error: message, stderr_tail: String::new() }
        }
        _ => CellStatus::Failed {
            error: format!("{message} (the process went on with its other cells)"),
            stderr_tail: String::new(),
        },
    }
}

/// `error` and its causes, joined by ": ".
fn error_chain(error: &Error) -> String {
    let mut message = error.to_string();
    let mut source = std::error::Error::source(error);
    while let Some(cause) = source {
        message = format!("{message}: {cause}");
        source = cause.source();
    }
    message
}

/// `measurement` with its share of the process's `wall_s` (the whole of it for a process of one
/// cell), and the seconds of that share outside its timed windows.
fn timed_since(mut measurement: ProcessMeasurement, wall_s: f64) -> ProcessMeasurement {
    measurement.wall_s = wall_s / measurement.process_cells.max(1) as f64;
    measurement.setup_s = measurement.timed_s.map(|timed| (measurement.wall_s - timed).max(0.0));
    measurement
}
