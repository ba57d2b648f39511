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
//! statistics, and so the outputs and gradients, are the same both times.
//!
//! When the workload's segments draw random numbers (dropout; [`Workload::draws_random_numbers`]),
//! the state of the default random generator of the inputs' device is saved before each segment's
//! first run and restored before the segment is recomputed, so the recomputation draws the same
//! numbers (the same dropout masks); after all recomputation the generator is put back in the state
//! it had after the forward pass, so the step's later draws are those of a run without
//! checkpointing. This is `torch.utils.checkpoint(preserve_rng_state=True)`, except that PyTorch
//! also saves the CPU generator when the inputs are on a GPU: here a segment must draw on its
//! input's device.

use tch::{Kind, Tensor};

use crate::error::Error;
use crate::ffi::{self, RngState};
use crate::measure::phases;
use crate::results::phases::StepPhase;
use crate::train::LossScale;
use crate::workloads::Workload;

/// Forward pass, loss and backward of `workload` (training mode) on a batch with activation
/// checkpointing, the training loss smoothed by `label_smoothing` (0: plain cross-entropy; see
/// [`Workload::training_loss`]): the mean loss (fp32, detached) and the number of correct
/// predictions, both on
/// the device, with the parameters' gradients accumulated into their `.grad` as `loss.backward()`
/// (`(loss · loss_scale).backward()` when a scale is given) accumulates them.
///
/// Every segment but the last first runs without a graph, keeping only its output (the next
/// segment's input); the last segment runs with a graph and is backpropagated from the loss; then
/// each earlier segment is recomputed on its saved input, with a graph, and backpropagated from
/// the gradient that reached its output, the random generator replaying the segment's draws when
/// the workload draws random numbers. Call it inside an autocast region for mixed precision:
/// the saved inputs keep the dtype autocast gave them, and recomputation runs under the same
/// region.
pub fn checkpointed_forward_backward<W: Workload>(
    workload: &W,
    inputs: &Tensor,
    targets: &Tensor,
    label_smoothing: f64,
    loss_scale: &LossScale,
) -> Result<(Tensor, Tensor), Error> {
    let last = workload
        .segments()
        .checked_sub(1)
        .ok_or_else(|| Error::Invalid("checkpointing: the workload has no segments".to_owned()))?;
    let replays_random_numbers = workload.draws_random_numbers(true);
    let save_generator = || replays_random_numbers.then(|| RngState::save(inputs.device())).transpose();
    // saved[k - 1] is segment k's input, for k in 1..=last; starts[k] is the generator state
    // segment k first ran from (empty when the segments draw no random numbers).
    let mut saved: Vec<Tensor> = Vec::with_capacity(last);
    let mut starts: Vec<RngState> = Vec::with_capacity(last);
    tch::no_grad(|| -> Result<(), Error> {
        for k in 0..last {
            starts.extend(save_generator()?);
            let xs = workload.forward_segment(k, saved.last().unwrap_or(inputs), true);
            saved.push(xs);
        }
        Ok(())
    })?;
    let (loss, correct, mut upstream, after_forward) = {
        let xs = segment_input(inputs, &saved, last);
        let outputs = workload.forward_segment(last, &xs, true);
        let after_forward = save_generator()?;
        let loss = workload.training_loss(&outputs.f_to_kind(Kind::Float)?, targets, label_smoothing);
        let correct = workload.correct(&outputs, targets);
        phases::enter(StepPhase::Backward);
        if loss_scale.is_identity() {
            loss.f_backward()?;
        } else {
            loss_scale.apply(&loss).f_backward()?;
        }
        (loss.detach(), correct, xs.grad(), after_forward)
    };
    for k in (0..last).rev() {
        if !upstream.defined() {
            return Err(Error::Torch(format!(
                "checkpointing: no gradient reached segment {}'s input",
                k + 1
            )));
        }
        saved.pop();
        if let Some(start) = starts.pop() {
            start.restore()?;
        }
        let xs = segment_input(inputs, &saved, k);
        let ys = workload.forward_segment(k, &xs, true);
        ffi::backward_from(ys, upstream)?;
        upstream = xs.grad();
    }
    if let Some(state) = after_forward {
        state.restore()?;
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

#[cfg(test)]
mod tests {
    use tch::nn::{self, Module};
    use tch::Device;

    use crate::test_support::seeded;

    use super::*;

    /// Width of the test model's layers (and its number of classes).
    const WIDTH: i64 = 8;

    /// Three linear layers, one segment each, with dropout after the first two.
    struct Dropout {
        vs: nn::VarStore,
        layers: Vec<nn::Linear>,
        /// What [`Workload::draws_random_numbers`] answers in training mode.
        declares_dropout: bool,
    }

    impl Dropout {
        fn new(declares_dropout: bool) -> Self {
            let vs = nn::VarStore::new(Device::Cpu);
            let layers = (0..3)
                .map(|k| nn::linear(vs.root() / k, WIDTH, WIDTH, nn::LinearConfig::default()))
                .collect();
            Self { vs, layers, declares_dropout }
        }

        /// The parameters' gradients, layer by layer.
        fn gradients(&self) -> Vec<Tensor> {
            self.layers.iter().flat_map(|l| [l.ws.grad(), l.bs.as_ref().unwrap().grad()]).collect()
        }
    }

    impl Workload for Dropout {
        fn var_store(&self) -> &nn::VarStore {
            &self.vs
        }

        fn var_store_mut(&mut self) -> &mut nn::VarStore {
            &mut self.vs
        }

        fn forward(&self, inputs: &Tensor, train: bool) -> Tensor {
            (0..3).fold(inputs.shallow_clone(), |xs, k| self.forward_segment(k, &xs, train))
        }

        fn segments(&self) -> usize {
            3
        }

        fn forward_segment(&self, k: usize, xs: &Tensor, train: bool) -> Tensor {
            let ys = self.layers[k].forward(xs);
            if k < 2 {
                ys.relu().dropout(0.5, train)
            } else {
                ys
            }
        }

        fn draws_random_numbers(&self, train: bool) -> bool {
            train && self.declares_dropout
        }

        fn loss(&self, outputs: &Tensor, targets: &Tensor) -> Tensor {
            outputs.cross_entropy_for_logits(targets)
        }

        fn correct(&self, outputs: &Tensor, targets: &Tensor) -> Tensor {
            outputs.argmax(-1, false).eq_tensor(targets).sum(Kind::Int64)
        }

        fn forward_flops_per_sample(&self) -> f64 {
            (3 * 2 * WIDTH * WIDTH) as f64
        }

        /// The middle layer's weight.
        fn hidden_weights(&self) -> Vec<Tensor> {
            vec![self.layers[1].ws.shallow_clone()]
        }
    }

    /// From the same seed: the loss, the gradients of one training step with dropout on (with
    /// checkpointing or without), and the generator's next draw after the step.
    fn step(checkpointed: bool, declares_dropout: bool) -> (f32, Vec<Tensor>, Tensor) {
        seeded(11, || {
            let workload = Dropout::new(declares_dropout);
            let inputs = Tensor::randn([4, WIDTH], (Kind::Float, Device::Cpu));
            let targets = Tensor::from_slice(&[0i64, 3, 5, 7]);
            let loss = if checkpointed {
                checkpointed_forward_backward(&workload, &inputs, &targets, 0.0, &LossScale::NONE).unwrap().0
            } else {
                let loss = workload.loss(&workload.forward(&inputs, true), &targets);
                loss.backward();
                loss.detach()
            };
            let next_draw = Tensor::rand([4], (Kind::Float, Device::Cpu));
            (f32::try_from(&loss).unwrap(), workload.gradients(), next_draw)
        })
    }

    #[test]
    fn checkpointing_replays_dropout_and_leaves_the_generator_as_a_plain_step_does() {
        let (plain_loss, plain, plain_next) = step(false, true);
        let (loss, checkpointed, next) = step(true, true);
        assert_eq!(loss, plain_loss);
        for (k, (c, p)) in checkpointed.iter().zip(&plain).enumerate() {
            assert!(c.allclose(p, 1e-6, 1e-7, false), "gradient {k}: {c:?} vs {p:?}");
        }
        assert!(next.equal(&plain_next), "the step's later draws must be as without checkpointing");
        // Without the replay the recomputation draws other dropout masks: other gradients.
        let (_, unreplayed, _) = step(true, false);
        assert!(unreplayed.iter().zip(&plain).any(|(u, p)| !u.allclose(p, 1e-6, 1e-7, false)));
    }
}
