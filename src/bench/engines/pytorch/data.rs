//! The data a case of the PyTorch engine carries, from which the engine's own
//! `torch.utils.data.DataLoader` assembles the batches a libtorch process of the cell would train
//! on: the images a few batches take (packed pixels, or the JPEG/PNG files where the run reads
//! image files) with each batch's indices and host crops, or the token split with each batch's
//! window starts. The engine does the loading work itself, inside its timed windows, as
//! trickbench's loader does inside libtorch's.

use std::collections::BTreeMap;
use std::path::Path;

use serde::Serialize;
use tch::Tensor;

use crate::bench::cell::data::{CellData, InputOptions};
use crate::data::cifar::IMAGE_BYTES;
use crate::data::loader::{self, ImageSource, Images, LoaderOptions, Pipeline, ScheduledBatch};
use crate::data::text::window_starts;
use crate::error::Error;
use crate::results::schema::{CellKind, Phase};

/// The data file inside the case's folder.
const DATA_FILE: &str = "data.safetensors";
/// Batches scheduled, which the engine's loader cycles through: enough that a window does not
/// train on one batch again and again, few enough to write in a moment.
pub(super) const CASE_BATCHES: usize = 8;

/// What the engine script reads from the case's `data` field (its module documentation
/// describes each field).
#[derive(Debug, Serialize)]
#[serde(tag = "kind", rename_all = "kebab-case")]
pub(super) enum DataSpec {
    /// CIFAR images.
    Images {
        /// The data file in the case's folder.
        file: &'static str,
        /// Batches scheduled in it.
        batches: usize,
        /// Whether each scheduled image carries its crop and flip (training batches).
        augment: bool,
        /// Whether pixels are standardised per channel (else only scaled to [0, 1]).
        standardise: bool,
        /// Whether the file holds the images as their JPEG/PNG files, decoded by the engine.
        encoded: bool,
    },
    /// Token windows of a text.
    Text {
        /// The data file in the case's folder.
        file: &'static str,
        /// Batches scheduled in it.
        batches: usize,
        /// Tokens per window, the model's context.
        context: usize,
    },
    /// The user's model's prepared batches (`inputs.K`, `targets.K`).
    Batches {
        /// The batches' file in the case's folder.
        file: &'static str,
        /// Batches in it.
        batches: usize,
    },
}

/// Writes the data of the first `count` batches a cell of `kind` trains on into `dir` (training
/// batches, or held-out batches for evaluation), drawn as `inputs` draws them; `data` must hold
/// the image files where the run reads them ([`CellData::load_packing`] without packing).
pub(super) fn write(
    kind: CellKind,
    data: &CellData,
    inputs: &InputOptions,
    count: usize,
    dir: &Path,
) -> Result<DataSpec, Error> {
    let path = dir.join(DATA_FILE);
    let eval = kind == (CellKind::Throughput { phase: Phase::Eval });
    let spec = match data {
        CellData::Images { train, test, .. } => {
            let source = if eval { ImageSource::Packed(test.clone()) } else { train.clone() };
            let options = LoaderOptions {
                batch_size: inputs.batch_size,
                device: tch::Device::Cpu,
                augment: !eval,
                channels_last: false,
                seed: inputs.seed,
                pipeline: Pipeline::default(),
                standardise: inputs.recipe.standardise_inputs,
            };
            let encoded = matches!(source, ImageSource::Encoded(_));
            let batches = loader::schedule(source.count(), &options, count)?;
            write_images(&source, &batches, &path)?;
            DataSpec::Images {
                file: DATA_FILE,
                batches: count,
                augment: !eval,
                standardise: options.standardise,
                encoded,
            }
        }
        CellData::Text { corpus, context } => {
            let split = if eval { &corpus.validation } else { &corpus.train };
            write_text(split, inputs, *context, count, &path)?;
            DataSpec::Text { file: DATA_FILE, batches: count, context: *context }
        }
        CellData::Prepared(prepared) => {
            let batches = prepared.at_batch_size(inputs.batch_size)?;
            Tensor::write_safetensors(&batches.named(), &path)
                .map_err(|e| Error::Torch(format!("writing {}: {e}", path.display())))?;
            DataSpec::Batches { file: DATA_FILE, batches: batches.len() }
        }
        CellData::Samples(_) => {
            return Err(Error::Invalid(format!(
            "{}: the PyTorch engine trains your model to a target on CIFAR-10's images, not on its dataset()",
            inputs.job.key.workload
        )))
        }
    };
    Ok(spec)
}

/// The images `batches` take, in the order of their indices in the split, as `images` (pixels)
/// or `encoded` and `offsets` (files); their `labels`; each batch's `index.K` into them and, where
/// augmented, `crop.K` (one row of dx, dy, flip per image).
fn write_images(source: &ImageSource, batches: &[ScheduledBatch], path: &Path) -> Result<(), Error> {
    let taken: BTreeMap<usize, i64> = batches
        .iter()
        .flat_map(|b| b.indices.iter().copied())
        .collect::<std::collections::BTreeSet<_>>()
        .into_iter()
        .zip(0..)
        .collect();
    let mut tensors = Vec::new();
    match source {
        ImageSource::Encoded(files) => {
            let (mut bytes, mut offsets) = (Vec::new(), vec![0i64]);
            for &i in taken.keys() {
                bytes.extend_from_slice(&files.encoded(i)?);
                offsets.push(bytes.len() as i64);
            }
            tensors.push(("encoded".to_owned(), Tensor::from_slice(&bytes)));
            tensors.push(("offsets".to_owned(), Tensor::from_slice(&offsets)));
        }
        ImageSource::Packed(split) => {
            let mut pixels = Vec::with_capacity(taken.len() * IMAGE_BYTES);
            for &i in taken.keys() {
                pixels.extend_from_slice(split.image(i));
            }
            tensors.push((
                "images".to_owned(),
                Tensor::from_slice(&pixels).view([taken.len() as i64, 3, 32, 32]),
            ));
        }
    }
    let labels: Vec<i64> = taken.keys().map(|&i| i64::from(source.label(i))).collect();
    tensors.push(("labels".to_owned(), Tensor::from_slice(&labels)));
    for (k, batch) in batches.iter().enumerate() {
        let index: Vec<i64> = batch.indices.iter().map(|i| taken[i]).collect();
        tensors.push((format!("index.{k}"), Tensor::from_slice(&index)));
        if !batch.crops.is_empty() {
            let crops: Vec<i64> =
                batch.crops.iter().flat_map(|c| [c.dx as i64, c.dy as i64, i64::from(c.flip)]).collect();
            tensors.push((format!("crop.{k}"), Tensor::from_slice(&crops).view([-1, 3])));
        }
    }
    save(&tensors, path)
}

/// The token split as `tokens` (int32) and the first `count` batches' window starts as
/// `starts.K`.
fn write_text(
    split: &[u16],
    inputs: &InputOptions,
    context: usize,
    count: usize,
    path: &Path,
) -> Result<(), Error> {
    if split.len() <= context {
        return Err(Error::Invalid(format!(
            "context {context} needs a split of at least {} tokens; the split has {}",
            context + 1,
            split.len()
        )));
    }
    let tokens: Vec<i32> = split.iter().map(|&t| i32::from(t)).collect();
    let mut tensors = vec![("tokens".to_owned(), Tensor::from_slice(&tokens))];
    for k in 0..count {
        let starts = window_starts(split.len(), inputs.batch_size, context, inputs.seed, k as u64);
        let starts: Vec<i64> = starts.into_iter().map(|s| s as i64).collect();
        tensors.push((format!("starts.{k}"), Tensor::from_slice(&starts)));
    }
    save(&tensors, path)
}

/// Writes `tensors` to `path` as safetensors.
fn save(tensors: &[(String, Tensor)], path: &Path) -> Result<(), Error> {
    Tensor::write_safetensors(tensors, path)
        .map_err(|e| Error::Torch(format!("writing {}: {e}", path.display())))
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;
    use std::sync::Arc;

    use tch::Kind;

    use super::*;
    use crate::data::cifar::CifarSplit;
    use crate::data::loader::{crop_and_flip, CifarLoader};

    /// `n` images whose pixels differ from image to image, labelled `i % 10`.
    fn split(n: usize) -> Arc<CifarSplit> {
        let mut split = CifarSplit::default();
        for i in 0..n {
            let image: Vec<u8> = (0..IMAGE_BYTES).map(|p| ((p * 5 + i * 17) % 251) as u8).collect();
            split.push((i % 10) as u8, &image);
        }
        Arc::new(split)
    }

    #[test]
    fn the_written_images_and_schedule_rebuild_the_loaders_batches() {
        let split = split(30);
        let options = LoaderOptions {
            batch_size: 8,
            device: tch::Device::Cpu,
            augment: true,
            channels_last: false,
            seed: 9,
            pipeline: Pipeline::default(),
            standardise: false,
        };
        let batches = loader::schedule(split.len(), &options, 5).unwrap();
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(DATA_FILE);
        write_images(&ImageSource::Packed(split.clone()), &batches, &path).unwrap();
        let tensors: HashMap<String, Tensor> = Tensor::read_safetensors(&path).unwrap().into_iter().collect();
        let images = Vec::<u8>::try_from(tensors["images"].flatten(0, -1)).unwrap();
        let labels = Vec::<i64>::try_from(&tensors["labels"]).unwrap();
        let mut loader = CifarLoader::new(split, options).unwrap();
        for k in 0..5 {
            let index = Vec::<i64>::try_from(&tensors[&format!("index.{k}")]).unwrap();
            let crops = Vec::<i64>::try_from(tensors[&format!("crop.{k}")].flatten(0, -1)).unwrap();
            let mut pixels = vec![0u8; index.len() * IMAGE_BYTES];
            for ((out, &i), crop) in pixels.chunks_exact_mut(IMAGE_BYTES).zip(&index).zip(crops.chunks(3)) {
                let image = &images[i as usize * IMAGE_BYTES..(i as usize + 1) * IMAGE_BYTES];
                crop_and_flip(image, out, crop[0] as usize, crop[1] as usize, crop[2] == 1);
            }
            let batch = loader.next_batch().unwrap();
            let rebuilt = Tensor::from_slice(&pixels).view([8, 3, 32, 32]).to_kind(Kind::Float) / 255.0;
            assert!(batch.inputs.allclose(&rebuilt, 1e-6, 1e-6, false), "batch {k}");
            let targets: Vec<i64> = index.iter().map(|&i| labels[i as usize]).collect();
            assert_eq!(Vec::<i64>::try_from(&batch.targets).unwrap(), targets, "batch {k}");
        }
    }
}
