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
``accumulation_running_mean`` / ``micro_batch_momentum``
                            what ``k`` accumulated micro-batches do to the running
                            statistics (``k`` updates per optimizer step), and the momentum
                            per micro-batch that keeps one step's decay
``small_batch_statistics``  images with their own channel offsets: how noisy BN's batch mean
                            is at ``N`` images per device, and how far training-mode BN
                            is from evaluation-mode BN; GroupNorm for contrast
"""

from __future__ import annotations

import copy

import torch
from torch import nn

from layernorm_tutorial import functional as LF
from layernorm_tutorial import nn as lnn

__all__ = ["accumulation_gap", "ghost_batch_norm", "batch_renorm", "predicted_ema_lag",
           "drifting_running_mean", "class_batches", "class_mean_gap", "shuffled_batch_norm",
           "micro_batch_momentum", "accumulation_running_mean", "small_batch_statistics"]

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


def micro_batch_momentum(momentum: float, micro_batches: int) -> float:
    r"""The momentum per micro-batch that makes ``k = micro_batches`` running-statistics
    updates keep as much of the old estimate as one update with ``momentum`` does:
    :math:`(1-m')^k = 1-m`, so :math:`m' = 1-(1-m)^{1/k}\approx m/k`."""
    if not 0 < momentum <= 1:
        raise ValueError(f"momentum must be in (0, 1], got {momentum}")
    if isinstance(micro_batches, bool) or not isinstance(micro_batches, int) \
            or micro_batches < 1:
        raise ValueError(f"micro_batches must be a positive int, got {micro_batches!r}")
    return 1.0 - (1.0 - momentum) ** (1.0 / micro_batches)


def accumulation_running_mean(micro_batches: int, momentum: float, *, features: int = 3,
                              batch: int = 8, seed: int = 0) -> dict:
    r"""One optimizer step of gradient accumulation, seen by BN's running mean.

    The package's ``BatchNorm1d(momentum=momentum)`` starts with ``running_mean = 1`` and
    runs ``micro_batches`` training-mode forward passes on micro-batches of ``batch``
    samples whose every feature has mean exactly 0 (float64). Each pass multiplies the old
    estimate by :math:`1-m`, so after the step it keeps :math:`(1-m)^k` of it: ``k`` times
    the decay of one update per step. Returns ``{"kept": running mean after the step,
    "predicted": (1 - m)**k, "updates": num_batches_tracked}``.
    """
    bn = lnn.BatchNorm1d(features, momentum=momentum).to(F64)
    with torch.no_grad():
        bn.running_mean.fill_(1.0)
    g = torch.Generator().manual_seed(seed)
    for _ in range(micro_batches):
        x = torch.randn(batch, features, generator=g, dtype=F64)
        bn(x - x.mean(0))                                 # batch mean exactly 0
    return {"kept": bn.running_mean.max().item(),
            "predicted": (1.0 - momentum) ** micro_batches,
            "updates": int(bn.num_batches_tracked)}


def small_batch_statistics(batch_sizes, *, channels: int = 2, size: int = 8,
                           between: float = 1.0, within: float = 1.0, batches: int = 400,
                           eps: float = 1e-5, seed: int = 0) -> dict:
    r"""Why a few large images still give BN poor statistics.

    Image ``n`` of ``(N, C, size, size)`` is :math:`x_{nc} = a_{nc} + e_{nc}`: an offset per
    image and channel, :math:`a \sim N(0, \tau^2)` (``between``), plus pixel noise
    :math:`e \sim N(0, \sigma^2)` (``within``). BN's batch mean of a channel over
    :math:`N` images of :math:`P` pixels has standard deviation

    .. math:: \sqrt{\tau^2/N + \sigma^2/(N P)},

    so more pixels do not help once the offsets dominate. For each ``N`` in
    ``batch_sizes``, over ``batches`` batches (float64), returns ``{N: {"mean_std":
    measured std of the batch mean, "predicted": the formula, "train_eval_gap": mean |BN in
    training mode - BN in evaluation mode|, "gn_alone_gap": max |GN of the first batch - GN
    of each of its images alone|}}``; evaluation mode uses the population statistics (mean 0,
    variance :math:`\tau^2+\sigma^2`), what a perfect running average would hold.
    GroupNorm (``channels // 2`` groups) computes the same thing in both modes.
    """
    g = torch.Generator().manual_seed(seed)
    pixels = size * size
    population_var = torch.full((channels,), between ** 2 + within ** 2, dtype=F64)
    population_mean = torch.zeros(channels, dtype=F64)
    out = {}
    for n in batch_sizes:
        if isinstance(n, bool) or not isinstance(n, int) or n < 2:
            raise ValueError(f"batch sizes must be ints >= 2, got {n!r}")
        offsets = between * torch.randn(batches, n, channels, 1, 1, generator=g, dtype=F64)
        noise = within * torch.randn(batches, n, channels, size, size, generator=g,
                                     dtype=F64)
        x = offsets + noise
        means = x[:, :, 0].mean((1, 2, 3))
        gaps = []
        for batch in x:
            train = LF.batch_norm(batch, None, None, training=True, eps=eps)
            infer = LF.batch_norm(batch, population_mean, population_var, training=False,
                                  eps=eps)
            gaps.append((train - infer).abs().mean())
        groups = max(1, channels // 2)
        together = LF.group_norm(x[0], groups, eps=eps)
        alone = torch.cat([LF.group_norm(img[None], groups, eps=eps) for img in x[0]])
        gn_gap = (together - alone).abs().max().item()
        out[n] = {"mean_std": means.std().item(),
                  "predicted": (between ** 2 / n + within ** 2 / (n * pixels)) ** 0.5,
                  "train_eval_gap": torch.stack(gaps).mean().item(),
                  "gn_alone_gap": gn_gap}
    return out
