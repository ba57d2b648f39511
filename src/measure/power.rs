//! GPU power and identity through NVML (NVIDIA's management library, loaded at run time, so the
//! binary runs on machines without it). Power is sampled in a background thread and integrated
//! into joules over the timed windows.
//!
//! NVML numbers devices in PCI order; with `CUDA_DEVICE_ORDER=PCI_BUS_ID` (or one visible GPU)
//! that is also CUDA's order, which is what this module assumes.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use nvml_wrapper::Nvml;
use serde::{Deserialize, Serialize};

use crate::device::DeviceSpec;

/// Interval between power readings.
const SAMPLE_INTERVAL: Duration = Duration::from_millis(20);

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

/// Why NVML cannot be used for `device`, if it cannot.
fn open(device: DeviceSpec) -> Result<(Nvml, u32), String> {
    let DeviceSpec::Cuda(index) = device else {
        return Err("NVML measures NVIDIA GPUs; this run is on the CPU".to_owned());
    };
    let nvml = Nvml::init().map_err(|e| format!("NVML unavailable: {e}"))?;
    Ok((nvml, index as u32))
}

/// Name, driver, memory and compute capability of the GPU behind `device`, or why they are unknown.
pub fn gpu_info(device: DeviceSpec) -> Result<GpuInfo, String> {
    let (nvml, index) = open(device)?;
    let gpu = nvml.device_by_index(index).map_err(|e| format!("NVML device {index}: {e}"))?;
    let cc = gpu.cuda_compute_capability().map_err(|e| format!("NVML compute capability: {e}"))?;
    Ok(GpuInfo {
        name: gpu.name().map_err(|e| format!("NVML device name: {e}"))?,
        driver_version: nvml.sys_driver_version().map_err(|e| format!("NVML driver version: {e}"))?,
        memory_total_bytes: gpu.memory_info().map_err(|e| format!("NVML memory info: {e}"))?.total,
        compute_capability: format!("{}.{}", cc.major, cc.minor),
    })
}

/// Energy drawn by the GPU over a measured interval.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Energy {
    /// Energy over the interval, joules (power integrated with the trapezoidal rule).
    pub joules: f64,
    /// Mean board power over the interval, watts.
    pub mean_power_w: f64,
    /// Power readings behind the figure.
    pub readings: usize,
    /// Length of the interval, seconds.
    pub interval_s: f64,
}

/// A background thread reading board power every 20 ms until stopped.
#[derive(Debug)]
pub struct PowerSampler {
    stop: Arc<AtomicBool>,
    thread: JoinHandle<Result<Energy, String>>,
}

impl PowerSampler {
    /// Starts sampling the GPU behind `device`; fails (with the reason) off NVIDIA GPUs.
    pub fn start(device: DeviceSpec) -> Result<Self, String> {
        let (nvml, index) = open(device)?;
        nvml.device_by_index(index)
            .and_then(|gpu| gpu.power_usage())
            .map_err(|e| format!("NVML power reading on device {index}: {e}"))?;
        let stop = Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        let thread = std::thread::spawn(move || {
            let gpu = nvml.device_by_index(index).map_err(|e| e.to_string())?;
            let mut readings: Vec<(f64, f64)> = Vec::new();
            let started = Instant::now();
            loop {
                let milliwatts = gpu.power_usage().map_err(|e| format!("NVML power reading: {e}"))?;
                readings.push((started.elapsed().as_secs_f64(), f64::from(milliwatts) / 1000.0));
                if flag.load(Ordering::Relaxed) {
                    break;
                }
                std::thread::sleep(SAMPLE_INTERVAL);
            }
            Ok(integrate(&readings))
        });
        Ok(Self { stop, thread })
    }

    /// Stops sampling and returns the energy since `start`.
    pub fn stop(self) -> Result<Energy, String> {
        self.stop.store(true, Ordering::Relaxed);
        self.thread.join().map_err(|_| "the power sampling thread panicked".to_owned())?
    }
}

/// Integrates (time s, power W) readings with the trapezoidal rule.
fn integrate(readings: &[(f64, f64)]) -> Energy {
    let joules: f64 = readings.windows(2).map(|w| (w[1].0 - w[0].0) * (w[0].1 + w[1].1) / 2.0).sum();
    let interval_s = readings.last().map_or(0.0, |r| r.0) - readings.first().map_or(0.0, |r| r.0);
    let mean_power_w =
        if interval_s > 0.0 { joules / interval_s } else { readings.first().map_or(0.0, |r| r.1) };
    Energy { joules, mean_power_w, readings: readings.len(), interval_s }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn trapezoidal_integration_of_power_readings() {
        let e = integrate(&[(0.0, 100.0), (1.0, 200.0), (3.0, 200.0)]);
        assert_eq!(e.joules, 150.0 + 400.0);
        assert_eq!(e.interval_s, 3.0);
        assert!((e.mean_power_w - 550.0 / 3.0).abs() < 1e-9);
        assert_eq!(e.readings, 3);
    }

    #[test]
    fn on_cpu_power_and_gpu_identity_are_unavailable_with_a_reason() {
        let reason = PowerSampler::start(DeviceSpec::Cpu).unwrap_err();
        assert!(reason.contains("NVIDIA GPUs"), "{reason}");
        assert!(gpu_info(DeviceSpec::Cpu).unwrap_err().contains("CPU"));
    }
}
