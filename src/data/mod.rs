//! Datasets: the CIFAR-10 binary format, importing image folders, synthetic data, downloads,
//! and the batch loaders.
pub mod cifar;
pub mod fetch;
pub mod import;
pub mod loader;
pub mod synth;
mod transfer;
mod workers;
