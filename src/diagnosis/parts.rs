//! Which operators of a traced step belong to the part a trick acts on, and how long that part
//! took: convolutions and matmuls, elementwise operators, attention, and the time between
//! operators (on a GPU, the time its device sat idle).

use crate::results::schema::TraceActivity;
use crate::results::traced::{StepOperator, TracedStep};
use crate::vocabulary::StepPart;

/// ATen operators that multiply matrices.
const MATMULS: [&str; 10] = [
    "aten::mm",
    "aten::addmm",
    "aten::bmm",
    "aten::baddbmm",
    "aten::matmul",
    "aten::linear",
    "aten::addmv",
    "aten::mv",
    "aten::_scaled_mm",
    "aten::_addmm_activation",
];

/// ATen operators that a fuser merges: activations and their gradients, bias adds, scaling,
/// dropout and masking (not the optimizer's in-place updates).
const ELEMENTWISE: [&str; 24] = [
    "aten::add",
    "aten::sub",
    "aten::mul",
    "aten::div",
    "aten::neg",
    "aten::pow",
    "aten::exp",
    "aten::relu",
    "aten::clamp_min",
    "aten::threshold_backward",
    "aten::gelu",
    "aten::gelu_backward",
    "aten::tanh",
    "aten::tanh_backward",
    "aten::sigmoid",
    "aten::sigmoid_backward",
    "aten::silu",
    "aten::silu_backward",
    "aten::native_dropout",
    "aten::native_dropout_backward",
    "aten::bernoulli_",
    "aten::masked_fill",
    "aten::where",
    "aten::_to_copy",
];

/// ATen operators of attention written out: the batched products, the softmax and the mask.
const WRITTEN_OUT_ATTENTION: [&str; 6] = [
    "aten::bmm",
    "aten::baddbmm",
    "aten::_softmax",
    "aten::_softmax_backward_data",
    "aten::masked_fill",
    "aten::masked_fill_",
];

/// Words in the names of GPU kernels that multiply matrices or convolve.
const GPU_CONV_MATMUL: [&str; 9] =
    ["gemm", "conv", "xmma", "cutlass", "wgrad", "dgrad", "fprop", "winograd", "matmul"];

/// Words in the names of GPU kernels of attention.
const GPU_ATTENTION: [&str; 5] = ["flash", "fmha", "attention", "softmax", "sdpa"];

/// Whether the CPU operator `name` convolves or multiplies matrices.
pub fn is_conv_or_matmul(name: &str) -> bool {
    (name.starts_with("aten::") && name.contains("convolution")) || MATMULS.contains(&name)
}

/// Whether the CPU operator `name` is an ATen convolution.
pub fn is_convolution(name: &str) -> bool {
    name.starts_with("aten::") && name.contains("convolution")
}

/// Whether the operator `op` belongs to `part` (operator parts only; none belongs to the others).
fn belongs(part: StepPart, op: &StepOperator) -> bool {
    let lower = op.name.to_lowercase();
    let has_any = |words: &[&str]| words.iter().any(|w| lower.contains(w));
    match (part, op.activity) {
        (StepPart::ConvolutionsAndMatmuls, TraceActivity::CpuOp) => is_conv_or_matmul(&op.name),
        (StepPart::ConvolutionsAndMatmuls, TraceActivity::GpuKernel) => has_any(&GPU_CONV_MATMUL),
        (StepPart::Elementwise, TraceActivity::CpuOp) => ELEMENTWISE.contains(&op.name.as_str()),
        (StepPart::Elementwise, TraceActivity::GpuKernel) => lower.contains("elementwise"),
        (StepPart::Attention, TraceActivity::CpuOp) => {
            op.name.contains("scaled_dot_product")
                || op.name.contains("attention")
                || WRITTEN_OUT_ATTENTION.contains(&op.name.as_str())
        }
        (StepPart::Attention, TraceActivity::GpuKernel) => has_any(&GPU_ATTENTION),
        _ => false,
    }
}

/// Whether `step` ran on a GPU: its trace holds the device's kernels or copies.
pub fn on_device(step: &TracedStep) -> bool {
    step.device_busy_ms.is_some()
}

/// The time of `part` in `step`, milliseconds per step, where a trace measures it: the self time
/// of its operators (on a GPU, of its kernels), or for [`StepPart::Overhead`] the time outside
/// operators (on a GPU, the time the device sat idle). `None` for a part the phase breakdown
/// measures instead.
pub fn traced_ms(part: StepPart, step: &TracedStep) -> Option<f64> {
    let activity = if on_device(step) { TraceActivity::GpuKernel } else { TraceActivity::CpuOp };
    match part {
        StepPart::Overhead => Some(match step.device_busy_ms {
            Some(busy) => (step.step_ms - busy).max(0.0),
            None => step.outside_ops_ms,
        }),
        StepPart::ConvolutionsAndMatmuls | StepPart::Elementwise | StepPart::Attention => Some(
            step.operators
                .iter()
                .filter(|o| o.activity == activity && belongs(part, o))
                .map(|o| o.self_ms)
                .sum(),
        ),
        StepPart::Loader | StepPart::Optimizer | StepPart::Metrics | StepPart::MemoryOnly => None,
    }
}

#[cfg(test)]
mod tests {
    use super::super::testing::op;
    use super::*;

    #[test]
    fn each_part_sums_its_own_operators_on_the_cpu() {
        let step = TracedStep {
            step_ms: 100.0,
            outside_ops_ms: 12.0,
            device_busy_ms: None,
            operators: vec![
                op("aten::mkldnn_convolution", TraceActivity::CpuOp, 30.0),
                op("aten::convolution_backward", TraceActivity::CpuOp, 25.0),
                op("aten::addmm", TraceActivity::CpuOp, 5.0),
                op("aten::gelu", TraceActivity::CpuOp, 3.0),
                op("aten::_softmax", TraceActivity::CpuOp, 2.0),
                op("aten::native_batch_norm", TraceActivity::CpuOp, 9.0),
            ],
        };
        assert_eq!(traced_ms(StepPart::ConvolutionsAndMatmuls, &step), Some(60.0));
        assert_eq!(traced_ms(StepPart::Elementwise, &step), Some(3.0));
        assert_eq!(traced_ms(StepPart::Attention, &step), Some(2.0));
        assert_eq!(traced_ms(StepPart::Overhead, &step), Some(12.0));
        assert_eq!(traced_ms(StepPart::Optimizer, &step), None);
    }

    #[test]
    fn on_a_gpu_the_kernels_count_and_overhead_is_the_devices_idle_time() {
        let step = TracedStep {
            step_ms: 10.0,
            outside_ops_ms: 1.0,
            device_busy_ms: Some(4.0),
            operators: vec![
                op("aten::addmm", TraceActivity::CpuOp, 0.5),
                op("sm90_xmma_gemm_bf16bf16_bf16f32", TraceActivity::GpuKernel, 2.5),
                op(
                    "void at::native::vectorized_elementwise_kernel<4, GeluCUDAKernelImpl>",
                    TraceActivity::GpuKernel,
                    0.4,
                ),
                op("pytorch_flash::flash_fwd_kernel", TraceActivity::GpuKernel, 0.6),
            ],
        };
        assert_eq!(traced_ms(StepPart::ConvolutionsAndMatmuls, &step), Some(2.5));
        assert_eq!(traced_ms(StepPart::Elementwise, &step), Some(0.4));
        assert_eq!(traced_ms(StepPart::Attention, &step), Some(0.6));
        assert_eq!(traced_ms(StepPart::Overhead, &step), Some(6.0));
    }
}
