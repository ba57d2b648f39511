//! The stack design's waterfall: tricks switched on one after another, each step's throughput.

use std::collections::BTreeMap;

use crate::engine::Engine;
use crate::report::model::{engine_suffix, Entry, Group};
use crate::report::plots::{BarChart, BarRow, Chart, Scale};
use crate::results::schema::{CellKind, Phase};
use crate::tricks::{Trick, TrickSet};

use super::{Effect, Figure};

/// Training-throughput cells on `engine` that finished, by trick set, for one batch size and seed.
fn train_cells<'e, 'a>(
    g: &'e Group<'a>,
    engine: Engine,
    batch: usize,
    seed: u64,
) -> BTreeMap<&'e TrickSet, &'e Entry<'a>> {
    g.entries
        .iter()
        .filter(|e| {
            let k = &e.cell.key;
            is_link(e, engine) && k.batch_size == batch && k.seed == seed
        })
        .map(|e| (&e.cell.key.tricks, e))
        .collect()
}

/// Whether `e` can be a link of a chain on `engine`: a training-throughput cell of that engine
/// that finished, not a reference cell, the A/A control or a cell measured alone.
fn is_link(e: &Entry, engine: Engine) -> bool {
    let k = &e.cell.key;
    k.kind == (CellKind::Throughput { phase: Phase::Train })
        && k.engine == engine
        && k.reference_for.is_none()
        && !k.aa_control
        && !k.alone
        && e.cell.throughput.is_some()
}

/// The stack's chain on each engine that has one, PyTorch's first.
pub(super) fn chains<'e, 'a>(g: &'e Group<'a>) -> Vec<(Engine, Vec<&'e Entry<'a>>)> {
    [Engine::Pytorch, Engine::Libtorch]
        .into_iter()
        .filter_map(|engine| Some((engine, chain(g, engine)?)))
        .collect()
}

/// The stack design's chain on `engine`: baseline ⊂ {t1} ⊂ {t1, t2} ⊂ …, each step adding one
/// trick, ending at the largest trick set measured; `None` unless such a chain of at least two
/// steps exists.
/// Where several subsets were measured (the ablation's single tricks), the chain follows the
/// stack's order, best ablation speed-up first. Reference cells (the baseline with debugging on,
/// say) and the A/A control share the baseline's trick set but are never links of the chain.
fn chain<'e, 'a>(g: &'e Group<'a>, engine: Engine) -> Option<Vec<&'e Entry<'a>>> {
    let largest =
        g.entries.iter().filter(|e| is_link(e, engine)).max_by_key(|e| e.cell.key.tricks.iter().count())?;
    let cells = train_cells(g, engine, largest.cell.key.batch_size, largest.cell.key.seed);
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

/// One step of the waterfall: from the previous step's throughput to this one's.
fn step(e: &Entry, previous: Option<(&TrickSet, f64)>, base: f64, unit: &str) -> BarRow {
    let set = &e.cell.key.tricks;
    let value = e.cell.throughput.map_or(0.0, |t| t.median_samples_per_s);
    let added = previous.and_then(|(p, _)| set.iter().find(|t| !p.has(*t)));
    let label = added.map_or_else(|| "baseline".to_owned(), |t| format!("+ {t}"));
    let prev_value = previous.map_or(value, |p| p.1);
    let step_ratio = value / prev_value;
    let effect = match e.cell.throughput {
        Some(t) if previous.is_some() && t.ci_low_samples_per_s > prev_value => Effect::Helps,
        Some(t) if previous.is_some() && t.ci_high_samples_per_s < prev_value => Effect::Hurts,
        _ => Effect::Unmeasurable,
    };
    let note = if previous.is_some() {
        format!("{} {unit}/s · ×{step_ratio:.2} step · ×{:.2} total", value.round(), value / base)
    } else {
        format!("{} {unit}/s", value.round())
    };
    BarRow {
        hover: format!("{label}: {note} ({})", e.cell.id()),
        label,
        base: if previous.is_some() { prev_value } else { 0.0 },
        value,
        ci: e.cell.throughput.map(|t| (t.ci_low_samples_per_s, t.ci_high_samples_per_s)),
        colour: if previous.is_some() { effect.colour() } else { Effect::Unmeasurable.colour() },
        note,
        separator: false,
        segments: Vec::new(),
    }
}

/// The waterfall of `chain`, the stack on `engine`.
pub(super) fn figure(g: &Group, engine: Engine, chain: &[&Entry]) -> Option<Figure> {
    let unit = g.sample_unit();
    let base = chain.first()?.cell.throughput?.median_samples_per_s;
    let mut previous: Option<(&TrickSet, f64)> = None;
    let mut rows = Vec::new();
    for e in chain {
        rows.push(step(e, previous, base, unit));
        previous = Some((&e.cell.key.tricks, e.cell.throughput.map_or(0.0, |t| t.median_samples_per_s)));
    }
    let several = g.has_several_engines();
    let on = engine_suffix(engine, several);
    let title = format!("Stacking tricks{on} — {}", g.title());
    let key = vec![
        (Effect::Helps.colour(), "step faster".to_owned()),
        (Effect::Hurts.colour(), "step slower".to_owned()),
        (Effect::Unmeasurable.colour(), "no clear change".to_owned()),
    ];
    Some(Figure {
        section: "stack",
        slug: if several { format!("stack-{}-{engine}", g.slug()) } else { format!("stack-{}", g.slug()) },
        title: title.clone(),
        caption: "Training throughput as tricks are switched on one after another, top to bottom: each bar spans \
                  from the previous step's median throughput to this step's, whiskers are this step's confidence \
                  interval. Each note gives the step against the one before (×step) and against the baseline \
                  (×total); blue: the step's interval lies above the previous median, orange: below."
            .to_owned(),
        chart: Chart::Bars(BarChart {
            title,
            x_label: format!("training throughput ({unit}/s)"),
            scale: Scale::Linear,
            reference: None,
            rows,
            key,
            footnote: None,
        }),
    })
}
