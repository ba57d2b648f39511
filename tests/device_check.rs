//! The GPU check's script (`scripts/device-check`) where it can be reached without a GPU: a binary
//! that cannot start stops it at once with the loader's message first in its log, the limit the
//! docs give its command leaves the tail after its deadline inside it, and its plan for a GPU where
//! a process costs 8 s fits the deadline with the headline tricks on both workloads and engines.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Command;

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

#[test]
fn a_binary_that_cannot_start_stops_the_check_with_the_loaders_message_first() {
    let python = root().join(".venv/bin/python");
    if !python.exists() {
        eprintln!("skipped: no {} (make setup installs it)", python.display());
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let loader = "trickbench: /lib/x86_64-linux-gnu/libstdc++.so.6: version `GLIBCXX_3.4.32' not found";
    let bin = dir.path().join("trickbench");
    std::fs::write(&bin, format!("#!/bin/sh\ncat >&2 <<'EOF'\n{loader}\nEOF\nexit 127\n")).unwrap();
    std::fs::set_permissions(&bin, std::fs::Permissions::from_mode(0o755)).unwrap();
    let out = dir.path().join("out");
    let status = Command::new(root().join("scripts/device-check"))
        .arg(&out)
        .env("TRICKBENCH_BIN", &bin)
        .env("TORCH_PYTHON", &python)
        .env("WORK_DIR", dir.path().join("work"))
        .output()
        .unwrap();
    assert_eq!(status.status.code(), Some(1), "{}", String::from_utf8_lossy(&status.stderr));
    let log = read(&out.join("log.txt"));
    let first = log.lines().next().unwrap_or_default();
    let expected = format!("device-check: FAILED: {} does not start: {loader}", bin.display());
    assert_eq!(first, expected, "{log}");
    assert!(!log.contains("=== device-check phase"), "no phase ran: {log}");
    let phases = read(&out.join("phases.tsv"));
    assert!(phases.lines().nth(1).unwrap().starts_with("start\tfailed\t"), "{phases}");
}

/// The value of the shell assignment `name=${…:-VALUE}` or `name=VALUE` on the first line of
/// `script` that makes it.
fn assigned(script: &str, name: &str) -> u64 {
    let line = script.lines().map(str::trim).find(|l| l.starts_with(&format!("{name}="))).unwrap();
    let value = line.rsplit([':', '-', '=']).next().unwrap().trim_end_matches('}');
    value.parse().unwrap_or_else(|_| panic!("{line}"))
}

#[test]
fn the_commands_limit_in_the_docs_leaves_the_tail_after_the_deadline_inside_it() {
    let script = read(&root().join("scripts/device-check"));
    let deadline = assigned(&script, "gpu_deadline");
    let limit = assigned(&script, "command_limit_s");
    assert!(limit >= deadline + 60, "deadline {deadline} s, limit {limit} s");
    assert!(limit <= 600, "the device tool stops a command after 600 s");
    let pack = read(&root().join("scripts/device-pack"));
    assert!(pack.contains(&format!("timeout_s: {limit}")), "scripts/device-pack tells another limit");
    let docs = read(&root().join("docs/gpu.md"));
    assert!(docs.contains(&format!("`timeout_s` {limit}")), "docs/gpu.md tells another limit");
    assert!(docs.contains(&format!("its own deadline ({deadline} s)")), "docs/gpu.md tells another deadline");
}

/// The plan section of phase `name` in the output of `device-check --plan-only`: its heading (two
/// spaces in) and the lines below it, indented deeper.
fn section(plan: &str, name: &str) -> String {
    let heading = format!("  {name} (");
    let mut lines = plan.lines().skip_while(|l| !l.starts_with(&heading));
    let first = lines.next().unwrap_or_else(|| panic!("no {name} section:\n{plan}"));
    let below = lines.take_while(|l| l.starts_with("   "));
    std::iter::once(first).chain(below).collect::<Vec<_>>().join("\n")
}

/// `device-check --assume-process-s SECONDS --plan-only` with this build's binary.
fn plan_only(seconds: &str) -> std::process::Output {
    Command::new(root().join("scripts/device-check"))
        .args(["--assume-process-s", seconds, "--plan-only"])
        .env("TRICKBENCH_BIN", env!("CARGO_BIN_EXE_trickbench"))
        .output()
        .unwrap()
}

#[test]
fn the_plan_for_a_gpu_at_8_s_a_process_fits_the_deadline_with_the_headline_tricks() {
    let output = plan_only("8");
    let plan = String::from_utf8_lossy(&output.stdout);
    assert!(output.status.success(), "{plan}{}", String::from_utf8_lossy(&output.stderr));
    let total: u64 = plan
        .split("in all: about ")
        .nth(1)
        .and_then(|rest| rest.split(' ').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no total:\n{plan}"));
    let deadline = assigned(&read(&root().join("scripts/device-check")), "gpu_deadline");
    assert!(total <= deadline, "{total} s over the {deadline} s deadline:\n{plan}");
    let headline = [
        ("resnet56", &["amp-bf16", "channels-last", "cuda-graphs", "tf32", "cudnn-benchmark"][..]),
        ("gpt", &["amp-bf16", "cuda-graphs", "flash-attention", "fp8-matmul", "tf32"][..]),
        ("compile", &["torch-compile"][..]),
    ];
    for (phase, tricks) in headline {
        let section = section(&plan, phase);
        let measured = section.lines().find(|l| l.trim_start().starts_with("measured:")).unwrap_or_default();
        assert!(measured.contains("baseline, A/A control"), "{section}");
        for trick in tricks {
            assert!(measured.split(", ").any(|t| t.trim() == *trick), "{phase} lacks {trick}:\n{section}");
        }
    }
    assert!(plan.contains("on an assumed sm90 GPU (an H100 or H200)"), "{plan}");
}

#[test]
fn a_plan_that_does_not_fit_fails_and_says_where() {
    let output = plan_only("30");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("does not fit: the cost phase needs 96 s of its 30 s"), "{stderr}");
}
