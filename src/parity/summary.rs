//! The terminal summary of a parity comparison: per workload, one row per side (eager PyTorch,
//! trickbench's baseline, trickbench's stack, each compiled PyTorch side) with its losses against
//! eager PyTorch's, its throughput and its ratio to eager PyTorch, compile seconds apart; then
//! what the stack holds and what could not run.

use crate::parity::compare::{CompiledParity, ParityReport, WorkloadParity};
use crate::parity::stack::StackParity;
use crate::results::schema::SpeedrunDecision;
use crate::stats::Estimate;

/// The columns of a workload's table.
const COLUMNS: usize = 5;
/// Which columns are right-aligned (the numbers).
const RIGHT_ALIGNED: [bool; COLUMNS] = [false, false, true, true, false];

/// A row of a workload's table: side, losses, throughput, ratio to eager PyTorch, compile time.
type Row = [String; COLUMNS];

/// The terminal summary of `report`.
pub fn summary(report: &ParityReport) -> String {
    let mut text = format!(
        "\nparity with PyTorch · {} · {} profile · losses over {} steps · timing: {} warm-up steps, then {} windows × {} steps per process\n",
        report.device,
        report.profile,
        report.loss_steps,
        report.warmup_steps,
        report.windows_per_process,
        report.steps_per_window
    );
    for workload in &report.workloads {
        text.push_str(&workload_table(workload));
    }
    text
}

/// One workload's heading, table and notes.
fn workload_table(w: &WorkloadParity) -> String {
    let mut text = format!(
        "\n{} · batch {} · PyTorch {} on {} threads, trickbench on {}",
        w.workload, w.batch_size, w.pytorch_version, w.pytorch_threads, w.trickbench_threads
    );
    match &w.speed {
        Some(speed) => text.push_str(&format!(
            " · {} round{}, the sides' order rotated each round\n",
            speed.rounds.len(),
            if speed.rounds.len() == 1 { "" } else { "s" }
        )),
        None => text.push_str(" · not timed\n"),
    }
    let unit = &w.sample_unit;
    let mut rows: Vec<Row> = vec![[
        "side".to_owned(),
        "losses against PyTorch eager".to_owned(),
        format!("{unit}/s [95% CI]"),
        "÷ PyTorch eager [95% CI]".to_owned(),
        "compile (first, median)".to_owned(),
    ]];
    let speed = w.speed.as_ref();
    rows.push(row(
        "PyTorch eager",
        "(the reference)".to_owned(),
        speed.map(|s| &s.pytorch_samples_per_s),
        speed.map(|_| "1×".to_owned()),
        "",
    ));
    rows.push(row(
        "trickbench baseline",
        agreement(w.losses.agrees(), w.losses.max_abs_diff, w.losses.max_rel_diff),
        speed.map(|s| &s.trickbench_samples_per_s),
        speed.map(|s| ratio(&s.speed_ratio)),
        "",
    ));
    if let Some(stack) = w.stack.as_ref().filter(|s| !s.rounds.is_empty()) {
        let speed = stack.speed.as_ref();
        let ratio_to_eager = speed.map(|s| ratio(&s.ratio_to_eager));
        rows.push(row(
            "trickbench stack",
            "(not compared)".to_owned(),
            speed.map(|s| &s.samples_per_s),
            ratio_to_eager,
            "",
        ));
    }
    rows.extend(w.compiled.iter().filter(|c| c.unavailable.is_none()).map(compiled_row));
    text.push_str(&columns(&rows));
    for side in w.compiled.iter().filter_map(|c| c.unavailable.as_ref().map(|why| (c.mode, why))) {
        text.push_str(&format!("  PyTorch compiled ({}): not available here: {}\n", side.0.id(), side.1));
    }
    if let Some(stack) = &w.stack {
        text.push_str(&stack_notes(stack));
    }
    text
}

/// A table row: `side`, its `losses` text, throughput and ratio (a dash where not timed), and
/// `compile` time.
fn row(
    side: &str,
    losses: String,
    throughput: Option<&Estimate>,
    ratio: Option<String>,
    compile: &str,
) -> Row {
    let dash = || "-".to_owned();
    [
        side.to_owned(),
        losses,
        throughput.map_or_else(dash, |t| format!("{:.0} [{:.0}, {:.0}]", t.point, t.low, t.high)),
        ratio.unwrap_or_else(dash),
        compile.to_owned(),
    ]
}

/// The row of an available compiled PyTorch side.
fn compiled_row(side: &CompiledParity) -> Row {
    let losses = side
        .losses
        .as_ref()
        .map_or_else(|| "-".to_owned(), |l| agreement(l.agrees(), l.max_abs_diff, l.max_rel_diff));
    let speed = side.speed.as_ref();
    let compile =
        speed.map_or(String::new(), |s| format!("{:.1} s, {:.1} s", s.first_compile_s, s.median_compile_s));
    row(
        &format!("PyTorch compiled ({})", side.mode.id()),
        losses,
        speed.map(|s| &s.samples_per_s),
        speed.map(|s| ratio(&s.ratio_to_eager)),
        &compile,
    )
}

/// A side's losses against eager PyTorch's, in a cell: whether every step agrees, and the largest
/// absolute and relative differences.
fn agreement(agrees: bool, max_abs_diff: f64, max_rel_diff: f64) -> String {
    let verdict = if agrees { "agree" } else { "DISAGREE" };
    format!("{verdict}: |Δ| {max_abs_diff:.1e} ({max_rel_diff:.1e} relative)")
}

/// A ratio with its interval.
fn ratio(r: &Estimate) -> String {
    format!("{:.3}× [{:.3}, {:.3}]", r.point, r.low, r.high)
}

/// What the stack holds, where its tricks came from, what it buys on trickbench's baseline, and
/// the tricks left out with why.
fn stack_notes(stack: &StackParity) -> String {
    let source = stack.evidence.join(", ");
    let mut text = match (&stack.unavailable, stack.rounds.is_empty()) {
        (Some(why), true) => format!("  stack (from {source}): not timed: {why}\n"),
        _ => format!("  stack: {} (from {source})", stack.label()),
    };
    if !stack.rounds.is_empty() {
        if let Some(speed) = &stack.speed {
            text.push_str(&format!("; against trickbench's baseline {}", ratio(&speed.ratio_to_baseline)));
        }
        text.push('\n');
        if let Some(why) = &stack.unavailable {
            text.push_str(&format!("    stopped after {} rounds: {why}\n", stack.rounds.len()));
        }
    }
    for trick in stack.considered.iter().filter(|t| t.decision != SpeedrunDecision::Added) {
        let decision = match trick.decision {
            SpeedrunDecision::Refused => "refused",
            SpeedrunDecision::NotSignificant => "not significant",
            _ => "left out",
        };
        let why = trick.reason.as_deref().unwrap_or_default();
        text.push_str(&format!("    {decision}: {} ({}): {why}\n", trick.trick, trick.effect));
    }
    text
}

/// `rows` as aligned columns, two spaces apart; the first row is the header, and a column empty
/// below it is left out.
fn columns(rows: &[Row]) -> String {
    let mut widths = [0usize; COLUMNS];
    for row in rows {
        for (width, cell) in widths.iter_mut().zip(row) {
            *width = (*width).max(cell.chars().count());
        }
    }
    let shown: Vec<usize> =
        (0..COLUMNS).filter(|&k| rows.iter().skip(1).any(|row| !row[k].is_empty())).collect();
    let mut text = String::new();
    for row in rows {
        let cells: Vec<String> = shown
            .iter()
            .map(|&k| {
                let (cell, width) = (&row[k], widths[k]);
                match RIGHT_ALIGNED[k] {
                    true => format!("{cell:>width$}"),
                    false => format!("{cell:<width$}"),
                }
            })
            .collect();
        text.push_str(cells.join("  ").trim_end());
        text.push('\n');
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn columns_align_by_characters_not_bytes_and_leave_out_an_empty_one() {
        let rows = [
            ["side".into(), "a".into(), "1".into(), "1×".into(), "compile".into()],
            ["a longer side".into(), "|Δ|".into(), "100".into(), "1.5×".into(), "2 s".into()],
        ];
        let text = columns(&rows);
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines[0], "side           a      1    1×  compile");
        assert_eq!(lines[1], "a longer side  |Δ|  100  1.5×  2 s");
        let body = ["a longer side".into(), "x".into(), "1".into(), "1×".into(), String::new()];
        let without_compile = [rows[0].clone(), body];
        assert_eq!(columns(&without_compile).lines().next().unwrap(), "side           a  1  1×");
    }
}
