//! `run --trace` end to end: a real tiny benchmark on CPU records a profiler trace of the chosen
//! cell after its timed windows, the results point at it, the report links it and shows its
//! operators; a glob that matches no cell is refused before anything runs; `trickbench ops` sets a
//! traced trick beside its traced reference (and a run records its host allocator).

#[allow(dead_code)]
mod common;

use std::path::Path;

use scraper::{Html, Selector};
use trickbench::bench::cell::TRACED_STEPS;
use trickbench::measure::host_allocator::HostAllocator;
use trickbench::measure::trace::read_trace_record;
use trickbench::results::schema::TraceActivity;
use trickbench::results::schema::Verdict;
use trickbench::results::store;
use trickbench::vocabulary::StepPart;

use common::cells::cell;
use common::cli::{synthetic_cifar, text, trickbench};
use common::dirs::temp_dir;

/// `trickbench run` of ResNet-8's throughput cells with channels-last, smoke-sized in one round of
/// two windows, on the synthetic data in `synth`, with `extra` flags, into `out`.
fn run(dir: &Path, out: &str, extra: &[&str]) -> std::process::Output {
    let args =
        ["run", "--profile", "smoke", "--workload", "resnet8", "--device", "cpu", "--no-time-to-accuracy"];
    let rest =
        ["--tricks", "channels-last", "--rounds", "1", "--windows", "2", "--data", "synth", "--out", out];
    trickbench(dir, &[&args[..], &rest[..], extra].concat())
}

/// The `cat` and `name` of every complete event of a gzipped Chrome-trace file, which must parse.
fn complete_events(path: &Path) -> Vec<(String, String, serde_json::Value)> {
    let gzipped = std::fs::File::open(path).unwrap();
    let trace: serde_json::Value = serde_json::from_reader(flate2::read::GzDecoder::new(gzipped)).unwrap();
    let events = trace["traceEvents"].as_array().expect("a Chrome trace has traceEvents");
    events
        .iter()
        .filter(|e| e["ph"] == "X")
        .map(|e| {
            (
                e["cat"].as_str().unwrap_or("").to_owned(),
                e["name"].as_str().unwrap().to_owned(),
                e["args"].clone(),
            )
        })
        .collect()
}

#[test]
fn a_traced_cell_writes_a_chrome_trace_that_its_results_and_report_point_at() {
    let dir = temp_dir();
    synthetic_cifar(dir.path(), "synth", 2000, 500);
    let out = run(dir.path(), "run", &["--trace", "resnet8/baseline/*"]);
    assert!(out.status.success(), "{}", text(&out.stderr));

    let file = "traces/resnet8_baseline_b32_s0_train.json.gz";
    let path = dir.path().join("run").join(file);
    let events = complete_events(&path);
    let convolutions: Vec<&serde_json::Value> = events
        .iter()
        .filter(|(cat, name, _)| cat == "cpu_op" && name == "aten::conv2d")
        .map(|(_, _, a)| a)
        .collect();
    assert!(
        !convolutions.is_empty() && convolutions.len().is_multiple_of(TRACED_STEPS),
        "{} convolutions",
        convolutions.len()
    );
    assert!(
        convolutions.iter().any(|args| args["Input Dims"][0] == serde_json::json!([32, 3, 32, 32])),
        "the stem's convolution of a batch of 32 images, with its shapes"
    );
    assert!(events.iter().any(|(_, name, _)| name == "aten::convolution_backward"), "the backward pass too");

    let results = store::load(&dir.path().join("run/results.json")).unwrap();
    let baseline = cell(&results, "resnet8/baseline/b32/s0/train");
    let trace = baseline.trace().expect("the baseline is traced");
    assert_eq!((trace.path.as_str(), trace.steps), (file, TRACED_STEPS));
    let read = read_trace_record(&path, file, TRACED_STEPS).unwrap();
    assert_eq!(trace, &read, "the table and the operators per step are what the file holds");
    assert!(trace.operators.iter().all(|o| o.activity == TraceActivity::CpuOp), "no GPU activity on a CPU");
    assert!(trace.operators.iter().any(|o| o.name.contains("convolution") && o.self_us > 0.0));
    let traced_rounds: Vec<usize> =
        baseline.processes.iter().filter(|p| p.trace.is_some()).map(|p| p.round).collect();
    assert_eq!(traced_rounds, [0], "one trace per cell, from its first measured process");
    assert!(results.cells.iter().filter(|c| c.trace().is_some()).count() == 1, "the glob chose one cell");
    assert_eq!(std::fs::read_dir(dir.path().join("run/traces")).unwrap().count(), 1);

    let html = Html::parse_document(&std::fs::read_to_string(dir.path().join("run/index.html")).unwrap());
    let links = Selector::parse(&format!("a[href=\"{file}\"]")).unwrap();
    assert_eq!(html.select(&links).count(), 2, "from the cell's row and from its operator table");
    let rows = Selector::parse("details.trace table.operators tbody tr").unwrap();
    let table: Vec<String> = html.select(&rows).map(|r| r.text().collect()).collect();
    assert_eq!(table.len(), trace.operators.len());
    assert!(table.iter().any(|r| r.contains("convolution")), "{table:?}");
    let page: String = html.root_element().text().collect();
    assert!(page.contains("ui.perfetto.dev") && page.contains("chrome://tracing"));
    let summary = std::fs::read_to_string(dir.path().join("run/summary.md")).unwrap();
    assert!(summary.contains("## Profiler traces") && summary.contains(&format!("]({file})")), "{summary}");

    // Rendered elsewhere, the report links the trace where it lies.
    let again = trickbench(dir.path(), &["report", "run/results.json", "--out", "elsewhere"]);
    assert!(again.status.success(), "{}", text(&again.stderr));
    let moved = std::fs::read_to_string(dir.path().join("elsewhere/index.html")).unwrap();
    assert!(moved.contains(&format!("href=\"../run/{file}\"")));
}

#[test]
fn a_run_traces_every_cell_but_the_control_by_default_and_diagnoses_each_trick_from_its_traces() {
    let dir = temp_dir();
    synthetic_cifar(dir.path(), "synth", 2000, 500);
    let out = run(dir.path(), "run", &[]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let results = store::load(&dir.path().join("run/results.json")).unwrap();
    let traced: Vec<String> =
        results.cells.iter().filter(|c| c.trace().is_some()).map(|c| c.id().to_string()).collect();
    assert_eq!(traced, ["resnet8/baseline/b32/s0/train", "resnet8/channels-last/b32/s0/train"]);
    let step = cell(&results, "resnet8/baseline/b32/s0/train").trace().unwrap().step.clone().unwrap();
    assert!(step.step_ms > step.outside_ops_ms && step.outside_ops_ms > 0.0, "{step:?}");
    let conv =
        step.operators.iter().find(|o| o.name == "aten::mkldnn_convolution").expect("a CPU convolution");
    assert!(conv.kernel_calls > 0.0 && conv.input_types.as_deref().is_some_and(|t| t.starts_with("float")));

    let comparison = |results: &trickbench::results::schema::Results, id: &str| {
        results.comparisons.iter().find(|c| c.cell.as_str() == id).cloned().unwrap()
    };
    let channels_last = comparison(&results, "resnet8/channels-last/b32/s0/train");
    let diagnosis = channels_last.diagnosis.expect("a trick's comparison is diagnosed");
    let ceiling = diagnosis.ceiling.expect("from the baseline's trace");
    assert_eq!(ceiling.part, StepPart::ConvolutionsAndMatmuls);
    assert!(ceiling.speedup > 1.0 && ceiling.part_ms < ceiling.step_ms, "{ceiling:?}");
    assert_eq!(
        diagnosis.cause.is_some(),
        channels_last.verdict != Verdict::Faster,
        "a cause beside no speed-up"
    );
    assert!(comparison(&results, "resnet8/aa-control/b32/s0/train").diagnosis.is_none(), "not the control");

    let bare = run(dir.path(), "bare", &["--no-trace"]);
    assert!(bare.status.success(), "{}", text(&bare.stderr));
    assert!(!dir.path().join("bare/traces").exists());
    let results = store::load(&dir.path().join("bare/results.json")).unwrap();
    let diagnosis = comparison(&results, "resnet8/channels-last/b32/s0/train").diagnosis.unwrap();
    let why = diagnosis.ceiling_unavailable.expect("no trace, no ceiling of operators");
    assert!(why.contains("has no profiler trace"), "{why}");

    let both = run(dir.path(), "both", &["--no-trace", "--trace", "*"]);
    assert_eq!(both.status.code(), Some(2));
    assert!(text(&both.stderr).contains("--no-trace"), "{}", text(&both.stderr));
}

#[test]
fn a_glob_that_matches_no_cell_is_refused_before_any_cell_runs() {
    let dir = temp_dir();
    synthetic_cifar(dir.path(), "synth", 200, 100);
    let out = run(dir.path(), "run", &["--trace", "gpt*"]);
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("--trace 'gpt*' matches none of the run's 3 throughput cells"), "{stderr}");
    assert!(stderr.contains("resnet8/baseline/b32/s0/train, resnet8/aa-control/b32/s0/train"), "{stderr}");
    assert!(!dir.path().join("run/results.json").exists(), "nothing was measured");
    let out = run(dir.path(), "run", &["--trace", "resnet8/[baseline"]);
    let stderr = text(&out.stderr);
    assert!(!out.status.success() && stderr.contains("--trace") && stderr.contains("not a glob"), "{stderr}");
}

#[test]
fn ops_sets_a_traced_trick_beside_its_traced_reference_operator_by_operator() {
    let dir = temp_dir();
    synthetic_cifar(dir.path(), "synth", 2000, 500);
    let untraced = run(dir.path(), "plain", &["--host-allocator", "system", "--no-trace"]);
    assert!(untraced.status.success(), "{}", text(&untraced.stderr));
    assert!(text(&untraced.stderr).contains("note: host allocator system (glibc malloc's defaults"));
    let plain = store::load(&dir.path().join("plain/results.json")).unwrap();
    assert_eq!(plain.run.protocol.host_allocator, HostAllocator::System, "the run records its allocator");
    let summary = std::fs::read_to_string(dir.path().join("plain/summary.md")).unwrap();
    assert!(summary.contains("host allocator system"), "{summary}");
    let refused = trickbench(dir.path(), &["ops", "plain/results.json"]);
    assert_eq!(refused.status.code(), Some(2));
    assert!(
        text(&refused.stderr).contains("plain/results.json has no traced cell: it was run with --no-trace")
    );

    let out = run(dir.path(), "run", &["--trace", "resnet8/*/train"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let ops = trickbench(dir.path(), &["ops", "run/results.json", "--top", "5", "--out", "ops.txt"]);
    assert!(ops.status.success(), "{}", text(&ops.stderr));
    let printed = text(&ops.stdout);
    assert_eq!(printed, std::fs::read_to_string(dir.path().join("ops.txt")).unwrap());
    assert!(
        printed.contains(
            "resnet8/channels-last/b32/s0/train against resnet8/baseline/b32/s0/train, on libtorch"
        ),
        "{printed}"
    );
    assert!(printed.contains("arithmetic operators:") && printed.contains("aten::"), "{printed}");
    assert!(printed.lines().all(|l| l.chars().count() <= 100), "{printed}");

    let none = trickbench(dir.path(), &["ops", "run/results.json", "--cell", "gpt*"]);
    assert_eq!(none.status.code(), Some(2));
    assert!(text(&none.stderr).contains("--cell 'gpt*' matches no traced cell"), "{}", text(&none.stderr));
}
