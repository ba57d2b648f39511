//! The terminal a run prints to: how wide it is, and text wrapped to fit it.

use std::io::IsTerminal;

/// Columns assumed when the output is not a terminal and `COLUMNS` does not say: a width that
/// CI logs and pagers show whole.
pub const DEFAULT_COLUMNS: usize = 100;
/// The narrowest width text is wrapped to; below it, lines would hold a word or two.
pub const MIN_COLUMNS: usize = 40;

/// How a run's text output is laid out.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Terminal {
    /// Characters per line that the output fits in.
    pub columns: usize,
    /// Whether the full table of every cell is printed too.
    pub verbose: bool,
}

impl Terminal {
    /// The width of the terminal stdout or stderr is (stdout's first), else `COLUMNS`, else
    /// [`DEFAULT_COLUMNS`]; never less than [`MIN_COLUMNS`].
    pub fn detect(verbose: bool) -> Terminal {
        let on_terminal = if std::io::stdout().is_terminal() {
            terminal_size::terminal_size_of(std::io::stdout())
        } else if std::io::stderr().is_terminal() {
            terminal_size::terminal_size_of(std::io::stderr())
        } else {
            None
        };
        let columns = on_terminal
            .map(|(width, _)| usize::from(width.0))
            .or_else(|| std::env::var("COLUMNS").ok().and_then(|c| c.trim().parse().ok()))
            .unwrap_or(DEFAULT_COLUMNS);
        Terminal { columns: columns.max(MIN_COLUMNS), verbose }
    }

    /// A terminal `columns` wide, without the full cell table.
    pub fn of_width(columns: usize) -> Terminal {
        Terminal { columns: columns.max(MIN_COLUMNS), verbose: false }
    }
}

/// `text` as lines no wider than `columns` characters: each line of `text` wrapped between words,
/// its continuation lines indented as it is plus `hang` more; a word longer than a line is cut.
pub fn wrap(text: &str, columns: usize, hang: usize) -> String {
    let mut out = String::new();
    for (i, line) in text.lines().enumerate() {
        if i > 0 {
            out.push('\n');
        }
        out.push_str(&wrap_line(line, columns, hang));
    }
    out
}

/// One line of text wrapped as [`wrap`] says.
fn wrap_line(line: &str, columns: usize, hang: usize) -> String {
    let indent = line.chars().take_while(|c| *c == ' ').count();
    let continuation = " ".repeat((indent + hang).min(columns / 2));
    let mut lines: Vec<String> = Vec::new();
    let mut current = " ".repeat(indent.min(columns / 2));
    let mut empty = true;
    for word in line.split_whitespace() {
        let fits = current.chars().count() + usize::from(!empty) + word.chars().count() <= columns;
        if !empty && !fits {
            lines.push(std::mem::replace(&mut current, continuation.clone()));
            empty = true;
        }
        if !empty {
            current.push(' ');
        }
        for c in word.chars() {
            if current.chars().count() >= columns {
                lines.push(std::mem::replace(&mut current, continuation.clone()));
            }
            current.push(c);
        }
        empty = false;
    }
    lines.push(current);
    lines.join("\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wrapped_lines_fit_and_keep_every_word() {
        let text = "  plan: 68 cells in 96 cell processes (multi-arm processes, rounds and warm-ups counted; phases \
                    that depend on earlier results not yet)";
        let wrapped = wrap(text, 40, 2);
        assert!(wrapped.lines().all(|l| l.chars().count() <= 40), "{wrapped}");
        assert!(wrapped.lines().skip(1).all(|l| l.starts_with("    ")), "{wrapped}");
        let words: Vec<&str> = wrapped.split_whitespace().collect();
        assert_eq!(words, text.split_whitespace().collect::<Vec<_>>());
    }

    #[test]
    fn a_word_longer_than_a_line_is_cut_to_fit() {
        let id = "resnet8/baseline+debug-apis-on/b128/s0/train@pytorch";
        let wrapped = wrap(&format!("    {id}: ok"), 40, 2);
        assert!(wrapped.lines().all(|l| l.chars().count() <= 40), "{wrapped}");
        assert_eq!(wrapped.replace(['\n', ' '], ""), format!("{id}:ok"));
    }

    #[test]
    fn short_lines_and_blank_lines_stay_as_they_are() {
        assert_eq!(wrap("a b\n\n  c", 80, 4), "a b\n\n  c");
    }
}
