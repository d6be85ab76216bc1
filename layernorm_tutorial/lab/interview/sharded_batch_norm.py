"""BatchNorm under data parallelism: what each device sees when statistics are not synchronized.

:func:`shard_moments` gives the per-device statistics, which
:func:`layernorm_tutorial.variance_algorithms.merge_moments` combines into the full batch's
(what synchronized BatchNorm computes); :func:`unsynchronized_batch_norm` normalizes each
shard with its own statistics instead.

What ``torch.nn.SyncBatchNorm`` sends: :func:`torch_sync_batch_norm_collectives` reads it off
torch's own source (the forward all-gathers each rank's ``(mean, invstd, count)``, the
backward all-reduces two per-channel sums), and :func:`merge_gathered_statistics` combines
the gathered triples as torch's ``batch_norm_gather_stats_with_counts`` does (a CUDA-only op).
"""

from __future__ import annotations

import inspect
import re

import torch

from layernorm_tutorial import functional
from layernorm_tutorial.variance_algorithms import merge_moments

__all__ = ["shard_moments", "unsynchronized_batch_norm", "merge_gathered_statistics",
           "torch_sync_batch_norm_collectives"]


def shard_moments(x: torch.Tensor, num_shards: int):
    """Per-shard channel means and biased variances of ``x`` ``(N, C)`` split along N.

    Returns ``(means (K, C), variances (K, C), counts (K,))``, the statistics each of K
    data-parallel devices would compute on its own slice.
    """
    shards = torch.tensor_split(x, num_shards, dim=0)
    if any(s.shape[0] == 0 for s in shards):
        raise ValueError(f"num_shards={num_shards} exceeds the batch size {x.shape[0]}")
    means = torch.stack([s.mean(0) for s in shards])
    variances = torch.stack([s.var(0, correction=0) for s in shards])
    counts = torch.tensor([s.shape[0] for s in shards], dtype=x.dtype)
    return means, variances, counts


def unsynchronized_batch_norm(x: torch.Tensor, num_shards: int, eps: float = 1e-5):
    """Training-mode BatchNorm (no affine) as K devices compute it without synchronization."""
    parts = [functional.batch_norm(s, None, None, training=True, eps=eps)
             for s in torch.tensor_split(x, num_shards, dim=0)]
    return torch.cat(parts, dim=0)


def merge_gathered_statistics(means, invstds, counts, eps: float = 1e-5):
    r"""Full-batch mean and ``invstd`` from the per-rank triples SyncBatchNorm all-gathers.

    Shapes: ``means`` and ``invstds`` ``(K, C)`` (rank r's channel mean and
    :math:`1/\sqrt{\sigma_r^2+\epsilon}`), ``counts`` ``(K,)``. Each rank's biased variance is
    recovered as :math:`1/\mathrm{invstd}^2 - \epsilon` and the K groups are merged with
    Chan's formula. Returns ``(mean (C,), invstd (C,))``.
    """
    if means.shape != invstds.shape or means.dim() != 2 or counts.shape != means.shape[:1]:
        raise ValueError(f"means and invstds must be (K, C) and counts (K,), got "
                         f"{tuple(means.shape)}, {tuple(invstds.shape)} and {tuple(counts.shape)}")
    variances = invstds.pow(-2) - eps
    mean, var = merge_moments(means, variances, counts)
    return mean, torch.rsqrt(var + eps)


def torch_sync_batch_norm_collectives() -> dict[str, list[str]]:
    """The collective calls in ``torch.nn.SyncBatchNorm``'s forward and backward, in source
    order and without repeats, read from the installed torch (``inspect.getsource``).

    Returns ``{"forward": [...], "backward": [...]}``, e.g. ``all_gather`` and ``all_reduce``.
    """
    from torch.nn.modules import _functions

    found = {}
    for name in ("forward", "backward"):
        source = inspect.getsource(getattr(_functions.SyncBatchNorm, name))
        calls = re.findall(r"\b(all_gather\w*|all_reduce\w*|reduce_scatter\w*|broadcast)\s*\(",
                           source)
        found[name] = list(dict.fromkeys(calls))
    return found
