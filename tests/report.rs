//! Reports rendered from fixture results: every file is written and parses, the HTML names every
//! cell and is self-contained, and a comparison lists what does not join. With Chromium installed
//! the report is also opened headless, checked for console errors and screenshotted into
//! `target/test-output/`.

#[allow(dead_code)]
mod common;

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;

use scraper::{Html, Selector};
use trickbench::bench::design::Design;
use trickbench::engine::Engine;
use trickbench::report::{
    render_comparison, render_report, render_report_from, CompareBy, ReportError, ReportFiles,
};
use trickbench::results::diagnosis::{Cause, Ceiling, Diagnosis};
use trickbench::results::factorial::{
    BestConfiguration, FactorialAnalysis, Interaction, InteractionVerdict, LeftOutTrick, MainEffect,
    RatioEstimate,
};
use trickbench::results::schema::{CellKey, MeasurementDesign, NoiseFloor, Results, Verdict};
use trickbench::terminal::Terminal;
use trickbench::tricks::Trick;
use trickbench::vocabulary::StepPart;
use trickbench::workloads::WorkloadId;

use common::dirs::{checkout, kept_output_dir, temp_dir};
use common::fixtures;

fn file_names(files: &ReportFiles) -> BTreeSet<String> {
    files.plots.iter().map(|p| p.file_name().unwrap().to_string_lossy().into_owned()).collect()
}

/// Every PNG decodes, every SVG parses as XML, and the HTML parses without errors and embeds one
/// inline SVG per plot without reaching for the network.
fn check_files(files: &ReportFiles) -> Html {
    for path in files.all() {
        assert!(path.is_file(), "{} was not written", path.display());
    }
    let (mut svgs, mut narrow) = (0, 0);
    for plot in &files.plots {
        match plot.extension().and_then(|e| e.to_str()) {
            Some("png") => {
                let image = image::open(plot).unwrap_or_else(|e| panic!("{}: {e}", plot.display()));
                assert!(image.width() >= 900 && image.height() >= 150, "{}", plot.display());
            }
            Some("svg") => {
                if plot.to_string_lossy().ends_with("-narrow.svg") {
                    narrow += 1;
                } else {
                    svgs += 1;
                }
                let text = std::fs::read_to_string(plot).unwrap();
                let doc =
                    roxmltree::Document::parse(&text).unwrap_or_else(|e| panic!("{}: {e}", plot.display()));
                assert_eq!(doc.root_element().tag_name().name(), "svg");
            }
            other => panic!("unexpected plot file {} ({other:?})", plot.display()),
        }
    }
    let html = std::fs::read_to_string(&files.index_html).unwrap();
    let doc = Html::parse_document(&html);
    assert!(doc.errors.is_empty(), "HTML parse errors: {:?}", doc.errors);
    assert_eq!(doc.select(&Selector::parse("figure > .wide > svg").unwrap()).count(), svgs);
    assert_eq!(doc.select(&Selector::parse("figure > .narrow > svg").unwrap()).count(), narrow);
    for selector in ["script[src]", "link[href]", "img[src^='http']", "iframe"] {
        assert_eq!(doc.select(&Selector::parse(selector).unwrap()).count(), 0, "{selector} in index.html");
    }
    let external = Selector::parse("a[href^='http'], [src^='http']").unwrap();
    assert_eq!(doc.select(&external).count(), 0, "index.html links to the network");
    doc
}

fn text(doc: &Html) -> String {
    doc.root_element().text().collect()
}

#[test]
fn report_renders_every_cell_plot_and_table() {
    let mut cpu = fixtures::cpu_run();
    cpu.run.protocol.rounds = 8;
    let out = kept_output_dir("report");
    let files = render_report(std::slice::from_ref(&cpu), &out).unwrap();
    let doc = check_files(&files);
    let page = text(&doc);

    for cell in &cpu.cells {
        assert!(page.contains(cell.id().as_str()), "index.html lacks cell {}", cell.id());
    }
    let slug = "resnet20-cpu-on-fixture-cpu-host-quick";
    let mut expected: BTreeSet<String> =
        ["speedup", "memory", "tta-curves", "tta-bars", "stack", "batch-throughput", "batch-memory"]
            .iter()
            .flat_map(|kind| [".png", ".svg", "-narrow.svg"].map(|end| format!("{kind}-{slug}{end}")))
            .collect();
    expected.extend([".png", ".svg", "-narrow.svg"].map(|end| format!("{slug}-at-a-glance{end}")));
    assert_eq!(file_names(&files), expected);
    // The first screen opens with the figure of every trick's effect, then the floors, then the table.
    let overview = Selector::parse(&format!("#overview-{slug}")).unwrap();
    let first = doc.select(&overview).next().expect("the group's first screen");
    let order: Vec<&str> = first
        .children()
        .filter_map(scraper::ElementRef::wrap)
        .map(|e| e.value().attr("class").unwrap_or(e.value().name()))
        .collect();
    let at = |class: &str| {
        order.iter().position(|c| *c == class).unwrap_or_else(|| panic!("no {class}: {order:?}"))
    };
    assert!(
        at("conclusion") < at("glance") && at("glance") < at("floors") && at("floors") < at("wrap"),
        "{order:?}"
    );
    // Noise: every measured cell shows its spread, and the one wider than asked is flagged.
    assert!(page.contains("CV 2.0%, 0 of 10 windows outliers"));
    assert!(page.contains(
        "noisy: the median's interval is ±8.0%, wider than the ±5.0% asked; windows vary by 11.0% \
         (coefficient of variation), 2 of 10 are outliers"
    ));
    let words = page.split_whitespace().collect::<Vec<_>>().join(" ");
    // Eight processes pooled need each at ±5.0%·√(8/2) = ±10.0%.
    assert!(words.contains(
        "and more, up to 10, while the bootstrap interval of that process's median is wider than it needs \
         for the cell's interval, pooled over 8 processes, to reach ±5.0% (the precision asked): ±10.0% per process"
    ));
    // The stack starts at the plain baseline, not at debug-off's slower reference (same trick set).
    let stack = std::fs::read_to_string(out.join("plots").join(format!("stack-{slug}.svg"))).unwrap();
    assert!(stack.contains("410 images/s") && !stack.contains("37 images/s"), "stack foot: {stack}");

    assert!(
        doc.select(&Selector::parse("#synthetic-banner").unwrap()).next().is_some(),
        "no synthetic banner"
    );
    for needle in [
        "amp: needs a CUDA GPU (test fixture)",
        "shape mismatch [128, 16] vs [128, 10]",
        "out of memory",
        "timed out",
        "1.18× [1.14, 1.22]",
        "bootstrap interval of the median (2000 resamples)",
        "5 timed windows of 10 steps",
        "0123456789abcdef0123456789abcdef01234567",
    ] {
        assert!(page.contains(needle), "index.html lacks {needle:?}");
    }
    // Measured tricks have their claim; tricks the run did not ask for, or could not run, have none.
    let has_section =
        |t: &str| doc.select(&Selector::parse(&format!("#trick-{t}")).unwrap()).next().is_some();
    for t in ["avoid-sync", "zero-grad-none", "channels-last", "debug-off", "no-grad-eval"] {
        assert!(has_section(t), "no section for {t}");
    }
    for t in ["lars", "amp", "flash-attention"] {
        assert!(!has_section(t), "a section for {t}, which did not measure");
    }
    assert!(!page.contains("Not measured in these results"));
    // Not-applicable tricks are one line per reason.
    let na: Vec<String> =
        doc.select(&Selector::parse(".na-list li").unwrap()).map(|li| li.text().collect()).collect();
    assert_eq!(na, ["amp, amp-bf16, cudnn-benchmark: needs a CUDA GPU (test fixture)"]);
    // The raw JSON is next to the report and links resolve.
    assert_eq!(files.results_json, vec![out.join("results-1.json")]);
    let copy: Results = serde_json::from_slice(&std::fs::read(&files.results_json[0]).unwrap()).unwrap();
    assert_eq!((copy.run.id, copy.cells.len()), (cpu.run.id.clone(), cpu.cells.len()));
    for a in doc.select(&Selector::parse("a[href]").unwrap()) {
        let href = a.value().attr("href").unwrap();
        if !href.starts_with('#') {
            assert!(out.join(href).is_file(), "broken link {href}");
        }
    }
}

#[test]
fn csv_has_one_row_per_cell_with_units() {
    let cpu = fixtures::cpu_run();
    let files = render_report(std::slice::from_ref(&cpu), &kept_output_dir("csv")).unwrap();
    let mut reader = csv::Reader::from_path(&files.csv).unwrap();
    let headers = reader.headers().unwrap().clone();
    for h in [
        "cell_id",
        "status",
        "sample_unit",
        "throughput_median_samples_per_s",
        "peak_rss_bytes",
        "speedup_x",
        "ceiling_speedup",
        "ceiling_part",
        "ceiling_share_percent",
        "cause",
        "cause_detail",
        "time_to_target_s",
    ] {
        assert!(headers.iter().any(|x| x == h), "cells.csv lacks column {h}");
    }
    let rows: Vec<csv::StringRecord> = reader.records().map(Result::unwrap).collect();
    assert_eq!(rows.len(), cpu.cells.len());
    let id = headers.iter().position(|h| h == "cell_id").unwrap();
    let status = headers.iter().position(|h| h == "status").unwrap();
    let ids: Vec<&str> = rows.iter().map(|r| &r[id]).collect();
    assert_eq!(ids, cpu.cells.iter().map(|c| c.id().to_string()).collect::<Vec<_>>());
    let unit = headers.iter().position(|h| h == "sample_unit").unwrap();
    assert!(rows.iter().all(|r| &r[unit] == "images"));
    let statuses: BTreeSet<&str> = rows.iter().map(|r| &r[status]).collect();
    assert_eq!(statuses, BTreeSet::from(["ok", "not applicable", "failed", "out of memory", "timed out"]));
}

#[test]
fn summary_markdown_has_the_headline_and_working_plot_links() {
    let cpu = fixtures::cpu_run();
    let out = kept_output_dir("markdown");
    let files = render_report(std::slice::from_ref(&cpu), &out).unwrap();
    let md = std::fs::read_to_string(&files.summary_md).unwrap();
    assert!(md.contains("| Trick | Judged by | Verdict | Effect on its metric |"), "{md}");
    // One title; the group is a heading, said once, not repeated on every row.
    assert_eq!(md.lines().filter(|l| l.starts_with("# ")).count(), 1, "{md}");
    let group = "resnet20 · cpu on fixture-cpu-host · quick profile";
    assert!(md.contains(&format!("\n## {group}\n")), "{md}");
    assert!(!md.lines().any(|l| l.starts_with('|') && l.contains(group)), "{md}");
    assert!(
        md.contains(
            "| avoid-sync | throughput | helps | 1.18× throughput [1.14, 1.22] (separate processes) |"
        ),
        "{md}"
    );
    assert!(md.contains("avoid-sync") && md.contains("**Synthetic data.**"), "{md}");
    let links: Vec<&str> = md.split("](").skip(1).map(|s| &s[..s.find(')').unwrap()]).collect();
    assert!(links.len() > files.plots.len() / 2, "{md}");
    for link in links {
        let link = link.split('#').next().unwrap();
        assert!(out.join(link).is_file(), "summary.md links to missing {link}");
    }
}

#[test]
fn several_results_files_render_together() {
    let (cpu, gpu) = (fixtures::cpu_run(), fixtures::gpu_fixture());
    let files = render_report(&[cpu.clone(), gpu.clone()], &kept_output_dir("two-runs")).unwrap();
    let doc = check_files(&files);
    let page = text(&doc);
    for cell in cpu.cells.iter().chain(&gpu.cells) {
        assert!(page.contains(cell.id().as_str()), "index.html lacks {}", cell.id());
    }
    assert!(file_names(&files).contains("speedup-resnet20-cuda-0-on-test-fixture-gpu-not-measured-quick.png"));
    assert_eq!(files.results_json.len(), 2);
}

#[test]
fn comparison_joins_machines_and_lists_mismatches() {
    let (cpu, gpu) = (fixtures::cpu_run(), fixtures::gpu_fixture());
    let out = kept_output_dir("compare");
    let cpu_report = render_report(std::slice::from_ref(&cpu), &out.join("cpu-run")).unwrap();
    let compared =
        render_comparison(&[cpu, gpu], &[Some(cpu_report.index_html)], CompareBy::Auto, &out.join("both"))
            .unwrap();
    assert!(
        compared.lined_up.starts_with("2 machines (auto: the runs are on 2 machines"),
        "{}",
        compared.lined_up
    );
    let files = compared.files;
    let doc = check_files(&files);
    assert_eq!(
        file_names(&files),
        BTreeSet::from(
            ["compare-at-a-glance.png", "compare-at-a-glance.svg", "compare-at-a-glance-narrow.svg"]
                .map(String::from)
        ),
        "two machines have no heatmap"
    );
    // The machine whose report was given links it; the other says it was not given.
    let machines: Vec<String> =
        doc.select(&Selector::parse("#machines tbody tr").unwrap()).map(|r| r.inner_html()).collect();
    assert!(machines[0].contains("Test Fixture (1 core)"), "{}", machines[0]);
    assert!(machines[0].contains("href=\"../cpu-run/index.html\""), "{}", machines[0]);
    assert!(machines[1].contains("NVIDIA H200 (test fixture)") && machines[1].contains("not given"));

    let row = |trick: &str| {
        let rows = Selector::parse("#table tbody tr").unwrap();
        doc.select(&rows)
            .map(|r| r.text().collect::<String>())
            .find(|t| t.starts_with(trick))
            .unwrap_or_else(|| panic!("no row {trick}"))
    };
    let amp = row("amp");
    assert!(amp.contains("not applicable") && amp.contains("helps2.10× throughput [2.00, 2.20]"), "{amp}");
    assert!(amp.contains("depends on the machine"), "{amp}");
    assert!(row("no-bias-before-bn").contains("not in this run"));

    let mismatches = Selector::parse("#mismatches tr").unwrap();
    let listed: Vec<String> = doc.select(&mismatches).map(|r| r.text().collect()).collect();
    let find = |label: &str| {
        listed.iter().find(|t| t.contains(label)).unwrap_or_else(|| panic!("{label} not listed"))
    };
    assert!(find("no-bias-before-bn · b128").contains("NVIDIA H200 (test fixture)"));
    assert!(find("amp+channels-last · b128").contains("Test Fixture (1 core)"));
    assert!(find("baseline (time to accuracy)").contains("NVIDIA H200"));

    let md = std::fs::read_to_string(&files.summary_md).unwrap();
    assert!(
        md.contains("## Mismatched and missing cells") && md.contains("| `amp` | resnet20 | throughput |"),
        "{md}"
    );
    let csv = std::fs::read_to_string(&files.csv).unwrap();
    assert!(csv.lines().next().unwrap().contains("speedup_x") && csv.contains(",missing,"), "{csv}");
}

#[test]
fn errors_name_their_file() {
    let out = kept_output_dir("errors");
    assert!(matches!(render_report(&[], &out), Err(ReportError::NoResults)));
    let blocker = out.join("not-a-directory");
    std::fs::write(&blocker, "").unwrap();
    let err = render_report(&[fixtures::cpu_run()], &blocker).unwrap_err();
    assert!(err.to_string().contains("not-a-directory"), "{err}");
}

/// The Chromium binary, if installed.
fn chromium() -> Option<PathBuf> {
    ["chromium", "chromium-browser", "google-chrome"].into_iter().find_map(|name| {
        let out = Command::new("which").arg(name).output().ok()?;
        out.status.success().then(|| PathBuf::from(String::from_utf8_lossy(&out.stdout).trim()))
    })
}

#[test]
fn report_renders_in_headless_chromium_without_console_errors() {
    let Some(chromium) = chromium() else {
        assert!(
            std::env::var_os("CI").is_none(),
            "chromium is not installed and CI is set: run scripts/install-test-deps"
        );
        println!("skipping: chromium is not installed (scripts/install-test-deps installs it)");
        return;
    };
    let out = kept_output_dir("chromium");
    let files = render_report(&[fixtures::cpu_run(), fixtures::gpu_fixture()], &out.join("report")).unwrap();
    let compare = render_comparison(
        &[fixtures::cpu_run(), fixtures::gpu_fixture()],
        &[],
        CompareBy::Auto,
        &out.join("compare"),
    )
    .unwrap()
    .files;
    let history =
        render_comparison(&history_runs(), &[], CompareBy::Auto, &out.join("history")).unwrap().files;
    for (name, index) in
        [("report", &files.index_html), ("compare", &compare.index_html), ("history", &history.index_html)]
    {
        let profile = temp_dir();
        let screenshot = out.join(format!("{name}.png"));
        let run = Command::new(&chromium)
            .args([
                "--headless",
                "--no-sandbox",
                "--disable-gpu",
                "--disable-background-networking",
                "--disable-component-update",
                "--disable-sync",
                "--no-first-run",
                "--hide-scrollbars",
                "--enable-logging=stderr",
                "--v=0",
                "--window-size=1280,2000",
            ])
            .arg(format!("--user-data-dir={}", profile.path().display()))
            .arg(format!("--screenshot={}", screenshot.display()))
            .arg(format!("file://{}", index.display()))
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&run.stderr);
        assert!(run.status.success(), "chromium failed on {name}: {stderr}");
        let console: Vec<&str> = stderr
            .lines()
            .filter(|l| l.contains("CONSOLE") || l.contains("Uncaught") || l.contains("ERR_FILE"))
            .collect();
        assert!(console.is_empty(), "console errors rendering {name}: {console:#?}");
        let shot = image::open(&screenshot).unwrap();
        assert_eq!((shot.width(), shot.height()), (1280, 2000));
        println!("screenshot: {}", screenshot.display());
    }
}

/// The committed results of a real run under `reports/`, loaded as `trickbench report` loads them.
fn committed(run: &str, files: &[&str]) -> Vec<Results> {
    let dir = checkout("reports").join(run);
    files
        .iter()
        .map(|f| {
            let mut r = trickbench::results::store::load(&dir.join(f)).unwrap();
            r.time_to_accuracy = trickbench::analysis::time_to_accuracy_summaries(&r.cells);
            r
        })
        .collect()
}

/// The first screen's verdict rows as (trick, judged by, verdict, effect) texts.
fn verdict_rows(doc: &Html) -> Vec<[String; 4]> {
    let rows = Selector::parse("table.verdicts tbody tr").unwrap();
    let cells = Selector::parse("td").unwrap();
    doc.select(&rows)
        .map(|r| {
            let t: Vec<String> =
                r.select(&cells).map(|c| c.text().collect::<String>().trim().to_owned()).collect();
            [t[0].clone(), t[1].clone(), t[2].clone(), t[3].clone()]
        })
        .collect()
}

fn row_of<'a>(rows: &'a [[String; 4]], trick: &str) -> &'a [String; 4] {
    rows.iter().find(|r| r[0] == trick).unwrap_or_else(|| panic!("no verdict row for {trick}: {rows:#?}"))
}

/// A results set of every design the report knows, by name.
fn design_reports() -> Vec<(&'static str, Vec<Results>)> {
    let run = "cpu-xeon-2core-20261130";
    let one = |suffix: &str| committed(&format!("{run}-{suffix}"), &["results-1.json"]);
    vec![
        ("ablation", one("quick")),
        ("convergence", one("quick-convergence")),
        ("stack-gpt", one("quick-gpt")),
        ("leave-one-out", one("quick-gpt-leave-one-out")),
        ("memory", one("quick-memory")),
        (
            "two-workloads",
            committed(&format!("{run}-quick-resnet-and-gpt"), &["results-1.json", "results-2.json"]),
        ),
        ("super-convergence", vec![fixtures::super_convergence_run()]),
        ("batch-sweep", vec![fixtures::batch_sweep_run()]),
        ("factorial", vec![factorial_run()]),
    ]
}

/// Renders every design and a comparison into `target/test-output/<name>/<design>`.
fn render_designs(name: &str) -> PathBuf {
    let out = kept_output_dir(name);
    for (name, results) in design_reports() {
        render_report(&results, &out.join(name)).unwrap();
    }
    render_comparison(
        &[fixtures::cpu_run(), fixtures::gpu_fixture()],
        &[],
        CompareBy::Device,
        &out.join("compare"),
    )
    .unwrap();
    render_comparison(&history_runs(), &[], CompareBy::Auto, &out.join("history")).unwrap();
    out
}

/// Three versions of one plan on one machine, with a long trick list: a history.
fn history_runs() -> Vec<Results> {
    use trickbench::tricks::Trick::*;
    let tricks =
        [AvoidSync, ZeroGradNone, ChannelsLast, LoaderWorkers, ZeroCopy, FusedOptimizer, JitFusion, DebugOff];
    let run = |i: usize, day: &str, commit: &str| {
        let effects: Vec<_> = tricks.iter().map(|&t| (t, 1.0 + 0.1 * i as f64, 0.05)).collect();
        fixtures::version_run(&format!("fixture-version-{i}"), day, commit, &effects)
    };
    vec![
        run(0, "2026-11-30T10:00:00Z", "0123456789abcdef"),
        run(1, "2026-12-01T10:00:00Z", "1123456789abcdef-dirty"),
        run(2, "2026-12-02T10:00:00Z", "2123456789abcdef"),
    ]
}

fn page(dir: &Path) -> Html {
    let html = std::fs::read_to_string(dir.join("index.html")).unwrap();
    Html::parse_document(&html)
}

#[test]
fn first_screen_judges_each_trick_by_its_own_metric() {
    let out = kept_output_dir("first-screen");
    let designs = design_reports();
    let render = |name: &str| {
        let results = &designs.iter().find(|(n, _)| *n == name).unwrap().1;
        render_report(results, &out.join(name)).unwrap();
        page(&out.join(name))
    };

    // Memory tricks by memory: checkpointing uses 0.56× the memory, so it helps, though slower.
    let memory = verdict_rows(&render("memory"));
    assert_eq!(row_of(&memory, "checkpointing")[1..], ["memory", "helps", "0.56× memory, 0.72× throughput"]);
    // A memory trick that saves no memory and is significantly slower is a cost: checkpointing in
    // the committed quick run of ResNet-8, 1.05× the memory at 0.66× the throughput.
    let ablation = verdict_rows(&render("ablation"));
    assert_eq!(
        row_of(&ablation, "checkpointing")[1..],
        ["memory", "hurts", "no memory saved (1.05×) and 0.66× throughput [0.56, 0.71]: a cost"]
    );
    // Time-to-accuracy tricks by time: one-cycle took 86.1 s against 60.4 s, 1.43× slower.
    let convergence_doc = render("convergence");
    let convergence = verdict_rows(&convergence_doc);
    let one_cycle = row_of(&convergence, "one-cycle · b64");
    assert_eq!(one_cycle[1..3], ["time-to-accuracy", "hurts"]);
    assert!(one_cycle[3].starts_with("1.43× slower"), "{one_cycle:?}");
    let max_batch = row_of(&convergence, "max-batch · b2048");
    assert_eq!(max_batch[1], "time-to-accuracy");
    let words = text(&convergence_doc);
    let sooner_below_one = regex_free_find(&words, "× sooner", |ratio| ratio < 1.0);
    assert!(sooner_below_one.is_none(), "a ratio below one with 'sooner': {sooner_below_one:?}");
    let conclusion = convergence_doc.select(&Selector::parse(".conclusion").unwrap()).next().unwrap();
    assert!(conclusion.text().collect::<String>().contains("hurt (one-cycle · b64, max-batch · b2048"));
    // Its memory probes: where the doubling stopped, with and without checkpointing.
    let probe_rows: Vec<String> = convergence_doc
        .select(&Selector::parse("#memory tbody tr").unwrap())
        .map(|row| row.text().collect::<Vec<_>>().join("|"))
        .collect();
    assert_eq!(probe_rows.len(), 2, "{probe_rows:?}");
    for (row, set) in probe_rows.iter().zip(["baseline", "checkpointing"]) {
        assert!(row.starts_with(&format!("{set}|2048|4096: out of memory|64 ✓")), "{row}");
    }
    // Baseline in absolute units and MiB on the first screen.
    let baseline: String =
        convergence_doc.select(&Selector::parse(".baseline").unwrap()).next().unwrap().text().collect();
    assert!(baseline.starts_with("Baseline: 1205 images/s") && baseline.contains(" MiB"), "{baseline}");

    // A time-to-target gain whose seeds overlap by more than the noise floor is not called a help:
    // the committed speedrun's muon, 1.19× sooner over two seeds against a ±23% floor, which its
    // speedrun left out of the combination.
    let speedrun = committed("cpu-xeon-2core-20261202-quick-speedrun", &["results.json"]);
    render_report(&speedrun, &out.join("speedrun")).unwrap();
    let speedrun_rows = verdict_rows(&page(&out.join("speedrun")));
    let muon = row_of(&speedrun_rows, "muon");
    assert_eq!(muon[2], "inside the A/A noise floor", "{muon:?}");
    assert!(
        muon[3].starts_with("1.19× sooner") && muon[3].ends_with("by more than the A/A noise floor"),
        "{muon:?}"
    );

    // Super-convergence: one-cycle reached the target later than the baseline.
    let sc = verdict_rows(&render("super-convergence"));
    let row = row_of(&sc, "one-cycle");
    assert_eq!(row[2], "hurts");
    assert!(row[3].contains("× slower to test accuracy ≥ 50.0%"), "{row:?}");
    // A batch sweep has no tricks: the first screen says so and still gives the baseline.
    let sweep = text(&render("batch-sweep"));
    assert!(sweep.contains("No trick was measured against a baseline"));
    assert!(sweep.contains("Baseline: 330 images/s [320, 340] at batch 64; peak memory 640 MiB"), "{sweep}");
}

/// The first number before `suffix` in `text` for which `bad` holds.
fn regex_free_find(text: &str, suffix: &str, bad: impl Fn(f64) -> bool) -> Option<String> {
    text.match_indices(suffix).find_map(|(at, _)| {
        let head = &text[..at];
        let start = head.rfind(|c: char| !(c.is_ascii_digit() || c == '.')).map_or(0, |i| i + 1);
        let number: f64 = head[start..].parse().ok()?;
        bad(number).then(|| text[start..at + suffix.len()].to_owned())
    })
}

#[test]
fn leave_one_out_and_stack_say_what_each_step_does() {
    let out = kept_output_dir("designs-wording");
    let designs = design_reports();
    for (name, results) in &designs {
        if *name == "leave-one-out" || *name == "stack-gpt" {
            render_report(results, &out.join(name)).unwrap();
        }
    }
    let loo = page(&out.join("leave-one-out"));
    let header: String =
        loo.select(&Selector::parse("table.verdicts th").unwrap()).next().unwrap().text().collect();
    assert_eq!(header, "Trick removed");
    let rows = verdict_rows(&loo);
    let avoid_sync = row_of(&rows, "avoid-sync");
    assert_eq!(avoid_sync[2], "helps");
    assert!(avoid_sync[3].starts_with("removing it costs 10% throughput"), "{avoid_sync:?}");
    let jit = row_of(&rows, "jit-fusion");
    assert_eq!(jit[2], "hurts");
    assert!(jit[3].starts_with("removing it gains 39% throughput"), "{jit:?}");

    let stack = page(&out.join("stack-gpt"));
    let steps: Vec<String> = stack
        .select(&Selector::parse("table.stack tbody tr td:first-child").unwrap())
        .map(|td| td.text().collect())
        .collect();
    assert_eq!(
        steps,
        [
            "+ flash-attention",
            "+ avoid-sync",
            "+ zero-copy",
            "+ fused-optimizer",
            "+ zero-grad-none",
            "+ loader-workers",
            "+ jit-fusion"
        ]
    );
    let gains: Vec<String> = stack
        .select(&Selector::parse("table.stack tbody tr td:last-child").unwrap())
        .map(|td| td.text().collect())
        .collect();
    // 1.21× alone, then 0.953 / 1.211 for avoid-sync on top.
    assert_eq!(gains[..2], ["1.21×", "0.79×"]);
    // The single tricks' table does not mix in the stack's combinations.
    assert!(verdict_rows(&stack).iter().all(|r| !r[0].contains('+')));
}

/// A stack measured on both engines (the committed GPT stack, with each cell and comparison
/// copied onto the PyTorch engine) gets a table and a waterfall per engine, PyTorch's first.
#[test]
fn a_stack_on_both_engines_gets_a_table_and_a_waterfall_per_engine() {
    let mut results = committed("cpu-xeon-2core-20261130-quick-gpt", &["results-1.json"]).remove(0);
    let on_pytorch = |id: &trickbench::results::schema::CellId,
                      cells: &[trickbench::results::schema::CellResult]| {
        let cell = cells.iter().find(|c| c.id() == *id).unwrap();
        CellKey { engine: Engine::Pytorch, ..cell.key.clone() }.id()
    };
    let cells = results.cells.clone();
    let mut copies: Vec<_> = cells
        .iter()
        .map(|c| trickbench::results::schema::CellResult {
            key: CellKey { engine: Engine::Pytorch, ..c.key.clone() },
            ..c.clone()
        })
        .collect();
    let comparisons: Vec<_> = results
        .comparisons
        .iter()
        .map(|c| trickbench::results::schema::Comparison {
            cell: on_pytorch(&c.cell, &cells),
            baseline: on_pytorch(&c.baseline, &cells),
            ..c.clone()
        })
        .collect();
    results.cells.append(&mut copies);
    results.comparisons.extend(comparisons);
    let out = temp_dir();
    let rendered = trickbench::report::render_report(&[results], out.path()).unwrap();
    let doc = page(out.path());
    let titles: Vec<String> = doc
        .select(&Selector::parse("h3").unwrap())
        .map(|h| h.text().collect())
        .filter(|t: &String| t.contains("stack"))
        .collect();
    assert_eq!(
        titles,
        ["The stack in PyTorch, one trick at a time", "The stack on libtorch, one trick at a time"]
    );
    let tables = doc.select(&Selector::parse("table.stack").unwrap()).count();
    assert_eq!(tables, 2);
    let plots: Vec<String> = rendered
        .plots
        .iter()
        .filter_map(|p| p.file_name().map(|n| n.to_string_lossy().into_owned()))
        .filter(|n| n.starts_with("stack-") && n.ends_with(".png"))
        .collect();
    assert_eq!(plots.len(), 2, "{plots:?}");
    assert!(
        plots.iter().any(|n| n.contains("-pytorch")) && plots.iter().any(|n| n.contains("-libtorch")),
        "{plots:?}"
    );
}

#[test]
fn titles_name_the_run_and_the_index_lists_every_report() {
    let out = render_designs("designs-index");
    let title = Selector::parse("title").unwrap();
    let h1 = Selector::parse("h1").unwrap();
    for (name, results) in design_reports() {
        let doc = page(&out.join(name));
        let id = &results[0].run.id;
        for s in [&title, &h1] {
            let t: String = doc.select(s).next().unwrap().text().collect();
            assert!(t.contains(id.as_str()), "{name}: {t:?} does not name run {id}");
        }
    }
    let index = trickbench::report::write_index(&out).unwrap();
    let doc = Html::parse_document(&std::fs::read_to_string(&index).unwrap());
    let items: Vec<String> =
        doc.select(&Selector::parse("ul.index li").unwrap()).map(|li| li.text().collect()).collect();
    assert_eq!(items.len(), design_reports().len() + 2, "{items:#?}");
    let links: Vec<&str> =
        doc.select(&Selector::parse("ul.index a").unwrap()).filter_map(|a| a.value().attr("href")).collect();
    for link in &links {
        assert!(out.join(link).is_file(), "index links to missing {link}");
    }
    for page in ["memory/index.html", "compare/index.html", "history/index.html"] {
        assert!(links.contains(&page), "{page} not in {links:?}");
    }
    let memory = items.iter().find(|i| i.contains("quick-memory")).unwrap();
    assert!(memory.contains("Of 2 tricks measured, 2 help (checkpointing, grad-accumulation)"), "{memory}");
}

/// Measures the page once loaded, with every `<details>` opened: elements whose right edge passes
/// the viewport (a table's own scroll box may hold wider content, but the box itself must fit; a
/// plot counts as its `<svg>` box), and which scroll boxes scroll. Headless Chromium keeps windows
/// at least 500 px wide, so the page is laid out at `WIDTH` px by setting the root element's width.
const LAYOUT_PROBE: &str = r#"<style>html { width: WIDTHpx; }</style><script>
addEventListener("load", function () {
  document.querySelectorAll("details").forEach(function (d) { d.open = true; });
  var width = WIDTH, wide = [];
  document.querySelectorAll("body *").forEach(function (el) {
    var box = el.closest(".wrap, svg");
    if (box && box !== el) return;
    var r = el.getBoundingClientRect();
    if (r.width > 0 && r.right > width + 1) wide.push(el.tagName + "." + el.className + ":" + Math.round(r.right));
  });
  var scrolling = [];
  document.querySelectorAll(".wrap").forEach(function (box) {
    if (box.scrollWidth > box.clientWidth + 1) scrolling.push(box.firstElementChild.className);
  });
  var out = document.createElement("pre");
  out.id = "layout";
  out.textContent = JSON.stringify({ width: width, wide: wide.slice(0, 8), scrolling: scrolling });
  document.body.appendChild(out);
});
</script>"#;

/// Opens `index.html` of `dir` with [`LAYOUT_PROBE`] at `width` px and returns what it measured.
fn layout(chromium: &Path, dir: &Path, width: u32) -> serde_json::Value {
    let html = std::fs::read_to_string(dir.join("index.html")).unwrap();
    let probe = dir.join("layout-probe.html");
    let script = LAYOUT_PROBE.replace("WIDTH", &width.to_string());
    std::fs::write(&probe, html.replace("</body>", &format!("{script}</body>"))).unwrap();
    let profile = temp_dir();
    let run = Command::new(chromium)
        .args(["--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars", "--no-first-run"])
        .arg(format!("--window-size={width},1000"))
        .arg(format!("--user-data-dir={}", profile.path().display()))
        .arg("--dump-dom")
        .arg(format!("file://{}", probe.display()))
        .output()
        .unwrap();
    assert!(run.status.success(), "chromium failed: {}", String::from_utf8_lossy(&run.stderr));
    let dom = Html::parse_document(&String::from_utf8_lossy(&run.stdout));
    let measured: String =
        dom.select(&Selector::parse("pre#layout").unwrap()).next().expect("probe ran").text().collect();
    serde_json::from_str(&measured).unwrap()
}

#[test]
fn no_page_is_wider_than_the_window_at_1400_and_390_px() {
    let Some(chromium) = chromium() else {
        assert!(std::env::var_os("CI").is_none(), "chromium is not installed and CI is set");
        println!("skipping: chromium is not installed");
        return;
    };
    let out = render_designs("designs-layout");
    // The committed run with profiler traces, its trace files linked: long operator names, input
    // shapes and trace paths.
    let traces_run = "cpu-xeon-2core-20261201-quick-phases-traces";
    let traced = committed(traces_run, &["results-1.json"]);
    render_report_from(&traced, &[checkout("reports").join(traces_run)], &out.join("traces")).unwrap();
    let mut failures = Vec::new();
    for name in design_reports().into_iter().map(|(n, _)| n).chain(["compare", "history", "traces"]) {
        for width in [1400, 390] {
            let m = layout(&chromium, &out.join(name), width);
            let fits = m["wide"].as_array().is_some_and(Vec::is_empty);
            // At desktop width the verdict, stack, cell and comparison tables fit without scrolling; on a
            // phone every table turns into cards and none scrolls sideways.
            let scrolls = m["scrolling"].as_array().unwrap().iter().any(|c| {
                let c = c.as_str().unwrap_or("");
                width == 390 || ["verdicts", "cells", "stack", "tricks"].iter().any(|t| c.contains(t))
            });
            if !fits || scrolls {
                failures.push(format!("{name} at {width} px: {m}"));
            }
        }
    }
    assert!(failures.is_empty(), "{failures:#?}");
}

/// The committed runs keep the `results.json` they wrote, in schema version 1, beside the
/// `results-1.json` their report was rendered from, which an older trickbench saved with every
/// field of the time filled in (and, for one run, with its summaries derived again): the upgrade
/// of the first must read as the second, once both derive their summaries from their cells.
#[test]
fn committed_version_1_results_upgrade_to_what_their_reports_were_rendered_from() {
    let reports = Path::new(env!("CARGO_MANIFEST_DIR")).join("reports");
    let mut checked = 0;
    for run in std::fs::read_dir(&reports).unwrap().map(|e| e.unwrap().path()).filter(|p| p.is_dir()) {
        let (written, rendered) = (run.join("results.json"), run.join("results-1.json"));
        if !(written.is_file() && rendered.is_file()) {
            continue;
        }
        let load = |path: &Path| {
            let mut results = trickbench::results::store::load(path).unwrap();
            trickbench::analysis::refresh_derived(&mut results);
            results
        };
        assert!(load(&written) == load(&rendered), "{} upgrades differently", written.display());
        checked += 1;
    }
    assert!(checked >= 5, "only {checked} committed runs found");
}

/// The committed reports render from numbered results files (`results-1.json`, …), written by
/// this schema: loading one and saving it again must give the same bytes, so that no field's
/// serde name or format drifts.
#[test]
fn committed_results_files_load_and_save_back_byte_for_byte() {
    let reports = checkout("reports");
    let dir = temp_dir();
    let mut checked = 0;
    for run in std::fs::read_dir(&reports).unwrap().map(|e| e.unwrap().path()).filter(|p| p.is_dir()) {
        for file in std::fs::read_dir(&run).unwrap().map(|e| e.unwrap().path()) {
            let name = file.file_name().unwrap().to_string_lossy().into_owned();
            if !(name.starts_with("results-") && name.ends_with(".json")) {
                continue;
            }
            let saved = dir.path().join(format!("{checked}.json"));
            let results = trickbench::results::store::load(&file).unwrap();
            trickbench::results::store::save(&results, &saved).unwrap();
            let before = std::fs::read(&file).unwrap();
            if !before.windows(3).any(|w| w == b"\n  ") {
                // A file kept as compact JSON (to keep the checkout small): the same values, field
                // for field, as the schema writes them.
                let kept: serde_json::Value = serde_json::from_slice(&before).unwrap();
                assert_eq!(
                    kept,
                    serde_json::to_value(&results).unwrap(),
                    "{} changes when saved again",
                    file.display()
                );
                checked += 1;
                continue;
            }
            let after = std::fs::read(&saved).unwrap();
            // A copied file may have lost its final newline; nothing else may differ.
            assert!(
                before.trim_ascii_end() == after.trim_ascii_end(),
                "{} changes when saved again",
                file.display()
            );
            checked += 1;
        }
    }
    assert!(checked >= 4, "only {checked} committed results files found");
}

/// A cell measured while the machine was busy with other work, or while its GPU was throttled by
/// heat, carries the reason on its summary line and in its report row, and both say how many.
#[test]
fn a_cell_measured_on_a_busy_or_throttled_machine_is_flagged_in_the_summary_and_the_report() {
    use trickbench::results::machine::{CpuState, GpuState, MachineState, ThrottleReason};
    use trickbench::results::schema::ProcessMeasurement;

    let mut results = fixtures::cpu_run();
    let cpu = CpuState {
        logical_cores: 2,
        load_average_1m: Some(9.5),
        frequency_min_mhz: None,
        frequency_max_mhz: None,
        governors: Vec::new(),
    };
    let gpu = GpuState {
        sm_clock_mhz: 1100,
        memory_clock_mhz: 2619,
        max_sm_clock_mhz: Some(1980),
        power_limit_w: 700.0,
        power_draw_w: 400.0,
        temperature_c: 88,
        throttle_reasons: vec![ThrottleReason::SwPowerCap, ThrottleReason::HwThermalSlowdown],
        persistence_mode: Some(true),
        compute_process_pids: vec![4242],
        own_pid: Some(17),
    };
    let busy = MachineState { cpu: cpu.clone(), gpu: None, gpu_unavailable: None };
    let hot = MachineState {
        cpu: CpuState { load_average_1m: Some(1.0), ..cpu },
        gpu: Some(gpu),
        gpu_unavailable: None,
    };
    let flagged = results.cells[0].id();
    results.cells[0].processes = vec![ProcessMeasurement {
        machine_before: Some(busy),
        machine_after: Some(hot),
        ..common::cells::measurement(0, vec![100.0; 4])
    }];
    results.cells[1].processes = vec![common::cells::measurement(0, vec![100.0; 4])];

    let warning = "unfair machine: CPU busy with other work (load 9.5 on 2 cores); GPU throttled \
                   (hw-thermal-slowdown) at 88 °C";
    let table = trickbench::summary::closing_summary(&results, &[], Terminal { columns: 400, verbose: true });
    let line = table.lines().position(|l| l.starts_with(flagged.as_str())).expect("the cell's row");
    assert_eq!(table.lines().nth(line + 1).map(str::trim), Some(warning), "{table}");
    assert!(table.contains("warning: 1 of 2 cells ran on a throttled or shared machine"), "{table}");

    let out = temp_dir();
    let files = render_report(std::slice::from_ref(&results), out.path()).unwrap();
    let page = text(&check_files(&files));
    assert!(page.contains(warning), "the report's row says why");
    assert!(
        page.contains("1 of 2 cells ran on a throttled or shared machine"),
        "the first screen counts them"
    );
}

/// With both engines in a run, the first screen gives each trick's verdict in PyTorch with
/// libtorch's beside it, flags the trick whose intervals lie apart with its known cause and the
/// phase of the step that moved in each engine, does not flag verdicts that differ only across the
/// edge of significance, nor a memory trick whose throughput costs differ, and marks a trick
/// measured on libtorch only.
#[test]
fn a_run_on_both_engines_answers_in_pytorch_terms_with_libtorch_beside() {
    let out = temp_dir();
    let results = vec![fixtures::with_step_breakdowns(fixtures::two_engine_run())];
    trickbench::report::render_report(&results, out.path()).unwrap();
    let doc = Html::parse_document(&std::fs::read_to_string(out.path().join("index.html")).unwrap());
    let header = Selector::parse("table.verdicts thead th").unwrap();
    let headers: Vec<String> = doc.select(&header).map(|h| h.text().collect::<String>()).collect();
    assert_eq!(
        headers,
        ["Trick", "Judged by", "Verdict in PyTorch", "Effect on its metric in PyTorch", "On libtorch"]
    );
    let rows = Selector::parse("table.verdicts tbody tr").unwrap();
    let cells = Selector::parse("td").unwrap();
    let row = |trick: &str| {
        let row = doc
            .select(&rows)
            .find(|r| r.select(&cells).next().is_some_and(|c| c.text().collect::<String>().trim() == trick))
            .unwrap_or_else(|| panic!("no row {trick}"));
        let texts: Vec<String> = row.select(&cells).map(|c| c.text().collect::<String>()).collect();
        (row.value().attr("class").unwrap_or("").to_owned(), texts)
    };
    let (class, debug_off) = row("debug-off");
    assert_eq!(class, "engines-disagree");
    assert!(
        debug_off[3].starts_with("1.50×") && debug_off[3].contains("AnomalyMetadata::store_stack"),
        "{debug_off:?}"
    );
    assert!(debug_off[4].starts_with("helps: 5.80×"), "{debug_off:?}");
    let moved = "Where the step changed most against each engine's reference: backward -33%";
    assert!(
        debug_off[3].contains(moved) && debug_off[3].contains("in PyTorch, backward -83%"),
        "{debug_off:?}"
    );
    let (class, checkpointing) = row("checkpointing");
    assert_eq!(class, "", "a memory trick is judged by memory: {checkpointing:?}");
    assert!(checkpointing[3].starts_with("0.70× memory"), "{checkpointing:?}");
    let (class, channels_last) = row("channels-last");
    assert_eq!(class, "", "overlapping intervals are no disagreement: {channels_last:?}");
    assert!(channels_last[4].starts_with("helps: 1.03×"), "{channels_last:?}");
    let (_, zero_copy) = row("zero-copy (libtorch only)");
    assert_eq!(zero_copy[2..4], ["not in PyTorch", "—"], "{zero_copy:?}");
    assert!(zero_copy[4].contains(": 1.01× throughput"), "{zero_copy:?}");
    let baseline = Selector::parse("p.baseline").unwrap();
    let line: String = doc.select(&baseline).next().unwrap().text().collect();
    assert!(line.starts_with("Baseline in eager PyTorch: 700 images/s"), "{line}");
    assert!(line.contains("0.93× libtorch") && line.contains("about 7% of a PyTorch step"), "{line}");
    // With process-design floors wider than the baselines' gap, the ratio is not read as overhead.
    let mut floored = fixtures::two_engine_run();
    for engine in [Engine::Libtorch, Engine::Pytorch] {
        let baseline = floored
            .cells
            .iter()
            .find(|c| c.key.engine == engine && c.key.tricks.is_baseline() && c.key.reference_for.is_none())
            .unwrap()
            .id();
        floored.noise_floors.push(NoiseFloor {
            workload: WorkloadId::Resnet20,
            control: baseline.clone(),
            baseline,
            ratio: 1.0,
            ratio_ci_low: 0.9,
            ratio_ci_high: 1.1,
            half_width: 0.1,
            design: MeasurementDesign::Processes,
            engine,
        });
    }
    let out = temp_dir();
    trickbench::report::render_report(&[floored], out.path()).unwrap();
    let doc = Html::parse_document(&std::fs::read_to_string(out.path().join("index.html")).unwrap());
    let line: String = doc.select(&baseline).next().unwrap().text().collect();
    assert!(
        line.contains(
            "0.93× libtorch (medians of their own processes), within the process-design A/A floors \
                       (±10.0% libtorch, ±10.0% PyTorch)"
        ) && !line.contains("overhead"),
        "{line}"
    );
    let na_list = Selector::parse("div.na-list").unwrap();
    let needs: String = doc.select(&na_list).flat_map(|n| n.text()).collect();
    assert!(!needs.contains("zero-copy"), "zero-copy's row says which engine ran it: {needs}");
}

/// The terminal summary of `results` at 100 columns, its words one space apart (lines wrapped
/// to the width rejoined).
fn terminal_words(results: &Results, verbose: bool) -> String {
    let summary = trickbench::summary::closing_summary(results, &[], Terminal { columns: 100, verbose });
    summary.split_whitespace().collect::<Vec<_>>().join(" ")
}

#[test]
fn the_terminal_summary_of_a_two_engine_run_gives_both_engines_effects_grouped_by_verdict() {
    let results = fixtures::two_engine_run();
    let summary = trickbench::summary::closing_summary(&results, &[], Terminal::of_width(100));
    let line = |trick: &str| {
        summary
            .lines()
            .find(|l| l.trim_start().starts_with(&format!("{trick} ")))
            .unwrap_or_else(|| panic!("no {trick} line: {summary}"))
    };
    let debug_off = line("debug-off");
    let (pytorch, libtorch) = (debug_off.find("1.50×").unwrap(), debug_off.find("5.80×").unwrap());
    assert!(pytorch < libtorch, "PyTorch's effect comes first: {debug_off}");
    let titles = summary.lines().find(|l| l.contains("in PyTorch") && l.contains("on libtorch")).unwrap();
    let column = |line: &str, text: &str| line[..line.find(text).unwrap()].chars().count();
    assert_eq!(column(titles, "in PyTorch"), column(debug_off, "1.50×"), "{titles}\n{debug_off}");
    assert_eq!(column(titles, "on libtorch"), column(debug_off, "5.80×"), "{titles}\n{debug_off}");
    let helps = summary.lines().position(|l| l.trim_start().starts_with("helps")).expect("a helps group");
    let at = summary.lines().position(|l| l == debug_off).unwrap();
    assert!(helps < at, "debug-off is under helps: {summary}");
    assert!(summary.contains("in PyTorch") && summary.contains("on libtorch"), "{summary}");
    let words = terminal_words(&results, false);
    assert!(words.contains("! the engines disagree"), "{words}");
    let zero_copy = line("zero-copy (libtorch only)");
    assert!(zero_copy.contains('—') && zero_copy.contains("1.01×"), "{zero_copy}");
    assert!(!summary.contains("/b128/s0/"), "no cell table without --verbose: {summary}");
    let single = trickbench::summary::closing_summary(&fixtures::cpu_run(), &[], Terminal::of_width(100));
    assert!(!single.contains("in PyTorch"), "{single}");
}

#[test]
fn a_trick_faster_per_step_but_slower_to_the_target_is_called_so() {
    let results = fixtures::compiled_but_slower_to_target();
    let words = terminal_words(&results, false);
    let (_, hurts) =
        words.split_once(" hurts torch-compile").unwrap_or_else(|| panic!("not under hurts: {words}"));
    assert!(hurts.contains("faster per step (1.30× throughput"), "{hurts}");
    assert!(hurts.contains("but slower to the target: 1.40× slower to test accuracy ≥ 50.0%"), "{hurts}");
    let verbose = terminal_words(&results, true);
    assert!(verbose.contains("resnet20/torch-compile/b128/s0/tta@pytorch"), "{verbose}");
}

#[test]
fn the_terminal_summary_fits_80_and_100_columns() {
    let committed = |run: &str| {
        let path = format!("{}/reports/{run}/results-1.json", env!("CARGO_MANIFEST_DIR"));
        trickbench::results::store::load(Path::new(&path)).unwrap()
    };
    let runs = [
        fixtures::two_engine_run(),
        fixtures::compiled_but_slower_to_target(),
        with_forced_cudnn_attention(fixtures::two_engine_run()),
        committed("cpu-xeon-2core-20261205-quick-make-run-engines-agree"),
        committed("cpu-xeon-2core-20261205-quick-speedrun-both-engines"),
    ];
    for results in &runs {
        for columns in [80, 100] {
            let summary = trickbench::summary::closing_summary(results, &[], Terminal::of_width(columns));
            let widest = summary.lines().map(|l| l.chars().count()).max().unwrap_or(0);
            assert!(
                widest <= columns,
                "{} at {columns} columns has a line of {widest}:\n{summary}",
                results.run.id
            );
            assert!(summary.contains("no measurable effect") || summary.contains("helps"), "{summary}");
        }
    }
}

#[test]
fn a_comparison_of_two_engine_runs_gives_each_engine_its_verdict_in_each_machines_cell() {
    let here = fixtures::two_engine_run();
    let mut there = fixtures::two_engine_run();
    there.system.hostname = Some("fixture-other-host".to_owned());
    there.run.id = "fixture-other-host".to_owned();
    let out = temp_dir();
    let compared = render_comparison(&[here, there], &[None, None], CompareBy::Auto, out.path()).unwrap();
    let page = std::fs::read_to_string(&compared.files.index_html).unwrap();
    let doc = Html::parse_document(&page);
    let rows: Vec<String> =
        doc.select(&Selector::parse("#table tbody tr").unwrap()).map(|r| r.text().collect()).collect();
    let debug_off = rows.iter().find(|r| r.starts_with("debug-off")).expect("a debug-off row");
    assert_eq!(debug_off.matches("in PyTorch helps1.50× throughput").count(), 2, "{debug_off}");
    assert_eq!(debug_off.matches("on libtorch helps5.80× throughput").count(), 2, "{debug_off}");
    let zero_copy = rows.iter().find(|r| r.starts_with("zero-copy")).expect("a zero-copy row");
    assert!(zero_copy.contains("on libtorch") && !zero_copy.contains("in PyTorch"), "{zero_copy}");
    // Two machines of one hardware are told apart by their hosts.
    assert!(page.contains("Test Fixture (1 core) · fixture-cpu-host"), "the first machine's name");
    assert!(page.contains("Test Fixture (1 core) · fixture-other-host"), "the second machine's name");
}

/// `results` with a GPT's forced cuDNN attention on both engines beside its reference, PyTorch's
/// own choice under bf16: on PyTorch the default ran cuDNN attention too, on libtorch FlashAttention.
fn with_forced_cudnn_attention(mut results: Results) -> Results {
    use common::cells::{comparison, measurement, throughput, train_key};
    use trickbench::results::schema::{CellResult, CellStatus};
    use trickbench::vocabulary::{AttentionBackend, Trick};
    let cell = |tricks: &[Trick], engine: Engine, ran: AttentionBackend| {
        let key = CellKey { engine, ..train_key(WorkloadId::GptMini, tricks) };
        let process = trickbench::results::schema::ProcessMeasurement {
            attention_backend: Some(ran),
            ..measurement(0, vec![1000.0; 3])
        };
        CellResult {
            throughput: Some(throughput(1000.0)),
            processes: vec![process],
            ..CellResult::new(key, CellStatus::Ok)
        }
    };
    for (engine, default) in [
        (Engine::Pytorch, AttentionBackend::CudnnAttention),
        (Engine::Libtorch, AttentionBackend::FlashAttention),
    ] {
        let reference = cell(&[Trick::AmpBf16, Trick::FlashAttention], engine, default);
        let forced = cell(&[Trick::AmpBf16, Trick::SdpaCudnn], engine, AttentionBackend::CudnnAttention);
        results.comparisons.push(comparison(&forced.id(), &reference.id(), 1.01, 0.03));
        results.cells.extend([reference, forced]);
    }
    results
}

#[test]
fn a_forced_attention_backend_says_which_kernel_ran_and_when_it_is_the_defaults() {
    let results = with_forced_cudnn_attention(fixtures::two_engine_run());
    let words = terminal_words(&results, false);
    let (_, gpt) = words.split_once("gpt-mini").unwrap_or_else(|| panic!("no GPT summary: {words}"));
    let same = "the same kernel as the default (cudnn-attention ran on both sides): not a distinct effect";
    assert!(gpt.contains(same), "{gpt}");
    let out = temp_dir();
    let files = render_report(std::slice::from_ref(&results), out.path()).unwrap();
    let page = std::fs::read_to_string(&files.index_html).unwrap();
    assert!(page.contains(same), "the report's first screen says it too");
    let libtorch_only = Results {
        cells: results.cells.iter().filter(|c| c.key.engine == Engine::Libtorch).cloned().collect(),
        ..results
    };
    let out = temp_dir();
    let files = render_report(&[libtorch_only], out.path()).unwrap();
    let page = std::fs::read_to_string(&files.index_html).unwrap();
    assert!(page.contains("cudnn-attention ran; the default ran flash-attention"), "a distinct kernel");
    assert!(!page.contains(same));
}

/// `results` with a diagnosis beside the comparison of each single-trick `trick` cell on the
/// engines of `diagnoses`: a ceiling from its convolutions' share of the step (a fraction) and a
/// cause where one is given.
fn with_diagnoses(mut results: Results, trick: Trick, diagnoses: &[(Engine, f64, Option<Cause>)]) -> Results {
    for (engine, share, cause) in diagnoses {
        let cell = results
            .cells
            .iter()
            .find(|c| {
                c.key.engine == *engine && c.key.tricks == [trick].into_iter().collect() && !c.key.aa_control
            })
            .unwrap_or_else(|| panic!("no {trick:?} cell on {engine}"))
            .id();
        let c = results.comparisons.iter_mut().find(|c| c.cell == cell).unwrap();
        c.diagnosis = Some(Diagnosis {
            ceiling: Some(Ceiling::new(StepPart::ConvolutionsAndMatmuls, share * 100.0, 100.0)),
            ceiling_unavailable: None,
            cause: cause.clone(),
        });
    }
    results
}

/// The texts of the first screen's "Ceiling and cause" cells, by trick.
fn why_cells(doc: &Html) -> Vec<(String, String)> {
    let rows = Selector::parse("table.verdicts tbody tr").unwrap();
    let (first, why) = (Selector::parse("td").unwrap(), Selector::parse("td.why").unwrap());
    doc.select(&rows)
        .map(|r| {
            let trick = r.select(&first).next().unwrap().text().collect::<String>().trim().to_owned();
            let cell = r.select(&why).next().unwrap_or_else(|| panic!("no ceiling cell for {trick}"));
            (trick, cell.text().collect())
        })
        .collect()
}

/// A run whose comparisons carry diagnoses gives each engine's ceiling and cause on its first
/// screen: in the verdict table (each labelled with its engine where there are two, the cause's
/// sentence behind its short line), in summary.md's table, and in the figure as a tick with its
/// words in the marker's hover text.
#[test]
fn a_diagnosed_run_gives_each_engines_ceiling_and_cause_on_its_first_screen() {
    let no_kernel = Cause::NoKernelChanged { kernels: 12, part_change_ms: 0.1, step_ms: 100.0 };
    let results = with_diagnoses(
        fixtures::two_engine_run(),
        Trick::ChannelsLast,
        &[(Engine::Pytorch, 0.3, Some(no_kernel.clone())), (Engine::Libtorch, 0.9, None)],
    );
    let out = kept_output_dir("diagnosis");
    let files = render_report(&[results], &out).unwrap();
    let doc = check_files(&files);
    let header = Selector::parse("table.verdicts thead th").unwrap();
    let headers: Vec<String> = doc.select(&header).map(|h| h.text().collect()).collect();
    assert_eq!(headers[4..], ["On libtorch", "Ceiling and cause"]);
    let cells = why_cells(&doc);
    let channels_last = &cells.iter().find(|(t, _)| t == "channels-last").unwrap().1;
    let pytorch = "PyTorch: convolutions and matmuls 30.0% of the step: at most 1.43×no kernel changed: same 12 kernels";
    assert!(channels_last.starts_with(pytorch), "{channels_last}");
    assert!(channels_last.contains(&no_kernel.sentence()), "{channels_last}");
    assert!(
        channels_last.ends_with("libtorch: convolutions and matmuls 90.0% of the step: at most 10.00×"),
        "{channels_last}"
    );
    assert_eq!(cells.iter().find(|(t, _)| t == "debug-off").unwrap().1, "—");
    let summary = Selector::parse("td.why details.cause summary").unwrap();
    let title = doc.select(&summary).next().unwrap().value().attr("title").unwrap().to_owned();
    assert_eq!(title, no_kernel.sentence());
    let md = std::fs::read_to_string(&files.summary_md).unwrap();
    assert!(md.contains("| On libtorch | Ceiling and cause |\n|---|---|---|---|---|---|\n"), "{md}");
    assert!(
        md.contains(
            "| PyTorch: convolutions and matmuls 30.0% of the step: at most 1.43× — no kernel changed: same 12 \
             kernels<br>libtorch: convolutions and matmuls 90.0% of the step: at most 10.00× |\n"
        ),
        "{md}"
    );
    let glance = Selector::parse("figure.glance .wide svg").unwrap();
    let svg = doc.select(&glance).next().unwrap().html();
    let hover =
        "channels-last in PyTorch: no measurable effect, 1.01× [0.99, 1.03]; ceiling: convolutions and \
                 matmuls 30.0% of the step: at most 1.43×; cause: no kernel changed: same 12 kernels";
    assert_eq!(svg.matches(hover).count(), 2, "the marker and its tick say it: {svg}");
    assert!(svg.contains("ceiling: the most the trick could give"), "the legend names the tick");
    let caption = Selector::parse("figure.glance figcaption").unwrap();
    let caption: String = doc.select(&caption).next().unwrap().text().collect();
    assert!(caption.contains("A dark tick at a marker's height is that engine's ceiling"), "{caption}");
}

/// With one engine, a diagnosed trick's ceiling and cause stand without an engine's name, and a
/// run without diagnoses keeps its table as it was.
#[test]
fn a_one_engine_run_gives_its_ceilings_unlabelled() {
    let bound = Cause::BoundElsewhere { ceiling: 1.01, floor_half_width: 0.023 };
    let results =
        with_diagnoses(fixtures::cpu_run(), Trick::ChannelsLast, &[(Engine::Libtorch, 0.01, Some(bound))]);
    let out = temp_dir();
    let files = render_report(&[results], out.path()).unwrap();
    let doc = page(out.path());
    let cells = why_cells(&doc);
    let channels_last = &cells.iter().find(|(t, _)| t == "channels-last").unwrap().1;
    assert!(
        channels_last.starts_with(
            "convolutions and matmuls 1.0% of the step: at most 1.01×bound elsewhere: at most 1.01× inside ±2.3%"
        ),
        "{channels_last}"
    );
    let md = std::fs::read_to_string(&files.summary_md).unwrap();
    assert!(
        md.contains("| Trick | Judged by | Verdict | Effect on its metric | Ceiling and cause |"),
        "{md}"
    );
    assert!(
        md.contains(
            " | convolutions and matmuls 1.0% of the step: at most 1.01× — bound elsewhere: at most 1.01× \
                     inside ±2.3% |\n"
        ),
        "{md}"
    );
    let plain = temp_dir();
    let files = render_report(&[fixtures::cpu_run()], plain.path()).unwrap();
    let md = std::fs::read_to_string(&files.summary_md).unwrap();
    assert!(!md.contains("Ceiling and cause") && !page(plain.path()).html().contains("td class=\"why\""));
}

/// `results` with `diagnosis` beside the comparison of `trick`'s training cell on `engine`.
fn with_diagnosis(
    mut results: Results,
    trick: Trick,
    engine: Engine,
    diagnosis: trickbench::results::diagnosis::Diagnosis,
) -> Results {
    use trickbench::results::schema::{CellKind, Phase};
    let cell = results
        .cells
        .iter()
        .find(|c| {
            c.key.engine == engine
                && c.key.tricks == [trick].into_iter().collect()
                && c.key.reference_for.is_none()
                && c.key.kind == CellKind::Throughput { phase: Phase::Train }
        })
        .unwrap_or_else(|| panic!("no {trick:?} cell on {engine}"))
        .id();
    let c = results.comparisons.iter_mut().find(|c| c.cell == cell).unwrap();
    c.diagnosis = Some(diagnosis);
    results
}

/// The two-engine fixture diagnosed: channels-last bound elsewhere in PyTorch (its ceiling only on
/// libtorch, where it helps), checkpointing adding work on both engines, zero-copy's ceiling on
/// libtorch, and debug-off without a ceiling.
fn two_engines_diagnosed() -> Results {
    use trickbench::results::diagnosis::{Cause, Ceiling, Diagnosis, OpChange};
    let diagnosis = |ceiling: Option<Ceiling>, cause: Option<Cause>| Diagnosis {
        ceiling,
        ceiling_unavailable: ceiling.is_none().then(|| "it slows every operator".to_owned()),
        cause,
    };
    let added = |ms: f64| Cause::AddedWork {
        operators: vec![OpChange {
            name: "aten::convolution_backward".to_owned(),
            activity: None,
            calls_change: 0.0,
            self_ms_change: ms,
        }],
        added_ms: ms,
        step_ms: 100.0,
    };
    let conv = Ceiling::new(StepPart::ConvolutionsAndMatmuls, 1.2, 100.0);
    let bound = Cause::BoundElsewhere { ceiling: conv.speedup, floor_half_width: 0.023 };
    let mut r = fixtures::two_engine_run();
    r = with_diagnosis(r, Trick::ChannelsLast, Engine::Pytorch, diagnosis(Some(conv), Some(bound)));
    let wide = Ceiling::new(StepPart::ConvolutionsAndMatmuls, 20.0, 100.0);
    r = with_diagnosis(r, Trick::ChannelsLast, Engine::Libtorch, diagnosis(Some(wide), None));
    let memory = Ceiling::new(StepPart::MemoryOnly, 0.0, 100.0);
    r = with_diagnosis(r, Trick::Checkpointing, Engine::Pytorch, diagnosis(Some(memory), Some(added(3.1))));
    r = with_diagnosis(r, Trick::Checkpointing, Engine::Libtorch, diagnosis(Some(memory), Some(added(1.2))));
    let loader = Ceiling::new(StepPart::Loader, 20.0, 100.0);
    r = with_diagnosis(r, Trick::ZeroCopy, Engine::Libtorch, diagnosis(Some(loader), None));
    for engine in [Engine::Pytorch, Engine::Libtorch] {
        r = with_diagnosis(r, Trick::DebugOff, engine, diagnosis(None, None));
    }
    r
}

/// The lines of `summary` that say why (or give a ceiling), trimmed.
fn why_lines(summary: &str) -> Vec<&str> {
    let lines = summary.lines().map(str::trim_start);
    lines.filter(|l| l.starts_with("why: ") || l.starts_with("ceiling: ")).collect()
}

#[test]
fn the_terminal_summary_says_why_under_each_diagnosed_trick_within_its_width() {
    let results = two_engines_diagnosed();
    for columns in [40, 80, 100] {
        let summary = trickbench::summary::closing_summary(&results, &[], Terminal::of_width(columns));
        let widest = summary.lines().map(|l| l.chars().count()).max().unwrap_or(0);
        assert!(widest <= columns, "a line of {widest} at {columns} columns:\n{summary}");
    }
    let summary = trickbench::summary::closing_summary(&results, &[], Terminal::of_width(100));
    let lines: Vec<&str> = summary.lines().collect();
    let under = |trick: &str| {
        let at = lines.iter().position(|l| l.trim_start().starts_with(&format!("{trick} "))).unwrap();
        lines[at + 1..].iter().find(|l| !l.trim_start().starts_with('!')).copied().unwrap()
    };
    assert_eq!(
        under("channels-last"),
        "      why: PyTorch: bound elsewhere: at most 1.01× inside ±2.3% · libtorch: ceiling 1.25×"
    );
    assert_eq!(
        under("checkpointing"),
        "      why: it added work: PyTorch aten::convolution_backward +3.10 ms"
    );
    let next = lines.iter().position(|l| *l == under("checkpointing")).unwrap() + 1;
    assert_eq!(lines[next], format!("{}libtorch aten::convolution_backward +1.20 ms", " ".repeat(26)));
    assert_eq!(under("zero-copy (libtorch only)"), "      ceiling: at most 1.25× on libtorch");
    assert_eq!(why_lines(&summary).len(), 3, "debug-off has neither ceiling nor cause: {summary}");

    let plain =
        trickbench::summary::closing_summary(&fixtures::two_engine_run(), &[], Terminal::of_width(100));
    assert!(why_lines(&plain).is_empty(), "{plain}");
}

#[test]
fn the_terminal_summary_of_one_engine_says_why_without_naming_it() {
    use trickbench::results::diagnosis::{Cause, Ceiling, Diagnosis};
    let ceiling = Ceiling::new(StepPart::ConvolutionsAndMatmuls, 1.2, 100.0);
    let cause = Cause::BoundElsewhere { ceiling: ceiling.speedup, floor_half_width: 0.023 };
    let diagnosis = Diagnosis { ceiling: Some(ceiling), ceiling_unavailable: None, cause: Some(cause) };
    let results = with_diagnosis(fixtures::cpu_run(), Trick::ZeroGradNone, Engine::Libtorch, diagnosis);
    let summary = trickbench::summary::closing_summary(&results, &[], Terminal::of_width(80));
    assert_eq!(why_lines(&summary), ["why: bound elsewhere: at most 1.01× inside ±2.3%"], "{summary}");
    let verbose =
        trickbench::summary::closing_summary(&results, &[], Terminal { columns: 100, verbose: true });
    let (_, table) = verbose.split_once("resnet20/zero-grad-none/b128/s0/train ").unwrap();
    let under = table.lines().nth(1).unwrap();
    assert_eq!(under, "    why: bound elsewhere: at most 1.01× inside ±2.3%", "the cell table says it too");
}

#[test]
fn cells_csv_gives_each_comparison_s_ceiling_and_cause_and_leaves_them_empty_elsewhere() {
    use trickbench::results::diagnosis::{Cause, Ceiling, Diagnosis};
    let ceiling = Ceiling::new(StepPart::Optimizer, 4.0, 100.0);
    let cause = Cause::NotFound { looked_at: "no trace of the reference".to_owned() };
    let diagnosis =
        Diagnosis { ceiling: Some(ceiling), ceiling_unavailable: None, cause: Some(cause.clone()) };
    let results = with_diagnosis(fixtures::cpu_run(), Trick::ZeroGradNone, Engine::Libtorch, diagnosis);
    let out = temp_dir();
    let files = render_report(&[results], out.path()).unwrap();
    let mut reader = csv::Reader::from_path(&files.csv).unwrap();
    let headers = reader.headers().unwrap().clone();
    let column = |name: &str| headers.iter().position(|h| h == name).unwrap_or_else(|| panic!("no {name}"));
    let rows: Vec<csv::StringRecord> = reader.records().map(Result::unwrap).collect();
    let row = rows.iter().find(|r| &r[column("cell_id")] == "resnet20/zero-grad-none/b128/s0/train").unwrap();
    let speedup: f64 = row[column("ceiling_speedup")].parse().unwrap();
    assert!((speedup - 1.0 / 0.96).abs() < 1e-9, "{speedup}");
    assert_eq!(&row[column("ceiling_part")], "optimizer");
    let share: f64 = row[column("ceiling_share_percent")].parse().unwrap();
    assert!((share - 4.0).abs() < 1e-9, "{share}");
    assert_eq!(&row[column("cause")], "not-found");
    assert_eq!(&row[column("cause_detail")], cause.sentence());
    let others = rows.iter().filter(|r| r != &row);
    for name in ["ceiling_speedup", "ceiling_part", "ceiling_share_percent", "cause", "cause_detail"] {
        assert!(others.clone().all(|r| r[column(name)].is_empty()), "{name} is empty without a diagnosis");
    }
}

#[test]
fn a_comparison_says_why_beside_a_null_or_negative_effect() {
    let here = two_engines_diagnosed();
    let mut there = fixtures::two_engine_run();
    there.system.hostname = Some("fixture-other-host".to_owned());
    there.run.id = "fixture-other-host".to_owned();
    let out = temp_dir();
    let compared = render_comparison(&[here, there], &[None, None], CompareBy::Auto, out.path()).unwrap();
    let md = std::fs::read_to_string(&compared.files.summary_md).unwrap();
    let row = md
        .lines()
        .find(|l| l.starts_with("| `channels-last` | resnet20 |"))
        .unwrap_or_else(|| panic!("{md}"));
    let cells: Vec<&str> = row.split(" | ").collect();
    let (here, there) = (cells[3], cells[4]);
    assert!(here.ends_with("; why: bound elsewhere: at most 1.01× inside ±2.3%"), "{here}");
    assert_eq!(row.matches("why:").count(), 1, "the other machine has no diagnosis: {row}");
    assert!(!there.contains("why:"), "{there}");
}

/// The factors of [`factorial_design`], A to C.
const FACTORS: [Trick; 3] = [Trick::ChannelsLast, Trick::Checkpointing, Trick::ZeroCopy];

/// `ratio` ± `half`.
fn estimate(ratio: f64, half: f64) -> RatioEstimate {
    RatioEstimate { ratio, ci_low: ratio - half, ci_high: ratio + half }
}

/// A half fraction of [`FACTORS`] on `engine` (C = AB, resolution III): checkpointing judged by
/// its memory; channels-last × zero-copy (A × C) is `clash`, the other pairs add up; a trick left
/// out for a reason with markup in it, which must print as text.
fn factorial_design(engine: Engine, clash: (f64, InteractionVerdict)) -> FactorialAnalysis {
    let letters = ["A", "B", "C"];
    let main_effects = FACTORS
        .iter()
        .zip(["BC", "AC", "AB"])
        .map(|(&trick, alias)| MainEffect {
            trick,
            metric: trick.metric(),
            throughput: estimate(if trick == Trick::ChannelsLast { 1.12 } else { 0.99 }, 0.02),
            verdict: if trick == Trick::ChannelsLast {
                Verdict::Faster
            } else {
                Verdict::NoSignificantEffect
            },
            memory: Some(if trick == Trick::Checkpointing {
                estimate(0.7, 0.03)
            } else {
                estimate(1.0, 0.0)
            }),
            aliased_with: vec![alias.to_owned()],
        })
        .collect();
    let pair = |a: usize, b: usize, (ratio, verdict): (f64, InteractionVerdict)| Interaction {
        tricks: [FACTORS[a], FACTORS[b]],
        throughput: estimate(ratio, 0.03),
        together: 1.05 * ratio,
        predicted: 1.05,
        verdict,
        memory: None,
        aliased_with: vec![letters[3 - a - b].to_owned()],
    };
    let additive = (1.01, InteractionVerdict::Additive);
    FactorialAnalysis {
        workload: WorkloadId::Resnet20,
        engine,
        factors: FACTORS.to_vec(),
        configurations: 4,
        generators: vec!["C = AB".to_owned()],
        defining_relation: vec!["I = ABC".to_owned()],
        resolution: Some(3),
        processes: 3,
        noise_floor_half_width: Some(0.02),
        main_effects,
        interactions: vec![pair(0, 1, additive), pair(0, 2, clash), pair(1, 2, additive)],
        best: Some(BestConfiguration {
            tricks: vec![Trick::ChannelsLast],
            predicted: estimate(1.15, 0.04),
            cell: None,
            measured: Some(estimate(1.12, 0.03)),
            in_design: true,
        }),
        left_out: vec![LeftOutTrick {
            trick: Trick::PackedDataset,
            reason: "needs --images <PATH>".to_owned(),
        }],
    }
}

/// [`fixtures::two_engine_run`] as a factorial design: channels-last and zero-copy combine on
/// libtorch and cancel in PyTorch, their intervals apart (the engines disagree).
fn factorial_run() -> Results {
    let mut r = fixtures::two_engine_run();
    r.run.design = Design::Factorial;
    r.factorial = vec![
        factorial_design(Engine::Libtorch, (1.10, InteractionVerdict::Synergy)),
        factorial_design(Engine::Pytorch, (0.90, InteractionVerdict::Antagonism)),
    ];
    r
}

/// The text of `el`, its whitespace runs one space.
fn flat_text(el: scraper::ElementRef) -> String {
    el.text().collect::<String>().split_whitespace().collect::<Vec<_>>().join(" ")
}

#[test]
fn a_factorial_run_opens_with_which_tricks_combine_and_which_cancel() {
    let out = kept_output_dir("factorial");
    let files = render_report(&[factorial_run()], &out.join("factorial")).unwrap();
    let doc = check_files(&files);
    let select = |s: &str| Selector::parse(s).unwrap();
    let sections: Vec<&str> = doc.select(&select("main > section")).filter_map(|s| s.value().id()).collect();
    assert_eq!(sections[..2], ["factorial", "overview"], "the answer opens the page");
    assert_eq!(doc.select(&select("nav a[href='#factorial']")).count(), 1);
    let section = doc.select(&select("section#factorial")).next().unwrap();
    let text = flat_text(section);
    for expected in [
        "Which tricks combine and which cancel — resnet20",
        "In PyTorch channels-last and zero-copy cancel: together 0.95×, where their own effects predict 1.05×",
        "On libtorch channels-last and zero-copy combine: together 1.16×",
        "≠ The engines disagree on A × C (channels-last and zero-copy): antagonism in PyTorch, −10.0% \
         [−13.0%, −7.0%]; synergy on libtorch, +10.0% [+7.0%, +13.0%].",
        "4, each an arm of every one of 3 processes",
        "C = AB",
        "I = ABC",
        "III: main effects are aliased with two-trick interactions",
        "packed-dataset: needs --images <PATH>",
    ] {
        assert!(text.contains(expected), "no {expected:?} in {text}");
    }
    assert_eq!(section.select(&select("details.left-out path")).count(), 0, "a reason's markup is escaped");
    let figure = section.select(&select("figure > .wide > svg")).next().expect("the main-effects figure");
    let svg = figure.html();
    assert!(svg.contains("A · channels-last") && svg.contains("B · checkpointing · memory"), "{svg}");
    assert!(files.plots.iter().any(|p| p.to_string_lossy().contains("plots/factorial-resnet20-")));
    let matrices: Vec<_> = section.select(&select("table.interactions")).collect();
    assert_eq!(matrices.len(), 2, "a matrix per engine");
    for (matrix, (verdict, change)) in matrices.iter().zip([("antagonism", "−10.0%"), ("synergy", "+10.0%")])
    {
        assert_eq!(matrix.select(&select("tbody tr")).count(), 2, "rows A and B");
        assert_eq!(matrix.select(&select("td[title]")).count(), 3, "the upper triangle of 3 factors");
        let clash = matrix.select(&select(&format!("td.{verdict}.engines-disagree"))).next().unwrap();
        assert!(flat_text(clash).starts_with(change), "{}", clash.html());
        let hover = clash.value().attr("title").unwrap();
        for part in
            ["A × C: channels-last and zero-copy", "predict 1.05×", "aliased with B", "the engines disagree"]
        {
            assert!(hover.contains(part), "{part:?} not in {hover}");
        }
    }
    let best = flat_text(section.select(&select("table.best")).next().unwrap());
    assert!(best.contains("1.15× [1.11, 1.19]") && best.contains("1.12× [1.09, 1.15]"), "{best}");
    let other = render_report(&[fixtures::two_engine_run()], &out.join("ablation")).unwrap();
    let html = std::fs::read_to_string(&other.index_html).unwrap();
    assert!(!html.contains("id=\"factorial\""), "another design has no factorial section");
}
