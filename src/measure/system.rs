//! The system record of this machine ([`SystemInfo`]): its CPU, memory and operating system, the
//! libtorch, CUDA and cuDNN the binary runs with, and the GPU NVML describes.

use crate::device::{cuda_device_count, DeviceSpec};
use crate::measure::power::gpu_info;
use crate::results::system::SystemInfo;

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
