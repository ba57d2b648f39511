//! Each design's phases on a fake runner: the probes a design makes and where they stop, the plan
//! it runs from their answers, and the stack ranked by the speed-ups the ablation measured.

#[allow(dead_code)]
mod common;

use trickbench::bench::design::{stack_ranking, Design, Phases};
use trickbench::bench::plan::{Plan, PlanRequest};
use trickbench::bench::profile::ProfileName;
use trickbench::device::{DeviceSpec, Hardware};
use trickbench::error::Error;
use trickbench::results::schema::{CellKind, CellResult, CellStatus, Phase, Results};
use trickbench::tricks::Trick;
use trickbench::workloads::WorkloadId;

use common::cells::{comparison, train_key, KeyWith};
use common::dirs::checkout;
use common::plan::cpu_request;

/// Runs phases instantly: probes fit below `fits_below` and run out of memory from it on, every
/// other cell measures; records each phase's plan and every note.
struct FakePhases {
    results: Results,
    fits_below: usize,
    plans: Vec<Plan>,
    notes: std::cell::RefCell<Vec<String>>,
}

impl FakePhases {
    fn new(results: Results, fits_below: usize) -> Self {
        Self { results, fits_below, plans: Vec::new(), notes: Default::default() }
    }

    /// The batch sizes of the memory probes run, in order.
    fn probed(&self) -> Vec<usize> {
        let probes = self.plans.iter().flat_map(|p| &p.cells).filter(|c| c.key.kind == CellKind::MemoryProbe);
        probes.map(|c| c.key.batch_size).collect()
    }

    fn noted(&self, text: &str) -> bool {
        self.notes.borrow().iter().any(|n| n.contains(text))
    }
}

impl Phases for FakePhases {
    fn run(&mut self, plan: Plan) -> Result<(), Error> {
        for cell in &plan.cells {
            if self.results.cells.iter().any(|c| c.key == cell.key) {
                continue;
            }
            let status = if cell.key.kind == CellKind::MemoryProbe && cell.key.batch_size >= self.fits_below {
                CellStatus::OutOfMemory { error: "out of memory (fake)".into(), stderr_tail: String::new() }
            } else {
                CellStatus::Ok
            };
            self.results.cells.push(CellResult::new(cell.key.clone(), status));
        }
        self.plans.push(plan);
        Ok(())
    }

    fn results(&self) -> Result<&Results, Error> {
        Ok(&self.results)
    }

    fn note(&self, line: &str) {
        self.notes.borrow_mut().push(line.to_owned());
    }
}

fn request(tricks: Vec<Trick>) -> PlanRequest {
    cpu_request(ProfileName::Quick, &[WorkloadId::Resnet20], &tricks)
}

/// A committed run's results without its cells: what a run holds before it measures.
fn empty_results() -> Results {
    let path = checkout("reports/cpu-xeon-2core-20261130-quick/results-1.json");
    let results = trickbench::results::store::load(&path).unwrap();
    Results { cells: Vec::new(), comparisons: Vec::new(), ..results }
}

/// Adds a measured ResNet-20 cell of `tricks` in `phase`, `speedup` times the baseline's speed.
fn add_measured(results: &mut Results, tricks: &[Trick], phase: Phase, speedup: f64) {
    let key = train_key(WorkloadId::Resnet20, tricks).with_kind(CellKind::Throughput { phase });
    let cell = CellResult::new(key, CellStatus::Ok);
    let baseline = train_key(WorkloadId::Resnet20, &[]).id();
    results.comparisons.push(comparison(&cell.id(), &baseline, speedup, speedup * 0.03));
    results.cells.push(cell);
}

#[test]
fn batch_sweep_probes_until_a_batch_does_not_fit_then_sweeps_the_ones_that_did() {
    let mut phases = FakePhases::new(empty_results(), 512);
    let r = request(vec![]);
    Design::BatchSweep.run_phases(&mut phases, &r, 50_000).unwrap();
    assert_eq!(phases.probed(), [64, 128, 256, 512]);
    assert_eq!(phases.plans.last(), Some(&Plan::batch_sweep(&r, WorkloadId::Resnet20, &[64, 128, 256])));
    assert!(phases.noted("resnet20 baseline: batch 512 does not fit"), "{:?}", phases.notes);
    assert!(phases.noted("resnet20 baseline: largest batch that fits 256"), "{:?}", phases.notes);
}

#[test]
fn a_resnet_probe_stops_at_what_the_training_split_can_fill() {
    let mut phases = FakePhases::new(empty_results(), usize::MAX);
    Design::BatchSweep.run_phases(&mut phases, &request(vec![]), 300).unwrap();
    assert_eq!(phases.probed(), [64, 128, 256]);
}

#[test]
fn max_batch_is_probed_with_and_without_checkpointing_before_the_ablation() {
    let mut phases = FakePhases::new(empty_results(), 1024);
    let r = request(vec![Trick::MaxBatch, Trick::Checkpointing]);
    Design::Ablation.run_phases(&mut phases, &r, 50_000).unwrap();
    assert_eq!(phases.probed(), [64, 128, 256, 512, 1024, 64, 128, 256, 512, 1024]);
    let probed = PlanRequest { max_batch_size: Some(512), ..r.clone() };
    assert_eq!(phases.plans.last(), Some(&Plan::ablation(&probed)));
    // Without time-to-accuracy cells max-batch has nothing to use the batch for: no probe.
    let mut phases = FakePhases::new(empty_results(), 1024);
    let r = PlanRequest { time_to_accuracy_batch_size: None, ..r };
    Design::Ablation.run_phases(&mut phases, &r, 50_000).unwrap();
    assert!(phases.probed().is_empty());
    assert_eq!(phases.plans, [Plan::ablation(&r)]);
}

#[test]
fn the_stack_adds_the_tricks_fastest_first_after_the_ablation() {
    let mut results = empty_results();
    // Only single tricks' training speed-ups rank; debug-off is already off in the plain recipe
    // the stack starts from.
    for (tricks, phase, speedup) in [
        (&[Trick::ZeroGradNone][..], Phase::Train, 1.01),
        (&[Trick::AvoidSync], Phase::Train, 1.18),
        (&[Trick::ChannelsLast], Phase::Train, 0.86),
        (&[Trick::DebugOff], Phase::Train, 11.1),
        (&[Trick::AvoidSync, Trick::ZeroGradNone], Phase::Train, 1.3),
        (&[Trick::NoGradEval], Phase::Eval, 1.6),
    ] {
        add_measured(&mut results, tricks, phase, speedup);
    }
    let ranking = [Trick::AvoidSync, Trick::ZeroGradNone, Trick::ChannelsLast];
    assert_eq!(stack_ranking(&results, WorkloadId::Resnet20), ranking);
    assert!(stack_ranking(&results, WorkloadId::Resnet56).is_empty());
    let r = request(vec![Trick::ZeroGradNone, Trick::ChannelsLast, Trick::AvoidSync, Trick::DebugOff]);
    let mut phases = FakePhases::new(results, 512);
    Design::Stack.run_phases(&mut phases, &r, 50_000).unwrap();
    assert_eq!(phases.plans, [Plan::ablation(&r), Plan::stack(&r, &ranking)]);
    assert!(phases.noted("stacking tricks, best first: avoid-sync, zero-grad-none, channels-last"));
}

#[test]
fn leave_one_out_and_super_convergence_run_one_plan_without_probes() {
    let r =
        PlanRequest { time_to_accuracy_batch_size: None, ..request(vec![Trick::AvoidSync, Trick::MaxBatch]) };
    let mut phases = FakePhases::new(empty_results(), 512);
    Design::LeaveOneOut.run_phases(&mut phases, &r, 50_000).unwrap();
    assert_eq!(phases.plans, [Plan::leave_one_out(&r)]);
    let r = request(vec![]);
    let mut phases = FakePhases::new(empty_results(), 512);
    Design::SuperConvergence.run_phases(&mut phases, &r, 50_000).unwrap();
    assert_eq!(phases.plans, [Plan::super_convergence(&r)]);
    assert!(phases.probed().is_empty());
}

#[test]
fn the_known_plan_is_what_a_shard_can_split_before_anything_is_measured() {
    let requests = [
        request(vec![Trick::AvoidSync]),
        PlanRequest { workloads: vec![WorkloadId::GptMini], ..request(vec![Trick::AvoidSync]) },
    ];
    let ablation: Vec<_> = requests.iter().flat_map(|r| Plan::ablation(r).cells).collect();
    assert_eq!(Design::Ablation.known_plan(&requests).cells, ablation);
    assert_eq!(Design::Stack.known_plan(&requests).cells, ablation, "the stack's second half comes later");
    let leave_one_out: Vec<_> = requests.iter().flat_map(|r| Plan::leave_one_out(r).cells).collect();
    assert_eq!(Design::LeaveOneOut.known_plan(&requests).cells, leave_one_out);
    assert!(Design::BatchSweep.known_plan(&requests).cells.is_empty(), "every batch comes from a probe");
}

#[test]
fn designs_read_and_write_their_names() {
    for design in Design::ALL {
        assert_eq!(design.id().parse::<Design>().unwrap(), design);
        assert_eq!(serde_json::to_string(&design).unwrap(), format!("\"{design}\""));
    }
    let error = "warp".parse::<Design>().unwrap_err().to_string();
    assert!(error.contains("'warp'") && error.contains("leave-one-out"), "{error}");
}
