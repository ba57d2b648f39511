//! The multi-arm design and the sequential rule on a stand-in machine ([`common::standin`]: a
//! seeded model of a noisy 2-core VM), through the real runner (`runner::run`: the grouping of
//! arms into processes, the rule that stops decided cells, the analysis). ResNet-8's baseline
//! hosts the A/A control and six tricks: channels-last 1.15×, zero-copy 1.05×, the other four with
//! no effect.
//!
//! Shown over many simulated runs: with no true effect, the share of cells the run calls faster
//! or slower (the interval excludes 1 and the effect is beyond the A/A floor) stays under the
//! nominal 5%; the intervals of cells the rule stopped hold the true effect as often as those of
//! cells run to the last round; the rule stops cells (so rounds are saved) and never the A/A
//! control or the baseline; and one process per round holds every arm.
//!
//! Beside a trick of the process design (`loader-workers`), the A/A control stays an arm of the
//! baseline's process and the baseline and the control measured alone run every round, one model a
//! process: on the stand-in, and in a real smoke-sized run on both engines, whose results show
//! where each floor and comparison came from.

#[allow(dead_code)]
mod common;

use trickbench::bench::cell::CellJob;
use trickbench::bench::plan::{Plan, PlanRequest};
use trickbench::bench::profile::ProfileName;
use trickbench::bench::runner::{self, Silent};
use trickbench::results::schema::*;
use trickbench::tricks::Trick;
use trickbench::workloads::WorkloadId;

use common::cli::{text, trickbench};
use common::dirs::{python, temp_dir};
use common::plan::cpu_request;
use common::run::{run_spec, RunInfoBuilder};
use common::standin::{standin_protocol, StandIn};

/// Simulated runs.
const RUNS: u64 = 100;

/// The tricks of the stand-in's plan and their true effects.
const EFFECTS: [(Trick, f64); 6] = [
    (Trick::ChannelsLast, 1.15),
    (Trick::ZeroCopy, 1.05),
    (Trick::ZeroGradNone, 1.0),
    (Trick::AvoidSync, 1.0),
    (Trick::FusedOptimizer, 1.0),
    (Trick::NoBiasBeforeBn, 1.0),
];

/// The true effect of cell `key` against the baseline (1 for the baseline and the A/A control).
fn true_effect(key: &CellKey) -> f64 {
    EFFECTS.iter().find(|(t, _)| key.tricks.has(*t)).map_or(1.0, |&(_, e)| e)
}

/// What one simulated run gave.
struct Outcome {
    results: Results,
    jobs: Vec<CellJob>,
}

/// One run of the stand-in's plan over 3 rounds, paired, 20 to 60 pairs a process, asking ±3%.
fn simulate(seed: u64) -> Outcome {
    let tricks: Vec<Trick> = EFFECTS.iter().map(|&(t, _)| t).collect();
    simulate_tricks(seed, &tricks)
}

/// One run of the stand-in's plan of `tricks`, as [`simulate`]'s.
fn simulate_tricks(seed: u64, tricks: &[Trick]) -> Outcome {
    let dir = temp_dir();
    let request = PlanRequest {
        time_to_accuracy_batch_size: None,
        ..cpu_request(ProfileName::Smoke, &[WorkloadId::Resnet8], tricks)
    };
    let protocol = standin_protocol();
    let info = RunInfoBuilder::new("stand-in").with_protocol(protocol).build();
    let spec = run_spec(info, Plan::ablation(&request), dir.path());
    let mut machine = StandIn::new(seed, true_effect);
    let results = runner::run(&spec, &mut machine, &mut Silent).unwrap();
    Outcome { results, jobs: machine.jobs }
}

/// Every simulated run, once (they take a few seconds together).
fn outcomes() -> &'static [Outcome] {
    static OUTCOMES: std::sync::OnceLock<Vec<Outcome>> = std::sync::OnceLock::new();
    OUTCOMES.get_or_init(|| (0..RUNS).map(simulate).collect())
}

/// The measured trick cells of `outcome` with their true effects and comparisons.
fn tricks(outcome: &Outcome) -> Vec<(&CellResult, f64, &Comparison)> {
    let results = &outcome.results;
    results
        .cells
        .iter()
        .filter(|c| !c.key.tricks.is_empty() && !c.key.aa_control)
        .map(|c| {
            let comparison = results.comparisons.iter().find(|k| k.cell == c.id()).expect("compared");
            (c, true_effect(&c.key), comparison)
        })
        .collect()
}

// Over these 100 runs: 1 of the 400 cells with no effect was called faster or slower (0.25%);
// the 95% intervals held the true effect in 89% of the 600 trick cells: 88% of the 257 that
// stopped after two rounds (every channels-last cell, 71 of the zero-copy cells, 86 of the
// cells with no effect) and 90% of those run to the third. Without the widening of
// `paired_median_ci` for few processes: 80% of all cells, 78% of the 291 stopped, 83% of the rest.
// That 89% rather than 95% is the bootstrap's over two or three processes whose ratios differ
// (`docs/methodology.md`), with or without the rule.

#[test]
fn with_no_true_effect_the_share_called_faster_or_slower_stays_under_five_per_cent() {
    let nulls: Vec<&Comparison> =
        outcomes().iter().flat_map(tricks).filter(|(_, e, _)| *e == 1.0).map(|(_, _, c)| c).collect();
    let called = nulls.iter().filter(|c| matches!(c.verdict, Verdict::Faster | Verdict::Slower)).count();
    assert!(nulls.len() == 4 * RUNS as usize);
    assert!((called as f64) <= 0.05 * nulls.len() as f64, "{called} of {} null cells called", nulls.len());
}

/// The share of `cells` whose interval holds their true effect.
fn coverage(cells: &[(&CellResult, f64, &Comparison)]) -> f64 {
    let held = cells.iter().filter(|(_, e, c)| c.speedup_ci_low <= *e && *e <= c.speedup_ci_high).count();
    held as f64 / cells.len() as f64
}

#[test]
fn stopping_keeps_the_intervals_coverage() {
    let cells: Vec<_> = outcomes().iter().flat_map(tricks).collect();
    let (stopped, ran_on): (Vec<_>, Vec<_>) = cells.iter().partition(|(c, _, _)| c.processes.len() < 3);
    let (all, stopped, ran_on) = (coverage(&cells), coverage(&stopped), coverage(&ran_on));
    assert!(all >= 0.85, "the intervals held the true effect in {:.1}% of cells", 100.0 * all);
    assert!(
        stopped >= ran_on - 0.05,
        "cells stopped early held it in {:.1}%, cells run to the last round in {:.1}%",
        100.0 * stopped,
        100.0 * ran_on
    );
}

#[test]
fn decided_cells_stop_early_and_the_control_and_baseline_never_do() {
    let mut stopped = 0;
    for outcome in outcomes() {
        for cell in &outcome.results.cells {
            let rounds = cell.processes.len();
            if cell.key.aa_control || cell.key.tricks.is_empty() {
                assert_eq!(rounds, 3, "{} ran every round", cell.id());
            } else if rounds < 3 {
                assert_eq!(rounds, 2, "{}: a cell stops after its second round at the earliest", cell.id());
                let decided = cell.decided.expect("the decision is recorded in the cell");
                assert_eq!(decided.after_rounds, 2);
                stopped += 1;
            } else {
                assert!(cell.decided.is_none(), "{} ran every round", cell.id());
            }
        }
        let channels_last =
            tricks(outcome).into_iter().find(|(c, _, _)| c.key.tricks.has(Trick::ChannelsLast));
        assert_eq!(
            channels_last.unwrap().0.processes.len(),
            2,
            "15% beyond a ±2% floor is decided in two rounds"
        );
    }
    let cells = RUNS as usize * EFFECTS.len();
    assert!(stopped * 3 > cells, "only {stopped} of {cells} trick cells stopped early");
}

#[test]
fn one_process_a_round_holds_every_arm_and_measures_the_baseline() {
    let outcome = &outcomes()[0];
    let measured: Vec<&CellJob> = outcome.jobs.iter().filter(|j| j.paired_with.is_some()).collect();
    assert_eq!(measured.len(), 3, "one multi-arm process per round");
    assert_eq!(measured[0].members().len(), EFFECTS.len() + 2, "six tricks, the A/A control, the baseline");
    assert!(measured.iter().all(|j| j.measures_reference));
    let baseline =
        outcome.results.cells.iter().find(|c| c.key.tricks.is_empty() && !c.key.aa_control).unwrap();
    assert!(baseline.processes.iter().all(|p| p.process_cells >= 2 && p.window_samples_per_s.len() >= 20));
}

#[test]
fn beside_a_trick_of_the_process_design_the_control_stays_an_arm_and_the_cells_alone_run_every_round() {
    let outcome = simulate_tricks(0, &[Trick::ChannelsLast, Trick::LoaderWorkers]);
    let results = &outcome.results;
    let cell = |configuration: &str| {
        let id = format!("resnet8/{configuration}/b32/s0/train");
        results.cells.iter().find(|c| c.id().as_str() == id).unwrap_or_else(|| panic!("no {id}"))
    };
    for configuration in ["baseline", "aa-control", "baseline-alone", "aa-control-alone", "loader-workers"] {
        assert_eq!(cell(configuration).processes.len(), 3, "{configuration} runs every round");
    }
    assert_eq!(cell("channels-last").processes.len(), 2, "decided after two rounds");
    let control = cell("aa-control");
    let shared: Vec<usize> = control.processes.iter().map(|p| p.process_cells).collect();
    assert_eq!(
        shared,
        [3, 3, 2],
        "the control shares the baseline's process, with channels-last until decided"
    );
    for configuration in ["baseline-alone", "aa-control-alone"] {
        let alone = cell(configuration);
        assert!(
            alone.processes.iter().all(|p| p.process_cells == 1 && p.paired.is_none()),
            "{configuration}"
        );
    }
    let alone_jobs = outcome.jobs.iter().filter(|j| j.key.alone);
    assert!(alone_jobs
        .clone()
        .all(|j| j.arms.is_empty() && j.paired_with.is_none() && !j.measures_reference));
    assert_eq!(alone_jobs.count(), 6, "two cells alone, three rounds, never a warm-up");
}

/// The cell of `results` whose id is `resnet8/CONFIGURATION/b32/s0/train` on `engine`.
fn smoke_cell<'r>(results: &'r Results, configuration: &str, engine: Engine) -> &'r CellResult {
    let suffix = if engine == Engine::Pytorch { "@pytorch" } else { "" };
    let id = format!("resnet8/{configuration}/b32/s0/train{suffix}");
    results.cells.iter().find(|c| c.id().as_str() == id).unwrap_or_else(|| panic!("no cell {id}"))
}

#[test]
fn a_real_run_reads_the_paired_floor_from_inside_the_arms_and_the_process_floor_from_the_pair_alone() {
    let dir = temp_dir();
    let python = python();
    let out = trickbench(
        dir.path(),
        &[
            "run",
            "--profile",
            "smoke",
            "--workload",
            "resnet8",
            "--device",
            "cpu",
            "--tricks",
            "channels-last,zero-grad-none,loader-workers",
            "--engine",
            "both",
            "--python",
            python.to_str().unwrap(),
            "--no-time-to-accuracy",
            "--rounds",
            "2",
            "--windows",
            "2",
            "--steps-per-window",
            "2",
            "--out",
            "run",
        ],
    );
    assert!(out.status.success(), "run failed: {}", text(&out.stderr));
    let results = trickbench::results::store::load(&dir.path().join("run/results.json")).unwrap();
    for engine in [Engine::Libtorch, Engine::Pytorch] {
        let cell = |configuration: &str| smoke_cell(&results, configuration, engine);
        let control = cell("aa-control");
        assert_eq!(control.processes.len(), 2, "{engine}");
        assert!(
            control.processes.iter().all(|p| p.process_cells > 2 && p.paired.is_some()),
            "{engine}: the control shares the multi-arm process: {:?}",
            control.processes.iter().map(|p| p.process_cells).collect::<Vec<_>>()
        );
        for alone in ["baseline-alone", "aa-control-alone"] {
            let alone = cell(alone);
            assert_eq!(alone.status, CellStatus::Ok, "{}", alone.id());
            assert!(alone.processes.len() == 2 && alone.processes.iter().all(|p| p.process_cells == 1));
        }
        let floors: Vec<&NoiseFloor> = results.noise_floors.iter().filter(|f| f.engine == engine).collect();
        let floor = |design| {
            let of: Vec<&&NoiseFloor> = floors.iter().filter(|f| f.design == design).collect();
            assert_eq!(of.len(), 1, "{engine}: one {design:?} floor: {floors:?}");
            (of[0].control.clone(), of[0].baseline.clone())
        };
        assert_eq!(floor(MeasurementDesign::Paired), (control.id(), cell("baseline").id()));
        assert_eq!(
            floor(MeasurementDesign::Processes),
            (cell("aa-control-alone").id(), cell("baseline-alone").id())
        );
        let compared = |configuration: &str| {
            let id = cell(configuration).id();
            results.comparisons.iter().find(|c| c.cell == id).unwrap_or_else(|| panic!("{id} not compared"))
        };
        let workers = compared("loader-workers");
        assert_eq!(
            (workers.design, &workers.baseline),
            (MeasurementDesign::Processes, &cell("baseline-alone").id())
        );
        let channels_last = compared("channels-last");
        assert_eq!(
            (channels_last.design, &channels_last.baseline),
            (MeasurementDesign::Paired, &cell("baseline").id())
        );
    }
}
