//! Main effects and two-trick interactions from the factorial's configurations.
//!
//! Every configuration is an arm of the baseline's multi-arm process in each round, so each gives,
//! per process, the log ratios of its windows to the baseline's windows beside them. The all-off
//! configuration is the A/A control, an arm like the others (the baseline's own windows are the
//! reference every ratio shares). A configuration's value is the median of its log ratios pooled
//! over the processes; an effect is the standard contrast of those values, the mean of the
//! configurations with the effect's level +1 less the mean of those with −1 (a main effect: the
//! trick on against off, averaged over the other tricks' settings). The interval of every effect
//! comes from one bootstrap that resamples as the experiment was made: processes with replacement
//! (the same processes for every configuration, so what a process shares cancels as it does in
//! the contrasts), then each configuration's pairs within each drawn process; each end is widened
//! by √(n/(n−1)) for n processes on the log scale, as a paired comparison's is. Peak memory has one
//! value a configuration and process, and is resampled over processes only.

use rand::{RngExt, SeedableRng};
use rand_chacha::ChaCha8Rng;

use super::fraction::{level, Fraction};
use super::{beyond_the_most, left_out_reason, mask_of};
use crate::engine::Engine;
use crate::results::factorial::{
    BestConfiguration, FactorialAnalysis, Interaction, InteractionVerdict, LeftOutTrick, MainEffect,
    RatioEstimate,
};
use crate::results::schema::{
    CellKey, CellKind, CellResult, CellStatus, Comparison, MeasurementDesign, NoiseFloor, Phase,
    ProcessMeasurement, Verdict,
};
use crate::stats::{median, percentile_interval_at, BOOTSTRAP_RESAMPLES, CONFIDENCE_LEVEL};
use crate::tricks::{memory_figure_of, Trick, TrickSet};
use crate::vocabulary::WorkloadId;

/// The seed of the factorial's bootstrap.
const BOOTSTRAP_SEED: u64 = 0x6661_6374_6f72_6961;

/// One configuration of the fraction as measured: which factors it turns on, each used process's
/// pair log ratios, and each used process's log peak memory.
struct Configuration {
    run: u32,
    log_ratios: Vec<Vec<f64>>,
    log_memory: Vec<Option<f64>>,
}

/// What the design of one workload on one engine measured, over the processes in which every
/// configuration was measured.
struct Observations {
    workload: WorkloadId,
    engine: Engine,
    factors: Vec<Trick>,
    fraction: Fraction,
    configurations: Vec<Configuration>,
    processes: usize,
}

/// The effects the design estimates, as masks of factors: each factor, then each pair in order.
fn effect_masks(factors: usize) -> Vec<u32> {
    let singles = (0..factors).map(|i| 1u32 << i);
    let pairs = (0..factors).flat_map(move |i| (i + 1..factors).map(move |j| (1u32 << i) | (1 << j)));
    singles.chain(pairs).collect()
}

/// The contrast of `mask` over configuration values `values` (one per run of `runs`): the mean
/// where its level is +1 less the mean where it is −1.
fn contrast(runs: &[u32], values: &[f64], mask: u32) -> f64 {
    let half = runs.len() as f64 / 2.0;
    runs.iter().zip(values).map(|(&run, v)| level(run, mask) * v).sum::<f64>() / half
}

/// The weights of the effects of `masks` in the model's log ratio of configuration `run` to the
/// baseline (every factor off), of the effects `kept` keeps: each effect is twice its
/// coefficient in the ±1 model, so its weight is half the change of its level.
fn prediction_weights(masks: &[u32], kept: &[bool], run: u32) -> Vec<f64> {
    masks
        .iter()
        .zip(kept)
        .map(|(&mask, &k)| if k { (level(run, mask) - level(0, mask)) / 2.0 } else { 0.0 })
        .collect()
}

/// The weighted sum of `values`.
fn weighted(weights: &[f64], values: &[f64]) -> f64 {
    weights.iter().zip(values).map(|(w, v)| w * v).sum()
}

/// The configuration of `factors` factors the model of the `kept` effects `estimates` predicts
/// fastest (the fewest tricks among equals).
fn best_run(masks: &[u32], estimates: &[f64], kept: &[bool], factors: usize) -> u32 {
    let mut runs: Vec<u32> = (0..1u32 << factors).collect();
    runs.sort_by_key(|r| r.count_ones());
    let value = |run: u32| weighted(&prediction_weights(masks, kept, run), estimates);
    runs.into_iter()
        .fold(
            (0, 0.0),
            |(best, top), run| if value(run) > top + 1e-12 { (run, value(run)) } else { (best, top) },
        )
        .0
}

/// Each effect of `masks` as the contrast of the configuration values `values`.
fn contrasts(observations: &Observations, masks: &[u32], values: &[f64]) -> Vec<f64> {
    let runs: Vec<u32> = observations.configurations.iter().map(|c| c.run).collect();
    masks.iter().map(|&m| contrast(&runs, values, m)).collect()
}

/// Statistics on the log scale with their bootstrap draws: `point[i]` and its draws `draws[i]`,
/// from `processes` processes.
struct Bootstrapped {
    point: Vec<f64>,
    draws: Vec<Vec<f64>>,
    processes: usize,
}

impl Bootstrapped {
    /// Statistic `i`'s point and interval at `level`, each end widened by √(n/(n−1)) for n
    /// processes.
    fn interval(&self, i: usize, level_: f64) -> (f64, f64, f64) {
        self.widened(self.point[i], self.draws[i].clone(), level_)
    }

    /// The point and interval at `level` of the weighted sum of the statistics.
    fn combined(&self, weights: &[f64], level_: f64) -> (f64, f64, f64) {
        let resamples = self.draws.first().map_or(0, Vec::len);
        let draws =
            (0..resamples).map(|b| weights.iter().zip(&self.draws).map(|(w, d)| w * d[b]).sum()).collect();
        self.widened(weighted(weights, &self.point), draws, level_)
    }

    /// `point` with the percentile interval of `draws` at `level`, widened.
    fn widened(&self, point: f64, draws: Vec<f64>, level_: f64) -> (f64, f64, f64) {
        let n = self.processes as f64;
        let widen = if self.processes > 1 { (n / (n - 1.0)).sqrt() } else { 1.0 };
        let (low, high) = percentile_interval_at(draws, level_);
        (point, point + widen * (low - point), point + widen * (high - point))
    }
}

/// Each effect on log throughput, bootstrapped: the contrasts of the configurations' medians, and
/// those of resamples of processes (shared by every configuration) and of each configuration's
/// pairs within each drawn process.
fn throughput_effects(observations: &Observations) -> Bootstrapped {
    let masks = effect_masks(observations.factors.len());
    let pooled = |c: &Configuration| median(&c.log_ratios.concat()).unwrap_or(0.0);
    let values: Vec<f64> = observations.configurations.iter().map(pooled).collect();
    let point = contrasts(observations, &masks, &values);
    let n = observations.processes;
    let mut rng = ChaCha8Rng::seed_from_u64(BOOTSTRAP_SEED);
    let mut draws: Vec<Vec<f64>> = vec![Vec::with_capacity(BOOTSTRAP_RESAMPLES); point.len()];
    let mut pool = Vec::new();
    for _ in 0..BOOTSTRAP_RESAMPLES {
        let picked: Vec<usize> =
            if n > 1 { (0..n).map(|_| rng.random_range(0..n)).collect() } else { vec![0] };
        let values: Vec<f64> = observations
            .configurations
            .iter()
            .map(|c| {
                pool.clear();
                for &p in &picked {
                    let ratios = &c.log_ratios[p];
                    pool.extend((0..ratios.len()).map(|_| ratios[rng.random_range(0..ratios.len())]));
                }
                median(&pool).unwrap_or(0.0)
            })
            .collect();
        for (d, s) in draws.iter_mut().zip(contrasts(observations, &masks, &values)) {
            d.push(s);
        }
    }
    Bootstrapped { point, draws, processes: n }
}

/// Each effect on log peak memory, bootstrapped over processes (a configuration has one peak a
/// process); `None` where a configuration's peak is missing in a used process.
fn memory_effects(observations: &Observations) -> Option<Bootstrapped> {
    let masks = effect_masks(observations.factors.len());
    let memory: Vec<Vec<f64>> = observations
        .configurations
        .iter()
        .map(|c| c.log_memory.iter().copied().collect())
        .collect::<Option<_>>()?;
    let n = observations.processes;
    let values = |picked: &[usize]| -> Vec<f64> {
        memory
            .iter()
            .map(|c| median(&picked.iter().map(|&p| c[p]).collect::<Vec<_>>()).unwrap_or(0.0))
            .collect()
    };
    let point = contrasts(observations, &masks, &values(&(0..n).collect::<Vec<_>>()));
    let mut rng = ChaCha8Rng::seed_from_u64(BOOTSTRAP_SEED);
    let mut draws: Vec<Vec<f64>> = vec![Vec::with_capacity(BOOTSTRAP_RESAMPLES); point.len()];
    for _ in 0..BOOTSTRAP_RESAMPLES {
        let picked: Vec<usize> = (0..n).map(|_| rng.random_range(0..n)).collect();
        for (d, s) in draws.iter_mut().zip(contrasts(observations, &masks, &values(&picked))) {
            d.push(s);
        }
    }
    Some(Bootstrapped { point, draws, processes: n })
}

/// Whether `key` is a configuration cell of the factorial of `workload` on `engine` (the A/A
/// control among them, standing for the all-off configuration).
fn is_configuration(key: &CellKey, workload: WorkloadId, engine: Engine) -> bool {
    (key.workload, key.engine) == (workload, engine)
        && key.kind == (CellKind::Throughput { phase: Phase::Train })
        && key.reference_for.is_none()
        && !key.alone
        && (key.aa_control || !key.tricks.is_baseline())
}

/// The factors of the design of `workload` on `engine` in `cells`: every trick of a configuration
/// of two or more tricks (the fraction's other configurations), in catalogue order.
fn factors_of(cells: &[CellResult], workload: WorkloadId, engine: Engine) -> Vec<Trick> {
    let mut factors: Vec<Trick> = cells
        .iter()
        .filter(|c| is_configuration(&c.key, workload, engine) && c.key.tricks.len() >= 2)
        .flat_map(|c| c.key.tricks.iter())
        .collect();
    factors.sort();
    factors.dedup();
    factors
}

/// The paired process of `cell` in `round`, if it has one.
fn paired_in(cell: &CellResult, round: usize) -> Option<&ProcessMeasurement> {
    cell.processes.iter().find(|p| p.round == round && p.paired.is_some())
}

/// What the design of `workload` on `engine` measured, over the rounds in which every
/// configuration of its fraction was measured in pairs; `None` where it has fewer than two
/// factors or no such round.
fn observations(cells: &[CellResult], workload: WorkloadId, engine: Engine) -> Option<Observations> {
    let factors = factors_of(cells, workload, engine);
    let fraction = Fraction::for_factors(factors.len())?;
    let figure = memory_figure_of(factors.iter().copied());
    let measured: Vec<(u32, &CellResult)> = cells
        .iter()
        .filter(|c| is_configuration(&c.key, workload, engine) && c.status == CellStatus::Ok)
        .filter_map(|c| Some((mask_of(&c.key.tricks, &factors)?, c)))
        .collect();
    let found: Vec<&CellResult> = fraction
        .runs()
        .iter()
        .map(|run| measured.iter().find(|(m, _)| m == run).map(|(_, c)| *c))
        .collect::<Option<_>>()?;
    let rounds: Vec<usize> = (0..found.iter().flat_map(|c| &c.processes).map(|p| p.round + 1).max()?)
        .filter(|&r| found.iter().all(|c| paired_in(c, r).is_some()))
        .collect();
    if rounds.is_empty() {
        return None;
    }
    let configurations = fraction
        .runs()
        .into_iter()
        .zip(&found)
        .map(|(run, cell)| {
            let processes: Vec<_> = rounds.iter().filter_map(|&r| paired_in(cell, r)).collect();
            let ratios = |p: &&ProcessMeasurement| {
                p.paired.as_ref().map(|w| w.ratios().iter().filter(|r| **r > 0.0).map(|r| r.ln()).collect())
            };
            Configuration {
                run,
                log_ratios: processes.iter().filter_map(ratios).collect(),
                log_memory: processes
                    .iter()
                    .map(|p| p.memory.bytes(figure).filter(|&b| b > 0).map(|b| (b as f64).ln()))
                    .collect(),
            }
        })
        .collect::<Vec<_>>();
    if configurations.iter().any(|c| c.log_ratios.iter().any(Vec::is_empty)) {
        return None;
    }
    Some(Observations { workload, engine, factors, fraction, configurations, processes: rounds.len() })
}

/// The interval of every main effect and interaction (as the report gives them: an interaction
/// as together ÷ predicted) of the design of `workload` on `engine` in `cells` at confidence
/// `level`, for the sequential rule; `None` where the design has no estimate yet.
pub fn interim_estimates(
    cells: &[CellResult],
    workload: WorkloadId,
    engine: Engine,
    level_: f64,
) -> Option<Vec<RatioEstimate>> {
    let observations = observations(cells, workload, engine)?;
    let k = observations.factors.len();
    let effects = throughput_effects(&observations);
    let scale = |i: usize| if i < k { 1.0 } else { 2.0 };
    Some((0..effects.point.len()).map(|i| ratio(effects.interval(i, level_), scale(i))).collect())
}

/// Whether the design of `workload` on `engine` has an estimate in `cells` yet and each of its
/// intervals at `level` satisfies `decided`.
pub fn interim_decided(
    cells: &[CellResult],
    workload: WorkloadId,
    engine: Engine,
    level_: f64,
    decided: impl Fn(&RatioEstimate) -> bool,
) -> bool {
    interim_estimates(cells, workload, engine, level_).is_some_and(|all| all.iter().all(decided))
}

/// A log-scale estimate `(point, low, high)` times `scale`, as a ratio.
fn ratio((point, low, high): (f64, f64, f64), scale: f64) -> RatioEstimate {
    RatioEstimate { ratio: (scale * point).exp(), ci_low: (scale * low).exp(), ci_high: (scale * high).exp() }
}

/// The factorial analyses of `cells`: one per workload and engine whose design has an estimate,
/// its verdicts read against the paired floors of `floors`, its best configuration's measurement
/// from `comparisons`.
pub fn analyse(
    cells: &[CellResult],
    comparisons: &[Comparison],
    floors: &[NoiseFloor],
) -> Vec<FactorialAnalysis> {
    let mut settings: Vec<(WorkloadId, Engine)> =
        cells.iter().map(|c| (c.key.workload, c.key.engine)).collect();
    settings.dedup();
    let mut analyses: Vec<FactorialAnalysis> = Vec::new();
    for (workload, engine) in settings {
        if analyses.iter().any(|a| (a.workload, a.engine) == (workload, engine)) {
            continue;
        }
        let Some(observations) = observations(cells, workload, engine) else { continue };
        let floor = floors
            .iter()
            .find(|f| f.design == MeasurementDesign::Paired && (f.workload, f.engine) == (workload, engine))
            .map(|f| f.half_width);
        analyses.push(analysis(&observations, cells, comparisons, workload, engine, floor));
    }
    analyses
}

/// The analysis of one design's `observations`.
fn analysis(
    observations: &Observations,
    cells: &[CellResult],
    comparisons: &[Comparison],
    workload: WorkloadId,
    engine: Engine,
    floor: Option<f64>,
) -> FactorialAnalysis {
    let k = observations.factors.len();
    let masks = effect_masks(k);
    let effects = throughput_effects(observations);
    let intervals: Vec<(f64, f64, f64)> =
        (0..masks.len()).map(|i| effects.interval(i, CONFIDENCE_LEVEL)).collect();
    let memory = memory_effects(observations)
        .map(|m| (0..masks.len()).map(|i| m.interval(i, CONFIDENCE_LEVEL)).collect::<Vec<_>>());
    let design =
        Estimated { observations, masks: &masks, intervals: &intervals, memory: memory.as_deref(), floor };
    // The best configuration is chosen by the effects whose verdict is decided: a trick or a pair
    // whose interval holds no effect adds nothing to the prediction.
    let kept: Vec<bool> = (0..masks.len())
        .map(|i| matches!(main_verdict(&design.throughput(i), floor), Verdict::Faster | Verdict::Slower))
        .collect();
    let best = best_run(&masks, &effects.point, &kept, k);
    let predicted = ratio(effects.combined(&prediction_weights(&masks, &kept, best), CONFIDENCE_LEVEL), 1.0);
    FactorialAnalysis {
        workload,
        engine,
        factors: observations.factors.clone(),
        configurations: observations.configurations.len(),
        generators: observations.fraction.generator_texts(),
        defining_relation: observations
            .fraction
            .defining_relation()
            .iter()
            .map(|w| format!("I = {w}"))
            .collect(),
        resolution: observations.fraction.resolution(),
        processes: observations.processes,
        noise_floor_half_width: floor,
        main_effects: (0..k).map(|i| design.main_effect(i)).collect(),
        interactions: (k..masks.len()).map(|i| design.interaction(i)).collect(),
        best: Some(best_configuration(observations, cells, comparisons, best, predicted)),
        left_out: left_out(cells, workload, &observations.factors),
    }
}

/// A design's effects estimated: the log-scale intervals of each effect of `masks` on throughput
/// and on memory, and the floor their verdicts are read against.
struct Estimated<'a> {
    observations: &'a Observations,
    masks: &'a [u32],
    intervals: &'a [(f64, f64, f64)],
    memory: Option<&'a [(f64, f64, f64)]>,
    floor: Option<f64>,
}

impl Estimated<'_> {
    /// How effect `i` is reported: a main effect as its contrast, an interaction as together ÷
    /// predicted, twice its contrast on the log scale.
    fn scale(&self, i: usize) -> f64 {
        if i < self.observations.factors.len() {
            1.0
        } else {
            2.0
        }
    }

    /// Effect `i` on throughput, as reported.
    fn throughput(&self, i: usize) -> RatioEstimate {
        ratio(self.intervals[i], self.scale(i))
    }

    /// The effects effect `i` is aliased with.
    fn aliases(&self, i: usize) -> Vec<String> {
        self.observations.fraction.aliases(self.masks[i]).iter().map(ToString::to_string).collect()
    }

    /// Main effect `i`.
    fn main_effect(&self, i: usize) -> MainEffect {
        let trick = self.observations.factors[i];
        let throughput = self.throughput(i);
        MainEffect {
            trick,
            metric: trick.metric(),
            throughput,
            verdict: main_verdict(&throughput, self.floor),
            memory: self.memory.map(|m| ratio(m[i], 1.0)),
            aliased_with: self.aliases(i),
        }
    }

    /// Interaction `i` (an index past the main effects).
    fn interaction(&self, i: usize) -> Interaction {
        let factors = &self.observations.factors;
        let pair: Vec<usize> = (0..factors.len()).filter(|f| self.masks[i] & (1 << f) != 0).collect();
        let both = self.intervals[pair[0]].0 + self.intervals[pair[1]].0;
        let throughput = self.throughput(i);
        Interaction {
            tricks: [factors[pair[0]], factors[pair[1]]],
            throughput,
            together: both.exp(),
            predicted: (both - 2.0 * self.intervals[i].0).exp(),
            verdict: interaction_verdict(&throughput, self.floor),
            memory: self.memory.map(|m| ratio(m[i], 2.0)),
            aliased_with: self.aliases(i),
        }
    }
}

/// The best configuration `run` with its prediction and, where its cell was compared with the
/// baseline, its measurement.
fn best_configuration(
    observations: &Observations,
    cells: &[CellResult],
    comparisons: &[Comparison],
    run: u32,
    predicted: RatioEstimate,
) -> BestConfiguration {
    let factors = &observations.factors;
    let tricks: Vec<Trick> = (0..factors.len()).filter(|i| run & (1 << i) != 0).map(|i| factors[i]).collect();
    let set: TrickSet = tricks.iter().copied().collect();
    let (workload, engine) = (observations.workload, observations.engine);
    let template =
        cells.iter().find(|c| c.key.aa_control && is_configuration(&c.key, workload, engine)).map(|c| &c.key);
    let key = template.map(|k| CellKey { tricks: set.clone(), aa_control: false, ..k.clone() });
    let cell = key.as_ref().map(CellKey::id);
    let measured = comparisons.iter().find(|c| Some(&c.cell) == cell.as_ref()).map(|c| RatioEstimate {
        ratio: c.speedup,
        ci_low: c.speedup_ci_low,
        ci_high: c.speedup_ci_high,
    });
    let in_design = observations.configurations.iter().any(|c| c.run == run);
    BestConfiguration { tricks, predicted, cell, measured, in_design }
}

/// The tricks of `workload`'s cells that are not `factors`, each with why.
fn left_out(cells: &[CellResult], workload: WorkloadId, factors: &[Trick]) -> Vec<LeftOutTrick> {
    let of_workload: Vec<&CellResult> = cells.iter().filter(|c| c.key.workload == workload).collect();
    let mut tricks: Vec<Trick> = of_workload.iter().flat_map(|c| c.key.tricks.iter()).collect();
    tricks.sort();
    tricks.dedup();
    let engines: Vec<Engine> = of_workload.iter().map(|c| c.key.engine).collect();
    tricks
        .into_iter()
        .filter(|t| !factors.contains(t))
        .map(|trick| {
            let not_applicable = of_workload.iter().find_map(|c| match &c.status {
                CellStatus::NotApplicable { reason, .. } if c.key.tricks.has(trick) => {
                    Some(format!("not applicable on {}: {reason}", c.key.engine))
                }
                _ => None,
            });
            let reason =
                left_out_reason(trick, not_applicable, factors, &engines).unwrap_or_else(beyond_the_most);
            LeftOutTrick { trick, reason }
        })
        .collect()
}

/// A main effect's throughput verdict: faster or slower where its interval excludes 1, within
/// the noise where its ratio is within the floor, as a comparison's verdict is read.
fn main_verdict(estimate: &RatioEstimate, floor: Option<f64>) -> Verdict {
    let within = floor.is_some_and(|f| (estimate.ratio - 1.0).abs() <= f);
    if estimate.ci_low > 1.0 {
        if within {
            Verdict::WithinNoise
        } else {
            Verdict::Faster
        }
    } else if estimate.ci_high < 1.0 {
        if within {
            Verdict::WithinNoise
        } else {
            Verdict::Slower
        }
    } else {
        Verdict::NoSignificantEffect
    }
}

/// An interaction's verdict: synergy or antagonism where its interval excludes 1 and its ratio
/// is beyond the floor, else additive.
fn interaction_verdict(estimate: &RatioEstimate, floor: Option<f64>) -> InteractionVerdict {
    match main_verdict(estimate, floor) {
        Verdict::Faster => InteractionVerdict::Synergy,
        Verdict::Slower => InteractionVerdict::Antagonism,
        Verdict::NoSignificantEffect | Verdict::WithinNoise => InteractionVerdict::Additive,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::results::schema::{Memory, PairedWindow, PairedWindows, Side};
    use crate::vocabulary::Precision;

    /// The factors of the planted design, in catalogue order.
    const FACTORS: [Trick; 3] = [Trick::AvoidSync, Trick::ZeroGradNone, Trick::ChannelsLast];

    /// A configuration's cell: `tricks` measured against the baseline in `rounds` processes, each
    /// with three pairs whose ratios are exactly `effect`, its peak `bytes`.
    fn cell(tricks: &[Trick], effect: f64, bytes: u64, rounds: usize) -> CellResult {
        let key = CellKey {
            workload: WorkloadId::Resnet8,
            tricks: tricks.iter().copied().collect(),
            batch_size: 32,
            seed: 0,
            kind: CellKind::Throughput { phase: Phase::Train },
            reference_for: None,
            aa_control: tricks.is_empty(),
            alone: false,
            engine: Engine::Libtorch,
        };
        let mut result = CellResult::new(key, CellStatus::Ok);
        result.processes = (0..rounds)
            .map(|round| {
                let windows = (0..3)
                    .flat_map(|pair| {
                        [(Side::Reference, 100.0), (Side::Trick, 100.0 * effect)]
                            .map(|(side, samples_per_s)| PairedWindow { pair, side, samples_per_s })
                    })
                    .collect();
                let reference =
                    CellKey { aa_control: false, tricks: TrickSet::baseline(), ..result.key.clone() }.id();
                ProcessMeasurement {
                    paired: Some(PairedWindows { reference, windows }),
                    memory: Memory { peak_allocated_bytes: Some(bytes), ..Memory::default() },
                    ..ProcessMeasurement::new(round, 1.0, Precision::Fp32)
                }
            })
            .collect();
        result
    }

    /// Every configuration of the full factorial of [`FACTORS`]: avoid-sync 1.10×, zero-grad-none
    /// 1.05×, channels-last 1.20× on their own, zero-grad-none with channels-last 10% short of
    /// their product; channels-last halving the peak memory.
    fn planted(rounds: usize) -> Vec<CellResult> {
        (0..8u32)
            .map(|run| {
                let on = |i: usize| run & (1 << i) != 0;
                let tricks: Vec<Trick> = (0..3).filter(|&i| on(i)).map(|i| FACTORS[i]).collect();
                let mut effect = 1.0;
                for (i, own) in [1.10, 1.05, 1.20].into_iter().enumerate() {
                    if on(i) {
                        effect *= own;
                    }
                }
                if on(1) && on(2) {
                    effect *= 0.90;
                }
                let bytes = if on(2) { 500 } else { 1000 };
                cell(&tricks, effect, bytes, rounds)
            })
            .collect()
    }

    fn close(a: f64, b: f64) -> bool {
        (a - b).abs() < 1e-9
    }

    #[test]
    fn the_contrasts_recover_planted_main_effects_and_interactions() {
        let analyses = analyse(&planted(2), &[], &[]);
        assert_eq!(analyses.len(), 1);
        let a = &analyses[0];
        assert_eq!(a.factors, FACTORS);
        assert_eq!((a.configurations, a.resolution, a.processes), (8, None, 2));
        let main = |t: Trick| a.main_effects.iter().find(|m| m.trick == t).unwrap();
        // A main effect averages over the other tricks: zero-grad-none's is 1.05 × √0.90.
        assert!(close(main(Trick::AvoidSync).throughput.ratio, 1.10));
        assert!(close(main(Trick::ZeroGradNone).throughput.ratio, 1.05 * 0.90f64.sqrt()));
        assert!(close(main(Trick::ChannelsLast).throughput.ratio, 1.20 * 0.90f64.sqrt()));
        assert!(close(main(Trick::ChannelsLast).memory.unwrap().ratio, 0.5));
        let pair =
            a.interactions.iter().find(|i| i.tricks == [Trick::ZeroGradNone, Trick::ChannelsLast]).unwrap();
        assert!(close(pair.throughput.ratio, 0.90));
        assert!(close(pair.together, 1.05 * 1.20 * 0.90) && close(pair.predicted, 1.05 * 1.20));
        assert_eq!(pair.verdict, InteractionVerdict::Antagonism, "an exact −10%, no noise");
        let other =
            a.interactions.iter().find(|i| i.tricks == [Trick::AvoidSync, Trick::ZeroGradNone]).unwrap();
        assert!(close(other.throughput.ratio, 1.0));
        assert_eq!(other.verdict, InteractionVerdict::Additive);
    }

    #[test]
    fn the_best_configuration_is_predicted_from_the_decided_effects() {
        let a = &analyse(&planted(2), &[], &[])[0];
        let best = a.best.as_ref().unwrap();
        // Every trick helps alone, but zero-grad-none with channels-last gives 1.05 × 1.20 × 0.90 =
        // 1.134, less than channels-last's 1.20 without it: avoid-sync and channels-last are best.
        assert_eq!(best.tricks, [Trick::AvoidSync, Trick::ChannelsLast]);
        assert!(close(best.predicted.ratio, 1.10 * 1.20));
        assert!(best.in_design);
    }

    #[test]
    fn each_engine_s_best_configuration_is_its_own_cell() {
        let libtorch = planted(2);
        let pytorch = planted(2).into_iter().map(|mut c| {
            c.key.engine = Engine::Pytorch;
            c
        });
        let cells: Vec<CellResult> = libtorch.into_iter().chain(pytorch).collect();
        let analyses = analyse(&cells, &[], &[]);
        assert_eq!(analyses.len(), 2);
        for a in &analyses {
            let cell = a.best.as_ref().and_then(|b| b.cell.clone()).unwrap();
            assert_eq!(cell.as_str().ends_with("@pytorch"), a.engine == Engine::Pytorch, "{cell}");
        }
    }

    #[test]
    fn a_design_missing_a_configuration_or_a_round_in_common_has_no_estimate() {
        let mut cells = planted(2);
        cells.remove(3);
        assert!(analyse(&cells, &[], &[]).is_empty(), "a configuration never measured");
        let mut cells = planted(2);
        cells[5].processes.truncate(1);
        let a = &analyse(&cells, &[], &[])[0];
        assert_eq!(a.processes, 1, "only the round every configuration was measured in");
    }

    #[test]
    fn tricks_the_design_does_not_vary_are_named_with_why() {
        let mut cells = planted(1);
        cells.push(cell(&[Trick::DebugOff], 2.0, 1000, 1));
        let a = &analyse(&cells, &[], &[])[0];
        assert_eq!(a.left_out.len(), 1);
        assert_eq!(a.left_out[0].trick, Trick::DebugOff);
        assert!(a.left_out[0].reason.contains("its own reference"), "{}", a.left_out[0].reason);
    }
}
