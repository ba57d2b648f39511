//! A trick's ceiling: Amdahl's bound on its speed-up, from the share of its reference's step taken
//! by the part the catalogue says it acts on, read from the reference's phase breakdown (the
//! loader, the optimizer, the metrics) or its profiler trace (kinds of operators, the time
//! between them).

use super::parts;
use crate::results::diagnosis::Ceiling;
use crate::results::phases::StepPhase;
use crate::results::schema::CellResult;
use crate::tricks::{ActsOn, Trick};
use crate::vocabulary::StepPart;

/// The phases of the breakdown that make up `part` (empty for a part a trace measures).
fn phases(part: StepPart) -> &'static [StepPhase] {
    match part {
        StepPart::Loader => &[StepPhase::BatchWait, StepPhase::HostToDevice],
        StepPart::Optimizer => &[StepPhase::Optimizer],
        StepPart::Metrics => &[StepPhase::Metrics],
        StepPart::ConvolutionsAndMatmuls
        | StepPart::Elementwise
        | StepPart::Attention
        | StepPart::Overhead
        | StepPart::MemoryOnly => &[],
    }
}

/// The ceiling of `trick` against its `reference` cell, or why there is none: the trick acts on no
/// one part of a step, or the reference recorded no breakdown or trace of its part.
pub fn ceiling(trick: Trick, reference: &CellResult) -> Result<Ceiling, String> {
    let part = match trick.acts_on() {
        ActsOn::Unbounded(why) => return Err(why.to_owned()),
        ActsOn::Part(part) => part,
    };
    let breakdown = reference.step_breakdown();
    let traced = reference.trace().and_then(|t| t.step.as_ref());
    match part {
        StepPart::MemoryOnly => {
            let step_ms = breakdown.map(|b| b.step_ms()).or(traced.map(|t| t.step_ms)).unwrap_or(0.0);
            Ok(Ceiling::new(part, 0.0, step_ms))
        }
        StepPart::Loader | StepPart::Optimizer | StepPart::Metrics => {
            let b = breakdown.ok_or_else(|| {
                let why = reference.step_breakdown_unavailable().unwrap_or("none was recorded");
                format!("its reference {} has no step breakdown: {why}", reference.id())
            })?;
            let part_ms = phases(part).iter().filter_map(|&p| b.phase_ms(p)).sum();
            bounded(part, part_ms, b.step_ms())
        }
        StepPart::ConvolutionsAndMatmuls
        | StepPart::Elementwise
        | StepPart::Attention
        | StepPart::Overhead => {
            let step = traced.ok_or_else(|| {
                format!(
                    "its reference {} has no profiler trace (the run traced none, or not it)",
                    reference.id()
                )
            })?;
            let part_ms = parts::traced_ms(part, step).unwrap_or(0.0);
            bounded(part, part_ms, step.step_ms)
        }
    }
}

/// The ceiling of `part_ms` of a `step_ms` step, where it bounds anything: a part that takes
/// the whole step bounds nothing.
fn bounded(part: StepPart, part_ms: f64, step_ms: f64) -> Result<Ceiling, String> {
    if part_ms >= step_ms {
        return Err(format!(
            "{} took the whole step ({part_ms:.2} of {step_ms:.2} ms), which bounds nothing",
            part.label()
        ));
    }
    Ok(Ceiling::new(part, part_ms, step_ms))
}

#[cfg(test)]
mod tests {
    use super::super::testing::{breakdown, cell_with, traced_step};
    use super::*;
    use crate::results::schema::TraceActivity;

    #[test]
    fn a_phase_trick_is_bounded_by_its_phases_in_the_references_breakdown() {
        let reference = cell_with(
            Some(breakdown(&[(StepPhase::Forward, 60.0), (StepPhase::Optimizer, 4.0)], 100.0)),
            None,
        );
        let c = ceiling(Trick::FusedOptimizer, &reference).unwrap();
        assert_eq!((c.part, c.part_ms), (StepPart::Optimizer, 4.0));
        assert!((c.speedup - 1.0 / 0.96).abs() < 1e-9, "{c:?}");
        let loader = cell_with(
            Some(breakdown(&[(StepPhase::BatchWait, 10.0), (StepPhase::HostToDevice, 10.0)], 100.0)),
            None,
        );
        assert!((ceiling(Trick::LoaderWorkers, &loader).unwrap().speedup - 1.25).abs() < 1e-9);
    }

    #[test]
    fn an_operator_trick_is_bounded_by_its_operators_in_the_references_trace() {
        let step = traced_step(50.0, 5.0, &[("aten::mkldnn_convolution", TraceActivity::CpuOp, 25.0)]);
        let reference = cell_with(None, Some(step));
        let c = ceiling(Trick::ChannelsLast, &reference).unwrap();
        assert_eq!((c.part, c.part_ms, c.step_ms), (StepPart::ConvolutionsAndMatmuls, 25.0, 50.0));
        assert!((c.speedup - 2.0).abs() < 1e-9);
        let overhead = ceiling(Trick::TorchCompile, &reference).unwrap();
        assert!((overhead.speedup - 50.0 / 45.0).abs() < 1e-9);
    }

    #[test]
    fn without_its_part_measured_or_a_part_at_all_there_is_no_ceiling_and_it_says_why() {
        let bare = cell_with(None, None);
        assert!(ceiling(Trick::ChannelsLast, &bare).unwrap_err().contains("no profiler trace"));
        assert!(ceiling(Trick::ZeroGradNone, &bare).unwrap_err().contains("no step breakdown"));
        assert!(ceiling(Trick::DebugOff, &bare).unwrap_err().contains("every operator"));
        assert_eq!(ceiling(Trick::Checkpointing, &bare).unwrap().speedup, 1.0);
        let idle = cell_with(None, Some(traced_step(10.0, 10.0, &[])));
        assert!(ceiling(Trick::CudaGraphs, &idle).unwrap_err().contains("bounds nothing"));
    }
}
