//! Benchmarks: profiles, plans, the measurement a cell process makes, the runner that executes a
//! plan cell by cell in isolated processes, and the split of a plan into shards.
pub mod cell;
pub mod interrupt;
pub mod plan;
pub mod profile;
pub mod runner;
pub mod shard;
