//! Timing with the device synchronised at the edges, so queued GPU work is counted where it runs.

use std::time::Instant;

use crate::device::DeviceSpec;

/// Waits until all work queued on `device` has finished (on the CPU, and on a rehearsed GPU,
/// operators return when done).
pub fn synchronize(device: DeviceSpec) {
    match device {
        DeviceSpec::Cuda(i) => tch::Cuda::synchronize(i as i64),
        DeviceSpec::AsIfCuda(_) => crate::standin::record(crate::vocabulary::StandIn::DeviceSynchronize),
        DeviceSpec::Cpu | DeviceSpec::Auto => {}
    }
}

/// A stopwatch whose start and stop wait for the device.
#[derive(Debug)]
pub struct SyncedTimer {
    device: DeviceSpec,
    started: Instant,
}

impl SyncedTimer {
    /// Synchronises the device, then starts timing.
    pub fn start(device: DeviceSpec) -> Self {
        synchronize(device);
        Self { device, started: Instant::now() }
    }

    /// Synchronises the device, then returns the seconds since `start`.
    pub fn stop(self) -> f64 {
        synchronize(self.device);
        self.started.elapsed().as_secs_f64()
    }
}
