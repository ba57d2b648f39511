//! Reports rendered from results files alone: plots (PNG and SVG), one self-contained
//! `index.html`, `summary.md` and `cells.csv`; and the comparison of several devices.
//!
//! Data flows one way: [`Results`] values → a view model ([`model`]) → chart specifications
//! ([`figures`]) rendered by [`plots`] (the only module that knows the plotting library) → HTML and
//! Markdown templates ([`html`], [`markdown`]) and the CSV table.

mod compare;
mod csv;
mod factorial;
mod figures;
mod gain;
pub mod gate;
mod history;
mod html;
mod index;
mod markdown;
mod model;
pub mod ops;
mod overview;
mod phases;
mod plots;
mod probes;
mod speedrun;
mod traces;

use std::path::{Path, PathBuf};

use crate::results::schema::{CellResult, Comparison, Results};
use crate::workloads::WorkloadId;

pub(crate) use compare::glance::{MachineGlance, OnMachine, Pattern, TrickAcross};
pub(crate) use compare::why_text;
pub use history::CompareBy;
pub use index::write_index;
pub(crate) use model::{ratio_effect, throughput_effect, Effect, MEMORY_TOLERANCE};
pub(crate) use overview::{by_cause, Overview, VerdictRow};
pub use speedrun::headlines as speedrun_headlines;

/// Everything that can go wrong while rendering a report. I/O errors name their file.
#[derive(Debug, thiserror::Error)]
pub enum ReportError {
    /// No results were given.
    #[error("nothing to report: no results files given")]
    NoResults,
    /// A file or directory could not be created or written.
    #[error("{}: {source}", path.display())]
    Io {
        /// The file or directory involved.
        path: PathBuf,
        /// The underlying error.
        source: std::io::Error,
    },
    /// The CSV table could not be written.
    #[error("{}: {source}", path.display())]
    Csv {
        /// The CSV file.
        path: PathBuf,
        /// The underlying error.
        source: ::csv::Error,
    },
    /// A copy of a results file could not be serialised.
    #[error("{}: {source}", path.display())]
    Json {
        /// The JSON file.
        path: PathBuf,
        /// The underlying error.
        source: serde_json::Error,
    },
    /// A plot could not be drawn.
    #[error("{}: drawing the plot failed: {message}", path.display())]
    Plot {
        /// The plot file (its SVG path).
        path: PathBuf,
        /// What the plotting library reported.
        message: String,
    },
    /// A run's start time cannot be read, so it has no place in a history.
    #[error(
        "run {run}: started_at '{value}' is not an RFC 3339 time, so the run cannot be placed in a history"
    )]
    StartTime {
        /// The run's id.
        run: String,
        /// Its `started_at`.
        value: String,
    },
    /// No trick cell was measured in two of the runs of a history.
    #[error(
        "no trick cell was measured in two of these runs, so they have no history to draw (cells join by \
         workload, trick set, batch size, kind and profile); the runs hold: {runs}"
    )]
    NothingShared {
        /// What each run holds: its place, id, profile and workloads.
        runs: String,
    },
    /// A template failed to render (a defect in the templates or their data).
    #[error("{}: template {name}: {source:#}", path.display())]
    Template {
        /// The file the template was rendering.
        path: PathBuf,
        /// The template's name.
        name: String,
        /// The template engine's error.
        source: minijinja::Error,
    },
}

/// The files a report consists of, all under its output directory.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReportFiles {
    /// The self-contained HTML report.
    pub index_html: PathBuf,
    /// The Markdown summary.
    pub summary_md: PathBuf,
    /// The CSV table (`cells.csv` for a report, `comparison.csv` for a comparison of devices,
    /// `history.csv` for one of versions).
    pub csv: PathBuf,
    /// Every plot file, PNG and SVG.
    pub plots: Vec<PathBuf>,
    /// The copies of the input results files the HTML links to (`results-N.json`).
    pub results_json: Vec<PathBuf>,
}

impl ReportFiles {
    /// Every file written, in a stable order.
    pub fn all(&self) -> impl Iterator<Item = &Path> {
        [&self.index_html, &self.summary_md, &self.csv]
            .into_iter()
            .chain(&self.plots)
            .chain(&self.results_json)
            .map(PathBuf::as_path)
    }
}

/// Renders the report of one or more results files (shards of a run, or runs of different
/// workloads) into `out_dir`: `index.html`, `summary.md`, `cells.csv`, `plots/*.png|svg` and a copy
/// of each results file as `results-N.json`. Profiler traces are linked where they lie in
/// `out_dir` (the results files' own folder, as after `run` or `merge`); see
/// [`render_report_from`].
pub fn render_report(results: &[Results], out_dir: &Path) -> Result<ReportFiles, ReportError> {
    render_report_from(results, &vec![out_dir.to_path_buf(); results.len()], out_dir)
}

/// As [`render_report`], for results files read from the folders `results_dirs` (one per file, in
/// order): each cell's profiler trace (`run --trace`), whose path is relative to its results
/// file's folder, is linked from the report's folder where the file is there.
pub fn render_report_from(
    results: &[Results],
    results_dirs: &[PathBuf],
    out_dir: &Path,
) -> Result<ReportFiles, ReportError> {
    if results.is_empty() {
        return Err(ReportError::NoResults);
    }
    let out = Output::create(out_dir)?;
    let report = model::Report::new(results);
    let traces = traces::trace_views(&report, results_dirs, out_dir);
    let overviews = report.overviews();
    let figures = out.figures(figures::report_figures(&report, &overviews))?;
    let results_json = out.results_copies(results)?;
    let index_html = out.path("index.html");
    write(&index_html, html::report(&index_html, (&report, &overviews), &figures, &traces)?)?;
    let summary_md = out.path("summary.md");
    write(&summary_md, markdown::summary(&summary_md, (&report, &overviews), &figures, &traces)?)?;
    let csv = out.path("cells.csv");
    csv::write_cells(&csv, &report)?;
    Ok(ReportFiles { index_html, summary_md, csv, plots: out.plot_files(&figures), results_json })
}

/// A rendered comparison: its files, and how its runs were lined up.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ComparisonFiles {
    /// The files written.
    pub files: ReportFiles,
    /// How the runs were lined up, and why: "3 versions, oldest first (auto: every run is cpu on
    /// vm (…), at 3 different commits or libtorch versions)", "2 machines (--by device)".
    pub lined_up: String,
    /// How many cells some runs have and others lack (listed on the page).
    pub unshared_cells: usize,
    /// Whether the runs were lined up as machines side by side (rather than as versions).
    pub machines: bool,
}

/// Renders the comparison of results files into `out_dir`: `index.html`, `summary.md`, a CSV and
/// plots. Cells are joined by (workload, trick set, batch size, kind, profile); each run is
/// normalised to its own baseline; cells present in some runs only are listed, not dropped.
/// `by` says whether the files are devices (side by side, in the order given; `comparison.csv`)
/// or versions of one plan (oldest first, each trick's effect drawn across them and changes
/// flagged; `history.csv`), or to tell from the files ([`CompareBy::Auto`]). `reports` names, per
/// results file in order, the `index.html` of its own report where there is one: the comparison
/// links it (a shorter list leaves the rest unlinked).
pub fn render_comparison(
    results: &[Results],
    reports: &[Option<PathBuf>],
    by: CompareBy,
    out_dir: &Path,
) -> Result<ComparisonFiles, ReportError> {
    if results.is_empty() {
        return Err(ReportError::NoResults);
    }
    // Links are made relative to the output folder, which must exist for that.
    let out = Output::create(out_dir)?;
    let links: Vec<Option<String>> = (0..results.len())
        .map(|i| reports.get(i).cloned().flatten().and_then(|page| relative_link(out_dir, &page)))
        .collect();
    let line_up = history::line_up(results, by);
    match line_up.axis {
        history::Axis::Devices => render_devices(results, &links, &line_up, &out),
        history::Axis::Versions => render_history(results, &links, line_up, &out),
    }
}

/// The comparison of `results` as devices, in the order given, into `out`.
fn render_devices(
    results: &[Results],
    links: &[Option<String>],
    line_up: &history::LineUp,
    out: &Output,
) -> Result<ComparisonFiles, ReportError> {
    let comparison = compare::Comparison::new(results, links);
    let glance = machine_glance(results);
    let figures = out.figures(figures::comparison_figures(&comparison, &glance))?;
    let results_json = out.results_copies(results)?;
    let index_html = out.path("index.html");
    write(&index_html, html::comparison(&index_html, &comparison, &glance, &figures)?)?;
    let summary_md = out.path("summary.md");
    write(&summary_md, markdown::comparison(&summary_md, &comparison, &glance, &figures)?)?;
    let csv = out.path("comparison.csv");
    csv::write_comparison(&csv, &comparison)?;
    let files = ReportFiles { index_html, summary_md, csv, plots: out.plot_files(&figures), results_json };
    let lined_up = format!("{} machines ({})", results.len(), line_up.reason);
    Ok(ComparisonFiles { files, lined_up, unshared_cells: comparison.mismatches.len(), machines: true })
}

/// The comparison of `results` as versions, oldest first, into `out`.
fn render_history(
    results: &[Results],
    links: &[Option<String>],
    line_up: history::LineUp,
    out: &Output,
) -> Result<ComparisonFiles, ReportError> {
    let versions = history::versions(results)?;
    let ordered: Vec<Results> = versions.iter().map(|v| results[v.file].clone()).collect();
    let ordered_links: Vec<Option<String>> = versions.iter().map(|v| links[v.file].clone()).collect();
    let labels = versions.iter().map(|v| format!("{} {}", v.tick, v.commit)).collect();
    let comparison = compare::Comparison::labelled(&ordered, &ordered_links, labels);
    let lined_up = format!("{} versions, oldest first ({})", versions.len(), line_up.reason);
    let history = history::History::new(comparison, versions, line_up)?;
    let figures = out.figures(figures::history_figures(&history))?;
    let results_json = out.results_copies(&ordered)?;
    let index_html = out.path("index.html");
    write(&index_html, html::history(&index_html, &history, &figures)?)?;
    let summary_md = out.path("summary.md");
    write(&summary_md, markdown::history(&summary_md, &history, &figures)?)?;
    let csv = out.path("history.csv");
    csv::write_history(&csv, &history)?;
    let files = ReportFiles { index_html, summary_md, csv, plots: out.plot_files(&figures), results_json };
    Ok(ComparisonFiles {
        files,
        lined_up,
        unshared_cells: history.comparison.mismatches.len(),
        machines: false,
    })
}

/// A figure as the templates see it: its inline SVG and the relative paths of its files.
#[derive(Debug, Clone, serde::Serialize)]
struct FigureFile {
    /// Section the figure belongs to (`speedup`, `memory`, `tta`, `stack`, `batch`, `compare`,
    /// `history`).
    section: &'static str,
    /// Short title (also the alt text).
    title: String,
    /// One or two sentences on how to read it.
    caption: String,
    /// The SVG document, inlined into the HTML.
    svg: String,
    /// `plots/<slug>.png`, relative to the report.
    png: String,
    /// `plots/<slug>.svg`, relative to the report.
    svg_file: String,
    /// The narrow form's SVG, inlined for phones.
    svg_narrow: String,
    /// `plots/<slug>-narrow.svg`, relative to the report.
    svg_narrow_file: String,
}

/// The path of `page` relative to the directory `from`, with `/` separators, for a link; `None`
/// where either cannot be resolved.
fn relative_link(from: &Path, page: &Path) -> Option<String> {
    let (from, page) = (from.canonicalize().ok()?, page.canonicalize().ok()?);
    let common = from.components().zip(page.components()).take_while(|(a, b)| a == b).count();
    let up = from.components().count() - common;
    let down = page.components().skip(common).map(|c| c.as_os_str().to_string_lossy().into_owned());
    Some(std::iter::repeat_n("..".to_owned(), up).chain(down).collect::<Vec<_>>().join("/"))
}

/// The verdict a report gives `cell` of `results`, compared as `comparison` says, on its trick's
/// own metric ("helps", "hurts", "no measurable effect", …).
pub fn verdict_label(results: &Results, cell: &CellResult, comparison: &Comparison) -> &'static str {
    let reference = results.cells.iter().find(|c| c.id() == comparison.baseline);
    model::judged(cell, comparison, reference).effect.label()
}

/// The first screen of each group of `results` (one per workload, device and profile), with
/// the workload it is about: what the terminal summary prints.
pub(crate) fn first_screens(results: &Results) -> Vec<(WorkloadId, Overview)> {
    let runs = std::slice::from_ref(results);
    let report = model::Report::new(runs);
    report.groups.iter().map(|g| g.workload).zip(report.overviews()).collect()
}

/// The first screen of the comparison of `results`, one file per machine, the machines named from
/// their hardware: what the page opens with and the terminal prints.
pub(crate) fn machine_glance(results: &[Results]) -> MachineGlance {
    MachineGlance::new(results, compare::names::machine_names(results))
}

/// The output directory.
struct Output {
    dir: PathBuf,
}

impl Output {
    fn create(dir: &Path) -> Result<Output, ReportError> {
        let plots = dir.join("plots");
        std::fs::create_dir_all(&plots).map_err(|source| ReportError::Io { path: plots, source })?;
        Ok(Output { dir: dir.to_owned() })
    }

    fn path(&self, name: &str) -> PathBuf {
        self.dir.join(name)
    }

    /// Renders and writes every figure: its wide form as SVG and PNG, its narrow form as SVG.
    fn figures(&self, figures: Vec<figures::Figure>) -> Result<Vec<FigureFile>, ReportError> {
        figures.into_iter().map(|f| self.figure(f)).collect()
    }

    fn figure(&self, f: figures::Figure) -> Result<FigureFile, ReportError> {
        let (png, svg_file) = (format!("plots/{}.png", f.slug), format!("plots/{}.svg", f.slug));
        let narrow_file = format!("plots/{}-narrow.svg", f.slug);
        let failed = |file: &str| {
            let path = self.path(file);
            move |message| ReportError::Plot { path, message }
        };
        let rendered = plots::render(&f.chart).map_err(failed(&svg_file))?;
        write(&self.path(&svg_file), rendered.svg.as_bytes())?;
        write(&self.path(&png), &rendered.png)?;
        let svg_narrow = plots::render_narrow(&f.chart).map_err(failed(&narrow_file))?;
        write(&self.path(&narrow_file), svg_narrow.as_bytes())?;
        Ok(FigureFile {
            section: f.section,
            title: f.title,
            caption: f.caption,
            svg: rendered.svg,
            png,
            svg_file,
            svg_narrow_file: narrow_file,
            svg_narrow,
        })
    }

    fn plot_files(&self, figures: &[FigureFile]) -> Vec<PathBuf> {
        figures
            .iter()
            .flat_map(|f| [&f.png, &f.svg_file, &f.svg_narrow_file])
            .map(|file| self.path(file))
            .collect()
    }

    /// Writes each results file next to the report as `results-N.json` (N from 1).
    fn results_copies(&self, results: &[Results]) -> Result<Vec<PathBuf>, ReportError> {
        results
            .iter()
            .enumerate()
            .map(|(i, r)| {
                let path = self.path(&results_file_name(i));
                let json = serde_json::to_vec_pretty(r)
                    .map_err(|source| ReportError::Json { path: path.clone(), source })?;
                write(&path, json)?;
                Ok(path)
            })
            .collect()
    }
}

/// The name of the copy of the `index`-th (0-based) results file.
fn results_file_name(index: usize) -> String {
    format!("results-{}.json", index + 1)
}

fn write(path: &Path, contents: impl AsRef<[u8]>) -> Result<(), ReportError> {
    std::fs::write(path, contents).map_err(|source| ReportError::Io { path: path.to_owned(), source })
}
