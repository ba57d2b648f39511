//! The comparison's heatmap: tricks × devices, coloured by speed-up around 1.0.

use plotters::coord::Shift;
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, VPos};

use super::{font, text, width, wrap, DrawResult, Form, Hovers};
use super::{BODY_EM, MUTED, SMALL_EM, TEXT, TITLE_EM};

const PAD: i32 = 12;
const ROW: i32 = 34;
const TOP: i32 = 44;
/// The width a narrow figure aims at, SVG pixels.
const NARROW_WIDTH: i32 = 400;
/// The height of a row label's line above its cells in a narrow figure.
const LABEL_LINE: i32 = 20;
const TITLE_LINE: i32 = 24;

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

/// Where the grid goes: wide, row labels left of the cells; narrow, each row's label on a line
/// above its cells, which share the figure's width.
struct Layout {
    width: i32,
    title: Vec<String>,
    left: i32,
    column_width: i32,
    grid_top: i32,
    row_height: i32,
    label_line: i32,
}

impl Layout {
    fn of(h: &Heatmap, form: Form) -> Layout {
        let columns = h.columns.len().max(1) as i32;
        match form {
            Form::Wide => {
                let grid = label_width(h) + column_width(h) * columns;
                let width = (2 * PAD + grid).max(2 * PAD + width(&h.title, TITLE_EM)).max(480);
                let (left, column_width) = (PAD + label_width(h), column_width(h));
                let title = vec![h.title.clone()];
                Layout {
                    width,
                    title,
                    left,
                    column_width,
                    grid_top: TOP + 24,
                    row_height: ROW,
                    label_line: 0,
                }
            }
            Form::Narrow => {
                let column_width = column_width(h).max((NARROW_WIDTH - 2 * PAD) / columns);
                let labels = h.rows.iter().map(|r| width(r, BODY_EM)).max().unwrap_or(0);
                let width = (2 * PAD + column_width * columns).max(2 * PAD + labels);
                let title = wrap(&h.title, TITLE_EM, width - 2 * PAD);
                let grid_top = PAD + TITLE_LINE * title.len() as i32 + 32;
                Layout {
                    width,
                    title,
                    left: PAD,
                    column_width,
                    grid_top,
                    row_height: LABEL_LINE + 30,
                    label_line: LABEL_LINE,
                }
            }
        }
    }
}

/// Width and height of the figure.
pub(crate) fn size(h: &Heatmap, form: Form) -> (u32, u32) {
    let l = Layout::of(h, form);
    (l.width as u32, (l.grid_top + l.row_height * h.rows.len().max(1) as i32 + PAD) as u32)
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
    form: Form,
) -> DrawResult<DB> {
    let l = Layout::of(h, form);
    for (i, line) in l.title.iter().enumerate() {
        text(root, line, (PAD, PAD + TITLE_LINE * i as i32), font(TITLE_EM), (HPos::Left, VPos::Top))?;
    }
    let (left, cw, grid_top) = (l.left, l.column_width, l.grid_top);
    for (col, label) in h.columns.iter().enumerate() {
        let x = left + cw * col as i32 + cw / 2;
        text(root, label, (x, grid_top - 6), font(SMALL_EM), (HPos::Center, VPos::Bottom))?;
    }
    for (r, row) in h.cells.iter().enumerate() {
        let label = h.rows.get(r).map_or("", String::as_str);
        let row_top = grid_top + l.row_height * r as i32;
        let y = row_top + l.label_line;
        match form {
            Form::Wide => {
                text(root, label, (left - 10, y + ROW / 2), font(BODY_EM), (HPos::Right, VPos::Center))?
            }
            Form::Narrow => text(root, label, (PAD, row_top + 2), font(BODY_EM), (HPos::Left, VPos::Top))?,
        }
        let cell_height = l.row_height - l.label_line;
        for (col, (value, cell_text, hover)) in row.iter().enumerate() {
            let x = left + cw * col as i32;
            let fill = value.map_or(RGBColor(233, 236, 239), heat);
            root.draw(&Rectangle::new([(x, y), (x + cw, y + cell_height)], fill.filled()))?;
            root.draw(&Rectangle::new([(x, y), (x + cw, y + cell_height)], WHITE.stroke_width(2)))?;
            let colour = match value {
                Some(v) if v.max(1e-9).log2().abs() > 0.6 => WHITE,
                Some(_) => TEXT,
                None => MUTED,
            };
            text(
                root,
                cell_text,
                (x + cw / 2, y + cell_height / 2),
                font(SMALL_EM).color(&colour),
                (HPos::Center, VPos::Center),
            )?;
            hovers.add((x, y), (cw, cell_height), hover);
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
