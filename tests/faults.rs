//! Faults end to end with the real binary: cells that crash, abort, hang or run out of memory are
//! recorded and the run goes on; a cell found not applicable when it runs is recorded so, with its
//! reason; SIGINT and SIGTERM stop a run, which `--resume` then completes as an uninterrupted run
//! would have; a results file that cannot be written keeps its content.
//!
//! Faults are injected into chosen cell processes with the hidden `TRICKBENCH_FAULT` variable
//! (see `src/commands/cell.rs`). Nothing here asserts on timings: waits have generous deadlines
//! that only stop a broken test from hanging.

#[allow(dead_code)]
mod common;

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use trickbench::bench::lock::LOCK_FILE;
use trickbench::results::schema::{CellStatus, Results};
use trickbench::results::store;

use common::cells::cell;
use common::cli::{command, synthetic_cifar, text, BINARY, FAULT_VARIABLE};
use common::dirs::temp_dir;

const BASELINE: &str = "resnet8/baseline/b32/s0/train";
const CHANNELS_LAST: &str = "resnet8/channels-last/b32/s0/train";
const ZERO_GRAD_NONE: &str = "resnet8/zero-grad-none/b32/s0/train";
const NO_BIAS: &str = "resnet8/no-bias-before-bn/b32/s0/train";

/// How long a broken test may wait for something before it fails instead of hanging.
const PATIENCE: Duration = Duration::from_secs(300);

/// A cap on each cell process's memory that leaves a ResNet-8 smoke cell room: its data segment
/// peaks near 800 MiB, libtorch's libraries included.
const MEMORY_LIMIT_MIB: &str = "2000";

/// `trickbench run` of ResNet-8 cells in the smoke profile on the CPU, in `dir`, into `out`,
/// each cell process's memory capped.
fn run_command(dir: &Path, out: &str, tricks: &str, extra: &[&str], fault: Option<&str>) -> Command {
    let mut run = command(dir, &["run", "--profile", "smoke", "--workload", "resnet8", "--device", "cpu"]);
    run.args(["--no-time-to-accuracy", "--data", "data", "--tricks", tricks, "--out", out])
        .args(["--memory-limit-mib", MEMORY_LIMIT_MIB])
        .args(extra)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    if let Some(fault) = fault {
        run.env(FAULT_VARIABLE, fault);
    }
    run
}

/// The processes still running with `dir` as their working directory (cell processes of a run
/// started there).
fn processes_in(dir: &Path) -> Vec<PathBuf> {
    let dir = dir.canonicalize().unwrap();
    std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter(|entry| entry.file_name().to_string_lossy().bytes().all(|b| b.is_ascii_digit()))
        .filter(|entry| std::fs::read_link(entry.path().join("cwd")).is_ok_and(|cwd| cwd == dir))
        .map(|entry| entry.path())
        .collect()
}

/// Waits until `ready` holds, failing the test after [`PATIENCE`].
fn wait_until(what: &str, mut ready: impl FnMut() -> bool) {
    let start = Instant::now();
    while !ready() {
        assert!(start.elapsed() < PATIENCE, "gave up waiting until {what}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Sends `signal` to `child` and collects its output.
fn interrupt(mut child: Child, signal: i32) -> Output {
    let pid = libc::pid_t::try_from(child.id()).unwrap();
    // SAFETY: kill only sends a signal, to a child of this test.
    assert_eq!(unsafe { libc::kill(pid, signal) }, 0);
    let start = Instant::now();
    while child.try_wait().unwrap().is_none() {
        if start.elapsed() > PATIENCE {
            child.kill().unwrap();
            panic!("the run did not stop after signal {signal}");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    child.wait_with_output().unwrap()
}

/// Whether a cell process whose job mentions `what` (a trick id, say) is running for the run in
/// `out` (its job file is in the scratch folder while it runs).
fn job_running(out: &Path, what: &str) -> bool {
    std::fs::read_dir(out.join(".cells")).is_ok_and(|entries| {
        entries.flatten().any(|e| {
            let name = e.file_name().to_string_lossy().into_owned();
            name.starts_with("cell-job-")
                && !name.ends_with(".out.json")
                && std::fs::read_to_string(e.path()).is_ok_and(|job| job.contains(what))
        })
    })
}

/// Whether a cell job file exists under `out`'s scratch directory (a cell process was started).
fn cell_started(out: &Path) -> bool {
    std::fs::read_dir(out.join(".cells")).is_ok_and(|mut entries| entries.next().is_some())
}

#[test]
fn crashing_aborting_hanging_and_out_of_memory_cells_are_recorded_and_the_run_goes_on() {
    let dir = temp_dir();
    synthetic_cifar(dir.path(), "data", 2000, 500);
    // The baseline runs first: the others still run after it hangs.
    let faults = format!("hang@{BASELINE},segv@{CHANNELS_LAST},abort@{ZERO_GRAD_NONE},oom@{NO_BIAS}");
    let tricks = "channels-last,zero-grad-none,no-bias-before-bn";
    let out =
        run_command(dir.path(), "run", tricks, &["--cell-timeout-s", "5"], Some(&faults)).output().unwrap();
    // The run goes on after its cells fail, and then says so in its status.
    assert_eq!(out.status.code(), Some(3), "the run must survive its cells: {}", text(&out.stderr));
    let results = store::load(&dir.path().join("run/results.json")).unwrap();
    let signal_failure = |id: &str, words: [&str; 2], fault: &str| match &cell(&results, id).status {
        CellStatus::Failed { error, stderr_tail } => {
            assert!(words.iter().all(|w| error.contains(w)), "{id}: {error}");
            assert!(stderr_tail.contains(&format!("injecting fault '{fault}'")), "{id}: {stderr_tail}");
        }
        other => panic!("{id}: expected a failure, got {other:?}"),
    };
    signal_failure(CHANNELS_LAST, ["signal 11", "SIGSEGV"], "segv");
    signal_failure(ZERO_GRAD_NONE, ["signal 6", "SIGABRT"], "abort");
    match &cell(&results, BASELINE).status {
        CellStatus::Timeout { limit_s, stderr_tail } => {
            assert_eq!(*limit_s, 5.0);
            assert!(stderr_tail.contains("injecting fault 'hang'"), "{stderr_tail}");
        }
        other => panic!("expected a timeout, got {other:?}"),
    }
    // An allocation that fails in one side's build is an error of that side: it drops out of its
    // process, out of memory, and the process goes on.
    match &cell(&results, NO_BIAS).status {
        CellStatus::OutOfMemory { error, .. } => {
            assert!(error.to_lowercase().contains("can't allocate memory"), "{error}");
        }
        other => panic!("expected out of memory under the cap, got {other:?}"),
    }
    // Failed cells are not retried in the second round.
    for id in [BASELINE, CHANNELS_LAST, ZERO_GRAD_NONE, NO_BIAS] {
        assert!(cell(&results, id).processes.is_empty(), "{id}");
    }
    assert!(processes_in(dir.path()).is_empty(), "the hung cell was killed");
    let stdout = text(&out.stdout);
    for (id, why) in
        [(CHANNELS_LAST, "failed: "), (BASELINE, "killed after the"), (NO_BIAS, "out of memory: ")]
    {
        assert!(stdout.contains(&format!("  {id}: {why}")), "{id} says why it did not measure: {stdout}");
    }
}

#[test]
fn a_cell_found_not_applicable_when_it_runs_is_recorded_so_with_its_reason_and_the_run_succeeds() {
    let dir = temp_dir();
    synthetic_cifar(dir.path(), "data", 2000, 500);
    let fault = format!("not-applicable@{CHANNELS_LAST}");
    let out =
        run_command(dir.path(), "run", "channels-last,zero-grad-none", &[], Some(&fault)).output().unwrap();
    assert_eq!(out.status.code(), Some(0), "no cell failed: {}", text(&out.stderr));
    let results = store::load(&dir.path().join("run/results.json")).unwrap();
    let reason = format!("TRICKBENCH_FAULT: cell {CHANNELS_LAST} has no kernel here");
    let not_applicable = cell(&results, CHANNELS_LAST);
    assert_eq!(not_applicable.status, CellStatus::NotApplicable { reason: reason.clone(), when_run: true });
    assert!(not_applicable.processes.is_empty() && not_applicable.throughput.is_none(), "nothing measured");
    for id in [BASELINE, ZERO_GRAD_NONE] {
        let measured = cell(&results, id);
        assert!(measured.status == CellStatus::Ok && !measured.processes.is_empty(), "{id}");
    }
    let html = std::fs::read_to_string(dir.path().join("run/index.html")).unwrap();
    let page: String = scraper::Html::parse_document(&html).root_element().text().collect();
    assert!(page.contains(&reason), "the report gives the reason");
}

/// Whether every process of cell `id` in `results` measured it beside other cells (a multi-arm
/// process), not in a process of its own.
fn shared_processes(results: &Results, id: &str) -> bool {
    let processes = &cell(results, id).processes;
    !processes.is_empty() && processes.iter().all(|p| p.process_cells > 1)
}

#[test]
fn an_arm_that_fails_drops_out_with_its_own_status_and_its_process_goes_on_with_the_others() {
    let dir = temp_dir();
    synthetic_cifar(dir.path(), "data", 2000, 500);
    let fault = format!("error@{CHANNELS_LAST}");
    let out =
        run_command(dir.path(), "run", "channels-last,zero-grad-none", &[], Some(&fault)).output().unwrap();
    assert_eq!(out.status.code(), Some(3), "a cell failed: {}", text(&out.stderr));
    let results = store::load(&dir.path().join("run/results.json")).unwrap();
    match &cell(&results, CHANNELS_LAST).status {
        CellStatus::Failed { error, .. } => {
            assert!(error.contains(&format!("the injected error of cell {CHANNELS_LAST}")), "{error}");
            assert!(error.contains("the process went on with its other cells"), "{error}");
        }
        other => panic!("expected channels-last to fail, got {other:?}"),
    }
    for id in [BASELINE, ZERO_GRAD_NONE, "resnet8/aa-control/b32/s0/train"] {
        assert_eq!(cell(&results, id).status, CellStatus::Ok, "{id}");
        assert!(shared_processes(&results, id), "{id} measured in the multi-arm process, not again apart");
    }
}

#[test]
fn a_process_that_dies_building_one_arm_fails_that_arm_and_runs_the_others_again_together() {
    let dir = temp_dir();
    synthetic_cifar(dir.path(), "data", 2000, 500);
    let fault = format!("segv@{CHANNELS_LAST}");
    let out =
        run_command(dir.path(), "run", "channels-last,zero-grad-none", &[], Some(&fault)).output().unwrap();
    assert_eq!(out.status.code(), Some(3), "a cell failed: {}", text(&out.stderr));
    let results = store::load(&dir.path().join("run/results.json")).unwrap();
    match &cell(&results, CHANNELS_LAST).status {
        CellStatus::Failed { error, stderr_tail } => {
            assert!(error.contains("SIGSEGV"), "{error}");
            assert!(stderr_tail.contains("injecting fault 'segv'"), "{stderr_tail}");
            assert!(
                !stderr_tail.contains("working on the side"),
                "the announcements are not kept: {stderr_tail}"
            );
        }
        other => panic!("expected channels-last to fail, got {other:?}"),
    }
    for id in [BASELINE, ZERO_GRAD_NONE] {
        assert_eq!(cell(&results, id).status, CellStatus::Ok, "{id}");
        assert!(shared_processes(&results, id), "{id} measured again beside the others, not each apart");
    }
}

#[test]
fn sigterm_stops_the_run_and_resume_finishes_it_as_an_uninterrupted_run_would() {
    let dir = temp_dir();
    synthetic_cifar(dir.path(), "data", 2000, 500);
    let tricks = "channels-last,zero-grad-none";
    let whole = run_command(dir.path(), "whole", tricks, &[], None).output().unwrap();
    assert!(whole.status.success(), "{}", text(&whole.stderr));
    let expected = store::load(&dir.path().join("whole/results.json")).unwrap();
    assert!(expected.cells.iter().all(|c| c.status == CellStatus::Ok), "the memory cap leaves a cell room");

    // Stop the run while zero-grad-none's round-0 process hangs; whatever round 0 ran before it
    // (in its seeded order, after the warm-up) is on disk.
    let child =
        run_command(dir.path(), "cut", tricks, &[], Some(&format!("hang@{ZERO_GRAD_NONE}"))).spawn().unwrap();
    let cut = dir.path().join("cut");
    wait_until("zero-grad-none's process started", || job_running(&cut, "zero-grad-none"));
    let stopped = interrupt(child, libc::SIGTERM);
    let stderr = text(&stopped.stderr);
    assert_eq!(stopped.status.code(), Some(143), "{stderr}");
    assert!(stderr.contains("SIGTERM") && stderr.contains("--resume --out cut"), "{stderr}");
    assert!(!cut.join(LOCK_FILE).exists(), "the interrupted run released its output folder");
    assert!(processes_in(dir.path()).is_empty(), "the hanging cell process was stopped");
    let partial = store::load(&cut.join("results.json")).unwrap();
    for c in &partial.cells {
        let rounds: Vec<usize> = c.processes.iter().map(|p| p.round).collect();
        assert_eq!(rounds, [0], "{}: finished before the signal, so on disk", c.id());
    }
    assert!(
        partial.cells.iter().all(|c| c.id() != ZERO_GRAD_NONE),
        "the interrupted cell is not recorded (not as failed either), so --resume runs it"
    );
    assert!(partial.run.finished_at.is_none());

    let resumed = run_command(dir.path(), "cut", tricks, &["--resume"], None).output().unwrap();
    assert!(resumed.status.success(), "{}", text(&resumed.stderr));

    // The same file as the uninterrupted run's, up to what is measured anew every time: timings,
    // memory and dates. The cells, their order, statuses and measured rounds must be equal.
    let actual = store::load(&cut.join("results.json")).unwrap();
    let shape = |r: &Results| {
        r.cells
            .iter()
            .map(|c| {
                (c.id().clone(), c.status.clone(), c.processes.iter().map(|p| p.round).collect::<Vec<_>>())
            })
            .collect::<Vec<_>>()
    };
    assert_eq!(shape(&actual), shape(&expected));
    let compared = |r: &Results| r.comparisons.iter().map(|c| c.cell.clone()).collect::<Vec<_>>();
    assert_eq!(compared(&actual), compared(&expected));
    assert_eq!(actual.run.protocol, expected.run.protocol);
    assert!(actual.run.finished_at.is_some());

    // A results file that cannot be written (here: a file-size limit, which stops root too, as a
    // full disk would) keeps its previous content, and the error names it.
    let path = dir.path().join("whole/results.json");
    let before = std::fs::read(&path).unwrap();
    let mut limited = Command::new("sh");
    limited
        .current_dir(dir.path())
        .arg("-c")
        .arg("trap '' XFSZ; ulimit -f 1; exec \"$0\" \"$@\"")
        .arg(BINARY)
        .args(run_command(dir.path(), "whole", tricks, &["--resume"], None).get_args());
    let failed = limited.output().unwrap();
    let stderr = text(&failed.stderr);
    assert!(!failed.status.success(), "{stderr}");
    assert!(stderr.contains("could not write whole/results.json"), "{stderr}");
    assert!(stderr.contains("unchanged"), "{stderr}");
    assert!(!dir.path().join("whole").join(LOCK_FILE).exists(), "a run that failed released its folder");
    assert_eq!(std::fs::read(&path).unwrap(), before, "the previous results file is intact");
    let names: Vec<String> = std::fs::read_dir(dir.path().join("whole"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|name| name.starts_with(".tmp"))
        .collect();
    assert!(names.is_empty(), "no temporary file is left behind: {names:?}");
}

#[test]
fn sigint_during_the_first_cell_stops_the_run_with_nothing_recorded() {
    let dir = temp_dir();
    synthetic_cifar(dir.path(), "data", 2000, 500);
    let child = run_command(dir.path(), "run", "channels-last", &[], Some("hang")).spawn().unwrap();
    let out_dir = dir.path().join("run");
    wait_until("the first cell process started", || cell_started(&out_dir));
    let stopped = interrupt(child, libc::SIGINT);
    let stderr = text(&stopped.stderr);
    assert_eq!(stopped.status.code(), Some(130), "{stderr}");
    assert!(stderr.contains("interrupted by SIGINT") && stderr.contains("--resume --out run"), "{stderr}");
    assert!(!out_dir.join(LOCK_FILE).exists(), "the interrupted run released its output folder");
    assert!(processes_in(dir.path()).is_empty(), "the cell process was stopped");
    let results = store::load(&out_dir.join("results.json")).unwrap();
    assert!(results.cells.iter().all(|c| c.processes.is_empty()), "{:?}", results.cells);
}
