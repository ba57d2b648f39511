//! Which device to run on: parsing `--device` and resolving `auto`.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};
use tch::Device;

use crate::error::Error;

/// A device as the user names it: `auto`, `cpu` or `cuda:N`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(into = "String", try_from = "String")]
pub enum DeviceSpec {
    /// The first CUDA device when one is available, else the CPU.
    Auto,
    /// The CPU.
    Cpu,
    /// CUDA device N.
    Cuda(usize),
}

impl DeviceSpec {
    /// Resolves `auto` and checks that a requested CUDA device exists.
    pub fn resolve(self) -> Result<DeviceSpec, Error> {
        match self {
            DeviceSpec::Auto if tch::Cuda::is_available() => Ok(DeviceSpec::Cuda(0)),
            DeviceSpec::Auto => Ok(DeviceSpec::Cpu),
            DeviceSpec::Cpu => Ok(DeviceSpec::Cpu),
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

    /// The tch device (`auto` must be resolved first; it maps to the CPU here).
    pub fn tch(self) -> Device {
        match self {
            DeviceSpec::Cuda(i) => Device::Cuda(i),
            DeviceSpec::Auto | DeviceSpec::Cpu => Device::Cpu,
        }
    }

    /// Whether this is a CUDA device.
    pub fn is_cuda(self) -> bool {
        matches!(self, DeviceSpec::Cuda(_))
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
        }
    }
}

impl FromStr for DeviceSpec {
    type Err = Error;

    fn from_str(s: &str) -> Result<Self, Error> {
        let invalid = || Error::Invalid(format!("unknown device '{s}': expected auto, cpu, cuda or cuda:N"));
        match s {
            "auto" => Ok(DeviceSpec::Auto),
            "cpu" => Ok(DeviceSpec::Cpu),
            "cuda" => Ok(DeviceSpec::Cuda(0)),
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
        for name in ["auto", "cpu", "cuda:0", "cuda:3"] {
            assert_eq!(name.parse::<DeviceSpec>().unwrap().to_string(), name);
        }
        assert_eq!("cuda".parse::<DeviceSpec>().unwrap(), DeviceSpec::Cuda(0));
    }

    #[test]
    fn rejects_unknown_devices_naming_the_value() {
        for bad in ["gpu", "cuda:x", "cuda:-1", ""] {
            let message = bad.parse::<DeviceSpec>().unwrap_err().to_string();
            assert!(message.contains(&format!("'{bad}'")), "{message}");
        }
    }

    #[test]
    fn missing_cuda_device_is_a_clear_error() {
        if cuda_device_count() == 0 {
            let message = DeviceSpec::Cuda(0).resolve().unwrap_err().to_string();
            assert!(message.contains("--device cuda:0"), "{message}");
            assert_eq!(DeviceSpec::Auto.resolve().unwrap(), DeviceSpec::Cpu);
        }
    }
}
