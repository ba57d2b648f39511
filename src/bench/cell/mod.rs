//! What one cell process does: build the workload with its tricks, then measure throughput over
//! timed windows or train to a target on the held-out set. Runs inside the child process.
//!
//! The process is handed a [`CellJob`] ([`job`]), loads the cell's data ([`data`]), spreads
//! training over devices as the cell asks ([`parallel`]), and measures throughput, memory
//! ([`measure`]) or time to accuracy ([`tta`]), with where a training step's time goes
//! ([`phases`]) and a profiler trace after the timed windows when the job asks for one
//! ([`trace`]).

mod data;
mod job;
mod measure;
mod paired;
mod parallel;
mod phases;
mod prepared;
mod pytorch;
pub mod pytorch_case;
mod pytorch_data;
mod pytorch_server;
mod samples;
mod trace;
mod tta;

use std::time::Instant;

pub use data::{training_inputs, TrainingInputs};
pub use job::CellJob;
pub use measure::PROBE_STEPS;
pub use pytorch_server::PytorchServer;
pub use trace::TRACED_STEPS;

use crate::bench::user_model::read_description;
use crate::device::DeviceSpec;
use crate::distributed::env::DistEnv;
use crate::engine::Engine;
use crate::error::Error;
use crate::measure::memory;
use crate::results::schema::{CellKey, ProcessMeasurement};
use crate::train::recipe::Recipe;
use crate::train::{apply_process_tricks, Trainer};
use crate::workloads::build::{gpt_for, resnet_for, scripted_for};
use crate::workloads::WorkloadId;
use data::{planned_steps, CellData};
use measure::{measure, CellContext};
use parallel::parallel_plan;

/// Runs one cell process and returns what it measured. A `ddp` cell runs as one rank of `dist`
/// (its CUDA device is the local rank's), its throughput the sum over the ranks; the `ddp`
/// reference cell (DataParallel) drives every CUDA device of the machine from this process.
pub fn run(job: &CellJob, dist: Option<&DistEnv>) -> Result<ProcessMeasurement, Error> {
    let started = Instant::now();
    if job.key.engine == Engine::Pytorch {
        let measurement = pytorch::run(job, job.reference_side().as_ref())?;
        return Ok(timed_since(measurement, started));
    }
    memory::count_cpu_tensors()?;
    let profile = job.settings();
    let device = match (dist, job.device) {
        (Some(env), DeviceSpec::Cuda(_)) => DeviceSpec::Cuda(env.local_rank),
        (_, device) => device,
    };
    let parallel = parallel_plan(job, dist, device)?;
    let rank = dist.map_or(0, |env| env.rank);
    apply_process_tricks(&job.key, device)?;
    memory::cap_device(device, job.memory_budget_bytes)?;
    let data = CellData::load(job, &profile)?;
    let total_steps = planned_steps(&profile, &data, job.key.batch_size);
    let recipe = Recipe::for_cell(&job.key, &profile.tta, total_steps, job.super_convergence);
    tch::manual_seed(job.key.seed as i64);
    let process = CellContext { job, profile: &profile, recipe: &recipe, data: &data, device, rank };
    let reference = job.reference_side();
    let measurement = match &data {
        // The user's model: its prepared batches, or CIFAR-10 where it trains to a target.
        _ if job.key.workload == WorkloadId::Model => {
            let dir = job.model_dir()?;
            let model = read_description(dir)?;
            let build = |key: &CellKey, recipe: &Recipe| {
                Trainer::new(scripted_for(key, dir, &model, device.tch())?, &key.tricks, device, recipe)
            };
            let trainer = build(&job.key, &recipe)?;
            match &reference {
                Some(reference) => paired::measure(&process, reference, trainer, build)?,
                None => {
                    measure(&process, parallel.apply(trainer, |d| scripted_for(&job.key, dir, &model, d))?)?
                }
            }
        }
        CellData::Images { .. } => {
            let build = |key: &CellKey, recipe: &Recipe| {
                Trainer::new(resnet_for(key, recipe, device.tch())?, &key.tricks, device, recipe)
            };
            let trainer = build(&job.key, &recipe)?;
            match &reference {
                Some(reference) => paired::measure(&process, reference, trainer, build)?,
                None => measure(&process, parallel.apply(trainer, |d| resnet_for(&job.key, &recipe, d))?)?,
            }
        }
        CellData::Text { corpus, .. } => {
            // Both sides read the same text, so they share its vocabulary.
            let vocab = corpus.vocab_size();
            let build = |key: &CellKey, recipe: &Recipe| {
                Trainer::new(gpt_for(key, vocab, device.tch())?, &key.tricks, device, recipe)
            };
            let trainer = build(&job.key, &recipe)?;
            match &reference {
                Some(reference) => paired::measure(&process, reference, trainer, build)?,
                None => measure(&process, parallel.apply(trainer, |d| gpt_for(&job.key, vocab, d))?)?,
            }
        }
        CellData::Prepared(_) | CellData::Samples(_) => {
            return Err(Error::Invalid(format!("{}: that data is the user's model's", job.key.workload)))
        }
    };
    Ok(timed_since(measurement, started))
}

/// `measurement` with the process's wall seconds since `started`, and the seconds outside its
/// timed windows.
fn timed_since(mut measurement: ProcessMeasurement, started: Instant) -> ProcessMeasurement {
    measurement.wall_s = started.elapsed().as_secs_f64();
    measurement.setup_s = measurement.timed_s.map(|timed| (measurement.wall_s - timed).max(0.0));
    measurement
}
