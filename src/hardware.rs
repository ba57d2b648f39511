//! The facts about the device a run uses, the machine and this binary that decide which tricks
//! can be measured.

use crate::device::{cuda_device_count, DeviceSpec, RehearsedGpu};
use crate::distributed;
use crate::ffi;
use crate::measure::power;

/// The device a run uses and what it, the machine and this binary offer there: the facts that
/// decide which tricks can be measured. Built once from the real machine ([`Hardware::probe`]), or
/// written out to describe any machine.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Hardware {
    /// The resolved device the cells run on.
    pub device: DeviceSpec,
    /// CUDA GPUs this process can see (0 without a usable driver).
    pub cuda_gpus: usize,
    /// The compute capability (major, minor) of the device's GPU, from NVML; `None` on the CPU or
    /// where NVML cannot read it.
    pub cuda_capability: Option<(u32, u32)>,
    /// The version of the cuDNN library libtorch loads on the device's GPU, as cuDNN numbers it
    /// (91900 for 9.19.0); `None` on the CPU or where libtorch has no cuDNN.
    pub cudnn_version: Option<i64>,
    /// Whether this binary was built with CUDA graph capture.
    pub cuda_graphs_compiled: bool,
    /// Why this binary cannot train data-parallel, if it cannot (built without gloo's headers).
    pub data_parallel_unavailable: Option<String>,
    /// Whether this binary can all-reduce on GPUs (built with NCCL's headers).
    pub nccl_compiled: bool,
}

impl Hardware {
    /// The facts of this machine and binary for a run on `device` (resolved); those of the GPU
    /// it rehearses, for a rehearsal ([`Hardware::rehearsing`]).
    pub fn probe(device: DeviceSpec) -> Hardware {
        if let DeviceSpec::AsIfCuda(gpu) = device {
            return Hardware::rehearsing(gpu);
        }
        Hardware {
            device,
            cuda_gpus: cuda_device_count(),
            cuda_capability: power::compute_capability(device).ok(),
            cudnn_version: cudnn_version(device),
            cuda_graphs_compiled: ffi::cuda_graphs_compiled(),
            data_parallel_unavailable: distributed::group::unavailable_reason(),
            nccl_compiled: distributed::group::nccl_compiled(),
        }
    }

    /// One GPU of the class `gpu` with cuDNN 9.19.0 (the PyTorch 2.11 CUDA 13.0 wheel's) and
    /// every CUDA path built in, rehearsed on the CPU (`--device as-if-cuda:GPU`): the machine a
    /// GPU run is planned for on another machine, and rehearsed there.
    pub fn rehearsing(gpu: RehearsedGpu) -> Hardware {
        Hardware {
            device: DeviceSpec::AsIfCuda(gpu),
            cuda_gpus: 1,
            cuda_capability: Some(gpu.capability()),
            cudnn_version: Some(REHEARSED_CUDNN_VERSION),
            cuda_graphs_compiled: true,
            data_parallel_unavailable: None,
            nccl_compiled: true,
        }
    }

    /// A machine with `gpus` Hopper GPUs (compute capability 9.0), cuDNN 9.19.0 (the PyTorch 2.11
    /// CUDA 13.0 wheel's) and every CUDA path compiled in, running on the first GPU, or on the CPU
    /// when it has none.
    #[cfg(test)]
    pub(crate) fn with_gpus(gpus: usize) -> Hardware {
        Hardware {
            device: if gpus == 0 { DeviceSpec::Cpu } else { DeviceSpec::Cuda(0) },
            cuda_gpus: gpus,
            cuda_capability: (gpus > 0).then_some((9, 0)),
            cudnn_version: (gpus > 0).then_some(REHEARSED_CUDNN_VERSION),
            cuda_graphs_compiled: true,
            data_parallel_unavailable: None,
            nccl_compiled: true,
        }
    }
}

/// The cuDNN version a rehearsal assumes, as cuDNN numbers it: 9.19.0, the PyTorch 2.11 CUDA 13.0
/// wheel's.
pub const REHEARSED_CUDNN_VERSION: i64 = 91900;

/// The cuDNN version libtorch loads for `device`: on a CUDA device where cuDNN is usable, else
/// `None`.
fn cudnn_version(device: DeviceSpec) -> Option<i64> {
    (device.cuda_index().is_some() && tch::Cuda::cudnn_is_available()).then(ffi::cudnn_runtime_version)?.ok()
}
