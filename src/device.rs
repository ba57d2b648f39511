//! Which device to run on: parsing `--device` and resolving `auto`, and the GPUs a run can
//! rehearse on the CPU (`--device as-if-cuda:sm90`).

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};
use tch::Device;

use crate::error::Error;

/// A device as the user names it: `auto`, `cpu`, `cuda:N`, or `as-if-cuda:GPU`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(into = "String", try_from = "String")]
pub enum DeviceSpec {
    /// The first CUDA device when one is available, else the CPU.
    Auto,
    /// The CPU.
    Cpu,
    /// CUDA device N.
    Cuda(usize),
    /// The CPU standing in for a CUDA device of the GPU class given: a rehearsal of what a run on
    /// that GPU plans and builds. Every trick applies as it would there and every case runs on
    /// the CPU's tensors; the calls that need a CUDA device are stood in
    /// ([`crate::vocabulary::StandIn`]), so its numbers are the CPU's, never the GPU's.
    AsIfCuda(RehearsedGpu),
}

/// A class of GPU a run can rehearse on the CPU, by the compute capability the trick catalogue
/// tells apart: what decides which tricks apply there (TF32 and bf16 from 8.0, fp8 from 8.9).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum RehearsedGpu {
    /// Compute capability 8.0: an A100 (80 GB).
    Sm80,
    /// Compute capability 9.0: an H100 or H200 (the H200's 141 GB).
    Sm90,
    /// Compute capability 10.0: a B200.
    Sm100,
}

impl RehearsedGpu {
    /// Every class, oldest first.
    pub const ALL: [RehearsedGpu; 3] = [RehearsedGpu::Sm80, RehearsedGpu::Sm90, RehearsedGpu::Sm100];

    /// The name in `--device as-if-cuda:NAME` and in results.
    pub fn id(self) -> &'static str {
        match self {
            RehearsedGpu::Sm80 => "sm80",
            RehearsedGpu::Sm90 => "sm90",
            RehearsedGpu::Sm100 => "sm100",
        }
    }

    /// The compute capability (major, minor).
    pub fn capability(self) -> (u32, u32) {
        match self {
            RehearsedGpu::Sm80 => (8, 0),
            RehearsedGpu::Sm90 => (9, 0),
            RehearsedGpu::Sm100 => (10, 0),
        }
    }

    /// The memory the rehearsal assumes the GPU has, bytes: what `nvidia-smi` reports of an A100
    /// 80 GB (81,920 MiB), an H200 (143,771 MiB) and a B200 (183,359 MiB).
    pub fn memory_bytes(self) -> u64 {
        let mib: u64 = match self {
            RehearsedGpu::Sm80 => 81_920,
            RehearsedGpu::Sm90 => 143_771,
            RehearsedGpu::Sm100 => 183_359,
        };
        mib << 20
    }

    /// The GPUs of the class, in words.
    pub fn examples(self) -> &'static str {
        match self {
            RehearsedGpu::Sm80 => "an A100",
            RehearsedGpu::Sm90 => "an H100 or H200",
            RehearsedGpu::Sm100 => "a B200",
        }
    }
}

impl FromStr for RehearsedGpu {
    type Err = Error;

    fn from_str(s: &str) -> Result<Self, Error> {
        RehearsedGpu::ALL.into_iter().find(|g| g.id() == s).ok_or_else(|| {
            let valid: Vec<&str> = RehearsedGpu::ALL.iter().map(|g| g.id()).collect();
            Error::Invalid(format!("unknown GPU class '{s}' to rehearse: expected {}", valid.join(", ")))
        })
    }
}

impl DeviceSpec {
    /// Resolves `auto` and checks that a requested CUDA device exists.
    pub fn resolve(self) -> Result<DeviceSpec, Error> {
        match self {
            DeviceSpec::Auto if tch::Cuda::is_available() => Ok(DeviceSpec::Cuda(0)),
            DeviceSpec::Auto => Ok(DeviceSpec::Cpu),
            DeviceSpec::Cpu | DeviceSpec::AsIfCuda(_) => Ok(self),
            DeviceSpec::Cuda(i) => {
                let count = cuda_device_count();
                if i < count {
                    Ok(self)
                } else {
                    Err(Error::Invalid(format!(
                        "--device cuda:{i}: this machine has {count} CUDA device(s){}",
                        if count == 0 { "; use --device cpu" } else { "" }
                    )))
                }
            }
        }
    }

    /// The tch device tensors are placed on (`auto` must be resolved first; it maps to the CPU
    /// here, as does a rehearsed GPU).
    pub fn tch(self) -> Device {
        match self {
            DeviceSpec::Cuda(i) => Device::Cuda(i),
            DeviceSpec::Auto | DeviceSpec::Cpu | DeviceSpec::AsIfCuda(_) => Device::Cpu,
        }
    }

    /// Whether cells run with a CUDA device's semantics: on a CUDA device, or rehearsing one on
    /// the CPU (where the calls that need the device are stood in).
    pub fn is_cuda(self) -> bool {
        matches!(self, DeviceSpec::Cuda(_) | DeviceSpec::AsIfCuda(_))
    }

    /// The index of the real CUDA device (`None` on the CPU, and when rehearsing a GPU there).
    pub fn cuda_index(self) -> Option<usize> {
        match self {
            DeviceSpec::Cuda(i) => Some(i),
            DeviceSpec::Auto | DeviceSpec::Cpu | DeviceSpec::AsIfCuda(_) => None,
        }
    }

    /// The GPU this device rehearses on the CPU, if it is a rehearsal.
    pub fn rehearsed(self) -> Option<RehearsedGpu> {
        match self {
            DeviceSpec::AsIfCuda(gpu) => Some(gpu),
            DeviceSpec::Auto | DeviceSpec::Cpu | DeviceSpec::Cuda(_) => None,
        }
    }
}

/// The CUDA devices this process can see (0 without a usable driver or CUDA-enabled libtorch).
pub fn cuda_device_count() -> usize {
    tch::Cuda::device_count().max(0) as usize
}

impl fmt::Display for DeviceSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            DeviceSpec::Auto => f.write_str("auto"),
            DeviceSpec::Cpu => f.write_str("cpu"),
            DeviceSpec::Cuda(i) => write!(f, "cuda:{i}"),
            DeviceSpec::AsIfCuda(gpu) => write!(f, "as-if-cuda:{}", gpu.id()),
        }
    }
}

impl FromStr for DeviceSpec {
    type Err = Error;

    fn from_str(s: &str) -> Result<Self, Error> {
        let invalid = || {
            Error::Invalid(format!(
                "unknown device '{s}': expected auto, cpu, cuda, cuda:N or as-if-cuda:GPU"
            ))
        };
        match s {
            "auto" => Ok(DeviceSpec::Auto),
            "cpu" => Ok(DeviceSpec::Cpu),
            "cuda" => Ok(DeviceSpec::Cuda(0)),
            _ if s.starts_with("as-if-cuda:") => {
                let gpu = &s["as-if-cuda:".len()..];
                gpu.parse()
                    .map(DeviceSpec::AsIfCuda)
                    .map_err(|e| Error::Invalid(format!("device '{s}': {e}")))
            }
            _ => {
                let index = s.strip_prefix("cuda:").ok_or_else(invalid)?;
                index.parse().map(DeviceSpec::Cuda).map_err(|_| invalid())
            }
        }
    }
}

impl From<DeviceSpec> for String {
    fn from(d: DeviceSpec) -> String {
        d.to_string()
    }
}

impl TryFrom<String> for DeviceSpec {
    type Error = Error;

    fn try_from(s: String) -> Result<Self, Error> {
        s.parse()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_and_prints_device_names() {
        for name in
            ["auto", "cpu", "cuda:0", "cuda:3", "as-if-cuda:sm80", "as-if-cuda:sm90", "as-if-cuda:sm100"]
        {
            assert_eq!(name.parse::<DeviceSpec>().unwrap().to_string(), name);
        }
        assert_eq!("cuda".parse::<DeviceSpec>().unwrap(), DeviceSpec::Cuda(0));
    }

    #[test]
    fn rejects_unknown_devices_naming_the_value() {
        for bad in ["gpu", "cuda:x", "cuda:-1", "", "as-if-cuda:", "as-if-cuda:sm75"] {
            let message = bad.parse::<DeviceSpec>().unwrap_err().to_string();
            assert!(message.contains(&format!("'{bad}'")), "{message}");
        }
        let message = "as-if-cuda:h200".parse::<DeviceSpec>().unwrap_err().to_string();
        assert!(message.contains("sm80, sm90, sm100"), "{message}");
    }

    #[test]
    fn missing_cuda_device_is_a_clear_error() {
        if cuda_device_count() == 0 {
            let message = DeviceSpec::Cuda(0).resolve().unwrap_err().to_string();
            assert!(message.contains("--device cuda:0"), "{message}");
            assert_eq!(DeviceSpec::Auto.resolve().unwrap(), DeviceSpec::Cpu);
        }
    }

    #[test]
    fn a_rehearsed_gpu_has_cudas_semantics_on_the_cpus_tensors() {
        let rehearsal = DeviceSpec::AsIfCuda(RehearsedGpu::Sm90);
        assert!(rehearsal.is_cuda());
        assert_eq!(rehearsal.tch(), Device::Cpu);
        assert_eq!(rehearsal.cuda_index(), None);
        assert_eq!(rehearsal.resolve().unwrap(), rehearsal, "nothing to look up: no GPU is needed");
        assert_eq!(DeviceSpec::Cuda(2).cuda_index(), Some(2));
        assert_eq!(RehearsedGpu::Sm100.capability(), (10, 0));
    }
}
