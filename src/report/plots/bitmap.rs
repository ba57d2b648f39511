//! The PNG side of the plots: a drawing backend that renders the same layout as the SVG at a
//! higher pixel density, with text set by its own glyph layout.
//!
//! plotters' bitmap text drops each glyph's left side bearing and truncates the pen position and
//! the vertical offset to whole pixels independently per glyph, which breaks letter spacing
//! ("debu g") and lifts small glyphs such as the decimal point off the baseline. Here every glyph
//! is positioned at its fractional pen position on one shared baseline and rasterised by
//! `ab_glyph` there, so advances, kerning and bearings are kept.

use std::sync::OnceLock;

use ab_glyph::{point, Font, FontRef, PxScale, ScaleFont};
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, VPos};
use plotters_backend::{
    BackendColor, BackendCoord, BackendStyle, BackendTextStyle, DrawingErrorKind, FontTransform,
};

use super::FONT;

/// The embedded font, parsed once.
fn face() -> &'static FontRef<'static> {
    static FACE: OnceLock<FontRef<'static>> = OnceLock::new();
    FACE.get_or_init(|| match FontRef::try_from_slice(FONT) {
        Ok(face) => face,
        // The font is a fixed file compiled in: a failure is a build defect, caught by every test.
        Err(_) => panic!("the embedded DejaVu Sans font is not a valid font file"),
    })
}

/// plotters' text size is 1.24 × the CSS font size it writes into SVG.
const SIZE_PER_EM: f64 = 1.24;
/// DejaVu Sans' x-height in em: SVG centres text vertically with `dy="0.5ex"`.
const EX_PER_EM: f64 = 0.545;
/// The baseline of top-anchored SVG text lies `0.76em` below the anchor.
const TOP_BASELINE_EM: f64 = 0.76;

/// The scale at which `ab_glyph` draws glyphs one em of `em_px` pixels high.
fn scale(em_px: f64) -> PxScale {
    let f = face();
    let units = f.units_per_em().unwrap_or(2048.0);
    PxScale::from((em_px * f64::from(f.height_unscaled()) / f64::from(units)) as f32)
}

/// The advance width of `text` in pixels at a CSS font size of `em_px`, kerning included: what a
/// browser lays out for the SVG and what the PNG draws.
pub(crate) fn text_width(text: &str, em_px: f64) -> f64 {
    let font = face().as_scaled(scale(em_px));
    let mut width = 0.0f32;
    let mut previous = None;
    for c in text.chars() {
        let id = font.glyph_id(c);
        if let Some(p) = previous {
            width += font.kern(p, id);
        }
        width += font.h_advance(id);
        previous = Some(id);
    }
    f64::from(width)
}

/// A bitmap backend drawing a `size` layout at `density` device pixels per layout pixel.
pub(crate) struct Dense<'a> {
    inner: BitMapBackend<'a>,
    size: (u32, u32),
    density: i32,
}

impl<'a> Dense<'a> {
    /// Draws into `rgb`, which must hold `size × density` RGB pixels.
    pub(crate) fn new(rgb: &'a mut [u8], size: (u32, u32), density: u32) -> Dense<'a> {
        let device = (size.0 * density, size.1 * density);
        Dense { inner: BitMapBackend::with_buffer(rgb, device), size, density: density as i32 }
    }

    fn at(&self, p: BackendCoord) -> BackendCoord {
        (p.0 * self.density, p.1 * self.density)
    }

    /// The device pixel just past layout pixel `p`, so that filled shapes cover whole pixels.
    fn past(&self, p: BackendCoord) -> BackendCoord {
        (p.0 * self.density + self.density - 1, p.1 * self.density + self.density - 1)
    }
}

/// A style with its stroke widened to the device's density.
struct Widened<'s, S> {
    style: &'s S,
    density: u32,
}

impl<S: BackendStyle> BackendStyle for Widened<'_, S> {
    fn color(&self) -> BackendColor {
        self.style.color()
    }

    fn stroke_width(&self) -> u32 {
        self.style.stroke_width() * self.density
    }
}

type Error = DrawingErrorKind<<BitMapBackend<'static> as DrawingBackend>::ErrorType>;

impl DrawingBackend for Dense<'_> {
    type ErrorType = <BitMapBackend<'static> as DrawingBackend>::ErrorType;

    fn get_size(&self) -> (u32, u32) {
        self.size
    }

    fn ensure_prepared(&mut self) -> Result<(), Error> {
        self.inner.ensure_prepared()
    }

    fn present(&mut self) -> Result<(), Error> {
        self.inner.present()
    }

    fn draw_pixel(&mut self, p: BackendCoord, color: BackendColor) -> Result<(), Error> {
        let (a, b) = (self.at(p), self.past(p));
        self.inner.draw_rect(a, b, &color, true)
    }

    fn draw_line<S: BackendStyle>(
        &mut self,
        from: BackendCoord,
        to: BackendCoord,
        style: &S,
    ) -> Result<(), Error> {
        let (from, to) = (self.at(from), self.at(to));
        self.inner.draw_line(from, to, &Widened { style, density: self.density as u32 })
    }

    fn draw_rect<S: BackendStyle>(
        &mut self,
        upper_left: BackendCoord,
        bottom_right: BackendCoord,
        style: &S,
        fill: bool,
    ) -> Result<(), Error> {
        let (a, b) = (self.at(upper_left), self.past(bottom_right));
        self.inner.draw_rect(a, b, &Widened { style, density: self.density as u32 }, fill)
    }

    fn draw_path<S: BackendStyle, I: IntoIterator<Item = BackendCoord>>(
        &mut self,
        path: I,
        style: &S,
    ) -> Result<(), Error> {
        let path: Vec<_> = path.into_iter().map(|p| self.at(p)).collect();
        self.inner.draw_path(path, &Widened { style, density: self.density as u32 })
    }

    fn draw_circle<S: BackendStyle>(
        &mut self,
        center: BackendCoord,
        radius: u32,
        style: &S,
        fill: bool,
    ) -> Result<(), Error> {
        let (center, radius) = (self.at(center), radius * self.density as u32);
        self.inner.draw_circle(center, radius, &Widened { style, density: self.density as u32 }, fill)
    }

    fn fill_polygon<S: BackendStyle, I: IntoIterator<Item = BackendCoord>>(
        &mut self,
        vertices: I,
        style: &S,
    ) -> Result<(), Error> {
        let vertices: Vec<_> = vertices.into_iter().map(|p| self.at(p)).collect();
        self.inner.fill_polygon(vertices, style)
    }

    fn draw_text<T: BackendTextStyle>(
        &mut self,
        text: &str,
        style: &T,
        pos: BackendCoord,
    ) -> Result<(), Error> {
        let em = style.size() / SIZE_PER_EM * f64::from(self.density);
        let width = text_width(text, em);
        let dx = match style.anchor().h_pos {
            HPos::Left => 0.0,
            HPos::Center => -width / 2.0,
            HPos::Right => -width,
        };
        let baseline = match style.anchor().v_pos {
            VPos::Top => TOP_BASELINE_EM * em,
            VPos::Center => EX_PER_EM * em / 2.0,
            VPos::Bottom => -EX_PER_EM * em / 2.0,
        };
        let origin = self.at(pos);
        let place = placement(style.transform(), origin);
        let color = style.color();
        let mut pixels = Vec::new();
        rasterise(text, em, (dx, baseline), |x, y, coverage| pixels.push((place(x, y), coverage)));
        for (p, coverage) in pixels {
            let alpha = color.alpha * f64::from(coverage);
            self.inner.draw_pixel(p, BackendColor { alpha, rgb: color.rgb })?;
        }
        Ok(())
    }

    fn estimate_text_size<T: BackendTextStyle>(&self, text: &str, style: &T) -> Result<(u32, u32), Error> {
        let em = style.size() / SIZE_PER_EM;
        Ok((text_width(text, em).ceil() as u32, em.ceil() as u32))
    }
}

/// Maps a pixel of text laid out left to right from the origin to the device, rotated as asked.
fn placement(transform: FontTransform, (x0, y0): BackendCoord) -> impl Fn(i32, i32) -> BackendCoord {
    move |x, y| match transform {
        FontTransform::None => (x0 + x, y0 + y),
        FontTransform::Rotate90 => (x0 - y, y0 + x),
        FontTransform::Rotate180 => (x0 - x, y0 - y),
        FontTransform::Rotate270 => (x0 + y, y0 - x),
    }
}

/// Rasterises `text` at `em` pixels per em with its first pen position at `origin` (x of the pen,
/// y of the baseline), handing each covered pixel and its coverage (0–1) to `pixel`.
fn rasterise(text: &str, em: f64, origin: (f64, f64), mut pixel: impl FnMut(i32, i32, f32)) {
    let f = face();
    let font = f.as_scaled(scale(em));
    let mut pen = origin.0 as f32;
    let mut previous = None;
    for c in text.chars() {
        let id = font.glyph_id(c);
        if let Some(p) = previous {
            pen += font.kern(p, id);
        }
        let glyph = id.with_scale_and_position(scale(em), point(pen, origin.1 as f32));
        if let Some(outline) = f.outline_glyph(glyph) {
            let bounds = outline.px_bounds();
            let (left, top) = (bounds.min.x as i32, bounds.min.y as i32);
            outline.draw(|x, y, coverage| {
                if coverage > 0.0 {
                    pixel(left + x as i32, top + y as i32, coverage.min(1.0));
                }
            });
        }
        pen += font.h_advance(id);
        previous = Some(id);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn widths_add_up_and_scale_with_the_font_size() {
        let (a, b) = (text_width("debug", 16.0), text_width("-off", 16.0));
        assert!((text_width("debug-off", 16.0) - (a + b)).abs() < 1.5);
        assert!((text_width("debug", 32.0) - 2.0 * a).abs() < 0.5);
        assert!(text_width("ab", 16.0) > 10.0 && text_width("ab", 16.0) < 25.0);
    }

    #[test]
    fn each_glyph_keeps_its_left_side_bearing() {
        // "l" starts a stem's width right of the pen; drawn from the pen, the bearing was lost.
        let font = face().as_scaled(scale(40.0));
        let bearing = font.h_side_bearing(font.glyph_id('l'));
        for pen in [0.0, 10.25, 20.5] {
            let mut left = i32::MAX;
            rasterise("l", 40.0, (pen, 40.0), |x, _, c| {
                if c > 0.5 {
                    left = left.min(x);
                }
            });
            let expected = f64::from(bearing) + pen;
            assert!((f64::from(left) - expected).abs() <= 1.0, "ink from {left}, expected {expected}");
        }
    }

    #[test]
    fn the_decimal_point_sits_on_the_baseline_of_the_digits() {
        let bottom = |text: &str| {
            let mut lowest = 0;
            rasterise(text, 26.0, (0.0, 30.0), |_, y, c| {
                if c > 0.5 {
                    lowest = lowest.max(y);
                }
            });
            lowest
        };
        assert_eq!(bottom("."), bottom("1"));
    }
}
