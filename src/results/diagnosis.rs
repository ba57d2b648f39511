//! Why a trick did what it did, as a results file records it beside each comparison: the most the
//! trick could have given here (its [`Ceiling`], Amdahl's bound on the part of the step it acts
//! on) and, beside an effect that is null, negative or disputed between the engines, a measured
//! [`Cause`] chosen from the step's breakdown and the profiler traces of the cell and its
//! reference (`crate::diagnosis` derives both).

use serde::{Deserialize, Serialize};

use crate::results::schema::TraceActivity;
use crate::vocabulary::StepPart;

/// A comparison's ceiling and, where its effect needs one, its cause.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Diagnosis {
    /// The most the trick could have given here (`None`: see `ceiling_unavailable`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ceiling: Option<Ceiling>,
    /// Why there is no ceiling: the trick acts on no one part of a step, or the reference recorded
    /// no breakdown or trace of the part.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ceiling_unavailable: Option<String>,
    /// Why the effect is null or negative, or differs from the other engine's (`None` for an
    /// effect that helps and that the other engine does not dispute).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cause: Option<Cause>,
}

/// Amdahl's bound on a trick's speed-up: the part of its reference's step it acts on, removed
/// entirely, gives `1 / (1 - part_ms / step_ms)`.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Ceiling {
    /// The part of the step the trick acts on.
    pub part: StepPart,
    /// The part's time in the reference's step, milliseconds per step.
    pub part_ms: f64,
    /// The reference's step, milliseconds: the sum of its breakdown's phases for a phase, its
    /// traced step for operators and the time between them.
    pub step_ms: f64,
    /// The largest speed-up the trick could give, × throughput (1 for a trick that acts on
    /// memory only).
    pub speedup: f64,
}

impl Ceiling {
    /// The ceiling of a trick that acts on `part`, `part_ms` of a `step_ms` step.
    pub fn new(part: StepPart, part_ms: f64, step_ms: f64) -> Ceiling {
        let share = if step_ms > 0.0 { (part_ms / step_ms).clamp(0.0, 1.0) } else { 0.0 };
        let speedup = if share >= 1.0 { f64::INFINITY } else { 1.0 / (1.0 - share) };
        Ceiling { part, part_ms, step_ms, speedup }
    }

    /// The part's share of the step, percent.
    pub fn share_percent(&self) -> f64 {
        if self.step_ms > 0.0 {
            self.part_ms / self.step_ms * 100.0
        } else {
            0.0
        }
    }

    /// "at most 1.04×", or "unbounded" where the part is the whole step.
    pub fn speedup_text(&self) -> String {
        if self.speedup.is_finite() {
            format!("at most {:.2}×", self.speedup)
        } else {
            "unbounded".to_owned()
        }
    }

    /// The ceiling in words: "the optimizer and zeroing are 4.0% of the step: at most 1.04×".
    pub fn text(&self) -> String {
        if self.part == StepPart::MemoryOnly {
            return "acts on memory, not time: at most 1.00×".to_owned();
        }
        format!("{} {:.1}% of the step: {}", self.part.label(), self.share_percent(), self.speedup_text())
    }
}

/// One operator's change between a reference's traced step and a trick's.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct OpChange {
    /// The operator (or GPU kernel, or copy), or "time outside operators".
    pub name: String,
    /// Where it ran (`None` for the time outside operators).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub activity: Option<TraceActivity>,
    /// Calls per step, the trick's less the reference's.
    pub calls_change: f64,
    /// Self time, the trick's less the reference's, milliseconds per step; for an operator the
    /// trick calls more often with the same input shapes, its extra calls at the reference's time
    /// per call.
    pub self_ms_change: f64,
}

impl OpChange {
    /// "aten::copy_ +1.20 ms (+42 calls)".
    pub fn text(&self) -> String {
        let calls = if self.calls_change.abs() >= 0.5 {
            format!(" ({:+.0} calls)", self.calls_change)
        } else {
            String::new()
        };
        format!("{} {:+.2} ms{calls}", self.name, self.self_ms_change)
    }
}

/// An operator and the input shapes or types that matter to a cause.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct OperatorNote {
    /// The operator (or GPU kernel).
    pub name: String,
    /// Its time in the trick's step with the operators it called, milliseconds per step.
    pub total_ms: f64,
    /// What about it matters: its input types, or its shapes.
    pub detail: String,
}

/// Why a trick's effect is null, negative or disputed, as measured. Where no measured cause fits
/// the cause is [`Cause::NotFound`]; none is guessed.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case", tag = "cause")]
pub enum Cause {
    /// Bound elsewhere: the most the trick could give ([`Diagnosis::ceiling`]) lies inside the A/A
    /// noise floor, so no effect could be told from noise here.
    BoundElsewhere {
        /// The ceiling, × throughput.
        ceiling: f64,
        /// The A/A noise floor's half-width, a fraction (0.02: ±2%).
        floor_half_width: f64,
    },
    /// No kernel changed: the trick's step ran the same arithmetic operators (and GPU kernels) the
    /// same number of times as its reference's, in the same time within the noise floor: a switch
    /// the backend ignores, or work it already did.
    NoKernelChanged {
        /// Arithmetic operators (and GPU kernels) compared.
        kernels: usize,
        /// The change in the acted-on part's time, milliseconds per step.
        part_change_ms: f64,
        /// The reference's traced step, milliseconds.
        step_ms: f64,
    },
    /// It added work: operators that grew or appeared in the trick's step, largest first.
    AddedWork {
        /// The operators that grew most.
        operators: Vec<OpChange>,
        /// Every operator's growth summed (and the time outside operators'), milliseconds per step.
        added_ms: f64,
        /// The reference's traced step, milliseconds.
        step_ms: f64,
    },
    /// It removed work, by a different amount than on the other engine: operators that shrank or
    /// went, largest first.
    RemovedWork {
        /// The operators that shrank most.
        operators: Vec<OpChange>,
        /// Every operator's shrinking summed (and the time outside operators'), milliseconds per
        /// step.
        removed_ms: f64,
        /// The reference's traced step, milliseconds.
        step_ms: f64,
    },
    /// It replaced work: operators that grew and operators that shrank or went, by amounts that
    /// each exceed what the floor hides but cancel within it.
    ReplacedWork {
        /// The operators that grew most.
        added: Vec<OpChange>,
        /// The operators that shrank most.
        removed: Vec<OpChange>,
        /// Every operator's growth summed, milliseconds per step.
        added_ms: f64,
        /// Every operator's shrinking summed, milliseconds per step.
        removed_ms: f64,
        /// The reference's traced step, milliseconds.
        step_ms: f64,
    },
    /// Overhead-bound: the time outside operators dominates the reference's step, so work the
    /// trick saves inside operators is a small part of it.
    OverheadBound {
        /// Time outside operators, milliseconds per step.
        outside_ms: f64,
        /// The reference's traced step, milliseconds.
        step_ms: f64,
    },
    /// Launch-bound: the GPU sat idle for most of the reference's step, waiting for the host to
    /// launch work.
    LaunchBound {
        /// Time the device ran nothing, milliseconds per step.
        idle_ms: f64,
        /// The reference's traced step, milliseconds.
        step_ms: f64,
    },
    /// Autocast left matmuls or convolutions in fp32: they take float inputs in the trick's step.
    LeftInFp32 {
        /// Those operators, longest first.
        operators: Vec<OperatorNote>,
        /// Their time on the host with the operators they called (on a GPU, mostly launching
        /// their kernels), milliseconds per step.
        host_ms: f64,
        /// The trick's traced step, milliseconds.
        step_ms: f64,
    },
    /// Matmul or convolution dimensions that are not multiples of what tensor cores take, so the
    /// kernels fall back to slower paths or pad.
    UnalignedShapes {
        /// The multiple the precision needs (8 for fp16 and bf16, 16 for fp8).
        multiple: u32,
        /// The operators with unaligned dimensions, longest first.
        operators: Vec<OperatorNote>,
    },
    /// cuDNN retuned: convolutions took several input shapes in the traced steps, and
    /// `cudnn.benchmark` tunes again for each new shape.
    CudnnRetunes {
        /// The convolutions with more than one set of input shapes.
        operators: Vec<OperatorNote>,
    },
    /// Graph breaks or recompiles: `torch.compile` split the model into several graphs, or
    /// compiled again, as `torch._dynamo`'s counters say.
    GraphBreaks {
        /// Graph breaks.
        graph_breaks: u64,
        /// Recompilations after the first compile.
        recompiles: u64,
        /// Graphs compiled.
        graphs: u64,
    },
    /// No measured cause fits.
    NotFound {
        /// What was looked at and found wanting ("no trace of the reference").
        looked_at: String,
    },
}

impl Cause {
    /// The cause's tag in a results file (`bound-elsewhere`, `added-work`).
    pub fn tag(&self) -> &'static str {
        match self {
            Cause::BoundElsewhere { .. } => "bound-elsewhere",
            Cause::NoKernelChanged { .. } => "no-kernel-changed",
            Cause::AddedWork { .. } => "added-work",
            Cause::RemovedWork { .. } => "removed-work",
            Cause::ReplacedWork { .. } => "replaced-work",
            Cause::OverheadBound { .. } => "overhead-bound",
            Cause::LaunchBound { .. } => "launch-bound",
            Cause::LeftInFp32 { .. } => "left-in-fp32",
            Cause::UnalignedShapes { .. } => "unaligned-shapes",
            Cause::CudnnRetunes { .. } => "cudnn-retunes",
            Cause::GraphBreaks { .. } => "graph-breaks",
            Cause::NotFound { .. } => "not-found",
        }
    }

    /// The cause's name, as a table's column shows it.
    pub fn name(&self) -> &'static str {
        match self {
            Cause::BoundElsewhere { .. } => "bound elsewhere",
            Cause::NoKernelChanged { .. } => "no kernel changed",
            Cause::AddedWork { .. } => "it added work",
            Cause::RemovedWork { .. } => "it removed work",
            Cause::ReplacedWork { .. } => "it replaced work",
            Cause::OverheadBound { .. } => "overhead-bound",
            Cause::LaunchBound { .. } => "launch-bound",
            Cause::LeftInFp32 { .. } => "left in fp32",
            Cause::UnalignedShapes { .. } => "shapes not tensor-core aligned",
            Cause::CudnnRetunes { .. } => "cuDNN retunes",
            Cause::GraphBreaks { .. } => "graph breaks",
            Cause::NotFound { .. } => "cause not found",
        }
    }

    /// The cause in one short line for the terminal and a table cell: its name and its largest
    /// number ("it added work: aten::copy_ +1.20 ms").
    pub fn short(&self) -> String {
        let detail = match self {
            Cause::BoundElsewhere { ceiling, floor_half_width } => {
                format!("at most {ceiling:.2}× inside ±{:.1}%", floor_half_width * 100.0)
            }
            Cause::NoKernelChanged { kernels, .. } => format!("same {kernels} kernels"),
            Cause::AddedWork { operators, added_ms, .. } => first_op(operators, *added_ms),
            Cause::RemovedWork { operators, removed_ms, .. } => first_op(operators, -*removed_ms),
            Cause::ReplacedWork { added_ms, removed_ms, .. } => {
                format!("+{added_ms:.2} ms for -{removed_ms:.2} ms")
            }
            Cause::OverheadBound { outside_ms, step_ms } => {
                format!("{:.0}% outside operators", percent(*outside_ms, *step_ms))
            }
            Cause::LaunchBound { idle_ms, step_ms } => {
                format!("GPU idle {:.0}%", percent(*idle_ms, *step_ms))
            }
            Cause::LeftInFp32 { operators, .. } => format!("{} ops in fp32", operators.len()),
            Cause::UnalignedShapes { multiple, operators } => {
                format!("{} ops not ×{multiple}", operators.len())
            }
            Cause::CudnnRetunes { operators } => format!("{} convs, several shapes", operators.len()),
            Cause::GraphBreaks { graph_breaks, recompiles, .. } => {
                format!("{graph_breaks} breaks, {recompiles} recompiles")
            }
            Cause::NotFound { .. } => return self.name().to_owned(),
        };
        format!("{}: {detail}", self.name())
    }

    /// The cause in sentences, with its numbers, for a report.
    pub fn sentence(&self) -> String {
        match self {
            Cause::BoundElsewhere { ceiling, floor_half_width } => format!(
                "Bound elsewhere: the part it acts on could give at most {ceiling:.2}×, inside the A/A noise \
                 floor of ±{:.1}%.",
                floor_half_width * 100.0
            ),
            Cause::NoKernelChanged { kernels, part_change_ms, step_ms } => format!(
                "No kernel changed: the same {kernels} arithmetic operators ran as often as in the reference, \
                 and the part it acts on changed by {part_change_ms:+.2} ms of a {step_ms:.1} ms step."
            ),
            Cause::AddedWork { operators, added_ms, step_ms } => format!(
                "It added work: {added_ms:.2} ms a step ({:.1}% of the reference's {step_ms:.1} ms), most in {}.",
                percent(*added_ms, *step_ms),
                op_list(operators)
            ),
            Cause::RemovedWork { operators, removed_ms, step_ms } => format!(
                "It removed work: {removed_ms:.2} ms a step ({:.1}% of the reference's {step_ms:.1} ms), most in \
                 {}.",
                percent(*removed_ms, *step_ms),
                op_list(operators)
            ),
            Cause::ReplacedWork { added, removed, added_ms, removed_ms, step_ms } => format!(
                "It replaced work: {added_ms:.2} ms a step more in {} for {removed_ms:.2} ms less in {}, a net {:+.1}% \
                 of the reference's {step_ms:.1} ms step.",
                op_list(added),
                op_list(removed),
                percent(added_ms - removed_ms, *step_ms)
            ),
            Cause::OverheadBound { outside_ms, step_ms } => format!(
                "Overhead-bound: {outside_ms:.2} ms of the reference's {step_ms:.1} ms step ({:.0}%) ran outside \
                 operators, which the trick does not touch.",
                percent(*outside_ms, *step_ms)
            ),
            Cause::LaunchBound { idle_ms, step_ms } => format!(
                "Launch-bound: the GPU sat idle {idle_ms:.2} ms of the reference's {step_ms:.1} ms step ({:.0}%), \
                 waiting for the host.",
                percent(*idle_ms, *step_ms)
            ),
            Cause::LeftInFp32 { operators, host_ms, step_ms } => format!(
                "Autocast left {} matmuls or convolutions in fp32 ({host_ms:.2} ms on the host of a {step_ms:.1} ms \
                 step): {}.",
                operators.len(),
                notes(operators)
            ),
            Cause::UnalignedShapes { multiple, operators } => format!(
                "Dimensions not multiples of {multiple}, which tensor cores need: {}.",
                notes(operators)
            ),
            Cause::CudnnRetunes { operators } => format!(
                "cuDNN retunes: convolutions took several input shapes, and cudnn.benchmark tunes each anew: {}.",
                notes(operators)
            ),
            Cause::GraphBreaks { graph_breaks, recompiles, graphs } => format!(
                "Graph breaks: torch.compile broke the model {graph_breaks} times into {graphs} graphs and \
                 compiled {recompiles} times again (torch._dynamo's counters)."
            ),
            Cause::NotFound { looked_at } => format!("Cause not found: {looked_at}."),
        }
    }
}

/// `part` as a percentage of `whole` (0 where `whole` is not positive).
fn percent(part: f64, whole: f64) -> f64 {
    if whole > 0.0 {
        part / whole * 100.0
    } else {
        0.0
    }
}

/// The first operator of `operators` with its change, or the total where there is none.
fn first_op(operators: &[OpChange], total_ms: f64) -> String {
    match operators.first() {
        Some(op) => format!("{} {:+.2} ms", op.name, op.self_ms_change),
        None => format!("{total_ms:+.2} ms"),
    }
}

/// `operators` with their changes, comma-separated.
fn op_list(operators: &[OpChange]) -> String {
    operators.iter().map(OpChange::text).collect::<Vec<_>>().join(", ")
}

/// `operators` with their details, semicolon-separated.
fn notes(operators: &[OperatorNote]) -> String {
    operators
        .iter()
        .map(|o| format!("{} ({}, {:.2} ms)", o.name, o.detail, o.total_ms))
        .collect::<Vec<_>>()
        .join("; ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_ceiling_is_amdahls_bound_on_its_part() {
        let c = Ceiling::new(StepPart::Optimizer, 4.0, 100.0);
        assert!((c.speedup - 1.0 / 0.96).abs() < 1e-12);
        assert_eq!(c.text(), "the optimizer and zeroing 4.0% of the step: at most 1.04×");
        assert_eq!(Ceiling::new(StepPart::MemoryOnly, 0.0, 100.0).speedup, 1.0);
        assert!(Ceiling::new(StepPart::Overhead, 5.0, 5.0).speedup.is_infinite());
        assert_eq!(Ceiling::new(StepPart::Loader, 1.0, 0.0).speedup, 1.0);
    }

    #[test]
    fn each_causes_tag_is_the_one_its_file_holds() {
        let note = || vec![OperatorNote { name: "aten::mm".into(), total_ms: 1.0, detail: "float".into() }];
        let every = [
            Cause::BoundElsewhere { ceiling: 1.01, floor_half_width: 0.02 },
            Cause::NoKernelChanged { kernels: 3, part_change_ms: 0.1, step_ms: 10.0 },
            Cause::AddedWork { operators: Vec::new(), added_ms: 1.0, step_ms: 10.0 },
            Cause::RemovedWork { operators: Vec::new(), removed_ms: 1.0, step_ms: 10.0 },
            Cause::ReplacedWork {
                added: Vec::new(),
                removed: Vec::new(),
                added_ms: 1.0,
                removed_ms: 1.0,
                step_ms: 10.0,
            },
            Cause::OverheadBound { outside_ms: 6.0, step_ms: 10.0 },
            Cause::LaunchBound { idle_ms: 6.0, step_ms: 10.0 },
            Cause::LeftInFp32 { operators: note(), host_ms: 1.0, step_ms: 10.0 },
            Cause::UnalignedShapes { multiple: 8, operators: note() },
            Cause::CudnnRetunes { operators: note() },
            Cause::GraphBreaks { graph_breaks: 1, recompiles: 0, graphs: 2 },
            Cause::NotFound { looked_at: "both traces".into() },
        ];
        for cause in every {
            assert_eq!(serde_json::to_value(&cause).unwrap()["cause"], cause.tag());
            assert!(cause.short().starts_with(cause.name()) && !cause.sentence().is_empty());
        }
    }

    #[test]
    fn causes_are_written_with_their_kind_and_numbers() {
        let added = Cause::AddedWork {
            operators: vec![OpChange {
                name: "aten::copy_".into(),
                activity: Some(TraceActivity::CpuOp),
                calls_change: 42.0,
                self_ms_change: 1.2,
            }],
            added_ms: 1.5,
            step_ms: 30.0,
        };
        assert_eq!(added.short(), "it added work: aten::copy_ +1.20 ms");
        assert!(added.sentence().contains("aten::copy_ +1.20 ms (+42 calls)"), "{}", added.sentence());
        let json = serde_json::to_value(&added).unwrap();
        assert_eq!(json["cause"], added.tag());
        let back: Cause = serde_json::from_value(json).unwrap();
        assert_eq!(back, added);
        let bound = Cause::BoundElsewhere { ceiling: 1.012, floor_half_width: 0.023 };
        assert_eq!(bound.short(), "bound elsewhere: at most 1.01× inside ±2.3%");
        assert_eq!(Cause::NotFound { looked_at: "x".into() }.short(), "cause not found");
    }
}
