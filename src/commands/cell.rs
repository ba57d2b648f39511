//! `trickbench cell`: one cell, in its own process, started by `run`.
//!
//! For the fault tests only, the environment variable `TRICKBENCH_FAULT` makes chosen cells fail
//! the way real ones can: a comma-separated list of `KIND@CELL_ID` (or a bare `KIND` for every
//! cell), where KIND is `segv` (dies of SIGSEGV), `abort` (SIGABRT), `hang` (sleeps until the
//! cell timeout or an interrupt stops it), `oom` (allocates 64 MiB tensors through libtorch
//! until an allocation fails; refused unless `run --memory-limit-mib` capped the process) or
//! `error` (ends with an error message and status 1, as a cell whose input is bad does). It is
//! read by this hidden subcommand alone and is not part of the user-facing interface.

use std::time::Duration;

use anyhow::{bail, Context, Result};

use trickbench::bench::cell::{self, CellJob};
use trickbench::distributed::env::DistEnv;
use trickbench::distributed::launch::{launch, LaunchSpec};
use trickbench::results::store;
use trickbench::tricks::Trick;

use crate::cli::CellArgs;

/// The environment variable that injects faults into cell processes (tests only).
const FAULT_VARIABLE: &str = "TRICKBENCH_FAULT";

/// Bytes of each tensor the `oom` fault allocates.
const OOM_CHUNK_BYTES: i64 = 64 << 20;

/// Reads the job, measures, writes the measurement. A `ddp` cell started without the torchrun
/// variables starts one copy of itself per CUDA device as the ranks of a world and waits for
/// them; rank 0 writes the measurement.
pub fn cell(args: &CellArgs) -> Result<()> {
    let text = std::fs::read(&args.job).with_context(|| format!("reading {}", args.job.display()))?;
    let job: CellJob =
        serde_json::from_slice(&text).with_context(|| format!("parsing {}", args.job.display()))?;
    if let Ok(faults) = std::env::var(FAULT_VARIABLE) {
        inject_fault(&faults, &job.key.id())?;
    }
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

/// Fails the way `faults` asks for cell `id`, or returns when it names no fault for it.
fn inject_fault(faults: &str, id: &str) -> Result<()> {
    let kind = faults.split(',').map(str::trim).find_map(|fault| match fault.split_once('@') {
        Some((kind, cell)) => (cell == id).then_some(kind),
        None => Some(fault),
    });
    let Some(kind) = kind else { return Ok(()) };
    eprintln!("{FAULT_VARIABLE}: injecting fault '{kind}' into cell {id}");
    match kind {
        // The default action first: Rust's runtime handles SIGSEGV to report stack overflows.
        // SAFETY: resetting a signal's disposition and sending it to this process touch no memory.
        "segv" => unsafe {
            libc::signal(libc::SIGSEGV, libc::SIG_DFL);
            libc::raise(libc::SIGSEGV);
        },
        "abort" => std::process::abort(),
        "hang" => loop {
            std::thread::sleep(Duration::from_secs(3600));
        },
        "oom" => exhaust_memory()?,
        "error" => bail!("{FAULT_VARIABLE}: the injected error of cell {id}"),
        other => bail!("{FAULT_VARIABLE}: unknown fault '{other}' (valid: segv, abort, hang, oom, error)"),
    }
    bail!("{FAULT_VARIABLE}: fault '{kind}' did not end the process")
}

/// Allocates libtorch tensors until the allocator fails, which returns its error. Only under a
/// finite data-segment limit: without one this would take the whole machine's memory.
fn exhaust_memory() -> Result<()> {
    let mut limit = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
    // SAFETY: getrlimit writes the struct it is given and nothing else.
    let known = unsafe { libc::getrlimit(libc::RLIMIT_DATA, &mut limit) } == 0;
    if !known || limit.rlim_cur == libc::RLIM_INFINITY {
        bail!("{FAULT_VARIABLE}=oom needs a memory cap (run --memory-limit-mib)");
    }
    let mut held = Vec::new();
    loop {
        let tensor = tch::Tensor::f_ones([OOM_CHUNK_BYTES], (tch::Kind::Uint8, tch::Device::Cpu))?;
        held.push(tensor);
    }
}
