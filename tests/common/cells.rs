//! Cells: their keys, what a process of one measures, what a cell's results hold, and finding a
//! cell or its comparison in results.

use trickbench::engine::Engine;
use trickbench::results::schema::{
    CellId, CellKey, CellKind, CellResult, Comparison, MeasurementDesign, Memory, Phase, ProcessMeasurement,
    Results, Throughput, Verdict,
};
use trickbench::tricks::{Trick, TrickSet};
use trickbench::vocabulary::Precision;
use trickbench::workloads::WorkloadId;

/// The training-throughput cell of `workload` with `tricks` at batch 128 and seed 0, measured
/// against the plain recipe; [`KeyWith`] changes the rest.
pub fn train_key(workload: WorkloadId, tricks: &[Trick]) -> CellKey {
    CellKey {
        workload,
        tricks: tricks.iter().copied().collect::<TrickSet>(),
        batch_size: 128,
        seed: 0,
        kind: CellKind::Throughput { phase: Phase::Train },
        reference_for: None,
        aa_control: false,
        alone: false,
        engine: Engine::Libtorch,
    }
}

/// Setters of a [`CellKey`], for keys made by [`train_key`].
pub trait KeyWith {
    /// At `batch_size` samples per step.
    fn with_batch(self, batch_size: usize) -> Self;
    /// Of `seed`.
    fn with_seed(self, seed: u64) -> Self;
    /// A cell of `kind`.
    fn with_kind(self, kind: CellKind) -> Self;
    /// The reference cell of `trick` (its "off" side where that is not the plain recipe).
    fn with_reference_for(self, trick: Trick) -> Self;
}

impl KeyWith for CellKey {
    fn with_batch(self, batch_size: usize) -> Self {
        CellKey { batch_size, ..self }
    }

    fn with_seed(self, seed: u64) -> Self {
        CellKey { seed, ..self }
    }

    fn with_kind(self, kind: CellKind) -> Self {
        CellKey { kind, ..self }
    }

    fn with_reference_for(self, trick: Trick) -> Self {
        CellKey { reference_for: Some(trick), ..self }
    }
}

/// A measured throughput around a median of `samples_per_s`: its interval ±3%, over 10 windows
/// that vary by 2% (coefficient of variation), none an outlier.
pub fn throughput(samples_per_s: f64) -> Throughput {
    Throughput {
        median_samples_per_s: samples_per_s,
        ci_low_samples_per_s: samples_per_s * 0.97,
        ci_high_samples_per_s: samples_per_s * 1.03,
        windows: 10,
        coefficient_of_variation: Some(0.02),
        outlier_windows: 0,
    }
}

/// `cell` compared with `baseline` in the process design: `speedup` within ±`spread`, the verdict
/// the interval gives, no memory ratio.
pub fn comparison(cell: &CellId, baseline: &CellId, speedup: f64, spread: f64) -> Comparison {
    let (low, high) = (speedup - spread, speedup + spread);
    let verdict = if low > 1.0 {
        Verdict::Faster
    } else if high < 1.0 {
        Verdict::Slower
    } else {
        Verdict::NoSignificantEffect
    };
    Comparison {
        cell: cell.clone(),
        baseline: baseline.clone(),
        speedup,
        speedup_ci_low: low,
        speedup_ci_high: high,
        verdict,
        memory_ratio: None,
        design: MeasurementDesign::Processes,
        diagnosis: None,
    }
}

/// A CPU process of `round` whose timed windows ran at `window_samples_per_s`: 2 s of wall time,
/// 1 GiB peak RSS, 8 host reads, a last loss of 2, fp32 at 1e8 FLOPs a sample over 128 timed
/// samples, and no energy read (NVML measures NVIDIA GPUs only).
pub fn measurement(round: usize, window_samples_per_s: Vec<f64>) -> ProcessMeasurement {
    ProcessMeasurement {
        wall_s: 2.0,
        window_samples_per_s,
        memory: Memory { peak_rss_bytes: Some(1 << 30), ..Default::default() },
        host_metric_reads: 8,
        last_loss: Some(2.0),
        timed_samples: 128,
        energy_unavailable: Some("NVML measures NVIDIA GPUs; this run is on the CPU".into()),
        ..ProcessMeasurement::new(round, 1e8, Precision::Fp32)
    }
}

/// The cell `id` of `results`; the test fails naming it when there is none.
pub fn cell<'a>(results: &'a Results, id: &str) -> &'a CellResult {
    results.cells.iter().find(|c| c.id() == id).unwrap_or_else(|| panic!("no cell {id}"))
}

/// The comparison of cell `id` in `results`; the test fails naming it when there is none.
pub fn comparison_of<'a>(results: &'a Results, id: &str) -> &'a Comparison {
    results.comparisons.iter().find(|c| c.cell == id).unwrap_or_else(|| panic!("no comparison of {id}"))
}
