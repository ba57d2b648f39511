//! `run --model SPEC` end to end against the real PyTorch (the set-up's `.venv/bin/python`): the
//! user's network, prepared once, measured on both engines like a reference workload (libtorch
//! training its TorchScript export), the tricks that do not fit it not applicable with their
//! reasons, the results recording what it is and the report naming it; the export reproducing
//! the eager network's float64 loss on libtorch; bad SPECs refused naming the file and what is
//! wrong, before anything is measured and without touching a run's measured cells. The
//! preparation's and the engine's own checks for user models run here too.

#[allow(dead_code)]
mod common;

use std::path::Path;
use std::process::Command;

use trickbench::bench::user_model::{Preparation, EXPORT_FILE, LOSS_FILE};
use trickbench::engine::Engine;
use trickbench::results::model::ExportMethod;
use trickbench::results::schema::{CellKind, CellStatus, Results};
use trickbench::results::store;
use trickbench::vocabulary::QualityMetric;
use trickbench::workloads::scripted::ScriptedModel;
use trickbench::workloads::{Workload, WorkloadId};

use common::cli::{synthetic_cifar, text, trickbench};
use common::dirs::{checkout, python, temp_dir};

/// `run --model SPEC` with a short smoke protocol on both engines, in `dir`/`out`, with `more`
/// flags.
fn run_model(dir: &Path, spec: &str, out: &str, more: &[&str]) -> std::process::Output {
    let python = python();
    let mut args = vec![
        "run",
        "--model",
        spec,
        "--profile",
        "smoke",
        "--device",
        "cpu",
        "--engine",
        "both",
        "--python",
        python.to_str().unwrap(),
        "--rounds",
        "1",
        "--windows",
        "2",
        "--steps-per-window",
        "1",
        "--batch-size",
        "8",
        "--out",
        out,
    ];
    args.extend_from_slice(more);
    trickbench(dir, &args)
}

#[test]
fn a_users_cnn_file_is_measured_on_both_engines_and_the_report_names_it() {
    let dir = temp_dir();
    let spec = checkout("examples/cnn.py");
    let tricks = "channels-last,no-bias-before-bn,debug-off,zero-grad-none,checkpointing,loader-workers,\
                  one-cycle,label-smoothing";
    synthetic_cifar(dir.path(), "cifar", 2_000, 500);
    // The budget stops the probes of the largest batch that fits at 256 samples (86 MiB of live
    // tensors on libtorch, 82 in PyTorch; 128 take 43 and 41). The target makes the model train
    // to it on the synthetic CIFAR-10.
    let flags = ["--tricks", tricks, "--memory-budget-mib", "64", "--target", "0.15", "--data", "cifar"];
    let out = run_model(dir.path(), spec.to_str().unwrap(), "run", &flags);
    let stderr = text(&out.stderr);
    assert!(out.status.success(), "run failed: {stderr}");
    assert!(stderr.contains("model: cnn.py"), "the run says what it prepared: {stderr}");
    let results: Results = store::load(&dir.path().join("run/results.json")).unwrap();
    let model = results.run.model.as_ref().expect("the run records the model");
    assert_eq!(model.name, "cnn.py");
    assert_eq!(model.export.method, Some(ExportMethod::Trace));
    assert!(
        model.parameters > 0 && model.features.convolutions > 0 && model.features.bias_before_batch_norm > 0
    );
    assert_eq!(model.file_sha256.as_deref().map(str::len), Some(64));
    let cell =
        |id: &str| results.cells.iter().find(|c| c.id() == id).unwrap_or_else(|| panic!("no cell {id}"));
    for engine in [Engine::Libtorch, Engine::Pytorch] {
        let suffix = if engine == Engine::Pytorch { "@pytorch" } else { "" };
        for configuration in ["baseline", "channels-last", "no-bias-before-bn", "zero-grad-none", "debug-off"]
        {
            let c = cell(&format!("model/{configuration}/b8/s0/train{suffix}"));
            assert_eq!(c.status, CellStatus::Ok, "{}: {:?}", c.id(), c.processes);
        }
        for (batch, fits) in [(64, true), (128, true), (256, false)] {
            let c = cell(&format!("model/baseline/b{batch}/s0/probe{suffix}"));
            assert_eq!(c.status == CellStatus::Ok, fits, "{}: {:?}", c.id(), c.status);
        }
        for (trick, why) in
            [("checkpointing", "cannot cut the model's own forward"), ("loader-workers", "no data loader")]
        {
            let c = cell(&format!("model/{trick}/b8/s0/train{suffix}"));
            let CellStatus::NotApplicable { reason, .. } = &c.status else {
                panic!("{} must not be applicable: {:?}", c.id(), c.status)
            };
            assert!(reason.starts_with("cnn.py: ") && reason.contains(why), "{reason}");
        }
    }
    for configuration in ["baseline", "one-cycle"] {
        for suffix in ["", "@pytorch"] {
            let c = cell(&format!("model/{configuration}/b32/s0/tta{suffix}"));
            assert_eq!(c.status, CellStatus::Ok, "{}: {:?}", c.id(), c.processes);
            let tta = c.time_to_accuracy.as_ref().expect("a time-to-accuracy cell records its training");
            assert_eq!(tta.metric, QualityMetric::TestAccuracy);
            assert!(tta.curve.len() >= 2, "the untrained network and at least one evaluation");
        }
    }
    let CellStatus::NotApplicable { reason, .. } = &cell("model/label-smoothing/b32/s0/tta").status else {
        panic!("label smoothing cannot change the model's own loss")
    };
    assert!(reason.contains("its own loss"), "{reason}");
    assert!(results.run.data.train_samples == 2_000 && results.run.data.synthetic, "{:?}", results.run.data);
    assert!(results.cells.iter().all(|c| c.key.workload == WorkloadId::Model), "only the model is measured");
    assert!(!dir.path().join("run/model").exists(), "the prepared model stays out of the output folder");
    let html = std::fs::read_to_string(dir.path().join("run/index.html")).unwrap();
    assert!(html.contains("cnn.py · ") && html.contains("class=\"model\""), "the report names the model");
    assert!(
        html.contains("baseline in PyTorch") && html.contains("baseline on libtorch"),
        "each engine's probes"
    );
}

#[test]
fn a_model_with_a_dataset_trains_to_its_target_on_it() {
    let dir = temp_dir();
    let spec = checkout("examples/transformer.py");
    let flags = ["--tricks", "one-cycle,flip-tta", "--target", "0.3", "--no-batch-probe"];
    let out = run_model(dir.path(), spec.to_str().unwrap(), "run", &flags);
    assert!(out.status.success(), "run failed: {}", text(&out.stderr));
    let results: Results = store::load(&dir.path().join("run/results.json")).unwrap();
    let dataset = results.run.model.as_ref().and_then(|m| m.dataset.as_ref()).expect("its dataset()");
    assert_eq!((dataset.train_samples, dataset.test_samples), (4096, 512));
    let described = results.run.more_data.iter().find(|d| d.name == "transformer.py dataset()");
    let subsets = described.map(|d| (d.train_samples, d.test_samples));
    assert_eq!(subsets, Some((2_000, 500)), "the smoke profile's subsets");
    let cell =
        |id: &str| results.cells.iter().find(|c| c.id() == id).unwrap_or_else(|| panic!("no cell {id}"));
    for configuration in ["baseline", "one-cycle"] {
        let c = cell(&format!("model/{configuration}/b32/s0/tta"));
        assert_eq!(c.status, CellStatus::Ok, "{}: {:?}", c.id(), c.processes);
        let best = c.time_to_accuracy.as_ref().unwrap().best_metric;
        assert!(best >= 0.3, "{}: counting sequences are learnt past 30% in a few epochs ({best})", c.id());
    }
    assert!(
        results.cells.iter().all(|c| c.key.kind != CellKind::MemoryProbe),
        "--no-batch-probe leaves the largest batch unprobed"
    );
    let CellStatus::NotApplicable { reason, .. } = &cell("model/flip-tta/b32/s0/tta").status else {
        panic!("a dataset's inputs are not mirrored")
    };
    assert!(reason.contains("dataset()"), "{reason}");
    let CellStatus::NotApplicable { reason, .. } = &cell("model/one-cycle/b32/s0/tta@pytorch").status else {
        panic!("the PyTorch engine trains a user's model to a target on CIFAR-10's images only")
    };
    assert!(reason.contains("its own dataset() is trained on libtorch"), "{reason}");
}

#[test]
fn the_libtorch_engine_reproduces_the_eager_networks_float64_loss() {
    let dir = temp_dir();
    for example in ["examples/cnn.py", "examples/transformer.py"] {
        let prepared = dir.path().join(example.replace('/', "-"));
        let preparation = Preparation {
            spec: checkout(example).to_string_lossy().into_owned(),
            python: python(),
            batch_size: 4,
            image_size: 32,
            seed: 3,
        };
        let model = preparation.prepare(&prepared).unwrap();
        let eager = model.export.loss_float64.expect("an exported model records its eager loss");
        let batches = tch::Tensor::read_safetensors(prepared.join("batches.safetensors")).unwrap();
        let get =
            |name: &str| batches.iter().find(|(n, _)| n == name).map(|(_, t)| t.shallow_clone()).unwrap();
        let scripted = ScriptedModel::load(
            &prepared.join(EXPORT_FILE),
            &prepared.join(LOSS_FILE),
            &model,
            tch::Device::Cpu,
            tch::Kind::Double,
        )
        .unwrap();
        tch::manual_seed(3);
        let inputs = get("inputs.0");
        let inputs = if inputs.is_floating_point() { inputs.to_kind(tch::Kind::Double) } else { inputs };
        let outputs = scripted.forward(&inputs, true);
        let loss = scripted.loss(&outputs, &get("targets.0")).double_value(&[]);
        assert!(
            (loss - eager).abs() <= 1e-9 * eager.abs(),
            "{example}: libtorch {loss} against eager {eager}"
        );
    }
}

#[test]
fn a_bad_spec_is_refused_naming_it_before_anything_is_measured_and_a_run_keeps_its_cells() {
    let dir = temp_dir();
    let missing = run_model(dir.path(), "nowhere/mynet.py", "fresh", &[]);
    let stderr = text(&missing.stderr);
    assert_eq!(missing.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("--model nowhere/mynet.py") && stderr.contains("mynet.py"), "{stderr}");
    assert!(!dir.path().join("fresh").exists(), "nothing is written, not even the output folder");
    std::fs::write(
        dir.path().join("nofunction.py"),
        "import torch\n\ndef build():\n    return torch.nn.Linear(2, 2)\n",
    )
    .unwrap();
    let unfound = run_model(dir.path(), "nofunction.py", "fresh", &[]);
    let stderr = text(&unfound.stderr);
    assert_eq!(unfound.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("nofunction.py") && stderr.contains("build"),
        "the file's functions are listed: {stderr}"
    );
    let library = run_model(dir.path(), "keras:resnet", "fresh", &[]);
    let stderr = text(&library.stderr);
    assert_eq!(library.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("keras:resnet") && stderr.contains("torchvision:"), "{stderr}");

    let measured = run_model(
        dir.path(),
        checkout("examples/cnn.py").to_str().unwrap(),
        "kept",
        &["--tricks", "zero-grad-none"],
    );
    assert!(measured.status.success(), "{}", text(&measured.stderr));
    let results = dir.path().join("kept/results.json");
    let before = std::fs::read(&results).unwrap();
    let resumed = run_model(dir.path(), "nofunction.py", "kept", &["--tricks", "zero-grad-none", "--resume"]);
    assert_eq!(resumed.status.code(), Some(2), "{}", text(&resumed.stderr));
    assert_eq!(std::fs::read(&results).unwrap(), before, "a bad SPEC leaves the measured cells as they were");
}

#[test]
fn the_preparation_and_the_engine_apply_each_trick_to_a_users_model() {
    let script = checkout("scripts/engine/check_user_model.py");
    let out = Command::new(python()).arg(&script).output().unwrap();
    assert!(out.status.success(), "{}\n{}", text(&out.stdout), text(&out.stderr));
}
