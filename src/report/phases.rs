//! Where each training-throughput cell's step time goes, beside its speed-up: the cells with a step
//! breakdown in a group, each with its reference's breakdown and the phase that changed most
//! against it, and the phases' colours.

use serde::Serialize;

use crate::report::model::{self, Entry, Group, Report};
use crate::report::plots::Rgb;
use crate::results::phases::{PhaseClock, StepBreakdown, StepPhase};
use crate::results::schema::{CellKind, Phase};

/// The colour of a phase, the same in every figure (Okabe–Ito's colour-blind-safe palette).
pub(crate) fn phase_colour(phase: StepPhase) -> Rgb {
    match phase {
        StepPhase::BatchWait => Rgb(230, 159, 0),
        StepPhase::HostToDevice => Rgb(86, 180, 233),
        StepPhase::Forward => Rgb(0, 158, 115),
        StepPhase::Backward => Rgb(0, 114, 178),
        StepPhase::AllReduce => Rgb(213, 94, 0),
        StepPhase::Optimizer => Rgb(204, 121, 167),
        StepPhase::Metrics => Rgb(240, 228, 66),
        StepPhase::GraphReplay => Rgb(120, 120, 120),
    }
}

/// How a clock's breakdown is read, for captions.
pub(crate) fn clock_text(clock: PhaseClock) -> &'static str {
    match clock {
        PhaseClock::Host => "host clock",
        PhaseClock::CudaEvents => "CUDA events on the device's stream",
    }
}

/// A training-throughput cell with its step breakdown.
pub(crate) struct BrokenDown<'e> {
    /// The cell.
    pub entry: &'e Entry<'e>,
    /// Its breakdown: the median over its processes.
    pub breakdown: StepBreakdown,
    /// Its reference's breakdown (`None` for the baseline, or a reference without one).
    pub reference: Option<StepBreakdown>,
}

/// The training-throughput cells of `g` with a breakdown: the baseline first, then the trick cells
/// by speed-up, highest first, then the A/A control (the baseline and the control measured alone
/// left out: a trick of the process design shows its breakdown against the first).
pub(crate) fn broken_down<'e>(g: &'e Group<'e>) -> Vec<BrokenDown<'e>> {
    let train = |e: &Entry| e.cell.key.kind == CellKind::Throughput { phase: Phase::Train };
    let baseline = g.entries.iter().filter(|e| {
        let key = &e.cell.key;
        key.tricks.is_baseline() && !key.aa_control && !key.alone
    });
    let control = g.entries.iter().filter(|e| e.cell.key.aa_control && !e.cell.key.alone);
    let tricks = g.trick_throughput().into_iter().filter(|e| !e.cell.key.aa_control);
    baseline
        .chain(tricks)
        .chain(control)
        .filter(|e| train(e))
        .filter_map(|entry| {
            let breakdown = entry.cell.step_breakdown()?;
            let reference = entry
                .comparison
                .and_then(|c| g.entries.iter().find(|x| x.cell.id() == c.baseline))
                .and_then(|r| r.cell.step_breakdown());
            Some(BrokenDown { entry, breakdown, reference })
        })
        .collect()
}

/// The phase whose time changed most (in milliseconds per step) from `reference` to `cell`, in
/// words: "backward +78% (23.7 → 42.2 ms)"; a phase only one of them ran says so.
pub(crate) fn largest_change(cell: &StepBreakdown, reference: &StepBreakdown) -> Option<String> {
    let delta = |p: StepPhase| cell.phase_ms(p).unwrap_or(0.0) - reference.phase_ms(p).unwrap_or(0.0);
    let phase = StepPhase::ALL
        .into_iter()
        .filter(|&p| cell.phase_ms(p).is_some() || reference.phase_ms(p).is_some())
        .max_by(|&a, &b| delta(a).abs().total_cmp(&delta(b).abs()))?;
    let name = phase.label();
    Some(match (reference.phase_ms(phase), cell.phase_ms(phase)) {
        (Some(before), Some(after)) if before > 0.0 => {
            format!("{name} {:+.0}% ({before:.2} → {after:.2} ms)", (after / before - 1.0) * 100.0)
        }
        (Some(before), Some(after)) => format!("{name} {before:.2} → {after:.2} ms"),
        (Some(before), None) => format!("{name} gone ({before:.2} ms → none)"),
        (None, Some(after)) => format!("{name} new ({after:.2} ms)"),
        (None, None) => return None,
    })
}

/// The breakdown table of one group.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct PhaseTable {
    /// The group's title.
    pub group: String,
    /// One row per cell with a breakdown.
    pub rows: Vec<PhaseRow>,
}

/// One row of the report's breakdown table.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct PhaseRow {
    /// The cell's anchor in the all-cells table.
    pub anchor: String,
    /// The cell's label within its group.
    pub configuration: String,
    /// The speed-up against its reference, with its interval ("—" for the baseline).
    pub speedup: String,
    /// Mean time of an instrumented step, "33.2 ms".
    pub step: String,
    /// Every phase's share of the step: (label, percent of the step, colour as CSS, exact text).
    pub shares: Vec<(String, f64, String, String)>,
    /// The phase that changed most against the reference ("—" for the baseline).
    pub change: String,
    /// The instrumented steps' throughput against the timed windows' median, "0.98×": what the
    /// phase marks cost.
    pub instrumented: String,
}

/// The breakdown table of every group with a breakdown.
pub(crate) fn tables(report: &Report) -> Vec<PhaseTable> {
    report
        .groups
        .iter()
        .map(|g| PhaseTable { group: g.title(), rows: broken_down(g).iter().map(|b| row(g, b)).collect() })
        .filter(|t| !t.rows.is_empty())
        .collect()
}

fn row(g: &Group, b: &BrokenDown) -> PhaseRow {
    let step_ms = b.breakdown.step_ms();
    let shares = b
        .breakdown
        .phases
        .iter()
        .map(|p| {
            let Rgb(r, gr, bl) = phase_colour(p.phase);
            let percent = b.breakdown.percent_of_step(p.mean_ms);
            let text = format!("{}: {:.2} ms ({percent:.0}%)", p.phase.label(), p.mean_ms);
            (p.phase.label().to_owned(), (percent * 10.0).round() / 10.0, format!("rgb({r},{gr},{bl})"), text)
        })
        .collect();
    let timed = b.entry.cell.throughput.map(|t| t.median_samples_per_s);
    PhaseRow {
        anchor: model::anchor(b.entry),
        configuration: g.label(b.entry),
        speedup: b.entry.comparison.map_or_else(|| "—".to_owned(), model::speedup_text),
        step: format!("{step_ms:.2} ms"),
        shares,
        change: b
            .reference
            .as_ref()
            .and_then(|r| largest_change(&b.breakdown, r))
            .unwrap_or_else(|| "—".to_owned()),
        instrumented: timed
            .filter(|t| *t > 0.0)
            .map_or_else(|| "—".to_owned(), |t| format!("{:.2}×", b.breakdown.samples_per_s / t)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::results::phases::PhaseTime;

    fn breakdown(phases: &[(StepPhase, f64)]) -> StepBreakdown {
        StepBreakdown {
            clock: PhaseClock::Host,
            steps: 3,
            phases: phases.iter().map(|&(phase, mean_ms)| PhaseTime { phase, mean_ms }).collect(),
            samples_per_s: 100.0,
        }
    }

    #[test]
    fn the_largest_change_is_the_phase_that_moved_most_in_milliseconds() {
        let (copy, fwd, reduce) = (StepPhase::HostToDevice, StepPhase::Forward, StepPhase::AllReduce);
        let before = breakdown(&[(copy, 2.0), (fwd, 10.0)]);
        let pinned = breakdown(&[(copy, 0.4), (fwd, 10.3)]);
        assert_eq!(largest_change(&pinned, &before).unwrap(), "to device -80% (2.00 → 0.40 ms)");
        let ddp = breakdown(&[(copy, 2.0), (fwd, 10.0), (reduce, 3.0)]);
        assert_eq!(largest_change(&ddp, &before).unwrap(), "all-reduce new (3.00 ms)");
        assert_eq!(largest_change(&before, &ddp).unwrap(), "all-reduce gone (3.00 ms → none)");
        assert_eq!(largest_change(&breakdown(&[]), &breakdown(&[])), None);
    }
}
