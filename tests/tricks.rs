//! Each trick does what the guide means, checked on CPU: the "on" path really differs from "off"
//! in the intended way and, where it should, computes the same thing.

use tch::{Device, Kind, Tensor};

use trickbench::bench::cell::RECIPE_SGD;
use trickbench::data::loader::Batch;
use trickbench::device::DeviceSpec;
use trickbench::ffi;
use trickbench::train::{apply_process_tricks, StepLaunch, Trainer, LOG_INTERVAL_STEPS};
use trickbench::tricks::{Applicability, Trick, TrickSet};
use trickbench::workloads::resnet::{
    CifarResnet, ResnetOptions, RESIDUAL_EPILOGUE_FUNCTION, RESIDUAL_EPILOGUE_TORCHSCRIPT,
};
use trickbench::workloads::{Workload, WorkloadId};

fn resnet8(conv_bias: bool) -> CifarResnet {
    tch::manual_seed(7);
    CifarResnet::new(ResnetOptions::for_workload(WorkloadId::Resnet8, conv_bias), Device::Cpu)
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
    tch::manual_seed(1);
    Batch {
        inputs: Tensor::randn([n, 3, 32, 32], (Kind::Float, Device::Cpu)),
        targets: Tensor::randint(10, [n], (Kind::Int64, Device::Cpu)),
    }
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
fn tf32_is_set_explicitly_off_for_the_baseline_and_on_for_the_trick() {
    // PyTorch 2.11 starts with TF32 allowed in cuDNN and forbidden in cuBLAS; the baseline must
    // forbid both, the trick allow both. (The flags are global; only this test touches them.)
    let default = ffi::tf32();
    assert_eq!((default.matmul, default.cudnn), (false, true), "PyTorch 2.11's defaults");
    apply_process_tricks(&TrickSet::only(Trick::Tf32), DeviceSpec::Cpu).unwrap();
    assert_eq!(ffi::tf32(), ffi::Tf32 { matmul: true, cudnn: true });
    apply_process_tricks(&TrickSet::baseline(), DeviceSpec::Cpu).unwrap();
    assert_eq!(ffi::tf32(), ffi::Tf32 { matmul: false, cudnn: false });
}

#[test]
fn jit_fused_epilogue_equals_eager_in_values_and_gradients() {
    let f = ffi::JitFunction::compile(RESIDUAL_EPILOGUE_TORCHSCRIPT, RESIDUAL_EPILOGUE_FUNCTION).unwrap();
    let leaf = |seed| {
        tch::manual_seed(seed);
        Tensor::randn([4, 16, 8, 8], (Kind::Float, Device::Cpu)).set_requires_grad(true)
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
    let reason = match Trick::CudaGraphs.applicability(WorkloadId::Resnet8, DeviceSpec::Cpu) {
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
