//! The largest batch that fits: every memory probe of a group, one row per trick set probed (the
//! baseline, and `checkpointing` or `expandable-segments` when they were) and engine (where a
//! group probed on both), with the batches tried and where the doubling stopped.

use serde::Serialize;

use crate::engine::Engine;
use crate::report::model::{self, Entry, Group, Report};
use crate::results::schema::{CellKind, CellStatus, Results};
use crate::tricks::TrickSet;

/// The probes of one group.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct ProbeTable {
    /// The group's title.
    pub group: String,
    /// The memory a batch had to fit in: "the run's memory budget of 2048 MiB
    /// (--memory-budget-mib)", or "the device's own memory".
    pub within: String,
    /// One row per trick set probed, the baseline first.
    pub rows: Vec<ProbeRow>,
}

/// One trick set's probes.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct ProbeRow {
    /// The trick set ("baseline", "expandable-segments").
    pub configuration: String,
    /// The largest batch whose probe ran ("—" when none did).
    pub largest: String,
    /// Where the doubling stopped: "1024: out of memory", or that it reached the largest batch
    /// tried.
    pub stopped: String,
    /// Every batch tried with its outcome, smallest first ("64 ✓ · 128 ✓ · 256 ✗").
    pub tried: String,
}

/// The probe table of every group that ran memory probes.
pub(crate) fn tables(report: &Report) -> Vec<ProbeTable> {
    report
        .groups
        .iter()
        .map(|g| ProbeTable { group: g.title(), within: within(report.results, g), rows: rows(g) })
        .filter(|t| !t.rows.is_empty())
        .collect()
}

/// The memory the probes of `g` had to fit in, from the protocol of the run that probed them.
fn within(results: &[Results], g: &Group) -> String {
    let probe = g.entries.iter().find(|e| e.cell.key.kind == CellKind::MemoryProbe);
    let budget = probe.and_then(|e| results[e.file].run.protocol.memory_budget_bytes);
    match budget {
        Some(bytes) => format!("the run's memory budget of {} MiB (--memory-budget-mib)", bytes >> 20),
        None => "the device's own memory".to_owned(),
    }
}

/// The largest batch of the baseline that fitted on each engine that probed it, in a sentence
/// for the first screen ("The largest batch that fits: 128 in PyTorch, 128 on libtorch, within
/// …"); `None` where the group probed no baseline.
pub(crate) fn baseline_sentence(results: &[Results], g: &Group) -> Option<String> {
    let probes: Vec<&Entry> = g
        .entries
        .iter()
        .filter(|e| e.cell.key.kind == CellKind::MemoryProbe && e.cell.key.tricks.is_baseline())
        .collect();
    let mut engines: Vec<Engine> = probes.iter().map(|e| e.cell.key.engine).collect();
    engines.sort_by_key(|engine| engine.is_libtorch());
    engines.dedup();
    let largest = |engine: Engine| {
        let fitted = probes.iter().filter(|e| e.cell.key.engine == engine && e.cell.status == CellStatus::Ok);
        let batch = fitted.map(|e| e.cell.key.batch_size).max();
        format!(
            "{} {}",
            batch.map_or_else(|| "none".to_owned(), |b| b.to_string()),
            model::engine_words(engine)
        )
    };
    let each: Vec<String> = engines.iter().map(|&engine| largest(engine)).collect();
    (!each.is_empty())
        .then(|| format!("The largest batch that fits: {}, within {}.", each.join(", "), within(results, g)))
}

fn rows(g: &Group) -> Vec<ProbeRow> {
    let probes: Vec<&Entry> = g.entries.iter().filter(|e| e.cell.key.kind == CellKind::MemoryProbe).collect();
    let mut sets: Vec<(Engine, &TrickSet)> =
        probes.iter().map(|e| (e.cell.key.engine, &e.cell.key.tricks)).collect();
    // PyTorch's rows first, as the report gives its answers first.
    sets.sort_by_key(|&(engine, tricks)| (engine.is_libtorch(), tricks));
    sets.dedup();
    let engines = sets.iter().map(|(engine, _)| engine).collect::<std::collections::BTreeSet<_>>().len();
    sets.into_iter()
        .map(|(engine, tricks)| {
            let mut tried: Vec<&Entry> = probes
                .iter()
                .copied()
                .filter(|e| e.cell.key.engine == engine && &e.cell.key.tricks == tricks)
                .collect();
            tried.sort_by_key(|e| e.cell.key.batch_size);
            let configuration = match engines {
                1 => tricks.label(),
                _ => format!("{} {}", tricks.label(), model::engine_words(engine)),
            };
            row(configuration, &tried)
        })
        .collect()
}

fn row(configuration: String, tried: &[&Entry]) -> ProbeRow {
    let fits = |e: &Entry| e.cell.status == CellStatus::Ok;
    let largest = tried.iter().filter(|e| fits(e)).map(|e| e.cell.key.batch_size).max();
    let stopped = match tried.iter().find(|e| !fits(e)) {
        Some(e) => format!("{}: {}", e.cell.key.batch_size, model::status_label(&e.cell.status)),
        None => "every batch tried fitted".to_owned(),
    };
    let mark = |e: &&Entry| format!("{} {}", e.cell.key.batch_size, if fits(e) { "✓" } else { "✗" });
    ProbeRow {
        configuration,
        largest: largest.map_or_else(|| "—".to_owned(), |b| b.to_string()),
        stopped,
        tried: tried.iter().map(mark).collect::<Vec<_>>().join(" · "),
    }
}
