//! What a profiler trace's steps did, operator by operator, kept in the results file beside the
//! trace (`measure::ops` reads it from the trace): what a trick's ceiling and cause are read from
//! without the trace file.

use serde::{Deserialize, Serialize};

use crate::results::schema::TraceActivity;

/// The operators of a cell's traced steps, per step.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TracedStep {
    /// The training thread's time from its first operator's start to its last one's end,
    /// milliseconds per step.
    pub step_ms: f64,
    /// The part of `step_ms` in which the training thread ran no operator (the interpreter, the
    /// harness's own code, waits), milliseconds per step.
    pub outside_ops_ms: f64,
    /// On a GPU, the time in which the device ran a kernel or a copy (the union of their
    /// intervals), milliseconds per step; `None` where the trace holds no device activity.
    pub device_busy_ms: Option<f64>,
    /// The CPU operators, GPU kernels and GPU copies of the steps, longest self time first: every
    /// operator that did arithmetic of its own, and any other that took at least 0.1% of the step
    /// (calls and times to four significant digits).
    pub operators: Vec<StepOperator>,
}

/// One operator (or GPU kernel, or copy) over the traced steps, per step.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StepOperator {
    /// Its name as the profiler records it (`aten::convolution_backward`, a kernel's name).
    pub name: String,
    /// Where it ran.
    pub activity: TraceActivity,
    /// Calls per step.
    pub calls: f64,
    /// Calls per step that did the arithmetic themselves: an ATen operator that may do arithmetic
    /// (not one that only allocates, views or converts) and called no other such operator. The
    /// multiset of these is the step's arithmetic, whatever the code around it.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub kernel_calls: f64,
    /// Time in the operator itself, less the operators it called on the same thread,
    /// milliseconds per step.
    pub self_ms: f64,
    /// Time in the operator with the operators it called, milliseconds per step.
    pub total_ms: f64,
    /// The types of the inputs of its longest call, as the trace records them (`float
    /// c10::Half`); `None` where the trace records none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub input_types: Option<String>,
    /// The shapes of the tensor inputs of its longest call (`[32,16,32,32] [16,16,3,3]`); `None`
    /// where the trace records none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub input_shapes: Option<String>,
    /// How many different sets of input shapes its calls took over the traced steps (0 where the
    /// trace records none).
    #[serde(default, skip_serializing_if = "is_zero_count")]
    pub distinct_shapes: usize,
}

impl TracedStep {
    /// The operator `name` of `activity`, where the steps ran it.
    pub fn operator(&self, activity: TraceActivity, name: &str) -> Option<&StepOperator> {
        self.operators.iter().find(|o| o.activity == activity && o.name == name)
    }

    /// The arithmetic of a step: each ATen operator that did arithmetic itself, with its calls
    /// per step ([`StepOperator::kernel_calls`]), by name.
    pub fn kernels(&self) -> Vec<(&str, f64)> {
        let mut kernels: Vec<(&str, f64)> = self
            .operators
            .iter()
            .filter(|o| o.kernel_calls > 0.0)
            .map(|o| (o.name.as_str(), o.kernel_calls))
            .collect();
        kernels.sort_by(|a, b| a.0.cmp(b.0));
        kernels
    }

    /// The GPU kernels of a step with their calls per step, by name (empty on a CPU).
    pub fn gpu_kernels(&self) -> Vec<(&str, f64)> {
        let mut kernels: Vec<(&str, f64)> = self
            .operators
            .iter()
            .filter(|o| o.activity == TraceActivity::GpuKernel)
            .map(|o| (o.name.as_str(), o.calls))
            .collect();
        kernels.sort_by(|a, b| a.0.cmp(b.0));
        kernels
    }
}

fn is_zero(x: &f64) -> bool {
    *x == 0.0
}

fn is_zero_count(n: &usize) -> bool {
    *n == 0
}
