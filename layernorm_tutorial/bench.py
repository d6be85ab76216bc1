"""Benchmark normalization kernels fairly: one timing method, checked outputs, a spread.

Run ``python -m layernorm_tutorial.bench`` (``--quick`` for the small notebook run,
``--device cuda`` on a GPU, ``--json PATH`` to store the result, ``--force`` to replace a
file). Four operations, each forward (``fwd``) and backward (``bwd``, every gradient):

- ``layer_norm``: ``y = LN(x)``; ``rms_norm``: ``y = RMSNorm(x)``;
- ``add_layer_norm`` / ``add_rms_norm``: ``s = x + r``, ``y = norm(s)``, both returned (the
  sum is the next block's residual): the fused residual add of a pre-norm Transformer.

Implementations: ``triton`` (this package's fused kernels: the chapter's LayerNorm kernels
for ``layer_norm``, the one-source pipelined kernels for the other ops),
``triton_pipelined`` (``layer_norm`` through the one-source kernels), ``liger`` (Liger Kernel's
``LigerLayerNormFunction``, ``LigerRMSNormFunction``, ``LigerFusedAddRMSNormFunction``;
it has no fused add + LayerNorm), ``torch`` (the functional ops ``F.layer_norm`` /
``F.rms_norm``, the add as ``x + r``: no ``.out`` overloads), ``compiled`` (``torch.compile``
of ``composite``), ``composite`` (the package's ``functional`` ops from elementary torch
operations) and, on the CPU, ``numpy_ref`` (LayerNorm only, not checked). Every
implementation is called the same way: the forward under ``no_grad``, the backward as
``torch.autograd.grad`` of all outputs with respect to all inputs (x, r, gamma, beta).

**One timing method per device, the copy baseline included.** On CUDA: the GPU time of the
call's kernels from ``torch.profiler``, each call preceded by an L2 flush (an in-place
``bitwise_not`` of 256 MiB, whose kernels are left out of the sum by name); ``graph_ms`` is
the same calls replayed from a CUDA graph and timed with CUDA events (launch gaps between an
implementation's kernels included, Python's launch overhead not). On the CPU: wall-clock per
call, implementations interleaved. ``reps`` calls make one run; ``runs`` (>= 3) runs give
the median (``ms``) and the spread ``(max - min) / median``. A gap smaller than the spread of
either side is a tie (:func:`compare`).

**Working sets.** On CUDA each (M, N) holds at least 256 MiB per tensor (:func:`shape_plan`,
N = 1K ... 64K), so that the 50 MB L2 of an H100 cannot serve them.

**Bytes.** ``gbps`` = ideal bytes (:func:`bytes_moved`) / time; ``frac_copy`` = ``gbps``
divided by the bandwidth of ``dst.copy_(src)`` of the same array, timed the same way.

**Correctness, next to the timings.** Before timing, every implementation's outputs and
gradients are compared on the same device with a float64 reference (:func:`check_outputs`);
the largest error relative to the reference's largest magnitude is stored per output, with
``ok`` against ``TOLERANCE``; a timing row carries ``check`` = "ok", "FAIL" or "-".
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
from torch._functorch import config as functorch_config

from . import functional, numpy_ref
from ._cli import (
    BOOK_DATA,
    OutputPathError,
    check_not_a_source,
    check_output_path,
    interruptible,
    positive_int,
    read_json_document,
    same_file,
    write_text_atomically,
)

__all__ = ["BenchReport", "COLUMNS", "CHECK_COLUMNS", "OPS", "TOLERANCE", "arithmetic_intensity",
           "bytes_moved", "bytes_per_element", "check_outputs", "compare", "format_checks",
           "format_table", "hardware_description", "main", "measure_copy_gbps",
           "measure_matmul_gflops", "report_json", "run_benchmark", "shape_plan", "summarize_runs",
           "write_csv", "format_comparison", "load_stored", "target_check", "GPU_TARGETS",
           "TARGETS"]

DEFAULT_CSV = os.path.join(tempfile.gettempdir(), "layernorm_tutorial", "bench_results.csv")
#: The book's stored benchmark tables, which ``--json`` may replace (with ``--force``).
BENCH_TABLES = tuple(BOOK_DATA / name for name in
                     ("gpu_bench_h100.json", "gpu_bench_h100_run1.json",
                      "gpu_bench_h100_before.json"))
MIN_BYTES = 64 * 2**20  # CPU: the full run's inputs are at least this large
GPU_MIN_TENSOR_BYTES = 256 * 2**20  # CUDA: every tensor at least this large (L2 is 50 MB)
CPU_SHAPES = ((16384, 1024), (4096, 4096), (1024, 16384))  # 64 MiB in float32
CPU_QUICK_SHAPES = ((2048, 2048),)  # 16 MiB per float32 array: cache-sized on many CPUs
GPU_NS = (1024, 2048, 4096, 8192, 16384, 32768, 65536)
GPU_DTYPES = (torch.float16, torch.bfloat16, torch.float32)
OPS = ("layer_norm", "rms_norm", "add_layer_norm", "add_rms_norm")
CPU_IMPLEMENTATIONS = ("numpy_ref", "composite", "compiled", "torch")
GPU_IMPLEMENTATIONS = ("triton", "triton_pipelined", "liger", "torch", "compiled")
# A failure to build or run these is reported in ``errors``; ``torch`` must always work.
OPTIONAL_IMPLEMENTATIONS = ("numpy_ref", "composite", "compiled", "liger", "triton",
                            "triton_pipelined")
DIRECTIONS = ("fwd", "bwd")
EPS = 1e-5
MIN_RUNS = 3
COLUMNS = ("op", "implementation", "shape", "dtype", "direction", "ms", "spread", "gbps",
           "frac_copy", "graph_ms", "check", "timing", "runs_ms", "device")
CHECK_COLUMNS = ("op", "implementation", "shape", "dtype", "output", "error", "tolerance",
                 "ok", "device")
# Largest error allowed, relative to the float64 reference's largest magnitude, per dtype:
# about eight units of the 16-bit dtypes' rounding (2^-11, 2^-8); for float32, 1e-4 is
# about 1700 units of 2^-24: room for GPU reductions over many rows (dgamma, dbeta) in
# another order, far below any indexing or masking bug.
TOLERANCE = {torch.float32: 1e-4, torch.float16: 4e-3, torch.bfloat16: 3e-2}
# Floating-point operations per element, counted from the formulas (adds, multiplies):
# forward  sum x, x - mean, square, sum, * rstd, * gamma, + beta                  -> 7
# backward x - mean, * rstd, gamma * dy, xhat * wdy and its sum, sum wdy,
#          xhat * c1 + c2, wdy - (...), * rstd, dy * xhat and its sum, sum dy        -> 13
FLOPS_PER_ELEMENT = {"fwd": 7, "bwd": 13}
# Ideal traffic per op and direction: (full-size arrays, parameter vectors, float32 row
# statistics). add_*: forward reads x, r and writes y, s; backward reads dy, ds (the
# gradient arriving at the sum) and s, and writes one dx (= dr, the same tensor).
_TRAFFIC = {
    "layer_norm": {"fwd": (2, 2, 2), "bwd": (3, 3, 2)},
    "rms_norm": {"fwd": (2, 1, 1), "bwd": (3, 2, 1)},
    "add_layer_norm": {"fwd": (4, 2, 2), "bwd": (4, 3, 2)},
    "add_rms_norm": {"fwd": (4, 1, 1), "bwd": (4, 2, 1)},
}
# Unfused: the add as its own kernel (read x, r, write s), then the norm (read s, write y);
# backward: the norm's (read dy, s, write g), then autograd's g + ds (read 2, write 1).
_UNFUSED_ARRAYS = {"fwd": 3 + 2, "bwd": 3 + 3}


def _size(dtype: torch.dtype) -> int:
    return torch.empty((), dtype=dtype).element_size()


def _check_op(op: str) -> None:
    if op not in _TRAFFIC:
        raise ValueError(f"op: expected one of {OPS}, got {op!r}")


def _check_direction(direction: str) -> None:
    if direction not in DIRECTIONS:
        raise ValueError(f"direction: expected 'fwd' or 'bwd', got {direction!r}")


def bytes_moved(m: int, n: int, dtype: torch.dtype, direction: str,
                param_dtype: torch.dtype | None = None, op: str = "layer_norm") -> int:
    """Bytes an ideal kernel of ``op`` moves for an (m, n) input: full-size arrays times
    ``m*n*s``, parameter vectors times ``n*s_param``, float32 row statistics times ``4*m``
    (``_TRAFFIC``). LayerNorm forward: ``2*m*n*s + 2*n*s_p + 8*m``; backward:
    ``3*m*n*s + 3*n*s_p + 8*m``."""
    _check_op(op)
    _check_direction(direction)
    arrays, params, stats = _TRAFFIC[op][direction]
    return m * n * arrays * _size(dtype) + n * params * _size(param_dtype or dtype) + 4 * stats * m


def bytes_per_element(op: str, dtype: torch.dtype, direction: str = "fwd",
                      fused: bool = True) -> int:
    """Bytes per element of the (m, n) input for large m and n: fused, one kernel; unfused
    (``add_*`` only), the add and the norm as separate kernels. bf16 add + RMSNorm forward:
    8 fused, 10 unfused."""
    _check_op(op)
    _check_direction(direction)
    if fused:
        return _TRAFFIC[op][direction][0] * _size(dtype)
    if not op.startswith("add_"):
        raise ValueError(f"op: only the add_* ops have an unfused form, got {op!r}")
    return _UNFUSED_ARRAYS[direction] * _size(dtype)


def arithmetic_intensity(dtype: torch.dtype, direction: str) -> float:
    """Flops per byte of an ideal LayerNorm kernel, for large M and N."""
    _check_direction(direction)
    return FLOPS_PER_ELEMENT[direction] / (_TRAFFIC["layer_norm"][direction][0] * _size(dtype))


def shape_plan(dtype: torch.dtype, ns: Sequence[int] = GPU_NS,
               min_bytes: int = GPU_MIN_TENSOR_BYTES) -> list[tuple[int, int]]:
    """(M, N) per N with M the fewest rows for which one M x N tensor holds ``min_bytes``:
    ``M = ceil(min_bytes / (N * s))``."""
    if min_bytes < 1:
        raise ValueError(f"min_bytes: expected a positive byte count, got {min_bytes}")
    out = []
    for n in ns:
        if n < 1:
            raise ValueError(f"ns: expected positive row lengths, got {n}")
        out.append((-(-min_bytes // (n * _size(dtype))), n))
    return out


# ---- implementations -----------------------------------------------------------------------


def _has_add(op: str) -> bool:
    return op.startswith("add_")


def _has_bias(op: str) -> bool:
    return op.endswith("layer_norm")


def _torch_fn(op: str, *, composite: bool = False) -> Callable:
    """``op`` from torch's functional ops (or the package's composite), ``fn(x, r, w, b)``."""
    F = torch.nn.functional
    ln = functional.layer_norm if composite else F.layer_norm
    rms = functional.rms_norm if composite else F.rms_norm

    def norm(s, w, b):
        if _has_bias(op):
            return ln(s, (s.shape[-1],), w, b, EPS)
        return rms(s, (s.shape[-1],), w, EPS)

    if _has_add(op):
        def add_norm(x, r, w, b):
            s = x + r
            return norm(s, w, b), s
        return add_norm
    return lambda x, r, w, b: norm(x, w, b)


def _triton_fn(op: str) -> Callable:
    from . import triton_kernels as TK

    if not hasattr(TK, op):
        raise NotImplementedError(f"triton_kernels has no {op} yet")
    kernel = getattr(TK, op)
    if op == "layer_norm":
        return lambda x, r, w, b: kernel(x, (x.shape[-1],), w, b, EPS)
    if op == "rms_norm":
        return lambda x, r, w, b: kernel(x, (x.shape[-1],), w, EPS)
    if op == "add_layer_norm":
        return lambda x, r, w, b: kernel(x, r, (x.shape[-1],), w, b, EPS)
    return lambda x, r, w, b: kernel(x, r, (x.shape[-1],), w, EPS)


def _pipelined_fn(op: str) -> Callable:
    """The one-source pipelined kernels for plain LayerNorm (``pipelined_layer_norm``); the
    other ops already run on them under ``triton``."""
    if op != "layer_norm":
        raise NotImplementedError("triton_pipelined: LayerNorm only (the other ops are "
                                  "the same kernels under 'triton')")
    from . import triton_kernels as TK
    return lambda x, r, w, b: TK.pipelined_layer_norm(x, (x.shape[-1],), w, b, EPS)


def _liger_fn(op: str) -> Callable:
    # in_place=False: Liger's default for RMSNorm overwrites dy with dx in the backward.
    if op == "layer_norm":
        from liger_kernel.ops.layer_norm import LigerLayerNormFunction
        return lambda x, r, w, b: LigerLayerNormFunction.apply(x, w, b, EPS)
    if op == "rms_norm":
        from liger_kernel.ops.rms_norm import LigerRMSNormFunction
        return lambda x, r, w, b: LigerRMSNormFunction.apply(x, w, EPS, 0.0, "llama", False)
    if op == "add_rms_norm":
        from liger_kernel.ops.fused_add_rms_norm import LigerFusedAddRMSNormFunction
        return lambda x, r, w, b: tuple(
            LigerFusedAddRMSNormFunction.apply(x, r, w, EPS, 0.0, "llama", False))
    raise NotImplementedError("Liger Kernel has no fused add + LayerNorm")


def implementation(impl: str, op: str) -> Callable:
    """The callable ``fn(x, r, w, b) -> output(s)`` of ``impl`` for ``op`` (``r`` unused
    and ``b`` unused where ``op`` has none). ``compiled`` is compiled on first call."""
    _check_op(op)
    if impl == "torch":
        return _torch_fn(op)
    if impl == "composite":
        return _torch_fn(op, composite=True)
    if impl == "compiled":
        return torch.compile(_torch_fn(op, composite=True), dynamic=False)
    if impl == "triton":
        return _triton_fn(op)
    if impl == "triton_pipelined":
        return _pipelined_fn(op)
    if impl == "liger":
        return _liger_fn(op)
    raise ValueError(f"implementation: unknown {impl!r}")


def _outputs(result) -> tuple:
    return tuple(result) if isinstance(result, (tuple, list)) else (result,)


class _Case:
    """Inputs for one (op, shape, dtype, device): x, r, gamma, beta, dy, ds (seeded)."""

    def __init__(self, op: str, m: int, n: int, dtype: torch.dtype, device: str,
                 seed: int = 0):
        _check_op(op)
        g = torch.Generator(device="cpu").manual_seed(seed)
        self.op, self.m, self.n, self.dtype, self.device = op, m, n, dtype, device

        def mk(*shape, loc=0.0, scale=1.0):
            t = torch.randn(*shape, generator=g) * scale + loc
            return t.to(dtype).to(device)
        self.x, self.r = mk(m, n, loc=1.0), mk(m, n)
        self.w, self.b = mk(n, loc=1.0, scale=0.5), mk(n)
        self.dy, self.ds = mk(m, n), mk(m, n)
        self.copy_dst = torch.empty_like(self.x)

    def inputs(self) -> list[torch.Tensor]:
        """The differentiable inputs of ``op``: x, [r,] w, [b]."""
        out = [self.x] + ([self.r] if _has_add(self.op) else []) + [self.w]
        return out + ([self.b] if _has_bias(self.op) else [])

    def grads(self) -> list[torch.Tensor]:
        """The gradients arriving at the outputs: dy, [ds]."""
        return [self.dy] + ([self.ds] if _has_add(self.op) else [])

    def call(self, fn: Callable, leaves: Sequence[torch.Tensor]):
        it = iter(leaves)
        x = next(it)
        r = next(it) if _has_add(self.op) else None
        w = next(it)
        b = next(it) if _has_bias(self.op) else None
        return _outputs(fn(x, r, w, b))

    def copy(self) -> Callable[[], object]:
        return lambda: self.copy_dst.copy_(self.x)

    def forward(self, fn: Callable) -> Callable[[], object]:
        leaves = self.inputs()

        def run():
            with torch.no_grad():
                return self.call(fn, leaves)
        return run

    def backward(self, fn: Callable) -> _Backward:
        return _Backward(self, fn)

    def numpy_calls(self) -> dict[str, Callable[[], object]]:
        if self.op != "layer_norm":
            raise NotImplementedError("numpy_ref: LayerNorm only")
        xn, wn, bn, dyn = (t.cpu().numpy() for t in (self.x, self.w, self.b, self.dy))
        _, cache = numpy_ref.layer_norm_forward(xn, wn, bn, EPS)
        return {"fwd": lambda: numpy_ref.layer_norm_forward(xn, wn, bn, EPS),
                "bwd": lambda: numpy_ref.layer_norm_backward(dyn, cache)}


class _Backward:
    """``autograd.grad`` of the outputs of one forward (built once, kept) per call.
    :meth:`rebuild` runs the forward again on the current CUDA stream: autograd runs each
    backward op on its forward's stream, so a CUDA graph that captures the backward on a
    side stream needs the forward recorded on that stream."""

    def __init__(self, case: _Case, fn: Callable):
        self.case, self.fn = case, fn
        self.rebuild()

    def rebuild(self) -> None:
        self.leaves = [t.detach().requires_grad_() for t in self.case.inputs()]
        self.outs = self.case.call(self.fn, self.leaves)

    def __call__(self):
        return torch.autograd.grad(self.outs, self.leaves, self.case.grads(),
                                   retain_graph=True)


# ---- correctness ---------------------------------------------------------------------------


def _output_names(op: str) -> list[str]:
    names = ["y"] + (["s"] if _has_add(op) else []) + ["dx"] + (["dr"] if _has_add(op) else [])
    return names + ["dgamma"] + (["dbeta"] if _has_bias(op) else [])


def check_outputs(fn: Callable, op: str, m: int, n: int, dtype: torch.dtype,
                  device: str = "cpu", seed: int = 1) -> dict[str, float]:
    """Largest error of ``fn``'s outputs and of every gradient against torch in float64 on
    the same (rounded) inputs, on ``device``, relative to the reference's largest magnitude:
    ``max|out - ref| / max|ref|``. Keys: y, [s,] dx, [dr,] dgamma, [dbeta]. A gradient
    that ``fn`` does not produce counts as zeros."""
    case = _Case(op, m, n, dtype, device, seed=seed)
    leaves = [t.detach().clone().requires_grad_() for t in case.inputs()]
    outs = case.call(fn, leaves)
    grads = torch.autograd.grad(outs, leaves, case.grads(), allow_unused=True)
    grads = [torch.zeros_like(t) if g is None else g for g, t in zip(grads, leaves, strict=True)]
    ref_leaves = [t.detach().double().requires_grad_() for t in case.inputs()]
    ref_outs = case.call(_torch_fn(op), ref_leaves)
    ref_grads = torch.autograd.grad(ref_outs, ref_leaves, [g.double() for g in case.grads()])
    errors = {}
    for name, got, ref in zip(_output_names(op), (*outs, *grads), (*ref_outs, *ref_grads),
                              strict=True):
        if got.dtype != dtype or got.shape != ref.shape:
            raise TypeError(f"{name}: expected {dtype} of shape {tuple(ref.shape)}, got "
                            f"{got.dtype} of shape {tuple(got.shape)}")
        scale = ref.abs().max().item() or 1.0
        errors[name] = (got.double() - ref).abs().max().item() / scale
    return errors


def _check_rows(m: int, n: int, max_elements: int = 2**22) -> int:
    """Rows of the correctness check for an (m, n) case: all m rows when the case has at
    most ``max_elements`` elements (4M: 32 MiB per float64 tensor), else as many rows as
    fit (at least one)."""
    return m if m * n <= max_elements else max(1, max_elements // n)


# ---- timing --------------------------------------------------------------------------------


def summarize_runs(seconds: Sequence[float]) -> tuple[float, float]:
    """(median, spread) of per-run times; spread = (max - min) / median."""
    if not seconds:
        raise ValueError("seconds: expected at least one run")
    med = statistics.median(seconds)
    return med, ((max(seconds) - min(seconds)) / med if med > 0 else 0.0)


def compare(a_seconds: Sequence[float], b_seconds: Sequence[float],
            floor: float = 0.0) -> dict:
    """Is ``a`` faster than ``b``? ``gap`` = median(b) / median(a) - 1 (above 0: a faster);
    a tie when the slower median exceeds the faster by at most the larger run-to-run spread
    of the two (or ``floor``): ``max(a, b) / min(a, b) - 1 <= band``, the same whichever
    side is named first. Returns ``dict(word, gap, band)``, word "faster", "slower", "tie"."""
    a, spread_a = summarize_runs(a_seconds)
    b, spread_b = summarize_runs(b_seconds)
    band = max(spread_a, spread_b, floor)
    gap = b / a - 1.0
    word = "tie" if _relative_gap(a, b) <= band else ("faster" if gap > 0 else "slower")
    return dict(word=word, gap=gap, band=band)


def _relative_gap(a: float, b: float) -> float:
    """How much longer the slower of two positive times is: ``max / min - 1``
    (symmetric in ``a`` and ``b``)."""
    return max(a, b) / min(a, b) - 1.0


def _time_wall(fns: dict[str, Callable[[], object]], reps: int, runs: int,
               warmup: int = 1) -> dict[str, list[float]]:
    """Per run, the median wall-clock seconds of ``reps`` calls; calls interleaved across
    the functions (the order rotates), so a change of machine load hits them all alike.
    Each function is called exactly ``warmup + runs * reps`` times."""
    for fn in fns.values():
        for _ in range(warmup):
            fn()
    names = list(fns)
    out: dict[str, list[float]] = {k: [] for k in fns}
    for _run in range(runs):
        samples: dict[str, list[float]] = {k: [] for k in fns}
        for r in range(reps):
            for k in names[r % len(names):] + names[: r % len(names)]:
                t0 = time.perf_counter()
                fns[k]()
                samples[k].append(time.perf_counter() - t0)
        for k, v in samples.items():
            out[k].append(statistics.median(v))
    return out


_FLUSH_KERNEL = "bitwise_not"  # the L2 flush's kernel, left out of the kernel sums


def _time_kernels(fns: dict[str, Callable[[], object]], reps: int,
                  runs: int) -> dict[str, list[float] | str]:
    """CUDA: per run, the summed GPU time of ``reps`` calls' kernels / ``reps`` (seconds),
    each call after an L2 flush whose kernels are excluded by name. Runs interleaved across
    the functions. A function whose profile fails maps to the reason (a string)."""
    from torch.profiler import ProfilerActivity, profile

    flush = torch.empty(GPU_MIN_TENSOR_BYTES, dtype=torch.uint8, device="cuda")
    names = list(fns)
    out: dict[str, list[float] | str] = {k: [] for k in fns}
    for fn in fns.values():
        fn()
    for run in range(runs):
        for k in names[run % len(names):] + names[: run % len(names)]:
            if isinstance(out[k], str):
                continue
            try:
                torch.cuda.synchronize()
                with profile(activities=[ProfilerActivity.CUDA]) as prof:
                    for _ in range(reps):
                        flush.bitwise_not_()
                        fns[k]()
                    torch.cuda.synchronize()
                out[k].append(_kernel_us(prof) * 1e-6 / reps)
            except Exception as exc:  # reported per function, not hidden
                out[k] = f"{type(exc).__name__}: {exc}"[:300]
    return out


def _kernel_us(prof) -> float:
    from torch.autograd import DeviceType
    return sum(e.time_range.elapsed_us() for e in prof.events()
               if e.device_type == DeviceType.CUDA and _FLUSH_KERNEL not in e.name)


def _time_graphs(fns: dict[str, Callable[[], object]], reps: int) -> dict[str, float | str]:
    """CUDA: seconds per call of ``reps`` (flush, call) pairs replayed from one CUDA graph,
    timed with CUDA events, minus a graph of the flushes alone: the gaps between an
    implementation's kernels included, the host's launch overhead not."""
    flush = torch.empty(GPU_MIN_TENSOR_BYTES, dtype=torch.uint8, device="cuda")

    def graph_seconds(fn) -> float:
        stream = torch.cuda.Stream()
        stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(stream):
            if isinstance(fn, _Backward):  # its forward on the capture stream
                fn.rebuild()
            for _ in range(2):  # warm-up on a side stream, as capture requires
                flush.bitwise_not_()
                if fn is not None:
                    fn()
        torch.cuda.current_stream().wait_stream(stream)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph, stream=stream):
            for _ in range(reps):
                flush.bitwise_not_()
                if fn is not None:
                    fn()
        graph.replay()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        graph.replay()
        end.record()
        torch.cuda.synchronize()
        return start.elapsed_time(end) * 1e-3

    out: dict[str, float | str] = {}
    try:
        base = graph_seconds(None)
    except Exception as exc:
        return dict.fromkeys(fns, f"{type(exc).__name__}: {exc}"[:300])
    for k, fn in fns.items():
        try:
            out[k] = max(graph_seconds(fn) - base, 0.0) / reps
        except Exception as exc:
            out[k] = f"{type(exc).__name__}: {exc}"[:300]
    return out


# ---- the run -------------------------------------------------------------------------------


@dataclass
class BenchReport:
    """Timing rows (``COLUMNS``), correctness rows (``CHECK_COLUMNS``), where they ran,
    and why an implementation is missing (``errors``: "impl op" -> reason)."""

    rows: list[dict] = field(default_factory=list)
    checks: list[dict] = field(default_factory=list)
    hardware: str = ""
    software: str = ""
    errors: dict[str, str] = field(default_factory=dict)
    timing: str = ""

    def row(self, implementation: str, direction: str, op: str = "layer_norm",
            shape: str | None = None, dtype: str | None = None) -> dict:
        """The one row that matches (KeyError if none or several)."""
        found = [r for r in self.rows
                 if r["implementation"] == implementation and r["direction"] == direction
                 and r["op"] == op and shape in (None, r["shape"])
                 and dtype in (None, r["dtype"])]
        if len(found) != 1:
            raise KeyError(f"{len(found)} rows for {implementation} {op} {direction}")
        return found[0]

    def compare(self, a: str, b: str, direction: str, op: str = "layer_norm",
                shape: str | None = None, dtype: str | None = None) -> dict:
        """:func:`compare` of two implementations' runs in one case."""
        return compare(self.row(a, direction, op, shape, dtype)["runs_ms"],
                       self.row(b, direction, op, shape, dtype)["runs_ms"])


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


def software_description() -> str:
    """torch, triton and liger-kernel versions (those importable)."""
    from importlib import metadata
    parts = [f"torch {torch.__version__}"]
    for dist in ("triton", "liger-kernel"):
        try:
            parts.append(f"{dist} {metadata.version(dist)}")
        except metadata.PackageNotFoundError:
            parts.append(f"{dist} absent")
    return ", ".join(parts)


def _dtype_name(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


def run_benchmark(device: str = "cpu", shapes: Sequence[tuple[int, int]] | None = None,
                  dtypes: Sequence[torch.dtype] | None = None,
                  implementations: Sequence[str] | None = None,
                  ops: Sequence[str] = ("layer_norm",), ns: Sequence[int] = GPU_NS,
                  reps: int = 5, runs: int = MIN_RUNS,
                  quick: bool = False, threads: int | None = None, check: bool = True,
                  check_shapes: dict[int, int] | None = None,
                  progress: Callable[[str], None] | None = None) -> BenchReport:
    """Check, then time, every implementation of every op on every shape, dtype, direction.

    ``reps``: calls per run; ``runs`` (>= 3): runs per implementation and case. Shapes:
    on CUDA :func:`shape_plan` per dtype (>= 256 MiB per tensor, N in ``ns``), on the
    CPU ``CPU_SHAPES`` (``CPU_QUICK_SHAPES`` when ``quick``); dtypes: fp16, bf16, fp32 on
    CUDA, fp32 on the CPU. ``check_shapes``: N -> rows of the float64 check (default
    :func:`_check_rows`). ``threads`` sets torch's intra-op threads for the run (restored
    afterwards). An optional implementation that fails is left out, with its reason in
    ``errors``; ``torch`` is always timed.
    """
    if reps < 1:
        raise ValueError(f"reps: expected a positive number of repetitions, got {reps}")
    if runs < MIN_RUNS:
        raise ValueError(f"runs: expected at least {MIN_RUNS} runs (a spread), got {runs}")
    for op in ops:
        _check_op(op)
    if device == "cuda" and not torch.cuda.is_available():
        raise RuntimeError("device='cuda' requested but torch.cuda.is_available() is False")
    if threads is not None and threads < 1:
        raise ValueError(f"threads: expected a positive number of threads, got {threads}")
    previous = torch.get_num_threads()
    if threads is not None:
        torch.set_num_threads(threads)
    # The backward is timed by repeated autograd.grad(..., retain_graph=True); a compiled
    # backward that donates its saved buffers refuses that, so donation is switched off.
    try:
        with functorch_config.patch(donated_buffer=False):
            return _run(device, shapes, dtypes, implementations, ops, ns, reps, runs, quick,
                        check, check_shapes, progress or (lambda _msg: None))
    finally:
        torch.set_num_threads(previous)


def _run(device, shapes, dtypes, implementations, ops, ns, reps, runs, quick, check,
         check_shapes, say) -> BenchReport:
    on_gpu = device == "cuda"
    dtypes = tuple(dtypes or (GPU_DTYPES if on_gpu else (torch.float32,)))
    impls = list(implementations or (GPU_IMPLEMENTATIONS if on_gpu else CPU_IMPLEMENTATIONS))
    if "torch" not in impls:
        impls.append("torch")
    report = BenchReport(hardware=hardware_description(device),
                         software=software_description(),
                         timing=("kernel time (torch.profiler, L2 flushed before each call); "
                                 "graph_ms: CUDA-graph replay" if on_gpu else
                                 "wall-clock per call, implementations interleaved"))
    for op in ops:
        for dtype in dtypes:
            plan = shapes or (shape_plan(dtype, ns) if on_gpu else
                              (CPU_QUICK_SHAPES if quick else CPU_SHAPES))
            for m, n in plan:
                _run_case(report, device, op, m, n, dtype, impls, reps, runs, check,
                          (check_shapes or {}).get(n, _check_rows(m, n)), say)
    return report


def _fail(report: BenchReport, impl: str, op: str, exc: BaseException) -> None:
    if impl not in OPTIONAL_IMPLEMENTATIONS:
        raise exc
    report.errors.setdefault(f"{impl} {op}", f"{type(exc).__name__}: {exc}"[:500])


def _run_case(report, device, op, m, n, dtype, impls, reps, runs, check, check_m, say):
    on_gpu = device == "cuda"
    shape_key, dname = f"{m}x{n}", _dtype_name(dtype)
    if any(i == "compiled" for i in impls):
        torch._dynamo.reset()  # a fresh compile per case: dynamo's recompile limit
    fns: dict[str, Callable] = {}
    verdicts: dict[str, str] = {}
    for impl in impls:
        if f"{impl} {op}" in report.errors:
            continue
        if impl == "numpy_ref":
            if on_gpu or op != "layer_norm":
                continue
            fns[impl] = None  # timed below, not checked
            verdicts[impl] = "-"
            continue
        try:
            fns[impl] = implementation(impl, op)
            if check:
                say(f"checking {impl} {op} {check_m}x{n} {dname}")
                errors = check_outputs(fns[impl], op, check_m, n, dtype, device)
                tol = TOLERANCE[dtype]
                for name, err in errors.items():
                    report.checks.append(dict(op=op, implementation=impl,
                                              shape=f"{check_m}x{n}", dtype=dname,
                                              output=name, error=err, tolerance=tol,
                                              ok=err <= tol, device=device))
                verdicts[impl] = "ok" if all(e <= tol for e in errors.values()) else "FAIL"
            else:
                verdicts[impl] = "-"
        except Exception as exc:  # reported in report.errors, not hidden
            _fail(report, impl, op, exc)
            fns.pop(impl, None)
    case = _Case(op, m, n, dtype, device)
    for direction in DIRECTIONS:
        calls = {"copy": case.copy()}
        for impl, fn in fns.items():
            try:
                if impl == "numpy_ref":
                    calls[impl] = case.numpy_calls()[direction]
                else:
                    calls[impl] = (case.forward if direction == "fwd" else case.backward)(fn)
                calls[impl]()  # compiles on first use; errors surface here
            except Exception as exc:
                _fail(report, impl, op, exc)
                calls.pop(impl, None)
        say(f"timing {op} {shape_key} {dname} {direction}")
        if on_gpu:
            times = _time_kernels(calls, reps, runs)
            graphs = _time_graphs(calls, reps)
        else:
            times, graphs = _time_wall(calls, reps, runs), {}
        copy_runs = times.pop("copy")
        if isinstance(copy_runs, str):
            raise RuntimeError(f"the copy baseline could not be timed: {copy_runs}")
        copy_sec, _ = summarize_runs(copy_runs)
        copy_gbps = 2 * case.x.numel() * case.x.element_size() / copy_sec / 1e9
        nbytes = bytes_moved(m, n, dtype, direction, op=op)
        for impl, runs_sec in [("copy", copy_runs), *times.items()]:
            if isinstance(runs_sec, str):
                report.errors.setdefault(f"{impl} {op}", runs_sec)
                continue
            sec, spread = summarize_runs(runs_sec)
            moved = 2 * case.x.numel() * case.x.element_size() if impl == "copy" else nbytes
            graph = graphs.get(impl)
            if isinstance(graph, str):  # the kernel time stands; say why graph_ms is empty
                report.errors.setdefault(f"{impl} {op} {direction} graph", graph)
            report.rows.append(dict(
                op=op, implementation=impl, shape=shape_key, dtype=dname, direction=direction,
                ms=sec * 1e3, spread=spread, gbps=moved / sec / 1e9,
                frac_copy=moved / sec / 1e9 / copy_gbps,
                graph_ms=graph * 1e3 if isinstance(graph, float) else None,
                check=verdicts.get(impl, "-"), timing="kernel" if on_gpu else "wall",
                runs_ms=[t * 1e3 for t in runs_sec], device=device))


# ---- tables --------------------------------------------------------------------------------


def format_table(rows: Sequence[dict]) -> str:
    """The rows as an aligned text table, at most 80 characters wide: time (ms, median of
    the runs), spread, GB/s of ideal traffic, share of the same-method copy, check. The op
    (``layer_norm``, ``add_rms_norm``, ...) heads its rows, on a line of its own."""
    header = ("impl", "shape", "dtype", "dir", "ms", "spread", "GB/s", "of copy", "check")
    cells = [header]
    for r in rows:
        cells.append((r["implementation"], r["shape"], r["dtype"], r["direction"],
                      f"{r['ms']:.3g}", f"{100 * r['spread']:.0f}%", f"{r['gbps']:.1f}",
                      f"{100 * r['frac_copy']:.0f}%", r.get("check", "-")))
    widths = [max(len(row[i]) for row in cells) for i in range(len(header))]

    def line(row) -> str:
        return " ".join(cell.ljust(w) if i < 4 else cell.rjust(w)
                        for i, (cell, w) in enumerate(zip(row, widths, strict=True)))

    lines, op = [line(header)], None
    for r, row in zip(rows, cells[1:], strict=True):
        if r["op"] != op:
            op = r["op"]
            lines.append(f"{op}:")
        lines.append(line(row))
    return "\n".join(lines)


def format_checks(checks: Sequence[dict]) -> str:
    """Per implementation, op and dtype: the largest error over shapes and outputs, the
    output where it occurs, the tolerance and the verdict."""
    worst: dict[tuple, dict] = {}
    for c in checks:
        key = (c["implementation"], c["op"], c["dtype"])
        if key not in worst or c["error"] > worst[key]["error"]:
            worst[key] = c
    lines = ["largest error vs float64 (relative to the reference's largest value)"]
    for (impl, op, dtype), c in worst.items():
        ok = all(x["ok"] for x in checks
                 if (x["implementation"], x["op"], x["dtype"]) == (impl, op, dtype))
        lines.append(f"{impl:<10}{op:<15}{dtype:<9}{c['error']:9.1e} ({c['output']:<6}) "
                     f"tol {c['tolerance']:.0e} {'ok' if ok else 'FAIL'}")
    return "\n".join(lines)


# ---- the stored H100 run of issue 28 (two timings, no check): read and rendered -----------

GPU_TARGETS = {"fwd": 0.85, "bwd": 0.75}  # issue 28: share of the 1 GiB copy on an H100
TARGETS = {"fwd": 0.95, "bwd": 0.90}  # issue 36: share of the same-method copy, bf16


def format_comparison(rows: Sequence[dict], copy_gbps: float,
                      implementations: Sequence[str] = ("torch_native", "compiled", "liger",
                                                        "triton")) -> str:
    """Stored issue-28 rows: one line per shape, dtype and direction, each implementation's
    eager GB/s and kernels-alone GB/s and their shares of ``copy_gbps``; ``-`` where not
    measured."""
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


def load_stored(name: str) -> dict:
    """A benchmark table stored in the book's ``book/data/`` (``--json``): ``name`` is the
    file name, e.g. ``"gpu_bench_h100.json"``.

    Checked before use: a benchmark or prediction file needs ``command``, ``date`` and a
    list of ``rows``; a tuning file (``gpu_tune_*``, ``kernel_tune``) ``device`` and a list of
    ``configs``. ``FileNotFoundError`` / ``ValueError``: one line naming the file and what to
    do (restore it; remaking it needs a GPU).
    """
    if name.startswith("gpu_tune"):
        required, command = {"device": str, "configs": list}, "python -m " \
            "layernorm_tutorial.kernel_tune --out PATH on a GPU"
    elif name.startswith("kernel_fused_predictions"):
        required, command = {"command": str, "date": str, "rows": list}, "python -m " \
            "layernorm_tutorial.roofline --table book/data/kernel_fused_resources.json --out PATH"
    else:
        required, command = {"command": str, "date": str, "rows": list}, "python -m " \
            "layernorm_tutorial.bench --device cuda --json PATH on a GPU"
    return read_json_document(BOOK_DATA / name, required=required, command=command,
                              what="stored benchmark file")


def target_check(rows: Sequence[dict], copy_gbps: float, *, column: str = "kernel_gbps",
                 ours: str = "triton", peer: str = "liger", tie: float = 0.0) -> list[dict]:
    """Stored issue-28 rows, per shape, dtype and direction: our share of ``copy_gbps`` and
    the peer's (from ``column``), the target share (``GPU_TARGETS``), whether ours meets
    it, whether ours is ahead of the peer and ``tie`` (the faster bandwidth exceeds the
    slower by at most ``tie``, relative: symmetric in ours and the peer)."""
    by = {(r["implementation"], r["shape"], r["dtype"], r["direction"]): r for r in rows}
    out = []
    for (impl, shape, dtype, direction), r in by.items():
        if impl != ours or r.get(column) is None:
            continue
        other = by.get((peer, shape, dtype, direction), {}).get(column)
        share = r[column] / copy_gbps
        gap = None if other is None else r[column] / other - 1.0
        even = gap is not None and _relative_gap(r[column], other) <= tie
        out.append(dict(shape=shape, dtype=dtype, direction=direction, ours=share,
                        peer=None if other is None else other / copy_gbps,
                        target=GPU_TARGETS[direction], met=share >= GPU_TARGETS[direction],
                        ahead=gap is not None and gap > 0 and not even,
                        tie=even, gap=gap))
    return out


# ---- output --------------------------------------------------------------------------------


def write_csv(rows: Sequence[dict], path: str) -> str:
    """Write the rows (``COLUMNS``) to ``path`` (folders created, atomically); return it."""
    text = io.StringIO()
    writer = csv.DictWriter(text, fieldnames=COLUMNS)
    writer.writeheader()
    writer.writerows({k: r.get(k) for k in COLUMNS} for r in rows)
    write_text_atomically(path, text.getvalue())
    return path


def report_json(report: BenchReport, command: str) -> str:
    """The report as JSON text: command, hardware, software, timing method, date, errors,
    rows (``COLUMNS``) and the correctness checks (``CHECK_COLUMNS``)."""
    return json.dumps(dict(command=command, hardware=report.hardware,
                           software=report.software, timing=report.timing,
                           date=time.strftime("%Y-%m-%d", time.gmtime()),
                           errors=report.errors,
                           rows=[{k: r.get(k) for k in COLUMNS} for r in report.rows],
                           checks=[{k: c.get(k) for k in CHECK_COLUMNS}
                                   for c in report.checks]),
                      indent=1) + "\n"


def measure_copy_gbps(nbytes: int = MIN_BYTES, reps: int = 5, device: str = "cpu",
                      runs: int = MIN_RUNS) -> float:
    """Bandwidth (GB/s) of ``dst.copy_(src)`` for float32 arrays of ``nbytes``: read +
    write; median of the runs (on CUDA kernel time, L2 flushed)."""
    src = torch.ones(max(nbytes // 4, 1), device=device)
    dst = torch.empty_like(src)
    timer = _time_kernels if device == "cuda" else _time_wall
    sec, _ = summarize_runs(timer({"copy": lambda: dst.copy_(src)}, reps, runs)["copy"])
    return 2 * src.numel() * 4 / sec / 1e9


def measure_matmul_gflops(n: int = 1024, reps: int = 3, runs: int = MIN_RUNS,
                          device: str = "cpu") -> float:
    """Achieved float32 GFLOP/s of an n x n matmul: a measured compute roof."""
    g = torch.Generator().manual_seed(0)
    a, b = (torch.randn(n, n, generator=g).to(device) for _ in range(2))
    out = torch.empty(n, n, device=device)
    sec, _ = summarize_runs(_time_wall({"mm": lambda: torch.mm(a, b, out=out)}, reps,
                                       runs)["mm"])
    return 2 * n**3 / sec / 1e9


def _ints(text: str) -> list[int]:
    try:
        return [positive_int(t) for t in text.split(",")]
    except argparse.ArgumentTypeError as err:
        raise argparse.ArgumentTypeError(f"expected positive integers separated by commas "
                                         f"({err})") from None


def _names(choices: Sequence[str]) -> Callable[[str], list[str]]:
    def parse(text: str) -> list[str]:
        names = text.split(",")
        bad = [n for n in names if n not in choices]
        if bad:
            raise argparse.ArgumentTypeError(f"unknown {bad}; expected some of {list(choices)}")
        return names
    return parse


_DTYPES = {"fp16": torch.float16, "bf16": torch.bfloat16, "fp32": torch.float32}


@interruptible
def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m layernorm_tutorial.bench",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", choices=("cpu", "cuda"),
                        default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--quick", action="store_true",
                        help="CPU: one 2048x2048 float32 shape (16 MiB)")
    parser.add_argument("--ops", type=_names(OPS), default=None,
                        help=f"comma-separated, of {','.join(OPS)} (default: all on CUDA, "
                             "layer_norm on the CPU)")
    parser.add_argument("--impls", type=_names(tuple(dict.fromkeys(
                            CPU_IMPLEMENTATIONS + GPU_IMPLEMENTATIONS))), default=None,
                        help="comma-separated implementations (torch is always timed)")
    parser.add_argument("--dtypes", type=_names(tuple(_DTYPES)), default=None,
                        help="comma-separated, of fp16,bf16,fp32")
    parser.add_argument("--ns", type=_ints, default=None,
                        help="CUDA: comma-separated row lengths (default 1024,...,65536)")
    parser.add_argument("--reps", type=positive_int, default=5,
                        help="timed calls per run (default 5)")
    parser.add_argument("--runs", type=positive_int, default=MIN_RUNS,
                        help=f"runs per implementation and case, >= {MIN_RUNS} (default 3)")
    parser.add_argument("--threads", type=positive_int, default=None,
                        help="torch intra-op threads, >= 1 (default: torch's choice)")
    parser.add_argument("--no-check", action="store_true",
                        help="skip the float64 correctness check (not for stored runs)")
    parser.add_argument("--csv", default=None, help=f"CSV path (default {DEFAULT_CSV})")
    parser.add_argument("--json", default=None,
                        help="also store rows, checks, device and software as JSON")
    parser.add_argument("--force", action="store_true",
                        help="replace an existing --csv or --json file")
    args = parser.parse_args(argv)
    if args.runs < MIN_RUNS:
        parser.error(f"--runs: use at least {MIN_RUNS} runs, to report their spread")
    if args.device == "cuda" and not torch.cuda.is_available():
        parser.error("--device cuda: torch.cuda.is_available() is False on this machine")
    if args.ns and args.device != "cuda":
        parser.error("--ns: row lengths are planned on CUDA only (the CPU uses CPU_SHAPES)")
    if args.json and args.no_check:
        parser.error("--json: a stored run carries its correctness check; drop --no-check")
    for option, value in (("--csv", args.csv), ("--json", args.json)):
        if value is not None and not value:
            parser.error(f"{option}: empty path")
    if args.json and same_file(args.json, args.csv or DEFAULT_CSV):
        parser.error(f"--json {args.json}: --csv and --json name the same file; give each "
                     "its own path")
    try:  # the default scratch file may be replaced; a path given explicitly needs --force
        if args.csv is not None:  # never one of the repository's files, --force or not
            check_not_a_source(args.csv, option="--csv")
        if args.json:
            check_not_a_source(args.json, option="--json", own=BENCH_TABLES)
        csv_path = check_output_path(args.csv or DEFAULT_CSV, option="--csv",
                                     force=args.force or args.csv is None)
        json_path = (check_output_path(args.json, option="--json", force=args.force)
                     if args.json else None)
    except OutputPathError as err:
        parser.error(str(err))
    on_gpu = args.device == "cuda"
    dtypes = [_DTYPES[d] for d in args.dtypes] if args.dtypes else None
    report = run_benchmark(
        device=args.device, dtypes=dtypes, implementations=args.impls, ns=args.ns or GPU_NS,
        ops=args.ops or (OPS if on_gpu else ("layer_norm",)), reps=args.reps,
        runs=args.runs, quick=args.quick, threads=args.threads, check=not args.no_check,
        progress=lambda msg: print(msg, file=sys.stderr, flush=True))
    print(f"hardware: {report.hardware}; {report.software}")
    print(f"timing: {report.timing}; {args.runs} runs of {args.reps} calls")
    print(format_table(report.rows))
    if report.checks:
        print(format_checks(report.checks))
    for key, why in report.errors.items():
        print(f"{key}: not measured ({why})")
    print(f"CSV written to {os.path.abspath(write_csv(report.rows, str(csv_path)))}")
    if json_path is not None:
        command = "python -m layernorm_tutorial.bench " + " ".join(
            sys.argv[1:] if argv is None else argv)
        write_text_atomically(json_path, report_json(report, command))
        print(f"JSON written to {os.path.abspath(json_path)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
