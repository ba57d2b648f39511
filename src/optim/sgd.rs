//! SGD with momentum and L2 weight decay, PyTorch's `torch.optim.SGD` update: written out per
//! parameter (the "per-parameter optimizer loop" of the guide), or as the fused multi-tensor kernel
//! of `torch.optim.SGD(fused=True)` (the `fused-optimizer` trick).

use tch::{Kind, Tensor};

use crate::error::Error;
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
    /// The fused kernel's learning rate, a 0-d float tensor on the parameters' device; `None` for
    /// the per-parameter loop.
    fused_lr: Option<Tensor>,
}

impl Sgd {
    /// An optimizer over `params` (shallow clones of the model's trainable variables) that updates
    /// one parameter at a time, several small kernels each.
    pub fn new(params: Vec<Tensor>, config: SgdConfig) -> Self {
        let momentum_buffers = params.iter().map(|_| None).collect();
        Self { config, params, momentum_buffers, fused_lr: None }
    }

    /// An optimizer over `params` that updates all of them in one multi-tensor launch
    /// (`at::_fused_sgd_`, as `torch.optim.SGD(fused=True)`; PyTorch 2.11 has it on CPU and CUDA).
    /// Momentum buffers start as zeros, so the first update (`buf = 0·momentum + d`) equals the
    /// per-parameter loop's `buf = d`.
    pub fn fused(params: Vec<Tensor>, config: SgdConfig) -> Self {
        let device = params.first().map_or(tch::Device::Cpu, Tensor::device);
        let momentum_buffers =
            params.iter().map(|p| (config.momentum != 0.0).then(|| p.detach().zeros_like())).collect();
        let fused_lr = Some(Tensor::zeros([], (Kind::Float, device)));
        Self { config, params, momentum_buffers, fused_lr }
    }

    /// One update with learning rate `lr`, as `torch.optim.SGD.step()` (dampening 0, no Nesterov):
    /// `d = g + wd·p; buf = momentum·buf + d` (`buf = d` at the first step); `p -= lr·buf`.
    /// Parameters without a gradient are skipped.
    pub fn step(&mut self, lr: f64) -> Result<(), Error> {
        if self.fused_lr.is_some() {
            return self.fused_step(lr);
        }
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
        Ok(())
    }

    /// The fused kernel's step over the parameters that have a gradient.
    fn fused_step(&mut self, lr: f64) -> Result<(), Error> {
        let SgdConfig { momentum, weight_decay } = self.config;
        let (mut params, mut grads, mut buffers) = (Vec::new(), Vec::new(), Vec::new());
        for (p, buf) in self.params.iter().zip(&self.momentum_buffers) {
            let grad = p.grad();
            if grad.defined() {
                params.push(p.shallow_clone());
                grads.push(grad);
                buffers.extend(buf.as_ref().map(Tensor::shallow_clone));
            }
        }
        let Some(lr_tensor) = self.fused_lr.as_mut() else {
            return Err(Error::Torch("fused SGD step on a per-parameter optimizer".to_owned()));
        };
        let _ = lr_tensor.fill_(lr);
        let lr_tensor = lr_tensor.shallow_clone();
        tch::no_grad(|| {
            ffi::fused_sgd(&mut params, &mut grads, &mut buffers, weight_decay, momentum, &lr_tensor)
        })
    }

    /// Whether the update runs as the fused multi-tensor kernel.
    pub fn is_fused(&self) -> bool {
        self.fused_lr.is_some()
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
            opt.step(0.1).unwrap();
        }
        let got = Vec::<f32>::try_from(&p.detach()).unwrap();
        let expected = [0.058_194_22_f32, -0.116_388_44];
        for (g, e) in got.iter().zip(expected) {
            assert!((g - e).abs() < 1e-6, "{got:?} vs {expected:?}");
        }
    }

    /// Three steps of both kernels over two parameters, against PyTorch 2.11's fused SGD:
    /// ```python
    /// p = torch.tensor([1.0, -2.0], requires_grad=True)
    /// q = torch.tensor([[0.5, 0.25], [3.0, -1.0]], requires_grad=True)
    /// opt = torch.optim.SGD([p, q], lr=0.1, momentum=0.9, weight_decay=0.01, fused=True)
    /// for _ in range(3):
    ///     opt.zero_grad(); ((p ** 2).sum() + (q ** 3).sum()).backward(); opt.step()
    /// print(p.tolist(), q.tolist())
    /// # [0.05819422006607056, -0.11638844013214111]
    /// # [[0.16419918835163116, 0.1557367444038391], [-5.776680946350098, -4.056792736053467]]
    /// ```
    #[test]
    fn fused_kernel_matches_torch_fused_sgd_and_the_per_parameter_loop() {
        let run = |fused: bool| {
            let p = Tensor::from_slice(&[1.0f32, -2.0]).set_requires_grad(true);
            let q = Tensor::from_slice(&[0.5f32, 0.25, 3.0, -1.0]).view([2, 2]).set_requires_grad(true);
            let params = vec![p.shallow_clone(), q.shallow_clone()];
            let config = SgdConfig { momentum: 0.9, weight_decay: 0.01 };
            let mut opt = if fused { Sgd::fused(params, config) } else { Sgd::new(params, config) };
            assert_eq!(opt.is_fused(), fused);
            for _ in 0..3 {
                opt.zero_grad(true);
                ((&p * &p).sum(Kind::Float) + (&q * &q * &q).sum(Kind::Float)).backward();
                opt.step(0.1).unwrap();
            }
            let mut values = Vec::<f32>::try_from(&p.detach()).unwrap();
            values.extend(Vec::<f32>::try_from(&q.detach().flatten(0, -1)).unwrap());
            values
        };
        let expected =
            [0.058_194_22_f32, -0.116_388_44, 0.164_199_19, 0.155_736_74, -5.776_681, -4.056_792_7];
        let (fused, per_parameter) = (run(true), run(false));
        for ((f, p), e) in fused.iter().zip(&per_parameter).zip(expected) {
            assert!((f - e).abs() < 1e-6, "fused {fused:?} vs PyTorch {expected:?}");
            assert!((f - p).abs() < 1e-6, "fused {fused:?} vs per-parameter {per_parameter:?}");
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
