//! Which figures a report has, built as chart specifications from the view model.

mod effects;
mod factorial;
mod glance;
mod history;
mod phases;
mod stack;
mod sweep;
mod tta;

use crate::report::compare::Comparison;
use crate::report::history::History;
use crate::report::model::{self, Entry, Group, Report};
use crate::report::overview::Overview;
use crate::report::plots::{BarChart, BarRow, Chart, Heatmap, Rgb, Scale};
use crate::tricks::TrickSet;

use crate::report::model::Effect;

/// A figure: its chart and how the report presents it.
pub(crate) struct Figure {
    /// Section of the report it belongs to.
    pub section: &'static str,
    /// File name stem under `plots/`.
    pub slug: String,
    /// Short title.
    pub title: String,
    /// How to read it.
    pub caption: String,
    /// The chart.
    pub chart: Chart,
}

/// Every figure of a report, group by group, each group's first screen `overviews` beside it.
pub(crate) fn report_figures(report: &Report, overviews: &[Overview]) -> Vec<Figure> {
    let mut figures = Vec::new();
    for (g, o) in report.groups.iter().zip(overviews) {
        figures.extend(glance::figure(report.results, g, o));
        figures.extend(factorial::figure(report.results, g));
        let confidence = report.results[g.entries[0].file].run.protocol.confidence_level;
        let chains = stack::chains(g);
        let links: Vec<&Entry> = chains.iter().flat_map(|(_, chain)| chain.iter().copied()).collect();
        let stacked = (!chains.is_empty()).then_some(links.as_slice());
        figures.extend(effects::speedup(g, confidence, stacked));
        figures.extend(phases::figure(g));
        figures.extend(effects::memory(g, stacked));
        figures.extend(tta::figures(g));
        figures.extend(chains.iter().filter_map(|(engine, chain)| stack::figure(g, *engine, chain)));
        figures.extend(sweep::figures(g));
        let file = &report.results[g.entries[0].file];
        for choice in file.speedrun.iter().filter(|c| c.workload == g.workload) {
            let combination: TrickSet = choice.combination.iter().copied().collect();
            let best = super::speedrun::best_single(file, choice)
                .map(|s| s.tricks.clone())
                .filter(|_| combination.len() > 1);
            let slug = super::speedrun::speedrun_slug(g, file, choice);
            figures.extend(tta::speedrun(g, choice, &combination, best.as_ref(), slug));
        }
    }
    figures
}

fn percent(level: f64) -> String {
    format!("{:.0}%", level * 100.0)
}

/// "No bar — not applicable: amp, tf32; failed: jit-fusion.", the cells without a bar grouped by
/// why; `None` when every cell has a bar.
fn footnote(what: &str, missing: &[(String, String)]) -> Option<String> {
    if missing.is_empty() {
        return None;
    }
    let mut reasons: Vec<(&str, Vec<&str>)> = Vec::new();
    for (label, why) in missing {
        match reasons.iter_mut().find(|(r, _)| r == why) {
            Some((_, labels)) => labels.push(label),
            None => reasons.push((why, vec![label])),
        }
    }
    let groups: Vec<String> =
        reasons.iter().map(|(why, labels)| format!("{why}: {}", labels.join(", "))).collect();
    Some(format!("{what} — {}.", groups.join("; ")))
}

/// The colour key of the effects present in `rows`, in a fixed order.
fn key(effects: &[Effect]) -> Vec<(Rgb, String)> {
    Effect::ALL
        .into_iter()
        .filter(|e| effects.contains(e))
        .map(|e| (e.colour(), e.label().to_owned()))
        .collect()
}

/// The history's figures: per workload and profile, each trick's effect across the versions.
pub(crate) fn history_figures(h: &History) -> Vec<Figure> {
    history::figures(h)
}

/// The comparison's heatmap and grouped bars.
pub(crate) fn comparison_figures(c: &Comparison) -> Vec<Figure> {
    if c.rows.is_empty() {
        return Vec::new();
    }
    let devices: Vec<String> = c.devices.iter().map(|d| d.label.clone()).collect();
    let heatmap = Heatmap {
        title: format!("Speed-up over each device's own baseline — {}", c.profile_text()),
        rows: c.rows.iter().map(|r| r.label.clone()).collect(),
        columns: devices.clone(),
        cells: c
            .rows
            .iter()
            .map(|r| {
                r.cells
                    .iter()
                    .zip(&devices)
                    .map(|(cell, d)| {
                        (
                            cell.speedup.map(|s| s.0),
                            cell.short_text(),
                            format!("{} on {d}: {}", r.label, cell.text()),
                        )
                    })
                    .collect()
            })
            .collect(),
    };
    vec![
        Figure {
            section: "compare",
            slug: "compare-heatmap".to_owned(),
            title: "Speed-up heatmap: tricks × devices".to_owned(),
            caption:
                "Each cell: the trick's speed-up on that device over the same device's baseline. Green is \
                      faster, red slower, white no change; grey cells were not measured there."
                    .to_owned(),
            chart: Chart::Heatmap(heatmap),
        },
        comparison_bars(c, &devices),
    ]
}

fn comparison_bars(c: &Comparison, devices: &[String]) -> Figure {
    let (mut rows, mut missing, mut effects) = (Vec::new(), Vec::new(), Vec::new());
    for r in &c.rows {
        let mut first = true;
        for (cell, device) in r.cells.iter().zip(devices) {
            let (Some((s, lo, hi)), Some(judged)) = (cell.speedup, &cell.judged) else {
                missing.push((r.label.clone(), format!("{} on {device}", cell.short_text())));
                continue;
            };
            let effect = judged.effect;
            effects.push(effect);
            rows.push(BarRow {
                label: if first { format!("{} · {device}", r.label) } else { device.clone() },
                base: 1.0,
                value: s,
                ci: Some((lo, hi)),
                colour: effect.colour(),
                note: format!("{s:.2}× [{lo:.2}, {hi:.2}]"),
                hover: format!("{} on {device}: {}", r.label, cell.text()),
                separator: first,
                segments: Vec::new(),
            });
            first = false;
        }
    }
    Figure {
        section: "compare",
        slug: "compare-bars".to_owned(),
        title: "Speed-up by trick and device".to_owned(),
        caption: "Each trick's speed-up on every device over that device's own baseline, with confidence \
                  intervals, on a log axis; right of 1× is faster. Colour: the trick's verdict on its own metric \
                  on that device (a memory trick by its peak memory)."
            .to_owned(),
        chart: Chart::Bars(BarChart {
            title: format!("Speed-up by trick and device — {}", c.profile_text()),
            x_label: "speed-up over the device's baseline (× throughput, log)".to_owned(),
            scale: Scale::Log,
            reference: Some((1.0, "baseline".to_owned())),
            rows,
            key: key(&effects),
            footnote: footnote("No bar", &missing),
        }),
    }
}

/// The label of a group's cell without its trick set: phase, batch size and seed where they vary.
fn suffix(g: &Group, e: &model::Entry) -> String {
    let full = g.label(e);
    let configuration = e.cell.key.configuration_label();
    full.strip_prefix(&configuration).unwrap_or("").to_owned()
}
