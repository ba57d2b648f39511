//! The factorial design's answer per workload, read once for the terminal and `summary.md`: the
//! design in a line, each factor's main effect on each engine, the pairs that do not add up (and
//! where the engines disagree on one), the best configuration predicted against measured, and the
//! tricks left out with their reasons; and that answer fitted to the terminal.

use std::fmt::Write;

use super::glance::{engine_name, title};
use super::layout::{cause_lines, grouped, Layout};
use crate::engine::Engine;
use crate::factorial::fraction::letter;
use crate::factorial::words;
use crate::report::{by_cause, ratio_effect, throughput_effect, Effect, MEMORY_TOLERANCE};
use crate::results::factorial::{
    FactorialAnalysis, Interaction, InteractionVerdict, LeftOutTrick, MainEffect,
};
use crate::results::schema::{Results, Verdict};
use crate::terminal::{wrap, Terminal};
use crate::vocabulary::{Metric, Trick, WorkloadId};

/// One workload's factorial design: its analysis on each engine of the run.
pub(crate) struct FactorialWorkload<'a> {
    /// The workload's name.
    pub(crate) name: &'a str,
    /// Its analyses, one per engine, PyTorch's first.
    pub(crate) analyses: Vec<&'a FactorialAnalysis>,
}

/// A factor's main effect on each engine.
pub(crate) struct MainRow {
    /// The factor's letter and trick: "D channels-last".
    pub(crate) name: String,
    /// Each engine's effect in words, in the analyses' order ("—" where an engine did not vary
    /// the trick).
    pub(crate) values: Vec<String>,
    /// Each engine's verdict on it, in the same order.
    pub(crate) verdicts: Vec<Effect>,
}

impl MainRow {
    /// The group the row is printed in: the most decisive of its engines' verdicts.
    pub(crate) fn effect(&self) -> Effect {
        self.verdicts.iter().copied().min().unwrap_or(Effect::NotMeasured)
    }
}

/// A pair of factors and each engine's estimate of their interaction.
pub(crate) struct Pair<'a> {
    /// The two factors, in factor order.
    pub(crate) tricks: [Trick; 2],
    /// Each engine's estimate of the pair, in the analyses' order.
    pub(crate) estimates: Vec<(Engine, &'a Interaction)>,
    /// Whether two engines disagree on it ([`words::engines_disagree`]).
    pub(crate) disagree: bool,
}

/// The factorial designs of `results`, a workload each, in the order they were analysed; none for
/// a run of another design.
pub(crate) fn workloads(results: &Results) -> Vec<FactorialWorkload<'_>> {
    let mut ids: Vec<WorkloadId> = Vec::new();
    for a in &results.factorial {
        if !ids.contains(&a.workload) {
            ids.push(a.workload);
        }
    }
    ids.into_iter().map(|w| of_workload(results, w)).collect()
}

/// The factorial design of `workload` in `results` (no analyses where it has none).
fn of_workload(results: &Results, workload: WorkloadId) -> FactorialWorkload<'_> {
    let mut analyses: Vec<&FactorialAnalysis> =
        results.factorial.iter().filter(|a| a.workload == workload).collect();
    analyses.sort_by_key(|a| a.engine != Engine::Pytorch);
    FactorialWorkload { name: results.run.workload_name(workload), analyses }
}

impl FactorialWorkload<'_> {
    /// Whether the design ran on two engines, so that each line says whose it is.
    pub(crate) fn two_engines(&self) -> bool {
        self.analyses.len() > 1
    }

    /// The design in a line ([`words::design_sentence`]): once where every engine's is the same,
    /// else one per engine, with the engine.
    pub(crate) fn design_lines(&self) -> Vec<(Option<Engine>, String)> {
        let lines: Vec<(Engine, String)> =
            self.analyses.iter().map(|a| (a.engine, words::design_sentence(a, self.name))).collect();
        if lines.windows(2).all(|w| w[0].1 == w[1].1) {
            return lines.into_iter().take(1).map(|(_, line)| (None, line)).collect();
        }
        lines.into_iter().map(|(engine, line)| (Some(engine), line)).collect()
    }

    /// Each factor's main effect on each engine, in factor order.
    pub(crate) fn main_rows(&self) -> Vec<MainRow> {
        let Some(first) = self.analyses.first() else { return Vec::new() };
        let row = |(i, trick): (usize, &Trick)| {
            let effects: Vec<Option<&MainEffect>> =
                self.analyses.iter().map(|a| a.main_effects.iter().find(|m| m.trick == *trick)).collect();
            MainRow {
                name: format!("{} {trick}", letter(i)),
                values: effects.iter().map(|m| m.map_or_else(|| "—".to_owned(), main_text)).collect(),
                verdicts: effects.iter().map(|m| m.map_or(Effect::NotMeasured, main_effect)).collect(),
            }
        };
        first.factors.iter().enumerate().map(row).collect()
    }

    /// Every pair of factors with each engine's estimate of its interaction, in factor order
    /// (AB, AC, …, BC, …).
    pub(crate) fn pairs(&self) -> Vec<Pair<'_>> {
        let Some(first) = self.analyses.first() else { return Vec::new() };
        let pair = |i: &Interaction| {
            let estimates: Vec<(Engine, &Interaction)> = self
                .analyses
                .iter()
                .filter_map(|a| Some((a.engine, a.interactions.iter().find(|j| j.tricks == i.tricks)?)))
                .collect();
            let disagree = matches!(estimates.as_slice(), [(_, a), (_, b)] if words::engines_disagree(a, b));
            Pair { tricks: i.tricks, estimates, disagree }
        };
        first.interactions.iter().map(pair).collect()
    }

    /// The pairs whose interaction is not additive on some engine, the furthest from additive
    /// first.
    pub(crate) fn departing(&self) -> Vec<Pair<'_>> {
        let mut pairs: Vec<Pair> = self
            .pairs()
            .into_iter()
            .filter(|p| p.estimates.iter().any(|(_, i)| i.verdict != InteractionVerdict::Additive))
            .collect();
        pairs.sort_by(|x, y| strength(y).total_cmp(&strength(x)));
        pairs
    }

    /// Where every pair adds up on every engine, the sentence that says so (with "(both
    /// engines)" where there are two).
    pub(crate) fn all_additive(&self) -> Option<String> {
        if !self.departing().is_empty() {
            return None;
        }
        // The first of an analysis's sentences is this one where no pair departs.
        let sentence = words::sentences(self.analyses.first()?).into_iter().next()?;
        Some(if self.two_engines() { format!("{sentence} (both engines)") } else { sentence })
    }

    /// The best configuration on each engine predicted against measured, where estimated.
    pub(crate) fn best(&self) -> Vec<(Engine, String)> {
        self.analyses.iter().filter_map(|a| Some((a.engine, words::best_sentence(a)?))).collect()
    }

    /// The tricks left out of the design on any engine, by their reasons in short
    /// ([`short_reason`]), in the order first left out.
    pub(crate) fn left_out(&self) -> Vec<(String, Vec<Trick>)> {
        by_cause(self.analyses.iter().flat_map(|a| &a.left_out).map(|l| (short_reason(l), l.trick)))
    }
}

/// A main effect in words: "1.19× [1.10, 1.30]" on throughput, "0.71× memory [0.64, 0.78]" for a
/// trick judged by peak memory.
fn main_text(m: &MainEffect) -> String {
    match (m.metric, &m.memory) {
        (Metric::Memory, Some(e)) => format!("{:.2}× memory [{:.2}, {:.2}]", e.ratio, e.ci_low, e.ci_high),
        (Metric::Memory, None) => "memory not measured".to_owned(),
        _ => words::ratio_text(&m.throughput),
    }
}

/// A main effect's verdict, as a trick measured alone is judged: by its throughput interval, or
/// for a trick judged by peak memory by the memory it saves (a cost where it saves none and is
/// slower).
pub(crate) fn main_effect(m: &MainEffect) -> Effect {
    if m.metric != Metric::Memory {
        return throughput_effect(m.verdict);
    }
    match m.memory.map(|e| ratio_effect(1.0 / e.ratio, MEMORY_TOLERANCE)) {
        None => Effect::NotMeasured,
        Some(Effect::Unmeasurable) if m.verdict == Verdict::Slower => Effect::Hurts,
        Some(effect) => effect,
    }
}

/// How far a pair's furthest engine departs from additive (|log| of together ÷ predicted).
fn strength(p: &Pair) -> f64 {
    p.estimates.iter().map(|(_, i)| i.throughput.ratio.ln().abs()).fold(0.0, f64::max)
}

/// A left-out trick's reason in short, for grouping: without the engine and trick a
/// not-applicable reason opens with, without its parentheses, up to its first colon ("needs a
/// CUDA GPU", "measured one process per side, not among the design's arms").
fn short_reason(left: &LeftOutTrick) -> String {
    let own = format!(": {}: ", left.trick);
    let reason = left.reason.split_once(&own).map_or(left.reason.as_str(), |(_, rest)| rest);
    let mut outside = String::new();
    let mut depth = 0usize;
    for c in reason.chars() {
        match c {
            '(' => depth += 1,
            ')' => depth = depth.saturating_sub(1),
            _ if depth == 0 => outside.push(c),
            _ => {}
        }
    }
    let clause = outside.split(':').next().unwrap_or_default();
    clause.split_whitespace().collect::<Vec<_>>().join(" ").replace(" ,", ",")
}

/// The factorial answer of every workload of `results`, fitted to `terminal`: what `trickbench
/// report` prints; nothing for a run of another design.
pub fn factorial_summary(results: &Results, terminal: Terminal) -> String {
    workloads(results).iter().map(|w| answer(w, terminal.columns)).collect()
}

/// The factorial answer of `workload` in `results` in `columns` (nothing where it has none): the
/// design, the main effects grouped by verdict, the pairs that do not add up, the best
/// configuration and the tricks left out.
pub(super) fn workload_answer(results: &Results, workload: WorkloadId, columns: usize) -> String {
    let design = of_workload(results, workload);
    if design.analyses.is_empty() {
        return String::new();
    }
    answer(&design, columns)
}

/// The answer of `design` in `columns`.
fn answer(design: &FactorialWorkload, columns: usize) -> String {
    let mut out = String::from("\n");
    for (engine, line) in design.design_lines() {
        let on = engine.map_or_else(String::new, |e| format!(" {}", title(e)));
        let _ = writeln!(out, "{}", wrap(&format!("factorial design{on} · {line}"), columns, 2));
    }
    out.push_str(&main_effects(design, columns));
    out.push_str(&interactions(design, columns));
    let (best, two) = (design.best(), design.two_engines());
    if !best.is_empty() {
        out.push('\n');
    }
    for (engine, sentence) in best {
        let _ = writeln!(out, "{}", wrap(&format!("  {}{sentence}", whose(engine, two)), columns, 2));
    }
    let left_out = design.left_out();
    let count: usize = left_out.iter().map(|(_, tricks)| tricks.len()).sum();
    if count > 0 {
        let head = format!("  left out of the design ({count}), each measured alone where it applies");
        let _ = writeln!(out, "\n{}", wrap(&head, columns, 2));
        out.push_str(&cause_lines(&left_out, columns));
    }
    out
}

/// "PyTorch: " before an engine's line where the design ran on two, else nothing.
fn whose(engine: Engine, two: bool) -> String {
    if two {
        format!("{}: ", engine_name(engine))
    } else {
        String::new()
    }
}

/// The main effects grouped by verdict, each engine's in a column.
fn main_effects(design: &FactorialWorkload, columns: usize) -> String {
    let rows = design.main_rows();
    let cells: Vec<(String, Vec<String>)> = rows.iter().map(|r| (r.name.clone(), r.values.clone())).collect();
    let titles = design.analyses.iter().map(|a| title(a.engine)).collect();
    let layout = Layout::of(titles, &cells, columns);
    let head = "  main effects: each trick on ÷ off, over the other tricks' settings";
    let mut out = format!("\n{}\n", wrap(head, columns, 2));
    out.push_str(&grouped(&rows, &layout, MainRow::effect, |r| layout.row(&r.name, &r.values)));
    out
}

/// The pairs that do not add up, each engine's sentence on each and where the engines disagree;
/// or the line that says every pair adds up.
fn interactions(design: &FactorialWorkload, columns: usize) -> String {
    if let Some(sentence) = design.all_additive() {
        return format!("\n{}\n", wrap(&format!("  interactions: {sentence}"), columns, 2));
    }
    let two = design.two_engines();
    let mut out = String::from("\n  interactions that do not add up\n");
    for pair in design.departing() {
        for (engine, interaction) in &pair.estimates {
            let line = format!("    {}{}", whose(*engine, two), words::interaction_sentence(interaction));
            let _ = writeln!(out, "{}", wrap(&line, columns, 2));
        }
        if pair.disagree {
            let _ = writeln!(
                out,
                "{}",
                wrap("      ! the engines disagree: their intervals do not overlap", columns, 2)
            );
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::results::factorial::RatioEstimate;

    fn left(trick: Trick, reason: &str) -> LeftOutTrick {
        LeftOutTrick { trick, reason: reason.to_owned() }
    }

    #[test]
    fn a_reason_in_short_drops_the_engine_the_trick_parentheses_and_detail() {
        let amp =
            left(Trick::Amp, "not applicable on libtorch: amp: needs a CUDA GPU: fp16 autocast pays off");
        assert_eq!(short_reason(&amp), "needs a CUDA GPU");
        let workers = left(
            Trick::LoaderWorkers,
            "measured one process per side (its workers (threads) load the machine), not among the design's arms",
        );
        assert_eq!(short_reason(&workers), "measured one process per side, not among the design's arms");
        let full = left(Trick::JitFusion, "the design varies at most 7 tricks; choose them with --tricks");
        assert_eq!(short_reason(&full), "the design varies at most 7 tricks; choose them with --tricks");
    }

    #[test]
    fn a_memory_judged_factor_is_judged_by_the_memory_it_saves() {
        let estimate = |ratio: f64| RatioEstimate { ratio, ci_low: ratio - 0.02, ci_high: ratio + 0.02 };
        let effect = |memory: Option<f64>, verdict: Verdict| MainEffect {
            trick: Trick::Checkpointing,
            metric: Metric::Memory,
            throughput: estimate(0.8),
            verdict,
            memory: memory.map(estimate),
            aliased_with: Vec::new(),
        };
        assert_eq!(main_effect(&effect(Some(0.7), Verdict::Slower)), Effect::Helps);
        assert_eq!(main_effect(&effect(Some(1.0), Verdict::Slower)), Effect::Hurts);
        assert_eq!(main_effect(&effect(Some(1.0), Verdict::NoSignificantEffect)), Effect::Unmeasurable);
        assert_eq!(main_effect(&effect(None, Verdict::Faster)), Effect::NotMeasured);
        let throughput = MainEffect { metric: Metric::Throughput, ..effect(Some(0.7), Verdict::Slower) };
        assert_eq!(main_effect(&throughput), Effect::Hurts);
        assert_eq!(main_text(&effect(Some(0.7), Verdict::Slower)), "0.70× memory [0.68, 0.72]");
    }
}
