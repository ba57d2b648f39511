//! A factorial design's answer on the terminal and in `summary.md`, from a hand-built analysis on
//! both engines: the design in a line, the main effects grouped by verdict (a memory-judged factor
//! by its memory), the pairs that do not add up with where the engines disagree, the best
//! configuration and the tricks left out, every terminal line within its width.

#[allow(dead_code)]
mod common;

use trickbench::bench::design::Design;
use trickbench::engine::Engine;
use trickbench::report::render_report;
use trickbench::results::factorial::{
    BestConfiguration, FactorialAnalysis, Interaction, InteractionVerdict, LeftOutTrick, MainEffect,
    RatioEstimate,
};
use trickbench::results::schema::{Results, Verdict};
use trickbench::summary::{closing_summary, factorial_summary};
use trickbench::terminal::Terminal;
use trickbench::tricks::Trick::{self, *};
use trickbench::vocabulary::Metric;
use trickbench::workloads::WorkloadId;

use common::dirs::temp_dir;
use common::fixtures;

/// The factors, A to E.
const FACTORS: [Trick; 5] = [ChannelsLast, Checkpointing, ZeroCopy, FusedOptimizer, AvoidSync];

fn estimate(ratio: f64, half: f64) -> RatioEstimate {
    RatioEstimate { ratio, ci_low: ratio - half, ci_high: ratio + half }
}

fn main_effect(trick: Trick, ratio: f64, verdict: Verdict) -> MainEffect {
    let memory = if trick == Checkpointing { estimate(0.70, 0.05) } else { estimate(1.0, 0.0) };
    MainEffect {
        trick,
        metric: if trick == Checkpointing { Metric::Memory } else { Metric::Throughput },
        throughput: estimate(ratio, 0.03),
        verdict,
        memory: Some(memory),
        aliased_with: Vec::new(),
    }
}

/// Every pair additive but channels-last × fused-optimizer (`clash`, with its verdict) and
/// zero-copy × avoid-sync (a synergy on both engines).
fn interactions(clash: (f64, InteractionVerdict)) -> Vec<Interaction> {
    let mut out = Vec::new();
    for (i, a) in FACTORS.iter().enumerate() {
        for b in &FACTORS[i + 1..] {
            let (ratio, verdict) = match (a, b) {
                (ChannelsLast, FusedOptimizer) => clash,
                (ZeroCopy, AvoidSync) => (1.12, InteractionVerdict::Synergy),
                _ => (1.01, InteractionVerdict::Additive),
            };
            let throughput = estimate(ratio, 0.03);
            let (together, predicted) = (1.04 * ratio, 1.04);
            out.push(Interaction {
                tricks: [*a, *b],
                throughput,
                together,
                predicted,
                verdict,
                memory: None,
                aliased_with: Vec::new(),
            });
        }
    }
    out
}

fn analysis(engine: Engine, clash: (f64, InteractionVerdict), channels_last: f64) -> FactorialAnalysis {
    let left = |trick: Trick, reason: &str| LeftOutTrick { trick, reason: reason.to_owned() };
    FactorialAnalysis {
        workload: WorkloadId::Resnet20,
        engine,
        factors: FACTORS.to_vec(),
        configurations: 16,
        generators: vec!["E = ABCD".to_owned()],
        defining_relation: vec!["I = ABCDE".to_owned()],
        resolution: Some(5),
        processes: 3,
        noise_floor_half_width: Some(0.02),
        main_effects: vec![
            main_effect(ChannelsLast, channels_last, Verdict::Faster),
            main_effect(Checkpointing, 0.80, Verdict::Slower),
            main_effect(ZeroCopy, 1.00, Verdict::NoSignificantEffect),
            main_effect(FusedOptimizer, 0.95, Verdict::Slower),
            main_effect(AvoidSync, 1.01, Verdict::WithinNoise),
        ],
        interactions: interactions(clash),
        best: Some(BestConfiguration {
            tricks: vec![ChannelsLast, ZeroCopy, AvoidSync],
            predicted: estimate(1.25, 0.05),
            cell: None,
            measured: Some(estimate(1.22, 0.04)),
            in_design: true,
        }),
        left_out: vec![
            left(Amp, "not applicable on libtorch: amp: needs a CUDA GPU: fp16 autocast pays off on tensor cores"),
            left(Tf32, "not applicable on libtorch: tf32: needs a CUDA GPU: TF32 is a tensor-core format"),
            left(DebugOff, "compared with its own reference (debug-apis-on), not with the baseline the design varies around"),
        ],
    }
}

/// [`fixtures::two_engine_run`] as a factorial design: channels-last and fused-optimizer cancel
/// in PyTorch and combine on libtorch (the engines disagree).
fn factorial_run() -> Results {
    let mut r = fixtures::two_engine_run();
    r.run.design = Design::Factorial;
    r.factorial = vec![
        analysis(Engine::Libtorch, (1.10, InteractionVerdict::Synergy), 1.20),
        analysis(Engine::Pytorch, (0.90, InteractionVerdict::Antagonism), 1.15),
    ];
    r
}

/// `text`'s words one space apart (lines wrapped to a width rejoined).
fn words(text: &str) -> String {
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}

#[test]
fn the_terminal_gives_the_design_its_effects_pairs_best_and_left_out_within_its_width() {
    let results = factorial_run();
    for columns in [40, 80, 100, 120] {
        let summary = closing_summary(&results, &[], Terminal::of_width(columns));
        let widest = summary.lines().map(|l| l.chars().count()).max().unwrap_or(0);
        assert!(widest <= columns, "a line of {widest} at {columns} columns:\n{summary}");
        assert!(summary.contains("factorial design"), "{summary}");
    }
    let summary = closing_summary(&results, &[], Terminal::of_width(100));
    let text = words(&summary);
    assert!(
        text.contains("factorial design · resnet20: 5 tricks in 16 configurations, resolution V (E = ABCD), 3 processes"),
        "{summary}"
    );
    let (_, effects) = summary.split_once("main effects").unwrap();
    let line = |name: &str| effects.lines().find(|l| l.trim_start().starts_with(name)).unwrap().to_owned();
    let channels = line("A channels-last");
    assert!(channels.find("1.15×").unwrap() < channels.find("1.20×").unwrap(), "PyTorch first: {channels}");
    assert!(line("B checkpointing").contains("0.70× memory [0.65, 0.75]"), "{summary}");
    let at = |text: &str| effects.find(text).unwrap_or_else(|| panic!("no {text}: {summary}"));
    assert!(at("  helps") < at("B checkpointing") && at("B checkpointing") < at("  hurts"), "{summary}");
    assert!(at("  hurts") < at("D fused-optimizer") && at("no measurable effect") < at("E avoid-sync"));
    assert!(text.contains(
        "PyTorch: channels-last and fused-optimizer cancel: together 0.94×, where their own effects predict 1.04×"
    ));
    assert!(text.contains("libtorch: channels-last and fused-optimizer combine"), "{summary}");
    let (_, answer) = summary.split_once("factorial design").unwrap();
    assert_eq!(answer.matches("! the engines disagree").count(), 1, "{summary}");
    assert!(text.contains("libtorch: zero-copy and avoid-sync combine"), "{summary}");
    assert!(!text.contains("zero-copy and fused-optimizer"), "additive pairs are not listed: {summary}");
    assert!(
        text.contains("PyTorch: best predicted: channels-last + zero-copy + avoid-sync, 1.25×"),
        "{summary}"
    );
    assert!(text.contains("left out of the design (3)"), "{summary}");
    assert!(text.contains("needs a CUDA GPU: amp, tf32"), "{summary}");
    assert!(text.contains(
        "compared with its own reference, not with the baseline the design varies around: debug-off"
    ));
}

#[test]
fn only_a_factorial_run_has_a_factorial_answer() {
    let plain = fixtures::two_engine_run();
    assert_eq!(factorial_summary(&plain, Terminal::of_width(100)), "");
    assert!(!closing_summary(&plain, &[], Terminal::of_width(100)).contains("factorial"));
    let answer = factorial_summary(&factorial_run(), Terminal::of_width(100));
    assert!(answer.contains("main effects") && !answer.contains("not applicable ("), "{answer}");
}

#[test]
fn where_every_pair_adds_up_the_terminal_says_so_once() {
    let mut results = factorial_run();
    for a in &mut results.factorial {
        a.interactions = interactions((1.0, InteractionVerdict::Additive))
            .into_iter()
            .map(|i| Interaction { verdict: InteractionVerdict::Additive, ..i })
            .collect();
    }
    let text = words(&factorial_summary(&results, Terminal::of_width(100)));
    assert!(
        text.contains(
            "interactions: all 10 pairs of the 5 tricks add up within the noise floor: no interaction measured \
             (both engines)"
        ),
        "{text}"
    );
}

#[test]
fn summary_markdown_opens_with_the_factorial_sentences_effects_and_matrix() {
    let out = temp_dir();
    let files = render_report(&[factorial_run()], out.path()).unwrap();
    let md = std::fs::read_to_string(&files.summary_md).unwrap();
    let section = md.find("## Which tricks combine and which cancel — resnet20").expect(&md);
    let overview = md.find("## resnet20 ·").expect(&md);
    assert!(section < overview, "the design's answer comes first:\n{md}");
    assert!(md.contains("resnet20: 5 tricks in 16 configurations, resolution V (E = ABCD), 3 processes."));
    assert!(md.contains("- In PyTorch: channels-last and fused-optimizer cancel:"), "{md}");
    assert!(md.contains("(**the engines disagree**)"), "{md}");
    assert!(md.contains("| Trick | Effect in PyTorch | Effect on libtorch | Verdict |"), "{md}");
    assert!(
        md.contains("| B checkpointing | 0.70× memory [0.65, 0.75] | 0.70× memory [0.65, 0.75] | helps |")
    );
    assert!(md.contains("| A channels-last | 1.15× [1.12, 1.18] | 1.20× [1.17, 1.23] | helps |"), "{md}");
    assert!(md.contains("| | B | C | D | E |\n|---|---|---|---|---|\n"), "{md}");
    let row = |letter: &str| md.lines().find(|l| l.starts_with(&format!("| **{letter}** "))).expect(&md);
    assert_eq!(
        row("A"),
        "| **A** channels-last | +1.0% / +1.0% | +1.0% / +1.0% | −10.0% ▼ / +10.0% ▲ ! | +1.0% / +1.0% |"
    );
    assert_eq!(row("C"), "| **C** zero-copy |  |  | +1.0% / +1.0% | +12.0% ▲ / +12.0% ▲ |");
    assert!(!md.contains("| **E** "), "no row for the last factor: {md}");
    assert!(md.contains("- needs a CUDA GPU: amp, tf32"), "{md}");
}
