//! Line charts: time-to-accuracy curves and batch sweeps, with the legend right of the data.

use plotters::coord::Shift;
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, VPos};

use super::{font, short_number, text, width, DrawResult, Hovers, Rgb};
use super::{BODY_EM, GRID, SMALL_EM, TITLE_EM, WARNING};

const PLOT_WIDTH: i32 = 420;
const HEIGHT: u32 = 440;
const PAD: i32 = 12;
const SWATCH: i32 = 28;
const LEGEND_ROW: i32 = 20;

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

/// Width and height of the figure: the plot area, axes and the legend column.
pub(crate) fn size(c: &LineChart) -> (u32, u32) {
    let legend_rows = c.series.iter().filter(|s| s.label.is_some()).count() as i32;
    let height = (HEIGHT as i32).max(60 + legend_rows * LEGEND_ROW + PAD);
    let title = 2 * PAD + width(&c.title, TITLE_EM);
    ((80 + PLOT_WIDTH + legend_width(c) + PAD).max(title).max(640) as u32, height as u32)
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
    let (x0, x1) = extent(xs).unwrap_or((0.0, 1.0));
    let xpad = (x1 - x0).abs().max(1.0) * 0.06;
    let ys = c.series.iter().flat_map(|s| s.points.iter().map(|p| p.1)).chain(c.target.iter().map(|t| t.0));
    let (y0, y1) = c.y_range.or_else(|| extent(ys).map(|(lo, hi)| (lo.min(0.0), hi))).unwrap_or((0.0, 1.0));
    let ypad = (y1 - y0).abs().max(1e-9) * 0.06;
    let y0 = if y0 == 0.0 { 0.0 } else { y0 - ypad };
    ((x0 - xpad, x1 + xpad), (y0, y1 + ypad))
}

/// Draws `c`: the plot on the left, its legend in a column on the right.
pub(crate) fn draw<DB: DrawingBackend>(
    root: &DrawingArea<DB, Shift>,
    c: &LineChart,
    hovers: &Hovers,
) -> DrawResult<DB> {
    let (w, _) = root.dim_in_pixel();
    text(root, &c.title, (PAD, PAD), font(TITLE_EM), (HPos::Left, VPos::Top))?;
    let body = root.margin(36, 0, 0, 0);
    let (plot, legend) = body.split_horizontally(w as i32 - legend_width(c));
    let ((x0, x1), (y0, y1)) = ranges(c);
    let mut chart = ChartBuilder::on(&plot)
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
    marks(&chart, root, c, (x0, y0), hovers)?;
    legend_column(&legend, c)
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
    for run in clipped(&points, (y_range.start, y_range.end)) {
        if s.dashed {
            chart.draw_series(DashedLineSeries::new(run, 10, 6, style))?;
        } else {
            chart.draw_series(LineSeries::new(run, style))?;
        }
    }
    let inside = |p: &&(f64, f64)| y_range.contains(&p.1);
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
/// each labelled on the side with room.
fn marks<DB: DrawingBackend>(
    chart: &Chart2d<'_, DB>,
    plot: &DrawingArea<DB, Shift>,
    c: &LineChart,
    (_, y0): (f64, f64),
    hovers: &Hovers,
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
        let (at, anchor) =
            if px > centre { ((px - 12, cy), HPos::Right) } else { ((px + 12, cy), HPos::Left) };
        text(plot, &m.label, at, font(SMALL_EM).color(&m.colour.plotters()), (anchor, VPos::Center))?;
        hovers.add((px - 8, cy - 8), (16, 16), &m.label);
    }
    Ok(())
}

fn legend_column<DB: DrawingBackend>(legend: &DrawingArea<DB, Shift>, c: &LineChart) -> DrawResult<DB> {
    let mut y = 20;
    for s in c.series.iter().filter(|s| s.label.is_some()) {
        let colour = s.colour.plotters();
        if s.dashed {
            legend.draw(&PathElement::new(vec![(0, y), (10, y)], colour.stroke_width(3)))?;
            legend.draw(&PathElement::new(vec![(16, y), (SWATCH - 2, y)], colour.stroke_width(3)))?;
        } else {
            legend.draw(&PathElement::new(vec![(0, y), (SWATCH - 2, y)], colour.stroke_width(3)))?;
        }
        let label = s.label.as_deref().unwrap_or_default();
        text(legend, label, (SWATCH + 6, y), font(SMALL_EM), (HPos::Left, VPos::Center))?;
        y += LEGEND_ROW;
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
}
