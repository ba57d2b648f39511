//! Effects as dots with their intervals on a log axis: one row per trick, one marker per series
//! (an engine, whose shape says which; in a comparison a machine's engine, whose colour says which
//! machine), shaded noise bands and a line at 1×.

use plotters::coord::Shift;
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, VPos};

use super::bars::log_ticks;
use super::frame::{Frame, PAD, TITLE_LINE};
use super::{font, key_layout, short_number, text, width, wrap, DrawResult, Form, Hovers, Rgb};
use super::{BODY_EM, GRID, MUTED, SMALL_EM, TEXT, TITLE_EM};

/// The width a wide figure aims at, SVG pixels.
const WIDE_WIDTH: i32 = 1000;
/// The width of a narrow figure, SVG pixels.
const NARROW_WIDTH: i32 = 400;
/// The narrowest plot area of a wide figure.
const MIN_PLOT: i32 = 280;
const GAP: i32 = 10;
const LABEL_LINE: i32 = 18;
/// The height of the dots' band of a row with one marker per row; each further series adds
/// [`SERIES_STEP`].
const ROW: i32 = 18;
const SERIES_STEP: i32 = 8;
/// The least distance between two axis tick labels, SVG pixels.
const MIN_TICK_GAP: i32 = 44;
/// The fill of a noise band behind every series.
pub(crate) const NOISE_BAND: Rgb = Rgb(226, 230, 234);
/// The fill of a series' marker in the legend, which names its shape: a grey no machine, engine or
/// verdict uses, and no hollow marker has.
const LEGEND_MARKER: RGBColor = RGBColor(134, 142, 150);
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
    /// Shaded ranges, e.g. the noise floor, or each machine's.
    pub bands: Vec<Band>,
    /// The series, each on its own line of a row, drawn in its marker shape; the legend names
    /// each shape once.
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

/// A shaded range of the value axis.
#[derive(Debug, Clone)]
pub(crate) struct Band {
    /// Its low end, on the value axis.
    pub low: f64,
    /// Its high end, on the value axis.
    pub high: f64,
    /// What it means, as the legend says it.
    pub label: String,
    /// Its fill.
    pub fill: Rgb,
    /// The first and last series whose lines of each row it lies behind (`None`: the plot's
    /// whole height).
    pub series: Option<(usize, usize)>,
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
    /// Whether it is drawn as an outline: an effect the measurement cannot tell from none.
    pub hollow: bool,
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
    /// The title, the plot area and the log value axis.
    frame: Frame,
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
    Band(usize),
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
            frame: Frame { form, width: width_px, title, plot_left, plot_width, plot_top, lo, hi, log: true },
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
        (self.frame.width as u32, bottom as u32)
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
        self.frame.plot_top + (0..i).map(|k| self.row_height(k)).sum::<i32>()
    }

    fn plot_bottom(&self) -> i32 {
        self.row_top(self.rows.max(1))
    }

    /// The vertical spans that the band, the grid and the reference line cross: the whole plot
    /// in a wide figure; in a narrow one each row's markers, so that no line runs through text.
    fn spans(&self) -> Vec<(i32, i32)> {
        match self.frame.form {
            Form::Wide => vec![(self.frame.plot_top, self.plot_bottom())],
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

    /// Where ceiling `v` is drawn: a tick where it lies on the axis, else an arrowhead at the
    /// edge it lies beyond.
    fn ceiling_mark(&self, v: f64) -> CeilingMark {
        if v > self.frame.hi {
            CeilingMark::Beyond(self.frame.plot_left + self.frame.plot_width)
        } else if v < self.frame.lo {
            CeilingMark::Below(self.frame.plot_left)
        } else {
            CeilingMark::Tick(self.frame.x(v))
        }
    }

    /// The axis ticks, thinned so that no two labels lie closer than [`MIN_TICK_GAP`].
    fn ticks(&self) -> Vec<f64> {
        let mut kept: Vec<f64> = Vec::new();
        for tick in log_ticks(self.frame.lo, self.frame.hi) {
            if kept.last().is_none_or(|&previous| self.frame.x(tick) - self.frame.x(previous) >= MIN_TICK_GAP)
            {
                kept.push(tick);
            }
        }
        kept
    }
}

/// The legend in rows no wider than `max_px`: the series' markers, the band, the colours, the
/// ceiling's tick and, where a ceiling lies `beyond` the axis, its arrowhead.
fn legend_rows(c: &DotChart, beyond: bool, max_px: i32) -> Vec<Vec<Legend>> {
    let named_before = |i: usize| c.series[..i].iter().any(|s| s.name == c.series[i].name);
    let mut entries: Vec<(Legend, i32)> = (0..c.series.len())
        .filter(|i| !named_before(*i))
        .map(|i| (Legend::Series(i), width(&c.series[i].name, SMALL_EM)))
        .collect();
    entries.extend(c.bands.iter().enumerate().map(|(i, b)| (Legend::Band(i), width(&b.label, SMALL_EM))));
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
    let band = c.bands.iter().flat_map(|b| [b.low, b.high]);
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
    l.frame.draw_title(root)?;
    let bottom = l.plot_bottom();
    for band in &c.bands {
        let (a, b) = (l.frame.x(band.low), l.frame.x(band.high).max(l.frame.x(band.low) + 1));
        for (top, end) in band_spans(&l, band) {
            root.draw(&Rectangle::new([(a, top), (b, end)], band.fill.plotters().filled()))?;
        }
        // One hover per band behind every series, one per row for a band behind some, in
        // either form.
        let hovered = match band.series {
            None => vec![(l.frame.plot_top, bottom)],
            Some(_) => band_spans(&l, band),
        };
        for (top, end) in hovered {
            hovers.add((a, top), (b - a, end - top), &band.label);
        }
    }
    for (top, end) in l.spans() {
        for v in l.ticks() {
            root.draw(&PathElement::new(
                vec![(l.frame.x(v), top), (l.frame.x(v), end)],
                GRID.stroke_width(1),
            ))?;
        }
        if let Some((value, _)) = &c.reference {
            let px = l.frame.x(*value);
            root.draw(&PathElement::new(vec![(px, top), (px, end)], MUTED.stroke_width(2)))?;
        }
    }
    let height = bottom - l.frame.plot_top;
    if let Some((value, label)) = &c.reference {
        hovers.add((l.frame.x(*value) - 2, l.frame.plot_top), (4, height), label);
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

/// The vertical spans `band` shades: the plot's (as [`Layout::spans`]) for a band behind every
/// series, else the lines of its series in each row.
fn band_spans(l: &Layout, band: &Band) -> Vec<(i32, i32)> {
    match band.series {
        None => l.spans(),
        Some((first, last)) => (0..l.rows)
            .map(|i| (l.y(i, first) - SERIES_STEP / 2 - 1, l.y(i, last) + SERIES_STEP / 2 + 1))
            .collect(),
    }
}

fn axis<DB: DrawingBackend>(root: &DrawingArea<DB, Shift>, l: &Layout, bottom: i32) -> DrawResult<DB> {
    for v in l.ticks() {
        let px = l.frame.x(v);
        let label = format!("{}×", short_number(v));
        text(root, &label, (px, bottom + 5), font(SMALL_EM).color(&MUTED), (HPos::Center, VPos::Top))?;
    }
    let right = l.frame.plot_left + l.frame.plot_width;
    root.draw(&PathElement::new(vec![(l.frame.plot_left, bottom), (right, bottom)], MUTED.stroke_width(1)))?;
    for (i, line) in l.x_label.iter().enumerate() {
        let half = width(line, BODY_EM) / 2;
        let centre = (l.frame.plot_left + l.frame.plot_width / 2)
            .clamp(PAD + half, (l.frame.width - PAD - half).max(PAD + half));
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
        root.draw(&PathElement::new(vec![(PAD, top), (l.frame.width - PAD, top)], GRID.stroke_width(1)))?;
    }
    let centre = l.y(i, 0) + SERIES_STEP * (l.series - 1) / 2;
    match l.frame.form {
        Form::Wide => {
            text(
                root,
                &row.label,
                (l.frame.plot_left - GAP, centre),
                font(BODY_EM),
                (HPos::Right, VPos::Center),
            )?;
            let at = (l.frame.plot_left + l.frame.plot_width + GAP, centre);
            text(root, &row.note, at, font(SMALL_EM), (HPos::Left, VPos::Center))?;
        }
        Form::Narrow => {
            for (k, line) in l.headings[i].iter().enumerate() {
                let at = (PAD, top + 2 + LABEL_LINE * k as i32);
                text(root, line, at, font(SMALL_EM), (HPos::Left, VPos::Top))?;
            }
        }
    }
    hovers.add(
        (PAD, top),
        (l.frame.plot_left - PAD, l.row_height(i)),
        &format!("{}: {}", row.label, row.note),
    );
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
    let (low, high) = (l.frame.x(dot.low()), l.frame.x(dot.high()));
    if high > low {
        root.draw(&PathElement::new(vec![(low, y), (high, y)], colour.stroke_width(2)))?;
        for end in [low, high] {
            root.draw(&PathElement::new(vec![(end, y - 3), (end, y + 3)], colour.stroke_width(2)))?;
        }
    }
    let x = l.frame.x(dot.value);
    if dot.hollow {
        marker(root, (x, y), shape, WHITE, colour.stroke_width(2))?;
    } else {
        marker(root, (x, y), shape, colour, TEXT.stroke_width(1))?;
    }
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

/// A marker of `shape` centred at (`x`, `y`), filled with `fill` and outlined as `outline` says.
fn marker<DB: DrawingBackend>(
    root: &DrawingArea<DB, Shift>,
    (x, y): (i32, i32),
    shape: Shape,
    fill: RGBColor,
    outline: ShapeStyle,
) -> DrawResult<DB> {
    match shape {
        Shape::Circle => {
            root.draw(&Circle::new((x, y), 4, fill.filled()))?;
            root.draw(&Circle::new((x, y), 4, outline))
        }
        Shape::Diamond => {
            let outline_points = vec![(x, y - 5), (x + 5, y), (x, y + 5), (x - 5, y), (x, y - 5)];
            root.draw(&Polygon::new(outline_points[..4].to_vec(), fill.filled()))?;
            root.draw(&PathElement::new(outline_points, outline))
        }
    }
}

fn legend<DB: DrawingBackend>(root: &DrawingArea<DB, Shift>, c: &DotChart, l: &Layout) -> DrawResult<DB> {
    for (r, entries) in l.legend.iter().enumerate() {
        let (mut x, y) = (PAD, l.legend_top() + 8 + 22 * r as i32);
        for entry in entries {
            let label = match entry {
                Legend::Series(i) => {
                    marker(root, (x + 6, y), c.series[*i].shape, LEGEND_MARKER, TEXT.stroke_width(1))?;
                    &c.series[*i].name
                }
                Legend::Band(i) => {
                    let fill = c.bands[*i].fill.plotters();
                    root.draw(&Rectangle::new([(x, y - 6), (x + 12, y + 6)], fill.filled()))?;
                    &c.bands[*i].label
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
                    hollow: false,
                })
                .collect(),
        };
        DotChart {
            title: "Each trick's effect — resnet8 · cpu on vm · quick profile".to_owned(),
            x_label: "× better on the trick's own metric, log (right of 1×: better)".to_owned(),
            reference: Some((1.0, "1×".to_owned())),
            bands: vec![Band {
                low: 0.97,
                high: 1.03,
                label: "noise floor (A/A), ±3.0%".to_owned(),
                fill: NOISE_BAND,
                series: None,
            }],
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
        let right = l.frame.plot_left + l.frame.plot_width;
        for dot in c.rows.iter().flat_map(|r| &r.dots) {
            assert!((l.frame.plot_left..=right).contains(&l.frame.x(dot.low())));
            assert!((l.frame.plot_left..=right).contains(&l.frame.x(dot.high())));
        }
        let widest_note = c.rows.iter().map(|r| width(&r.note, SMALL_EM)).max().unwrap();
        assert!(right + GAP + widest_note <= l.frame.width - PAD + 1, "notes end inside the figure");
        assert!(
            l.frame.x(0.97) < l.frame.x(1.0) && l.frame.x(1.0) < l.frame.x(1.03),
            "the band is around 1×"
        );
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
        assert!(bare.frame.hi < 2.5);
        let mut c = chart(&["1.00× · 1.01×", "2.00× · 2.10×"]);
        c.rows[0].dots[0].ceiling = Some(2.5);
        c.rows[0].dots[1].ceiling = Some(1.04);
        c.rows[1].dots[1].ceiling = Some(50.0);
        c.rows[1].dots[1].hover = "trick-1 on libtorch: ceiling at most 50.00×".to_owned();
        c.ceiling_key = Some("ceiling: the most it could give".to_owned());
        let l = Layout::of(&c, Form::Wide);
        assert!(l.frame.hi >= 2.5 && l.frame.hi < CEILING_REACH * 1.2, "{}", l.frame.hi);
        let (left, right) = (l.frame.plot_left, l.frame.plot_left + l.frame.plot_width);
        for v in [2.5, 1.04] {
            assert!(matches!(l.ceiling_mark(v), CeilingMark::Tick(x) if (left..=right).contains(&x)));
        }
        assert_eq!(l.ceiling_mark(50.0), CeilingMark::Beyond(right));
        assert_eq!(l.ceiling_mark(l.frame.lo / 2.0), CeilingMark::Below(left));
        assert!(l.legend.iter().flatten().any(|e| matches!(e, Legend::Ceiling)));
        assert!(l.legend.iter().flatten().any(|e| matches!(e, Legend::Beyond)));
        assert!(!bare.legend.iter().flatten().any(|e| matches!(e, Legend::Ceiling | Legend::Beyond)));
        let svg = super::super::render_svg(&super::super::Chart::Dots(c), Form::Narrow).unwrap();
        assert!(svg.contains("ceiling: the most it could give"), "the legend names the tick");
        assert_eq!(svg.matches("ceiling at most 50.00×").count(), 2, "the dot and its ceiling hover");
    }
}
