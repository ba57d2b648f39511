//! Learning-rate schedules.

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

#[cfg(test)]
mod tests {
    use super::*;

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
}
