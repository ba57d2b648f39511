//! The factorial design on a stand-in machine ([`common::standin`]: a seeded model of a noisy
//! 2-core VM), through the real runner (`runner::run`: the fraction's configurations as arms of
//! the baseline's multi-arm processes, the sequential rule stopping them together, the analysis).
//!
//! Six tricks of ResNet-8 in the 2^(6−1) fraction of resolution VI, 32 configurations. Planted:
//! channels-last 1.20× and zero-grad-none 1.10× on their own (with the other off), and together
//! 8% short of what those predict (1.20 × 1.10 × 0.92); the other four tricks and every other
//! pair have no effect. What the design reports is then: channels-last's main effect (averaged
//! over zero-grad-none off and on) 1.20 × √0.92, zero-grad-none's 1.10 × √0.92, their interaction
//! (together ÷ predicted) 0.92, every other effect 1.
//!
//! Shown over many simulated runs: the 95% intervals hold those true values in at least 90% of
//! effects; a null interaction is called synergy or antagonism in at most 5%; the best
//! configuration the model predicts is the two planted tricks; every configuration stops in the
//! same round.

#[allow(dead_code)]
mod common;

use trickbench::bench::design::Design;
use trickbench::bench::plan::{Plan, PlanRequest};
use trickbench::bench::profile::ProfileName;
use trickbench::bench::runner::{self, Silent};
use trickbench::results::factorial::{FactorialAnalysis, InteractionVerdict, RatioEstimate};
use trickbench::results::schema::*;
use trickbench::tricks::{Trick, TrickSet};
use trickbench::workloads::WorkloadId;

use common::dirs::temp_dir;
use common::plan::cpu_request;
use common::run::{run_spec, RunInfoBuilder};
use common::standin::{standin_protocol, StandIn};

/// Simulated runs.
const RUNS: u64 = 40;
/// The design's six tricks.
const TRICKS: [Trick; 6] = [
    Trick::ChannelsLast,
    Trick::ZeroGradNone,
    Trick::ZeroCopy,
    Trick::AvoidSync,
    Trick::FusedOptimizer,
    Trick::NoBiasBeforeBn,
];
/// channels-last's effect with zero-grad-none off.
const A: f64 = 1.20;
/// zero-grad-none's effect with channels-last off.
const B: f64 = 1.10;
/// Their interaction: together ÷ the product of their own effects.
const AB: f64 = 0.92;

/// The planted effect of a configuration against the baseline.
fn true_effect(key: &CellKey) -> f64 {
    let (a, b) = (key.tricks.has(Trick::ChannelsLast), key.tricks.has(Trick::ZeroGradNone));
    let mut effect = 1.0;
    if a {
        effect *= A;
    }
    if b {
        effect *= B;
    }
    if a && b {
        effect *= AB;
    }
    effect
}

/// The true value of what the design reports for the effect of `tricks` (one trick: its main
/// effect; two: their interaction).
fn true_value(tricks: &[Trick]) -> f64 {
    match tricks {
        [Trick::ChannelsLast] => A * AB.sqrt(),
        [Trick::ZeroGradNone] => B * AB.sqrt(),
        [Trick::ChannelsLast, Trick::ZeroGradNone] | [Trick::ZeroGradNone, Trick::ChannelsLast] => AB,
        _ => 1.0,
    }
}

/// One run of the factorial of [`TRICKS`] over up to 3 rounds, paired, 20 to 60 pairs a process,
/// asking ±3%: its analysis of ResNet-8 on libtorch.
fn simulate(seed: u64) -> (Results, FactorialAnalysis) {
    let dir = temp_dir();
    let request = PlanRequest {
        time_to_accuracy_batch_size: None,
        ..cpu_request(ProfileName::Smoke, &[WorkloadId::Resnet8], &TRICKS)
    };
    let protocol = standin_protocol();
    let info = RunInfoBuilder::new("stand-in").with_design(Design::Factorial).with_protocol(protocol).build();
    let spec = run_spec(info, Plan::factorial(&request), dir.path());
    let mut machine = StandIn::new(seed, true_effect);
    let results = runner::run(&spec, &mut machine, &mut Silent).unwrap();
    let analysis = results.factorial.first().expect("the design is estimated").clone();
    (results, analysis)
}

/// Every simulated run, once.
fn outcomes() -> &'static [(Results, FactorialAnalysis)] {
    static OUTCOMES: std::sync::OnceLock<Vec<(Results, FactorialAnalysis)>> = std::sync::OnceLock::new();
    OUTCOMES.get_or_init(|| (0..RUNS).map(simulate).collect())
}

/// Every reported effect of `analysis` with its true value.
fn effects(analysis: &FactorialAnalysis) -> Vec<(RatioEstimate, f64)> {
    let main = analysis.main_effects.iter().map(|m| (m.throughput, true_value(&[m.trick])));
    let pairs = analysis.interactions.iter().map(|i| (i.throughput, true_value(&i.tricks)));
    main.chain(pairs).collect()
}

/// Whether `estimate`'s interval holds `truth`.
fn holds(estimate: &RatioEstimate, truth: f64) -> bool {
    estimate.ci_low <= truth && truth <= estimate.ci_high
}

#[test]
fn the_intervals_hold_the_planted_effects_in_at_least_ninety_per_cent() {
    let all: Vec<(RatioEstimate, f64)> = outcomes().iter().flat_map(|(_, a)| effects(a)).collect();
    assert_eq!(all.len(), RUNS as usize * (6 + 15));
    let held = all.iter().filter(|(e, t)| holds(e, *t)).count() as f64 / all.len() as f64;
    let planted: Vec<&(RatioEstimate, f64)> = all.iter().filter(|(_, t)| *t != 1.0).collect();
    let planted_held = planted.iter().filter(|(e, t)| holds(e, *t)).count() as f64 / planted.len() as f64;
    eprintln!("held: {:.1}% of all effects, {:.1}% of the planted ones", 100.0 * held, 100.0 * planted_held);
    assert!(held >= 0.90, "the intervals held the true values in {:.1}% of effects", 100.0 * held);
    assert!(planted_held >= 0.90, "and the planted ones in {:.1}%", 100.0 * planted_held);
}

#[test]
fn a_null_interaction_is_called_synergy_or_antagonism_in_at_most_five_per_cent() {
    let nulls: Vec<InteractionVerdict> = outcomes()
        .iter()
        .flat_map(|(_, a)| a.interactions.iter().filter(|i| true_value(&i.tricks) == 1.0).map(|i| i.verdict))
        .collect();
    let called = nulls.iter().filter(|v| **v != InteractionVerdict::Additive).count();
    eprintln!("{called} of {} null interactions called", nulls.len());
    assert!(
        (called as f64) <= 0.05 * nulls.len() as f64,
        "{called} of {} null interactions called",
        nulls.len()
    );
    let planted = outcomes()
        .iter()
        .filter(|(_, a)| {
            a.interactions
                .iter()
                .any(|i| true_value(&i.tricks) != 1.0 && i.verdict == InteractionVerdict::Antagonism)
        })
        .count();
    assert!(
        planted as f64 >= 0.8 * RUNS as f64,
        "the planted −8% was called antagonism in {planted} of {RUNS} runs"
    );
}

#[test]
fn the_model_predicts_the_two_planted_tricks_best_and_its_measurement_agrees() {
    let planted: TrickSet = [Trick::ChannelsLast, Trick::ZeroGradNone].into_iter().collect();
    let bests: Vec<_> =
        outcomes().iter().map(|(_, a)| a.best.clone().expect("a best configuration")).collect();
    let right = bests.iter().filter(|b| b.tricks.iter().copied().collect::<TrickSet>() == planted).count();
    assert!(right as f64 >= 0.9 * RUNS as f64, "the best configuration was right in {right} of {RUNS} runs");
    let truth = A * B * AB;
    let predicted = bests.iter().filter(|b| holds(&b.predicted, truth)).count();
    let measured = bests.iter().filter(|b| b.measured.is_some_and(|m| holds(&m, truth))).count();
    eprintln!("the best's truth held: predicted in {predicted}, measured in {measured} of {RUNS} runs");
    assert!(
        bests.iter().filter(|b| b.tricks.len() == 2).all(|b| b.in_design),
        "a half fraction of resolution VI holds every pair of tricks on with the rest off"
    );
    assert!(predicted as f64 >= 0.9 * RUNS as f64, "predicted held {truth} in {predicted} of {RUNS} runs");
    // The measurement is one configuration's paired interval over the two or three processes the
    // design ran, which holds its effect less often than 95% (31 of these 40 runs; a trick's in
    // the ablation, `tests/multi_arm_design.rs`: 89%): the bootstrap over so few processes.
    assert!(measured as f64 >= 0.7 * RUNS as f64, "measured held {truth} in {measured} of {RUNS} runs");
}

#[test]
fn every_configuration_of_the_design_stops_in_the_same_round() {
    for (results, analysis) in outcomes() {
        assert_eq!((analysis.configurations, analysis.resolution), (32, Some(6)));
        let configurations: Vec<&CellResult> =
            results.cells.iter().filter(|c| !c.key.tricks.is_empty() && !c.key.aa_control).collect();
        assert_eq!(configurations.len(), 31);
        let rounds: Vec<usize> = configurations.iter().map(|c| c.processes.len()).collect();
        assert!(rounds.iter().all(|&r| r == rounds[0]), "{rounds:?}");
        assert_eq!(analysis.processes, rounds[0]);
        if rounds[0] < 3 {
            assert!(configurations
                .iter()
                .all(|c| c.decided.is_some_and(|d| d.decision == Decision::DesignDecided)));
        }
    }
}
