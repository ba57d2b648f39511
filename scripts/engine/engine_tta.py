"""The PyTorch engine's training to a target: the recipe of a time-to-accuracy case in the terms
a PyTorch user writes it, and the loop that trains a side from scratch until its held-out metric
reaches the target, the planned steps run out or the training budget is spent.

Each convergence trick is what PyTorch's documentation tells a user to write:

    one-cycle        torch.optim.lr_scheduler.OneCycleLR (momentum, or Adam's beta1, cycled)
    adamw            torch.optim.AdamW (its reference: torch.optim.Adam with weight_decay, an L2
                     penalty in the gradient)
    muon             torch.optim.Muon for the hidden 2-D weights, the recipe's optimizer for the
                     rest, as Muon's documentation advises; both stepped, both scheduled
    lars, lamb       torch.optim.Optimizer subclasses (torch.optim has neither; these are what a
                     user copies into a training script, with trickbench's arithmetic)
    grad-clipping    torch.nn.utils.clip_grad_norm_ after backward
    label-smoothing  F.cross_entropy(..., label_smoothing=0.2) on the training loss
    ema-weights      torch.optim.swa_utils.AveragedModel(use_buffers=True) updated every few
                     steps, evaluated in place of the model
    flip-tta         the evaluation's logits averaged with those of the mirrored images
    bn-momentum      nn.BatchNorm2d(momentum=0.4) (the model spec's bn_momentum)
    batch-norm       its reference: the ResNet without BatchNorm (the model spec's batch_norm)
    input-norm       its reference: raw pixels in [0, 1] (the data's standardise)
    max-batch        the batch size the probe found (the data's batches)

The schedule of the recipe itself: MultiStepLR (after LinearLR's warm-up through SequentialLR when
the batch is larger than the recipe's) for the ResNets, nanoGPT's warm-up and cosine through
LambdaLR for the GPT. Every point the loop reports carries the learning rate and momentum of the
segment's last step, which trickbench holds to its own schedule.
"""

import math
import time

import torch
import torch.nn.functional as F
from torch.optim.lr_scheduler import LambdaLR, LinearLR, MultiStepLR, OneCycleLR, SequentialLR
from torch.optim.swa_utils import AveragedModel


# The tricks whose effect is the recipe of a case that trains to a target (max-batch, a batch
# size, applies to any case).
CONVERGENCE_TRICKS = (
    "one-cycle",
    "adamw",
    "lars",
    "lamb",
    "muon",
    "grad-clipping",
    "input-norm",
    "batch-norm",
    "label-smoothing",
    "ema-weights",
    "flip-tta",
    "bn-momentum",
)


class TtaError(Exception):
    """The case's time_to_accuracy does not hold what it must."""


class NotApplicable(Exception):
    """The recipe cannot be applied to this side, with the reason."""


# ---- LARS and LAMB: torch.optim has neither ----


def layer_wise(p, direction, weight_decay, exclude_1d, lars_trust=None):
    """The layer-wise step direction of parameter `p` from the optimizer's plain `direction`
    (LARS: the gradient; LAMB: Adam's): (direction + wd·p) times the trust ratio, the ratio being
    1 where the weight norm or the norm it is set against is 0; `direction` itself for an
    excluded 1-d parameter. LARS's ratio is trust·‖p‖ / (‖g‖ + wd·‖p‖), LAMB's ‖p‖ / ‖update‖."""
    if exclude_1d and p.dim() <= 1:
        return direction
    decayed = direction + p * weight_decay if weight_decay != 0.0 else direction
    weight_norm = p.norm()
    if lars_trust is not None:
        other = direction.norm()
        ratio = weight_norm * lars_trust / (other + weight_norm * weight_decay)
    else:
        other = decayed.norm()
        ratio = weight_norm / other
    both = (weight_norm > 0) & (other > 0)
    return decayed * torch.where(both, ratio, torch.ones_like(ratio))


class Lars(torch.optim.Optimizer):
    """LARS (You, Gitman & Ginsburg 2017): v <- m·v + lr·ratio·(g + wd·w); w <- w - v."""

    def __init__(self, params, lr, momentum, weight_decay, trust_coefficient, exclude_1d):
        defaults = dict(
            lr=lr,
            momentum=momentum,
            weight_decay=weight_decay,
            trust_coefficient=trust_coefficient,
            exclude_1d=exclude_1d,
        )
        super().__init__(params, defaults)

    @torch.no_grad()
    def step(self, closure=None):
        for group in self.param_groups:
            for p in group["params"]:
                if p.grad is None:
                    continue
                direction = layer_wise(
                    p, p.grad, group["weight_decay"], group["exclude_1d"], lars_trust=group["trust_coefficient"]
                )
                state = self.state[p]
                velocity = state.setdefault("momentum_buffer", torch.zeros_like(p))
                velocity.mul_(group["momentum"]).add_(direction * group["lr"])
                p.sub_(velocity)


class Lamb(torch.optim.Optimizer):
    """LAMB (You et al. 2020): Adam's bias-corrected direction, weight decay added, scaled by
    ‖w‖ / ‖update‖ per parameter tensor."""

    def __init__(self, params, lr, betas, eps, weight_decay, exclude_1d):
        super().__init__(params, dict(lr=lr, betas=betas, eps=eps, weight_decay=weight_decay, exclude_1d=exclude_1d))

    @torch.no_grad()
    def step(self, closure=None):
        for group in self.param_groups:
            beta1, beta2 = group["betas"]
            for p in group["params"]:
                if p.grad is None:
                    continue
                state = self.state[p]
                if not state:
                    state.update(step=0, exp_avg=torch.zeros_like(p), exp_avg_sq=torch.zeros_like(p))
                state["step"] += 1
                t = state["step"]
                state["exp_avg"].lerp_(p.grad, 1 - beta1)
                state["exp_avg_sq"].lerp_(p.grad.square(), 1 - beta2)
                correction2_sqrt = math.sqrt(1 - beta2**t)
                denominator = state["exp_avg_sq"].sqrt() / correction2_sqrt + group["eps"]
                adam = state["exp_avg"] / denominator / (1 - beta1**t)
                p.sub_(layer_wise(p, adam, group["weight_decay"], group["exclude_1d"]) * group["lr"])


# ---- The recipe's optimizers and schedules ----


def initial_lr(schedule):
    """The learning rate a schedule's optimizer is built with (its base or peak rate)."""
    return {"multi-step": "lr", "one-cycle": "max_lr", "warmup-cosine": "peak_lr"}[schedule["kind"]]


def build_optimizer(spec, params, lr, fused):
    """The recipe's optimizer over `params` at `lr`: torch.optim's SGD, Adam or AdamW (fused=True
    under fused-optimizer), or LARS or LAMB."""
    kind, options = spec["kind"], ({"fused": True} if fused else {})
    if kind == "sgd":
        return torch.optim.SGD(params, lr=lr, momentum=spec["momentum"], weight_decay=spec["weight_decay"], **options)
    if kind in ("adam", "adamw"):
        make = torch.optim.AdamW if kind == "adamw" else torch.optim.Adam
        betas = (spec["beta1"], spec["beta2"])
        return make(params, lr=lr, betas=betas, eps=spec["eps"], weight_decay=spec["weight_decay"], **options)
    if kind == "lars":
        keys = ("momentum", "weight_decay", "trust_coefficient", "exclude_1d")
        return Lars(params, lr, **{k: spec[k] for k in keys})
    if kind == "lamb":
        betas = (spec["beta1"], spec["beta2"])
        return Lamb(params, lr, betas, spec["eps"], spec["weight_decay"], spec["exclude_1d"])
    raise TtaError(f"time_to_accuracy.optimizer: unknown kind {kind!r}")


def build_optimizers(tta, module, fused):
    """The side's optimizers: torch.optim.Muon over the named hidden weights (where the recipe has
    Muon) and the recipe's optimizer over every other parameter; NotApplicable where Muon's
    parameters are not all 2-D matrices, which is all torch.optim.Muon takes."""
    lr = tta["schedule"][initial_lr(tta["schedule"])]
    muon = tta["muon"]
    named = dict(module.named_parameters())
    if muon is None:
        return [build_optimizer(tta["optimizer"], list(named.values()), lr, fused)]
    missing = [name for name in muon["parameters"] if name not in named]
    if missing:
        raise TtaError(f"time_to_accuracy.muon.parameters: the model has no parameter {missing[0]!r}")
    hidden = [named[name] for name in muon["parameters"]]
    shapes = sorted({tuple(p.shape) for p in hidden if p.dim() != 2})
    if not hidden or shapes:
        found = f"{len(shapes)} shapes of other ranks, e.g. {list(shapes[0])}" if shapes else "none"
        raise NotApplicable(
            "muon: torch.optim.Muon takes 2-D weight matrices only, and this model's hidden weights "
            f"are not all 2-D ({found}); a convolution's kernel would have to be flattened by hand"
        )
    chosen = set(muon["parameters"])
    rest = [p for name, p in named.items() if name not in chosen]
    muon_optimizer = torch.optim.Muon(
        hidden,
        lr=lr * muon["lr_ratio"],
        weight_decay=muon["weight_decay"],
        momentum=muon["momentum"],
        nesterov=True,
        ns_steps=muon["ns_steps"],
    )
    return [build_optimizer(tta["optimizer"], rest, lr, fused), muon_optimizer]


def build_scheduler(optimizer, schedule, cycle_momentum):
    """`schedule` on `optimizer`, whose learning rate it was built with: OneCycleLR (momentum
    cycled where `cycle_momentum`), MultiStepLR after LinearLR's warm-up, or nanoGPT's
    warm-up and cosine through LambdaLR."""
    kind = schedule["kind"]
    scale = optimizer.param_groups[0]["lr"] / schedule[initial_lr(schedule)]
    if kind == "one-cycle":
        return OneCycleLR(
            optimizer,
            max_lr=schedule["max_lr"] * scale,
            total_steps=schedule["total_steps"],
            pct_start=schedule["pct_start"],
            anneal_strategy=schedule["anneal_strategy"],
            cycle_momentum=cycle_momentum,
            base_momentum=schedule["base_momentum"],
            max_momentum=schedule["max_momentum"],
            div_factor=schedule["div_factor"],
            final_div_factor=schedule["final_div_factor"],
        )
    if kind == "warmup-cosine":
        return LambdaLR(optimizer, lambda step: nanogpt_lr(schedule, step) / schedule["peak_lr"])
    warmup = schedule["warmup_steps"]
    drops = MultiStepLR(optimizer, milestones=[m - warmup for m in schedule["milestones"]], gamma=schedule["gamma"])
    if warmup == 0:
        return drops
    rise = LinearLR(optimizer, start_factor=schedule["warmup_start_factor"], end_factor=1.0, total_iters=warmup)
    return SequentialLR(optimizer, [rise, drops], milestones=[warmup])


def nanogpt_lr(schedule, step):
    """nanoGPT's get_lr: a linear warm-up to the peak, then half a cosine down to min_lr at
    decay_steps, min_lr after."""
    peak, low, warmup, decay = (schedule[k] for k in ("peak_lr", "min_lr", "warmup_steps", "decay_steps"))
    if step < warmup:
        return peak * (step + 1) / (warmup + 1)
    if step >= decay:
        return low
    progress = (step - warmup) / max(decay - warmup, 1)
    return low + (peak - low) / 2 * (math.cos(math.pi * progress) + 1)


def momentum_of(optimizer):
    """The momentum the schedule cycles: SGD's and LARS's momentum, Adam's and LAMB's beta1."""
    group = optimizer.param_groups[0]
    return group["momentum"] if "momentum" in group else group["betas"][0]


# ---- The weight average ----


class WeightAverage:
    """ema-weights: an AveragedModel of every floating-point parameter and buffer, starting at the
    initial weights and updated every `every_steps` optimizer steps; update n (0-based) decays by
    min(decay_per_step ** every_steps, (1 + n) / (10 + n))."""

    def __init__(self, module, every_steps, decay_per_step):
        self.every_steps, self.steps = every_steps, 0
        decay = decay_per_step**every_steps

        def average(averaged, current, count):
            # count: the updates so far, the first being AveragedModel's copy of the initial weights.
            if not averaged.is_floating_point():
                return current
            n = int(count) - 1
            return averaged.lerp(current, 1.0 - min(decay, (1 + n) / (10 + n)))

        self.model = AveragedModel(module, avg_fn=average, use_buffers=True)
        self.model.update_parameters(module)

    def after_step(self, module):
        """Counts one optimizer step, updating the average when it completes every_steps."""
        self.steps += 1
        if self.steps % self.every_steps == 0:
            self.model.update_parameters(module)


# ---- The loop ----


class Recipe:
    """What a side training to a target adds to its step: the schedulers, the training loss's
    label smoothing, the weight average, the held-out batches and how they are evaluated."""

    def __init__(self, side, tta, held_out):
        self.side, self.tta, self.held_out = side, tta, held_out
        first = side.optimizers[0]
        self.schedulers = [build_scheduler(first, tta["schedule"], cycle_momentum=True)]
        # Muon keeps its own momentum, as trickbench's does; only its rate follows the schedule.
        self.schedulers += [build_scheduler(o, tta["schedule"], cycle_momentum=False) for o in side.optimizers[1:]]
        self.average = None
        if tta["ema"] is not None:
            self.average = WeightAverage(side.module, tta["ema"]["every_steps"], tta["ema"]["decay_per_step"])

    def after_step(self):
        """The schedulers' step and the average's, after an optimizer step; returns the learning
        rate and momentum the step used."""
        first = self.side.optimizers[0]
        used = first.param_groups[0]["lr"], momentum_of(first)
        for scheduler in self.schedulers:
            scheduler.step()
        if self.average is not None:
            self.average.after_step(self.side.module)
        return used

    def evaluate(self):
        """The held-out metric: test accuracy, or mean cross-entropy per window (validation loss),
        of the weight average where there is one, else of the eager module, in evaluation mode
        under no_grad; flip-tta averages each batch's logits with its mirror images'."""
        side = self.side
        module = self.average.model.module if self.average is not None else side.module
        was_training = module.training
        module.eval()
        correct, loss_sum, rows = 0, 0.0, 0
        with torch.no_grad(), side.autocast():
            for x, y in self.held_out:
                x, y = self.placed(x), y.to(side.case.device)
                logits = module(x)
                if self.tta["flip_tta"]:
                    logits = (logits + module(x.flip(3))) / 2
                flat = logits.reshape(-1, logits.size(-1)).float()
                loss_sum += float(F.cross_entropy(flat, y.reshape(-1))) * y.shape[0]
                correct += int((logits.argmax(-1) == y).sum())
                rows += y.shape[0]
        module.train(was_training)
        if self.tta["metric"] == "test_accuracy":
            return correct / rows
        return loss_sum / rows

    def placed(self, x):
        """A held-out batch's inputs on the side's device, dtype and layout."""
        side = self.side
        x = x.to(side.case.device)
        if x.is_floating_point():
            x = x.to(side.case.dtype)
            if side.settings.channels_last:
                x = x.contiguous(memory_format=torch.channels_last)
        return x


def reaches(metric, value, target):
    """Whether `value` of `metric` meets `target` (accuracy at least, loss at most)."""
    return value >= target if metric == "test_accuracy" else value <= target


def train_to_target(side, recipe, graphs_compiled, emit):
    """Trains `side` from scratch: evaluates the untrained model (step 0), then segments of
    eval_every_steps optimizer steps, each timed between two device synchronisations and followed
    by an evaluation, until the target is reached, the planned steps are done or the training
    time reaches the budget. `emit` gets each point as it is measured; returns the seconds of
    the steps that compiled a graph under torch-compile (None when not compiled)."""
    tta, compiled = recipe.tta, side.settings.compiled
    point = dict(step=0, epoch=0.0, train_s=0.0, wall_s=0.0, metric=recipe.evaluate(), train_loss=None)
    emit({**point, "lr": None, "momentum": None})
    step, train_s, compile_s, started = 0, 0.0, 0.0, time.perf_counter()
    reached = reaches(tta["metric"], point["metric"], tta["target"])
    while not reached and step < tta["total_steps"] and train_s < tta["budget_s"]:
        end = min(step + tta["eval_every_steps"], tta["total_steps"])
        losses = []
        side.synchronize()
        segment_started = time.perf_counter()
        while step < end:
            before, step_started = graphs_compiled() if compiled else 0, time.perf_counter()
            side.step()
            lr, momentum = recipe.after_step()
            losses.append(side.metrics.last_loss)
            step += 1
            if compiled and (step == 1 or graphs_compiled() > before):
                side.synchronize()
                compile_s += time.perf_counter() - step_started
        side.synchronize()
        train_s += time.perf_counter() - segment_started
        metric = recipe.evaluate()
        point = dict(
            step=step,
            epoch=step * tta["epochs_per_step"],
            train_s=train_s,
            wall_s=time.perf_counter() - started,
            metric=metric,
            train_loss=float(torch.stack(losses).double().mean()),
        )
        emit({**point, "lr": lr, "momentum": momentum if tta["schedule"]["kind"] == "one-cycle" else None})
        reached = reaches(tta["metric"], metric, tta["target"])
    return compile_s if compiled else None
