//! The record of the machine's state around a cell process: the GPU's clocks, power,
//! temperature, throttle reasons, persistence mode and compute processes, the CPU's frequency,
//! governor and load (`measure::machine` reads them), and what in them makes the machine unfair
//! to measure on.

use serde::{Deserialize, Serialize};

/// The 1-minute load average, as a multiple of the logical cores, above which the machine counts
/// as busy with other work (a cell's own threads keep it at or below one per core).
pub const BUSY_LOAD_PER_CORE: f64 = 1.5;

/// What the machine was doing at one moment of a cell process.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct MachineState {
    /// The CPU.
    pub cpu: CpuState,
    /// The GPU the cell runs on (`None` on the CPU, or where NVML cannot read it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gpu: Option<GpuState>,
    /// Why `gpu` is missing on a CUDA device.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gpu_unavailable: Option<String>,
}

/// The CPU's state, from `/proc` and `/sys` where they are readable.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CpuState {
    /// Logical cores online.
    pub logical_cores: usize,
    /// Load average over the last minute (`None` where `/proc/loadavg` is unreadable).
    pub load_average_1m: Option<f64>,
    /// The lowest current core frequency, MHz (`None` where unreadable).
    pub frequency_min_mhz: Option<f64>,
    /// The highest current core frequency, MHz (`None` where unreadable).
    pub frequency_max_mhz: Option<f64>,
    /// The cpufreq scaling governors in use (`performance`, `powersave`, …; empty where the
    /// kernel exposes none, as in most VMs).
    pub governors: Vec<String>,
}

/// The GPU's state, from NVML.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct GpuState {
    /// Current SM clock, MHz.
    pub sm_clock_mhz: u32,
    /// Current memory clock, MHz.
    pub memory_clock_mhz: u32,
    /// Highest SM clock the GPU supports, MHz.
    pub max_sm_clock_mhz: Option<u32>,
    /// Enforced power limit, watts.
    pub power_limit_w: f64,
    /// Board power draw, watts (NVML's reading, a one-second average on recent GPUs).
    pub power_draw_w: f64,
    /// Die temperature, °C.
    pub temperature_c: u32,
    /// Why the clocks are held below their maximum, as NVML reports.
    pub throttle_reasons: Vec<ThrottleReason>,
    /// Whether the driver stays loaded without clients (`None` where NVML cannot say).
    pub persistence_mode: Option<bool>,
    /// Process ids of every compute process NVML lists on the GPU, this cell's own included.
    /// NVML gives them in the host's pid namespace, so inside a container or gVisor this process
    /// is listed under another number than `own_pid`: a single listed pid is most likely this
    /// process, and only two or more mean the GPU is shared ([`sharing_pids`]). Files that predate
    /// `own_pid` stored this as `other_processes`: the list less this process's pid, where NVML
    /// gave it as this process knows it.
    #[serde(alias = "other_processes")]
    pub compute_process_pids: Vec<u32>,
    /// This process's id in its own pid namespace (`None` in files that predate it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub own_pid: Option<u32>,
}

/// The processes that shared the GPU with this one, judged from the compute processes NVML lists
/// (`listed_pids`) and this process's own pid (`own_pid`): none while NVML lists at most one
/// distinct process, since NVML gives host pids and a single pid that is not `own_pid` is most
/// likely this process seen from the host; else every listed pid but `own_pid`.
pub fn sharing_pids(listed_pids: &[u32], own_pid: Option<u32>) -> Vec<u32> {
    let mut distinct = listed_pids.to_vec();
    distinct.sort_unstable();
    distinct.dedup();
    if distinct.len() < 2 {
        return Vec::new();
    }
    distinct.retain(|&pid| Some(pid) != own_pid);
    distinct
}

/// A reason NVML gives for clocks below their maximum.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum ThrottleReason {
    /// Nothing runs on the GPU.
    GpuIdle,
    /// The applications clocks setting holds them.
    ApplicationsClocksSetting,
    /// The software power cap: normal for a GPU working at its power limit.
    SwPowerCap,
    /// A hardware slowdown (temperature, power brake or an external signal).
    HwSlowdown,
    /// Synchronised boost with other GPUs.
    SyncBoost,
    /// The driver's thermal slowdown.
    SwThermalSlowdown,
    /// The hardware's thermal slowdown.
    HwThermalSlowdown,
    /// An external power brake.
    HwPowerBrakeSlowdown,
    /// The display clock setting.
    DisplayClockSetting,
}

impl ThrottleReason {
    /// Whether the reason means the machine was not in a fair state: heat, a hardware slowdown
    /// or a power brake. Idling, the clock settings, boost sync and the power cap of a GPU
    /// working at its limit are how a healthy GPU runs.
    pub fn is_unfair(self) -> bool {
        matches!(
            self,
            ThrottleReason::HwSlowdown
                | ThrottleReason::SwThermalSlowdown
                | ThrottleReason::HwThermalSlowdown
                | ThrottleReason::HwPowerBrakeSlowdown
        )
    }

    /// The reason's name in results files and warnings.
    pub fn id(self) -> &'static str {
        match self {
            ThrottleReason::GpuIdle => "gpu-idle",
            ThrottleReason::ApplicationsClocksSetting => "applications-clocks-setting",
            ThrottleReason::SwPowerCap => "sw-power-cap",
            ThrottleReason::HwSlowdown => "hw-slowdown",
            ThrottleReason::SyncBoost => "sync-boost",
            ThrottleReason::SwThermalSlowdown => "sw-thermal-slowdown",
            ThrottleReason::HwThermalSlowdown => "hw-thermal-slowdown",
            ThrottleReason::HwPowerBrakeSlowdown => "hw-power-brake-slowdown",
            ThrottleReason::DisplayClockSetting => "display-clock-setting",
        }
    }
}

impl MachineState {
    /// What made the machine unfair at this moment, one phrase each: a throttled or shared GPU,
    /// a CPU busy with other work.
    pub fn concerns(&self) -> Vec<String> {
        let mut concerns = Vec::new();
        if let Some(gpu) = &self.gpu {
            let unfair: Vec<&str> =
                gpu.throttle_reasons.iter().filter(|r| r.is_unfair()).map(|r| r.id()).collect();
            if !unfair.is_empty() {
                concerns.push(format!("GPU throttled ({}) at {} °C", unfair.join(", "), gpu.temperature_c));
            }
            if let Some(concern) = sharing_concern(gpu) {
                concerns.push(concern);
            }
        }
        if let Some(load) = self.cpu.load_average_1m {
            let cores = self.cpu.logical_cores.max(1);
            if load > BUSY_LOAD_PER_CORE * cores as f64 {
                concerns.push(format!("CPU busy with other work (load {load:.1} on {cores} cores)"));
            }
        }
        concerns
    }
}

/// The concern of a GPU shared with other processes, naming them: the listed pids but this
/// process's where NVML lists it under its own number, else every listed pid.
fn sharing_concern(gpu: &GpuState) -> Option<String> {
    let others = sharing_pids(&gpu.compute_process_pids, gpu.own_pid);
    if others.is_empty() {
        return None;
    }
    let pids: Vec<String> = others.iter().map(u32::to_string).collect();
    let own_listed = gpu.own_pid.is_some_and(|own| gpu.compute_process_pids.contains(&own));
    Some(if own_listed {
        format!("GPU shared with other processes (pid {})", pids.join(", "))
    } else {
        format!(
            "GPU shared with other processes (NVML lists pids {}; one is likely this process under its \
             host pid)",
            pids.join(", ")
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn heat_slowdowns_other_processes_and_a_busy_cpu_are_concerns_but_a_power_cap_is_not() {
        let gpu = GpuState {
            sm_clock_mhz: 1500,
            memory_clock_mhz: 2619,
            max_sm_clock_mhz: Some(1980),
            power_limit_w: 700.0,
            power_draw_w: 690.0,
            temperature_c: 71,
            throttle_reasons: vec![ThrottleReason::SwPowerCap],
            persistence_mode: Some(true),
            compute_process_pids: vec![4242],
            own_pid: Some(17),
        };
        let cpu = CpuState {
            logical_cores: 16,
            load_average_1m: Some(8.0),
            frequency_min_mhz: None,
            frequency_max_mhz: None,
            governors: vec![],
        };
        let mut state = MachineState { cpu, gpu: Some(gpu), gpu_unavailable: None };
        assert!(state.concerns().is_empty(), "{:?}", state.concerns());
        let gpu = state.gpu.as_mut().unwrap();
        gpu.throttle_reasons.push(ThrottleReason::HwThermalSlowdown);
        gpu.compute_process_pids = vec![17, 4242];
        state.cpu.load_average_1m = Some(30.0);
        assert_eq!(
            state.concerns(),
            [
                "GPU throttled (hw-thermal-slowdown) at 71 °C",
                "GPU shared with other processes (pid 4242)",
                "CPU busy with other work (load 30.0 on 16 cores)"
            ]
        );
    }

    #[test]
    fn the_gpu_is_shared_only_when_nvml_lists_more_than_one_process() {
        assert_eq!(sharing_pids(&[17], Some(17)), [] as [u32; 0], "this process alone");
        assert_eq!(sharing_pids(&[17, 4242], Some(17)), [4242], "this process and another");
        assert_eq!(sharing_pids(&[4242], Some(17)), [] as [u32; 0], "most likely this process's host pid");
        assert_eq!(sharing_pids(&[4343, 4242], Some(17)), [4242, 4343], "two processes, neither ours");
        assert_eq!(sharing_pids(&[4242, 4242], None), [] as [u32; 0], "one process listed twice");
        assert_eq!(sharing_pids(&[], Some(17)), [] as [u32; 0]);
    }

    #[test]
    fn one_foreign_pid_is_kept_as_information_and_an_old_other_processes_list_still_reads() {
        let json = r#"{"sm_clock_mhz": 1500, "memory_clock_mhz": 2619, "max_sm_clock_mhz": null,
            "power_limit_w": 700.0, "power_draw_w": 90.0, "temperature_c": 40, "throttle_reasons": [],
            "persistence_mode": null, "other_processes": [4242]}"#;
        let old: GpuState = serde_json::from_str(json).unwrap();
        assert_eq!((old.compute_process_pids.as_slice(), old.own_pid), (&[4242][..], None));
        let cpu = CpuState {
            logical_cores: 2,
            load_average_1m: None,
            frequency_min_mhz: None,
            frequency_max_mhz: None,
            governors: vec![],
        };
        let mut state = MachineState { cpu, gpu: Some(old), gpu_unavailable: None };
        assert!(state.concerns().is_empty(), "{:?}", state.concerns());
        let gpu = state.gpu.as_mut().unwrap();
        gpu.compute_process_pids.push(4343);
        assert_eq!(
            state.concerns(),
            ["GPU shared with other processes (NVML lists pids 4242, 4343; one is likely this process under \
              its host pid)"]
        );
        let written = serde_json::to_value(state.gpu.as_ref().unwrap()).unwrap();
        assert_eq!(written["compute_process_pids"], serde_json::json!([4242, 4343]));
        assert!(written.get("other_processes").is_none() && written.get("own_pid").is_none());
    }
}
