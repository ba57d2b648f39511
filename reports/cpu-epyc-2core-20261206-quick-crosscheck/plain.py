"""A plain training script, as a PyTorch user writes one, timing one trick against its reference.

Written apart from trickbench's engine (it imports nothing of it): the model as a user writes it
(He et al.'s CIFAR ResNet with option-A shortcuts, nanoGPT's GPT without biases), the step as
PyTorch's documentation writes it (zero_grad, forward, cross-entropy, backward, step, the loss
read with .item()), the trick applied the way PyTorch's documentation tells a user to.

Both sides are built in this process from the same initial weights and fed the same batches,
each warmed up as soon as it is built (--build-first says which is built first); then --pairs
pairs of windows of --steps-per-window steps each, in the order R T, T R, R T, … (R the
reference's window, T the trick's), each window timed with time.perf_counter() between two device
synchronisations, the minor page faults the process takes in it counted. That is how
trickbench's engines pair a trick with its reference.

    python plain.py --workload resnet8 --trick channels-last --batch 128 --pairs 40 --output out.json

writes {"pairs": [{"trick_s": …, "reference_s": …, "trick_minor_faults": …, …}, …],
"samples_per_window": …, …};
`python plain.py --list` prints the tricks it writes, per workload, as JSON.

The batches are --batches batches of random inputs made once, on the device, before the sides
are built: a benchmark script's data, with no loader in the timed steps.
"""

import argparse
import contextlib
import json
import math
import resource
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

TRICKS = {
    "resnet8": ("channels-last", "zero-grad-none", "fused-optimizer", "no-bias-before-bn", "debug-off"),
    "gpt-mini": ("flash-attention", "jit-fusion"),
}
CIFAR_MEAN = (0.4914, 0.4822, 0.4465)
CIFAR_STD = (0.2470, 0.2435, 0.2616)


# ---- The models ----


class BasicBlock(nn.Module):
    def __init__(self, c_in, c_out, stride, bias):
        super().__init__()
        self.conv1 = nn.Conv2d(c_in, c_out, 3, stride, 1, bias=bias)
        self.bn1 = nn.BatchNorm2d(c_out)
        self.conv2 = nn.Conv2d(c_out, c_out, 3, 1, 1, bias=bias)
        self.bn2 = nn.BatchNorm2d(c_out)
        self.stride, self.extra = stride, c_out - c_in

    def forward(self, x):
        out = F.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        shortcut = x
        if self.stride != 1 or self.extra:
            half = self.extra // 2
            shortcut = F.pad(x[:, :, :: self.stride, :: self.stride], (0, 0, 0, 0, half, half))
        return F.relu(out + shortcut)


class ResNet(nn.Module):
    """CIFAR ResNet-(6n+2) with n blocks a stage; ResNet-8 is n = 1."""

    def __init__(self, n=1, bias=True, classes=10):
        super().__init__()
        self.conv1 = nn.Conv2d(3, 16, 3, 1, 1, bias=bias)
        self.bn1 = nn.BatchNorm2d(16)
        layers, c_in = [], 16
        for stage, c_out in enumerate((16, 32, 64)):
            for b in range(n):
                layers.append(BasicBlock(c_in, c_out, 2 if stage and b == 0 else 1, bias))
                c_in = c_out
        self.layers = nn.Sequential(*layers)
        self.fc = nn.Linear(64, classes)

    def forward(self, x):
        out = self.layers(F.relu(self.bn1(self.conv1(x))))
        return self.fc(F.adaptive_avg_pool2d(out, 1).flatten(1))


@torch.jit.script
def scripted_gelu(x):
    return x * 0.5 * (1.0 + torch.erf(x * 0.7071067811865476))


class Attention(nn.Module):
    def __init__(self, width, heads, context, sdpa):
        super().__init__()
        self.qkv = nn.Linear(width, 3 * width, bias=False)
        self.proj = nn.Linear(width, width, bias=False)
        self.heads, self.sdpa = heads, sdpa
        self.register_buffer("causal", torch.tril(torch.ones(context, context, dtype=torch.bool)))

    def forward(self, x):
        b, t, c = x.shape
        q, k, v = self.qkv(x).split(c, dim=2)
        q, k, v = (m.view(b, t, self.heads, c // self.heads).transpose(1, 2) for m in (q, k, v))
        if self.sdpa:
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        else:
            att = (q @ k.transpose(-2, -1)) / math.sqrt(k.size(-1))
            att = F.softmax(att.masked_fill(~self.causal[:t, :t], float("-inf")), dim=-1)
            y = att @ v
        return self.proj(y.transpose(1, 2).contiguous().view(b, t, c))


class Block(nn.Module):
    def __init__(self, width, heads, context, sdpa, fused_gelu):
        super().__init__()
        self.ln1 = nn.LayerNorm(width, bias=False)
        self.attn = Attention(width, heads, context, sdpa)
        self.ln2 = nn.LayerNorm(width, bias=False)
        self.fc = nn.Linear(width, 4 * width, bias=False)
        self.out = nn.Linear(4 * width, width, bias=False)
        self.gelu = scripted_gelu if fused_gelu else F.gelu

    def forward(self, x):
        x = x + self.attn(self.ln1(x))
        return x + self.out(self.gelu(self.fc(self.ln2(x))))


class GPT(nn.Module):
    """nanoGPT's GPT without biases or dropout, the head tied to the token embedding."""

    def __init__(self, vocab=65, context=64, layers=2, heads=4, width=128, sdpa=False, fused_gelu=False):
        super().__init__()
        self.tokens = nn.Embedding(vocab, width)
        self.positions = nn.Embedding(context, width)
        self.blocks = nn.ModuleList(Block(width, heads, context, sdpa, fused_gelu) for _ in range(layers))
        self.ln = nn.LayerNorm(width, bias=False)

    def forward(self, idx):
        x = self.tokens(idx) + self.positions(torch.arange(idx.size(1), device=idx.device))
        for block in self.blocks:
            x = block(x)
        return F.linear(self.ln(x), self.tokens.weight)


# ---- One side: a model, its optimizer and how its step runs ----


class Side:
    def __init__(self, args, on, weights):
        trick = args.trick
        self.channels_last = on and trick == "channels-last"
        self.set_to_none = on and trick == "zero-grad-none"
        self.anomaly = trick == "debug-off" and not on
        self.flash = on and trick == "flash-attention"
        if args.workload == "resnet8":
            self.model = ResNet(bias=not (on and trick == "no-bias-before-bn"))
        else:
            self.model = GPT(sdpa=self.flash, fused_gelu=on and trick == "jit-fusion")
        self.model.load_state_dict(weights, strict=False)
        self.model.to(args.device).train()
        if self.channels_last:
            self.model.to(memory_format=torch.channels_last)
        fused = {"fused": True} if on and trick == "fused-optimizer" else {}
        if args.workload == "resnet8":
            self.optimizer = torch.optim.SGD(self.model.parameters(), lr=0.05, momentum=0.9, weight_decay=5e-4, **fused)
        else:
            self.optimizer = torch.optim.AdamW(self.model.parameters(), lr=1e-3, betas=(0.9, 0.99), **fused)

    def step(self, x, y):
        if self.channels_last:
            x = x.contiguous(memory_format=torch.channels_last)
        self.optimizer.zero_grad(set_to_none=self.set_to_none)
        logits = self.model(x)
        loss = F.cross_entropy(logits.reshape(-1, logits.size(-1)), y.reshape(-1))
        loss.backward()
        self.optimizer.step()
        loss.item()

    def run(self, batches, steps):
        torch.autograd.set_detect_anomaly(self.anomaly)
        context = sdpa_kernel(SDPBackend.FLASH_ATTENTION) if self.flash else contextlib.nullcontext()
        with context:
            for _ in range(steps):
                self.step(*batches.next())


# ---- The data ----


class Batches:
    """--batches batches of random inputs on the device, cycled: standardised images and labels
    for the ResNet, windows of 65 tokens (inputs and next-token targets) for the GPT."""

    def __init__(self, args):
        g = torch.Generator().manual_seed(args.seed)
        n, self.k = args.batches, 0
        if args.workload == "resnet8":
            images = torch.randint(0, 256, (n, args.batch, 3, 32, 32), generator=g).float() / 255.0
            mean, std = (torch.tensor(v).view(1, 1, 3, 1, 1) for v in (CIFAR_MEAN, CIFAR_STD))
            self.inputs, self.targets = (images - mean) / std, torch.randint(0, 10, (n, args.batch), generator=g)
        else:
            tokens = torch.randint(0, 65, (n, args.batch, 65), generator=g)
            self.inputs, self.targets = tokens[:, :, :-1].contiguous(), tokens[:, :, 1:].contiguous()
        self.inputs, self.targets = self.inputs.to(args.device), self.targets.to(args.device)

    def next(self):
        k, self.k = self.k, (self.k + 1) % len(self.inputs)
        return self.inputs[k], self.targets[k]


def synchronize(device):
    if device.startswith("cuda"):
        torch.cuda.synchronize()


def minor_faults():
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt


def timed(side, batches, steps, device):
    """The window's seconds and the minor page faults the process took in it."""
    faults = minor_faults()
    synchronize(device)
    started = time.perf_counter()
    side.run(batches, steps)
    synchronize(device)
    return time.perf_counter() - started, minor_faults() - faults


def parse(argv):
    if argv == ["--list"]:
        print(json.dumps(TRICKS))
        sys.exit(0)
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--workload", choices=sorted(TRICKS), required=True)
    p.add_argument("--trick", required=True)
    p.add_argument("--batch", type=int, required=True)
    p.add_argument("--pairs", type=int, default=40)
    p.add_argument("--steps-per-window", type=int, default=1)
    p.add_argument("--warmup-steps", type=int, default=3)
    p.add_argument("--batches", type=int, default=8)
    p.add_argument("--build-first", choices=("trick", "reference"), default="trick")
    p.add_argument("--threads", type=int)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--device", default="cpu")
    p.add_argument("--output", required=True)
    args = p.parse_args(argv)
    if args.trick not in TRICKS[args.workload]:
        p.error(f"--trick {args.trick}: {args.workload} takes one of {', '.join(TRICKS[args.workload])}")
    for name in ("batch", "pairs", "steps_per_window", "batches"):
        if getattr(args, name) < 1:
            p.error(f"--{name.replace('_', '-')} {getattr(args, name)}: must be at least 1")
    if args.warmup_steps < 0 or (args.threads is not None and args.threads < 1):
        p.error("--warmup-steps must be at least 0 and --threads at least 1")
    return args


def main(argv):
    args = parse(argv)
    if args.threads is not None:
        torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    weights = (ResNet() if args.workload == "resnet8" else GPT()).state_dict()
    batches = Batches(args)
    sides = {}
    built = ("trick", "reference") if args.build_first == "trick" else ("reference", "trick")
    for name in built:
        sides[name] = Side(args, name == "trick", weights)
        sides[name].run(batches, args.warmup_steps)
    pairs = []
    for p in range(args.pairs):
        order = ("reference", "trick") if p % 2 == 0 else ("trick", "reference")
        timings = {name: timed(sides[name], batches, args.steps_per_window, args.device) for name in order}
        pair = {f"{name}_s": timings[name][0] for name in order}
        pairs.append(pair | {f"{name}_minor_faults": timings[name][1] for name in order})
    samples = args.batch * (1 if args.workload == "resnet8" else 64) * args.steps_per_window
    result = {
        "workload": args.workload,
        "trick": args.trick,
        "samples_per_window": samples,
        "threads": torch.get_num_threads(),
        "torch_version": torch.__version__,
        "pairs": pairs,
    }
    with open(args.output, "w") as out:
        json.dump(result, out)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
