//! How `compare` lines up its runs: as devices side by side, or as versions of one machine in the
//! order they started, each labelled by commit, date and libtorch version.

use std::collections::BTreeSet;

use chrono::{DateTime, Utc};

use crate::report::ReportError;
use crate::results::schema::Results;

/// How `trickbench compare` lines up its results files.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum)]
pub enum CompareBy {
    /// Versions when every file was measured on the same machine and device and the files differ
    /// in git commit or libtorch version; devices otherwise.
    #[default]
    Auto,
    /// Devices or machines side by side, in the order given, each against its own baseline.
    Device,
    /// Versions of one plan, in the order they started, each labelled by its commit, date and
    /// libtorch version; each trick's effect is drawn across them and changes are flagged.
    Version,
}

/// What a comparison's columns are, once decided.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Axis {
    /// Devices or machines, in the order given.
    Devices,
    /// Versions of one plan, oldest first.
    Versions,
}

/// How the runs were lined up, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct LineUp {
    /// Devices or versions.
    pub axis: Axis,
    /// Why, in words: what `--by` asked, and what auto-detection found.
    pub reason: String,
    /// The machines the runs were measured on, each once, in the order given.
    pub machines: Vec<String>,
}

/// One results file as a version: when it started and what it was built from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Version {
    /// Its index among the files given (0-based).
    pub file: usize,
    /// When the run started.
    pub started: DateTime<Utc>,
    /// The commit's first seven hex digits, with `-dirty` for a checkout with uncommitted changes;
    /// "no commit" for a build outside a git checkout.
    pub commit: String,
    /// Whether the checkout had uncommitted changes.
    pub dirty: bool,
    /// The libtorch version the binary was built against.
    pub libtorch: String,
    /// Its place in time, from 1: "#2".
    pub tick: String,
    /// "#2 · bd9426a-dirty · 2026-12-01 · libtorch 2.11.0".
    pub label: String,
}

/// The machine a run measured on: its hardware, its device where that is a GPU, and its host.
pub(crate) fn machine(r: &Results) -> String {
    let hardware = crate::report::compare::names::hardware_name(r);
    let device = if r.run.device.is_cuda() { format!(" {}", r.run.device) } else { String::new() };
    match &r.system.hostname {
        Some(host) => format!("{hardware}{device} on {host}"),
        None => format!("{hardware}{device}"),
    }
}

/// What a run was built from: its commit and libtorch version.
fn build(r: &Results) -> (Option<&str>, &str) {
    (r.run.git_commit.as_deref(), r.system.libtorch_version.as_str())
}

/// Decides how to line up `results` as `by` asks.
pub(crate) fn line_up(results: &[Results], by: CompareBy) -> LineUp {
    let mut machines: Vec<String> = Vec::new();
    for m in results.iter().map(machine) {
        if !machines.contains(&m) {
            machines.push(m);
        }
    }
    let builds: BTreeSet<(Option<&str>, &str)> = results.iter().map(build).collect();
    let (axis, reason) = match by {
        CompareBy::Device => (Axis::Devices, "--by device".to_owned()),
        CompareBy::Version => (Axis::Versions, "--by version".to_owned()),
        CompareBy::Auto if machines.len() > 1 => {
            (Axis::Devices, format!("auto: the runs are on {} machines", machines.len()))
        }
        CompareBy::Auto if builds.len() == 1 => (
            Axis::Devices,
            format!("auto: every run is {} at the same commit and libtorch version", machines[0]),
        ),
        CompareBy::Auto => (
            Axis::Versions,
            format!(
                "auto: every run is {}, at {} different commits or libtorch versions",
                machines[0],
                builds.len()
            ),
        ),
    };
    LineUp { axis, reason, machines }
}

/// `results` as versions, oldest first (runs that started at the same second keep the order
/// given). A start time that is not RFC 3339 is refused, naming the run.
pub(crate) fn versions(results: &[Results]) -> Result<Vec<Version>, ReportError> {
    let mut started: Vec<(usize, DateTime<Utc>)> = results
        .iter()
        .enumerate()
        .map(|(file, r)| {
            DateTime::parse_from_rfc3339(&r.run.started_at).map(|t| (file, t.with_timezone(&Utc))).map_err(
                |_| ReportError::StartTime { run: r.run.id.clone(), value: r.run.started_at.clone() },
            )
        })
        .collect::<Result<_, _>>()?;
    started.sort_by_key(|&(file, t)| (t, file));
    Ok(started
        .into_iter()
        .enumerate()
        .map(|(place, (file, started))| {
            let r = &results[file];
            let (commit, dirty) = short_commit(r.run.git_commit.as_deref());
            let tick = format!("#{}", place + 1);
            let libtorch = r.system.libtorch_version.clone();
            let label = format!("{tick} · {commit} · {} · libtorch {libtorch}", started.format("%Y-%m-%d"));
            Version { file, started, commit, dirty, libtorch, tick, label }
        })
        .collect())
}

/// A commit as a label: its first seven hex digits, `-dirty` kept; and whether it was dirty.
pub(crate) fn short_commit(commit: Option<&str>) -> (String, bool) {
    let Some(commit) = commit else {
        return ("no commit".to_owned(), false);
    };
    let (hash, dirty) = match commit.strip_suffix("-dirty") {
        Some(hash) => (hash, true),
        None => (commit, false),
    };
    let short: String = hash.chars().take(7).collect();
    (if dirty { format!("{short}-dirty") } else { short }, dirty)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::history::tests::run;

    #[test]
    fn commits_are_shortened_and_dirty_ones_marked() {
        assert_eq!(short_commit(Some("823dfe4384be79a49da917d91b88afe3769cf734")), ("823dfe4".into(), false));
        assert_eq!(
            short_commit(Some("bd9426a97aabc2acba823fef10f793f23c0bd338-dirty")),
            ("bd9426a-dirty".into(), true)
        );
        assert_eq!(short_commit(None), ("no commit".into(), false));
    }

    #[test]
    fn versions_are_ordered_by_start_time_and_labelled() {
        let newer = run("b", "2026-12-01T12:01:30Z", "bbbbbbbbbbbb-dirty");
        let older = run("a", "2026-11-30T10:29:25+01:00", "aaaaaaaaaaaa");
        let versions = versions(&[newer, older]).unwrap();
        assert_eq!(versions.iter().map(|v| v.file).collect::<Vec<_>>(), vec![1, 0]);
        assert_eq!(versions[0].label, "#1 · aaaaaaa · 2026-11-30 · libtorch 2.11.0");
        assert_eq!(versions[1].label, "#2 · bbbbbbb-dirty · 2026-12-01 · libtorch 2.11.0");
        assert!(versions[1].dirty && !versions[0].dirty);
    }

    #[test]
    fn a_start_time_that_is_not_rfc_3339_is_refused_naming_the_run() {
        let bad = run("odd-run", "yesterday", "aaaaaaa");
        let error = versions(&[bad]).unwrap_err().to_string();
        assert!(error.contains("odd-run") && error.contains("'yesterday'"), "{error}");
    }

    #[test]
    fn auto_lines_up_one_machine_at_several_builds_as_versions() {
        let (a, b) =
            (run("a", "2026-11-30T10:00:00Z", "aaaaaaa"), run("b", "2026-12-01T10:00:00Z", "bbbbbbb"));
        let up = line_up(&[a.clone(), b.clone()], CompareBy::Auto);
        assert_eq!(up.axis, Axis::Versions, "{}", up.reason);
        assert!(up.reason.contains("2 different commits"), "{}", up.reason);

        let mut libtorch = a.clone();
        libtorch.system.libtorch_version = "2.12.0".into();
        assert_eq!(line_up(&[a.clone(), libtorch], CompareBy::Auto).axis, Axis::Versions);

        let same_build = line_up(&[a.clone(), a.clone()], CompareBy::Auto);
        assert_eq!(same_build.axis, Axis::Devices, "{}", same_build.reason);

        let mut elsewhere = b.clone();
        elsewhere.system.hostname = Some("other-host".into());
        let two_machines = line_up(&[a.clone(), elsewhere.clone()], CompareBy::Auto);
        assert_eq!((two_machines.axis, two_machines.machines.len()), (Axis::Devices, 2));
        assert_eq!(line_up(&[a, elsewhere], CompareBy::Version).axis, Axis::Versions);
        assert_eq!(line_up(&[b.clone(), b], CompareBy::Device).reason, "--by device");
    }
}
