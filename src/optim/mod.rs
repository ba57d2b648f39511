//! Optimizers and learning-rate schedules.
pub mod schedule;
pub mod sgd;
