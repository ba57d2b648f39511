//! The step-phase figure: one stacked bar per training-throughput cell with a breakdown, the mean
//! milliseconds of an instrumented step split into its phases.

use crate::report::model::Group;
use crate::report::phases::{broken_down, clock_text, phase_colour, BrokenDown};
use crate::report::plots::{BarChart, BarRow, BarSegment, Chart, Scale};
use crate::results::phases::StepPhase;

use super::Figure;

/// The figure of `g`'s step breakdowns (`None` when no cell has one).
pub(super) fn figure(g: &Group) -> Option<Figure> {
    let cells = broken_down(g);
    let first = cells.first()?;
    let clock = first.breakdown.clock;
    let rows: Vec<BarRow> = cells.iter().map(|b| row(g, b)).collect();
    let present: Vec<StepPhase> = StepPhase::ALL
        .into_iter()
        .filter(|&p| cells.iter().any(|b| b.breakdown.phase_ms(p).is_some()))
        .collect();
    let title = format!("Where a training step's time goes — {}", g.title());
    Some(Figure {
        section: "phases",
        slug: format!("phases-{}", g.slug()),
        title: title.clone(),
        caption: format!(
            "Each bar is the mean time of one training step in a window of steps run after the timed windows \
             with the phase marks recorded ({}), split into its phases; the median over the cell's processes. \
             A trick's speed-up shows as a shorter bar, and the part that shrank says why. Hover over a part \
             for its milliseconds and share.",
            clock_text(clock)
        ),
        chart: Chart::Bars(BarChart {
            title,
            x_label: "milliseconds per training step".to_owned(),
            scale: Scale::Linear,
            reference: None,
            rows,
            key: present.into_iter().map(|p| (phase_colour(p), p.label().to_owned())).collect(),
            footnote: None,
        }),
    })
}

fn row(g: &Group, b: &BrokenDown) -> BarRow {
    let label = g.label(b.entry);
    let step_ms = b.breakdown.step_ms();
    let segments = b
        .breakdown
        .phases
        .iter()
        .map(|p| BarSegment {
            value: p.mean_ms,
            colour: phase_colour(p.phase),
            hover: format!(
                "{label} · {}: {:.2} ms of {step_ms:.2} ms ({:.0}%)",
                p.phase.label(),
                p.mean_ms,
                b.breakdown.percent_of_step(p.mean_ms)
            ),
        })
        .collect();
    let speedup = b.entry.comparison.map(|c| format!(" · {:.2}×", c.speedup)).unwrap_or_default();
    BarRow {
        label: label.clone(),
        base: 0.0,
        value: step_ms,
        ci: None,
        colour: phase_colour(StepPhase::Forward),
        note: format!("{step_ms:.1} ms{speedup}"),
        hover: format!("{label}: {step_ms:.2} ms per step{speedup} ({})", b.entry.cell.id()),
        separator: false,
        segments,
    }
}
