//! The speedrun design's choice of tricks: which measured effects were significant, the
//! combination built from them in order of effect (refusing a trick that cannot run with those
//! before it), and the results files (`run --from`) the effects can be taken from.
//!
//! The rules, by the metric a trick is judged by:
//! - **training throughput**: the ablation's paired comparison with the baseline says `faster`
//!   (its whole confidence interval above 1, and the speed-up beyond the A/A noise floor);
//! - **time to accuracy**: the slowest seed of the trick reached the target, and sooner than the
//!   fastest seed of its reference by more than the A/A noise floor (a reference seed that never
//!   reached it counts as infinitely slow). With one seed a side that is "reached where the
//!   reference did not, or sooner by more than the noise floor"; with more, no seed of the two
//!   may overlap;
//! - **memory** and **evaluation throughput** tricks are left out (they do not speed training
//!   up), and so are tricks judged against their own reference (their "off" side is not the plain
//!   recipe: either their "on" side is the recipe already, or the reference is another recipe, so
//!   their effect on the plain recipe was not measured), and time-to-accuracy tricks trained at
//!   another batch size than the combination's.

use std::path::PathBuf;

use crate::analysis::{noise_floor_half_width, time_to_target_verdict};
use crate::bench::plan::PlanRequest;
use crate::device::DeviceSpec;
use crate::engine::Engine;
use crate::error::Error;
use crate::results::schema::{
    CellKind, CellResult, Phase, Results, SpeedrunChoice, SpeedrunDecision, SpeedrunTrick, TtaSummary,
    Verdict,
};
use crate::results::store;
use crate::tricks::{Metric, Trick, TrickSet};
use crate::workloads::WorkloadId;

/// What `evidence` says when the speedrun takes the effects from its own ablation.
pub const THIS_RUN: &str = "this run";

/// A results file the speedrun takes measured effects from.
#[derive(Debug, Clone)]
pub struct Evidence {
    /// The file's path as given.
    pub source: String,
    /// Its results.
    pub results: Results,
}

/// Reads the results files given with `flag` (`--from`), refusing one that cannot be read or
/// parsed, or that was measured on another kind of device than `device` (naming the flag and the
/// file).
pub fn load_evidence(flag: &str, paths: &[PathBuf], device: DeviceSpec) -> Result<Vec<Evidence>, Error> {
    paths
        .iter()
        .map(|path| {
            let results = store::load(path).map_err(|e| Error::from(e).context(flag))?;
            if results.run.device.is_cuda() != device.is_cuda() {
                return Err(Error::Invalid(format!(
                    "{flag} {}: measured on {}, and this run is on {device}; effects measured on another \
                     device do not carry over",
                    path.display(),
                    results.run.device
                )));
            }
            Ok(Evidence { source: path.display().to_string(), results })
        })
        .collect()
}

/// A trick with a significant effect: what it buys (a ratio, infinite where the reference never
/// reached the target) and the effect in words.
struct Candidate {
    trick: Trick,
    ratio: f64,
    effect: String,
}

/// The speedrun's choice for `workload` on `engine` from `evidence` (each file's source and
/// results): every trick of `request` that they measured on that engine, judged by the rules of
/// this module, the significant ones added largest effect first unless the set they would join
/// cannot run there. A trick measured in several files is taken from the first.
pub fn choose(
    evidence: &[(&str, &Results)],
    request: &PlanRequest,
    workload: WorkloadId,
    engine: Engine,
) -> SpeedrunChoice {
    let batch_size = request.time_to_accuracy_batch_size.unwrap_or(request.batch_size);
    let floor = noise_floor(evidence, workload);
    let judged = judge_each_once(evidence, |results| {
        throughput_judgements(results, workload, engine)
            .chain(time_to_accuracy_judgements(results, workload, engine, batch_size, floor))
            .filter(|(judgement, _)| request.tricks.contains(&judgement.trick))
            .collect()
    });
    let (combination, tricks) = combine(judged, |with| {
        with.not_applicable_reason_on(engine, workload, &request.hardware)
            .or_else(|| with.missing_source_reason(request.has_images))
    });
    let sources = evidence.iter().map(|(s, _)| (*s).to_owned()).collect();
    SpeedrunChoice {
        workload,
        engine,
        evidence: sources,
        batch_size,
        combination,
        tricks,
        noise_floor_half_width: floor,
    }
}

/// The fastest training step `evidence` shows for `workload` on libtorch: the tricks whose training
/// throughput was significantly faster than the baseline's (by the rule of this module), combined
/// largest effect first, each refused where `refusal` refuses the set it would join; a trick for which
/// `leave_out` gives a reason is left out whatever its effect. Returns the combination and the
/// decision on every trick measured.
pub fn fastest_step(
    evidence: &[(&str, &Results)],
    workload: WorkloadId,
    leave_out: impl Fn(Trick) -> Option<String>,
    refusal: impl Fn(&TrickSet) -> Option<String>,
) -> (Vec<Trick>, Vec<SpeedrunTrick>) {
    let judged = judge_each_once(evidence, |results| {
        throughput_judgements(results, workload, Engine::Libtorch)
            .map(|(judgement, candidate)| match leave_out(judgement.trick) {
                Some(why) => left_out(judgement.trick, judgement.effect, why),
                None => (judgement, candidate),
            })
            .collect()
    });
    combine(judged, refusal)
}

/// The judgements `judge` makes of each file of `evidence`, a trick judged in several files taken
/// from the first.
fn judge_each_once<'r>(
    evidence: &[(&str, &'r Results)],
    judge: impl Fn(&'r Results) -> Vec<Judgement>,
) -> Vec<Judgement> {
    let mut judged: Vec<Judgement> = Vec::new();
    for (_, results) in evidence {
        for judgement in judge(results) {
            if !judged.iter().any(|(known, _)| known.trick == judgement.0.trick) {
                judged.push(judgement);
            }
        }
    }
    judged
}

/// The combination of the significant tricks of `judgements`, largest effect first, each refused where
/// `refusal` refuses the set it would join; and every decision, the candidates' first.
fn combine(
    judgements: Vec<Judgement>,
    refusal: impl Fn(&TrickSet) -> Option<String>,
) -> (Vec<Trick>, Vec<SpeedrunTrick>) {
    let mut decided = Vec::new();
    let mut candidates = Vec::new();
    for (judgement, candidate) in judgements {
        match candidate {
            Some(c) => candidates.push(c),
            None => decided.push(judgement),
        }
    }
    candidates.sort_by(|a, b| b.ratio.total_cmp(&a.ratio));
    let mut combination: Vec<Trick> = Vec::new();
    let mut considered = Vec::new();
    for c in candidates {
        let with: TrickSet = combination.iter().copied().chain([c.trick]).collect();
        let reason = refusal(&with);
        let decision = if reason.is_some() { SpeedrunDecision::Refused } else { SpeedrunDecision::Added };
        if reason.is_none() {
            combination.push(c.trick);
        }
        considered.push(judged(c.trick, &c.effect, decision, reason));
    }
    considered.extend(decided);
    (combination, considered)
}

/// The largest half-width of `workload`'s A/A noise floors in `evidence`.
fn noise_floor(evidence: &[(&str, &Results)], workload: WorkloadId) -> Option<f64> {
    evidence.iter().filter_map(|(_, r)| noise_floor_half_width(r, workload)).reduce(f64::max)
}

/// A trick's decision, with the candidate it makes when its effect was significant.
type Judgement = (SpeedrunTrick, Option<Candidate>);

/// The trick of a cell that holds one trick and is no reference cell.
fn single_trick(cell: &CellResult) -> Option<Trick> {
    let plain = cell.key.reference_for.is_none() && !cell.key.aa_control;
    cell.key.tricks.ablated_trick().filter(|_| plain)
}

/// The judgements of `workload`'s single-trick throughput comparisons on `engine` in `results`
/// (tricks judged by time to accuracy are judged from their time-to-accuracy cells instead).
fn throughput_judgements(
    results: &Results,
    workload: WorkloadId,
    engine: Engine,
) -> impl Iterator<Item = Judgement> + '_ {
    results.comparisons.iter().filter_map(move |c| {
        let cell = results
            .cells
            .iter()
            .find(|cell| cell.id() == c.cell && cell.key.workload == workload && cell.key.engine == engine)?;
        let trick = single_trick(cell).filter(|t| t.metric() != Metric::TimeToAccuracy)?;
        let effect = format!(
            "{:.2}× [{:.2}, {:.2}] {}",
            c.speedup,
            c.speedup_ci_low,
            c.speedup_ci_high,
            match cell.key.kind {
                CellKind::Throughput { phase: Phase::Eval } => "evaluation throughput",
                _ => "training throughput",
            }
        );
        Some(match trick.metric() {
            Metric::Memory => left_out(trick, effect, "judged by peak memory, not speed".to_owned()),
            Metric::EvalThroughput => left_out(
                trick,
                effect,
                "speeds up evaluation, which time to target does not count".to_owned(),
            ),
            _ if !trick.compared_with_baseline() => left_out(trick, effect, own_reference_reason(trick)),
            _ if c.verdict == Verdict::Faster => added(trick, effect, c.speedup),
            _ => {
                let why = match c.verdict {
                    Verdict::WithinNoise => "faster, but within the A/A noise floor",
                    Verdict::Slower => "slower",
                    _ => "no significant effect (the interval holds 1)",
                };
                not_significant(trick, effect, why)
            }
        })
    })
}

/// `trick`, with its measured `effect`, judged as `decision` (with `reason` when it is not added).
fn judged(trick: Trick, effect: &str, decision: SpeedrunDecision, reason: Option<String>) -> SpeedrunTrick {
    SpeedrunTrick { trick, metric: trick.metric(), effect: effect.to_owned(), decision, reason }
}

/// `trick` added to the candidates, with `ratio` its effect.
fn added(trick: Trick, effect: String, ratio: f64) -> Judgement {
    (judged(trick, &effect, SpeedrunDecision::Added, None), Some(Candidate { trick, ratio, effect }))
}

/// `trick` left out of the combination before its effect is weighed, for `why`.
fn left_out(trick: Trick, effect: String, why: String) -> Judgement {
    (judged(trick, &effect, SpeedrunDecision::LeftOut, Some(why)), None)
}

/// `trick` measured, but its effect not significant, for `why`.
fn not_significant(trick: Trick, effect: String, why: &str) -> Judgement {
    (judged(trick, &effect, SpeedrunDecision::NotSignificant, Some(why.to_owned())), None)
}

/// Why a trick judged against a reference other than the baseline is left out of the combination.
fn own_reference_reason(trick: Trick) -> String {
    format!(
        "judged against {}, not the plain recipe: its effect on the recipe the combination starts \
         from was not measured",
        trick.reference_text().unwrap_or_else(|| "its own reference".to_owned())
    )
}

/// The judgements of `workload`'s single-trick time-to-accuracy configurations on `engine` in
/// `results`, for a combination trained at `batch_size`, with `floor` the A/A noise floor's
/// half-width.
fn time_to_accuracy_judgements<'r>(
    results: &'r Results,
    workload: WorkloadId,
    engine: Engine,
    batch_size: usize,
    floor: Option<f64>,
) -> impl Iterator<Item = Judgement> + 'r {
    let on = move |s: &TtaSummary| s.workload == workload && s.engine == engine;
    results.time_to_accuracy.iter().filter_map(move |s| {
        let mut tricks = s.tricks.iter();
        let trick = match (tricks.next(), tricks.next(), s.reference_for) {
            (Some(t), None, None) if on(s) && t.metric() == Metric::TimeToAccuracy => t,
            _ => return None,
        };
        let seeds = format!("{}/{} seeds reached it", s.reached, s.seeds);
        let effect = match s.versus_text() {
            Some(versus) => format!("{versus}; {seeds}"),
            None => seeds,
        };
        if !trick.compared_with_baseline() {
            return Some(left_out(trick, effect, own_reference_reason(trick)));
        }
        if s.batch_size != batch_size {
            let why = format!(
                "trained at batch {}, and the combination trains at batch {batch_size}",
                s.batch_size
            );
            return Some(left_out(trick, effect, why));
        }
        let reference = results.time_to_accuracy.iter().find(|r| {
            on(r) && r.tricks.is_baseline() && r.reference_for.is_none() && r.batch_size == batch_size
        });
        Some(match reference.and_then(|r| sooner_ratio(results, s, r, floor.unwrap_or(0.0))) {
            Some(ratio) => added(trick, effect, ratio),
            None => not_significant(
                trick,
                effect,
                "not sooner than the baseline on every seed by more than the A/A noise floor",
            ),
        })
    })
}

/// The time-to-target ratio of configuration `trick` over `reference` (infinite where the
/// reference never reached the target) when the trick reached it significantly sooner
/// ([`time_to_target_verdict`] with `floor`).
fn sooner_ratio(results: &Results, trick: &TtaSummary, reference: &TtaSummary, floor: f64) -> Option<f64> {
    (time_to_target_verdict(&results.cells, trick, reference, floor) == Verdict::Faster)
        .then(|| trick.speedup.unwrap_or(f64::INFINITY))
}
