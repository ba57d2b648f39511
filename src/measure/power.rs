//! GPU identity and energy through NVML (NVIDIA's management library, loaded at run time, so the
//! binary runs on machines without it). Energy comes from the GPU's cumulative energy counter, read
//! at the two ends of a span of work ([`crate::measure::energy`]); only where a GPU lacks the
//! counter is board power sampled in a background thread and integrated over the span.
//!
//! NVML numbers devices in PCI order; with `CUDA_DEVICE_ORDER=PCI_BUS_ID` (or one visible GPU)
//! that is also CUDA's order, which is what this module assumes.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crate::device::DeviceSpec;
use crate::measure::energy::{
    sampled_energy, CounterSpan, EnergyCounter, EnergyError, SpanTally, COUNTER_UPDATE_S,
};
use crate::results::energy::Energy;
use crate::results::system::GpuInfo;
use nvml_wrapper::Nvml;

/// Interval between power readings.
const SAMPLE_INTERVAL: Duration = Duration::from_millis(20);

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

/// Opens what measures the GPU energy of a span of work: the energy counter where the GPU has
/// one, else sampled board power; on a rehearsed GPU, a stand-in counter.
#[derive(Debug)]
pub enum EnergyMeter {
    /// NVML's cumulative energy counter.
    Counter(NvmlCounter),
    /// The counter that stands in for NVML's on a rehearsed GPU ([`StandInCounter`]).
    StandIn(StandInCounter),
    /// Board power readings.
    Sampled {
        /// NVML (boxed: its function table is large).
        nvml: Box<Nvml>,
        /// The GPU's index in NVML.
        index: u32,
    },
}

impl EnergyMeter {
    /// Opens NVML for the GPU behind `device`; fails (with the reason) off NVIDIA GPUs or where
    /// neither the counter nor power readings work.
    pub fn open(device: DeviceSpec) -> Result<Self, EnergyError> {
        if device.rehearsed().is_some() {
            return Ok(EnergyMeter::StandIn(StandInCounter::new()));
        }
        // Where NVML itself cannot be used, both methods fail for the same reason: said once.
        let (nvml, index) = open(device).map_err(EnergyError::Unavailable)?;
        match NvmlCounter::open(Box::new(nvml), index) {
            Ok(counter) => Ok(EnergyMeter::Counter(counter)),
            Err((nvml, counter_reason)) => {
                match nvml.device_by_index(index).and_then(|gpu| gpu.power_usage()) {
                    Ok(_) => Ok(EnergyMeter::Sampled { nvml, index }),
                    Err(e) => Err(EnergyError::Unavailable(format!(
                        "{counter_reason}; NVML power reading on device {index}: {e}"
                    ))),
                }
            }
        }
    }

    /// Begins a span: reads the counter, or starts sampling power. Call with the device
    /// synchronised and before any clock starts.
    pub fn begin(self) -> Result<EnergySpan, EnergyError> {
        match self {
            EnergyMeter::Counter(counter) => {
                CounterSpan::begin(counter, Instant::now()).map(EnergySpan::Counter)
            }
            EnergyMeter::StandIn(counter) => {
                CounterSpan::begin(counter, Instant::now()).map(EnergySpan::StandIn)
            }
            EnergyMeter::Sampled { nvml, index } => {
                let sampler = PowerSampler::sampling(*nvml, index)?;
                let tally = SpanTally::new(sampler.began);
                Ok(EnergySpan::Sampled { sampler, tally })
            }
        }
    }
}

/// A span of GPU work whose energy is being measured.
#[derive(Debug)]
pub enum EnergySpan {
    /// Read from the energy counter at its two ends.
    Counter(CounterSpan<NvmlCounter>),
    /// Read from the stand-in counter at its two ends (a rehearsed GPU).
    StandIn(CounterSpan<StandInCounter>),
    /// Sampled board power.
    Sampled {
        /// The thread reading power.
        sampler: PowerSampler,
        /// When the span began (its first power reading) and its samples.
        tally: SpanTally,
    },
}

impl EnergySpan {
    /// When the span began and the samples processed in it so far.
    fn tally(&self) -> &SpanTally {
        match self {
            EnergySpan::Counter(span) => span.tally(),
            EnergySpan::StandIn(span) => span.tally(),
            EnergySpan::Sampled { tally, .. } => tally,
        }
    }

    /// Counts `samples` more processed in the span.
    pub fn count(&mut self, samples: usize) {
        match self {
            EnergySpan::Counter(span) => span.count(samples),
            EnergySpan::StandIn(span) => span.count(samples),
            EnergySpan::Sampled { tally, .. } => tally.count(samples),
        }
    }

    /// Whether the span is still shorter than
    /// [`MIN_ENERGY_SPAN_S`](crate::measure::energy::MIN_ENERGY_SPAN_S): the caller keeps stepping.
    pub fn wants_more_time(&self) -> bool {
        self.tally().wants_more_time(Instant::now())
    }

    /// Ends the span (call with the device synchronised and every clock stopped): its energy, or
    /// why it has none.
    pub fn finish(self) -> Result<Energy, EnergyError> {
        match self {
            EnergySpan::Counter(span) => span.end(Instant::now()),
            EnergySpan::StandIn(span) => span.end(Instant::now()),
            EnergySpan::Sampled { sampler, tally } => sampled_energy(&sampler.stop()?, tally.samples()),
        }
    }
}

/// Whether the GPU behind `device` has an energy counter NVML can read, or why not.
pub fn energy_counter_status(device: DeviceSpec) -> Result<(), String> {
    let (nvml, index) = open(device)?;
    NvmlCounter::open(Box::new(nvml), index).map(|_| ()).map_err(|(_, reason)| reason)
}

/// NVML's cumulative energy counter of one GPU.
#[derive(Debug)]
pub struct NvmlCounter {
    /// NVML (boxed: its function table is large).
    nvml: Box<Nvml>,
    /// The GPU's index in NVML.
    index: u32,
}

impl NvmlCounter {
    /// The counter of GPU `index` of `nvml`, or why it cannot be read (with `nvml` back, for
    /// another method).
    fn open(nvml: Box<Nvml>, index: u32) -> Result<Self, (Box<Nvml>, String)> {
        let mut counter = Self { nvml, index };
        match counter.read_mj() {
            Ok(_) => Ok(counter),
            Err(e) => Err((counter.nvml, format!("{e} (device {index})"))),
        }
    }
}

impl EnergyCounter for NvmlCounter {
    fn read_mj(&mut self) -> Result<u64, EnergyError> {
        self.nvml
            .device_by_index(self.index)
            .and_then(|gpu| gpu.total_energy_consumption())
            .map_err(|e| EnergyError::Read(format!("NVML energy counter: {e}")))
    }
}

/// The board power the stand-in counter assumes, watts.
pub const STAND_IN_POWER_W: u64 = 300;

/// The counter that stands in for NVML's on a rehearsed GPU: the wall time since it was made at
/// [`STAND_IN_POWER_W`], advancing in [`COUNTER_UPDATE_S`] steps as NVML's does, so that a
/// rehearsal runs the energy bookkeeping (span lengths, quantisation, refusals) that a GPU will.
#[derive(Debug)]
pub struct StandInCounter {
    origin: Instant,
}

impl StandInCounter {
    /// A counter at 0 now.
    fn new() -> Self {
        crate::standin::record(crate::vocabulary::StandIn::Nvml);
        StandInCounter { origin: Instant::now() }
    }
}

impl EnergyCounter for StandInCounter {
    fn read_mj(&mut self) -> Result<u64, EnergyError> {
        crate::standin::record(crate::vocabulary::StandIn::Nvml);
        let update_ms = (COUNTER_UPDATE_S * 1000.0) as u128;
        let elapsed_ms = self.origin.elapsed().as_millis() / update_ms * update_ms;
        Ok((elapsed_ms as u64).saturating_mul(STAND_IN_POWER_W))
    }
}

/// A background thread reading board power every 20 ms until stopped.
#[derive(Debug)]
pub struct PowerSampler {
    /// Set to end the sampling.
    stop: Arc<AtomicBool>,
    /// When the first reading was taken.
    began: Instant,
    /// The thread, which returns its (seconds since `began`, watts) readings.
    thread: JoinHandle<Result<Vec<(f64, f64)>, EnergyError>>,
}

impl PowerSampler {
    /// Takes a first power reading of GPU `index` of `nvml`, then samples in a thread. The
    /// thread's last reading comes after it sees the stop, so the readings span at least the
    /// time from the first reading to [`Self::stop`].
    fn sampling(nvml: Nvml, index: u32) -> Result<Self, EnergyError> {
        let read = |gpu: &nvml_wrapper::Device| {
            gpu.power_usage()
                .map(|milliwatts| f64::from(milliwatts) / 1000.0)
                .map_err(|e| EnergyError::Read(format!("NVML power reading: {e}")))
        };
        let device_error = move |e| EnergyError::Read(format!("NVML device {index}: {e}"));
        let first_w = nvml.device_by_index(index).map_err(device_error).and_then(|gpu| read(&gpu))?;
        let began = Instant::now();
        let stop = Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        let thread = std::thread::spawn(move || {
            let gpu = nvml.device_by_index(index).map_err(device_error)?;
            let mut readings = vec![(0.0, first_w)];
            loop {
                std::thread::sleep(SAMPLE_INTERVAL);
                let stopping = flag.load(Ordering::Acquire);
                readings.push((began.elapsed().as_secs_f64(), read(&gpu)?));
                if stopping {
                    return Ok(readings);
                }
            }
        });
        Ok(Self { stop, began, thread })
    }

    /// Stops sampling and returns the (seconds since the first reading, watts) readings.
    fn stop(self) -> Result<Vec<(f64, f64)>, EnergyError> {
        self.stop.store(true, Ordering::Release);
        self.thread.join().map_err(|_| EnergyError::Read("the power sampling thread panicked".to_owned()))?
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn on_cpu_energy_and_gpu_identity_are_unavailable_with_a_reason() {
        let reason = EnergyMeter::open(DeviceSpec::Cpu).unwrap_err();
        assert!(matches!(&reason, EnergyError::Unavailable(_)), "{reason:?}");
        assert!(reason.to_string().contains("NVIDIA GPUs"), "{reason}");
        assert!(energy_counter_status(DeviceSpec::Cpu).unwrap_err().contains("NVIDIA GPUs"));
        assert!(gpu_info(DeviceSpec::Cpu).unwrap_err().contains("CPU"));
    }

    #[test]
    fn a_rehearsed_gpu_measures_its_spans_with_the_stand_in_counter() {
        let device = DeviceSpec::AsIfCuda(crate::device::RehearsedGpu::Sm90);
        let mut span = EnergyMeter::open(device).unwrap().begin().unwrap();
        span.count(10);
        std::thread::sleep(Duration::from_millis(1100));
        let energy = span.finish().unwrap();
        assert!(energy.interval_s >= 1.0, "{energy:?}");
        let expected_j = energy.interval_s * STAND_IN_POWER_W as f64;
        assert!((energy.joules - expected_j).abs() <= 0.21 * STAND_IN_POWER_W as f64, "{energy:?}");
        assert_eq!(energy.samples, Some(10));
    }
}
