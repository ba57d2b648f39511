//! `cells.csv` (one row per cell, every metric, units in the headers), `comparison.csv` and
//! `history.csv`.

use std::path::Path;

use serde::Serialize;

use crate::measure::flops::Precision;
use crate::report::compare::Comparison;
use crate::report::history::{History, Point, Shift};
use crate::report::model::{self, Report};
use crate::report::ReportError;
use crate::results::diagnosis::Cause;
use crate::results::energy::EnergyMethod;
use crate::results::phases::{PhaseClock, StepBreakdown, StepPhase};
use crate::results::schema::{CellId, CellKind, MeasurementDesign, Phase};
use crate::vocabulary::StepPart;
use crate::workloads::gpt::AttentionBackend;

/// One row of `cells.csv`.
#[derive(Serialize)]
struct CellRow<'a> {
    results_file: String,
    run_id: &'a str,
    device: String,
    profile: &'a str,
    synthetic_data: bool,
    cell_id: CellId,
    workload: String,
    tricks: String,
    batch_size: usize,
    seed: u64,
    kind: &'static str,
    status: &'static str,
    status_detail: String,
    processes: usize,
    /// What a sample is: `images` for the ResNets, `tokens` for the GPT.
    sample_unit: &'static str,
    throughput_median_samples_per_s: Option<f64>,
    throughput_ci_low_samples_per_s: Option<f64>,
    throughput_ci_high_samples_per_s: Option<f64>,
    throughput_windows: Option<usize>,
    peak_allocated_bytes: Option<u64>,
    peak_reserved_bytes: Option<u64>,
    peak_rss_bytes: Option<u64>,
    baseline_cell_id: Option<&'a str>,
    speedup_x: Option<f64>,
    speedup_ci_low_x: Option<f64>,
    speedup_ci_high_x: Option<f64>,
    verdict: Option<&'static str>,
    /// How the speed-up was measured ("paired", "processes").
    design: Option<&'static str>,
    memory_ratio_x: Option<f64>,
    /// The most the trick could give here, × throughput: Amdahl's bound on the part of the
    /// reference's step it acts on.
    ceiling_speedup: Option<f64>,
    /// The part of the step the ceiling is read from (`optimizer`, `convolutions-and-matmuls`, …).
    ceiling_part: Option<StepPart>,
    /// That part's share of the reference's step, percent.
    ceiling_share_percent: Option<f64>,
    /// Why the effect is null, negative or disputed between the engines, by its name in
    /// `results.json` (`bound-elsewhere`, `added-work`, …).
    cause: Option<&'static str>,
    /// The cause in sentences, with its numbers.
    cause_detail: Option<String>,
    tta_metric: Option<&'a str>,
    tta_target: Option<f64>,
    tta_budget_s: Option<f64>,
    time_to_target_s: Option<f64>,
    wall_time_to_target_s: Option<f64>,
    epochs_to_target: Option<f64>,
    tta_best_metric: Option<f64>,
    flops_per_sample: Option<f64>,
    achieved_flops_per_s: Option<f64>,
    peak_flops_per_s: Option<f64>,
    mfu_fraction: Option<f64>,
    energy_j: Option<f64>,
    energy_per_sample_j: Option<f64>,
    mean_power_w: Option<f64>,
    energy_method: Option<EnergyMethod>,
    /// Total length of the processes' energy spans.
    energy_interval_s: Option<f64>,
    /// Why the cell has no energy, as its first process that says so gives it.
    energy_unavailable: Option<&'a str>,
    warmup_peak_bytes: Option<u64>,
    precision: Option<Precision>,
    attention_backend: Option<AttentionBackend>,
    /// Why the machine was not in a fair state while the cell measured (empty when it was).
    machine_warning: Option<String>,
    /// How the step breakdown was timed: `host` or `cuda-events`.
    step_clock: Option<PhaseClock>,
    /// Mean time of an instrumented training step, the sum of its phases.
    step_ms: Option<f64>,
    step_batch_wait_ms: Option<f64>,
    step_host_to_device_ms: Option<f64>,
    step_forward_ms: Option<f64>,
    step_backward_ms: Option<f64>,
    step_all_reduce_ms: Option<f64>,
    step_optimizer_ms: Option<f64>,
    step_metrics_ms: Option<f64>,
    step_graph_replay_ms: Option<f64>,
    /// Throughput of the instrumented steps (compare with the timed median for the marks' cost).
    step_instrumented_samples_per_s: Option<f64>,
}

fn csv_error(path: &Path) -> impl Fn(::csv::Error) -> ReportError + '_ {
    move |source| ReportError::Csv { path: path.to_owned(), source }
}

/// Writes `cells.csv`.
pub(crate) fn write_cells(path: &Path, report: &Report) -> Result<(), ReportError> {
    let mut w = ::csv::Writer::from_path(path).map_err(csv_error(path))?;
    for (g, e) in report.entries() {
        let r = &report.results[e.file];
        let cell = e.cell;
        let (t, m, tta, c) = (cell.throughput, cell.memory, cell.time_to_accuracy.as_ref(), e.comparison);
        let steps = cell.step_breakdown();
        let phase = |p: StepPhase| steps.as_ref().and_then(|b| b.phase_ms(p));
        let diagnosis = c.and_then(|c| c.diagnosis.as_ref());
        let (ceiling, cause) = (diagnosis.and_then(|d| d.ceiling), diagnosis.and_then(|d| d.cause.as_ref()));
        let row = CellRow {
            results_file: super::results_file_name(e.file),
            run_id: &r.run.id,
            device: g.device_name.clone(),
            profile: r.run.profile.id(),
            synthetic_data: r.run.data.synthetic,
            cell_id: cell.id(),
            workload: cell.key.workload.to_string(),
            tricks: cell.key.configuration_label(),
            batch_size: cell.key.batch_size,
            seed: cell.key.seed,
            kind: match cell.key.kind {
                CellKind::Throughput { phase: Phase::Train } => "train-throughput",
                CellKind::Throughput { phase: Phase::Eval } => "eval-throughput",
                CellKind::TimeToAccuracy => "time-to-accuracy",
                CellKind::MemoryProbe => "memory-probe",
            },
            status: model::status_label(&cell.status),
            status_detail: model::status_detail(cell),
            processes: cell.processes.len(),
            sample_unit: g.sample_unit(),
            throughput_median_samples_per_s: t.map(|t| t.median_samples_per_s),
            throughput_ci_low_samples_per_s: t.map(|t| t.ci_low_samples_per_s),
            throughput_ci_high_samples_per_s: t.map(|t| t.ci_high_samples_per_s),
            throughput_windows: t.map(|t| t.windows),
            peak_allocated_bytes: m.and_then(|m| m.peak_allocated_bytes),
            peak_reserved_bytes: m.and_then(|m| m.peak_reserved_bytes),
            peak_rss_bytes: m.and_then(|m| m.peak_rss_bytes),
            baseline_cell_id: c.map(|c| c.baseline.as_str()),
            speedup_x: c.map(|c| c.speedup),
            speedup_ci_low_x: c.map(|c| c.speedup_ci_low),
            speedup_ci_high_x: c.map(|c| c.speedup_ci_high),
            verdict: c.map(|c| model::verdict_label(c.verdict)),
            design: c.map(|c| c.design.label()),
            memory_ratio_x: c.and_then(|c| c.memory_ratio),
            ceiling_speedup: ceiling.map(|c| c.speedup),
            ceiling_part: ceiling.map(|c| c.part),
            ceiling_share_percent: ceiling.map(|c| c.share_percent()),
            cause: cause.map(Cause::tag),
            cause_detail: cause.map(Cause::sentence),
            tta_metric: tta.map(|t| t.metric.id()),
            tta_target: tta.map(|t| t.target),
            tta_budget_s: tta.map(|t| t.budget_s),
            time_to_target_s: tta.and_then(|t| t.time_to_target_s),
            wall_time_to_target_s: tta.and_then(|t| t.wall_time_to_target_s),
            epochs_to_target: tta.and_then(|t| t.epochs_to_target),
            tta_best_metric: tta.map(|t| t.best_metric),
            flops_per_sample: cell.utilisation.as_ref().map(|u| u.flops_per_sample),
            achieved_flops_per_s: cell.utilisation.as_ref().map(|u| u.achieved_flops_per_s),
            peak_flops_per_s: cell.utilisation.as_ref().and_then(|u| u.peak_flops_per_s),
            mfu_fraction: cell.utilisation.as_ref().and_then(|u| u.mfu),
            energy_j: cell.energy.map(|e| e.joules),
            energy_per_sample_j: cell.energy.map(|e| e.joules_per_sample),
            mean_power_w: cell.energy.map(|e| e.mean_power_w),
            energy_method: cell.energy.map(|e| e.method),
            energy_interval_s: cell.energy.and_then(|e| e.interval_s),
            energy_unavailable: cell.energy_unavailable(),
            warmup_peak_bytes: cell.warmup_memory.and_then(|m| m.primary_bytes()),
            precision: cell.processes.first().map(|p| p.precision),
            attention_backend: cell.processes.first().and_then(|p| p.attention_backend),
            machine_warning: cell.machine_warning(),
            step_clock: steps.as_ref().map(|b| b.clock),
            step_ms: steps.as_ref().map(StepBreakdown::step_ms),
            step_batch_wait_ms: phase(StepPhase::BatchWait),
            step_host_to_device_ms: phase(StepPhase::HostToDevice),
            step_forward_ms: phase(StepPhase::Forward),
            step_backward_ms: phase(StepPhase::Backward),
            step_all_reduce_ms: phase(StepPhase::AllReduce),
            step_optimizer_ms: phase(StepPhase::Optimizer),
            step_metrics_ms: phase(StepPhase::Metrics),
            step_graph_replay_ms: phase(StepPhase::GraphReplay),
            step_instrumented_samples_per_s: steps.as_ref().map(|b| b.samples_per_s),
        };
        w.serialize(row).map_err(csv_error(path))?;
    }
    w.flush().map_err(|source| ReportError::Io { path: path.to_owned(), source })
}

/// One row of `comparison.csv`: one joined cell on one device.
#[derive(Serialize)]
struct ComparisonRow<'a> {
    workload: String,
    tricks: String,
    batch_size: usize,
    profile: &'a str,
    device: &'a str,
    cell_id: Option<CellId>,
    status: &'static str,
    speedup_x: Option<f64>,
    speedup_ci_low_x: Option<f64>,
    speedup_ci_high_x: Option<f64>,
    verdict: Option<&'static str>,
    /// How the speed-up was measured ("paired", "processes").
    design: Option<&'static str>,
    memory_ratio_x: Option<f64>,
    /// The trick's verdict on the metric it is judged by ("helps", "hurts", ...).
    judged: Option<&'static str>,
}

/// Writes `comparison.csv`.
pub(crate) fn write_comparison(path: &Path, c: &Comparison) -> Result<(), ReportError> {
    let mut w = ::csv::Writer::from_path(path).map_err(csv_error(path))?;
    for row in &c.rows {
        for (cell, device) in row.cells.iter().zip(&c.devices) {
            w.serialize(ComparisonRow {
                workload: row.key.workload.to_string(),
                tricks: row.key.tricks.label(),
                batch_size: row.key.batch_size,
                profile: &row.key.profile,
                device: &device.label,
                cell_id: cell.cell.as_ref().map(|c| c.id()),
                status: cell.cell.as_ref().map_or("missing", |c| model::status_label(&c.status)),
                speedup_x: cell.speedup.map(|s| s.0),
                speedup_ci_low_x: cell.speedup.map(|s| s.1),
                speedup_ci_high_x: cell.speedup.map(|s| s.2),
                verdict: cell.verdict.map(model::verdict_label),
                design: cell.design.map(MeasurementDesign::label),
                memory_ratio_x: cell.memory_ratio,
                judged: cell.judged.as_ref().map(|v| v.effect.label()),
            })
            .map_err(csv_error(path))?;
        }
    }
    w.flush().map_err(|source| ReportError::Io { path: path.to_owned(), source })
}

/// One row of `history.csv`: one trick cell from one version to the next.
#[derive(Serialize)]
struct HistoryRow<'a> {
    workload: String,
    cell: &'a str,
    batch_size: usize,
    profile: &'a str,
    /// What the effect is measured in: `throughput`, `eval throughput` or `memory`.
    judged_by: &'static str,
    from_version: usize,
    from_commit: &'a str,
    to_version: usize,
    to_commit: &'a str,
    before_x: Option<f64>,
    before_ci_low_x: Option<f64>,
    before_ci_high_x: Option<f64>,
    /// How the earlier speed-up was measured ("paired", "processes"); empty for memory.
    before_design: Option<&'static str>,
    after_x: Option<f64>,
    after_ci_low_x: Option<f64>,
    after_ci_high_x: Option<f64>,
    /// How the later speed-up was measured.
    after_design: Option<&'static str>,
    /// `unchanged`, `up`, `down` or `gap`.
    shift: Shift,
}

/// Writes `history.csv`: every trick cell measured in some version, from each version to the next.
pub(crate) fn write_history(path: &Path, h: &History) -> Result<(), ReportError> {
    let mut w = ::csv::Writer::from_path(path).map_err(csv_error(path))?;
    let point = |p: &Result<Point, String>| p.as_ref().ok().copied();
    for t in h.tracks.iter().filter(|t| t.measured() > 0) {
        for (i, shift) in t.shifts().into_iter().enumerate() {
            let (before, after) = (point(&t.points[i]), point(&t.points[i + 1]));
            w.serialize(HistoryRow {
                workload: t.key.workload.to_string(),
                cell: &t.configuration,
                batch_size: t.key.batch_size,
                profile: &t.key.profile,
                judged_by: t.metric.label(),
                from_version: i + 1,
                from_commit: &h.versions[i].commit,
                to_version: i + 2,
                to_commit: &h.versions[i + 1].commit,
                before_x: before.map(|p| p.value),
                before_ci_low_x: before.and_then(|p| p.interval).map(|i| i.0),
                before_ci_high_x: before.and_then(|p| p.interval).map(|i| i.1),
                before_design: before.and_then(|p| p.design).map(MeasurementDesign::label),
                after_x: after.map(|p| p.value),
                after_ci_low_x: after.and_then(|p| p.interval).map(|i| i.0),
                after_ci_high_x: after.and_then(|p| p.interval).map(|i| i.1),
                after_design: after.and_then(|p| p.design).map(MeasurementDesign::label),
                shift,
            })
            .map_err(csv_error(path))?;
        }
    }
    w.flush().map_err(|source| ReportError::Io { path: path.to_owned(), source })
}
