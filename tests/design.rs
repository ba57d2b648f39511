//! Each design's phases on a fake runner: the probes a design makes and where they stop, the plan
//! it runs from their answers, and the stack ranked by the speed-ups the ablation measured.

#[allow(dead_code)]
mod common;

use trickbench::analysis::time_to_accuracy_summaries;
use trickbench::bench::design::{stack_ranking, Design, Phases};
use trickbench::bench::plan::{Plan, PlanRequest};
use trickbench::bench::profile::ProfileName;
use trickbench::bench::speedrun::{fastest_step, Evidence, THIS_RUN};
use trickbench::device::DeviceSpec;
use trickbench::engine::Engine;
use trickbench::error::Error;
use trickbench::hardware::Hardware;
use trickbench::results::schema::{
    CellKind, CellResult, CellStatus, MeasurementDesign, NoiseFloor, Phase, Results, SpeedrunChoice,
    SpeedrunDecision, TimeToAccuracy,
};
use trickbench::tricks::Trick;
use trickbench::vocabulary::QualityMetric;
use trickbench::workloads::WorkloadId;

use common::cells::{comparison, train_key, KeyWith};
use common::cli::{text, trickbench};
use common::dirs::{checkout, temp_dir};
use common::plan::cpu_request;

/// Runs phases instantly: probes fit below `fits_below` and run out of memory from it on, every
/// other cell measures; records each phase's plan and every note.
struct FakePhases {
    results: Results,
    fits_below: usize,
    plans: Vec<Plan>,
    notes: std::cell::RefCell<Vec<String>>,
    evidence: Vec<Evidence>,
    recorded: Vec<SpeedrunChoice>,
}

impl FakePhases {
    fn new(results: Results, fits_below: usize) -> Self {
        Self {
            results,
            fits_below,
            plans: Vec::new(),
            notes: Default::default(),
            evidence: Vec::new(),
            recorded: Vec::new(),
        }
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

    fn evidence(&self) -> &[Evidence] {
        &self.evidence
    }

    fn record(&mut self, choice: SpeedrunChoice) {
        self.recorded.push(choice);
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
    assert_eq!(
        phases.plans.last(),
        Some(&Plan::batch_sweep(&r, WorkloadId::Resnet20, &[64, 128, 256], Engine::Libtorch))
    );
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
fn expandable_segments_are_probed_with_and_without_on_a_gpu_and_not_on_a_cpu() {
    let cpu = request(vec![Trick::ExpandableSegments]);
    let gpu = Hardware { device: DeviceSpec::Cuda(0), cuda_gpus: 1, ..cpu.hardware.clone() };
    let on_gpu = PlanRequest { hardware: gpu, ..cpu.clone() };
    let mut phases = FakePhases::new(empty_results(), 512);
    Design::Ablation.run_phases(&mut phases, &on_gpu, 50_000).unwrap();
    assert_eq!(phases.probed(), [64, 128, 256, 512, 64, 128, 256, 512]);
    let probe_sets: Vec<usize> = phases.plans[..8].iter().map(|p| p.cells[0].key.tricks.len()).collect();
    assert_eq!(probe_sets, [0, 0, 0, 0, 1, 1, 1, 1]);
    assert!(phases.noted("expandable-segments: largest batch that fits 256"), "{:?}", phases.notes);
    assert_eq!(phases.plans.last(), Some(&Plan::ablation(&on_gpu)));
    let mut phases = FakePhases::new(empty_results(), 512);
    Design::Ablation.run_phases(&mut phases, &cpu, 50_000).unwrap();
    assert!(phases.probed().is_empty(), "a CPU has no caching allocator to probe");
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
    assert_eq!(stack_ranking(&results, WorkloadId::Resnet20, Engine::Libtorch), ranking);
    assert!(stack_ranking(&results, WorkloadId::Resnet56, Engine::Libtorch).is_empty());
    assert!(stack_ranking(&results, WorkloadId::Resnet20, Engine::Pytorch).is_empty());
    let r = request(vec![Trick::ZeroGradNone, Trick::ChannelsLast, Trick::AvoidSync, Trick::DebugOff]);
    let mut phases = FakePhases::new(results, 512);
    Design::Stack.run_phases(&mut phases, &r, 50_000).unwrap();
    assert_eq!(phases.plans, [Plan::ablation(&r), Plan::stack(&r, &[(Engine::Libtorch, ranking.to_vec())])]);
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

/// Adds ResNet-20's time-to-accuracy cells of `tricks` at `batch`, one per seed, reaching the
/// target after each of `seconds` (`None`: never), and refreshes the summaries.
fn add_trained(results: &mut Results, tricks: &[Trick], batch: usize, seconds: &[Option<f64>]) {
    add_trained_of(results, WorkloadId::Resnet20, tricks, batch, seconds);
}

/// As [`add_trained`], for `workload`.
fn add_trained_of(
    results: &mut Results,
    workload: WorkloadId,
    tricks: &[Trick],
    batch: usize,
    seconds: &[Option<f64>],
) {
    for (seed, &time) in seconds.iter().enumerate() {
        let key = train_key(workload, tricks)
            .with_kind(CellKind::TimeToAccuracy)
            .with_batch(batch)
            .with_seed(seed as u64);
        let mut cell = CellResult::new(key, CellStatus::Ok);
        cell.time_to_accuracy = Some(TimeToAccuracy {
            metric: QualityMetric::TestAccuracy,
            target: 0.6,
            budget_s: 240.0,
            time_to_target_s: time,
            wall_time_to_target_s: time,
            epochs_to_target: time.map(|t| t / 30.0),
            best_metric: if time.is_some() { 0.62 } else { 0.5 },
            curve: Vec::new(),
            compile_s: None,
        });
        results.cells.push(cell);
    }
    results.time_to_accuracy = time_to_accuracy_summaries(&results.cells);
}

/// ResNet-20's A/A noise floor of ±`half_width` in `results`.
fn with_noise_floor(results: &mut Results, half_width: f64) {
    let baseline = train_key(WorkloadId::Resnet20, &[]).id();
    results.noise_floors.push(NoiseFloor {
        workload: WorkloadId::Resnet20,
        control: baseline.clone(),
        baseline,
        ratio: 1.0 + half_width,
        ratio_ci_low: 1.0,
        ratio_ci_high: 1.0 + half_width,
        half_width,
        design: MeasurementDesign::Processes,
        engine: Engine::Libtorch,
    });
}

/// The decision about `trick` in `choice`, with its reason.
fn decision(choice: &SpeedrunChoice, trick: Trick) -> (SpeedrunDecision, String) {
    let t = choice.tricks.iter().find(|t| t.trick == trick).unwrap_or_else(|| panic!("{trick} not judged"));
    (t.decision, t.reason.clone().unwrap_or_default())
}

/// Hand-built effects of throughput, memory and convergence tricks on ResNet-20 at the quick
/// profile's time-to-accuracy batch (64), with a ±5% noise floor.
fn measured_effects() -> Results {
    let mut results = empty_results();
    for (tricks, speedup) in [
        (&[Trick::AvoidSync][..], 1.3),
        (&[Trick::ZeroGradNone], 1.01),
        (&[Trick::DebugOff], 11.0),
        (&[Trick::Checkpointing], 0.8),
    ] {
        add_measured(&mut results, tricks, Phase::Train, speedup);
    }
    with_noise_floor(&mut results, 0.05);
    add_trained(&mut results, &[], 64, &[Some(60.0)]);
    for (tricks, batch, time) in [
        (Trick::OneCycle, 64, Some(30.0)),
        (Trick::GradClipping, 64, Some(58.0)),
        (Trick::Lars, 64, Some(25.0)),
        (Trick::Lamb, 64, Some(28.0)),
        (Trick::MaxBatch, 2048, Some(10.0)),
    ] {
        add_trained(&mut results, &[tricks], batch, &[time]);
    }
    results
}

fn speedrun_request() -> PlanRequest {
    request(vec![
        Trick::AvoidSync,
        Trick::ZeroGradNone,
        Trick::DebugOff,
        Trick::Checkpointing,
        Trick::OneCycle,
        Trick::GradClipping,
        Trick::Lars,
        Trick::Lamb,
        Trick::MaxBatch,
    ])
}

#[test]
fn the_speedrun_combines_the_significant_tricks_largest_effect_first_and_refuses_a_conflict() {
    let mut phases = FakePhases::new(empty_results(), 512);
    phases.evidence = vec![Evidence { source: "effects.json".into(), results: measured_effects() }];
    let r = speedrun_request();
    Design::Speedrun.run_phases(&mut phases, &r, 50_000).unwrap();
    let choice = &phases.recorded[0];
    // lars 2.4× sooner, lamb 2.14× (refused: a second optimizer), one-cycle 2×, avoid-sync 1.3×.
    let combination = [Trick::Lars, Trick::OneCycle, Trick::AvoidSync];
    assert_eq!(choice.combination, combination);
    assert_eq!(
        phases.plans,
        [Plan::speedrun(&r, WorkloadId::Resnet20, &combination, Engine::Libtorch)],
        "no ablation"
    );
    assert_eq!((choice.batch_size, choice.evidence.as_slice()), (64, &["effects.json".to_owned()][..]));
    let (refused, why) = decision(choice, Trick::Lamb);
    assert_eq!(refused, SpeedrunDecision::Refused);
    assert_eq!(why, "lars and lamb each replace the optimizer; only one can be on");
    assert!(phases.noted("refused lamb: lars and lamb"), "{:?}", phases.notes);
    assert_eq!(decision(choice, Trick::ZeroGradNone).0, SpeedrunDecision::NotSignificant);
    // 58 s against 60 s is within the ±5% noise floor.
    assert_eq!(decision(choice, Trick::GradClipping).0, SpeedrunDecision::NotSignificant);
    for (trick, reason) in [
        (Trick::DebugOff, "judged against its own reference (debug-apis-on)"),
        (Trick::Checkpointing, "judged by peak memory"),
        (Trick::MaxBatch, "trained at batch 2048, and the combination trains at batch 64"),
    ] {
        let (left_out, why) = decision(choice, trick);
        assert!(left_out == SpeedrunDecision::LeftOut && why.contains(reason), "{trick}: {why}");
    }
    let ids: Vec<String> = phases.plans[0].cells.iter().map(|c| c.key.id().to_string()).collect();
    assert_eq!(ids, ["resnet20/baseline/b64/s0/tta", "resnet20/avoid-sync+one-cycle+lars/b64/s0/tta"]);
}

#[test]
fn on_both_engines_each_speedrun_combines_what_was_measured_on_its_own_engine() {
    let mut phases = FakePhases::new(empty_results(), 512);
    phases.evidence = vec![Evidence { source: "effects.json".into(), results: measured_effects() }];
    let r = PlanRequest { engines: vec![Engine::Libtorch, Engine::Pytorch], ..speedrun_request() };
    Design::Speedrun.run_phases(&mut phases, &r, 50_000).unwrap();
    let engines: Vec<Engine> = phases.recorded.iter().map(|c| c.engine).collect();
    assert_eq!(engines, [Engine::Libtorch, Engine::Pytorch]);
    let combination = [Trick::Lars, Trick::OneCycle, Trick::AvoidSync];
    assert_eq!(phases.recorded[0].combination, combination);
    assert!(phases.recorded[1].combination.is_empty(), "the effects file measured nothing in PyTorch");
    assert!(
        phases.noted("speedrun resnet20 on pytorch: no trick helped significantly"),
        "{:?}",
        phases.notes
    );
    let ids: Vec<String> = phases.plans[1].cells.iter().map(|c| c.key.id().to_string()).collect();
    assert_eq!(ids, ["resnet20/baseline/b64/s0/tta@pytorch"]);
}

#[test]
fn the_fastest_step_combines_the_significantly_faster_throughput_tricks_that_the_caller_admits() {
    let mut results = measured_effects();
    add_measured(&mut results, &[Trick::LoaderWorkers], Phase::Train, 1.6);
    add_measured(&mut results, &[Trick::ChannelsLast], Phase::Train, 1.2);
    let cpu = Hardware::probe(DeviceSpec::Cpu);
    let (stack, considered) = fastest_step(
        &[("effects.json", &results)],
        WorkloadId::Resnet20,
        trickbench::parity::stack::refusal,
        |set| set.not_applicable_reason(WorkloadId::Resnet20, &cpu),
    );
    // avoid-sync 1.3× before channels-last 1.2×; loader-workers (1.6×) acts outside the step.
    assert_eq!(stack, [Trick::AvoidSync, Trick::ChannelsLast]);
    let about = |trick: Trick| considered.iter().find(|t| t.trick == trick).unwrap();
    assert_eq!(about(Trick::LoaderWorkers).decision, SpeedrunDecision::LeftOut);
    assert!(about(Trick::LoaderWorkers).reason.as_deref().unwrap().starts_with("acts on the loader"));
    assert!(about(Trick::LoaderWorkers).effect.starts_with("1.60×"), "{:?}", about(Trick::LoaderWorkers));
    assert_eq!(about(Trick::ZeroGradNone).decision, SpeedrunDecision::NotSignificant);
    assert_eq!(about(Trick::Checkpointing).decision, SpeedrunDecision::LeftOut);
    assert!(
        !considered.iter().any(|t| t.trick == Trick::OneCycle),
        "time-to-accuracy effects do not speed a step up"
    );
    let refuse_all = |_: &trickbench::tricks::TrickSet| Some("not here".to_owned());
    let (none, refused) =
        fastest_step(&[("effects.json", &results)], WorkloadId::Resnet20, |_| None, refuse_all);
    assert!(none.is_empty());
    assert_eq!(about(Trick::AvoidSync).decision, SpeedrunDecision::Added);
    let refused: Vec<Trick> =
        refused.iter().filter(|t| t.decision == SpeedrunDecision::Refused).map(|t| t.trick).collect();
    assert_eq!(refused, [Trick::LoaderWorkers, Trick::AvoidSync, Trick::ChannelsLast]);
}

#[test]
fn without_results_to_take_the_effects_from_the_speedrun_runs_the_ablation_first() {
    let mut phases = FakePhases::new(empty_results(), 512);
    let r = request(vec![Trick::AvoidSync, Trick::OneCycle]);
    Design::Speedrun.run_phases(&mut phases, &r, 50_000).unwrap();
    assert_eq!(
        phases.plans,
        [Plan::ablation(&r), Plan::speedrun(&r, WorkloadId::Resnet20, &[], Engine::Libtorch)]
    );
    assert_eq!(phases.recorded[0].evidence, [THIS_RUN]);
    assert!(phases.noted("no trick helped significantly"), "{:?}", phases.notes);
}

/// The decision about one-cycle when the baseline's seeds took `baseline` and one-cycle's
/// `one_cycle`, with a noise floor of ±`floor` (none when `None`).
fn one_cycle_judged(
    baseline: &[Option<f64>],
    one_cycle: &[Option<f64>],
    floor: Option<f64>,
) -> SpeedrunDecision {
    let mut results = empty_results();
    add_trained(&mut results, &[], 64, baseline);
    add_trained(&mut results, &[Trick::OneCycle], 64, one_cycle);
    if let Some(half_width) = floor {
        with_noise_floor(&mut results, half_width);
    }
    let mut phases = FakePhases::new(empty_results(), 512);
    phases.evidence = vec![Evidence { source: "effects.json".into(), results }];
    Design::Speedrun.run_phases(&mut phases, &request(vec![Trick::OneCycle]), 50_000).unwrap();
    decision(&phases.recorded[0], Trick::OneCycle).0
}

#[test]
fn a_time_to_target_effect_counts_when_no_seed_overlaps_by_more_than_the_noise_floor() {
    use SpeedrunDecision::{Added, NotSignificant};
    // One seed a side: reached where the baseline did not, or sooner beyond the floor.
    assert_eq!(one_cycle_judged(&[None], &[Some(200.0)], Some(0.05)), Added);
    assert_eq!(one_cycle_judged(&[Some(60.0)], &[Some(50.0)], Some(0.05)), Added);
    assert_eq!(one_cycle_judged(&[Some(60.0)], &[Some(50.0)], Some(0.25)), NotSignificant);
    assert_eq!(one_cycle_judged(&[Some(60.0)], &[None], None), NotSignificant);
    // Several seeds: every one-cycle seed before every baseline seed.
    assert_eq!(one_cycle_judged(&[Some(50.0), Some(70.0)], &[Some(40.0), Some(60.0)], None), NotSignificant);
    assert_eq!(one_cycle_judged(&[Some(50.0), Some(70.0)], &[Some(30.0), Some(45.0)], None), Added);
    assert_eq!(one_cycle_judged(&[Some(50.0), None], &[Some(30.0), None], None), NotSignificant);
}

/// A CPU results file in `dir` whose ResNet-8 effects at the smoke profile's time-to-accuracy
/// batch (32) make lars (3× sooner), lamb (2.4×) and one-cycle (2×) significant; returns its name.
fn smoke_effects(dir: &std::path::Path) -> &'static str {
    let mut results = common::fixtures::cpu_run();
    (results.cells, results.comparisons, results.noise_floors) = (Vec::new(), Vec::new(), Vec::new());
    add_trained_of(&mut results, WorkloadId::Resnet8, &[], 32, &[Some(60.0)]);
    for (trick, seconds) in [(Trick::Lars, 20.0), (Trick::Lamb, 25.0), (Trick::OneCycle, 30.0)] {
        add_trained_of(&mut results, WorkloadId::Resnet8, &[trick], 32, &[Some(seconds)]);
    }
    trickbench::results::store::save(&results, &dir.join("effects.json")).unwrap();
    "effects.json"
}

#[test]
fn a_speedrun_from_a_results_file_trains_the_baseline_and_the_combination_per_seed_and_leads_its_report() {
    let dir = temp_dir();
    let from = smoke_effects(dir.path());
    let run = [
        "run",
        "--design",
        "speedrun",
        "--profile",
        "smoke",
        "--workload",
        "resnet",
        "--device",
        "cpu",
        "--tricks",
        "convergence",
        "--from",
        from,
        "--seeds",
        "2",
        "--epochs",
        "1",
        "--budget-s",
        "3",
        "--data",
        "none",
        "--out",
        "run",
    ];
    let out = trickbench(dir.path(), &run);
    let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
    assert!(out.status.success(), "{stderr}");
    let results = trickbench::results::store::load(&dir.path().join("run/results.json")).unwrap();
    let ids: Vec<String> = results.cells.iter().map(|c| c.id().to_string()).collect();
    assert_eq!(
        ids,
        [
            "resnet8/baseline/b32/s0/tta",
            "resnet8/baseline/b32/s1/tta",
            "resnet8/one-cycle+lars/b32/s0/tta",
            "resnet8/one-cycle+lars/b32/s1/tta",
        ],
        "no ablation: its effects came from {from}"
    );
    assert!(results.cells.iter().all(|c| c.time_to_accuracy.is_some()), "{ids:?}");
    let choice = &results.speedrun[0];
    assert_eq!(choice.combination, [Trick::Lars, Trick::OneCycle]);
    assert_eq!(choice.evidence, [from]);
    let (refused, why) = decision(choice, Trick::Lamb);
    assert_eq!(
        (refused, why.as_str()),
        (SpeedrunDecision::Refused, "lars and lamb each replace the optimizer; only one can be on")
    );
    let headline = "resnet8 to test accuracy ≥ 25.0%: ";
    assert!(stdout.contains(&format!("speedrun: {headline}")), "{stdout}");
    assert!(stdout.contains("refused lamb: lars and lamb each replace the optimizer"), "{stdout}");
    let html = std::fs::read_to_string(dir.path().join("run/index.html")).unwrap();
    let speedrun_at = html.find(headline).expect("the headline in the HTML");
    assert!(speedrun_at < html.find("id=\"overview\"").unwrap(), "the headline comes first");
    assert!(html.contains("plots/speedrun-resnet8-") && html.contains("<code>lamb</code>: lars and lamb"));
    let markdown = std::fs::read_to_string(dir.path().join("run/summary.md")).unwrap();
    assert!(markdown.contains(&format!("**{headline}")), "{markdown}");
    assert!(markdown.contains("- `lamb`: lars and lamb each replace the optimizer"), "{markdown}");

    // Resumed, everything is measured already: nothing runs again and the choice stays.
    let resumed: Vec<&str> = run.iter().copied().chain(["--resume"]).collect();
    let again = trickbench(dir.path(), &resumed);
    assert!(again.status.success(), "{}", text(&again.stderr));
    let after = trickbench::results::store::load(&dir.path().join("run/results.json")).unwrap();
    assert_eq!((after.cells, after.speedrun), (results.cells, results.speedrun));
}

#[test]
fn speedrun_flags_that_cannot_work_are_refused_naming_the_file_or_flag() {
    let dir = temp_dir();
    std::fs::write(dir.path().join("broken.json"), "{ not json").unwrap();
    let speedrun = ["run", "--design", "speedrun", "--profile", "smoke", "--device", "cpu", "--data", "none"];
    for (extra, expected) in [
        (&["--from", "missing.json"][..], "missing.json"),
        (&["--from", "broken.json"], "broken.json"),
        (&["--shard", "0/2"], "--shard cannot split --design speedrun"),
        (&["--no-time-to-accuracy"], "--no-time-to-accuracy"),
    ] {
        let args: Vec<&str> = speedrun.iter().chain(extra).copied().collect();
        let out = trickbench(dir.path(), &args);
        let stderr = text(&out.stderr);
        assert!(!out.status.success() && stderr.contains(expected), "{extra:?}: {stderr}");
    }
    let out = trickbench(dir.path(), &["run", "--profile", "smoke", "--from", "broken.json"]);
    assert!(text(&out.stderr).contains("--from gives the speedrun design"), "{}", text(&out.stderr));
}
