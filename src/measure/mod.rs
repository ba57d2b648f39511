//! Measuring: device-synchronised timing, where a step's time goes, peak memory, energy, the
//! machine's state around a cell and the system record, profiler traces and the operators they
//! record, the host allocator the measuring processes run with and the page faults they take.
pub mod energy;
pub mod faults;
pub mod flops;
pub mod host_allocator;
pub mod machine;
pub mod memory;
pub mod ops;
pub mod phases;
pub mod power;
pub mod system;
pub mod timer;
pub mod trace;
