use super::*;
use crate::report::history::tests::{key, run};
use crate::results::diagnosis::{Cause, Ceiling, Diagnosis, OpChange};
use crate::results::schema::{
    CellResult, CellStatus, Comparison, MeasurementDesign, NoiseFloor, PairedWindow, PairedWindows,
    ProcessMeasurement, Side, Throughput, Verdict,
};
use crate::tricks::Trick;
use crate::vocabulary::{Precision, StepPart};

/// A reading at `point` with the interval [low, high].
fn at(point: f64, low: f64, high: f64) -> Reading {
    Reading { point, interval: Some((low, high)) }
}

/// A committed quick run as `id` at `commit`, its baseline measured at `samples_per_s` ± 2%.
fn with_baseline(id: &str, commit: &str, samples_per_s: f64) -> Results {
    let mut r = run(id, "2026-12-01T10:00:00Z", commit);
    let throughput = Throughput {
        median_samples_per_s: samples_per_s,
        ci_low_samples_per_s: samples_per_s * 0.98,
        ci_high_samples_per_s: samples_per_s * 1.02,
        windows: 10,
        coefficient_of_variation: Some(0.02),
        outlier_windows: 0,
    };
    r.cells.push(CellResult { throughput: Some(throughput), ..CellResult::new(key(&[]), CellStatus::Ok) });
    r
}

/// `r` with the cell of `tricks` compared with `reference` (paired) at `(speedup, low, high)` and
/// `memory` × its peak.
fn with_cell(
    mut r: Results,
    tricks: &[Trick],
    reference: &[Trick],
    effect: (f64, f64, f64),
    memory: f64,
) -> Results {
    let cell = CellResult::new(key(tricks), CellStatus::Ok);
    r.comparisons.push(Comparison {
        cell: cell.id(),
        baseline: CellResult::new(key(reference), CellStatus::Ok).id(),
        speedup: effect.0,
        speedup_ci_low: effect.1,
        speedup_ci_high: effect.2,
        verdict: Verdict::NoSignificantEffect,
        memory_ratio: Some(memory),
        design: MeasurementDesign::Paired,
        diagnosis: None,
    });
    r.cells.push(cell);
    r
}

/// `r` with an A/A noise floor of ±`half_width` in `design` for resnet8 on libtorch.
fn with_floor(mut r: Results, design: MeasurementDesign, half_width: f64) -> Results {
    let id = CellResult::new(key(&[]), CellStatus::Ok).id();
    r.noise_floors.push(NoiseFloor {
        workload: WorkloadId::Resnet8,
        control: id.clone(),
        baseline: id,
        ratio: 1.0,
        ratio_ci_low: 1.0 - half_width,
        ratio_ci_high: 1.0 + half_width,
        half_width,
        design,
        engine: Engine::Libtorch,
    });
    r
}

fn check<'a>(gate: &'a Gate, what: &str) -> &'a Check {
    gate.checks.iter().find(|c| c.what == what).unwrap_or_else(|| panic!("no check {what}: {gate:#?}"))
}

#[test]
fn the_rule_needs_the_base_point_outside_the_new_interval_and_a_change_beyond_the_threshold() {
    use GateVerdict::*;
    assert_eq!(judge_change(Better::Higher, 1.3, &at(1.1, 1.05, 1.15), 0.02), Regression);
    assert_eq!(judge_change(Better::Higher, 1.1, &at(1.3, 1.25, 1.35), 0.02), Improvement);
    assert_eq!(judge_change(Better::Higher, 1.3, &at(1.25, 1.2, 1.3), 0.0), NoChange, "an end is inside");
    assert_eq!(
        judge_change(Better::Higher, 1.3, &at(1.1, 0.9, 1.35), 0.0),
        NoChange,
        "the interval holds it"
    );
    // 1.25 ÷ 1 − 1 is exactly 0.25: a change of the threshold itself is within it.
    assert_eq!(judge_change(Better::Higher, 1.0, &at(1.25, 1.125, 1.375), 0.25), NoChange);
    assert_eq!(judge_change(Better::Higher, 1.0, &at(1.25, 1.125, 1.375), 0.2499), Improvement);
    assert_eq!(judge_change(Better::Higher, 1.0, &at(0.75, 0.625, 0.875), 0.25), NoChange);
    assert_eq!(judge_change(Better::Higher, 1.0, &at(0.75, 0.625, 0.875), 0.2499), Regression);
    // Lower is better: a peak-memory ratio, with no interval.
    let memory = |point| Reading { point, interval: None };
    assert_eq!(judge_change(Better::Lower, 0.5, &memory(0.6), 0.05), Regression);
    assert_eq!(judge_change(Better::Lower, 0.5, &memory(0.4), 0.05), Improvement);
    assert_eq!(judge_change(Better::Lower, 0.5, &memory(0.52), 0.05), NoChange);
    assert_eq!(judge_change(Better::Higher, 0.0, &memory(0.52), 0.05), NotCompared);
    assert_eq!(judge_change(Better::Higher, 1.0, &memory(f64::NAN), 0.05), NotCompared);
}

#[test]
fn the_threshold_is_the_larger_floor_of_the_two_runs_for_the_effect_s_design() {
    let base =
        with_cell(with_baseline("a", "aaaaaaa", 400.0), &[Trick::ChannelsLast], &[], (1.3, 1.28, 1.32), 1.0);
    let new =
        with_cell(with_baseline("b", "bbbbbbb", 400.0), &[Trick::ChannelsLast], &[], (1.2, 1.18, 1.22), 1.0);
    let (base, new) =
        (with_floor(base, MeasurementDesign::Paired, 0.05), with_floor(new, MeasurementDesign::Paired, 0.09));
    // The processes floor is for another design: not the speed-up's, but the baseline's.
    let new = with_floor(new, MeasurementDesign::Processes, 0.5);
    let gate = judge(&base, &new, false).unwrap();
    let trick = check(&gate, "channels-last · b128");
    assert_eq!((trick.threshold, trick.threshold_fraction), (Threshold::NoiseFloor, 0.09));
    assert_eq!(trick.verdict, GateVerdict::NoChange, "-7.7% lies within the larger floor, ±9%");
    let baseline = check(&gate, "baseline · b128");
    assert_eq!((baseline.quantity, baseline.threshold_fraction), (Quantity::BaselineThroughput, 0.5));

    let tighter =
        with_floor(with_floor(new.clone(), MeasurementDesign::Paired, 0.01), MeasurementDesign::Paired, 0.07);
    let tighter = Results { noise_floors: tighter.noise_floors[2..].to_vec(), ..tighter };
    let gate = judge(&with_floor(base.clone(), MeasurementDesign::Paired, 0.01), &tighter, false).unwrap();
    assert_eq!(check(&gate, "channels-last · b128").verdict, GateVerdict::Regression, "{gate:#?}");
}

#[test]
fn without_any_floor_the_interval_alone_decides() {
    let base =
        with_cell(with_baseline("a", "aaaaaaa", 400.0), &[Trick::ChannelsLast], &[], (1.3, 1.28, 1.32), 1.0);
    let new = with_baseline("b", "bbbbbbb", 300.0);
    let new = with_cell(new, &[Trick::ChannelsLast], &[], (1.27, 1.265, 1.275), 1.0);
    let gate = judge(&base, &new, false).unwrap();
    let trick = check(&gate, "channels-last · b128");
    assert_eq!((trick.threshold, trick.verdict), (Threshold::NoFloor, GateVerdict::Regression));
    let baseline = check(&gate, "baseline · b128");
    assert_eq!(baseline.verdict, GateVerdict::Regression);
    assert!((baseline.change_fraction.unwrap() + 0.25).abs() < 1e-12);
    assert!(gate.regressed());
    assert!(gate
        .verdict_line()
        .starts_with("2 confident regressions: resnet8 · baseline · b128 throughput -25.0%"));
}

#[test]
fn memory_tricks_are_judged_by_their_ratio_and_removals_the_other_way() {
    let (accumulation, channels_last) = (Trick::GradAccumulation, Trick::ChannelsLast);
    let both = [accumulation, channels_last];
    let run = |id, memory: (f64, f64), removal: (f64, f64, f64)| {
        let r = with_cell(
            with_baseline(id, "aaaaaaa", 400.0),
            &[accumulation],
            &[],
            (memory.0, 0.8, 1.0),
            memory.1,
        );
        let mut r = with_cell(r, &[channels_last], &both, removal, 1.0);
        r.cells.push(CellResult::new(key(&both), CellStatus::Ok));
        r
    };
    // Peak memory 0.5× → 0.6×: a regression whatever the speed-up; removing channels-last from
    // the stack 1.2× → 1.0× faster: the trick is worth more.
    let (base, new) = (run("a", (0.9, 0.5), (1.2, 1.15, 1.25)), run("b", (0.5, 0.6), (1.0, 0.95, 1.05)));
    let gate = judge(&base, &new, false).unwrap();
    let memory = check(&gate, "grad-accumulation · b128");
    assert_eq!((memory.quantity, memory.verdict), (Quantity::MemoryRatio, GateVerdict::Regression));
    assert_eq!((memory.threshold, memory.threshold_fraction), (Threshold::MemoryTolerance, 0.05));
    let removal = check(&gate, "channels-last · b128");
    assert_eq!((removal.quantity, removal.verdict), (Quantity::RemovalSpeedUp, GateVerdict::Improvement));
    let stack = check(&gate, "channels-last+grad-accumulation · b128");
    assert_eq!(stack.verdict, GateVerdict::NotCompared, "the stack is compared with nothing here");
}

#[test]
fn a_cell_of_one_run_only_is_not_compared_and_runs_sharing_nothing_are_refused() {
    let base =
        with_cell(with_baseline("a", "aaaaaaa", 400.0), &[Trick::ChannelsLast], &[], (1.3, 1.2, 1.4), 1.0);
    let new = with_baseline("b", "bbbbbbb", 400.0);
    let gate = judge(&base, &new, false).unwrap();
    let trick = check(&gate, "channels-last · b128");
    assert_eq!((trick.verdict, &trick.new), (GateVerdict::NotCompared, &Err("not measured".to_owned())));
    assert!(!gate.regressed());
    assert!(gate.markdown().contains("not compared (new: not measured)"), "{}", gate.markdown());

    let empty = run("empty", "2026-12-01T10:00:00Z", "ccccccc");
    let error = judge(&base, &empty, false).unwrap_err().to_string();
    assert!(error.contains("nothing to gate") && error.contains("base run a, new run empty"), "{error}");
}

#[test]
fn runs_of_other_hardware_or_protocol_are_refused_naming_each_difference_unless_allowed() {
    let base = with_baseline("a", "aaaaaaa", 400.0);
    let mut new = with_baseline("b", "bbbbbbb", 400.0);
    new.run.profile = crate::bench::profile::ProfileName::Standard;
    new.run.protocol.steps_per_window += 5;
    new.system.libtorch_version = "9.9.9".into();
    new.system.hostname = Some("elsewhere".into());
    let error = judge(&base, &new, false).unwrap_err();
    assert!(
        matches!(error, GateError::Incomparable { ref differences } if differences.len() == 2),
        "{error:?}"
    );
    let text = error.to_string();
    assert!(text.contains("profile: base quick, new standard"), "{text}");
    let steps = base.run.protocol.steps_per_window;
    assert!(text.contains(&format!("steps per window: base {steps}, new {}", steps + 5)), "{text}");
    assert!(text.contains("--allow-mismatch"), "{text}");
    let gate = judge(&base, &new, true).unwrap();
    assert_eq!(gate.mismatches.len(), 2);
    assert_eq!(check(&gate, "baseline · b128").verdict, GateVerdict::NoChange, "joined across profiles");
    assert!(gate.markdown().contains("Compared despite differences"));
}

#[test]
fn junit_escapes_what_it_quotes_and_fails_each_regression() {
    assert_eq!(
        render::escape("a<b & \"c\" 'd' >\u{1}"),
        "a&lt;b &amp; &quot;c&quot; &apos;d&apos; &gt;\u{FFFD}"
    );
    let base =
        with_cell(with_baseline("a", "aaaaaaa", 400.0), &[Trick::ChannelsLast], &[], (1.3, 1.28, 1.32), 1.0);
    let new =
        with_cell(with_baseline("b", "bbbbbbb", 400.0), &[Trick::ChannelsLast], &[], (1.1, 1.08, 1.12), 1.0);
    let xml = judge(&base, &new, false).unwrap().junit();
    assert!(
        xml.contains("<testsuites name=\"trickbench gate\" tests=\"2\" failures=\"1\" skipped=\"0\""),
        "{xml}"
    );
    assert!(xml.contains("<testsuite name=\"resnet8\" tests=\"2\" failures=\"1\""), "{xml}");
    assert!(
        xml.contains(
            "<failure type=\"regression\" message=\"regression: speed-up 1.300× [1.280, 1.320] → 1.100×"
        ),
        "{xml}"
    );
    assert_eq!(xml.matches("<failure").count(), 1);
}

/// `r` with channels-last paired with its baseline in two processes that saw it `ratios.0` and
/// `ratios.1` times as fast, five pairs each, compared as a run's analysis compares it.
fn with_paired_processes(mut r: Results, ratios: (f64, f64)) -> Results {
    let baseline = r.cells.iter().find(|c| c.key.tricks.is_baseline()).expect("a baseline");
    let (throughput, baseline) = (baseline.throughput, baseline.id());
    let process = |round, ratio: f64| {
        let windows = (0..5)
            .flat_map(|pair| {
                let window = |side, samples_per_s| PairedWindow { pair, side, samples_per_s };
                [window(Side::Reference, 400.0), window(Side::Trick, 400.0 * ratio)]
            })
            .collect();
        ProcessMeasurement {
            paired: Some(PairedWindows { reference: baseline.clone(), windows }),
            ..ProcessMeasurement::new(round, 1e9, Precision::Fp32)
        }
    };
    let cell = CellResult {
        throughput,
        processes: vec![process(0, ratios.0), process(1, ratios.1)],
        ..CellResult::new(key(&[Trick::ChannelsLast]), CellStatus::Ok)
    };
    r.cells.push(cell);
    r.comparisons = crate::analysis::comparisons(&r.cells, r.run.design);
    r
}

/// Whether `text` holds a number with a minus sign.
fn has_negative_number(text: &str) -> bool {
    let chars: Vec<char> = text.chars().collect();
    chars.windows(2).any(|w| matches!(w[0], '-' | '−') && w[1].is_ascii_digit())
}

#[test]
fn a_speed_up_s_interval_stays_above_zero_on_a_run_noisy_past_its_floor() {
    let base =
        with_cell(with_baseline("a", "aaaaaaa", 400.0), &[Trick::ChannelsLast], &[], (1.0, 0.98, 1.02), 1.0);
    // The processes saw channels-last 0.05× and 2× as fast: an A/A floor of ±212%, and a bootstrap
    // interval from 0.05 that widening by √2 on the linear scale would take below 0.
    let new = with_paired_processes(with_baseline("b", "bbbbbbb", 400.0), (0.05, 2.0));
    let new = with_floor(new, MeasurementDesign::Paired, 2.12);
    let gate = judge(&base, &new, false).unwrap();
    let trick = check(&gate, "channels-last · b128");
    let (low, high) = trick.new.as_ref().unwrap().interval.unwrap();
    assert!(low > 0.0 && low < 0.05 && high > 2.0, "{trick:?}");
    assert_eq!((trick.threshold_fraction, trick.verdict), (2.12, GateVerdict::NoChange));
    let markdown = gate.markdown();
    let row = markdown.lines().find(|l| l.starts_with("| channels-last")).unwrap();
    assert!(row.contains("±212.0% (A/A)") && !has_negative_number(row), "{row}");
    let junit = gate.junit();
    let case = junit.lines().find(|l| l.contains("channels-last")).unwrap();
    assert!(!has_negative_number(case), "{case}");
    assert!(has_negative_number("1.029× [-0.391, 1.583]") && !has_negative_number("a-b | --- |"));
}

/// The diagnosis of a speed-up that added work, `aten::copy_` 1.2 ms a step, where the part the
/// trick acts on is 4% of the step.
fn added_work() -> Diagnosis {
    let copy =
        OpChange { name: "aten::copy_".into(), activity: None, calls_change: 42.0, self_ms_change: 1.2 };
    Diagnosis {
        ceiling: Some(Ceiling::new(StepPart::ConvolutionsAndMatmuls, 4.0, 100.0)),
        ceiling_unavailable: None,
        cause: Some(Cause::AddedWork { operators: vec![copy], added_ms: 1.5, step_ms: 100.0 }),
    }
}

#[test]
fn a_speed_up_that_is_not_faster_says_why_beside_its_verdict() {
    let base =
        with_cell(with_baseline("a", "aaaaaaa", 400.0), &[Trick::ChannelsLast], &[], (1.3, 1.28, 1.32), 1.0);
    let mut new =
        with_cell(with_baseline("b", "bbbbbbb", 400.0), &[Trick::ChannelsLast], &[], (0.9, 0.88, 0.92), 1.0);
    new.comparisons[0].verdict = Verdict::Slower;
    new.comparisons[0].diagnosis = Some(added_work());
    let gate = judge(&base, &new, false).unwrap();
    let why = "it added work: aten::copy_ +1.20 ms (ceiling 1.04×)";
    assert_eq!(check(&gate, "channels-last · b128").why.as_deref(), Some(why));
    let markdown = gate.markdown();
    let row = markdown.lines().find(|l| l.starts_with("| channels-last")).unwrap();
    assert!(row.ends_with(&format!("| **regression** · why: {why} |")), "{row}");
    let terminal = gate.terminal_text();
    let lines: Vec<&str> = terminal.lines().collect();
    let at = lines.iter().position(|l| l.trim_start().starts_with("regression")).unwrap();
    assert_eq!(lines[at + 1].trim(), format!("why: {why}"), "{terminal}");
    assert!(gate.junit().contains(&format!("; why: {why}</failure>")), "{}", gate.junit());

    // Faster: the gate gives no why, whatever the diagnosis holds.
    new.comparisons[0] = Comparison { verdict: Verdict::Faster, ..new.comparisons[0].clone() };
    let gate = judge(&base, &new, false).unwrap();
    assert_eq!(check(&gate, "channels-last · b128").why, None);
    assert!(!gate.markdown().contains("why:"), "{}", gate.markdown());
}
