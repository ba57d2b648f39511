//! The model of a cell: its workload's network, structured and run with the kernels its tricks
//! and recipe choose.

use std::path::Path;

use super::fp8::Fp8Gemm;
use super::gpt::{AttentionKernel, Gpt, GptConfig, GptOptions};
use super::resnet::{CifarResnet, ResnetOptions};
use super::scripted::{ScriptedModel, EXPORT_FILE, LOSS_FILE, NO_BIAS_EXPORT_FILE};
use super::WorkloadId;
use crate::error::Error;
use crate::results::model::UserModel;
use crate::results::schema::CellKey;
use crate::train::recipe::Recipe;
use crate::tricks::Trick;

/// The structure of the CIFAR ResNet of the cell `key`: its depth from the workload, conv biases
/// as the tricks say, BatchNorm and its momentum as `recipe` says.
pub fn resnet_options(key: &CellKey, recipe: &Recipe) -> Result<ResnetOptions, Error> {
    Ok(ResnetOptions::for_workload(key.workload, !key.tricks.has(Trick::NoBiasBeforeBn))?
        .with_batch_norm(recipe.batch_norm)
        .with_bn_momentum(recipe.bn_momentum))
}

/// The CIFAR ResNet of the cell `key` on `device`, structured as [`resnet_options`] says, with the
/// TorchScript epilogue under `jit-fusion`.
pub fn resnet_for(key: &CellKey, recipe: &Recipe, device: tch::Device) -> Result<CifarResnet, Error> {
    let mut model = CifarResnet::new(resnet_options(key, recipe)?, device);
    if key.tricks.has(Trick::JitFusion) {
        model.use_jit_epilogue()?;
    }
    Ok(model)
}

/// The GPT of the cell `key` on `device` for a vocabulary of `vocab_size` characters, with fused
/// attention under `flash-attention` and under each trick that forces an SDPA backend (the process
/// switches set the backend, [`crate::train::apply_process_tricks`]), TorchScript pointwise chains
/// under `jit-fusion` and fp8 projections through `torch._scaled_mm` under `fp8-matmul`.
pub fn gpt_for(key: &CellKey, vocab_size: usize, device: tch::Device) -> Result<Gpt, Error> {
    let fused = key.tricks.has(Trick::FlashAttention) || key.tricks.forced_attention_backend().is_some();
    let options = GptOptions {
        attention: if fused { AttentionKernel::ScaledDotProduct } else { AttentionKernel::Explicit },
        jit_fusion: key.tricks.has(Trick::JitFusion),
        fp8: key.tricks.has(Trick::Fp8Matmul).then_some(Fp8Gemm::ScaledMm),
    };
    Gpt::new(gpt_config(key.workload, vocab_size as i64)?, options, device)
}

/// The shape of a GPT workload for a vocabulary of `vocab_size` characters.
pub fn gpt_config(workload: WorkloadId, vocab_size: i64) -> Result<GptConfig, Error> {
    match workload {
        WorkloadId::GptMini => Ok(GptConfig::mini(vocab_size)),
        WorkloadId::GptShakespeare => Ok(GptConfig::shakespeare(vocab_size)),
        other => Err(Error::Invalid(format!("{other} is not a GPT"))),
    }
}

/// The context length (tokens per window) of a GPT workload, whatever its vocabulary.
pub fn gpt_context(workload: WorkloadId) -> Result<usize, Error> {
    Ok(gpt_config(workload, 1)?.context as usize)
}

/// The user's network of the cell `key` on `device`, loaded from its TorchScript export in the
/// prepared folder `dir`: the export without the biases that feed only a BatchNorm under
/// `no-bias-before-bn`.
pub fn scripted_for(
    key: &CellKey,
    dir: &Path,
    model: &UserModel,
    device: tch::Device,
) -> Result<ScriptedModel, Error> {
    let export = if key.tricks.has(Trick::NoBiasBeforeBn) { NO_BIAS_EXPORT_FILE } else { EXPORT_FILE };
    ScriptedModel::load(&dir.join(export), &dir.join(LOSS_FILE), model, device, tch::Kind::Float)
}
