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
use crate::train::recipe::{OptimizerChoice, Recipe};
use crate::tricks::TrickSet;
use crate::workloads::gpt::GptConfig;
use crate::workloads::resnet::ResnetOptions;
use crate::workloads::{build, Family, Workload, WorkloadId};

/// The version of the case format both sides read (`CASE_FORMAT` in the script).
pub const CASE_FORMAT: u32 = 1;
/// The case description inside a case directory.
pub const CASE_FILE: &str = "case.json";
/// The initial weights inside a case directory.
pub const WEIGHTS_FILE: &str = "weights.safetensors";
/// The batches inside a case directory (`inputs.K`, `targets.K` for step K).
pub const BATCHES_FILE: &str = "batches.safetensors";

/// The network, in the terms the PyTorch script builds it from.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "kebab-case")]
pub enum ModelSpec {
    /// A CIFAR ResNet with BatchNorm and option-A shortcuts.
    CifarResnet {
        /// Basic blocks per stage.
        blocks_per_stage: i64,
        /// Whether the convolutions carry a bias.
        conv_bias: bool,
    },
    /// A nanoGPT-style character GPT without biases.
    Gpt {
        /// Characters in the vocabulary.
        vocab_size: i64,
        /// Tokens per window.
        context: i64,
        /// Decoder blocks.
        layers: i64,
        /// Attention heads per block.
        heads: i64,
        /// Width of the residual stream.
        width: i64,
        /// Dropout probability in training.
        dropout: f64,
    },
    /// The user's own network, prepared in a folder ([`crate::bench::user_model`]).
    User {
        /// The prepared folder, absolute.
        dir: std::path::PathBuf,
    },
}

impl ModelSpec {
    /// The spec of a CIFAR ResNet built with `options`.
    pub fn of_resnet(options: &ResnetOptions) -> Self {
        ModelSpec::CifarResnet { blocks_per_stage: options.blocks_per_stage, conv_bias: options.conv_bias }
    }

    /// The spec of a GPT of shape `c`.
    pub fn of_gpt(c: &GptConfig) -> Self {
        ModelSpec::Gpt {
            vocab_size: c.vocab_size,
            context: c.context,
            layers: c.layers,
            heads: c.heads,
            width: c.width,
            dropout: c.dropout,
        }
    }
}

/// The optimizer, in the terms of `torch.optim`.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "kebab-case")]
pub enum OptimizerSpec {
    /// `torch.optim.SGD` (no Nesterov, no dampening).
    Sgd {
        /// Momentum factor.
        momentum: f64,
        /// L2 penalty added to the gradient.
        weight_decay: f64,
    },
    /// `torch.optim.Adam` (L2 penalty in the gradient).
    Adam {
        /// First-moment decay.
        beta1: f64,
        /// Second-moment decay.
        beta2: f64,
        /// Added to the root of the second moment.
        eps: f64,
        /// L2 penalty added to the gradient.
        weight_decay: f64,
    },
    /// `torch.optim.AdamW` (decoupled weight decay).
    Adamw {
        /// First-moment decay.
        beta1: f64,
        /// Second-moment decay.
        beta2: f64,
        /// Added to the root of the second moment.
        eps: f64,
        /// Decoupled decay per unit of learning rate.
        weight_decay: f64,
    },
}

impl OptimizerSpec {
    /// The `torch.optim` counterpart of `choice`; an error for the optimizers the script has no
    /// counterpart for (LARS, LAMB) and for fused kernels (the case compares the plain step).
    pub fn of(choice: OptimizerChoice) -> Result<Self, Error> {
        match choice {
            OptimizerChoice::Sgd { config, fused: false } => {
                Ok(OptimizerSpec::Sgd { momentum: config.momentum, weight_decay: config.weight_decay })
            }
            OptimizerChoice::Adam { config, decoupled, fused: false } => {
                let (beta1, beta2, eps, weight_decay) =
                    (config.beta1, config.beta2, config.eps, config.weight_decay);
                Ok(if decoupled {
                    OptimizerSpec::Adamw { beta1, beta2, eps, weight_decay }
                } else {
                    OptimizerSpec::Adam { beta1, beta2, eps, weight_decay }
                })
            }
            other => Err(Error::Invalid(format!(
                "parity compares the plain recipe's optimizer; {other:?} has no counterpart in the PyTorch script"
            ))),
        }
    }
}

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
        CellJob {
            key: CellKey {
                workload: self.workload,
                tricks: TrickSet::default(),
                batch_size: self.batch_size,
                seed: self.seed,
                kind: CellKind::Throughput { phase: Phase::Train },
                reference_for: None,
                aa_control: false,
                engine: Engine::Libtorch,
            },
            device: self.device,
            profile: self.profile,
            data_dir: self.data_dir.clone(),
            round: 0,
            images: None,
            text: self.text.clone(),
            memory_budget_bytes: None,
            super_convergence: false,
            protocol: None,
            family_settings: None,
            trace: None,
            paired_with: None,
            python: None,
            pytorch_server: None,
            model_dir: None,
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

/// Every variable of `model` by name, as contiguous CPU tensors.
pub(crate) fn named_cpu_tensors(model: &impl Workload) -> Vec<(String, Tensor)> {
    let mut named: Vec<(String, Tensor)> =
        model.var_store().variables().into_iter().map(|(name, t)| (name, cpu(&t))).collect();
    named.sort_by(|a, b| a.0.cmp(&b.0));
    named
}

/// A detached, contiguous CPU copy of `t`.
pub(crate) fn cpu(t: &Tensor) -> Tensor {
    t.detach().to_device(tch::Device::Cpu).contiguous()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::optim::adam::AdamConfig;
    use crate::optim::lars::LarsConfig;
    use crate::train::recipe::RECIPE_SGD;

    #[test]
    fn optimizers_map_to_torch_optim_and_the_ones_without_a_counterpart_are_refused() {
        let sgd = OptimizerChoice::Sgd { config: RECIPE_SGD, fused: false };
        assert_eq!(OptimizerSpec::of(sgd).unwrap(), OptimizerSpec::Sgd { momentum: 0.9, weight_decay: 5e-4 });
        let config = AdamConfig { weight_decay: 0.1, ..AdamConfig::default() };
        let adamw = OptimizerChoice::Adam { config, decoupled: true, fused: false };
        assert!(
            matches!(OptimizerSpec::of(adamw).unwrap(), OptimizerSpec::Adamw { weight_decay, .. } if weight_decay == 0.1)
        );
        let adam = OptimizerChoice::Adam { config, decoupled: false, fused: false };
        assert!(matches!(OptimizerSpec::of(adam).unwrap(), OptimizerSpec::Adam { .. }));
        let lars = OptimizerChoice::Lars(LarsConfig::default());
        assert!(OptimizerSpec::of(lars).unwrap_err().to_string().contains("no counterpart"));
        let fused = OptimizerChoice::Sgd { config: RECIPE_SGD, fused: true };
        assert!(OptimizerSpec::of(fused).is_err(), "the case compares the plain update");
    }
}
