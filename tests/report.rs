//! Reports rendered from fixture results: every file is written and parses, the HTML names every
//! cell and is self-contained, and a comparison lists what does not join. With Chromium installed
//! the report is also opened headless, checked for console errors and screenshotted into
//! `target/test-output/`.

#[path = "common/fixtures.rs"]
mod fixtures;

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;

use scraper::{Html, Selector};
use trickbench::report::{render_comparison, render_report, ReportError, ReportFiles};
use trickbench::results::schema::Results;

/// A per-test output directory under `target/test-output/`, kept after the test so that a person
/// can look at what was rendered.
fn output_dir(name: &str) -> PathBuf {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("../test-output").join(name);
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir.canonicalize().unwrap()
}

fn file_names(files: &ReportFiles) -> BTreeSet<String> {
    files.plots.iter().map(|p| p.file_name().unwrap().to_string_lossy().into_owned()).collect()
}

/// Every PNG decodes, every SVG parses as XML, and the HTML parses without errors and embeds one
/// inline SVG per plot without reaching for the network.
fn check_files(files: &ReportFiles) -> Html {
    for path in files.all() {
        assert!(path.is_file(), "{} was not written", path.display());
    }
    let mut svgs = 0;
    for plot in &files.plots {
        match plot.extension().and_then(|e| e.to_str()) {
            Some("png") => {
                let image = image::open(plot).unwrap_or_else(|e| panic!("{}: {e}", plot.display()));
                assert!(image.width() >= 900 && image.height() >= 150, "{}", plot.display());
            }
            Some("svg") => {
                svgs += 1;
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
    assert_eq!(doc.select(&Selector::parse("figure > svg").unwrap()).count(), svgs);
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
    let cpu = fixtures::cpu_run();
    let out = output_dir("report");
    let files = render_report(std::slice::from_ref(&cpu), &out).unwrap();
    let doc = check_files(&files);
    let page = text(&doc);

    for cell in &cpu.cells {
        assert!(page.contains(&cell.id), "index.html lacks cell {}", cell.id);
    }
    let slug = "resnet20-cpu-on-fixture-cpu-host-quick";
    let expected: BTreeSet<String> =
        ["speedup", "memory", "tta-curves", "tta-bars", "stack", "batch-throughput", "batch-memory"]
            .iter()
            .flat_map(|kind| ["png", "svg"].map(|ext| format!("{kind}-{slug}.{ext}")))
            .collect();
    assert_eq!(file_names(&files), expected);
    // Noise: every measured cell shows its spread, and the one wider than asked is flagged.
    assert!(page.contains("CV 2.0%, 0 of 10 windows outliers"));
    assert!(page.contains(
        "noisy: the median's interval is ±8.0%, wider than the ±5.0% asked; windows vary by 11.0% \
         (coefficient of variation), 2 of 10 are outliers"
    ));
    let words = page.split_whitespace().collect::<Vec<_>>().join(" ");
    assert!(words.contains(
        "and more, up to 5, while the bootstrap interval of that process's median is wider than ±5.0%"
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
    // Every trick of the catalogue has its claim, measured or not.
    for t in trickbench::tricks::Trick::ALL {
        assert!(
            doc.select(&Selector::parse(&format!("#trick-{t}")).unwrap()).next().is_some(),
            "no section for {t}"
        );
    }
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
    let files = render_report(std::slice::from_ref(&cpu), &output_dir("csv")).unwrap();
    let mut reader = csv::Reader::from_path(&files.csv).unwrap();
    let headers = reader.headers().unwrap().clone();
    for h in [
        "cell_id",
        "status",
        "throughput_median_samples_per_s",
        "peak_rss_bytes",
        "speedup_x",
        "time_to_target_s",
    ] {
        assert!(headers.iter().any(|x| x == h), "cells.csv lacks column {h}");
    }
    let rows: Vec<csv::StringRecord> = reader.records().map(Result::unwrap).collect();
    assert_eq!(rows.len(), cpu.cells.len());
    let id = headers.iter().position(|h| h == "cell_id").unwrap();
    let status = headers.iter().position(|h| h == "status").unwrap();
    let ids: Vec<&str> = rows.iter().map(|r| &r[id]).collect();
    assert_eq!(ids, cpu.cells.iter().map(|c| c.id.as_str()).collect::<Vec<_>>());
    let statuses: BTreeSet<&str> = rows.iter().map(|r| &r[status]).collect();
    assert_eq!(statuses, BTreeSet::from(["ok", "not applicable", "failed", "out of memory", "timed out"]));
}

#[test]
fn summary_markdown_has_the_headline_and_working_plot_links() {
    let cpu = fixtures::cpu_run();
    let out = output_dir("markdown");
    let files = render_report(std::slice::from_ref(&cpu), &out).unwrap();
    let md = std::fs::read_to_string(&files.summary_md).unwrap();
    assert!(
        md.contains("| Configuration | Trick | Guide | Judged by | Speed-up [CI] | Verdict | Memory |"),
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
    let files = render_report(&[cpu.clone(), gpu.clone()], &output_dir("two-runs")).unwrap();
    let doc = check_files(&files);
    let page = text(&doc);
    for cell in cpu.cells.iter().chain(&gpu.cells) {
        assert!(page.contains(&cell.id), "index.html lacks {}", cell.id);
    }
    assert!(file_names(&files).contains("speedup-resnet20-cuda-0-on-test-fixture-gpu-not-measured-quick.png"));
    assert_eq!(files.results_json.len(), 2);
}

#[test]
fn comparison_joins_devices_and_lists_mismatches() {
    let (cpu, gpu) = (fixtures::cpu_run(), fixtures::gpu_fixture());
    let out = output_dir("compare");
    let files = render_comparison(&[cpu, gpu], &out).unwrap();
    let doc = check_files(&files);
    assert_eq!(
        file_names(&files),
        BTreeSet::from(
            ["compare-heatmap.png", "compare-heatmap.svg", "compare-bars.png", "compare-bars.svg"]
                .map(String::from)
        )
    );

    let row = |label: &str| {
        let rows = Selector::parse("#table tr").unwrap();
        doc.select(&rows)
            .map(|r| r.text().collect::<String>())
            .find(|t| t.starts_with(label))
            .unwrap_or_else(|| panic!("no row {label}"))
    };
    let amp = row("resnet20 · amp · b128");
    assert!(amp.contains("not applicable") && amp.contains("2.10× [2.00, 2.20] faster"), "{amp}");
    assert!(row("resnet20 · no-bias-before-bn · b128").contains("missing"));
    assert!(row("resnet20 · amp+channels-last · b128").contains("missing"));

    let mismatches = Selector::parse("#mismatches tr").unwrap();
    let listed: Vec<String> = doc.select(&mismatches).map(|r| r.text().collect()).collect();
    let find = |label: &str| {
        listed.iter().find(|t| t.contains(label)).unwrap_or_else(|| panic!("{label} not listed"))
    };
    assert!(find("no-bias-before-bn · b128").contains("cuda:0 on test-fixture-gpu-not-measured"));
    assert!(find("amp+channels-last · b128").contains("cpu on fixture-cpu-host"));
    assert!(find("baseline (time to accuracy)").contains("cuda:0"));

    let md = std::fs::read_to_string(&files.summary_md).unwrap();
    assert!(
        md.contains("## Mismatched and missing cells") && md.contains("| resnet20 · amp · b128 |"),
        "{md}"
    );
    let csv = std::fs::read_to_string(&files.csv).unwrap();
    assert!(csv.lines().next().unwrap().contains("speedup_x") && csv.contains(",missing,"), "{csv}");
}

#[test]
fn errors_name_their_file() {
    let out = output_dir("errors");
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
    let out = output_dir("chromium");
    let files = render_report(&[fixtures::cpu_run(), fixtures::gpu_fixture()], &out.join("report")).unwrap();
    let compare =
        render_comparison(&[fixtures::cpu_run(), fixtures::gpu_fixture()], &out.join("compare")).unwrap();
    for (name, index) in [("report", &files.index_html), ("compare", &compare.index_html)] {
        let profile = tempfile::tempdir().unwrap();
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
