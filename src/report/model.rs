//! The view model of a report: cells grouped by (workload, device, profile), with their comparisons,
//! labels, colours and formatted figures shared by the plots, the HTML, the Markdown and the CSV.

use std::collections::HashMap;

use serde::Serialize;

use crate::analysis::{noise_floor_half_width, time_to_target_verdict};
use crate::device::DeviceSpec;
use crate::engine::Engine;
use crate::report::plots::Rgb;
use crate::results::model::UserModel;
use crate::results::rehearsal::{RehearsalTally, Rehearsed};
use crate::results::schema::{
    time_ratio_text, CellKind, CellResult, CellStatus, Comparison, Phase, Results, TtaSummary, Verdict,
};
use crate::tricks::{Metric, Trick, TrickSet};
use crate::workloads::{Family, WorkloadId};

/// All results of a report, grouped.
pub(crate) struct Report<'a> {
    /// The results files, in the order given.
    pub results: &'a [Results],
    /// The groups, in order of first appearance.
    pub groups: Vec<Group<'a>>,
}

/// One time-to-accuracy configuration over its seeds, as the report shows it.
#[derive(Debug, Clone, serde::Serialize)]
pub(crate) struct TtaRow {
    /// Workload, device and profile.
    pub group: String,
    /// Configuration and batch size.
    pub configuration: String,
    /// Metric and target.
    pub target: String,
    /// Seeds that reached the target, of those that finished ("2/3").
    pub reached: String,
    /// Median training time to the target.
    pub median_time: String,
    /// Median epochs to the target.
    pub median_epochs: String,
    /// Median best metric.
    pub best: String,
    /// Against the reference configuration.
    pub versus: String,
}

/// One cell of one results file, with its comparison against the baseline if there is one.
pub(crate) struct Entry<'a> {
    /// Index of the results file (0-based).
    pub file: usize,
    /// The cell.
    pub cell: &'a CellResult,
    /// Its comparison against its baseline cell.
    pub comparison: Option<&'a Comparison>,
}

/// The cells of one workload on one device under one profile (shards of a run merge here).
pub(crate) struct Group<'a> {
    /// The workload.
    pub workload: WorkloadId,
    /// The user's network, for the `model` workload.
    pub model: Option<&'a UserModel>,
    /// The device measured.
    pub device: DeviceSpec,
    /// A readable name of the device and machine.
    pub device_name: String,
    /// The profile.
    pub profile: &'a str,
    /// The cells, in file and plan order.
    pub entries: Vec<Entry<'a>>,
}

impl<'a> Report<'a> {
    /// Groups the cells of `results`.
    pub fn new(results: &'a [Results]) -> Report<'a> {
        let mut groups: Vec<Group<'a>> = Vec::new();
        for (file, r) in results.iter().enumerate() {
            let comparisons: HashMap<&str, &Comparison> =
                r.comparisons.iter().map(|c| (c.cell.as_str(), c)).collect();
            for cell in &r.cells {
                let entry = Entry { file, cell, comparison: comparisons.get(cell.id().as_str()).copied() };
                let workload = cell.key.workload;
                let device = r.run.device;
                let profile = r.run.profile.id();
                let device_name = device_name(r);
                let model = r.run.model.as_ref().filter(|_| workload == WorkloadId::Model);
                match groups.iter_mut().find(|g| {
                    g.workload == workload
                        && g.model.map(|m| &m.name) == model.map(|m| &m.name)
                        && g.device == device
                        && g.profile == profile
                        && g.device_name == device_name
                }) {
                    Some(g) => g.entries.push(entry),
                    None => groups.push(Group {
                        workload,
                        model,
                        device,
                        device_name,
                        profile,
                        entries: vec![entry],
                    }),
                }
            }
        }
        Report { results, groups }
    }

    /// Whether any results file was measured on synthetic data.
    pub fn synthetic(&self) -> bool {
        self.results.iter().any(|r| r.run.data.synthetic)
    }

    /// Each results file that is a rehearsal of a GPU run on the CPU, told as such.
    pub fn rehearsals(&self) -> Vec<RehearsalView> {
        self.results.iter().filter_map(RehearsalView::of).collect()
    }

    /// Every cell of every group.
    pub fn entries(&self) -> impl Iterator<Item = (&Group<'a>, &Entry<'a>)> {
        self.groups.iter().flat_map(|g| g.entries.iter().map(move |e| (g, e)))
    }

    /// Time to accuracy per configuration over its seeds, against its reference.
    pub fn time_to_accuracy_rows(&self) -> Vec<TtaRow> {
        self.results
            .iter()
            .flat_map(|r| {
                let device = device_name(r);
                r.time_to_accuracy.iter().map(move |t| {
                    let value = |v: f64| t.metric.value_text(v);
                    let median = |v: Option<f64>, unit: &str, decimals: usize| {
                        v.map_or_else(|| "not reached".to_owned(), |v| format!("{v:.decimals$}{unit}"))
                    };
                    TtaRow {
                        group: format!("{} · {device} · {}", t.workload, r.run.profile),
                        configuration: match t.engine {
                            Engine::Libtorch => format!("{} · b{}", t.configuration, t.batch_size),
                            engine => format!("{} · b{} · {engine}", t.configuration, t.batch_size),
                        },
                        target: t.metric.target_text(t.target),
                        reached: format!("{}/{}", t.reached, t.seeds),
                        median_time: median(t.median_time_to_target_s, " s", 1),
                        median_epochs: median(t.median_epochs_to_target, "", 2),
                        best: value(t.median_best_metric),
                        versus: t.versus_text().unwrap_or_else(|| "—".to_owned()),
                    }
                })
            })
            .collect()
    }
}

impl Group<'_> {
    /// The workload's name: its id, or the user's model's name (`torchvision:resnet18`).
    pub fn name(&self) -> &str {
        self.model.map_or(self.workload.id(), |m| m.name.as_str())
    }

    /// What a sample of the workload is, plural: the unit of its throughput.
    pub fn sample_unit(&self) -> &'static str {
        self.model.map_or(self.workload.family().sample_unit(), |m| m.sample_unit.name())
    }

    /// "resnet20 · cpu on host · quick profile".
    pub fn title(&self) -> String {
        format!("{} · {} · {} profile", self.name(), self.device_name, self.profile)
    }

    /// A file-name-safe identifier: `resnet20-cpu-host-quick`.
    pub fn slug(&self) -> String {
        slug(&format!("{}-{}-{}", self.name(), self.device_name, self.profile))
    }

    /// What memory comparisons use on this device.
    pub fn memory_label(&self) -> &'static str {
        let tensors_counted =
            self.entries.iter().any(|e| e.cell.memory.is_some_and(|m| m.peak_allocated_bytes.is_some()));
        match (self.device.is_cuda(), tensors_counted) {
            (true, _) => "peak allocated device memory",
            (false, true) => "peak CPU tensor memory",
            (false, false) => "peak resident memory (RSS)",
        }
    }

    /// The distinct values of `f` over the cells of the same kind (throughput or time to accuracy)
    /// as `e`, leaving out baselines.
    fn variety<T: Ord>(&self, e: &Entry, f: impl Fn(&Entry) -> T) -> usize {
        let tta = |x: &Entry| x.cell.key.kind == CellKind::TimeToAccuracy;
        let mut values: Vec<T> = self
            .entries
            .iter()
            .filter(|x| tta(x) == tta(e) && !x.cell.key.tricks.is_baseline())
            .map(f)
            .collect();
        values.sort_unstable();
        values.dedup();
        values.len()
    }

    /// The label of a cell within this group: its trick set, plus phase, batch size and seed where
    /// the group has several.
    pub fn label(&self, e: &Entry) -> String {
        let key = &e.cell.key;
        let mut label = key.configuration_label();
        if key.kind == (CellKind::Throughput { phase: Phase::Eval }) {
            label.push_str(" (eval)");
        }
        if self.variety(e, |x| x.cell.key.batch_size) > 1 {
            label.push_str(&format!(" · b{}", key.batch_size));
        }
        if self.variety(e, |x| x.cell.key.seed) > 1 {
            label.push_str(&format!(" · s{}", key.seed));
        }
        if self.has_several_engines() {
            label.push_str(&format!(" · {}", key.engine));
        }
        label
    }

    /// Whether the group holds cells of more than one engine.
    pub fn has_several_engines(&self) -> bool {
        self.entries.iter().any(|e| e.cell.key.engine != self.entries[0].cell.key.engine)
    }

    /// Trick cells (not the baseline) that time throughput: measured ones by speed-up, highest
    /// first, then the ones without a speed-up (not applicable, failed …) in plan order.
    pub fn trick_throughput(&self) -> Vec<&Entry<'_>> {
        let mut rows: Vec<_> = self
            .entries
            .iter()
            .filter(|e| {
                matches!(e.cell.key.kind, CellKind::Throughput { .. }) && !e.cell.key.tricks.is_baseline()
            })
            .collect();
        rows.sort_by(|a, b| {
            let s = |e: &Entry| e.comparison.map_or(f64::NEG_INFINITY, |c| c.speedup);
            s(b).total_cmp(&s(a))
        });
        rows
    }

    /// Time-to-accuracy cells.
    pub fn time_to_accuracy(&self) -> Vec<&Entry<'_>> {
        self.entries.iter().filter(|e| e.cell.key.kind == CellKind::TimeToAccuracy).collect()
    }

    /// The verdict of the trick cell `e` judged by `metric` from its comparison `c`
    /// ([`cell_verdict`]), naming the reference where a trick of the cell is compared with another
    /// in its place ("… against amp-bf16+flash-attention").
    pub fn verdict_of(&self, e: &Entry, metric: Metric, c: &Comparison) -> TrickVerdict {
        let mut verdict = cell_verdict(metric, c);
        let swapped = e.cell.key.tricks.swapped_reference().is_some();
        let reference = self.entries.iter().find(|x| x.cell.id() == c.baseline);
        if let Some(r) = reference.filter(|_| swapped) {
            verdict.text.push_str(&format!(" against {}", r.cell.key.configuration_label()));
        }
        verdict
    }

    fn headline_row(&self, e: &Entry) -> HeadlineRow {
        let tricks = &e.cell.key.tricks;
        let single = single_trick(tricks);
        let metric = single.map_or(Metric::Throughput, Trick::metric);
        let own_verdict =
            e.comparison.filter(|_| metric != Metric::TimeToAccuracy).map(|c| self.verdict_of(e, metric, c));
        let guide =
            tricks.iter().filter_map(Trick::guide_number).map(|n| format!("#{n}")).collect::<Vec<_>>();
        HeadlineRow {
            group: self.title(),
            cell: e.cell.id().to_string(),
            anchor: anchor(e),
            tricks: self.label(e),
            guide: if guide.is_empty() { "—".to_owned() } else { guide.join(", ") },
            change: single.map_or_else(
                || format!("baseline + {} tricks", tricks.iter().count()),
                |t| format!("{} → {}", t.off(self.workload.family()), t.on(self.workload.family())),
            ),
            metric: single.map_or("throughput", |t| t.metric().label()).to_owned(),
            speedup: match (&own_verdict, e.comparison) {
                (Some(v), _) => v.text.clone(),
                (None, Some(c)) => format!("{}; judged by time to accuracy", speedup_text(c)),
                (None, None) => status_summary(&e.cell.status),
            },
            verdict: own_verdict.as_ref().map_or("—", |v| v.effect.label()).to_owned(),
            verdict_class: own_verdict.as_ref().map_or("none", |v| v.effect.class()).to_owned(),
            memory: e
                .comparison
                .and_then(|c| c.memory_ratio)
                .map_or_else(|| "—".to_owned(), |m| format!("{m:.2}×")),
        }
    }
}

/// One row of the headline table.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct HeadlineRow {
    /// The group title.
    pub group: String,
    /// The cell id.
    pub cell: String,
    /// HTML anchor of the cell.
    pub anchor: String,
    /// Trick set label (with phase, batch and seed where needed).
    pub tricks: String,
    /// Guide numbers.
    pub guide: String,
    /// What switching the trick changes ("off → on").
    pub change: String,
    /// The metric the trick is judged by.
    pub metric: String,
    /// The effect on the trick's own metric (speed-up with its interval, or the memory ratio), or
    /// the cell's status.
    pub speedup: String,
    /// The verdict on the trick's own metric ("—" where it is judged by time to accuracy).
    pub verdict: String,
    /// CSS class of the verdict.
    pub verdict_class: String,
    /// Memory ratio against the baseline.
    pub memory: String,
}

/// What a trick does on the metric it is judged by.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "kebab-case")]
pub(crate) enum Effect {
    /// It improves its metric beyond what the measurement can resolve.
    Helps,
    /// It worsens its metric.
    Hurts,
    /// The measurement cannot tell it from no change.
    Unmeasurable,
    /// It moved its metric by less than the A/A control moved the baseline.
    WithinNoise,
    /// Its cells failed, ran out of memory or timed out, or nothing compares them.
    NotMeasured,
}

impl Effect {
    /// Words for the verdict badge.
    pub fn label(self) -> &'static str {
        match self {
            Effect::Helps => "helps",
            Effect::Hurts => "hurts",
            Effect::Unmeasurable => "no measurable effect",
            Effect::WithinNoise => "inside the A/A noise floor",
            Effect::NotMeasured => "inconclusive",
        }
    }

    /// Every effect, in the order of a colour key.
    pub(crate) const ALL: [Effect; 5] =
        [Effect::Helps, Effect::Hurts, Effect::Unmeasurable, Effect::WithinNoise, Effect::NotMeasured];

    /// A plot's colour for it (colour-blind safe: blue, vermilion, greys, amber).
    pub(crate) fn colour(self) -> Rgb {
        match self {
            Effect::Helps => Rgb(0, 114, 178),
            Effect::Hurts => Rgb(213, 94, 0),
            Effect::Unmeasurable => Rgb(173, 181, 189),
            Effect::WithinNoise => Rgb(206, 212, 218),
            Effect::NotMeasured => Rgb(230, 159, 0),
        }
    }

    /// CSS class of the verdict badge (the throughput verdicts' colours).
    pub fn class(self) -> &'static str {
        match self {
            Effect::Helps => "faster",
            Effect::Hurts => "slower",
            Effect::Unmeasurable | Effect::WithinNoise => "neutral",
            Effect::NotMeasured => "inconclusive",
        }
    }
}

/// A trick's verdict on its own metric, with the effect in words ("0.56× memory, 0.72× throughput").
#[derive(Debug, Clone, PartialEq, Serialize)]
pub(crate) struct TrickVerdict {
    /// What the trick does to its metric.
    pub effect: Effect,
    /// The effect in words, its own metric first.
    pub text: String,
}

/// A peak-memory ratio closer to 1 than this is no measurable effect (peaks are not resampled, so
/// they carry no interval; allocator rounding moves them by a few percent).
pub(crate) const MEMORY_TOLERANCE: f64 = 0.05;

/// A time-to-target ratio closer to 1 than this is no measurable effect (a few seeds give no
/// interval, and the time to an evaluation point moves with the evaluation spacing).
pub(crate) const TIME_TO_ACCURACY_TOLERANCE: f64 = 0.05;

/// The verdict of a trick cell judged by `metric`: throughput metrics by the comparison's interval,
/// memory by [`memory_verdict`]. Time to accuracy is judged by [`tta_verdict`].
pub(crate) fn cell_verdict(metric: Metric, comparison: &Comparison) -> TrickVerdict {
    if metric == Metric::Memory {
        return memory_verdict(comparison);
    }
    let memory = comparison.memory_ratio.map(|m| format!("{m:.2}× memory"));
    let effect = throughput_effect(comparison.verdict);
    let label = if metric == Metric::EvalThroughput { "eval throughput" } else { "throughput" };
    let mut text = format!(
        "{:.2}× {label} [{:.2}, {:.2}] {}",
        comparison.speedup,
        comparison.speedup_ci_low,
        comparison.speedup_ci_high,
        comparison.design.tag()
    );
    if let Some(memory) =
        memory.filter(|_| comparison.memory_ratio.is_some_and(|m| (m - 1.0).abs() > MEMORY_TOLERANCE))
    {
        text.push_str(&format!(", {memory}"));
    }
    TrickVerdict { effect, text }
}

/// What a throughput verdict says of a trick judged by throughput.
pub(crate) fn throughput_effect(verdict: Verdict) -> Effect {
    match verdict {
        Verdict::Faster => Effect::Helps,
        Verdict::Slower => Effect::Hurts,
        Verdict::NoSignificantEffect => Effect::Unmeasurable,
        Verdict::WithinNoise => Effect::WithinNoise,
    }
}

/// The verdict of a trick judged by peak memory: it helps where it saves more than
/// [`MEMORY_TOLERANCE`] and hurts where it uses that much more. Within the tolerance it saves
/// nothing, so it hurts where it is also significantly slower (the comparison's verdict is
/// [`Verdict::Slower`]: the whole interval below 1 and beyond the A/A noise floor), and is no
/// measurable effect otherwise.
fn memory_verdict(comparison: &Comparison) -> TrickVerdict {
    let throughput = format!("{:.2}× throughput", comparison.speedup);
    let Some(ratio) = comparison.memory_ratio else {
        return TrickVerdict { effect: Effect::NotMeasured, text: format!("memory unknown, {throughput}") };
    };
    match ratio_effect(1.0 / ratio, MEMORY_TOLERANCE) {
        Effect::Unmeasurable if comparison.verdict == Verdict::Slower => TrickVerdict {
            effect: Effect::Hurts,
            text: format!(
                "no memory saved ({ratio:.2}×) and {throughput} [{:.2}, {:.2}]: a cost",
                comparison.speedup_ci_low, comparison.speedup_ci_high
            ),
        },
        effect => TrickVerdict { effect, text: format!("{ratio:.2}× memory, {throughput}") },
    }
}

/// The verdict of a time-to-accuracy configuration of `results` against its reference, by the
/// ratio of their median times to the target ("1.43× slower", "1.20× sooner"): it helps or hurts
/// when that ratio is beyond [`TIME_TO_ACCURACY_TOLERANCE`] and the difference is significant by
/// the rule the speedrun design combines tricks by ([`time_to_target_verdict`]: no seed of the two
/// overlaps, by more than the A/A noise floor); a larger ratio that is not significant is inside
/// the noise.
pub(crate) fn tta_verdict(results: &Results, summary: &TtaSummary) -> TrickVerdict {
    let reference = summary.reference.as_deref().unwrap_or("its reference");
    let (effect, text) =
        match (summary.speedup, summary.median_time_to_target_s.is_some(), summary.reference_reached) {
            (Some(ratio), _, _) => (
                ratio_effect(ratio, TIME_TO_ACCURACY_TOLERANCE),
                format!("{} to {} than {reference}", time_ratio_text(ratio), summary_target(summary)),
            ),
            (None, true, _) => {
                (Effect::Helps, format!("reached {}; {reference} did not", summary_target(summary)))
            }
            (None, false, Some(true)) => {
                (Effect::Hurts, format!("did not reach {}; {reference} did", summary_target(summary)))
            }
            (None, false, _) => {
                let text = format!("neither it nor {reference} reached {}", summary_target(summary));
                return TrickVerdict { effect: Effect::NotMeasured, text };
            }
        };
    let reference_summary = results.time_to_accuracy.iter().find(|r| {
        (r.workload, r.engine) == (summary.workload, summary.engine)
            && summary.reference.as_ref() == Some(&r.label())
    });
    let significant = reference_summary.map(|r| {
        let floor = noise_floor_half_width(results, summary.workload).unwrap_or(0.0);
        time_to_target_verdict(&results.cells, summary, r, floor) != Verdict::NoSignificantEffect
    });
    match effect {
        Effect::Helps | Effect::Hurts if significant == Some(false) => TrickVerdict {
            effect: Effect::WithinNoise,
            text: format!("{text}, not on every seed by more than the A/A noise floor"),
        },
        _ => TrickVerdict { effect, text },
    }
}

fn summary_target(summary: &TtaSummary) -> String {
    summary.metric.target_text(summary.target)
}

/// The verdict of a compared cell on its trick's own metric: a trick left out by what removing it
/// does, anything else on [`judged_metric`].
pub(crate) fn judged(
    cell: &CellResult,
    comparison: &Comparison,
    reference: Option<&CellResult>,
) -> TrickVerdict {
    if leaves_out(cell, reference) {
        return removal_verdict(comparison);
    }
    cell_verdict(judged_metric(&cell.key.tricks, cell.key.aa_control, cell.key.kind), comparison)
}

/// Whether `cell` is compared with a larger trick set: its reference less some tricks, as in a
/// leave-one-out.
pub(crate) fn leaves_out(cell: &CellResult, reference: Option<&CellResult>) -> bool {
    let tricks = |c: &CellResult| c.key.tricks.iter().count();
    reference.is_some_and(|r| tricks(r) > tricks(cell))
}

/// The metric a throughput cell of `tricks` is judged on: peak memory for a memory trick, else
/// its phase's throughput (the A/A control is the baseline, judged by throughput).
pub(crate) fn judged_metric(tricks: &TrickSet, aa_control: bool, kind: CellKind) -> Metric {
    let trick = single_trick(tricks).filter(|_| !aa_control);
    match (trick.map(Trick::metric), kind) {
        (Some(Metric::Memory), _) => Metric::Memory,
        (_, CellKind::Throughput { phase: Phase::Eval }) => Metric::EvalThroughput,
        _ => Metric::Throughput,
    }
}

/// What removing a trick does, in words, and the trick's verdict that follows: a removal that costs
/// throughput means the trick helps.
pub(crate) fn removal_verdict(c: &Comparison) -> TrickVerdict {
    let change = (c.speedup - 1.0).abs() * 100.0;
    let interval =
        format!("without it {:.2}× [{:.2}, {:.2}]", c.speedup, c.speedup_ci_low, c.speedup_ci_high);
    let (effect, text) = match c.verdict {
        Verdict::Slower => (Effect::Helps, format!("removing it costs {change:.0}% throughput ({interval})")),
        Verdict::Faster => (Effect::Hurts, format!("removing it gains {change:.0}% throughput ({interval})")),
        Verdict::NoSignificantEffect => {
            (Effect::Unmeasurable, format!("removing it changes nothing measurable ({interval})"))
        }
        Verdict::WithinNoise => {
            (Effect::WithinNoise, format!("removing it moves throughput within the noise floor ({interval})"))
        }
    };
    TrickVerdict { effect, text }
}

/// Helps above `1 + tolerance`, hurts below `1 - tolerance` (`ratio` > 1 is better).
pub(crate) fn ratio_effect(ratio: f64, tolerance: f64) -> Effect {
    if ratio > 1.0 + tolerance {
        Effect::Helps
    } else if ratio < 1.0 - tolerance {
        Effect::Hurts
    } else {
        Effect::Unmeasurable
    }
}

/// The trick a set measures alone: its one trick, or a trick with the precision its reference
/// adds on a CUDA GPU ([`TrickSet::ablated_trick`]).
pub(crate) fn single_trick(set: &TrickSet) -> Option<Trick> {
    set.ablated_trick()
}

/// Where a cell of `engine` ran, as the report says it: "in PyTorch" or "on libtorch".
pub(crate) fn engine_words(engine: Engine) -> &'static str {
    match engine {
        Engine::Pytorch => "in PyTorch",
        Engine::Libtorch => "on libtorch",
    }
}

/// The engine as a title or line continues, where `several` engines share it (" in PyTorch",
/// " on libtorch"); nothing where one engine ran.
pub(crate) fn engine_suffix(engine: Engine, several: bool) -> String {
    if several {
        format!(" {}", engine_words(engine))
    } else {
        String::new()
    }
}

/// A unique HTML anchor for a cell.
pub(crate) fn anchor(e: &Entry) -> String {
    format!("cell-{}-{}", e.file + 1, slug(e.cell.id().as_str()))
}

/// Lower-case letters, digits and single dashes.
pub(crate) fn slug(s: &str) -> String {
    let mut out = String::new();
    for c in s.chars() {
        if c.is_ascii_alphanumeric() {
            out.push(c.to_ascii_lowercase());
        } else if !out.ends_with('-') {
            out.push('-');
        }
    }
    out.trim_matches('-').to_owned()
}

/// "cuda:0 on gpu-node", "cpu on laptop".
pub(crate) fn device_name(r: &Results) -> String {
    match &r.system.hostname {
        Some(host) => format!("{} on {host}", r.run.device),
        None => r.run.device.to_string(),
    }
}

/// Short status name.
pub(crate) fn status_label(s: &CellStatus) -> &'static str {
    match s {
        CellStatus::Ok => "ok",
        CellStatus::NotApplicable { .. } => "not applicable",
        CellStatus::Failed { .. } => "failed",
        CellStatus::OutOfMemory { .. } => "out of memory",
        CellStatus::Timeout { .. } => "timed out",
    }
}

/// CSS class of a status.
pub(crate) fn status_class(s: &CellStatus) -> &'static str {
    match s {
        CellStatus::Ok => "ok",
        CellStatus::NotApplicable { .. } => "na",
        CellStatus::Failed { .. } | CellStatus::OutOfMemory { .. } | CellStatus::Timeout { .. } => "error",
    }
}

/// The status's reason: why a cell is not applicable, or why it did not measure (for a failed
/// cell the line of its stderr that says why).
pub(crate) fn status_detail(cell: &CellResult) -> String {
    match &cell.status {
        CellStatus::NotApplicable { reason, .. } => reason.clone(),
        _ => cell.failure_reason().unwrap_or_default(),
    }
}

/// What to show instead of a speed-up for a cell that has none.
pub(crate) fn status_summary(s: &CellStatus) -> String {
    match s {
        CellStatus::Ok => "no baseline to compare with".to_owned(),
        CellStatus::Timeout { limit_s, .. } => format!("timed out ({limit_s:.0} s)"),
        other => status_label(other).to_owned(),
    }
}

/// The stderr tail of a failed or timed-out cell.
pub(crate) fn stderr_tail(s: &CellStatus) -> &str {
    match s {
        CellStatus::Failed { stderr_tail, .. } | CellStatus::Timeout { stderr_tail, .. } => stderr_tail,
        _ => "",
    }
}

/// "1.23× [1.10, 1.35] (paired)".
pub(crate) fn speedup_text(c: &Comparison) -> String {
    format!("{:.2}× [{:.2}, {:.2}] {}", c.speedup, c.speedup_ci_low, c.speedup_ci_high, c.design.tag())
}

/// Readable verdict.
pub(crate) fn verdict_label(v: Verdict) -> &'static str {
    match v {
        Verdict::Faster => "faster",
        Verdict::Slower => "slower",
        Verdict::NoSignificantEffect => "no significant effect",
        Verdict::WithinNoise => "not distinguishable from noise on this machine",
    }
}

/// CSS class of a verdict.
pub(crate) fn verdict_class(v: Verdict) -> &'static str {
    match v {
        Verdict::Faster => "faster",
        Verdict::Slower => "slower",
        Verdict::NoSignificantEffect | Verdict::WithinNoise => "neutral",
    }
}

/// Bytes in binary units: "1.50 GiB".
pub(crate) fn bytes_text(b: u64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut v = b as f64;
    let mut unit = 0;
    while v >= 1024.0 && unit + 1 < UNITS.len() {
        v /= 1024.0;
        unit += 1;
    }
    if unit == 0 {
        format!("{b} B")
    } else {
        format!("{v:.2} {}", UNITS[unit])
    }
}

/// The colour of a trick, the same in every plot (the trick table's).
pub(crate) fn trick_colour(t: Trick) -> Rgb {
    let [r, g, b] = t.colour();
    Rgb(r, g, b)
}

/// The colour of a trick set: grey for the baseline, the trick's colour for one trick, the mean of
/// the tricks' colours for several.
pub(crate) fn set_colour(set: &TrickSet) -> Rgb {
    let colours: Vec<Rgb> = set.iter().map(trick_colour).collect();
    if colours.is_empty() {
        return Rgb(127, 127, 127);
    }
    let mean = |f: fn(&Rgb) -> u8| {
        (colours.iter().map(|c| u32::from(f(c))).sum::<u32>() / colours.len() as u32) as u8
    };
    Rgb(mean(|c| c.0), mean(|c| c.1), mean(|c| c.2))
}

/// One trick of the catalogue with its claim and what this report measured for it.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct TrickSection {
    /// Trick id.
    pub id: &'static str,
    /// Guide number, or "modern addition".
    pub guide: String,
    /// What "off" means.
    pub off: &'static str,
    /// What "on" means.
    pub on: &'static str,
    /// The primary metric.
    pub metric: &'static str,
    /// The claim from the guides.
    pub claim: &'static str,
    /// CSS colour of the trick (`rgb(…)`), matching the plots.
    pub colour: String,
    /// The cells of this trick alone, one line each.
    pub measured: Vec<HeadlineRow>,
    /// Its time-to-accuracy configurations over their seeds, against their references.
    pub time_to_accuracy: Vec<TtaRow>,
    /// Why it could not be measured, where it could not.
    pub not_applicable: Vec<String>,
}

impl Report<'_> {
    /// Every trick these results measured, with its claim and its measured effects (tricks that
    /// were not asked for, or could not run anywhere, have no section).
    pub fn tricks(&self) -> Vec<TrickSection> {
        let tta_rows = self.time_to_accuracy_rows();
        // The CIFAR recipe's wording unless the report holds only GPTs.
        let family = if self.groups.iter().all(|g| g.workload.family() == Family::CharGpt) {
            Family::CharGpt
        } else {
            Family::CifarResnet
        };
        Trick::ALL
            .into_iter()
            .filter_map(|t| {
                let mut measured = Vec::new();
                let mut not_applicable = Vec::new();
                for g in &self.groups {
                    let alone = |e: &&Entry| single_trick(&e.cell.key.tricks) == Some(t);
                    for e in g.time_to_accuracy().into_iter().filter(alone) {
                        if let CellStatus::NotApplicable { reason, .. } = &e.cell.status {
                            let line = format!("{} ({}): {reason}", g.title(), e.cell.id());
                            if !not_applicable.contains(&line) {
                                not_applicable.push(line);
                            }
                        }
                    }
                    for e in g.trick_throughput() {
                        if single_trick(&e.cell.key.tricks) != Some(t) {
                            continue;
                        }
                        if let CellStatus::NotApplicable { reason, .. } = &e.cell.status {
                            let line = format!("{} ({}): {reason}", g.title(), e.cell.id());
                            if !not_applicable.contains(&line) {
                                not_applicable.push(line);
                            }
                        } else {
                            measured.push(g.headline_row(e));
                        }
                    }
                }
                let time_to_accuracy: Vec<TtaRow> = tta_rows
                    .iter()
                    .zip(self.results.iter().flat_map(|r| &r.time_to_accuracy))
                    .filter(|(_, summary)| single_trick(&summary.tricks) == Some(t))
                    .map(|(row, _)| row.clone())
                    .collect();
                if measured.is_empty() && time_to_accuracy.is_empty() {
                    return None;
                }
                let Rgb(r, g, b) = trick_colour(t);
                Some(TrickSection {
                    id: t.id(),
                    guide: t
                        .guide_number()
                        .map_or_else(|| "modern addition".to_owned(), |n| format!("guide #{n}")),
                    off: t.off(family),
                    on: t.on(family),
                    metric: t.metric().label(),
                    claim: t.claim(),
                    colour: format!("rgb({r}, {g}, {b})"),
                    measured,
                    time_to_accuracy,
                    not_applicable,
                })
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::Engine;
    use crate::results::schema::{CellKey, MeasurementDesign};

    #[test]
    fn slugs_and_bytes() {
        assert_eq!(
            slug("resnet20/amp+channels-last/b128/s0/train"),
            "resnet20-amp-channels-last-b128-s0-train"
        );
        assert_eq!(slug("cuda:0 on Node_7"), "cuda-0-on-node-7");
        assert_eq!(bytes_text(512), "512 B");
        assert_eq!(bytes_text(3 * 1024 * 1024 / 2), "1.50 MiB");
    }

    /// A memory trick's comparison: `speedup` in [`low`, `high`] with `verdict`, peak memory
    /// `memory` × the baseline's.
    fn memory_comparison(memory: f64, speedup: f64, low: f64, high: f64, verdict: Verdict) -> Comparison {
        let key = |tricks: &[Trick]| CellKey {
            workload: WorkloadId::Resnet8,
            tricks: tricks.iter().copied().collect(),
            batch_size: 128,
            seed: 0,
            kind: CellKind::Throughput { phase: Phase::Train },
            reference_for: None,
            aa_control: false,
            alone: false,
            engine: Engine::Libtorch,
        };
        Comparison {
            cell: key(&[Trick::Checkpointing]).id(),
            baseline: key(&[]).id(),
            speedup,
            speedup_ci_low: low,
            speedup_ci_high: high,
            verdict,
            memory_ratio: Some(memory),
            design: MeasurementDesign::Processes,
            diagnosis: None,
        }
    }

    #[test]
    fn a_memory_trick_that_saves_nothing_and_is_significantly_slower_is_a_cost() {
        let slower = memory_comparison(1.05, 0.71, 0.64, 0.78, Verdict::Slower);
        assert_eq!(
            cell_verdict(Metric::Memory, &slower),
            TrickVerdict {
                effect: Effect::Hurts,
                text: "no memory saved (1.05×) and 0.71× throughput [0.64, 0.78]: a cost".to_owned(),
            }
        );
        // The same numbers inside the A/A noise floor, or an interval that holds 1, are no cost.
        for verdict in [Verdict::WithinNoise, Verdict::NoSignificantEffect] {
            let unresolved = memory_comparison(1.05, 0.71, 0.64, 0.78, verdict);
            assert_eq!(
                cell_verdict(Metric::Memory, &unresolved),
                TrickVerdict {
                    effect: Effect::Unmeasurable,
                    text: "1.05× memory, 0.71× throughput".to_owned()
                }
            );
        }
    }

    #[test]
    fn a_memory_trick_is_judged_by_its_memory_before_its_throughput() {
        let judged = |memory, verdict| {
            cell_verdict(Metric::Memory, &memory_comparison(memory, 0.71, 0.64, 0.78, verdict))
        };
        // Saving memory helps however much slower it is.
        assert_eq!(judged(0.56, Verdict::Slower).effect, Effect::Helps);
        assert_eq!(judged(0.56, Verdict::Slower).text, "0.56× memory, 0.71× throughput");
        // Using more memory hurts, slower or not.
        assert_eq!(judged(1.20, Verdict::NoSignificantEffect).effect, Effect::Hurts);
        assert_eq!(judged(1.20, Verdict::Slower).text, "1.20× memory, 0.71× throughput");
        // A faster trick that saves no memory is judged by its memory alone.
        let faster = memory_comparison(1.0, 1.30, 1.20, 1.40, Verdict::Faster);
        assert_eq!(cell_verdict(Metric::Memory, &faster).effect, Effect::Unmeasurable);
        // Without a peak there is nothing to judge.
        let unknown = Comparison { memory_ratio: None, ..faster };
        assert_eq!(cell_verdict(Metric::Memory, &unknown).effect, Effect::NotMeasured);
    }

    #[test]
    fn colours_are_distinct_per_trick() {
        let mut seen: Vec<Rgb> = Trick::ALL.iter().map(|&t| trick_colour(t)).collect();
        seen.push(set_colour(&TrickSet::baseline()));
        let n = seen.len();
        seen.sort_by_key(|c| (c.0, c.1, c.2));
        seen.dedup();
        assert_eq!(seen.len(), n);
    }
}

/// A rehearsal of a GPU run on the CPU, as a report tells it: what it rehearsed, its cases by how
/// far it took them, and each case.
#[derive(Debug, Serialize)]
pub struct RehearsalView {
    /// The run's id.
    pub id: String,
    /// The GPU rehearsed, in words (`sm90 (an H100 or H200)`).
    pub gpu: String,
    /// The cases by status in one line ([`RehearsalTally::line`]).
    pub tally: String,
    /// Each refused case, with why.
    pub refused: Vec<String>,
    /// Each case the plan made: its id, its status and the calls its tricks stood in for.
    pub cases: Vec<RehearsedCaseView>,
}

/// One case of a rehearsal.
#[derive(Debug, Serialize)]
pub struct RehearsedCaseView {
    /// The cell's id.
    pub id: String,
    /// `stepped`, `stood in` or `refused`.
    pub status: &'static str,
    /// The calls its tricks stood in for, or why it was refused.
    pub detail: String,
}

impl RehearsalView {
    /// The view of `results` when it is a rehearsal.
    fn of(results: &Results) -> Option<RehearsalView> {
        let gpu = results.run.device.rehearsed()?;
        let tally = RehearsalTally::of(results)?;
        let cases = results
            .cells
            .iter()
            .filter_map(|c| {
                let rehearsed = c.rehearsed()?;
                let detail = match &rehearsed {
                    Rehearsed::Stepped => String::new(),
                    Rehearsed::StoodIn(calls) => calls.iter().map(|s| s.id()).collect::<Vec<_>>().join(", "),
                    Rehearsed::Refused(why) => why.clone(),
                };
                Some(RehearsedCaseView { id: c.id().to_string(), status: rehearsed.label(), detail })
            })
            .collect();
        Some(RehearsalView {
            id: results.run.id.clone(),
            gpu: format!("{} ({})", gpu.id(), gpu.examples()),
            tally: tally.line(),
            refused: tally.refused.iter().map(|(id, why)| format!("{id}: {why}")).collect(),
            cases,
        })
    }
}
