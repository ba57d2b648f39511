//! What a rehearsal of a GPU run on the CPU (`--device as-if-cuda:GPU`) stands in for, as it
//! happens: the record of which calls each side of a cell process went through, and the model of
//! the caching allocator whose figures stand in for the device's. Each call that needs a CUDA
//! device answers, where it is made, with its stand-in on a rehearsed device and records it here
//! ([`record`]); which calls there are is [`StandIn`]'s list.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Mutex, MutexGuard, PoisonError};

use crate::ffi;
use crate::vocabulary::StandIn;

/// The stand-ins of a cell process: those of each side (by its place in the process: arm `i`,
/// or the reference after the arms) and those of the process itself.
#[derive(Debug, Default)]
struct Record {
    /// The side whose build or steps run now, if any.
    current: Option<usize>,
    /// Each side's stand-ins.
    sides: BTreeMap<usize, BTreeSet<StandIn>>,
    /// The stand-ins made outside any side (the process's start, its memory readings).
    process: BTreeSet<StandIn>,
}

static RECORD: Mutex<Option<Record>> = Mutex::new(None);

/// The record, made on first use.
fn record_now() -> MutexGuard<'static, Option<Record>> {
    RECORD.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Records that `stand_in` took the place of a call, for the side whose build or steps run now
/// (else for the process).
pub fn record(stand_in: StandIn) {
    let mut guard = record_now();
    let record = guard.get_or_insert_with(Record::default);
    match record.current {
        Some(side) => record.sides.entry(side).or_default().insert(stand_in),
        None => record.process.insert(stand_in),
    };
}

/// While alive, the stand-ins recorded are side `side`'s (its place in the process).
#[derive(Debug)]
pub struct SideScope {
    previous: Option<usize>,
}

impl SideScope {
    /// Attributes the stand-ins recorded from now on to side `side`.
    pub fn enter(side: usize) -> Self {
        let mut guard = record_now();
        let record = guard.get_or_insert_with(Record::default);
        let previous = record.current.replace(side);
        SideScope { previous }
    }
}

impl Drop for SideScope {
    fn drop(&mut self) {
        if let Some(record) = record_now().as_mut() {
            record.current = self.previous;
        }
    }
}

/// The stand-ins side `side` went through, with the process's own, in [`StandIn::ALL`]'s order.
pub fn taken_by(side: usize) -> Vec<StandIn> {
    let guard = record_now();
    let Some(record) = guard.as_ref() else { return Vec::new() };
    let own = record.sides.get(&side).into_iter().flatten();
    let all: BTreeSet<StandIn> = own.chain(&record.process).copied().collect();
    all.into_iter().collect()
}

/// The caching allocator's model on a rehearsed device: allocated is the bytes of live CPU
/// tensors (the shim's counting allocator, [`ffi::cpu_memory_stats`]); reserved is the highest
/// allocated since the cache was last emptied ([`ffi::cpu_high_water_bytes`]), as a caching
/// allocator keeps every block it handed out until then.
pub mod allocator {
    use super::*;

    /// (allocated, reserved) bytes now.
    pub fn held() -> (u64, u64) {
        record(StandIn::AllocatorStatistics);
        (ffi::cpu_memory_stats().0, ffi::cpu_high_water_bytes())
    }

    /// (peak allocated since the peaks were last reset, peak reserved) bytes: the reserved bytes
    /// never fall without an emptied cache, so their peak is the reserved bytes now.
    pub fn peaks() -> (u64, u64) {
        record(StandIn::AllocatorStatistics);
        (ffi::cpu_memory_stats().1, ffi::cpu_high_water_bytes())
    }

    /// Empties the cache: the reserved bytes fall back to those allocated.
    pub fn empty_cache() {
        record(StandIn::EmptyCache);
        ffi::reset_cpu_high_water();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_sides_stand_ins_are_its_own_and_the_processes() {
        record(StandIn::Kernels);
        {
            let _side = SideScope::enter(7);
            record(StandIn::GraphCapture);
            {
                let _other = SideScope::enter(8);
                record(StandIn::PinnedMemory);
            }
            record(StandIn::AutocastDevice);
        }
        let seven = taken_by(7);
        assert!(seven.contains(&StandIn::GraphCapture) && seven.contains(&StandIn::AutocastDevice));
        assert!(seven.contains(&StandIn::Kernels), "the process's own count for every side");
        assert!(!seven.contains(&StandIn::PinnedMemory), "side 8's");
        assert!(taken_by(8).contains(&StandIn::PinnedMemory));
    }
}
