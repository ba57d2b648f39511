//! The engines a cell trains on, behind one trait. The plan, the session and the cell process
//! know an engine only through [`CellEngine`]: what it keeps running for a whole run, and the
//! measurement one cell process returns. [`cell_engine`] finds an engine by its id. Every engine
//! runs every kind of cell.
//!
//! [`libtorch`] is trickbench's own training loop (the workloads, the trainer and the optimizers,
//! measured by [`crate::bench::cell`]'s modules); [`pytorch`] drives eager PyTorch from Python.
//! Another engine is one more module implementing [`CellEngine`], its id a variant of
//! [`Engine`] and an arm of [`cell_engine`].

mod libtorch;
pub mod pytorch;

use std::path::Path;

use crate::bench::cell::CellJob;
use crate::distributed::env::DistEnv;
use crate::engine::Engine;
use crate::error::Error;
use crate::measure::host_allocator::HostAllocator;
use crate::results::schema::ProcessMeasurement;

/// What a run asks of an engine.
pub trait CellEngine {
    /// Starts what the engine keeps running for a whole run, with `python` the run's Python and
    /// `allocator` its host allocator, before any cell runs; `None` where it keeps nothing. The
    /// run holds it until it ends.
    fn start_run(&self, python: &Path, allocator: HostAllocator)
        -> Result<Option<Box<dyn RunServer>>, Error>;

    /// Runs the cells of `job` in this process (as a rank of `dist`, when a `ddp` cell runs as
    /// one) and returns what it measured of each, in [`CellJob::members`] order.
    fn run_cell(&self, job: &CellJob, dist: Option<&DistEnv>) -> Result<Vec<ProcessMeasurement>, Error>;
}

/// A process an engine keeps for a whole run, which its cell processes reach on a Unix socket
/// (a job's `pytorch_server`); it stops when dropped.
pub trait RunServer {
    /// The socket a cell process connects to.
    fn socket(&self) -> &Path;
}

/// The engine whose id is `engine`.
pub fn cell_engine(engine: Engine) -> &'static dyn CellEngine {
    match engine {
        Engine::Libtorch => &libtorch::Libtorch,
        Engine::Pytorch => &pytorch::Pytorch,
    }
}
