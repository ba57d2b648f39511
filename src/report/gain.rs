//! A trick's effect on one engine as one number on one scale, for the first screen's figure and
//! the terminal: how many times better its own metric got, with its interval where measured.

use serde::Serialize;

use crate::engine::Engine;
use crate::report::model::Effect;
use crate::results::schema::{Comparison, TtaSummary};
use crate::tricks::Metric;

/// One engine's effect of a trick, read on the trick's own metric.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub(crate) struct Gain {
    /// The engine that measured it.
    pub engine: Engine,
    /// That engine's verdict.
    pub effect: Effect,
    /// The metric the trick is judged by.
    pub metric: Metric,
    /// The effect as the metric reads it: the speed-up (× throughput) for throughput, the trick's
    /// peak memory ÷ its reference's for memory, the reference's time to the target ÷ the trick's
    /// for time to accuracy.
    pub ratio: f64,
    /// The 95% interval of `ratio`, where the design gives one (throughput, and memory in a
    /// factorial design).
    pub interval: Option<(f64, f64)>,
    /// The most the trick could have given on this engine, × throughput (its ceiling), where
    /// known and the metric is throughput.
    pub ceiling: Option<f64>,
}

impl Gain {
    /// The effect of a throughput or memory comparison on `metric`; `None` where the comparison
    /// has no value for it (a memory trick whose peaks were not both recorded).
    pub(crate) fn of_comparison(
        engine: Engine,
        effect: Effect,
        metric: Metric,
        c: &Comparison,
    ) -> Option<Gain> {
        let (ratio, interval) = match metric {
            Metric::Memory => (c.memory_ratio?, None),
            _ => (c.speedup, Some((c.speedup_ci_low, c.speedup_ci_high))),
        };
        let ceiling = match metric {
            Metric::Throughput | Metric::EvalThroughput => {
                c.diagnosis.as_ref().and_then(|d| d.ceiling).map(|c| c.speedup).filter(|s| s.is_finite())
            }
            Metric::Memory | Metric::TimeToAccuracy => None,
        };
        Some(Gain { engine, effect, metric, ratio, interval, ceiling })
            .filter(|g| g.ratio > 0.0 && g.ratio.is_finite())
    }

    /// The effect of a configuration trained to the target: its reference's median time ÷ its
    /// own; `None` where either median is missing.
    pub(crate) fn of_time_to_accuracy(engine: Engine, effect: Effect, summary: &TtaSummary) -> Option<Gain> {
        let ratio = summary.speedup.filter(|s| *s > 0.0 && s.is_finite())?;
        Some(Gain { engine, effect, metric: Metric::TimeToAccuracy, ratio, interval: None, ceiling: None })
    }

    /// How many times better the metric got (>1: better): `ratio`, inverted for memory, where
    /// less is better. The figure's axis.
    pub(crate) fn factor(&self) -> f64 {
        if self.metric == Metric::Memory {
            1.0 / self.ratio
        } else {
            self.ratio
        }
    }

    /// The interval of [`Gain::factor`], where measured (inverted with it for memory).
    pub(crate) fn factor_interval(&self) -> Option<(f64, f64)> {
        let (low, high) = self.interval?;
        Some(if self.metric == Metric::Memory { (1.0 / high, 1.0 / low) } else { (low, high) })
    }

    /// The effect in the metric's own words, short: "1.09× [1.07, 1.12]", "0.77× memory",
    /// "1.70× sooner" (to the target), "1.30× slower".
    pub(crate) fn text(&self) -> String {
        match (self.metric, self.interval) {
            (Metric::Memory, Some((low, high))) => format!("{:.2}× memory [{low:.2}, {high:.2}]", self.ratio),
            (Metric::Memory, None) => format!("{:.2}× memory", self.ratio),
            (Metric::TimeToAccuracy, _) if self.ratio >= 1.0 => format!("{:.2}× sooner", self.ratio),
            (Metric::TimeToAccuracy, _) => format!("{:.2}× slower", 1.0 / self.ratio),
            (_, Some((low, high))) => format!("{:.2}× [{low:.2}, {high:.2}]", self.ratio),
            (_, None) => format!("{:.2}×", self.ratio),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::results::schema::{CellId, MeasurementDesign, Verdict};

    fn id(text: &str) -> CellId {
        serde_json::from_value(serde_json::Value::from(text)).expect("an id is a string")
    }

    fn comparison(speedup: f64, memory_ratio: Option<f64>) -> Comparison {
        Comparison {
            cell: id("resnet8/channels-last/b128/s0/train"),
            baseline: id("resnet8/baseline/b128/s0/train"),
            speedup,
            speedup_ci_low: speedup - 0.02,
            speedup_ci_high: speedup + 0.02,
            verdict: Verdict::Faster,
            memory_ratio,
            design: MeasurementDesign::Paired,
            diagnosis: None,
        }
    }

    #[test]
    fn less_memory_is_a_gain_above_one() {
        let c = comparison(0.88, Some(0.8));
        let g = Gain::of_comparison(Engine::Pytorch, Effect::Helps, Metric::Memory, &c).unwrap();
        assert!((g.factor() - 1.25).abs() < 1e-12);
        assert_eq!(g.factor_interval(), None);
        assert_eq!(g.text(), "0.80× memory");
    }

    #[test]
    fn a_memory_interval_turns_over_with_its_factor() {
        let (effect, metric) = (Effect::Helps, Metric::Memory);
        let g = Gain {
            engine: Engine::Pytorch,
            effect,
            metric,
            ratio: 0.8,
            interval: Some((0.5, 0.8)),
            ceiling: None,
        };
        assert_eq!(g.factor_interval(), Some((1.25, 2.0)));
        assert_eq!(g.text(), "0.80× memory [0.50, 0.80]");
    }

    #[test]
    fn a_speed_up_keeps_its_interval() {
        let c = comparison(1.09, None);
        let g = Gain::of_comparison(Engine::Libtorch, Effect::Helps, Metric::Throughput, &c).unwrap();
        assert_eq!(g.factor(), 1.09);
        assert_eq!(g.text(), "1.09× [1.07, 1.11]");
        assert!(Gain::of_comparison(Engine::Libtorch, Effect::Helps, Metric::Memory, &c).is_none());
    }
}
