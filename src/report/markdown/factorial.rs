//! `summary.md`'s answer of a factorial design, a section per workload: which tricks combine and
//! which cancel in sentences, each trick's main effect per engine, the matrix of the pairs'
//! interactions, and the tricks left out of the design.

use std::fmt::Write;

use crate::engine::Engine;
use crate::factorial::fraction::letter;
use crate::factorial::words;
use crate::report::html::markdown_cell;
use crate::report::model::engine_words;
use crate::results::factorial::{InteractionVerdict, RatioEstimate};
use crate::results::schema::Results;
use crate::summary::factorial::{workloads, FactorialWorkload, MainRow, Pair};

/// The sections of every factorial design of `results`, each opening with its `## ` heading;
/// empty where no run is of that design.
pub(super) fn sections(results: &[Results]) -> String {
    results.iter().flat_map(workloads).map(|w| section(&w)).collect()
}

/// The section of one workload's design.
fn section(design: &FactorialWorkload) -> String {
    let mut out = format!("## Which tricks combine and which cancel — {}\n\n", design.name);
    for (engine, line) in design.design_lines() {
        let on = engine.map_or_else(String::new, |e| format!(" ({})", engine_words(e)));
        let _ = writeln!(out, "{line}{on}.\n");
    }
    for sentence in sentences(design) {
        let _ = writeln!(out, "- {sentence}");
    }
    out.push_str(&main_effects(design));
    out.push_str(&matrix(design));
    let left_out = design.left_out();
    if !left_out.is_empty() {
        out.push_str("\nLeft out of the design, each measured alone where it applies:\n\n");
        for (reason, tricks) in left_out {
            let tricks: Vec<&str> = tricks.iter().map(|t| t.id()).collect();
            let _ = writeln!(out, "- {reason}: {}", tricks.join(", "));
        }
    }
    out.push('\n');
    out
}

/// "In PyTorch: " before an engine's sentence where the design ran on two, else nothing.
fn whose(design: &FactorialWorkload, engine: Engine) -> String {
    if !design.two_engines() {
        return String::new();
    }
    let words = engine_words(engine);
    format!("{}{}: ", words[..1].to_uppercase(), &words[1..])
}

/// The design's sentences: each engine's on each pair that does not add up (the strongest
/// first, flagged where the engines disagree), or that every pair adds up; then each engine's
/// best configuration.
fn sentences(design: &FactorialWorkload) -> Vec<String> {
    let mut out: Vec<String> = design.all_additive().into_iter().collect();
    for pair in design.departing() {
        let disagree = if pair.disagree { " (**the engines disagree**)" } else { "" };
        out.extend(pair.estimates.iter().map(|(engine, i)| {
            format!("{}{}{disagree}", whose(design, *engine), words::interaction_sentence(i))
        }));
    }
    out.extend(design.best().into_iter().map(|(engine, s)| format!("{}{s}", whose(design, engine))));
    out
}

/// The table of the main effects: each trick with each engine's effect and interval, and the
/// verdict.
fn main_effects(design: &FactorialWorkload) -> String {
    let engines: Vec<String> =
        design.analyses.iter().map(|a| format!("Effect {}", engine_words(a.engine))).collect();
    let mut out = String::from("\nMain effects, each trick on ÷ off over the other tricks' settings:\n\n");
    let _ = writeln!(out, "| Trick | {} | Verdict |", engines.join(" | "));
    let _ = writeln!(out, "|---|{}---|", "---|".repeat(engines.len()));
    for row in design.main_rows() {
        let values: Vec<String> = row.values.iter().map(|v| markdown_cell(v)).collect();
        let _ = writeln!(
            out,
            "| {} | {} | {} |",
            markdown_cell(&row.name),
            values.join(" | "),
            verdict(design, &row)
        );
    }
    out
}

/// A main effect's verdict: one word where the engines agree, else each engine's.
fn verdict(design: &FactorialWorkload, row: &MainRow) -> String {
    let first = row.verdicts.first().map(|v| v.label()).unwrap_or_default();
    if row.verdicts.iter().all(|v| v.label() == first) {
        return first.to_owned();
    }
    let each = design.analyses.iter().zip(&row.verdicts);
    each.map(|(a, v)| format!("{} {}", v.label(), engine_words(a.engine))).collect::<Vec<_>>().join(", ")
}

/// The interactions as a matrix: a row per factor but the last, a column per factor but the
/// first, each pair above the diagonal with each engine's together ÷ predicted as a change.
fn matrix(design: &FactorialWorkload) -> String {
    let Some(factors) = design.analyses.first().map(|a| &a.factors) else { return String::new() };
    let pairs = design.pairs();
    if pairs.is_empty() {
        return String::new();
    }
    let (engines, disagree) = if design.two_engines() {
        (", in PyTorch / on libtorch", ", ! the engines disagree")
    } else {
        ("", "")
    };
    let mut out = format!(
        "\nInteractions, together ÷ what their own effects predict{engines} (▲ synergy, ▼ antagonism{disagree}):\n\n"
    );
    let letters: Vec<String> = (1..factors.len()).map(|j| letter(j).to_string()).collect();
    let _ = writeln!(out, "| | {} |", letters.join(" | "));
    let _ = writeln!(out, "|---|{}", "---|".repeat(letters.len()));
    for (i, a) in factors.iter().enumerate().take(factors.len() - 1) {
        let cells: Vec<String> = factors[1..]
            .iter()
            .map(|b| pairs.iter().find(|p| p.tricks == [*a, *b]).map_or_else(String::new, cell))
            .collect();
        let _ = writeln!(out, "| **{}** {a} | {} |", letter(i), cells.join(" | "));
    }
    out
}

/// One pair's cell: each engine's change with its marker, "!" where the engines disagree.
fn cell(pair: &Pair) -> String {
    let each: Vec<String> = pair.estimates.iter().map(|(_, i)| change(&i.throughput, i.verdict)).collect();
    let flag = if pair.disagree { " !" } else { "" };
    format!("{}{flag}", each.join(" / "))
}

/// "+5.1% ▲": together ÷ predicted as a change, marked where it is synergy or antagonism.
fn change(estimate: &RatioEstimate, verdict: InteractionVerdict) -> String {
    let marker = match verdict {
        InteractionVerdict::Synergy => " ▲",
        InteractionVerdict::Antagonism => " ▼",
        InteractionVerdict::Additive => "",
    };
    format!("{}{marker}", words::percent(estimate.ratio))
}
