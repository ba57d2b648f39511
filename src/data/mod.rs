//! Datasets: the CIFAR-10 binary format, importing image folders, synthetic data, a character
//! corpus, downloads, and the batch loaders.
pub mod cifar;
pub mod fetch;
pub mod import;
pub mod loader;
pub mod synth;
pub mod text;
mod transfer;
mod workers;
