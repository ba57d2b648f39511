//! DDP for a trainer (the `ddp` trick's "on" side): this process is one rank of a data-parallel
//! world. At the start every rank takes rank 0's parameters and buffers; before each forward
//! pass rank 0's buffers (BatchNorm running statistics) are broadcast again, as PyTorch's
//! `DistributedDataParallel(broadcast_buffers=True)` does; during backward the gradients are
//! averaged in buckets by [`GradSync`]; every rank then takes the same optimizer step.

use std::rc::Rc;

use tch::{Device, Kind, Tensor};

use crate::distributed::group::{GradSync, ProcessGroup};
use crate::error::Error;
use crate::workloads::Workload;

/// The DDP state of one rank's model.
#[derive(Debug)]
pub struct Ddp {
    sync: GradSync,
    buffers: Vec<Tensor>,
    device: Device,
}

impl Ddp {
    /// Makes `workload` one rank's replica over `group`: broadcasts rank 0's parameters and
    /// buffers to every rank and hooks the parameters' gradients, in buckets of at most
    /// `bucket_bytes`, into the all-reduce.
    pub fn new<W: Workload>(
        workload: &W,
        group: Rc<ProcessGroup>,
        bucket_bytes: usize,
    ) -> Result<Self, Error> {
        let mut params = workload.var_store().trainable_variables();
        let mut named: Vec<(String, Tensor)> = workload.var_store().variables().into_iter().collect();
        named.sort_by(|a, b| a.0.cmp(&b.0));
        let buffers: Vec<Tensor> =
            named.into_iter().filter(|(_, t)| !t.requires_grad()).map(|(_, t)| t.detach()).collect();
        let mut state: Vec<Tensor> =
            params.iter().map(Tensor::detach).chain(buffers.iter().map(Tensor::shallow_clone)).collect();
        tch::no_grad(|| group.broadcast(&mut state, 0))?;
        let sync = GradSync::new(group, &mut params, bucket_bytes)?;
        Ok(Self { sync, buffers, device: workload.var_store().device() })
    }

    /// Before a forward pass: rank 0's buffers to every rank, flattened into one broadcast per
    /// dtype (as PyTorch coalesces them) rather than one per buffer.
    pub fn before_forward(&mut self) -> Result<(), Error> {
        let group = self.sync.group();
        tch::no_grad(|| {
            let mut kinds: Vec<Kind> = Vec::new();
            for kind in self.buffers.iter().map(Tensor::kind) {
                if !kinds.contains(&kind) {
                    kinds.push(kind);
                }
            }
            for kind in kinds {
                let members: Vec<&Tensor> = self.buffers.iter().filter(|b| b.kind() == kind).collect();
                let flat: Vec<Tensor> = members.iter().map(|b| b.reshape([-1])).collect();
                let mut joined = [Tensor::cat(&flat, 0)];
                group.broadcast(&mut joined, 0)?;
                let mut offset = 0;
                for member in members {
                    let n = member.numel() as i64;
                    member.shallow_clone().f_copy_(&joined[0].narrow(0, offset, n).view_as(member))?;
                    offset += n;
                }
            }
            Ok(())
        })
    }

    /// Whether the next backward passes all-reduce (off for all but the last micro-batch of a
    /// step, so that accumulated gradients are all-reduced once).
    pub fn set_sync(&mut self, enabled: bool) {
        self.sync.set_enabled(enabled);
    }

    /// After the step's last backward pass: waits for the all-reduce and writes the averaged
    /// gradients back.
    pub fn finish(&mut self) -> Result<(), Error> {
        self.sync.finish()
    }

    /// Whether `flag` holds on any rank (every rank must ask, in the same order).
    pub fn any(&self, flag: bool) -> Result<bool, Error> {
        let mut votes = [Tensor::from_slice(&[f32::from(u8::from(flag))]).to_device(self.device)];
        self.sync.group().all_reduce_sum(&mut votes)?;
        Ok(votes[0].double_value(&[0]) > 0.0)
    }

    /// The number of gradient buckets.
    pub fn buckets(&self) -> usize {
        self.sync.buckets()
    }

    /// The number of ranks.
    pub fn world_size(&self) -> usize {
        self.sync.group().world_size()
    }
}
