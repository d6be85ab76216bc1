r"""BatchNorm in practice: micro-batches, ghost batches, renormalization, stale statistics,
batch composition and shuffled statistics.

Every function here acts on BN's per-channel statistics over a batch ``(N, C, *)``,

.. math:: \mu_B = \tfrac1M\sum x,\qquad \sigma_B^2 = \tfrac1M\sum (x-\mu_B)^2,\qquad
          \hat x = (x-\mu_B)/\sqrt{\sigma_B^2+\epsilon},

with ``M = N * prod(*)`` values per channel:

``accumulation_gap``        gradients of one batch vs the same batch as accumulated
                            micro-batches, for BN and LN models
``ghost_batch_norm``        BN applied to each virtual batch of ``v`` samples separately
``batch_renorm``            Batch Renormalization's training forward, with ``r`` and ``d``
``predicted_ema_lag`` / ``drifting_running_mean``
                            how far BN's running mean trails a batch mean that drifts as
                            the weights change, in closed form and measured
``class_batches`` / ``class_mean_gap``
                            batches sorted by class or shuffled, and how far apart the
                            classes' mean outputs are
``shuffled_batch_norm``     MoCo's shuffling BN: keys normalized on devices after a random
                            permutation, returned in their original order
"""

from __future__ import annotations

import copy

import torch
from torch import nn

from layernorm_tutorial import functional as LF
from layernorm_tutorial import nn as lnn

__all__ = ["accumulation_gap", "ghost_batch_norm", "batch_renorm", "predicted_ema_lag",
           "drifting_running_mean", "class_batches", "class_mean_gap", "shuffled_batch_norm"]

F64 = torch.float64


def _mlp(norm: str, features: int, hidden: int, classes: int) -> nn.Module:
    layers = {"batch": lambda: lnn.BatchNorm1d(hidden), "layer": lambda: lnn.LayerNorm(hidden)}
    if norm not in layers:
        raise ValueError(f"norm must be 'batch' or 'layer', got {norm!r}")
    return nn.Sequential(nn.Linear(features, hidden), layers[norm](), nn.ReLU(),
                         nn.Linear(hidden, classes)).to(F64)


def accumulation_gap(norm: str, *, micro_batches: int = 4, batch: int = 32,
                     seed: int = 0) -> dict:
    r"""Gradient of one batch of ``batch`` samples vs the sum of the gradients of its
    ``micro_batches`` equal chunks, each loss weighted by its share of the batch (gradient
    accumulation), for the model ``Linear(6, 16) -> norm -> ReLU -> Linear(16, 3)`` with
    ``norm`` ``"batch"`` or ``"layer"`` (float64, mean cross-entropy).

    Returns ``{"max_gap": max |g_full - g_accumulated| over all parameters,
    "max_grad": max |g_full|, "updates_full": number of BN running-statistics updates of the
    full pass, "updates_accumulated": the same for the micro-batches}`` (0 and 0 for LN).
    With LN the loss is a sum over samples, so the two gradients are equal; with BN each
    micro-batch is normalized with its own statistics, a different function.
    """
    if micro_batches < 1 or batch % micro_batches:
        raise ValueError(f"micro_batches must divide batch={batch}, got {micro_batches}")
    g = torch.Generator().manual_seed(seed)
    torch.manual_seed(seed)
    full = _mlp(norm, 6, 16, 3)
    accumulated = copy.deepcopy(full)
    x = torch.randn(batch, 6, generator=g, dtype=F64) * 2 + 1
    y = torch.randint(0, 3, (batch,), generator=g)
    nn.functional.cross_entropy(full(x), y).backward()
    for xs, ys in zip(x.chunk(micro_batches), y.chunk(micro_batches), strict=True):
        share = len(xs) / batch
        (share * nn.functional.cross_entropy(accumulated(xs), ys)).backward()
    gaps = [(a.grad - b.grad).abs().max().item()
            for a, b in zip(full.parameters(), accumulated.parameters(), strict=True)]

    def updates(model):
        return sum(int(m.num_batches_tracked) for m in model.modules()
                   if isinstance(m, lnn._BatchNorm))

    return {"max_gap": max(gaps),
            "max_grad": max(p.grad.abs().max().item() for p in full.parameters()),
            "updates_full": updates(full), "updates_accumulated": updates(accumulated)}


def ghost_batch_norm(x: torch.Tensor, virtual_batch_size: int, weight=None, bias=None,
                     eps: float = 1e-5) -> torch.Tensor:
    r"""Ghost Batch Normalization's training forward (Hoffer et al., 2017).

    ``x`` ``(N, C, *)`` is split along the batch into ``N / v`` virtual batches of ``v =
    virtual_batch_size`` samples; each is batch-normalized with its *own* mean and biased
    variance (the package's :func:`~layernorm_tutorial.functional.batch_norm` in training
    mode), then the per-channel ``weight`` and ``bias`` ``(C,)`` are applied. ``v = N`` is
    plain BN; it is what data-parallel training without synchronization computes when each
    device holds ``v`` samples. Running statistics are not handled here.
    """
    if isinstance(virtual_batch_size, bool) or not isinstance(virtual_batch_size, int):
        raise TypeError("virtual_batch_size must be an int, got "
                        f"{type(virtual_batch_size).__name__}")
    if virtual_batch_size < 1 or x.shape[0] % virtual_batch_size:
        raise ValueError(f"virtual_batch_size must divide the batch size {x.shape[0]}, "
                         f"got {virtual_batch_size}")
    chunks = x.split(virtual_batch_size)
    return torch.cat([LF.batch_norm(c, None, None, weight, bias, training=True, eps=eps)
                      for c in chunks])


def batch_renorm(x: torch.Tensor, running_mean: torch.Tensor, running_var: torch.Tensor,
                 r_max: float, d_max: float, weight=None, bias=None, eps: float = 1e-5):
    r"""Batch Renormalization's training forward (Ioffe, 2017); returns ``(y, r, d)``.

    With the batch statistics :math:`\mu_B, \sigma_B = \sqrt{\sigma_B^2+\epsilon}` and the
    running ones :math:`\mu, \sigma = \sqrt{\hat\sigma^2+\epsilon}`, per channel,

    .. math:: r = \mathrm{clip}_{[1/r_{max},\,r_{max}]}\Big(\frac{\sigma_B}{\sigma}\Big),
              \quad d = \mathrm{clip}_{[-d_{max},\,d_{max}]}\Big(\frac{\mu_B-\mu}{\sigma}\Big),
              \quad \hat x = \frac{x-\mu_B}{\sigma_B}\,r + d,

    and ``y = weight * x_hat + bias``. ``r`` and ``d`` are constants for autograd (no
    gradient flows through them). ``r_max = 1, d_max = 0`` is BatchNorm; when neither is
    clipped, :math:`\hat x = (x-\mu)/\sigma`, the inference-time output. Shapes: ``x``
    ``(N, C, *)``; running statistics, ``weight``, ``bias`` ``(C,)``; ``r`` and ``d`` are
    ``(C,)``. The running statistics are read, not updated.
    """
    if r_max < 1 or d_max < 0:
        raise ValueError(f"need r_max >= 1 and d_max >= 0, got r_max={r_max}, d_max={d_max}")
    view = (1, -1) + (1,) * (x.dim() - 2)
    dims = (0,) + tuple(range(2, x.dim()))
    cache = LF.standardize(x, dims, eps)                      # batch statistics
    sigma_b = torch.sqrt(cache.var + eps)                     # (1, C, 1, ...)
    sigma = torch.sqrt(running_var + eps).view(view)
    r = (sigma_b / sigma).clamp(1 / r_max, r_max).detach()
    d = ((cache.mean - running_mean.view(view)) / sigma).clamp(-d_max, d_max).detach()
    y = cache.norm * r + d
    if weight is not None:
        y = y * weight.view(view)
    if bias is not None:
        y = y + bias.view(view)
    return y, r.flatten(), d.flatten()


def predicted_ema_lag(momentum: float, drift: float, steps: int) -> float:
    r"""How far an exponential moving average trails a linearly drifting value.

    Batch ``t = 1, 2, ...`` has mean :math:`s\,t` (``drift`` :math:`s` per step); the running
    mean :math:`e_t = (1-m)\,e_{t-1} + m\,s\,t` from :math:`e_0 = 0` trails it by exactly

    .. math:: s\,t - e_t = s\,\frac{1-m}{m}\,\big(1-(1-m)^t\big) \to s\,\frac{1-m}{m},

    nine steps of drift for PyTorch's default ``momentum = 0.1``.
    """
    if not 0 < momentum <= 1:
        raise ValueError(f"momentum must be in (0, 1], got {momentum}")
    return drift * (1 - momentum) / momentum * (1 - (1 - momentum) ** steps)


def drifting_running_mean(*, steps: int = 50, momentum: float = 0.1, drift: float = 0.02,
                          features: int = 4, batch: int = 64, seed: int = 0) -> dict:
    r"""A ``Linear(features, 1, bias=False) -> BatchNorm1d(1)`` model (float64) whose weight
    moves by the same amount every step, as training moves it, so that the mean of the BN
    input grows by exactly ``drift`` per step on a fixed batch (mean of each feature 1).
    After ``steps`` training-mode passes, returns ``{"model", "batch", "running_mean",
    "current_mean", "lag", "predicted_lag"}``: the running mean trails the mean that the
    final weights produce by :func:`predicted_ema_lag`.
    """
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(batch, features, generator=g, dtype=F64)
    x = x - x.mean(0) + 1.0                              # every feature has mean exactly 1
    model = nn.Sequential(nn.Linear(features, 1, bias=False),
                          lnn.BatchNorm1d(1, momentum=momentum)).to(F64)
    with torch.no_grad():
        model[0].weight.zero_()
        for _ in range(steps):
            model[0].weight += drift / features               # the "optimizer step"
            model(x)
        current = model[0](x).mean().item()
    running = model[1].running_mean.item()
    return {"model": model, "batch": x, "running_mean": running, "current_mean": current,
            "lag": current - running, "predicted_lag": predicted_ema_lag(momentum, drift,
                                                                          steps)}


def class_batches(*, sort_by_class: bool, per_class: int = 64, batch: int = 16,
                  separation: float = 2.0, seed: int = 0):
    r"""Two classes of one-feature samples, ``N(-separation/2, 1)`` and ``N(+separation/2,
    1)``, ``per_class`` each (float64), cut into batches of ``batch``: sorted by class
    (every batch holds one class) or shuffled. Returns ``(x, y)``: ``x`` ``(num_batches,
    batch, 1)`` and ``y`` ``(num_batches, batch)``; the same samples either way."""
    if (2 * per_class) % batch:
        raise ValueError(f"batch must divide 2 * per_class = {2 * per_class}, got {batch}")
    g = torch.Generator().manual_seed(seed)
    y = torch.arange(2).repeat_interleave(per_class)
    x = torch.randn(2 * per_class, 1, generator=g, dtype=F64) + separation * (y.view(-1, 1)
                                                                                 - 0.5)
    if not sort_by_class:
        order = torch.randperm(2 * per_class, generator=g)
        x, y = x[order], y[order]
    return x.view(-1, batch, 1), y.view(-1, batch)


def class_mean_gap(outputs: torch.Tensor, labels: torch.Tensor) -> float:
    """Difference between the mean output of class 1 and of class 0, in units of the
    outputs' overall standard deviation: ``outputs`` ``(..., 1)``, ``labels`` of the same
    leading shape."""
    flat, lab = outputs.reshape(-1), labels.reshape(-1)
    return ((flat[lab == 1].mean() - flat[lab == 0].mean()) / flat.std()).item()


def shuffled_batch_norm(keys: torch.Tensor, devices: int, generator: torch.Generator):
    r"""MoCo's shuffling BN for the key encoder, simulated on one machine.

    ``keys`` ``(N, C)`` is permuted at random, cut into ``devices`` equal chunks, each chunk
    batch-normalized with its own statistics (as on separate devices, no synchronization),
    and the result put back in the original order. Returns ``(normalized, device)``:
    ``normalized`` ``(N, C)`` in the order of ``keys``, and ``device`` ``(N,)``, the chunk that
    normalized each key. Without shuffling, key ``i`` would land on chunk ``i // (N / devices)``,
    the chunk of its query.
    """
    n = keys.shape[0]
    if devices < 1 or n % devices:
        raise ValueError(f"devices must divide the batch size {n}, got {devices}")
    order = torch.randperm(n, generator=generator)
    shuffled = ghost_batch_norm(keys[order], n // devices)
    normalized = torch.empty_like(shuffled)
    normalized[order] = shuffled                             # unshuffle
    device = torch.empty(n, dtype=torch.long)
    device[order] = torch.arange(n) // (n // devices)
    return normalized, device
