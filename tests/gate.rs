//! `trickbench compare BASE NEW --fail-on regression`, the CI gate: a confident regression fails
//! the command with status 1 and shows in gate.md and gate.junit.xml; an improvement and a change
//! inside the A/A noise pass; runs of other hardware or protocol are refused naming what differs
//! unless `--allow-mismatch`; bad input is refused naming the file or flag.

#[allow(dead_code)]
mod common;

use std::path::Path;
use std::process::Output;

use trickbench::device::DeviceSpec;
use trickbench::engine::Engine;
use trickbench::results::schema::{MeasurementDesign, NoiseFloor, Results};
use trickbench::results::store;
use trickbench::tricks::Trick::{AvoidSync, ChannelsLast};
use trickbench::workloads::WorkloadId;

use common::cli::{text, trickbench};
use common::dirs::temp_dir;
use common::fixtures::version_run;

/// A run of the fixture plan at `commit` with channels-last at `channels_last` × ± 0.02 and
/// avoid-sync at 1.10× ± 0.05 against the baseline (400 samples/s ± 3%), and an A/A noise floor of
/// ±`floor` for resnet20 in separate processes, the design of its comparisons.
fn version(id: &str, commit: &str, channels_last: f64, floor: f64) -> Results {
    let tricks = [(ChannelsLast, channels_last, 0.02), (AvoidSync, 1.1, 0.05)];
    let mut r = version_run(id, "2026-12-01T10:00:00Z", commit, &tricks);
    let baseline = r.cells.iter().find(|c| c.key.tricks.is_baseline()).unwrap().id();
    r.noise_floors.push(NoiseFloor {
        workload: WorkloadId::Resnet20,
        control: baseline.clone(),
        baseline,
        ratio: 1.0,
        ratio_ci_low: 1.0 - floor,
        ratio_ci_high: 1.0 + floor,
        half_width: floor,
        design: MeasurementDesign::Processes,
        engine: Engine::Libtorch,
    });
    r
}

/// The gate's flag as CI passes it.
const FAIL_ON_REGRESSION: [&str; 2] = ["--fail-on", "regression"];

/// Saves `base` and `new` into `dir` and compares them into `dir/gate` with the flags `gate`.
fn gate(dir: &Path, base: &Results, new: &Results, gate: &[&str]) -> Output {
    store::save(base, &dir.join("base.json")).unwrap();
    store::save(new, &dir.join("new.json")).unwrap();
    let mut args = vec!["compare", "base.json", "new.json", "--out", "gate"];
    args.extend(gate);
    trickbench(dir, &args)
}

/// The gate's files: its Markdown and its JUnit XML.
fn files(dir: &Path) -> (String, String) {
    let read = |name: &str| std::fs::read_to_string(dir.join("gate").join(name)).unwrap();
    (read("gate.md"), read("gate.junit.xml"))
}

/// The test cases of the JUnit XML, as (suite, case name, what it holds: "failure", "skipped" or
/// "passed", the failure's message).
fn cases(junit: &str) -> Vec<(String, String, String, String)> {
    let doc = roxmltree::Document::parse(junit).unwrap_or_else(|e| panic!("{e}: {junit}"));
    let testcases = doc.descendants().filter(|n| n.has_tag_name("testcase"));
    testcases
        .map(|case| {
            let suite = case.parent_element().unwrap().attribute("name").unwrap().to_owned();
            let child = case.children().find(|n| n.is_element());
            let outcome = match child.map(|c| c.tag_name().name()) {
                Some("failure") | Some("skipped") => child.unwrap().tag_name().name().to_owned(),
                _ => "passed".to_owned(),
            };
            let message = child.and_then(|c| c.attribute("message")).unwrap_or_default().to_owned();
            (suite, case.attribute("name").unwrap().to_owned(), outcome, message)
        })
        .collect()
}

/// The Markdown table row of `what`.
fn row<'a>(md: &'a str, what: &str) -> &'a str {
    md.lines().find(|l| l.starts_with(&format!("| {what} "))).unwrap_or_else(|| panic!("no row {what}: {md}"))
}

#[test]
fn a_confident_regression_fails_the_gate_and_shows_in_junit_and_markdown() {
    let dir = temp_dir();
    let (base, new) = (version("v-base", "aaaaaaa1", 1.3, 0.03), version("v-new", "bbbbbbb1", 1.1, 0.04));
    // Without --fail-on, compare gates nothing.
    let out = gate(dir.path(), &base, &new, &[]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(!dir.path().join("gate/gate.md").exists() && dir.path().join("gate/index.html").is_file());
    let out = gate(dir.path(), &base, &new, &FAIL_ON_REGRESSION);
    let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
    assert_eq!(out.status.code(), Some(1), "{stdout}{stderr}");
    assert!(stderr.contains("the gate failed: 1 confident regression, listed in gate/gate.md"), "{stderr}");
    assert!(
        stdout.contains("gate: 1 confident regression: resnet20 · channels-last · b128 speed-up -15.4%"),
        "{stdout}"
    );
    assert!(stdout.contains("junit:   gate/gate.junit.xml"), "{stdout}");
    let (md, junit) = files(dir.path());
    assert!(
        md.starts_with("**trickbench gate: 1 confident regression: resnet20 · channels-last · b128"),
        "{md}"
    );
    assert_eq!(
        row(&md, "channels-last · b128 speed-up"),
        "| channels-last · b128 speed-up | 1.300× [1.280, 1.320] | 1.100× [1.080, 1.120] | -15.4% | ±4.0% (A/A) | **regression** |"
    );
    assert!(
        row(&md, "baseline · b128 throughput (samples/s)").ends_with("| +0.0% | ±4.0% (A/A) | no change |"),
        "{md}"
    );
    let cases = cases(&junit);
    let failures: Vec<_> = cases.iter().filter(|c| c.2 == "failure").collect();
    assert_eq!(failures.len(), 1, "{cases:#?}");
    assert_eq!(
        (failures[0].0.as_str(), failures[0].1.as_str()),
        ("resnet20", "channels-last · b128 speed-up")
    );
    assert!(
        failures[0].3.contains("1.300× [1.280, 1.320] → 1.100× [1.080, 1.120] (-15.4%); threshold ±4.0%"),
        "{}",
        failures[0].3
    );
    assert_eq!(cases.len(), 3, "the baseline and two tricks: {cases:#?}");

    // `never` writes the same verdict and passes.
    let out = gate(dir.path(), &base, &new, &["--fail-on", "never"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(files(dir.path()).0.starts_with("**trickbench gate: 1 confident regression"));
}

#[test]
fn an_improvement_passes_and_is_reported_as_one() {
    let dir = temp_dir();
    let (base, new) = (version("v-base", "aaaaaaa1", 1.1, 0.03), version("v-new", "bbbbbbb1", 1.3, 0.03));
    let out = gate(dir.path(), &base, &new, &FAIL_ON_REGRESSION);
    assert_eq!(out.status.code(), Some(0), "{}{}", text(&out.stdout), text(&out.stderr));
    let (md, junit) = files(dir.path());
    assert!(
        md.starts_with(
            "**trickbench gate: no confident regression (1 improvement, 2 no change, 0 not compared)**"
        ),
        "{md}"
    );
    assert!(
        row(&md, "channels-last · b128 speed-up").ends_with("| +18.2% | ±3.0% (A/A) | improvement |"),
        "{md}"
    );
    assert!(cases(&junit).iter().all(|c| c.2 == "passed"), "{junit}");
    assert!(junit.contains("<system-out>improvement: speed-up 1.100×"), "{junit}");
}

#[test]
fn a_change_outside_the_interval_but_inside_the_noise_floor_is_no_change() {
    let dir = temp_dir();
    // 1.30× → 1.25× [1.23, 1.27]: outside the new interval, but -3.8% is inside the larger floor.
    let (base, new) = (version("v-base", "aaaaaaa1", 1.3, 0.05), version("v-new", "bbbbbbb1", 1.25, 0.02));
    let out = gate(dir.path(), &base, &new, &FAIL_ON_REGRESSION);
    assert_eq!(out.status.code(), Some(0), "{}{}", text(&out.stdout), text(&out.stderr));
    let (md, _) = files(dir.path());
    assert!(
        row(&md, "channels-last · b128 speed-up").ends_with("| -3.8% | ±5.0% (A/A) | no change |"),
        "{md}"
    );
    // The same change past a floor it exceeds fails.
    let (base, new) = (version("v-base", "aaaaaaa1", 1.3, 0.03), version("v-new", "bbbbbbb1", 1.25, 0.02));
    assert_eq!(gate(dir.path(), &base, &new, &FAIL_ON_REGRESSION).status.code(), Some(1));
}

#[test]
fn a_trick_of_one_run_only_is_listed_as_not_compared_never_a_failure() {
    let dir = temp_dir();
    let base = version("v-base", "aaaaaaa1", 1.3, 0.03);
    let mut new = version("v-new", "bbbbbbb1", 1.3, 0.03);
    let channels_last = new.cells.iter().position(|c| c.key.tricks.iter().eq([ChannelsLast])).unwrap();
    let id = new.cells.remove(channels_last).id();
    new.comparisons.retain(|c| c.cell != id);
    let out = gate(dir.path(), &base, &new, &FAIL_ON_REGRESSION);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let (md, junit) = files(dir.path());
    assert!(
        row(&md, "channels-last · b128 speed-up").ends_with("| not compared (new: not measured) |"),
        "{md}"
    );
    let skipped: Vec<_> = cases(&junit).into_iter().filter(|c| c.2 == "skipped").collect();
    assert_eq!(skipped.len(), 1, "{junit}");
    assert_eq!(skipped[0].3, "not compared: new: not measured");
}

#[test]
fn runs_of_other_hardware_or_protocol_are_refused_naming_what_differs_unless_allowed() {
    let dir = temp_dir();
    let base = version("v-base", "aaaaaaa1", 1.3, 0.03);
    let mut new = version("v-new", "bbbbbbb1", 1.3, 0.03);
    new.run.device = DeviceSpec::Cuda(0);
    new.run.profile = trickbench::bench::profile::ProfileName::Standard;
    new.system.libtorch_version = "2.12.0".into();
    let out = gate(dir.path(), &base, &new, &FAIL_ON_REGRESSION);
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("gating new.json (new) against base.json (base): the runs are not comparable"),
        "{stderr}"
    );
    assert!(
        stderr.contains("device: base cpu, new cuda") && stderr.contains("profile: base quick, new standard"),
        "{stderr}"
    );
    assert!(!stderr.contains("libtorch"), "a libtorch version is what a gate compares: {stderr}");
    assert!(stderr.contains("--allow-mismatch"), "{stderr}");
    assert!(!dir.path().join("gate").exists(), "a refused gate writes nothing");

    let out = gate(dir.path(), &base, &new, &["--fail-on", "regression", "--allow-mismatch"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let (md, _) = files(dir.path());
    assert!(md.contains("> Compared despite differences (`--allow-mismatch`): device: base cpu, new cuda; profile: base quick, new standard."), "{md}");
    assert!(row(&md, "channels-last · b128 speed-up").ends_with("| no change |"), "{md}");
}

#[test]
fn bad_input_is_refused_naming_the_file_or_flag() {
    let dir = temp_dir();
    let base = version("v-base", "aaaaaaa1", 1.3, 0.03);
    store::save(&base, &dir.path().join("base.json")).unwrap();
    std::fs::write(dir.path().join("garbage.json"), "{not json").unwrap();
    let run = |args: &[&str]| {
        let out = trickbench(dir.path(), args);
        (out.status.code(), text(&out.stderr))
    };
    let (code, stderr) =
        run(&["compare", "base.json", "missing.json", "--out", "g", "--fail-on", "regression"]);
    assert_eq!(code, Some(2), "{stderr}");
    assert!(stderr.contains("missing.json: No such file"), "{stderr}");
    let (code, stderr) =
        run(&["compare", "base.json", "garbage.json", "--out", "g", "--fail-on", "regression"]);
    assert_eq!(code, Some(2), "{stderr}");
    assert!(
        stderr.contains("error: garbage.json: not a readable results file: key must be a string"),
        "{stderr}"
    );
    assert!(!stderr.contains("the gate failed"), "{stderr}");
    let (code, stderr) = run(&["compare", "base.json", "--out", "g", "--fail-on", "regression"]);
    assert_eq!(code, Some(2), "{stderr}");
    let three = ["compare", "base.json", "base.json", "base.json", "--out", "g", "--fail-on", "regression"];
    let (code, stderr) = run(&three);
    assert_eq!(code, Some(2), "{stderr}");
    assert!(
        stderr.contains("--fail-on gates exactly two results files, BASE then NEW; 3 were given"),
        "{stderr}"
    );
    let (code, stderr) = run(&["compare", "base.json", "base.json", "--out", "g", "--allow-mismatch"]);
    assert_eq!(code, Some(2), "{stderr}");
    assert!(stderr.contains("--fail-on <WHEN>"), "{stderr}");
    let (code, stderr) = run(&["compare", "base.json", "base.json", "--out", "g", "--fail-on", "always"]);
    assert_eq!(code, Some(2), "{stderr}");
    assert!(stderr.contains("possible values: regression, never"), "{stderr}");
    // A gate file that cannot be written (a folder stands where it goes) is named, with status 1.
    std::fs::create_dir_all(dir.path().join("blocked/gate.md/x")).unwrap();
    let (code, stderr) =
        run(&["compare", "base.json", "base.json", "--out", "blocked", "--fail-on", "never"]);
    assert_eq!(code, Some(1), "{stderr}");
    assert!(stderr.contains("error: could not write blocked/gate.md"), "{stderr}");
    assert!(!stderr.contains("the gate failed"), "{stderr}");
}
