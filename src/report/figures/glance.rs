//! The figure that opens each group's first screen: every trick's effect on its own metric, each
//! engine's marker on the trick's row, on a log axis where right is better, over the A/A noise
//! band. Its rows, legend and band also draw the factorial design's main effects.

use crate::engine::Engine;
use crate::report::gain::Gain;
use crate::report::html::GLANCE_SECTION;
use crate::report::model::{self, Group};
use crate::report::overview::{glance_slug, group_floors, widest_floor, Overview, VerdictRow, Why};
use crate::report::plots::{Band, Chart, Dot, DotChart, DotRow, DotSeries, Shape, NOISE_BAND};
use crate::results::schema::{MeasurementDesign, Results};
use crate::tricks::Metric;

use super::{footnote, key, Figure};

/// What a ceiling's tick means, in the figure's legend.
const CEILING_KEY: &str = "ceiling: the most the trick could give";

/// The axis of a figure whose markers stand at how many times better each trick made its metric.
pub(super) const GAIN_AXIS: &str = "× better on the trick's own metric, log (right of 1×: better)";

/// How a caption tells the engines' markers apart, where a figure has both.
pub(super) const ENGINES_KEY: &str = ", ● eager PyTorch, ◆ libtorch (the notes in that order).";

/// The engines in the order their markers are drawn in a row, with their shapes.
const SERIES: [(Engine, Shape); 2] = [(Engine::Pytorch, Shape::Circle), (Engine::Libtorch, Shape::Diamond)];

/// The first-screen figure of group `g`, whose first screen is `o`; `None` where no trick has an
/// effect to draw.
pub(super) fn figure(results: &[Results], g: &Group, o: &Overview) -> Option<Figure> {
    let engines = engines_of(o.rows.iter().flat_map(|r| &r.gains));
    let mut drawn: Vec<&VerdictRow> = o.rows.iter().filter(|r| !r.gains.is_empty()).collect();
    if drawn.is_empty() {
        return None;
    }
    drawn.sort_by(|a, b| lead(b).total_cmp(&lead(a)));
    let rows: Vec<DotRow> =
        drawn.iter().map(|r| dot_row(&r.trick, &r.gains, |e| why_of(r, e), &engines)).collect();
    let effects: Vec<_> = drawn.iter().flat_map(|r| &r.gains).map(|x| x.effect).collect();
    let missing: Vec<(String, String)> =
        o.rows.iter().filter(|r| r.gains.is_empty()).map(|r| (r.trick.clone(), r.label.to_owned())).collect();
    let x_label = if o.leave_one_out {
        "throughput without the trick ÷ with every trick, log (right of 1×: removing it is faster)"
    } else {
        GAIN_AXIS
    };
    let ceilings = rows.iter().flat_map(|r| &r.dots).any(|d| d.ceiling.is_some());
    let chart = DotChart {
        title: format!("Each trick's effect — {}", g.title()),
        x_label: x_label.to_owned(),
        reference: Some((1.0, "1×: no change".to_owned())),
        bands: band(results, g).into_iter().collect(),
        series: series(&engines),
        rows,
        key: key(&effects),
        ceiling_key: ceilings.then(|| CEILING_KEY.to_owned()),
        footnote: footnote("No marker", &missing),
    };
    Some(Figure {
        section: GLANCE_SECTION,
        slug: glance_slug(g),
        title: format!("Every trick's effect — {}", g.title()),
        caption: caption(&drawn, engines.len() > 1, ceilings),
        chart: Chart::Dots(chart),
    })
}

/// The engines among [`SERIES`] that measured one of `gains`, each with its marker's shape, in
/// the order their markers are drawn.
pub(super) fn engines_of<'g>(gains: impl Iterator<Item = &'g Gain>) -> Vec<(Engine, Shape)> {
    let measured: Vec<Engine> = gains.map(|x| x.engine).collect();
    SERIES.into_iter().filter(|(e, _)| measured.contains(e)).collect()
}

/// The legend's series of `engines`.
pub(super) fn series(engines: &[(Engine, Shape)]) -> Vec<DotSeries> {
    engines
        .iter()
        .map(|(engine, shape)| DotSeries { name: engine_name(*engine).to_owned(), shape: *shape })
        .collect()
}

/// The shaded band of a paired A/A floor `half_width` wide (a fraction), behind every series.
pub(super) fn noise_band(half_width: f64) -> Band {
    Band {
        low: 1.0 - half_width,
        high: 1.0 + half_width,
        label: format!("noise floor (A/A), ±{:.1}%", half_width * 100.0),
        fill: NOISE_BAND,
        series: None,
    }
}

/// What an engine's marker of row `r` adds to its hover: its ceiling and cause, where known.
fn why_of(r: &VerdictRow, engine: Engine) -> String {
    r.why.iter().find(|w| w.engine == engine).map_or_else(String::new, why_text)
}

/// Where a row sorts: its first engine's factor (PyTorch's where both measured it).
fn lead(r: &VerdictRow) -> f64 {
    r.gains.first().map_or(1.0, Gain::factor)
}

/// A row of a figure in this figure's style: the trick (with its metric where that is not
/// throughput), a marker per engine of `engines` with its ceiling where known, and each engine's
/// effect as the metric reads it; `tail` continues an engine's hover text.
pub(super) fn dot_row(
    trick: &str,
    gains: &[Gain],
    tail: impl Fn(Engine) -> String,
    engines: &[(Engine, Shape)],
) -> DotRow {
    let metric = gains[0].metric;
    let label = match metric {
        Metric::Memory => format!("{trick} · memory"),
        Metric::TimeToAccuracy => format!("{trick} · to target"),
        Metric::Throughput | Metric::EvalThroughput => trick.to_owned(),
    };
    let mut dots = Vec::new();
    let mut notes = Vec::new();
    for (series, (engine, _)) in engines.iter().enumerate() {
        let Some(gain) = gains.iter().find(|x| x.engine == *engine) else {
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
                "{trick} {}: {}, {}{}",
                model::engine_words(*engine),
                gain.effect.label(),
                gain.text(),
                tail(*engine)
            ),
            ceiling: gain.ceiling,
            hollow: false,
        });
    }
    let unit = match metric {
        Metric::Memory => " memory",
        Metric::Throughput | Metric::EvalThroughput | Metric::TimeToAccuracy => "",
    };
    DotRow { label, note: format!("{}{unit}", notes.join(" · ")), dots }
}

/// An engine's ceiling and cause as a hover text continues its effect: "; ceiling: the optimizer
/// and zeroing 4.0% of the step: at most 1.04×; cause: bound elsewhere: …".
fn why_text(why: &Why) -> String {
    let cause = why.cause_short.as_ref().map_or_else(String::new, |c| format!("; cause: {c}"));
    format!("; ceiling: {}{cause}", why.ceiling)
}

/// The shaded band: the widest paired A/A floor of the group's engines and files, where one was
/// measured.
fn band(results: &[Results], g: &Group) -> Option<Band> {
    widest_floor(&group_floors(results, g), MeasurementDesign::Paired, None).map(noise_band)
}

/// How to read the figure; `ceilings` where a marker has its ceiling's tick.
fn caption(drawn: &[&VerdictRow], two_engines: bool, ceilings: bool) -> String {
    let mut text = String::from(
        "Each trick at how many times better it made its own metric, with its 95% interval where measured; \
         colour is its verdict",
    );
    text.push_str(if two_engines { ENGINES_KEY } else { "." });
    let metrics: Vec<Metric> = drawn.iter().map(|r| r.gains[0].metric).collect();
    if metrics.contains(&Metric::Memory) {
        text.push_str(" Memory stands at the reference's peak ÷ the trick's; its note is the trick's ÷ the reference's.");
    }
    if metrics.contains(&Metric::TimeToAccuracy) {
        text.push_str(" A convergence trick stands at the reference's time to the target ÷ its own.");
    }
    text.push_str(" Grey band: the paired A/A noise floor.");
    if ceilings {
        text.push_str(
            " A dark tick at a marker's height is that engine's ceiling: the most the trick could give, \
             were the part of the step it acts on to take no time.",
        );
    }
    text
}

/// The engine as the legend names it.
fn engine_name(engine: Engine) -> &'static str {
    match engine {
        Engine::Pytorch => "eager PyTorch",
        Engine::Libtorch => "libtorch",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::model::{Effect, TrickVerdict};

    fn gain(engine: Engine, ratio: f64, ceiling: Option<f64>) -> Gain {
        let (effect, metric, interval) =
            (Effect::Unmeasurable, Metric::Throughput, Some((ratio - 0.02, ratio + 0.02)));
        Gain { engine, effect, metric, ratio, interval, ceiling }
    }

    #[test]
    fn each_engines_marker_carries_its_ceiling_and_says_it_with_its_cause() {
        let effect = Effect::Unmeasurable;
        let row = VerdictRow {
            trick: "zero-grad-none".to_owned(),
            metric: Metric::Throughput.label(),
            verdict: TrickVerdict { effect, text: "1.01× throughput [0.99, 1.03] (paired)".to_owned() },
            label: effect.label(),
            class: effect.class(),
            anchor: "cell-zero-grad-none".to_owned(),
            libtorch: None,
            disagreement: None,
            only_on: None,
            kernels: None,
            gains: vec![gain(Engine::Pytorch, 1.01, Some(1.04)), gain(Engine::Libtorch, 0.99, None)],
            why: vec![Why {
                engine: Engine::Pytorch,
                ceiling: "the optimizer and zeroing 4.0% of the step: at most 1.04×".to_owned(),
                cause_short: Some("bound elsewhere: at most 1.04× inside ±2.3%".to_owned()),
                cause_name: Some("bound elsewhere"),
                cause: Some("Bound elsewhere: …".to_owned()),
            }],
        };
        let drawn = dot_row(&row.trick, &row.gains, |e| why_of(&row, e), &SERIES);
        let (pytorch, libtorch) = (&drawn.dots[0], &drawn.dots[1]);
        assert_eq!((pytorch.ceiling, libtorch.ceiling), (Some(1.04), None));
        assert!(
            pytorch.hover.ends_with(
                "; ceiling: the optimizer and zeroing 4.0% of the step: at most 1.04×; cause: bound elsewhere: \
                 at most 1.04× inside ±2.3%"
            ),
            "{}",
            pytorch.hover
        );
        assert!(!libtorch.hover.contains("ceiling"), "{}", libtorch.hover);
        let text = caption(&[&row], true, true);
        assert!(text.contains("A dark tick at a marker's height is that engine's ceiling"), "{text}");
        assert!(!caption(&[&row], true, false).contains("tick"));
    }
}
