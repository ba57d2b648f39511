//! LARS, layer-wise adaptive rate scaling (You, Gitman & Ginsburg 2017, "Large Batch Training of
//! Convolutional Networks", Algorithm 1): momentum SGD whose learning rate is scaled, for each
//! layer (each parameter tensor) `l`, by a trust ratio of weight norm to gradient norm. At step
//! `t`, with global learning rate `γₜ`, momentum `m`, weight decay `β` and trust coefficient `η`:
//!
//! ```text
//! gˡ  = ∇L(wₜˡ)
//! λˡ  = η·‖wₜˡ‖ / (‖gˡ‖ + β·‖wₜˡ‖)          (1 when ‖wₜˡ‖ or ‖gˡ‖ is 0)
//! vₜ₊₁ˡ = m·vₜˡ + γₜ·λˡ·(gˡ + β·wₜˡ)
//! wₜ₊₁ˡ = wₜˡ − vₜ₊₁ˡ
//! ```
//!
//! As is common practice (and not in the paper), parameters of dimension ≤ 1 (biases, BatchNorm
//! scales and shifts) can be left out of both the weight decay and the adaptation: they follow
//! plain momentum SGD, `v ← m·v + γₜ·g`, `w ← w − v`. The norms are computed on the device: an
//! update reads nothing back to the host.

use tch::{Device, Tensor};

use super::layer_wise::{LayerWiseOptimizer, Rule};
use super::update::{unless_skipped, Hyper, LayerWise, TrustRatio};

/// LARS hyper-parameters (the learning rate comes with each step, from the schedule).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct LarsConfig {
    /// Momentum factor `m`.
    pub momentum: f64,
    /// Weight decay `β`, added to the gradient and to the trust ratio's denominator.
    pub weight_decay: f64,
    /// Trust coefficient `η`: how far one step may move a layer, relative to its weight norm.
    pub trust_coefficient: f64,
    /// Leave parameters of dimension ≤ 1 out of weight decay and adaptation.
    pub exclude_1d: bool,
}

impl Default for LarsConfig {
    /// Momentum 0.9 and weight decay 5e-4 (the paper's AlexNet-BN setting, and this project's
    /// SGD recipe), trust coefficient 0.001 (the paper's), 1-d parameters excluded.
    fn default() -> Self {
        Self { momentum: 0.9, weight_decay: 5e-4, trust_coefficient: 0.001, exclude_1d: true }
    }
}

/// LARS over a fixed list of parameters, one parameter at a time.
pub type Lars = LayerWiseOptimizer<LarsRule>;

/// LARS's part of the layer-wise loop: the gradient as the direction, and momentum on the step.
#[derive(Debug)]
pub struct LarsRule {
    /// Each parameter's velocity, `None` until its first update (or until made capturable).
    velocities: Vec<Option<Tensor>>,
    /// The momentum factor `m`: a host number, or a device tensor once capturable.
    momentum: Hyper,
}

impl Lars {
    /// An optimizer over `params` (shallow clones of the model's trainable variables).
    pub fn new(params: Vec<Tensor>, config: LarsConfig) -> Self {
        let LarsConfig { momentum, weight_decay, trust_coefficient, exclude_1d } = config;
        let velocities = params.iter().map(|_| None).collect();
        let trust_ratio = TrustRatio::Lars { trust_coefficient };
        let rule = LarsRule { velocities, momentum: Hyper::Host(momentum) };
        LayerWiseOptimizer::from_parts(params, LayerWise { weight_decay, exclude_1d, trust_ratio }, rule)
    }
}

impl Rule for LarsRule {
    /// Sets the momentum factor. Once capturable, it lives on the device, so a captured CUDA graph
    /// follows 1cycle's changes.
    fn set_momentum(&mut self, momentum: f64) {
        self.momentum.set(momentum);
    }

    /// The gradient itself.
    fn direction(&mut self, _: usize, _: &Tensor, grad: Tensor, _: Option<&Tensor>) -> Tensor {
        grad
    }

    /// The velocity, after `v = m·v + step`.
    fn delta(&mut self, index: usize, p: &Tensor, step: Tensor, keep: Option<&Tensor>) -> Tensor {
        let velocity = self.velocities[index].get_or_insert_with(|| p.zeros_like());
        unless_skipped(velocity, keep, |v| {
            self.momentum.scale(v);
            let _ = v.g_add_(&step);
        });
        velocity.shallow_clone()
    }

    /// Puts the momentum in a device tensor and allocates the velocities up front as zeros (the
    /// same math: the first update is `v = m·0 + γ·λ·d`).
    fn make_capturable(&mut self, params: &[Tensor], device: Device) {
        self.momentum.move_to(device);
        for (p, velocity) in params.iter().zip(&mut self.velocities) {
            velocity.get_or_insert_with(|| p.detach().zeros_like());
        }
    }
}

#[cfg(test)]
mod tests {
    use tch::Kind;

    use crate::optim::layer_wise::train_weight_and_bias;
    use crate::optim::update::assert_close;
    use crate::optim::Optimizer;

    use super::*;

    /// [`train_weight_and_bias`] by LARS.
    fn run(
        config: LarsConfig,
        capturable: bool,
        w: [f32; 2],
        b: [f32; 2],
        steps: &[(f64, Option<f32>)],
    ) -> Vec<f32> {
        train_weight_and_bias(|params| Lars::new(params, config), capturable, w, b, steps)
    }

    const CONFIG: LarsConfig =
        LarsConfig { momentum: 0.9, weight_decay: 0.01, trust_coefficient: 0.1, exclude_1d: true };

    /// Two steps (learning rates 1 and 2), against the update rule in plain Python arithmetic:
    /// ```python
    /// import math
    /// def norm(x): return math.sqrt(sum(v * v for v in x))
    /// def lars(w, b, lrs, momentum=0.9, wd=0.01, eta=0.1, exclude_1d=True):
    ///     vw, vb = [0.0] * len(w), [0.0] * len(b)
    ///     for lr in lrs:
    ///         gw, gb = [x * x for x in w], [x * x for x in b]   # loss = sum(w**3)/3 + sum(b**3)/3
    ///         def local(x, g):
    ///             xn, gn = norm(x), norm(g)
    ///             ratio = eta * xn / (gn + wd * xn) if xn > 0 and gn > 0 else 1.0
    ///             return [lr * ratio * (gi + wd * xi) for xi, gi in zip(x, g)]
    ///         uw = local(w, gw)
    ///         ub = [lr * g for g in gb] if exclude_1d else local(b, gb)
    ///         vw = [momentum * v + u for v, u in zip(vw, uw)]
    ///         vb = [momentum * v + u for v, u in zip(vb, ub)]
    ///         w = [x - v for x, v in zip(w, vw)]
    ///         b = [x - v for x, v in zip(b, vb)]
    ///     return w + b
    /// print(lars([3.0, 4.0], [0.5, -0.25], [1.0, 2.0]))
    /// # [2.071690941915082, 2.3988990429816393, -0.09999999999999998, -0.5640625]
    /// print(lars([3.0, 4.0], [0.5, -0.25], [1.0, 2.0], exclude_1d=False))
    /// # [2.071690941915082, 2.3988990429816393, 0.29956017300215626, -0.3060824588121661]
    /// ```
    #[test]
    fn matches_the_update_rule_and_excludes_1d_parameters_only_when_asked() {
        let excluded = [2.071_690_9_f32, 2.398_899, -0.1, -0.564_062_5];
        let adapted = [2.071_690_9_f32, 2.398_899, 0.299_560_17, -0.306_082_46];
        for (exclude_1d, expected) in [(true, excluded), (false, adapted)] {
            for capturable in [false, true] {
                for flag in [None, Some(0.0)] {
                    let config = LarsConfig { exclude_1d, ..CONFIG };
                    let got = run(config, capturable, [3.0, 4.0], [0.5, -0.25], &[(1.0, flag), (2.0, flag)]);
                    let what = format!("exclude_1d={exclude_1d} capturable={capturable} flag={flag:?}");
                    assert_close(&got, &expected, &what);
                }
            }
        }
    }

    /// With a zero weight norm (`w = 0`, gradient `[1, 2]`) or a zero gradient norm (`w = [3, 4]`,
    /// gradient 0) the trust ratio is 1, so one step at learning rate 0.5 (weight decay 0.01) is
    /// plain SGD: `w = −0.5·[1, 2] = [−0.5, −1]`, and `w = [3, 4]·(1 − 0.5·0.01) = [2.985, 3.98]`.
    #[test]
    fn trust_ratio_is_one_when_a_norm_is_zero() {
        for capturable in [false, true] {
            for (start, coefficients, expected) in
                [([0.0f32, 0.0], [1.0f32, 2.0], [-0.5f32, -1.0]), ([3.0, 4.0], [0.0, 0.0], [2.985, 3.98])]
            {
                let w = Tensor::from_slice(&start).view([1, 2]).set_requires_grad(true);
                let mut opt = Lars::new(vec![w.shallow_clone()], CONFIG);
                if capturable {
                    opt.make_capturable();
                }
                (&w * Tensor::from_slice(&coefficients).view([1, 2])).sum(Kind::Float).backward();
                opt.step(0.5).unwrap();
                let got = Vec::<f32>::try_from(&w.detach().flatten(0, -1)).unwrap();
                assert_close(&got, &expected, &format!("capturable={capturable}"));
            }
        }
    }

    /// A flagged step (with an infinite gradient) leaves weights and velocities as they were.
    #[test]
    fn a_flagged_step_changes_nothing() {
        let (w, b) = ([3.0, 4.0], [0.5, -0.25]);
        let expected = run(CONFIG, false, w, b, &[(1.0, None), (2.0, None)]);
        for capturable in [false, true] {
            let steps = [(1.0, Some(0.0)), (1.5, Some(1.0)), (2.0, Some(0.0))];
            assert_close(
                &run(CONFIG, capturable, w, b, &steps),
                &expected,
                &format!("capturable={capturable}"),
            );
        }
    }
}
