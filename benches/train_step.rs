//! Criterion benchmarks of one training step, each throughput trick off and on, for the small
//! ResNet (`resnet8`) and the small GPT (`gpt-mini`) on the device present (the first CUDA GPU,
//! else the CPU).
//!
//! One iteration is one training step as `trickbench run` times it: the next batch from the
//! loader (with the data-pipeline tricks), then forward, loss, backward and optimizer update
//! (`Trainer::train_step`). The clock runs over a whole sample of steps, started and stopped
//! with the device synchronised, so queued GPU work counts where it runs. Each trainer first
//! runs the quick profile's warm-up steps (at least those a CUDA graph needs to be captured and
//! replayed once). Criterion reports throughput in images or tokens per second.
//!
//! Benchmark ids are `{device}/{workload}/{baseline or trick}`, one criterion group per device
//! and workload: `cargo bench -- cpu/gpt-mini` runs one group, `cargo bench -- flash-attention`
//! one trick. A trick that cannot be measured here is skipped with a line saying why. The "off"
//! side of `debug-off` is measured as `debug-apis-on` (autograd anomaly detection on).
//!
//! The data are made in memory: synthetic CIFAR-style images, and random characters for the
//! GPT. These numbers are for spotting regressions in the step; the speed-ups of the reports
//! come from `trickbench run`.

use std::sync::Arc;
use std::time::Duration;

use criterion::{criterion_group, criterion_main, Criterion, SamplingMode, Throughput};
use rand::{RngExt, SeedableRng};
use rand_chacha::ChaCha8Rng;

use trickbench::bench::profile::{Profile, ProfileName};
use trickbench::data::cifar::CifarSplit;
use trickbench::data::loader::{Batch, CifarLoader, LoaderOptions, Pipeline};
use trickbench::data::synth;
use trickbench::data::text::{TextCorpus, TextLoader, TextLoaderOptions};
use trickbench::device::DeviceSpec;
use trickbench::engine::Engine;
use trickbench::error::Error;
use trickbench::hardware::Hardware;
use trickbench::measure::timer::SyncedTimer;
use trickbench::results::schema::{CellKey, CellKind, Phase};
use trickbench::train::recipe::Recipe;
use trickbench::train::{apply_process_tricks, Trainer};
use trickbench::tricks::{Applicability, Metric, Trick, TrickSet};
use trickbench::workloads::build::{gpt_config, gpt_for, resnet_for};
use trickbench::workloads::{Family, Workload, WorkloadId};

/// Images per ResNet-8 step.
const RESNET_BATCH_IMAGES: usize = 32;
/// Synthetic training images the ResNet loader shuffles through.
const RESNET_TRAIN_IMAGES: usize = 1_024;
/// Windows (of the model's context length) per GPT-mini step.
const GPT_BATCH_WINDOWS: usize = 8;
/// Characters of the synthetic text the GPT reads (90% train).
const GPT_TEXT_CHARS: usize = 50_000;
/// Distinct characters of the synthetic text: 65, as many as tiny Shakespeare has, which sets the
/// size of the GPT's embedding and output layer.
const GPT_ALPHABET: &str = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ .,;:!?'-&$3\n";
/// Seed of the weights, the data and the batch order.
const SEED: u64 = 0;
/// Steps the recipe's learning-rate schedule is planned over; the steps use its first rate.
const SCHEDULE_STEPS: usize = 1_000;
/// Criterion samples per benchmark (its minimum).
const SAMPLES: usize = 10;
/// Criterion's warm-up before sampling (after the trainer's own warm-up steps).
const WARM_UP: Duration = Duration::from_secs(1);
/// Criterion's measuring time per benchmark.
const MEASUREMENT: Duration = Duration::from_secs(4);

/// What one benchmark of a workload measures.
#[derive(Debug, Clone, Copy)]
enum Variant {
    /// Every trick off.
    Baseline,
    /// One trick on.
    On(Trick),
    /// The "off" side of `debug-off`: every trick off, autograd anomaly detection on.
    DebugApisOn,
}

impl Variant {
    /// The tricks switched on.
    fn tricks(self) -> TrickSet {
        match self {
            Variant::On(trick) => TrickSet::only(trick),
            Variant::Baseline | Variant::DebugApisOn => TrickSet::baseline(),
        }
    }

    /// The last part of the benchmark id.
    fn label(self) -> &'static str {
        match self {
            Variant::Baseline => "baseline",
            Variant::On(trick) => trick.id(),
            Variant::DebugApisOn => {
                Trick::DebugOff.reference_label().expect("debug-off has a reference label")
            }
        }
    }

    /// The cell a `trickbench run` would time for this variant, which picks the recipe.
    fn cell(self, workload: WorkloadId, batch_size: usize) -> CellKey {
        CellKey {
            workload,
            tricks: self.tricks(),
            batch_size,
            seed: SEED,
            kind: CellKind::Throughput { phase: Phase::Train },
            reference_for: matches!(self, Variant::DebugApisOn).then_some(Trick::DebugOff),
            aa_control: false,
            alone: false,
            engine: Engine::Libtorch,
        }
    }
}

/// The data a workload's loaders read, made once per workload.
enum Data {
    /// Synthetic CIFAR-10-style training images.
    Images(Arc<CifarSplit>),
    /// A synthetic text, read in windows of `context` tokens.
    Text { corpus: TextCorpus, context: usize },
}

impl Data {
    /// The data of `workload`.
    fn for_workload(workload: WorkloadId) -> Self {
        match workload.family() {
            Family::CifarResnet => {
                Data::Images(Arc::new(synth::synthesize(RESNET_TRAIN_IMAGES, 0, SEED).train))
            }
            Family::CharGpt => {
                let alphabet: Vec<char> = GPT_ALPHABET.chars().collect();
                let mut rng = ChaCha8Rng::seed_from_u64(SEED);
                let text: String =
                    (0..GPT_TEXT_CHARS).map(|_| alphabet[rng.random_range(0..alphabet.len())]).collect();
                let corpus =
                    TextCorpus::from_text(&text, "the bench's synthetic text").expect("synthetic text");
                let config = gpt_config(workload, corpus.vocab_size() as i64).expect("GPT config");
                Data::Text { corpus, context: config.context as usize }
            }
            Family::UserModel => unreachable!("the benches measure the reference workloads"),
        }
    }

    /// Samples per step: images, or windows of the context length.
    fn batch_size(&self) -> usize {
        match self {
            Data::Images(_) => RESNET_BATCH_IMAGES,
            Data::Text { .. } => GPT_BATCH_WINDOWS,
        }
    }

    /// Predictions per step, criterion's throughput elements: images, or tokens.
    fn samples_per_step(&self) -> usize {
        match self {
            Data::Images(_) => RESNET_BATCH_IMAGES,
            Data::Text { context, .. } => GPT_BATCH_WINDOWS * context,
        }
    }
}

/// A trainer warmed up to its steady state, with its loader: runs training steps.
struct Stepper {
    device: DeviceSpec,
    step: Box<dyn FnMut()>,
}

impl Stepper {
    /// Applies the variant's process-wide switches, builds the model, trainer and loader of
    /// `workload` as a throughput cell of `trickbench run` would, and runs the profile's warm-up.
    fn new(
        workload: WorkloadId,
        variant: Variant,
        data: &Data,
        profile: &Profile,
        device: DeviceSpec,
    ) -> Self {
        let key = variant.cell(workload, data.batch_size());
        let tricks = &key.tricks;
        apply_process_tricks(&key, device).expect("applying the process-wide tricks");
        let recipe = Recipe::for_cell(&key, &profile.tta, SCHEDULE_STEPS, false);
        let lr = recipe.schedule.lr(0);
        let pipeline = Pipeline::for_tricks(tricks);
        tch::manual_seed(SEED as i64);
        let step = match data {
            Data::Images(train) => {
                let model = resnet_for(&key, &recipe, device.tch()).expect("building the ResNet");
                let loader_options = LoaderOptions {
                    batch_size: key.batch_size,
                    device: device.tch(),
                    augment: true,
                    channels_last: tricks.has(Trick::ChannelsLast),
                    pipeline,
                    seed: SEED,
                    standardise: recipe.standardise_inputs,
                };
                let mut loader = CifarLoader::new(train.clone(), loader_options).expect("image loader");
                warmed_up(model, tricks, device, &recipe, profile, lr, move || loader.next_batch())
            }
            Data::Text { corpus, context } => {
                let loader_options = TextLoaderOptions {
                    batch_size: key.batch_size,
                    context: *context,
                    device: device.tch(),
                    seed: SEED,
                    pipeline,
                };
                let model = gpt_for(&key, corpus.vocab_size(), device.tch()).expect("building the GPT");
                let mut loader = TextLoader::new(corpus.train.clone(), loader_options).expect("text loader");
                warmed_up(model, tricks, device, &recipe, profile, lr, move || loader.next_batch())
            }
        };
        Self { device, step }
    }

    /// Runs `steps` training steps and returns their time, the device synchronised at both ends.
    fn time(&mut self, steps: u64) -> Duration {
        let timer = SyncedTimer::start(self.device);
        for _ in 0..steps {
            (self.step)();
        }
        Duration::from_secs_f64(timer.stop())
    }
}

/// A trainer of `model` with `tricks` and `recipe`, warmed up with the profile's warm-up steps
/// (at least those that reach the steady state), as a step function: the next batch from
/// `next_batch`, then one training step at `lr`.
fn warmed_up<W: Workload + 'static>(
    model: W,
    tricks: &TrickSet,
    device: DeviceSpec,
    recipe: &Recipe,
    profile: &Profile,
    lr: f64,
    mut next_batch: impl FnMut() -> Result<Batch, Error> + 'static,
) -> Box<dyn FnMut()> {
    let mut trainer = Trainer::new(model, tricks, device, recipe).expect("trainer");
    let warmup_steps = profile.warmup_steps.max(trainer.steps_before_steady_state());
    let mut step = move || {
        let batch = next_batch().expect("next batch from the loader");
        trainer.train_step(&batch, lr).expect("training step");
    };
    for _ in 0..warmup_steps {
        step();
    }
    Box::new(step)
}

/// The variants benchmarked for `workload` on `device`: the baseline, each throughput trick that
/// can be measured here (printing why for each that cannot), and `debug-apis-on` for `debug-off`,
/// whose "on" side is the baseline.
fn variants(workload: WorkloadId, device: DeviceSpec) -> Vec<Variant> {
    let mut variants = vec![Variant::Baseline];
    let hardware = Hardware::probe(device);
    for trick in Trick::ALL.into_iter().filter(|t| t.metric() == Metric::Throughput) {
        match skip_reason(trick, workload, &hardware) {
            Some(reason) => println!("{device}/{workload}/{trick}: skipped: {reason}"),
            None if trick == Trick::DebugOff => variants.push(Variant::DebugApisOn),
            None => variants.push(Variant::On(trick)),
        }
    }
    variants
}

/// Why `trick` cannot be measured for `workload` on `hardware` here, if it cannot.
fn skip_reason(trick: Trick, workload: WorkloadId, hardware: &Hardware) -> Option<String> {
    match trick.applicability(workload, hardware) {
        Applicability::NotApplicable(reason) => Some(reason),
        Applicability::Applies if trick == Trick::PackedDataset => Some(
            "it is measured against decoding JPEG/PNG files, and the bench's images are made in memory, \
             already decoded"
                .to_owned(),
        ),
        Applicability::Applies => None,
    }
}

/// Benchmarks every variant of `workload` in one group, `{device}/{workload}`.
fn bench_workload(c: &mut Criterion, workload: WorkloadId, device: DeviceSpec) {
    let profile = ProfileName::Quick.settings(workload.family());
    let data = Data::for_workload(workload);
    let mut group = c.benchmark_group(format!("{device}/{workload}"));
    group
        .sample_size(SAMPLES)
        .warm_up_time(WARM_UP)
        .measurement_time(MEASUREMENT)
        .sampling_mode(SamplingMode::Flat)
        .throughput(Throughput::Elements(data.samples_per_step() as u64));
    for variant in variants(workload, device) {
        // Built on the first call only, so that benchmarks a filter leaves out cost nothing.
        let mut stepper = None;
        group.bench_function(variant.label(), |b| {
            let stepper =
                stepper.get_or_insert_with(|| Stepper::new(workload, variant, &data, &profile, device));
            b.iter_custom(|steps| stepper.time(steps));
        });
        // Dropping the trainer restores the autocast cache a CUDA graph turned off.
        drop(stepper);
        // Back to the baseline's process-wide state: PyTorch's TF32 defaults, cuDNN autotuning and
        // anomaly detection off.
        let baseline = Variant::Baseline.cell(workload, data.batch_size());
        apply_process_tricks(&baseline, device).expect("resetting the process-wide tricks");
    }
    group.finish();
}

/// The training-step benchmarks of `resnet8` and `gpt-mini` on the device present.
fn train_step(c: &mut Criterion) {
    let device = DeviceSpec::Auto.resolve().expect("resolving the device");
    for workload in [WorkloadId::Resnet8, WorkloadId::GptMini] {
        bench_workload(c, workload, device);
    }
}

criterion_group!(benches, train_step);
criterion_main!(benches);
