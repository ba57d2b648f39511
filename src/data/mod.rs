//! Datasets: the CIFAR-10 binary format, importing image folders, synthetic data, downloads, and
//! the batch loader.
pub mod cifar;
pub mod fetch;
pub mod import;
pub mod loader;
pub mod synth;
