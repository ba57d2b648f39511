//! Peak memory: the CUDA caching allocator's peaks; on CPU the bytes of live tensors (counted by the
//! shim's allocator, once [`count_cpu_tensors`] installed it) and the process's peak resident set;
//! on a rehearsed GPU the model of the caching allocator that stands in for it
//! ([`standin::allocator`]).

use tch::{Kind, Tensor};

use crate::device::DeviceSpec;
use crate::error::Error;
use crate::ffi;
use crate::results::schema::Memory;
use crate::standin;

/// Resets the peak counters: the device's (CUDA), and the process's peak resident set to its
/// current resident set (Linux: `5` written to `/proc/self/clear_refs`), so that peaks cover the
/// measured work, not data loading. Where the kernel refuses, the resident peak keeps covering the
/// whole process.
pub fn reset_peaks(device: DeviceSpec) -> Result<(), Error> {
    // Best effort: an older or locked-down kernel only makes the resident peak less specific.
    let _ = std::fs::write("/proc/self/clear_refs", "5");
    ffi::reset_cpu_memory_peak();
    match device.cuda_index() {
        Some(i) => Ok(ffi::reset_peak_memory_stats(i)?),
        None => Ok(()),
    }
}

/// Returns the caching allocator's unused cached blocks to the device, so that the reserved bytes
/// held are those of segments in use (nothing on the CPU).
pub fn empty_cache(device: DeviceSpec) -> Result<(), Error> {
    match device {
        DeviceSpec::Cuda(_) => Ok(ffi::empty_cache()?),
        DeviceSpec::AsIfCuda(_) => {
            standin::allocator::empty_cache();
            Ok(())
        }
        DeviceSpec::Cpu | DeviceSpec::Auto => Ok(()),
    }
}

/// Makes the device's libraries hold what they keep for the whole process before anything is
/// measured: the caching allocator, and cuBLAS's, cuBLASLt's and cuDNN's handles and workspaces
/// (about 32 MiB per handle and stream on Hopper), through one small fp32 matmul, one bf16 matmul
/// and one convolution, synchronised. Otherwise the first side a process builds pays for them and
/// the sides built after it never do. Nothing on the CPU.
pub fn warm_libraries(device: DeviceSpec) -> Result<(), Error> {
    if !device.is_cuda() {
        return Ok(());
    }
    let on = device.tch();
    for kind in [Kind::Float, Kind::BFloat16] {
        let a = Tensor::f_ones([16, 16], (kind, on))?;
        let _product = a.f_matmul(&a)?;
    }
    let image = Tensor::f_ones([1, 3, 8, 8], (Kind::Float, on))?;
    let weight = Tensor::f_ones([4, 3, 3, 3], (Kind::Float, on))?;
    let _convolved = image.f_conv2d(&weight, None::<Tensor>, [1, 1], [1, 1], [1, 1], 1)?;
    crate::measure::timer::synchronize(device);
    Ok(())
}

/// Holds the CUDA caching allocator of `device` to `budget_bytes` (the job's memory budget), so
/// that a cell runs out of memory where a GPU of that size would: the allocator frees its cache and
/// retries before it fails. Nothing on a CPU or without a budget. A binary built without CUDA
/// headers cannot cap the allocator; its budget is then held only by the check of the peaks after
/// each step.
pub fn cap_device(device: DeviceSpec, budget_bytes: Option<u64>) -> Result<(), Error> {
    match (device, budget_bytes) {
        (DeviceSpec::Cuda(i), Some(budget)) if ffi::cuda_graphs_compiled() => {
            ffi::cap_device_memory(i, budget).map(drop).map_err(Error::from)
        }
        (DeviceSpec::AsIfCuda(_), Some(_)) => {
            standin::record(crate::vocabulary::StandIn::AllocatorCap);
            Ok(())
        }
        _ => Ok(()),
    }
}

/// Peak memory since the last reset (device) and since the process started (resident set; see
/// [`peak_rss_bytes`]).
pub fn peaks(device: DeviceSpec) -> Result<Memory, Error> {
    let rss = peak_rss_bytes();
    Ok(match device {
        DeviceSpec::Cuda(i) => {
            let stats = ffi::device_memory_stats(i)?;
            Memory {
                peak_allocated_bytes: Some(stats.peak_allocated_bytes.max(0) as u64),
                peak_reserved_bytes: Some(stats.peak_reserved_bytes.max(0) as u64),
                peak_rss_bytes: rss,
            }
        }
        DeviceSpec::AsIfCuda(_) => {
            let (allocated, reserved) = standin::allocator::peaks();
            Memory {
                peak_allocated_bytes: Some(allocated),
                peak_reserved_bytes: Some(reserved),
                peak_rss_bytes: rss,
            }
        }
        DeviceSpec::Cpu | DeviceSpec::Auto => {
            let counted = ffi::cpu_memory_stats().1;
            Memory {
                peak_allocated_bytes: (counted > 0).then_some(counted),
                peak_reserved_bytes: None,
                peak_rss_bytes: rss,
            }
        }
    })
}

/// What the process holds now (not its peaks): the bytes of live tensors (the device's on CUDA,
/// the counted CPU tensors' otherwise), the caching allocator's reserved bytes (CUDA) and the
/// resident set. A figure that cannot be read is `None`.
pub fn held(device: DeviceSpec) -> Memory {
    let rss = current_rss_bytes();
    match device {
        DeviceSpec::Cuda(i) => match ffi::device_memory_stats(i) {
            Ok(stats) => Memory {
                peak_allocated_bytes: Some(stats.allocated_bytes.max(0) as u64),
                peak_reserved_bytes: Some(stats.reserved_bytes.max(0) as u64),
                peak_rss_bytes: rss,
            },
            Err(_) => Memory { peak_rss_bytes: rss, ..Memory::default() },
        },
        DeviceSpec::AsIfCuda(_) => {
            let (allocated, reserved) = standin::allocator::held();
            Memory {
                peak_allocated_bytes: Some(allocated),
                peak_reserved_bytes: Some(reserved),
                peak_rss_bytes: rss,
            }
        }
        DeviceSpec::Cpu | DeviceSpec::Auto => {
            let live = ffi::cpu_memory_stats().0;
            Memory {
                peak_allocated_bytes: (live > 0).then_some(live),
                peak_reserved_bytes: None,
                peak_rss_bytes: rss,
            }
        }
    }
}

/// The process's resident set now, bytes: `VmRSS` in /proc/self/status.
fn current_rss_bytes() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    status_kib(&status, "VmRSS:").map(|kib| kib * 1024)
}

/// Counts the bytes of CPU tensors from now on (see [`ffi::install_cpu_memory_counter`]): call it
/// at the start of a cell process, before any tensor is made.
pub fn count_cpu_tensors() -> Result<(), Error> {
    Ok(ffi::install_cpu_memory_counter()?)
}

/// The peak resident set size of this process, bytes: `VmHWM` in /proc/self/status (which
/// [`reset_peaks`] can reset), else `getrusage`'s `ru_maxrss` (the whole process's peak; gVisor's
/// status file has no `VmHWM` line), else `None`. A missing figure never fails a cell.
pub fn peak_rss_bytes() -> Option<u64> {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|status| vm_hwm_bytes(&status))
        .or_else(max_rss_bytes)
}

/// The `VmHWM` line of a /proc/<pid>/status text, bytes.
fn vm_hwm_bytes(status: &str) -> Option<u64> {
    status_kib(status, "VmHWM:").map(|kib| kib * 1024)
}

/// The figure of the line starting with `field` in a /proc/<pid>/status text, KiB.
fn status_kib(status: &str, field: &str) -> Option<u64> {
    status
        .lines()
        .find_map(|line| line.strip_prefix(field))
        .and_then(|v| v.trim().strip_suffix("kB"))
        .and_then(|kb| kb.trim().parse::<u64>().ok())
}

/// The process's peak resident set from `getrusage(RUSAGE_SELF)`, bytes (Linux reports KiB).
fn max_rss_bytes() -> Option<u64> {
    let mut usage = std::mem::MaybeUninit::<libc::rusage>::zeroed();
    // SAFETY: getrusage writes a whole rusage into the pointer it is given.
    let usage = unsafe {
        if libc::getrusage(libc::RUSAGE_SELF, usage.as_mut_ptr()) != 0 {
            return None;
        }
        usage.assume_init()
    };
    u64::try_from(usage.ru_maxrss).ok().filter(|&kib| kib > 0).map(|kib| kib * 1024)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A gVisor status file: no `VmHWM` (nor `VmPeak`) line.
    const GVISOR_STATUS: &str = "Name:\ttrickbench\nState:\tR (running)\nTgid:\t1\nPid:\t1\nPPid:\t0\n\
        TracerPid:\t0\nFDSize:\t64\nVmSize:\t 4721328 kB\nVmRSS:\t  612344 kB\nVmData:\t 3950120 kB\n\
        Threads:\t18\nCpus_allowed:\tffff\n";

    #[test]
    fn the_resident_peak_comes_from_vmhwm_or_else_from_getrusage() {
        let linux = "VmPeak:\t 5000 kB\nVmSize:\t 4000 kB\nVmHWM:\t    1536 kB\nVmRSS:\t 1024 kB\n";
        assert_eq!(vm_hwm_bytes(linux), Some(1536 * 1024));
        assert_eq!(vm_hwm_bytes(GVISOR_STATUS), None, "gVisor prints no VmHWM");
        assert_eq!(vm_hwm_bytes("VmHWM:\tlots\n"), None);
        assert!(max_rss_bytes().is_some(), "getrusage is the fallback where VmHWM is missing");
    }

    /// One test, not three: the peaks are per process and tests run in parallel threads.
    #[test]
    fn peaks_follow_large_allocations_and_reset() {
        let before = peak_rss_bytes().unwrap();
        let big = vec![1u8; 64 << 20];
        let after = peak_rss_bytes().unwrap();
        assert!(max_rss_bytes().is_some_and(|b| b > 64 << 20), "getrusage's peak covers the vector");
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
