//! LAMB, layer-wise adaptive moments for batch training (You et al. 2020, "Large Batch
//! Optimization for Deep Learning: Training BERT in 76 minutes", Algorithm 2): Adam's direction,
//! weight decay added to it, and a per-layer (per parameter tensor) trust ratio. At step `t`, with
//! learning rate `ηₜ` and weight decay `λ`:
//!
//! ```text
//! mₜ = β₁·mₜ₋₁ + (1 − β₁)·gₜ          m̂ₜ = mₜ / (1 − β₁ᵗ)
//! vₜ = β₂·vₜ₋₁ + (1 − β₂)·gₜ²         v̂ₜ = vₜ / (1 − β₂ᵗ)
//! rₜ = m̂ₜ / (√v̂ₜ + ε) + λ·xₜ
//! xₜ₊₁ = xₜ − ηₜ·φ(‖xₜ‖) / ‖rₜ‖ · rₜ   (φ = identity; the ratio is 1 when ‖xₜ‖ or ‖rₜ‖ is 0)
//! ```
//!
//! As in [`super::lars`], parameters of dimension ≤ 1 (biases, BatchNorm) can be left out of the
//! weight decay and the trust ratio: they follow plain Adam, `x ← x − ηₜ·m̂ₜ / (√v̂ₜ + ε)`. The
//! norms are computed on the device: an update reads nothing back to the host.

use tch::{Device, Tensor};

use super::adam::Moments;
use super::layer_wise::{LayerWiseOptimizer, Rule};
use super::update::{LayerWise, TrustRatio};

/// LAMB hyper-parameters (the learning rate comes with each step, from the schedule).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct LambConfig {
    /// Decay rate of the first-moment estimate; the momentum that 1cycle cycles.
    pub beta1: f64,
    /// Decay rate of the second-moment estimate.
    pub beta2: f64,
    /// Added to the root of the second moment, to keep the division finite.
    pub eps: f64,
    /// Weight decay `λ`, added to the Adam direction.
    pub weight_decay: f64,
    /// Leave parameters of dimension ≤ 1 out of weight decay and adaptation.
    pub exclude_1d: bool,
}

impl Default for LambConfig {
    /// β = (0.9, 0.999), ε = 1e-6 and weight decay 0.01, the paper's BERT settings; 1-d
    /// parameters excluded.
    fn default() -> Self {
        Self { beta1: 0.9, beta2: 0.999, eps: 1e-6, weight_decay: 0.01, exclude_1d: true }
    }
}

/// LAMB over a fixed list of parameters, one parameter at a time.
pub type Lamb = LayerWiseOptimizer<LambRule>;

/// LAMB's part of the layer-wise loop: Adam's direction, from its moment estimates.
#[derive(Debug)]
pub struct LambRule {
    /// Adam's moment estimates and step counts, one of each per parameter.
    moments: Moments,
}

impl Lamb {
    /// An optimizer over `params` (shallow clones of the model's trainable variables).
    pub fn new(params: Vec<Tensor>, config: LambConfig) -> Self {
        let moments = Moments::new(params.len(), config.beta1, config.beta2, config.eps);
        let layer_wise = LayerWise {
            weight_decay: config.weight_decay,
            exclude_1d: config.exclude_1d,
            trust_ratio: TrustRatio::Lamb,
        };
        LayerWiseOptimizer::from_parts(params, layer_wise, LambRule { moments })
    }
}

impl Rule for LambRule {
    /// Sets β₁ (the bias correction uses the current β₁, as Adam's). Once capturable, β₁ lives on
    /// the device, so a captured CUDA graph follows 1cycle's changes.
    fn set_momentum(&mut self, momentum: f64) {
        self.moments.set_beta1(momentum);
    }

    /// Adam's direction, updating the moments. A skip flag needs the step counts on the device: on
    /// a host-side optimizer, the first flagged update moves them there.
    fn direction(&mut self, index: usize, p: &Tensor, grad: Tensor, keep: Option<&Tensor>) -> Tensor {
        self.moments.direction(index, p, &grad, keep)
    }

    /// The step itself.
    fn delta(&mut self, _: usize, _: &Tensor, step: Tensor, _: Option<&Tensor>) -> Tensor {
        step
    }

    /// Puts β₁ and the step counts in device tensors and allocates the moment estimates up front
    /// as zeros.
    fn make_capturable(&mut self, params: &[Tensor], device: Device) {
        self.moments.make_capturable(params, device);
    }
}

#[cfg(test)]
mod tests {
    use tch::Kind;

    use crate::optim::layer_wise::train_weight_and_bias;
    use crate::optim::update::assert_close;
    use crate::optim::Optimizer;

    use super::*;

    /// [`train_weight_and_bias`] by LAMB from `w = [3, 4]`, `b = [0.5, −0.25]`.
    fn run(config: LambConfig, capturable: bool, steps: &[(f64, Option<f32>)]) -> Vec<f32> {
        train_weight_and_bias(|params| Lamb::new(params, config), capturable, [3.0, 4.0], [0.5, -0.25], steps)
    }

    /// Two steps (learning rates 0.1 and 0.2) at the default hyper-parameters, against
    /// Algorithm 2 in plain Python arithmetic:
    /// ```python
    /// import math
    /// def norm(x): return math.sqrt(sum(v * v for v in x))
    /// def lamb(w, b, lrs, beta1=0.9, beta2=0.999, eps=1e-6, wd=0.01, exclude_1d=True):
    ///     state = {k: ([0.0] * len(x), [0.0] * len(x)) for k, x in (('w', w), ('b', b))}
    ///     params = {'w': w, 'b': b}
    ///     for t, lr in enumerate(lrs, start=1):
    ///         for k, x in params.items():
    ///             g = [xi * xi for xi in x]                    # loss = sum(w**3)/3 + sum(b**3)/3
    ///             m, v = state[k]
    ///             m = [beta1 * mi + (1 - beta1) * gi for mi, gi in zip(m, g)]
    ///             v = [beta2 * vi + (1 - beta2) * gi * gi for vi, gi in zip(v, g)]
    ///             state[k] = (m, v)
    ///             mh = [mi / (1 - beta1 ** t) for mi in m]
    ///             vh = [vi / (1 - beta2 ** t) for vi in v]
    ///             r = [a / (math.sqrt(c) + eps) for a, c in zip(mh, vh)]
    ///             if exclude_1d and k == 'b':
    ///                 ratio = 1.0
    ///             else:
    ///                 r = [ri + wd * xi for ri, xi in zip(r, x)]
    ///                 xn, rn = norm(x), norm(r)
    ///                 ratio = xn / rn if xn > 0 and rn > 0 else 1.0
    ///             params[k] = [xi - lr * ratio * ri for xi, ri in zip(x, r)]
    ///     return params['w'] + params['b']
    /// print(lamb([3.0, 4.0], [0.5, -0.25], [0.1, 0.2]))
    /// # [2.0157012058313857, 3.002969218112433, 0.2068890901928559, -0.5434601853646516]
    /// print(lamb([3.0, 4.0], [0.5, -0.25], [0.1, 0.2], exclude_1d=False))
    /// # [2.0157012058313857, 3.002969218112433, 0.3833238320116862, -0.36616914377760384]
    /// ```
    #[test]
    fn matches_algorithm_2_and_excludes_1d_parameters_only_when_asked() {
        let excluded = [2.015_701_2_f32, 3.002_969_3, 0.206_889_1, -0.543_460_2];
        let adapted = [2.015_701_2_f32, 3.002_969_3, 0.383_323_83, -0.366_169_14];
        for (exclude_1d, expected) in [(true, excluded), (false, adapted)] {
            for capturable in [false, true] {
                for flag in [None, Some(0.0)] {
                    let config = LambConfig { exclude_1d, ..LambConfig::default() };
                    let got = run(config, capturable, &[(0.1, flag), (0.2, flag)]);
                    let what = format!("exclude_1d={exclude_1d} capturable={capturable} flag={flag:?}");
                    assert_close(&got, &expected, &what);
                }
            }
        }
    }

    /// A zero weight gets a trust ratio of 1: its first step is Adam's, `−lr·sign(g)` (up to ε),
    /// here `w = −0.1·[1, 1]` for a gradient `[1, 2]`.
    #[test]
    fn trust_ratio_is_one_for_a_zero_weight() {
        for capturable in [false, true] {
            let w = Tensor::zeros([1, 2], (Kind::Float, Device::Cpu)).set_requires_grad(true);
            let mut opt = Lamb::new(vec![w.shallow_clone()], LambConfig::default());
            if capturable {
                opt.make_capturable();
            }
            (&w * Tensor::from_slice(&[1.0f32, 2.0]).view([1, 2])).sum(Kind::Float).backward();
            opt.step(0.1).unwrap();
            let got = Vec::<f32>::try_from(&w.detach().flatten(0, -1)).unwrap();
            assert_close(&got, &[-0.1, -0.1], &format!("capturable={capturable}"));
        }
    }

    /// A flagged step (with an infinite gradient) leaves weights, moments and step counts as they
    /// were.
    #[test]
    fn a_flagged_step_changes_nothing() {
        let config = LambConfig::default();
        let expected = run(config, false, &[(0.1, None), (0.2, None)]);
        for capturable in [false, true] {
            let steps = [(0.1, Some(0.0)), (0.15, Some(1.0)), (0.2, Some(0.0))];
            assert_close(&run(config, capturable, &steps), &expected, &format!("capturable={capturable}"));
        }
    }
}
