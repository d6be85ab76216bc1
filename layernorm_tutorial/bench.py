"""Benchmark LayerNorm implementations: median time, effective bandwidth, ratios.

Run ``python -m layernorm_tutorial.bench`` (add ``--quick`` for the small notebook run,
``--csv PATH`` to choose the CSV file, ``--force`` to replace it). The table has one row per
implementation, shape, dtype and direction:

- ``median_ms``: median of ``reps`` timed calls. On CPU the implementations are interleaved
  (repetition r times every implementation once, before repetition r + 1), so a change of
  machine load hits them all alike. On CUDA each is timed by ``triton.testing.do_bench``
  (which flushes the L2 cache between calls), median mode.
- ``gbps``: effective bandwidth, the bytes an ideal kernel must move divided by the time.
  Forward: ``M*N*(s_x + s_y) + N*(s_w + s_b) + 8*M`` (read x, write y, read gamma/beta,
  write float32 mean and rstd). Backward: ``M*N*(s_x + s_dy + s_dx) + 3*N*s_w + 8*M``
  (read x and dy, write dx, read gamma, write dgamma/dbeta, read mean and rstd).
  ``s`` is the element size in bytes. Implementations that move more bytes than this (the
  composite reads and writes intermediates) simply get a lower effective bandwidth.
- ``ratio_to_native``: torch native's median time divided by this row's (above 1: faster
  than torch native).
- ``kernel_ms``, ``kernel_gbps`` (CUDA only): the GPU time of the call's kernels alone, summed
  from ``torch.profiler`` over 20 calls, each after the same 256 MiB L2 flush that do_bench
  uses (the flush's own kernels, profiled alone, are subtracted): the time without Python's
  launch overhead, which dominates small shapes in ``median_ms``; empty if profiling fails.
- ``frac_copy``: ``gbps`` divided by the bandwidth of a plain copy (``dst.copy_(src)``,
  2 bytes moved per byte copied) of the same array, measured in the same run.

Implementations: ``numpy_ref`` (CPU only), ``composite`` (the package's
``functional.layer_norm`` from elementary ops; backward by autograd), ``compiled``
(``torch.compile`` of that composite), ``torch_native`` (aten's native_layer_norm and its
backward, called with preallocated outputs) and, on CUDA, ``triton`` (this package's fused
kernels, preallocated outputs) and ``liger`` (Liger Kernel's ``LigerLayerNormFunction``,
when it is installed; left out with the reason in ``errors`` otherwise). numpy_ref,
composite, compiled and liger allocate their outputs on every call: their APIs take no
``out=``.

``--json PATH`` also stores the table with the device's name and its measured copy
bandwidth (``device_copy_gbps``: a 1 GiB ``copy_``, bytes read plus bytes written), which
the book renders.
"""

from __future__ import annotations

import argparse
import csv
import io
import json
import os
import platform
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import torch

from . import functional, numpy_ref
from ._cli import OutputPathError, check_output_path, positive_int, write_text_atomically

__all__ = ["BenchReport", "COLUMNS", "arithmetic_intensity", "bytes_moved", "format_table",
           "hardware_description", "main", "measure_copy_gbps", "measure_matmul_gflops",
           "report_json", "run_benchmark", "write_csv", "format_comparison", "load_stored",
           "target_check", "GPU_TARGETS"]

DEFAULT_CSV = os.path.join(tempfile.gettempdir(), "layernorm_tutorial", "bench_results.csv")
MIN_BYTES = 64 * 2**20  # the full run's inputs are at least this large (beyond the caches)
CPU_SHAPES = ((16384, 1024), (4096, 4096), (1024, 16384))  # 64 MiB in float32
CPU_QUICK_SHAPES = ((2048, 2048),)  # 16 MiB in float32: fits this machine's 105 MiB L3
GPU_M = 4096
GPU_NS = (1024, 2048, 4096, 8192, 16384)
GPU_DTYPES = (torch.float16, torch.bfloat16, torch.float32)
CPU_IMPLEMENTATIONS = ("numpy_ref", "composite", "compiled", "torch_native")
GPU_IMPLEMENTATIONS = ("composite", "compiled", "torch_native", "liger", "triton")
OPTIONAL_IMPLEMENTATIONS = ("compiled", "liger")  # a failure is reported in errors, not raised
DIRECTIONS = ("fwd", "bwd")
COLUMNS = ("implementation", "shape", "dtype", "direction", "median_ms", "gbps",
           "ratio_to_native", "frac_copy", "device", "kernel_ms", "kernel_gbps")
# Floating-point operations per element, counted from the formulas (adds, multiplies):
# forward  sum x, x - mean, square, sum, * rstd, * gamma, + beta                  -> 7
# backward x - mean, * rstd, gamma * dy, xhat * wdy and its sum, sum wdy,
#          xhat * c1 + c2, wdy - (...), * rstd, dy * xhat and its sum, sum dy        -> 13
FLOPS_PER_ELEMENT = {"fwd": 7, "bwd": 13}


def bytes_moved(m: int, n: int, dtype: torch.dtype, direction: str,
                param_dtype: torch.dtype | None = None) -> int:
    """Bytes an ideal LayerNorm kernel moves for an (m, n) input (see the module docstring)."""
    s = torch.empty((), dtype=dtype).element_size()
    sp = torch.empty((), dtype=param_dtype or dtype).element_size()
    if direction == "fwd":
        return m * n * (s + s) + n * 2 * sp + 8 * m
    if direction == "bwd":
        return m * n * (s + s + s) + 3 * n * sp + 8 * m
    raise ValueError(f"direction: expected 'fwd' or 'bwd', got {direction!r}")


def arithmetic_intensity(dtype: torch.dtype, direction: str) -> float:
    """Flops per byte of an ideal LayerNorm kernel, for large M and N."""
    s = torch.empty((), dtype=dtype).element_size()
    return FLOPS_PER_ELEMENT[direction] / ((2 if direction == "fwd" else 3) * s)


@dataclass
class BenchReport:
    """Rows of the table (dicts with ``COLUMNS``), the copy bandwidth, and where they ran."""

    rows: list[dict] = field(default_factory=list)
    copy_gbps: dict[str, float] = field(default_factory=dict)  # "shape dtype dir" -> GB/s
    hardware: str = ""
    device_copy_gbps: float | None = None  # a large copy on the device, measured once
    errors: dict[str, str] = field(default_factory=dict)  # implementation -> why it is missing

    def ratio(self, implementation: str, direction: str, shape: str | None = None,
              dtype: str | None = None) -> float:
        """Median over matching rows of ``ratio_to_native`` (speed relative to torch native)."""
        vals = [r["ratio_to_native"] for r in self.rows
                if r["implementation"] == implementation and r["direction"] == direction
                and (shape is None or r["shape"] == shape)
                and (dtype is None or r["dtype"] == dtype)]
        if not vals:
            raise KeyError(f"no rows for {implementation} {direction}")
        return statistics.median(vals)


def hardware_description(device: str = "cpu") -> str:
    """A one-line description of the machine the numbers come from."""
    if device == "cuda":
        return f"{torch.cuda.get_device_name()} (CUDA {torch.version.cuda})"
    model = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as f:
            model = next(line.split(":", 1)[1].strip() for line in f
                         if line.startswith("model name"))
    except (OSError, StopIteration):
        pass
    return f"{model}, {os.cpu_count()} CPU cores, torch {torch.__version__}, " \
           f"{torch.get_num_threads()} torch threads"


def _composite(x, normalized_shape, weight, bias):
    return functional.layer_norm(x, normalized_shape, weight, bias)


def _compiled_composite():
    """torch.compile of the composite (inductor; on CPU it needs a C++ compiler)."""
    return torch.compile(_composite, dynamic=False)


class _Case:
    """Inputs for one (shape, dtype, device) and the callables to time, per implementation."""

    def __init__(self, m: int, n: int, dtype: torch.dtype, device: str, seed: int = 0):
        g = torch.Generator(device="cpu").manual_seed(seed)
        self.m, self.n, self.dtype, self.device = m, n, dtype, device
        mk = lambda *shape: torch.randn(*shape, generator=g).to(dtype).to(device)  # noqa: E731
        self.x, self.dy = mk(m, n), mk(m, n)
        self.w, self.b = mk(n) * 0.5 + 1.0, mk(n)
        self.shape = (n,)
        self.copy_dst = torch.empty_like(self.x)

    def copy(self) -> Callable[[], object]:
        return lambda: self.copy_dst.copy_(self.x)

    def forward(self, impl: str, compiled=None) -> Callable[[], object]:
        x, w, b, shape = self.x, self.w, self.b, self.shape
        if impl == "numpy_ref":
            xn, wn, bn = (t.cpu().numpy() for t in (x, w, b))
            return lambda: numpy_ref.layer_norm_forward(xn, wn, bn)
        if impl in ("composite", "compiled"):
            fn = compiled if impl == "compiled" else _composite

            def run():
                with torch.no_grad():
                    return fn(x, shape, w, b)
            return run
        if impl == "torch_native":
            y, mean, rstd = torch.native_layer_norm(x, shape, w, b, 1e-5)  # buffers to reuse
            return lambda: torch.ops.aten.native_layer_norm.out(
                x, shape, w, b, 1e-5, out0=y, out1=mean, out2=rstd)
        if impl == "liger":
            from liger_kernel.ops.layer_norm import LigerLayerNormFunction

            def run_liger():
                with torch.no_grad():
                    return LigerLayerNormFunction.apply(x, w, b, 1e-5)
            return run_liger
        if impl == "triton":
            from .triton_kernels import layer_norm_forward
            y, mean, rstd = layer_norm_forward(x, w, b)
            return lambda: layer_norm_forward(x, w, b, out=y, mean=mean, rstd=rstd)
        raise ValueError(f"implementation: unknown {impl!r}")

    def backward(self, impl: str, compiled=None) -> Callable[[], object]:
        x, w, b, dy, shape = self.x, self.w, self.b, self.dy, self.shape
        if impl == "numpy_ref":
            xn, wn, bn, dyn = (t.cpu().numpy() for t in (x, w, b, dy))
            _, cache = numpy_ref.layer_norm_forward(xn, wn, bn)
            return lambda: numpy_ref.layer_norm_backward(dyn, cache)
        if impl in ("composite", "compiled"):
            fn = compiled if impl == "compiled" else _composite
            leaves = [t.detach().requires_grad_() for t in (x, w, b)]
            y = fn(leaves[0], shape, leaves[1], leaves[2])
            return lambda: torch.autograd.grad(y, leaves, dy, retain_graph=True)
        if impl == "torch_native":
            _, mean, rstd = torch.native_layer_norm(x, shape, w, b, 1e-5)
            outs = torch.ops.aten.native_layer_norm_backward(dy, x, shape, mean, rstd, w, b,
                                                             [True, True, True])
            return lambda: torch.ops.aten.native_layer_norm_backward.out(
                dy, x, shape, mean, rstd, w, b, [True, True, True],
                out0=outs[0], out1=outs[1], out2=outs[2])
        if impl == "liger":  # its backward function, called directly as ours is
            from liger_kernel.ops.layer_norm import layer_norm_backward as liger_backward
            from liger_kernel.ops.layer_norm import layer_norm_forward as liger_forward

            _, _, mean, rstd, _, _ = liger_forward(x, w, b, 1e-5)
            return lambda: liger_backward(dy, x, w, b, mean, rstd)
        if impl == "triton":
            from .triton_kernels import layer_norm_backward, layer_norm_forward
            _, mean, rstd = layer_norm_forward(x, w, b)
            dx = torch.empty_like(x)
            return lambda: layer_norm_backward(dy, x, w, mean, rstd, dx=dx)
        raise ValueError(f"implementation: unknown {impl!r}")


def _time_interleaved(fns: dict[str, Callable[[], object]], reps: int,
                      warmup: int = 2) -> dict[str, float]:
    """Median seconds per call of each function, repetitions interleaved across functions."""
    for fn in fns.values():
        for _ in range(warmup):
            fn()
    samples: dict[str, list[float]] = {k: [] for k in fns}
    names = list(fns)
    for r in range(reps):
        for k in names[r % len(names):] + names[: r % len(names)]:  # rotate the order
            t0 = time.perf_counter()
            fns[k]()
            samples[k].append(time.perf_counter() - t0)
    return {k: statistics.median(v) for k, v in samples.items()}


def _time_kernels(fns: dict[str, Callable[[], object]],
                  reps: int = 20) -> dict[str, float | None]:
    """Median-free kernel time per call (seconds): the summed duration of the GPU kernels of
    ``reps`` calls, each preceded by an L2 flush, minus the flushes alone, over ``reps``.
    None where the profiler fails."""
    from torch.autograd import DeviceType
    from torch.profiler import ProfilerActivity, profile

    flush = torch.empty(256 * 2**20, dtype=torch.int8, device="cuda")

    def device_us(fn) -> float:
        torch.cuda.synchronize()
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            for _ in range(reps):
                flush.zero_()
                if fn is not None:
                    fn()
            torch.cuda.synchronize()
        return sum(e.time_range.elapsed_us() for e in prof.events()
                   if e.device_type == DeviceType.CUDA)

    out: dict[str, float | None] = {}
    try:
        base = device_us(None)
    except Exception:  # no profiler (CUPTI) here: the column stays empty
        return dict.fromkeys(fns)
    for k, fn in fns.items():
        try:
            out[k] = max(device_us(fn) - base, 0.0) / reps * 1e-6 or None
        except Exception:
            out[k] = None
    return out


def _time_do_bench(fns: dict[str, Callable[[], object]], reps: int) -> dict[str, float]:
    """Median seconds per call on CUDA with triton.testing.do_bench (at least ``reps`` calls)."""
    from triton.testing import do_bench
    return {k: do_bench(fn, warmup=25, rep=max(100, reps), return_mode="median") * 1e-3
            for k, fn in fns.items()}


def run_benchmark(device: str = "cpu", shapes: Sequence[tuple[int, int]] | None = None,
                  dtypes: Sequence[torch.dtype] | None = None,
                  implementations: Sequence[str] | None = None, reps: int = 15,
                  quick: bool = False, threads: int | None = None,
                  progress: Callable[[str], None] | None = None) -> BenchReport:
    """Time every implementation on every shape, dtype and direction; return a BenchReport.

    Defaults: on CPU the shapes ``CPU_SHAPES`` (``CPU_QUICK_SHAPES`` when ``quick``) in
    float32; on CUDA ``M = 4096``, ``N`` in ``GPU_NS`` and float16, bfloat16, float32.
    torch_native is always timed (it is the reference of the ratios). If ``torch.compile``
    fails, the compiled rows are left out and ``report.errors['compiled']`` says why.
    ``threads`` sets torch's intra-op threads for the run (restored afterwards); on a CPU
    shared with other jobs, 1 thread avoids multi-threaded kernels stalling at barriers.
    """
    if threads is None:
        return _run(device, shapes, dtypes, implementations, reps, quick, progress)
    if threads < 1:
        raise ValueError(f"threads: expected a positive number of threads, got {threads}")
    previous = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        return _run(device, shapes, dtypes, implementations, reps, quick, progress)
    finally:
        torch.set_num_threads(previous)


def _run(device, shapes, dtypes, implementations, reps, quick, progress) -> BenchReport:
    if reps < 1:
        raise ValueError(f"reps: expected a positive number of repetitions, got {reps}")
    if device == "cuda" and not torch.cuda.is_available():
        raise RuntimeError("device='cuda' requested but torch.cuda.is_available() is False")
    on_gpu = device == "cuda"
    if shapes is None:
        shapes = tuple((GPU_M, n) for n in GPU_NS) if on_gpu else (
            CPU_QUICK_SHAPES if quick else CPU_SHAPES)
    dtypes = tuple(dtypes or (GPU_DTYPES if on_gpu else (torch.float32,)))
    impls = list(implementations or (GPU_IMPLEMENTATIONS if on_gpu else CPU_IMPLEMENTATIONS))
    if "torch_native" not in impls:
        impls.append("torch_native")
    report = BenchReport(hardware=hardware_description(device))
    if on_gpu:
        report.device_copy_gbps = measure_copy_gbps(2**30, device="cuda")
    timer = _time_do_bench if on_gpu else _time_interleaved
    say = progress or (lambda _msg: None)
    compiled = None
    if "compiled" in impls:
        compiled = _compiled_composite()
    for m, n in shapes:
        for dtype in dtypes:
            if compiled is not None:
                # A fresh compile per case: dynamo's recompile limit (8 graphs per function)
                # would otherwise silently fall back to eager after a few shapes and dtypes.
                torch._dynamo.reset()
            case = _Case(m, n, dtype, device)
            shape_key = f"{m}x{n}"
            for direction in DIRECTIONS:
                fns = {"copy": case.copy()}
                for impl in impls:
                    if impl in OPTIONAL_IMPLEMENTATIONS and impl in report.errors:
                        continue
                    make = case.forward if direction == "fwd" else case.backward
                    try:
                        fns[impl] = make(impl, compiled)
                        fns[impl]()  # compiles on first use; errors surface here
                    except Exception as exc:  # reported in report.errors, not hidden
                        if impl not in OPTIONAL_IMPLEMENTATIONS:
                            raise
                        report.errors[impl] = f"{type(exc).__name__}: {exc}"[:500]
                        fns.pop(impl, None)
                say(f"timing {shape_key} {str(dtype)[6:]} {direction}")
                times = timer(fns, reps)
                kernel = _time_kernels(fns) if on_gpu else {}
                kernel.pop("copy", None)
                copy_gbps = 2 * case.x.numel() * case.x.element_size() / times.pop("copy") / 1e9
                report.copy_gbps[f"{shape_key} {str(dtype)[6:]} {direction}"] = copy_gbps
                nbytes = bytes_moved(m, n, dtype, direction)
                for impl, sec in times.items():
                    gbps = nbytes / sec / 1e9
                    report.rows.append(dict(
                        implementation=impl, shape=shape_key, dtype=str(dtype)[6:],
                        direction=direction, median_ms=sec * 1e3, gbps=gbps,
                        ratio_to_native=times["torch_native"] / sec,
                        frac_copy=gbps / copy_gbps, device=device,
                        kernel_ms=kernel[impl] * 1e3 if kernel.get(impl) else None,
                        kernel_gbps=nbytes / kernel[impl] / 1e9 if kernel.get(impl) else None))
    return report


def format_table(rows: Sequence[dict]) -> str:
    """The rows as an aligned text table (times in ms, bandwidth in GB/s)."""
    header = ("implementation", "shape", "dtype", "dir", "median ms", "GB/s", "x native",
              "of copy")
    lines = [header]
    for r in rows:
        lines.append((r["implementation"], r["shape"], r["dtype"], r["direction"],
                      f"{r['median_ms']:.2f}", f"{r['gbps']:.1f}",
                      f"{r['ratio_to_native']:.2f}", f"{100 * r['frac_copy']:.0f}%"))
    widths = [max(len(row[i]) for row in lines) for i in range(len(header))]
    return "\n".join("  ".join(cell.ljust(w) if i < 4 else cell.rjust(w)
                               for i, (cell, w) in enumerate(zip(row, widths, strict=True)))
                     for row in lines)


def format_comparison(rows: Sequence[dict], copy_gbps: float,
                      implementations: Sequence[str] = ("torch_native", "compiled", "liger",
                                                        "triton")) -> str:
    """One line per shape, dtype and direction: each implementation's GB/s and its share of
    ``copy_gbps`` (the device's measured copy bandwidth); ``-`` where it was not measured."""
    by = {(r["implementation"], r["shape"], r["dtype"], r["direction"]): r for r in rows}
    cases = list(dict.fromkeys((r["shape"], r["dtype"], r["direction"]) for r in rows))
    names = {"torch_native": "torch", "compiled": "torch.compile", "liger": "Liger",
             "triton": "ours"}
    lines = [f"GB/s, eager call / kernels alone (share of the {copy_gbps:.0f} GB/s copy "
             "bandwidth)",
             f"{'shape':<11}{'dtype':<9}{'dir':<4}" + "".join(
                 f"{names.get(i, i):>24}" for i in implementations)]
    for shape, dtype, direction in cases:
        cells = []
        for impl in implementations:
            r = by.get((impl, shape, dtype, direction))
            if r is None:
                cells.append("-")
                continue
            text = f"{r['gbps']:.0f} ({r['gbps'] / copy_gbps:.0%})"
            if r.get("kernel_gbps"):
                text += f" / {r['kernel_gbps']:.0f} ({r['kernel_gbps'] / copy_gbps:.0%})"
            cells.append(text)
        lines.append(f"{shape:<11}{dtype:<9}{direction:<4}" + "".join(f"{c:>24}" for c in cells))
    return "\n".join(lines)


GPU_TARGETS = {"fwd": 0.85, "bwd": 0.75}  # issue 28: share of the copy bandwidth on an H100


def load_stored(name: str) -> dict:
    """A benchmark table stored in the book's ``book/data/`` (``--json``): ``name`` is the
    file name, e.g. ``"gpu_bench_h100.json"``."""
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    with open(os.path.join(root, "book", "data", name)) as f:
        return json.load(f)


def target_check(rows: Sequence[dict], copy_gbps: float, *, column: str = "kernel_gbps",
                 ours: str = "triton", peer: str = "liger") -> list[dict]:
    """Per shape, dtype and direction: our share of ``copy_gbps`` and the peer's (from
    ``column``), the target share (``GPU_TARGETS``), whether ours meets it, and whether ours
    is ahead of the peer."""
    by = {(r["implementation"], r["shape"], r["dtype"], r["direction"]): r for r in rows}
    out = []
    for (impl, shape, dtype, direction), r in by.items():
        if impl != ours or r.get(column) is None:
            continue
        other = by.get((peer, shape, dtype, direction), {}).get(column)
        share = r[column] / copy_gbps
        out.append(dict(shape=shape, dtype=dtype, direction=direction, ours=share,
                        peer=None if other is None else other / copy_gbps,
                        target=GPU_TARGETS[direction], met=share >= GPU_TARGETS[direction],
                        ahead=other is not None and r[column] > other))
    return out


def write_csv(rows: Sequence[dict], path: str) -> str:
    """Write the rows (``COLUMNS``) to ``path`` (folders created, atomically); return it."""
    text = io.StringIO()
    writer = csv.DictWriter(text, fieldnames=COLUMNS)
    writer.writeheader()
    writer.writerows({k: r.get(k) for k in COLUMNS} for r in rows)
    write_text_atomically(path, text.getvalue())
    return path


def report_json(report: BenchReport, command: str) -> str:
    """The report as JSON text: ``hardware``, ``device_copy_gbps``, ``copy_gbps`` per case,
    ``errors``, ``command`` and ``rows`` (``COLUMNS``)."""
    return json.dumps(dict(command=command, hardware=report.hardware,
                           device_copy_gbps=report.device_copy_gbps,
                           copy_gbps=report.copy_gbps, errors=report.errors,
                           rows=[{k: r.get(k) for k in COLUMNS} for r in report.rows]),
                      indent=1) + "\n"


def measure_copy_gbps(nbytes: int = MIN_BYTES, reps: int = 15, device: str = "cpu") -> float:
    """Bandwidth (GB/s) of ``dst.copy_(src)`` for float32 arrays of ``nbytes``: read + write
    (on CUDA timed by ``do_bench``, median)."""
    src = torch.ones(max(nbytes // 4, 1), device=device)
    dst = torch.empty_like(src)
    timer = _time_do_bench if device == "cuda" else _time_interleaved
    times = timer({"copy": lambda: dst.copy_(src)}, reps)
    return 2 * src.numel() * 4 / times["copy"] / 1e9


def measure_matmul_gflops(n: int = 1024, reps: int = 5, device: str = "cpu") -> float:
    """Achieved float32 GFLOP/s of an n x n matmul: a measured compute roof for the roofline."""
    g = torch.Generator().manual_seed(0)
    a, b = (torch.randn(n, n, generator=g).to(device) for _ in range(2))
    out = torch.empty(n, n, device=device)
    times = _time_interleaved({"mm": lambda: torch.mm(a, b, out=out)}, reps, warmup=1)
    return 2 * n**3 / times["mm"] / 1e9


def _summary(report: BenchReport) -> str:
    lines = []
    for impl in ("compiled", "composite", "liger", "triton", "numpy_ref"):
        for direction in DIRECTIONS:
            try:
                lines.append(f"{impl} vs torch_native {direction}: "
                             f"{report.ratio(impl, direction):.2f}x (median over shapes)")
            except KeyError:
                pass
    for impl, why in report.errors.items():
        lines.append(f"{impl}: not measured ({why})")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m layernorm_tutorial.bench",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", choices=("cpu", "cuda"),
                        default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--quick", action="store_true",
                        help="one 2048x2048 float32 shape (16 MiB, cache-resident on big L3s)")
    parser.add_argument("--reps", type=int, default=15, help="timed repetitions (>= 15)")
    parser.add_argument("--threads", type=positive_int, default=None,
                        help="torch intra-op threads, >= 1 (default: torch's choice)")
    parser.add_argument("--csv", default=None, help=f"CSV path (default {DEFAULT_CSV})")
    parser.add_argument("--json", default=None,
                        help="also store the table, device name and copy bandwidth as JSON")
    parser.add_argument("--force", action="store_true",
                        help="replace an existing --csv or --json file")
    args = parser.parse_args(argv)
    if args.reps < 15:
        parser.error("--reps: use at least 15 repetitions for a stable median")
    if args.device == "cuda" and not torch.cuda.is_available():
        parser.error("--device cuda: torch.cuda.is_available() is False on this machine")
    try:  # the default scratch file may be replaced; a path given explicitly needs --force
        csv_path = check_output_path(args.csv or DEFAULT_CSV, option="--csv",
                                     force=args.force or args.csv is None)
        json_path = (check_output_path(args.json, option="--json", force=args.force)
                     if args.json else None)
    except OutputPathError as err:
        parser.error(str(err))
    report = run_benchmark(device=args.device, reps=args.reps, quick=args.quick,
                           threads=args.threads,
                           progress=lambda msg: print(msg, file=sys.stderr, flush=True))
    print(f"hardware: {report.hardware}")
    if report.device_copy_gbps:
        print(f"device copy bandwidth (1 GiB copy_, read + write): "
              f"{report.device_copy_gbps:.0f} GB/s")
    print("copy bandwidth (GB/s): " + ", ".join(f"{k}: {v:.1f}"
                                                for k, v in report.copy_gbps.items()))
    print(format_table(report.rows))
    if report.device_copy_gbps:
        print(format_comparison(report.rows, report.device_copy_gbps))
    print(_summary(report))
    print(f"CSV written to {os.path.abspath(write_csv(report.rows, str(csv_path)))}")
    if json_path is not None:
        command = "python -m layernorm_tutorial.bench " + " ".join(argv or sys.argv[1:])
        write_text_atomically(json_path, report_json(report, command))
        print(f"JSON written to {os.path.abspath(json_path)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

