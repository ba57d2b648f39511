//! A comparison's first screen: each trick of each workload on every machine, judged on its own
//! metric as that machine's report judges it; what the machines' verdicts make of it (helps
//! everywhere, depends on the machine, …); the rows sorted by how much the effect differs
//! between machines; the tricks that apply on no machine folded into one line per reason; a line
//! of noise floors per machine; and the answer in one sentence.

use serde::Serialize;

use crate::engine::Engine;
use crate::report::gain::Gain;
use crate::report::model::engine_suffix;
use crate::report::model::{Effect, MEMORY_TOLERANCE, TIME_TO_ACCURACY_TOLERANCE};
use crate::report::overview::{by_cause, widest_floor, NotApplicableGroup, VerdictRow};
use crate::results::schema::{MeasurementDesign, NoiseFloor, Results};
use crate::tricks::Metric;

/// What the machines' verdicts on a trick make of it, in the order the terminal groups them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "kebab-case")]
pub(crate) enum Pattern {
    /// It helps on every machine and engine that measured it.
    HelpsEverywhere,
    /// Its effect differs between machines ([`TrickAcross::differs`]) and so do their verdicts on
    /// some engine, or it applies on some machines only.
    DependsOnMachine,
    /// The machines' verdicts on some engine differ, but their effects lie within each other's
    /// intervals: the verdicts part at the edge of significance.
    VerdictsDiffer,
    /// Every machine gives each engine the same verdict, but the engines' verdicts differ.
    DependsOnEngine,
    /// It hurts on every machine and engine that measured it.
    HurtsEverywhere,
    /// No machine measured an effect the measurement or the noise floor can tell.
    NoEffectAnywhere,
    /// No machine measured it (failed, not reached, or no reference).
    Inconclusive,
}

impl Pattern {
    /// Every pattern, in the order printed.
    pub(crate) const ALL: [Pattern; 7] = [
        Pattern::HelpsEverywhere,
        Pattern::DependsOnMachine,
        Pattern::VerdictsDiffer,
        Pattern::DependsOnEngine,
        Pattern::HurtsEverywhere,
        Pattern::NoEffectAnywhere,
        Pattern::Inconclusive,
    ];

    /// The pattern in words, as a heading: "helps everywhere".
    pub(crate) fn label(self) -> &'static str {
        match self {
            Pattern::HelpsEverywhere => "helps everywhere",
            Pattern::DependsOnMachine => "depends on the machine",
            Pattern::VerdictsDiffer => "verdicts differ, effects overlap",
            Pattern::DependsOnEngine => "depends on the engine, not the machine",
            Pattern::HurtsEverywhere => "hurts everywhere",
            Pattern::NoEffectAnywhere => "no measurable effect anywhere",
            Pattern::Inconclusive => "inconclusive",
        }
    }
}

/// One machine's side of a row.
#[derive(Debug, Clone)]
pub(crate) enum OnMachine {
    /// The machine's report gives the trick this row: its verdict, each engine's effect, why.
    Measured(Box<VerdictRow>),
    /// The trick does not apply on the machine, for this reason.
    NotApplicable(String),
    /// The machine's run did not plan the trick.
    Absent,
}

impl OnMachine {
    /// The row, where the machine measured it.
    pub(crate) fn measured(&self) -> Option<&VerdictRow> {
        match self {
            OnMachine::Measured(row) => Some(row),
            OnMachine::NotApplicable(_) | OnMachine::Absent => None,
        }
    }

    /// The machine's effect on `engine`, where it measured one.
    pub(crate) fn gain(&self, engine: Engine) -> Option<&Gain> {
        self.measured()?.gains.iter().find(|g| g.engine == engine)
    }
}

/// One trick of one workload on every machine.
#[derive(Debug, Clone)]
pub(crate) struct TrickAcross {
    /// The workload's name.
    pub workload: String,
    /// The trick as the machines' reports label it ("channels-last", "no-grad-eval (eval)").
    pub trick: String,
    /// The metric it is judged by.
    pub metric: Metric,
    /// Each machine's side, in machine order.
    pub on: Vec<OnMachine>,
    /// What the machines' verdicts make of it.
    pub pattern: Pattern,
    /// Whether the effect itself differs between machines on some engine: two machines'
    /// intervals apart, one helping where another hurts, a ratio without interval apart by more
    /// than its metric's tolerance, or the trick applying on some machines only.
    pub differs: bool,
    /// How far apart the machines' effects lie on the engine where they lie farthest: the
    /// largest effect ÷ the smallest, on the trick's own metric (1: the same everywhere).
    pub spread: f64,
    /// The engine of `spread`.
    pub spread_engine: Option<Engine>,
}

impl TrickAcross {
    /// "channels-last · resnet8".
    pub(crate) fn label(&self) -> String {
        format!("{} · {}", self.trick, self.workload)
    }

    /// How far apart the machines' effects lie, where they differ: "1.26× apart on libtorch"
    /// (the engine named where the row has two), or "applies on some machines only" where no two
    /// machines measured it; `None` where they do not differ.
    pub(crate) fn apart_text(&self) -> Option<String> {
        if !self.differs {
            return None;
        }
        let Some(engine) = self.spread_engine else {
            return Some("applies on some machines only".to_owned());
        };
        Some(format!("{:.2}× apart{}", self.spread, engine_suffix(engine, self.engines().len() > 1)))
    }

    /// Whether some machine measured an effect of it on some engine.
    pub(crate) fn has_effect(&self) -> bool {
        self.on.iter().any(|m| m.measured().is_some_and(|r| !r.gains.is_empty()))
    }

    /// The engines any machine measured, PyTorch's first.
    pub(crate) fn engines(&self) -> Vec<Engine> {
        [Engine::Pytorch, Engine::Libtorch]
            .into_iter()
            .filter(|e| self.on.iter().any(|m| m.gain(*e).is_some()))
            .collect()
    }
}

/// One machine's noise floors.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct MachineFloors {
    /// The machine.
    pub machine: String,
    /// Its paired A/A floors per workload and engine, in one line.
    pub text: String,
    /// Its widest paired A/A floor, a fraction (the figure's band).
    pub widest: Option<f64>,
}

/// A comparison's first screen.
#[derive(Debug, Clone)]
pub(crate) struct MachineGlance {
    /// The machines, in file order.
    pub machines: Vec<String>,
    /// The answer in one sentence.
    pub sentence: String,
    /// The tricks measured on some machine, the ones whose effect differs most first.
    pub rows: Vec<TrickAcross>,
    /// Tricks that apply on no machine, by reason (each machine's first reason).
    pub nowhere: Vec<NotApplicableGroup>,
    /// Each machine's floors.
    pub floors: Vec<MachineFloors>,
    /// Where the runs were built from different code (another commit or libtorch version): which
    /// machine ran which, and that an effect may differ by the code as well as by the machine.
    pub builds_differ: Option<String>,
}

impl MachineGlance {
    /// The first screen of `results`, one file per machine named `machines`.
    pub(crate) fn new(results: &[Results], machines: Vec<String>) -> MachineGlance {
        let screens: Vec<Vec<(String, crate::report::Overview)>> = results
            .iter()
            .map(|r| {
                let screens = crate::report::first_screens(r);
                screens.into_iter().map(|(w, o)| (r.run.workload_name(w).to_owned(), o)).collect()
            })
            .collect();
        let mut rows = join_rows(&screens);
        rows.sort_by(|a, b| b.differs.cmp(&a.differs).then(b.spread.total_cmp(&a.spread)));
        let nowhere = nowhere(&screens, &rows);
        let floors = results.iter().zip(&machines).map(|(r, m)| machine_floors(r, m)).collect();
        let sentence = sentence(&machines, &rows);
        let builds_differ = builds_differ(results, &machines);
        MachineGlance { machines, sentence, rows, nowhere, floors, builds_differ }
    }

    /// The tricks that apply on no machine grouped by their reasons' first clause ("needs a CUDA
    /// GPU"), each trick once per group, in the order first met.
    pub(crate) fn nowhere_by_cause(&self) -> Vec<(String, Vec<&'static str>)> {
        by_cause(self.nowhere.iter().flat_map(|n| n.tricks.iter().map(move |t| (n.cause().to_owned(), *t))))
    }

    /// The engines any row measured, PyTorch's first.
    pub(crate) fn engines(&self) -> Vec<Engine> {
        [Engine::Pytorch, Engine::Libtorch]
            .into_iter()
            .filter(|e| self.rows.iter().any(|r| r.engines().contains(e)))
            .collect()
    }
}

/// Every (workload, trick) any machine measured, each machine's side of it.
fn join_rows(screens: &[Vec<(String, crate::report::Overview)>]) -> Vec<TrickAcross> {
    let mut keys: Vec<(String, String, Metric)> = Vec::new();
    for (workload, o) in screens.iter().flatten() {
        for r in &o.rows {
            let key = (workload.clone(), r.trick.clone(), metric_of(r));
            if !keys.iter().any(|k| (&k.0, &k.1) == (&key.0, &key.1)) {
                keys.push(key);
            }
        }
    }
    keys.into_iter()
        .map(|(workload, trick, metric)| {
            let on: Vec<OnMachine> = screens.iter().map(|machine| side(machine, &workload, &trick)).collect();
            let (spread, spread_engine) = spread(&on);
            let differs = differs(&on, metric);
            TrickAcross {
                pattern: pattern(&on, differs),
                differs,
                spread,
                spread_engine,
                workload,
                trick,
                metric,
                on,
            }
        })
        .collect()
}

/// The metric row `r` is judged by: its effects', or the one its label names where it has none.
fn metric_of(r: &VerdictRow) -> Metric {
    let named = || {
        [Metric::Throughput, Metric::EvalThroughput, Metric::Memory, Metric::TimeToAccuracy]
            .into_iter()
            .find(|m| m.label() == r.metric)
            .unwrap_or(Metric::Throughput)
    };
    r.gains.first().map_or_else(named, |g| g.metric)
}

/// One machine's side of the row of `trick` on `workload`.
fn side(machine: &[(String, crate::report::Overview)], workload: &str, trick: &str) -> OnMachine {
    let screens = machine.iter().filter(|(w, _)| w == workload).map(|(_, o)| o);
    for o in screens {
        if let Some(row) = o.rows.iter().find(|r| r.trick == trick) {
            return OnMachine::Measured(Box::new(row.clone()));
        }
        if let Some(n) = o.not_applicable.iter().find(|n| n.tricks.iter().any(|t| names(trick, t))) {
            return OnMachine::NotApplicable(n.reason.clone());
        }
    }
    OnMachine::Absent
}

/// Whether the row label `label` is of the trick `id` ("no-grad-eval (eval)" is of `no-grad-eval`).
fn names(label: &str, id: &str) -> bool {
    label == id || label.strip_prefix(id).is_some_and(|rest| rest.starts_with(' '))
}

/// A verdict as the patterns see it: helps, hurts or neither; `None` where nothing was measured.
fn direction(effect: Effect) -> Option<Effect> {
    match effect {
        Effect::Helps | Effect::Hurts => Some(effect),
        Effect::Unmeasurable | Effect::WithinNoise => Some(Effect::Unmeasurable),
        Effect::NotMeasured => None,
    }
}

/// Each engine's verdict on one machine's side, where measured: the effect of each engine's gain,
/// or the row's verdict where it has no gain.
fn verdicts(side: &OnMachine) -> Vec<(Option<Engine>, Effect)> {
    let Some(row) = side.measured() else { return Vec::new() };
    if row.gains.is_empty() {
        return direction(row.verdict.effect).map(|e| (None, e)).into_iter().collect();
    }
    row.gains.iter().filter_map(|g| Some((Some(g.engine), direction(g.effect)?))).collect()
}

/// What the machines' verdicts on `on` make of the trick, whose effect `differs` between them
/// or not.
fn pattern(on: &[OnMachine], differs: bool) -> Pattern {
    if applies_on_some_only(on) {
        return Pattern::DependsOnMachine;
    }
    let all: Vec<(Option<Engine>, Effect)> = on.iter().flat_map(verdicts).collect();
    let Some(first) = all.first() else { return Pattern::Inconclusive };
    if all.iter().all(|v| v.1 == first.1) {
        return match first.1 {
            Effect::Helps => Pattern::HelpsEverywhere,
            Effect::Hurts => Pattern::HurtsEverywhere,
            _ => Pattern::NoEffectAnywhere,
        };
    }
    let machines_agree = all
        .iter()
        .all(|(engine, effect)| all.iter().filter(|(e, _)| e == engine).all(|(_, other)| other == effect));
    match (machines_agree, differs) {
        (true, _) => Pattern::DependsOnEngine,
        (false, true) => Pattern::DependsOnMachine,
        (false, false) => Pattern::VerdictsDiffer,
    }
}

/// Whether the machines' effects on some engine differ (see [`TrickAcross::differs`]).
fn differs(on: &[OnMachine], metric: Metric) -> bool {
    if applies_on_some_only(on) {
        return true;
    }
    [Engine::Pytorch, Engine::Libtorch].into_iter().any(|engine| {
        let gains: Vec<&Gain> = on.iter().filter_map(|m| m.gain(engine)).collect();
        let opposed = gains.iter().any(|g| g.effect == Effect::Helps)
            && gains.iter().any(|g| g.effect == Effect::Hurts);
        opposed || gains.iter().enumerate().any(|(i, a)| gains[i + 1..].iter().any(|b| apart(a, b, metric)))
    })
}

/// Whether the trick was measured on some machine and does not apply on another.
fn applies_on_some_only(on: &[OnMachine]) -> bool {
    on.iter().any(|m| m.measured().is_some()) && on.iter().any(|m| matches!(m, OnMachine::NotApplicable(_)))
}

/// Whether two machines' effects lie apart: their intervals do not overlap, or, without
/// intervals, their ratio is beyond the metric's tolerance.
fn apart(a: &Gain, b: &Gain, metric: Metric) -> bool {
    match (a.factor_interval(), b.factor_interval()) {
        (Some((a_low, a_high)), Some((b_low, b_high))) => a_low > b_high || b_low > a_high,
        _ => {
            let tolerance = match metric {
                Metric::TimeToAccuracy => TIME_TO_ACCURACY_TOLERANCE,
                _ => MEMORY_TOLERANCE,
            };
            let ratio = a.factor() / b.factor();
            ratio > 1.0 + tolerance || ratio < 1.0 / (1.0 + tolerance)
        }
    }
}

/// The largest effect ÷ the smallest across machines, on the engine where that is largest.
fn spread(on: &[OnMachine]) -> (f64, Option<Engine>) {
    let mut widest = (1.0, None);
    for engine in [Engine::Pytorch, Engine::Libtorch] {
        let factors: Vec<f64> = on.iter().filter_map(|m| m.gain(engine)).map(Gain::factor).collect();
        if factors.len() < 2 {
            continue;
        }
        let high = factors.iter().copied().fold(f64::NEG_INFINITY, f64::max);
        let low = factors.iter().copied().fold(f64::INFINITY, f64::min);
        if high / low > widest.0 {
            widest = (high / low, Some(engine));
        }
    }
    widest
}

/// The tricks that apply on no machine, by reason: some machine lists them as not applicable, none
/// measured them; each trick of each workload under the first machine's reason for it.
fn nowhere(
    screens: &[Vec<(String, crate::report::Overview)>],
    rows: &[TrickAcross],
) -> Vec<NotApplicableGroup> {
    let mut out: Vec<NotApplicableGroup> = Vec::new();
    let mut seen: Vec<(&str, &str)> = Vec::new();
    for (workload, o) in screens.iter().flatten() {
        for n in &o.not_applicable {
            for trick in &n.tricks {
                let measured = rows.iter().any(|r| &r.workload == workload && names(&r.trick, trick));
                if measured || seen.contains(&(workload.as_str(), *trick)) {
                    continue;
                }
                seen.push((workload.as_str(), *trick));
                match out.iter_mut().find(|g| g.reason == n.reason) {
                    Some(g) if g.tricks.contains(trick) => {}
                    Some(g) => g.tricks.push(trick),
                    None => out.push(NotApplicableGroup { reason: n.reason.clone(), tricks: vec![trick] }),
                }
            }
        }
    }
    out
}

/// The machine's paired A/A floors: "resnet8 ±1.7% in PyTorch, ±2.1% on libtorch; gpt-mini …".
fn machine_floors(r: &Results, machine: &str) -> MachineFloors {
    let paired: Vec<&NoiseFloor> =
        r.noise_floors.iter().filter(|f| f.design == MeasurementDesign::Paired).collect();
    let mut workloads = Vec::new();
    for f in &paired {
        if !workloads.contains(&f.workload) {
            workloads.push(f.workload);
        }
    }
    let engines: Vec<Engine> = [Engine::Pytorch, Engine::Libtorch]
        .into_iter()
        .filter(|e| paired.iter().any(|f| f.engine == *e))
        .collect();
    let parts: Vec<String> = workloads
        .iter()
        .map(|w| {
            let mine: Vec<&NoiseFloor> = paired.iter().copied().filter(|f| f.workload == *w).collect();
            let each: Vec<String> = engines
                .iter()
                .filter_map(|e| {
                    let half = widest_floor(&mine, MeasurementDesign::Paired, Some(*e))?;
                    Some(format!("±{:.1}%{}", half * 100.0, engine_suffix(*e, engines.len() > 1)))
                })
                .collect();
            format!("{} {}", r.run.workload_name(*w), each.join(", "))
        })
        .collect();
    let text = if parts.is_empty() { "no paired A/A floor measured".to_owned() } else { parts.join("; ") };
    MachineFloors {
        machine: machine.to_owned(),
        text,
        widest: widest_floor(&paired, MeasurementDesign::Paired, None),
    }
}

/// The answer in one sentence: which tricks help everywhere, which help or hurt on some machines
/// only, and the effect that differs most between machines.
fn sentence(machines: &[String], rows: &[TrickAcross]) -> String {
    if rows.is_empty() {
        return format!("No trick was measured on {}.", machines.join(", "));
    }
    let words = [
        ("helps everywhere", "help everywhere"),
        ("helps on some machines only", "help on some machines only"),
        ("hurts on some machines only", "hurt on some machines only"),
        ("hurts everywhere", "hurt everywhere"),
    ];
    let mut parts = Vec::new();
    for (group, (one, several)) in words.iter().enumerate() {
        let names = named(rows, &|r| told(r) == Some(group));
        if !names.is_empty() {
            let verb = if names.len() == 1 { one } else { several };
            parts.push(format!("{} {verb}", list(&names)));
        }
    }
    if parts.is_empty() {
        parts.push("no trick has a measurable effect on any machine".to_owned());
    }
    let mut text = format!("On {}: {}", list(machines), parts.join("; "));
    match rows.iter().find(|r| r.differs) {
        Some(top) => text.push_str(&format!(
            "; the effect that differs most between machines is {}.",
            most(top, machines)
        )),
        None => text.push_str("; no effect differs between the machines beyond their intervals."),
    }
    text
}

/// Which of the sentence's groups row `r` is told in: helps everywhere (0), helps on some machines
/// only (1), hurts on some machines only (2), hurts everywhere (3); `None`: none of them.
fn told(r: &TrickAcross) -> Option<usize> {
    let helps_somewhere = r.on.iter().flat_map(verdicts).any(|v| v.1 == Effect::Helps);
    match r.pattern {
        Pattern::HelpsEverywhere => Some(0),
        Pattern::DependsOnMachine if helps_somewhere => Some(1),
        Pattern::DependsOnMachine => Some(2),
        Pattern::HurtsEverywhere => Some(3),
        _ => None,
    }
}

/// The tricks of the rows that `keep` holds, in row order: a trick's name where `keep` holds all
/// its rows, else "trick on workload" for each row it holds; at most six, then how many more.
fn named(rows: &[TrickAcross], keep: &dyn Fn(&TrickAcross) -> bool) -> Vec<String> {
    let mut names: Vec<String> = Vec::new();
    for r in rows.iter().filter(|r| keep(r)) {
        let every = rows.iter().filter(|x| x.trick == r.trick).all(keep);
        let name = if every { r.trick.clone() } else { format!("{} on {}", r.trick, r.workload) };
        if !names.contains(&name) {
            names.push(name);
        }
    }
    if names.len() > 6 {
        let more = names.len() - 5;
        names.truncate(5);
        names.push(format!("{more} more"));
    }
    names
}

/// "a, b and c".
fn list(items: &[String]) -> String {
    match items {
        [] => String::new(),
        [one] => one.clone(),
        [rest @ .., last] => format!("{} and {last}", rest.join(", ")),
    }
}

/// The row whose effect differs most, with each machine's effect on the engine where it differs
/// most: "debug-off on gpt-mini on libtorch: 11.67× on AMD EPYC (2 cores), 16.35× on …".
fn most(r: &TrickAcross, machines: &[String]) -> String {
    let engine = r.spread_engine.or_else(|| r.engines().first().copied());
    let each: Vec<String> =
        r.on.iter()
            .zip(machines)
            .map(|(side, machine)| match (side, engine.and_then(|e| side.gain(e))) {
                (_, Some(g)) => format!("{} on {machine}", g.text()),
                (OnMachine::NotApplicable(_), None) => format!("not applicable on {machine}"),
                _ => format!("not measured on {machine}"),
            })
            .collect();
    let on = engine.map_or_else(String::new, |e| engine_suffix(e, r.engines().len() > 1));
    format!("{} on {}{on}: {}", r.trick, r.workload, each.join(", "))
}

/// Which machine ran which build, where the runs' commits or libtorch versions differ.
fn builds_differ(results: &[Results], machines: &[String]) -> Option<String> {
    let builds: Vec<String> = results
        .iter()
        .map(|r| {
            let (commit, _) = crate::report::history::short_commit(r.run.git_commit.as_deref());
            format!("{commit}, libtorch {}", r.system.libtorch_version)
        })
        .collect();
    if builds.iter().all(|b| *b == builds[0]) {
        return None;
    }
    let each: Vec<String> = machines.iter().zip(&builds).map(|(m, b)| format!("{m} at {b}")).collect();
    Some(format!(
        "The runs were built from different code ({}): an effect that differs between them may differ by the \
         code as well as by the machine.",
        each.join("; ")
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::model::TrickVerdict;

    /// A machine's side: one libtorch effect `ratio` ± `half` with verdict `effect`.
    fn side(effect: Effect, ratio: f64, half: f64) -> OnMachine {
        let gain = Gain {
            engine: Engine::Libtorch,
            effect,
            metric: Metric::Throughput,
            ratio,
            interval: Some((ratio - half, ratio + half)),
            ceiling: None,
        };
        OnMachine::Measured(Box::new(VerdictRow {
            trick: "channels-last".to_owned(),
            metric: Metric::Throughput.label(),
            verdict: TrickVerdict { effect, text: format!("{ratio:.2}×") },
            label: effect.label(),
            class: effect.class(),
            anchor: String::new(),
            libtorch: None,
            disagreement: None,
            only_on: None,
            kernels: None,
            gains: vec![gain],
            why: Vec::new(),
        }))
    }

    #[test]
    fn machines_whose_verdicts_differ_depend_on_the_machine_only_where_their_intervals_part() {
        let apart = [side(Effect::Helps, 1.19, 0.01), side(Effect::Unmeasurable, 1.01, 0.01)];
        assert!(differs(&apart, Metric::Throughput));
        assert_eq!(pattern(&apart, true), Pattern::DependsOnMachine);
        let overlapping = [side(Effect::Helps, 1.04, 0.02), side(Effect::Unmeasurable, 1.02, 0.03)];
        assert!(!differs(&overlapping, Metric::Throughput));
        assert_eq!(pattern(&overlapping, false), Pattern::VerdictsDiffer);
        let both_help = [side(Effect::Helps, 1.19, 0.01), side(Effect::Helps, 1.11, 0.01)];
        assert!(differs(&both_help, Metric::Throughput));
        assert_eq!(pattern(&both_help, true), Pattern::HelpsEverywhere);
        let (ratio, engine) = spread(&both_help);
        assert!((ratio - 1.19 / 1.11).abs() < 1e-12 && engine == Some(Engine::Libtorch));
    }

    #[test]
    fn a_trick_that_applies_on_some_machines_only_depends_on_the_machine() {
        let on = [side(Effect::Helps, 2.1, 0.1), OnMachine::NotApplicable("needs a CUDA GPU".to_owned())];
        assert!(differs(&on, Metric::Throughput));
        assert_eq!(pattern(&on, true), Pattern::DependsOnMachine);
        assert_eq!(spread(&on), (1.0, None));
    }
}
