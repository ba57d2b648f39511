//! Training metrics (loss, accuracy) and how often they cross to the host: every step (the
//! `.item()` habit, a device synchronisation each time) or once per log interval (`avoid-sync`).

use tch::{Kind, Tensor};

/// Running loss and accuracy of training steps.
#[derive(Debug)]
pub struct MetricsLog {
    read_every_step: bool,
    log_interval_steps: usize,
    loss_sum: Option<Tensor>,
    correct_sum: Option<Tensor>,
    host_loss_sum: f64,
    host_correct: i64,
    samples: usize,
    steps_pending: usize,
    host_reads: u64,
    last_mean_loss: Option<f64>,
    last_accuracy: Option<f64>,
}

impl MetricsLog {
    /// A log that reads metrics to the host every step (`read_every_step`) or accumulates them on
    /// the device and reads them once every `log_interval_steps`.
    pub fn new(read_every_step: bool, log_interval_steps: usize) -> Self {
        Self {
            read_every_step,
            log_interval_steps: log_interval_steps.max(1),
            loss_sum: None,
            correct_sum: None,
            host_loss_sum: 0.0,
            host_correct: 0,
            samples: 0,
            steps_pending: 0,
            host_reads: 0,
            last_mean_loss: None,
            last_accuracy: None,
        }
    }

    /// Records one step's mean loss and number of correct predictions over `samples` samples.
    pub fn record(&mut self, loss: &Tensor, correct: &Tensor, samples: usize) {
        let batch_loss = loss.detach().to_kind(Kind::Float) * samples as f64;
        if self.read_every_step {
            self.host_loss_sum += batch_loss.double_value(&[]);
            self.host_correct += correct.int64_value(&[]);
            self.host_reads += 2;
        } else {
            let add = |sum: &mut Option<Tensor>, t: Tensor| {
                *sum = Some(match sum.take() {
                    Some(s) => s + t,
                    None => t,
                });
            };
            add(&mut self.loss_sum, batch_loss);
            add(&mut self.correct_sum, correct.to_kind(Kind::Float));
        }
        self.samples += samples;
        self.steps_pending += 1;
        if self.steps_pending >= self.log_interval_steps {
            self.flush();
        }
    }

    /// Reads what has accumulated and starts a new interval (one host read on the device path).
    pub fn flush(&mut self) {
        if self.samples == 0 {
            return;
        }
        if let (Some(loss), Some(correct)) = (self.loss_sum.take(), self.correct_sum.take()) {
            let both = Vec::<f64>::try_from(&Tensor::stack(&[loss, correct], 0).to_kind(Kind::Double))
                .expect("a 2-element double tensor converts to Vec<f64>");
            self.host_loss_sum += both[0];
            self.host_correct += both[1].round() as i64;
            self.host_reads += 1;
        }
        self.last_mean_loss = Some(self.host_loss_sum / self.samples as f64);
        self.last_accuracy = Some(self.host_correct as f64 / self.samples as f64);
        self.host_loss_sum = 0.0;
        self.host_correct = 0;
        self.samples = 0;
        self.steps_pending = 0;
    }

    /// Host reads of metrics so far.
    pub fn host_reads(&self) -> u64 {
        self.host_reads
    }

    /// Mean training loss of the last completed interval.
    pub fn last_mean_loss(&self) -> Option<f64> {
        self.last_mean_loss
    }

    /// Training accuracy of the last completed interval.
    pub fn last_accuracy(&self) -> Option<f64> {
        self.last_accuracy
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(read_every_step: bool) -> MetricsLog {
        let mut log = MetricsLog::new(read_every_step, 5);
        for step in 0..10 {
            let loss = Tensor::from(step as f32);
            let correct = Tensor::from(2i64);
            log.record(&loss, &correct, 4);
        }
        log
    }

    #[test]
    fn device_accumulation_reads_once_per_interval_with_the_same_numbers() {
        let per_step = run(true);
        let accumulated = run(false);
        assert_eq!(per_step.host_reads(), 20, "two .item() calls per step");
        assert_eq!(accumulated.host_reads(), 2, "one read per 5-step interval");
        // Steps 5..9 have losses 5..9: mean 7; 2 of 4 correct each step.
        for log in [&per_step, &accumulated] {
            assert_eq!(log.last_mean_loss(), Some(7.0));
            assert_eq!(log.last_accuracy(), Some(0.5));
        }
    }
}
