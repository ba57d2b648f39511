//! What the integration tests share: the trickbench binary and the folders they work in, and
//! builders of the values they hand to the library (a run's description and spec, cell keys,
//! results and measurements, plan requests, whole synthetic results) with defaults that a test
//! changes only where its point lies.
//!
//! Each test crate declares `mod common;` and uses what it needs; what one crate leaves unused,
//! another uses.

pub mod cells;
pub mod cli;
pub mod dirs;
pub mod fixtures;
pub mod plan;
pub mod run;
pub mod slurm;
pub mod standin;
