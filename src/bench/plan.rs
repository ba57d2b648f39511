//! Plans: which cells a design measures, and in which order they run.

use std::fmt;
use std::str::FromStr;

use crate::device::DeviceSpec;
use crate::error::Error;
use crate::results::schema::{CellKey, CellKind, Phase};
use crate::tricks::{Metric, Trick, TrickSet};
use crate::workloads::WorkloadId;

/// An experimental design.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Design {
    /// The baseline against the baseline plus each trick, one at a time.
    Ablation,
}

impl Design {
    /// The name on the command line and in results.
    pub fn id(self) -> &'static str {
        match self {
            Design::Ablation => "ablation",
        }
    }
}

impl fmt::Display for Design {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.id())
    }
}

impl FromStr for Design {
    type Err = Error;

    fn from_str(s: &str) -> Result<Self, Error> {
        match s {
            "ablation" => Ok(Design::Ablation),
            _ => Err(Error::Invalid(format!("unknown design '{s}'; valid designs: ablation"))),
        }
    }
}

/// A cell in a plan, with the reason it cannot run (if it cannot).
#[derive(Debug, Clone, PartialEq)]
pub struct PlannedCell {
    /// The cell.
    pub key: CellKey,
    /// Why the cell is not applicable on this device, if it is not.
    pub not_applicable: Option<String>,
}

/// The cells of a run.
#[derive(Debug, Clone, PartialEq)]
pub struct Plan {
    /// Every cell, in report order.
    pub cells: Vec<PlannedCell>,
}

/// What a plan is built from.
#[derive(Debug, Clone)]
pub struct PlanRequest {
    /// Workloads to measure.
    pub workloads: Vec<WorkloadId>,
    /// Tricks to measure.
    pub tricks: Vec<Trick>,
    /// Resolved device.
    pub device: DeviceSpec,
    /// Samples per step.
    pub batch_size: usize,
    /// Seed of every cell.
    pub seed: u64,
    /// Batch size of a time-to-accuracy cell of the baseline per workload (`None`: no such cell).
    pub time_to_accuracy_batch_size: Option<usize>,
}

impl Plan {
    /// The ablation design: for each workload, the baseline (training throughput, evaluation
    /// throughput when an evaluation trick is asked for, and time-to-accuracy) and the baseline
    /// plus each trick, measured in the phase its metric is about.
    pub fn ablation(request: &PlanRequest) -> Plan {
        let mut cells = Vec::new();
        for &workload in &request.workloads {
            let cell = |tricks: TrickSet, kind: CellKind| {
                let batch_size = match kind {
                    CellKind::TimeToAccuracy => {
                        request.time_to_accuracy_batch_size.unwrap_or(request.batch_size)
                    }
                    CellKind::Throughput { .. } => request.batch_size,
                };
                let key = CellKey { workload, tricks, batch_size, seed: request.seed, kind };
                let not_applicable = key.tricks.not_applicable_reason(workload, request.device);
                PlannedCell { key, not_applicable }
            };
            let phase_of =
                |t: Trick| if t.metric() == Metric::EvalThroughput { Phase::Eval } else { Phase::Train };
            let mut phases: Vec<Phase> = vec![Phase::Train];
            if request.tricks.iter().any(|&t| phase_of(t) == Phase::Eval) {
                phases.push(Phase::Eval);
            }
            for phase in phases {
                cells.push(cell(TrickSet::baseline(), CellKind::Throughput { phase }));
            }
            for &trick in &request.tricks {
                cells.push(cell(TrickSet::only(trick), CellKind::Throughput { phase: phase_of(trick) }));
            }
            if request.time_to_accuracy_batch_size.is_some() {
                cells.push(cell(TrickSet::baseline(), CellKind::TimeToAccuracy));
            }
        }
        Plan { cells }
    }

    /// The order in which cell processes run: `rounds` rounds over the applicable throughput
    /// cells, forward in even rounds and reversed in odd ones (so linear drift hits baseline and
    /// tricks alike), then each time-to-accuracy cell once. Items are (cell index, round).
    pub fn schedule(&self, rounds: usize) -> Vec<(usize, usize)> {
        let runnable = |kind_is_tta: bool| {
            self.cells
                .iter()
                .enumerate()
                .filter(move |(_, c)| {
                    c.not_applicable.is_none() && (c.key.kind == CellKind::TimeToAccuracy) == kind_is_tta
                })
                .map(|(i, _)| i)
                .collect::<Vec<_>>()
        };
        let throughput = runnable(false);
        let mut order = Vec::new();
        for round in 0..rounds {
            let mut this_round: Vec<usize> = throughput.clone();
            if round % 2 == 1 {
                this_round.reverse();
            }
            order.extend(this_round.into_iter().map(|i| (i, round)));
        }
        order.extend(runnable(true).into_iter().map(|i| (i, 0)));
        order
    }

    /// Processes a cell needs: `rounds` for throughput cells, one for time-to-accuracy cells.
    pub fn processes_per_cell(key: &CellKey, rounds: usize) -> usize {
        if key.kind == CellKind::TimeToAccuracy {
            1
        } else {
            rounds
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request(tricks: Vec<Trick>) -> PlanRequest {
        PlanRequest {
            workloads: vec![WorkloadId::Resnet20],
            tricks,
            device: DeviceSpec::Cpu,
            batch_size: 128,
            seed: 0,
            time_to_accuracy_batch_size: Some(64),
        }
    }

    #[test]
    fn ablation_pairs_each_trick_with_a_baseline_in_its_phase() {
        let plan = Plan::ablation(&request(vec![Trick::ChannelsLast, Trick::NoGradEval, Trick::Amp]));
        let ids: Vec<String> = plan.cells.iter().map(|c| c.key.id()).collect();
        assert_eq!(
            ids,
            [
                "resnet20/baseline/b128/s0/train",
                "resnet20/baseline/b128/s0/eval",
                "resnet20/channels-last/b128/s0/train",
                "resnet20/no-grad-eval/b128/s0/eval",
                "resnet20/amp/b128/s0/train",
                "resnet20/baseline/b64/s0/tta",
            ]
        );
        let amp = &plan.cells[4];
        assert!(amp.not_applicable.as_deref().unwrap().contains("needs a CUDA GPU"));
    }

    #[test]
    fn schedule_alternates_direction_and_skips_inapplicable_cells() {
        let plan = Plan::ablation(&request(vec![Trick::ChannelsLast, Trick::Amp]));
        // cells: 0 baseline train, 1 channels-last, 2 amp (n/a on CPU), 3 tta
        assert_eq!(plan.schedule(2), [(0, 0), (1, 0), (1, 1), (0, 1), (3, 0)]);
    }
}
