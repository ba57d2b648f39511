//! The machine's state around a cell process, read before it starts measuring and after: the
//! GPU's clocks, power, temperature, throttle reasons, persistence mode and the compute processes
//! on it (through NVML), and the CPU's frequency, governor and load. A process that ran on a
//! throttled or shared machine is flagged, as noisy cells are.

use std::path::Path;

use crate::device::DeviceSpec;
use crate::measure::power::open;
use crate::results::machine::{CpuState, GpuState, MachineState, ThrottleReason};

impl MachineState {
    /// The state now, for a cell on `device` (on a rehearsed GPU, the CPU's alone: NVML is stood
    /// in).
    pub fn read(device: DeviceSpec) -> Self {
        if device.rehearsed().is_some() {
            crate::standin::record(crate::vocabulary::StandIn::Nvml);
        }
        let (gpu, gpu_unavailable) = match device.cuda_index().map(|_| gpu_state(device)) {
            Some(Ok(gpu)) => (Some(gpu), None),
            Some(Err(reason)) => (None, Some(reason)),
            None => (None, None),
        };
        MachineState { cpu: CpuState::read(Path::new("/")), gpu, gpu_unavailable }
    }
}

impl CpuState {
    /// The CPU's state from the `/proc` and `/sys` below `root` (`/` on a real machine).
    pub fn read(root: &Path) -> Self {
        let text = |relative: &str| std::fs::read_to_string(root.join(relative)).ok();
        let logical_cores = std::thread::available_parallelism().map_or(1, usize::from);
        let load_average_1m =
            text("proc/loadavg").and_then(|s| s.split_whitespace().next().and_then(|v| v.parse().ok()));
        let mut frequencies = sysfs_frequencies_mhz(root);
        if frequencies.is_empty() {
            frequencies = text("proc/cpuinfo").map(|s| cpuinfo_frequencies_mhz(&s)).unwrap_or_default();
        }
        CpuState {
            logical_cores,
            load_average_1m,
            frequency_min_mhz: frequencies.iter().copied().reduce(f64::min),
            frequency_max_mhz: frequencies.iter().copied().reduce(f64::max),
            governors: governors(root),
        }
    }
}

/// The cores' directories under `root`'s `sys/devices/system/cpu` (`cpu0`, `cpu1`, …).
fn core_dirs(root: &Path) -> Vec<std::path::PathBuf> {
    let Ok(entries) = std::fs::read_dir(root.join("sys/devices/system/cpu")) else { return Vec::new() };
    let mut dirs: Vec<_> = entries
        .filter_map(|e| e.ok())
        .filter(|e| {
            let name = e.file_name().to_string_lossy().into_owned();
            name.strip_prefix("cpu").is_some_and(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()))
        })
        .map(|e| e.path())
        .collect();
    dirs.sort();
    dirs
}

/// Each core's current frequency from cpufreq (`scaling_cur_freq`, kHz), MHz.
fn sysfs_frequencies_mhz(root: &Path) -> Vec<f64> {
    core_dirs(root)
        .iter()
        .filter_map(|dir| std::fs::read_to_string(dir.join("cpufreq/scaling_cur_freq")).ok())
        .filter_map(|s| s.trim().parse::<f64>().ok())
        .map(|khz| khz / 1000.0)
        .collect()
}

/// The `cpu MHz` lines of `/proc/cpuinfo`.
fn cpuinfo_frequencies_mhz(cpuinfo: &str) -> Vec<f64> {
    cpuinfo
        .lines()
        .filter(|line| line.starts_with("cpu MHz"))
        .filter_map(|line| line.split(':').nth(1)?.trim().parse().ok())
        .collect()
}

/// The distinct cpufreq governors of the cores, in core order.
fn governors(root: &Path) -> Vec<String> {
    let mut seen = Vec::new();
    for dir in core_dirs(root) {
        if let Ok(governor) = std::fs::read_to_string(dir.join("cpufreq/scaling_governor")) {
            let governor = governor.trim().to_owned();
            if !seen.contains(&governor) {
                seen.push(governor);
            }
        }
    }
    seen
}

/// The state of the GPU behind `device`, or why NVML cannot read it.
fn gpu_state(device: DeviceSpec) -> Result<GpuState, String> {
    use nvml_wrapper::enum_wrappers::device::{Clock, TemperatureSensor};
    let (nvml, index) = open(device)?;
    let gpu = nvml.device_by_index(index).map_err(|e| format!("NVML device {index}: {e}"))?;
    let read = |what: &str, e: nvml_wrapper::error::NvmlError| format!("NVML {what}: {e}");
    let processes = gpu.running_compute_processes().map_err(|e| read("compute processes", e))?;
    Ok(GpuState {
        sm_clock_mhz: gpu.clock_info(Clock::SM).map_err(|e| read("SM clock", e))?,
        memory_clock_mhz: gpu.clock_info(Clock::Memory).map_err(|e| read("memory clock", e))?,
        max_sm_clock_mhz: gpu.max_clock_info(Clock::SM).ok(),
        power_limit_w: f64::from(gpu.enforced_power_limit().map_err(|e| read("power limit", e))?) / 1000.0,
        power_draw_w: f64::from(gpu.power_usage().map_err(|e| read("power draw", e))?) / 1000.0,
        temperature_c: gpu.temperature(TemperatureSensor::Gpu).map_err(|e| read("temperature", e))?,
        throttle_reasons: throttle_reasons(
            gpu.current_throttle_reasons().map_err(|e| read("throttle reasons", e))?.bits(),
        ),
        persistence_mode: gpu.is_in_persistent_mode().ok(),
        compute_process_pids: processes.iter().map(|p| p.pid).collect(),
        own_pid: Some(std::process::id()),
    })
}

/// The reasons set in NVML's throttle-reason bit mask.
fn throttle_reasons(bits: u64) -> Vec<ThrottleReason> {
    use nvml_wrapper::bitmasks::device::ThrottleReasons as Bits;
    [
        (Bits::GPU_IDLE, ThrottleReason::GpuIdle),
        (Bits::APPLICATIONS_CLOCKS_SETTING, ThrottleReason::ApplicationsClocksSetting),
        (Bits::SW_POWER_CAP, ThrottleReason::SwPowerCap),
        (Bits::HW_SLOWDOWN, ThrottleReason::HwSlowdown),
        (Bits::SYNC_BOOST, ThrottleReason::SyncBoost),
        (Bits::SW_THERMAL_SLOWDOWN, ThrottleReason::SwThermalSlowdown),
        (Bits::HW_THERMAL_SLOWDOWN, ThrottleReason::HwThermalSlowdown),
        (Bits::HW_POWER_BRAKE_SLOWDOWN, ThrottleReason::HwPowerBrakeSlowdown),
        (Bits::DISPLAY_CLOCK_SETTING, ThrottleReason::DisplayClockSetting),
    ]
    .into_iter()
    .filter(|(bit, _)| bits & bit.bits() != 0)
    .map(|(_, reason)| reason)
    .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write(root: &Path, relative: &str, text: &str) {
        let path = root.join(relative);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, text).unwrap();
    }

    #[test]
    fn the_cpu_is_read_from_cpufreq_and_falls_back_to_cpuinfo() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        write(root, "proc/loadavg", "3.50 2.00 1.00 2/300 4242\n");
        write(root, "proc/cpuinfo", "processor : 0\ncpu MHz : 2100.000\nprocessor : 1\ncpu MHz : 2300.5\n");
        let vm = CpuState::read(root);
        assert_eq!(vm.load_average_1m, Some(3.5));
        assert_eq!((vm.frequency_min_mhz, vm.frequency_max_mhz), (Some(2100.0), Some(2300.5)));
        assert!(vm.governors.is_empty());
        for (core, khz, governor) in [("cpu0", "1200000", "powersave"), ("cpu1", "3400000", "performance")] {
            write(root, &format!("sys/devices/system/cpu/{core}/cpufreq/scaling_cur_freq"), khz);
            write(root, &format!("sys/devices/system/cpu/{core}/cpufreq/scaling_governor"), governor);
        }
        write(root, "sys/devices/system/cpu/cpufreq/policy0/scaling_governor", "ignored");
        let host = CpuState::read(root);
        assert_eq!((host.frequency_min_mhz, host.frequency_max_mhz), (Some(1200.0), Some(3400.0)));
        assert_eq!(host.governors, ["powersave", "performance"]);
        let nothing = CpuState::read(&root.join("absent"));
        assert_eq!((nothing.load_average_1m, nothing.frequency_max_mhz), (None, None));
    }

    #[test]
    fn nvml_bits_map_to_reasons_and_the_cpu_side_needs_no_gpu() {
        assert_eq!(throttle_reasons(0), []);
        let bits = nvml_wrapper::bitmasks::device::ThrottleReasons::SW_POWER_CAP.bits()
            | nvml_wrapper::bitmasks::device::ThrottleReasons::HW_SLOWDOWN.bits();
        assert_eq!(throttle_reasons(bits), [ThrottleReason::SwPowerCap, ThrottleReason::HwSlowdown]);
        let state = MachineState::read(DeviceSpec::Cpu);
        assert!(state.gpu.is_none() && state.gpu_unavailable.is_none());
        assert!(state.cpu.logical_cores >= 1);
        for reason in [ThrottleReason::GpuIdle, ThrottleReason::HwPowerBrakeSlowdown] {
            assert_eq!(serde_json::to_string(&reason).unwrap(), format!("\"{}\"", reason.id()));
        }
    }
}
