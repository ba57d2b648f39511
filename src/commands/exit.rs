//! The exit status of a failed command, decided from its error's chain of causes: the one place
//! that maps the library's errors, and those of its modules, onto statuses.

use trickbench::bench::lock::LockError;
use trickbench::data::cifar::DataError;
use trickbench::error::Error;
use trickbench::report::gate::GateError;
use trickbench::report::ReportError;
use trickbench::results::merge::MergeError;
use trickbench::results::store::StoreError;
use trickbench::vocabulary::UnknownName;

/// Exit status of a command refused before it did anything: a flag, value or input file is wrong
/// (named in the message), or another process is writing into the output folder. clap exits with
/// the same status for arguments it cannot parse.
pub const USAGE_STATUS: u8 = 2;

/// Exit status of a run that finished, its results and report written, with cells that failed,
/// timed out or ran out of memory ([`Error::CellsFailed`]).
pub const CELLS_FAILED_STATUS: u8 = 3;

/// Exit status of a `cell` process whose cell cannot run here, found only when it ran
/// ([`Error::NotApplicable`]): its parent records the cell as not applicable with the reason on
/// the last `error:` line of its stderr.
pub const NOT_APPLICABLE_STATUS: u8 = trickbench::bench::cell_process::NOT_APPLICABLE_STATUS;

/// Exit status of `compare --fail-on regression` that found a confident regression
/// ([`GateFailed`]), its files written. It shares 1 with failures that are no bad input (a file
/// that cannot be written, say), which the message on stderr tells apart: "the gate failed: …"
/// for a regression, the file and what went wrong for a failure.
pub const REGRESSION_STATUS: u8 = 1;

/// The outcome of `compare --fail-on regression` that found a confident regression: the command
/// did its work (the gate's files are written); what it gates failed.
#[derive(Debug, thiserror::Error)]
#[error(
    "the gate failed: {regressions} confident regression{}, listed in {}",
    if *regressions == 1 { "" } else { "s" },
    markdown.display()
)]
pub struct GateFailed {
    /// How many quantities regressed confidently.
    pub regressions: usize,
    /// The gate's Markdown summary.
    pub markdown: std::path::PathBuf,
}

/// The exit status one cause in an error's chain decides, if it decides one: 128 + the signal for
/// an interrupted run (130, 143), [`CELLS_FAILED_STATUS`], [`NOT_APPLICABLE_STATUS`], [`USAGE_STATUS`] for bad input
/// (invalid values, unknown names, malformed or missing data files, files that are not results or of a newer
/// schema, shards that do not merge, a held output folder, results that make no history, runs the
/// gate refuses), [`REGRESSION_STATUS`] for a gate that found a regression, 1 for other failures
/// of the library; `None` for causes
/// that leave it to the next one in the chain (a command takes the first decision, else exits
/// with 1).
pub fn exit_status(cause: &(dyn std::error::Error + 'static)) -> Option<u8> {
    if let Some(error) = cause.downcast_ref::<Error>() {
        return library_status(error);
    }
    if let Some(error) = cause.downcast_ref::<DataError>() {
        return (!matches!(error, DataError::Io { .. })).then_some(USAGE_STATUS);
    }
    if let Some(error) = cause.downcast_ref::<LockError>() {
        return matches!(error, LockError::Held { .. }).then_some(USAGE_STATUS);
    }
    if let Some(error) = cause.downcast_ref::<StoreError>() {
        return match error {
            StoreError::NotResults { .. } | StoreError::NewerSchema { .. } | StoreError::Parse { .. } => {
                Some(USAGE_STATUS)
            }
            StoreError::Write { .. } => Some(1),
            StoreError::Read { .. } | StoreError::Json { .. } => None,
        };
    }
    if cause.is::<GateFailed>() {
        return Some(REGRESSION_STATUS);
    }
    if let Some(error) = cause.downcast_ref::<GateError>() {
        // A file that cannot be written is left to its cause.
        return (!matches!(error, GateError::Write(_))).then_some(USAGE_STATUS);
    }
    if cause.is::<MergeError>() || cause.is::<UnknownName>() {
        return Some(USAGE_STATUS);
    }
    if let Some(error) = cause.downcast_ref::<ReportError>() {
        let refused = matches!(error, ReportError::StartTime { .. } | ReportError::NothingShared { .. });
        return refused.then_some(USAGE_STATUS);
    }
    // A file named on the command line that is not there.
    let missing =
        cause.downcast_ref::<std::io::Error>().is_some_and(|e| e.kind() == std::io::ErrorKind::NotFound);
    missing.then_some(USAGE_STATUS)
}

/// The status the library's own error decides, if it decides one.
fn library_status(error: &Error) -> Option<u8> {
    match error {
        Error::Interrupted { signal, .. } => u8::try_from(128 + signal).ok(),
        Error::CellsFailed { .. } => Some(CELLS_FAILED_STATUS),
        Error::NotApplicable(_) => Some(NOT_APPLICABLE_STATUS),
        Error::Invalid(_) => Some(USAGE_STATUS),
        // A module's error decides, next in the chain.
        Error::Module(_) | Error::Io { .. } | Error::Json { .. } | Error::Context { .. } => None,
        Error::Torch(_) | Error::OutOfMemory(_) | Error::Distributed(_) | Error::Process(_) => Some(1),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn status(error: impl std::error::Error + 'static) -> Option<u8> {
        exit_status(&error)
    }

    /// The statuses the causes of `error`'s chain decide, in order.
    fn chain(error: &(dyn std::error::Error + 'static)) -> Vec<Option<u8>> {
        std::iter::successors(Some(error), |e| e.source()).map(exit_status).collect()
    }

    #[test]
    fn bad_input_failed_cells_and_signals_have_their_own_statuses() {
        let format = || DataError::Format { path: "x.bin".into(), problem: "size 5".into() };
        let not_found = || std::io::Error::from(std::io::ErrorKind::NotFound);
        assert_eq!(status(Error::Invalid("--seeds 0".into())), Some(USAGE_STATUS));
        let unknown = "turbo".parse::<trickbench::tricks::Trick>().unwrap_err();
        assert_eq!(chain(&Error::from(unknown)), [None, Some(USAGE_STATUS)], "a name that is no trick");
        assert_eq!(status(format()), Some(USAGE_STATUS));
        assert_eq!(chain(&Error::from(format())), [None, Some(USAGE_STATUS)], "the module's error decides");
        assert_eq!(status(not_found()), Some(USAGE_STATUS));
        assert_eq!(status(Error::CellsFailed { failed: 1, cells: 2, results: "r.json".into() }), Some(3));
        assert_eq!(status(Error::Interrupted { signal: libc::SIGTERM, results: "r.json".into() }), Some(143));
        let write = StoreError::Write { path: "r.json".into(), source: not_found() };
        let failed_write = chain(&Error::from(write));
        assert_eq!(failed_write[..2], [None, Some(1)], "a failed write is no bad usage, whatever its cause");
        let newer = StoreError::NewerSchema { path: "r.json".into(), found: 99 };
        assert_eq!(status(newer), Some(USAGE_STATUS), "a results file this build cannot read");
        let not_json = serde_json::from_str::<serde_json::Value>("{not json").unwrap_err();
        let garbage = StoreError::Parse { path: "r.json".into(), source: not_json };
        assert_eq!(status(garbage), Some(USAGE_STATUS), "a file that is not results is bad input");
        let unreadable = Error::from(StoreError::Read { path: "r.json".into(), source: not_found() });
        assert_eq!(chain(&unreadable), [None, None, Some(USAGE_STATUS)], "a missing file is bad usage");
        // Left to the cause in the chain: an I/O error is bad usage only for a missing file.
        assert_eq!(status(Error::io("r.json", not_found())), None);
        let in_context = Error::Invalid("--seeds 0".into()).context("--text");
        assert_eq!(
            chain(&in_context),
            [None, Some(USAGE_STATUS)],
            "a context leaves the status to what failed in it"
        );
        assert_eq!(status(std::io::Error::from(std::io::ErrorKind::PermissionDenied)), None);
        let not_applicable =
            Error::not_applicable("sdpa-flash: no kernel").context("cell gpt-mini/sdpa-flash");
        assert_eq!(
            chain(&not_applicable),
            [None, Some(NOT_APPLICABLE_STATUS)],
            "a cell that cannot run here"
        );
        let unshared = ReportError::NothingShared { runs: "#1 a; #2 b".into() };
        assert_eq!(status(unshared), Some(USAGE_STATUS));
    }

    #[test]
    fn a_regression_exits_with_1_and_a_refused_gate_with_2() {
        let regressed = GateFailed { regressions: 2, markdown: "out/gate.md".into() };
        assert_eq!(regressed.to_string(), "the gate failed: 2 confident regressions, listed in out/gate.md");
        assert_eq!(status(regressed), Some(REGRESSION_STATUS));
        assert_eq!(
            status(GateError::NothingCompared { base: "a".into(), new: "b".into() }),
            Some(USAGE_STATUS)
        );
        assert_eq!(status(GateError::Incomparable { differences: Vec::new() }), Some(USAGE_STATUS));
        let write = StoreError::Write {
            path: "out/gate.md".into(),
            source: std::io::Error::from(std::io::ErrorKind::NotFound),
        };
        let failed_write = chain(&GateError::Write(write));
        assert_eq!(failed_write[..2], [None, Some(1)], "a failed write, not bad usage");
    }
}
