//! The first screen of a report: per workload and device, one sentence, the baseline's absolute
//! numbers, the noise warning and a verdict per trick on the metric it is judged by; the
//! leave-one-out and stack designs in their own words.

use serde::Serialize;

use crate::bench::design::Design;
use crate::engine::Engine;
use crate::measure::host_allocator::HostAllocator;
use crate::report::gain::Gain;
use crate::report::model::{self, Effect, Entry, Group, Report, TrickVerdict};
use crate::report::phases;
use crate::results::diagnosis::Cause;
use crate::results::model::UserModel;
use crate::results::schema::{
    CellId, CellKey, CellKind, CellResult, CellStatus, Comparison, MeasurementDesign, NoiseFloor, Phase,
    Results, TtaSummary,
};
use crate::tricks::{Metric, Trick, TrickSet};

/// The first screen of one group.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct Overview {
    /// The group's title ("resnet8 · cpu on vm · quick profile").
    pub title: String,
    /// An HTML id for the group.
    pub slug: String,
    /// What the user's model is (its source, class, size, inputs and export); `None` for a
    /// reference workload.
    pub model: Option<String>,
    /// The conclusion in one sentence.
    pub sentence: String,
    /// The baseline's throughput and peak memory in absolute units.
    pub baseline: String,
    /// The A/A noise floors in one line: each engine's paired floor, the process-design floor
    /// where a cell of that design exists, and how many cells missed the precision asked.
    pub floors: Option<String>,
    /// Cells that ran on a throttled or shared machine, where any did.
    pub warnings: Vec<String>,
    /// `plots/<slug>.png` of the figure of every trick's effect (the page finds the figure by it).
    pub figure_png: String,
    /// One verdict per measured trick cell, helping first.
    pub rows: Vec<VerdictRow>,
    /// Tricks that do not apply here (other hardware, another model, another build), grouped by
    /// reason.
    pub not_applicable: Vec<NotApplicableGroup>,
    /// The stack's steps on each engine that stacked tricks (empty unless the group stacks
    /// tricks), PyTorch's first.
    pub stacks: Vec<Stack>,
    /// Whether the rows say what removing each trick does (the leave-one-out design).
    pub leave_one_out: bool,
    /// Whether the group measured both engines: the rows then give PyTorch's verdict, libtorch's
    /// beside it.
    pub two_engines: bool,
}

/// One trick's verdict.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct VerdictRow {
    /// The trick (with batch size, seed or phase where the group has several).
    pub trick: String,
    /// The metric it is judged by.
    pub metric: &'static str,
    /// The verdict.
    pub verdict: TrickVerdict,
    /// The verdict's words.
    pub label: &'static str,
    /// The verdict's CSS class.
    pub class: &'static str,
    /// The anchor of its cell in the all-cells table.
    pub anchor: String,
    /// Where the group measured both engines and this row is PyTorch's: the same trick's verdict
    /// and effect on libtorch ("helps: 5.77× throughput [5.57, 5.99] (paired)").
    pub libtorch: Option<String>,
    /// Where the two engines disagree (one helps where the other hurts, or their intervals do not
    /// overlap): how, and why where the cause is known.
    pub disagreement: Option<Disagreement>,
    /// Where the group measured both engines and this trick ran on one only: that engine (its
    /// verdict then stands in that engine's column).
    pub only_on: Option<Engine>,
    /// For a forced attention backend: which kernel ran beside which kernel the default (its
    /// reference, PyTorch's own choice) ran, and where they are one kernel, that its effect is
    /// not a distinct one.
    pub kernels: Option<String>,
    /// The effect on each engine that measured it as a number, PyTorch's first (empty where no
    /// engine has one: failed, not reached, not measured).
    pub gains: Vec<Gain>,
    /// Why, on each engine that diagnosed it, PyTorch's first: its ceiling and, for an effect
    /// that is null, negative or disputed, its cause.
    pub why: Vec<Why>,
}

/// One engine's ceiling and cause of a trick's effect, in words.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct Why {
    /// The engine.
    pub engine: Engine,
    /// The ceiling ("the optimizer and zeroing 4.0% of the step: at most 1.04×"), or why there is
    /// none ("no ceiling: …").
    pub ceiling: String,
    /// The cause in one short line ("bound elsewhere: at most 1.01× inside ±2.3%"), where the
    /// effect needs one.
    pub cause_short: Option<String>,
    /// The cause's name, the start of its short line ("bound elsewhere").
    pub cause_name: Option<&'static str>,
    /// The cause in sentences, with its numbers.
    pub cause: Option<String>,
}

impl Why {
    /// The diagnosis of comparison `c` of a cell on `engine`, where it has one.
    pub(crate) fn of(engine: Engine, c: &Comparison) -> Option<Why> {
        let d = c.diagnosis.as_ref()?;
        let ceiling = match (&d.ceiling, &d.ceiling_unavailable) {
            (Some(ceiling), _) => ceiling.text(),
            (None, Some(why)) => format!("no ceiling: {why}"),
            (None, None) => "no ceiling".to_owned(),
        };
        Some(Why {
            engine,
            ceiling,
            cause_short: d.cause.as_ref().map(Cause::short),
            cause_name: d.cause.as_ref().map(Cause::name),
            cause: d.cause.as_ref().map(Cause::sentence),
        })
    }
}

/// How two engines disagree on a trick, and why where that is known.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct Disagreement {
    /// "the engines disagree: the intervals of their effects do not overlap (helps in PyTorch,
    /// helps on libtorch)".
    pub how: String,
    /// The cause, or what is known of it, in sentences (empty where nothing is).
    pub why: String,
}

/// Tricks that could not run for one reason.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct NotApplicableGroup {
    /// Why.
    pub reason: String,
    /// The tricks.
    pub tricks: Vec<&'static str>,
}

impl NotApplicableGroup {
    /// The reason's first clause, before its first colon: "needs a CUDA GPU".
    pub(crate) fn cause(&self) -> &str {
        self.reason.split(':').next().unwrap_or(&self.reason).trim()
    }
}

/// `items`, each a cause and what it holds, grouped by cause in the order each cause first comes,
/// each member once.
pub(crate) fn by_cause<T: PartialEq>(items: impl IntoIterator<Item = (String, T)>) -> Vec<(String, Vec<T>)> {
    let mut groups: Vec<(String, Vec<T>)> = Vec::new();
    for (cause, item) in items {
        match groups.iter_mut().find(|(c, _)| *c == cause) {
            Some((_, members)) if members.contains(&item) => {}
            Some((_, members)) => members.push(item),
            None => groups.push((cause, vec![item])),
        }
    }
    groups
}

/// The stack of one engine.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct Stack {
    /// The table's heading: "The stack, one trick at a time", with the engine where a group
    /// measured two.
    pub title: String,
    /// Its steps.
    pub rows: Vec<StackRow>,
}

/// One step of a stack: a trick added to those before it.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct StackRow {
    /// "+ zero-copy".
    pub added: String,
    /// Speed-up of every trick so far against the baseline, with its interval.
    pub cumulative: String,
    /// This step's own gain: its cumulative speed-up ÷ the previous step's.
    pub step_gain: String,
    /// CSS class of the cumulative verdict.
    pub class: &'static str,
}

impl Report<'_> {
    /// The first screen of every group.
    pub fn overviews(&self) -> Vec<Overview> {
        self.groups.iter().map(|g| overview(self.results, g)).collect()
    }
}

fn overview(results: &[Results], g: &Group) -> Overview {
    let leave_one_out = g.entries.first().is_some_and(|e| results[e.file].run.design == Design::LeaveOneOut);
    let mut rows = if leave_one_out { leave_one_out_rows(g) } else { ablation_rows(results, g) };
    rows.sort_by_key(|r| r.verdict.effect);
    let stacks = if leave_one_out { Vec::new() } else { stacks(g) };
    let mut baseline = baseline_text(results, g);
    if let Some(full) = leave_one_out.then(|| every_trick_text(g)).flatten() {
        baseline.push(' ');
        baseline.push_str(&full);
    }
    let not_applicable = not_applicable(g);
    Overview {
        title: g.title(),
        slug: g.slug(),
        model: g.model.map(|m| match super::probes::baseline_sentence(results, g) {
            Some(largest) => format!("{} {largest}", model_text(m)),
            None => model_text(m),
        }),
        sentence: sentence(&rows, &not_applicable, leave_one_out),
        baseline,
        floors: floors_line(results, g),
        warnings: machine_warning(g).into_iter().collect(),
        figure_png: format!("plots/{}.png", glance_slug(g)),
        rows,
        not_applicable,
        stacks,
        leave_one_out,
        two_engines: g.has_several_engines(),
    }
}

/// The user's model in a sentence: what it is, how big, what it reads, what it is built of and
/// how the libtorch engine trains it, and what its `dataset()` holds.
pub(crate) fn model_text(m: &UserModel) -> String {
    let source = match (&m.file, &m.package) {
        (Some(file), _) => format!("{} in {}", m.function.as_deref().unwrap_or("model"), file.display()),
        (None, Some(package)) => format!("{} {}", package.name, package.version),
        (None, None) => m.spec.clone(),
    };
    let flops = m.flops_per_sample.map_or_else(
        || "FLOPs not counted".to_owned(),
        |f| format!("{:.3} GFLOPs a sample forward (PyTorch's FlopCounterMode)", f / 1e9),
    );
    let f = &m.features;
    let export = match (m.export.method, &m.export.reason) {
        (Some(method), _) => format!("libtorch trains its {} export", method.name()),
        (None, reason) => format!(
            "not exported to TorchScript ({}), so measured on the PyTorch engine only",
            reason.as_deref().unwrap_or("no reason recorded")
        ),
    };
    let dataset = m.dataset.as_ref().map_or_else(String::new, |d| {
        format!(
            " Its dataset() holds {} training and {} test samples of {:?} {} inputs.",
            d.train_samples, d.test_samples, d.inputs.shape, d.inputs.dtype
        )
    });
    format!(
        "{}: {} from {source}, {:.2} M parameters, {flops}; batches of {:?} {} inputs, {} {} per batch; {} \
         convolutions ({} with a bias before a BatchNorm), {} {}, {}; {export}.{dataset}",
        m.name,
        m.class,
        m.parameters as f64 / 1e6,
        m.inputs.shape,
        m.inputs.dtype,
        m.samples_per_batch,
        m.sample_unit.name(),
        f.convolutions,
        f.bias_before_batch_norm,
        f.linears,
        plural(f.linears, "linear", "linears"),
        if f.sdpa {
            "attention through scaled_dot_product_attention"
        } else {
            "no scaled_dot_product_attention"
        },
    )
}

/// Whether `e` is a throughput cell of `phase`.
fn is_throughput(e: &Entry, phase: Phase) -> bool {
    e.cell.key.kind == (CellKind::Throughput { phase })
}

fn row(g: &Group, e: &Entry, metric: Metric, verdict: TrickVerdict) -> VerdictRow {
    VerdictRow {
        trick: g.label(e),
        metric: metric.label(),
        label: verdict.effect.label(),
        class: verdict.effect.class(),
        verdict,
        anchor: model::anchor(e),
        libtorch: None,
        disagreement: None,
        only_on: None,
        kernels: kernels_note(g, e),
        gains: Vec::new(),
        why: e.comparison.and_then(|c| Why::of(e.cell.key.engine, c)).into_iter().collect(),
    }
}

/// The file stem of the group's figure of every trick's effect.
pub(crate) fn glance_slug(g: &Group) -> String {
    format!("{}-at-a-glance", g.slug())
}

/// For the cell of a forced attention backend, the kernel it ran and the one its reference (the
/// default's, PyTorch's own choice) ran; "the same kernel as the default" where they are one.
fn kernels_note(g: &Group, e: &Entry) -> Option<String> {
    e.cell.key.tricks.forced_attention_backend()?;
    let ran = e.cell.attention_ran()?;
    let reference = &e.comparison?.baseline;
    let default = g.entries.iter().find(|x| x.cell.id() == *reference)?.cell.attention_ran()?;
    Some(if ran == default {
        format!("the same kernel as the default ({} ran on both sides): not a distinct effect", ran.id())
    } else {
        format!("{} ran; the default ran {}", ran.id(), default.id())
    })
}

/// One row per single-trick cell: throughput and memory tricks by their comparison, time-to-accuracy
/// tricks by their configuration's summary.
fn ablation_rows(results: &[Results], g: &Group) -> Vec<VerdictRow> {
    let mut rows: Vec<(VerdictRow, &Entry)> = Vec::new();
    for e in &g.entries {
        let Some(trick) = model::single_trick(&e.cell.key.tricks) else { continue };
        if e.cell.key.reference_for.is_some() || matches!(e.cell.status, CellStatus::NotApplicable { .. }) {
            continue;
        }
        let metric = trick.metric();
        let verdict = match metric {
            Metric::TimeToAccuracy if e.cell.key.kind == CellKind::TimeToAccuracy => {
                let Some(summary) = tta_summary(results, e) else { continue };
                if summary.cells.first() != Some(&e.cell.id()) {
                    continue;
                }
                // One row stands for the configuration over its seeds.
                let label = g.label(e);
                let label = label.strip_suffix(&format!(" · s{}", e.cell.key.seed)).unwrap_or(&label);
                let verdict = model::tta_verdict(&results[e.file], summary);
                let gains = Gain::of_time_to_accuracy(e.cell.key.engine, verdict.effect, summary)
                    .into_iter()
                    .collect();
                rows.push((VerdictRow { trick: label.to_owned(), gains, ..row(g, e, metric, verdict) }, e));
                continue;
            }
            Metric::TimeToAccuracy => continue,
            Metric::EvalThroughput if !is_throughput(e, Phase::Eval) => continue,
            Metric::Throughput | Metric::Memory if !is_throughput(e, Phase::Train) => continue,
            _ => match e.comparison {
                Some(c) if trick.also_time_to_accuracy() => {
                    with_quality(results, e, g.verdict_of(e, metric, c))
                }
                Some(c) => g.verdict_of(e, metric, c),
                None => not_measured(e),
            },
        };
        let gains = match (e.comparison, verdict.effect) {
            (_, Effect::NotMeasured) | (None, _) => Vec::new(),
            (Some(c), effect) => {
                Gain::of_comparison(e.cell.key.engine, effect, metric, c).into_iter().collect()
            }
        };
        rows.push((VerdictRow { gains, ..row(g, e, metric, verdict) }, e));
    }
    if g.has_several_engines() {
        side_by_side(results, g, rows)
    } else {
        rows.into_iter().map(|(row, _)| row).collect()
    }
}

/// The rows of a group measured on both engines: each trick's PyTorch row with the libtorch row
/// of the same cell folded into it, beside its verdict, and flagged where the two disagree; a
/// trick measured on one engine only keeps its row, its label saying which and its verdict in
/// that engine's column.
fn side_by_side(results: &[Results], g: &Group, rows: Vec<(VerdictRow, &Entry)>) -> Vec<VerdictRow> {
    let on_libtorch = |e: &Entry| CellKey { engine: Engine::Libtorch, ..e.cell.key.clone() };
    let mut out = Vec::new();
    for (row, e) in &rows {
        let engine = e.cell.key.engine;
        let twin = rows.iter().find(|(_, x)| x.cell.key.engine != engine && on_libtorch(x) == on_libtorch(e));
        let mut row = row.clone();
        let suffix = format!(" · {engine}");
        row.trick = row.trick.strip_suffix(&suffix).unwrap_or(&row.trick).to_owned();
        match (engine, twin) {
            (Engine::Libtorch, Some(_)) => continue,
            (Engine::Pytorch, Some((libtorch, other))) => {
                row.libtorch = Some(format!("{}: {}", libtorch.label, libtorch.verdict.text));
                row.gains.extend(libtorch.gains.iter().copied());
                row.why.extend(libtorch.why.iter().cloned());
                let run = &results[e.file].run;
                let plain_malloc =
                    run.protocol.host_allocator == HostAllocator::System && !run.device.is_cuda();
                row.disagreement = disagreement(g, (e, &row), (other, libtorch), plain_malloc);
            }
            (_, None) => {
                row.trick.push_str(&format!(" ({engine} only)"));
                row.only_on = Some(engine);
                if engine.is_libtorch() {
                    row.libtorch = Some(format!("{}: {}", row.label, row.verdict.text));
                }
            }
        }
        out.push(row);
    }
    out
}

/// How the PyTorch row `row` of cell `e` and the libtorch row `libtorch` of cell `other` disagree,
/// if they do: one helps where the other hurts, or, for a trick judged by throughput, the
/// intervals of their effects do not overlap and at least one of them helps or hurts (verdicts
/// that differ only across the edge of significance, their intervals overlapping, and two
/// verdicts of no effect, are not a disagreement); with the trick's known
/// cause of a gap between the engines (or else how the engines' work differs for it, where the
/// catalogue says, or else the host allocator where `plain_malloc`: a CPU run that left glibc's
/// malloc as it is), and
/// where both engines broke their steps into phases, the
/// phase that changed most against each one's reference.
fn disagreement(
    g: &Group,
    (e, row): (&Entry, &VerdictRow),
    (other, libtorch): (&Entry, &VerdictRow),
    plain_malloc: bool,
) -> Option<Disagreement> {
    let judged_by_throughput =
        model::single_trick(&e.cell.key.tricks).is_some_and(|t| t.metric() != Metric::Memory);
    let apart = match (e.comparison, other.comparison) {
        (Some(a), Some(b)) if judged_by_throughput => {
            a.speedup_ci_high < b.speedup_ci_low || b.speedup_ci_high < a.speedup_ci_low
        }
        _ => false,
    };
    let effects = [row.verdict.effect, libtorch.verdict.effect];
    // Two verdicts of no effect never disagree, however their intervals lie.
    let apart = apart && (effects.contains(&Effect::Helps) || effects.contains(&Effect::Hurts));
    let how = if effects.contains(&Effect::Helps) && effects.contains(&Effect::Hurts) {
        format!("the engines disagree: it {} in PyTorch and {} on libtorch", row.label, libtorch.label)
    } else if apart {
        format!(
            "the engines disagree: the intervals of their effects do not overlap ({} in PyTorch, {} on \
             libtorch)",
            row.label, libtorch.label
        )
    } else {
        return None;
    };
    let trick = model::single_trick(&e.cell.key.tricks);
    let info = trick.map(|t| t.info());
    let mut why = match (info.and_then(|i| i.engine_gap), info.and_then(|i| i.ops_differ)) {
        _ if trick.is_some_and(|t| t.metric() == Metric::TimeToAccuracy) => {
            format!("{ROUNDING_PARTS_CURVES}.")
        }
        (Some(cause), _) => format!("Why: {cause}."),
        (None, Some(ops)) => format!("The engines do different work here: {ops}."),
        (None, None) if plain_malloc => format!("{SYSTEM_ALLOCATOR_GAP}."),
        (None, None) => String::new(),
    };
    if let (Some(pytorch), Some(libtorch)) = (phase_change(g, e), phase_change(g, other)) {
        let space = if why.is_empty() { "" } else { " " };
        why.push_str(&format!(
            "{space}Where the step changed most against each engine's reference: {pytorch} in PyTorch, \
             {libtorch} on libtorch."
        ));
    }
    Some(Disagreement { how, why })
}

/// Why two engines' times to the target may disagree though they train the same arithmetic.
const ROUNDING_PARTS_CURVES: &str = "Both engines train the same recipe on the same batches from \
    the same weights (their first steps' losses agree to 1e-5, tests/engine_tta.rs), but float32 \
    rounding, which the two round differently, grows until their curves part as two seeds' do: \
    this gap is the spread between seeds, which more seeds (--seeds) measure";

/// Why two engines may disagree on a CPU in a run with glibc's default malloc.
const SYSTEM_ALLOCATOR_GAP: &str = "This run left glibc's malloc as a plain script has it \
    (--host-allocator system): each step page-faults the memory it freed in again, at a cost that \
    depends on how each engine's process allocates. In make run on the 2-core VM the engines \
    disagreed under it on no-grad-eval (ResNet-8 1.30× in PyTorch, 1.51× on libtorch) and \
    loader-workers, and agreed on both in the same hour under the default --host-allocator tuned, \
    which keeps freed memory. Each side's faults in its timed windows are in the results \
    (processes[].timed_page_faults); trickbench crosscheck found the same for a plain script beside \
    the PyTorch engine, channels-last 1.19× in the script and 1.28× in the engine, whose NCHW \
    reference faulted 7,300 more pages a step than its channels-last side (docs/crosscheck.md)";

/// The phase of a training step that changed most from cell `e`'s reference to `e`, in words
/// ([`phases::largest_change`]), where both have a step breakdown.
fn phase_change(g: &Group, e: &Entry) -> Option<String> {
    let reference = g.entries.iter().find(|x| e.comparison.is_some_and(|c| x.cell.id() == c.baseline))?;
    phases::largest_change(&e.cell.step_breakdown()?, &reference.cell.step_breakdown()?)
}

/// The throughput `verdict` of cell `e`, whose trick changes the arithmetic and was trained to the
/// target too, with what that showed: a trick faster per step but slower to the target is called
/// so (and hurts); otherwise its time to the target follows its throughput verdict.
fn with_quality(results: &[Results], e: &Entry, verdict: TrickVerdict) -> TrickVerdict {
    let key = &e.cell.key;
    let trained = results[e.file].time_to_accuracy.iter().find(|s| {
        (s.workload, s.engine) == (key.workload, key.engine)
            && s.reference_for.is_none()
            && s.tricks == key.tricks
    });
    let Some(summary) = trained else { return verdict };
    let quality = model::tta_verdict(&results[e.file], summary);
    if (verdict.effect, quality.effect) == (Effect::Helps, Effect::Hurts) {
        return TrickVerdict {
            effect: Effect::Hurts,
            text: format!("faster per step ({}), but slower to the target: {}", verdict.text, quality.text),
        };
    }
    TrickVerdict { text: format!("{}; to the target: {}", verdict.text, quality.text), ..verdict }
}

/// The time-to-accuracy summary a cell belongs to.
fn tta_summary<'r>(results: &'r [Results], e: &Entry) -> Option<&'r TtaSummary> {
    results[e.file].time_to_accuracy.iter().find(|t| t.cells.contains(&e.cell.id()))
}

fn not_measured(e: &Entry) -> TrickVerdict {
    TrickVerdict { effect: Effect::NotMeasured, text: model::status_summary(&e.cell.status) }
}

/// One row per trick left out: the cell without it against the cell with every trick.
fn leave_one_out_rows(g: &Group) -> Vec<VerdictRow> {
    let mut rows = Vec::new();
    for e in &g.entries {
        let Some(c) = e.comparison else { continue };
        let Some(full) = g.entries.iter().find(|x| x.cell.id() == c.baseline) else { continue };
        let Some(dropped) = dropped_trick(&full.cell.key.tricks, &e.cell.key.tricks) else { continue };
        let verdict = model::removal_verdict(c);
        let gains = Gain::of_comparison(e.cell.key.engine, verdict.effect, Metric::Throughput, c)
            .into_iter()
            .collect();
        rows.push(VerdictRow {
            trick: dropped.id().to_owned(),
            metric: Metric::Throughput.label(),
            label: verdict.effect.label(),
            class: verdict.effect.class(),
            verdict,
            anchor: model::anchor(e),
            libtorch: None,
            disagreement: None,
            only_on: None,
            kernels: None,
            gains,
            why: Vec::new(),
        });
    }
    rows
}

/// The one trick of `full` that `rest` lacks, if `rest` is `full` less one trick.
fn dropped_trick(full: &TrickSet, rest: &TrickSet) -> Option<Trick> {
    let missing: Vec<Trick> = full.iter().filter(|t| !rest.has(*t)).collect();
    let extra = rest.iter().any(|t| !full.has(t));
    match missing.as_slice() {
        [t] if !extra => Some(*t),
        _ => None,
    }
}

/// The leave-one-out's cell with every trick (the one the others are compared with) in words:
/// "With all 8 tricks: 964812 tokens/s, 18.58× [17.9, 19.2] against baseline+debug-apis-on."
fn every_trick_text(g: &Group) -> Option<String> {
    let full_id = g
        .entries
        .iter()
        .filter_map(|e| e.comparison)
        .map(|c| &c.baseline)
        .find(|id| g.entries.iter().any(|x| x.cell.id() == **id && x.cell.key.tricks.len() >= 2))?;
    let full = g.entries.iter().find(|x| x.cell.id() == *full_id)?;
    let unit = g.sample_unit();
    let throughput = full.cell.throughput?;
    let mut text = format!(
        "With all {} tricks: {:.0} {unit}/s",
        full.cell.key.tricks.len(),
        throughput.median_samples_per_s
    );
    if let Some(c) = full.comparison {
        text.push_str(&format!(", {} against {}", model::speedup_text(c), configuration_of(g, &c.baseline)));
    }
    text.push('.');
    Some(text)
}

/// The configuration label of the cell `id` of the group (the id itself if it is not there).
fn configuration_of(g: &Group, id: &CellId) -> String {
    g.entries
        .iter()
        .find(|e| e.cell.id() == *id)
        .map_or_else(|| id.to_string(), |e| e.cell.key.configuration_label())
}

/// Not-applicable tricks grouped by reason, each trick once.
fn not_applicable(g: &Group) -> Vec<NotApplicableGroup> {
    let mut out: Vec<NotApplicableGroup> = Vec::new();
    for e in &g.entries {
        let CellStatus::NotApplicable { reason, .. } = &e.cell.status else { continue };
        let Some(trick) = model::single_trick(&e.cell.key.tricks) else { continue };
        if listed_through_its_twin(g, e) {
            continue;
        }
        // Reasons start with the trick's name, which the list shows already.
        let reason = reason.strip_prefix(&format!("{}: ", trick.id())).unwrap_or(reason);
        let group = match out.iter_mut().position(|n| n.reason == reason) {
            Some(i) => &mut out[i],
            None => {
                out.push(NotApplicableGroup { reason: reason.to_owned(), tricks: Vec::new() });
                out.last_mut().expect("just pushed")
            }
        };
        if !group.tricks.contains(&trick.id()) {
            group.tricks.push(trick.id());
        }
    }
    out
}

/// Whether the not-applicable cell `e` of a group measured on both engines is left out of the
/// list of tricks that do not apply here: a PyTorch cell whose libtorch twin exists (measured, its
/// row says "libtorch only", or not applicable, its reason listed), and a libtorch cell whose
/// PyTorch twin was measured (its row says "pytorch only").
fn listed_through_its_twin(g: &Group, e: &Entry) -> bool {
    let on = |engine| CellKey { engine, ..e.cell.key.clone() };
    let twin = |engine| g.entries.iter().find(|x| x.cell.key == on(engine));
    match e.cell.key.engine {
        Engine::Pytorch => twin(Engine::Libtorch).is_some(),
        Engine::Libtorch => {
            twin(Engine::Pytorch).is_some_and(|x| !matches!(x.cell.status, CellStatus::NotApplicable { .. }))
        }
    }
}

/// "Of 12 tricks measured, 2 help (debug-off, no-grad-eval); 3 hurt (…); 7 show no measurable
/// effect or sit inside the noise floor; 9 do not apply here."
fn sentence(rows: &[VerdictRow], na: &[NotApplicableGroup], leave_one_out: bool) -> String {
    let names = |effect: Effect| -> Vec<&str> {
        rows.iter().filter(|r| r.verdict.effect == effect).map(|r| r.trick.as_str()).collect()
    };
    let list = |effect: Effect, verb: &str| {
        let names = names(effect);
        let one = names.len() == 1;
        let mut words = if one { format!("{verb}s") } else { verb.to_owned() };
        if leave_one_out {
            let removal = if verb == "help" { "costs" } else { "gains" };
            words.push_str(&format!(" (removing {} {removal} throughput)", if one { "it" } else { "them" }));
        }
        match names.len() {
            0 => None,
            n if n <= 4 => Some(format!("{n} {words} ({})", names.join(", "))),
            n => Some(format!("{n} {words} ({}, …)", names[..4].join(", "))),
        }
    };
    let mut parts: Vec<String> =
        [list(Effect::Helps, "help"), list(Effect::Hurts, "hurt")].into_iter().flatten().collect();
    let neutral = names(Effect::Unmeasurable).len() + names(Effect::WithinNoise).len();
    if neutral > 0 {
        let (show, sit) = if neutral == 1 { ("shows", "sits") } else { ("show", "sit") };
        parts.push(format!("{neutral} {show} no measurable effect or {sit} inside the noise floor"));
    }
    let inconclusive = names(Effect::NotMeasured).len();
    if inconclusive > 0 {
        parts.push(format!("{inconclusive} inconclusive (failed, or neither side reached the target)"));
    }
    let na_count: usize = na.iter().map(|n| n.tricks.len()).sum();
    let mut text = if parts.is_empty() {
        "No trick was measured against a baseline".to_owned()
    } else {
        format!("Of {} {} measured, {}", rows.len(), plural(rows.len(), "trick", "tricks"), parts.join("; "))
    };
    if na_count > 0 {
        text.push_str(&format!("; {na_count} {} here", plural(na_count, "does not apply", "do not apply")));
    }
    text.push('.');
    text
}

/// `one` for a count of one, else `many`.
fn plural(n: usize, one: &'static str, many: &'static str) -> &'static str {
    if n == 1 {
        one
    } else {
        many
    }
}

/// "Baseline: 410 images/s [400, 420] at batch 128; peak memory 123 MiB (peak CPU tensor memory)."
fn baseline_text(results: &[Results], g: &Group) -> String {
    let unit = g.sample_unit();
    let engine = if g.has_several_engines() { Engine::Pytorch } else { g.entries[0].cell.key.engine };
    let Some(cell) = baseline_of(g, engine) else {
        return "No baseline throughput cell in these results.".to_owned();
    };
    let throughput = cell.throughput.map_or_else(
        || format!("baseline did not measure ({})", model::status_summary(&cell.status)),
        |t| {
            format!(
                "Baseline{}: {:.0} {unit}/s [{:.0}, {:.0}] at batch {}",
                if g.has_several_engines() { " in eager PyTorch" } else { "" },
                t.median_samples_per_s,
                t.ci_low_samples_per_s,
                t.ci_high_samples_per_s,
                cell.key.batch_size
            )
        },
    );
    let mut text = match cell.memory.filter(|m| m.primary_bytes().is_some()) {
        // The PyTorch engine counts no CPU tensors: its figure is the process's resident set.
        Some(m) if m.peak_allocated_bytes.is_none() => format!(
            "{throughput}; peak memory {} (peak resident memory of the process, RSS).",
            mebibytes(m.primary_bytes().unwrap_or(0))
        ),
        Some(m) => format!(
            "{throughput}; peak memory {} ({}).",
            mebibytes(m.primary_bytes().unwrap_or(0)),
            g.memory_label()
        ),
        None => format!("{throughput}."),
    };
    if let Some(overhead) = g.has_several_engines().then(|| python_overhead_text(results, g)).flatten() {
        text.push(' ');
        text.push_str(&overhead);
    }
    text
}

/// The training-throughput baseline of `engine` in the group.
fn baseline_of<'a>(g: &'a Group, engine: Engine) -> Option<&'a CellResult> {
    let baseline = g.entries.iter().find(|e| {
        let key = &e.cell.key;
        key.is_plain_baseline() && key.engine == engine && is_throughput(e, Phase::Train)
    });
    baseline.map(|e| e.cell)
}

/// The two engines' baselines side by side: where eager PyTorch is slower, the share of its step
/// that Python's per-operator overhead takes, which CUDA graphs and compilers can take back. The
/// baselines run in processes of their own, so where their ratio lies within the wider of the two
/// engines' process-design A/A floors it is not told apart from 1, and the text says so.
fn python_overhead_text(results: &[Results], g: &Group) -> Option<String> {
    let median = |engine| baseline_of(g, engine)?.throughput.map(|t| t.median_samples_per_s);
    let (pytorch, libtorch) = (median(Engine::Pytorch)?, median(Engine::Libtorch)?);
    let unit = g.sample_unit();
    let ratio = pytorch / libtorch;
    let floors = group_floors(results, g);
    let floor = |engine: Engine| widest_floor(&floors, MeasurementDesign::Processes, Some(engine));
    let floors = floor(Engine::Libtorch).zip(floor(Engine::Pytorch));
    let share = if let Some((of_libtorch, of_pytorch)) =
        floors.filter(|(l, p)| (ratio - 1.0).abs() <= l.max(*p))
    {
        format!(
            ", within the process-design A/A floors (±{:.1}% libtorch, ±{:.1}% PyTorch): the two baselines are \
             not told apart on this machine",
            of_libtorch * 100.0,
            of_pytorch * 100.0
        )
    } else if ratio < 1.0 {
        format!(
            ": Python's per-operator overhead takes about {:.0}% of a PyTorch step, the headroom CUDA graphs \
             and compilers can take back",
            (1.0 - ratio) * 100.0
        )
    } else {
        ": no Python overhead shows at this size".to_owned()
    };
    Some(format!(
        "libtorch's baseline runs at {libtorch:.0} {unit}/s, so eager PyTorch runs at {ratio:.2}× libtorch \
         (medians of their own processes){share}."
    ))
}

/// Bytes in MiB, whole.
pub(crate) fn mebibytes(bytes: u64) -> String {
    format!("{:.0} MiB", bytes as f64 / f64::from(1u32 << 20))
}

/// The group's A/A noise floors in one line: each engine's paired floor, the floor of separate
/// processes where a trick of the group was measured that way (naming those tricks), and how many
/// cells missed the precision asked; `None` where the group has no floor and no noisy cell.
fn floors_line(results: &[Results], g: &Group) -> Option<String> {
    let file = &results[g.entries.first()?.file];
    let floors = group_floors(results, g);
    let several = g.has_several_engines();
    let by_design = |design: MeasurementDesign| {
        let parts: Vec<String> = [Engine::Pytorch, Engine::Libtorch]
            .into_iter()
            .filter_map(|engine| Some((engine, widest_floor(&floors, design, Some(engine))?)))
            .map(|(engine, half_width)| {
                format!("±{:.1}%{}", half_width * 100.0, model::engine_suffix(engine, several))
            })
            .collect();
        (!parts.is_empty()).then(|| parts.join(", "))
    };
    let mut parts = Vec::new();
    if let Some(paired) = by_design(MeasurementDesign::Paired) {
        parts.push(format!("paired {paired}"));
    }
    let unpaired = processes_design_tricks(g);
    if let Some(processes) = by_design(MeasurementDesign::Processes).filter(|_| !unpaired.is_empty()) {
        parts.push(format!("in separate processes ({}) {processes}", unpaired.join(", ")));
    }
    let mut line = (!parts.is_empty()).then(|| format!("Noise floor (A/A control): {}.", parts.join("; ")));
    if let Some(noisy) = noisy_text(file, g) {
        line = Some(match line {
            Some(floors) => format!("{floors} {noisy}"),
            None => noisy,
        });
    }
    line
}

/// The A/A noise floors of the group's workload in every results file that holds a cell of the
/// group.
pub(crate) fn group_floors<'r>(results: &'r [Results], g: &Group) -> Vec<&'r NoiseFloor> {
    let mut files: Vec<usize> = g.entries.iter().map(|e| e.file).collect();
    files.dedup();
    let floors = files.into_iter().flat_map(|file| &results[file].noise_floors);
    floors.filter(|f| f.workload == g.workload).collect()
}

/// The widest half-width of `floors` of `design`, on `engine` (on any engine for `None`), a
/// fraction.
pub(crate) fn widest_floor(
    floors: &[&NoiseFloor],
    design: MeasurementDesign,
    engine: Option<Engine>,
) -> Option<f64> {
    let matching = floors.iter().filter(|f| f.design == design && engine.is_none_or(|e| f.engine == e));
    matching.map(|f| f.half_width).reduce(f64::max)
}

/// The tricks of the group whose effects were measured in separate processes, not paired.
fn processes_design_tricks(g: &Group) -> Vec<String> {
    let mut tricks: Vec<String> = Vec::new();
    let unpaired = g.entries.iter().filter(|e| {
        !e.cell.key.aa_control && e.comparison.is_some_and(|c| c.design == MeasurementDesign::Processes)
    });
    for e in unpaired {
        let label = e.cell.key.configuration_label();
        if !tricks.contains(&label) {
            tricks.push(label);
        }
    }
    tricks
}

/// "5 of 34 cells missed the ±3.0% asked (their rows say so)", where any did.
fn noisy_text(file: &Results, g: &Group) -> Option<String> {
    let target = file.run.protocol.target_ci_half_width?;
    let measured: Vec<&Entry> = g.entries.iter().filter(|e| e.cell.throughput.is_some()).collect();
    let noisy =
        measured.iter().filter(|e| e.cell.noise_warning(e.comparison, Some(target)).is_some()).count();
    (noisy > 0).then(|| {
        format!(
            "{noisy} of {} measured cells missed the ±{:.1}% asked (this machine was too busy or variable for \
             it): treat small effects with care.",
            measured.len(),
            target * 100.0
        )
    })
}

/// The unfair-machine warning: cells that ran on a throttled or shared machine, where any did.
fn machine_warning(g: &Group) -> Option<String> {
    let unfair = g.entries.iter().filter(|e| e.cell.machine_warning().is_some()).count();
    (unfair > 0).then(|| {
        format!(
            "{unfair} of {} cells ran on a throttled or shared machine (their rows say how), so their numbers \
             may not be what this machine does when it is cool and free.",
            g.entries.iter().filter(|e| !e.cell.processes.is_empty()).count()
        )
    })
}

/// The stack's chain: from one trick up to the largest set, each step adding one trick, each
/// measured against the plain baseline. Walking down from the largest set, where several cells
/// could be the step below (the single tricks under the first pair), the fastest is the one the
/// stack added first, as the stack design adds tricks best first.
/// The stack of each engine that stacked tricks, PyTorch's first.
fn stacks(g: &Group) -> Vec<Stack> {
    let several = g.has_several_engines();
    [Engine::Pytorch, Engine::Libtorch]
        .into_iter()
        .map(|engine| {
            let on = model::engine_suffix(engine, several);
            Stack { title: format!("The stack{on}, one trick at a time"), rows: stack_rows(g, engine) }
        })
        .filter(|stack| !stack.rows.is_empty())
        .collect()
}

/// The steps of the stack on `engine`: its largest trick set, and below it the chain of sets one
/// trick smaller each, the trick added at each step and the step's own gain.
fn stack_rows(g: &Group, engine: Engine) -> Vec<StackRow> {
    let candidates: Vec<(&Entry, &Comparison)> = g
        .entries
        .iter()
        .filter(|e| {
            is_throughput(e, Phase::Train)
                && e.cell.key.reference_for.is_none()
                && e.cell.key.engine == engine
        })
        .filter_map(|e| e.comparison.map(|c| (e, c)))
        .collect();
    let Some(top) = candidates
        .iter()
        .filter(|(e, _)| e.cell.key.tricks.len() >= 2)
        .max_by_key(|(e, _)| e.cell.key.tricks.len())
    else {
        return Vec::new();
    };
    let mut chain = vec![*top];
    while chain.last().is_some_and(|(e, _)| e.cell.key.tricks.len() > 1) {
        let above = &chain.last().expect("not empty").0.cell.key.tricks;
        let below = candidates
            .iter()
            .filter(|(e, _)| {
                e.cell.key.tricks.len() + 1 == above.len() && e.cell.key.tricks.iter().all(|t| above.has(t))
            })
            .max_by(|a, b| a.1.speedup.total_cmp(&b.1.speedup));
        match below {
            Some(step) => chain.push(*step),
            None => return Vec::new(),
        }
    }
    chain.reverse();
    let mut rows = Vec::new();
    let (mut previous, mut previous_speedup) = (&TrickSet::baseline(), 1.0);
    for (e, c) in chain {
        let added: Vec<&str> =
            e.cell.key.tricks.iter().filter(|t| !previous.has(*t)).map(Trick::id).collect();
        rows.push(StackRow {
            added: format!("+ {}", added.join(", ")),
            cumulative: model::speedup_text(c),
            step_gain: format!("{:.2}×", c.speedup / previous_speedup),
            class: model::verdict_class(c.verdict),
        });
        previous = &e.cell.key.tricks;
        previous_speedup = c.speedup;
    }
    rows
}
