//! Which figures a report has, built as chart specifications from the view model.

use std::collections::BTreeMap;

use crate::report::compare::Comparison;
use crate::report::model::{self, Entry, Group, Report};
use crate::report::plots::{BarChart, BarRow, Chart, Heatmap, LineChart, Rgb, Series};
use crate::results::quality;
use crate::results::schema::{CellKind, CellStatus, Phase, TimeToAccuracy};
use crate::tricks::{Trick, TrickSet};

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

/// Every figure of a report, group by group.
pub(crate) fn report_figures(report: &Report) -> Vec<Figure> {
    let mut figures = Vec::new();
    for g in &report.groups {
        let confidence = report.results[g.entries[0].file].run.protocol.confidence_level;
        figures.extend(speedup(g, confidence));
        figures.extend(memory(g));
        figures.extend(time_to_accuracy(g));
        figures.extend(stack(g));
        figures.extend(batch_sweep(g));
    }
    figures
}

fn percent(level: f64) -> String {
    format!("{:.0}%", level * 100.0)
}

fn speedup(g: &Group, confidence: f64) -> Option<Figure> {
    let entries = g.trick_throughput();
    if entries.is_empty() {
        return None;
    }
    let rows = entries
        .iter()
        .map(|e| BarRow {
            label: g.label(e),
            base: 1.0,
            value: e.comparison.map(|c| c.speedup),
            ci: e.comparison.map(|c| (c.speedup_ci_low, c.speedup_ci_high)),
            colour: model::set_colour(&e.cell.key.tricks),
            note: e.comparison.map_or_else(|| model::status_summary(&e.cell.status), model::speedup_text),
            separator: false,
        })
        .collect();
    Some(Figure {
        section: "speedup",
        slug: format!("speedup-{}", g.slug()),
        title: format!("Speed-up per trick — {}", g.title()),
        caption: format!(
            "Median throughput with the trick ÷ median throughput of the baseline, with the {} bootstrap \
             confidence interval as whiskers. Right of the grey line at 1.0 is faster. Cells without a \
             measurement say why.",
            percent(confidence)
        ),
        chart: Chart::Bars(BarChart {
            title: format!("Speed-up per trick — {}", g.title()),
            x_label: format!("speed-up over baseline (× throughput, {} CI)", percent(confidence)),
            reference: Some((1.0, "baseline".to_owned())),
            rows,
        }),
    })
}

fn memory(g: &Group) -> Option<Figure> {
    let mut entries = g.trick_throughput();
    let ratio = |e: &Entry| e.comparison.and_then(|c| c.memory_ratio);
    if !entries.iter().any(|e| ratio(e).is_some()) {
        return None;
    }
    entries.sort_by(|a, b| ratio(a).unwrap_or(f64::INFINITY).total_cmp(&ratio(b).unwrap_or(f64::INFINITY)));
    let rows = entries
        .iter()
        .map(|e| BarRow {
            label: g.label(e),
            base: 1.0,
            value: ratio(e),
            ci: None,
            colour: model::set_colour(&e.cell.key.tricks),
            note: match (ratio(e), &e.cell.status) {
                (Some(r), _) => format!("{r:.2}×"),
                (None, CellStatus::Ok) => "memory not recorded".to_owned(),
                (None, status) => model::status_summary(status),
            },
            separator: false,
        })
        .collect();
    let what = g.memory_label();
    Some(Figure {
        section: "memory",
        slug: format!("memory-{}", g.slug()),
        title: format!("Peak memory per trick — {}", g.title()),
        caption: format!(
            "The {what} of each trick cell ÷ that of the baseline; left of 1.0 uses less memory."
        ),
        chart: Chart::Bars(BarChart {
            title: format!("Peak memory relative to baseline — {}", g.title()),
            x_label: format!("{what} (× baseline; below 1 is less)"),
            reference: Some((1.0, "baseline".to_owned())),
            rows,
        }),
    })
}

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

fn metric_axis(tta: &TimeToAccuracy) -> (String, bool) {
    let percent = quality::is_fraction(&tta.metric);
    (format!("{}{}", quality::metric_words(&tta.metric), if percent { " (%)" } else { "" }), percent)
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

/// The colour of a configuration: its tricks' colour, or for a trick's reference that trick's
/// colour halfway to grey.
fn config_colour(set: &TrickSet, reference_for: Option<Trick>) -> Rgb {
    match reference_for {
        Some(t) => {
            let Rgb(r, g, b) = model::trick_colour(t);
            let grey = |c: u8| ((u16::from(c) + 127) / 2) as u8;
            Rgb(grey(r), grey(g), grey(b))
        }
        None => model::set_colour(set),
    }
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

fn time_to_accuracy(g: &Group) -> Vec<Figure> {
    let entries = g.time_to_accuracy();
    let Some(first) = entries.iter().find_map(|e| e.cell.time_to_accuracy.as_ref()) else {
        return Vec::new();
    };
    let configs = configurations(&entries);
    let batches = configs.keys().map(|k| k.2).collect::<std::collections::BTreeSet<_>>().len();
    let (y_label, y_percent) = metric_axis(first);
    let target_text = quality::value_text(&first.metric, first.target);
    let mut series = Vec::new();
    let mut rows = Vec::new();
    for ((set, reference_for, batch), cells) in &configs {
        let colour = config_colour(set, *reference_for);
        let label = config_label(set, *reference_for, *batch, batches);
        let curves: Vec<&TimeToAccuracy> =
            cells.iter().filter_map(|e| e.cell.time_to_accuracy.as_ref()).collect();
        for tta in &curves {
            series.push(Series {
                label: (curves.len() == 1).then(|| label.clone()),
                colour,
                bold: curves.len() == 1,
                dots: curves.len() == 1,
                points: tta.curve.iter().map(|p| (p.train_s, p.metric)).collect(),
            });
        }
        if curves.len() > 1 {
            let len = curves.iter().map(|t| t.curve.len()).min().unwrap_or(0);
            let points = (0..len)
                .map(|i| {
                    (
                        median(curves.iter().map(|t| t.curve[i].train_s).collect()),
                        median(curves.iter().map(|t| t.curve[i].metric).collect()),
                    )
                })
                .collect();
            series.push(Series {
                label: Some(format!("{label} (median of {} seeds)", curves.len())),
                colour,
                bold: true,
                dots: true,
                points,
            });
        }
        let reached: Vec<f64> = curves.iter().filter_map(|t| t.time_to_target_s).collect();
        let failed = cells.iter().find(|e| e.cell.status != CellStatus::Ok);
        let best = curves
            .iter()
            .map(|t| t.best_metric)
            .fold(quality::worst(&first.metric), |a, b| quality::better(&first.metric, a, b));
        let note = if !reached.is_empty() {
            format!(
                "{:.1} s ({}/{} seeds reached the target)",
                median(reached.clone()),
                reached.len(),
                cells.len()
            )
        } else if let Some(e) = failed {
            model::status_summary(&e.cell.status)
        } else if best.is_finite() {
            let best = quality::value_text(&first.metric, best);
            format!("target not reached (best {best})")
        } else {
            "target not reached".to_owned()
        };
        rows.push(BarRow {
            label,
            base: 0.0,
            value: (!reached.is_empty()).then(|| median(reached)),
            ci: None,
            colour,
            note,
            separator: false,
        });
    }
    rows.sort_by(|a, b| a.value.unwrap_or(f64::INFINITY).total_cmp(&b.value.unwrap_or(f64::INFINITY)));
    vec![
        Figure {
            section: "tta",
            slug: format!("tta-curves-{}", g.slug()),
            title: format!("Time-to-target curves — {}", g.title()),
            caption: format!(
                "{} on the held-out set against training time (evaluation excluded), one line per \
                 configuration; with several seeds, thin lines are seeds and the bold line their median. \
                 The dashed line is the target ({target_text}).",
                first.metric.replace('_', " ")
            ),
            chart: Chart::Lines(LineChart {
                title: format!("Time to target — {}", g.title()),
                x_label: "training time, evaluation excluded (s)".to_owned(),
                y_label,
                x_log2: false,
                y_percent,
                series,
                target: Some((first.target, format!("target {target_text}"))),
                x_marks: Vec::new(),
            }),
        },
        Figure {
            section: "tta",
            slug: format!("tta-bars-{}", g.slug()),
            title: format!("Time to target — {}", g.title()),
            caption:
                "Median training time until the target was first reached, over the seeds that reached it."
                    .to_owned(),
            chart: Chart::Bars(BarChart {
                title: format!("Time to reach {target_text} — {}", g.title()),
                x_label: "time to target (s of training, median over seeds)".to_owned(),
                reference: None,
                rows,
            }),
        },
    ]
}

/// Training-throughput cells that finished, by trick set, for one batch size and seed.
fn train_cells<'e, 'a>(g: &'e Group<'a>, batch: usize, seed: u64) -> BTreeMap<&'e TrickSet, &'e Entry<'a>> {
    g.entries
        .iter()
        .filter(|e| {
            let k = &e.cell.key;
            k.kind == (CellKind::Throughput { phase: Phase::Train })
                && k.batch_size == batch
                && k.seed == seed
                && k.reference_for.is_none()
                && !k.aa_control
                && e.cell.throughput.is_some()
        })
        .map(|e| (&e.cell.key.tricks, e))
        .collect()
}

/// The stack design's chain baseline ⊂ {t1} ⊂ {t1, t2} ⊂ …, each step adding one trick, ending at
/// the largest trick set measured; `None` unless such a chain of at least two steps exists.
/// Where several subsets were measured (the ablation's single tricks), the chain follows the
/// stack's order, best ablation speed-up first. Reference cells (the baseline with debugging on,
/// say) and the A/A control share the baseline's trick set but are never links of the chain.
fn stack_chain<'e, 'a>(g: &'e Group<'a>) -> Option<Vec<&'e Entry<'a>>> {
    let largest = g
        .entries
        .iter()
        .filter(|e| {
            let k = &e.cell.key;
            k.kind == (CellKind::Throughput { phase: Phase::Train })
                && k.reference_for.is_none()
                && !k.aa_control
                && e.cell.throughput.is_some()
        })
        .max_by_key(|e| e.cell.key.tricks.iter().count())?;
    let cells = train_cells(g, largest.cell.key.batch_size, largest.cell.key.seed);
    let mut chain = vec![largest];
    let mut current = &largest.cell.key.tricks;
    // The stack adds tricks in the order of their ablation speed-ups, so going down the chain the
    // trick removed at each step is the one whose own speed-up is the lowest.
    let alone = |t: Trick| {
        cells.get(&&TrickSet::only(t)).and_then(|e| e.comparison).map_or(f64::INFINITY, |c| c.speedup)
    };
    while !current.is_baseline() {
        let size = current.iter().count();
        let (set, entry) = cells
            .iter()
            .filter(|(set, _)| set.iter().count() + 1 == size && set.iter().all(|t| current.has(t)))
            .min_by(|(a, _), (b, _)| {
                let removed =
                    |set: &TrickSet| current.iter().find(|&t| !set.has(t)).map_or(f64::INFINITY, alone);
                removed(a).total_cmp(&removed(b))
            })?;
        chain.push(entry);
        current = set;
    }
    chain.reverse();
    (chain.len() >= 3).then_some(chain)
}

fn stack(g: &Group) -> Option<Figure> {
    let chain = stack_chain(g)?;
    let throughput = |e: &Entry| e.cell.throughput.map_or(0.0, |t| t.median_samples_per_s);
    let unit = g.workload.family().sample_unit();
    let base = throughput(chain[0]);
    let mut previous: Option<&TrickSet> = None;
    let mut prev_value = 0.0;
    let mut rows = Vec::new();
    for e in &chain {
        let set = &e.cell.key.tricks;
        let added = previous.and_then(|p| set.iter().find(|t| !p.has(*t)));
        let value = throughput(e);
        let t = e.cell.throughput;
        rows.push(BarRow {
            label: added.map_or_else(|| "baseline".to_owned(), |t| format!("+ {t}")),
            base: prev_value,
            value: Some(value),
            ci: t.map(|t| (t.ci_low_samples_per_s, t.ci_high_samples_per_s)),
            colour: added.map_or(model::set_colour(set), model::trick_colour),
            note: format!("{} {unit}/s (×{:.2} over baseline)", value.round(), value / base),
            separator: false,
        });
        previous = Some(set);
        prev_value = value;
    }
    Some(Figure {
        section: "stack",
        slug: format!("stack-{}", g.slug()),
        title: format!("Stacking tricks — {}", g.title()),
        caption: "Training throughput as tricks are switched on one after another (top to bottom); each bar \
                  spans from the previous step's throughput to this step's, with its confidence interval."
            .to_owned(),
        chart: Chart::Bars(BarChart {
            title: format!("Stacked tricks: cumulative throughput — {}", g.title()),
            x_label: format!("training throughput ({unit}/s)"),
            reference: None,
            rows,
        }),
    })
}

fn batch_sweep(g: &Group) -> Vec<Figure> {
    let mut sweeps: BTreeMap<(TrickSet, u64), Vec<&Entry>> = BTreeMap::new();
    for e in &g.entries {
        let k = &e.cell.key;
        let out_of_memory = matches!(e.cell.status, CellStatus::OutOfMemory { .. });
        let measured = k.kind == (CellKind::Throughput { phase: Phase::Train })
            && (e.cell.throughput.is_some() || out_of_memory);
        // A memory probe that ran out of memory marks where the sweep ends.
        if measured || (k.kind == CellKind::MemoryProbe && out_of_memory) {
            sweeps.entry((k.tricks.clone(), k.seed)).or_default().push(e);
        }
    }
    sweeps.retain(|_, cells| {
        let mut b: Vec<_> = cells.iter().map(|e| e.cell.key.batch_size).collect();
        b.sort_unstable();
        b.dedup();
        b.len() >= 3 || (b.len() >= 2 && cells.iter().any(|e| e.cell.status != CellStatus::Ok))
    });
    if sweeps.is_empty() {
        return Vec::new();
    }
    let several_seeds = sweeps.keys().map(|k| k.1).collect::<std::collections::BTreeSet<_>>().len() > 1;
    let mut throughput = Vec::new();
    let mut memory = Vec::new();
    let mut oom = Vec::new();
    for ((set, seed), cells) in &mut sweeps {
        cells.sort_by_key(|e| e.cell.key.batch_size);
        let label = if several_seeds { format!("{} · s{seed}", set.label()) } else { set.label() };
        let colour: Rgb = model::set_colour(set);
        let series = |points: Vec<(f64, f64)>| Series {
            label: Some(label.clone()),
            colour,
            bold: true,
            dots: true,
            points,
        };
        let batch = |e: &Entry| e.cell.key.batch_size as f64;
        throughput.push(series(
            cells.iter().filter_map(|e| Some((batch(e), e.cell.throughput?.median_samples_per_s))).collect(),
        ));
        memory.push(series(
            cells
                .iter()
                .filter_map(|e| Some((batch(e), e.cell.memory?.primary_bytes()? as f64 / (1024.0 * 1024.0))))
                .collect(),
        ));
        for e in cells.iter().filter(|e| matches!(e.cell.status, CellStatus::OutOfMemory { .. })) {
            oom.push((batch(e), format!("OOM ({})", set.label())));
        }
    }
    let line = |title: String, y_label: String, series: Vec<Series>| LineChart {
        title,
        x_label: "batch size (samples per step, log scale)".to_owned(),
        y_label,
        x_log2: true,
        y_percent: false,
        series,
        target: None,
        x_marks: oom.clone(),
    };
    vec![
        Figure {
            section: "batch",
            slug: format!("batch-throughput-{}", g.slug()),
            title: format!("Batch sweep: throughput — {}", g.title()),
            caption: "Median training throughput at each batch size; a red cross marks a batch size that ran out of memory."
                .to_owned(),
            chart: Chart::Lines(line(
                format!("Throughput vs batch size — {}", g.title()),
                format!("training throughput ({}/s)", g.workload.family().sample_unit()),
                throughput,
            )),
        },
        Figure {
            section: "batch",
            slug: format!("batch-memory-{}", g.slug()),
            title: format!("Batch sweep: memory — {}", g.title()),
            caption: format!(
                "The {} at each batch size; a red cross marks a batch size that ran out of memory.",
                g.memory_label()
            ),
            chart: Chart::Lines(line(
                format!("Peak memory vs batch size — {}", g.title()),
                format!("{} (MiB)", g.memory_label()),
                memory,
            )),
        },
    ]
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
            .map(|r| r.cells.iter().map(|cell| (cell.speedup.map(|s| s.0), cell.short_text())).collect())
            .collect(),
    };
    let mut bars = Vec::new();
    for r in &c.rows {
        for (i, (cell, device)) in r.cells.iter().zip(&devices).enumerate() {
            bars.push(BarRow {
                label: if i == 0 { format!("{} · {device}", r.label) } else { device.clone() },
                base: 1.0,
                value: cell.speedup.map(|s| s.0),
                ci: cell.speedup.map(|s| (s.1, s.2)),
                colour: model::set_colour(&r.key.tricks),
                note: cell.text(),
                separator: i == 0,
            });
        }
    }
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
        Figure {
            section: "compare",
            slug: "compare-bars".to_owned(),
            title: "Speed-up by trick and device".to_owned(),
            caption:
                "Each trick's speed-up on every device, with confidence intervals; right of 1.0 is faster."
                    .to_owned(),
            chart: Chart::Bars(BarChart {
                title: format!("Speed-up by trick and device — {}", c.profile_text()),
                x_label: "speed-up over the device's own baseline (× throughput)".to_owned(),
                reference: Some((1.0, "baseline".to_owned())),
                rows: bars,
            }),
        },
    ]
}
