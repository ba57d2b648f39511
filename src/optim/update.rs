//! Building blocks that the SGD, Adam, LARS and LAMB updates share: hyper-parameters that live on the
//! host or in device tensors, the device-side overflow skip, the layer-wise trust ratio of LARS and
//! LAMB, and clearing gradients.

use tch::{Device, Kind, Tensor};

use crate::ffi;

/// A number an update reads: a host value baked into the update's kernels, or a 0-d float tensor
/// on the parameters' device that the kernels read (so that a captured CUDA graph sees the value
/// of each replay).
#[derive(Debug)]
pub(super) enum Hyper {
    /// A host number.
    Host(f64),
    /// A 0-d float tensor on the parameters' device.
    Device(Tensor),
}

impl Hyper {
    /// Sets the value (a tiny fill kernel on the device: call it outside a graph capture).
    pub(super) fn set(&mut self, value: f64) {
        match self {
            Hyper::Host(host) => *host = value,
            Hyper::Device(tensor) => {
                let _ = tensor.fill_(value);
            }
        }
    }

    /// Moves a host value into a 0-d float tensor on `device`; a device value stays where it is.
    pub(super) fn move_to(&mut self, device: Device) {
        if let Hyper::Host(value) = *self {
            *self = Hyper::Device(Tensor::full([], value, (Kind::Float, device)));
        }
    }

    /// `t · self`, a new tensor.
    pub(super) fn times(&self, t: &Tensor) -> Tensor {
        match self {
            Hyper::Host(value) => t * *value,
            Hyper::Device(value) => t * value,
        }
    }

    /// `t / self`, a new tensor.
    pub(super) fn divides(&self, t: &Tensor) -> Tensor {
        match self {
            Hyper::Host(value) => t / *value,
            Hyper::Device(value) => t / value,
        }
    }

    /// `t ← t · self`, in place.
    pub(super) fn scale(&self, t: &mut Tensor) {
        let _ = match self {
            Hyper::Host(value) => t.g_mul_scalar_(*value),
            Hyper::Device(value) => t.g_mul_(value),
        };
    }

    /// `t ← t + self · (end − t)`, in place (`torch.lerp_`).
    pub(super) fn lerp(&self, t: &mut Tensor, end: &Tensor) {
        let _ = match self {
            Hyper::Host(weight) => t.lerp_(end, *weight),
            Hyper::Device(weight) => t.lerp_tensor_(end, &weight.to_kind(t.kind())),
        };
    }

    /// `1 − self`.
    pub(super) fn one_minus(&self) -> Hyper {
        match self {
            Hyper::Host(value) => Hyper::Host(1.0 - value),
            Hyper::Device(value) => Hyper::Device(1.0 - value),
        }
    }

    /// `1 − factor · self`.
    pub(super) fn one_minus_times(&self, factor: f64) -> Hyper {
        match self {
            Hyper::Host(value) => Hyper::Host(1.0 - factor * value),
            Hyper::Device(value) => Hyper::Device(1.0 - value * factor),
        }
    }

    /// `√self`.
    pub(super) fn sqrt(&self) -> Hyper {
        match self {
            Hyper::Host(value) => Hyper::Host(value.sqrt()),
            Hyper::Device(value) => Hyper::Device(value.sqrt()),
        }
    }

    /// `1 − selfᵗ`: the bias correction of a moment estimate with decay rate `self` after `t`
    /// updates. On the device when either number is, computed there as `−expm1(t·ln self)`: a
    /// float32 `1 − βᵗ` would lose about 1e-5 of relative precision for β = 0.999 (PyTorch's
    /// `capturable` path does), this keeps float32's 1e-7.
    pub(super) fn bias_correction(&self, t: &Hyper) -> Hyper {
        match (self, t) {
            (Hyper::Host(beta), Hyper::Host(t)) => Hyper::Host(1.0 - beta.powf(*t)),
            (Hyper::Host(beta), Hyper::Device(t)) => Hyper::Device((t * beta.ln()).expm1().neg()),
            (Hyper::Device(beta), Hyper::Host(t)) => Hyper::Device((beta.log() * *t).expm1().neg()),
            (Hyper::Device(beta), Hyper::Device(t)) => Hyper::Device((beta.log() * t).expm1().neg()),
        }
    }

    /// Adds 1 to a step count, unless `keep` (see [`keep_mask`]) says the update is skipped. A
    /// host count cannot follow a device-side decision, so it moves to the device (0-d float,
    /// exact up to 2²⁴ steps) the first time a mask comes.
    pub(super) fn count_step(&mut self, keep: Option<&Tensor>) {
        if let (Hyper::Host(_), Some(ok)) = (&*self, keep) {
            self.move_to(ok.device());
        }
        match self {
            Hyper::Host(count) => *count += 1.0,
            Hyper::Device(count) => unless_skipped(count, keep, |c| {
                let _ = c.g_add_scalar_(1.0);
            }),
        }
    }
}

/// The mask of the overflow skip: a 0-d bool tensor, true when `found_inf` (a 1-element float
/// tensor) holds 0 and the update goes ahead.
pub(super) fn keep_mask(found_inf: Option<&Tensor>) -> Option<Tensor> {
    found_inf.map(|f| f.eq(0.0).reshape([]))
}

/// Applies the in-place update `apply` to `target`. With `keep`, the update is computed on a copy
/// and written back only where the mask holds (`torch.where`, never a multiplication by the mask:
/// an overflowed update holds inf, and inf·0 is NaN), so every call launches the same kernels.
pub(super) fn unless_skipped(target: &mut Tensor, keep: Option<&Tensor>, apply: impl FnOnce(&mut Tensor)) {
    match keep {
        None => apply(target),
        Some(ok) => {
            let mut next = target.copy();
            apply(&mut next);
            target.copy_(&next.where_self(ok, target));
        }
    }
}

/// The trust ratio of LARS or LAMB: how a layer's (a parameter tensor's) weight norm `‖w‖` is set
/// against its step, with weight decay `β`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(super) enum TrustRatio {
    /// LARS: `η·‖w‖ / (‖g‖ + β·‖w‖)`, with the gradient `g` before weight decay and the trust
    /// coefficient `η`.
    Lars {
        /// The trust coefficient `η`.
        trust_coefficient: f64,
    },
    /// LAMB: `‖w‖ / ‖r‖`, with Adam's direction after weight decay, `r = d + β·w`.
    Lamb,
}

/// The layer-wise adaptation LARS and LAMB share: weight decay added to the optimizer's direction,
/// scaled by a per-layer trust ratio.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(super) struct LayerWise {
    /// Weight decay `β`, added to the direction (and, for LARS, to the ratio's denominator).
    pub weight_decay: f64,
    /// Leave parameters of dimension ≤ 1 (biases, normalisation scales and shifts) out of weight
    /// decay and adaptation.
    pub exclude_1d: bool,
    /// Which trust ratio.
    pub trust_ratio: TrustRatio,
}

impl LayerWise {
    /// The step direction of parameter `p` from the optimizer's plain `direction` (LARS: the
    /// gradient; LAMB: Adam's): `(direction + β·p) · ratio`, the ratio being 1 where the weight norm
    /// or the norm it is set against is 0 (so zero-initialised weights and zero updates follow the
    /// plain rule); `direction` unchanged for an excluded parameter. Computed on the device.
    pub(super) fn direction(&self, p: &Tensor, direction: Tensor) -> Tensor {
        if self.exclude_1d && p.dim() <= 1 {
            return direction;
        }
        let weight_decay = self.weight_decay;
        let decayed =
            if weight_decay == 0.0 { direction.shallow_clone() } else { &direction + p * weight_decay };
        let weight_norm = p.norm();
        let (ratio, other_norm) = match self.trust_ratio {
            TrustRatio::Lars { trust_coefficient } => {
                let grad_norm = direction.norm();
                (&weight_norm * trust_coefficient / (&grad_norm + &weight_norm * weight_decay), grad_norm)
            }
            TrustRatio::Lamb => {
                let update_norm = decayed.norm();
                (&weight_norm / &update_norm, update_norm)
            }
        };
        let both_positive = weight_norm.gt(0.0).logical_and(&other_norm.gt(0.0));
        decayed * ratio.where_scalarother(&both_positive, 1.0)
    }
}

/// Clears the gradients of `params`: sets them to None, or zero-fills them in place.
pub(super) fn zero_grads(params: &mut [Tensor], set_to_none: bool) {
    for p in params {
        if set_to_none {
            ffi::set_grad_none(p);
        } else {
            let mut grad = p.grad();
            if grad.defined() {
                let _ = grad.detach_().zero_();
            }
        }
    }
}

/// Asserts `got` equals `expected` within 1e-6, relative to magnitudes above 1 (the optimizers'
/// golden-value tests).
#[cfg(test)]
pub(super) fn assert_close(got: &[f32], expected: &[f32], what: &str) {
    assert_eq!(got.len(), expected.len(), "{what}: {got:?} vs {expected:?}");
    for (g, e) in got.iter().zip(expected) {
        assert!((g - e).abs() < 1e-6 * e.abs().max(1.0), "{what}: {got:?} vs {expected:?}");
    }
}
