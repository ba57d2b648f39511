//! trickbench: measures PyTorch training speed-up tricks, on and off, on reference models.
pub mod data;
pub mod device;
pub mod error;
pub mod ffi;
pub mod report;
pub mod results;
pub mod tricks;
pub mod workloads;
