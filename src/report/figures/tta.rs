//! Time-to-accuracy figures: the metric's curves against training time, and the times to target.

use std::collections::{BTreeMap, BTreeSet};

use crate::engine::Engine;
use crate::report::model::{self, Entry, Group};
use crate::report::plots::{BarChart, BarRow, Chart, LineChart, Rgb, Scale, Series};
use crate::results::schema::{CellId, CellStatus, SpeedrunChoice, TimeToAccuracy};
use crate::tricks::{Trick, TrickSet};
use crate::vocabulary::QualityMetric;

use super::{footnote, Figure, PALETTE};

/// The baselines' colours (one per batch size): black and greys, dashed like every reference
/// configuration.
const BASELINES: [Rgb; 3] = [Rgb(33, 37, 41), Rgb(120, 125, 130), Rgb(180, 184, 188)];

/// A time-to-accuracy configuration: the cells of one trick set (or a trick's reference) and batch
/// size, one per seed.
type Configurations<'e, 'a> = BTreeMap<(TrickSet, Option<Trick>, usize), Vec<&'e Entry<'a>>>;

fn configurations<'e, 'a>(entries: &[&'e Entry<'a>]) -> Configurations<'e, 'a> {
    let mut map: Configurations = BTreeMap::new();
    for e in entries {
        let k = &e.cell.key;
        map.entry((k.tricks.clone(), k.reference_for, k.batch_size)).or_default().push(e);
    }
    map
}

fn config_label(set: &TrickSet, reference_for: Option<Trick>, batch: usize, batches: usize) -> String {
    let label = match reference_for.and_then(Trick::reference_label) {
        Some(reference) => format!("{}+{reference}", set.label()),
        None => set.label(),
    };
    if batches > 1 {
        format!("{label} · b{batch}")
    } else {
        label
    }
}

/// Colour and dash of every configuration: a trick and its own reference share a palette colour,
/// the reference dashed; the baseline is black and dashed.
fn styles(configs: &Configurations) -> BTreeMap<(TrickSet, Option<Trick>, usize), (Rgb, bool)> {
    let owner =
        |set: &TrickSet, reference_for: Option<Trick>| reference_for.or_else(|| model::single_trick(set));
    let owners: BTreeSet<Option<Trick>> = configs
        .keys()
        .filter(|(s, r, _)| !(s.is_baseline() && r.is_none()))
        .map(|(s, r, _)| owner(s, *r))
        .collect();
    let index: BTreeMap<Option<Trick>, usize> = owners.into_iter().enumerate().map(|(i, t)| (t, i)).collect();
    let mut baselines = 0;
    configs
        .keys()
        .map(|k| {
            let (set, reference_for, _) = k;
            let style = if set.is_baseline() && reference_for.is_none() {
                baselines += 1;
                (BASELINES[(baselines - 1) % BASELINES.len()], true)
            } else {
                let i = index.get(&owner(set, *reference_for)).copied().unwrap_or(0);
                (PALETTE[i % PALETTE.len()], reference_for.is_some() || i >= PALETTE.len())
            };
            (k.clone(), style)
        })
        .collect()
}

/// The median of `values` (which must not be empty).
fn median(mut values: Vec<f64>) -> f64 {
    values.sort_by(f64::total_cmp);
    let n = values.len();
    if n % 2 == 1 {
        values[n / 2]
    } else {
        (values[n / 2 - 1] + values[n / 2]) / 2.0
    }
}

/// The metric axis framed around the target: as far either side as the farthest best value of any
/// curve (at least 5% of the target), times 2.5, within the data and, for fractions, within 0–100%.
fn framed(metric: QualityMetric, target: f64, curves: &[&TimeToAccuracy]) -> (f64, f64) {
    let values = curves.iter().flat_map(|t| t.curve.iter().map(|p| p.metric));
    let (lo, hi) = values.fold((target, target), |(a, b), v| (a.min(v), b.max(v)));
    let reach =
        curves.iter().map(|t| (t.best_metric - target).abs()).filter(|d| d.is_finite()).fold(0.0, f64::max);
    let reach = reach.max(target.abs() * 0.05) * 2.5;
    let (mut a, mut b) = ((target - reach).max(lo), (target + reach).min(hi));
    if metric.is_fraction() {
        (a, b) = (a.max(0.0), b.min(1.0));
    }
    (a, b.max(a + 1e-6))
}

/// Where the time axis ends: 1.5 × the slowest time to the target among the curves that reached
/// it, where some other curve runs on beyond that; `None` (the whole data) otherwise.
fn time_frame(curves: &[&TimeToAccuracy]) -> Option<f64> {
    let slowest = curves
        .iter()
        .filter_map(|t| t.time_to_target_s)
        .fold(None, |m: Option<f64>, t| Some(m.map_or(t, |m| m.max(t))))?;
    let end = slowest * 1.5;
    let last = |t: &&TimeToAccuracy| t.curve.last().map_or(0.0, |p| p.train_s);
    curves.iter().any(|t| last(t) > end).then_some(end)
}

/// The configurations whose curves run past `end`, with how long they ran: "max-batch · b2048
/// (260 s)".
fn cut_curves(series: &[Series], end: f64) -> Vec<String> {
    series
        .iter()
        .filter_map(|s| {
            let (last, label) = (s.points.last()?.0, s.label.as_deref()?);
            (last > end).then(|| format!("{label} ({last:.0} s)"))
        })
        .collect()
}

fn point_hover(label: &str, metric: QualityMetric, train_s: f64, value: f64) -> String {
    format!("{label}: {} after {train_s:.1} s of training", metric.value_text(value))
}

fn curves_of(
    label: &str,
    colour: Rgb,
    dashed: bool,
    metric: QualityMetric,
    cells: &[(CellId, &TimeToAccuracy)],
) -> Vec<Series> {
    let curves: Vec<&TimeToAccuracy> = cells.iter().map(|c| c.1).collect();
    let mut series: Vec<Series> = cells
        .iter()
        .map(|(id, tta)| Series {
            label: (curves.len() == 1).then(|| label.to_owned()),
            colour,
            dashed,
            bold: curves.len() == 1,
            dots: curves.len() == 1,
            points: tta
                .curve
                .iter()
                .map(|p| {
                    (
                        p.train_s,
                        p.metric,
                        format!("{} ({id})", point_hover(label, metric, p.train_s, p.metric)),
                    )
                })
                .collect(),
        })
        .collect();
    if curves.len() > 1 {
        let len = curves.iter().map(|t| t.curve.len()).min().unwrap_or(0);
        let points = (0..len)
            .map(|i| {
                let x = median(curves.iter().map(|t| t.curve[i].train_s).collect());
                let y = median(curves.iter().map(|t| t.curve[i].metric).collect());
                (x, y, point_hover(&format!("{label} (median)"), metric, x, y))
            })
            .collect();
        series.push(Series {
            label: Some(format!("{label} (median of {} seeds)", curves.len())),
            colour,
            dashed,
            bold: true,
            dots: true,
            points,
        });
    }
    series
}

/// What a configuration's bar or footnote says when it did not reach the target.
fn unreached(metric: QualityMetric, cells: &[&Entry], curves: &[&TimeToAccuracy]) -> String {
    if let Some(e) = cells.iter().find(|e| e.cell.status != CellStatus::Ok) {
        return model::status_summary(&e.cell.status);
    }
    let best = curves.iter().map(|t| t.best_metric).fold(metric.worst(), |a, b| metric.better(a, b));
    if best.is_finite() {
        format!("target not reached, best {}", metric.value_text(best))
    } else {
        "target not reached".to_owned()
    }
}

/// The curves figure and the times-to-target figure of a group: one pair per engine where the
/// group trained on several (each engine's configurations against its own references).
pub(super) fn figures(g: &Group) -> Vec<Figure> {
    let entries = g.time_to_accuracy();
    let engines: BTreeSet<Engine> = entries.iter().map(|e| e.cell.key.engine).collect();
    if engines.len() < 2 {
        return engine_figures(g, &entries);
    }
    engines
        .into_iter()
        .flat_map(|engine| {
            let own: Vec<&Entry> = entries.iter().copied().filter(|e| e.cell.key.engine == engine).collect();
            engine_figures(g, &own).into_iter().map(move |f| Figure {
                slug: format!("{}-{}", f.slug, engine.id()),
                title: format!("{} ({})", f.title, model::engine_words(engine)),
                ..f
            })
        })
        .collect()
}

/// The curves figure and the times-to-target figure of `entries`, the time-to-accuracy cells of
/// `g` on one engine.
fn engine_figures(g: &Group, entries: &[&Entry]) -> Vec<Figure> {
    let Some(first) = entries.iter().find_map(|e| e.cell.time_to_accuracy.as_ref()) else {
        return Vec::new();
    };
    let metric = first.metric;
    let configs = configurations(entries);
    let styles = styles(&configs);
    let batches = configs.keys().map(|k| k.2).collect::<BTreeSet<_>>().len();
    let (mut series, mut rows, mut missing, mut all_curves) =
        (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    for (k, cells) in &configs {
        let (colour, dashed) = styles[k];
        let label = config_label(&k.0, k.1, k.2, batches);
        let curves: Vec<&TimeToAccuracy> =
            cells.iter().filter_map(|e| e.cell.time_to_accuracy.as_ref()).collect();
        let with_ids: Vec<(CellId, &TimeToAccuracy)> =
            cells.iter().filter_map(|e| Some((e.cell.id(), e.cell.time_to_accuracy.as_ref()?))).collect();
        series.extend(curves_of(&label, colour, dashed, metric, &with_ids));
        all_curves.extend(curves.iter().copied());
        let reached: Vec<f64> = curves.iter().filter_map(|t| t.time_to_target_s).collect();
        if reached.is_empty() {
            missing.push((label, unreached(metric, cells, &curves)));
            continue;
        }
        let time = median(reached.clone());
        let note = format!("{time:.1} s ({}/{} seeds)", reached.len(), cells.len());
        rows.push(BarRow {
            hover: format!("{label}: {note} reached the target"),
            label,
            base: 0.0,
            value: time,
            ci: None,
            colour,
            note,
            separator: false,
            segments: Vec::new(),
        });
    }
    rows.sort_by(|a, b| a.value.total_cmp(&b.value));
    let lines = "one line per configuration; a trick and its own reference share a colour, the reference \
                 dashed, and the baseline is black (grey at a second batch size) and dashed.";
    vec![curves_figure(g, first, series, &all_curves, lines), bars_figure(g, first, rows, &missing)]
}

/// The speedrun's curves figure of `choice`, named `slug`: the baseline's and `combination`'s
/// time-to-accuracy cells at its batch size on its engine, every seed, and those of `best_single`
/// (the quickest of the combination's tricks trained alone) when given; `None` before any has a
/// curve.
pub(super) fn speedrun(
    g: &Group,
    choice: &SpeedrunChoice,
    combination: &TrickSet,
    best_single: Option<&TrickSet>,
    slug: String,
) -> Option<Figure> {
    let mut sides = vec![(TrickSet::baseline(), "baseline".to_owned(), BASELINES[0], true)];
    if !combination.is_baseline() {
        sides.push((combination.clone(), "combination".to_owned(), PALETTE[0], false));
    }
    if let Some(best) = best_single {
        sides.push((best.clone(), format!("{} alone", best.label()), PALETTE[1], false));
    }
    let entries: Vec<&Entry> = g
        .time_to_accuracy()
        .into_iter()
        .filter(|e| {
            let k = &e.cell.key;
            k.reference_for.is_none()
                && k.batch_size == choice.batch_size
                && k.engine == choice.engine
                && sides.iter().any(|s| s.0 == k.tricks)
        })
        .collect();
    let first = entries.iter().find_map(|e| e.cell.time_to_accuracy.as_ref())?;
    let (mut series, mut curves) = (Vec::new(), Vec::new());
    for (tricks, label, colour, dashed) in &sides {
        let cells: Vec<(CellId, &TimeToAccuracy)> = entries
            .iter()
            .filter(|e| e.cell.key.tricks == *tricks)
            .filter_map(|e| Some((e.cell.id(), e.cell.time_to_accuracy.as_ref()?)))
            .collect();
        curves.extend(cells.iter().map(|c| c.1));
        series.extend(curves_of(label, *colour, *dashed, first.metric, &cells));
    }
    let lines = match (combination.is_baseline(), best_single) {
        (true, _) => {
            "the baseline black and dashed (no trick helped, so there is no combination).".to_owned()
        }
        (false, None) => {
            "the baseline black and dashed, the combination of the tricks that helped blue.".to_owned()
        }
        (false, Some(best)) => format!(
            "the baseline black and dashed, the combination of the tricks that helped blue, and {}, the \
             quickest of its tricks trained alone, vermilion.",
            best.label()
        ),
    };
    let figure = curves_figure(g, first, series, &curves, &lines);
    Some(Figure {
        section: "speedrun",
        slug,
        title: format!("Baseline and combination — {} ({})", g.title(), model::engine_words(choice.engine)),
        ..figure
    })
}

/// The curves figure of `series`, whose lines `lines` describes.
fn curves_figure(
    g: &Group,
    first: &TimeToAccuracy,
    series: Vec<Series>,
    curves: &[&TimeToAccuracy],
    lines: &str,
) -> Figure {
    let metric = first.metric;
    let percent = metric.is_fraction();
    let target_text = metric.value_text(first.target);
    let x_max = time_frame(curves);
    let cut = x_max.map_or_else(String::new, |end| {
        format!(
            " The time axis ends at {end:.0} s, 1.5× the slowest time to the target; longer runs are cut there: {} \
             (their best values are under the times-to-target figure).",
            cut_curves(&series, end).join(", ")
        )
    });
    Figure {
        section: "tta",
        slug: format!("tta-curves-{}", g.slug()),
        title: format!("Time-to-target curves — {}", g.title()),
        caption: format!(
            "{} on the held-out set against training time (evaluation excluded), {lines} With several seeds, thin lines are seeds and the bold line their median. The red \
             dashed line is the target ({target_text}); the axis is framed around it, so early points outside \
             the frame are clipped.{cut}",
            metric.words()
        ),
        chart: Chart::Lines(LineChart {
            title: format!("Time to target — {}", g.title()),
            x_label: "training time, evaluation excluded (s)".to_owned(),
            y_label: format!("{}{}", metric.words(), if percent { " (%)" } else { "" }),
            x_log2: false,
            y_percent: percent,
            y_range: Some(framed(metric, first.target, curves)),
            x_max,
            series,
            target: Some((first.target, format!("target {target_text}"))),
            marks: Vec::new(),
        }),
    }
}

fn bars_figure(g: &Group, first: &TimeToAccuracy, rows: Vec<BarRow>, missing: &[(String, String)]) -> Figure {
    let target_text = first.metric.value_text(first.target);
    Figure {
        section: "tta",
        slug: format!("tta-bars-{}", g.slug()),
        title: format!("Time to target — {}", g.title()),
        caption: "Median training time until the target was first reached, over the seeds that reached it; \
                  configurations that never reached it are listed under the chart."
            .to_owned(),
        chart: Chart::Bars(BarChart {
            title: format!("Time to reach {target_text} — {}", g.title()),
            x_label: "time to target (s of training, median over seeds)".to_owned(),
            scale: Scale::Linear,
            reference: None,
            rows,
            key: Vec::new(),
            footnote: footnote("Did not reach the target", missing),
        }),
    }
}
