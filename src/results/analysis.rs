//! What the raw measurements say: per-cell aggregates and paired comparisons with the baseline.

use crate::measure::stats::{median_ci, paired_ratio_ci};
use crate::results::schema::{
    CellKey, CellResult, CellStatus, Comparison, Memory, ProcessMeasurement, Throughput, Verdict,
};

/// Recomputes a cell's aggregates (throughput, memory, time-to-accuracy) from its processes.
pub fn summarise_cell(cell: &mut CellResult) {
    let windows: Vec<f64> =
        cell.processes.iter().flat_map(|p| p.window_samples_per_s.iter().copied()).collect();
    cell.throughput = median_ci(&windows).map(|e| Throughput {
        median_samples_per_s: e.point,
        ci_low_samples_per_s: e.low,
        ci_high_samples_per_s: e.high,
        windows: windows.len(),
    });
    cell.memory = cell.processes.iter().map(|p| p.memory).reduce(Memory::max);
    cell.time_to_accuracy = cell.processes.iter().find_map(|p| p.time_to_accuracy.clone());
}

/// Each finished trick cell against its reference cell (same workload, batch size, seed and
/// kind): the baseline; under the leave-one-out design, a set that lacks one trick of the largest
/// set is compared with that largest set instead (below 1: the missing trick was helping).
pub fn comparisons(cells: &[CellResult], design: &str) -> Vec<Comparison> {
    let ok = |c: &&CellResult| c.status == CellStatus::Ok && c.throughput.is_some();
    cells
        .iter()
        .filter(ok)
        .filter(|c| !c.key.tricks.is_baseline())
        .filter_map(|cell| {
            let same_setting =
                |c: &&CellResult| CellKey { tricks: cell.key.tricks.clone(), ..c.key.clone() } == cell.key;
            let largest = cells.iter().filter(same_setting).max_by_key(|c| c.key.tricks.len())?;
            let leave_one_out = design == "leave-one-out"
                && cell.key.tricks.len() + 1 == largest.key.tricks.len()
                && cell.key.tricks.iter().all(|t| largest.key.tricks.has(t));
            let reference = if leave_one_out {
                Some(largest).filter(ok)
            } else {
                cells.iter().filter(ok).filter(same_setting).find(|c| c.key.tricks.is_baseline())
            };
            compare(cell, reference?)
        })
        .collect()
}

/// One paired comparison: speed-up with its bootstrap interval and the memory ratio.
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
    let verdict = if estimate.low > 1.0 {
        Verdict::Faster
    } else if estimate.high < 1.0 {
        Verdict::Slower
    } else {
        Verdict::NoSignificantEffect
    };
    let memory_ratio = match (
        cell.memory.and_then(|m| m.primary_bytes()),
        baseline.memory.and_then(|m| m.primary_bytes()),
    ) {
        (Some(a), Some(b)) if b > 0 => Some(a as f64 / b as f64),
        _ => None,
    };
    Some(Comparison {
        cell: cell.id.clone(),
        baseline: baseline.id.clone(),
        speedup: estimate.point,
        speedup_ci_low: estimate.low,
        speedup_ci_high: estimate.high,
        verdict,
        memory_ratio,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::results::schema::{CellKind, Phase};
    use crate::tricks::{Trick, TrickSet};
    use crate::workloads::WorkloadId;

    fn cell(tricks: TrickSet, windows: [[f64; 3]; 2], rss: u64) -> CellResult {
        let key = CellKey {
            workload: WorkloadId::Resnet20,
            tricks,
            batch_size: 64,
            seed: 0,
            kind: CellKind::Throughput { phase: Phase::Train },
        };
        let mut c = CellResult {
            id: key.id(),
            key,
            status: CellStatus::Ok,
            processes: windows
                .iter()
                .enumerate()
                .map(|(round, w)| ProcessMeasurement {
                    round,
                    wall_s: 1.0,
                    window_samples_per_s: w.to_vec(),
                    memory: Memory { peak_rss_bytes: Some(rss), ..Default::default() },
                    host_metric_reads: 0,
                    last_loss: None,
                    time_to_accuracy: None,
                })
                .collect(),
            throughput: None,
            memory: None,
            time_to_accuracy: None,
        };
        summarise_cell(&mut c);
        c
    }

    #[test]
    fn a_faster_trick_is_faster_and_a_noisy_one_is_no_significant_effect() {
        let base = cell(TrickSet::baseline(), [[100.0, 102.0, 98.0], [99.0, 101.0, 100.0]], 1000);
        let fast =
            cell(TrickSet::only(Trick::ChannelsLast), [[150.0, 149.0, 152.0], [151.0, 148.0, 150.0]], 800);
        let same = cell(TrickSet::only(Trick::AvoidSync), [[97.0, 103.0, 100.0], [101.0, 99.0, 98.0]], 1000);
        let cmp = comparisons(&[base.clone(), fast, same], "ablation");
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
        assert!(comparisons(&[base, fast], "ablation").is_empty());
    }

    #[test]
    fn leave_one_out_compares_each_reduced_set_with_the_full_set() {
        let both: TrickSet = [Trick::ChannelsLast, Trick::AvoidSync].into_iter().collect();
        let cells = [
            cell(TrickSet::baseline(), [[100.0; 3]; 2], 1),
            cell(both, [[200.0; 3]; 2], 1),
            cell(TrickSet::only(Trick::AvoidSync), [[100.0; 3]; 2], 1),
        ];
        let cmp = comparisons(&cells, "leave-one-out");
        assert_eq!(cmp[0].baseline, cells[0].id, "the full set is compared with the baseline");
        assert_eq!(cmp[1].cell, cells[2].id);
        assert_eq!(cmp[1].baseline, cells[1].id, "a reduced set is compared with the full set");
        assert_eq!(cmp[1].speedup, 0.5);
        assert_eq!(comparisons(&cells, "ablation")[1].baseline, cells[0].id);
    }
}
