//! The gate in words: its verdict line, a Markdown summary for a CI job's summary, JUnit XML for a
//! CI's test view, and a short text for the terminal.

use super::{Check, Gate, GateVerdict, Quantity, Reading, RunName, Threshold, MEMORY_THRESHOLD_FRACTION};
use crate::report::html::markdown_cell;
use crate::workloads::WorkloadId;

/// Regressions the verdict line names before it stops with "…".
const NAMED_REGRESSIONS: usize = 5;

/// "2 confident regressions: resnet8 · amp · b128 speed-up -15.4%; … (1 improvement, 20 no
/// change, 2 not compared)", or "no confident regression (…)".
pub(super) fn verdict_line(gate: &Gate) -> String {
    let regressions: Vec<String> = gate.with_verdict(GateVerdict::Regression).map(short).collect();
    let tally = tally(gate);
    let named = regressions.iter().take(NAMED_REGRESSIONS).cloned().collect::<Vec<_>>().join("; ");
    let more = if regressions.len() > NAMED_REGRESSIONS { "; …" } else { "" };
    match regressions.len() {
        0 => format!("no confident regression ({tally})"),
        1 => format!("1 confident regression: {named} ({tally})"),
        n => format!("{n} confident regressions: {named}{more} ({tally})"),
    }
}

/// How many checks of each other verdict: "1 improvement, 20 no change, 2 not compared".
fn tally(gate: &Gate) -> String {
    let count = |v| gate.with_verdict(v).count();
    let improvements = count(GateVerdict::Improvement);
    let plural = if improvements == 1 { "" } else { "s" };
    format!(
        "{improvements} improvement{plural}, {} no change, {} not compared",
        count(GateVerdict::NoChange),
        count(GateVerdict::NotCompared)
    )
}

/// A check in a few words: "resnet8 · amp · b128 speed-up -15.4%".
fn short(c: &Check) -> String {
    format!("{} {}", label(c), change_text(c))
}

/// "resnet8 · amp · b128 speed-up".
fn label(c: &Check) -> String {
    format!("{} · {} {}", c.workload, c.what, c.quantity.label())
}

/// The change in percent, "-15.4%", or "–" where not compared.
fn change_text(c: &Check) -> String {
    c.change_fraction.map_or_else(|| "–".to_owned(), |f| format!("{:+.1}%", f * 100.0))
}

/// A value of `quantity` without its unit: "412.3" (samples/s) or "1.300" (×).
fn plain(quantity: Quantity, value: f64) -> String {
    match quantity {
        Quantity::BaselineThroughput => format!("{value:.1}"),
        _ => format!("{value:.3}"),
    }
}

/// A value of `quantity`: "412.3" (samples/s) or "1.300×".
fn number(quantity: Quantity, value: f64) -> String {
    match quantity {
        Quantity::BaselineThroughput => plain(quantity, value),
        _ => format!("{}×", plain(quantity, value)),
    }
}

/// A run's reading, "1.300× [1.250, 1.350]", or why it has none.
fn reading_text(quantity: Quantity, reading: &Result<Reading, String>) -> String {
    match reading {
        Ok(Reading { point, interval: Some((low, high)) }) => {
            format!("{} [{}, {}]", number(quantity, *point), plain(quantity, *low), plain(quantity, *high))
        }
        Ok(Reading { point, interval: None }) => number(quantity, *point),
        Err(why) => why.clone(),
    }
}

/// "±2.3% (A/A)", "±5.0% (memory)", "none recorded"; "–" where not compared.
fn threshold_text(c: &Check) -> String {
    let percent = c.threshold_fraction * 100.0;
    match c.threshold {
        _ if c.verdict == GateVerdict::NotCompared => "–".to_owned(),
        Threshold::NoiseFloor => format!("±{percent:.1}% (A/A)"),
        Threshold::MemoryTolerance => format!("±{percent:.1}% (memory)"),
        Threshold::NoFloor => "none recorded".to_owned(),
    }
}

/// Why a check was not compared: "new: failed", "base: not measured".
fn not_compared_reason(c: &Check) -> String {
    let sides = [("base", &c.base), ("new", &c.new)];
    let why: Vec<String> =
        sides.iter().filter_map(|(side, r)| r.as_ref().err().map(|e| format!("{side}: {e}"))).collect();
    if why.is_empty() {
        "the base value is not a positive number".to_owned()
    } else {
        why.join(", ")
    }
}

/// The verdict of a check in words, with why where it was not compared.
fn verdict_text(c: &Check) -> String {
    match c.verdict {
        GateVerdict::NotCompared => format!("not compared ({})", not_compared_reason(c)),
        v => v.label().to_owned(),
    }
}

/// The numbers behind a verdict: "speed-up 1.300× → 1.100× (-15.4%); new interval [1.050, 1.150];
/// threshold ±2.3% (A/A)".
fn numbers(c: &Check) -> String {
    format!(
        "{} {} → {} ({}); threshold {}",
        c.quantity.label(),
        reading_text(c.quantity, &c.base),
        reading_text(c.quantity, &c.new),
        change_text(c),
        threshold_text(c)
    )
}

/// The checks grouped by workload, in order (the checks come sorted by workload).
fn by_workload(gate: &Gate) -> Vec<(WorkloadId, Vec<&Check>)> {
    let mut groups: Vec<(WorkloadId, Vec<&Check>)> = Vec::new();
    for c in &gate.checks {
        match groups.last_mut() {
            Some((workload, checks)) if *workload == c.workload => checks.push(c),
            _ => groups.push((c.workload, vec![c])),
        }
    }
    groups
}

/// "`run-a` at aaaaaaa (cpu on host, libtorch 2.11.0)".
fn run_text(r: &RunName) -> String {
    format!("`{}` at {} ({}, libtorch {})", r.id, r.commit, r.machine, r.libtorch)
}

/// The Markdown summary: the verdict line, the runs, the rule, any accepted mismatch, then a
/// table per workload.
pub(super) fn markdown(gate: &Gate) -> String {
    let mut md = format!("**trickbench gate: {}**\n\n", verdict_line(gate));
    md.push_str(&format!("Base {} → new {}.\n\n", run_text(&gate.base), run_text(&gate.new)));
    md.push_str(&format!(
        "A regression is a change the worse way that the new run's {:.0}% interval excludes and that \
         is larger than the threshold: the larger of the two runs' A/A noise floors (±{:.0}% for a \
         peak-memory ratio, which has no interval).\n\n",
        gate.confidence_level * 100.0,
        MEMORY_THRESHOLD_FRACTION * 100.0
    ));
    if !gate.mismatches.is_empty() {
        let each: Vec<String> =
            gate.mismatches.iter().map(|m| format!("{}: base {}, new {}", m.fact, m.base, m.new)).collect();
        md.push_str(&format!(
            "> Compared despite differences (`--allow-mismatch`): {}.\n\n",
            each.join("; ")
        ));
    }
    for (workload, checks) in by_workload(gate) {
        md.push_str(&format!("### {workload}\n\n"));
        md.push_str(&markdown_table(&checks));
    }
    md
}

/// A workload's table: a row per check that either run measured, then one line naming the cells
/// that neither did.
fn markdown_table(checks: &[&Check]) -> String {
    let (rows, neither): (Vec<&Check>, Vec<&Check>) =
        checks.iter().partition(|c| c.base.is_ok() || c.new.is_ok());
    let mut md = String::new();
    if !rows.is_empty() {
        md.push_str(
            "| what | base | new | change | threshold | verdict |\n| --- | --- | --- | --- | --- | --- |\n",
        );
        md.extend(rows.iter().map(|c| markdown_row(c)));
        md.push('\n');
    }
    if !neither.is_empty() {
        let each: Vec<String> =
            neither.iter().map(|c| format!("{} ({})", c.what, neither_reason(c))).collect();
        md.push_str(&format!("Measured in neither run: {}.\n\n", each.join(", ")));
    }
    md
}

/// Why neither run measured a check: "not applicable", or "base: failed, new: not measured".
fn neither_reason(c: &Check) -> String {
    match (&c.base, &c.new) {
        (Err(base), Err(new)) if base == new => base.clone(),
        _ => not_compared_reason(c),
    }
}

/// One check as a table row.
fn markdown_row(c: &Check) -> String {
    let unit = if c.quantity == Quantity::BaselineThroughput { " (samples/s)" } else { "" };
    let mut verdict = match c.verdict {
        GateVerdict::Regression => "**regression**".to_owned(),
        _ => verdict_text(c),
    };
    if let Some(why) = &c.why {
        verdict.push_str(&format!(" · why: {why}"));
    }
    let cells = [
        format!("{} {}{unit}", c.what, c.quantity.label()),
        reading_text(c.quantity, &c.base),
        reading_text(c.quantity, &c.new),
        change_text(c),
        threshold_text(c),
        verdict,
    ];
    let cells: Vec<String> = cells.iter().map(|cell| markdown_cell(cell)).collect();
    format!("| {} |\n", cells.join(" | "))
}

/// The JUnit XML: a test suite per workload, a test case per check; a regression fails, a check
/// not compared is skipped, and the others pass with their numbers as output.
pub(super) fn junit(gate: &Gate) -> String {
    let count = |v| gate.with_verdict(v).count();
    let mut xml = String::from("<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n");
    xml.push_str(&format!(
        "<testsuites name=\"trickbench gate\" tests=\"{}\" failures=\"{}\" skipped=\"{}\" errors=\"0\">\n",
        gate.checks.len(),
        count(GateVerdict::Regression),
        count(GateVerdict::NotCompared)
    ));
    for (workload, checks) in by_workload(gate) {
        let count = |v| checks.iter().filter(|c| c.verdict == v).count();
        xml.push_str(&format!(
            "  <testsuite name=\"{}\" tests=\"{}\" failures=\"{}\" skipped=\"{}\" errors=\"0\">\n",
            escape(workload.id()),
            checks.len(),
            count(GateVerdict::Regression),
            count(GateVerdict::NotCompared)
        ));
        for c in checks {
            xml.push_str(&junit_case(c));
        }
        xml.push_str("  </testsuite>\n");
    }
    xml.push_str("</testsuites>\n");
    xml
}

/// One check as a test case.
fn junit_case(c: &Check) -> String {
    let why = c.why.as_ref().map_or_else(String::new, |why| format!("; why: {why}"));
    let body = match c.verdict {
        GateVerdict::Regression => format!(
            "<failure type=\"regression\" message=\"{}\">{}</failure>",
            escape(&format!("regression: {}", numbers(c))),
            escape(&format!("{}: {}{why}", label(c), numbers(c)))
        ),
        GateVerdict::NotCompared => {
            format!("<skipped message=\"{}\"/>", escape(&format!("not compared: {}", not_compared_reason(c))))
        }
        GateVerdict::Improvement | GateVerdict::NoChange => format!(
            "<system-out>{}</system-out>",
            escape(&format!("{}: {}{why}", c.verdict.label(), numbers(c)))
        ),
    };
    format!(
        "    <testcase classname=\"trickbench.gate.{}\" name=\"{}\">{body}</testcase>\n",
        escape(c.workload.id()),
        escape(&format!("{} {}", c.what, c.quantity.label()))
    )
}

/// `text` escaped for XML text and attribute values; control characters XML 1.0 cannot hold
/// become U+FFFD.
pub(super) fn escape(text: &str) -> String {
    let mut escaped = String::with_capacity(text.len());
    for ch in text.chars() {
        match ch {
            '&' => escaped.push_str("&amp;"),
            '<' => escaped.push_str("&lt;"),
            '>' => escaped.push_str("&gt;"),
            '"' => escaped.push_str("&quot;"),
            '\'' => escaped.push_str("&apos;"),
            '\t' | '\n' | '\r' => escaped.push(ch),
            c if c < ' ' => escaped.push('\u{FFFD}'),
            c => escaped.push(c),
        }
    }
    escaped
}

/// The gate for a terminal: the verdict line, then each regression and improvement with its
/// numbers, and under it why where the new run's speed-up is null or negative.
pub(super) fn terminal(gate: &Gate) -> String {
    let mut text = format!("gate: {}\n", verdict_line(gate));
    let changed = gate
        .checks
        .iter()
        .filter(|c| matches!(c.verdict, GateVerdict::Regression | GateVerdict::Improvement));
    for c in changed {
        text.push_str(&format!("  {:<12} {} · {}: {}\n", c.verdict.label(), c.workload, c.what, numbers(c)));
        if let Some(why) = &c.why {
            text.push_str(&format!("  {:<12} why: {why}\n", ""));
        }
    }
    text
}
