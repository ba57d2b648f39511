//! The system record: what machine and software stack produced a set of numbers.

use serde::{Deserialize, Serialize};

use crate::device::{cuda_device_count, DeviceSpec};
use crate::engine::PytorchInfo;
use crate::measure::power::{gpu_info, GpuInfo};

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

impl SystemInfo {
    /// Reads the system record of this machine for a run on `device`.
    pub fn collect(device: DeviceSpec) -> Self {
        use sysinfo::{CpuRefreshKind, MemoryRefreshKind, RefreshKind, System};
        let sys = System::new_with_specifics(
            RefreshKind::nothing()
                .with_cpu(CpuRefreshKind::nothing())
                .with_memory(MemoryRefreshKind::nothing().with_ram()),
        )
        .ok();
        let cpus = sys.as_ref().map(|s| s.cpus()).unwrap_or_default();
        let cuda = tch::Cuda::is_available();
        let gpu = gpu_info(device);
        let cudnn = tch::Cuda::cudnn_is_available();
        SystemInfo {
            hostname: System::host_name().ok(),
            os: System::long_os_version().ok(),
            kernel: System::kernel_version().ok(),
            cpu_model: cpus.first().map(|c| c.brand().trim().to_owned()).filter(|s| !s.is_empty()),
            cpu_logical_cores: cpus.len(),
            cpu_physical_cores: System::physical_core_count().ok(),
            memory_total_bytes: sys.as_ref().map_or(0, |s| s.total_memory()),
            torch_threads: tch::get_num_threads(),
            libtorch_version: crate::ffi::torch_version(),
            cuda_runtime_version: cuda.then(tch::utils::version_cudart),
            cudnn_version: cudnn.then(tch::utils::version_cudnn),
            cuda_device_count: cuda_device_count(),
            device,
            gpu_unavailable: gpu.as_ref().err().cloned(),
            pytorch: None,
            gpu: gpu.ok(),
        }
    }
}

/// The git commit of the checkout this binary was built from (set by build.rs), if any.
pub fn git_commit() -> Option<String> {
    option_env!("TRICKBENCH_GIT_COMMIT").filter(|c| !c.is_empty()).map(str::to_owned)
}
