#!/usr/bin/env python3
"""The PyTorch engine: trickbench's reference models, or the user's own model, trained in plain
eager PyTorch, one training trick applied or not on each side, steps timed in windows on request.

trickbench starts `python pytorch_engine.py --case DIR` and drives it over stdin and stdout, one
JSON object per line each way; it runs the measurement protocol itself (which side goes when, how
many windows) and this process only builds, warms up, times and reports. It needs torch and
numpy: the models and the safetensors reader are those of `scripts/parity/parity.py`, the data
pipeline is `engine_loader.py`, the tricks that change the network or the process are
`engine_tricks.py`, training to a target (the convergence tricks' recipe) is `engine_tta.py`,
the user's model (its module, loss, optimizer and prepared batches) is `user_model.py`'s, and
every call that needs a CUDA device goes through `engine_device.py`, all imported from beside
it.
Nothing but protocol replies reaches stdout (file descriptor 1 is pointed at stderr at start, so
stray prints, C++ logs and compiler subprocesses land there too).

The case: DIR/engine-case.json
------------------------------
    format         3
    device         "cpu", "cuda" or "cuda:N"
    as_if_cuda     optional: null (or absent), or with device "cpu" only, the GPU an as-if-CUDA
                   rehearsal behaves as: {"gpu": a name (for stderr), "capability": [major,
                   minor], "memory_bytes": integer ≥ 1}; see "The as-if-CUDA rehearsal" below
    memory_budget_bytes  optional: null (or absent), or an integer ≥ 1: on a CUDA device the
                   caching allocator is capped at it (set_per_process_memory_fraction of it over
                   the device's memory, at most 1) before anything is allocated; on the as-if
                   device that call is stood in for (nothing is capped); nothing on a CPU
    seed           integer; torch.manual_seed(seed) right after each side is built
    threads        integer ≥ 1: torch.set_num_threads before anything else; null: left as it is
    kind           "train" (training steps) or "eval" (evaluation batches)
    data           what each side's DataLoader assembles its batches from (engine_loader.py):
                   {"kind": "images", "file", "batches", "augment", "standardise", "encoded"}:
                     file: in DIR, holding "labels" int64 [M] and either "images" uint8
                     [M, C, H, W] or, where encoded, "encoded" uint8 (the JPEG/PNG files one
                     after another) and "offsets" int64 [M + 1]; and for K in 0..batches
                     "index.K" int64 [B] (batch K's images) and, where augment, "crop.K" int64
                     [B, 3] (each image's dx, dy in 0..=8 and flip 0|1);
                     standardise: per-channel standardisation with CIFAR-10's statistics, else
                     pixels only scaled to [0, 1]
                   {"kind": "text", "file", "batches", "context"}: file holding "tokens" int32
                     [L] and "starts.K" int64 [B] (batch K's windows of context + 1 tokens)
                   {"kind": "batches", "file", "batches"}: file holding "inputs.K" and
                     "targets.K", tensors of any dtype with the batch's samples as their first
                     dimension (a user model's prepared batches, tiled to the cell's batch
                     size where it differs from the prepared one); the data of user
                     sides, and only of them: every side of such a case is a user side
                   The batches are cycled through.
    loader_workers integer ≥ 1: the DataLoader's worker processes under loader-workers
    accumulation_micro_batches  integer ≥ 2: micro-batches per step under grad-accumulation
    learning_rate  number ≥ 0, the constant learning rate of every step
    optimizer      {"kind": "sgd", "momentum", "weight_decay"} or
                   {"kind": "adam" | "adamw", "beta1", "beta2", "eps", "weight_decay"}; a user
                   side whose file defines optimizer(parameters) trains with that instead (its
                   own learning rate; learning_rate and optimizer are then not used)
    clip_max_norm  number > 0: clip_grad_norm_ to it after backward; null: no clipping
    log_interval   integer ≥ 1: steps between host reads of the metrics under avoid-sync
    time_to_accuracy  optional: null (or absent), or for a cell that trains to a target (a case of one side, kind
                   "train", data holding every planned step's batch in order):
                   {"optimizer": the optimizer of every parameter Muon does not take, as
                     `optimizer` above or {"kind": "lars", "momentum", "weight_decay",
                     "trust_coefficient", "exclude_1d"} or {"kind": "lamb", "beta1", "beta2",
                     "eps", "weight_decay", "exclude_1d"} (replacing `optimizer` and
                     `learning_rate`),
                    "muon": null or {"lr_ratio", "momentum", "weight_decay", "ns_steps",
                     "parameters": the state_dict names of the hidden weights it trains},
                    "schedule": {"kind": "multi-step", "lr", "milestones", "gamma",
                     "warmup_steps", "warmup_start_factor"} | {"kind": "one-cycle", "max_lr",
                     "total_steps", "pct_start", "div_factor", "final_div_factor",
                     "anneal_strategy", "base_momentum", "max_momentum"} | {"kind":
                     "warmup-cosine", "peak_lr", "min_lr", "warmup_steps", "decay_steps"},
                    "label_smoothing": the training loss's, "ema": null or {"every_steps",
                     "decay_per_step"}, "flip_tta": bool,
                    "total_steps", "eval_every_steps", "budget_s" (training seconds), "target",
                    "metric": "test_accuracy" | "validation_loss", "epochs_per_step",
                    "held_out_file": in DIR, holding "inputs.K" and "targets.K" for K in
                     0..held_out_batches (the inputs as the model takes them), "held_out_batches"}
                   (engine_tta.py says how each is applied)
    dtype          optional, "float32" (default) or "float64": the dtype of the models, the
                   floating-point inputs and the loss (float64 is for checks of arithmetic
                   agreement between two sides; the loss is otherwise computed in float32)
    sides          {name: side}; trickbench writes "reference" and "trick", any names are accepted
      model          {"kind": "cifar-resnet", "blocks_per_stage", "conv_bias", "batch_norm",
                     "bn_momentum"} or
                     {"kind": "gpt", "vocab_size", "context", "layers", "heads", "width", "dropout"}
                     or {"kind": "user", "dir"}: a user side, dir the absolute path of the folder
                     `user_model.py prepare` wrote (its model.json is read with the case); the
                     module is built again from model.json's SPEC (a file must still have the
                     SHA-256 recorded there)
      weights        file in DIR with the side's initial weights under state_dict names (a user
                     side's: a copy of the prepared weights.safetensors, loaded strictly)
      tricks         list of trick ids applied on this side
      reference_for  null, or the trick whose "off" side this is where that is not the plain
                     baseline: "debug-off" (anomaly detection on), "tf32" (strict-fp32: TF32
                     forbidden in matmuls and in cuDNN, the baseline keeping cuDNN's on), or in a
                     case that trains to a target "adamw", "batch-norm" or "input-norm" (their
                     "off" recipe, which the optimizer, the model spec and the data already say)

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
On start, after reading the case and its data, before building anything:
    {"ready": true, "implementation": "pytorch", "version": V, "threads": N, "python": P,
     "pid": the engine's process id}
(On a CUDA device and on the as-if device, between reading the case and the ready line, one small
fp32 matmul, one bf16 matmul and one convolution are run and the device synchronised, so that
the libraries' handles and workspaces exist before the first `held`, instead of being counted
in the first side built.)
Then one reply per request, in order:
    {"op": "build", "side": S}             -> {"ok": true} | {"not_applicable": reason}
        The side's model from its spec and weights on the device, its optimizer (train kind) and
        its DataLoader (whose worker processes start here under loader-workers; a user side's
        prepared batches are held in memory instead), its tricks applied; then
        torch.manual_seed(seed). Each step takes the loader's next batch (a user side: batch k
        mod K), which it places on the device inside the step, so the loading is timed with it.
    {"op": "warm_up", "side": S, "steps": N}   (N ≥ 0)
                                           -> {"ok": true, "compile_s": seconds | null}
        Sets S's process-wide switches and runs N untimed steps (at least 1 under
        torch-compile), then synchronises the device. compile_s (torch-compile only; else null)
        is the wall time of the side's first step and of any step that compiled a new graph.
    {"op": "compile_counters", "side": S}  -> {"graph_breaks": int, "graphs": int, "recompiles": int}
                                              | {"graph_breaks": null, "graphs": null, "recompiles": null}
        torch._dynamo's counters of the process for a side under torch-compile (nulls for a side
        not compiled): its graph breaks, the graphs compiled, and the graphs compiled after the
        side's first step (recompiles).
    {"op": "window", "side": S, "steps": N}    (N ≥ 1)
                                           -> {"samples": int, "seconds": float, "host_reads": int,
                                               "minor_faults": int}
        Sets S's switches, synchronises, times N steps with time.perf_counter, synchronises.
        minor_faults: the minor page faults the process took meanwhile (getrusage).
        samples: the samples the N steps took, as trickbench counts them: every target
        (targets.numel(): images, a GPT window's tokens, or a user batch's targets);
        host_reads: the metric reads to the host (.item(), .tolist()) made in the window.
    {"op": "memory"}                       -> {"peak_allocated_bytes": int | null,
                                               "peak_reserved_bytes": int | null,
                                               "peak_rss_bytes": int}
        The peaks since the process started: the device's max_memory_allocated and
        max_memory_reserved (null on a CPU and on the as-if device) and the peak resident set
        (VmHWM).
    {"op": "held"}                         -> the fields of memory, held now rather than peaks:
        the caching allocator's cache emptied first (torch.cuda.empty_cache; nothing on a CPU),
        then the device's memory_allocated and memory_reserved (null on a CPU; on a CPU
        peak_allocated_bytes is the bytes of every live CPU tensor, counted as probe counts
        them; on the as-if device allocated as on a CPU, reserved the stand-in allocator's,
        which its emptied cache leaves at allocated) and the resident set (VmRSS). A process of
        several sides asks before building each, to count a side's peaks without what the sides
        built before it hold: emptied first, reserved is the segments in use, and the blocks
        that earlier sides' steps left cached do not hide a later side's reserved peak.
    {"op": "probe", "side": S, "steps": N}     (N ≥ 2)
                                           -> the fields of memory over N untimed steps of S,
                                              and "samples": the samples they took
        On CUDA the caching allocator's peaks, reset first. On a CPU peak_allocated_bytes is the
        peak of the bytes held by live CPU tensors over the steps after the first: those alive
        before them (the side's parameters, gradients, buffers and optimizer state, and every
        tensor the interpreter reaches), plus the highest the allocations the profiler follows
        (torch.profiler with profile_memory=True) rose above that; reserved is null (on the
        as-if device: allocated as on a CPU, reserved the stand-in allocator's, the highest
        allocated since its cache was last emptied, this peak counted in). The peak resident set
        is reset first where Linux allows it (/proc/self/clear_refs).
        A side whose step is captured (cuda-graphs) reports, field by field, the larger of these
        and the peaks over its capture (reset right before the capture, read right after): a
        replay allocates nothing, the graph's activations living in its private pool, so the
        steps alone would leave them out. (On the as-if device the capture's are the live CPU
        tensors' bytes plus what the capture step raised them by, as probe follows them; not
        followed where the capture ran under a profiler already: a probe or profile that ran the
        side's first step.)
    {"op": "breakdown", "side": S, "steps": N} (N ≥ 1)
                                           -> {"clock": "host" | "cuda-events", "steps": N,
                                               "phases": [{"phase", "mean_ms"}], "samples_per_s"}
        Where a step's time goes: N untimed steps with a stamp where each phase begins (the
        host's clock on a CPU and on the as-if device, CUDA events on the current stream on a
        GPU): batch-wait (the DataLoader's next batch, or the next held batch), host-to-device
        (its placing: copy, augmentation on the device, float, standardisation, dtype, layout),
        forward (and the loss), backward, optimizer (zero_grad, and clipping and the update),
        metrics, graph-replay (cuda-graphs: the copy into the static inputs and the replay, on
        the as-if device the step run eagerly); each phase's mean milliseconds per step, in that
        order, those entered only; samples_per_s over the window with the device synchronised
        at its edges.
    {"op": "train_to_target", "side": S}   -> {"compile_s": seconds | null}, after progress lines
        The case's time_to_accuracy: S trained from its initial weights with the recipe,
        evaluated on the held-out batches first and after every eval_every_steps steps, until
        the metric reaches the target, total_steps are done or the training seconds reach
        budget_s (engine_tta.train_to_target). Each evaluation is written as soon as it is
        made, before the reply, as {"progress": {"step", "epoch", "train_s", "wall_s",
        "metric", "train_loss", "lr", "momentum"}} (lr and momentum: those of the segment's
        last step, momentum only where the schedule cycles it). compile_s: under torch-compile,
        the training seconds of steps that compiled a graph.
    {"op": "stood_in", "side": S}          -> {"stood_in": [sorted stand-in names]}
        The calls needing a CUDA device that the as-if device stood in for (engine_device.py
        names them) in S's build and the requests on it (warm-ups, windows, probes, breakdowns,
        profiles, traces, train_to_target, inspect), and in the process's own (held, memory,
        the libraries' warm-up, the allocator's settings and cap); answered for any side of the
        case, built or not, and empty on a real CUDA device or a plain CPU.
    {"op": "loss", "side": S}              -> {"loss": float | null}
        The side's last training step's loss, read to the host here (null before its first
        step, and for the eval kind; an error if it is not finite, which JSON cannot carry).
    {"op": "inspect", "side": S}           -> facts about the side, for checks:
        "model" (its kind: "cifar-resnet" | "gpt" | "user"), "dtype"; "memory_format" of its 4-d
        weights, "activation_format" of its convolutions' outputs (on batch 0, in eval mode under
        no_grad; ResNet, or a user model with convolutions, else null) and "input_format" of
        batch 0: "channels_last" | "contiguous" | "strided" | "mixed" | null (nothing 4-d);
        "conv_bias" (ResNet, else null); "attention": "written-out" | "sdpa" (GPT; "sdpa" for a
        user model that calls it; else null);
        "sdpa_backend": the forced backend's name | null; "optimizer": {"class", "fused",
        "foreach"} from its defaults | null (eval); "grads_after_zero_grad": "none" | "tensors" |
        "mixed" (it runs the side's zero_grad: harmless, every step starts with it) | null;
        "metrics": "every-step" | "every-log-interval" | null; "eval_graph": whether the last
        evaluation batch recorded an autograd graph | null; "autocast": a dtype name | null;
        "grad_scaler", "compiled" (booleans); "steps_done"; and the process-wide switches as set
        now, by the last warm_up, window or profile of any side: "anomaly", "cudnn_benchmark",
        "matmul_tf32", "cudnn_tf32"; "loader": {"workers", "pinned", "zero_copy", "augment":
        "host" | "device" | null, "decoded": "once" | "every-batch" | null (packed images),
        "gathered": whether batches are index_select-ed from the split} (null on a user side: no
        DataLoader);
        "scripted": the TorchScript functions the blocks call; "checkpointed"; "micro_batches";
        "fp8_linears": how many; "fp8_linears_left": the user's nn.Linear layers fp8-matmul left
        as they are (in or out features not multiples of 16; 0 elsewhere); "cuda_graph": whether the step is captured;
        "expandable_segments": the CUDA allocator's (null on a CPU or before any allocation; on
        the as-if device the mode recorded at start); and on a user side only, "biases_removed":
        the convolution biases no-bias-before-bn took out.
    {"op": "profile", "side": S, "steps": N}   (N ≥ 1)
                                           -> {"ops": [sorted aten:: operator names]}
        A window of N steps run under torch.profiler, for checks of which kernels a side calls.
    {"op": "trace", "side": S, "steps": N, "path": P}   (N ≥ 1, P absolute)
                                           -> {"steps": N}
        One untraced step, then N under torch.profiler (record_shapes, profile_memory), saved to
        P as gzipped Chrome-trace JSON (written beside P, then renamed): `run --trace`.
    {"op": "quit"}                         -> {"ok": true}, then exit 0 (EOF on stdin: exit 0).
A request that fails (not JSON, unknown op or field, unknown or unbuilt side, a torch error)
gets {"error": message} and the engine keeps serving. Once a side is found not applicable (at
build, or when torch.compile or a forced attention backend fails in its first steps), every
later request on it gets the same {"not_applicable": reason}.

The step
--------
Train: the next batch from the side's DataLoader placed on the device (copied, converted to
float and standardised there, as engine_loader.py says; a user side's held batch copied with
.to(device), its floating tensors in the case's dtype, 4-d floating inputs channels_last under
channels-last); optimizer.zero_grad(set_to_none=False); forward; mean cross-entropy on the logits
reshaped (-1, classes) in float32 (the case's dtype if float64; a user side: its file's
loss(output, targets) where it defines one, else that cross-entropy on the output as it comes);
backward; optional clip_grad_norm_; optimizer.step() (torch.optim.SGD, Adam or AdamW with
PyTorch's default foreach/fused choice, or a user file's own); then the loss and the count of
correct predictions (the output's argmax over its last dimension equal to the target; on a user
side only where the output is floating [*targets.shape, C] and the targets are integer, else 0)
read on the host with .item() (2 host reads a step). Eval: model.eval(), forward with autograd
recording, correct count summed on the device (no host reads). Baseline flags, set once at start:
torch.backends.cuda.matmul.allow_tf32 False, torch.backends.cudnn.allow_tf32 True,
torch.backends.cudnn.benchmark False, anomaly detection off.

Process-wide switches, set before each warm_up, window and profile of a side because both sides
alternate in one process: anomaly detection, cudnn.benchmark, matmul TF32, cuDNN's TF32 (off on
tf32's strict-fp32 reference only), and the scaled_dot_product_attention backend (a sdpa_kernel
context around the side's steps). Everything else is the side's own (layout, optimizer,
autocast, metrics).

The tricks
----------
    debug-off           the baseline; its reference side (reference_for "debug-off") runs with
                        torch.autograd.set_detect_anomaly(True)
    channels-last       model and 4-d inputs in torch.channels_last (ResNet)
    zero-grad-none      zero_grad(set_to_none=True) (train)
    avoid-sync          loss and correct count summed on the device, read once per
                        log_interval steps (one .tolist()) (train)
    fused-optimizer     the optimizer built with fused=True (train); a user file's optimizer
                        rebuilt as its class on its parameter groups with its defaults and
                        fused=True (not applicable where the class has no fused variant or
                        refuses it)
    no-bias-before-bn   nothing at runtime: the side's spec has conv_bias false (ResNet); on a
                        user side user_model.remove_bias_before_batch_norm after the weights
                        load
    no-grad-eval        evaluation under torch.no_grad() (eval)
    tf32                torch.backends.cuda.matmul.allow_tf32 True (CUDA, compute capability 8+);
                        its reference (reference_for "tf32", strict-fp32, under the same
                        conditions) sets matmul's and cuDNN's allow_tf32 False
    cudnn-benchmark     torch.backends.cudnn.benchmark True (CUDA, ResNet)
    amp                 autocast to float16 around forward and loss, torch.amp.GradScaler (CUDA)
    amp-bf16            autocast to bfloat16, no scaler (CUDA with bf16)
    flash-attention     attention through F.scaled_dot_product_attention(is_causal=True) (GPT)
    sdpa-flash          the FlashAttention backend forced (GPT; on a CPU only without dropout)
    sdpa-cudnn, sdpa-mem-efficient   that one SDPA backend forced (GPT, CUDA)
    sdpa-math           SDPA with only the math backend (GPT)
    torch-compile       torch.compile(model) in its default mode; loss, zero_grad and the
                        optimizer step stay eager
    loader-workers      DataLoader(num_workers=loader_workers) (a loader: images or text data)
    pin-memory          DataLoader(pin_memory=True), .to(device, non_blocking=True) (a loader,
                        CUDA)
    zero-copy           torch.from_numpy instead of torch.tensor; unaugmented batches gathered
                        from the split held as one tensor (a loader)
    gpu-augment         the batch cropped and flipped on the device (a loader, ResNet)
    packed-dataset      the case's image files decoded once at build (a loader, ResNet, encoded
                        images)
    jit-fusion          the pointwise chains as torch.jit.script functions (engine_tricks.py)
    checkpointing       torch.utils.checkpoint around each segment but the last (train)
    grad-accumulation   accumulation_micro_batches micro-batches per step (train)
    expandable-segments the CUDA caching allocator's expandable segments, for the whole process
                        (every side of the case, or none) (CUDA)
    cuda-graphs         the whole step captured in a torch.cuda.CUDAGraph after three steps on a
                        side stream, then replayed (CUDA, train; Adam's capturable=True)
    fp8-matmul          the GPT's projections through torch._scaled_mm (CUDA, capability 8.9+); a
                        user model's every nn.Linear (exactly that class), its bias added after
On a user side the conditions above on trickbench's own models (ResNet, GPT, dropout, encoded
images) give way to these, checked first, on what model.json's features say the model is built
of (the device's, the kind's and the loader's conditions stay):
    channels-last, cudnn-benchmark   nn.Conv2d modules ("the model has no 2-d convolutions")
    no-bias-before-bn   a convolution with a bias that feeds only a BatchNorm (or, where torch.fx
                        could not trace the model, not applicable with what it said)
    sdpa-flash, sdpa-cudnn, sdpa-mem-efficient, sdpa-math   a training step that calls
                        scaled_dot_product_attention ("the model does not call ..."); the
                        backend is forced around the model's own call, as for the GPT
    fp8-matmul          nn.Linear modules
    grad-accumulation   a batch whose samples split evenly into the micro-batches
    flash-attention, jit-fusion, checkpointing   never: they rewrite trickbench's own models'
                        code (flash-attention the GPT's attention, jit-fusion the reference
                        models' pointwise chains, checkpointing their segments)
and the loader tricks are never applicable there: "the model trains on prepared batches held in
memory: there is no data loader". Every other trick applies as for the reference models.
Cannot be combined here (not applicable, with the reason): cuda-graphs with amp, torch-compile or
checkpointing; checkpointing or fp8-matmul with torch-compile.
    one-cycle, max-batch, adamw, lars, lamb, muon, grad-clipping, input-norm, batch-norm,
    label-smoothing, ema-weights, flip-tta, bn-momentum
                        in a case that trains to a target only, as its time_to_accuracy and
                        model spec say (engine_tta.py); muon where its parameters are all 2-D
Not applied here (reported not applicable, "the PyTorch engine does not apply <id>"): ddp.

The as-if-CUDA rehearsal
------------------------
With as_if_cuda the engine plans and runs every side as on a CUDA device of that capability and
memory, on the CPU: the conditions above read the description ("cuda" holds; compute capability
8+, bf16 support from 8.0, fp8 from 8.9), so every CUDA trick applies exactly where it would on
that GPU, and tensors live on the CPU. Every call that needs a real CUDA device goes through
engine_device.py, whose stand-in does what the CPU can in its place and records its name (the
stood_in request answers them): the synchronisations and the breakdown's CUDA events (the clock
stays "host"), the caching allocator's statistics (allocated the live CPU tensors' bytes as on a
CPU, reserved the highest of them since the cache was last emptied; memory answers as on a
CPU), its empty_cache, settings and cap, the device's properties, the CUDA graph (the same
warm-up, capture and replay run eagerly, Adam without capturable=True), pinned memory and
non-blocking copies, a forced attention backend without a CPU kernel (SDPA's math backend in its
place), autocast's and GradScaler's device type ("cpu", same dtype) and torch.compile's kernels
(inductor's C++).
"""

import argparse
import atexit
import contextlib
import dataclasses
import gc
import gzip
import io
import json
import math
import os
import re
import resource
import select
import shutil
import signal
import socket
import sys
import tempfile
import threading
import time
import warnings
from pathlib import Path

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

# Nothing written beside parity.py (no __pycache__ in the tree, or in a results folder holding a copy).
sys.dont_write_bytecode = True
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "parity"))
import parity  # noqa: E402  (found through the path above)

sys.path.insert(0, str(Path(__file__).resolve().parent))
import engine_device  # noqa: E402
import engine_loader  # noqa: E402
import engine_tricks  # noqa: E402
import engine_tta  # noqa: E402
import user_model  # noqa: E402

CASE_FILE = "engine-case.json"
CASE_FORMAT = 3
DTYPES = {"float32": torch.float32, "float64": torch.float64}
REFERENCE_FOR = ("debug-off", "tf32", "adamw", "batch-norm", "input-norm")
REFERENCE_FOR_EXPECTED = "null or one of " + ", ".join(f'"{r}"' for r in REFERENCE_FOR)
# References whose "off" recipe only a case that trains to a target carries.
TTA_REFERENCE_FOR = ("adamw", "batch-norm", "input-norm")


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

    def integer(self, key, minimum, nullable=False, optional=False):
        """An integer ≥ minimum (or null when nullable; a missing optional field reads as None)."""
        expected = f"an integer ≥ {minimum}" + (" or null" if nullable else "")
        return self.get(
            key, lambda v: (v is None and nullable) or (is_integer(v) and v >= minimum), expected, optional
        )

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
    user: user_model.Prepared | None  # a user side's prepared model, else None


@dataclasses.dataclass
class Case:
    """The validated engine-case.json."""

    device: torch.device  # where tensors live (the CPU under as_if_cuda)
    as_if_cuda: engine_device.AsIfCuda | None
    memory_budget_bytes: int | None
    seed: int
    threads: int | None
    kind: str
    data: object
    loader_workers: int
    accumulation_micro_batches: int
    learning_rate: float
    optimizer: dict
    clip_max_norm: float | None
    log_interval: int
    dtype: torch.dtype
    sides: dict
    tta: dict | None = None  # time_to_accuracy, validated
    held_out: list | None = None  # its held-out batches, (inputs, targets) on the host


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
    device, as_if_cuda = read_device(fields)
    case = Case(
        device=device,
        as_if_cuda=as_if_cuda,
        memory_budget_bytes=fields.integer("memory_budget_bytes", 1, nullable=True, optional=True),
        seed=fields.integer("seed", 0),
        threads=fields.integer("threads", 1, nullable=True),
        kind=fields.choice("kind", ("train", "eval")),
        data=read_data(fields.object("data"), directory),
        loader_workers=fields.integer("loader_workers", 1),
        accumulation_micro_batches=fields.integer("accumulation_micro_batches", 2),
        learning_rate=fields.number("learning_rate", 0.0),
        optimizer=read_optimizer(fields.object("optimizer")),
        clip_max_norm=fields.number("clip_max_norm", 0.0, low_open=True, nullable=True),
        log_interval=fields.integer("log_interval", 1),
        dtype=DTYPES[fields.choice("dtype", tuple(DTYPES), optional=True) or "float32"],
        sides=read_sides(fields.object("sides"), directory),
    )
    if fields.value.get("time_to_accuracy") is not None:
        case.tta, case.held_out = read_tta(fields.object("time_to_accuracy"), directory, case)
    else:
        fields.get("time_to_accuracy", lambda v: v is None, "null or an object", optional=True)
    fields.done()
    users = {side.user is not None for side in case.sides.values()}
    # A user model trains to a target on images; it times its prepared batches.
    if case.tta is None and users != {isinstance(case.data, user_model.BatchData)}:
        raise CaseError(f'{file}: data.kind: "batches" is the data of user models, and every side must then be one')
    return case


def read_tta(fields, directory, case):
    """The `time_to_accuracy` object and its held-out batches."""
    if len(case.sides) != 1 or case.kind != "train":
        raise CaseError(f"{fields.file}: time_to_accuracy: a case that trains to a target has one side, kind train")
    tta = {"optimizer": read_optimizer(fields.object("optimizer"), extended=True)}
    tta["muon"] = read_muon(fields.object("muon")) if fields.value.get("muon") is not None else None
    if tta["muon"] is None:
        fields.get("muon", lambda v: v is None, "null or an object")
    tta["schedule"] = read_schedule(fields.object("schedule"))
    tta["label_smoothing"] = fields.number("label_smoothing", 0.0, 1.0)
    if fields.value.get("ema") is not None:
        ema = fields.object("ema")
        tta["ema"] = {
            "every_steps": ema.integer("every_steps", 1),
            "decay_per_step": ema.number("decay_per_step", 0.0, 1.0),
        }
        ema.done()
    else:
        tta["ema"] = fields.get("ema", lambda v: v is None, "null or an object")
    tta["flip_tta"] = fields.boolean("flip_tta")
    for key in ("total_steps", "eval_every_steps", "held_out_batches"):
        tta[key] = fields.integer(key, 1)
    tta["budget_s"] = fields.number("budget_s", 0.0, low_open=True)
    tta["target"] = fields.number("target", -math.inf)
    tta["metric"] = fields.choice("metric", ("test_accuracy", "validation_loss"))
    tta["epochs_per_step"] = fields.number("epochs_per_step", 0.0, low_open=True)
    path = fields.file_in("held_out_file", directory)
    fields.done()
    scheduled = getattr(case.data, "index", None) or getattr(case.data, "starts", None) or ()
    if len(scheduled) < tta["total_steps"]:
        raise CaseError(
            f"{fields.file}: data.batches: {len(scheduled)}, fewer than time_to_accuracy.total_steps "
            f"({tta['total_steps']}): every step trains on a batch of its own"
        )
    tensors = parity_call(CaseError, parity.read_safetensors, path)
    held_out = []
    for k in range(tta["held_out_batches"]):
        names = (f"inputs.{k}", f"targets.{k}")
        if any(name not in tensors for name in names):
            count = tta["held_out_batches"]
            raise CaseError(f"{path}: no {names[0]} and {names[1]} (time_to_accuracy.held_out_batches is {count})")
        held_out.append((tensors[names[0]], tensors[names[1]]))
    return tta, held_out


def read_muon(fields):
    """time_to_accuracy.muon."""
    muon = {
        "lr_ratio": fields.number("lr_ratio", 0.0, low_open=True),
        "momentum": fields.number("momentum", 0.0, 1.0),
        "weight_decay": fields.number("weight_decay", 0.0),
        "ns_steps": fields.integer("ns_steps", 1),
        "parameters": fields.get(
            "parameters", lambda v: isinstance(v, list) and all(isinstance(n, str) for n in v), "a list of names"
        ),
    }
    fields.done()
    return muon


def read_schedule(fields):
    """time_to_accuracy.schedule, in torch.optim.lr_scheduler's terms."""
    kind = fields.choice("kind", ("multi-step", "one-cycle", "warmup-cosine"))
    schedule = {"kind": kind}
    if kind == "multi-step":
        schedule["lr"] = fields.number("lr", 0.0)
        schedule["milestones"] = fields.get(
            "milestones", lambda v: isinstance(v, list) and all(is_integer(m) and m >= 1 for m in v), "a list of steps"
        )
        schedule["gamma"] = fields.number("gamma", 0.0, low_open=True)
        schedule["warmup_steps"] = fields.integer("warmup_steps", 0)
        schedule["warmup_start_factor"] = float(
            fields.get("warmup_start_factor", lambda v: is_number(v) and 0.0 < v <= 1.0, "a number in (0.0, 1.0]")
        )
        if any(m <= schedule["warmup_steps"] for m in schedule["milestones"]):
            fields.fail("milestones", "steps after the warm-up's")
    elif kind == "one-cycle":
        for key in ("max_lr", "pct_start", "div_factor", "final_div_factor", "base_momentum", "max_momentum"):
            schedule[key] = fields.number(key, 0.0, low_open=True)
        schedule["total_steps"] = fields.integer("total_steps", 1)
        schedule["anneal_strategy"] = fields.choice("anneal_strategy", ("cos", "linear"))
    else:
        for key in ("peak_lr", "min_lr"):
            schedule[key] = fields.number(key, 0.0, low_open=True)
        schedule["warmup_steps"] = fields.integer("warmup_steps", 0)
        schedule["decay_steps"] = fields.integer("decay_steps", 1)
    fields.done()
    return schedule


def read_device(fields):
    """The `device` field (cpu, or a CUDA device this PyTorch can see) and the `as_if_cuda`
    description (None, or engine_device.AsIfCuda with device cpu only)."""
    name = fields.get(
        "device", lambda v: isinstance(v, str) and re.fullmatch(r"cpu|cuda(:\d+)?", v), '"cpu" or "cuda:N"'
    )
    device = torch.device(name)
    as_if_cuda = read_as_if_cuda(fields, name)
    if device.type == "cuda":
        count = engine_device.cuda_device_count()
        if (device.index or 0) >= count:
            raise CaseError(f"{fields.file}: device: {name!r}, but this PyTorch sees {count} CUDA device(s)")
    return device, as_if_cuda


def read_as_if_cuda(fields, device_name):
    """The optional `as_if_cuda` object, which only device "cpu" may have: a rehearsal of a CUDA
    device runs on the CPU."""
    if fields.value.get("as_if_cuda") is None:
        fields.get("as_if_cuda", lambda v: v is None, "null or an object", optional=True)
        return None
    if device_name != "cpu":
        fields.fail("as_if_cuda", f'null with device {json.dumps(device_name)} (a rehearsal of CUDA runs on "cpu")')
    description = fields.object("as_if_cuda")
    gpu = description.string("gpu")
    capability = description.get(
        "capability",
        lambda v: isinstance(v, list) and len(v) == 2 and all(is_integer(c) and c >= 0 for c in v),
        "[major, minor], two integers ≥ 0",
    )
    memory_bytes = description.integer("memory_bytes", 1)
    description.done()
    return engine_device.AsIfCuda(gpu=gpu, capability=tuple(capability), memory_bytes=memory_bytes)


def read_optimizer(fields, extended=False):
    """The `optimizer` object, in torch.optim terms (`extended`: LARS or LAMB, for a case that
    trains to a target)."""
    kind = fields.choice("kind", ("sgd", "adam", "adamw", "lars", "lamb") if extended else ("sgd", "adam", "adamw"))
    if kind == "lars":
        spec = {"kind": kind, "exclude_1d": fields.boolean("exclude_1d")}
        for key in ("momentum", "weight_decay", "trust_coefficient"):
            spec[key] = fields.number(key, 0.0)
    elif kind == "sgd":
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
        if kind == "lamb":
            spec["exclude_1d"] = fields.boolean("exclude_1d")
    fields.done()
    return spec


def read_sides(fields, directory):
    """The `sides` object: at least one named side."""
    if not fields.value:
        raise CaseError(f"{fields.file}: sides: expected at least one side, got {{}}")
    sides = {}
    for name in fields.value:
        side = fields.object(name)
        model = read_model(side.object("model"))
        sides[name] = SideSpec(
            name=name,
            model=model,
            weights=side.file_in("weights", directory),
            tricks=read_tricks(side),
            reference_for=side.get("reference_for", lambda v: v is None or v in REFERENCE_FOR, REFERENCE_FOR_EXPECTED),
            user=read_prepared(fields.file, side.path("model"), model),
        )
        side.done()
    fields.done()
    return sides


def read_model(fields):
    """A side's `model`: the ModelSpec of parity's case.json, or a user model's prepared folder
    (kind "user", read apart so that the reference models' messages stay theirs)."""
    if fields.value.get("kind") == "user":
        fields.read.add("kind")
        spec = {"kind": "user", "dir": fields.get("dir", is_absolute_path, "the absolute path of a prepared folder")}
        fields.done()
        return spec
    kind = fields.choice("kind", ("cifar-resnet", "gpt"))
    if kind == "cifar-resnet":
        spec = {
            "kind": kind,
            "blocks_per_stage": fields.integer("blocks_per_stage", 1),
            "conv_bias": fields.boolean("conv_bias"),
            "batch_norm": fields.boolean("batch_norm"),
            "bn_momentum": fields.number("bn_momentum", 0.0, 1.0),
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


def is_absolute_path(value):
    """An absolute path, as a string."""
    return isinstance(value, str) and os.path.isabs(value)


def read_prepared(file, where, model):
    """The prepared model of a user side (its folder's model.json read), or None."""
    if model["kind"] != "user":
        return None
    try:
        return user_model.load(model["dir"])
    except user_model.ModelError as e:
        raise CaseError(f"{file}: {where}.dir: {e}") from None


def read_tricks(fields):
    """A side's `tricks`: distinct trick ids."""
    tricks = fields.get(
        "tricks",
        lambda v: isinstance(v, list) and all(isinstance(t, str) and t for t in v) and len(set(v)) == len(v),
        "a list of distinct trick ids",
    )
    return tuple(tricks)


def read_data(fields, directory):
    """The `data` object and the tensors of its file, validated (engine_loader's ImageData or
    TextData, or user_model's BatchData: kind "batches", read apart so that the reference
    models' messages stay theirs)."""
    kind = "batches" if fields.value.get("kind") == "batches" else fields.choice("kind", ("images", "text"))
    fields.read.add("kind")
    path = fields.file_in("file", directory)
    batches = fields.integer("batches", 1)
    if kind == "images":
        options = {key: fields.boolean(key) for key in ("augment", "standardise", "encoded")}
    elif kind == "text":
        context = fields.integer("context", 1)
    fields.done()
    tensors = parity_call(CaseError, parity.read_safetensors, path)
    try:
        if kind == "images":
            return engine_loader.image_data(tensors, path, batches, **options)
        if kind == "text":
            return engine_loader.text_data(tensors, path, batches, context)
        return user_model.batch_data(tensors, path, batches)
    except (engine_loader.DataError, user_model.ModelError) as e:
        raise CaseError(str(e)) from None


# ---- The tricks ----


@dataclasses.dataclass
class Settings:
    """What a side's tricks set: its process-wide switches, its loader, its network and its step."""

    anomaly: bool = False
    cudnn_benchmark: bool = False
    matmul_tf32: bool = False
    cudnn_tf32: bool = True
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
    workers: bool = False
    pinned: bool = False
    zero_copy: bool = False
    device_augment: bool = False
    packed: bool = False
    jit_fusion: bool = False
    checkpointing: bool = False
    accumulate: bool = False
    cuda_graphs: bool = False
    fp8: bool = False


# Each trick: the conditions it needs, each with the reason it is not applicable without it, and
# the settings it sets.
TRAINING = ("train", "it acts on training steps and this case evaluates")
ATTENTION = ("gpt", "the ResNet has no attention")
CUDA_GRAPH = ("cuda", "a CUDA graph records GPU kernel launches; a CPU step has none")
LOADER = ("loader", "the model trains on prepared batches held in memory: there is no data loader")
TO_TARGET = ("tta", "it changes how the model trains to a target, and this case times steps")
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
    "loader-workers": ((LOADER,), {"workers": True}),
    "pin-memory": ((LOADER, ("cuda", "pinned memory speeds host-to-GPU copies; there is no GPU")), {"pinned": True}),
    "zero-copy": ((LOADER,), {"zero_copy": True}),
    "gpu-augment": (
        (LOADER, ("resnet", "the GPT reads text windows, which are not augmented")),
        {"device_augment": True},
    ),
    "packed-dataset": (
        (
            LOADER,
            ("resnet", "the GPT reads one text, held in memory as tokens"),
            ("encoded", "the case's images are packed already: there are no image files to decode"),
        ),
        {"packed": True},
    ),
    "jit-fusion": ((), {"jit_fusion": True}),
    "checkpointing": ((TRAINING,), {"checkpointing": True}),
    "grad-accumulation": ((TRAINING,), {"accumulate": True}),
    # Set for the whole process before anything is built (process_wide).
    "expandable-segments": ((("cuda", "expandable segments are a mode of the CUDA caching allocator"),), {}),
    "cuda-graphs": ((CUDA_GRAPH, TRAINING), {"cuda_graphs": True}),
    **{trick: ((TO_TARGET,), {}) for trick in engine_tta.CONVERGENCE_TRICKS},
    # The probed batch: the case's batches are of its size, in a throughput case too.
    "max-batch": ((), {}),
    "fp8-matmul": (
        (
            ("gpt", "the ResNet's work is convolutions; the fp8 linears replace the GPT's projections"),
            ("cuda", "fp8 tensor-core matmuls need a CUDA GPU"),
            ("fp8", "fp8 tensor-core matmuls (torch._scaled_mm) need compute capability 8.9 or newer"),
        ),
        {"fp8": True},
    ),
}
# Tricks the engine cannot combine, with the reason.
CONFLICTS = (
    ("cuda_graphs", "grad_scaler", "GradScaler's step reads whether gradients overflowed on the host"),
    ("cuda_graphs", "compiled", "torch.compile and a hand-captured CUDA graph would both own the step"),
    ("cuda_graphs", "checkpointing", "checkpoint saves the generator's state on the host in forward"),
    ("checkpointing", "compiled", "the engine checkpoints the eager module's segments"),
    ("fp8", "compiled", "the engine's fp8 matmul is an eager autograd function"),
)


# On a user side the conditions on trickbench's own models (MODEL_CONDITIONS) give way to these,
# checked first: what the user's model is built of (model.json's features), and that trickbench
# rewrites only its own models' code.
MODEL_CONDITIONS = ("resnet", "gpt", "cuda-or-no-dropout", "encoded")
CONVOLUTIONS = ("convolutions", "the model has no 2-d convolutions")
SDPA = ("sdpa", "the model does not call scaled_dot_product_attention")
FP8_LINEARS = ("fp8-linears", "no nn.Linear layer has both features multiples of 16, which torch._scaled_mm needs")
USER_TRICKS = {
    "channels-last": (CONVOLUTIONS,),
    "cudnn-benchmark": (CONVOLUTIONS,),
    "no-bias-before-bn": (("bias-before-bn", "the model has no convolution with a bias feeding only a BatchNorm"),),
    "sdpa-flash": (SDPA,),
    "sdpa-cudnn": (SDPA,),
    "sdpa-mem-efficient": (SDPA,),
    "sdpa-math": (SDPA,),
    "flash-attention": (
        (
            "reference-model",
            "it replaces trickbench's GPT's written-out attention; the model's attention is its own code",
        ),
    ),
    "jit-fusion": (
        (
            "reference-model",
            "it scripts the reference models' pointwise chains; trickbench does not rewrite the model's code",
        ),
    ),
    "checkpointing": (("reference-model", "trickbench cannot cut the model's own forward into segments"),),
    "grad-accumulation": (("divisible", "the batch's samples do not split evenly into the micro-batches"),),
    "fp8-matmul": (("linears", "the model has no nn.Linear layers"), FP8_LINEARS),
}


def needs_of(trick, spec):
    """The conditions `trick` needs on side `spec`, with their reasons."""
    needs = TRICKS[trick][0]
    if spec.user is None:
        return needs
    return USER_TRICKS.get(trick, ()) + tuple(need for need in needs if need[0] not in MODEL_CONDITIONS)


# The conditions of USER_TRICKS on the user's model and its batches.
USER_CONDITIONS = ("convolutions", "bias-before-bn", "sdpa", "linears", "fp8-linears", "divisible")


def meets_user(condition, case, spec):
    """Whether a condition of USER_CONDITIONS holds for the user side `spec`."""
    features = spec.user.features
    if condition == "divisible":
        return case.data.inputs[0].shape[0] % case.accumulation_micro_batches == 0
    if condition == "bias-before-bn":
        return features["bias_before_batch_norm"] > 0
    if condition == "sdpa":
        return features["sdpa"]
    if condition == "fp8-linears":
        # A description written before fp8_linears was counted: the build counts them.
        return features.get("fp8_linears", 1) > 0
    return features[condition] > 0


def reason_for(condition, reason, spec):
    """Why a side is not applicable when `condition` fails: `reason`, or where fx could not look
    for biases before a BatchNorm in a user's model, what it said."""
    note = spec.user.features["bias_before_batch_norm_note"] if spec.user is not None else None
    if condition == "bias-before-bn" and note:
        return f"no convolution with a bias feeding only a BatchNorm was found: {note}"
    return reason


def meets(condition, case, spec, device):
    """Whether `condition` (a name in TRICKS or USER_TRICKS) holds for a side of `case` with
    `spec` on `device` (engine_device's: CUDA, real or as-if, or a plain CPU)."""
    if spec.user is not None and condition in USER_CONDITIONS:
        return meets_user(condition, case, spec)
    if condition == "reference-model":
        return spec.user is None
    if condition == "loader":
        return not isinstance(case.data, user_model.BatchData)
    if condition == "cuda":
        return device.cuda
    if condition == "cuda-or-no-dropout":
        return device.cuda or spec.model.get("dropout", 0.0) == 0.0
    if condition == "ampere":
        return device.capability()[0] >= 8
    if condition == "fp8":
        return device.capability() >= (8, 9)
    if condition == "bf16":
        return device.bf16_supported()
    if condition == "encoded":
        return getattr(case.data, "encoded", None) is not None
    if condition in ("train", "eval"):
        return case.kind == condition
    if condition == "tta":
        return case.tta is not None
    return spec.model["kind"] == {"resnet": "cifar-resnet", "gpt": "gpt"}[condition]


def settings_for(case, spec, device):
    """The settings of side `spec` on `device`; NotApplicable when one of its tricks (or the
    reference it is) cannot apply here, two of them set the same thing differently, or the engine
    cannot combine two of them."""
    settings, set_by = Settings(), {}
    if spec.reference_for == "debug-off":
        settings.anomaly, set_by["anomaly"] = True, "reference_for debug-off"
    if spec.reference_for == "tf32":
        for condition, reason in TRICKS["tf32"][0]:
            if not meets(condition, case, spec, device):
                raise NotApplicable(f"tf32's strict-fp32 reference: {reason}")
        settings.matmul_tf32 = settings.cudnn_tf32 = False
        set_by["matmul_tf32"] = set_by["cudnn_tf32"] = "reference_for tf32"
    if spec.reference_for in TTA_REFERENCE_FOR and case.tta is None:
        raise RequestError(f"side {spec.name}: reference_for {spec.reference_for} needs a case with time_to_accuracy")
    for trick in spec.tricks:
        if trick not in TRICKS:
            raise NotApplicable(f"the PyTorch engine does not apply {trick}")
        for condition, reason in needs_of(trick, spec):
            if not meets(condition, case, spec, device):
                raise NotApplicable(f"{trick}: {reason_for(condition, reason, spec)}")
        sets = TRICKS[trick][1]
        for key, value in sets.items():
            if key in set_by and getattr(settings, key) != value:
                raise NotApplicable(f"{set_by[key]} and {trick} both set {key}, differently")
            setattr(settings, key, value)
            set_by[key] = trick
    for first, second, why in CONFLICTS:
        if getattr(settings, first) and getattr(settings, second):
            raise NotApplicable(f"{set_by[first]} with {set_by[second]}: {why}")
    if "no-bias-before-bn" in spec.tricks and spec.model.get("conv_bias"):
        raise RequestError(f"side {spec.name}: no-bias-before-bn needs model.conv_bias false, not true")
    return settings


def applies_attention_dropout(case, spec):
    """Whether the side's training steps apply dropout in attention: the GPT's dropout, or a user
    model's nn.Dropout modules (model.json's features), in a case that trains."""
    if case.kind != "train":
        return False
    if spec.user is not None:
        return bool(spec.user.features.get("dropout"))
    return spec.model.get("dropout", 0.0) > 0.0


class SdpaSelfAttention(parity.CausalSelfAttention):
    """parity's causal self-attention (same weights) through F.scaled_dot_product_attention,
    which dispatches to a fused kernel, instead of the written-out softmax attention."""

    def attend(self, q, k, v):
        dropout = self.attn_dropout.p if self.training else 0.0
        return F.scaled_dot_product_attention(q, k, v, is_causal=True, dropout_p=dropout)


def build_module(model_spec, settings, autocast_device):
    """parity's model for `model_spec`, its attention modules through SDPA, its pointwise chains
    scripted and its projections in fp8 (their output in the dtype of `autocast_device`'s
    autocast) as the side's settings ask."""
    model = parity.build_model(model_spec)
    if settings.attention == "sdpa":
        s = model_spec
        for block in model.transformer.h:
            block.attn = SdpaSelfAttention(s["width"], s["heads"], s["context"], s["dropout"])
    if settings.jit_fusion:
        engine_tricks.fuse_pointwise(model)
    if settings.fp8:
        engine_tricks.use_fp8(model, autocast_device)
    return model


def build_optimizer(spec, params, lr, settings, capturable):
    """torch.optim's SGD, Adam or AdamW at constant `lr`, PyTorch choosing foreach/fused unless
    fused-optimizer asks for fused=True, Adam's capturable=True where `capturable` (cuda-graphs on
    a CUDA device); NotApplicable when this PyTorch has no fused kernel for the parameters."""
    options = {"fused": True} if settings.fused else {}
    try:
        if spec["kind"] == "sgd":
            momentum, weight_decay = spec["momentum"], spec["weight_decay"]
            return torch.optim.SGD(params, lr=lr, momentum=momentum, weight_decay=weight_decay, **options)
        if capturable:
            options["capturable"] = True
        make = torch.optim.AdamW if spec["kind"] == "adamw" else torch.optim.Adam
        betas = (spec["beta1"], spec["beta2"])
        return make(params, lr=lr, betas=betas, eps=spec["eps"], weight_decay=spec["weight_decay"], **options)
    except RuntimeError as e:
        if settings.fused:
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
    """One built side: its model (compiled, checkpointed or not), optimizer, loader, and the
    settings its steps and switches follow, on `device` (engine_device's)."""

    def __init__(self, case, spec, device):
        self.case, self.spec, self.device = case, spec, device
        self.settings = settings = settings_for(case, spec, device)
        needs_autocast_device = settings.autocast is not None or settings.grad_scaler or settings.fp8
        self.autocast_device = device.autocast_device() if needs_autocast_device else None
        self.sdpa_backends = None
        if settings.sdpa_backend is not None:
            self.sdpa_backends = device.sdpa_backends(settings.sdpa_backend, applies_attention_dropout(case, spec))
        self.fp8_linears_left = 0
        module, self.biases_removed = self.network()
        module = module.to(device=case.device, dtype=case.dtype)
        if settings.channels_last:
            module = module.to(memory_format=torch.channels_last)
        self.module = module.train(case.kind == "train")
        self.params = list(module.parameters())
        self.loss_function = spec.user.loss() if spec.user is not None else None
        self.optimizer = None
        self.optimizers = []
        self.scaler = None
        self.label_smoothing = case.tta["label_smoothing"] if case.tta is not None else 0.0
        if case.kind == "train":
            self.optimizers = self.build_optimizers()
            self.optimizer = self.optimizers[0]
            if settings.grad_scaler:
                self.scaler = torch.amp.GradScaler(self.autocast_device)
        self.model = device.compile(module) if settings.compiled else module
        self.forward = engine_tricks.checkpointed(module) if settings.checkpointing else self.model
        self.micro_batches = case.accumulation_micro_batches if settings.accumulate else 1
        self.loader = self.build_loader()
        self.metrics = Metrics(not settings.avoid_sync, case.log_interval)
        self.correct_sum = torch.zeros((), dtype=torch.int64, device=case.device)
        self.graph = None  # the captured step (cuda-graphs), once captured
        self.capture_peaks = (None, None)  # the device's allocated and reserved peaks over the capture
        self.eval_graph = None
        self.steps_done = 0
        # Graphs dynamo had compiled once the side's first step ran (torch-compile).
        self.first_step_graphs = None
        self.marks = None
        # A side training to a target: its schedulers, weight average and held-out evaluation.
        self.recipe = engine_tta.Recipe(self, case.tta, case.held_out) if case.tta is not None else None

    def network(self):
        """The side's module on the CPU with its initial weights, and the biases that
        no-bias-before-bn removed from a user's model (0 on other sides). Under fp8-matmul on a
        user side, notes how many nn.Linear layers stay as they are (fp8_linears_left) and says on
        stderr how many were converted; NotApplicable when none can be."""
        spec, settings = self.spec, self.settings
        if spec.user is None:
            module = build_module(spec.model, settings, self.autocast_device)
            weights = parity_call(RequestError, parity.read_safetensors, spec.weights)
            parity_call(RequestError, parity.load_weights, module, weights, spec.weights)
            return module, 0
        try:
            module = spec.user.build()
            spec.user.load_weights(module, spec.weights)
        except user_model.ModelError as e:
            raise RequestError(f"side {spec.name}: {e}") from None
        removed = 0
        if "no-bias-before-bn" in spec.tricks:
            removed = user_model.remove_bias_before_batch_norm(module)
        if settings.fp8:
            converted, self.fp8_linears_left = engine_tricks.use_fp8_everywhere(module, self.autocast_device)
            if converted == 0:
                raise NotApplicable(f"fp8-matmul: {FP8_LINEARS[1]}")
            print(
                f"fp8-matmul: side {spec.name}: {converted} nn.Linear layers multiply in fp8, "
                f"{self.fp8_linears_left} left as "
                f"they are (in or out features not a multiple of {engine_tricks.SCALED_MM_MULTIPLE})",
                file=sys.stderr,
            )
        return module, removed

    def build_optimizers(self):
        """The side's optimizers: in a case that trains to a target the recipe's
        (engine_tta.build_optimizers: Muon's beside the rest where it has Muon), else the one of
        build_optimizer."""
        if self.case.tta is None:
            return [self.build_optimizer()]
        try:
            return engine_tta.build_optimizers(self.case.tta, self.module, self.settings.fused)
        except engine_tta.NotApplicable as e:
            raise NotApplicable(str(e)) from None
        except engine_tta.TtaError as e:
            raise RequestError(f"side {self.spec.name}: {e}") from None
        except RuntimeError as e:
            if self.settings.fused:
                raise NotApplicable(f"fused-optimizer: {parity.first_line(e)}") from None
            raise

    def build_optimizer(self):
        """The case's optimizer, or on a user side whose file defines optimizer(parameters) that
        one: rebuilt with fused=True under fused-optimizer (NotApplicable where its class has no
        fused variant or refuses it) and capturable=True under cuda-graphs where it has that
        option and the device lets an optimizer be captured (a real CUDA device)."""
        case, settings = self.case, self.settings
        make = self.spec.user.optimizer() if self.spec.user is not None else None
        capturable = settings.cuda_graphs and self.device.optimizer_capturable()
        if make is None:
            return build_optimizer(case.optimizer, self.params, case.learning_rate, settings, capturable)
        optimizer = make(self.params)
        if not isinstance(optimizer, torch.optim.Optimizer):
            got = f"{type(optimizer).__name__}, not a torch.optim.Optimizer"
            raise RequestError(f"side {self.spec.name}: optimizer(parameters) returned {got}")
        name, options = type(optimizer).__name__, {}
        if settings.fused:
            if "fused" not in optimizer.defaults:
                raise NotApplicable(f"fused-optimizer: {name} has no fused variant")
            options["fused"] = True
        if capturable and "capturable" in optimizer.defaults:
            options["capturable"] = True
        try:
            return user_model.rebuilt(optimizer, options)
        except (RuntimeError, ValueError, TypeError) as e:
            if settings.fused:
                raise NotApplicable(f"fused-optimizer: {name}: {parity.first_line(e)}") from None
            raise

    def build_loader(self):
        """The side's DataLoader and the training process's end of it, as its loader tricks ask
        (pinned memory where the device has it; on a user side the prepared batches held in
        memory); NotApplicable where this Python cannot decode the case's image files."""
        s = self.settings
        if isinstance(self.case.data, user_model.BatchData):
            return user_model.BatchLoader(self.case.data, self.case.device, self.case.dtype, s.channels_last)
        pipeline = engine_loader.Pipeline(
            workers=self.case.loader_workers if s.workers else 0,
            pinned=self.device.pinned_memory(s.pinned),
            zero_copy=s.zero_copy,
            device_augment=s.device_augment,
            packed=s.packed,
        )
        try:
            return engine_loader.Loader(self.case.data, pipeline, self.case.device, self.case.dtype, s.channels_last)
        except engine_loader.Unsupported as e:
            raise NotApplicable(str(e)) from None

    def autocast(self):
        """The side's autocast context around forward and loss (a no-op without amp)."""
        if self.settings.autocast is None:
            return contextlib.nullcontext()
        return torch.autocast(self.autocast_device, dtype=self.settings.autocast)

    @contextlib.contextmanager
    def switched(self):
        """Sets the side's process-wide switches and holds its SDPA backends (the forced one, or
        what the device runs in its place) while inside."""
        torch.autograd.set_detect_anomaly(self.settings.anomaly)
        torch.backends.cudnn.benchmark = self.settings.cudnn_benchmark
        torch.backends.cuda.matmul.allow_tf32 = self.settings.matmul_tf32
        torch.backends.cudnn.allow_tf32 = self.settings.cudnn_tf32
        backends = self.sdpa_backends
        with sdpa_kernel(backends) if backends is not None else contextlib.nullcontext():
            yield

    def synchronize(self):
        """Waits for the device's queued work."""
        self.device.synchronize()

    def rows(self, steps):
        """Samples `steps` steps take: their targets, so images or tokens."""
        return steps * self.loader.samples_per_batch

    def clear_grads(self):
        """The step's zero_grad: in place, or to None under zero-grad-none."""
        for optimizer in self.optimizers:
            optimizer.zero_grad(set_to_none=self.settings.set_to_none)

    def enter(self, phase):
        """Marks the start of `phase` of the step, while a breakdown is recorded."""
        if self.marks is not None:
            self.marks.enter(phase)

    def step(self):
        """One training step, or one evaluation batch, on the loader's next batch."""
        self.enter("batch-wait")
        host = self.loader.next_host()
        self.enter("host-to-device")
        x, y = self.loader.place(host)
        self.steps_done += 1
        if self.optimizer is None:
            self.evaluate(x, y)
        elif self.settings.cuda_graphs:
            self.replay(x, y)
        else:
            self.train(x, y)

    def train(self, x, y):
        """The training step on (x, y)."""
        self.enter("optimizer")
        self.clear_grads()
        loss, correct = self.backward_pass(x, y)
        self.enter("optimizer")
        self.update()
        self.enter("metrics")
        self.metrics.record(loss, correct)

    def backward_pass(self, x, y):
        """Forward and backward of the step's batch, whole or (grad-accumulation) in
        micro-batches; returns the loss and the correct count."""
        return self.forward_backward(x, y) if self.micro_batches == 1 else self.accumulate(x, y)

    def forward_backward(self, x, y, scale=None):
        """Forward, the loss (criterion), backward of the loss (times `scale`, and loss-scaled
        under amp); returns the loss and the correct count."""
        self.enter("forward")
        with self.autocast():
            logits = self.forward(x)
            loss = self.criterion(logits, y)
        self.enter("backward")
        backward = loss if scale is None else loss * scale
        if self.scaler is not None:
            backward = self.scaler.scale(backward)
        backward.backward()
        return loss, self.count_correct(logits, y)

    def criterion(self, logits, y):
        """The step's loss: on a user side the file's loss(output, targets) or user_model's
        cross-entropy; else mean cross-entropy on the logits reshaped (-1, classes) in float32
        (the case's dtype if float64)."""
        if self.loss_function is not None:
            return self.loss_function(logits, y)
        loss_dtype = torch.float64 if self.case.dtype == torch.float64 else torch.float32
        flat = logits.reshape(-1, logits.size(-1)).to(loss_dtype)
        return F.cross_entropy(flat, y.reshape(-1), label_smoothing=self.label_smoothing)

    def count_correct(self, logits, y):
        """The batch's correct predictions, on the device (a user side: user_model.correct)."""
        if self.spec.user is not None:
            return user_model.correct(logits, y)
        return (logits.argmax(-1) == y).sum()

    def accumulate(self, x, y):
        """grad-accumulation: forward and backward of each micro-batch in turn, its loss divided
        by their number, the gradients adding up; returns the mean loss and the correct count."""
        k = self.micro_batches
        loss_sum = correct = None
        for xs, ys in zip(x.tensor_split(k), y.tensor_split(k)):
            loss, right = self.forward_backward(xs, ys, 1.0 / k)
            loss_sum = loss.detach() if loss_sum is None else loss_sum + loss.detach()
            correct = right if correct is None else correct + right
        return loss_sum / k, correct

    def update(self):
        """Clips the gradients where the case asks, then each optimizer's step (through the
        GradScaler under amp)."""
        if self.case.clip_max_norm is not None:
            if self.scaler is not None:
                for optimizer in self.optimizers:
                    self.scaler.unscale_(optimizer)
            nn.utils.clip_grad_norm_(self.params, self.case.clip_max_norm)
        if self.scaler is not None:
            for optimizer in self.optimizers:
                self.scaler.step(optimizer)
            self.scaler.update()
        else:
            for optimizer in self.optimizers:
                optimizer.step()

    def replay(self, x, y):
        """cuda-graphs: the batch copied into the graph's static inputs and the captured step
        replayed (captured on the first call)."""
        if self.graph is None:
            self.capture(x, y)
        self.enter("graph-replay")
        self.static_x.copy_(x)
        self.static_y.copy_(y)
        loss, correct = self.graph.replay()
        self.enter("metrics")
        self.metrics.record(loss.clone(), correct.clone())

    def capture(self, x, y):
        """PyTorch's whole-network capture, through the device (engine_device's graph step): three
        steps on a side stream (so that lazily made state, like momentum buffers, exists), then
        the gradients set to None, so that backward allocates them in the graph's pool, and one
        step captured; the device's peaks over the capture are kept (capture_peaks), as probe
        reports them."""
        self.static_x, self.static_y = x.clone(), y.clone()
        self.graph = self.device.graph(self.release_grads, self.graph_body)
        self.graph.warm_up(3)
        self.release_grads()
        self.capture_peaks = self.device.allocator_peaks(self.graph.capture, self.followed_capture)

    def release_grads(self):
        """The gradients set to None, before a step that is or stands for a captured one."""
        for optimizer in self.optimizers:
            optimizer.zero_grad(set_to_none=True)

    def graph_body(self):
        """The captured step on the static inputs, with no phase marks inside (a replay is one
        phase): forward, backward and the update; returns the loss and the correct count."""
        marks, self.marks = self.marks, None
        try:
            outputs = self.backward_pass(self.static_x, self.static_y)
            self.update()
        finally:
            self.marks = marks
        return outputs

    def followed_capture(self):
        """The capture run with its CPU tensors followed (followed_peak); its peak bytes, or None
        where a profiler is running already (a probe or profile that runs the side's first
        step), which cannot be nested."""
        if torch._C._autograd._profiler_enabled():
            self.graph.capture()
            return None
        return followed_peak(lambda: None, self.graph.capture, lambda: live_cpu_tensor_bytes(self))

    def evaluate(self, x, y):
        """One evaluation batch: forward (recording autograd unless no-grad-eval), the correct
        count summed on the device."""
        self.enter("forward")
        with torch.no_grad() if self.settings.no_grad_eval else contextlib.nullcontext(), self.autocast():
            logits = self.model(x)
        self.eval_graph = logits.requires_grad
        self.enter("metrics")
        self.correct_sum += self.count_correct(logits, y)


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
            if compiled and first:
                side.first_step_graphs = parity.graphs_compiled()
        side.synchronize()
    return compile_s if compiled else None


def compile_counters(side):
    """torch._dynamo's counters of the process for a side under torch-compile: its graph breaks,
    the graphs compiled, and the graphs compiled after the side's first step (recompiles); nulls
    for a side not compiled."""
    if not side.settings.compiled:
        return {"graph_breaks": None, "graphs": None, "recompiles": None}
    from torch._dynamo.utils import counters

    graphs = parity.graphs_compiled()
    first = graphs if side.first_step_graphs is None else side.first_step_graphs
    breaks = sum(counters["graph_break"].values())
    return {"graph_breaks": breaks, "graphs": graphs, "recompiles": graphs - first}


def window(side, steps):
    """Times `steps` steps between two device synchronisations; counts the minor page faults the
    process takes meanwhile."""
    with side.switched():
        samples, reads = side.rows(steps), side.metrics.host_reads
        faults = minor_faults()
        side.synchronize()
        started = time.perf_counter()
        for _ in range(steps):
            side.step()
        side.synchronize()
        seconds = time.perf_counter() - started
        faults = minor_faults() - faults
    return {"samples": samples, "seconds": seconds, "host_reads": side.metrics.host_reads - reads, "minor_faults": faults}


def minor_faults():
    """Minor page faults this process (every thread of it) has taken so far."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt


# The phases of a step in the order a step runs them, as trickbench names them.
PHASES = ("batch-wait", "host-to-device", "forward", "backward", "optimizer", "metrics", "graph-replay")


class PhaseMarks:
    """Where a recorded window's time goes: a stamp where each phase of a step begins on the
    device's phase clock (the host's clock on a CPU and on the as-if device; a CUDA event on the
    current stream on a GPU), each phase's time the span to the next stamp."""

    def __init__(self, device):
        self.device, self.clock = device, device.phase_clock()
        self.marks = []

    def enter(self, phase):
        """Marks the start of `phase`."""
        self.marks.append((phase, self.clock.stamp()))

    def finish(self, steps):
        """Each phase's mean time per step, in step order, over `steps` steps."""
        end = self.clock.stamp()
        self.device.synchronize()
        totals = {}
        for i, (phase, start) in enumerate(self.marks):
            following = self.marks[i + 1][1] if i + 1 < len(self.marks) else end
            totals[phase] = totals.get(phase, 0.0) + self.clock.elapsed_ms(start, following)
        return [{"phase": p, "mean_ms": totals[p] / steps} for p in PHASES if p in totals]


def breakdown(side, steps):
    """A window of `steps` steps with each phase's start marked: where a step's time goes."""
    with side.switched():
        samples = side.rows(steps)
        side.synchronize()
        marks = PhaseMarks(side.device)
        side.marks = marks
        started = time.perf_counter()
        try:
            for _ in range(steps):
                side.step()
            phases = marks.finish(steps)
        finally:
            side.marks = None
        seconds = time.perf_counter() - started
    return {"clock": marks.clock.name, "steps": steps, "phases": phases, "samples_per_s": samples / seconds}


def profile(side, steps):
    """The aten operators a window of `steps` steps calls, as torch.profiler records them."""
    with torch.profiler.profile(activities=side.device.profiler_activities()) as prof:
        window(side, steps)
    return sorted({event.name for event in prof.events() if event.name.startswith("aten::")})


def trace(side, steps, path):
    """One untraced step, then `steps` steps under torch.profiler (operators with their input
    shapes and the memory they allocate and free), written to `path` as gzipped Chrome-trace
    JSON, atomically: the same kind of file, with the same events, as libtorch's Kineto
    profiler writes for a cell of trickbench's own loop."""
    warm_up(side, 1)
    activities = side.device.profiler_activities()
    with quiet(), torch.profiler.profile(activities=activities, record_shapes=True, profile_memory=True) as prof:
        warm_up(side, steps)
    directory = os.path.dirname(path)
    os.makedirs(directory, exist_ok=True)
    fd, raw = tempfile.mkstemp(prefix=".tmp", suffix=".json", dir=directory)
    os.close(fd)
    fd, packed = tempfile.mkstemp(prefix=".tmp", suffix=".json.gz", dir=directory)
    os.close(fd)
    try:
        prof.export_chrome_trace(raw)
        with open(raw, "rb") as source, gzip.open(packed, "wb") as target:
            shutil.copyfileobj(source, target)
        os.replace(packed, path)
    finally:
        for leftover in (raw, packed):
            if os.path.exists(leftover):
                os.remove(leftover)
    return {"steps": steps}


# The profiler's name for the steps whose allocations a CPU memory probe follows.
PROBE_MARK = "trickbench::memory_probe"


def probe(side, steps):
    """The memory peaks of `steps` (≥ 2) untimed steps: the device's (engine_device's
    allocator_peaks): on CUDA the caching allocator's, reset first; on a CPU (and for the as-if
    device's allocated bytes) the peak of the bytes held by live CPU tensors over the steps after
    the first (followed_peak). A side whose step is captured reports the larger of these and its
    capture's, field by field. Either way the peak resident set, reset first where Linux allows
    it."""
    reset_rss_peak()
    samples = side.rows(steps)

    def followed():
        # The first step's allocations are the profiler's from then on, so their frees in the
        # later steps are seen; what was live before is counted at the mark.
        first, rest = lambda: warm_up(side, 1), lambda: warm_up(side, steps - 1)
        return followed_peak(first, rest, lambda: live_cpu_tensor_bytes(side))

    peaks = side.device.allocator_peaks(lambda: warm_up(side, steps), followed)
    allocated, reserved = (larger(own, captured) for own, captured in zip(peaks, side.capture_peaks))
    return {
        "peak_allocated_bytes": allocated,
        "peak_reserved_bytes": reserved,
        "peak_rss_bytes": peak_rss_bytes(),
        "samples": samples,
    }


def larger(a, b):
    """The larger of two byte counts, either of which may be None (unknown)."""
    return a if b is None else b if a is None else max(a, b)


def followed_peak(before, during, live_bytes):
    """Runs `before()` then `during()` under torch.profiler with profile_memory=True; returns the
    peak bytes of live CPU tensors over `during`: `live_bytes()` counted between the two, plus the
    highest the allocations the profiler follows rose above that inside `during`."""
    with quiet(), torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU], profile_memory=True) as prof:
        before()
        live = live_bytes()
        with torch.profiler.record_function(PROBE_MARK):
            during()
    events = prof.profiler.kineto_results.events()
    mark = next(e for e in events if e.name() == PROBE_MARK)
    inside = sorted(
        (e.start_ns(), e.nbytes())
        for e in events
        if e.name() == "[memory]" and mark.start_ns() <= e.start_ns() <= mark.end_ns()
    )
    rise = peak = 0
    for _, nbytes in inside:
        rise += nbytes
        peak = max(peak, rise)
    return live + peak


@contextlib.contextmanager
def quiet():
    """Discards what is written to stderr and the Python warnings raised while inside: the
    profiler's notes on a CPU (no CUDA device for its GPU tracer; frees of memory allocated
    before it started), which say nothing about the cell."""
    sys.stderr.flush()
    saved = os.dup(2)
    null = os.open(os.devnull, os.O_WRONLY)
    os.dup2(null, 2)
    os.close(null)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            yield
    finally:
        sys.stderr.flush()
        os.dup2(saved, 2)
        os.close(saved)


# The tensor types whose storage is real memory: a compiler's fake and functional tensors, which
# torch.compile keeps in its caches, have none.
PLAIN_TENSORS = (torch.Tensor, nn.Parameter)


def live_cpu_tensor_bytes(*sides):
    """Bytes of the CPU tensor storages torch allocated that are alive now: those the sides hold
    (parameters, gradients, buffers, optimizer state) and every other plain tensor the
    interpreter can reach; storages torch did not allocate (numpy's, shared with
    torch.from_numpy) do not count, as the profiler does not follow them either. Objects are told
    apart by their exact type, which a weak proxy to a dead object also answers."""
    tensors = [o for o in gc.get_objects() if type(o) in PLAIN_TENSORS]
    for side in sides:
        tensors += [t for p in side.params for t in (p, p.grad) if t is not None]
        tensors += list(side.module.buffers())
        if side.optimizer is not None:
            tensors += [v for state in side.optimizer.state.values() for v in state.values() if torch.is_tensor(v)]
    storages = {}
    for t in tensors:
        if type(t) not in PLAIN_TENSORS or t.device.type != "cpu" or t.layout != torch.strided:
            continue
        storage = t.untyped_storage()
        if storage.resizable():
            storages[storage.data_ptr()] = storage.nbytes()
    return sum(storages.values())


def reset_rss_peak():
    """Resets the process's peak resident set (VmHWM) where Linux allows it."""
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
    except OSError:
        pass


def status_bytes(field):
    """The figure of /proc/self/status's line `field` (VmRSS:, VmHWM:), bytes, or None where the
    file or the line is missing (gVisor's status file has no VmHWM)."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith(field):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return None


def current_rss_bytes():
    """The process's resident set now (VmRSS), or None."""
    return status_bytes("VmRSS:")


def peak_rss_bytes():
    """The process's peak resident set: VmHWM (since its last reset), else ru_maxrss."""
    peak = status_bytes("VmHWM:")
    return peak if peak is not None else resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


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
            side.module.eval()(side.loader.first()[0])
    finally:
        side.module.train(was_training)
        for hook in hooks:
            hook.remove()
    return outputs


def inspect(side):
    """Facts about the side and the process-wide switches as set now, for checks."""
    kind, user = side.spec.model["kind"], side.spec.user
    resnet = kind == "cifar-resnet"
    convolutions = resnet or (user is not None and user.features["convolutions"] > 0)
    attention = side.settings.attention if kind == "gpt" else None
    if user is not None and user.features["sdpa"]:
        attention = "sdpa"
    optimizer = None
    grads = None
    if side.optimizer is not None:
        defaults = side.optimizer.defaults
        optimizer = {
            "class": type(side.optimizer).__name__,
            "fused": defaults.get("fused"),
            "foreach": defaults.get("foreach"),
        }
        if side.graph is None:
            side.clear_grads()
        present = {p.grad is not None for p in side.params}
        grads = "tensors" if present == {True} else ("none" if present == {False} else "mixed")
    backend, autocast = side.settings.sdpa_backend, side.settings.autocast
    metrics = None
    if side.optimizer is not None:
        metrics = "every-step" if side.metrics.every_step else "every-log-interval"
    facts = {
        "model": kind,
        "dtype": str(side.case.dtype).removeprefix("torch."),
        "memory_format": layout(p for p in side.params if p.dim() == 4),
        "activation_format": layout(conv_activations(side)) if convolutions else None,
        "input_format": layout([side.loader.first()[0]]),
        "conv_bias": side.spec.model["conv_bias"] if resnet else None,
        "attention": attention,
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
        "cudnn_tf32": torch.backends.cudnn.allow_tf32,
        "loader": side.loader.facts(),
        "scripted": scripted_functions(side.module),
        "checkpointed": side.settings.checkpointing,
        "micro_batches": side.micro_batches,
        "fp8_linears": sum(isinstance(m, engine_tricks.Fp8Linear) for m in side.module.modules()),
        "fp8_linears_left": side.fp8_linears_left,
        "cuda_graph": side.graph is not None,
        "expandable_segments": side.device.segments_expandable(),
    }
    if user is not None:
        facts["biases_removed"] = side.biases_removed
    return facts


def scripted_functions(module):
    """The names of the TorchScript functions the module's blocks call in place of eager ops."""
    names = set()
    for m in module.modules():
        for attribute in ("epilogue", "activation", "residual_dropout"):
            f = m.__dict__.get(attribute)
            if isinstance(f, torch.jit.ScriptFunction):
                names.add(f.name)
    return sorted(names)


# ---- Serving requests ----


REQUEST_FIELDS = {
    "build": ("side",),
    "warm_up": ("side", "steps"),
    "window": ("side", "steps"),
    "compile_counters": ("side",),
    "probe": ("side", "steps"),
    "breakdown": ("side", "steps"),
    "memory": (),
    "held": (),
    "loss": ("side",),
    "inspect": ("side",),
    "profile": ("side", "steps"),
    "trace": ("side", "steps", "path"),
    "train_to_target": ("side",),
    "stood_in": ("side",),
    "quit": (),
}
MIN_STEPS = {"warm_up": 0, "window": 1, "probe": 2, "breakdown": 1, "profile": 1, "trace": 1}


class Engine:
    """The case, its device (engine_device's boundary) and the sides built so far."""

    def __init__(self, case):
        self.case = case
        self.sides = {}
        self.not_applicable = {}
        self.progress = lambda point: None  # where train_to_target's points go as they come
        self.device = engine_device.make_device(case.device, case.as_if_cuda, self.live_bytes)

    def live_bytes(self):
        """The bytes of the live CPU tensors, the built sides' among them."""
        return live_cpu_tensor_bytes(*self.sides.values())

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
        if op == "memory":
            return self.memory()
        if op == "held":
            return self.held()
        if op == "quit":
            return {"ok": True}
        if op == "stood_in":
            self.spec(request["side"])
            return {"stood_in": self.device.stood_in(request["side"])}
        side = self.side(op, request["side"])
        with self.device.for_side(side.spec.name):
            return self.side_op(op, side, request)

    def side_op(self, op, side, request):
        """Runs `op` (one that names a side) on the built `side`."""
        if op == "warm_up":
            return {"ok": True, "compile_s": self.guarded(side, warm_up, request["steps"])}
        if op == "window":
            return self.guarded(side, window, request["steps"])
        if op == "compile_counters":
            return compile_counters(side)
        if op == "profile":
            return {"ops": self.guarded(side, profile, request["steps"])}
        if op == "trace":
            path = request["path"]
            if not isinstance(path, str) or not os.path.isabs(path):
                raise RequestError(f"trace: path: expected an absolute path, got {json.dumps(path)}")
            return self.guarded(side, lambda s, n: trace(s, n, path), request["steps"])
        if op == "probe":
            return self.guarded(side, probe, request["steps"])
        if op == "breakdown":
            return self.guarded(side, breakdown, request["steps"])
        if op == "loss":
            return {"loss": self.loss(side)}
        if op == "train_to_target":
            return self.train_to_target(side)
        return inspect(side)

    def train_to_target(self, side):
        """Trains `side` to the case's target (engine_tta.train_to_target), each point sent as a
        progress line as it is measured."""
        if self.case.tta is None:
            raise RequestError("train_to_target: the case has no time_to_accuracy")
        with side.switched():
            run = lambda s, n: engine_tta.train_to_target(s, s.recipe, parity.graphs_compiled, self.progress)
            return {"compile_s": self.guarded(side, run, None)}

    def build(self, name):
        """Builds side `name` (once)."""
        spec = self.spec(name)
        if name in self.not_applicable:
            raise NotApplicable(self.not_applicable[name])
        if name in self.sides:
            raise RequestError(f"build: side {name} is already built")
        try:
            with self.device.for_side(name):
                self.sides[name] = Side(self.case, spec, self.device)
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
        SDPA backend (run as forced, not stood in for), makes the side not applicable from then
        on."""
        try:
            return run(side, steps)
        except parity.compile_failures() as e:
            reason = f"torch-compile: {parity.first_line(e)}"
        except RuntimeError as e:
            if side.sdpa_backends != [side.settings.sdpa_backend] or "No available kernel" not in str(e):
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

    def held(self):
        """The device's bytes held now, its cache emptied first (CUDA; on a CPU the live CPU
        tensors'), and the resident set."""
        self.device.empty_cache()
        allocated, reserved = self.device.held()
        rss = current_rss_bytes()
        return {"peak_allocated_bytes": allocated, "peak_reserved_bytes": reserved, "peak_rss_bytes": rss}

    def memory(self):
        """The device's peak memory since start (CUDA) and the process's peak resident set."""
        allocated, reserved = self.device.peaks()
        rss = peak_rss_bytes()
        return {"peak_allocated_bytes": allocated, "peak_reserved_bytes": reserved, "peak_rss_bytes": rss}


def protocol_stream():
    """The real stdout, kept for protocol replies; file descriptor 1 then points at stderr, so
    that nothing else (prints, C++ logs, compiler subprocesses) can reach the protocol. The
    duplicate is not inherited by child processes."""
    sys.stdout.flush()
    out = os.fdopen(os.dup(1), "w")
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    return out


def send(out, message):
    """Writes `message` as a protocol line."""
    out.write(json.dumps(message, allow_nan=False) + "\n")
    out.flush()


def serve(engine, requests, out):
    """Answers request lines until quit or EOF, then stops the sides' DataLoader workers."""
    try:
        for line in requests:
            if not line.strip():
                continue
            engine.progress = lambda point: send(out, {"progress": point})
            reply, stop = engine.handle(line)
            out.write(json.dumps(reply, allow_nan=False) + "\n")
            out.flush()
            if stop:
                return
    finally:
        for side in engine.sides.values():
            side.loader.close()


def leave(status, out):
    """Exits with `status` once the exit handlers have run and the streams are flushed, skipping
    the interpreter's teardown of torch's modules (one to two seconds once torch._dynamo is
    loaded, which every optimizer loads): the engine holds nothing that needs it."""
    atexit._run_exitfuncs()
    for stream in (out, sys.stderr):
        stream.flush()
    os._exit(status)


def start(case_dir, requests, out):
    """Reads the case in `case_dir`, sets what holds for the whole process and the baseline flags,
    warms the device's libraries up, writes the ready line to `out` and answers `requests` until
    quit or EOF; returns the exit status (2: the case is wrong)."""
    try:
        engine = Engine(read_case(case_dir))
        process_wide(engine.case, engine.device)
    except CaseError as e:
        print(f"pytorch_engine.py: error: {e}", file=sys.stderr)
        return 2
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = True
    torch.backends.cudnn.benchmark = False
    torch.autograd.set_detect_anomaly(False)
    engine.device.warm_libraries()
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
    serve(engine, requests, out)
    return 0


def process_wide(case, device):
    """Sets what holds for the whole process before anything is built on `device`
    (engine_device's): the intra-op threads; on a CUDA device (real or as-if) the caching
    allocator's expandable segments, on where the case's sides (all of them, as the mode cannot
    change once CUDA has allocated) ask for them and off otherwise, whatever the environment said
    (its other keys kept); and the allocator's cap at the case's memory budget, if any."""
    if case.threads is not None:
        torch.set_num_threads(case.threads)
    expandable = {"expandable-segments" in side.tricks for side in case.sides.values()}
    if expandable == {True, False}:
        raise CaseError("expandable-segments holds for the whole process: every side has it or none does")
    device.set_expandable_segments(expandable == {True})
    if case.memory_budget_bytes is not None:
        device.cap_memory(case.memory_budget_bytes)


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
    (this process runs none). torch._dynamo is imported too: every torch.optim optimizer imports
    it when the first one is built, which took 0.85 s of each engine on the 2-core VM, and its
    import runs no operator and starts no thread. Writes {"serving": true, "pid": P} once
    listening; ends at EOF on stdin (its owner, trickbench's run, is gone)."""
    import torch._dynamo  # noqa: F401  (imported here once, for every engine forked)

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
