//! Batch sweeps: throughput and peak memory against batch size, from the memory probes and the
//! training cells, with a marker where a configuration ran out of memory.

use std::collections::{BTreeMap, BTreeSet};

use crate::engine::Engine;
use crate::report::model::{self, Entry, Group};
use crate::report::plots::{Chart, LineChart, Mark, Rgb, Series};
use crate::results::schema::{CellKind, CellStatus, Phase};
use crate::tricks::{Trick, TrickSet};

use super::Figure;

const MIB: f64 = 1024.0 * 1024.0;

/// The cells of one configuration (engine, trick set and seed) that say something about batch
/// size.
type Sweeps<'e, 'a> = BTreeMap<(Engine, TrickSet, u64), Vec<&'e Entry<'a>>>;

fn is_train(e: &Entry) -> bool {
    e.cell.key.kind == (CellKind::Throughput { phase: Phase::Train })
}

fn is_probe(e: &Entry) -> bool {
    e.cell.key.kind == CellKind::MemoryProbe
}

fn out_of_memory(e: &Entry) -> bool {
    matches!(e.cell.status, CellStatus::OutOfMemory { .. })
}

/// The configurations swept: those with memory probes or training cells at several batch sizes,
/// and the largest-batch trick, each with its probes and training cells (reference cells and the
/// A/A control and the cells measured alone left out).
fn sweeps<'e, 'a>(g: &'e Group<'a>) -> Sweeps<'e, 'a> {
    let mut batches: BTreeMap<&TrickSet, BTreeSet<usize>> = BTreeMap::new();
    for e in g.entries.iter().filter(|e| is_train(e) && e.cell.key.reference_for.is_none()) {
        batches.entry(&e.cell.key.tricks).or_default().insert(e.cell.key.batch_size);
    }
    let probed: BTreeSet<&TrickSet> =
        g.entries.iter().filter(|e| is_probe(e)).map(|e| &e.cell.key.tricks).collect();
    let mut sweeps: Sweeps = BTreeMap::new();
    for e in &g.entries {
        let k = &e.cell.key;
        let several = batches.get(&k.tricks).is_some_and(|b| b.len() >= 2);
        let swept = several || probed.contains(&k.tricks) || k.tricks.has(Trick::MaxBatch);
        if swept && (is_probe(e) || is_train(e)) && k.reference_for.is_none() && !k.aa_control && !k.alone {
            sweeps.entry((k.engine, k.tricks.clone(), k.seed)).or_default().push(e);
        }
    }
    for cells in sweeps.values_mut() {
        cells.sort_by_key(|e| e.cell.key.batch_size);
    }
    sweeps
}

fn mib(e: &Entry) -> Option<f64> {
    Some(e.cell.memory?.primary_bytes()? as f64 / MIB)
}

/// The memory points of a configuration: its probes where it has them (one process per batch
/// size, measuring just that), else its training cells.
fn memory_points(label: &str, cells: &[&Entry]) -> Vec<(f64, f64, String)> {
    let probes = cells.iter().any(|e| is_probe(e) && mib(e).is_some());
    cells
        .iter()
        .filter(|e| is_probe(e) == probes)
        .filter_map(|e| {
            let (b, m) = (e.cell.key.batch_size, mib(e)?);
            Some((b as f64, m, format!("{label} · b{b}: {m:.0} MiB peak ({})", e.cell.id())))
        })
        .collect()
}

fn throughput_points(label: &str, unit: &str, cells: &[&Entry]) -> Vec<(f64, f64, String)> {
    cells
        .iter()
        .filter(|e| is_train(e))
        .filter_map(|e| {
            let (b, t) = (e.cell.key.batch_size, e.cell.throughput?);
            let text = format!(
                "{label} · b{b}: {:.0} {unit}/s [{:.0}, {:.0}] ({})",
                t.median_samples_per_s,
                t.ci_low_samples_per_s,
                t.ci_high_samples_per_s,
                e.cell.id()
            );
            Some((b as f64, t.median_samples_per_s, text))
        })
        .collect()
}

fn distinct_batches<'s>(series: impl Iterator<Item = &'s Series>) -> usize {
    series.flat_map(|s| s.points.iter().map(|p| p.0 as u64)).collect::<BTreeSet<_>>().len()
}

/// The throughput and memory sweeps of a group, each drawn where it spans at least two batch sizes.
pub(super) fn figures(g: &Group) -> Vec<Figure> {
    let sweeps = sweeps(g);
    let several_seeds = sweeps.keys().map(|k| k.2).collect::<BTreeSet<_>>().len() > 1;
    let several_engines = g.has_several_engines();
    let unit = g.sample_unit();
    let (mut throughput, mut memory, mut marks) = (Vec::new(), Vec::new(), Vec::new());
    for ((engine, set, seed), cells) in &sweeps {
        let mut label = set.label();
        if several_engines {
            label = format!("{label} · {engine}");
        }
        if several_seeds {
            label = format!("{label} · s{seed}");
        }
        let colour: Rgb = model::set_colour(set);
        // The PyTorch engine's lines are dashed where both engines share a colour.
        let series = |points| Series {
            label: Some(label.clone()),
            colour,
            dashed: several_engines && !engine.is_libtorch(),
            bold: true,
            dots: true,
            points,
        };
        throughput.push(series(throughput_points(&label, unit, cells)));
        memory.push(series(memory_points(&label, cells)));
        if let Some(e) = cells.iter().find(|e| out_of_memory(e)) {
            let b = e.cell.key.batch_size;
            marks.push(Mark { x: b as f64, label: format!("{label}: out of memory at b{b}"), colour });
        }
    }
    throughput.retain(|s| !s.points.is_empty());
    memory.retain(|s| !s.points.is_empty());
    let mut figures = Vec::new();
    if distinct_batches(throughput.iter()) >= 2 {
        figures.push(throughput_figure(g, throughput, marks.clone()));
    }
    if distinct_batches(memory.iter()) >= 2 {
        figures.push(memory_figure(g, memory, marks));
    }
    figures
}

fn sweep_chart(title: String, y_label: String, series: Vec<Series>, marks: Vec<Mark>) -> Chart {
    Chart::Lines(LineChart {
        title,
        x_label: "batch size (samples per step, log scale)".to_owned(),
        y_label,
        x_log2: true,
        y_percent: false,
        y_range: None,
        x_max: None,
        series,
        target: None,
        marks,
    })
}

fn throughput_figure(g: &Group, series: Vec<Series>, marks: Vec<Mark>) -> Figure {
    let unit = g.sample_unit();
    Figure {
        section: "batch",
        slug: format!("batch-throughput-{}", g.slug()),
        title: format!("Batch sweep: throughput — {}", g.title()),
        caption: "Median training throughput of every training cell at its batch size, including the \
                  largest-batch configuration; a cross marks the batch size at which a configuration ran out of \
                  memory."
            .to_owned(),
        chart: sweep_chart(
            format!("Throughput vs batch size — {}", g.title()),
            format!("training throughput ({unit}/s)"),
            series,
            marks,
        ),
    }
}

fn memory_figure(g: &Group, series: Vec<Series>, marks: Vec<Mark>) -> Figure {
    Figure {
        section: "batch",
        slug: format!("batch-memory-{}", g.slug()),
        title: format!("Batch sweep: memory — {}", g.title()),
        caption: format!(
            "Peak memory at each batch size, measured as the {}: from the memory probes (one process per batch \
             size) where a configuration has them, else from its training cells. A cross marks the batch size at \
             which a configuration ran out of memory.",
            g.memory_label()
        ),
        chart: sweep_chart(
            format!("Peak memory vs batch size — {}", g.title()),
            "peak memory (MiB)".to_owned(),
            series,
            marks,
        ),
    }
}
