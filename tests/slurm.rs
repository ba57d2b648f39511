//! The cluster path on a real one-node Slurm started by the test ([`common::slurm`]):
//! `scripts/slurm-sweep.sbatch` submitted with the commands docs/cluster.md shows, a job array of
//! three shards of a smoke sweep on synthetic data and the dependent merge; one task cancelled
//! mid-shard through Slurm, as a time limit or preemption stops it; the merge listing that shard;
//! the task resubmitted alone, resuming its shard; and the second merge complete, with the
//! unsharded run's cells, statuses and comparisons, and its report rendered.
//!
//! The commands run as written, with bash, in a folder laid out as the checkout they are
//! submitted from (`scripts/`, `target/release/trickbench`, `data/`), so that the jobs' logs stay
//! in the test's folder. Skipped, saying why, where Slurm's daemons are not installed; with `CI`
//! set, that fails the test instead (`scripts/install-test-deps` installs them).

#[allow(dead_code)]
mod common;

use std::path::{Path, PathBuf};
use std::process::Output;
use std::time::Duration;

use trickbench::results::schema::{ProcessMeasurement, Results};
use trickbench::results::store;

use common::cli::{synthetic_cifar, text, trickbench, BINARY, FAULT_VARIABLE};
use common::dirs::{checkout, temp_dir};
use common::slurm::{Cluster, Job, Programs};

/// The submission of the sweep, as docs/cluster.md shows it.
const SUBMIT: &str =
    "jid=$(sbatch --parsable --array=0-$((SHARDS - 1)) $RESOURCES scripts/slurm-sweep.sbatch)";

/// The dependent merge, as docs/cluster.md shows it (after the submission and after a rerun).
const MERGE: &str = "sbatch --dependency=afterany:\"$jid\" --job-name=trickbench-merge --time=00:15:00 \\
    --wrap \"target/release/trickbench merge $SWEEP_DIR/shard-* --out $SWEEP_DIR/merged\"";

/// The rerun of the shards a merge listed, as docs/cluster.md shows it for shards 3 and 5.
const RERUN: &str = "jid=$(sbatch --parsable --array=3,5 $RESOURCES scripts/slurm-sweep.sbatch)";

/// The sweep: ResNet-8's throughput cells (baseline, A/A control, channels-last) and two
/// time-to-accuracy cells (baseline, one-cycle), three units, one per shard; each paired cell in a
/// process of its own pair (`--single-arm`), so that shard 0 measures processes before the held
/// one.
const RUN_ARGS: &str =
    "--profile smoke --device cpu --workload resnet8 --tricks channels-last,one-cycle --data data --single-arm";

/// Each task's resources on a node without GPUs; the limit only stops a broken test's jobs.
const RESOURCES: &str = "--cpus-per-task=1 --time=00:10:00";

/// Shard 0's third measured process (after channels-last's and the baseline's first rounds),
/// held by an injected hang until the test cancels the task.
const HELD: &str = "resnet8/aa-control/b32/s0/train";

/// How long a broken test may wait for the jobs before it fails instead of hanging.
const PATIENCE: Duration = Duration::from_secs(300);

/// The Slurm programs, or `None` after saying why the test is skipped; with `CI` set, a missing
/// program fails the test.
fn slurm_or_skip() -> Option<Programs> {
    match Programs::find() {
        Ok(programs) => Some(programs),
        Err(why) => {
            assert!(std::env::var_os("CI").is_none(), "{why}, and CI is set: run scripts/install-test-deps");
            eprintln!("skipping the Slurm test: {why}");
            None
        }
    }
}

/// `dir/checkout`: the checkout's scripts and the binary under test linked where the documented
/// commands expect them, and a synthetic CIFAR-10 in `data/`.
fn checkout_like(dir: &Path) -> PathBuf {
    let root = dir.join("checkout");
    std::fs::create_dir_all(root.join("target/release")).unwrap();
    std::os::unix::fs::symlink(checkout("scripts"), root.join("scripts")).unwrap();
    std::os::unix::fs::symlink(BINARY, root.join("target/release/trickbench")).unwrap();
    synthetic_cifar(&root, "data", 2000, 500);
    root
}

/// Runs `commands` with bash in `checkout`, the sweep's environment set as the docs export it
/// and `fault` injected (or none).
fn submit(
    cluster: &Cluster,
    checkout: &Path,
    sweep: &Path,
    commands: &[&str],
    fault: Option<&str>,
) -> Output {
    let mut bash = cluster.client("bash");
    bash.current_dir(checkout)
        .args(["-euc", &commands.join("\n")])
        .env("SWEEP_DIR", sweep)
        .env("SHARDS", "3")
        .env("RUN_ARGS", RUN_ARGS)
        .env("RESOURCES", RESOURCES)
        .env_remove(FAULT_VARIABLE);
    if let Some(fault) = fault {
        bash.env(FAULT_VARIABLE, fault);
    }
    let out = bash.output().expect("bash runs");
    assert!(out.status.success(), "{commands:?}: {}\n{}", text(&out.stderr), cluster.logs());
    out
}

/// The jobs of `cluster` that are not in `before`, in the order they were submitted.
fn new_jobs(cluster: &Cluster, before: &[Job]) -> Vec<Job> {
    let mut jobs: Vec<Job> =
        cluster.jobs().into_iter().filter(|j| !before.iter().any(|b| b.id == j.id)).collect();
    jobs.sort_by_key(|j| j.id);
    jobs
}

/// The job named `name` of array task `task` (or of no array) among `jobs`.
fn job<'a>(jobs: &'a [Job], name: &str, task: Option<&str>) -> &'a Job {
    jobs.iter()
        .find(|j| j.name == name && j.array_task.as_deref() == task)
        .unwrap_or_else(|| panic!("no job {name} of task {task:?} in {jobs:#?}"))
}

/// Asserts `job` ended in `state` with `exit_code`, showing its output if not.
fn assert_ended(job: &Job, state: &str, exit_code: &str) {
    assert_eq!(
        (job.state.as_str(), job.exit_code.as_str()),
        (state, exit_code),
        "{job:?}:\n{}",
        job.output()
    );
}

#[test]
fn docs_show_the_commands_the_slurm_test_submits() {
    let docs = std::fs::read_to_string(checkout("docs/cluster.md")).unwrap();
    for command in [SUBMIT, MERGE, RERUN] {
        assert!(docs.contains(command), "docs/cluster.md does not show:\n{command}");
    }
}

#[test]
fn a_sweep_runs_as_a_job_array_a_cancelled_task_is_resubmitted_and_the_merge_completes() {
    let Some(programs) = slurm_or_skip() else { return };
    let dir = temp_dir();
    let checkout = checkout_like(dir.path());
    let run_args: Vec<&str> = RUN_ARGS.split(' ').collect();
    let whole = trickbench(&checkout, &[&["run"], &run_args[..], &["--out", "whole"]].concat());
    assert!(whole.status.success(), "the unsharded run: {}", text(&whole.stderr));
    let cluster = Cluster::start(&programs, dir.path());
    let sweep = dir.path().join("sweep");

    a_job_outside_an_array_is_refused(&cluster, &checkout, &sweep);
    let kept = first_attempt(&cluster, &checkout, &sweep);
    let before = cluster.jobs();
    submit(&cluster, &checkout, &sweep, &[&RERUN.replace("--array=3,5", "--array=0"), MERGE], None);
    cluster.wait_for_jobs(PATIENCE);
    let jobs = new_jobs(&cluster, &before);
    let rerun = job(&jobs, "trickbench-sweep", Some("0"));
    assert_ended(rerun, "COMPLETED", "0:0");
    assert_eq!(rerun.stdout, checkout.join(format!("trickbench-sweep-{}_0.out", rerun.array_id)));
    assert_ended(job(&jobs, "trickbench-merge", None), "COMPLETED", "0:0");

    let merged = store::load(&sweep.join("merged/results.json")).unwrap();
    let record = merged.run.merged.as_ref().expect("a merged run");
    assert_eq!((record.shards.as_slice(), record.missing.len()), ([0, 1, 2].as_slice(), 0));
    assert!(merged.run.finished_at.is_some());
    assert_same_plan(&merged, &store::load(&checkout.join("whole/results.json")).unwrap());
    for (id, process) in &kept {
        let cell = merged.cells.iter().find(|c| c.id() == id.as_str()).unwrap();
        assert!(
            cell.processes.contains(process),
            "{id}: the process measured before the cancel was measured again"
        );
    }
    let report = std::fs::read_to_string(sweep.join("merged/index.html")).unwrap();
    assert!(report.contains(HELD), "the merged report shows every cell");
}

/// The script submitted without `--array` fails at once, naming itself (not Slurm's copy of it)
/// and the array to submit.
fn a_job_outside_an_array_is_refused(cluster: &Cluster, checkout: &Path, sweep: &Path) {
    submit(cluster, checkout, sweep, &["sbatch $RESOURCES scripts/slurm-sweep.sbatch"], None);
    cluster.wait_for_jobs(PATIENCE);
    let jobs = cluster.jobs();
    let plain = job(&jobs, "trickbench-sweep", None);
    assert_ended(plain, "FAILED", "1:0");
    let log = format!("trickbench-sweep-{}_4294967294.out", plain.id);
    assert_eq!(plain.stdout, checkout.join(log), "Slurm's name for the log of a job outside an array");
    let refusal = concat!(
        "scripts/slurm-sweep.sbatch: not an array task: ",
        "submit with sbatch --array=0-2 scripts/slurm-sweep.sbatch\n"
    );
    assert_eq!(plain.output(), refusal);
}

/// Submits the sweep and its merge with shard 0 held on [`HELD`], cancels that task once it is
/// held, waits for every job, and checks that the merge refused the sweep naming the shard and
/// the cell. Returns the processes shard 0 had measured and saved before it was cancelled.
fn first_attempt(cluster: &Cluster, checkout: &Path, sweep: &Path) -> Vec<(String, ProcessMeasurement)> {
    let before = cluster.jobs();
    submit(cluster, checkout, sweep, &[SUBMIT, MERGE], Some(&format!("hang@{HELD}")));
    let held = format!("injecting fault 'hang' into cell {HELD}");
    let mut log = None;
    cluster.wait_until("shard 0 is held", PATIENCE, |_| {
        log = task_log(checkout, 0)
            .filter(|(_, path)| std::fs::read_to_string(path).is_ok_and(|t| t.contains(&held)));
        log.is_some()
    });
    let (array_id, log) = log.unwrap();
    let cancel = cluster.client("scancel").arg(format!("{array_id}_0")).output().unwrap();
    assert!(cancel.status.success(), "scancel {array_id}_0: {}", text(&cancel.stderr));
    cluster.wait_for_jobs(PATIENCE);

    let jobs = new_jobs(cluster, &before);
    // run exits with 143 on SIGTERM, having saved every finished cell.
    assert_ended(job(&jobs, "trickbench-sweep", Some("0")), "CANCELLED", "143:0");
    for task in ["1", "2"] {
        let shard = job(&jobs, "trickbench-sweep", Some(task));
        assert_ended(shard, "COMPLETED", "0:0");
        assert_eq!(shard.stdout, checkout.join(format!("trickbench-sweep-{array_id}_{task}.out")));
    }
    let merge = job(&jobs, "trickbench-merge", None);
    assert_ended(merge, "FAILED", "2:0");
    assert_eq!(merge.stdout, checkout.join(format!("slurm-{}.out", merge.id)));
    assert!(std::fs::read_to_string(&log).unwrap().contains("interrupted by SIGTERM"), "{}", log.display());
    let refused = merge.output();
    let shard_0 = sweep.join("shard-0/results.json");
    let line = refused.lines().find(|l| l.contains("shard 0/3")).unwrap_or_else(|| panic!("{refused}"));
    assert!(line.contains(&format!("{}) did not finish", shard_0.display())), "{line}");
    assert!(line.contains(HELD), "the held cell is listed as not measured: {line}");

    let interrupted = store::load(&shard_0).unwrap();
    assert!(interrupted.run.finished_at.is_none());
    assert!(!interrupted.cells.iter().any(|c| c.id() == HELD), "the cancelled cell was recorded");
    let kept: Vec<_> = interrupted
        .cells
        .iter()
        .flat_map(|c| c.processes.iter().map(|p| (c.id().to_string(), p.clone())))
        .collect();
    assert!(!kept.is_empty(), "shard 0 measured nothing before {HELD}");
    kept
}

/// The log of array task `task` in `checkout`, `trickbench-sweep-ARRAY_TASK.out`, once it
/// exists, with the id of its array.
fn task_log(checkout: &Path, task: usize) -> Option<(u64, PathBuf)> {
    let suffix = format!("_{task}.out");
    std::fs::read_dir(checkout).ok()?.flatten().find_map(|entry| {
        let name = entry.file_name().to_string_lossy().into_owned();
        let array_id = name.strip_prefix("trickbench-sweep-")?.strip_suffix(&suffix)?.parse().ok()?;
        Some((array_id, entry.path()))
    })
}

/// Asserts `merged` holds `whole`'s cells in its order with the same statuses, and the same
/// comparisons and time-to-accuracy configurations (their values are new measurements).
fn assert_same_plan(merged: &Results, whole: &Results) {
    let cells =
        |r: &Results| r.cells.iter().map(|c| (c.id().to_string(), c.status.clone())).collect::<Vec<_>>();
    assert_eq!(cells(merged), cells(whole));
    let pairs =
        |r: &Results| r.comparisons.iter().map(|c| (c.cell.clone(), c.baseline.clone())).collect::<Vec<_>>();
    assert_eq!(pairs(merged), pairs(whole));
    let configurations = |r: &Results| {
        r.time_to_accuracy
            .iter()
            .map(|t| (t.configuration.clone(), t.cells.clone(), t.reference.clone()))
            .collect::<Vec<_>>()
    };
    assert_eq!(configurations(merged), configurations(whole));
    assert!(
        !whole.comparisons.is_empty() && whole.time_to_accuracy.len() == 2,
        "the sweep compares something"
    );
}
