//! `trickbench crosscheck`: is a trick's effect on the PyTorch engine the effect a user's own
//! plain script gets? For each trick a minimal eager script covers
//! ([`scripts/crosscheck/plain.py`](../../scripts/crosscheck/plain.py), written apart from the
//! engine), each round runs one engine process of the trick's cell paired with its reference, as
//! a run measures it, and one process of the plain script paired the same way: both sides built
//! in one process, the same warm-up, as many pairs of windows of as many steps, in the order
//! A B, B A, …. Each source's effect is the median of its pair ratios with the interval a run
//! gives a paired effect ([`crate::stats::paired_median_ci`]), and the two agree where their
//! intervals overlap, as two engines' effects do.

pub mod config;
pub mod results;
pub mod session;
pub mod summary;

use crate::tricks::Trick;
use crate::workloads::WorkloadId;

/// The plain script, built into the binary and written beside the results it measured.
pub const PLAIN_SCRIPT: &str = include_str!("../../scripts/crosscheck/plain.py");

/// The tricks the plain script writes, per workload, as its `--list` prints them.
pub const PLAIN_TRICKS: [(WorkloadId, &[Trick]); 2] = [
    (
        WorkloadId::Resnet8,
        &[
            Trick::ChannelsLast,
            Trick::ZeroGradNone,
            Trick::FusedOptimizer,
            Trick::NoBiasBeforeBn,
            Trick::DebugOff,
        ],
    ),
    (WorkloadId::GptMini, &[Trick::FlashAttention, Trick::JitFusion]),
];

/// The tricks the plain script writes for `workload` (none for a workload it does not build).
pub fn plain_tricks(workload: WorkloadId) -> &'static [Trick] {
    PLAIN_TRICKS.iter().find(|(w, _)| *w == workload).map_or(&[], |(_, tricks)| tricks)
}
