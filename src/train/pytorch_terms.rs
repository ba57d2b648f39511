//! The network and the optimizer in PyTorch's terms, as the scripts that train them in eager
//! PyTorch read them: the parity case's and the PyTorch engine's, which share these specs.

use serde::{Deserialize, Serialize};
use tch::Tensor;

use crate::error::Error;
use crate::optim::lamb::LambConfig;
use crate::optim::lars::LarsConfig;
use crate::train::recipe::{MuonRest, OptimizerChoice};
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
        /// Whether a BatchNorm follows every convolution (without, every convolution has a bias).
        #[serde(default = "batch_norm_on")]
        batch_norm: bool,
        /// BatchNorm's momentum in PyTorch's convention (`nn.BatchNorm2d(momentum=…)`).
        #[serde(default = "pytorch_bn_momentum")]
        bn_momentum: f64,
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
        ModelSpec::CifarResnet {
            blocks_per_stage: options.blocks_per_stage,
            conv_bias: options.conv_bias,
            batch_norm: options.batch_norm,
            bn_momentum: options.bn_momentum,
        }
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

/// A ResNet spec written before `batch_norm` was: BatchNorm on.
fn batch_norm_on() -> bool {
    true
}

/// A ResNet spec written before `bn_momentum` was: PyTorch's default.
fn pytorch_bn_momentum() -> f64 {
    crate::train::recipe::BN_MOMENTUM
}

/// The optimizer, in the terms of `torch.optim` (LARS and LAMB, which it does not have, as the
/// optimizer classes a PyTorch user writes for them).
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
    /// LARS (You, Gitman & Ginsburg 2017), as [`crate::optim::lars`] defines it.
    Lars {
        /// Momentum factor.
        momentum: f64,
        /// Weight decay, added to the gradient and to the trust ratio's denominator.
        weight_decay: f64,
        /// How far one step may move a layer, relative to its weight norm.
        trust_coefficient: f64,
        /// Whether parameters of dimension ≤ 1 follow plain momentum SGD.
        exclude_1d: bool,
    },
    /// LAMB (You et al. 2020), as [`crate::optim::lamb`] defines it.
    Lamb {
        /// First-moment decay.
        beta1: f64,
        /// Second-moment decay.
        beta2: f64,
        /// Added to the root of the second moment.
        eps: f64,
        /// Weight decay, added to Adam's direction.
        weight_decay: f64,
        /// Whether parameters of dimension ≤ 1 follow plain Adam.
        exclude_1d: bool,
    },
}

/// `torch.optim.Muon` over the hidden weights, in the terms of its constructor (Nesterov on,
/// the learning rate adjusted by `√max(1, rows/cols)`, its default).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct MuonSpec {
    /// Muon's learning rate as a multiple of the schedule's (which the other optimizer takes).
    pub lr_ratio: f64,
    /// Nesterov momentum.
    pub momentum: f64,
    /// Decoupled decay per unit of Muon's learning rate.
    pub weight_decay: f64,
    /// Newton–Schulz steps.
    pub ns_steps: usize,
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

    /// The optimizers of a recipe that trains to a target, whatever its choice: the optimizer of
    /// every parameter Muon does not take, and Muon's, where the recipe has it. `fused` is left
    /// out: `fused-optimizer` is a trick the PyTorch engine applies itself.
    pub fn of_recipe(choice: OptimizerChoice) -> (Self, Option<MuonSpec>) {
        let plain = |choice| Self::of(choice).expect("an unfused SGD or Adam has a counterpart");
        match choice {
            OptimizerChoice::Sgd { config, .. } => {
                (plain(OptimizerChoice::Sgd { config, fused: false }), None)
            }
            OptimizerChoice::Adam { config, decoupled, .. } => {
                (plain(OptimizerChoice::Adam { config, decoupled, fused: false }), None)
            }
            OptimizerChoice::Lars(c) => {
                let LarsConfig { momentum, weight_decay, trust_coefficient, exclude_1d } = c;
                (OptimizerSpec::Lars { momentum, weight_decay, trust_coefficient, exclude_1d }, None)
            }
            OptimizerChoice::Lamb(c) => {
                let LambConfig { beta1, beta2, eps, weight_decay, exclude_1d } = c;
                (OptimizerSpec::Lamb { beta1, beta2, eps, weight_decay, exclude_1d }, None)
            }
            OptimizerChoice::Muon { config, rest, .. } => {
                let rest = match rest {
                    MuonRest::Sgd(config) => OptimizerChoice::Sgd { config, fused: false },
                    MuonRest::Adamw(config) => {
                        OptimizerChoice::Adam { config, decoupled: true, fused: false }
                    }
                };
                let muon = MuonSpec {
                    lr_ratio: config.lr_ratio,
                    momentum: config.momentum,
                    weight_decay: config.weight_decay,
                    ns_steps: config.newton_schulz_steps,
                };
                (plain(rest), Some(muon))
            }
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
