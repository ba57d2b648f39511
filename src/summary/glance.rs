//! A workload's answer on the terminal: the report's first screen fitted to the terminal's width,
//! its verdicts grouped as helps, hurts, no measurable effect, inconclusive and not applicable,
//! each trick with both engines' effects and, under it, why: each engine's measured cause, or the
//! trick's ceiling where there is no cause to give.

use std::fmt::Write;

use super::layout::{cause_lines, grouped, Layout, NAME_INDENT};
use crate::engine::Engine;
use crate::report::{by_cause, Effect, Overview, VerdictRow};
use crate::terminal::wrap;

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
    out.push_str(&grouped(&o.rows, &table.layout, |r| r.verdict.effect, |r| table.row(r)));
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

/// How the rows of a first screen are laid out: a column of effects per engine.
struct Table<'e> {
    /// The engines, a column each.
    engines: &'e [Engine],
    /// The columns' widths.
    layout: Layout,
}

impl<'e> Table<'e> {
    /// The table of `rows` on `engines` in `columns`.
    fn of(rows: &[VerdictRow], engines: &'e [Engine], columns: usize) -> Table<'e> {
        let cells: Vec<(String, Vec<String>)> =
            rows.iter().map(|r| (r.trick.clone(), engines.iter().map(|e| cell(r, *e)).collect())).collect();
        let titles = engines.iter().map(|e| title(*e)).collect();
        Table { engines, layout: Layout::of(titles, &cells, columns) }
    }

    /// A trick's lines: its name and each engine's effect, then its notes.
    fn row(&self, r: &VerdictRow) -> String {
        let columns = self.layout.columns;
        let cells: Vec<String> = self.engines.iter().map(|e| cell(r, *e)).collect();
        let mut out = self.layout.row(&r.trick, &cells);
        let indent = " ".repeat(NAME_INDENT);
        for note in notes(r) {
            let _ = writeln!(out, "{}", wrap(&format!("{indent}  {note}"), columns, 2));
        }
        if let Some(why) = why_line(&reasons(r, self.engines), self.engines.len() > 1) {
            let _ = writeln!(out, "{}", why.render(NAME_INDENT + 2, columns));
        }
        out
    }
}

/// The column title of `engine`'s effects.
pub(super) fn title(engine: Engine) -> &'static str {
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

/// One engine's answer to why a row's effect is what it is.
#[derive(Debug, Clone, Copy, PartialEq)]
struct Reason<'r> {
    /// The engine.
    engine: Engine,
    /// The cause's name and its detail after it ("" where it has none), where the effect has one.
    cause: Option<(&'r str, &'r str)>,
    /// The most the trick could give on this engine, × throughput, where known.
    ceiling: Option<f64>,
}

impl Reason<'_> {
    /// The cause in one short line ("it added work: aten::copy_ +1.20 ms"), else the ceiling
    /// ("ceiling 1.04×").
    fn text(&self) -> String {
        match (self.cause, self.ceiling) {
            (Some((name, detail)), _) => cause_text(name, detail),
            (None, Some(ceiling)) => format!("ceiling {ceiling:.2}×"),
            (None, None) => String::new(),
        }
    }
}

/// The reasons row `r` gives on each of `engines` that has a cause or a ceiling, in their order.
fn reasons<'r>(r: &'r VerdictRow, engines: &[Engine]) -> Vec<Reason<'r>> {
    let reason = |engine: Engine| {
        let why = r.why.iter().find(|w| w.engine == engine);
        let cause = why.and_then(|w| Some(split_cause(w.cause_short.as_deref()?, w.cause_name)));
        let ceiling = r.gains.iter().find(|g| g.engine == engine).and_then(|g| g.ceiling);
        (cause.is_some() || ceiling.is_some()).then_some(Reason { engine, cause, ceiling })
    };
    engines.iter().filter_map(|e| reason(*e)).collect()
}

/// A cause's short line as its name and the detail after the name ("" where there is none).
fn split_cause<'a>(short: &'a str, name: Option<&'a str>) -> (&'a str, &'a str) {
    match name.and_then(|name| Some((name, short.strip_prefix(name)?))) {
        Some((name, rest)) => (name, rest.trim_start_matches(':').trim_start()),
        None => (short, ""),
    }
}

/// "bound elsewhere: at most 1.01× inside ±2.3%", or the name alone where there is no detail.
fn cause_text(name: &str, detail: &str) -> String {
    if detail.is_empty() {
        name.to_owned()
    } else {
        format!("{name}: {detail}")
    }
}

/// The engine as the line under a row names it.
pub(super) fn engine_name(engine: Engine) -> &'static str {
    match engine {
        Engine::Pytorch => "PyTorch",
        Engine::Libtorch => "libtorch",
    }
}

/// The line under a row that says why: a head, then one part per engine (or one for both).
#[derive(Debug, Clone, PartialEq)]
struct WhyLine {
    /// "why: ", "why: bound elsewhere: " or "ceiling: at most ".
    head: String,
    /// What each engine found, PyTorch's first.
    parts: Vec<String>,
}

impl WhyLine {
    /// The line indented by `indent` in `columns`: whole where it fits, else each part on a line
    /// of its own under the first; a part too long for its line is wrapped.
    fn render(&self, indent: usize, columns: usize) -> String {
        let lead = format!("{}{}", " ".repeat(indent), self.head);
        let hang = self.head.chars().count();
        let whole = format!("{lead}{}", self.parts.join(" · "));
        if whole.chars().count() <= columns || self.parts.len() < 2 {
            return wrap(&whole, columns, hang);
        }
        let under = " ".repeat(lead.chars().count());
        let lines: Vec<String> = self
            .parts
            .iter()
            .enumerate()
            .map(|(i, part)| match i {
                0 => wrap(&format!("{lead}{part}"), columns, hang),
                _ => wrap(&format!("{under}{part}"), columns, 2),
            })
            .collect();
        lines.join("\n")
    }
}

/// Why a row's effect is what it is, from its `reasons` (`named`: the table has both engines, so
/// each part says whose it is): each engine's cause, or its ceiling where it has none; a cause
/// both engines found is named once. `None` where no engine has either.
fn why_line(reasons: &[Reason], named: bool) -> Option<WhyLine> {
    if reasons.iter().all(|r| r.cause.is_none()) {
        return ceiling_line(reasons, named);
    }
    if let Some(line) = shared_cause(reasons) {
        return Some(line);
    }
    let part = |r: &Reason| if named { format!("{}: {}", engine_name(r.engine), r.text()) } else { r.text() };
    Some(WhyLine { head: "why: ".to_owned(), parts: reasons.iter().map(part).collect() })
}

/// Where both engines' `reasons` have a cause of the same name, the line that names it once:
/// "why: bound elsewhere: PyTorch at most 1.01× … · libtorch at most 1.02× …", or "why: cause not
/// found (both engines)" where their details agree too.
fn shared_cause(reasons: &[Reason]) -> Option<WhyLine> {
    let [first, second] = reasons else { return None };
    let ((name, detail), (other, other_detail)) = (first.cause?, second.cause?);
    if name != other {
        return None;
    }
    if detail == other_detail {
        let parts = vec![format!("{} (both engines)", cause_text(name, detail))];
        return Some(WhyLine { head: "why: ".to_owned(), parts });
    }
    let parts = vec![
        format!("{} {detail}", engine_name(first.engine)),
        format!("{} {other_detail}", engine_name(second.engine)),
    ];
    Some(WhyLine { head: format!("why: {name}: "), parts })
}

/// The ceilings of `reasons` that have no cause: "ceiling: at most 1.80× in PyTorch · 1.75× on
/// libtorch", once where both engines have the same.
fn ceiling_line(reasons: &[Reason], named: bool) -> Option<WhyLine> {
    let ceilings: Vec<(Engine, String)> =
        reasons.iter().filter_map(|r| Some((r.engine, format!("{:.2}×", r.ceiling?)))).collect();
    let parts = match ceilings.as_slice() {
        [] => return None,
        [(_, one)] if !named => vec![one.clone()],
        [(_, a), (_, b)] if a == b => vec![format!("{a} on both engines")],
        each => each.iter().map(|(engine, c)| format!("{c} {}", title(*engine))).collect(),
    };
    Some(WhyLine { head: "ceiling: at most ".to_owned(), parts })
}

/// The tricks that do not apply, grouped by the first clause of their reasons ("needs a CUDA
/// GPU: amp, tf32, …"); the report gives each reason whole.
fn not_applicable(o: &Overview, columns: usize) -> String {
    let count: usize = o.not_applicable.iter().map(|n| n.tricks.len()).sum();
    if count == 0 {
        return String::new();
    }
    let by_cause = by_cause(
        o.not_applicable.iter().flat_map(|g| g.tricks.iter().map(move |t| (g.cause().to_owned(), *t))),
    );
    format!("\n  not applicable ({count})\n{}", cause_lines(&by_cause, columns))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::results::diagnosis::{Cause, OpChange};

    fn reason(
        engine: Engine,
        cause: Option<(&'static str, &'static str)>,
        ceiling: Option<f64>,
    ) -> Reason<'static> {
        Reason { engine, cause, ceiling }
    }

    /// `line` rendered under a row, each of its lines checked to fit `columns`.
    fn rendered(line: &WhyLine, columns: usize) -> String {
        let text = line.render(NAME_INDENT + 2, columns);
        assert!(text.lines().all(|l| l.chars().count() <= columns), "wider than {columns}:\n{text}");
        text
    }

    #[test]
    fn a_short_line_is_split_into_its_name_and_detail() {
        let added = Cause::AddedWork {
            operators: vec![OpChange {
                name: "aten::copy_".into(),
                activity: None,
                calls_change: 0.0,
                self_ms_change: 1.2,
            }],
            added_ms: 1.2,
            step_ms: 30.0,
        };
        let short = added.short();
        assert_eq!(split_cause(&short, Some(added.name())), ("it added work", "aten::copy_ +1.20 ms"));
        assert_eq!(split_cause("cause not found", Some("cause not found")), ("cause not found", ""));
        assert_eq!(split_cause("odd: line", None), ("odd: line", ""));
    }

    #[test]
    fn each_engine_s_cause_is_given_and_a_long_line_puts_each_on_its_own() {
        let bound = ("bound elsewhere", "at most 1.01× inside ±2.3%");
        let added = ("it added work", "aten::copy_ +1.20 ms");
        let reasons =
            [reason(Engine::Pytorch, Some(bound), Some(1.01)), reason(Engine::Libtorch, Some(added), None)];
        let line = why_line(&reasons, true).unwrap();
        assert_eq!(line.head, "why: ");
        assert_eq!(
            line.parts,
            [
                "PyTorch: bound elsewhere: at most 1.01× inside ±2.3%",
                "libtorch: it added work: aten::copy_ +1.20 ms"
            ]
        );
        assert_eq!(
            rendered(&line, 100),
            "      why: PyTorch: bound elsewhere: at most 1.01× inside ±2.3%\n           libtorch: it added work: \
             aten::copy_ +1.20 ms"
        );
        assert_eq!(rendered(&line, 120).lines().count(), 1);
        assert!(rendered(&line, 40).lines().count() > 2);
    }

    #[test]
    fn a_cause_both_engines_found_is_named_once() {
        let pytorch = ("bound elsewhere", "at most 1.01× inside ±2.3%");
        let libtorch = ("bound elsewhere", "at most 1.02× inside ±1.9%");
        let line = why_line(
            &[reason(Engine::Pytorch, Some(pytorch), None), reason(Engine::Libtorch, Some(libtorch), None)],
            true,
        );
        assert_eq!(
            rendered(&line.unwrap(), 100),
            "      why: bound elsewhere: PyTorch at most 1.01× inside ±2.3% · libtorch at most 1.02× inside ±1.9%"
        );
        let none = ("cause not found", "");
        let line = why_line(
            &[reason(Engine::Pytorch, Some(none), None), reason(Engine::Libtorch, Some(none), None)],
            true,
        );
        assert_eq!(rendered(&line.unwrap(), 100), "      why: cause not found (both engines)");
    }

    #[test]
    fn without_a_cause_the_ceiling_stands_alone_and_short() {
        let added = ("it added work", "aten::copy_ +1.20 ms");
        let mixed = why_line(
            &[reason(Engine::Pytorch, Some(added), Some(1.5)), reason(Engine::Libtorch, None, Some(1.04))],
            true,
        );
        assert_eq!(
            rendered(&mixed.unwrap(), 100),
            "      why: PyTorch: it added work: aten::copy_ +1.20 ms · libtorch: ceiling 1.04×"
        );
        let one = why_line(&[reason(Engine::Libtorch, None, Some(1.041))], false).unwrap();
        assert_eq!(rendered(&one, 100), "      ceiling: at most 1.04×");
        let same = why_line(
            &[reason(Engine::Pytorch, None, Some(1.8)), reason(Engine::Libtorch, None, Some(1.8))],
            true,
        );
        assert_eq!(rendered(&same.unwrap(), 100), "      ceiling: at most 1.80× on both engines");
        let apart = why_line(
            &[reason(Engine::Pytorch, None, Some(1.8)), reason(Engine::Libtorch, None, Some(1.75))],
            true,
        );
        assert_eq!(
            rendered(&apart.unwrap(), 100),
            "      ceiling: at most 1.80× in PyTorch · 1.75× on libtorch"
        );
        let single = why_line(&[reason(Engine::Pytorch, Some(added), None)], false).unwrap();
        assert_eq!(rendered(&single, 100), "      why: it added work: aten::copy_ +1.20 ms");
        assert_eq!(why_line(&[], true), None);
    }
}
