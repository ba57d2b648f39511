//! Batches for training and evaluation from an in-memory CIFAR split: shuffling, the standard
//! augmentation (4-pixel zero-padded random crop and horizontal flip, per image on the host),
//! transfer to the device and per-channel standardisation.

use std::sync::Arc;

use rand::seq::SliceRandom;
use rand::{RngExt, SeedableRng};
use rand_chacha::ChaCha8Rng;
use tch::{Device, Kind, Tensor};

use crate::data::cifar::{CifarSplit, IMAGE_BYTES};
use crate::error::Error;
use crate::ffi;

/// Per-channel mean of the CIFAR-10 training images (pixel values scaled to [0, 1]).
pub const CIFAR_MEAN: [f64; 3] = [0.4914, 0.4822, 0.4465];
/// Per-channel standard deviation of the CIFAR-10 training images (scaled to [0, 1]).
pub const CIFAR_STD: [f64; 3] = [0.2470, 0.2435, 0.2616];

/// Zero padding on each side before the random crop, pixels.
const CROP_PADDING_PX: usize = 4;
/// Image side, pixels.
const SIDE_PX: usize = 32;

/// A batch on the training device.
#[derive(Debug)]
pub struct Batch {
    /// Images, `[n, 3, 32, 32]` float, standardised.
    pub inputs: Tensor,
    /// Class labels, `[n]` int64.
    pub targets: Tensor,
}

impl Batch {
    /// Number of samples.
    pub fn len(&self) -> usize {
        self.targets.size()[0] as usize
    }

    /// Whether the batch has no samples.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
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
}

/// Endless training batches: shuffled each epoch, the last incomplete batch dropped.
#[derive(Debug)]
pub struct CifarLoader {
    split: Arc<CifarSplit>,
    options: LoaderOptions,
    rng: ChaCha8Rng,
    order: Vec<usize>,
    cursor: usize,
    batches_done: usize,
    assembler: Assembler,
}

impl CifarLoader {
    /// A loader over `split`; fails when the split has fewer samples than one batch.
    pub fn new(split: Arc<CifarSplit>, options: LoaderOptions) -> Result<Self, Error> {
        if options.batch_size == 0 || split.len() < options.batch_size {
            return Err(Error::Invalid(format!(
                "batch size {} needs at least that many training images; the data has {}",
                options.batch_size,
                split.len()
            )));
        }
        let order = (0..split.len()).collect();
        Ok(Self {
            assembler: Assembler::new(options),
            split,
            rng: ChaCha8Rng::seed_from_u64(options.seed),
            options,
            order,
            cursor: usize::MAX,
            batches_done: 0,
        })
    }

    /// Full batches per epoch.
    pub fn batches_per_epoch(&self) -> usize {
        self.split.len() / self.options.batch_size
    }

    /// Epochs consumed so far (fractional).
    pub fn epochs(&self) -> f64 {
        self.batches_done as f64 / self.batches_per_epoch() as f64
    }

    /// The next training batch (reshuffling at each epoch boundary).
    pub fn next_batch(&mut self) -> Result<Batch, Error> {
        let b = self.options.batch_size;
        if self.cursor.saturating_add(b) > self.order.len() {
            self.order.shuffle(&mut self.rng);
            self.cursor = 0;
        }
        let indices = &self.order[self.cursor..self.cursor + b];
        self.cursor += b;
        self.batches_done += 1;
        let rng = self.options.augment.then_some(&mut self.rng);
        self.assembler.assemble(&self.split, indices, rng)
    }
}

/// Every sample of `split` once, in order, without augmentation (the last batch may be smaller).
pub fn eval_batches(
    split: &CifarSplit,
    options: LoaderOptions,
) -> impl Iterator<Item = Result<Batch, Error>> + '_ {
    let mut assembler = Assembler::new(LoaderOptions { augment: false, ..options });
    let indices: Vec<usize> = (0..split.len()).collect();
    let batch_size = options.batch_size.max(1);
    (0..split.len().div_ceil(batch_size)).map(move |i| {
        let end = ((i + 1) * batch_size).min(indices.len());
        assembler.assemble(split, &indices[i * batch_size..end], None)
    })
}

/// Reused host buffers and the standardisation constants.
#[derive(Debug)]
struct Assembler {
    options: LoaderOptions,
    pixels: Vec<u8>,
    labels: Vec<i64>,
    scale: Tensor,
    shift: Tensor,
}

impl Assembler {
    fn new(options: LoaderOptions) -> Self {
        // x / 255 standardised = x · 1/(255·std) − mean/std
        let scale: Vec<f32> = CIFAR_STD.iter().map(|s| (1.0 / (255.0 * s)) as f32).collect();
        let shift: Vec<f32> = CIFAR_MEAN.iter().zip(CIFAR_STD).map(|(m, s)| (-m / s) as f32).collect();
        let per_channel = |v: &[f32]| Tensor::from_slice(v).view([1, 3, 1, 1]).to_device(options.device);
        Self {
            options,
            pixels: Vec::new(),
            labels: Vec::new(),
            scale: per_channel(&scale),
            shift: per_channel(&shift),
        }
    }

    fn assemble(
        &mut self,
        split: &CifarSplit,
        indices: &[usize],
        rng: Option<&mut ChaCha8Rng>,
    ) -> Result<Batch, Error> {
        let n = indices.len();
        self.pixels.resize(n * IMAGE_BYTES, 0);
        self.labels.clear();
        self.labels.extend(indices.iter().map(|&i| i64::from(split.labels[i])));
        match rng {
            Some(rng) => {
                for (out, &i) in self.pixels.chunks_exact_mut(IMAGE_BYTES).zip(indices) {
                    let dx = rng.random_range(0..=2 * CROP_PADDING_PX);
                    let dy = rng.random_range(0..=2 * CROP_PADDING_PX);
                    let flip = rng.random_bool(0.5);
                    crop_and_flip(split.image(i), out, dx, dy, flip);
                }
            }
            None => {
                for (out, &i) in self.pixels.chunks_exact_mut(IMAGE_BYTES).zip(indices) {
                    out.copy_from_slice(split.image(i));
                }
            }
        }
        let side = SIDE_PX as i64;
        let raw = Tensor::f_from_slice(&self.pixels)?.f_view([n as i64, 3, side, side])?;
        let mut inputs =
            raw.f_to_device(self.options.device)?.f_to_kind(Kind::Float)? * &self.scale + &self.shift;
        if self.options.channels_last {
            inputs = ffi::to_channels_last(&inputs)?;
        }
        let targets = Tensor::f_from_slice(&self.labels)?.f_to_device(self.options.device)?;
        Ok(Batch { inputs, targets })
    }
}

/// Copies `src` (CHW, 32×32) into `out` shifted by the crop offset (`dx`, `dy` in 0..=8 of the
/// zero-padded 40×40 image), mirrored horizontally when `flip`.
fn crop_and_flip(src: &[u8], out: &mut [u8], dx: usize, dy: usize, flip: bool) {
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

    fn ramp_image() -> Vec<u8> {
        (0..IMAGE_BYTES).map(|i| (i % 251) as u8 + 1).collect()
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
            seed: 1,
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

    #[test]
    fn a_split_smaller_than_a_batch_is_an_error() {
        let options = LoaderOptions {
            batch_size: 64,
            device: Device::Cpu,
            augment: true,
            channels_last: false,
            seed: 0,
        };
        let message = CifarLoader::new(Arc::new(CifarSplit::default()), options).unwrap_err().to_string();
        assert!(message.contains("batch size 64"), "{message}");
    }
}
