//! Parity with PyTorch: the same network, initial weights, batches and optimizer trained by
//! trickbench and by plain eager PyTorch (`scripts/parity/parity.py`), compared step by step
//! (the loss of every step) and in speed (training steps timed in interleaved processes).
//!
//! The exchange is a directory per workload, a [`case::ParityCase`]: trickbench exports the
//! initial weights under PyTorch `state_dict` names and the batches its loader produced as
//! safetensors files, and the recipe as JSON. Each side ([`side`] here, the script there) reads the
//! same files and writes a [`side::SideOutput`]; [`compare`] judges the two.

pub mod case;
pub mod compare;
pub mod config;
pub mod session;
pub mod side;
pub mod stack;
pub mod summary;

/// The PyTorch side (`scripts/parity/parity.py`), built into the binary so that `trickbench
/// parity` works from any directory and can leave a copy beside its results.
pub const PYTORCH_SCRIPT: &str = include_str!("../../scripts/parity/parity.py");
