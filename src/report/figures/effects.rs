//! The effect figures: one bar per trick cell, its speed-up (or memory ratio) against its reference.

use crate::report::model::{self, Effect, Entry, Group, MEMORY_TOLERANCE};
use crate::report::plots::{BarChart, BarRow, Chart, Scale};
use crate::tricks::{Metric, Trick, TrickSet};

use super::{footnote, key, percent, suffix, Figure};

/// The trick a memory-judged cell stands for.
fn memory_trick(set: &TrickSet) -> Option<Trick> {
    model::single_trick(set).filter(|t| t.metric() == Metric::Memory)
}

/// The cell a comparison measured `e` against.
fn reference<'e, 'a>(g: &'e Group<'a>, e: &Entry) -> Option<&'e Entry<'a>> {
    let id = &e.comparison?.baseline;
    g.entries.iter().find(|x| &x.cell.id() == id)
}

/// A short label of what `e` changes against its reference: the trick's name in an ablation,
/// "all − t" in a leave-one-out, "+ t" for a step on top of other tricks, "all tricks" for the
/// full set against the baseline.
fn effect_label(g: &Group, e: &Entry) -> String {
    let set = &e.cell.key.tricks;
    let reference = reference(g, e).map_or_else(TrickSet::baseline, |r| r.cell.key.tricks.clone());
    let added: Vec<Trick> = set.iter().filter(|t| !reference.has(*t)).collect();
    let dropped: Vec<Trick> = reference.iter().filter(|t| !set.has(*t)).collect();
    if e.cell.key.aa_control {
        let floor =
            if e.cell.key.alone { "alone (noise floor of separate processes)" } else { "(noise floor)" };
        return format!("A/A control {floor}{}", suffix(g, e));
    }
    let largest = g.entries.iter().all(|x| x.cell.key.tricks.len() <= set.len());
    let base = match (added.as_slice(), dropped.as_slice()) {
        ([], [t]) => format!("all − {t}"),
        ([t], []) if reference.is_baseline() => t.to_string(),
        ([t], []) => format!("+ {t}"),
        ([t], [instead]) => format!("{t} vs {instead}"),
        _ if set.len() > 1 && largest => format!("all {} tricks", set.len()),
        _ => e.cell.key.configuration_label(),
    };
    format!("{base}{}", suffix(g, e))
}

/// The bar of a measured cell.
fn speedup_row(g: &Group, e: &Entry) -> Option<(BarRow, Effect)> {
    let c = e.comparison?;
    let memory = memory_trick(&e.cell.key.tricks).zip(c.memory_ratio);
    let effect = model::judged(e.cell, c, reference(g, e).map(|r| r.cell)).effect;
    let label = effect_label(g, e);
    let against = reference(g, e).map_or_else(|| "baseline".to_owned(), |r| r.cell.key.configuration_label());
    let note = match memory {
        Some((_, r)) => format!("{:.2}× speed · {r:.2}× memory", c.speedup),
        None => model::speedup_text(c),
    };
    let hover = format!("{label}: {note} against {against}, {} ({})", effect.label(), e.cell.id());
    let row = BarRow {
        label,
        base: 1.0,
        value: c.speedup,
        ci: Some((c.speedup_ci_low, c.speedup_ci_high)),
        colour: effect.colour(),
        note,
        hover,
        separator: false,
        segments: Vec::new(),
    };
    Some((row, effect))
}

/// Whether any measured cell's reference is a larger trick set (a leave-one-out design).
fn leaves_out(g: &Group, entries: &[&Entry]) -> bool {
    entries.iter().any(|e| model::leaves_out(e.cell, reference(g, e).map(|r| r.cell)))
}

fn speedup_caption(g: &Group, entries: &[&Entry], confidence: f64) -> String {
    let reference = if leaves_out(g, entries) {
        "Each \"all − t\" bar is the throughput with every trick on except t ÷ the throughput with all tricks \
         on (below 1× means dropping t costs speed); \"all N tricks\" is all tricks on against the baseline."
    } else if entries.iter().any(|e| e.cell.key.tricks.swapped_reference().is_some()) {
        "Each bar is the throughput with the trick ÷ that of its reference: the baseline, the trick's own \
         reference where it has one (debug-off against the baseline with the debugging APIs on), or for a \
         forced attention backend (\"sdpa-x vs flash-attention\") PyTorch's own choice of backend, in the \
         same precision (bf16 autocast on a GPU)."
    } else {
        "Each bar is the throughput with the trick ÷ that of its reference: the baseline, or the trick's own \
         reference where it has one (debug-off against the baseline with the debugging APIs on)."
    };
    format!(
        "{reference} Whiskers: the {} bootstrap confidence interval; log axis, so 0.5× and 2× lie equally far \
         from 1×. Colour: the trick's verdict, as in the table above; memory tricks (checkpointing, gradient \
         accumulation) are judged by their peak-memory ratio, printed next to their speed.",
        percent(confidence)
    )
}

/// The trick cells of a group except the stack's cumulative steps, which have their own figure,
/// then the A/A controls (the baseline against itself: the run's noise floors, paired and, where
/// the control was measured alone, of separate processes).
fn effect_entries<'e>(g: &'e Group, chain: Option<&[&Entry]>) -> Vec<&'e Entry<'e>> {
    let in_chain = |e: &Entry| {
        e.cell.key.tricks.iter().count() > 1
            && chain.is_some_and(|c| c.iter().any(|x| x.cell.id() == e.cell.id()))
    };
    let control = g.entries.iter().filter(|e| e.cell.key.aa_control && e.comparison.is_some());
    g.trick_throughput().into_iter().filter(|e| !in_chain(e)).chain(control).collect()
}

/// The speed-up figure: every trick cell with a measurement except the stack's cumulative steps.
pub(super) fn speedup(g: &Group, confidence: f64, chain: Option<&[&Entry]>) -> Option<Figure> {
    let entries = effect_entries(g, chain);
    if entries.is_empty() {
        return None;
    }
    let (mut rows, mut effects, mut missing) = (Vec::new(), Vec::new(), Vec::new());
    for e in &entries {
        match speedup_row(g, e) {
            Some((row, effect)) => {
                rows.push(row);
                effects.push(effect);
            }
            None => missing.push((g.label(e), model::status_summary(&e.cell.status))),
        }
    }
    if rows.is_empty() {
        return None;
    }
    let title = format!("Speed-up per trick — {}", g.title());
    Some(Figure {
        section: "speedup",
        slug: format!("speedup-{}", g.slug()),
        title: title.clone(),
        caption: speedup_caption(g, &entries, confidence),
        chart: Chart::Bars(BarChart {
            title,
            x_label: format!("speed-up (× throughput, log axis, {} CI)", percent(confidence)),
            scale: Scale::Log,
            reference: Some((1.0, "1× (reference)".to_owned())),
            rows,
            key: key(&effects),
            footnote: super::footnote("No bar", &missing),
        }),
    })
}

/// The memory figure: each trick cell's peak memory ÷ that of its reference.
pub(super) fn memory(g: &Group, chain: Option<&[&Entry]>) -> Option<Figure> {
    let ratio = |e: &Entry| e.comparison.and_then(|c| c.memory_ratio);
    let mut entries = effect_entries(g, chain);
    if !entries.iter().any(|e| ratio(e).is_some()) {
        return None;
    }
    entries.sort_by(|a, b| ratio(a).unwrap_or(f64::INFINITY).total_cmp(&ratio(b).unwrap_or(f64::INFINITY)));
    let (mut rows, mut missing, mut effects) = (Vec::new(), Vec::new(), Vec::new());
    for e in &entries {
        let label = effect_label(g, e);
        let Some(r) = ratio(e) else {
            missing.push((label, model::status_summary(&e.cell.status)));
            continue;
        };
        let effect = model::ratio_effect(1.0 / r, MEMORY_TOLERANCE);
        effects.push(effect);
        let colour = effect.colour();
        rows.push(BarRow {
            hover: format!("{label}: {r:.3}× the reference's peak memory"),
            label,
            base: 1.0,
            value: r,
            ci: None,
            colour,
            note: format!("{r:.2}×"),
            separator: false,
            segments: Vec::new(),
        });
    }
    let what = g.memory_label();
    let title = format!("Peak memory per trick — {}", g.title());
    Some(Figure {
        section: "memory",
        slug: format!("memory-{}", g.slug()),
        title: title.clone(),
        caption: format!(
            "Peak memory of each trick cell ÷ that of its reference, measured as the {what}; left of 1× uses \
             less memory. Colour: less memory (at least 5% less) helps, more hurts, within 5% no measurable \
             effect, whatever the trick is judged by. Log axis."
        ),
        chart: Chart::Bars(BarChart {
            title,
            x_label: "peak memory (× reference, log axis)".to_owned(),
            scale: Scale::Log,
            reference: Some((1.0, "1× (reference)".to_owned())),
            rows,
            key: vec![
                (Effect::Helps.colour(), "at least 5% less memory".to_owned()),
                (Effect::Hurts.colour(), "at least 5% more".to_owned()),
                (Effect::Unmeasurable.colour(), "within 5%".to_owned()),
            ]
            .into_iter()
            .filter(|(colour, _)| effects.iter().any(|e| e.colour() == *colour))
            .collect(),
            footnote: footnote("No bar", &missing),
        }),
    })
}
