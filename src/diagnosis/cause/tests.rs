//! Each cause found on a planted breakdown or trace, and not found where its evidence is missing.

use super::*;
use crate::diagnosis::testing::{breakdown, cell_of, comparison, key, op, traced_step};
use crate::engine::Engine;
use crate::results::phases::StepPhase;
use crate::results::schema::{CellResult, CompileCounters};
use crate::results::traced::StepOperator;

const CPU: TraceActivity = TraceActivity::CpuOp;
const GPU: TraceActivity = TraceActivity::GpuKernel;

/// The cause `cause` finds for `trick`'s cell against `reference` at `speedup` with `verdict`,
/// under a ±2% floor.
fn found(trick: Trick, verdict: Verdict, speedup: f64, cell: &CellResult, reference: &CellResult) -> Cause {
    let comparison = comparison(speedup, (speedup - 0.01, speedup + 0.01), verdict);
    let case = Case { trick, comparison: &comparison, cell, reference, floor: Some(0.02), disputed: false };
    let ceiling = crate::diagnosis::ceiling(trick, reference).ok();
    cause(&case, ceiling.as_ref())
}

fn traced(trick: &[Trick], step: TracedStep) -> CellResult {
    cell_of(key(trick, Engine::Libtorch), None, Some(step))
}

/// A GPU trace of a 10 ms step whose device is busy `busy_ms`, with `ops`.
fn gpu_step(busy_ms: f64, ops: Vec<StepOperator>) -> TracedStep {
    TracedStep { step_ms: 10.0, outside_ops_ms: 1.0, device_busy_ms: Some(busy_ms), operators: ops }
}

fn matmul(name: &str, types: &str, shapes: &str, calls: f64) -> StepOperator {
    StepOperator {
        calls,
        kernel_calls: calls,
        input_types: Some(types.to_owned()),
        input_shapes: Some(shapes.to_owned()),
        distinct_shapes: 1,
        ..op(name, CPU, 0.2)
    }
}

#[test]
fn a_ceiling_inside_the_floor_is_bound_elsewhere() {
    let phases = breakdown(&[(StepPhase::Forward, 50.0), (StepPhase::Optimizer, 1.0)], 100.0);
    let reference = cell_of(key(&[], Engine::Libtorch), Some(phases.clone()), None);
    let cell = cell_of(key(&[Trick::FusedOptimizer], Engine::Libtorch), Some(phases), None);
    let cause = found(Trick::FusedOptimizer, Verdict::NoSignificantEffect, 1.0, &cell, &reference);
    assert!(
        matches!(cause, Cause::BoundElsewhere { ceiling, floor_half_width } if ceiling < 1.011 && floor_half_width == 0.02),
        "{cause:?}"
    );
}

#[test]
fn the_same_kernels_in_the_same_time_are_no_kernel_changed() {
    let step = traced_step(100.0, 10.0, &[("aten::mkldnn_convolution", CPU, 60.0), ("aten::add_", CPU, 5.0)]);
    let reference = traced(&[], step.clone());
    let cell = traced(&[Trick::ChannelsLast], TracedStep { step_ms: 100.5, ..step });
    let cause = found(Trick::ChannelsLast, Verdict::NoSignificantEffect, 1.0, &cell, &reference);
    assert!(matches!(cause, Cause::NoKernelChanged { kernels: 2, .. }), "{cause:?}");
}

#[test]
fn operators_that_grow_in_a_slower_step_are_the_work_it_added() {
    let reference = traced(&[], traced_step(100.0, 10.0, &[("aten::mkldnn_convolution", CPU, 60.0)]));
    let cell = traced(
        &[Trick::ChannelsLast],
        traced_step(125.0, 14.0, &[("aten::mkldnn_convolution", CPU, 58.0), ("aten::copy_", CPU, 26.0)]),
    );
    let cause = found(Trick::ChannelsLast, Verdict::Slower, 0.8, &cell, &reference);
    let Cause::AddedWork { operators, added_ms, step_ms } = cause else { panic!("{cause:?}") };
    assert_eq!(operators[0].name, "aten::copy_");
    assert!((operators[0].calls_change - 1.0).abs() < 1e-9);
    assert!((added_ms - 30.0).abs() < 1e-9 && step_ms == 100.0, "{added_ms}");
    assert_eq!(operators[1].name, OUTSIDE_OPERATORS);
    assert_eq!(operators.len(), 2, "the convolution's 3% change, same calls, is the traces' noise");
}

#[test]
fn calls_repeated_with_the_same_shapes_add_work_at_the_references_time_per_call() {
    let shaped = |self_ms: f64, calls: f64| StepOperator {
        calls,
        kernel_calls: calls,
        input_shapes: Some("[32,128] [128,512]".into()),
        ..op("aten::mm", CPU, self_ms)
    };
    let reference =
        traced(&[], TracedStep { operators: vec![shaped(27.0, 27.0)], ..traced_step(50.0, 1.0, &[]) });
    let cell = traced(
        &[Trick::Checkpointing],
        TracedStep { operators: vec![shaped(28.0, 31.0)], ..traced_step(51.0, 1.0, &[]) },
    );
    let cause = found(Trick::Checkpointing, Verdict::Slower, 0.87, &cell, &reference);
    let Cause::AddedWork { operators, added_ms, .. } = cause else { panic!("{cause:?}") };
    assert_eq!(
        (operators[0].calls_change, added_ms),
        (4.0, 4.0),
        "four more calls of 1 ms, not the totals' 1 ms"
    );
    let split = StepOperator { input_shapes: Some("[8,128] [128,512]".into()), ..shaped(28.0, 108.0) };
    let micro = traced(
        &[Trick::GradAccumulation],
        TracedStep { operators: vec![split], ..traced_step(51.0, 1.0, &[]) },
    );
    let changes = work_changes(
        traces(&Case {
            trick: Trick::GradAccumulation,
            comparison: &comparison(0.9, (0.89, 0.91), Verdict::Slower),
            cell: &micro,
            reference: &reference,
            floor: Some(0.02),
            disputed: false,
        })
        .unwrap(),
        false,
    );
    assert_eq!(changes[0].self_ms_change, 1.0, "calls split smaller count as their total's change");
}

#[test]
fn a_step_mostly_outside_operators_is_overhead_bound_for_an_operator_trick() {
    let reference =
        traced(&[], traced_step(100.0, 70.0, &[("aten::gelu", CPU, 10.0), ("aten::addmm", CPU, 20.0)]));
    let cell = traced(
        &[Trick::JitFusion],
        traced_step(100.0, 71.0, &[("prim::FusionGroup", CPU, 9.0), ("aten::addmm", CPU, 20.0)]),
    );
    let cause = found(Trick::JitFusion, Verdict::NoSignificantEffect, 1.0, &cell, &reference);
    assert_eq!(cause, Cause::OverheadBound { outside_ms: 70.0, step_ms: 100.0 });
}

#[test]
fn a_gpu_idle_most_of_the_step_is_launch_bound() {
    let reference = traced(&[], gpu_step(2.0, vec![op("sgemm_128x64", GPU, 1.5)]));
    let aligned = matmul("aten::mm", "c10::Half c10::Half", "[64,128] [128,256]", 2.0);
    let cell = traced(&[Trick::Amp], gpu_step(1.8, vec![aligned, op("sm90_xmma_gemm_f16", GPU, 1.2)]));
    let cause = found(Trick::Amp, Verdict::NoSignificantEffect, 1.0, &cell, &reference);
    assert_eq!(cause, Cause::LaunchBound { idle_ms: 8.0, step_ms: 10.0 });
}

#[test]
fn matmuls_with_float_inputs_under_autocast_were_left_in_fp32() {
    let reference = traced(&[], gpu_step(9.0, vec![op("sgemm_128x64", GPU, 8.0)]));
    let fp32 = matmul("aten::addmm", "float float float", "[64,128] [128,256]", 2.0);
    let cell = traced(&[Trick::Amp], gpu_step(9.0, vec![fp32, op("sgemm_128x64", GPU, 8.0)]));
    let cause = found(Trick::Amp, Verdict::NoSignificantEffect, 1.0, &cell, &reference);
    let Cause::LeftInFp32 { operators, .. } = &cause else { panic!("{cause:?}") };
    assert_eq!(
        (operators[0].name.as_str(), operators[0].detail.as_str()),
        ("aten::addmm", "float float float")
    );
    assert!(cause.sentence().contains("fp32"));
}

#[test]
fn matmul_dimensions_off_the_multiple_are_unaligned_for_tensor_cores() {
    let reference = traced(&[], gpu_step(9.0, vec![op("sgemm_128x64", GPU, 8.0)]));
    let odd = matmul("aten::mm", "c10::BFloat16 c10::BFloat16", "[64,100] [100,10]", 2.0);
    let cell = traced(&[Trick::AmpBf16], gpu_step(9.0, vec![odd, op("sgemm_128x64", GPU, 8.0)]));
    let cause = found(Trick::AmpBf16, Verdict::Slower, 0.9, &cell, &reference);
    let Cause::UnalignedShapes { multiple: 8, operators } = &cause else { panic!("{cause:?}") };
    assert_eq!(operators[0].detail, "[64,100] [100,10]");
    let conv = StepOperator {
        name: "aten::cudnn_convolution".into(),
        ..matmul("", "c10::Half", "[32,3,32,32] [16,3,3,3]", 1.0)
    };
    assert_eq!(tiled_dims(true, &parse_shapes(conv.input_shapes.as_deref().unwrap())), [3, 3]);
}

#[test]
fn a_convolution_that_took_new_shapes_makes_cudnn_retune() {
    let reference = traced(&[], gpu_step(9.0, vec![op("implicit_convolve_sgemm", GPU, 8.0)]));
    let conv = StepOperator {
        distinct_shapes: 5,
        ..matmul("aten::cudnn_convolution", "float float", "[32,16,32,32] [16,16,3,3]", 3.0)
    };
    let cell =
        traced(&[Trick::CudnnBenchmark], gpu_step(9.0, vec![conv, op("implicit_convolve_sgemm", GPU, 8.0)]));
    let cause = found(Trick::CudnnBenchmark, Verdict::NoSignificantEffect, 1.0, &cell, &reference);
    let Cause::CudnnRetunes { operators } = &cause else { panic!("{cause:?}") };
    assert!(operators[0].detail.starts_with("5 sets of input shapes for 3 calls"), "{}", operators[0].detail);
}

#[test]
fn dynamos_counters_of_breaks_and_recompiles_are_graph_breaks() {
    let reference = traced(&[], traced_step(100.0, 50.0, &[("aten::addmm", CPU, 20.0)]));
    let mut cell = traced(&[Trick::TorchCompile], traced_step(100.0, 10.0, &[("aten::addmm", CPU, 20.0)]));
    cell.processes[0].compile_counters = Some(CompileCounters { graph_breaks: 3, graphs: 4, recompiles: 1 });
    let cause = found(Trick::TorchCompile, Verdict::Slower, 0.9, &cell, &reference);
    assert_eq!(cause, Cause::GraphBreaks { graph_breaks: 3, recompiles: 1, graphs: 4 });
}

#[test]
fn no_effect_from_work_swapped_for_as_much_is_work_replaced() {
    let reference =
        traced(&[], traced_step(100.0, 10.0, &[("aten::bmm", CPU, 20.0), ("aten::_softmax", CPU, 5.0)]));
    let cell = traced(
        &[Trick::FlashAttention],
        traced_step(100.0, 10.0, &[("aten::_scaled_dot_product_flash_attention_for_cpu", CPU, 24.0)]),
    );
    let cause = found(Trick::FlashAttention, Verdict::NoSignificantEffect, 1.0, &cell, &reference);
    let Cause::ReplacedWork { added, removed, added_ms, removed_ms, .. } = &cause else {
        panic!("{cause:?}")
    };
    assert_eq!(
        (added[0].name.as_str(), removed[0].name.as_str()),
        ("aten::_scaled_dot_product_flash_attention_for_cpu", "aten::bmm")
    );
    assert_eq!((*added_ms, *removed_ms), (24.0, 25.0));
    assert!(cause.sentence().contains("a net -1.0%"), "{}", cause.sentence());
}

#[test]
fn no_effect_from_removing_less_than_the_floor_hides_is_the_work_it_removed() {
    let phases = breakdown(&[(StepPhase::Optimizer, 5.0)], 100.0);
    let step = traced_step(100.0, 10.0, &[("aten::zero_", CPU, 1.0), ("aten::add_", CPU, 4.0)]);
    let reference = cell_of(key(&[], Engine::Libtorch), Some(phases.clone()), Some(step));
    let cell = cell_of(
        key(&[Trick::ZeroGradNone], Engine::Libtorch),
        Some(phases),
        Some(traced_step(99.0, 10.0, &[("aten::add_", CPU, 4.0)])),
    );
    let cause = found(Trick::ZeroGradNone, Verdict::NoSignificantEffect, 1.0, &cell, &reference);
    let Cause::RemovedWork { operators, removed_ms, .. } = cause else { panic!("{cause:?}") };
    assert_eq!((operators[0].name.as_str(), removed_ms), ("aten::zero_", 1.0));
}

#[test]
fn no_effect_beside_an_operator_whose_time_alone_moved_names_no_work() {
    let reference =
        traced(&[], traced_step(50.0, 2.0, &[("aten::gelu_backward", CPU, 2.3), ("aten::mm", CPU, 30.0)]));
    let cell = traced(
        &[Trick::ZeroGradNone],
        traced_step(52.0, 2.0, &[("aten::gelu_backward", CPU, 4.6), ("aten::mm", CPU, 30.0)]),
    );
    let cause = found(Trick::ZeroGradNone, Verdict::NoSignificantEffect, 1.0, &cell, &reference);
    assert!(matches!(cause, Cause::NotFound { .. }), "the same calls, twice as long, is noise: {cause:?}");
}

#[test]
fn a_disputed_speed_up_names_the_work_it_removed() {
    let reference =
        traced(&[], traced_step(100.0, 10.0, &[("aten::zero_", CPU, 4.0), ("aten::add_", CPU, 6.0)]));
    let cell = traced(&[Trick::ZeroGradNone], traced_step(96.0, 10.0, &[("aten::add_", CPU, 6.0)]));
    let cause = found(Trick::ZeroGradNone, Verdict::Faster, 1.04, &cell, &reference);
    let Cause::RemovedWork { operators, removed_ms, .. } = cause else { panic!("{cause:?}") };
    assert_eq!((operators[0].name.as_str(), removed_ms), ("aten::zero_", 4.0));
}

#[test]
fn without_evidence_the_cause_is_not_found_and_says_what_was_missing() {
    let bare = cell_of(key(&[], Engine::Libtorch), None, None);
    let cell = cell_of(key(&[Trick::ChannelsLast], Engine::Libtorch), None, None);
    let Cause::NotFound { looked_at } = found(Trick::ChannelsLast, Verdict::Slower, 0.9, &cell, &bare) else {
        panic!()
    };
    assert!(looked_at.contains("resnet8/channels-last/b32/s0/train has no profiler trace"), "{looked_at}");
    let step = traced_step(100.0, 10.0, &[("aten::mkldnn_convolution", CPU, 60.0)]);
    let (reference, same) = (traced(&[], step.clone()), traced(&[Trick::ChannelsLast], step));
    let cause = found(Trick::ChannelsLast, Verdict::Slower, 0.9, &same, &reference);
    let Cause::NotFound { looked_at } = cause else { panic!("{cause:?}") };
    assert!(
        looked_at.starts_with("the traced steps ran 100.0 ms against the reference's 100.0 ms (+0.0%"),
        "{looked_at}"
    );
    assert!(looked_at.contains("the timed windows measured +11.1%"), "{looked_at}");
}
