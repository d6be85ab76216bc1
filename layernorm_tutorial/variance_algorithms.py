"""Three ways to compute a variance, and how they fail in low precision.

Layer normalization needs the variance of every row. On paper the three formulas below are
identical; in float32 they are not:

``naive_variance``     E[x^2] - E[x]^2 in one pass. Subtracting two large, nearly equal
                       numbers cancels the significant digits: the relative error grows like
                       ``eps_machine * (mean / std)**2`` and the result can even be negative.
``two_pass_variance``  first the mean, then the mean of (x - mean)^2. Stable, but it reads
                       the data twice.
``welford_variance``   one pass with a running mean and a running sum of squared deviations
                       (Welford 1962). Stable and single-pass: what fused GPU kernels use.
                       Partial results from two chunks merge with ``welford_merge``
                       (Chan, Golub and LeVeque 1983); ``merge_moments`` merges K of them
                       (what synchronized BatchNorm all-reduces).

``sequential_moments`` shows the third failure: accumulating in a 16-bit dtype.

Every function computes in the dtype of its input (no silent upcast), so a float32 tensor
shows float32 behaviour. ``correction`` follows ``torch.var``: 0 gives the biased variance
that LayerNorm uses (divide by H), 1 the unbiased one (divide by H - 1).
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
import torch

__all__ = [
    "WelfordState",
    "naive_variance",
    "two_pass_variance",
    "welford_update",
    "welford_merge",
    "merge_moments",
    "sequential_sum",
    "sequential_moments",
    "welford_variance",
    "VARIANCE_ALGORITHMS",
    "variance_relative_error",
]


class WelfordState(NamedTuple):
    """Running statistics after ``count`` values: their ``mean`` and ``m2 = sum (x - mean)^2``."""

    count: int
    mean: torch.Tensor
    m2: torch.Tensor


def _check(x, dim: int, correction: int) -> int:
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"x must be a torch.Tensor, got {type(x).__name__}")
    if not x.is_floating_point():
        raise TypeError(f"x must have a floating dtype, got {x.dtype}")
    if x.dim() == 0:
        raise ValueError("x must have at least one dimension")
    if not -x.dim() <= dim < x.dim():
        raise IndexError(f"dim={dim} is out of range for a tensor with {x.dim()} dimensions")
    if correction not in (0, 1):
        raise ValueError(f"correction must be 0 (biased) or 1 (unbiased), got {correction}")
    n = x.shape[dim]
    if n - correction <= 0:
        raise ValueError(f"need more than {correction} element(s) along dim {dim}, got {n}")
    return n


def naive_variance(x: torch.Tensor, dim: int = -1, correction: int = 0) -> torch.Tensor:
    """Textbook one-pass formula: ``(sum x^2 - (sum x)^2 / n) / (n - correction)``.

    Shapes: ``x`` (..., n, ...) -> the same shape without ``dim``. Numerically unstable when
    ``|mean| >> std``: kept here to show the failure, never use it in a kernel.
    """
    n = _check(x, dim, correction)
    total = x.sum(dim)
    total_sq = (x * x).sum(dim)
    return (total_sq - total * total / n) / (n - correction)


def two_pass_variance(x: torch.Tensor, dim: int = -1, correction: int = 0) -> torch.Tensor:
    """Mean first, then the mean squared deviation: ``sum (x - mean)^2 / (n - correction)``."""
    n = _check(x, dim, correction)
    mean = x.mean(dim, keepdim=True)
    xshift = x - mean
    return (xshift * xshift).sum(dim) / (n - correction)


def welford_update(count: int, mean, m2, value):
    """Add one value (or one value per row) to running statistics; returns the new triple.

    ``count_new = count + 1``, ``delta = value - mean``, ``mean_new = mean + delta / count_new``,
    ``m2_new = m2 + delta * (value - mean_new)``. Works for floats, NumPy arrays and tensors.
    Using the *new* mean in the last factor is what keeps the update stable.
    """
    count_new = count + 1
    delta = value - mean
    mean_new = mean + delta / count_new
    m2_new = m2 + delta * (value - mean_new)
    return count_new, mean_new, m2_new


def welford_merge(a: WelfordState, b: WelfordState) -> WelfordState:
    """Combine the statistics of two disjoint chunks (Chan et al.'s parallel formula).

    ``delta = mean_b - mean_a``, ``n = n_a + n_b``, ``mean = mean_a + delta * n_b / n``,
    ``m2 = m2_a + m2_b + delta^2 * n_a * n_b / n``. This is how a GPU kernel reduces the
    per-thread partial results of one row.
    """
    if a.count == 0:
        return b
    if b.count == 0:
        return a
    count = a.count + b.count
    delta = b.mean - a.mean
    mean = a.mean + delta * (b.count / count)
    m2 = a.m2 + b.m2 + delta * delta * (a.count * b.count / count)
    return WelfordState(count, mean, m2)


def merge_moments(means, variances, counts):
    r"""Combine per-shard moments into the moments of the union (what SyncBatchNorm all-reduces).

    Shapes: ``means``, ``variances`` (biased) ``(K, C)`` tensors, ``counts`` ``(K,)``. Folds
    :func:`welford_merge` over the shards, which gives :math:`\mu = \sum_k n_k\mu_k / n` and
    :math:`\sigma^2 = \sum_k n_k(\sigma_k^2 + (\mu_k-\mu)^2) / n`. Returns
    ``(mean (C,), variance (C,))``.
    """
    total = WelfordState(0, means[0] * 0, means[0] * 0)
    for n, mean, var in zip(torch.as_tensor(counts).tolist(), means, variances, strict=True):
        total = welford_merge(total, WelfordState(n, mean, var * n))
    return total.mean, total.m2 / total.count


def sequential_sum(values, dtype=np.float16) -> float:
    """Sum of ``values`` added left to right with an accumulator of NumPy ``dtype``."""
    arr = np.asarray(values).astype(dtype).ravel()
    if arr.size == 0:
        return 0.0
    with np.errstate(over="ignore", invalid="ignore"):
        return float(np.add.accumulate(arr, dtype=dtype)[-1])


def sequential_moments(values, dtype) -> tuple[float, float]:
    """Mean and biased variance of a 1-D array, accumulating one element at a time in ``dtype``.

    Two passes (mean, then squared deviations), every partial sum rounded to ``dtype``
    (:func:`sequential_sum`), as a naive kernel that keeps its accumulator in the activation
    dtype would do. Returns floats.
    """
    v = np.asarray(values, dtype=dtype)
    if v.ndim != 1 or v.size == 0:
        raise ValueError(f"values must be a non-empty 1-D array, got shape {v.shape}")
    mean = dtype(sequential_sum(v, dtype)) / dtype(v.size)
    with np.errstate(over="ignore", invalid="ignore"):
        dev = (v - mean).astype(dtype)
        return float(mean), sequential_sum(dev * dev, dtype) / v.size


def welford_variance(x: torch.Tensor, dim: int = -1, correction: int = 0) -> torch.Tensor:
    """Single pass over ``dim`` with ``welford_update`` (vectorised over all other dims)."""
    n = _check(x, dim, correction)
    columns = x.movedim(dim, -1)
    mean = torch.zeros(columns.shape[:-1], dtype=x.dtype, device=x.device)
    m2 = torch.zeros_like(mean)
    count = 0
    for k in range(n):
        count, mean, m2 = welford_update(count, mean, m2, columns[..., k])
    return m2 / (n - correction)


VARIANCE_ALGORITHMS = {
    "naive": naive_variance,
    "two-pass": two_pass_variance,
    "Welford": welford_variance,
}


def variance_relative_error(offsets, *, features: int = 512, rows: int = 32,
                            dtype: torch.dtype = torch.float32, seed: int = 0) -> dict:
    """Median relative error of each algorithm when the data's mean is moved to ``offset``.

    For each offset, draw ``rows x features`` standard-normal values, add the offset, round to
    ``dtype``; the reference is the two-pass variance in float64 of those *same rounded*
    values, so only the algorithm's arithmetic is measured, not the rounding of the input.
    Returns ``{"offsets": array, name: array of median |v - ref| / ref, ...}`` for every
    entry of ``VARIANCE_ALGORITHMS``, plus ``"negative_naive"``: how many rows the naive
    formula returned a negative variance for (impossible mathematically, it breaks sqrt).
    """
    offsets = np.asarray(offsets, dtype=np.float64)
    if offsets.ndim != 1 or offsets.size == 0:
        raise ValueError("offsets must be a non-empty 1-D sequence of numbers")
    generator = torch.Generator().manual_seed(seed)
    noise = torch.randn(rows, features, generator=generator, dtype=torch.float64)
    result = {name: np.empty(offsets.size) for name in VARIANCE_ALGORITHMS}
    result["negative_naive"] = np.zeros(offsets.size, dtype=np.int64)
    for i, offset in enumerate(offsets):
        x = (noise + offset).to(dtype)
        reference = two_pass_variance(x.double())
        for name, algorithm in VARIANCE_ALGORITHMS.items():
            estimate = algorithm(x).double()
            error = (estimate - reference).abs() / reference
            result[name][i] = error.median().item()
        result["negative_naive"][i] = int((naive_variance(x) < 0).sum())
    result["offsets"] = offsets
    return result
