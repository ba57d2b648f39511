//! Judging a parity case: do the two sides' losses agree, and how fast is trickbench's step
//! against PyTorch's eager one.

use serde::{Deserialize, Serialize};

use crate::bench::profile::ProfileName;
use crate::device::DeviceSpec;
use crate::error::Error;
use crate::parity::side::CompileMode;
use crate::parity::stack::StackParity;
use crate::results::system::SystemInfo;
use crate::stats::{median_ci, paired_ratio_ci, Estimate};
use crate::workloads::WorkloadId;

/// The largest relative difference between the two sides' loss at any step that still counts as
/// agreement. The losses are compared in a float64 run (see [`crate::parity::side::SideMode`]),
/// where the two sides' different orders of floating-point operations (an update written as
/// `g + wd·p` rather than a fused `add(alpha)`, say) leave differences near 1e-15 that stay far
/// below the float32 resolution (1.2e-7) the losses are reported in; a wrong initialisation,
/// momentum, weight decay or normalisation moves the loss by more than 1e-5 within a few steps.
pub const LOSS_RELATIVE_TOLERANCE: f64 = 1e-5;

/// The largest relative difference between a compiled PyTorch side's loss and eager PyTorch's
/// at any step that still counts as agreement. Both run in float64 (inductor's C++ and Triton
/// backends compile float64 kernels), with inductor drawing dropout masks from eager's generator
/// (`fallback_random`) in that run; inductor reorders and fuses the float64 arithmetic (sums
/// split into vectorised partial sums, say), which leaves differences near 1e-15 that grow with
/// the steps as eager's own do. They stay far below the float32 resolution of the reported
/// losses, so this is the tolerance eager PyTorch and trickbench are held to.
pub const COMPILED_LOSS_RELATIVE_TOLERANCE: f64 = LOSS_RELATIVE_TOLERANCE;

/// The loss comparison of one case.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LossAgreement {
    /// trickbench's training loss at each step, nats.
    pub trickbench_losses: Vec<f64>,
    /// PyTorch's training loss at each step, nats.
    pub pytorch_losses: Vec<f64>,
    /// The largest |trickbench − PyTorch| over the steps, nats.
    pub max_abs_diff: f64,
    /// The largest |trickbench − PyTorch| / |PyTorch| over the steps.
    pub max_rel_diff: f64,
    /// The relative tolerance applied ([`LOSS_RELATIVE_TOLERANCE`]).
    pub rel_tolerance: f64,
    /// The first step (0-based) whose relative difference exceeds the tolerance, if any.
    pub first_disagreeing_step: Option<usize>,
}

impl LossAgreement {
    /// Compares two loss traces step by step; an error when their lengths differ, they are
    /// empty, or a loss is not finite (a side diverged).
    pub fn compare(trickbench: Vec<f64>, pytorch: Vec<f64>, rel_tolerance: f64) -> Result<Self, Error> {
        if trickbench.len() != pytorch.len() || trickbench.is_empty() {
            return Err(Error::Invalid(format!(
                "parity: trickbench recorded {} losses and PyTorch {}; both should have one per step",
                trickbench.len(),
                pytorch.len()
            )));
        }
        if let Some(k) = trickbench.iter().chain(&pytorch).position(|l| !l.is_finite()) {
            return Err(Error::Invalid(format!(
                "parity: a loss is not finite (step {} of {}): training diverged",
                k % trickbench.len(),
                if k < trickbench.len() { "trickbench" } else { "PyTorch" }
            )));
        }
        let abs: Vec<f64> = trickbench.iter().zip(&pytorch).map(|(a, b)| (a - b).abs()).collect();
        let rel: Vec<f64> =
            abs.iter().zip(&pytorch).map(|(d, b)| d / b.abs().max(f64::MIN_POSITIVE)).collect();
        Ok(Self {
            max_abs_diff: abs.iter().copied().fold(0.0, f64::max),
            max_rel_diff: rel.iter().copied().fold(0.0, f64::max),
            first_disagreeing_step: rel.iter().position(|&r| r > rel_tolerance),
            rel_tolerance,
            trickbench_losses: trickbench,
            pytorch_losses: pytorch,
        })
    }

    /// Whether every step agrees within the tolerance.
    pub fn agrees(&self) -> bool {
        self.first_disagreeing_step.is_none()
    }
}

/// One round of the timing: a trickbench process and a PyTorch process, one after the other.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TimingRound {
    /// Whether trickbench's process ran first (rounds alternate, so drift cancels).
    pub trickbench_first: bool,
    /// trickbench's samples per second in each window.
    pub trickbench_window_samples_per_s: Vec<f64>,
    /// PyTorch's samples per second in each window.
    pub pytorch_window_samples_per_s: Vec<f64>,
}

/// The speed comparison of one case.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SpeedComparison {
    /// The rounds as measured.
    pub rounds: Vec<TimingRound>,
    /// trickbench's median samples per second over every window, with its 95% interval.
    pub trickbench_samples_per_s: Estimate,
    /// PyTorch's median samples per second over every window, with its 95% interval.
    pub pytorch_samples_per_s: Estimate,
    /// trickbench's throughput over PyTorch's (above 1: trickbench is faster), with a 95%
    /// interval from the two-level bootstrap over rounds and windows.
    pub speed_ratio: Estimate,
}

impl SpeedComparison {
    /// Summarises timing rounds; `None` when a side timed no window.
    pub fn from_rounds(rounds: Vec<TimingRound>) -> Option<Self> {
        let tb: Vec<Vec<f64>> = rounds.iter().map(|r| r.trickbench_window_samples_per_s.clone()).collect();
        let py: Vec<Vec<f64>> = rounds.iter().map(|r| r.pytorch_window_samples_per_s.clone()).collect();
        Some(Self {
            trickbench_samples_per_s: median_ci(&tb.concat())?,
            pytorch_samples_per_s: median_ci(&py.concat())?,
            speed_ratio: paired_ratio_ci(&tb, &py)?,
            rounds,
        })
    }
}

/// A compiled PyTorch side's losses against eager PyTorch's.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CompiledLosses {
    /// The compiled side's training loss at each step, nats.
    pub losses: Vec<f64>,
    /// The largest |compiled − eager| over the steps, nats.
    pub max_abs_diff: f64,
    /// The largest |compiled − eager| / |eager| over the steps.
    pub max_rel_diff: f64,
    /// The relative tolerance applied ([`COMPILED_LOSS_RELATIVE_TOLERANCE`]).
    pub rel_tolerance: f64,
    /// The first step (0-based) whose relative difference exceeds the tolerance, if any.
    pub first_disagreeing_step: Option<usize>,
    /// Wall seconds of the loss run's first (graph-building, float64) step.
    pub compile_s: f64,
}

impl CompiledLosses {
    /// Compares the compiled side's `losses` with eager PyTorch's, step by step.
    pub fn compare(losses: Vec<f64>, eager: &[f64], compile_s: f64) -> Result<Self, Error> {
        let agreement = LossAgreement::compare(losses, eager.to_vec(), COMPILED_LOSS_RELATIVE_TOLERANCE)?;
        Ok(Self {
            losses: agreement.trickbench_losses,
            max_abs_diff: agreement.max_abs_diff,
            max_rel_diff: agreement.max_rel_diff,
            rel_tolerance: agreement.rel_tolerance,
            first_disagreeing_step: agreement.first_disagreeing_step,
            compile_s,
        })
    }

    /// Whether every step agrees within the tolerance.
    pub fn agrees(&self) -> bool {
        self.first_disagreeing_step.is_none()
    }
}

/// One timing process of a compiled PyTorch side (one per round, interleaved with the others).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CompiledRound {
    /// Samples per second in each timed window (after the graphs were built).
    pub window_samples_per_s: Vec<f64>,
    /// Wall seconds of the untimed steps that built graphs, warm-up recompiles included.
    pub compile_s: f64,
}

/// A compiled PyTorch side's speed against eager PyTorch's.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CompiledSpeed {
    /// Median samples per second over every window, with its 95% interval.
    pub samples_per_s: Estimate,
    /// Its throughput over eager PyTorch's (above 1: compiled is faster), with a 95% interval
    /// from the two-level bootstrap over rounds and windows.
    pub ratio_to_eager: Estimate,
    /// Compile seconds of the first timing process (inductor's on-disk caches cold, unless an
    /// earlier run on this machine filled them).
    pub first_compile_s: f64,
    /// Median compile seconds over the timing processes (later ones find the caches warm).
    pub median_compile_s: f64,
}

impl CompiledSpeed {
    /// Summarises a compiled side's `rounds` against eager PyTorch's windows in the same rounds;
    /// `None` when nothing was timed.
    pub fn from_rounds(rounds: &[CompiledRound], eager: &[TimingRound]) -> Option<Self> {
        let compiled: Vec<Vec<f64>> = rounds.iter().map(|r| r.window_samples_per_s.clone()).collect();
        let eager: Vec<Vec<f64>> = eager.iter().map(|r| r.pytorch_window_samples_per_s.clone()).collect();
        let compile_s: Vec<f64> = rounds.iter().map(|r| r.compile_s).collect();
        Some(Self {
            samples_per_s: median_ci(&compiled.concat())?,
            ratio_to_eager: paired_ratio_ci(&compiled, &eager)?,
            first_compile_s: *compile_s.first()?,
            median_compile_s: crate::stats::median(&compile_s)?,
        })
    }
}

/// A PyTorch side with its model compiled by `torch.compile`, compared with eager PyTorch.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CompiledParity {
    /// The `torch.compile` mode.
    pub mode: CompileMode,
    /// Why the side could not run here (the first line of inductor's error); the other fields
    /// are then empty.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub unavailable: Option<String>,
    /// The losses against eager PyTorch's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub losses: Option<CompiledLosses>,
    /// One timing process per round, in round order.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub rounds: Vec<CompiledRound>,
    /// The speed against eager PyTorch (`None` when not timed or unavailable).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub speed: Option<CompiledSpeed>,
}

impl CompiledParity {
    /// A side that could not compile here, for `reason`.
    pub fn unavailable(mode: CompileMode, reason: String) -> Self {
        Self { mode, unavailable: Some(reason), losses: None, rounds: Vec::new(), speed: None }
    }
}

/// The parity of one workload.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct WorkloadParity {
    /// The workload.
    pub workload: WorkloadId,
    /// Samples (images or windows) per step.
    pub batch_size: usize,
    /// What a sample of the throughput is: images, or tokens.
    pub sample_unit: String,
    /// The case directory, relative to the parity output directory.
    pub case_dir: String,
    /// PyTorch's version on the other side.
    pub pytorch_version: String,
    /// Intra-op threads of trickbench's libtorch.
    pub trickbench_threads: i64,
    /// Intra-op threads of PyTorch.
    pub pytorch_threads: i64,
    /// The loss comparison.
    pub losses: LossAgreement,
    /// The speed comparison (`None` when timing was skipped with `--rounds 0`).
    pub speed: Option<SpeedComparison>,
    /// The compiled PyTorch sides asked for with `--compile`, in the order asked.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub compiled: Vec<CompiledParity>,
    /// trickbench's stacked side (`--stack`, `--stack-from`), when asked for.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stack: Option<StackParity>,
}

/// Everything `trickbench parity` measured: the contract between measuring and printing,
/// written to `parity.json` after every workload.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ParityReport {
    /// When the comparison started (RFC 3339, UTC).
    pub started_at: String,
    /// trickbench's version.
    pub trickbench_version: String,
    /// The commit of the code that measured (`-dirty` with uncommitted changes).
    pub git_commit: Option<String>,
    /// The command line.
    pub command: Vec<String>,
    /// The device both sides ran on.
    pub device: DeviceSpec,
    /// The machine.
    pub system: SystemInfo,
    /// The profile whose cells were exported.
    pub profile: ProfileName,
    /// Training steps compared by loss.
    pub loss_steps: usize,
    /// Untimed steps before each timing process's windows.
    pub warmup_steps: usize,
    /// Timed windows per process.
    pub windows_per_process: usize,
    /// Steps per timed window.
    pub steps_per_window: usize,
    /// One entry per workload, in the order run.
    pub workloads: Vec<WorkloadParity>,
}

impl ParityReport {
    /// The workloads whose losses disagree with PyTorch's beyond the tolerance.
    pub fn disagreeing(&self) -> Vec<WorkloadId> {
        self.workloads.iter().filter(|w| !w.losses.agrees()).map(|w| w.workload).collect()
    }

    /// The compiled sides whose losses disagree with eager PyTorch's beyond their tolerance.
    pub fn compiled_disagreeing(&self) -> Vec<(WorkloadId, CompileMode)> {
        let disagrees = |c: &CompiledParity| c.losses.as_ref().is_some_and(|l| !l.agrees());
        self.workloads
            .iter()
            .flat_map(|w| w.compiled.iter().filter(|c| disagrees(c)).map(|c| (w.workload, c.mode)))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn equal_traces_agree_and_a_drift_past_the_tolerance_is_located() {
        let same = LossAgreement::compare(vec![2.3, 2.1, 1.9], vec![2.3, 2.1, 1.9], 1e-3).unwrap();
        assert!(same.agrees());
        assert_eq!((same.max_abs_diff, same.max_rel_diff), (0.0, 0.0));

        let drift = LossAgreement::compare(vec![2.3, 2.1, 1.9], vec![2.3, 2.1005, 1.95], 1e-3).unwrap();
        assert!(!drift.agrees());
        assert_eq!(drift.first_disagreeing_step, Some(2), "step 1 differs by 2.4e-4, within 1e-3");
        assert!((drift.max_abs_diff - 0.05).abs() < 1e-12);
        assert!((drift.max_rel_diff - 0.05 / 1.95).abs() < 1e-12);
    }

    #[test]
    fn traces_of_different_lengths_or_with_a_divergence_are_errors() {
        let short = LossAgreement::compare(vec![2.3, 2.1], vec![2.3], 1e-3).unwrap_err();
        assert!(short.to_string().contains("trickbench recorded 2 losses and PyTorch 1"), "{short}");
        let diverged = LossAgreement::compare(vec![2.3, 2.1], vec![2.3, f64::NAN], 1e-3).unwrap_err();
        assert!(diverged.to_string().contains("step 1 of PyTorch"), "{diverged}");
        assert!(LossAgreement::compare(Vec::new(), Vec::new(), 1e-3).is_err());
    }

    #[test]
    fn a_report_without_compiled_sides_loads_and_one_with_them_round_trips() {
        let committed: ParityReport = serde_json::from_str(include_str!(
            "../../reports/cpu-xeon-2core-20261130-quick-parity/parity.json"
        ))
        .unwrap();
        assert!(committed.workloads.iter().all(|w| w.compiled.is_empty()));
        let json = serde_json::to_string(&committed).unwrap();
        assert!(!json.contains("\"compiled\""), "no compiled sides, no field");

        let mut report = committed.clone();
        let eager = report.workloads[0].losses.pytorch_losses.clone();
        let shifted: Vec<f64> = eager.iter().map(|l| l * (1.0 + 1e-9)).collect();
        let rounds = vec![CompiledRound { window_samples_per_s: vec![1.0, 2.0, 3.0], compile_s: 41.5 }];
        report.workloads[0].compiled = vec![
            CompiledParity {
                mode: CompileMode::Default,
                unavailable: None,
                losses: Some(CompiledLosses::compare(shifted, &eager, 40.0).unwrap()),
                speed: CompiledSpeed::from_rounds(
                    &rounds,
                    &report.workloads[0].speed.as_ref().unwrap().rounds[..1],
                ),
                rounds,
            },
            CompiledParity::unavailable(
                CompileMode::MaxAutotuneNoCudagraphs,
                "InvalidCxxCompiler: none".into(),
            ),
        ];
        let json = serde_json::to_string(&report).unwrap();
        assert!(json.contains("\"max-autotune-no-cudagraphs\"") && json.contains("\"unavailable\""));
        assert_eq!(serde_json::from_str::<ParityReport>(&json).unwrap(), report);
        assert!(report.compiled_disagreeing().is_empty());
        let speed = report.workloads[0].compiled[0].speed.as_ref().unwrap();
        assert_eq!((speed.first_compile_s, speed.median_compile_s), (41.5, 41.5));
    }

    #[test]
    fn a_compiled_side_beyond_its_tolerance_is_named_as_disagreeing() {
        let eager = [2.3, 2.1, 1.9];
        let losses = CompiledLosses::compare(vec![2.3, 2.1, 1.8], &eager, 1.0).unwrap();
        assert_eq!(losses.first_disagreeing_step, Some(2));
        assert!(!losses.agrees());
    }

    #[test]
    fn the_speed_ratio_is_trickbench_throughput_over_pytorch_throughput() {
        let rounds = vec![
            TimingRound {
                trickbench_first: true,
                trickbench_window_samples_per_s: vec![110.0, 111.0, 109.0],
                pytorch_window_samples_per_s: vec![100.0, 101.0, 99.0],
            },
            TimingRound {
                trickbench_first: false,
                trickbench_window_samples_per_s: vec![220.0, 222.0, 218.0],
                pytorch_window_samples_per_s: vec![200.0, 202.0, 198.0],
            },
        ];
        let speed = SpeedComparison::from_rounds(rounds).unwrap();
        assert!((speed.speed_ratio.point - 1.1).abs() < 0.02, "{:?}", speed.speed_ratio);
        assert!(
            speed.speed_ratio.low <= speed.speed_ratio.point
                && speed.speed_ratio.point <= speed.speed_ratio.high
        );
        assert!(speed.trickbench_samples_per_s.point > speed.pytorch_samples_per_s.point);
        assert!(SpeedComparison::from_rounds(Vec::new()).is_none());
    }
}
