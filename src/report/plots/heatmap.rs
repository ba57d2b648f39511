//! The comparison's heatmap: tricks × devices, coloured by speed-up around 1.0.

use plotters::coord::Shift;
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, VPos};

use super::{font, text, width, DrawResult, Hovers};
use super::{BODY_EM, MUTED, SMALL_EM, TEXT, TITLE_EM};

const PAD: i32 = 12;
const ROW: i32 = 34;
const TOP: i32 = 44;

/// A grid of speed-ups: rows × columns, coloured around 1.0.
#[derive(Debug, Clone)]
pub(crate) struct Heatmap {
    /// Title above the grid.
    pub title: String,
    /// Row labels.
    pub rows: Vec<String>,
    /// Column labels.
    pub columns: Vec<String>,
    /// `cells[row][column]`: the speed-up (if measured), the text printed in the cell and the
    /// hover text.
    pub cells: Vec<Vec<(Option<f64>, String, String)>>,
}

fn label_width(h: &Heatmap) -> i32 {
    h.rows.iter().map(|r| width(r, BODY_EM)).max().unwrap_or(0) + 10
}

fn column_width(h: &Heatmap) -> i32 {
    let texts = h.cells.iter().flatten().map(|c| width(&c.1, SMALL_EM));
    let heads = h.columns.iter().map(|c| width(c, SMALL_EM));
    texts.chain(heads).max().unwrap_or(0).max(80) + 16
}

/// Width and height of the figure.
pub(crate) fn size(h: &Heatmap) -> (u32, u32) {
    let grid = label_width(h) + column_width(h) * h.columns.len().max(1) as i32;
    let w = (2 * PAD + grid).max(2 * PAD + width(&h.title, TITLE_EM)).max(480);
    (w as u32, (TOP + 24 + ROW * h.rows.len().max(1) as i32 + PAD) as u32)
}

/// The heat colour of a speed-up: red below 1, white at 1, green above; saturated at ½× and 2×.
fn heat(value: f64) -> RGBColor {
    let t = value.max(1e-9).log2().clamp(-1.0, 1.0);
    let (target, t) = if t >= 0.0 { ((26, 152, 80), t) } else { ((215, 48, 39), -t) };
    let mix = |a: u8| (255.0 + (f64::from(a) - 255.0) * t).round() as u8;
    RGBColor(mix(target.0), mix(target.1), mix(target.2))
}

/// Draws the grid, its row labels left and column labels on top.
pub(crate) fn draw<DB: DrawingBackend>(
    root: &DrawingArea<DB, Shift>,
    h: &Heatmap,
    hovers: &Hovers,
) -> DrawResult<DB> {
    text(root, &h.title, (PAD, PAD), font(TITLE_EM), (HPos::Left, VPos::Top))?;
    let (left, cw) = (PAD + label_width(h), column_width(h));
    let grid_top = TOP + 24;
    for (col, label) in h.columns.iter().enumerate() {
        let x = left + cw * col as i32 + cw / 2;
        text(root, label, (x, grid_top - 6), font(SMALL_EM), (HPos::Center, VPos::Bottom))?;
    }
    for (r, row) in h.cells.iter().enumerate() {
        let y = grid_top + ROW * r as i32;
        let label = h.rows.get(r).map_or("", String::as_str);
        text(root, label, (left - 10, y + ROW / 2), font(BODY_EM), (HPos::Right, VPos::Center))?;
        for (col, (value, cell_text, hover)) in row.iter().enumerate() {
            let x = left + cw * col as i32;
            let fill = value.map_or(RGBColor(233, 236, 239), heat);
            root.draw(&Rectangle::new([(x, y), (x + cw, y + ROW)], fill.filled()))?;
            root.draw(&Rectangle::new([(x, y), (x + cw, y + ROW)], WHITE.stroke_width(2)))?;
            let colour = match value {
                Some(v) if v.max(1e-9).log2().abs() > 0.6 => WHITE,
                Some(_) => TEXT,
                None => MUTED,
            };
            text(
                root,
                cell_text,
                (x + cw / 2, y + ROW / 2),
                font(SMALL_EM).color(&colour),
                (HPos::Center, VPos::Center),
            )?;
            hovers.add((x, y), (cw, ROW), hover);
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn heat_is_white_at_one_and_saturates() {
        assert_eq!(heat(1.0), RGBColor(255, 255, 255));
        assert_eq!(heat(4.0), RGBColor(26, 152, 80));
        assert_eq!(heat(0.25), RGBColor(215, 48, 39));
    }
}
