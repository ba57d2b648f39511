//! The factorial design as the report shows it, per workload: which tricks combine and which
//! cancel in words, the main-effects figure, a matrix of the pairs' interactions per engine, the
//! best configuration predicted against measured, and the design itself (its factors' letters,
//! aliasing, and the tricks it leaves out, with why). Shown first in the HTML.

use serde::Serialize;

use crate::engine::Engine;
use crate::factorial::fraction::letter;
use crate::factorial::words;
use crate::report::model::{self, engine_words, Group, Report};
use crate::report::FigureFile;
use crate::results::factorial::{BestConfiguration, FactorialAnalysis, Interaction};
use crate::results::schema::Results;
use crate::tricks::Trick;

/// The section the main-effects figures belong to.
pub(crate) const FACTORIAL_SECTION: &str = "factorial";

/// One workload's factorial designs (one per engine) as the report shows them.
#[derive(Debug, Serialize)]
pub(crate) struct FactorialView {
    /// Anchor stem.
    slug: String,
    /// Workload, device and profile.
    group: String,
    /// Each engine's answer in sentences ([`words::sentences`]).
    answers: Vec<Answer>,
    /// The interactions the engines disagree on, a sentence each.
    disagreements: Vec<String>,
    /// The main-effects figure.
    figure: Option<FigureFile>,
    /// Each engine's interaction matrix.
    matrices: Vec<Matrix>,
    /// Each engine's best configuration.
    best: Vec<Best>,
    /// The designs, one where the engines ran the same.
    designs: Vec<Design>,
}

/// One engine's answer.
#[derive(Debug, Serialize)]
struct Answer {
    /// "In PyTorch" where the run has several engines, else "".
    engine: String,
    /// Its sentences.
    sentences: Vec<String>,
}

/// One engine's interactions as an upper triangle: a row per factor but the last, a column per
/// factor but the first.
#[derive(Debug, Serialize)]
struct Matrix {
    /// "In PyTorch" where the run has several engines, else "".
    engine: String,
    /// The noise floor the verdicts are read against, in words.
    floor: String,
    /// The columns' letters and tricks.
    columns: Vec<(String, String)>,
    /// The rows.
    rows: Vec<MatrixRow>,
}

/// A row of a matrix: a factor, and its interaction with each factor after it.
#[derive(Debug, Serialize)]
struct MatrixRow {
    /// Its letter.
    letter: String,
    /// Its trick.
    trick: String,
    /// A cell per column; `None` on and below the diagonal, or where the pair has no estimate.
    cells: Vec<Option<MatrixCell>>,
}

/// One pair's interaction.
#[derive(Debug, Serialize)]
struct MatrixCell {
    /// Together ÷ predicted as a change: "+4.1%".
    text: String,
    /// The verdict's word, also its CSS class.
    verdict: &'static str,
    /// The interaction in a sentence, with its aliases and any disagreement between engines.
    hover: String,
    /// Whether the other engine's estimate disagrees.
    disagree: bool,
}

/// One engine's best configuration, predicted against measured.
#[derive(Debug, Serialize)]
struct Best {
    /// "In PyTorch" where the run has several engines, else "".
    engine: String,
    /// Its tricks: "channels-last + fused-optimizer", or the baseline.
    tricks: String,
    /// The prediction with its interval.
    predicted: String,
    /// The measurement with its interval, or "not measured".
    measured: String,
    /// Whether the measurement bears the prediction out, in words ("" where not measured).
    check: String,
    /// "in the design" or "measured after the design".
    source: &'static str,
    /// The anchor of its cell in the cells table, where it is there.
    anchor: Option<String>,
}

/// A design's shape.
#[derive(Debug, PartialEq, Serialize)]
struct Design {
    /// "In PyTorch" where the engines' designs differ, else "".
    engine: String,
    /// The factors' letters and tricks.
    factors: Vec<(String, String)>,
    /// The configurations measured.
    configurations: usize,
    /// The generators, joined ("" for a full factorial).
    generators: String,
    /// The defining relation, joined ("" for a full factorial).
    relation: String,
    /// The resolution, and what it leaves aliased.
    resolution: String,
    /// The processes the estimates come from.
    processes: usize,
    /// The tricks asked for that the design does not vary, each with why.
    left_out: Vec<(String, String)>,
}

/// The factorial designs of group `g` of `results` (those of its files on its workload), PyTorch
/// first as the figures draw the engines.
pub(crate) fn analyses<'r>(results: &'r [Results], g: &Group) -> Vec<&'r FactorialAnalysis> {
    let mut files: Vec<usize> = g.entries.iter().map(|e| e.file).collect();
    files.sort_unstable();
    files.dedup();
    let mut out: Vec<&FactorialAnalysis> =
        files.iter().flat_map(|&f| &results[f].factorial).filter(|a| a.workload == g.workload).collect();
    out.sort_by_key(|a| a.engine != Engine::Pytorch);
    out
}

/// The file-name stem of group `g`'s main-effects figure.
pub(crate) fn figure_slug(g: &Group) -> String {
    format!("factorial-{}", g.slug())
}

/// Every group of the report with a factorial design, with its figure from `figures`.
pub(crate) fn views(report: &Report, figures: &[FigureFile]) -> Vec<FactorialView> {
    report
        .groups
        .iter()
        .filter_map(|g| {
            let designs = analyses(report.results, g);
            (!designs.is_empty()).then(|| view(g, &designs, figures))
        })
        .collect()
}

/// The view of group `g`'s `designs`.
fn view(g: &Group, designs: &[&FactorialAnalysis], figures: &[FigureFile]) -> FactorialView {
    let several = designs.len() > 1;
    let label =
        |a: &FactorialAnalysis| if several { capitalised(engine_words(a.engine)) } else { String::new() };
    let png = format!("plots/{}.png", figure_slug(g));
    FactorialView {
        slug: g.slug(),
        group: g.title(),
        answers: designs
            .iter()
            .map(|a| Answer { engine: label(a), sentences: words::sentences(a) })
            .collect(),
        disagreements: disagreements(designs),
        figure: figures.iter().find(|f| f.png == png).cloned(),
        matrices: designs.iter().map(|a| matrix(a, other(designs, a), label(a))).collect(),
        best: designs.iter().filter_map(|a| best(g, a, label(a))).collect(),
        designs: designs_of(designs),
    }
}

/// "in PyTorch" → "In PyTorch".
fn capitalised(text: &str) -> String {
    let mut chars = text.chars();
    chars.next().map_or_else(String::new, |c| c.to_uppercase().chain(chars).collect())
}

/// The design of the other engine than `a`'s, where the run has one.
fn other<'r>(designs: &[&'r FactorialAnalysis], a: &FactorialAnalysis) -> Option<&'r FactorialAnalysis> {
    designs.iter().copied().find(|d| d.engine != a.engine)
}

/// The interaction of `tricks` (in either order) in `design`.
fn pair(design: &FactorialAnalysis, [a, b]: [Trick; 2]) -> Option<&Interaction> {
    design.interactions.iter().find(|i| i.tricks == [a, b] || i.tricks == [b, a])
}

/// A sentence for each interaction the engines disagree on ([`words::engines_disagree`]): "the
/// engines disagree on A × D (avoid-sync and channels-last): synergy in PyTorch, +12.0% [+5.0%,
/// +19.0%]; antagonism on libtorch, …".
fn disagreements(designs: &[&FactorialAnalysis]) -> Vec<String> {
    let [first, second] = designs else {
        return Vec::new();
    };
    first
        .interactions
        .iter()
        .filter_map(|i| Some((i, pair(second, i.tricks)?)))
        .filter(|(x, y)| words::engines_disagree(x, y))
        .map(|(x, y)| {
            let [a, b] = x.tricks;
            let side = |d: &FactorialAnalysis, i: &Interaction| {
                format!("{} {}, {}", i.verdict.label(), engine_words(d.engine), interval_text(i))
            };
            format!(
                "≠ The engines disagree on {} ({a} and {b}): {}; {}",
                pair_letters(first, x.tricks),
                side(first, x),
                side(second, y)
            )
        })
        .collect()
}

/// An interaction's change with its interval: "+12.0% [+5.0%, +19.0%]".
fn interval_text(i: &Interaction) -> String {
    let t = &i.throughput;
    format!("{} [{}, {}]", words::percent(t.ratio), words::percent(t.ci_low), words::percent(t.ci_high))
}

/// The letters of a pair of factors of `design`: "A × D".
fn pair_letters(design: &FactorialAnalysis, tricks: [Trick; 2]) -> String {
    let of = |t: Trick| {
        design.factors.iter().position(|&f| f == t).map_or_else(|| t.to_string(), |i| letter(i).to_string())
    };
    format!("{} × {}", of(tricks[0]), of(tricks[1]))
}

/// The interaction matrix of `design`, each cell flagged where `other` (the other engine's design)
/// disagrees.
fn matrix(design: &FactorialAnalysis, other: Option<&FactorialAnalysis>, engine: String) -> Matrix {
    let factors = &design.factors;
    let column = |(i, t): (usize, &Trick)| (letter(i).to_string(), t.to_string());
    let rows = factors
        .iter()
        .enumerate()
        .take(factors.len().saturating_sub(1))
        .map(|(i, &row)| MatrixRow {
            letter: letter(i).to_string(),
            trick: row.to_string(),
            cells: factors
                .iter()
                .skip(1)
                .enumerate()
                .map(|(j, &col)| (j >= i).then(|| cell(design, other, [row, col])).flatten())
                .collect(),
        })
        .collect();
    let floor = design.noise_floor_half_width.map_or_else(
        || "no A/A control measured: read the intervals alone".to_owned(),
        |h| format!("noise floor ±{:.1}%", h * 100.0),
    );
    Matrix { engine, floor, columns: factors.iter().enumerate().skip(1).map(column).collect(), rows }
}

/// The cell of the pair `tricks` in `design`, where it has an estimate.
fn cell(
    design: &FactorialAnalysis,
    other: Option<&FactorialAnalysis>,
    tricks: [Trick; 2],
) -> Option<MatrixCell> {
    let i = pair(design, tricks)?;
    let theirs = other.and_then(|o| Some((o, pair(o, tricks)?)));
    let disagree = theirs.is_some_and(|(_, t)| words::engines_disagree(i, t));
    let mut hover = format!("{}: {}", pair_letters(design, tricks), words::interaction_sentence(i));
    if !i.aliased_with.is_empty() {
        hover.push_str(&format!("; aliased with {}", i.aliased_with.join(", ")));
    }
    if let Some((o, t)) = theirs.filter(|_| disagree) {
        hover.push_str(&format!(
            "; the engines disagree: {} {}, {}",
            t.verdict.label(),
            engine_words(o.engine),
            interval_text(t)
        ));
    }
    Some(MatrixCell { text: words::percent(i.throughput.ratio), verdict: i.verdict.label(), hover, disagree })
}

/// The best configuration of `design` in group `g`, where it has one.
fn best(g: &Group, design: &FactorialAnalysis, engine: String) -> Option<Best> {
    let b: &BestConfiguration = design.best.as_ref()?;
    let check = b.measured.map_or_else(String::new, |m| {
        if words::overlap(&m, &b.predicted) {
            "borne out: the intervals overlap"
        } else {
            "not borne out: the intervals do not overlap"
        }
        .to_owned()
    });
    let entry = b.cell.as_ref().and_then(|id| g.entries.iter().find(|e| e.cell.id() == *id));
    Some(Best {
        engine,
        tricks: words::best_tricks(b),
        predicted: words::ratio_text(&b.predicted),
        measured: match (&b.measured, b.tricks.is_empty()) {
            (_, true) => "the baseline itself: 1×".to_owned(),
            (Some(m), false) => words::ratio_text(m),
            (None, false) => "not measured".to_owned(),
        },
        check,
        source: match (b.tricks.is_empty(), b.in_design) {
            (true, _) => "no trick or pair helps beyond the noise floor",
            (false, true) => "in the design",
            (false, false) => "measured after the design",
        },
        anchor: entry.map(model::anchor),
    })
}

/// The designs' shapes: one where every engine ran the same design, else one per engine.
fn designs_of(designs: &[&FactorialAnalysis]) -> Vec<Design> {
    let mut shapes: Vec<Design> = designs.iter().map(|a| design(a, String::new())).collect();
    shapes.dedup();
    if shapes.len() == 1 {
        return shapes;
    }
    designs.iter().map(|a| design(a, capitalised(engine_words(a.engine)))).collect()
}

/// The shape of `a`, labelled `engine`.
fn design(a: &FactorialAnalysis, engine: String) -> Design {
    Design {
        engine,
        factors: a.factors.iter().enumerate().map(|(i, t)| (letter(i).to_string(), t.to_string())).collect(),
        configurations: a.configurations,
        generators: a.generators.join("; "),
        relation: a.defining_relation.join("; "),
        resolution: resolution_text(a.resolution),
        processes: a.processes,
        left_out: a.left_out.iter().map(|l| (l.trick.to_string(), l.reason.clone())).collect(),
    }
}

/// The resolution in words, with what it leaves aliased.
fn resolution_text(resolution: Option<u32>) -> String {
    match resolution {
        None => "full factorial: no effect is aliased with another".to_owned(),
        Some(r @ ..=3) => {
            format!("{}: main effects are aliased with two-trick interactions", crate::factorial::roman(r))
        }
        Some(4) => "IV: main effects are clear of two-trick interactions, which are aliased with each other"
            .to_owned(),
        Some(r) => {
            format!(
                "{}: main effects and two-trick interactions are aliased only with higher-order ones",
                crate::factorial::roman(r)
            )
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn resolutions_read_in_roman_numerals() {
        assert!(resolution_text(Some(5)).starts_with("V: "));
        assert!(resolution_text(None).starts_with("full factorial"));
    }
}
