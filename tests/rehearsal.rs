//! The rehearsal of a GPU run on the CPU (`run --device as-if-cuda:sm90`), short: the CUDA tricks
//! of the GPU check on ResNet-8 and the 2-layer GPT, both engines, one round, every case the plan
//! makes built and stepped, each call that needs a CUDA device stood in and named in the results.
//! The whole GPU plan's rehearsal is `scripts/device-check --as-if-cuda` (docs/gpu.md).
//!
//! It also holds what the rehearsal found of the GPU paths, each a case that a CPU run never
//! built: the strict-fp32 reference runs on the PyTorch engine; each side of a multi-arm process
//! has reserved bytes of its own, not the cache of the sides built before it; every cell's energy
//! is read over a span of its own; and, on a plain CPU run, each arm that forces an attention
//! backend records the one it forced, not the one of the arm built before it.

#[allow(dead_code)]
mod common;

use std::collections::BTreeSet;
use std::path::Path;

use trickbench::results::rehearsal::{RehearsalTally, Rehearsed};
use trickbench::results::schema::{CellResult, CellStatus, Results};
use trickbench::results::store;
use trickbench::tricks::Trick;
use trickbench::vocabulary::{AttentionBackend, StandIn};

use common::cli::{synthetic_cifar, text, trickbench};
use common::dirs::{python, temp_dir};

/// The GPU check's CUDA tricks that bring a call of their own to stand in for, or a reference of
/// their own (strict-fp32, amp-bf16 beside a forced backend); not cudnn-benchmark, only a flag in
/// processes of its own, which the whole GPU plan's rehearsal runs.
const TRICKS: &str = "amp,amp-bf16,tf32,cuda-graphs,pin-memory,sdpa-flash,sdpa-cudnn,sdpa-mem-efficient,\
                      sdpa-math,fp8-matmul";

/// `trickbench run` of `tricks` on `workload` in `dir` into `out` with `args`, smoke-sized, one
/// round of short windows; its results.
fn run(dir: &Path, out: &str, workload: &str, tricks: &str, args: &[&str]) -> Results {
    let python = python();
    let mut command = vec!["run", "--profile", "smoke", "--workload", workload, "--tricks", tricks];
    command.extend(["--no-time-to-accuracy", "--rounds", "1", "--windows", "2", "--steps-per-window", "1"]);
    command.extend([
        "--data",
        "data",
        "--text",
        "text.txt",
        "--out",
        out,
        "--python",
        python.to_str().unwrap(),
    ]);
    command.extend(args);
    let output = trickbench(dir, &command);
    assert!(output.status.success(), "{}\n{}", text(&output.stdout), text(&output.stderr));
    store::load(&dir.join(out).join("results.json")).unwrap()
}

/// A folder with CIFAR-10's synthetic images and a text for the GPT.
fn data() -> tempfile::TempDir {
    let dir = temp_dir();
    synthetic_cifar(dir.path(), "data", 512, 128);
    let text = "ROMEO:\nBut soft, what light through yonder window breaks?\n".repeat(300);
    std::fs::write(dir.path().join("text.txt"), text).unwrap();
    dir
}

/// The calls `cell`'s processes stood in for that not every case goes through.
fn own_stand_ins(cell: &CellResult) -> BTreeSet<StandIn> {
    cell.processes.iter().flat_map(|p| p.stood_in.iter().copied()).filter(|s| !s.every_case()).collect()
}

/// The stand-ins the trick `trick` brings to a cell of `cell`'s engine.
fn expected_stand_ins(cell: &CellResult) -> BTreeSet<StandIn> {
    let key = &cell.key;
    let pytorch = key.engine == trickbench::engine::Engine::Pytorch;
    let mut expected = BTreeSet::new();
    for trick in key.tricks.iter() {
        let stand_in = match trick {
            Trick::CudaGraphs => Some(StandIn::GraphCapture),
            Trick::Amp | Trick::AmpBf16 => Some(StandIn::AutocastDevice),
            Trick::PinMemory => Some(StandIn::PinnedMemory),
            Trick::SdpaCudnn | Trick::SdpaMemEfficient => Some(StandIn::AttentionKernel),
            // The PyTorch engine's fp8 linear asks autocast's state on the device type.
            Trick::Fp8Matmul if pytorch => Some(StandIn::AutocastDevice),
            _ => None,
        };
        expected.extend(stand_in);
    }
    expected
}

#[test]
fn a_rehearsal_steps_every_cuda_case_on_both_engines_and_names_each_call_it_stood_in_for() {
    let dir = data();
    let results =
        run(dir.path(), "rehearsal", "all", TRICKS, &["--device", "as-if-cuda:sm90", "--engine", "both"]);
    let tally = RehearsalTally::of(&results).expect("a rehearsal's tally");
    assert!(tally.refused.is_empty(), "refused: {:?}", tally.refused);
    assert!(tally.cases() > 30, "{}", tally.line());
    for cell in &results.cells {
        let id = cell.id();
        match cell.rehearsed() {
            None => assert!(matches!(cell.status, CellStatus::NotApplicable { when_run: false, .. }), "{id}"),
            Some(Rehearsed::Refused(why)) => panic!("{id}: refused: {why}"),
            Some(_) => {
                assert_eq!(own_stand_ins(cell), expected_stand_ins(cell), "{id}");
                assert!(cell.processes.iter().all(|p| p.stood_in.contains(&StandIn::Kernels)), "{id}");
            }
        }
    }
    let strict = |engine: &str| {
        let id = format!("resnet8/baseline+strict-fp32/b32/s0/train{engine}");
        results.cells.iter().find(|c| c.id() == id.as_str()).map(|c| c.status.clone())
    };
    assert_eq!(strict(""), Some(CellStatus::Ok), "libtorch's strict-fp32 reference");
    assert_eq!(
        strict("@pytorch"),
        Some(CellStatus::Ok),
        "the PyTorch engine takes the strict-fp32 reference"
    );
    each_side_has_reserved_bytes_of_its_own(&results);
    every_cell_reads_its_energy_over_a_span_of_its_own(&results);
}

/// Each measured side of a multi-arm process reserves at least what it allocates (on the
/// rehearsal the caching allocator's model: the highest allocated since the cache was last
/// emptied), not about 0 because the sides built before it left their blocks in the cache.
fn each_side_has_reserved_bytes_of_its_own(results: &Results) {
    for cell in results.cells.iter().filter(|c| c.status == CellStatus::Ok) {
        for p in cell.processes.iter().filter(|p| p.process_cells > 1) {
            let (Some(allocated), Some(reserved)) =
                (p.memory.peak_allocated_bytes, p.memory.peak_reserved_bytes)
            else {
                panic!("{}: a rehearsal reads the allocator's model: {:?}", cell.id(), p.memory)
            };
            assert!(
                reserved >= allocated,
                "{} round {}: reserved {reserved} of {allocated} allocated",
                cell.id(),
                p.round
            );
        }
    }
}

/// Every throughput cell reads the stand-in energy counter over a span of its own of at least a
/// second, on both engines alike.
fn every_cell_reads_its_energy_over_a_span_of_its_own(results: &Results) {
    for cell in results.cells.iter().filter(|c| c.status == CellStatus::Ok && !c.key.kind.runs_once()) {
        for p in &cell.processes {
            let energy = p.energy.unwrap_or_else(|| panic!("{}: {:?}", cell.id(), p.energy_unavailable));
            assert!(energy.interval_s >= 1.0 && energy.joules > 0.0, "{}: {energy:?}", cell.id());
        }
    }
}

#[test]
fn each_arm_forcing_an_attention_backend_records_its_own_whatever_the_arm_built_before_it() {
    let dir = data();
    let tricks = "sdpa-flash,sdpa-math,flash-attention";
    let results = run(dir.path(), "cpu", "gpt", tricks, &["--device", "cpu", "--engine", "libtorch"]);
    for (trick, backend) in
        [(Trick::SdpaFlash, AttentionBackend::FlashAttention), (Trick::SdpaMath, AttentionBackend::Math)]
    {
        let cell = results.cells.iter().find(|c| c.key.tricks.has(trick)).unwrap();
        assert_eq!(cell.status, CellStatus::Ok, "{}", cell.id());
        assert!(
            cell.processes.iter().all(|p| p.process_cells > 1),
            "{}: an arm of a multi-arm process",
            cell.id()
        );
        let ran: Vec<_> = cell.processes.iter().map(|p| p.attention_backend).collect();
        assert!(ran.iter().all(|&b| b == Some(backend)), "{}: {ran:?}", cell.id());
        assert_eq!(cell.attention_warning(), None, "{}", cell.id());
    }
}
