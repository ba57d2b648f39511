//! Sharded sweeps: `--shard i/n` splits a plan into `n` disjoint parts that separate processes
//! (or machines, e.g. a Slurm job array) run, and whose results `trickbench merge` joins.
//!
//! The unit of sharding is not the cell but the **shard unit**, the smallest set of cells that must
//! run together on one machine:
//!
//! - every throughput cell of a workload, with its memory probes and the cells whose batch size
//!   a probe decides (`max-batch`, every cell of a batch sweep), is one unit: speed-ups are paired
//!   round by round against a reference cell, and rounds interleave the cells (A B A B …) so
//!   that drift hits both sides, which only holds on one machine; the stack design ranks these
//!   cells to plan its second half, and `max-batch` needs its probe's answer;
//! - every other time-to-accuracy cell (one seed of one configuration, a single process whose
//!   result is absolute) is a unit of its own.
//!
//! The units are numbered in plan order, as the plan is known before anything is measured, and
//! unit `k` belongs to shard `k mod n` (round-robin: time-to-accuracy seeds of one configuration
//! land on different shards). The same flags and build give the same units on every machine; a
//! fingerprint of the plan recorded in each shard's results lets `merge` refuse shards of
//! different plans.

use std::fmt;
use std::str::FromStr;

use sha2::{Digest, Sha256};

use crate::bench::design::Design;
use crate::bench::plan::Plan;
use crate::error::Error;
use crate::results::schema::{CellKey, CellKind, RunInfo, ShardCell, ShardRecord};
use crate::tricks::Trick;
use crate::workloads::WorkloadId;

/// One part of a sharded plan: shard `index` of `count` (0-based, `index < count`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Shard {
    /// Which shard, from 0.
    pub index: usize,
    /// How many shards the plan is split into (at least 1).
    pub count: usize,
}

impl fmt::Display for Shard {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.index, self.count)
    }
}

impl FromStr for Shard {
    type Err = Error;

    /// Parses `i/n`, e.g. `0/4` … `3/4`. The message of an error names the value (the command
    /// line adds the flag).
    fn from_str(s: &str) -> Result<Self, Error> {
        let (index, count) = s.split_once('/').ok_or_else(|| {
            Error::Invalid(format!("'{s}' is not I/N, a shard index and a shard count such as 0/4"))
        })?;
        let number = |part: &str, what: &str| {
            part.trim()
                .parse::<usize>()
                .map_err(|_| Error::Invalid(format!("the {what} '{part}' of '{s}' is not a whole number")))
        };
        let (index, count) = (number(index, "shard index")?, number(count, "shard count")?);
        if count == 0 {
            return Err(Error::Invalid(format!("the shard count of '{s}' must be at least 1")));
        }
        if index >= count {
            return Err(Error::Invalid(format!(
                "the shard index {index} is not below the shard count {count}: the shards of {count} \
                 are 0 to {}",
                count - 1
            )));
        }
        Ok(Shard { index, count })
    }
}

/// The shard unit of a cell under `design` (see the module documentation): `WORKLOAD/throughput`
/// for the cells that must share a machine, the cell's id for a self-contained time-to-accuracy cell.
pub fn unit_of(key: &CellKey, design: Design) -> String {
    let probed_batch = design.probes_every_batch() || key.tricks.has(Trick::MaxBatch);
    match key.kind {
        CellKind::TimeToAccuracy if !probed_batch => key.id().to_string(),
        CellKind::TimeToAccuracy | CellKind::Throughput { .. } | CellKind::MemoryProbe => {
            throughput_unit(key.workload)
        }
    }
}

/// The unit of `workload`'s throughput cells and probes.
fn throughput_unit(workload: WorkloadId) -> String {
    format!("{workload}/throughput")
}

/// The shard record of shard `shard` of the plan whose cells are known before anything is measured
/// (`known`: probes and the stack's second half come later, in the throughput units), for a run
/// described by `info` (its design, profile, device, protocol and data enter the fingerprint) on
/// `workloads`.
pub fn shard_record(
    shard: Shard,
    info: &RunInfo,
    workloads: &[WorkloadId],
    known: &Plan,
) -> Result<ShardRecord, Error> {
    let design = info.design;
    let mut units: Vec<String> = Vec::new();
    let mut unit_index = |unit: String| match units.iter().position(|u| *u == unit) {
        Some(i) => i,
        None => {
            units.push(unit);
            units.len() - 1
        }
    };
    let mut cells = Vec::new();
    for &workload in workloads {
        if design.measures_throughput() {
            unit_index(throughput_unit(workload));
        }
        for planned in known.cells.iter().filter(|c| c.key.workload == workload) {
            let unit = unit_index(unit_of(&planned.key, design));
            cells.push(ShardCell {
                id: planned.key.id(),
                unit,
                not_applicable: planned.not_applicable.is_some(),
            });
        }
    }
    let fingerprint = fingerprint(info, &units, &cells)?;
    Ok(ShardRecord { index: shard.index, count: shard.count, fingerprint, units, cells })
}

/// Hex SHA-256 of what must be equal for shards to belong to one sweep: design, profile, device,
/// protocol, the settings of the families, the datasets (not where they were read from, which
/// differs between machines), the units and the known cells.
fn fingerprint(info: &RunInfo, units: &[String], cells: &[ShardCell]) -> Result<String, Error> {
    let datasets: Vec<_> = info
        .datasets()
        .map(|d| (&d.name, d.synthetic, d.train_samples, d.test_samples, &d.sample_unit))
        .collect();
    let canonical = serde_json::json!({
        "design": info.design,
        "profile": info.profile,
        "device": info.device,
        "protocol": info.protocol,
        "settings": info.profile_settings.families,
        "datasets": datasets,
        "units": units,
        "cells": cells,
    });
    let bytes =
        serde_json::to_vec(&canonical).map_err(|e| Error::Invalid(format!("plan fingerprint: {e}")))?;
    Ok(Sha256::digest(&bytes).iter().map(|b| format!("{b:02x}")).collect())
}

impl ShardRecord {
    /// The shard this record describes.
    pub fn shard(&self) -> Shard {
        Shard { index: self.index, count: self.count }
    }

    /// Whether unit number `unit` belongs to shard `index` of this plan.
    pub fn unit_in_shard(&self, unit: usize, index: usize) -> bool {
        unit % self.count == index
    }

    /// Whether the cell `key` of a run under `design` belongs to this shard. Every cell a run can
    /// plan has its unit in [`ShardRecord::units`] (throughput units are listed for every workload
    /// of a design that has them).
    pub fn owns(&self, key: &CellKey, design: Design) -> bool {
        let unit = unit_of(key, design);
        self.units.iter().position(|u| *u == unit).is_some_and(|i| self.unit_in_shard(i, self.index))
    }

    /// The cells of `plan` that belong to this shard, in plan order.
    pub fn part_of(&self, plan: &Plan, design: Design) -> Plan {
        Plan { cells: plan.cells.iter().filter(|c| self.owns(&c.key, design)).cloned().collect() }
    }

    /// The units of shard `index`.
    pub fn units_of(&self, index: usize) -> Vec<&str> {
        self.units
            .iter()
            .enumerate()
            .filter(|&(i, _)| self.unit_in_shard(i, index))
            .map(|(_, u)| u.as_str())
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bench::plan::PlanRequest;
    use crate::bench::profile::ProfileName;
    use crate::device::DeviceSpec;
    use crate::engine::Engine;
    use crate::hardware::Hardware;
    use crate::measure::host_allocator::HostAllocator;
    use crate::results::schema::{ArmsPerProcess, DataInfo, MeasurementDesign, Phase, Protocol};
    use crate::tricks::TrickSet;
    use crate::workloads::Family;

    #[test]
    fn shards_parse_and_bad_ones_name_the_value() {
        assert_eq!("0/1".parse::<Shard>().unwrap(), Shard { index: 0, count: 1 });
        assert_eq!("3/4".parse::<Shard>().unwrap(), Shard { index: 3, count: 4 });
        assert_eq!(Shard { index: 2, count: 8 }.to_string(), "2/8");
        for (bad, why) in [
            ("3/2", "the shard index 3 is not below the shard count 2: the shards of 2 are 0 to 1"),
            ("2/2", "index 2 is not below"),
            ("0/0", "the shard count of '0/0' must be at least 1"),
            ("abc", "'abc' is not I/N"),
            ("a/2", "the shard index 'a' of 'a/2' is not a whole number"),
            ("1/-2", "the shard count '-2' of '1/-2' is not a whole number"),
            ("1/", "the shard count '' of '1/'"),
        ] {
            let message = bad.parse::<Shard>().unwrap_err().to_string();
            assert!(message.contains(why), "{bad}: {message}");
        }
    }

    fn request(workloads: Vec<WorkloadId>, tricks: Vec<Trick>, seeds: usize) -> PlanRequest {
        let quick = ProfileName::Quick.settings(Family::CifarResnet);
        let request = PlanRequest::new(workloads, tricks, Hardware::probe(DeviceSpec::Cpu), &quick);
        PlanRequest { time_to_accuracy_seeds: seeds, ..request }
    }

    fn info(design: Design) -> RunInfo {
        RunInfo {
            id: "sweep".into(),
            started_at: "2026-11-30T00:00:00Z".into(),
            finished_at: None,
            trickbench_version: "test".into(),
            git_commit: None,
            command: vec![],
            profile: ProfileName::Quick,
            profile_settings: Default::default(),
            design,
            device: DeviceSpec::Cpu,
            data: DataInfo {
                name: "cifar10".into(),
                path: "/scratch/node-a/cifar10".into(),
                synthetic: false,
                train_samples: 50_000,
                test_samples: 1000,
                sample_unit: "images".into(),
            },
            more_data: vec![],
            protocol: Protocol {
                warmup_steps: 2,
                windows_per_process: 5,
                steps_per_window: 3,
                rounds: 3,
                bootstrap_resamples: 2000,
                confidence_level: 0.95,
                cell_timeout_s: 600.0,
                time_to_accuracy_seeds: 3,
                memory_budget_bytes: None,
                target_ci_half_width: Some(0.03),
                max_windows_per_process: Some(10),
                order_seed: Some(0),
                pairing: MeasurementDesign::Processes,
                arms_per_process: ArmsPerProcess::One,
                host_allocator: HostAllocator::Tuned,
            },
            shard: None,
            merged: None,
            model: None,
        }
    }

    #[test]
    fn every_cell_is_in_exactly_one_shard_and_paired_cells_share_it() {
        let workloads = vec![WorkloadId::Resnet8, WorkloadId::GptMini];
        let tricks =
            vec![Trick::ChannelsLast, Trick::DebugOff, Trick::NoGradEval, Trick::OneCycle, Trick::Adamw];
        let plan = Plan::ablation(&request(workloads.clone(), tricks, 3));
        for count in 1..=7 {
            let records: Vec<ShardRecord> = (0..count)
                .map(|index| {
                    shard_record(Shard { index, count }, &info(Design::Ablation), &workloads, &plan).unwrap()
                })
                .collect();
            for cell in &plan.cells {
                let owners: Vec<usize> =
                    records.iter().filter(|r| r.owns(&cell.key, Design::Ablation)).map(|r| r.index).collect();
                assert_eq!(owners.len(), 1, "{} with {count} shards: owners {owners:?}", cell.key.id());
                if !cell.key.kind.runs_once() {
                    // Every throughput cell runs with its workload's baseline.
                    let baseline = plan
                        .cells
                        .iter()
                        .find(|c| c.key.workload == cell.key.workload && c.key.tricks.is_baseline())
                        .unwrap();
                    assert!(records[owners[0]].owns(&baseline.key, Design::Ablation));
                }
            }
            // Round-robin over the units: shard sizes differ by at most one unit.
            let sizes: Vec<usize> = (0..count).map(|i| records[0].units_of(i).len()).collect();
            assert!(sizes.iter().max().unwrap() - sizes.iter().min().unwrap() <= 1, "{sizes:?}");
        }
    }

    #[test]
    fn a_two_engine_plan_keeps_each_cell_in_one_shard_with_both_engines_baselines() {
        let workloads = vec![WorkloadId::Resnet8, WorkloadId::GptMini];
        let tricks = vec![Trick::ChannelsLast, Trick::DebugOff, Trick::ZeroCopy, Trick::Checkpointing];
        let two_engines = PlanRequest {
            engines: vec![Engine::Libtorch, Engine::Pytorch],
            ..request(workloads.clone(), tricks, 1)
        };
        let plan = Plan::ablation(&two_engines);
        assert!(plan.cells.iter().any(|c| c.key.engine == Engine::Pytorch));
        for count in 1..=5 {
            let records: Vec<ShardRecord> = (0..count)
                .map(|index| {
                    shard_record(Shard { index, count }, &info(Design::Ablation), &workloads, &plan).unwrap()
                })
                .collect();
            for cell in &plan.cells {
                let owners: Vec<&ShardRecord> =
                    records.iter().filter(|r| r.owns(&cell.key, Design::Ablation)).collect();
                assert_eq!(owners.len(), 1, "{} with {count} shards", cell.key.id());
                for engine in [Engine::Libtorch, Engine::Pytorch] {
                    let baseline = plan
                        .cells
                        .iter()
                        .find(|c| {
                            c.key.workload == cell.key.workload
                                && c.key.engine == engine
                                && c.key.tricks.is_baseline()
                                && c.key.reference_for.is_none()
                                && !c.key.aa_control
                        })
                        .unwrap();
                    assert!(owners[0].owns(&baseline.key, Design::Ablation), "{}", cell.key.id());
                }
            }
        }
    }

    #[test]
    fn the_split_and_fingerprint_are_stable_and_the_fingerprint_sees_plan_changes() {
        let workloads = vec![WorkloadId::Resnet8];
        let plan = |tricks| Plan::ablation(&request(workloads.clone(), tricks, 2));
        let a = plan(vec![Trick::ChannelsLast, Trick::OneCycle]);
        let record = |plan: &Plan, info: &RunInfo, index| {
            shard_record(Shard { index, count: 3 }, info, &workloads, plan).unwrap()
        };
        let first = record(&a, &info(Design::Ablation), 1);
        assert_eq!(first, record(&a.clone(), &info(Design::Ablation), 1), "same plan, same record");
        assert_eq!(
            first.units,
            [
                "resnet8/throughput",
                "resnet8/baseline/b64/s0/tta",
                "resnet8/baseline/b64/s1/tta",
                "resnet8/one-cycle/b64/s0/tta",
                "resnet8/one-cycle/b64/s1/tta"
            ]
        );
        assert_eq!(first.units_of(1), ["resnet8/baseline/b64/s0/tta", "resnet8/one-cycle/b64/s1/tta"]);
        assert_eq!(first.fingerprint.len(), 64);
        // Where the data was read from does not matter; the plan, protocol and data do.
        let elsewhere = RunInfo {
            data: DataInfo { path: "/scratch/node-b/cifar10".into(), ..info(Design::Ablation).data },
            ..info(Design::Ablation)
        };
        assert_eq!(record(&a, &elsewhere, 1).fingerprint, first.fingerprint);
        let other_plan = plan(vec![Trick::ChannelsLast]);
        let mut more_rounds = info(Design::Ablation);
        more_rounds.protocol.rounds = 5;
        let mut synthetic = info(Design::Ablation);
        synthetic.data.synthetic = true;
        for (what, changed) in [
            ("tricks", record(&other_plan, &info(Design::Ablation), 1)),
            ("protocol", record(&a, &more_rounds, 1)),
            ("data", record(&a, &synthetic, 1)),
        ] {
            assert_ne!(changed.fingerprint, first.fingerprint, "{what}");
        }
    }

    #[test]
    fn probed_and_stacked_cells_belong_to_their_workloads_throughput_unit() {
        let key = |tricks: TrickSet, batch_size, kind| CellKey {
            workload: WorkloadId::Resnet8,
            tricks,
            batch_size,
            seed: 1,
            kind,
            reference_for: None,
            aa_control: false,
            alone: false,
            engine: Engine::Libtorch,
        };
        let train = CellKind::Throughput { phase: Phase::Train };
        let unit = "resnet8/throughput";
        assert_eq!(unit_of(&key(TrickSet::baseline(), 256, CellKind::MemoryProbe), Design::Ablation), unit);
        assert_eq!(
            unit_of(&key(TrickSet::only(Trick::MaxBatch), 2048, CellKind::TimeToAccuracy), Design::Ablation),
            unit
        );
        assert_eq!(
            unit_of(&key(TrickSet::baseline(), 512, CellKind::TimeToAccuracy), Design::BatchSweep),
            unit
        );
        let stacked: TrickSet = [Trick::ChannelsLast, Trick::AvoidSync].into_iter().collect();
        assert_eq!(unit_of(&key(stacked, 128, train), Design::Stack), unit);
        let tta = key(TrickSet::only(Trick::OneCycle), 64, CellKind::TimeToAccuracy);
        assert_eq!(unit_of(&tta, Design::Ablation), tta.id().to_string());
        // A batch sweep is planned after its probe: its shard is the one with the throughput unit.
        let sweep = shard_record(
            Shard { index: 0, count: 2 },
            &info(Design::BatchSweep),
            &[WorkloadId::Resnet8],
            &Plan { cells: vec![] },
        )
        .unwrap();
        assert_eq!(sweep.units, [unit]);
        assert!(sweep.owns(&key(TrickSet::baseline(), 4096, train), Design::BatchSweep));
    }
}
