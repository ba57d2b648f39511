//! CIFAR ResNet-8/20/56/110 (He et al. 2016, section 4.2): a 3×3 stem of 16 channels, three stages of
//! n basic blocks with 16, 32 and 64 channels, option-A (parameter-free) shortcuts, global average
//! pooling and a linear classifier. Depth = 6n + 2.
//!
//! Initialisation follows the widely used PyTorch reference implementation (akamaster's
//! `resnet_cifar.py`): `kaiming_normal_` (fan-in, ReLU gain) for convolution and linear weights,
//! PyTorch's default uniform(±1/√fan_in) for biases, BatchNorm weight 1 and bias 0. (tch's own
//! BatchNorm default draws the weight from U(0, 1), which is why every init is spelt out here.)
//! Variable names match the PyTorch module's `state_dict` keys.
//!
//! Without BatchNorm (the `batch-norm` trick's "off" side) every convolution is a plain one with
//! a bias, initialised as PyTorch's `nn.Conv2d` is by default (weight and bias U(±1/√fan_in), which
//! is `kaiming_uniform_` with a = √5); the classifier keeps the initialisation above.
//!
//! For activation checkpointing the network is cut into [`Workload::segments`]: the stem, then one
//! segment per basic block (the last one with the pooling and classifier), as residual networks
//! are usually checkpointed. A block keeps seven activations and has one input, and most of the
//! memory sits in the first, full-resolution stage, so per-block segments keep less than Chen et
//! al.'s √n runs of blocks would: ResNet-56 keeps its 28 segment inputs (about 1 MB per image)
//! plus one block's activations (0.45 MB) instead of 7 MB; √n runs would hold a 5-block run of
//! the first stage (2.2 MB). ResNet-8 has 4 segments, ResNet-20 10, ResNet-56 28, ResNet-110 55.

use tch::nn::{self, Init, Module};
use tch::{Device, Tensor};

use super::{Workload, WorkloadId};
use crate::error::Error;
use crate::ffi::JitFunction;
use crate::train::recipe::BN_MOMENTUM;

/// The residual block's pointwise epilogue in TorchScript, for the `jit-fusion` trick: the same
/// math as the eager `(ys + shortcut).relu()`, compiled so the fuser can run it as one kernel.
pub const RESIDUAL_EPILOGUE_TORCHSCRIPT: &str = "
def residual_relu(x: Tensor, shortcut: Tensor) -> Tensor:
    return torch.relu(x + shortcut)
";

/// The name of the function in [`RESIDUAL_EPILOGUE_TORCHSCRIPT`].
pub const RESIDUAL_EPILOGUE_FUNCTION: &str = "residual_relu";

/// Options that change the network's structure, and how its BatchNorm layers keep statistics.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ResnetOptions {
    /// Basic blocks per stage (3 for ResNet-20, 9 for ResNet-56, 18 for ResNet-110).
    pub blocks_per_stage: i64,
    /// Whether convolutions that feed a BatchNorm carry a bias: the `no-bias-before-bn` trick
    /// turns this off. Without BatchNorm every convolution has a bias whatever this says.
    pub conv_bias: bool,
    /// Whether every convolution is followed by a BatchNorm (the standard network); without, the
    /// convolutions are plain, biased and PyTorch-default initialised (the `batch-norm` trick).
    pub batch_norm: bool,
    /// BatchNorm's momentum in PyTorch's convention: each training forward pass sets running =
    /// (1 − m)·running + m·batch statistic. PyTorch's default is 0.1; `bn-momentum` sets
    /// airbench's 0.4.
    pub bn_momentum: f64,
}

impl ResnetOptions {
    /// The standard structure of a named CIFAR ResNet (with BatchNorm at PyTorch's momentum), with
    /// conv biases as chosen; an error for a workload that is not a CIFAR ResNet.
    pub fn for_workload(workload: WorkloadId, conv_bias: bool) -> Result<Self, Error> {
        let blocks_per_stage = workload
            .resnet_blocks_per_stage()
            .ok_or_else(|| Error::Invalid(format!("{workload} is not a CIFAR ResNet")))?;
        Ok(Self { blocks_per_stage, conv_bias, batch_norm: true, bn_momentum: BN_MOMENTUM })
    }

    /// The same structure with BatchNorm layers (`true`) or without any (`false`).
    pub fn with_batch_norm(self, batch_norm: bool) -> Self {
        Self { batch_norm, ..self }
    }

    /// The same structure with BatchNorm at `bn_momentum` (PyTorch's convention).
    pub fn with_bn_momentum(self, bn_momentum: f64) -> Self {
        Self { bn_momentum, ..self }
    }
}

/// Number of image classes.
const CLASSES: i64 = 10;
/// Channels of the three stages.
const STAGE_CHANNELS: [i64; 3] = [16, 32, 64];
/// Input image side, pixels.
const IMAGE_SIDE: i64 = 32;

/// A 3×3 convolution feeding a BatchNorm, or a plain biased convolution in a network without
/// BatchNorm.
#[derive(Debug)]
struct ConvBn {
    conv: nn::Conv2D,
    bn: Option<nn::BatchNorm>,
}

impl ConvBn {
    fn new(p: &nn::Path, name: &str, c_in: i64, c_out: i64, stride: i64, options: ResnetOptions) -> Self {
        let fan_in = (c_in * 9) as f64;
        let bound = 1.0 / fan_in.sqrt();
        let default_uniform = Init::Uniform { lo: -bound, up: bound };
        let conv_cfg = nn::ConvConfig {
            stride,
            padding: 1,
            bias: options.conv_bias || !options.batch_norm,
            ws_init: if options.batch_norm { nn::init::DEFAULT_KAIMING_NORMAL } else { default_uniform },
            bs_init: default_uniform,
            ..Default::default()
        };
        let bn = options.batch_norm.then(|| {
            let bn_cfg = nn::BatchNormConfig {
                momentum: options.bn_momentum,
                ws_init: Init::Const(1.0),
                bs_init: Init::Const(0.0),
                ..Default::default()
            };
            nn::batch_norm2d(p / name.replace("conv", "bn").as_str(), c_out, bn_cfg)
        });
        Self { conv: nn::conv2d(p / name, c_in, c_out, 3, conv_cfg), bn }
    }

    fn forward_t(&self, xs: &Tensor, train: bool) -> Tensor {
        let ys = self.conv.forward(xs);
        match &self.bn {
            Some(bn) => ys.apply_t(bn, train),
            None => ys,
        }
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
        let conv_flops = |c_in: i64, c_out: i64, side: i64| 2.0 * (c_in * 9 * c_out * side * side) as f64;
        let mut flops = conv_flops(3, STAGE_CHANNELS[0], IMAGE_SIDE);
        let stem = ConvBn::new(&root, "conv1", 3, STAGE_CHANNELS[0], 1, options);
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
                    first: ConvBn::new(&p, "conv1", c_in, c_out, stride, options),
                    second: ConvBn::new(&p, "conv2", c_out, c_out, 1, options),
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

    /// Runs `blocks` on `xs`.
    fn run_blocks(&self, blocks: &[BasicBlock], xs: Tensor, train: bool) -> Tensor {
        blocks.iter().fold(xs, |xs, block| block.forward_t(&xs, train, self.epilogue.as_ref()))
    }

    /// Global average pooling and the classifier.
    fn head(&self, xs: &Tensor) -> Tensor {
        xs.adaptive_avg_pool2d([1, 1]).flatten(1, -1).apply(&self.classifier)
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
        let xs = self.stem.forward_t(inputs, train).relu();
        self.head(&self.run_blocks(&self.blocks, xs, train))
    }

    fn segments(&self) -> usize {
        1 + self.blocks.len()
    }

    fn forward_segment(&self, k: usize, xs: &Tensor, train: bool) -> Tensor {
        let last = self.segments() - 1;
        assert!(k <= last, "segment {k} of a network with {} segments", last + 1);
        if k == 0 {
            return self.stem.forward_t(xs, train).relu();
        }
        let xs = self.run_blocks(&self.blocks[k - 1..k], xs.shallow_clone(), train);
        if k == last {
            self.head(&xs)
        } else {
            xs
        }
    }

    /// The residual blocks' convolution weights; the stem convolution (the input layer), the
    /// classifier, the biases and BatchNorm are left out.
    fn hidden_weights(&self) -> Vec<Tensor> {
        let blocks = self.blocks.iter().flat_map(|b| [&b.first, &b.second]);
        blocks.map(|conv_bn| conv_bn.conv.ws.shallow_clone()).collect()
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

    fn mostly_convolutions(&self) -> bool {
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_support::seeded;

    fn build(workload: WorkloadId, conv_bias: bool) -> CifarResnet {
        seeded(0, || CifarResnet::new(ResnetOptions::for_workload(workload, conv_bias).unwrap(), Device::Cpu))
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
    fn hidden_weights_are_the_block_convolutions_only() {
        // channels_last replaces a weight's memory in place, before the optimizer is built.
        for (conv_bias, channels_last) in [(false, false), (true, false), (false, true)] {
            let mut net = build(WorkloadId::Resnet8, conv_bias);
            if channels_last {
                for (_, mut var) in net.var_store_mut().variables().into_iter().filter(|(_, v)| v.dim() == 4)
                {
                    crate::ffi::param_to_channels_last(&mut var).unwrap();
                }
            }
            let (hidden, rest) = crate::workloads::split_hidden_weights(&net);
            let hidden_names = crate::workloads::variable_names(&net, &hidden);
            let expected: Vec<String> = (1..=3)
                .flat_map(|stage| [1, 2].map(|conv| format!("layer{stage}.0.conv{conv}.weight")))
                .collect();
            assert_eq!(hidden_names, expected);
            assert!(hidden.iter().all(|t| t.dim() == 4));
            let rest_names = crate::workloads::variable_names(&net, &rest);
            for name in ["conv1.weight", "bn1.weight", "bn1.bias", "linear.weight", "linear.bias"] {
                assert!(rest_names.iter().any(|n| n == name), "{name} in {rest_names:?}");
            }
            assert!(rest.iter().all(|t| t.dim() == 1 || t.size()[1] == 3 || t.size() == [10, 64]));
            assert_eq!(hidden.len() + rest.len(), net.var_store().trainable_variables().len());
        }
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

    fn build_without_batch_norm(workload: WorkloadId) -> CifarResnet {
        let options = ResnetOptions::for_workload(workload, false).unwrap().with_batch_norm(false);
        seeded(0, || CifarResnet::new(options, Device::Cpu))
    }

    #[test]
    fn without_batch_norm_every_convolution_is_plain_biased_and_default_initialised() {
        let net = build_without_batch_norm(WorkloadId::Resnet20);
        let vars = net.var_store().variables();
        assert!(vars.keys().all(|k| !k.contains("bn") && !k.contains("running")), "{:?}", vars.keys());
        let conv_biases = vars.keys().filter(|k| k.contains("conv") && k.ends_with(".bias")).count();
        assert_eq!(conv_biases, 19, "every convolution has a bias, even with conv_bias off");
        assert_eq!(vars.len(), 2 * 19 + 2, "conv and linear weights and biases only");
        // nn.Conv2d's default, kaiming_uniform_(a=√5): U(±1/√fan_in), std 1/√(3·fan_in).
        let bound = 1.0 / 144f64.sqrt();
        for name in ["layer1.0.conv1.weight", "layer1.0.conv1.bias"] {
            assert!(vars[name].abs().max().double_value(&[]) <= bound, "{name}");
        }
        let std = vars["layer1.1.conv2.weight"].std(true).double_value(&[]);
        assert!((std - bound / 3f64.sqrt()).abs() < 0.003, "std {std}");
    }

    #[test]
    fn without_batch_norm_parameter_counts_trade_two_bn_parameters_for_one_bias_per_channel() {
        // Output channels of all convolutions: 16 + n·2·(16 + 32 + 64); each loses a BatchNorm
        // weight and bias and gains a conv bias.
        for (workload, with_bn) in [
            (WorkloadId::Resnet8, 75_290),
            (WorkloadId::Resnet20, 269_722),
            (WorkloadId::Resnet56, 853_018),
            (WorkloadId::Resnet110, 1_727_962),
        ] {
            let channels = 16 + workload.resnet_blocks_per_stage().unwrap() * 2 * 112;
            let count = build_without_batch_norm(workload).trainable_parameters();
            assert_eq!(count, with_bn - channels, "{workload}");
        }
        assert_eq!(build_without_batch_norm(WorkloadId::Resnet8).trainable_parameters(), 75_050);
        assert_eq!(build_without_batch_norm(WorkloadId::Resnet20).trainable_parameters(), 269_034);
        assert_eq!(build_without_batch_norm(WorkloadId::Resnet56).trainable_parameters(), 850_986);
    }

    #[test]
    fn without_batch_norm_output_has_one_logit_per_class() {
        let net = build_without_batch_norm(WorkloadId::Resnet8);
        let xs = Tensor::randn([4, 3, 32, 32], (tch::Kind::Float, Device::Cpu));
        assert_eq!(net.forward(&xs, true).size(), [4, 10]);
        assert!(net.forward(&xs, true).equal(&net.forward(&xs, false)), "no train/eval difference");
    }

    #[test]
    fn segments_are_the_stem_and_one_per_block() {
        let segments: Vec<_> =
            WorkloadId::ALL.iter().filter(|w| w.is_cnn()).map(|&w| build(w, false).segments()).collect();
        assert_eq!(segments, [4, 10, 28, 55]);
    }

    #[test]
    fn running_the_segments_in_order_is_the_forward_pass() {
        let xs = Tensor::randn([4, 3, 32, 32], (tch::Kind::Float, Device::Cpu));
        for net in [build(WorkloadId::Resnet8, true), build(WorkloadId::Resnet56, false)] {
            for train in [true, false] {
                let segmented =
                    (0..net.segments()).fold(xs.shallow_clone(), |ys, k| net.forward_segment(k, &ys, train));
                assert!(
                    segmented.equal(&net.forward(&xs, train)),
                    "{} segments, train {train}",
                    net.segments()
                );
            }
        }
    }

    #[test]
    fn label_smoothing_trains_on_pytorch_s_smoothed_cross_entropy_and_evaluation_stays_plain() {
        let net = build(WorkloadId::Resnet8, false);
        let logits = ((Tensor::arange(30, (tch::Kind::Float, Device::Cpu)) * 7).remainder(11) - 5)
            .reshape([3, 10])
            / 3;
        let targets = Tensor::from_slice(&[2i64, 7, 0]);
        // Golden numbers from PyTorch 2.11 (.venv/bin/python):
        //   import torch, torch.nn.functional as F
        //   logits = ((torch.arange(30, dtype=torch.float32) * 7) % 11 - 5).reshape(3, 10) / 3
        //   targets = torch.tensor([2, 7, 0])
        //   F.cross_entropy(logits, targets, label_smoothing=0.2).item()  # 2.3803656101226807
        //   F.cross_entropy(logits, targets).item()                       # 2.2736988067626953
        let smoothed = net.training_loss(&logits, &targets, 0.2).double_value(&[]);
        assert!((smoothed - 2.380_365_610_122_680_7).abs() < 1e-6, "{smoothed}");
        let plain = net.loss(&logits, &targets).double_value(&[]);
        assert!((plain - 2.273_698_806_762_695_3).abs() < 1e-6, "{plain}");
        assert_eq!(net.training_loss(&logits, &targets, 0.0).double_value(&[]), plain);
    }

    /// The running mean of the stem's BatchNorm after one training-mode forward pass from fresh
    /// statistics at `bn_momentum`, and the batch's per-channel mean of the stem convolution.
    fn stem_running_mean_after_one_pass(bn_momentum: f64) -> (Tensor, Tensor) {
        let options =
            ResnetOptions::for_workload(WorkloadId::Resnet8, false).unwrap().with_bn_momentum(bn_momentum);
        let net = seeded(0, || CifarResnet::new(options, Device::Cpu));
        let xs = seeded(1, || Tensor::randn([8, 3, 32, 32], (tch::Kind::Float, Device::Cpu)) + 0.5);
        let vars = net.var_store().variables();
        assert_eq!(vars["bn1.running_mean"].abs().max().double_value(&[]), 0.0, "fresh statistics");
        let batch_mean = tch::no_grad(|| {
            let ys = xs.conv2d(&vars["conv1.weight"], None::<Tensor>, [1, 1], [1, 1], [1, 1], 1);
            ys.mean_dim([0i64, 2, 3].as_slice(), false, tch::Kind::Float)
        });
        let _ = net.forward(&xs, true);
        (vars["bn1.running_mean"].shallow_clone(), batch_mean)
    }

    #[test]
    fn bn_momentum_weighs_the_batch_statistic_as_pytorch_s_momentum() {
        // airbench's momentum: running = 0.6·0 + 0.4·batch mean; PyTorch's default 0.1·batch mean.
        let (airbench, batch_mean) = stem_running_mean_after_one_pass(0.4);
        assert!(airbench.allclose(&(&batch_mean * 0.4), 1e-5, 1e-6, false), "{airbench:?} vs {batch_mean:?}");
        // Each pass against its own batch's mean: no other test's draws can come between them.
        let (default, default_mean) = stem_running_mean_after_one_pass(BN_MOMENTUM);
        assert!(default.allclose(&(&default_mean * 0.1), 1e-5, 1e-6, false), "{default:?}");
        assert!(batch_mean.abs().max().double_value(&[]) > 1e-3, "a mean that tells them apart");
    }

    #[test]
    fn forward_flops_count_the_convolutions() {
        // ResNet-20 is commonly quoted at about 41 MMACs per image.
        let flops = build(WorkloadId::Resnet20, false).forward_flops_per_sample();
        assert!((80e6..84e6).contains(&flops), "{flops}");
    }
}
