#!/usr/bin/env python3
"""Checks the user's-own-model support (user_model.py, and the PyTorch engine's user sides) on the
CPU: `python scripts/engine/check_user_model.py`.

It prepares examples/cnn.py, examples/transformer.py and torchvision:resnet18 on 32×32 images
(the last skipped with a note where torchvision is not importable) with `user_model.py prepare`,
and small model files written into a temporary directory, checking:

- model.json: exactly its fields; where the model came from; its shapes; its parameters (the
  module's count); its features (the CNN's convolutions and their biases before a BatchNorm, the
  transformer's scaled_dot_product_attention and linears, resnet18's bias-free convolutions, a
  model torch.fx cannot trace);
- the files: weights.safetensors is the module's initial state_dict, batches.safetensors the
  file's batch() after the seed (or the seeded images), model.pt and loss.pt reproduce the eager
  float64 loss recorded, which the eager module gives; model-no-bias.pt lacks the biases and
  gives the same loss;
- the exports: torch.jit.script where a trace does not reproduce the loss, and none, with both
  reasons, where neither method does;
- bad SPECs: exit status 2, one line on stderr naming the file (or package) and what is wrong,
  no model.json left behind; a file changed since prepare is refused when the engine builds it;
- the engine on user sides (a case of the `batches` data kind): training with finite losses
  and samples counted as targets; channels-last's layouts; no-bias-before-bn's biases removed and
  its float64 losses those of the reference (and of the other tricks that keep the arithmetic);
  fused-optimizer's fused optimizer, the file's own included (and not applicable where its class
  has none); sdpa-math's math kernel in the profile; the reasons of the tricks that do not apply;
  and malformed user cases refused naming the field.

It takes about half a minute on a 2-core VM. Exit status 0 when every check passes, 1 with the
failed check's message otherwise. check_engine.py checks the reference models' cases.
"""

import copy
import hashlib
import importlib.util
import json
import math
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch
import torch.nn as nn

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent
PREPARE = HERE / "user_model.py"
sys.dont_write_bytecode = True  # no __pycache__ beside the scripts
sys.path.insert(0, str(HERE.parent / "parity"))
sys.path.insert(0, str(HERE))
import check_engine  # noqa: E402  (found through the paths above)
import engine_tricks  # noqa: E402
import parity  # noqa: E402
import pytorch_engine  # noqa: E402
import user_model  # noqa: E402
from check_engine import CheckFailed, Engine, built, check, check_ready, not_applicable, relative  # noqa: E402

SEED = 5
BATCHES = 3
IMAGE_SIZE = 32
CNN_BATCH = 8
TRANSFORMER_BATCH = 4
RESNET_BATCH = 4
CUSTOM_BATCH = 3
FIELDS = {
    "format", "spec", "source", "file", "function", "file_sha256", "package", "name", "class", "parameters",
    "batch_size", "image_size", "batches", "inputs", "targets", "output", "samples_per_batch", "sample_unit",
    "flops_per_sample", "loss", "optimizer", "features", "export", "no_bias_export", "dataset",
}
FEATURES = {
    "convolutions", "bias_before_batch_norm", "bias_before_batch_norm_note", "sdpa", "linears", "fp8_linears",
    "dropout",
}
SAME_ARITHMETIC = 1e-9

# A model file trickbench's own checks write: a convolution with a bias before a BatchNorm behind
# control flow torch.fx cannot trace, a constant of the input's dtype that a trace keeps in
# float32 (so only torch.jit.script reproduces the float64 loss), its own loss, optimizer and
# regression targets.
CUSTOM = '''import torch
import torch.nn as nn
import torch.nn.functional as F


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv, self.bn, self.head = nn.Conv2d(3, 4, 3, padding=1), nn.BatchNorm2d(4), nn.Linear(4, 2)

    def forward(self, x):
        y = torch.relu(self.bn(self.conv(x))).mean(dim=(2, 3))
        if bool(y.sum() > -1e9):
            y = y * torch.full([1], 1.0 / 3.0, dtype=y.dtype) * 100
        return self.head(y)


def build():
    return Net()


def batch(n):
    return torch.randn(n, 3, 8, 8), torch.randn(n, 2)


def loss(output, targets):
    return F.mse_loss(output, targets)


def optimizer(parameters):
    return torch.optim.Adam(parameters, lr=1e-3)
'''
# The same model and batches with an optimizer that has no fused variant, importing the file
# beside it.
RMSPROP = '''import torch
from custom import Net, batch, loss  # noqa: F401


def build():
    return Net()


def optimizer(parameters):
    return torch.optim.RMSprop(parameters, lr=1e-3)
'''
# A model neither torch.jit.trace nor torch.jit.script exports faithfully.
UNEXPORTABLE = '''import random
import torch


class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.linear = torch.nn.Linear(4, 3)

    def forward(self, x):
        return self.linear(x) * (1.0 + random.random())


def model():
    return Net()


def batch(n):
    return torch.randn(n, 4), torch.randint(0, 3, (n,))
'''
LINEAR = "import torch\n\n\ndef model():\n    return torch.nn.Linear(4, 3)\n\n\n"
TWO_TENSORS = "def batch(n):\n    return torch.randn(n, 4), torch.zeros(n, dtype=torch.long)\n\n\n"
# Bad model files: (name, text, what the message must say besides the file's name).
BAD_FILES = [
    ("syntax.py", "import torch\n\ndef model(:\n    pass\n", ("SyntaxError", "line 3")),
    (
        "raises_on_import.py",
        "import torch\n\nraise ValueError('no data here')\n",
        ("importing it raised ValueError: no data here", "line 3"),
    ),
    (
        "no_function.py",
        "def build():\n    pass\n\n\ndef helper():\n    pass\n",
        ("no function model()", "build, helper"),
    ),
    (
        "build_fails.py",
        "import torch\n\n\ndef model():\n    return torch.nn.Linear(2, 'x')\n",
        ("model() raised TypeError", "line 5"),
    ),
    ("not_module.py", "def model():\n    return 3\n", ("model() returned an int, not a torch.nn.Module",)),
    (
        "one_tensor.py",
        LINEAR + "def batch(n):\n    return torch.randn(n, 4)\n",
        ("batch(4) returned a Tensor", "not two tensors"),
    ),
    (
        "short_targets.py",
        LINEAR + "def batch(n):\n    return torch.randn(n, 4), torch.zeros(n - 1, dtype=torch.long)\n",
        ("targets int64 [3]", "the batch size, 4"),
    ),
    (
        "rejects.py",
        LINEAR + "def batch(n):\n    return torch.randn(n, 5), torch.zeros(n, dtype=torch.long)\n",
        ("rejects its input batch (float32 [4, 5])", "mat1 and mat2"),
    ),
    (
        "dict_output.py",
        "import torch\n\n\nclass M(torch.nn.Module):\n    def forward(self, x):\n        return {'y': x}\n\n\n"
        "def model():\n    return M()\n\n\n" + TWO_TENSORS,
        ("the model returned a dict, not a tensor",),
    ),
    (
        "nan_loss.py",
        LINEAR + TWO_TENSORS + "def loss(output, targets):\n    return output.sum() * float('nan')\n",
        ("loss(output, targets) is nan",),
    ),
    (
        "vector_loss.py",
        LINEAR + TWO_TENSORS + "def loss(output, targets):\n    return output.sum(1)\n",
        ("loss(output, targets) gave float32 [4], not a finite scalar",),
    ),
    (
        "dataset_pairs.py",
        LINEAR + TWO_TENSORS + "def dataset():\n    return torch.randn(8, 4), torch.zeros(8)\n",
        ("dataset() returned a tuple of (Tensor, Tensor), not ((train inputs, train targets)",),
    ),
    (
        "dataset_short.py",
        LINEAR + TWO_TENSORS + "def dataset():\n    x = torch.randn(8, 4)\n"
        "    return (x, torch.zeros(7, dtype=torch.long)), (x, torch.zeros(8, dtype=torch.long))\n",
        ("dataset()'s train inputs float32 [8, 4] and targets int64 [7]", "the same number of samples"),
    ),
    (
        "dataset_rejected.py",
        LINEAR + TWO_TENSORS + "def dataset():\n    x, y = torch.randn(8, 5), torch.zeros(8, dtype=torch.long)\n"
        "    return (x, y), (x, y)\n",
        ("rejects its input batch (float32 [2, 5])",),
    ),
    (
        "string_optimizer.py",
        LINEAR + TWO_TENSORS + "def optimizer(parameters):\n    return 'sgd'\n",
        ("optimizer(parameters) returned a str, not a torch.optim.Optimizer",),
    ),
]


# ---- Preparing ----


def prepare_command(spec, out, batch_size):
    """The prepare command line for `spec` into `out`."""
    return [
        sys.executable, str(PREPARE), "prepare", "--spec", spec, "--batch-size", str(batch_size),
        "--image-size", str(IMAGE_SIZE), "--seed", str(SEED), "--batches", str(BATCHES), "--out", out,
    ]


def start_prepare(spec, out, batch_size):
    """`user_model.py prepare` started in a process of its own, from the checkout's root, with one
    thread (several run at once)."""
    pipes = dict(stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    return subprocess.Popen(prepare_command(spec, out, batch_size), cwd=ROOT, env=env, **pipes)


def finish_prepare(process, out):
    """Waits for a prepare process, which must succeed; returns its model.json."""
    _, stderr = process.communicate(timeout=240)
    check(process.returncode == 0, f"prepare into {out} exited {process.returncode}:\n{stderr}")
    with open(os.path.join(out, user_model.DESCRIPTION_FILE)) as f:
        return json.load(f)


def prepare_here(spec, out, batch_size):
    """`prepare` run in this process (user_model.main); returns its exit status and its stderr."""
    with tempfile.TemporaryFile() as captured:
        sys.stderr.flush()
        saved = os.dup(2)
        os.dup2(captured.fileno(), 2)
        try:
            status = user_model.main(prepare_command(spec, out, batch_size)[2:])
        finally:
            sys.stderr.flush()
            os.dup2(saved, 2)
            os.close(saved)
        captured.seek(0)
        return status, captured.read().decode()


def prepared_here(spec, out, batch_size):
    """`prepare` run in this process, which must succeed; returns its model.json."""
    status, stderr = prepare_here(spec, out, batch_size)
    check(status == 0, f"prepare {spec} exited {status}: {stderr}")
    with open(os.path.join(out, user_model.DESCRIPTION_FILE)) as f:
        return json.load(f)


def import_file(path):
    """A model file imported here, apart from user_model.py's import of it."""
    spec = importlib.util.spec_from_file_location(f"checked_{Path(path).stem}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def initial_module(build):
    """The module `build()` returns after the seed, in float32: what prepare saved."""
    torch.manual_seed(SEED)
    return build().float()


# ---- Checking a prepared folder ----


def check_description(d, expected, module):
    """model.json has exactly its fields, the `expected` values, and the module's parameters."""
    check(set(d) == FIELDS, f"model.json fields {sorted(d)}, expected {sorted(FIELDS)}")
    check(set(d["features"]) == FEATURES, f"model.json features {sorted(d['features'])}")
    for key, value in expected.items():
        got = d["features"][key] if key in FEATURES else d[key]
        check(got == value, f"{d['name']}: model.json {key} is {got!r}, expected {value!r}")
    parameters = sum(p.numel() for p in module.parameters() if p.requires_grad)
    check(d["parameters"] == parameters, f"{d['name']}: parameters {d['parameters']}, the module has {parameters}")
    check(d["format"] == 1 and d["batches"] == BATCHES, f"{d['name']}: format or batches: {d}")
    check(d["samples_per_batch"] == math.prod(d["targets"]["shape"]), f"{d['name']}: samples_per_batch {d}")
    flops = d["flops_per_sample"]
    check(isinstance(flops, float) and flops > 0, f"{d['name']}: flops_per_sample {flops}")


def check_weights(out, module):
    """weights.safetensors holds the module's initial state_dict, every tensor under its name."""
    saved = parity.read_safetensors(os.path.join(out, user_model.WEIGHTS_FILE))
    state = module.state_dict()
    check(set(saved) == set(state), f"{out}: weights hold {sorted(saved)}, the state_dict {sorted(state)}")
    for name, tensor in state.items():
        same = saved[name].dtype == tensor.dtype and torch.equal(saved[name], tensor)
        check(same, f"{out}: weights.safetensors {name} is not the initial state_dict's")


def check_batches(out, expected):
    """batches.safetensors holds the `expected` (inputs, targets) pairs as inputs.k, targets.k."""
    saved = parity.read_safetensors(os.path.join(out, user_model.BATCHES_FILE))
    check(len(saved) == 2 * len(expected), f"{out}: batches.safetensors holds {sorted(saved)}")
    for k, (inputs, targets) in enumerate(expected):
        same = torch.equal(saved[f"inputs.{k}"], inputs) and torch.equal(saved[f"targets.{k}"], targets)
        check(same, f"{out}: batch {k} is not the one expected")


def exported_loss(out, name, batch):
    """The float64 loss of the export `name` with loss.pt on `batch`, in training mode, after
    the seed."""
    model = torch.jit.load(os.path.join(out, name)).double().train()
    loss = torch.jit.load(os.path.join(out, user_model.LOSS_FILE))
    inputs, targets = (t.double() if t.is_floating_point() else t for t in batch)
    torch.manual_seed(SEED)
    with torch.no_grad():
        return float(loss(model(inputs), targets)), model


def check_export(out, d, module, loss_function):
    """model.pt with loss.pt reproduces model.json's eager float64 loss, which the eager module
    gives; model-no-bias.pt, where written, lacks the biases and gives the same loss."""
    saved = parity.read_safetensors(os.path.join(out, user_model.BATCHES_FILE))
    batch = (saved["inputs.0"], saved["targets.0"])
    recorded = d["export"]["loss_float64"]
    eager = copy.deepcopy(module).double().train()
    inputs, targets = (t.double() if t.is_floating_point() else t for t in batch)
    torch.manual_seed(SEED)
    with torch.no_grad():
        loss = float(loss_function(eager(inputs), targets))
    check(relative(loss, recorded) <= SAME_ARITHMETIC, f"{d['name']}: eager float64 loss {loss}, recorded {recorded}")
    exported, _ = exported_loss(out, user_model.EXPORT_FILE, batch)
    check(relative(exported, recorded) <= SAME_ARITHMETIC, f"{d['name']}: model.pt's loss {exported}, eager {recorded}")
    no_bias = os.path.join(out, user_model.NO_BIAS_EXPORT_FILE)
    check(os.path.exists(no_bias) == d["no_bias_export"], f"{d['name']}: no_bias_export {d['no_bias_export']}")
    if d["no_bias_export"]:
        stripped, model = exported_loss(out, user_model.NO_BIAS_EXPORT_FILE, batch)
        convs = {f"{n}.bias" for n, m in module.named_modules() if isinstance(m, nn.Conv2d) and m.bias is not None}
        kept = convs & {n for n, _ in model.named_parameters()}
        check(relative(stripped, recorded) <= SAME_ARITHMETIC, f"{d['name']}: no-bias loss {stripped}, {recorded}")
        check(not kept, f"{d['name']}: model-no-bias.pt still has {sorted(kept)}")


# ---- The checks ----


def check_cnn(out, d):
    """The CNN example's folder."""
    path = str(ROOT / "examples" / "cnn.py")
    example = import_file(path)
    module = initial_module(example.model)
    with open(path, "rb") as f:
        sha = hashlib.sha256(f.read()).hexdigest()
    expected = {
        "spec": "examples/cnn.py", "source": "file", "file": path, "function": "model", "file_sha256": sha,
        "package": None, "name": "cnn.py", "class": "Net", "batch_size": CNN_BATCH, "image_size": None,
        "inputs": {"shape": [CNN_BATCH, 3, 32, 32], "dtype": "float32"},
        "targets": {"shape": [CNN_BATCH], "dtype": "int64"},
        "output": {"shape": [CNN_BATCH, 10], "dtype": "float32"}, "sample_unit": "images",
        "loss": "cross-entropy", "optimizer": "recipe", "convolutions": 3, "bias_before_batch_norm": 3,
        "bias_before_batch_norm_note": None, "sdpa": False, "linears": 1, "fp8_linears": 0, "dropout": False,
        "no_bias_export": True, "dataset": None,
    }
    check_description(d, expected, module)
    check(d["export"]["method"] == "trace", f"cnn.py: export {d['export']}")
    check_weights(out, module)
    torch.manual_seed(SEED)
    check_batches(out, [example.batch(CNN_BATCH) for _ in range(BATCHES)])
    check_export(out, d, module, user_model.cross_entropy)
    stripped = copy.deepcopy(module)
    check(user_model.remove_bias_before_batch_norm(stripped) == 3, "cnn.py: remove_bias_before_batch_norm")
    convs = [m for m in stripped.modules() if isinstance(m, nn.Conv2d)]
    check(all(c.bias is None for c in convs), "cnn.py: a convolution kept its bias")


def check_transformer(out, d):
    """The transformer example's folder."""
    path = str(ROOT / "examples" / "transformer.py")
    example = import_file(path)
    module = initial_module(example.model)
    b = TRANSFORMER_BATCH
    expected = {
        "name": "transformer.py", "class": "CharTransformer", "image_size": None,
        "inputs": {"shape": [b, 32], "dtype": "int64"}, "targets": {"shape": [b, 32], "dtype": "int64"},
        "output": {"shape": [b, 32, 65], "dtype": "float32"}, "samples_per_batch": b * 32,
        "sample_unit": "tokens", "convolutions": 0, "bias_before_batch_norm": 0, "sdpa": True,
        "linears": 9, "fp8_linears": 8, "no_bias_export": False,
    }
    check_description(d, expected, module)
    check_weights(out, module)
    torch.manual_seed(SEED)
    check_batches(out, [example.batch(b) for _ in range(BATCHES)])
    check_export(out, d, module, user_model.cross_entropy)
    check_dataset(out, d, example)


def check_dataset(out, d, example):
    """dataset.safetensors holds the file's dataset() called after torch.manual_seed(SEED), and
    model.json describes its splits."""
    torch.manual_seed(SEED)
    (train_x, train_y), (test_x, test_y) = example.dataset()
    expected = {
        "train_samples": train_x.shape[0], "test_samples": test_x.shape[0],
        "inputs": {"shape": list(train_x.shape), "dtype": "int64"},
        "targets": {"shape": list(train_y.shape), "dtype": "int64"},
    }
    check(d["dataset"] == expected, f"{d['name']}: dataset {d['dataset']}, expected {expected}")
    saved = parity.read_safetensors(os.path.join(out, user_model.DATASET_FILE))
    splits = {"train.inputs": train_x, "train.targets": train_y, "test.inputs": test_x, "test.targets": test_y}
    check(set(saved) == set(splits), f"{out}: dataset.safetensors holds {sorted(saved)}")
    for name, tensor in splits.items():
        check(torch.equal(saved[name], tensor), f"{out}: dataset.safetensors {name} is not the file's dataset()")


def check_fp8_linears(torchvision):
    """fp8-matmul converts the nn.Linear layers whose in and out features are multiples of 16 and
    leaves the others: the transformer example's 8 projections but not its 65-way head, none of
    the CNN's 10-way head, none of resnet18's 1000-way head (and the description counts the same)."""
    transformer = initial_module(import_file(str(ROOT / "examples" / "transformer.py")).model)
    converted, left = engine_tricks.use_fp8_everywhere(transformer, "cpu")
    check((converted, left) == (8, 1), f"transformer: {converted} converted, {left} left")
    check(type(transformer.head) is nn.Linear, "transformer: the 65-way head was converted")
    fp8 = [m for m in transformer.modules() if isinstance(m, engine_tricks.Fp8Linear)]
    check(all(m.in_features % 16 == 0 and m.out_features % 16 == 0 for m in fp8), "a converted linear misfits")
    cnn = initial_module(import_file(str(ROOT / "examples" / "cnn.py")).model)
    check(engine_tricks.use_fp8_everywhere(cnn, "cpu") == (0, 1), "cnn: its 10-way head is no fp8 linear")
    if torchvision is not None:
        resnet = torchvision.models.get_model("resnet18", weights=None)
        check(engine_tricks.use_fp8_everywhere(resnet, "cpu") == (0, 1), "resnet18: its 1000-way head is no fp8 linear")
        check(user_model.features_of(resnet, False)["fp8_linears"] == 0, "resnet18: fp8_linears")


def check_resnet18(out, d, torchvision):
    """torchvision's resnet18's folder: seeded images, 1000 classes, no conv biases."""
    module = initial_module(lambda: torchvision.models.get_model("resnet18", weights=None))
    b = RESNET_BATCH
    expected = {
        "spec": "torchvision:resnet18", "source": "torchvision", "file": None, "function": None,
        "file_sha256": None, "package": {"name": "torchvision", "version": torchvision.__version__},
        "name": "torchvision:resnet18", "class": "ResNet", "image_size": IMAGE_SIZE,
        "output": {"shape": [b, 1000], "dtype": "float32"}, "sample_unit": "images", "convolutions": 20,
        "bias_before_batch_norm": 0, "bias_before_batch_norm_note": None, "sdpa": False, "fp8_linears": 0,
        "no_bias_export": False,
    }
    check_description(d, expected, module)
    check_weights(out, module)
    generator = torch.Generator().manual_seed(SEED)
    shape = (b, 3, IMAGE_SIZE, IMAGE_SIZE)
    images = [
        (torch.randn(shape, generator=generator), torch.randint(1000, (b,), generator=generator))
        for _ in range(BATCHES)
    ]
    check_batches(out, images)
    check_export(out, d, module, user_model.cross_entropy)


def check_exports(root):
    """A model only torch.jit.script exports (and torch.fx cannot trace, so its conv bias is not
    counted, with the note why); one that neither method exports, with both reasons and no
    files. Returns the folders of the custom model and its RMSprop variant."""
    for name, text in (("custom.py", CUSTOM), ("rmsprop.py", RMSPROP), ("unexportable.py", UNEXPORTABLE)):
        with open(os.path.join(root, name), "w") as f:
            f.write(text)
    custom = os.path.join(root, "custom-prepared")
    d = prepared_here(os.path.join(root, "custom.py:build"), custom, CUSTOM_BATCH)
    note = d["features"]["bias_before_batch_norm_note"]
    check(d["export"]["method"] == "script", f"custom.py: export {d['export']}, expected torch.jit.script's")
    check(d["features"]["bias_before_batch_norm"] == 0 and note.startswith("torch.fx cannot trace"), f"custom.py {d}")
    expected = {
        "loss": "file", "optimizer": "file", "sample_unit": "images", "name": "custom.py:build", "function": "build",
    }
    check({k: d[k] for k in expected} == expected, f"custom.py: {d}")
    example = import_file(os.path.join(root, "custom.py"))
    check_export(custom, d, initial_module(example.build), example.loss)
    rmsprop = os.path.join(root, "rmsprop-prepared")
    prepared_here(os.path.join(root, "rmsprop.py:build"), rmsprop, CUSTOM_BATCH)
    out = os.path.join(root, "unexportable-prepared")
    d = prepared_here(os.path.join(root, "unexportable.py"), out, CUSTOM_BATCH)
    reason = d["export"].get("reason") or ""
    check(d["export"]["method"] is None and "loss_float64" not in d["export"], f"unexportable.py: {d['export']}")
    check("torch.jit.trace: its float64 loss" in reason and "; torch.jit.script: " in reason, f"reason: {reason}")
    files = {user_model.EXPORT_FILE, user_model.LOSS_FILE} & set(os.listdir(out))
    check(not files and d["sample_unit"] == "samples", f"unexportable.py: {files} written, unit {d['sample_unit']}")
    return custom, rmsprop


def bad_spec_cases(root):
    """(SPEC, what its message must say) for every bad SPEC checked."""
    cases = [(os.path.join(root, "nowhere", "mynet.py"), ("nowhere/mynet.py: no such file",))]
    for name, text, says in BAD_FILES:
        with open(os.path.join(root, name), "w") as f:
            f.write(text)
        cases.append((os.path.join(root, name), (name, *says)))
    cases.append((os.path.join(root, "no_function.py") + ":build_it", ("no function build_it()", "build, helper")))
    cases.append(("timm:resnet18", ("timm is not importable by", sys.executable, "pip install timm")))
    cases.append(("keras:resnet", ("unknown model source 'keras'", "torchvision:NAME or timm:NAME")))
    cases.append(("mynet.txt", ("not a model SPEC", "FILE.py:FUNCTION")))
    if importlib.util.find_spec("torchvision") is not None:
        cases.append(("torchvision:resnet19", ("torchvision has no model 'resnet19'", "close names: resnet18")))
    return cases


def check_bad_specs(root):
    """Every bad SPEC exits with status 2 and one line on stderr naming it, the file and what is
    wrong, leaving no model.json (timm is hidden from the import so that it is not importable)."""
    hidden = sys.modules.get("timm")
    sys.modules["timm"] = None
    try:
        for k, (spec, says) in enumerate(bad_spec_cases(root)):
            out = os.path.join(root, f"bad-{k}")
            status, stderr = prepare_here(spec, out, 4)
            lines = stderr.strip().splitlines()
            check(status == 2, f"bad SPEC {spec}: exit status {status}, expected 2: {stderr}")
            check(len(lines) == 1 and lines[0].startswith(f"trickbench: --model {spec}: "), f"{spec}: {stderr!r}")
            for text in says:
                check(text in lines[0], f"bad SPEC {spec}: {lines[0]!r} lacks {text!r}")
            check(not os.path.exists(os.path.join(out, user_model.DESCRIPTION_FILE)), f"{spec}: model.json left")
    finally:
        if hidden is None:
            del sys.modules["timm"]
        else:
            sys.modules["timm"] = hidden


def check_unit_helpers():
    """user_model.correct counts the argmax of classified outputs, and nothing of others."""
    output = torch.tensor([[0.1, 0.9], [0.8, 0.2], [0.3, 0.7]])
    check(int(user_model.correct(output, torch.tensor([1, 1, 1]))) == 2, "correct: a classified batch")
    check(int(user_model.correct(output, torch.zeros(3, 2))) == 0, "correct: regression targets count 0")
    check(user_model.correct(output, torch.tensor([1, 0])).dtype == torch.int64, "correct: a zero int64")


# ---- The engine ----


def write_user_case(directory, prepared, sides, dtype=None):
    """A case directory of the `batches` data kind from the prepared folder `prepared`, one side
    per entry of `sides` ({name: tricks, or {"tricks", "prepared"}} for another prepared folder
    with the same batches)."""
    os.makedirs(directory)
    shutil.copy(os.path.join(prepared, user_model.BATCHES_FILE), os.path.join(directory, "batches.safetensors"))
    case_sides = {}
    for name, side in sides.items():
        side = {"tricks": side} if isinstance(side, list) else side
        folder = side.get("prepared", prepared)
        weights = f"{name}.safetensors"
        shutil.copy(os.path.join(folder, user_model.WEIGHTS_FILE), os.path.join(directory, weights))
        model = {"kind": "user", "dir": folder}
        case_sides[name] = {"model": model, "weights": weights, "tricks": side["tricks"], "reference_for": None}
    case = {
        "format": 3, "device": "cpu", "seed": SEED, "threads": 1, "kind": "train",
        "data": {"kind": "batches", "file": "batches.safetensors", "batches": BATCHES},
        "loader_workers": 2, "accumulation_micro_batches": 2, "learning_rate": 0.05,
        "optimizer": {"kind": "sgd", "momentum": 0.9, "weight_decay": 0.0005},
        "clip_max_norm": None, "log_interval": 3, "sides": case_sides,
    }
    if dtype is not None:
        case["dtype"] = dtype
    with open(os.path.join(directory, "engine-case.json"), "w") as f:
        json.dump(case, f, indent=1)
    return directory


def trained(engine, side, steps, samples_per_batch):
    """A window of `steps` steps of `side` (samples counted as targets); returns its last loss,
    which must be finite."""
    reply = engine.ok(("samples", "seconds", "host_reads", "minor_faults"), op="window", side=side, steps=steps)
    check(reply["samples"] == steps * samples_per_batch, f"window {side}: {reply}, {samples_per_batch} a batch")
    loss = engine.ok(("loss",), op="loss", side=side)["loss"]
    check(isinstance(loss, float) and math.isfinite(loss), f"loss {side}: {loss}")
    return loss


def inspected(engine, side):
    """The inspect reply of a user side: the reference's facts and biases_removed."""
    return engine.ok((*check_engine.INSPECT_KEYS, "biases_removed"), op="inspect", side=side)


# Tricks that leave a user CNN's float64 arithmetic alone: they train the reference's losses.
KEEPING_ARITHMETIC = (
    "channels-last",
    "zero-grad-none",
    "avoid-sync",
    "fused-optimizer",
    "debug-off",
    "no-bias-before-bn",
)
LOADER_TRICKS = ("loader-workers", "pin-memory", "zero-copy", "gpu-augment", "packed-dataset")
NO_LOADER = "the model trains on prepared batches held in memory: there is no data loader"
# The tricks that never apply to a user's model, with their reasons.
NOT_USERS = {
    "jit-fusion": "jit-fusion: it scripts the reference models' pointwise chains; trickbench does not rewrite",
    "checkpointing": "checkpointing: trickbench cannot cut the model's own forward into segments",
    "flash-attention": "flash-attention: it replaces trickbench's GPT's written-out attention",
    **{trick: f"{trick}: {NO_LOADER}" for trick in LOADER_TRICKS},
}


def check_cnn_engine(root, prepared, d):
    """The CNN on user sides in float64: the tricks that keep the arithmetic train the reference's
    losses (the first, before any update, the eager loss prepare recorded), no-bias-before-bn
    removes the biases, channels-last's layouts, fused-optimizer's optimizer; what does not apply."""
    reasons = {
        **NOT_USERS,
        "sdpa-math": "sdpa-math: the model does not call scaled_dot_product_attention",
        "cudnn-benchmark": "cudnn-benchmark: cuDNN's autotuner needs a CUDA GPU",
        "fp8-matmul": "fp8-matmul: no nn.Linear layer has both features multiples of 16, which torch._scaled_mm needs",
    }
    applicable = ("reference", *KEEPING_ARITHMETIC, "grad-accumulation")
    sides = {side: [] if side == "reference" else [side] for side in (*applicable, *reasons)}
    engine = Engine(write_user_case(os.path.join(root, "cnn-case"), prepared, sides, dtype="float64"))
    try:
        check_ready(engine)
        for side, reason in reasons.items():
            not_applicable(engine, side, reason)
        built(engine, applicable)
        losses = {}
        for side in applicable:
            engine.ok(("ok", "compile_s"), op="warm_up", side=side, steps=1)
            first = engine.ok(("loss",), op="loss", side=side)["loss"]
            losses[side] = (first, trained(engine, side, 2, CNN_BATCH))
        recorded = d["export"]["loss_float64"]
        check(relative(losses["reference"][0], recorded) <= SAME_ARITHMETIC, f"first loss {losses}, eager {recorded}")
        for side in KEEPING_ARITHMETIC:
            agree = all(relative(got, want) <= SAME_ARITHMETIC for got, want in zip(losses[side], losses["reference"]))
            check(agree, f"{side} trains {losses[side]}, the reference {losses['reference']}")
        check_cnn_facts(engine, d)
        check(engine.finish() == 0, "quit did not exit 0")
    finally:
        engine.close()


def check_cnn_facts(engine, d):
    """inspect on the CNN's user sides."""
    for side in ("reference", "channels-last", "no-bias-before-bn", "fused-optimizer", "grad-accumulation"):
        facts = inspected(engine, side)
        layout = "channels_last" if side == "channels-last" else "contiguous"
        expected = {
            "model": "user", "dtype": "float64", "conv_bias": None, "loader": None, "attention": None,
            "memory_format": layout, "activation_format": layout, "input_format": layout,
            "biases_removed": d["features"]["bias_before_batch_norm"] if side == "no-bias-before-bn" else 0,
            "micro_batches": 2 if side == "grad-accumulation" else 1,
            "optimizer": {"class": "SGD", "fused": True if side == "fused-optimizer" else None, "foreach": None},
        }
        got = {key: facts[key] for key in expected}
        check(got == expected, f"inspect {side}: {got}, expected {expected}")


def check_transformer_engine(root, prepared):
    """The transformer on user sides: it trains tokens; sdpa-math runs the math kernel where the
    reference runs the CPU's flash kernel; what does not apply to a model without convolutions."""
    reasons = {
        **NOT_USERS,
        "channels-last": "channels-last: the model has no 2-d convolutions",
        "no-bias-before-bn": "no-bias-before-bn: the model has no convolution with a bias feeding only a BatchNorm",
        "sdpa-cudnn": "sdpa-cudnn: needs a CUDA GPU",
        "fp8-matmul": "fp8-matmul: fp8 tensor-core matmuls need a CUDA GPU",
    }
    applicable = ("reference", "sdpa-math", "sdpa-flash")
    sides = {side: [] if side == "reference" else [side] for side in (*applicable, *reasons)}
    engine = Engine(write_user_case(os.path.join(root, "transformer-case"), prepared, sides))
    try:
        check_ready(engine)
        for side, reason in reasons.items():
            not_applicable(engine, side, reason)
        built(engine, applicable)
        for side in applicable:
            trained(engine, side, 2, TRANSFORMER_BATCH * 32)
        ops = {side: set(engine.ok(("ops",), op="profile", side=side, steps=1)["ops"]) for side in applicable}
        sdpa, flash, math_kernel = (
            "aten::scaled_dot_product_attention",
            "aten::_scaled_dot_product_flash_attention_for_cpu",
            "aten::_scaled_dot_product_attention_math",
        )
        check({sdpa, math_kernel} <= ops["sdpa-math"] and flash not in ops["sdpa-math"], "sdpa-math's kernels")
        check({sdpa, flash} <= ops["reference"] and math_kernel not in ops["reference"], "the reference's kernels")
        facts = inspected(engine, "sdpa-math")
        expected = {"model": "user", "attention": "sdpa", "sdpa_backend": "MATH", "activation_format": None}
        got = {k: facts[k] for k in (*expected, "biases_removed")}
        check(got == {**expected, "biases_removed": 0}, f"inspect sdpa-math: {got}")
        check(engine.finish() == 0, "quit did not exit 0")
    finally:
        engine.close()


def check_custom_engine(root, custom, rmsprop):
    """The custom model on user sides: its file's loss and Adam (fused under fused-optimizer);
    RMSprop has no fused variant; fx's note as no-bias-before-bn's reason; a batch of 3 does not
    split into 2 micro-batches; a file changed since prepare is refused by the engine's build and
    by user_model.load's."""
    reasons = {
        "no-bias-before-bn": "no convolution with a bias feeding only a BatchNorm was found: torch.fx cannot trace",
        "grad-accumulation": "grad-accumulation: the batch's samples do not split evenly into the micro-batches",
        "rmsprop-fused": "fused-optimizer: RMSprop has no fused variant",
    }
    sides = {
        "reference": [], "fused-optimizer": ["fused-optimizer"], "rmsprop": {"tricks": [], "prepared": rmsprop},
        "rmsprop-fused": {"tricks": ["fused-optimizer"], "prepared": rmsprop},
        "no-bias-before-bn": ["no-bias-before-bn"], "grad-accumulation": ["grad-accumulation"], "late": [],
    }
    engine = Engine(write_user_case(os.path.join(root, "custom-case"), custom, sides))
    try:
        check_ready(engine)
        for side, reason in reasons.items():
            not_applicable(engine, side, reason)
        applicable = ("reference", "fused-optimizer", "rmsprop")
        built(engine, applicable)
        for side, (name, fused) in zip(applicable, (("Adam", None), ("Adam", True), ("RMSprop", None))):
            trained(engine, side, 2, CUSTOM_BATCH * 2)
            optimizer = inspected(engine, side)["optimizer"]
            check(optimizer["class"] == name and optimizer["fused"] == fused, f"inspect {side}: optimizer {optimizer}")
        with open(os.path.join(root, "custom.py"), "a") as f:
            f.write("# changed\n")
        reply = engine.request(op="build", side="late")
        check("custom.py changed since the model was prepared" in reply.get("error", ""), f"a changed file: {reply}")
        engine.finish()
    finally:
        engine.close()
    try:
        user_model.load(custom).build()
        raise CheckFailed("a model file changed since prepare was built")
    except user_model.ModelError as e:
        check("custom.py changed since the model was prepared" in str(e), f"a changed file: {e}")


def check_case_errors(root, prepared):
    """Malformed user cases are refused by read_case naming the field."""
    base = write_user_case(os.path.join(root, "errors-user"), prepared, {"reference": []})
    edits = [
        (lambda c: c["sides"]["reference"]["model"].update(dir="relative/folder"), "model.dir: expected the absolute"),
        (lambda c: c["sides"]["reference"]["model"].update(dir=root), "sides.reference.model.dir: "),
        (lambda c: c["data"].update(batches=BATCHES + 1), f"no tensor inputs.{BATCHES}"),
        (lambda c: c["data"].update(kind="images"), "data.augment: expected true or false"),
        (
            lambda c: c["sides"].update(other={**c["sides"]["reference"], "model": check_engine.RESNET}),
            'data.kind: "batches" is the data of user models',
        ),
    ]
    for k, (edit, contains) in enumerate(edits):
        directory = check_engine.error_variant(root, base, f"user-error-{k}", edit=edit)
        try:
            pytorch_engine.read_case(directory)
            raise CheckFailed(f"a malformed user case was read: expected {contains!r}")
        except pytorch_engine.CaseError as e:
            check(contains in str(e), f"user case error {str(e)!r} lacks {contains!r}")


def main():
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="check-user-model-") as root:
        try:
            run_checks(root, started)
        except CheckFailed as e:
            print(f"check_user_model.py: FAILED: {e}", file=sys.stderr)
            sys.exit(1)
    print(f"check_user_model.py: all checks passed in {time.perf_counter() - started:.1f} s")


def run_checks(root, started):
    """Every check, the examples prepared in processes of their own meanwhile."""
    folders = {name: os.path.join(root, name) for name in ("cnn", "transformer", "resnet18")}
    processes = {
        "cnn": start_prepare("examples/cnn.py", folders["cnn"], CNN_BATCH),
        "transformer": start_prepare("examples/transformer.py", folders["transformer"], TRANSFORMER_BATCH),
    }
    torchvision = None
    if importlib.util.find_spec("torchvision") is not None:
        import torchvision

        processes["resnet18"] = start_prepare("torchvision:resnet18", folders["resnet18"], RESNET_BATCH)
    else:
        print("note: torchvision is not importable here: torchvision:resnet18 is not checked", flush=True)

    def done(name):
        """Says that the checks of `name` passed, and when."""
        print(f"ok: {name} ({time.perf_counter() - started:.1f} s)", flush=True)

    check_unit_helpers()
    check_fp8_linears(torchvision)
    done("fp8-matmul converts only the nn.Linear layers torch._scaled_mm takes")
    check_bad_specs(root)
    done("bad SPECs exit 2 with one line naming the file and the problem")
    custom, rmsprop = check_exports(root)
    done("exports: torch.jit.script where a trace is not faithful, none where neither is")
    described = {name: finish_prepare(process, folders[name]) for name, process in processes.items()}
    check_cnn(folders["cnn"], described["cnn"])
    check_transformer(folders["transformer"], described["transformer"])
    if torchvision is not None:
        check_resnet18(folders["resnet18"], described["resnet18"], torchvision)
    done("the examples' model.json, weights, batches and exports")
    check_case_errors(root, folders["cnn"])
    check_cnn_engine(root, folders["cnn"], described["cnn"])
    done("the CNN on the engine: float64 agreement, layouts, biases removed, not applicable")
    check_transformer_engine(root, folders["transformer"])
    done("the transformer on the engine: tokens, SDPA kernels, not applicable")
    check_custom_engine(root, custom, rmsprop)
    done("a file's own loss and optimizer on the engine, fused or not; a changed file refused")


if __name__ == "__main__":
    main()
