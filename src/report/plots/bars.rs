//! Horizontal bar charts: speed-ups (log axis), memory ratios, times and waterfalls (linear), and
//! stacked bars of a step's phases (linear).

use plotters::coord::Shift;
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, VPos};

use super::frame::{Frame, PAD, TITLE_LINE};
use super::{font, key_layout, linear_ticks, short_number, text, width, wrap, DrawResult, Form, Hovers, Rgb};
use super::{BODY_EM, GRID, MUTED, SMALL_EM, TEXT, TITLE_EM};

/// The narrowest a figure is, in SVG pixels.
const MIN_WIDTH: i32 = 640;
/// The width a narrow figure aims at, SVG pixels: shown in a phone's 360-px column at about 0.9×.
const NARROW_WIDTH: i32 = 400;
/// The narrowest plot area of a narrow figure.
const NARROW_MIN_PLOT: i32 = 150;
/// Room left of a narrow figure's plot for the centred text at its left end (tick labels, the
/// reference's label).
const EDGE_ROOM: i32 = 24;
/// The height of a label line above its bar in a narrow figure.
const LABEL_LINE: i32 = 18;
/// The narrowest plot area: labels and notes never squeeze the bars below this.
const MIN_PLOT: i32 = 220;
const ROW: i32 = 26;
const GAP: i32 = 6;
/// The least distance between two axis tick labels, SVG pixels (a label such as "1.25×" is about
/// 32 px wide).
const MIN_TICK_GAP: i32 = 44;

/// How values map to the axis.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Scale {
    /// Proportional to the value.
    Linear,
    /// Proportional to the logarithm: ratios (speed-ups) of 0.5× and 2× lie equally far from 1×.
    Log,
}

/// Horizontal bars from a base value to a value, with optional confidence whiskers.
#[derive(Debug, Clone)]
pub(crate) struct BarChart {
    /// Title above the plot.
    pub title: String,
    /// Label of the value axis, with its unit.
    pub x_label: String,
    /// How values map to the axis.
    pub scale: Scale,
    /// A vertical reference line (value, label), e.g. the baseline at 1.0.
    pub reference: Option<(f64, String)>,
    /// The bars, top to bottom.
    pub rows: Vec<BarRow>,
    /// The colour key: what each bar colour means.
    pub key: Vec<(Rgb, String)>,
    /// A line under the chart (cells without a bar: not applicable, failed …).
    pub footnote: Option<String>,
}

/// One bar.
#[derive(Debug, Clone)]
pub(crate) struct BarRow {
    /// Label left of the bar.
    pub label: String,
    /// Where the bar starts.
    pub base: f64,
    /// Where the bar ends.
    pub value: f64,
    /// Confidence interval drawn as a whisker.
    pub ci: Option<(f64, f64)>,
    /// Fill colour.
    pub colour: Rgb,
    /// Text right of the bar (the value).
    pub note: String,
    /// What hovering over the bar shows: the exact values.
    pub hover: String,
    /// Draw a separator line above this row (starts a new group).
    pub separator: bool,
    /// When not empty, the bar is these parts one after another from `base` (their values add up
    /// to `value − base`), each in its own colour with its own hover, instead of one bar in
    /// `colour`.
    pub segments: Vec<BarSegment>,
}

/// One part of a stacked bar.
#[derive(Debug, Clone)]
pub(crate) struct BarSegment {
    /// Its length, in the axis's unit.
    pub value: f64,
    /// Fill colour.
    pub colour: Rgb,
    /// What hovering over the part shows.
    pub hover: String,
}

impl BarRow {
    fn low(&self) -> f64 {
        self.ci.map_or(self.value, |c| c.0).min(self.value).min(self.base)
    }

    fn high(&self) -> f64 {
        self.ci.map_or(self.value, |c| c.1).max(self.value).max(self.base)
    }
}

/// Where everything of a bar chart goes, in SVG pixels.
pub(crate) struct Layout {
    /// The title, the plot area and the value axis.
    frame: Frame,
    /// Each bar's label in lines: one in a wide figure; wrapped to the width in a narrow one.
    labels: Vec<Vec<String>>,
    footnote: Vec<String>,
    /// The colour key's entries (indices into the chart's key), row by row.
    key_rows: Vec<Vec<usize>>,
}

impl Layout {
    /// The layout of `c`. Wide: a label column as wide as the longest label, left of the bars.
    /// Narrow: each label on its own line above its bar. Either way the plot area is narrow
    /// enough that every note fits right of its bar's end.
    pub(crate) fn of(c: &BarChart, form: Form) -> Layout {
        let log = c.scale == Scale::Log && c.rows.iter().all(|r| r.low() > 0.0);
        let (lo, hi) = range(c, log);
        let label_w = c.rows.iter().map(|r| width(&r.label, BODY_EM)).max().unwrap_or(0);
        let (plot_left, target, min_plot) = match form {
            Form::Wide => (PAD + label_w + 10, MIN_WIDTH, MIN_PLOT),
            Form::Narrow => (PAD + EDGE_ROOM, NARROW_WIDTH, NARROW_MIN_PLOT),
        };
        let t = |v: f64| if log { v.ln() } else { v };
        let fraction = |r: &BarRow| ((t(r.high()) - t(lo)) / (t(hi) - t(lo))).clamp(0.0, 1.0);
        let right_edge = target - PAD;
        let mut plot_width = right_edge - plot_left;
        for r in &c.rows {
            let room = right_edge - plot_left - GAP - width(&r.note, SMALL_EM);
            if fraction(r) > 0.0 {
                plot_width = plot_width.min((f64::from(room) / fraction(r)).floor() as i32);
            }
        }
        let plot_width = plot_width.max(min_plot);
        let note_end = c
            .rows
            .iter()
            .map(|r| {
                plot_left + (fraction(r) * f64::from(plot_width)) as i32 + GAP + width(&r.note, SMALL_EM)
            })
            .max()
            .unwrap_or(0);
        let axis_end = plot_left + width(&c.x_label, BODY_EM);
        let mut width_px = (plot_left + plot_width).max(note_end).max(axis_end) + PAD;
        let title = match form {
            Form::Wide => {
                width_px = width_px.max(PAD + width(&c.title, TITLE_EM) + PAD).max(MIN_WIDTH);
                vec![c.title.clone()]
            }
            Form::Narrow => {
                width_px = width_px.max(NARROW_WIDTH);
                wrap(&c.title, TITLE_EM, width_px - 2 * PAD)
            }
        };
        let labels: Vec<Vec<String>> = match form {
            Form::Wide => c.rows.iter().map(|r| vec![r.label.clone()]).collect(),
            Form::Narrow => c.rows.iter().map(|r| wrap(&r.label, BODY_EM, width_px - 2 * PAD)).collect(),
        };
        let longest_line = labels.iter().flatten().map(|l| width(l, BODY_EM)).max().unwrap_or(0);
        if form == Form::Narrow {
            width_px = width_px.max(PAD + longest_line + PAD);
        }
        let footnote = c.footnote.as_deref().map_or_else(Vec::new, |f| wrap(f, SMALL_EM, width_px - 2 * PAD));
        let key_rows = key_rows(c, width_px - 2 * PAD);
        let plot_top = PAD + TITLE_LINE * title.len() as i32 + 4 + if c.reference.is_some() { 18 } else { 0 };
        Layout {
            frame: Frame { form, width: width_px, title, plot_left, plot_width, plot_top, lo, hi, log },
            labels,
            footnote,
            key_rows,
        }
    }

    /// Width and height of the figure.
    pub(crate) fn size(&self) -> (u32, u32) {
        (self.frame.width as u32, (self.footnote_top() + 18 * self.footnote.len() as i32 + PAD) as u32)
    }

    /// The height of bar `i`'s row: the bar, and in a narrow figure its label's lines above.
    fn row_height(&self, i: usize) -> i32 {
        match self.frame.form {
            Form::Wide => ROW,
            Form::Narrow => ROW + LABEL_LINE * self.label_lines(i),
        }
    }

    /// The lines of bar `i`'s label (one where there is no such bar: an empty chart's row).
    fn label_lines(&self, i: usize) -> i32 {
        self.labels.get(i).map_or(1, |l| l.len().max(1) as i32)
    }

    /// The top of bar `i`'s row (`i` = the number of bars: the plot's bottom).
    fn row_top(&self, i: usize) -> i32 {
        self.frame.plot_top + (0..i).map(|k| self.row_height(k)).sum::<i32>()
    }

    fn plot_bottom(&self) -> i32 {
        self.row_top(self.labels.len().max(1))
    }

    /// The vertical spans that grid and reference lines cross: the whole plot in a wide figure;
    /// in a narrow one each bar's band, so that no line runs through a label.
    fn bands(&self) -> Vec<(i32, i32)> {
        match self.frame.form {
            Form::Wide => vec![(self.frame.plot_top, self.plot_bottom())],
            Form::Narrow => (0..self.labels.len().max(1))
                .map(|i| {
                    let top = self.row_top(i);
                    (top + LABEL_LINE * self.label_lines(i), top + self.row_height(i))
                })
                .collect(),
        }
    }

    fn footnote_top(&self) -> i32 {
        self.key_top() + 22 * self.key_rows.len().max(1) as i32
    }

    fn key_top(&self) -> i32 {
        self.plot_bottom() + 52
    }

    /// The y pixel of the centre of bar `i`.
    fn y(&self, i: usize) -> i32 {
        self.row_top(i) + self.row_height(i) - ROW / 2
    }

    /// Where to centre small text meant to stand at `x`: as near it as the figure's edges allow.
    fn centred(&self, x: i32, text: &str) -> i32 {
        let half = width(text, SMALL_EM) / 2;
        x.clamp(PAD + half, (self.frame.width - PAD - half).max(PAD + half))
    }

    /// The axis ticks, thinned so that no two labels lie closer than [`MIN_TICK_GAP`].
    fn ticks(&self) -> Vec<f64> {
        let all = if self.frame.log {
            log_ticks(self.frame.lo, self.frame.hi)
        } else {
            linear_ticks(self.frame.lo, self.frame.hi, 5)
        };
        let mut kept: Vec<f64> = Vec::with_capacity(all.len());
        for tick in all {
            if kept.last().is_none_or(|&previous| self.frame.x(tick) - self.frame.x(previous) >= MIN_TICK_GAP)
            {
                kept.push(tick);
            }
        }
        kept
    }
}

/// The colour key in rows no wider than `max_px`: indices into `c.key`.
fn key_rows(c: &BarChart, max_px: i32) -> Vec<Vec<usize>> {
    key_layout(c.key.iter().enumerate().map(|(i, (_, label))| (i, width(label, SMALL_EM))), max_px)
}

/// The value range: every bar, whisker and the reference, padded by 5% (of the log range on a log
/// axis); a linear axis of non-negative values starts at zero.
fn range(c: &BarChart, log: bool) -> (f64, f64) {
    let values = c.rows.iter().flat_map(|r| [r.low(), r.high()]).chain(c.reference.iter().map(|r| r.0));
    let (lo, hi) = values.fold((f64::INFINITY, f64::NEG_INFINITY), |(a, b), v| (a.min(v), b.max(v)));
    if !lo.is_finite() {
        return (0.0, 1.0);
    }
    if log {
        let (a, b) = (lo.ln(), hi.ln().max(lo.ln() + 0.1));
        let pad = (b - a) * 0.05;
        (f64::exp(a - pad), f64::exp(b + pad))
    } else {
        let lo = if lo >= 0.0 { 0.0 } else { lo };
        let pad = (hi - lo).abs().max(1e-9) * 0.05;
        (lo - if lo == 0.0 { 0.0 } else { pad }, hi + pad)
    }
}

/// Ticks of a log axis: 1, 2 and 5 × 10ᵏ, with 1.5 and 3 added where the range is narrow.
pub(super) fn log_ticks(lo: f64, hi: f64) -> Vec<f64> {
    let candidates = |mantissas: &[f64]| -> Vec<f64> {
        let (a, b) = (lo.log10().floor() as i32, hi.log10().ceil() as i32);
        let mut ticks: Vec<f64> = (a..=b)
            .flat_map(|k| mantissas.iter().map(move |m| m * 10f64.powi(k)))
            .filter(|v| (lo..=hi).contains(v))
            .collect();
        ticks.sort_by(f64::total_cmp);
        ticks
    };
    let ticks = candidates(&[1.0, 2.0, 5.0]);
    if ticks.len() >= 4 {
        ticks
    } else {
        candidates(&[1.0, 1.25, 1.5, 2.0, 3.0, 5.0, 7.5])
    }
}

/// Draws `c` with its layout.
pub(crate) fn draw<DB: DrawingBackend>(
    root: &DrawingArea<DB, Shift>,
    c: &BarChart,
    hovers: &Hovers,
    form: Form,
) -> DrawResult<DB> {
    let l = Layout::of(c, form);
    l.frame.draw_title(root)?;
    axis(root, c, &l)?;
    for (i, row) in c.rows.iter().enumerate() {
        bar(root, row, &l, i, hovers)?;
    }
    if let Some((x, label)) = &c.reference {
        let px = l.frame.x(*x);
        for (top, bottom) in l.bands() {
            let top = if l.frame.form == Form::Wide { top - 4 } else { top };
            root.draw(&PathElement::new(vec![(px, top), (px, bottom)], MUTED.stroke_width(2)))?;
        }
        let at = (l.centred(px, label), l.frame.plot_top - 6);
        text(root, label, at, font(SMALL_EM).color(&MUTED), (HPos::Center, VPos::Bottom))?;
    }
    key(root, c, &l)?;
    for (i, line) in l.footnote.iter().enumerate() {
        let y = l.footnote_top() + 18 * i as i32;
        text(root, line, (PAD, y), font(SMALL_EM).color(&MUTED), (HPos::Left, VPos::Top))?;
    }
    Ok(())
}

fn axis<DB: DrawingBackend>(root: &DrawingArea<DB, Shift>, c: &BarChart, l: &Layout) -> DrawResult<DB> {
    let bottom = l.plot_bottom();
    for v in l.ticks() {
        let px = l.frame.x(v);
        for (from, to) in l.bands() {
            root.draw(&PathElement::new(vec![(px, from), (px, to)], GRID.stroke_width(1)))?;
        }
        let label = if l.frame.log { format!("{}×", short_number(v)) } else { short_number(v) };
        let at = (l.centred(px, &label), bottom + 5);
        text(root, &label, at, font(SMALL_EM).color(&MUTED), (HPos::Center, VPos::Top))?;
    }
    root.draw(&PathElement::new(
        vec![(l.frame.plot_left, bottom), (l.frame.plot_left + l.frame.plot_width, bottom)],
        MUTED.stroke_width(1),
    ))?;
    let centre =
        (l.frame.plot_left + l.frame.plot_width / 2).max(l.frame.plot_left + width(&c.x_label, BODY_EM) / 2);
    text(root, &c.x_label, (centre, bottom + 26), font(BODY_EM), (HPos::Center, VPos::Top))
}

fn bar<DB: DrawingBackend>(
    root: &DrawingArea<DB, Shift>,
    row: &BarRow,
    l: &Layout,
    i: usize,
    hovers: &Hovers,
) -> DrawResult<DB> {
    let y = l.y(i);
    let row_top = l.row_top(i);
    if row.separator && i > 0 {
        let line = vec![(PAD, row_top), (l.frame.plot_left + l.frame.plot_width, row_top)];
        root.draw(&PathElement::new(line, MUTED.mix(0.4).stroke_width(1)))?;
    }
    let end = l.frame.x(row.high());
    let label_w = l.labels[i].iter().map(|line| width(line, BODY_EM)).max().unwrap_or(0);
    let right = (end + GAP + width(&row.note, SMALL_EM)).max(PAD + label_w);
    hovers.add((PAD, row_top), (right - PAD, l.row_height(i)), &row.hover);
    let half = ROW * 3 / 10;
    if row.segments.is_empty() {
        let (a, b) = (l.frame.x(row.base.min(row.value)), l.frame.x(row.base.max(row.value)));
        let colour = row.colour.plotters().filled();
        root.draw(&Rectangle::new([(a, y - half), (b.max(a + 1), y + half)], colour))?;
    } else {
        segments(root, row, l, (y - half, y + half), hovers)?;
    }
    if let Some((lo, hi)) = row.ci {
        let (p, q) = (l.frame.x(lo), l.frame.x(hi));
        let style = TEXT.stroke_width(1);
        root.draw(&PathElement::new(vec![(p, y), (q, y)], style))?;
        root.draw(&PathElement::new(vec![(p, y - 5), (p, y + 5)], style))?;
        root.draw(&PathElement::new(vec![(q, y - 5), (q, y + 5)], style))?;
    }
    text(root, &row.note, (end + GAP, y), font(SMALL_EM), (HPos::Left, VPos::Center))?;
    match l.frame.form {
        Form::Wide => {
            text(root, &row.label, (l.frame.plot_left - 10, y), font(BODY_EM), (HPos::Right, VPos::Center))?
        }
        Form::Narrow => {
            for (k, line) in l.labels[i].iter().enumerate() {
                let at = (PAD, row_top + 2 + LABEL_LINE * k as i32);
                text(root, line, at, font(BODY_EM), (HPos::Left, VPos::Top))?;
            }
        }
    }
    Ok(())
}

/// Draws a stacked bar's parts between the pixel rows `top` and `bottom`, each with its hover
/// (over the row's, which was added first).
fn segments<DB: DrawingBackend>(
    root: &DrawingArea<DB, Shift>,
    row: &BarRow,
    l: &Layout,
    (top, bottom): (i32, i32),
    hovers: &Hovers,
) -> DrawResult<DB> {
    let mut from = row.base;
    for s in &row.segments {
        let (a, b) = (l.frame.x(from), l.frame.x(from + s.value).max(l.frame.x(from) + 1));
        root.draw(&Rectangle::new([(a, top), (b, bottom)], s.colour.plotters().filled()))?;
        hovers.add((a, top), (b - a, bottom - top), &s.hover);
        from += s.value;
    }
    Ok(())
}

fn key<DB: DrawingBackend>(root: &DrawingArea<DB, Shift>, c: &BarChart, l: &Layout) -> DrawResult<DB> {
    for (r, entries) in l.key_rows.iter().enumerate() {
        let (mut x, y) = (PAD, l.key_top() + 8 + 22 * r as i32);
        for &i in entries {
            let (colour, label) = &c.key[i];
            root.draw(&Rectangle::new([(x, y - 6), (x + 12, y + 6)], colour.plotters().filled()))?;
            text(root, label, (x + 18, y), font(SMALL_EM), (HPos::Left, VPos::Center))?;
            x += 18 + width(label, SMALL_EM) + 18;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(label: &str, value: f64, note: &str) -> BarRow {
        BarRow {
            label: label.to_owned(),
            base: 1.0,
            value,
            ci: Some((value * 0.97, value * 1.03)),
            colour: Rgb(0, 0, 0),
            note: note.to_owned(),
            hover: String::new(),
            separator: false,
            segments: Vec::new(),
        }
    }

    fn chart(rows: Vec<BarRow>) -> BarChart {
        BarChart {
            title: "t".to_owned(),
            x_label: "speed-up".to_owned(),
            scale: Scale::Log,
            reference: Some((1.0, "baseline".to_owned())),
            rows,
            key: Vec::new(),
            footnote: None,
        }
    }

    #[test]
    fn a_log_axis_gives_small_effects_room_next_to_an_outlier() {
        let c = chart(vec![row("debug-off", 18.57, "18.57× [18.03, 19.10]"), row("amp", 1.08, "1.08×")]);
        let l = Layout::of(&c, Form::Wide);
        assert!(l.frame.log);
        assert!(
            l.frame.x(1.08) - l.frame.x(1.0) >= 8,
            "an 8% effect is {} px wide",
            l.frame.x(1.08) - l.frame.x(1.0)
        );
    }

    #[test]
    fn every_note_ends_inside_the_figure() {
        let long = "18.57× [18.03, 19.10] faster, against baseline+debug-apis-on";
        let c = chart(vec![row("debug-off", 18.57, long), row("amp", 0.8, "0.80×")]);
        let l = Layout::of(&c, Form::Wide);
        let end = l.frame.x(18.57 * 1.03) + GAP + width(long, SMALL_EM);
        assert!(end <= l.frame.width - PAD, "the note ends at {end} of {}", l.frame.width);
    }

    #[test]
    fn log_ticks_cover_narrow_and_wide_ranges() {
        assert_eq!(log_ticks(0.6, 25.0), vec![1.0, 2.0, 5.0, 10.0, 20.0]);
        assert!(log_ticks(0.9, 1.3).len() >= 2);
    }
}
