//! Activation checkpointing (the `checkpointing` trick): the forward pass keeps only the input of
//! each of the workload's segments, and backward recomputes one segment at a time to get the
//! activations it needs, trading one extra forward pass of all but the last segment for the
//! memory of the activations.
//!
//! tch cannot define custom autograd functions, so the recomputation is driven from here as
//! `torch.utils.checkpoint` drives it: segment `k`'s output gradient, found as the gradient of
//! segment `k + 1`'s input, is pushed back through the recomputed segment `k`, which accumulates its
//! parameters' gradients into `.grad` as a plain backward does and yields the gradient of its own
//! input in turn.
//!
//! Each segment but the last runs twice in training mode, so BatchNorm running statistics are
//! updated twice per step in those segments (as with `torch.utils.checkpoint`); the batch
//! statistics, and so the outputs and gradients, are the same both times. Random ops inside a
//! segment would be drawn anew on recomputation: segments must be deterministic (see
//! [`Workload::forward_segment`]).

use tch::{Kind, Tensor};

use crate::error::Error;
use crate::workloads::Workload;

/// Forward pass, loss and backward of `workload` (training mode) on a batch with activation
/// checkpointing: the mean loss (fp32, detached) and the number of correct predictions, both on
/// the device, with the parameters' gradients accumulated into their `.grad` as `loss.backward()`
/// (or `(loss · loss_scale).backward()` when a scale is given) accumulates them.
///
/// Every segment but the last first runs without a graph, keeping only its output (the next
/// segment's input); the last segment runs with a graph and is backpropagated from the loss; then
/// each earlier segment is recomputed on its saved input, with a graph, and backpropagated from
/// the gradient that reached its output. Call it inside an autocast region for mixed precision:
/// the saved inputs keep the dtype autocast gave them, and recomputation runs under the same
/// region.
pub fn checkpointed_forward_backward<W: Workload>(
    workload: &W,
    inputs: &Tensor,
    targets: &Tensor,
    loss_scale: Option<&Tensor>,
) -> Result<(Tensor, Tensor), Error> {
    let last = workload
        .segments()
        .checked_sub(1)
        .ok_or_else(|| Error::Invalid("checkpointing: the workload has no segments".to_owned()))?;
    // saved[k - 1] is segment k's input, for k in 1..=last.
    let mut saved: Vec<Tensor> = Vec::with_capacity(last);
    tch::no_grad(|| {
        for k in 0..last {
            let xs = workload.forward_segment(k, saved.last().unwrap_or(inputs), true);
            saved.push(xs);
        }
    });
    let (loss, correct, mut upstream) = {
        let xs = segment_input(inputs, &saved, last);
        let outputs = workload.forward_segment(last, &xs, true);
        let loss = workload.loss(&outputs.f_to_kind(Kind::Float)?, targets);
        let correct = workload.correct(&outputs, targets);
        match loss_scale {
            Some(scale) => loss.f_mul(scale)?.f_backward()?,
            None => loss.f_backward()?,
        }
        (loss.detach(), correct, xs.grad())
    };
    for k in (0..last).rev() {
        if !upstream.defined() {
            return Err(Error::Torch(format!(
                "checkpointing: no gradient reached segment {}'s input",
                k + 1
            )));
        }
        saved.pop();
        let xs = segment_input(inputs, &saved, k);
        let ys = workload.forward_segment(k, &xs, true);
        // The gradient of Σ ys·g with respect to ys is g itself (1·g, exact in floating point):
        // backpropagating this scalar pushes g back through the segment, as `ys.backward(g)`.
        ys.f_mul(&upstream)?.f_sum(Kind::Float)?.f_backward()?;
        upstream = xs.grad();
    }
    Ok((loss, correct))
}

/// The input segment `k` runs on with a graph: the model's inputs for segment 0, else a fresh
/// leaf over the saved activation that collects the gradient flowing into it.
fn segment_input(inputs: &Tensor, saved: &[Tensor], k: usize) -> Tensor {
    match k {
        0 => inputs.shallow_clone(),
        _ => saved[k - 1].detach().set_requires_grad(true),
    }
}
