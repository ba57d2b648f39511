//! Minor page faults: pages the kernel maps in as a process first touches memory it was given
//! (an allocation served with fresh pages, or heap memory the allocator had returned). A step
//! that faults its activations in again every time pays for it in the step's time; how many it
//! takes depends on the host allocator and on everything the process allocated before.

/// Minor page faults this process (every thread of it) has taken so far; `None` where the
/// kernel does not say.
pub fn minor_page_faults() -> Option<u64> {
    let mut usage = std::mem::MaybeUninit::<libc::rusage>::zeroed();
    // SAFETY: getrusage writes a whole rusage into the pointer it is given, which points to one.
    let status = unsafe { libc::getrusage(libc::RUSAGE_SELF, usage.as_mut_ptr()) };
    if status != 0 {
        return None;
    }
    // SAFETY: getrusage succeeded, so it filled the struct.
    let usage = unsafe { usage.assume_init() };
    u64::try_from(usage.ru_minflt).ok()
}

/// Counts the minor page faults taken between its start and [`FaultCount::stop`].
#[derive(Debug, Clone, Copy)]
pub struct FaultCount(Option<u64>);

impl FaultCount {
    /// Starts counting.
    pub fn start() -> Self {
        FaultCount(minor_page_faults())
    }

    /// The faults taken since the start; `None` where they could not be read.
    pub fn stop(self) -> Option<u64> {
        Some(minor_page_faults()?.saturating_sub(self.0?))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn touching_fresh_pages_counts_faults() {
        let count = FaultCount::start();
        let mut pages = vec![0u8; 64 << 20];
        for page in pages.chunks_mut(4096) {
            page[0] = 1;
        }
        assert_eq!(pages.iter().step_by(4096).map(|&b| b as usize).sum::<usize>(), (64 << 20) / 4096);
        let faults = count.stop().expect("Linux counts minor faults");
        // 16,384 pages of 4 KiB, or 32 of 2 MiB where transparent huge pages back the allocation.
        assert!(faults >= 32, "{faults} faults touching 64 MiB of fresh pages");
    }
}
