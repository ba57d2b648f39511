//! A workload's answer on the terminal: the report's first screen fitted to the terminal's width,
//! its verdicts grouped as helps, hurts, no measurable effect, inconclusive and not applicable,
//! each trick with both engines' effects.

use std::fmt::Write;

use crate::engine::Engine;
use crate::report::{Effect, Overview, VerdictRow};
use crate::terminal::wrap;

/// The groups of verdicts, in the order printed, with the effects each holds.
const GROUPS: [(&str, &[Effect]); 4] = [
    ("helps", &[Effect::Helps]),
    ("hurts", &[Effect::Hurts]),
    ("no measurable effect", &[Effect::Unmeasurable, Effect::WithinNoise]),
    ("inconclusive", &[Effect::NotMeasured]),
];

/// Columns between the left edge and a trick's name.
const NAME_INDENT: usize = 4;
/// Columns between two columns of a row.
const SPACING: usize = 2;

/// The first screen `o` in at most `columns` characters per line.
pub(super) fn first_screen(o: &Overview, columns: usize) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "{}", wrap(&o.title, columns, 2));
    if let Some(model) = &o.model {
        let _ = writeln!(out, "{}", wrap(&format!("  {model}"), columns, 2));
    }
    for line in [Some(&o.sentence), Some(&o.baseline), o.floors.as_ref()].into_iter().flatten() {
        let _ = writeln!(out, "{}", wrap(&format!("  {line}"), columns, 2));
    }
    for warning in &o.warnings {
        let _ = writeln!(out, "{}", wrap(&format!("  warning: {warning}"), columns, 4));
    }
    let engines = engines(o);
    let table = Table::of(&o.rows, &engines, columns);
    let mut first = true;
    for (word, effects) in GROUPS {
        let rows: Vec<&VerdictRow> = o.rows.iter().filter(|r| effects.contains(&r.verdict.effect)).collect();
        if rows.is_empty() {
            continue;
        }
        out.push('\n');
        let _ = writeln!(out, "{}", table.heading(word, first));
        first = false;
        for r in rows {
            out.push_str(&table.row(r));
        }
    }
    out.push_str(&not_applicable(o, columns));
    out
}

/// The engines whose effects the rows give, in column order: PyTorch's first where both.
fn engines(o: &Overview) -> Vec<Engine> {
    if o.two_engines {
        return vec![Engine::Pytorch, Engine::Libtorch];
    }
    let engine = o.rows.iter().flat_map(|r| &r.gains).map(|g| g.engine).next();
    vec![engine.unwrap_or(Engine::Libtorch)]
}

/// How the rows of a first screen are laid out.
struct Table<'e> {
    engines: &'e [Engine],
    columns: usize,
    /// Width of the trick's column.
    name: usize,
    /// Width of each engine's column.
    values: Vec<usize>,
    /// Whether each row fits on one line; otherwise the effects go on the line under the name.
    one_line: bool,
}

impl<'e> Table<'e> {
    fn of(rows: &[VerdictRow], engines: &'e [Engine], columns: usize) -> Table<'e> {
        // A heading's word stands in the trick's column, two columns to its left.
        let word = GROUPS.iter().map(|(word, _)| word.len()).max().unwrap_or(0) - (NAME_INDENT - 2);
        let name = rows.iter().map(|r| r.trick.chars().count()).max().unwrap_or(0).max(word);
        let values: Vec<usize> = engines
            .iter()
            .map(|e| rows.iter().map(|r| cell(r, *e).chars().count()).max().unwrap_or(0).max(title(*e).len()))
            .collect();
        let width = NAME_INDENT + name + values.iter().map(|v| v + SPACING).sum::<usize>();
        Table { engines, columns, name, values, one_line: width <= columns }
    }

    /// A group's heading, with the columns' titles on the first.
    fn heading(&self, word: &str, titles: bool) -> String {
        if !titles || !self.one_line {
            return format!("  {word}");
        }
        let mut line = format!("  {word:<width$}", width = NAME_INDENT - 2 + self.name);
        for (engine, width) in self.engines.iter().zip(&self.values) {
            let _ = write!(line, "{:spacing$}{:<width$}", "", title(*engine), spacing = SPACING);
        }
        line.trim_end().to_owned()
    }

    /// A trick's lines: its name and each engine's effect, then its notes.
    fn row(&self, r: &VerdictRow) -> String {
        let indent = " ".repeat(NAME_INDENT);
        let mut out = if self.one_line {
            let mut line = format!("{indent}{:<width$}", r.trick, width = self.name);
            for (engine, width) in self.engines.iter().zip(&self.values) {
                let _ = write!(line, "{:spacing$}{:<width$}", "", cell(r, *engine), spacing = SPACING);
            }
            format!("{}\n", line.trim_end())
        } else {
            let effects: Vec<String> =
                self.engines.iter().map(|e| format!("{} {}", title(*e), cell(r, *e))).collect();
            let name = wrap(&format!("{indent}{}", r.trick), self.columns, 2);
            format!("{name}\n{}\n", wrap(&format!("{indent}  {}", effects.join(" · ")), self.columns, 2))
        };
        for note in notes(r) {
            let _ = writeln!(out, "{}", wrap(&format!("{indent}  {note}"), self.columns, 2));
        }
        out
    }
}

/// The column title of `engine`'s effects.
fn title(engine: Engine) -> &'static str {
    match engine {
        Engine::Pytorch => "in PyTorch",
        Engine::Libtorch => "on libtorch",
    }
}

/// What row `r` says of `engine`: its effect, or its verdict where it has no number, or "—"
/// where the engine did not measure it.
fn cell(r: &VerdictRow, engine: Engine) -> String {
    if let Some(gain) = r.gains.iter().find(|g| g.engine == engine) {
        return gain.text();
    }
    let measured_here = match r.only_on {
        Some(only) => only == engine,
        None => r.gains.is_empty(),
    };
    if measured_here {
        r.label.to_owned()
    } else {
        "—".to_owned()
    }
}

/// The lines under a row: where the engines disagree, which attention kernels ran, and a verdict
/// that its effect alone does not tell (faster per step but slower to the target).
fn notes(r: &VerdictRow) -> Vec<String> {
    let mut notes = Vec::new();
    if let Some(d) = &r.disagreement {
        notes.push(format!("! {} (why: in the report)", d.how));
    }
    notes.extend(r.kernels.clone());
    let text = &r.verdict.text;
    if text.starts_with("faster per step") || (r.gains.is_empty() && r.verdict.effect == Effect::NotMeasured)
    {
        notes.push(text.clone());
    } else if let Some((_, quality)) = text.split_once("; to the target: ") {
        notes.push(format!("to the target: {quality}"));
    }
    notes
}

/// The tricks that do not apply, grouped by the first clause of their reasons ("needs a CUDA
/// GPU: amp, tf32, …"); the report gives each reason whole.
fn not_applicable(o: &Overview, columns: usize) -> String {
    let count: usize = o.not_applicable.iter().map(|n| n.tricks.len()).sum();
    if count == 0 {
        return String::new();
    }
    let mut by_cause: Vec<(&str, Vec<&str>)> = Vec::new();
    for group in &o.not_applicable {
        let cause = group.reason.split(':').next().unwrap_or(&group.reason).trim();
        match by_cause.iter_mut().find(|(c, _)| *c == cause) {
            Some((_, tricks)) => tricks.extend(group.tricks.iter().copied()),
            None => by_cause.push((cause, group.tricks.clone())),
        }
    }
    let mut out = format!("\n  not applicable ({count})\n");
    for (cause, tricks) in by_cause {
        let _ = writeln!(out, "{}", wrap(&format!("    {cause}: {}", tricks.join(", ")), columns, 2));
    }
    out
}
