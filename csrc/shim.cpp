// The libtorch calls that tch 0.24 does not expose, behind a tiny C ABI.
//
// Conventions: tensors cross the boundary as `at::Tensor*` (the same representation tch uses for
// its `C_tensor`). Functions that can fail return 0 on success and -1 on failure, with the
// exception message kept for `tb_last_error` (guarded.h). Nothing else lives here: all logic is in
// Rust, except the fp8 linear (its scaling and its autograd function), which tch cannot define.
#include <ATen/ATen.h>
#include <ATen/DeviceAccelerator.h>
#include <ATen/autocast_mode.h>
#include <ATen/record_function.h>
#include <c10/core/Allocator.h>
#include <c10/core/AllocatorConfig.h>
#include <c10/core/CPUAllocator.h>
#include <c10/core/CachingDeviceAllocator.h>
#include <c10/core/Event.h>
#include <c10/core/impl/LocalDispatchKeySet.h>
#include <c10/core/impl/VirtualGuardImpl.h>
#include <c10/core/impl/alloc_cpu.h>
#include <torch/csrc/autograd/anomaly_mode.h>
#include <torch/csrc/autograd/engine.h>
#include <torch/csrc/autograd/function_hook.h>
#include <torch/csrc/autograd/custom_function.h>
#include <torch/csrc/autograd/profiler_kineto.h>
#include <torch/jit.h>
#include <torch/version.h>

#ifdef TRICKBENCH_CUDA_GRAPHS
#include <ATen/cuda/CUDAGraph.h>
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAStream.h>
#endif

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <stdexcept>
#include <string>
#include <vector>

#include "guarded.h"

namespace {
using tb::guarded;
// The operators recorded by tb_op_log_start on this thread, and its callback.
thread_local std::vector<std::string> op_log;
thread_local at::CallbackHandle op_log_handle = 0;
// How many recorded operators are running on this thread (0: the next one is called from outside).
thread_local int op_log_depth = 0;

at::DeviceType device_type(int is_cuda) { return is_cuda ? at::kCUDA : at::kCPU; }

// The tensors behind `n` pointers, as a list for a multi-tensor kernel.
std::vector<at::Tensor> tensor_list(at::Tensor** ts, int n) {
  std::vector<at::Tensor> v;
  v.reserve(n);
  for (int i = 0; i < n; ++i) v.push_back(*ts[i]);
  return v;
}

// The device of a default random generator: type 0 CPU, 1 CUDA (index -1: the current device).
at::Device rng_device(int type, int index) {
  if (type != 0 && type != 1) {
    throw std::runtime_error("random generators: the device type must be 0 (CPU) or 1 (CUDA)");
  }
  return type == 0 ? at::Device(at::kCPU) : at::Device(at::kCUDA, static_cast<c10::DeviceIndex>(index));
}

// One Adam update through `kernel` (at::_fused_adam_ or at::_fused_adamw_, whose Tensor-lr overloads
// share a signature): no AMSGrad, no maximize, no grad_scale.
template <typename Kernel>
int fused_adam_launch(Kernel kernel, at::Tensor** params, at::Tensor** grads, at::Tensor** exp_avgs,
                      at::Tensor** exp_avg_sqs, at::Tensor** steps, int n, const at::Tensor* lr, double beta1,
                      double beta2, double weight_decay, double eps, const at::Tensor* found_inf) {
  return guarded([&] {
    kernel(tensor_list(params, n), tensor_list(grads, n), tensor_list(exp_avgs, n), tensor_list(exp_avg_sqs, n),
           /*max_exp_avg_sqs=*/std::vector<at::Tensor>{}, tensor_list(steps, n), *lr, beta1, beta2, weight_decay,
           eps, /*amsgrad=*/false, /*maximize=*/false, /*grad_scale=*/std::nullopt,
           found_inf == nullptr ? std::nullopt : std::optional<at::Tensor>(*found_inf));
  });
}

// Whether tb_trace_start has started the profiler and tb_trace_stop has not stopped it yet.
std::atomic<bool> trace_running{false};

// Bytes held by live CPU tensors allocated through the counting allocator, and their peak.
std::atomic<int64_t> cpu_live_bytes{0};
std::atomic<int64_t> cpu_peak_bytes{0};
// Their highest since tb_reset_cpu_high_water: a rehearsed GPU's model of the caching allocator's
// reserved bytes, which keep every block handed out until the cache is emptied.
std::atomic<int64_t> cpu_high_water_bytes{0};

// Raises `peak` to `live` where that is higher.
void raise_to(std::atomic<int64_t>& peak, int64_t live) {
  int64_t seen = peak.load();
  while (live > seen && !peak.compare_exchange_weak(seen, live)) {
  }
}
// Each allocation starts with a header holding its size; 64 bytes keep the data 64-byte aligned.
constexpr size_t kCpuHeaderBytes = 64;

// Tells a profiler recording memory (a trace: tb_trace_start) of an allocation (bytes > 0) or a
// free (bytes < 0) at `data`, as libtorch's default CPU allocator does.
void report_to_profiler(void* data, int64_t bytes, int64_t live) {
  if (c10::memoryProfilingEnabled()) {
    c10::reportMemoryUsageToProfiler(data, bytes, static_cast<size_t>(live), 0, c10::Device(c10::DeviceType::CPU));
  }
}

void counting_cpu_delete(void* data) {
  if (data == nullptr) return;
  auto* base = static_cast<char*>(data) - kCpuHeaderBytes;
  const auto n = static_cast<int64_t>(*reinterpret_cast<size_t*>(base));
  report_to_profiler(data, -n, cpu_live_bytes.fetch_sub(n) - n);
  c10::free_cpu(base);
}

// libtorch's CPU allocation (c10::alloc_cpu, as the default allocator), counting live bytes so a
// CPU run has a tensor-memory peak like the CUDA caching allocator's.
struct CountingCpuAllocator final : c10::Allocator {
  c10::DataPtr allocate(size_t n) override {
    auto* base = static_cast<char*>(c10::alloc_cpu(n + kCpuHeaderBytes));
    *reinterpret_cast<size_t*>(base) = n;
    const int64_t live = cpu_live_bytes.fetch_add(static_cast<int64_t>(n)) + static_cast<int64_t>(n);
    raise_to(cpu_peak_bytes, live);
    raise_to(cpu_high_water_bytes, live);
    void* data = base + kCpuHeaderBytes;
    report_to_profiler(data, static_cast<int64_t>(n), live);
    return {data, data, &counting_cpu_delete, c10::Device(c10::DeviceType::CPU)};
  }
  c10::DeleterFnPtr raw_deleter() const override { return &counting_cpu_delete; }
  void copy_data(void* dest, const void* src, std::size_t count) const override {
    default_copy_data(dest, src, count);
  }
};

// Per-tensor dynamically scaled fp8, shared by the fp8 linear's two matmul kernels and by the
// functions that expose its steps to the tests: a tensor's scale is the format's largest finite
// value over the tensor's largest magnitude (floored at kFp8AmaxFloor, so an all-zero tensor gets a
// finite scale), and it is quantised by multiplying by the scale, clamping to the format's range
// (casts of larger values give NaN or infinity) and casting.
constexpr double kFp8AmaxFloor = 1e-12;

// An fp8 format by its C ABI code: 0 float8_e4m3fn (forward operands), 1 float8_e5m2 (gradients).
at::ScalarType fp8_type(int format) {
  if (format != 0 && format != 1) {
    throw std::runtime_error("fp8 format code " + std::to_string(format) + ": expected 0 (e4m3fn) or 1 (e5m2)");
  }
  return format == 0 ? at::kFloat8_e4m3fn : at::kFloat8_e5m2;
}

// The largest finite value of an fp8 type, as c10 defines it: 448 for e4m3fn, 57344 for e5m2.
double fp8_max(at::ScalarType type) {
  return type == at::kFloat8_e4m3fn ? static_cast<double>(std::numeric_limits<c10::Float8_e4m3fn>::max())
                                    : static_cast<double>(std::numeric_limits<c10::Float8_e5m2>::max());
}

// fp8_max / max(amax(|t|), kFp8AmaxFloor), a 0-d fp32 tensor on t's device (no host read).
at::Tensor fp8_scale(const at::Tensor& t, at::ScalarType type) {
  return t.abs().max().to(at::kFloat).clamp_min(kFp8AmaxFloor).reciprocal().mul(fp8_max(type));
}

// t · scale, clamped to the type's range, cast to the fp8 type.
at::Tensor fp8_quantise(const at::Tensor& t, const at::Tensor& scale, at::ScalarType type) {
  const double max = fp8_max(type);
  return t.to(at::kFloat).mul(scale).clamp(-max, max).to(type);
}

// How the fp8 linear multiplies its quantised operands: torch._scaled_mm (fp8 tensor cores), or
// emulated by dequantising both operands and multiplying in fp32.
enum class Fp8Gemm { ScaledMm = 0, Emulated = 1 };

// a [M, K] · b [K, N] of fp8 operands quantised with scales sa and sb, dequantised in the product,
// in `out`. _scaled_mm takes its first operand row-major and its second column-major, and the
// inverse scales; the emulation computes the same product from the same operands.
at::Tensor fp8_mm(const at::Tensor& a, const at::Tensor& b, const at::Tensor& sa, const at::Tensor& sb,
                  at::ScalarType out, Fp8Gemm gemm) {
  const auto inv_a = sa.reciprocal();
  const auto inv_b = sb.reciprocal();
  if (gemm == Fp8Gemm::Emulated) {
    return at::mm(a.to(at::kFloat).mul(inv_a), b.to(at::kFloat).mul(inv_b)).to(out);
  }
  return at::_scaled_mm(a.contiguous(), b.t().contiguous().t(), inv_a, inv_b, std::nullopt, std::nullopt, out);
}

// y = x · wᵀ with fp8 operands, as modded-nanogpt's FP8 matmul: x and w quantised to e4m3 with
// their own per-tensor scales, y in autocast's type (bf16 without autocast); in backward the
// output gradient g quantised to e5m2 with its own scale, grad_x = g · w and grad_w = gᵀ · x from
// the saved fp8 operands, each gradient in its input's dtype. x is [..., K], w [N, K]; _scaled_mm
// needs K, N and x's rows in multiples of 16.
struct Fp8Linear : torch::autograd::Function<Fp8Linear> {
  static at::Tensor forward(torch::autograd::AutogradContext* ctx, const at::Tensor& x, const at::Tensor& w,
                            int64_t gemm) {
    const auto device = x.device().type();
    const auto out = at::autocast::is_autocast_enabled(device) ? at::autocast::get_autocast_dtype(device)
                                                               : at::kBFloat16;
    // The casts here and in backward are the fp8 recipe's own: autocast must not recast the
    // emulation's matmuls.
    c10::impl::ExcludeDispatchKeyGuard no_autocast(c10::autocast_dispatch_keyset);
    const auto rows = x.reshape({-1, x.size(-1)});
    const auto sx = fp8_scale(rows, at::kFloat8_e4m3fn);
    const auto sw = fp8_scale(w, at::kFloat8_e4m3fn);
    const auto x8 = fp8_quantise(rows, sx, at::kFloat8_e4m3fn);
    const auto w8 = fp8_quantise(w, sw, at::kFloat8_e4m3fn);
    ctx->save_for_backward({x8, w8, sx, sw});
    ctx->saved_data["gemm"] = gemm;
    ctx->saved_data["x_dtype"] = static_cast<int64_t>(x.scalar_type());
    ctx->saved_data["x_shape"] = x.sizes().vec();
    auto out_shape = x.sizes().vec();
    out_shape.back() = w.size(0);
    return fp8_mm(x8, w8.t(), sx, sw, out, static_cast<Fp8Gemm>(gemm)).view(out_shape);
  }

  static torch::autograd::tensor_list backward(torch::autograd::AutogradContext* ctx,
                                               torch::autograd::tensor_list grads) {
    c10::impl::ExcludeDispatchKeyGuard no_autocast(c10::autocast_dispatch_keyset);
    const auto saved = ctx->get_saved_variables();
    const auto &x8 = saved[0], &w8 = saved[1], &sx = saved[2], &sw = saved[3];
    const auto gemm = static_cast<Fp8Gemm>(ctx->saved_data["gemm"].toInt());
    const auto g = grads[0].reshape({-1, w8.size(0)});
    const auto sg = fp8_scale(g, at::kFloat8_e5m2);
    const auto g8 = fp8_quantise(g, sg, at::kFloat8_e5m2);
    at::Tensor grad_x, grad_w;
    if (ctx->needs_input_grad(0)) {
      const auto x_dtype = static_cast<at::ScalarType>(ctx->saved_data["x_dtype"].toInt());
      grad_x = fp8_mm(g8, w8, sg, sw, x_dtype, gemm).view(ctx->saved_data["x_shape"].toIntVector());
    }
    if (ctx->needs_input_grad(1)) {
      grad_w = fp8_mm(g8.t(), x8, sg, sx, at::kFloat, gemm);
    }
    return {grad_x, grad_w, at::Tensor()};
  }
};
}  // namespace

extern "C" {

// The message of the last failure on this thread (valid until the next failing call).
const char* tb_last_error() { return tb::last_error.c_str(); }

// The libtorch version the binary was compiled against, e.g. "2.11.0".
const char* tb_torch_version() { return TORCH_VERSION; }

// Caching-allocator statistics of accelerator `device_index`, in bytes:
// out[0] allocated now, out[1] allocated peak, out[2] reserved now, out[3] reserved peak,
// out[4] number of out-of-memory events.
int tb_device_memory_stats(int device_index, int64_t* out) {
  return guarded([&] {
    const auto stats = at::accelerator::getDeviceStats(static_cast<c10::DeviceIndex>(device_index));
    const auto all = static_cast<size_t>(c10::CachingAllocator::StatType::AGGREGATE);
    out[0] = stats.allocated_bytes[all].current;
    out[1] = stats.allocated_bytes[all].peak;
    out[2] = stats.reserved_bytes[all].current;
    out[3] = stats.reserved_bytes[all].peak;
    out[4] = stats.num_ooms;
  });
}

// Holds what CUDA device `device_index`'s caching allocator may reserve to `budget_bytes`, as
// torch.cuda.set_per_process_memory_fraction does: past it an allocation frees the cache and
// retries, then fails out of memory, as on a GPU of that size. CUDA is initialised first. Writes
// the fraction of the device's memory set to `fraction`; fails on a binary built without CUDA
// headers.
int tb_cap_device_memory(int device_index, uint64_t budget_bytes, double* fraction) {
  return guarded([&] {
#ifdef TRICKBENCH_CUDA_GRAPHS
    const auto device = static_cast<c10::DeviceIndex>(device_index);
    at::globalContext().lazyInitDevice(c10::DeviceType::CUDA);
    const auto total = at::accelerator::getMemoryInfo(device).second;
    *fraction = std::min(1.0, static_cast<double>(budget_bytes) / static_cast<double>(total));
    c10::cuda::CUDACachingAllocator::setMemoryFraction(*fraction, device);
#else
    (void)device_index;
    (void)budget_bytes;
    (void)fraction;
    throw std::runtime_error(
        "this binary was built without CUDA headers, so it cannot cap the CUDA caching allocator");
#endif
  });
}

// Makes libtorch allocate CPU tensors through the counting allocator (tensors that already exist
// keep their own deleters). Idempotent.
int tb_install_cpu_memory_counter() {
  return guarded([&] {
    static CountingCpuAllocator* installed = nullptr;
    if (installed == nullptr) {
      installed = new CountingCpuAllocator();
      c10::SetCPUAllocator(installed, /*priority=*/1);
    }
    if (c10::GetCPUAllocator() != installed) {
      throw std::runtime_error("another CPU allocator with a higher priority is installed");
    }
  });
}

// Bytes of CPU tensors from the counting allocator: out[0] live now, out[1] peak since the last
// reset.
void tb_cpu_memory_stats(int64_t* out) {
  out[0] = cpu_live_bytes.load();
  out[1] = cpu_peak_bytes.load();
}

// Resets the CPU peak to the bytes live now.
void tb_reset_cpu_memory_peak() { cpu_peak_bytes.store(cpu_live_bytes.load()); }

// The highest bytes of live CPU tensors since the last tb_reset_cpu_high_water.
int64_t tb_cpu_high_water_bytes() { return cpu_high_water_bytes.load(); }

// Resets the high-water mark of CPU tensors to the bytes live now.
void tb_reset_cpu_high_water() { cpu_high_water_bytes.store(cpu_live_bytes.load()); }

// Resets the peak statistics of accelerator `device_index`.
int tb_reset_peak_memory_stats(int device_index) {
  return guarded([&] { at::accelerator::resetPeakStats(static_cast<c10::DeviceIndex>(device_index)); });
}

// Returns cached, unused accelerator memory to the driver.
int tb_empty_cache() {
  return guarded([&] { at::accelerator::emptyCache(); });
}

// Enables or disables autocast for CUDA (is_cuda=1) or CPU, computing in `dtype`
// (a c10::ScalarType code: 5 = Half, 15 = BFloat16). Thread-local, like PyTorch's.
int tb_set_autocast(int is_cuda, int enabled, int dtype) {
  return guarded([&] {
    const auto type = device_type(is_cuda);
    at::autocast::set_autocast_enabled(type, enabled != 0);
    at::autocast::set_autocast_dtype(type, static_cast<at::ScalarType>(dtype));
  });
}

// Whether autocast is enabled for CUDA (is_cuda=1) or CPU on this thread.
int tb_autocast_enabled(int is_cuda) { return at::autocast::is_autocast_enabled(device_type(is_cuda)) ? 1 : 0; }

// The c10::ScalarType code autocast computes in for CUDA (is_cuda=1) or CPU on this thread.
int tb_autocast_dtype(int is_cuda) {
  return static_cast<int>(at::autocast::get_autocast_dtype(device_type(is_cuda)));
}

// Enters an autocast region (as torch.autocast's __enter__ does).
void tb_autocast_enter() { at::autocast::increment_nesting(); }

// Leaves an autocast region; the cast cache is cleared when the outermost region ends.
void tb_autocast_exit() {
  if (at::autocast::decrement_nesting() == 0) {
    at::autocast::clear_cache();
  }
}

// A copy of `t` in the channels_last memory format (or `t` itself when it already is).
int tb_channels_last(const at::Tensor* t, at::Tensor** out) {
  return guarded([&] { *out = new at::Tensor(t->contiguous(at::MemoryFormat::ChannelsLast)); });
}

// Converts a parameter's storage to channels_last in place (its identity and autograd leaf status
// are kept, as `module.to(memory_format=torch.channels_last)` does).
int tb_param_to_channels_last(at::Tensor* t) {
  return guarded([&] { t->set_data(t->contiguous(at::MemoryFormat::ChannelsLast)); });
}

// 1 when `t` is laid out as channels_last (a 4-d tensor), else 0.
int tb_is_channels_last(const at::Tensor* t) {
  return t->is_contiguous(at::MemoryFormat::ChannelsLast) && t->dim() == 4 && !t->is_contiguous() ? 1 : 0;
}

// Allows or forbids TF32 in fp32 matmuls (torch.set_float32_matmul_precision "high" or "highest")
// and in cuDNN convolutions (torch.backends.cudnn.allow_tf32).
int tb_set_tf32(int matmul, int cudnn) {
  return guarded([&] {
    at::globalContext().setFloat32MatmulPrecision(matmul != 0 ? "high" : "highest");
    at::globalContext().setAllowTF32CuDNN(cudnn != 0);
  });
}

// out[0] = TF32 allowed in matmuls, out[1] = allowed in cuDNN convolutions.
void tb_get_tf32(int* out) {
  out[0] = at::globalContext().allowTF32CuBLAS() ? 1 : 0;
  out[1] = at::globalContext().allowTF32CuDNN() ? 1 : 0;
}

// Parses `settings` (PYTORCH_ALLOC_CONF's syntax) into the accelerator caching allocator's
// configuration, before anything is allocated. Each call resets max_split_size_mb,
// roundup_power2_divisions and garbage_collection_threshold to their defaults unless `settings`
// names them.
int tb_set_allocator_settings(const char* settings) {
  return guarded([&] { c10::CachingAllocator::setAllocatorSettings(settings); });
}

// 1 when the caching allocator's configuration has expandable segments on, else 0.
int tb_expandable_segments_enabled() {
  return c10::CachingAllocator::AcceleratorAllocatorConfig::use_expandable_segments() ? 1 : 0;
}

// Turns autograd anomaly detection on or off (check_nan: also fail on NaN gradients).
void tb_set_anomaly_mode(int enabled, int check_nan) {
  torch::autograd::AnomalyMode::set_enabled(enabled != 0, check_nan != 0);
}

// 1 when anomaly detection is on.
int tb_anomaly_mode_enabled() { return torch::autograd::AnomalyMode::is_enabled() ? 1 : 0; }

// Sets the gradient of `t` to None (undefined), as `optimizer.zero_grad(set_to_none=True)` does.
void tb_set_grad_none(at::Tensor* t) { t->mutable_grad().reset(); }

// Drops the tensors of `held` once the node it hangs on has run: the gradient a backward pass
// started from, which nothing needs after the graph's first node.
struct ReleaseAfterRun final : torch::autograd::FunctionPostHook {
  explicit ReleaseAfterRun(std::shared_ptr<std::vector<at::Tensor>> held) : held(std::move(held)) {}
  torch::autograd::variable_list operator()(const torch::autograd::variable_list& outputs,
                                            const torch::autograd::variable_list&) override {
    for (auto& t : *held) t = at::Tensor();
    return outputs;
  }
  std::shared_ptr<std::vector<at::Tensor>> held;
};

// Backpropagates from `output` with `grad` as the gradient of its elements, as
// `output.backward(grad)` does, freeing the graph; both tensors are taken over (left undefined),
// so that neither outlives its use: `output` is held by the graph only as far as its nodes saved
// it, and `grad` is released once the output's node has run (torch.autograd.backward would hold
// both to the end of the pass, an activation and a gradient more than torch.utils.checkpoint's
// recomputation holds).
int tb_backward_from(at::Tensor* output, at::Tensor* grad) {
  return guarded([&] {
    namespace ag = torch::autograd;
    const ag::Edge root = ag::impl::gradient_edge(*output);
    if (!root.function) throw std::runtime_error("the output does not require a gradient");
    *output = at::Tensor();
    auto grads = std::make_shared<std::vector<at::Tensor>>(1, std::move(*grad));
    *grad = at::Tensor();
    root.function->add_post_hook(std::make_unique<ReleaseAfterRun>(grads));
    ag::Engine::get_default_engine().execute({root}, *grads, /*keep_graph=*/false, /*create_graph=*/false,
                                             /*accumulate_grad=*/true);
  });
}

// Unscales `n` gradients by `inv_scale` in one multi-tensor launch and sets `found_inf` to 1 when
// any of them holds an inf or NaN (GradScaler.unscale_).
int tb_amp_unscale(at::Tensor** grads, int n, at::Tensor* found_inf, const at::Tensor* inv_scale) {
  return guarded([&] {
    at::_amp_foreach_non_finite_check_and_unscale_(tensor_list(grads, n), *found_inf, *inv_scale);
  });
}

// A new uninitialised CPU tensor with the shape and dtype of `t` in pinned (page-locked) memory
// from the accelerator's caching host allocator, which hands freed blocks out again once the
// copies recorded on them have finished.
int tb_empty_pinned_like(const at::Tensor* t, at::Tensor** out) {
  return guarded([&] {
    const auto options = at::TensorOptions().dtype(t->scalar_type()).pinned_memory(true);
    *out = new at::Tensor(at::empty(t->sizes(), options));
  });
}

// One SGD update of `n` parameters in a single multi-tensor launch (`torch.optim.SGD(fused=True)`,
// dampening 0, no Nesterov), with the learning rate read from the 0-d tensor `lr` (so it can live on
// the device). `bufs` holds the `n` momentum buffers, or is ignored when momentum is 0.
// is_first_step is false: zero-initialised buffers make the first update `buf = 0·m + d = d`, the
// same as PyTorch's first step. With `found_inf` (may be null) the kernel skips the whole update
// when it holds 1, deciding on the device (how GradScaler steps without a host read).
int tb_fused_sgd(at::Tensor** params, at::Tensor** grads, at::Tensor** bufs, int n, double weight_decay,
                 double momentum, const at::Tensor* lr, const at::Tensor* found_inf) {
  return guarded([&] {
    at::_fused_sgd_(tensor_list(params, n), tensor_list(grads, n),
                    momentum == 0.0 ? std::vector<at::Tensor>{} : tensor_list(bufs, n),
                    weight_decay, momentum, *lr, /*dampening=*/0.0, /*nesterov=*/false, /*maximize=*/false,
                    /*is_first_step=*/false, /*grad_scale=*/std::nullopt,
                    found_inf == nullptr ? std::nullopt : std::optional<at::Tensor>(*found_inf));
  });
}

// One AdamW update of `n` parameters in a single multi-tensor launch (`torch.optim.AdamW(fused=True)`,
// no AMSGrad), with the learning rate read from the 0-d tensor `lr`. `exp_avgs`, `exp_avg_sqs` and
// `steps` (float step counts, already counting this step) are the `n` parameters' state. With
// `found_inf` (may be null) the kernel skips the whole update when it holds 1, deciding on the device.
int tb_fused_adamw(at::Tensor** params, at::Tensor** grads, at::Tensor** exp_avgs, at::Tensor** exp_avg_sqs,
                   at::Tensor** steps, int n, const at::Tensor* lr, double beta1, double beta2, double weight_decay,
                   double eps, const at::Tensor* found_inf) {
  const auto kernel = [](auto&&... args) { at::_fused_adamw_(args...); };
  return fused_adam_launch(kernel, params, grads, exp_avgs, exp_avg_sqs, steps, n, lr, beta1, beta2, weight_decay,
                           eps, found_inf);
}

// As tb_fused_adamw, with the weight decay as an L2 penalty on the gradient
// (`torch.optim.Adam(fused=True)`).
int tb_fused_adam(at::Tensor** params, at::Tensor** grads, at::Tensor** exp_avgs, at::Tensor** exp_avg_sqs,
                  at::Tensor** steps, int n, const at::Tensor* lr, double beta1, double beta2, double weight_decay,
                  double eps, const at::Tensor* found_inf) {
  const auto kernel = [](auto&&... args) { at::_fused_adam_(args...); };
  return fused_adam_launch(kernel, params, grads, exp_avgs, exp_avg_sqs, steps, n, lr, beta1, beta2, weight_decay,
                           eps, found_inf);
}

// The state of the default random generator of device `device_type` (0 CPU, 1 CUDA) number
// `device_index` (-1: the current CUDA device), a new CPU byte tensor handed over in `out`.
int tb_rng_get_state(int device_type, int device_index, at::Tensor** out) {
  return guarded([&] {
    auto gen = at::globalContext().defaultGenerator(rng_device(device_type, device_index));
    std::lock_guard<std::mutex> lock(gen.mutex());
    *out = new at::Tensor(gen.get_state());
  });
}

// Restores the default random generator of device `device_type` number `device_index` to `state`
// (from tb_rng_get_state on the same device).
int tb_rng_set_state(int device_type, int device_index, const at::Tensor* state) {
  return guarded([&] {
    auto gen = at::globalContext().defaultGenerator(rng_device(device_type, device_index));
    std::lock_guard<std::mutex> lock(gen.mutex());
    gen.set_state(*state);
  });
}

// Enables or disables autocast's cache of casted weights (a CUDA graph capture needs it off, so the
// casts are captured as kernels instead of being served from tensors the graph does not own).
void tb_set_autocast_cache_enabled(int enabled) { at::autocast::set_autocast_cache_enabled(enabled != 0); }

// 1 when autocast's cache of casted weights is on.
int tb_autocast_cache_enabled() { return at::autocast::is_autocast_cache_enabled() ? 1 : 0; }

// The scaled_dot_product_attention backends the user settings allow (torch.backends.cuda's
// enable_*_sdp): out[0] flash, out[1] memory-efficient, out[2] math, out[3] cuDNN.
void tb_sdp_enabled(int* out) {
  auto& ctx = at::globalContext();
  out[0] = ctx.userEnabledFlashSDP() ? 1 : 0;
  out[1] = ctx.userEnabledMemEfficientSDP() ? 1 : 0;
  out[2] = ctx.userEnabledMathSDP() ? 1 : 0;
  out[3] = ctx.userEnabledCuDNNSDP() ? 1 : 0;
}

// The per-tensor scale of `t` for fp8 format `format` (0 e4m3fn, 1 e5m2): a 0-d fp32 tensor.
int tb_fp8_scale(const at::Tensor* t, int format, at::Tensor** out) {
  return guarded([&] { *out = new at::Tensor(fp8_scale(*t, fp8_type(format))); });
}

// `t` quantised to fp8 format `format` with `scale` (as tb_fp8_scale computes it).
int tb_fp8_quantise(const at::Tensor* t, const at::Tensor* scale, int format, at::Tensor** out) {
  return guarded([&] { *out = new at::Tensor(fp8_quantise(*t, *scale, fp8_type(format))); });
}

// y = x · wᵀ through the fp8 linear's autograd function, multiplying with torch._scaled_mm
// (gemm 0) or the fp32 emulation (gemm 1); y in autocast's type on x's device, else bf16.
int tb_fp8_linear(const at::Tensor* x, const at::Tensor* w, int gemm, at::Tensor** out) {
  return guarded([&] {
    if (gemm != 0 && gemm != 1) {
      throw std::runtime_error("fp8 matmul kernel code " + std::to_string(gemm) + ": expected 0 or 1");
    }
    *out = new at::Tensor(Fp8Linear::apply(*x, *w, static_cast<int64_t>(gemm)));
  });
}

// Sets which scaled_dot_product_attention backends the process allows (at::Context's setSDPUse*,
// what torch.backends.cuda's enable_*_sdp set): flags[0] flash, flags[1] memory-efficient,
// flags[2] math, flags[3] cuDNN, each 1 to allow it, 0 to forbid it.
int tb_set_sdp_enabled(const int* flags) {
  return guarded([&] {
    auto& ctx = at::globalContext();
    ctx.setSDPUseFlash(flags[0] != 0);
    ctx.setSDPUseMemEfficient(flags[1] != 0);
    ctx.setSDPUseMath(flags[2] != 0);
    ctx.setSDPUseCuDNN(flags[3] != 0);
  });
}

// The version of the cuDNN library loaded at run time (e.g. 91900 for 9.19.0), which PyTorch's
// scaled_dot_product_attention dispatcher reads when it decides whether cuDNN attention can run;
// fails when this libtorch has no cuDNN.
int tb_cudnn_runtime_version(int64_t* out) {
  return guarded([&] { *out = at::globalContext().versionRuntimeCuDNN(); });
}

// 1 when this binary was compiled with CUDA graph support (CUDA headers were found at build time).
int tb_cuda_graphs_compiled() {
#ifdef TRICKBENCH_CUDA_GRAPHS
  return 1;
#else
  return 0;
#endif
}

#ifdef TRICKBENCH_CUDA_GRAPHS
// A CUDA graph with the side stream it is captured on (capture cannot use the default stream).
struct TbCudaGraph {
  at::cuda::CUDAGraph graph;
  c10::cuda::CUDAStream side;
  std::optional<c10::cuda::CUDAStream> previous;
  explicit TbCudaGraph(c10::DeviceIndex device) : side(c10::cuda::getStreamFromPool(false, device)) {}
};

namespace {
// Makes `waiting` wait, on the device, for the work queued so far on `done`.
void stream_wait(const c10::cuda::CUDAStream& done, const c10::cuda::CUDAStream& waiting) {
  c10::Event event(c10::DeviceType::CUDA);
  event.record(done);
  event.block(waiting);
}
}  // namespace
#else
struct TbCudaGraph {};
#endif

namespace {
[[noreturn]] void no_cuda_graphs() {
  throw std::runtime_error(
      "this binary was built without CUDA headers, so without CUDA graph support "
      "(run scripts/setup-libtorch, which installs nvidia-cuda-crt, then rebuild)");
}
}  // namespace

// A new, empty CUDA graph for CUDA device `device`, with a side stream from the pool.
int tb_cuda_graph_new(int device, void** out) {
  return guarded([&] {
#ifdef TRICKBENCH_CUDA_GRAPHS
    *out = new TbCudaGraph(static_cast<c10::DeviceIndex>(device));
#else
    no_cuda_graphs();
#endif
  });
}

// Makes the graph's side stream current, after the work already queued on the current stream
// (warm-up runs there, as PyTorch's capture recipe asks).
int tb_cuda_graph_enter_side_stream(void* graph) {
  return guarded([&] {
#ifdef TRICKBENCH_CUDA_GRAPHS
    auto* g = static_cast<TbCudaGraph*>(graph);
    if (g->previous) throw std::runtime_error("already on the side stream");
    const auto current = c10::cuda::getCurrentCUDAStream(g->side.device_index());
    stream_wait(current, g->side);
    g->previous = current;
    c10::cuda::setCurrentCUDAStream(g->side);
#else
    no_cuda_graphs();
#endif
  });
}

// Makes the stream that was current before tb_cuda_graph_enter_side_stream current again, waiting
// for the side stream's work.
int tb_cuda_graph_exit_side_stream(void* graph) {
  return guarded([&] {
#ifdef TRICKBENCH_CUDA_GRAPHS
    auto* g = static_cast<TbCudaGraph*>(graph);
    if (!g->previous) throw std::runtime_error("not on the side stream");
    stream_wait(g->side, *g->previous);
    c10::cuda::setCurrentCUDAStream(*g->previous);
    g->previous.reset();
#else
    no_cuda_graphs();
#endif
  });
}

// Starts capturing on the side stream: kernels are recorded, not run, until tb_cuda_graph_capture_end.
int tb_cuda_graph_capture_begin(void* graph) {
  return guarded([&] {
#ifdef TRICKBENCH_CUDA_GRAPHS
    auto* g = static_cast<TbCudaGraph*>(graph);
    if (g->side != c10::cuda::getCurrentCUDAStream(g->side.device_index())) {
      throw std::runtime_error("capture must begin on the graph's side stream");
    }
    g->graph.capture_begin();
#else
    no_cuda_graphs();
#endif
  });
}

// Ends the capture and instantiates the graph.
int tb_cuda_graph_capture_end(void* graph) {
  return guarded([&] {
#ifdef TRICKBENCH_CUDA_GRAPHS
    static_cast<TbCudaGraph*>(graph)->graph.capture_end();
#else
    no_cuda_graphs();
#endif
  });
}

// Launches the captured graph on the current stream.
int tb_cuda_graph_replay(void* graph) {
  return guarded([&] {
#ifdef TRICKBENCH_CUDA_GRAPHS
    static_cast<TbCudaGraph*>(graph)->graph.replay();
#else
    no_cuda_graphs();
#endif
  });
}

// Frees a graph from tb_cuda_graph_new (and its private memory pool).
void tb_cuda_graph_free(void* graph) { delete static_cast<TbCudaGraph*>(graph); }

// A timing event on a CUDA stream. c10's device-generic event reaches CUDA through the device guard
// libtorch_cuda registers when it loads, so building it needs no CUDA header.
struct TbDeviceEvent {
  c10::Event event{c10::DeviceType::CUDA, c10::EventFlag::BACKEND_DEFAULT};
};

// Records a new timing event on the current stream of CUDA device `device`; fails where libtorch has
// no CUDA support.
int tb_device_event_record(int device, void** out) {
  return guarded([&] {
    const c10::Device cuda(c10::DeviceType::CUDA, static_cast<c10::DeviceIndex>(device));
    const c10::impl::VirtualGuardImpl guard(c10::DeviceType::CUDA);
    auto event = std::make_unique<TbDeviceEvent>();
    event->event.record(guard.getStream(cuda));
    *out = event.release();
  });
}

// Milliseconds from event `start` to the later event `end` of the same device, once `end` has
// completed (waits for it).
int tb_device_event_elapsed_ms(void* start, void* end, double* out) {
  return guarded([&] {
    const auto* later = static_cast<TbDeviceEvent*>(end);
    later->event.synchronize();
    *out = static_cast<TbDeviceEvent*>(start)->event.elapsedTime(later->event);
  });
}

// Frees an event from tb_device_event_record.
void tb_device_event_free(void* event) { delete static_cast<TbDeviceEvent*>(event); }

// A TorchScript function compiled from source, kept alive with its compilation unit.
struct TbJitFunction {
  std::shared_ptr<torch::jit::CompilationUnit> unit;
  torch::jit::Function* function;
};

// Compiles TorchScript `source` (torch::jit::compile) and hands over its function `name`.
int tb_jit_compile(const char* source, const char* name, void** out) {
  return guarded([&] {
    auto unit = torch::jit::compile(source);
    auto* function = &unit->get_function(name);
    *out = new TbJitFunction{std::move(unit), function};
  });
}

// Calls a compiled function on `n` tensors; its single tensor result is handed over in `out`.
int tb_jit_call(void* function, const at::Tensor* const* inputs, int n, at::Tensor** out) {
  return guarded([&] {
    auto* f = static_cast<TbJitFunction*>(function);
    std::vector<c10::IValue> stack;
    stack.reserve(n);
    for (int i = 0; i < n; ++i) stack.emplace_back(*inputs[i]);
    *out = new at::Tensor((*f->function)(std::move(stack)).toTensor());
  });
}

// Frees a function from tb_jit_compile.
void tb_jit_free(void* function) { delete static_cast<TbJitFunction*>(function); }


// Starts recording the name of every operator called on this thread from outside any other
// operator (a RecordFunction callback: what the caller and autograd's engine dispatch, not the ops
// those run inside), replacing a recording already running on it.
int tb_op_log_start() {
  return guarded([&] {
    if (op_log_handle != 0) at::removeCallback(op_log_handle);
    op_log.clear();
    op_log_depth = 0;
    op_log_handle = at::addThreadLocalCallback(
        at::RecordFunctionCallback(
            [](const at::RecordFunction& fn) -> std::unique_ptr<at::ObserverContext> {
              if (op_log_depth++ == 0) op_log.emplace_back(fn.name());
              return nullptr;
            },
            [](const at::RecordFunction&, at::ObserverContext*) { --op_log_depth; })
            .scopes({at::RecordScope::FUNCTION, at::RecordScope::BACKWARD_FUNCTION}));
  });
}

// Stops the recording and hands back the names, one per line, in `*out` (malloc'ed; the caller
// frees it with free).
int tb_op_log_stop(char** out) {
  return guarded([&] {
    if (op_log_handle != 0) at::removeCallback(op_log_handle);
    op_log_handle = 0;
    std::string joined;
    for (const auto& name : op_log) {
      joined += name;
      joined += '\n';
    }
    op_log.clear();
    *out = static_cast<char*>(std::malloc(joined.size() + 1));
    if (*out == nullptr) throw std::bad_alloc();
    std::memcpy(*out, joined.c_str(), joined.size() + 1);
  });
}

// Starts libtorch's Kineto profiler on this thread (and the autograd engine's threads that work for
// it), recording operators with their input shapes, and with_cuda=1 also the CUDA runtime calls,
// kernels and device memory copies of every stream (request it only on a CUDA device). Fails when
// a profiler is already on.
int tb_trace_start(int with_cuda) {
  return guarded([&] {
    namespace profiler = torch::profiler::impl;
    if (trace_running.load() || profiler::ProfilerStateBase::get() != nullptr) {
      throw std::runtime_error("the profiler is already on in this process");
    }
    const profiler::ProfilerConfig config(
        profiler::ProfilerState::KINETO, /*report_input_shapes=*/true, /*profile_memory=*/true);
    std::set<profiler::ActivityType> activities{profiler::ActivityType::CPU};
    if (with_cuda != 0) activities.insert(profiler::ActivityType::CUDA);
    torch::autograd::profiler::prepareProfiler(config, activities);
    torch::autograd::profiler::enableProfiler(config, activities);
    trace_running.store(true);
  });
}

// Stops the profiler tb_trace_start started and, when `path` is not null, writes what it recorded
// there as Chrome-trace JSON.
int tb_trace_stop(const char* path) {
  return guarded([&] {
    if (!trace_running.exchange(false)) {
      throw std::runtime_error("the profiler is not on (tb_trace_start starts it)");
    }
    auto result = torch::autograd::profiler::disableProfiler();
    if (path != nullptr) result->save(path);
  });
}
}  // extern "C"
