//! The figure that opens each group's first screen: every trick's effect on its own metric, each
//! engine's marker on the trick's row, on a log axis where right is better, over the A/A noise
//! band.

use crate::engine::Engine;
use crate::report::gain::Gain;
use crate::report::html::GLANCE_SECTION;
use crate::report::model::{self, Group};
use crate::report::overview::{glance_slug, group_floors, widest_floor, Overview, VerdictRow};
use crate::report::plots::{Chart, Dot, DotChart, DotRow, DotSeries, Shape};
use crate::results::schema::{MeasurementDesign, Results};
use crate::tricks::Metric;

use super::{footnote, key, Figure};

/// The engines in the order their markers are drawn in a row, with their shapes.
const SERIES: [(Engine, Shape); 2] = [(Engine::Pytorch, Shape::Circle), (Engine::Libtorch, Shape::Diamond)];

/// The first-screen figure of group `g`, whose first screen is `o`; `None` where no trick has an
/// effect to draw.
pub(super) fn figure(results: &[Results], g: &Group, o: &Overview) -> Option<Figure> {
    let engines: Vec<(Engine, Shape)> = SERIES
        .into_iter()
        .filter(|(e, _)| o.rows.iter().flat_map(|r| &r.gains).any(|x| x.engine == *e))
        .collect();
    let mut drawn: Vec<&VerdictRow> = o.rows.iter().filter(|r| !r.gains.is_empty()).collect();
    if drawn.is_empty() {
        return None;
    }
    drawn.sort_by(|a, b| lead(b).total_cmp(&lead(a)));
    let rows: Vec<DotRow> = drawn.iter().map(|r| dot_row(r, &engines)).collect();
    let effects: Vec<_> = drawn.iter().flat_map(|r| &r.gains).map(|x| x.effect).collect();
    let missing: Vec<(String, String)> =
        o.rows.iter().filter(|r| r.gains.is_empty()).map(|r| (r.trick.clone(), r.label.to_owned())).collect();
    let series = engines
        .iter()
        .map(|(engine, shape)| DotSeries { name: engine_name(*engine).to_owned(), shape: *shape })
        .collect();
    let x_label = if o.leave_one_out {
        "throughput without the trick ÷ with every trick, log (right of 1×: removing it is faster)"
    } else {
        "× better on the trick's own metric, log (right of 1×: better)"
    };
    let chart = DotChart {
        title: format!("Each trick's effect — {}", g.title()),
        x_label: x_label.to_owned(),
        reference: Some((1.0, "1×: no change".to_owned())),
        band: band(results, g),
        series,
        rows,
        key: key(&effects),
        footnote: footnote("No marker", &missing),
    };
    Some(Figure {
        section: GLANCE_SECTION,
        slug: glance_slug(g),
        title: format!("Every trick's effect — {}", g.title()),
        caption: caption(&drawn, engines.len() > 1),
        chart: Chart::Dots(chart),
    })
}

/// Where a row sorts: its first engine's factor (PyTorch's where both measured it).
fn lead(r: &VerdictRow) -> f64 {
    r.gains.first().map_or(1.0, Gain::factor)
}

/// A row of the figure: the trick (with its metric where that is not throughput), a marker per
/// engine, and each engine's effect as the metric reads it.
fn dot_row(r: &VerdictRow, engines: &[(Engine, Shape)]) -> DotRow {
    let metric = r.gains[0].metric;
    let label = match metric {
        Metric::Memory => format!("{} · memory", r.trick),
        Metric::TimeToAccuracy => format!("{} · to target", r.trick),
        Metric::Throughput | Metric::EvalThroughput => r.trick.clone(),
    };
    let mut dots = Vec::new();
    let mut notes = Vec::new();
    for (series, (engine, _)) in engines.iter().enumerate() {
        let Some(gain) = r.gains.iter().find(|x| x.engine == *engine) else {
            notes.push("—".to_owned());
            continue;
        };
        notes.push(match metric {
            Metric::TimeToAccuracy => gain.text(),
            _ => format!("{:.2}×", gain.ratio),
        });
        dots.push(Dot {
            series,
            value: gain.factor(),
            ci: gain.factor_interval(),
            colour: gain.effect.colour(),
            hover: format!(
                "{} {}: {}, {}",
                r.trick,
                model::engine_words(*engine),
                gain.effect.label(),
                gain.text()
            ),
        });
    }
    let unit = match metric {
        Metric::Memory => " memory",
        Metric::Throughput | Metric::EvalThroughput | Metric::TimeToAccuracy => "",
    };
    DotRow { label, note: format!("{}{unit}", notes.join(" · ")), dots }
}

/// The shaded band: the widest paired A/A floor of the group's engines and files, where one was
/// measured.
fn band(results: &[Results], g: &Group) -> Option<(f64, f64, String)> {
    let widest = widest_floor(&group_floors(results, g), MeasurementDesign::Paired, None)?;
    Some((1.0 - widest, 1.0 + widest, format!("noise floor (A/A), ±{:.1}%", widest * 100.0)))
}

/// How to read the figure.
fn caption(drawn: &[&VerdictRow], two_engines: bool) -> String {
    let mut text = String::from(
        "Each trick at how many times better it made its own metric, with its 95% interval where measured; \
         colour is its verdict",
    );
    text.push_str(if two_engines {
        ", ● eager PyTorch, ◆ libtorch (the notes in that order)."
    } else {
        "."
    });
    let metrics: Vec<Metric> = drawn.iter().map(|r| r.gains[0].metric).collect();
    if metrics.contains(&Metric::Memory) {
        text.push_str(" Memory stands at the reference's peak ÷ the trick's; its note is the trick's ÷ the reference's.");
    }
    if metrics.contains(&Metric::TimeToAccuracy) {
        text.push_str(" A convergence trick stands at the reference's time to the target ÷ its own.");
    }
    text.push_str(" Grey band: the paired A/A noise floor.");
    text
}

/// The engine as the legend names it.
fn engine_name(engine: Engine) -> &'static str {
    match engine {
        Engine::Pytorch => "eager PyTorch",
        Engine::Libtorch => "libtorch",
    }
}
