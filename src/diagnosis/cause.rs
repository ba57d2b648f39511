//! The cause of a null, negative or disputed effect, chosen from what was measured: each check
//! below reads the breakdowns, the traces of the cell and its reference, the noise floor or
//! `torch.compile`'s counters, and the first that finds its cause names it. The order depends on
//! the effect: a null effect asks first whether the trick could have shown one at all; a negative
//! one asks what the trick added; a faster effect the other engine disputes asks what it removed.

use super::parts::{self, is_conv_or_matmul, is_convolution, on_device};
use super::Case;
use crate::results::diagnosis::{Cause, Ceiling, OpChange, OperatorNote};
use crate::results::schema::{TraceActivity, Verdict};
use crate::results::traced::{StepOperator, TracedStep};
use crate::tricks::Trick;
use crate::vocabulary::StepPart;

/// The share of the reference's step outside operators (or, on a GPU, with the device idle) from
/// which a trick that acts on operators is overhead-bound (launch-bound).
const OVERHEAD_SHARE: f64 = 0.5;

/// Operators shown with a cause.
const TOP_OPERATORS: usize = 3;

/// The smallest change of one operator's time that counts as work added or removed: this share of
/// the reference's traced step, and at least [`MIN_CHANGE_MS`]. Smaller changes are the traced
/// steps' own noise.
const CHANGE_SHARE: f64 = 0.005;

/// An operator called as often in both steps counts only where its time changed by at least this
/// share of its own time in the reference's step: a few traced steps time each operator to within
/// some 10–20%, while a change of calls is exact.
const SAME_CALLS_CHANGE: f64 = 0.25;

/// See [`CHANGE_SHARE`], milliseconds per step.
const MIN_CHANGE_MS: f64 = 0.02;

/// Calls per step closer than this are the same number of calls.
const SAME_CALLS: f64 = 0.01;

/// The share of a step's matmul and convolution calls with unaligned dimensions from which they
/// are a cause.
const UNALIGNED_SHARE: f64 = 0.25;

/// The floor taken where no A/A control was measured, a fraction.
const DEFAULT_FLOOR: f64 = 0.02;

/// The name of the time outside operators in a list of operator changes.
pub const OUTSIDE_OPERATORS: &str = "time outside operators";

/// The traced steps of a case's cell and its reference, where both were traced.
#[derive(Clone, Copy)]
struct Traces<'a> {
    trick: &'a TracedStep,
    reference: &'a TracedStep,
}

/// A check that finds one cause, or not.
type Check = fn(&Case, Option<&Ceiling>, Option<Traces>) -> Option<Cause>;

/// The cause of `case`'s effect, whose trick's ceiling is `ceiling`: the first check that finds
/// one, in the order its effect asks; otherwise [`Cause::NotFound`] with what was missing.
pub(super) fn cause(case: &Case, ceiling: Option<&Ceiling>) -> Cause {
    let traces = traces(case);
    let checks: &[Check] = match case.comparison.verdict {
        Verdict::NoSignificantEffect | Verdict::WithinNoise => &[
            graph_breaks,
            bound_elsewhere,
            left_in_fp32,
            unaligned_shapes,
            cudnn_retunes,
            no_kernel_changed,
            overhead_bound,
            launch_bound,
            work_behind_no_effect,
        ],
        Verdict::Slower => &[graph_breaks, added_work, left_in_fp32, unaligned_shapes, cudnn_retunes],
        Verdict::Faster => &[removed_work],
    };
    checks.iter().find_map(|check| check(case, ceiling, traces)).unwrap_or_else(|| not_found(case, traces))
}

/// The traced steps of `case`'s cell and reference, where both have one.
fn traces<'a>(case: &Case<'a>) -> Option<Traces<'a>> {
    let step = |c: &'a crate::results::schema::CellResult| c.trace().and_then(|t| t.step.as_ref());
    Some(Traces { trick: step(case.cell)?, reference: step(case.reference)? })
}

/// "Cause not found", with what was looked at or missing.
fn not_found(case: &Case, traces: Option<Traces>) -> Cause {
    let looked_at = match traces {
        Some(t) => format!(
            "the traced steps ran {:.1} ms against the reference's {:.1} ms ({:+.1}%, where the timed windows \
             measured {:+.1}%), and no operator's change, the breakdowns or the noise floor shows a known cause",
            t.trick.step_ms,
            t.reference.step_ms,
            (t.trick.step_ms / t.reference.step_ms - 1.0) * 100.0,
            (1.0 / case.comparison.speedup - 1.0) * 100.0
        ),
        None => format!(
            "{} has no profiler trace to compare operator by operator",
            if case.cell.trace().is_none() { case.cell.id() } else { case.reference.id() }
        ),
    };
    Cause::NotFound { looked_at }
}

/// The floor that applies to `case`, a fraction.
fn floor(case: &Case) -> f64 {
    case.floor.unwrap_or(DEFAULT_FLOOR)
}

/// Graph breaks or recompiles of a `torch-compile` cell, from its processes' counters.
fn graph_breaks(case: &Case, _: Option<&Ceiling>, _: Option<Traces>) -> Option<Cause> {
    if case.trick != Trick::TorchCompile {
        return None;
    }
    let counters = case.cell.processes.iter().find_map(|p| p.compile_counters)?;
    (counters.graph_breaks > 0 || counters.recompiles > 0).then_some(Cause::GraphBreaks {
        graph_breaks: counters.graph_breaks,
        recompiles: counters.recompiles,
        graphs: counters.graphs,
    })
}

/// Bound elsewhere: the ceiling lies inside the noise floor.
fn bound_elsewhere(case: &Case, ceiling: Option<&Ceiling>, _: Option<Traces>) -> Option<Cause> {
    let ceiling = ceiling?;
    let floor = case.floor?;
    (ceiling.speedup - 1.0 <= floor)
        .then_some(Cause::BoundElsewhere { ceiling: ceiling.speedup, floor_half_width: floor })
}

/// Whether the part a ceiling bounds is a kind of operator.
fn acts_on_operators(ceiling: Option<&Ceiling>) -> bool {
    ceiling.is_some_and(|c| {
        matches!(c.part, StepPart::ConvolutionsAndMatmuls | StepPart::Elementwise | StepPart::Attention)
    })
}

/// Overhead-bound: on a CPU, most of the reference's step is outside operators, and the trick
/// acts on operators.
fn overhead_bound(_: &Case, ceiling: Option<&Ceiling>, traces: Option<Traces>) -> Option<Cause> {
    let reference = traces?.reference;
    let bound = acts_on_operators(ceiling)
        && !on_device(reference)
        && reference.outside_ops_ms >= OVERHEAD_SHARE * reference.step_ms;
    bound.then_some(Cause::OverheadBound { outside_ms: reference.outside_ops_ms, step_ms: reference.step_ms })
}

/// Launch-bound: on a GPU, the device sat idle for most of the reference's step, and the trick
/// acts on operators.
fn launch_bound(_: &Case, ceiling: Option<&Ceiling>, traces: Option<Traces>) -> Option<Cause> {
    let reference = traces?.reference;
    let idle_ms = parts::traced_ms(StepPart::Overhead, reference).filter(|_| on_device(reference))?;
    let bound = acts_on_operators(ceiling) && idle_ms >= OVERHEAD_SHARE * reference.step_ms;
    bound.then_some(Cause::LaunchBound { idle_ms, step_ms: reference.step_ms })
}

/// No kernel changed: the same arithmetic operators (and GPU kernels), as often, and the part the
/// trick acts on took the same time within the floor.
fn no_kernel_changed(case: &Case, ceiling: Option<&Ceiling>, traces: Option<Traces>) -> Option<Cause> {
    let Traces { trick, reference } = traces?;
    let same = |a: Vec<(&str, f64)>, b: Vec<(&str, f64)>| {
        a.len() == b.len() && a.iter().zip(&b).all(|(x, y)| x.0 == y.0 && (x.1 - y.1).abs() < SAME_CALLS)
    };
    if !same(trick.kernels(), reference.kernels()) || !same(trick.gpu_kernels(), reference.gpu_kernels()) {
        return None;
    }
    let part_change_ms = part_change_ms(case, ceiling, traces?)?;
    let unchanged = part_change_ms.abs() <= floor(case) * reference.step_ms;
    unchanged.then_some(Cause::NoKernelChanged {
        kernels: trick.kernels().len() + trick.gpu_kernels().len(),
        part_change_ms,
        step_ms: reference.step_ms,
    })
}

/// How much the part `ceiling` bounds changed from the reference to the trick, milliseconds per
/// step: from the traces for operators and the time between them, from the breakdowns for phases,
/// the whole traced step where there is no ceiling.
fn part_change_ms(case: &Case, ceiling: Option<&Ceiling>, traces: Traces) -> Option<f64> {
    let Some(ceiling) = ceiling else {
        return Some(traces.trick.step_ms - traces.reference.step_ms);
    };
    if let (Some(a), Some(b)) =
        (parts::traced_ms(ceiling.part, traces.trick), parts::traced_ms(ceiling.part, traces.reference))
    {
        return Some(a - b);
    }
    let trick_part_ms = super::ceiling(case.trick, case.cell).ok()?.part_ms;
    Some(trick_part_ms - ceiling.part_ms)
}

/// An operator's calls per step and self time in a step, nothing where the step did not run it.
fn work(op: Option<&StepOperator>) -> (f64, f64) {
    op.map_or((0.0, 0.0), |o| (o.calls, o.self_ms))
}

/// Whether an operator's calls in two steps are the same calls: its longest call took the same
/// input shapes in both (a recomputed forward, a repeated conversion), not calls split smaller.
fn same_calls(a: &StepOperator, b: &StepOperator) -> bool {
    a.input_shapes.is_some() && a.input_shapes == b.input_shapes
}

/// What changed operator by operator from the reference's traced step to the trick's, each change
/// large enough to count: at least [`CHANGE_SHARE`] of the reference's step, and for an operator
/// called as often in both, or the time outside operators, [`SAME_CALLS_CHANGE`] of its own time.
/// An operator the trick calls more often with the same shapes ([`same_calls`]) adds its extra
/// calls at the reference's time per call, which the few traced steps time better than the
/// difference of two noisy totals. On a GPU its kernels and copies, on a CPU its operators and the
/// time outside them. With `calls_only`, only the operators whose calls changed: where the
/// windows saw no effect, an operator's time alone, which varies by half between the traced steps
/// of identical work (a GELU's backward, say), would name noise.
fn work_changes(traces: Traces, calls_only: bool) -> Vec<OpChange> {
    let Traces { trick, reference } = traces;
    let device = on_device(reference);
    let counted =
        |a: TraceActivity| if device { a != TraceActivity::CpuOp } else { a == TraceActivity::CpuOp };
    let mut names: Vec<(TraceActivity, &str)> = trick
        .operators
        .iter()
        .chain(&reference.operators)
        .filter(|o| counted(o.activity))
        .map(|o| (o.activity, o.name.as_str()))
        .collect();
    names.sort();
    names.dedup();
    let smallest = (CHANGE_SHARE * reference.step_ms).max(MIN_CHANGE_MS);
    let mut changes: Vec<OpChange> = names
        .into_iter()
        .filter_map(|(activity, name)| {
            let (a, b) = (reference.operator(activity, name), trick.operator(activity, name));
            let ((calls_a, ms_a), (calls_b, ms_b)) = (work(a), work(b));
            let calls_change = calls_b - calls_a;
            let self_ms_change = match (a, b) {
                (Some(a), Some(b)) if calls_change >= 0.5 && a.calls > 0.0 && same_calls(a, b) => {
                    calls_change * a.self_ms / a.calls
                }
                _ => ms_b - ms_a,
            };
            let timed = !calls_only && self_ms_change.abs() >= SAME_CALLS_CHANGE * ms_a;
            let counts = self_ms_change.abs() >= smallest && (calls_change.abs() >= 0.5 || timed);
            counts.then(|| OpChange {
                name: name.to_owned(),
                activity: Some(activity),
                calls_change,
                self_ms_change,
            })
        })
        .collect();
    let outside_change = trick.outside_ops_ms - reference.outside_ops_ms;
    let outside_counts = outside_change.abs() >= smallest
        && outside_change.abs() >= SAME_CALLS_CHANGE * reference.outside_ops_ms;
    if !device && !calls_only && outside_counts {
        changes.push(OpChange {
            name: OUTSIDE_OPERATORS.to_owned(),
            activity: None,
            calls_change: 0.0,
            self_ms_change: outside_change,
        });
    }
    changes
}

/// The operators of `changes` that grew (`grew`) or shrank, largest first, at most
/// [`TOP_OPERATORS`], and their changes summed (positive).
fn largest(changes: &[OpChange], grew: bool) -> (Vec<OpChange>, f64) {
    let mut picked: Vec<OpChange> =
        changes.iter().filter(|c| (c.self_ms_change > 0.0) == grew).cloned().collect();
    let total = picked.iter().map(|c| c.self_ms_change.abs()).sum();
    picked.sort_by(|a, b| b.self_ms_change.abs().total_cmp(&a.self_ms_change.abs()));
    picked.truncate(TOP_OPERATORS);
    (picked, total)
}

/// It added work: the operators that grew, where their growth explains at least half of a
/// slower effect's loss.
fn added_work(case: &Case, _: Option<&Ceiling>, traces: Option<Traces>) -> Option<Cause> {
    let traces = traces?;
    let step_ms = traces.reference.step_ms;
    let (operators, added_ms) = largest(&work_changes(traces, false), true);
    let needed = 0.5 * step_ms * (1.0 / case.comparison.speedup - 1.0);
    (!operators.is_empty() && added_ms >= needed).then_some(Cause::AddedWork { operators, added_ms, step_ms })
}

/// What the work a trick changed says of an effect it did not show, from the operators whose calls
/// changed: it replaced work (what it added and what it removed each exceed what the floor hides),
/// added work that exceeds it, or removed no more than it hides. Where it removed more than the floor hides and added less, the
/// traces contradict the windows and say nothing.
fn work_behind_no_effect(case: &Case, _: Option<&Ceiling>, traces: Option<Traces>) -> Option<Cause> {
    let traces = traces?;
    let step_ms = traces.reference.step_ms;
    let hidden_ms = floor(case) * step_ms;
    let changes = work_changes(traces, true);
    let ((added, added_ms), (removed, removed_ms)) = (largest(&changes, true), largest(&changes, false));
    match (added_ms >= hidden_ms, removed_ms >= hidden_ms) {
        (true, true) => Some(Cause::ReplacedWork { added, removed, added_ms, removed_ms, step_ms }),
        (true, false) => Some(Cause::AddedWork { operators: added, added_ms, step_ms }),
        (false, false) if !removed.is_empty() => {
            Some(Cause::RemovedWork { operators: removed, removed_ms, step_ms })
        }
        _ => None,
    }
}

/// It removed work: the operators that shrank or went (a faster effect the other engine
/// disputes, whose own removal differs).
fn removed_work(_: &Case, _: Option<&Ceiling>, traces: Option<Traces>) -> Option<Cause> {
    let traces = traces?;
    let (operators, removed_ms) = largest(&work_changes(traces, false), false);
    let step_ms = traces.reference.step_ms;
    (!operators.is_empty()).then_some(Cause::RemovedWork { operators, removed_ms, step_ms })
}

/// The matmuls and convolutions of a trick's traced step on a GPU (`None` on a CPU), longest
/// first.
fn device_conv_matmuls<'a>(traces: Option<Traces<'a>>) -> Option<Vec<&'a StepOperator>> {
    let trick = traces?.trick;
    if !on_device(trick) {
        return None;
    }
    let mut ops: Vec<_> = trick
        .operators
        .iter()
        .filter(|o| o.activity == TraceActivity::CpuOp && is_conv_or_matmul(&o.name) && o.kernel_calls > 0.0)
        .collect();
    ops.sort_by(|a, b| b.total_ms.total_cmp(&a.total_ms));
    Some(ops)
}

/// Operator `o` with `detail` (its input types or shapes) as a cause names it.
fn note(o: &StepOperator, detail: Option<&str>) -> OperatorNote {
    OperatorNote { name: o.name.clone(), total_ms: o.total_ms, detail: detail.unwrap_or_default().to_owned() }
}

/// Autocast left matmuls or convolutions in fp32: under `amp` or `amp-bf16` on a GPU, some take
/// float inputs.
fn left_in_fp32(case: &Case, _: Option<&Ceiling>, traces: Option<Traces>) -> Option<Cause> {
    if !matches!(case.trick, Trick::Amp | Trick::AmpBf16) {
        return None;
    }
    let float = |types: &Option<String>| types.as_deref().is_some_and(|t| t.split(' ').any(|x| x == "float"));
    let fp32: Vec<_> = device_conv_matmuls(traces)?.into_iter().filter(|o| float(&o.input_types)).collect();
    if fp32.is_empty() {
        return None;
    }
    let host_ms = fp32.iter().map(|o| o.total_ms).sum();
    let operators = fp32.iter().take(TOP_OPERATORS).map(|o| note(o, o.input_types.as_deref())).collect();
    Some(Cause::LeftInFp32 { operators, host_ms, step_ms: traces?.trick.step_ms })
}

/// The multiple of its dimensions a trick's tensor cores need, for the tricks that move matmuls
/// or convolutions onto them.
fn tensor_core_multiple(trick: Trick) -> Option<u32> {
    match trick {
        Trick::Amp | Trick::AmpBf16 | Trick::Tf32 => Some(8),
        Trick::Fp8Matmul => Some(16),
        _ => None,
    }
}

/// The sizes of each tensor in a trace's shapes text (`[32,16,32,32] [16,16,3,3]`).
fn parse_shapes(text: &str) -> Vec<Vec<u64>> {
    text.split(' ')
        .map(|t| t.trim_matches(|c| c == '[' || c == ']').split(',').filter_map(|d| d.parse().ok()).collect())
        .collect()
}

/// The dimensions of `shapes` that tensor cores tile: the channels of a convolution's 4-d
/// tensors, the last two dimensions of a matmul's matrices.
fn tiled_dims(convolution: bool, shapes: &[Vec<u64>]) -> Vec<u64> {
    if convolution {
        shapes.iter().filter(|s| s.len() == 4).map(|s| s[1]).collect()
    } else {
        shapes.iter().filter(|s| s.len() >= 2).flat_map(|s| s[s.len() - 2..].to_vec()).collect()
    }
}

/// Shapes not tensor-core aligned: under a trick that moves matmuls or convolutions onto tensor
/// cores, on a GPU, at least [`UNALIGNED_SHARE`] of their calls have a tiled dimension that is
/// not a multiple of what the precision needs.
fn unaligned_shapes(case: &Case, _: Option<&Ceiling>, traces: Option<Traces>) -> Option<Cause> {
    let multiple = tensor_core_multiple(case.trick)?;
    let ops = device_conv_matmuls(traces)?;
    let unaligned: Vec<_> = ops
        .iter()
        .filter(|o| {
            let shapes = parse_shapes(o.input_shapes.as_deref().unwrap_or(""));
            tiled_dims(is_convolution(&o.name), &shapes).iter().any(|d| d % u64::from(multiple) != 0)
        })
        .collect();
    let calls = |list: &[&&StepOperator]| list.iter().map(|o| o.kernel_calls).sum::<f64>();
    let all: Vec<_> = ops.iter().collect();
    if unaligned.is_empty() || calls(&unaligned) < UNALIGNED_SHARE * calls(&all) {
        return None;
    }
    let operators =
        unaligned.iter().take(TOP_OPERATORS).map(|o| note(o, o.input_shapes.as_deref())).collect();
    Some(Cause::UnalignedShapes { multiple, operators })
}

/// cuDNN retunes: under `cudnn-benchmark` on a GPU, a convolution took more sets of input shapes
/// over the traced steps than it has calls in one step, so some layer saw a new shape.
fn cudnn_retunes(case: &Case, _: Option<&Ceiling>, traces: Option<Traces>) -> Option<Cause> {
    if case.trick != Trick::CudnnBenchmark {
        return None;
    }
    let operators: Vec<OperatorNote> = device_conv_matmuls(traces)?
        .into_iter()
        .filter(|o| is_convolution(&o.name) && o.distinct_shapes as f64 > o.calls.round())
        .take(TOP_OPERATORS)
        .map(|o| OperatorNote {
            name: o.name.clone(),
            total_ms: o.total_ms,
            detail: format!("{} sets of input shapes for {:.0} calls a step", o.distinct_shapes, o.calls),
        })
        .collect();
    (!operators.is_empty()).then_some(Cause::CudnnRetunes { operators })
}

#[cfg(test)]
mod tests;
