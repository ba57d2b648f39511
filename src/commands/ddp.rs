//! `trickbench launch` and `trickbench ddp-check`: data-parallel processes on one machine.

use anyhow::{Context, Result};
use tch::Tensor;

use trickbench::device::DeviceSpec;
use trickbench::distributed::check::{self, CheckOptions};
use trickbench::distributed::env::DistEnv;
use trickbench::distributed::launch::{launch as launch_ranks, LaunchSpec};

use crate::cli::{DdpCheckArgs, LaunchArgs};

/// Starts `--nproc-per-node` copies of this binary with the command after `--`.
pub fn launch(args: &LaunchArgs) -> Result<()> {
    let program = std::env::current_exe().context("finding the trickbench binary to launch")?;
    let spec = LaunchSpec {
        program,
        args: args.command.clone(),
        nproc: args.nproc_per_node,
        master_addr: args.master_addr.clone(),
        master_port: args.master_port,
        env: Vec::new(),
    };
    launch_ranks(&spec)?;
    Ok(())
}

/// Refuses to run `command` as one rank of a launcher's world: `run` starts the ranks of each
/// `ddp` cell itself, and its cell processes would otherwise inherit the variables.
pub fn refuse_under_launcher(command: &str) -> Result<()> {
    if let Ok(Some(env)) = DistEnv::from_env() {
        refuse!(
            "{command} is not started under a launcher (RANK={} of WORLD_SIZE={} is set): it starts \
             one process per GPU for each ddp cell itself; launch ddp-check, or unset the variables",
            env.rank,
            env.world_size
        );
    }
    Ok(())
}

/// Trains the check network as this process's rank and reports its checksum.
pub fn check(args: &DdpCheckArgs) -> Result<()> {
    let device = args.device;
    if device == DeviceSpec::Auto {
        refuse!("ddp-check --device: give cpu or cuda");
    }
    let dist = DistEnv::from_env()?;
    let options = CheckOptions {
        steps: args.steps,
        batch_size: args.batch_size,
        bucket_bytes: args.bucket_kib * 1024,
        device,
        fail_rank: args.fail_rank,
    };
    let outcome = check::run(&options, dist.as_ref())?;
    println!(
        "rank {} of {}: {} steps of {} samples, {} gradient buckets, last loss {:.6}, weight checksum {:.9}",
        outcome.rank,
        outcome.world_size,
        args.steps,
        args.batch_size,
        outcome.buckets,
        outcome.last_loss,
        outcome.checksum
    );
    if let (Some(out), 0) = (&args.out, outcome.rank) {
        Tensor::save_multi(&outcome.weights, out).with_context(|| format!("writing {}", out.display()))?;
    }
    Ok(())
}
