//! Peak memory: the CUDA caching allocator's peaks; on CPU the bytes of live tensors (counted by the
//! shim's allocator, once [`count_cpu_tensors`] installed it) and the process's peak resident set.

use crate::device::DeviceSpec;
use crate::error::Error;
use crate::ffi;
use crate::results::schema::Memory;

/// Resets the peak counters: the device's (CUDA), and the process's peak resident set to its
/// current resident set (Linux: `5` written to `/proc/self/clear_refs`), so that peaks cover the
/// measured work, not data loading. Where the kernel refuses, the resident peak keeps covering the
/// whole process.
pub fn reset_peaks(device: DeviceSpec) -> Result<(), Error> {
    // Best effort: an older or locked-down kernel only makes the resident peak less specific.
    let _ = std::fs::write("/proc/self/clear_refs", "5");
    ffi::reset_cpu_memory_peak();
    match device {
        DeviceSpec::Cuda(i) => ffi::reset_peak_memory_stats(i),
        DeviceSpec::Cpu | DeviceSpec::Auto => Ok(()),
    }
}

/// Peak memory since the last reset (device) and since the process started (resident set).
pub fn peaks(device: DeviceSpec) -> Result<Memory, Error> {
    let rss = peak_rss_bytes()?;
    Ok(match device {
        DeviceSpec::Cuda(i) => {
            let stats = ffi::device_memory_stats(i)?;
            Memory {
                peak_allocated_bytes: Some(stats.peak_allocated_bytes.max(0) as u64),
                peak_reserved_bytes: Some(stats.peak_reserved_bytes.max(0) as u64),
                peak_rss_bytes: Some(rss),
            }
        }
        DeviceSpec::Cpu | DeviceSpec::Auto => {
            let counted = ffi::cpu_memory_stats().1;
            Memory {
                peak_allocated_bytes: (counted > 0).then_some(counted),
                peak_reserved_bytes: None,
                peak_rss_bytes: Some(rss),
            }
        }
    })
}

/// Counts the bytes of CPU tensors from now on (see [`ffi::install_cpu_memory_counter`]): call it
/// at the start of a cell process, before any tensor is made.
pub fn count_cpu_tensors() -> Result<(), Error> {
    ffi::install_cpu_memory_counter()
}

/// The peak resident set size of this process (`VmHWM` in /proc/self/status), bytes.
pub fn peak_rss_bytes() -> Result<u64, Error> {
    const STATUS: &str = "/proc/self/status";
    let status = std::fs::read_to_string(STATUS).map_err(|e| Error::io(STATUS, e))?;
    status
        .lines()
        .find_map(|line| line.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().strip_suffix("kB"))
        .and_then(|kb| kb.trim().parse::<u64>().ok())
        .map(|kb| kb * 1024)
        .ok_or_else(|| Error::Invalid(format!("{STATUS}: no VmHWM line")))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// One test, not three: the peaks are per process and tests run in parallel threads.
    #[test]
    fn peaks_follow_large_allocations_and_reset() {
        let before = peak_rss_bytes().unwrap();
        let big = vec![1u8; 64 << 20];
        let after = peak_rss_bytes().unwrap();
        assert!(big.iter().all(|&b| b == 1));
        assert!(after >= before && after > 64 << 20, "before {before}, after {after}");
        let m = peaks(DeviceSpec::Cpu).unwrap();
        assert!(m.peak_allocated_bytes.is_none() && m.peak_rss_bytes.is_some());

        let bigger = vec![1u8; 256 << 20];
        assert!(bigger.iter().all(|&b| b == 1));
        drop((big, bigger));
        let before = peak_rss_bytes().unwrap();
        reset_peaks(DeviceSpec::Cpu).unwrap();
        let after = peak_rss_bytes().unwrap();
        assert!(after + (128 << 20) < before, "peak {before} after reset {after}");

        count_cpu_tensors().unwrap();
        count_cpu_tensors().unwrap();
        let (live_before, _) = ffi::cpu_memory_stats();
        let t = tch::Tensor::zeros([64, 1024, 1024], (tch::Kind::Float, tch::Device::Cpu));
        let (live, peak) = ffi::cpu_memory_stats();
        // Other tests allocate concurrently, so only bounds hold exactly: this tensor is 256 MiB.
        assert!(live >= 256 << 20 && peak >= live, "live {live} (before {live_before}), peak {peak}");
        reset_peaks(DeviceSpec::Cpu).unwrap();
        let m = peaks(DeviceSpec::Cpu).unwrap();
        assert!(m.peak_allocated_bytes.is_some_and(|p| p >= 256 << 20), "{m:?}");
        assert_eq!(m.primary_bytes(), m.peak_allocated_bytes, "CPU comparisons use the tensor count");
        drop(t);
    }
}
