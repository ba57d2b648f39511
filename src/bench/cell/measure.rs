//! What a cell process measures: throughput over timed windows after a warm-up, the peak memory
//! of a batch size, and the memory budget every kind of cell is held to.

use super::data::{CellData, InputOptions};
use super::phases::record_breakdown;
use super::trace;
use super::tta::train_to_target;
use super::CellJob;
use crate::bench::profile::Profile;
use crate::device::DeviceSpec;
use crate::error::Error;
use crate::measure::energy::EnergyError;
use crate::measure::faults::FaultCount;
use crate::measure::memory;
use crate::measure::power::{EnergyMeter, EnergySpan};
use crate::measure::timer::{synchronize, SyncedTimer};
use crate::results::machine::MachineState;
use crate::results::schema::CellKey;
use crate::results::schema::{CellKind, Memory, Phase, ProcessMeasurement};
use crate::stats::{median_ci, relative_half_width};
use crate::train::recipe::Recipe;
use crate::train::Trainer;
use crate::tricks::{Trick, TrickSet};
use crate::vocabulary::{AttentionBackend, StandIn};
use crate::workloads::gpt::NO_ATTENTION_KERNEL;
use crate::workloads::{Family, Workload};

/// Training steps of a memory probe (after the steps that reach the steady state).
pub const PROBE_STEPS: usize = 2;

/// What a cell process measures with, besides its trainer: the job, its settings and recipe, its
/// data, and where the process runs.
pub(in crate::bench) struct CellContext<'a> {
    /// The job the process was handed.
    pub(in crate::bench) job: &'a CellJob,
    /// The job's settings ([`CellJob::settings`]).
    pub(in crate::bench) profile: &'a Profile,
    /// The recipe the cell trains with.
    pub(in crate::bench) recipe: &'a Recipe,
    /// The cell's data.
    pub(in crate::bench) data: &'a CellData,
    /// The device the process runs on (a DDP rank's own).
    pub(in crate::bench) device: DeviceSpec,
    /// The process's DDP rank (0 without DDP).
    pub(in crate::bench) rank: usize,
}

/// Measures what the cell's kind asks for with `trainer` in `process`. Each DDP rank draws its
/// own batches of the cell's size, and throughput counts every rank's samples (the ranks step in
/// lock-step, bound by the gradient all-reduce); DataParallel draws batches of the cell's size
/// times its number of devices. The machine's state is read before and after, outside every
/// timed window.
pub(in crate::bench) fn measure<W: Workload>(
    process: &CellContext,
    mut trainer: Trainer<W>,
) -> Result<ProcessMeasurement, Error> {
    let job = process.job;
    let batch_size = job.key.batch_size * trainer.data_parallel_width();
    let inputs = InputOptions {
        batch_size,
        seed: job.round_seed(process.rank),
        recipe: process.recipe,
        job,
        device: process.device,
    };
    let ranks = trainer.ddp_world_size();
    let mut measurement = unmeasured(job, &trainer)?;
    measurement.machine_before = Some(MachineState::read(process.device));
    match job.key.kind {
        CellKind::Throughput { phase: Phase::Train } => {
            time_training(process, &inputs, &mut trainer, &mut measurement)?
        }
        CellKind::Throughput { phase: Phase::Eval } => {
            time_evaluation(process, &inputs, &mut trainer, &mut measurement)?
        }
        CellKind::TimeToAccuracy => {
            memory::reset_peaks(process.device)?;
            let tta = train_to_target(process, &inputs, &mut trainer)?;
            measurement.last_loss = tta.curve.last().and_then(|p| p.train_loss);
            measurement.time_to_accuracy = Some(tta);
        }
        CellKind::MemoryProbe => {
            measurement.last_loss = probe_memory(process, &inputs, &mut trainer)?;
        }
    }
    measurement.machine_after = Some(MachineState::read(process.device));
    for window in &mut measurement.window_samples_per_s {
        *window *= ranks as f64;
    }
    if let Some(breakdown) = &mut measurement.step_breakdown {
        breakdown.samples_per_s *= ranks as f64;
    }
    measurement.timed_samples *= ranks;
    record_peaks(process, measurement)
}

/// The measurement of the cell `job` before anything is measured: what `trainer` runs (precision,
/// attention kernel, FLOPs per sample), with no windows, memory or time to accuracy yet.
pub(in crate::bench) fn unmeasured<W: Workload>(
    job: &CellJob,
    trainer: &Trainer<W>,
) -> Result<ProcessMeasurement, Error> {
    let flops_per_sample =
        timed_flops_per_sample(job.key.kind, trainer.workload().forward_flops_per_sample());
    let attention_backend = match job.device.rehearsed() {
        Some(_) if uses_sdpa(&job.key) => rehearsed_attention_backend(&job.key),
        _ => trainer
            .attention_backend(job.key.batch_size)
            .map_err(|e| forced_backend_without_kernel(&job.key.tricks, e))?,
    };
    Ok(ProcessMeasurement {
        attention_backend,
        ..ProcessMeasurement::new(job.round, flops_per_sample, trainer.precision())
    })
}

/// Whether the cell `key`'s GPT attends through `scaled_dot_product_attention` (under
/// `flash-attention` or a trick that forces one of its backends).
fn uses_sdpa(key: &CellKey) -> bool {
    key.workload.family() == Family::CharGpt
        && (key.tricks.has(Trick::FlashAttention) || key.tricks.forced_attention_backend().is_some())
}

/// The kernel a rehearsed GPU's SDPA would run for the cell `key`: the backend its tricks force,
/// else not known on the CPU ([`StandIn::SdpaChoice`]).
fn rehearsed_attention_backend(key: &CellKey) -> Option<AttentionBackend> {
    crate::standin::record(StandIn::SdpaChoice);
    key.tricks.forced_attention_backend()
}

/// `error` as [`Error::NotApplicable`] when `tricks` force an attention backend and `error` says
/// that libtorch has no kernel for the inputs with it ([`NO_ATTENTION_KERNEL`]): the reason names
/// the trick and gives the first line of libtorch's message. Any other error is kept as it is.
fn forced_backend_without_kernel(tricks: &TrickSet, error: Error) -> Error {
    let forcing = tricks.iter().find(|t| t.forced_attention_backend().is_some());
    match (forcing, &error) {
        (Some(trick), Error::Torch(message)) if message.starts_with(NO_ATTENTION_KERNEL) => {
            let first_line = message.lines().next().unwrap_or_default();
            Error::not_applicable(&format!("{trick}: {first_line}"))
        }
        _ => error,
    }
}

/// FLOPs per sample of the work a cell of `kind` times, from its network's forward FLOPs:
/// the forward pass alone for evaluation, forward and backward (about twice the forward) for
/// training.
pub(in crate::bench) fn timed_flops_per_sample(kind: CellKind, forward_flops: f64) -> f64 {
    if kind == (CellKind::Throughput { phase: Phase::Eval }) {
        forward_flops
    } else {
        3.0 * forward_flops
    }
}

/// Training throughput: the warm-up steps (at least those that reach the steady state), then the
/// timed windows of training steps at the schedule's first learning rate, recording the host
/// reads of metrics in the windows (and the untimed steps that complete the energy span), then
/// one window of steps timed phase by phase, and the last mean loss; then the profiler trace, if
/// asked for.
fn time_training<W: Workload>(
    process: &CellContext,
    inputs: &InputOptions,
    trainer: &mut Trainer<W>,
    measurement: &mut ProcessMeasurement,
) -> Result<(), Error> {
    let mut loader = process.data.training(inputs)?;
    let lr = process.recipe.schedule.lr(0);
    for _ in 0..process.profile.warmup_steps.max(trainer.steps_before_steady_state()) {
        trainer.train_step(&loader.next_batch()?, lr)?;
    }
    end_warmup(measurement, process.device)?;
    time_windows(process.profile, process.device, measurement, trainer, |trainer| {
        let batch = loader.next_batch()?;
        trainer.train_step(&batch, lr)?;
        Ok(batch.len())
    })?;
    record_breakdown(process, trainer, loader.as_mut(), lr, measurement)?;
    trainer.metrics_mut().flush();
    measurement.last_loss = trainer.metrics_mut().last_mean_loss();
    trace::record(process, measurement, || trainer.train_step(&loader.next_batch()?, lr))
}

/// Evaluation throughput: the warm-up batches, then the timed windows of evaluation batches, with
/// gradients off under `no-grad-eval`; then the profiler trace, if asked for.
fn time_evaluation<W: Workload>(
    process: &CellContext,
    inputs: &InputOptions,
    trainer: &mut Trainer<W>,
    measurement: &mut ProcessMeasurement,
) -> Result<(), Error> {
    let no_grad = process.job.key.tricks.has(Trick::NoGradEval);
    // Evaluation batches drawn endlessly from the held-out split (order is irrelevant to speed).
    let mut batches = process.data.held_out_endless(inputs)?;
    for _ in 0..process.profile.warmup_steps {
        let _warmup = trainer.eval_batch(&batches.next_batch()?, no_grad)?;
    }
    end_warmup(measurement, process.device)?;
    time_windows(process.profile, process.device, measurement, trainer, |trainer| {
        let batch = batches.next_batch()?;
        // The count of correct predictions stays on the device: no host read per batch.
        let _correct = trainer.eval_batch(&batch, no_grad)?;
        Ok(batch.len())
    })?;
    trace::record(process, measurement, || trainer.eval_batch(&batches.next_batch()?, no_grad).map(drop))
}

/// A memory probe: the steps that reach the steady state and [`PROBE_STEPS`] more, failing as
/// soon as the peak so far exceeds the job's budget; returns the last mean loss.
fn probe_memory<W: Workload>(
    process: &CellContext,
    inputs: &InputOptions,
    trainer: &mut Trainer<W>,
) -> Result<Option<f64>, Error> {
    // A probe's peak covers warm-up too: a batch fits only if every step of it fits.
    memory::reset_peaks(process.device)?;
    let mut loader = process.data.training(inputs)?;
    let lr = process.recipe.schedule.lr(0);
    for _ in 0..trainer.steps_before_steady_state() + PROBE_STEPS {
        trainer.train_step(&loader.next_batch()?, lr)?;
        within_budget(&memory::peaks(process.device)?, process.job.memory_budget_bytes)?;
    }
    trainer.metrics_mut().flush();
    Ok(trainer.metrics_mut().last_mean_loss())
}

/// `measurement` with the process's peak memory since the last reset recorded, once the peak
/// over the whole process, warm-up included, is known to be within the job's budget.
fn record_peaks(
    process: &CellContext,
    mut measurement: ProcessMeasurement,
) -> Result<ProcessMeasurement, Error> {
    measurement.memory = memory::peaks(process.device)?;
    // The budget holds for the whole process, warm-up included.
    let whole = measurement.warmup_memory.map_or(measurement.memory, |w| w.max(measurement.memory));
    within_budget(&whole, process.job.memory_budget_bytes)?;
    Ok(measurement)
}

/// Records the peaks of set-up and warm-up (cuDNN autotuning workspaces, a CUDA graph's warm-up
/// and capture, allocator growth) as the warm-up peak, then resets the peaks so that the
/// measurement's cover the timed steps alone.
pub(super) fn end_warmup(measurement: &mut ProcessMeasurement, device: DeviceSpec) -> Result<(), Error> {
    measurement.warmup_memory = Some(memory::peaks(device)?);
    memory::reset_peaks(device)
}

/// Fails with [`Error::OutOfMemory`] when the peak `memory` exceeds `budget_bytes`: on a GPU the
/// peak the caching allocator reserved from the device (what runs out there, and what
/// `expandable-segments` changes), elsewhere the peak of live tensors (or the resident set).
pub(in crate::bench) fn within_budget(memory: &Memory, budget_bytes: Option<u64>) -> Result<(), Error> {
    let Some(budget) = budget_bytes else {
        return Ok(());
    };
    let peak = memory.peak_reserved_bytes.or(memory.primary_bytes()).unwrap_or(0);
    if peak > budget {
        return Err(Error::OutOfMemory(format!(
            "peak memory {:.0} MiB exceeds the memory budget of {:.0} MiB (--memory-budget-mib)",
            peak as f64 / (1u64 << 20) as f64,
            budget as f64 / (1u64 << 20) as f64
        )));
    }
    Ok(())
}

/// Runs the profile's timed windows of `step` (which processes one batch and returns its sample
/// count), with the device synchronised at each window's edges, recording samples per second per
/// window, the samples timed and the host reads of metrics in them. After the profile's
/// `windows_per_process` windows it adds windows while the interval of this process's median is
/// wider than a process needs ([`process_half_width`]), up to `max_windows_per_process`. DDP ranks
/// take another window while any of them wants one, so that they all step together.
///
/// The GPU's energy is measured over one span ([`crate::measure::energy`]): NVML is read with
/// the device synchronised right before the first window's clock starts and after the last
/// window's clock stops, and untimed steps lengthen the span where the windows last less than
/// [`MIN_ENERGY_SPAN_S`](crate::measure::energy::MIN_ENERGY_SPAN_S).
fn time_windows<W: Workload>(
    profile: &Profile,
    device: DeviceSpec,
    measurement: &mut ProcessMeasurement,
    trainer: &mut Trainer<W>,
    mut step: impl FnMut(&mut Trainer<W>) -> Result<usize, Error>,
) -> Result<(), Error> {
    let mut energy = begin_energy(device);
    let reads_before = trainer.metrics_mut().host_reads();
    while trainer.any_rank(wants_another_window(profile, &measurement.window_samples_per_s))? {
        let faults = FaultCount::start();
        let timer = SyncedTimer::start(device);
        let mut samples = 0;
        for _ in 0..profile.steps_per_window {
            samples += step(trainer)?;
        }
        let seconds = timer.stop();
        measurement.count_page_faults(faults.stop());
        *measurement.timed_s.get_or_insert(0.0) += seconds;
        measurement.window_samples_per_s.push(samples as f64 / seconds);
        measurement.timed_samples += samples;
        if let Ok(span) = &mut energy {
            span.count(samples);
        }
    }
    measurement.host_metric_reads = trainer.metrics_mut().host_reads() - reads_before;
    lengthen_energy_span(trainer, &mut energy, step)?;
    record_energy(measurement, device, energy);
    Ok(())
}

/// Opens the GPU's energy counter and reads it once the device is idle, starting the span the
/// timed steps are attributed over; the error says why there is none (no NVIDIA GPU, no NVML).
pub(super) fn begin_energy(device: DeviceSpec) -> Result<EnergySpan, EnergyError> {
    EnergyMeter::open(device).and_then(|meter| {
        synchronize(device);
        meter.begin()
    })
}

/// Ends `energy`'s span once the device is idle and records its energy in `measurement`, or why
/// it has none.
pub(super) fn record_energy(
    measurement: &mut ProcessMeasurement,
    device: DeviceSpec,
    energy: Result<EnergySpan, EnergyError>,
) {
    synchronize(device);
    end_energy(measurement, energy);
}

/// Ends `energy`'s span, the device already idle, and records its energy in `measurement`, or why
/// it has none.
pub(in crate::bench) fn end_energy(
    measurement: &mut ProcessMeasurement,
    energy: Result<EnergySpan, EnergyError>,
) {
    match energy.and_then(EnergySpan::finish) {
        Ok(energy) => measurement.energy = Some(energy),
        Err(reason) => measurement.energy_unavailable = Some(reason.to_string()),
    }
}

/// Runs untimed `step`s while `energy`'s span is shorter than
/// [`MIN_ENERGY_SPAN_S`](crate::measure::energy::MIN_ENERGY_SPAN_S), counting their samples in
/// it. DDP ranks step while any of them wants more time, so that they all step together.
fn lengthen_energy_span<W: Workload>(
    trainer: &mut Trainer<W>,
    energy: &mut Result<EnergySpan, EnergyError>,
    mut step: impl FnMut(&mut Trainer<W>) -> Result<usize, Error>,
) -> Result<(), Error> {
    while trainer.any_rank(energy.as_ref().is_ok_and(EnergySpan::wants_more_time))? {
        let samples = step(trainer)?;
        if let Ok(span) = energy {
            span.count(samples);
        }
    }
    Ok(())
}

/// Whether a process that has timed `windows` (samples/s each, or a paired process's per-pair
/// ratios) times another: until the profile's `windows_per_process`, then while its median's
/// interval is wider than [`process_half_width`], up to `max_windows_per_process`.
pub(in crate::bench) fn wants_another_window(profile: &Profile, windows: &[f64]) -> bool {
    windows.len() < profile.windows_per_process
        || (windows.len() < profile.max_windows_per_process
            && median_ci(windows).is_none_or(|e| relative_half_width(&e) > process_half_width(profile)))
}

/// The interval one process's median needs for the cell's interval, pooled over the profile's
/// `rounds` processes, to be as narrow as `target_ci_half_width`. Pooling n processes that agree
/// narrows the interval by about √n; drawing the processes again in the bootstrap (as
/// [`crate::stats::paired_median_ci`] does, to carry what differs between processes)
/// widens it by about √2 when there are several. So each process may stop at
/// `target · √(n / 2)`, and never before the target itself. A simulation of three processes of
/// ten to thirty pairs each, pair ratios varying by 5–10%, gave a pooled interval of 0.73–0.78 of
/// one process's (√(2/3) is 0.82).
pub(super) fn process_half_width(profile: &Profile) -> f64 {
    profile.target_ci_half_width * (profile.rounds as f64 / 2.0).sqrt().max(1.0)
}

#[cfg(test)]
mod tests {
    use tch::{Device, Kind};

    use super::*;
    use crate::bench::profile::ProfileName;
    use crate::test_support::with_sdp_switches;
    use crate::workloads::gpt::{sdp_switches, sdpa_backend, AttentionBackend, GptConfig};
    use crate::workloads::Family;

    #[test]
    fn a_forced_backend_without_a_kernel_is_not_applicable_and_other_errors_stay() {
        let no_kernel = || {
            Error::Torch(format!(
                "{NO_ATTENTION_KERNEL} with the scaled_dot_product_attention backends allowed (flash) on \
                 Cuda(0): libtorch: No available kernel. Aborting execution.\nException raised from …"
            ))
        };
        let forced = TrickSet::only(Trick::SdpaFlash);
        let Error::NotApplicable(reason) = forced_backend_without_kernel(&forced, no_kernel()) else {
            panic!("a forced backend without a kernel is not applicable")
        };
        assert!(reason.starts_with("sdpa-flash: no attention kernel"), "{reason}");
        assert!(reason.ends_with("No available kernel. Aborting execution."), "{reason}");
        // libtorch's own: its CPU flash kernel has no dropout.
        let config = GptConfig { vocab_size: 11, context: 16, layers: 1, heads: 4, width: 32, dropout: 0.2 };
        let switches = sdp_switches(Some(AttentionBackend::FlashAttention)).unwrap();
        let cpu =
            with_sdp_switches(switches, || sdpa_backend(&config, 2, Kind::Float, Device::Cpu)).unwrap_err();
        let not_applicable = forced_backend_without_kernel(&forced, cpu);
        assert!(matches!(not_applicable, Error::NotApplicable(_)), "{not_applicable}");
        let chosen = TrickSet::only(Trick::FlashAttention);
        assert!(matches!(forced_backend_without_kernel(&chosen, no_kernel()), Error::Torch(_)), "not forced");
        let other = forced_backend_without_kernel(&forced, Error::Torch("out of memory".into()));
        assert!(matches!(other, Error::Torch(_)), "another error of a forced cell");
    }

    #[test]
    fn a_process_adds_windows_while_its_interval_is_wider_than_asked() {
        let asking = Profile {
            windows_per_process: 5,
            max_windows_per_process: 10,
            target_ci_half_width: 0.03,
            ..ProfileName::Standard.settings(Family::CifarResnet)
        };
        assert!(wants_another_window(&asking, &[100.0; 4]), "fewer than the minimum");
        assert!(!wants_another_window(&asking, &[100.0, 100.5, 99.5, 100.2, 99.8]), "precise enough");
        let noisy = [100.0, 60.0, 140.0, 90.0, 110.0, 70.0, 130.0, 85.0, 115.0];
        assert!(wants_another_window(&asking, &noisy[..5]), "±3% not reached");
        assert!(wants_another_window(&asking, &noisy), "still below the maximum");
        assert!(!wants_another_window(&asking, &[noisy.as_slice(), &[95.0]].concat()), "the maximum");
        let fixed = Profile { max_windows_per_process: 10, ..asking };
        assert!(!wants_another_window(&fixed, &[noisy.as_slice(), &[95.0]].concat()), "no extension asked");
    }

    #[test]
    fn each_of_several_processes_may_stop_short_of_the_cells_precision() {
        let at = |rounds| Profile {
            rounds,
            target_ci_half_width: 0.03,
            ..ProfileName::Quick.settings(Family::CifarResnet)
        };
        assert_eq!(process_half_width(&at(1)), 0.03, "one process is the cell");
        assert_eq!(process_half_width(&at(2)), 0.03, "two: the process draw takes back what pooling gives");
        assert!((process_half_width(&at(8)) - 0.06).abs() < 1e-12, "eight: twice the target");
        // Ten windows alternating about ±3.4% about their mean reach the ±3.7% that each of three
        // processes needs, not the ±3% that one alone needs.
        let windows: Vec<f64> =
            (0..10).map(|i| if i % 2 == 0 { 103.4 } else { 96.6 } + i as f64 * 0.1).collect();
        let extending =
            |rounds| Profile { windows_per_process: 10, max_windows_per_process: 30, ..at(rounds) };
        let width = relative_half_width(&median_ci(&windows).unwrap());
        assert!(width > 0.03 && width <= process_half_width(&at(3)), "{width}");
        assert!(wants_another_window(&extending(1), &windows));
        assert!(!wants_another_window(&extending(3), &windows));
    }
}
