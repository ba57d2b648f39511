//! Sharded sweeps end to end with a deterministic mock executor: every shard run and merged gives
//! the unsharded run's cells, comparisons and summaries; merge refuses what does not belong
//! together and names what is missing.

#[allow(dead_code)]
mod common;

use std::path::Path;
use std::time::Duration;

use trickbench::analysis::refresh_derived;
use trickbench::bench::cell::CellJob;
use trickbench::bench::plan::{Plan, PlanRequest};
use trickbench::bench::profile::ProfileName;
use trickbench::bench::runner::{self, CellExecutor, Execution, RunSpec, Silent};
use trickbench::bench::shard::{shard_record, Shard};
use trickbench::results::merge::{merge, MergeError, ShardResults};
use trickbench::results::schema::*;
use trickbench::results::store;
use trickbench::tricks::Trick;
use trickbench::vocabulary::QualityMetric;
use trickbench::workloads::WorkloadId;

use common::cells::measurement;
use common::dirs::{checkout, temp_dir};
use common::plan::cpu_request;
use common::run::{protocol, run_spec, RunInfoBuilder};

/// Measurements that depend only on the cell and the round, never on the order cells run in:
/// channels-last 1.5× faster, one-cycle reaching the target in 60% of the time, seeds differing.
#[derive(Default)]
struct Mock {
    calls: Vec<(String, usize)>,
}

impl CellExecutor for Mock {
    fn execute(&mut self, job: &CellJob, _timeout: Duration) -> Execution {
        self.calls.push((job.key.id().to_string(), job.round));
        let factor = if job.key.tricks.has(Trick::ChannelsLast) { 1.5 } else { 1.0 };
        let round = job.round as f64;
        let time_to_accuracy = job.key.kind.runs_once().then(|| {
            let seconds = if job.key.tricks.has(Trick::OneCycle) { 30.0 } else { 50.0 } + job.key.seed as f64;
            TimeToAccuracy {
                metric: QualityMetric::TestAccuracy,
                target: 0.6,
                budget_s: 240.0,
                time_to_target_s: Some(seconds),
                wall_time_to_target_s: Some(seconds + 5.0),
                epochs_to_target: Some(seconds / 30.0),
                best_metric: 0.61,
                curve: vec![CurvePoint {
                    step: 100,
                    epoch: seconds / 30.0,
                    train_s: seconds,
                    wall_s: seconds + 5.0,
                    metric: 0.61,
                    train_loss: Some(1.2),
                }],
                compile_s: None,
            }
        });
        let windows = [1.0, 0.98, 1.02, 1.01].iter().map(|j| 100.0 * factor * j * (1.0 + round / 100.0));
        Execution::Measured(vec![Ok(ProcessMeasurement {
            time_to_accuracy,
            ..measurement(job.round, windows.collect())
        })])
    }
}

const WORKLOADS: [WorkloadId; 2] = [WorkloadId::Resnet8, WorkloadId::GptMini];

fn request(tricks: Vec<Trick>) -> PlanRequest {
    PlanRequest {
        time_to_accuracy_batch_size: Some(16),
        time_to_accuracy_seeds: 2,
        ..cpu_request(ProfileName::Smoke, &WORKLOADS, &tricks)
    }
}

fn tricks() -> Vec<Trick> {
    vec![
        Trick::ChannelsLast,
        Trick::ZeroGradNone,
        Trick::NoGradEval,
        Trick::OneCycle,
        Trick::DebugOff,
        Trick::Amp,
    ]
}

/// The spec of the sweep with `tricks`, as shard `shard` when given.
fn spec(out_dir: &Path, tricks: Vec<Trick>, shard: Option<Shard>) -> RunSpec {
    let plan = Plan::ablation(&request(tricks));
    let mut info = RunInfoBuilder::new("sweep")
        .with_protocol(Protocol { rounds: 3, time_to_accuracy_seeds: 2, ..protocol() })
        .build();
    info.shard = shard.map(|s| shard_record(s, &info, &WORKLOADS, &plan).unwrap());
    run_spec(info, plan, out_dir)
}

/// Runs every shard of `count` under `dir/shard-I`, returning the shards and the processes run.
fn run_shards(dir: &Path, count: usize) -> (Vec<ShardResults>, Vec<(String, usize)>) {
    let mut calls = Vec::new();
    let shards = (0..count)
        .map(|index| {
            let out = dir.join(format!("shard-{index}"));
            let mut mock = Mock::default();
            let results =
                runner::run(&spec(&out, tricks(), Some(Shard { index, count })), &mut mock, &mut Silent)
                    .unwrap();
            calls.extend(mock.calls);
            let path = out.join("results.json");
            assert_eq!(store::load(&path).unwrap(), results);
            ShardResults { path, results }
        })
        .collect();
    (shards, calls)
}

fn sorted<T: Ord>(mut v: Vec<T>) -> Vec<T> {
    v.sort();
    v
}

#[test]
fn all_shards_merged_equal_the_unsharded_run() {
    let dir = temp_dir();
    let mut mock = Mock::default();
    let whole =
        runner::run(&spec(&dir.path().join("whole"), tricks(), None), &mut mock, &mut Silent).unwrap();
    assert!(
        whole.comparisons.len() >= 4 && whole.time_to_accuracy.len() >= 4,
        "the sweep compares something"
    );
    // 10 units (2 throughput, 8 time-to-accuracy); 11 shards leave one empty.
    for count in [1, 2, 3, 4, 11] {
        let sweep = dir.path().join(format!("of-{count}"));
        let (shards, calls) = run_shards(&sweep, count);
        assert_eq!(sorted(calls), sorted(mock.calls.clone()), "{count} shards run each process once");
        let merged = merge(shards, false).unwrap();
        assert!(merged.warnings.is_empty(), "{:?}", merged.warnings);
        assert!(merged.results.comparisons.is_empty(), "the derived figures are the caller's");
        let mut results = merged.results;
        refresh_derived(&mut results);
        let ids = |r: &Results| r.cells.iter().map(|c| c.id().clone()).collect::<Vec<_>>();
        assert_eq!(ids(&results), ids(&whole), "{count} shards: the cells in the unsharded order");
        assert_eq!(results.cells, whole.cells, "{count} shards");
        assert_eq!(results.comparisons, whole.comparisons, "{count} shards");
        assert_eq!(results.time_to_accuracy, whole.time_to_accuracy, "{count} shards");
        let record = results.run.merged.as_ref().unwrap();
        assert_eq!((record.shard_count, record.shards.clone()), (count, (0..count).collect::<Vec<_>>()));
        assert!(record.missing.is_empty());
        assert_eq!(results.run.shard, None);
    }
}

#[test]
fn a_shard_holds_whole_units_and_its_own_results_are_meaningful() {
    let dir = temp_dir();
    let (shards, _) = run_shards(dir.path(), 3);
    for shard in &shards {
        let record = shard.results.run.shard.as_ref().unwrap();
        // Each trick's throughput cell is compared with its baseline within the shard.
        let trick_cells = shard.results.cells.iter().filter(|c| {
            c.status == CellStatus::Ok
                && !c.key.kind.runs_once()
                && !c.key.tricks.is_baseline()
                && c.key.reference_for.is_none()
        });
        for cell in trick_cells {
            assert!(
                shard.results.comparisons.iter().any(|c| c.cell == cell.id()),
                "{} in shard {}",
                cell.id(),
                record.index
            );
        }
    }
}

fn shard_error(shards: Vec<ShardResults>) -> String {
    merge(shards, false).unwrap_err().to_string()
}

#[test]
fn merge_refuses_shards_that_do_not_belong_together_naming_the_files() {
    let dir = temp_dir();
    let (shards, _) = run_shards(&dir.path().join("sweep"), 3);

    // A shard of another plan (one trick fewer).
    let other_out = dir.path().join("other");
    let other_spec = spec(&other_out, vec![Trick::ChannelsLast], Some(Shard { index: 1, count: 3 }));
    let other = runner::run(&other_spec, &mut Mock::default(), &mut Silent).unwrap();
    let other = ShardResults { path: other_out.join("results.json"), results: other };
    let message = shard_error(vec![shards[0].clone(), other.clone(), shards[2].clone()]);
    assert!(message.contains("are shards of different plans"), "{message}");
    assert!(
        message.contains("sweep/shard-0/results.json") && message.contains("other/results.json"),
        "{message}"
    );
    assert!(message.contains("plan "), "says what differs: {message}");

    // A different protocol is named.
    let mut more_rounds = spec(&other_out, tricks(), None);
    more_rounds.info.protocol.rounds = 5;
    let record =
        shard_record(Shard { index: 1, count: 3 }, &more_rounds.info, &WORKLOADS, &more_rounds.plan).unwrap();
    let mut changed = shards[1].clone();
    changed.results.run.protocol.rounds = 5;
    changed.results.run.shard = Some(record);
    let message = shard_error(vec![shards[0].clone(), changed]);
    assert!(message.contains("protocol"), "{message}");

    // Another schema version.
    let mut old = shards[1].clone();
    old.results.schema_version = 0;
    let message = shard_error(vec![shards[0].clone(), old, shards[2].clone()]);
    assert!(message.contains("schema version 0") && message.contains("shard-0/results.json"), "{message}");

    // Another shard count.
    let (of_two, _) = run_shards(&dir.path().join("two"), 2);
    let message = shard_error(vec![shards[0].clone(), of_two[1].clone()]);
    assert!(message.contains("is shard 1/2") && message.contains("shard counts differ"), "{message}");

    // The same shard twice.
    let mut copy = shards[2].clone();
    copy.path = dir.path().join("copy/results.json");
    let message = shard_error(vec![shards[0].clone(), shards[1].clone(), shards[2].clone(), copy]);
    assert!(message.contains("are both shard 2/3") && message.contains("copy/results.json"), "{message}");

    // A cell in two shards.
    let mut conflicting = shards[1].clone();
    conflicting.results.cells.push(shards[0].results.cells[0].clone());
    let message = shard_error(vec![shards[0].clone(), conflicting, shards[2].clone()]);
    let id = &shards[0].results.cells[0].id();
    assert!(message.contains(&format!("cell {id} is in both")), "{message}");
    assert!(
        message.contains("shard-0/results.json") && message.contains("shard-1/results.json"),
        "{message}"
    );

    // A whole run is not a shard.
    let whole_out = dir.path().join("whole");
    let whole = runner::run(&spec(&whole_out, tricks(), None), &mut Mock::default(), &mut Silent).unwrap();
    let message = shard_error(vec![
        shards[0].clone(),
        ShardResults { path: whole_out.join("results.json"), results: whole },
    ]);
    assert!(message.contains("whole/results.json: not a shard"), "{message}");
    assert!(matches!(merge(vec![], false), Err(MergeError::NoFiles)));
}

#[test]
fn missing_and_unfinished_shards_are_refused_with_their_cells_or_merged_with_warnings() {
    let dir = temp_dir();
    let (shards, _) = run_shards(dir.path(), 3);
    let record = shards[0].results.run.shard.clone().unwrap();
    let mut unfinished = shards[2].clone();
    unfinished.results.run.finished_at = None;
    let dropped = unfinished.results.cells.iter().position(|c| c.status == CellStatus::Ok).unwrap();
    let dropped_id = unfinished.results.cells.remove(dropped).id();
    let partial = vec![shards[0].clone(), unfinished];

    let message = shard_error(partial.clone());
    assert!(message.contains("the sweep is incomplete"), "{message}");
    let missing_line = message.lines().find(|l| l.contains("shard 1/3 is missing")).expect(&message);
    for unit in record.units_of(1) {
        assert!(missing_line.contains(unit), "{unit}: {missing_line}");
    }
    let unfinished_line = message.lines().find(|l| l.contains("shard 2/3")).expect(&message);
    assert!(unfinished_line.contains("shard-2/results.json) did not finish"), "{unfinished_line}");
    assert!(unfinished_line.contains(&format!("not measured: {dropped_id}")), "{unfinished_line}");

    let merged = merge(partial, true).unwrap();
    assert_eq!(merged.warnings.len(), 2, "{:?}", merged.warnings);
    let record = merged.results.run.merged.unwrap();
    assert_eq!(record.shards, [0, 2]);
    assert_eq!(record.missing, merged.warnings);
    assert_eq!(merged.results.run.finished_at, None);
    assert!(!merged.results.cells.iter().any(|c| c.id() == dropped_id));
}

#[test]
fn a_shard_resumes_only_as_the_same_shard() {
    let dir = temp_dir();
    runner::run(
        &spec(dir.path(), tricks(), Some(Shard { index: 0, count: 2 })),
        &mut Mock::default(),
        &mut Silent,
    )
    .unwrap();
    let mut again = spec(dir.path(), tricks(), Some(Shard { index: 0, count: 2 }));
    again.resume = true;
    let mut mock = Mock::default();
    runner::run(&again, &mut mock, &mut Silent).unwrap();
    assert!(mock.calls.is_empty(), "everything was measured");
    let mut other = spec(dir.path(), tricks(), Some(Shard { index: 1, count: 2 }));
    other.resume = true;
    let message = runner::run(&other, &mut Mock::default(), &mut Silent).unwrap_err().to_string();
    assert!(message.contains("shard differ"), "{message}");
}

#[test]
fn results_written_before_sharding_still_load_and_are_not_shards() {
    let path = checkout("reports/cpu-xeon-2core-20261130-quick/results.json");
    let results = store::load(&path).unwrap();
    assert_eq!(results.schema_version, SCHEMA_VERSION);
    assert_eq!((&results.run.shard, &results.run.merged), (&None, &None));
    let message = shard_error(vec![ShardResults { path: path.clone(), results }]);
    assert!(message.contains("cpu-xeon-2core-20261130-quick/results.json: not a shard"), "{message}");
}
