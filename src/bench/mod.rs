//! Benchmarks: profiles and their overrides, plans, the measurement a cell process makes, the
//! runner that executes a plan cell by cell in isolated processes, what a run shows while it
//! runs, and the split of a plan into shards.
pub mod cell;
pub mod interrupt;
pub mod overrides;
pub mod plan;
pub mod profile;
pub mod progress;
pub mod runner;
pub mod shard;
