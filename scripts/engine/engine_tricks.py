"""The PyTorch engine's tricks that change the network or the process rather than a flag: each
written as PyTorch's documentation and the guides show a user, on parity.py's models.

    jit-fusion           the pointwise chains as torch.jit.script functions (the guide's #18):
                         the ResNet block's epilogue relu(x + shortcut); the GPT's exact GELU and,
                         where it has dropout, its residual dropout-add
    checkpointing        torch.utils.checkpoint.checkpoint (non-reentrant, the generator's state
                         preserved) around every segment of the forward but the last: the stem and
                         each block of the ResNet, each block of the GPT
    fp8-matmul           the GPT's attention and MLP projections (on a user's model, every
                         nn.Linear) through torch._scaled_mm: inputs and weights in float8_e4m3fn,
                         output gradients in float8_e5m2, each scaled per tensor by its format's
                         largest value over its largest magnitude; a bias added after
    expandable-segments  PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True, set before the first
                         CUDA allocation (on a CUDA device: engine_device.py calls it)
"""

import os

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.checkpoint import checkpoint


# ---- jit-fusion ----


def residual_relu(y: torch.Tensor, shortcut: torch.Tensor) -> torch.Tensor:
    return torch.relu(y + shortcut)


def gelu(x: torch.Tensor) -> torch.Tensor:
    return x * 0.5 * (1.0 + torch.erf(x * 0.7071067811865476))


def residual_dropout(residual: torch.Tensor, branch: torch.Tensor, p: float, training: bool) -> torch.Tensor:
    return residual + F.dropout(branch, p, training)


def fuse_pointwise(model):
    """Scripts the model's pointwise chains with torch.jit.script and puts them in place of the
    eager ops; returns the names of the scripted functions."""
    if hasattr(model, "layer1"):
        epilogue = torch.jit.script(residual_relu)
        for block in (*model.layer1, *model.layer2, *model.layer3):
            block.epilogue = epilogue
        return [epilogue.name]
    # Without dropout the eager branch is a plain add, which leaves nothing to fuse; a scripted
    # dropout-add would make it more work, as TorchScript's autodiff draws a mask even at p = 0
    # (trickbench's own loop, likewise, scripts it only where there is dropout).
    activation = torch.jit.script(gelu)
    add = torch.jit.script(residual_dropout) if any(block.p > 0 for block in model.transformer.h) else None
    for block in model.transformer.h:
        block.mlp.activation = activation
        if add is not None and block.p > 0:
            block.residual_dropout = add
    return [activation.name] + ([add.name] if add is not None else [])


# ---- checkpointing ----


def checkpointed(model):
    """The model's forward with every segment but the last run under torch.utils.checkpoint, which
    keeps only the segment's input and recomputes the segment in backward."""
    segments = model.segments()

    def forward(x):
        for segment in segments[:-1]:
            x = checkpoint(segment, x, use_reentrant=False)
        return segments[-1](x)

    return forward


# ---- fp8-matmul ----


def quantise(t, dtype):
    """`t` multiplied by its scale (the format's largest finite value over t's largest magnitude,
    floored at 1e-12), clamped to the format's range and cast; and the scale's inverse, which
    torch._scaled_mm multiplies the product by."""
    largest = torch.finfo(dtype).max
    scale = largest / t.detach().abs().max().float().clamp(min=1e-12)
    return (t.float() * scale).clamp(-largest, largest).to(dtype), scale.reciprocal()


def column_major(t):
    """The 2-d `t` with the same values, laid out column by column (what _scaled_mm's second
    operand must be)."""
    return t.t().contiguous().t()


class Fp8Matmul(torch.autograd.Function):
    """x @ weightᵀ in fp8: e4m3 operands forward, the output gradient in e5m2 backward."""

    @staticmethod
    def forward(ctx, x, weight, out_dtype):
        rows = x.reshape(-1, x.shape[-1])
        xq, x_inverse = quantise(rows, torch.float8_e4m3fn)
        wq, w_inverse = quantise(weight, torch.float8_e4m3fn)
        ctx.save_for_backward(xq, x_inverse, wq, w_inverse)
        ctx.dtypes = (x.dtype, weight.dtype)
        y = torch._scaled_mm(xq, wq.t(), scale_a=x_inverse, scale_b=w_inverse, out_dtype=out_dtype)
        return y.reshape(*x.shape[:-1], weight.shape[0])

    @staticmethod
    def backward(ctx, grad):
        xq, x_inverse, wq, w_inverse = ctx.saved_tensors
        x_dtype, w_dtype = ctx.dtypes
        gq, g_inverse = quantise(grad.reshape(-1, grad.shape[-1]), torch.float8_e5m2)
        grad_x = torch._scaled_mm(gq, column_major(wq), scale_a=g_inverse, scale_b=w_inverse, out_dtype=x_dtype)
        grad_w = torch._scaled_mm(
            gq.t().contiguous(), column_major(xq), scale_a=g_inverse, scale_b=x_inverse, out_dtype=w_dtype
        )
        return grad_x.reshape(*grad.shape[:-1], -1), grad_w, None


class Fp8Linear(nn.Linear):
    """nn.Linear through Fp8Matmul, its output in the dtype of autocast on its device type
    (autocast_device, which the engine's device says: "cuda", or "cpu" for the as-if device's
    stand-in; set by to_fp8) where that is on, else bfloat16; its bias (if any) added in that
    dtype."""

    def forward(self, x):
        autocast = torch.is_autocast_enabled(self.autocast_device)
        out_dtype = torch.get_autocast_dtype(self.autocast_device) if autocast else torch.bfloat16
        y = Fp8Matmul.apply(x, self.weight, out_dtype)
        return y if self.bias is None else y + self.bias.to(out_dtype)


def to_fp8(linears, autocast_device):
    """Makes each of the nn.Linear `linears` an Fp8Linear (same weights) following autocast on
    `autocast_device`; returns how many."""
    for linear in linears:
        linear.__class__ = Fp8Linear
        linear.autocast_device = autocast_device
    return len(linears)


def use_fp8(model, autocast_device):
    """Makes the GPT's attention and MLP projections (which have no biases) Fp8Linear following
    autocast on `autocast_device`; the embedding and the tied head stay as they are. Returns how
    many layers changed."""
    projections = [
        linear
        for block in model.transformer.h
        for linear in (block.attn.c_attn, block.attn.c_proj, block.mlp.c_fc, block.mlp.c_proj)
    ]
    return to_fp8(projections, autocast_device)


# torch._scaled_mm multiplies fp8 operands only when every dimension is a multiple of this.
SCALED_MM_MULTIPLE = 16


def fp8_linears(model):
    """The nn.Linear modules of a user's model that fp8-matmul converts (modules of exactly that
    class: a subclass's forward is its own) whose in and out features are multiples of
    SCALED_MM_MULTIPLE, which torch._scaled_mm needs of its operands in both passes; and those it
    leaves as they are."""
    linears = [m for m in model.modules() if type(m) is nn.Linear]
    multiple = SCALED_MM_MULTIPLE
    fits = [m for m in linears if m.in_features % multiple == 0 and m.out_features % multiple == 0]
    return fits, [m for m in linears if m not in fits]


def use_fp8_everywhere(model, autocast_device):
    """Makes every nn.Linear of a user's model that torch._scaled_mm can multiply through
    (fp8_linears) Fp8Linear following autocast on `autocast_device`. Returns how many layers
    changed and how many were left."""
    fits, left = fp8_linears(model)
    return to_fp8(fits, autocast_device), len(left)


# ---- expandable-segments ----


def user_allocator_conf():
    """The caching allocator's configuration as the environment gives it to PyTorch 2.11:
    PYTORCH_ALLOC_CONF, else PYTORCH_CUDA_ALLOC_CONF (None without either)."""
    return os.environ.get("PYTORCH_ALLOC_CONF", os.environ.get("PYTORCH_CUDA_ALLOC_CONF"))


def allocator_conf(user, expandable):
    """The user's allocator configuration `user` (None: none) with any expandable_segments key
    replaced by expandable_segments:True or :False as `expandable` says, its other keys kept (each
    parse of the settings resets those it does not name). trickbench's libtorch cells build the
    same string (allocator_settings in src/train/mod.rs)."""
    entries = (user or "").split(",")
    kept = [entry for entry in entries if entry.split(":")[0].strip() not in ("", "expandable_segments")]
    return ",".join([*kept, f"expandable_segments:{expandable}"])


def set_expandable_segments(expandable):
    """Sets the CUDA caching allocator's expandable segments on or off, whatever the environment
    said, keeping the environment's other keys: in the environment (both names, as PyTorch reads
    either) and in the allocator's settings. Must run before the first CUDA allocation of the
    process."""
    conf = allocator_conf(user_allocator_conf(), expandable)
    os.environ["PYTORCH_ALLOC_CONF"] = os.environ["PYTORCH_CUDA_ALLOC_CONF"] = conf
    torch._C._accelerator_setAllocatorSettings(conf)
