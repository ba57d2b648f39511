//! Which figures a report has, built as chart specifications from the view model.

mod compare;
mod effects;
mod factorial;
mod glance;
mod history;
mod phases;
mod stack;
mod sweep;
mod tta;

use crate::engine::Engine;
use crate::report::compare::glance::{MachineGlance, OnMachine, TrickAcross};
use crate::report::compare::Comparison;
use crate::report::history::History;
use crate::report::model::{self, Entry, Group, Report};
use crate::report::overview::Overview;
use crate::report::plots::{Chart, Heatmap, Rgb};
use crate::tricks::TrickSet;

use crate::report::model::Effect;

/// A qualitative palette that stays distinguishable for common colour-vision deficiencies
/// (Okabe–Ito, then Tol's muted colours).
pub(crate) const PALETTE: [Rgb; 12] = [
    Rgb(0, 114, 178),
    Rgb(213, 94, 0),
    Rgb(0, 158, 115),
    Rgb(204, 121, 167),
    Rgb(230, 159, 0),
    Rgb(86, 180, 233),
    Rgb(136, 34, 85),
    Rgb(68, 170, 153),
    Rgb(153, 153, 51),
    Rgb(51, 34, 136),
    Rgb(170, 68, 153),
    Rgb(221, 204, 119),
];

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

/// The comparison's figures: its first screen's figure of every trick on every machine, and for
/// three machines or more a heatmap of the same effects, tricks × machines.
pub(crate) fn comparison_figures(c: &Comparison, g: &MachineGlance) -> Vec<Figure> {
    let profile = c.profile_text();
    let mut figures: Vec<Figure> = compare::figure(g, &profile).into_iter().collect();
    if g.machines.len() >= 3 {
        figures.extend(comparison_heatmap(g, &profile));
    }
    figures
}

/// Tricks × machines (× engines where both ran), each cell how many times better the trick made
/// its own metric there; rows measured on some machine only.
fn comparison_heatmap(g: &MachineGlance, profile: &str) -> Option<Figure> {
    let rows: Vec<&TrickAcross> = g.rows.iter().filter(|r| r.has_effect()).collect();
    let engines = g.engines();
    if rows.is_empty() {
        return None;
    }
    let columns: Vec<(usize, Engine, String)> = (0..g.machines.len())
        .flat_map(|m| engines.iter().map(move |e| (m, *e)))
        .map(|(m, e)| {
            let name =
                if engines.len() > 1 { format!("{} · {e}", g.machines[m]) } else { g.machines[m].clone() };
            (m, e, name)
        })
        .collect();
    let cell = |r: &TrickAcross, (m, e, name): &(usize, Engine, String)| match r.on[*m].gain(*e) {
        Some(gain) => (
            Some(gain.factor()),
            format!("{:.2}×", gain.ratio),
            format!("{} on {name}: {}, {}", r.label(), gain.effect.label(), gain.text()),
        ),
        None => {
            let text = if matches!(r.on[*m], OnMachine::NotApplicable(_)) { "n/a" } else { "—" };
            (None, text.to_owned(), format!("{} on {name}: {text}", r.label()))
        }
    };
    let heatmap = Heatmap {
        title: format!("Each trick on every machine, on its own metric — {profile}"),
        rows: rows.iter().map(|r| compare::row_label(r)).collect(),
        columns: columns.iter().map(|c| c.2.clone()).collect(),
        cells: rows.iter().map(|r| columns.iter().map(|c| cell(r, c)).collect()).collect(),
    };
    Some(Figure {
        section: "compare",
        slug: "compare-heatmap".to_owned(),
        title: "Heatmap: tricks × machines".to_owned(),
        caption: "Each cell: how many times better the trick made its own metric on that machine (throughput, or \
                  peak memory for a memory trick), against the machine's own baseline; the text is the ratio as \
                  the metric reads it (a memory trick's peak ÷ its reference's). Green is better, red worse, white \
                  no change; grey: not measured or not applicable there."
            .to_owned(),
        chart: Chart::Heatmap(heatmap),
    })
}

/// The label of a group's cell without its trick set: phase, batch size and seed where they vary.
fn suffix(g: &Group, e: &model::Entry) -> String {
    let full = g.label(e);
    let configuration = e.cell.key.configuration_label();
    full.strip_prefix(&configuration).unwrap_or("").to_owned()
}
