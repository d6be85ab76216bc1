"""Memory traffic and arithmetic of a normalization layer: why LayerNorm is bandwidth-bound.

:func:`norm_traffic` counts the bytes a forward LayerNorm or RMSNorm moves to and from DRAM
and the flops it performs, for an eager implementation (one kernel per elementary op) and a
fused one. Their ratio, the arithmetic intensity, sits far below a GPU's ridge point.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["Traffic", "norm_traffic"]


@dataclass(frozen=True)
class Traffic:
    """Estimated DRAM traffic and arithmetic of one normalization call."""

    bytes_moved: int
    flops: int
    kernels: int

    @property
    def intensity(self) -> float:
        """Arithmetic intensity in flop per byte."""
        return self.flops / self.bytes_moved


# Eager kernels as (name, full-size tensors read, full-size tensors written, row vectors
# read/written, parameter vectors read). One "full-size" tensor is rows*cols elements.
_EAGER_KERNELS = {
    "layer": [("mean = x.mean(-1)", 1, 0, 1, 0), ("xc = x - mean", 1, 1, 1, 0),
              ("sq = xc * xc", 1, 1, 0, 0), ("var = sq.mean(-1)", 1, 0, 1, 0),
              ("rstd = rsqrt(var + eps)", 0, 0, 2, 0), ("xhat = xc * rstd", 1, 1, 1, 0),
              ("t = xhat * gamma", 1, 1, 0, 1), ("y = t + beta", 1, 1, 0, 1)],
    "rms": [("sq = x * x", 1, 1, 0, 0), ("ms = sq.mean(-1)", 1, 0, 1, 0),
            ("rstd = rsqrt(ms + eps)", 0, 0, 2, 0), ("xhat = x * rstd", 1, 1, 1, 0),
            ("y = xhat * gamma", 1, 1, 0, 1)],
}
# flops per element: LN = sum, subtract, square, sum, scale, gain, bias; RMS = square, sum,
# scale, gain.
_FLOPS_PER_ELEMENT = {"layer": 7, "rms": 4}


def norm_traffic(rows: int, cols: int, *, kind: str = "layer", fused: bool = True,
                 dtype_bytes: int = 2, stat_bytes: int = 4) -> Traffic:
    """Bytes moved to and from DRAM and flops of a forward LayerNorm (``kind="layer"``) or
    RMSNorm (``kind="rms"``) over an ``(rows, cols)`` activation.

    Fused: one kernel reads x and the parameters once, writes y, and saves the per-row
    statistics for the backward pass (mean and rstd for LN, rstd for RMS) in fp32.
    Eager: one kernel per elementary op, each reading its inputs from DRAM and writing its
    output back (``_EAGER_KERNELS``). Activations use ``dtype_bytes`` per element.
    """
    if kind not in _EAGER_KERNELS:
        raise ValueError(f"kind must be 'layer' or 'rms', got {kind!r}")
    if rows < 1 or cols < 1:
        raise ValueError(f"rows and cols must be positive, got {rows} and {cols}")
    full = rows * cols * dtype_bytes
    flops = _FLOPS_PER_ELEMENT[kind] * rows * cols
    n_params = 2 if kind == "layer" else 1
    if fused:
        saved_stats = (2 if kind == "layer" else 1) * rows * stat_bytes
        return Traffic(2 * full + n_params * cols * dtype_bytes + saved_stats, flops, 1)
    total = 0
    for _, reads, writes, row_vectors, params in _EAGER_KERNELS[kind]:
        total += (reads + writes) * full + row_vectors * rows * stat_bytes
        total += params * cols * dtype_bytes
    return Traffic(total, flops, len(_EAGER_KERNELS[kind]))
