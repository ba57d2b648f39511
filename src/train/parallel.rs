//! How a trainer spreads its steps over devices (the `ddp` trick and its reference): on one device,
//! as one rank of DDP, or as DataParallel over replicas; the plan of which, made before the model
//! exists, and what a step does under each.

use std::rc::Rc;

use tch::Tensor;

use crate::distributed::group::ProcessGroup;
use crate::error::Error;
use crate::measure::phases;
use crate::results::phases::StepPhase;
use crate::train::data_parallel::Replicas;
use crate::train::ddp::Ddp;
use crate::train::micro_batch::MicroBatchPass;
use crate::train::{LossScale, Trainer};
use crate::workloads::Workload;

/// How a trainer is to be spread over devices, decided before its model is built (a process
/// group is joined early, and a model per device is built only once the trainer's is).
#[derive(Debug)]
pub enum ParallelPlan {
    /// One process, one device.
    Single,
    /// One rank of DDP.
    Ddp {
        /// The ranks' process group.
        group: Rc<ProcessGroup>,
        /// The largest gradient bucket all-reduced at once, bytes.
        bucket_bytes: usize,
    },
    /// DataParallel from this process over further devices.
    DataParallel {
        /// Every device driven besides the trainer's own.
        devices: Vec<tch::Device>,
    },
}

impl ParallelPlan {
    /// `trainer` spread as planned, building each DataParallel replica with `build` (a model for
    /// a device).
    pub fn apply<W: Workload>(
        self,
        trainer: Trainer<W>,
        build: impl Fn(tch::Device) -> Result<W, Error>,
    ) -> Result<Trainer<W>, Error> {
        match self {
            ParallelPlan::Single => Ok(trainer),
            ParallelPlan::Ddp { group, bucket_bytes } => trainer.with_ddp(group, bucket_bytes),
            ParallelPlan::DataParallel { devices } => {
                let replicas = devices.into_iter().map(build).collect::<Result<Vec<W>, Error>>()?;
                trainer.with_replicas(replicas)
            }
        }
    }
}

/// How a trainer's steps run over devices.
#[derive(Debug)]
pub enum Parallel<W: Workload> {
    /// On the trainer's device alone.
    Single,
    /// As one rank of DDP: gradients averaged over the ranks while backward runs.
    Ddp(Ddp),
    /// As DataParallel: every micro-batch split over the trainer's model and these replicas.
    DataParallel(Replicas<W>),
}

impl<W: Workload> Parallel<W> {
    /// Fails unless the steps run on one device: a trainer is spread over devices one way only,
    /// and `what` would be a second.
    pub fn refuse_second(&self, what: &str) -> Result<(), Error> {
        let current = match self {
            Parallel::Single => return Ok(()),
            Parallel::Ddp(_) => "ddp",
            Parallel::DataParallel(_) => "data-parallel",
        };
        Err(Error::Invalid(format!("{what}: the trainer already runs {current}, and runs one way only")))
    }

    /// Before a step's first forward pass: rank 0's buffers to every DDP rank, or `master`'s
    /// weights and buffers into every replica.
    pub fn before_forward(&mut self, master: &W) -> Result<(), Error> {
        match self {
            Parallel::Single => Ok(()),
            Parallel::Ddp(ddp) => {
                phases::enter(StepPhase::AllReduce);
                ddp.before_forward()
            }
            Parallel::DataParallel(replicas) => replicas.broadcast_from(master),
        }
    }

    /// `pass` over one micro-batch of `master`'s step: on its device, DDP all-reducing the
    /// gradients during backward only for the step's `last` micro-batch, or split over the
    /// replicas. Returns the mean loss and the number of correct predictions on the inputs' device.
    pub fn forward_backward(
        &mut self,
        master: &W,
        pass: &MicroBatchPass,
        inputs: &Tensor,
        targets: &Tensor,
        loss_scale: &LossScale,
        last: bool,
    ) -> Result<(Tensor, Tensor), Error> {
        match self {
            Parallel::Single => pass.run(master, inputs, targets, loss_scale),
            Parallel::Ddp(ddp) => {
                ddp.set_sync(last);
                pass.run(master, inputs, targets, loss_scale)
            }
            Parallel::DataParallel(replicas) => {
                replicas.forward_backward(master, pass, inputs, targets, loss_scale)
            }
        }
    }

    /// After a step's last backward pass: waits for DDP's all-reduce and writes the averaged
    /// gradients back, or adds the replicas' gradients onto `master`'s.
    pub fn after_backward(&mut self, master: &W) -> Result<(), Error> {
        match self {
            Parallel::Single => Ok(()),
            Parallel::Ddp(ddp) => {
                phases::enter(StepPhase::AllReduce);
                ddp.finish()
            }
            Parallel::DataParallel(replicas) => replicas.reduce_grads_into(master),
        }
    }

    /// The number of DDP ranks (1 without DDP).
    pub fn ddp_world_size(&self) -> usize {
        match self {
            Parallel::Ddp(ddp) => ddp.world_size(),
            Parallel::Single | Parallel::DataParallel(_) => 1,
        }
    }

    /// Whether `flag` holds on any DDP rank (`flag` itself without DDP).
    pub fn any_rank(&self, flag: bool) -> Result<bool, Error> {
        match self {
            Parallel::Ddp(ddp) => ddp.any(flag),
            Parallel::Single | Parallel::DataParallel(_) => Ok(flag),
        }
    }

    /// The number of devices DataParallel drives (1 without it).
    pub fn data_parallel_width(&self) -> usize {
        match self {
            Parallel::DataParallel(replicas) => replicas.width(),
            Parallel::Single | Parallel::Ddp(_) => 1,
        }
    }

    /// The number of gradient buckets DDP all-reduces (0 without DDP).
    pub fn ddp_buckets(&self) -> usize {
        match self {
            Parallel::Ddp(ddp) => ddp.buckets(),
            Parallel::Single | Parallel::DataParallel(_) => 0,
        }
    }
}
