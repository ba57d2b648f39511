//! What `trickbench env` reports: the system record a run would store, and what a GPU user needs
//! to know of this build and machine (the GPU, NVML, the CUDA paths compiled in, the attention
//! kernels).

use std::io::{self, Write};

use tch::Kind;

use crate::device::DeviceSpec;
use crate::distributed::group;
use crate::ffi;
use crate::measure::energy::MIN_ENERGY_SPAN_S;
use crate::measure::power::energy_counter_status;
use crate::results::system::{git_commit, SystemInfo};
use crate::workloads::gpt::{sdpa_backend, GptConfig};

/// Writes the report for `device` to `out`.
pub fn write_environment(out: &mut impl Write, device: DeviceSpec) -> io::Result<()> {
    let system = SystemInfo::collect(device);
    let show = |v: Option<String>| v.unwrap_or_else(|| "unknown".to_owned());
    writeln!(out, "trickbench       {} (commit {})", env!("CARGO_PKG_VERSION"), show(git_commit()))?;
    writeln!(out, "libtorch         {}", system.libtorch_version)?;
    writeln!(out, "torch threads    {}", system.torch_threads)?;
    match &system.cuda_runtime_version {
        Some(v) => writeln!(out, "CUDA runtime     {v}")?,
        None => writeln!(out, "CUDA             not available (no usable NVIDIA GPU or driver)")?,
    }
    match &system.cudnn_version {
        Some(v) => writeln!(out, "cuDNN            {v}")?,
        None => writeln!(out, "cuDNN            not available")?,
    }
    writeln!(out, "CUDA devices     {}", system.cuda_device_count)?;
    writeln!(out, "default device   {device}")?;
    write_gpu(out, &system, device)?;
    write_build(out)?;
    write_attention(out, device)?;
    let cores = system.cpu_logical_cores;
    writeln!(out, "CPU              {} ({cores} logical cores)", show(system.cpu_model.clone()))?;
    writeln!(out, "memory           {:.1} GiB", system.memory_total_bytes as f64 / (1u64 << 30) as f64)?;
    writeln!(out, "OS               {} (kernel {})", show(system.os.clone()), show(system.kernel.clone()))?;
    writeln!(out, "host             {}", show(system.hostname))
}

/// The GPU as NVML describes it, or why NVML cannot; and how its energy will be measured.
fn write_gpu(out: &mut impl Write, system: &SystemInfo, device: DeviceSpec) -> io::Result<()> {
    match (&system.gpu, &system.gpu_unavailable) {
        (Some(gpu), _) => {
            writeln!(out, "GPU              {} (compute capability {})", gpu.name, gpu.compute_capability)?;
            writeln!(out, "GPU memory       {:.1} GiB", gpu.memory_total_bytes as f64 / (1u64 << 30) as f64)?;
            writeln!(out, "NVIDIA driver    {}", gpu.driver_version)?;
        }
        (None, reason) => {
            writeln!(out, "NVML             {}", reason.as_deref().unwrap_or("no GPU identified"))?
        }
    }
    if device.is_cuda() {
        match energy_counter_status(device) {
            Ok(()) => writeln!(
                out,
                "GPU energy       NVML's energy counter, read before the first timed window and after \
                 the last step of a span of at least {MIN_ENERGY_SPAN_S} s"
            )?,
            Err(reason) => writeln!(
                out,
                "GPU energy       sampled board power over a span of at least {MIN_ENERGY_SPAN_S} s ({reason})"
            )?,
        }
    }
    Ok(())
}

/// Which CUDA-only paths this binary was compiled with.
fn write_build(out: &mut impl Write) -> io::Result<()> {
    let yes_no =
        |b: bool| if b { "compiled in" } else { "not compiled in (CUDA headers missing at build time)" };
    writeln!(out, "CUDA graphs      {}", yes_no(ffi::cuda_graphs_compiled()))?;
    let nccl = group::unavailable_reason().is_none() && group::nccl_compiled();
    writeln!(out, "NCCL (ddp)       {}", yes_no(nccl))?;
    if let Some(reason) = group::unavailable_reason() {
        writeln!(out, "data parallel    unavailable: {reason}")?;
    }
    Ok(())
}

/// The attention backends allowed, and the one `scaled_dot_product_attention` picks for a
/// training step of the shakespeare-char GPT (batch 64) in each precision on `device`.
fn write_attention(out: &mut impl Write, device: DeviceSpec) -> io::Result<()> {
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
    writeln!(out, "SDPA allowed     {}", allowed.join(", "))?;
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
        writeln!(
            out,
            "SDPA {label:<11} {chosen} (shakespeare-char GPT, batch 64, dropout {})",
            config.dropout
        )?;
    }
    Ok(())
}
