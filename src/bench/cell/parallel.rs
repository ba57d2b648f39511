//! Which way a cell spreads training over devices, as its tricks ask: one device, a rank of DDP,
//! or DataParallel replicas (how a step then runs is [`crate::train::parallel`]).

use std::rc::Rc;

use super::CellJob;
use crate::device::{cuda_device_count, DeviceSpec};
use crate::distributed::env::DistEnv;
use crate::distributed::group::{ProcessGroup, DEFAULT_BUCKET_BYTES};
use crate::error::Error;
use crate::train::parallel::ParallelPlan;
use crate::tricks::Trick;

/// How the cell `job` spreads training over devices: DDP for `ddp` (as a rank of `dist`, joined
/// here), DataParallel over every CUDA device for its reference cell, else one device.
pub(in crate::bench) fn parallel_plan(
    job: &CellJob,
    dist: Option<&DistEnv>,
    device: DeviceSpec,
) -> Result<ParallelPlan, Error> {
    if job.key.tricks.has(Trick::Ddp) {
        let env = dist.ok_or_else(|| {
            Error::Invalid(
                "a ddp cell runs as one rank of a data-parallel world: RANK, WORLD_SIZE, LOCAL_RANK, \
                 MASTER_ADDR and MASTER_PORT must be set (the cell command sets them for its workers)"
                    .to_owned(),
            )
        })?;
        let group = Rc::new(ProcessGroup::join(env, device)?);
        return Ok(ParallelPlan::Ddp { group, bucket_bytes: DEFAULT_BUCKET_BYTES });
    }
    if job.key.is_reference_for(Trick::Ddp) {
        let gpus = cuda_device_count();
        if !device.is_cuda() || gpus < 2 {
            return Err(Error::Invalid(format!(
                "the data-parallel cell needs ≥ 2 CUDA GPUs; this process has {gpus} and runs on {device}"
            )));
        }
        let master = device.tch();
        let devices = (0..gpus).map(tch::Device::Cuda).filter(|&d| d != master).collect();
        return Ok(ParallelPlan::DataParallel { devices });
    }
    Ok(ParallelPlan::Single)
}
