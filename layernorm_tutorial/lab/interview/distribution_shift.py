r"""BatchNorm when the test data shift away from the training data.

In evaluation mode BN normalizes with running statistics collected on the training data.
When the test inputs shift (a new camera, blur, another hospital), a channel's test mean and
variance differ from the stored ones, and every later layer sees inputs off the scale it was
trained on. Three remedies, from cheapest to most involved:

``reestimate_statistics(model, batches)``
    Recompute the running statistics on unlabeled test data, as a cumulative average over
    the batches (what AdaBN and "covariate shift adaptation" do), with only the BN modules
    in training mode (dropout stays off); nothing is learned.
``test_batch_statistics(model)``
    Normalize each test batch with its own statistics (BN's training-mode forward, without
    touching the buffers): needs batches of the shifted data, not single samples, and makes
    each prediction depend on its batch-mates (``batch_mate_change``).
``tent_step(model, x, lr)``
    TENT: test-batch statistics plus one gradient step on BN's affine parameters alone,
    minimizing the entropy of the model's predictions on the unlabeled test batch.

``shifted_channels(...)`` builds the setting: a BN layer whose running statistics match the
training channels, then test channels with another contrast and brightness.
"""

from __future__ import annotations

import contextlib

import torch
from torch import nn

from layernorm_tutorial import nn as lnn

__all__ = ["BATCH_NORMS", "batch_norm_modules", "shifted_channels", "channel_stats",
           "reestimate_statistics", "test_batch_statistics", "batch_mate_change",
           "prediction_entropy",
           "tent_parameters", "tent_step"]

F64 = torch.float64
BATCH_NORMS = (nn.BatchNorm1d, nn.BatchNorm2d, nn.BatchNorm3d, lnn._BatchNorm)


def batch_norm_modules(model: nn.Module) -> list[nn.Module]:
    """Every BatchNorm module of ``model`` (torch's or the package's), in order."""
    return [m for m in model.modules() if isinstance(m, BATCH_NORMS)]


def shifted_channels(*, channels: int = 4, batch: int = 64, size: int = 8,
                     contrast: float = 0.5, brightness: float = 1.0, seed: int = 0):
    """``(bn, train_batches, test_batches)``: a ``BatchNorm2d(channels)`` (float64) whose
    running statistics were filled on 20 training batches of shape ``(batch, channels, size,
    size)`` with per-channel means 0, 1, 2, ... and std 1, 2, 3, ...; and 20 test batches of
    the same data seen through ``contrast * x + brightness`` (the shift)."""
    g = torch.Generator().manual_seed(seed)
    view = (1, channels, 1, 1)
    means = torch.arange(channels, dtype=F64).view(view)
    stds = torch.arange(1, channels + 1, dtype=F64).view(view)

    def draw():
        return torch.randn(batch, channels, size, size, generator=g, dtype=F64) * stds + means

    train = [draw() for _ in range(20)]
    test = [contrast * draw() + brightness for _ in range(20)]
    bn = lnn.BatchNorm2d(channels, momentum=None).double()
    reestimate_statistics(bn, train)
    bn.eval()
    return bn, train, test


def channel_stats(y: torch.Tensor) -> tuple[float, float]:
    """``(max |channel mean|, max |channel std - 1|)`` of an ``(N, C, *)`` output: how far
    each channel is from standardized."""
    dims = (0,) + tuple(range(2, y.dim()))
    return (y.mean(dims).abs().max().item(),
            (y.std(dims, correction=0) - 1).abs().max().item())


@torch.no_grad()
def reestimate_statistics(model: nn.Module, batches) -> nn.Module:
    r"""Reset every BN module's running statistics and recompute them as a cumulative average
    over ``batches`` (inputs of ``model``). Returns ``model``.

    Only the BN modules run in training mode: every other module (dropout above all) is in
    evaluation mode, so BN learns the statistics of the activations it will see at inference.
    Putting the whole model in training mode instead (``model.train()``) would switch dropout
    back on and relearn the training-time variance, :math:`\sigma^2/(1-p)` after a Dropout(p)
    of zero-mean inputs, which is the "variance shift" the re-estimation is meant to remove.
    Each module's mode and each BN's momentum are restored afterwards.
    """
    norms = batch_norm_modules(model)
    if not norms:
        raise ValueError("model has no BatchNorm module whose statistics could be re-estimated")
    stateless = [name for name, m in model.named_modules()
                 if isinstance(m, BATCH_NORMS) and not m.track_running_stats]
    if stateless:
        raise ValueError(f"BatchNorm module {stateless[0] or 'model'!r} keeps no running "
                         "statistics (track_running_stats=False): nothing to re-estimate")
    modes = [(m, m.training) for m in model.modules()]
    momenta = [m.momentum for m in norms]
    try:
        model.eval()                                    # dropout and the rest: inference
        for m in norms:
            m.reset_running_stats()
            m.momentum = None                           # cumulative average: 1 / t
            m.train()                                   # only BN uses batch statistics
        for x in batches:
            model(x)
    finally:
        for m, momentum in zip(norms, momenta, strict=True):
            m.momentum = momentum
        for m, training in modes:
            m.training = training
    return model


@contextlib.contextmanager
def test_batch_statistics(model: nn.Module):
    """Within the block, every BN module of ``model`` normalizes with the current batch's
    statistics and leaves its running statistics untouched; the rest of the model keeps its
    mode. Restores everything on exit."""
    norms = batch_norm_modules(model)
    saved = [(m.training, m.track_running_stats, m.running_mean, m.running_var) for m in norms]
    try:
        for m in norms:
            m.train()
            m.track_running_stats = False
            m.running_mean, m.running_var = None, None   # batch statistics, no update
        yield model
    finally:
        for m, (training, track, mean, var) in zip(norms, saved, strict=True):
            m.train(training)
            m.track_running_stats = track
            m.running_mean, m.running_var = mean, var


@torch.no_grad()
def batch_mate_change(model: nn.Module, batch: torch.Tensor, mates: torch.Tensor) -> dict:
    """How much sample 0's output changes when the rest of its batch is replaced by
    ``mates[1:]``: ``{"running": ..., "test_batch": ...}``, the largest absolute change with
    the running statistics (evaluation mode: 0, each sample is normalized alone) and with
    test-batch statistics (the batch-mates enter the mean and variance). ``batch`` and
    ``mates`` share a shape; the modes of ``model`` are restored."""
    if batch.shape != mates.shape or batch.shape[0] < 2:
        raise ValueError(f"batch and mates must share a shape with at least 2 samples, got "
                         f"{tuple(batch.shape)} and {tuple(mates.shape)}")
    other = torch.cat([batch[:1], mates[1:]])
    modes = [(m, m.training) for m in model.modules()]
    try:
        model.eval()
        out = {"running": (model(other)[0] - model(batch)[0]).abs().max().item()}
        with test_batch_statistics(model):
            out["test_batch"] = (model(other)[0] - model(batch)[0]).abs().max().item()
    finally:
        for m, training in modes:
            m.training = training
    return out


def prediction_entropy(logits: torch.Tensor) -> torch.Tensor:
    r"""Mean Shannon entropy (nats) of the softmax predictions, :math:`-\sum_k p_k\log p_k`,
    of ``logits`` of shape ``(N, K)``."""
    logp = torch.log_softmax(logits, dim=-1)
    return -(logp.exp() * logp).sum(-1).mean()


def tent_parameters(model: nn.Module) -> list[tuple[str, nn.Parameter]]:
    """``(name, parameter)`` of the BN affine parameters: the only ones TENT updates."""
    ids = {id(m) for m in batch_norm_modules(model)}
    return [(f"{mod_name}.{p_name}" if mod_name else p_name, p)
            for mod_name, mod in model.named_modules() if id(mod) in ids
            for p_name, p in mod.named_parameters(recurse=False)]


def tent_step(model: nn.Module, x: torch.Tensor, lr: float = 1e-3) -> dict:
    """One TENT update on the unlabeled batch ``x``: BN layers use the batch's statistics,
    only BN's affine parameters receive the entropy gradient (one SGD step of rate ``lr``).
    Returns ``{"entropy_before", "entropy_after", "updated"}`` where ``updated`` names the
    parameters that changed."""
    params = tent_parameters(model)
    if not params:
        raise ValueError("model has no BatchNorm affine parameters for TENT to update")
    before = {name: p.detach().clone() for name, p in model.named_parameters()}
    with test_batch_statistics(model):
        loss = prediction_entropy(model(x))
        grads = torch.autograd.grad(loss, [p for _, p in params])
        with torch.no_grad():
            for (_, p), grad in zip(params, grads, strict=True):
                p -= lr * grad
            after = prediction_entropy(model(x))
    updated = [name for name, p in model.named_parameters()
               if not torch.equal(p.detach(), before[name])]
    return {"entropy_before": loss.item(), "entropy_after": after.item(), "updated": updated}
