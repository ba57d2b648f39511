//! The factorial design's main-effects figure, in the style of the first screen's: each factor's
//! main effect on its own metric with its 95% interval, each engine's marker on the factor's row,
//! on a log axis where right is better, over the A/A noise band.

use crate::engine::Engine;
use crate::factorial::fraction::letter;
use crate::report::factorial::{analyses, figure_slug, FACTORIAL_SECTION};
use crate::report::gain::Gain;
use crate::report::model::Group;
use crate::report::plots::{Chart, DotChart, DotRow, Shape};
use crate::results::factorial::{FactorialAnalysis, MainEffect};
use crate::results::schema::Results;
use crate::summary::factorial::main_effect;
use crate::tricks::{Metric, Trick};

use super::glance::{dot_row, engines_of, noise_band, series, ENGINES_KEY, GAIN_AXIS};
use super::{footnote, key, Figure};

/// The main-effects figure of group `g`'s factorial designs in `results`; `None` where the group
/// has none, or no factor has an effect to draw.
pub(super) fn figure(results: &[Results], g: &Group) -> Option<Figure> {
    let designs = analyses(results, g);
    let factors = factors(&designs);
    let engines = engines_of(factors.iter().flat_map(|f| &f.gains));
    let drawn: Vec<&Factor> = factors.iter().filter(|f| !f.gains.is_empty()).collect();
    if drawn.is_empty() {
        return None;
    }
    let rows: Vec<DotRow> = drawn
        .iter()
        .map(|f| dot_row(&f.label, &f.gains, |e| aliases(&designs, e, f.trick), &engines))
        .collect();
    let missing: Vec<(String, String)> = factors
        .iter()
        .filter(|f| f.gains.is_empty())
        .map(|f| (f.label.clone(), "peak memory not measured".to_owned()))
        .collect();
    let effects: Vec<_> = drawn.iter().flat_map(|f| &f.gains).map(|x| x.effect).collect();
    let widest = designs.iter().filter_map(|a| a.noise_floor_half_width).reduce(f64::max);
    let chart = DotChart {
        title: format!("Each trick's main effect — {}", g.title()),
        x_label: GAIN_AXIS.to_owned(),
        reference: Some((1.0, "1×: no change".to_owned())),
        bands: widest.map(noise_band).into_iter().collect(),
        series: series(&engines),
        rows,
        key: key(&effects),
        ceiling_key: None,
        footnote: footnote("No marker", &missing),
    };
    Some(Figure {
        section: FACTORIAL_SECTION,
        slug: figure_slug(g),
        title: format!("Each trick's main effect — {}", g.title()),
        caption: caption(&drawn, &engines, designs.iter().any(|a| a.resolution.is_some())),
        chart: Chart::Dots(chart),
    })
}

/// A factor of the figure: a row.
struct Factor {
    /// The trick.
    trick: Trick,
    /// Its row's label ([`row_label`]).
    label: String,
    /// Each design's main effect of it, where it has one to draw.
    gains: Vec<Gain>,
}

/// The factors of `designs`, in the first design's letter order, then any the others add.
fn factors(designs: &[&FactorialAnalysis]) -> Vec<Factor> {
    let mut tricks: Vec<Trick> = Vec::new();
    for &t in designs.iter().flat_map(|a| &a.factors) {
        if !tricks.contains(&t) {
            tricks.push(t);
        }
    }
    tricks
        .into_iter()
        .map(|trick| Factor {
            trick,
            label: row_label(designs, trick),
            gains: designs.iter().filter_map(|a| gain(a, trick)).collect(),
        })
        .collect()
}

/// A factor's row label: its letter in the first design that varies it, and its name ("C ·
/// zero-grad-none").
fn row_label(designs: &[&FactorialAnalysis], trick: Trick) -> String {
    designs
        .iter()
        .find_map(|a| a.factors.iter().position(|&f| f == trick))
        .map_or_else(|| trick.to_string(), |i| format!("{} · {trick}", letter(i)))
}

/// The main effect of `trick` in `design`, on the trick's own metric: memory-judged factors on
/// their peak-memory ratio (`None` where that was not measured), the rest on throughput.
fn gain(design: &FactorialAnalysis, trick: Trick) -> Option<Gain> {
    let m: &MainEffect = design.main_effects.iter().find(|m| m.trick == trick)?;
    let estimate = if m.metric == Metric::Memory { m.memory? } else { m.throughput };
    Some(Gain {
        engine: design.engine,
        effect: main_effect(m),
        metric: m.metric,
        ratio: estimate.ratio,
        interval: Some((estimate.ci_low, estimate.ci_high)),
        ceiling: None,
    })
}

/// What `engine`'s hover over `trick` adds: the effects its main effect is aliased with.
fn aliases(designs: &[&FactorialAnalysis], engine: Engine, trick: Trick) -> String {
    let design = designs.iter().find(|a| a.engine == engine);
    let m = design.and_then(|a| a.main_effects.iter().find(|m| m.trick == trick));
    match m.map(|m| &m.aliased_with) {
        Some(words) if !words.is_empty() => format!("; aliased with {}", words.join(", ")),
        _ => String::new(),
    }
}

/// How to read the figure; `fraction` where a design is a fraction, its main effects aliased.
fn caption(drawn: &[&Factor], engines: &[(Engine, Shape)], fraction: bool) -> String {
    let mut text = String::from(
        "Each trick's main effect: the design's configurations with it on against those with it off, \
         averaged over the other tricks' settings, with its 95% interval over processes; colour is its \
         verdict",
    );
    text.push_str(if engines.len() > 1 { ENGINES_KEY } else { "." });
    if drawn.iter().any(|f| f.gains[0].metric == Metric::Memory) {
        text.push_str(" A memory trick stands at the peak without it ÷ with it; its note is with ÷ without.");
    }
    text.push_str(" Grey band: the paired A/A noise floor.");
    if fraction {
        text.push_str(" In a fraction each main effect is read together with its aliases (in its hover).");
    }
    text
}
