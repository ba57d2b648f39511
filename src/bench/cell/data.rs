//! What a cell process reads: the data of its workload, the loaders of its training and held-out
//! batches, and the training inputs a parity case replays.

use std::sync::Arc;

use super::prepared::PreparedBatches;
use super::samples::SampleSplits;
use super::CellJob;
use crate::bench::profile::Profile;
use crate::bench::user_model::read_description;
use crate::data::cifar::{self, CifarSplit};
use crate::data::import;
use crate::data::loader::{eval_batches, Batch, CifarLoader, ImageSource, LoaderOptions, Pipeline};
use crate::data::text::{eval_windows, TextCorpus, TextLoader, TextLoaderOptions};
use crate::device::DeviceSpec;
use crate::error::Error;
use crate::results::schema::{CellKind, Phase};
use crate::train::recipe::Recipe;
use crate::tricks::Trick;
use crate::workloads::build::gpt_context;
use crate::workloads::{Family, WorkloadId};

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
/// on (the same data, subset, augmentation and seed as [`super::run`]).
pub fn training_inputs(job: &CellJob, count: usize) -> Result<TrainingInputs, Error> {
    let profile = job.settings();
    let data = CellData::load(job, &profile)?;
    let planned_steps = planned_steps(&profile, &data, job.key.batch_size);
    let recipe = Recipe::for_cell(&job.key, &profile.tta, planned_steps, job.super_convergence);
    let mut loader = data.training(&InputOptions::first_rank(job, &recipe))?;
    let batches = (0..count).map(|_| loader.next_batch()).collect::<Result<_, _>>()?;
    let vocab_size = match &data {
        CellData::Text { corpus, .. } => Some(corpus.vocab_size()),
        CellData::Images { .. } | CellData::Prepared(_) | CellData::Samples(_) => None,
    };
    Ok(TrainingInputs { recipe, planned_steps, vocab_size, batches })
}

/// The optimizer steps a cell's schedule is planned over: the profile's fixed count, or its
/// epochs of `data` at `batch_size`.
pub(in crate::bench) fn planned_steps(profile: &Profile, data: &CellData, batch_size: usize) -> usize {
    match profile.tta.planned_steps {
        Some(steps) => steps,
        None => profile.tta.planned_epochs * data.steps_per_epoch(batch_size),
    }
}

/// Endless batches from a loader, whatever the workload reads.
pub(in crate::bench) trait BatchSource {
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
pub(in crate::bench) struct InputOptions<'a> {
    /// Samples per batch.
    pub(in crate::bench) batch_size: usize,
    /// The device the batches are delivered on.
    pub(super) device: DeviceSpec,
    /// The seed of the batches' order and augmentation.
    pub(in crate::bench) seed: u64,
    /// The recipe the cell trains with (whether inputs are standardised).
    pub(in crate::bench) recipe: &'a Recipe,
    /// The job whose tricks choose the pipeline and memory format.
    pub(in crate::bench) job: &'a CellJob,
}

impl<'a> InputOptions<'a> {
    /// The loaders of `job` in its process's first (or only) rank: the cell's batch size on the
    /// job's device, the round's seed, with `recipe`.
    pub(in crate::bench) fn first_rank(job: &'a CellJob, recipe: &'a Recipe) -> Self {
        InputOptions {
            batch_size: job.key.batch_size,
            device: job.device,
            seed: job.round_seed(0),
            recipe,
            job,
        }
    }
}

/// The data of a cell.
pub(in crate::bench) enum CellData {
    /// CIFAR images: where training images come from, and the packed test split.
    Images { train: ImageSource, train_samples: usize, test: Arc<CifarSplit> },
    /// A text corpus, split into training and validation tokens, read in windows of `context`
    /// tokens.
    Text { corpus: TextCorpus, context: usize },
    /// The user's model's prepared batches, on the host ([`PreparedBatches`]).
    Prepared(PreparedBatches),
    /// The user's model's own data (its file's `dataset()`), on the host, which its time to
    /// accuracy trains and is tested on.
    Samples(SampleSplits),
}

impl CellData {
    /// Loads the dataset the cell's workload reads, cut to the profile's subset sizes: for a
    /// ResNet (and the time to accuracy of a user's model without its own `dataset()`) the packed
    /// CIFAR-10 files of `data_dir`, or with `images` the image files (packed once when
    /// `packed-dataset` is on, otherwise left encoded so that every batch decodes them; the test
    /// split is always packed once); for a GPT the text file; for the user's model its prepared
    /// batches, or to train to a target its `dataset()`.
    pub(in crate::bench) fn load(job: &CellJob, profile: &Profile) -> Result<Self, Error> {
        Self::load_packing(job, profile, job.key.tricks.has(Trick::PackedDataset))
    }

    /// [`Self::load`], the training image files packed once when `pack` (whatever the cell's
    /// tricks say) and otherwise left encoded.
    pub(in crate::bench) fn load_packing(
        job: &CellJob,
        profile: &Profile,
        pack: bool,
    ) -> Result<Self, Error> {
        // The user's model times its prepared batches, and trains to a target on its file's
        // dataset(), else on CIFAR-10.
        if job.key.workload == WorkloadId::Model {
            let dir = job.model_dir()?;
            if job.key.kind != CellKind::TimeToAccuracy {
                return Ok(CellData::Prepared(PreparedBatches::read(dir)?));
            }
            if read_description(dir)?.dataset.is_some() {
                let splits = SampleSplits::read(dir, profile.train_samples, profile.test_samples)?;
                return Ok(CellData::Samples(splits));
            }
        }
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
        let train = if pack {
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
            CellData::Prepared(prepared) => prepared.samples(),
            CellData::Samples(splits) => splits.train_samples(),
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

    /// Endless training batches: augmented images, or random windows of the training split. On
    /// a rehearsed GPU the batches stay on the CPU, where `pin-memory`'s pinned buffers and
    /// non-blocking copies are stood in for by the batches as they are.
    pub(in crate::bench) fn training(&self, inputs: &InputOptions) -> Result<Box<dyn BatchSource>, Error> {
        if inputs.device.rehearsed().is_some() && inputs.job.key.tricks.has(Trick::PinMemory) {
            crate::standin::record(crate::vocabulary::StandIn::PinnedMemory);
        }
        Ok(match self {
            CellData::Images { train, .. } => {
                Box::new(CifarLoader::new(train.clone(), Self::image_options(inputs, true))?)
            }
            CellData::Text { corpus, context } => {
                Box::new(TextLoader::new(corpus.train.clone(), Self::text_options(inputs, *context))?)
            }
            CellData::Prepared(prepared) => prepared_loader(prepared, inputs)?,
            CellData::Samples(splits) => {
                Box::new(splits.training(inputs.batch_size, inputs.device.tch(), inputs.seed)?)
            }
        })
    }

    /// Endless batches of held-out data, for evaluation throughput: unaugmented test images, or
    /// random windows of the validation split.
    pub(super) fn held_out_endless(&self, inputs: &InputOptions) -> Result<Box<dyn BatchSource>, Error> {
        Ok(match self {
            CellData::Images { test, .. } => {
                Box::new(CifarLoader::new(test.clone(), Self::image_options(inputs, false))?)
            }
            CellData::Text { corpus, context } => {
                Box::new(TextLoader::new(corpus.validation.clone(), Self::text_options(inputs, *context))?)
            }
            CellData::Prepared(prepared) => prepared_loader(prepared, inputs)?,
            CellData::Samples(splits) => {
                Box::new(splits.test_endless(inputs.batch_size, inputs.device.tch())?)
            }
        })
    }

    /// Endless batches of what a throughput cell of `kind` times: held-out batches for
    /// evaluation throughput, training batches otherwise.
    pub(super) fn timed_batches(
        &self,
        kind: CellKind,
        inputs: &InputOptions,
    ) -> Result<Box<dyn BatchSource>, Error> {
        match kind {
            CellKind::Throughput { phase: Phase::Eval } => self.held_out_endless(inputs),
            _ => self.training(inputs),
        }
    }

    /// Every held-out sample once, in batches: the test images, or the profile's number of
    /// validation windows.
    pub(in crate::bench) fn held_out<'a>(
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
            CellData::Samples(splits) => Box::new(splits.test(inputs.batch_size, inputs.device.tch())),
            CellData::Prepared(_) => {
                return Err(Error::Invalid(format!(
                    "{}: your model's prepared batches hold no held-out data to evaluate on",
                    inputs.job.key.workload
                )))
            }
        })
    }
}

/// Endless batches of the user's model's prepared samples at `inputs`' batch size, on its device.
fn prepared_loader(prepared: &PreparedBatches, inputs: &InputOptions) -> Result<Box<dyn BatchSource>, Error> {
    let channels_last = inputs.job.key.tricks.has(Trick::ChannelsLast);
    Ok(Box::new(prepared.at_batch_size(inputs.batch_size)?.loader(inputs.device.tch(), channels_last)))
}
