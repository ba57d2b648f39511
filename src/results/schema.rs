//! The results file: the only contract between measuring and reporting. Every report can be
//! re-rendered from it. Field names carry their units; times are wall-clock seconds.

use serde::{Deserialize, Serialize};

use crate::device::DeviceSpec;
pub use crate::engine::Engine;
use crate::results::diagnosis::Diagnosis;
use crate::results::energy::{Energy, EnergyMethod};
use crate::results::factorial::FactorialAnalysis;
use crate::results::machine::MachineState;
use crate::results::phases::StepBreakdown;
use crate::results::system::SystemInfo;
use crate::results::traced::TracedStep;
use crate::stats;
use crate::vocabulary::{
    AttentionBackend, Design, Family, HostAllocator, MemoryFigure, Metric, Precision, ProfileName,
    ProfileRequest, QualityMetric, StandIn, Trick, TrickSet, TtaSettings, WorkloadId,
};

/// The version of this schema. Readers refuse files with a newer version and upgrade older ones
/// ([`crate::results::migrate`]).
pub const SCHEMA_VERSION: u32 = 3;

/// Everything one `trickbench run` measured.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Results {
    /// Version of this schema ([`SCHEMA_VERSION`] when written by this build).
    pub schema_version: u32,
    /// What was run, how and when.
    pub run: RunInfo,
    /// The machine and software stack that produced the numbers.
    pub system: SystemInfo,
    /// One entry per planned cell, in plan order (pending cells are absent until measured).
    pub cells: Vec<CellResult>,
    /// Each trick cell against its baseline, derived from `cells`.
    pub comparisons: Vec<Comparison>,
    /// Time-to-accuracy per configuration over its seeds, each against its reference, derived
    /// from `cells`.
    pub time_to_accuracy: Vec<TtaSummary>,
    /// Each workload's noise floor, from its A/A control cell, derived from `cells`.
    pub noise_floors: Vec<NoiseFloor>,
    /// The speedrun design's choice of tricks, one per workload (empty for the other designs).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub speedrun: Vec<SpeedrunChoice>,
    /// The factorial design's main effects and interactions, one per workload and engine, derived
    /// from `cells` (empty for the other designs).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub factorial: Vec<FactorialAnalysis>,
}

/// What the speedrun design combined for one workload, from the tricks' measured effects, and
/// what it decided about every trick measured.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SpeedrunChoice {
    /// The workload.
    pub workload: WorkloadId,
    /// The engine whose effects chose the combination and which trains it (absent: libtorch).
    #[serde(default, skip_serializing_if = "Engine::is_libtorch")]
    pub engine: Engine,
    /// Where the effects were measured: `this run` (its own ablation), or the `--from` files.
    pub evidence: Vec<String>,
    /// Samples per optimizer step of both the baseline's and the combination's time-to-accuracy
    /// cells.
    pub batch_size: usize,
    /// The combination: the tricks added, in the order they were added (largest effect first).
    pub combination: Vec<Trick>,
    /// Every trick measured for the workload, in the order considered, with what was decided.
    pub tricks: Vec<SpeedrunTrick>,
    /// The half-width of the workload's A/A noise floor (a fraction: 0.04 is ±4%) by which a
    /// time-to-target effect had to exceed 1 to count; `None` where no A/A control was measured.
    pub noise_floor_half_width: Option<f64>,
}

/// One trick the speedrun design considered.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SpeedrunTrick {
    /// The trick.
    pub trick: Trick,
    /// What the trick is judged by.
    pub metric: Metric,
    /// Its measured effect in words ("1.18× [1.05, 1.31] training throughput", "1.25× sooner
    /// than baseline b64, 3 seeds").
    pub effect: String,
    /// What was decided.
    pub decision: SpeedrunDecision,
    /// Why it is not in the combination; `None` for a trick added.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}

/// What the speedrun design decided about a trick.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum SpeedrunDecision {
    /// Its effect was significant and it goes with the tricks added before it: in the combination.
    Added,
    /// Its effect was significant, but it cannot run with the tricks added before it.
    Refused,
    /// Its effect was not significant.
    NotSignificant,
    /// It is not a speed trick for this combination (memory, evaluation, judged against its own
    /// reference, or measured at another batch size).
    LeftOut,
}

/// What this machine can resolve for one workload: the A/A control (the baseline measured again
/// under its own name, interleaved like a trick) against the baseline. A trick whose speed-up
/// lies within 1 ± `half_width` is not distinguishable from noise on this machine.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct NoiseFloor {
    /// The workload.
    pub workload: WorkloadId,
    /// Id of the A/A control cell.
    pub control: CellId,
    /// Id of the baseline cell.
    pub baseline: CellId,
    /// Control ÷ baseline median throughput (1 on a machine without noise).
    pub ratio: f64,
    /// Lower end of the ratio's bootstrap confidence interval.
    pub ratio_ci_low: f64,
    /// Upper end of the ratio's bootstrap confidence interval.
    pub ratio_ci_high: f64,
    /// The largest distance from 1 of the ratio and its interval's ends, a fraction (0.04: ±4%).
    pub half_width: f64,
    /// The design the floor holds for: the A/A control paired with the baseline in its processes,
    /// or the two measured in processes of their own.
    pub design: MeasurementDesign,
    /// The engine whose cells the floor holds for (libtorch in files that predate engines).
    #[serde(default, skip_serializing_if = "Engine::is_libtorch")]
    pub engine: Engine,
}

impl NoiseFloor {
    /// The floor in words, for the workload named `name`: "noise floor of resnet8 (A/A control,
    /// …): 1.02× [0.97, 1.06]; paired speed-ups within ±6.0% are not distinguishable from noise on
    /// this machine".
    pub fn text(&self, name: &str) -> String {
        let (control, effects) = match self.design {
            MeasurementDesign::Paired => {
                ("a copy of the baseline paired with it in each process", "paired speed-ups")
            }
            MeasurementDesign::Processes => (
                "the baseline measured again in processes of its own",
                "speed-ups measured in separate processes",
            ),
        };
        let engine = match self.engine {
            Engine::Libtorch => String::new(),
            other => format!(" on the {other} engine"),
        };
        format!(
            "noise floor of {name}{engine} (A/A control, {control}): {:.2}× [{:.2}, {:.2}]; {effects} within \
             ±{:.1}% are not distinguishable from noise on this machine",
            self.ratio,
            self.ratio_ci_low,
            self.ratio_ci_high,
            self.half_width * 100.0
        )
    }
}

impl TtaSummary {
    /// The configuration at its batch size ("baseline b64"), as [`TtaSummary::reference`] names
    /// the configuration another one is compared with.
    pub fn label(&self) -> String {
        format!("{} b{}", self.configuration, self.batch_size)
    }

    /// The configuration as a cell id names it, without the seed: `resnet8/one-cycle/b64`, with
    /// `@pytorch` on the PyTorch engine.
    pub fn id(&self) -> String {
        let on = if self.engine.is_libtorch() { String::new() } else { format!("@{}", self.engine) };
        format!("{}/{}/b{}{on}", self.workload, self.configuration, self.batch_size)
    }

    /// The comparison with the reference in words: "1.25× sooner (1.20× fewer epochs) than
    /// baseline b64", "1.43× slower (1.50× more epochs) than baseline b64", or which side did not
    /// reach the target; `None` without a reference.
    pub fn versus_text(&self) -> Option<String> {
        let reference = self.reference.as_deref()?;
        Some(match (self.speedup, self.epochs_speedup, self.median_time_to_target_s.is_some()) {
            (Some(time), Some(epochs), _) => {
                format!("{} ({}) than {reference}", time_ratio_text(time), epochs_ratio_text(epochs))
            }
            (Some(time), None, _) => format!("{} than {reference}", time_ratio_text(time)),
            (None, _, true) => format!("reached it; {reference} did not"),
            (None, _, false) if self.reference_reached == Some(true) => {
                format!("did not reach it; {reference} did")
            }
            (None, _, false) => format!("neither this nor {reference} reached it"),
        })
    }
}

/// A time-to-target ratio (reference time ÷ this time) in words, never a ratio below one:
/// 1.2 → "1.20× sooner", 0.7 → "1.43× slower", 1 → "as fast".
pub fn time_ratio_text(speedup: f64) -> String {
    ratio_words(speedup, "sooner", "slower", "as fast")
}

/// An epochs-to-target ratio (reference epochs ÷ these) in words: "1.20× fewer epochs",
/// "1.50× more epochs", "as many epochs".
pub fn epochs_ratio_text(speedup: f64) -> String {
    ratio_words(speedup, "fewer epochs", "more epochs", "as many epochs")
}

/// `ratio` as "N× better" when above one and "(1/ratio)× worse" when below, to two decimals.
fn ratio_words(ratio: f64, better: &str, worse: &str, same: &str) -> String {
    let (shown_better, shown_worse) = (format!("{ratio:.2}"), format!("{:.2}", 1.0 / ratio));
    if shown_better == "1.00" || shown_worse == "1.00" {
        same.to_owned()
    } else if ratio > 1.0 {
        format!("{shown_better}× {better}")
    } else {
        format!("{shown_worse}× {worse}")
    }
}

/// A relative half-width that exceeds `target` as a percentage, to one decimal, or to two where one
/// would print the target itself (0.0304 beside 0.03: "3.04%", not "3.0%").
fn percent_beyond(half_width: f64, target: f64) -> String {
    let one = format!("{:.1}%", half_width * 100.0);
    if one == format!("{:.1}%", target * 100.0) {
        format!("{:.2}%", half_width * 100.0)
    } else {
        one
    }
}

/// One time-to-accuracy configuration (workload, tricks or reference, batch size) over its seeds.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TtaSummary {
    /// The workload.
    pub workload: WorkloadId,
    /// The configuration ([`CellKey::configuration_label`]).
    pub configuration: String,
    /// The tricks switched on.
    pub tricks: TrickSet,
    /// The trick whose reference ("off") configuration this is, if it is one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reference_for: Option<Trick>,
    /// Samples per optimizer step.
    pub batch_size: usize,
    /// The engine its cells trained on (absent: libtorch).
    #[serde(default, skip_serializing_if = "Engine::is_libtorch")]
    pub engine: Engine,
    /// The ids of the cells, one per seed, that finished.
    pub cells: Vec<CellId>,
    /// The metric of its target (`test_accuracy`, a fraction, or `validation_loss`).
    pub metric: QualityMetric,
    /// The target value of the metric.
    pub target: f64,
    /// Seeds that finished training (reached the target or ran out of budget).
    pub seeds: usize,
    /// Seeds that reached the target.
    pub reached: usize,
    /// Median over seeds of the training time to the target, seconds (evaluation excluded); a
    /// seed that never reached it counts as infinitely slow, so this is `None` unless more than
    /// half of the seeds reached it.
    pub median_time_to_target_s: Option<f64>,
    /// Median over seeds of the wall time to the target, evaluation included, seconds (same rule).
    pub median_wall_time_to_target_s: Option<f64>,
    /// Median over seeds of the epochs to the target (same rule).
    pub median_epochs_to_target: Option<f64>,
    /// Median over seeds of the best metric seen.
    pub median_best_metric: f64,
    /// The configuration this one is compared with (its reference or the baseline), if measured.
    pub reference: Option<String>,
    /// The reference's median time to target ÷ this one's (>1: reaches the target sooner); `None`
    /// when either median is missing.
    pub speedup: Option<f64>,
    /// The reference's median epochs to target ÷ this one's (>1: needs fewer epochs). Unlike
    /// time, epochs do not depend on how busy the machine was.
    pub epochs_speedup: Option<f64>,
    /// Whether the reference reached the target with a median (`None` without a reference).
    pub reference_reached: Option<bool>,
}

/// What was run, how and when.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunInfo {
    /// Run identifier (also the name of its directory under `reports/runs/`).
    pub id: String,
    /// When the run started (RFC 3339, UTC).
    pub started_at: String,
    /// When the last cell finished (RFC 3339, UTC); `None` while the run is in progress.
    pub finished_at: Option<String>,
    /// The trickbench version that measured.
    pub trickbench_version: String,
    /// The git commit of the trickbench checkout that was built (`None` outside a git checkout).
    pub git_commit: Option<String>,
    /// The command line of the run.
    pub command: Vec<String>,
    /// The measurement profile picked (`smoke`, `quick`, `standard`, `full`).
    pub profile: ProfileName,
    /// How the profile was chosen and changed: what `--profile` asked for, the profile file, and
    /// the settings of each family.
    pub profile_settings: ProfileSettings,
    /// The experimental design (`ablation`, `leave-one-out`, `stack`, `batch-sweep`,
    /// `super-convergence`, `speedrun`).
    pub design: Design,
    /// The device measured (`cpu`, `cuda:0`).
    pub device: DeviceSpec,
    /// The data the cells trained on: the run's first dataset (CIFAR-10 when a ResNet ran).
    pub data: DataInfo,
    /// Further datasets, when workloads of several families ran (the GPT's text beside CIFAR-10).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub more_data: Vec<DataInfo>,
    /// The measurement protocol in force.
    pub protocol: Protocol,
    /// The part of a sharded sweep this file holds (`run --shard i/n`); `None` for a whole run.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub shard: Option<ShardRecord>,
    /// The shards this file was merged from (`trickbench merge`); `None` unless merged.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub merged: Option<MergeRecord>,
    /// The user's own network, measured as the `model` workload (`run --model`); `None` when the
    /// run measured reference workloads only.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<crate::results::model::UserModel>,
}

impl RunInfo {
    /// The name of `workload` in this run: its id, or the user's model's name for `model`.
    pub fn workload_name(&self, workload: WorkloadId) -> &str {
        match &self.model {
            Some(model) if workload == WorkloadId::Model => &model.name,
            _ => workload.id(),
        }
    }

    /// Every dataset of the run, the first one first.
    pub fn datasets(&self) -> impl Iterator<Item = &DataInfo> {
        std::iter::once(&self.data).chain(&self.more_data)
    }

    /// The profile in words, with why `auto` picked it: "quick profile (auto: no CUDA GPU)".
    pub fn profile_text(&self) -> String {
        profile_text(self.profile.id(), self.profile_settings.reason.as_deref())
    }
}

/// Profile `name` in words, with the `reason` why `auto` picked it, if it did: "quick profile
/// (auto: no CUDA GPU)", "full profile".
pub fn profile_text(name: &str, reason: Option<&str>) -> String {
    match reason {
        Some(reason) => format!("{name} profile (auto: {reason})"),
        None => format!("{name} profile"),
    }
}

/// How a run's profile was chosen, and the settings of each family it trains.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ProfileSettings {
    /// What `--profile` asked for: `auto` or a profile's name (`None` in version 1 files that
    /// predate it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub asked: Option<ProfileRequest>,
    /// Why `auto` picked [`RunInfo::profile`] ("no CUDA GPU", "CUDA GPU cuda:0"); `None` for a
    /// profile asked for by name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// The profile file whose values replaced the profile's (`run --profile-file`), as given.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub file: Option<String>,
    /// The settings in force for each family the run trains: the profile's, replaced by the
    /// profile file's, replaced by the flags'. Every cell process follows its family's. The
    /// measurement protocol, the same for every family, is [`RunInfo::protocol`].
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub families: Vec<FamilySettings>,
}

/// The settings of one family of workloads in a run, besides the measurement protocol.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FamilySettings {
    /// The family: `resnet` or `gpt`.
    pub family: Family,
    /// Samples per step of the throughput cells unless `run --batch-size` says otherwise: images,
    /// or windows of the context length.
    pub batch_size: usize,
    /// Training images used (`None`: all; the GPT always trains on its whole training split).
    pub train_samples: Option<usize>,
    /// Held-out samples evaluated: test images, or validation windows (`None`: all).
    pub test_samples: Option<usize>,
    /// How the time-to-accuracy cells train and when they stop.
    pub time_to_accuracy: TtaSettings,
}

impl FamilySettings {
    /// The settings in words: "batch 128; time to accuracy: test accuracy ≥ 60.0% within 240 s
    /// of training, schedule over 3 epochs, batch 64, evaluated every 100 steps, learning rate
    /// 0.05".
    pub fn text(&self) -> String {
        let tta = &self.time_to_accuracy;
        let metric = self.family.quality_metric();
        let length = match tta.planned_steps {
            Some(steps) => format!("{steps} steps"),
            None => format!("{} epochs", tta.planned_epochs),
        };
        format!(
            "batch {}; time to accuracy: {} within {} s of training, schedule over {length}, batch {}, \
             evaluated every {} steps, learning rate {}",
            self.batch_size,
            metric.target_text(tta.target),
            tta.budget_s,
            tta.batch_size,
            tta.eval_every_steps,
            tta.base_lr
        )
    }
}

/// Which part of a sharded sweep a results file holds, and the plan it is part of (see
/// [`crate::bench::shard`]).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ShardRecord {
    /// This shard's index, from 0.
    pub index: usize,
    /// How many shards the plan was split into.
    pub count: usize,
    /// Hex SHA-256 of the plan: design, profile, device, protocol, settings of the families,
    /// datasets (without their paths), units and known cells. Shards of one sweep have the same
    /// fingerprint.
    pub fingerprint: String,
    /// The plan's shard units in plan order; unit `k` belongs to shard `k mod count`.
    pub units: Vec<String>,
    /// The cells of the whole plan known before anything is measured, in plan order (probes, and
    /// cells planned from measurements, such as the stack's, come later).
    pub cells: Vec<ShardCell>,
}

/// A cell of a sharded plan, known before anything is measured.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ShardCell {
    /// The cell's id ([`CellKey::id`]).
    pub id: CellId,
    /// Its unit: an index into [`ShardRecord::units`].
    pub unit: usize,
    /// Whether the cell is not applicable (it is recorded, never run).
    pub not_applicable: bool,
}

/// Where a merged results file came from.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct MergeRecord {
    /// How many shards the plan was split into.
    pub shard_count: usize,
    /// The fingerprint every merged shard carried ([`ShardRecord::fingerprint`]).
    pub fingerprint: String,
    /// The indices of the shards merged, ascending.
    pub shards: Vec<usize>,
    /// The results files merged, in the order of `shards`.
    pub files: Vec<String>,
    /// What was missing when the merge was written anyway (`merge --allow-missing`): absent shards,
    /// shards that did not finish, and the known cells they lacked. Empty for a complete merge.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub missing: Vec<String>,
}

/// The dataset the run used.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DataInfo {
    /// Dataset name (`cifar10`, or the text file's name).
    pub name: String,
    /// Directory it was read from.
    pub path: String,
    /// True when the data is the synthetic stand-in, not real CIFAR-10: every figure of the run is
    /// then about synthetic data.
    pub synthetic: bool,
    /// Training samples used: images, or tokens of the training split.
    pub train_samples: usize,
    /// Held-out samples used for evaluation: test images, or validation tokens.
    pub test_samples: usize,
    /// What a sample is (`images`, `tokens`).
    pub sample_unit: String,
}

/// How throughput and time-to-accuracy are measured.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Protocol {
    /// Untimed steps at the start of each cell process (autotuning, allocator growth, caches).
    pub warmup_steps: usize,
    /// Timed windows per cell process; the device is synchronised at each window's edges.
    pub windows_per_process: usize,
    /// Training steps (or evaluation batches) per timed window.
    pub steps_per_window: usize,
    /// Processes per cell. Cells run in rounds: baseline and trick cells alternate, with the
    /// order reversed every other round so that drift hits both sides equally.
    pub rounds: usize,
    /// Bootstrap resamples behind every confidence interval.
    pub bootstrap_resamples: usize,
    /// Confidence level of the intervals (0.95).
    pub confidence_level: f64,
    /// Wall-clock limit for one cell process, seconds.
    pub cell_timeout_s: f64,
    /// Seeds per time-to-accuracy configuration.
    pub time_to_accuracy_seeds: usize,
    /// Peak memory a cell may use before it counts as out of memory, bytes (`None`: the device's
    /// own limit).
    pub memory_budget_bytes: Option<u64>,
    /// The precision asked of a cell's median throughput: half the width of its interval as a
    /// fraction of the median (0.03: ±3%). A process adds windows beyond `windows_per_process`
    /// until its own interval is this narrow or `max_windows_per_process` is reached, and a cell
    /// whose interval stays wider carries a noise warning.
    pub target_ci_half_width: Option<f64>,
    /// The most timed windows a process runs while its interval is wider than asked.
    pub max_windows_per_process: Option<usize>,
    /// Seed of the rounds' orders: each round opens with a warm-up process (its measurement
    /// discarded), then runs every throughput cell once in a random order drawn from this seed
    /// and the round (see [`crate::bench::plan::Plan::schedule`]). `None` in results written
    /// when rounds alternated direction, without a warm-up process.
    pub order_seed: Option<u64>,
    /// How trick cells are measured against their references: `paired` where the trick allows
    /// it (both sides in each process, windows alternating; the rest in processes of their own),
    /// or `processes` for every cell (`run --unpaired`, and files that predate pairing).
    pub pairing: MeasurementDesign,
    /// How many paired cells share a process: `many`, every cell paired with the same reference
    /// in one process a round (the multi-arm design), or `one`, each in a process of its own pair
    /// (`run --single-arm`, and files that predate multi-arm processes).
    #[serde(default, skip_serializing_if = "ArmsPerProcess::is_one")]
    pub arms_per_process: ArmsPerProcess,
    /// The host allocator the measuring processes started with: `system` (glibc's defaults, as a
    /// plain Python script), or `tuned` (glibc malloc keeping freed memory), which a file without
    /// the field was measured with and which is not written.
    #[serde(default, skip_serializing_if = "HostAllocator::is_tuned")]
    pub host_allocator: HostAllocator,
}

/// How many paired cells share a cell process.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "kebab-case")]
pub enum ArmsPerProcess {
    /// Each paired cell in a process of its own, beside its reference.
    #[default]
    One,
    /// Every cell paired with the same reference in one process, as arms.
    Many,
}

impl ArmsPerProcess {
    /// Whether each paired cell has a process of its own pair (what a file without the field
    /// means).
    pub fn is_one(&self) -> bool {
        *self == ArmsPerProcess::One
    }
}

impl Protocol {
    /// Whether the paired cells share multi-arm processes: paired, many arms a process.
    pub fn multi_arm(&self) -> bool {
        multi_arm(self.pairing, self.arms_per_process)
    }
}

/// Whether a run measuring trick cells as `pairing` says with `arms_per_process` puts the cells
/// paired with one reference into one multi-arm process a round.
pub fn multi_arm(pairing: MeasurementDesign, arms_per_process: ArmsPerProcess) -> bool {
    pairing == MeasurementDesign::Paired && arms_per_process == ArmsPerProcess::Many
}

/// Which phase a throughput cell times.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Phase {
    /// Training steps: forward, backward, optimizer, with the data pipeline.
    Train,
    /// Evaluation batches: forward only, with the data pipeline.
    Eval,
}

/// What a cell measures.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case", tag = "type")]
pub enum CellKind {
    /// Samples per second over timed windows, plus peak memory.
    Throughput {
        /// The phase timed.
        phase: Phase,
    },
    /// Training from scratch until a target test metric or a time budget.
    TimeToAccuracy,
    /// A few training steps at a batch size to see whether it fits: peak memory, or out of
    /// memory (a result, not a failure of the run).
    MemoryProbe,
}

impl CellKind {
    /// Whether the cell runs as a single process (time-to-accuracy, memory probe) rather than in
    /// rounds (throughput).
    pub fn runs_once(self) -> bool {
        !matches!(self, CellKind::Throughput { .. })
    }
}

/// What identifies a cell: (workload, trick set, batch size, seed, kind, reference, engine). The
/// device is the run's.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct CellKey {
    /// The workload trained.
    pub workload: WorkloadId,
    /// The tricks switched on (empty: the baseline).
    pub tricks: TrickSet,
    /// Samples per optimizer step.
    pub batch_size: usize,
    /// Seed of weights, data order and augmentation.
    pub seed: u64,
    /// What the cell measures.
    pub kind: CellKind,
    /// The cell is the "off" side of this trick where that is not the plain recipe, measured as
    /// its own reference cell so that every other cell keeps the recipe: `debug-off` (anomaly
    /// detection left on), `adamw` (Adam with L2 in the gradient), `batch-norm` (no BatchNorm),
    /// `input-norm` (raw inputs). See [`Trick::reference_label`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reference_for: Option<Trick>,
    /// The cell is the A/A control: the baseline measured a second time under its own name,
    /// interleaved like any trick, whose ratio to the baseline is the run's noise floor.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub aa_control: bool,
    /// The cell is measured alone: one model in a process of its own every round, never an arm of
    /// a multi-arm process nor the reference it hosts. Only the baseline and the A/A control are
    /// (`baseline-alone`, `aa-control-alone`), beside a cell of the process design, which is
    /// compared with the baseline measured in processes of its own shape; the control alone,
    /// against the baseline alone, gives that design's noise floor. False in files that predate it.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub alone: bool,
    /// The engine the cell trains on (libtorch in files that predate engines).
    #[serde(default, skip_serializing_if = "Engine::is_libtorch")]
    pub engine: Engine,
}

/// The configuration label of the A/A control cell (`resnet8/aa-control/b128/s0/train`).
pub const AA_CONTROL_LABEL: &str = "aa-control";

/// What a cell measured alone adds to its configuration's label
/// (`resnet8/baseline-alone/b128/s0/train`, `resnet8/aa-control-alone/b128/s0/train`).
pub const ALONE_SUFFIX: &str = "-alone";

/// The configuration in words, as a cell's id names it: the trick label (`baseline`,
/// `amp+channels-last`), with the reference's label appended for a reference cell
/// (`baseline+debug-apis-on`); `aa-control` for the A/A control; either with `-alone` after it for
/// a cell measured alone (`baseline-alone`).
pub fn configuration_label(
    tricks: &TrickSet,
    reference_for: Option<Trick>,
    aa_control: bool,
    alone: bool,
) -> String {
    let label = match reference_for.and_then(Trick::reference_label) {
        _ if aa_control => AA_CONTROL_LABEL.to_owned(),
        Some(reference) => format!("{}+{reference}", tricks.label()),
        None => tricks.label(),
    };
    if alone {
        format!("{label}{ALONE_SUFFIX}")
    } else {
        label
    }
}

impl CellKey {
    /// The configuration in words ([`configuration_label`]): `baseline`, `amp+channels-last`,
    /// `baseline+debug-apis-on`, `aa-control`, `baseline-alone`.
    pub fn configuration_label(&self) -> String {
        configuration_label(&self.tricks, self.reference_for, self.aa_control, self.alone)
    }

    /// Whether this is the workload's baseline: every trick off, no reference's switch on, not
    /// the A/A control, and not measured alone.
    pub fn is_plain_baseline(&self) -> bool {
        self.tricks.is_baseline() && self.reference_for.is_none() && !self.aa_control && !self.alone
    }

    /// Whether this is the reference ("off") cell of `trick`.
    pub fn is_reference_for(&self, trick: Trick) -> bool {
        self.reference_for == Some(trick)
    }

    /// The id of the same cell on `engine` (its twin where `engine` is not its own).
    pub fn id_on(&self, engine: Engine) -> CellId {
        CellKey { engine, ..self.clone() }.id()
    }

    /// A stable, readable id: `resnet20/amp+channels-last/b128/s0/train`, with `@pytorch` after
    /// the kind for a cell of the PyTorch engine (`resnet20/amp/b128/s0/train@pytorch`).
    pub fn id(&self) -> CellId {
        let kind = match self.kind {
            CellKind::Throughput { phase: Phase::Train } => "train",
            CellKind::Throughput { phase: Phase::Eval } => "eval",
            CellKind::TimeToAccuracy => "tta",
            CellKind::MemoryProbe => "probe",
        };
        let engine = match self.engine {
            Engine::Libtorch => String::new(),
            other => format!("@{other}"),
        };
        CellId(format!(
            "{}/{}/b{}/s{}/{kind}{engine}",
            self.workload,
            self.configuration_label(),
            self.batch_size,
            self.seed
        ))
    }
}

/// A cell's stable, readable id, made from its key ([`CellKey::id`]); how the results file's
/// comparisons, summaries and shard records name the cells they are about.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(transparent)]
pub struct CellId(String);

impl CellId {
    /// The id as text.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Display for CellId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.pad(&self.0)
    }
}

impl PartialEq<str> for CellId {
    fn eq(&self, other: &str) -> bool {
        self.0 == other
    }
}

impl PartialEq<&str> for CellId {
    fn eq(&self, other: &&str) -> bool {
        self.0 == *other
    }
}

/// How a cell ended.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case", tag = "status")]
pub enum CellStatus {
    /// Every process of the cell finished and measured.
    Ok,
    /// The cell was not run: a trick cannot apply to this workload or device.
    NotApplicable {
        /// Why not.
        reason: String,
        /// Whether that was found only when the cell's process ran (a forced attention backend
        /// with no kernel for its inputs, a compile that failed, an engine refusing the case)
        /// rather than by the plan: on a rehearsal of a GPU run, a case the plan made and an
        /// engine refused.
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        when_run: bool,
    },
    /// A process failed (error, crash, signal).
    Failed {
        /// The error, or how the process ended.
        error: String,
        /// The last lines the process wrote to stderr.
        stderr_tail: String,
    },
    /// A process ran out of device or host memory.
    OutOfMemory {
        /// The allocator's message.
        error: String,
        /// The last lines the process wrote to stderr (omitted when empty).
        #[serde(default, skip_serializing_if = "String::is_empty")]
        stderr_tail: String,
    },
    /// A process ran past the cell timeout and was killed.
    Timeout {
        /// The limit that was exceeded, seconds.
        limit_s: f64,
        /// The last lines the process wrote to stderr.
        stderr_tail: String,
    },
}

/// One cell's measurements. Stored with its id ([`CellKey::id`]) first, for people reading
/// the file; reading checks that the id is its key's.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(remote = "Self")]
pub struct CellResult {
    /// What the cell is.
    pub key: CellKey,
    /// How it ended.
    pub status: CellStatus,
    /// One entry per process (round) that finished.
    pub processes: Vec<ProcessMeasurement>,
    /// Throughput over all windows of all processes (throughput cells that finished).
    pub throughput: Option<Throughput>,
    /// The largest peak memory over the cell's processes (after warm-up in throughput cells).
    pub memory: Option<Memory>,
    /// The largest warm-up peak over the cell's processes (see [`ProcessMeasurement::warmup_memory`]).
    pub warmup_memory: Option<Memory>,
    /// Time-to-accuracy (time-to-accuracy cells).
    pub time_to_accuracy: Option<TimeToAccuracy>,
    /// GPU energy per sample over its processes' energy spans (throughput cells on NVIDIA GPUs).
    pub energy: Option<CellEnergy>,
    /// Achieved FLOP/s and model FLOPs utilisation (throughput cells).
    pub utilisation: Option<Utilisation>,
    /// The sequential rule's decision, when it stopped the cell before the run's last round: the
    /// cell runs no more processes (`None`: it ran, or runs, every round).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub decided: Option<EarlyDecision>,
}

/// How and when the sequential rule stopped a paired cell (`crate::bench::stopping`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct EarlyDecision {
    /// Its processes when it was decided (its rounds measured).
    pub after_rounds: usize,
    /// What the 99.9% interval of those rounds showed.
    pub decision: Decision,
}

/// What an interim look found: the strict interval wholly outside the noise band, or inside it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Decision {
    /// The strict interval lies wholly outside the noise band: the cell helps or hurts.
    BeyondNoise,
    /// The strict interval lies wholly inside the noise band: no effect measurable at the
    /// precision of the floor.
    WithinNoise,
    /// Every effect the cell's design estimates from it (a factorial's main effects and
    /// interactions) was decided, beyond or within the noise band: the configuration stopped with
    /// the design's others.
    DesignDecided,
}

impl CellResult {
    /// A cell with `status` and nothing measured yet.
    pub fn new(key: CellKey, status: CellStatus) -> Self {
        CellResult {
            key,
            status,
            processes: Vec::new(),
            throughput: None,
            memory: None,
            warmup_memory: None,
            time_to_accuracy: None,
            energy: None,
            utilisation: None,
            decided: None,
        }
    }

    /// The cell's id.
    pub fn id(&self) -> CellId {
        self.key.id()
    }

    /// Where the cell's training steps spent their time: the median over its processes of each
    /// phase ([`StepBreakdown::median_of`]); `None` when no process recorded a breakdown.
    pub fn step_breakdown(&self) -> Option<StepBreakdown> {
        let recorded: Vec<&StepBreakdown> =
            self.processes.iter().filter_map(|p| p.step_breakdown.as_ref()).collect();
        StepBreakdown::median_of(&recorded)
    }

    /// Why the cell has no step breakdown, as its processes said (`None` when one was recorded or
    /// none was asked for).
    pub fn step_breakdown_unavailable(&self) -> Option<&str> {
        self.processes.iter().find_map(|p| p.step_breakdown_unavailable.as_deref())
    }

    /// A warning, in words, when the cell's result is less precise than `target_half_width` (the
    /// protocol's precision, a fraction): for a cell compared in pairs (`comparison`), when the
    /// interval of its effect is wider; otherwise when that of its median throughput is.
    pub fn noise_warning(
        &self,
        comparison: Option<&Comparison>,
        target_half_width: Option<f64>,
    ) -> Option<String> {
        let paired = comparison.filter(|c| c.design == MeasurementDesign::Paired);
        let Some(c) = paired else {
            return self.throughput.and_then(|t| t.noise_warning(target_half_width));
        };
        let target = target_half_width?;
        let half_width = (c.speedup_ci_high - c.speedup_ci_low) / 2.0 / c.speedup;
        let pairs: usize =
            self.processes.iter().filter_map(|p| p.paired.as_ref()).map(|w| w.ratios().len()).sum();
        (half_width > target).then(|| {
            format!(
                "noisy: the paired effect's interval is ±{}, wider than the ±{:.1}% asked ({pairs} pairs in \
                 {} processes)",
                percent_beyond(half_width, target),
                target * 100.0,
                self.processes.len()
            )
        })
    }

    /// The cell's profiler trace (`run --trace`), recorded by its first measured process.
    pub fn trace(&self) -> Option<&TraceRecord> {
        self.processes.iter().find_map(|p| p.trace.as_ref())
    }

    /// Why the cell has no GPU energy, as the first of its processes that says so gives it.
    pub fn energy_unavailable(&self) -> Option<&str> {
        self.processes.iter().find_map(|p| p.energy_unavailable.as_deref())
    }

    /// Why the machine was not in a fair state while the cell measured, if it was not: the
    /// distinct concerns ([`MachineState::concerns`]) of its processes before and after measuring.
    pub fn machine_warning(&self) -> Option<String> {
        let mut concerns: Vec<String> = Vec::new();
        let states = self.processes.iter().flat_map(|p| [&p.machine_before, &p.machine_after]);
        for concern in states.flatten().flat_map(MachineState::concerns) {
            if !concerns.contains(&concern) {
                concerns.push(concern);
            }
        }
        (!concerns.is_empty()).then(|| format!("unfair machine: {}", concerns.join("; ")))
    }

    /// The attention kernel the cell's processes recorded running (the first that recorded one);
    /// `None` for a model without attention or a cell without a measurement.
    pub fn attention_ran(&self) -> Option<AttentionBackend> {
        self.processes.iter().find_map(|p| p.attention_backend)
    }

    /// Why the cell's attention did not run as its tricks forced, if it did not: a process
    /// recorded another backend than the one its forced-backend trick names.
    pub fn attention_warning(&self) -> Option<String> {
        let forced = self.key.tricks.forced_attention_backend()?;
        let ran = self.processes.iter().filter_map(|p| p.attention_backend).find(|&ran| ran != forced)?;
        Some(format!("attention backend forced to {} but {} ran", forced.id(), ran.id()))
    }

    /// Whether the cell ended without what it was run for: it failed, timed out or ran out of
    /// memory (a memory probe that runs out of memory has found its answer and has not failed).
    pub fn failed(&self) -> bool {
        match self.status {
            CellStatus::Ok | CellStatus::NotApplicable { .. } => false,
            CellStatus::OutOfMemory { .. } => self.key.kind != CellKind::MemoryProbe,
            CellStatus::Failed { .. } | CellStatus::Timeout { .. } => true,
        }
    }

    /// Why the cell did not measure, in one line: for a failed process the line of its stderr
    /// that says why ([`error_line`], without the cell's own id), with how the process ended; for
    /// a process out of memory what ran out (the line that said so, without the cell's id and the
    /// words "out of memory", which its status says); or the time limit. `None` for a cell that is
    /// ok or not applicable.
    pub fn failure_reason(&self) -> Option<String> {
        match &self.status {
            CellStatus::Ok | CellStatus::NotApplicable { .. } => None,
            CellStatus::Failed { error, stderr_tail } => Some(match error_line(stderr_tail) {
                Some(line) => format!("{} ({error})", self.without_own_id(&line)),
                None => error.clone(),
            }),
            CellStatus::OutOfMemory { error, .. } => {
                let line = error_line(error).unwrap_or_else(|| error.clone());
                let what = self.without_own_id(&line);
                Some(what.strip_prefix("out of memory: ").unwrap_or(what).to_owned())
            }
            CellStatus::Timeout { limit_s, .. } => {
                Some(format!("killed after the {limit_s:.0} s cell time limit"))
            }
        }
    }

    /// `line` without the "cell ID: " the cell process puts before its errors.
    fn without_own_id<'a>(&self, line: &'a str) -> &'a str {
        line.strip_prefix(&format!("cell {}: ", self.id())).unwrap_or(line)
    }
}

/// A cell as stored: its id, then its fields.
#[derive(Serialize)]
struct StoredCellRef<'a> {
    id: CellId,
    #[serde(flatten, serialize_with = "cell_fields")]
    cell: &'a CellResult,
}

/// A cell as read: its id, then its fields.
#[derive(Deserialize)]
struct StoredCell {
    id: CellId,
    #[serde(flatten, with = "CellResult")]
    cell: CellResult,
}

/// The fields of `cell`, without its id.
fn cell_fields<S: serde::Serializer>(cell: &&CellResult, serializer: S) -> Result<S::Ok, S::Error> {
    CellResult::serialize(cell, serializer)
}

impl Serialize for CellResult {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        StoredCellRef { id: self.id(), cell: self }.serialize(serializer)
    }
}

impl<'de> Deserialize<'de> for CellResult {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let stored = StoredCell::deserialize(deserializer)?;
        let id = stored.cell.id();
        if stored.id != id {
            return Err(serde::de::Error::custom(format!(
                "the cell stored as {} has the key of {id}",
                stored.id
            )));
        }
        Ok(stored.cell)
    }
}

/// The line of a process's stderr that says why it failed, without its `error:` prefix: the last
/// line that starts with `error:` in any case (how trickbench reports the error that ends it, its
/// causes joined on one line; a launched rank's line may carry a `[rank N]` prefix), else the
/// message of a Rust panic.
pub fn error_line(stderr: &str) -> Option<String> {
    let lines: Vec<&str> = stderr.lines().map(str::trim).collect();
    let unprefixed = |line: &str| -> Option<String> {
        let line = match line.strip_prefix('[') {
            Some(rest) => rest.split_once("] ").map_or(line, |(_, after)| after),
            None => line,
        };
        let head = line.get(..6)?;
        head.eq_ignore_ascii_case("error:").then(|| line[6..].trim().to_owned())
    };
    if let Some(line) = lines.iter().rev().find_map(|line| unprefixed(line)) {
        return Some(line);
    }
    // `thread 'main' panicked at src/x.rs:1:2:` and the message on the next line.
    let at = lines.iter().position(|line| line.contains("panicked at"))?;
    let message = match lines[at].strip_suffix(':') {
        Some(_) => lines.get(at + 1).copied().unwrap_or(lines[at]),
        None => lines[at],
    };
    Some(format!("panicked: {message}"))
}

/// GPU energy of a throughput cell, over the energy spans of all its processes (each its timed
/// windows and whatever untimed steps lengthened them to at least a second, [`Energy`]).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct CellEnergy {
    /// Total energy over the spans, joules.
    pub joules: f64,
    /// Energy per sample: `joules` over the samples the spans cover, joules.
    pub joules_per_sample: f64,
    /// Mean board power over the spans, watts.
    pub mean_power_w: f64,
    /// Total length of the spans, seconds (`None` in files that predate it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub interval_s: Option<f64>,
    /// How the energy was measured (the energy counter, or sampled power where it is absent).
    pub method: EnergyMethod,
    /// The most the energy counter's steps can put `joules` off by, joules: the processes' own
    /// bounds added (`None` for sampled power, and in files that predate it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub quantisation_j: Option<f64>,
}

impl CellEnergy {
    /// The counter's quantisation as a share of the energy, a fraction (`None` where unknown).
    pub fn relative_quantisation(&self) -> Option<f64> {
        self.quantisation_j.filter(|_| self.joules > 0.0).map(|q| q / self.joules)
    }
}

/// How much of the device's arithmetic peak the cell used.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Utilisation {
    /// Analytic FLOPs per sample of the timed work.
    pub flops_per_sample: f64,
    /// Median throughput × FLOPs per sample, FLOP/s.
    pub achieved_flops_per_s: f64,
    /// The device's dense peak at the cell's precision, FLOP/s (`None` when unknown).
    pub peak_flops_per_s: Option<f64>,
    /// Model FLOPs utilisation: achieved ÷ peak, a fraction (`None` when the peak is unknown).
    pub mfu: Option<f64>,
    /// Why `mfu` is missing, when it is.
    pub mfu_unavailable: Option<String>,
}

/// What one cell process measured.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ProcessMeasurement {
    /// The round this process belongs to (0-based).
    pub round: usize,
    /// Wall time of the whole process, including start-up and data loading, seconds.
    pub wall_s: f64,
    /// Throughput of each timed window, samples per second.
    pub window_samples_per_s: Vec<f64>,
    /// Peak memory during the process.
    pub memory: Memory,
    /// Host reads of training metrics during the timed steps (`avoid-sync` reduces these).
    pub host_metric_reads: u64,
    /// Loss of the last training step (a sanity check that training ran), if one ran.
    pub last_loss: Option<f64>,
    /// The time-to-accuracy run, for time-to-accuracy cells.
    pub time_to_accuracy: Option<TimeToAccuracy>,
    /// Analytic FLOPs per sample of the timed work (training: forward + backward ≈ 3 × forward).
    pub flops_per_sample: f64,
    /// Arithmetic the matmuls and convolutions ran in.
    pub precision: Precision,
    /// Samples processed in the timed windows.
    pub timed_samples: usize,
    /// GPU energy over the process's energy span: its timed windows, lengthened by untimed steps
    /// to at least a second (`None` off NVIDIA GPUs and where NVML's reading failed; see
    /// `energy_unavailable`).
    pub energy: Option<Energy>,
    /// Why `energy` is missing, when it is.
    pub energy_unavailable: Option<String>,
    /// The process's place among its round's measured processes (0: right after the round's
    /// warm-up process); `None` in version 1 files that predate it.
    pub position: Option<usize>,
    /// Seconds of the process outside its timed windows: start-up, data loading, model building
    /// and warm-up, and the little after the last window (throughput cells).
    pub setup_s: Option<f64>,
    /// Seconds inside the timed windows (throughput cells).
    pub timed_s: Option<f64>,
    /// Peak memory from the process's start through its warm-up steps (cuDNN autotuning
    /// workspaces, a CUDA graph's warm-up and capture), after which the peaks in `memory` were
    /// reset (throughput cells; `None` in other cells and in version 1 files that predate it).
    pub warmup_memory: Option<Memory>,
    /// The attention kernel the GPT's `scaled_dot_product_attention` dispatched to for this
    /// cell's inputs, or `explicit` for attention written out op by op (`None`: no attention).
    pub attention_backend: Option<AttentionBackend>,
    /// The machine when the process began measuring (after building its model and loading its
    /// data): GPU clocks, power, temperature, throttling and other processes; CPU frequency and
    /// load (`None` in files that predate it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub machine_before: Option<MachineState>,
    /// The machine right after the process measured, as [`Self::machine_before`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub machine_after: Option<MachineState>,
    /// Where the time of training steps went, phase by phase, from a window of steps with phase
    /// marks after the timed windows (training-throughput cells; `None` in other cells, in files
    /// that predate it, and where `step_breakdown_unavailable` says why).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub step_breakdown: Option<StepBreakdown>,
    /// Why a training-throughput process has no `step_breakdown`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub step_breakdown_unavailable: Option<String>,
    /// The profiler trace the process recorded after its timed windows (`run --trace`: the first
    /// measured process of each chosen throughput cell; `None` elsewhere).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub trace: Option<TraceRecord>,
    /// Both sides of a paired process: the cell's reference measured in the same process, its
    /// windows alternating with the cell's own (`None` in a process of the process design, and in
    /// files that predate pairing). The process's `window_samples_per_s` are the cell's own side.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub paired: Option<PairedWindows>,
    /// How many cells the process measured: more than 1 in a multi-arm process, whose arms share
    /// its start-up, data and reference windows. `wall_s`, `setup_s` and `timed_s` are then this
    /// cell's share of the process's (the process's own ÷ this count); 1 in files that predate it.
    #[serde(default = "one_cell", skip_serializing_if = "is_one_cell")]
    pub process_cells: usize,
    /// Seconds of the steps that compiled a graph (`torch-compile` on the PyTorch engine: its
    /// first warm-up step and any that compiled again), outside the timed windows (`None`: the
    /// model is not compiled, or the file predates it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub compile_s: Option<f64>,
    /// The calls that need a CUDA device that this process stood in for on the CPU, for this
    /// cell's side and for the process (a rehearsal of a GPU run, `--device as-if-cuda:GPU`;
    /// empty on a real device and on the CPU).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub stood_in: Vec<StandIn>,
    /// Minor page faults the process took during this side's timed windows, all of them
    /// together: pages the kernel mapped in as the steps touched memory the allocator had handed
    /// back to it or never held (`None` where not counted, and in files that predate the count).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timed_page_faults: Option<u64>,
    /// What `torch.compile` did over the whole process, from `torch._dynamo`'s counters (the
    /// PyTorch engine's `torch-compile` cells; `None` elsewhere and in files that predate it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub compile_counters: Option<CompileCounters>,
}

/// What `torch.compile` did in a process, from `torch._dynamo.utils.counters`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct CompileCounters {
    /// Graph breaks: places where dynamo stopped a graph and ran Python eagerly.
    pub graph_breaks: u64,
    /// Graphs compiled (`unique_graphs`).
    pub graphs: u64,
    /// Compilations beyond the first of each frame (recompiles after a guard failed).
    pub recompiles: u64,
}

/// A process that measured one cell (the default of [`ProcessMeasurement::process_cells`]).
fn one_cell() -> usize {
    1
}

/// Whether a process measured one cell only.
fn is_one_cell(cells: &usize) -> bool {
    *cells == 1
}

/// Which side of a paired process a window timed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Side {
    /// The cell's reference (the baseline, its own reference cell, or the set it is compared with).
    Reference,
    /// The cell itself.
    Trick,
}

/// One timed window of a paired process.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct PairedWindow {
    /// The pair the window belongs to (0-based); pairs run in the order A B, B A, A B, …, so that
    /// a steady drift within the process favours neither side.
    pub pair: usize,
    /// The side the window timed.
    pub side: Side,
    /// Throughput of the window, samples per second.
    pub samples_per_s: f64,
}

/// What a paired process timed: the cell's reference and the cell, built in one process from the
/// same initial weights and fed the same batches, their timed windows alternating.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PairedWindows {
    /// The id of the reference cell the process built beside the cell.
    pub reference: CellId,
    /// Every timed window in the order it ran.
    pub windows: Vec<PairedWindow>,
}

impl PairedWindows {
    /// Each complete pair's throughput ratio, the cell's window over its reference's (above 1:
    /// the cell is faster), in pair order.
    pub fn ratios(&self) -> Vec<f64> {
        let pairs = self.windows.iter().map(|w| w.pair + 1).max().unwrap_or(0);
        (0..pairs)
            .filter_map(|pair| {
                let side = |side: Side| {
                    self.windows.iter().find(|w| w.pair == pair && w.side == side).map(|w| w.samples_per_s)
                };
                match (side(Side::Trick), side(Side::Reference)) {
                    (Some(trick), Some(reference)) if reference > 0.0 => Some(trick / reference),
                    _ => None,
                }
            })
            .collect()
    }

    /// The reference side's windows, samples per second, in the order they ran.
    pub fn reference_samples_per_s(&self) -> Vec<f64> {
        self.windows.iter().filter(|w| w.side == Side::Reference).map(|w| w.samples_per_s).collect()
    }
}

impl ProcessMeasurement {
    /// The measurement of a process of `round` before it has measured anything: its work costs
    /// `flops_per_sample` in `precision`; no windows, memory, energy or machine state yet.
    pub fn new(round: usize, flops_per_sample: f64, precision: Precision) -> Self {
        ProcessMeasurement {
            round,
            wall_s: 0.0,
            window_samples_per_s: Vec::new(),
            memory: Memory::default(),
            host_metric_reads: 0,
            last_loss: None,
            time_to_accuracy: None,
            flops_per_sample,
            precision,
            timed_samples: 0,
            energy: None,
            energy_unavailable: None,
            warmup_memory: None,
            position: None,
            setup_s: None,
            timed_s: None,
            attention_backend: None,
            machine_before: None,
            machine_after: None,
            step_breakdown: None,
            step_breakdown_unavailable: None,
            trace: None,
            paired: None,
            process_cells: 1,
            compile_s: None,
            stood_in: Vec::new(),
            timed_page_faults: None,
            compile_counters: None,
        }
    }

    /// Adds the minor page faults of one timed window (nothing where they were not counted).
    pub fn count_page_faults(&mut self, faults: Option<u64>) {
        if let Some(faults) = faults {
            *self.timed_page_faults.get_or_insert(0) += faults;
        }
    }
}

/// A profiler trace a cell process recorded (`run --trace`): a few steps after its timed windows
/// under libtorch's Kineto profiler, saved as gzipped Chrome-trace JSON, and its longest operators.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TraceRecord {
    /// The Chrome-trace file, relative to the results file's directory, with `/` separators:
    /// gzipped JSON (`traces/resnet8_baseline_b32_s0_train.json.gz`), or plain JSON (`.json`) in
    /// results written before traces were gzipped; either opens in https://ui.perfetto.dev or
    /// chrome://tracing.
    pub path: String,
    /// Training steps (or evaluation batches) recorded under the profiler.
    pub steps: usize,
    /// The operators with the longest total duration in the file, longest first: at most
    /// [`crate::measure::trace::TOP_OPERATORS`] of each activity the trace holds.
    pub operators: Vec<TraceOperator>,
    /// Every operator of the traced steps, per step, with the time outside operators (`None` in
    /// files that predate it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub step: Option<TracedStep>,
}

/// One operator (or GPU kernel, or copy) of a trace, over all its calls in the traced steps.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TraceOperator {
    /// Its name as the profiler records it (`aten::convolution_backward`, a kernel's name).
    pub name: String,
    /// Where it ran.
    pub activity: TraceActivity,
    /// Calls in the traced steps.
    pub calls: usize,
    /// Summed duration of its calls, microseconds, including the operators they called (summed
    /// over threads: work on several threads at once counts once per thread).
    pub total_us: f64,
    /// `total_us` less the time spent in operators its calls made on the same thread,
    /// microseconds (equal to `total_us` on the GPU, where nothing nests).
    pub self_us: f64,
    /// The shapes of the tensor inputs of its longest call, as the trace records them
    /// (`[32,16,32,32] [16,16,3,3]`); `None` where the trace records none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub input_shapes: Option<String>,
}

/// Where a traced operator ran.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum TraceActivity {
    /// A libtorch operator on the host (`cpu_op` in the trace): on a GPU, the time to launch its
    /// kernels; on a CPU, the computation itself.
    CpuOp,
    /// A GPU kernel (`kernel`).
    GpuKernel,
    /// A copy or fill of device memory (`gpu_memcpy`, `gpu_memset`).
    GpuMemory,
}

impl TraceActivity {
    /// Its name in a report ("CPU operator", "GPU kernel", "GPU copy or fill").
    pub fn label(self) -> &'static str {
        match self {
            TraceActivity::CpuOp => "CPU operator",
            TraceActivity::GpuKernel => "GPU kernel",
            TraceActivity::GpuMemory => "GPU copy or fill",
        }
    }
}

/// Peak memory. On CUDA the caching allocator's peaks; on CPU the bytes of live tensors (counted by
/// the shim's CPU allocator) and the process's peak resident set.
#[derive(Debug, Clone, Copy, PartialEq, Default, Serialize, Deserialize)]
pub struct Memory {
    /// Peak bytes held by live tensors on the device (CUDA: the caching allocator's count; CPU: the
    /// shim's counting allocator; `None` where nothing was counted).
    pub peak_allocated_bytes: Option<u64>,
    /// Peak bytes reserved by the caching allocator (CUDA only).
    pub peak_reserved_bytes: Option<u64>,
    /// Peak resident set size of the process since the measurement began, bytes (everything
    /// resident: libtorch, data, tensors; see [`crate::measure::memory::reset_peaks`]).
    pub peak_rss_bytes: Option<u64>,
}

impl Memory {
    /// The figure memory comparisons use: peak bytes of live tensors where counted (CUDA, and CPU
    /// runs since tensor counting), else the peak resident set.
    pub fn primary_bytes(&self) -> Option<u64> {
        self.peak_allocated_bytes.or(self.peak_rss_bytes)
    }

    /// The peak that `figure` names: live bytes as [`Self::primary_bytes`], or reserved bytes
    /// (CUDA only).
    pub fn bytes(&self, figure: MemoryFigure) -> Option<u64> {
        match figure {
            MemoryFigure::Live => self.primary_bytes(),
            MemoryFigure::Reserved => self.peak_reserved_bytes,
        }
    }

    /// These peaks less what `others` held throughout (element-wise, never below zero): the
    /// share of one side of a process whose other sides sat idle, holding `others`.
    pub fn without(self, others: Memory) -> Memory {
        let less = |a: Option<u64>, b: Option<u64>| a.map(|a| a.saturating_sub(b.unwrap_or(0)));
        Memory {
            peak_allocated_bytes: less(self.peak_allocated_bytes, others.peak_allocated_bytes),
            peak_reserved_bytes: less(self.peak_reserved_bytes, others.peak_reserved_bytes),
            peak_rss_bytes: less(self.peak_rss_bytes, others.peak_rss_bytes),
        }
    }

    /// The element-wise maximum of two peaks.
    pub fn max(self, other: Memory) -> Memory {
        let max = |a: Option<u64>, b: Option<u64>| match (a, b) {
            (Some(a), Some(b)) => Some(a.max(b)),
            (a, b) => a.or(b),
        };
        Memory {
            peak_allocated_bytes: max(self.peak_allocated_bytes, other.peak_allocated_bytes),
            peak_reserved_bytes: max(self.peak_reserved_bytes, other.peak_reserved_bytes),
            peak_rss_bytes: max(self.peak_rss_bytes, other.peak_rss_bytes),
        }
    }
}

/// A throughput estimate with its confidence interval.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Throughput {
    /// Median over windows, samples per second.
    pub median_samples_per_s: f64,
    /// Lower end of the bootstrap confidence interval of the median, samples per second.
    pub ci_low_samples_per_s: f64,
    /// Upper end of the bootstrap confidence interval of the median, samples per second.
    pub ci_high_samples_per_s: f64,
    /// Number of windows behind the estimate.
    pub windows: usize,
    /// Sample standard deviation ÷ mean of the window throughputs (`None` for one window).
    pub coefficient_of_variation: Option<f64>,
    /// Windows whose throughput is an outlier by median absolute deviation (modified z-score
    /// above 3.5); they stay in the estimate, which is a median.
    pub outlier_windows: usize,
}

impl Throughput {
    /// Half the width of the interval as a fraction of the median (0.03: ±3%).
    pub fn relative_half_width(&self) -> f64 {
        stats::relative_half_width(&stats::Estimate {
            point: self.median_samples_per_s,
            low: self.ci_low_samples_per_s,
            high: self.ci_high_samples_per_s,
        })
    }

    /// A warning, in words, when the interval is wider than `target_half_width` (the protocol's
    /// precision): the machine was too noisy for the precision asked.
    pub fn noise_warning(&self, target_half_width: Option<f64>) -> Option<String> {
        let target = target_half_width?;
        let half_width = self.relative_half_width();
        (half_width > target).then(|| {
            format!(
                "noisy: the median's interval is ±{}, wider than the ±{:.1}% asked; windows vary by \
                 {:.1}% (coefficient of variation), {} of {} are outliers",
                percent_beyond(half_width, target),
                target * 100.0,
                self.coefficient_of_variation.unwrap_or(0.0) * 100.0,
                self.outlier_windows,
                self.windows
            )
        })
    }
}

/// A time-to-accuracy run: the learning curve and when it crossed the target.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TimeToAccuracy {
    /// The metric: `test_accuracy` (a fraction in [0, 1], higher is better) or `validation_loss`
    /// (nats per token, lower is better).
    pub metric: QualityMetric,
    /// The target value of the metric.
    pub target: f64,
    /// Training time allowed before giving up, seconds (evaluation excluded).
    pub budget_s: f64,
    /// Training time when the target was first reached, seconds (evaluation excluded);
    /// `None` if it never was.
    pub time_to_target_s: Option<f64>,
    /// Wall time when the target was first reached, evaluation included, seconds.
    pub wall_time_to_target_s: Option<f64>,
    /// Epochs trained when the target was first reached.
    pub epochs_to_target: Option<f64>,
    /// Best metric value seen (the highest accuracy, or the lowest loss).
    pub best_metric: f64,
    /// The curve, one point per evaluation.
    pub curve: Vec<CurvePoint>,
    /// Seconds of the training time spent in steps that compiled a graph (`torch-compile` on the
    /// PyTorch engine), counted in `time_to_target_s` too, since a user pays them; `None` where
    /// nothing was compiled.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub compile_s: Option<f64>,
}

/// One evaluation during a time-to-accuracy run.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct CurvePoint {
    /// Optimizer steps taken.
    pub step: usize,
    /// Epochs trained (fractional).
    pub epoch: f64,
    /// Training time so far, evaluation excluded, seconds.
    pub train_s: f64,
    /// Wall time so far, evaluation included, seconds.
    pub wall_s: f64,
    /// The metric on the held-out set.
    pub metric: f64,
    /// Mean training loss since the previous evaluation (`None` before training starts).
    pub train_loss: Option<f64>,
}

/// What a paired comparison concludes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Verdict {
    /// The whole confidence interval of the speed-up lies above 1.
    Faster,
    /// The whole confidence interval lies below 1.
    Slower,
    /// The confidence interval contains 1: no significant effect.
    NoSignificantEffect,
    /// The interval excludes 1, but the speed-up lies within the run's noise floor (what the A/A
    /// control moved): not distinguishable from noise on this machine.
    WithinNoise,
}

/// A trick cell measured against its baseline cell (same workload, batch, seed and phase).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Comparison {
    /// Id of the trick cell.
    pub cell: CellId,
    /// Id of the baseline cell.
    pub baseline: CellId,
    /// Median window throughput of the trick ÷ that of the baseline (>1: faster).
    pub speedup: f64,
    /// Lower end of the bootstrap confidence interval of `speedup` (windows resampled within
    /// each round of each cell, so the round pairing is kept).
    pub speedup_ci_low: f64,
    /// Upper end of the bootstrap confidence interval of `speedup`.
    pub speedup_ci_high: f64,
    /// What the interval says.
    pub verdict: Verdict,
    /// Peak memory of the trick ÷ that of the baseline (<1: less memory), where both are known:
    /// peak reserved bytes when a trick the cell adds is judged by them (`expandable-segments`),
    /// else peak live bytes.
    pub memory_ratio: Option<f64>,
    /// How the speed-up was measured: pairs of windows in one process, or one process per side
    /// (`processes` in files that predate pairing).
    pub design: MeasurementDesign,
    /// The most the trick could give here and, beside an effect that is null, negative or
    /// disputed between the engines, its measured cause (`None` for the A/A control and in files
    /// that predate it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub diagnosis: Option<Diagnosis>,
}

/// How a speed-up was measured.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum MeasurementDesign {
    /// One process per side, interleaved across rounds: the ratio of the two sides' medians, its
    /// interval from a bootstrap over rounds, then windows.
    #[default]
    Processes,
    /// Both sides in each process, their windows alternating A B B A: the median of the per-pair
    /// ratios, its interval from a bootstrap over processes, then pairs.
    Paired,
}

impl MeasurementDesign {
    /// The design's name in tables ("paired", "processes").
    pub fn label(self) -> &'static str {
        match self {
            MeasurementDesign::Processes => "processes",
            MeasurementDesign::Paired => "paired",
        }
    }

    /// The design after an effect in running text: "(paired)", "(separate processes)".
    pub fn tag(self) -> &'static str {
        match self {
            MeasurementDesign::Processes => "(separate processes)",
            MeasurementDesign::Paired => "(paired)",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_width_just_past_the_target_is_printed_with_the_digit_that_shows_it() {
        assert_eq!(percent_beyond(0.0304, 0.03), "3.04%");
        assert_eq!(percent_beyond(0.0351, 0.03), "3.5%");
        assert_eq!(percent_beyond(0.0801, 0.05), "8.0%");
    }

    #[test]
    fn a_pytorch_cell_says_its_engine_and_a_libtorch_one_reads_as_before_engines() {
        let libtorch = cell(CellKind::Throughput { phase: Phase::Train }, CellStatus::Ok).key;
        let pytorch = CellKey { engine: Engine::Pytorch, ..libtorch.clone() };
        assert_eq!(libtorch.id().as_str(), "resnet8/baseline/b32/s0/train");
        assert_eq!(pytorch.id().as_str(), "resnet8/baseline/b32/s0/train@pytorch");
        let written = serde_json::to_value(&libtorch).unwrap();
        assert!(written.get("engine").is_none(), "{written}");
        assert_eq!(serde_json::to_value(&pytorch).unwrap()["engine"], "pytorch");
        let read: CellKey = serde_json::from_value(written).unwrap();
        assert_eq!(read.engine, Engine::Libtorch);
    }

    #[test]
    fn the_baseline_and_the_control_measured_alone_say_so_and_other_keys_read_as_before() {
        let baseline = cell(CellKind::Throughput { phase: Phase::Train }, CellStatus::Ok).key;
        let alone = CellKey { alone: true, ..baseline.clone() };
        let control = CellKey { aa_control: true, ..alone.clone() };
        assert_eq!(alone.id().as_str(), "resnet8/baseline-alone/b32/s0/train");
        assert_eq!(control.id_on(Engine::Pytorch).as_str(), "resnet8/aa-control-alone/b32/s0/train@pytorch");
        assert!(baseline.is_plain_baseline() && !alone.is_plain_baseline() && !control.is_plain_baseline());
        let written = serde_json::to_value(&baseline).unwrap();
        assert!(written.get("alone").is_none(), "{written}");
        assert_eq!(serde_json::to_value(&alone).unwrap()["alone"], true);
        let read: CellKey = serde_json::from_value(written).unwrap();
        assert!(!read.alone);
    }

    fn cell(kind: CellKind, status: CellStatus) -> CellResult {
        let key = CellKey {
            workload: WorkloadId::Resnet8,
            tricks: TrickSet::baseline(),
            batch_size: 32,
            seed: 0,
            kind,
            reference_for: None,
            aa_control: false,
            alone: false,
            engine: Engine::Libtorch,
        };
        CellResult::new(key, status)
    }

    #[test]
    fn time_ratios_below_one_read_as_slower() {
        assert_eq!(time_ratio_text(60.4 / 86.1), "1.43× slower");
        assert_eq!(time_ratio_text(1.2), "1.20× sooner");
        assert_eq!(time_ratio_text(1.001), "as fast");
        assert_eq!(epochs_ratio_text(1.54 / 2.30), "1.49× more epochs");
        assert_eq!(epochs_ratio_text(1.25), "1.25× fewer epochs");
    }

    fn failed(stderr_tail: &str) -> CellStatus {
        CellStatus::Failed {
            error: "cell process exited with status 1 after 0.8 s".into(),
            stderr_tail: stderr_tail.into(),
        }
    }

    #[test]
    fn the_reason_is_the_last_error_line_without_the_cells_own_id() {
        let train = CellKind::Throughput { phase: Phase::Train };
        let id = "resnet8/baseline/b32/s0/train";
        let tail = format!(
            "warning: something harmless\nError: an earlier one\nerror: cell {id}: data/x.bin: size 5 is not a \
             multiple of the 3073-byte record\nException raised from alloc_cpu at c10/core/impl/alloc_cpu.cpp:1"
        );
        let reason = cell(train, failed(&tail)).failure_reason().unwrap();
        assert_eq!(
            reason,
            "data/x.bin: size 5 is not a multiple of the 3073-byte record (cell process exited with status 1 after 0.8 s)"
        );
        assert_eq!(
            error_line("[rank 1] error: the rendezvous timed out\n").as_deref(),
            Some("the rendezvous timed out")
        );
        let panic = "thread 'main' panicked at src/bench/cell.rs:10:5:\nindex out of bounds\nnote: run with `RUST_BACKTRACE=1`";
        assert_eq!(error_line(panic).as_deref(), Some("panicked: index out of bounds"));
        // Without an error line the reason is how the process ended.
        let segv = CellStatus::Failed {
            error: "cell process died of signal 11 (SIGSEGV)".into(),
            stderr_tail: "é".into(),
        };
        assert_eq!(cell(train, segv).failure_reason().unwrap(), "cell process died of signal 11 (SIGSEGV)");
        // Out of memory: what ran out, once, without the cell's id.
        let oom = |error: &str| CellStatus::OutOfMemory { error: error.into(), stderr_tail: String::new() };
        let budget = format!("error: cell {id}: out of memory: peak memory 2722 MiB exceeds the budget");
        assert_eq!(
            cell(train, oom(&budget)).failure_reason().unwrap(),
            "peak memory 2722 MiB exceeds the budget"
        );
        let raw = "CUDA out of memory. Tried to allocate 2.00 GiB";
        assert_eq!(cell(train, oom(raw)).failure_reason().unwrap(), raw);
    }

    fn paired(windows: &[(usize, Side, f64)]) -> PairedWindows {
        PairedWindows {
            reference: cell(CellKind::Throughput { phase: Phase::Train }, CellStatus::Ok).id(),
            windows: windows
                .iter()
                .map(|&(pair, side, samples_per_s)| PairedWindow { pair, side, samples_per_s })
                .collect(),
        }
    }

    #[test]
    fn a_pairs_ratio_does_not_depend_on_which_side_ran_first() {
        use Side::{Reference, Trick};
        let abba =
            paired(&[(0, Reference, 100.0), (0, Trick, 110.0), (1, Trick, 99.0), (1, Reference, 90.0)]);
        assert_eq!(abba.ratios(), [1.1, 1.1]);
        let listed_out_of_order =
            paired(&[(1, Reference, 90.0), (0, Trick, 110.0), (1, Trick, 99.0), (0, Reference, 100.0)]);
        assert_eq!(listed_out_of_order.ratios(), [1.1, 1.1]);
        assert_eq!(abba.reference_samples_per_s(), [100.0, 90.0]);
    }

    #[test]
    fn incomplete_pairs_give_no_ratio() {
        use Side::{Reference, Trick};
        // Pair 1 lacks its reference, pair 2 is missing, pair 4's reference timed nothing, and
        // the process ended after the first window of pair 5.
        let windows = paired(&[
            (0, Reference, 100.0),
            (0, Trick, 120.0),
            (1, Trick, 130.0),
            (3, Trick, 90.0),
            (3, Reference, 100.0),
            (4, Reference, 0.0),
            (4, Trick, 50.0),
            (5, Reference, 100.0),
        ]);
        assert_eq!(windows.ratios(), [1.2, 0.9]);
        assert!(paired(&[]).ratios().is_empty());
    }

    #[test]
    fn a_memory_probe_out_of_memory_has_not_failed_but_other_cells_have() {
        let oom = CellStatus::OutOfMemory { error: "CUDA out of memory".into(), stderr_tail: String::new() };
        assert!(!cell(CellKind::MemoryProbe, oom.clone()).failed());
        assert!(cell(CellKind::Throughput { phase: Phase::Train }, oom).failed());
        assert!(cell(
            CellKind::TimeToAccuracy,
            CellStatus::Timeout { limit_s: 9.0, stderr_tail: String::new() }
        )
        .failed());
        assert!(!cell(
            CellKind::TimeToAccuracy,
            CellStatus::NotApplicable { reason: "no GPU".into(), when_run: false }
        )
        .failed());
        assert!(!cell(CellKind::TimeToAccuracy, CellStatus::Ok).failed());
    }
}
