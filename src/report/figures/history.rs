//! The history figures: per workload and profile, one small panel per trick cell with its effect
//! in each run, oldest first.

use crate::report::history::{History, Track};
use crate::report::model;
use crate::report::plots::{Chart, Panel, PanelChart, Slot};
use crate::tricks::Metric;

use super::{footnote, percent, Figure};

/// One figure per workload and profile, in the order the tracks come.
pub(crate) fn figures(h: &History) -> Vec<Figure> {
    let mut groups: Vec<(String, Vec<&Track>)> = Vec::new();
    for t in &h.tracks {
        let group = format!("{} · {} profile", t.key.workload, t.key.profile);
        match groups.iter_mut().find(|(g, _)| *g == group) {
            Some((_, tracks)) => tracks.push(t),
            None => groups.push((group, vec![t])),
        }
    }
    let confidence = h.comparison.results[0].run.protocol.confidence_level;
    groups.into_iter().filter_map(|(group, tracks)| figure(h, &group, &tracks, confidence)).collect()
}

fn figure(h: &History, group: &str, tracks: &[&Track], confidence: f64) -> Option<Figure> {
    let (drawn, never): (Vec<&Track>, Vec<&Track>) = tracks.iter().partition(|t| t.measured() > 0);
    if drawn.is_empty() {
        return None;
    }
    let batches = tracks.iter().map(|t| t.key.batch_size).collect::<std::collections::BTreeSet<_>>();
    let panels = drawn.iter().map(|t| panel(h, t, batches.len() > 1)).collect();
    let missing: Vec<(String, String)> = never
        .iter()
        .map(|t| (t.configuration.clone(), t.points.last().and_then(|p| p.clone().err()).unwrap_or_default()))
        .collect();
    let title = format!("Each trick's effect across versions — {group}");
    Some(Figure {
        section: "history",
        slug: format!("history-{}", model::slug(group)),
        title: title.clone(),
        caption: format!(
            "One panel per trick cell: its effect in each run, oldest left, against that run's own reference — the \
             speed-up for a trick judged by throughput, the peak-memory ratio for a memory trick — with its {} \
             bootstrap interval as a whisker, on a log axis of the panel's own; the grey line is 1×. A red step is a \
             change: the two intervals do not overlap (peak-memory ratios, which have no interval: more than 5% \
             apart). A word instead of a dot is a gap: that run did not measure the cell, or could not.",
            percent(confidence)
        ),
        chart: Chart::Panels(PanelChart {
            title,
            categories: h.versions.iter().map(|v| v.tick.clone()).collect(),
            key: h.versions.iter().map(|v| v.label.clone()).collect(),
            panels,
            footnote: footnote("Not measured in any run", &missing),
        }),
    })
}

fn panel(h: &History, t: &Track, with_batch: bool) -> Panel {
    let shifts = t.shifts();
    let changes: Vec<String> = shifts
        .iter()
        .enumerate()
        .filter(|(_, s)| s.changed())
        .map(|(i, s)| format!("{} {}→{}", s.arrow(), h.versions[i].tick, h.versions[i + 1].tick))
        .collect();
    let subtitle = if changes.is_empty() {
        match t.metric {
            Metric::Memory => "peak-memory ratio".to_owned(),
            Metric::EvalThroughput => "eval speed-up".to_owned(),
            _ => "speed-up".to_owned(),
        }
    } else {
        format!("changed: {}", changes.join(", "))
    };
    let slots = t
        .points
        .iter()
        .zip(&h.versions)
        .map(|(p, v)| match p {
            Ok(p) => Slot::Value {
                value: p.value,
                interval: p.interval,
                hover: format!("{} at {}: {}", t.label, v.label, p.text()),
            },
            Err(why) => Slot::Gap { label: why.clone(), hover: format!("{} at {}: {why}", t.label, v.label) },
        })
        .collect();
    Panel {
        title: if with_batch {
            format!("{} · b{}", t.configuration, t.key.batch_size)
        } else {
            t.configuration.clone()
        },
        flagged: !changes.is_empty(),
        subtitle,
        colour: t.colour,
        slots,
        changed: shifts.iter().map(|s| s.changed()).collect(),
    }
}
