r"""A normalization below Triton: fixed-width vector code, rsqrt, warp reductions, merges.

What a hand-written CPU (SIMD) or CUDA kernel does, simulated in NumPy so each step can be
checked against torch in float64. Every function keeps its arithmetic in the dtype it is
given (no silent upcast), so a float16 or float32 run shows that dtype's rounding.

``simd_layer_norm(x, width, ...)``
    LayerNorm of each row of ``x`` ``(rows, H)`` processed ``width`` lanes at a time: a
    vector accumulator of ``width`` partial sums per pass, one horizontal (tree) sum at the
    end, then ``y = (x - mean) * rstd`` chunk by chunk. The last chunk of a row whose length
    is not a multiple of ``width`` is padded with zeros; ``mask_tail=False`` forgets to mask
    the padding in the variance pass, which adds ``pad * mean**2`` to the sum of squares.
``horizontal_sum(lanes)``
    Sum of the ``width`` lanes of a vector register by halving: ``log2(width)`` adds.
``magic_rsqrt_guess(x)``
    The float32 bit trick ``i = 0x5f3759df - (bits(x) >> 1)`` (Quake III Arena, analysed
    by Lomont 2003): a first guess of :math:`1/\sqrt{x}` within about 3.5 %.
``newton_rsqrt(x, y0, steps)``
    Newton's method for :math:`f(y) = 1/y^2 - x`: :math:`y \leftarrow y(3 - x y^2)/2`. With
    :math:`y = (1+e)/\sqrt{x}` one step maps the relative error to
    :math:`e' = -\tfrac{3}{2}e^2 - \tfrac12 e^3`: quadratic convergence while
    :math:`0 < x y_0^2 < 3`.
``integer_sqrt(n)``
    :math:`\lfloor\sqrt n\rfloor` of a non-negative integer by Newton's method in integers,
    :math:`y \leftarrow \lfloor (y + \lfloor n/y\rfloor)/2\rfloor` from a power of two
    above :math:`\sqrt n`, stopping when :math:`y` stops decreasing (exact, no floats).
``warp_allreduce_xor(values)`` / ``warp_reduce_down(values)``
    The 32 lanes of a warp summed by register shuffles in :math:`\log_2 32 = 5` steps:
    the butterfly (``__shfl_xor_sync``, every lane ends with the sum) and the shift-down
    tree (``__shfl_down_sync``, only lane 0 does).
``split_row_moments(row, block_size)``
    A row split over thread blocks of ``block_size`` values: each block's (count, mean,
    M2) and their merge by Chan et al.'s formula, against the two merges that go wrong
    (an unweighted mean of block means; per-block sums and sums of squares, which cancel).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from layernorm_tutorial import variance_algorithms as va

__all__ = [
    "horizontal_sum",
    "simd_layer_norm",
    "magic_rsqrt_guess",
    "newton_rsqrt",
    "newton_error_map",
    "integer_sqrt",
    "WARP",
    "warp_allreduce_xor",
    "warp_reduce_down",
    "pairwise_sum",
    "SplitRow",
    "split_row_moments",
]

MAGIC = 0x5F3759DF
WARP = 32


def _as_float_array(x, name: str) -> np.ndarray:
    arr = np.asarray(x)
    if not np.issubdtype(arr.dtype, np.floating):
        raise TypeError(f"{name} must hold floating-point numbers, got dtype {arr.dtype}")
    return arr


def horizontal_sum(lanes) -> np.floating:
    """Sum the ``width`` lanes of one vector ``(width,)`` by halving (lane i += lane
    i + width/2), ``log2(width)`` additions in the lanes' dtype; ``width`` a power of 2."""
    v = _as_float_array(lanes, "lanes").copy()
    width = v.shape[-1]
    if v.ndim != 1 or width == 0 or width & (width - 1):
        raise ValueError(f"lanes must be a 1-D vector whose length is a power of 2, "
                         f"got shape {v.shape}")
    while width > 1:
        width //= 2
        v[:width] = v[:width] + v[width:2 * width]
    return v[0]


def _chunks(row: np.ndarray, width: int):
    """``(chunk, valid)`` pairs: ``width`` lanes each, the last one zero-padded."""
    for start in range(0, row.size, width):
        chunk = np.zeros(width, dtype=row.dtype)
        part = row[start:start + width]
        chunk[:part.size] = part
        yield chunk, part.size


def simd_layer_norm(x, width: int = 8, eps: float = 1e-5, mask_tail: bool = True) -> np.ndarray:
    r"""LayerNorm of each row of ``x`` ``(rows, H)`` (no affine), ``width`` lanes at a time.

    Pass 1: ``acc += chunk`` (a vector of ``width`` partial sums), ``mean =
    horizontal_sum(acc) / H``. Pass 2: ``acc += (chunk - mean)**2`` on the valid lanes
    (all lanes if ``mask_tail`` is False: the padded zeros then add ``mean**2`` each),
    ``rstd = 1 / sqrt(horizontal_sum(acc) / H + eps)``. Pass 3: ``y = (chunk - mean) *
    rstd``. Arithmetic in ``x``'s dtype; returns an array of ``x``'s shape and dtype.
    """
    x = _as_float_array(x, "x")
    if x.ndim != 2 or x.shape[1] == 0:
        raise ValueError(f"x must be (rows, H) with H > 0, got shape {x.shape}")
    if width < 1 or width & (width - 1):
        raise ValueError(f"width must be a power of 2, got {width}")
    dtype = x.dtype.type
    hidden = x.shape[1]
    out = np.empty_like(x)
    lane = np.arange(width)
    for r, row in enumerate(x):
        acc = np.zeros(width, dtype=x.dtype)
        for chunk, _ in _chunks(row, width):
            acc = acc + chunk
        mean = dtype(horizontal_sum(acc) / dtype(hidden))
        acc = np.zeros(width, dtype=x.dtype)
        for chunk, valid in _chunks(row, width):
            d = chunk - mean
            if mask_tail:
                d = np.where(lane < valid, d, dtype(0))
            acc = acc + d * d
        rstd = dtype(1) / np.sqrt(horizontal_sum(acc) / dtype(hidden) + dtype(eps))
        for start in range(0, hidden, width):
            out[r, start:start + width] = (row[start:start + width] - mean) * rstd
    return out


def magic_rsqrt_guess(x) -> np.ndarray:
    """``0x5f3759df - (bits >> 1)`` reinterpreted as float32: a guess of ``1/sqrt(x)``
    for positive normal float32 ``x`` (any shape). Returns float32."""
    x = np.asarray(x, dtype=np.float32)
    if np.any(~(x > 0)):
        raise ValueError("x must be positive (the bit trick assumes a positive normal float)")
    bits = x.view(np.uint32)
    return (np.uint32(MAGIC) - (bits >> np.uint32(1))).astype(np.uint32).view(np.float32)


def newton_rsqrt(x, y0, steps: int) -> list[np.ndarray]:
    r"""Iterates ``[y0, y1, ..., y_steps]`` of :math:`y \leftarrow y\,(3 - x y^2)/2`,
    computed in the dtype of ``y0`` (``x`` is cast to it). Shapes broadcast."""
    y = _as_float_array(y0, "y0")
    if steps < 0:
        raise ValueError(f"steps must be >= 0, got {steps}")
    dtype = y.dtype.type
    x = np.asarray(x).astype(y.dtype)
    out = [y]
    for _ in range(steps):
        y = y * (dtype(3) - x * y * y) / dtype(2)
        out.append(y)
    return out


def newton_error_map(e):
    r"""The relative error after one exact Newton step from relative error ``e``:
    :math:`e' = -\tfrac32 e^2 - \tfrac12 e^3` (so :math:`|e'| \approx 1.5\,e^2`)."""
    e = np.asarray(e, dtype=np.float64)
    return -1.5 * e**2 - 0.5 * e**3


def integer_sqrt(n: int) -> tuple[int, int]:
    """``(floor(sqrt(n)), iterations)`` for an integer ``n >= 0``, in integer arithmetic
    only: start at ``2**ceil(bits(n)/2) >= sqrt(n)``, iterate ``y = (y + n // y) // 2``
    while it decreases (the iterates decrease monotonically to the floor of the root)."""
    if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or n < 0:
        raise ValueError(f"n must be a non-negative integer, got {n!r}")
    n = int(n)
    if n == 0:
        return 0, 0
    y = 1 << ((n.bit_length() + 1) // 2)
    steps = 0
    while True:
        nxt = (y + n // y) // 2
        steps += 1
        if nxt >= y:
            return y, steps
        y = nxt


def _check_warp(values) -> np.ndarray:
    v = _as_float_array(values, "values")
    if v.shape != (WARP,):
        raise ValueError(f"values must hold one number per lane, shape ({WARP},), "
                         f"got {v.shape}")
    return v.copy()


def warp_allreduce_xor(values) -> list[np.ndarray]:
    """Butterfly all-reduce of one warp ``(32,)``: at offsets 16, 8, 4, 2, 1 every lane
    adds the value of lane ``lane ^ offset`` (``__shfl_xor_sync``). Returns the lanes
    before the first step and after each of the 5 steps; in the last, every lane holds
    the same sum, bit for bit. Arithmetic in ``values``' dtype."""
    v = _check_warp(values)
    lanes = np.arange(WARP)
    history = [v.copy()]
    offset = WARP // 2
    while offset:
        v = v + v[lanes ^ offset]
        history.append(v.copy())
        offset //= 2
    return history


def warp_reduce_down(values) -> list[np.ndarray]:
    """Shift-down tree of one warp ``(32,)``: at offsets 16, 8, 4, 2, 1 lane ``i`` adds
    lane ``i + offset`` (``__shfl_down_sync``; a lane whose source is past the end keeps
    its own value, as the hardware returns it). Only lane 0 ends with the full sum.
    Returns the lanes before and after each of the 5 steps."""
    v = _check_warp(values)
    lanes = np.arange(WARP)
    history = [v.copy()]
    offset = WARP // 2
    while offset:
        source = np.where(lanes + offset < WARP, lanes + offset, lanes)
        shifted = v[source]
        v = np.where(lanes + offset < WARP, v + shifted, v)
        history.append(v.copy())
        offset //= 2
    return history


def pairwise_sum(values, dtype=np.float32) -> float:
    """Sum of ``values`` (length a power of 2) by a balanced tree of additions in
    ``dtype``, neighbours first: the order of a warp's shuffle reduction."""
    v = np.asarray(values).astype(dtype).ravel()
    if v.size == 0 or v.size & (v.size - 1):
        raise ValueError(f"values must have a power-of-2 length, got {v.size}")
    while v.size > 1:
        v = (v[0::2] + v[1::2]).astype(dtype)
    return float(v[0])


@dataclass(frozen=True)
class SplitRow:
    """The statistics of one row split over blocks (float64 numbers).

    ``counts``, ``means``, ``m2s``: each block's (count, mean, sum of squared deviations),
    computed in the kernel's dtype. ``merged_mean``, ``merged_var``: Chan's merge of the
    blocks (biased variance). ``exact_mean``, ``exact_var``: the same row, rounded to the
    kernel's dtype, in float64 (the reference: only the arithmetic is measured).
    ``mean_of_means``: the unweighted average of the block means (wrong when the counts
    differ). ``naive_var``: ``sum(x^2)/n - (sum(x)/n)^2`` from the blocks' sums and sums
    of squares in the kernel's dtype (cancels when ``|mean| >> std``)."""

    counts: tuple[int, ...]
    means: np.ndarray
    m2s: np.ndarray
    merged_mean: float
    merged_var: float
    exact_mean: float
    exact_var: float
    mean_of_means: float
    naive_var: float


def split_row_moments(row, block_size: int, dtype=np.float32) -> SplitRow:
    """Split the 1-D ``row`` into blocks of ``block_size`` values (the last one shorter
    when ``block_size`` does not divide the length), as a kernel with ``BLOCK_N`` lanes
    per block would; compute each block's two-pass (count, mean, M2) in ``dtype``, and
    merge them pairwise, neighbours first, as a reduction tree would (Chan et al.'s
    formula, :func:`variance_algorithms.welford_merge`, in float64). See
    :class:`SplitRow`."""
    row = np.asarray(row, dtype=np.float64)
    if row.ndim != 1 or row.size == 0:
        raise ValueError(f"row must be a non-empty 1-D array, got shape {row.shape}")
    if block_size < 1:
        raise ValueError(f"block_size must be >= 1, got {block_size}")
    rounded = row.astype(dtype)
    states = []
    sums = sumsq = dtype(0)
    for start in range(0, row.size, block_size):
        p = rounded[start:start + block_size]
        mean = p.mean(dtype=dtype)
        m2 = ((p - mean) ** 2).sum(dtype=dtype)
        states.append(va.WelfordState(p.size, float(mean), float(m2)))
        sums = dtype(sums + p.sum(dtype=dtype))
        sumsq = dtype(sumsq + (p * p).sum(dtype=dtype))
    leaves = list(states)
    while len(states) > 1:                   # a tree: neighbours first
        states = [va.welford_merge(*states[i:i + 2]) if i + 1 < len(states) else states[i]
                  for i in range(0, len(states), 2)]
    total = states[0]
    n = dtype(row.size)
    means = np.array([s.mean for s in leaves])
    exact = rounded.astype(np.float64)
    return SplitRow(
        counts=tuple(s.count for s in leaves), means=means,
        m2s=np.array([s.m2 for s in leaves]),
        merged_mean=float(total.mean), merged_var=float(total.m2 / total.count),
        exact_mean=float(exact.mean()), exact_var=float(exact.var()),
        mean_of_means=float(means.mean()),
        naive_var=float(dtype(sumsq / n - (sums / n) ** 2)))
