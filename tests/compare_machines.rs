//! `trickbench compare` on three machines, as a user runs it: the machines named from their
//! hardware in every artefact, the rows whose effect differs most between machines first, each
//! trick on its own metric, tricks that apply on no machine folded into one line, the heatmap of
//! three machines, and the terminal's answer grouped and within 100 columns.

#[allow(dead_code)]
mod common;

use std::path::Path;

use common::cli::{command, text};
use common::dirs::temp_dir;
use common::fixtures;
use trickbench::engine::Engine;
use trickbench::results::schema::{CellKey, CellStatus, Results};
use trickbench::results::store;
use trickbench::tricks::Trick;

/// The three machines' names, as the hardware gives them.
const EPYC_NEW: &str = "AMD EPYC 7B13 (2 cores) · libtorch 2.11.0";
const EPYC_OLD: &str = "AMD EPYC 7B13 (2 cores) · libtorch 2.10.0";
const XEON: &str = "Intel Xeon Platinum 8481C (2 cores)";

/// [`fixtures::two_engine_run`] on the CPU `cpu_model` with libtorch `libtorch`, its libtorch
/// `debug-off` and `channels-last` effects multiplied by `debug` and `channels`, and `amp` not
/// applicable (no CUDA GPU).
fn machine(cpu_model: &str, libtorch: &str, debug: f64, channels: f64) -> Results {
    let mut r = fixtures::two_engine_run();
    r.system.cpu_model = Some(cpu_model.to_owned());
    r.system.cpu_physical_cores = Some(2);
    r.system.libtorch_version = libtorch.to_owned();
    for (trick, factor) in [(Trick::DebugOff, debug), (Trick::ChannelsLast, channels)] {
        let cell = r
            .cells
            .iter()
            .find(|c| c.key.engine == Engine::Libtorch && c.key.tricks == [trick].into_iter().collect())
            .map(|c| c.id())
            .unwrap();
        let c = r.comparisons.iter_mut().find(|c| c.cell == cell).unwrap();
        (c.speedup, c.speedup_ci_low, c.speedup_ci_high) =
            (c.speedup * factor, c.speedup_ci_low * factor, c.speedup_ci_high * factor);
    }
    let mut amp = r.cells[0].clone();
    amp.key = CellKey { tricks: [Trick::Amp].into_iter().collect(), ..amp.key };
    let reason = "amp: needs a CUDA GPU: fp16 autocast pays off on tensor cores".to_owned();
    (amp.status, amp.throughput, amp.memory) =
        (CellStatus::NotApplicable { reason, when_run: false }, None, None);
    r.cells.push(amp);
    r
}

/// Saves the three machines into `dir` and compares them into `dir/compared` in 100 columns;
/// returns what the command printed.
fn compare_three(dir: &Path) -> String {
    let machines = [
        ("epyc-new.json", machine("AMD EPYC 7B13 64-Core Processor", "2.11.0", 1.0, 1.0)),
        ("xeon.json", machine("Intel(R) Xeon(R) Platinum 8481C CPU @ 2.70GHz", "2.11.0", 1.5, 1.0)),
        ("epyc-old.json", machine("AMD EPYC 7B13 64-Core Processor", "2.10.0", 1.2, 1.15)),
    ];
    let mut machines = machines;
    // The first machine did not plan amp; the others list it as not applicable: it applies nowhere.
    machines[0].1.cells.pop();
    for (name, r) in &machines {
        store::save(r, &dir.join(name)).unwrap();
    }
    let out = command(dir, &["compare", "epyc-new.json", "xeon.json", "epyc-old.json", "--out", "compared"])
        .env("COLUMNS", "100")
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text(&out.stderr));
    text(&out.stdout)
}

#[test]
fn three_machines_are_named_sorted_and_fit_the_terminal() {
    let dir = temp_dir();
    let stdout = compare_three(dir.path());
    for line in stdout.lines() {
        assert!(line.chars().count() <= 100, "wider than 100 columns: {line:?}\n{stdout}");
    }
    for name in [EPYC_NEW, XEON, EPYC_OLD] {
        assert!(stdout.contains(name), "the terminal lacks {name}:\n{stdout}");
    }
    assert!(!stdout.contains("cpu on"), "{stdout}");
    let heading = |h: &str| stdout.find(&format!("\n  {h}")).unwrap_or_else(|| panic!("no {h}:\n{stdout}"));
    let row = |r: &str| stdout.find(&format!("\n    {r}")).unwrap_or_else(|| panic!("no {r}:\n{stdout}"));
    // debug-off helps everywhere, its libtorch effects 1.5× apart; channels-last's lie 1.15× apart;
    // checkpointing saves the same memory everywhere.
    assert!(heading("helps everywhere") < row("debug-off · resnet20"), "{stdout}");
    assert!(row("debug-off · resnet20") < row("checkpointing · resnet20 (memory)"), "{stdout}");
    assert!(
        stdout.contains("applies on no machine (1)") && stdout.contains("needs a CUDA GPU: amp"),
        "{stdout}"
    );

    let compared = dir.path().join("compared");
    let md = std::fs::read_to_string(compared.join("summary.md")).unwrap();
    let table: Vec<&str> = md.lines().filter(|l| l.starts_with("| `")).collect();
    let order: Vec<&str> = table.iter().map(|l| l.split('`').nth(1).unwrap()).collect();
    assert_eq!(order[..2], ["debug-off", "channels-last"], "{md}");
    assert!(!order.contains(&"amp"), "a trick that applies nowhere has no row: {md}");
    let checkpointing = table.iter().find(|l| l.contains("`checkpointing`")).unwrap();
    assert!(
        checkpointing.contains("| memory |") && checkpointing.contains("0.70× memory"),
        "{checkpointing}"
    );
    assert!(md.contains(&format!("| {EPYC_NEW} | {XEON} | {EPYC_OLD} |")), "a column per machine: {md}");
    assert!(md.contains("Applies on no machine (1): needs a CUDA GPU: amp."), "{md}");

    let page = std::fs::read_to_string(compared.join("index.html")).unwrap();
    assert!(page.contains(&format!("<title>{EPYC_NEW} vs {XEON} vs {EPYC_OLD}")), "the page's title");
    for plot in ["compare-at-a-glance.png", "compare-heatmap.png"] {
        assert!(compared.join("plots").join(plot).is_file(), "{plot}");
    }
    let csv = std::fs::read_to_string(compared.join("comparison.csv")).unwrap();
    assert!([EPYC_NEW, XEON, EPYC_OLD].iter().all(|n| csv.contains(n)), "{csv}");
}
