//! The frame a chart of horizontal rows draws in: its title's lines, the plot area's left edge,
//! width and top, and the value axis that maps a value to its x pixel, linear or logarithmic.

use plotters::coord::Shift;
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, VPos};

use super::{font, text, DrawResult, Form, TITLE_EM};

/// The height of a line of the title, SVG pixels.
pub(super) const TITLE_LINE: i32 = 24;
/// The margin around the figure, SVG pixels.
pub(super) const PAD: i32 = 12;

/// Where a chart's plot area lies and what its value axis spans, in SVG pixels.
pub(super) struct Frame {
    /// Wide or narrow.
    pub form: Form,
    /// The figure's width.
    pub width: i32,
    /// The title, one entry per line.
    pub title: Vec<String>,
    /// The plot area's left edge.
    pub plot_left: i32,
    /// The plot area's width.
    pub plot_width: i32,
    /// The plot area's top.
    pub plot_top: i32,
    /// The value at the plot's left edge.
    pub lo: f64,
    /// The value at the plot's right edge.
    pub hi: f64,
    /// Whether the value axis is logarithmic.
    pub log: bool,
}

impl Frame {
    /// The x pixel of value `v`.
    pub fn x(&self, v: f64) -> i32 {
        let t = |v: f64| if self.log { v.max(f64::MIN_POSITIVE).ln() } else { v };
        let f = (t(v) - t(self.lo)) / (t(self.hi) - t(self.lo));
        self.plot_left + (f * f64::from(self.plot_width)).round() as i32
    }

    /// Draws the title's lines at the figure's top left.
    pub fn draw_title<DB: DrawingBackend>(&self, root: &DrawingArea<DB, Shift>) -> DrawResult<DB> {
        for (i, line) in self.title.iter().enumerate() {
            text(root, line, (PAD, PAD + TITLE_LINE * i as i32), font(TITLE_EM), (HPos::Left, VPos::Top))?;
        }
        Ok(())
    }
}
