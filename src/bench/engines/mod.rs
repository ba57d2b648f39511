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

use crate::bench::cell::{CellJob, Outcome};
use crate::distributed::env::DistEnv;
use crate::engine::Engine;
use crate::error::Error;
use crate::measure::host_allocator::HostAllocator;

/// What a run asks of an engine.
pub trait CellEngine {
    /// Starts what the engine keeps running for a whole run, with `python` the run's Python and
    /// `allocator` its host allocator, before any cell runs; `None` where it keeps nothing. The
    /// run holds it until it ends.
    fn start_run(&self, python: &Path, allocator: HostAllocator)
        -> Result<Option<Box<dyn RunServer>>, Error>;

    /// Runs the cells of `job` in this process (as a rank of `dist`, when a `ddp` cell runs as
    /// one) and returns what became of each, in [`CellJob::members`] order: its measurement, or
    /// the status of a cell that dropped out while the process went on with the others.
    fn run_cell(&self, job: &CellJob, dist: Option<&DistEnv>) -> Result<Vec<Outcome>, Error>;

    /// Builds every side of `job` (its arms, then its reference, [`CellJob::sides`]) as its
    /// process would, without measuring anything, and says of each whether the engine accepts it
    /// (`Err` with the engine's reason where it refuses it): the contract between the plan and
    /// the engine, which `tests/contract.rs` holds for every case the planner makes.
    fn check_cell(&self, job: &CellJob) -> Result<Vec<Result<(), String>>, Error>;
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
