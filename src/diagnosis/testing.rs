//! Planted cells, breakdowns, traces and comparisons for the diagnosis's tests.

use crate::engine::Engine;
use crate::results::phases::{PhaseClock, PhaseTime, StepBreakdown, StepPhase};
use crate::results::schema::{
    CellKey, CellKind, CellResult, CellStatus, Comparison, MeasurementDesign, Phase, ProcessMeasurement,
    TraceActivity, TraceRecord, Verdict,
};
use crate::results::traced::{StepOperator, TracedStep};
use crate::tricks::{Trick, TrickSet};
use crate::vocabulary::{Precision, WorkloadId};

/// A comparison with `speedup`, its interval `ci` and `verdict`, of a cell against the baseline.
pub(crate) fn comparison(speedup: f64, ci: (f64, f64), verdict: Verdict) -> Comparison {
    Comparison {
        cell: key(&[Trick::ChannelsLast], Engine::Libtorch).id(),
        baseline: key(&[], Engine::Libtorch).id(),
        speedup,
        speedup_ci_low: ci.0,
        speedup_ci_high: ci.1,
        verdict,
        memory_ratio: None,
        design: MeasurementDesign::Paired,
        diagnosis: None,
    }
}

/// The key of a ResNet-8 training-throughput cell of `tricks` on `engine`.
pub(crate) fn key(tricks: &[Trick], engine: Engine) -> CellKey {
    CellKey {
        workload: WorkloadId::Resnet8,
        tricks: tricks.iter().copied().collect::<TrickSet>(),
        batch_size: 32,
        seed: 0,
        kind: CellKind::Throughput { phase: Phase::Train },
        reference_for: None,
        aa_control: false,
        alone: false,
        engine,
    }
}

/// A breakdown of the host clock with `phases`, and the backward phase filling the step to
/// `step_ms`.
pub(crate) fn breakdown(phases: &[(StepPhase, f64)], step_ms: f64) -> StepBreakdown {
    let named: f64 = phases.iter().map(|(_, ms)| ms).sum();
    let mut times: Vec<PhaseTime> =
        phases.iter().map(|&(phase, mean_ms)| PhaseTime { phase, mean_ms }).collect();
    times.push(PhaseTime { phase: StepPhase::Backward, mean_ms: step_ms - named });
    times.sort_by_key(|t| t.phase);
    StepBreakdown { clock: PhaseClock::Host, steps: 10, phases: times, samples_per_s: 1000.0 }
}

/// One operator of a planted trace, called once a step, its self time its total.
pub(crate) fn op(name: &str, activity: TraceActivity, self_ms: f64) -> StepOperator {
    StepOperator {
        name: name.to_owned(),
        activity,
        calls: 1.0,
        kernel_calls: if activity == TraceActivity::CpuOp { 1.0 } else { 0.0 },
        self_ms,
        total_ms: self_ms,
        input_types: None,
        input_shapes: None,
        distinct_shapes: 0,
    }
}

/// A planted CPU trace of a `step_ms` step, `outside_ms` of it outside `ops`.
pub(crate) fn traced_step(step_ms: f64, outside_ms: f64, ops: &[(&str, TraceActivity, f64)]) -> TracedStep {
    TracedStep {
        step_ms,
        outside_ops_ms: outside_ms,
        device_busy_ms: None,
        operators: ops.iter().map(|&(name, activity, ms)| op(name, activity, ms)).collect(),
    }
}

/// A measured baseline cell whose one process recorded `breakdown` and a trace of `step`.
pub(crate) fn cell_with(breakdown: Option<StepBreakdown>, step: Option<TracedStep>) -> CellResult {
    cell_of(key(&[], Engine::Libtorch), breakdown, step)
}

/// A measured cell of `key` whose one process recorded `breakdown` and a trace of `step`.
pub(crate) fn cell_of(
    key: CellKey,
    breakdown: Option<StepBreakdown>,
    step: Option<TracedStep>,
) -> CellResult {
    let mut cell = CellResult::new(key, CellStatus::Ok);
    let mut process = ProcessMeasurement::new(0, 1e6, Precision::Fp32);
    process.window_samples_per_s = vec![1000.0];
    process.step_breakdown = breakdown;
    process.trace = step.map(|step| TraceRecord {
        path: "traces/planted.json.gz".into(),
        steps: 3,
        operators: Vec::new(),
        step: Some(step),
    });
    cell.processes.push(process);
    cell
}
