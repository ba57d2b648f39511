//! What the raw measurements say: per-cell aggregates, paired comparisons with each trick's
//! reference, noise floors and time-to-accuracy summaries, the derived figures a results file
//! holds beside its cells. It sits above the results contract: judging a cell takes the trick
//! catalogue's facts (what each trick is compared with, which memory figure it is judged by) and
//! the GPUs' peak FLOP/s.

use crate::diagnosis::{diagnose, floor_for};
use crate::factorial;
use crate::measure::flops::peak_flops_per_s;
use crate::results::energy::EnergyMethod;
use crate::results::schema::{
    CellEnergy, CellId, CellKey, CellResult, CellStatus, Comparison, MeasurementDesign, Memory, NoiseFloor,
    PairedWindows, ProcessMeasurement, Results, Throughput, TimeToAccuracy, TtaSummary, Utilisation, Verdict,
};
use crate::results::system::SystemInfo;
use crate::stats::{
    coefficient_of_variation, mad_outliers, median, median_ci, paired_median_ci, paired_ratio_ci, Estimate,
};
use crate::tricks::{memory_figure_of, Trick, TrickSet};
use crate::vocabulary::{Design, Precision, WorkloadId};

/// Recomputes a cell's aggregates (throughput with its noise, memory, time-to-accuracy, energy,
/// utilisation) from its processes; `system` supplies the GPU whose peak MFU is measured against.
pub fn summarise_cell(cell: &mut CellResult, system: &SystemInfo) {
    let windows: Vec<f64> =
        cell.processes.iter().flat_map(|p| p.window_samples_per_s.iter().copied()).collect();
    cell.throughput = median_ci(&windows).map(|e| Throughput {
        median_samples_per_s: e.point,
        ci_low_samples_per_s: e.low,
        ci_high_samples_per_s: e.high,
        windows: windows.len(),
        coefficient_of_variation: coefficient_of_variation(&windows),
        outlier_windows: mad_outliers(&windows).len(),
    });
    cell.memory = cell.processes.iter().map(|p| p.memory).reduce(Memory::max);
    cell.warmup_memory = cell.processes.iter().filter_map(|p| p.warmup_memory).reduce(Memory::max);
    cell.time_to_accuracy = cell.processes.iter().find_map(|p| p.time_to_accuracy.clone());
    cell.energy = cell_energy(&cell.processes);
    cell.utilisation = match (&cell.throughput, cell.processes.first()) {
        (Some(t), Some(first)) => {
            Some(utilisation(t.median_samples_per_s, first.flops_per_sample, first.precision, system))
        }
        _ => None,
    };
}

/// Energy per sample over every process's energy span, when every process measured energy: the
/// joules over the samples the spans cover (the timed samples, in files that predate that count),
/// the mean power over the spans' total length, and the counter's quantisation summed over the
/// processes (where every process carries one).
fn cell_energy(processes: &[ProcessMeasurement]) -> Option<CellEnergy> {
    let energies: Vec<_> = processes
        .iter()
        .map(|p| p.energy.map(|e| (e, e.samples.unwrap_or(p.timed_samples))))
        .collect::<Option<_>>()?;
    let joules: f64 = energies.iter().map(|(e, _)| e.joules).sum();
    let samples: usize = energies.iter().map(|(_, n)| n).sum();
    let seconds: f64 = energies.iter().map(|(e, _)| e.interval_s).sum();
    let method = energies.first().map_or(EnergyMethod::default(), |(e, _)| e.method);
    let quantisation_j = energies.iter().map(|(e, _)| e.quantisation_j).sum::<Option<f64>>();
    (samples > 0 && seconds > 0.0).then(|| CellEnergy {
        method,
        joules,
        joules_per_sample: joules / samples as f64,
        mean_power_w: joules / seconds,
        interval_s: Some(seconds),
        quantisation_j,
    })
}

/// Achieved FLOP/s and, where the device's peak is known, model FLOPs utilisation.
fn utilisation(
    samples_per_s: f64,
    flops_per_sample: f64,
    precision: Precision,
    system: &SystemInfo,
) -> Utilisation {
    let peak = match &system.gpu {
        Some(gpu) => peak_flops_per_s(&gpu.name, precision),
        None => Err(format!(
            "no peak FLOP/s for this device ({})",
            system.gpu_unavailable.as_deref().unwrap_or("no GPU identified")
        )),
    };
    let achieved_flops_per_s = samples_per_s * flops_per_sample;
    Utilisation {
        flops_per_sample,
        achieved_flops_per_s,
        peak_flops_per_s: peak.as_ref().ok().copied(),
        mfu: peak.as_ref().ok().map(|p| achieved_flops_per_s / p),
        mfu_unavailable: peak.err(),
    }
}

/// Each finished trick cell against its reference cell (same workload, batch size, seed and
/// kind): the baseline, or the trick's own reference cell where its "off" side is not the plain
/// recipe (`debug-off`: debugging on); `max-batch` against the baseline at the smallest batch
/// measured (the recipe's). A reference cell that is not its trick's "off" side (`strict-fp32`)
/// is compared with the baseline too. Under the leave-one-out design, a set that lacks one trick
/// of the largest set is compared with that largest set instead (below 1: the missing trick was
/// helping).
pub fn comparisons(cells: &[CellResult], design: Design) -> Vec<Comparison> {
    let ok = |c: &&CellResult| c.status == CellStatus::Ok && c.throughput.is_some();
    let measured: Vec<&CellResult> = cells.iter().filter(ok).collect();
    measured
        .iter()
        .copied()
        .filter(|c| is_compared(&c.key))
        .filter_map(|cell| {
            if let Some(reference) = paired_reference(cell) {
                let measured_reference = measured.iter().copied().find(|c| c.id() == *reference);
                return compare_paired(cell, reference, measured_reference);
            }
            let reference = match leave_one_out_reference(&cell.key, design, cells.iter().map(|c| &c.key)) {
                Some(i) => Some(&cells[i]).filter(ok),
                None => reference_index(&cell.key, measured.iter().map(|c| &c.key)).map(|i| measured[i]),
            };
            compare(cell, reference?)
        })
        .collect()
}

/// Whether a measured cell of `key` is compared with a reference: a trick cell, the A/A control
/// (alone or not), or a reference cell that is not its trick's "off" side (`strict-fp32`).
pub fn is_compared(key: &CellKey) -> bool {
    match key.reference_for {
        None => key.aa_control || !key.tricks.is_baseline(),
        Some(trick) => !trick.judged_against_own_reference(),
    }
}

/// Whether a cell of `key` is measured in the process design whatever the run's pairing: a trick
/// of it, or of its reference, cannot be paired ([`crate::tricks::Pairing::Processes`]).
pub fn is_process_design(key: &CellKey) -> bool {
    !key.tricks.iter().chain(key.reference_for).all(Trick::pairs)
}

/// The position among `candidates` of the cell that a cell of `key` is compared with under
/// `design`, as [`comparisons`] finds it: under the leave-one-out design, the largest set for a
/// set that lacks one of its tricks; otherwise the trick's reference ([`reference_index`]).
pub fn reference_position<'k>(
    key: &CellKey,
    design: Design,
    candidates: impl Iterator<Item = &'k CellKey> + Clone,
) -> Option<usize> {
    leave_one_out_reference(key, design, candidates.clone()).or_else(|| reference_index(key, candidates))
}

/// Under the leave-one-out design, the position among `candidates` of the largest set of `key`'s
/// setting (workload, seed, kind and batch size) when `key` is that set less one trick; never for
/// a reference cell or an A/A control, which keep their own references.
fn leave_one_out_reference<'k>(
    key: &CellKey,
    design: Design,
    candidates: impl Iterator<Item = &'k CellKey>,
) -> Option<usize> {
    if !design.compares_with_all_on() || key.reference_for.is_some() || key.aa_control || key.alone {
        return None;
    }
    let any_batch = key.tricks.has(Trick::MaxBatch);
    let (i, largest) = candidates
        .enumerate()
        .filter(|(_, c)| {
            (c.workload, c.seed, c.kind, c.engine) == (key.workload, key.seed, key.kind, key.engine)
                && (any_batch || c.batch_size == key.batch_size)
                && c.reference_for.is_none()
                && !c.aa_control
                && !c.alone
        })
        .max_by_key(|(_, c)| c.tricks.len())?;
    let lacks_one =
        key.tricks.len() + 1 == largest.tricks.len() && key.tricks.iter().all(|t| largest.tricks.has(t));
    lacks_one.then_some(i)
}

/// Everything `results` derives from its cells: the comparisons, with each workload's noise
/// floor applied to their verdicts and each one's diagnosis (its ceiling and cause), the noise
/// floors, the factorial design's effects, and the time-to-accuracy summaries.
pub fn refresh_derived(results: &mut Results) {
    let mut found = comparisons(&results.cells, results.run.design);
    results.noise_floors = noise_floors(&results.cells, &found);
    apply_noise_floors(&mut found, &results.cells, &results.noise_floors);
    diagnose(&mut found, &results.cells, &results.noise_floors);
    results.factorial = if results.run.design == Design::Factorial {
        factorial::analyse(&results.cells, &found, &results.noise_floors)
    } else {
        Vec::new()
    };
    results.comparisons = found;
    results.time_to_accuracy = time_to_accuracy_summaries(&results.cells);
}

/// The noise floors of each workload with a measured A/A control: each control's comparison with
/// its baseline, in the design it was measured in. The control paired with the baseline inside
/// the multi-arm processes gives the paired floor; the control measured alone, against the
/// baseline measured alone, the floor of the process design. Where no control was measured alone
/// (files that predate it, and runs without multi-arm processes), a control measured in pairs in
/// processes of its own gives the floor of the process design as such files were read: its own
/// windows against the baseline cell's.
pub fn noise_floors(cells: &[CellResult], comparisons: &[Comparison]) -> Vec<NoiseFloor> {
    let compared = |control: &CellResult| comparisons.iter().find(|c| c.cell == control.id());
    let mut floors = Vec::new();
    for control in cells.iter().filter(|c| c.key.aa_control) {
        let Some(c) = compared(control) else { continue };
        floors.push(floor_of(control, c));
        let alone = CellKey { alone: true, ..control.key.clone() };
        let measured_alone = cells.iter().any(|a| a.key == alone && compared(a).is_some());
        if !control.key.alone && !measured_alone {
            floors.extend(apart_floor(cells, control, c));
        }
    }
    floors
}

/// The floor of the process design from a `control` measured in pairs (`c`) in processes of its
/// own, without a control measured alone: its own windows against the baseline cell's. `None`
/// where the control shared its processes with other cells, whose windows a multi-arm process
/// holding both would not keep apart.
fn apart_floor(cells: &[CellResult], control: &CellResult, c: &Comparison) -> Option<NoiseFloor> {
    let own_processes = control.processes.iter().all(|p| p.process_cells == 1);
    if c.design != MeasurementDesign::Paired || !own_processes {
        return None;
    }
    let baseline = cells.iter().find(|b| b.id() == c.baseline && b.status == CellStatus::Ok)?;
    compare(control, baseline).map(|apart| floor_of(control, &apart))
}

/// The noise floor the A/A `control`'s comparison `c` sets: the largest distance from 1 of its
/// ratio and of its interval's ends.
fn floor_of(control: &CellResult, c: &Comparison) -> NoiseFloor {
    let half_width = [c.speedup, c.speedup_ci_low, c.speedup_ci_high]
        .into_iter()
        .map(|r| (r - 1.0).abs())
        .fold(0.0, f64::max);
    NoiseFloor {
        workload: control.key.workload,
        control: control.id().clone(),
        baseline: c.baseline.clone(),
        ratio: c.speedup,
        ratio_ci_low: c.speedup_ci_low,
        ratio_ci_high: c.speedup_ci_high,
        half_width,
        design: c.design,
        engine: control.key.engine,
    }
}

/// Re-words as [`Verdict::WithinNoise`] every "faster" or "slower" throughput verdict whose
/// speed-up lies within its workload's noise floor of the same design (any of the workload's
/// floors where none was measured in that design; the A/A controls' own verdicts stay).
fn apply_noise_floors(comparisons: &mut [Comparison], cells: &[CellResult], floors: &[NoiseFloor]) {
    for comparison in comparisons.iter_mut() {
        let Some(cell) = cells.iter().find(|c| c.id() == comparison.cell && !c.key.aa_control) else {
            continue;
        };
        let floor = floor_for(comparison, cell, floors);
        let significant = matches!(comparison.verdict, Verdict::Faster | Verdict::Slower);
        if let Some(floor) = floor.filter(|_| significant) {
            if (comparison.speedup - 1.0).abs() <= floor.half_width {
                comparison.verdict = Verdict::WithinNoise;
            }
        }
    }
}

/// Time-to-accuracy per configuration over its seeds, each compared with its reference: the
/// trick's own reference configuration when it has one, otherwise the baseline at the same batch
/// size (`max-batch`: at the smallest batch measured, the recipe's).
pub fn time_to_accuracy_summaries(cells: &[CellResult]) -> Vec<TtaSummary> {
    let mut groups: Vec<(CellKey, Vec<&CellResult>)> = Vec::new();
    for cell in cells.iter().filter(|c| c.status == CellStatus::Ok && c.time_to_accuracy.is_some()) {
        let group_key = CellKey { seed: 0, ..cell.key.clone() };
        match groups.iter_mut().find(|(k, _)| *k == group_key) {
            Some((_, members)) => members.push(cell),
            None => groups.push((group_key, vec![cell])),
        }
    }
    let mut summaries: Vec<TtaSummary> =
        groups.iter().map(|(key, members)| summarise_seeds(key, members)).collect();
    for (i, (key, _)) in groups.iter().enumerate() {
        if key.tricks.is_baseline() {
            continue;
        }
        // Group keys all carry seed 0, so any seed's reference matches.
        if let Some(r) = reference_index(key, groups.iter().map(|(k, _)| k)) {
            let ratio = |theirs: Option<f64>, ours: Option<f64>| match (theirs, ours) {
                (Some(theirs), Some(ours)) if ours > 0.0 => Some(theirs / ours),
                _ => None,
            };
            let (reference, ours) = (&summaries[r], &summaries[i]);
            let speedup = ratio(reference.median_time_to_target_s, ours.median_time_to_target_s);
            let epochs_speedup = ratio(reference.median_epochs_to_target, ours.median_epochs_to_target);
            let reached = reference.median_time_to_target_s.is_some();
            let label = reference.label();
            let ours = &mut summaries[i];
            ours.reference = Some(label);
            ours.speedup = speedup;
            ours.epochs_speedup = epochs_speedup;
            ours.reference_reached = Some(reached);
        }
    }
    summaries
}

/// Whether the time-to-accuracy configuration `ours` (of `cells`) reached its target
/// significantly sooner than `theirs` ([`Verdict::Faster`]), significantly later
/// ([`Verdict::Slower`]), or neither ([`Verdict::NoSignificantEffect`]). Significantly sooner:
/// every seed of `ours` reached the target, and its slowest seed, made `floor` slower still (the
/// half-width of the workload's A/A noise floor, a fraction), reached it before the fastest seed
/// of `theirs`, a seed that never reached it counting as infinitely slow; with several seeds, no
/// seed of the two overlaps. At the same batch size its slowest seed must also have needed fewer
/// epochs than the fastest seed of `theirs`: a trick that reached the target at the same
/// evaluation step gained its time from the machine, not from training. Later is the same with
/// the two swapped.
pub fn time_to_target_verdict(
    cells: &[CellResult],
    ours: &TtaSummary,
    theirs: &TtaSummary,
    floor: f64,
) -> Verdict {
    let same_batch = ours.batch_size == theirs.batch_size;
    let sooner = |quick: &TtaSummary, slow: &TtaSummary| {
        let time = |s| seed_values(cells, s, |t| t.time_to_target_s);
        let epochs = |s| seed_values(cells, s, |t| t.epochs_to_target);
        beats(&time(quick), &time(slow), floor) && (!same_batch || beats(&epochs(quick), &epochs(slow), 0.0))
    };
    if sooner(ours, theirs) {
        Verdict::Faster
    } else if sooner(theirs, ours) {
        Verdict::Slower
    } else {
        Verdict::NoSignificantEffect
    }
}

/// Whether every one of the `quick` values, made `margin` (a fraction) larger, is below every one
/// of the `slow` values, the `quick` ones all finite.
fn beats(quick: &[f64], slow: &[f64], margin: f64) -> bool {
    let slowest = quick.iter().copied().reduce(f64::max).filter(|t| t.is_finite());
    let fastest = slow.iter().copied().reduce(f64::min);
    matches!((slowest, fastest), (Some(s), Some(f)) if s * (1.0 + margin) < f)
}

/// What `value` reads from each seed of `summary` among `cells`: its time or epochs to the target
/// (infinite for a seed that did not reach it).
fn seed_values(
    cells: &[CellResult],
    summary: &TtaSummary,
    value: impl Fn(&TimeToAccuracy) -> Option<f64>,
) -> Vec<f64> {
    summary
        .cells
        .iter()
        .filter_map(|id| cells.iter().find(|c| c.id() == *id))
        .filter_map(|c| c.time_to_accuracy.as_ref())
        .map(|t| value(t).unwrap_or(f64::INFINITY))
        .collect()
}

/// The half-width of `workload`'s A/A noise floor in `results` (the largest where several were
/// measured); `None` where no A/A control was measured.
pub fn noise_floor_half_width(results: &Results, workload: WorkloadId) -> Option<f64> {
    results.noise_floors.iter().filter(|f| f.workload == workload).map(|f| f.half_width).reduce(f64::max)
}

/// The position among `candidates` of the reference of the trick configuration `key`: the
/// configuration with another trick in place of one of its own where a trick of it is compared so
/// and that configuration was measured (`sdpa-flash` against `flash-attention`), else the trick's
/// own reference configuration where it has one and it was measured, else the baseline: for a cell
/// of the process design the baseline measured alone where there is one (the plain baseline in
/// files that predate it); with the same workload, seed, kind and engine, and the same batch size
/// (`max-batch`: the smallest batch, the recipe's). The A/A control measured alone is compared
/// with the baseline measured alone, and no other cell with a cell measured alone.
fn reference_index<'k>(
    key: &CellKey,
    candidates: impl Iterator<Item = &'k CellKey> + Clone,
) -> Option<usize> {
    let any_batch = key.tricks.has(Trick::MaxBatch);
    let find = |tricks: &TrickSet, reference_for: Option<Trick>, alone: bool| {
        candidates
            .clone()
            .enumerate()
            .filter(|(_, c)| {
                (c.workload, c.seed, c.kind, c.engine) == (key.workload, key.seed, key.kind, key.engine)
                    && (any_batch || c.batch_size == key.batch_size)
                    && c.tricks == *tricks
                    && !c.aa_control
                    && c.reference_for == reference_for
                    && c.alone == alone
            })
            .min_by_key(|(_, c)| c.batch_size)
            .map(|(i, _)| i)
    };
    let baseline = TrickSet::baseline();
    if key.alone {
        return find(&baseline, None, true);
    }
    let swapped = key.tricks.swapped_reference().filter(|_| key.reference_for.is_none());
    let own = key.tricks.iter().find(|t| t.judged_against_own_reference());
    swapped
        .and_then(|tricks| find(&tricks, None, false))
        .or_else(|| own.and_then(|t| find(&baseline, Some(t), false)))
        .or_else(|| is_process_design(key).then(|| find(&baseline, None, true)).flatten())
        .or_else(|| find(&baseline, None, false))
}

/// One configuration's seeds: medians with unreached seeds counted as infinitely slow.
fn summarise_seeds(key: &CellKey, members: &[&CellResult]) -> TtaSummary {
    let runs: Vec<&TimeToAccuracy> = members.iter().filter_map(|c| c.time_to_accuracy.as_ref()).collect();
    let median_reached = |value: fn(&TimeToAccuracy) -> Option<f64>| {
        let xs: Vec<f64> = runs.iter().map(|r| value(r).unwrap_or(f64::INFINITY)).collect();
        median(&xs).filter(|m| m.is_finite())
    };
    let first = runs.first();
    TtaSummary {
        workload: key.workload,
        configuration: key.configuration_label(),
        tricks: key.tricks.clone(),
        reference_for: key.reference_for,
        batch_size: key.batch_size,
        engine: key.engine,
        cells: members.iter().map(|c| c.id().clone()).collect(),
        metric: first.map_or(key.workload.family().quality_metric(), |r| r.metric),
        target: first.map_or(0.0, |r| r.target),
        seeds: runs.len(),
        reached: runs.iter().filter(|r| r.time_to_target_s.is_some()).count(),
        median_time_to_target_s: median_reached(|r| r.time_to_target_s),
        median_wall_time_to_target_s: median_reached(|r| r.wall_time_to_target_s),
        median_epochs_to_target: median_reached(|r| r.epochs_to_target),
        median_best_metric: median(&runs.iter().map(|r| r.best_metric).collect::<Vec<_>>()).unwrap_or(0.0),
        reference: None,
        speedup: None,
        epochs_speedup: None,
        reference_reached: None,
    }
}

/// One paired comparison: speed-up with its bootstrap interval and the memory ratio.
/// The reference cell every measured process of `cell` was paired with, when they all were paired
/// with the same one (a cell measured in the process design has none).
fn paired_reference(cell: &CellResult) -> Option<&CellId> {
    let mut references = cell.processes.iter().map(|p| p.paired.as_ref().map(|w| &w.reference));
    let first = references.next()??;
    references.all(|r| r == Some(first)).then_some(first)
}

/// The paired comparison of `cell` with its `reference` (measured in the same processes): the
/// median of the per-pair ratios with its interval from a bootstrap over processes, then pairs;
/// the memory ratio against the reference cell's own processes where it was `measured`.
fn compare_paired(
    cell: &CellResult,
    reference: &CellId,
    measured: Option<&CellResult>,
) -> Option<Comparison> {
    let ratios: Vec<Vec<f64>> =
        cell.processes.iter().filter_map(|p| p.paired.as_ref()).map(PairedWindows::ratios).collect();
    let estimate = paired_median_ci(&ratios)?;
    Some(Comparison {
        cell: cell.id().clone(),
        baseline: reference.clone(),
        speedup: estimate.point,
        speedup_ci_low: estimate.low,
        speedup_ci_high: estimate.high,
        verdict: verdict_of(&estimate),
        memory_ratio: measured.and_then(|r| memory_ratio(cell, r)),
        design: MeasurementDesign::Paired,
        diagnosis: None,
    })
}

/// Faster when the whole interval is above 1, slower when below, else no significant effect.
fn verdict_of(estimate: &Estimate) -> Verdict {
    if estimate.low > 1.0 {
        Verdict::Faster
    } else if estimate.high < 1.0 {
        Verdict::Slower
    } else {
        Verdict::NoSignificantEffect
    }
}

/// Peak memory of `cell` ÷ that of `reference`: reserved bytes when a trick the cell adds is judged
/// by them (`expandable-segments`), else live bytes; `None` where either is unknown.
fn memory_ratio(cell: &CellResult, reference: &CellResult) -> Option<f64> {
    let figure = memory_figure_of(cell.key.tricks.iter().filter(|&t| !reference.key.tricks.has(t)));
    match (cell.memory.and_then(|m| m.bytes(figure)), reference.memory.and_then(|m| m.bytes(figure))) {
        (Some(a), Some(b)) if b > 0 => Some(a as f64 / b as f64),
        _ => None,
    }
}

fn compare(cell: &CellResult, baseline: &CellResult) -> Option<Comparison> {
    let by_round = |processes: &[ProcessMeasurement]| -> Vec<Vec<f64>> {
        let rounds = processes.iter().map(|p| p.round + 1).max().unwrap_or(0);
        (0..rounds)
            .map(|r| {
                processes
                    .iter()
                    .filter(|p| p.round == r)
                    .flat_map(|p| p.window_samples_per_s.clone())
                    .collect()
            })
            .collect()
    };
    let estimate = paired_ratio_ci(&by_round(&cell.processes), &by_round(&baseline.processes))?;
    Some(Comparison {
        cell: cell.id().clone(),
        baseline: baseline.id().clone(),
        speedup: estimate.point,
        speedup_ci_low: estimate.low,
        speedup_ci_high: estimate.high,
        verdict: verdict_of(&estimate),
        memory_ratio: memory_ratio(cell, baseline),
        design: MeasurementDesign::Processes,
        diagnosis: None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::Engine;
    use crate::results::energy::Energy;
    use crate::results::schema::{CellId, CellKind, PairedWindow, Phase, Side};
    use crate::tricks::TrickSet;
    use crate::vocabulary::QualityMetric;
    use crate::workloads::WorkloadId;

    fn cpu() -> SystemInfo {
        SystemInfo::collect(crate::device::DeviceSpec::Cpu)
    }

    fn process(round: usize, windows: &[f64], rss: u64, energy: Option<Energy>) -> ProcessMeasurement {
        ProcessMeasurement {
            wall_s: 1.0,
            window_samples_per_s: windows.to_vec(),
            memory: Memory { peak_rss_bytes: Some(rss), ..Default::default() },
            timed_samples: 1000,
            energy,
            ..ProcessMeasurement::new(round, 1e9, Precision::Half)
        }
    }

    fn cell(tricks: TrickSet, windows: [[f64; 3]; 2], rss: u64) -> CellResult {
        let key = CellKey {
            workload: WorkloadId::Resnet20,
            tricks,
            batch_size: 64,
            seed: 0,
            kind: CellKind::Throughput { phase: Phase::Train },
            reference_for: None,
            aa_control: false,
            alone: false,
            engine: Engine::Libtorch,
        };
        let mut c = CellResult::new(key, CellStatus::Ok);
        c.processes = windows.iter().enumerate().map(|(round, w)| process(round, w, rss, None)).collect();
        summarise_cell(&mut c, &cpu());
        c
    }

    #[test]
    fn energy_per_sample_and_mfu_against_the_gpu_peak() {
        let energy = Energy {
            joules: 500.0,
            mean_power_w: 250.0,
            readings: 2,
            interval_s: 2.0,
            method: EnergyMethod::Counter,
            samples: Some(1250),
            quantisation_j: Some(25.0),
        };
        let mut c = cell(TrickSet::baseline(), [[1000.0; 3]; 2], 1);
        // One process's span covers untimed steps beyond its 1000 timed samples; the other comes
        // from a file that predates that count, so its timed samples apply.
        c.processes = vec![
            process(0, &[1000.0; 3], 1, Some(energy)),
            process(1, &[1000.0; 3], 1, Some(Energy { samples: None, ..energy })),
        ];
        let mut gpu_system = cpu();
        gpu_system.gpu = Some(crate::results::system::GpuInfo {
            name: "NVIDIA H200 (test fixture)".into(),
            driver_version: "test".into(),
            memory_total_bytes: 0,
            compute_capability: "9.0".into(),
        });
        summarise_cell(&mut c, &gpu_system);
        let e = c.energy.unwrap();
        assert_eq!((e.joules, e.joules_per_sample, e.mean_power_w), (1000.0, 1000.0 / 2250.0, 250.0));
        assert_eq!(e.interval_s, Some(4.0));
        assert_eq!((e.quantisation_j, e.relative_quantisation()), (Some(50.0), Some(0.05)));
        let old_file = Energy { quantisation_j: None, ..energy };
        let mut older = c.clone();
        older.processes[1].energy = Some(old_file);
        summarise_cell(&mut older, &gpu_system);
        assert_eq!(older.energy.unwrap().quantisation_j, None, "unknown for one process: unknown");
        let u = c.utilisation.clone().unwrap();
        assert_eq!(u.achieved_flops_per_s, 1e12);
        assert_eq!(u.mfu, Some(1e12 / 989.5e12));

        summarise_cell(&mut c, &cpu());
        let u = c.utilisation.unwrap();
        assert_eq!(u.achieved_flops_per_s, 1e12, "achieved FLOP/s is known on a CPU too");
        assert!(u.mfu.is_none() && u.mfu_unavailable.unwrap().contains("no peak FLOP/s"));
    }

    #[test]
    fn expandable_segments_are_compared_by_reserved_bytes_and_other_tricks_by_live_bytes() {
        let on_gpu = |tricks: TrickSet, allocated: u64, reserved: u64| {
            let mut c = cell(tricks, [[100.0; 3]; 2], 1);
            let peaks = Memory {
                peak_allocated_bytes: Some(allocated),
                peak_reserved_bytes: Some(reserved),
                peak_rss_bytes: Some(1),
            };
            c.memory = Some(peaks);
            c
        };
        let base = on_gpu(TrickSet::baseline(), 1000, 2000);
        let expandable = on_gpu(TrickSet::only(Trick::ExpandableSegments), 1000, 1200);
        let checkpointed = on_gpu(TrickSet::only(Trick::Checkpointing), 500, 2000);
        let cmp = comparisons(&[base, expandable, checkpointed], Design::Ablation);
        assert_eq!(cmp[0].memory_ratio, Some(0.6), "reserved: 1200 of 2000 bytes");
        assert_eq!(cmp[1].memory_ratio, Some(0.5), "live: 500 of 1000 bytes");
    }

    #[test]
    fn a_faster_trick_is_faster_and_a_noisy_one_is_no_significant_effect() {
        let base = cell(TrickSet::baseline(), [[100.0, 102.0, 98.0], [99.0, 101.0, 100.0]], 1000);
        let fast =
            cell(TrickSet::only(Trick::ChannelsLast), [[150.0, 149.0, 152.0], [151.0, 148.0, 150.0]], 800);
        let same = cell(TrickSet::only(Trick::AvoidSync), [[97.0, 103.0, 100.0], [101.0, 99.0, 98.0]], 1000);
        let cmp = comparisons(&[base.clone(), fast, same], Design::Ablation);
        assert_eq!(cmp.len(), 2);
        assert_eq!(cmp[0].verdict, Verdict::Faster);
        assert!((cmp[0].speedup - 1.5).abs() < 0.02, "{:?}", cmp[0]);
        assert_eq!(cmp[0].memory_ratio, Some(0.8));
        assert_eq!(cmp[1].verdict, Verdict::NoSignificantEffect);
        assert_eq!(base.throughput.unwrap().windows, 6);
    }

    #[test]
    fn a_failed_baseline_yields_no_comparison() {
        let mut base = cell(TrickSet::baseline(), [[100.0; 3]; 2], 1);
        base.status = CellStatus::Failed { error: "boom".into(), stderr_tail: String::new() };
        let fast = cell(TrickSet::only(Trick::ChannelsLast), [[150.0; 3]; 2], 1);
        assert!(comparisons(&[base, fast], Design::Ablation).is_empty());
    }

    #[test]
    fn debug_off_is_compared_with_the_debugging_on_baseline() {
        let plain = cell(TrickSet::baseline(), [[100.0; 3]; 2], 1);
        let mut debugging = cell(TrickSet::baseline(), [[50.0; 3]; 2], 1);
        debugging.key.reference_for = Some(Trick::DebugOff);
        let off = cell(TrickSet::only(Trick::DebugOff), [[100.0; 3]; 2], 1);
        let cmp = comparisons(&[plain, debugging.clone(), off], Design::Ablation);
        assert_eq!(cmp.len(), 1, "the debugging-on cell is a reference, not a trick");
        assert_eq!(cmp[0].baseline, debugging.id());
        assert_eq!(cmp[0].speedup, 2.0);
    }

    #[test]
    fn a_forced_attention_backend_is_compared_with_pytorchs_choice_in_the_same_precision() {
        let set = |tricks: &[Trick]| tricks.iter().copied().collect::<TrickSet>();
        let plain = cell(TrickSet::baseline(), [[100.0; 3]; 2], 1);
        let chosen = cell(set(&[Trick::AmpBf16, Trick::FlashAttention]), [[200.0; 3]; 2], 1);
        let forced = cell(set(&[Trick::AmpBf16, Trick::SdpaCudnn]), [[240.0; 3]; 2], 1);
        let stacked = cell(set(&[Trick::AmpBf16, Trick::SdpaMath, Trick::ZeroGradNone]), [[150.0; 3]; 2], 1);
        let cells = [plain.clone(), chosen.clone(), forced.clone(), stacked.clone()];
        let cmp = comparisons(&cells, Design::Ablation);
        let of = |id: CellId| cmp.iter().find(|c| c.cell == id).unwrap();
        assert_eq!((&of(forced.id()).baseline, of(forced.id()).speedup), (&chosen.id(), 1.2));
        assert_eq!((&of(chosen.id()).baseline, of(chosen.id()).speedup), (&plain.id(), 2.0));
        assert_eq!(of(stacked.id()).baseline, plain.id(), "no cell with flash-attention in its place");
    }

    #[test]
    fn tf32_and_strict_fp32_are_both_compared_with_the_baseline() {
        let plain = cell(TrickSet::baseline(), [[100.0; 3]; 2], 1);
        let mut strict = cell(TrickSet::baseline(), [[40.0; 3]; 2], 1);
        strict.key.reference_for = Some(Trick::Tf32);
        let tf32 = cell(TrickSet::only(Trick::Tf32), [[110.0; 3]; 2], 1);
        let cmp = comparisons(&[plain.clone(), strict.clone(), tf32.clone()], Design::Ablation);
        assert_eq!(cmp.len(), 2, "{cmp:?}");
        let of = |id: CellId| cmp.iter().find(|c| c.cell == id).unwrap();
        assert_eq!((&of(tf32.id()).baseline, of(tf32.id()).speedup), (&plain.id(), 1.1));
        assert_eq!((&of(strict.id()).baseline, of(strict.id()).speedup), (&plain.id(), 0.4));
        assert!(strict.id().as_str().contains("/baseline+strict-fp32/"), "{}", strict.id());
    }

    #[test]
    fn leave_one_out_compares_each_reduced_set_with_the_full_set() {
        let both: TrickSet = [Trick::ChannelsLast, Trick::AvoidSync].into_iter().collect();
        let cells = [
            cell(TrickSet::baseline(), [[100.0; 3]; 2], 1),
            cell(both, [[200.0; 3]; 2], 1),
            cell(TrickSet::only(Trick::AvoidSync), [[100.0; 3]; 2], 1),
        ];
        let cmp = comparisons(&cells, Design::LeaveOneOut);
        assert_eq!(cmp[0].baseline, cells[0].id(), "the full set is compared with the baseline");
        assert_eq!(cmp[1].cell, cells[2].id());
        assert_eq!(cmp[1].baseline, cells[1].id(), "a reduced set is compared with the full set");
        assert_eq!(cmp[1].speedup, 0.5);
        assert_eq!(comparisons(&cells, Design::Ablation)[1].baseline, cells[0].id());
    }

    /// The baseline measured alone (the A/A control measured alone with `aa_control`), windows as
    /// [`cell`]'s.
    fn alone(aa_control: bool, windows: [[f64; 3]; 2]) -> CellResult {
        let mut c = cell(TrickSet::baseline(), windows, 1);
        (c.key.alone, c.key.aa_control) = (true, aa_control);
        c
    }

    /// `c` with each process paired with `reference`, `ratio` its every pair's ratio, in a
    /// multi-arm process of `cells` cells.
    fn paired(mut c: CellResult, reference: &CellResult, ratio: f64, cells: usize) -> CellResult {
        for p in &mut c.processes {
            let windows = (0..4)
                .flat_map(|pair| {
                    let window = |side, samples_per_s| PairedWindow { pair, side, samples_per_s };
                    [window(Side::Reference, 100.0), window(Side::Trick, 100.0 * ratio)]
                })
                .collect();
            p.paired = Some(PairedWindows { reference: reference.id(), windows });
            p.process_cells = cells;
        }
        c
    }

    #[test]
    fn a_cell_of_the_process_design_is_compared_with_the_baseline_measured_alone_and_nothing_else_is() {
        let base = cell(TrickSet::baseline(), [[100.0; 3]; 2], 1);
        let base_alone = alone(false, [[80.0; 3]; 2]);
        let control_alone = alone(true, [[84.0; 3]; 2]);
        let workers = cell(TrickSet::only(Trick::LoaderWorkers), [[120.0; 3]; 2], 1);
        let channels_last = cell(TrickSet::only(Trick::ChannelsLast), [[150.0; 3]; 2], 1);
        let cells =
            [base.clone(), base_alone.clone(), control_alone.clone(), workers.clone(), channels_last.clone()];
        for design in [Design::Ablation, Design::LeaveOneOut, Design::Stack] {
            let cmp = comparisons(&cells, design);
            let of = |c: &CellResult| {
                cmp.iter().find(|x| x.cell == c.id()).map(|x| (x.baseline.clone(), x.speedup))
            };
            assert_eq!(of(&workers), Some((base_alone.id(), 1.5)), "{design}");
            assert_eq!(of(&control_alone), Some((base_alone.id(), 1.05)), "{design}");
            assert_eq!(of(&channels_last).map(|(b, _)| b), Some(base.id()), "{design}");
            assert_eq!(of(&base_alone), None, "{design}");
        }
        let before = comparisons(&[base.clone(), workers.clone()], Design::Ablation);
        assert_eq!((&before[0].baseline, before[0].speedup), (&base.id(), 1.2), "a file without it");
        assert_eq!(base_alone.id().as_str(), "resnet20/baseline-alone/b64/s0/train");
        assert_eq!(control_alone.id().as_str(), "resnet20/aa-control-alone/b64/s0/train");
    }

    #[test]
    fn the_paired_floor_comes_from_the_control_among_the_arms_and_the_process_floor_from_the_pair_alone() {
        let base = cell(TrickSet::baseline(), [[100.0; 3]; 2], 1);
        let mut control = cell(TrickSet::baseline(), [[100.0; 3]; 2], 1);
        control.key.aa_control = true;
        let control = paired(control, &base, 1.02, 4);
        let base_alone = alone(false, [[80.0; 3]; 2]);
        let control_alone = alone(true, [[88.0; 3]; 2]);
        let workers = cell(TrickSet::only(Trick::LoaderWorkers), [[84.0; 3]; 2], 1);
        let mut results_cells =
            vec![base.clone(), control.clone(), base_alone.clone(), control_alone.clone(), workers];
        let found = comparisons(&results_cells, Design::Ablation);
        let floors = noise_floors(&results_cells, &found);
        let read: Vec<_> = floors.iter().map(|f| (f.control.clone(), f.baseline.clone(), f.design)).collect();
        assert_eq!(
            read,
            [
                (control.id(), base.id(), MeasurementDesign::Paired),
                (control_alone.id(), base_alone.id(), MeasurementDesign::Processes),
            ]
        );
        assert!(
            (floors[0].half_width - 0.02).abs() < 1e-9 && (floors[1].half_width - 0.1).abs() < 1e-9,
            "{floors:?}"
        );
        let mut found = found;
        apply_noise_floors(&mut found, &results_cells, &floors);
        let verdict = |c: &CellResult| found.iter().find(|x| x.cell == c.id()).unwrap().verdict;
        assert_eq!(verdict(&results_cells[4]), Verdict::WithinNoise, "1.05× within the ±10% floor alone");
        assert_eq!(verdict(&control_alone), Verdict::Faster, "a control's own verdict stays");

        // Without the pair alone, a control in processes of its own gives the process floor as
        // before: its own windows against the baseline's.
        results_cells.drain(2..4);
        results_cells[1] = paired(results_cells[1].clone(), &base, 1.02, 1);
        let floors = noise_floors(&results_cells, &comparisons(&results_cells, Design::Ablation));
        let read: Vec<_> = floors.iter().map(|f| (f.control.clone(), f.baseline.clone(), f.design)).collect();
        assert_eq!(
            read,
            [
                (control.id(), base.id(), MeasurementDesign::Paired),
                (control.id(), base.id(), MeasurementDesign::Processes),
            ]
        );
    }

    #[test]
    fn a_results_file_with_its_control_apart_keeps_its_floors() {
        // Runs measured by the multi-arm design, their control apart beside loader-workers (and in
        // the speedrun's, beside max-batch's throughput cell), whose floors and verdicts this
        // analysis wrote, their intervals since widened on the log scale (a change of at most
        // 0.1% there) and their comparisons since diagnosed.
        for report in [
            "cpu-xeon-2core-20261205-quick-make-run-multi-arm",
            "cpu-xeon-2core-20261205-quick-make-run-engines-agree",
            "cpu-xeon-2core-20261205-quick-speedrun-both-engines",
        ] {
            let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
                .join("reports")
                .join(report)
                .join("results-1.json");
            let results = crate::results::store::load(&path).unwrap();
            let found = comparisons(&results.cells, results.run.design);
            let floors = noise_floors(&results.cells, &found);
            assert_eq!(floors.len(), results.noise_floors.len(), "{report}");
            for (again, stored) in floors.iter().zip(&results.noise_floors) {
                assert_eq!((&again.control, again.design), (&stored.control, stored.design), "{report}");
                assert!(
                    (again.half_width - stored.half_width).abs() < 1e-3,
                    "{report}: {again:?} {stored:?}"
                );
            }
            let mut again = results.clone();
            refresh_derived(&mut again);
            for (again, stored) in again.comparisons.iter().zip(&results.comparisons) {
                assert_eq!(
                    (&again.cell, again.verdict, again.speedup),
                    (&stored.cell, stored.verdict, stored.speedup)
                );
                let close = |a: f64, b: f64| (a / b - 1.0).abs() < 1e-3;
                assert!(close(again.speedup_ci_low, stored.speedup_ci_low), "{report}: {again:?} {stored:?}");
                assert!(
                    close(again.speedup_ci_high, stored.speedup_ci_high),
                    "{report}: {again:?} {stored:?}"
                );
            }
            assert_eq!(again.comparisons.len(), results.comparisons.len(), "{report}");
        }
    }

    /// A finished time-to-accuracy cell of `tricks` (or `reference_for`'s reference) at `batch`
    /// and `seed`, reaching the target after `seconds` (or never).
    fn tta(
        tricks: &[Trick],
        reference_for: Option<Trick>,
        batch: usize,
        seed: u64,
        seconds: Option<f64>,
    ) -> CellResult {
        let key = CellKey {
            workload: WorkloadId::Resnet20,
            tricks: tricks.iter().copied().collect(),
            batch_size: batch,
            seed,
            kind: CellKind::TimeToAccuracy,
            reference_for,
            aa_control: false,
            alone: false,
            engine: Engine::Libtorch,
        };
        let mut c = CellResult::new(key, CellStatus::Ok);
        c.time_to_accuracy = Some(TimeToAccuracy {
            metric: QualityMetric::TestAccuracy,
            target: 0.9,
            budget_s: 100.0,
            time_to_target_s: seconds,
            wall_time_to_target_s: seconds.map(|s| s + 1.0),
            epochs_to_target: seconds.map(|s| s / 10.0),
            best_metric: if seconds.is_some() { 0.91 } else { 0.8 },
            curve: Vec::new(),
            compile_s: None,
        });
        c
    }

    #[test]
    fn a_time_to_target_difference_is_significant_when_no_seed_overlaps_by_more_than_the_floor() {
        let cells = vec![
            tta(&[], None, 64, 0, Some(60.0)),
            tta(&[], None, 64, 1, Some(70.0)),
            tta(&[Trick::OneCycle], None, 64, 0, Some(40.0)),
            tta(&[Trick::OneCycle], None, 64, 1, Some(50.0)),
            tta(&[Trick::Muon], None, 64, 0, Some(45.0)),
            tta(&[Trick::Muon], None, 64, 1, Some(65.0)),
            tta(&[Trick::GradClipping], None, 64, 0, Some(90.0)),
            tta(&[Trick::GradClipping], None, 64, 1, None),
        ];
        let summaries = time_to_accuracy_summaries(&cells);
        let find = |label: &str| summaries.iter().find(|s| s.configuration == label).unwrap();
        let verdict =
            |label: &str, floor: f64| time_to_target_verdict(&cells, find(label), find("baseline"), floor);
        // one-cycle's slowest seed (50 s) beats the baseline's fastest (60 s) by 20%.
        assert_eq!(verdict("one-cycle", 0.1), Verdict::Faster);
        assert_eq!(verdict("one-cycle", 0.25), Verdict::NoSignificantEffect, "not beyond a ±25% floor");
        assert_eq!(verdict("muon", 0.0), Verdict::NoSignificantEffect, "its slower seed overlaps");
        // grad-clipping missed the target on a seed: every baseline seed beat its fastest.
        assert_eq!(verdict("grad-clipping", 0.1), Verdict::Slower);
        let back = time_to_target_verdict(&cells, find("baseline"), find("one-cycle"), 0.1);
        assert_eq!(back, Verdict::Slower);

        // Sooner in time but at the same evaluation step: the machine's doing, not the trick's.
        let mut same_step = cells.clone();
        for cell in same_step.iter_mut().filter(|c| c.key.tricks.has(Trick::OneCycle)) {
            cell.time_to_accuracy.as_mut().unwrap().epochs_to_target = Some(6.0);
        }
        let verdict = time_to_target_verdict(&same_step, find("one-cycle"), find("baseline"), 0.1);
        assert_eq!(verdict, Verdict::NoSignificantEffect, "baseline seeds needed 6 and 7 epochs");
    }

    #[test]
    fn time_to_accuracy_medians_count_unreached_seeds_as_infinitely_slow() {
        let cells = vec![
            tta(&[], None, 64, 0, Some(30.0)),
            tta(&[], None, 64, 1, Some(50.0)),
            tta(&[], None, 64, 2, Some(40.0)),
            tta(&[Trick::OneCycle], None, 64, 0, Some(20.0)),
            tta(&[Trick::OneCycle], None, 64, 1, None),
            tta(&[Trick::OneCycle], None, 64, 2, Some(10.0)),
            tta(&[Trick::GradClipping], None, 64, 0, None),
            tta(&[Trick::GradClipping], None, 64, 1, None),
            tta(&[Trick::GradClipping], None, 64, 2, Some(5.0)),
            tta(&[], Some(Trick::Adamw), 64, 0, Some(80.0)),
            tta(&[Trick::Adamw], None, 64, 0, Some(40.0)),
            tta(&[], None, 512, 0, Some(10.0)),
            tta(&[Trick::Lars], None, 512, 0, Some(20.0)),
            tta(&[Trick::MaxBatch], None, 2048, 0, Some(60.0)),
        ];
        let summaries = time_to_accuracy_summaries(&cells);
        let find = |label: &str, batch: usize| {
            summaries.iter().find(|s| s.configuration == label && s.batch_size == batch).unwrap()
        };
        let baseline = find("baseline", 64);
        assert_eq!((baseline.seeds, baseline.reached, baseline.median_time_to_target_s), (3, 3, Some(40.0)));
        assert_eq!(baseline.median_wall_time_to_target_s, Some(41.0));
        // Two of three seeds reached it: the median is the slower of the two.
        let cycle = find("one-cycle", 64);
        assert_eq!((cycle.reached, cycle.median_time_to_target_s), (2, Some(20.0)));
        assert_eq!(cycle.reference.as_deref(), Some("baseline b64"));
        assert_eq!(cycle.speedup, Some(2.0));
        assert_eq!((cycle.epochs_speedup, cycle.reference_reached), (Some(2.0), Some(true)));
        // One of three: no median, and no ratio.
        let clipping = find("grad-clipping", 64);
        assert_eq!((clipping.reached, clipping.median_time_to_target_s, clipping.speedup), (1, None, None));
        // adamw against its own reference; lars against SGD at its batch; max-batch against the
        // recipe's batch.
        assert_eq!(find("adamw", 64).reference.as_deref(), Some("baseline+adam-l2 b64"));
        assert_eq!(find("adamw", 64).speedup, Some(2.0));
        assert_eq!(find("lars", 512).reference.as_deref(), Some("baseline b512"));
        assert_eq!(find("lars", 512).speedup, Some(0.5));
        assert_eq!(find("max-batch", 2048).reference.as_deref(), Some("baseline b64"));
        assert_eq!(find("baseline+adam-l2", 64).reference, None);
    }
}
