//! Benchmarks: a run's configuration and inputs, the designs and their phases, profiles and their
//! overrides, plans, the measurement a cell process makes, the runner that executes a plan cell by
//! cell in isolated processes, the session that drives a whole run, what a run shows while it
//! runs, the split of a plan into shards, and the lock that keeps one run per output folder.
pub mod cell;
pub mod config;
pub mod design;
pub mod inputs;
pub mod interrupt;
pub mod lock;
pub mod overrides;
pub mod plan;
pub mod profile;
pub mod progress;
pub mod runner;
pub mod session;
pub mod shard;
