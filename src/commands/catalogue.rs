//! `trickbench list` and `trickbench env`.

use anyhow::{Context, Result};

use tch::Kind;

use trickbench::device::{DeviceSpec, Hardware};
use trickbench::distributed::group;
use trickbench::ffi;
use trickbench::measure::power::energy_counter_status;
use trickbench::results::system::{git_commit, SystemInfo};
use trickbench::tricks::{Applicability, Trick};
use trickbench::workloads::gpt::{sdpa_backend, GptConfig};
use trickbench::workloads::{Family, WorkloadId};

use crate::cli::ListArgs;

/// Prints the trick catalogue with applicability on the chosen device.
pub fn list(args: &ListArgs) -> Result<()> {
    let device = args.device.resolve().context("--device")?;
    let hardware = Hardware::probe(device);
    println!("Tricks (what off and on mean in each family's recipe, and where they apply on {device}):\n");
    for trick in Trick::ALL {
        let guide = trick.guide_number().map_or("new".to_owned(), |n| format!("#{n}"));
        println!("{:<18} guide {guide:<4} metric: {}", trick.id(), trick.metric().label());
        let (cnn, gpt) = (Family::CifarResnet, Family::CharGpt);
        if (trick.off(cnn), trick.on(cnn)) == (trick.off(gpt), trick.on(gpt)) {
            println!("    off: {}", trick.off(cnn));
            println!("    on:  {}", trick.on(cnn));
        } else {
            println!("    off (ResNet): {}", trick.off(cnn));
            println!("    on  (ResNet): {}", trick.on(cnn));
            println!("    off (GPT):    {}", trick.off(gpt));
            println!("    on  (GPT):    {}", trick.on(gpt));
        }
        // One line per family: the first member's reason stands for the family.
        for family in [cnn, gpt] {
            let first = WorkloadId::ALL.into_iter().find(|w| w.family() == family);
            if let Some(workload) = first {
                if let Applicability::NotApplicable(reason) = trick.applicability(workload, &hardware) {
                    println!("    not applicable to {workload} on {device}: {reason}");
                }
            }
        }
        println!();
    }
    Ok(())
}

/// Prints the system record a run would store, and what a GPU user needs to know of this build
/// and machine: the GPU, NVML, the CUDA paths compiled in, the attention kernels.
pub fn env() -> Result<()> {
    let device = DeviceSpec::Auto.resolve()?;
    let system = SystemInfo::collect(device);
    let show = |v: Option<String>| v.unwrap_or_else(|| "unknown".to_owned());
    println!("trickbench       {} (commit {})", env!("CARGO_PKG_VERSION"), show(git_commit()));
    println!("libtorch         {}", system.libtorch_version);
    println!("torch threads    {}", system.torch_threads);
    match system.cuda_runtime_version {
        Some(v) => println!("CUDA runtime     {v}"),
        None => println!("CUDA             not available (no usable NVIDIA GPU or driver)"),
    }
    match system.cudnn_version {
        Some(v) => println!("cuDNN            {v}"),
        None => println!("cuDNN            not available"),
    }
    println!("CUDA devices     {}", system.cuda_device_count);
    println!("default device   {device}");
    print_gpu(&system, device);
    print_build();
    print_attention(device)?;
    println!(
        "CPU              {} ({} logical cores)",
        show(system.cpu_model.clone()),
        system.cpu_logical_cores
    );
    println!("memory           {:.1} GiB", system.memory_total_bytes as f64 / (1u64 << 30) as f64);
    println!("OS               {} (kernel {})", show(system.os.clone()), show(system.kernel.clone()));
    println!("host             {}", show(system.hostname));
    Ok(())
}

/// The GPU as NVML describes it, or why NVML cannot; and how its energy will be measured.
fn print_gpu(system: &SystemInfo, device: DeviceSpec) {
    match (&system.gpu, &system.gpu_unavailable) {
        (Some(gpu), _) => {
            println!("GPU              {} (compute capability {})", gpu.name, gpu.compute_capability);
            println!("GPU memory       {:.1} GiB", gpu.memory_total_bytes as f64 / (1u64 << 30) as f64);
            println!("NVIDIA driver    {}", gpu.driver_version);
        }
        (None, reason) => println!("NVML             {}", reason.as_deref().unwrap_or("no GPU identified")),
    }
    if device.is_cuda() {
        match energy_counter_status(device) {
            Ok(()) => println!("GPU energy       NVML's energy counter, read at each timed window's edges"),
            Err(reason) => println!("GPU energy       sampled board power ({reason})"),
        }
    }
}

/// Which CUDA-only paths this binary was compiled with.
fn print_build() {
    let yes_no =
        |b: bool| if b { "compiled in" } else { "not compiled in (CUDA headers missing at build time)" };
    println!("CUDA graphs      {}", yes_no(ffi::cuda_graphs_compiled()));
    let nccl = if group::unavailable_reason().is_some() { false } else { group::nccl_compiled() };
    println!("NCCL (ddp)       {}", yes_no(nccl));
    if let Some(reason) = group::unavailable_reason() {
        println!("data parallel    unavailable: {reason}");
    }
}

/// The attention backends allowed, and the one `scaled_dot_product_attention` picks for a
/// training step of the shakespeare-char GPT (batch 64) in each precision on `device`.
fn print_attention(device: DeviceSpec) -> Result<()> {
    let sdp = ffi::sdp_enabled();
    let allowed: Vec<&str> = [
        (sdp.flash, "flash"),
        (sdp.memory_efficient, "memory-efficient"),
        (sdp.cudnn, "cudnn"),
        (sdp.math, "math"),
    ]
    .iter()
    .filter_map(|&(on, name)| on.then_some(name))
    .collect();
    println!("SDPA allowed     {}", allowed.join(", "));
    let config = GptConfig::shakespeare(65);
    let kinds = if device.is_cuda() {
        &[(Kind::Float, "fp32"), (Kind::BFloat16, "bf16"), (Kind::Half, "fp16")][..]
    } else {
        &[(Kind::Float, "fp32")][..]
    };
    for &(kind, label) in kinds {
        let chosen = match sdpa_backend(&config, 64, kind, device.tch()) {
            Ok(backend) => backend.id().to_owned(),
            Err(e) => format!("none ({e})"),
        };
        println!("SDPA {label:<11} {chosen} (shakespeare-char GPT, batch 64, dropout {})", config.dropout);
    }
    Ok(())
}
