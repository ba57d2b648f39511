//! Line charts: time-to-accuracy curves and batch sweeps, with the legend outside the data: right
//! of it in the wide form, under it in the narrow one.

use plotters::coord::Shift;
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, VPos};

use super::{font, short_number, text, width, wrap, DrawResult, Form, Hovers, Rgb};
use super::{BODY_EM, GRID, SMALL_EM, TITLE_EM, WARNING};

const PLOT_WIDTH: i32 = 420;
const HEIGHT: u32 = 440;
const PAD: i32 = 12;
const SWATCH: i32 = 28;
const LEGEND_ROW: i32 = 20;
/// The width of a narrow figure, SVG pixels.
const NARROW_WIDTH: i32 = 400;
/// The height of a narrow figure's plot, axes included.
const NARROW_PLOT_HEIGHT: i32 = 340;
const TITLE_LINE: i32 = 24;

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
    /// The y range to show; `None` fits the data (from zero for non-negative data). Points
    /// outside are clipped.
    pub y_range: Option<(f64, f64)>,
    /// Where the x axis ends; `None` fits the data. Lines are cut there.
    pub x_max: Option<f64>,
    /// The series, drawn in order.
    pub series: Vec<Series>,
    /// A horizontal reference line (value, label), e.g. the accuracy target.
    pub target: Option<(f64, String)>,
    /// Out-of-memory markers: a cross at the x axis with a label, stacked where several share an x.
    pub marks: Vec<Mark>,
}

/// One line.
#[derive(Debug, Clone)]
pub(crate) struct Series {
    /// Legend entry; `None` keeps the series out of the legend (thin per-seed lines).
    pub label: Option<String>,
    /// Line colour.
    pub colour: Rgb,
    /// Dashed (a reference configuration) rather than solid.
    pub dashed: bool,
    /// Draw bold (a median or the only line) rather than thin.
    pub bold: bool,
    /// Mark each point with a dot.
    pub dots: bool,
    /// The points, in x order, each with its hover text.
    pub points: Vec<(f64, f64, String)>,
}

/// A marker on the x axis (a batch size that ran out of memory).
#[derive(Debug, Clone)]
pub(crate) struct Mark {
    /// Where on the x axis.
    pub x: f64,
    /// The label next to the cross.
    pub label: String,
    /// The cross's colour (its configuration's).
    pub colour: Rgb,
}

fn legend_width(c: &LineChart) -> i32 {
    let labels = c.series.iter().filter_map(|s| s.label.as_deref());
    labels.map(|l| width(l, SMALL_EM)).max().map_or(0, |w| w + SWATCH + 8 + PAD)
}

/// Width and height of the figure: the title, the plot area with its axes, and the legend.
pub(crate) fn size(c: &LineChart, form: Form) -> (u32, u32) {
    let legend_rows = legend_entries(c).count() as i32;
    match form {
        Form::Wide => {
            let height = (HEIGHT as i32).max(60 + legend_rows * LEGEND_ROW + PAD);
            let title = 2 * PAD + width(&c.title, TITLE_EM);
            ((80 + PLOT_WIDTH + legend_width(c) + PAD).max(title).max(640) as u32, height as u32)
        }
        Form::Narrow => {
            let width_px = narrow_width(c);
            let legend = (legend_layout(c, width_px).rows + c.marks.len() as i32) * LEGEND_ROW;
            (width_px as u32, (title_height(c, width_px) + NARROW_PLOT_HEIGHT + legend + PAD) as u32)
        }
    }
}

fn legend_entries(c: &LineChart) -> impl Iterator<Item = (&Series, &str)> {
    c.series.iter().filter_map(|s| s.label.as_deref().map(|l| (s, l)))
}

/// A narrow figure's width: [`NARROW_WIDTH`], or an out-of-memory label (listed under the
/// legend) where that is wider. Legend entries wrap to it.
fn narrow_width(c: &LineChart) -> i32 {
    let marks = c.marks.iter().map(|m| width(&m.label, SMALL_EM) + SWATCH + 8 + 2 * PAD);
    marks.fold(NARROW_WIDTH, i32::max)
}

/// The title's lines: one in the wide form, wrapped to the width in the narrow one.
fn title_lines(c: &LineChart, width_px: i32, form: Form) -> Vec<String> {
    match form {
        Form::Wide => vec![c.title.clone()],
        Form::Narrow => wrap(&c.title, TITLE_EM, width_px - 2 * PAD),
    }
}

fn title_height(c: &LineChart, width_px: i32) -> i32 {
    PAD + TITLE_LINE * title_lines(c, width_px, Form::Narrow).len() as i32
}

/// How the narrow legend lies in a figure `width_px` wide.
struct LegendLayout {
    /// One or two columns: two where every entry fits half the width.
    columns: i32,
    /// Legend rows, top to bottom.
    rows: i32,
    /// Each entry's label in lines: one line each in two columns; wrapped to the width (a long
    /// trick set after a `+`) in one.
    lines: Vec<Vec<String>>,
}

fn legend_layout(c: &LineChart, width_px: i32) -> LegendLayout {
    let labels: Vec<&str> = legend_entries(c).map(|(_, label)| label).collect();
    let count = labels.len() as i32;
    if legend_width(c) <= (width_px - PAD) / 2 {
        let lines = labels.iter().map(|l| vec![(*l).to_owned()]).collect();
        return LegendLayout { columns: 2, rows: (count + 1) / 2, lines };
    }
    let room = width_px - PAD - SWATCH - 8 - PAD;
    let lines: Vec<Vec<String>> = labels.iter().map(|l| wrap(l, SMALL_EM, room)).collect();
    LegendLayout { columns: 1, rows: lines.iter().map(|l| l.len() as i32).sum(), lines }
}

fn fx(c: &LineChart, x: f64) -> f64 {
    if c.x_log2 {
        x.max(f64::MIN_POSITIVE).log2()
    } else {
        x
    }
}

fn extent(values: impl Iterator<Item = f64>) -> Option<(f64, f64)> {
    let (lo, hi) = values.fold((f64::INFINITY, f64::NEG_INFINITY), |(a, b), v| (a.min(v), b.max(v)));
    lo.is_finite().then_some((lo, hi))
}

fn ranges(c: &LineChart) -> ((f64, f64), (f64, f64)) {
    let xs = c
        .series
        .iter()
        .flat_map(|s| s.points.iter().map(|p| fx(c, p.0)))
        .chain(c.marks.iter().map(|m| fx(c, m.x)));
    let (x0, data_x1) = extent(xs).unwrap_or((0.0, 1.0));
    let frame = c.x_max.map(|m| fx(c, m)).filter(|&m| m < data_x1 && m > x0);
    let x1 = frame.unwrap_or(data_x1);
    let xpad = (x1 - x0).abs().max(1.0) * 0.06;
    let ys = c.series.iter().flat_map(|s| s.points.iter().map(|p| p.1)).chain(c.target.iter().map(|t| t.0));
    let (y0, y1) = c.y_range.or_else(|| extent(ys).map(|(lo, hi)| (lo.min(0.0), hi))).unwrap_or((0.0, 1.0));
    let ypad = (y1 - y0).abs().max(1e-9) * 0.06;
    let y0 = if y0 == 0.0 { 0.0 } else { y0 - ypad };
    // A framed axis ends at its frame: the lines run on to the edge, where they are cut.
    ((x0 - xpad, frame.unwrap_or(x1 + xpad)), (y0, y1 + ypad))
}

/// Draws `c`: the plot, and its legend right of it (wide) or under it (narrow).
pub(crate) fn draw<DB: DrawingBackend>(
    root: &DrawingArea<DB, Shift>,
    c: &LineChart,
    hovers: &Hovers,
    form: Form,
) -> DrawResult<DB> {
    let (w, _) = root.dim_in_pixel();
    let lines = title_lines(c, w as i32, form);
    for (i, line) in lines.iter().enumerate() {
        text(root, line, (PAD, PAD + TITLE_LINE * i as i32), font(TITLE_EM), (HPos::Left, VPos::Top))?;
    }
    match form {
        Form::Wide => {
            let body = root.margin(36, 0, 0, 0);
            let (plot, legend) = body.split_horizontally(w as i32 - legend_width(c));
            plot_area(root, &plot, c, hovers, form)?;
            legend_column(&legend, c)
        }
        Form::Narrow => {
            let body = root.margin(title_height(c, w as i32) as u32, 0, 0, 0);
            let (plot, legend) = body.split_vertically(NARROW_PLOT_HEIGHT);
            plot_area(root, &plot, c, hovers, form)?;
            legend_rows(&legend.margin(0, 0, PAD as u32, 0), c, w as i32)
        }
    }
}

/// The axes, the target line, the series and the out-of-memory marks inside `plot`.
fn plot_area<DB: DrawingBackend>(
    root: &DrawingArea<DB, Shift>,
    plot: &DrawingArea<DB, Shift>,
    c: &LineChart,
    hovers: &Hovers,
    form: Form,
) -> DrawResult<DB> {
    let ((x0, x1), (y0, y1)) = ranges(c);
    let mut chart = ChartBuilder::on(plot)
        .margin(PAD as u32)
        .x_label_area_size(46)
        .y_label_area_size(70)
        .build_cartesian_2d(x0..x1, y0..y1)?;
    let x_fmt = |x: &f64| if c.x_log2 { format!("{}", x.exp2().round()) } else { short_number(*x) };
    let y_fmt = |y: &f64| if c.y_percent { format!("{:.0}%", y * 100.0) } else { short_number(*y) };
    chart
        .configure_mesh()
        .x_desc(c.x_label.clone())
        .y_desc(c.y_label.clone())
        .x_label_formatter(&x_fmt)
        .y_label_formatter(&y_fmt)
        .x_labels(if c.x_log2 { (x1 - x0).floor() as usize + 1 } else { 6 })
        .y_labels(6)
        .axis_desc_style(font(BODY_EM))
        .label_style(font(SMALL_EM))
        .max_light_lines(1)
        .light_line_style(GRID.mix(0.5))
        .bold_line_style(GRID)
        .draw()?;
    if let Some((y, label)) = &c.target {
        chart.draw_series(DashedLineSeries::new(vec![(x0, *y), (x1, *y)], 8, 5, WARNING.stroke_width(2)))?;
        // At the left end, where the curves are still far from the target.
        let (px, py) = chart.backend_coord(&(x0, *y));
        text(root, label, (px + 6, py - 4), font(SMALL_EM).color(&WARNING), (HPos::Left, VPos::Bottom))?;
    }
    for s in &c.series {
        series(&mut chart, c, s, hovers)?;
    }
    marks(&chart, root, c, (x0, y0), hovers, form)
}

type Chart2d<'a, DB> = ChartContext<
    'a,
    DB,
    Cartesian2d<plotters::coord::types::RangedCoordf64, plotters::coord::types::RangedCoordf64>,
>;

fn series<DB: DrawingBackend>(
    chart: &mut Chart2d<'_, DB>,
    c: &LineChart,
    s: &Series,
    hovers: &Hovers,
) -> DrawResult<DB> {
    let colour = s.colour.plotters();
    let style = if s.bold { colour.stroke_width(3) } else { colour.mix(0.45).stroke_width(1) };
    let points: Vec<(f64, f64)> = s.points.iter().map(|p| (fx(c, p.0), p.1)).collect();
    let y_range = chart.y_range();
    let x_end = chart.x_range().end;
    for run in clipped(&cut_at(&points, x_end), (y_range.start, y_range.end)) {
        if s.dashed {
            chart.draw_series(DashedLineSeries::new(run, 10, 6, style))?;
        } else {
            chart.draw_series(LineSeries::new(run, style))?;
        }
    }
    let inside = |p: &&(f64, f64)| y_range.contains(&p.1) && p.0 <= x_end;
    if s.dots {
        chart.draw_series(points.iter().filter(inside).map(|&p| Circle::new(p, 4, colour.filled())))?;
    }
    let (area_x, area_y) = chart.plotting_area().get_pixel_range();
    for (p, (_, _, hover)) in points.iter().zip(&s.points) {
        let (px, py) = chart.backend_coord(p);
        if area_x.contains(&px) && area_y.contains(&py) {
            hovers.add((px - 6, py - 6), (12, 12), hover);
        }
    }
    Ok(())
}

/// The polyline `points` (in x order) up to `x_end`, ending where it crosses `x_end`.
fn cut_at(points: &[(f64, f64)], x_end: f64) -> Vec<(f64, f64)> {
    let inside = points.iter().take_while(|p| p.0 <= x_end).count();
    let mut kept = points[..inside].to_vec();
    if let (Some(&p), Some(&q)) = (kept.last(), points.get(inside)) {
        kept.push((x_end, p.1 + (q.1 - p.1) * (x_end - p.0) / (q.0 - p.0)));
    }
    kept
}

/// The parts of the polyline `points` inside `y0..y1`, cut where a segment crosses an edge.
fn clipped(points: &[(f64, f64)], (y0, y1): (f64, f64)) -> Vec<Vec<(f64, f64)>> {
    let mut runs: Vec<Vec<(f64, f64)>> = Vec::new();
    let mut run: Vec<(f64, f64)> = Vec::new();
    let at = |p: (f64, f64), q: (f64, f64), y: f64| (p.0 + (q.0 - p.0) * (y - p.1) / (q.1 - p.1), y);
    for (i, &q) in points.iter().enumerate() {
        let inside = (y0..=y1).contains(&q.1);
        if let Some(&p) = i.checked_sub(1).and_then(|j| points.get(j)) {
            let p_inside = (y0..=y1).contains(&p.1);
            let edge = |v: f64| if v < y0 { y0 } else { y1 };
            match (p_inside, inside) {
                (true, false) => {
                    run.push(at(p, q, edge(q.1)));
                    runs.push(std::mem::take(&mut run));
                }
                (false, true) => run.push(at(p, q, edge(p.1))),
                (false, false) if (p.1 < y0) != (q.1 < y0) && (p.1 > y1) != (q.1 > y1) => {
                    runs.push(vec![at(p, q, edge(p.1)), at(p, q, edge(q.1))]);
                }
                _ => {}
            }
        }
        if inside {
            run.push(q);
        }
    }
    runs.push(run);
    runs.retain(|r| r.len() >= 2);
    runs
}

/// The out-of-memory crosses: at the x axis, stacked upwards where several share a batch size,
/// each labelled on the side with room in a wide figure (a narrow one lists them under its
/// legend).
fn marks<DB: DrawingBackend>(
    chart: &Chart2d<'_, DB>,
    plot: &DrawingArea<DB, Shift>,
    c: &LineChart,
    (_, y0): (f64, f64),
    hovers: &Hovers,
    form: Form,
) -> DrawResult<DB> {
    let (area_x, _) = chart.plotting_area().get_pixel_range();
    let centre = (area_x.start + area_x.end) / 2;
    let mut stacked: Vec<(f64, i32)> = Vec::new();
    for m in &c.marks {
        let x = fx(c, m.x);
        let level = stacked.iter().filter(|(sx, _)| (sx - x).abs() < 1e-9).count() as i32;
        stacked.push((x, level));
        let (px, py) = chart.backend_coord(&(x, y0));
        let cy = py - 14 - level * 22;
        let style = m.colour.plotters().stroke_width(3);
        plot.draw(&PathElement::new(vec![(px - 6, cy - 6), (px + 6, cy + 6)], style))?;
        plot.draw(&PathElement::new(vec![(px - 6, cy + 6), (px + 6, cy - 6)], style))?;
        if form == Form::Wide {
            let (at, anchor) =
                if px > centre { ((px - 12, cy), HPos::Right) } else { ((px + 12, cy), HPos::Left) };
            text(plot, &m.label, at, font(SMALL_EM).color(&m.colour.plotters()), (anchor, VPos::Center))?;
        }
        hovers.add((px - 8, cy - 8), (16, 16), &m.label);
    }
    Ok(())
}

fn legend_column<DB: DrawingBackend>(legend: &DrawingArea<DB, Shift>, c: &LineChart) -> DrawResult<DB> {
    for (i, (s, label)) in legend_entries(c).enumerate() {
        legend_entry(legend, s, &[label.to_owned()], (0, 20 + LEGEND_ROW * i as i32))?;
    }
    Ok(())
}

/// The narrow legend: entries in rows of two columns, top to bottom then left to right, or in one
/// column, each entry on as many rows as its label's lines.
fn legend_rows<DB: DrawingBackend>(
    legend: &DrawingArea<DB, Shift>,
    c: &LineChart,
    width_px: i32,
) -> DrawResult<DB> {
    let layout = legend_layout(c, width_px);
    let column_width = (width_px - PAD) / layout.columns;
    let mut row = 0;
    for (i, ((s, _), lines)) in legend_entries(c).zip(&layout.lines).enumerate() {
        let column = if layout.columns == 2 { i as i32 / layout.rows.max(1) } else { 0 };
        if layout.columns == 2 {
            row = i as i32 % layout.rows.max(1);
        }
        let at = (column * column_width, LEGEND_ROW / 2 + LEGEND_ROW * row);
        legend_entry(legend, s, lines, at)?;
        if layout.columns == 1 {
            row += lines.len() as i32;
        }
    }
    for (i, m) in c.marks.iter().enumerate() {
        let y = LEGEND_ROW / 2 + LEGEND_ROW * (layout.rows + i as i32);
        let colour = m.colour.plotters();
        let style = colour.stroke_width(3);
        let (cx, cy) = (SWATCH / 2 - 1, y);
        legend.draw(&PathElement::new(vec![(cx - 6, cy - 6), (cx + 6, cy + 6)], style))?;
        legend.draw(&PathElement::new(vec![(cx - 6, cy + 6), (cx + 6, cy - 6)], style))?;
        text(legend, &m.label, (SWATCH + 6, y), font(SMALL_EM).color(&colour), (HPos::Left, VPos::Center))?;
    }
    Ok(())
}

/// One legend entry: the line's swatch (dashed for a reference), centred on `y`, and its label's
/// lines, the first beside the swatch and the rest under it.
fn legend_entry<DB: DrawingBackend>(
    legend: &DrawingArea<DB, Shift>,
    s: &Series,
    lines: &[String],
    (x, y): (i32, i32),
) -> DrawResult<DB> {
    let colour = s.colour.plotters();
    if s.dashed {
        legend.draw(&PathElement::new(vec![(x, y), (x + 10, y)], colour.stroke_width(3)))?;
        legend.draw(&PathElement::new(vec![(x + 16, y), (x + SWATCH - 2, y)], colour.stroke_width(3)))?;
    } else {
        legend.draw(&PathElement::new(vec![(x, y), (x + SWATCH - 2, y)], colour.stroke_width(3)))?;
    }
    for (k, line) in lines.iter().enumerate() {
        let at = (x + SWATCH + 6, y + LEGEND_ROW * k as i32);
        text(legend, line, at, font(SMALL_EM), (HPos::Left, VPos::Center))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_are_cut_at_the_frame_not_flattened_onto_it() {
        let points = [(0.0, 4.0), (1.0, 2.0), (2.0, 1.0), (3.0, 0.5)];
        let runs = clipped(&points, (0.8, 3.0));
        assert_eq!(runs, vec![vec![(0.5, 3.0), (1.0, 2.0), (2.0, 1.0), (2.4, 0.8)]]);
        assert!(clipped(&[(0.0, 5.0), (1.0, 6.0)], (0.0, 1.0)).is_empty());
    }

    #[test]
    fn lines_end_at_the_frame_of_the_x_axis() {
        let points = [(0.0, 0.0), (10.0, 1.0), (30.0, 3.0)];
        assert_eq!(cut_at(&points, 20.0), vec![(0.0, 0.0), (10.0, 1.0), (20.0, 2.0)]);
        assert_eq!(cut_at(&points, 40.0), points.to_vec());
    }
}
