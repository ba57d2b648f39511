//! A comparison's first screen and its table as the page and the Markdown summary show them: one
//! row per trick and workload, a column per machine with each engine's verdict, and what the
//! machines make of it.

use serde::Serialize;

use crate::engine::Engine;
use crate::report::model::{self, Effect};
use crate::report::overview::{NotApplicableGroup, VerdictRow};

use super::glance::{MachineFloors, MachineGlance, OnMachine, TrickAcross};

/// The first screen and the table.
#[derive(Debug, Serialize)]
pub(crate) struct GlanceView<'g> {
    /// The machines, a column each.
    pub machines: &'g [String],
    /// The answer in one sentence.
    pub sentence: &'g str,
    /// Where the runs were built from different code, which ran which.
    pub builds_differ: Option<&'g str>,
    /// One line per machine: its noise floors.
    pub floors: &'g [MachineFloors],
    /// The tricks that apply on no machine, by reason.
    pub nowhere: &'g [NotApplicableGroup],
    /// The same in one line, by the start of each reason: "needs a CUDA GPU: amp, tf32; …".
    pub nowhere_line: String,
    /// How many tricks apply on no machine.
    pub nowhere_count: usize,
    /// The rows, the effects that differ most between machines first.
    pub rows: Vec<RowView>,
}

/// One trick of one workload.
#[derive(Debug, Serialize)]
pub(crate) struct RowView {
    /// The trick as the reports label it.
    pub trick: String,
    /// The workload.
    pub workload: String,
    /// The metric it is judged by.
    pub metric: &'static str,
    /// Each machine's cell, in machine order.
    pub cells: Vec<CellView>,
    /// What the machines make of it ("helps everywhere").
    pub pattern: &'static str,
    /// CSS class of the pattern.
    pub class: &'static str,
    /// How far apart the machines' effects lie, where they differ: "1.26× apart on libtorch".
    pub apart: Option<String>,
}

/// One machine's verdicts on one trick.
#[derive(Debug, Serialize)]
pub(crate) struct CellView {
    /// Each engine's verdict (one line where the machine ran one engine).
    pub lines: Vec<LineView>,
    /// What stands in the cell instead, where the machine measured nothing: "not applicable",
    /// "not in this run".
    pub instead: Option<&'static str>,
    /// Why, where the trick does not apply on the machine.
    pub reason: Option<String>,
    /// Each engine's measured cause of a null or negative effect, where the run diagnosed one.
    pub why: Vec<String>,
}

/// One engine's verdict.
#[derive(Debug, Serialize)]
pub(crate) struct LineView {
    /// "in PyTorch", "on libtorch", or "" where the machine ran one engine.
    pub engine: &'static str,
    /// The verdict's words.
    pub badge: &'static str,
    /// The verdict's CSS class.
    pub class: &'static str,
    /// The effect on its metric in words.
    pub text: String,
}

impl<'g> GlanceView<'g> {
    /// The view of `g`.
    pub(crate) fn of(g: &'g MachineGlance) -> GlanceView<'g> {
        let causes = g.nowhere_by_cause();
        GlanceView {
            machines: &g.machines,
            sentence: &g.sentence,
            builds_differ: g.builds_differ.as_deref(),
            floors: &g.floors,
            nowhere: &g.nowhere,
            nowhere_line: causes
                .iter()
                .map(|(c, t)| format!("{c}: {}", t.join(", ")))
                .collect::<Vec<_>>()
                .join("; "),
            nowhere_count: causes.iter().map(|(_, t)| t.len()).sum(),
            rows: g.rows.iter().map(row).collect(),
        }
    }
}

fn row(r: &TrickAcross) -> RowView {
    let apart = r.apart_text();
    RowView {
        trick: r.trick.clone(),
        workload: r.workload.clone(),
        metric: r.metric.label(),
        cells: r.on.iter().map(cell).collect(),
        pattern: r.pattern.label(),
        class: match r.pattern {
            super::glance::Pattern::HelpsEverywhere => "faster",
            super::glance::Pattern::HurtsEverywhere => "slower",
            super::glance::Pattern::NoEffectAnywhere => "neutral",
            _ => "inconclusive",
        },
        apart,
    }
}

fn cell(side: &OnMachine) -> CellView {
    let (lines, why) = match side {
        OnMachine::Measured(row) => {
            (lines(row), row.why.iter().filter_map(|w| w.cause_short.clone()).collect())
        }
        OnMachine::NotApplicable(_) | OnMachine::Absent => (Vec::new(), Vec::new()),
    };
    let (instead, reason) = match side {
        OnMachine::Measured(_) => (None, None),
        OnMachine::NotApplicable(reason) => (Some("not applicable"), Some(reason.clone())),
        OnMachine::Absent => (Some("not in this run"), None),
    };
    CellView { lines, instead, reason, why }
}

/// Each engine's verdict of a machine's row: the row's own, and libtorch's beside it where the
/// machine ran both engines.
fn lines(row: &VerdictRow) -> Vec<LineView> {
    let own = |engine: &'static str| LineView {
        engine,
        badge: row.verdict.effect.label(),
        class: row.verdict.effect.class(),
        text: row.verdict.text.clone(),
    };
    match (&row.libtorch, row.only_on) {
        (None, None) => vec![own("")],
        (_, Some(engine)) => vec![own(model::engine_words(engine))],
        (Some(libtorch), _) => {
            let effect = row
                .gains
                .iter()
                .find(|g| g.engine == Engine::Libtorch)
                .map_or(Effect::NotMeasured, |g| g.effect);
            let text = libtorch.split_once(": ").map_or(libtorch.as_str(), |(_, text)| text).to_owned();
            vec![
                own(model::engine_words(Engine::Pytorch)),
                LineView {
                    engine: model::engine_words(Engine::Libtorch),
                    badge: effect.label(),
                    class: effect.class(),
                    text,
                },
            ]
        }
    }
}
