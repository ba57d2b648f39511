//! The profiler traces of a report's cells (`run --trace`), as the HTML and Markdown show them:
//! each trace's link from the report's folder and its table of longest operators.

use std::path::{Path, PathBuf};

use serde::Serialize;

use crate::report::model::{self, Report};
use crate::report::relative_link;
use crate::results::schema::TraceOperator;

/// One traced cell.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct TraceView {
    /// The anchor of the cell's row in the all-cells table.
    pub cell_anchor: String,
    /// The cell's id.
    pub id: String,
    /// The trace file as the results record it, relative to the results file's folder.
    pub path: String,
    /// The trace file relative to the report's folder, for a link; `None` where the file is not
    /// beside its results file.
    pub link: Option<String>,
    /// Steps traced.
    pub steps: usize,
    /// Per activity, the operator with the most self time, in words.
    pub heaviest: String,
    /// The operator table, longest first per activity.
    pub operators: Vec<OperatorView>,
}

/// One row of a trace's operator table.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct OperatorView {
    /// The operator's or kernel's name.
    pub name: String,
    /// Where it ran ("CPU operator", "GPU kernel", "GPU copy or fill").
    pub activity: &'static str,
    /// Calls in the traced steps.
    pub calls: usize,
    /// Total duration over the traced steps, milliseconds, with 3 decimals.
    pub total_ms: String,
    /// Self duration over the traced steps, milliseconds, with 3 decimals.
    pub self_ms: String,
    /// The tensor input shapes of its longest call ("" where none are recorded).
    pub input_shapes: String,
}

/// The traced cells of `report`, in the order of its groups; `results_dirs[i]` is the folder the
/// `i`-th results file was read from (its trace paths are relative to it), `out_dir` the report's.
pub(crate) fn trace_views(report: &Report, results_dirs: &[PathBuf], out_dir: &Path) -> Vec<TraceView> {
    report
        .entries()
        .filter_map(|(_, e)| {
            let trace = e.cell.trace()?;
            let file = results_dirs.get(e.file).map(|dir| dir.join(&trace.path));
            Some(TraceView {
                cell_anchor: model::anchor(e),
                id: e.cell.id().to_string(),
                path: trace.path.clone(),
                link: file.and_then(|file| relative_link(out_dir, &file)),
                steps: trace.steps,
                heaviest: heaviest_text(&trace.operators, trace.steps),
                operators: trace.operators.iter().map(operator_view).collect(),
            })
        })
        .collect()
}

/// "most self time: CPU operator aten::convolution_backward 640.1 ms per step", one phrase per
/// activity: the row of the table with the largest self time, where the step's time is spent
/// (the longest totals belong to operators that mostly wait for those they call).
fn heaviest_text(operators: &[TraceOperator], steps: usize) -> String {
    let mut heaviest: Vec<&TraceOperator> = Vec::new();
    for o in operators {
        match heaviest.iter_mut().find(|h| h.activity == o.activity) {
            Some(h) if o.self_us > h.self_us => *h = o,
            Some(_) => {}
            None => heaviest.push(o),
        }
    }
    if heaviest.is_empty() {
        return "no operators recorded".to_owned();
    }
    let phrases: Vec<String> = heaviest
        .iter()
        .map(|o| {
            let per_step_ms = o.self_us / 1e3 / steps.max(1) as f64;
            format!("{} {} {per_step_ms:.1} ms per step", o.activity.label(), o.name)
        })
        .collect();
    format!("most self time: {}", phrases.join("; "))
}

fn operator_view(o: &TraceOperator) -> OperatorView {
    OperatorView {
        name: o.name.clone(),
        activity: o.activity.label(),
        calls: o.calls,
        total_ms: format!("{:.3}", o.total_us / 1e3),
        self_ms: format!("{:.3}", o.self_us / 1e3),
        input_shapes: o.input_shapes.clone().unwrap_or_default(),
    }
}
