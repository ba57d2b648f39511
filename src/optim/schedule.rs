//! Learning-rate (and momentum) schedules.

/// The 2021-style step schedule: the base rate, divided by 10 at 50% and again at 75% of training
/// (He et al. divide at 32k and 48k of 64k iterations).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct StepSchedule {
    /// Learning rate at the start.
    pub base_lr: f64,
    /// Planned optimizer steps of the whole run.
    pub total_steps: usize,
}

impl StepSchedule {
    /// The learning rate for (0-based) step `step`.
    pub fn lr(&self, step: usize) -> f64 {
        let progress = step as f64 / self.total_steps.max(1) as f64;
        if progress < 0.5 {
            self.base_lr
        } else if progress < 0.75 {
            self.base_lr / 10.0
        } else {
            self.base_lr / 100.0
        }
    }
}

/// nanoGPT's schedule (its `get_lr`): a linear warm-up to `peak_lr` over `warmup_steps`, then
/// half a cosine down to `min_lr` at `decay_steps`, and `min_lr` after that. During the warm-up
/// step `s` (0-based) uses `peak_lr · (s + 1) / (warmup_steps + 1)`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct WarmupCosine {
    /// Learning rate at the end of the warm-up.
    pub peak_lr: f64,
    /// Learning rate at the end of the decay, and after it.
    pub min_lr: f64,
    /// Steps of linear warm-up.
    pub warmup_steps: usize,
    /// The step at which the decay ends (the planned length of the run).
    pub decay_steps: usize,
}

impl WarmupCosine {
    /// The learning rate for (0-based) step `step`.
    pub fn lr(&self, step: usize) -> f64 {
        if step < self.warmup_steps {
            return self.peak_lr * (step + 1) as f64 / (self.warmup_steps + 1) as f64;
        }
        if step >= self.decay_steps {
            return self.min_lr;
        }
        let span = (self.decay_steps - self.warmup_steps).max(1) as f64;
        let progress = (step - self.warmup_steps) as f64 / span;
        Anneal::Cos.between(self.peak_lr, self.min_lr, progress)
    }
}

/// How [`OneCycle`] moves from one end point of a phase to the other.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Anneal {
    /// Half a cosine: `end + (start − end)/2 · (cos(π·pct) + 1)`.
    Cos,
    /// A straight line: `start + (end − start)·pct`.
    Linear,
}

impl Anneal {
    /// The value at fraction `pct` (0 to 1) of the way from `start` to `end`.
    fn between(self, start: f64, end: f64, pct: f64) -> f64 {
        match self {
            Anneal::Cos => end + (start - end) / 2.0 * ((std::f64::consts::PI * pct).cos() + 1.0),
            Anneal::Linear => (end - start) * pct + start,
        }
    }
}

/// The 1cycle policy (Smith & Topin 2017, "Super-Convergence"), as PyTorch's
/// `torch.optim.lr_scheduler.OneCycleLR` with `three_phase=False`: the learning rate rises from
/// `max_lr / div_factor` to `max_lr` over the first `pct_start` of the steps, then falls to
/// `max_lr / (div_factor · final_div_factor)` at the last step; the momentum (SGD's, or Adam's
/// β₁) moves the opposite way, from `max_momentum` down to `base_momentum` and back.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct OneCycle {
    /// Peak learning rate, reached at the end of the first phase.
    pub max_lr: f64,
    /// Planned optimizer steps of the whole run.
    pub total_steps: usize,
    /// Fraction of the steps spent rising (0.3).
    pub pct_start: f64,
    /// Initial learning rate = `max_lr / div_factor` (25).
    pub div_factor: f64,
    /// Final learning rate = initial learning rate / `final_div_factor` (1e4).
    pub final_div_factor: f64,
    /// Shape of both phases (cosine).
    pub anneal: Anneal,
    /// Momentum at the learning-rate peak (0.85).
    pub base_momentum: f64,
    /// Momentum at the start and at the end (0.95).
    pub max_momentum: f64,
}

impl OneCycle {
    /// PyTorch's defaults: `pct_start` 0.3, `div_factor` 25, `final_div_factor` 1e4, cosine
    /// annealing, momentum between 0.85 and 0.95.
    pub fn new(max_lr: f64, total_steps: usize) -> Self {
        Self {
            max_lr,
            total_steps,
            pct_start: 0.3,
            div_factor: 25.0,
            final_div_factor: 1e4,
            anneal: Anneal::Cos,
            base_momentum: 0.85,
            max_momentum: 0.95,
        }
    }

    /// The learning rate for (0-based) step `step`; steps past the last one get the last one's.
    pub fn lr(&self, step: usize) -> f64 {
        let initial = self.max_lr / self.div_factor;
        let (rising, pct) = self.phase(step);
        if rising {
            self.anneal.between(initial, self.max_lr, pct)
        } else {
            self.anneal.between(self.max_lr, initial / self.final_div_factor, pct)
        }
    }

    /// The momentum for (0-based) step `step`; steps past the last one get the last one's.
    pub fn momentum(&self, step: usize) -> f64 {
        let (rising, pct) = self.phase(step);
        if rising {
            self.anneal.between(self.max_momentum, self.base_momentum, pct)
        } else {
            self.anneal.between(self.base_momentum, self.max_momentum, pct)
        }
    }

    /// Whether `step` is in the rising phase, and how far into its phase (0 to 1), with
    /// PyTorch's phase boundaries: the first ends at step `pct_start · total_steps − 1`, the
    /// second at `total_steps − 1`. A phase of zero length counts as finished.
    fn phase(&self, step: usize) -> (bool, f64) {
        let last = self.total_steps.max(1) - 1;
        let step = step.min(last) as f64;
        let peak = self.pct_start * self.total_steps as f64 - 1.0;
        let (rising, start, end) = if step <= peak { (true, 0.0, peak) } else { (false, peak, last as f64) };
        let pct = if end > start { (step - start) / (end - start) } else { 1.0 };
        (rising, pct)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// nanoGPT's shakespeare-char schedule (`get_lr` in train.py with learning_rate=1e-3,
    /// min_lr=1e-4, warmup_iters=100, lr_decay_iters=5000), evaluated in Python:
    /// `[get_lr(it) for it in (0, 99, 100, 2550, 5000, 6000)]` gives 9.90e-6, 9.90e-4, 1e-3,
    /// 5.5e-4, 1e-4, 1e-4 (and 1.0000009e-4 at 4999).
    #[test]
    fn warmup_cosine_matches_nanogpt_get_lr() {
        let s = WarmupCosine { peak_lr: 1e-3, min_lr: 1e-4, warmup_steps: 100, decay_steps: 5000 };
        let expected = [
            (0, 1e-3 / 101.0),
            (99, 1e-3 * 100.0 / 101.0),
            (100, 1e-3),
            (2550, 5.5e-4),
            (5000, 1e-4),
            (6000, 1e-4),
        ];
        for (step, lr) in expected {
            assert!((s.lr(step) - lr).abs() < 1e-12, "step {step}: {} vs {lr}", s.lr(step));
        }
        assert!(s.lr(4999) > 1e-4 && s.lr(4999) < 1.0001e-4);
        assert!((101..6000).all(|t| s.lr(t) <= s.lr(t - 1)), "decays monotonically after the warm-up");
    }

    #[test]
    fn divides_by_ten_at_half_and_three_quarters() {
        let s = StepSchedule { base_lr: 0.1, total_steps: 100 };
        assert_eq!(s.lr(0), 0.1);
        assert_eq!(s.lr(49), 0.1);
        assert!((s.lr(50) - 0.01).abs() < 1e-12);
        assert!((s.lr(74) - 0.01).abs() < 1e-12);
        assert!((s.lr(75) - 0.001).abs() < 1e-12);
        assert!((s.lr(1000) - 0.001).abs() < 1e-12);
    }

    /// Golden values from PyTorch 2.11:
    /// ```python
    /// for anneal in ['cos', 'linear']:
    ///     opt = torch.optim.SGD([torch.zeros(1, requires_grad=True)], lr=0.1, momentum=0.9)
    ///     sched = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=0.1, total_steps=100, anneal_strategy=anneal)
    ///     values = {}
    ///     for step in range(100):
    ///         values[step] = (opt.param_groups[0]['lr'], opt.param_groups[0]['momentum'])
    ///         opt.step(); sched.step()
    ///     print(anneal, [(s, *values[s]) for s in [0, 15, 29, 30, 65, 99]])
    /// # cos [(0, 0.0040000000000000036, 0.95), (15, 0.05459866761210004, 0.897293054570729),
    /// #      (29, 0.1, 0.85), (30, 0.09994965352845243, 0.8500503466729342),
    /// #      (65, 0.04775696745544034, 0.9022432415175257), (99, 4e-07, 0.95)]
    /// # linear [(0, 0.004, 0.95), (15, 0.05365517241379311, 0.8982758620689655), (29, 0.1, 0.85),
    /// #         (30, 0.09857143428571429, 0.8514285714285714),
    /// #         (65, 0.048571634285714295, 0.9014285714285714), (99, 3.999999999976245e-07, 0.95)]
    /// ```
    #[test]
    fn one_cycle_matches_torch_one_cycle_lr() {
        let cos = [
            (0, 0.004_000_000_000_000_003_6, 0.95),
            (15, 0.054_598_667_612_100_04, 0.897_293_054_570_729),
            (29, 0.1, 0.85),
            (30, 0.099_949_653_528_452_43, 0.850_050_346_672_934_2),
            (65, 0.047_756_967_455_440_34, 0.902_243_241_517_525_7),
            (99, 4e-7, 0.95),
        ];
        let linear = [
            (0, 0.004, 0.95),
            (15, 0.053_655_172_413_793_11, 0.898_275_862_068_965_5),
            (29, 0.1, 0.85),
            (30, 0.098_571_434_285_714_29, 0.851_428_571_428_571_4),
            (65, 0.048_571_634_285_714_295, 0.901_428_571_428_571_4),
            (99, 3.999_999_999_976_245e-7, 0.95),
        ];
        for (anneal, expected) in [(Anneal::Cos, cos), (Anneal::Linear, linear)] {
            let schedule = OneCycle { anneal, ..OneCycle::new(0.1, 100) };
            for (step, lr, momentum) in expected {
                let (got_lr, got_momentum) = (schedule.lr(step), schedule.momentum(step));
                assert!((got_lr - lr).abs() < 1e-12 * lr, "{anneal:?} step {step}: lr {got_lr} vs {lr}");
                assert!((got_momentum - momentum).abs() < 1e-12, "{anneal:?} step {step}: {got_momentum}");
            }
            assert_eq!(schedule.lr(1000), schedule.lr(99), "past the end: the last step's rate");
        }
    }
}
