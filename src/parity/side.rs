//! trickbench's side of a parity case: the cell's model and trainer, loaded with the case's
//! weights, trained on the case's batches for the loss comparison or timed in windows.

use std::path::Path;

use serde::{Deserialize, Serialize};
use tch::Kind;

use crate::data::loader::Batch;
use crate::error::Error;
use crate::ffi;
use crate::measure::timer::SyncedTimer;
use crate::parity::case::{self, ParityCase};
use crate::train::recipe::Recipe;
use crate::train::{apply_process_tricks, Trainer};
use crate::tricks::{Trick, TrickSet};
use crate::workloads::{build, Family, Workload};

/// How a side times training steps (both sides take the same numbers).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TimingPlan {
    /// Untimed steps first (allocations, autotuning, caches).
    pub warmup_steps: usize,
    /// Timed windows.
    pub windows: usize,
    /// Steps per window.
    pub steps_per_window: usize,
}

/// What a side does with a case.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SideMode {
    /// One step per exported batch, recording each step's loss, with the weights and the
    /// floating-point inputs in float64: the two sides then differ only by float64 rounding, far
    /// below the float32 loss each step reports, so what the comparison sees is the math (a
    /// float32 run's rounding differences, near 1e-7, grow by about 1.7× per
    /// step in a freshly initialised ResNet and would hide a small difference in the recipe).
    Losses,
    /// Steps cycling through the batches, timed in windows.
    Time(TimingPlan),
}

impl SideMode {
    /// The mode's name on the sides' command lines (`losses`, `time`).
    pub fn id(self) -> &'static str {
        match self {
            SideMode::Losses => "losses",
            SideMode::Time(_) => "time",
        }
    }

    /// The floating-point kind of the weights and image inputs: float64 for the losses, float32
    /// (as the benchmark trains) for the timing.
    pub fn kind(self) -> Kind {
        match self {
            SideMode::Losses => Kind::Double,
            SideMode::Time(_) => Kind::Float,
        }
    }
}

/// A `torch.compile` mode a PyTorch side compiles its model in (`trickbench parity --compile`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "kebab-case")]
pub enum CompileMode {
    /// `mode="default"`: inductor's fused kernels, without autotuning.
    Default,
    /// `mode="max-autotune-no-cudagraphs"`: kernel choices autotuned at compile time (on a GPU,
    /// Triton templates benchmarked against cuBLAS), without CUDA graphs.
    MaxAutotuneNoCudagraphs,
}

impl CompileMode {
    /// The mode as `torch.compile(mode=...)` and the script's `--compile` spell it.
    pub fn id(self) -> &'static str {
        match self {
            CompileMode::Default => "default",
            CompileMode::MaxAutotuneNoCudagraphs => "max-autotune-no-cudagraphs",
        }
    }
}

/// What one side reports: the same JSON from trickbench and from the PyTorch script.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SideOutput {
    /// `trickbench` or `pytorch`.
    pub implementation: String,
    /// The implementation's version (trickbench's crate version, or `torch.__version__`).
    pub version: String,
    /// Intra-op threads the side's libtorch used.
    pub threads: i64,
    /// The training loss of each step (mode losses), nats.
    #[serde(default)]
    pub losses: Vec<f64>,
    /// Training samples per second of each timed window (mode time): images, or tokens.
    #[serde(default)]
    pub window_samples_per_s: Vec<f64>,
    /// The `torch.compile` mode of a compiled PyTorch side (`None`: eager).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub compile_mode: Option<CompileMode>,
    /// A compiled side's wall seconds of the untimed steps that built graphs (the first step, and
    /// any warm-up step that recompiled), apart from the windows.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub compile_s: Option<f64>,
    /// Why a compiled side could not compile (the first line of inductor's error); the side then
    /// reports no losses or windows.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub unavailable: Option<String>,
}

impl SideOutput {
    /// An output of `implementation` at `version` with nothing measured yet, on this process's
    /// intra-op threads.
    pub fn new(implementation: &str, version: &str) -> Self {
        Self {
            implementation: implementation.to_owned(),
            version: version.to_owned(),
            threads: i64::from(tch::get_num_threads()),
            losses: Vec::new(),
            window_samples_per_s: Vec::new(),
            compile_mode: None,
            compile_s: None,
            unavailable: None,
        }
    }
}

/// Runs trickbench's side of the case in `dir`: the cell's model built as its process builds it,
/// its weights replaced by the case's (in float64 for [`SideMode::Losses`]), trained with the
/// cell's trainer and recipe on the case's batches at the case's learning rates. With a `stack`,
/// the cell's tricks are the stack's (the stacked side), its batches laid out as its loader would
/// lay them out.
pub fn run(dir: &Path, mode: SideMode, stack: &TrickSet) -> Result<SideOutput, Error> {
    let (mut case, mut batches) = case::load(dir)?;
    if !stack.is_baseline() {
        case.key.tricks = stack.clone();
    }
    for batch in &mut batches {
        if batch.inputs.is_floating_point() {
            batch.inputs = batch.inputs.to_kind(mode.kind());
        }
        if stack.has(Trick::ChannelsLast) && batch.inputs.dim() == 4 {
            batch.inputs = ffi::to_channels_last(&batch.inputs)?;
        }
    }
    let recipe = case::recipe(&case);
    let device = case.device;
    apply_process_tricks(&case.key, device)?;
    let mut output = SideOutput::new("trickbench", env!("CARGO_PKG_VERSION"));
    match case.key.workload.family() {
        Family::CifarResnet => {
            let model = build::resnet_for(&case.key, &recipe, device.tch())?;
            replay(model, &case, dir, &recipe, &batches, mode, &mut output)?;
        }
        Family::CharGpt => {
            let vocab_size = match case.model {
                case::ModelSpec::Gpt { vocab_size, .. } => vocab_size as usize,
                case::ModelSpec::CifarResnet { .. } | case::ModelSpec::User { .. } => {
                    return Err(Error::Invalid(format!(
                        "{}: {} is a GPT but the case describes another network",
                        dir.join(case::CASE_FILE).display(),
                        case.key.workload
                    )))
                }
            };
            let model = build::gpt_for(&case.key, vocab_size, device.tch())?;
            replay(model, &case, dir, &recipe, &batches, mode, &mut output)?;
        }
        Family::UserModel => return Err(case::not_a_reference(case.key.workload)),
    }
    Ok(output)
}

/// Loads the case's weights in `dir` into `model`, casts them to the mode's kind, and trains or
/// times it with the cell's trainer and `recipe` on the case's batches, filling `output`.
fn replay<W: Workload>(
    mut model: W,
    case: &ParityCase,
    dir: &Path,
    recipe: &Recipe,
    batches: &[Batch],
    mode: SideMode,
    output: &mut SideOutput,
) -> Result<(), Error> {
    case::load_weights(&model, case, dir)?;
    model.var_store_mut().set_kind(mode.kind());
    let mut trainer = Trainer::new(model, &case.key.tricks, case.device, recipe)?;
    if batches.is_empty() || case.learning_rates.is_empty() {
        return Err(Error::Invalid("parity: the case has no steps".to_owned()));
    }
    // Seeded right before the first step, as the script does, so that both sides draw the same
    // dropout masks whatever building the model drew.
    tch::manual_seed(case.seed as i64);
    let step = |k: usize, trainer: &mut Trainer<W>| -> Result<usize, Error> {
        let batch = &batches[k % batches.len()];
        trainer.train_step(batch, case.learning_rates[k % case.learning_rates.len()])?;
        Ok(batch.len())
    };
    match mode {
        SideMode::Losses => {
            for k in 0..batches.len() {
                step(k, &mut trainer)?;
                let metrics = trainer.metrics_mut();
                metrics.flush();
                let loss = metrics
                    .last_mean_loss()
                    .ok_or_else(|| Error::Torch(format!("parity: step {k} recorded no loss")))?;
                output.losses.push(loss);
            }
        }
        SideMode::Time(plan) => {
            // A CUDA graph is warmed up and captured before its first timed replay.
            let warmup_steps = plan.warmup_steps.max(trainer.steps_before_steady_state());
            for k in 0..warmup_steps {
                step(k, &mut trainer)?;
            }
            let mut k = warmup_steps;
            for _ in 0..plan.windows {
                let timer = SyncedTimer::start(case.device);
                let mut samples = 0;
                for _ in 0..plan.steps_per_window {
                    samples += step(k, &mut trainer)?;
                    k += 1;
                }
                output.window_samples_per_s.push(samples as f64 / timer.stop());
            }
        }
    }
    Ok(())
}
