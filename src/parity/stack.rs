//! trickbench's stacked side of a parity comparison: the baseline cell with several tricks on
//! together, timed in the same rounds as the other sides. The tricks are the ones a user names
//! (`--stack`), or the fastest training step earlier results show (`--stack-from`: the tricks whose
//! training throughput was significantly faster than the baseline's, combined as the speedrun
//! design combines them).

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use crate::bench::speedrun::{fastest_step, load_evidence, Evidence};
use crate::device::DeviceSpec;
use crate::error::Error;
use crate::hardware::Hardware;
use crate::parity::compare::TimingRound;
use crate::results::schema::{SpeedrunDecision, SpeedrunTrick};
use crate::stats::{median_ci, paired_ratio_ci, Estimate};
use crate::tricks::{Applicability, Stage, Trick, TrickSet};
use crate::workloads::WorkloadId;

/// What `--stack` records as the effect of a trick named on the command line.
const NAMED: &str = "named with --stack";

/// Where the stacked side's tricks come from, as asked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StackRequest {
    /// The tricks named with `--stack`, in order.
    Tricks(Vec<Trick>),
    /// The results files of `--stack-from`, first file first.
    From(Vec<PathBuf>),
}

/// Where the stacked side's tricks come from, checked.
#[derive(Debug, Clone)]
pub enum StackSource {
    /// Tricks named with `--stack`, in order, without repeats; each one parity can time.
    Tricks(Vec<Trick>),
    /// The results files of `--stack-from`, read.
    From(Vec<Evidence>),
}

impl StackSource {
    /// Checks `request` for a comparison on `device`: a named trick that parity's timed steps
    /// cannot carry is refused, naming it and why; a results file that cannot be read, or that was
    /// measured on another kind of device, is refused, naming it.
    pub fn new(request: &StackRequest, device: DeviceSpec) -> Result<Self, Error> {
        match request {
            StackRequest::Tricks(tricks) => {
                if tricks.is_empty() {
                    return Err(Error::Invalid("--stack: name at least one trick".to_owned()));
                }
                let mut kept: Vec<Trick> = Vec::new();
                for &trick in tricks {
                    if let Some(why) = refusal(trick) {
                        return Err(Error::Invalid(format!("--stack {trick}: {why}")));
                    }
                    if !kept.contains(&trick) {
                        kept.push(trick);
                    }
                }
                Ok(StackSource::Tricks(kept))
            }
            StackRequest::From(paths) => Ok(StackSource::From(load_evidence("--stack-from", paths, device)?)),
        }
    }

    /// Where the tricks of `workload`'s stack came from, as the report says it: `--stack`, or the
    /// files' paths, with the workload whose effects they are where that is another of its family.
    pub fn evidence(&self, workload: WorkloadId) -> Vec<String> {
        match self {
            StackSource::Tricks(_) => vec!["--stack".to_owned()],
            StackSource::From(evidence) => {
                let judged = judged_workload(evidence, workload);
                evidence
                    .iter()
                    .map(|e| match judged == workload {
                        true => e.source.clone(),
                        false => format!("{}: {judged}'s effects, as it holds no {workload} cell", e.source),
                    })
                    .collect()
            }
        }
    }

    /// The stack of `workload` on `hardware`: the tricks to time together, in the order added,
    /// and the decision on every trick considered. A named trick that cannot run for the workload
    /// here is left out, and one that cannot run with those before it is refused, each with the
    /// reason.
    pub fn choose(&self, workload: WorkloadId, hardware: &Hardware) -> (Vec<Trick>, Vec<SpeedrunTrick>) {
        let refused_set = |set: &TrickSet| set.not_applicable_reason(workload, hardware);
        match self {
            StackSource::From(evidence) => {
                let files: Vec<(&str, &_)> =
                    evidence.iter().map(|e| (e.source.as_str(), &e.results)).collect();
                fastest_step(&files, judged_workload(evidence, workload), refusal, refused_set)
            }
            StackSource::Tricks(tricks) => {
                let mut stack: Vec<Trick> = Vec::new();
                let mut considered = Vec::new();
                for &trick in tricks {
                    let (decision, reason) = match trick.applicability(workload, hardware) {
                        Applicability::NotApplicable(why) => (SpeedrunDecision::LeftOut, Some(why)),
                        Applicability::Applies => {
                            let with: TrickSet = stack.iter().copied().chain([trick]).collect();
                            match refused_set(&with) {
                                Some(why) => (SpeedrunDecision::Refused, Some(why)),
                                None => (SpeedrunDecision::Added, None),
                            }
                        }
                    };
                    if decision == SpeedrunDecision::Added {
                        stack.push(trick);
                    }
                    let effect = NAMED.to_owned();
                    considered.push(SpeedrunTrick {
                        trick,
                        metric: trick.metric(),
                        effect,
                        decision,
                        reason,
                    });
                }
                (stack, considered)
            }
        }
    }
}

/// The workload whose measured effects in `evidence` choose `workload`'s stack: the workload itself
/// where a file holds its cells, else the first workload of its family a file holds (ResNet-56's
/// effects for ResNet-8, from a run of another profile), else itself.
fn judged_workload(evidence: &[Evidence], workload: WorkloadId) -> WorkloadId {
    let held = || evidence.iter().flat_map(|e| e.results.cells.iter().map(|c| c.key.workload));
    if held().any(|w| w == workload) {
        return workload;
    }
    held().find(|w| w.family() == workload.family()).unwrap_or(workload)
}

/// Why parity's stacked side cannot carry `trick`, if it cannot. Parity times training steps of
/// the plain recipe in one process, on batches exported with the case (already assembled,
/// augmented, standardised and on the device) at the case's batch size and learning rates.
pub fn refusal(trick: Trick) -> Option<String> {
    let why = match trick.stage() {
        Stage::Loader => {
            "acts on the loader, which parity keeps out of its timed steps: the case's batches were \
             exported already assembled, augmented, standardised and on the device"
        }
        Stage::Evaluation => "acts on evaluation, and parity times training steps",
        Stage::Schedule => {
            "changes the schedule or the batch size, which the exported case fixes (its batch size and \
             the learning rate of every step)"
        }
        Stage::Processes => "spreads training over several processes, and parity times one",
        Stage::Step if !trick.runs_in_cells() => "is measured through PyTorch: ask for it with --compile",
        Stage::Step if trick.judged_against_own_reference() => {
            "is judged against a reference of its own, not against the plain recipe that trickbench's \
             baseline side runs"
        }
        Stage::Step => return None,
    };
    Some(why.to_owned())
}

/// The stacked side of one workload.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StackParity {
    /// Where the tricks came from: `--stack`, or the `--stack-from` files.
    pub evidence: Vec<String>,
    /// The tricks on together, in the order they were added.
    pub tricks: Vec<Trick>,
    /// Every trick considered, in the order considered, with what was decided and why.
    pub considered: Vec<SpeedrunTrick>,
    /// Why the stack was not timed, if it was not: no trick to stack, or its process failed (its
    /// error). Windows timed before a failure are kept.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub unavailable: Option<String>,
    /// One timing process per round, in round order: samples per second in each timed window.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub rounds: Vec<Vec<f64>>,
    /// The speed against eager PyTorch and against trickbench's baseline (`None` when not timed).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub speed: Option<StackSpeed>,
}

impl StackParity {
    /// The label of the stacked set: its tricks joined by `+`.
    pub fn label(&self) -> String {
        self.tricks.iter().copied().collect::<TrickSet>().label()
    }
}

/// The stacked side's speed.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StackSpeed {
    /// Median samples per second over every window, with its 95% interval.
    pub samples_per_s: Estimate,
    /// Its throughput over eager PyTorch's (above 1: the stack is faster), with a 95% interval
    /// from the two-level bootstrap over rounds and windows.
    pub ratio_to_eager: Estimate,
    /// Its throughput over trickbench's baseline side's, with the same kind of interval: what the
    /// tricks buy on trickbench's own step.
    pub ratio_to_baseline: Estimate,
}

impl StackSpeed {
    /// Summarises the stack's windows of each round (`stack`, from the first round on) against
    /// eager PyTorch's and trickbench's baseline's windows of the same `rounds`; `None` when
    /// nothing was timed.
    pub fn from_rounds(stack: &[Vec<f64>], rounds: &[TimingRound]) -> Option<Self> {
        let same = &rounds[..stack.len().min(rounds.len())];
        let eager: Vec<Vec<f64>> = same.iter().map(|r| r.pytorch_window_samples_per_s.clone()).collect();
        let baseline: Vec<Vec<f64>> =
            same.iter().map(|r| r.trickbench_window_samples_per_s.clone()).collect();
        Some(Self {
            samples_per_s: median_ci(&stack.concat())?,
            ratio_to_eager: paired_ratio_ci(stack, &eager)?,
            ratio_to_baseline: paired_ratio_ci(stack, &baseline)?,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parity_carries_the_step_tricks_and_says_why_it_cannot_carry_the_rest() {
        assert_eq!(refusal(Trick::ChannelsLast), None);
        assert_eq!(refusal(Trick::Muon), None);
        let reason = |t: Trick| refusal(t).unwrap();
        assert!(reason(Trick::LoaderWorkers).starts_with("acts on the loader"));
        assert!(reason(Trick::InputNorm).starts_with("acts on the loader"));
        assert!(reason(Trick::NoGradEval).starts_with("acts on evaluation"));
        assert!(reason(Trick::MaxBatch).starts_with("changes the schedule or the batch size"));
        assert!(reason(Trick::Ddp).starts_with("spreads training over several processes"));
        assert!(reason(Trick::TorchCompile).contains("--compile"));
        assert!(reason(Trick::DebugOff).contains("reference of its own"));
    }

    #[test]
    fn named_tricks_are_checked_deduplicated_and_chosen_per_workload() {
        let asked = StackRequest::Tricks(vec![Trick::ChannelsLast, Trick::ZeroGradNone, Trick::ChannelsLast]);
        let source = StackSource::new(&asked, DeviceSpec::Cpu).unwrap();
        assert_eq!(source.evidence(WorkloadId::Resnet8), ["--stack"]);
        let cpu = Hardware::with_gpus(0);
        let (resnet, _) = source.choose(WorkloadId::Resnet8, &cpu);
        assert_eq!(resnet, [Trick::ChannelsLast, Trick::ZeroGradNone]);
        let (gpt, considered) = source.choose(WorkloadId::GptMini, &cpu);
        assert_eq!(gpt, [Trick::ZeroGradNone]);
        assert_eq!(considered[0].decision, SpeedrunDecision::LeftOut);
        assert!(considered[0].reason.as_deref().unwrap().starts_with("gpt-mini has no convolutions"));

        let error =
            StackSource::new(&StackRequest::Tricks(vec![Trick::PinMemory]), DeviceSpec::Cpu).unwrap_err();
        assert!(error.to_string().starts_with("--stack pin-memory: acts on the loader"), "{error}");
        let error = StackSource::new(&StackRequest::Tricks(Vec::new()), DeviceSpec::Cpu).unwrap_err();
        assert_eq!(error.to_string(), "--stack: name at least one trick");
    }

    #[test]
    fn a_trick_that_conflicts_with_those_before_it_is_refused() {
        let asked = StackRequest::Tricks(vec![Trick::SdpaMath, Trick::FlashAttention, Trick::ZeroGradNone]);
        let source = StackSource::new(&asked, DeviceSpec::Cpu).unwrap();
        let (stack, considered) = source.choose(WorkloadId::GptMini, &Hardware::with_gpus(0));
        assert_eq!(stack, [Trick::SdpaMath, Trick::ZeroGradNone]);
        assert_eq!(considered[1].decision, SpeedrunDecision::Refused);
        assert!(considered[1].reason.as_deref().unwrap().contains("only one can be on"));
    }

    #[test]
    fn the_speed_is_paired_by_round_with_eager_and_the_baseline() {
        let stack = vec![vec![150.0, 152.0, 148.0], vec![300.0, 303.0, 297.0]];
        let round = |scale: f64, trickbench_first| TimingRound {
            trickbench_first,
            trickbench_window_samples_per_s: vec![120.0 * scale, 121.0 * scale, 119.0 * scale],
            pytorch_window_samples_per_s: vec![100.0 * scale, 101.0 * scale, 99.0 * scale],
        };
        let rounds = [round(1.0, true), round(2.0, false)];
        let speed = StackSpeed::from_rounds(&stack, &rounds).unwrap();
        assert!((speed.ratio_to_eager.point - 1.5).abs() < 0.03, "{:?}", speed.ratio_to_eager);
        assert!((speed.ratio_to_baseline.point - 1.25).abs() < 0.03, "{:?}", speed.ratio_to_baseline);
        let stopped_after_one = StackSpeed::from_rounds(&stack[..1], &rounds).unwrap();
        assert!((stopped_after_one.ratio_to_eager.point - 1.5).abs() < 0.03);
        assert!(StackSpeed::from_rounds(&[], &rounds).is_none());
    }
}
