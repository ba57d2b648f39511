//! A comparison of machines on the terminal: the answer in one sentence, each machine's noise
//! floors, then the tricks grouped as helping everywhere, depending on the machine, hurting
//! everywhere or without a measurable effect anywhere, each with every machine's effects in a
//! column per machine, and the tricks that apply on no machine.

use std::fmt::Write;

use super::layout::{cause_lines, grouped_under, Layout};
use crate::engine::Engine;
use crate::report::{MachineGlance, OnMachine, Pattern, TrickAcross};
use crate::results::schema::Results;
use crate::terminal::{wrap, Terminal};

/// The comparison of `results`, one file per machine, in at most `terminal.columns` characters
/// per line.
pub fn comparison_summary(results: &[Results], terminal: Terminal) -> String {
    glance_text(&crate::report::machine_glance(results), terminal.columns)
}

/// The first screen `g` in at most `columns` characters per line.
fn glance_text(g: &MachineGlance, columns: usize) -> String {
    let mut out = format!("{}\n", wrap(&g.sentence, columns, 2));
    if let Some(builds) = &g.builds_differ {
        let _ = writeln!(out, "{}", wrap(&format!("  warning: {builds}"), columns, 4));
    }
    for f in &g.floors {
        let _ = writeln!(
            out,
            "{}",
            wrap(&format!("  {}: paired A/A noise floor {}", f.machine, f.text), columns, 4)
        );
    }
    let engines = g.engines();
    if engines.len() > 1 {
        let _ = writeln!(out, "  each machine's effect in PyTorch · on libtorch, on the trick's own metric");
    }
    let cells: Vec<(String, Vec<String>)> = g.rows.iter().map(|r| (name(r), values(r, &engines))).collect();
    let headings: Vec<&str> = Pattern::ALL.iter().map(|p| p.label()).collect();
    let mut titles = g.machines.clone();
    titles.push("apart".to_owned());
    let layout = Layout::under(&headings, titles, &cells, columns);
    let groups =
        Pattern::ALL.map(|pattern| (pattern.label(), move |i: &usize| g.rows[*i].pattern == pattern));
    let indices: Vec<usize> = (0..g.rows.len()).collect();
    out.push_str(&grouped_under(&indices, &layout, &groups, |i| layout.row(&cells[*i].0, &cells[*i].1)));
    let nowhere = g.nowhere_by_cause();
    if !nowhere.is_empty() {
        let count: usize = nowhere.iter().map(|(_, tricks)| tricks.len()).sum();
        let _ = writeln!(out, "\n  applies on no machine ({count})");
        out.push_str(&cause_lines(&nowhere, columns));
    }
    out
}

/// "channels-last · resnet8", with the metric where it is not throughput.
fn name(r: &TrickAcross) -> String {
    match r.metric {
        crate::tricks::Metric::Memory => format!("{} (memory)", r.label()),
        crate::tricks::Metric::TimeToAccuracy => format!("{} (to target)", r.label()),
        _ => r.label(),
    }
}

/// Each machine's effects, its engines' joined by " · ", then how far apart they lie where they
/// differ ("n/a elsewhere" where the trick applies on one machine only).
fn values(r: &TrickAcross, engines: &[Engine]) -> Vec<String> {
    let mut values: Vec<String> =
        r.on.iter()
            .map(|side| match side {
                OnMachine::NotApplicable(_) => "n/a".to_owned(),
                OnMachine::Absent => "not run".to_owned(),
                OnMachine::Measured(_) => engines
                    .iter()
                    .map(|e| side.gain(*e).map_or_else(|| "—".to_owned(), |g| format!("{:.2}×", g.ratio)))
                    .collect::<Vec<_>>()
                    .join(" · "),
            })
            .collect();
    values.push(match (r.differs, r.spread_engine) {
        (true, Some(_)) => format!("{:.2}×", r.spread),
        (true, None) => "n/a elsewhere".to_owned(),
        (false, _) => String::new(),
    });
    values
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_row_too_wide_puts_each_machines_effects_under_its_name() {
        let cells = vec![(
            "channels-last · resnet8".to_owned(),
            vec!["1.18× · 1.19×".to_owned(), "1.09× · 1.11×".to_owned(), "1.09×".to_owned()],
        )];
        let titles =
            vec!["AMD EPYC (2 cores)".to_owned(), "Intel Xeon (2 cores)".to_owned(), "apart".to_owned()];
        let headings: Vec<&str> = Pattern::ALL.iter().map(|p| p.label()).collect();
        let wide = Layout::under(&headings, titles.clone(), &cells, 100);
        assert!(wide.row(&cells[0].0, &cells[0].1).lines().count() == 1);
        let narrow = Layout::under(&headings, titles, &cells, 50);
        let text = narrow.row(&cells[0].0, &cells[0].1);
        assert!(text.lines().count() > 1 && text.lines().all(|l| l.chars().count() <= 50), "{text}");
    }
}
