//! The runner end to end with a mock executor (deterministic, no training) and with the real
//! process executor against stand-in programs that crash, hang or run out of memory.

#[allow(dead_code)]
mod common;

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use trickbench::bench::cell::CellJob;
use trickbench::bench::interrupt::Interrupt;
use trickbench::bench::plan::{Plan, PlanRequest};
use trickbench::bench::profile::ProfileName;
use trickbench::bench::runner::{
    self, CellExecutor, Execution, ProcessExecutor, RunObserver, RunSpec, Silent,
};
use trickbench::device::DeviceSpec;
use trickbench::results::schema::*;
use trickbench::results::store;
use trickbench::tricks::Trick;
use trickbench::workloads::{Family, WorkloadId};

use common::cells::{cell, comparison_of, measurement};
use common::dirs::temp_dir;
use common::plan::cpu_request;
use common::run::{run_spec, RunInfoBuilder};

/// Throughput windows that depend only on the trick set and round: channels-last 1.5× faster,
/// everything else as fast as the baseline with a little deterministic jitter.
#[derive(Default)]
struct MockExecutor {
    calls: Vec<(String, usize)>,
    jobs: Vec<CellJob>,
    failures: HashMap<String, CellStatus>,
    /// Cells whose side drops out of its process with this status while the process measures
    /// the others.
    drop_outs: HashMap<String, CellStatus>,
}

impl CellExecutor for MockExecutor {
    /// Measures each cell of the job (a multi-arm process's every arm and its reference), or
    /// fails the whole process when one of them is set to fail.
    fn execute(&mut self, job: &CellJob, _timeout: Duration) -> Execution {
        let members = job.members();
        self.calls.extend(members.iter().map(|key| (key.id().to_string(), job.round)));
        self.jobs.push(job.clone());
        if let Some(status) = members.iter().find_map(|key| self.failures.get(key.id().as_str())) {
            return Execution::Failed(status.clone());
        }
        let jitter = [1.0, 0.99, 1.01, 1.005];
        let measured = members.iter().map(|key| {
            if let Some(status) = self.drop_outs.get(key.id().as_str()) {
                return Err(status.clone());
            }
            let factor = if key.tricks.has(Trick::ChannelsLast) { 1.5 } else { 1.0 };
            let mut process = measurement(job.round, jitter.iter().map(|j| 100.0 * factor * j).collect());
            process.process_cells = members.len();
            Ok(process)
        });
        Execution::Measured(measured.collect())
    }
}

/// A smoke-profile run of ResNet-8's throughput cells with `tricks` into `out_dir`.
fn spec(out_dir: &Path, tricks: Vec<Trick>) -> RunSpec {
    let request = PlanRequest {
        time_to_accuracy_batch_size: None,
        ..cpu_request(ProfileName::Smoke, &[WorkloadId::Resnet8], &tricks)
    };
    run_spec(RunInfoBuilder::new("test").build(), Plan::ablation(&request), out_dir)
}

/// Checks the results file on disk after every process.
struct FileWatcher {
    path: PathBuf,
    measured_processes: Vec<usize>,
}

impl RunObserver for FileWatcher {
    fn results_written(&mut self, path: &Path) {
        assert_eq!(path, self.path);
        let on_disk = store::load(path).unwrap();
        self.measured_processes.push(on_disk.cells.iter().map(|c| c.processes.len()).sum());
    }
}

#[test]
fn every_process_is_saved_as_it_finishes_and_tricks_are_compared_to_the_baseline() {
    let dir = temp_dir();
    let spec = spec(dir.path(), vec![Trick::ChannelsLast, Trick::ZeroGradNone, Trick::Amp]);
    let mut mock = MockExecutor::default();
    let mut watcher = FileWatcher { path: dir.path().join("results.json"), measured_processes: vec![] };
    let results = runner::run(&spec, &mut mock, &mut watcher).unwrap();

    // 4 runnable cells (the A/A control among them) × 2 rounds, each round opened by a warm-up
    // process of the baseline; amp is not applicable on CPU and never runs.
    assert_eq!(mock.calls.len(), 10);
    assert_eq!(watcher.measured_processes, [1, 2, 3, 4, 5, 6, 7, 8], "warm-ups are not recorded");
    for warmup in [0, 5] {
        assert_eq!(mock.calls[warmup].0, "resnet8/baseline/b32/s0/train");
    }
    let positions: Vec<Option<usize>> =
        results.cells.iter().flat_map(|c| c.processes.iter().map(|p| p.position)).collect();
    assert!(positions.iter().all(|p| p.is_some_and(|p| p < 4)), "{positions:?}");

    let amp = cell(&results, "resnet8/amp/b32/s0/train");
    assert!(matches!(&amp.status, CellStatus::NotApplicable { reason, .. } if reason.contains("CUDA")));
    let ids: Vec<String> = results.cells.iter().map(|c| c.id().to_string()).collect();
    assert_eq!(
        ids,
        [
            "resnet8/baseline/b32/s0/train",
            "resnet8/aa-control/b32/s0/train",
            "resnet8/channels-last/b32/s0/train",
            "resnet8/zero-grad-none/b32/s0/train",
            "resnet8/amp/b32/s0/train"
        ],
        "cells stay in plan order"
    );
    let verdict = |id: &str| comparison_of(&results, id).clone();
    let cl = verdict("resnet8/channels-last/b32/s0/train");
    assert_eq!(cl.verdict, Verdict::Faster);
    assert!((cl.speedup - 1.5).abs() < 1e-9);
    assert_eq!(verdict("resnet8/zero-grad-none/b32/s0/train").verdict, Verdict::NoSignificantEffect);
    assert_eq!(results.noise_floors.len(), 1);
    assert_eq!(results.noise_floors[0].control, "resnet8/aa-control/b32/s0/train");
    assert!(results.run.finished_at.is_some());
    assert_eq!(store::load(&dir.path().join("results.json")).unwrap(), results);
}

#[test]
fn only_the_first_measured_process_of_a_traced_cell_records_a_trace() {
    let dir = temp_dir();
    let traced = RunSpec {
        trace: Some("*/channels-last/*".parse().unwrap()),
        ..spec(dir.path(), vec![Trick::ChannelsLast, Trick::ZeroGradNone])
    };
    let mut mock = MockExecutor::default();
    runner::run(&traced, &mut mock, &mut Silent).unwrap();
    let traced_jobs: Vec<(Vec<String>, usize)> = mock
        .jobs
        .iter()
        .filter_map(|j| j.trace.as_ref().map(|t| (t.cells.iter().map(|c| c.to_string()).collect(), j.round)))
        .collect();
    assert_eq!(traced_jobs, [(vec!["resnet8/channels-last/b32/s0/train".to_owned()], 0)]);
    let targets = mock.jobs.iter().find_map(|j| j.trace.clone()).unwrap();
    assert_eq!(targets.results_dir, dir.path());
    let target = targets.target(&targets.cells[0]).unwrap();
    assert_eq!(target.file, "traces/resnet8_channels-last_b32_s0_train.json.gz");
    // The round's warm-up process is the baseline's, and is never traced, even under `*`.
    let other = temp_dir();
    let every = RunSpec { trace: Some("*".parse().unwrap()), ..spec(other.path(), vec![]) };
    let mut mock = MockExecutor::default();
    runner::run(&every, &mut mock, &mut Silent).unwrap();
    let rounds: Vec<(usize, bool)> = mock.jobs.iter().map(|j| (j.round, j.trace.is_some())).collect();
    assert_eq!(
        rounds,
        [(0, false), (0, true), (1, false), (1, false)],
        "warm-up, baseline; warm-up, baseline"
    );
}

#[test]
fn a_failing_cell_is_recorded_and_the_run_goes_on() {
    let dir = temp_dir();
    let spec = spec(dir.path(), vec![Trick::ChannelsLast, Trick::ZeroGradNone]);
    let mut mock = MockExecutor::default();
    let failed =
        CellStatus::Failed { error: "cell process died of signal 11".into(), stderr_tail: "segfault".into() };
    mock.failures.insert("resnet8/channels-last/b32/s0/train".into(), failed.clone());
    let results = runner::run(&spec, &mut mock, &mut Silent).unwrap();
    let cl = cell(&results, "resnet8/channels-last/b32/s0/train");
    assert_eq!(cl.status, failed);
    // The failed cell is not retried in round 2; the others complete both rounds, after a warm-up.
    assert_eq!(mock.calls.iter().filter(|(id, _)| id.contains("channels-last")).count(), 1);
    assert_eq!(mock.calls.len(), 9);
    assert_eq!(results.comparisons.len(), 2, "zero-grad-none and the A/A control");
}

#[test]
fn an_arm_that_drops_out_costs_no_process_beyond_the_plan() {
    let dir = temp_dir();
    let spec = spec(dir.path(), vec![Trick::ChannelsLast, Trick::ZeroGradNone]);
    let mut planned_mock = MockExecutor::default();
    let planned =
        runner::run(&run_spec_again(&spec, dir.path().join("planned")), &mut planned_mock, &mut Silent)
            .unwrap();
    let mut mock = MockExecutor::default();
    let dropped =
        CellStatus::Failed { error: "no fp8 kernel for this shape".into(), stderr_tail: String::new() };
    mock.drop_outs.insert("resnet8/channels-last/b32/s0/train".into(), dropped.clone());
    let results =
        runner::run(&run_spec_again(&spec, dir.path().join("dropped")), &mut mock, &mut Silent).unwrap();
    assert_eq!(cell(&results, "resnet8/channels-last/b32/s0/train").status, dropped);
    assert!(
        mock.jobs.len() <= planned_mock.jobs.len(),
        "{} processes, {} planned",
        mock.jobs.len(),
        planned_mock.jobs.len()
    );
    for id in ["resnet8/zero-grad-none/b32/s0/train", "resnet8/aa-control/b32/s0/train"] {
        assert_eq!(
            cell(&results, id).processes.len(),
            cell(&planned, id).processes.len(),
            "{id} measured every round"
        );
    }
}

/// `spec` writing into `out_dir` instead.
fn run_spec_again(spec: &RunSpec, out_dir: PathBuf) -> RunSpec {
    std::fs::create_dir_all(&out_dir).unwrap();
    RunSpec { out_dir, ..spec.clone() }
}

#[test]
fn resume_runs_only_what_is_missing_and_ends_with_the_same_results() {
    let dir = temp_dir();
    let mut full_spec = spec(dir.path(), vec![Trick::ChannelsLast, Trick::ZeroGradNone]);
    let complete = runner::run(&full_spec, &mut MockExecutor::default(), &mut Silent).unwrap();

    // Simulate an interruption after the first round: drop every round-1 process from the file.
    let path = dir.path().join("results.json");
    let mut partial = complete.clone();
    for cell in &mut partial.cells {
        cell.processes.retain(|p| p.round == 0);
    }
    partial.run.finished_at = None;
    store::save(&partial, &path).unwrap();

    full_spec.resume = true;
    let mut mock = MockExecutor::default();
    let resumed = runner::run(&full_spec, &mut mock, &mut Silent).unwrap();
    assert!(mock.calls.iter().all(|(_, round)| *round == 1), "{:?}", mock.calls);
    assert_eq!(mock.calls.len(), 5, "the round's warm-up and its four processes");
    let strip = |mut r: Results| {
        r.run.finished_at = None;
        r
    };
    assert_eq!(strip(resumed), strip(complete));
}

#[test]
fn resume_refuses_results_from_a_different_run_and_a_new_run_refuses_to_overwrite() {
    let dir = temp_dir();
    let first = spec(dir.path(), vec![Trick::ChannelsLast]);
    runner::run(&first, &mut MockExecutor::default(), &mut Silent).unwrap();

    let again = runner::run(&first, &mut MockExecutor::default(), &mut Silent).unwrap_err().to_string();
    assert!(again.contains("already exists") && again.contains("--resume"), "{again}");

    let mut other = spec(dir.path(), vec![Trick::ChannelsLast]);
    other.info.profile = ProfileName::Quick;
    other.resume = true;
    let message = runner::run(&other, &mut MockExecutor::default(), &mut Silent).unwrap_err().to_string();
    assert!(message.contains("different run"), "{message}");
}

#[test]
fn every_cell_process_follows_the_run_s_settings_and_resume_refuses_other_settings() {
    let dir = temp_dir();
    let mut first = spec(dir.path(), vec![Trick::ChannelsLast]);
    let mut resnet = ProfileName::Smoke.settings(Family::CifarResnet).family_settings(Family::CifarResnet);
    resnet.time_to_accuracy.target = 0.42;
    resnet.time_to_accuracy.budget_s = 7.5;
    first.info.profile_settings.families = vec![resnet];
    let mut mock = MockExecutor::default();
    runner::run(&first, &mut mock, &mut Silent).unwrap();
    assert_eq!(mock.jobs.len(), 8, "3 cells (the A/A control among them) × 2 rounds and 2 warm-ups");
    for job in &mock.jobs {
        let settings = job.settings();
        assert_eq!((settings.tta.target, settings.tta.budget_s), (0.42, 7.5), "{}", job.key.id());
        assert_eq!(settings.windows_per_process, 4, "the protocol is the run's");
    }
    // The recorded settings, read back, are the same run's.
    let mut again = first.clone();
    again.resume = true;
    runner::run(&again, &mut MockExecutor::default(), &mut Silent).unwrap();
    again.info.profile_settings.families[0].time_to_accuracy.planned_epochs = 9;
    let message = runner::run(&again, &mut MockExecutor::default(), &mut Silent).unwrap_err().to_string();
    assert!(message.contains("its settings differ"), "{message}");
}

#[test]
fn a_run_in_phases_resumes_each_phase_and_keeps_the_cells_of_the_others() {
    // As `run --design stack` does: the ablation, then a larger plan in the same file. Resuming
    // the first phase later must neither refuse the file nor drop the second phase's cells.
    let dir = temp_dir();
    let first = spec(dir.path(), vec![Trick::ChannelsLast]);
    runner::run(&first, &mut MockExecutor::default(), &mut Silent).unwrap();
    let mut second = spec(dir.path(), vec![Trick::ChannelsLast, Trick::ZeroGradNone]);
    second.resume = true;
    let grown = runner::run(&second, &mut MockExecutor::default(), &mut Silent).unwrap();
    let mut again = first.clone();
    again.resume = true;
    let mut mock = MockExecutor::default();
    let resumed = runner::run(&again, &mut mock, &mut Silent).unwrap();
    assert!(mock.calls.is_empty(), "nothing left to measure: {:?}", mock.calls);
    let ids =
        |r: &trickbench::results::schema::Results| r.cells.iter().map(|c| c.id().clone()).collect::<Vec<_>>();
    assert_eq!(ids(&resumed), ids(&grown));
}

#[test]
fn a_workload_measured_in_an_earlier_phase_gets_no_more_warm_ups() {
    // As `run --workload all` does: the ResNet's plan, then the GPT's added to the same file. The
    // second phase warms up only the workload it still has to measure.
    let dir = temp_dir();
    let first = spec(dir.path(), vec![Trick::ZeroGradNone]);
    runner::run(&first, &mut MockExecutor::default(), &mut Silent).unwrap();
    let mut second = first.clone();
    let gpt = PlanRequest {
        time_to_accuracy_batch_size: None,
        ..cpu_request(ProfileName::Smoke, &[WorkloadId::GptMini], &[Trick::ZeroGradNone])
    };
    second.plan.extend(Plan::ablation(&gpt).cells);
    second.resume = true;
    let mut mock = MockExecutor::default();
    runner::run(&second, &mut mock, &mut Silent).unwrap();
    assert!(!mock.calls.is_empty());
    assert!(
        mock.calls.iter().all(|(id, _)| id.starts_with("gpt-mini/")),
        "only the GPT's processes and warm-ups run: {:?}",
        mock.calls
    );
    let warm_ups = mock.calls.iter().filter(|(id, _)| id == "gpt-mini/baseline/b8/s0/train").count();
    assert_eq!(warm_ups, 2 * 2, "per round, the GPT's warm-up and its measured baseline");
}

/// A mock whose run is interrupted (as by SIGINT) while its `n`-th process runs.
struct InterruptedAt {
    inner: MockExecutor,
    n: usize,
    interrupt: Interrupt,
}

impl CellExecutor for InterruptedAt {
    fn execute(&mut self, job: &CellJob, timeout: Duration) -> Execution {
        if self.inner.calls.len() + 1 == self.n {
            self.interrupt.trigger(2);
            self.inner.calls.push((job.key.id().to_string(), job.round));
            return Execution::Interrupted(2);
        }
        self.inner.execute(job, timeout)
    }
}

#[test]
fn an_interrupted_run_keeps_every_finished_process_and_resume_completes_it() {
    let dir = temp_dir();
    let mut run_spec = spec(dir.path(), vec![Trick::ChannelsLast, Trick::ZeroGradNone]);
    let mut mock =
        InterruptedAt { inner: MockExecutor::default(), n: 4, interrupt: run_spec.interrupt.clone() };
    let error = runner::run(&run_spec, &mut mock, &mut Silent).unwrap_err();
    assert!(matches!(error, trickbench::error::Error::Interrupted { signal: 2, .. }), "{error}");
    let message = error.to_string();
    assert!(message.contains("SIGINT") && message.contains("--resume --out"), "{message}");
    let on_disk = store::load(&dir.path().join("results.json")).unwrap();
    let measured: usize = on_disk.cells.iter().map(|c| c.processes.len()).sum();
    assert_eq!(measured, 2, "the two processes after the warm-up and before the interrupted one");
    assert!(on_disk.cells.iter().all(|c| c.status == CellStatus::Ok), "nothing recorded as failed");

    // Once interrupted, the runner starts no further process.
    let mut fresh = MockExecutor::default();
    run_spec.resume = true;
    assert!(runner::run(&run_spec, &mut fresh, &mut Silent).is_err());
    assert!(fresh.calls.is_empty());

    run_spec.interrupt = Interrupt::new();
    let mut rest = MockExecutor::default();
    let resumed = runner::run(&run_spec, &mut rest, &mut Silent).unwrap();
    // Round 0's warm-up again, the interrupted process and the one after it, then round 1.
    assert_eq!(rest.calls.len(), 8, "only the interrupted process and those after it: {:?}", rest.calls);
    assert_eq!(mock.inner.calls[3], rest.calls[1]);
    let other = temp_dir();
    let uninterrupted = spec(other.path(), vec![Trick::ChannelsLast, Trick::ZeroGradNone]);
    let complete = runner::run(&uninterrupted, &mut MockExecutor::default(), &mut Silent).unwrap();
    let strip = |mut r: Results| {
        r.run.finished_at = None;
        r
    };
    assert_eq!(strip(resumed), strip(complete));
}

/// A stand-in for the trickbench binary: a shell script run as `SCRIPT cell --job J --output O`.
fn fake_program(dir: &Path, body: &str) -> ProcessExecutor {
    let path = dir.join("fake-trickbench");
    std::fs::write(&path, format!("#!/bin/sh\n{body}\n")).unwrap();
    let mut perms = std::fs::metadata(&path).unwrap().permissions();
    std::os::unix::fs::PermissionsExt::set_mode(&mut perms, 0o755);
    std::fs::set_permissions(&path, perms).unwrap();
    ProcessExecutor::new(path, dir.join("scratch"))
}

fn job() -> CellJob {
    let s = spec(Path::new("unused"), vec![]);
    CellJob::new(s.plan.cells[0].key.clone(), DeviceSpec::Cpu, ProfileName::Smoke, PathBuf::from("unused"))
}

#[test]
fn process_executor_records_crashes_hangs_and_out_of_memory() {
    let dir = temp_dir();
    let second = Duration::from_secs(1);

    let crash = fake_program(dir.path(), "echo 'about to crash' >&2; kill -SEGV $$").execute(&job(), second);
    match crash {
        Execution::Failed(CellStatus::Failed { error, stderr_tail }) => {
            assert!(error.contains("signal 11"), "{error}");
            assert!(stderr_tail.contains("about to crash"), "{stderr_tail}");
        }
        other => panic!("expected a failure, got {other:?}"),
    }

    let hang = fake_program(dir.path(), "echo 'working' >&2; exec sleep 30").execute(&job(), second);
    assert!(
        matches!(hang, Execution::Failed(CellStatus::Timeout { limit_s, .. }) if limit_s == 1.0),
        "{hang:?}"
    );

    let oom = fake_program(
        dir.path(),
        "echo 'RuntimeError: CUDA out of memory. Tried to allocate 2.00 GiB' >&2; exit 1",
    )
    .execute(&job(), second);
    assert!(
        matches!(&oom, Execution::Failed(CellStatus::OutOfMemory { error, .. }) if error.contains("Tried to allocate")),
        "{oom:?}"
    );

    let aborted =
        fake_program(dir.path(), "echo 'about to abort' >&2; kill -ABRT $$").execute(&job(), second);
    assert!(
        matches!(&aborted, Execution::Failed(CellStatus::Failed { error, .. }) if error.contains("SIGABRT")),
        "{aborted:?}"
    );

    // libtorch follows its allocator's message with a long C++ backtrace.
    let buried = fake_program(
        dir.path(),
        "echo \"DefaultCPUAllocator: can't allocate memory: you tried to allocate 64 bytes\" >&2; i=0; \
         while [ $i -lt 300 ]; do echo \"frame #$i: c10::fn() + 0x1f (0x7f00 in libtorch_cpu.so)\" >&2; \
         i=$((i+1)); done; exit 1",
    )
    .execute(&job(), second);
    match buried {
        Execution::Failed(CellStatus::OutOfMemory { error, stderr_tail }) => {
            assert!(error.contains("can't allocate memory"), "{error}");
            assert!(
                stderr_tail.contains("can't allocate memory") && !stderr_tail.contains("frame #"),
                "{stderr_tail}"
            );
        }
        other => panic!("expected out of memory, got {other:?}"),
    }

    let garbage = fake_program(dir.path(), "echo 'not json' > \"$5\"").execute(&job(), second);
    assert!(
        matches!(&garbage, Execution::Failed(CellStatus::Failed { error, .. }) if error.contains(".out.json")),
        "{garbage:?}"
    );
}

#[test]
fn a_cell_process_killed_by_the_signal_that_stops_the_run_is_not_a_failed_cell() {
    let dir = temp_dir();
    // A batch scheduler signals every process of the job: the cell process dies of SIGTERM, and
    // the run's own copy of the signal is noted a moment later.
    let interrupt = Interrupt::new();
    let run_s_copy = interrupt.clone();
    let sender = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(200));
        run_s_copy.trigger(libc::SIGTERM);
    });
    let mut executor = fake_program(dir.path(), "kill -TERM $$").with_interrupt(interrupt);
    let stopped = executor.execute(&job(), Duration::from_secs(30));
    sender.join().unwrap();
    assert_eq!(stopped, Execution::Interrupted(libc::SIGTERM));

    // A SIGTERM that reached the cell process alone is the cell's failure.
    let alone = fake_program(dir.path(), "kill -TERM $$").execute(&job(), Duration::from_secs(30));
    match alone {
        Execution::Failed(CellStatus::Failed { error, .. }) => {
            assert!(error.contains("signal 15 (SIGTERM)"), "{error}")
        }
        other => panic!("expected a failed cell, got {other:?}"),
    }
}

#[test]
fn process_executor_reads_the_measurement_and_forwards_stderr_lines() {
    let dir = temp_dir();
    let measured = ProcessMeasurement {
        wall_s: 1.5,
        memory: Memory::default(),
        host_metric_reads: 0,
        last_loss: None,
        timed_samples: 2,
        energy_unavailable: None,
        ..measurement(0, vec![10.0, 11.0])
    };
    let outcome: trickbench::bench::cell::Outcome = Ok(measured.clone());
    let json = serde_json::to_string(&[&outcome]).unwrap();
    let lines = std::sync::Arc::new(std::sync::Mutex::new(Vec::<String>::new()));
    let sink = lines.clone();
    let mut executor =
        fake_program(dir.path(), &format!("echo 'step 1' >&2; echo 'step 2' >&2; echo '{json}' > \"$5\""))
            .with_stderr_lines(std::sync::Arc::new(move |l: &str| sink.lock().unwrap().push(l.to_owned())));
    assert_eq!(executor.execute(&job(), Duration::from_secs(5)), Execution::Measured(vec![Ok(measured)]));
    assert_eq!(*lines.lock().unwrap(), ["step 1", "step 2"]);
}

/// A machine on which the first process after a change of round runs 30% slow (as a CPU or GPU
/// does after a pause: frequencies and caches ramping up), and otherwise as [`MockExecutor`].
#[derive(Default)]
struct SlowFirstOfRound {
    inner: MockExecutor,
    last_round: Option<usize>,
    slowed: Vec<String>,
}

impl CellExecutor for SlowFirstOfRound {
    fn execute(&mut self, job: &CellJob, timeout: Duration) -> Execution {
        let first = self.last_round != Some(job.round);
        self.last_round = Some(job.round);
        let mut outcome = self.inner.execute(job, timeout);
        if let (true, Execution::Measured(processes)) = (first, &mut outcome) {
            self.slowed.push(job.key.id().to_string());
            for process in processes.iter_mut().flatten() {
                process.window_samples_per_s.iter_mut().for_each(|w| *w *= 0.7);
            }
        }
        outcome
    }
}

#[test]
fn the_slow_first_process_of_each_round_is_a_warm_up_and_biases_no_cell() {
    let dir = temp_dir();
    let mut run_spec = spec(dir.path(), vec![Trick::ChannelsLast, Trick::ZeroGradNone]);
    run_spec.info.protocol.rounds = 3;
    let mut machine = SlowFirstOfRound::default();
    let results = runner::run(&run_spec, &mut machine, &mut Silent).unwrap();
    assert_eq!(machine.slowed.len(), 3, "one slow process per round");
    let speedup = |id: &str| comparison_of(&results, id).speedup;
    // Without the warm-up, whichever cell opened a round would carry the slow process: 0.7× in one
    // of its three rounds.
    assert!((speedup("resnet8/aa-control/b32/s0/train") - 1.0).abs() < 1e-9);
    assert!((speedup("resnet8/zero-grad-none/b32/s0/train") - 1.0).abs() < 1e-9);
    assert!((speedup("resnet8/channels-last/b32/s0/train") - 1.5).abs() < 1e-9);
    let baseline = cell(&results, "resnet8/baseline/b32/s0/train");
    let medians: Vec<f64> = baseline.processes.iter().map(|p| p.window_samples_per_s[1]).collect();
    assert_eq!(medians, [99.0; 3], "the baseline's processes measure alike in every round");
}

/// A machine that slows down by 3% with every process it runs (load building up during the run).
#[derive(Default)]
struct Drifting {
    inner: MockExecutor,
}

impl CellExecutor for Drifting {
    fn execute(&mut self, job: &CellJob, timeout: Duration) -> Execution {
        let slowdown = 0.97f64.powi(self.inner.calls.len() as i32);
        let mut outcome = self.inner.execute(job, timeout);
        if let Execution::Measured(processes) = &mut outcome {
            for process in processes.iter_mut().flatten() {
                process.window_samples_per_s.iter_mut().for_each(|w| *w *= slowdown);
            }
        }
        outcome
    }
}

#[test]
fn the_a_a_control_catches_drift_and_the_verdicts_are_worded_against_it() {
    let dir = temp_dir();
    let mut run_spec = spec(dir.path(), vec![Trick::ChannelsLast, Trick::ZeroGradNone]);
    run_spec.info.protocol.rounds = 3;
    let results = runner::run(&run_spec, &mut Drifting::default(), &mut Silent).unwrap();
    let floor = &results.noise_floors[0];
    let verdict = |id: &str| comparison_of(&results, id).clone();
    // The same cell measured twice came out apart: that is what this machine can resolve.
    assert!(floor.half_width > 0.03, "{floor:?}");
    // Drift alone moved zero-grad-none (no effect of its own) far enough for its interval to
    // exclude 1; inside the floor it is worded as noise, not as "slower".
    let zero_grad = verdict("resnet8/zero-grad-none/b32/s0/train");
    assert!(zero_grad.speedup_ci_high < 1.0, "the interval alone says slower: {zero_grad:?}");
    assert_eq!(zero_grad.verdict, Verdict::WithinNoise);
    // A real effect well beyond the floor keeps its verdict.
    assert_eq!(verdict("resnet8/channels-last/b32/s0/train").verdict, Verdict::Faster);
}
