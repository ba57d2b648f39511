//! Hand-built `Results` values for the report tests. None of these numbers were measured: they are
//! test fixtures, shaped like real runs so that every part of a report has something to draw.

use trickbench::bench::design::Design;
use trickbench::bench::profile::ProfileName;
use trickbench::device::DeviceSpec;
use trickbench::engine::Engine;
use trickbench::results::schema::{
    CellId, CellKey, CellKind, CellResult, CellStatus, Comparison, CurvePoint, DataInfo, Memory, Phase,
    Protocol, Results, TimeToAccuracy, SCHEMA_VERSION,
};
use trickbench::results::system::GpuInfo;
use trickbench::results::system::SystemInfo;
use trickbench::tricks::Trick;
use trickbench::vocabulary::QualityMetric;
use trickbench::workloads::WorkloadId;

use super::cells::{comparison, throughput, train_key, KeyWith};
use super::run::{protocol, synthetic_cifar10, RunInfoBuilder};

use Trick::*;

const TRAIN: CellKind = CellKind::Throughput { phase: Phase::Train };
const EVAL: CellKind = CellKind::Throughput { phase: Phase::Eval };
const MIB: u64 = 1024 * 1024;

fn results(device: DeviceSpec, host: &str, synthetic: bool) -> Results {
    let run = RunInfoBuilder::new(&format!("fixture-{host}"))
        .with_times("2026-11-30T05:00:00Z", "2026-11-30T05:20:00Z")
        .with_build(
            "0.1.0",
            "0123456789abcdef0123456789abcdef01234567",
            &["trickbench", "run", "--profile", "quick"],
        )
        .with_profile(ProfileName::Quick)
        .with_device(device)
        .with_data(DataInfo {
            path: "data/cifar10".to_owned(),
            synthetic,
            train_samples: 5000,
            test_samples: 1000,
            ..synthetic_cifar10()
        })
        .with_protocol(Protocol {
            warmup_steps: 5,
            windows_per_process: 5,
            steps_per_window: 10,
            cell_timeout_s: 600.0,
            target_ci_half_width: Some(0.05),
            max_windows_per_process: Some(10),
            ..protocol()
        })
        .build();
    Results {
        schema_version: SCHEMA_VERSION,
        run,
        system: system(device, host),
        cells: Vec::new(),
        comparisons: Vec::new(),
        time_to_accuracy: Vec::new(),
        noise_floors: Vec::new(),
        speedrun: Vec::new(),
        factorial: Vec::new(),
    }
}

fn system(device: DeviceSpec, host: &str) -> SystemInfo {
    SystemInfo {
        hostname: Some(host.to_owned()),
        os: Some("Linux (Debian GNU/Linux 13)".to_owned()),
        kernel: Some("6.1.0".to_owned()),
        cpu_model: Some("Test Fixture CPU".to_owned()),
        cpu_logical_cores: 2,
        cpu_physical_cores: Some(1),
        memory_total_bytes: 8 * 1024 * MIB,
        torch_threads: 2,
        libtorch_version: "2.11.0".to_owned(),
        cuda_runtime_version: device.is_cuda().then_some(13000),
        cudnn_version: device.is_cuda().then_some(91900),
        cuda_device_count: usize::from(device.is_cuda()),
        device,
        gpu: device.is_cuda().then(|| GpuInfo {
            name: "NVIDIA H200 (test fixture)".to_owned(),
            driver_version: "test fixture".to_owned(),
            memory_total_bytes: 141 * 1024 * MIB,
            compute_capability: "9.0".to_owned(),
        }),
        gpu_unavailable: (!device.is_cuda())
            .then(|| "NVML measures NVIDIA GPUs; this run is on the CPU".to_owned()),
        pytorch: None,
    }
}

fn key(tricks: &[Trick], batch_size: usize, seed: u64, kind: CellKind) -> CellKey {
    train_key(WorkloadId::Resnet20, tricks).with_batch(batch_size).with_seed(seed).with_kind(kind)
}

/// Adds a cell; `samples_per_s` and `memory_mib` make it a measured throughput cell.
fn add(
    r: &mut Results,
    key: CellKey,
    status: CellStatus,
    samples_per_s: Option<f64>,
    memory_mib: Option<u64>,
) -> CellId {
    let primary = |m: u64| {
        if r.run.device.is_cuda() {
            Memory {
                peak_allocated_bytes: Some(m * MIB),
                peak_reserved_bytes: Some(m * MIB * 5 / 4),
                peak_rss_bytes: None,
            }
        } else {
            Memory { peak_rss_bytes: Some(m * MIB), ..Memory::default() }
        }
    };
    let cell = CellResult {
        throughput: samples_per_s.map(throughput),
        memory: memory_mib.map(primary),
        ..CellResult::new(key, status)
    };
    let id = cell.id();
    r.cells.push(cell);
    id
}

fn compare(
    r: &mut Results,
    cell: &CellId,
    baseline: &CellId,
    speedup: f64,
    spread: f64,
    memory_ratio: Option<f64>,
) {
    r.comparisons.push(Comparison { memory_ratio, ..comparison(cell, baseline, speedup, spread) });
}

/// A learning curve rising towards `plateau` over `seconds` of training.
fn tta(target: f64, plateau: f64, seconds: f64) -> TimeToAccuracy {
    let curve: Vec<CurvePoint> = (1..=10)
        .map(|i| {
            let f = f64::from(i) / 10.0;
            CurvePoint {
                step: i as usize * 50,
                epoch: f * 5.0,
                train_s: f * seconds,
                wall_s: f * seconds * 1.1,
                metric: 0.1 + (plateau - 0.1) * (1.0 - (-3.0 * f).exp()),
                train_loss: Some(2.3 * (1.0 - 0.6 * f)),
            }
        })
        .collect();
    let hit = curve.iter().find(|p| p.metric >= target).copied();
    TimeToAccuracy {
        metric: QualityMetric::TestAccuracy,
        target,
        budget_s: seconds,
        time_to_target_s: hit.map(|p| p.train_s),
        wall_time_to_target_s: hit.map(|p| p.wall_s),
        epochs_to_target: hit.map(|p| p.epoch),
        best_metric: curve.iter().map(|p| p.metric).fold(0.0, f64::max),
        curve,
        compile_s: None,
    }
}

fn add_tta(r: &mut Results, tricks: &[Trick], seed: u64, status: CellStatus, tta: Option<TimeToAccuracy>) {
    add(r, key(tricks, 128, seed, CellKind::TimeToAccuracy), status, None, None);
    r.cells.last_mut().unwrap().time_to_accuracy = tta;
}

/// A CPU run on synthetic data with every kind of cell: ok, not applicable, failed, out of memory,
/// timeout, an evaluation cell, time-to-accuracy curves over two seeds, a stack of tricks and a
/// batch sweep.
pub fn cpu_run() -> Results {
    let mut r = results(DeviceSpec::Cpu, "fixture-cpu-host", true);
    let base = add(&mut r, key(&[], 128, 0, TRAIN), CellStatus::Ok, Some(410.0), Some(900));
    let rows: [(&[Trick], f64, f64, u64); 5] = [
        (&[ZeroGradNone], 1.01, 0.03, 895),
        (&[AvoidSync], 1.18, 0.04, 890),
        (&[ChannelsLast], 0.86, 0.05, 990),
        (&[AvoidSync, ZeroGradNone], 1.21, 0.04, 885),
        (&[AvoidSync, ChannelsLast, ZeroGradNone], 1.05, 0.05, 980),
    ];
    for (tricks, speedup, spread, mib) in rows {
        let id = add(&mut r, key(tricks, 128, 0, TRAIN), CellStatus::Ok, Some(410.0 * speedup), Some(mib));
        compare(&mut r, &id, &base, speedup, spread, Some(mib as f64 / 900.0));
    }
    // A noisy cell: its interval (±8%) is wider than the ±5% the protocol asks.
    let noisy = r.cells.iter_mut().find(|c| c.key.tricks == [ChannelsLast].into_iter().collect()).unwrap();
    let t = noisy.throughput.as_mut().unwrap();
    (t.ci_low_samples_per_s, t.ci_high_samples_per_s) =
        (t.median_samples_per_s * 0.92, t.median_samples_per_s * 1.08);
    (t.coefficient_of_variation, t.outlier_windows) = (Some(0.11), 2);
    // debug-off's reference: the baseline's (empty) trick set with debugging on, much slower; it
    // must not stand in for the baseline at the foot of the stack.
    let debugging_on = key(&[], 128, 0, TRAIN).with_reference_for(DebugOff);
    let reference = add(&mut r, debugging_on, CellStatus::Ok, Some(37.0), Some(900));
    let debug_off = add(&mut r, key(&[DebugOff], 128, 0, TRAIN), CellStatus::Ok, Some(412.0), Some(900));
    compare(&mut r, &debug_off, &reference, 11.1, 0.3, Some(1.0));
    for t in [Amp, AmpBf16, CudnnBenchmark] {
        let reason = format!("{t}: needs a CUDA GPU (test fixture)");
        add(
            &mut r,
            key(&[t], 128, 0, TRAIN),
            CellStatus::NotApplicable { reason, when_run: false },
            None,
            None,
        );
    }
    add(
        &mut r,
        key(&[NoBiasBeforeBn], 128, 0, TRAIN),
        CellStatus::Failed {
            error: "process exited with status 101".to_owned(),
            stderr_tail:
                "thread 'main' panicked at src/train/step.rs:42:9:\nshape mismatch [128, 16] vs [128, 10]"
                    .to_owned(),
        },
        None,
        None,
    );
    let eval_base = add(&mut r, key(&[], 128, 0, EVAL), CellStatus::Ok, Some(1500.0), Some(700));
    let eval = add(&mut r, key(&[NoGradEval], 128, 0, EVAL), CellStatus::Ok, Some(2400.0), Some(420));
    compare(&mut r, &eval, &eval_base, 1.6, 0.08, Some(0.6));
    // Batch sweep of the baseline: 64, 256 fit, 1024 does not (128 is above).
    add(&mut r, key(&[], 64, 0, TRAIN), CellStatus::Ok, Some(330.0), Some(640));
    add(&mut r, key(&[], 256, 0, TRAIN), CellStatus::Ok, Some(455.0), Some(1500));
    add(
        &mut r,
        key(&[], 1024, 0, TRAIN),
        CellStatus::OutOfMemory {
            error: "cannot allocate 4294967296 bytes (test fixture)".to_owned(),
            stderr_tail: String::new(),
        },
        None,
        None,
    );
    add_tta(&mut r, &[], 0, CellStatus::Ok, Some(tta(0.5, 0.62, 300.0)));
    add_tta(&mut r, &[], 1, CellStatus::Ok, Some(tta(0.5, 0.58, 320.0)));
    add_tta(&mut r, &[ZeroGradNone], 0, CellStatus::Ok, Some(tta(0.5, 0.64, 280.0)));
    add_tta(
        &mut r,
        &[AvoidSync],
        0,
        CellStatus::Timeout { limit_s: 600.0, stderr_tail: "epoch 3/5".to_owned() },
        None,
    );
    r
}

/// A CPU run of hand-written numbers on both engines: the baseline, `debug-off` (5.8× on
/// libtorch, 1.5× in PyTorch: intervals apart), `channels-last` (1.03× ± 0.02 on libtorch, a help,
/// and 1.01× ± 0.02 in PyTorch, no effect: intervals overlapping), `checkpointing` (0.7× the
/// memory on both, at 0.75× and 0.9× the throughput: judged by memory, no disagreement) and
/// `zero-copy`, measured on libtorch only (not applicable on the PyTorch engine).
pub fn two_engine_run() -> Results {
    let mut r = results(DeviceSpec::Cpu, "fixture-cpu-host", false);
    for (engine, base_rate, debug, channels, checkpointed) in
        [(Engine::Libtorch, 750.0, 5.8, 1.03, 0.75), (Engine::Pytorch, 700.0, 1.5, 1.01, 0.9)]
    {
        let on = |key: CellKey| CellKey { engine, ..key };
        let base = add(&mut r, on(key(&[], 128, 0, TRAIN)), CellStatus::Ok, Some(base_rate), Some(900));
        let debugging_on = on(key(&[], 128, 0, TRAIN).with_reference_for(DebugOff));
        let reference = add(&mut r, debugging_on, CellStatus::Ok, Some(base_rate / debug), Some(900));
        let debug_off =
            add(&mut r, on(key(&[DebugOff], 128, 0, TRAIN)), CellStatus::Ok, Some(base_rate), Some(900));
        compare(&mut r, &debug_off, &reference, debug, 0.1, Some(1.0));
        let rate = Some(base_rate * channels);
        let channels_last =
            add(&mut r, on(key(&[ChannelsLast], 128, 0, TRAIN)), CellStatus::Ok, rate, Some(900));
        compare(&mut r, &channels_last, &base, channels, 0.02, Some(1.0));
        let rate = Some(base_rate * checkpointed);
        let checkpointing =
            add(&mut r, on(key(&[Checkpointing], 128, 0, TRAIN)), CellStatus::Ok, rate, Some(630));
        compare(&mut r, &checkpointing, &base, checkpointed, 0.02, Some(0.7));
    }
    let zero_copy = add(&mut r, key(&[ZeroCopy], 128, 0, TRAIN), CellStatus::Ok, Some(760.0), Some(900));
    let base = key(&[], 128, 0, TRAIN).id();
    compare(&mut r, &zero_copy, &base, 1.01, 0.03, Some(1.0));
    let reason = "zero-copy: on the PyTorch engine: not applied there (test fixture)".to_owned();
    let not_applied = CellKey { engine: Engine::Pytorch, ..key(&[ZeroCopy], 128, 0, TRAIN) };
    add(&mut r, not_applied, CellStatus::NotApplicable { reason, when_run: false }, None, None);
    r
}

/// [`two_engine_run`] with `torch-compile` in PyTorch: 1.30× the baseline's throughput, and
/// trained to the target beside the baseline, which it reaches later (in 70 s and 3.5 epochs,
/// against 50 s and 2.5).
pub fn compiled_but_slower_to_target() -> Results {
    let mut r = two_engine_run();
    let on_pytorch = |key: CellKey| CellKey { engine: Engine::Pytorch, ..key };
    let base = on_pytorch(key(&[], 128, 0, TRAIN)).id();
    let compiled =
        add(&mut r, on_pytorch(key(&[TorchCompile], 128, 0, TRAIN)), CellStatus::Ok, Some(910.0), Some(900));
    compare(&mut r, &compiled, &base, 1.3, 0.03, Some(1.0));
    for (tricks, plateau) in [(&[][..], 0.62), (&[TorchCompile][..], 0.56)] {
        add(&mut r, on_pytorch(key(tricks, 128, 0, CellKind::TimeToAccuracy)), CellStatus::Ok, None, None);
        r.cells.last_mut().unwrap().time_to_accuracy = Some(tta(0.5, plateau, 100.0));
    }
    r.time_to_accuracy = trickbench::analysis::time_to_accuracy_summaries(&r.cells);
    r
}

/// A TEST FIXTURE standing in for a GPU run — hand-written numbers, not a measurement — on the same
/// profile as [`cpu_run`], so a comparison joins them. It lacks `no-bias-before-bn` and adds
/// `amp-bf16`-only cells that the CPU run does not have as measurements.
pub fn gpu_fixture() -> Results {
    let mut r = results(DeviceSpec::Cuda(0), "test-fixture-gpu-not-measured", false);
    let base = add(&mut r, key(&[], 128, 0, TRAIN), CellStatus::Ok, Some(21000.0), Some(300));
    let rows: [(&[Trick], f64, f64, u64); 6] = [
        (&[Amp], 2.1, 0.1, 170),
        (&[CudnnBenchmark], 1.07, 0.03, 310),
        (&[ChannelsLast], 1.3, 0.06, 290),
        (&[ZeroGradNone], 1.02, 0.03, 300),
        (&[AvoidSync], 1.35, 0.05, 300),
        (&[Amp, ChannelsLast], 2.6, 0.1, 160),
    ];
    for (tricks, speedup, spread, mib) in rows {
        let id = add(&mut r, key(tricks, 128, 0, TRAIN), CellStatus::Ok, Some(21000.0 * speedup), Some(mib));
        compare(&mut r, &id, &base, speedup, spread, Some(mib as f64 / 300.0));
    }
    add(
        &mut r,
        key(&[AmpBf16], 128, 0, TRAIN),
        CellStatus::OutOfMemory {
            error: "CUDA out of memory (test fixture)".to_owned(),
            stderr_tail: String::new(),
        },
        None,
        None,
    );
    r
}

/// A super-convergence run (time to accuracy of the baseline and of one-cycle over three seeds)
/// in which one-cycle reaches the target later: 300 s against 210 s for the baseline.
pub fn super_convergence_run() -> Results {
    let mut r = results(DeviceSpec::Cpu, "fixture-super-convergence", false);
    r.run.design = Design::SuperConvergence;
    r.run.id = "fixture-super-convergence-run".to_owned();
    for seed in 0..3 {
        add_tta(&mut r, &[], seed, CellStatus::Ok, Some(tta(0.5, 0.62, 300.0)));
        add_tta(&mut r, &[OneCycle], seed, CellStatus::Ok, Some(tta(0.5, 0.55, 600.0)));
    }
    r.time_to_accuracy = trickbench::analysis::time_to_accuracy_summaries(&r.cells);
    r
}

/// A batch-size sweep of the baseline: throughput at four batch sizes and memory probes up to the
/// first batch that does not fit.
pub fn batch_sweep_run() -> Results {
    let mut r = results(DeviceSpec::Cpu, "fixture-batch-sweep", false);
    r.run.design = Design::BatchSweep;
    r.run.id = "fixture-batch-sweep-run".to_owned();
    for (batch, samples_per_s, mib) in
        [(64, 330.0, 640), (128, 410.0, 900), (256, 455.0, 1500), (512, 470.0, 2700)]
    {
        add(&mut r, key(&[], batch, 0, TRAIN), CellStatus::Ok, Some(samples_per_s), Some(mib));
        add(&mut r, key(&[], batch, 0, CellKind::MemoryProbe), CellStatus::Ok, None, Some(mib));
    }
    add(
        &mut r,
        key(&[], 1024, 0, CellKind::MemoryProbe),
        CellStatus::OutOfMemory {
            error: "cannot allocate (test fixture)".to_owned(),
            stderr_tail: String::new(),
        },
        None,
        None,
    );
    r
}

/// `r` with a step breakdown in every measured training-throughput cell: a process whose step time
/// (the batch over the cell's throughput) is split into fixed shares of the phases, timed by the
/// clock of `r`'s device; tricks that change the data path or the update move their own phase.
pub fn with_step_breakdowns(mut r: Results) -> Results {
    use trickbench::results::phases::{PhaseClock, PhaseTime, StepBreakdown, StepPhase};
    let clock = if r.run.device.is_cuda() { PhaseClock::CudaEvents } else { PhaseClock::Host };
    for cell in r.cells.iter_mut().filter(|c| c.key.kind == TRAIN && c.status == CellStatus::Ok) {
        let Some(samples_per_s) = cell.throughput.map(|t| t.median_samples_per_s) else { continue };
        let step_ms = cell.key.batch_size as f64 / samples_per_s * 1e3;
        let shares = [
            (StepPhase::BatchWait, if cell.key.tricks.has(AvoidSync) { 0.02 } else { 0.08 }),
            (StepPhase::HostToDevice, 0.12),
            (StepPhase::Forward, 0.28),
            (StepPhase::Backward, 0.44),
            (StepPhase::Optimizer, 0.06),
            (StepPhase::Metrics, 0.02),
        ];
        let total: f64 = shares.iter().map(|s| s.1).sum();
        let phases = shares
            .iter()
            .map(|&(phase, share)| PhaseTime { phase, mean_ms: step_ms * share / total })
            .collect();
        let breakdown = StepBreakdown { clock, steps: 3, phases, samples_per_s: samples_per_s * 0.98 };
        let mut process = super::cells::measurement(0, vec![samples_per_s]);
        process.step_breakdown = Some(breakdown);
        cell.processes.push(process);
    }
    r
}

/// A TEST FIXTURE standing in for one version of a quick CPU run on `fixture-cpu-host`: run `id`,
/// started at `started_at` (RFC 3339) from `commit`, measuring the baseline and each of `tricks`
/// with the speed-up ± spread given (peak memory unchanged). Runs of it at several commits make a
/// history.
pub fn version_run(id: &str, started_at: &str, commit: &str, tricks: &[(Trick, f64, f64)]) -> Results {
    let mut r = results(DeviceSpec::Cpu, "fixture-cpu-host", false);
    r.run.id = id.to_owned();
    r.run.started_at = started_at.to_owned();
    r.run.git_commit = Some(commit.to_owned());
    let base = add(&mut r, key(&[], 128, 0, TRAIN), CellStatus::Ok, Some(400.0), Some(900));
    for &(trick, speedup, spread) in tricks {
        let id = add(&mut r, key(&[trick], 128, 0, TRAIN), CellStatus::Ok, Some(400.0 * speedup), Some(900));
        compare(&mut r, &id, &base, speedup, spread, Some(1.0));
    }
    r
}
