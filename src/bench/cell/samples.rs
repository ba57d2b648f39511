//! The user's model's own data, its file's `dataset()`, held on the host as the preparation wrote
//! it: training batches in a shuffled order each epoch (the remainder of an epoch dropped, as
//! CIFAR-10's loader does), and the test split in order.

use std::path::Path;
use std::rc::Rc;

use rand::seq::SliceRandom;
use tch::{Device, Tensor};

use super::data::BatchSource;
use crate::bench::user_model::DATASET_FILE;
use crate::data::loader::{stream, Batch};
use crate::error::Error;

/// One split: inputs and targets with the samples as their first dimension.
#[derive(Debug)]
struct Split {
    inputs: Tensor,
    targets: Tensor,
}

impl Split {
    fn len(&self) -> usize {
        self.inputs.size().first().map_or(0, |&n| n as usize)
    }

    /// The first `n` samples where `n` is given and smaller.
    fn cut(self, n: Option<usize>) -> Self {
        match n {
            Some(n) if n < self.len() => Split {
                inputs: self.inputs.narrow(0, 0, n as i64),
                targets: self.targets.narrow(0, 0, n as i64),
            },
            _ => self,
        }
    }

    /// The samples at `indices`, on `device`.
    fn batch(&self, indices: &[i64], device: Device) -> Batch {
        let index = Tensor::from_slice(indices);
        Batch {
            inputs: self.inputs.index_select(0, &index).to_device(device),
            targets: self.targets.index_select(0, &index).to_device(device),
        }
    }
}

/// The training and test splits of a `dataset()`.
#[derive(Debug, Clone)]
pub(in crate::bench) struct SampleSplits {
    train: Rc<Split>,
    test: Rc<Split>,
}

impl SampleSplits {
    /// Reads the splits of the prepared folder `dir`, cut to the first `train_samples` and
    /// `test_samples` where those are given.
    pub(super) fn read(
        dir: &Path,
        train_samples: Option<usize>,
        test_samples: Option<usize>,
    ) -> Result<Self, Error> {
        let path = dir.join(DATASET_FILE);
        let mut named = Tensor::read_safetensors(&path)
            .map_err(|e| Error::Torch(format!("reading {}: {e}", path.display())))?;
        let mut take = |name: &str| {
            let at = named.iter().position(|(n, _)| n == name);
            at.map(|i| named.swap_remove(i).1)
                .ok_or_else(|| Error::Invalid(format!("{}: no tensor {name}", path.display())))
        };
        let train = Split { inputs: take("train.inputs")?, targets: take("train.targets")? };
        let test = Split { inputs: take("test.inputs")?, targets: take("test.targets")? };
        Ok(Self { train: Rc::new(train.cut(train_samples)), test: Rc::new(test.cut(test_samples)) })
    }

    /// Samples of the training split.
    pub(super) fn train_samples(&self) -> usize {
        self.train.len()
    }

    /// Endless training batches of `batch_size` on `device`, shuffled each epoch from `seed`.
    pub(super) fn training(
        &self,
        batch_size: usize,
        device: Device,
        seed: u64,
    ) -> Result<SampleLoader, Error> {
        SampleLoader::new(self.train.clone(), batch_size, device, Some(seed))
    }

    /// Endless test batches of `batch_size` on `device`, in order.
    pub(super) fn test_endless(&self, batch_size: usize, device: Device) -> Result<SampleLoader, Error> {
        SampleLoader::new(self.test.clone(), batch_size.min(self.test.len()), device, None)
    }

    /// Every test sample once, in order, in batches of `batch_size` (the last one smaller).
    pub(super) fn test(
        &self,
        batch_size: usize,
        device: Device,
    ) -> impl Iterator<Item = Result<Batch, Error>> {
        let test = self.test.clone();
        let starts = (0..test.len()).step_by(batch_size.max(1));
        starts.map(move |start| {
            let end = (start + batch_size).min(test.len());
            Ok(test.batch(&(start as i64..end as i64).collect::<Vec<_>>(), device))
        })
    }
}

/// Endless batches of one split, in an order drawn per epoch (or in order).
pub(super) struct SampleLoader {
    split: Rc<Split>,
    batch_size: usize,
    device: Device,
    /// The shuffle's seed; `None`: in order.
    seed: Option<u64>,
    order: Vec<i64>,
    position: usize,
    epoch: u64,
    batches: usize,
}

impl SampleLoader {
    fn new(split: Rc<Split>, batch_size: usize, device: Device, seed: Option<u64>) -> Result<Self, Error> {
        if batch_size == 0 || batch_size > split.len() {
            return Err(Error::Invalid(format!(
                "dataset(): a split of {} samples cannot fill a batch of {batch_size}",
                split.len()
            )));
        }
        let order = (0..split.len() as i64).collect();
        let mut loader = Self { split, batch_size, device, seed, order, position: 0, epoch: 0, batches: 0 };
        loader.shuffle();
        Ok(loader)
    }

    fn shuffle(&mut self) {
        if let Some(seed) = self.seed {
            self.order.sort_unstable();
            self.order.shuffle(&mut stream(seed, 2 * self.epoch));
        }
    }
}

impl BatchSource for SampleLoader {
    fn next_batch(&mut self) -> Result<Batch, Error> {
        if self.position + self.batch_size > self.order.len() {
            self.epoch += 1;
            self.position = 0;
            self.shuffle();
        }
        let batch =
            self.split.batch(&self.order[self.position..self.position + self.batch_size], self.device);
        self.position += self.batch_size;
        self.batches += 1;
        Ok(batch)
    }

    fn epochs(&self) -> f64 {
        (self.batches * self.batch_size) as f64 / self.split.len() as f64
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Splits of 10 training and 3 test samples: sample s has inputs [s, s] and target s.
    fn splits() -> SampleSplits {
        let split = |n: i64| {
            let samples = Tensor::arange(n, (tch::Kind::Int64, Device::Cpu));
            Rc::new(Split { inputs: samples.unsqueeze(1).repeat([1, 2]), targets: samples })
        };
        SampleSplits { train: split(10), test: split(3) }
    }

    fn targets(batch: &Batch) -> Vec<i64> {
        Vec::<i64>::try_from(&batch.targets).unwrap()
    }

    #[test]
    fn training_draws_every_sample_once_an_epoch_in_a_seeded_order_and_the_test_split_in_order() {
        let data = splits();
        let mut loader = data.training(3, Device::Cpu, 7).unwrap();
        let epoch: Vec<i64> = (0..3).flat_map(|_| targets(&loader.next_batch().unwrap())).collect();
        let mut sorted = epoch.clone();
        sorted.sort_unstable();
        sorted.dedup();
        assert_eq!(sorted.len(), 9, "nine different samples; the tenth is the dropped remainder");
        assert_ne!(epoch, (0..9).collect::<Vec<_>>(), "shuffled");
        let mut again = data.training(3, Device::Cpu, 7).unwrap();
        let same: Vec<i64> = (0..3).flat_map(|_| targets(&again.next_batch().unwrap())).collect();
        assert_eq!(epoch, same, "the same seed draws the same order");
        let next = loader.next_batch().unwrap();
        assert_eq!(next.inputs.size(), [3, 2]);
        assert!((loader.epochs() - 1.2).abs() < 1e-9);
        let test: Vec<Vec<i64>> = data.test(2, Device::Cpu).map(|b| targets(&b.unwrap())).collect();
        assert_eq!(test, [vec![0, 1], vec![2]]);
        let message = data.training(11, Device::Cpu, 0).err().unwrap().to_string();
        assert!(message.contains("a split of 10 samples cannot fill a batch of 11"), "{message}");
    }
}
