//! A paired cell process: one or more cells (the arms) and their common reference built in one
//! process from the same initial weights, fed the same batches, their timed windows interleaved
//! ([`rotate`]). What one process does not share with another (memory and thread placement, a
//! neighbour's load that minute, a GPU's clocks) then falls on both sides of every pair and
//! cancels in their ratio, and the balanced order of the windows cancels a steady drift within
//! the process. A process of several arms (a multi-arm process) pays the start-up, the library
//! loading and the data once for all of them, and each reference window serves the arm on either
//! side of it.
//!
//! Each side is built in turn, its switches set first, and measured alone before the next one
//! exists: its warm-up, its memory peaks (less what the sides built before it hold,
//! [`memory::held`], with the allocator's unused cache returned first) and its GPU energy are its
//! own. The sides are built in an order reversed every other round ([`build_order`]). Then the
//! windows are timed, each side's switches (cuDNN autotuning, TF32, anomaly detection, the
//! attention backends) set before each of its windows. Each arm's step breakdown and profiler
//! trace follow, as in a process of the process design. An arm that fails drops out with its own
//! status while the others go on.

use super::data::{planned_steps, BatchSource, CellData, InputOptions};
use super::measure::{
    begin_energy, end_warmup, record_energy, unmeasured, wants_another_window, within_budget, CellContext,
    PROBE_STEPS,
};
use super::phases::record_breakdown;
use super::{announce, dropped_out, trace, CellJob, Outcome};
use crate::bench::faults;
use crate::bench::profile::Profile;
use crate::device::DeviceSpec;
use crate::error::Error;
use crate::measure::faults::FaultCount;
use crate::measure::memory;
use crate::measure::power::EnergySpan;
use crate::measure::timer::SyncedTimer;
use crate::results::machine::MachineState;
use crate::results::schema::{
    CellKey, CellKind, Memory, PairedWindow, PairedWindows, Phase, ProcessMeasurement, Side,
};
use crate::standin;
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

/// A side of a paired process (an arm, or the reference): its place in the process (the arms in
/// job order, then the reference), its job and what its context owns, the side itself and what
/// is measured of it.
struct Arm<W: Workload> {
    index: usize,
    job: CellJob,
    owned: SideContext,
    side: PairSide<W>,
    measurement: ProcessMeasurement,
}

impl<W: Workload> Arm<W> {
    /// After the windows, with its switches set again: where its training steps' time goes, its
    /// last mean loss, its profiler trace when its job asks for one, the machine, and on a
    /// rehearsed GPU the calls its side and the process stood in for.
    fn finish(&mut self, process: &CellContext) -> Result<(), Error> {
        let _scope = standin::SideScope::enter(self.index);
        announce(Some(&self.job.key.id()));
        let side_process = SideProcess::of(process, &self.job);
        finish_arm(&side_process.with(&self.owned), &mut self.side, &mut self.measurement)?;
        self.measurement.machine_after = Some(MachineState::read(process.device));
        if process.device.rehearsed().is_some() {
            self.measurement.stood_in = standin::taken_by(self.index);
        }
        Ok(())
    }
}

/// An arm of a paired process: measuring, or dropped out with the error that stopped it.
enum ArmState<W: Workload> {
    Live(Box<Arm<W>>),
    Dropped(Error),
}

/// Measures the arms of `process`'s job (its cell, then [`CellJob::arms`]) paired with the
/// reference of `reference_job`; `build` makes a trainer for a cell and its recipe on the
/// process's device, each after the process's seed is set again, so that every side starts from
/// the same weights. Returns what became of each arm in [`CellJob::members`] order, the
/// reference's own last where the job measures it ([`CellJob::measures_reference`]). An arm that
/// fails drops out with its own status and the others go on; the process fails only with its
/// reference.
///
/// The sides are built in [`build_order`] (reversed every other round), after the device's
/// libraries have taken what they keep for the process ([`memory::warm_libraries`], in the
/// engine's start), so that memory and energy read alike whatever a side's place.
pub(in crate::bench) fn measure<W: Workload>(
    process: &CellContext,
    reference_job: &CellJob,
    build: impl Fn(&CellKey, &Recipe) -> Result<Trainer<W>, Error>,
) -> Result<Vec<Outcome>, Error> {
    memory::empty_cache(process.device)?;
    let base = memory::held(process.device);
    let jobs = process.job.arm_jobs();
    let mut arms: Vec<Option<ArmState<W>>> = jobs.iter().map(|_| None).collect();
    let mut reference = None;
    // The reference is measured alone, as an arm, only where its measurement is kept.
    let measured = process.job.measures_reference.then_some(base);
    for index in build_order(jobs.len(), process.job.round) {
        match jobs.get(index) {
            Some(job) => {
                let built = build_arm(process, job.clone(), index, &build, Some(base));
                arms[index] = Some(built.map_or_else(ArmState::Dropped, |arm| ArmState::Live(Box::new(arm))));
            }
            None => reference = Some(build_arm(process, reference_job.clone(), index, &build, measured)?),
        }
    }
    let mut arms: Vec<ArmState<W>> = arms.into_iter().map(|a| a.expect("every arm is built")).collect();
    let mut reference = reference.expect("the reference is built");
    announce(None);
    let timed = time_windows(process.profile, process.device, &mut arms, &mut reference)?;
    for (arm, windows) in arms.iter_mut().zip(timed.arms) {
        if let ArmState::Live(arm) = arm {
            arm.measurement.paired = Some(PairedWindows { reference: reference_job.key.id(), windows });
        }
    }
    let mut members = arms;
    if process.job.measures_reference {
        members.push(ArmState::Live(Box::new(reference)));
    }
    finish_members(process, members, timed.timed_s)
}

/// The order in which a paired process of `arms` arms builds its sides: the arms (`0..arms`), then
/// the reference (`arms`); reversed in odd rounds, so that over two rounds each side's place
/// averages to the middle and a drift over the building and the sides' lone measurements (the
/// GPU warming, the allocator filling) favours none of them.
pub fn build_order(arms: usize, round: usize) -> Vec<usize> {
    let order = 0..=arms;
    if round.is_multiple_of(2) {
        order.collect()
    } else {
        order.rev().collect()
    }
}

/// What became of each of `members` after the windows: the live ones finished (an error there
/// drops that one out), each with its share of the process's `timed_s` and its count of the
/// process's measured cells.
fn finish_members<W: Workload>(
    process: &CellContext,
    members: Vec<ArmState<W>>,
    timed_s: f64,
) -> Result<Vec<Outcome>, Error> {
    let finished: Vec<ArmState<W>> = members
        .into_iter()
        .map(|member| match member {
            ArmState::Live(mut arm) => match arm.finish(process) {
                Ok(()) => ArmState::Live(arm),
                Err(e) => ArmState::Dropped(e),
            },
            dropped => dropped,
        })
        .collect();
    let cells = finished.iter().filter(|m| matches!(m, ArmState::Live(_))).count().max(1);
    Ok(finished
        .into_iter()
        .map(|member| match member {
            ArmState::Live(arm) => {
                let mut measurement = arm.measurement;
                measurement.process_cells = cells;
                measurement.timed_s = Some(timed_s / cells as f64);
                Ok(measurement)
            }
            ArmState::Dropped(error) => Err(dropped_out(&error)),
        })
        .collect())
}

/// The settings, data and recipe a side's cell trains with in `process`: the process's own for
/// its first arm, else the job's, sharing the process's data where the job would load the same.
struct SideContext {
    profile: Profile,
    data: Option<CellData>,
    recipe: Recipe,
}

/// What the side of `job` in `process` owns: its settings, its recipe, and its data where it
/// cannot share the process's.
fn owned_context(process: &CellContext, job: &CellJob) -> Result<SideContext, Error> {
    let profile = job.settings();
    let same_data =
        job.key.tricks.has(Trick::PackedDataset) == process.job.key.tricks.has(Trick::PackedDataset);
    let data = if same_data { None } else { Some(CellData::load(job, &profile)?) };
    let steps = planned_steps(&profile, data.as_ref().unwrap_or(process.data), job.key.batch_size);
    let recipe = Recipe::for_cell(&job.key, &profile.tta, steps, job.super_convergence);
    Ok(SideContext { profile, data, recipe })
}

/// A side's process context before it borrows its own settings: the job, the process's data and
/// where it runs.
struct SideProcess<'a> {
    job: &'a CellJob,
    shared: &'a CellData,
    device: DeviceSpec,
    rank: usize,
}

impl<'a> SideProcess<'a> {
    /// The side of `job` in `process`.
    fn of(process: &CellContext<'a>, job: &'a CellJob) -> Self {
        SideProcess { job, shared: process.data, device: process.device, rank: process.rank }
    }

    /// The context of this side, with `owned`'s settings, recipe and data (the process's where
    /// the side shares it).
    fn with<'b>(&'b self, owned: &'b SideContext) -> CellContext<'b>
    where
        'a: 'b,
    {
        CellContext {
            job: self.job,
            profile: &owned.profile,
            recipe: &owned.recipe,
            data: owned.data.as_ref().unwrap_or(self.shared),
            device: self.device,
            rank: self.rank,
        }
    }
}

/// Builds the side of `job`, the `index`th of `process`, and, with a `base` (what was held before
/// the first side was built), measures it alone, its memory peaks its own: less what the process
/// held beyond `base` when it was built (the sides built before it, the cache emptied first so
/// that blocks they no longer use do not count). Without a `base` the side is only warmed up (a
/// reference whose measurement is not kept). The side's switches are set before anything is
/// asked of its trainer, so that what it records (the attention kernel) is its own.
fn build_arm<W: Workload>(
    process: &CellContext,
    job: CellJob,
    index: usize,
    build: &impl Fn(&CellKey, &Recipe) -> Result<Trainer<W>, Error>,
    base: Option<Memory>,
) -> Result<Arm<W>, Error> {
    let _scope = standin::SideScope::enter(index);
    announce(Some(&job.key.id()));
    if base.is_some() {
        faults::inject_into_side(job.key.id().as_str())?;
    }
    let device = process.device;
    let others = match base {
        Some(base) => {
            memory::empty_cache(device)?;
            Some(memory::held(device).without(base))
        }
        None => None,
    };
    if others.is_some() {
        // The warm-up peaks from here on are this side's (over what the sides before it hold).
        memory::reset_peaks(device)?;
    }
    let owned = owned_context(process, &job)?;
    let side_process = SideProcess::of(process, &job);
    let context = side_process.with(&owned);
    apply_switches(&job.key, device)?;
    tch::manual_seed(job.key.seed as i64);
    let trainer = build(&job.key, &owned.recipe)?;
    let mut measurement = unmeasured(&job, &trainer)?;
    measurement.machine_before = Some(MachineState::read(device));
    let mut side = PairSide::new(&context, trainer)?;
    match others {
        Some(others) => measure_alone(&context, &mut side, &mut measurement, others)?,
        None => side.warm_up(process.profile, device)?,
    }
    Ok(Arm { index, job, owned, side, measurement })
}

/// The arm's side alone, before the next side is built: its warm-up (whose peaks are kept
/// apart), then at least a window's steps (and a memory probe's), and as many more as make the
/// GPU's energy span a second long; its memory peaks (a CUDA graph's capture among them, whose
/// pool holds the step's activations), less `others` (what the sides built before it hold), and
/// energy are recorded, and held to the job's memory budget.
fn measure_alone<W: Workload>(
    process: &CellContext,
    arm: &mut PairSide<W>,
    measurement: &mut ProcessMeasurement,
    others: Memory,
) -> Result<(), Error> {
    let device = process.device;
    arm.warm_up(process.profile, device)?;
    end_warmup(measurement, device)?;
    let mut energy = begin_energy(device);
    let mut steps = 0;
    let alone = process.profile.steps_per_window.max(PROBE_STEPS);
    while steps < alone || energy.as_ref().is_ok_and(EnergySpan::wants_more_time) {
        let samples = arm.step()?;
        if let Ok(span) = &mut energy {
            span.count(samples);
        }
        steps += 1;
    }
    record_energy(measurement, device, energy);
    let peaks = memory::peaks(device)?;
    let peaks = arm.trainer.capture_peaks().map_or(peaks, |capture| peaks.max(capture));
    measurement.memory = peaks.without(others);
    measurement.warmup_memory = measurement.warmup_memory.map(|w| w.without(others));
    let whole = measurement.warmup_memory.map_or(measurement.memory, |w| w.max(measurement.memory));
    within_budget(&whole, process.job.memory_budget_bytes)
}

/// What the windows of a paired process timed: each arm's windows with the reference's next to
/// them (none for an arm that dropped out), and the seconds in every window.
struct Timed {
    arms: Vec<Vec<PairedWindow>>,
    timed_s: f64,
}

/// Times the windows with this engine's sides ([`rotate`]). Each side's windows are also its
/// process measurement's windows, its samples and host reads of metrics counted. An arm whose
/// window fails drops out; the reference's failure fails the process.
fn time_windows<W: Workload>(
    profile: &Profile,
    device: DeviceSpec,
    arms: &mut [ArmState<W>],
    reference: &mut Arm<W>,
) -> Result<Timed, Error> {
    let mut timed_s = 0.0;
    let windows = rotate(profile, arms.len(), |side| {
        let Some(i) = side else {
            return Ok(Some(arm_window(reference, profile, device, &mut timed_s)?));
        };
        let ArmState::Live(arm) = &mut arms[i] else { return Ok(None) };
        match arm_window(arm, profile, device, &mut timed_s) {
            Ok(rate) => Ok(Some(rate)),
            Err(e) => {
                arms[i] = ArmState::Dropped(e);
                Ok(None)
            }
        }
    })?;
    Ok(Timed { arms: windows, timed_s })
}

/// Times one window of `arm`, adding its seconds to `timed_s`; returns its samples per second.
fn arm_window<W: Workload>(
    arm: &mut Arm<W>,
    profile: &Profile,
    device: DeviceSpec,
    timed_s: &mut f64,
) -> Result<f64, Error> {
    let _scope = standin::SideScope::enter(arm.index);
    let reads = arm.side.trainer.metrics_mut().host_reads();
    let faults = FaultCount::start();
    let (samples, seconds) = arm.side.window(profile.steps_per_window, device)?;
    arm.measurement.count_page_faults(faults.stop());
    arm.measurement.host_metric_reads += arm.side.trainer.metrics_mut().host_reads() - reads;
    *timed_s += seconds;
    Ok(record_window(&mut arm.measurement, samples, seconds))
}

/// Adds a window of `samples` over `seconds` to `measurement`'s windows and samples; returns its
/// throughput, samples per second.
pub(in crate::bench) fn record_window(
    measurement: &mut ProcessMeasurement,
    samples: usize,
    seconds: f64,
) -> f64 {
    let rate = samples as f64 / seconds;
    measurement.window_samples_per_s.push(rate);
    measurement.timed_samples += samples;
    rate
}

/// Times the windows of a paired process of `arms` arms and their reference with `window`
/// (which times one window of arm `Some(i)`, or of the reference for `None`, and returns its
/// samples per second, or `None` for an arm that has dropped out); returns each arm's windows,
/// paired with the reference's next to them.
///
/// One arm alternates with the reference, A B, B A, A B, … Several arms run in blocks, each
/// block every arm still measuring once, in the order of a row of a Williams design over them
/// ([`williams_rows`]: over its rows each arm follows each other arm equally often and takes each
/// place in the block equally often), the reference after every second arm:
/// R a₁ a₂ R a₃ a₄ R … The first arm of each two is paired with the reference window before it,
/// the second with the one after it, so each reference window serves the two arms beside it and
/// the reference takes a third of the windows, not half; over the rows each arm comes before its
/// reference as often as after it, so a steady drift within the process cancels.
///
/// An arm takes the profile's `windows_per_process` pairs, then more while the interval of its
/// pairs' median ratio is wider than a process needs ([`super::measure::process_half_width`]),
/// up to `max_windows_per_process`; an arm that needs no more, or that has dropped out, leaves
/// the blocks. Both engines pair through it.
pub fn rotate(
    profile: &Profile,
    arms: usize,
    mut window: impl FnMut(Option<usize>) -> Result<Option<f64>, Error>,
) -> Result<Vec<Vec<PairedWindow>>, Error> {
    let mut windows: Vec<Vec<PairedWindow>> = vec![Vec::new(); arms];
    let mut ratios: Vec<Vec<f64>> = vec![Vec::new(); arms];
    let mut dropped = vec![false; arms];
    let mut block = 0;
    // The last window's rate when it was the reference's (a window the next arm may pair with).
    let mut last_reference: Option<f64> = None;
    let reference = |window: &mut dyn FnMut(Option<usize>) -> Result<Option<f64>, Error>| {
        window(None)?
            .ok_or_else(|| Error::Invalid("the reference of a paired process has no window".to_owned()))
    };
    loop {
        let active: Vec<usize> =
            (0..arms).filter(|&i| !dropped[i] && wants_another_window(profile, &ratios[i])).collect();
        if active.is_empty() {
            return Ok(windows);
        }
        let order = block_order(&active, block);
        for chunk in order.chunks(2) {
            if active.len() == 1 && block % 2 == 1 {
                // One arm: A B, B A, … (the reference after the arm in odd blocks).
                match window(Some(chunk[0]))? {
                    Some(arm) => {
                        let after = reference(&mut window)?;
                        push_pair(&mut windows[chunk[0]], &mut ratios[chunk[0]], after, arm, false);
                    }
                    None => dropped[chunk[0]] = true,
                }
                last_reference = None;
                continue;
            }
            let before = match last_reference.take() {
                Some(rate) if active.len() > 1 => rate,
                _ => reference(&mut window)?,
            };
            match window(Some(chunk[0]))? {
                Some(first) => push_pair(&mut windows[chunk[0]], &mut ratios[chunk[0]], before, first, true),
                None => dropped[chunk[0]] = true,
            }
            if let Some(&second_arm) = chunk.get(1) {
                match window(Some(second_arm))? {
                    Some(second) => {
                        let after = reference(&mut window)?;
                        push_pair(&mut windows[second_arm], &mut ratios[second_arm], after, second, false);
                        last_reference = Some(after);
                    }
                    None => dropped[second_arm] = true,
                }
            }
        }
        block += 1;
    }
}

/// Adds a pair of windows (the reference's `reference` and the arm's `arm`, samples per second,
/// the reference first when `reference_first`) to an arm's `windows` and its `ratios`.
fn push_pair(
    windows: &mut Vec<PairedWindow>,
    ratios: &mut Vec<f64>,
    reference: f64,
    arm: f64,
    reference_first: bool,
) {
    let pair = ratios.len();
    let reference = PairedWindow { pair, side: Side::Reference, samples_per_s: reference };
    let arm_window = PairedWindow { pair, side: Side::Trick, samples_per_s: arm };
    if reference_first {
        windows.extend([reference, arm_window]);
    } else {
        windows.extend([arm_window, reference]);
    }
    ratios.push(arm / reference.samples_per_s);
}

/// The order of `active`'s arms in block `block`: row `block` of the Williams design over them.
fn block_order(active: &[usize], block: usize) -> Vec<usize> {
    let rows = williams_rows(active.len());
    rows[block % rows.len()].iter().map(|&i| active[i]).collect()
}

/// The rows of a Williams design over `n` treatments: orders of `0..n` in which each treatment
/// takes each place equally often and follows each other treatment equally often (first-order
/// carry-over balance); `n` rows for an even `n`, `2n` (each row and its reverse) for an odd one.
pub fn williams_rows(n: usize) -> Vec<Vec<usize>> {
    if n == 0 {
        return vec![Vec::new()];
    }
    // 0, 1, n-1, 2, n-2, …: consecutive differences that cover every nonzero residue once.
    let base: Vec<usize> = (0..n).map(|j| if j % 2 == 1 { j.div_ceil(2) } else { (n - j / 2) % n }).collect();
    let rows: Vec<Vec<usize>> = (0..n).map(|r| base.iter().map(|&b| (b + r) % n).collect()).collect();
    if n.is_multiple_of(2) {
        return rows;
    }
    let reversed: Vec<Vec<usize>> = rows.iter().map(|row| row.iter().rev().copied().collect()).collect();
    rows.into_iter().chain(reversed).collect()
}

/// The arm's side after the windows, with its switches set again: where its training steps' time
/// goes, its last mean loss, and its profiler trace when the job asks for one.
fn finish_arm<W: Workload>(
    process: &CellContext,
    arm: &mut PairSide<W>,
    measurement: &mut ProcessMeasurement,
) -> Result<(), Error> {
    apply_switches(&arm.key, process.device)?;
    if arm.key.kind == (CellKind::Throughput { phase: Phase::Train }) {
        let lr = arm.lr;
        record_breakdown(process, &mut arm.trainer, arm.batches.as_mut(), lr, measurement)?;
        arm.trainer.metrics_mut().flush();
        measurement.last_loss = arm.trainer.metrics_mut().last_mean_loss();
    }
    trace::record(process, measurement, || arm.step().map(drop))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bench::profile::ProfileName;
    use crate::workloads::Family;

    /// Checks the two balance properties of a Williams design over `n` treatments.
    fn check_balance(n: usize) {
        let rows = williams_rows(n);
        for row in &rows {
            let mut sorted = row.clone();
            sorted.sort_unstable();
            assert_eq!(sorted, (0..n).collect::<Vec<_>>(), "{n}: {row:?} is an order of every treatment");
        }
        let mut places = vec![vec![0; n]; n];
        let mut follows = vec![vec![0; n]; n];
        for row in &rows {
            for (place, &t) in row.iter().enumerate() {
                places[t][place] += 1;
            }
            for pair in row.windows(2) {
                follows[pair[0]][pair[1]] += 1;
            }
        }
        let per_place = rows.len() / n;
        assert!(places.iter().flatten().all(|&c| c == per_place), "{n}: places {places:?}");
        let per_neighbour = if n.is_multiple_of(2) { 1 } else { 2 };
        for (a, row) in follows.iter().enumerate() {
            for (b, &count) in row.iter().enumerate() {
                assert_eq!(count, if a == b { 0 } else { per_neighbour }, "{n}: {b} after {a}");
            }
        }
    }

    #[test]
    fn the_sides_are_built_in_an_order_reversed_every_other_round() {
        assert_eq!(build_order(3, 0), [0, 1, 2, 3], "the arms, then the reference");
        assert_eq!(build_order(3, 1), [3, 2, 1, 0], "the reference first");
        assert_eq!(build_order(3, 2), build_order(3, 0));
        // Over two rounds every side's place averages to the middle.
        for side in 0..=3 {
            let place = |round| build_order(3, round).iter().position(|&s| s == side).unwrap();
            assert_eq!(place(0) + place(1), 3, "side {side}");
        }
    }

    #[test]
    fn williams_rows_balance_places_and_neighbours() {
        for n in 1..=11 {
            check_balance(n);
        }
    }

    /// A profile of 24 pairs a process, no more.
    fn profile() -> Profile {
        let smoke = ProfileName::Smoke.settings(Family::CifarResnet);
        Profile { windows_per_process: 24, max_windows_per_process: 24, ..smoke }
    }

    /// The windows `rotate` asks for, on a stand-in whose reference runs at 100 samples/s and
    /// arm `i` at `100 × (1 + i/10)`.
    fn rotated(arms: usize) -> (Vec<Option<usize>>, Vec<Vec<PairedWindow>>) {
        let profile = profile();
        let mut asked = Vec::new();
        let windows = rotate(&profile, arms, |side| {
            asked.push(side);
            Ok(Some(side.map_or(100.0, |i| 100.0 * (1.0 + i as f64 / 10.0))))
        })
        .unwrap();
        (asked, windows)
    }

    #[test]
    fn several_arms_share_each_reference_window_and_keep_their_own_ratios() {
        let (asked, windows) = rotated(4);
        let references = asked.iter().filter(|s| s.is_none()).count();
        let profile = profile();
        assert!(
            references * 2 <= asked.len() * 2 / 3 + 2,
            "a third of {} windows, not {references}",
            asked.len()
        );
        for (i, arm) in windows.iter().enumerate() {
            let ratios: Vec<f64> = arm
                .chunks(2)
                .map(|p| {
                    let rate = |side| p.iter().find(|w| w.side == side).unwrap().samples_per_s;
                    rate(Side::Trick) / rate(Side::Reference)
                })
                .collect();
            assert!(ratios.len() >= profile.windows_per_process, "arm {i}: {} pairs", ratios.len());
            assert!(
                ratios.iter().all(|r| (r - (1.0 + i as f64 / 10.0)).abs() < 1e-12),
                "arm {i}: {ratios:?}"
            );
            let first = arm.chunks(2).filter(|p| p[0].side == Side::Reference).count();
            let pairs = arm.len() / 2;
            assert!(
                first.abs_diff(pairs - first) <= pairs / 4 + 1,
                "arm {i}: reference first in {first} of {pairs}"
            );
        }
        assert!(
            asked.windows(2).all(|w| w[0].is_some() || w[1].is_some()),
            "never two reference windows in a row"
        );
    }

    #[test]
    fn one_arm_alternates_with_its_reference() {
        let (asked, windows) = rotated(1);
        assert_eq!(asked.len(), windows[0].len());
        for (pair, w) in windows[0].chunks(2).enumerate() {
            let expected = if pair % 2 == 0 { Side::Reference } else { Side::Trick };
            assert_eq!(w[0].side, expected, "pair {pair}");
        }
    }
}
