//! The factorial design's estimates, derived from its cells: each trick's main effect and each
//! pair's interaction on log throughput and log peak memory, the design's aliasing, and the
//! configuration its model predicts best against that configuration measured.

use serde::{Deserialize, Serialize};

use super::schema::{CellId, Verdict};
use crate::engine::Engine;
use crate::vocabulary::{Metric, Trick, WorkloadId};

/// The fractional-factorial design of one workload on one engine, estimated.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FactorialAnalysis {
    /// The workload.
    pub workload: WorkloadId,
    /// The engine the configurations trained on (absent: libtorch).
    #[serde(default, skip_serializing_if = "Engine::is_libtorch")]
    pub engine: Engine,
    /// The tricks turned on and off (the design's factors), in the order of their letters in
    /// `generators` and `defining_relation`: the first is A, the second B, and so on.
    pub factors: Vec<Trick>,
    /// The configurations the design measures (2^(k−p) for k factors and p generators).
    pub configurations: usize,
    /// How each generated factor's setting follows from the others' ("E = −ABCD": E is on
    /// exactly where an odd number of A, B, C, D are on); empty for a full factorial.
    pub generators: Vec<String>,
    /// The defining relation's words ("I = −ABCDE"); empty for a full factorial.
    pub defining_relation: Vec<String>,
    /// The design's resolution: the length of its shortest defining word (`None`: a full
    /// factorial, in which no effect is aliased with another).
    pub resolution: Option<u32>,
    /// The processes (rounds) the estimates come from; every configuration was an arm of each.
    pub processes: usize,
    /// The half-width of the paired A/A noise floor the verdicts are read against (a fraction:
    /// 0.02 is ±2%); `None` where no control was measured.
    pub noise_floor_half_width: Option<f64>,
    /// Each factor's main effect, in factor order.
    pub main_effects: Vec<MainEffect>,
    /// Each pair of factors' interaction, in factor order (AB, AC, …, BC, …).
    pub interactions: Vec<Interaction>,
    /// The configuration the fitted model (main effects and two-trick interactions) predicts
    /// fastest, with what it measured against the baseline; `None` before the design has an
    /// estimate.
    pub best: Option<BestConfiguration>,
    /// The tricks asked for that are not factors of the design, each with the reason (they are
    /// measured alone against the baseline, as in the ablation).
    pub left_out: Vec<LeftOutTrick>,
}

/// An estimated ratio with its 95% interval, bootstrapped over processes.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct RatioEstimate {
    /// The ratio (1: no effect).
    pub ratio: f64,
    /// The interval's low end.
    pub ci_low: f64,
    /// The interval's high end.
    pub ci_high: f64,
}

/// A trick's main effect: the ratio of the configurations with it on to those with it off,
/// averaged over the other factors' settings (the geometric mean of the two halves' ratio).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct MainEffect {
    /// The trick.
    pub trick: Trick,
    /// What the trick is judged by (training throughput, or peak memory).
    pub metric: Metric,
    /// The effect on training throughput (above 1: faster).
    pub throughput: RatioEstimate,
    /// The throughput verdict, read against the noise floor as a comparison's is.
    pub verdict: Verdict,
    /// The effect on peak memory (below 1: less memory); `None` where a configuration's peak was
    /// not measured.
    pub memory: Option<RatioEstimate>,
    /// The effects this one is aliased with in the fraction (words of the factors' letters, with
    /// a minus where the alias enters negated); empty in a full factorial.
    pub aliased_with: Vec<String>,
}

/// Two tricks' interaction: how far their effect together departs from what their own effects
/// predict, averaged over the other factors' settings.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Interaction {
    /// The two tricks, in factor order.
    pub tricks: [Trick; 2],
    /// Together ÷ predicted on training throughput: `together` ÷ `predicted` (above 1: they
    /// do better together than their own effects predict).
    pub throughput: RatioEstimate,
    /// Throughput with both on ÷ with both off.
    pub together: f64,
    /// The product of each one's own effect (with the other off): what both on would give were
    /// their effects independent.
    pub predicted: f64,
    /// Synergy, antagonism, or additive within the floor.
    pub verdict: InteractionVerdict,
    /// Together ÷ predicted on peak memory; `None` where a peak was not measured.
    pub memory: Option<RatioEstimate>,
    /// The effects this one is aliased with in the fraction; empty in a full factorial.
    pub aliased_with: Vec<String>,
}

/// What an interaction is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum InteractionVerdict {
    /// Together better than their own effects predict: the interval lies above 1, beyond the
    /// noise floor.
    Synergy,
    /// Together worse than their own effects predict: the interval lies below 1, beyond the
    /// noise floor.
    Antagonism,
    /// Their effects add up (multiply, in throughput) within the noise floor, or the interval
    /// cannot tell.
    Additive,
}

impl InteractionVerdict {
    /// The verdict in a word.
    pub fn label(self) -> &'static str {
        match self {
            InteractionVerdict::Synergy => "synergy",
            InteractionVerdict::Antagonism => "antagonism",
            InteractionVerdict::Additive => "additive",
        }
    }
}

/// The configuration the model predicts fastest, predicted against measured.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct BestConfiguration {
    /// Its tricks (the baseline where none is predicted to help).
    pub tricks: Vec<Trick>,
    /// The model's prediction of its throughput ÷ the baseline's.
    pub predicted: RatioEstimate,
    /// Its cell, measured against the baseline (`None` where the run measured no A/A control to
    /// name the design's setting by).
    pub cell: Option<CellId>,
    /// What its cell measured against the baseline (its comparison); `None` until measured.
    pub measured: Option<RatioEstimate>,
    /// Whether the configuration is one of the design's (then measured in the design's
    /// processes), rather than measured after them.
    pub in_design: bool,
}

/// A trick asked for that the design does not vary.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LeftOutTrick {
    /// The trick.
    pub trick: Trick,
    /// Why it is not a factor.
    pub reason: String,
}
