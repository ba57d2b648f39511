//! What `run` does before and after the time is spent, with the real binary: bad input (damaged
//! CIFAR-10 files, a binary or too short text, images that are not an ImageFolder) is refused
//! before any cell runs, naming the file, with the bad-usage status 2; a run whose cells failed
//! writes everything, says why on the terminal and in the report, and exits with 3; and a second
//! run into a folder another process holds is refused naming it, while a lock left behind by a run
//! that did not end cleanly is taken over.

#[allow(dead_code)]
mod common;

use std::io::Write;
use std::os::unix::io::AsRawFd;
use std::path::Path;
use std::process::{Command, Output};

use trickbench::bench::lock::LOCK_FILE;
use trickbench::data::cifar::RECORD_BYTES;
use trickbench::results::schema::CellStatus;
use trickbench::results::store;

use common::cells::cell;
use common::cli::{command, synthetic_cifar, text, trickbench, FAULT_VARIABLE};
use common::dirs::temp_dir;

const BASELINE: &str = "resnet8/baseline/b32/s0/train";
const CHANNELS_LAST: &str = "resnet8/channels-last/b32/s0/train";

/// `trickbench args` in `dir`, with the cell processes' fault `fault` injected.
fn with_fault(dir: &Path, args: &[&str], fault: &str) -> Output {
    command(dir, args).env(FAULT_VARIABLE, fault).output().unwrap()
}

/// The arguments of `run` of the smoke profile on the CPU into `out`, one round, `args` added.
fn run_args<'a>(args: &[&'a str]) -> Vec<&'a str> {
    let mut all =
        vec!["run", "--profile", "smoke", "--device", "cpu", "--no-time-to-accuracy", "--rounds", "1"];
    all.extend(["--tricks", "channels-last", "--out", "out"]);
    all.extend(args);
    all
}

/// `run` as [`run_args`] says, in `dir`.
fn run(dir: &Path, args: &[&str]) -> Output {
    trickbench(dir, &run_args(args))
}

#[test]
fn bad_input_is_refused_before_any_cell_naming_the_file_with_status_2() {
    let dir = temp_dir();
    let d = dir.path();
    for name in ["data", "cut", "label", "partial"] {
        synthetic_cifar(d, name, 2000, 500);
    }
    let cut = d.join("cut/data_batch_3.bin");
    let length = std::fs::metadata(&cut).unwrap().len();
    std::fs::OpenOptions::new().write(true).open(&cut).unwrap().set_len(length - 100).unwrap();
    let label = d.join("label/data_batch_2.bin");
    let mut bytes = std::fs::read(&label).unwrap();
    bytes[17 * RECORD_BYTES] = 200;
    std::fs::write(&label, bytes).unwrap();
    std::fs::remove_file(d.join("partial/test_batch.bin")).unwrap();
    std::fs::write(d.join("program.bin"), b"\x7fELF\x02\x01\x01\x00\x00\x00\xff\xfe").unwrap();
    std::fs::write(d.join("zeros.txt"), [0u8; 4096]).unwrap();
    std::fs::write(d.join("short.txt"), "To be, or not to be, that is the question.\n").unwrap();
    std::fs::write(d.join("notes.txt"), "not a tar archive\n".repeat(100)).unwrap();

    let resnet = ["--workload", "resnet8", "--data"];
    let gpt = ["--workload", "gpt", "--text"];
    let cases: [(&[&str], &str, &[&str]); 8] = [
        (&[&resnet[..], &["cut"]].concat(), "cut/data_batch_3.bin", &[&format!("size {}", length - 100)]),
        (&[&resnet[..], &["label"]].concat(), "label/data_batch_2.bin", &["record 17 has label 200"]),
        (&[&resnet[..], &["partial"]].concat(), "partial/test_batch.bin", &["not found"]),
        (&[&gpt[..], &["program.bin"]].concat(), "program.bin", &["--text", "not UTF-8", "offset 10"]),
        (&[&gpt[..], &["zeros.txt"]].concat(), "zeros.txt", &["NUL byte at offset 0"]),
        (
            &[&gpt[..], &["short.txt"]].concat(),
            "short.txt",
            &["too short for a context of 64", "at least 641"],
        ),
        (
            &["--workload", "resnet8", "--data", "data", "--images", "notes.txt"],
            "notes.txt",
            &["not a readable tar"],
        ),
        (&["--workload", "resnet8", "--data", "data", "--images", "absent.tar"], "absent.tar", &["--images"]),
    ];
    for (args, file, words) in cases {
        let out = run(d, args);
        let stderr = text(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {stderr}");
        assert!(stderr.contains(file) && words.iter().all(|w| stderr.contains(w)), "{args:?}: {stderr}");
        assert!(!d.join("out").exists(), "{args:?}: nothing was run or written: {stderr}");
    }
    // Flags: the same status, whether clap or the command refuses them.
    for args in [&["--tricks", "warp-speed"][..], &["--seeds", "0"], &["--no-such-flag"]] {
        let out = run(d, args);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {}", text(&out.stderr));
    }
}

#[test]
fn a_run_with_a_failed_cell_writes_everything_shows_why_and_exits_with_3() {
    let dir = temp_dir();
    synthetic_cifar(dir.path(), "data", 2000, 500);
    let fault = format!("error@{BASELINE}");
    let out = with_fault(dir.path(), &run_args(&["--workload", "resnet8", "--data", "data"]), &fault);
    let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
    assert_eq!(out.status.code(), Some(3), "{stdout}{stderr}");
    // The summary wraps its lines to the width; its words, one space apart, say why.
    let words = stdout.split_whitespace().collect::<Vec<_>>().join(" ");
    let why = format!(
        "error: 1 of 3 cells did not measure (1 failed); results.json holds their stderr: {BASELINE}: failed: \
         TRICKBENCH_FAULT: the injected error of cell {BASELINE} (cell process exited with status 1"
    );
    assert!(words.contains(&why), "{stdout}");
    assert!(stderr.contains("1 of 3 cells failed, timed out or ran out of memory"), "{stderr}");

    let results = store::load(&dir.path().join("out/results.json")).unwrap();
    assert!(results.run.finished_at.is_some(), "the run finished");
    assert!(matches!(cell(&results, BASELINE).status, CellStatus::Failed { .. }));
    let channels_last = cell(&results, CHANNELS_LAST);
    assert!(channels_last.status == CellStatus::Ok && !channels_last.processes.is_empty());
    let html = std::fs::read_to_string(dir.path().join("out/index.html")).unwrap();
    let page: String = scraper::Html::parse_document(&html).root_element().text().collect();
    assert!(page.contains(&format!("the injected error of cell {BASELINE}")), "the report shows the reason");
    assert!(!dir.path().join("out").join(LOCK_FILE).exists(), "the lock is released");

    // Merging a shard with the failed cell ends the same way: everything written, then status 3.
    let sharded = [
        "run",
        "--profile",
        "smoke",
        "--device",
        "cpu",
        "--no-time-to-accuracy",
        "--rounds",
        "1",
        "--tricks",
        "channels-last",
        "--workload",
        "resnet8",
        "--data",
        "data",
        "--shard",
        "0/1",
        "--out",
        "shard",
    ];
    assert_eq!(with_fault(dir.path(), &sharded, &fault).status.code(), Some(3));
    let merge = trickbench(dir.path(), &["merge", "shard", "--out", "merged"]);
    assert_eq!(merge.status.code(), Some(3), "{}", text(&merge.stderr));
    let merged = text(&merge.stdout);
    assert!(merged.split_whitespace().collect::<Vec<_>>().join(" ").contains(&why), "{merged}");
    assert!(
        dir.path().join("merged/results.json").is_file() && dir.path().join("merged/index.html").is_file()
    );
}

#[test]
fn a_second_run_into_a_held_folder_is_refused_and_a_lock_left_behind_is_taken_over() {
    let dir = temp_dir();
    synthetic_cifar(dir.path(), "data", 2000, 500);
    let out_dir = dir.path().join("out");
    std::fs::create_dir(&out_dir).unwrap();
    let lock_path = out_dir.join(LOCK_FILE);

    // This test holds the folder as a run does: a flock on the file, its pid in it.
    let mut held = std::fs::File::create(&lock_path).unwrap();
    writeln!(held, "{} testhost 2026-12-01T10:00:00Z", std::process::id()).unwrap();
    // SAFETY: flock takes this test's open descriptor and flags; it touches no memory.
    assert_eq!(unsafe { libc::flock(held.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) }, 0);
    let holder = format!("pid {} on testhost", std::process::id());
    let resnet = ["--workload", "resnet8", "--data", "data"];
    for extra in [&[][..], &["--resume"]] {
        let out = run(dir.path(), &[&resnet[..], extra].concat());
        let stderr = text(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{extra:?}: {stderr}");
        assert!(stderr.contains(&format!("out/{LOCK_FILE}")) && stderr.contains(&holder), "{stderr}");
        assert!(!out_dir.join("results.json").exists() && !out_dir.join(".cells").exists(), "nothing ran");
    }
    let merge = trickbench(dir.path(), &["merge", "elsewhere", "--out", "out"]);
    assert_eq!(merge.status.code(), Some(2), "{}", text(&merge.stderr));
    assert!(text(&merge.stderr).contains(&holder), "{}", text(&merge.stderr));
    drop(held);

    // A lock file without a lock, naming a process that has ended (a run killed uncleanly).
    let mut ended = Command::new("true").spawn().unwrap();
    ended.wait().unwrap();
    std::fs::write(&lock_path, format!("{} testhost 2026-12-01T10:00:00Z\n", ended.id())).unwrap();
    let out = run(dir.path(), &resnet);
    let stderr = text(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    let taken = format!("was left by a run that ended without releasing it (pid {} on testhost", ended.id());
    assert!(stderr.contains(&taken), "{stderr}");
    let results = store::load(&out_dir.join("results.json")).unwrap();
    assert!(results.cells.iter().all(|c| c.status == CellStatus::Ok && !c.processes.is_empty()));
    assert!(!lock_path.exists(), "released at the end of the run");
}
