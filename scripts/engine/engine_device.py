"""The PyTorch engine's device: the one boundary through which every call of the engine that
needs a CUDA device goes. It has three forms, chosen by the case (`make_device`):

    CudaDevice     a real CUDA device: the calls are torch.cuda's
    CpuDevice      a plain CPU: no CUDA semantics (no CUDA trick applies, nothing to synchronise,
                   no caching allocator)
    AsIfCudaDevice the as-if-CUDA rehearsal: the engine behaves as on a CUDA device of the
                   described capability and memory (every CUDA trick applies where it would on
                   that GPU) while tensors live on the CPU, and each call that needs a real
                   CUDA device is stood in for by what the CPU has

On the stand-in each stood-in call records its name (STAND_INS, ids of trickbench's StandIn in
src/vocabulary/standin.rs): for the side being built or stepped while inside `for_side`, else for the process.
`stood_in(side)` is that side's names and the process's. The real device and the plain CPU
record nothing.

    device-synchronize    torch.cuda.synchronize: nothing (CPU operators return when done)
    cuda-events           CUDA events timing a breakdown's phases: the host's clock
    allocator-statistics  the caching allocator's allocated and reserved bytes and their peaks:
                          a model of it, allocated being the bytes of live CPU tensors (as the
                          engine counts them on a CPU) and reserved the highest allocated seen
                          since the cache was last emptied (never below allocated), as a caching
                          allocator that keeps every block it handed out
    empty-cache           torch.cuda.empty_cache: the model's reserved bytes fall to the live bytes
    device-properties     capability, bf16 support, total memory: the description's
    allocator-settings    expandable segments turned on, and read back: the setting recorded, read
                          back from the record
    allocator-cap         torch.cuda.set_per_process_memory_fraction: nothing (the budget is then
                          held only by trickbench's check of the peaks)
    graph-capture         the CUDA graph's side stream, capture and replay: the same structure run
                          eagerly (the warm-up steps, a "capture" that is one ordinary step on the
                          static inputs, each "replay" the step run again on them), and
                          optimizers not capturable (torch refuses capturable=True on CPU tensors)
    pinned-memory         DataLoader(pin_memory=True) and non-blocking copies: pageable memory and
                          plain copies
    attention-kernel      a forced SDPA backend without a CPU kernel for the inputs (memory-
                          efficient and cuDNN attention always; FlashAttention where a training
                          step applies dropout): SDPA's math backend alone computes in its place
    autocast-device       autocast's and the gradient scaler's device type "cuda" (also in the fp8
                          linears' autocast query): "cpu", in the same dtype
    compiled-kernels      torch.compile's kernels for the GPU: inductor's C++ for the CPU

fp8's torch._scaled_mm and the cuDNN/TF32 flags need no stand-in: the CPU has them.
"""

import contextlib
import dataclasses
import time

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend

import engine_tricks  # beside this module

STAND_INS = (
    "device-synchronize",
    "cuda-events",
    "allocator-statistics",
    "empty-cache",
    "device-properties",
    "allocator-settings",
    "allocator-cap",
    "graph-capture",
    "pinned-memory",
    "attention-kernel",
    "autocast-device",
    "compiled-kernels",
)
# Forced SDPA backends the CPU has no kernel for, whatever the inputs.
NO_CPU_KERNEL = (SDPBackend.EFFICIENT_ATTENTION, SDPBackend.CUDNN_ATTENTION)


@dataclasses.dataclass(frozen=True)
class AsIfCuda:
    """The GPU an as-if-CUDA rehearsal behaves as: its name (for messages), compute capability
    and memory."""

    gpu: str
    capability: tuple
    memory_bytes: int


def make_device(device, as_if_cuda, live_bytes):
    """The boundary for the case's `device` (a torch.device) and its `as_if_cuda` description
    (None, or AsIfCuda with device cpu); `live_bytes()` counts the bytes of the live CPU tensors,
    the memory of a CPU and of the stand-in's allocator."""
    if as_if_cuda is not None:
        return AsIfCudaDevice(as_if_cuda, live_bytes)
    if device.type == "cuda":
        return CudaDevice(device)
    return CpuDevice(live_bytes)


def cuda_device_count():
    """The CUDA devices this PyTorch sees (0 without CUDA)."""
    return torch.cuda.device_count() if torch.cuda.is_available() else 0


class HostClock:
    """A breakdown's stamps on the host's clock (time.perf_counter)."""

    name = "host"

    def stamp(self):
        """Now."""
        return time.perf_counter()

    def elapsed_ms(self, start, end):
        """Milliseconds from stamp `start` to stamp `end`."""
        return (end - start) * 1000.0


class EventClock:
    """A breakdown's stamps as CUDA events recorded on the current stream."""

    name = "cuda-events"

    def stamp(self):
        """An event recorded now on the current stream."""
        event = torch.cuda.Event(enable_timing=True)
        event.record()
        return event

    def elapsed_ms(self, start, end):
        """Milliseconds from event `start` to event `end` (both done)."""
        return start.elapsed_time(end)


class Device:
    """What the three forms share. Each form answers:

        cuda                    whether CUDA semantics hold (real or as-if): the CUDA tricks'
                                condition
        tensors                 the torch.device the engine's tensors live on
        capability(), bf16_supported(), total_memory()   the device's properties (CUDA forms)
        synchronize()           waits for the device's queued work
        phase_clock()           the clock of a breakdown's stamps (HostClock or EventClock)
        warm_libraries()        the libraries' handles made before the ready line
        set_expandable_segments(on), segments_expandable()   the caching allocator's mode
        cap_memory(bytes)       the caching allocator capped at a budget
        empty_cache(), held(), peaks(), allocator_peaks(run, follow)   the caching allocator's
                                cache and (allocated, reserved) bytes: now, peaks since start,
                                peaks over some work
        autocast_device()       autocast's and GradScaler's device type
        pinned_memory(asked)    whether the loader pins memory and copies without blocking
        optimizer_capturable()  whether an optimizer may be built capturable=True
        graph(prepare, body)    a training step captured as a CUDA graph (CUDA forms)
        sdpa_backends(forced, dropout)   the SDPA backends enabled where one is forced
        profiler_activities()   what torch.profiler records
        compile(module)         torch.compile(module)

    and records the stand-ins it goes through (only the stand-in records any): for the side
    inside `for_side`, else for the process."""

    cuda = False

    def __init__(self, tensors):
        self.tensors = tensors
        self.process = set()
        self.sides = {}
        self.current = self.process

    def record(self, name):
        """Records stand-in `name` for the side inside `for_side`, else for the process."""
        assert name in STAND_INS, name
        self.current.add(name)

    @contextlib.contextmanager
    def for_side(self, name):
        """Records the stand-ins gone through while inside for side `name`."""
        saved, self.current = self.current, self.sides.setdefault(name, set())
        try:
            yield
        finally:
            self.current = saved

    def stood_in(self, name):
        """The stand-ins side `name` went through and those of the process, sorted."""
        return sorted(self.sides.get(name, set()) | self.process)

    def warm_libraries(self):
        """One small fp32 matmul, one bf16 matmul and one convolution, then a synchronisation: so
        that the libraries' handles and workspaces (cuBLAS's, cuBLASLt's, cuDNN's: about 32 MiB
        each per stream on Hopper) exist before trickbench first asks what the process holds,
        instead of being paid for by the first side built."""
        a = torch.ones(64, 64, device=self.tensors)
        a @ a
        a.bfloat16() @ a.bfloat16()
        F.conv2d(torch.ones(1, 3, 8, 8, device=self.tensors), torch.ones(4, 3, 3, 3, device=self.tensors))
        self.synchronize()

    def cap_memory(self, budget_bytes):
        """Caps the caching allocator at `budget_bytes` (as a fraction of the device's memory, at
        most all of it), before anything is allocated."""
        self.set_memory_fraction(min(1.0, budget_bytes / self.total_memory()))

    def sdpa_backends(self, forced, dropout):
        """The SDPA backends enabled around a side's steps where `forced` is forced (`dropout`:
        whether its training steps apply attention dropout): `forced` alone."""
        return [forced]

    def profiler_activities(self):
        """What torch.profiler records in a profile or a trace: the CPU's operators."""
        return [torch.profiler.ProfilerActivity.CPU]

    def compile(self, module):
        """torch.compile(module) in its default mode (inductor builds for the device of its
        tensors)."""
        return torch.compile(module)


class CpuDevice(Device):
    """A plain CPU: no CUDA semantics, nothing to synchronise or warm up, no caching allocator
    (the memory held is the live CPU tensors' bytes, `live_bytes()`)."""

    def __init__(self, live_bytes):
        super().__init__(torch.device("cpu"))
        self.live_bytes = live_bytes

    def synchronize(self):
        """Nothing: CPU operators return when done."""

    def phase_clock(self):
        """The host's clock."""
        return HostClock()

    def warm_libraries(self):
        """Nothing: the CPU's kernels need no handles made ahead."""

    def set_expandable_segments(self, expandable):
        """Nothing: there is no caching allocator."""

    def segments_expandable(self):
        """None: there is no caching allocator."""
        return None

    def cap_memory(self, budget_bytes):
        """Nothing: there is no caching allocator."""

    def empty_cache(self):
        """Nothing: there is no cache."""

    def held(self):
        """The live CPU tensors' bytes, and no reserved."""
        return self.live_bytes(), None

    def peaks(self):
        """None: a CPU keeps no peaks."""
        return None, None

    def allocator_peaks(self, run, follow):
        """`follow()`: the work run with its CPU tensors followed, returning their peak bytes;
        no reserved."""
        return follow(), None

    def autocast_device(self):
        """The CPU's."""
        return "cpu"

    def pinned_memory(self, asked):
        """No: there is no GPU to copy to."""
        return False

    def optimizer_capturable(self):
        """No: there is no graph to capture."""
        return False


class CudaDevice(Device):
    """A real CUDA device: every call is torch.cuda's on it; nothing is recorded."""

    cuda = True

    def capability(self):
        """The compute capability, (major, minor)."""
        return torch.cuda.get_device_capability(self.tensors)

    def bf16_supported(self):
        """Whether the GPU supports bfloat16."""
        return torch.cuda.is_bf16_supported()

    def total_memory(self):
        """The GPU's memory, bytes."""
        return torch.cuda.get_device_properties(self.tensors).total_memory

    def synchronize(self):
        """Waits for the device's queued work."""
        torch.cuda.synchronize(self.tensors)

    def phase_clock(self):
        """CUDA events on the current stream."""
        return EventClock()

    def set_expandable_segments(self, expandable):
        """The caching allocator's expandable segments on or off (engine_tricks.py), before the
        first CUDA allocation."""
        engine_tricks.set_expandable_segments(expandable)

    def segments_expandable(self):
        """Whether the caching allocator's segments on the device are expandable (None before
        any)."""
        index = self.tensors.index if self.tensors.index is not None else torch.cuda.current_device()
        segments = [s for s in torch.cuda.memory_snapshot() if s.get("device") == index]
        return None if not segments else all(s.get("is_expandable", False) for s in segments)

    def set_memory_fraction(self, fraction):
        """The caching allocator capped at `fraction` of the device's memory."""
        torch.cuda.set_per_process_memory_fraction(fraction, self.tensors)

    def empty_cache(self):
        """The cached blocks no tensor uses returned to the device."""
        torch.cuda.empty_cache()

    def held(self):
        """The caching allocator's allocated and reserved bytes now."""
        return torch.cuda.memory_allocated(self.tensors), torch.cuda.memory_reserved(self.tensors)

    def peaks(self):
        """The caching allocator's peaks since start (or since the last reset)."""
        return torch.cuda.max_memory_allocated(self.tensors), torch.cuda.max_memory_reserved(self.tensors)

    def allocator_peaks(self, run, follow):
        """The caching allocator's peaks over `run()`, reset right before it."""
        torch.cuda.reset_peak_memory_stats(self.tensors)
        run()
        return self.peaks()

    def profiler_activities(self):
        """The CPU's operators and the GPU's kernels."""
        return [torch.profiler.ProfilerActivity.CPU, torch.profiler.ProfilerActivity.CUDA]

    def autocast_device(self):
        """CUDA's."""
        return "cuda"

    def pinned_memory(self, asked):
        """As the side asks."""
        return asked

    def optimizer_capturable(self):
        """Yes: the optimizer keeps its step count on the device, as a captured graph needs."""
        return True

    def graph(self, prepare, body):
        """The step as a torch.cuda.CUDAGraph."""
        return CudaGraphStep(self.tensors, prepare, body)


class CudaGraphStep:
    """A training step captured in a torch.cuda.CUDAGraph, PyTorch's whole-network recipe: a few
    steps on a side stream, then `prepare()` (the gradients set to None, so that backward
    allocates them in the graph's pool) and `body()` (forward, backward and the update, returning
    the step's outputs) captured, and replayed from then on. Its user calls prepare() before
    capture(), apart, so that what the capture allocates can be measured alone."""

    def __init__(self, device, prepare, body):
        self.device, self.prepare, self.body = device, prepare, body
        self.graph = self.outputs = None

    def warm_up(self, steps):
        """`steps` steps on a side stream, so that lazily made state (momentum buffers) exists
        before the capture."""
        current = torch.cuda.current_stream(self.device)
        stream = torch.cuda.Stream(self.device)
        stream.wait_stream(current)
        with torch.cuda.stream(stream):
            for _ in range(steps):
                self.prepare()
                self.body()
        current.wait_stream(stream)

    def capture(self):
        """The step captured (after `prepare()`); its outputs are the graph's static outputs from
        then on."""
        self.graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(self.graph):
            self.outputs = self.body()

    def replay(self):
        """The captured step run again; returns its static outputs."""
        self.graph.replay()
        return self.outputs


class AsIfCudaDevice(Device):
    """The as-if-CUDA stand-in: CUDA semantics from the description, tensors on the CPU, each call
    that needs a real CUDA device stood in for as the module's docstring says, and recorded."""

    cuda = True

    def __init__(self, description, live_bytes):
        super().__init__(torch.device("cpu"))
        self.description, self.live_bytes = description, live_bytes
        self.high_water = 0  # the modelled allocator's reserved bytes
        self.expandable = None  # the allocator's mode as recorded

    def capability(self):
        """The description's."""
        self.record("device-properties")
        return self.description.capability

    def bf16_supported(self):
        """From capability 8.0."""
        self.record("device-properties")
        return self.description.capability >= (8, 0)

    def total_memory(self):
        """The description's."""
        self.record("device-properties")
        return self.description.memory_bytes

    def synchronize(self):
        """Nothing: CPU operators return when done."""
        self.record("device-synchronize")

    def phase_clock(self):
        """The host's clock, as on a CPU."""
        self.record("cuda-events")
        return HostClock()

    def set_expandable_segments(self, expandable):
        """The mode recorded; turning the segments on is the stand-in (off is the allocator's
        default, which every case sets explicitly)."""
        if expandable:
            self.record("allocator-settings")
        self.expandable = expandable

    def segments_expandable(self):
        """The mode as recorded (reading it back stands in for nothing more than setting it did)."""
        return self.expandable

    def set_memory_fraction(self, fraction):
        """Nothing: the budget is held by trickbench's check of the peaks."""
        self.record("allocator-cap")

    def reserved(self, allocated):
        """The modelled reserved bytes once allocated has reached `allocated`: the high-water
        mark, raised to `allocated` where that is higher."""
        self.high_water = max(self.high_water, allocated)
        return self.high_water

    def empty_cache(self):
        """The modelled reserved bytes fall to the live bytes."""
        self.record("empty-cache")
        self.high_water = self.live_bytes()

    def held(self):
        """The live CPU tensors' bytes, and the modelled reserved bytes."""
        self.record("allocator-statistics")
        allocated = self.live_bytes()
        return allocated, self.reserved(allocated)

    def peaks(self):
        """None, as on a CPU."""
        self.record("allocator-statistics")
        return None, None

    def allocator_peaks(self, run, follow):
        """Allocated as on a CPU, `follow()` (the work run with its CPU tensors followed,
        returning their peak bytes, or None where they could not be followed), and the modelled
        reserved bytes with that peak counted in."""
        self.record("allocator-statistics")
        allocated = follow()
        return allocated, None if allocated is None else self.reserved(allocated)

    def autocast_device(self):
        """The CPU's, in the same dtype."""
        self.record("autocast-device")
        return "cpu"

    def pinned_memory(self, asked):
        """No: pageable memory and plain copies."""
        if asked:
            self.record("pinned-memory")
        return False

    def optimizer_capturable(self):
        """No: torch refuses capturable=True on CPU tensors."""
        self.record("graph-capture")
        return False

    def graph(self, prepare, body):
        """The step's capture and replays run eagerly."""
        self.record("graph-capture")
        return EagerGraphStep(prepare, body)

    def sdpa_backends(self, forced, dropout):
        """`forced` where the CPU has a kernel for it; SDPA's math backend alone in place of one
        it has none for (memory-efficient and cuDNN attention; FlashAttention with dropout)."""
        if forced in NO_CPU_KERNEL or (forced == SDPBackend.FLASH_ATTENTION and dropout):
            self.record("attention-kernel")
            return [SDPBackend.MATH]
        return [forced]

    def compile(self, module):
        """torch.compile(module): inductor builds C++ for the CPU, where the tensors are."""
        self.record("compiled-kernels")
        return torch.compile(module)


class EagerGraphStep:
    """CudaGraphStep's structure run eagerly, for the stand-in: the same warm-up steps, a
    "capture" that is one ordinary step (`body()` after the user's `prepare()`), and each
    "replay" the step (`prepare()`, then `body()`) run again on the same static inputs."""

    def __init__(self, prepare, body):
        self.prepare, self.body = prepare, body

    def warm_up(self, steps):
        """`steps` ordinary steps."""
        for _ in range(steps):
            self.prepare()
            self.body()

    def capture(self):
        """One ordinary step."""
        self.body()

    def replay(self):
        """The step run again; returns its outputs."""
        self.prepare()
        return self.body()
