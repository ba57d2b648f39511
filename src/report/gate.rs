//! A CI gate on two runs of one plan, a base and a new one: the baseline's throughput and every
//! trick's effect, each judged a confident regression, a confident improvement, no change or not
//! compared (docs/ci-gate.md has the rule), written as a Markdown summary and a JUnit XML file.
//! Beside a speed-up the new run did not find faster, both say why where that run diagnosed it:
//! the cause it measured and the trick's ceiling.
//!
//! The rule ([`judge_change`]): the new run's interval must exclude the base run's point, and the
//! change (new ÷ base − 1) must be larger than the threshold: the larger of the two runs' A/A noise
//! floors for the workload, engine and design (or [`MEMORY_THRESHOLD_FRACTION`] for a peak-memory ratio,
//! which has no interval). Its sign and the quantity's better direction make it a regression or an
//! improvement.

mod facts;
mod join;
mod render;

use std::io::Write;
use std::path::{Path, PathBuf};

pub use facts::Mismatch;

use crate::engine::Engine;
use crate::report::model::MEMORY_TOLERANCE;
use crate::results::schema::Results;
use crate::results::store::{self, StoreError};
use crate::workloads::WorkloadId;

/// When `trickbench compare --fail-on` fails its command.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum FailOn {
    /// Exit with status 1 when any quantity regressed confidently.
    Regression,
    /// Judge and write the gate's files, but exit with 0 whatever they say.
    Never,
}

/// Which way a quantity is better.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Better {
    /// A higher value is better (throughput, speed-up).
    Higher,
    /// A lower value is better (peak memory, the speed-up of removing a trick).
    Lower,
}

/// What a compared quantity is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Quantity {
    /// The baseline cell's median throughput, samples per second, with its bootstrap interval.
    BaselineThroughput,
    /// A trick cell's speed-up over its reference (its throughput ÷ the reference's, ×), with its
    /// bootstrap interval.
    SpeedUp,
    /// A memory trick's peak memory ÷ its reference's (×); it has no interval.
    MemoryRatio,
    /// In a leave-one-out, the stack without a trick ÷ the whole stack in throughput (×), with its
    /// bootstrap interval: the lower, the more the trick is worth.
    RemovalSpeedUp,
}

impl Quantity {
    /// Which way the quantity is better.
    pub fn better(self) -> Better {
        match self {
            Quantity::BaselineThroughput | Quantity::SpeedUp => Better::Higher,
            Quantity::MemoryRatio | Quantity::RemovalSpeedUp => Better::Lower,
        }
    }

    /// The quantity in words: "throughput", "speed-up", "memory ratio", "removal speed-up".
    pub fn label(self) -> &'static str {
        match self {
            Quantity::BaselineThroughput => "throughput",
            Quantity::SpeedUp => "speed-up",
            Quantity::MemoryRatio => "memory ratio",
            Quantity::RemovalSpeedUp => "removal speed-up",
        }
    }
}

/// One run's value of a quantity, in the quantity's unit: samples/s for a baseline's throughput, ×
/// for a ratio.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Reading {
    /// The point estimate (the median throughput, or the ratio).
    pub point: f64,
    /// Its bootstrap confidence interval (low, high), at the run's confidence level; `None` for a
    /// peak-memory ratio, which is not resampled.
    pub interval: Option<(f64, f64)>,
}

/// Where a check's threshold comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Threshold {
    /// The larger of the two runs' A/A noise floors for the workload and engine (of the
    /// comparison's design for an effect; of any design for a baseline's throughput).
    NoiseFloor,
    /// Neither run recorded an A/A noise floor for the workload and engine: the threshold is 0 and
    /// the interval alone decides.
    NoFloor,
    /// A peak-memory ratio, which has no interval and no A/A floor: [`MEMORY_THRESHOLD_FRACTION`].
    MemoryTolerance,
}

/// What the gate concludes about one quantity.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GateVerdict {
    /// Confidently worse: outside the new interval and beyond the threshold, the worse way.
    Regression,
    /// Confidently better, by the same rule the other way; reported, never a failure.
    Improvement,
    /// Inside the new interval, or within the threshold.
    NoChange,
    /// One of the runs has no value for it (not measured, failed, not applicable, …).
    NotCompared,
}

impl GateVerdict {
    /// The verdict in words.
    pub fn label(self) -> &'static str {
        match self {
            GateVerdict::Regression => "regression",
            GateVerdict::Improvement => "improvement",
            GateVerdict::NoChange => "no change",
            GateVerdict::NotCompared => "not compared",
        }
    }
}

/// One quantity compared between the base and the new run.
#[derive(Debug, Clone, PartialEq)]
pub struct Check {
    /// The workload.
    pub workload: WorkloadId,
    /// The engine the cells trained on.
    pub engine: Engine,
    /// The cell within its workload, with its batch size: "baseline · b128", "amp · b128",
    /// "no-grad-eval (eval) @pytorch · b128".
    pub what: String,
    /// What is compared, and so its unit and better direction.
    pub quantity: Quantity,
    /// The base run's value, or why it has none ("not measured", "failed", …).
    pub base: Result<Reading, String>,
    /// The new run's value, or why it has none.
    pub new: Result<Reading, String>,
    /// New ÷ base − 1, a fraction (−0.12: 12% lower); `None` where not compared.
    pub change_fraction: Option<f64>,
    /// How far the change must go to count, a fraction (0.04: 4%).
    pub threshold_fraction: f64,
    /// Where the threshold comes from.
    pub threshold: Threshold,
    /// The gate's verdict.
    pub verdict: GateVerdict,
    /// Where the new run's speed-up is not faster (null or negative): why, in one short line from
    /// its diagnosis, its cause and ceiling ("it added work: aten::copy_ +1.20 ms (ceiling
    /// 1.04×)"); `None` elsewhere, and where the run diagnosed neither.
    pub why: Option<String>,
}

/// A run as the gate names it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunName {
    /// The run's id.
    pub id: String,
    /// Its commit, first seven hex digits ("no commit" outside a checkout).
    pub commit: String,
    /// The machine: device and host ("cuda:0 on gpu-runner-1").
    pub machine: String,
    /// The libtorch version it was built against.
    pub libtorch: String,
}

/// The gate's judgement of a new run against a base run.
#[derive(Debug, Clone, PartialEq)]
pub struct Gate {
    /// The base run.
    pub base: RunName,
    /// The new run.
    pub new: RunName,
    /// The confidence level of the new run's intervals (0.95).
    pub confidence_level: f64,
    /// What differs between the runs that makes effects incomparable, compared anyway because
    /// it was asked (`--allow-mismatch`); empty where nothing differs.
    pub mismatches: Vec<Mismatch>,
    /// Every quantity either run measured, by workload, then cell.
    pub checks: Vec<Check>,
}

impl Gate {
    /// The checks with `verdict`.
    pub fn with_verdict(&self, verdict: GateVerdict) -> impl Iterator<Item = &Check> {
        self.checks.iter().filter(move |c| c.verdict == verdict)
    }

    /// Whether any quantity regressed confidently.
    pub fn regressed(&self) -> bool {
        self.with_verdict(GateVerdict::Regression).next().is_some()
    }

    /// The verdict in one line: "2 confident regressions: …" or "no confident regression (…)".
    pub fn verdict_line(&self) -> String {
        render::verdict_line(self)
    }

    /// The Markdown summary, for a CI job's summary: the verdict line first, then a table per
    /// workload.
    pub fn markdown(&self) -> String {
        render::markdown(self)
    }

    /// The JUnit XML: one test suite per workload, one test case per quantity, a regression a
    /// failure and a quantity not compared skipped.
    pub fn junit(&self) -> String {
        render::junit(self)
    }

    /// The gate for a terminal: the verdict line and every change beyond the noise.
    pub fn terminal_text(&self) -> String {
        render::terminal(self)
    }
}

/// Why the gate cannot judge two runs, or could not write its files.
#[derive(Debug, thiserror::Error)]
pub enum GateError {
    /// The runs differ in hardware or protocol, so their effects are not comparable.
    #[error(
        "the runs are not comparable: {}; compare them anyway with --allow-mismatch",
        facts::list(.differences)
    )]
    Incomparable {
        /// Each thing that differs, with its value in each run.
        differences: Vec<Mismatch>,
    },
    /// No quantity was measured in both runs.
    #[error(
        "nothing to gate: no baseline or trick cell was measured in both runs (cells join by workload, \
         trick set, batch size, kind and engine); base run {base}, new run {new}"
    )]
    NothingCompared {
        /// The base run's id.
        base: String,
        /// The new run's id.
        new: String,
    },
    /// A file of the gate could not be written (the message is the cause's, which names the file).
    #[error("{0}")]
    Write(#[from] StoreError),
}

/// Judges `new` against `base`. Runs that differ in what makes effects incomparable (device, GPU
/// or CPU model, profile, design, protocol, batch sizes, data; [`Mismatch`]) are refused naming
/// each difference, unless `allow_mismatch`; runs that share no quantity are refused.
pub fn judge(base: &Results, new: &Results, allow_mismatch: bool) -> Result<Gate, GateError> {
    let mismatches = facts::mismatches(base, new);
    if !mismatches.is_empty() && !allow_mismatch {
        return Err(GateError::Incomparable { differences: mismatches });
    }
    let checks = join::checks(base, new);
    if checks.iter().all(|c| c.verdict == GateVerdict::NotCompared) {
        let (base, new) = (base.run.id.clone(), new.run.id.clone());
        return Err(GateError::NothingCompared { base, new });
    }
    Ok(Gate {
        base: join::run_name(base),
        new: join::run_name(new),
        confidence_level: new.run.protocol.confidence_level,
        mismatches,
        checks,
    })
}

/// The gate's rule for one quantity, from the base run's `base` point to the `new` reading: a
/// confident change when `new`'s interval excludes `base` (a reading without an interval excludes
/// every other point) and |new ÷ base − 1| > `threshold_fraction`; a regression where it goes
/// against `better`, else an improvement. Anything else is no change. Interval ends count as
/// inside, and a change of exactly the threshold is within it. A base that is not a positive
/// finite number compares nothing.
pub fn judge_change(better: Better, base: f64, new: &Reading, threshold_fraction: f64) -> GateVerdict {
    if !(base.is_finite() && base > 0.0 && new.point.is_finite()) {
        return GateVerdict::NotCompared;
    }
    let change = new.point / base - 1.0;
    let excluded = new.interval.is_none_or(|(low, high)| base < low || base > high);
    if !excluded || change.abs() <= threshold_fraction {
        return GateVerdict::NoChange;
    }
    match (change > 0.0, better) {
        (true, Better::Higher) | (false, Better::Lower) => GateVerdict::Improvement,
        (true, Better::Lower) | (false, Better::Higher) => GateVerdict::Regression,
    }
}

/// The files the gate wrote.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GateFiles {
    /// The Markdown summary, `gate.md`.
    pub markdown: PathBuf,
    /// The JUnit XML, `gate.junit.xml`.
    pub junit: PathBuf,
}

/// Writes `gate.md` and `gate.junit.xml` into `out_dir` (created if missing), each atomically.
pub fn write_gate(gate: &Gate, out_dir: &Path) -> Result<GateFiles, GateError> {
    let files = GateFiles { markdown: out_dir.join("gate.md"), junit: out_dir.join("gate.junit.xml") };
    write_file(&files.markdown, &gate.markdown())?;
    write_file(&files.junit, &gate.junit())?;
    Ok(files)
}

fn write_file(path: &Path, text: &str) -> Result<(), GateError> {
    store::write_atomically(path, |tmp| {
        tmp.write_all(text.as_bytes())
            .map_err(|source| StoreError::Write { path: path.into(), source }.into())
    })
}

/// The threshold of a peak-memory ratio, a fraction: the tolerance the report judges memory
/// tricks by (0.05: a ratio that moved by 5% or less did not change).
pub const MEMORY_THRESHOLD_FRACTION: f64 = MEMORY_TOLERANCE;

#[cfg(test)]
mod tests;
