//! The speedrun's headline: per workload, the baseline's and the combination's median time to the
//! target, the ratio and how many seeds reached it; the tricks combined and the ones refused, with
//! their reasons. Shown first in the HTML and the Markdown, and printed at the end of a run.

use serde::Serialize;

use crate::analysis::time_to_target_verdict;
use crate::report::model::{engine_words, Group, Report};
use crate::report::FigureFile;
use crate::results::schema::{
    time_ratio_text, CellKind, Results, SpeedrunChoice, SpeedrunDecision, SpeedrunTrick, TtaSummary, Verdict,
};
use crate::tricks::{Metric, TrickSet};

/// The rule that decided which tricks went in, in words (the report states it under the headline).
pub(crate) const RULE: &str =
    "A trick goes in when its measured effect was significant: a training-throughput \
     trick when its speed-up's confidence interval lies above 1 and beyond the A/A noise floor; a \
     time-to-accuracy trick when every seed reached the target sooner than every seed of the baseline \
     at the same batch by more than the A/A noise floor, and in fewer epochs (a baseline seed that \
     never reached it counting as infinitely slow), which with one seed a side is: reached it where \
     the baseline did not, or in fewer epochs and sooner by more than the noise floor. Memory and evaluation tricks, tricks judged against their own \
     reference and tricks trained at another batch size are left out. Tricks are added largest effect \
     first; one that cannot run with those added before it is refused.";

/// One workload's speedrun as the report shows it.
#[derive(Debug, Serialize)]
pub(crate) struct SpeedrunView {
    /// Anchor and figure slug stem.
    slug: String,
    /// Workload, device and profile.
    group: String,
    /// "resnet8 to test accuracy ≥ 60.0%: 95.1 s → 40.2 s (2.37× sooner), 2/2 seeds each".
    headline: String,
    /// The combination against the quickest of its tricks trained alone, when one of them was.
    versus_best_single: Option<String>,
    /// The tricks combined, in the order added, each with its measured effect.
    combination: Vec<(String, String)>,
    /// The tricks refused, each with the reason.
    refused: Vec<(String, String)>,
    /// The other tricks measured: id, decision and reason.
    others: Vec<(String, String)>,
    /// Where the effects were measured.
    evidence: String,
    /// The noise floor the time-to-target effects had to exceed.
    noise_floor: String,
    /// The curves of the baseline and the combination, when they were measured.
    figure: Option<FigureFile>,
}

/// What a run prints at its end about every workload's speedrun in `results` (nothing for other
/// designs): the headline, the tricks combined and the ones refused with their reasons, a line
/// each.
pub fn headlines(results: &Results) -> Vec<String> {
    let mut lines = Vec::new();
    for choice in &results.speedrun {
        lines.push(format!("speedrun: {}", headline(results, choice)));
        lines.extend(versus_best_single(results, choice).map(|text| format!("  {text}")));
        let added: Vec<&str> = choice.combination.iter().map(|t| t.id()).collect();
        if !added.is_empty() {
            lines.push(format!("  combined, in the order added: {}", added.join(", ")));
        }
        for t in choice.tricks.iter().filter(|t| t.decision == SpeedrunDecision::Refused) {
            lines.push(format!("  refused {}: {}", t.trick, t.reason.as_deref().unwrap_or_default()));
        }
    }
    lines
}

/// The time-to-accuracy summary of `tricks` at the choice's workload, engine and batch size.
fn summary<'r>(results: &'r Results, choice: &SpeedrunChoice, tricks: &TrickSet) -> Option<&'r TtaSummary> {
    results.time_to_accuracy.iter().find(|s| {
        s.workload == choice.workload
            && s.engine == choice.engine
            && s.tricks == *tricks
            && s.reference_for.is_none()
            && s.batch_size == choice.batch_size
    })
}

/// The workload of `choice`, with its engine where the run trained on several: "resnet8 in
/// PyTorch".
fn trained(results: &Results, choice: &SpeedrunChoice) -> String {
    if several_engines(results) {
        format!("{} {}", choice.workload, engine_words(choice.engine))
    } else {
        choice.workload.to_string()
    }
}

/// "resnet8 to test accuracy ≥ 60.0%: 95.1 s → 40.2 s (2.37× sooner); reached by 2/2 baseline and
/// 2/2 combination seeds", or what did not happen; the combination's compile time where it was
/// compiled.
pub(crate) fn headline(results: &Results, choice: &SpeedrunChoice) -> String {
    let combination: TrickSet = choice.combination.iter().copied().collect();
    let baseline = summary(results, choice, &TrickSet::baseline());
    let combined = summary(results, choice, &combination).filter(|_| !combination.is_baseline());
    let Some(base) = baseline else {
        return format!(
            "{}: no seed of the baseline finished training{}",
            trained(results, choice),
            failed(results, choice)
        );
    };
    let goal = format!("{} to {}", trained(results, choice), base.metric.target_text(base.target));
    let time = |s: &TtaSummary| {
        s.median_time_to_target_s.map_or_else(
            || format!("not reached (best {})", s.metric.value_text(s.median_best_metric)),
            |t| format!("{t:.1} s"),
        )
    };
    let seeds = |s: &TtaSummary| format!("{}/{}", s.reached, s.seeds);
    if combination.is_baseline() {
        return format!(
            "{goal}: no trick helped significantly, so there is nothing to combine; baseline {}, {} seeds \
             reached it",
            time(base),
            seeds(base)
        );
    }
    let Some(comb) = combined else {
        let why = failed(results, choice);
        return format!("{goal}: baseline {}; no seed of the combination finished training{why}", time(base));
    };
    let ratio = match (base.median_time_to_target_s, comb.median_time_to_target_s) {
        (Some(b), Some(c)) => format!(" ({:.2}×)", b / c),
        (None, Some(_)) => " (only the combination reached it)".to_owned(),
        (Some(_), None) => " (the combination did not reach it)".to_owned(),
        (None, None) => " (neither reached it)".to_owned(),
    };
    format!(
        "{goal}: {} → {}{ratio}; seeds that reached it: baseline {}, combination {}{}",
        time(base),
        time(comb),
        seeds(base),
        seeds(comb),
        compiled(results, comb)
    )
}

/// "; torch.compile took 41.2 s of the combination's training time (median over seeds), counted
/// in its time to the target" where the configuration `s` compiled, else nothing.
fn compiled(results: &Results, s: &TtaSummary) -> String {
    let seconds: Vec<f64> = results
        .cells
        .iter()
        .filter(|c| s.cells.contains(&c.id()))
        .filter_map(|c| c.time_to_accuracy.as_ref()?.compile_s)
        .collect();
    match crate::stats::median(&seconds) {
        Some(median) => format!(
            "; torch.compile took {median:.1} s of the combination's training time (median over seeds), \
             counted in its time to the target"
        ),
        None => String::new(),
    }
}

/// The quickest time-to-accuracy trick of the combination trained alone at its batch size (the
/// smallest median time to the target), when one reached it.
pub(crate) fn best_single<'r>(results: &'r Results, choice: &SpeedrunChoice) -> Option<&'r TtaSummary> {
    let time = |s: &TtaSummary| s.median_time_to_target_s.unwrap_or(f64::INFINITY);
    choice
        .combination
        .iter()
        .filter(|t| t.metric() == Metric::TimeToAccuracy)
        .filter_map(|&t| summary(results, choice, &TrickSet::only(t)))
        .filter(|s| s.median_time_to_target_s.is_some())
        .min_by(|a, b| time(a).total_cmp(&time(b)))
}

/// The combination against the quickest of its tricks trained alone ([`best_single`]): whether
/// the tricks added to it bought time beyond it, by the rule the tricks went in by
/// ([`time_to_target_verdict`] with the choice's noise floor). `None` when the combination holds
/// no such trick or did not finish.
pub(crate) fn versus_best_single(results: &Results, choice: &SpeedrunChoice) -> Option<String> {
    let best = best_single(results, choice)?;
    let combination: TrickSet = choice.combination.iter().copied().collect();
    let combined = summary(results, choice, &combination).filter(|_| combination.len() > 1)?;
    let alone = format!(
        "{} alone reached it in {:.1} s",
        best.configuration,
        best.median_time_to_target_s.unwrap_or(f64::NAN)
    );
    let floor = choice.noise_floor_half_width.unwrap_or(0.0);
    let ratio = match (best.median_time_to_target_s, combined.median_time_to_target_s) {
        (Some(b), Some(c)) => time_ratio_text(b / c),
        _ => "the combination did not reach it".to_owned(),
    };
    Some(match time_to_target_verdict(&results.cells, combined, best, floor) {
        Verdict::Faster => {
            format!("{alone}; the combination is {ratio} than that: the other tricks added to it")
        }
        Verdict::Slower => format!(
            "{alone}, and the combination is {ratio} than that: combined, the tricks do not add up here \
             (train {} alone, or fewer together)",
            best.configuration
        ),
        _ => format!(
            "{alone}; the combination ({ratio} than that) is not significantly sooner: the other tricks \
             added nothing measurable to it"
        ),
    })
}

/// " (N failed, timed out or ran out of memory: see the problems)" where some of the choice's
/// time-to-accuracy cells did not measure, else " yet".
fn failed(results: &Results, choice: &SpeedrunChoice) -> String {
    let failed = results
        .cells
        .iter()
        .filter(|c| {
            c.key.workload == choice.workload
                && c.key.engine == choice.engine
                && c.key.kind == CellKind::TimeToAccuracy
                && c.failed()
        })
        .count();
    match failed {
        0 => " yet".to_owned(),
        n => {
            format!(" ({n} time-to-accuracy cells failed, timed out or ran out of memory: see the problems)")
        }
    }
}

/// Every speedrun of the report, one per group and engine that has one, with its curves figure
/// from `figures`.
pub(crate) fn views(report: &Report, figures: &[FigureFile]) -> Vec<SpeedrunView> {
    let mut views = Vec::new();
    for g in &report.groups {
        let Some(first) = g.entries.first() else { continue };
        let r = &report.results[first.file];
        for choice in r.speedrun.iter().filter(|c| c.workload == g.workload) {
            views.push(view(g, r, choice, figures));
        }
    }
    views
}

/// The speedrun of `choice` in group `g` of results `r`.
fn view(g: &Group, r: &Results, choice: &SpeedrunChoice, figures: &[FigureFile]) -> SpeedrunView {
    let with = |decision: SpeedrunDecision| choice.tricks.iter().filter(move |t| t.decision == decision);
    let reason = |t: &SpeedrunTrick| t.reason.clone().unwrap_or_default();
    let png = format!("plots/{}.png", speedrun_slug(g, r, choice));
    SpeedrunView {
        headline: headline(r, choice),
        versus_best_single: versus_best_single(r, choice),
        combination: with(SpeedrunDecision::Added).map(|t| (t.trick.to_string(), t.effect.clone())).collect(),
        refused: with(SpeedrunDecision::Refused).map(|t| (t.trick.to_string(), reason(t))).collect(),
        others: with(SpeedrunDecision::NotSignificant)
            .chain(with(SpeedrunDecision::LeftOut))
            .map(|t| (t.trick.to_string(), format!("{}: {}", reason(t), t.effect)))
            .collect(),
        evidence: choice.evidence.join(", "),
        noise_floor: choice.noise_floor_half_width.map_or_else(
            || "no A/A control was measured, so any margin counted".to_owned(),
            |h| format!("±{:.1}%", h * 100.0),
        ),
        figure: figures.iter().find(|f| f.png == png).cloned(),
        slug: speedrun_slug(g, r, choice),
        group: if several_engines(r) {
            format!("{} · {}", g.title(), engine_words(choice.engine))
        } else {
            g.title()
        },
    }
}

/// The slug of the speedrun figure of `choice` in group `g` of results `r`: `speedrun-GROUP`, with
/// the engine's id where the run made a speedrun on several.
pub(crate) fn speedrun_slug(g: &Group, r: &Results, choice: &SpeedrunChoice) -> String {
    if several_engines(r) {
        format!("speedrun-{}-{}", g.slug(), choice.engine.id())
    } else {
        format!("speedrun-{}", g.slug())
    }
}

/// Whether `r` made speedruns on more than one engine.
fn several_engines(r: &Results) -> bool {
    r.speedrun.iter().any(|c| c.engine != r.speedrun[0].engine)
}
