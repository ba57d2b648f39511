//! `index.html` of a directory of reports: every report and comparison below it, with its title
//! and one-line conclusion, read back from the pages themselves.

use std::path::{Path, PathBuf};

use minijinja::context;
use minijinja::value::Serde;
use serde::Serialize;

use crate::report::{html, write, ReportError};

/// The `<meta>` a report page carries its conclusion in.
pub(crate) const CONCLUSION_META: &str = "trickbench-conclusion";

/// One page listed in the index.
#[derive(Debug, Serialize)]
struct Listed {
    /// Its path relative to the index, with `/` separators.
    href: String,
    /// Its `<title>`.
    title: String,
    /// Its one-line conclusion ("" for a page without one).
    conclusion: String,
}

/// Writes `dir/index.html` listing every `index.html` below `dir` (at any depth, `dir`'s own
/// excepted) that trickbench rendered, in path order; returns its path.
pub fn write_index(dir: &Path) -> Result<PathBuf, ReportError> {
    let mut pages = Vec::new();
    collect(dir, dir, &mut pages)?;
    pages.sort_by(|a, b| a.href.cmp(&b.href));
    let path = dir.join("index.html");
    let ctx = context! { title => "trickbench reports", pages => Serde(pages) };
    write(&path, html::render(&path, "index.html", ctx)?)?;
    Ok(path)
}

fn collect(root: &Path, dir: &Path, out: &mut Vec<Listed>) -> Result<(), ReportError> {
    let io = |source| ReportError::Io { path: dir.to_owned(), source };
    let mut entries: Vec<PathBuf> = std::fs::read_dir(dir)
        .map_err(io)?
        .map(|e| e.map(|e| e.path()))
        .collect::<Result<_, _>>()
        .map_err(io)?;
    entries.sort();
    for path in entries {
        if path.is_dir() {
            collect(root, &path, out)?;
        } else if path.file_name().is_some_and(|n| n == "index.html") && dir != root {
            let text = std::fs::read_to_string(&path)
                .map_err(|source| ReportError::Io { path: path.clone(), source })?;
            if let Some(listed) = listed(root, &path, &text) {
                out.push(listed);
            }
        }
    }
    Ok(())
}

/// The page's entry, if trickbench rendered it (it carries the conclusion `<meta>`).
fn listed(root: &Path, path: &Path, text: &str) -> Option<Listed> {
    let conclusion = between(text, &format!("<meta name=\"{CONCLUSION_META}\" content=\""), "\"")?;
    let title = between(text, "<title>", "</title>").unwrap_or_default();
    let relative = path.strip_prefix(root).ok()?;
    let href = relative.components().map(|c| c.as_os_str().to_string_lossy()).collect::<Vec<_>>().join("/");
    Some(Listed { href, title: unescape(&title), conclusion: unescape(&conclusion) })
}

fn between(text: &str, start: &str, end: &str) -> Option<String> {
    let from = text.find(start)? + start.len();
    let to = text[from..].find(end)? + from;
    Some(text[from..to].to_owned())
}

/// Undoes the template engine's HTML escaping, so the index can escape the text once again.
fn unescape(s: &str) -> String {
    [("&lt;", "<"), ("&gt;", ">"), ("&quot;", "\""), ("&#x27;", "'"), ("&#x2f;", "/"), ("&amp;", "&")]
        .iter()
        .fold(s.to_owned(), |acc, (from, to)| acc.replace(from, to))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_title_and_conclusion_back() {
        let page = "<title>run-1 — trickbench report</title><meta name=\"trickbench-conclusion\" \
                    content=\"Of 2 tricks measured, 1 helps (amp &amp; co&#x2f;x).\">";
        let page_a = listed(Path::new("/r"), Path::new("/r/a/index.html"), page).unwrap();
        assert_eq!(page_a.href, "a/index.html");
        assert_eq!(page_a.title, "run-1 — trickbench report");
        assert_eq!(page_a.conclusion, "Of 2 tricks measured, 1 helps (amp & co/x).");
        assert!(listed(Path::new("/r"), Path::new("/r/b/index.html"), "<title>other</title>").is_none());
    }
}
