r"""Why a BatchNorm model that works in training mode fails in evaluation mode, and how to
find the layer responsible.

``model.eval()`` changes one thing in a BN layer: it normalizes with its buffers
``running_mean`` and ``running_var`` instead of the batch's statistics. A model that scores
well in training mode and badly in evaluation mode therefore has buffers that do not
describe what the layer receives at test time. The check compares, layer by layer, the
statistics of each BN's *input* in an evaluation-mode pass with the layer's buffers:

``bn_input_report(model, x)``   one row per BN layer, in forward order: updates seen
                                (``num_batches_tracked``), finite buffers, and the largest
                                gap over channels, in units of the running standard
                                deviation, :math:`|\mu_B - \hat\mu| / \sqrt{\hat\sigma^2+\epsilon}`,
                                and :math:`|\log(\sigma_B^2 / \hat\sigma^2)|`
``first_suspect(report)``       the first layer whose buffers are non-finite or far from its
                                input's statistics (later layers inherit its error)

Two causes, reproduced on a small classifier (``Linear -> BN -> ReLU -> Linear``, float64):

``train_classifier(via_copies)``  trained directly, or through a copy of the model per step
                                  (as meta-learning code does with patched or functional
                                  models): the copies' BN buffers are updated and thrown
                                  away, the model's own stay at their initial 0 and 1
``poison_statistics(model, x)``   one training-mode forward pass on a batch with a NaN
                                  (a step the optimizer later skipped): the buffers are NaN
``accuracies(model, x, y)``       accuracy with batch statistics (on a copy, so nothing
                                  moves) and in evaluation mode
"""

from __future__ import annotations

import copy
import math

import torch
from torch import nn

from layernorm_tutorial import nn as lnn

__all__ = ["bn_input_report", "first_suspect", "make_task", "train_classifier",
           "poison_statistics", "accuracies"]

F64 = torch.float64


def _bn_layers(model: nn.Module) -> list[tuple[str, nn.Module]]:
    return [(name, m) for name, m in model.named_modules()
            if isinstance(m, (lnn._BatchNorm, nn.modules.batchnorm._BatchNorm))]


@torch.no_grad()
def bn_input_report(model: nn.Module, x: torch.Tensor) -> list[dict]:
    r"""Run ``model`` on ``x`` in evaluation mode and compare, for every BN layer, the
    per-channel mean and biased variance of its input (over all dims but 1) with its
    running buffers. Returns, in forward order, ``{"name", "updates", "finite", "mean_gap",
    "var_gap"}`` per layer: ``mean_gap`` is the largest
    :math:`|\mu_B - \hat\mu|/\sqrt{\hat\sigma^2+\epsilon}` over channels and ``var_gap`` the
    largest :math:`|\log(\sigma_B^2/\hat\sigma^2)|` (``inf`` or ``nan`` when the buffers are
    not finite). Every module's training flag is restored afterwards."""
    if not isinstance(model, nn.Module):
        raise TypeError(f"model must be an nn.Module, got {type(model).__name__}")
    layers = _bn_layers(model)
    if not layers:
        raise ValueError("model has no BatchNorm layer to check")
    modes = {m: m.training for m in model.modules()}
    rows, handles = [], []

    def hook(name, module):
        def record(_module, inputs):
            inp = inputs[0]
            dims = (0,) + tuple(range(2, inp.dim()))
            mean, var = inp.mean(dims), inp.var(dims, correction=0)
            run_mean, run_var = module.running_mean, module.running_var
            finite = bool(torch.isfinite(run_mean).all() and torch.isfinite(run_var).all())
            mean_gap = ((mean - run_mean).abs() / torch.sqrt(run_var + module.eps)).max()
            var_gap = torch.log(var / run_var).abs().max()
            rows.append({"name": name, "updates": int(module.num_batches_tracked),
                         "finite": finite, "mean_gap": mean_gap.item(),
                         "var_gap": var_gap.item()})
        return record

    try:
        for name, module in layers:
            handles.append(module.register_forward_pre_hook(hook(name, module)))
        model.eval()
        model(x)
    finally:
        for h in handles:
            h.remove()
        for m, training in modes.items():
            m.training = training
    return rows


def first_suspect(report: list[dict], tolerance: float = 1.0) -> str | None:
    """Name of the first layer in ``report`` (from :func:`bn_input_report`) whose buffers
    are not finite, that never saw a training batch, or whose ``mean_gap`` or ``var_gap``
    exceeds ``tolerance``; None when every layer looks right."""
    for row in report:
        gaps = (row["mean_gap"], row["var_gap"])
        if (not row["finite"] or row["updates"] == 0
                or any(not math.isfinite(v) or v > tolerance for v in gaps)):
            return row["name"]
    return None


def make_task(n: int, *, seed: int = 0, offset: float = 10.0):
    r"""``n`` two-feature samples (float64), every feature ``N(offset, 1)``, labelled by
    whether the first feature exceeds ``offset``: the class boundary sits at the data's
    mean, ten standard deviations from the origin, so a BN that does not subtract the
    right mean puts every sample on one side of it. Returns ``(x (n, 2), y (n,))``."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, 2, generator=g, dtype=F64) + offset
    return x, (x[:, 0] > offset).long()


def _classifier(seed: int) -> nn.Module:
    with torch.random.fork_rng(devices=[]):          # leave the caller's generator alone
        torch.manual_seed(seed)
        return nn.Sequential(nn.Linear(2, 16), lnn.BatchNorm1d(16), nn.ReLU(),
                             nn.Linear(16, 2)).to(F64)


def train_classifier(*, via_copies: bool, steps: int = 150, batch: int = 64,
                     lr: float = 0.1, seed: int = 0) -> nn.Module:
    """Train ``Linear(2, 16) -> BatchNorm1d -> ReLU -> Linear(16, 2)`` with SGD on
    :func:`make_task` batches, the learning rate decaying linearly from ``lr`` to 0 (so
    that the running statistics catch up with the final weights). With ``via_copies``,
    every step runs forward and backward on ``copy.deepcopy(model)`` and applies the
    copy's gradients to the model (the pattern of meta-learning code that trains a patched
    or functional copy): the gradients are the same, but the BN buffers updated are the
    copy's. Returns the model in training mode."""
    model = _classifier(seed)
    optimizer = torch.optim.SGD(model.parameters(), lr=lr)
    schedule = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda t: 1 - t / steps)
    for step in range(steps):
        x, y = make_task(batch, seed=seed * 100_003 + step + 1)
        optimizer.zero_grad()
        net = copy.deepcopy(model) if via_copies else model
        nn.functional.cross_entropy(net(x), y).backward()
        if via_copies:
            for p, q in zip(model.parameters(), net.parameters(), strict=True):
                p.grad = q.grad
        optimizer.step()
        schedule.step()
    return model


@torch.no_grad()
def poison_statistics(model: nn.Module, x: torch.Tensor) -> nn.Module:
    """One training-mode forward pass on ``x`` with its first row set to NaN, and no
    optimizer step (as when a loss is found non-finite and the step is skipped): BN's
    running buffers take the NaN batch statistics. Modifies and returns ``model``."""
    bad = x.clone()
    bad[0] = float("nan")
    modes = {m: m.training for m in model.modules()}
    model.train()
    model(bad)
    for m, training in modes.items():
        m.training = training
    return model


@torch.no_grad()
def accuracies(model: nn.Module, x: torch.Tensor, y: torch.Tensor) -> dict:
    """``{"batch_stats": accuracy in training mode (batch statistics, on a copy so that no
    buffer moves), "eval": accuracy in evaluation mode}`` on ``x``, ``y``."""
    train_copy = copy.deepcopy(model).train()
    model_modes = {m: m.training for m in model.modules()}
    model.eval()
    out = {"batch_stats": (train_copy(x).argmax(1) == y).double().mean().item(),
           "eval": (model(x).argmax(1) == y).double().mean().item()}
    for m, training in model_modes.items():
        m.training = training
    return out
