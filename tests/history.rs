//! `trickbench compare` over versions of one plan on one machine: files given in any order are
//! lined up oldest first and labelled by commit; each trick's effect is drawn across them and a
//! change is flagged exactly where two consecutive intervals do not overlap; runs that share no
//! cell are refused, saying what each holds.

#[allow(dead_code)]
mod common;

use std::path::Path;

use scraper::{Html, Selector};
use trickbench::bench::profile::ProfileName;
use trickbench::results::schema::Results;
use trickbench::results::store;
use trickbench::tricks::Trick::{self, AvoidSync, ChannelsLast, ZeroGradNone};

use common::cli::{text, trickbench};
use common::dirs::temp_dir;
use common::fixtures::version_run;

/// Saves `results` as `dir/name`.
fn save(dir: &Path, name: &str, results: &Results) {
    store::save(results, &dir.join(name)).unwrap();
}

/// Three versions: channels-last jumps from 1.00× [0.95, 1.05] to 1.30× [1.25, 1.35] between
/// the first two and then stays (1.32× [1.27, 1.37]); avoid-sync stays at 1.10× ± 0.05 with its
/// intervals overlapping; zero-grad-none is missing from the middle one.
fn write_versions(dir: &Path) {
    let effects = |channels_last: f64, zero_grad: bool| {
        let mut e: Vec<(Trick, f64, f64)> = vec![(ChannelsLast, channels_last, 0.05), (AvoidSync, 1.1, 0.05)];
        if zero_grad {
            e.push((ZeroGradNone, 1.0, 0.05));
        }
        e
    };
    save(dir, "old.json", &version_run("v-old", "2026-11-30T10:00:00Z", "aaaaaaa1234", &effects(1.0, true)));
    save(
        dir,
        "mid.json",
        &version_run("v-mid", "2026-12-01T10:00:00Z", "bbbbbbb1234-dirty", &effects(1.3, false)),
    );
    save(dir, "new.json", &version_run("v-new", "2026-12-02T10:00:00Z", "ccccccc1234", &effects(1.32, true)));
}

/// The rows of the table in `section`, each as its cells' text.
fn rows(doc: &Html, section: &str) -> Vec<Vec<String>> {
    let rows = Selector::parse(&format!("#{section} tbody tr")).unwrap();
    let cells = Selector::parse("td").unwrap();
    doc.select(&rows).map(|r| r.select(&cells).map(|c| c.text().collect::<String>()).collect()).collect()
}

/// The flag of `trick` from `from` ("#1") in the changes table.
fn flag(table: &[Vec<String>], trick: &str, from: &str) -> String {
    let row = table.iter().find(|r| r[0].contains(trick) && r[1].starts_with(from));
    row.unwrap_or_else(|| panic!("no row for {trick} from {from}: {table:#?}"))[5].clone()
}

#[test]
fn versions_given_in_any_order_are_a_history_with_changes_flagged_where_intervals_part() {
    let dir = temp_dir();
    write_versions(dir.path());
    let out = trickbench(dir.path(), &["compare", "new.json", "old.json", "mid.json", "--out", "history"]);
    let stdout = text(&out.stdout);
    assert!(out.status.success(), "{}{}", stdout, text(&out.stderr));
    assert!(
        stdout.contains("compared: 3 versions, oldest first (auto: every run is Test Fixture (1 core) on fixture-cpu-host"),
        "{stdout}"
    );
    let history = dir.path().join("history");
    for file in ["index.html", "summary.md", "history.csv", "results-1.json", "results-3.json"] {
        assert!(history.join(file).is_file(), "{file} missing");
    }
    for plot in ["history-resnet20-quick-profile.png", "history-resnet20-quick-profile.svg"] {
        assert!(history.join("plots").join(plot).is_file(), "{plot} missing");
    }
    let png = image::open(history.join("plots/history-resnet20-quick-profile.png")).unwrap();
    assert!(png.width() >= 900, "{}", png.width());

    let doc = Html::parse_document(&std::fs::read_to_string(history.join("index.html")).unwrap());
    assert!(doc.errors.is_empty(), "{:?}", doc.errors);
    assert_eq!(doc.select(&Selector::parse("#history figure .wide svg").unwrap()).count(), 1);
    // Oldest first, whatever the order given; the dirty commit is marked.
    let versions = rows(&doc, "runs");
    let firsts: Vec<String> = versions.iter().map(|r| format!("{} {}", r[0], r[2])).collect();
    assert_eq!(firsts, ["#1 aaaaaaa", "#2 bbbbbbb-dirty uncommitted changes", "#3 ccccccc"]);
    assert!(std::fs::read_to_string(history.join("results-1.json")).unwrap().contains("\"v-old\""));

    let changes = rows(&doc, "changes");
    assert_eq!(flag(&changes, "channels-last", "#1"), "changed ↑ (higher speed-up)");
    assert_eq!(flag(&changes, "channels-last", "#2"), "no change");
    assert_eq!(flag(&changes, "avoid-sync", "#1"), "no change");
    assert_eq!(flag(&changes, "avoid-sync", "#2"), "no change");
    // Missing from the middle run: a gap on both sides of it, not a zero.
    assert_eq!(flag(&changes, "zero-grad-none", "#1"), "not compared");
    let gap = changes.iter().find(|r| r[0].contains("zero-grad-none") && r[1].starts_with("#2")).unwrap();
    assert_eq!((gap[3].as_str(), gap[4].as_str()), ("missing", "1.00× [0.95, 1.05] (separate processes)"));
    let conclusion: String =
        doc.select(&Selector::parse(".conclusion").unwrap()).next().unwrap().text().collect();
    assert!(
        conclusion.contains("1 changed beyond their intervals: resnet20 · channels-last · b128 ↑ (#1→#2)"),
        "{conclusion}"
    );

    let md = std::fs::read_to_string(history.join("summary.md")).unwrap();
    assert!(md.contains("| resnet20 · channels-last · b128 | #1 aaaaaaa → #2 bbbbbbb-dirty | throughput | 1.00× [0.95, 1.05] (separate processes) | 1.30× [1.25, 1.35] (separate processes) | **changed ↑ (higher speed-up)** |"), "{md}");
    let csv = std::fs::read_to_string(history.join("history.csv")).unwrap();
    assert!(
        csv.lines().next().unwrap().starts_with("workload,cell,batch_size,profile,judged_by,from_version"),
        "{csv}"
    );
    assert!(csv.contains("resnet20,channels-last,128,quick,throughput,1,aaaaaaa,2,bbbbbbb-dirty,1.0,0.95,1.05,processes,1.3,1.25,1.35,processes,up"), "{csv}");
}

#[test]
fn by_device_keeps_versions_side_by_side_in_the_order_given() {
    let dir = temp_dir();
    write_versions(dir.path());
    let out =
        trickbench(dir.path(), &["compare", "new.json", "old.json", "--by", "device", "--out", "devices"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(text(&out.stdout).contains("compared: 2 machines (--by device)"), "{}", text(&out.stdout));
    assert!(dir.path().join("devices/comparison.csv").is_file());
    assert!(!dir.path().join("devices/history.csv").exists());
}

#[test]
fn runs_that_share_no_cell_are_refused_saying_what_each_holds() {
    let dir = temp_dir();
    let quick = version_run("v-quick", "2026-11-30T10:00:00Z", "aaaaaaa", &[(ChannelsLast, 1.0, 0.05)]);
    let mut standard =
        version_run("v-standard", "2026-12-01T10:00:00Z", "bbbbbbb", &[(ChannelsLast, 1.0, 0.05)]);
    standard.run.profile = ProfileName::Standard;
    save(dir.path(), "quick.json", &quick);
    save(dir.path(), "standard.json", &standard);
    let out =
        trickbench(dir.path(), &["compare", "quick.json", "standard.json", "--by", "version", "--out", "h"]);
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("no trick cell was measured in two of these runs"), "{stderr}");
    assert!(
        stderr.contains("#1 v-quick (quick profile: resnet20); #2 v-standard (standard profile: resnet20)"),
        "{stderr}"
    );

    let bad =
        trickbench(dir.path(), &["compare", "quick.json", "standard.json", "--by", "commit", "--out", "h"]);
    let stderr = text(&bad.stderr);
    assert_eq!(bad.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("'commit'") && stderr.contains("auto, device, version"), "{stderr}");
}
