//! Chart specifications and their rendering. This is the only module that touches `plotters`: the
//! rest of the report describes charts as plain data ([`Chart`]) and receives SVG text and PNG bytes.
//!
//! Layout is computed once, in SVG pixels, from the widths a browser gives the text (measured
//! with the embedded font), so that no label is clipped; the PNG draws the same layout at twice
//! the pixel density. Every bar, point and cell carries a hover text, written into the SVG as a
//! `<title>` over its area.

mod bars;
mod bitmap;
mod dots;
mod frame;
mod heatmap;
mod indexed;
mod lines;
mod panels;

use std::cell::RefCell;
use std::fmt::Write as _;

use plotters::coord::Shift;
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};

pub(crate) use bitmap::text_width;

/// DejaVu Sans (see `assets/fonts/DejaVuSans-LICENSE.txt`), embedded so that rendering needs no
/// system fonts; the SVG names the same family first (a browser without it falls back to a
/// narrower sans-serif, so the layout measured with DejaVu still holds).
const FONT: &[u8] = include_bytes!("../../assets/fonts/DejaVuSans.ttf");
const FONT_FAMILY: &str = "DejaVu Sans, sans-serif";
/// PNG pixels per SVG pixel.
pub(crate) const PNG_DENSITY: u32 = 2;
/// Font sizes (CSS pixels per em): sized so that a 640-px figure shrunk to a phone's column
/// still prints its text at about 8 px.
const TITLE_EM: f64 = 18.0;
const BODY_EM: f64 = 16.0;
const SMALL_EM: f64 = 14.0;
const TEXT: RGBColor = RGBColor(33, 37, 41);
const MUTED: RGBColor = RGBColor(108, 117, 125);
const GRID: RGBColor = RGBColor(222, 226, 230);
const WARNING: RGBColor = RGBColor(176, 42, 55);

/// An sRGB colour.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Rgb(pub u8, pub u8, pub u8);

impl Rgb {
    fn plotters(self) -> RGBColor {
        RGBColor(self.0, self.1, self.2)
    }
}

/// The layout a chart is drawn in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Form {
    /// For a desktop page and the PNG: labels beside the data, the legend in a column.
    Wide,
    /// For a phone's column, about 400 px: labels above their bars, the legend under the plot,
    /// titles wrapped, so the text keeps its size instead of shrinking with the figure.
    Narrow,
}

/// A chart, described as data.
#[derive(Debug, Clone)]
pub(crate) enum Chart {
    /// Horizontal bars, one per row.
    Bars(bars::BarChart),
    /// Effects as markers with intervals, one row per trick, a marker per engine.
    Dots(dots::DotChart),
    /// Lines over a numeric x axis.
    Lines(lines::LineChart),
    /// A coloured grid of speed-ups.
    Heatmap(heatmap::Heatmap),
    /// Small multiples: one panel per series over shared categories.
    Panels(panels::PanelChart),
}

pub(crate) use bars::{BarChart, BarRow, BarSegment, Scale};
pub(crate) use dots::{Band, Dot, DotChart, DotRow, DotSeries, Shape, NOISE_BAND};
pub(crate) use heatmap::Heatmap;
pub(crate) use lines::{LineChart, Mark, Series};
pub(crate) use panels::{Panel, PanelChart, Slot};

/// A chart rendered both ways.
#[derive(Debug, Clone)]
pub(crate) struct Rendered {
    /// The SVG document.
    pub svg: String,
    /// The PNG file, [`PNG_DENSITY`] times the SVG's size, in indexed colour.
    pub png: Vec<u8>,
}

/// A rectangle of the chart (SVG pixels) and the text a reader sees on hovering over it.
#[derive(Debug, Clone, PartialEq)]
struct Hover {
    x: i32,
    y: i32,
    width: i32,
    height: i32,
    text: String,
}

/// Where the drawing functions leave their hover areas.
#[derive(Default)]
struct Hovers(RefCell<Vec<Hover>>);

impl Hovers {
    fn add(&self, (x, y): (i32, i32), (width, height): (i32, i32), text: &str) {
        let text = text.to_owned();
        self.0.borrow_mut().push(Hover { x, y, width: width.max(1), height: height.max(1), text });
    }
}

/// Renders `chart` in its wide form as SVG and as PNG.
pub(crate) fn render(chart: &Chart) -> Result<Rendered, String> {
    let svg = render_svg(chart, Form::Wide)?;
    let size = size(chart, Form::Wide);
    let device = (size.0 * PNG_DENSITY, size.1 * PNG_DENSITY);
    let mut rgb = vec![255u8; device.0 as usize * device.1 as usize * 3];
    let area = bitmap::Dense::new(&mut rgb, size, PNG_DENSITY).into_drawing_area();
    draw(area, chart, &Hovers::default(), Form::Wide)?;
    let png = indexed::encode(device.0, device.1, &rgb)?;
    Ok(Rendered { svg, png })
}

/// The narrow form of `chart` as SVG, for a phone's column.
pub(crate) fn render_narrow(chart: &Chart) -> Result<String, String> {
    render_svg(chart, Form::Narrow)
}

fn render_svg(chart: &Chart, form: Form) -> Result<String, String> {
    register_font();
    let hovers = Hovers::default();
    let mut svg = String::new();
    draw(SVGBackend::with_string(&mut svg, size(chart, form)).into_drawing_area(), chart, &hovers, form)?;
    let svg = with_hovers(&svg, &hovers.0.borrow());
    Ok(svg)
}

/// Registers the embedded font with plotters, whose axis code measures text with it.
fn register_font() {
    static REGISTER: std::sync::Once = std::sync::Once::new();
    REGISTER.call_once(|| {
        // The font is a fixed, valid file: failure here is a build defect, caught by the tests.
        if plotters::style::register_font(FONT_FAMILY, FontStyle::Normal, FONT).is_err() {
            panic!("the embedded DejaVu Sans font is not a valid TrueType file");
        }
    });
}

fn size(chart: &Chart, form: Form) -> (u32, u32) {
    match chart {
        Chart::Bars(c) => bars::Layout::of(c, form).size(),
        Chart::Dots(c) => dots::Layout::of(c, form).size(),
        Chart::Lines(c) => lines::size(c, form),
        Chart::Heatmap(h) => heatmap::size(h, form),
        Chart::Panels(p) => panels::size(p, form),
    }
}

fn draw<DB: DrawingBackend>(
    root: DrawingArea<DB, Shift>,
    chart: &Chart,
    hovers: &Hovers,
    form: Form,
) -> Result<(), String> {
    root.fill(&WHITE).map_err(|e| e.to_string())?;
    match chart {
        Chart::Bars(c) => bars::draw(&root, c, hovers, form),
        Chart::Dots(c) => dots::draw(&root, c, hovers, form),
        Chart::Lines(c) => lines::draw(&root, c, hovers, form),
        Chart::Heatmap(h) => heatmap::draw(&root, h, hovers, form),
        Chart::Panels(p) => panels::draw(&root, p, hovers, form),
    }
    .map_err(|e| e.to_string())?;
    root.present().map_err(|e| e.to_string())
}

/// The SVG with a transparent, titled rectangle over each hover area, last so that it is on top.
fn with_hovers(svg: &str, hovers: &[Hover]) -> String {
    let Some(end) = svg.rfind("</svg>") else {
        return svg.to_owned();
    };
    let mut out = String::with_capacity(svg.len() + hovers.len() * 120);
    out.push_str(&svg[..end]);
    out.push_str("<g class=\"hover\">\n");
    for h in hovers {
        let _ = writeln!(
            out,
            "<rect x=\"{}\" y=\"{}\" width=\"{}\" height=\"{}\" fill=\"#000\" fill-opacity=\"0\"><title>{}</title></rect>",
            h.x,
            h.y,
            h.width,
            h.height,
            escape(&h.text)
        );
    }
    out.push_str("</g>\n");
    out.push_str(&svg[end..]);
    out
}

fn escape(text: &str) -> String {
    text.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;").replace('"', "&quot;")
}

type DrawResult<DB> = Result<(), DrawingAreaErrorKind<<DB as DrawingBackend>::ErrorType>>;

/// The text style of `em` CSS pixels per em (plotters sizes fonts 1.24 × larger than CSS).
fn font(em: f64) -> TextStyle<'static> {
    (FONT_FAMILY, em * 1.24).into_font().color(&TEXT)
}

/// The room to leave for `text` at `em` pixels per em: its advance width and 4% more, so that a
/// browser's rounding or hinting never pushes it past an edge, in whole pixels.
fn width(text: &str, em: f64) -> i32 {
    (text_width(text, em) * 1.04).ceil() as i32 + 1
}

fn text<DB: DrawingBackend>(
    root: &DrawingArea<DB, Shift>,
    s: &str,
    at: (i32, i32),
    style: TextStyle<'_>,
    anchor: (HPos, VPos),
) -> DrawResult<DB> {
    root.draw(&Text::new(s.to_owned(), at, style.pos(Pos::new(anchor.0, anchor.1))))
}

/// Splits `text` into lines no wider than `max_px` at `em`, breaking between words, and after a
/// `+` inside a word too long for a line (a trick set).
fn wrap(text: &str, em: f64, max_px: i32) -> Vec<String> {
    let mut lines: Vec<String> = Vec::new();
    let words = text.split_whitespace().flat_map(|w| {
        if width(w, em) <= max_px {
            vec![w.to_owned()]
        } else {
            w.split_inclusive('+').map(str::to_owned).collect()
        }
    });
    for word in words {
        match lines.last_mut() {
            Some(line) if line.ends_with('+') && width(&format!("{line}{word}"), em) <= max_px => {
                line.push_str(&word);
            }
            Some(line) if !line.ends_with('+') && width(&format!("{line} {word}"), em) <= max_px => {
                line.push(' ');
                line.push_str(&word);
            }
            _ => lines.push(word),
        }
    }
    lines
}

/// Key entries, each a swatch and its label (`text_px` wide), in rows no wider than `max_px`, in
/// order: a swatch takes 18 px with its gap, and 18 px part two entries.
fn key_layout<T>(entries: impl IntoIterator<Item = (T, i32)>, max_px: i32) -> Vec<Vec<T>> {
    let mut rows: Vec<Vec<T>> = Vec::new();
    let mut x = 0;
    for (entry, text_px) in entries {
        let w = 18 + text_px;
        match rows.last_mut() {
            Some(row) if x + w <= max_px => row.push(entry),
            _ => {
                rows.push(vec![entry]);
                x = 0;
            }
        }
        x += w + 18;
    }
    rows
}

/// A compact axis label: 1234567 → "1.235M", 0.125 → "0.125".
pub(crate) fn short_number(v: f64) -> String {
    let a = v.abs();
    let (scaled, suffix) = if a >= 1e9 {
        (v / 1e9, "G")
    } else if a >= 1e6 {
        (v / 1e6, "M")
    } else if a >= 1e4 {
        (v / 1e3, "k")
    } else {
        (v, "")
    };
    let text = format!("{scaled:.3}");
    let text = if text.contains('.') { text.trim_end_matches('0').trim_end_matches('.') } else { &text };
    format!("{text}{suffix}")
}

/// Tick values for a linear axis over `lo..hi`: multiples of 1, 2 or 5 × 10ᵏ, about `count` of them.
fn linear_ticks(lo: f64, hi: f64, count: usize) -> Vec<f64> {
    let span = (hi - lo).max(1e-12);
    let raw = span / count.max(1) as f64;
    let power = 10f64.powf(raw.log10().floor());
    let step =
        [1.0, 2.0, 5.0, 10.0].into_iter().map(|m| m * power).find(|s| *s >= raw).unwrap_or(10.0 * power);
    let first = (lo / step).ceil() as i64;
    let last = (hi / step).floor() as i64;
    (first..=last).map(|i| i as f64 * step).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn short_numbers_are_compact() {
        assert_eq!(short_number(1_234_567.0), "1.235M");
        assert_eq!(short_number(0.125), "0.125");
        assert_eq!(short_number(2500.0), "2500");
        assert_eq!(short_number(25_000.0), "25k");
    }

    #[test]
    fn linear_ticks_are_round_and_inside() {
        assert_eq!(linear_ticks(0.0, 2257.0, 5), vec![0.0, 500.0, 1000.0, 1500.0, 2000.0]);
        let ticks = linear_ticks(1.72, 2.05, 4);
        assert_eq!(ticks.len(), 3);
        assert!(ticks.iter().zip([1.8, 1.9, 2.0]).all(|(a, b)| (a - b).abs() < 1e-9), "{ticks:?}");
    }

    #[test]
    fn wrapping_keeps_every_word_and_the_width() {
        let text = "not applicable on this device: amp, amp-bf16, cudnn-benchmark, channels-last, tf32";
        let lines = wrap(text, 13.0, 200);
        assert!(lines.len() > 1);
        assert!(lines.iter().all(|l| width(l, 13.0) <= 200));
        assert_eq!(lines.join(" "), text);
    }

    #[test]
    fn hover_titles_are_escaped_and_inside_the_document() {
        let hovers = [Hover { x: 1, y: 2, width: 3, height: 4, text: "a < b & \"c\"".to_owned() }];
        let svg = with_hovers("<svg>\n</svg>\n", &hovers);
        assert!(svg.contains("<title>a &lt; b &amp; &quot;c&quot;</title></rect>"));
        assert!(svg.trim_end().ends_with("</svg>"));
    }
}
