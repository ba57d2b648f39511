//! What a training step does, operator by operator, from a profiler trace of either engine (`run
//! --trace`): each operator's calls, self time and the bytes it allocates, per step; the multiset
//! of the ATen operators that do the step's arithmetic; and the differences between two traces,
//! ranked. This is how a gap between the engines, or what a trick changed, is found.

use std::cmp::Ordering;
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::Path;

use serde::Serialize;

use crate::error::Error;
use crate::measure::trace::{complete_events, read_events, TraceEvent};
use crate::results::schema::TraceActivity;
use crate::results::traced::{StepOperator, TracedStep};

/// ATen operators that allocate, alias, view, reshape or convert a tensor without arithmetic (where they
/// call no other operator: `aten::to` and `aten::contiguous` that have nothing to do). Whether an
/// engine calls them depends on how its code is written (tch's wrappers, Python's, a saved-tensor
/// hook), not on the work the step does, so [`OpProfile::kernels`] leaves them out, and an
/// operator that calls only these still counts as doing its own arithmetic.
pub const BOOKKEEPING: [&str; 33] = [
    "aten::empty",
    "aten::empty_strided",
    "aten::empty_like",
    "aten::view",
    "aten::reshape",
    "aten::flatten",
    "aten::_reshape_alias",
    "aten::_unsafe_view",
    "aten::as_strided",
    "aten::as_strided_",
    "aten::alias",
    "aten::detach",
    "aten::detach_",
    "aten::lift_fresh",
    "aten::t",
    "aten::transpose",
    "aten::expand",
    "aten::permute",
    "aten::unsqueeze",
    "aten::squeeze",
    "aten::slice",
    "aten::narrow",
    "aten::split",
    "aten::split_with_sizes",
    "aten::tensor_split",
    "aten::chunk",
    "aten::unbind",
    "aten::select",
    "aten::resize_",
    "aten::to",
    "aten::contiguous",
    "aten::resolve_conj",
    "aten::resolve_neg",
];

/// An operator of a trace: where it ran and its name (`aten::convolution_backward`, a kernel's).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
pub struct OpName {
    /// Where it ran.
    pub activity: TraceActivity,
    /// Its name as the profiler records it.
    pub name: String,
}

/// One operator's work in a trace, per traced step (or, from [`OpWork::minus`], the change
/// between two traces).
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize)]
pub struct OpWork {
    /// Calls per step.
    pub calls: f64,
    /// Time in the operator itself (less the operators it called on the same thread),
    /// milliseconds per step.
    pub self_ms: f64,
    /// Bytes the operator itself allocated (not the operators it called), per step.
    pub allocated_bytes: f64,
}

impl OpWork {
    /// `self` less `other`, field by field.
    pub fn minus(self, other: OpWork) -> OpWork {
        OpWork {
            calls: self.calls - other.calls,
            self_ms: self.self_ms - other.self_ms,
            allocated_bytes: self.allocated_bytes - other.allocated_bytes,
        }
    }

    fn add(&mut self, calls: f64, self_us: f64, allocated_bytes: f64) {
        self.calls += calls;
        self.self_ms += self_us / 1e3;
        self.allocated_bytes += allocated_bytes;
    }

    fn per_step(self, steps: f64) -> OpWork {
        OpWork {
            calls: self.calls / steps,
            self_ms: self.self_ms / steps,
            allocated_bytes: self.allocated_bytes / steps,
        }
    }
}

/// The operators of a trace, per step.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct OpProfile {
    /// Steps the trace recorded.
    pub steps: usize,
    /// Every CPU operator and GPU kernel or copy, with its work per step.
    pub ops: BTreeMap<OpName, OpWork>,
    /// The ATen operators that do the step's arithmetic: calls per step of each CPU operator
    /// named `aten::…`, less [`BOOKKEEPING`], that calls no other such operator.
    pub kernels: BTreeMap<String, f64>,
    /// The training thread's time from its first operator's start to its last one's end,
    /// milliseconds per step (the thread with the most CPU operators).
    pub step_ms: f64,
    /// The part of [`OpProfile::step_ms`] in which the training thread ran no operator: the
    /// interpreter, the harness's own code and waits, milliseconds per step.
    pub outside_ops_ms: f64,
}

impl OpProfile {
    /// The summed self time of every CPU operator, milliseconds per step.
    pub fn cpu_self_ms(&self) -> f64 {
        self.ops.iter().filter(|(op, _)| op.activity == TraceActivity::CpuOp).map(|(_, w)| w.self_ms).sum()
    }

    /// The operator `name`'s work (zero where the trace has none).
    pub fn work(&self, op: &OpName) -> OpWork {
        self.ops.get(op).copied().unwrap_or_default()
    }
}

/// The operators of the trace in `path` ([`crate::measure::trace::Profiling::save`]'s or the
/// PyTorch engine's), which recorded `steps` steps.
pub fn read_op_profile(path: &Path, steps: usize) -> Result<OpProfile, Error> {
    Ok(op_profile(&read_events(path)?, steps))
}

/// What the sweep over one thread's events found for each complete event ([`sweep`]).
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Found {
    /// Its duration less those of the events directly inside it, microseconds.
    pub self_us: f64,
    /// Bytes allocated while it was the innermost event of its thread.
    allocated_bytes: f64,
    /// Whether an ATen operator that may do arithmetic ran inside it.
    calls_aten: bool,
}

/// The operators of `events`, which recorded `steps` steps.
fn op_profile(events: &[TraceEvent], steps: usize) -> OpProfile {
    let complete = complete_events(events);
    let memory: Vec<&TraceEvent> = events.iter().filter(|e| e.name == "[memory]").collect();
    let found = sweep(&complete, &memory);
    let mut total: BTreeMap<OpName, OpWork> = BTreeMap::new();
    let mut kernels: BTreeMap<String, f64> = BTreeMap::new();
    for (&(event, activity), f) in complete.iter().zip(&found) {
        let op = OpName { activity, name: event.name.clone() };
        total.entry(op).or_default().add(1.0, f.self_us, f.allocated_bytes);
        if activity == TraceActivity::CpuOp && is_arithmetic(&event.name) && !f.calls_aten {
            *kernels.entry(event.name.clone()).or_default() += 1.0;
        }
    }
    let n = steps.max(1) as f64;
    let (span_us, covered_us) = training_thread_span(&complete);
    OpProfile {
        steps,
        ops: total.into_iter().map(|(op, w)| (op, w.per_step(n))).collect(),
        kernels: kernels.into_iter().map(|(k, calls)| (k, calls / n)).collect(),
        step_ms: span_us / 1e3 / n,
        outside_ops_ms: (span_us - covered_us) / 1e3 / n,
    }
}

/// What one operator's calls added up to in a trace, while [`traced_step`] reads it.
#[derive(Default)]
struct Calls {
    calls: f64,
    kernel_calls: f64,
    self_us: f64,
    total_us: f64,
    longest_us: f64,
    input_types: Option<String>,
    input_shapes: Option<String>,
    shapes: BTreeSet<String>,
}

/// The share of a traced step below which an operator without arithmetic of its own is left out of
/// [`TracedStep::operators`]: far below any change a diagnosis counts (half a percent).
const KEPT_SHARE: f64 = 0.001;

/// `x` to four significant digits, which is what a few traced steps resolve: it keeps a results
/// file's per-step operators short.
fn four_digits(x: f64) -> f64 {
    if x == 0.0 || !x.is_finite() {
        return x;
    }
    let scale = 10f64.powi(3 - x.abs().log10().floor() as i32);
    (x * scale).round() / scale
}

/// The operators of `events`, which recorded `steps` steps, per step, longest self time first:
/// every one that did arithmetic of its own, and any other that took at least [`KEPT_SHARE`] of
/// the step, their calls and times to four significant digits; with the training thread's step,
/// its time outside operators and the device's busy time.
pub(crate) fn traced_step(events: &[TraceEvent], steps: usize) -> TracedStep {
    let complete = complete_events(events);
    let found = sweep(&complete, &[]);
    let mut rows: BTreeMap<(TraceActivity, &str), Calls> = BTreeMap::new();
    for (&(event, activity), f) in complete.iter().zip(&found) {
        let row = rows.entry((activity, event.name.as_str())).or_default();
        row.calls += 1.0;
        row.self_us += f.self_us;
        row.total_us += event.dur;
        if activity == TraceActivity::CpuOp && is_arithmetic(&event.name) && !f.calls_aten {
            row.kernel_calls += 1.0;
        }
        let shapes = event.args.shapes();
        row.shapes.extend(shapes.clone());
        if event.dur > row.longest_us || row.calls == 1.0 {
            row.longest_us = event.dur;
            row.input_types = event.args.tensor_types();
            row.input_shapes = shapes;
        }
    }
    let n = steps.max(1) as f64;
    let (span_us, covered_us) = training_thread_span(&complete);
    let kept_us = KEPT_SHARE * span_us;
    let mut operators: Vec<StepOperator> = rows
        .into_iter()
        .filter(|(_, row)| row.kernel_calls > 0.0 || row.self_us >= kept_us)
        .map(|((activity, name), row)| StepOperator {
            name: name.to_owned(),
            activity,
            calls: four_digits(row.calls / n),
            kernel_calls: four_digits(row.kernel_calls / n),
            self_ms: four_digits(row.self_us / 1e3 / n),
            total_ms: four_digits(row.total_us / 1e3 / n),
            input_types: row.input_types,
            input_shapes: row.input_shapes,
            distinct_shapes: row.shapes.len(),
        })
        .collect();
    operators.sort_by(|a, b| b.self_ms.total_cmp(&a.self_ms).then(a.name.cmp(&b.name)));
    TracedStep {
        step_ms: span_us / 1e3 / n,
        outside_ops_ms: (span_us - covered_us) / 1e3 / n,
        device_busy_ms: device_busy_us(&complete).map(|us| us / 1e3 / n),
        operators,
    }
}

/// The time in which the device ran a kernel or a copy among `complete` (the union of their
/// intervals), microseconds; `None` where there is none.
fn device_busy_us(complete: &[(&TraceEvent, TraceActivity)]) -> Option<f64> {
    let mut spans: Vec<(f64, f64)> = complete
        .iter()
        .filter(|(_, a)| *a != TraceActivity::CpuOp)
        .map(|(e, _)| (e.ts, e.ts + e.dur))
        .collect();
    if spans.is_empty() {
        return None;
    }
    spans.sort_by(|a, b| a.0.total_cmp(&b.0));
    let mut busy = 0.0;
    let mut open = spans[0];
    for (start, end) in spans.into_iter().skip(1) {
        if start <= open.1 {
            open.1 = open.1.max(end);
        } else {
            busy += open.1 - open.0;
            open = (start, end);
        }
    }
    Some(busy + open.1 - open.0)
}

/// On the thread with the most CPU operators among `complete`: the time from its first operator's
/// start to its last one's end, and the part of it inside an operator, microseconds.
fn training_thread_span(complete: &[(&TraceEvent, TraceActivity)]) -> (f64, f64) {
    let mut threads: HashMap<(String, String), Vec<(f64, f64)>> = HashMap::new();
    for (e, _) in complete.iter().filter(|(_, a)| *a == TraceActivity::CpuOp) {
        threads.entry(e.thread()).or_default().push((e.ts, e.ts + e.dur));
    }
    let Some(mut spans) = threads.into_values().max_by_key(Vec::len) else {
        return (0.0, 0.0);
    };
    spans.sort_by(|a, b| a.0.total_cmp(&b.0));
    let (first, mut last, mut covered) = (spans[0].0, spans[0].0, 0.0);
    let mut open: Option<(f64, f64)> = None;
    for (start, end) in spans {
        last = last.max(end);
        open = match open {
            Some((s, e)) if start <= e => Some((s, e.max(end))),
            Some((s, e)) => {
                covered += e - s;
                Some((start, end))
            }
            None => Some((start, end)),
        };
    }
    covered += open.map_or(0.0, |(s, e)| e - s);
    (last - first, covered)
}

/// Whether `name` is an ATen operator that may do arithmetic (not [`BOOKKEEPING`]).
fn is_arithmetic(name: &str) -> bool {
    name.starts_with("aten::") && !BOOKKEEPING.contains(&name)
}

/// An event on a thread's timeline: a complete event (`memory` false) or a memory event, the
/// `i`-th of its kind, at `ts` for `dur` microseconds.
#[derive(Debug, Clone, Copy)]
struct Moment {
    ts: f64,
    memory: bool,
    dur: f64,
    i: usize,
}

/// For each of `complete`'s events: its self time (less the events directly inside it on the same
/// thread and of the same activity), the bytes allocated while it was the innermost event of its
/// thread (from `memory`'s events), and whether an ATen operator that may do arithmetic ran
/// inside it.
pub(crate) fn sweep(complete: &[(&TraceEvent, TraceActivity)], memory: &[&TraceEvent]) -> Vec<Found> {
    let mut found: Vec<Found> =
        complete.iter().map(|(e, _)| Found { self_us: e.dur, ..Found::default() }).collect();
    // Per thread and activity, the timeline: complete events before memory events that start
    // with them, outer events before the inner ones they start with.
    let mut timelines: HashMap<(TraceActivity, (String, String)), Vec<Moment>> = HashMap::new();
    for (i, (e, a)) in complete.iter().enumerate() {
        timelines.entry((*a, e.thread())).or_default().push(Moment {
            ts: e.ts,
            memory: false,
            dur: e.dur,
            i,
        });
    }
    for (i, e) in memory.iter().enumerate() {
        timelines.entry((TraceActivity::CpuOp, e.thread())).or_default().push(Moment {
            ts: e.ts,
            memory: true,
            dur: 0.0,
            i,
        });
    }
    for mut timeline in timelines.into_values() {
        timeline.sort_by(|a, b| {
            a.ts.total_cmp(&b.ts).then(a.memory.cmp(&b.memory)).then(b.dur.total_cmp(&a.dur))
        });
        let mut open: Vec<usize> = Vec::new();
        for Moment { ts, memory: is_memory, i, .. } in timeline {
            let end = |j: usize| complete[j].0.ts + complete[j].0.dur;
            while open.last().is_some_and(|&j| if is_memory { end(j) < ts } else { end(j) <= ts }) {
                open.pop();
            }
            if is_memory {
                let bytes = memory[i].args.bytes.unwrap_or(0);
                if let (Some(&j), true) = (open.last(), bytes > 0) {
                    found[j].allocated_bytes += bytes as f64;
                }
                continue;
            }
            let event = complete[i].0;
            if let Some(&parent) = open.last() {
                found[parent].self_us -= event.dur;
            }
            if is_arithmetic(&event.name) {
                if let Some(&j) = open.iter().rev().find(|&&j| is_arithmetic(&complete[j].0.name)) {
                    found[j].calls_aten = true;
                }
            }
            open.push(i);
        }
    }
    for f in &mut found {
        f.self_us = f.self_us.max(0.0);
    }
    found
}

/// One operator in two traces.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct OpPair {
    /// The operator.
    pub op: OpName,
    /// Its work in the first trace.
    pub a: OpWork,
    /// Its work in the second.
    pub b: OpWork,
}

impl OpPair {
    /// The second's work less the first's.
    pub fn change(&self) -> OpWork {
        self.b.minus(self.a)
    }
}

/// Every operator of `a` or `b`, the largest change of self time first (then of calls, of bytes
/// allocated, then by name); operators whose work is the same in both are left out.
pub fn differences(a: &OpProfile, b: &OpProfile) -> Vec<OpPair> {
    let names: std::collections::BTreeSet<&OpName> = a.ops.keys().chain(b.ops.keys()).collect();
    let mut pairs: Vec<OpPair> = names
        .into_iter()
        .map(|op| OpPair { op: op.clone(), a: a.work(op), b: b.work(op) })
        .filter(|p| p.a != p.b)
        .collect();
    pairs.sort_by(|x, y| by_size(x.change(), y.change()).then_with(|| x.op.cmp(&y.op)));
    pairs
}

/// Larger changes first: of self time, then of calls, then of bytes allocated.
fn by_size(x: OpWork, y: OpWork) -> Ordering {
    let size = |w: OpWork| (w.self_ms.abs(), w.calls.abs(), w.allocated_bytes.abs());
    let (a, b) = (size(x), size(y));
    b.0.total_cmp(&a.0).then(b.1.total_cmp(&a.1)).then(b.2.total_cmp(&a.2))
}

/// How one operator's work changed from a reference to a trick on each of two engines.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ChangePair {
    /// The operator.
    pub op: OpName,
    /// Its change on the first engine (trick less reference).
    pub a: OpWork,
    /// Its change on the second.
    pub b: OpWork,
}

/// How a trick changed each engine's step (`a_trick` against `a_reference`, `b_trick` against
/// `b_reference`), operator by operator, the operators whose changes differ most first (by self
/// time, then calls, then bytes allocated); operators that changed the same way on both are left
/// out.
pub fn change_differences(
    a_reference: &OpProfile,
    a_trick: &OpProfile,
    b_reference: &OpProfile,
    b_trick: &OpProfile,
) -> Vec<ChangePair> {
    let names: std::collections::BTreeSet<&OpName> =
        [a_reference, a_trick, b_reference, b_trick].iter().flat_map(|p| p.ops.keys()).collect();
    let mut pairs: Vec<ChangePair> = names
        .into_iter()
        .map(|op| ChangePair {
            op: op.clone(),
            a: a_trick.work(op).minus(a_reference.work(op)),
            b: b_trick.work(op).minus(b_reference.work(op)),
        })
        .filter(|p| p.a != p.b)
        .collect();
    pairs.sort_by(|x, y| by_size(x.b.minus(x.a), y.b.minus(y.a)).then_with(|| x.op.cmp(&y.op)));
    pairs
}

/// The arithmetic operators ([`OpProfile::kernels`]) whose calls per step differ between `a` and
/// `b`: name, calls in `a`, calls in `b`.
pub fn kernel_differences(a: &OpProfile, b: &OpProfile) -> Vec<(String, f64, f64)> {
    let names: std::collections::BTreeSet<&String> = a.kernels.keys().chain(b.kernels.keys()).collect();
    let calls = |p: &OpProfile, k: &String| p.kernels.get(k).copied().unwrap_or(0.0);
    names
        .into_iter()
        .map(|k| (k.clone(), calls(a, k), calls(b, k)))
        .filter(|(_, x, y)| (x - y).abs() > 1e-9)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Two steps on one thread: a convolution (10 µs) whose kernel (6 µs) allocates 400 bytes
    /// and frees 100, an empty (bookkeeping) inside the kernel, a relu that allocates 64 bytes
    /// and detaches (bookkeeping) once; a GPU kernel; a memory event outside every operator.
    fn events() -> Vec<TraceEvent> {
        let json = r#"[
          {"ph": "X", "cat": "cpu_op", "name": "aten::conv2d", "pid": 1, "tid": 1, "ts": 100.0, "dur": 10.0},
          {"ph": "X", "cat": "cpu_op", "name": "aten::mkldnn_convolution", "pid": 1, "tid": 1, "ts": 101.0, "dur": 6.0},
          {"ph": "X", "cat": "cpu_op", "name": "aten::empty", "pid": 1, "tid": 1, "ts": 101.0, "dur": 1.0},
          {"ph": "i", "cat": "cpu_instant_event", "name": "[memory]", "pid": 1, "tid": 1, "ts": 101.5, "args": {"Bytes": 400}},
          {"ph": "i", "cat": "cpu_instant_event", "name": "[memory]", "pid": 1, "tid": 1, "ts": 103.0, "args": {"Bytes": 300}},
          {"ph": "i", "cat": "cpu_instant_event", "name": "[memory]", "pid": 1, "tid": 1, "ts": 104.0, "args": {"Bytes": -100}},
          {"ph": "X", "cat": "cpu_op", "name": "aten::relu", "pid": 1, "tid": 1, "ts": 110.0, "dur": 2.0},
          {"ph": "i", "cat": "cpu_instant_event", "name": "[memory]", "pid": 1, "tid": 1, "ts": 110.0, "args": {"Bytes": 64}},
          {"ph": "X", "cat": "cpu_op", "name": "aten::detach", "pid": 1, "tid": 1, "ts": 111.0, "dur": 0.5},
          {"ph": "i", "cat": "cpu_instant_event", "name": "[memory]", "pid": 1, "tid": 1, "ts": 150.0, "args": {"Bytes": 999}},
          {"ph": "X", "cat": "kernel", "name": "sgemm", "pid": 0, "tid": "stream 7", "ts": 120.0, "dur": 4.0},
          {"ph": "X", "cat": "cpu_op", "name": "aten::conv2d", "pid": 1, "tid": 1, "ts": 200.0, "dur": 10.0},
          {"ph": "X", "cat": "cpu_op", "name": "aten::mkldnn_convolution", "pid": 1, "tid": 1, "ts": 201.0, "dur": 6.0},
          {"ph": "X", "cat": "cpu_op", "name": "aten::relu", "pid": 1, "tid": 1, "ts": 210.0, "dur": 2.0}
        ]"#;
        serde_json::from_str(json).unwrap()
    }

    fn op(name: &str) -> OpName {
        OpName { activity: TraceActivity::CpuOp, name: name.to_owned() }
    }

    #[test]
    fn a_traced_step_keeps_every_operator_per_step_with_the_time_outside_them_and_the_devices_busy_time() {
        let step = traced_step(&events(), 2);
        assert!((step.step_ms - 0.056).abs() < 1e-12, "{}", step.step_ms);
        assert!((step.outside_ops_ms - 0.044).abs() < 1e-12, "{}", step.outside_ops_ms);
        assert!((step.device_busy_ms.unwrap() - 0.002).abs() < 1e-12);
        let conv = step.operator(TraceActivity::CpuOp, "aten::mkldnn_convolution").unwrap();
        assert_eq!((conv.calls, conv.kernel_calls), (1.0, 1.0));
        assert!(
            (conv.self_ms - 0.0055).abs() < 1e-12 && (conv.total_ms - 0.006).abs() < 1e-12,
            "less the empty inside one call"
        );
        let outer = step.operator(TraceActivity::CpuOp, "aten::conv2d").unwrap();
        assert_eq!(outer.kernel_calls, 0.0, "it calls an arithmetic operator");
        assert_eq!(step.kernels(), [("aten::mkldnn_convolution", 1.0), ("aten::relu", 1.0)]);
        assert_eq!(step.gpu_kernels(), [("sgemm", 0.5)]);
        assert!(step.operators.windows(2).all(|w| w[0].self_ms >= w[1].self_ms), "longest first");
    }

    #[test]
    fn a_traced_step_leaves_out_brief_operators_without_arithmetic_and_keeps_four_digits() {
        let json = r#"[
          {"ph": "X", "cat": "cpu_op", "name": "aten::mkldnn_convolution", "pid": 1, "tid": 1, "ts": 0.0, "dur": 1000.0},
          {"ph": "X", "cat": "cpu_op", "name": "aten::view", "pid": 1, "tid": 1, "ts": 1000.0, "dur": 0.5},
          {"ph": "X", "cat": "cpu_op", "name": "aten::relu", "pid": 1, "tid": 1, "ts": 1001.0, "dur": 0.5}
        ]"#;
        let step = traced_step(&serde_json::from_str::<Vec<TraceEvent>>(json).unwrap(), 1);
        assert!(
            step.operator(TraceActivity::CpuOp, "aten::view").is_none(),
            "0.05% of the step, no arithmetic"
        );
        assert!(step.operator(TraceActivity::CpuOp, "aten::relu").is_some(), "arithmetic of its own");
        assert_eq!(four_digits(0.123456), 0.1235);
        assert_eq!(four_digits(12345.6), 12350.0);
        assert_eq!(four_digits(0.0), 0.0);
    }

    #[test]
    fn a_traced_operator_keeps_its_longest_calls_types_and_counts_its_shape_sets() {
        let json = r#"[
          {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": 1, "ts": 0.0, "dur": 5.0,
           "args": {"Input Dims": [[8, 4], [4, 2]], "Input type": ["float", "float"]}},
          {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": 1, "ts": 10.0, "dur": 9.0,
           "args": {"Input Dims": [[16, 4], [4, 2], []], "Input type": ["c10::Half", "c10::Half", "Scalar"]}},
          {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": 1, "ts": 20.0, "dur": 1.0,
           "args": {"Input Dims": [[8, 4], [4, 2]], "Input type": ["float", "float"]}}
        ]"#;
        let events: Vec<TraceEvent> = serde_json::from_str(json).unwrap();
        let step = traced_step(&events, 1);
        let mm = &step.operators[0];
        assert_eq!(mm.input_types.as_deref(), Some("c10::Half c10::Half"));
        assert_eq!(mm.input_shapes.as_deref(), Some("[16,4] [4,2]"));
        assert_eq!((mm.calls, mm.distinct_shapes), (3.0, 2));
        assert_eq!(step.device_busy_ms, None, "no device activity on a CPU");
    }

    #[test]
    fn each_operator_has_its_calls_self_time_and_own_allocations_per_step() {
        let p = op_profile(&events(), 2);
        assert_eq!(p.work(&op("aten::conv2d")), OpWork { calls: 1.0, self_ms: 0.004, allocated_bytes: 0.0 });
        let kernel = p.work(&op("aten::mkldnn_convolution"));
        assert_eq!(
            (kernel.calls, kernel.allocated_bytes),
            (1.0, 150.0),
            "300 bytes in 2 steps; frees do not count"
        );
        assert!((kernel.self_ms - 0.0055).abs() < 1e-12, "6 + 6 µs less the empty's 1 µs, over 2 steps");
        assert_eq!(p.work(&op("aten::empty")).allocated_bytes, 200.0, "the innermost operator allocated it");
        assert_eq!(p.work(&op("aten::relu")).allocated_bytes, 32.0, "an allocation as it starts is its own");
        assert_eq!(p.step_ms, (212.0 - 100.0) / 1e3 / 2.0, "first start to last end on the training thread");
        assert!(
            (p.outside_ops_ms - (212.0 - 100.0 - 24.0) / 1e3 / 2.0).abs() < 1e-12,
            "{}",
            p.outside_ops_ms
        );
        let gpu = OpName { activity: TraceActivity::GpuKernel, name: "sgemm".into() };
        assert_eq!(p.work(&gpu).self_ms, 0.002);
        assert!((p.cpu_self_ms() - (0.004 + 0.0055 + 0.0005 + 0.00175 + 0.00025)).abs() < 1e-12);
    }

    #[test]
    fn the_kernels_are_the_aten_operators_that_call_no_other_less_bookkeeping_which_does_not_count() {
        let p = op_profile(&events(), 2);
        let kernels: Vec<(&str, f64)> = p.kernels.iter().map(|(k, n)| (k.as_str(), *n)).collect();
        assert_eq!(kernels, [("aten::mkldnn_convolution", 1.0), ("aten::relu", 1.0)]);
    }

    #[test]
    fn differences_rank_the_largest_change_of_self_time_first_and_leave_equal_work_out() {
        let a = op_profile(&events(), 2);
        let mut b = a.clone();
        b.ops.get_mut(&op("aten::relu")).unwrap().self_ms += 0.5;
        b.ops.get_mut(&op("aten::conv2d")).unwrap().calls += 1.0;
        b.kernels.insert("aten::add".into(), 2.0);
        let d = differences(&a, &b);
        let names: Vec<&str> = d.iter().map(|p| p.op.name.as_str()).collect();
        assert_eq!(names, ["aten::relu", "aten::conv2d"]);
        assert_eq!(d[0].change().self_ms, 0.5);
        assert_eq!(kernel_differences(&a, &b), [("aten::add".to_owned(), 0.0, 2.0)]);
    }

    #[test]
    fn change_differences_compare_what_a_trick_changed_on_each_engine() {
        let reference = op_profile(&events(), 2);
        let mut trick = reference.clone();
        trick.ops.get_mut(&op("aten::relu")).unwrap().self_ms += 1.0;
        let mut other_trick = reference.clone();
        other_trick.ops.get_mut(&op("aten::relu")).unwrap().self_ms += 1.0;
        other_trick.ops.get_mut(&op("aten::conv2d")).unwrap().allocated_bytes += 8.0;
        let d = change_differences(&reference, &trick, &reference, &other_trick);
        assert_eq!(d.len(), 1, "relu changed the same way on both: {d:?}");
        assert_eq!((d[0].op.name.as_str(), d[0].b.allocated_bytes), ("aten::conv2d", 8.0));
    }
}
