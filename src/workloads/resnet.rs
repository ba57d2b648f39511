//! CIFAR ResNet-8/20/56/110 (He et al. 2016, section 4.2): a 3×3 stem of 16 channels, three stages of
//! n basic blocks with 16, 32 and 64 channels, option-A (parameter-free) shortcuts, global average
//! pooling and a linear classifier. Depth = 6n + 2.
//!
//! Initialisation follows the widely used PyTorch reference implementation (akamaster's
//! `resnet_cifar.py`): `kaiming_normal_` (fan-in, ReLU gain) for convolution and linear weights,
//! PyTorch's default uniform(±1/√fan_in) for biases, BatchNorm weight 1 and bias 0. (tch's own
//! BatchNorm default draws the weight from U(0, 1), which is why every init is spelt out here.)
//! Variable names match the PyTorch module's `state_dict` keys.

use tch::nn::{self, Init, Module};
use tch::{Device, Tensor};

use super::{Workload, WorkloadId};
use crate::error::Error;
use crate::ffi::JitFunction;

/// The residual block's pointwise epilogue in TorchScript, for the `jit-fusion` trick: the same
/// math as the eager `(ys + shortcut).relu()`, compiled so the fuser can run it as one kernel.
pub const RESIDUAL_EPILOGUE_TORCHSCRIPT: &str = "
def residual_relu(x: Tensor, shortcut: Tensor) -> Tensor:
    return torch.relu(x + shortcut)
";

/// The name of the function in [`RESIDUAL_EPILOGUE_TORCHSCRIPT`].
pub const RESIDUAL_EPILOGUE_FUNCTION: &str = "residual_relu";

/// Options that change the network's structure.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ResnetOptions {
    /// Basic blocks per stage (3 for ResNet-20, 9 for ResNet-56, 18 for ResNet-110).
    pub blocks_per_stage: i64,
    /// Whether convolutions (all of which feed a BatchNorm) carry a bias: the `no-bias-before-bn`
    /// trick turns this off.
    pub conv_bias: bool,
}

impl ResnetOptions {
    /// The standard structure of a named CIFAR ResNet, with conv biases as chosen.
    pub fn for_workload(workload: WorkloadId, conv_bias: bool) -> Self {
        Self { blocks_per_stage: workload.resnet_blocks_per_stage(), conv_bias }
    }
}

/// Number of image classes.
const CLASSES: i64 = 10;
/// Channels of the three stages.
const STAGE_CHANNELS: [i64; 3] = [16, 32, 64];
/// Input image side, pixels.
const IMAGE_SIDE: i64 = 32;

/// A 3×3 convolution feeding a BatchNorm, with FLOPs bookkeeping.
#[derive(Debug)]
struct ConvBn {
    conv: nn::Conv2D,
    bn: nn::BatchNorm,
}

impl ConvBn {
    fn new(p: &nn::Path, name: &str, c_in: i64, c_out: i64, stride: i64, bias: bool) -> Self {
        let fan_in = (c_in * 9) as f64;
        let bound = 1.0 / fan_in.sqrt();
        let conv_cfg = nn::ConvConfig {
            stride,
            padding: 1,
            bias,
            ws_init: nn::init::DEFAULT_KAIMING_NORMAL,
            bs_init: Init::Uniform { lo: -bound, up: bound },
            ..Default::default()
        };
        let bn_cfg = nn::BatchNormConfig {
            ws_init: Init::Const(1.0),
            bs_init: Init::Const(0.0),
            ..Default::default()
        };
        let bn_name = name.replace("conv", "bn");
        Self {
            conv: nn::conv2d(p / name, c_in, c_out, 3, conv_cfg),
            bn: nn::batch_norm2d(p / bn_name.as_str(), c_out, bn_cfg),
        }
    }

    fn forward_t(&self, xs: &Tensor, train: bool) -> Tensor {
        self.conv.forward(xs).apply_t(&self.bn, train)
    }
}

/// A basic block: two 3×3 conv-BN layers and an identity or option-A shortcut.
#[derive(Debug)]
struct BasicBlock {
    first: ConvBn,
    second: ConvBn,
    /// Zero channels padded on each side of a downsampled shortcut (0: identity shortcut).
    shortcut_pad_channels: i64,
    stride: i64,
}

impl BasicBlock {
    fn forward_t(&self, xs: &Tensor, train: bool, epilogue: Option<&JitFunction>) -> Tensor {
        let ys = self.first.forward_t(xs, train).relu();
        let ys = self.second.forward_t(&ys, train);
        let shortcut = if self.stride == 1 && self.shortcut_pad_channels == 0 {
            xs.shallow_clone()
        } else {
            // Option A: subsample spatially, zero-pad the new channels.
            let p = self.shortcut_pad_channels;
            xs.slice(2, 0, None, self.stride)
                .slice(3, 0, None, self.stride)
                .constant_pad_nd([0, 0, 0, 0, p, p])
        };
        match epilogue {
            // Forward has no error path (like tch's plain ops, which panic): a failing call of a
            // function that compiled is a libtorch bug, reported with its message.
            Some(f) => f.call(&[&ys, &shortcut]).unwrap_or_else(|e| panic!("{e}")),
            None => (ys + shortcut).relu(),
        }
    }
}

/// A CIFAR ResNet.
#[derive(Debug)]
pub struct CifarResnet {
    vs: nn::VarStore,
    stem: ConvBn,
    blocks: Vec<BasicBlock>,
    classifier: nn::Linear,
    forward_flops_per_sample: f64,
    /// The TorchScript residual epilogue, when `jit-fusion` is on.
    epilogue: Option<JitFunction>,
}

impl CifarResnet {
    /// Builds the network on `device` with freshly initialised weights (seed tch's RNG first for
    /// reproducible weights).
    pub fn new(options: ResnetOptions, device: Device) -> Self {
        let vs = nn::VarStore::new(device);
        let root = vs.root();
        let bias = options.conv_bias;
        let conv_flops = |c_in: i64, c_out: i64, side: i64| 2.0 * (c_in * 9 * c_out * side * side) as f64;
        let mut flops = conv_flops(3, STAGE_CHANNELS[0], IMAGE_SIDE);
        let stem = ConvBn::new(&root, "conv1", 3, STAGE_CHANNELS[0], 1, bias);
        let mut blocks = Vec::new();
        let mut c_in = STAGE_CHANNELS[0];
        let mut side = IMAGE_SIDE;
        for (stage, &c_out) in STAGE_CHANNELS.iter().enumerate() {
            for b in 0..options.blocks_per_stage {
                let stride = if stage > 0 && b == 0 { 2 } else { 1 };
                let p = &root / format!("layer{}", stage + 1) / b;
                side /= stride;
                flops += conv_flops(c_in, c_out, side) + conv_flops(c_out, c_out, side);
                blocks.push(BasicBlock {
                    first: ConvBn::new(&p, "conv1", c_in, c_out, stride, bias),
                    second: ConvBn::new(&p, "conv2", c_out, c_out, 1, bias),
                    shortcut_pad_channels: (c_out - c_in) / 2,
                    stride,
                });
                c_in = c_out;
            }
        }
        let last = STAGE_CHANNELS[2];
        let bound = 1.0 / (last as f64).sqrt();
        let classifier = nn::linear(
            &root / "linear",
            last,
            CLASSES,
            nn::LinearConfig {
                ws_init: nn::init::DEFAULT_KAIMING_NORMAL,
                bs_init: Some(Init::Uniform { lo: -bound, up: bound }),
                bias: true,
            },
        );
        flops += 2.0 * (last * CLASSES) as f64;
        Self { vs, stem, blocks, classifier, forward_flops_per_sample: flops, epilogue: None }
    }

    /// Runs every residual epilogue through the TorchScript function compiled from
    /// [`RESIDUAL_EPILOGUE_TORCHSCRIPT`] instead of eager ops (the `jit-fusion` trick).
    pub fn use_jit_epilogue(&mut self) -> Result<(), Error> {
        self.epilogue =
            Some(JitFunction::compile(RESIDUAL_EPILOGUE_TORCHSCRIPT, RESIDUAL_EPILOGUE_FUNCTION)?);
        Ok(())
    }

    /// Number of trainable parameters (BatchNorm running statistics excluded).
    pub fn trainable_parameters(&self) -> i64 {
        self.vs.trainable_variables().iter().map(Tensor::numel).sum::<usize>() as i64
    }
}

impl Workload for CifarResnet {
    fn var_store(&self) -> &nn::VarStore {
        &self.vs
    }

    fn var_store_mut(&mut self) -> &mut nn::VarStore {
        &mut self.vs
    }

    fn forward(&self, inputs: &Tensor, train: bool) -> Tensor {
        let mut xs = self.stem.forward_t(inputs, train).relu();
        for block in &self.blocks {
            xs = block.forward_t(&xs, train, self.epilogue.as_ref());
        }
        xs.adaptive_avg_pool2d([1, 1]).flatten(1, -1).apply(&self.classifier)
    }

    fn loss(&self, outputs: &Tensor, targets: &Tensor) -> Tensor {
        outputs.cross_entropy_for_logits(targets)
    }

    fn correct(&self, outputs: &Tensor, targets: &Tensor) -> Tensor {
        outputs.argmax(-1, false).eq_tensor(targets).sum(tch::Kind::Int64)
    }

    fn forward_flops_per_sample(&self) -> f64 {
        self.forward_flops_per_sample
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn build(workload: WorkloadId, conv_bias: bool) -> CifarResnet {
        tch::manual_seed(0);
        CifarResnet::new(ResnetOptions::for_workload(workload, conv_bias), Device::Cpu)
    }

    #[test]
    fn parameter_counts_match_the_paper_models() {
        // Counts of the PyTorch reference: sum(p.numel() for p in resnet20().parameters()) etc.
        assert_eq!(build(WorkloadId::Resnet8, false).trainable_parameters(), 75_290);
        assert_eq!(build(WorkloadId::Resnet20, false).trainable_parameters(), 269_722);
        assert_eq!(build(WorkloadId::Resnet56, false).trainable_parameters(), 853_018);
        assert_eq!(build(WorkloadId::Resnet110, false).trainable_parameters(), 1_727_962);
    }

    #[test]
    fn conv_bias_adds_one_parameter_per_output_channel() {
        // ResNet-20 has 19 convolutions: the stem (16) and 2 per block (6×16 + 6×32 + 6×64).
        let extra = 16 + 6 * 16 + 6 * 32 + 6 * 64;
        assert_eq!(build(WorkloadId::Resnet20, true).trainable_parameters(), 269_722 + extra);
    }

    #[test]
    fn output_has_one_logit_per_class() {
        let net = build(WorkloadId::Resnet20, false);
        let xs = Tensor::randn([4, 3, 32, 32], (tch::Kind::Float, Device::Cpu));
        assert_eq!(net.forward(&xs, true).size(), [4, 10]);
        assert_eq!(net.forward(&xs, false).size(), [4, 10]);
    }

    #[test]
    fn initialisation_follows_pytorch() {
        let net = build(WorkloadId::Resnet20, true);
        let vars = net.var_store().variables();
        assert!(vars["bn1.weight"].eq(1.0).all().int64_value(&[]) == 1);
        assert!(vars["layer2.0.bn2.bias"].eq(0.0).all().int64_value(&[]) == 1);
        // kaiming_normal_ for a 3×3×16 fan-in: std = sqrt(2 / 144).
        let w = &vars["layer1.0.conv1.weight"];
        let std = w.std(true).double_value(&[]);
        assert!((std - (2.0f64 / 144.0).sqrt()).abs() < 0.01, "std {std}");
        let bias_bound = 1.0 / 144f64.sqrt();
        assert!(vars["layer1.0.conv1.bias"].abs().max().double_value(&[]) <= bias_bound);
    }

    #[test]
    fn forward_flops_count_the_convolutions() {
        // ResNet-20 is commonly quoted at about 41 MMACs per image.
        let flops = build(WorkloadId::Resnet20, false).forward_flops_per_sample();
        assert!((80e6..84e6).contains(&flops), "{flops}");
    }
}
