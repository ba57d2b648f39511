//! Adam (Kingma & Ba 2015) with an L2 penalty on the gradient, PyTorch's `torch.optim.Adam`, or
//! with decoupled weight decay (Loshchilov & Hutter 2019), `torch.optim.AdamW`: one parameter at a
//! time, as their single-tensor (`foreach=False`) code paths, or all parameters in one fused
//! multi-tensor kernel, as `fused=True` (the `fused-optimizer` trick).

use tch::{Device, Kind, Tensor};

use super::update::{keep_mask, unless_skipped, zero_grads, Hyper};
use super::Optimizer;
use crate::error::Error;
use crate::ffi;

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

impl MomentState {
    /// Zero estimates shaped as `param` (the first update of a zero estimate is `(1 − β)·g`, the
    /// same math as starting from the first gradient), with the step count `step`.
    fn zeros(param: &Tensor, step: Hyper) -> Self {
        Self { exp_avg: param.detach().zeros_like(), exp_avg_sq: param.detach().zeros_like(), step }
    }
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
            let state = state.get_or_insert_with(|| MomentState::zeros(p, Hyper::Host(0.0)));
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
        let state = self.states[index].get_or_insert_with(|| MomentState::zeros(param, Hyper::Host(0.0)));
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
    /// The fused kernel's step counts: one float per parameter in a single device tensor (each
    /// parameter's count is a 0-d view of it), so that one kernel counts a step of all of them.
    /// `None` when the update runs one parameter at a time.
    fused_steps: Option<Tensor>,
}

impl Adam {
    /// Adam with the weight decay as an L2 penalty on the gradient (`torch.optim.Adam`):
    /// `g ← g + wd·p`, then `p ← p − lr·m̂ / (√v̂ + ε)`. `params` are shallow clones of the model's
    /// trainable variables.
    pub fn new(params: Vec<Tensor>, config: AdamConfig) -> Self {
        let moments = Moments::new(params.len(), config.beta1, config.beta2, config.eps);
        Self {
            weight_decay: config.weight_decay,
            decoupled: false,
            params,
            moments,
            lr: Hyper::Host(0.0),
            fused_steps: None,
        }
    }

    /// AdamW, the weight decay decoupled from the gradient (`torch.optim.AdamW`):
    /// `p ← p·(1 − lr·wd) − lr·m̂ / (√v̂ + ε)`.
    pub fn adamw(params: Vec<Tensor>, config: AdamConfig) -> Self {
        Self { decoupled: true, ..Self::new(params, config) }
    }

    /// Adam with an L2 penalty, as [`Self::new`], updating all parameters in one multi-tensor
    /// launch (`at::_fused_adam_`, as `torch.optim.Adam(fused=True)`; on CPU and CUDA).
    pub fn fused(params: Vec<Tensor>, config: AdamConfig) -> Self {
        Self::new(params, config).with_fused_kernel()
    }

    /// AdamW, as [`Self::adamw`], updating all parameters in one multi-tensor launch
    /// (`at::_fused_adamw_`, as `torch.optim.AdamW(fused=True)`; on CPU and CUDA).
    pub fn fused_adamw(params: Vec<Tensor>, config: AdamConfig) -> Self {
        Self::adamw(params, config).with_fused_kernel()
    }

    /// Whether the weight decay is decoupled (AdamW) rather than an L2 penalty (Adam).
    pub fn is_decoupled(&self) -> bool {
        self.decoupled
    }

    /// Whether the update runs as the fused multi-tensor kernel.
    pub fn is_fused(&self) -> bool {
        self.fused_steps.is_some()
    }

    /// The device of the parameters (the CPU when there are none).
    fn device(&self) -> Device {
        self.params.first().map_or(Device::Cpu, Tensor::device)
    }

    /// Switches a new optimizer to the fused kernel: the learning rate moves into a device tensor
    /// and every parameter's moment estimates and float step count are allocated up front (as
    /// [`Optimizer::make_capturable`] does). β₁ stays a host number: the kernel takes it as an
    /// argument at each update.
    fn with_fused_kernel(mut self) -> Self {
        let device = self.device();
        self.lr.move_to(device);
        let counts = Tensor::zeros([self.params.len() as i64], (Kind::Float, device));
        self.moments.states = (self.params.iter().enumerate())
            .map(|(index, p)| Some(MomentState::zeros(p, Hyper::Device(counts.get(index as i64)))))
            .collect();
        self.fused_steps = Some(counts);
        self
    }

    /// The per-parameter update.
    fn loop_update(&mut self, found_inf: Option<&Tensor>) -> Result<(), Error> {
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

    /// The fused kernel's update over the parameters that have a gradient. The kernel reads the
    /// step counts but does not change them, so they are counted here as PyTorch's Python wrapper
    /// counts them: 1 added before the launch, and `found_inf` subtracted after it (a skipped
    /// update does not count).
    fn fused_update(&mut self, found_inf: Option<&Tensor>) -> Result<(), Error> {
        let (Some(counts), Hyper::Device(lr), &Hyper::Host(beta1)) =
            (&self.fused_steps, &self.lr, &self.moments.beta1)
        else {
            return Err(Error::Torch(
                "fused Adam needs its learning rate on the device and β₁ on the host".to_owned(),
            ));
        };
        let (mut params, mut grads, mut exp_avgs, mut exp_avg_sqs, mut steps) =
            (Vec::new(), Vec::new(), Vec::new(), Vec::new(), Vec::new());
        for (p, state) in self.params.iter().zip(&self.moments.states) {
            let grad = p.grad();
            if !grad.defined() {
                continue;
            }
            let Some(MomentState { exp_avg, exp_avg_sq, step: Hyper::Device(step) }) = state else {
                return Err(Error::Torch("fused Adam: a parameter without its device-side state".to_owned()));
            };
            params.push(p.shallow_clone());
            grads.push(grad);
            exp_avgs.push(exp_avg.shallow_clone());
            exp_avg_sqs.push(exp_avg_sq.shallow_clone());
            steps.push(step.shallow_clone());
        }
        if params.is_empty() {
            return Ok(());
        }
        // One kernel counts every parameter's step when all of them step; else each count is
        // changed through its own view.
        let every = params.len() == self.params.len();
        let count = |steps: &mut [Tensor], apply: &dyn Fn(&mut Tensor)| {
            if every {
                apply(&mut counts.shallow_clone());
            } else {
                steps.iter_mut().for_each(apply);
            }
        };
        let hyper = ffi::AdamHyper {
            lr,
            beta1,
            beta2: self.moments.beta2,
            weight_decay: self.weight_decay,
            eps: self.moments.eps,
        };
        let kernel = if self.decoupled { ffi::fused_adamw } else { ffi::fused_adam };
        tch::no_grad(|| {
            count(&mut steps, &|c| {
                let _ = c.g_add_scalar_(1.0);
            });
            let lists = ffi::AdamLists {
                params: &mut params,
                grads: &mut grads,
                exp_avgs: &mut exp_avgs,
                exp_avg_sqs: &mut exp_avg_sqs,
                steps: &mut steps,
            };
            kernel(lists, hyper, found_inf)?;
            if let Some(found_inf) = found_inf {
                let skipped = found_inf.reshape([]);
                count(&mut steps, &|c| {
                    let _ = c.g_sub_(&skipped);
                });
            }
            Ok(())
        })
    }
}

impl Optimizer for Adam {
    fn set_lr(&mut self, lr: f64) {
        self.lr.set(lr);
    }

    fn skips_overflow_on_device(&self) -> bool {
        self.is_fused()
    }

    /// Sets β₁. PyTorch's bias correction uses the current β₁ (`1 − β₁ᵗ`), and so does this. Once
    /// capturable, β₁ lives on the device, so a captured CUDA graph follows 1cycle's changes; the
    /// fused kernel takes β₁ as a number at each launch, which eager updates follow but a
    /// captured graph would not.
    fn set_momentum(&mut self, momentum: f64) {
        self.moments.set_beta1(momentum);
    }

    /// One Adam update of every parameter that has a gradient: one fused launch, or one
    /// parameter at a time. A skip flag needs the step counts on the device: on a host-side
    /// optimizer, the first flagged update moves them there.
    fn update(&mut self, found_inf: Option<&Tensor>) -> Result<(), Error> {
        if self.is_fused() {
            self.fused_update(found_inf)
        } else {
            self.loop_update(found_inf)
        }
    }

    fn zero_grad(&mut self, set_to_none: bool) {
        zero_grads(&mut self.params, set_to_none);
    }

    fn params(&self) -> &[Tensor] {
        &self.params
    }

    /// Puts the learning rate, β₁ and the step counts in device tensors and allocates the moment
    /// estimates up front as zeros. A fused optimizer did all but β₁ when it was built, and keeps
    /// β₁ a number passed to the kernel (so a captured CUDA graph keeps the β₁ it was captured
    /// with, as fused SGD keeps its momentum).
    fn make_capturable(&mut self) {
        if self.is_fused() {
            return;
        }
        let device = self.device();
        self.lr.move_to(device);
        self.moments.make_capturable(&self.params, device);
    }
}

#[cfg(test)]
mod tests {
    use tch::Kind;

    use crate::optim::update::assert_close;

    use super::*;

    /// One of the four constructors.
    type Build = fn(Vec<Tensor>, AdamConfig) -> Adam;

    /// Every constructor, with whether it decouples the weight decay and whether it is fused.
    const BUILDS: [(Build, bool, bool); 4] = [
        (Adam::new, false, false),
        (Adam::adamw, true, false),
        (Adam::fused, false, true),
        (Adam::fused_adamw, true, true),
    ];

    /// The two parameters of the tests and an optimizer over them built by `build`, weight decay 0.1.
    fn setup(build: Build) -> (Tensor, Tensor, Adam) {
        let p = Tensor::from_slice(&[1.0f32, -2.0]).set_requires_grad(true);
        let q = Tensor::from_slice(&[0.5f32, 0.25, 3.0, -1.0]).view([2, 2]).set_requires_grad(true);
        let params = vec![p.shallow_clone(), q.shallow_clone()];
        let opt = build(params, AdamConfig { weight_decay: 0.1, ..AdamConfig::default() });
        (p, q, opt)
    }

    /// One update at learning rate `lr` and β₁ `beta1` with loss `Σp² + Σq³`; a flag of `None`
    /// passes no `found_inf`, a flag of 1 comes with an overflowed (infinite) gradient.
    fn step(opt: &mut Adam, p: &Tensor, q: &Tensor, (lr, beta1, flag): (f64, f64, Option<f32>)) {
        opt.zero_grad(true);
        ((p * p).sum(Kind::Float) + (q * q * q).sum(Kind::Float)).backward();
        if flag == Some(1.0) {
            let _ = p.grad().fill_(f64::INFINITY);
        }
        opt.set_lr(lr);
        opt.set_momentum(beta1);
        let found_inf = flag.map(|f| Tensor::from_slice(&[f]));
        opt.update(found_inf.as_ref()).unwrap();
    }

    /// The values of `tensors`, flattened and concatenated.
    fn values(tensors: &[&Tensor]) -> Vec<f32> {
        tensors.iter().flat_map(|t| Vec::<f32>::try_from(&t.detach().flatten(0, -1)).unwrap()).collect()
    }

    /// The two parameters after updates at the given (learning rate, β₁, skip flag) steps.
    fn run(build: Build, capturable: bool, steps: &[(f64, f64, Option<f32>)]) -> Vec<f32> {
        let (p, q, mut opt) = setup(build);
        if capturable {
            opt.make_capturable();
        }
        for &s in steps {
            step(&mut opt, &p, &q, s);
        }
        values(&[&p, &q])
    }

    /// Golden values from PyTorch 2.11, the learning rate and β₁ changing at each step; the fused
    /// kernels (`fused=True`) print the same numbers:
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
    fn matches_torch_adam_and_adamw_per_parameter_fused_on_the_host_and_on_the_device() {
        let adam = [0.509_074_4_f32, -1.499_651_1, 0.072_154_64, -0.101_744_38, 2.502_011_8, -1.526_77];
        let adamw = [0.462_325_45_f32, -1.393_653_4, 0.060_186_98, -0.098_866_28, 2.338_959_7, -1.456_158_4];
        for (build, decoupled, fused) in BUILDS {
            let (_, _, opt) = setup(build);
            assert_eq!((opt.is_decoupled(), opt.is_fused()), (decoupled, fused));
            let expected = if decoupled { adamw } else { adam };
            for capturable in [false, true] {
                for flag in [None, Some(0.0)] {
                    let steps = [(0.1, 0.9, flag), (0.2, 0.85, flag), (0.3, 0.8, flag)];
                    let what =
                        format!("decoupled={decoupled} fused={fused} capturable={capturable} flag={flag:?}");
                    assert_close(&run(build, capturable, &steps), &expected, &what);
                }
            }
        }
    }

    /// Fused AdamW against PyTorch's `torch.optim.AdamW(fused=True)` on the CPU, and against the
    /// per-parameter loop, over three steps at changing learning rates and β₁ (with other β₂, ε and
    /// weight decay than the test above):
    /// ```python
    /// p = torch.tensor([1.0, -2.0], requires_grad=True)
    /// q = torch.tensor([[0.5, 0.25], [3.0, -1.0]], requires_grad=True)
    /// opt = torch.optim.AdamW([p, q], lr=0.05, betas=(0.95, 0.99), eps=1e-6, weight_decay=0.5, fused=True)
    /// for lr, beta1 in [(0.05, 0.95), (0.02, 0.9), (0.07, 0.85)]:
    ///     opt.param_groups[0]['lr'] = lr
    ///     opt.param_groups[0]['betas'] = (beta1, 0.99)
    ///     opt.zero_grad(); ((p ** 2).sum() + (q ** 3).sum()).backward(); opt.step()
    /// print(p.tolist(), q.tolist())
    /// # [0.8206967115402222, -1.7517114877700806]
    /// # [[0.35858243703842163, 0.13115230202674866], [2.6837730407714844, -1.0442137718200684]]
    /// ```
    #[test]
    fn fused_adamw_matches_torch_fused_adamw_and_the_per_parameter_loop() {
        let config = AdamConfig { beta1: 0.95, beta2: 0.99, eps: 1e-6, weight_decay: 0.5 };
        let run = |build: Build| {
            let p = Tensor::from_slice(&[1.0f32, -2.0]).set_requires_grad(true);
            let q = Tensor::from_slice(&[0.5f32, 0.25, 3.0, -1.0]).view([2, 2]).set_requires_grad(true);
            let mut opt = build(vec![p.shallow_clone(), q.shallow_clone()], config);
            for s in [(0.05, 0.95, None), (0.02, 0.9, None), (0.07, 0.85, None)] {
                step(&mut opt, &p, &q, s);
            }
            values(&[&p, &q])
        };
        let expected = [0.820_696_7_f32, -1.751_711_5, 0.358_582_44, 0.131_152_3, 2.683_773, -1.044_213_8];
        let fused = run(Adam::fused_adamw);
        assert_close(&fused, &expected, "fused AdamW vs PyTorch");
        assert_close(&fused, &run(Adam::adamw), "fused AdamW vs the per-parameter loop");
    }

    /// A flagged step leaves parameters, moments and step counts as they were: the run equals one
    /// without that step (so the next step's bias correction is that of step 2, not 3).
    #[test]
    fn a_flagged_step_changes_nothing() {
        for (build, decoupled, fused) in BUILDS {
            let expected = run(build, false, &[(0.1, 0.9, None), (0.3, 0.8, None)]);
            for capturable in [false, true] {
                let steps = [(0.1, 0.9, Some(0.0)), (0.2, 0.85, Some(1.0)), (0.3, 0.8, Some(0.0))];
                let what = format!("decoupled={decoupled} fused={fused} capturable={capturable}");
                assert_close(&run(build, capturable, &steps), &expected, &what);
            }
        }
    }

    /// The fused kernel's state read directly: a flagged update changes no parameter, moment or
    /// step count, and an update that runs counts one step for each parameter.
    #[test]
    fn a_flagged_fused_step_leaves_parameters_moments_and_steps_untouched() {
        let (p, q, mut opt) = setup(Adam::fused_adamw);
        let state = |opt: &Adam| {
            let mut all = vec![&p, &q];
            for s in opt.moments.states.iter().flatten() {
                all.extend([&s.exp_avg, &s.exp_avg_sq]);
            }
            (values(&all), values(&[opt.fused_steps.as_ref().unwrap()]))
        };
        step(&mut opt, &p, &q, (0.1, 0.9, Some(0.0)));
        let before = state(&opt);
        assert_eq!(before.1, [1.0, 1.0]);
        step(&mut opt, &p, &q, (0.2, 0.85, Some(1.0)));
        assert_eq!(state(&opt), before);
        step(&mut opt, &p, &q, (0.2, 0.85, Some(0.0)));
        assert_eq!(state(&opt).1, [2.0, 2.0]);
    }

    /// A parameter without a gradient neither moves nor counts a step, in the fused kernel as in
    /// the per-parameter loop (each count then changes through its own view).
    #[test]
    fn a_parameter_without_a_gradient_does_not_step() {
        for fused in [false, true] {
            let build: Build = if fused { Adam::fused_adamw } else { Adam::adamw };
            let (p, q, mut opt) = setup(build);
            step(&mut opt, &p, &q, (0.1, 0.9, None));
            let q_before = values(&[&q]);
            for flag in [Some(0.0f32), Some(1.0), None] {
                opt.zero_grad(true);
                (&p * &p).sum(Kind::Float).backward();
                opt.set_lr(0.2);
                let found_inf = flag.map(|f| Tensor::from_slice(&[f]));
                opt.update(found_inf.as_ref()).unwrap();
            }
            assert_eq!(values(&[&q]), q_before, "fused={fused}");
            let counts: Vec<f32> = (opt.moments.states.iter().flatten())
                .map(|s| match &s.step {
                    Hyper::Host(count) => *count as f32,
                    Hyper::Device(count) => f32::try_from(count).unwrap(),
                })
                .collect();
            assert_eq!(counts, [3.0, 1.0], "fused={fused}");
        }
    }
}
