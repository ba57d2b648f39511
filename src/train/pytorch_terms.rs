//! The network and the optimizer in PyTorch's terms, as the scripts that train them in eager
//! PyTorch read them: the parity case's and the PyTorch engine's, which share these specs.

use serde::{Deserialize, Serialize};
use tch::Tensor;

use crate::error::Error;
use crate::train::recipe::OptimizerChoice;
use crate::workloads::gpt::GptConfig;
use crate::workloads::resnet::ResnetOptions;
use crate::workloads::Workload;

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
