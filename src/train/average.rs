//! An exponential moving average of a model's variables (the `ema-weights` trick): updated after
//! optimizer steps, and swapped in for an evaluation, the raw variables swapped back after it.
//!
//! Every floating-point variable is averaged, the BatchNorm running statistics as well as the
//! parameters, as airbench averages every floating-point entry of the state dict: the averaged
//! weights are then evaluated with statistics averaged over the same steps, not with the
//! statistics of the last raw weights.

use tch::{nn, Tensor};

use crate::error::Error;

/// How the average is updated: every `every_steps` optimizer steps, with the decay per update
/// `decay_per_step^every_steps`, warmed up as TensorFlow's `ExponentialMovingAverage` does with
/// `num_updates`: update n (0-based) decays by `min(decay, (1 + n)/(10 + n))`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct EmaConfig {
    /// Optimizer steps between updates (at least 1).
    pub every_steps: usize,
    /// The decay the average's horizon is set by, per optimizer step.
    pub decay_per_step: f64,
}

impl EmaConfig {
    /// The decay of (0-based) update `n`: the warm-up's `(1 + n)/(10 + n)` until it reaches the
    /// decay per update.
    pub fn decay_at(&self, n: usize) -> f64 {
        let decay = self.decay_per_step.powi(self.every_steps as i32);
        decay.min((1.0 + n as f64) / (10.0 + n as f64))
    }
}

/// The average of a model's floating-point variables, each beside the variable it averages.
#[derive(Debug)]
pub struct WeightAverage {
    config: EmaConfig,
    /// (the model's variable, its average), in the variables' name order.
    pairs: Vec<(Tensor, Tensor)>,
    steps: usize,
    updates: usize,
}

impl WeightAverage {
    /// An average of `vars`'s floating-point variables, starting at their current values. Fails
    /// when `config` updates every 0 steps.
    pub fn new(vars: &nn::VarStore, config: EmaConfig) -> Result<Self, Error> {
        if config.every_steps == 0 {
            return Err(Error::Invalid(
                "ema-weights: the average needs at least 1 step per update".to_owned(),
            ));
        }
        let mut named: Vec<(String, Tensor)> =
            vars.variables().into_iter().filter(|(_, v)| v.is_floating_point()).collect();
        named.sort_by(|a, b| a.0.cmp(&b.0));
        let pairs = named.into_iter().map(|(_, var)| (var.shallow_clone(), var.detach().copy())).collect();
        Ok(Self { config, pairs, steps: 0, updates: 0 })
    }

    /// Counts one optimizer step, updating the average when it completes `every_steps` steps.
    pub fn after_step(&mut self) -> Result<(), Error> {
        self.steps += 1;
        if self.steps.is_multiple_of(self.config.every_steps) {
            self.update()?;
        }
        Ok(())
    }

    /// Moves every average towards its variable: average ← d·average + (1 − d)·variable, with
    /// the decay d of this update.
    pub fn update(&mut self) -> Result<(), Error> {
        let weight = 1.0 - self.config.decay_at(self.updates);
        tch::no_grad(|| {
            for (var, average) in &mut self.pairs {
                let _ = average.f_lerp_(var, weight)?;
            }
            Ok::<(), Error>(())
        })?;
        self.updates += 1;
        Ok(())
    }

    /// How many updates the average has had.
    pub fn updates(&self) -> usize {
        self.updates
    }

    /// Runs `f` with the averages in the model's variables, then puts the raw values back (also
    /// when `f` fails), so that training continues from them.
    pub fn swapped_in<T>(&self, f: impl FnOnce() -> Result<T, Error>) -> Result<T, Error> {
        let raw: Vec<Tensor> = self.pairs.iter().map(|(var, _)| var.detach().copy()).collect();
        tch::no_grad(|| {
            for (var, average) in &self.pairs {
                var.shallow_clone().f_copy_(average)?;
            }
            Ok::<(), Error>(())
        })?;
        let result = f();
        tch::no_grad(|| {
            for ((var, _), kept) in self.pairs.iter().zip(&raw) {
                var.shallow_clone().f_copy_(kept)?;
            }
            Ok::<(), Error>(())
        })?;
        result
    }
}

#[cfg(test)]
mod tests {
    use tch::{Device, Kind};

    use super::*;

    /// A store holding one parameter `w` of two elements, a running statistic `s` and an integer
    /// buffer `n`, which is not averaged.
    fn store() -> (nn::VarStore, Tensor, Tensor) {
        let vs = nn::VarStore::new(Device::Cpu);
        let w = vs.root().zeros("w", &[2]);
        let s = vs.root().zeros_no_train("s", &[2]);
        let _n = vs.root().add("n", Tensor::zeros([1], (Kind::Int64, Device::Cpu)), false);
        (vs, w, s)
    }

    fn set(var: &Tensor, values: [f32; 2]) {
        tch::no_grad(|| var.shallow_clone().copy_(&Tensor::from_slice(&values)));
    }

    fn values(t: &Tensor) -> Vec<f64> {
        Vec::<f64>::try_from(&t.to_kind(Kind::Double)).unwrap()
    }

    #[test]
    fn the_decay_warms_up_to_airbench_s_per_update_decay() {
        let config = EmaConfig { every_steps: 5, decay_per_step: 0.95 };
        assert!((config.decay_at(0) - 0.1).abs() < 1e-15);
        assert!((config.decay_at(2) - 3.0 / 12.0).abs() < 1e-15);
        assert!((config.decay_at(29) - 30.0 / 39.0).abs() < 1e-15, "still warming up");
        assert!((config.decay_at(30) - 0.95f64.powi(5)).abs() < 1e-15, "0.95⁵ from the 31st update");
        assert!((config.decay_at(1000) - 0.773_780_937_5).abs() < 1e-12);
    }

    #[test]
    fn after_k_updates_the_average_is_the_closed_form_of_the_decays() {
        let (vs, w, s) = store();
        let config = EmaConfig { every_steps: 2, decay_per_step: 0.5 };
        let mut average = WeightAverage::new(&vs, config).unwrap();
        assert_eq!(average.pairs.len(), 2, "the integer buffer is not averaged");
        // The variables take the values θ₁ = 1, θ₂ = 2, θ₃ = 3 (times (1, 10)) before updates 1..3,
        // one step short of an update in between; the average starts at θ₀ = 0.
        for theta in [1.0f32, 2.0, 3.0] {
            set(&w, [theta, 10.0 * theta]);
            set(&s, [-theta, 0.0]);
            average.after_step().unwrap();
            average.after_step().unwrap();
        }
        assert_eq!(average.updates(), 3);
        // Decays min(0.25, (1+n)/(10+n)): 0.1, 2/11, 0.25. Closed form of 3 updates from θ₀ = 0:
        // Σᵢ (1 − dᵢ)·Πⱼ₍ⱼ>ᵢ₎ dⱼ·θᵢ.
        let d = [0.1, 2.0 / 11.0, 0.25];
        let closed = (1.0 - d[0]) * d[1] * d[2] * 1.0 + (1.0 - d[1]) * d[2] * 2.0 + (1.0 - d[2]) * 3.0;
        average
            .swapped_in(|| {
                let (w_avg, s_avg) = (values(&w), values(&s));
                assert!((w_avg[0] - closed).abs() < 1e-6 && (w_avg[1] - 10.0 * closed).abs() < 1e-5);
                assert!((s_avg[0] + closed).abs() < 1e-6 && s_avg[1] == 0.0, "running statistics too");
                Ok(())
            })
            .unwrap();
        assert_eq!(values(&w), [3.0, 30.0], "the raw weights are back after the swap");
        assert_eq!(values(&s), [-3.0, 0.0]);
    }

    #[test]
    fn the_raw_weights_come_back_when_the_evaluation_fails() {
        let (vs, w, _) = store();
        let average = WeightAverage::new(&vs, EmaConfig { every_steps: 1, decay_per_step: 0.9 }).unwrap();
        set(&w, [4.0, 5.0]);
        let failed = average.swapped_in(|| {
            assert_eq!(values(&w), [0.0, 0.0], "the average is in");
            Err::<(), _>(Error::Invalid("held-out set missing".to_owned()))
        });
        assert!(failed.is_err());
        assert_eq!(values(&w), [4.0, 5.0]);
        let refused = WeightAverage::new(&vs, EmaConfig { every_steps: 0, decay_per_step: 0.9 });
        assert!(refused.unwrap_err().to_string().contains("at least 1 step per update"));
    }
}
