//! Batches for training and evaluation from a CIFAR split: shuffling, the standard augmentation
//! (4-pixel zero-padded random crop and horizontal flip), transfer to the device and per-channel
//! standardisation (or only scaling to [0, 1], for the `input-norm` trick's "off" side), with the
//! data-pipeline tricks of [`Pipeline`] switchable.
//!
//! Batch `k` of a loader is a pure function of the seed and `k`: epoch `e`'s sample order is a
//! shuffle drawn from ChaCha8 stream `2e` of the seed, and batch `k`'s crop offsets and flips come
//! from stream `2k + 1`. Worker threads can therefore assemble batches in any order and timing and
//! still yield exactly the batches the training thread would.

use std::marker::PhantomData;
use std::sync::Arc;

use rand::seq::SliceRandom;
use rand::{RngExt, SeedableRng};
use rand_chacha::ChaCha8Rng;
use tch::{Device, Kind, Tensor};

use crate::data::cifar::{CifarSplit, IMAGE_BYTES};
use crate::data::import::EncodedSplit;
use crate::data::transfer;
use crate::data::workers::WorkerPool;
use crate::error::Error;
use crate::ffi;
use crate::measure::phases;
use crate::results::phases::StepPhase;
use crate::tricks::{Trick, TrickSet};

/// Per-channel mean of the CIFAR-10 training images (pixel values scaled to [0, 1]).
pub const CIFAR_MEAN: [f64; 3] = [0.4914, 0.4822, 0.4465];
/// Per-channel standard deviation of the CIFAR-10 training images (scaled to [0, 1]).
pub const CIFAR_STD: [f64; 3] = [0.2470, 0.2435, 0.2616];

/// Zero padding on each side before the random crop, pixels.
pub const CROP_PADDING_PX: usize = 4;
/// Image side, pixels.
const SIDE_PX: usize = 32;

/// A batch on the training device: images and their labels, or token windows and their next
/// tokens.
#[derive(Debug)]
pub struct Batch {
    /// Images, `[n, 3, 32, 32]` float: standardised, or scaled to [0, 1] without
    /// [`LoaderOptions::standardise`]; or token ids, `[n, T]` int64.
    pub inputs: Tensor,
    /// Class labels, `[n]` int64; or the next token after each input token, `[n, T]` int64.
    pub targets: Tensor,
}

impl Batch {
    /// Number of predictions, `targets.numel()`: images for CIFAR, tokens (`n × T`) for text.
    pub fn len(&self) -> usize {
        self.targets.numel()
    }

    /// Whether the batch has no predictions.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// Which data-pipeline tricks are on; the default is the baseline (every one off).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Pipeline {
    /// Worker threads that assemble and augment batches ahead of the training thread behind a
    /// bounded queue; 0 assembles them on the training thread (`loader-workers`).
    pub workers: usize,
    /// Stage host batches in pinned memory and copy them to the device without blocking
    /// (`pin-memory`).
    pub pinned: bool,
    /// Wrap host pixel (or token) memory as tensors instead of copying it into new ones, and
    /// gather unaugmented image batches straight from the packed split as one tensor
    /// (`zero-copy`).
    pub zero_copy: bool,
    /// Crop and flip whole batches on the device instead of image by image on the host
    /// (`gpu-augment`); images only.
    pub device_augment: bool,
}

impl Pipeline {
    /// The pipeline the data-pipeline tricks in `tricks` ask for.
    pub fn for_tricks(tricks: &TrickSet) -> Self {
        Pipeline {
            workers: if tricks.has(Trick::LoaderWorkers) { worker_count() } else { 0 },
            pinned: tricks.has(Trick::PinMemory),
            zero_copy: tricks.has(Trick::ZeroCopy),
            device_augment: tricks.has(Trick::GpuAugment),
        }
    }
}

/// The number of worker threads `loader-workers` starts: one per available core, at least 2.
pub fn worker_count() -> usize {
    std::thread::available_parallelism().map_or(2, usize::from).max(2)
}

/// How the loader assembles batches.
#[derive(Debug, Clone, Copy)]
pub struct LoaderOptions {
    /// Samples per batch.
    pub batch_size: usize,
    /// Device the batches are put on.
    pub device: Device,
    /// Apply random crop and flip (training) or not (evaluation).
    pub augment: bool,
    /// Lay the images out as channels_last.
    pub channels_last: bool,
    /// Seed of the shuffling and augmentation.
    pub seed: u64,
    /// The data-pipeline tricks.
    pub pipeline: Pipeline,
    /// Standardise each channel with [`CIFAR_MEAN`] and [`CIFAR_STD`] (the usual pipeline);
    /// without, pixels are only scaled to [0, 1], as torchvision's `ToTensor` alone does.
    pub standardise: bool,
}

/// Images addressable by index, with their labels.
pub trait Images: Send + Sync {
    /// Number of images.
    fn count(&self) -> usize;
    /// The label of image `i`.
    fn label(&self, i: usize) -> u8;
    /// Calls `f` with the 3072 CHW pixel bytes of image `i`.
    fn with_image(&self, i: usize, f: &mut dyn FnMut(&[u8])) -> Result<(), Error>;
}

impl Images for CifarSplit {
    fn count(&self) -> usize {
        self.len()
    }

    fn label(&self, i: usize) -> u8 {
        self.labels[i]
    }

    fn with_image(&self, i: usize, f: &mut dyn FnMut(&[u8])) -> Result<(), Error> {
        f(self.image(i));
        Ok(())
    }
}

impl Images for EncodedSplit {
    fn count(&self) -> usize {
        self.len()
    }

    fn label(&self, i: usize) -> u8 {
        EncodedSplit::label(self, i)
    }

    fn with_image(&self, i: usize, f: &mut dyn FnMut(&[u8])) -> Result<(), Error> {
        let mut decoded = [0u8; IMAGE_BYTES];
        self.decode_into(i, &mut decoded)?;
        f(&decoded);
        Ok(())
    }
}

/// Where a loader's images come from.
#[derive(Debug, Clone)]
pub enum ImageSource {
    /// The packed binary split in memory (`packed-dataset` on, or no image files given).
    Packed(Arc<CifarSplit>),
    /// JPEG/PNG files, decoded every time an image is used (`packed-dataset` off).
    Encoded(Arc<EncodedSplit>),
}

impl From<Arc<CifarSplit>> for ImageSource {
    fn from(split: Arc<CifarSplit>) -> Self {
        ImageSource::Packed(split)
    }
}

impl Images for ImageSource {
    fn count(&self) -> usize {
        match self {
            ImageSource::Packed(split) => split.count(),
            ImageSource::Encoded(files) => files.count(),
        }
    }

    fn label(&self, i: usize) -> u8 {
        match self {
            ImageSource::Packed(split) => split.labels[i],
            ImageSource::Encoded(files) => files.label(i),
        }
    }

    fn with_image(&self, i: usize, f: &mut dyn FnMut(&[u8])) -> Result<(), Error> {
        match self {
            ImageSource::Packed(split) => split.with_image(i, f),
            ImageSource::Encoded(files) => files.with_image(i, f),
        }
    }
}

/// Which samples each batch holds and how it is augmented on the host: a pure function of the
/// seed and the batch number.
#[derive(Debug, Clone, Copy)]
struct Schedule {
    seed: u64,
    samples: usize,
    batch_size: usize,
    /// Crop and flip on the host (training without `gpu-augment`).
    host_augment: bool,
}

impl Schedule {
    /// The schedule of a loader with `options` over `samples` images; fails when they are fewer
    /// than one batch.
    fn of(samples: usize, options: &LoaderOptions) -> Result<Self, Error> {
        if options.batch_size == 0 || samples < options.batch_size {
            return Err(Error::Invalid(format!(
                "batch size {} needs at least that many training images; the data has {samples}",
                options.batch_size,
            )));
        }
        Ok(Schedule {
            seed: options.seed,
            samples,
            batch_size: options.batch_size,
            host_augment: options.augment && !options.pipeline.device_augment,
        })
    }

    fn batches_per_epoch(&self) -> u64 {
        (self.samples / self.batch_size) as u64
    }

    /// The sample order of `epoch`.
    fn epoch_order(&self, epoch: u64) -> Vec<usize> {
        let mut order: Vec<usize> = (0..self.samples).collect();
        order.shuffle(&mut stream(self.seed, 2 * epoch));
        order
    }

    /// The generator of batch `k`'s crop offsets and flips; `None` without host augmentation.
    fn augment_rng(&self, k: u64) -> Option<ChaCha8Rng> {
        self.host_augment.then(|| stream(self.seed, 2 * k + 1))
    }
}

/// ChaCha8 stream `n` of `seed`.
pub(crate) fn stream(seed: u64, n: u64) -> ChaCha8Rng {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    rng.set_stream(n);
    rng
}

/// The sample indices of batch numbers, keeping the order of the current epoch.
#[derive(Debug)]
struct Cursor {
    schedule: Schedule,
    epoch: Option<u64>,
    order: Vec<usize>,
}

impl Cursor {
    fn new(schedule: Schedule) -> Self {
        Self { schedule, epoch: None, order: Vec::new() }
    }

    /// The samples of batch `k`.
    fn indices(&mut self, k: u64) -> &[usize] {
        let per_epoch = self.schedule.batches_per_epoch();
        let epoch = k / per_epoch;
        if self.epoch != Some(epoch) {
            self.order = self.schedule.epoch_order(epoch);
            self.epoch = Some(epoch);
        }
        let start = (k % per_epoch) as usize * self.schedule.batch_size;
        &self.order[start..start + self.schedule.batch_size]
    }
}

/// One batch assembled on the host: `n × 3072` CHW pixel bytes and `n` labels.
#[derive(Debug, Default)]
struct HostBatch {
    pixels: Vec<u8>,
    labels: Vec<i64>,
}

impl HostBatch {
    /// Fills the batch with images `indices` of `images`, each cropped and flipped with offsets
    /// drawn from `rng` when given (three draws per image, in order), else copied as is.
    fn fill(
        &mut self,
        images: &dyn Images,
        indices: &[usize],
        mut rng: Option<ChaCha8Rng>,
    ) -> Result<(), Error> {
        self.pixels.resize(indices.len() * IMAGE_BYTES, 0);
        self.labels.clear();
        self.labels.extend(indices.iter().map(|&i| i64::from(images.label(i))));
        for (out, &i) in self.pixels.chunks_exact_mut(IMAGE_BYTES).zip(indices) {
            match &mut rng {
                Some(rng) => {
                    let Crop { dx, dy, flip } = Crop::draw(rng);
                    images.with_image(i, &mut |src| crop_and_flip(src, out, dx, dy, flip))?;
                }
                None => images.with_image(i, &mut |src| out.copy_from_slice(src))?,
            }
        }
        Ok(())
    }
}

/// How one image of a training batch is augmented on the host: the 32×32 window at column `dx`,
/// row `dy` (both 0..=8) of the image zero-padded to 40×40, mirrored horizontally when `flip`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Crop {
    /// Column of the window in the padded image, pixels.
    pub dx: usize,
    /// Row of the window in the padded image, pixels.
    pub dy: usize,
    /// Whether the window is mirrored horizontally.
    pub flip: bool,
}

impl Crop {
    /// The next image's crop from a batch's generator: three draws, in this order.
    fn draw(rng: &mut ChaCha8Rng) -> Self {
        let dx = rng.random_range(0..=2 * CROP_PADDING_PX);
        let dy = rng.random_range(0..=2 * CROP_PADDING_PX);
        let flip = rng.random_bool(0.5);
        Crop { dx, dy, flip }
    }
}

/// One batch of a loader's schedule: the images it holds and how each is augmented on the host.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ScheduledBatch {
    /// The images' indices in the split, in batch order.
    pub indices: Vec<usize>,
    /// Each image's crop, in batch order; empty where the host does not augment.
    pub crops: Vec<Crop>,
}

/// The first `count` batches a [`CifarLoader`] with `options` over `samples` images yields:
/// which images, and with host augmentation (`options.augment` without `gpu-augment`) how each
/// is cropped and flipped. This is what another implementation of the loader needs to assemble
/// the same batches.
pub fn schedule(samples: usize, options: &LoaderOptions, count: usize) -> Result<Vec<ScheduledBatch>, Error> {
    let schedule = Schedule::of(samples, options)?;
    let mut cursor = Cursor::new(schedule);
    Ok((0..count as u64)
        .map(|k| {
            let indices = cursor.indices(k).to_vec();
            let crops = match schedule.augment_rng(k) {
                Some(mut rng) => indices.iter().map(|_| Crop::draw(&mut rng)).collect(),
                None => Vec::new(),
            };
            ScheduledBatch { indices, crops }
        })
        .collect())
}

/// A packed split viewed as one uint8 tensor `[N, 3, 32, 32]` over its bytes (no copy), plus its
/// labels as one int64 tensor made once.
#[derive(Debug)]
struct SplitTensor<'a> {
    images: Tensor,
    labels: Tensor,
    _bytes: PhantomData<&'a [u8]>,
}

impl<'a> SplitTensor<'a> {
    /// Views `split`'s bytes.
    ///
    /// # Safety
    /// The tensor aliases `split.images`: the caller must not let the returned value outlive a
    /// heap move or mutation of that buffer (the lifetime ties it to the borrow; callers that
    /// extend it, like [`CifarLoader`], keep the split in an `Arc` they never mutate).
    unsafe fn over(split: &'a CifarSplit) -> Result<Self, Error> {
        let n = split.len() as i64;
        let side = SIDE_PX as i64;
        // SAFETY: the buffer holds n × 3072 bytes and outlives the tensor (see above).
        let images = unsafe {
            Tensor::f_from_blob(split.images.as_ptr(), &[n, 3, side, side], &[], Kind::Uint8, Device::Cpu)?
        };
        let labels = Tensor::f_from_slice(&split.labels)?.f_to_kind(Kind::Int64)?;
        Ok(Self { images, labels, _bytes: PhantomData })
    }
}

/// What the training thread does before a batch is uploaded.
#[derive(Debug)]
enum Producer {
    /// Assemble the host batch itself, into one reused buffer.
    Inline { images: ImageSource, cursor: Cursor, host: HostBatch },
    /// Take host batches from worker threads.
    Workers(WorkerPool<HostBatch>),
    /// Nothing on the host: gather the batch from the packed split's tensor (`zero-copy`
    /// without host augmentation).
    Gather {
        cursor: Cursor,
        index: Vec<i64>,
        // Field order matters: the view is dropped before the split it views.
        tensor: SplitTensor<'static>,
        _split: Arc<CifarSplit>,
    },
}

/// Endless training batches: shuffled each epoch, the last incomplete batch dropped.
#[derive(Debug)]
pub struct CifarLoader {
    schedule: Schedule,
    producer: Producer,
    uploader: Uploader,
    batches_done: u64,
}

impl CifarLoader {
    /// A loader over `images`; fails when they are fewer than one batch.
    pub fn new(images: impl Into<ImageSource>, options: LoaderOptions) -> Result<Self, Error> {
        let images = images.into();
        let schedule = Schedule::of(images.count(), &options)?;
        let cursor = Cursor::new(schedule);
        let producer = match images {
            ImageSource::Packed(split) if options.pipeline.zero_copy && !schedule.host_augment => {
                // SAFETY: the Arc'd split is never mutated and is dropped after the view (field order).
                let tensor = unsafe { SplitTensor::over(&*(Arc::as_ptr(&split))) }?;
                Producer::Gather { cursor, index: Vec::new(), tensor, _split: split }
            }
            images if options.pipeline.workers > 0 => {
                Producer::Workers(WorkerPool::start(options.pipeline.workers, |_| {
                    let images = images.clone();
                    let mut cursor = Cursor::new(schedule);
                    move |k, host: &mut HostBatch| {
                        host.fill(&images, cursor.indices(k), schedule.augment_rng(k))
                    }
                }))
            }
            images => Producer::Inline { images, cursor, host: HostBatch::default() },
        };
        Ok(Self { schedule, producer, uploader: Uploader::new(options), batches_done: 0 })
    }

    /// Full batches per epoch.
    pub fn batches_per_epoch(&self) -> usize {
        self.schedule.batches_per_epoch() as usize
    }

    /// Epochs consumed so far (fractional).
    pub fn epochs(&self) -> f64 {
        self.batches_done as f64 / self.schedule.batches_per_epoch() as f64
    }

    /// The next training batch (reshuffling at each epoch boundary).
    pub fn next_batch(&mut self) -> Result<Batch, Error> {
        let k = self.batches_done;
        self.batches_done += 1;
        match &mut self.producer {
            Producer::Inline { images, cursor, host } => {
                host.fill(images, cursor.indices(k), self.schedule.augment_rng(k))?;
                self.uploader.host(host)
            }
            Producer::Workers(pool) => {
                let (host, w) = pool.next()?;
                let batch = self.uploader.host(&host);
                pool.recycle(host, w);
                batch
            }
            Producer::Gather { cursor, index, tensor, .. } => {
                index.clear();
                index.extend(cursor.indices(k).iter().map(|&i| i as i64));
                let index = Tensor::f_from_slice(index)?;
                let images = tensor.images.f_index_select(0, &index)?;
                let labels = tensor.labels.f_index_select(0, &index)?;
                self.uploader.tensors(&images, &labels)
            }
        }
    }
}

/// Every sample of `split` once, in order, without augmentation (the last batch may be smaller).
/// With `zero-copy` each batch is a view of the split's bytes; otherwise it is copied out.
pub fn eval_batches(
    split: &CifarSplit,
    options: LoaderOptions,
) -> impl Iterator<Item = Result<Batch, Error>> + '_ {
    let uploader = Uploader::new(LoaderOptions { augment: false, ..options });
    let batch_size = options.batch_size.max(1);
    // SAFETY: the view lives in the iterator, which borrows `split`.
    let view = options.pipeline.zero_copy.then(|| unsafe { SplitTensor::over(split) }).transpose();
    let mut host = HostBatch::default();
    let mut indices = Vec::new();
    (0..split.len().div_ceil(batch_size)).map(move |i| {
        let start = i * batch_size;
        let end = (start + batch_size).min(split.len());
        match &view {
            Ok(Some(view)) => {
                let len = (end - start) as i64;
                let images = view.images.f_narrow(0, start as i64, len)?;
                let labels = view.labels.f_narrow(0, start as i64, len)?;
                uploader.tensors(&images, &labels)
            }
            Ok(None) => {
                indices.clear();
                indices.extend(start..end);
                host.fill(split, &indices, None)?;
                uploader.host(&host)
            }
            Err(e) => Err(Error::Torch(format!("viewing the evaluation split: {e}"))),
        }
    })
}

/// The per-channel affine map `x · scale + shift` that standardises uint8 pixels `x`.
#[derive(Debug)]
struct Standardisation {
    scale: Tensor,
    shift: Tensor,
}

impl Standardisation {
    /// The map for CIFAR-10's statistics, on `device`.
    fn new(device: Device) -> Self {
        // x / 255 standardised = x · 1/(255·std) − mean/std
        let scale: Vec<f32> = CIFAR_STD.iter().map(|s| (1.0 / (255.0 * s)) as f32).collect();
        let shift: Vec<f32> = CIFAR_MEAN.iter().zip(CIFAR_STD).map(|(m, s)| (-m / s) as f32).collect();
        let per_channel = |v: &[f32]| Tensor::from_slice(v).view([1, 3, 1, 1]).to_device(device);
        Self { scale: per_channel(&scale), shift: per_channel(&shift) }
    }
}

/// The training-thread end of the pipeline: host pixels to the device, on-device augmentation,
/// standardisation (or scaling to [0, 1]) and layout.
#[derive(Debug)]
struct Uploader {
    device: Device,
    channels_last: bool,
    pinned: bool,
    zero_copy: bool,
    /// Crop and flip on the device (training with `gpu-augment`).
    device_augment: bool,
    /// `None`: pixels only scaled to [0, 1].
    standardisation: Option<Standardisation>,
}

impl Uploader {
    fn new(options: LoaderOptions) -> Self {
        Self {
            device: options.device,
            channels_last: options.channels_last,
            pinned: options.pipeline.pinned,
            zero_copy: options.pipeline.zero_copy,
            device_augment: options.augment && options.pipeline.device_augment,
            standardisation: options.standardise.then(|| Standardisation::new(options.device)),
        }
    }

    /// A device batch from a host batch: its pixels wrapped in place (`zero-copy`) or copied into
    /// a new tensor (the baseline), its labels copied.
    fn host(&self, host: &HostBatch) -> Result<Batch, Error> {
        let n = host.labels.len() as i64;
        let side = SIDE_PX as i64;
        let shape = [n, 3, side, side];
        let labels = Tensor::f_from_slice(&host.labels)?;
        if self.zero_copy {
            // SAFETY: `pixels` holds n × 3072 bytes and outlives `view`, which is dropped before
            // this function returns; `tensors` never returns a tensor aliasing its input.
            let view =
                unsafe { Tensor::f_from_blob(host.pixels.as_ptr(), &shape, &[], Kind::Uint8, Device::Cpu)? };
            self.tensors(&view, &labels)
        } else {
            self.tensors(&Tensor::f_from_slice(&host.pixels)?.f_view(shape)?, &labels)
        }
    }

    /// A device batch from host tensors (uint8 images, int64 labels); the result never aliases
    /// `images`.
    fn tensors(&self, images: &Tensor, labels: &Tensor) -> Result<Batch, Error> {
        phases::enter(StepPhase::HostToDevice);
        let mut raw = self.transfer(images)?;
        if self.device_augment {
            raw = random_crop_and_flip(&raw)?;
        }
        // The conversion to float makes a new tensor.
        let pixels = raw.f_to_kind(Kind::Float)?;
        let mut inputs = match &self.standardisation {
            Some(s) => pixels.f_mul(&s.scale)?.f_add(&s.shift)?,
            None => pixels.f_div_scalar(255.0)?,
        };
        if self.channels_last {
            inputs = ffi::to_channels_last(&inputs)?;
        }
        Ok(Batch { inputs, targets: self.transfer(labels)? })
    }

    /// `t` on the training device, staged through pinned memory with `pin-memory`.
    fn transfer(&self, t: &Tensor) -> Result<Tensor, Error> {
        transfer::to_device(t, self.device, self.pinned)
    }
}

/// Crops and flips every image of `images` (`[n, C, 32, 32]`, any kind, any device) exactly as
/// [`crop_and_flip`] does one: image `i` becomes the 32×32 window at column `dx[i]`, row `dy[i]`
/// (both 0..=8) of its zero-padded 40×40 copy, mirrored horizontally where `flip[i]` (bool `[n]`).
/// One pad and one gather for the whole batch.
pub fn crop_and_flip_batch(
    images: &Tensor,
    dx: &Tensor,
    dy: &Tensor,
    flip: &Tensor,
) -> Result<Tensor, Error> {
    let size = images.size();
    let (n, channels) = (size[0], size[1]);
    let pad = CROP_PADDING_PX as i64;
    let side = SIDE_PX as i64;
    let padded_side = side + 2 * pad;
    let padded = images.f_constant_pad_nd([pad, pad, pad, pad])?.f_reshape([
        n,
        channels,
        padded_side * padded_side,
    ])?;
    let ramp = Tensor::f_arange(side, (Kind::Int64, images.device()))?.f_view([1, side])?;
    let mirrored = ramp.f_flip([1])?;
    let rows = dy.f_view([n, 1])? + &ramp;
    let cols = dx.f_view([n, 1])? + mirrored.f_where_self(&flip.f_view([n, 1])?, &ramp)?;
    let index = (rows.f_view([n, side, 1])? * padded_side + cols.f_view([n, 1, side])?)
        .f_view([n, 1, side * side])?
        .f_expand([n, channels, side * side], false)?;
    Ok(padded.f_gather(2, &index, false)?.f_view([n, channels, side, side])?)
}

/// [`crop_and_flip_batch`] with offsets uniform in 0..=8 and flips with probability ½, drawn by
/// libtorch's generator on the batch's device: no per-image work on the host.
pub fn random_crop_and_flip(images: &Tensor) -> Result<Tensor, Error> {
    let n = images.size()[0];
    let options = (Kind::Int64, images.device());
    let span = 2 * CROP_PADDING_PX as i64 + 1;
    let dx = Tensor::f_randint(span, [n], options)?;
    let dy = Tensor::f_randint(span, [n], options)?;
    let flip = Tensor::f_randint(2, [n], options)?.f_eq(1)?;
    crop_and_flip_batch(images, &dx, &dy, &flip)
}

/// Copies `src` (CHW, 32×32) into `out` shifted by the crop offset (`dx`, `dy` in 0..=8 of the
/// zero-padded 40×40 image), mirrored horizontally when `flip`.
pub fn crop_and_flip(src: &[u8], out: &mut [u8], dx: usize, dy: usize, flip: bool) {
    let plane = SIDE_PX * SIDE_PX;
    for c in 0..3 {
        for y in 0..SIDE_PX {
            let row = &mut out[c * plane + y * SIDE_PX..c * plane + (y + 1) * SIDE_PX];
            let sy = (y + dy).wrapping_sub(CROP_PADDING_PX);
            if sy >= SIDE_PX {
                row.fill(0);
                continue;
            }
            let src_row = &src[c * plane + sy * SIDE_PX..c * plane + (sy + 1) * SIDE_PX];
            for (x, px) in row.iter_mut().enumerate() {
                let ox = if flip { SIDE_PX - 1 - x } else { x };
                let sx = (ox + dx).wrapping_sub(CROP_PADDING_PX);
                *px = if sx < SIDE_PX { src_row[sx] } else { 0 };
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_support::{assert_same_batches, seeded};

    fn ramp_image() -> Vec<u8> {
        (0..IMAGE_BYTES).map(|i| (i % 251) as u8 + 1).collect()
    }

    #[test]
    fn every_trick_that_changes_the_pipeline_acts_on_the_loader() {
        for trick in Trick::ALL {
            if Pipeline::for_tricks(&TrickSet::only(trick)) != Pipeline::default() {
                assert_eq!(trick.stage(), crate::tricks::Stage::Loader, "{trick}");
            }
        }
    }

    #[test]
    fn centre_crop_without_flip_is_the_identity() {
        let src = ramp_image();
        let mut out = vec![0; IMAGE_BYTES];
        crop_and_flip(&src, &mut out, CROP_PADDING_PX, CROP_PADDING_PX, false);
        assert_eq!(out, src);
    }

    #[test]
    fn shifted_crop_pads_with_zeros_and_flip_mirrors_rows() {
        let src = ramp_image();
        let mut out = vec![0; IMAGE_BYTES];
        // dx = 0: the window starts 4 px left of the image, so the first 4 columns are padding.
        crop_and_flip(&src, &mut out, 0, CROP_PADDING_PX, false);
        assert!(out[..4].iter().all(|&p| p == 0));
        assert_eq!(out[4], src[0]);
        crop_and_flip(&src, &mut out, CROP_PADDING_PX, CROP_PADDING_PX, true);
        assert_eq!(out[0], src[31]);
        assert_eq!(out[31], src[0]);
    }

    #[test]
    fn batches_are_standardised_and_cover_each_epoch_once() {
        let mut split = CifarSplit::default();
        for i in 0..10u8 {
            split.push(i, &vec![i * 20; IMAGE_BYTES]);
        }
        let options = LoaderOptions {
            batch_size: 5,
            device: Device::Cpu,
            augment: false,
            channels_last: false,
            pipeline: Pipeline::default(),
            seed: 1,
            standardise: true,
        };
        let mut loader = CifarLoader::new(Arc::new(split.clone()), options).unwrap();
        let mut seen: Vec<i64> = Vec::new();
        for _ in 0..2 {
            let batch = loader.next_batch().unwrap();
            assert_eq!(batch.inputs.size(), [5, 3, 32, 32]);
            seen.extend(Vec::<i64>::try_from(&batch.targets).unwrap());
        }
        seen.sort_unstable();
        assert_eq!(seen, (0..10).collect::<Vec<_>>());
        assert_eq!(loader.epochs(), 1.0);
        let first = eval_batches(&split, options).next().unwrap().unwrap();
        let red = first.inputs.double_value(&[0, 0, 0, 0]);
        assert!((red - (0.0 - CIFAR_MEAN[0]) / CIFAR_STD[0]).abs() < 1e-5, "{red}");
        let batches: Vec<_> = eval_batches(&split, LoaderOptions { batch_size: 4, ..options }).collect();
        assert_eq!(batches.iter().map(|b| b.as_ref().unwrap().len()).collect::<Vec<_>>(), [4, 4, 2]);
    }

    /// `n` images whose pixels differ from image to image and from pixel to pixel, labelled `i % 10`.
    fn distinct_split(n: usize) -> CifarSplit {
        let mut split = CifarSplit::default();
        for i in 0..n {
            let image: Vec<u8> = (0..IMAGE_BYTES).map(|p| ((p * 7 + i * 13) % 251) as u8 + 1).collect();
            split.push((i % 10) as u8, &image);
        }
        split
    }

    fn training_options(pipeline: Pipeline) -> LoaderOptions {
        LoaderOptions {
            batch_size: 4,
            device: Device::Cpu,
            augment: true,
            channels_last: false,
            seed: 3,
            pipeline,
            standardise: true,
        }
    }

    fn batches(split: &Arc<CifarSplit>, options: LoaderOptions, count: usize) -> Vec<Batch> {
        let mut loader = CifarLoader::new(split.clone(), options).unwrap();
        (0..count).map(|_| loader.next_batch().unwrap()).collect()
    }

    #[test]
    fn worker_threads_yield_exactly_the_training_threads_batches() {
        let split = Arc::new(distinct_split(22));
        // 5 batches per epoch: 13 batches cross two epoch boundaries.
        let inline = batches(&split, training_options(Pipeline::default()), 13);
        for workers in [2, 3] {
            let threaded = batches(&split, training_options(Pipeline { workers, ..Pipeline::default() }), 13);
            assert_same_batches(&inline, &threaded);
        }
        assert!(!inline[0].inputs.equal(&inline[5].inputs), "each epoch is reshuffled and re-augmented");
        assert!(worker_count() >= 2);
        // Dropping a loader whose workers are blocked on a full queue stops them (no hang).
        let mut loader =
            CifarLoader::new(split, training_options(Pipeline { workers: 2, ..Pipeline::default() }));
        loader.as_mut().unwrap().next_batch().unwrap();
        drop(loader);
    }

    #[test]
    fn the_schedule_rebuilds_the_loaders_batches() {
        let split = Arc::new(distinct_split(22));
        // 5 batches per epoch: 7 batches cross an epoch boundary.
        let options = LoaderOptions { standardise: false, ..training_options(Pipeline::default()) };
        let loaded = batches(&split, options, 7);
        let planned = schedule(split.len(), &options, 7).unwrap();
        for (batch, plan) in loaded.iter().zip(&planned) {
            let labels: Vec<i64> = plan.indices.iter().map(|&i| i64::from(split.labels[i])).collect();
            assert_eq!(Vec::<i64>::try_from(&batch.targets).unwrap(), labels);
            let mut pixels = vec![0u8; plan.indices.len() * IMAGE_BYTES];
            for ((out, &i), crop) in pixels.chunks_exact_mut(IMAGE_BYTES).zip(&plan.indices).zip(&plan.crops)
            {
                crop_and_flip(split.image(i), out, crop.dx, crop.dy, crop.flip);
            }
            let rebuilt = Tensor::from_slice(&pixels).view([4, 3, 32, 32]).to_kind(Kind::Float) / 255.0;
            assert!(batch.inputs.allclose(&rebuilt, 1e-6, 1e-6, false));
        }
        let unaugmented = schedule(split.len(), &LoaderOptions { augment: false, ..options }, 2).unwrap();
        assert!(unaugmented.iter().all(|b| b.crops.is_empty()));
        assert_eq!(unaugmented[1].indices, planned[1].indices, "augmentation does not change the order");
        assert!(schedule(3, &options, 1).is_err(), "fewer images than a batch");
    }

    #[test]
    fn device_crop_and_flip_equals_the_per_image_loop_for_given_offsets() {
        let split = distinct_split(6);
        let offsets =
            [(0usize, 0usize, false), (8, 8, true), (4, 4, false), (4, 4, true), (1, 7, true), (6, 2, false)];
        let images = Tensor::from_slice(&split.images).view([6, 3, 32, 32]);
        let column = |f: fn(&(usize, usize, bool)) -> i64| {
            Tensor::from_slice(&offsets.iter().map(f).collect::<Vec<_>>())
        };
        let flip = column(|o| i64::from(o.2)).eq(1);
        let on_device =
            crop_and_flip_batch(&images, &column(|o| o.0 as i64), &column(|o| o.1 as i64), &flip).unwrap();
        let mut on_host = vec![0u8; 6 * IMAGE_BYTES];
        for (i, (out, &(dx, dy, flip))) in on_host.chunks_exact_mut(IMAGE_BYTES).zip(&offsets).enumerate() {
            crop_and_flip(split.image(i), out, dx, dy, flip);
        }
        assert_eq!(Vec::<u8>::try_from(on_device.flatten(0, -1)).unwrap(), on_host);
    }

    #[test]
    fn device_augmentation_statistics_match_host_augmentation() {
        // One image augmented n times each way: the padding fraction, the per-column mean (which a
        // left-to-right ramp makes sensitive to the flip rate and horizontal offsets) and the
        // per-row mean (vertical offsets) must agree.
        let n = 4000;
        let ramp: Vec<u8> =
            (0..IMAGE_BYTES).map(|p| (p % 32) as u8 * 4 + (p / 32 % 32) as u8 * 3 + 10).collect();
        let mut split = CifarSplit::default();
        split.push(0, &ramp);
        let mut host = HostBatch::default();
        host.fill(&split, &vec![0; n], Some(stream(11, 1))).unwrap();
        let host = Tensor::from_slice(&host.pixels).view([n as i64, 3, 32, 32]);
        let copies = Tensor::from_slice(&ramp).view([1, 3, 32, 32]).expand([n as i64, 3, 32, 32], false);
        let device = seeded(11, || random_crop_and_flip(&copies).unwrap());
        let zeros = |t: &Tensor| t.eq(0).to_kind(Kind::Float).mean(Kind::Float).double_value(&[]);
        let (zh, zd) = (zeros(&host), zeros(&device));
        assert!((zh - zd).abs() < 0.01, "padding fraction {zh} vs {zd}");
        assert!(zh > 0.1, "{zh}: crops must shift images into the padding");
        for dim in [2i64, 3] {
            let profile = |t: &Tensor| {
                t.to_kind(Kind::Float).mean_dim([0i64, 1, 5 - dim].as_slice(), false, Kind::Float)
            };
            let gap = (profile(&host) - profile(&device)).abs().max().double_value(&[]);
            assert!(gap < 4.0, "mean profile along dim {dim} differs by {gap}");
        }
    }

    #[test]
    fn zero_copy_views_the_split_and_yields_the_same_batches() {
        let split = Arc::new(distinct_split(22));
        // SAFETY: `split` outlives `view`.
        let view = unsafe { SplitTensor::over(&split) }.unwrap();
        assert_eq!(view.images.data_ptr() as *const u8, split.images.as_ptr(), "a view, not a copy");
        // Host augmentation: pixels wrapped instead of copied.
        let zero_copy = Pipeline { zero_copy: true, ..Pipeline::default() };
        assert_same_batches(
            &batches(&split, training_options(Pipeline::default()), 7),
            &batches(&split, training_options(zero_copy), 7),
        );
        // Device augmentation: batches gathered from the split tensor.
        let device = Pipeline { device_augment: true, ..Pipeline::default() };
        let run = |pipeline| seeded(5, || batches(&split, training_options(pipeline), 7));
        assert_same_batches(&run(device), &run(Pipeline { zero_copy: true, ..device }));
        // Evaluation: narrow views.
        let eval = |pipeline| -> Vec<Batch> {
            eval_batches(&split, LoaderOptions { batch_size: 8, ..training_options(pipeline) })
                .map(Result::unwrap)
                .collect()
        };
        assert_same_batches(&eval(Pipeline::default()), &eval(zero_copy));
    }

    #[test]
    fn raw_inputs_are_pixels_scaled_to_the_unit_range() {
        // Image i has every pixel of channel c at 10·i + 50·c + 5: over 8 images channel c
        // averages 40 + 50·c (out of 255).
        let mut split = CifarSplit::default();
        for i in 0..8usize {
            let image: Vec<u8> = (0..IMAGE_BYTES).map(|p| (10 * i + 50 * (p / 1024) + 5) as u8).collect();
            split.push(0, &image);
        }
        let options =
            LoaderOptions { batch_size: 8, standardise: false, ..training_options(Pipeline::default()) };
        let raw = eval_batches(&split, options).next().unwrap().unwrap().inputs;
        let means = Vec::<f64>::try_from(raw.mean_dim([0i64, 2, 3].as_slice(), false, Kind::Float)).unwrap();
        for (c, mean) in means.into_iter().enumerate() {
            let expected = (40.0 + 50.0 * c as f64) / 255.0;
            assert!((mean - expected).abs() < 1e-6, "channel {c}: mean {mean}, expected {expected}");
        }
        // ToTensor alone: the uint8 pixels divided by 255.
        let pixels = Tensor::from_slice(&split.images).view([8, 3, 32, 32]);
        assert!(raw.equal(&(pixels.to_kind(Kind::Float) / 255.0)));
    }

    /// [`CIFAR_MEAN`] and [`CIFAR_STD`] as `[1, 3, 1, 1]` tensors.
    fn statistics() -> (Tensor, Tensor) {
        let per_channel = |v: [f64; 3]| Tensor::from_slice(&v).to_kind(Kind::Float).view([1, 3, 1, 1]);
        (per_channel(CIFAR_MEAN), per_channel(CIFAR_STD))
    }

    /// Asserts that `inputs` are uint8 pixels scaled to [0, 1]: multiples of 1/255 in [0, 1].
    fn assert_scaled_pixels(inputs: &Tensor, what: &str) {
        let (lo, hi) = (inputs.min().double_value(&[]), inputs.max().double_value(&[]));
        assert!(0.0 <= lo && hi <= 1.0, "{what}: values in [{lo}, {hi}]");
        let levels = inputs * 255.0;
        let off_grid = (&levels - levels.round()).abs().max().double_value(&[]);
        assert!(off_grid < 1e-3, "{what}: {off_grid} off the 1/255 grid");
    }

    /// Asserts that `raw` batches are scaled pixels and `standardised` ones standardised scaled
    /// pixels; when `paired`, that each standardised batch is its raw batch standardised.
    fn assert_standardisation_of(raw: &[Batch], standardised: &[Batch], paired: bool) {
        assert_eq!(raw.len(), standardised.len());
        let (mean, std) = statistics();
        for (k, (raw, standardised)) in raw.iter().zip(standardised).enumerate() {
            assert_scaled_pixels(&raw.inputs, &format!("raw batch {k}"));
            assert_scaled_pixels(&(&standardised.inputs * &std + &mean), &format!("standardised batch {k}"));
            if paired {
                assert!(raw.targets.equal(&standardised.targets), "batch {k}: different labels");
                // Computed as x·1/(255·std) − mean/std: equal up to float rounding.
                let expected = (&raw.inputs - &mean) / &std;
                assert!(standardised.inputs.allclose(&expected, 1e-5, 1e-5, false), "batch {k}");
            }
        }
    }

    #[test]
    fn every_pipeline_standardises_or_not_the_same_images() {
        let split = Arc::new(distinct_split(22));
        let workers = Pipeline { workers: 2, ..Pipeline::default() };
        let zero_copy = Pipeline { zero_copy: true, ..Pipeline::default() };
        let device = Pipeline { device_augment: true, ..Pipeline::default() };
        let device_zero_copy = Pipeline { zero_copy: true, ..device };
        for pipeline in [Pipeline::default(), workers, zero_copy, device, device_zero_copy] {
            let run =
                |standardise| batches(&split, LoaderOptions { standardise, ..training_options(pipeline) }, 7);
            // Device augmentation draws from libtorch's global generator, which tests running in
            // parallel also draw from: its batches cannot be paired reliably.
            assert_standardisation_of(&run(false), &run(true), !pipeline.device_augment);
            let eval = |standardise| -> Vec<Batch> {
                let options = LoaderOptions { batch_size: 8, standardise, ..training_options(pipeline) };
                eval_batches(&split, options).map(Result::unwrap).collect()
            };
            assert_standardisation_of(&eval(false), &eval(true), true);
        }
    }

    #[test]
    fn pinned_staging_buffers_need_a_cuda_device() {
        match ffi::empty_pinned_like(&Tensor::zeros([4, 3072], (Kind::Uint8, Device::Cpu))) {
            Ok(t) => {
                assert!(tch::Cuda::is_available(), "pinned memory without CUDA");
                assert!(t.is_pinned(Device::Cuda(0)));
                assert_eq!(t.size(), [4, 3072]);
            }
            Err(e) => {
                assert!(!tch::Cuda::is_available(), "{e}");
                assert!(e.to_string().contains("pinned Uint8 host tensor of shape [4, 3072]"), "{e}");
            }
        }
        // On the CPU the pin-memory uploader has nothing to copy: it gives the batch as it is.
        let pinned = Uploader::new(training_options(Pipeline { pinned: true, ..Pipeline::default() }));
        let t = Tensor::from_slice(&[1u8, 2, 3]);
        assert_eq!(pinned.transfer(&t).unwrap().data_ptr(), t.data_ptr());
    }

    #[test]
    fn packed_and_decoded_pipelines_yield_identical_batches() {
        // PNG is lossless: decoding the files every batch must give the packed split's batches.
        let dir = tempfile::tempdir().unwrap();
        let mut k = 0u32;
        for split in ["train", "test"] {
            for class in ["cat", "dog"] {
                let folder = dir.path().join(split).join(class);
                std::fs::create_dir_all(&folder).unwrap();
                for i in 0..5 {
                    k += 1;
                    let image = image::RgbImage::from_fn(32, 32, |x, y| {
                        image::Rgb([(x * 7 + k * 31) as u8, (y * 5 + k) as u8, ((x ^ y) + k * 3) as u8])
                    });
                    image.save(folder.join(format!("{i}.png"))).unwrap();
                }
            }
        }
        let (train, test) = crate::data::import::read_encoded(dir.path()).unwrap();
        assert_eq!((train.len(), test.len()), (10, 10));
        let packed = Arc::new(train.pack().unwrap());
        let options = training_options(Pipeline::default());
        let mut decoding = CifarLoader::new(ImageSource::Encoded(Arc::new(train)), options).unwrap();
        let decoded: Vec<Batch> = (0..6).map(|_| decoding.next_batch().unwrap()).collect();
        assert_same_batches(&batches(&packed, options, 6), &decoded);
    }

    #[test]
    fn a_split_smaller_than_a_batch_is_an_error() {
        let options = LoaderOptions {
            batch_size: 64,
            device: Device::Cpu,
            augment: true,
            channels_last: false,
            pipeline: Pipeline::default(),
            seed: 0,
            standardise: true,
        };
        let message = CifarLoader::new(Arc::new(CifarSplit::default()), options).unwrap_err().to_string();
        assert!(message.contains("batch size 64"), "{message}");
    }
}
