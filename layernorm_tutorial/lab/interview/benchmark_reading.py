"""Reading a normalization benchmark: the stored H100 run, kernels alone and whole calls.

The GPU-kernel chapter stores one H100 run of ``layernorm_tutorial.bench``
(``book/data/gpu_bench_h100.json``, LayerNorm, M = 4096 rows): every implementation timed
twice, as an eager call from Python (``median_ms``, launch overhead included) and as the
GPU time of its kernels alone (``kernel_ms``, from the profiler). This module reads it for
the interview's benchmarking question; the chapter gives the run's caveats (two timing
methods; eager times of unchanged code moved by up to 4x between two runs; torch's
kernels were called through ``.out`` overloads and are not read here).

``kernel_shares(run, dtype, direction)``
    Per implementation, per row length N: the kernels-alone bandwidth over the device's
    copy bandwidth measured in the same run.
``call_over_kernel(run, implementation, dtype, direction)``
    Per N: the eager call's time over its kernels' time (1 = no overhead).
``format_shares(shares, implementations)``
    The shares as a table of at most 80 characters per line.
"""

from __future__ import annotations

from collections.abc import Sequence

from layernorm_tutorial import bench

__all__ = ["STORED_RUN", "NAMES", "load_run", "kernel_shares", "call_over_kernel",
           "format_shares"]

STORED_RUN = "gpu_bench_h100.json"
NAMES = {"composite": "eager ops", "compiled": "torch.compile", "liger": "Liger",
         "triton": "ours (Triton)"}


def load_run() -> dict:
    """The stored H100 run (checked by :func:`bench.load_stored`)."""
    return bench.load_stored(STORED_RUN)


def _n(row: dict) -> int:
    return int(row["shape"].split("x")[1])


def _rows(run: dict, dtype: str, direction: str) -> list[dict]:
    rows = [r for r in run["rows"] if r["dtype"] == dtype and r["direction"] == direction]
    if not rows:
        raise ValueError(f"no stored rows for dtype={dtype!r}, direction={direction!r}")
    return rows


def kernel_shares(run: dict, dtype: str = "bfloat16",
                  direction: str = "fwd") -> dict[str, dict[int, float]]:
    """``{implementation: {N: kernel_gbps / device_copy_gbps}}`` for the rows of
    ``dtype`` and ``direction`` that have a kernels-alone time."""
    copy = run["device_copy_gbps"]
    out: dict[str, dict[int, float]] = {}
    for r in _rows(run, dtype, direction):
        if r.get("kernel_gbps"):
            out.setdefault(r["implementation"], {})[_n(r)] = r["kernel_gbps"] / copy
    return out


def call_over_kernel(run: dict, implementation: str, dtype: str = "bfloat16",
                     direction: str = "fwd") -> dict[int, float]:
    """``{N: median_ms / kernel_ms}``: how much longer the eager call took than its
    kernels (two timing methods: the ratio is not broken down by cause)."""
    found = {_n(r): r["median_ms"] / r["kernel_ms"] for r in _rows(run, dtype, direction)
             if r["implementation"] == implementation and r.get("kernel_ms")}
    if not found:
        raise ValueError(f"no kernels-alone time for implementation {implementation!r}")
    return found


def format_shares(shares: dict[str, dict[int, float]],
                  implementations: Sequence[str] = tuple(NAMES)) -> str:
    """One line per N, one column per implementation: share of the copy bandwidth."""
    ns = sorted({n for impl in implementations for n in shares.get(impl, {})})
    lines = [f"{'N':>6}" + "".join(f"{NAMES.get(i, i):>15}" for i in implementations)]
    for n in ns:
        cells = [shares.get(i, {}).get(n) for i in implementations]
        lines.append(f"{n:>6}" + "".join(f"{'-' if c is None else format(c, '.0%'):>15}"
                                          for c in cells))
    return "\n".join(lines)
