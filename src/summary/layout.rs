//! How the terminal summary lays out rows of a name and one value per column: grouped by verdict
//! under headings, in columns under their titles where a row fits on one line, else each row's
//! values on a line under its name.

use std::fmt::{Display, Write};

use crate::report::Effect;
use crate::terminal::wrap;

/// The groups of verdicts, in the order printed, with the effects each holds.
pub(super) const GROUPS: [(&str, &[Effect]); 4] = [
    ("helps", &[Effect::Helps]),
    ("hurts", &[Effect::Hurts]),
    ("no measurable effect", &[Effect::Unmeasurable, Effect::WithinNoise]),
    ("inconclusive", &[Effect::NotMeasured]),
];

/// Columns between the left edge and a row's name.
pub(super) const NAME_INDENT: usize = 4;
/// Columns between two columns of a row.
const SPACING: usize = 2;

/// The widths of rows laid out in columns.
pub(super) struct Layout {
    /// The columns' titles, a value of each row under each.
    titles: Vec<String>,
    /// Characters per line that the rows fit in.
    pub(super) columns: usize,
    /// Width of the names' column.
    name: usize,
    /// Width of each value's column.
    values: Vec<usize>,
    /// Whether each row fits on one line; otherwise the values go on the line under the name.
    one_line: bool,
}

impl Layout {
    /// The layout of `rows`, each a name and its values (one per title), in `columns`, under the
    /// verdicts' headings ([`GROUPS`]).
    pub(super) fn of(titles: Vec<&'static str>, rows: &[(String, Vec<String>)], columns: usize) -> Layout {
        let headings: Vec<&str> = GROUPS.iter().map(|(word, _)| *word).collect();
        let titles = titles.into_iter().map(str::to_owned).collect();
        Layout::under(&headings, titles, rows, columns)
    }

    /// The layout of `rows`, each a name and its values (one per title), in `columns`, under
    /// groups whose headings are `headings`.
    pub(super) fn under(
        headings: &[&str],
        titles: Vec<String>,
        rows: &[(String, Vec<String>)],
        columns: usize,
    ) -> Layout {
        // A heading's word stands in the names' column, two columns to its left.
        let word = headings
            .iter()
            .map(|word| word.chars().count())
            .max()
            .unwrap_or(0)
            .saturating_sub(NAME_INDENT - 2);
        let name = rows.iter().map(|(name, _)| name.chars().count()).max().unwrap_or(0).max(word);
        let values: Vec<usize> = titles
            .iter()
            .enumerate()
            .map(|(i, title)| {
                let widest = rows.iter().filter_map(|(_, v)| v.get(i)).map(|v| v.chars().count()).max();
                widest.unwrap_or(0).max(title.chars().count())
            })
            .collect();
        let width = NAME_INDENT + name + values.iter().map(|v| v + SPACING).sum::<usize>();
        Layout { titles, columns, name, values, one_line: width <= columns }
    }

    /// A group's heading, with the columns' titles on the first (`titles`).
    pub(super) fn heading(&self, word: &str, titles: bool) -> String {
        if !titles || !self.one_line {
            return format!("  {word}");
        }
        let mut line = format!("  {word:<width$}", width = NAME_INDENT - 2 + self.name);
        for (title, width) in self.titles.iter().zip(&self.values) {
            let _ = write!(line, "{:spacing$}{title:<width$}", "", spacing = SPACING);
        }
        line.trim_end().to_owned()
    }

    /// A row's name and values, in columns on one line, or each value after its title on the
    /// line under the name; ends with a newline.
    pub(super) fn row(&self, name: &str, values: &[String]) -> String {
        let indent = " ".repeat(NAME_INDENT);
        if self.one_line {
            let mut line = format!("{indent}{name:<width$}", width = self.name);
            for (value, width) in values.iter().zip(&self.values) {
                let _ = write!(line, "{:spacing$}{value:<width$}", "", spacing = SPACING);
            }
            return format!("{}\n", line.trim_end());
        }
        let titled: Vec<String> = self.titles.iter().zip(values).map(|(t, v)| format!("{t} {v}")).collect();
        let name = wrap(&format!("{indent}{name}"), self.columns, 2);
        format!("{name}\n{}\n", wrap(&format!("{indent}  {}", titled.join(" · ")), self.columns, 2))
    }
}

/// `rows` grouped by verdict (`effect` says each one's), each group under its heading (the
/// `rows` grouped by verdict (`effect` says each one's), each group under its heading (the
/// first with the columns' titles), each row as `render` gives it.
pub(super) fn grouped<R>(
    rows: &[R],
    layout: &Layout,
    effect: impl Fn(&R) -> Effect,
    render: impl Fn(&R) -> String,
) -> String {
    let effect = &effect;
    let groups = GROUPS.map(|(word, effects)| (word, move |r: &R| effects.contains(&effect(r))));
    grouped_under(rows, layout, &groups, render)
}

/// `rows` under each heading of `groups` (a heading and which rows it holds) that holds some, in
/// that order, the first heading with the columns' titles, each row as `render` gives it.
pub(super) fn grouped_under<R>(
    rows: &[R],
    layout: &Layout,
    groups: &[(&str, impl Fn(&R) -> bool)],
    render: impl Fn(&R) -> String,
) -> String {
    let mut out = String::new();
    let mut first = true;
    for (word, holds) in groups {
        let members: Vec<&R> = rows.iter().filter(|r| holds(r)).collect();
        if members.is_empty() {
            continue;
        }
        out.push('\n');
        let _ = writeln!(out, "{}", layout.heading(word, first));
        first = false;
        for r in members {
            out.push_str(&render(r));
        }
    }
    out
}

/// A line per group of `groups` in `columns`, under a heading: "    needs a CUDA GPU: amp, tf32".
pub(super) fn cause_lines<T: Display>(groups: &[(String, Vec<T>)], columns: usize) -> String {
    let mut out = String::new();
    for (cause, members) in groups {
        let members: Vec<String> = members.iter().map(ToString::to_string).collect();
        let _ = writeln!(out, "{}", wrap(&format!("    {cause}: {}", members.join(", ")), columns, 2));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::by_cause;

    #[test]
    fn causes_group_in_the_order_first_met_each_member_once() {
        let items = [("gpu", "amp"), ("attention", "sdpa"), ("gpu", "tf32"), ("gpu", "amp")];
        let groups = by_cause(items.map(|(c, t)| (c.to_owned(), t)));
        assert_eq!(groups, [("gpu".to_owned(), vec!["amp", "tf32"]), ("attention".to_owned(), vec!["sdpa"])]);
        assert_eq!(cause_lines(&groups, 100), "    gpu: amp, tf32\n    attention: sdpa\n");
    }

    #[test]
    fn rows_too_wide_for_columns_put_their_values_under_their_names() {
        let rows = [("A channels-last".to_owned(), vec!["1.10× [1.06, 1.13]".to_owned(), "—".to_owned()])];
        let wide = Layout::of(vec!["in PyTorch", "on libtorch"], &rows, 100);
        assert_eq!(wide.row(&rows[0].0, &rows[0].1), "    A channels-last     1.10× [1.06, 1.13]  —\n");
        assert_eq!(wide.heading("helps", true), "  helps                 in PyTorch          on libtorch");
        let narrow = Layout::of(vec!["in PyTorch", "on libtorch"], &rows, 40);
        assert_eq!(
            narrow.row(&rows[0].0, &rows[0].1),
            "    A channels-last\n      in PyTorch 1.10× [1.06, 1.13] · on\n        libtorch —\n"
        );
        assert_eq!(narrow.heading("helps", true), "  helps");
    }
}
