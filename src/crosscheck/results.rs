//! What a cross-check measured: the one contract between measuring it and writing it out.

use serde::{Deserialize, Serialize};

use crate::bench::profile::ProfileName;
use crate::device::DeviceSpec;
use crate::measure::host_allocator::HostAllocator;
use crate::results::schema::CellId;
use crate::results::system::SystemInfo;
use crate::stats::{paired_median_ci, Estimate};
use crate::tricks::Trick;
use crate::workloads::WorkloadId;

/// The file a cross-check writes after every process.
pub const RESULTS_FILE: &str = "crosscheck.json";

/// A whole cross-check: how it was run, and each trick's two effects.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CrosscheckResults {
    /// When it started (RFC 3339, UTC).
    pub started_at: String,
    /// trickbench's version.
    pub trickbench_version: String,
    /// The commit trickbench was built from, where known.
    pub git_commit: Option<String>,
    /// The command line.
    pub command: Vec<String>,
    /// The machine.
    pub system: SystemInfo,
    /// The device both sources trained on.
    pub device: DeviceSpec,
    /// The profile whose batch sizes, warm-up and window length both sources followed.
    pub profile: ProfileName,
    /// The host allocator every process ran under.
    pub host_allocator: HostAllocator,
    /// Rounds: each one process of each source for each trick.
    pub rounds: usize,
    /// Pairs of windows each process times.
    pub pairs_per_process: usize,
    /// Training steps per window.
    pub steps_per_window: usize,
    /// Untimed steps of each side before its windows (the engine may run more to reach a steady
    /// state, as in a run).
    pub warmup_steps: usize,
    /// PyTorch's intra-op threads in every process of both sources.
    pub threads: usize,
    /// Each trick checked, in the order asked.
    pub checks: Vec<TrickCheck>,
}

/// One trick on one workload: its effect on the PyTorch engine and in the plain script.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TrickCheck {
    /// The workload.
    pub workload: WorkloadId,
    /// The trick.
    pub trick: Trick,
    /// The engine's cell of the trick.
    pub cell: CellId,
    /// The cell a run pairs it with, which the plain script's reference side writes (`None`
    /// where the trick is not applicable).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reference: Option<CellId>,
    /// Samples per step.
    pub batch_size: usize,
    /// Why the engine does not run the trick here, when it does not (nothing is measured).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub not_applicable: Option<String>,
    /// What the PyTorch engine measured.
    pub engine: SourceEffect,
    /// What the plain script measured.
    pub plain: SourceEffect,
    /// Whether the two effects agree, once both are measured.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub agreement: Option<Agreement>,
}

/// Which source measured a process.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Source {
    /// trickbench's PyTorch engine, as a run measures the trick.
    Engine,
    /// The plain script.
    Plain,
}

impl Source {
    /// The source in words.
    pub fn label(self) -> &'static str {
        match self {
            Source::Engine => "PyTorch engine",
            Source::Plain => "plain script",
        }
    }
}

/// One source's processes of a trick and the effect they give.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct SourceEffect {
    /// Each process that measured, in the order they ran.
    pub processes: Vec<SourceProcess>,
    /// The trick's throughput over its reference's: the median of every pair's ratio, with its
    /// 95% interval (processes, then pairs, resampled); `None` before a process has measured.
    pub effect: Option<Estimate>,
    /// How each process that did not measure ended.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub failures: Vec<String>,
}

impl SourceEffect {
    /// Adds a measured process and estimates the effect again.
    pub fn add(&mut self, process: SourceProcess) {
        self.processes.push(process);
        let ratios: Vec<Vec<f64>> = self.processes.iter().map(|p| p.pair_ratios.clone()).collect();
        self.effect = paired_median_ci(&ratios);
    }
}

/// What one process timed.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SourceProcess {
    /// The round (0-based).
    pub round: usize,
    /// Whether it ran before the other source's process of the trick in its round.
    pub ran_first: bool,
    /// Each pair's throughput ratio, the trick's window over the reference's, in pair order.
    pub pair_ratios: Vec<f64>,
    /// The median throughput of the reference side's windows, samples per second.
    pub reference_samples_per_s: f64,
    /// Minor page faults the process took per timed step of the trick's side (the mean over its
    /// windows); `None` where they were not counted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub trick_page_faults_per_step: Option<f64>,
    /// The same of the reference's side.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reference_page_faults_per_step: Option<f64>,
}

impl SourceEffect {
    /// The mean over its processes of each side's page faults per step, trick then reference;
    /// `None` unless every process counted them.
    pub fn page_faults_per_step(&self) -> Option<(f64, f64)> {
        let n = self.processes.len() as f64;
        let sum = |side: fn(&SourceProcess) -> Option<f64>| -> Option<f64> {
            self.processes.iter().map(side).sum::<Option<f64>>().map(|total| total / n)
        };
        if self.processes.is_empty() {
            return None;
        }
        Some((sum(|p| p.trick_page_faults_per_step)?, sum(|p| p.reference_page_faults_per_step)?))
    }
}

/// Whether the two sources' effects agree.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case", tag = "verdict")]
pub enum Agreement {
    /// Their intervals overlap.
    Agree {
        /// The plain script's effect over the engine's.
        plain_over_engine: f64,
    },
    /// Their intervals do not overlap.
    Disagree {
        /// The plain script's effect over the engine's.
        plain_over_engine: f64,
    },
}

impl Agreement {
    /// The agreement of `engine`'s and `plain`'s effects: whether their intervals overlap.
    pub fn of(engine: Estimate, plain: Estimate) -> Agreement {
        let plain_over_engine = plain.point / engine.point;
        if engine.low <= plain.high && plain.low <= engine.high {
            Agreement::Agree { plain_over_engine }
        } else {
            Agreement::Disagree { plain_over_engine }
        }
    }

    /// Whether the effects agree.
    pub fn agrees(self) -> bool {
        matches!(self, Agreement::Agree { .. })
    }

    /// The plain script's effect over the engine's.
    pub fn plain_over_engine(self) -> f64 {
        match self {
            Agreement::Agree { plain_over_engine } | Agreement::Disagree { plain_over_engine } => {
                plain_over_engine
            }
        }
    }
}

impl TrickCheck {
    /// The source's effect.
    pub fn effect_of(&mut self, source: Source) -> &mut SourceEffect {
        match source {
            Source::Engine => &mut self.engine,
            Source::Plain => &mut self.plain,
        }
    }

    /// Sets the agreement from the two effects, once both are measured.
    pub fn judge(&mut self) {
        self.agreement = match (self.engine.effect, self.plain.effect) {
            (Some(engine), Some(plain)) => Some(Agreement::of(engine, plain)),
            _ => None,
        };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn estimate(point: f64, low: f64, high: f64) -> Estimate {
        Estimate { point, low, high }
    }

    #[test]
    fn effects_agree_where_their_intervals_overlap_and_disagree_where_they_do_not() {
        let engine = estimate(1.08, 1.06, 1.10);
        assert!(Agreement::of(engine, estimate(1.10, 1.09, 1.12)).agrees());
        assert!(Agreement::of(engine, estimate(1.12, 1.10, 1.14)).agrees());
        let apart = Agreement::of(engine, estimate(1.043, 1.030, 1.053));
        assert!(!apart.agrees());
        assert!((apart.plain_over_engine() - 1.043 / 1.08).abs() < 1e-12);
    }

    #[test]
    fn a_source_estimates_its_effect_from_every_pair_of_every_process() {
        let mut source = SourceEffect::default();
        let process = |round, ratios: &[f64]| SourceProcess {
            round,
            ran_first: round == 0,
            pair_ratios: ratios.to_vec(),
            reference_samples_per_s: 100.0,
            trick_page_faults_per_step: Some(10.0 * round as f64),
            reference_page_faults_per_step: Some(4.0),
        };
        source.add(process(0, &[1.1, 1.2, 1.3]));
        assert_eq!(source.effect.map(|e| e.point), Some(1.2));
        source.add(process(1, &[1.0, 1.0]));
        assert_eq!(source.effect.map(|e| e.point), Some(1.1));
        let effect = source.effect.unwrap();
        assert!(effect.low <= 1.1 && effect.high >= 1.1);
        assert_eq!(source.page_faults_per_step(), Some((5.0, 4.0)));
    }
}
