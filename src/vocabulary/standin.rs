//! The calls that need a CUDA device, by name: what a rehearsal of a GPU run on the CPU
//! (`--device as-if-cuda:GPU`) stands in for, each with what takes its place and how the first
//! run on a real GPU confirms it. A process records the ones it went through
//! ([`crate::results::schema::ProcessMeasurement::stood_in`]); `docs/gpu.md`'s table is
//! [`StandIn::table`].

use serde::{Deserialize, Serialize};

/// A call that needs a CUDA device, stood in for on the CPU by a rehearsal. The PyTorch engine
/// (`scripts/engine/engine_device.py`) names its stand-ins with the same ids.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum StandIn {
    /// The GPU's kernels: cuBLAS matmuls, cuDNN convolutions, the attention and elementwise
    /// kernels.
    Kernels,
    /// Waiting for the device's queued work.
    DeviceSynchronize,
    /// CUDA events timing a step's phases.
    CudaEvents,
    /// The caching allocator's allocated and reserved bytes, their peaks and their reset.
    AllocatorStatistics,
    /// Returning the caching allocator's unused cached blocks to the device.
    EmptyCache,
    /// The GPU's compute capability, bf16 support, memory and cuDNN version.
    DeviceProperties,
    /// NVML: the energy counter, clocks, throttle reasons and compute processes.
    Nvml,
    /// Which kernel `scaled_dot_product_attention` dispatches to by default.
    SdpaChoice,
    /// Capping the caching allocator at the run's memory budget.
    AllocatorCap,
    /// The caching allocator's expandable segments turned on, and read back.
    AllocatorSettings,
    /// Capturing the step into a CUDA graph on a side stream, and replaying it.
    GraphCapture,
    /// Pinned host buffers and non-blocking host-to-device copies.
    PinnedMemory,
    /// A forced attention backend with no CPU kernel for the inputs.
    AttentionKernel,
    /// Autocast's and the gradient scaler's CUDA device type.
    AutocastDevice,
    /// `torch.compile`'s kernels for the GPU.
    CompiledKernels,
}

impl StandIn {
    /// Every stand-in, those every case goes through first.
    pub const ALL: [StandIn; 15] = [
        StandIn::Kernels,
        StandIn::DeviceSynchronize,
        StandIn::CudaEvents,
        StandIn::AllocatorStatistics,
        StandIn::EmptyCache,
        StandIn::DeviceProperties,
        StandIn::Nvml,
        StandIn::SdpaChoice,
        StandIn::AllocatorCap,
        StandIn::AllocatorSettings,
        StandIn::GraphCapture,
        StandIn::PinnedMemory,
        StandIn::AttentionKernel,
        StandIn::AutocastDevice,
        StandIn::CompiledKernels,
    ];

    /// The name in results, in the PyTorch engine's replies and on the terminal.
    pub fn id(self) -> &'static str {
        match self {
            StandIn::Kernels => "kernels",
            StandIn::DeviceSynchronize => "device-synchronize",
            StandIn::CudaEvents => "cuda-events",
            StandIn::AllocatorStatistics => "allocator-statistics",
            StandIn::EmptyCache => "empty-cache",
            StandIn::DeviceProperties => "device-properties",
            StandIn::Nvml => "nvml",
            StandIn::SdpaChoice => "sdpa-choice",
            StandIn::AllocatorSettings => "allocator-settings",
            StandIn::AllocatorCap => "allocator-cap",
            StandIn::GraphCapture => "graph-capture",
            StandIn::PinnedMemory => "pinned-memory",
            StandIn::AttentionKernel => "attention-kernel",
            StandIn::AutocastDevice => "autocast-device",
            StandIn::CompiledKernels => "compiled-kernels",
        }
    }

    /// The stand-in named `id`, if one is.
    pub fn from_id(id: &str) -> Option<StandIn> {
        StandIn::ALL.into_iter().find(|s| s.id() == id)
    }

    /// Whether every case of a rehearsal goes through it whatever its tricks (the kernels, the
    /// device's clock and allocator, its properties and NVML, the run's memory budget), so that it
    /// says nothing of what a case's tricks do.
    pub fn every_case(self) -> bool {
        matches!(
            self,
            StandIn::Kernels
                | StandIn::DeviceSynchronize
                | StandIn::CudaEvents
                | StandIn::AllocatorStatistics
                | StandIn::EmptyCache
                | StandIn::DeviceProperties
                | StandIn::Nvml
                | StandIn::SdpaChoice
                | StandIn::AllocatorCap
        )
    }

    /// The calls, as libtorch and PyTorch name them.
    pub fn calls(self) -> &'static str {
        match self {
            StandIn::Kernels => "cuBLAS, cuBLASLt, cuDNN and ATen's CUDA kernels",
            StandIn::DeviceSynchronize => "`torch.cuda.synchronize`, `c10::cuda::device_synchronize`",
            StandIn::CudaEvents => "`torch.cuda.Event`, `c10::Event` record and `elapsed_time`",
            StandIn::AllocatorStatistics => {
                "`torch.cuda.memory_allocated`/`max_memory_reserved`/`reset_peak_memory_stats`, \
                 `at::accelerator::getDeviceStats`/`resetPeakStats`"
            }
            StandIn::EmptyCache => "`torch.cuda.empty_cache`, `c10::cuda::CUDACachingAllocator::emptyCache`",
            StandIn::DeviceProperties => {
                "`torch.cuda.get_device_capability`/`is_bf16_supported`, NVML's compute capability, \
                 `at::native::getCudnnVersion`"
            }
            StandIn::Nvml => {
                "`nvmlDeviceGetTotalEnergyConsumption`, clocks, throttle reasons, running compute \
                 processes"
            }
            StandIn::SdpaChoice => "`torch._fused_sdp_choice` on CUDA tensors",
            StandIn::AllocatorSettings => {
                "`torch.cuda.memory._set_allocator_settings(\"expandable_segments:True\")`, \
                 `CUDACachingAllocator::setAllocatorSettings`, the segments' `expandable` flag"
            }
            StandIn::AllocatorCap => {
                "`torch.cuda.set_per_process_memory_fraction`, `CUDACachingAllocator::setMemoryFraction`"
            }
            StandIn::GraphCapture => {
                "`torch.cuda.CUDAGraph`/`torch.cuda.graph` on a side stream, `at::cuda::CUDAGraph` \
                 capture and replay, Adam's `capturable=True`"
            }
            StandIn::PinnedMemory => {
                "`pin_memory`, `DataLoader(pin_memory=True)`, `non_blocking=True` copies"
            }
            StandIn::AttentionKernel => {
                "FlashAttention with dropout, memory-efficient and cuDNN attention forced through \
                 `sdpa_kernel`/`setSDPUse*`"
            }
            StandIn::AutocastDevice => "`torch.autocast(\"cuda\", …)`, `torch.amp.GradScaler(\"cuda\")`",
            StandIn::CompiledKernels => "`torch.compile`'s Triton kernels for CUDA (inductor)",
        }
    }

    /// What takes the calls' place on the CPU.
    pub fn stood_in_by(self) -> &'static str {
        match self {
            StandIn::Kernels => "ATen's CPU kernels, in the same precision where the CPU has it",
            StandIn::DeviceSynchronize => "nothing: CPU operators return when done",
            StandIn::CudaEvents => "the host's clock",
            StandIn::AllocatorStatistics => {
                "a model of the caching allocator: allocated is the bytes of live CPU tensors, \
                 reserved the highest allocated since the cache was last emptied"
            }
            StandIn::EmptyCache => "the model's reserved bytes fall back to those allocated",
            StandIn::DeviceProperties => "the rehearsed GPU's description (capability, memory, cuDNN 9.19)",
            StandIn::Nvml => {
                "a counter advancing every 100 ms at an assumed 300 W; no clocks, throttling or \
                 other processes"
            }
            StandIn::SdpaChoice => "the forced backend where one is forced, else no kernel recorded",
            StandIn::AllocatorSettings => "the mode recorded and read back from the record",
            StandIn::AllocatorCap => "nothing: the budget is held by the check of the peaks after each step",
            StandIn::GraphCapture => {
                "the same warm-up, capture and replay structure run eagerly on the static tensors, \
                 Adam not capturable"
            }
            StandIn::PinnedMemory => "pageable buffers and plain copies",
            StandIn::AttentionKernel => "SDPA's math backend",
            StandIn::AutocastDevice => "the CPU's autocast and gradient scaler in the same dtype",
            StandIn::CompiledKernels => "inductor's C++ kernels for the CPU",
        }
    }

    /// How the first run on a real GPU confirms what the stand-in could not.
    pub fn first_light(self) -> &'static str {
        match self {
            StandIn::Kernels => "every throughput cell is `ok` on both engines with a finite last loss",
            StandIn::DeviceSynchronize => {
                "each training cell's windows and its breakdown's CUDA-event phases agree on its step's time"
            }
            StandIn::CudaEvents => {
                "each training cell's breakdown says `cuda-events` and its phases sum to its step"
            }
            StandIn::AllocatorStatistics => {
                "`cells.tsv` gives every baseline's peak allocated and reserved bytes, the reserved \
                 at least the allocated"
            }
            StandIn::EmptyCache => {
                "every arm of a multi-arm process has a reserved peak of its own, not about 0 \
                 (`cells.tsv`)"
            }
            StandIn::DeviceProperties => "`trickbench env` names the GPU, its capability and cuDNN version",
            StandIn::Nvml => "every baseline's energy is `recorded` over at least 1 s",
            StandIn::SdpaChoice => "each GPT cell's attention backend in `cells.tsv`",
            StandIn::AllocatorSettings => "`expandable-segments` cells inspect the mode they set",
            StandIn::AllocatorCap => "phase 7's probes run out of memory at the budget, not beyond it",
            StandIn::GraphCapture => "`cuda-graphs` cells are `ok` on both engines",
            StandIn::PinnedMemory => "`pin-memory` cells are `ok` on both engines",
            StandIn::AttentionKernel => {
                "the forced-backend GPT cells are `ok` and record the backend they forced, or are \
                 not applicable naming the missing kernel"
            }
            StandIn::AutocastDevice => "`amp` and `amp-bf16` cells are `ok` with a finite loss",
            StandIn::CompiledKernels => {
                "phase 3's `torch-compile` cells are `ok`, with their compile seconds"
            }
        }
    }

    /// The Markdown table of every stand-in: the calls, what stands in for them on the CPU, and how
    /// first light confirms them (the table in `docs/gpu.md`).
    pub fn table() -> String {
        let mut table = String::from(
            "| stand-in | the calls | on the CPU | every case | first light confirms |\n|---|---|---|---|---|\n",
        );
        for s in StandIn::ALL {
            let every = if s.every_case() { "yes" } else { "" };
            table += &format!(
                "| `{}` | {} | {} | {every} | {} |\n",
                s.id(),
                s.calls(),
                s.stood_in_by(),
                s.first_light()
            );
        }
        table
    }
}

impl std::fmt::Display for StandIn {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.id())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_stand_in_has_a_distinct_id_that_reads_back_and_serialises_as_itself() {
        for s in StandIn::ALL {
            assert_eq!(StandIn::from_id(s.id()), Some(s));
            assert_eq!(serde_json::to_string(&s).unwrap(), format!("\"{}\"", s.id()));
        }
        let mut ids: Vec<&str> = StandIn::ALL.iter().map(|s| s.id()).collect();
        ids.sort_unstable();
        ids.dedup();
        assert_eq!(ids.len(), StandIn::ALL.len());
    }

    #[test]
    fn the_table_in_the_gpu_docs_is_the_boundarys() {
        let docs = include_str!("../../docs/gpu.md");
        let table = StandIn::table();
        assert!(docs.contains(&table), "docs/gpu.md must hold StandIn::table() as it is now:\n{table}");
    }

    #[test]
    fn those_every_case_goes_through_come_first() {
        let first_specific = StandIn::ALL.iter().position(|s| !s.every_case()).unwrap();
        assert!(StandIn::ALL[first_specific..].iter().all(|s| !s.every_case()));
    }
}
