//! Benchmarks: profiles, plans, the measurement a cell process makes, and the runner that
//! executes a plan cell by cell in isolated processes.
pub mod cell;
pub mod interrupt;
pub mod plan;
pub mod profile;
pub mod runner;
