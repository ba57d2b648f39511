//! `trickbench cell`: one cell, in its own process, started by `run`.

use anyhow::{Context, Result};

use trickbench::bench::cell::{self, CellJob};
use trickbench::distributed::env::DistEnv;
use trickbench::distributed::launch::{launch, LaunchSpec};
use trickbench::results::store;
use trickbench::tricks::Trick;

use crate::cli::CellArgs;

/// Reads the job, measures, writes the measurement. A `ddp` cell started without the torchrun
/// variables starts one copy of itself per CUDA device as the ranks of a world and waits for
/// them; rank 0 writes the measurement.
pub fn cell(args: &CellArgs) -> Result<()> {
    let text = std::fs::read(&args.job).with_context(|| format!("reading {}", args.job.display()))?;
    let job: CellJob =
        serde_json::from_slice(&text).with_context(|| format!("parsing {}", args.job.display()))?;
    let dist = DistEnv::from_env()?;
    if job.key.tricks.has(Trick::Ddp) && dist.is_none() {
        let gpus = tch::Cuda::device_count().max(0) as usize;
        if !job.device.is_cuda() || gpus < 2 {
            anyhow::bail!("cell {}: ddp needs ≥ 2 GPUs; this machine has {gpus}", job.key.id());
        }
        let spec = LaunchSpec {
            program: std::env::current_exe().context("finding the trickbench binary")?,
            args: std::env::args_os().skip(1).collect(),
            nproc: gpus,
            master_addr: "127.0.0.1".to_owned(),
            master_port: None,
            env: Vec::new(),
        };
        launch(&spec).with_context(|| format!("cell {}: the DDP ranks", job.key.id()))?;
        return Ok(());
    }
    let measurement = cell::run(&job, dist.as_ref()).with_context(|| format!("cell {}", job.key.id()))?;
    if dist.as_ref().is_none_or(|env| env.rank == 0) {
        store::write_json_atomically(&measurement, &args.output)?;
    }
    Ok(())
}
