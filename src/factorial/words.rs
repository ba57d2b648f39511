//! The factorial design's answer in words, shared by the report, the summary and the terminal:
//! a sentence per interaction that is not additive, the best configuration predicted against
//! measured, and whether two engines disagree on an interaction.

use crate::results::factorial::{
    BestConfiguration, FactorialAnalysis, Interaction, InteractionVerdict, RatioEstimate,
};

/// A ratio as a percentage change: "+4.1%", "−8.0%".
pub fn percent(ratio: f64) -> String {
    let change = (ratio - 1.0) * 100.0;
    if change < 0.0 {
        format!("−{:.1}%", -change)
    } else {
        format!("+{change:.1}%")
    }
}

/// An estimate with its interval: "0.97× [0.94, 1.00]".
pub fn ratio_text(estimate: &RatioEstimate) -> String {
    format!("{:.2}× [{:.2}, {:.2}]", estimate.ratio, estimate.ci_low, estimate.ci_high)
}

/// The design in a line, for the workload called `name`: "resnet8: 7 tricks in 64 configurations,
/// resolution VII (G = −ABCDEF), 2 processes"; "full factorial" in place of a resolution.
pub fn design_sentence(analysis: &FactorialAnalysis, name: &str) -> String {
    let fraction = match analysis.resolution {
        Some(r) => {
            format!("resolution {} ({})", super::roman(r), analysis.generators.join(", "))
        }
        None => "full factorial".to_owned(),
    };
    let processes = if analysis.processes == 1 { "process" } else { "processes" };
    format!(
        "{name}: {} tricks in {} configurations, {fraction}, {} {processes}",
        analysis.factors.len(),
        analysis.configurations,
        analysis.processes
    )
}

/// One interaction in a sentence: "channels-last and jit-fusion cancel: together 0.97×, where
/// their own effects predict 1.04×".
pub fn interaction_sentence(interaction: &Interaction) -> String {
    let [a, b] = interaction.tricks;
    let how = match interaction.verdict {
        InteractionVerdict::Synergy => "combine",
        InteractionVerdict::Antagonism => "cancel",
        InteractionVerdict::Additive => "add up",
    };
    format!(
        "{a} and {b} {how}: together {:.2}×, where their own effects predict {:.2}× ({} [{}, {}])",
        interaction.together,
        interaction.predicted,
        percent(interaction.throughput.ratio),
        percent(interaction.throughput.ci_low),
        percent(interaction.throughput.ci_high)
    )
}

/// The sentences of `analysis`: each interaction that is not additive, strongest first, or that
/// every pair adds up within the floor; then the best configuration predicted against measured.
pub fn sentences(analysis: &FactorialAnalysis) -> Vec<String> {
    let mut departing: Vec<&Interaction> =
        analysis.interactions.iter().filter(|i| i.verdict != InteractionVerdict::Additive).collect();
    departing
        .sort_by(|x, y| x.throughput.ratio.ln().abs().total_cmp(&y.throughput.ratio.ln().abs()).reverse());
    let mut out: Vec<String> = departing.iter().map(|i| interaction_sentence(i)).collect();
    if departing.is_empty() {
        out.push(format!(
            "all {} pairs of the {} tricks add up within the noise floor: no interaction measured",
            analysis.interactions.len(),
            analysis.factors.len()
        ));
    }
    out.extend(best_sentence(analysis));
    out
}

/// The best configuration predicted against measured: "best predicted: channels-last +
/// fused-optimizer, 1.21× [1.15, 1.27]; measured 1.19× [1.14, 1.25]".
pub fn best_sentence(analysis: &FactorialAnalysis) -> Option<String> {
    let best = analysis.best.as_ref()?;
    if best.tricks.is_empty() {
        return Some(
            "best predicted: the baseline: no trick and no pair of tricks helps beyond the noise floor"
                .to_owned(),
        );
    }
    let tricks = best_tricks(best);
    let measured = match &best.measured {
        Some(m) => format!("measured {}", ratio_text(m)),
        None => "not measured".to_owned(),
    };
    let source = if best.in_design { "in the design" } else { "measured after the design" };
    Some(format!("best predicted: {tricks}, {}; {measured} ({source})", ratio_text(&best.predicted)))
}

/// The best configuration's tricks: "channels-last + fused-optimizer", or the baseline where none
/// is predicted to help.
pub fn best_tricks(best: &BestConfiguration) -> String {
    if best.tricks.is_empty() {
        "the baseline (no trick predicted to help)".to_owned()
    } else {
        best.tricks.iter().map(|t| t.id()).collect::<Vec<_>>().join(" + ")
    }
}

/// Whether two estimates' intervals overlap.
pub fn overlap(a: &RatioEstimate, b: &RatioEstimate) -> bool {
    a.ci_low <= b.ci_high && b.ci_low <= a.ci_high
}

/// Whether two engines' estimates of one interaction disagree: their verdicts differ and their
/// intervals do not overlap (as two engines' main effects are read).
pub fn engines_disagree(a: &Interaction, b: &Interaction) -> bool {
    a.verdict != b.verdict && !overlap(&a.throughput, &b.throughput)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tricks::Trick;

    fn interaction(ratio: f64, low: f64, high: f64, verdict: InteractionVerdict) -> Interaction {
        Interaction {
            tricks: [Trick::ChannelsLast, Trick::JitFusion],
            throughput: RatioEstimate { ratio, ci_low: low, ci_high: high },
            together: 0.97,
            predicted: 0.97 / ratio,
            verdict,
            memory: None,
            aliased_with: Vec::new(),
        }
    }

    #[test]
    fn an_antagonism_reads_as_cancelling_with_together_and_predicted() {
        let i = interaction(0.93, 0.90, 0.96, InteractionVerdict::Antagonism);
        assert_eq!(
            interaction_sentence(&i),
            "channels-last and jit-fusion cancel: together 0.97×, where their own effects predict 1.04× \
             (−7.0% [−10.0%, −4.0%])"
        );
    }

    #[test]
    fn a_design_reads_as_its_tricks_configurations_resolution_and_processes() {
        let mut analysis = FactorialAnalysis {
            workload: crate::workloads::WorkloadId::Resnet8,
            engine: crate::engine::Engine::Libtorch,
            factors: vec![Trick::ChannelsLast, Trick::JitFusion, Trick::ZeroCopy],
            configurations: 4,
            generators: vec!["C = −AB".to_owned()],
            defining_relation: vec!["I = −ABC".to_owned()],
            resolution: Some(3),
            processes: 2,
            noise_floor_half_width: None,
            main_effects: Vec::new(),
            interactions: Vec::new(),
            best: None,
            left_out: Vec::new(),
        };
        assert_eq!(
            design_sentence(&analysis, "resnet8"),
            "resnet8: 3 tricks in 4 configurations, resolution III (C = −AB), 2 processes"
        );
        (analysis.configurations, analysis.resolution, analysis.processes) = (8, None, 1);
        assert_eq!(
            design_sentence(&analysis, "mine"),
            "mine: 3 tricks in 8 configurations, full factorial, 1 process"
        );
    }

    #[test]
    fn engines_disagree_only_on_different_verdicts_with_apart_intervals() {
        let synergy = interaction(1.10, 1.05, 1.15, InteractionVerdict::Synergy);
        let additive_near = interaction(1.03, 0.99, 1.07, InteractionVerdict::Additive);
        let antagonism = interaction(0.90, 0.86, 0.94, InteractionVerdict::Antagonism);
        assert!(!engines_disagree(&synergy, &additive_near), "their intervals overlap");
        assert!(engines_disagree(&synergy, &antagonism));
        assert!(!engines_disagree(&antagonism, &antagonism));
    }
}
