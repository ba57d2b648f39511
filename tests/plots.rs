//! The plots of every committed CPU report and of the synthetic fixtures, rendered afresh and
//! checked as a reader would see them: every text inside the figure, no two value or marker
//! labels on top of each other, every measured cell drawn (each bar and point carries its cell id
//! in a hover `<title>`), and every PNG twice its SVG's size. Each check is also run on a
//! deliberately broken chart, to show that it can fail.

#[allow(dead_code)]
mod common;

use std::path::PathBuf;

use ab_glyph::{Font, FontRef, ScaleFont};
use trickbench::report::render_report;
use trickbench::results::schema::{CellId, CellKind, CellStatus, Results};

use common::dirs::{checkout, kept_output_dir};
use common::fixtures;

const FONT: &[u8] = include_bytes!("../assets/fonts/DejaVuSans.ttf");
/// DejaVu Sans' ascent and descent in em: the vertical extent of a line of text.
const ASCENT_EM: f64 = 0.93;
const DESCENT_EM: f64 = 0.24;

/// A text's box in SVG pixels, with its content.
#[derive(Debug, Clone)]
struct TextBox {
    content: String,
    left: f64,
    right: f64,
    top: f64,
    bottom: f64,
}

impl TextBox {
    fn overlaps(&self, o: &TextBox) -> bool {
        self.left < o.right && o.left < self.right && self.top < o.bottom && o.top < self.bottom
    }
}

/// The advance width of `text`, measured with the embedded font, 3% + 1 px wider to stay
/// conservative against a browser's rounding.
fn text_width(text: &str, em: f64) -> f64 {
    let face = FontRef::try_from_slice(FONT).unwrap();
    let scale = em as f32 * face.height_unscaled() / face.units_per_em().unwrap();
    let font = face.as_scaled(scale);
    let advance: f32 = text.chars().map(|c| font.h_advance(font.glyph_id(c))).sum();
    f64::from(advance) * 1.03 + 1.0
}

/// The baseline offset of plotters' `dy` values.
fn baseline_shift(dy: &str, em: f64) -> f64 {
    match dy {
        "0.76em" => 0.76 * em,
        "0.5ex" => 0.27 * em,
        "-0.5ex" => -0.27 * em,
        _ => 0.0,
    }
}

/// The viewBox size and the box of every `<text>` of an SVG document.
fn text_boxes(svg: &str) -> ((f64, f64), Vec<TextBox>) {
    let doc = roxmltree::Document::parse(svg).expect("the SVG parses");
    let root = doc.root_element();
    let view: Vec<f64> = root.attribute("viewBox").unwrap().split(' ').map(|v| v.parse().unwrap()).collect();
    let mut boxes = Vec::new();
    for node in doc.descendants().filter(|n| n.has_tag_name("text")) {
        let num = |name: &str| node.attribute(name).and_then(|v| v.parse::<f64>().ok()).unwrap_or(0.0);
        let (x, y, em) = (num("x"), num("y"), num("font-size"));
        let content = node.text().unwrap_or("").trim().to_owned();
        let w = text_width(&content, em);
        let (start, end) = match node.attribute("text-anchor") {
            Some("middle") => (-w / 2.0, w / 2.0),
            Some("end") => (-w, 0.0),
            _ => (0.0, w),
        };
        let baseline = baseline_shift(node.attribute("dy").unwrap_or(""), em);
        let (above, below) = (ASCENT_EM * em - baseline, DESCENT_EM * em + baseline);
        let rotated = node
            .attribute("transform")
            .is_some_and(|t| t.starts_with("rotate(270") || t.starts_with("rotate(90"));
        let b = if rotated {
            TextBox { content, left: x - above, right: x + below, top: y - end, bottom: y - start }
        } else {
            TextBox { content, left: x + start, right: x + end, top: y - above, bottom: y + below }
        };
        boxes.push(b);
    }
    ((view[2], view[3]), boxes)
}

/// Texts that reach outside the figure.
fn texts_outside(svg: &str) -> Vec<String> {
    let ((w, h), boxes) = text_boxes(svg);
    boxes
        .into_iter()
        .filter(|b| b.left < 0.0 || b.top < 0.0 || b.right > w || b.bottom > h)
        .map(|b| {
            format!(
                "{:?} at [{:.0}, {:.0}]–[{:.0}, {:.0}] in {w}×{h}",
                b.content, b.left, b.top, b.right, b.bottom
            )
        })
        .collect()
}

/// Whether a text is a value label (a speed-up, ratio, throughput or time) or a marker label.
fn is_value_or_marker(text: &str) -> bool {
    text.contains('×') || text.contains("/s") || text.contains("out of memory") || text.contains(" seeds)")
}

/// Pairs of value or marker labels that overlap.
fn overlapping_labels(svg: &str) -> Vec<String> {
    let (_, boxes) = text_boxes(svg);
    let labels: Vec<&TextBox> = boxes.iter().filter(|b| is_value_or_marker(&b.content)).collect();
    let mut clashes = Vec::new();
    for (i, a) in labels.iter().enumerate() {
        for b in &labels[i + 1..] {
            if a.overlaps(b) {
                clashes.push(format!("{:?} overlaps {:?}", a.content, b.content));
            }
        }
    }
    clashes
}

/// The hover titles of an SVG.
fn titles(svg: &str) -> Vec<String> {
    let doc = roxmltree::Document::parse(svg).unwrap();
    doc.descendants()
        .filter(|n| n.has_tag_name("title"))
        .filter_map(|n| n.text().map(str::to_owned))
        .collect()
}

/// The width and height of a PNG file, from its header.
fn png_size(png: &[u8]) -> (u32, u32) {
    assert_eq!(&png[1..4], b"PNG");
    let be = |b: &[u8]| u32::from_be_bytes([b[0], b[1], b[2], b[3]]);
    (be(&png[16..20]), be(&png[20..24]))
}

/// What is wrong with the PNG's size: it must be twice the SVG's (2× pixel density).
fn png_mismatch(svg: &str, png: &[u8]) -> Option<String> {
    let ((w, h), _) = text_boxes(svg);
    let expected = (2 * w as u32, 2 * h as u32);
    (png_size(png) != expected).then(|| format!("PNG is {:?}, expected {expected:?}", png_size(png)))
}

/// The cells a report must draw, by figure kind: every compared cell in a speed-up or stack bar,
/// every probe that measured memory in a batch sweep, every time-to-accuracy curve, every step
/// breakdown in a phases figure but those of the baseline and the control measured alone, which the
/// figure leaves out (`report::phases::broken_down`).
fn cells_to_draw(results: &[Results]) -> Vec<(&'static str, CellId)> {
    let mut cells = Vec::new();
    for r in results {
        cells.extend(r.comparisons.iter().map(|c| ("speedup|stack", c.cell.clone())));
        for c in &r.cells {
            let drawn_as = match c.key.kind {
                CellKind::MemoryProbe if c.memory.is_some() && c.status == CellStatus::Ok => {
                    Some("batch-memory")
                }
                CellKind::TimeToAccuracy
                    if c.time_to_accuracy.as_ref().is_some_and(|t| !t.curve.is_empty()) =>
                {
                    Some("tta-curves")
                }
                _ => None,
            };
            cells.extend(drawn_as.map(|k| (k, c.id())));
            if c.step_breakdown().is_some() && !c.key.alone {
                cells.push(("phases", c.id()));
            }
        }
    }
    cells
}

/// The cells of `expected` that no figure of its kind shows in a hover title.
fn undrawn(expected: &[(&str, impl std::fmt::Display)], figures: &[(String, String)]) -> Vec<String> {
    expected
        .iter()
        .filter(|(kinds, id)| {
            let needle = format!("({id})");
            !figures.iter().any(|(name, svg)| {
                kinds.split('|').any(|k| name.starts_with(k))
                    && titles(svg).iter().any(|t| t.contains(&needle))
            })
        })
        .map(|(kind, id)| format!("{id} (expected in a {kind} figure)"))
        .collect()
}

/// Renders `results` and returns every problem its plots have.
fn problems(name: &str, results: &[Results]) -> Vec<String> {
    let files = render_report(results, &kept_output_dir(&format!("plots/{name}"))).unwrap();
    let mut problems = Vec::new();
    let mut figures = Vec::new();
    for svg_path in files.plots.iter().filter(|p| p.extension().is_some_and(|e| e == "svg")) {
        let svg = std::fs::read_to_string(svg_path).unwrap();
        let file = svg_path.file_name().unwrap().to_string_lossy().into_owned();
        problems.extend(texts_outside(&svg).into_iter().map(|t| format!("{file}: text outside: {t}")));
        problems.extend(overlapping_labels(&svg).into_iter().map(|t| format!("{file}: {t}")));
        match file.strip_suffix("-narrow.svg") {
            // The phone form draws what the wide form draws, and has no PNG of its own.
            Some(stem) => {
                let wide = std::fs::read_to_string(svg_path.with_file_name(format!("{stem}.svg"))).unwrap();
                if titles(&svg) != titles(&wide) {
                    problems.push(format!("{file}: its hover titles differ from {stem}.svg's"));
                }
                let ((width, _), _) = text_boxes(&svg);
                // 520 px shown in a phone's 360-px column keeps 14-px text above 9.5 px.
                if width > 520.0 {
                    problems.push(format!("{file}: {width} px wide, too wide for a phone"));
                }
            }
            None => {
                let png = std::fs::read(svg_path.with_extension("png")).unwrap();
                problems.extend(png_mismatch(&svg, &png).map(|m| format!("{file}: {m}")));
                figures.push((file, svg));
            }
        }
    }
    problems.extend(
        undrawn(&cells_to_draw(results), &figures).into_iter().map(|c| format!("{name}: not drawn: {c}")),
    );
    problems
}

fn committed_reports() -> Vec<(String, Vec<Results>)> {
    let root = checkout("reports");
    let mut reports = Vec::new();
    for dir in std::fs::read_dir(&root).unwrap().map(|e| e.unwrap().path()) {
        let name = dir.file_name().unwrap().to_string_lossy().into_owned();
        if !name.starts_with("cpu-") {
            continue;
        }
        let single = dir.join("results.json");
        let paths: Vec<PathBuf> = if single.is_file() {
            vec![single]
        } else {
            (1..).map(|i| dir.join(format!("results-{i}.json"))).take_while(|p| p.is_file()).collect()
        };
        if !paths.is_empty() {
            reports
                .push((name, paths.iter().map(|p| trickbench::results::store::load(p).unwrap()).collect()));
        }
    }
    reports.sort_by(|a, b| a.0.cmp(&b.0));
    reports
}

#[test]
fn every_committed_report_plots_cleanly() {
    let reports = committed_reports();
    assert!(reports.len() >= 5, "found only {} committed CPU reports", reports.len());
    let all: Vec<String> = reports.iter().flat_map(|(name, results)| problems(name, results)).collect();
    assert!(all.is_empty(), "{} problems:\n{}", all.len(), all.join("\n"));
}

#[test]
fn the_fixture_reports_plot_cleanly() {
    let (cpu, gpu) = (fixtures::cpu_run(), fixtures::gpu_fixture());
    let mut all = problems("fixture-cpu", std::slice::from_ref(&cpu));
    all.extend(problems("fixture-gpu", std::slice::from_ref(&gpu)));
    all.extend(problems("fixture-both", &[cpu, gpu]));
    all.extend(problems("fixture-super-convergence", &[fixtures::super_convergence_run()]));
    all.extend(problems("fixture-batch-sweep", &[fixtures::batch_sweep_run()]));
    let phased = [
        fixtures::with_step_breakdowns(fixtures::cpu_run()),
        fixtures::with_step_breakdowns(fixtures::gpu_fixture()),
    ];
    all.extend(problems("fixture-step-phases", &phased));
    assert!(all.is_empty(), "{} problems:\n{}", all.len(), all.join("\n"));
}

/// An SVG as plotters writes it, with the given texts.
fn svg_with(texts: &[(f64, f64, &str, &str)]) -> String {
    let body: String = texts
        .iter()
        .map(|(x, y, anchor, s)| {
            format!("<text x=\"{x}\" y=\"{y}\" dy=\"0.5ex\" text-anchor=\"{anchor}\" font-size=\"14\">{s}</text>\n")
        })
        .collect();
    format!("<svg width=\"300\" height=\"100\" viewBox=\"0 0 300 100\" xmlns=\"http://www.w3.org/2000/svg\">\n{body}</svg>\n")
}

#[test]
fn the_checks_catch_broken_charts() {
    let fine =
        svg_with(&[(10.0, 20.0, "start", "1.31× [1.20, 1.47]"), (10.0, 50.0, "start", "0.94× [0.83, 0.97]")]);
    assert!(texts_outside(&fine).is_empty() && overlapping_labels(&fine).is_empty());
    // A value label cut at the right edge, and one pushed above the top.
    let cut = svg_with(&[(200.0, 20.0, "start", "18.57× [18.03, 20.38]")]);
    assert_eq!(texts_outside(&cut).len(), 1);
    assert_eq!(texts_outside(&svg_with(&[(150.0, 2.0, "middle", "1.00×")])).len(), 1);
    // Two out-of-memory markers printed on one spot.
    let stacked = svg_with(&[
        (60.0, 60.0, "start", "baseline: out of memory at b4096"),
        (70.0, 64.0, "start", "checkpointing: out of memory at b4096"),
    ]);
    assert_eq!(overlapping_labels(&stacked).len(), 1);
    // A chart that drew only the b128 point of a sweep.
    let expected = vec![
        ("batch-memory", "r/baseline/b64/s0/probe".to_owned()),
        ("batch-memory", "r/baseline/b128/s0/probe".to_owned()),
    ];
    let drawn = "<svg viewBox=\"0 0 1 1\" xmlns=\"http://www.w3.org/2000/svg\"><rect><title>b128 (r/baseline/b128/s0/probe)</title></rect></svg>".to_owned();
    assert_eq!(
        undrawn(&expected, &[("batch-memory-x.svg".to_owned(), drawn)]),
        vec!["r/baseline/b64/s0/probe (expected in a batch-memory figure)"]
    );
}

#[test]
fn a_png_at_the_svgs_own_size_is_caught() {
    let header = |w: u32, h: u32| {
        let mut png = b"\x89PNG\r\n\x1a\n\0\0\0\rIHDR".to_vec();
        png.extend(w.to_be_bytes());
        png.extend(h.to_be_bytes());
        png
    };
    let svg = svg_with(&[]);
    assert!(png_mismatch(&svg, &header(600, 200)).is_none());
    assert!(png_mismatch(&svg, &header(300, 100)).is_some());
}
