//! The contract between the plan and the engines: every case the planner makes is accepted by both
//! engines, on the CPU and on a rehearsal of each GPU class the catalogue tells apart (sm80,
//! sm90, sm100). Each plan (the ablation of every trick, and the leave-one-out of every trick that
//! can be judged by throughput, on ResNet-8 and the 2-layer GPT, both engines) is grouped into
//! processes as a run groups it; each process's job goes to its engine, which reads its case and
//! builds every side of it as the process would, trains nothing, and says of each side whether it
//! accepts it. A side the plan made that an engine refuses fails the test, with the engine's
//! reason: it is a case the first GPU run would have lost.

#[allow(dead_code)]
mod common;

use std::path::Path;

use trickbench::bench::contract::{first_round_jobs, JobSettings, Servers};
use trickbench::bench::design::Design;
use trickbench::bench::plan::{Plan, PlanRequest};
use trickbench::bench::profile::ProfileName;
use trickbench::device::{DeviceSpec, RehearsedGpu};
use trickbench::engine::Engine;
use trickbench::hardware::Hardware;
use trickbench::tricks::{Metric, Trick};
use trickbench::workloads::WorkloadId;

use common::cli::synthetic_cifar;
use common::dirs::{python, temp_dir};

/// The smoke profile's request for `workload` with `tricks` on `device`, both engines, one seed.
fn request(workload: WorkloadId, tricks: &[Trick], device: DeviceSpec) -> PlanRequest {
    let settings = ProfileName::Smoke.settings(workload.family());
    PlanRequest {
        engines: vec![Engine::Libtorch, Engine::Pytorch],
        ..PlanRequest::new(vec![workload], tricks.to_vec(), Hardware::probe(device), &settings)
    }
}

/// The plans of `workload` on `device`: the ablation of every trick (references, swapped
/// references and time-to-accuracy cells among them) and the leave-one-out of every trick judged
/// by throughput.
fn plans(workload: WorkloadId, device: DeviceSpec) -> Vec<(Design, Plan)> {
    let throughput: Vec<Trick> =
        Trick::ALL.iter().copied().filter(|t| t.metric() == Metric::Throughput).collect();
    vec![
        (Design::Ablation, Plan::ablation(&request(workload, &Trick::ALL, device))),
        (Design::LeaveOneOut, Plan::leave_one_out(&request(workload, &throughput, device))),
    ]
}

/// Every side of every process of `workload`'s plans on `device` that an engine refuses, as
/// `device design cell: reason`; and the sides checked.
fn refusals(workload: WorkloadId, device: DeviceSpec, dir: &Path, servers: &Servers) -> (Vec<String>, usize) {
    let settings = JobSettings {
        device,
        profile: ProfileName::Smoke,
        data_dir: dir.join("data"),
        text: Some(dir.join("text.txt")),
        python: python(),
    };
    let mut refused = Vec::new();
    let mut checked = 0;
    for (design, plan) in plans(workload, device) {
        for job in first_round_jobs(&plan, design, &settings) {
            let accepted =
                servers.check(&job).unwrap_or_else(|e| panic!("{device} {design:?} {}: {e}", job.key.id()));
            for (side, verdict) in job.sides().iter().zip(accepted) {
                checked += 1;
                if let Err(why) = verdict {
                    refused.push(format!("{device} {design:?} {}: {why}", side.key.id()));
                }
            }
        }
    }
    (refused, checked)
}

/// Every case of both workloads' plans on `device` is accepted by both engines.
fn holds_on(device: DeviceSpec) {
    let dir = temp_dir();
    synthetic_cifar(dir.path(), "data", 256, 64);
    let text = "First Citizen:\nBefore we proceed any further, hear me speak.\n".repeat(400);
    std::fs::write(dir.path().join("text.txt"), text).unwrap();
    let servers = Servers::start(&python()).unwrap();
    let mut refused = Vec::new();
    for workload in [WorkloadId::Resnet8, WorkloadId::GptMini] {
        let (found, checked) = refusals(workload, device, dir.path(), &servers);
        assert!(checked > 20, "{device} {workload}: only {checked} sides checked");
        refused.extend(found);
    }
    assert!(refused.is_empty(), "cases the plan made that an engine refused:\n{}", refused.join("\n"));
}

#[test]
fn every_case_the_planner_makes_on_the_cpu_is_accepted_by_both_engines() {
    holds_on(DeviceSpec::Cpu);
}

#[test]
fn every_case_the_planner_makes_for_an_sm80_gpu_is_accepted_by_both_engines() {
    holds_on(DeviceSpec::AsIfCuda(RehearsedGpu::Sm80));
}

#[test]
fn every_case_the_planner_makes_for_an_sm90_gpu_is_accepted_by_both_engines() {
    holds_on(DeviceSpec::AsIfCuda(RehearsedGpu::Sm90));
}

#[test]
fn every_case_the_planner_makes_for_an_sm100_gpu_is_accepted_by_both_engines() {
    holds_on(DeviceSpec::AsIfCuda(RehearsedGpu::Sm100));
}

#[test]
fn the_contract_holds_on_every_gpu_class_a_rehearsal_knows() {
    assert_eq!(RehearsedGpu::ALL, [RehearsedGpu::Sm80, RehearsedGpu::Sm90, RehearsedGpu::Sm100]);
}
