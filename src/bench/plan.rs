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
    /// All tricks on against all on minus each one.
    LeaveOneOut,
    /// The ablation, then tricks added cumulatively, best measured first (a waterfall).
    Stack,
}

impl Design {
    /// The name on the command line and in results.
    pub fn id(self) -> &'static str {
        match self {
            Design::Ablation => "ablation",
            Design::LeaveOneOut => "leave-one-out",
            Design::Stack => "stack",
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
            "leave-one-out" => Ok(Design::LeaveOneOut),
            "stack" => Ok(Design::Stack),
            _ => Err(Error::Invalid(format!(
                "unknown design '{s}'; valid designs: ablation, leave-one-out, stack"
            ))),
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
    /// Whether image files to decode were given (`run --images`), which `packed-dataset` needs.
    pub has_images: bool,
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
            cells.extend(baselines(request, workload));
            for &trick in &request.tricks {
                if trick == Trick::DebugOff {
                    cells.push(debug_apis_on(planned(
                        request,
                        workload,
                        TrickSet::baseline(),
                        throughput(Phase::Train),
                    )));
                }
                cells.push(planned(request, workload, TrickSet::only(trick), throughput(phase_of(trick))));
            }
            cells.extend(time_to_accuracy(request, workload));
        }
        Plan { cells }
    }

    /// The leave-one-out design: every applicable training trick on together, and that set minus
    /// each one (what each trick still adds when all the others are on). Evaluation tricks and
    /// tricks that cannot apply are measured as in the ablation, so none is silently dropped.
    pub fn leave_one_out(request: &PlanRequest) -> Plan {
        let mut cells = Vec::new();
        for &workload in &request.workloads {
            cells.extend(baselines(request, workload));
            let (together, alone): (Vec<Trick>, Vec<Trick>) = request.tricks.iter().partition(|&&t| {
                phase_of(t) == Phase::Train
                    && planned(request, workload, TrickSet::only(t), throughput(Phase::Train))
                        .not_applicable
                        .is_none()
            });
            for trick in alone {
                cells.push(planned(request, workload, TrickSet::only(trick), throughput(phase_of(trick))));
            }
            let all: TrickSet = together.iter().copied().collect();
            if all.has(Trick::DebugOff) {
                cells.push(debug_apis_on(planned(
                    request,
                    workload,
                    TrickSet::baseline(),
                    throughput(Phase::Train),
                )));
            }
            if !all.is_baseline() {
                cells.push(planned(request, workload, all.clone(), throughput(Phase::Train)));
            }
            if together.len() > 1 {
                for &trick in &together {
                    let without: TrickSet = all.iter().filter(|&t| t != trick).collect();
                    let cell = planned(request, workload, without, throughput(Phase::Train));
                    // Without `debug-off`, debugging stays on: that is what leaving it out means.
                    cells.push(if trick == Trick::DebugOff { debug_apis_on(cell) } else { cell });
                }
            }
            cells.extend(time_to_accuracy(request, workload));
        }
        Plan { cells }
    }

    /// The stack design's second half: the ablation's cells, then tricks added cumulatively in
    /// `ranking` order (best measured first), one cell per step, for a waterfall of throughput and
    /// memory. The first step, {ranking\[0\]}, is already an ablation cell.
    pub fn stack(request: &PlanRequest, ranking: &[Trick]) -> Plan {
        let mut plan = Plan::ablation(request);
        for &workload in &request.workloads {
            let mut cumulative = TrickSet::baseline();
            for (step, &trick) in ranking.iter().enumerate() {
                cumulative = cumulative.iter().chain([trick]).collect();
                if step > 0 {
                    plan.cells.push(planned(request, workload, cumulative.clone(), throughput(Phase::Train)));
                }
            }
        }
        plan
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

/// The phase a trick's metric is measured in.
fn phase_of(trick: Trick) -> Phase {
    if trick.metric() == Metric::EvalThroughput {
        Phase::Eval
    } else {
        Phase::Train
    }
}

/// A throughput cell kind.
fn throughput(phase: Phase) -> CellKind {
    CellKind::Throughput { phase }
}

/// A cell of `workload` with `tricks`, marked not applicable where it cannot run.
fn planned(request: &PlanRequest, workload: WorkloadId, tricks: TrickSet, kind: CellKind) -> PlannedCell {
    let batch_size = match kind {
        CellKind::TimeToAccuracy => request.time_to_accuracy_batch_size.unwrap_or(request.batch_size),
        CellKind::Throughput { .. } => request.batch_size,
    };
    let key = CellKey { workload, tricks, batch_size, seed: request.seed, kind, debug_apis_on: false };
    let not_applicable = key
        .tricks
        .not_applicable_reason(workload, request.device)
        .or_else(|| key.tricks.missing_source_reason(request.has_images));
    PlannedCell { key, not_applicable }
}

/// The same cell with autograd anomaly detection left on (the "off" side of `debug-off`). A CUDA
/// graph cannot be captured that way: anomaly detection reads every gradient to the host.
fn debug_apis_on(mut cell: PlannedCell) -> PlannedCell {
    cell.key.debug_apis_on = true;
    if cell.key.tricks.has(Trick::CudaGraphs) && cell.not_applicable.is_none() {
        cell.not_applicable = Some(format!(
            "{}: anomaly detection checks every gradient for NaN on the host, which a CUDA graph \
             capture forbids",
            Trick::CudaGraphs
        ));
    }
    cell
}

/// The baseline's throughput cells: training, and evaluation when an evaluation trick is asked for.
fn baselines(request: &PlanRequest, workload: WorkloadId) -> Vec<PlannedCell> {
    let mut phases = vec![Phase::Train];
    if request.tricks.iter().any(|&t| phase_of(t) == Phase::Eval) {
        phases.push(Phase::Eval);
    }
    phases.into_iter().map(|p| planned(request, workload, TrickSet::baseline(), throughput(p))).collect()
}

/// The baseline's time-to-accuracy cell, when asked for.
fn time_to_accuracy(request: &PlanRequest, workload: WorkloadId) -> Option<PlannedCell> {
    request
        .time_to_accuracy_batch_size
        .map(|_| planned(request, workload, TrickSet::baseline(), CellKind::TimeToAccuracy))
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
            has_images: false,
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
    fn leave_one_out_removes_each_applicable_training_trick_from_the_full_set() {
        let plan = Plan::leave_one_out(&request(vec![
            Trick::ChannelsLast,
            Trick::ZeroGradNone,
            Trick::NoGradEval,
            Trick::Amp,
        ]));
        let ids: Vec<String> = plan.cells.iter().map(|c| c.key.id()).collect();
        assert_eq!(
            ids,
            [
                "resnet20/baseline/b128/s0/train",
                "resnet20/baseline/b128/s0/eval",
                "resnet20/no-grad-eval/b128/s0/eval",
                "resnet20/amp/b128/s0/train",
                "resnet20/zero-grad-none+channels-last/b128/s0/train",
                "resnet20/zero-grad-none/b128/s0/train",
                "resnet20/channels-last/b128/s0/train",
                "resnet20/baseline/b64/s0/tta",
            ]
        );
    }

    #[test]
    fn debug_off_is_measured_against_a_debugging_on_reference() {
        let plan = Plan::ablation(&request(vec![Trick::DebugOff]));
        let ids: Vec<String> = plan.cells.iter().map(|c| c.key.id()).collect();
        assert_eq!(
            ids,
            [
                "resnet20/baseline/b128/s0/train",
                "resnet20/baseline+debug-apis-on/b128/s0/train",
                "resnet20/debug-off/b128/s0/train",
                "resnet20/baseline/b64/s0/tta",
            ]
        );
        let loo = Plan::leave_one_out(&request(vec![Trick::DebugOff, Trick::ZeroGradNone]));
        let without_debug_off = loo.cells.iter().find(|c| c.key.tricks.label() == "zero-grad-none").unwrap();
        assert!(without_debug_off.key.debug_apis_on, "leaving debug-off out leaves debugging on");
    }

    #[test]
    fn cuda_graphs_with_debugging_on_is_not_applicable_with_the_reason() {
        let on_gpu = PlanRequest {
            device: DeviceSpec::Cuda(0),
            ..request(vec![Trick::DebugOff, Trick::CudaGraphs, Trick::ZeroGradNone])
        };
        let loo = Plan::leave_one_out(&on_gpu);
        let cell = |label: &str, debug: bool| {
            loo.cells.iter().find(|c| c.key.tricks.label() == label && c.key.debug_apis_on == debug).unwrap()
        };
        let with_debugging = cell("zero-grad-none+cuda-graphs", true);
        let reason = with_debugging.not_applicable.as_deref().expect("capture with anomaly mode cannot run");
        assert!(reason.starts_with("cuda-graphs: "), "{reason}");
        if crate::ffi::cuda_graphs_compiled() {
            assert!(reason.contains("anomaly detection"), "{reason}");
            assert_eq!(cell("zero-grad-none+debug-off+cuda-graphs", false).not_applicable, None);
            assert_eq!(cell("debug-off+cuda-graphs", false).not_applicable, None);
        }
        let on_cpu = Plan::ablation(&request(vec![Trick::CudaGraphs]));
        let reason = on_cpu.cells[1].not_applicable.as_deref().unwrap();
        assert!(reason.contains("needs a CUDA GPU"), "{reason}");
    }

    #[test]
    fn stack_adds_tricks_in_ranking_order() {
        let r = request(vec![Trick::ChannelsLast, Trick::ZeroGradNone, Trick::AvoidSync]);
        let plan = Plan::stack(&r, &[Trick::ZeroGradNone, Trick::ChannelsLast, Trick::AvoidSync]);
        let extra: Vec<String> =
            plan.cells[Plan::ablation(&r).cells.len()..].iter().map(|c| c.key.tricks.label()).collect();
        assert_eq!(extra, ["zero-grad-none+channels-last", "avoid-sync+zero-grad-none+channels-last"]);
    }

    #[test]
    fn schedule_alternates_direction_and_skips_inapplicable_cells() {
        let plan = Plan::ablation(&request(vec![Trick::ChannelsLast, Trick::Amp]));
        // cells: 0 baseline train, 1 channels-last, 2 amp (n/a on CPU), 3 tta
        assert_eq!(plan.schedule(2), [(0, 0), (1, 0), (1, 1), (0, 1), (3, 0)]);
    }
}
