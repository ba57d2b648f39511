//! SGD with momentum and L2 weight decay, PyTorch's `torch.optim.SGD` update: written out per
//! parameter (the "per-parameter optimizer loop" of the guide), or as the fused multi-tensor kernel
//! of `torch.optim.SGD(fused=True)` (the `fused-optimizer` trick).

use tch::Tensor;

use super::update::{keep_mask, unless_skipped, zero_grads, Hyper};
use super::Optimizer;
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
    fused: bool,
    /// A host number baked into each update's kernels (`torch.optim.SGD` with a float `lr`), or a
    /// device tensor the kernels read (fused, or capturable).
    lr: Hyper,
}

impl Sgd {
    /// An optimizer over `params` (shallow clones of the model's trainable variables) that updates
    /// one parameter at a time, several small kernels each.
    pub fn new(params: Vec<Tensor>, config: SgdConfig) -> Self {
        let momentum_buffers = params.iter().map(|_| None).collect();
        Self { config, params, momentum_buffers, fused: false, lr: Hyper::Host(0.0) }
    }

    /// An optimizer over `params` that updates all of them in one multi-tensor launch
    /// (`at::_fused_sgd_`, as `torch.optim.SGD(fused=True)`; PyTorch 2.11 has it on CPU and CUDA).
    /// Momentum buffers start as zeros, so the first update (`buf = 0·momentum + d`) equals the
    /// per-parameter loop's `buf = d`.
    pub fn fused(params: Vec<Tensor>, config: SgdConfig) -> Self {
        let mut sgd = Self { fused: true, ..Self::new(params, config) };
        sgd.make_capturable();
        sgd
    }

    /// Whether the update runs as the fused multi-tensor kernel.
    pub fn is_fused(&self) -> bool {
        self.fused
    }

    /// The per-parameter update, as `torch.optim.SGD.step()` (dampening 0, no Nesterov):
    /// `d = g + wd·p; buf = momentum·buf + d` (`buf = d` at the first step); `p -= lr·buf`.
    fn loop_update(&mut self, found_inf: Option<&Tensor>) -> Result<(), Error> {
        let SgdConfig { momentum, weight_decay } = self.config;
        let keep = keep_mask(found_inf);
        let lr = &self.lr;
        tch::no_grad(|| {
            for (p, buf) in self.params.iter_mut().zip(&mut self.momentum_buffers) {
                let grad = p.grad();
                if !grad.defined() {
                    continue;
                }
                let d = if weight_decay == 0.0 { grad } else { grad + &*p * weight_decay };
                let update = match buf.as_mut() {
                    Some(b) => {
                        unless_skipped(b, keep.as_ref(), |b| {
                            let _ = b.g_mul_scalar_(momentum).g_add_(&d);
                        });
                        b.shallow_clone()
                    }
                    None if momentum != 0.0 => buf.insert(d.copy()).shallow_clone(),
                    None => d,
                };
                let delta = lr.times(&update);
                unless_skipped(p, keep.as_ref(), |p| {
                    let _ = p.g_sub_(&delta);
                });
            }
        });
        Ok(())
    }

    /// The fused kernel's update over the parameters that have a gradient.
    fn fused_update(&mut self, found_inf: Option<&Tensor>) -> Result<(), Error> {
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
        let Hyper::Device(lr) = &self.lr else {
            return Err(Error::Torch("fused SGD needs its learning rate on the device".to_owned()));
        };
        tch::no_grad(|| {
            ffi::fused_sgd(&mut params, &mut grads, &mut buffers, weight_decay, momentum, lr, found_inf)
        })?;
        Ok(())
    }
}

impl Optimizer for Sgd {
    /// Sets the learning rate (a tiny fill kernel when it lives on the device; call it outside a
    /// graph capture, before each replay).
    fn set_lr(&mut self, lr: f64) {
        self.lr.set(lr);
    }

    /// Sets the momentum factor. The recipe keeps it constant; 1cycle cycles it. It is passed to
    /// the kernels as a number, so a captured CUDA graph keeps the momentum it was captured with.
    fn set_momentum(&mut self, momentum: f64) {
        self.config.momentum = momentum;
    }

    fn skips_overflow_on_device(&self) -> bool {
        self.fused
    }

    fn update(&mut self, found_inf: Option<&Tensor>) -> Result<(), Error> {
        if self.fused {
            self.fused_update(found_inf)
        } else {
            self.loop_update(found_inf)
        }
    }

    /// Puts the learning rate in a device tensor and allocates the momentum buffers up front as
    /// zeros (the same math: the first update is `buf = 0·momentum + d = d`).
    fn make_capturable(&mut self) {
        let device = self.params.first().map_or(tch::Device::Cpu, Tensor::device);
        if self.config.momentum != 0.0 {
            for (p, buf) in self.params.iter().zip(&mut self.momentum_buffers) {
                buf.get_or_insert_with(|| p.detach().zeros_like());
            }
        }
        self.lr.move_to(device);
    }

    fn zero_grad(&mut self, set_to_none: bool) {
        zero_grads(&mut self.params, set_to_none);
    }

    fn params(&self) -> &[Tensor] {
        &self.params
    }
}

#[cfg(test)]
mod tests {
    use tch::Kind;

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

    /// Two parameters after three steps (learning rates 0.1, 0.2, 0.3), where a step is
    /// skipped (flagged as overflowed) when `skip` says so for its index.
    fn three_steps(fused: bool, lr_on_device: bool, skip: impl Fn(usize) -> bool) -> Vec<f32> {
        let p = Tensor::from_slice(&[1.0f32, -2.0]).set_requires_grad(true);
        let q = Tensor::from_slice(&[0.5f32, 3.0]).set_requires_grad(true);
        let params = vec![p.shallow_clone(), q.shallow_clone()];
        let config = SgdConfig { momentum: 0.9, weight_decay: 0.01 };
        let mut opt = if fused { Sgd::fused(params, config) } else { Sgd::new(params, config) };
        if lr_on_device {
            opt.make_capturable();
        }
        for step in 0..3 {
            opt.zero_grad(true);
            ((&p * &p).sum(Kind::Float) + (&q * &q * &q).sum(Kind::Float)).backward();
            opt.set_lr(0.1 * (step + 1) as f64);
            let found_inf = Tensor::from_slice(&[if skip(step) { 1.0f32 } else { 0.0 }]);
            opt.update(Some(&found_inf)).unwrap();
        }
        let mut values = Vec::<f32>::try_from(&p.detach()).unwrap();
        values.extend(Vec::<f32>::try_from(&q.detach()).unwrap());
        values
    }

    #[test]
    fn device_learning_rate_and_device_side_skip_match_the_host_loop() {
        let reference = three_steps(false, false, |_| false);
        for (fused, on_device) in [(false, true), (true, true)] {
            let got = three_steps(fused, on_device, |_| false);
            for (g, r) in got.iter().zip(&reference) {
                assert!((g - r).abs() < 1e-6 * r.abs().max(1.0), "fused={fused}: {got:?} vs {reference:?}");
            }
        }
        // A flagged step changes nothing: skipping the middle step equals never having it, with
        // the same learning rates for the steps that run (0.1, then 0.3 after the skipped 0.2).
        let p = Tensor::from_slice(&[1.0f32, -2.0]).set_requires_grad(true);
        let q = Tensor::from_slice(&[0.5f32, 3.0]).set_requires_grad(true);
        let config = SgdConfig { momentum: 0.9, weight_decay: 0.01 };
        let mut opt = Sgd::new(vec![p.shallow_clone(), q.shallow_clone()], config);
        for lr in [0.1, 0.3] {
            opt.zero_grad(true);
            ((&p * &p).sum(Kind::Float) + (&q * &q * &q).sum(Kind::Float)).backward();
            opt.step(lr).unwrap();
        }
        let mut expected = Vec::<f32>::try_from(&p.detach()).unwrap();
        expected.extend(Vec::<f32>::try_from(&q.detach()).unwrap());
        for fused in [false, true] {
            let got = three_steps(fused, true, |step| step == 1);
            for (g, e) in got.iter().zip(&expected) {
                assert!((g - e).abs() < 1e-6 * e.abs().max(1.0), "fused={fused}: {got:?} vs {expected:?}");
            }
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
