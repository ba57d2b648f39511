//! The factorial design: which tricks it varies, its two-level fraction ([`fraction`]), and the
//! main effects and two-trick interactions estimated from what its configurations measured
//! ([`estimate`]).
//!
//! A factor must be an arm of the baseline's multi-arm processes: judged by training throughput
//! or peak memory against the plain recipe, paired among other arms, applicable on every engine
//! of the run, and combinable with the factors before it. The others are measured alone against
//! the baseline, as in the ablation, and the analysis names each with its reason.

pub mod estimate;
pub mod fraction;
pub mod words;

pub use estimate::{analyse, interim_decided};
pub use fraction::{roman, Fraction, MAX_FACTORS, MIN_FACTORS};

use crate::engine::Engine;
use crate::results::factorial::FactorialAnalysis;
use crate::tricks::{Metric, Pairing, Trick, TrickSet};

/// Why `trick` is not a factor of a design whose factors are (or so far are) `factors` on
/// `engines`, where it is not; `None` where it can join them. The reasons, in the order they are
/// read: what the trick is ([`property_reason`]), why it does not apply (`not_applicable`, on an
/// engine of the run), a trick among `factors` it cannot share a configuration with, and the
/// design being full. The plan asks it of each trick in turn; the analysis of each left out.
pub fn left_out_reason(
    trick: Trick,
    not_applicable: Option<String>,
    factors: &[Trick],
    engines: &[Engine],
) -> Option<String> {
    property_reason(trick)
        .or(not_applicable)
        .or_else(|| conflict_reason(trick, factors, engines))
        .or_else(|| (factors.len() >= MAX_FACTORS).then(beyond_the_most))
}

/// The mask of `tricks` over `factors` (bit i: the ith factor); `None` where a trick is not a
/// factor.
pub(crate) fn mask_of(tricks: &TrickSet, factors: &[Trick]) -> Option<u32> {
    tricks.iter().try_fold(0u32, |mask, t| factors.iter().position(|&f| f == t).map(|i| mask | (1 << i)))
}

/// Why `trick`, by what it is, cannot be a factor of the design; `None` where it can.
fn property_reason(trick: Trick) -> Option<String> {
    match trick.metric() {
        Metric::TimeToAccuracy => {
            return Some(
                "judged by time to accuracy, which the design's throughput arms do not train to".into(),
            )
        }
        Metric::EvalThroughput => {
            return Some("judged by evaluation throughput; the design varies training configurations".into())
        }
        Metric::Throughput | Metric::Memory => {}
    }
    if let Some(reference) = trick.reference_text() {
        return Some(format!("compared with {reference}, not with the baseline the design varies around"));
    }
    match trick.pairing() {
        Pairing::Paired => None,
        Pairing::OwnPairs(why) => {
            Some(format!("paired in a process of its own ({why}), not among the design's arms"))
        }
        Pairing::Processes(why) => {
            Some(format!("measured one process per side ({why}), not among the design's arms"))
        }
    }
}

/// Why `trick` cannot join `factors` in one configuration on any of `engines`, if it cannot.
fn conflict_reason(trick: Trick, factors: &[Trick], engines: &[Engine]) -> Option<String> {
    let together: TrickSet = factors.iter().copied().chain([trick]).collect();
    engines.iter().find_map(|&engine| together.conflict_reason_on(engine))
}

/// Whether `tricks` is one of the configurations of `analysis`'s fraction (not the all-off
/// one, which the A/A control stands for).
pub fn is_configuration(analysis: &FactorialAnalysis, tricks: &TrickSet) -> bool {
    let mask = mask_of(tricks, &analysis.factors);
    let runs = Fraction::for_factors(analysis.factors.len()).map(|f| f.runs()).unwrap_or_default();
    mask.is_some_and(|m| m != 0 && runs.contains(&m))
}

/// Why a trick that passed every other test is not a factor: the design is full.
pub(crate) fn beyond_the_most() -> String {
    format!("the design varies at most {MAX_FACTORS} tricks; choose them with --tricks")
}
