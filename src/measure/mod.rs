//! Measuring: device-synchronised timing, peak memory, and the statistics over windows.
pub mod flops;
pub mod memory;
pub mod power;
pub mod stats;
pub mod timer;
