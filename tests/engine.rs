//! `run --engine both` end to end against the real PyTorch (the set-up's `.venv/bin/python`): every
//! throughput and memory cell is measured on each engine in the same rounds, paired with its own
//! engine's reference, each engine with its A/A control, its PyTorch processes with a step-phase
//! breakdown and the live tensors' memory peak, and the report's first screen answers in
//! PyTorch's terms with libtorch's effect beside it; a Python that cannot run the engine is
//! refused naming the interpreter. The engine script's own checks (each trick applied as PyTorch
//! documents it, float64 agreement of the sides) run here too.

#[allow(dead_code)]
mod common;

use std::process::Command;

use trickbench::engine::Engine;
use trickbench::results::phases::StepPhase;
use trickbench::results::schema::{CellStatus, MeasurementDesign, Results};
use trickbench::results::store;

use common::cli::{text, trickbench};
use common::dirs::{checkout, python, temp_dir};

#[test]
fn both_engines_measure_each_cell_paired_on_its_own_engine_and_the_report_answers_in_pytorch_terms() {
    let dir = temp_dir();
    let python = python();
    let out = trickbench(
        dir.path(),
        &[
            "run",
            "--profile",
            "smoke",
            "--workload",
            "resnet8",
            "--device",
            "cpu",
            "--tricks",
            "channels-last,debug-off,zero-copy,checkpointing",
            "--engine",
            "both",
            "--python",
            python.to_str().unwrap(),
            "--no-time-to-accuracy",
            "--rounds",
            "1",
            "--windows",
            "2",
            "--steps-per-window",
            "2",
            "--out",
            "run",
        ],
    );
    let stderr = text(&out.stderr);
    assert!(out.status.success(), "run failed: {stderr}");
    let results: Results = store::load(&dir.path().join("run/results.json")).unwrap();
    let id = |engine: Engine, configuration: &str| {
        let suffix = if engine == Engine::Pytorch { "@pytorch" } else { "" };
        format!("resnet8/{configuration}/b32/s0/train{suffix}")
    };
    let cell = |id: &str| {
        results.cells.iter().find(|c| c.id().as_str() == id).unwrap_or_else(|| panic!("no cell {id}"))
    };
    for engine in [Engine::Libtorch, Engine::Pytorch] {
        for configuration in [
            "baseline",
            "aa-control",
            "channels-last",
            "debug-off",
            "baseline+debug-apis-on",
            "zero-copy",
            "checkpointing",
        ] {
            let c = cell(&id(engine, configuration));
            assert_eq!(c.status, CellStatus::Ok, "{}", c.id());
            assert_eq!(c.key.engine, engine);
        }
        let channels_last = cell(&id(engine, "channels-last"));
        let reference =
            channels_last.processes[0].paired.as_ref().expect("channels-last is paired").reference.clone();
        assert_eq!(reference.as_str(), id(engine, "baseline"), "paired with its own engine's baseline");
        let compared = results.comparisons.iter().find(|c| c.cell == channels_last.id()).unwrap();
        assert_eq!(
            (compared.design, compared.baseline.as_str()),
            (MeasurementDesign::Paired, id(engine, "baseline").as_str())
        );
        assert!(
            results.noise_floors.iter().any(|f| f.engine == engine && f.design == MeasurementDesign::Paired),
            "an A/A floor per engine: {:?}",
            results.noise_floors
        );
    }
    let measured = cell(&id(Engine::Pytorch, "channels-last"));
    for p in &measured.processes {
        assert_eq!(p.window_samples_per_s.len(), 2);
        assert!(
            p.memory.peak_allocated_bytes.is_some() && p.memory.peak_rss_bytes.is_some(),
            "{:?}",
            p.memory
        );
        let breakdown = p.step_breakdown.as_ref().expect("a PyTorch training process records its phases");
        assert!(
            breakdown.phase_ms(StepPhase::Forward).is_some()
                && breakdown.phase_ms(StepPhase::BatchWait).is_some()
        );
    }
    let live = |configuration: &str| {
        let c = cell(&id(Engine::Pytorch, configuration));
        c.processes[0].memory.peak_allocated_bytes.expect("the live CPU tensors' peak")
    };
    assert!(live("checkpointing") < live("baseline"), "checkpointing keeps fewer activations in PyTorch too");

    let recorded = results.system.pytorch.as_ref().expect("the run records the engine's Python");
    assert!(recorded.torch_version.starts_with("2.") && recorded.python.ends_with("python"), "{recorded:?}");
    let html = std::fs::read_to_string(dir.path().join("run/index.html")).unwrap();
    for words in
        ["Verdict in PyTorch", "On libtorch", "Baseline in eager PyTorch", "PyTorch engine: torch 2."]
    {
        assert!(html.contains(words), "the report lacks {words:?}");
    }
    let summary = std::fs::read_to_string(dir.path().join("run/summary.md")).unwrap();
    assert!(summary.contains("| Trick | Judged by | Verdict in PyTorch | Effect in PyTorch | On libtorch |"));
}

#[test]
fn a_python_that_cannot_run_the_engine_is_refused_naming_the_interpreter() {
    let dir = temp_dir();
    for (python, says) in [("/no/such/python", "does not start"), ("/bin/false", "cannot import torch")] {
        let out = trickbench(
            dir.path(),
            &["run", "--profile", "smoke", "--device", "cpu", "--engine", "pytorch", "--python", python],
        );
        let stderr = text(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{stderr}");
        assert!(stderr.contains("--engine") && stderr.contains(python) && stderr.contains(says), "{stderr}");
        assert!(!dir.path().join("reports").exists(), "nothing is written before the refusal");
    }
}

#[test]
fn the_engine_script_applies_each_trick_as_pytorch_documents_it() {
    let script = checkout("scripts/engine/check_engine.py");
    let out = Command::new(python()).arg(&script).output().unwrap();
    assert!(out.status.success(), "{}\n{}", text(&out.stdout), text(&out.stderr));
}
