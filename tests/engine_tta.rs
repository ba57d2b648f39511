//! The PyTorch engine trains to a target with libtorch's recipe, and applies every convergence
//! trick with the same arithmetic. A real `run --engine both --tricks convergence` of both
//! reference workloads, each cell trained for a few steps and evaluated after every one of them,
//! must give on both engines:
//! - the same training loss at every step (float32, from the same initial weights on the same
//!   batches): to 1e-5 relative over the first two steps (1e-4 with Muon, whose Newton–Schulz
//!   iteration runs in bfloat16 in `torch.optim.Muon` and in float32 in trickbench's on a CPU),
//!   then to 1e-3 as float32 rounding grows;
//! - the same held-out metric after every step (accuracy to within a test image over the first
//!   two steps, then 1%);
//!
//! and every trick must change the training loss or the held-out metric against its reference on
//! both engines, so that a trick the engine ignored cannot pass. The learning rate and momentum of
//! every step are held to the recipe's by the run itself (a cell whose schedule differs fails).

#[allow(dead_code)]
mod common;

use trickbench::engine::Engine;
use trickbench::results::schema::{CellKind, CellResult, CellStatus, CurvePoint, Results};
use trickbench::results::store;
use trickbench::tricks::Trick;

use common::cli::{synthetic_cifar, text, trickbench};
use common::dirs::{python, temp_dir};

/// Six steps, evaluated after each, towards targets no cell reaches in them.
const PROFILE: &str = "\
[resnet.time_to_accuracy]
planned_steps = 6
eval_every_steps = 1
target = 0.99

[gpt.time_to_accuracy]
planned_steps = 6
eval_every_steps = 1
target = 0.01
";

/// A text of `bytes` bytes for the GPT: English sentences over and over.
fn shakespeare_like(bytes: usize) -> String {
    let verse = "To be, or not to be, that is the question: whether 'tis nobler in the mind to suffer \
                 the slings and arrows of outrageous fortune, or to take arms against a sea of troubles.\n";
    verse.repeat(bytes / verse.len() + 1)
}

/// The curve of a cell that trained to its target.
fn curve(cell: &CellResult) -> &[CurvePoint] {
    &cell.time_to_accuracy.as_ref().unwrap_or_else(|| panic!("{} has no curve", cell.id())).curve
}

/// Steps after which the two engines' float32 rounding (inputs standardised in another order,
/// multi-threaded reductions) has grown, chaotically and faster at a larger learning rate, beyond
/// the first steps' tolerance.
const EXACT_STEPS: usize = 2;

/// How far the training losses of the two engines may lie apart at `step`, relative, and their
/// held-out metrics, absolute (an accuracy: as a fraction of the test images).
fn tolerances(step: usize, muon: bool, accuracy: bool) -> (f64, f64) {
    let exact = step <= EXACT_STEPS;
    let loss = match (exact, muon) {
        (true, false) => 1e-5,
        (true, true) => 1e-4,
        (false, _) => 1e-3,
    };
    let metric = match (exact, accuracy) {
        (true, true) => 1.5 / TEST_IMAGES,
        (false, true) => 0.01,
        (_, false) => 10.0 * loss,
    };
    (loss, metric)
}

/// The synthetic CIFAR test split's images (each held-out evaluation's).
const TEST_IMAGES: f64 = 256.0;

/// Where the curves of the same cell on the two engines differ beyond [`tolerances`].
fn disagreements(libtorch: &CellResult, pytorch: &CellResult, accuracy: bool) -> Vec<String> {
    let muon = libtorch.key.tricks.has(Trick::Muon);
    let (l, p) = (curve(libtorch), curve(pytorch));
    let mut found = Vec::new();
    if l.len() != p.len() {
        found.push(format!("{}: {} points on libtorch, {} in PyTorch", libtorch.id(), l.len(), p.len()));
    }
    for (a, b) in l.iter().zip(p) {
        let (loss, metric) = tolerances(a.step, muon, accuracy);
        if let (Some(x), Some(y)) = (a.train_loss, b.train_loss) {
            if (x - y).abs() > loss * x.abs() {
                found.push(format!(
                    "{} step {}: training loss {x} on libtorch, {y} in PyTorch",
                    libtorch.id(),
                    a.step
                ));
            }
        }
        if (a.metric - b.metric).abs() > metric {
            found.push(format!(
                "{} step {}: metric {} on libtorch, {} in PyTorch",
                libtorch.id(),
                a.step,
                a.metric,
                b.metric
            ));
        }
    }
    found
}

/// Whether two curves differ anywhere: in a training loss or a held-out metric.
fn differ(a: &[CurvePoint], b: &[CurvePoint]) -> bool {
    a.len() != b.len()
        || a.iter()
            .zip(b)
            .any(|(x, y)| x.metric != y.metric || x.train_loss.zip(y.train_loss).is_some_and(|(u, v)| u != v))
}

/// The cell of `results` that `cell` is compared with: its configuration's reference in the
/// run's time-to-accuracy summaries, at the same seed.
fn reference_of<'r>(results: &'r Results, cell: &CellResult) -> Option<&'r CellResult> {
    let summary = results.time_to_accuracy.iter().find(|s| s.cells.contains(&cell.id()))?;
    let label = summary.reference.as_deref()?;
    let reference = results
        .time_to_accuracy
        .iter()
        .find(|s| s.label() == label && s.engine == cell.key.engine && s.workload == cell.key.workload)?;
    results.cells.iter().find(|c| reference.cells.contains(&c.id()) && c.key.seed == cell.key.seed)
}

#[test]
fn both_engines_train_every_convergence_trick_with_the_same_arithmetic() {
    let dir = temp_dir();
    synthetic_cifar(dir.path(), "synth", 512, 256);
    std::fs::write(dir.path().join("text.txt"), shakespeare_like(60_000)).unwrap();
    std::fs::write(dir.path().join("profile.toml"), PROFILE).unwrap();
    let python = python();
    let args = [
        "run",
        "--profile",
        "smoke",
        "--profile-file",
        "profile.toml",
        "--workload",
        "all",
        "--device",
        "cpu",
        "--engine",
        "both",
        "--tricks",
        "convergence",
        "--data",
        "synth",
        "--text",
        "text.txt",
        "--out",
        "run",
        "--python",
    ];
    let out = trickbench(dir.path(), &[&args[..], &[python.to_str().unwrap()]].concat());
    assert!(out.status.success(), "{}", text(&out.stderr));
    let results = store::load(&dir.path().join("run/results.json")).unwrap();

    let mut problems = Vec::new();
    let mut compared = Vec::new();
    for p in results
        .cells
        .iter()
        .filter(|c| c.key.engine == Engine::Pytorch && c.key.kind == CellKind::TimeToAccuracy)
    {
        let twin = p.key.id_on(Engine::Libtorch);
        let l =
            results.cells.iter().find(|c| c.id() == twin).expect("every PyTorch cell has a libtorch twin");
        match (&l.status, &p.status) {
            (CellStatus::Ok, CellStatus::Ok) => {}
            (CellStatus::Ok, CellStatus::NotApplicable { reason, .. }) if p.key.tricks.has(Trick::Muon) => {
                assert!(reason.contains("torch.optim.Muon takes 2-d matrices"), "{reason}");
                continue;
            }
            (CellStatus::NotApplicable { .. }, CellStatus::NotApplicable { .. }) => continue,
            (a, b) => panic!("{}: {a:?} on libtorch, {b:?} in PyTorch", p.id()),
        }
        let accuracy = p.key.workload.is_cnn();
        problems.extend(disagreements(l, p, accuracy));
        for cell in [l, p].into_iter().filter(|c| !c.key.tricks.is_baseline()) {
            let reference =
                reference_of(&results, cell).unwrap_or_else(|| panic!("{} has no reference", cell.id()));
            if !differ(curve(cell), curve(reference)) {
                problems.push(format!(
                    "{}: the same curve as {}: the trick was not applied",
                    cell.id(),
                    reference.id()
                ));
            }
        }
        compared.push(l.id().to_string());
    }
    assert!(problems.is_empty(), "the engines train differently:\n{}", problems.join("\n"));

    for expected in [
        "resnet8/baseline/b32/s0/tta",
        "resnet8/one-cycle/b32/s0/tta",
        "resnet8/adamw/b32/s0/tta",
        "resnet8/lars/b128/s0/tta",
        "resnet8/lamb/b128/s0/tta",
        "resnet8/grad-clipping/b32/s0/tta",
        "resnet8/input-norm/b32/s0/tta",
        "resnet8/batch-norm/b32/s0/tta",
        "resnet8/label-smoothing/b32/s0/tta",
        "resnet8/ema-weights/b32/s0/tta",
        "resnet8/flip-tta/b32/s0/tta",
        "resnet8/bn-momentum/b32/s0/tta",
        "gpt-mini/baseline/b8/s0/tta",
        "gpt-mini/one-cycle/b8/s0/tta",
        "gpt-mini/muon/b8/s0/tta",
        "gpt-mini/grad-clipping/b8/s0/tta",
    ] {
        assert!(compared.iter().any(|id| id == expected), "{expected} was not compared: {compared:?}");
    }
}
