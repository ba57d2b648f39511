//! Effects as dots with their intervals on a log axis: one row per trick, one marker per engine
//! (its shape says which), a shaded noise band and a line at 1×.

use plotters::coord::Shift;
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, VPos};

use super::bars::log_ticks;
use super::{font, key_layout, short_number, text, width, wrap, DrawResult, Form, Hovers, Rgb};
use super::{BODY_EM, GRID, MUTED, SMALL_EM, TEXT, TITLE_EM};

/// The width a wide figure aims at, SVG pixels.
const WIDE_WIDTH: i32 = 1000;
/// The width of a narrow figure, SVG pixels.
const NARROW_WIDTH: i32 = 400;
/// The narrowest plot area of a wide figure.
const MIN_PLOT: i32 = 280;
const PAD: i32 = 12;
const GAP: i32 = 10;
const TITLE_LINE: i32 = 24;
const LABEL_LINE: i32 = 18;
/// The height of the dots' band of a row with one marker per row; each further series adds
/// [`SERIES_STEP`].
const ROW: i32 = 18;
const SERIES_STEP: i32 = 8;
/// The least distance between two axis tick labels, SVG pixels.
const MIN_TICK_GAP: i32 = 44;
/// The noise band's fill.
const BAND: RGBColor = RGBColor(226, 230, 234);
/// A ceiling's tick: a dark grey that no verdict colour uses.
const CEILING: RGBColor = RGBColor(73, 80, 87);
/// Half the height of a ceiling's tick, SVG pixels: twice an interval's end cap.
const CEILING_HALF: i32 = 6;
/// The legend's words for a ceiling's arrowhead at the plot's edge.
const BEYOND_KEY: &str = "ceiling beyond the axis";
/// The farthest a ceiling stretches the axis, on the value scale; a ceiling beyond the axis that
/// the markers and this reach is drawn as an arrowhead at the plot's edge.
const CEILING_REACH: f64 = 3.0;

/// Rows of effects, each with a marker per series and its interval.
#[derive(Debug, Clone)]
pub(crate) struct DotChart {
    /// Title above the plot.
    pub title: String,
    /// Label of the value axis.
    pub x_label: String,
    /// A vertical line (value, what it means), e.g. no change at 1.
    pub reference: Option<(f64, String)>,
    /// A shaded range (low, high, what it means), e.g. the noise floor.
    pub band: Option<(f64, f64, String)>,
    /// The series, each drawn in its own marker shape: the engines.
    pub series: Vec<DotSeries>,
    /// The rows, top to bottom.
    pub rows: Vec<DotRow>,
    /// What each marker colour means.
    pub key: Vec<(Rgb, String)>,
    /// What a ceiling's tick means, as the legend says it (`None`: no entry in the legend).
    pub ceiling_key: Option<String>,
    /// A line under the chart (rows left out, and why).
    pub footnote: Option<String>,
}

/// A series of markers.
#[derive(Debug, Clone)]
pub(crate) struct DotSeries {
    /// Its name in the legend.
    pub name: String,
    /// Its marker.
    pub shape: Shape,
}

/// A marker's shape.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Shape {
    /// A filled circle.
    Circle,
    /// A filled diamond.
    Diamond,
}

/// One row: a label, its markers, and a note right of the plot.
#[derive(Debug, Clone)]
pub(crate) struct DotRow {
    /// Label left of the plot (above it in a narrow figure).
    pub label: String,
    /// Text right of the plot: the values.
    pub note: String,
    /// The markers, at most one per series.
    pub dots: Vec<Dot>,
}

/// One marker.
#[derive(Debug, Clone)]
pub(crate) struct Dot {
    /// Index of its series.
    pub series: usize,
    /// Where it stands.
    pub value: f64,
    /// Its interval, drawn as a line through it.
    pub ci: Option<(f64, f64)>,
    /// Its colour.
    pub colour: Rgb,
    /// What hovering over it (and over its ceiling) shows.
    pub hover: String,
    /// The most its effect could be, on the value axis, drawn as a tick at its series' height
    /// (`None`: no tick).
    pub ceiling: Option<f64>,
}

impl Dot {
    fn low(&self) -> f64 {
        self.ci.map_or(self.value, |c| c.0).min(self.value)
    }

    fn high(&self) -> f64 {
        self.ci.map_or(self.value, |c| c.1).max(self.value)
    }

    /// The ceiling, where it is a positive, finite value.
    fn drawn_ceiling(&self) -> Option<f64> {
        self.ceiling.filter(|v| *v > 0.0 && v.is_finite())
    }
}

/// Where a ceiling is drawn, in SVG pixels: never outside the plot.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum CeilingMark {
    /// A tick at this x, on the axis.
    Tick(i32),
    /// An arrowhead pointing right at the plot's right edge (this x): the ceiling lies beyond the
    /// axis.
    Beyond(i32),
    /// An arrowhead pointing left at the plot's left edge (this x): the ceiling lies below the
    /// axis.
    Below(i32),
}

impl CeilingMark {
    /// Where the mark touches its value or its edge, SVG pixels.
    fn x(self) -> i32 {
        match self {
            CeilingMark::Tick(x) | CeilingMark::Beyond(x) | CeilingMark::Below(x) => x,
        }
    }
}

/// Where everything of a dot chart goes, in SVG pixels.
pub(crate) struct Layout {
    form: Form,
    width: i32,
    title: Vec<String>,
    plot_left: i32,
    plot_width: i32,
    plot_top: i32,
    lo: f64,
    hi: f64,
    /// Each row's heading lines in a narrow figure (label and note); empty in a wide one.
    headings: Vec<Vec<String>>,
    rows: usize,
    series: i32,
    x_label: Vec<String>,
    legend: Vec<Vec<Legend>>,
    footnote: Vec<String>,
}

/// One entry of the legend.
#[derive(Debug, Clone)]
enum Legend {
    Series(usize),
    Band,
    Colour(usize),
    Ceiling,
    Beyond,
}

impl Layout {
    /// The layout of `c`: wide, a label column left of the plot and a note column right of it;
    /// narrow, each row's label and note on lines above its markers.
    pub(crate) fn of(c: &DotChart, form: Form) -> Layout {
        let (lo, hi) = range(c);
        let note_w = c.rows.iter().map(|r| width(&r.note, SMALL_EM)).max().unwrap_or(0);
        let label_w = c.rows.iter().map(|r| width(&r.label, BODY_EM)).max().unwrap_or(0);
        let (plot_left, plot_width, mut width_px) = match form {
            Form::Wide => {
                let left = PAD + label_w + GAP;
                let plot = (WIDE_WIDTH - left - GAP - note_w - PAD).max(MIN_PLOT);
                (left, plot, left + plot + GAP + note_w + PAD)
            }
            Form::Narrow => (PAD + 16, NARROW_WIDTH - 2 * PAD - 32, NARROW_WIDTH),
        };
        let title = match form {
            Form::Wide => {
                width_px = width_px.max(2 * PAD + width(&c.title, TITLE_EM));
                vec![c.title.clone()]
            }
            Form::Narrow => wrap(&c.title, TITLE_EM, width_px - 2 * PAD),
        };
        let headings = match form {
            Form::Wide => Vec::new(),
            Form::Narrow => c
                .rows
                .iter()
                .map(|r| wrap(&format!("{} — {}", r.label, r.note), SMALL_EM, width_px - 2 * PAD))
                .collect(),
        };
        let series = c.series.len().max(1) as i32;
        let beyond =
            c.rows.iter().flat_map(|r| &r.dots).filter_map(Dot::drawn_ceiling).any(|v| v < lo || v > hi);
        let legend = legend_rows(c, beyond, width_px - 2 * PAD);
        let x_label = wrap(&c.x_label, BODY_EM, width_px - 2 * PAD);
        let footnote = c.footnote.as_deref().map_or_else(Vec::new, |f| wrap(f, SMALL_EM, width_px - 2 * PAD));
        let plot_top = PAD + TITLE_LINE * title.len() as i32 + 8;
        Layout {
            form,
            width: width_px,
            title,
            plot_left,
            plot_width,
            plot_top,
            lo,
            hi,
            headings,
            rows: c.rows.len(),
            series,
            x_label,
            legend,
            footnote,
        }
    }

    /// Width and height of the figure.
    pub(crate) fn size(&self) -> (u32, u32) {
        let bottom = self.footnote_top() + 18 * self.footnote.len() as i32 + PAD;
        (self.width as u32, bottom as u32)
    }

    fn dots_height(&self) -> i32 {
        ROW + SERIES_STEP * (self.series - 1)
    }

    fn heading_height(&self, i: usize) -> i32 {
        self.headings.get(i).map_or(0, |h| LABEL_LINE * h.len() as i32)
    }

    fn row_height(&self, i: usize) -> i32 {
        self.heading_height(i) + self.dots_height()
    }

    /// The top of row `i` (`i` = the number of rows: the plot's bottom).
    fn row_top(&self, i: usize) -> i32 {
        self.plot_top + (0..i).map(|k| self.row_height(k)).sum::<i32>()
    }

    fn plot_bottom(&self) -> i32 {
        self.row_top(self.rows.max(1))
    }

    /// The vertical spans that the band, the grid and the reference line cross: the whole plot
    /// in a wide figure; in a narrow one each row's markers, so that no line runs through text.
    fn spans(&self) -> Vec<(i32, i32)> {
        match self.form {
            Form::Wide => vec![(self.plot_top, self.plot_bottom())],
            Form::Narrow => (0..self.rows.max(1))
                .map(|i| (self.row_top(i) + self.heading_height(i), self.row_top(i) + self.row_height(i)))
                .collect(),
        }
    }

    /// The vertical centre of series `s`'s marker in row `i`.
    fn y(&self, i: usize, s: usize) -> i32 {
        let top = self.row_top(i) + self.heading_height(i);
        top + ROW / 2 + SERIES_STEP * s as i32
    }

    fn legend_top(&self) -> i32 {
        self.plot_bottom() + 30 + 22 * self.x_label.len() as i32
    }

    fn footnote_top(&self) -> i32 {
        self.legend_top() + 22 * self.legend.len() as i32 + 4
    }

    /// The x pixel of value `v`.
    fn x(&self, v: f64) -> i32 {
        let f = (v.max(f64::MIN_POSITIVE).ln() - self.lo.ln()) / (self.hi.ln() - self.lo.ln());
        self.plot_left + (f * f64::from(self.plot_width)).round() as i32
    }

    /// Where ceiling `v` is drawn: a tick where it lies on the axis, else an arrowhead at the
    /// edge it lies beyond.
    fn ceiling_mark(&self, v: f64) -> CeilingMark {
        if v > self.hi {
            CeilingMark::Beyond(self.plot_left + self.plot_width)
        } else if v < self.lo {
            CeilingMark::Below(self.plot_left)
        } else {
            CeilingMark::Tick(self.x(v))
        }
    }

    /// The axis ticks, thinned so that no two labels lie closer than [`MIN_TICK_GAP`].
    fn ticks(&self) -> Vec<f64> {
        let mut kept: Vec<f64> = Vec::new();
        for tick in log_ticks(self.lo, self.hi) {
            if kept.last().is_none_or(|&previous| self.x(tick) - self.x(previous) >= MIN_TICK_GAP) {
                kept.push(tick);
            }
        }
        kept
    }
}

/// The legend in rows no wider than `max_px`: the series' markers, the band, the colours, the
/// ceiling's tick and, where a ceiling lies `beyond` the axis, its arrowhead.
fn legend_rows(c: &DotChart, beyond: bool, max_px: i32) -> Vec<Vec<Legend>> {
    let mut entries: Vec<(Legend, i32)> =
        c.series.iter().enumerate().map(|(i, s)| (Legend::Series(i), width(&s.name, SMALL_EM))).collect();
    if let Some((_, _, label)) = &c.band {
        entries.push((Legend::Band, width(label, SMALL_EM)));
    }
    entries
        .extend(c.key.iter().enumerate().map(|(i, (_, label))| (Legend::Colour(i), width(label, SMALL_EM))));
    if let Some(label) = &c.ceiling_key {
        entries.push((Legend::Ceiling, width(label, SMALL_EM)));
    }
    if beyond {
        entries.push((Legend::Beyond, width(BEYOND_KEY, SMALL_EM)));
    }
    key_layout(entries, max_px)
}

/// The value range: every marker, interval, the band, the reference and the ceilings (each taken
/// no farther than [`CEILING_REACH`]), padded by 5% of the log range.
fn range(c: &DotChart) -> (f64, f64) {
    let dots = c.rows.iter().flat_map(|r| &r.dots);
    let ceilings = dots.clone().filter_map(Dot::drawn_ceiling).map(|v| v.min(CEILING_REACH));
    let band = c.band.iter().flat_map(|b| [b.0, b.1]);
    let values = dots
        .flat_map(|d| [d.low(), d.high()])
        .chain(ceilings)
        .chain(band)
        .chain(c.reference.iter().map(|r| r.0))
        .filter(|v| *v > 0.0 && v.is_finite());
    let (lo, hi) = values.fold((f64::INFINITY, f64::NEG_INFINITY), |(a, b), v| (a.min(v), b.max(v)));
    if !lo.is_finite() {
        return (0.5, 2.0);
    }
    let (a, b) = (lo.ln(), hi.ln().max(lo.ln() + 0.1));
    let pad = (b - a) * 0.05;
    (f64::exp(a - pad), f64::exp(b + pad))
}

/// Draws `c` with its layout.
pub(crate) fn draw<DB: DrawingBackend>(
    root: &DrawingArea<DB, Shift>,
    c: &DotChart,
    hovers: &Hovers,
    form: Form,
) -> DrawResult<DB> {
    let l = Layout::of(c, form);
    for (i, line) in l.title.iter().enumerate() {
        text(root, line, (PAD, PAD + TITLE_LINE * i as i32), font(TITLE_EM), (HPos::Left, VPos::Top))?;
    }
    let bottom = l.plot_bottom();
    for (top, end) in l.spans() {
        if let Some((low, high, _)) = &c.band {
            let (a, b) = (l.x(*low), l.x(*high).max(l.x(*low) + 1));
            root.draw(&Rectangle::new([(a, top), (b, end)], BAND.filled()))?;
        }
        for v in l.ticks() {
            root.draw(&PathElement::new(vec![(l.x(v), top), (l.x(v), end)], GRID.stroke_width(1)))?;
        }
        if let Some((value, _)) = &c.reference {
            let px = l.x(*value);
            root.draw(&PathElement::new(vec![(px, top), (px, end)], MUTED.stroke_width(2)))?;
        }
    }
    let height = bottom - l.plot_top;
    if let Some((low, high, label)) = &c.band {
        let (a, b) = (l.x(*low), l.x(*high).max(l.x(*low) + 1));
        hovers.add((a, l.plot_top), (b - a, height), label);
    }
    if let Some((value, label)) = &c.reference {
        hovers.add((l.x(*value) - 2, l.plot_top), (4, height), label);
    }
    axis(root, &l, bottom)?;
    for (i, row) in c.rows.iter().enumerate() {
        draw_row(root, c, row, &l, i, hovers)?;
    }
    legend(root, c, &l)?;
    for (i, line) in l.footnote.iter().enumerate() {
        let y = l.footnote_top() + 18 * i as i32;
        text(root, line, (PAD, y), font(SMALL_EM).color(&MUTED), (HPos::Left, VPos::Top))?;
    }
    Ok(())
}

fn axis<DB: DrawingBackend>(root: &DrawingArea<DB, Shift>, l: &Layout, bottom: i32) -> DrawResult<DB> {
    for v in l.ticks() {
        let px = l.x(v);
        let label = format!("{}×", short_number(v));
        text(root, &label, (px, bottom + 5), font(SMALL_EM).color(&MUTED), (HPos::Center, VPos::Top))?;
    }
    let right = l.plot_left + l.plot_width;
    root.draw(&PathElement::new(vec![(l.plot_left, bottom), (right, bottom)], MUTED.stroke_width(1)))?;
    for (i, line) in l.x_label.iter().enumerate() {
        let half = width(line, BODY_EM) / 2;
        let centre =
            (l.plot_left + l.plot_width / 2).clamp(PAD + half, (l.width - PAD - half).max(PAD + half));
        text(root, line, (centre, bottom + 26 + 22 * i as i32), font(BODY_EM), (HPos::Center, VPos::Top))?;
    }
    Ok(())
}

fn draw_row<DB: DrawingBackend>(
    root: &DrawingArea<DB, Shift>,
    c: &DotChart,
    row: &DotRow,
    l: &Layout,
    i: usize,
    hovers: &Hovers,
) -> DrawResult<DB> {
    let top = l.row_top(i);
    if i > 0 {
        root.draw(&PathElement::new(vec![(PAD, top), (l.width - PAD, top)], GRID.stroke_width(1)))?;
    }
    let centre = l.y(i, 0) + SERIES_STEP * (l.series - 1) / 2;
    match l.form {
        Form::Wide => {
            text(root, &row.label, (l.plot_left - GAP, centre), font(BODY_EM), (HPos::Right, VPos::Center))?;
            let at = (l.plot_left + l.plot_width + GAP, centre);
            text(root, &row.note, at, font(SMALL_EM), (HPos::Left, VPos::Center))?;
        }
        Form::Narrow => {
            for (k, line) in l.headings[i].iter().enumerate() {
                let at = (PAD, top + 2 + LABEL_LINE * k as i32);
                text(root, line, at, font(SMALL_EM), (HPos::Left, VPos::Top))?;
            }
        }
    }
    hovers.add((PAD, top), (l.plot_left - PAD, l.row_height(i)), &format!("{}: {}", row.label, row.note));
    for dot in &row.dots {
        let shape = c.series.get(dot.series).map_or(Shape::Circle, |s| s.shape);
        draw_dot(root, dot, (l.y(i, dot.series), shape), l, hovers)?;
    }
    Ok(())
}

fn draw_dot<DB: DrawingBackend>(
    root: &DrawingArea<DB, Shift>,
    dot: &Dot,
    (y, shape): (i32, Shape),
    l: &Layout,
    hovers: &Hovers,
) -> DrawResult<DB> {
    let colour = dot.colour.plotters();
    let (low, high) = (l.x(dot.low()), l.x(dot.high()));
    if high > low {
        root.draw(&PathElement::new(vec![(low, y), (high, y)], colour.stroke_width(2)))?;
        for end in [low, high] {
            root.draw(&PathElement::new(vec![(end, y - 3), (end, y + 3)], colour.stroke_width(2)))?;
        }
    }
    let x = l.x(dot.value);
    marker(root, (x, y), shape, colour)?;
    hovers.add((low.min(x) - 6, y - 6), ((high.max(x) - low.min(x)) + 12, 12), &dot.hover);
    if let Some(v) = dot.drawn_ceiling() {
        let mark = l.ceiling_mark(v);
        ceiling(root, mark, y)?;
        hovers.add((mark.x() - 4, y - CEILING_HALF), (8, 2 * CEILING_HALF), &dot.hover);
    }
    Ok(())
}

/// Draws ceiling `mark` at height `y`: a vertical tick, or an arrowhead inside the plot's edge.
fn ceiling<DB: DrawingBackend>(root: &DrawingArea<DB, Shift>, mark: CeilingMark, y: i32) -> DrawResult<DB> {
    let h = CEILING_HALF;
    let points = match mark {
        CeilingMark::Tick(x) => {
            return root.draw(&PathElement::new(vec![(x, y - h), (x, y + h)], CEILING.stroke_width(2)));
        }
        CeilingMark::Beyond(x) => vec![(x - h - 2, y - h), (x, y), (x - h - 2, y + h)],
        CeilingMark::Below(x) => vec![(x + h + 2, y - h), (x, y), (x + h + 2, y + h)],
    };
    root.draw(&Polygon::new(points, CEILING.filled()))
}

fn marker<DB: DrawingBackend>(
    root: &DrawingArea<DB, Shift>,
    (x, y): (i32, i32),
    shape: Shape,
    colour: RGBColor,
) -> DrawResult<DB> {
    match shape {
        Shape::Circle => {
            root.draw(&Circle::new((x, y), 4, colour.filled()))?;
            root.draw(&Circle::new((x, y), 4, TEXT.stroke_width(1)))
        }
        Shape::Diamond => {
            let points = vec![(x, y - 5), (x + 5, y), (x, y + 5), (x - 5, y)];
            root.draw(&Polygon::new(points.clone(), colour.filled()))?;
            let mut outline = points;
            outline.push((x, y - 5));
            root.draw(&PathElement::new(outline, TEXT.stroke_width(1)))
        }
    }
}

fn legend<DB: DrawingBackend>(root: &DrawingArea<DB, Shift>, c: &DotChart, l: &Layout) -> DrawResult<DB> {
    for (r, entries) in l.legend.iter().enumerate() {
        let (mut x, y) = (PAD, l.legend_top() + 8 + 22 * r as i32);
        for entry in entries {
            let label = match entry {
                Legend::Series(i) => {
                    marker(root, (x + 6, y), c.series[*i].shape, RGBColor(255, 255, 255))?;
                    &c.series[*i].name
                }
                Legend::Band => {
                    root.draw(&Rectangle::new([(x, y - 6), (x + 12, y + 6)], BAND.filled()))?;
                    &c.band.as_ref().expect("a band entry has a band").2
                }
                Legend::Colour(i) => {
                    let (colour, label) = &c.key[*i];
                    root.draw(&Rectangle::new([(x, y - 6), (x + 12, y + 6)], colour.plotters().filled()))?;
                    label
                }
                Legend::Ceiling => {
                    ceiling(root, CeilingMark::Tick(x + 6), y)?;
                    c.ceiling_key.as_ref().expect("a ceiling entry has its key")
                }
                Legend::Beyond => {
                    ceiling(root, CeilingMark::Beyond(x + 12), y)?;
                    BEYOND_KEY
                }
            };
            text(root, label, (x + 18, y), font(SMALL_EM), (HPos::Left, VPos::Center))?;
            x += 18 + width(label, SMALL_EM) + 18;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn chart(notes: &[&str]) -> DotChart {
        let row = |i: usize, note: &str| DotRow {
            label: format!("trick-{i}"),
            note: note.to_owned(),
            dots: (0..2)
                .map(|series| Dot {
                    series,
                    value: 1.0 + i as f64,
                    ci: Some((0.9 + i as f64, 1.1 + i as f64)),
                    colour: Rgb(0, 0, 0),
                    hover: String::new(),
                    ceiling: None,
                })
                .collect(),
        };
        DotChart {
            title: "Each trick's effect — resnet8 · cpu on vm · quick profile".to_owned(),
            x_label: "× better on the trick's own metric, log (right of 1×: better)".to_owned(),
            reference: Some((1.0, "1×".to_owned())),
            band: Some((0.97, 1.03, "noise floor (A/A), ±3.0%".to_owned())),
            series: vec![
                DotSeries { name: "eager PyTorch".to_owned(), shape: Shape::Circle },
                DotSeries { name: "libtorch".to_owned(), shape: Shape::Diamond },
            ],
            rows: notes.iter().enumerate().map(|(i, n)| row(i, n)).collect(),
            key: vec![(Rgb(0, 114, 178), "helps".to_owned())],
            ceiling_key: None,
            footnote: Some("No marker — inconclusive: lars, lamb.".to_owned()),
        }
    }

    #[test]
    fn every_marker_lies_inside_the_plot_and_every_note_right_of_it() {
        let c = chart(&["1.00× · 1.01×", "2.00× · 2.10×", "0.27× · 0.27× memory"]);
        let l = Layout::of(&c, Form::Wide);
        let right = l.plot_left + l.plot_width;
        for dot in c.rows.iter().flat_map(|r| &r.dots) {
            assert!((l.plot_left..=right).contains(&l.x(dot.low())));
            assert!((l.plot_left..=right).contains(&l.x(dot.high())));
        }
        let widest_note = c.rows.iter().map(|r| width(&r.note, SMALL_EM)).max().unwrap();
        assert!(right + GAP + widest_note <= l.width - PAD + 1, "notes end inside the figure");
        assert!(l.x(0.97) < l.x(1.0) && l.x(1.0) < l.x(1.03), "the band is around 1×");
    }

    #[test]
    fn a_narrow_figure_keeps_its_width_and_puts_each_note_above_its_markers() {
        let c =
            chart(&["1.00× · 1.01×", "a long note that has to wrap onto a second line in a phone's column"]);
        let l = Layout::of(&c, Form::Narrow);
        assert_eq!(l.size().0, NARROW_WIDTH as u32);
        assert!(l.headings[1].len() >= 2, "{:?}", l.headings[1]);
        assert!(l.headings.iter().flatten().all(|line| width(line, SMALL_EM) <= NARROW_WIDTH - 2 * PAD));
        let (top, bottom) = l.spans()[1];
        assert_eq!(top, l.row_top(1) + l.heading_height(1), "no line crosses the heading");
        assert!(bottom > top);
    }

    #[test]
    fn a_ceiling_is_a_tick_on_the_axis_or_an_arrowhead_at_the_edge_it_lies_beyond() {
        let bare = Layout::of(&chart(&["1.00× · 1.01×", "2.00× · 2.10×"]), Form::Wide);
        assert!(bare.hi < 2.5);
        let mut c = chart(&["1.00× · 1.01×", "2.00× · 2.10×"]);
        c.rows[0].dots[0].ceiling = Some(2.5);
        c.rows[0].dots[1].ceiling = Some(1.04);
        c.rows[1].dots[1].ceiling = Some(50.0);
        c.rows[1].dots[1].hover = "trick-1 on libtorch: ceiling at most 50.00×".to_owned();
        c.ceiling_key = Some("ceiling: the most it could give".to_owned());
        let l = Layout::of(&c, Form::Wide);
        assert!(l.hi >= 2.5 && l.hi < CEILING_REACH * 1.2, "{}", l.hi);
        let (left, right) = (l.plot_left, l.plot_left + l.plot_width);
        for v in [2.5, 1.04] {
            assert!(matches!(l.ceiling_mark(v), CeilingMark::Tick(x) if (left..=right).contains(&x)));
        }
        assert_eq!(l.ceiling_mark(50.0), CeilingMark::Beyond(right));
        assert_eq!(l.ceiling_mark(l.lo / 2.0), CeilingMark::Below(left));
        assert!(l.legend.iter().flatten().any(|e| matches!(e, Legend::Ceiling)));
        assert!(l.legend.iter().flatten().any(|e| matches!(e, Legend::Beyond)));
        assert!(!bare.legend.iter().flatten().any(|e| matches!(e, Legend::Ceiling | Legend::Beyond)));
        let svg = super::super::render_svg(&super::super::Chart::Dots(c), Form::Narrow).unwrap();
        assert!(svg.contains("ceiling: the most it could give"), "the legend names the tick");
        assert_eq!(svg.matches("ceiling at most 50.00×").count(), 2, "the dot and its ceiling hover");
    }
}
