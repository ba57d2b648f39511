//! trickbench: measures PyTorch training speed-up tricks, on and off, on reference models.
pub mod bench;
pub mod data;
pub mod device;
pub mod error;
pub mod ffi;
pub mod measure;
pub mod optim;
pub mod report;
pub mod results;
pub mod summary;
pub mod train;
pub mod tricks;
pub mod workloads;
