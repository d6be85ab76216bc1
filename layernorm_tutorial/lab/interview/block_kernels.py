r"""A normalization kernel as CUDA lays it out, simulated thread by thread in NumPy.

The interview's hand-written kernel: one thread block per row, each thread loading
``vec``-wide chunks (a ``float4`` is 4 floats, 16 bytes), partial sums in registers, a
warp shuffle tree, one value per warp through shared memory, a second shuffle tree in warp
0, and the result broadcast to every thread. Each step is simulated with the arithmetic
in a chosen accumulator dtype, so a float64 run can be compared with torch exactly.

``block_row_norm(x, residual, weight, bias, kind, threads, vec, eps, acc_dtype)``
    LayerNorm (``kind="layer"``, two reductions: the mean, then the squared deviations
    from the register copy) or RMSNorm (``kind="rms"``, one reduction of squares) of every
    row of ``x`` ``(rows, H)``, after an optional fused residual add whose sum is also
    returned (the new residual stream). Chunk ``i`` of a row belongs to thread
    ``i % threads``: in each step consecutive threads read consecutive chunks (coalesced).
    Returns :class:`BlockNorm` with the per-thread and per-warp partial sums of the first
    row, for inspection.
``vector_width(hidden, elem_bytes)``
    Elements per vector load that keep every row start aligned:
    :math:`\gcd(16/\text{elem\_bytes}, H)` (row ``r`` starts at byte ``r H`` elem_bytes).
``row_start_offsets(hidden, elem_bytes, rows)``
    Each row's start modulo 16 bytes: all zero when a 16-byte load may be used.
``warp_span_bytes(lane_stride, elem_bytes)``
    Bytes spanned by one load instruction of a warp whose lanes read elements
    ``lane_stride`` apart: 128 for consecutive floats (one transaction), ``31 * C * 4 + 4``
    when each lane walks down its own row of a row-major ``[N, C]`` array.
``column_batch_norm(x, row_blocks, eps, acc_dtype)``
    BatchNorm's training-mode forward on ``[N, C]``: a column reduction. Each of
    ``row_blocks`` blocks of rows computes (count, mean, M2) for every column (one thread
    per column, lanes on consecutive columns), the blocks are merged by Chan et al.'s
    formula, then every element is normalized.
``group_norm_rows(x, groups, weight, bias, eps, **kernel)``
    GroupNorm of a contiguous ``(N, C, H, W)`` array as a row norm: sample ``n``, group
    ``g`` is the contiguous span of ``(C/G) H W`` values starting at
    ``(n G + g) (C/G) H W``, so ``x.reshape(N G, -1)`` is a view and
    :func:`block_row_norm` normalizes it; the per-channel affine indexes channel
    ``g C/G + offset // (H W)``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from layernorm_tutorial import variance_algorithms as va

from .vector_kernels import WARP, warp_allreduce_xor

__all__ = ["MAX_THREADS", "BlockNorm", "block_row_norm", "vector_width",
           "row_start_offsets", "warp_span_bytes", "column_batch_norm", "group_norm_rows",
           "channel_of_offset"]

MAX_THREADS = 1024   # threads per block (CUDA C++ Programming Guide)
LOAD_BYTES = 16      # the widest global load of one thread: float4, 16 bytes


@dataclass(frozen=True)
class BlockNorm:
    """What :func:`block_row_norm` computed.

    ``y``: the normalized rows, ``x``'s shape and dtype. ``residual``: ``x + residual``
    in ``x``'s dtype (the new residual stream), or None. ``mean`` (LayerNorm only, else
    None) and ``rstd``: per row, in the accumulator dtype. ``thread_partials`` ``(threads,)``
    and ``warp_sums`` ``(threads / 32,)``: the first reduction of the first row.
    ``loads_per_thread``: vector loads per thread and pass (the most any thread makes).
    ``shuffles``: shuffle steps per reduction (two trees of 5). ``shared_floats``: shared
    memory slots per reduction (one per warp). ``barriers``: ``__syncthreads`` per
    reduction (after the warp sums, after the block sum, before the slots are reused)."""

    y: np.ndarray
    residual: np.ndarray | None
    mean: np.ndarray | None
    rstd: np.ndarray
    thread_partials: np.ndarray
    warp_sums: np.ndarray
    loads_per_thread: int
    shuffles: int
    shared_floats: int
    barriers: int


def _float_array(x, name: str) -> np.ndarray:
    arr = np.asarray(x)
    if not np.issubdtype(arr.dtype, np.floating):
        raise TypeError(f"{name} must hold floating-point numbers, got dtype {arr.dtype}")
    return arr


def _thread_partials(chunks: np.ndarray, threads: int, acc) -> np.ndarray:
    """Per-thread sums of ``chunks`` ``(n_chunks, vec)``: thread ``t`` owns chunks
    ``t, t + threads, ...`` and adds each chunk's lanes left to right, then the chunk total
    to its running sum, every addition in ``acc``."""
    n_chunks, vec = chunks.shape
    rounds = -(-n_chunks // threads)
    padded = np.zeros((rounds * threads, vec), dtype=acc)
    padded[:n_chunks] = chunks              # threads past the end add exact zeros
    padded = padded.reshape(rounds, threads, vec)
    partial = np.zeros(threads, dtype=acc)
    for step in padded:
        inner = step[:, 0]
        for lane in range(1, vec):
            inner = inner + step[:, lane]
        partial = partial + inner
    return partial


def _block_sum(partials: np.ndarray) -> tuple:
    """Warp trees, one value per warp in shared memory, warp 0's tree: ``(total,
    warp_sums)``. Lanes of warp 0 beyond the number of warps read 0."""
    warps = partials.size // WARP
    warp_sums = np.array([warp_allreduce_xor(w)[-1][0]
                          for w in partials.reshape(warps, WARP)], dtype=partials.dtype)
    lanes = np.zeros(WARP, dtype=partials.dtype)
    lanes[:warps] = warp_sums
    return warp_allreduce_xor(lanes)[-1][0], warp_sums


def block_row_norm(x, residual=None, weight=None, bias=None, *, kind: str = "layer",
                   threads: int = 128, vec: int = 4, eps: float = 1e-5,
                   acc_dtype=np.float32) -> BlockNorm:
    r"""Normalize each row of ``x`` ``(rows, H)`` as a one-block-per-row kernel would.

    ``s = x + residual`` (if given), computed in ``acc_dtype`` and stored back in ``x``'s
    dtype as the new residual. LayerNorm: :math:`\mu = \sum s / H`, then
    :math:`\sigma^2 = \sum (s - \mu)^2 / H` from the same registers, ``y = (s - mu) * rstd``;
    RMSNorm: :math:`r = 1/\sqrt{\sum s^2 / H + \epsilon}`, ``y = s * rstd``; then times
    ``weight`` ``(H,)`` and plus ``bias`` ``(H,)``. ``threads``: a multiple of 32, at most
    1024. ``vec`` must divide ``H`` (a kernel whose rows are not ``vec``-aligned takes the
    scalar path, ``vec=1``; see :func:`vector_width`).
    """
    x = _float_array(x, "x")
    if x.ndim != 2 or x.shape[1] == 0:
        raise ValueError(f"x must be (rows, H) with H > 0, got shape {x.shape}")
    if kind not in ("layer", "rms"):
        raise ValueError(f"kind must be 'layer' or 'rms', got {kind!r}")
    if threads < WARP or threads % WARP or threads > MAX_THREADS:
        raise ValueError(f"threads must be a multiple of {WARP} between {WARP} and "
                         f"{MAX_THREADS}, got {threads}")
    hidden = x.shape[1]
    if vec < 1 or hidden % vec:
        raise ValueError(f"vec must divide H = {hidden} (rows not {vec}-aligned: use "
                         f"vector_width(H, elem_bytes)), got vec={vec}")
    acc = np.dtype(acc_dtype).type
    s = x.astype(acc)
    if residual is not None:
        residual = _float_array(residual, "residual")
        if residual.shape != x.shape:
            raise ValueError(f"residual must have x's shape {x.shape}, got {residual.shape}")
        s = s + residual.astype(acc)
    rows = x.shape[0]
    mean = np.zeros(rows, dtype=acc) if kind == "layer" else None
    rstd = np.zeros(rows, dtype=acc)
    y = np.empty_like(s)
    first = None
    for r in range(rows):
        row = s[r]
        if kind == "layer":
            partials = _thread_partials(row.reshape(-1, vec), threads, acc)
            total, warp_sums = _block_sum(partials)
            mean[r] = acc(total / acc(hidden))
            centred = row - mean[r]
            squares = centred * centred
        else:
            centred = row
            squares = row * row
        sq_partials = _thread_partials(squares.reshape(-1, vec), threads, acc)
        sq_total, sq_warps = _block_sum(sq_partials)
        rstd[r] = acc(1) / np.sqrt(acc(sq_total / acc(hidden)) + acc(eps))
        y[r] = centred * rstd[r]
        if first is None:
            first = ((partials, warp_sums) if kind == "layer" else (sq_partials, sq_warps))
    if weight is not None:
        y = y * _float_array(weight, "weight").astype(acc)
    if bias is not None:
        y = y + _float_array(bias, "bias").astype(acc)
    return BlockNorm(
        y=y.astype(x.dtype), residual=None if residual is None else s.astype(x.dtype),
        mean=mean, rstd=rstd, thread_partials=first[0], warp_sums=first[1],
        loads_per_thread=-(-hidden // vec // threads), shuffles=2 * int(math.log2(WARP)),
        shared_floats=threads // WARP, barriers=3)


def vector_width(hidden: int, elem_bytes: int) -> int:
    """Elements per load such that every row of ``hidden`` elements of ``elem_bytes``
    starts on a multiple of the load's size: ``gcd(16 // elem_bytes, hidden)``."""
    if elem_bytes not in (1, 2, 4, 8, 16):
        raise ValueError(f"elem_bytes must be 1, 2, 4, 8 or 16, got {elem_bytes}")
    if hidden < 1:
        raise ValueError(f"hidden must be >= 1, got {hidden}")
    return math.gcd(LOAD_BYTES // elem_bytes, hidden)


def row_start_offsets(hidden: int, elem_bytes: int, rows: int = 4) -> list[int]:
    """Byte offset of each row's start modulo 16, for the first ``rows`` rows of a
    contiguous ``(rows, hidden)`` array whose base is 16-byte aligned (cudaMalloc's base
    is aligned to at least 256 bytes)."""
    return [(r * hidden * elem_bytes) % LOAD_BYTES for r in range(rows)]


def warp_span_bytes(lane_stride: int, elem_bytes: int = 4) -> int:
    """Bytes between the first and past the last element that the 32 lanes of a warp
    read in one load, lane ``i`` reading element ``i * lane_stride``."""
    if lane_stride < 1:
        raise ValueError(f"lane_stride must be >= 1, got {lane_stride}")
    return (WARP - 1) * lane_stride * elem_bytes + elem_bytes


def column_batch_norm(x, row_blocks: int = 4, eps: float = 1e-5,
                      acc_dtype=np.float64) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """BatchNorm forward (training mode, no affine) of ``x`` ``(N, C)``, reduced down the
    columns: ``row_blocks`` blocks of rows each compute every column's (count, mean, M2)
    by two passes, the partial states are merged pairwise by Chan et al.'s formula
    (:func:`variance_algorithms.welford_merge`), then ``y = (x - mean) / sqrt(var +
    eps)`` with the biased variance. Returns ``(y, mean, var)``."""
    x = _float_array(x, "x")
    if x.ndim != 2 or 0 in x.shape:
        raise ValueError(f"x must be (N, C) with N, C > 0, got shape {x.shape}")
    if not 1 <= row_blocks <= x.shape[0]:
        raise ValueError(f"row_blocks must be between 1 and N = {x.shape[0]}, got "
                         f"{row_blocks}")
    acc = np.dtype(acc_dtype).type
    states = []
    for part in np.array_split(x.astype(acc), row_blocks):
        mean = part.mean(axis=0)
        states.append(va.WelfordState(part.shape[0], mean, ((part - mean) ** 2).sum(0)))
    while len(states) > 1:                  # a reduction tree over the row blocks
        states = [va.welford_merge(*states[i:i + 2]) if i + 1 < len(states) else states[i]
                  for i in range(0, len(states), 2)]
    total = states[0]
    var = total.m2 / acc(total.count)
    y = (x.astype(acc) - total.mean) / np.sqrt(var + acc(eps))
    return y.astype(x.dtype), total.mean, var


def channel_of_offset(offset: int, group: int, channels: int, groups: int,
                      spatial: int) -> int:
    """The channel of the element at ``offset`` within group ``group``'s contiguous row
    (``channels / groups`` channels of ``spatial = H W`` values each)."""
    per_group = channels // groups
    if not 0 <= offset < per_group * spatial:
        raise ValueError(f"offset must be in [0, {per_group * spatial}), got {offset}")
    return group * per_group + offset // spatial


def group_norm_rows(x, groups: int, weight=None, bias=None, eps: float = 1e-5,
                    **kernel) -> tuple[np.ndarray, bool]:
    """GroupNorm of a C-contiguous ``x`` ``(N, C, H, W)`` through :func:`block_row_norm`
    on the view ``x.reshape(N * groups, -1)``; ``weight``, ``bias`` ``(C,)`` applied per
    channel afterwards. ``kernel``: more arguments of :func:`block_row_norm` (``threads``,
    ``vec``, ``acc_dtype``). Returns ``(y, rows_are_a_view)``."""
    x = _float_array(x, "x")
    if x.ndim != 4:
        raise ValueError(f"x must be (N, C, H, W), got shape {x.shape}")
    n, c, h, w = x.shape
    if groups < 1 or c % groups:
        raise ValueError(f"groups must divide C = {c}, got {groups}")
    if not x.flags.c_contiguous:
        raise ValueError("x must be C-contiguous (NCHW): a group is then one contiguous span")
    rows = x.reshape(n * groups, -1)
    out = block_row_norm(rows, kind="layer", eps=eps, **kernel).y.reshape(n, c, h * w)
    if weight is not None:
        out = out * _float_array(weight, "weight")[:, None]
    if bias is not None:
        out = out + _float_array(bias, "bias")[:, None]
    return out.reshape(x.shape).astype(x.dtype), bool(np.shares_memory(rows, x))
