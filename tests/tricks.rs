//! Each trick does what the guide means, checked on CPU: the "on" path really differs from "off"
//! in the intended way and, where it should, computes the same thing.

#[allow(dead_code)]
mod common;

use tch::{Device, Kind, Tensor};

use trickbench::bench::profile::ProfileName;
use trickbench::data::loader::Batch;
use trickbench::device::DeviceSpec;
use trickbench::ffi;
use trickbench::hardware::Hardware;
use trickbench::measure::phases::{self, PhaseRecording};
use trickbench::results::phases::{PhaseClock, StepPhase};
use trickbench::train::average::EmaConfig;
use trickbench::train::checkpoint::checkpointed_forward_backward;
use trickbench::train::recipe::{Recipe, AIRBENCH_BN_MOMENTUM, EMA, RECIPE_SGD};
use trickbench::train::{
    apply_process_tricks, LossScale, StepLaunch, TrainOptions, Trainer, LOG_INTERVAL_STEPS,
};
use trickbench::tricks::{Applicability, Trick, TrickSet};
use trickbench::workloads::resnet::{
    CifarResnet, ResnetOptions, RESIDUAL_EPILOGUE_FUNCTION, RESIDUAL_EPILOGUE_TORCHSCRIPT,
};
use trickbench::workloads::{build, Family, Workload, WorkloadId};

use common::cells::{train_key, KeyWith};

/// Runs `make` right after seeding libtorch's global generator, with no other test's draws in
/// between (tests run in parallel threads and share that generator).
fn seeded<T>(seed: i64, make: impl FnOnce() -> T) -> T {
    static GENERATOR: std::sync::Mutex<()> = std::sync::Mutex::new(());
    let _only_us = GENERATOR.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
    tch::manual_seed(seed);
    make()
}

fn resnet8(conv_bias: bool) -> CifarResnet {
    seeded(7, || {
        CifarResnet::new(ResnetOptions::for_workload(WorkloadId::Resnet8, conv_bias).unwrap(), Device::Cpu)
    })
}

fn trainer(tricks: &[Trick]) -> Trainer<CifarResnet> {
    let set: TrickSet = tricks.iter().copied().collect();
    let mut model = resnet8(!set.has(Trick::NoBiasBeforeBn));
    if set.has(Trick::JitFusion) {
        model.use_jit_epilogue().unwrap();
    }
    Trainer::new(model, &set, DeviceSpec::Cpu, RECIPE_SGD).unwrap()
}

fn batch(n: i64) -> Batch {
    seeded(1, || Batch {
        inputs: Tensor::randn([n, 3, 32, 32], (Kind::Float, Device::Cpu)),
        targets: Tensor::randint(10, [n], (Kind::Int64, Device::Cpu)),
    })
}

/// A trainer after `steps` training steps on the same batch at learning rate 0.05.
fn trained(tricks: &[Trick], steps: usize) -> Trainer<CifarResnet> {
    let mut t = trainer(tricks);
    let b = batch(8);
    for _ in 0..steps {
        t.train_step(&b, 0.05).unwrap();
    }
    t
}

/// The trainer's evaluation outputs on the training batch.
fn outputs(t: &Trainer<CifarResnet>) -> Tensor {
    t.eval_outputs(&batch(8).inputs, true).unwrap()
}

#[test]
fn no_bias_before_bn_removes_every_conv_bias() {
    let with_bias = resnet8(true);
    let without = resnet8(false);
    let conv_biases = |net: &CifarResnet| {
        net.var_store().variables().keys().filter(|k| k.contains("conv") && k.ends_with(".bias")).count()
    };
    assert_eq!(conv_biases(&with_bias), 7, "ResNet-8 has 7 convolutions, each followed by BatchNorm");
    assert_eq!(conv_biases(&without), 0);
}

#[test]
fn channels_last_changes_the_layout_not_the_result() {
    let plain = trainer(&[]);
    let nhwc = trainer(&[Trick::ChannelsLast]);
    let vars = nhwc.workload().var_store().variables();
    assert!(ffi::is_channels_last(&vars["layer1.0.conv1.weight"]), "conv weights must be NHWC");
    assert!(!ffi::is_channels_last(&plain.workload().var_store().variables()["layer1.0.conv1.weight"]));
    let inputs = batch(4).inputs;
    let nhwc_inputs = ffi::to_channels_last(&inputs).unwrap();
    assert!(ffi::is_channels_last(&nhwc_inputs));
    let a = plain.eval_outputs(&inputs, true).unwrap();
    let b = nhwc.eval_outputs(&nhwc_inputs, true).unwrap();
    assert!(a.allclose(&b, 1e-4, 1e-4, false), "same weights, same outputs whatever the layout");
}

#[test]
fn no_grad_eval_records_no_graph() {
    let t = trainer(&[]);
    let inputs = batch(2).inputs;
    assert!(t.eval_outputs(&inputs, false).unwrap().requires_grad(), "without no-grad a graph is recorded");
    assert!(!t.eval_outputs(&inputs, true).unwrap().requires_grad(), "under no-grad nothing is recorded");
}

#[test]
fn avoid_sync_reads_metrics_once_per_interval_instead_of_every_step() {
    let steps = 3;
    let reads = |tricks: &[Trick]| {
        let mut t = trainer(tricks);
        let b = batch(8);
        for _ in 0..steps {
            t.train_step(&b, 0.01).unwrap();
        }
        t.metrics_mut().host_reads()
    };
    assert_eq!(reads(&[]), 2 * steps as u64, "loss and accuracy .item() every step");
    assert!(steps < LOG_INTERVAL_STEPS);
    assert_eq!(reads(&[Trick::AvoidSync]), 0, "nothing read before the log interval");
}

#[test]
fn zero_grad_none_and_zero_fill_train_identically() {
    let (plain, none) = (trained(&[], 3), trained(&[Trick::ZeroGradNone], 3));
    assert!(outputs(&plain).allclose(&outputs(&none), 1e-6, 1e-6, false));
}

#[test]
fn bf16_autocast_path_trains_on_cpu() {
    // amp-bf16 is reported not applicable on CPU (no speed-up to measure there), but its code path
    // runs: CPU autocast computes convolutions in bf16 and training still reduces the loss.
    let mut t = trainer(&[Trick::AmpBf16]);
    let b = batch(16);
    let loss = |t: &Trainer<CifarResnet>| {
        let out = t.eval_outputs(&b.inputs, true).unwrap();
        (out.kind(), t.workload().loss(&out.to_kind(Kind::Float), &b.targets).double_value(&[]))
    };
    let (kind, before) = loss(&t);
    assert_eq!(kind, Kind::BFloat16);
    for _ in 0..10 {
        t.train_step(&b, 0.05).unwrap();
    }
    let (_, after) = loss(&t);
    assert!(after < before, "loss {before} → {after}");
}

#[test]
fn fused_optimizer_trains_like_the_per_parameter_loop() {
    // Same weights, same batches: after several steps the fused multi-tensor kernel and the
    // per-parameter loop leave the same network (within float rounding).
    let run = |tricks: &[Trick]| {
        let t = trained(tricks, 4);
        let vars = t.workload().var_store().variables();
        (outputs(&t), vars["layer3.0.conv2.weight"].copy())
    };
    let (plain_out, plain_w) = run(&[]);
    let (fused_out, fused_w) = run(&[Trick::FusedOptimizer]);
    let initial = resnet8(true).var_store().variables()["layer3.0.conv2.weight"].copy();
    assert!(!fused_w.allclose(&initial, 1e-3, 1e-3, false), "the fused optimizer must move the weights");
    assert!(fused_w.allclose(&plain_w, 1e-5, 1e-5, false), "same update as the per-parameter loop");
    assert!(fused_out.allclose(&plain_out, 1e-4, 1e-4, false));
}

#[test]
fn the_baseline_keeps_pytorch_s_tf32_defaults_tf32_adds_matmuls_and_strict_fp32_forbids_both() {
    // PyTorch 2.11 starts with TF32 allowed in cuDNN and forbidden in cuBLAS, as in Python
    // (torch.backends.cudnn.allow_tf32 is True, torch.get_float32_matmul_precision() is
    // "highest"). The flags are global; only this test touches them.
    let default = ffi::tf32();
    assert_eq!((default.matmul, default.cudnn), (false, true), "PyTorch 2.11's defaults");
    let key = |tricks: &[Trick]| train_key(WorkloadId::Resnet8, tricks).with_batch(8);
    apply_process_tricks(&key(&[Trick::Tf32]), DeviceSpec::Cpu).unwrap();
    assert_eq!(ffi::tf32(), ffi::Tf32 { matmul: true, cudnn: true });
    apply_process_tricks(&key(&[]).with_reference_for(Trick::Tf32), DeviceSpec::Cpu).unwrap();
    assert_eq!(ffi::tf32(), ffi::Tf32 { matmul: false, cudnn: false }, "strict-fp32");
    apply_process_tricks(&key(&[]), DeviceSpec::Cpu).unwrap();
    assert_eq!(ffi::tf32(), default, "the baseline is PyTorch's default");
}

#[test]
fn jit_fused_epilogue_equals_eager_in_values_and_gradients() {
    let f = ffi::JitFunction::compile(RESIDUAL_EPILOGUE_TORCHSCRIPT, RESIDUAL_EPILOGUE_FUNCTION).unwrap();
    let leaf = |seed| {
        seeded(seed, || Tensor::randn([4, 16, 8, 8], (Kind::Float, Device::Cpu)).set_requires_grad(true))
    };
    let (x, shortcut) = (leaf(3), leaf(4));
    let upstream = Tensor::randn([4, 16, 8, 8], (Kind::Float, Device::Cpu));
    // The profiling executor specialises the graph after a few runs: compare every run.
    for _ in 0..3 {
        let fused = f.call(&[&x, &shortcut]).unwrap();
        let eager = (&x + &shortcut).relu();
        assert!(fused.allclose(&eager, 1e-6, 1e-6, false), "values");
        let grads = |y: &Tensor| Tensor::run_backward(&[y * &upstream], &[&x, &shortcut], false, false);
        for (a, b) in grads(&fused).iter().zip(grads(&eager)) {
            assert!(a.allclose(&b, 1e-6, 1e-6, false), "gradients");
        }
    }
    assert!(ffi::JitFunction::compile("def f(x):\n    return x +", "f")
        .unwrap_err()
        .to_string()
        .contains("TorchScript"));
}

#[test]
fn jit_fusion_trains_like_the_eager_network() {
    let (eager, jit) = (trained(&[], 3), trained(&[Trick::JitFusion], 3));
    assert!(outputs(&eager).allclose(&outputs(&jit), 1e-5, 1e-5, false));
}

#[test]
fn debug_apis_on_really_checks_every_backward() {
    // The debug-apis-on reference cell turns on anomaly detection, which makes autograd check every
    // backward function for NaN: a NaN gradient becomes an error instead of passing silently.
    let x = Tensor::from_slice(&[-1.0f32]).set_requires_grad(true);
    let nan_grad = || x.sqrt().sum(Kind::Float).f_backward();
    assert!(nan_grad().is_ok(), "without anomaly detection a NaN gradient passes silently");
    ffi::set_anomaly_mode(true);
    let checked = nan_grad();
    ffi::set_anomaly_mode(false);
    assert!(!ffi::anomaly_mode_enabled());
    let message = checked.unwrap_err().to_string();
    assert!(message.contains("nan"), "{message}");
}

/// A trainer with `tricks` whose steps are launched as `launch`, after `steps` steps on one batch.
fn trained_with_launch(tricks: &[Trick], launch: StepLaunch, steps: usize) -> Trainer<CifarResnet> {
    let set: TrickSet = tricks.iter().copied().collect();
    let mut t = Trainer::with_launch(resnet8(true), &set, DeviceSpec::Cpu, RECIPE_SGD, launch).unwrap();
    let b = batch(8);
    for step in 0..steps {
        t.train_step(&b, 0.05 + 0.01 * step as f64).unwrap();
    }
    t
}

#[test]
fn cuda_graph_step_computes_what_the_eager_step_computes() {
    // What cuda-graphs captures is the device-side step: learning rate in a device tensor and no
    // host reads. Launched op by op on the CPU it must train exactly as the eager step does, with
    // a changing learning rate, for both optimizer kernels, either way of clearing gradients, and
    // fp16 loss scaling (whose overflow skip then happens on the device).
    for tricks in
        [&[][..], &[Trick::FusedOptimizer], &[Trick::ZeroGradNone, Trick::FusedOptimizer], &[Trick::Amp]]
    {
        let eager = trained_with_launch(tricks, StepLaunch::Eager, 4);
        let device_side = trained_with_launch(tricks, StepLaunch::DeviceSide, 4);
        let (a, b) = (outputs(&eager).to_kind(Kind::Float), outputs(&device_side).to_kind(Kind::Float));
        assert!(a.allclose(&b, 1e-5, 1e-5, false), "{tricks:?}: device-side step diverged from eager");
        let untrained = outputs(&trainer(&[]));
        assert!(!a.allclose(&untrained, 1e-3, 1e-3, false), "{tricks:?}: the steps must train");
    }
}

#[test]
fn cuda_graphs_is_not_applicable_on_cpu_and_refuses_to_launch_there() {
    let reason = match Trick::CudaGraphs.applicability(WorkloadId::Resnet8, &Hardware::probe(DeviceSpec::Cpu))
    {
        Applicability::NotApplicable(reason) => reason,
        Applicability::Applies => panic!("cuda-graphs cannot apply on a CPU"),
    };
    assert!(reason.contains("needs a CUDA GPU"), "{reason}");
    let set = TrickSet::only(Trick::CudaGraphs);
    let err = Trainer::new(resnet8(true), &set, DeviceSpec::Cpu, RECIPE_SGD).unwrap_err().to_string();
    assert!(err.contains("cuda-graphs") && err.contains("CUDA device"), "{err}");
    // Without a GPU even a CUDA-graph-capable binary cannot make a graph: a clean error, no crash.
    if !tch::Cuda::is_available() {
        let err = ffi::CudaGraph::new(0).unwrap_err().to_string();
        assert!(err.contains("CUDA graph"), "{err}");
    }
}

#[test]
fn batch_norm_off_network_has_no_batchnorm_and_trains() {
    let options = ResnetOptions::for_workload(WorkloadId::Resnet8, true).unwrap().with_batch_norm(false);
    let net = seeded(7, || CifarResnet::new(options, Device::Cpu));
    let names: Vec<String> = net.var_store().variables().into_keys().collect();
    assert!(names.iter().all(|n| !n.contains("bn") && !n.contains("running_")), "{names:?}");
    let mut t = Trainer::new(net, &TrickSet::baseline(), DeviceSpec::Cpu, RECIPE_SGD).unwrap();
    let b = batch(16);
    let loss = |t: &Trainer<CifarResnet>| {
        let out = t.eval_outputs(&b.inputs, true).unwrap();
        t.workload().loss(&out, &b.targets).double_value(&[])
    };
    let before = loss(&t);
    for _ in 0..10 {
        t.train_step(&b, 0.05).unwrap();
    }
    let after = loss(&t);
    assert!(after < 0.95 * before, "loss {before} → {after}");
}

/// The model's parameter gradients, by name.
fn gradients(net: &CifarResnet) -> Vec<(String, Tensor)> {
    let mut grads: Vec<_> = net
        .var_store()
        .variables()
        .into_iter()
        .filter(|(_, v)| v.requires_grad())
        .map(|(name, v)| (name, v.grad().copy()))
        .collect();
    grads.sort_by(|a, b| a.0.cmp(&b.0));
    grads
}

/// The plain step's forward, loss and backward (of `loss · scale` when given): loss and correct.
fn plain_forward_backward(net: &CifarResnet, b: &Batch, scale: Option<&Tensor>) -> (Tensor, Tensor) {
    let outputs = net.forward(&b.inputs, true);
    let loss = net.loss(&outputs.to_kind(Kind::Float), &b.targets);
    match scale {
        Some(scale) => (&loss * scale).backward(),
        None => loss.backward(),
    }
    (loss.detach(), net.correct(&outputs, &b.targets))
}

/// Asserts two sets of gradients are equal within `tolerance` (relative and absolute), and not
/// all zero.
fn assert_same_gradients(a: &[(String, Tensor)], b: &[(String, Tensor)], tolerance: f64, what: &str) {
    assert_eq!(a.len(), b.len());
    for ((name, ga), (_, gb)) in a.iter().zip(b) {
        assert!(ga.defined() && gb.defined(), "{what}: {name} has no gradient");
        assert!(ga.abs().max().double_value(&[]) > 0.0, "{what}: {name} has a zero gradient");
        let gap = (ga - gb).abs().max().double_value(&[]);
        assert!(ga.allclose(gb, tolerance, tolerance, false), "{what}: {name} differs by {gap}");
    }
}

#[test]
fn checkpointing_gives_the_plain_backward_gradients_loss_and_accuracy() {
    // ResNet-8 has 4 segments (three recomputed), ResNet-20 10.
    for workload in [WorkloadId::Resnet8, WorkloadId::Resnet20] {
        let net = || {
            seeded(7, || CifarResnet::new(ResnetOptions::for_workload(workload, true).unwrap(), Device::Cpu))
        };
        let (plain, checkpointed) = (net(), net());
        let b = batch(6);
        let (loss, correct) = plain_forward_backward(&plain, &b, None);
        let (ck_loss, ck_correct) =
            checkpointed_forward_backward(&checkpointed, &b.inputs, &b.targets, 0.0, &LossScale::NONE)
                .unwrap();
        assert!(!ck_loss.requires_grad() && ck_loss.kind() == Kind::Float && ck_loss.dim() == 0);
        assert!(ck_loss.allclose(&loss, 1e-6, 1e-6, false), "{workload}: loss");
        assert!(ck_correct.equal(&correct), "{workload}: correct");
        assert_same_gradients(&gradients(&plain), &gradients(&checkpointed), 1e-5, workload.id());
    }
}

#[test]
fn checkpointing_accumulates_loss_scaled_gradients_like_a_plain_backward() {
    let (plain, checkpointed) = (resnet8(true), resnet8(true));
    let b = batch(6);
    let scale = Tensor::from(1024.0f32);
    let scaled = LossScale { scaler: Some(scale.shallow_clone()), factor: 1.0 };
    // Two passes without clearing: the second adds to the gradients of the first.
    for _ in 0..2 {
        let _ = plain_forward_backward(&plain, &b, Some(&scale));
        let _ = checkpointed_forward_backward(&checkpointed, &b.inputs, &b.targets, 0.0, &scaled).unwrap();
    }
    let (grads, ck_grads) = (gradients(&plain), gradients(&checkpointed));
    assert_same_gradients(&grads, &ck_grads, 1e-5, "scaled");
    let unscaled = resnet8(true);
    let _ = plain_forward_backward(&unscaled, &b, None);
    let (name, once) = &gradients(&unscaled)[0];
    let expected = once * 2048.0;
    assert!(grads[0].1.allclose(&expected, 1e-4, 1e-4, false), "{name}: twice the scaled gradient");
}

#[test]
fn checkpointing_recomputes_inside_an_autocast_region() {
    // CPU autocast runs convolutions in bf16: the saved segment inputs are bf16, and recomputing
    // them under the same region gives the plain mixed-precision backward's gradients.
    let (plain, checkpointed) = (resnet8(true), resnet8(true));
    let b = batch(6);
    let (loss, ck_loss) = {
        let _autocast = ffi::AutocastGuard::enter(false, Kind::BFloat16).unwrap();
        let (loss, _) = plain_forward_backward(&plain, &b, None);
        let (ck_loss, _) =
            checkpointed_forward_backward(&checkpointed, &b.inputs, &b.targets, 0.0, &LossScale::NONE)
                .unwrap();
        (loss, ck_loss)
    };
    assert!(ck_loss.allclose(&loss, 1e-6, 1e-6, false), "loss");
    assert_same_gradients(&gradients(&plain), &gradients(&checkpointed), 1e-5, "bf16 autocast");
}

#[test]
fn checkpointing_updates_running_statistics_twice_in_recomputed_segments() {
    // BatchNorm running means start at 0 and move by momentum 0.1 towards the batch mean μ: one
    // update gives 0.1·μ, two give 0.19·μ. ResNet-8's first segment (stem, layer1, layer2) runs
    // twice, its last (layer3 and the classifier) once.
    let (plain, checkpointed) = (resnet8(true), resnet8(true));
    let b = batch(6);
    let _ = plain_forward_backward(&plain, &b, None);
    let _ =
        checkpointed_forward_backward(&checkpointed, &b.inputs, &b.targets, 0.0, &LossScale::NONE).unwrap();
    let running_mean =
        |net: &CifarResnet, bn: &str| net.var_store().variables()[&format!("{bn}.running_mean")].copy();
    for (bn, updates) in [("bn1", 1.9), ("layer2.0.bn2", 1.9), ("layer3.0.bn1", 1.0)] {
        let expected = running_mean(&plain, bn) * updates;
        assert!(running_mean(&checkpointed, bn).allclose(&expected, 1e-5, 1e-6, false), "{bn}");
    }
}

/// The trainable parameters of a trainer, flattened into one vector.
fn flat_parameters(t: &Trainer<CifarResnet>) -> Tensor {
    let vars = t.workload().var_store().trainable_variables();
    Tensor::cat(&vars.iter().map(|v| v.detach().flatten(0, -1)).collect::<Vec<_>>(), 0)
}

/// One trainer step of a ResNet-8 (with or without BatchNorm) with `options` on a batch of 16.
fn one_step(batch_norm: bool, options: TrainOptions) -> Trainer<CifarResnet> {
    let net = ResnetOptions::for_workload(WorkloadId::Resnet8, true).unwrap().with_batch_norm(batch_norm);
    let mut t = Trainer::new(
        seeded(7, || CifarResnet::new(net, Device::Cpu)),
        &TrickSet::baseline(),
        DeviceSpec::Cpu,
        options,
    )
    .unwrap();
    t.train_step(&batch(16), 0.05).unwrap();
    t
}

#[test]
fn grad_accumulation_over_micro_batches_equals_one_large_batch() {
    // Without BatchNorm (whose batch statistics differ per micro-batch) the mean of four
    // micro-batch gradients is the whole batch's gradient, so one step lands on the same weights.
    let whole = one_step(false, RECIPE_SGD.into());
    let accumulated = one_step(false, TrainOptions { micro_batches: 4, ..RECIPE_SGD.into() });
    let (a, b) = (flat_parameters(&whole), flat_parameters(&accumulated));
    assert!(a.allclose(&b, 1e-5, 1e-6, false), "max diff {}", (a - b).abs().max().double_value(&[]));
    let before = flat_parameters(&one_step(false, TrainOptions { micro_batches: 1, ..RECIPE_SGD.into() }));
    assert!(before.allclose(&flat_parameters(&whole), 0.0, 0.0, false), "same seed, same step");
}

#[test]
fn checkpointed_trainer_steps_land_on_the_plain_weights() {
    let plain = one_step(true, RECIPE_SGD.into());
    let checkpointed = one_step(true, TrainOptions { checkpointing: true, ..RECIPE_SGD.into() });
    let (a, b) = (flat_parameters(&plain), flat_parameters(&checkpointed));
    assert!(a.allclose(&b, 1e-5, 1e-6, false), "max diff {}", (a - b).abs().max().double_value(&[]));
}

#[test]
fn clipping_in_the_trainer_limits_the_update_to_the_global_norm() {
    // With plain SGD (no momentum, no decay) one step moves the weights by lr × the clipped
    // gradient, whose global norm is at most the limit.
    let sgd = trickbench::optim::sgd::SgdConfig { momentum: 0.0, weight_decay: 0.0 };
    let start = flat_parameters(&{
        let net = ResnetOptions::for_workload(WorkloadId::Resnet8, true).unwrap();
        let net = seeded(7, || CifarResnet::new(net, Device::Cpu));
        Trainer::new(net, &TrickSet::baseline(), DeviceSpec::Cpu, sgd).unwrap()
    });
    let clipped = one_step(true, TrainOptions { clip_max_norm: Some(0.1), ..sgd.into() });
    let moved = (flat_parameters(&clipped) - &start).norm().double_value(&[]) / 0.05;
    assert!((moved - 0.1).abs() < 1e-3, "the update's gradient norm is {moved}, not the 0.1 limit");
}

/// The operators a host read (`.item()`) or a tensor made from host data (tch's `Tensor::from` and
/// `from_slice` allocate with `aten::zeros`, then copy the bytes in) shows up as among those a step
/// calls. In a CUDA graph capture the first is a sync that fails the capture and the second a
/// host-to-device copy baked into the graph.
const HOST_OPS: [&str; 5] =
    ["aten::item", "aten::_local_scalar_dense", "aten::zeros", "aten::scalar_tensor", "aten::lift_fresh"];

/// The host operators (see [`HOST_OPS`]) that one training step calls after two warm-up steps,
/// with `tricks`, `micro_batches` per step, launched as `launch`.
fn host_ops_of_a_step(tricks: &[Trick], micro_batches: usize, launch: StepLaunch) -> Vec<String> {
    let set: TrickSet = tricks.iter().copied().collect();
    let options = TrainOptions { micro_batches, clip_max_norm: Some(1.0), ..RECIPE_SGD.into() };
    let mut t = Trainer::with_launch(resnet8(true), &set, DeviceSpec::Cpu, options, launch).unwrap();
    let b = batch(8);
    for _ in 0..2 {
        t.train_step(&b, 0.05).unwrap();
    }
    let ((), ops) = ffi::record_ops(|| t.train_step(&b, 0.05).unwrap()).unwrap();
    ops.into_iter().filter(|op| HOST_OPS.contains(&op.as_str())).collect()
}

#[test]
fn the_captured_step_reads_nothing_from_the_host_and_makes_no_tensor_of_host_data() {
    let ((), made) = ffi::record_ops(|| drop(Tensor::from(0.25f64).to_device(Device::Cpu))).unwrap();
    assert!(made.iter().any(|op| HOST_OPS.contains(&op.as_str())), "the probe must see host data: {made:?}");
    // avoid-sync: the metrics' host reads come once per log interval, not in these steps.
    for tricks in [
        &[Trick::AvoidSync][..],
        &[Trick::AvoidSync, Trick::Amp],
        &[Trick::AvoidSync, Trick::FusedOptimizer, Trick::ZeroGradNone],
        &[Trick::AvoidSync, Trick::Amp, Trick::FusedOptimizer],
    ] {
        for micro_batches in [1, 4] {
            let host = host_ops_of_a_step(tricks, micro_batches, StepLaunch::DeviceSide);
            assert!(host.is_empty(), "{tricks:?} with {micro_batches} micro-batches: {host:?}");
        }
    }
}

#[test]
fn fp16_loss_scaling_reads_the_overflow_on_the_host_only_without_a_fused_optimizer() {
    let per_parameter = host_ops_of_a_step(&[Trick::AvoidSync, Trick::Amp], 1, StepLaunch::Eager);
    assert!(per_parameter.contains(&"aten::item".to_owned()), "GradScaler.step's check: {per_parameter:?}");
    let fused =
        host_ops_of_a_step(&[Trick::AvoidSync, Trick::Amp, Trick::FusedOptimizer], 1, StepLaunch::Eager);
    assert!(fused.is_empty(), "the fused kernel takes found_inf on the device: {fused:?}");
    for micro_batches in [1, 4] {
        let fused = host_ops_of_a_step(
            &[Trick::AvoidSync, Trick::Amp, Trick::FusedOptimizer],
            micro_batches,
            StepLaunch::Eager,
        );
        assert!(fused.is_empty(), "{micro_batches} micro-batches: {fused:?}");
    }
}

/// The phases one recorded step of `trainer` entered, in step order (the batch is already on the
/// device, so the copy to it is not among them).
fn recorded_phases(mut trainer: Trainer<CifarResnet>) -> Vec<StepPhase> {
    let b = batch(8);
    let recording = PhaseRecording::start(DeviceSpec::Cpu).unwrap();
    phases::enter(StepPhase::BatchWait);
    trainer.train_step(&b, 0.05).unwrap();
    let breakdown = recording.finish(1, b.len()).unwrap();
    assert_eq!(breakdown.clock, PhaseClock::Host);
    assert!(breakdown.phases.iter().all(|p| p.mean_ms.is_finite() && p.mean_ms >= 0.0), "{breakdown:?}");
    breakdown.phases.iter().map(|p| p.phase).collect()
}

#[test]
fn a_recorded_step_is_split_into_batch_forward_backward_optimizer_and_metrics() {
    use StepPhase::{Backward, BatchWait, Forward, Metrics, Optimizer};
    let eager = [BatchWait, Forward, Backward, Optimizer, Metrics];
    assert_eq!(recorded_phases(trainer(&[])), eager);
    assert_eq!(recorded_phases(trainer(&[Trick::AvoidSync, Trick::ChannelsLast])), eager);
    let with = |options: TrainOptions| {
        Trainer::new(resnet8(true), &TrickSet::baseline(), DeviceSpec::Cpu, options).unwrap()
    };
    let checkpointed = with(TrainOptions { checkpointing: true, ..RECIPE_SGD.into() });
    assert_eq!(recorded_phases(checkpointed), eager, "recomputation counts as backward");
    let accumulated = with(TrainOptions { micro_batches: 2, ..RECIPE_SGD.into() });
    assert_eq!(recorded_phases(accumulated), eager, "every micro-batch's passes in their phases");
}

/// A ResNet-8 trainer (seeded as [`resnet8`]) with `options` and no step tricks.
fn with_options(options: TrainOptions) -> Trainer<CifarResnet> {
    Trainer::new(resnet8(true), &TrickSet::baseline(), DeviceSpec::Cpu, options).unwrap()
}

/// A held-out set of one batch of 16 (the same images every call).
fn held_out() -> impl Iterator<Item = Result<Batch, trickbench::error::Error>> {
    std::iter::once(Ok(batch(16)))
}

/// Every variable of a trainer (BatchNorm running statistics included), flattened in name order.
fn flat_variables(t: &Trainer<CifarResnet>) -> Tensor {
    let mut named: Vec<_> = t.workload().var_store().variables().into_iter().collect();
    named.sort_by(|a, b| a.0.cmp(&b.0));
    Tensor::cat(&named.iter().map(|(_, v)| v.detach().flatten(0, -1)).collect::<Vec<_>>(), 0)
}

#[test]
fn label_smoothing_changes_the_training_loss_but_not_the_evaluated_one() {
    let mut smoothed = with_options(TrainOptions { label_smoothing: 0.2, ..RECIPE_SGD.into() });
    let mut plain = with_options(RECIPE_SGD.into());
    let (s, p) = (smoothed.evaluate(held_out(), true).unwrap(), plain.evaluate(held_out(), true).unwrap());
    assert_eq!(s, p, "evaluation reports plain cross-entropy with or without the trick");
    // The first step's training loss, on the same untrained network's training-mode outputs.
    let b = batch(16);
    let outputs = tch::no_grad(|| resnet8(true).forward(&b.inputs, true));
    let expected = |smoothing| resnet8(true).training_loss(&outputs, &b.targets, smoothing).double_value(&[]);
    for (trainer, smoothing) in [(&mut smoothed, 0.2), (&mut plain, 0.0)] {
        trainer.train_step(&b, 0.05).unwrap();
        trainer.metrics_mut().flush();
        let loss = trainer.metrics_mut().last_mean_loss().unwrap();
        assert!((loss - expected(smoothing)).abs() < 1e-5, "smoothing {smoothing}: {loss}");
    }
    assert!((expected(0.2) - expected(0.0)).abs() > 1e-3, "the two losses differ");
    let refused = Trainer::new(
        resnet8(true),
        &TrickSet::baseline(),
        DeviceSpec::Cpu,
        TrainOptions { label_smoothing: 1.0, ..RECIPE_SGD.into() },
    );
    assert!(refused.unwrap_err().to_string().contains("label smoothing 1 is outside [0, 1)"));
}

#[test]
fn ema_weights_are_evaluated_in_place_of_the_raw_ones_and_training_continues_from_the_raw_ones() {
    let mut averaged = with_options(TrainOptions { weight_average: Some(EMA), ..RECIPE_SGD.into() });
    let mut raw = with_options(RECIPE_SGD.into());
    let b = batch(16);
    for _ in 0..10 {
        averaged.train_step(&b, 0.05).unwrap();
        raw.train_step(&b, 0.05).unwrap();
    }
    let average = averaged.weight_average().unwrap();
    assert_eq!(average.updates(), 2, "every 5 steps");
    assert!(flat_variables(&averaged).equal(&flat_variables(&raw)), "the average does not touch training");
    let with_average = averaged.evaluate(held_out(), true).unwrap();
    let by_hand = average.swapped_in(|| averaged.eval_outputs(&b.inputs, true)).unwrap();
    let loss_by_hand = averaged.workload().loss(&by_hand, &b.targets).double_value(&[]);
    assert!((with_average.mean_loss - loss_by_hand).abs() < 1e-6, "{with_average:?} vs {loss_by_hand}");
    let of_raw = raw.evaluate(held_out(), true).unwrap();
    assert!((with_average.mean_loss - of_raw.mean_loss).abs() > 1e-4, "{with_average:?} vs {of_raw:?}");
    // After the evaluation both train on from the same raw weights and statistics.
    assert!(flat_variables(&averaged).equal(&flat_variables(&raw)), "the swap put the raw weights back");
    averaged.train_step(&b, 0.05).unwrap();
    raw.train_step(&b, 0.05).unwrap();
    assert!(flat_variables(&averaged).equal(&flat_variables(&raw)));
    let constant = EmaConfig { every_steps: 1, decay_per_step: 0.9 };
    assert!(constant.decay_at(0) < constant.decay_at(100), "warmed up");
}

#[test]
fn flip_tta_evaluates_the_mean_of_each_image_and_its_mirror() {
    let tta = with_options(TrainOptions { flip_tta: true, ..RECIPE_SGD.into() });
    let plain = with_options(RECIPE_SGD.into());
    let x = batch(8).inputs;
    let logits = tta.eval_outputs(&x, true).unwrap();
    let once = plain.eval_outputs(&x, true).unwrap();
    let mean = (&once + plain.eval_outputs(&x.flip([3]), true).unwrap()) * 0.5;
    assert!(logits.allclose(&mean, 1e-6, 1e-6, false), "the mean of the two forward passes");
    assert!(!logits.allclose(&once, 1e-3, 1e-3, false), "random images are not mirror-symmetric");
    let symmetric = (&x + x.flip([3])) * 0.5;
    let (a, b) = (tta.eval_outputs(&symmetric, true).unwrap(), plain.eval_outputs(&symmetric, true).unwrap());
    assert!(a.allclose(&b, 1e-6, 1e-6, false), "a symmetric image is its own mirror");
    let refused = tta.eval_outputs(&Tensor::zeros([2, 5], (Kind::Float, Device::Cpu)), true).unwrap_err();
    assert!(refused.to_string().contains("flip-tta mirrors batches of images"), "{refused}");
}

#[test]
fn a_cell_s_recipe_carries_airbench_s_tricks_into_its_trainer_and_network() {
    let tta = ProfileName::Quick.settings(Family::CifarResnet).tta;
    let all = [Trick::LabelSmoothing, Trick::EmaWeights, Trick::FlipTta, Trick::BnMomentum];
    let key = train_key(WorkloadId::Resnet8, &all).with_batch(8);
    let recipe = Recipe::for_cell(&key, &tta, 100, false);
    let options = TrainOptions::from(&recipe);
    assert_eq!((options.label_smoothing, options.weight_average, options.flip_tta), (0.2, Some(EMA), true));
    assert_eq!(build::resnet_options(&key, &recipe).unwrap().bn_momentum, AIRBENCH_BN_MOMENTUM);
    let baseline = train_key(WorkloadId::Resnet8, &[]).with_batch(8);
    let plain = Recipe::for_cell(&baseline, &tta, 100, false);
    assert_eq!(build::resnet_options(&baseline, &plain).unwrap().bn_momentum, 0.1);
    // One step of the ResNet built for the cell: the stem's running mean moved by 0.4 of the batch
    // mean from 0, four times as far as at PyTorch's 0.1.
    let running_mean = |key: &trickbench::results::schema::CellKey, recipe: &Recipe| {
        let net = seeded(7, || build::resnet_for(key, recipe, Device::Cpu).unwrap());
        let mut t = Trainer::new(net, &key.tricks, DeviceSpec::Cpu, recipe).unwrap();
        t.train_step(&batch(8), 0.05).unwrap();
        t.workload().var_store().variables()["bn1.running_mean"].shallow_clone()
    };
    let (airbench, pytorch) = (running_mean(&key, &recipe), running_mean(&baseline, &plain));
    assert!(airbench.allclose(&(&pytorch * 4.0), 1e-4, 1e-6, false), "{airbench:?} vs {pytorch:?}");
}
