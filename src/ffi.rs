//! Safe wrappers over `csrc/shim.cpp`: the libtorch calls tch 0.24 does not expose.

use std::ffi::{CStr, CString};
use std::marker::PhantomData;
use std::os::raw::{c_char, c_int, c_void};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

use tch::{Device, Kind, Tensor};
use torch_sys::C_tensor;

use crate::error::Error;

/// A libtorch call through the shim failed, or was asked for something it does not do; the
/// message names the call and says what libtorch said.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("libtorch: {0}")]
pub struct TorchError(pub String);

impl From<tch::TchError> for TorchError {
    fn from(error: tch::TchError) -> Self {
        TorchError(error.to_string())
    }
}

impl From<TorchError> for Error {
    fn from(error: TorchError) -> Self {
        Error::Torch(error.0)
    }
}

mod raw {
    use super::*;

    extern "C" {
        pub fn tb_last_error() -> *const c_char;
        pub fn tb_torch_version() -> *const c_char;
        pub fn tb_device_memory_stats(device_index: c_int, out: *mut i64) -> c_int;
        pub fn tb_reset_peak_memory_stats(device_index: c_int) -> c_int;
        pub fn tb_install_cpu_memory_counter() -> c_int;
        pub fn tb_cpu_memory_stats(out: *mut i64);
        pub fn tb_reset_cpu_memory_peak();
        pub fn tb_cpu_high_water_bytes() -> i64;
        pub fn tb_reset_cpu_high_water();
        pub fn tb_empty_cache() -> c_int;
        pub fn tb_set_autocast(is_cuda: c_int, enabled: c_int, dtype: c_int) -> c_int;
        pub fn tb_autocast_enabled(is_cuda: c_int) -> c_int;
        pub fn tb_autocast_dtype(is_cuda: c_int) -> c_int;
        pub fn tb_autocast_enter();
        pub fn tb_autocast_exit();
        pub fn tb_channels_last(t: *const C_tensor, out: *mut *mut C_tensor) -> c_int;
        pub fn tb_param_to_channels_last(t: *mut C_tensor) -> c_int;
        pub fn tb_is_channels_last(t: *const C_tensor) -> c_int;
        pub fn tb_empty_pinned_like(t: *const C_tensor, out: *mut *mut C_tensor) -> c_int;
        pub fn tb_set_tf32(matmul: c_int, cudnn: c_int) -> c_int;
        pub fn tb_get_tf32(out: *mut c_int);
        pub fn tb_set_anomaly_mode(enabled: c_int, check_nan: c_int);
        pub fn tb_set_allocator_settings(settings: *const c_char) -> c_int;
        pub fn tb_expandable_segments_enabled() -> c_int;
        pub fn tb_anomaly_mode_enabled() -> c_int;
        pub fn tb_set_grad_none(t: *mut C_tensor);
        pub fn tb_backward_from(output: *mut C_tensor, grad: *mut C_tensor) -> c_int;
        pub fn tb_amp_unscale(
            grads: *mut *mut C_tensor,
            n: c_int,
            found_inf: *mut C_tensor,
            inv_scale: *const C_tensor,
        ) -> c_int;
        pub fn tb_fused_sgd(
            params: *mut *mut C_tensor,
            grads: *mut *mut C_tensor,
            bufs: *mut *mut C_tensor,
            n: c_int,
            weight_decay: f64,
            momentum: f64,
            lr: *const C_tensor,
            found_inf: *const C_tensor,
        ) -> c_int;
        pub fn tb_rng_get_state(device_type: c_int, device_index: c_int, out: *mut *mut C_tensor) -> c_int;
        pub fn tb_rng_set_state(device_type: c_int, device_index: c_int, state: *const C_tensor) -> c_int;
        pub fn tb_set_autocast_cache_enabled(enabled: c_int);
        pub fn tb_autocast_cache_enabled() -> c_int;
        pub fn tb_sdp_enabled(out: *mut c_int);
        pub fn tb_fp8_scale(t: *const C_tensor, format: c_int, out: *mut *mut C_tensor) -> c_int;
        pub fn tb_fp8_quantise(
            t: *const C_tensor,
            scale: *const C_tensor,
            format: c_int,
            out: *mut *mut C_tensor,
        ) -> c_int;
        pub fn tb_fp8_linear(
            x: *const C_tensor,
            w: *const C_tensor,
            gemm: c_int,
            out: *mut *mut C_tensor,
        ) -> c_int;
        pub fn tb_set_sdp_enabled(flags: *const c_int) -> c_int;
        pub fn tb_op_log_start() -> c_int;
        pub fn tb_op_log_stop(out: *mut *mut c_char) -> c_int;
        pub fn tb_trace_start(with_cuda: c_int) -> c_int;
        pub fn tb_trace_stop(path: *const c_char) -> c_int;
        pub fn tb_cuda_graphs_compiled() -> c_int;
        pub fn tb_cudnn_runtime_version(out: *mut i64) -> c_int;
        pub fn tb_cap_device_memory(device: c_int, budget_bytes: u64, fraction: *mut f64) -> c_int;
        pub fn tb_cuda_graph_new(device: c_int, out: *mut *mut c_void) -> c_int;
        pub fn tb_cuda_graph_enter_side_stream(graph: *mut c_void) -> c_int;
        pub fn tb_cuda_graph_exit_side_stream(graph: *mut c_void) -> c_int;
        pub fn tb_cuda_graph_capture_begin(graph: *mut c_void) -> c_int;
        pub fn tb_cuda_graph_capture_end(graph: *mut c_void) -> c_int;
        pub fn tb_cuda_graph_replay(graph: *mut c_void) -> c_int;
        pub fn tb_cuda_graph_free(graph: *mut c_void);
        pub fn tb_device_event_record(device: c_int, out: *mut *mut c_void) -> c_int;
        pub fn tb_device_event_elapsed_ms(start: *mut c_void, end: *mut c_void, out: *mut f64) -> c_int;
        pub fn tb_device_event_free(event: *mut c_void);
        pub fn tb_jit_compile(source: *const c_char, name: *const c_char, out: *mut *mut c_void) -> c_int;
        pub fn tb_jit_call(
            function: *mut c_void,
            inputs: *const *const C_tensor,
            n: c_int,
            out: *mut *mut C_tensor,
        ) -> c_int;
        pub fn tb_jit_free(function: *mut c_void);
    }

    /// Declares shim functions that share one C signature, written once, and names the type of a
    /// pointer to any of them.
    macro_rules! same_signature {
        ($(#[$doc:meta])* type $alias:ident = fn $params:tt -> $ret:ty; $($name:ident),+) => {
            $(#[$doc])*
            pub type $alias = unsafe extern "C" fn $params -> $ret;
            extern "C" {
                $(pub fn $name $params -> $ret;)+
            }
        };
    }

    same_signature! {
        /// The C signature `tb_fused_adamw` and `tb_fused_adam` share.
        type FusedAdamKernel = fn(
            params: *mut *mut C_tensor,
            grads: *mut *mut C_tensor,
            exp_avgs: *mut *mut C_tensor,
            exp_avg_sqs: *mut *mut C_tensor,
            steps: *mut *mut C_tensor,
            n: c_int,
            lr: *const C_tensor,
            beta1: f64,
            beta2: f64,
            weight_decay: f64,
            eps: f64,
            found_inf: *const C_tensor,
        ) -> c_int;
        tb_fused_adamw, tb_fused_adam
    }
}

/// Turns a shim status code into a `Result`, fetching the C++ exception message on failure.
fn check(status: c_int, what: &str) -> Result<(), TorchError> {
    shim_status(status).map_err(|message| TorchError(format!("{what}: {message}")))
}

/// The status code of a shim function (of `csrc/shim.cpp` or `csrc/distributed.cpp`, which follow
/// `csrc/guarded.h`): `Ok` for 0, else the message of the C++ exception it caught.
pub(crate) fn shim_status(status: c_int) -> Result<(), String> {
    if status == 0 {
        Ok(())
    } else {
        Err(last_error())
    }
}

/// The message of the last C++ exception a shim function caught on this thread.
fn last_error() -> String {
    // SAFETY: `tb_last_error` returns a NUL-terminated string owned by a thread-local of the shim,
    // which lives until this thread's next failing shim call; the string is copied out at once.
    unsafe { CStr::from_ptr(raw::tb_last_error()) }.to_string_lossy().into_owned()
}

/// The libtorch version this binary was compiled against (e.g. `2.11.0`).
pub fn torch_version() -> String {
    // SAFETY: returns a pointer to a static string literal.
    unsafe { CStr::from_ptr(raw::tb_torch_version()) }.to_string_lossy().into_owned()
}

/// Caching-allocator statistics of one accelerator, in bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DeviceMemoryStats {
    /// Bytes held by live tensors now.
    pub allocated_bytes: i64,
    /// Peak of `allocated_bytes` since the last reset.
    pub peak_allocated_bytes: i64,
    /// Bytes reserved by the caching allocator now.
    pub reserved_bytes: i64,
    /// Peak of `reserved_bytes` since the last reset.
    pub peak_reserved_bytes: i64,
    /// Number of out-of-memory events the allocator has seen.
    pub num_ooms: i64,
}

/// Reads the caching allocator's statistics of accelerator `device_index`.
pub fn device_memory_stats(device_index: usize) -> Result<DeviceMemoryStats, TorchError> {
    let mut out = [0i64; 5];
    // SAFETY: `out` has the five slots the shim writes.
    check(
        unsafe { raw::tb_device_memory_stats(device_index as c_int, out.as_mut_ptr()) },
        "reading device memory statistics",
    )?;
    Ok(DeviceMemoryStats {
        allocated_bytes: out[0],
        peak_allocated_bytes: out[1],
        reserved_bytes: out[2],
        peak_reserved_bytes: out[3],
        num_ooms: out[4],
    })
}

/// Resets the peak statistics of accelerator `device_index`.
pub fn reset_peak_memory_stats(device_index: usize) -> Result<(), TorchError> {
    // SAFETY: only integers cross, and the shim catches every exception (guarded.h).
    check(
        unsafe { raw::tb_reset_peak_memory_stats(device_index as c_int) },
        "resetting peak memory statistics",
    )
}

/// Makes libtorch allocate CPU tensors through the shim's counting allocator (the same
/// `c10::alloc_cpu` the default one uses), so that [`cpu_memory_stats`] sees them. Tensors that
/// exist already are not counted. Idempotent.
pub fn install_cpu_memory_counter() -> Result<(), TorchError> {
    // SAFETY: only integers cross, and the shim catches every exception (guarded.h).
    check(unsafe { raw::tb_install_cpu_memory_counter() }, "installing the counting CPU allocator")
}

/// Bytes of CPU tensors allocated since [`install_cpu_memory_counter`]: (live now, peak since the
/// last [`reset_cpu_memory_peak`]).
pub fn cpu_memory_stats() -> (u64, u64) {
    let mut out = [0i64; 2];
    // SAFETY: `out` has the two slots the shim writes.
    unsafe { raw::tb_cpu_memory_stats(out.as_mut_ptr()) };
    (out[0].max(0) as u64, out[1].max(0) as u64)
}

/// Resets the CPU tensor peak to the bytes live now.
pub fn reset_cpu_memory_peak() {
    // SAFETY: no argument; the shim's counters are atomics, safe from any thread.
    unsafe { raw::tb_reset_cpu_memory_peak() }
}

/// The highest bytes of live CPU tensors since [`reset_cpu_high_water`] (or since
/// [`install_cpu_memory_counter`]); unlike the peak, [`reset_cpu_memory_peak`] leaves it alone.
pub fn cpu_high_water_bytes() -> u64 {
    // SAFETY: no argument; the shim's counters are atomics, safe from any thread.
    unsafe { raw::tb_cpu_high_water_bytes() }.max(0) as u64
}

/// Resets the high-water mark of CPU tensors to the bytes live now.
pub fn reset_cpu_high_water() {
    // SAFETY: no argument; the shim's counters are atomics, safe from any thread.
    unsafe { raw::tb_reset_cpu_high_water() }
}

/// Returns cached, unused accelerator memory to the driver.
pub fn empty_cache() -> Result<(), TorchError> {
    // SAFETY: only integers cross, and the shim catches every exception (guarded.h).
    check(unsafe { raw::tb_empty_cache() }, "emptying the allocator cache")
}

/// An autocast region: while it lives, eligible ops on `device` run in the reduced precision
/// `dtype`, as inside `with torch.autocast(device, dtype)`. Autocast state is thread-local.
#[derive(Debug)]
pub struct AutocastGuard {
    is_cuda: c_int,
    was_enabled: bool,
    was_dtype: c_int,
    /// The state it restores is this thread's: the guard must drop where it was made.
    _this_thread: PhantomData<*const ()>,
}

impl AutocastGuard {
    /// Enters autocast for CUDA (`cuda = true`) or CPU with `dtype` (`Kind::Half` or `Kind::BFloat16`).
    pub fn enter(cuda: bool, dtype: Kind) -> Result<Self, TorchError> {
        let is_cuda = c_int::from(cuda);
        // SAFETY: integer arguments only; they read and set this thread's autocast state, which `drop`
        // restores on the same thread (the guard is not `Send`).
        let was_enabled = unsafe { raw::tb_autocast_enabled(is_cuda) } != 0;
        let was_dtype = unsafe { raw::tb_autocast_dtype(is_cuda) };
        check(unsafe { raw::tb_set_autocast(is_cuda, 1, scalar_type_code(dtype)?) }, "enabling autocast")?;
        unsafe { raw::tb_autocast_enter() };
        Ok(Self { is_cuda, was_enabled, was_dtype, _this_thread: PhantomData })
    }
}

impl Drop for AutocastGuard {
    fn drop(&mut self) {
        // SAFETY: restores the state `enter` changed, with the dtype code the shim reported.
        unsafe {
            raw::tb_autocast_exit();
            raw::tb_set_autocast(self.is_cuda, c_int::from(self.was_enabled), self.was_dtype);
        }
    }
}

/// Whether autocast is on for CUDA (`cuda = true`) or CPU on this thread.
pub fn autocast_enabled(cuda: bool) -> bool {
    // SAFETY: an integer in, an integer out: a read of this thread's autocast flag.
    unsafe { raw::tb_autocast_enabled(c_int::from(cuda)) != 0 }
}

/// The c10::ScalarType code of the reduced-precision kinds autocast accepts.
fn scalar_type_code(kind: Kind) -> Result<c_int, TorchError> {
    match kind {
        Kind::Half => Ok(5),
        Kind::BFloat16 => Ok(15),
        other => Err(TorchError(format!("autocast needs Half or BFloat16, not {other:?}"))),
    }
}

/// A copy of `t` in the channels_last memory format.
pub fn to_channels_last(t: &Tensor) -> Result<Tensor, TorchError> {
    let mut out: *mut C_tensor = std::ptr::null_mut();
    // SAFETY: `t` is a live tensor; on success the shim hands over a new heap tensor.
    check(unsafe { raw::tb_channels_last(t.as_ptr(), &mut out) }, "converting to channels_last")?;
    Ok(unsafe { Tensor::from_ptr(out) })
}

/// Converts a parameter's storage to channels_last in place, keeping its identity.
pub fn param_to_channels_last(t: &mut Tensor) -> Result<(), TorchError> {
    // SAFETY: `t` is a live tensor owned by the caller.
    check(
        unsafe { raw::tb_param_to_channels_last(t.as_mut_ptr()) },
        "converting a parameter to channels_last",
    )
}

/// A new uninitialised host tensor with the shape and kind of `t` in pinned (page-locked)
/// memory, from libtorch's caching host allocator (blocks are reused once the copies that read
/// them finish). Fails on a machine without a CUDA device: pinned memory needs the CUDA driver.
pub fn empty_pinned_like(t: &Tensor) -> Result<Tensor, TorchError> {
    let mut out: *mut C_tensor = std::ptr::null_mut();
    // SAFETY: `t` is a live tensor; on success the shim hands over a new heap tensor.
    check(
        unsafe { raw::tb_empty_pinned_like(t.as_ptr(), &mut out) },
        &format!("allocating a pinned {:?} host tensor of shape {:?}", t.kind(), t.size()),
    )?;
    // SAFETY: `out` is the new tensor the shim allocated.
    Ok(unsafe { Tensor::from_ptr(out) })
}

/// Whether `t` is a 4-d tensor laid out as channels_last (and not also plain contiguous).
pub fn is_channels_last(t: &Tensor) -> bool {
    // SAFETY: `t` is a live tensor.
    unsafe { raw::tb_is_channels_last(t.as_ptr()) != 0 }
}

/// The per-tensor scale that maps `t`'s largest magnitude onto the largest finite value of the fp8
/// format of code `format` (the shim's: 0 e4m3, 1 e5m2): a 0-d fp32 tensor on `t`'s device.
/// `crate::workloads::fp8` is its typed face.
pub fn fp8_scale(t: &Tensor, format: c_int) -> Result<Tensor, TorchError> {
    let mut out: *mut C_tensor = std::ptr::null_mut();
    // SAFETY: `t` is a live tensor; on success the shim hands over a new heap tensor.
    check(unsafe { raw::tb_fp8_scale(t.as_ptr(), format, &mut out) }, "computing an fp8 scale")?;
    // SAFETY: `out` is the new tensor the shim allocated.
    Ok(unsafe { Tensor::from_ptr(out) })
}

/// `t` multiplied by `scale`, clamped to the range of the fp8 format of code `format` and cast
/// to it.
pub fn fp8_quantise(t: &Tensor, scale: &Tensor, format: c_int) -> Result<Tensor, TorchError> {
    let mut out: *mut C_tensor = std::ptr::null_mut();
    // SAFETY: `t` and `scale` are live tensors; on success the shim hands over a new heap tensor.
    check(
        unsafe { raw::tb_fp8_quantise(t.as_ptr(), scale.as_ptr(), format, &mut out) },
        &format!("quantising a {:?} tensor to fp8 format {format}", t.kind()),
    )?;
    // SAFETY: `out` is the new tensor the shim allocated.
    Ok(unsafe { Tensor::from_ptr(out) })
}

/// `x · wᵀ` (x [..., K], w [N, K]) through the fp8 linear's autograd function, multiplying with
/// the kernel of code `gemm` (the shim's: 0 `torch._scaled_mm`, 1 emulated); the output is in
/// autocast's type when autocast is on for `x`'s device, else bf16, and backward gives each
/// input a gradient in its own dtype.
pub fn fp8_linear(x: &Tensor, w: &Tensor, gemm: c_int) -> Result<Tensor, TorchError> {
    let mut out: *mut C_tensor = std::ptr::null_mut();
    // SAFETY: `x` and `w` are live tensors; on success the shim hands over a new heap tensor.
    check(
        unsafe { raw::tb_fp8_linear(x.as_ptr(), w.as_ptr(), gemm, &mut out) },
        &format!("fp8 linear of {:?} by weight {:?} (kernel {gemm})", x.size(), w.size()),
    )?;
    // SAFETY: `out` is the new tensor the shim allocated.
    Ok(unsafe { Tensor::from_ptr(out) })
}

/// Whether TensorFloat-32 is allowed, per library.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Tf32 {
    /// TF32 in cuBLAS matmuls.
    pub matmul: bool,
    /// TF32 in cuDNN convolutions.
    pub cudnn: bool,
}

/// Allows or forbids TF32 in matmuls and convolutions.
pub fn set_tf32(tf32: Tf32) -> Result<(), TorchError> {
    // SAFETY: only integers cross, and the shim catches every exception (guarded.h).
    check(unsafe { raw::tb_set_tf32(c_int::from(tf32.matmul), c_int::from(tf32.cudnn)) }, "setting TF32")
}

/// The current TF32 settings.
pub fn tf32() -> Tf32 {
    let mut out = [0 as c_int; 2];
    // SAFETY: `out` has the two slots the shim writes.
    unsafe { raw::tb_get_tf32(out.as_mut_ptr()) };
    Tf32 { matmul: out[0] != 0, cudnn: out[1] != 0 }
}

/// Sets the caching allocator's configuration from `settings`, written as `PYTORCH_ALLOC_CONF`
/// is: the keys it names, and the defaults of `max_split_size_mb`, `roundup_power2_divisions` and
/// `garbage_collection_threshold` where it does not name them. Call before the first device
/// allocation: segments already reserved keep their kind.
pub fn set_allocator_settings(settings: &str) -> Result<(), TorchError> {
    let settings = CString::new(settings)
        .map_err(|_| TorchError(format!("allocator settings {settings:?} hold a NUL")))?;
    // SAFETY: `settings` is a NUL-terminated string alive for the call; the shim parses it into
    // the process-wide allocator configuration and keeps no pointer to it.
    check(unsafe { raw::tb_set_allocator_settings(settings.as_ptr()) }, "setting the caching allocator")
}

/// Whether the caching allocator's configuration has expandable segments on.
pub fn expandable_segments_enabled() -> bool {
    // SAFETY: no argument: a read of the process-wide allocator configuration.
    unsafe { raw::tb_expandable_segments_enabled() != 0 }
}

/// Turns autograd anomaly detection on or off (with NaN checks when on).
pub fn set_anomaly_mode(enabled: bool) {
    // SAFETY: integers only; it sets libtorch's process-wide anomaly-mode flags, which a cell sets
    // before any training starts.
    unsafe { raw::tb_set_anomaly_mode(c_int::from(enabled), c_int::from(enabled)) }
}

/// Whether autograd anomaly detection is on.
pub fn anomaly_mode_enabled() -> bool {
    // SAFETY: no argument: a read of the process-wide anomaly-mode flag.
    unsafe { raw::tb_anomaly_mode_enabled() != 0 }
}

/// Sets the gradient of `t` to None, as `zero_grad(set_to_none=True)` does.
pub fn set_grad_none(t: &mut Tensor) {
    // SAFETY: `t` is a live tensor owned by the caller.
    unsafe { raw::tb_set_grad_none(t.as_mut_ptr()) }
}

/// Backpropagates from `output` with `grad` as the gradient of its elements, as
/// `output.backward(grad)` does in PyTorch (tch's `backward` takes no gradient), freeing the graph.
/// Both are consumed: the output's memory is held only by the nodes that saved it, and the
/// gradient's only until the output's own node has run, as in one backward pass through a
/// `torch.utils.checkpoint` segment.
pub fn backward_from(mut output: Tensor, mut grad: Tensor) -> Result<(), TorchError> {
    // SAFETY: both are live tensors we own; the shim leaves them undefined (not freed), and they
    // are freed when dropped here.
    check(
        unsafe { raw::tb_backward_from(output.as_mut_ptr(), grad.as_mut_ptr()) },
        "backpropagating a gradient",
    )
}

/// Multiplies every gradient in `grads` by `inv_scale` in place, in one multi-tensor launch, and
/// sets `found_inf` to 1 when any gradient holds an inf or NaN (`GradScaler.unscale_`).
pub fn amp_unscale(
    grads: &mut [Tensor],
    found_inf: &mut Tensor,
    inv_scale: &Tensor,
) -> Result<(), TorchError> {
    let mut ptrs: Vec<*mut C_tensor> = grads.iter_mut().map(Tensor::as_mut_ptr).collect();
    // SAFETY: every pointer is a live tensor borrowed for the duration of the call.
    check(
        unsafe {
            raw::tb_amp_unscale(
                ptrs.as_mut_ptr(),
                ptrs.len() as c_int,
                found_inf.as_mut_ptr(),
                inv_scale.as_ptr(),
            )
        },
        "unscaling gradients",
    )
}

/// One SGD step over `params` in a single multi-tensor launch (`at::_fused_sgd_`, the kernel of
/// `torch.optim.SGD(fused=True)`), dampening 0, no Nesterov, the learning rate read from the 0-d
/// tensor `lr`. `params`, `grads` and `momentum_buffers` are parallel lists (the buffers are
/// ignored when `momentum` is 0). With `found_inf` (a 1-element float tensor on the device) the
/// kernel skips the whole update when it holds 1, without a host read. Call under no-grad: it
/// updates leaf parameters in place.
#[allow(clippy::too_many_arguments)]
pub fn fused_sgd(
    params: &mut [Tensor],
    grads: &mut [Tensor],
    momentum_buffers: &mut [Tensor],
    weight_decay: f64,
    momentum: f64,
    lr: &Tensor,
    found_inf: Option<&Tensor>,
) -> Result<(), TorchError> {
    let n = params.len();
    if grads.len() != n || (momentum != 0.0 && momentum_buffers.len() != n) {
        return Err(TorchError(format!(
            "fused SGD: {n} parameters, {} gradients, {} momentum buffers",
            grads.len(),
            momentum_buffers.len()
        )));
    }
    let ptrs = |ts: &mut [Tensor]| ts.iter_mut().map(Tensor::as_mut_ptr).collect::<Vec<_>>();
    let (mut p, mut g, mut b) = (ptrs(params), ptrs(grads), ptrs(momentum_buffers));
    let bufs = if momentum == 0.0 { std::ptr::null_mut() } else { b.as_mut_ptr() };
    // SAFETY: every pointer is a live tensor borrowed for the duration of the call; the lists have
    // `n` entries (checked above), and the shim ignores `bufs` when momentum is 0.
    check(
        unsafe {
            raw::tb_fused_sgd(
                p.as_mut_ptr(),
                g.as_mut_ptr(),
                bufs,
                n as c_int,
                weight_decay,
                momentum,
                lr.as_ptr(),
                found_inf.map_or(std::ptr::null(), Tensor::as_ptr),
            )
        },
        "fused SGD step",
    )
}

/// The state one fused Adam launch updates: parallel lists, entry `i` of each belonging to
/// parameter `i`.
#[derive(Debug)]
pub struct AdamLists<'a> {
    /// The parameters, updated in place.
    pub params: &'a mut [Tensor],
    /// Their gradients.
    pub grads: &'a mut [Tensor],
    /// First-moment estimates, updated in place.
    pub exp_avgs: &'a mut [Tensor],
    /// Second-moment estimates, updated in place.
    pub exp_avg_sqs: &'a mut [Tensor],
    /// 0-d float step counts, already counting this step (the kernel reads them for the bias
    /// corrections and does not change them).
    pub steps: &'a mut [Tensor],
}

/// The hyper-parameters of one fused Adam launch.
#[derive(Debug, Clone, Copy)]
pub struct AdamHyper<'a> {
    /// The learning rate, a 0-d float tensor (on the parameters' device, or on the CPU).
    pub lr: &'a Tensor,
    /// Decay rate of the first moment.
    pub beta1: f64,
    /// Decay rate of the second moment.
    pub beta2: f64,
    /// AdamW's decoupled decay rate per unit of learning rate, or Adam's L2 penalty.
    pub weight_decay: f64,
    /// Added to the root of the second moment.
    pub eps: f64,
}

/// One AdamW step over `lists.params` in a single multi-tensor launch (`at::_fused_adamw_`, the
/// kernel of `torch.optim.AdamW(fused=True)`), without AMSGrad. The kernel does not count steps:
/// add 1 to `lists.steps` before the call (and, with `found_inf`, subtract `found_inf` after it), as
/// PyTorch's Python wrapper does. With `found_inf` (a 1-element float tensor on the device) the
/// kernel skips the whole update when it holds 1, without a host read. Call under no-grad: it
/// updates leaf parameters in place.
pub fn fused_adamw(
    lists: AdamLists<'_>,
    hyper: AdamHyper<'_>,
    found_inf: Option<&Tensor>,
) -> Result<(), TorchError> {
    fused_adam_launch(raw::tb_fused_adamw, "fused AdamW step", lists, hyper, found_inf)
}

/// As [`fused_adamw`], with the weight decay as an L2 penalty on the gradient (`at::_fused_adam_`,
/// the kernel of `torch.optim.Adam(fused=True)`).
pub fn fused_adam(
    lists: AdamLists<'_>,
    hyper: AdamHyper<'_>,
    found_inf: Option<&Tensor>,
) -> Result<(), TorchError> {
    fused_adam_launch(raw::tb_fused_adam, "fused Adam step", lists, hyper, found_inf)
}

/// Checks that the lists are parallel and calls `kernel` on them.
fn fused_adam_launch(
    kernel: raw::FusedAdamKernel,
    what: &str,
    lists: AdamLists<'_>,
    hyper: AdamHyper<'_>,
    found_inf: Option<&Tensor>,
) -> Result<(), TorchError> {
    let AdamLists { params, grads, exp_avgs, exp_avg_sqs, steps } = lists;
    let n = params.len();
    if [grads.len(), exp_avgs.len(), exp_avg_sqs.len(), steps.len()].iter().any(|&len| len != n) {
        return Err(TorchError(format!(
            "{what}: {n} parameters, {} gradients, {} first moments, {} second moments, {} step counts",
            grads.len(),
            exp_avgs.len(),
            exp_avg_sqs.len(),
            steps.len()
        )));
    }
    let ptrs = |ts: &mut [Tensor]| ts.iter_mut().map(Tensor::as_mut_ptr).collect::<Vec<_>>();
    let (mut p, mut g, mut m, mut v, mut s) =
        (ptrs(params), ptrs(grads), ptrs(exp_avgs), ptrs(exp_avg_sqs), ptrs(steps));
    // SAFETY: every pointer is a live tensor borrowed for the duration of the call, and the five
    // lists have `n` entries each (checked above).
    check(
        unsafe {
            kernel(
                p.as_mut_ptr(),
                g.as_mut_ptr(),
                m.as_mut_ptr(),
                v.as_mut_ptr(),
                s.as_mut_ptr(),
                n as c_int,
                hyper.lr.as_ptr(),
                hyper.beta1,
                hyper.beta2,
                hyper.weight_decay,
                hyper.eps,
                found_inf.map_or(std::ptr::null(), Tensor::as_ptr),
            )
        },
        what,
    )
}

/// A saved state of a device's default random generator (`torch.get_rng_state()`, or
/// `torch.cuda.get_rng_state(i)`), to draw the same random numbers again after [`Self::restore`].
#[derive(Debug)]
pub struct RngState {
    device: Device,
    state: Tensor,
}

impl RngState {
    /// The current state of `device`'s default generator (CPU or CUDA).
    pub fn save(device: Device) -> Result<Self, TorchError> {
        let (device_type, device_index) = rng_device(device)?;
        let mut out: *mut C_tensor = std::ptr::null_mut();
        // SAFETY: integers and `&mut out` only; on success the shim hands over a new heap tensor, owned from
        // here on.
        check(
            unsafe { raw::tb_rng_get_state(device_type, device_index, &mut out) },
            &format!("saving the random generator state of {device:?}"),
        )?;
        // SAFETY: `out` is the new tensor the shim allocated.
        Ok(Self { device, state: unsafe { Tensor::from_ptr(out) } })
    }

    /// Puts the generator of the device it was saved from back into this state (it can be
    /// restored any number of times).
    pub fn restore(&self) -> Result<(), TorchError> {
        let (device_type, device_index) = rng_device(self.device)?;
        // SAFETY: `state` is a live tensor the shim only reads.
        check(
            unsafe { raw::tb_rng_set_state(device_type, device_index, self.state.as_ptr()) },
            &format!("restoring the random generator state of {:?}", self.device),
        )
    }
}

/// The shim's code for `device`'s generator: (0 CPU or 1 CUDA, device index).
fn rng_device(device: Device) -> Result<(c_int, c_int), TorchError> {
    match device {
        Device::Cpu => Ok((0, 0)),
        Device::Cuda(index) => Ok((1, index as c_int)),
        other => Err(TorchError(format!("random generator state: only CPU and CUDA devices, not {other:?}"))),
    }
}

/// Turns autocast's cache of casted weights on or off (off while a CUDA
/// graph is captured, so the casts become part of the graph).
pub fn set_autocast_cache_enabled(enabled: bool) {
    // SAFETY: an integer in: it sets this thread's autocast-cache flag.
    unsafe { raw::tb_set_autocast_cache_enabled(c_int::from(enabled)) }
}

/// Whether autocast's cache of casted weights is on.
pub fn autocast_cache_enabled() -> bool {
    // SAFETY: no argument: a read of this thread's autocast-cache flag.
    unsafe { raw::tb_autocast_cache_enabled() != 0 }
}

/// Autocast's cache of casted weights switched off for as long as this lives; dropping it restores
/// the setting found when it was made.
#[derive(Debug)]
pub struct AutocastCacheOff {
    was_enabled: bool,
    /// The setting it restores is this thread's: the guard must drop where it was made.
    _this_thread: PhantomData<*const ()>,
}

impl AutocastCacheOff {
    /// Switches the cache off.
    pub fn new() -> Self {
        let was_enabled = autocast_cache_enabled();
        set_autocast_cache_enabled(false);
        Self { was_enabled, _this_thread: PhantomData }
    }
}

impl Default for AutocastCacheOff {
    fn default() -> Self {
        Self::new()
    }
}

impl Drop for AutocastCacheOff {
    fn drop(&mut self) {
        set_autocast_cache_enabled(self.was_enabled);
    }
}

/// Which `scaled_dot_product_attention` backends the process's settings allow
/// (`torch.backends.cuda.enable_*_sdp`; all on by default).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SdpEnabled {
    /// FlashAttention.
    pub flash: bool,
    /// Memory-efficient attention.
    pub memory_efficient: bool,
    /// The math (reference) implementation.
    pub math: bool,
    /// cuDNN attention.
    pub cudnn: bool,
}

impl SdpEnabled {
    /// Every backend allowed, PyTorch's default: the dispatcher picks among them.
    pub const ALL: SdpEnabled = SdpEnabled { flash: true, memory_efficient: true, math: true, cudnn: true };

    /// The names of the allowed backends, joined by ", " ("none" when none is).
    pub fn names(self) -> String {
        let named = [
            (self.flash, "flash"),
            (self.memory_efficient, "memory-efficient"),
            (self.math, "math"),
            (self.cudnn, "cuDNN"),
        ];
        let allowed: Vec<&str> = named.iter().filter(|(on, _)| *on).map(|(_, name)| *name).collect();
        if allowed.is_empty() {
            "none".to_owned()
        } else {
            allowed.join(", ")
        }
    }
}

/// Allows exactly the `scaled_dot_product_attention` backends `enabled` names, process-wide
/// (`at::Context::setSDPUse*`).
pub fn set_sdp_enabled(enabled: SdpEnabled) -> Result<(), TorchError> {
    let flags = [enabled.flash, enabled.memory_efficient, enabled.math, enabled.cudnn].map(c_int::from);
    // SAFETY: `flags` has the four slots the shim reads, and the shim catches every exception.
    check(unsafe { raw::tb_set_sdp_enabled(flags.as_ptr()) }, "setting the attention backends")
}

/// The `scaled_dot_product_attention` backends the process's settings allow.
pub fn sdp_enabled() -> SdpEnabled {
    let mut out = [0 as c_int; 4];
    // SAFETY: `out` has the four slots the shim writes.
    unsafe { raw::tb_sdp_enabled(out.as_mut_ptr()) };
    SdpEnabled { flash: out[0] != 0, memory_efficient: out[1] != 0, math: out[2] != 0, cudnn: out[3] != 0 }
}

/// Runs `f` and returns, with its result, the names of the operators it called on this thread
/// (`aten::mul`, `autograd::engine::evaluate_function: MulBackward0`, …), in order, leaving out
/// the operators those run inside: what a test inspects to see whether a step reads the host or
/// creates tensors from host data (tch makes those with `aten::zeros` and a copy of the bytes).
pub fn record_ops<R>(f: impl FnOnce() -> R) -> Result<(R, Vec<String>), TorchError> {
    // SAFETY: no argument; the callback it registers on this thread only touches thread-local state.
    check(unsafe { raw::tb_op_log_start() }, "starting the operator log")?;
    let result = f();
    let mut out: *mut c_char = std::ptr::null_mut();
    // SAFETY: on success the shim stores a malloc'ed, NUL-terminated string in `out`.
    check(unsafe { raw::tb_op_log_stop(&mut out) }, "stopping the operator log")?;
    // SAFETY: `out` is the shim's NUL-terminated string, freed right after it is copied.
    let names = unsafe {
        let text = CStr::from_ptr(out).to_string_lossy().into_owned();
        libc::free(out.cast());
        text
    };
    Ok((result, names.lines().map(str::to_owned).collect()))
}

/// A timing event recorded on a CUDA device's current stream: when the stream reaches it, it takes
/// the device's time, so the time between two events is the time the stream spent between them
/// (running kernels, or idle waiting for the host to queue more).
#[derive(Debug)]
pub struct DeviceEvent {
    ptr: *mut c_void,
}

impl DeviceEvent {
    /// Records an event on the current stream of CUDA device `device_index`, without waiting.
    /// Fails where libtorch has no CUDA support.
    pub fn record(device_index: usize) -> Result<Self, TorchError> {
        let mut ptr = std::ptr::null_mut();
        // SAFETY: on success the shim hands over a heap object that `Drop` frees.
        let status = unsafe { raw::tb_device_event_record(device_index as c_int, &mut ptr) };
        check(status, "recording a CUDA event")?;
        Ok(Self { ptr })
    }

    /// Milliseconds from this event to `later` (recorded after it on the same device), waiting
    /// until the stream has reached `later`.
    pub fn elapsed_ms(&self, later: &DeviceEvent) -> Result<f64, TorchError> {
        let mut ms = 0.0;
        // SAFETY: both are live events from tb_device_event_record; the shim only reads them.
        let status = unsafe { raw::tb_device_event_elapsed_ms(self.ptr, later.ptr, &mut ms) };
        check(status, "reading the time between two CUDA events")?;
        Ok(ms)
    }
}

impl Drop for DeviceEvent {
    fn drop(&mut self) {
        // SAFETY: `ptr` came from tb_device_event_record and is freed once, here.
        unsafe { raw::tb_device_event_free(self.ptr) }
    }
}

/// Starts libtorch's Kineto profiler on this thread (and the autograd engine's threads working for
/// it): operators with their input shapes, and with `cuda` also the CUDA runtime calls, kernels and
/// device memory copies of every stream (ask for them only on a CUDA device). Fails when a profiler
/// is already on. [`profiler_stop`], on this thread, stops it.
pub fn profiler_start(cuda: bool) -> Result<(), TorchError> {
    // SAFETY: an integer in; the shim keeps the profiler's state itself.
    check(unsafe { raw::tb_trace_start(c_int::from(cuda)) }, "starting the profiler")
}

/// Stops the profiler [`profiler_start`] started and, with `save_to`, writes what it recorded there
/// as Chrome-trace JSON (written in place: a caller that needs the file whole writes it under a
/// temporary name and renames it).
pub fn profiler_stop(save_to: Option<&Path>) -> Result<(), TorchError> {
    let what = save_to.map_or_else(
        || "stopping the profiler".to_owned(),
        |path| format!("stopping the profiler and saving its trace to {}", path.display()),
    );
    let path = save_to
        .map(|p| CString::new(p.as_os_str().as_bytes()).map_err(|e| TorchError(format!("{what}: {e}"))))
        .transpose()?;
    // SAFETY: `path` is null or a NUL-terminated string that outlives the call.
    check(unsafe { raw::tb_trace_stop(path.as_ref().map_or(std::ptr::null(), |p| p.as_ptr())) }, &what)
}

/// Holds what CUDA device `device_index`'s caching allocator may reserve to `budget_bytes`
/// (`torch.cuda.set_per_process_memory_fraction`): past it an allocation frees the cache and
/// retries, then fails out of memory, as on a GPU of that size. Returns the fraction of the
/// device's memory set. Fails on a binary built without CUDA headers ([`cuda_graphs_compiled`]).
pub fn cap_device_memory(device_index: usize, budget_bytes: u64) -> Result<f64, TorchError> {
    let mut fraction = 0.0;
    // SAFETY: integers in, one f64 out through a pointer to a live local; the shim catches every
    // exception (guarded.h).
    check(
        unsafe { raw::tb_cap_device_memory(device_index as c_int, budget_bytes, &mut fraction) },
        "capping the CUDA caching allocator at the memory budget",
    )?;
    Ok(fraction)
}

/// The version of the cuDNN library libtorch loaded (e.g. 91900 for 9.19.0), as PyTorch's
/// attention dispatcher reads it; an error where this libtorch has no cuDNN.
pub fn cudnn_runtime_version() -> Result<i64, TorchError> {
    let mut out: i64 = 0;
    // SAFETY: `out` is the one slot the shim writes.
    check(unsafe { raw::tb_cudnn_runtime_version(&mut out) }, "reading cuDNN's version")?;
    Ok(out)
}

/// Whether this binary was built with CUDA graph support (CUDA headers found at build time).
pub fn cuda_graphs_compiled() -> bool {
    // SAFETY: no argument: it returns a constant compiled into the shim.
    unsafe { raw::tb_cuda_graphs_compiled() != 0 }
}

/// A CUDA graph (`at::cuda::CUDAGraph`) with its own side stream: warm-up work and the capture run
/// on the side stream (capture cannot use the default stream), replays run on the current stream.
#[derive(Debug)]
pub struct CudaGraph {
    ptr: *mut c_void,
}

impl CudaGraph {
    /// An empty graph for CUDA device `device_index`. Fails on a binary built without CUDA headers.
    pub fn new(device_index: usize) -> Result<Self, TorchError> {
        let mut ptr = std::ptr::null_mut();
        // SAFETY: on success the shim hands over a heap object that `Drop` frees.
        check(unsafe { raw::tb_cuda_graph_new(device_index as c_int, &mut ptr) }, "creating a CUDA graph")?;
        Ok(Self { ptr })
    }

    /// Runs `work` with the graph's side stream current (after the work already queued), then
    /// makes the previous stream current again and has it wait for the side stream. `work`'s own
    /// error comes back as it is.
    pub fn on_side_stream<T, E: From<TorchError>>(
        &mut self,
        work: impl FnOnce() -> Result<T, E>,
    ) -> Result<T, E> {
        // SAFETY: `ptr` is a live graph from tb_cuda_graph_new.
        check(unsafe { raw::tb_cuda_graph_enter_side_stream(self.ptr) }, "switching to the side stream")?;
        let result = work();
        // SAFETY: as above; the side stream was entered just before.
        let exit = check(unsafe { raw::tb_cuda_graph_exit_side_stream(self.ptr) }, "leaving the side stream");
        let value = result?;
        exit?;
        Ok(value)
    }

    /// Captures the kernels `work` launches (on the side stream) into the graph without running
    /// them, and instantiates it. Anything that reads the device from the host fails the capture.
    pub fn capture<T, E: From<TorchError>>(&mut self, work: impl FnOnce() -> Result<T, E>) -> Result<T, E> {
        let ptr = self.ptr;
        self.on_side_stream(|| {
            // SAFETY: `ptr` is a live graph; capture begins on its side stream, now current.
            check(unsafe { raw::tb_cuda_graph_capture_begin(ptr) }, "beginning CUDA graph capture")?;
            let result = work();
            // SAFETY: ends the capture begun above, whatever `work` returned.
            let end = check(unsafe { raw::tb_cuda_graph_capture_end(ptr) }, "ending CUDA graph capture");
            let value = result?;
            end?;
            Ok(value)
        })
    }

    /// Launches the captured kernels once, on the current stream.
    pub fn replay(&mut self) -> Result<(), TorchError> {
        // SAFETY: `ptr` is a live graph from tb_cuda_graph_new.
        check(unsafe { raw::tb_cuda_graph_replay(self.ptr) }, "replaying the CUDA graph")
    }
}

impl Drop for CudaGraph {
    fn drop(&mut self) {
        // SAFETY: `ptr` came from tb_cuda_graph_new and is freed exactly once.
        unsafe { raw::tb_cuda_graph_free(self.ptr) }
    }
}

/// A TorchScript function compiled from source text (`torch::jit::compile`), called from Rust.
/// Its graph runs in the TorchScript executor, which fuses pointwise chains into single kernels
/// where a fuser is enabled (NNC on CUDA by default; on CPU the graph runs unfused).
#[derive(Debug)]
pub struct JitFunction {
    ptr: *mut c_void,
    name: String,
}

impl JitFunction {
    /// Compiles TorchScript `source` and takes its function `name`.
    pub fn compile(source: &str, name: &str) -> Result<Self, TorchError> {
        let c = |s: &str| CString::new(s).map_err(|e| TorchError(format!("TorchScript text: {e}")));
        let (source_c, name_c) = (c(source)?, c(name)?);
        let mut ptr = std::ptr::null_mut();
        // SAFETY: both strings outlive the call; on success the shim hands over a heap object.
        check(
            unsafe { raw::tb_jit_compile(source_c.as_ptr(), name_c.as_ptr(), &mut ptr) },
            &format!("compiling TorchScript function '{name}'"),
        )?;
        Ok(Self { ptr, name: name.to_owned() })
    }

    /// Calls the function on `inputs`; it must return one tensor. Autograd records through it.
    pub fn call(&self, inputs: &[&Tensor]) -> Result<Tensor, TorchError> {
        let ptrs: Vec<*const C_tensor> = inputs.iter().map(|t| t.as_ptr()).collect();
        let mut out: *mut C_tensor = std::ptr::null_mut();
        // SAFETY: `self.ptr` came from tb_jit_compile and is live; the inputs are live tensors that
        // the shim only reads (copies of their handles go on the call stack).
        check(
            unsafe { raw::tb_jit_call(self.ptr, ptrs.as_ptr(), ptrs.len() as c_int, &mut out) },
            &format!("calling TorchScript function '{}'", self.name),
        )?;
        // SAFETY: on success `out` is a new heap tensor that we now own.
        Ok(unsafe { Tensor::from_ptr(out) })
    }
}

impl Drop for JitFunction {
    fn drop(&mut self) {
        // SAFETY: `ptr` came from tb_jit_compile and is freed exactly once.
        unsafe { raw::tb_jit_free(self.ptr) }
    }
}

#[cfg(test)]
mod tests {
    use crate::test_support::seeded;

    use super::*;

    #[test]
    fn a_restored_generator_draws_the_same_numbers_again() {
        seeded(5, || {
            let draw = || Tensor::rand([6], (Kind::Float, Device::Cpu));
            let state = RngState::save(Device::Cpu).unwrap();
            let (first, second) = (draw(), draw());
            assert!(!first.equal(&second));
            for _ in 0..2 {
                state.restore().unwrap();
                assert!(draw().equal(&first));
                assert!(draw().equal(&second));
            }
        });
        assert!(RngState::save(Device::Mps).is_err());
    }

    #[test]
    fn the_allocator_takes_expandable_segments_on_and_off() {
        for enabled in [true, false, true, false] {
            let word = if enabled { "True" } else { "False" };
            set_allocator_settings(&format!("max_split_size_mb:256,expandable_segments:{word}")).unwrap();
            assert_eq!(expandable_segments_enabled(), enabled);
        }
        assert!(set_allocator_settings("expandable_segments:maybe").is_err());
    }
}
