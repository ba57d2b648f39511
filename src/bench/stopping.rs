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

pub use crate::results::schema::Decision;
use crate::results::schema::{CellKey, CellResult, CellStatus, MeasurementDesign, PairedWindows, Results};
use crate::stats::{paired_median_ci_at, Estimate};

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
