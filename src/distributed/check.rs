//! `trickbench ddp-check`: a few DDP training steps of a small network on fixed data, whose
//! weights must come out the same on every rank and equal to one process training on the whole
//! batch. A set-up check for a machine or cluster, and what the tests run on two CPU processes.

use std::rc::Rc;

use tch::{Kind, Tensor};

use crate::data::loader::Batch;
use crate::device::DeviceSpec;
use crate::distributed::env::DistEnv;
use crate::distributed::group::ProcessGroup;
use crate::error::Error;
use crate::optim::sgd::SgdConfig;
use crate::train::recipe::BN_MOMENTUM;
use crate::train::Trainer;
use crate::tricks::TrickSet;
use crate::workloads::resnet::{CifarResnet, ResnetOptions};
use crate::workloads::Workload;

/// The learning rate of the check's SGD steps.
pub const CHECK_LR: f64 = 0.05;

/// What to train.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CheckOptions {
    /// Training steps.
    pub steps: usize,
    /// Samples per step on each rank.
    pub batch_size: usize,
    /// Bucket size of the gradient all-reduce, bytes.
    pub bucket_bytes: usize,
    /// The CPU (gloo) or CUDA (NCCL, each rank on the GPU of its local rank).
    pub device: DeviceSpec,
    /// The rank that fails on purpose right after joining the world, if any.
    pub fail_rank: Option<usize>,
}

/// What a check trained.
#[derive(Debug)]
pub struct CheckOutcome {
    /// This process's rank (0 alone).
    pub rank: usize,
    /// The number of ranks (1 alone).
    pub world_size: usize,
    /// Gradient buckets all-reduced per step (0 alone).
    pub buckets: usize,
    /// The last step's mean loss on this rank's samples.
    pub last_loss: f64,
    /// The sum of every weight, in f64.
    pub checksum: f64,
    /// The trained weights by name.
    pub weights: Vec<(String, Tensor)>,
}

/// Trains a ResNet-8 without BatchNorm (whose gradients are plain per-sample means, so that DDP
/// over shards equals one process on their concatenation) with SGD (momentum 0.9, weight decay
/// 5e-4) for `options.steps` steps. Step `s`'s whole batch is drawn from seed `1000 + s`, world
/// size × batch-size images with labels; rank `r` trains on rows `r·B … (r+1)·B - 1` of it.
/// Without `dist` it trains alone on all of it.
pub fn run(options: &CheckOptions, dist: Option<&DistEnv>) -> Result<CheckOutcome, Error> {
    let (rank, world_size) = dist.map_or((0, 1), |env| (env.rank, env.world_size));
    let device = match (options.device, dist) {
        (DeviceSpec::Cuda(_), Some(env)) => DeviceSpec::Cuda(env.local_rank),
        (device, _) => device,
    };
    let group = dist.map(|env| ProcessGroup::join(env, device)).transpose()?.map(Rc::new);
    if options.fail_rank == Some(rank) {
        return Err(Error::Distributed(format!("rank {rank} stops here on purpose (--fail-rank {rank})")));
    }
    tch::manual_seed(0);
    let structure =
        ResnetOptions { blocks_per_stage: 1, conv_bias: true, batch_norm: false, bn_momentum: BN_MOMENTUM };
    let model = CifarResnet::new(structure, device.tch());
    let sgd = SgdConfig { momentum: 0.9, weight_decay: 5e-4 };
    let mut trainer = Trainer::new(model, &TrickSet::baseline(), device, sgd)?;
    if let Some(group) = group {
        trainer = trainer.with_ddp(group, options.bucket_bytes)?;
    }
    let b = options.batch_size as i64;
    for step in 0..options.steps {
        tch::manual_seed(1000 + step as i64);
        let all = b * world_size as i64;
        let inputs = Tensor::randn([all, 3, 32, 32], (Kind::Float, tch::Device::Cpu));
        let targets = Tensor::randint(10, [all], (Kind::Int64, tch::Device::Cpu));
        let start = b * rank as i64;
        let batch = Batch {
            inputs: inputs.narrow(0, start, b).to_device(device.tch()),
            targets: targets.narrow(0, start, b).to_device(device.tch()),
        };
        trainer.train_step(&batch, CHECK_LR)?;
    }
    trainer.metrics_mut().flush();
    let last_loss = trainer.metrics_mut().last_mean_loss().unwrap_or(f64::NAN);
    let mut weights: Vec<(String, Tensor)> = trainer
        .workload()
        .var_store()
        .variables()
        .into_iter()
        .map(|(name, t)| (name, t.detach().to_device(tch::Device::Cpu)))
        .collect();
    weights.sort_by(|a, b| a.0.cmp(&b.0));
    let checksum =
        weights.iter().map(|(_, t)| t.to_kind(Kind::Double).sum(Kind::Double).double_value(&[])).sum();
    Ok(CheckOutcome { rank, world_size, buckets: trainer.ddp_buckets(), last_loss, checksum, weights })
}
