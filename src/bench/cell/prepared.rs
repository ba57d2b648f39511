//! The user's model's prepared batches, held on the host, and the loader that copies them to the
//! device in turn. A cell whose batch size differs from the prepared one (a memory probe) trains
//! on the same samples, tiled: its batches are consecutive runs of the prepared samples, taken in
//! order and wrapping round.

use std::collections::HashMap;
use std::path::Path;
use std::rc::Rc;

use tch::{Device, Tensor};

use crate::bench::user_model;
use crate::data::loader::Batch;
use crate::error::Error;

use super::data::BatchSource;

/// The batches prepared for the user's model, cycled through; each step copies its batch to the
/// device, as a loop over batches held in host memory does.
#[derive(Debug, Clone)]
pub(in crate::bench) struct PreparedBatches {
    batches: Rc<Vec<Batch>>,
}

impl PreparedBatches {
    /// Reads the batches of the prepared folder `dir` (`inputs.K`, `targets.K` for K from 0).
    pub(super) fn read(dir: &Path) -> Result<Self, Error> {
        let path = dir.join(user_model::BATCHES_FILE);
        let mut named: HashMap<String, Tensor> = Tensor::read_safetensors(&path)
            .map_err(|e| Error::Torch(format!("reading {}: {e}", path.display())))?
            .into_iter()
            .collect();
        let mut batches = Vec::new();
        while let (Some(inputs), Some(targets)) = (
            named.remove(&format!("inputs.{}", batches.len())),
            named.remove(&format!("targets.{}", batches.len())),
        ) {
            batches.push(Batch { inputs, targets });
        }
        if batches.is_empty() {
            return Err(Error::Invalid(format!("{}: no inputs.0 and targets.0", path.display())));
        }
        Ok(Self { batches: Rc::new(batches) })
    }

    /// How many batches there are.
    pub(in crate::bench) fn len(&self) -> usize {
        self.batches.len()
    }

    /// The samples of every batch together (each batch's inputs' first dimension).
    pub(super) fn samples(&self) -> usize {
        self.batches.iter().map(samples_of).sum()
    }

    /// The batches, each of `batch_size` samples: these batches where they hold that many, else
    /// the prepared samples tiled, as many batches as the prepared samples fill (at least one),
    /// batch k holding samples k·`batch_size` onwards, wrapping round.
    pub(in crate::bench) fn at_batch_size(&self, batch_size: usize) -> Result<Self, Error> {
        if self.batches.iter().all(|b| samples_of(b) == batch_size) {
            return Ok(self.clone());
        }
        let cat = |part: fn(&Batch) -> &Tensor| {
            let parts: Vec<&Tensor> = self.batches.iter().map(part).collect();
            Tensor::f_cat(&parts, 0).map_err(|e| {
                Error::Torch(format!("the prepared batches differ in more than their sample count: {e}"))
            })
        };
        let (inputs, targets) = (cat(|b| &b.inputs)?, cat(|b| &b.targets)?);
        let samples = self.samples() as i64;
        let size = batch_size as i64;
        let count = (samples / size).max(1);
        let batches = (0..count)
            .map(|k| {
                let index =
                    (Tensor::arange(size, (tch::Kind::Int64, Device::Cpu)) + k * size).remainder(samples);
                Batch { inputs: inputs.index_select(0, &index), targets: targets.index_select(0, &index) }
            })
            .collect();
        Ok(Self { batches: Rc::new(batches) })
    }

    /// The batches by name, as the prepared file holds them (`inputs.K`, `targets.K`).
    pub(in crate::bench) fn named(&self) -> Vec<(String, Tensor)> {
        self.batches
            .iter()
            .enumerate()
            .flat_map(|(k, b)| {
                [
                    (format!("inputs.{k}"), b.inputs.shallow_clone()),
                    (format!("targets.{k}"), b.targets.shallow_clone()),
                ]
            })
            .collect()
    }

    /// An endless loader over the batches, delivering them to `device` (4-d floating inputs in
    /// channels-last memory format when `channels_last`).
    pub(super) fn loader(&self, device: Device, channels_last: bool) -> PreparedLoader {
        PreparedLoader { batches: self.batches.clone(), device, channels_last, next: 0 }
    }
}

/// The samples of a prepared batch: its inputs' first dimension.
fn samples_of(batch: &Batch) -> usize {
    batch.inputs.size().first().map_or(0, |&n| n as usize)
}

/// Endless copies of the prepared batches on the device, in turn.
pub(super) struct PreparedLoader {
    batches: Rc<Vec<Batch>>,
    device: Device,
    channels_last: bool,
    next: usize,
}

impl BatchSource for PreparedLoader {
    fn next_batch(&mut self) -> Result<Batch, Error> {
        let batch = &self.batches[self.next % self.batches.len()];
        self.next += 1;
        let mut inputs = batch.inputs.to_device(self.device);
        if self.channels_last && inputs.dim() == 4 && inputs.is_floating_point() {
            inputs = crate::ffi::to_channels_last(&inputs)?;
        }
        Ok(Batch { inputs, targets: batch.targets.to_device(self.device) })
    }

    fn epochs(&self) -> f64 {
        self.next as f64 / self.batches.len() as f64
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Four batches of two samples: sample s has inputs [s, s, s] and target s.
    fn prepared() -> PreparedBatches {
        let batches = (0..4)
            .map(|k| {
                let samples = Tensor::from_slice(&[2 * k, 2 * k + 1]);
                Batch {
                    inputs: samples.unsqueeze(1).repeat([1, 3]).to_kind(tch::Kind::Float),
                    targets: samples,
                }
            })
            .collect();
        PreparedBatches { batches: Rc::new(batches) }
    }

    fn targets(batches: &PreparedBatches) -> Vec<Vec<i64>> {
        batches.batches.iter().map(|b| Vec::<i64>::try_from(&b.targets).unwrap()).collect()
    }

    #[test]
    fn the_prepared_size_keeps_the_batches_and_other_sizes_tile_the_samples_in_order() {
        let batches = prepared();
        assert_eq!(batches.samples(), 8);
        assert_eq!(targets(&batches.at_batch_size(2).unwrap()), targets(&batches));
        assert_eq!(targets(&batches.at_batch_size(3).unwrap()), [[0, 1, 2], [3, 4, 5]]);
        assert_eq!(targets(&batches.at_batch_size(4).unwrap()), [[0, 1, 2, 3], [4, 5, 6, 7]]);
        let large = batches.at_batch_size(20).unwrap();
        assert_eq!(targets(&large), [[0, 1, 2, 3, 4, 5, 6, 7, 0, 1, 2, 3, 4, 5, 6, 7, 0, 1, 2, 3]]);
        let inputs = &large.batches[0].inputs;
        assert_eq!(inputs.size(), [20, 3]);
        assert_eq!(inputs.double_value(&[9, 2]), 1.0, "a sample's inputs go with its target");
    }

    #[test]
    fn batches_of_different_shapes_cannot_be_tiled() {
        let batches = (0..2)
            .map(|k| Batch {
                inputs: Tensor::zeros([2, 3 + k], (tch::Kind::Float, Device::Cpu)),
                targets: Tensor::from_slice(&[0i64, 1]),
            })
            .collect();
        let message = PreparedBatches { batches: Rc::new(batches) }.at_batch_size(3).unwrap_err().to_string();
        assert!(message.contains("differ in more than their sample count"), "{message}");
    }
}
