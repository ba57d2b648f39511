//! The two engines do the same work. A real `run --engine both --trace` of both reference
//! workloads and every throughput and memory trick a CPU runs records a profiler trace of each
//! cell on each engine; from them (as `trickbench ops` reads them), in a training or evaluation
//! step:
//! - libtorch's reference calls the same arithmetic ATen operators as the PyTorch engine's, as
//!   often, except the harness's own ([`HARNESS_OPS`], each with its reason);
//! - each trick changes the same operators on both engines, by as many calls, except those and the
//!   ones its catalogue entry says differ ([`TrickInfo::ops_differ`](trickbench::tricks::TrickInfo)).

#[allow(dead_code)]
mod common;

use std::collections::BTreeMap;

use trickbench::engine::{Engine, HARNESS_OPS};
use trickbench::measure::ops::{kernel_differences, OpProfile};
use trickbench::report::ops::{traced_pairs, TracedPair};
use trickbench::results::schema::{CellKey, CellResult};
use trickbench::results::store;
use trickbench::tricks::Trick;

use common::cli::{synthetic_cifar, text, trickbench};
use common::dirs::{python, temp_dir};

/// Whether `op` is one of the harness's own operators.
fn harness(op: &str) -> bool {
    HARNESS_OPS.iter().any(|(name, _)| *name == op)
}

/// The tricks of `cell` that its reference lacks (none for the A/A control), and of the reference
/// those it is the reference for (`debug-off`'s anomaly-on reference).
fn tricks_between(cell: &CellKey, reference: &CellKey) -> Vec<Trick> {
    let mut tricks: Vec<Trick> = cell.tricks.iter().filter(|t| !reference.tricks.has(*t)).collect();
    tricks.extend(reference.reference_for);
    tricks
}

/// Whether one of `tricks` says in the catalogue that it changes different operators on the two
/// engines.
fn explained(tricks: &[Trick]) -> bool {
    tricks.iter().any(|t| t.info().ops_differ.is_some())
}

/// The calls per step of each arithmetic operator that `after` has more (or fewer) of than `before`.
fn change(before: &OpProfile, after: &OpProfile) -> BTreeMap<String, f64> {
    kernel_differences(before, after).into_iter().map(|(op, a, b)| (op, b - a)).collect()
}

/// The PyTorch pair's libtorch twin: the same cell, against the same reference, on libtorch.
fn twin<'a, 'r>(pairs: &'a [TracedPair<'r>], p: &TracedPair) -> Option<&'a TracedPair<'r>> {
    let on_libtorch = |c: &CellResult| c.key.id_on(Engine::Libtorch);
    pairs.iter().find(|l| {
        l.cell.key.engine == Engine::Libtorch
            && l.cell.id() == on_libtorch(p.cell)
            && l.reference.id() == on_libtorch(p.reference)
    })
}

/// Where `p` (PyTorch) and its twin `l` (libtorch) do different work beyond what is explained.
fn unexplained(p: &TracedPair, l: &TracedPair) -> Vec<String> {
    let mut found = Vec::new();
    let id = l.cell.id();
    if !explained(&l.reference.key.reference_for.into_iter().collect::<Vec<_>>()) {
        for (op, lt, py) in kernel_differences(&l.reference_ops, &p.reference_ops) {
            if !harness(&op) {
                found.push(format!("{}: {op} {lt} a step on libtorch, {py} in PyTorch", l.reference.id()));
            }
        }
    }
    let tricks = tricks_between(&l.cell.key, &l.reference.key);
    if explained(&tricks) {
        return found;
    }
    let (on_py, on_lt) = (change(&p.reference_ops, &p.cell_ops), change(&l.reference_ops, &l.cell_ops));
    let ops: std::collections::BTreeSet<&String> = on_py.keys().chain(on_lt.keys()).collect();
    for op in ops {
        let (a, b) = (on_py.get(op).copied().unwrap_or(0.0), on_lt.get(op).copied().unwrap_or(0.0));
        if (a - b).abs() > 1e-9 && !harness(op) {
            found.push(format!("{id}: {op} changed by {b:+} a step on libtorch, {a:+} in PyTorch"));
        }
    }
    found
}

/// A text of `bytes` bytes for the GPT: English sentences over and over.
fn shakespeare_like(bytes: usize) -> String {
    let verse = "To be, or not to be, that is the question: whether 'tis nobler in the mind to suffer \
                 the slings and arrows of outrageous fortune, or to take arms against a sea of troubles.\n";
    verse.repeat(bytes / verse.len() + 1)
}

#[test]
fn both_engines_call_the_same_operators_and_every_trick_changes_the_same_ones() {
    let dir = temp_dir();
    synthetic_cifar(dir.path(), "synth", 512, 256);
    std::fs::write(dir.path().join("text.txt"), shakespeare_like(60_000)).unwrap();
    let python = python();
    let args = [
        "run",
        "--profile",
        "smoke",
        "--workload",
        "all",
        "--device",
        "cpu",
        "--no-time-to-accuracy",
        "--engine",
        "both",
        "--tricks",
        "throughput,memory",
        "--rounds",
        "1",
        "--windows",
        "1",
        "--trace",
        "*",
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
    let pairs = traced_pairs(&results, &dir.path().join("run"), None).unwrap();

    let mut compared = Vec::new();
    let mut problems = Vec::new();
    for p in pairs.iter().filter(|p| p.cell.key.engine == Engine::Pytorch) {
        let l = twin(&pairs, p).unwrap_or_else(|| panic!("{} has no traced twin on libtorch", p.cell.id()));
        problems.extend(unexplained(p, l));
        compared.push(l.cell.id().to_string());
    }
    assert!(problems.is_empty(), "the engines do different work:\n{}", problems.join("\n"));

    for expected in [
        "resnet8/aa-control/b32/s0/train",
        "resnet8/channels-last/b32/s0/train",
        "resnet8/jit-fusion/b32/s0/train",
        "resnet8/checkpointing/b32/s0/train",
        "resnet8/no-grad-eval/b32/s0/eval",
        "gpt-mini/jit-fusion/b8/s0/train",
        "gpt-mini/flash-attention/b8/s0/train",
        "gpt-mini/sdpa-math/b8/s0/train",
        "gpt-mini/checkpointing/b8/s0/train",
        "gpt-mini/grad-accumulation/b8/s0/train",
        "gpt-mini/zero-grad-none/b8/s0/train",
    ] {
        assert!(compared.iter().any(|id| id == expected), "{expected} was not compared: {compared:?}");
    }
    // The check can fail: the references do real work, and a trick that rewrites the model
    // changes operators the harness list does not hold.
    let resnet = pairs.iter().find(|p| p.cell.id().as_str() == "resnet8/jit-fusion/b32/s0/train").unwrap();
    let convolutions = resnet.reference_ops.kernels.get("aten::mkldnn_convolution");
    assert!(convolutions.is_some_and(|&n| n > 0.0), "{:?}", resnet.reference_ops.kernels);
    let fused = change(&resnet.reference_ops, &resnet.cell_ops);
    assert!(fused.keys().any(|op| !harness(op)), "jit-fusion changed only harness operators: {fused:?}");
}
