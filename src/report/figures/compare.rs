//! The figure of a comparison's first screen: one row per trick and workload, on the metric the
//! trick is judged by, each machine's marker on each engine with its interval on a log axis where
//! right is better; a machine's markers share its colour, an engine's its shape, and each
//! machine's noise band lies behind its markers.

use crate::report::compare::glance::{MachineGlance, OnMachine, TrickAcross};
use crate::report::model::{self, Effect};
use crate::report::plots::{Band, Chart, Dot, DotChart, DotRow, Rgb, Shape};
use crate::tricks::Metric;

use super::glance::{engines_of, series, ENGINES_KEY, GAIN_AXIS};
use super::{footnote, Figure, PALETTE};

/// The file stem of the comparison's first-screen figure.
pub(crate) const SLUG: &str = "compare-at-a-glance";

/// The first-screen figure of comparison `g` (`profile`: its profiles in words); `None` where no
/// machine measured a trick.
pub(super) fn figure(g: &MachineGlance, profile: &str) -> Option<Figure> {
    let engines =
        engines_of(g.rows.iter().flat_map(|r| &r.on).filter_map(OnMachine::measured).flat_map(|r| &r.gains));
    let drawn: Vec<&TrickAcross> = g.rows.iter().filter(|r| r.has_effect()).collect();
    if drawn.is_empty() {
        return None;
    }
    let missing: Vec<(String, String)> = g
        .rows
        .iter()
        .filter(|r| !r.has_effect())
        .map(|r| (r.label(), r.pattern.label().to_owned()))
        .collect();
    let chart = DotChart {
        title: format!("Each trick on every machine — {profile}"),
        x_label: GAIN_AXIS.to_owned(),
        reference: Some((1.0, "1×: no change".to_owned())),
        bands: bands(g, engines.len()),
        series: g.machines.iter().flat_map(|_| series(&engines)).collect(),
        rows: drawn.iter().map(|r| row(r, &g.machines, &engines)).collect(),
        key: g.machines.iter().enumerate().map(|(m, name)| (colour(m), name.clone())).collect(),
        ceiling_key: None,
        footnote: footnote("No marker", &missing),
    };
    Some(Figure {
        section: "glance",
        slug: SLUG.to_owned(),
        title: "Every trick on every machine".to_owned(),
        caption: caption(
            engines.len() > 1,
            g.machines.len(),
            drawn.iter().any(|r| r.metric == Metric::Memory),
        ),
        chart: Chart::Dots(chart),
    })
}

/// Machine `m`'s colour: the palette's, in machine order, repeated past its end.
fn colour(m: usize) -> Rgb {
    PALETTE[m % PALETTE.len()]
}

/// `c` three quarters of the way to white: a band's fill.
fn tint(c: Rgb) -> Rgb {
    let light = |v: u8| (u16::from(v) + 3 * 255).div_ceil(4) as u8;
    Rgb(light(c.0), light(c.1), light(c.2))
}

/// Each machine's widest paired A/A floor, behind that machine's lines of every row.
fn bands(g: &MachineGlance, engines: usize) -> Vec<Band> {
    let engines = engines.max(1);
    g.floors
        .iter()
        .enumerate()
        .filter_map(|(m, f)| {
            let half = f.widest?;
            Some(Band {
                low: 1.0 - half,
                high: 1.0 + half,
                label: format!("{}: noise floor ±{:.1}%", f.machine, half * 100.0),
                fill: tint(colour(m)),
                series: Some((m * engines, m * engines + engines - 1)),
            })
        })
        .collect()
}

/// A row: each machine's marker on each engine, and a note of each machine's effects.
fn row(r: &TrickAcross, machines: &[String], engines: &[(crate::engine::Engine, Shape)]) -> DotRow {
    let label = row_label(r);
    let mut dots = Vec::new();
    let mut notes = Vec::new();
    for (m, (side, machine)) in r.on.iter().zip(machines).enumerate() {
        let mut values = Vec::new();
        for (e, (engine, _)) in engines.iter().enumerate() {
            let Some(gain) = side.gain(*engine) else {
                values.push(if matches!(side, OnMachine::NotApplicable(_)) { "n/a" } else { "—" }.to_owned());
                continue;
            };
            values.push(match r.metric {
                Metric::TimeToAccuracy => gain.text(),
                _ => format!("{:.2}×", gain.ratio),
            });
            dots.push(Dot {
                series: m * engines.len() + e,
                value: gain.factor(),
                ci: gain.factor_interval(),
                colour: colour(m),
                hover: format!(
                    "{} on {machine} {}: {}, {}",
                    r.label(),
                    model::engine_words(*engine),
                    gain.effect.label(),
                    gain.text()
                ),
                ceiling: None,
                hollow: !matches!(gain.effect, Effect::Helps | Effect::Hurts),
            });
        }
        notes.push(values.join(" · "));
    }
    let unit = if r.metric == Metric::Memory { " memory" } else { "" };
    DotRow { label, note: format!("{}{unit}", notes.join(" | ")), dots }
}

/// A row's label: the trick and workload, with its metric where that is not throughput.
pub(super) fn row_label(r: &TrickAcross) -> String {
    match r.metric {
        Metric::Memory => format!("{} · memory", r.label()),
        Metric::TimeToAccuracy => format!("{} · to target", r.label()),
        Metric::Throughput | Metric::EvalThroughput => r.label(),
    }
}

/// How to read the figure.
fn caption(two_engines: bool, machines: usize, memory: bool) -> String {
    let mut text = String::from(
        "Each trick on each machine at how many times better it made its own metric, against that machine's \
         own baseline, with its 95% interval where measured; colour is the machine",
    );
    text.push_str(if two_engines { ENGINES_KEY } else { "." });
    text.push_str(
        " A hollow marker is an effect the measurement cannot tell from none. Rows: the effects that differ \
         most between machines first.",
    );
    if memory {
        text.push_str(" Memory stands at the reference's peak ÷ the trick's; its note is the trick's ÷ the reference's.");
    }
    text.push_str(&format!(
        " Behind each machine's markers, its widest paired A/A noise floor. The note gives each machine's effects, {}.",
        if machines > 1 { "the machines in the legend's order, split by |" } else { "in the legend's order" }
    ));
    text
}
