//! The terminal summary of a run: per workload, as each is measured, the verdicts grouped as the
//! report's first screen gives them, fitted to the terminal, and a factorial design's main effects
//! and interactions; at the end, where the run's time went, its times to accuracy and its
//! failures. `--verbose` adds the table of every cell.

mod compare;
pub(crate) mod factorial;
mod glance;
mod layout;

use std::fmt::Write;

use crate::bench::design::Design;
use crate::bench::progress::duration_text;
use crate::report;
use crate::results::rehearsal::RehearsalTally;
use crate::results::schema::{
    CellKind, CellResult, CellStatus, Comparison, Results, TimeToAccuracy, Verdict,
};
use crate::terminal::{wrap, Terminal};
use crate::workloads::WorkloadId;

pub use compare::comparison_summary;
pub use factorial::factorial_summary;

/// What `workload` answered, as soon as it is measured: its verdicts grouped and fitted to the
/// terminal, and under `--verbose` the table of its cells and its noise floors in full.
pub fn workload_summary(results: &Results, workload: WorkloadId, terminal: Terminal) -> String {
    let mut out = String::new();
    for (_, o) in report::first_screens(results).iter().filter(|(w, _)| *w == workload) {
        out.push('\n');
        out.push_str(&glance::first_screen(o, terminal.columns));
    }
    out.push_str(&factorial::workload_answer(results, workload, terminal.columns));
    let unit = workload.family().sample_unit();
    for data in results.run.datasets().filter(|d| d.synthetic && d.sample_unit == unit) {
        let warning = format!(
            "  warning: SYNTHETIC data, not the real {}: throughput and memory still describe the machine, but \
             accuracies and times to accuracy say nothing about real data",
            data.name
        );
        let _ = writeln!(out, "{}", wrap(&warning, terminal.columns, 4));
    }
    if results.run.design == Design::BatchSweep {
        out.push_str(&batches(results, workload, terminal.columns));
    }
    if terminal.verbose {
        out.push('\n');
        out.push_str(&verbose_table(results, |c| c.key.workload == workload));
    }
    out
}

/// The end of a run's summary: the workloads not in `shown` (whose summaries were printed as
/// they finished), then the whole run's time, times to accuracy and failures, and where every
/// cell's numbers are.
pub fn closing_summary(results: &Results, shown: &[WorkloadId], terminal: Terminal) -> String {
    let mut out = String::new();
    let mut unshown: Vec<WorkloadId> = Vec::new();
    for workload in results.cells.iter().map(|c| c.key.workload) {
        if !shown.contains(&workload) && !unshown.contains(&workload) {
            unshown.push(workload);
        }
    }
    for workload in unshown {
        out.push_str(&workload_summary(results, workload, terminal));
    }
    let mut lines: Vec<String> = time_breakdown(results).into_iter().collect();
    if !results.time_to_accuracy.is_empty() {
        lines.push(tta_lines(results));
    }
    lines.extend(failures_line(results));
    lines.extend(rehearsal_lines(results));
    if !terminal.verbose {
        lines.push(
            "every cell, with its throughput, interval, design and memory: cells.csv and index.html beside \
             results.json (or --verbose)"
                .to_owned(),
        );
    }
    for line in lines {
        let _ = write!(out, "\n{}\n", wrap(&line, terminal.columns, 2));
    }
    out
}

/// A batch sweep's answer for `workload`: each batch probed, whether it fit, and the throughput
/// and peak memory of each batch that did, a line each.
fn batches(results: &Results, workload: WorkloadId, columns: usize) -> String {
    let mut out = String::from("\n  batch sizes\n");
    let unit = workload.family().sample_unit();
    for cell in results.cells.iter().filter(|c| c.key.workload == workload && c.key.is_plain_baseline()) {
        let what = match (cell.key.kind, &cell.throughput, status_detail(cell)) {
            (CellKind::MemoryProbe, _, Some(detail)) => format!("probe: {detail}"),
            (CellKind::MemoryProbe, _, None) => "probe: fits".to_owned(),
            (_, Some(_), _) => {
                let memory = cell.memory.and_then(|m| m.primary_bytes()).map_or("-".to_owned(), mebibytes);
                format!("{} {unit}/s, peak {memory}", throughput_text(cell))
            }
            (_, None, detail) => detail.unwrap_or_else(|| status_word(&cell.status).to_owned()),
        };
        let line = format!("    b{:<6} {what}", cell.key.batch_size);
        let _ = writeln!(out, "{}", wrap(&line, columns, 4));
    }
    out
}

/// The time to accuracy of each configuration over its seeds, a line each.
fn tta_lines(results: &Results) -> String {
    let mut out = String::from("time to accuracy, per configuration over its seeds:");
    for t in &results.time_to_accuracy {
        let median = t.median_time_to_target_s.map_or_else(
            || "median: not reached by most seeds".to_owned(),
            |s| format!("median {s:.1} s ({:.2} epochs)", t.median_epochs_to_target.unwrap_or(f64::NAN)),
        );
        let versus = t.versus_text().map_or_else(String::new, |v| format!(" · {v}"));
        let _ = write!(
            out,
            "\n  {}: {}/{} seeds reached {} · {median}{versus}",
            t.id(),
            t.reached,
            t.seeds,
            t.metric.target_text(t.target)
        );
    }
    out
}

/// The table of every cell `include` picks, with the run's header above and the noise floors
/// of their workloads in full under it: what `--verbose` adds.
fn verbose_table(results: &Results, include: impl Fn(&CellResult) -> bool) -> String {
    let mut out = header(results);
    out.push_str(&cell_rows(results, &include));
    let workloads: Vec<WorkloadId> =
        results.cells.iter().filter(|c| include(c)).map(|c| c.key.workload).collect();
    for floor in results.noise_floors.iter().filter(|f| workloads.contains(&f.workload)) {
        let _ = writeln!(out, "\n{}", floor.text(results.run.workload_name(floor.workload)));
    }
    out
}

/// The summary's first line: the run, its device, profile, design and data.
fn header(results: &Results) -> String {
    let data: Vec<String> = results
        .run
        .datasets()
        .map(|d| {
            let name = if d.synthetic { "SYNTHETIC data (not CIFAR-10)" } else { d.name.as_str() };
            format!("{name} ({} train / {} held-out {})", d.train_samples, d.test_samples, d.sample_unit)
        })
        .collect();
    format!(
        "{} · {} · {} · {} design · {}\n{}\n",
        results.run.id,
        results.run.device,
        results.run.profile_text(),
        results.run.design,
        data.join(" · "),
        results.run.protocol.host_allocator.description()
    )
}

/// The column headings and one row per cell that `include` picks, each followed by the lines
/// that explain its status, its cause where the run diagnosed one, and its noise.
fn cell_rows(results: &Results, include: &impl Fn(&CellResult) -> bool) -> String {
    let target = results.run.protocol.target_ci_half_width;
    let cells: Vec<&CellResult> = results.cells.iter().filter(|c| include(c)).collect();
    let width = cells.iter().map(|c| c.id().as_str().len()).max().unwrap_or(4).max(4);
    let mut out = String::new();
    let _ = writeln!(
        out,
        "{:<width$} {:<8} {:>22} {:>32} {:<9} {:>9}  verdict",
        "cell", "status", "samples/s [95% CI]", "speed-up [95% CI]", "design", "peak mem"
    );
    for cell in cells {
        let comparison = results.comparisons.iter().find(|c| c.cell == cell.id());
        let _ = writeln!(
            out,
            "{:<width$} {:<8} {:>22} {:>32} {:<9} {:>9}  {}",
            cell.id(),
            status_word(&cell.status),
            throughput_text(cell),
            comparison.map_or_else(|| speedup_without_comparison(cell), speedup_text),
            comparison.map_or("", |c| c.design.label()),
            cell.memory.and_then(|m| m.primary_bytes()).map_or("-".to_owned(), mebibytes),
            comparison.map_or("-", |c| report::verdict_label(results, cell, c)),
        );
        if let Some(detail) = status_detail(cell) {
            let _ = writeln!(out, "    {detail}");
        }
        let diagnosis = comparison.and_then(|c| c.diagnosis.as_ref()).filter(|d| d.cause.is_some());
        if let Some(why) = diagnosis.and_then(report::why_text) {
            let _ = writeln!(out, "    why: {why}");
        }
        if let Some(warning) = cell.noise_warning(comparison, target) {
            let _ = writeln!(out, "    {warning}");
        }
        if let Some(warning) = cell.machine_warning() {
            let _ = writeln!(out, "    {warning}");
        }
        if let Some(warning) = cell.attention_warning() {
            let _ = writeln!(out, "    WARNING: {warning}");
        }
    }
    out
}

/// Where a finished run's time went: timed windows, the cell processes' set-up (start-up, data,
/// model, warm-up) and everything else (starting processes, loading libtorch, the harness's
/// analysis and writes), from the run's start and end and its processes' own clocks.
pub fn time_breakdown(results: &Results) -> Option<String> {
    let at = |t: &str| chrono::DateTime::parse_from_rfc3339(t).ok();
    let total_s =
        (at(results.run.finished_at.as_deref()?)? - at(&results.run.started_at)?).num_seconds() as f64;
    let processes = results.cells.iter().flat_map(|c| &c.processes);
    let (mut timed_s, mut setup_s, mut in_processes_s) = (0.0, 0.0, 0.0);
    for p in processes {
        timed_s += p.timed_s.unwrap_or(0.0);
        setup_s += p.setup_s.unwrap_or(0.0);
        in_processes_s += p.wall_s;
    }
    let other_s = (total_s - in_processes_s).max(0.0);
    let share = |s: f64| if total_s > 0.0 { 100.0 * s / total_s } else { 0.0 };
    let rest = rest_of_processes(in_processes_s - timed_s - setup_s);
    Some(format!(
        "time: {} in all; {} in timed windows ({:.0}%), {} setting cells up (data, model, warm-up; \
         {:.0}%), {rest}{} outside them (process start, libtorch loading, warm-up processes, the \
         harness's analysis and writes; {:.0}%)",
        duration_text(total_s),
        duration_text(timed_s),
        share(timed_s),
        duration_text(setup_s),
        share(setup_s),
        duration_text(other_s),
        share(other_s)
    ))
}

/// The clause for the processes' time outside their windows and set-up (time-to-accuracy
/// training, mostly), or nothing when a run spent none there.
fn rest_of_processes(rest_s: f64) -> String {
    if rest_s < 0.5 {
        return String::new();
    }
    format!("{} in time-to-accuracy training and the rest of the processes, ", duration_text(rest_s))
}

/// A rehearsal's lines: what it rehearsed, its cases by how far it took them, each refused one
/// with why; `None` for a run that is no rehearsal.
fn rehearsal_lines(results: &Results) -> Option<String> {
    let tally = RehearsalTally::of(results)?;
    let gpu = results.run.device.rehearsed()?;
    let mut text = format!(
        "rehearsal of {} ({}) on the CPU, every number the CPU's: {}",
        gpu.id(),
        gpu.examples(),
        tally.line()
    );
    if !tally.refused.is_empty() {
        text.push_str("; refused, each a defect a GPU run would meet:");
    }
    for (id, why) in &tally.refused {
        let _ = write!(text, "\n  {id}: {}", why.lines().next().unwrap_or_default());
    }
    Some(text)
}

/// The summary's lines when cells did not measure: how many and how they ended, then each cell
/// with the first line of why.
fn failures_line(results: &Results) -> Option<String> {
    let failed: Vec<&CellResult> = results.cells.iter().filter(|c| c.failed()).collect();
    if failed.is_empty() {
        return None;
    }
    let count = |matches: fn(&CellStatus) -> bool, words: &str| {
        let n = failed.iter().filter(|c| matches(&c.status)).count();
        (n > 0).then(|| format!("{n} {words}"))
    };
    let how: Vec<String> = [
        count(|s| matches!(s, CellStatus::Failed { .. }), "failed"),
        count(|s| matches!(s, CellStatus::Timeout { .. }), "timed out"),
        count(|s| matches!(s, CellStatus::OutOfMemory { .. }), "ran out of memory"),
    ]
    .into_iter()
    .flatten()
    .collect();
    let mut text = format!(
        "error: {} of {} cells did not measure ({}); results.json holds their stderr:",
        failed.len(),
        results.cells.len(),
        how.join(", ")
    );
    for cell in failed {
        let why = status_detail(cell).unwrap_or_else(|| status_word(&cell.status).to_owned());
        let _ = write!(text, "\n  {}: {}", cell.id(), why.lines().next().unwrap_or_default());
    }
    Some(text)
}

fn status_word(status: &CellStatus) -> &'static str {
    match status {
        CellStatus::Ok => "ok",
        CellStatus::NotApplicable { .. } => "n/a",
        CellStatus::Failed { .. } => "FAILED",
        CellStatus::OutOfMemory { .. } => "OOM",
        CellStatus::Timeout { .. } => "TIMEOUT",
    }
}

fn throughput_text(cell: &CellResult) -> String {
    match (&cell.throughput, cell.key.kind) {
        (Some(t), _) => format!(
            "{:.0} [{:.0}, {:.0}]",
            t.median_samples_per_s, t.ci_low_samples_per_s, t.ci_high_samples_per_s
        ),
        (None, CellKind::TimeToAccuracy) => "(time-to-accuracy)".to_owned(),
        (None, CellKind::MemoryProbe) => "(memory probe)".to_owned(),
        (None, _) => "-".to_owned(),
    }
}

fn speedup_text(c: &Comparison) -> String {
    let verdict = match c.verdict {
        Verdict::Faster => "faster",
        Verdict::Slower => "slower",
        Verdict::NoSignificantEffect => "no sig. effect",
        Verdict::WithinNoise => "within noise",
    };
    format!("{:.2}× [{:.2}, {:.2}] {verdict}", c.speedup, c.speedup_ci_low, c.speedup_ci_high)
}

fn speedup_without_comparison(cell: &CellResult) -> String {
    let alone = if cell.key.alone { ", alone" } else { "" };
    if cell.key.aa_control {
        format!("(A/A control{alone})")
    } else if let Some(trick) = cell.key.reference_for {
        format!("({trick}'s reference)")
    } else if cell.key.tricks.is_baseline() && !cell.key.kind.runs_once() {
        format!("(baseline{alone})")
    } else {
        "-".to_owned()
    }
}

fn mebibytes(bytes: u64) -> String {
    format!("{:.0} MiB", bytes as f64 / (1u64 << 20) as f64)
}

/// The line under a cell that explains a non-ok status (for a failed cell the line of its stderr
/// that says why), gives its time-to-accuracy, or names what it is compared with when that is
/// another trick set than the baseline (a forced attention backend against PyTorch's choice).
pub fn status_detail(cell: &CellResult) -> Option<String> {
    match &cell.status {
        CellStatus::NotApplicable { reason, .. } => Some(format!("not applicable: {reason}")),
        CellStatus::Failed { .. } => cell.failure_reason().map(|reason| format!("failed: {reason}")),
        CellStatus::OutOfMemory { .. } => {
            cell.failure_reason().map(|reason| format!("out of memory: {reason}"))
        }
        CellStatus::Timeout { limit_s, .. } => Some(format!("killed after the {limit_s:.0} s cell timeout")),
        CellStatus::Ok if cell.time_to_accuracy.is_none() => {
            let swapped = cell.key.tricks.swapped_reference().filter(|_| cell.key.reference_for.is_none());
            swapped.map(|set| format!("compared with {}, not with the baseline", set.label()))
        }
        CellStatus::Ok => cell.time_to_accuracy.as_ref().map(|tta| {
            let value = |v: f64| tta.metric.value_text(v);
            let target = tta.metric.target_text(tta.target);
            match tta.time_to_target_s {
                Some(s) => format!(
                    "reached {} after {s:.1} s of training ({:.2} epochs; target {target}; best {})",
                    tta.curve
                        .iter()
                        .find(|p| tta.metric.reaches(p.metric, tta.target))
                        .map_or_else(String::new, |p| format!("{} {}", tta.metric.words(), value(p.metric))),
                    tta.epochs_to_target.unwrap_or(f64::NAN),
                    value(tta.best_metric)
                ),
                None => {
                    format!("did NOT reach {target} {} (best {})", why_stopped(tta), value(tta.best_metric))
                }
            }
        }),
    }
}

/// When a time-to-accuracy run that missed its target stopped: at its time budget, or earlier, at
/// the end of the epochs or steps its schedule was planned over.
fn why_stopped(tta: &TimeToAccuracy) -> String {
    match tta.curve.last() {
        Some(last) if last.train_s < tta.budget_s => format!(
            "in its planned schedule ({:.2} epochs, {:.1} s of training, inside the {:.0} s budget)",
            last.epoch, last.train_s, tta.budget_s
        ),
        _ => format!("within the {:.0} s budget", tta.budget_s),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::results::schema::CurvePoint;
    use crate::vocabulary::QualityMetric;

    fn missed(last_train_s: f64) -> TimeToAccuracy {
        let point = |train_s: f64, epoch: f64| CurvePoint {
            step: (epoch * 100.0) as usize,
            epoch,
            train_s,
            wall_s: train_s + 1.0,
            metric: 0.4,
            train_loss: Some(1.5),
        };
        TimeToAccuracy {
            metric: QualityMetric::TestAccuracy,
            target: 0.6,
            budget_s: 100.0,
            time_to_target_s: None,
            wall_time_to_target_s: None,
            epochs_to_target: None,
            best_metric: 0.4,
            curve: vec![point(0.0, 0.0), point(last_train_s, 1.0)],
            compile_s: None,
        }
    }

    #[test]
    fn a_run_with_no_time_outside_windows_and_set_up_does_not_mention_it() {
        assert_eq!(rest_of_processes(0.2), "");
        assert_eq!(rest_of_processes(-1.0), "");
        assert!(rest_of_processes(258.0).contains("in time-to-accuracy training"));
    }

    #[test]
    fn a_missed_target_says_whether_the_budget_or_the_schedule_ran_out() {
        assert_eq!(
            why_stopped(&missed(42.0)),
            "in its planned schedule (1.00 epochs, 42.0 s of training, inside the 100 s budget)"
        );
        assert_eq!(why_stopped(&missed(100.3)), "within the 100 s budget");
    }
}
