//! The system record: what machine and software stack produced a set of numbers
//! (`measure::system` collects it).

use serde::{Deserialize, Serialize};

use crate::device::DeviceSpec;
use crate::engine::PytorchInfo;

/// The machine and software a run measured on.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SystemInfo {
    /// Host name.
    pub hostname: Option<String>,
    /// Operating system and version.
    pub os: Option<String>,
    /// Kernel version.
    pub kernel: Option<String>,
    /// CPU model name.
    pub cpu_model: Option<String>,
    /// Logical CPUs.
    pub cpu_logical_cores: usize,
    /// Physical CPU cores, where known.
    pub cpu_physical_cores: Option<usize>,
    /// Installed memory, bytes.
    pub memory_total_bytes: u64,
    /// Threads libtorch uses for intra-op parallelism.
    pub torch_threads: i32,
    /// libtorch version the binary was built against.
    pub libtorch_version: String,
    /// CUDA runtime version (e.g. 13000), when CUDA is usable.
    pub cuda_runtime_version: Option<i64>,
    /// cuDNN version (e.g. 91900), when cuDNN is usable.
    pub cudnn_version: Option<i64>,
    /// CUDA devices libtorch sees.
    pub cuda_device_count: usize,
    /// The device the run measured.
    pub device: DeviceSpec,
    /// The GPU measured, from NVML (`None` on CPU runs or without NVML; see `gpu_unavailable`).
    pub gpu: Option<GpuInfo>,
    /// Why `gpu` is missing, when it is.
    pub gpu_unavailable: Option<String>,
    /// The Python and torch the PyTorch engine ran with (`None`: the run trained on libtorch
    /// only, and files that predate engines).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pytorch: Option<PytorchInfo>,
}

/// What NVML says about a GPU.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct GpuInfo {
    /// Marketing name, e.g. `NVIDIA H200`.
    pub name: String,
    /// Driver version.
    pub driver_version: String,
    /// Installed device memory, bytes.
    pub memory_total_bytes: u64,
    /// CUDA compute capability, e.g. `9.0`.
    pub compute_capability: String,
}

/// The git commit of the checkout this binary was built from (set by build.rs), if any.
pub fn git_commit() -> Option<String> {
    option_env!("TRICKBENCH_GIT_COMMIT").filter(|c| !c.is_empty()).map(str::to_owned)
}
