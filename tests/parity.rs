//! `trickbench parity` end to end against the real PyTorch (the set-up's `.venv/bin/python`):
//! both workloads agree step by step and are timed in alternating processes, a recipe difference
//! on one side is caught at the step where it first shows, and bad input gets a clear error.

#[allow(dead_code)]
mod common;

use std::path::Path;
use std::process::Command;

use trickbench::bench::profile::ProfileName;
use trickbench::device::DeviceSpec;
use trickbench::parity::case::{self, ExportRequest, OptimizerSpec, ParityCase};
use trickbench::parity::compare::{
    LossAgreement, ParityReport, COMPILED_LOSS_RELATIVE_TOLERANCE, LOSS_RELATIVE_TOLERANCE,
};
use trickbench::parity::side::{self, CompileMode, SideMode, SideOutput};
use trickbench::results::schema::SpeedrunDecision;
use trickbench::tricks::{Trick, TrickSet};
use trickbench::workloads::WorkloadId;

use common::cli::{synthetic_cifar, text, trickbench};
use common::dirs::{python, temp_dir};

/// A small CIFAR-layout dataset and a text file in `dir`.
fn write_data(dir: &Path) {
    synthetic_cifar(dir, "cifar", 256, 64);
    let verse = "Shall I compare thee to a summer's day? Thou art more lovely and more temperate.\n";
    std::fs::write(dir.join("verse.txt"), verse.repeat(200)).unwrap();
}

/// Runs the PyTorch script's loss mode on the case in `case_dir`, from a copy in `dir`.
fn pytorch_losses(dir: &Path, case_dir: &Path) -> SideOutput {
    let output = dir.join("pytorch.json");
    let script = dir.join("parity.py");
    std::fs::write(&script, trickbench::parity::PYTORCH_SCRIPT).unwrap();
    let run = Command::new(python())
        .arg(&script)
        .arg("--case")
        .arg(case_dir)
        .args(["--mode", "losses", "--output"])
        .arg(&output)
        .output()
        .unwrap();
    assert!(run.status.success(), "{}", text(&run.stderr));
    serde_json::from_slice(&std::fs::read(&output).unwrap()).unwrap()
}

#[test]
fn both_workloads_agree_with_pytorch_and_are_timed_in_alternating_processes() {
    let dir = temp_dir();
    write_data(dir.path());
    let python = python();
    let out = trickbench(
        dir.path(),
        &[
            "parity",
            "--profile",
            "smoke",
            "--device",
            "cpu",
            "--batch-size",
            "8",
            "--steps",
            "4",
            "--rounds",
            "2",
            "--warmup-steps",
            "1",
            "--windows",
            "2",
            "--steps-per-window",
            "2",
            "--data",
            "cifar",
            "--text",
            "verse.txt",
            "--python",
            python.to_str().unwrap(),
            "--stack",
            "channels-last,zero-grad-none",
            "--out",
            "parity",
        ],
    );
    let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
    assert!(out.status.success(), "parity failed:\n{stdout}\n{stderr}");
    assert!(stdout.contains("÷ PyTorch eager") && stdout.contains("agree"), "{stdout}");
    for row in ["PyTorch eager", "trickbench baseline", "trickbench stack"] {
        assert!(stdout.lines().any(|l| l.starts_with(row)), "no {row} row:\n{stdout}");
    }
    assert!(
        stdout.contains("left out: channels-last (named with --stack): gpt-mini has no convolutions"),
        "{stdout}"
    );
    let bytes = std::fs::read(dir.path().join("parity/parity.json")).unwrap();
    let report: ParityReport = serde_json::from_slice(&bytes).unwrap();
    let workloads: Vec<WorkloadId> = report.workloads.iter().map(|w| w.workload).collect();
    assert_eq!(workloads, [WorkloadId::Resnet8, WorkloadId::GptMini]);
    for w in &report.workloads {
        assert!(w.losses.agrees(), "{:?}", w.losses);
        assert_eq!(w.losses.trickbench_losses.len(), 4);
        assert!(w.pytorch_version.starts_with("2."), "{}", w.pytorch_version);
        let speed = w.speed.as_ref().expect("timed");
        let order: Vec<bool> = speed.rounds.iter().map(|r| r.trickbench_first).collect();
        assert_eq!(order, [true, false], "rounds alternate which side runs first");
        for round in &speed.rounds {
            assert_eq!(round.trickbench_window_samples_per_s.len(), 2);
            assert_eq!(round.pytorch_window_samples_per_s.len(), 2);
        }
        let ratio = speed.speed_ratio;
        assert!(ratio.point > 0.0 && ratio.low <= ratio.point && ratio.point <= ratio.high, "{ratio:?}");
        assert!(dir.path().join("parity").join(&w.case_dir).join(case::WEIGHTS_FILE).is_file());
        let stack = w.stack.as_ref().expect("a stacked side");
        assert_eq!(stack.rounds.len(), 2, "{stack:?}");
        assert!(stack.rounds.iter().all(|windows| windows.len() == 2));
        let to_baseline = stack.speed.as_ref().expect("timed").ratio_to_baseline;
        assert!(to_baseline.low <= to_baseline.point && to_baseline.point <= to_baseline.high);
        assert!(dir.path().join("parity").join(&w.case_dir).join("trickbench-stack-time-1.json").is_file());
    }
    let stacks: Vec<Vec<Trick>> =
        report.workloads.iter().map(|w| w.stack.as_ref().unwrap().tricks.clone()).collect();
    assert_eq!(stacks, [vec![Trick::ChannelsLast, Trick::ZeroGradNone], vec![Trick::ZeroGradNone]]);
    assert!(dir.path().join("parity/parity.py").is_file(), "the PyTorch side is kept beside the results");
}

#[test]
fn a_momentum_difference_on_the_pytorch_side_is_caught_where_it_first_shows() {
    let dir = temp_dir();
    write_data(dir.path());
    let case_dir = dir.path().join("case");
    let request = ExportRequest {
        workload: WorkloadId::Resnet8,
        profile: ProfileName::Smoke,
        batch_size: 8,
        seed: 3,
        device: DeviceSpec::Cpu,
        data_dir: dir.path().join("cifar"),
        text: None,
        steps: 4,
    };
    let exported = case::export(&request, &case_dir).unwrap();
    let trickbench_side = side::run(&case_dir, SideMode::Losses, &TrickSet::baseline()).unwrap();

    // The PyTorch side reads the optimizer from case.json; trickbench's follows the recipe.
    let mut changed: ParityCase = exported.clone();
    let OptimizerSpec::Sgd { momentum, weight_decay } = exported.optimizer else {
        panic!("the ResNet recipe is SGD: {:?}", exported.optimizer)
    };
    assert_eq!((momentum, weight_decay), (0.9, 5e-4));
    changed.optimizer = OptimizerSpec::Sgd { momentum: 0.8, weight_decay };
    std::fs::write(case_dir.join(case::CASE_FILE), serde_json::to_vec(&changed).unwrap()).unwrap();
    let pytorch_side = pytorch_losses(dir.path(), &case_dir);

    let agreement =
        LossAgreement::compare(trickbench_side.losses, pytorch_side.losses, LOSS_RELATIVE_TOLERANCE).unwrap();
    // Step 0's loss comes before any update and the first update starts the momentum buffer
    // from the gradient alone, so momentum first changes the loss of step 2.
    assert_eq!(agreement.first_disagreeing_step, Some(2), "{agreement:?}");
    assert!(agreement.trickbench_losses[..2] == agreement.pytorch_losses[..2], "{agreement:?}");
}

/// A short `trickbench parity` at the smoke profile on the CPU (batch 4, 3 steps) with `extra`
/// flags, in `dir`, with `env` set for the sides; returns its stdout and the report.
fn short_parity(dir: &Path, extra: &[&str], env: &[(&str, &Path)]) -> (String, ParityReport) {
    let python = python();
    let mut args = vec![
        "parity",
        "--profile",
        "smoke",
        "--device",
        "cpu",
        "--batch-size",
        "4",
        "--steps",
        "3",
        "--out",
        "parity",
        "--python",
    ];
    args.push(python.to_str().unwrap());
    args.extend_from_slice(extra);
    let mut command = common::cli::command(dir, &args);
    for (name, value) in env {
        command.env(name, value);
    }
    let out = command.output().unwrap();
    let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
    assert!(out.status.success(), "parity failed:\n{stdout}\n{stderr}");
    let report = serde_json::from_slice(&std::fs::read(dir.join("parity/parity.json")).unwrap()).unwrap();
    (stdout, report)
}

/// [`short_parity`] of the smoke GPT.
fn compiled_parity(dir: &Path, extra: &[&str], env: &[(&str, &Path)]) -> (String, ParityReport) {
    short_parity(dir, &[&["--workload", "gpt", "--text", "verse.txt"][..], extra].concat(), env)
}

#[test]
fn a_compiled_side_agrees_with_eager_and_its_compile_seconds_are_kept_apart_from_its_windows() {
    let dir = temp_dir();
    write_data(dir.path());
    let timing = ["--rounds", "1", "--warmup-steps", "1", "--windows", "2", "--steps-per-window", "1"];
    let (stdout, report) =
        compiled_parity(dir.path(), &[&["--compile", "default,default"][..], &timing[..]].concat(), &[]);
    let w = &report.workloads[0];
    assert_eq!(w.compiled.len(), 1, "a repeated mode runs once");
    let side = &w.compiled[0];
    assert_eq!((side.mode, side.unavailable.as_deref()), (CompileMode::Default, None));
    let losses = side.losses.as_ref().expect("the compiled side's losses");
    assert!(losses.agrees(), "{losses:?}");
    assert_eq!(losses.losses.len(), 3);
    assert_eq!(losses.rel_tolerance, COMPILED_LOSS_RELATIVE_TOLERANCE);
    assert!(losses.compile_s > 0.0);
    assert_eq!(side.rounds.len(), 1);
    assert_eq!(side.rounds[0].window_samples_per_s.len(), 2, "the compiling step is not a window");
    assert!(side.rounds[0].compile_s > 0.0);
    let speed = side.speed.as_ref().expect("timed");
    assert_eq!(speed.first_compile_s, side.rounds[0].compile_s);
    assert!(speed.ratio_to_eager.low <= speed.ratio_to_eager.point, "{speed:?}");
    let row = stdout
        .lines()
        .find(|l| l.starts_with("PyTorch compiled (default)"))
        .unwrap_or_else(|| panic!("{stdout}"));
    assert!(row.contains("agree") && row.contains(" s, "), "the compile seconds beside the step: {row}");
    assert!(dir.path().join("parity/gpt-mini/pytorch-compile-default-time-0.json").is_file());
}

#[test]
fn a_missing_compiler_makes_the_compiled_side_unavailable_not_the_comparison_fail() {
    let dir = temp_dir();
    write_data(dir.path());
    let cache = dir.path().join("inductor-cache");
    let env = [("CXX", Path::new("/no/such/c++")), ("TORCHINDUCTOR_CACHE_DIR", cache.as_path())];
    let flags = ["--rounds", "1", "--warmup-steps", "1", "--windows", "1", "--steps-per-window", "1"];
    let (stdout, report) = compiled_parity(
        dir.path(),
        &[&["--compile", "max-autotune-no-cudagraphs"][..], &flags[..]].concat(),
        &env,
    );
    let w = &report.workloads[0];
    assert!(w.losses.agrees() && w.speed.is_some(), "the eager comparison still runs");
    let side = &w.compiled[0];
    let reason = side.unavailable.as_deref().expect("unavailable");
    assert!(reason.contains("compiler"), "{reason}");
    assert!(side.losses.is_none() && side.rounds.is_empty() && side.speed.is_none());
    assert!(stdout.contains("PyTorch compiled (max-autotune-no-cudagraphs): not available here"), "{stdout}");
}

#[test]
fn the_stack_from_a_results_file_is_its_significantly_faster_step_tricks() {
    let dir = temp_dir();
    write_data(dir.path());
    // The fixture's ResNet-20: avoid-sync 1.18× faster, zero-grad-none within noise,
    // channels-last slower, debug-off against its own reference. Parity trains ResNet-8, of which
    // the file holds no cell: ResNet-20's effects choose its stack.
    trickbench::results::store::save(&common::fixtures::cpu_run(), &dir.path().join("effects.json")).unwrap();
    let flags = [
        "--workload",
        "resnet8",
        "--data",
        "cifar",
        "--rounds",
        "1",
        "--warmup-steps",
        "1",
        "--windows",
        "1",
        "--steps-per-window",
        "1",
        "--stack-from",
        "effects.json",
    ];
    let (stdout, report) = short_parity(dir.path(), &flags, &[]);
    let stack = report.workloads[0].stack.as_ref().unwrap();
    assert_eq!(stack.tricks, [Trick::AvoidSync]);
    assert_eq!(stack.evidence, ["effects.json: resnet20's effects, as it holds no resnet8 cell"]);
    let decision = |t: Trick| stack.considered.iter().find(|c| c.trick == t).unwrap().decision;
    assert_eq!(decision(Trick::ZeroGradNone), SpeedrunDecision::NotSignificant);
    assert_eq!(decision(Trick::DebugOff), SpeedrunDecision::LeftOut);
    assert_eq!(stack.rounds.len(), 1);
    assert!(stdout.contains("stack: avoid-sync (from effects.json: resnet20's effects"), "{stdout}");
}

#[test]
fn stack_flags_that_cannot_work_are_refused_naming_the_trick_or_file() {
    let dir = temp_dir();
    let out = trickbench(dir.path(), &["parity", "--device", "cpu", "--stack", "zero-grad-none,pin-memory"]);
    assert_eq!(out.status.code(), Some(2));
    let stderr = text(&out.stderr);
    assert!(stderr.contains("--stack pin-memory: acts on the loader"), "{stderr}");

    let out = trickbench(dir.path(), &["parity", "--device", "cpu", "--stack-from", "absent.json"]);
    assert!(!out.status.success());
    let stderr = text(&out.stderr);
    assert!(stderr.contains("--stack-from") && stderr.contains("absent.json"), "{stderr}");

    let out = trickbench(dir.path(), &["parity", "--stack", "amp", "--stack-from", "r.json"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(text(&out.stderr).contains("cannot be used with"), "{}", text(&out.stderr));

    let out = trickbench(dir.path(), &["parity", "--stack", "turbo"]);
    assert!(text(&out.stderr).contains("unknown trick 'turbo'"), "{}", text(&out.stderr));
}

#[test]
fn a_bad_compile_mode_is_named_with_the_valid_ones() {
    let dir = temp_dir();
    let out = trickbench(dir.path(), &["parity", "--compile", "default,turbo"]);
    assert_eq!(out.status.code(), Some(2));
    let stderr = text(&out.stderr);
    assert!(
        stderr.contains("'turbo'")
            && stderr.contains("--compile")
            && stderr.contains("max-autotune-no-cudagraphs"),
        "{stderr}"
    );
}

#[test]
fn parity_errors_name_the_flag_or_file() {
    let dir = temp_dir();
    let out = trickbench(dir.path(), &["parity", "--workload", "gpt", "--text", "nowhere.txt"]);
    assert!(!out.status.success());
    assert!(text(&out.stderr).contains("--text nowhere.txt: no such file"), "{}", text(&out.stderr));

    let out = trickbench(dir.path(), &["parity", "--steps", "0"]);
    assert!(text(&out.stderr).contains("--steps must be at least 1"), "{}", text(&out.stderr));

    write_data(dir.path());
    let args = [
        "parity",
        "--workload",
        "resnet8",
        "--profile",
        "smoke",
        "--device",
        "cpu",
        "--batch-size",
        "4",
        "--steps",
        "1",
        "--data",
        "cifar",
        "--python",
        "/no/such/python",
        "--out",
        "p",
    ];
    let out = trickbench(dir.path(), &args);
    assert!(!out.status.success());
    let stderr = text(&out.stderr);
    assert!(stderr.contains("/no/such/python") && stderr.contains("--python"), "{stderr}");

    let out = trickbench(
        dir.path(),
        &["parity-side", "--case", "absent", "--mode", "losses", "--output", "o.json"],
    );
    assert!(!out.status.success());
    assert!(text(&out.stderr).contains("absent/case.json"), "{}", text(&out.stderr));
}

#[test]
fn dropout_masks_line_up_so_a_gpt_with_dropout_agrees_too() {
    let dir = temp_dir();
    write_data(dir.path());
    let case_dir = dir.path().join("case");
    let request = ExportRequest {
        workload: WorkloadId::GptShakespeare,
        profile: ProfileName::Smoke,
        batch_size: 1,
        seed: 5,
        device: DeviceSpec::Cpu,
        data_dir: dir.path().join("cifar"),
        text: Some(dir.path().join("verse.txt")),
        steps: 2,
    };
    let exported = case::export(&request, &case_dir).unwrap();
    assert!(matches!(exported.model, case::ModelSpec::Gpt { dropout, .. } if dropout == 0.2));
    let trickbench_side = side::run(&case_dir, SideMode::Losses, &TrickSet::baseline()).unwrap();
    let pytorch_side = pytorch_losses(dir.path(), &case_dir);
    let agreement =
        LossAgreement::compare(trickbench_side.losses, pytorch_side.losses, LOSS_RELATIVE_TOLERANCE).unwrap();
    assert!(agreement.agrees(), "{agreement:?}");
}
