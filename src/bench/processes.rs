//! Which slots of a schedule share a cell process: the multi-arm design.
//!
//! In each round, the cells paired with the same reference ([`Plan::paired_reference`]) whose
//! tricks can be arms among others ([`Trick::joins_arms`]) run in one process, in the order the
//! schedule drew them; the reference cell itself, where it has no reference of its own (the
//! baseline, `debug-off`'s reference), is measured in that process too, its windows those its
//! arms were paired with (so a reference with one arm shares that arm's process). The A/A control
//! is one of the baseline's arms like any trick, so the paired floor comes from inside these
//! processes. Every other slot keeps a process of its own: a round's warm-up, a cell of the
//! process design, a trick that keeps its own pairs ([`crate::tricks::Pairing::OwnPairs`]), the
//! baseline and the control measured alone ([`crate::results::schema::CellKey::alone`]). A traced
//! slot stays among its arms: every member of a process traces its own steps after the windows.

use crate::bench::design::Design;
use crate::bench::plan::{Plan, Slot};
use crate::results::schema::CellKey;
use crate::tricks::Trick;

/// The slots one cell process measures.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProcessSlots {
    /// The slots of the cells the process measures as arms, in the order it builds them (one
    /// slot for a process of one cell, or of one cell beside a reference that is not measured).
    pub arms: Vec<Slot>,
    /// The slot of the arms' reference cell, measured in the same process (`None`: the
    /// reference, if any, is built but its measurement is not kept).
    pub reference: Option<Slot>,
}

impl ProcessSlots {
    /// A process of `slot` alone.
    fn one(slot: Slot) -> Self {
        ProcessSlots { arms: vec![slot], reference: None }
    }

    /// Every slot the process measures: the arms, then the reference's.
    pub fn slots(&self) -> impl Iterator<Item = &Slot> {
        self.arms.iter().chain(&self.reference)
    }

    /// The round's warm-up process, when this is one.
    pub fn is_warmup(&self) -> bool {
        self.arms.len() == 1 && self.reference.is_none() && self.arms[0].is_warmup()
    }
}

/// The processes of `schedule` under `design` when `multi_arm` (else one process per slot), in
/// the order the schedule runs them: a multi-arm process takes the place of its first slot.
pub fn group(plan: &Plan, schedule: &[Slot], design: Design, multi_arm: bool) -> Vec<ProcessSlots> {
    if !multi_arm {
        return schedule.iter().copied().map(ProcessSlots::one).collect();
    }
    let arm_reference = |slot: &Slot| -> Option<CellKey> {
        if slot.is_warmup() {
            return None;
        }
        let key = &plan.cells[slot.cell].key;
        let joins = key.tricks.iter().chain(key.reference_for).all(Trick::joins_arms);
        plan.paired_reference(slot.cell, design).filter(|_| joins)
    };
    let mut processes: Vec<(Option<(usize, CellKey)>, ProcessSlots)> = Vec::new();
    for slot in schedule {
        match arm_reference(slot) {
            Some(reference) => {
                let group = Some((slot.round, reference));
                match processes.iter_mut().find(|(g, _)| *g == group) {
                    Some((_, process)) => process.arms.push(*slot),
                    None => processes.push((group, ProcessSlots::one(*slot))),
                }
            }
            None => processes.push((None, ProcessSlots::one(*slot))),
        }
    }
    host_references(plan, design, processes.into_iter().map(|(g, p)| (g.map(|(_, r)| r), p)).collect())
}

/// `processes` with each reference cell that has no reference of its own (in a process of that
/// cell only, not a warm-up) moved into the process of its arms in its round.
fn host_references(
    plan: &Plan,
    design: Design,
    mut processes: Vec<(Option<CellKey>, ProcessSlots)>,
) -> Vec<ProcessSlots> {
    let mut hosted = Vec::new();
    for i in 0..processes.len() {
        let (group, process) = &processes[i];
        let Some(reference) = group else { continue };
        let round = process.arms[0].round;
        let host = processes.iter().position(|(g, p)| {
            let slot = &p.arms[0];
            g.is_none()
                && p.arms.len() == 1
                && !slot.is_warmup()
                && slot.round == round
                && plan.cells[slot.cell].key == *reference
                && plan.paired_reference(slot.cell, design).is_none()
        });
        if let Some(h) = host {
            processes[i].1.reference = Some(processes[h].1.arms[0]);
            hosted.push(h);
        }
    }
    processes.into_iter().enumerate().filter(|(i, _)| !hosted.contains(i)).map(|(_, (_, p))| p).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bench::plan::PlanRequest;
    use crate::bench::profile::ProfileName;
    use crate::device::DeviceSpec;
    use crate::hardware::Hardware;
    use crate::workloads::{Family, WorkloadId};

    /// ResNet-8's quick-profile ablation of `tricks` on this CPU, without time-to-accuracy cells.
    fn plan(tricks: Vec<Trick>) -> Plan {
        let quick = ProfileName::Quick.settings(Family::CifarResnet);
        let request = PlanRequest {
            time_to_accuracy_batch_size: None,
            ..PlanRequest::new(vec![WorkloadId::Resnet8], tricks, Hardware::probe(DeviceSpec::Cpu), &quick)
        };
        Plan::ablation(&request)
    }

    /// The ids of the cells of each measured process of round 0 of `plan` grouped with
    /// `multi_arm`, each process's arms then (after a `|`) its measured reference.
    fn round_zero(plan: &Plan, multi_arm: bool) -> Vec<String> {
        let schedule = plan.schedule(2, 0);
        group(plan, &schedule, Design::Ablation, multi_arm)
            .into_iter()
            .filter(|p| !p.is_warmup() && p.arms[0].round == 0)
            .map(|p| {
                let id = |s: &Slot| plan.cells[s.cell].key.id().to_string();
                let mut arms: Vec<String> = p.arms.iter().map(id).collect();
                arms.sort();
                let reference = p.reference.as_ref().map(id).map(|r| format!(" | {r}")).unwrap_or_default();
                format!("{}{reference}", arms.join(" "))
            })
            .collect()
    }

    #[test]
    fn arms_of_one_reference_share_a_process_which_measures_the_reference_too() {
        let plan =
            plan(vec![Trick::ChannelsLast, Trick::ZeroGradNone, Trick::Checkpointing, Trick::DebugOff]);
        let mut processes = round_zero(&plan, true);
        processes.sort();
        assert_eq!(
            processes,
            [
                "resnet8/aa-control/b128/s0/train resnet8/channels-last/b128/s0/train \
                 resnet8/zero-grad-none/b128/s0/train | resnet8/baseline/b128/s0/train",
                "resnet8/checkpointing/b128/s0/train",
                "resnet8/debug-off/b128/s0/train | resnet8/baseline+debug-apis-on/b128/s0/train",
            ]
        );
        let schedule = plan.schedule(2, 0);
        let grouped = group(&plan, &schedule, Design::Ablation, true);
        let slots: usize = grouped.iter().map(|p| p.slots().count()).sum();
        assert_eq!(slots, schedule.len(), "every slot runs once");
        assert!(grouped.iter().all(|p| p.slots().all(|s| s.round == p.arms[0].round)), "one round a process");
    }

    #[test]
    fn the_control_joins_the_multi_arm_process_beside_a_cell_of_the_process_design_measured_alone() {
        let plan = plan(vec![Trick::ChannelsLast, Trick::ZeroGradNone, Trick::LoaderWorkers]);
        let mut processes = round_zero(&plan, true);
        processes.sort();
        assert_eq!(
            processes,
            [
                "resnet8/aa-control-alone/b128/s0/train",
                "resnet8/aa-control/b128/s0/train resnet8/channels-last/b128/s0/train \
                 resnet8/zero-grad-none/b128/s0/train | resnet8/baseline/b128/s0/train",
                "resnet8/baseline-alone/b128/s0/train",
                "resnet8/loader-workers/b128/s0/train",
            ]
        );
        let schedule = plan.schedule(2, 0);
        let grouped = group(&plan, &schedule, Design::Ablation, true);
        let alone = |p: &&ProcessSlots| p.slots().any(|s| plan.cells[s.cell].key.alone);
        assert!(grouped.iter().filter(alone).all(|p| p.slots().count() == 1), "one model a process");
        assert_eq!(grouped.iter().filter(alone).count(), 4, "two cells alone, two rounds");
    }

    #[test]
    fn without_multi_arm_processes_each_slot_has_its_own() {
        let plan = plan(vec![Trick::ChannelsLast, Trick::ZeroGradNone]);
        let one_each = round_zero(&plan, false);
        assert_eq!(one_each.len(), 4, "baseline, A/A control and two tricks: {one_each:?}");
    }
}
