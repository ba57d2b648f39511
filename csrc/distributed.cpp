// PyTorch's distributed engine (c10d) behind a tiny C ABI: TCPStore rendezvous, a process group
// (ProcessGroupGloo on CPU, ProcessGroupNCCL on CUDA), collectives with bounded waits, and the
// gradient synchroniser of data-parallel training (bucketed all-reduce launched from autograd hooks
// while backward is still running).
//
// The engine is compiled when gloo's headers were found at build time (TRICKBENCH_DDP; without
// them every call fails saying so), the NCCL path when NCCL's and CUDA's headers were too
// (TRICKBENCH_NCCL). Errors follow guarded.h: 0 on success, -1 on failure with the message kept
// for shim.cpp's tb_last_error.
#include <ATen/ATen.h>

#include <stdexcept>
#include <string>

#include "guarded.h"

namespace {
using tb::guarded;
}  // namespace

extern "C" {
// 1 when this binary was built with gloo's headers, so with data-parallel training, else 0.
int tb_dist_compiled() {
#ifdef TRICKBENCH_DDP
  return 1;
#else
  return 0;
#endif
}

// 1 when this binary can run the NCCL backend (compiled with NCCL's and CUDA's headers), else 0.
int tb_dist_nccl_compiled() {
#ifdef TRICKBENCH_NCCL
  return 1;
#else
  return 0;
#endif
}
}  // extern "C"

#ifdef TRICKBENCH_DDP
#include <torch/csrc/autograd/function.h>
#include <torch/csrc/autograd/function_hook.h>
#include <torch/csrc/autograd/variable.h>
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>

#ifdef TRICKBENCH_NCCL
#include <c10/cuda/CUDAFunctions.h>
#include <torch/csrc/distributed/c10d/ProcessGroupNCCL.hpp>
#endif

#include <chrono>
#include <memory>
#include <mutex>
#include <sstream>
#include <vector>

namespace {

// A process group: the store it met its peers through and the collective backend.
struct TbProcessGroup {
  c10::intrusive_ptr<c10d::Store> store;
  c10::intrusive_ptr<c10d::Backend> backend;
  int rank;
  int world_size;
  std::chrono::milliseconds timeout;
};

// Waits for `work` at most the group's timeout; gloo and NCCL both throw on failure or timeout.
void wait_bounded(const TbProcessGroup& pg, const c10::intrusive_ptr<c10d::Work>& work, const char* what) {
  try {
    work->wait(pg.timeout);
  } catch (const std::exception& e) {
    std::ostringstream message;
    message << what << " failed on rank " << pg.rank << " of " << pg.world_size << " (within the "
            << pg.timeout.count() / 1000.0 << " s timeout): " << e.what();
    throw std::runtime_error(message.str());
  }
}

// The gloo transport device: the interface named by GLOO_SOCKET_IFNAME when set (as PyTorch reads
// it), loopback when the rendezvous host is this machine, else the address of this host's name.
std::shared_ptr<::gloo::transport::Device> gloo_device(const std::string& host) {
  if (const char* interface = std::getenv("GLOO_SOCKET_IFNAME"); interface != nullptr && *interface != '\0') {
    return c10d::ProcessGroupGloo::createDeviceForInterface(interface);
  }
  if (host == "localhost" || host.rfind("127.", 0) == 0) {
    return c10d::ProcessGroupGloo::createDeviceForHostname("127.0.0.1");
  }
  return c10d::ProcessGroupGloo::createDefaultDevice();
}

// Gradient synchronisation for one model replica. Parameters are grouped into buckets (in reverse
// registration order, since backward produces the last layers' gradients first). A post-hook on
// each parameter's gradient accumulator copies the accumulated gradient, divided by the world size,
// into its bucket's flat buffer; when a bucket is complete, it and every complete bucket before it
// are all-reduced asynchronously, in bucket order on every rank, so that collectives match.
// `finish` waits for every bucket and copies the averages back into the gradients.
struct TbGradSync {
  struct Bucket {
    std::vector<size_t> members;
    std::vector<int64_t> offsets;
    at::Tensor flat;
    size_t pending = 0;
    c10::intrusive_ptr<c10d::Work> work;
  };

  TbProcessGroup* pg;
  std::vector<at::Tensor> params;
  std::vector<Bucket> buckets;
  std::vector<size_t> bucket_of;
  std::vector<bool> ready;
  size_t next_launch = 0;
  bool enabled = true;
  std::mutex mutex;
  std::vector<std::shared_ptr<torch::autograd::Node>> accumulators;
  std::vector<uintptr_t> hook_keys;

  void reset() {
    std::fill(ready.begin(), ready.end(), false);
    for (auto& bucket : buckets) {
      bucket.pending = bucket.members.size();
      bucket.work.reset();
    }
    next_launch = 0;
  }

  void mark_ready(size_t index) {
    std::lock_guard<std::mutex> lock(mutex);
    if (!enabled) return;
    if (ready[index]) {
      throw std::runtime_error("gradient synchronisation: parameter " + std::to_string(index) +
                               " received its gradient twice in one backward pass");
    }
    ready[index] = true;
    auto& bucket = buckets[bucket_of[index]];
    const auto& grad = params[index].grad();
    size_t slot = 0;
    while (bucket.members[slot] != index) ++slot;
    bucket.flat.narrow(0, bucket.offsets[slot], grad.numel()).view(grad.sizes()).copy_(grad);
    bucket.pending -= 1;
    while (next_launch < buckets.size() && buckets[next_launch].pending == 0) {
      auto& next = buckets[next_launch];
      next.flat.div_(pg->world_size);
      std::vector<at::Tensor> tensors{next.flat};
      next.work = pg->backend->allreduce(tensors);
      next_launch += 1;
    }
  }

  void finish() {
    std::lock_guard<std::mutex> lock(mutex);
    struct ResetOnExit {
      TbGradSync* sync;
      ~ResetOnExit() { sync->reset(); }
    } reset_on_exit{this};
    if (!enabled) return;
    for (size_t i = 0; i < params.size(); ++i) {
      if (!ready[i]) {
        throw std::runtime_error("gradient synchronisation: parameter " + std::to_string(i) +
                                 " received no gradient in this backward pass (every parameter must "
                                 "take part in the loss on every rank)");
      }
    }
    for (auto& bucket : buckets) wait_bounded(*pg, bucket.work, "gradient all-reduce");
    for (auto& bucket : buckets) {
      for (size_t slot = 0; slot < bucket.members.size(); ++slot) {
        auto grad = params[bucket.members[slot]].mutable_grad();
        grad.copy_(bucket.flat.narrow(0, bucket.offsets[slot], grad.numel()).view(grad.sizes()));
      }
    }
  }
};

// Calls TbGradSync::mark_ready for one parameter after its gradient accumulator ran.
struct ReadyHook : torch::autograd::FunctionPostHook {
  TbGradSync* sync;
  size_t index;
  ReadyHook(TbGradSync* sync, size_t index) : sync(sync), index(index) {}
  torch::autograd::variable_list operator()(const torch::autograd::variable_list& outputs,
                                            const torch::autograd::variable_list& /*inputs*/) override {
    sync->mark_ready(index);
    return outputs;
  }
};
}  // namespace

extern "C" {

// Meets the other ranks at host:port (rank 0 hosts the TCPStore and waits for all `world_size`
// ranks) and creates the collective backend: gloo when `device_index` is -1 (CPU), NCCL on CUDA
// device `device_index`. Every wait, here and in later collectives, is bounded by `timeout_ms`.
int tb_process_group_new(const char* host, int port, int rank, int world_size, int device_index, int timeout_ms,
                         void** out) {
  return guarded([&] {
    const std::chrono::milliseconds timeout(timeout_ms);
    c10d::TCPStoreOptions options;
    options.port = static_cast<std::uint16_t>(port);
    options.isServer = rank == 0;
    options.numWorkers = static_cast<std::size_t>(world_size);
    options.waitWorkers = true;
    options.timeout = timeout;
    auto pg = std::make_unique<TbProcessGroup>();
    pg->rank = rank;
    pg->world_size = world_size;
    pg->timeout = timeout;
    try {
      pg->store = c10::make_intrusive<c10d::TCPStore>(host, options);
    } catch (const std::exception& e) {
      std::ostringstream message;
      message << "rendezvous at " << host << ":" << port << " as rank " << rank << " of " << world_size
              << " did not complete within " << timeout_ms / 1000.0 << " s: " << e.what();
      throw std::runtime_error(message.str());
    }
    if (device_index < 0) {
      auto gloo = c10d::ProcessGroupGloo::Options::create(timeout);
      gloo->devices.push_back(gloo_device(host));
      pg->backend = c10::make_intrusive<c10d::ProcessGroupGloo>(pg->store, rank, world_size, gloo);
    } else {
#ifdef TRICKBENCH_NCCL
      // NCCL's communicator and its streams belong to the current device: make it this rank's.
      c10::cuda::set_device(static_cast<c10::DeviceIndex>(device_index));
      auto nccl = c10d::ProcessGroupNCCL::Options::create();
      nccl->timeout = timeout;
      pg->backend = c10::make_intrusive<c10d::ProcessGroupNCCL>(pg->store, rank, world_size, nccl);
#else
      throw std::runtime_error(
          "this binary was built without NCCL's headers, so it cannot all-reduce on CUDA devices");
#endif
    }
    *out = pg.release();
  });
}

// Frees a process group from tb_process_group_new.
void tb_process_group_free(void* pg) { delete static_cast<TbProcessGroup*>(pg); }

// Broadcasts each of the `n` tensors from rank `root` to every rank, in place.
int tb_process_group_broadcast(void* handle, at::Tensor** tensors, int n, int root) {
  return guarded([&] {
    auto* pg = static_cast<TbProcessGroup*>(handle);
    c10d::BroadcastOptions options;
    options.rootRank = root;
    std::vector<c10::intrusive_ptr<c10d::Work>> works;
    for (int i = 0; i < n; ++i) {
      std::vector<at::Tensor> one{*tensors[i]};
      works.push_back(pg->backend->broadcast(one, options));
    }
    for (auto& work : works) wait_bounded(*pg, work, "broadcast");
  });
}

// Sums each of the `n` tensors over all ranks, in place.
int tb_process_group_all_reduce_sum(void* handle, at::Tensor** tensors, int n) {
  return guarded([&] {
    auto* pg = static_cast<TbProcessGroup*>(handle);
    std::vector<c10::intrusive_ptr<c10d::Work>> works;
    for (int i = 0; i < n; ++i) {
      std::vector<at::Tensor> one{*tensors[i]};
      works.push_back(pg->backend->allreduce(one));
    }
    for (auto& work : works) wait_bounded(*pg, work, "all-reduce");
  });
}

// A gradient synchroniser for the `n` parameters (leaf tensors requiring grad, all on this rank's
// device) over process group `pg`, with buckets of at most `bucket_bytes` (a parameter larger than
// that gets a bucket of its own). `pg` must outlive it.
int tb_grad_sync_new(void* pg, at::Tensor** params, int n, int64_t bucket_bytes, void** out) {
  return guarded([&] {
    auto sync = std::make_unique<TbGradSync>();
    sync->pg = static_cast<TbProcessGroup*>(pg);
    for (int i = 0; i < n; ++i) {
      if (!params[i]->requires_grad() || !params[i]->is_leaf()) {
        throw std::runtime_error("gradient synchronisation: parameter " + std::to_string(i) +
                                 " is not a leaf tensor that requires grad");
      }
      sync->params.push_back(*params[i]);
    }
    sync->bucket_of.assign(n, 0);
    sync->ready.assign(n, false);
    int64_t filled = 0;
    for (int i = n - 1; i >= 0; --i) {
      const auto& p = sync->params[i];
      const int64_t bytes = p.numel() * static_cast<int64_t>(p.element_size());
      const bool fresh = sync->buckets.empty() || filled + bytes > bucket_bytes ||
                         sync->params[sync->buckets.back().members.front()].scalar_type() != p.scalar_type();
      if (fresh) {
        sync->buckets.emplace_back();
        filled = 0;
      }
      auto& bucket = sync->buckets.back();
      const int64_t offset = bucket.offsets.empty()
                                 ? 0
                                 : bucket.offsets.back() + sync->params[bucket.members.back()].numel();
      bucket.members.push_back(static_cast<size_t>(i));
      bucket.offsets.push_back(offset);
      sync->bucket_of[i] = sync->buckets.size() - 1;
      filled += bytes;
    }
    for (auto& bucket : sync->buckets) {
      const auto& last = sync->params[bucket.members.back()];
      bucket.flat = at::empty({bucket.offsets.back() + last.numel()}, last.options().requires_grad(false));
      bucket.pending = bucket.members.size();
    }
    for (int i = 0; i < n; ++i) {
      auto accumulator = torch::autograd::impl::grad_accumulator(sync->params[i]);
      sync->hook_keys.push_back(accumulator->add_post_hook(std::make_unique<ReadyHook>(sync.get(), i)));
      sync->accumulators.push_back(std::move(accumulator));
    }
    *out = sync.release();
  });
}

// The number of buckets of a synchroniser.
int tb_grad_sync_buckets(void* sync) { return static_cast<int>(static_cast<TbGradSync*>(sync)->buckets.size()); }

// Turns synchronisation on or off for the following backward passes (off: gradients accumulate
// locally, as under DDP's no_sync, until a backward with it on).
void tb_grad_sync_set_enabled(void* sync, int enabled) {
  auto* s = static_cast<TbGradSync*>(sync);
  std::lock_guard<std::mutex> lock(s->mutex);
  s->enabled = enabled != 0;
}

// Waits for every bucket of the last backward pass and writes the averaged gradients back.
int tb_grad_sync_finish(void* sync) {
  return guarded([&] { static_cast<TbGradSync*>(sync)->finish(); });
}

// Removes the hooks and frees a synchroniser from tb_grad_sync_new.
void tb_grad_sync_free(void* handle) {
  auto* sync = static_cast<TbGradSync*>(handle);
  for (size_t i = 0; i < sync->accumulators.size(); ++i) {
    sync->accumulators[i]->del_post_hook(sync->hook_keys[i]);
  }
  delete sync;
}

}  // extern "C"
#else
namespace {
[[noreturn]] void no_ddp() {
  throw std::runtime_error(
      "this binary was built without gloo's headers, so without data-parallel training "
      "(run scripts/setup-libtorch, which fetches Debian's libgloo-dev headers, then rebuild)");
}
}  // namespace

extern "C" {
int tb_process_group_new(const char*, int, int, int, int, int, void**) { return guarded(no_ddp); }
void tb_process_group_free(void*) {}
int tb_process_group_broadcast(void*, void**, int, int) { return guarded(no_ddp); }
int tb_process_group_all_reduce_sum(void*, void**, int) { return guarded(no_ddp); }
int tb_grad_sync_new(void*, void**, int, int64_t, void**) { return guarded(no_ddp); }
int tb_grad_sync_buckets(void*) { return 0; }
void tb_grad_sync_set_enabled(void*, int) {}
int tb_grad_sync_finish(void*) { return guarded(no_ddp); }
void tb_grad_sync_free(void*) {}
}  // extern "C"
#endif
