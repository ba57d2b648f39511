//! SGD with momentum and L2 weight decay, PyTorch's `torch.optim.SGD` update written out per
//! parameter (the "per-parameter optimizer loop" of the guide).

use tch::Tensor;

use crate::ffi;

/// SGD hyper-parameters (the learning rate comes with each step, from the schedule).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct SgdConfig {
    /// Momentum factor (0.9 in the 2021-style recipe).
    pub momentum: f64,
    /// L2 penalty added to the gradient (5e-4 in the recipe).
    pub weight_decay: f64,
}

/// SGD over a fixed list of parameters.
#[derive(Debug)]
pub struct Sgd {
    config: SgdConfig,
    params: Vec<Tensor>,
    momentum_buffers: Vec<Option<Tensor>>,
}

impl Sgd {
    /// An optimizer over `params` (shallow clones of the model's trainable variables).
    pub fn new(params: Vec<Tensor>, config: SgdConfig) -> Self {
        let momentum_buffers = params.iter().map(|_| None).collect();
        Self { config, params, momentum_buffers }
    }

    /// One update with learning rate `lr`, as `torch.optim.SGD.step()` (dampening 0, no Nesterov):
    /// `d = g + wd·p; buf = momentum·buf + d` (`buf = d` at the first step); `p -= lr·buf`.
    /// Parameters without a gradient are skipped.
    pub fn step(&mut self, lr: f64) {
        let SgdConfig { momentum, weight_decay } = self.config;
        tch::no_grad(|| {
            for (p, buf) in self.params.iter_mut().zip(&mut self.momentum_buffers) {
                let grad = p.grad();
                if !grad.defined() {
                    continue;
                }
                let d = if weight_decay == 0.0 { grad } else { grad + &*p * weight_decay };
                let update = match buf {
                    Some(b) => {
                        let _ = b.g_mul_scalar_(momentum).g_add_(&d);
                        b.shallow_clone()
                    }
                    None if momentum != 0.0 => buf.insert(d.copy()).shallow_clone(),
                    None => d,
                };
                let _ = p.g_sub_(&(update * lr));
            }
        });
    }

    /// Clears gradients before the next backward: set to None (`set_to_none = true`, the trick)
    /// or zero-filled in place (the old default).
    pub fn zero_grad(&mut self, set_to_none: bool) {
        for p in &mut self.params {
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

    /// The parameters being optimised.
    pub fn params(&self) -> &[Tensor] {
        &self.params
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tch::Kind;

    /// Golden values from PyTorch 2.11:
    /// ```python
    /// p = torch.tensor([1.0, -2.0], requires_grad=True)
    /// opt = torch.optim.SGD([p], lr=0.1, momentum=0.9, weight_decay=0.01)
    /// for _ in range(3):
    ///     opt.zero_grad(); (p ** 2).sum().backward(); opt.step()
    /// print(p.tolist())  # [0.05819422006607056, -0.11638844013214111]
    /// ```
    #[test]
    fn matches_torch_optim_sgd() {
        let p = Tensor::from_slice(&[1.0f32, -2.0]).set_requires_grad(true);
        let mut opt = Sgd::new(vec![p.shallow_clone()], SgdConfig { momentum: 0.9, weight_decay: 0.01 });
        for _ in 0..3 {
            opt.zero_grad(true);
            (&p * &p).sum(Kind::Float).backward();
            opt.step(0.1);
        }
        let got = Vec::<f32>::try_from(&p.detach()).unwrap();
        let expected = [0.058_194_22_f32, -0.116_388_44];
        for (g, e) in got.iter().zip(expected) {
            assert!((g - e).abs() < 1e-6, "{got:?} vs {expected:?}");
        }
    }

    #[test]
    fn zero_grad_fills_with_zeros_or_sets_none() {
        let p = Tensor::from_slice(&[1.0f32, 2.0]).set_requires_grad(true);
        let mut opt = Sgd::new(vec![p.shallow_clone()], SgdConfig { momentum: 0.0, weight_decay: 0.0 });
        (&p * 3.0).sum(Kind::Float).backward();
        opt.zero_grad(false);
        let grad = p.grad();
        assert!(grad.defined(), "zero-filled gradient must still exist");
        assert_eq!(Vec::<f32>::try_from(&grad).unwrap(), [0.0, 0.0]);
        opt.zero_grad(true);
        assert!(!p.grad().defined(), "set_to_none must leave no gradient");
    }
}
