//! The vocabulary a run's results are written in: the small value types that `results.json`
//! records, with their names on the command line and in the file. The designs, profiles and host
//! allocators ([`run`]), the tricks and sets of them ([`trick`]), the workloads and their families
//! ([`workload`]), the held-out quality metrics ([`quality`]), the precision and attention
//! kernels a cell ran ([`numerics`]), the parts of a step a trick acts on ([`part`]), and the calls a rehearsal of a GPU run stands in for
//! ([`standin`]).
//!
//! It imports nothing above the error type (which a name that is none of these converts into), so
//! that the results contract (`results/`) can record these values without depending on the
//! layers that measure. What each value does is
//! implemented where it acts, as `impl` blocks on the same types: a trick's facts in the catalogue
//! (`tricks/`), a workload's model in `workloads/`, a design's phases in `bench/`.

pub mod numerics;
pub mod part;
pub mod quality;
pub mod run;
pub mod standin;
pub mod trick;
pub mod workload;

pub use numerics::{AttentionBackend, Precision};
pub use part::StepPart;
pub use quality::QualityMetric;
pub use run::{Design, HostAllocator, ProfileName, ProfileRequest, TtaSettings, PROFILE_REQUESTS};
pub use standin::StandIn;
pub use trick::{MemoryFigure, Metric, Trick, TrickSet};
pub use workload::{Family, WorkloadId};

/// A name that is none of the vocabulary's values of its kind, with the names that are: the
/// error of every `FromStr` here, so also of a results file that spells a value wrongly.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown {kind} '{given}'; valid {kind}s: {valid}")]
pub struct UnknownName {
    /// The kind of name (`trick`, `workload`, `design`, `profile`).
    pub kind: &'static str,
    /// The name given.
    pub given: String,
    /// The valid names, in words.
    pub valid: String,
}

impl From<UnknownName> for crate::error::Error {
    fn from(error: UnknownName) -> Self {
        crate::error::Error::Module(Box::new(error))
    }
}
