//! `trickbench list` and `trickbench env`.

use anyhow::Result;

use trickbench::device::DeviceSpec;
use trickbench::results::system::{git_commit, SystemInfo};
use trickbench::tricks::{Applicability, Trick};
use trickbench::workloads::{Family, WorkloadId};

use crate::cli::ListArgs;

/// Prints the trick catalogue with applicability on the chosen device.
pub fn list(args: &ListArgs) -> Result<()> {
    let device = args.device.parse::<DeviceSpec>()?.resolve()?;
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
                if let Applicability::NotApplicable(reason) = trick.applicability(workload, device) {
                    println!("    not applicable to {workload} on {device}: {reason}");
                }
            }
        }
        println!();
    }
    Ok(())
}

/// Prints the system record a run would store.
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
    if let Some(v) = system.cudnn_version {
        println!("cuDNN            {v}");
    }
    println!("CUDA devices     {}", system.cuda_device_count);
    println!("default device   {device}");
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
