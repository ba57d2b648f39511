//! The case a cell process on the PyTorch engine hands the engine script: each side's network in
//! PyTorch's terms and its initial weights (built from the cell's seed, as a libtorch process
//! builds them), the data its loader assembles both sides' batches from ([`super::data`]),
//! the recipe's optimizer and first learning rate, written into a scratch folder;
//! [`write_scripts`] writes the scripts that read it, for a cell that starts its own Python and for
//! the run's fork server.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::Serialize;
use tch::Tensor;

use super::data::{self, DataSpec, CASE_BATCHES};
use super::tta::{self, TtaCase};
use crate::bench::cell::data::{planned_steps, CellData, InputOptions};
use crate::bench::cell::CellJob;
use crate::bench::user_model;
use crate::device::{DeviceSpec, RehearsedGpu};
use crate::error::Error;
use crate::results::schema::{CellKey, CellKind, Phase};
use crate::results::store;
use crate::train::pytorch_terms::{named_cpu_tensors, ModelSpec, OptimizerSpec};
use crate::train::recipe::Recipe;
use crate::tricks::{Trick, TrickSet};
use crate::workloads::{build, split_hidden_weights, variable_names, Workload, WorkloadId};

/// The version of the case format the engine script reads (`CASE_FORMAT` in it).
const ENGINE_CASE_FORMAT: u32 = 3;
/// The case description inside the scratch folder.
const CASE_FILE: &str = "engine-case.json";
/// Steps between host reads of the metrics under `avoid-sync`, as trickbench's loop reads them.
const LOG_INTERVAL_STEPS: usize = crate::train::LOG_INTERVAL_STEPS;

/// The engine script, built into the binary so that a copy of the binary alone can run it.
const ENGINE_SCRIPT: &str = include_str!("../../../../scripts/engine/pytorch_engine.py");
/// The engine's data pipeline, imported by the engine script.
const LOADER_SCRIPT: &str = include_str!("../../../../scripts/engine/engine_loader.py");
/// The engine's tricks that change the network or the process, imported by the engine script.
const TRICKS_SCRIPT: &str = include_str!("../../../../scripts/engine/engine_tricks.py");
/// The engine's training to a target (the convergence tricks' recipe), imported by the engine
/// script.
const TTA_SCRIPT: &str = include_str!("../../../../scripts/engine/engine_tta.py");
/// The user's own network: its preparation (`prepare`) and how the engine script builds it.
const USER_MODEL_SCRIPT: &str = include_str!("../../../../scripts/engine/user_model.py");
/// The engine's device: every call that needs a CUDA device, and its stand-in on a rehearsed GPU.
const DEVICE_SCRIPT: &str = include_str!("../../../../scripts/engine/engine_device.py");

/// What the engine script reads from `engine-case.json` (its module documentation describes
/// each field).
#[derive(Debug, Serialize)]
struct EngineCase {
    /// [`ENGINE_CASE_FORMAT`].
    format: u32,
    /// The resolved device both sides train on (the CPU, for a rehearsed GPU).
    device: DeviceSpec,
    /// The GPU the CPU stands in for, on a rehearsal (`None`: a real device).
    #[serde(skip_serializing_if = "Option::is_none")]
    as_if_cuda: Option<AsIfCuda>,
    /// The memory budget the CUDA caching allocator is capped at (`run --memory-budget-mib`;
    /// `None`: the device's own memory).
    #[serde(skip_serializing_if = "Option::is_none")]
    memory_budget_bytes: Option<u64>,
    /// The seed each side's generator gets once the side is built (dropout masks).
    seed: u64,
    /// Intra-op threads for PyTorch (`None`: PyTorch's own choice).
    threads: Option<usize>,
    /// `train` or `eval`.
    kind: &'static str,
    /// What the engine's loader assembles the batches from.
    data: DataSpec,
    /// DataLoader worker processes under `loader-workers`: as many as libtorch's worker threads.
    loader_workers: usize,
    /// Micro-batches per optimizer step under `grad-accumulation`.
    accumulation_micro_batches: usize,
    /// The learning rate of every step: the schedule's first, as a libtorch process times at.
    learning_rate: f64,
    /// The recipe's optimizer, without `fused` (a trick the engine applies itself).
    optimizer: OptimizerSpec,
    /// Global gradient norm clipped to (`None`: no clipping).
    clip_max_norm: Option<f64>,
    /// Steps between host reads of the metrics under `avoid-sync`.
    log_interval: usize,
    /// The sides by name: the arms ([`arm_name`]) and, where the cells are paired, their
    /// reference ([`REFERENCE_SIDE`]).
    sides: BTreeMap<String, SideSpec>,
    /// How the case's one side trains to a target, for a time-to-accuracy cell (`None` for a
    /// throughput or memory cell).
    time_to_accuracy: Option<TtaCase>,
}

/// The GPU a rehearsal stands the CPU in for, as the engine script reads it.
#[derive(Debug, Serialize)]
struct AsIfCuda {
    /// Its class, for messages (`sm90`).
    gpu: &'static str,
    /// Its compute capability, major then minor.
    capability: [u32; 2],
    /// Its memory, bytes.
    memory_bytes: u64,
}

impl AsIfCuda {
    /// The description of `gpu`.
    fn of(gpu: RehearsedGpu) -> Self {
        let (major, minor) = gpu.capability();
        AsIfCuda { gpu: gpu.id(), capability: [major, minor], memory_bytes: gpu.memory_bytes() }
    }
}

/// The name of the reference's side in a case.
pub(super) const REFERENCE_SIDE: &str = "reference";

/// The name of arm `i`'s side in a case: `trick` for the job's own cell, `arm-1`, `arm-2`, … for
/// the further arms of a multi-arm process.
pub(super) fn arm_name(i: usize) -> String {
    if i == 0 {
        "trick".to_owned()
    } else {
        format!("arm-{i}")
    }
}

/// One side: its network, weights file and tricks.
#[derive(Debug, Serialize)]
struct SideSpec {
    /// The network in PyTorch's terms.
    model: ModelSpec,
    /// Its initial weights' file in the case's folder.
    weights: String,
    /// The tricks on.
    tricks: Vec<Trick>,
    /// The trick whose "off" side this is, where that is not the plain recipe.
    reference_for: Option<Trick>,
}

/// What [`write`] wrote that the cell process measures with.
pub(super) struct Written {
    /// The analytic FLOPs of one sample's forward pass through each arm's network, in arm order,
    /// then the reference's.
    pub(super) forward_flops_per_sample: Vec<f64>,
    /// The recipe the cell trains with.
    pub(super) recipe: Recipe,
}

/// Writes the case of `job` (its arms, [`CellJob::arm_jobs`], and their paired reference, when
/// they have one; for a time-to-accuracy cell how it trains to its target) into `dir`.
pub(super) fn write(job: &CellJob, reference: Option<&CellJob>, dir: &Path) -> Result<Written, Error> {
    std::fs::create_dir_all(dir).map_err(|e| Error::io(dir, e))?;
    let profile = job.settings();
    // The image files stay encoded: a side without packed-dataset decodes them every batch.
    let data = CellData::load_packing(job, &profile, false)?;
    let steps = planned_steps(&profile, &data, job.key.batch_size);
    let recipe = Recipe::for_cell(&job.key, &profile.tta, steps, job.super_convergence);
    let inputs = InputOptions::first_rank(job, &recipe);
    let trains_to_target = job.key.kind == CellKind::TimeToAccuracy;
    // A cell that trains to a target takes every planned step's batch; a timed one cycles a few.
    let batches = if trains_to_target { steps } else { CASE_BATCHES };
    let data_spec = data::write(job.key.kind, &data, &inputs, batches, dir)?;
    let network = match &data {
        CellData::Text { corpus, .. } => Network::Gpt { vocab: corpus.vocab_size() },
        CellData::Images { .. } if job.key.workload != WorkloadId::Model => Network::Resnet,
        CellData::Images { .. } | CellData::Prepared(_) | CellData::Samples(_) => {
            let dir = job.model_dir()?;
            let flops_per_sample = user_model::read_description(dir)?.flops_per_sample.unwrap_or(0.0);
            Network::User { dir, flops_per_sample }
        }
    };
    let mut sides = BTreeMap::new();
    let mut forward_flops_per_sample = Vec::new();
    let mut hidden_weights = Vec::new();
    for (i, arm) in job.arm_jobs().iter().enumerate() {
        let name = arm_name(i);
        let built = side_spec(&arm.key, &recipe, &network, &dir.join(format!("{name}.safetensors")))?;
        sides.insert(name, built.side);
        forward_flops_per_sample.push(built.forward_flops);
        hidden_weights = built.hidden_weights;
    }
    if let Some(reference) = reference {
        let weights = dir.join(format!("{REFERENCE_SIDE}.safetensors"));
        let built = side_spec(&reference.key, &recipe, &network, &weights)?;
        sides.insert(REFERENCE_SIDE.to_owned(), built.side);
        forward_flops_per_sample.push(built.forward_flops);
    }
    let time_to_accuracy = if trains_to_target {
        Some(tta::write(&recipe, steps, hidden_weights, &data, &inputs, &profile, dir)?)
    } else {
        None
    };
    let baseline = CellKey { tricks: TrickSet::baseline(), reference_for: None, ..job.key.clone() };
    let case = EngineCase {
        format: ENGINE_CASE_FORMAT,
        device: if job.device.rehearsed().is_some() { DeviceSpec::Cpu } else { job.device },
        as_if_cuda: job.device.rehearsed().map(AsIfCuda::of),
        memory_budget_bytes: job.memory_budget_bytes,
        seed: job.key.seed,
        // The threads libtorch uses in this process, so that both engines compute on as many.
        threads: usize::try_from(tch::get_num_threads()).ok(),
        kind: if job.key.kind == (CellKind::Throughput { phase: Phase::Eval }) { "eval" } else { "train" },
        data: data_spec,
        loader_workers: crate::data::loader::worker_count(),
        accumulation_micro_batches: crate::train::recipe::ACCUMULATION_MICRO_BATCHES,
        learning_rate: recipe.schedule.lr(0),
        optimizer: OptimizerSpec::of(Recipe::for_cell(&baseline, &profile.tta, steps, false).optimizer)?,
        clip_max_norm: recipe.clip_max_norm,
        log_interval: LOG_INTERVAL_STEPS,
        sides,
        time_to_accuracy,
    };
    store::write_json_atomically(&case, &dir.join(CASE_FILE))?;
    Ok(Written { forward_flops_per_sample, recipe })
}

/// The network a case's sides train.
enum Network<'a> {
    /// The workload's CIFAR ResNet.
    Resnet,
    /// The workload's GPT over a vocabulary of `vocab` characters.
    Gpt { vocab: usize },
    /// The user's model, prepared in `dir`, with its forward FLOPs per sample as PyTorch counted
    /// them (0 where it could not).
    User { dir: &'a Path, flops_per_sample: f64 },
}

/// A side of the case as [`side_spec`] built it.
struct BuiltSide {
    /// What the case says of it.
    side: SideSpec,
    /// Its network's forward FLOPs per sample.
    forward_flops: f64,
    /// The `state_dict` names of the hidden weights Muon would train (none for the user's
    /// model).
    hidden_weights: Vec<String>,
}

/// The side of cell `key`: its network built from the cell's seed (as its libtorch process builds
/// it; the user's model from its prepared weights), its weights written to `weights`.
fn side_spec(key: &CellKey, recipe: &Recipe, network: &Network, weights: &Path) -> Result<BuiltSide, Error> {
    tch::manual_seed(key.seed as i64);
    let cpu_device = tch::Device::Cpu;
    let (model, named, forward_flops, hidden_weights) = match network {
        Network::Resnet => {
            let options = build::resnet_options(key, recipe)?;
            let model = build::resnet_for(key, recipe, cpu_device)?;
            let spec = ModelSpec::of_resnet(&options);
            let hidden = hidden_weight_names(&model);
            (spec, named_cpu_tensors(&model), model.forward_flops_per_sample(), hidden)
        }
        Network::Gpt { vocab } => {
            let model = build::gpt_for(key, *vocab, cpu_device)?;
            let spec = ModelSpec::of_gpt(model.config());
            let hidden = hidden_weight_names(&model);
            (spec, named_cpu_tensors(&model), model.forward_flops_per_sample(), hidden)
        }
        Network::User { dir, flops_per_sample } => {
            let side = user_side(key, dir, weights)?;
            return Ok(BuiltSide { side, forward_flops: *flops_per_sample, hidden_weights: Vec::new() });
        }
    };
    Tensor::write_safetensors(&named, weights)
        .map_err(|e| Error::Torch(format!("writing {}: {e}", weights.display())))?;
    let side = SideSpec {
        model,
        weights: file_name(weights),
        tricks: key.tricks.iter().collect(),
        reference_for: key.reference_for,
    };
    Ok(BuiltSide { side, forward_flops, hidden_weights })
}

/// The names of `model`'s hidden weights ([`Workload::hidden_weights`]), as its weights file
/// names them.
fn hidden_weight_names(model: &impl Workload) -> Vec<String> {
    let (hidden, _) = split_hidden_weights(model);
    variable_names(model, &hidden)
}

/// The side of cell `key` of the user's model prepared in `dir`, its prepared weights copied to
/// `weights`.
fn user_side(key: &CellKey, dir: &Path, weights: &Path) -> Result<SideSpec, Error> {
    let prepared = dir.join(user_model::WEIGHTS_FILE);
    std::fs::copy(&prepared, weights).map_err(|e| Error::io(&prepared, e))?;
    Ok(SideSpec {
        model: ModelSpec::User { dir: std::path::absolute(dir).map_err(|e| Error::io(dir, e))? },
        weights: file_name(weights),
        tricks: key.tricks.iter().collect(),
        reference_for: key.reference_for,
    })
}

/// The file name of `path`, as the case names files in its folder.
fn file_name(path: &Path) -> String {
    path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default()
}

/// Writes the engine script and the parity script it takes its networks from, in the folders
/// the checkout keeps them in; returns the engine script's path (`user_model.py` is beside it).
pub fn write_scripts(dir: &Path) -> Result<PathBuf, Error> {
    let write = |relative: &str, text: &str| {
        let path = dir.join(relative);
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent).map_err(|e| Error::io(parent, e))?;
        }
        std::fs::write(&path, text).map_err(|e| Error::io(&path, e))?;
        Ok::<_, Error>(path)
    };
    write("parity/parity.py", crate::parity::PYTORCH_SCRIPT)?;
    write("engine/engine_loader.py", LOADER_SCRIPT)?;
    write("engine/engine_tricks.py", TRICKS_SCRIPT)?;
    write("engine/engine_tta.py", TTA_SCRIPT)?;
    write("engine/user_model.py", USER_MODEL_SCRIPT)?;
    write("engine/engine_device.py", DEVICE_SCRIPT)?;
    write("engine/pytorch_engine.py", ENGINE_SCRIPT)
}
