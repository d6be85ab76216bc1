"""Row statistics computed three ways by one small Triton kernel, to show two classic bugs.

``row_statistics(x, method)`` returns the per-row mean and biased variance of a 2-D tensor
``x`` (M, N) with N <= 16384, computed in float32 by a kernel that holds a row in one
power-of-two block of ``BLOCK_N >= N`` lanes:

- ``"two_pass"``: mean, then the mean of squared deviations with the padding lanes masked
  out. This is what ``layer_norm_fwd_kernel`` does.
- ``"two_pass_unmasked"``: the same without the mask. Padding lanes load 0, so after the
  subtraction they hold ``-mean`` and add ``(BLOCK_N - N) * mean**2`` to the sum of squares
  (the bug reported in triton-lang/triton issue 9838 for kernels written in the style of the
  Triton tutorial; the tutorial's own kernel has the ``tl.where``).
- ``"one_pass"``: ``E[x^2] - E[x]^2`` from two running sums. Correct in exact arithmetic,
  but in float32 the two terms cancel when ``|mean| >> std`` (the large-mean trap).

This is teaching code: the fused kernels never use the two faulty variants.

``sequential_sum(values, dtype)`` shows the third pitfall, accumulating in a 16-bit type: it
adds the values one by one in ``dtype`` (NumPy), as a loop with a float16 accumulator would.
``pairwise_sum(values, dtype)`` adds them as a GPU reduction does, in a tree (neighbours
first, every partial sum rounded to ``dtype``): its error grows with ``log2(n)``, not ``n``.
``grouped_partial_sums(values, groups, dtype)`` mimics the dgamma/dbeta reduction of the
Triton tutorial: row ``i`` is added into partial buffer ``i % groups`` held in ``dtype``,
then the buffers are summed in float32.
"""

from __future__ import annotations

import numpy as np
import torch
import triton
import triton.language as tl

from .ops import MAX_BLOCK_N

METHODS = ("two_pass", "two_pass_unmasked", "one_pass")


@triton.jit
def _row_statistics_kernel(X, Mean, Var, stride_x, N, BLOCK_N: tl.constexpr,
                           METHOD: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    cols = tl.arange(0, BLOCK_N)
    mask = cols < N
    x = tl.load(X + row * stride_x + cols, mask=mask, other=0.0).to(tl.float32)
    mean = tl.sum(x, axis=0) / N
    if METHOD == 0:  # two_pass
        xc = tl.where(mask, x - mean, 0.0)
        var = tl.sum(xc * xc, axis=0) / N
    elif METHOD == 1:  # two_pass_unmasked: padding lanes contribute (0 - mean)**2 each
        xc = x - mean
        var = tl.sum(xc * xc, axis=0) / N
    else:  # one_pass: E[x^2] - E[x]^2
        var = tl.sum(x * x, axis=0) / N - mean * mean
    tl.store(Mean + row, mean)
    tl.store(Var + row, var)


def row_statistics(x: torch.Tensor, method: str = "two_pass"):
    """Per-row ``(mean, var)`` (float32, shape (M,)) of ``x`` (M, N) computed by ``method``."""
    if method not in METHODS:
        raise ValueError(f"method: expected one of {METHODS}, got {method!r}")
    if x.dim() != 2 or x.shape[1] == 0 or x.shape[1] > MAX_BLOCK_N:
        raise ValueError(f"x: expected a 2-D tensor with 1 <= N <= {MAX_BLOCK_N} columns, "
                         f"got shape {list(x.shape)}")
    x = x.contiguous()
    m, n = x.shape
    mean = torch.empty(m, dtype=torch.float32, device=x.device)
    var = torch.empty(m, dtype=torch.float32, device=x.device)
    if m:
        _row_statistics_kernel[(m,)](x, mean, var, x.stride(0), n,
                                     BLOCK_N=triton.next_power_of_2(n),
                                     METHOD=METHODS.index(method))
    return mean, var


def sequential_sum(values, dtype=np.float16) -> float:
    """Sum of ``values`` added left to right with an accumulator of ``dtype``."""
    arr = np.asarray(values).astype(dtype).ravel()
    if arr.size == 0:
        return 0.0
    return float(np.add.accumulate(arr, dtype=dtype)[-1])


def pairwise_sum(values, dtype=np.float16) -> float:
    """Tree sum of ``values`` in ``dtype``: pairs of neighbours added (and rounded to
    ``dtype``) level by level until one value is left; an odd element passes up unchanged."""
    level = np.asarray(values).astype(dtype)
    if level.size == 0:
        return 0.0
    while level.size > 1:
        if level.size % 2:
            level = np.concatenate([level, np.zeros(1, dtype)])
        level = (level[0::2] + level[1::2]).astype(dtype)
    return float(level[0])


def grouped_partial_sums(values, groups: int, dtype=np.float16) -> np.ndarray:
    """Column sums of ``values`` (M, N): rows accumulated in ``groups`` buffers of ``dtype``
    (row i into buffer i % groups, in row order), then the buffers summed in float32."""
    arr = np.asarray(values)
    if arr.ndim != 2 or groups < 1:
        raise ValueError("values: expected a 2-D array; groups: expected a positive int")
    partial = np.zeros((groups, arr.shape[1]), dtype=dtype)
    for g in range(min(groups, arr.shape[0])):
        partial[g] = np.add.accumulate(arr[g::groups].astype(dtype), axis=0, dtype=dtype)[-1]
    return partial.astype(np.float32).sum(axis=0)
