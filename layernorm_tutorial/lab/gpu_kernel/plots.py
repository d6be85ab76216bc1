"""Figures for the chapter "A fused LayerNorm kernel": the roofline and measured bandwidth.

Each helper takes numbers already measured (by ``layernorm_tutorial.bench``) and returns a
``matplotlib.figure.Figure``.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from layernorm_tutorial.lab.common.figure import new_figure

__all__ = ["plot_roofline", "plot_bandwidth"]


def plot_roofline(copy_gbps: float, peak_gflops: float,
                  points: Sequence[tuple[str, float, float]], *, hardware: str = ""):
    """Log-log roofline: attainable GFLOP/s = min(peak, intensity * bandwidth).

    ``copy_gbps``: measured copy bandwidth (GB/s), the slanted roof. ``peak_gflops``:
    measured compute roof (GFLOP/s). ``points``: ``(label, flops_per_byte, achieved_gflops)``
    for each kernel to place under the roofs. The dotted vertical line is the ridge point,
    ``peak / bandwidth`` flop/byte: kernels left of it are memory-bound.
    """
    if copy_gbps <= 0 or peak_gflops <= 0:
        raise ValueError("copy_gbps and peak_gflops must be positive")
    fig, ax = new_figure(1, 1, height=3.8)
    ridge = peak_gflops / copy_gbps
    lo = min([p[1] for p in points] + [ridge]) / 8
    hi = max([p[1] for p in points] + [ridge]) * 8
    intensity = np.geomspace(lo, hi, 200)
    ax.loglog(intensity, np.minimum(peak_gflops, intensity * copy_gbps), color="black",
              label=f"roof: {copy_gbps:.3g} GB/s copy, {peak_gflops:.3g} GFLOP/s matmul")
    ax.axvline(ridge, color="gray", linestyle=":", label=f"ridge point {ridge:.1f} flop/byte")
    markers = "osD^vP*X"
    for i, (label, ai, achieved) in enumerate(points):
        ax.loglog([ai], [achieved], marker=markers[i % len(markers)], linestyle="none",
                  markersize=7, label=f"{label} ({ai:.2f} flop/byte)")
    ax.set_xlabel("arithmetic intensity (flop/byte)")
    ax.set_ylabel("attainable performance (GFLOP/s)")
    ax.set_title("Roofline" + (f" on {hardware}" if hardware else ""), fontsize=9)
    ax.legend(fontsize=7, loc="lower right")
    ax.grid(True, which="both", alpha=0.3)
    return fig


def plot_bandwidth(rows: Sequence[dict], copy_gbps: float, *, shape: str | None = None):
    """Bars of effective bandwidth (GB/s) per implementation, forward and backward panels.

    ``rows``: benchmark rows (dicts with implementation, shape, direction, gbps); only the
    rows of ``shape`` are drawn (default: the first row's shape), the copy's own row left
    out: a dashed line marks the copy bandwidth measured in the same run.
    """
    if not rows:
        raise ValueError("rows: expected at least one benchmark row")
    shape = shape or rows[0]["shape"]
    fig, axes = new_figure(1, 2, height=3.0)
    for ax, direction, title in zip(axes, ("fwd", "bwd"), ("forward", "backward"), strict=True):
        picked = [r for r in rows if r["shape"] == shape and r["direction"] == direction
                  and r["implementation"] != "copy"]
        names = [r["implementation"] for r in picked]
        values = [r["gbps"] for r in picked]
        ax.barh(names, values, color="tab:blue")
        ax.axvline(copy_gbps, color="tab:red", linestyle="--", label="copy bandwidth")
        ax.set_xlabel("effective bandwidth (GB/s)")
        ax.set_title(f"{title}, {shape}", fontsize=9)
        ax.invert_yaxis()
    axes[0].set_ylabel("implementation")
    axes[0].legend(fontsize=7, loc="lower right")
    return fig
