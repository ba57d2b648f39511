//! `trickbench crosscheck` end to end on the smoke profile: each trick timed on the PyTorch engine
//! and in the plain script, in alternating order, its artefacts written; and bad input refused
//! naming the flag. No timing is asserted: the effects are whatever this machine measures.

#[allow(dead_code)]
mod common;

use std::path::Path;

use trickbench::crosscheck::results::{CrosscheckResults, Source};
use trickbench::crosscheck::{PLAIN_SCRIPT, PLAIN_TRICKS};
use trickbench::tricks::Trick;

use common::cli::{synthetic_cifar, text, trickbench};
use common::dirs::{checkout, python, temp_dir};

/// The smoke profile's synthetic data and a short text in `dir`.
fn inputs(dir: &Path) {
    synthetic_cifar(dir, "data", 256, 64);
    std::fs::write(dir.join("verse.txt"), "To be, or not to be, that is the question.\n".repeat(300))
        .unwrap();
}

#[test]
fn a_crosscheck_times_each_trick_on_the_engine_and_in_the_plain_script_in_alternating_order() {
    let dir = temp_dir();
    inputs(dir.path());
    let python = python();
    let out = trickbench(
        dir.path(),
        &[
            "crosscheck",
            "--profile",
            "smoke",
            "--device",
            "cpu",
            "--batch-size",
            "8",
            "--rounds",
            "2",
            "--pairs",
            "2",
            "--tricks",
            "channels-last,debug-off,flash-attention",
            "--data",
            "data",
            "--text",
            "verse.txt",
            "--out",
            "cc",
            "--python",
            python.to_str().unwrap(),
        ],
    );
    let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
    assert!(out.status.success(), "crosscheck failed:\n{stdout}\n{stderr}");
    let results: CrosscheckResults =
        serde_json::from_slice(&std::fs::read(dir.path().join("cc/crosscheck.json")).unwrap()).unwrap();
    let tricks: Vec<Trick> = results.checks.iter().map(|c| c.trick).collect();
    assert_eq!(tricks, [Trick::ChannelsLast, Trick::DebugOff, Trick::FlashAttention]);
    for check in &results.checks {
        assert!(check.cell.as_str().ends_with("@pytorch"), "{}", check.cell);
        for source in [Source::Engine, Source::Plain] {
            let effect = check.clone().effect_of(source).clone();
            assert!(effect.failures.is_empty(), "{}: {:?}", check.cell, effect.failures);
            let rounds: Vec<(usize, bool)> =
                effect.processes.iter().map(|p| (p.round, p.ran_first)).collect();
            let first = source == Source::Engine;
            assert_eq!(rounds, [(0, first), (1, !first)], "{} {source:?}", check.cell);
            for process in &effect.processes {
                assert_eq!(process.pair_ratios.len(), 2, "{} {source:?}", check.cell);
                assert!(process.pair_ratios.iter().all(|r| r.is_finite() && *r > 0.0));
                assert!(process.reference_samples_per_s > 0.0);
            }
            assert!(effect.effect.is_some(), "{} {source:?}", check.cell);
        }
        assert!(check.agreement.is_some(), "{}", check.cell);
    }
    let reference = |i: usize| results.checks[i].reference.as_ref().unwrap().as_str().to_owned();
    assert!(reference(0).starts_with("resnet8/baseline/b8/"), "{}", reference(0));
    assert!(reference(1).contains("debug-apis-on"), "{}", reference(1));
    assert_eq!(std::fs::read_to_string(dir.path().join("cc/plain.py")).unwrap(), PLAIN_SCRIPT);
    let summary = std::fs::read_to_string(dir.path().join("cc/summary.md")).unwrap();
    for needle in
        ["| workload | trick |", "channels-last", "debug-off", "flash-attention", "2 processes, 4 pairs"]
    {
        assert!(summary.contains(needle), "summary.md lacks {needle:?}:\n{summary}");
    }
    assert!(stdout.contains("PyTorch engine") && stdout.contains("plain script"), "{stdout}");
    assert!(stdout.lines().all(|l| l.chars().count() <= 100), "a line over 100 columns:\n{stdout}");
    assert!(stderr.contains("[12/12] round 2"), "no progress line for each process:\n{stderr}");
}

#[test]
fn the_plain_script_lists_the_tricks_the_library_says_it_writes() {
    let out = std::process::Command::new(python())
        .arg(checkout("scripts/crosscheck/plain.py"))
        .arg("--list")
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text(&out.stderr));
    let listed: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let expected: serde_json::Map<String, serde_json::Value> = PLAIN_TRICKS
        .iter()
        .map(|(w, tricks)| (w.id().to_owned(), tricks.iter().map(|t| t.id()).collect()))
        .collect();
    assert_eq!(listed, serde_json::Value::Object(expected));
}

#[test]
fn bad_input_is_refused_naming_the_flag_or_file() {
    let dir = temp_dir();
    let refused = |args: &[&str], needle: &str| {
        let device = if args.contains(&"--device") { &[][..] } else { &["--device", "cpu"][..] };
        let out = trickbench(dir.path(), &[&["crosscheck", "--out", "cc"][..], device, args].concat());
        let stderr = text(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {stderr}");
        assert!(stderr.contains(needle), "{args:?}: {needle:?} not in {stderr}");
    };
    refused(&["--tricks", "amp"], "--tricks amp: the plain script does not write it");
    refused(&["--tricks", "channels-last", "--pairs", "0"], "--pairs 0");
    refused(&["--tricks", "channels-last", "--rounds", "0"], "--rounds 0");
    refused(&["--tricks", "jit-fusion", "--text", "no-such.txt"], "--text no-such.txt: no such file");
    refused(&["--device", "as-if-cuda:sm90", "--tricks", "channels-last"], "--device as-if-cuda:sm90");
    assert!(!dir.path().join("cc").exists(), "a refused cross-check wrote its folder");
}
