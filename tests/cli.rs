//! The `trickbench` binary end to end: real (tiny) training runs into a temp dir, artefacts
//! verified, and clear errors for bad input.

#[allow(dead_code)]
mod common;

use std::path::Path;

use trickbench::bench::profile::{ProfileName, ProfileRequest};
use trickbench::results::schema::{
    ArmsPerProcess, CellKind, CellResult, CellStatus, MeasurementDesign, Phase, Results,
};
use trickbench::results::store;
use trickbench::vocabulary::Precision;
use trickbench::vocabulary::QualityMetric;
use trickbench::workloads::gpt::AttentionBackend;
use trickbench::workloads::Family;

use common::cells::cell;
use common::cli::{command, synthetic_cifar, text, trickbench};
use common::dirs::temp_dir;

#[test]
fn list_shows_every_trick_with_guide_number_and_cpu_applicability() {
    let out = trickbench(Path::new("."), &["list", "--device", "cpu"]);
    assert!(out.status.success());
    let stdout = text(&out.stdout);
    for trick in trickbench::tricks::Trick::ALL {
        assert!(stdout.contains(trick.id()), "{trick} missing from:\n{stdout}");
        assert!(stdout.contains(trick.on(Family::CifarResnet)), "{trick}'s on-description missing");
    }
    assert!(stdout.contains("guide #4") && stdout.contains("guide #16"));
    assert!(stdout.contains("not applicable to resnet8 on cpu: needs a CUDA GPU"));
}

#[test]
fn plan_fits_the_tricks_into_the_budget_and_refuses_what_it_cannot_plan() {
    let dir = temp_dir();
    let gpu = ["plan", "--assume-gpu", "--workload", "resnet", "--profile", "standard", "--process-s", "8"];
    // A warm-up of 8 s, then on each engine one process of the baseline with the A/A control and
    // amp-bf16 as its arms, each further arm adding half of 8 s: 8 + 2 × 16 s. channels-last
    // would be another arm on each engine, and 2 rounds twice as many.
    let out = trickbench(
        dir.path(),
        &[&gpu[..], &["--tricks", "amp-bf16,channels-last", "--budget-s", "44"]].concat(),
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
    let plan = text(&out.stdout);
    assert!(plan.contains("1 round, 3 processes, about 40 s of the 44 s budget"), "{plan}");
    assert!(plan.contains("left out for time: channels-last (+0 processes, +8 s)"), "{plan}");
    let out =
        trickbench(dir.path(), &[&gpu[..], &["--tricks", "amp-bf16", "--budget-s", "100", "--tsv"]].concat());
    assert_eq!(text(&out.stdout), "2\tamp-bf16\t6\t80\t\n");
    let missing = dir.path().join("missing.json");
    let missing = missing.to_str().unwrap();
    let cases: [(&[&str], &str); 4] = [
        (&["plan", "--budget-s", "60"], "give the cost of a process: --process-s"),
        (
            &["plan", "--budget-s", "-5", "--process-s", "8"],
            "--budget-s -5: give a positive number of seconds",
        ),
        (
            &["plan", "--budget-s", "60", "--process-s", "pytorch=0"],
            "'0' is not a positive number of seconds",
        ),
        (&["plan", "--budget-s", "60", "--costs-from", missing], missing),
    ];
    for (args, message) in cases {
        let out = trickbench(dir.path(), args);
        let stderr = text(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {stderr}");
        assert!(stderr.contains(message), "{args:?}: {stderr}");
    }
}

#[test]
fn bad_flags_name_the_value_and_the_valid_choices() {
    let dir = temp_dir();
    let cases: [(&[&str], &[&str]); 5] = [
        (&["run", "--tricks", "amp,warp-speed"], &["'warp-speed'", "channels-last"]),
        (&["run", "--workload", "vgg"], &["'vgg'", "resnet56"]),
        (&["run", "--profile", "huge"], &["'huge'", "auto", "quick"]),
        (&["run", "--device", "tpu"], &["'tpu'", "cuda:N"]),
        (&["run", "--device", "cuda:3"], &["--device cuda:3"]),
    ];
    for (args, expected) in cases {
        let out = trickbench(dir.path(), args);
        assert!(!out.status.success(), "{args:?} must fail");
        let stderr = text(&out.stderr);
        for e in expected {
            assert!(stderr.contains(e), "{args:?}: '{e}' not in: {stderr}");
        }
    }
    let out = trickbench(dir.path(), &["report", "missing.json"]);
    assert!(text(&out.stderr).contains("missing.json"), "{}", text(&out.stderr));
}

#[test]
fn single_arm_gives_each_paired_cell_a_process_of_its_own_pair() {
    let dir = temp_dir();
    let run = ["run", "--profile", "smoke", "--workload", "resnet8", "--device", "cpu", "--data", "synth"];
    let rest =
        ["--tricks", "avoid-sync,channels-last", "--no-time-to-accuracy", "--single-arm", "--out", "run"];
    let out = trickbench(dir.path(), &[&run[..], &rest].concat());
    assert!(out.status.success(), "{}", text(&out.stderr));
    let results: Results = store::load(&dir.path().join("run/results.json")).unwrap();
    assert_eq!(results.run.protocol.arms_per_process, ArmsPerProcess::One);
    let processes = results.cells.iter().flat_map(|c| &c.processes);
    assert!(processes.clone().all(|p| p.process_cells == 1));
    let avoid_sync = cell(&results, "resnet8/avoid-sync/b32/s0/train");
    assert!(avoid_sync.processes.iter().all(|p| p.paired.is_some()), "still paired with the baseline");
    // The control has processes of its own, so it also gives the floor of the process design.
    let designs: Vec<_> = results.noise_floors.iter().map(|f| f.design).collect();
    assert_eq!(designs, [MeasurementDesign::Paired, MeasurementDesign::Processes]);
    let refused = trickbench(dir.path(), &[&run[..], &["--single-arm", "--unpaired"]].concat());
    assert_eq!(refused.status.code(), Some(2));
    assert!(text(&refused.stderr).contains("--unpaired"), "{}", text(&refused.stderr));
}

#[test]
fn smoke_run_measures_every_cell_writes_results_and_report_and_falls_back_to_synthetic_data() {
    let dir = temp_dir();
    let args = [
        "run",
        "--profile",
        "smoke",
        "--workload",
        "resnet",
        "--device",
        "cpu",
        "--tricks",
        "avoid-sync,channels-last,no-grad-eval,amp,one-cycle",
        "--data",
        "no-such-dir",
        "--out",
        "run",
    ];
    // An 80-column terminal's width, as a shell exports it for a program whose output is piped.
    let out = command(dir.path(), &args).env("COLUMNS", "80").output().expect("trickbench runs");
    let stderr = text(&out.stderr);
    assert!(out.status.success(), "run failed: {stderr}");
    assert!(stderr.contains("no CIFAR-10 in no-such-dir") && stderr.contains("SYNTHETIC"), "{stderr}");

    let results: Results = store::load(&dir.path().join("run/results.json")).unwrap();
    assert!(results.run.data.synthetic);
    assert_eq!(results.run.data.train_samples, 2_000);
    // one-cycle trains to the target, so the baseline does too.
    assert_eq!(results.cells.len(), 9, "baseline train+eval+time-to-accuracy, the A/A control, 5 tricks");
    for cell in &results.cells {
        match &cell.status {
            CellStatus::Ok => {}
            CellStatus::NotApplicable { reason, .. } => {
                assert!(cell.id().as_str().contains("/amp/") && reason.contains("CUDA"))
            }
            other => panic!("{}: {other:?}", cell.id()),
        }
    }
    let baseline = cell(&results, "resnet8/baseline/b32/s0/train");
    assert_eq!(baseline.processes.len(), 2, "one process per round");
    // The baseline is the reference of its arms' multi-arm process: a window beside every second
    // arm's, at least as many as each arm's.
    assert!(baseline.processes.iter().all(|p| p.process_cells > 1 && p.window_samples_per_s.len() >= 2));
    assert!(baseline.memory.unwrap().peak_rss_bytes.unwrap() > 50 << 20);
    // Peaks are reset after warm-up in throughput cells, the warm-up peak kept beside them.
    assert!(baseline.warmup_memory.is_some_and(|m| m.peak_rss_bytes.is_some()));
    assert!(baseline.processes.iter().all(|p| p.warmup_memory.is_some()));
    let no_gpu = "NVML measures NVIDIA GPUs; this run is on the CPU";
    assert!(baseline.processes.iter().all(|p| p.energy_unavailable.as_deref() == Some(no_gpu)));
    assert!(baseline
        .processes
        .iter()
        .all(|p| p.precision == Precision::Fp32 && p.attention_backend.is_none()));
    // Baseline reads loss and accuracy every timed step (its windows are the reference's of its
    // arms' process, steps of 32 images); avoid-sync reads nothing inside the windows.
    assert!(baseline.processes.iter().all(|p| p.host_metric_reads as usize == 2 * p.timed_samples / 32));
    let avoid_sync = cell(&results, "resnet8/avoid-sync/b32/s0/train");
    assert!(avoid_sync.processes.iter().all(|p| p.host_metric_reads == 0));
    assert_eq!(
        cell(&results, "resnet8/no-grad-eval/b32/s0/eval").key.kind,
        CellKind::Throughput { phase: Phase::Eval }
    );
    assert_eq!(results.comparisons.len(), 4, "3 tricks that ran and the A/A control");
    // Paired by default: each trick's processes hold the baseline beside it, so do the control's;
    // one multi-arm process a round holds them all, so the control's windows and the baseline's
    // are not in different processes and give no floor of the process design.
    let designs: Vec<_> = results.noise_floors.iter().map(|f| f.design).collect();
    assert_eq!(designs, [MeasurementDesign::Paired]);
    assert_eq!(results.run.protocol.arms_per_process, ArmsPerProcess::Many);
    assert!(avoid_sync.processes.iter().all(|p| p.process_cells >= 3), "avoid-sync shares its process");
    assert!(results.comparisons.iter().all(|c| c.design == MeasurementDesign::Paired));
    let paired = avoid_sync.processes.iter().map(|p| p.paired.as_ref().expect("paired windows"));
    assert!(paired.clone().all(|w| w.reference == baseline.id() && w.ratios().len() == 2));
    let stdout = text(&out.stdout);
    assert!(stdout.contains("Noise floor (A/A control): paired ±"), "{stdout}");
    for (stream, printed) in [("stdout", &stdout), ("stderr", &stderr)] {
        let wide = printed.lines().find(|l| l.chars().count() > 80);
        assert!(wide.is_none(), "a line of {stream} wider than 80 columns: {wide:?}");
    }
    assert!(stdout.contains("time: ") && stdout.contains("in timed windows"), "{stdout}");

    let tta_cell = cell(&results, "resnet8/baseline/b32/s0/tta");
    assert!(tta_cell.processes.iter().all(|p| p.warmup_memory.is_none()));
    let tta = tta_cell.time_to_accuracy.clone().unwrap();
    assert_eq!(tta.curve[0].train_s, 0.0, "the curve starts with the untrained network");
    assert!(tta.time_to_target_s.is_some(), "synthetic data is learnable: {tta:?}");

    let stdout = text(&out.stdout);
    assert!(stdout.contains("SYNTHETIC data"), "{stdout}");
    assert!(stdout.contains("not applicable (1)") && stdout.contains("needs a CUDA GPU: amp"), "{stdout}");
    // Every compared trick stands under its verdict on its own metric, as in the report.
    let verdicts = ["helps", "hurts", "no measurable effect", "inconclusive"];
    let mut under: Option<&str> = None;
    let mut placed = Vec::new();
    for line in stdout.lines() {
        let words = line.trim();
        if let Some(v) = verdicts.iter().find(|v| line.starts_with("  ") && words.starts_with(**v)) {
            under = Some(v);
        } else if let Some(trick) =
            ["avoid-sync", "channels-last", "no-grad-eval (eval)"].iter().find(|t| words.starts_with(**t))
        {
            placed.push((*trick, under.unwrap_or_else(|| panic!("{trick} under no verdict: {stdout}"))));
        }
    }
    assert_eq!(placed.len(), 3, "{placed:?}: {stdout}");
    for file in ["index.html", "summary.md", "cells.csv"] {
        assert!(dir.path().join("run").join(file).is_file(), "{file} missing");
    }
    let html = std::fs::read_to_string(dir.path().join("run/index.html")).unwrap();
    let page: String = scraper::Html::parse_document(&html).root_element().text().collect();
    for c in &results.cells {
        assert!(page.contains(c.id().as_str()), "{} missing from the HTML report", c.id());
    }
    assert_step_breakdowns(&results, &dir.path().join("run"), &html);

    // A second run into the same directory refuses to overwrite; --resume has nothing left to do.
    let again = trickbench(
        dir.path(),
        &["run", "--profile", "smoke", "--device", "cpu", "--data", "no-such-dir", "--out", "run"],
    );
    assert!(!again.status.success() && text(&again.stderr).contains("--resume"));
}

/// Every measured training-throughput cell of `results` has a step breakdown with the phases of a
/// single-device eager step, on the host clock, and the report in `run` shows them: the figure,
/// the table beside the speed-ups and the CSV's columns.
fn assert_step_breakdowns(results: &Results, run: &Path, html: &str) {
    use trickbench::results::phases::PhaseClock;
    use trickbench::results::phases::StepPhase::{
        Backward, BatchWait, Forward, HostToDevice, Metrics, Optimizer,
    };
    let train = |c: &&CellResult| c.key.kind == (CellKind::Throughput { phase: Phase::Train });
    let measured: Vec<&CellResult> =
        results.cells.iter().filter(train).filter(|c| c.status == CellStatus::Ok).collect();
    assert!(!measured.is_empty());
    for cell in measured {
        let b = cell.step_breakdown().unwrap_or_else(|| panic!("{} has no step breakdown", cell.id()));
        assert_eq!(b.clock, PhaseClock::Host);
        let phases: Vec<_> = b.phases.iter().map(|p| p.phase).collect();
        assert_eq!(phases, [BatchWait, HostToDevice, Forward, Backward, Optimizer, Metrics], "{}", cell.id());
        assert!(b.step_ms() > 0.0 && b.samples_per_s > 0.0, "{}: {b:?}", cell.id());
    }
    let page = scraper::Html::parse_document(html);
    let section = scraper::Selector::parse("section#phases").unwrap();
    let section = page.select(&section).next().expect("the step-phase section");
    let text: String = section.text().collect();
    assert!(text.contains("Largest change against its reference") && text.contains(" ms"), "{text}");
    let figure = std::fs::read_dir(run.join("plots")).unwrap().flatten().any(|f| {
        f.file_name().to_string_lossy().starts_with("phases-")
            && f.file_name().to_string_lossy().ends_with(".png")
    });
    assert!(figure, "no phases figure in {}", run.join("plots").display());
    let csv = std::fs::read_to_string(run.join("cells.csv")).unwrap();
    let header = csv.lines().next().unwrap();
    assert!(header.contains("step_forward_ms") && header.contains("machine_warning"), "{header}");
}

/// A small corpus with a learnable structure: made-up sentences from a few words, in an order
/// drawn from a fixed linear congruential sequence.
/// Returns the size of its vocabulary.
fn write_corpus(path: &Path, chars: usize) -> usize {
    let words = [
        "The", "king", "speaks,", "and", "Queen", "Mab", "answers:", "joy", "to", "her", "lord!", "Why?",
        "Fie;", "exit", "vex", "zeal",
    ];
    let mut state: u64 = 7;
    let mut text = String::new();
    while text.len() < chars {
        state = state.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1_442_695_040_888_963_407);
        text.push_str(words[(state >> 33) as usize % words.len()]);
        text.push(if (state >> 20).is_multiple_of(7) { '\n' } else { ' ' });
    }
    std::fs::write(path, &text).unwrap();
    text.chars().collect::<std::collections::BTreeSet<_>>().len()
}

#[test]
fn gpt_trains_on_a_text_file_beside_the_resnet_in_one_run_and_one_report() {
    let dir = temp_dir();
    let vocabulary = write_corpus(&dir.path().join("corpus.txt"), 40_000);
    assert!(vocabulary > 30, "an untrained model's loss, ln {vocabulary}, must lie above the target 3.0");
    let out = trickbench(
        dir.path(),
        &[
            "run",
            "--profile",
            "smoke",
            "--workload",
            "all",
            "--device",
            "cpu",
            "--tricks",
            "flash-attention,channels-last,jit-fusion,one-cycle",
            "--data",
            "no-such-dir",
            "--text",
            "corpus.txt",
            "--rounds",
            "1",
            "--windows",
            "3",
            "--steps-per-window",
            "2",
            "--out",
            "run",
        ],
    );
    let stderr = text(&out.stderr);
    assert!(out.status.success(), "run failed: {stderr}");
    // The ResNet's table comes as soon as it is measured, with what the GPT will take, and once.
    let stdout = text(&out.stdout);
    let resnet = stdout.find("\nresnet8 · ").expect("the ResNet's answer");
    assert!(resnet < stdout.find("\ngpt-mini · ").expect("the GPT's answer"), "{stdout}");
    assert_eq!(stdout.matches("\nresnet8 · ").count(), 1, "printed once, as it finished: {stdout}");
    assert!(stderr.contains("next: gpt-mini, ") && stderr.contains(" at this run's pace"), "{stderr}");
    let results: Results = store::load(&dir.path().join("run/results.json")).unwrap();
    let protocol = &results.run.protocol;
    assert_eq!((protocol.rounds, protocol.windows_per_process, protocol.steps_per_window), (1, 3, 2));
    assert_eq!(protocol.max_windows_per_process, Some(3), "--windows times exactly that many");
    let text_data = results.run.more_data.first().expect("the text is the run's second dataset");
    assert_eq!((text_data.name.as_str(), text_data.sample_unit.as_str()), ("corpus.txt", "tokens"));
    let characters = std::fs::read_to_string(dir.path().join("corpus.txt")).unwrap().chars().count();
    assert_eq!(text_data.train_samples, characters * 9 / 10, "the first 90% of the characters train");
    let na = |id: &str| match &cell(&results, id).status {
        CellStatus::NotApplicable { reason, .. } => reason.clone(),
        other => panic!("{id} should be not applicable: {other:?}"),
    };
    assert!(na("resnet8/flash-attention/b32/s0/train").contains("no attention"));
    assert!(na("gpt-mini/channels-last/b8/s0/train").contains("no convolutions"));
    for id in [
        "gpt-mini/baseline/b8/s0/train",
        "gpt-mini/flash-attention/b8/s0/train",
        "gpt-mini/jit-fusion/b8/s0/train",
    ] {
        let gpt = cell(&results, id);
        assert_eq!(gpt.status, CellStatus::Ok, "{id}");
        // A window of 64 tokens is 64 samples: throughput counts tokens.
        assert!(gpt.processes.iter().all(|p| p.timed_samples.is_multiple_of(64) && p.timed_samples > 0));
        let windows: Vec<usize> = gpt.processes.iter().map(|p| p.window_samples_per_s.len()).collect();
        if gpt.key.tricks.is_empty() {
            // The baseline is the reference of its arms' process: it times a window beside every
            // second arm's.
            assert!(
                windows.len() == 1 && windows[0] >= 3,
                "{id}: one round of the reference's windows: {windows:?}"
            );
        } else {
            assert_eq!(windows, [3], "{id}: one round of three windows, as the flags say");
        }
    }
    // gpt-mini has no dropout, with which PyTorch's CPU SDPA runs its flash kernel.
    let attention = |id: &str| cell(&results, id).processes[0].attention_backend;
    assert_eq!(attention("gpt-mini/baseline/b8/s0/train"), Some(AttentionBackend::Explicit));
    assert_eq!(attention("gpt-mini/flash-attention/b8/s0/train"), Some(AttentionBackend::FlashAttention));
    assert_eq!(attention("resnet8/baseline/b32/s0/train"), None);
    let tta = cell(&results, "gpt-mini/baseline/b8/s0/tta").time_to_accuracy.clone().unwrap();
    assert_eq!(tta.metric, QualityMetric::ValidationLoss);
    let untrained = tta.curve[0].metric;
    let uniform = (vocabulary as f64).ln();
    assert!((untrained - uniform).abs() < 0.5, "an untrained GPT is near uniform: {untrained} vs {uniform}");
    assert!(tta.best_metric < untrained && tta.time_to_target_s.is_some(), "{tta:?}");
    assert!(results.comparisons.iter().any(|c| c.cell == "gpt-mini/flash-attention/b8/s0/train"));

    let html = std::fs::read_to_string(dir.path().join("run/index.html")).unwrap();
    let page: String = scraper::Html::parse_document(&html).root_element().text().collect();
    assert!(page.contains("gpt-mini") && page.contains("resnet8"), "both workloads in one report");
    assert!(page.contains("validation loss ≤ 3.000") && page.contains("tokens/s"));
    assert!(
        page.contains(&format!("{} training and", characters * 9 / 10)) && page.contains("held-out tokens")
    );
}

#[test]
fn gpt_text_problems_name_the_file_and_the_flag() {
    let dir = temp_dir();
    let gpt_run = |text_file: &str| {
        trickbench(
            dir.path(),
            &["run", "--profile", "smoke", "--workload", "gpt", "--device", "cpu", "--text", text_file],
        )
    };
    let missing = gpt_run("absent.txt");
    let stderr = text(&missing.stderr);
    assert!(
        !missing.status.success() && stderr.contains("--text") && stderr.contains("absent.txt"),
        "{stderr}"
    );
    assert!(stderr.contains("data fetch shakespeare"), "{stderr}");
    std::fs::write(dir.path().join("latin1.txt"), b"caf\xe9 au lait").unwrap();
    let bad = gpt_run("latin1.txt");
    let stderr = text(&bad.stderr);
    assert!(!bad.status.success() && stderr.contains("latin1.txt") && stderr.contains("UTF-8"), "{stderr}");

    // Under --workload all a missing text makes the GPT cells not applicable, with the reason.
    let all = trickbench(
        dir.path(),
        &[
            "run",
            "--profile",
            "smoke",
            "--device",
            "cpu",
            "--tricks",
            "channels-last",
            "--no-time-to-accuracy",
            "--data",
            "no-such-dir",
            "--text",
            "absent.txt",
            "--out",
            "run",
        ],
    );
    assert!(all.status.success(), "{}", text(&all.stderr));
    let results: Results = store::load(&dir.path().join("run/results.json")).unwrap();
    let gpt = results.cells.iter().find(|c| c.id() == "gpt-mini/baseline/b8/s0/train").unwrap();
    assert!(
        matches!(&gpt.status, CellStatus::NotApplicable { reason, .. } if reason.contains("no text file at absent.txt"))
    );
}

#[test]
fn data_import_and_synth_write_the_cifar_binary_layout() {
    let dir = temp_dir();
    for split in ["train", "test"] {
        for (c, class) in ["cat", "dog"].iter().enumerate() {
            let folder = dir.path().join("folder").join(split).join(class);
            std::fs::create_dir_all(&folder).unwrap();
            for i in 0..3u8 {
                let img = image::RgbImage::from_pixel(32, 32, image::Rgb([c as u8 * 100, i, 7]));
                img.save(folder.join(format!("{i}.png"))).unwrap();
            }
        }
    }
    let out = trickbench(dir.path(), &["data", "import", "folder", "--out", "imported"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(text(&out.stdout).contains("6 training and 6 test images (2 classes: cat, dog)"));
    let data = trickbench::data::cifar::load_dir(&dir.path().join("imported")).unwrap();
    assert_eq!(data.train.len(), 6);

    synthetic_cifar(dir.path(), "synth", 50, 10);
    assert!(trickbench::data::cifar::is_synthetic_dir(&dir.path().join("synth")));
}

#[test]
fn batch_sweep_probes_up_to_the_memory_budget_and_measures_every_batch_that_fits() {
    let dir = temp_dir();
    let out = trickbench(
        dir.path(),
        &[
            "run",
            "--profile",
            "smoke",
            "--device",
            "cpu",
            "--design",
            "batch-sweep",
            "--memory-budget-mib",
            "250",
            "--no-time-to-accuracy",
            "--data",
            "no-such-dir",
            "--out",
            "sweep",
        ],
    );
    assert!(out.status.success(), "run failed: {}", text(&out.stderr));
    let results: Results = store::load(&dir.path().join("sweep/results.json")).unwrap();
    assert_eq!(results.run.protocol.memory_budget_bytes, Some(250 << 20));
    let probes: Vec<_> = results.cells.iter().filter(|c| c.key.kind == CellKind::MemoryProbe).collect();
    // Doubling from 64; every probe fits until the one that exceeds the budget, which ends the probe
    // as a result (ResNet-8 holds about 0.7 MB of tensors per image, so 512 needs about 340 MiB).
    let (last, fitting) = probes.split_last().expect("probes ran");
    for (i, probe) in probes.iter().enumerate() {
        assert_eq!(probe.key.batch_size, 64 << i, "{}", probe.id());
    }
    assert!(!fitting.is_empty(), "batch 64 fits in 250 MiB: {:?}", last.status);
    assert!(fitting.iter().all(|p| p.status == CellStatus::Ok), "{fitting:?}");
    match &last.status {
        CellStatus::OutOfMemory { error, .. } => {
            assert!(error.contains("memory budget of 250 MiB"), "{error}")
        }
        other => panic!("the last probe must run out of memory, not {other:?}"),
    }
    // The sweep measures training throughput at every batch that fit, and at no other.
    let mut swept: Vec<usize> = results
        .cells
        .iter()
        .filter(|c| c.key.kind == (CellKind::Throughput { phase: Phase::Train }))
        .map(|c| {
            assert_eq!(c.status, CellStatus::Ok, "{}", c.id());
            c.key.batch_size
        })
        .collect();
    swept.sort_unstable();
    assert_eq!(swept, fitting.iter().map(|p| p.key.batch_size).collect::<Vec<_>>());
    let stdout = text(&out.stdout);
    assert!(stdout.contains("probe: out of memory") && stdout.contains("memory budget"), "{stdout}");
}

#[test]
fn bad_seeds_budgets_and_designs_are_refused_with_the_flag_named() {
    let dir = temp_dir();
    let out = trickbench(dir.path(), &["run", "--memory-budget-mib", "0", "--data", "no-such-dir"]);
    assert!(!out.status.success() && text(&out.stderr).contains("--memory-budget-mib"));
    let out = trickbench(dir.path(), &["run", "--seeds", "0", "--data", "no-such-dir"]);
    assert!(!out.status.success() && text(&out.stderr).contains("--seeds"));
    let out = trickbench(dir.path(), &["run", "--design", "sweep", "--data", "no-such-dir"]);
    assert!(text(&out.stderr).contains("batch-sweep"), "{}", text(&out.stderr));
    for flag in ["--rounds", "--windows", "--steps-per-window"] {
        let out = trickbench(dir.path(), &["run", flag, "0", "--data", "no-such-dir"]);
        let stderr = text(&out.stderr);
        assert!(
            !out.status.success() && stderr.contains(&format!("{flag} 0: must be at least 1")),
            "{stderr}"
        );
    }
    let out = trickbench(dir.path(), &["run", "--windows", "many", "--data", "no-such-dir"]);
    assert!(!out.status.success() && text(&out.stderr).contains("--windows"), "{}", text(&out.stderr));
}

#[test]
fn shards_run_apart_and_merge_into_one_results_file_and_report() {
    let dir = temp_dir();
    for bad in ["3/2", "0/0", "abc"] {
        let out = trickbench(dir.path(), &["run", "--shard", bad]);
        let stderr = text(&out.stderr);
        assert!(!out.status.success() && stderr.contains("--shard") && stderr.contains(bad), "{stderr}");
    }
    synthetic_cifar(dir.path(), "synth", 2000, 500);
    // Two units: the ResNet's throughput cells, and the GPT's (not applicable without a text
    // file, so nothing trains); a third shard has nothing to do.
    let shard = |i: &str| {
        let run = ["run", "--profile", "smoke", "--device", "cpu", "--no-time-to-accuracy"];
        let args = ["--tricks", "channels-last", "--data", "synth", "--text", "none.txt", "--shard", i];
        let out_dir = format!("sweep/shard-{}", &i[..1]);
        let out = trickbench(dir.path(), &[&run[..], &args[..], &["--out", &out_dir]].concat());
        assert!(out.status.success(), "shard {i}: {}", text(&out.stderr));
        store::load(&dir.path().join(out_dir).join("results.json")).unwrap()
    };
    let ids = |r: &Results| r.cells.iter().map(|c| c.id().to_string()).collect::<Vec<_>>();
    let resnet = [
        "resnet8/baseline/b32/s0/train",
        "resnet8/aa-control/b32/s0/train",
        "resnet8/channels-last/b32/s0/train",
    ];
    let gpt = [
        "gpt-mini/baseline/b8/s0/train",
        "gpt-mini/aa-control/b8/s0/train",
        "gpt-mini/channels-last/b8/s0/train",
    ];
    assert_eq!(ids(&shard("0/3")), resnet);
    assert_eq!(ids(&shard("2/3")), Vec::<String>::new());

    let merge =
        |extra: &[&str]| trickbench(dir.path(), &[&["merge", "sweep", "--out", "merged"], extra].concat());
    let refused = merge(&[]);
    let stderr = text(&refused.stderr);
    assert!(!refused.status.success(), "{stderr}");
    assert!(stderr.contains("shard 1/3 is missing (units: gpt-mini/throughput)"), "{stderr}");
    let partial = merge(&["--allow-missing"]);
    assert!(partial.status.success(), "{}", text(&partial.stderr));
    assert!(text(&partial.stderr).contains("warning: shard 1/3 is missing"));

    assert_eq!(ids(&shard("1/3")), gpt);
    let merged = merge(&[]);
    assert!(merged.status.success(), "{}", text(&merged.stderr));
    let results = store::load(&dir.path().join("merged/results.json")).unwrap();
    assert_eq!(ids(&results), [&resnet[..], &gpt[..]].concat(), "the unsharded plan's order");
    assert_eq!(
        results.comparisons.len(),
        2,
        "channels-last and the A/A control on the ResNet (no text: no GPT)"
    );
    assert_eq!(results.run.merged.as_ref().unwrap().shards, [0, 1, 2]);
    let summary = text(&merged.stdout);
    assert!(summary.contains("channels-last") && summary.contains("Noise floor (A/A control)"), "{summary}");
    assert!(dir.path().join("merged/index.html").is_file());
    // Each shard's traces are copied beside the merged results, whose report links them.
    let traced: Vec<&str> = results.cells.iter().filter_map(|c| c.trace()).map(|t| t.path.as_str()).collect();
    assert_eq!(traced.len(), 2, "by default every ResNet throughput cell but the A/A control");
    let merged_html = std::fs::read_to_string(dir.path().join("merged/index.html")).unwrap();
    for path in &traced {
        assert!(dir.path().join("merged").join(path).is_file(), "{path} not copied");
        assert!(merged_html.contains(&format!("href=\"{path}\"")), "{path} not linked");
    }
    // Traces left behind when a shard's results file moved are refused, named, or left out.
    std::fs::remove_dir_all(dir.path().join("sweep/shard-0/traces")).unwrap();
    let refused = trickbench(dir.path(), &["merge", "sweep", "--out", "moved"]);
    let stderr = text(&refused.stderr);
    let missing = "sweep/shard-0/traces/resnet8_baseline_b32_s0_train.json.gz: the trace of cell \
                   resnet8/baseline/b32/s0/train is missing";
    assert!(!refused.status.success() && stderr.contains(missing), "{stderr}");
    let without = trickbench(dir.path(), &["merge", "sweep", "--out", "moved", "--allow-missing"]);
    assert!(without.status.success() && text(&without.stderr).contains(missing));
    let moved = store::load(&dir.path().join("moved/results.json")).unwrap();
    assert!(moved.cells.iter().all(|c| c.trace().is_none()));

    // A shard given twice is refused with both files named.
    let twice = trickbench(
        dir.path(),
        &["merge", "sweep/shard-0/results.json", "sweep/shard-0", "sweep/shard-1", "--out", "again"],
    );
    let stderr = text(&twice.stderr);
    assert!(!twice.status.success() && stderr.contains("are both shard 0/3"), "{stderr}");
    assert!(stderr.contains("sweep/shard-0/results.json and sweep/shard-0/results.json"), "{stderr}");
}

#[test]
fn contradictory_flags_are_refused_naming_both() {
    let dir = temp_dir();
    let cases: [(&[&str], &[&str]); 6] = [
        (&["--no-time-to-accuracy", "--seeds", "3"], &["--seeds", "--no-time-to-accuracy"]),
        (&["--design", "batch-sweep", "--batch-size", "64"], &["--batch-size", "--design batch-sweep"]),
        (
            &["--memory-limit-mib", "500", "--memory-budget-mib", "1000"],
            &["--memory-limit-mib 500", "--memory-budget-mib 1000"],
        ),
        (&["--memory-limit-mib", "0"], &["--memory-limit-mib"]),
        (&["--cell-timeout-s", "0"], &["--cell-timeout-s 0"]),
        (&["--resume"], &["--out"]),
    ];
    for (flags, expected) in cases {
        let args: Vec<&str> =
            ["run", "--data", "no-such-dir", "--device", "cpu"].iter().chain(flags).copied().collect();
        let out = trickbench(dir.path(), &args);
        assert!(!out.status.success(), "{flags:?} must fail");
        let stderr = text(&out.stderr);
        for e in expected {
            assert!(stderr.contains(e), "{flags:?}: '{e}' not in: {stderr}");
        }
    }
    assert!(!dir.path().join("data").exists(), "refused before anything is generated");
}

#[test]
fn bad_protocol_and_time_to_accuracy_values_are_refused_before_any_cell_naming_flag_and_value() {
    let dir = temp_dir();
    let cases: &[(&[&str], &[&str])] = &[
        (&["--rounds", "-1"], &["--rounds", "'-1'"]),
        (&["--windows", "many"], &["--windows", "'many'"]),
        (&["--steps-per-window", "0"], &["--steps-per-window 0: must be at least 1"]),
        (&["--warmup-steps", "-2"], &["--warmup-steps", "'-2'"]),
        (&["--seeds", "0"], &["--seeds 0: must be at least 1"]),
        (
            &["--workload", "resnet", "--target", "0"],
            &["--target 0: a ResNet's target is a test accuracy", "(0, 1]"],
        ),
        (&["--workload", "resnet", "--target", "60"], &["--target 60:", "0.6 for 60%"]),
        (&["--workload", "gpt", "--target", "-1.5"], &["--target -1.5: a GPT's target is a validation loss"]),
        (&["--target", "high"], &["--target", "'high'"]),
        (&["--target", "0.7"], &["--target 0.7: the run trains ResNets", "[gpt.time_to_accuracy]"]),
        (&["--epochs", "0"], &["--epochs 0: must be at least 1"]),
        (&["--steps", "-3"], &["--steps", "'-3'"]),
        (&["--epochs", "2", "--steps", "300"], &["--epochs", "cannot be used with", "--steps"]),
        (&["--budget-s", "0"], &["--budget-s 0: must be a positive number of seconds"]),
        (&["--budget-s", "-5"], &["--budget-s -5: must be a positive number of seconds"]),
        (&["--budget-s", "inf"], &["--budget-s inf: must be a positive number"]),
        (&["--no-time-to-accuracy", "--budget-s", "60"], &["--budget-s", "--no-time-to-accuracy"]),
        (&["--profile-file", "absent.toml"], &["absent.toml"]),
    ];
    for (flags, expected) in cases {
        let args: Vec<&str> =
            ["run", "--data", "no-such-dir", "--device", "cpu"].iter().chain(*flags).copied().collect();
        let out = trickbench(dir.path(), &args);
        assert!(!out.status.success(), "{flags:?} must fail");
        let stderr = text(&out.stderr);
        for e in *expected {
            assert!(stderr.contains(e), "{flags:?}: '{e}' not in: {stderr}");
        }
    }
    let files: &[(&str, &[&str])] = &[
        ("roundz = 2\n", &["bad.toml", "line 1", "unknown field `roundz`", "rounds"]),
        ("[resnet]\nrounds = 2\n", &["bad.toml", "line 2", "unknown field `rounds`"]),
        ("steps_per_window = \"ten\"\n", &["bad.toml", "steps_per_window", "\"ten\""]),
        ("rounds = 0\n", &["bad.toml: rounds = 0: must be at least 1"]),
        ("[resnet.time_to_accuracy]\ntarget = 1.5\n", &["bad.toml: resnet.time_to_accuracy.target = 1.5"]),
        ("[gpt.time_to_accuracy]\nbudget_s = -1\n", &["bad.toml: gpt.time_to_accuracy.budget_s = -1"]),
    ];
    for (content, expected) in files {
        std::fs::write(dir.path().join("bad.toml"), content).unwrap();
        let out = trickbench(
            dir.path(),
            &["run", "--data", "no-such-dir", "--device", "cpu", "--profile-file", "bad.toml"],
        );
        assert!(!out.status.success(), "{content:?} must fail");
        let stderr = text(&out.stderr);
        for e in *expected {
            assert!(stderr.contains(e), "{content:?}: '{e}' not in: {stderr}");
        }
    }
    assert!(!dir.path().join("data").exists(), "refused before anything is generated");

    // `--profile auto` (the default) says which profile it picked and why as the run's first line.
    let out = trickbench(dir.path(), &["run", "--workload", "gpt", "--text", "absent.txt"]);
    let expected = if tch::Cuda::is_available() {
        "trickbench run: standard profile (auto: CUDA GPU cuda:0)"
    } else {
        "trickbench run: quick profile (auto: no CUDA GPU)"
    };
    assert!(text(&out.stderr).starts_with(expected), "{}", text(&out.stderr));
}

#[test]
fn a_profile_file_and_flags_reach_the_cells_progress_is_plain_lines_off_a_terminal_and_quiet_is_quiet() {
    let dir = temp_dir();
    synthetic_cifar(dir.path(), "synth", 2000, 500);
    let profile_file = r#"
rounds = 1
windows_per_process = 1
max_windows_per_process = 1
steps_per_window = 1
warmup_steps = 0
cell_timeout_s = 600.0

[resnet.time_to_accuracy]
eval_every_steps = 10
target = 0.3
"#;
    std::fs::write(dir.path().join("my.toml"), profile_file).unwrap();
    // The flags replace the file's target; a test accuracy of 100% is out of reach, so training
    // stops after the planned epoch: 2,000 images at batch 32 are 62 steps. The budget is far
    // above the epoch's time, however busy the machine, so the epoch is what ends training.
    let run =
        ["run", "--profile", "smoke", "--workload", "resnet", "--device", "cpu", "--tricks", "amp,one-cycle"];
    let knobs = ["--profile-file", "my.toml", "--target", "1", "--epochs", "1", "--budget-s", "500"];
    let out = trickbench(dir.path(), &[&run[..], &knobs, &["--data", "synth", "--out", "run"]].concat());
    let stderr = text(&out.stderr);
    assert!(out.status.success(), "run failed: {stderr}");
    let results: Results = store::load(&dir.path().join("run/results.json")).unwrap();
    // Every process read the machine before and after measuring; on the CPU there is no GPU side.
    for process in results.cells.iter().flat_map(|c| &c.processes) {
        for state in [&process.machine_before, &process.machine_after] {
            let state = state.as_ref().expect("the machine's state is recorded");
            assert!(state.cpu.logical_cores >= 1 && state.gpu.is_none() && state.gpu_unavailable.is_none());
        }
    }
    let settings = &results.run.profile_settings;
    assert_eq!(
        (settings.asked, settings.reason.as_deref()),
        (Some(ProfileRequest::Named(ProfileName::Smoke)), None)
    );
    assert_eq!(settings.file.as_deref(), Some("my.toml"));
    let tta_settings = settings.families[0].time_to_accuracy;
    assert_eq!(
        (tta_settings.target, tta_settings.planned_epochs, tta_settings.planned_steps),
        (1.0, 1, None)
    );
    assert_eq!((tta_settings.budget_s, tta_settings.eval_every_steps), (500.0, 10));
    let protocol = &results.run.protocol;
    assert_eq!((protocol.rounds, protocol.windows_per_process, protocol.warmup_steps), (1, 1, 0));
    assert_eq!(protocol.cell_timeout_s, 600.0);
    assert_eq!(cell(&results, "resnet8/baseline/b32/s0/train").processes[0].window_samples_per_s.len(), 1);
    let tta_cell = cell(&results, "resnet8/baseline/b32/s0/tta");
    assert_eq!(tta_cell.status, CellStatus::Ok);
    let tta = tta_cell.time_to_accuracy.clone().unwrap();
    assert_eq!((tta.target, tta.budget_s, tta.time_to_target_s), (1.0, 500.0, None));
    let steps: Vec<usize> = tta.curve.iter().map(|p| p.step).collect();
    assert_eq!(steps, [0, 10, 20, 30, 40, 50, 60, 62], "evaluated every 10 steps for the one planned epoch");

    // Not on a terminal: a plain line as each process starts and ends, with the ETA.
    for line in [
        "trickbench run: smoke profile · ablation design · cpu · resnet8",
        "plan: 4 cells in 4 cell processes",
        "[1/4] round 1 warm-up (resnet8/baseline/b32/s0/train, not measured)",
        "[2/4] round 1: 2 cells in one process started · ETA —",
        "\n    resnet8/aa-control/b32/s0/train: ok, ",
        "\n    resnet8/baseline/b32/s0/train: ok, ",
        "[3/4] resnet8/baseline/b32/s0/tta started · ETA ",
        "[3/4] resnet8/baseline/b32/s0/tta: ok, did not reach test accuracy ≥ 100.0%",
    ] {
        assert!(stderr.contains(line), "'{line}' not in:\n{stderr}");
    }
    let html = std::fs::read_to_string(dir.path().join("run/index.html")).unwrap();
    assert!(
        html.contains("my.toml") && html.contains("test accuracy ≥ 100.0% within 500 s"),
        "settings in the report"
    );

    // Resuming with other settings is refused, saying what differs.
    let other = ["--profile-file", "my.toml", "--target", "1", "--epochs", "2", "--budget-s", "500"];
    let resumed = trickbench(
        dir.path(),
        &[&run[..], &other, &["--data", "synth", "--out", "run", "--resume"]].concat(),
    );
    let stderr = text(&resumed.stderr);
    assert!(!resumed.status.success() && stderr.contains("its settings differ"), "{stderr}");

    // --quiet: no progress and no summary, only where the results are; `auto` is recorded as asked.
    let quiet = [
        "run",
        "--quiet",
        "--workload",
        "resnet",
        "--tricks",
        "amp",
        "--no-time-to-accuracy",
        "--rounds",
        "1",
        "--windows",
        "1",
        "--steps-per-window",
        "1",
        "--warmup-steps",
        "0",
        "--data",
        "synth",
        "--out",
        "quiet",
    ];
    let out = trickbench(dir.path(), &quiet);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(text(&out.stderr), "", "nothing on stderr");
    let stdout = text(&out.stdout);
    assert!(stdout.starts_with("results: quiet/results.json\nreport:  quiet/index.html\n"), "{stdout}");
    assert!(!stdout.contains("samples/s"), "no summary table: {stdout}");
    let results: Results = store::load(&dir.path().join("quiet/results.json")).unwrap();
    assert_eq!(results.run.profile_settings.asked, Some(ProfileRequest::Auto));
    assert!(results.run.profile_settings.reason.is_some());
}
