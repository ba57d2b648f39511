#!/usr/bin/env python3
"""Checks the PyTorch engine (pytorch_engine.py) on the CPU: `python scripts/engine/check_engine.py`.

It writes tiny cases into a temporary directory (a ResNet with one block per stage on 8×8
images, a one-layer GPT of width 16, each with the data its loader assembles batches from),
starts the engine on each as trickbench does and drives its protocol, checking:

- the ready line, and the fields and values of every reply (build, warm_up, window, memory,
  held, probe, breakdown, loss, inspect, profile, stood_in, quit; EOF ends the engine too);
- that each trick is applied: the layouts under channels-last, the optimizer under
  fused-optimizer, gradients left None under zero-grad-none, anomaly detection in debug-off's
  reference windows only, SDPA in the profile of flash-attention and sdpa-math (the math kernel
  for the latter), host reads under avoid-sync, no autograd graph under no-grad-eval, a
  compiled model and its compile_s under torch-compile, the DataLoader's workers, zero-copy
  and where crops are made under the loader tricks, the scripted functions under jit-fusion,
  checkpointed segments, micro-batches under grad-accumulation;
- a step-phase breakdown: every phase of a training step timed, in step order;
- memory: a probe's peak of live CPU tensor bytes holds at least the weights, gradients and
  momentum, is lower under checkpointing and grad-accumulation, and is the same when repeated;
- which tricks are not applicable on a CPU or for a model (tf32's strict-fp32 reference too),
  with their reasons, and which combinations the engine refuses; that a CPU stands in for
  nothing;
- the as-if-CUDA rehearsal: the ResNet and the GPT (with dropout, and without) as on an H100
  (sm90), a side for every trick the engine applies on CUDA (amp, amp-bf16, tf32 and its
  strict-fp32 reference, cudnn-benchmark, channels-last, cuda-graphs, pin-memory, the loader
  tricks, every forced SDPA backend, fp8-matmul, torch-compile where inductor builds here,
  checkpointing, grad-accumulation, fused-optimizer, debug-off's reference, ...): each builds,
  warms up, times a window, probes (reserved at least allocated), breaks down on the host's
  clock, answers inspect with the switches, autocast, captured step and pageable loader its
  tricks give, and went through exactly the stand-ins every side goes through and those its
  tricks need (a memory-efficient or cuDNN backend, and FlashAttention with dropout, computed
  by the math kernel, FlashAttention without dropout by its own); held empties the stand-in
  allocator's cache; memory answers as on a CPU. As on an A100 (sm80) fp8-matmul is not
  applicable, the memory budget's cap and the allocator's mode are stood in for and the mode
  reads back; on sm75 TF32, its reference and bfloat16 are not. A captured step's probe covers
  its capture's peaks;
- float64 agreement: tricks that leave the arithmetic alone (among them the loader tricks that
  assemble the same batches, jit-fusion, checkpointing, and grad-accumulation on the GPT) train
  the same losses as their reference to 1e-9 relative (1e-8 where parity's float32 softmax is
  rounded differently), and a side with perturbed weights shows that the check can tell a real
  difference. torch-compile is among them where inductor can build here; where it cannot, the
  check prints a note instead;
- the loader: host crops are the zero-padded windows they stand for, device crops are each one
  of them, a batch holds the scheduled images cropped as scheduled, text windows the scheduled
  tokens; PNG files decode to the pixels written (once under packed-dataset, which trains the
  same losses), and without Pillow they are refused;
- fp8-matmul's autograd function (on the CPU's torch._scaled_mm, though the trick applies only
  on GPUs with fp8 tensor cores): its products are those of the dequantised operands;
- the convergence tricks' pieces (engine_tta.py): LARS's and LAMB's steps against the formulas,
  the schedulers' rates step by step (MultiStepLR after LinearLR's warm-up, OneCycleLR with
  Adam's beta1 cycled, nanoGPT's cosine through LambdaLR), the weight average's warm-up decay,
  torch.optim.Muon over 2-D weights beside the recipe's optimizer and refused for a
  convolution's; the convergence tricks are not applicable in a case that times steps (that they
  train as libtorch does is tests/engine_tta.rs's check);
- the fork server (--serve): its children are processes of their own that train the same loss as
  a fresh engine on the same case, two at a time; a child whose client has gone ends; the server
  ends at EOF on its stdin;
- error paths: a missing case file, a wrong format, a missing weights file and as_if_cuda on a
  CUDA device make the engine exit with status 2 naming the file (and field); more malformed
  fields (as_if_cuda's and memory_budget_bytes among them) are checked through the engine's own
  read_case; requests that cannot be served get an error reply.

It takes about a minute and a half on a 2-core VM, most of it PyTorch's start in each engine
process and inductor's compiles (half a minute more where inductor's cache is cold). Exit status
0 when every check passes, 1 with the failed check's message otherwise.
"""

import dataclasses
import io
import json
import math
import os
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import numpy as np
import torch

HERE = Path(__file__).resolve().parent
ENGINE = HERE / "pytorch_engine.py"
sys.dont_write_bytecode = True  # no __pycache__ beside the scripts
sys.path.insert(0, str(HERE.parent / "parity"))
sys.path.insert(0, str(HERE))
import engine_device  # noqa: E402
import engine_loader  # noqa: E402
import engine_tricks  # noqa: E402
import engine_tta  # noqa: E402
import parity  # noqa: E402  (found through the paths above)
import pytorch_engine  # noqa: E402
from user_model import write_safetensors  # noqa: E402

RESNET = {
    "kind": "cifar-resnet",
    "blocks_per_stage": 1,
    "conv_bias": True,
    "batch_norm": True,
    "bn_momentum": 0.1,
}
GPT = {"kind": "gpt", "vocab_size": 16, "context": 8, "layers": 1, "heads": 2, "width": 16, "dropout": 0.0}
BATCH = 4
# Batches scheduled in a case, images in an image case, tokens in a text case.
BATCHES = 4
IMAGES = 12
TOKENS = 200
REQUEST_TIMEOUT_S = 240
# Agreement in float64 of sides whose arithmetic is the same but for rounding.
SAME_ARITHMETIC = 1e-9
# parity.py's written-out attention takes its softmax in float32 (as autocast would), also in a
# float64 run, so where one side rounds that softmax differently (SDPA computes it in float64,
# inductor fuses it) the losses agree to about 4e-10 (float32's rounding of the attention
# weights, damped by the float64 around it), not to float64's.
FLOAT32_SOFTMAX = 1e-8


class CheckFailed(Exception):
    """A check did not hold."""


def check(condition, message):
    """Fails with `message` unless `condition`."""
    if not condition:
        raise CheckFailed(message)


# ---- Writing cases ----


def write_weights(path, model_spec, seed, perturb=0.0):
    """The initial weights of parity's model for `model_spec` (seeded), without BatchNorm's
    num_batches_tracked, which trickbench does not export; `perturb` adds that much standard
    normal noise to every floating-point weight."""
    torch.manual_seed(seed)
    state = parity.build_model(model_spec).state_dict()
    noise = torch.Generator().manual_seed(seed + 1)
    write_safetensors(
        path,
        {
            k: v + perturb * torch.randn(v.shape, generator=noise) if v.is_floating_point() else v
            for k, v in state.items()
            if "num_batches" not in k
        },
    )


def write_data(path, model_spec, augment, images=None):
    """The case's data for `model_spec`: for a ResNet IMAGES 8×8 images (or `images`, a list of
    encoded files) with labels, and BATCHES batches of BATCH of them, each with its crops where
    `augment`; for a GPT a split of TOKENS tokens and the window starts of BATCHES batches.
    Returns the case's `data` object."""
    generator = torch.Generator().manual_seed(7)
    if model_spec["kind"] == "gpt":
        context = model_spec["context"]
        tensors = {"tokens": torch.randint(model_spec["vocab_size"], (TOKENS,), generator=generator, dtype=torch.int32)}
        for k in range(BATCHES):
            tensors[f"starts.{k}"] = torch.randint(TOKENS - context, (BATCH,), generator=generator)
        write_safetensors(path, tensors)
        return {"kind": "text", "file": os.path.basename(path), "batches": BATCHES, "context": context}
    count = IMAGES if images is None else len(images)
    tensors = {"labels": torch.randint(10, (count,), generator=generator)}
    if images is None:
        tensors["images"] = torch.randint(256, (count, 3, 8, 8), generator=generator, dtype=torch.uint8)
    else:
        lengths = torch.tensor([len(f) for f in images])
        tensors["encoded"] = torch.frombuffer(bytearray(b"".join(images)), dtype=torch.uint8)
        tensors["offsets"] = torch.cat([torch.zeros(1, dtype=torch.int64), lengths.cumsum(0)])
    for k in range(BATCHES):
        tensors[f"index.{k}"] = torch.randperm(count, generator=generator)[:BATCH]
        if augment:
            offsets = torch.randint(9, (BATCH, 2), generator=generator)
            flips = torch.randint(2, (BATCH, 1), generator=generator)
            tensors[f"crop.{k}"] = torch.cat([offsets, flips], dim=1)
    write_safetensors(path, tensors)
    data = {"kind": "images", "file": os.path.basename(path), "batches": BATCHES, "augment": augment}
    return {**data, "standardise": True, "encoded": images is not None}


def write_case(directory, model_spec, sides, kind="train", dtype=None, log_interval=3, images=None, **fields):
    """A case directory: its data (`images`: encoded files instead of pixels), one weights file
    per distinct model, engine-case.json with `sides` ({name: tricks list, or a dict of side fields
    to override}) and any further case `fields` (as_if_cuda, memory_budget_bytes). Returns the
    directory."""
    os.makedirs(directory)
    data = write_data(os.path.join(directory, "data.safetensors"), model_spec, kind == "train", images)
    write_weights(os.path.join(directory, "weights.safetensors"), model_spec, seed=1)
    case_sides = {}
    for name, side in sides.items():
        side = {"tricks": side} if isinstance(side, list) else dict(side)
        model = {**model_spec, **side.pop("model", {})}
        if model != model_spec or "perturb" in side:
            weights = f"{name}.safetensors"
            write_weights(os.path.join(directory, weights), model, seed=1, perturb=side.pop("perturb", 0.0))
        else:
            weights = "weights.safetensors"
        case_sides[name] = {"model": model, "weights": weights, "tricks": [], "reference_for": None, **side}
    case = {
        "format": 3,
        "device": "cpu",
        "seed": 0,
        "threads": 1,
        "kind": kind,
        "data": data,
        "loader_workers": 2,
        "accumulation_micro_batches": 2,
        "learning_rate": 0.05,
        "optimizer": {"kind": "sgd", "momentum": 0.9, "weight_decay": 0.0005},
        "clip_max_norm": None,
        "log_interval": log_interval,
        "sides": case_sides,
    }
    if dtype is not None:
        case["dtype"] = dtype
    case.update(fields)
    with open(os.path.join(directory, "engine-case.json"), "w") as f:
        json.dump(case, f, indent=1)
    return directory


# ---- Driving the engine ----


class Engine:
    """One engine process on a case directory, its stderr in a file beside the case."""

    def __init__(self, case_dir, env=None):
        self.case_dir = case_dir
        self.stderr_path = os.path.join(os.path.dirname(case_dir), os.path.basename(case_dir) + ".stderr")
        self.stderr = open(self.stderr_path, "w")
        self.process = subprocess.Popen(
            [sys.executable, str(ENGINE), "--case", case_dir],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self.stderr,
            text=True,
            env={**os.environ, **(env or {})},
        )
        self.watchdog = threading.Timer(REQUEST_TIMEOUT_S, self.process.kill)
        self.watchdog.daemon = True
        self.watchdog.start()

    def read(self):
        """The next reply line, parsed."""
        line = self.process.stdout.readline()
        check(line, f"{self.case_dir}: the engine ended without a reply; its stderr:\n{self.stderr_text()}")
        try:
            return json.loads(line)
        except ValueError:
            raise CheckFailed(f"{self.case_dir}: a reply line is not JSON: {line!r}") from None

    def send(self, line):
        """Sends one request line; returns the reply."""
        self.process.stdin.write(line + "\n")
        self.process.stdin.flush()
        return self.read()

    def request(self, **request):
        """Sends `request` as JSON; returns the reply."""
        return self.send(json.dumps(request))

    def ok(self, expected_keys=("ok",), **request):
        """Sends `request`; the reply must have exactly `expected_keys` and no error."""
        reply = self.request(**request)
        check(set(reply) == set(expected_keys), f"{self.case_dir}: {request} replied {reply}")
        return reply

    def finish(self, quit=True):
        """Ends the engine by quit (or by closing stdin); returns its exit status."""
        if quit:
            check(self.request(op="quit") == {"ok": True}, f"{self.case_dir}: quit did not reply ok")
        self.process.stdin.close()
        status = self.process.wait()
        check(self.process.stdout.read() == "", f"{self.case_dir}: output after the last reply")
        self.close()
        return status

    def close(self):
        """Stops the watchdog and the process if still running."""
        self.watchdog.cancel()
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait()
        self.stderr.close()

    def pid(self):
        """The engine's process id."""
        return self.process.pid

    def stderr_text(self):
        """What the engine wrote to stderr so far."""
        with open(self.stderr_path) as f:
            return f.read()[-4000:]


class ForkedEngine(Engine):
    """An engine forked by a fork server on `socket_path` for the case in `case_dir`, driven over
    the connection; `client_pid` is the process whose end it watches (this one by default)."""

    def __init__(self, socket_path, case_dir, client_pid=None):
        self.case_dir = case_dir
        self.stderr_path = case_dir + ".stderr"
        self.stderr = open(self.stderr_path, "w")
        self.connection = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.connection.settimeout(REQUEST_TIMEOUT_S)
        self.connection.connect(socket_path)
        self.replies = self.connection.makefile("r", encoding="utf-8")
        self.requests = self.connection.makefile("w", encoding="utf-8")
        hello = {
            "case": case_dir,
            "stderr": self.stderr_path,
            "client_pid": client_pid or os.getpid(),
            "data_limit_bytes": None,
        }
        self.requests.write(json.dumps(hello) + "\n")
        self.requests.flush()
        self.ready_pid = None

    def read(self):
        line = self.replies.readline()
        check(line, f"{self.case_dir}: the forked engine ended without a reply; its stderr:\n{self.stderr_text()}")
        reply = json.loads(line)
        self.ready_pid = self.ready_pid or reply.get("pid")
        return reply

    def send(self, line):
        self.requests.write(line + "\n")
        self.requests.flush()
        return self.read()

    def pid(self):
        return self.ready_pid

    def finish(self, quit=True):
        if quit:
            check(self.request(op="quit") == {"ok": True}, f"{self.case_dir}: quit did not reply ok")
        check(self.replies.readline() == "", f"{self.case_dir}: output after the last reply")
        self.close()
        return 0

    def close(self):
        self.connection.close()
        self.stderr.close()


def relative(a, b):
    """|a − b| relative to |b|."""
    return abs(a - b) / abs(b)


def built(engine, sides):
    """Builds every side in `sides`; each must reply ok."""
    for side in sides:
        check(engine.request(op="build", side=side) == {"ok": True}, f"build {side} did not reply ok")


def not_applicable(engine, side, contains):
    """Side `side` must build as not applicable, its reason containing `contains`."""
    reply = engine.request(op="build", side=side)
    check(set(reply) == {"not_applicable"}, f"build {side}: expected not_applicable, got {reply}")
    check(contains in reply["not_applicable"], f"build {side}: reason {reply['not_applicable']!r} lacks {contains!r}")
    again = engine.request(op="window", side=side, steps=1)
    check(again == reply, f"window on not-applicable {side}: expected the same reason, got {again}")


# What a window's reply holds.
WINDOW_KEYS = ("samples", "seconds", "host_reads", "minor_faults")


def timed_window(engine, side, steps, host_reads=None, per_row=1):
    """A window of `steps` steps of `side`, each batch row `per_row` samples (a GPT window's
    tokens); checks its reply and returns it."""
    reply = engine.ok(WINDOW_KEYS, op="window", side=side, steps=steps)
    faults = reply["minor_faults"]
    check(isinstance(faults, int) and faults >= 0, f"window {side}: minor_faults {faults}")
    expected = steps * BATCH * per_row
    check(reply["samples"] == expected, f"window {side}: samples {reply['samples']}, expected {expected}")
    check(isinstance(reply["seconds"], float) and 0 < reply["seconds"] < 60, f"window {side}: seconds {reply}")
    if host_reads is not None:
        check(
            reply["host_reads"] == host_reads, f"window {side}: host_reads {reply['host_reads']}, expected {host_reads}"
        )
    return reply


# ---- The checks ----


def check_ready(engine):
    """The ready line's fields."""
    ready = engine.read()
    expected = {"ready": True, "implementation": "pytorch", "version": torch.__version__, "threads": 1}
    check({k: ready.get(k) for k in expected} == expected, f"ready line {ready}, expected {expected} and python")
    check(ready.get("python") == sys.version.split()[0], f"ready line python {ready.get('python')}")
    check(ready.get("pid") == engine.pid(), f"ready line pid {ready.get('pid')}, expected {engine.pid()}")
    check(set(ready) == {*expected, "python", "pid"}, f"ready line has extra fields: {ready}")


def check_bad_requests(engine):
    """Requests that cannot be served get an error reply, and the engine keeps serving."""
    cases = [
        ("not json", "not JSON"),
        ("[1, 2]", "not a JSON object"),
        (json.dumps({"op": "fly"}), "unknown op"),
        (json.dumps({"op": "window", "side": "nobody", "steps": 1}), "unknown side"),
        (json.dumps({"op": "window", "side": "reference", "steps": 1}), "not built"),
        (json.dumps({"op": "loss", "side": "reference"}), "not built"),
        (json.dumps({"op": "window", "side": "reference"}), "missing field 'steps'"),
        (json.dumps({"op": "window", "side": "reference", "steps": 0}), "steps"),
        (json.dumps({"op": "warm_up", "side": "reference", "steps": True}), "steps"),
        (json.dumps({"op": "memory", "extra": 1}), "unknown field 'extra'"),
    ]
    for line, contains in cases:
        reply = engine.send(line)
        check(
            set(reply) == {"error"} and contains in reply["error"],
            f"{line}: expected an error with {contains!r}, got {reply}",
        )


def check_resnet_train(root):
    """The ResNet training case in float32: replies, tricks applied, not applicable on a CPU."""
    reasons = {
        "tf32": "TF32 is a tensor-core format",
        "amp": "amp: ",
        "amp-bf16": "amp-bf16: ",
        "cudnn-benchmark": "needs a CUDA GPU",
        "flash-attention": "the ResNet has no attention",
        "sdpa-math": "the ResNet has no attention",
        "no-grad-eval": "this case trains",
        "turbo": "the PyTorch engine does not apply turbo",
        "ddp": "the PyTorch engine does not apply ddp",
        "one-cycle": "one-cycle: it changes how the model trains to a target, and this case times steps",
        "cuda-graphs": "cuda-graphs: a CUDA graph records GPU kernel launches",
        "pin-memory": "pin-memory: pinned memory speeds host-to-GPU copies",
        "packed-dataset": "packed already",
        "fp8-matmul": "the ResNet's work is convolutions",
        "compiled-checkpoints": "checkpointing with torch-compile",
    }
    na = {side: [side] for side in reasons}
    na["compiled-checkpoints"] = ["checkpointing", "torch-compile"]
    reasons["strict-fp32"] = "tf32's strict-fp32 reference: TF32 is a tensor-core format"
    na["strict-fp32"] = {"reference_for": "tf32"}
    sides = {
        "reference": [],
        **{trick: [trick] for trick in RESNET_TRAINING_TRICKS},
        "debug-on": {"reference_for": "debug-off"},
        "no-bias-before-bn": {"tricks": ["no-bias-before-bn"], "model": {"conv_bias": False}},
        "bias-kept": ["no-bias-before-bn"],
        **na,
    }
    engine = Engine(write_case(os.path.join(root, "resnet-train"), RESNET, sides))
    try:
        check_ready(engine)
        check_bad_requests(engine)
        for side, contains in reasons.items():
            not_applicable(engine, side, contains)
        reply = engine.request(op="build", side="bias-kept")
        check("conv_bias" in reply.get("error", ""), f"no-bias-before-bn with conv_bias true: {reply}")
        applicable = [s for s in sides if s not in na and s != "bias-kept"]
        built(engine, applicable)
        reply = engine.request(op="build", side="reference")
        check("already built" in reply.get("error", ""), f"a second build: {reply}")
        check(engine.request(op="loss", side="reference") == {"loss": None}, "loss before any step is not null")
        for side in applicable:
            warm = engine.ok(("ok", "compile_s"), op="warm_up", side=side, steps=1)
            check(warm == {"ok": True, "compile_s": None}, f"warm_up {side}: {warm}")
        for side in applicable:
            check(engine.request(op="stood_in", side=side) == {"stood_in": []}, f"{side}: a CPU stood in for a call")
            if side == "avoid-sync":
                # One step pending from warm-up, log interval 3: reads after steps 2 and 5 of 6.
                timed_window(engine, side, 6, host_reads=2)
            else:
                timed_window(engine, side, 6, host_reads=12)
            loss = engine.ok(("loss",), op="loss", side=side)["loss"]
            check(isinstance(loss, float) and math.isfinite(loss) and loss > 0, f"loss {side}: {loss}")
            facts = engine.ok(INSPECT_KEYS, op="inspect", side=side)
            check(facts["anomaly"] == (side == "debug-on"), f"anomaly after {side}'s window: {facts['anomaly']}")
            check_resnet_facts(side, facts)
        check_memory(engine)
        check_breakdown(engine)
        check(engine.finish() == 0, "quit did not exit 0")
    finally:
        engine.close()


# The ResNet training tricks the engine applies on a CPU, each a side of the training case.
RESNET_TRAINING_TRICKS = (
    "channels-last",
    "zero-grad-none",
    "avoid-sync",
    "fused-optimizer",
    "debug-off",
    "loader-workers",
    "zero-copy",
    "gpu-augment",
    "jit-fusion",
    "checkpointing",
    "grad-accumulation",
)


def check_breakdown(engine):
    """A breakdown times each phase of a training step, in step order, on the host's clock."""
    reply = engine.ok(("clock", "steps", "phases", "samples_per_s"), op="breakdown", side="reference", steps=3)
    phases = [p["phase"] for p in reply["phases"]]
    expected = ["batch-wait", "host-to-device", "forward", "backward", "optimizer", "metrics"]
    check(reply["clock"] == "host" and reply["steps"] == 3 and phases == expected, f"breakdown: {reply}")
    check(all(p["mean_ms"] >= 0 for p in reply["phases"]) and reply["samples_per_s"] > 0, f"breakdown: {reply}")
    forward = next(p["mean_ms"] for p in reply["phases"] if p["phase"] == "forward")
    check(forward > 0, f"breakdown: the forward pass took no time: {reply}")


def check_memory(engine):
    """The memory replies of the training case: peaks since start (no tensor count on a CPU), and
    a probe's peak of live CPU tensor bytes, which must hold at least the side's parameters, their
    gradients and momentum, and be lower where checkpointing and grad-accumulation keep fewer
    activations."""
    keys = ("peak_allocated_bytes", "peak_reserved_bytes", "peak_rss_bytes")
    memory = engine.ok(keys, op="memory")
    check(memory["peak_allocated_bytes"] is None and memory["peak_reserved_bytes"] is None, f"memory {memory}")
    check(isinstance(memory["peak_rss_bytes"], int) and memory["peak_rss_bytes"] > 50 << 20, f"memory {memory}")
    weights = sum(p.numel() * 4 for p in parity.build_model(RESNET).parameters())
    peaks = {}
    for side in ("reference", "checkpointing", "grad-accumulation"):
        probe = engine.ok((*keys, "samples"), op="probe", side=side, steps=3)
        check(probe["samples"] == 3 * BATCH, f"probe {side}: samples {probe['samples']}, expected {3 * BATCH}")
        peaks[side] = probe["peak_allocated_bytes"]
        check(isinstance(peaks[side], int) and peaks[side] > 3 * weights, f"probe {side}: {probe}, weights {weights} B")
        check(probe["peak_reserved_bytes"] is None and probe["peak_rss_bytes"] > 50 << 20, f"probe {side}: {probe}")
    for side in ("checkpointing", "grad-accumulation"):
        check(peaks[side] < peaks["reference"], f"probe: {side} peaks at {peaks[side]} B, the reference at {peaks}")
    again = engine.ok((*keys, "samples"), op="probe", side="reference", steps=3)["peak_allocated_bytes"]
    check(again == peaks["reference"], f"probe: the reference's peak moved from {peaks['reference']} to {again} B")
    reply = engine.request(op="probe", side="reference", steps=1)
    check("steps" in reply.get("error", ""), f"probe of one step: {reply}")


INSPECT_KEYS = (
    "model",
    "dtype",
    "memory_format",
    "activation_format",
    "input_format",
    "conv_bias",
    "attention",
    "sdpa_backend",
    "optimizer",
    "grads_after_zero_grad",
    "metrics",
    "eval_graph",
    "autocast",
    "grad_scaler",
    "compiled",
    "steps_done",
    "anomaly",
    "cudnn_benchmark",
    "matmul_tf32",
    "cudnn_tf32",
    "loader",
    "scripted",
    "checkpointed",
    "micro_batches",
    "fp8_linears",
    "fp8_linears_left",
    "cuda_graph",
    "expandable_segments",
)


def check_resnet_facts(side, facts):
    """What inspect says about a ResNet training side."""
    layout = "channels_last" if side == "channels-last" else "contiguous"
    for key in ("memory_format", "activation_format", "input_format"):
        check(facts[key] == layout, f"inspect {side}: {key} {facts[key]}, expected {layout}")
    fused = True if side == "fused-optimizer" else None
    expected_optimizer = {"class": "SGD", "fused": fused, "foreach": None}
    check(facts["optimizer"] == expected_optimizer, f"inspect {side}: optimizer {facts['optimizer']}")
    grads = "none" if side == "zero-grad-none" else "tensors"
    check(facts["grads_after_zero_grad"] == grads, f"inspect {side}: grads {facts['grads_after_zero_grad']}")
    metrics = "every-log-interval" if side == "avoid-sync" else "every-step"
    check(facts["metrics"] == metrics, f"inspect {side}: metrics {facts['metrics']}")
    check(facts["conv_bias"] == (side != "no-bias-before-bn"), f"inspect {side}: conv_bias {facts['conv_bias']}")
    check(facts["attention"] is None and not facts["compiled"], f"inspect {side}: {facts}")
    check(facts["steps_done"] == 7 and facts["dtype"] == "float32", f"inspect {side}: {facts}")
    check(not facts["cudnn_benchmark"] and not facts["matmul_tf32"], f"inspect {side}: switches {facts}")
    check(facts["cudnn_tf32"], f"inspect {side}: cuDNN's TF32 is off outside the strict-fp32 reference: {facts}")
    loader = {
        "workers": 2 if side == "loader-workers" else 0,
        "pinned": False,
        "zero_copy": side == "zero-copy",
        "augment": "device" if side == "gpu-augment" else "host",
        "decoded": None,
        "gathered": False,
    }
    check(facts["loader"] == loader, f"inspect {side}: loader {facts['loader']}, expected {loader}")
    scripted = ["residual_relu"] if side == "jit-fusion" else []
    check(facts["scripted"] == scripted, f"inspect {side}: scripted {facts['scripted']}, expected {scripted}")
    check(facts["checkpointed"] == (side == "checkpointing"), f"inspect {side}: checkpointed {facts['checkpointed']}")
    micro = 2 if side == "grad-accumulation" else 1
    check(facts["micro_batches"] == micro, f"inspect {side}: micro_batches {facts['micro_batches']}")
    fp8 = (facts["fp8_linears"], facts["fp8_linears_left"])
    check(fp8 == (0, 0) and not facts["cuda_graph"], f"inspect {side}: {facts}")
    check(facts["expandable_segments"] is None, f"inspect {side}: expandable_segments {facts['expandable_segments']}")


def check_resnet_eval(root):
    """The ResNet evaluation case: no host reads, no-grad-eval records no graph, zero-copy
    gathers the unaugmented batches from the split; a case whose every side asks for
    expandable segments, with a memory budget, starts on a CPU, its sides not applicable."""
    sides = {
        "reference": [],
        "no-grad-eval": ["no-grad-eval"],
        "zero-copy": ["zero-copy"],
        "zero-grad-none": ["zero-grad-none"],
        "checkpointing": ["checkpointing"],
    }
    engine = Engine(write_case(os.path.join(root, "resnet-eval"), RESNET, sides, kind="eval"))
    try:
        check_ready(engine)
        not_applicable(engine, "zero-grad-none", "this case evaluates")
        not_applicable(engine, "checkpointing", "this case evaluates")
        built(engine, ["zero-copy"])
        loader = engine.ok(INSPECT_KEYS, op="inspect", side="zero-copy")["loader"]
        check(loader["gathered"] and loader["augment"] is None, f"inspect zero-copy (eval): loader {loader}")
        built(engine, ["reference", "no-grad-eval"])
        for side in ("reference", "no-grad-eval"):
            engine.ok(("ok", "compile_s"), op="warm_up", side=side, steps=0)
            timed_window(engine, side, 5, host_reads=0)
            check(engine.request(op="loss", side=side) == {"loss": None}, f"eval loss of {side} is not null")
            facts = engine.ok(INSPECT_KEYS, op="inspect", side=side)
            graph = side == "reference"
            check(facts["eval_graph"] is graph, f"inspect {side}: eval_graph {facts['eval_graph']}, expected {graph}")
            check(facts["optimizer"] is None and facts["grads_after_zero_grad"] is None, f"inspect {side}: {facts}")
        check(engine.finish(quit=False) == 0, "EOF on stdin did not exit 0")
    finally:
        engine.close()
    expandable = {"reference": ["expandable-segments"]}
    engine = Engine(write_case(os.path.join(root, "expandable"), RESNET, expandable, memory_budget_bytes=1 << 30))
    try:
        check_ready(engine)
        not_applicable(engine, "reference", "expandable-segments: expandable segments are a mode of the CUDA")
        check(engine.finish() == 0, "expandable: quit did not exit 0")
    finally:
        engine.close()


# Float64 sides whose tricks leave the arithmetic alone, on both models: the loader tricks among
# them assemble the same batches, and checkpointing recomputes the same values with the same
# dropout masks.
KEEPING_ARITHMETIC = {
    "zero-grad-none": ["zero-grad-none"],
    "avoid-sync": ["avoid-sync"],
    "fused-optimizer": ["fused-optimizer"],
    "debug-off": ["debug-off"],
    "debug-on": {"reference_for": "debug-off"},
    "zero-copy": ["zero-copy"],
    "loader-workers": ["loader-workers"],
    "jit-fusion": ["jit-fusion"],
    "checkpointing": ["checkpointing"],
}
# The control of every agreement check: 1e-5 of noise added to the reference's weights.
CONTROL = {"perturbed": {"perturb": 1e-5}}


def check_agreement(engine, name, sides, pairs, optional=(), per_row=1):
    """Trains the built `sides` of `engine`'s float64 case ("reference" and the "perturbed"
    control among them) for three windows; after each window every (side, against, tolerance)
    of `pairs` must agree within the tolerance (relative), and the control must be far from the
    reference (the tolerance tells a real difference). A side in `optional` found not applicable
    in its warm-up is left out with a note."""
    trained = []
    for side in sides:
        # One step each: torch-compile's warm-up takes at least one.
        reply = engine.request(op="warm_up", side=side, steps=1)
        if side in optional and "not_applicable" in reply:
            print(f"note: {side} not checked: {reply['not_applicable']}", flush=True)
            again = engine.request(op="window", side=side, steps=1)
            check(again == reply, f"{name}: a window after {side} was found not applicable: {again}")
            continue
        compiled = side == "torch-compile"
        check(set(reply) == {"ok", "compile_s"}, f"{name}: warm_up {side}: {reply}")
        check((reply["compile_s"] is not None) == compiled, f"{name}: warm_up {side}: {reply}")
        check(not compiled or reply["compile_s"] > 0, f"{name}: warm_up {side}: {reply}")
        counters = engine.ok(("graph_breaks", "graphs", "recompiles"), op="compile_counters", side=side)
        if compiled:
            check(counters["graphs"] >= 1 and counters["recompiles"] >= 0, f"{name}: {side}: {counters}")
            check(counters["graph_breaks"] >= 0, f"{name}: {side}: {counters}")
        else:
            check(set(counters.values()) == {None}, f"{name}: compile_counters {side}: {counters}")
        trained.append(side)
    for window_index in range(3):
        losses = {}
        for side in trained:
            timed_window(engine, side, 2, per_row=per_row)
            losses[side] = engine.ok(("loss",), op="loss", side=side)["loss"]
        control = relative(losses["perturbed"], losses["reference"])
        check(control > 100 * SAME_ARITHMETIC, f"{name}: the perturbed control is {control:.1e} from the reference")
        for side, against, tolerance in pairs:
            if side in losses:
                gap = relative(losses[side], losses[against])
                check(gap <= tolerance, f"{name}: window {window_index}: {side} is {gap:.1e} from {against}")


def check_resnet_float64(root):
    """Float64 agreement of the ResNet tricks that leave the arithmetic alone."""
    sides = {**KEEPING_ARITHMETIC, "channels-last": ["channels-last"]}
    all_sides = {"reference": [], **CONTROL, **sides}
    engine = Engine(write_case(os.path.join(root, "resnet-float64"), RESNET, all_sides, dtype="float64"))
    try:
        check_ready(engine)
        built(engine, all_sides)
        pairs = [(s, "reference", SAME_ARITHMETIC) for s in sides]
        check_agreement(engine, "resnet-float64", list(all_sides), pairs)
        check(engine.finish() == 0, "resnet-float64: quit did not exit 0")
    finally:
        engine.close()


def check_gpt(root):
    """The GPT case in float64: agreement of the tricks that leave the arithmetic alone
    (torch-compile too where inductor can build), SDPA in the attention tricks' profiles, and
    what does not apply on a CPU or to a GPT."""
    # Without dropout the CPU's flash kernel applies, as the catalogue says.
    attention = {"flash-attention": ["flash-attention"], "sdpa-math": ["sdpa-math"], "sdpa-flash": ["sdpa-flash"]}
    cannot = {
        "sdpa-cudnn": ["sdpa-cudnn"],
        "sdpa-mem-efficient": ["sdpa-mem-efficient"],
        "channels-last": ["channels-last"],
        "no-bias-before-bn": ["no-bias-before-bn"],
        "cudnn-benchmark": ["cudnn-benchmark"],
        "two-autocasts": ["flash-attention", "amp", "amp-bf16"],
        "fp8-matmul": ["fp8-matmul"],
        "cuda-graphs": ["cuda-graphs"],
        "gpu-augment": ["gpu-augment"],
    }
    compiled = {"torch-compile": ["torch-compile"]}
    # Micro-batches of equal size average to the whole batch's loss where nothing (BatchNorm)
    # computes statistics over the batch.
    accumulated = {"grad-accumulation": ["grad-accumulation"]}
    sides = {"reference": [], **CONTROL, **KEEPING_ARITHMETIC, **accumulated, **attention, **compiled, **cannot}
    # Inductor probes each vector ISA by building a test library and loading it in a fresh
    # Python (about 25 s on a 2-core VM); the check trusts the CPU's flags instead.
    directory = write_case(os.path.join(root, "gpt-float64"), GPT, sides, dtype="float64")
    engine = Engine(directory, env={"TORCHINDUCTOR_VEC_ISA_OK": "1"})
    try:
        check_ready(engine)
        for side in ("sdpa-cudnn", "sdpa-mem-efficient"):
            not_applicable(engine, side, "needs a CUDA GPU")
        not_applicable(engine, "channels-last", "no 4-d image activations")
        not_applicable(engine, "no-bias-before-bn", "GPT")
        not_applicable(engine, "cudnn-benchmark", "needs a CUDA GPU")
        not_applicable(engine, "two-autocasts", "amp: ")
        not_applicable(engine, "fp8-matmul", "fp8-matmul: fp8 tensor-core matmuls need a CUDA GPU")
        not_applicable(engine, "cuda-graphs", "a CUDA graph records GPU kernel launches")
        not_applicable(engine, "gpu-augment", "text windows")
        applicable = [side for side in sides if side not in cannot and side not in compiled]
        built(engine, applicable)
        pairs = [(s, "reference", SAME_ARITHMETIC) for s in (*KEEPING_ARITHMETIC, *accumulated)]
        # SDPA against the written-out attention, and the two SDPA sides against each other,
        # where no float32 softmax stands between them.
        pairs += [
            ("flash-attention", "reference", FLOAT32_SOFTMAX),
            ("sdpa-math", "flash-attention", SAME_ARITHMETIC),
            ("sdpa-flash", "flash-attention", SAME_ARITHMETIC),
        ]
        built(engine, ["torch-compile"])
        facts = engine.ok(INSPECT_KEYS, op="inspect", side="torch-compile")
        check(facts["compiled"], f"inspect torch-compile: compiled {facts['compiled']}")
        pairs.append(("torch-compile", "reference", FLOAT32_SOFTMAX))
        # Not applicable where inductor cannot build (no C++ compiler, say).
        # A GPT's samples are its windows' tokens, as trickbench counts them on libtorch.
        tokens = GPT["context"]
        check_agreement(engine, "gpt-float64", applicable + ["torch-compile"], pairs, ["torch-compile"], tokens)
        check_attention(engine)
        check_gpt_facts(engine)
        # The memory probe walks the interpreter's tensors, among them torch.compile's fake ones.
        reply = engine.request(op="probe", side="torch-compile", steps=2)
        if "not_applicable" not in reply:
            live = reply.get("peak_allocated_bytes")
            check(isinstance(live, int) and live > 0, f"probe of the compiled side: {reply}")
        check(engine.finish() == 0, "gpt-float64: quit did not exit 0")
    finally:
        engine.close()


def check_fusion_follows_dropout(root):
    """jit-fusion scripts the GPT's residual dropout-add only where there is dropout, as
    trickbench's own loop does: without it the eager branch is a plain add, and a scripted
    dropout would draw a mask all the same."""
    for p, expected in ((0.0, ["gelu"]), (0.2, ["gelu", "residual_dropout"])):
        model = parity.Gpt(16, 8, 2, 2, 16, p)
        scripted = engine_tricks.fuse_pointwise(model)
        check(scripted == expected, f"jit-fusion with dropout {p}: scripted {scripted}, expected {expected}")
        fused = [block.residual_dropout is not None for block in model.transformer.h]
        check(fused == [p > 0] * 2, f"jit-fusion with dropout {p}: blocks with a scripted dropout-add {fused}")


def check_gpt_facts(engine):
    """What inspect says about the GPT sides whose tricks change the network, the step or the
    loader."""
    expected = {
        "reference": ([], False, 1),
        # Without dropout (GPT's 0.0) the residual branch's add stays eager, as on libtorch.
        "jit-fusion": (["gelu"], False, 1),
        "checkpointing": ([], True, 1),
        "grad-accumulation": ([], False, 2),
    }
    for side, (scripted, checkpointed, micro) in expected.items():
        facts = engine.ok(INSPECT_KEYS, op="inspect", side=side)
        got = (facts["scripted"], facts["checkpointed"], facts["micro_batches"])
        check(got == (scripted, checkpointed, micro), f"inspect {side}: scripted, checkpointed, micro_batches {got}")
    for side, workers, zero_copy in (("reference", 0, False), ("loader-workers", 2, False), ("zero-copy", 0, True)):
        loader = engine.ok(INSPECT_KEYS, op="inspect", side=side)["loader"]
        expected_loader = {
            "workers": workers,
            "pinned": False,
            "zero_copy": zero_copy,
            "augment": None,
            "decoded": None,
            "gathered": False,
        }
        check(loader == expected_loader, f"inspect {side}: loader {loader}, expected {expected_loader}")


def check_attention(engine):
    """Which attention each GPT side runs: inspect's word for it and the kernels its profile
    shows."""
    ops = {}
    for side in ("reference", "flash-attention", "sdpa-math"):
        ops[side] = set(engine.ok(("ops",), op="profile", side=side, steps=1)["ops"])
        facts = engine.ok(INSPECT_KEYS, op="inspect", side=side)
        attention = "written-out" if side == "reference" else "sdpa"
        check(facts["attention"] == attention, f"inspect {side}: attention {facts['attention']}")
        backend = "MATH" if side == "sdpa-math" else None
        check(facts["sdpa_backend"] == backend, f"inspect {side}: sdpa_backend {facts['sdpa_backend']}")
        check(facts["memory_format"] is None and facts["conv_bias"] is None, f"inspect {side}: {facts}")
        check(facts["dtype"] == "float64", f"inspect {side}: dtype {facts['dtype']}")
    sdpa, flash, math_kernel = (
        "aten::scaled_dot_product_attention",
        "aten::_scaled_dot_product_flash_attention_for_cpu",
        "aten::_scaled_dot_product_attention_math",
    )
    check("aten::softmax" in ops["reference"], "the reference's profile lacks the written-out softmax")
    check(sdpa not in ops["reference"], "the reference's profile shows scaled_dot_product_attention")
    check("aten::softmax" not in ops["flash-attention"], "flash-attention's profile shows a written-out softmax")
    check({sdpa, flash} <= ops["flash-attention"], "flash-attention's profile lacks SDPA's CPU flash kernel")
    check(sdpa in ops["sdpa-math"] and math_kernel in ops["sdpa-math"], "sdpa-math's profile lacks the math kernel")
    check(flash not in ops["sdpa-math"], "sdpa-math's profile shows the flash kernel")


# ---- The as-if-CUDA rehearsal ----


# The GPUs the rehearsal behaves as: Hopper (every CUDA trick applies), Ampere (no fp8 tensor
# cores) and Turing (neither TF32 nor bfloat16).
SM90 = {"gpu": "sm90", "capability": [9, 0], "memory_bytes": 80 << 30}
SM80 = {"gpu": "sm80", "capability": [8, 0], "memory_bytes": 40 << 30}
SM75 = {"gpu": "sm75", "capability": [7, 5], "memory_bytes": 16 << 30}
# The stand-ins of the process before any request: the synchronisation that ends the libraries'
# warm-up (the allocator's mode set off at start is its default, not stood in for).
PROCESS_STAND_INS = {"device-synchronize"}
# The stand-ins every side of a rehearsal goes through once it is warmed up, probed and broken
# down, and `held` asked: synchronisations, the allocator's statistics and cache, CUDA events.
EVERY_SIDE_STAND_INS = PROCESS_STAND_INS | {"allocator-statistics", "cuda-events", "empty-cache"}
# Each side of the as-if ResNet case (its tricks, or its side fields) and the stand-ins its
# tricks add.
AS_IF_RESNET = {
    "reference": ([], ()),
    "strict-fp32": ({"reference_for": "tf32"}, ("device-properties",)),
    "tf32": (["tf32"], ("device-properties",)),
    "amp": (["amp"], ("autocast-device",)),
    "amp-bf16": (["amp-bf16"], ("autocast-device", "device-properties")),
    "cudnn-benchmark": (["cudnn-benchmark"], ()),
    "channels-last": (["channels-last"], ()),
    "cuda-graphs": (["cuda-graphs"], ("graph-capture",)),
    "pin-memory": (["pin-memory"], ("pinned-memory",)),
    "loader-workers": (["loader-workers"], ()),
    "zero-copy": (["zero-copy"], ()),
    "gpu-augment": (["gpu-augment"], ()),
    "checkpointing": (["checkpointing"], ()),
    "grad-accumulation": (["grad-accumulation"], ()),
    "fused-optimizer": (["fused-optimizer"], ()),
    "zero-grad-none": (["zero-grad-none"], ()),
    "avoid-sync": (["avoid-sync"], ()),
    "jit-fusion": (["jit-fusion"], ()),
    "debug-on": ({"reference_for": "debug-off"}, ()),
}
# The same for the as-if GPT case, whose model has dropout (the "-no-dropout" sides' has none).
NO_DROPOUT = {"model": {"dropout": 0.0}}
AS_IF_GPT = {
    "reference": ([], ()),
    "strict-fp32": ({"reference_for": "tf32"}, ("device-properties",)),
    "tf32": (["tf32"], ("device-properties",)),
    "amp": (["amp"], ("autocast-device",)),
    "amp-bf16": (["amp-bf16"], ("autocast-device", "device-properties")),
    "flash-attention": (["flash-attention"], ()),
    "sdpa-flash": (["sdpa-flash"], ("attention-kernel",)),
    "sdpa-flash-no-dropout": ({"tricks": ["sdpa-flash"], **NO_DROPOUT}, ()),
    "sdpa-cudnn": (["sdpa-cudnn"], ("attention-kernel",)),
    "sdpa-cudnn-no-dropout": ({"tricks": ["sdpa-cudnn"], **NO_DROPOUT}, ("attention-kernel",)),
    "sdpa-mem-efficient": (["sdpa-mem-efficient"], ("attention-kernel",)),
    "sdpa-mem-efficient-no-dropout": ({"tricks": ["sdpa-mem-efficient"], **NO_DROPOUT}, ("attention-kernel",)),
    "sdpa-math": (["sdpa-math"], ()),
    "sdpa-math-no-dropout": ({"tricks": ["sdpa-math"], **NO_DROPOUT}, ()),
    "fp8-matmul": (["fp8-matmul"], ("autocast-device", "device-properties")),
    "fp8-matmul-bf16": (["fp8-matmul", "amp-bf16"], ("autocast-device", "device-properties")),
    "cuda-graphs": (["cuda-graphs"], ("graph-capture",)),
    "checkpointing": (["checkpointing"], ()),
    "grad-accumulation": (["grad-accumulation"], ()),
    "jit-fusion": (["jit-fusion"], ()),
    "fused-optimizer": (["fused-optimizer"], ()),
    "torch-compile": (["torch-compile"], ("compiled-kernels",)),
}


def stood_in(engine, side):
    """The stand-ins side `side` went through, as a set."""
    return set(engine.ok(("stood_in",), op="stood_in", side=side)["stood_in"])


def rehearse(engine, side, optional=()):
    """Warms `side` up (one step), times a window of two, probes two steps and breaks one down,
    checking the replies a rehearsal gives: the host's clock, the stand-in allocator's reserved
    bytes at least its allocated; returns the probe, or None where a side in `optional` was found
    not applicable in its warm-up (noted)."""
    reply = engine.request(op="warm_up", side=side, steps=1)
    if side in optional and "not_applicable" in reply:
        print(f"note: {side} not rehearsed: {reply['not_applicable']}", flush=True)
        return None
    check(set(reply) == {"ok", "compile_s"}, f"as-if: warm_up {side}: {reply}")
    engine.ok(WINDOW_KEYS, op="window", side=side, steps=2)
    keys = ("peak_allocated_bytes", "peak_reserved_bytes", "peak_rss_bytes", "samples")
    probe = engine.ok(keys, op="probe", side=side, steps=2)
    allocated, reserved = probe["peak_allocated_bytes"], probe["peak_reserved_bytes"]
    check(isinstance(allocated, int) and allocated > 0, f"as-if: probe {side}: {probe}")
    check(isinstance(reserved, int) and reserved >= allocated, f"as-if: probe {side}: reserved under allocated {probe}")
    breakdown = engine.ok(("clock", "steps", "phases", "samples_per_s"), op="breakdown", side=side, steps=1)
    phases = [p["phase"] for p in breakdown["phases"]]
    check(breakdown["clock"] == "host", f"as-if: breakdown {side}: the clock of a stood-in CUDA event: {breakdown}")
    if side == "cuda-graphs":
        expected = ["batch-wait", "host-to-device", "metrics", "graph-replay"]
        check(phases == expected, f"as-if: breakdown {side}: phases {phases}, expected {expected}")
    return probe


def check_as_if_facts(side, tricks, facts):
    """What inspect says about a side of a rehearsal right after its own requests: the switches
    it set (TF32 of matmuls and cuDNN, cuDNN's autotuner), its autocast and scaler, its captured
    step, its loader's pageable memory, the allocator's mode recorded off."""
    tricks = tricks.get("tricks", []) if isinstance(tricks, dict) else tricks
    switches = (facts["matmul_tf32"], facts["cudnn_tf32"], facts["cudnn_benchmark"])
    expected = ("tf32" in tricks, side != "strict-fp32", "cudnn-benchmark" in tricks)
    check(switches == expected, f"as-if: inspect {side}: TF32 (matmul, cuDNN), benchmark {switches}, not {expected}")
    autocast = {"amp": "float16", "amp-bf16": "bfloat16"}
    expected = next((autocast[t] for t in tricks if t in autocast), None)
    check(facts["autocast"] == expected, f"as-if: inspect {side}: autocast {facts['autocast']}, expected {expected}")
    check(facts["grad_scaler"] == ("amp" in tricks), f"as-if: inspect {side}: grad_scaler {facts['grad_scaler']}")
    check(facts["cuda_graph"] == ("cuda-graphs" in tricks), f"as-if: inspect {side}: cuda_graph {facts['cuda_graph']}")
    check(facts["expandable_segments"] is False, f"as-if: inspect {side}: expandable_segments {facts}")
    check(facts["loader"] is None or not facts["loader"]["pinned"], f"as-if: inspect {side}: pinned {facts['loader']}")
    check(facts["anomaly"] == (side == "debug-on"), f"as-if: inspect {side}: anomaly {facts['anomaly']}")


def check_rehearsal(engine, name, sides, optional=()):
    """Builds every side of a rehearsal's `sides` ({side: (tricks, stand-ins its tricks add)}),
    rehearses each and checks what inspect says; then `held` twice, each with the stand-in
    allocator's cache emptied (reserved back at allocated), `memory` as on a CPU, and each side's
    stand-ins: those every side goes through and its tricks' own, no others. Returns
    the sides rehearsed."""
    check(stood_in(engine, "reference") == PROCESS_STAND_INS, f"{name}: the process's stand-ins before any request")
    built(engine, sides)
    rehearsed = []
    for side, (tricks, _) in sides.items():
        if rehearse(engine, side, optional) is None:
            continue
        rehearsed.append(side)
        check_as_if_facts(side, tricks, engine.ok(INSPECT_KEYS, op="inspect", side=side))
    keys = ("peak_allocated_bytes", "peak_reserved_bytes", "peak_rss_bytes")
    for _ in range(2):
        held = engine.ok(keys, op="held")
        allocated, reserved = held["peak_allocated_bytes"], held["peak_reserved_bytes"]
        check(0 <= reserved - allocated < 1 << 20, f"{name}: held after emptying the cache: {held}")
    memory = engine.ok(keys, op="memory")
    check(memory["peak_allocated_bytes"] is None and memory["peak_reserved_bytes"] is None, f"{name}: memory {memory}")
    for side in rehearsed:
        expected = EVERY_SIDE_STAND_INS | set(sides[side][1])
        got = stood_in(engine, side)
        check(got == expected, f"{name}: {side} stood in for {sorted(got)}, expected {sorted(expected)}")
    return rehearsed


def case_sides(sides):
    """The `sides` of write_case from a rehearsal's {side: (tricks, stand-ins)}."""
    return {side: tricks for side, (tricks, _) in sides.items()}


def check_as_if_resnet(root):
    """The ResNet rehearsed as on an H100 (sm90): every CUDA trick applies and runs on the CPU,
    each side through the stand-ins its tricks need and no others."""
    directory = write_case(os.path.join(root, "as-if-resnet"), RESNET, case_sides(AS_IF_RESNET), as_if_cuda=SM90)
    engine = Engine(directory)
    try:
        check_ready(engine)
        check_rehearsal(engine, "as-if-resnet", AS_IF_RESNET)
        check(engine.finish() == 0, "as-if-resnet: quit did not exit 0")
    finally:
        engine.close()


def check_as_if_gpt(root):
    """The GPT (with dropout, and without on the "-no-dropout" sides) rehearsed as on an H100: the
    SDPA backends with no CPU kernel computed by the math backend, FlashAttention run as forced
    where it has one; the fp8 linears; torch-compile where inductor builds here."""
    directory = write_case(
        os.path.join(root, "as-if-gpt"), {**GPT, "dropout": 0.1}, case_sides(AS_IF_GPT), as_if_cuda=SM90
    )
    engine = Engine(directory, env={"TORCHINDUCTOR_VEC_ISA_OK": "1"})
    try:
        check_ready(engine)
        rehearsed = check_rehearsal(engine, "as-if-gpt", AS_IF_GPT, optional=("torch-compile",))
        math_kernel, flash_kernel = (
            "aten::_scaled_dot_product_attention_math",
            "aten::_scaled_dot_product_flash_attention_for_cpu",
        )
        for side, backend, kernel in (
            ("sdpa-cudnn", "CUDNN_ATTENTION", math_kernel),
            ("sdpa-mem-efficient-no-dropout", "EFFICIENT_ATTENTION", math_kernel),
            ("sdpa-flash", "FLASH_ATTENTION", math_kernel),
            ("sdpa-flash-no-dropout", "FLASH_ATTENTION", flash_kernel),
        ):
            ops = engine.ok(("ops",), op="profile", side=side, steps=1)["ops"]
            check(kernel in ops, f"as-if: {side}'s profile lacks {kernel}: {ops}")
            facts = engine.ok(INSPECT_KEYS, op="inspect", side=side)
            check(facts["sdpa_backend"] == backend, f"as-if: inspect {side}: sdpa_backend {facts['sdpa_backend']}")
        for side in ("fp8-matmul", "fp8-matmul-bf16"):
            facts = engine.ok(INSPECT_KEYS, op="inspect", side=side)
            fp8 = facts["fp8_linears"]
            check(fp8 == 4 * GPT["layers"], f"as-if: inspect {side}: fp8_linears {fp8}")
        if "torch-compile" in rehearsed:
            facts = engine.ok(INSPECT_KEYS, op="inspect", side="torch-compile")
            check(facts["compiled"], f"as-if: inspect torch-compile: compiled {facts['compiled']}")
        check(engine.finish() == 0, "as-if-gpt: quit did not exit 0")
    finally:
        engine.close()


def check_as_if_ampere(root):
    """A rehearsal as on an A100 (sm80), its memory budget capped and its allocator's segments
    expandable on every side: fp8-matmul is not applicable (capability 8.0 < 8.9), TF32 is; the
    cap and the allocator's mode are stood in for, and the mode reads back from the record. On
    sm75 (in this process, through settings_for) TF32, its strict-fp32 reference and bfloat16
    are not applicable, float16 autocast is."""
    sides = {
        "reference": ["expandable-segments"],
        "tf32": ["tf32", "expandable-segments"],
        "fp8-matmul": ["fp8-matmul", "expandable-segments"],
    }
    directory = write_case(
        os.path.join(root, "as-if-ampere"), GPT, sides, as_if_cuda=SM80, memory_budget_bytes=20 << 30
    )
    engine = Engine(directory)
    try:
        check_ready(engine)
        process = PROCESS_STAND_INS | {"allocator-cap", "allocator-settings", "device-properties"}
        got = stood_in(engine, "reference")
        check(got == process, f"as-if-ampere: the process stood in for {sorted(got)}, expected {sorted(process)}")
        fp8 = "fp8-matmul: fp8 tensor-core matmuls (torch._scaled_mm) need compute capability 8.9"
        not_applicable(engine, "fp8-matmul", fp8)
        built(engine, ["reference", "tf32"])
        for side in ("reference", "tf32"):
            engine.ok(("ok", "compile_s"), op="warm_up", side=side, steps=1)
            facts = engine.ok(INSPECT_KEYS, op="inspect", side=side)
            check(facts["expandable_segments"] is True, f"as-if-ampere: inspect {side}: {facts['expandable_segments']}")
            check(facts["matmul_tf32"] == (side == "tf32"), f"as-if-ampere: inspect {side}: {facts['matmul_tf32']}")
        check(engine.finish() == 0, "as-if-ampere: quit did not exit 0")
    finally:
        engine.close()
    case = pytorch_engine.read_case(directory)
    device = engine_device.make_device(case.device, engine_device.AsIfCuda("sm75", (7, 5), 16 << 30), lambda: 0)
    spec = case.sides["reference"]
    for tricks, reference_for, contains in (
        (("tf32",), None, "tf32: TF32 needs compute capability 8.0 or newer"),
        ((), "tf32", "tf32's strict-fp32 reference: TF32 needs compute capability 8.0 or newer"),
        (("amp-bf16",), None, "amp-bf16: this GPU does not support bfloat16"),
    ):
        try:
            side = dataclasses.replace(spec, tricks=tricks, reference_for=reference_for)
            pytorch_engine.settings_for(case, side, device)
            raise CheckFailed(f"sm75: {tricks} {reference_for} applied")
        except pytorch_engine.NotApplicable as e:
            check(contains in str(e), f"sm75: {e}")
    amp = pytorch_engine.settings_for(case, dataclasses.replace(spec, tricks=("amp",)), device)
    check(amp.autocast == torch.float16 and amp.grad_scaler, f"sm75: amp {amp}")


def check_as_if_capture(root):
    """The memory of a captured step, rehearsed in this process: the capture's peaks are followed
    (the live bytes and what the capture step raised them by) and a probe reports at least them,
    field by field; `held` empties the stand-in allocator's cache, its reserved falling from the
    probe's peak to what is allocated; a side first stepped by its probe (whose profiler the
    capture cannot nest in) is probed all the same."""
    sides = {"captured": ["cuda-graphs"], "probed-first": ["cuda-graphs"]}
    case = pytorch_engine.read_case(write_case(os.path.join(root, "as-if-capture"), RESNET, sides, as_if_cuda=SM90))
    engine = pytorch_engine.Engine(case)
    # As the engine's start does: one thread, as the case says, so that this process's steps are
    # as quick as an engine's on a busy machine.
    pytorch_engine.process_wide(case, engine.device)
    engine.device.warm_libraries()

    def request(**fields):
        reply, _ = engine.handle(json.dumps(fields))
        check("error" not in reply and "not_applicable" not in reply, f"as-if capture: {fields}: {reply}")
        return reply

    request(op="build", side="captured")
    request(op="warm_up", side="captured", steps=1)
    side = engine.sides["captured"]
    allocated, reserved = side.capture_peaks
    live = request(op="held")["peak_allocated_bytes"]
    check(isinstance(allocated, int) and allocated > live, f"as-if capture: peaks {side.capture_peaks}, live {live}")
    check(reserved >= allocated, f"as-if capture: peaks {side.capture_peaks}")
    probe = request(op="probe", side="captured", steps=2)
    own = (probe["peak_allocated_bytes"], probe["peak_reserved_bytes"])
    check(own[0] >= allocated and own[1] >= reserved, f"as-if capture: probe {probe} under {side.capture_peaks}")
    side.capture_peaks = (own[0] + 1000, None)
    probe = request(op="probe", side="captured", steps=2)
    check(probe["peak_allocated_bytes"] >= own[0] + 1000, f"as-if capture: probe {probe} left the capture's peak out")
    held = request(op="held")
    emptied = (held["peak_allocated_bytes"], held["peak_reserved_bytes"])
    check(emptied[0] == emptied[1] < own[1], f"as-if capture: held {held} after a probe of {own}")
    request(op="build", side="probed-first")
    probe = request(op="probe", side="probed-first", steps=2)
    check(isinstance(probe["peak_allocated_bytes"], int), f"as-if capture: probe of an uncaptured side {probe}")
    names = request(op="stood_in", side="probed-first")["stood_in"]
    check("graph-capture" in names, f"as-if capture: the side captured in its probe stood in for {names}")
    for built_side in engine.sides.values():
        built_side.loader.close()


def check_loader(root):
    """The data pipeline: host crops as the zero-padded window they stand for, device crops each
    one of those, batches as their schedule says, image files decoded (once under packed-dataset)
    to the pixels they hold, and where Pillow is missing, not applicable."""
    generator = torch.Generator().manual_seed(3)
    image = torch.randint(1, 256, (3, 8, 8), generator=generator, dtype=torch.uint8).numpy()
    padded = np.pad(image, ((0, 0), (4, 4), (4, 4)))
    crops = {}
    for dx in range(9):
        for dy in range(9):
            for flip in (0, 1):
                out = np.empty_like(image)
                engine_loader.crop_and_flip(image, out, dx, dy, flip)
                window = padded[:, dy : dy + 8, dx : dx + 8]
                check(np.array_equal(out, window[:, :, ::-1] if flip else window), f"host crop {dx} {dy} {flip}")
                crops[out.tobytes()] = (dx, dy, flip)
    on_device = engine_loader.random_crop_and_flip(torch.from_numpy(np.stack([image] * 64)))
    drawn = {crops.get(x.numpy().tobytes()) for x in on_device}
    check(None not in drawn and len(drawn) > 20, f"device crops are not all crops of the image: {len(drawn)} kinds")
    directory = os.path.join(root, "loader")
    os.makedirs(directory)
    data = write_data(os.path.join(directory, "data.safetensors"), RESNET, augment=True)
    tensors = parity.read_safetensors(os.path.join(directory, data["file"]))
    images = engine_loader.image_data(tensors, data["file"], BATCHES, True, True, False)
    batch, labels = engine_loader.ImageBatches(images, engine_loader.Pipeline())[1]
    for j, i in enumerate(images.index[1]):
        expected = np.empty_like(images.images[i])
        engine_loader.crop_and_flip(images.images[i], expected, *images.crops[1][j])
        check(np.array_equal(batch[j].numpy(), expected), f"image {j} of batch 1 is not its scheduled crop")
    check(labels.tolist() == images.labels[images.index[1]].tolist(), "batch 1's labels")
    text_data = write_data(os.path.join(directory, "text.safetensors"), GPT, augment=False)
    tensors = parity.read_safetensors(os.path.join(directory, text_data["file"]))
    text = engine_loader.text_data(tensors, text_data["file"], BATCHES, GPT["context"])
    windows = engine_loader.TextBatches(text, engine_loader.Pipeline(zero_copy=True))[2]
    for j, start in enumerate(text.starts[2]):
        expected = text.tokens[start : start + GPT["context"] + 1].tolist()
        check(windows[j].tolist() == expected, f"window {j} of text batch 2 is not the tokens from {start}")
    check_image_files(root)


def check_fp8(root):
    """fp8-matmul's autograd function, run here on the CPU's _scaled_mm: forward is the product of
    the e4m3 operands dequantised, backward that of the e5m2 output gradient with them; the GPT
    gets four fp8 projections per block and still trains."""
    generator = torch.Generator().manual_seed(11)
    x = torch.randn(32, 64, generator=generator, requires_grad=True)
    w = torch.randn(48, 64, generator=generator, requires_grad=True)
    grad = torch.randn(32, 48, generator=generator)
    y = engine_tricks.Fp8Matmul.apply(x, w, torch.float32)
    y.backward(grad)

    def dequantised(t, dtype):
        q, inverse = engine_tricks.quantise(t.detach(), dtype)
        return q.float() * inverse

    e4m3, e5m2 = torch.float8_e4m3fn, torch.float8_e5m2
    xd, wd, gd = dequantised(x, e4m3), dequantised(w, e4m3), dequantised(grad, e5m2)
    for name, got, expected in (("forward", y, xd @ wd.t()), ("grad x", x.grad, gd @ wd), ("grad w", w.grad, gd.t() @ xd)):
        gap = ((got - expected).abs().max() / expected.abs().max()).item()
        check(gap < 1e-5, f"fp8: {name} is {gap:.1e} from the dequantised product")
    check(relative(y.detach().norm().item(), (x @ w.t()).norm().item()) < 0.1, "fp8: forward far from x @ wᵀ")
    model = parity.build_model({**GPT, "layers": 2, "width": 32, "context": 16})
    check(engine_tricks.use_fp8(model, "cpu") == 8, "fp8: a 2-block GPT should get 8 fp8 projections")
    logits = model(torch.randint(GPT["vocab_size"], (4, 16), generator=generator))
    logits.float().sum().backward()
    check(all(p.grad is not None for p in model.parameters()), "fp8: a GPT parameter got no gradient")


def check_convergence_tricks(root):
    """engine_tta's pieces against the arithmetic they stand for: LARS's and LAMB's steps computed
    by hand, the schedules' learning rates (MultiStepLR after LinearLR's warm-up, OneCycleLR's
    momentum cycled, nanoGPT's cosine) step by step, the weight average's warm-up decay, and
    torch.optim.Muon taken for 2-D weights and refused for a convolution's."""
    torch.manual_seed(0)
    w0, g = torch.randn(3, 4, dtype=torch.float64), torch.randn(3, 4, dtype=torch.float64)
    b0, gb = torch.randn(3, dtype=torch.float64), torch.randn(3, dtype=torch.float64)
    w, b = w0.clone().requires_grad_(), b0.clone().requires_grad_()
    w.grad, b.grad = g.clone(), gb.clone()
    lars = engine_tta.Lars([w, b], lr=0.5, momentum=0.9, weight_decay=1e-3, trust_coefficient=0.01, exclude_1d=True)
    lars.step()
    ratio = 0.01 * w0.norm() / (g.norm() + 1e-3 * w0.norm())
    check(torch.allclose(w.detach(), w0 - 0.5 * ratio * (g + 1e-3 * w0), rtol=1e-12), "lars: the layer's step")
    check(torch.allclose(b.detach(), b0 - 0.5 * gb, rtol=1e-12), "lars: a 1-d parameter's plain step")
    w, b = w0.clone().requires_grad_(), b0.clone().requires_grad_()
    w.grad, b.grad = g.clone(), gb.clone()
    lamb = engine_tta.Lamb([w, b], lr=0.1, betas=(0.9, 0.999), eps=1e-6, weight_decay=0.01, exclude_1d=False)
    lamb.step()
    adam = (0.1 * g / 0.1) / ((0.001 * g * g / 0.001).sqrt() + 1e-6)
    update = adam + 0.01 * w0
    check(torch.allclose(w.detach(), w0 - 0.1 * w0.norm() / update.norm() * update, rtol=1e-12), "lamb: step")
    check_schedules()
    module = torch.nn.Linear(2, 2)
    average = engine_tta.WeightAverage(module, every_steps=2, decay_per_step=0.5)
    start = module.weight.detach().clone()
    with torch.no_grad():
        module.weight.add_(1.0)
    average.after_step(module)
    check(torch.equal(average.model.module.weight, start), "ema-weights: updated before every_steps steps")
    average.after_step(module)
    # Update 0 decays by min(0.5², 1/10) = 0.1: 0.1·start + 0.9·(start + 1).
    check(torch.allclose(average.model.module.weight, start + 0.9), "ema-weights: the first update's decay")
    tta = {"schedule": {"kind": "warmup-cosine", "peak_lr": 1e-3}, "optimizer": {"kind": "sgd", "momentum": 0.9,
           "weight_decay": 0.0}, "muon": {"lr_ratio": 2.0, "momentum": 0.95, "weight_decay": 0.1, "ns_steps": 5,
           "parameters": ["0.weight"]}}
    net = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.Linear(4, 2))
    muon, rest = engine_tta.build_optimizers(tta, net, fused=False)[::-1]
    check(isinstance(muon, torch.optim.Muon) and muon.param_groups[0]["lr"] == 2e-3, f"muon: {muon}")
    check(len(rest.param_groups[0]["params"]) == 3, "muon: the rest on the recipe's optimizer")
    conv = torch.nn.Sequential(torch.nn.Conv2d(1, 2, 3))
    try:
        engine_tta.build_optimizers({**tta, "muon": {**tta["muon"], "parameters": ["0.weight"]}}, conv, fused=False)
        raise CheckFailed("muon: a 4-d convolution kernel was accepted")
    except engine_tta.NotApplicable as e:
        check("takes 2-D weight matrices only" in str(e), f"muon on a convolution: {e}")


def check_schedules():
    """The schedulers' learning rates (and 1cycle's momentum) over every step."""
    def rates(schedule, steps, kind="sgd"):
        params = [torch.zeros(1, requires_grad=True)]
        spec = {"kind": "sgd", "momentum": 0.9, "weight_decay": 0.0}
        if kind == "adam":
            spec = {"kind": "adam", "beta1": 0.9, "beta2": 0.99, "eps": 1e-8, "weight_decay": 0.0}
        optimizer = engine_tta.build_optimizer(spec, params, schedule[engine_tta.initial_lr(schedule)], False)
        scheduler = engine_tta.build_scheduler(optimizer, schedule, cycle_momentum=True)
        seen = []
        for _ in range(steps):
            seen.append((optimizer.param_groups[0]["lr"], engine_tta.momentum_of(optimizer)))
            optimizer.step()
            scheduler.step()
        return seen

    steps = {"kind": "multi-step", "lr": 0.4, "milestones": [10, 15], "gamma": 0.1, "warmup_steps": 4,
             "warmup_start_factor": 0.25}
    expected = [0.1 + 0.3 * s / 4 for s in range(4)] + [0.4] * 6 + [0.04] * 5 + [0.004] * 5
    got = [lr for lr, _ in rates(steps, 20)]
    check(all(abs(a - b) < 1e-12 for a, b in zip(got, expected)), f"multi-step with warm-up: {got}")
    cycle = {"kind": "one-cycle", "max_lr": 1.0, "total_steps": 10, "pct_start": 0.3, "div_factor": 25.0,
             "final_div_factor": 1e4, "anneal_strategy": "cos", "base_momentum": 0.85, "max_momentum": 0.95}
    seen = rates(cycle, 10, kind="adam")
    check(abs(seen[0][0] - 0.04) < 1e-12 and abs(seen[2][0] - 1.0) < 1e-12, f"one-cycle's rates: {seen}")
    check(abs(seen[0][1] - 0.95) < 1e-12 and abs(seen[2][1] - 0.85) < 1e-12, f"one-cycle's beta1: {seen}")
    cosine = {"kind": "warmup-cosine", "peak_lr": 1e-3, "min_lr": 1e-4, "warmup_steps": 3, "decay_steps": 9}
    got = [lr for lr, _ in rates(cosine, 12)]
    expected = [engine_tta.nanogpt_lr(cosine, s) for s in range(12)]
    check(all(abs(a - b) < 1e-15 for a, b in zip(got, expected)), f"warm-up and cosine: {got}")
    check(abs(got[0] - 2.5e-4) < 1e-15 and abs(got[-1] - 1e-4) < 1e-15, f"nanoGPT's first and last rates: {got}")


def check_allocator_conf(root):
    """The allocator's mode is explicit on both sides, the user's other keys kept (the cases of
    allocator_settings's test in src/train/mod.rs), and set_expandable_segments writes it into
    both environment variables PyTorch reads."""
    cases = [
        (None, False, "expandable_segments:False"),
        ("", True, "expandable_segments:True"),
        ("expandable_segments:True", False, "expandable_segments:False"),
        (
            "max_split_size_mb:128, expandable_segments : True,roundup_power2_divisions:[256:1,512:2]",
            False,
            "max_split_size_mb:128,roundup_power2_divisions:[256:1,512:2],expandable_segments:False",
        ),
        ("garbage_collection_threshold:0.6,", True, "garbage_collection_threshold:0.6,expandable_segments:True"),
    ]
    for user, expandable, expected in cases:
        got = engine_tricks.allocator_conf(user, expandable)
        check(got == expected, f"allocator_conf({user!r}, {expandable}) is {got!r}, expected {expected!r}")
    names = ("PYTORCH_ALLOC_CONF", "PYTORCH_CUDA_ALLOC_CONF")
    saved = {name: os.environ.pop(name, None) for name in names}
    try:
        os.environ["PYTORCH_CUDA_ALLOC_CONF"] = "max_split_size_mb:64,expandable_segments:True"
        engine_tricks.set_expandable_segments(False)
        got = {name: os.environ.get(name) for name in names}
        check(set(got.values()) == {"max_split_size_mb:64,expandable_segments:False"}, f"environment {got}")
    finally:
        for name, value in saved.items():
            os.environ.pop(name, None)
            if value is not None:
                os.environ[name] = value
        torch._C._accelerator_setAllocatorSettings("expandable_segments:False")


def check_image_files(root):
    """A case of PNG files: packed-dataset decodes them once, the reference every batch, both to
    the pixels written (float64 losses agree); without Pillow the sides are not applicable."""
    try:
        from PIL import Image
    except ImportError:
        print("note: the image-file case not checked: this Python has no Pillow", flush=True)
        return
    generator = torch.Generator().manual_seed(5)
    pixels = torch.randint(256, (IMAGES, 3, 8, 8), generator=generator, dtype=torch.uint8)
    files = []
    for picture in pixels:
        encoded = io.BytesIO()
        Image.fromarray(picture.permute(1, 2, 0).numpy()).save(encoded, format="PNG")
        files.append(encoded.getvalue())
    sides = {"reference": [], **CONTROL, "packed-dataset": ["packed-dataset"], "zero-copy": ["zero-copy"]}
    directory = write_case(os.path.join(root, "image-files"), RESNET, sides, dtype="float64", images=files)
    engine = Engine(directory)
    try:
        check_ready(engine)
        built(engine, sides)
        pairs = [(side, "reference", SAME_ARITHMETIC) for side in ("packed-dataset", "zero-copy")]
        check_agreement(engine, "image-files", list(sides), pairs)
        for side, decoded in (("reference", "every-batch"), ("packed-dataset", "once")):
            loader = engine.ok(INSPECT_KEYS, op="inspect", side=side)["loader"]
            check(loader["decoded"] == decoded, f"inspect {side}: decoded {loader['decoded']}, expected {decoded}")
        check(engine.finish() == 0, "image-files: quit did not exit 0")
    finally:
        engine.close()
    tensors = parity.read_safetensors(os.path.join(directory, "data.safetensors"))
    data = engine_loader.image_data(tensors, "data.safetensors", BATCHES, True, True, True)
    decoded = engine_loader.ImageBatches(data, engine_loader.Pipeline(packed=True)).pixels
    check(np.array_equal(decoded, pixels.numpy()), "packed-dataset decoded other pixels than the files hold")
    saved, sys.modules["PIL"] = sys.modules.get("PIL"), None
    try:
        engine_loader.ImageBatches(data, engine_loader.Pipeline())
        raise CheckFailed("image files were taken without Pillow")
    except engine_loader.Unsupported as e:
        check("Pillow" in str(e), f"without Pillow: {e}")
    finally:
        sys.modules["PIL"] = saved


def error_variant(root, base, name, edit=None, remove=None):
    """A copy of the case directory `base` (hard links), its engine-case.json passed through
    `edit`, the file `remove` removed; returns its path."""
    directory = os.path.join(root, name)
    os.makedirs(directory)
    for file in os.listdir(base):
        if file != "engine-case.json":
            os.link(os.path.join(base, file), os.path.join(directory, file))
    with open(os.path.join(base, "engine-case.json")) as f:
        case = json.load(f)
    if edit is not None:
        edit(case)
    with open(os.path.join(directory, "engine-case.json"), "w") as f:
        json.dump(case, f)
    if remove is not None:
        os.unlink(os.path.join(directory, remove))
    return directory


def set_model_field(key, value):
    """An edit that sets the reference side's model field `key`."""
    return lambda case: case["sides"]["reference"]["model"].update({key: value})


def check_errors(root):
    """Malformed cases: the engine exits with status 2, naming the file and field on stderr,
    before any reply (three processes); more of the validation's messages from read_case and
    process_wide called here, which is what the engine's start runs."""
    base = write_case(os.path.join(root, "errors-base"), RESNET, {"reference": []})
    d = error_variant(root, base, "no-case", remove="engine-case.json")
    cases = [(d, f"{d}/engine-case.json: No such file")]
    d = error_variant(root, base, "bad-format", edit=lambda c: c.update(format=1))
    cases.append((d, f"{d}/engine-case.json: format: expected 3 (the case format this engine reads), got 1"))
    d = error_variant(root, base, "no-weights", remove="weights.safetensors")
    cases.append(
        (d, f"{d}/weights.safetensors: no such file (named by {d}/engine-case.json field sides.reference.weights)")
    )
    d = error_variant(root, base, "as-if-on-cuda", edit=lambda c: c.update(device="cuda", as_if_cuda=SM90))
    cases.append((d, f'{d}/engine-case.json: as_if_cuda: expected null with device "cuda"'))
    processes = []
    for directory, contains in cases:
        command = [sys.executable, str(ENGINE), "--case", directory]
        pipes = dict(stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        processes.append((directory, contains, subprocess.Popen(command, **pipes)))
    messages = [
        (
            set_model_field("blocks_per_stage", "two"),
            'sides.reference.model.blocks_per_stage: expected an integer ≥ 1, got "two"',
        ),
        (
            set_model_field("kind", "vgg"),
            'sides.reference.model.kind: expected one of "cifar-resnet", "gpt", got "vgg"',
        ),
        (lambda c: c.update(colour="red"), "engine-case.json: colour: unknown field"),
        (lambda c: c.update(device="tpu"), 'engine-case.json: device: expected "cpu" or "cuda:N", got "tpu"'),
        (lambda c: c["optimizer"].pop("momentum"), "optimizer.momentum: expected a number in [0.0, inf), got nothing"),
        (
            lambda c: c["sides"]["reference"].update(tricks=["amp", "amp"]),
            "sides.reference.tricks: expected a list of distinct",
        ),
        (
            lambda c: c["sides"]["reference"].update(reference_for="lars"),
            'sides.reference.reference_for: expected null or one of "debug-off", "tf32", "adamw", "batch-norm", '
            '"input-norm"',
        ),
        (lambda c: c["data"].update(batches=BATCHES + 1), f"data.safetensors: no tensor index.{BATCHES}"),
        (lambda c: c["data"].update(kind="video"), 'data.kind: expected one of "images", "text", got "video"'),
        (lambda c: c["data"].pop("augment"), "data.augment: expected true or false, got nothing"),
        (lambda c: c.update(loader_workers=0), "loader_workers: expected an integer ≥ 1, got 0"),
        (
            lambda c: c.update(device="cuda:1", as_if_cuda=SM90),
            'as_if_cuda: expected null with device "cuda:1" (a rehearsal of CUDA runs on "cpu")',
        ),
        (lambda c: c.update(as_if_cuda={**SM90, "sm": 90}), "engine-case.json: as_if_cuda.sm: unknown field"),
        (
            lambda c: c.update(as_if_cuda={**SM90, "capability": [9]}),
            "as_if_cuda.capability: expected [major, minor], two integers ≥ 0, got [9]",
        ),
        (lambda c: c.update(as_if_cuda={**SM90, "memory_bytes": 0}), "as_if_cuda.memory_bytes: expected an integer"),
        (lambda c: c.update(as_if_cuda="sm90"), 'as_if_cuda: expected an object, got "sm90"'),
        (lambda c: c.update(memory_budget_bytes=0), "memory_budget_bytes: expected an integer ≥ 1 or null, got 0"),
        (
            lambda c: c["sides"].update(other={**c["sides"]["reference"], "tricks": ["expandable-segments"]}),
            "expandable-segments holds for the whole process: every side has it or none does",
        ),
    ]
    for index, (edit, contains) in enumerate(messages):
        directory = error_variant(root, base, f"message-{index}", edit=edit)
        try:
            engine = pytorch_engine.Engine(pytorch_engine.read_case(directory))
            pytorch_engine.process_wide(engine.case, engine.device)
            raise CheckFailed(f"{contains}: the case was read without an error")
        except pytorch_engine.CaseError as e:
            check(contains in str(e), f"case error {str(e)!r} lacks {contains!r}")
    for directory, contains, process in processes:
        out, err = process.communicate(timeout=REQUEST_TIMEOUT_S)
        name = os.path.basename(directory)
        check(process.returncode == 2, f"{name}: exit status {process.returncode}, expected 2; stderr:\n{err}")
        check(out == "", f"{name}: wrote to stdout: {out!r}")
        check(contains in err, f"{name}: stderr lacks {contains!r}:\n{err}")


def check_fork_server(root):
    """The fork server's children: each its own process, training exactly as a fresh engine does
    on the same case, two at once; a child whose client is gone ends; the server ends at EOF."""
    case = write_case(os.path.join(root, "forked"), RESNET, {"reference": [], "channels-last": ["channels-last"]})
    fresh = Engine(case)
    try:
        check_ready(fresh)
        built(fresh, ["channels-last"])
        fresh.ok(("ok", "compile_s"), op="warm_up", side="channels-last", steps=2)
        fresh_loss = fresh.ok(("loss",), op="loss", side="channels-last")["loss"]
        fresh.finish()
    finally:
        fresh.close()
    socket_path = os.path.join(root, "engine.sock")
    server = subprocess.Popen(
        [sys.executable, str(ENGINE), "--serve", socket_path],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        serving = json.loads(server.stdout.readline() or "{}")
        check(serving == {"serving": True, "pid": server.pid}, f"fork server began with {serving}")
        first, second = ForkedEngine(socket_path, case), ForkedEngine(socket_path, case)
        for engine in (first, second):
            check_ready(engine)
        pids = {first.pid(), second.pid(), server.pid}
        check(len(pids) == 3, f"forked engines are not processes of their own: {pids}")
        for engine in (first, second):
            built(engine, ["channels-last"])
            engine.ok(("ok", "compile_s"), op="warm_up", side="channels-last", steps=2)
            loss = engine.ok(("loss",), op="loss", side="channels-last")["loss"]
            check(loss == fresh_loss, f"a forked engine's loss {loss} differs from a fresh one's {fresh_loss}")
            timed_window(engine, "channels-last", 1)
            engine.finish()
        gone = subprocess.Popen(["true"])
        gone.wait()
        orphan = ForkedEngine(socket_path, case, client_pid=gone.pid)
        orphan.connection.settimeout(30)
        try:
            lines = orphan.replies.readlines()
        except TimeoutError:
            raise CheckFailed("a forked engine whose client had gone was still running after 30 s") from None
        check(all("ready" in json.loads(line) for line in lines), f"an orphaned engine replied {lines}")
        orphan.close()
        server.stdin.close()
        check(server.wait(timeout=30) == 0, f"fork server exited with {server.returncode} at EOF")
    finally:
        if server.poll() is None:
            server.kill()
            server.wait()


def main():
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="check-engine-") as root:
        try:
            for name, run in [
                ("resnet training: replies, tricks applied, not applicable on a CPU", check_resnet_train),
                ("resnet evaluation: no host reads, no-grad-eval", check_resnet_eval),
                ("resnet float64: the tricks that keep the arithmetic agree", check_resnet_float64),
                ("gpt float64: agreement, SDPA in the profiles, what does not apply", check_gpt),
                ("as if on sm90: the resnet's CUDA tricks rehearsed on the CPU", check_as_if_resnet),
                ("as if on sm90: the gpt's CUDA tricks rehearsed on the CPU", check_as_if_gpt),
                ("as if on sm80 and sm75: what applies, the cap and the allocator's mode", check_as_if_ampere),
                ("as if on sm90: a captured step's memory, the emptied cache", check_as_if_capture),
                ("jit-fusion scripts the dropout-add only where there is dropout", check_fusion_follows_dropout),
                ("the loader: crops, scheduled batches, image files", check_loader),
                ("fp8-matmul's function on the CPU's _scaled_mm", check_fp8),
                ("the convergence tricks' optimizers, schedules and weight average", check_convergence_tricks),
                ("the allocator's mode explicit on both sides, the user's other keys kept", check_allocator_conf),
                ("malformed cases exit 2 naming file and field", check_errors),
                ("the fork server's engines train as fresh ones, and end with their client", check_fork_server),
            ]:
                run(root)
                print(f"ok: {name} ({time.perf_counter() - started:.1f} s)", flush=True)
        except CheckFailed as e:
            print(f"check_engine.py: FAILED: {e}", file=sys.stderr)
            sys.exit(1)
    print(f"check_engine.py: all checks passed in {time.perf_counter() - started:.1f} s")


if __name__ == "__main__":
    main()
