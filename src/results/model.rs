//! What a run records about the user's own network (`run --model SPEC`): where it came from, its
//! shape, what it is built of (which decides the tricks that apply) and whether it could be
//! exported for the libtorch engine. Written by `scripts/engine/user_model.py prepare` as
//! `model.json`, read back here and kept in the results unchanged.

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

/// The version of `model.json` this build reads.
pub const MODEL_FORMAT: u32 = 1;

/// The user's network as its preparation described it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct UserModel {
    /// [`MODEL_FORMAT`].
    pub format: u32,
    /// The SPEC as given: `FILE.py`, `FILE.py:FUNCTION`, `torchvision:NAME` or `timm:NAME`.
    pub spec: String,
    /// Where the network came from.
    pub source: ModelSource,
    /// The model file, absolute (`None` for a library's model).
    pub file: Option<PathBuf>,
    /// The function of the file that builds the network (`None` for a library's model).
    pub function: Option<String>,
    /// SHA-256 of the model file's bytes, hex (`None` for a library's model).
    pub file_sha256: Option<String>,
    /// The library and its version (`None` for a file).
    pub package: Option<Package>,
    /// The name reports show: `mynet.py`, `mynet.py:build` or `torchvision:resnet18`.
    pub name: String,
    /// The network's Python class.
    pub class: String,
    /// Trainable parameters.
    pub parameters: u64,
    /// Samples per batch the batches were made for.
    pub batch_size: usize,
    /// Side of the square images made for a model without its own `batch()`, pixels (`None`: the
    /// file's `batch()` made the inputs).
    pub image_size: Option<u32>,
    /// Batches prepared; training cycles through them.
    pub batches: usize,
    /// One batch's inputs.
    pub inputs: TensorInfo,
    /// One batch's targets.
    pub targets: TensorInfo,
    /// The network's output on one batch.
    pub output: TensorInfo,
    /// Samples in one batch as throughput counts them: the targets' elements (images, or tokens).
    pub samples_per_batch: usize,
    /// What a sample is.
    pub sample_unit: SampleUnit,
    /// Forward FLOPs per sample counted by PyTorch's `FlopCounterMode` (a multiply-add is 2;
    /// `None`: it could not count them).
    pub flops_per_sample: Option<f64>,
    /// The loss trained.
    pub loss: Supplied,
    /// The optimizer trained with.
    pub optimizer: Supplied,
    /// What the network is built of.
    pub features: ModelFeatures,
    /// The TorchScript export the libtorch engine trains.
    pub export: Export,
    /// Whether an export without the biases of the convolutions that feed only a BatchNorm was
    /// written (`no-bias-before-bn` on the libtorch engine).
    pub no_bias_export: bool,
    /// The data of the file's `dataset()`, which its time to accuracy trains and is tested on
    /// (`None` without one: CIFAR-10 then, where the model takes its images). Absent from
    /// descriptions written before files could define it, and not written without one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dataset: Option<ModelDataset>,
}

/// The splits of a user's `dataset()`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ModelDataset {
    /// Samples of the training split.
    pub train_samples: usize,
    /// Samples of the test split.
    pub test_samples: usize,
    /// The training split's inputs (samples first).
    pub inputs: TensorInfo,
    /// The training split's targets (samples first).
    pub targets: TensorInfo,
}

/// Where a user's network came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum ModelSource {
    /// A Python file of the user's.
    File,
    /// `torchvision.models`.
    Torchvision,
    /// `timm`.
    Timm,
}

/// A Python package and its version.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Package {
    /// Its import name.
    pub name: String,
    /// Its `__version__`.
    pub version: String,
}

/// A tensor's shape and dtype.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TensorInfo {
    /// Its sizes.
    pub shape: Vec<i64>,
    /// PyTorch's name of its dtype (`float32`, `int64`).
    pub dtype: String,
}

/// What a sample of a user's model is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum SampleUnit {
    /// An image (4-d floating or uint8 inputs).
    Images,
    /// A token (other integer inputs).
    Tokens,
    /// Anything else: one target element.
    Samples,
}

impl SampleUnit {
    /// The unit's plural name, as throughput is written.
    pub fn name(self) -> &'static str {
        match self {
            SampleUnit::Images => "images",
            SampleUnit::Tokens => "tokens",
            SampleUnit::Samples => "samples",
        }
    }
}

/// Whether a part of training is trickbench's default or the model file's own.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Supplied {
    /// The default: cross-entropy for the loss.
    CrossEntropy,
    /// The default: the ResNet recipe's for the optimizer.
    Recipe,
    /// The file's own function.
    File,
}

/// What a user's network is built of: what decides which tricks apply to it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ModelFeatures {
    /// `nn.Conv2d` modules.
    pub convolutions: usize,
    /// Convolutions with a bias whose output feeds only a BatchNorm (found by `torch.fx`).
    pub bias_before_batch_norm: usize,
    /// Why they could not be looked for, where they could not.
    pub bias_before_batch_norm_note: Option<String>,
    /// Whether a training step calls `scaled_dot_product_attention`.
    pub sdpa: bool,
    /// `nn.Linear` modules.
    pub linears: usize,
    /// `nn.Linear` modules (of exactly that class) whose in and out features are multiples of 16,
    /// which `torch._scaled_mm` needs: those `fp8-matmul` converts. `None` in a description that
    /// did not count them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fp8_linears: Option<usize>,
    /// Whether an `nn.Dropout` module drops anything.
    pub dropout: bool,
}

/// The network's TorchScript export, or why there is none.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Export {
    /// How it was exported (`None`: it could not be).
    pub method: Option<ExportMethod>,
    /// The eager network's float64 loss on the first batch, which the export reproduced.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub loss_float64: Option<f64>,
    /// Why it could not be exported.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}

/// How a network was exported to TorchScript.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum ExportMethod {
    /// `torch.jit.trace` on the first batch: the operations that batch ran, in training mode.
    Trace,
    /// `torch.jit.script`: the forward's code, control flow included.
    Script,
}

impl ExportMethod {
    /// The `torch.jit` function that made the export: `torch.jit.trace` or `torch.jit.script`.
    pub fn name(self) -> &'static str {
        match self {
            ExportMethod::Trace => "torch.jit.trace",
            ExportMethod::Script => "torch.jit.script",
        }
    }
}

impl UserModel {
    /// Why the libtorch engine cannot train the network, where it cannot.
    pub fn not_exported(&self) -> Option<String> {
        match self.export.method {
            Some(_) => None,
            None => Some(format!(
                "{} could not be exported to TorchScript, which the libtorch engine trains: {}",
                self.name,
                self.export.reason.as_deref().unwrap_or("no reason recorded")
            )),
        }
    }
}

/// A described model for the tests of what reads descriptions.
#[cfg(test)]
pub(crate) mod fixtures {
    use super::*;

    /// A small CNN file's description: convolutions with biases before BatchNorms, one linear,
    /// no attention, traced.
    pub(crate) fn cnn() -> UserModel {
        let tensor = |shape: Vec<i64>, dtype: &str| TensorInfo { shape, dtype: dtype.to_owned() };
        UserModel {
            format: 1,
            spec: "examples/cnn.py".into(),
            source: ModelSource::File,
            file: Some("/abs/examples/cnn.py".into()),
            function: Some("model".into()),
            file_sha256: Some("00".repeat(32)),
            package: None,
            name: "cnn.py".into(),
            class: "Net".into(),
            parameters: 1000,
            batch_size: 32,
            image_size: None,
            batches: 4,
            inputs: tensor(vec![32, 3, 32, 32], "float32"),
            targets: tensor(vec![32], "int64"),
            output: tensor(vec![32, 10], "float32"),
            samples_per_batch: 32,
            sample_unit: SampleUnit::Images,
            flops_per_sample: Some(1e6),
            loss: Supplied::CrossEntropy,
            optimizer: Supplied::Recipe,
            features: ModelFeatures {
                convolutions: 3,
                bias_before_batch_norm: 2,
                bias_before_batch_norm_note: None,
                sdpa: false,
                linears: 1,
                fp8_linears: Some(1),
                dropout: false,
            },
            export: Export { method: Some(ExportMethod::Trace), loss_float64: Some(2.3), reason: None },
            no_bias_export: true,
            dataset: None,
        }
    }
}
