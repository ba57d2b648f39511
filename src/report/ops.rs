//! `trickbench ops`: the traced cells of a run (`run --trace`) beside their references, operator
//! by operator ([`crate::measure::ops`]): what a trick changed on each engine and where the two
//! engines' changes differ, and where the two engines' references differ. Plain text, no wider
//! than asked.

use std::collections::HashMap;
use std::path::Path;

use crate::bench::trace::CellGlob;
use crate::engine::Engine;
use crate::error::Error;
use crate::measure::ops::{
    change_differences, differences, kernel_differences, read_op_profile, OpProfile, OpWork,
};
use crate::results::schema::{CellId, CellResult, Results};
use crate::terminal;

/// A traced cell and the traced reference it is compared with, with both traces read.
#[derive(Debug)]
pub struct TracedPair<'r> {
    /// The cell.
    pub cell: &'r CellResult,
    /// Its reference (the cell its comparison is against).
    pub reference: &'r CellResult,
    /// The cell's operators.
    pub cell_ops: OpProfile,
    /// The reference's operators.
    pub reference_ops: OpProfile,
}

/// Every cell of `results` (read from the folder `dir`) that has a trace and a comparison whose
/// reference has a trace too, with both traces read (each file once, however many cells it is the
/// reference of); only those whose id matches `glob`, where given.
pub fn traced_pairs<'r>(
    results: &'r Results,
    dir: &Path,
    glob: Option<&CellGlob>,
) -> Result<Vec<TracedPair<'r>>, Error> {
    let mut profiles: HashMap<CellId, OpProfile> = HashMap::new();
    for cell in &results.cells {
        if let Some(t) = cell.trace() {
            profiles.insert(cell.id(), read_op_profile(&dir.join(&t.path), t.steps)?);
        }
    }
    let by_id = |id: &CellId| results.cells.iter().find(|c| &c.id() == id);
    let mut pairs = Vec::new();
    for comparison in &results.comparisons {
        let (Some(cell), Some(reference)) = (by_id(&comparison.cell), by_id(&comparison.baseline)) else {
            continue;
        };
        if glob.is_some_and(|g| !g.traces(&cell.key)) {
            continue;
        }
        if let (Some(cell_ops), Some(reference_ops)) =
            (profiles.get(&comparison.cell), profiles.get(&comparison.baseline))
        {
            pairs.push(TracedPair {
                cell,
                reference,
                cell_ops: cell_ops.clone(),
                reference_ops: reference_ops.clone(),
            });
        }
    }
    Ok(pairs)
}

/// The operator comparison of `pairs` as text no wider than `width` columns (at least 80), with at
/// most `top` operators a table.
pub fn render_ops(pairs: &[TracedPair], top: usize, width: usize) -> String {
    let mut out = String::new();
    let name_width = width.max(80) - 50;
    // The same cell on the other engine.
    let twins = |a: &TracedPair, b: &TracedPair| {
        let engine = a.cell.key.engine;
        b.cell.key.engine != engine && b.cell.key.id_on(engine) == a.cell.key.id_on(engine)
    };
    for (i, pair) in pairs.iter().enumerate() {
        if pairs[..i].iter().any(|p| twins(pair, p)) {
            continue;
        }
        let engine = pair.cell.key.engine;
        match pairs[i + 1..].iter().find(|p| twins(pair, p)) {
            Some(other) => {
                let (pytorch, libtorch) =
                    if engine == Engine::Pytorch { (pair, other) } else { (other, pair) };
                both_engines(&mut out, pytorch, libtorch, top, name_width);
            }
            None => one_engine(&mut out, pair, top, name_width),
        }
    }
    references(&mut out, pairs, top, name_width);
    if out.is_empty() {
        out.push_str(
            "no traced cell has a traced reference: trace both (`run --trace`, whose glob matches the \
             trick's cells and their references)\n",
        );
    }
    out
}

/// How `pytorch`'s and `libtorch`'s trick changed each engine's step, and where they differ.
fn both_engines(
    out: &mut String,
    pytorch: &TracedPair,
    libtorch: &TracedPair,
    top: usize,
    name_width: usize,
) {
    let id = pytorch.cell.key.id_on(Engine::Libtorch);
    let heading = format!("{id} against {}, on both engines, per step", libtorch.reference.id());
    out.push_str(&indented(&heading, name_width + 50, 0, 4));
    for (label, p) in [("PyTorch", pytorch), ("libtorch", libtorch)] {
        out.push_str(&wrapped(&format!("{label}: {}", step_change(p)), name_width + 50, 4));
    }
    let changes = change_differences(
        &pytorch.reference_ops,
        &pytorch.cell_ops,
        &libtorch.reference_ops,
        &libtorch.cell_ops,
    );
    if changes.is_empty() {
        out.push_str("  the trick changed every operator the same way on both engines\n\n");
        return;
    }
    let headings = ["what changed (largest gap first)", "PyTorch: calls ms MiB", "libtorch: calls ms MiB"];
    let rows = changes.iter().map(|c| (c.op.name.as_str(), work(c.a, true), work(c.b, true)));
    table(out, headings, rows, top, name_width);
}

/// What `pair`'s trick changed on its engine alone.
fn one_engine(out: &mut String, pair: &TracedPair, top: usize, name_width: usize) {
    let engine = pair.cell.key.engine;
    let heading = format!("{} against {}, on {engine}, per step", pair.cell.id(), pair.reference.id());
    out.push_str(&indented(&heading, name_width + 50, 0, 4));
    out.push_str(&wrapped(&step_change(pair), name_width + 50, 4));
    let pairs = differences(&pair.reference_ops, &pair.cell_ops);
    let headings = ["what changed (largest first)", "reference: calls ms MiB", "change: calls ms MiB"];
    let rows = pairs.iter().map(|r| (r.op.name.as_str(), work(r.a, false), work(r.change(), true)));
    table(out, headings, rows, top, name_width);
}

/// Where the references traced on both engines differ, once per reference.
fn references(out: &mut String, pairs: &[TracedPair], top: usize, name_width: usize) {
    let mut seen = Vec::new();
    for p in pairs.iter().filter(|p| p.reference.key.engine == Engine::Pytorch) {
        let id = p.reference.key.id_on(Engine::Libtorch);
        let Some(l) = pairs.iter().find(|l| l.reference.id() == id) else { continue };
        if seen.contains(&id) {
            continue;
        }
        seen.push(id.clone());
        let (lt, py) = (&l.reference_ops, &p.reference_ops);
        out.push_str(&format!("{id}: the references of the two engines, per step\n"));
        let times = format!(
            "CPU operators' self time: {:.2} ms in PyTorch, {:.2} ms on libtorch; outside operators (the \
             interpreter, the harness): {:.2} ms in PyTorch, {:.2} ms on libtorch",
            py.cpu_self_ms(),
            lt.cpu_self_ms(),
            py.outside_ops_ms,
            lt.outside_ops_ms
        );
        out.push_str(&wrapped(&times, name_width + 50, 4));
        let kernels =
            kernels_line("arithmetic operators, PyTorch against libtorch", &kernel_differences(lt, py));
        out.push_str(&wrapped(&kernels, name_width + 50, 4));
        let pairs = differences(lt, py);
        let headings = ["operator (largest gap first)", "PyTorch: calls ms MiB", "libtorch: calls ms MiB"];
        let rows = pairs.iter().map(|r| (r.op.name.as_str(), work(r.b, false), work(r.a, false)));
        table(out, headings, rows, top, name_width);
    }
}

/// A table of operators under `headings` (the name column's, then the two 23-column ones'): the
/// first `top` of `rows` (name, left, right), then how many it left out.
fn table<'a>(
    out: &mut String,
    [name, left, right]: [&str; 3],
    rows: impl ExactSizeIterator<Item = (&'a str, String, String)>,
    top: usize,
    name_width: usize,
) {
    out.push_str(&format!("  {name:<name_width$} {left:>23} {right:>23}\n"));
    let total = rows.len();
    for (op, a, b) in rows.take(top) {
        out.push_str(&format!("  {:<name_width$} {a} {b}\n", shortened(op, name_width)));
    }
    more(out, total, top);
}

/// The change of a pair's CPU self time and of its training thread's time outside operators,
/// and the arithmetic operators it added or removed.
fn step_change(p: &TracedPair) -> String {
    let (r, c) = (&p.reference_ops, &p.cell_ops);
    let (before, after) = (r.cpu_self_ms(), c.cpu_self_ms());
    let kernels = kernel_differences(r, c);
    format!(
        "CPU operators' self time {:+.2} ms ({before:.2} → {after:.2} ms); outside operators {:+.2} ms \
         ({:.2} → {:.2} ms); {}",
        after - before,
        c.outside_ops_ms - r.outside_ops_ms,
        r.outside_ops_ms,
        c.outside_ops_ms,
        kernels_line("arithmetic operators", &kernels)
    )
}

/// "arithmetic operators: aten::add +2, aten::mul −1" from (name, calls before, calls after), or
/// that none changed.
fn kernels_line(what: &str, kernels: &[(String, f64, f64)]) -> String {
    if kernels.is_empty() {
        return format!("{what}: the same calls");
    }
    let changes: Vec<String> = kernels.iter().map(|(k, a, b)| format!("{k} {}", signed(b - a, 0))).collect();
    format!("{what}: {}", changes.join(", "))
}

/// `text` as lines of at most `width` columns, broken at spaces, each indented by two spaces and
/// the lines after the first by `hang` more.
fn wrapped(text: &str, width: usize, hang: usize) -> String {
    indented(text, width, 2, hang)
}

/// `text` as lines of at most `width` columns, broken at spaces, the first indented by `indent`
/// spaces and the others by `indent + hang`.
fn indented(text: &str, width: usize, indent: usize, hang: usize) -> String {
    format!("{}\n", terminal::wrap(&format!("{}{text}", " ".repeat(indent)), width, hang))
}

/// Calls, self milliseconds and MiB allocated, 23 columns; with signs where `change`.
fn work(w: OpWork, change: bool) -> String {
    let mib = w.allocated_bytes / (1u64 << 20) as f64;
    if change {
        format!("{:>7} {:>8} {:>6}", signed(w.calls, 1), signed(w.self_ms, 2), signed(mib, 1))
    } else {
        format!("{:>7.1} {:>8.2} {:>6.1}", w.calls, w.self_ms, mib)
    }
}

/// `x` with its sign and `decimals` decimals ("0" for nothing).
fn signed(x: f64, decimals: usize) -> String {
    if x.abs() < 0.5 * 10f64.powi(-(decimals as i32)) {
        return "0".to_owned();
    }
    format!("{x:+.decimals$}")
}

/// `name` cut to `width` characters, an ellipsis ending it where cut.
fn shortened(name: &str, width: usize) -> String {
    if name.chars().count() <= width {
        return name.to_owned();
    }
    let kept: String = name.chars().take(width.saturating_sub(1)).collect();
    format!("{kept}…")
}

/// A line saying how many rows a table left out, if any; then a blank line.
fn more(out: &mut String, rows: usize, top: usize) {
    if rows > top {
        out.push_str(&format!("  … {} more (--top)\n", rows - top));
    }
    out.push('\n');
}
