#!/usr/bin/env python3
"""The PyTorch side of `trickbench parity`.

trickbench exports a parity case into a directory: `case.json` (the model's shape, the optimizer
and its hyper-parameters, the learning rate of every step, the device), `weights.safetensors` (the
initial weights under PyTorch `state_dict` names) and `batches.safetensors` (`inputs.K` and
`targets.K` for each step K, already augmented and on the exact values trickbench trains on).
This script builds the same network in plain eager PyTorch, written here independently of
trickbench's Rust code, loads those weights and batches, and either

  --mode losses   trains one step per exported batch in float64 (weights and floating-point
                  inputs; trickbench does the same, so the two differ only by float64 rounding)
                  and records every step's loss, or
  --mode time     times float32 training steps (cycling through the batches) in windows, with the
                  device synchronised at each window's edges, after warm-up steps,

writing JSON to --output. With --compile MODE (default or max-autotune-no-cudagraphs) the model
is wrapped in torch.compile, as nanoGPT does: the forward graph and, through AOTAutograd, its
backward are compiled by inductor; the loss, zero_grad and the torch.optim step stay eager, as in
the eager side, so both sides run the same optimizer code. The first step (untimed) builds the
graphs; its wall seconds, and those of any warm-up step that compiled a new graph (a recompile),
are reported as compile_s, apart from the windows. When inductor cannot build (no C++ compiler,
say), the output says unavailable with the error's first line instead of failing. The step mirrors trickbench's baseline step: gradients zeroed in place
(`zero_grad(set_to_none=False)`), forward, mean cross-entropy, backward, optimizer step, then the
loss and the count of correct predictions read on the host.

It needs only torch (the safetensors files are read by the small reader below), so it runs in any
environment that has PyTorch, e.g. `python parity.py --case DIR --mode losses --output out.json`.
"""

import argparse
import json
import math
import os
import struct
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

CASE_FORMAT = 1

SAFETENSORS_DTYPES = {
    "F64": torch.float64,
    "F32": torch.float32,
    "F16": torch.float16,
    "BF16": torch.bfloat16,
    "I64": torch.int64,
    "I32": torch.int32,
    "I16": torch.int16,
    "I8": torch.int8,
    "U8": torch.uint8,
    "BOOL": torch.bool,
}


def fail(message):
    print(f"parity.py: error: {message}", file=sys.stderr)
    sys.exit(2)


def read_safetensors(path):
    """Reads every tensor of a safetensors file: an 8-byte little-endian header length, a JSON
    header of {name: {dtype, shape, data_offsets}}, then the raw little-endian data."""
    try:
        with open(path, "rb") as f:
            data = f.read()
    except OSError as e:
        fail(f"{path}: {e.strerror}")
    if len(data) < 8:
        fail(f"{path}: not a safetensors file (shorter than its 8-byte header length)")
    (header_len,) = struct.unpack("<Q", data[:8])
    if 8 + header_len > len(data):
        fail(f"{path}: truncated (header of {header_len} bytes in a file of {len(data)})")
    try:
        header = json.loads(data[8 : 8 + header_len])
    except ValueError as e:
        fail(f"{path}: unreadable header ({e})")
    base = 8 + header_len
    tensors = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        dtype = SAFETENSORS_DTYPES.get(info["dtype"])
        if dtype is None:
            fail(f"{path}: tensor {name} has unsupported dtype {info['dtype']}")
        start, end = info["data_offsets"]
        if base + end > len(data):
            fail(f"{path}: tensor {name} runs past the end of the file (truncated?)")
        raw = bytearray(data[base + start : base + end])
        flat = torch.frombuffer(raw, dtype=dtype) if raw else torch.empty(0, dtype=dtype)
        tensors[name] = flat.reshape(info["shape"])
    return tensors


# ---- CIFAR ResNet (He et al. 2016, section 4.2), option-A shortcuts ----


def residual_relu(y, shortcut):
    """A residual block's epilogue: ReLU of the sum of its branch and its shortcut."""
    return F.relu(y + shortcut)


def chain(*functions):
    """The functions applied one after another."""

    def chained(x):
        for f in functions:
            x = f(x)
        return x

    return chained


def norm(channels, batch_norm, momentum):
    """A BatchNorm over `channels` at `momentum`, or nothing (nn.Identity) without batch_norm."""
    return nn.BatchNorm2d(channels, momentum=momentum) if batch_norm else nn.Identity()


class BasicBlock(nn.Module):
    # The epilogue as eager ops; trickbench's PyTorch engine swaps in a TorchScript function
    # (jit-fusion) on an instance.
    epilogue = staticmethod(residual_relu)

    def __init__(self, c_in, c_out, stride, conv_bias, batch_norm=True, bn_momentum=0.1):
        super().__init__()
        bias = conv_bias or not batch_norm
        self.conv1 = nn.Conv2d(c_in, c_out, 3, stride=stride, padding=1, bias=bias)
        self.bn1 = norm(c_out, batch_norm, bn_momentum)
        self.conv2 = nn.Conv2d(c_out, c_out, 3, stride=1, padding=1, bias=bias)
        self.bn2 = norm(c_out, batch_norm, bn_momentum)
        self.stride = stride
        self.pad = (c_out - c_in) // 2

    def forward(self, x):
        y = F.relu(self.bn1(self.conv1(x)))
        y = self.bn2(self.conv2(y))
        if self.stride == 1 and self.pad == 0:
            shortcut = x
        else:
            # Option A: subsample, then zero-pad the new channels on both sides.
            shortcut = F.pad(x[:, :, :: self.stride, :: self.stride], (0, 0, 0, 0, self.pad, self.pad))
        return self.epilogue(y, shortcut)


class CifarResNet(nn.Module):
    """He et al.'s CIFAR ResNet; without batch_norm every convolution has a bias and nothing
    normalises (the `batch-norm` trick's reference), and bn_momentum is BatchNorm's momentum."""

    def __init__(self, blocks_per_stage, conv_bias, classes=10, batch_norm=True, bn_momentum=0.1):
        super().__init__()
        widths = [16, 32, 64]
        self.conv1 = nn.Conv2d(3, widths[0], 3, padding=1, bias=conv_bias or not batch_norm)
        self.bn1 = norm(widths[0], batch_norm, bn_momentum)
        c_in = widths[0]
        for stage, c_out in enumerate(widths):
            blocks = []
            for b in range(blocks_per_stage):
                stride = 2 if stage > 0 and b == 0 else 1
                blocks.append(BasicBlock(c_in, c_out, stride, conv_bias, batch_norm, bn_momentum))
                c_in = c_out
            setattr(self, f"layer{stage + 1}", nn.Sequential(*blocks))
        self.linear = nn.Linear(widths[-1], classes)

    def stem(self, x):
        return F.relu(self.bn1(self.conv1(x)))

    def head(self, x):
        return self.linear(F.adaptive_avg_pool2d(x, 1).flatten(1))

    def segments(self):
        """The forward pass cut where activation checkpointing cuts it: the stem, then one segment
        per block, the last with the pooling and the classifier."""
        blocks = [*self.layer1, *self.layer2, *self.layer3]
        return [self.stem, *blocks[:-1], chain(blocks[-1], self.head)]

    def forward(self, x):
        return self.head(self.layer3(self.layer2(self.layer1(self.stem(x)))))


# ---- Character-level GPT (Karpathy's nanoGPT model.py, bias=False) ----


class CausalSelfAttention(nn.Module):
    def __init__(self, width, heads, context, dropout):
        super().__init__()
        self.c_attn = nn.Linear(width, 3 * width, bias=False)
        self.c_proj = nn.Linear(width, width, bias=False)
        self.attn_dropout = nn.Dropout(dropout)
        self.resid_dropout = nn.Dropout(dropout)
        self.heads = heads
        self.register_buffer("mask", torch.tril(torch.ones(context, context, dtype=torch.bool)), persistent=False)

    def attend(self, q, k, v):
        """Causal attention of the heads' queries, keys and values ([B, heads, T, head width]),
        written out: softmax(QKᵀ/√d + mask)·V."""
        t = q.size(-2)
        scores = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(k.size(-1)))
        scores = scores.masked_fill(~self.mask[:t, :t], float("-inf"))
        # Softmax in float32, as autocast runs it (a no-op in float32 training).
        return self.attn_dropout(F.softmax(scores.float(), dim=-1).to(v.dtype)) @ v

    def branch(self, x):
        """The residual branch before its dropout: the heads' attention, projected."""
        b, t, c = x.shape
        q, k, v = self.c_attn(x).split(c, dim=2)
        q, k, v = (m.view(b, t, self.heads, c // self.heads).transpose(1, 2) for m in (q, k, v))
        y = self.attend(q, k, v).transpose(1, 2).contiguous().view(b, t, c)
        return self.c_proj(y)

    def forward(self, x):
        return self.resid_dropout(self.branch(x))


class Mlp(nn.Module):
    # The exact GELU as one eager op; trickbench's PyTorch engine swaps in a TorchScript function
    # (jit-fusion) on an instance.
    activation = staticmethod(F.gelu)

    def __init__(self, width, dropout):
        super().__init__()
        self.c_fc = nn.Linear(width, 4 * width, bias=False)
        self.c_proj = nn.Linear(4 * width, width, bias=False)
        self.dropout = nn.Dropout(dropout)

    def branch(self, x):
        """The residual branch before its dropout."""
        return self.c_proj(self.activation(self.c_fc(x)))

    def forward(self, x):
        return self.dropout(self.branch(x))


class Block(nn.Module):
    # None: each branch's dropout, then the residual add, as eager ops. trickbench's PyTorch engine
    # sets a TorchScript function (residual, branch, p, training) → residual + dropout(branch)
    # (jit-fusion) on an instance.
    residual_dropout = None

    def __init__(self, width, heads, context, dropout):
        super().__init__()
        self.ln_1 = nn.LayerNorm(width, bias=False)
        self.attn = CausalSelfAttention(width, heads, context, dropout)
        self.ln_2 = nn.LayerNorm(width, bias=False)
        self.mlp = Mlp(width, dropout)
        self.p = dropout

    def forward(self, x):
        if self.residual_dropout is None:
            x = x + self.attn(self.ln_1(x))
            return x + self.mlp(self.ln_2(x))
        x = self.residual_dropout(x, self.attn.branch(self.ln_1(x)), self.p, self.training)
        return self.residual_dropout(x, self.mlp.branch(self.ln_2(x)), self.p, self.training)


class Gpt(nn.Module):
    def __init__(self, vocab_size, context, layers, heads, width, dropout):
        super().__init__()
        self.transformer = nn.ModuleDict(
            dict(
                wte=nn.Embedding(vocab_size, width),
                wpe=nn.Embedding(context, width),
                drop=nn.Dropout(dropout),
                h=nn.ModuleList([Block(width, heads, context, dropout) for _ in range(layers)]),
                ln_f=nn.LayerNorm(width, bias=False),
            )
        )

    def embed(self, idx):
        positions = torch.arange(idx.size(1), device=idx.device)
        return self.transformer.drop(self.transformer.wte(idx) + self.transformer.wpe(positions))

    def head(self, x):
        # The head is tied to the token embedding.
        return F.linear(self.transformer.ln_f(x), self.transformer.wte.weight)

    def segments(self):
        """The forward pass cut where activation checkpointing cuts it: one segment per block,
        the first also embedding the tokens, the last also applying the final LayerNorm and the
        head."""
        blocks = list(self.transformer.h)
        if len(blocks) == 1:
            return [chain(self.embed, blocks[0], self.head)]
        return [chain(self.embed, blocks[0]), *blocks[1:-1], chain(blocks[-1], self.head)]

    def forward(self, idx):
        x = self.embed(idx)
        for block in self.transformer.h:
            x = block(x)
        return self.head(x)


def build_model(spec):
    kind = spec["kind"]
    if kind == "cifar-resnet":
        return CifarResNet(
            spec["blocks_per_stage"],
            spec["conv_bias"],
            batch_norm=spec.get("batch_norm", True),
            bn_momentum=spec.get("bn_momentum", 0.1),
        )
    if kind == "gpt":
        return Gpt(spec["vocab_size"], spec["context"], spec["layers"], spec["heads"], spec["width"], spec["dropout"])
    fail(f"case.json: unknown model kind {kind!r}")


def load_weights(model, weights, path):
    """Loads every exported tensor; BatchNorm's num_batches_tracked (which trickbench does not keep,
    and which PyTorch uses only without a momentum) is the only key allowed to be missing."""
    missing, unexpected = model.load_state_dict(weights, strict=False)
    missing = [k for k in missing if not k.endswith("num_batches_tracked")]
    if missing or unexpected:
        fail(f"{path}: weights do not fit the model: missing {missing}, unexpected {unexpected}")


def build_optimizer(spec, params):
    kind = spec["kind"]
    if kind == "sgd":
        return torch.optim.SGD(
            params, lr=0.0, momentum=spec["momentum"], weight_decay=spec["weight_decay"], foreach=False
        )
    if kind in ("adam", "adamw"):
        make = torch.optim.AdamW if kind == "adamw" else torch.optim.Adam
        return make(
            params,
            lr=0.0,
            betas=(spec["beta1"], spec["beta2"]),
            eps=spec["eps"],
            weight_decay=spec["weight_decay"],
            foreach=False,
        )
    fail(f"case.json: optimizer {kind!r} has no PyTorch counterpart in this script")


class Training:
    """The model, its optimizer and the exported batches on the case's device."""

    def __init__(self, case_dir, dtype):
        try:
            with open(f"{case_dir}/case.json") as f:
                case = json.load(f)
        except OSError as e:
            fail(f"{case_dir}/case.json: {e.strerror} (export a case with `trickbench parity`)")
        if case.get("format") != CASE_FORMAT:
            fail(f"{case_dir}/case.json: case format {case.get('format')}, this script reads {CASE_FORMAT}")
        self.case = case
        self.device = torch.device(case["device"])
        model = build_model(case["model"])
        weights_path = f"{case_dir}/{case['weights']}"
        load_weights(model, read_safetensors(weights_path), weights_path)
        self.model = model.to(device=self.device, dtype=dtype).train()
        self.optimizer = build_optimizer(case["optimizer"], list(self.model.parameters()))
        batches_path = f"{case_dir}/{case['batches']}"
        batches = read_safetensors(batches_path)
        self.batches = []
        for k in range(case["steps"]):
            try:
                x, y = batches[f"inputs.{k}"], batches[f"targets.{k}"]
            except KeyError as e:
                fail(f"{batches_path}: no tensor {e} for step {k}")
            x = x.to(self.device, dtype=dtype) if x.is_floating_point() else x.to(self.device)
            self.batches.append((x, y.to(self.device)))
        self.learning_rates = case["learning_rates"]
        self.clip_max_norm = case.get("clip_max_norm")
        self.samples_per_batch = self.batches[0][1].numel()
        # Seeded right before the first step, as trickbench does, so that both sides draw the same
        # dropout masks (the same ops in the same order on the same generator).
        torch.manual_seed(case["seed"])

    def compile(self, mode, fallback_random):
        """Wraps the model in torch.compile in `mode`; `fallback_random` makes inductor draw dropout
        masks from eager PyTorch's generator (the losses run, which eager's masks must match)."""
        import torch._inductor.config as inductor_config

        inductor_config.fallback_random = fallback_random
        self.model = torch.compile(self.model, mode=mode)

    def step(self, k):
        """One training step on batch k mod steps; returns the loss read on the host."""
        x, y = self.batches[k % len(self.batches)]
        for group in self.optimizer.param_groups:
            group["lr"] = self.learning_rates[k % len(self.learning_rates)]
        self.optimizer.zero_grad(set_to_none=False)
        logits = self.model(x)
        loss = F.cross_entropy(logits.reshape(-1, logits.size(-1)).float(), y.reshape(-1))
        loss.backward()
        if self.clip_max_norm is not None:
            nn.utils.clip_grad_norm_(self.model.parameters(), self.clip_max_norm, foreach=False)
        self.optimizer.step()
        correct = (logits.argmax(-1) == y).sum()
        loss_value = loss.item()
        correct.item()
        return loss_value

    def synchronize(self):
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)


def graphs_compiled():
    """Graphs dynamo has compiled in this process so far."""
    from torch._dynamo.utils import counters

    return counters["stats"]["unique_graphs"]


def compile_failures():
    """The exceptions that mean inductor could not build a graph on this machine."""
    import torch._dynamo.exc
    import torch._inductor.exc

    names = [
        (torch._dynamo.exc, "BackendCompilerFailed"),
        (torch._inductor.exc, "InductorError"),
        (torch._inductor.exc, "InvalidCxxCompiler"),
        (torch._inductor.exc, "CppCompileError"),
    ]
    return tuple(getattr(module, name) for module, name in names if hasattr(module, name))


def first_line(error):
    """The innermost cause of a compile failure (dynamo wraps inductor's), as its type and the
    first non-empty line of its message."""
    while True:
        inner = getattr(error, "inner_exception", None) or error.__cause__
        if inner is None:
            break
        error = inner
    lines = [line.strip() for line in str(error).splitlines() if line.strip()]
    return f"{type(error).__name__}: {lines[0]}" if lines else type(error).__name__


def warm_up(training, steps, compiled):
    """Runs the untimed steps (at least one when compiled, the one that builds the graphs);
    returns the wall seconds of the steps that compiled a graph (None when not compiled)."""
    compile_s = 0.0
    for k in range(max(steps, 1 if compiled else 0)):
        before = graphs_compiled() if compiled else 0
        started = time.perf_counter()
        training.step(k)
        training.synchronize()
        if compiled and (k == 0 or graphs_compiled() > before):
            compile_s += time.perf_counter() - started
    return compile_s if compiled else None


def measure(args, training, output):
    """Fills `output` with the losses or the windows the mode asks for."""
    compiled = args.compile != "none"
    if args.mode == "losses":
        started = time.perf_counter()
        losses = [training.step(0)]
        if compiled:
            output["compile_s"] = time.perf_counter() - started
        output["losses"] = losses + [training.step(k) for k in range(1, len(training.batches))]
        return
    output["compile_s"] = warm_up(training, args.warmup_steps, compiled)
    windows = []
    step = max(args.warmup_steps, 1 if compiled else 0)
    for _ in range(args.windows):
        training.synchronize()
        started = time.perf_counter()
        for _ in range(args.steps_per_window):
            training.step(step)
            step += 1
        training.synchronize()
        elapsed = time.perf_counter() - started
        windows.append(args.steps_per_window * training.samples_per_batch / elapsed)
    output["window_samples_per_s"] = windows


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--case", required=True, help="directory of an exported parity case")
    parser.add_argument("--mode", required=True, choices=["losses", "time"])
    parser.add_argument("--output", required=True, help="JSON file to write")
    parser.add_argument("--warmup-steps", type=int, default=3)
    parser.add_argument("--windows", type=int, default=3)
    parser.add_argument("--steps-per-window", type=int, default=10)
    parser.add_argument("--compile", default="none", choices=["none", "default", "max-autotune-no-cudagraphs"])
    args = parser.parse_args()
    for flag in ("warmup_steps", "windows", "steps_per_window"):
        if getattr(args, flag) < (0 if flag == "warmup_steps" else 1):
            fail(f"--{flag.replace('_', '-')} {getattr(args, flag)} is out of range")

    # trickbench's baseline is PyTorch's default, set explicitly: TF32 in cuDNN convolutions,
    # fp32 matmuls at full precision, cuDNN's autotuner off (TF32 matmuls and the autotuner are
    # tricks of their own).
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = True
    torch.backends.cudnn.benchmark = False
    training = Training(args.case, torch.float64 if args.mode == "losses" else torch.float32)
    output = {
        "implementation": "pytorch",
        "version": torch.__version__,
        "threads": torch.get_num_threads(),
    }
    if args.compile != "none":
        output["compile_mode"] = args.compile
        training.compile(args.compile, fallback_random=args.mode == "losses")
        try:
            measure(args, training, output)
        except compile_failures() as e:
            output = {key: output[key] for key in ("implementation", "version", "threads", "compile_mode")}
            output["unavailable"] = first_line(e)
    else:
        measure(args, training, output)
    tmp = args.output + ".tmp"
    with open(tmp, "w") as f:
        json.dump(output, f)
    os.replace(tmp, args.output)


if __name__ == "__main__":
    main()
