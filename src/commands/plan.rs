//! `trickbench plan`: which tricks of an ablation, and how many rounds, fit a time budget; or what
//! the factorial design costs against it.

use anyhow::{Context, Result};

use trickbench::bench::budget::{fit, price_factorial, ProcessCosts};
use trickbench::bench::design::Design;
use trickbench::bench::plan::PlanRequest;
use trickbench::device::{DeviceSpec, RehearsedGpu};
use trickbench::hardware::Hardware;
use trickbench::results::store;
use trickbench::workloads::WorkloadId;

use crate::cli::PlanArgs;

/// Prints the ablation the flags describe, fitted into `--budget-s`.
pub fn plan(args: &PlanArgs) -> Result<()> {
    if !(args.budget_s.is_finite() && args.budget_s > 0.0) {
        refuse!("--budget-s {}: give a positive number of seconds", args.budget_s);
    }
    if !(args.compile_s.is_finite() && args.compile_s >= 0.0) {
        refuse!("--compile-s {}: give a number of seconds, 0 or more", args.compile_s);
    }
    let device = if args.assume_gpu { DeviceSpec::AsIfCuda(RehearsedGpu::Sm90) } else { args.device };
    let hardware = Hardware::probe(device.resolve().context("--device")?);
    let (profile, _) = args.profile.pick(hardware.device, hardware.cuda_gpus > 0);
    let workloads = args.workload.workloads(profile);
    if workloads.contains(&WorkloadId::Model) {
        refuse!("--workload model: plan the reference workloads; your model's cost depends on what it is");
    }
    let requests: Vec<PlanRequest> = workloads
        .into_iter()
        .map(|workload| PlanRequest {
            time_to_accuracy_batch_size: None,
            engines: args.engine.engines(),
            ..PlanRequest::new(
                vec![workload],
                args.tricks.0.clone(),
                hardware.clone(),
                &profile.settings(workload.family()),
            )
        })
        .collect();
    let max_rounds = args.max_rounds.unwrap_or(profile.settings(requests[0].workloads[0].family()).rounds);
    let on = match hardware.device.rehearsed() {
        Some(gpu) => format!("an assumed {} GPU ({})", gpu.id(), gpu.examples()),
        None => hardware.device.to_string(),
    };
    let (readable, tsv) = match args.design {
        Design::Ablation => {
            let plan = fit(&requests, &costs(args)?, args.budget_s, max_rounds)?;
            (format!("{plan}"), plan.tsv())
        }
        Design::Factorial => {
            let price = price_factorial(&requests, &costs(args)?, args.budget_s, max_rounds)?;
            (format!("{price}"), price.tsv())
        }
        other => refuse!("--design {other}: plan fits the ablation or prices the factorial design"),
    };
    let readable = format!("plan: {} profile on {on}: {readable}", profile.id());
    if args.tsv {
        eprint!("{readable}");
        println!("{tsv}");
    } else {
        print!("{readable}");
    }
    Ok(())
}

/// The cost per process: measured in the --costs-from files, then the --process-s values, with
/// --compile-s for the processes that compile.
fn costs(args: &PlanArgs) -> Result<ProcessCosts> {
    if args.costs_from.is_empty() && args.process_s.is_empty() {
        refuse!("give the cost of a process: --process-s SECONDS, or --costs-from RESULTS (a measured run)");
    }
    let measured = args.costs_from.iter().map(|path| store::load(path)).collect::<Result<Vec<_>, _>>()?;
    let costs =
        args.process_s.iter().fold(ProcessCosts::measured(&measured), |costs, &given| costs.with(given));
    Ok(ProcessCosts { compile_s: args.compile_s, ..costs })
}
