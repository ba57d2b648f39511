//! How a cell spreads training over devices: one device, a rank of DDP, or DataParallel replicas.

use std::rc::Rc;

use super::CellJob;
use crate::device::DeviceSpec;
use crate::distributed::env::DistEnv;
use crate::distributed::group::{ProcessGroup, DEFAULT_BUCKET_BYTES};
use crate::error::Error;
use crate::train::Trainer;
use crate::tricks::Trick;
use crate::workloads::Workload;

/// How a cell spreads training over devices.
pub(super) enum Parallel {
    /// One process, one device.
    None,
    /// One rank of DDP, in this process group.
    Ddp(Rc<ProcessGroup>),
    /// DataParallel from this process over these further CUDA devices (every one but the cell's).
    Replicas(Vec<tch::Device>),
}

impl Parallel {
    /// What the cell's tricks ask for: DDP for `ddp` (as a rank of `dist`, joined here),
    /// DataParallel over every CUDA device for its reference cell.
    pub(super) fn for_cell(job: &CellJob, dist: Option<&DistEnv>, device: DeviceSpec) -> Result<Self, Error> {
        if job.key.tricks.has(Trick::Ddp) {
            let env = dist.ok_or_else(|| {
                Error::Invalid(
                    "a ddp cell runs as one rank of a data-parallel world: RANK, WORLD_SIZE, LOCAL_RANK, \
                     MASTER_ADDR and MASTER_PORT must be set (the cell command sets them for its workers)"
                        .to_owned(),
                )
            })?;
            return Ok(Parallel::Ddp(Rc::new(ProcessGroup::join(env, device)?)));
        }
        if job.key.is_reference_for(Trick::Ddp) {
            let gpus = tch::Cuda::device_count().max(0) as usize;
            if !device.is_cuda() || gpus < 2 {
                return Err(Error::Invalid(format!(
                    "the data-parallel cell needs ≥ 2 CUDA GPUs; this process has {gpus} and runs on {device}"
                )));
            }
            let master = device.tch();
            let others = (0..gpus).map(tch::Device::Cuda).filter(|&d| d != master).collect();
            return Ok(Parallel::Replicas(others));
        }
        Ok(Parallel::None)
    }

    /// `trainer` spread as asked, building replicas with `build` (a model for a device).
    pub(super) fn apply<W: Workload>(
        self,
        trainer: Trainer<W>,
        build: impl Fn(tch::Device) -> Result<W, Error>,
    ) -> Result<Trainer<W>, Error> {
        match self {
            Parallel::None => Ok(trainer),
            Parallel::Ddp(group) => trainer.with_ddp(group, DEFAULT_BUCKET_BYTES),
            Parallel::Replicas(devices) => {
                let replicas = devices.into_iter().map(build).collect::<Result<Vec<W>, Error>>()?;
                trainer.with_replicas(replicas)
            }
        }
    }
}
