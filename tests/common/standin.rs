//! A stand-in machine for the runner (`runner::run`): window throughputs drawn from a seeded model
//! of a noisy 2-core VM, laid out by the real rotation of arms and reference windows
//! ([`rotate`]), no training and no timing.
//!
//! Each process has an offset drawn from ±20% (shared by all its windows, so it cancels in a
//! pair), each arm a ratio of its own in each process drawn from ±1.5% around its true effect
//! (what differs between processes and does not cancel), throughput falling by 4% over a
//! process's windows, and ±2% jitter per window.

use std::time::Duration;

use rand::{RngExt, SeedableRng};
use rand_chacha::ChaCha8Rng;
use trickbench::bench::cell::{rotate, CellJob};
use trickbench::bench::runner::{CellExecutor, Execution};
use trickbench::measure::host_allocator::HostAllocator;
use trickbench::results::schema::{
    ArmsPerProcess, CellKey, MeasurementDesign, PairedWindows, ProcessMeasurement, Protocol, Side,
};

use super::cells::measurement;
use super::run::protocol;

/// The reference's throughput with no offset, drift or jitter, samples per second.
const BASE_SAMPLES_PER_S: f64 = 1000.0;
/// A process's offset factor is drawn uniformly from 1 ± this.
const PROCESS_OFFSET: f64 = 0.20;
/// An arm's ratio in one process is its true effect times a factor drawn from 1 ± this.
const PROCESS_WOBBLE: f64 = 0.015;
/// Throughput falls linearly by this fraction over a process's windows.
const DRIFT: f64 = 0.04;
/// Each window's throughput is multiplied by a factor drawn uniformly from 1 ± this.
const JITTER: f64 = 0.02;

/// The protocol the stand-in's runs measure by: 3 rounds, paired, every arm of a reference in one
/// process, 20 to 60 pairs a process, asking ±3%.
pub fn standin_protocol() -> Protocol {
    Protocol {
        rounds: 3,
        windows_per_process: 20,
        max_windows_per_process: Some(60),
        target_ci_half_width: Some(0.03),
        pairing: MeasurementDesign::Paired,
        arms_per_process: ArmsPerProcess::Many,
        host_allocator: HostAllocator::Tuned,
        ..protocol()
    }
}

/// The stand-in machine: measures every cell of a job as the model above says, each cell's true
/// effect against the baseline given by `true_effect`.
pub struct StandIn {
    rng: ChaCha8Rng,
    true_effect: fn(&CellKey) -> f64,
    /// Every job it was given, in order.
    pub jobs: Vec<CellJob>,
}

impl StandIn {
    /// The machine of random stream `seed`, with cells' true effects from `true_effect`.
    pub fn new(seed: u64, true_effect: fn(&CellKey) -> f64) -> Self {
        StandIn { rng: ChaCha8Rng::seed_from_u64(seed), true_effect, jobs: Vec::new() }
    }

    /// The window throughput of a side `effect` × the reference, the `index`th of about `windows`
    /// in a process with `offset`.
    fn window(&mut self, offset: f64, effect: f64, index: usize, windows: usize) -> f64 {
        let drift = 1.0 - DRIFT * (index as f64 / windows as f64).min(1.0);
        let jitter = 1.0 + self.rng.random_range(-JITTER..JITTER);
        BASE_SAMPLES_PER_S * effect * offset * drift * jitter
    }
}

impl CellExecutor for StandIn {
    fn execute(&mut self, job: &CellJob, _timeout: Duration) -> Execution {
        self.jobs.push(job.clone());
        let offset = 1.0 + self.rng.random_range(-PROCESS_OFFSET..PROCESS_OFFSET);
        let profile = job.settings();
        let true_effect = self.true_effect;
        let Some(reference) = &job.paired_with else {
            let windows = (0..profile.windows_per_process)
                .map(|i| self.window(offset, true_effect(&job.key), i, profile.windows_per_process))
                .collect();
            return Execution::Measured(vec![Ok(measurement(job.round, windows))]);
        };
        let arms: Vec<CellKey> = std::iter::once(job.key.clone()).chain(job.arms.iter().cloned()).collect();
        let effects: Vec<f64> = arms
            .iter()
            .map(|k| true_effect(k) * (1.0 + self.rng.random_range(-PROCESS_WOBBLE..PROCESS_WOBBLE)))
            .collect();
        let expected = profile.windows_per_process * (arms.len() * 3).div_ceil(2);
        let (mut index, mut reference_windows) = (0, Vec::new());
        let paired = rotate(&profile, arms.len(), |side| {
            let rate = self.window(offset, side.map_or(1.0, |i| effects[i]), index, expected);
            index += 1;
            if side.is_none() {
                reference_windows.push(rate);
            }
            Ok(Some(rate))
        })
        .unwrap();
        let mut measured: Vec<ProcessMeasurement> = paired
            .into_iter()
            .map(|windows| {
                let own = windows.iter().filter(|w| w.side == Side::Trick).map(|w| w.samples_per_s).collect();
                ProcessMeasurement {
                    paired: Some(PairedWindows { reference: reference.id(), windows }),
                    ..measurement(job.round, own)
                }
            })
            .collect();
        if job.measures_reference {
            measured.push(measurement(job.round, reference_windows));
        }
        let cells = measured.len();
        measured.iter_mut().for_each(|m| m.process_cells = cells);
        Execution::Measured(measured.into_iter().map(Ok).collect())
    }
}
