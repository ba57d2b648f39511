//! The held-out quality metrics a time-to-target cell records (`test_accuracy`,
//! `validation_loss`): which way is better, when a value reaches a target, and how a value reads.

use serde::{Deserialize, Serialize};

/// A held-out quality metric and which way is better.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum QualityMetric {
    /// Fraction of test images classified correctly, in [0, 1] (higher is better).
    TestAccuracy,
    /// Mean cross-entropy per token on the validation split, nats (lower is better).
    ValidationLoss,
}

impl QualityMetric {
    /// The name recorded in results.
    pub fn id(self) -> &'static str {
        match self {
            QualityMetric::TestAccuracy => "test_accuracy",
            QualityMetric::ValidationLoss => "validation_loss",
        }
    }

    /// Whether a lower value is better (a loss), rather than a higher one (an accuracy).
    pub fn lower_is_better(self) -> bool {
        self == QualityMetric::ValidationLoss
    }

    /// Whether `value` has reached `target`: at or above it for an accuracy, at or below it for
    /// a loss.
    pub fn reaches(self, value: f64, target: f64) -> bool {
        if self.lower_is_better() {
            value <= target
        } else {
            value >= target
        }
    }

    /// The better of two values.
    pub fn better(self, a: f64, b: f64) -> f64 {
        if self.lower_is_better() {
            a.min(b)
        } else {
            a.max(b)
        }
    }

    /// The worst possible value, where a search for the best starts.
    pub fn worst(self) -> f64 {
        if self.lower_is_better() {
            f64::INFINITY
        } else {
            f64::NEG_INFINITY
        }
    }

    /// Whether values are fractions, shown as percentages.
    pub fn is_fraction(self) -> bool {
        self == QualityMetric::TestAccuracy
    }

    /// A value as a reader wants it: "61.2%" for an accuracy, "1.873" for a loss.
    pub fn value_text(self, value: f64) -> String {
        if self.is_fraction() {
            format!("{:.1}%", value * 100.0)
        } else {
            format!("{value:.3}")
        }
    }

    /// The metric's name in words: "test accuracy", "validation loss".
    pub fn words(self) -> &'static str {
        match self {
            QualityMetric::TestAccuracy => "test accuracy",
            QualityMetric::ValidationLoss => "validation loss",
        }
    }

    /// The target as a condition: "test accuracy ≥ 60.0%", "validation loss ≤ 2.000".
    pub fn target_text(self, target: f64) -> String {
        let relation = if self.lower_is_better() { "≤" } else { "≥" };
        format!("{} {relation} {}", self.words(), self.value_text(target))
    }
}

impl std::fmt::Display for QualityMetric {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.id())
    }
}

#[cfg(test)]
mod tests {
    use super::QualityMetric::{TestAccuracy, ValidationLoss};

    #[test]
    fn accuracy_is_reached_from_below_and_loss_from_above() {
        assert!(TestAccuracy.reaches(0.61, 0.60) && !TestAccuracy.reaches(0.59, 0.60));
        assert!(ValidationLoss.reaches(1.46, 1.47) && !ValidationLoss.reaches(1.48, 1.47));
        assert_eq!(TestAccuracy.better(0.5, 0.6), 0.6);
        assert_eq!(ValidationLoss.better(1.5, 1.6), 1.5);
        assert_eq!(ValidationLoss.better(ValidationLoss.worst(), 2.0), 2.0);
        assert_eq!(TestAccuracy.better(TestAccuracy.worst(), 0.1), 0.1);
    }

    #[test]
    fn targets_read_as_conditions() {
        assert_eq!(TestAccuracy.target_text(0.6), "test accuracy ≥ 60.0%");
        assert_eq!(ValidationLoss.target_text(1.47), "validation loss ≤ 1.470");
    }

    #[test]
    fn serde_names_are_the_recorded_ids() {
        for m in [TestAccuracy, ValidationLoss] {
            let json = serde_json::to_string(&m).unwrap();
            assert_eq!(json, format!("\"{}\"", m.id()));
            assert_eq!(serde_json::from_str::<super::QualityMetric>(&json).unwrap(), m);
        }
    }
}
