#!/usr/bin/env python3
"""The user's own network (`trickbench run --model SPEC`): prepared once before a run by the
command below, and built again by the PyTorch engine (pytorch_engine.py imports this module).

SPEC is one of
    FILE.py, FILE.py:FUNCTION     a Python file (relative to the current directory) whose
                                  FUNCTION (default `model`) takes no arguments and returns a
                                  torch.nn.Module; the file may also define
                                    batch(batch_size) -> (inputs, targets), one training batch,
                                    loss(output, targets) -> a scalar tensor (default:
                                      cross-entropy on the output reshaped (-1, C) against the
                                      targets reshaped (-1)),
                                    optimizer(parameters) -> a torch.optim.Optimizer (default:
                                      the case's optimizer, the engine's recipe)
                                    dataset() -> the data its time to accuracy trains and is
                                      tested on (dataset.safetensors below)
    torchvision:NAME, timm:NAME   torchvision.models.get_model(NAME, weights=None),
                                  timm.create_model(NAME, pretrained=False)

    python user_model.py prepare --spec SPEC --batch-size B --image-size S --seed N --batches K --out DIR

(S 224, N 0 and K 4 unless given) builds the module on the CPU in float32 after
torch.manual_seed(N) and writes into DIR:
    weights.safetensors  its initial state_dict, saved before anything runs it (every probe below
                         runs a deep copy); a tensor shared by several names is saved under each
    batches.safetensors  inputs.k and targets.k for k < K: the file's batch(B) called K times
                         after torch.manual_seed(N); else images [B, 3, S, S] float32 from a
                         standard normal and int64 labels uniform in [0, classes), classes being
                         the size of the output's last dimension on 2 images, from a generator
                         seeded N
    model.pt             the module in TorchScript for the libtorch engine: torch.jit.trace on
                         batch 0 in training mode, else torch.jit.script; kept only where, loaded
                         back and run in float64 in training mode from seed N with loss.pt, it
                         gives the eager module's float64 loss on batch 0 to 1e-9 relative
    loss.pt              the loss as a TorchScript module, forward(output, targets) -> the scalar
                         loss (traced on batch 0's output and targets); written with model.pt
    dataset.safetensors  where the file defines dataset() -> ((train inputs, train targets), (test
                         inputs, test targets)), four tensors with the samples as their first
                         dimension (called after torch.manual_seed(N), checked by a forward of two
                         training samples): train.inputs, train.targets, test.inputs, test.targets
    model-no-bias.pt     where model.pt is written and some convolutions with a bias feed only a
                         BatchNorm: the module without those biases, exported and checked the
                         same way (BatchNorm subtracts the batch mean, so in training mode the
                         function is the same)
    model.json           written last (a temporary file, then renamed):
        format 1; spec (as given); source "file" | "torchvision" | "timm"; file (absolute),
        function, file_sha256 (hex) | null for a library; package {name, version} | null for a
        file; name ("mynet.py", "mynet.py:build", "torchvision:resnet18"); class; parameters
        (trainable); batch_size; image_size (null where the file's batch() made the inputs);
        batches; inputs, targets, output: {shape, dtype} of batch 0 and the output on it;
        samples_per_batch (targets.numel(): trickbench's unit of throughput); sample_unit
        "images" (4-d floating or uint8 inputs) | "tokens" (other integer inputs) | "samples";
        flops_per_sample (forward FLOPs of batch 0 by torch.utils.flop_counter.FlopCounterMode,
        a multiply-add 2, over samples_per_batch) | null where counting failed;
        loss "cross-entropy" | "file"; optimizer "recipe" | "file";
        features {convolutions (nn.Conv2d modules), bias_before_batch_norm (those with a bias
        whose output feeds only an nn.BatchNorm2d, found with torch.fx; 0 where fx cannot trace
        the module), bias_before_batch_norm_note (why they could not be looked for) | null, sdpa
        (whether a training step's forward and backward call scaled_dot_product_attention, in
        torch.profiler's events), linears (nn.Linear modules), fp8_linears (those fp8-matmul
        converts: of exactly that class, in and out features multiples of 16), dropout (whether an nn.Dropout*
        module has p > 0)};
        export {method "trace" | "script", loss_float64 (the eager float64 loss on batch 0)} |
        {method null, reason "torch.jit.trace: ...; torch.jit.script: ..." (or why the loss could
        not be traced, or why the module does not train in float64)};
        no_bias_export (whether model-no-bias.pt was written); dataset {train_samples,
        test_samples, inputs, targets: {shape, dtype} of the training split} | null without a
        dataset()
A bad SPEC exits with status 2 and one line on stderr, `trickbench: --model SPEC: <what is
wrong>`, naming the file (or package) and the problem; DIR then holds no model.json. Anything else
written to stderr while preparing is held, and passed on only when the preparation succeeds.

For the engine: load(DIR) -> Prepared (model.json, and the module built again from its SPEC, the
file checked against its SHA-256 first; its weights, batches, loss and optimizer);
remove_bias_before_batch_norm(module); correct(output, targets); BatchData and BatchLoader, the
engine's data and loader of prepared batches. It needs torch (torchvision or timm only where a
SPEC names them), numpy (for the writer) and parity.py's safetensors reader, from beside this
script's folder.
"""

import argparse
import contextlib
import copy
import dataclasses
import difflib
import hashlib
import importlib
import importlib.util
import inspect
import io
import itertools
import json
import math
import os
import re
import struct
import sys
import tempfile
import traceback
import warnings
from pathlib import Path

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.flop_counter import FlopCounterMode

# Nothing written beside the scripts (no __pycache__ in the tree, or in a folder holding a copy).
sys.dont_write_bytecode = True
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "parity"))
import parity  # noqa: E402  (found through the path above)
import engine_tricks  # noqa: E402  (beside this script)

FORMAT = 1
DESCRIPTION_FILE = "model.json"
WEIGHTS_FILE = "weights.safetensors"
BATCHES_FILE = "batches.safetensors"
EXPORT_FILE = "model.pt"
LOSS_FILE = "loss.pt"
NO_BIAS_EXPORT_FILE = "model-no-bias.pt"
DATASET_FILE = "dataset.safetensors"
DEFAULT_FUNCTION = "model"
ACCEPTED = "FILE.py, FILE.py:FUNCTION, torchvision:NAME or timm:NAME"
# Images of the forward that finds a library model's classes.
PROBE_IMAGES = 2
# Relative difference allowed between an export's float64 loss and the eager module's.
EXPORT_TOLERANCE = 1e-9
SAFETENSORS_NAMES = {dtype: name for name, dtype in parity.SAFETENSORS_DTYPES.items()}
# Module names the user's files are imported under, one each.
IMPORTED = itertools.count()


class ModelError(Exception):
    """The SPEC, its file or a prepared folder is not what it must be; the message names the file
    (or package) and what is wrong."""


# ---- The SPEC ----


@dataclasses.dataclass
class Source:
    """Where the module comes from: a file and its function, or a library's model name."""

    spec: str
    kind: str  # "file", "torchvision" or "timm"
    file: str | None = None  # absolute
    function: str | None = None
    named_function: bool = False  # the SPEC named the function
    model_name: str | None = None  # a library's


def parse_spec(spec):
    """The Source a SPEC names; ModelError where it is none of the accepted forms."""
    if spec.endswith(".py"):
        return Source(spec, "file", os.path.abspath(spec), DEFAULT_FUNCTION)
    head, colon, tail = spec.rpartition(":")
    if colon and head.endswith(".py"):
        if not tail.isidentifier():
            raise ModelError(f"{tail!r} is not a Python function name (expected {ACCEPTED})")
        return Source(spec, "file", os.path.abspath(head), tail, named_function=True)
    if colon and re.fullmatch(r"[A-Za-z_][\w-]*", head):
        if head not in LIBRARIES:
            raise ModelError(f"unknown model source {head!r}: expected {ACCEPTED}")
        if not tail:
            raise ModelError(f"no model name after {head}: (expected {ACCEPTED})")
        return Source(spec, head, model_name=tail)
    raise ModelError(f"not a model SPEC: expected {ACCEPTED}")


def first_line(error):
    """The error's type and the first non-empty line of its message."""
    message = error.msg if isinstance(error, SyntaxError) else str(error)
    lines = [line.strip() for line in message.splitlines() if line.strip()]
    return f"{type(error).__name__}: {lines[0]}" if lines else type(error).__name__


def line_in(error, file):
    """Where in the user's `file` the error was raised, as " (line N of FILE)", or ""."""
    if file is None:
        return ""
    if isinstance(error, SyntaxError) and error.filename == file and error.lineno:
        return f" (line {error.lineno} of {file})"
    lines = [frame.lineno for frame in traceback.extract_tb(error.__traceback__) if frame.filename == file]
    return f" (line {lines[-1]} of {file})" if lines else ""


def kind_of(value):
    """A short description of a value's type, for messages: "a tuple of (Tensor, int)"."""
    if value is None:
        return "None"
    name = type(value).__name__
    article = "an" if name[0].lower() in "aeiou" else "a"
    if isinstance(value, (tuple, list)):
        return f"{article} {name} of ({', '.join(type(v).__name__ for v in value)})"
    return f"{article} {name}"


def tensor_text(tensor):
    """A tensor's dtype and shape, for messages: "float32 [2, 3, 224, 224]"."""
    return f"{dtype_name(tensor.dtype)} {list(tensor.shape)}"


def dtype_name(dtype):
    """PyTorch's name of a dtype without its module: "float32"."""
    return str(dtype).removeprefix("torch.")


# ---- The module and its functions ----


# Each library: the function listing its model names, how messages name that function, and how a
# model is built.
LIBRARIES = {
    "torchvision": (
        lambda package: package.models.list_models(),
        "torchvision.models.list_models()",
        lambda package, name: package.models.get_model(name, weights=None),
    ),
    "timm": (
        lambda package: package.list_models(),
        "timm.list_models()",
        lambda package, name: package.create_model(name, pretrained=False),
    ),
}


@dataclasses.dataclass
class Resolved:
    """A Source made usable: the function that builds the module, the file's optional batch, loss
    and optimizer functions, and how messages name where the module comes from."""

    source: Source
    build: object
    batch: object = None
    loss: object = None
    optimizer: object = None
    dataset: object = None
    package: dict | None = None
    file_sha256: str | None = None

    @property
    def label(self):
        """The prefix of messages about the module: its file, or nothing for a library's (the
        SPEC names it)."""
        return f"{self.source.file}: " if self.source.file else ""

    def call(self, what, function, *args):
        """The user's `function` called with `args`; an exception it raises becomes a ModelError
        saying `what` raised it, and where in the user's file."""
        try:
            return function(*args)
        except Exception as e:
            raise ModelError(f"{self.label}{what} raised {first_line(e)}{line_in(e, self.source.file)}") from None

    def loss_function(self):
        """The loss: the file's loss(output, targets), else cross-entropy."""
        return self.loss if self.loss is not None else cross_entropy

    def build_module(self):
        """The module built by the SPEC's function, on the CPU in float32."""
        what = f"{self.source.function}()" if self.source.file else f"building {self.source.spec}"
        module = self.call(what, self.build)
        if not isinstance(module, nn.Module):
            raise ModelError(f"{self.label}{what} returned {kind_of(module)}, not a torch.nn.Module")
        return module.cpu().float()


def resolve(source):
    """The Resolved of a Source: its file imported, or its library imported and the name found."""
    if source.kind != "file":
        return resolve_library(source)
    module = import_file(source.file)
    build = vars(module).get(source.function)
    if not callable(build):
        names = [n for n, v in vars(module).items() if inspect.isfunction(v) and v.__module__ == module.__name__]
        listed = ", ".join(names) if names else "none"
        raise ModelError(f"{source.file} defines no function {source.function}() (its functions: {listed})")
    optional = {name: vars(module).get(name) for name in ("batch", "loss", "optimizer", "dataset")}
    optional = {name: f if callable(f) else None for name, f in optional.items()}
    return Resolved(source, build, **optional, file_sha256=sha256_of(source.file))


def import_file(path):
    """The user's file imported as a module of its own, its folder first on sys.path so that it
    can import the files beside it."""
    if not os.path.isfile(path):
        raise ModelError(f"{path}: no such file")
    name = f"trickbench_user_model_{next(IMPORTED)}"
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    folder = os.path.dirname(path)
    if folder not in sys.path:
        sys.path.insert(0, folder)
    try:
        spec.loader.exec_module(module)
    except Exception as e:
        del sys.modules[name]
        raise ModelError(f"{path}: importing it raised {first_line(e)}{line_in(e, path)}") from None
    return module


def sha256_of(path):
    """The hex SHA-256 of the file's bytes."""
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


def resolve_library(source):
    """The Resolved of a library's model: the package imported, the name among its models."""
    try:
        package = importlib.import_module(source.kind)
    except Exception as e:
        raise ModelError(
            f"{source.kind} is not importable by {sys.executable} ({first_line(e)}): pip install {source.kind}"
        ) from None
    list_models, lister, build = LIBRARIES[source.kind]
    names = list_models(package)
    if source.model_name not in names:
        close = difflib.get_close_matches(source.model_name, names, n=5)
        hint = f"close names: {', '.join(close)}" if close else f"none is close; {lister} lists its {len(names)}"
        raise ModelError(f"{source.kind} has no model {source.model_name!r} ({hint})")
    version = {"name": source.kind, "version": str(getattr(package, "__version__", "unknown"))}
    return Resolved(source, lambda: build(package, source.model_name), package=version)


def cross_entropy(output, targets):
    """The default loss: mean cross-entropy of the output reshaped (-1, classes) against the targets
    reshaped (-1)."""
    return F.cross_entropy(output.reshape(-1, output.size(-1)), targets.reshape(-1))


def correct(output, targets):
    """The correct predictions of a batch, on the device: (output.argmax(-1) == targets).sum() where
    the output is floating with shape targets.shape + [C] and the targets are integer; else a
    zero int64 tensor."""
    classified = (
        output.is_floating_point()
        and not targets.is_floating_point()
        and output.dim() == targets.dim() + 1
        and output.shape[:-1] == targets.shape
    )
    if classified:
        return (output.argmax(-1) == targets).sum()
    return torch.zeros((), dtype=torch.int64, device=output.device)


def convolutions_before_batch_norm(module):
    """The nn.Conv2d modules with a bias whose every call's output feeds only an nn.BatchNorm2d, as
    torch.fx traces the module; and why they could not be looked for (None where they could)."""
    modules = dict(module.named_modules())
    if not any(isinstance(m, nn.Conv2d) and m.bias is not None for m in modules.values()):
        return [], None
    try:
        graph = torch.fx.symbolic_trace(module).graph
    except Exception as e:
        return [], f"torch.fx cannot trace the module: {first_line(e)}"
    only_batch_norm = {}
    for node in graph.nodes:
        conv = modules.get(node.target) if node.op == "call_module" else None
        if not isinstance(conv, nn.Conv2d) or conv.bias is None:
            continue
        users = list(node.users)
        feeds = (
            len(users) == 1
            and users[0].op == "call_module"
            and isinstance(modules.get(users[0].target), nn.BatchNorm2d)
        )
        only_batch_norm[node.target] = only_batch_norm.get(node.target, True) and feeds
    return [modules[name] for name, only in only_batch_norm.items() if only], None


def remove_bias_before_batch_norm(module):
    """Sets to None, in place, the bias of each convolution that feeds only a BatchNorm (the ones
    prepare counts); returns how many it removed."""
    convolutions, _ = convolutions_before_batch_norm(module)
    for conv in convolutions:
        conv.bias = None
    return len(convolutions)


# ---- Safetensors ----


def write_safetensors(path, tensors):
    """Writes `tensors` ({name: tensor}) as safetensors: an 8-byte little-endian header length, a
    JSON header of {name: {dtype, shape, data_offsets}} padded with spaces to a multiple of 8
    bytes, then each tensor's raw little-endian bytes in turn."""
    assert sys.byteorder == "little", "the raw data below is the host's byte order"
    header, chunks, offset = {}, [], 0
    for name, tensor in tensors.items():
        tensor = tensor.detach().cpu().contiguous()
        if tensor.dtype not in SAFETENSORS_NAMES:
            raise ModelError(f"{path}: {name} is a {dtype_name(tensor.dtype)} tensor, which this writer cannot hold")
        data = tensor.reshape(-1).view(torch.uint8).numpy().tobytes()
        header[name] = {
            "dtype": SAFETENSORS_NAMES[tensor.dtype],
            "shape": list(tensor.shape),
            "data_offsets": [offset, offset + len(data)],
        }
        chunks.append(data)
        offset += len(data)
    encoded = json.dumps(header).encode()
    encoded += b" " * (-len(encoded) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(encoded)) + encoded)
        for chunk in chunks:
            f.write(chunk)


def read_safetensors(path):
    """Every tensor of a safetensors file (parity.py's reader); ModelError where it cannot be read."""
    captured = io.StringIO()
    try:
        with contextlib.redirect_stderr(captured):
            return parity.read_safetensors(path)
    except SystemExit:
        raise ModelError(captured.getvalue().strip().removeprefix("parity.py: error: ")) from None


# ---- The batches ----


def file_batches(resolved, batch_size, seed, count):
    """`count` batches from the file's batch(batch_size), called after torch.manual_seed(seed)."""
    torch.manual_seed(seed)
    what = f"batch({batch_size})"
    batches = []
    for _ in range(count):
        value = resolved.call(what, resolved.batch, batch_size)
        if not (isinstance(value, (tuple, list)) and len(value) == 2 and all(torch.is_tensor(t) for t in value)):
            raise ModelError(f"{resolved.label}{what} returned {kind_of(value)}, not two tensors (inputs, targets)")
        inputs, targets = (t.detach().cpu().contiguous() for t in value)
        if inputs.dim() == 0 or targets.dim() == 0 or {inputs.shape[0], targets.shape[0]} != {batch_size}:
            raise ModelError(
                f"{resolved.label}{what} returned inputs {tensor_text(inputs)} and targets {tensor_text(targets)}: "
                f"the first dimension of each must be the batch size, {batch_size}"
            )
        batches.append((inputs, targets))
    return batches


def image_batches(resolved, module, batch_size, image_size, seed, count):
    """`count` batches of standard normal images [batch_size, 3, image_size, image_size] and int64
    labels uniform below the size of the output's last dimension, from a generator seeded `seed`."""
    probe = torch.randn(PROBE_IMAGES, 3, image_size, image_size, generator=torch.Generator().manual_seed(seed))
    with torch.no_grad():
        output = run_forward(resolved, copy.deepcopy(module).train(), probe, seed)
    if output.dim() < 2:
        raise ModelError(
            f"{resolved.label}the model's output on {PROBE_IMAGES} images is {tensor_text(output)}: without a batch() "
            "function the output must be [images, classes]"
        )
    classes = output.shape[-1]
    generator = torch.Generator().manual_seed(seed)
    shape = (batch_size, 3, image_size, image_size)
    return [
        (torch.randn(shape, generator=generator), torch.randint(classes, (batch_size,), generator=generator))
        for _ in range(count)
    ]


def run_forward(resolved, module, inputs, seed):
    """The module's output on `inputs` after torch.manual_seed(seed); ModelError where the module
    rejects them or returns no tensor."""
    torch.manual_seed(seed)
    try:
        output = module(inputs)
    except Exception as e:
        where = line_in(e, resolved.source.file)
        raise ModelError(
            f"{resolved.label}the model rejects its input batch ({tensor_text(inputs)}): {first_line(e)}{where}"
        ) from None
    if not torch.is_tensor(output):
        raise ModelError(f"{resolved.label}the model returned {kind_of(output)}, not a tensor")
    return output


@dataclasses.dataclass
class BatchData:
    """Prepared batches held in host memory: inputs.k and targets.k for each k."""

    inputs: list
    targets: list

    @property
    def samples_per_batch(self):
        """The samples of one batch as trickbench counts them: its targets' elements."""
        return self.targets[0].numel()


def batch_data(tensors, path, batches):
    """The first `batches` batches of a batches file's tensors (read from `path`); ModelError where
    one is missing or its inputs and targets differ in their first dimension."""
    inputs, targets = [], []
    for k in range(batches):
        names = (f"inputs.{k}", f"targets.{k}")
        missing = [name for name in names if name not in tensors]
        if missing:
            raise ModelError(f"{path}: no tensor {missing[0]} (the case says it holds {batches} batches)")
        x, y = (tensors[name] for name in names)
        if x.dim() == 0 or y.dim() == 0 or x.shape[0] != y.shape[0]:
            raise ModelError(f"{path}: inputs.{k} {tensor_text(x)} and targets.{k} {tensor_text(y)} differ in samples")
        inputs.append(x)
        targets.append(y)
    return BatchData(inputs, targets)


class BatchLoader:
    """The PyTorch engine's loader of prepared batches (engine_loader.Loader's interface): batch
    k mod K from host memory at step k, placed on the device inside the step."""

    def __init__(self, data, device, dtype, channels_last):
        self.data, self.device, self.dtype, self.channels_last = data, device, dtype, channels_last
        self.samples_per_batch = data.samples_per_batch
        self.next = 0

    def next_host(self):
        """The next batch, on the host."""
        k = self.next % len(self.data.inputs)
        self.next += 1
        return self.data.inputs[k], self.data.targets[k]

    def place(self, batch):
        """A host batch on the device: floating tensors in the case's dtype, 4-d floating inputs
        in channels_last under channels-last."""
        inputs, targets = batch
        layout = torch.preserve_format
        if self.channels_last and inputs.dim() == 4 and inputs.is_floating_point():
            layout = torch.channels_last
        x = inputs.to(self.device, self.dtype if inputs.is_floating_point() else None, memory_format=layout)
        y = targets.to(self.device, self.dtype if targets.is_floating_point() else None)
        return x, y

    def first(self):
        """Batch 0 placed on the device, without advancing."""
        return self.place((self.data.inputs[0], self.data.targets[0]))

    def facts(self):
        """How batches are loaded, for checks: None, there is no data loader."""
        return None

    def close(self):
        """Nothing to stop: no worker processes."""


# ---- Preparing ----


@contextlib.contextmanager
def silenced():
    """Discards what is written to stderr (file descriptor 2) while inside: the profiler's notes
    (on a machine without a GPU, that it sees none)."""
    sys.stderr.flush()
    saved = os.dup(2)
    null = os.open(os.devnull, os.O_WRONLY)
    os.dup2(null, 2)
    os.close(null)
    try:
        yield
    finally:
        sys.stderr.flush()
        os.dup2(saved, 2)
        os.close(saved)


def check_copyable(resolved, module):
    """ModelError unless the module can be deep-copied: every probe runs a copy."""
    try:
        copy.deepcopy(module)
    except Exception as e:
        why = first_line(e)
        raise ModelError(f"{resolved.label}the model cannot be deep-copied: copy.deepcopy raised {why}") from None


def checked_loss(resolved, output, targets):
    """The loss of the output against the targets; ModelError unless it is a finite
    floating-point scalar tensor."""
    what = "loss(output, targets)" if resolved.loss is not None else "the cross-entropy loss"
    loss = resolved.call(what, resolved.loss_function(), output, targets)
    if not torch.is_tensor(loss) or loss.dim() != 0 or not loss.is_floating_point():
        got = tensor_text(loss) if torch.is_tensor(loss) else kind_of(loss)
        raise ModelError(f"{resolved.label}{what} gave {got}, not a finite scalar tensor")
    if not math.isfinite(loss.item()):
        raise ModelError(f"{resolved.label}{what} is {loss.item()} on batch 0, not a finite scalar")
    return loss


def probe_step(resolved, module, batch, seed):
    """A training step's forward, loss and backward on batch 0 (a deep copy of the module), under
    torch.profiler: the output, and whether scaled_dot_product_attention ran."""
    inputs, targets = batch
    trained = copy.deepcopy(module).train()
    activities = [torch.profiler.ProfilerActivity.CPU]
    with silenced(), torch.profiler.profile(activities=activities) as profiler:
        output = run_forward(resolved, trained, inputs, seed)
        loss = checked_loss(resolved, output, targets)
        resolved.call("the loss's backward", loss.backward)
    names = {event.name for event in profiler.events()}
    sdpa = any(n == "aten::scaled_dot_product_attention" or n.startswith("aten::_scaled_dot_product_") for n in names)
    return output.detach(), sdpa


def check_optimizer(resolved, module):
    """ModelError unless the file's optimizer(parameters), where it has one, returns a
    torch.optim.Optimizer."""
    if resolved.optimizer is None:
        return
    optimizer = resolved.call("optimizer(parameters)", resolved.optimizer, list(copy.deepcopy(module).parameters()))
    if not isinstance(optimizer, torch.optim.Optimizer):
        got = kind_of(optimizer)
        raise ModelError(f"{resolved.label}optimizer(parameters) returned {got}, not a torch.optim.Optimizer")


def features_of(module, sdpa):
    """What the module is built of (model.json's features)."""
    convolutions, note = convolutions_before_batch_norm(module)
    return {
        "convolutions": sum(isinstance(m, nn.Conv2d) for m in module.modules()),
        "bias_before_batch_norm": len(convolutions),
        "bias_before_batch_norm_note": note,
        "sdpa": sdpa,
        "linears": sum(isinstance(m, nn.Linear) for m in module.modules()),
        "fp8_linears": len(engine_tricks.fp8_linears(module)[0]),
        "dropout": any(isinstance(m, nn.modules.dropout._DropoutNd) and m.p > 0 for m in module.modules()),
    }


def flops_per_sample(module, inputs, samples, seed):
    """Forward FLOPs of `inputs` (a deep copy in training mode, as FlopCounterMode counts them)
    per sample; None where counting fails."""
    counted = copy.deepcopy(module).train()
    counter = FlopCounterMode(display=False)
    try:
        torch.manual_seed(seed)
        with torch.no_grad(), counter:
            counted(inputs)
    except Exception:
        return None
    return counter.get_total_flops() / samples


# ---- TorchScript ----


class LossModule(nn.Module):
    """The loss as a module: forward(output, targets) is the scalar loss."""

    def __init__(self, function):
        super().__init__()
        self.function = function

    def forward(self, output, targets):
        return self.function(output, targets)


class ExportMismatch(Exception):
    """An export runs but does not reproduce the eager module's loss."""


def saved(scripted):
    """A TorchScript module's bytes, as torch.jit.save writes them."""
    buffer = io.BytesIO()
    torch.jit.save(scripted, buffer)
    return buffer.getvalue()


def float64(batch):
    """A batch with its floating tensors in float64."""
    return tuple(t.double() if t.is_floating_point() else t for t in batch)


def eager_float64_loss(module, loss_function, batch, seed):
    """The loss of a deep copy of the module in float64, in training mode, on `batch`, after
    torch.manual_seed(seed)."""
    model = copy.deepcopy(module).double().train()
    inputs, targets = float64(batch)
    torch.manual_seed(seed)
    return float(loss_function(model(inputs), targets))


def export_loss(loss_function, output, targets):
    """loss.pt's bytes: the loss traced on `output` and `targets`."""
    return saved(torch.jit.trace(LossModule(loss_function), (output, targets), check_trace=False))


def torchscript(module, inputs, method):
    """A deep copy of the module in TorchScript, traced on `inputs` in training mode or scripted,
    with the module's state from before the trace ran it (BatchNorm's statistics)."""
    copied = copy.deepcopy(module).train()
    if method == "script":
        return torch.jit.script(copied)
    traced = torch.jit.trace(copied, (inputs,), check_trace=False)
    copied.load_state_dict(module.state_dict())  # the trace holds the copy's very tensors
    return traced


def check_reproduces(export, loss_bytes, batch, seed, eager):
    """Loads an export and the loss export back, runs them in float64 in training mode on `batch`
    after torch.manual_seed(seed); ExportMismatch unless their loss is `eager` to
    EXPORT_TOLERANCE."""
    model = torch.jit.load(io.BytesIO(export)).double().train()
    loss = torch.jit.load(io.BytesIO(loss_bytes))
    inputs, targets = float64(batch)
    torch.manual_seed(seed)
    got = float(loss(model(inputs), targets))
    if not abs(got - eager) <= EXPORT_TOLERANCE * abs(eager):
        raise ExportMismatch(f"its float64 loss {got!r} is not the eager module's {eager!r}")


def export_module(module, loss_function, loss_bytes, batch, seed):
    """The module's export: {"method", "loss_float64"} and its bytes, from torch.jit.trace, else
    torch.jit.script, the first that reproduces the eager float64 loss; or {"method": None,
    "reason"} and None."""
    try:
        eager = eager_float64_loss(module, loss_function, batch, seed)
    except Exception as e:
        reason = f"the module does not train in float64, which the export's check needs: {first_line(e)}"
        return {"method": None, "reason": reason}, None
    reasons = []
    for method in ("trace", "script"):
        try:
            export = saved(torchscript(module, batch[0], method))
            check_reproduces(export, loss_bytes, batch, seed, eager)
        except ExportMismatch as e:
            reasons.append(f"torch.jit.{method}: {e}")
        except Exception as e:
            reasons.append(f"torch.jit.{method}: {first_line(e)}")
        else:
            return {"method": method, "loss_float64": eager}, export
    return {"method": None, "reason": "; ".join(reasons)}, None


def write_exports(resolved, module, output, batch, seed, out, biased):
    """Writes model.pt and loss.pt, and model-no-bias.pt where `biased` (convolutions with a bias
    feed only a BatchNorm); returns model.json's export and no_bias_export."""
    loss_function = resolved.loss_function()
    try:
        loss_bytes = export_loss(loss_function, output, batch[1])
    except Exception as e:
        return {"method": None, "reason": f"the loss: torch.jit.trace: {first_line(e)}"}, False
    export, data = export_module(module, loss_function, loss_bytes, batch, seed)
    if data is None:
        return export, False
    write_file(os.path.join(out, EXPORT_FILE), data)
    write_file(os.path.join(out, LOSS_FILE), loss_bytes)
    if not biased:
        return export, False
    stripped = copy.deepcopy(module)
    remove_bias_before_batch_norm(stripped)
    _, data = export_module(stripped, loss_function, loss_bytes, batch, seed)
    if data is not None:
        write_file(os.path.join(out, NO_BIAS_EXPORT_FILE), data)
    return export, data is not None


def write_file(path, data):
    """Writes bytes to `path`."""
    with open(path, "wb") as f:
        f.write(data)


# ---- prepare ----


DATASET_SHAPE = "((train inputs, train targets), (test inputs, test targets)), four tensors"


def dataset_splits(resolved):
    """The file's dataset() as [(split, inputs, targets)] for "train" and "test", on the CPU;
    ModelError where it is not DATASET_SHAPE with samples as every tensor's first dimension."""
    value = resolved.call("dataset()", resolved.dataset)
    pairs = value if isinstance(value, (tuple, list)) and len(value) == 2 else None
    if pairs is None or not all(
        isinstance(p, (tuple, list)) and len(p) == 2 and all(torch.is_tensor(t) for t in p) for p in pairs
    ):
        raise ModelError(f"{resolved.label}dataset() returned {kind_of(value)}, not {DATASET_SHAPE}")
    splits = []
    for split, (inputs, targets) in zip(("train", "test"), pairs):
        inputs, targets = (t.detach().cpu().contiguous() for t in (inputs, targets))
        if inputs.dim() == 0 or targets.dim() == 0 or inputs.shape[0] != targets.shape[0] or inputs.shape[0] == 0:
            raise ModelError(
                f"{resolved.label}dataset()'s {split} inputs {tensor_text(inputs)} and targets "
                f"{tensor_text(targets)}: each needs the same number of samples, at least one, as its first dimension"
            )
        splits.append((split, inputs, targets))
    (_, train_x, train_y), (_, test_x, test_y) = splits
    if train_x.shape[1:] != test_x.shape[1:] or train_y.shape[1:] != test_y.shape[1:]:
        raise ModelError(
            f"{resolved.label}dataset()'s train and test samples differ in shape: inputs {tensor_text(train_x)} and "
            f"{tensor_text(test_x)}, targets {tensor_text(train_y)} and {tensor_text(test_y)}"
        )
    return splits


def write_dataset(resolved, module, out, seed):
    """Where the file defines dataset(): its splits written to DATASET_FILE in `out` (train.inputs,
    train.targets, test.inputs, test.targets) after the module is checked to take two of its
    samples (from seed `seed`); returns model.json's "dataset" field, or None without one."""
    if resolved.dataset is None:
        return None
    torch.manual_seed(seed)
    splits = dataset_splits(resolved)
    train_inputs, train_targets = splits[0][1], splits[0][2]
    probe = copy.deepcopy(module).train()
    with torch.no_grad():
        run_forward(resolved, probe, train_inputs[:2], seed)
    named = {f"{split}.{part}": t for split, x, y in splits for part, t in (("inputs", x), ("targets", y))}
    write_safetensors(os.path.join(out, DATASET_FILE), named)
    return {
        "train_samples": train_inputs.shape[0],
        "test_samples": splits[1][1].shape[0],
        "inputs": {"shape": list(train_inputs.shape), "dtype": dtype_name(train_inputs.dtype)},
        "targets": {"shape": list(train_targets.shape), "dtype": dtype_name(train_targets.dtype)},
    }


def make_batches(resolved, module, args):
    """The prepared batches: the file's batch(), else images."""
    if resolved.batch is not None:
        return file_batches(resolved, args.batch_size, args.seed, args.batches)
    return image_batches(resolved, module, args.batch_size, args.image_size, args.seed, args.batches)


def prepare(args):
    """Prepares the SPEC into args.out (the module docstring says what is written); ModelError
    where the SPEC is bad."""
    description_path = os.path.join(args.out, DESCRIPTION_FILE)
    with contextlib.suppress(FileNotFoundError):
        os.remove(description_path)
    resolved = resolve(parse_spec(args.spec))
    torch.manual_seed(args.seed)
    module = resolved.build_module()
    check_copyable(resolved, module)
    os.makedirs(args.out, exist_ok=True)
    write_safetensors(os.path.join(args.out, WEIGHTS_FILE), module.state_dict())
    batches = make_batches(resolved, module, args)
    output, sdpa = probe_step(resolved, module, batches[0], args.seed)
    check_optimizer(resolved, module)
    named = {f"{part}.{k}": t for k, batch in enumerate(batches) for part, t in zip(("inputs", "targets"), batch)}
    write_safetensors(os.path.join(args.out, BATCHES_FILE), named)
    features = features_of(module, sdpa)
    biased = features["bias_before_batch_norm"] > 0
    export, no_bias = write_exports(resolved, module, output, batches[0], args.seed, args.out, biased)
    dataset = write_dataset(resolved, module, args.out, args.seed)
    samples = batches[0][1].numel()
    description = {
        **source_fields(resolved),
        "class": type(module).__name__,
        "parameters": sum(p.numel() for p in module.parameters() if p.requires_grad),
        "batch_size": args.batch_size,
        "image_size": None if resolved.batch is not None else args.image_size,
        "batches": args.batches,
        **shape_fields(batches[0], output),
        "flops_per_sample": flops_per_sample(module, batches[0][0], samples, args.seed),
        "loss": "cross-entropy" if resolved.loss is None else "file",
        "optimizer": "recipe" if resolved.optimizer is None else "file",
        "features": features,
        "export": export,
        "no_bias_export": no_bias,
        "dataset": dataset,
    }
    temporary = description_path + ".partial"
    with open(temporary, "w") as f:
        json.dump(description, f, indent=1)
    os.replace(temporary, description_path)
    return description


def source_fields(resolved):
    """model.json's fields saying where the module comes from."""
    s = resolved.source
    if s.file is None:
        name = s.spec
    else:
        name = os.path.basename(s.file) + (f":{s.function}" if s.named_function else "")
    return {
        "format": FORMAT,
        "spec": s.spec,
        "source": s.kind,
        "file": s.file,
        "function": s.function,
        "file_sha256": resolved.file_sha256,
        "package": resolved.package,
        "name": name,
    }


def shape_fields(batch, output):
    """model.json's fields on the shapes of batch 0 and the output, and what a sample is."""
    inputs, targets = batch
    if inputs.dim() == 4 and (inputs.is_floating_point() or inputs.dtype == torch.uint8):
        unit = "images"
    elif not inputs.is_floating_point() and not inputs.is_complex() and inputs.dtype != torch.bool:
        unit = "tokens"
    else:
        unit = "samples"
    return {
        "inputs": {"shape": list(inputs.shape), "dtype": dtype_name(inputs.dtype)},
        "targets": {"shape": list(targets.shape), "dtype": dtype_name(targets.dtype)},
        "output": {"shape": list(output.shape), "dtype": dtype_name(output.dtype)},
        "samples_per_batch": targets.numel(),
        "sample_unit": unit,
    }


# ---- For the engine ----


@dataclasses.dataclass
class Prepared:
    """A prepared folder: its model.json, and its SPEC resolved again on first need."""

    dir: str
    description: dict
    resolved: Resolved | None = None

    @property
    def features(self):
        """model.json's features."""
        return self.description["features"]

    def source(self):
        """The SPEC resolved again: the file (unchanged since prepare, by its SHA-256) imported,
        or the library's model found."""
        if self.resolved is None:
            d = self.description
            if d["source"] == "file":
                check_unchanged(d)
                source = Source(d["spec"], "file", d["file"], d["function"])
            else:
                source = Source(d["spec"], d["source"], model_name=d["spec"].partition(":")[2])
            self.resolved = resolve(source)
        return self.resolved

    def build(self):
        """A fresh module from the SPEC, on the CPU in float32 (its weights are the builder's:
        load_weights puts the prepared ones in)."""
        return self.source().build_module()

    def load_weights(self, module, path=None):
        """Loads a weights file (the prepared one by default) into the module, strictly."""
        path = path or os.path.join(self.dir, WEIGHTS_FILE)
        try:
            module.load_state_dict(read_safetensors(path), strict=True)
        except RuntimeError as e:
            raise ModelError(f"{path}: the weights do not fit the model: {first_line(e)}") from None

    def batches(self):
        """The prepared batches, as BatchData."""
        path = os.path.join(self.dir, BATCHES_FILE)
        return batch_data(read_safetensors(path), path, self.description["batches"])

    def loss(self):
        """The loss function: the file's loss(output, targets), else cross_entropy."""
        return self.source().loss_function()

    def optimizer(self):
        """The file's optimizer(parameters), or None (the case's optimizer)."""
        return self.source().optimizer


def rebuilt(optimizer, options):
    """The optimizer made again with `options` ({"fused": True}, say) over its defaults: its class
    on its parameter groups (less those options), with the defaults its class takes as
    arguments; the optimizer itself where there are no options."""
    if not options:
        return optimizer
    accepted = inspect.signature(type(optimizer)).parameters
    defaults = {k: v for k, v in {**optimizer.defaults, **options}.items() if k in accepted}
    groups = [{k: v for k, v in group.items() if k not in options} for group in optimizer.param_groups]
    return type(optimizer)(groups, **defaults)


def check_unchanged(description):
    """ModelError unless the model file still has the SHA-256 it was prepared with."""
    path = description["file"]
    try:
        digest = sha256_of(path)
    except OSError as e:
        raise ModelError(f"{path}: {e.strerror} (the model was prepared from it)") from None
    if digest != description["file_sha256"]:
        raise ModelError(
            f"{path} changed since the model was prepared from it (SHA-256 {description['file_sha256'][:12]}…, "
            f"now {digest[:12]}…): prepare it again"
        )


def load(directory):
    """The prepared folder `directory`: its model.json read (format FORMAT)."""
    path = os.path.join(directory, DESCRIPTION_FILE)
    try:
        with open(path) as f:
            description = json.load(f)
    except OSError as e:
        raise ModelError(f"{path}: {e.strerror} (a prepared model's folder holds it)") from None
    except ValueError as e:
        raise ModelError(f"{path}: not JSON ({e})") from None
    if not isinstance(description, dict) or description.get("format") != FORMAT:
        raise ModelError(f"{path}: not a model.json of format {FORMAT}")
    return Prepared(directory, description)


# ---- The command ----


def parse_args(argv):
    """The command line: `prepare` and its flags."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    commands = parser.add_subparsers(dest="command", required=True)
    prepare_command = commands.add_parser("prepare", help="prepare a SPEC into a folder")
    prepare_command.add_argument("--spec", required=True, help=f"the model: {ACCEPTED}")
    prepare_command.add_argument("--batch-size", type=positive, required=True, help="samples per batch")
    prepare_command.add_argument("--image-size", type=positive, default=224, help="side of the images made (224)")
    prepare_command.add_argument("--seed", type=int, default=0, help="seed of the weights and batches (0)")
    prepare_command.add_argument("--batches", type=positive, default=4, help="batches prepared (4)")
    prepare_command.add_argument("--out", required=True, help="the folder to write")
    return parser.parse_args(argv)


def positive(text):
    """An integer ≥ 1, for argparse."""
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected an integer ≥ 1, got {text}")
    return value


def main(argv=None):
    """Runs the command; returns its exit status (2: a bad SPEC, said in one line on stderr)."""
    args = parse_args(argv)
    sys.stderr.flush()
    held, real = tempfile.TemporaryFile(), os.dup(2)
    os.dup2(held.fileno(), 2)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            prepare(args)
        failure = None
    except ModelError as e:
        failure = " ".join(str(e).split())
    finally:
        sys.stderr.flush()
        os.dup2(real, 2)
        os.close(real)
    if failure is not None:
        print(f"trickbench: --model {args.spec}: {failure}", file=sys.stderr)
        return 2
    held.seek(0)
    sys.stderr.write(held.read().decode(errors="replace"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
