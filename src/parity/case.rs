//! A parity case: what both sides train on, written to a directory by trickbench and read by
//! both sides.

use std::path::Path;

use serde::{Deserialize, Serialize};
use tch::Tensor;

use crate::bench::cell::{self, CellJob};
use crate::bench::profile::ProfileName;
use crate::data::loader::Batch;
use crate::device::DeviceSpec;
use crate::engine::Engine;
use crate::error::Error;
use crate::results::schema::{CellKey, CellKind, Phase};
use crate::results::store;
use crate::train::recipe::Recipe;
use crate::tricks::TrickSet;
use crate::workloads::{build, Family, Workload, WorkloadId};

use crate::train::pytorch_terms::{cpu, named_cpu_tensors};
pub use crate::train::pytorch_terms::{ModelSpec, OptimizerSpec};

/// The version of the case format both sides read (`CASE_FORMAT` in the script).
pub const CASE_FORMAT: u32 = 1;
/// The case description inside a case directory.
pub const CASE_FILE: &str = "case.json";
/// The initial weights inside a case directory.
pub const WEIGHTS_FILE: &str = "weights.safetensors";
/// The batches inside a case directory (`inputs.K`, `targets.K` for step K).
pub const BATCHES_FILE: &str = "batches.safetensors";

/// What both sides train: the baseline training cell of a benchmark, with its first `steps`
/// batches and learning rates.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ParityCase {
    /// The case format ([`CASE_FORMAT`]).
    pub format: u32,
    /// The benchmark cell whose model, recipe and batches these are.
    pub key: CellKey,
    /// The profile whose settings built the cell's recipe and data.
    pub profile: ProfileName,
    /// The optimizer steps the recipe's schedule is planned over.
    pub planned_steps: usize,
    /// The device both sides train on (`cpu`, `cuda:N`).
    pub device: DeviceSpec,
    /// The seed each side gives its random generator right before the first step, so that both
    /// draw the same dropout masks.
    pub seed: u64,
    /// Training steps, one per exported batch.
    pub steps: usize,
    /// The network.
    pub model: ModelSpec,
    /// The optimizer.
    pub optimizer: OptimizerSpec,
    /// Global gradient norm clipped to (`None`: no clipping).
    pub clip_max_norm: Option<f64>,
    /// The learning rate of each step, from the recipe's schedule.
    pub learning_rates: Vec<f64>,
    /// The weights file, relative to the case directory.
    pub weights: String,
    /// The batches file, relative to the case directory.
    pub batches: String,
}

/// What [`export`] needs to know: the benchmark whose baseline cell is exported.
#[derive(Debug, Clone)]
pub struct ExportRequest {
    /// The workload.
    pub workload: WorkloadId,
    /// The profile whose recipe, data subset and batch size apply.
    pub profile: ProfileName,
    /// Samples (images or windows) per step.
    pub batch_size: usize,
    /// Seed of weights, data order and augmentation.
    pub seed: u64,
    /// The resolved device.
    pub device: DeviceSpec,
    /// CIFAR-10 binary files (for the ResNets).
    pub data_dir: std::path::PathBuf,
    /// The text file (for the GPTs).
    pub text: Option<std::path::PathBuf>,
    /// Training steps to export batches for (at least 1).
    pub steps: usize,
}

impl ExportRequest {
    /// The job of the baseline training-throughput cell this request describes.
    pub fn job(&self) -> CellJob {
        let key = CellKey {
            workload: self.workload,
            tricks: TrickSet::default(),
            batch_size: self.batch_size,
            seed: self.seed,
            kind: CellKind::Throughput { phase: Phase::Train },
            reference_for: None,
            aa_control: false,
            alone: false,
            engine: Engine::Libtorch,
        };
        CellJob {
            text: self.text.clone(),
            ..CellJob::new(key, self.device, self.profile, self.data_dir.clone())
        }
    }
}

/// The refusal of a parity case for `workload`, which is not a reference workload.
pub fn not_a_reference(workload: WorkloadId) -> Error {
    Error::Invalid(format!("parity compares the reference workloads' steps; {workload} is not one of them"))
}

/// Writes the case of `request` into `dir`: the baseline cell's initial weights (built from the
/// cell's seed, as its process builds them), its first `steps` batches, and the recipe.
pub fn export(request: &ExportRequest, dir: &Path) -> Result<ParityCase, Error> {
    if request.steps == 0 {
        return Err(Error::Invalid("parity: --steps must be at least 1".to_owned()));
    }
    std::fs::create_dir_all(dir).map_err(|e| Error::io(dir, e))?;
    let job = request.job();
    let inputs = cell::training_inputs(&job, request.steps)?;
    let recipe = &inputs.recipe;
    let device = request.device.tch();
    tch::manual_seed(request.seed as i64);
    let (model, weights) = match request.workload.family() {
        Family::CifarResnet => {
            let options = build::resnet_options(&job.key, recipe)?;
            let model = build::resnet_for(&job.key, recipe, device)?;
            let spec = ModelSpec::of_resnet(&options);
            (spec, named_cpu_tensors(&model))
        }
        Family::CharGpt => {
            let vocab_size = inputs.vocab_size.ok_or_else(|| {
                Error::Invalid(format!("{}: the text corpus gave no vocabulary", request.workload))
            })?;
            let model = build::gpt_for(&job.key, vocab_size, device)?;
            let spec = ModelSpec::of_gpt(model.config());
            (spec, named_cpu_tensors(&model))
        }
        Family::UserModel => return Err(not_a_reference(request.workload)),
    };
    let weights_path = dir.join(WEIGHTS_FILE);
    Tensor::write_safetensors(&weights, &weights_path)
        .map_err(|e| Error::Torch(format!("writing {}: {e}", weights_path.display())))?;
    let batches: Vec<(String, Tensor)> = inputs
        .batches
        .iter()
        .enumerate()
        .flat_map(|(k, b)| {
            [(format!("inputs.{k}"), cpu(&b.inputs)), (format!("targets.{k}"), cpu(&b.targets))]
        })
        .collect();
    let batches_path = dir.join(BATCHES_FILE);
    Tensor::write_safetensors(&batches, &batches_path)
        .map_err(|e| Error::Torch(format!("writing {}: {e}", batches_path.display())))?;
    let case = ParityCase {
        format: CASE_FORMAT,
        key: job.key,
        profile: request.profile,
        planned_steps: inputs.planned_steps,
        device: request.device,
        seed: request.seed,
        steps: request.steps,
        model,
        optimizer: OptimizerSpec::of(recipe.optimizer)?,
        clip_max_norm: recipe.clip_max_norm,
        learning_rates: (0..request.steps).map(|k| recipe.schedule.lr(k)).collect(),
        weights: WEIGHTS_FILE.to_owned(),
        batches: BATCHES_FILE.to_owned(),
    };
    store::write_json_atomically(&case, &dir.join(CASE_FILE))?;
    Ok(case)
}

/// The recipe the case's cell trains with (as its cell process derives it).
pub fn recipe(case: &ParityCase) -> Recipe {
    let tta = case.profile.settings(case.key.workload.family()).tta;
    Recipe::for_cell(&case.key, &tta, case.planned_steps, false)
}

/// Reads the case in `dir` and its batches, moved to the case's device.
pub fn load(dir: &Path) -> Result<(ParityCase, Vec<Batch>), Error> {
    let path = dir.join(CASE_FILE);
    let bytes = std::fs::read(&path).map_err(|e| Error::io(&path, e))?;
    let case: ParityCase =
        serde_json::from_slice(&bytes).map_err(|e| Error::Json { path: path.clone(), source: e })?;
    if case.format != CASE_FORMAT {
        return Err(Error::Invalid(format!(
            "{}: case format {}, this trickbench reads {CASE_FORMAT}; export the case again",
            path.display(),
            case.format
        )));
    }
    let batches_path = dir.join(&case.batches);
    let mut tensors: std::collections::HashMap<String, Tensor> = Tensor::read_safetensors(&batches_path)
        .map_err(|e| Error::Torch(format!("reading {}: {e}", batches_path.display())))?
        .into_iter()
        .collect();
    let device = case.device.tch();
    let batches = (0..case.steps)
        .map(|k| {
            let mut take = |name: String| {
                tensors.remove(&name).map(|t| t.to_device(device)).ok_or_else(|| {
                    Error::Invalid(format!("{}: no tensor {name} for step {k}", batches_path.display()))
                })
            };
            Ok(Batch { inputs: take(format!("inputs.{k}"))?, targets: take(format!("targets.{k}"))? })
        })
        .collect::<Result<Vec<_>, Error>>()?;
    Ok((case, batches))
}

/// Overwrites the variables of `model` (parameters and buffers) with the case's weights in `dir`;
/// every variable must be in the file.
pub fn load_weights(model: &impl Workload, case: &ParityCase, dir: &Path) -> Result<(), Error> {
    let path = dir.join(&case.weights);
    tch::no_grad(|| model.var_store().read_safetensors(&path))
        .map_err(|e| Error::Torch(format!("loading weights from {}: {e}", path.display())))
}
