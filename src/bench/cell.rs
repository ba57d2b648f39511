//! What one cell process does: build the workload with its tricks, then measure throughput over
//! timed windows or train to a target on the held-out set. Runs inside the child process.

use std::path::PathBuf;
use std::rc::Rc;
use std::sync::Arc;
use std::time::Instant;

use serde::{Deserialize, Serialize};

use crate::bench::profile::{Profile, ProfileName};
use crate::data::cifar::{self, CifarSplit};
use crate::data::import;
use crate::data::loader::{eval_batches, Batch, CifarLoader, ImageSource, LoaderOptions, Pipeline};
use crate::data::text::{eval_windows, TextCorpus, TextLoader, TextLoaderOptions};
use crate::device::DeviceSpec;
use crate::distributed::env::DistEnv;
use crate::distributed::group::{ProcessGroup, DEFAULT_BUCKET_BYTES};
use crate::error::Error;
use crate::measure::power::EnergyMeter;
use crate::measure::stats::{median_ci, relative_half_width};
use crate::measure::{memory, timer::SyncedTimer};
use crate::results::schema::{
    CellKey, CellKind, CurvePoint, FamilySettings, Memory, Phase, ProcessMeasurement, Protocol,
    TimeToAccuracy,
};
use crate::train::parallel::ParallelPlan;
use crate::train::recipe::{Recipe, Schedule};
use crate::train::{apply_process_tricks, Trainer};
use crate::tricks::Trick;
use crate::workloads::gpt::{AttentionKernel, Gpt, GptConfig, GptOptions};
use crate::workloads::resnet::{CifarResnet, ResnetOptions};
use crate::workloads::{Family, QualityMetric, Workload, WorkloadId};

/// Everything a cell process needs to know, handed over as JSON.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CellJob {
    /// The cell to measure.
    pub key: CellKey,
    /// The (resolved) device.
    pub device: DeviceSpec,
    /// The profile whose settings apply.
    pub profile: ProfileName,
    /// Directory of the CIFAR-10 binary files to train on.
    pub data_dir: PathBuf,
    /// Which round of the schedule this process is (0-based).
    pub round: usize,
    /// An ImageFolder directory or tar of JPEG/PNG files to train on instead of `data_dir`
    /// (`run --images`): decoded for every batch unless `packed-dataset` is on.
    #[serde(default)]
    pub images: Option<PathBuf>,
    /// The UTF-8 text file the GPT workloads train on (`run --text`).
    #[serde(default)]
    pub text: Option<PathBuf>,
    /// Peak memory the cell may use, bytes ([`crate::results::schema::Memory::primary_bytes`]: device peak allocated on
    /// CUDA, peak resident set on CPU); beyond it the cell ends out of memory (`run
    /// --memory-budget-mib`, which makes batch-size probing testable on a CPU).
    #[serde(default)]
    pub memory_budget_bytes: Option<u64>,
    /// Train with Smith & Topin's super-convergence settings (`run --design super-convergence`)
    /// instead of the profile's.
    #[serde(default)]
    pub super_convergence: bool,
    /// The run's measurement protocol, which replaces the profile's (`None`: the profile's own).
    #[serde(default)]
    pub protocol: Option<Protocol>,
    /// The run's settings of this cell's family (batch size, data subsets, time-to-accuracy
    /// training), which replace the profile's (`None`: the profile's own).
    #[serde(default)]
    pub family_settings: Option<FamilySettings>,
}

impl CellJob {
    /// The profile's settings for this cell's workload, measured as the run's protocol says and
    /// trained as the run's settings of the family say.
    pub fn settings(&self) -> Profile {
        let mut settings = self.profile.settings(self.key.workload.family());
        if let Some(protocol) = &self.protocol {
            settings = settings.following(protocol);
        }
        if let Some(family) = &self.family_settings {
            settings = settings.following_family(family);
        }
        settings
    }
}

/// Training steps of a memory probe (after the steps that reach the steady state).
pub const PROBE_STEPS: usize = 2;

/// Runs one cell process and returns what it measured. A `ddp` cell runs as one rank of `dist`
/// (its CUDA device is the local rank's), its throughput the sum over the ranks; the `ddp`
/// reference cell (DataParallel) drives every CUDA device of the machine from this process.
pub fn run(job: &CellJob, dist: Option<&DistEnv>) -> Result<ProcessMeasurement, Error> {
    let started = Instant::now();
    memory::count_cpu_tensors()?;
    let profile = job.settings();
    let tricks = &job.key.tricks;
    let device = match (dist, job.device) {
        (Some(env), DeviceSpec::Cuda(_)) => DeviceSpec::Cuda(env.local_rank),
        (_, device) => device,
    };
    let parallel = parallel_plan(job, dist, device)?;
    let rank = dist.map_or(0, |env| env.rank);
    apply_process_tricks(&job.key, device)?;
    let data = CellData::load(job, &profile)?;
    let total_steps = planned_steps(&profile, &data, job.key.batch_size);
    let recipe = Recipe::for_cell(&job.key, &profile.tta, total_steps, job.super_convergence);
    tch::manual_seed(job.key.seed as i64);
    let mut measurement = match &data {
        CellData::Images { .. } => {
            let model = resnet_for(&job.key, &recipe, device.tch())?;
            let trainer = Trainer::new(model, tricks, device, &recipe)?;
            let trainer = parallel.apply(trainer, |d| resnet_for(&job.key, &recipe, d))?;
            measure(job, &profile, &recipe, trainer, &data, device, rank)?
        }
        CellData::Text { corpus, .. } => {
            let model = gpt_for(&job.key, corpus.vocab_size(), device.tch())?;
            let trainer = Trainer::new(model, tricks, device, &recipe)?;
            let trainer = parallel.apply(trainer, |d| gpt_for(&job.key, corpus.vocab_size(), d))?;
            measure(job, &profile, &recipe, trainer, &data, device, rank)?
        }
    };
    measurement.wall_s = started.elapsed().as_secs_f64();
    measurement.setup_s = measurement.timed_s.map(|timed| (measurement.wall_s - timed).max(0.0));
    Ok(measurement)
}

/// What a cell trains on, for code that replays its training steps outside a cell process
/// (`trickbench parity`).
#[derive(Debug)]
pub struct TrainingInputs {
    /// The recipe the cell trains with.
    pub recipe: Recipe,
    /// The optimizer steps the recipe's schedule is planned over.
    pub planned_steps: usize,
    /// Characters in the GPT's vocabulary (`None` for a ResNet).
    pub vocab_size: Option<usize>,
    /// The first batches the cell's training loader yields in the job's round, in order, on the
    /// job's device.
    pub batches: Vec<Batch>,
}

/// The recipe of the cell `job` and the first `count` training batches its process would train
/// on (the same data, subset, augmentation and seed as [`run`]).
pub fn training_inputs(job: &CellJob, count: usize) -> Result<TrainingInputs, Error> {
    let profile = job.settings();
    let data = CellData::load(job, &profile)?;
    let planned_steps = planned_steps(&profile, &data, job.key.batch_size);
    let recipe = Recipe::for_cell(&job.key, &profile.tta, planned_steps, job.super_convergence);
    let inputs = InputOptions {
        batch_size: job.key.batch_size,
        seed: round_seed(job, 0),
        recipe: &recipe,
        job,
        device: job.device,
    };
    let mut loader = data.training(&inputs)?;
    let batches = (0..count).map(|_| loader.next_batch()).collect::<Result<_, _>>()?;
    let vocab_size = match &data {
        CellData::Text { corpus, .. } => Some(corpus.vocab_size()),
        CellData::Images { .. } => None,
    };
    Ok(TrainingInputs { recipe, planned_steps, vocab_size, batches })
}

/// The optimizer steps a cell's schedule is planned over: the profile's fixed count, or its
/// epochs of `data` at `batch_size`.
fn planned_steps(profile: &Profile, data: &CellData, batch_size: usize) -> usize {
    match profile.tta.planned_steps {
        Some(steps) => steps,
        None => profile.tta.planned_epochs * data.steps_per_epoch(batch_size),
    }
}

/// The seed of the batches of a cell process that is DDP rank `rank` (0 without DDP): each round
/// and each rank draws its own batches, while the weights are the same in every round.
fn round_seed(job: &CellJob, rank: usize) -> u64 {
    job.key.seed.wrapping_mul(1_000_003).wrapping_add(job.round as u64).wrapping_add((rank as u64) << 40)
}

/// How the cell `job` spreads training over devices, as its tricks ask: DDP for `ddp` (as a rank of
/// `dist`, joined here), DataParallel over every CUDA device for its reference cell.
fn parallel_plan(job: &CellJob, dist: Option<&DistEnv>, device: DeviceSpec) -> Result<ParallelPlan, Error> {
    if job.key.tricks.has(Trick::Ddp) {
        let env = dist.ok_or_else(|| {
            Error::Invalid(
                "a ddp cell runs as one rank of a data-parallel world: RANK, WORLD_SIZE, LOCAL_RANK, \
                 MASTER_ADDR and MASTER_PORT must be set (the cell command sets them for its workers)"
                    .to_owned(),
            )
        })?;
        let group = Rc::new(ProcessGroup::join(env, device)?);
        return Ok(ParallelPlan::Ddp { group, bucket_bytes: DEFAULT_BUCKET_BYTES });
    }
    if job.key.is_reference_for(Trick::Ddp) {
        let gpus = tch::Cuda::device_count().max(0) as usize;
        if !device.is_cuda() || gpus < 2 {
            return Err(Error::Invalid(format!(
                "the data-parallel cell needs ≥ 2 CUDA GPUs; this process has {gpus} and runs on {device}"
            )));
        }
        let master = device.tch();
        let devices = (0..gpus).map(tch::Device::Cuda).filter(|&d| d != master).collect();
        return Ok(ParallelPlan::DataParallel { devices });
    }
    Ok(ParallelPlan::Single)
}

/// The structure of the CIFAR ResNet of the cell `key`: its depth from the workload, conv biases
/// and BatchNorm as the tricks and `recipe` say.
pub fn resnet_options(key: &CellKey, recipe: &Recipe) -> Result<ResnetOptions, Error> {
    Ok(ResnetOptions::for_workload(key.workload, !key.tricks.has(Trick::NoBiasBeforeBn))?
        .with_batch_norm(recipe.batch_norm))
}

/// The CIFAR ResNet of the cell `key` on `device`, structured as [`resnet_options`] says, with the
/// TorchScript epilogue under `jit-fusion`.
pub fn resnet_for(key: &CellKey, recipe: &Recipe, device: tch::Device) -> Result<CifarResnet, Error> {
    let mut model = CifarResnet::new(resnet_options(key, recipe)?, device);
    if key.tricks.has(Trick::JitFusion) {
        model.use_jit_epilogue()?;
    }
    Ok(model)
}

/// The GPT of the cell `key` on `device` for a vocabulary of `vocab_size` characters, with fused
/// attention under `flash-attention` and TorchScript pointwise chains under `jit-fusion`.
pub fn gpt_for(key: &CellKey, vocab_size: usize, device: tch::Device) -> Result<Gpt, Error> {
    let options = GptOptions {
        attention: if key.tricks.has(Trick::FlashAttention) {
            AttentionKernel::ScaledDotProduct
        } else {
            AttentionKernel::Explicit
        },
        jit_fusion: key.tricks.has(Trick::JitFusion),
    };
    Gpt::new(gpt_config(key.workload, vocab_size as i64)?, options, device)
}

/// The shape of a GPT workload for a vocabulary of `vocab_size` characters.
pub fn gpt_config(workload: WorkloadId, vocab_size: i64) -> Result<GptConfig, Error> {
    match workload {
        WorkloadId::GptMini => Ok(GptConfig::mini(vocab_size)),
        WorkloadId::GptShakespeare => Ok(GptConfig::shakespeare(vocab_size)),
        other => Err(Error::Invalid(format!("{other} is not a GPT"))),
    }
}

/// The context length (tokens per window) of a GPT workload, whatever its vocabulary.
pub fn gpt_context(workload: WorkloadId) -> Result<usize, Error> {
    Ok(gpt_config(workload, 1)?.context as usize)
}

/// Measures what the cell's kind asks for with `trainer` on `data` on `device`, as DDP rank
/// `rank` (0 without DDP). Each DDP rank draws its own batches of the cell's size, and
/// throughput counts every rank's samples (the ranks step in lock-step, bound by the gradient
/// all-reduce); DataParallel draws batches of the cell's size times its number of devices.
fn measure<W: Workload>(
    job: &CellJob,
    profile: &Profile,
    recipe: &Recipe,
    mut trainer: Trainer<W>,
    data: &CellData,
    device: DeviceSpec,
    rank: usize,
) -> Result<ProcessMeasurement, Error> {
    let tricks = &job.key.tricks;
    let batch_size = job.key.batch_size * trainer.data_parallel_width();
    let inputs = InputOptions { batch_size, seed: round_seed(job, rank), recipe, job, device };
    let ranks = trainer.ddp_world_size();
    let forward_flops = trainer.workload().forward_flops_per_sample();
    let mut measurement = ProcessMeasurement {
        round: job.round,
        wall_s: 0.0,
        window_samples_per_s: Vec::new(),
        memory: Default::default(),
        host_metric_reads: 0,
        last_loss: None,
        time_to_accuracy: None,
        // Backward costs about twice the forward pass.
        flops_per_sample: if job.key.kind == (CellKind::Throughput { phase: Phase::Eval }) {
            forward_flops
        } else {
            3.0 * forward_flops
        },
        precision: trainer.precision(),
        timed_samples: 0,
        energy: None,
        energy_unavailable: None,
        warmup_memory: None,
        position: None,
        setup_s: None,
        timed_s: None,
        attention_backend: trainer.attention_backend(job.key.batch_size)?,
    };
    match job.key.kind {
        CellKind::Throughput { phase: Phase::Train } => {
            let mut loader = data.training(&inputs)?;
            let lr = recipe.schedule.lr(0);
            for _ in 0..profile.warmup_steps.max(trainer.steps_before_steady_state()) {
                trainer.train_step(&loader.next_batch()?, lr)?;
            }
            end_warmup(&mut measurement, device)?;
            let reads_before = trainer.metrics_mut().host_reads();
            time_windows(profile, device, &mut measurement, &mut trainer, |trainer| {
                let batch = loader.next_batch()?;
                trainer.train_step(&batch, lr)?;
                Ok(batch.len())
            })?;
            measurement.host_metric_reads = trainer.metrics_mut().host_reads() - reads_before;
            trainer.metrics_mut().flush();
            measurement.last_loss = trainer.metrics_mut().last_mean_loss();
        }
        CellKind::Throughput { phase: Phase::Eval } => {
            let no_grad = tricks.has(Trick::NoGradEval);
            // Evaluation batches drawn endlessly from the held-out split (order is irrelevant to speed).
            let mut batches = data.held_out_endless(&inputs)?;
            for _ in 0..profile.warmup_steps {
                let _warmup = trainer.eval_batch(&batches.next_batch()?, no_grad)?;
            }
            end_warmup(&mut measurement, device)?;
            time_windows(profile, device, &mut measurement, &mut trainer, |trainer| {
                let batch = batches.next_batch()?;
                // The count of correct predictions stays on the device: no host read per batch.
                let _correct = trainer.eval_batch(&batch, no_grad)?;
                Ok(batch.len())
            })?;
        }
        CellKind::TimeToAccuracy => {
            memory::reset_peaks(device)?;
            let tta = train_to_target(&mut trainer, data, &inputs, profile, &recipe.schedule)?;
            measurement.last_loss = tta.curve.last().and_then(|p| p.train_loss);
            measurement.time_to_accuracy = Some(tta);
        }
        CellKind::MemoryProbe => {
            // A probe's peak covers warm-up too: a batch fits only if every step of it fits.
            memory::reset_peaks(device)?;
            let mut loader = data.training(&inputs)?;
            let lr = recipe.schedule.lr(0);
            for _ in 0..trainer.steps_before_steady_state() + PROBE_STEPS {
                trainer.train_step(&loader.next_batch()?, lr)?;
                within_budget(&memory::peaks(device)?, job.memory_budget_bytes)?;
            }
            trainer.metrics_mut().flush();
            measurement.last_loss = trainer.metrics_mut().last_mean_loss();
        }
    }
    for window in &mut measurement.window_samples_per_s {
        *window *= ranks as f64;
    }
    measurement.timed_samples *= ranks;
    measurement.memory = memory::peaks(device)?;
    // The budget holds for the whole process, warm-up included.
    let whole = measurement.warmup_memory.map_or(measurement.memory, |w| w.max(measurement.memory));
    within_budget(&whole, job.memory_budget_bytes)?;
    Ok(measurement)
}

/// Records the peaks of set-up and warm-up (cuDNN autotuning workspaces, a CUDA graph's warm-up
/// and capture, allocator growth) as the warm-up peak, then resets the peaks so that the
/// measurement's cover the timed steps alone.
fn end_warmup(measurement: &mut ProcessMeasurement, device: DeviceSpec) -> Result<(), Error> {
    measurement.warmup_memory = Some(memory::peaks(device)?);
    memory::reset_peaks(device)
}

/// Fails with [`Error::OutOfMemory`] when the peak `memory` exceeds `budget_bytes`.
fn within_budget(memory: &Memory, budget_bytes: Option<u64>) -> Result<(), Error> {
    let Some(budget) = budget_bytes else {
        return Ok(());
    };
    let peak = memory.primary_bytes().unwrap_or(0);
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
/// count), with the device synchronised at each window's edges and the GPU's energy read there,
/// recording samples per second per window, the samples timed and the energy. After the
/// profile's `windows_per_process` windows it adds windows while the interval of this process's
/// median is wider than the profile's `target_ci_half_width`, up to `max_windows_per_process`.
/// DDP ranks take another window while any of them wants one, so that they all step together.
fn time_windows<W: Workload>(
    profile: &Profile,
    device: DeviceSpec,
    measurement: &mut ProcessMeasurement,
    trainer: &mut Trainer<W>,
    mut step: impl FnMut(&mut Trainer<W>) -> Result<usize, Error>,
) -> Result<(), Error> {
    let mut energy = EnergyMeter::start(device);
    while trainer.any_rank(wants_another_window(profile, &measurement.window_samples_per_s))? {
        let timer = SyncedTimer::start(device);
        if let Ok(meter) = &mut energy {
            meter.window_started();
        }
        let mut samples = 0;
        for _ in 0..profile.steps_per_window {
            samples += step(trainer)?;
        }
        let seconds = timer.stop();
        if let Ok(meter) = &mut energy {
            meter.window_ended();
        }
        *measurement.timed_s.get_or_insert(0.0) += seconds;
        measurement.window_samples_per_s.push(samples as f64 / seconds);
        measurement.timed_samples += samples;
    }
    match energy.and_then(EnergyMeter::finish) {
        Ok(energy) => measurement.energy = Some(energy),
        Err(reason) => measurement.energy_unavailable = Some(reason),
    }
    Ok(())
}

/// Whether a process that has timed `windows` (samples/s each) times another: until the profile's
/// `windows_per_process`, then while its median's interval is wider than `target_ci_half_width`,
/// up to `max_windows_per_process`.
fn wants_another_window(profile: &Profile, windows: &[f64]) -> bool {
    windows.len() < profile.windows_per_process
        || (windows.len() < profile.max_windows_per_process
            && median_ci(windows).is_none_or(|e| relative_half_width(&e) > profile.target_ci_half_width))
}

/// Endless batches from a loader, whatever the workload reads.
trait BatchSource {
    /// The next batch.
    fn next_batch(&mut self) -> Result<Batch, Error>;
    /// Passes over the training split so far (fractional).
    fn epochs(&self) -> f64;
}

impl BatchSource for CifarLoader {
    fn next_batch(&mut self) -> Result<Batch, Error> {
        CifarLoader::next_batch(self)
    }

    fn epochs(&self) -> f64 {
        CifarLoader::epochs(self)
    }
}

impl BatchSource for TextLoader {
    fn next_batch(&mut self) -> Result<Batch, Error> {
        TextLoader::next_batch(self)
    }

    fn epochs(&self) -> f64 {
        TextLoader::epochs(self)
    }
}

/// What a cell's loaders are built from besides the data.
struct InputOptions<'a> {
    batch_size: usize,
    device: DeviceSpec,
    seed: u64,
    recipe: &'a Recipe,
    job: &'a CellJob,
}

/// The data of a cell.
enum CellData {
    /// CIFAR images: where training images come from, and the packed test split.
    Images { train: ImageSource, train_samples: usize, test: Arc<CifarSplit> },
    /// A text corpus, split into training and validation tokens, read in windows of `context`
    /// tokens.
    Text { corpus: TextCorpus, context: usize },
}

impl CellData {
    /// Loads the dataset the cell's workload reads, cut to the profile's subset sizes: for a
    /// ResNet the packed CIFAR-10 files of `data_dir`, or with `images` the image files (packed
    /// once when `packed-dataset` is on, otherwise left encoded so that every batch decodes them;
    /// the test split is always packed once); for a GPT the text file.
    fn load(job: &CellJob, profile: &Profile) -> Result<Self, Error> {
        if job.key.workload.family() == Family::CharGpt {
            let path = job.text.as_ref().ok_or_else(|| {
                Error::Invalid(format!(
                    "{} trains on a text file, and none was given (--text)",
                    job.key.workload
                ))
            })?;
            let context = gpt_context(job.key.workload)?;
            return Ok(CellData::Text { corpus: TextCorpus::from_file(path)?, context });
        }
        let cut = |split: CifarSplit, n: Option<usize>| match n {
            Some(n) => split.subset(n),
            None => split,
        };
        let Some(images) = &job.images else {
            let full = cifar::load_dir(&job.data_dir)?;
            let train = cut(full.train, profile.train_samples);
            return Ok(CellData::Images {
                train_samples: train.len(),
                train: Arc::new(train).into(),
                test: Arc::new(cut(full.test, profile.test_samples)),
            });
        };
        let (train, test) = import::read_encoded(images)?;
        let train = match profile.train_samples {
            Some(n) => train.subset(n),
            None => train,
        };
        let test = match profile.test_samples {
            Some(n) => test.subset(n),
            None => test,
        };
        let train_samples = train.len();
        let train = if job.key.tricks.has(Trick::PackedDataset) {
            ImageSource::Packed(Arc::new(train.pack()?))
        } else {
            ImageSource::Encoded(Arc::new(train))
        };
        Ok(CellData::Images { train, train_samples, test: Arc::new(test.pack()?) })
    }

    /// Optimizer steps in one pass over the training split at `batch_size` samples per step
    /// (images, or windows).
    fn steps_per_epoch(&self, batch_size: usize) -> usize {
        let samples = match self {
            CellData::Images { train_samples, .. } => *train_samples,
            CellData::Text { corpus, context } => corpus.train.len() / (*context).max(1),
        };
        (samples / batch_size.max(1)).max(1)
    }

    /// The CIFAR loader options of a cell.
    fn image_options(inputs: &InputOptions, augment: bool) -> LoaderOptions {
        let tricks = &inputs.job.key.tricks;
        LoaderOptions {
            batch_size: inputs.batch_size,
            device: inputs.device.tch(),
            augment,
            channels_last: tricks.has(Trick::ChannelsLast),
            pipeline: Pipeline::for_tricks(tricks),
            seed: inputs.seed,
            standardise: inputs.recipe.standardise_inputs,
        }
    }

    /// The text loader options of a cell reading windows of `context` tokens.
    fn text_options(inputs: &InputOptions, context: usize) -> TextLoaderOptions {
        TextLoaderOptions {
            batch_size: inputs.batch_size,
            context,
            device: inputs.device.tch(),
            seed: inputs.seed,
            pipeline: Pipeline::for_tricks(&inputs.job.key.tricks),
        }
    }

    /// Endless training batches: augmented images, or random windows of the training split.
    fn training(&self, inputs: &InputOptions) -> Result<Box<dyn BatchSource>, Error> {
        Ok(match self {
            CellData::Images { train, .. } => {
                Box::new(CifarLoader::new(train.clone(), Self::image_options(inputs, true))?)
            }
            CellData::Text { corpus, context } => {
                Box::new(TextLoader::new(corpus.train.clone(), Self::text_options(inputs, *context))?)
            }
        })
    }

    /// Endless batches of held-out data, for evaluation throughput: unaugmented test images, or
    /// random windows of the validation split.
    fn held_out_endless(&self, inputs: &InputOptions) -> Result<Box<dyn BatchSource>, Error> {
        Ok(match self {
            CellData::Images { test, .. } => {
                Box::new(CifarLoader::new(test.clone(), Self::image_options(inputs, false))?)
            }
            CellData::Text { corpus, context } => {
                Box::new(TextLoader::new(corpus.validation.clone(), Self::text_options(inputs, *context))?)
            }
        })
    }

    /// Every held-out sample once, in batches: the test images, or the profile's number of
    /// validation windows.
    fn held_out<'a>(
        &'a self,
        inputs: &InputOptions,
        profile: &Profile,
    ) -> Result<Box<dyn Iterator<Item = Result<Batch, Error>> + 'a>, Error> {
        Ok(match self {
            CellData::Images { test, .. } => Box::new(eval_batches(test, Self::image_options(inputs, false))),
            CellData::Text { corpus, context } => {
                let options = Self::text_options(inputs, *context);
                Box::new(eval_windows(
                    &corpus.validation,
                    *context,
                    options.batch_size,
                    profile.test_samples,
                    options.device,
                    options.pipeline,
                ))
            }
        })
    }
}

/// Trains from scratch with `schedule`, evaluating on the held-out set every `eval_every_steps`
/// of the profile's time-to-target batch (as many samples between evaluations at any batch size),
/// until the target, the time budget or the planned steps run out.
fn train_to_target<W: Workload>(
    trainer: &mut Trainer<W>,
    data: &CellData,
    inputs: &InputOptions,
    profile: &Profile,
    schedule: &Schedule,
) -> Result<TimeToAccuracy, Error> {
    let settings = profile.tta;
    let device = inputs.device;
    let metric = inputs.job.key.workload.family().quality_metric();
    let mut loader = data.training(inputs)?;
    let total_steps = schedule.total_steps();
    let eval_every_steps =
        (settings.eval_every_steps * settings.batch_size / inputs.batch_size.max(1)).max(1);
    let evaluate = |trainer: &Trainer<W>| -> Result<f64, Error> {
        let evaluation = trainer.evaluate(data.held_out(inputs, profile)?, true)?;
        Ok(match metric {
            QualityMetric::TestAccuracy => evaluation.accuracy,
            QualityMetric::ValidationLoss => evaluation.mean_loss,
        })
    };
    let wall = Instant::now();
    let mut result = TimeToAccuracy {
        metric,
        target: settings.target,
        budget_s: settings.budget_s,
        time_to_target_s: None,
        wall_time_to_target_s: None,
        epochs_to_target: None,
        best_metric: metric.worst(),
        curve: Vec::new(),
    };
    let mut train_s = 0.0;
    let mut step = 0;
    // The curve starts with the untrained network (time 0), then one point per segment.
    let untrained = evaluate(trainer)?;
    record_point(
        &mut result,
        CurvePoint { step, epoch: 0.0, train_s, wall_s: 0.0, metric: untrained, train_loss: None },
    );
    // DDP ranks go on while any of them would (their clocks may disagree about the budget).
    while trainer
        .any_rank(result.time_to_target_s.is_none() && step < total_steps && train_s < settings.budget_s)?
    {
        let timer = SyncedTimer::start(device);
        let segment_end = (step + eval_every_steps).min(total_steps);
        while step < segment_end {
            if let Some(momentum) = schedule.momentum(step) {
                trainer.set_momentum(momentum);
            }
            trainer.train_step(&loader.next_batch()?, schedule.lr(step))?;
            step += 1;
        }
        trainer.metrics_mut().flush();
        train_s += timer.stop();
        let point = CurvePoint {
            step,
            epoch: loader.epochs(),
            train_s,
            metric: evaluate(trainer)?,
            wall_s: wall.elapsed().as_secs_f64(),
            train_loss: trainer.metrics_mut().last_mean_loss(),
        };
        eprintln!(
            "step {step:>6}  epoch {:>5.2}  train {train_s:>7.1} s  loss {:.3}  {} {}",
            point.epoch,
            point.train_loss.unwrap_or(f64::NAN),
            result.metric.words(),
            result.metric.value_text(point.metric)
        );
        record_point(&mut result, point);
    }
    Ok(result)
}

/// Adds an evaluation to the curve and marks the first time the target is reached.
fn record_point(result: &mut TimeToAccuracy, point: CurvePoint) {
    result.curve.push(point);
    result.best_metric = result.metric.better(result.best_metric, point.metric);
    if result.metric.reaches(point.metric, result.target) && result.time_to_target_s.is_none() {
        result.time_to_target_s = Some(point.train_s);
        result.wall_time_to_target_s = Some(point.wall_s);
        result.epochs_to_target = Some(point.epoch);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::workloads::Family;

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
        let as_profiled = ProfileName::Quick.settings(Family::CifarResnet);
        assert!(!wants_another_window(&as_profiled, &noisy[..4]), "the quick profile never extends");
    }
}
