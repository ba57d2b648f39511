//! Small multiples: one small panel per series over the same categories (runs, oldest first),
//! each on a log axis of its own that always shows 1×, with confidence whiskers, a gap where a
//! category has no value, and changed steps drawn in the warning colour.

use plotters::coord::Shift;
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, VPos};

use super::bars::log_ticks;
use super::{font, linear_ticks, short_number, text, width, wrap, DrawResult, Form, Hovers, Rgb};
use super::{BODY_EM, GRID, MUTED, SMALL_EM, TEXT, TITLE_EM, WARNING};

const PAD: i32 = 12;
const TITLE_LINE: i32 = 24;
const SMALL_LINE: i32 = 18;
/// A panel's width in a wide figure, SVG pixels.
const PANEL_WIDTH: i32 = 248;
/// Panels per row in a wide figure.
const WIDE_COLUMNS: usize = 4;
/// The width a narrow figure aims at (two panels a row).
const NARROW_WIDTH: i32 = 400;
/// Above a panel's plot: its title and its flag line.
const PANEL_HEAD: i32 = 44;
const PLOT_HEIGHT: i32 = 104;
/// Under a panel's plot: the category labels and the gap to the next row.
const PANEL_FOOT: i32 = 34;
/// Left of a panel's plot: the tick labels.
const AXIS_ROOM: i32 = 50;
/// The least vertical distance between two tick labels.
const MIN_TICK_GAP: i32 = 20;

/// Panels over shared categories.
#[derive(Debug, Clone)]
pub(crate) struct PanelChart {
    /// Title above the grid.
    pub title: String,
    /// The categories' short labels under each plot ("#1", "#2"), in order.
    pub categories: Vec<String>,
    /// Lines under the grid saying what each category is.
    pub key: Vec<String>,
    /// The panels, left to right, top to bottom.
    pub panels: Vec<Panel>,
    /// A line under the key (series without a panel, and why).
    pub footnote: Option<String>,
}

/// One series.
#[derive(Debug, Clone)]
pub(crate) struct Panel {
    /// Its name, next to its colour.
    pub title: String,
    /// The line under the name: what is drawn, or the flag of a change.
    pub subtitle: String,
    /// Draw the subtitle in the warning colour (a change is flagged).
    pub flagged: bool,
    /// The series' colour.
    pub colour: Rgb,
    /// One per category.
    pub slots: Vec<Slot>,
    /// Per step from category `i` to `i + 1`: whether it is a change (drawn in the warning colour).
    pub changed: Vec<bool>,
}

/// A category's value in a panel, or the gap where it has none.
#[derive(Debug, Clone)]
pub(crate) enum Slot {
    /// A ratio (×) with its interval, if any, and what hovering over it shows.
    Value { value: f64, interval: Option<(f64, f64)>, hover: String },
    /// No value: a short label written at 1× ("missing", "n/a") and what hovering shows.
    Gap { label: String, hover: String },
}

/// The layout of a chart in one form.
struct Layout {
    width: i32,
    title: Vec<String>,
    columns: usize,
    panel_width: i32,
    key: Vec<String>,
    footnote: Vec<String>,
}

impl Layout {
    fn of(c: &PanelChart, form: Form) -> Layout {
        let (columns, panel_width) = match form {
            Form::Wide => (WIDE_COLUMNS.min(c.panels.len().max(1)), PANEL_WIDTH),
            Form::Narrow => (2, (NARROW_WIDTH - 2 * PAD) / 2),
        };
        let grid = 2 * PAD + panel_width * columns as i32;
        let width_px = match form {
            Form::Wide => grid.max(2 * PAD + width(&c.title, TITLE_EM)).max(640),
            Form::Narrow => grid,
        };
        let title = match form {
            Form::Wide => vec![c.title.clone()],
            Form::Narrow => wrap(&c.title, TITLE_EM, width_px - 2 * PAD),
        };
        let lines = |text: &str| wrap(text, SMALL_EM, width_px - 2 * PAD);
        let key = c.key.iter().flat_map(|k| lines(k)).collect();
        let footnote = c.footnote.as_deref().map_or_else(Vec::new, lines);
        Layout { width: width_px, title, columns, panel_width, key, footnote }
    }

    fn grid_top(&self) -> i32 {
        PAD + TITLE_LINE * self.title.len() as i32 + 8
    }

    fn rows(&self, panels: usize) -> i32 {
        panels.div_ceil(self.columns).max(1) as i32
    }

    fn grid_bottom(&self, panels: usize) -> i32 {
        self.grid_top() + self.rows(panels) * (PANEL_HEAD + PLOT_HEIGHT + PANEL_FOOT)
    }

    fn size(&self, panels: usize) -> (u32, u32) {
        let lines = (self.key.len() + self.footnote.len()) as i32;
        (self.width as u32, (self.grid_bottom(panels) + SMALL_LINE * lines + PAD) as u32)
    }

    /// The top-left corner of panel `i`.
    fn corner(&self, i: usize) -> (i32, i32) {
        let (row, column) = ((i / self.columns) as i32, (i % self.columns) as i32);
        (PAD + column * self.panel_width, self.grid_top() + row * (PANEL_HEAD + PLOT_HEIGHT + PANEL_FOOT))
    }
}

/// Width and height of the figure.
pub(crate) fn size(c: &PanelChart, form: Form) -> (u32, u32) {
    Layout::of(c, form).size(c.panels.len())
}

/// Draws `c`: the title, the panels, the key and the footnote.
pub(crate) fn draw<DB: DrawingBackend>(
    root: &DrawingArea<DB, Shift>,
    c: &PanelChart,
    hovers: &Hovers,
    form: Form,
) -> DrawResult<DB> {
    let l = Layout::of(c, form);
    for (i, line) in l.title.iter().enumerate() {
        text(root, line, (PAD, PAD + TITLE_LINE * i as i32), font(TITLE_EM), (HPos::Left, VPos::Top))?;
    }
    for (i, panel) in c.panels.iter().enumerate() {
        draw_panel(root, c, panel, l.corner(i), l.panel_width, hovers)?;
    }
    let below = l.grid_bottom(c.panels.len());
    for (i, line) in l.key.iter().chain(&l.footnote).enumerate() {
        let colour = if i < l.key.len() { TEXT } else { MUTED };
        let at = (PAD, below + SMALL_LINE * i as i32);
        text(root, line, at, font(SMALL_EM).color(&colour), (HPos::Left, VPos::Top))?;
    }
    Ok(())
}

/// A panel's log axis: its range (×) and where values land.
struct Axis {
    lo: f64,
    hi: f64,
    top: i32,
}

impl Axis {
    /// The range of `slots` and 1×, padded by 8% of its span in log space (at least ±3%).
    fn of(slots: &[Slot], top: i32) -> Axis {
        let values = slots.iter().flat_map(|s| match s {
            Slot::Value { value, interval, .. } => {
                let (low, high) = interval.unwrap_or((*value, *value));
                vec![*value, low, high]
            }
            Slot::Gap { .. } => vec![],
        });
        let (lo, hi) =
            values.filter(|v| *v > 0.0).fold((1.0f64, 1.0f64), |(lo, hi), v| (lo.min(v), hi.max(v)));
        let pad = ((hi.ln() - lo.ln()) * 0.08).max(0.03_f64.ln_1p());
        Axis { lo: (lo.ln() - pad).exp(), hi: (hi.ln() + pad).exp(), top }
    }

    fn y(&self, v: f64) -> i32 {
        let f = (v.max(f64::MIN_POSITIVE).ln() - self.lo.ln()) / (self.hi.ln() - self.lo.ln());
        self.top + PLOT_HEIGHT - (f * f64::from(PLOT_HEIGHT)).round() as i32
    }

    /// The ticks, thinned so that no two labels lie closer than [`MIN_TICK_GAP`]: a log axis's
    /// usual ones, or round linear steps (0.1×) on a range too narrow for three of them.
    fn ticks(&self) -> Vec<f64> {
        let mut all = log_ticks(self.lo, self.hi);
        if all.len() < 3 {
            all = linear_ticks(self.lo, self.hi, 4);
        }
        let mut kept: Vec<f64> = Vec::new();
        for tick in all {
            if kept.last().is_none_or(|&previous| self.y(previous) - self.y(tick) >= MIN_TICK_GAP) {
                kept.push(tick);
            }
        }
        kept
    }
}

fn draw_panel<DB: DrawingBackend>(
    root: &DrawingArea<DB, Shift>,
    c: &PanelChart,
    p: &Panel,
    (x0, y0): (i32, i32),
    panel_width: i32,
    hovers: &Hovers,
) -> DrawResult<DB> {
    root.draw(&Rectangle::new([(x0, y0 + 3), (x0 + 12, y0 + 15)], p.colour.plotters().filled()))?;
    let room = panel_width - 18 - 8;
    text(root, &fit(&p.title, BODY_EM, room), (x0 + 18, y0 + 9), font(BODY_EM), (HPos::Left, VPos::Center))?;
    let flag = if p.flagged { WARNING } else { MUTED };
    let subtitle = fit(&p.subtitle, SMALL_EM, panel_width - 8);
    text(root, &subtitle, (x0, y0 + 22), font(SMALL_EM).color(&flag), (HPos::Left, VPos::Top))?;
    let axis = Axis::of(&p.slots, y0 + PANEL_HEAD);
    let (left, right) = (x0 + AXIS_ROOM, x0 + panel_width - 12);
    let bottom = axis.top + PLOT_HEIGHT;
    for tick in axis.ticks() {
        let y = axis.y(tick);
        root.draw(&PathElement::new(vec![(left, y), (right, y)], GRID.stroke_width(1)))?;
        let label = format!("{}×", short_number(tick));
        text(root, &label, (left - 6, y), font(SMALL_EM).color(&MUTED), (HPos::Right, VPos::Center))?;
    }
    let one = axis.y(1.0);
    root.draw(&PathElement::new(vec![(left, one), (right, one)], MUTED.stroke_width(2)))?;
    root.draw(&PathElement::new(vec![(left, bottom), (right, bottom)], MUTED.stroke_width(1)))?;
    let step = f64::from(right - left) / c.categories.len().max(1) as f64;
    let x = |i: usize| left + ((i as f64 + 0.5) * step).round() as i32;
    for (i, label) in c.categories.iter().enumerate() {
        text(root, label, (x(i), bottom + 4), font(SMALL_EM).color(&MUTED), (HPos::Center, VPos::Top))?;
    }
    for (i, pair) in p.slots.windows(2).enumerate() {
        if let (Slot::Value { value: a, .. }, Slot::Value { value: b, .. }) = (&pair[0], &pair[1]) {
            let changed = p.changed.get(i).copied().unwrap_or(false);
            let style = if changed { WARNING.stroke_width(3) } else { p.colour.plotters().stroke_width(2) };
            root.draw(&PathElement::new(vec![(x(i), axis.y(*a)), (x(i + 1), axis.y(*b))], style))?;
        }
    }
    for (i, slot) in p.slots.iter().enumerate() {
        draw_slot(root, slot, x(i), &axis, hovers)?;
    }
    Ok(())
}

/// A value's whisker and dot, or a gap's label at 1×, with its hover area.
fn draw_slot<DB: DrawingBackend>(
    root: &DrawingArea<DB, Shift>,
    slot: &Slot,
    x: i32,
    axis: &Axis,
    hovers: &Hovers,
) -> DrawResult<DB> {
    match slot {
        Slot::Value { value, interval, hover } => {
            let (top, bottom) = match interval {
                Some((low, high)) => {
                    let (top, bottom) = (axis.y(*high), axis.y(*low));
                    let style = TEXT.stroke_width(1);
                    root.draw(&PathElement::new(vec![(x, top), (x, bottom)], style))?;
                    root.draw(&PathElement::new(vec![(x - 4, top), (x + 4, top)], style))?;
                    root.draw(&PathElement::new(vec![(x - 4, bottom), (x + 4, bottom)], style))?;
                    (top, bottom)
                }
                None => (axis.y(*value), axis.y(*value)),
            };
            let y = axis.y(*value);
            root.draw(&Circle::new((x, y), 4, TEXT.filled()))?;
            hovers.add((x - 8, top - 6), (16, bottom - top + 12), hover);
        }
        Slot::Gap { label, hover } => {
            // On the side of the 1× line with more room, clear of the panel's title.
            let one = axis.y(1.0);
            let (y, anchor, top) = if one - axis.top < PLOT_HEIGHT / 2 {
                (one + 4, VPos::Top, one + 4)
            } else {
                (one - 4, VPos::Bottom, one - 22)
            };
            text(root, label, (x, y), font(SMALL_EM).color(&MUTED), (HPos::Center, anchor))?;
            hovers.add((x - width(label, SMALL_EM) / 2, top), (width(label, SMALL_EM), 18), hover);
        }
    }
    Ok(())
}

/// `text`, cut to fit `max_px` at `em` with a trailing "…" where it is wider.
fn fit(text: &str, em: f64, max_px: i32) -> String {
    if width(text, em) <= max_px {
        return text.to_owned();
    }
    let mut cut: String = text.to_owned();
    while !cut.is_empty() && width(&format!("{cut}…"), em) > max_px {
        cut.pop();
    }
    format!("{cut}…")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn value(value: f64, low: f64, high: f64) -> Slot {
        Slot::Value { value, interval: Some((low, high)), hover: String::new() }
    }

    #[test]
    fn a_panel_s_axis_holds_its_intervals_and_one() {
        let axis =
            Axis::of(&[value(4.3, 4.1, 5.0), Slot::Gap { label: "n/a".into(), hover: String::new() }], 0);
        assert!(axis.lo < 1.0 && axis.hi > 5.0, "{} {}", axis.lo, axis.hi);
        assert!(axis.y(5.0) >= 0 && axis.y(1.0) <= PLOT_HEIGHT);
        let ticks = axis.ticks();
        assert!(ticks.contains(&1.0), "{ticks:?}");
        assert!(ticks.windows(2).all(|w| axis.y(w[0]) - axis.y(w[1]) >= MIN_TICK_GAP), "{ticks:?}");
        let flat = Axis::of(&[value(1.0, 1.0, 1.0)], 0);
        assert!(flat.hi / flat.lo > 1.05, "a flat panel still has a span");
    }

    #[test]
    fn long_titles_are_cut_to_the_panel() {
        let cut = fit("amp+channels-last+cudnn-benchmark+tf32", BODY_EM, 200);
        assert!(cut.ends_with('…') && width(&cut, BODY_EM) <= 200, "{cut}");
        assert_eq!(fit("amp", BODY_EM, 200), "amp");
    }
}
