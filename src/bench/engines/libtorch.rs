//! The libtorch engine: trickbench's own training loop, driven from Rust in the cell process. It
//! builds the cell's workload with its tricks, spreads training over devices as the cell asks, and
//! measures with [`crate::bench::cell`]'s modules: throughput over timed windows (paired with its
//! reference side when it has one), memory, or time to accuracy.

use std::path::Path;

use super::{CellEngine, RunServer};
use crate::bench::cell::data::{planned_steps, CellData};
use crate::bench::cell::measure::{measure, unmeasured, CellContext};
use crate::bench::cell::parallel::parallel_plan;
use crate::bench::cell::{announce, paired, CellJob, Outcome};
use crate::bench::faults;
use crate::bench::user_model::read_description;
use crate::device::DeviceSpec;
use crate::distributed::env::DistEnv;
use crate::error::Error;
use crate::measure::host_allocator::HostAllocator;
use crate::measure::memory;
use crate::results::schema::{CellKey, ProcessMeasurement};
use crate::standin;
use crate::train::parallel::ParallelPlan;
use crate::train::recipe::Recipe;
use crate::train::{apply_process_tricks, apply_switches, Trainer};
use crate::vocabulary::StandIn;
use crate::workloads::build::{gpt_for, resnet_for, scripted_for};
use crate::workloads::{Family, WorkloadId};

/// The libtorch engine.
pub struct Libtorch;

impl CellEngine for Libtorch {
    /// Nothing: each cell process loads libtorch itself.
    fn start_run(
        &self,
        _python: &Path,
        _allocator: HostAllocator,
    ) -> Result<Option<Box<dyn RunServer>>, Error> {
        Ok(None)
    }

    /// A `ddp` cell runs as one rank of `dist` (its CUDA device is the local rank's), its
    /// throughput the sum over the ranks; the `ddp` reference cell (DataParallel) drives every
    /// CUDA device of the machine from this process.
    fn run_cell(&self, job: &CellJob, dist: Option<&DistEnv>) -> Result<Vec<Outcome>, Error> {
        memory::count_cpu_tensors()?;
        if job.device.rehearsed().is_some() {
            standin::record(StandIn::Kernels);
            standin::record(StandIn::DeviceProperties);
        }
        let profile = job.settings();
        let device = match (dist, job.device) {
            (Some(env), DeviceSpec::Cuda(_)) => DeviceSpec::Cuda(env.local_rank),
            (_, device) => device,
        };
        let parallel = parallel_plan(job, dist, device)?;
        let rank = dist.map_or(0, |env| env.rank);
        apply_process_tricks(&job.key, device)?;
        memory::cap_device(device, job.memory_budget_bytes)?;
        // The caching allocator and the libraries' handles and workspaces, made before anything
        // is measured, rather than by whichever call first needs them.
        memory::warm_libraries(device)?;
        let data = CellData::load(job, &profile)?;
        let total_steps = planned_steps(&profile, &data, job.key.batch_size);
        let recipe = Recipe::for_cell(&job.key, &profile.tta, total_steps, job.super_convergence);
        tch::manual_seed(job.key.seed as i64);
        let process = CellContext { job, profile: &profile, recipe: &recipe, data: &data, device, rank };
        measure_workload(&process, parallel)
    }

    /// Each side built as [`check_side`] builds it.
    fn check_cell(&self, job: &CellJob) -> Result<Vec<Result<(), String>>, Error> {
        memory::count_cpu_tensors()?;
        Ok(job.sides().iter().map(|side| check_side(side).map_err(|e| e.to_string())).collect())
    }
}

/// The vocabulary the contract check builds a GPT for: tiny Shakespeare's 65 characters.
const CHECK_VOCABULARY: usize = 65;

/// Whether libtorch's loop accepts the side of `job`: its switches set, its recipe, its network
/// and its trainer built as its process builds them on the job's device (the tensors on the CPU
/// where the device is rehearsed), and what its measurement records of them before any step (its
/// attention kernel); nothing trained.
fn check_side(job: &CellJob) -> Result<(), Error> {
    let key = &job.key;
    let profile = job.settings();
    let steps = profile.tta.planned_steps.unwrap_or(1);
    let recipe = Recipe::for_cell(key, &profile.tta, steps, job.super_convergence);
    let device = job.device;
    apply_switches(key, device)?;
    match key.workload.family() {
        Family::CifarResnet => {
            let trainer =
                Trainer::new(resnet_for(key, &recipe, device.tch())?, &key.tricks, device, &recipe)?;
            unmeasured(job, &trainer).map(drop)
        }
        Family::CharGpt => {
            let gpt = gpt_for(key, CHECK_VOCABULARY, device.tch())?;
            unmeasured(job, &Trainer::new(gpt, &key.tricks, device, &recipe)?).map(drop)
        }
        Family::UserModel => {
            let dir = job.model_dir()?;
            let model = scripted_for(key, dir, &read_description(dir)?, device.tch())?;
            unmeasured(job, &Trainer::new(model, &key.tricks, device, &recipe)?).map(drop)
        }
    }
}

/// Builds the cell's workload in `process` and measures it: paired with its reference side when
/// the cell has one, else alone, spread over devices as `parallel` says.
fn measure_workload(process: &CellContext, parallel: ParallelPlan) -> Result<Vec<Outcome>, Error> {
    let CellContext { job, recipe, device, .. } = *process;
    let reference = job.reference_side();
    if reference.is_none() {
        announce(Some(&job.key.id()));
        faults::inject_into_side(job.key.id().as_str())?;
    }
    match process.data {
        // The user's model: its prepared batches, or CIFAR-10 where it trains to a target.
        _ if job.key.workload == WorkloadId::Model => {
            let dir = job.model_dir()?;
            let model = read_description(dir)?;
            let build = |key: &CellKey, recipe: &Recipe| {
                Trainer::new(scripted_for(key, dir, &model, device.tch())?, &key.tricks, device, recipe)
            };
            match &reference {
                Some(reference) => paired::measure(process, reference, build),
                None => {
                    let trainer = build(&job.key, recipe)?;
                    alone(
                        measure(
                            process,
                            parallel.apply(trainer, |d| scripted_for(&job.key, dir, &model, d))?,
                        ),
                        device,
                    )
                }
            }
        }
        CellData::Images { .. } => {
            let build = |key: &CellKey, recipe: &Recipe| {
                Trainer::new(resnet_for(key, recipe, device.tch())?, &key.tricks, device, recipe)
            };
            match &reference {
                Some(reference) => paired::measure(process, reference, build),
                None => {
                    let trainer = build(&job.key, recipe)?;
                    alone(
                        measure(process, parallel.apply(trainer, |d| resnet_for(&job.key, recipe, d))?),
                        device,
                    )
                }
            }
        }
        CellData::Text { corpus, .. } => {
            // Both sides read the same text, so they share its vocabulary.
            let vocab = corpus.vocab_size();
            let build = |key: &CellKey, recipe: &Recipe| {
                Trainer::new(gpt_for(key, vocab, device.tch())?, &key.tricks, device, recipe)
            };
            match &reference {
                Some(reference) => paired::measure(process, reference, build),
                None => {
                    let trainer = build(&job.key, recipe)?;
                    alone(measure(process, parallel.apply(trainer, |d| gpt_for(&job.key, vocab, d))?), device)
                }
            }
        }
        CellData::Prepared(_) | CellData::Samples(_) => {
            Err(Error::Invalid(format!("{}: that data is the user's model's", job.key.workload)))
        }
    }
}

/// The measurement of a process that measured its one cell alone, as a process's list, with the
/// calls it stood in for on a rehearsed GPU.
fn alone(measurement: Result<ProcessMeasurement, Error>, device: DeviceSpec) -> Result<Vec<Outcome>, Error> {
    let mut measurement = measurement?;
    if device.rehearsed().is_some() {
        measurement.stood_in = standin::taken_by(0);
    }
    Ok(vec![Ok(measurement)])
}
