//! GPU energy and identity through NVML (NVIDIA's management library, loaded at run time, so the
//! binary runs on machines without it). Energy comes from the GPU's cumulative energy counter, read
//! at the edges of every timed window; only where a GPU lacks the counter is board power sampled
//! in a background thread and integrated, which is biased for short windows because NVML's power
//! reading is a one-second moving average on Ampere and newer GPUs.
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

/// NVML and the index of `device`'s GPU, or why NVML cannot be used for it.
pub(crate) fn open(device: DeviceSpec) -> Result<(Nvml, u32), String> {
    let DeviceSpec::Cuda(index) = device else {
        return Err("NVML measures NVIDIA GPUs; this run is on the CPU".to_owned());
    };
    let nvml = Nvml::init().map_err(|e| format!("NVML unavailable: {e}"))?;
    Ok((nvml, index as u32))
}

/// The CUDA compute capability NVML reports for a GPU.
fn capability_of(gpu: &nvml_wrapper::Device) -> Result<(u32, u32), String> {
    let cc = gpu.cuda_compute_capability().map_err(|e| format!("NVML compute capability: {e}"))?;
    let version =
        |v: i32| u32::try_from(v).map_err(|_| format!("NVML compute capability {}.{}", cc.major, cc.minor));
    Ok((version(cc.major)?, version(cc.minor)?))
}

/// The CUDA compute capability (major, minor) of the GPU behind `device`, or why it is unknown.
pub fn compute_capability(device: DeviceSpec) -> Result<(u32, u32), String> {
    let (nvml, index) = open(device)?;
    let gpu = nvml.device_by_index(index).map_err(|e| format!("NVML device {index}: {e}"))?;
    capability_of(&gpu)
}

/// Name, driver, memory and compute capability of the GPU behind `device`, or why they are unknown.
pub fn gpu_info(device: DeviceSpec) -> Result<GpuInfo, String> {
    let (nvml, index) = open(device)?;
    let gpu = nvml.device_by_index(index).map_err(|e| format!("NVML device {index}: {e}"))?;
    let (major, minor) = capability_of(&gpu)?;
    Ok(GpuInfo {
        name: gpu.name().map_err(|e| format!("NVML device name: {e}"))?,
        driver_version: nvml.sys_driver_version().map_err(|e| format!("NVML driver version: {e}"))?,
        memory_total_bytes: gpu.memory_info().map_err(|e| format!("NVML memory info: {e}"))?.total,
        compute_capability: format!("{major}.{minor}"),
    })
}

/// How a GPU's energy was measured.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum EnergyMethod {
    /// NVML's cumulative energy counter (`nvmlDeviceGetTotalEnergyConsumption`, millijoules) read
    /// right after the synchronisation at each timed window's edges, differences summed.
    Counter,
    /// Board power read every 20 ms and integrated over the timed region, where the GPU has no
    /// energy counter.
    #[default]
    SampledPower,
}

/// Energy drawn by the GPU over a measured interval.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Energy {
    /// Energy over the interval, joules.
    pub joules: f64,
    /// Mean board power over the interval, watts.
    pub mean_power_w: f64,
    /// Readings behind the figure: counter reads (two per window) or power samples.
    pub readings: usize,
    /// Length of the interval, seconds: the timed windows' total (counter), or the timed region's
    /// span (sampled power).
    pub interval_s: f64,
    /// How the energy was measured.
    pub method: EnergyMethod,
}

/// Measures the GPU energy of timed windows: with the energy counter where the GPU has one, else
/// with a [`PowerSampler`].
#[derive(Debug)]
pub enum EnergyMeter {
    /// Reads of the cumulative energy counter (boxed: NVML's function table is large).
    Counter(Box<EnergyCounter>),
    /// Sampled board power.
    Sampled(PowerSampler),
}

impl EnergyMeter {
    /// Starts measuring the GPU behind `device`; fails (with the reason) off NVIDIA GPUs or where
    /// neither the counter nor power readings work.
    pub fn start(device: DeviceSpec) -> Result<Self, String> {
        // Where NVML itself cannot be used, both methods fail for the same reason: said once.
        let (nvml, index) = open(device)?;
        match EnergyCounter::open(nvml, index) {
            Ok(counter) => Ok(EnergyMeter::Counter(Box::new(counter))),
            Err(failed) => {
                let (nvml, counter_reason) = *failed;
                PowerSampler::sampling(nvml, index)
                    .map(EnergyMeter::Sampled)
                    .map_err(|power_reason| format!("{counter_reason}; {power_reason}"))
            }
        }
    }

    /// Marks the start of a timed window (call right after the device is synchronised).
    pub fn window_started(&mut self) {
        if let EnergyMeter::Counter(counter) = self {
            counter.window_started();
        }
    }

    /// Marks the end of a timed window (call right after the device is synchronised).
    pub fn window_ended(&mut self) {
        if let EnergyMeter::Counter(counter) = self {
            counter.window_ended();
        }
    }

    /// The energy of the timed windows (counter) or of the whole region since `start` (sampled).
    pub fn finish(self) -> Result<Energy, String> {
        match self {
            EnergyMeter::Counter(counter) => counter.finish(),
            EnergyMeter::Sampled(sampler) => sampler.stop(),
        }
    }
}

/// Whether the GPU behind `device` has an energy counter NVML can read, or why not.
pub fn energy_counter_status(device: DeviceSpec) -> Result<(), String> {
    let (nvml, index) = open(device)?;
    EnergyCounter::open(nvml, index).map(|_| ()).map_err(|failed| failed.1)
}

/// Differences of NVML's cumulative energy counter over timed windows.
#[derive(Debug)]
pub struct EnergyCounter {
    nvml: Nvml,
    index: u32,
    window: Option<(u64, Instant)>,
    windows: CounterWindows,
    error: Option<String>,
}

/// The sums over the windows measured so far.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
struct CounterWindows {
    millijoules: u64,
    seconds: f64,
    readings: usize,
}

impl CounterWindows {
    /// Adds a window whose counter read `start_mj` and `end_mj` (a counter that went backwards,
    /// as after a driver reload, adds nothing) over `seconds`.
    fn add(&mut self, start_mj: u64, end_mj: u64, seconds: f64) {
        self.millijoules += end_mj.saturating_sub(start_mj);
        self.seconds += seconds;
        self.readings += 2;
    }

    /// The energy of the windows.
    fn energy(self) -> Energy {
        let joules = self.millijoules as f64 / 1000.0;
        Energy {
            joules,
            mean_power_w: if self.seconds > 0.0 { joules / self.seconds } else { 0.0 },
            readings: self.readings,
            interval_s: self.seconds,
            method: EnergyMethod::Counter,
        }
    }
}

impl EnergyCounter {
    /// The counter of GPU `index` of `nvml`, or why it cannot be read (with `nvml` back, for
    /// another method; boxed, as NVML's function table is large).
    fn open(nvml: Nvml, index: u32) -> Result<Self, Box<(Nvml, String)>> {
        let reading = nvml.device_by_index(index).and_then(|gpu| gpu.total_energy_consumption());
        if let Err(e) = reading {
            return Err(Box::new((nvml, format!("NVML energy counter on device {index}: {e}"))));
        }
        Ok(Self { nvml, index, window: None, windows: CounterWindows::default(), error: None })
    }

    /// The counter now, millijoules; the first failure is kept for [`Self::finish`].
    fn read(&mut self) -> Option<u64> {
        let reading = self.nvml.device_by_index(self.index).and_then(|gpu| gpu.total_energy_consumption());
        match reading {
            Ok(mj) => Some(mj),
            Err(e) => {
                self.error.get_or_insert_with(|| format!("NVML energy counter: {e}"));
                None
            }
        }
    }

    fn window_started(&mut self) {
        self.window = self.read().map(|mj| (mj, Instant::now()));
    }

    fn window_ended(&mut self) {
        if let (Some((start_mj, started)), Some(end_mj)) = (self.window.take(), self.read()) {
            self.windows.add(start_mj, end_mj, started.elapsed().as_secs_f64());
        }
    }

    fn finish(self) -> Result<Energy, String> {
        match self.error {
            Some(error) => Err(error),
            None if self.windows.readings == 0 => Err("no timed window was measured".to_owned()),
            None => Ok(self.windows.energy()),
        }
    }
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
        Self::sampling(nvml, index)
    }

    /// Starts sampling GPU `index` of `nvml`.
    fn sampling(nvml: Nvml, index: u32) -> Result<Self, String> {
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
    Energy { joules, mean_power_w, readings: readings.len(), interval_s, method: EnergyMethod::SampledPower }
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
        assert_eq!(e.method, EnergyMethod::SampledPower);
    }

    #[test]
    fn counter_differences_are_summed_over_the_windows_only() {
        let mut windows = CounterWindows::default();
        windows.add(1_000_000, 1_150_000, 0.5);
        // Between the windows the GPU drew energy that must not count.
        windows.add(1_400_000, 1_550_000, 0.5);
        windows.add(2_000_000, 1_000, 0.1);
        let e = windows.energy();
        assert_eq!(e.joules, 300.0);
        assert!((e.interval_s - 1.1).abs() < 1e-12);
        assert!((e.mean_power_w - 300.0 / 1.1).abs() < 1e-9);
        assert_eq!((e.readings, e.method), (6, EnergyMethod::Counter));
    }

    #[test]
    fn energy_methods_are_recorded_by_their_kebab_case_names() {
        let json = r#"{"joules": 5.0, "mean_power_w": 250.0, "readings": 10, "interval_s": 0.02, "method": "sampled-power"}"#;
        let e: Energy = serde_json::from_str(json).unwrap();
        assert_eq!(e.method, EnergyMethod::SampledPower);
        assert_eq!(serde_json::to_string(&EnergyMethod::Counter).unwrap(), "\"counter\"");
    }

    #[test]
    fn on_cpu_power_and_gpu_identity_are_unavailable_with_a_reason() {
        let reason = PowerSampler::start(DeviceSpec::Cpu).unwrap_err();
        assert!(reason.contains("NVIDIA GPUs"), "{reason}");
        let reason = EnergyMeter::start(DeviceSpec::Cpu).unwrap_err();
        assert!(reason.contains("NVIDIA GPUs"), "{reason}");
        assert!(gpu_info(DeviceSpec::Cpu).unwrap_err().contains("CPU"));
    }
}
