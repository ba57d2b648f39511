//! The contract between the plan and the engines: every process a plan makes, as the job the
//! runner hands its cell process, and whether each engine accepts each side of it (reads its case
//! and builds it as the process would, nothing trained). `tests/contract.rs` holds it for every
//! case the planner makes, on the CPU and on a rehearsal of each GPU class the catalogue tells
//! apart.

use std::path::PathBuf;

use crate::bench::cell::CellJob;
use crate::bench::design::Design;
use crate::bench::engines::{cell_engine, RunServer};
use crate::bench::plan::{Plan, Slot};
use crate::bench::processes;
use crate::bench::profile::ProfileName;
use crate::device::DeviceSpec;
use crate::engine::Engine;
use crate::error::Error;
use crate::measure::host_allocator::HostAllocator;

/// What every job of a contract check shares: where its cells run and what they read.
#[derive(Debug, Clone)]
pub struct JobSettings {
    /// The device the cells run on.
    pub device: DeviceSpec,
    /// The profile whose settings apply.
    pub profile: ProfileName,
    /// The CIFAR-10 binary files' folder.
    pub data_dir: PathBuf,
    /// The GPT's text file.
    pub text: Option<PathBuf>,
    /// The Python with torch of the PyTorch engine.
    pub python: PathBuf,
}

/// The job of each process of `plan`'s first round under `design`, grouped into multi-arm
/// processes as a run groups them, paired as the runner pairs them.
pub fn first_round_jobs(plan: &Plan, design: Design, settings: &JobSettings) -> Vec<CellJob> {
    let schedule = plan.schedule(1, 0);
    processes::group(plan, &schedule, design, true)
        .into_iter()
        .filter(|p| !p.is_warmup())
        .map(|p| job(plan, design, &p.arms, p.reference, settings))
        .collect()
}

/// The job of the process of `arms` and `reference` (a slot of the reference cell when the
/// process measures it).
fn job(
    plan: &Plan,
    design: Design,
    arms: &[Slot],
    reference: Option<Slot>,
    settings: &JobSettings,
) -> CellJob {
    let slot = arms[0];
    let key = plan.cells[slot.cell].key.clone();
    CellJob {
        round: slot.round,
        text: settings.text.clone(),
        super_convergence: design.trains_super_convergence(),
        paired_with: plan.paired_reference(slot.cell, design),
        arms: arms[1..].iter().map(|s| plan.cells[s.cell].key.clone()).collect(),
        measures_reference: reference.is_some(),
        python: Some(settings.python.clone()),
        ..CellJob::new(key, settings.device, settings.profile, settings.data_dir.clone())
    }
}

/// What the engines keep running while their sides are checked (the PyTorch engine's fork
/// server), handed to each job.
pub struct Servers {
    pytorch: Option<Box<dyn RunServer>>,
}

impl Servers {
    /// Starts the PyTorch engine's fork server with `python`.
    pub fn start(python: &std::path::Path) -> Result<Servers, Error> {
        Ok(Servers { pytorch: cell_engine(Engine::Pytorch).start_run(python, HostAllocator::Tuned)? })
    }

    /// Whether each side of `job` ([`CellJob::sides`]) is accepted by its engine: `Err` with the
    /// engine's reason where it refuses it.
    pub fn check(&self, job: &CellJob) -> Result<Vec<Result<(), String>>, Error> {
        let job =
            CellJob { pytorch_server: self.pytorch.as_ref().map(|s| s.socket().to_owned()), ..job.clone() };
        cell_engine(job.key.engine).check_cell(&job)
    }
}
