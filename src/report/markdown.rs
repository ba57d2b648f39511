//! `summary.md`: the verdicts per workload and device and links to the plots, for READMEs and pull requests.

mod factorial;

use std::path::Path;

use minijinja::context;
use minijinja::value::Serde;

use crate::report::compare::glance::MachineGlance;
use crate::report::compare::Comparison;
use crate::report::history::History;
use crate::report::html::{self, render, sections, Reference};
use crate::report::model::{self, Report};
use crate::report::overview::Overview;
use crate::report::traces::TraceView;
use crate::report::{FigureFile, ReportError};

/// Renders `summary.md` of a report whose groups' first screens are `overviews`, listing the
/// cells' profiler traces `traces`; a factorial design's answer opens it.
pub(crate) fn summary(
    path: &Path,
    (report, overviews): (&Report, &[Overview]),
    figures: &[FigureFile],
    traces: &[TraceView],
) -> Result<String, ReportError> {
    let runs: Vec<_> = report
        .results
        .iter()
        .map(|r| {
            context! {
                id => Serde(&r.run.id),
                device => Serde(model::device_name(r)),
                profile => Serde(r.run.profile_text()),
                design => Serde(&r.run.design),
                started_at => Serde(&r.run.started_at),
                git_commit => Serde(&r.run.git_commit),
                data => Serde(&r.run.data.name),
                allocator => Serde(r.run.protocol.host_allocator.description()),
            }
        })
        .collect();
    let failures = report.entries().filter(|(_, e)| e.cell.failed()).count();
    let reference = Reference::of(overviews.iter().map(|o| o.leave_one_out));
    let ctx = context! {
        title => html::run_title(report.results, "results"),
        synthetic => Serde(report.synthetic()),
        rehearsals => Serde(report.rehearsals()),
        runs => Serde(runs),
        overviews => Serde(overviews),
        tta_summary => Serde(report.time_to_accuracy_rows()),
        sections => Serde(sections(figures, reference)),
        glance => Serde(figures.iter().filter(|f| f.section == html::GLANCE_SECTION).collect::<Vec<_>>()),
        phases => Serde(crate::report::phases::tables(report)),
        probes => Serde(crate::report::probes::tables(report)),
        failures => Serde(failures),
        traces => Serde(traces),
        speedruns => Serde(crate::report::speedrun::views(report, figures)),
        rule => crate::report::speedrun::RULE,
    };
    let rendered = render(path, "summary.md", ctx)?;
    Ok(before_first_section(rendered, &factorial::sections(report.results)))
}

/// `markdown` with `sections` inserted before its first `## ` heading (a factorial design's
/// answer leads the workloads' verdicts), or at its end where it has none.
fn before_first_section(mut markdown: String, sections: &str) -> String {
    let at = markdown.find("\n## ").map_or(markdown.len(), |i| i + 1);
    markdown.insert_str(at, sections);
    markdown
}

/// Renders `summary.md` of a comparison of machines, whose first screen is `g`.
pub(crate) fn comparison(
    path: &Path,
    c: &Comparison,
    g: &MachineGlance,
    figures: &[FigureFile],
) -> Result<String, ReportError> {
    render(path, "compare.md", html::comparison_context(c, g, figures))
}

/// Renders `summary.md` of a history.
pub(crate) fn history(path: &Path, h: &History, figures: &[FigureFile]) -> Result<String, ReportError> {
    render(path, "history.md", html::history_context(h, figures))
}

#[cfg(test)]
mod tests {
    use super::before_first_section;

    #[test]
    fn sections_go_before_the_first_heading_or_at_the_end() {
        let page = "# run\n\n- a run\n\n## resnet8\n\ntext\n\n## plots\n".to_owned();
        assert_eq!(
            before_first_section(page, "## factorial\n\n"),
            "# run\n\n- a run\n\n## factorial\n\n## resnet8\n\ntext\n\n## plots\n"
        );
        assert_eq!(before_first_section("# run\n".to_owned(), "## factorial\n"), "# run\n## factorial\n");
        assert_eq!(before_first_section("# run\n".to_owned(), ""), "# run\n");
    }
}
