//! The cell process, the child side of the runner: its job read from the file the parent
//! wrote, the DDP ranks it starts when a `ddp` cell runs outside a launcher, the measurement,
//! and the file the parent reads back.

use std::ffi::OsString;
use std::path::{Path, PathBuf};

use crate::bench::cell::{self, CellJob};
use crate::device::cuda_device_count;
use crate::distributed::env::DistEnv;
use crate::distributed::launch::{launch, LaunchSpec};
use crate::error::Error;
use crate::results::store;
use crate::tricks::Trick;

/// Exit status of a cell process whose cell cannot run here, found only when it ran (its error is
/// [`Error::NotApplicable`], printed as the last `error: … not applicable: REASON` line of its
/// stderr): the parent records the cell as not applicable with that reason.
pub const NOT_APPLICABLE_STATUS: u8 = 4;

/// One cell process, as its parent started it.
#[derive(Debug, Clone)]
pub struct CellProcess {
    /// The job file the parent wrote.
    pub job: PathBuf,
    /// Where the measurement goes.
    pub output: PathBuf,
    /// This process's program, which the ranks of a `ddp` cell run again.
    pub program: PathBuf,
    /// This process's arguments, which the ranks are given too.
    pub args: Vec<OsString>,
}

/// Reads the job, measures, writes the measurements (one per cell of the job). A `ddp` cell started without the torchrun
/// variables starts one copy of this process per CUDA device as the ranks of a world and waits
/// for them; rank 0 writes the measurement.
pub fn serve(process: &CellProcess) -> Result<(), Error> {
    let job = read_job(&process.job)?;
    let id = job.key.id();
    let dist = DistEnv::from_env()?;
    if job.key.tricks.has(Trick::Ddp) && dist.is_none() {
        return launch_ranks(process, &job, id.as_str());
    }
    let measurements = cell::run(&job, dist.as_ref()).map_err(|e| e.context(format!("cell {id}")))?;
    if dist.as_ref().is_none_or(|env| env.rank == 0) {
        store::write_json_atomically(&measurements, &process.output)?;
    }
    Ok(())
}

/// The job in `path`.
fn read_job(path: &Path) -> Result<CellJob, Error> {
    let text = std::fs::read(path).map_err(|e| Error::io(path, e))?;
    serde_json::from_slice(&text).map_err(|source| Error::Json { path: path.into(), source })
}

/// Starts the ranks of the `ddp` cell `job` (of id `id`), one per CUDA device, and waits for
/// them.
fn launch_ranks(process: &CellProcess, job: &CellJob, id: &str) -> Result<(), Error> {
    let gpus = cuda_device_count();
    if !job.device.is_cuda() || gpus < 2 {
        return Err(Error::Process(format!("cell {id}: ddp needs ≥ 2 GPUs; this machine has {gpus}")));
    }
    let spec = LaunchSpec {
        program: process.program.clone(),
        args: process.args.clone(),
        nproc: gpus,
        master_addr: "127.0.0.1".to_owned(),
        master_port: None,
        env: Vec::new(),
    };
    launch(&spec).map_err(|e| e.context(format!("cell {id}: the DDP ranks")))
}
