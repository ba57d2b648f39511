//! A plan's history across versions: runs on one machine at different commits or libtorch
//! versions, oldest first; each trick's effect along them, and each step between consecutive runs
//! flagged where the effect's intervals do not overlap.

mod line_up;

pub use line_up::CompareBy;
pub(crate) use line_up::{line_up, short_commit, versions, Axis, LineUp, Version};

use serde::Serialize;

use crate::report::compare::{Comparison, DeviceCell, JoinKey};
use crate::report::model::{self, MEMORY_TOLERANCE};
use crate::report::plots::Rgb;
use crate::report::ReportError;
use crate::results::schema::MeasurementDesign;
use crate::tricks::Metric;

/// A trick cell's effect in one run: the number its trick is judged by (the speed-up, or the
/// peak-memory ratio for a memory trick) and its confidence interval where it has one.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct Point {
    /// The ratio against the run's own reference cell (×).
    pub value: f64,
    /// Its bootstrap interval (×); `None` for a peak-memory ratio, which is not resampled.
    pub interval: Option<(f64, f64)>,
    /// How a speed-up was measured; `None` for a peak-memory ratio, always from processes of its own.
    pub design: Option<MeasurementDesign>,
}

impl Point {
    /// The effect of `cell` on `metric`, where the run measured and compared it.
    fn of(metric: Metric, cell: &DeviceCell) -> Option<Point> {
        match metric {
            Metric::Memory => cell.memory_ratio.map(|value| Point { value, interval: None, design: None }),
            _ => cell.speedup.map(|(value, low, high)| Point {
                value,
                interval: Some((low, high)),
                design: cell.design,
            }),
        }
    }

    /// "5.62× [5.49, 5.88] (paired)", or "0.27× memory".
    pub fn text(&self) -> String {
        match self.interval {
            Some((low, high)) => {
                let design = self.design.map(|d| format!(" {}", d.tag())).unwrap_or_default();
                format!("{:.2}× [{low:.2}, {high:.2}]{design}", self.value)
            }
            None => format!("{:.2}× memory", self.value),
        }
    }
}

/// What happened to an effect between two consecutive runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub(crate) enum Shift {
    /// The intervals overlap (peak-memory ratios within 5% of each other): no change this test
    /// can see.
    Unchanged,
    /// The later effect is higher, its interval wholly above the earlier one.
    Up,
    /// The later effect is lower, its interval wholly below the earlier one.
    Down,
    /// One of the two runs has no effect to compare (not measured, not applicable, failed).
    Gap,
}

impl Shift {
    /// From `before` to `after`: intervals that do not overlap, or for peak-memory ratios (no
    /// interval) a change of more than [`MEMORY_TOLERANCE`].
    pub fn between(before: Option<&Point>, after: Option<&Point>) -> Shift {
        let (Some(before), Some(after)) = (before, after) else {
            return Shift::Gap;
        };
        match (before.interval, after.interval) {
            (Some((_, high)), Some((later_low, _))) if later_low > high => Shift::Up,
            (Some((low, _)), Some((_, later_high))) if later_high < low => Shift::Down,
            (Some(_), Some(_)) => Shift::Unchanged,
            _ => match model::ratio_effect(after.value / before.value, MEMORY_TOLERANCE) {
                model::Effect::Helps => Shift::Up,
                model::Effect::Hurts => Shift::Down,
                _ => Shift::Unchanged,
            },
        }
    }

    /// Whether this is a change.
    pub fn changed(self) -> bool {
        matches!(self, Shift::Up | Shift::Down)
    }

    /// The flag in words: "changed ↑ (higher speed-up)", "no change", "not compared".
    pub fn text(self, metric: Metric) -> &'static str {
        match (self, metric) {
            (Shift::Up, Metric::Memory) => "changed ↑ (more memory)",
            (Shift::Down, Metric::Memory) => "changed ↓ (less memory)",
            (Shift::Up, _) => "changed ↑ (higher speed-up)",
            (Shift::Down, _) => "changed ↓ (lower speed-up)",
            (Shift::Unchanged, _) => "no change",
            (Shift::Gap, _) => "not compared",
        }
    }

    /// The arrow of a change, "" for none.
    pub fn arrow(self) -> &'static str {
        match self {
            Shift::Up => "↑",
            Shift::Down => "↓",
            Shift::Unchanged | Shift::Gap => "",
        }
    }
}

/// A trick cell followed across the runs.
#[derive(Debug, Clone)]
pub(crate) struct Track {
    /// The join key.
    pub key: JoinKey,
    /// "resnet8 · debug-off · b128".
    pub label: String,
    /// The cell within its workload: "debug-off", "no-grad-eval (eval)".
    pub configuration: String,
    /// What its effect is measured in.
    pub metric: Metric,
    /// Its trick's colour (the trick table's; the mean of the tricks' for a set).
    pub colour: Rgb,
    /// Per run, oldest first: its effect, or why there is none ("missing", "n/a", "failed").
    pub points: Vec<Result<Point, String>>,
    /// Per run: whether that run's verdict puts the effect inside its A/A noise floor.
    pub within_noise: Vec<bool>,
}

impl Track {
    /// How many runs give it an effect.
    pub fn measured(&self) -> usize {
        self.points.iter().filter(|p| p.is_ok()).count()
    }

    /// The shift from each run to the next: `shifts()[i]` is from run `i` to run `i + 1`.
    pub fn shifts(&self) -> Vec<Shift> {
        self.points.windows(2).map(|w| Shift::between(w[0].as_ref().ok(), w[1].as_ref().ok())).collect()
    }

    /// Whether the step from run `i` to the next touches a run whose noise floor holds the effect.
    pub fn step_within_noise(&self, i: usize) -> bool {
        self.within_noise[i] || self.within_noise[i + 1]
    }

    /// Run `i`'s effect in words, or why it has none.
    pub fn point_text(&self, i: usize) -> String {
        match &self.points[i] {
            Ok(p) => p.text(),
            Err(why) => why.clone(),
        }
    }
}

/// The runs as versions, and every trick cell followed across them.
pub(crate) struct History<'a> {
    /// The runs joined, oldest first, each labelled as its version.
    pub comparison: Comparison<'a>,
    /// The versions, oldest first (`versions[i]` is the comparison's run `i`).
    pub versions: Vec<Version>,
    /// How the runs came to be lined up as versions.
    pub line_up: LineUp,
    /// The trick cells, in the comparison's row order.
    pub tracks: Vec<Track>,
}

impl<'a> History<'a> {
    /// The history of `comparison`, whose runs are `versions` in order. Runs that share no trick
    /// cell with any other are refused, saying what each holds.
    pub fn new(
        comparison: Comparison<'a>,
        versions: Vec<Version>,
        line_up: LineUp,
    ) -> Result<History<'a>, ReportError> {
        let tracks: Vec<Track> = comparison.rows.iter().map(track).collect();
        if !tracks.iter().any(|t| t.measured() >= 2) {
            return Err(ReportError::NothingShared { runs: holdings(&comparison, &versions) });
        }
        Ok(History { comparison, versions, line_up, tracks })
    }

    /// Every change: the track, and the run it changed from (to the next one).
    pub fn changes(&self) -> Vec<(&Track, usize, Shift)> {
        self.tracks
            .iter()
            .flat_map(|t| t.shifts().into_iter().enumerate().map(move |(i, s)| (t, i, s)))
            .filter(|(_, _, s)| s.changed())
            .collect()
    }

    /// The history in one sentence: what was followed over which runs, and what changed.
    pub fn conclusion(&self) -> String {
        let followed = self.tracks.iter().filter(|t| t.measured() >= 2).count();
        let (first, last) = (&self.versions[0], &self.versions[self.versions.len() - 1]);
        let head = format!(
            "{followed} trick cells followed over {} runs, {} ({}) to {} ({})",
            self.versions.len(),
            first.commit,
            first.started.format("%Y-%m-%d"),
            last.commit,
            last.started.format("%Y-%m-%d")
        );
        let changes: Vec<String> = self
            .changes()
            .iter()
            .map(|(t, i, s)| {
                let (from, to) = (&self.versions[*i].tick, &self.versions[i + 1].tick);
                format!("{} {} ({from}→{to})", t.label, s.arrow())
            })
            .collect();
        let noisy = self.changes().iter().filter(|(t, i, _)| t.step_within_noise(*i)).count();
        let caveat = match noisy {
            0 => String::new(),
            n => format!(" {n} of them lie inside the A/A noise floor of a run they span."),
        };
        match changes.len() {
            0 => format!("{head}; no effect changed beyond its interval."),
            n if n <= 4 => {
                format!("{head}; {n} changed beyond their intervals: {}.{caveat}", changes.join(", "))
            }
            n => {
                format!("{head}; {n} changed beyond their intervals: {}, ….{caveat}", changes[..4].join(", "))
            }
        }
    }
}

/// The track of a joined row.
fn track(row: &crate::report::compare::Row) -> Track {
    let metric = row.key.metric();
    let single = model::single_trick(&row.key.tricks);
    Track {
        key: row.key.clone(),
        label: row.label.clone(),
        configuration: row.key.configuration(),
        metric,
        colour: single.map_or_else(|| model::set_colour(&row.key.tricks), model::trick_colour),
        points: row.cells.iter().map(|c| Point::of(metric, c).ok_or_else(|| c.short_text())).collect(),
        within_noise: row
            .cells
            .iter()
            .map(|c| c.judged.as_ref().is_some_and(|j| j.effect == model::Effect::WithinNoise))
            .collect(),
    }
}

/// What each run holds, for a refusal: "#1 run-a (quick profile: resnet8); #2 …".
fn holdings(comparison: &Comparison, versions: &[Version]) -> String {
    let each: Vec<String> = comparison
        .results
        .iter()
        .zip(versions)
        .map(|(r, v)| {
            let mut workloads: Vec<String> = Vec::new();
            for w in r.cells.iter().map(|c| c.key.workload.to_string()) {
                if !workloads.contains(&w) {
                    workloads.push(w);
                }
            }
            format!("{} {} ({} profile: {})", v.tick, r.run.id, r.run.profile, workloads.join(", "))
        })
        .collect();
    each.join("; ")
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::engine::Engine;
    use crate::results::schema::{CellKey, CellKind, CellResult, CellStatus, Comparison as Compared};
    use crate::results::schema::{MeasurementDesign, Phase, Results, Verdict};
    use crate::tricks::{Trick, TrickSet};
    use crate::workloads::WorkloadId;

    /// A committed quick run as run `id`, started at `started_at` from `commit`, with no cells.
    pub(crate) fn run(id: &str, started_at: &str, commit: &str) -> Results {
        let committed = include_bytes!("../../reports/cpu-xeon-2core-20261130-quick/results.json");
        let mut r = crate::results::store::parse(committed, "results.json".as_ref()).unwrap();
        (r.run.id, r.run.started_at, r.run.git_commit) = (id.into(), started_at.into(), Some(commit.into()));
        (r.cells, r.comparisons, r.noise_floors) = (Vec::new(), Vec::new(), Vec::new());
        r
    }

    /// The key of ResNet-8's training-throughput cell of `tricks` at batch 128 on libtorch.
    pub(crate) fn key(tricks: &[Trick]) -> CellKey {
        CellKey {
            workload: WorkloadId::Resnet8,
            tricks: tricks.iter().copied().collect::<TrickSet>(),
            batch_size: 128,
            seed: 0,
            kind: CellKind::Throughput { phase: Phase::Train },
            reference_for: None,
            aa_control: false,
            alone: false,
            engine: Engine::Libtorch,
        }
    }

    /// `r` with the baseline and `trick` measured at `speedup` in [low, high], `memory` × the
    /// baseline's peak.
    fn with_trick(
        mut r: Results,
        trick: Trick,
        (speedup, low, high): (f64, f64, f64),
        memory: f64,
    ) -> Results {
        let (base, cell) =
            (CellResult::new(key(&[]), CellStatus::Ok), CellResult::new(key(&[trick]), CellStatus::Ok));
        r.comparisons.push(Compared {
            cell: cell.id(),
            baseline: base.id(),
            speedup,
            speedup_ci_low: low,
            speedup_ci_high: high,
            verdict: Verdict::NoSignificantEffect,
            memory_ratio: Some(memory),
            design: MeasurementDesign::Processes,
            diagnosis: None,
        });
        if !r.cells.iter().any(|c| c.key.tricks.is_baseline()) {
            r.cells.push(base);
        }
        r.cells.push(cell);
        r
    }

    /// `results` oldest first, as a history joins them.
    fn oldest_first(results: Vec<Results>) -> Vec<Results> {
        versions(&results).unwrap().iter().map(|v| results[v.file].clone()).collect()
    }

    /// The history of `results`, given oldest first.
    fn history(results: &[Results]) -> Result<History<'_>, ReportError> {
        let versions = versions(results).unwrap();
        let labels = versions.iter().map(|v| v.label.clone()).collect();
        let comparison = Comparison::labelled(results, &[], labels);
        History::new(comparison, versions, line_up(results, CompareBy::Version))
    }

    #[test]
    fn intervals_apart_are_a_change_overlapping_ones_are_not() {
        let p = |value, low, high| Point { value, interval: Some((low, high)), design: None };
        let before = p(1.0, 0.95, 1.05);
        assert_eq!(Shift::between(Some(&before), Some(&p(1.2, 1.06, 1.3))), Shift::Up);
        assert_eq!(Shift::between(Some(&before), Some(&p(0.8, 0.7, 0.94))), Shift::Down);
        assert_eq!(Shift::between(Some(&before), Some(&p(1.2, 1.05, 1.3))), Shift::Unchanged, "touching");
        assert_eq!(Shift::between(None, Some(&before)), Shift::Gap);
        let memory = |value| Point { value, interval: None, design: None };
        assert_eq!(Shift::between(Some(&memory(0.5)), Some(&memory(0.52))), Shift::Unchanged);
        assert_eq!(Shift::between(Some(&memory(0.5)), Some(&memory(0.6))), Shift::Up);
        assert_eq!(Shift::between(Some(&memory(0.5)), Some(&memory(0.4))), Shift::Down);
    }

    #[test]
    fn each_track_is_judged_by_its_trick_s_metric_with_gaps_where_a_run_lacks_it() {
        let a = with_trick(
            run("a", "2026-11-30T10:00:00Z", "aaaaaaa"),
            Trick::ChannelsLast,
            (1.0, 0.9, 1.1),
            1.0,
        );
        let a = with_trick(a, Trick::GradAccumulation, (0.9, 0.8, 1.0), 0.3);
        let b = with_trick(
            run("b", "2026-12-01T10:00:00Z", "bbbbbbb"),
            Trick::ChannelsLast,
            (1.3, 1.2, 1.4),
            1.0,
        );
        let b = with_trick(b, Trick::GradAccumulation, (1.2, 1.1, 1.3), 0.31);
        let c = with_trick(
            run("c", "2026-12-02T10:00:00Z", "ccccccc"),
            Trick::GradAccumulation,
            (1.0, 0.9, 1.1),
            0.2,
        );
        let results = oldest_first(vec![c, a, b]);
        let h = history(&results).unwrap();
        let track = |trick: Trick| h.tracks.iter().find(|t| t.key.tricks == TrickSet::only(trick)).unwrap();
        let channels_last = track(Trick::ChannelsLast);
        assert_eq!(channels_last.metric, Metric::Throughput);
        assert_eq!(channels_last.shifts(), vec![Shift::Up, Shift::Gap]);
        assert_eq!(channels_last.points[2], Err("missing".to_owned()), "a gap, not a zero");
        // Judged by peak memory: its throughput intervals, apart from #1 to #2, do not count.
        let accumulation = track(Trick::GradAccumulation);
        assert_eq!(accumulation.metric, Metric::Memory);
        assert_eq!(accumulation.shifts(), vec![Shift::Unchanged, Shift::Down]);
        assert_eq!(h.changes().len(), 2);
        let conclusion = h.conclusion();
        assert!(
            conclusion.starts_with("2 trick cells followed over 3 runs, aaaaaaa (2026-11-30) to ccccccc"),
            "{conclusion}"
        );
        assert!(conclusion.contains("resnet8 · channels-last · b128 ↑ (#1→#2)"), "{conclusion}");
        assert!(conclusion.contains("resnet8 · grad-accumulation · b128 ↓ (#2→#3)"), "{conclusion}");
    }

    #[test]
    fn runs_that_share_no_trick_cell_are_refused_saying_what_each_holds() {
        let a = with_trick(
            run("run-a", "2026-11-30T10:00:00Z", "aaaaaaa"),
            Trick::ChannelsLast,
            (1.0, 0.9, 1.1),
            1.0,
        );
        let mut b = with_trick(
            run("run-b", "2026-12-01T10:00:00Z", "bbbbbbb"),
            Trick::ChannelsLast,
            (1.0, 0.9, 1.1),
            1.0,
        );
        b.run.profile = crate::bench::profile::ProfileName::Standard;
        let error = history(&[a, b]).err().unwrap().to_string();
        assert!(error.contains("#1 run-a (quick profile: resnet8)"), "{error}");
        assert!(error.contains("#2 run-b (standard profile: resnet8)"), "{error}");
    }
}
