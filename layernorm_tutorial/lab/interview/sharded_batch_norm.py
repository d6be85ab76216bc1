"""BatchNorm under data parallelism: what each device sees when statistics are not synchronized.

:func:`shard_moments` gives the per-device statistics, which
:func:`layernorm_tutorial.variance_algorithms.merge_moments` combines into the full batch's
(what synchronized BatchNorm all-reduces); :func:`unsynchronized_batch_norm` normalizes each
shard with its own statistics instead.
"""

from __future__ import annotations

import torch

from layernorm_tutorial import functional

__all__ = ["shard_moments", "unsynchronized_batch_norm"]


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
