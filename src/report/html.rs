//! The HTML report and comparison pages, and the template environment shared with the Markdown.

use std::path::Path;

use minijinja::value::Serde;
use minijinja::{context, escape_formatter, AutoEscape, Environment, Error, Output, State, Value};
use serde::Serialize;

use crate::measure::flops::Precision;
use crate::report::compare::glance::MachineGlance;
use crate::report::compare::view::GlanceView;
use crate::report::compare::{self, Comparison};
use crate::report::history::{History, Shift, Track};
use crate::report::model::{self, Report};
use crate::report::overview::Overview;
use crate::report::traces::TraceView;
use crate::report::{FigureFile, ReportError};
use crate::results::energy::EnergyMethod;
use crate::results::schema::{CellResult, Memory, Protocol, Results};

/// The templates, embedded in the binary.
const TEMPLATES: [(&str, &str); 17] = [
    ("head.html", include_str!("templates/head.html")),
    ("index.html", include_str!("templates/index.html")),
    ("tables.js", include_str!("templates/tables.js")),
    ("style.css", include_str!("templates/style.css")),
    ("report.html", include_str!("templates/report.html")),
    ("compare.html", include_str!("templates/compare.html")),
    ("methodology.html", include_str!("templates/methodology.html")),
    ("mismatches.html", include_str!("templates/mismatches.html")),
    ("sections.html", include_str!("templates/sections.html")),
    ("figure.html", include_str!("templates/figure.html")),
    ("summary.md", include_str!("templates/summary.md")),
    ("compare.md", include_str!("templates/compare.md")),
    ("history.html", include_str!("templates/history.html")),
    ("history.md", include_str!("templates/history.md")),
    ("speedrun.html", include_str!("templates/speedrun.html")),
    ("speedrun.md", include_str!("templates/speedrun.md")),
    ("factorial.html", include_str!("templates/factorial.html")),
];

/// The template environment: HTML templates auto-escape; `md` escapes Markdown table cells.
pub(crate) fn environment() -> Environment<'static> {
    let mut env = Environment::new();
    for (name, source) in TEMPLATES {
        // The templates are fixed and covered by the tests: a syntax error is a build defect.
        if let Err(e) = env.add_template(name, source) {
            panic!("embedded template {name} does not parse: {e:#}");
        }
    }
    env.add_filter("md", |s: String| markdown_cell(&s));
    env.set_formatter(html_formatter);
    env
}

/// Writes values as the default formatter does, except that HTML-escaped strings keep their `/`:
/// paths and links read as written (`plots/speedup.png`, not `plots&#x2f;speedup.png`).
fn html_formatter(out: &mut Output<'_>, state: &mut State<'_, '_>, value: &Value) -> Result<(), Error> {
    match value.as_str() {
        Some(text) if *state.auto_escape() == AutoEscape::Html && !value.is_safe() => {
            let escaped = text
                .replace('&', "&amp;")
                .replace('<', "&lt;")
                .replace('>', "&gt;")
                .replace('"', "&quot;")
                .replace('\'', "&#x27;");
            out.write_str(&escaped).map_err(Error::from)
        }
        _ => escape_formatter(out, state, value),
    }
}

/// Renders template `name` with `ctx`, for the file at `path`.
pub(crate) fn render(path: &Path, name: &str, ctx: minijinja::Value) -> Result<String, ReportError> {
    let env = environment();
    let template = env.get_template(name);
    template.and_then(|t| t.render(ctx)).map_err(|source| ReportError::Template {
        path: path.to_owned(),
        name: name.to_owned(),
        source,
    })
}

/// `text` as one cell of a Markdown table: its `|` escaped, its lines joined.
pub(crate) fn markdown_cell(text: &str) -> String {
    text.replace('|', "\\|").replace('\n', " ")
}

/// The section of the figures that open each group's first screen, above its table.
pub(crate) const GLANCE_SECTION: &str = "glance";

/// A section of figures.
#[derive(Serialize)]
pub(crate) struct Section<'a> {
    id: &'static str,
    title: &'static str,
    intro: String,
    figures: Vec<&'a FigureFile>,
}

/// What the speed-up and memory figures measure each bar against.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Reference {
    /// The baseline (or a trick's own reference): ablations, stacks, sweeps, comparisons.
    Baseline,
    /// The configuration with every trick on: a leave-one-out removes one trick at a time.
    AllTricks,
    /// Both: a report joining a leave-one-out with other designs.
    Mixed,
}

impl Reference {
    /// The reference of a report whose groups are (`true`) or are not leave-one-outs.
    pub(crate) fn of(leave_one_out: impl IntoIterator<Item = bool>) -> Reference {
        let (mut any, mut all) = (false, true);
        for l in leave_one_out {
            any |= l;
            all &= l;
        }
        match (any, all) {
            (false, _) => Reference::Baseline,
            (true, true) => Reference::AllTricks,
            (true, false) => Reference::Mixed,
        }
    }

    fn intro(self, what: &str) -> String {
        match self {
            Reference::Baseline => format!("{what} with each trick switched on, relative to the baseline."),
            Reference::AllTricks => format!(
                "{what} with each trick removed from the configuration with every trick on, relative to that \
                 configuration; the full set is also shown against the baseline."
            ),
            Reference::Mixed => format!(
                "{what} with each trick, relative to its reference: the baseline where a trick is switched on, \
                 the configuration with every trick on where one is removed (leave-one-out)."
            ),
        }
    }
}

/// The report's figure sections, in page order, leaving out empty ones.
pub(crate) fn sections(figures: &[FigureFile], reference: Reference) -> Vec<Section<'_>> {
    [
        ("speedup", "Speed-up per trick", reference.intro("Throughput")),
        (
            "phases",
            "Where a step's time goes",
            "Each training cell's step split into its phases, beside its speed-up: which part of the step a \
             trick shortened."
                .to_owned(),
        ),
        ("memory", "Peak memory", reference.intro("Peak memory")),
        (
            "tta",
            "Time to accuracy",
            "Training from scratch until the held-out metric reaches the target.".to_owned(),
        ),
        ("stack", "Stacking tricks", "Tricks switched on cumulatively, best first.".to_owned()),
        (
            "batch",
            "Batch-size sweep",
            "Throughput and memory across batch sizes, up to the largest that fits.".to_owned(),
        ),
        ("compare", "Across machines", "Each machine against its own baseline.".to_owned()),
        ("history", "Effects across versions", "Each trick's effect in each run, oldest first.".to_owned()),
    ]
    .into_iter()
    .map(|(id, title, intro)| Section {
        id,
        title,
        intro,
        figures: figures.iter().filter(|f| f.section == id).collect(),
    })
    .filter(|s| !s.figures.is_empty())
    .collect()
}

/// What the run summary shows of one results file.
#[derive(Serialize)]
struct RunView<'a> {
    json: String,
    results: &'a Results,
    device: String,
    memory_total: String,
    cuda: String,
    cudnn: String,
    command: String,
    /// The profile, with why `auto` picked it.
    profile: String,
    /// The host allocator the measuring processes started with, in words.
    allocator: &'static str,
    /// Each family's name and its settings in words.
    families: Vec<(&'static str, String)>,
    /// Each A/A noise floor in words, with its control's ratio and interval.
    floors: Vec<String>,
}

fn runs(results: &[Results]) -> Vec<RunView<'_>> {
    results
        .iter()
        .enumerate()
        .map(|(i, r)| RunView {
            json: super::results_file_name(i),
            results: r,
            device: model::device_name(r),
            memory_total: model::bytes_text(r.system.memory_total_bytes),
            cuda: compare::version(r.system.cuda_runtime_version),
            cudnn: compare::version(r.system.cudnn_version),
            command: r.run.command.join(" "),
            profile: r.run.profile_text(),
            allocator: r.run.protocol.host_allocator.description(),
            families: r.run.profile_settings.families.iter().map(|f| (f.family.name(), f.text())).collect(),
            floors: r.noise_floors.iter().map(|f| f.text(r.run.workload_name(f.workload))).collect(),
        })
        .collect()
}

/// The distinct measurement protocols of `results`, with the runs that used each.
fn protocols(results: &[Results]) -> Vec<(Protocol, Vec<String>)> {
    let mut out: Vec<(Protocol, Vec<String>)> = Vec::new();
    for r in results {
        match out.iter_mut().find(|(p, _)| *p == r.run.protocol) {
            Some((_, runs)) => runs.push(r.run.id.clone()),
            None => out.push((r.run.protocol.clone(), vec![r.run.id.clone()])),
        }
    }
    out
}

#[derive(Serialize)]
struct CellView {
    anchor: String,
    id: String,
    group: String,
    status: &'static str,
    status_class: &'static str,
    detail: String,
    stderr_tail: String,
    throughput: String,
    /// The windows' coefficient of variation and outliers ("" without a throughput).
    noise: String,
    /// Set when the interval is wider than the protocol's target precision.
    noise_warning: String,
    /// Set when the machine was throttled or shared while the cell measured.
    machine_warning: String,
    /// Set when another attention backend ran than the one the cell's trick forced.
    attention_warning: String,
    memory: String,
    /// The warm-up peak where it exceeds the measured one ("" otherwise).
    memory_note: String,
    speedup: String,
    compute: String,
    /// The precision the FLOPs ran in and, for a GPT, the attention kernel ("" without processes).
    compute_note: String,
    energy: String,
    /// The cell's profiler trace, where it has one.
    trace: Option<TraceView>,
}

#[derive(Serialize)]
struct TtaView {
    anchor: String,
    id: String,
    group: String,
    status: &'static str,
    target: String,
    time_to_target: String,
    epochs: String,
    best: String,
    evaluations: usize,
}

/// "warm-up peak X" where the cell's warm-up peak exceeds its measured peak, else "".
fn warmup_note(cell: &CellResult) -> String {
    let primary = |m: Option<Memory>| m.and_then(|m| m.primary_bytes());
    match (primary(cell.warmup_memory), primary(cell.memory)) {
        (Some(warmup), Some(timed)) if warmup > timed => {
            format!("warm-up peak {}", model::bytes_text(warmup))
        }
        _ => String::new(),
    }
}

/// The precision a cell's FLOPs ran in, and its attention kernel where it has one.
fn compute_note(cell: &CellResult) -> String {
    let Some(first) = cell.processes.first() else {
        return String::new();
    };
    let precision = match first.precision {
        Precision::Fp32 => "fp32",
        Precision::Tf32 => "TF32",
        Precision::Half => "fp16/bf16",
        Precision::Fp8 => "fp8",
    };
    match first.attention_backend {
        Some(backend) => format!("{precision}; attention: {}", backend.id()),
        None => precision.to_owned(),
    }
}

/// "cpu-xeon-2core-20261130-quick — trickbench report": the distinct run ids, then what the page is.
pub(crate) fn run_title(results: &[Results], what: &str) -> String {
    let mut ids: Vec<&str> = Vec::new();
    for r in results {
        if !ids.contains(&r.run.id.as_str()) {
            ids.push(&r.run.id);
        }
    }
    format!("{} — trickbench {what}", ids.join(", "))
}

/// One row of the all-cells table, with the cell's trace from `traces`.
fn cell_view(report: &Report, g: &model::Group, e: &model::Entry, traces: &[TraceView]) -> CellView {
    let c = e.cell;
    let target = report.results[e.file].run.protocol.target_ci_half_width;
    CellView {
        anchor: model::anchor(e),
        id: c.id().to_string(),
        group: g.title(),
        status: model::status_label(&c.status),
        status_class: model::status_class(&c.status),
        detail: model::status_detail(c),
        stderr_tail: model::stderr_tail(&c.status).to_owned(),
        throughput: c.throughput.map_or_else(
            || "—".to_owned(),
            |t| {
                let unit = g.sample_unit();
                let (median, low, high) =
                    (t.median_samples_per_s, t.ci_low_samples_per_s, t.ci_high_samples_per_s);
                format!("{median:.1} [{low:.1}, {high:.1}] {unit}/s")
            },
        ),
        noise: c.throughput.map_or_else(String::new, |t| {
            let cv =
                t.coefficient_of_variation.map_or_else(|| "—".to_owned(), |cv| format!("{:.1}%", cv * 100.0));
            format!("CV {cv}, {} of {} windows outliers", t.outlier_windows, t.windows)
        }),
        noise_warning: c.noise_warning(e.comparison, target).unwrap_or_default(),
        machine_warning: c.machine_warning().unwrap_or_default(),
        attention_warning: c.attention_warning().unwrap_or_default(),
        memory: c.memory.and_then(|m| m.primary_bytes()).map_or_else(|| "—".to_owned(), model::bytes_text),
        memory_note: warmup_note(c),
        speedup: e.comparison.map_or_else(|| "—".to_owned(), model::speedup_text),
        compute_note: compute_note(c),
        compute: compute_text(c),
        energy: energy_text(c),
        trace: traces.iter().find(|t| t.cell_anchor == model::anchor(e)).cloned(),
    }
}

/// Achieved model FLOP/s and the utilisation of the device's peak, or "—".
fn compute_text(c: &CellResult) -> String {
    c.utilisation.as_ref().map_or_else(
        || "—".to_owned(),
        |u| match u.mfu {
            Some(mfu) => format!("{:.2} TFLOP/s ({:.1}% MFU)", u.achieved_flops_per_s / 1e12, mfu * 100.0),
            None => format!("{:.3} TFLOP/s (MFU: no known peak)", u.achieved_flops_per_s / 1e12),
        },
    )
}

/// Energy per sample (± the energy counter's quantisation, where known) and mean power over the
/// span they cover, and how they were measured; or "—", with the reason a process gave where it
/// has one.
fn energy_text(c: &CellResult) -> String {
    let Some(e) = c.energy else {
        return match c.energy_unavailable() {
            Some(reason) => format!("— ({reason})"),
            None => "—".to_owned(),
        };
    };
    let method = match e.method {
        EnergyMethod::Counter => "energy counter",
        EnergyMethod::SampledPower => "sampled power",
    };
    let span = e.interval_s.map(|s| format!(" over {s:.1} s")).unwrap_or_default();
    let step = e.relative_quantisation().map(|q| format!(" ± {:.1}%", q * 100.0)).unwrap_or_default();
    format!("{:.2} mJ/sample{step} at {:.0} W{span} ({method})", e.joules_per_sample * 1e3, e.mean_power_w)
}

/// One row of the time-to-accuracy cells table, for a cell that trained to a target.
fn tta_view(g: &model::Group, e: &model::Entry) -> Option<TtaView> {
    let (c, t) = (e.cell, e.cell.time_to_accuracy.as_ref()?);
    Some(TtaView {
        anchor: model::anchor(e),
        id: c.id().to_string(),
        group: g.title(),
        status: model::status_label(&c.status),
        target: t.metric.target_text(t.target),
        time_to_target: t
            .time_to_target_s
            .map_or_else(|| format!("not reached in {:.0} s", t.budget_s), |s| format!("{s:.1} s")),
        epochs: t.epochs_to_target.map_or_else(|| "—".to_owned(), |e| format!("{e:.1}")),
        best: t.metric.value_text(t.best_metric),
        evaluations: t.curve.len(),
    })
}

/// Renders `index.html` of a report whose groups' first screens are `overviews`, with the cells'
/// profiler traces `traces`.
pub(crate) fn report(
    path: &Path,
    (report, overviews): (&Report, &[Overview]),
    figures: &[FigureFile],
    traces: &[TraceView],
) -> Result<String, ReportError> {
    let cells: Vec<CellView> = report.entries().map(|(g, e)| cell_view(report, g, e, traces)).collect();
    let tta: Vec<TtaView> = report.entries().filter_map(|(g, e)| tta_view(g, e)).collect();
    let reference = Reference::of(overviews.iter().map(|o| o.leave_one_out));
    let conclusion =
        overviews.iter().map(|o| format!("{}: {}", o.title, o.sentence)).collect::<Vec<_>>().join(" ");
    let cell_groups: Vec<_> = report.groups.iter().map(|g| context! { title => g.title() }).collect();
    let has_compute = report.entries().any(|(_, e)| e.cell.utilisation.is_some());
    // On a GPU the column stays, so that a cell whose energy reading failed says why.
    let has_energy = report.entries().any(|(g, e)| e.cell.energy.is_some() || g.device.is_cuda());
    let ctx = context! {
        title => run_title(report.results, "report"),
        conclusion => conclusion,
        synthetic => Serde(report.synthetic()),
        rehearsals => Serde(report.rehearsals()),
        runs => Serde(runs(report.results)),
        protocols => Serde(protocols(report.results)),
        overviews => Serde(overviews),
        sections => Serde(sections(figures, reference)),
        tricks => Serde(report.tricks()),
        tta => Serde(tta),
        tta_summary => Serde(report.time_to_accuracy_rows()),
        phases => Serde(super::phases::tables(report)),
        probes => Serde(super::probes::tables(report)),
        cells => Serde(cells),
        cell_groups => cell_groups,
        has_compute => has_compute,
        has_energy => has_energy,
        traces => Serde(traces),
        speedruns => Serde(super::speedrun::views(report, figures)),
        factorials => Serde(super::factorial::views(report, figures)),
        glance => Serde(figures.iter().filter(|f| f.section == GLANCE_SECTION).collect::<Vec<_>>()),
        rule => super::speedrun::RULE,
    };
    render(path, "report.html", ctx)
}

/// One trick cell in the history's table of tricks × versions.
#[derive(Serialize)]
struct CompareRowView {
    label: String,
    cells: Vec<CompareCellView>,
}

/// One version's verdict on a trick cell.
#[derive(Serialize)]
struct CompareCellView {
    /// The badge: the verdict's word, or what happened instead.
    badge: String,
    /// The effect in words under the badge ("" when there is none).
    detail: String,
    class: &'static str,
}

/// The rows of the tricks × versions table.
fn version_rows(c: &Comparison) -> Vec<impl Serialize> {
    c.rows
        .iter()
        .map(|r| CompareRowView {
            label: r.label.clone(),
            cells: r
                .cells
                .iter()
                .map(|cell| {
                    let (badge, detail, class) = match (&cell.cell, &cell.judged) {
                        (None, _) => ("missing".to_owned(), String::new(), "missing"),
                        (Some(_), Some(v)) => (v.effect.label().to_owned(), v.text.clone(), v.effect.class()),
                        (Some(c), None) => {
                            (model::status_summary(&c.status), String::new(), model::status_class(&c.status))
                        }
                    };
                    CompareCellView { badge, detail, class }
                })
                .collect(),
        })
        .collect()
}

/// What the page and the Markdown summary of a comparison of machines both show: its first screen
/// `g`, its figure among `figures`, its machines and the cells some lack.
pub(crate) fn comparison_context(
    c: &Comparison,
    g: &MachineGlance,
    figures: &[FigureFile],
) -> minijinja::Value {
    context! {
        glance => Serde(GlanceView::of(g)),
        figure => Serde(figures.iter().find(|f| f.section == GLANCE_SECTION)),
        synthetic => Serde(c.devices.iter().any(|d| d.synthetic)),
        profile => Serde(c.profile_text()),
        devices => Serde(&c.devices),
        mismatches => Serde(&c.mismatches),
        sections => Serde(sections(figures, Reference::Baseline)),
    }
}

/// Renders `index.html` of a comparison of machines, whose first screen is `g`.
pub(crate) fn comparison(
    path: &Path,
    c: &Comparison,
    g: &MachineGlance,
    figures: &[FigureFile],
) -> Result<String, ReportError> {
    let ctx = context! {
        title => format!("{} — trickbench comparison", g.machines.join(" vs ")),
        conclusion => &g.sentence,
        runs => Serde(runs(c.results)),
        protocols => Serde(protocols(c.results)),
        ..comparison_context(c, g, figures)
    };
    render(path, "compare.html", ctx)
}

/// One version in the history's table of runs.
#[derive(Serialize)]
pub(crate) struct HistoryRunView {
    tick: String,
    started: String,
    commit: String,
    dirty: bool,
    libtorch: String,
    run: String,
    profile: String,
    /// "3 rounds × 6 windows of 3 steps, paired".
    protocol: String,
    /// Each workload's A/A noise floor: "resnet8 ±65.4%", or why there is none.
    noise: String,
    synthetic: bool,
    report: Option<String>,
    json: String,
}

/// The history's versions, oldest first.
fn history_runs(h: &History) -> Vec<HistoryRunView> {
    h.versions
        .iter()
        .zip(h.comparison.results)
        .zip(&h.comparison.devices)
        .map(|((v, r), d)| {
            let p = &r.run.protocol;
            let floors: Vec<String> = r
                .noise_floors
                .iter()
                .map(|f| format!("{} ±{:.1}%", f.workload, f.half_width * 100.0))
                .collect();
            HistoryRunView {
                tick: v.tick.clone(),
                started: v.started.format("%Y-%m-%d %H:%M").to_string(),
                commit: v.commit.clone(),
                dirty: v.dirty,
                libtorch: v.libtorch.clone(),
                run: r.run.id.clone(),
                profile: format!("{} / {}", r.run.profile, r.run.design),
                protocol: format!(
                    "{} rounds × {} windows of {} steps, {}",
                    p.rounds,
                    p.windows_per_process,
                    p.steps_per_window,
                    p.pairing.label()
                ),
                noise: if floors.is_empty() {
                    "not measured (no A/A control)".to_owned()
                } else {
                    floors.join(", ")
                },
                synthetic: r.run.data.synthetic,
                report: d.report.clone(),
                json: d.json.clone(),
            }
        })
        .collect()
}

/// One trick cell from one version to the next.
#[derive(Serialize)]
pub(crate) struct FlagView {
    trick: String,
    /// "#1 823dfe4".
    from: String,
    to: String,
    metric: &'static str,
    before: String,
    after: String,
    /// "changed ↑ (higher speed-up)", "no change", "not compared".
    flag: &'static str,
    /// CSS class of the flag's badge: `changed`, `neutral` or `na`.
    class: &'static str,
    /// Which of the two runs hold the effect inside their A/A noise floor ("" for neither).
    noise: String,
}

/// Every trick cell measured in two versions or more, from each version to the next;
/// `changed_only` keeps the changes.
fn history_flags(h: &History, changed_only: bool) -> Vec<FlagView> {
    let name = |i: usize| format!("{} {}", h.versions[i].tick, h.versions[i].commit);
    let noise = |t: &Track, i: usize| {
        let ticks: Vec<&str> = [i, i + 1]
            .into_iter()
            .filter(|&j| t.within_noise[j])
            .map(|j| h.versions[j].tick.as_str())
            .collect();
        match ticks.as_slice() {
            [] => String::new(),
            [one] => format!("inside {one}'s A/A noise floor"),
            _ => "inside both runs' A/A noise floors".to_owned(),
        }
    };
    h.tracks
        .iter()
        .filter(|t| t.measured() > 1)
        .flat_map(|t| {
            t.shifts().into_iter().enumerate().map(move |(i, shift)| FlagView {
                trick: t.label.clone(),
                from: name(i),
                to: name(i + 1),
                metric: t.metric.label(),
                before: t.point_text(i),
                after: t.point_text(i + 1),
                flag: shift.text(t.metric),
                class: match shift {
                    Shift::Up | Shift::Down => "changed",
                    Shift::Unchanged => "neutral",
                    Shift::Gap => "na",
                },
                noise: noise(t, i),
            })
        })
        .filter(|f| !changed_only || f.class == "changed")
        .collect()
}

/// Renders `index.html` of a history.
pub(crate) fn history(path: &Path, h: &History, figures: &[FigureFile]) -> Result<String, ReportError> {
    render(path, "history.html", history_context(h, figures))
}

/// What the history's page and its Markdown summary are rendered from.
pub(crate) fn history_context(h: &History, figures: &[FigureFile]) -> Value {
    let confidence = h.comparison.results[0].run.protocol.confidence_level;
    context! {
        title => run_title(h.comparison.results, "history"),
        conclusion => h.conclusion(),
        reason => Serde(&h.line_up.reason),
        machines => Serde(&h.line_up.machines),
        synthetic => Serde(h.comparison.devices.iter().any(|d| d.synthetic)),
        profile => Serde(h.comparison.profile_text()),
        confidence => format!("{:.0}%", confidence * 100.0),
        runs => Serde(history_runs(h)),
        changes => Serde(history_flags(h, true)),
        flags => Serde(history_flags(h, false)),
        devices => Serde(&h.comparison.devices),
        rows => Serde(version_rows(&h.comparison)),
        mismatches => Serde(&h.comparison.mismatches),
        sections => Serde(sections(figures, Reference::Baseline)),
        protocols => Serde(protocols(h.comparison.results)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::Engine;
    use crate::results::schema::{CellEnergy, CellKey, CellKind, CellStatus, Phase, ProcessMeasurement};
    use crate::tricks::TrickSet;
    use crate::workloads::WorkloadId;

    #[test]
    fn energy_shows_the_span_it_covers_or_why_it_is_missing() {
        let key = CellKey {
            workload: WorkloadId::Resnet20,
            tricks: TrickSet::baseline(),
            batch_size: 64,
            seed: 0,
            kind: CellKind::Throughput { phase: Phase::Train },
            reference_for: None,
            aa_control: false,
            alone: false,
            engine: Engine::Libtorch,
        };
        let mut cell = CellResult::new(key, CellStatus::Ok);
        assert_eq!(energy_text(&cell), "—");
        let stuck = "NVML's energy counter read 5 mJ at both ends of 1.200 s of GPU work";
        cell.processes = vec![ProcessMeasurement {
            energy_unavailable: Some(stuck.to_owned()),
            ..ProcessMeasurement::new(0, 1e9, Precision::Half)
        }];
        assert_eq!(energy_text(&cell), format!("— ({stuck})"));
        let energy = CellEnergy {
            joules: 300.0,
            joules_per_sample: 0.01,
            mean_power_w: 250.0,
            interval_s: Some(1.2),
            method: EnergyMethod::Counter,
            quantisation_j: None,
        };
        cell.energy = Some(energy);
        assert_eq!(energy_text(&cell), "10.00 mJ/sample at 250 W over 1.2 s (energy counter)");
        cell.energy = Some(CellEnergy { quantisation_j: Some(25.0), ..energy });
        assert_eq!(energy_text(&cell), "10.00 mJ/sample ± 8.3% at 250 W over 1.2 s (energy counter)");
        cell.energy = Some(CellEnergy { interval_s: None, ..energy });
        assert_eq!(
            energy_text(&cell),
            "10.00 mJ/sample at 250 W (energy counter)",
            "a file that predates the span"
        );
    }
}
