//! When a paired cell needs no more rounds: the sequential rule a run applies before each round
//! after the second.
//!
//! A cell is decided once the interval of its median pair ratio, over the processes measured so
//! far, lies wholly outside its noise band (it helps or it hurts by more than the noise) or
//! wholly inside it (no effect measurable at that precision). The band is the paired A/A floor of
//! its engine and workload measured so far. Looking after every round and stopping at the first
//! decisive look would, at the final level, call more false effects than that level says; so each
//! interim look uses a much stricter interval, [`INTERIM_CONFIDENCE_LEVEL`] (a Haybittle–Peto
//! boundary), and the final look, over every round, keeps the run's 95%. By the union bound the
//! chance that a cell with no effect is ever called "helps" or "hurts" is at most 5% plus 0.1% per
//! interim look; `tests/paired_design.rs` shows on the stand-in machine that it stays under 5%, and
//! that the final intervals keep their coverage.
//!
//! Only paired cells stop: their processes carry their own reference, so two processes already
//! give an interval over processes. The A/A controls and the references always run every round,
//! since every verdict is read against them; so do a cell of the process design and the baseline
//! and the control measured alone, which it is compared and read against.
//! A decision is recorded in the cell (`CellResult::decided`) and holds for the rest of the run,
//! its later phases and a `--resume` included.

use std::cell::Cell;

use crate::engine::Engine;
use crate::factorial;
use crate::results::factorial::RatioEstimate;
pub use crate::results::schema::Decision;
use crate::results::schema::{CellKey, CellResult, CellStatus, MeasurementDesign, PairedWindows, Results};
use crate::stats::{paired_median_ci_at, Estimate};
use crate::vocabulary::{Design, WorkloadId};

/// Confidence level of the interval at an interim look (before the last round).
pub const INTERIM_CONFIDENCE_LEVEL: f64 = 0.999;
/// Processes a cell needs before its first look: the interval must reach over processes.
pub const FIRST_LOOK_PROCESSES: usize = 2;

/// Whether `cell`'s paired processes so far decide its verdict against its engine's and
/// workload's paired A/A floor in `results` ([`floor_half_width`]); `None` while undecided, for
/// an A/A control (measured alone or not), a cell that is not paired (the baseline measured alone
/// among them), or one with fewer than [`FIRST_LOOK_PROCESSES`] processes.
pub fn decision(cell: &CellResult, results: &Results) -> Option<Decision> {
    if cell.key.aa_control || cell.status != CellStatus::Ok {
        return None;
    }
    if results.run.design == Design::Factorial {
        return design_decision(cell, results);
    }
    let ratios = paired_ratios(cell)?;
    if ratios.len() < FIRST_LOOK_PROCESSES {
        return None;
    }
    let band = floor_half_width(results, &cell.key)?;
    decide(&paired_median_ci_at(&ratios, INTERIM_CONFIDENCE_LEVEL)?, band)
}

/// The decision an interim interval `strict` gives against a band of ±`band` around 1.
pub fn decide(strict: &Estimate, band: f64) -> Option<Decision> {
    let (low, high) = (1.0 - band, 1.0 + band);
    if !(strict.low.is_finite() && strict.high.is_finite()) {
        return None;
    }
    if strict.low > high || strict.high < low {
        Some(Decision::BeyondNoise)
    } else if strict.low >= low && strict.high <= high {
        Some(Decision::WithinNoise)
    } else {
        None
    }
}

/// The half-width of the paired A/A floor of `key`'s engine, workload, kind and batch size in
/// `results` as measured so far (the floor the report reads verdicts against); `None` without
/// such a control or before it has [`FIRST_LOOK_PROCESSES`] paired processes.
pub fn floor_half_width(results: &Results, key: &CellKey) -> Option<f64> {
    results
        .noise_floors
        .iter()
        .filter(|f| {
            f.design == MeasurementDesign::Paired && (f.engine, f.workload) == (key.engine, key.workload)
        })
        .find(|f| {
            results.cells.iter().any(|c| {
                c.id() == f.control
                    && (c.key.kind, c.key.batch_size) == (key.kind, key.batch_size)
                    && paired_ratios(c).is_some_and(|r| r.len() >= FIRST_LOOK_PROCESSES)
            })
        })
        .map(|f| f.half_width)
}

/// Whether the factorial design `cell` is a configuration of has decided every effect: each
/// main effect's and interaction's interim interval lies wholly outside or inside its engine's
/// and workload's paired A/A band. Its configurations stop together, since every effect is a
/// contrast of all of them; a cell outside the fraction (a trick measured alone, the best
/// configuration measured after) is decided by its own interval. Nothing is decided before the
/// design has an estimate.
fn design_decision(cell: &CellResult, results: &Results) -> Option<Decision> {
    let (workload, engine) = (cell.key.workload, cell.key.engine);
    let analysis = results.factorial.iter().find(|a| (a.workload, a.engine) == (workload, engine))?;
    let band = floor_half_width(results, &cell.key)?;
    if !factorial::is_configuration(analysis, &cell.key.tricks) {
        let ratios = paired_ratios(cell).filter(|r| r.len() >= FIRST_LOOK_PROCESSES)?;
        return decide(&paired_median_ci_at(&ratios, INTERIM_CONFIDENCE_LEVEL)?, band);
    }
    if analysis.processes < FIRST_LOOK_PROCESSES {
        return None;
    }
    // What the run has measured, in two numbers: its processes, and the sum of their windows'
    // throughputs (which tells apart two runs at the same count).
    let processes = results.cells.iter().flat_map(|c| &c.processes);
    let windows: f64 = processes.clone().flat_map(|p| &p.window_samples_per_s).sum();
    let look = (workload, engine, processes.count(), windows.to_bits());
    let cached = LAST_DESIGN_LOOK.with(|last| last.get().filter(|(at, _)| *at == look).map(|(_, d)| d));
    let decided = cached.unwrap_or_else(|| {
        let decided = |e: &RatioEstimate| {
            decide(&Estimate { point: e.ratio, low: e.ci_low, high: e.ci_high }, band).is_some()
        };
        let all =
            factorial::interim_decided(&results.cells, workload, engine, INTERIM_CONFIDENCE_LEVEL, decided);
        LAST_DESIGN_LOOK.with(|last| last.set(Some((look, all))));
        all
    });
    decided.then_some(Decision::DesignDecided)
}

/// A look at a design: its workload and engine, and the run's processes and the bits of the sum
/// of their window throughputs then.
type Look = (WorkloadId, Engine, usize, u64);

thread_local! {
    /// The last look at a factorial design: its workload and engine, what the run had measured
    /// then, and whether every effect was decided. Each configuration asks the same question of
    /// the same results before a process; the bootstrap answers it once.
    static LAST_DESIGN_LOOK: Cell<Option<(Look, bool)>> = const { Cell::new(None) };
}

/// Each paired process's pair ratios; `None` where a process of the cell was not paired.
fn paired_ratios(cell: &CellResult) -> Option<Vec<Vec<f64>>> {
    cell.processes.iter().map(|p| p.paired.as_ref().map(PairedWindows::ratios)).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn estimate(low: f64, high: f64) -> Estimate {
        Estimate { point: (low + high) / 2.0, low, high }
    }

    #[test]
    fn an_interval_beyond_or_inside_the_band_decides_and_one_across_its_edge_does_not() {
        assert_eq!(decide(&estimate(1.10, 1.20), 0.03), Some(Decision::BeyondNoise));
        assert_eq!(decide(&estimate(0.80, 0.90), 0.03), Some(Decision::BeyondNoise));
        assert_eq!(decide(&estimate(0.99, 1.02), 0.03), Some(Decision::WithinNoise));
        assert_eq!(decide(&estimate(1.01, 1.05), 0.03), None, "across the band's upper edge");
        assert_eq!(decide(&estimate(0.90, 1.10), 0.03), None, "wider than the band");
        assert_eq!(decide(&estimate(f64::NAN, 1.0), 0.03), None);
    }
}
