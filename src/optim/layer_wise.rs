//! The optimizer LARS and LAMB both are: one update loop over the parameters that adapts each
//! step layer-wise (weight decay and a per-layer trust ratio), around a [`Rule`] that gives the
//! optimizer's own direction and state; and the training run of their golden-value tests.

use tch::{Device, Tensor};

use super::update::{keep_mask, unless_skipped, zero_grads, Hyper, LayerWise};
use super::Optimizer;
use crate::error::Error;

/// What sets one layer-wise optimizer apart: the direction it adapts, what a parameter moves by,
/// and the state behind them.
pub trait Rule: std::fmt::Debug {
    /// Sets the momentum of the next update (LARS's momentum, LAMB's β₁).
    fn set_momentum(&mut self, momentum: f64);

    /// The optimizer's own direction for parameter `index` (`p`, with gradient `grad`), before the
    /// layer-wise adaptation. State it updates is left as it was where the mask `keep` (a 0-d bool
    /// tensor) holds false.
    fn direction(&mut self, index: usize, p: &Tensor, grad: Tensor, keep: Option<&Tensor>) -> Tensor;

    /// What parameter `index` (`p`) moves by, given its adapted step (already times the learning
    /// rate); `keep` as for [`Self::direction`].
    fn delta(&mut self, index: usize, p: &Tensor, step: Tensor, keep: Option<&Tensor>) -> Tensor;

    /// Moves the rule's hyper-parameters into device tensors on `device` and allocates its state
    /// for `params` up front, so that every update launches the same kernels.
    fn make_capturable(&mut self, params: &[Tensor], device: Device);
}

/// A layer-wise optimizer over a fixed list of parameters, one parameter at a time: for each
/// parameter with a gradient, the rule's direction, adapted by the weight decay and trust ratio of
/// `layer_wise`, times the learning rate, is the step; the parameter moves by the rule's delta.
#[derive(Debug)]
pub struct LayerWiseOptimizer<R> {
    /// The weight decay and trust ratio each step is adapted by.
    layer_wise: LayerWise,
    /// The parameters being optimised.
    params: Vec<Tensor>,
    /// The learning rate of the next update: a host number, or a device tensor once capturable.
    lr: Hyper,
    /// The optimizer's own direction and state.
    rule: R,
}

impl<R: Rule> LayerWiseOptimizer<R> {
    /// An optimizer over `params` (shallow clones of the model's trainable variables) with a host
    /// learning rate, set before each update.
    pub(super) fn from_parts(params: Vec<Tensor>, layer_wise: LayerWise, rule: R) -> Self {
        Self { layer_wise, params, lr: Hyper::Host(0.0), rule }
    }
}

impl<R: Rule> Optimizer for LayerWiseOptimizer<R> {
    fn set_lr(&mut self, lr: f64) {
        self.lr.set(lr);
    }

    fn set_momentum(&mut self, momentum: f64) {
        self.rule.set_momentum(momentum);
    }

    fn update(&mut self, found_inf: Option<&Tensor>) -> Result<(), Error> {
        let keep = keep_mask(found_inf);
        tch::no_grad(|| {
            for (index, p) in self.params.iter_mut().enumerate() {
                let grad = p.grad();
                if !grad.defined() {
                    continue;
                }
                let direction = self.rule.direction(index, p, grad, keep.as_ref());
                let step = self.lr.times(&self.layer_wise.direction(p, direction));
                let delta = self.rule.delta(index, p, step, keep.as_ref());
                unless_skipped(p, keep.as_ref(), |p| {
                    let _ = p.g_sub_(&delta);
                });
            }
        });
        Ok(())
    }

    fn zero_grad(&mut self, set_to_none: bool) {
        zero_grads(&mut self.params, set_to_none);
    }

    fn params(&self) -> &[Tensor] {
        &self.params
    }

    /// Puts the learning rate in a device tensor, then the rule's hyper-parameters and state
    /// ([`Rule::make_capturable`]).
    fn make_capturable(&mut self) {
        let device = self.params.first().map_or(Device::Cpu, Tensor::device);
        self.lr.move_to(device);
        self.rule.make_capturable(&self.params, device);
    }
}

/// A `[1, 2]` weight starting at `w` and a 1-d bias starting at `b` after updates by the optimizer
/// `build` makes over them (made capturable with `capturable`), at the given (learning rate, skip
/// flag) steps, loss `Σw³/3 + Σb³/3` (gradients `w²`, `b²`); a flag of `None` passes no
/// `found_inf`, a flag of 1 comes with an overflowed (infinite) gradient. Returns the weight's
/// values, then the bias's.
#[cfg(test)]
pub(super) fn train_weight_and_bias<O: Optimizer>(
    build: impl FnOnce(Vec<Tensor>) -> O,
    capturable: bool,
    w: [f32; 2],
    b: [f32; 2],
    steps: &[(f64, Option<f32>)],
) -> Vec<f32> {
    let w = Tensor::from_slice(&w).view([1, 2]).set_requires_grad(true);
    let b = Tensor::from_slice(&b).set_requires_grad(true);
    let mut opt = build(vec![w.shallow_clone(), b.shallow_clone()]);
    if capturable {
        opt.make_capturable();
    }
    for &(lr, flag) in steps {
        opt.zero_grad(true);
        ((&w * &w * &w).sum(tch::Kind::Float) / 3.0 + (&b * &b * &b).sum(tch::Kind::Float) / 3.0).backward();
        if flag == Some(1.0) {
            let _ = w.grad().fill_(f64::INFINITY);
        }
        let found_inf = flag.map(|f| Tensor::from_slice(&[f]));
        opt.set_lr(lr);
        opt.update(found_inf.as_ref()).unwrap();
    }
    let mut values = Vec::<f32>::try_from(&w.detach().flatten(0, -1)).unwrap();
    values.extend(Vec::<f32>::try_from(&b.detach()).unwrap());
    values
}
