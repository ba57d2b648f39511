//! The held-out quality metrics a time-to-target cell records by name (`test_accuracy`,
//! `validation_loss`): which way is better, when a value reaches a target, and how a value reads.
//! Results store only the name, so files written before the GPT existed read unchanged.

/// Whether a lower value of `metric` is better (losses), rather than a higher one (accuracies).
pub fn lower_is_better(metric: &str) -> bool {
    metric.ends_with("loss")
}

/// Whether `value` of `metric` has reached `target`: at or above it for an accuracy, at or below
/// it for a loss.
pub fn reaches(metric: &str, value: f64, target: f64) -> bool {
    if lower_is_better(metric) {
        value <= target
    } else {
        value >= target
    }
}

/// The better of two values of `metric`.
pub fn better(metric: &str, a: f64, b: f64) -> f64 {
    if lower_is_better(metric) {
        a.min(b)
    } else {
        a.max(b)
    }
}

/// The worst possible value of `metric`, where a search for the best starts.
pub fn worst(metric: &str) -> f64 {
    if lower_is_better(metric) {
        f64::INFINITY
    } else {
        f64::NEG_INFINITY
    }
}

/// Whether `metric` is a fraction shown as a percentage.
pub fn is_fraction(metric: &str) -> bool {
    metric.contains("accuracy")
}

/// A value of `metric` as a reader wants it: "61.2%" for an accuracy, "1.873" for a loss.
pub fn value_text(metric: &str, value: f64) -> String {
    if is_fraction(metric) {
        format!("{:.1}%", value * 100.0)
    } else {
        format!("{value:.3}")
    }
}

/// The metric's name in words: "test accuracy", "validation loss".
pub fn metric_words(metric: &str) -> String {
    metric.replace('_', " ")
}

/// The target as a condition: "test accuracy ≥ 60.0%", "validation loss ≤ 2.000".
pub fn target_text(metric: &str, target: f64) -> String {
    let relation = if lower_is_better(metric) { "≤" } else { "≥" };
    format!("{} {relation} {}", metric_words(metric), value_text(metric, target))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accuracy_is_reached_from_below_and_loss_from_above() {
        assert!(reaches("test_accuracy", 0.61, 0.60) && !reaches("test_accuracy", 0.59, 0.60));
        assert!(reaches("validation_loss", 1.46, 1.47) && !reaches("validation_loss", 1.48, 1.47));
        assert_eq!(better("test_accuracy", 0.5, 0.6), 0.6);
        assert_eq!(better("validation_loss", 1.5, 1.6), 1.5);
        assert_eq!(better("validation_loss", worst("validation_loss"), 2.0), 2.0);
        assert_eq!(better("test_accuracy", worst("test_accuracy"), 0.1), 0.1);
    }

    #[test]
    fn targets_read_as_conditions() {
        assert_eq!(target_text("test_accuracy", 0.6), "test accuracy ≥ 60.0%");
        assert_eq!(target_text("validation_loss", 1.47), "validation loss ≤ 1.470");
    }
}
