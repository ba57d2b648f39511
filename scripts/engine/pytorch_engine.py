#!/usr/bin/env python3
"""The PyTorch engine: trickbench's reference models trained in plain eager PyTorch, one
training trick applied or not on each side, steps timed in windows on request.

trickbench starts `python pytorch_engine.py --case DIR` and drives it over stdin and stdout, one
JSON object per line each way; it runs the measurement protocol itself (which side goes when, how
many windows) and this process only builds, warms up, times and reports. It needs only torch: the
models and the safetensors reader are those of `scripts/parity/parity.py`, imported, not copied.
Nothing but protocol replies reaches stdout (file descriptor 1 is pointed at stderr at start, so
stray prints, C++ logs and compiler subprocesses land there too).

The case: DIR/engine-case.json
------------------------------
    format         1
    device         "cpu", "cuda" or "cuda:N"
    seed           integer; torch.manual_seed(seed) right after each side is built
    threads        integer ≥ 1: torch.set_num_threads before anything else; null: left as it is
    kind           "train" (training steps) or "eval" (evaluation batches)
    batches        file in DIR holding inputs.K and targets.K for K in 0..steps, cycled
    steps          integer ≥ 1, the number of batches
    learning_rate  number ≥ 0, the constant learning rate of every step
    optimizer      {"kind": "sgd", "momentum", "weight_decay"} or
                   {"kind": "adam" | "adamw", "beta1", "beta2", "eps", "weight_decay"}
    clip_max_norm  number > 0: clip_grad_norm_ to it after backward; null: no clipping
    log_interval   integer ≥ 1: steps between host reads of the metrics under avoid-sync
    dtype          optional, "float32" (default) or "float64": the dtype of the models, the
                   floating-point inputs and the loss (float64 is for checks of arithmetic
                   agreement between two sides; the loss is otherwise computed in float32)
    sides          {name: side}; trickbench writes "reference" and "trick", any names are accepted
      model          {"kind": "cifar-resnet", "blocks_per_stage", "conv_bias"} or
                     {"kind": "gpt", "vocab_size", "context", "layers", "heads", "width", "dropout"}
      weights        file in DIR with the side's initial weights under state_dict names
      tricks         list of trick ids applied on this side
      reference_for  null, or the trick whose "off" side this is where that is not the plain
                     baseline: only "debug-off" (anomaly detection on)

Unknown fields, wrong types, out-of-range values and missing files are errors naming the file
and the field; the engine prints them to stderr and exits with status 2 before replying anything.

The fork server
---------------
Importing torch takes seconds on a small CPU, once per process. `python pytorch_engine.py --serve
SOCKET` imports it once, listens on the Unix socket and writes {"serving": true, "pid": P} on
stdout; each connection gets a forked child, made before this process has run any operator or
started any thread, so each child is as clean as a fresh process with torch imported. The child
reads one hello line,
    {"case": DIR, "stderr": FILE, "client_pid": PID, "data_limit_bytes": int | null}
points its stdout and stderr at FILE, takes the client's RLIMIT_DATA, exits when process PID has
gone, and is then the engine of `--case DIR` on the connection: the ready line, the requests and
the replies below go over the socket. The server ends at EOF on its stdin.

The protocol
------------
On start, after reading the case and the batches, before building anything:
    {"ready": true, "implementation": "pytorch", "version": V, "threads": N, "python": P,
     "pid": the engine's process id}
Then one reply per request, in order:
    {"op": "build", "side": S}             -> {"ok": true} | {"not_applicable": reason}
        The side's model from its spec and weights on the device, its optimizer (train kind) and
        its batches, its tricks applied; then torch.manual_seed(seed).
    {"op": "warm_up", "side": S, "steps": N}   (N ≥ 0)
                                           -> {"ok": true, "compile_s": seconds | null}
        Sets S's process-wide switches and runs N untimed steps (at least 1 under
        torch-compile), then synchronises the device. compile_s (torch-compile only; else null)
        is the wall time of the side's first step and of any step that compiled a new graph.
    {"op": "window", "side": S, "steps": N}    (N ≥ 1)
                                           -> {"samples": int, "seconds": float, "host_reads": int}
        Sets S's switches, synchronises, times N steps with time.perf_counter, synchronises.
        samples: the samples the N steps took, as trickbench counts them: every target
        (targets.numel(): images, or a GPT window's tokens);
        host_reads: the metric reads to the host (.item(), .tolist()) made in the window.
    {"op": "reset_peaks"}                  -> {"ok": true}
        torch.cuda.reset_peak_memory_stats on CUDA; nothing to reset on a CPU (the process's
        peak RSS cannot be reset).
    {"op": "memory"}                       -> {"peak_allocated_bytes": int | null,
                                               "peak_reserved_bytes": int | null,
                                               "peak_rss_bytes": int}
        The device's max_memory_allocated / max_memory_reserved (null on a CPU) and the
        process's peak resident set (ru_maxrss × 1024).
    {"op": "loss", "side": S}              -> {"loss": float | null}
        The side's last training step's loss, read to the host here (null before its first
        step, and for the eval kind; an error if it is not finite, which JSON cannot carry).
    {"op": "inspect", "side": S}           -> facts about the side, for checks:
        "model", "dtype"; "memory_format" of its 4-d weights, "activation_format" of its
        convolutions' outputs (on batch 0, in eval mode under no_grad) and "input_format" of
        batch 0: "channels_last" | "contiguous" | "strided" | "mixed" | null (nothing 4-d);
        "conv_bias" (ResNet, else null); "attention": "written-out" | "sdpa" (GPT, else null);
        "sdpa_backend": the forced backend's name | null; "optimizer": {"class", "fused",
        "foreach"} from its defaults | null (eval); "grads_after_zero_grad": "none" | "tensors" |
        "mixed" (it runs the side's zero_grad: harmless, every step starts with it) | null;
        "metrics": "every-step" | "every-log-interval" | null; "eval_graph": whether the last
        evaluation batch recorded an autograd graph | null; "autocast": a dtype name | null;
        "grad_scaler", "compiled" (booleans); "steps_done"; and the process-wide switches as set
        now, by the last warm_up, window or profile of any side: "anomaly", "cudnn_benchmark",
        "matmul_tf32".
    {"op": "profile", "side": S, "steps": N}   (N ≥ 1)
                                           -> {"ops": [sorted aten:: operator names]}
        A window of N steps run under torch.profiler, for checks of which kernels a side calls.
    {"op": "quit"}                         -> {"ok": true}, then exit 0 (EOF on stdin: exit 0).
A request that fails (not JSON, unknown op or field, unknown or unbuilt side, a torch error)
gets {"error": message} and the engine keeps serving. Once a side is found not applicable (at
build, or when torch.compile or a forced attention backend fails in its first steps), every
later request on it gets the same {"not_applicable": reason}.

The step
--------
Train: optimizer.zero_grad(set_to_none=False); forward; mean cross-entropy on the logits
reshaped (-1, classes) in float32 (the case's dtype if float64); backward; optional
clip_grad_norm_; optimizer.step() (torch.optim.SGD, Adam or AdamW with PyTorch's default
foreach/fused choice); then the loss and the count of correct predictions read on the host with
.item() (2 host reads a step). Eval: model.eval(), forward with autograd recording, correct
count summed on the device (no host reads). Baseline flags, set once at start:
torch.backends.cuda.matmul.allow_tf32 False, torch.backends.cudnn.allow_tf32 True,
torch.backends.cudnn.benchmark False, anomaly detection off.

Process-wide switches, set before each warm_up, window and profile of a side because both sides
alternate in one process: anomaly detection, cudnn.benchmark, matmul TF32, and the
scaled_dot_product_attention backend (a sdpa_kernel context around the side's steps). Everything
else is the side's own (layout, optimizer, autocast, metrics).

The tricks
----------
    debug-off           the baseline; its reference side (reference_for "debug-off") runs with
                        torch.autograd.set_detect_anomaly(True)
    channels-last       model and 4-d inputs in torch.channels_last (ResNet)
    zero-grad-none      zero_grad(set_to_none=True) (train)
    avoid-sync          loss and correct count summed on the device, read once per
                        log_interval steps (one .tolist()) (train)
    fused-optimizer     the optimizer built with fused=True (train)
    no-bias-before-bn   nothing at runtime: the side's spec has conv_bias false (ResNet)
    no-grad-eval        evaluation under torch.no_grad() (eval)
    tf32                torch.backends.cuda.matmul.allow_tf32 True (CUDA, compute capability 8+)
    cudnn-benchmark     torch.backends.cudnn.benchmark True (CUDA, ResNet)
    amp                 autocast to float16 around forward and loss, torch.amp.GradScaler (CUDA)
    amp-bf16            autocast to bfloat16, no scaler (CUDA with bf16)
    flash-attention     attention through F.scaled_dot_product_attention(is_causal=True) (GPT)
    sdpa-flash          the FlashAttention backend forced (GPT; on a CPU only without dropout)
    sdpa-cudnn, sdpa-mem-efficient   that one SDPA backend forced (GPT, CUDA)
    sdpa-math           SDPA with only the math backend (GPT)
    torch-compile       torch.compile(model) in its default mode; loss, zero_grad and the
                        optimizer step stay eager
Not yet applied here (reported not applicable, "the PyTorch engine does not apply <id>"): the
loader tricks (loader-workers, pin-memory, zero-copy, gpu-augment, packed-dataset), cuda-graphs,
jit-fusion, checkpointing, grad-accumulation, expandable-segments, fp8-matmul, ddp, and the
time-to-accuracy tricks (one-cycle, max-batch, adamw, lars, lamb, muon, grad-clipping,
input-norm, batch-norm, label-smoothing, ema-weights, flip-tta, bn-momentum).
"""

import argparse
import atexit
import contextlib
import dataclasses
import io
import json
import math
import os
import re
import resource
import select
import signal
import socket
import sys
import threading
import time
from pathlib import Path

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

# Nothing written beside parity.py (no __pycache__ in the tree, or in a results folder holding a copy).
sys.dont_write_bytecode = True
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "parity"))
import parity  # noqa: E402  (found through the path above)

CASE_FILE = "engine-case.json"
CASE_FORMAT = 1
DTYPES = {"float32": torch.float32, "float64": torch.float64}
REFERENCE_FOR = ("debug-off",)


class CaseError(Exception):
    """The case cannot be read: the engine exits with status 2."""


class RequestError(Exception):
    """A request failed: replied as {"error": message}."""


class NotApplicable(Exception):
    """A trick cannot apply here: replied as {"not_applicable": reason}."""


def parity_call(error, function, *args):
    """Calls a parity.py function, turning its fail() (a message on stderr, then exit 2) into
    `error` carrying that message."""
    captured = io.StringIO()
    try:
        with contextlib.redirect_stderr(captured):
            return function(*args)
    except SystemExit:
        raise error(captured.getvalue().strip().removeprefix("parity.py: error: ")) from None


# ---- The case ----


class Fields:
    """The fields of one JSON object of the case file; every error names the file and the
    field's path, and `done` rejects the fields nobody read."""

    def __init__(self, file, value, where):
        if not isinstance(value, dict):
            raise CaseError(f"{file}: {where or 'the case'}: expected an object, got {json.dumps(value)}")
        self.file, self.value, self.where, self.read = file, value, where, set()

    def path(self, key):
        """The dotted path of `key` in the file."""
        return f"{self.where}.{key}" if self.where else key

    def fail(self, key, expected):
        """Raises the error for a field that is not what `expected` says."""
        got = json.dumps(self.value[key]) if key in self.value else "nothing (the field is missing)"
        raise CaseError(f"{self.file}: {self.path(key)}: expected {expected}, got {got}")

    def get(self, key, accept, expected, optional=False):
        """The field `key` when `accept(value)`; a missing optional field reads as None."""
        self.read.add(key)
        if key not in self.value:
            if optional:
                return None
            self.fail(key, expected)
        value = self.value[key]
        if not accept(value):
            self.fail(key, expected)
        return value

    def integer(self, key, minimum, nullable=False):
        """An integer ≥ minimum (or null when nullable)."""
        expected = f"an integer ≥ {minimum}" + (" or null" if nullable else "")
        return self.get(key, lambda v: (v is None and nullable) or (is_integer(v) and v >= minimum), expected)

    def number(self, key, low, high=math.inf, low_open=False, nullable=False):
        """A finite number in [low, high) (low excluded when low_open), or null when nullable."""
        bracket = "(" if low_open else "["
        expected = f"a number in {bracket}{low}, {high})" + (" or null" if nullable else "")

        def accept(v):
            if v is None:
                return nullable
            return is_number(v) and math.isfinite(v) and (v > low if low_open else v >= low) and v < high

        value = self.get(key, accept, expected)
        return None if value is None else float(value)

    def boolean(self, key):
        """true or false."""
        return self.get(key, lambda v: isinstance(v, bool), "true or false")

    def choice(self, key, choices, optional=False):
        """One of the strings `choices`."""
        expected = "one of " + ", ".join(json.dumps(c) for c in choices)
        return self.get(key, lambda v: v in choices, expected, optional)

    def string(self, key):
        """A non-empty string."""
        return self.get(key, lambda v: isinstance(v, str) and v != "", "a non-empty string")

    def file_in(self, key, directory):
        """A file name relative to `directory`; the file must exist."""
        path = os.path.join(directory, self.string(key))
        if not os.path.isfile(path):
            raise CaseError(f"{path}: no such file (named by {self.file} field {self.path(key)})")
        return path

    def object(self, key):
        """A nested object, as Fields."""
        self.read.add(key)
        if key not in self.value:
            self.fail(key, "an object")
        return Fields(self.file, self.value[key], self.path(key))

    def done(self):
        """Rejects the fields no reader asked for."""
        unknown = sorted(set(self.value) - self.read)
        if unknown:
            raise CaseError(f"{self.file}: {self.path(unknown[0])}: unknown field")


def is_integer(value):
    """A JSON integer (not a boolean)."""
    return isinstance(value, int) and not isinstance(value, bool)


def is_number(value):
    """A JSON number (not a boolean)."""
    return isinstance(value, (int, float)) and not isinstance(value, bool)


@dataclasses.dataclass
class SideSpec:
    """One side of the case as the file states it."""

    name: str
    model: dict
    weights: str
    tricks: tuple
    reference_for: str | None


@dataclasses.dataclass
class Case:
    """The validated engine-case.json."""

    device: torch.device
    seed: int
    threads: int | None
    kind: str
    batches: str
    steps: int
    learning_rate: float
    optimizer: dict
    clip_max_norm: float | None
    log_interval: int
    dtype: torch.dtype
    sides: dict


def read_case(directory):
    """Reads and validates DIR/engine-case.json (the files it names must exist)."""
    file = os.path.join(directory, CASE_FILE)
    try:
        with open(file) as f:
            raw = json.load(f)
    except OSError as e:
        raise CaseError(f"{file}: {e.strerror}") from None
    except ValueError as e:
        raise CaseError(f"{file}: not JSON ({e})") from None
    fields = Fields(file, raw, "")
    fields.get("format", lambda v: v == CASE_FORMAT, f"{CASE_FORMAT} (the case format this engine reads)")
    case = Case(
        device=read_device(fields),
        seed=fields.integer("seed", 0),
        threads=fields.integer("threads", 1, nullable=True),
        kind=fields.choice("kind", ("train", "eval")),
        batches=fields.file_in("batches", directory),
        steps=fields.integer("steps", 1),
        learning_rate=fields.number("learning_rate", 0.0),
        optimizer=read_optimizer(fields.object("optimizer")),
        clip_max_norm=fields.number("clip_max_norm", 0.0, low_open=True, nullable=True),
        log_interval=fields.integer("log_interval", 1),
        dtype=DTYPES[fields.choice("dtype", tuple(DTYPES), optional=True) or "float32"],
        sides=read_sides(fields.object("sides"), directory),
    )
    fields.done()
    return case


def read_device(fields):
    """The `device` field: cpu, or a CUDA device this PyTorch can see."""
    name = fields.get(
        "device", lambda v: isinstance(v, str) and re.fullmatch(r"cpu|cuda(:\d+)?", v), '"cpu" or "cuda:N"'
    )
    device = torch.device(name)
    if device.type == "cuda":
        count = torch.cuda.device_count() if torch.cuda.is_available() else 0
        if (device.index or 0) >= count:
            raise CaseError(f"{fields.file}: device: {name!r}, but this PyTorch sees {count} CUDA device(s)")
    return device


def read_optimizer(fields):
    """The `optimizer` object, in torch.optim terms."""
    kind = fields.choice("kind", ("sgd", "adam", "adamw"))
    if kind == "sgd":
        spec = {
            "kind": kind,
            "momentum": fields.number("momentum", 0.0),
            "weight_decay": fields.number("weight_decay", 0.0),
        }
    else:
        spec = {
            "kind": kind,
            "beta1": fields.number("beta1", 0.0, 1.0),
            "beta2": fields.number("beta2", 0.0, 1.0),
            "eps": fields.number("eps", 0.0, low_open=True),
            "weight_decay": fields.number("weight_decay", 0.0),
        }
    fields.done()
    return spec


def read_sides(fields, directory):
    """The `sides` object: at least one named side."""
    if not fields.value:
        raise CaseError(f"{fields.file}: sides: expected at least one side, got {{}}")
    sides = {}
    for name in fields.value:
        side = fields.object(name)
        sides[name] = SideSpec(
            name=name,
            model=read_model(side.object("model")),
            weights=side.file_in("weights", directory),
            tricks=read_tricks(side),
            reference_for=side.get("reference_for", lambda v: v is None or v in REFERENCE_FOR, 'null or "debug-off"'),
        )
        side.done()
    fields.done()
    return sides


def read_model(fields):
    """A side's `model`: the ModelSpec of parity's case.json."""
    kind = fields.choice("kind", ("cifar-resnet", "gpt"))
    if kind == "cifar-resnet":
        spec = {
            "kind": kind,
            "blocks_per_stage": fields.integer("blocks_per_stage", 1),
            "conv_bias": fields.boolean("conv_bias"),
        }
    else:
        spec = {"kind": kind}
        for key in ("vocab_size", "context", "layers", "heads", "width"):
            spec[key] = fields.integer(key, 1)
        spec["dropout"] = fields.number("dropout", 0.0, 1.0)
        if spec["width"] % spec["heads"]:
            fields.fail("width", f"a multiple of heads ({spec['heads']})")
    fields.done()
    return spec


def read_tricks(fields):
    """A side's `tricks`: distinct trick ids."""
    tricks = fields.get(
        "tricks",
        lambda v: isinstance(v, list) and all(isinstance(t, str) and t for t in v) and len(set(v)) == len(v),
        "a list of distinct trick ids",
    )
    return tuple(tricks)


def read_batches(case):
    """The case's batches as CPU tensors, [(inputs, targets)] for K in 0..steps."""
    tensors = parity_call(CaseError, parity.read_safetensors, case.batches)
    batches = []
    for k in range(case.steps):
        names = (f"inputs.{k}", f"targets.{k}")
        missing = [n for n in names if n not in tensors]
        if missing:
            raise CaseError(f"{case.batches}: no tensor {missing[0]} ({CASE_FILE} says steps {case.steps})")
        x, y = (tensors[n] for n in names)
        if y.is_floating_point() or y.dim() == 0 or x.dim() == 0 or x.shape[0] != y.shape[0]:
            raise CaseError(
                f"{case.batches}: {names[1]} must be integer class ids with as many rows as {names[0]}, "
                f"got {y.dtype} {list(y.shape)} beside {list(x.shape)}"
            )
        batches.append((x, y))
    return batches


# ---- The tricks ----


@dataclasses.dataclass
class Settings:
    """What a side's tricks set: its process-wide switches and its own step."""

    anomaly: bool = False
    cudnn_benchmark: bool = False
    matmul_tf32: bool = False
    sdpa_backend: SDPBackend | None = None
    attention: str = "written-out"
    channels_last: bool = False
    set_to_none: bool = False
    avoid_sync: bool = False
    fused: bool = False
    no_grad_eval: bool = False
    autocast: torch.dtype | None = None
    grad_scaler: bool = False
    compiled: bool = False


# Each trick: the conditions it needs, each with the reason it is not applicable without it, and
# the settings it sets.
TRAINING = ("train", "it acts on training steps and this case evaluates")
ATTENTION = ("gpt", "the ResNet has no attention")
TRICKS = {
    "debug-off": ((), {}),
    "channels-last": ((("resnet", "the GPT has no 4-d image activations"),), {"channels_last": True}),
    "zero-grad-none": ((TRAINING,), {"set_to_none": True}),
    "avoid-sync": ((TRAINING,), {"avoid_sync": True}),
    "fused-optimizer": ((TRAINING,), {"fused": True}),
    "no-bias-before-bn": ((("resnet", "the GPT has no convolutions before a BatchNorm"),), {}),
    "no-grad-eval": ((("eval", "it acts on evaluation and this case trains"),), {"no_grad_eval": True}),
    "tf32": (
        (
            ("cuda", "TF32 is a tensor-core format of NVIDIA GPUs"),
            ("ampere", "TF32 needs compute capability 8.0 or newer"),
        ),
        {"matmul_tf32": True},
    ),
    "cudnn-benchmark": (
        (("cuda", "cuDNN's autotuner needs a CUDA GPU"), ("resnet", "the GPT has no convolutions")),
        {"cudnn_benchmark": True},
    ),
    "amp": (
        (("cuda", "CPUs have no fast float16 kernels"),),
        {"autocast": torch.float16, "grad_scaler": True},
    ),
    "amp-bf16": (
        (("cuda", "bfloat16 is emulated on a CPU"), ("bf16", "this GPU does not support bfloat16")),
        {"autocast": torch.bfloat16},
    ),
    "flash-attention": ((ATTENTION,), {"attention": "sdpa"}),
    "sdpa-flash": (
        (ATTENTION, ("cuda-or-no-dropout", "the CPU's flash kernel cannot apply dropout; needs a CUDA GPU")),
        {"attention": "sdpa", "sdpa_backend": SDPBackend.FLASH_ATTENTION},
    ),
    "sdpa-cudnn": (
        (ATTENTION, ("cuda", "needs a CUDA GPU")),
        {"attention": "sdpa", "sdpa_backend": SDPBackend.CUDNN_ATTENTION},
    ),
    "sdpa-mem-efficient": (
        (ATTENTION, ("cuda", "needs a CUDA GPU")),
        {"attention": "sdpa", "sdpa_backend": SDPBackend.EFFICIENT_ATTENTION},
    ),
    "sdpa-math": ((ATTENTION,), {"attention": "sdpa", "sdpa_backend": SDPBackend.MATH}),
    "torch-compile": ((), {"compiled": True}),
}


def meets(condition, case, spec):
    """Whether `condition` (a name in TRICKS) holds for a side of `case` with `spec`."""
    if condition == "cuda":
        return case.device.type == "cuda"
    if condition == "cuda-or-no-dropout":
        return case.device.type == "cuda" or spec.model.get("dropout", 0.0) == 0.0
    if condition == "ampere":
        return torch.cuda.get_device_capability(case.device)[0] >= 8
    if condition == "bf16":
        return torch.cuda.is_bf16_supported()
    if condition in ("train", "eval"):
        return case.kind == condition
    return spec.model["kind"] == {"resnet": "cifar-resnet", "gpt": "gpt"}[condition]


def settings_for(case, spec):
    """The settings of side `spec`; NotApplicable when one of its tricks cannot apply here or two
    of them set the same thing differently."""
    settings, set_by = Settings(), {}
    if spec.reference_for == "debug-off":
        settings.anomaly, set_by["anomaly"] = True, "reference_for debug-off"
    for trick in spec.tricks:
        if trick not in TRICKS:
            raise NotApplicable(f"the PyTorch engine does not apply {trick}")
        needs, sets = TRICKS[trick]
        for condition, reason in needs:
            if not meets(condition, case, spec):
                raise NotApplicable(f"{trick}: {reason}")
        for key, value in sets.items():
            if key in set_by and getattr(settings, key) != value:
                raise NotApplicable(f"{set_by[key]} and {trick} both set {key}, differently")
            setattr(settings, key, value)
            set_by[key] = trick
    if "no-bias-before-bn" in spec.tricks and spec.model["conv_bias"]:
        raise RequestError(f"side {spec.name}: no-bias-before-bn needs model.conv_bias false, not true")
    return settings


class SdpaSelfAttention(parity.CausalSelfAttention):
    """parity's causal self-attention (same weights) through F.scaled_dot_product_attention,
    which dispatches to a fused kernel, instead of the written-out softmax attention."""

    def forward(self, x):
        b, t, c = x.shape
        q, k, v = self.c_attn(x).split(c, dim=2)
        q, k, v = (m.view(b, t, self.heads, c // self.heads).transpose(1, 2) for m in (q, k, v))
        dropout = self.attn_dropout.p if self.training else 0.0
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True, dropout_p=dropout)
        y = y.transpose(1, 2).contiguous().view(b, t, c)
        return self.resid_dropout(self.c_proj(y))


def build_module(model_spec, attention):
    """parity's model for `model_spec`, its attention modules through SDPA when asked."""
    model = parity.build_model(model_spec)
    if attention == "sdpa":
        s = model_spec
        for block in model.transformer.h:
            block.attn = SdpaSelfAttention(s["width"], s["heads"], s["context"], s["dropout"])
    return model


def build_optimizer(spec, params, lr, fused):
    """torch.optim's SGD, Adam or AdamW at constant `lr`, PyTorch choosing foreach/fused unless
    `fused`; NotApplicable when this PyTorch has no fused kernel for the parameters."""
    options = {"fused": True} if fused else {}
    try:
        if spec["kind"] == "sgd":
            momentum, weight_decay = spec["momentum"], spec["weight_decay"]
            return torch.optim.SGD(params, lr=lr, momentum=momentum, weight_decay=weight_decay, **options)
        make = torch.optim.AdamW if spec["kind"] == "adamw" else torch.optim.Adam
        betas = (spec["beta1"], spec["beta2"])
        return make(params, lr=lr, betas=betas, eps=spec["eps"], weight_decay=spec["weight_decay"], **options)
    except RuntimeError as e:
        if fused:
            raise NotApplicable(f"fused-optimizer: {parity.first_line(e)}") from None
        raise


# ---- A side ----


class Metrics:
    """The loss and correct count of training steps and how they reach the host: read every
    step (.item() twice), or summed on the device and read once per log interval (avoid-sync).
    The values read are discarded, as a loop that only logs them would; what matters is the
    synchronisation each read costs."""

    def __init__(self, every_step, log_interval):
        self.every_step, self.log_interval = every_step, log_interval
        self.host_reads, self.pending = 0, 0
        self.loss_sum = self.correct_sum = self.last_loss = None

    def record(self, loss, correct):
        """Records one step's mean loss and correct count (both on the device)."""
        self.last_loss = loss.detach()
        if self.every_step:
            loss.item()
            correct.item()
            self.host_reads += 2
            return
        self.loss_sum = self.last_loss if self.loss_sum is None else self.loss_sum + self.last_loss
        self.correct_sum = correct if self.correct_sum is None else self.correct_sum + correct
        self.pending += 1
        if self.pending == self.log_interval:
            torch.stack([self.loss_sum, self.correct_sum.to(self.loss_sum.dtype)]).tolist()
            self.host_reads += 1
            self.loss_sum = self.correct_sum = None
            self.pending = 0


class Side:
    """One built side: its model (compiled or not), optimizer, batches on the device, and the
    settings its steps and switches follow."""

    def __init__(self, case, spec, batches):
        self.case, self.spec = case, spec
        self.settings = settings_for(case, spec)
        module = build_module(spec.model, self.settings.attention)
        weights = parity_call(RequestError, parity.read_safetensors, spec.weights)
        parity_call(RequestError, parity.load_weights, module, weights, spec.weights)
        module = module.to(device=case.device, dtype=case.dtype)
        if self.settings.channels_last:
            module = module.to(memory_format=torch.channels_last)
        self.module = module.train(case.kind == "train")
        self.params = list(module.parameters())
        self.optimizer = None
        self.scaler = None
        if case.kind == "train":
            self.optimizer = build_optimizer(case.optimizer, self.params, case.learning_rate, self.settings.fused)
            if self.settings.grad_scaler:
                self.scaler = torch.amp.GradScaler("cuda")
        self.model = torch.compile(module) if self.settings.compiled else module
        self.batches = [self.place(x, y) for x, y in batches]
        self.metrics = Metrics(not self.settings.avoid_sync, case.log_interval)
        self.correct_sum = torch.zeros((), dtype=torch.int64, device=case.device)
        self.eval_graph = None
        self.steps_done = 0

    def place(self, x, y):
        """One batch on the device, floating-point inputs in the case's dtype (channels-last:
        4-d inputs in that layout, once, here)."""
        x = x.to(self.case.device, dtype=self.case.dtype) if x.is_floating_point() else x.to(self.case.device)
        if self.settings.channels_last and x.dim() == 4:
            x = x.contiguous(memory_format=torch.channels_last)
        return x, y.to(self.case.device)

    def autocast(self):
        """The side's autocast context around forward and loss (a no-op without amp)."""
        if self.settings.autocast is None:
            return contextlib.nullcontext()
        return torch.autocast(self.case.device.type, dtype=self.settings.autocast)

    @contextlib.contextmanager
    def switched(self):
        """Sets the side's process-wide switches and holds its SDPA backend while inside."""
        torch.autograd.set_detect_anomaly(self.settings.anomaly)
        torch.backends.cudnn.benchmark = self.settings.cudnn_benchmark
        torch.backends.cuda.matmul.allow_tf32 = self.settings.matmul_tf32
        backend = self.settings.sdpa_backend
        with sdpa_kernel([backend]) if backend is not None else contextlib.nullcontext():
            yield

    def synchronize(self):
        """Waits for the device's queued work."""
        if self.case.device.type == "cuda":
            torch.cuda.synchronize(self.case.device)

    def rows(self, steps):
        """Samples the side's next `steps` steps take: their targets, so images or tokens."""
        return sum(self.batches[(self.steps_done + i) % len(self.batches)][1].numel() for i in range(steps))

    def clear_grads(self):
        """The step's zero_grad: in place, or to None under zero-grad-none."""
        self.optimizer.zero_grad(set_to_none=self.settings.set_to_none)

    def step(self):
        """One training step, or one evaluation batch, on the next batch."""
        x, y = self.batches[self.steps_done % len(self.batches)]
        self.steps_done += 1
        if self.optimizer is None:
            self.evaluate(x, y)
        else:
            self.train(x, y)

    def train(self, x, y):
        """The training step on (x, y)."""
        self.clear_grads()
        with self.autocast():
            logits = self.model(x)
            loss_dtype = torch.float64 if self.case.dtype == torch.float64 else torch.float32
            loss = F.cross_entropy(logits.reshape(-1, logits.size(-1)).to(loss_dtype), y.reshape(-1))
        if self.scaler is not None:
            self.scaler.scale(loss).backward()
        else:
            loss.backward()
        if self.case.clip_max_norm is not None:
            if self.scaler is not None:
                self.scaler.unscale_(self.optimizer)
            nn.utils.clip_grad_norm_(self.params, self.case.clip_max_norm)
        if self.scaler is not None:
            self.scaler.step(self.optimizer)
            self.scaler.update()
        else:
            self.optimizer.step()
        self.metrics.record(loss, (logits.argmax(-1) == y).sum())

    def evaluate(self, x, y):
        """One evaluation batch: forward (recording autograd unless no-grad-eval), the correct
        count summed on the device."""
        with torch.no_grad() if self.settings.no_grad_eval else contextlib.nullcontext(), self.autocast():
            logits = self.model(x)
        self.eval_graph = logits.requires_grad
        self.correct_sum += (logits.argmax(-1) == y).sum()


def warm_up(side, steps):
    """Runs `steps` untimed steps (at least one under torch-compile); returns the seconds of the
    steps that compiled a graph, or None when the side is not compiled."""
    compiled = side.settings.compiled
    compile_s = 0.0
    with side.switched():
        for _ in range(max(steps, 1) if compiled else steps):
            first, before = side.steps_done == 0, parity.graphs_compiled() if compiled else 0
            started = time.perf_counter()
            side.step()
            side.synchronize()
            if compiled and (first or parity.graphs_compiled() > before):
                compile_s += time.perf_counter() - started
        side.synchronize()
    return compile_s if compiled else None


def window(side, steps):
    """Times `steps` steps between two device synchronisations."""
    with side.switched():
        samples, reads = side.rows(steps), side.metrics.host_reads
        side.synchronize()
        started = time.perf_counter()
        for _ in range(steps):
            side.step()
        side.synchronize()
        seconds = time.perf_counter() - started
    return {"samples": samples, "seconds": seconds, "host_reads": side.metrics.host_reads - reads}


def profile(side, steps):
    """The aten operators a window of `steps` steps calls, as torch.profiler records them."""
    activities = [torch.profiler.ProfilerActivity.CPU]
    if side.case.device.type == "cuda":
        activities.append(torch.profiler.ProfilerActivity.CUDA)
    with torch.profiler.profile(activities=activities) as prof:
        window(side, steps)
    return sorted({event.name for event in prof.events() if event.name.startswith("aten::")})


def layout(tensors):
    """The memory format the 4-d `tensors` share: channels_last, contiguous, strided (neither),
    mixed, or None when there are none (tensors contiguous in both formats, such as 1×1 images,
    say nothing)."""
    formats = set()
    for t in tensors:
        nchw, nhwc = t.is_contiguous(), t.is_contiguous(memory_format=torch.channels_last)
        if t.dim() == 4 and nchw != nhwc:
            formats.add("contiguous" if nchw else "channels_last")
        elif t.dim() == 4 and not nchw:
            formats.add("strided")
    return formats.pop() if len(formats) == 1 else ("mixed" if formats else None)


def conv_activations(side):
    """The outputs of the side's convolutions on its first batch, in eval mode under no_grad, so
    that no state (BatchNorm statistics, the generator) changes."""
    outputs = []
    convs = [m for m in side.module.modules() if isinstance(m, nn.Conv2d)]
    hooks = [m.register_forward_hook(lambda m, i, o: outputs.append(o)) for m in convs]
    was_training = side.module.training
    try:
        with torch.no_grad():
            side.module.eval()(side.batches[0][0])
    finally:
        side.module.train(was_training)
        for hook in hooks:
            hook.remove()
    return outputs


def inspect(side):
    """Facts about the side and the process-wide switches as set now, for checks."""
    resnet = side.spec.model["kind"] == "cifar-resnet"
    optimizer = None
    grads = None
    if side.optimizer is not None:
        defaults = side.optimizer.defaults
        optimizer = {
            "class": type(side.optimizer).__name__,
            "fused": defaults.get("fused"),
            "foreach": defaults.get("foreach"),
        }
        side.clear_grads()
        present = {p.grad is not None for p in side.params}
        grads = "tensors" if present == {True} else ("none" if present == {False} else "mixed")
    backend, autocast = side.settings.sdpa_backend, side.settings.autocast
    metrics = None
    if side.optimizer is not None:
        metrics = "every-step" if side.metrics.every_step else "every-log-interval"
    return {
        "model": side.spec.model["kind"],
        "dtype": str(side.case.dtype).removeprefix("torch."),
        "memory_format": layout(p for p in side.params if p.dim() == 4),
        "activation_format": layout(conv_activations(side)) if resnet else None,
        "input_format": layout([side.batches[0][0]]),
        "conv_bias": side.spec.model["conv_bias"] if resnet else None,
        "attention": None if resnet else side.settings.attention,
        "sdpa_backend": None if backend is None else backend.name,
        "optimizer": optimizer,
        "grads_after_zero_grad": grads,
        "metrics": metrics,
        "eval_graph": side.eval_graph,
        "autocast": None if autocast is None else str(autocast).removeprefix("torch."),
        "grad_scaler": side.scaler is not None,
        "compiled": side.settings.compiled,
        "steps_done": side.steps_done,
        "anomaly": torch.is_anomaly_enabled(),
        "cudnn_benchmark": torch.backends.cudnn.benchmark,
        "matmul_tf32": torch.backends.cuda.matmul.allow_tf32,
    }


# ---- Serving requests ----


REQUEST_FIELDS = {
    "build": ("side",),
    "warm_up": ("side", "steps"),
    "window": ("side", "steps"),
    "reset_peaks": (),
    "memory": (),
    "loss": ("side",),
    "inspect": ("side",),
    "profile": ("side", "steps"),
    "quit": (),
}
MIN_STEPS = {"warm_up": 0, "window": 1, "profile": 1}


class Engine:
    """The case, its batches on the host, and the sides built so far."""

    def __init__(self, case, batches):
        self.case, self.batches = case, batches
        self.sides = {}
        self.not_applicable = {}

    def handle(self, line):
        """The reply to one request line, and whether to stop after it."""
        try:
            request = json.loads(line)
        except ValueError as e:
            return {"error": f"request {line.strip()[:200]!r} is not JSON ({e})"}, False
        if not isinstance(request, dict):
            return {"error": f"request {line.strip()[:200]!r} is not a JSON object"}, False
        op = request.get("op")
        try:
            return self.dispatch(op, request), op == "quit"
        except NotApplicable as e:
            return {"not_applicable": str(e)}, False
        except RequestError as e:
            return {"error": str(e)}, False
        except Exception as e:  # a torch error in a step: report it and keep serving
            message = str(e).strip()[:2000]
            return {"error": f"{op} on side {request.get('side')}: {type(e).__name__}: {message}"}, False

    def dispatch(self, op, request):
        """Checks the request's fields and runs its op."""
        if op not in REQUEST_FIELDS:
            raise RequestError(f"unknown op {json.dumps(op)} (ops: {', '.join(REQUEST_FIELDS)})")
        unknown = sorted(set(request) - {"op", *REQUEST_FIELDS[op]})
        missing = [key for key in REQUEST_FIELDS[op] if key not in request]
        if unknown or missing:
            problem = f"unknown field {unknown[0]!r}" if unknown else f"missing field {missing[0]!r}"
            raise RequestError(f"{op}: {problem}")
        if "steps" in request:
            steps = request["steps"]
            if not is_integer(steps) or steps < MIN_STEPS[op]:
                expected = f"an integer ≥ {MIN_STEPS[op]}"
                raise RequestError(f"{op}: steps: expected {expected}, got {json.dumps(steps)}")
        if op == "build":
            return self.build(request["side"])
        if op == "reset_peaks":
            if self.case.device.type == "cuda":
                torch.cuda.reset_peak_memory_stats(self.case.device)
            return {"ok": True}
        if op == "memory":
            return self.memory()
        if op == "quit":
            return {"ok": True}
        side = self.side(op, request["side"])
        if op == "warm_up":
            return {"ok": True, "compile_s": self.guarded(side, warm_up, request["steps"])}
        if op == "window":
            return self.guarded(side, window, request["steps"])
        if op == "profile":
            return {"ops": self.guarded(side, profile, request["steps"])}
        if op == "loss":
            return {"loss": self.loss(side)}
        return inspect(side)

    def build(self, name):
        """Builds side `name` (once)."""
        spec = self.spec(name)
        if name in self.not_applicable:
            raise NotApplicable(self.not_applicable[name])
        if name in self.sides:
            raise RequestError(f"build: side {name} is already built")
        try:
            self.sides[name] = Side(self.case, spec, self.batches)
        except NotApplicable as e:
            self.not_applicable[name] = str(e)
            raise
        torch.manual_seed(self.case.seed)
        return {"ok": True}

    def spec(self, name):
        """The case's side `name`."""
        if not isinstance(name, str) or name not in self.case.sides:
            raise RequestError(f"unknown side {json.dumps(name)} (the case has {', '.join(self.case.sides)})")
        return self.case.sides[name]

    def side(self, op, name):
        """The built side `name`."""
        self.spec(name)
        if name in self.not_applicable:
            raise NotApplicable(self.not_applicable[name])
        if name not in self.sides:
            build = json.dumps({"op": "build", "side": name})
            raise RequestError(f"{op}: side {name} is not built (send {build} first)")
        return self.sides[name]

    def guarded(self, side, run, steps):
        """Runs `run(side, steps)`; a torch.compile build failure, or no kernel under a forced
        SDPA backend, makes the side not applicable from then on."""
        try:
            return run(side, steps)
        except parity.compile_failures() as e:
            reason = f"torch-compile: {parity.first_line(e)}"
        except RuntimeError as e:
            if side.settings.sdpa_backend is None or "No available kernel" not in str(e):
                raise
            backend = side.settings.sdpa_backend.name
            reason = f"scaled_dot_product_attention has no {backend} kernel here: {parity.first_line(e)}"
        self.not_applicable[side.spec.name] = reason
        del self.sides[side.spec.name]
        raise NotApplicable(reason)

    def loss(self, side):
        """The side's last training loss on the host, or None."""
        last = side.metrics.last_loss
        if last is None:
            return None
        value = last.item()
        if not math.isfinite(value):
            raise RequestError(f"loss: side {side.spec.name}'s last loss is {value}, which JSON cannot carry")
        return value

    def memory(self):
        """The device's peak memory (CUDA) and the process's peak resident set."""
        rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
        if self.case.device.type != "cuda":
            return {"peak_allocated_bytes": None, "peak_reserved_bytes": None, "peak_rss_bytes": rss}
        return {
            "peak_allocated_bytes": torch.cuda.max_memory_allocated(self.case.device),
            "peak_reserved_bytes": torch.cuda.max_memory_reserved(self.case.device),
            "peak_rss_bytes": rss,
        }


def protocol_stream():
    """The real stdout, kept for protocol replies; file descriptor 1 then points at stderr, so
    that nothing else (prints, C++ logs, compiler subprocesses) can reach the protocol. The
    duplicate is not inherited by child processes."""
    sys.stdout.flush()
    out = os.fdopen(os.dup(1), "w")
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    return out


def serve(engine, requests, out):
    """Answers request lines until quit or EOF."""
    for line in requests:
        if not line.strip():
            continue
        reply, stop = engine.handle(line)
        out.write(json.dumps(reply, allow_nan=False) + "\n")
        out.flush()
        if stop:
            return


def leave(status, out):
    """Exits with `status` once the exit handlers have run and the streams are flushed, skipping
    the interpreter's teardown of torch's modules (one to two seconds once torch._dynamo is
    loaded, which every optimizer loads): the engine holds nothing that needs it."""
    atexit._run_exitfuncs()
    for stream in (out, sys.stderr):
        stream.flush()
    os._exit(status)


def start(case_dir, requests, out):
    """Reads the case in `case_dir`, sets the baseline flags, writes the ready line to `out` and
    answers `requests` until quit or EOF; returns the exit status (2: the case is wrong)."""
    try:
        case = read_case(case_dir)
        if case.threads is not None:
            torch.set_num_threads(case.threads)
        batches = read_batches(case)
    except CaseError as e:
        print(f"pytorch_engine.py: error: {e}", file=sys.stderr)
        return 2
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = True
    torch.backends.cudnn.benchmark = False
    torch.autograd.set_detect_anomaly(False)
    ready = {
        "ready": True,
        "implementation": "pytorch",
        "version": torch.__version__,
        "threads": torch.get_num_threads(),
        "python": sys.version.split()[0],
        "pid": os.getpid(),
    }
    out.write(json.dumps(ready) + "\n")
    out.flush()
    serve(Engine(case, batches), requests, out)
    return 0


def watch_client(pid):
    """Ends this process when process `pid` (the cell process that asked for it) is gone, as a
    directly started engine ends with its parent: checked twice a second from a daemon thread,
    which a forked child may start."""

    def watch():
        while True:
            time.sleep(0.5)
            try:
                os.kill(pid, 0)
            except ProcessLookupError:
                os._exit(3)
            except PermissionError:
                pass

    threading.Thread(target=watch, daemon=True).start()


def forked_engine(conn, server_out):
    """The child of the fork server: its hello names the case, the file its stderr goes to, the
    client's pid and the client's data limit; then it is an engine on the connection."""
    server_out.close()
    requests = conn.makefile("r", encoding="utf-8")
    replies = conn.makefile("w", encoding="utf-8")
    hello = json.loads(requests.readline() or "{}")
    log = os.open(hello["stderr"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    for fd in (1, 2):
        os.dup2(log, fd)
    os.close(log)
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.close(null)
    limit = hello.get("data_limit_bytes")
    if limit is not None:
        resource.setrlimit(resource.RLIMIT_DATA, (limit, limit))
    watch_client(hello["client_pid"])
    return start(hello["case"], requests, replies), replies


def fork_server(path):
    """Listens on the Unix socket `path` and forks an engine for each connection, so that every
    engine starts with torch imported but before any thread, CUDA context or operator exists
    (this process runs none). Writes {"serving": true, "pid": P} once listening; ends at EOF on
    stdin (its owner, trickbench's run, is gone)."""
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(path)
    listener.listen(16)
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    out = protocol_stream()
    out.write(json.dumps({"serving": True, "pid": os.getpid()}) + "\n")
    out.flush()
    while True:
        readable, _, _ = select.select([listener, sys.stdin], [], [])
        if sys.stdin in readable and not os.read(sys.stdin.fileno(), 4096):
            leave(0, out)
        if listener not in readable:
            continue
        conn, _ = listener.accept()
        if os.fork() == 0:
            listener.close()
            signal.signal(signal.SIGCHLD, signal.SIG_DFL)
            status, replies = forked_engine(conn, out)
            leave(status, replies)
        conn.close()


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    mode = parser.add_mutually_exclusive_group(required=True)
    mode.add_argument("--case", help=f"directory holding {CASE_FILE} and the files it names")
    mode.add_argument("--serve", metavar="SOCKET", help="fork an engine for each connection to this Unix socket")
    args = parser.parse_args()
    if args.serve:
        fork_server(args.serve)
    out = protocol_stream()
    leave(start(args.case, sys.stdin, out), out)


if __name__ == "__main__":
    main()
