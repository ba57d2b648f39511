//! A paired cell process: the cell and its reference built in one process from the same initial
//! weights, fed the same batches, their timed windows alternating A B, B A, A B, … (A the
//! reference). What one process does not share with another (memory and thread placement, a
//! neighbour's load that minute, a GPU's clocks) then falls on both sides of every pair and
//! cancels in their ratio, and the order of the pairs cancels a steady drift within the process.
//!
//! The cell's side is built first and measured alone, before the reference exists: its warm-up,
//! its memory peaks and its GPU energy are its own. Then the reference is built and warmed up,
//! and the pairs are timed, each side's switches (cuDNN autotuning, TF32, anomaly detection, the
//! attention backends) set before each of its windows. The cell's step breakdown and profiler
//! trace follow, as in a process of the process design.

use super::data::{planned_steps, BatchSource, CellData, InputOptions};
use super::measure::{
    begin_energy, end_warmup, record_energy, unmeasured, wants_another_window, within_budget, CellContext,
    PROBE_STEPS,
};
use super::phases::record_breakdown;
use super::{trace, CellJob};
use crate::bench::profile::Profile;
use crate::device::DeviceSpec;
use crate::error::Error;
use crate::measure::memory;
use crate::measure::power::EnergySpan;
use crate::measure::timer::SyncedTimer;
use crate::results::machine::MachineState;
use crate::results::schema::{
    CellKey, CellKind, PairedWindow, PairedWindows, Phase, ProcessMeasurement, Side,
};
use crate::train::recipe::Recipe;
use crate::train::{apply_switches, Trainer};
use crate::tricks::Trick;
use crate::workloads::Workload;

/// One side of a paired process: its cell, the trainer and batches it times, and the learning
/// rate of its steps.
struct PairSide<W: Workload> {
    key: CellKey,
    trainer: Trainer<W>,
    batches: Box<dyn BatchSource>,
    lr: f64,
}

impl<W: Workload> PairSide<W> {
    /// The side of `process`'s cell, trained by `trainer` on batches drawn as the process design
    /// draws them (held-out batches for an evaluation cell).
    fn new(process: &CellContext, trainer: Trainer<W>) -> Result<Self, Error> {
        let job = process.job;
        let inputs = InputOptions {
            batch_size: job.key.batch_size,
            seed: job.round_seed(0),
            recipe: process.recipe,
            job,
            device: process.device,
        };
        let batches = process.data.timed_batches(job.key.kind, &inputs)?;
        Ok(PairSide { key: job.key.clone(), trainer, batches, lr: process.recipe.schedule.lr(0) })
    }

    /// Runs one training step (or evaluation batch, under no-grad for `no-grad-eval`) and returns
    /// its samples.
    fn step(&mut self) -> Result<usize, Error> {
        let batch = self.batches.next_batch()?;
        if self.key.kind == (CellKind::Throughput { phase: Phase::Eval }) {
            // The count of correct predictions stays on the device: no host read per batch.
            let _correct = self.trainer.eval_batch(&batch, self.key.tricks.has(Trick::NoGradEval))?;
        } else {
            self.trainer.train_step(&batch, self.lr)?;
        }
        Ok(batch.len())
    }

    /// Sets the side's switches, then runs its warm-up steps (at least those that reach a
    /// training step's steady state).
    fn warm_up(&mut self, profile: &Profile, device: DeviceSpec) -> Result<(), Error> {
        apply_switches(&self.key, device)?;
        let steady = match self.key.kind {
            CellKind::Throughput { phase: Phase::Eval } => 0,
            _ => self.trainer.steps_before_steady_state(),
        };
        for _ in 0..profile.warmup_steps.max(steady) {
            self.step()?;
        }
        Ok(())
    }

    /// Sets the side's switches, then times `steps` steps with the device synchronised at both
    /// edges: the samples and the seconds.
    fn window(&mut self, steps: usize, device: DeviceSpec) -> Result<(usize, f64), Error> {
        apply_switches(&self.key, device)?;
        let timer = SyncedTimer::start(device);
        let mut samples = 0;
        for _ in 0..steps {
            samples += self.step()?;
        }
        Ok((samples, timer.stop()))
    }
}

/// Measures the cell of `process` paired with the reference of `reference_job`, the cell trained
/// by `trainer`; `build` makes a trainer for a cell and its recipe on the process's device (the
/// reference's, after the process's seed is set again, so both start from the same weights).
pub(in crate::bench) fn measure<W: Workload>(
    process: &CellContext,
    reference_job: &CellJob,
    trainer: Trainer<W>,
    build: impl FnOnce(&CellKey, &Recipe) -> Result<Trainer<W>, Error>,
) -> Result<ProcessMeasurement, Error> {
    let device = process.device;
    let mut measurement = unmeasured(process.job, &trainer)?;
    measurement.machine_before = Some(MachineState::read(device));
    let mut trick = PairSide::new(process, trainer)?;
    measure_alone(process, &mut trick, &mut measurement)?;

    let profile = reference_job.settings();
    let data = CellData::load(reference_job, &profile)?;
    let steps = planned_steps(&profile, &data, reference_job.key.batch_size);
    let recipe = Recipe::for_cell(&reference_job.key, &profile.tta, steps, reference_job.super_convergence);
    tch::manual_seed(reference_job.key.seed as i64);
    let built = build(&reference_job.key, &recipe)?;
    let reference_process =
        CellContext { job: reference_job, profile: &profile, recipe: &recipe, data: &data, ..*process };
    let mut reference = PairSide::new(&reference_process, built)?;
    reference.warm_up(process.profile, device)?;

    let windows = time_pairs(process.profile, device, &mut trick, &mut reference, &mut measurement)?;
    measurement.paired = Some(PairedWindows { reference: reference_job.key.id(), windows });
    drop(reference);
    finish_trick_side(process, &mut trick, &mut measurement)?;
    measurement.machine_after = Some(MachineState::read(device));
    Ok(measurement)
}

/// The cell's side alone, before the reference is built: its warm-up (whose peaks are kept
/// apart), then at least a window's steps (and a memory probe's), and as many more as make the
/// GPU's energy span a second long; its memory peaks and energy are recorded, and held to the job's memory budget.
fn measure_alone<W: Workload>(
    process: &CellContext,
    trick: &mut PairSide<W>,
    measurement: &mut ProcessMeasurement,
) -> Result<(), Error> {
    let device = process.device;
    trick.warm_up(process.profile, device)?;
    end_warmup(measurement, device)?;
    let mut energy = begin_energy(device);
    let mut steps = 0;
    let alone = process.profile.steps_per_window.max(PROBE_STEPS);
    while steps < alone || energy.as_ref().is_ok_and(EnergySpan::wants_more_time) {
        let samples = trick.step()?;
        if let Ok(span) = &mut energy {
            span.count(samples);
        }
        steps += 1;
    }
    record_energy(measurement, device, energy);
    measurement.memory = memory::peaks(device)?;
    let whole = measurement.warmup_memory.map_or(measurement.memory, |w| w.max(measurement.memory));
    within_budget(&whole, process.job.memory_budget_bytes)
}

/// Times the pairs with this engine's sides ([`alternate`]). The cell's windows are also its
/// process's windows, its samples and host reads of metrics counted.
fn time_pairs<W: Workload>(
    profile: &Profile,
    device: DeviceSpec,
    trick: &mut PairSide<W>,
    reference: &mut PairSide<W>,
    measurement: &mut ProcessMeasurement,
) -> Result<Vec<PairedWindow>, Error> {
    alternate(profile, |side| {
        Ok(match side {
            Side::Reference => timed(reference.window(profile.steps_per_window, device)?, measurement),
            Side::Trick => {
                let reads = trick.trainer.metrics_mut().host_reads();
                let (samples, seconds) = trick.window(profile.steps_per_window, device)?;
                measurement.host_metric_reads += trick.trainer.metrics_mut().host_reads() - reads;
                measurement.timed_samples += samples;
                let rate = timed((samples, seconds), measurement);
                measurement.window_samples_per_s.push(rate);
                rate
            }
        })
    })
}

/// Times pairs of windows with `window` (which times one window of a side and returns its
/// samples per second), the reference first in even pairs and the cell first in odd ones, so that
/// a steady drift within the process cancels: the profile's `windows_per_process` pairs, then more
/// while the interval of the pairs' median ratio is wider than a process needs
/// ([`super::measure::process_half_width`]), up to `max_windows_per_process`. Returns every
/// window in the order it ran. Both engines pair through it.
pub(in crate::bench) fn alternate(
    profile: &Profile,
    mut window: impl FnMut(Side) -> Result<f64, Error>,
) -> Result<Vec<PairedWindow>, Error> {
    let mut windows = Vec::new();
    let mut ratios: Vec<f64> = Vec::new();
    while wants_another_window(profile, &ratios) {
        let pair = ratios.len();
        let order = if pair.is_multiple_of(2) {
            [Side::Reference, Side::Trick]
        } else {
            [Side::Trick, Side::Reference]
        };
        let mut rates = [0.0; 2];
        for side in order {
            let rate = window(side)?;
            rates[side as usize] = rate;
            windows.push(PairedWindow { pair, side, samples_per_s: rate });
        }
        ratios.push(rates[Side::Trick as usize] / rates[Side::Reference as usize]);
    }
    Ok(windows)
}

/// Adds a window of `samples` over `seconds` to the process's timed seconds; returns its
/// throughput, samples per second.
fn timed((samples, seconds): (usize, f64), measurement: &mut ProcessMeasurement) -> f64 {
    *measurement.timed_s.get_or_insert(0.0) += seconds;
    samples as f64 / seconds
}

/// The cell's side after the pairs, with its switches set again: where its training steps' time
/// goes, its last mean loss, and its profiler trace when the job asks for one.
fn finish_trick_side<W: Workload>(
    process: &CellContext,
    trick: &mut PairSide<W>,
    measurement: &mut ProcessMeasurement,
) -> Result<(), Error> {
    apply_switches(&trick.key, process.device)?;
    if trick.key.kind == (CellKind::Throughput { phase: Phase::Train }) {
        let lr = trick.lr;
        record_breakdown(process, &mut trick.trainer, trick.batches.as_mut(), lr, measurement)?;
        trick.trainer.metrics_mut().flush();
        measurement.last_loss = trick.trainer.metrics_mut().last_mean_loss();
    }
    trace::record(process, measurement, || trick.step().map(drop))
}
