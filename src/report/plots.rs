//! Chart specifications and their rendering. This is the only module that touches `plotters`: the
//! rest of the report describes charts as plain data ([`Chart`]) and receives SVG text and PNG bytes.

use std::sync::Once;

use plotters::coord::Shift;
use plotters::prelude::*;
use plotters::style::register_font;
use plotters::style::text_anchor::{HPos, Pos, VPos};

/// DejaVu Sans (see `assets/fonts/DejaVuSans-LICENSE.txt`), embedded so that rendering needs no
/// system fonts.
const FONT: &[u8] = include_bytes!("../../assets/fonts/DejaVuSans.ttf");
const FONT_FAMILY: &str = "sans-serif";
const WIDTH: u32 = 960;
const ROW_HEIGHT: u32 = 30;
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

/// A chart, described as data.
#[derive(Debug, Clone)]
pub(crate) enum Chart {
    /// Horizontal bars, one per row.
    Bars(BarChart),
    /// Lines over a numeric x axis.
    Lines(LineChart),
    /// A coloured grid of speed-ups.
    Heatmap(Heatmap),
}

/// Horizontal bars from a base value to a value, with optional confidence whiskers.
#[derive(Debug, Clone)]
pub(crate) struct BarChart {
    /// Title above the plot.
    pub title: String,
    /// Label of the value axis, with its unit.
    pub x_label: String,
    /// A vertical reference line (value, label), e.g. the baseline at 1.0.
    pub reference: Option<(f64, String)>,
    /// The bars, top to bottom.
    pub rows: Vec<BarRow>,
}

/// One bar.
#[derive(Debug, Clone)]
pub(crate) struct BarRow {
    /// Label left of the bar.
    pub label: String,
    /// Where the bar starts.
    pub base: f64,
    /// Where the bar ends; `None` draws no bar, only the note (not applicable, failed …).
    pub value: Option<f64>,
    /// Confidence interval drawn as a whisker.
    pub ci: Option<(f64, f64)>,
    /// Fill colour.
    pub colour: Rgb,
    /// Text right of the bar (the value, or why there is none).
    pub note: String,
    /// Draw a separator line above this row (starts a new group).
    pub separator: bool,
}

/// Lines, each a series of (x, y) points.
#[derive(Debug, Clone)]
pub(crate) struct LineChart {
    /// Title above the plot.
    pub title: String,
    /// Label of the x axis, with its unit.
    pub x_label: String,
    /// Label of the y axis, with its unit.
    pub y_label: String,
    /// x values are powers of two (batch sizes): spaced logarithmically, labelled as integers.
    pub x_log2: bool,
    /// Format y tick labels as percentages of a fraction.
    pub y_percent: bool,
    /// The series, drawn in order.
    pub series: Vec<Series>,
    /// A horizontal reference line (value, label), e.g. the accuracy target.
    pub target: Option<(f64, String)>,
    /// Points marked on the x axis with a cross and a label (out-of-memory batch sizes).
    pub x_marks: Vec<(f64, String)>,
}

/// One line.
#[derive(Debug, Clone)]
pub(crate) struct Series {
    /// Legend entry; `None` keeps the series out of the legend (thin per-seed lines).
    pub label: Option<String>,
    /// Line colour.
    pub colour: Rgb,
    /// Draw bold (a median or the only line) rather than thin.
    pub bold: bool,
    /// Mark each point with a dot.
    pub dots: bool,
    /// The points, in x order.
    pub points: Vec<(f64, f64)>,
}

/// A grid of speed-ups: rows × columns, coloured around 1.0.
#[derive(Debug, Clone)]
pub(crate) struct Heatmap {
    /// Title above the grid.
    pub title: String,
    /// Row labels.
    pub rows: Vec<String>,
    /// Column labels.
    pub columns: Vec<String>,
    /// `cells[row][column]`: the speed-up (if measured) and the text to print in the cell.
    pub cells: Vec<Vec<(Option<f64>, String)>>,
}

/// A chart rendered both ways.
#[derive(Debug, Clone)]
pub(crate) struct Rendered {
    /// The SVG document.
    pub svg: String,
    /// The PNG file.
    pub png: Vec<u8>,
}

/// Renders `chart` as SVG and as PNG.
pub(crate) fn render(chart: &Chart) -> Result<Rendered, String> {
    static REGISTER: Once = Once::new();
    REGISTER.call_once(|| {
        // The font is a fixed, valid file: failure here is a build defect, caught by the tests.
        if register_font(FONT_FAMILY, FontStyle::Normal, FONT).is_err() {
            panic!("the embedded DejaVu Sans font is not a valid TrueType file");
        }
    });
    let size = size(chart);
    let mut svg = String::new();
    draw(SVGBackend::with_string(&mut svg, size).into_drawing_area(), chart)?;
    let mut rgb = vec![255u8; size.0 as usize * size.1 as usize * 3];
    draw(BitMapBackend::with_buffer(&mut rgb, size).into_drawing_area(), chart)?;
    let image = image::RgbImage::from_raw(size.0, size.1, rgb).ok_or("bitmap buffer has the wrong size")?;
    let mut png = Vec::new();
    image
        .write_to(&mut std::io::Cursor::new(&mut png), image::ImageFormat::Png)
        .map_err(|e| format!("encoding PNG: {e}"))?;
    Ok(Rendered { svg, png })
}

fn size(chart: &Chart) -> (u32, u32) {
    match chart {
        Chart::Bars(c) => (WIDTH, 130 + ROW_HEIGHT * c.rows.len().max(1) as u32),
        Chart::Lines(_) => (WIDTH, 520),
        Chart::Heatmap(h) => (WIDTH, 150 + 40 * h.rows.len().max(1) as u32),
    }
}

fn draw<DB: DrawingBackend>(root: DrawingArea<DB, Shift>, chart: &Chart) -> Result<(), String> {
    root.fill(&WHITE).map_err(|e| e.to_string())?;
    match chart {
        Chart::Bars(c) => bars(&root, c),
        Chart::Lines(c) => lines(&root, c),
        Chart::Heatmap(h) => heatmap(&root, h),
    }
    .map_err(|e| e.to_string())?;
    root.present().map_err(|e| e.to_string())
}

type DrawResult<DB> = Result<(), DrawingAreaErrorKind<<DB as DrawingBackend>::ErrorType>>;

fn font(size: f64) -> TextStyle<'static> {
    (FONT_FAMILY, size).into_font().color(&TEXT)
}

fn text_width<DB: DrawingBackend>(root: &DrawingArea<DB, Shift>, text: &str, size: f64) -> u32 {
    root.estimate_text_size(text, &font(size)).map_or(8 * text.len() as u32, |(w, _)| w)
}

/// A "nice" padded range around `lo..hi`.
fn padded(lo: f64, hi: f64) -> (f64, f64) {
    let span = (hi - lo).abs().max(hi.abs() * 0.05).max(1e-9);
    (lo - span * 0.05, hi + span * 0.05)
}

fn bars<DB: DrawingBackend>(root: &DrawingArea<DB, Shift>, c: &BarChart) -> DrawResult<DB> {
    let n = c.rows.len().max(1);
    let mut lo = c.reference.as_ref().map_or(f64::INFINITY, |r| r.0);
    let mut hi = c.reference.as_ref().map_or(f64::NEG_INFINITY, |r| r.0);
    for row in &c.rows {
        let (a, b) = row.ci.unwrap_or((row.base, row.base));
        for v in [Some(row.base), row.value, Some(a), Some(b)].into_iter().flatten() {
            lo = lo.min(v);
            hi = hi.max(v);
        }
    }
    if !lo.is_finite() {
        (lo, hi) = (0.0, 1.0);
    }
    let (lo, hi) = padded(lo, hi);
    // Room on the right for the notes printed after each bar.
    let longest_note = c.rows.iter().map(|r| text_width(root, &r.note, 13.0)).max().unwrap_or(0);
    let plot_w = f64::from(WIDTH) * 0.6;
    let hi = hi + (hi - lo) * (f64::from(longest_note) + 16.0) / plot_w;
    let label_w = c.rows.iter().map(|r| text_width(root, &r.label, 14.0)).max().unwrap_or(40) + 24;

    // The title is drawn above a gap that holds the reference line's label.
    let area = root.titled(&c.title, font(19.0))?.margin(18, 0, 0, 0);
    let mut chart = ChartBuilder::on(&area)
        .margin(14)
        .x_label_area_size(48)
        .y_label_area_size(label_w)
        .build_cartesian_2d(lo..hi, 0f64..n as f64)?;
    let x_label = c.x_label.clone();
    chart
        .configure_mesh()
        .disable_y_mesh()
        .y_labels(0)
        .y_label_formatter(&|_| String::new())
        .x_label_formatter(&|x| short_number(*x))
        .x_desc(x_label)
        .axis_desc_style(font(14.0))
        .label_style(font(13.0))
        .max_light_lines(1)
        .light_line_style(GRID.mix(0.5))
        .bold_line_style(GRID)
        .draw()?;

    // Row i occupies y ∈ [n-i-1, n-i]: the first row is drawn at the top.
    let centre = |i: usize| n as f64 - i as f64 - 0.5;
    for (i, row) in c.rows.iter().enumerate() {
        let y = centre(i);
        if row.separator && i > 0 {
            chart.draw_series(std::iter::once(PathElement::new(
                vec![(lo, y + 0.5), (hi, y + 0.5)],
                MUTED.mix(0.4).stroke_width(1),
            )))?;
        }
        if let Some(v) = row.value {
            let colour = row.colour.plotters();
            chart.draw_series(std::iter::once(Rectangle::new(
                [(row.base.min(v), y - 0.32), (row.base.max(v), y + 0.32)],
                colour.mix(0.85).filled(),
            )))?;
        }
        if let Some((a, b)) = row.ci {
            let style = TEXT.stroke_width(2);
            chart.draw_series([
                PathElement::new(vec![(a, y), (b, y)], style),
                PathElement::new(vec![(a, y - 0.18), (a, y + 0.18)], style),
                PathElement::new(vec![(b, y - 0.18), (b, y + 0.18)], style),
            ])?;
        }
        let end = [Some(row.base), row.value, row.ci.map(|c| c.1)].into_iter().flatten().fold(lo, f64::max);
        let (px, py) = chart.backend_coord(&(end, y));
        let colour = if row.value.is_some() { TEXT } else { WARNING };
        root.draw(&Text::new(
            row.note.clone(),
            (px + 8, py),
            font(13.0).color(&colour).pos(Pos::new(HPos::Left, VPos::Center)),
        ))?;
        let (lx, ly) = chart.backend_coord(&(lo, y));
        root.draw(&Text::new(
            row.label.clone(),
            (lx - 10, ly),
            font(14.0).pos(Pos::new(HPos::Right, VPos::Center)),
        ))?;
    }
    if let Some((x, label)) = &c.reference {
        chart.draw_series(std::iter::once(PathElement::new(
            vec![(*x, 0.0), (*x, n as f64)],
            MUTED.stroke_width(2),
        )))?;
        let (px, py) = chart.backend_coord(&(*x, n as f64));
        root.draw(&Text::new(
            label.clone(),
            (px, py - 4),
            font(12.0).color(&MUTED).pos(Pos::new(HPos::Center, VPos::Bottom)),
        ))?;
    }
    Ok(())
}

fn lines<DB: DrawingBackend>(root: &DrawingArea<DB, Shift>, c: &LineChart) -> DrawResult<DB> {
    let fx = |x: f64| if c.x_log2 { x.max(f64::MIN_POSITIVE).log2() } else { x };
    let xs = c
        .series
        .iter()
        .flat_map(|s| s.points.iter().map(|p| fx(p.0)))
        .chain(c.x_marks.iter().map(|m| fx(m.0)));
    let ys = c.series.iter().flat_map(|s| s.points.iter().map(|p| p.1)).chain(c.target.iter().map(|t| t.0));
    let range = |it: &mut dyn Iterator<Item = f64>| {
        it.fold((f64::INFINITY, f64::NEG_INFINITY), |(lo, hi), v| (lo.min(v), hi.max(v)))
    };
    let (x0, x1) = range(&mut xs.into_iter());
    let (y0, y1) = range(&mut ys.into_iter());
    let (x0, x1) = if x0.is_finite() { padded(x0, x1) } else { (0.0, 1.0) };
    let (y0, y1) = if y0.is_finite() { padded(y0.min(0.0), y1) } else { (0.0, 1.0) };

    let mut chart = ChartBuilder::on(root)
        .caption(&c.title, font(19.0))
        .margin(14)
        .x_label_area_size(48)
        .y_label_area_size(76)
        .build_cartesian_2d(x0..x1, y0..y1)?;
    let x_fmt = |x: &f64| {
        if c.x_log2 {
            format!("{}", x.exp2().round())
        } else {
            short_number(*x)
        }
    };
    let y_fmt = |y: &f64| if c.y_percent { format!("{:.0}%", y * 100.0) } else { short_number(*y) };
    chart
        .configure_mesh()
        .x_desc(c.x_label.clone())
        .y_desc(c.y_label.clone())
        .x_label_formatter(&x_fmt)
        .y_label_formatter(&y_fmt)
        .x_labels(if c.x_log2 { (x1 - x0).ceil() as usize + 1 } else { 10 })
        .axis_desc_style(font(14.0))
        .label_style(font(13.0))
        .max_light_lines(1)
        .light_line_style(GRID.mix(0.5))
        .bold_line_style(GRID)
        .draw()?;

    if let Some((y, label)) = &c.target {
        chart.draw_series(DashedLineSeries::new(vec![(x0, *y), (x1, *y)], 8, 5, WARNING.stroke_width(2)))?;
        let (px, py) = chart.backend_coord(&(x1, *y));
        root.draw(&Text::new(
            label.clone(),
            (px - 6, py - 4),
            font(13.0).color(&WARNING).pos(Pos::new(HPos::Right, VPos::Bottom)),
        ))?;
    }
    for s in &c.series {
        let colour = s.colour.plotters();
        let style = if s.bold { colour.stroke_width(3) } else { colour.mix(0.45).stroke_width(1) };
        let points: Vec<_> = s.points.iter().map(|&(x, y)| (fx(x), y)).collect();
        let drawn = chart.draw_series(LineSeries::new(points.clone(), style))?;
        if let Some(label) = &s.label {
            drawn
                .label(label)
                .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 22, y)], colour.stroke_width(3)));
        }
        if s.dots {
            chart.draw_series(points.iter().map(|&p| Circle::new(p, 4, colour.filled())))?;
        }
    }
    for (x, label) in &c.x_marks {
        let (px, py) = chart.backend_coord(&(fx(*x), y0));
        let style = WARNING.stroke_width(3);
        root.draw(&PathElement::new(vec![(px - 7, py - 19), (px + 7, py - 5)], style))?;
        root.draw(&PathElement::new(vec![(px - 7, py - 5), (px + 7, py - 19)], style))?;
        root.draw(&Text::new(
            label.clone(),
            (px, py - 24),
            font(13.0).color(&WARNING).pos(Pos::new(HPos::Center, VPos::Bottom)),
        ))?;
    }
    if c.series.iter().any(|s| s.label.is_some()) {
        chart
            .configure_series_labels()
            .position(if c.x_marks.is_empty() {
                SeriesLabelPosition::LowerRight
            } else {
                SeriesLabelPosition::UpperLeft
            })
            .background_style(WHITE.mix(0.9))
            .border_style(GRID)
            .label_font(font(13.0))
            .draw()?;
    }
    Ok(())
}

/// The heat colour of a speed-up: red below 1, white at 1, green above; saturated at ½× and 2×.
fn heat(value: f64) -> RGBColor {
    let t = value.max(1e-9).log2().clamp(-1.0, 1.0);
    let (target, t) = if t >= 0.0 { ((26, 152, 80), t) } else { ((215, 48, 39), -t) };
    let mix = |a: u8| (255.0 + (f64::from(a) - 255.0) * t).round() as u8;
    RGBColor(mix(target.0), mix(target.1), mix(target.2))
}

fn heatmap<DB: DrawingBackend>(root: &DrawingArea<DB, Shift>, h: &Heatmap) -> DrawResult<DB> {
    let (rows, cols) = (h.rows.len().max(1), h.columns.len().max(1));
    let label_w = h.rows.iter().map(|r| text_width(root, r, 14.0)).max().unwrap_or(40) + 24;
    let mut chart = ChartBuilder::on(root)
        .caption(&h.title, font(19.0))
        .margin(14)
        .margin_top(20)
        .x_label_area_size(40)
        .y_label_area_size(label_w)
        .build_cartesian_2d(0f64..cols as f64, 0f64..rows as f64)?;
    chart.configure_mesh().disable_mesh().x_labels(0).y_labels(0).draw()?;
    for (r, row) in h.cells.iter().enumerate() {
        let y = (rows - r - 1) as f64;
        for (col, (value, text)) in row.iter().enumerate() {
            let x = col as f64;
            let fill = value.map_or(RGBColor(233, 236, 239), heat);
            chart.draw_series([
                Rectangle::new([(x, y), (x + 1.0, y + 1.0)], fill.filled()),
                Rectangle::new([(x, y), (x + 1.0, y + 1.0)], WHITE.stroke_width(2)),
            ])?;
            let (px, py) = chart.backend_coord(&(x + 0.5, y + 0.5));
            let colour = match value {
                Some(v) if v.max(1e-9).log2().abs() > 0.6 => WHITE,
                Some(_) => TEXT,
                None => MUTED,
            };
            root.draw(&Text::new(
                text.clone(),
                (px, py),
                font(14.0).color(&colour).pos(Pos::new(HPos::Center, VPos::Center)),
            ))?;
        }
    }
    for (r, label) in h.rows.iter().enumerate() {
        let (px, py) = chart.backend_coord(&(0.0, (rows - r) as f64 - 0.5));
        root.draw(&Text::new(
            label.clone(),
            (px - 10, py),
            font(14.0).pos(Pos::new(HPos::Right, VPos::Center)),
        ))?;
    }
    for (col, label) in h.columns.iter().enumerate() {
        let (px, py) = chart.backend_coord(&(col as f64 + 0.5, 0.0));
        root.draw(&Text::new(
            label.clone(),
            (px, py + 10),
            font(14.0).pos(Pos::new(HPos::Center, VPos::Top)),
        ))?;
    }
    Ok(())
}

/// A compact axis label: 1234567 → "1.23M", 0.125 → "0.125".
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
    fn heat_is_white_at_one_and_saturates() {
        assert_eq!(heat(1.0), RGBColor(255, 255, 255));
        assert_eq!(heat(4.0), RGBColor(26, 152, 80));
        assert_eq!(heat(0.25), RGBColor(215, 48, 39));
    }
}
