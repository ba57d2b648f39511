//! Which quantities two runs hold, and each run's value of them: cells are joined by workload,
//! trick set, reference, batch size, kind and engine (the lowest seed of each), not by profile,
//! which the gate refuses to mix unless asked.

use std::collections::{BTreeMap, BTreeSet};

use super::{
    judge_change, Check, GateVerdict, Quantity, Reading, RunName, Threshold, MEMORY_THRESHOLD_FRACTION,
};
use crate::report::compare::{why_text, JoinKey};
use crate::report::history::short_commit;
use crate::report::model;
use crate::results::schema::{
    CellKind, CellResult, CellStatus, Comparison, MeasurementDesign, Results, Verdict,
};
use crate::tricks::Metric;

/// One run's side of a check.
struct Side {
    /// What the run's cell measures.
    quantity: Quantity,
    /// Its value, or why it has none.
    reading: Result<Reading, String>,
    /// The run's A/A noise floor that holds for it, a fraction; `None` where the run has none.
    floor_fraction: Option<f64>,
    /// Why its speed-up is not faster, where it is a speed-up and the run diagnosed it.
    why: Option<String>,
}

/// Every quantity either run measured, compared, in join-key order.
pub(super) fn checks(base: &Results, new: &Results) -> Vec<Check> {
    let (base_cells, new_cells) = (cells_of(base), cells_of(new));
    let keys: BTreeSet<&JoinKey> = base_cells.keys().chain(new_cells.keys()).collect();
    keys.into_iter()
        .filter_map(|key| {
            let base_side = base_cells.get(key).map(|cell| side(base, cell));
            let new_side = new_cells.get(key).map(|cell| side(new, cell));
            check(key, base_side, new_side)
        })
        .collect()
}

/// The check of `key` from the two runs' sides (`None` where a run lacks the cell, and where
/// both do).
fn check(key: &JoinKey, base: Option<Side>, new: Option<Side>) -> Option<Check> {
    let quantity = base.as_ref().or(new.as_ref())?.quantity;
    let reading =
        |s: &Option<Side>| s.as_ref().map_or_else(|| Err("not measured".to_owned()), |s| s.reading.clone());
    let floor = |s: &Option<Side>| s.as_ref().and_then(|s| s.floor_fraction);
    let (threshold, threshold_fraction) = threshold(quantity, floor(&base), floor(&new));
    let why = new.as_ref().and_then(|s| s.why.clone());
    let (base, new) = (reading(&base), reading(&new));
    let (verdict, change_fraction) = match (&base, &new) {
        (Ok(b), Ok(n)) => match judge_change(quantity.better(), b.point, n, threshold_fraction) {
            GateVerdict::NotCompared => (GateVerdict::NotCompared, None),
            verdict => (verdict, Some(n.point / b.point - 1.0)),
        },
        _ => (GateVerdict::NotCompared, None),
    };
    Some(Check {
        workload: key.workload,
        engine: key.engine,
        what: format!("{} · b{}", key.configuration(), key.batch_size),
        quantity,
        base,
        new,
        change_fraction,
        threshold_fraction,
        threshold,
        verdict,
        why,
    })
}

/// The threshold of `quantity`: [`MEMORY_THRESHOLD_FRACTION`] for a peak-memory ratio, else the
/// larger of the runs' noise floors (either one where only one run has one; 0 where neither has).
fn threshold(quantity: Quantity, base: Option<f64>, new: Option<f64>) -> (Threshold, f64) {
    if quantity == Quantity::MemoryRatio {
        return (Threshold::MemoryTolerance, MEMORY_THRESHOLD_FRACTION);
    }
    match base.into_iter().chain(new).reduce(f64::max) {
        Some(floor) => (Threshold::NoiseFloor, floor),
        None => (Threshold::NoFloor, 0.0),
    }
}

/// The cells of `r` the gate reads, by join key, the lowest seed of each.
fn cells_of(r: &Results) -> BTreeMap<JoinKey, &CellResult> {
    let mut cells: BTreeMap<JoinKey, &CellResult> = BTreeMap::new();
    for cell in r.cells.iter().filter(|c| gated(r, c)) {
        let slot = cells.entry(key(cell)).or_insert(cell);
        if cell.key.seed < slot.key.seed {
            *slot = cell;
        }
    }
    cells
}

/// Whether `cell` is a baseline or trick throughput cell: not the A/A control, nor a cell measured
/// alone (the baseline and the control beside the process design's cells), nor a trick's
/// reference cell that is compared with nothing itself.
fn gated(r: &Results, cell: &CellResult) -> bool {
    matches!(cell.key.kind, CellKind::Throughput { .. })
        && !cell.key.aa_control
        && !cell.key.alone
        && (cell.key.reference_for.is_none() || comparison(r, cell).is_some())
}

/// What joins `cell` across the two runs (no profile: see the module's documentation).
fn key(cell: &CellResult) -> JoinKey {
    JoinKey::of(cell, String::new())
}

/// The comparison of `cell` with its reference in `r`, if it has one.
fn comparison<'a>(r: &'a Results, cell: &CellResult) -> Option<&'a Comparison> {
    let id = cell.id();
    r.comparisons.iter().find(|c| c.cell == id)
}

/// `r`'s side of `cell`'s check.
fn side(r: &Results, cell: &CellResult) -> Side {
    let compared = comparison(r, cell);
    let quantity = quantity(r, cell, compared);
    let key = key(cell);
    let floor_fraction = match quantity {
        Quantity::BaselineThroughput => floor(r, &key, None),
        Quantity::MemoryRatio => None,
        Quantity::SpeedUp | Quantity::RemovalSpeedUp => compared.and_then(|c| floor(r, &key, Some(c.design))),
    };
    let why = compared
        .filter(|c| {
            quantity == Quantity::SpeedUp && c.verdict != Verdict::Faster && cell.status == CellStatus::Ok
        })
        .and_then(|c| c.diagnosis.as_ref())
        .and_then(why_text);
    Side { quantity, reading: reading(cell, compared, quantity), floor_fraction, why }
}

/// What `cell` measures: a baseline's throughput, or its trick's effect as the report judges it
/// (a removal in a leave-one-out, the peak-memory ratio of a memory trick, else the speed-up).
fn quantity(r: &Results, cell: &CellResult, compared: Option<&Comparison>) -> Quantity {
    if cell.key.tricks.is_baseline() && cell.key.reference_for.is_none() {
        return Quantity::BaselineThroughput;
    }
    let reference = compared.and_then(|c| r.cells.iter().find(|x| x.id() == c.baseline));
    if model::leaves_out(cell, reference) {
        Quantity::RemovalSpeedUp
    } else if key(cell).metric() == Metric::Memory {
        Quantity::MemoryRatio
    } else {
        Quantity::SpeedUp
    }
}

/// The value of `quantity` for `cell`, compared as `compared` says; or why there is none.
fn reading(cell: &CellResult, compared: Option<&Comparison>, quantity: Quantity) -> Result<Reading, String> {
    if !matches!(cell.status, CellStatus::Ok) {
        return Err(model::status_label(&cell.status).to_owned());
    }
    let ratio =
        |c: &Comparison| Reading { point: c.speedup, interval: Some((c.speedup_ci_low, c.speedup_ci_high)) };
    let found = match quantity {
        Quantity::BaselineThroughput => cell.throughput.as_ref().map(|t| Reading {
            point: t.median_samples_per_s,
            interval: Some((t.ci_low_samples_per_s, t.ci_high_samples_per_s)),
        }),
        Quantity::SpeedUp | Quantity::RemovalSpeedUp => compared.map(ratio),
        Quantity::MemoryRatio => {
            compared.and_then(|c| c.memory_ratio).map(|point| Reading { point, interval: None })
        }
    };
    found.ok_or_else(|| {
        match (quantity, compared) {
            (Quantity::BaselineThroughput, _) => "no throughput",
            (Quantity::MemoryRatio, Some(_)) => "memory unknown",
            _ => "no comparison",
        }
        .to_owned()
    })
}

/// The largest half-width of `r`'s A/A noise floors for `key`'s workload and engine, of `design`
/// (of any design for `None`), a fraction; `None` where `r` has none.
fn floor(r: &Results, key: &JoinKey, design: Option<MeasurementDesign>) -> Option<f64> {
    r.noise_floors
        .iter()
        .filter(|f| f.workload == key.workload && f.engine == key.engine)
        .filter(|f| design.is_none_or(|d| f.design == d))
        .map(|f| f.half_width)
        .reduce(f64::max)
}

/// `r` as the gate names it.
pub(super) fn run_name(r: &Results) -> RunName {
    RunName {
        id: r.run.id.clone(),
        commit: short_commit(r.run.git_commit.as_deref()).0,
        machine: model::device_name(r),
        libtorch: r.system.libtorch_version.clone(),
    }
}
