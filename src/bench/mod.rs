//! Benchmarks: profiles and their overrides, plans, the measurement a cell process makes, the
//! runner that executes a plan cell by cell in isolated processes, what a run shows while it
//! runs, the split of a plan into shards, and the lock that keeps one run per output folder.
pub mod cell;
pub mod interrupt;
pub mod lock;
pub mod overrides;
pub mod plan;
pub mod profile;
pub mod progress;
pub mod runner;
pub mod shard;
