//! Adam (Kingma & Ba 2015) with an L2 penalty on the gradient, PyTorch's `torch.optim.Adam`, or
//! with decoupled weight decay (Loshchilov & Hutter 2019), `torch.optim.AdamW`: one parameter at a
//! time, as their single-tensor (`foreach=False`) code paths.

use tch::{Device, Tensor};

use super::update::{keep_mask, unless_skipped, zero_grads, Hyper};
use super::Optimizer;
use crate::error::Error;

/// Adam hyper-parameters (the learning rate comes with each step, from the schedule).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct AdamConfig {
    /// Decay rate of the first-moment estimate; the momentum that 1cycle cycles.
    pub beta1: f64,
    /// Decay rate of the second-moment estimate.
    pub beta2: f64,
    /// Added to the root of the second moment, to keep the division finite.
    pub eps: f64,
    /// L2 penalty added to the gradient (Adam), or decoupled decay rate per unit of learning rate
    /// (AdamW).
    pub weight_decay: f64,
}

impl Default for AdamConfig {
    /// PyTorch's defaults for `torch.optim.Adam`: β = (0.9, 0.999), ε = 1e-8, no weight decay
    /// (`torch.optim.AdamW` defaults to a weight decay of 0.01).
    fn default() -> Self {
        Self { beta1: 0.9, beta2: 0.999, eps: 1e-8, weight_decay: 0.0 }
    }
}

/// One parameter's moment estimates and the number of updates they have seen.
#[derive(Debug)]
struct MomentState {
    exp_avg: Tensor,
    exp_avg_sq: Tensor,
    step: Hyper,
}

/// Adam's bias-corrected moment estimates over a list of parameters, shared with LAMB. Like
/// PyTorch, each parameter counts its own steps (a parameter without a gradient does not step).
#[derive(Debug)]
pub(super) struct Moments {
    beta1: Hyper,
    beta2: f64,
    eps: f64,
    states: Vec<Option<MomentState>>,
}

impl Moments {
    /// Empty estimates for `count` parameters, created at each parameter's first update.
    pub(super) fn new(count: usize, beta1: f64, beta2: f64, eps: f64) -> Self {
        Self { beta1: Hyper::Host(beta1), beta2, eps, states: (0..count).map(|_| None).collect() }
    }

    /// Sets β₁ for the next updates.
    pub(super) fn set_beta1(&mut self, beta1: f64) {
        self.beta1.set(beta1);
    }

    /// Moves β₁ and the step counts to `device` and allocates every parameter's estimates as
    /// zeros (the same math: the first update of a zero estimate is `(1 − β)·g`).
    pub(super) fn make_capturable(&mut self, params: &[Tensor], device: Device) {
        self.beta1.move_to(device);
        for (p, state) in params.iter().zip(&mut self.states) {
            let state = state.get_or_insert_with(|| MomentState {
                exp_avg: p.detach().zeros_like(),
                exp_avg_sq: p.detach().zeros_like(),
                step: Hyper::Host(0.0),
            });
            state.step.move_to(device);
        }
    }

    /// Counts a step of parameter `index` (value `param`) with gradient `grad`, updates its
    /// estimates `m ← β₁·m + (1 − β₁)·g`, `v ← β₂·v + (1 − β₂)·g²` (both unless `keep` says the
    /// update is skipped), and returns the direction `m̂ / (√v̂ + ε)`, with `m̂ = m / (1 − β₁ᵗ)` and
    /// `v̂ = v / (1 − β₂ᵗ)` at step `t`.
    pub(super) fn direction(
        &mut self,
        index: usize,
        param: &Tensor,
        grad: &Tensor,
        keep: Option<&Tensor>,
    ) -> Tensor {
        let state = self.states[index].get_or_insert_with(|| MomentState {
            exp_avg: param.zeros_like(),
            exp_avg_sq: param.zeros_like(),
            step: Hyper::Host(0.0),
        });
        state.step.count_step(keep);
        let weight1 = self.beta1.one_minus();
        unless_skipped(&mut state.exp_avg, keep, |m| weight1.lerp(m, grad));
        let weight2 = 1.0 - self.beta2;
        unless_skipped(&mut state.exp_avg_sq, keep, |v| {
            let _ = v.lerp_(&grad.square(), weight2);
        });
        let correction1 = self.beta1.bias_correction(&state.step);
        let correction2_sqrt = Hyper::Host(self.beta2).bias_correction(&state.step).sqrt();
        let denominator = correction2_sqrt.divides(&state.exp_avg_sq.sqrt()) + self.eps;
        correction1.divides(&(&state.exp_avg / denominator))
    }
}

/// Adam or AdamW over a fixed list of parameters.
#[derive(Debug)]
pub struct Adam {
    weight_decay: f64,
    decoupled: bool,
    params: Vec<Tensor>,
    moments: Moments,
    lr: Hyper,
}

impl Adam {
    /// Adam with the weight decay as an L2 penalty on the gradient (`torch.optim.Adam`):
    /// `g ← g + wd·p`, then `p ← p − lr·m̂ / (√v̂ + ε)`. `params` are shallow clones of the model's
    /// trainable variables.
    pub fn new(params: Vec<Tensor>, config: AdamConfig) -> Self {
        let moments = Moments::new(params.len(), config.beta1, config.beta2, config.eps);
        Self { weight_decay: config.weight_decay, decoupled: false, params, moments, lr: Hyper::Host(0.0) }
    }

    /// AdamW, the weight decay decoupled from the gradient (`torch.optim.AdamW`):
    /// `p ← p·(1 − lr·wd) − lr·m̂ / (√v̂ + ε)`.
    pub fn adamw(params: Vec<Tensor>, config: AdamConfig) -> Self {
        Self { decoupled: true, ..Self::new(params, config) }
    }

    /// Whether the weight decay is decoupled (AdamW) rather than an L2 penalty (Adam).
    pub fn is_decoupled(&self) -> bool {
        self.decoupled
    }
}

impl Optimizer for Adam {
    fn set_lr(&mut self, lr: f64) {
        self.lr.set(lr);
    }

    /// Sets β₁. PyTorch's bias correction uses the current β₁ (`1 − β₁ᵗ`), and so does this. Once
    /// capturable, β₁ lives on the device, so a captured CUDA graph follows 1cycle's changes.
    fn set_momentum(&mut self, momentum: f64) {
        self.moments.set_beta1(momentum);
    }

    /// One Adam update of every parameter that has a gradient. A skip flag needs the step counts
    /// on the device: on a host-side optimizer, the first flagged update moves them there.
    fn update(&mut self, found_inf: Option<&Tensor>) -> Result<(), Error> {
        let keep = keep_mask(found_inf);
        let (weight_decay, decoupled) = (self.weight_decay, self.decoupled);
        let shrink = (decoupled && weight_decay != 0.0).then(|| self.lr.one_minus_times(weight_decay));
        tch::no_grad(|| {
            for (index, p) in self.params.iter_mut().enumerate() {
                let grad = p.grad();
                if !grad.defined() {
                    continue;
                }
                let grad = if decoupled || weight_decay == 0.0 { grad } else { grad + &*p * weight_decay };
                let step = self.lr.times(&self.moments.direction(index, p, &grad, keep.as_ref()));
                unless_skipped(p, keep.as_ref(), |p| {
                    if let Some(shrink) = &shrink {
                        shrink.scale(p);
                    }
                    let _ = p.g_sub_(&step);
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

    /// Puts the learning rate, β₁ and the step counts in device tensors and allocates the moment
    /// estimates up front as zeros.
    fn make_capturable(&mut self) {
        let device = self.params.first().map_or(Device::Cpu, Tensor::device);
        self.lr.move_to(device);
        self.moments.make_capturable(&self.params, device);
    }
}

#[cfg(test)]
mod tests {
    use tch::Kind;

    use crate::optim::update::assert_close;

    use super::*;

    /// The two parameters of the tests after updates at the given (learning rate, β₁, skip flag)
    /// steps, with loss `Σp² + Σq³`; a flag of `None` passes no `found_inf`, a flag of 1 comes
    /// with an overflowed (infinite) gradient.
    fn run(decoupled: bool, capturable: bool, steps: &[(f64, f64, Option<f32>)]) -> Vec<f32> {
        let p = Tensor::from_slice(&[1.0f32, -2.0]).set_requires_grad(true);
        let q = Tensor::from_slice(&[0.5f32, 0.25, 3.0, -1.0]).view([2, 2]).set_requires_grad(true);
        let params = vec![p.shallow_clone(), q.shallow_clone()];
        let config = AdamConfig { weight_decay: 0.1, ..AdamConfig::default() };
        let mut opt = if decoupled { Adam::adamw(params, config) } else { Adam::new(params, config) };
        assert_eq!(opt.is_decoupled(), decoupled);
        if capturable {
            opt.make_capturable();
        }
        for &(lr, beta1, flag) in steps {
            opt.zero_grad(true);
            ((&p * &p).sum(Kind::Float) + (&q * &q * &q).sum(Kind::Float)).backward();
            if flag == Some(1.0) {
                let _ = p.grad().fill_(f64::INFINITY);
            }
            opt.set_lr(lr);
            opt.set_momentum(beta1);
            let found_inf = flag.map(|f| Tensor::from_slice(&[f]));
            opt.update(found_inf.as_ref()).unwrap();
        }
        let mut values = Vec::<f32>::try_from(&p.detach()).unwrap();
        values.extend(Vec::<f32>::try_from(&q.detach().flatten(0, -1)).unwrap());
        values
    }

    /// Golden values from PyTorch 2.11, the learning rate and β₁ changing at each step:
    /// ```python
    /// for cls in [torch.optim.Adam, torch.optim.AdamW]:
    ///     p = torch.tensor([1.0, -2.0], requires_grad=True)
    ///     q = torch.tensor([[0.5, 0.25], [3.0, -1.0]], requires_grad=True)
    ///     opt = cls([p, q], lr=0.1, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.1)
    ///     for lr, beta1 in [(0.1, 0.9), (0.2, 0.85), (0.3, 0.8)]:
    ///         opt.param_groups[0]['lr'] = lr
    ///         opt.param_groups[0]['betas'] = (beta1, 0.999)
    ///         opt.zero_grad(); ((p ** 2).sum() + (q ** 3).sum()).backward(); opt.step()
    ///     print(cls.__name__, p.tolist(), q.tolist())
    /// # Adam [0.5090743899345398, -1.4996510744094849]
    /// #      [[0.07215464115142822, -0.10174437612295151], [2.502011775970459, -1.526769995689392]]
    /// # AdamW [0.46232545375823975, -1.393653392791748]
    /// #       [[0.06018698215484619, -0.09886627644300461], [2.3389596939086914, -1.4561583995819092]]
    /// ```
    #[test]
    fn matches_torch_adam_and_adamw_on_the_host_and_on_the_device() {
        let adam = [0.509_074_4_f32, -1.499_651_1, 0.072_154_64, -0.101_744_38, 2.502_011_8, -1.526_77];
        let adamw = [0.462_325_45_f32, -1.393_653_4, 0.060_186_98, -0.098_866_28, 2.338_959_7, -1.456_158_4];
        for (decoupled, expected) in [(false, adam), (true, adamw)] {
            for capturable in [false, true] {
                for flag in [None, Some(0.0)] {
                    let steps = [(0.1, 0.9, flag), (0.2, 0.85, flag), (0.3, 0.8, flag)];
                    let what = format!("decoupled={decoupled} capturable={capturable} flag={flag:?}");
                    assert_close(&run(decoupled, capturable, &steps), &expected, &what);
                }
            }
        }
    }

    /// A flagged step leaves parameters, moments and step counts as they were: the run equals one
    /// without that step (so the next step's bias correction is that of step 2, not 3).
    #[test]
    fn a_flagged_step_changes_nothing() {
        for decoupled in [false, true] {
            let expected = run(decoupled, false, &[(0.1, 0.9, None), (0.3, 0.8, None)]);
            for capturable in [false, true] {
                let steps = [(0.1, 0.9, Some(0.0)), (0.2, 0.85, Some(1.0)), (0.3, 0.8, Some(0.0))];
                let what = format!("decoupled={decoupled} capturable={capturable}");
                assert_close(&run(decoupled, capturable, &steps), &expected, &what);
            }
        }
    }
}
