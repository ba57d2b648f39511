//! A cross-check in words: the terminal's table (within 100 columns) and `summary.md`.

use crate::crosscheck::results::{Agreement, CrosscheckResults, SourceEffect, TrickCheck};
use crate::stats::Estimate;
use crate::terminal::wrap;

/// The terminal's width the answer is wrapped to.
const COLUMNS: usize = 100;

/// The file the Markdown summary is written to, beside the results.
pub const SUMMARY_FILE: &str = "summary.md";

/// The terminal's answer: one line per trick, each source's effect and whether they agree, then
/// the disagreements in a sentence.
pub fn terminal(results: &CrosscheckResults) -> String {
    let mut out = format!("{}\n", wrap(&heading(results), COLUMNS, 4));
    out.push_str(&row(["workload", "trick", "PyTorch engine", "plain script", "agree?"]));
    for check in &results.checks {
        let (engine, plain) = (effect_text(&check.engine), effect_text(&check.plain));
        out.push_str(&row([check.workload.id(), check.trick.id(), &engine, &plain, &verdict_text(check)]));
        if check.agreement.is_some_and(|a| !a.agrees()) {
            out.push_str(&format!("{}\n", wrap(&format!("      {}", faults_sentence(check)), COLUMNS, 0)));
        }
    }
    out.push_str(&format!("{}\n", wrap(&format!("  {}", conclusion(results)), COLUMNS, 2)));
    out
}

/// One line of the terminal's table: workload, trick, the two effects and the verdict.
fn row(cells: [&str; 5]) -> String {
    let [workload, trick, engine, plain, verdict] = cells;
    format!("  {workload:<9} {trick:<17} {engine:<20} {plain:<20} {verdict}\n")
}

/// `summary.md`: the heading, the table with each source's processes and pairs, and the
/// conclusion.
pub fn markdown(results: &CrosscheckResults) -> String {
    let mut out =
        format!("# Cross-check: the PyTorch engine against a plain script\n\n{}\n\n", heading(results));
    out.push_str(&format!(
        "trickbench {} at {}, started {}; `{}`\n\n",
        results.trickbench_version,
        results.git_commit.as_deref().unwrap_or("an unknown commit"),
        results.started_at,
        results.command.join(" ")
    ));
    out.push_str(
        "| workload | trick | reference | PyTorch engine | plain script | plain ÷ engine | agree? |\n",
    );
    out.push_str("|---|---|---|---|---|---|---|\n");
    for check in &results.checks {
        let ratio =
            check.agreement.map_or_else(|| "—".to_owned(), |a| format!("{:.3}", a.plain_over_engine()));
        out.push_str(&format!(
            "| {} | {} | {} | {} | {} | {} | {} |\n",
            check.workload.id(),
            check.trick.id(),
            check.reference.as_ref().map_or("—", |r| r.as_str()),
            source_cell(&check.engine),
            source_cell(&check.plain),
            ratio,
            verdict_text(check)
        ));
    }
    out.push_str(&format!("\n{}\n\n", conclusion(results)));
    out.push_str(
        "Minor page faults a timed step, each side's mean over its windows and processes (pages the \
         kernel mapped in as the step touched memory the allocator had handed back or never held):\n\n",
    );
    out.push_str(
        "| workload | trick | PyTorch engine: trick / reference | plain script: trick / reference |\n",
    );
    out.push_str("|---|---|---|---|\n");
    for check in &results.checks {
        out.push_str(&format!(
            "| {} | {} | {} | {} |\n",
            check.workload.id(),
            check.trick.id(),
            faults_text(&check.engine),
            faults_text(&check.plain)
        ));
    }
    out
}

/// A source's page faults a step, trick / reference, or `—`.
fn faults_text(source: &SourceEffect) -> String {
    source
        .page_faults_per_step()
        .map_or_else(|| "—".to_owned(), |(trick, reference)| format!("{trick:.0} / {reference:.0}"))
}

/// Each source's page faults a step, for a disagreement.
fn faults_sentence(check: &TrickCheck) -> String {
    format!(
        "minor page faults a step (trick / reference): engine {}, plain script {}",
        faults_text(&check.engine),
        faults_text(&check.plain)
    )
}

/// What was compared, where and how.
fn heading(results: &CrosscheckResults) -> String {
    format!(
        "crosscheck: each trick's throughput effect on the PyTorch engine and in a plain script \
         (plain.py), {} profile, {}, {}, {} threads; {} round{} of one process each, {} pairs of \
         {}-step windows a process",
        results.profile,
        results.device,
        results.host_allocator.description(),
        results.threads,
        results.rounds,
        if results.rounds == 1 { "" } else { "s" },
        results.pairs_per_process,
        results.steps_per_window
    )
}

/// An effect as `1.08× [1.06, 1.10]`, `—` before one is measured.
fn effect_text(source: &SourceEffect) -> String {
    source.effect.map_or_else(|| "—".to_owned(), estimate_text)
}

/// An estimate as `1.08× [1.06, 1.10]`.
fn estimate_text(e: Estimate) -> String {
    format!("{:.2}× [{:.2}, {:.2}]", e.point, e.low, e.high)
}

/// A source's effect with its processes and pairs, and its failures, for the Markdown table.
fn source_cell(source: &SourceEffect) -> String {
    let pairs: usize = source.processes.iter().map(|p| p.pair_ratios.len()).sum();
    let mut text = format!("{} ({} processes, {pairs} pairs)", effect_text(source), source.processes.len());
    if !source.failures.is_empty() {
        text.push_str(&format!("; {} failed: {}", source.failures.len(), source.failures.join("; ")));
    }
    text
}

/// Whether the check's effects agree, or why there is no verdict.
fn verdict_text(check: &TrickCheck) -> String {
    if let Some(reason) = &check.not_applicable {
        return format!("not applicable: {reason}");
    }
    match check.agreement {
        Some(Agreement::Agree { .. }) => "agree".to_owned(),
        Some(Agreement::Disagree { plain_over_engine }) => {
            format!("DISAGREE (plain/engine {plain_over_engine:.2})")
        }
        None => "not measured on both".to_owned(),
    }
}

/// One sentence: how many agree, and which disagree.
fn conclusion(results: &CrosscheckResults) -> String {
    let judged: Vec<&TrickCheck> = results.checks.iter().filter(|c| c.agreement.is_some()).collect();
    let disagree: Vec<String> = judged
        .iter()
        .filter(|c| c.agreement.is_some_and(|a| !a.agrees()))
        .map(|c| format!("{} on {}", c.trick.id(), c.workload.id()))
        .collect();
    match disagree.len() {
        0 => format!(
            "The plain script's effect agrees with the engine's for all {} tricks measured on both \
             (their 95% intervals overlap).",
            judged.len()
        ),
        n => format!(
            "{n} of {} disagree (their 95% intervals do not overlap): {}.",
            judged.len(),
            disagree.join(", ")
        ),
    }
}
