//! Joining results from several devices: cells are matched by (workload, trick set, batch size,
//! kind, profile); each device's speed-ups are against its own baseline (the file's comparisons).
//! The machines are named from their hardware ([`names`]); the first screen reads each trick on
//! every machine ([`glance`]).

pub(crate) mod glance;
pub(crate) mod names;
pub(crate) mod view;

use std::collections::{BTreeMap, BTreeSet};

use serde::Serialize;

use crate::engine::Engine;
use crate::report::model::{self, TrickVerdict};
use crate::results::diagnosis::{Cause, Diagnosis};
use crate::results::schema::{
    configuration_label, CellKind, CellResult, CellStatus, MeasurementDesign, Phase, Results, Verdict,
};
use crate::tricks::{Metric, Trick, TrickSet};
use crate::workloads::WorkloadId;

/// What joins cells across devices.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) struct JoinKey {
    /// The workload.
    pub workload: WorkloadId,
    /// The trick set.
    pub tricks: TrickSet,
    /// The trick whose reference ("off") cell this is, if it is one.
    pub reference_for: Option<Trick>,
    /// Whether this is the A/A control (the baseline measured again under its own name).
    pub aa_control: bool,
    /// Whether the cell was measured alone (the baseline or the A/A control, one model a process).
    pub alone: bool,
    /// The batch size.
    pub batch_size: usize,
    /// What the cell measures.
    pub kind: CellKind,
    /// The run's profile.
    pub profile: String,
    /// The engine the cell trained on.
    pub engine: Engine,
}

impl JoinKey {
    /// The key of `cell` in a run of profile `profile`.
    pub(crate) fn of(cell: &CellResult, profile: String) -> JoinKey {
        JoinKey {
            workload: cell.key.workload,
            tricks: cell.key.tricks.clone(),
            reference_for: cell.key.reference_for,
            aa_control: cell.key.aa_control,
            alone: cell.key.alone,
            batch_size: cell.key.batch_size,
            kind: cell.key.kind,
            profile,
            engine: cell.key.engine,
        }
    }

    /// The metric the cell's trick is judged by.
    pub(crate) fn metric(&self) -> Metric {
        model::judged_metric(&self.tricks, self.aa_control, self.kind)
    }

    /// "resnet20 · amp · b128".
    fn label(&self) -> String {
        format!("{} · {} · b{}", self.workload, self.configuration(), self.batch_size)
    }

    /// The cell within its workload: its trick set (or reference), what it measures when that is
    /// not training throughput, and its engine when that is not libtorch: "amp", "no-grad-eval
    /// (eval)", "debug-off @pytorch".
    pub(crate) fn configuration(&self) -> String {
        let kind = match self.kind {
            CellKind::Throughput { phase: Phase::Train } => "",
            CellKind::Throughput { phase: Phase::Eval } => " (eval)",
            CellKind::TimeToAccuracy => " (time to accuracy)",
            CellKind::MemoryProbe => " (memory probe)",
        };
        let configuration =
            configuration_label(&self.tricks, self.reference_for, self.aa_control, self.alone);
        let engine = if self.engine.is_libtorch() { String::new() } else { format!(" @{}", self.engine) };
        format!("{configuration}{kind}{engine}")
    }
}

/// One device (one results file).
#[derive(Debug, Clone, Serialize)]
pub(crate) struct Device {
    /// Column label, unique within the comparison.
    pub label: String,
    /// The copy of its results file, relative to the report.
    pub json: String,
    /// Its own report's page, relative to the comparison, where the comparison was told of one.
    pub report: Option<String>,
    /// Facts about the run and machine, as (name, value) pairs.
    pub facts: Vec<(String, String)>,
    /// Whether it was measured on synthetic data.
    pub synthetic: bool,
}

/// One device's view of a joined row.
#[derive(Debug, Clone)]
pub(crate) struct DeviceCell {
    /// The cell, if this device measured it.
    pub cell: Option<CellResult>,
    /// Speed-up over the device's baseline with its interval (speed-up, low, high).
    pub speedup: Option<(f64, f64, f64)>,
    /// The verdict.
    pub verdict: Option<Verdict>,
    /// How the speed-up was measured: in processes of its own, or paired with its reference.
    pub design: Option<MeasurementDesign>,
    /// Memory ratio against the device's baseline.
    pub memory_ratio: Option<f64>,
    /// The trick's verdict on the metric it is judged by, as the run's own report gives it, where
    /// the device measured it.
    pub judged: Option<TrickVerdict>,
}

impl DeviceCell {
    /// One device's view of a row from the cell it measured and its results file (`found`;
    /// `None` where the device did not measure the cell).
    fn of(found: Option<(&CellResult, &Results)>) -> DeviceCell {
        let comparison = found.and_then(|(c, r)| r.comparisons.iter().find(|x| x.cell == c.id()));
        let judged = found
            .zip(comparison)
            .map(|((cell, r), c)| model::judged(cell, c, r.cells.iter().find(|x| x.id() == c.baseline)));
        DeviceCell {
            cell: found.map(|(c, _)| c.clone()),
            speedup: comparison.map(|c| (c.speedup, c.speedup_ci_low, c.speedup_ci_high)),
            verdict: comparison.map(|c| c.verdict),
            design: comparison.map(|c| c.design),
            memory_ratio: comparison.and_then(|c| c.memory_ratio),
            judged,
        }
    }

    /// Short text for a heatmap cell.
    pub fn short_text(&self) -> String {
        match (&self.cell, self.speedup) {
            (None, _) => "missing".to_owned(),
            (Some(_), Some((s, ..))) => format!("{s:.2}×"),
            (Some(c), None) => match c.status {
                CellStatus::Ok => "no baseline".to_owned(),
                CellStatus::NotApplicable { .. } => "n/a".to_owned(),
                CellStatus::Failed { .. } => "failed".to_owned(),
                CellStatus::OutOfMemory { .. } => "OOM".to_owned(),
                CellStatus::Timeout { .. } => "timeout".to_owned(),
            },
        }
    }
}

/// A trick cell joined across devices.
#[derive(Debug, Clone)]
pub(crate) struct Row {
    /// The join key.
    pub key: JoinKey,
    /// "resnet20 · amp · b128".
    pub label: String,
    /// One entry per device, in device order.
    pub cells: Vec<DeviceCell>,
}

/// A cell some devices measured and others did not.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct Mismatch {
    /// The joined cell.
    pub label: String,
    /// Profile of the cell.
    pub profile: String,
    /// Devices that have it.
    pub present: Vec<String>,
    /// Devices that lack it.
    pub missing: Vec<String>,
}

/// The joined comparison.
pub(crate) struct Comparison<'a> {
    /// The results files, one per device.
    pub results: &'a [Results],
    /// The devices, in file order.
    pub devices: Vec<Device>,
    /// The trick throughput cells, joined (every key seen on any device).
    pub rows: Vec<Row>,
    /// Every cell (trick, baseline or time-to-accuracy) not present on every device.
    pub mismatches: Vec<Mismatch>,
}

impl<'a> Comparison<'a> {
    /// Joins `results` as devices, each named from its hardware; `reports` holds each file's
    /// report link, relative to the comparison.
    pub fn new(results: &'a [Results], reports: &[Option<String>]) -> Comparison<'a> {
        Comparison::labelled(results, reports, names::machine_names(results))
    }

    /// Joins `results` with a column label each, in order (`labels` must be unique).
    pub fn labelled(
        results: &'a [Results],
        reports: &[Option<String>],
        labels: Vec<String>,
    ) -> Comparison<'a> {
        let devices = devices(results, reports, labels);
        // Per key and device: the cell with the lowest seed.
        let mut joined: BTreeMap<JoinKey, Vec<Option<(&CellResult, &Results)>>> = BTreeMap::new();
        for (i, r) in results.iter().enumerate() {
            for cell in &r.cells {
                let key = JoinKey::of(cell, r.run.profile.to_string());
                let slot = &mut joined.entry(key).or_insert_with(|| vec![None; results.len()])[i];
                if slot.is_none_or(|(c, _)| cell.key.seed < c.key.seed) {
                    *slot = Some((cell, r));
                }
            }
        }
        let mismatches = joined
            .iter()
            .filter(|(_, cells)| cells.iter().any(Option::is_none))
            .map(|(key, cells)| {
                let (present, missing): (Vec<_>, Vec<_>) =
                    cells.iter().zip(&devices).partition(|(c, _)| c.is_some());
                Mismatch {
                    label: key.label(),
                    profile: key.profile.clone(),
                    present: present.into_iter().map(|(_, d)| d.label.clone()).collect(),
                    missing: missing.into_iter().map(|(_, d)| d.label.clone()).collect(),
                }
            })
            .collect();
        let rows = joined
            .into_iter()
            .filter(|(key, _)| matches!(key.kind, CellKind::Throughput { .. }) && !key.tricks.is_baseline())
            .map(|(key, cells)| Row {
                label: key.label(),
                cells: cells.into_iter().map(DeviceCell::of).collect(),
                key,
            })
            .collect();
        Comparison { results, devices, rows, mismatches }
    }

    /// "standard profile", or "quick / standard profiles" when the files differ.
    pub fn profile_text(&self) -> String {
        let profiles: BTreeSet<&str> = self.results.iter().map(|r| r.run.profile.id()).collect();
        let list = profiles.into_iter().collect::<Vec<_>>();
        format!("{} profile{}", list.join(" / "), if list.len() > 1 { "s" } else { "" })
    }
}

fn devices(results: &[Results], reports: &[Option<String>], labels: Vec<String>) -> Vec<Device> {
    results
        .iter()
        .zip(labels)
        .enumerate()
        .map(|(i, (r, label))| {
            let s = &r.system;
            let optional = |v: &Option<String>| v.clone().unwrap_or_else(|| "unknown".to_owned());
            let facts = vec![
                ("run".to_owned(), r.run.id.clone()),
                ("started".to_owned(), r.run.started_at.clone()),
                ("profile / design".to_owned(), format!("{} / {}", r.run.profile, r.run.design)),
                ("device".to_owned(), r.run.device.to_string()),
                (
                    "GPU / driver".to_owned(),
                    s.gpu.as_ref().map_or_else(
                        || "none".to_owned(),
                        |g| format!("{} ×{} / {}", g.name, s.cuda_device_count, g.driver_version),
                    ),
                ),
                (
                    "CPU / cores".to_owned(),
                    format!("{} / {} logical", optional(&s.cpu_model), s.cpu_logical_cores),
                ),
                ("host".to_owned(), optional(&s.hostname)),
                ("libtorch".to_owned(), s.libtorch_version.clone()),
                (
                    "CUDA / cuDNN".to_owned(),
                    format!("{} / {}", version(s.cuda_runtime_version), version(s.cudnn_version)),
                ),
                ("git commit".to_owned(), optional(&r.run.git_commit)),
                (
                    "data".to_owned(),
                    format!("{}{}", r.run.data.name, if r.run.data.synthetic { " (synthetic)" } else { "" }),
                ),
            ];
            Device {
                label,
                json: super::results_file_name(i),
                report: reports.get(i).cloned().flatten(),
                facts,
                synthetic: r.run.data.synthetic,
            }
        })
        .collect()
}

/// A diagnosis in one short line: its cause's short line with the ceiling after it ("it added
/// work: aten::copy_ +1.20 ms (ceiling 1.04×)"; a cause of bound elsewhere states its ceiling
/// itself), or the ceiling alone ("ceiling 1.04×"); `None` where it has neither.
pub(crate) fn why_text(d: &Diagnosis) -> Option<String> {
    let ceiling = d.ceiling.filter(|c| c.speedup.is_finite()).map(|c| format!("ceiling {:.2}×", c.speedup));
    match (&d.cause, ceiling) {
        (Some(cause @ Cause::BoundElsewhere { .. }), _) | (Some(cause), None) => Some(cause.short()),
        (Some(cause), Some(ceiling)) => Some(format!("{} ({ceiling})", cause.short())),
        (None, ceiling) => ceiling,
    }
}

/// A CUDA-style version number, or "none".
pub(crate) fn version(v: Option<i64>) -> String {
    v.map_or_else(|| "none".to_owned(), |v| v.to_string())
}
