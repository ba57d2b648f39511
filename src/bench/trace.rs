//! Which cells a run traces with the profiler (`run --trace [CELL_GLOB]`), and where each cell's
//! trace goes.

use std::path::PathBuf;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

use crate::bench::plan::Plan;
use crate::error::Error;
use crate::results::schema::{CellId, CellKey, CellKind};

/// The folder of a run's traces, inside its output folder.
pub const TRACES_DIR: &str = "traces";

/// How many ids a refused glob's message shows.
const IDS_SHOWN: usize = 4;

/// A shell-style glob over cell ids ([`CellKey::id`], `resnet8/baseline/b32/s0/train`): `*` matches
/// any run of characters, `/` included, `?` one character, `[…]` one of a set.
#[derive(Debug, Clone, PartialEq)]
pub struct CellGlob {
    pattern: glob::Pattern,
    /// Whether the A/A controls it matches are traced: a glob given with `--trace` traces them,
    /// the default leaves out these copies of the baseline.
    controls: bool,
}

impl FromStr for CellGlob {
    type Err = Error;

    fn from_str(s: &str) -> Result<Self, Error> {
        glob::Pattern::new(s)
            .map(|pattern| CellGlob { pattern, controls: true })
            .map_err(|e| Error::Invalid(format!("'{s}' is not a glob of cell ids: {e}")))
    }
}

impl CellGlob {
    /// A run's default: every cell (`*`) but the A/A controls.
    pub fn every_cell() -> Self {
        CellGlob { pattern: glob::Pattern::new("*").expect("`*` is a glob"), controls: false }
    }

    /// The glob as written.
    pub fn as_str(&self) -> &str {
        self.pattern.as_str()
    }

    /// Whether the cell `key` is traced: a training or evaluation throughput cell whose id
    /// matches (and that is not an A/A control, unless the glob was given).
    pub fn traces(&self, key: &CellKey) -> bool {
        traceable(key) && (self.controls || !key.aa_control) && self.pattern.matches(key.id().as_str())
    }

    /// Refuses a glob that matches none of `plan`'s applicable throughput cells, naming the glob
    /// and showing some of their ids. A plan with no cells (a batch sweep, whose cells follow from
    /// its probes) is not checked, nor the glob of every cell (a run without throughput cells
    /// traces none).
    pub fn check(&self, plan: &Plan) -> Result<(), Error> {
        if self.as_str() == "*" {
            return Ok(());
        }
        let ids: Vec<CellId> = plan
            .cells
            .iter()
            .filter(|c| c.not_applicable.is_none() && traceable(&c.key))
            .map(|c| c.key.id())
            .collect();
        if plan.cells.is_empty() || ids.iter().any(|id| self.pattern.matches(id.as_str())) {
            return Ok(());
        }
        if ids.is_empty() {
            return Err(Error::Invalid(format!(
                "--trace '{}': the run has no training or evaluation throughput cell to trace",
                self.as_str()
            )));
        }
        let shown: Vec<&str> = ids.iter().take(IDS_SHOWN).map(CellId::as_str).collect();
        Err(Error::Invalid(format!(
            "--trace '{}' matches none of the run's {} throughput cells; their ids look like {}{}",
            self.as_str(),
            ids.len(),
            shown.join(", "),
            if ids.len() > shown.len() { ", …" } else { "" }
        )))
    }
}

/// Whether a cell of `key` can be traced: it times training steps or evaluation batches
/// (time-to-accuracy cells and memory probes are not traced).
fn traceable(key: &CellKey) -> bool {
    matches!(key.kind, CellKind::Throughput { .. })
}

/// Where a cell process writes its trace.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TraceTarget {
    /// The run's output folder, which holds its results file.
    pub results_dir: PathBuf,
    /// The trace file relative to `results_dir`, with `/` separators ([`trace_file`]).
    pub file: String,
}

impl TraceTarget {
    /// The trace of cell `id` in the run whose output folder is `results_dir`.
    pub fn new(results_dir: PathBuf, id: &CellId) -> Self {
        Self { results_dir, file: trace_file(id) }
    }

    /// The trace file's path.
    pub fn path(&self) -> PathBuf {
        self.results_dir.join(&self.file)
    }
}

/// Where a cell process writes the profiler traces of the members it traces.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TraceTargets {
    /// The run's output folder, which holds its results file.
    pub results_dir: PathBuf,
    /// The cells whose steps the process traces.
    pub cells: Vec<CellId>,
}

impl TraceTargets {
    /// Where the trace of cell `id` goes, when the process traces it.
    pub fn target(&self, id: &CellId) -> Option<TraceTarget> {
        self.cells.contains(id).then(|| TraceTarget::new(self.results_dir.clone(), id))
    }
}

/// The trace file of cell `id`, relative to the results folder: `traces/` and the id with each `/`
/// as `_` (ids hold no `_`, so no two cells share a file), `.json.gz` (gzipped Chrome-trace JSON).
pub fn trace_file(id: &CellId) -> String {
    format!("{TRACES_DIR}/{}.json.gz", id.as_str().replace('/', "_"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bench::plan::PlannedCell;
    use crate::engine::Engine;
    use crate::results::schema::Phase;
    use crate::tricks::Trick;
    use crate::workloads::WorkloadId;

    fn key(tricks: &[Trick], kind: CellKind) -> CellKey {
        CellKey {
            workload: WorkloadId::Resnet8,
            tricks: tricks.iter().copied().collect(),
            batch_size: 32,
            seed: 0,
            kind,
            reference_for: None,
            aa_control: false,
            alone: false,
            engine: Engine::Libtorch,
        }
    }

    const TRAIN: CellKind = CellKind::Throughput { phase: Phase::Train };

    fn glob(s: &str) -> CellGlob {
        s.parse().unwrap()
    }

    #[test]
    fn a_glob_matches_throughput_cells_by_id_across_slashes() {
        let baseline = key(&[], TRAIN);
        let amp = key(&[Trick::ChannelsLast], TRAIN);
        let eval = key(&[], CellKind::Throughput { phase: Phase::Eval });
        assert!(glob("*").traces(&baseline) && glob("*").traces(&eval));
        assert!(glob("resnet8/baseline/*").traces(&baseline) && !glob("resnet8/baseline/*").traces(&amp));
        assert!(glob("*channels-last*").traces(&amp), "`*` crosses `/`");
        assert!(glob("*/train").traces(&amp) && !glob("*/train").traces(&eval));
        assert!(glob("resnet8/baseline/b3?/s0/[te]*").traces(&baseline));
        for kind in [CellKind::TimeToAccuracy, CellKind::MemoryProbe] {
            assert!(!glob("*").traces(&key(&[], kind)), "{kind:?} cells are not traced");
        }
        let control = CellKey { aa_control: true, ..baseline.clone() };
        assert!(!CellGlob::every_cell().traces(&control), "by default not the baseline's copy");
        assert!(glob("*").traces(&control), "a glob given traces the controls it matches");
        let error = "[".parse::<CellGlob>().unwrap_err().to_string();
        assert!(error.starts_with("'[' is not a glob of cell ids"), "{error}");
    }

    #[test]
    fn a_glob_matching_no_applicable_throughput_cell_is_refused_with_some_ids() {
        let planned = |key: CellKey, not_applicable: Option<&str>| PlannedCell {
            key,
            not_applicable: not_applicable.map(str::to_owned),
        };
        let plan = Plan {
            cells: vec![
                planned(key(&[], TRAIN), None),
                planned(key(&[Trick::Amp], TRAIN), Some("needs a CUDA GPU")),
                planned(key(&[], CellKind::TimeToAccuracy), None),
            ],
        };
        assert!(glob("resnet8/baseline/*").check(&plan).is_ok());
        let error = glob("gpt*").check(&plan).unwrap_err().to_string();
        assert_eq!(
            error,
            "--trace 'gpt*' matches none of the run's 1 throughput cells; their ids look like \
             resnet8/baseline/b32/s0/train"
        );
        assert!(glob("*/amp/*").check(&plan).is_err(), "a cell that cannot run is not traced");
        let only_tta = Plan { cells: vec![planned(key(&[], CellKind::TimeToAccuracy), None)] };
        let error = glob("*/train").check(&only_tta).unwrap_err().to_string();
        assert!(error.contains("no training or evaluation throughput cell"), "{error}");
        assert!(CellGlob::every_cell().check(&only_tta).is_ok(), "the default traces what there is");
        assert!(glob("gpt*").check(&Plan { cells: Vec::new() }).is_ok(), "a batch sweep's cells come later");
    }

    #[test]
    fn a_process_traces_the_members_its_targets_name() {
        let (traced, other) = (key(&[Trick::ChannelsLast], TRAIN).id(), key(&[], TRAIN).id());
        let targets = TraceTargets { results_dir: "runs/r".into(), cells: vec![traced.clone()] };
        assert_eq!(targets.target(&traced), Some(TraceTarget::new("runs/r".into(), &traced)));
        assert_eq!(targets.target(&other), None);
    }

    #[test]
    fn every_cell_has_its_own_trace_file() {
        let id = key(&[Trick::ChannelsLast, Trick::AvoidSync], TRAIN).id();
        assert_eq!(trace_file(&id), format!("traces/{}.json.gz", id.as_str().replace('/', "_")));
        assert!(!trace_file(&id)["traces/".len()..].contains('/'));
        let target = TraceTarget::new("runs/r".into(), &id);
        assert_eq!(target.path(), PathBuf::from("runs/r").join(trace_file(&id)));
    }
}
