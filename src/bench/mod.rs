//! Benchmarks: a run's configuration and inputs, the designs and their phases, profiles and their
//! overrides, plans, the engines a cell trains on behind one trait and the contract between the
//! plan and them, the cell process, the
//! measurement it makes and the faults tests inject into it, the runner that executes a plan cell
//! by cell in isolated processes (several arms of one reference sharing one) and stops a cell once
//! its verdict is decided, the session that drives a whole run, what a run shows while it
//! runs, the split of a plan into shards and their merge, the speedrun's choice of tricks, the lock
//! that keeps one run per output folder, which cells are traced with the profiler, and the fit of an
//! ablation into a time budget.
pub mod budget;
pub mod cell;
pub mod cell_process;
pub mod config;
pub mod contract;
pub mod design;
pub(crate) mod engines;
pub mod faults;
pub mod inputs;
pub mod interrupt;
pub mod lock;
pub mod merge;
pub mod overrides;
pub mod plan;
pub mod processes;
pub mod profile;
pub mod progress;
pub mod runner;
pub mod session;
pub mod shard;
pub mod speedrun;
pub mod stopping;
pub mod trace;
pub mod user_model;
