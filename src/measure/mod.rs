//! Measuring: device-synchronised timing, peak memory, and the statistics over windows.
pub mod memory;
pub mod stats;
pub mod timer;
