//! Muon (Jordan 2024, "Muon: An optimizer for hidden layers in neural networks", as in the
//! modded-nanogpt speedrun and airbench): each hidden weight matrix takes Nesterov momentum
//! orthogonalised by a Newton–Schulz iteration; every other parameter is left to another
//! optimizer. For a hidden weight `W` (a convolution's `(out, in, kh, kw)` weight seen as the
//! matrix `(out, in·kh·kw)`) with gradient `G`, momentum `μ`, learning rate `ηₜ` and weight decay
//! `λ`:
//!
//! ```text
//! B ← μ·B + G                    (B starts at 0)
//! U = G + μ·B                    (Nesterov)
//! O = NS₅(U) · √max(1, rows/cols)
//! W ← W·(1 − ηₜ·λ) − ηₜ·O
//! ```
//!
//! `NS₅` normalises `X = U / (‖U‖_F + 1e-7)`, works on the wide orientation (transposing when
//! there are more rows than columns) and applies 5 steps of the quintic
//! `X ← a·X + (b·A + c·A²)·X`, `A = X·Xᵀ`, `(a, b, c) = (3.4445, −4.7750, 2.0315)`: it maps every
//! singular value of `U` to roughly 0.7–1.2, an approximate `U·(UᵀU)^(−1/2)` at a few matrix
//! products' cost. On a CUDA device it runs in bf16, as the reference does (the iteration tolerates
//! bf16's rounding, and its matrix products run on tensor cores); on a CPU, where bf16 matrix
//! products are emulated, in fp32. Weight decay is decoupled, as AdamW's. Everything is computed
//! on the device: an update reads nothing back to the host, so it can be captured in a CUDA graph.

use tch::{Device, Kind, Tensor};

use super::update::{keep_mask, unless_skipped, zero_grads, Hyper};
use super::Optimizer;
use crate::error::Error;

/// The quintic's coefficients `(a, b, c)`, chosen by Jordan to push small singular values up
/// fast while keeping every one in a band around 1.
const QUINTIC: (f64, f64, f64) = (3.4445, -4.7750, 2.0315);
/// Added to the Frobenius norm the iteration's input is divided by.
const NORM_EPS: f64 = 1e-7;

/// Muon's hyper-parameters (the learning rate comes with each step, as a multiple of the
/// schedule's).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct MuonConfig {
    /// The Muon group's learning rate as a multiple of the schedule's rate (which the other
    /// optimizer takes as it is), so that warm-up and decay scale both groups alike.
    pub lr_ratio: f64,
    /// Nesterov momentum `μ`.
    pub momentum: f64,
    /// Decoupled weight decay `λ` per unit of the Muon group's learning rate.
    pub weight_decay: f64,
    /// Newton–Schulz steps.
    pub newton_schulz_steps: usize,
}

impl MuonConfig {
    /// Jordan's settings (momentum 0.95, 5 Newton–Schulz steps) at `lr_ratio` times the schedule's
    /// rate, with decoupled weight decay `weight_decay`.
    pub fn new(lr_ratio: f64, weight_decay: f64) -> Self {
        Self { lr_ratio, momentum: 0.95, weight_decay, newton_schulz_steps: 5 }
    }
}

/// The approximate orthogonalisation of `g` (a matrix) by `steps` Newton–Schulz steps of the
/// quintic, computed in `kind` and returned in `g`'s kind.
pub fn newton_schulz(g: &Tensor, steps: usize, kind: Kind) -> Tensor {
    let (a, b, c) = QUINTIC;
    let x = g.to_kind(kind);
    let x = &x / (x.norm() + NORM_EPS);
    let tall = g.size()[0] > g.size()[1];
    let mut x = if tall { x.tr() } else { x };
    for _ in 0..steps {
        let gram = x.matmul(&x.tr());
        let polynomial = &gram * b + gram.matmul(&gram) * c;
        x = &x * a + polynomial.matmul(&x);
    }
    let x = if tall { x.tr() } else { x };
    x.to_kind(g.kind())
}

/// The kind the Newton–Schulz iteration runs in on `device`: bf16 on CUDA, fp32 elsewhere.
pub fn newton_schulz_kind(device: Device) -> Kind {
    if device.is_cuda() {
        Kind::BFloat16
    } else {
        Kind::Float
    }
}

/// Muon over the hidden weights, with another optimizer over every other parameter.
#[derive(Debug)]
pub struct Muon {
    config: MuonConfig,
    hidden: Vec<Tensor>,
    buffers: Vec<Option<Tensor>>,
    lr: Hyper,
    rest: Box<dyn Optimizer>,
    /// The hidden weights, then the other optimizer's parameters.
    all: Vec<Tensor>,
}

impl Muon {
    /// Muon over `hidden` (shallow clones of the model's hidden weights, each of dimension ≥ 2)
    /// and `rest` over the other parameters.
    pub fn new(hidden: Vec<Tensor>, config: MuonConfig, rest: Box<dyn Optimizer>) -> Self {
        let all = hidden.iter().chain(rest.params()).map(Tensor::shallow_clone).collect();
        let buffers = hidden.iter().map(|_| None).collect();
        Self { config, hidden, buffers, lr: Hyper::Host(0.0), rest, all }
    }

    /// The hidden weights Muon updates.
    pub fn hidden(&self) -> &[Tensor] {
        &self.hidden
    }

    /// The optimizer of the other parameters.
    pub fn rest(&self) -> &dyn Optimizer {
        self.rest.as_ref()
    }

    /// The orthogonalised, scaled update `O` of weight `p` from the Nesterov direction `u`.
    fn orthogonal_update(&self, p: &Tensor, u: &Tensor) -> Tensor {
        let shape = p.size();
        let rows = shape[0];
        let matrix = u.reshape([rows, -1]);
        let cols = matrix.size()[1];
        let kind = newton_schulz_kind(p.device());
        let scale = (rows as f64 / cols as f64).max(1.0).sqrt();
        (newton_schulz(&matrix, self.config.newton_schulz_steps, kind) * scale).reshape(shape.as_slice())
    }

    /// The Muon group's update, unless `keep` says it is skipped.
    fn update_hidden(&mut self, keep: Option<&Tensor>) {
        let MuonConfig { momentum, weight_decay, .. } = self.config;
        let shrink = (weight_decay != 0.0).then(|| self.lr.one_minus_times(weight_decay));
        for index in 0..self.hidden.len() {
            let grad = self.hidden[index].grad();
            if !grad.defined() {
                continue;
            }
            let buf = self.buffers[index].get_or_insert_with(|| grad.zeros_like());
            unless_skipped(buf, keep, |b| {
                let _ = b.g_mul_scalar_(momentum).g_add_(&grad);
            });
            let nesterov = &grad + &*buf * momentum;
            let p = &self.hidden[index];
            let step = self.lr.times(&self.orthogonal_update(p, &nesterov));
            unless_skipped(&mut self.hidden[index], keep, |p| {
                if let Some(shrink) = &shrink {
                    shrink.scale(p);
                }
                let _ = p.g_sub_(&step);
            });
        }
    }
}

impl Optimizer for Muon {
    /// Sets the other optimizer's rate to `lr` and Muon's to `lr` times its ratio.
    fn set_lr(&mut self, lr: f64) {
        self.lr.set(lr * self.config.lr_ratio);
        self.rest.set_lr(lr);
    }

    /// Sets the other optimizer's momentum (what 1cycle cycles); Muon's Nesterov momentum keeps
    /// its configured value, as in Jordan's reference.
    fn set_momentum(&mut self, momentum: f64) {
        self.rest.set_momentum(momentum);
    }

    /// Muon's update of the hidden weights that have a gradient, then the other optimizer's.
    fn update(&mut self, found_inf: Option<&Tensor>) -> Result<(), Error> {
        let keep = keep_mask(found_inf);
        tch::no_grad(|| self.update_hidden(keep.as_ref()));
        self.rest.update(found_inf)
    }

    fn zero_grad(&mut self, set_to_none: bool) {
        zero_grads(&mut self.all, set_to_none);
    }

    fn params(&self) -> &[Tensor] {
        &self.all
    }

    /// Puts Muon's learning rate in a device tensor, allocates its momentum buffers up front as
    /// zeros (the same math), and makes the other optimizer capturable.
    fn make_capturable(&mut self) {
        let device = self.hidden.first().map_or(Device::Cpu, Tensor::device);
        self.lr.move_to(device);
        for (p, buf) in self.hidden.iter().zip(&mut self.buffers) {
            buf.get_or_insert_with(|| p.detach().zeros_like());
        }
        self.rest.make_capturable();
    }

    /// Whether the other optimizer skips on the device: Muon's own update always can, so the two
    /// follow the other optimizer's way.
    fn skips_overflow_on_device(&self) -> bool {
        self.rest.skips_overflow_on_device()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::optim::sgd::{Sgd, SgdConfig};
    use crate::test_support::seeded;

    /// Asserts `got` equals `expected` within 1e-5: five Newton–Schulz steps amplify the float32
    /// rounding differences between two orders of the same operations.
    fn assert_near(got: &[f32], expected: &[f32], what: &str) {
        assert_eq!(got.len(), expected.len(), "{what}");
        for (g, e) in got.iter().zip(expected) {
            assert!((g - e).abs() < 1e-5, "{what}: {got:?} vs {expected:?}");
        }
    }

    /// The singular values of the matrix `x`, largest first.
    fn singular_values(x: &Tensor) -> Vec<f32> {
        Vec::<f32>::try_from(&x.svd(true, false).1).unwrap()
    }

    /// `[4, 6]` and `[6, 3]` weights after Muon steps at the given learning rates (the schedule's
    /// rate, Muon's ratio 1), loss `Σw³/3 + Σk·w` per weight; each step's skip flag as in
    /// [`crate::optim::lamb`]'s tests.
    fn run(config: MuonConfig, capturable: bool, steps: &[(f64, Option<f32>)]) -> Vec<f32> {
        let w1 = (Tensor::arange(24, (Kind::Float, Device::Cpu)) * 0.7 + 0.3).sin().view([4, 6]);
        let w2 = (Tensor::arange(18, (Kind::Float, Device::Cpu)) * 1.1 - 0.2).cos().view([6, 3]);
        let k1 = (Tensor::arange(24, (Kind::Float, Device::Cpu)) * 1.3).cos().view([4, 6]);
        let k2 = (Tensor::arange(18, (Kind::Float, Device::Cpu)) * 0.9).sin().view([6, 3]);
        let weights = [w1.set_requires_grad(true), w2.set_requires_grad(true)];
        let rest = Box::new(Sgd::new(Vec::new(), SgdConfig { momentum: 0.9, weight_decay: 0.0 }));
        let mut opt = Muon::new(weights.iter().map(Tensor::shallow_clone).collect(), config, rest);
        if capturable {
            opt.make_capturable();
        }
        for &(lr, flag) in steps {
            opt.zero_grad(true);
            let loss = |w: &Tensor, k: &Tensor| (w * w * w).sum(Kind::Float) / 3.0 + (w * k).sum(Kind::Float);
            (loss(&weights[0], &k1) + loss(&weights[1], &k2)).backward();
            if flag == Some(1.0) {
                let _ = weights[0].grad().fill_(f64::INFINITY);
            }
            let found_inf = flag.map(|f| Tensor::from_slice(&[f]));
            opt.set_lr(lr);
            opt.update(found_inf.as_ref()).unwrap();
        }
        weights.iter().flat_map(|w| Vec::<f32>::try_from(&w.detach().flatten(0, -1)).unwrap()).collect()
    }

    /// Three steps (learning rates 0.1, 0.05, 0.02; weight decay 0.01) against an independent
    /// reference in PyTorch 2.11 (fp32 on the CPU):
    /// ```python
    /// import torch
    /// def newton_schulz(g, steps=5):
    ///     a, b, c = 3.4445, -4.7750, 2.0315
    ///     x = g / (g.norm() + 1e-7)
    ///     tall = x.size(0) > x.size(1)
    ///     if tall:
    ///         x = x.T
    ///     for _ in range(steps):
    ///         s = x @ x.T
    ///         x = a * x + (b * s + c * s @ s) @ x
    ///     return x.T if tall else x
    /// def muon(lrs, mu=0.95, wd=0.01):
    ///     ws = [torch.sin(torch.arange(24.0) * 0.7 + 0.3).reshape(4, 6),
    ///           torch.cos(torch.arange(18.0) * 1.1 - 0.2).reshape(6, 3)]
    ///     ks = [torch.cos(torch.arange(24.0) * 1.3).reshape(4, 6),
    ///           torch.sin(torch.arange(18.0) * 0.9).reshape(6, 3)]
    ///     bufs = [torch.zeros_like(w) for w in ws]
    ///     for lr in lrs:
    ///         for w, k, buf in zip(ws, ks, bufs):
    ///             g = w * w + k                                 # loss = sum(w**3)/3 + sum(k*w)
    ///             buf.mul_(mu).add_(g)
    ///             u = newton_schulz(g + mu * buf) * max(1.0, w.size(0) / w.size(1)) ** 0.5
    ///             w.mul_(1 - lr * wd).sub_(lr * u)
    ///     return [v for w in ws for v in w.flatten().tolist()]
    /// print(muon([0.1, 0.05, 0.02]))
    /// ```
    #[test]
    fn matches_an_independent_pytorch_reference() {
        let expected = [
            0.214_158_36_f32,
            0.845_069_77,
            0.965_910_5,
            0.667_909_15,
            0.061_636_172,
            -0.715_411_96,
            -1.004_999_9,
            -0.922_377_6,
            -0.347_069_62,
            0.282_384_87,
            0.733_085_7,
            0.976_677_1,
            0.674_248_5,
            0.063_32,
            -0.697_874_67,
            -1.083_342_8,
            -0.877_618_3,
            -0.333_491_5,
            0.343_549_3,
            0.749_049_4,
            0.917_974_35,
            0.659_374_5,
            0.018_841_84,
            -0.636_993_65,
            0.916_759_13,
            0.505_277_04,
            -0.501_153_47,
            -1.126_352,
            -0.447_022_74,
            0.606_906_2,
            0.973_917_96,
            0.355_977_4,
            -0.792_756_14,
            -1.120_194_6,
            -0.216_596_92,
            0.775_413_3,
            0.904_163,
            0.152_727_81,
            -0.962_211_6,
            -0.943_664_7,
            0.040_265_087,
            0.840_014_4,
        ];
        let config = MuonConfig::new(1.0, 0.01);
        for capturable in [false, true] {
            for flag in [None, Some(0.0)] {
                let got = run(config, capturable, &[(0.1, flag), (0.05, flag), (0.02, flag)]);
                assert_near(&got, &expected, &format!("capturable={capturable} flag={flag:?}"));
            }
        }
    }

    /// A flagged step (with an infinite gradient) leaves weights and momentum as they were.
    #[test]
    fn a_flagged_step_changes_nothing() {
        let config = MuonConfig::new(1.0, 0.01);
        let expected = run(config, false, &[(0.1, None), (0.05, None)]);
        for capturable in [false, true] {
            let steps = [(0.1, Some(0.0)), (0.2, Some(1.0)), (0.05, Some(0.0))];
            assert_near(&run(config, capturable, &steps), &expected, &format!("capturable={capturable}"));
        }
    }

    /// The iteration maps every singular value of a random matrix (its rows and columns scaled
    /// from 0.1 to 1, which spreads the singular values over more than a factor of 5) into the
    /// quintic's band, wide and tall, in fp32 and bf16.
    #[test]
    fn newton_schulz_puts_singular_values_near_one() {
        for shape in [[32, 64], [64, 32], [16, 144]] {
            let spread = |n: i64| Tensor::linspace(0.1, 1.0, n, (Kind::Float, Device::Cpu));
            let g = seeded(0, || Tensor::randn(shape, (Kind::Float, Device::Cpu)))
                * spread(shape[0]).unsqueeze(1)
                * spread(shape[1]);
            let before = singular_values(&g);
            assert!(before[0] > 5.0 * before[before.len() - 1], "{shape:?}: {before:?}");
            for kind in [Kind::Float, Kind::BFloat16] {
                let x = newton_schulz(&g, 5, kind);
                assert_eq!((x.size(), x.kind()), (g.size(), Kind::Float));
                let after = singular_values(&x);
                assert!(after.iter().all(|s| (0.65..1.2).contains(s)), "{shape:?} {kind:?}: {after:?}");
            }
        }
    }

    /// The other parameters take exactly the other optimizer's update, and a convolution's 4-d
    /// weight is orthogonalised as its `(out, in·kh·kw)` matrix and keeps its shape.
    #[test]
    fn the_rest_gets_the_other_optimizer_s_update_and_4d_weights_are_flattened() {
        let (conv, bias) = seeded(1, || {
            (
                Tensor::randn([4, 2, 3, 3], (Kind::Float, Device::Cpu)),
                Tensor::randn([4], (Kind::Float, Device::Cpu)),
            )
        });
        let (conv, bias) = (conv.set_requires_grad(true), bias.set_requires_grad(true));
        let twin = bias.detach().copy().set_requires_grad(true);
        let sgd = SgdConfig { momentum: 0.9, weight_decay: 5e-4 };
        let rest = Box::new(Sgd::new(vec![bias.shallow_clone()], sgd));
        let mut muon = Muon::new(vec![conv.shallow_clone()], MuonConfig::new(0.5, 0.0), rest);
        let mut plain = Sgd::new(vec![twin.shallow_clone()], sgd);
        assert_eq!(muon.params().len(), 2);
        let mut first_update = None;
        for lr in [0.1, 0.2] {
            muon.zero_grad(true);
            plain.zero_grad(true);
            ((&conv * &conv).sum(Kind::Float) + (&bias * &bias * &bias).sum(Kind::Float)).backward();
            (&twin * &twin * &twin).sum(Kind::Float).backward();
            let before = conv.detach().copy();
            muon.step(lr).unwrap();
            plain.step(lr).unwrap();
            first_update.get_or_insert_with(|| before - conv.detach());
        }
        let got = Vec::<f32>::try_from(&bias.detach()).unwrap();
        assert_eq!(got, Vec::<f32>::try_from(&twin.detach()).unwrap());
        assert_eq!(conv.size(), [4, 2, 3, 3]);
        // The first update is 0.05·NS(1.95·g) (Muon's rate 0.5 × 0.1): the flattened matrix's
        // singular values in the band, times 0.05.
        let update = first_update.unwrap().reshape([4, 18]);
        let singular = singular_values(&update);
        assert!(singular.iter().all(|s| (0.05 * 0.65..0.05 * 1.2).contains(s)), "{singular:?}");
    }
}
