"""Memory traffic and arithmetic of a normalization layer: why LayerNorm is bandwidth-bound.

:func:`norm_traffic` counts the bytes a forward LayerNorm or RMSNorm moves to and from DRAM
and the flops it performs, for an eager implementation (one kernel per elementary op) and a
fused one. Their ratio, the arithmetic intensity, sits far below a GPU's ridge point.

:func:`kernel_model` is a performance model of one launch of the fused Triton kernels (or of
a peer's, :func:`liger_launch`): bytes moved, bytes in flight per multiprocessor against
what Little's law asks for, occupancy from the compiled registers and shared memory, and
the predicted fraction of the datasheet bandwidth, for sm_80 and sm_90.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["GPU_SPECS", "KernelModel", "Launch", "Traffic", "before_launch", "format_models",
           "ideal_bytes", "kernel_model", "liger_launch", "norm_traffic", "package_launch"]


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


# ---------------------------------------------------------------------------------------------
# A performance model of the fused Triton kernels (and of a peer's), per kernel and shape.
# ---------------------------------------------------------------------------------------------

# Datasheet DRAM bandwidth and multiprocessors of the two targets the table is compiled for.
GPU_SPECS = {
    "sm_80": dict(gpu="A100 80GB SXM", peak_gbps=2039.0, multiprocessors=108),
    "sm_90": dict(gpu="H100 80GB SXM", peak_gbps=3350.0, multiprocessors=132),
}
# Measured on the H100 lent to this project (book/data/gpu_tune_h100.json, kernel_tune.py): one
# dependent global load took 357 ns over a 1 GiB array (DRAM) and 149 ns over 8 MiB (L2),
# a single thread chasing pointers, so without load. Under load the latency grows (queues
# in the memory system); the model takes twice the unloaded value as its default, and the
# chapter shows the unloaded value beside it. The A100's was not measured: the same is used.
UNLOADED_LATENCY_NS = 357.0
DEFAULT_LATENCY_NS = 2 * UNLOADED_LATENCY_NS
PARTIAL_BYTES = 4  # float32 partial sums of dgamma and dbeta
# Traffic that stays in L2 (re-reads, read-modify-writes) is charged at this multiple of the
# DRAM peak. An assumption, not a measurement of L2 bandwidth; what was measured is a lower
# bound: on the H100, kernels whose data fit in L2 ran at up to 1.4x the copy bandwidth.
L2_SPEEDUP = 2.0


def ideal_bytes(m: int, n: int, element_size: int, direction: str) -> int:
    """The fewest DRAM bytes a LayerNorm kernel moves (``bench.bytes_moved`` with parameters
    of the input's dtype): forward ``M*N*2s + 2*N*s + 8*M``, backward
    ``M*N*3s + 3*N*s + 8*M``."""
    if direction == "fwd":
        return m * n * 2 * element_size + 2 * n * element_size + 8 * m
    if direction == "bwd":
        return m * n * 3 * element_size + 3 * n * element_size + 8 * m
    raise ValueError(f"direction: expected 'fwd' or 'bwd', got {direction!r}")


@dataclass(frozen=True)
class Launch:
    """How one kernel is launched for one shape: the constants and warps, the registers and
    shared memory of its compiled code, and (backward) the programs and partial rows."""

    kernel: str  # "forward" or "backward"
    block_n: int
    num_warps: int
    rows: int  # rows per program step
    split: int  # programs sharing a row's columns (backward)
    row_fits_block: bool
    registers: int
    shared_bytes: int
    programs: int | None = None  # backward: programs launched (forward: one per row tile)
    partial_rows: int = 0  # backward: rows of each float32 partial buffer (dgamma, dbeta)


@dataclass(frozen=True)
class KernelModel:
    """What the model says of one launch on one target: see ``kernel_model``."""

    launch: Launch
    target: str
    m: int
    n: int
    element_size: int
    resident_per_sm: int  # programs that fit on a multiprocessor (registers, shared, warps)
    active_per_sm: float  # programs per multiprocessor actually running (launch-limited)
    occupancy: float  # resident warps / 64
    ideal_bytes: int
    dram_bytes: int  # ideal + partial sums written and read back
    cache_bytes: int  # extra traffic that the model assumes L2 serves (re-reads, RMW)
    in_flight_per_sm: float  # bytes requested per multiprocessor at the start of a step
    needed_per_sm: float  # peak bandwidth x latency / multiprocessors (Little's law)
    predicted_fraction: float  # of the datasheet peak


def kernel_model(launch: Launch, m: int, n: int, element_size: int, target: str,
                 latency_ns: float = DEFAULT_LATENCY_NS) -> KernelModel:
    r"""The model of one launch: bytes moved, bytes in flight, occupancy, fraction of peak.

    - Occupancy: ``resources.occupancy`` of the compiled registers and shared memory.
    - Active programs per multiprocessor: all resident ones when the grid is larger than the
      GPU (the forward), else ``programs / multiprocessors`` (the backward's fixed grid).
    - Bytes in flight per multiprocessor: active programs x the bytes one program requests
      at the start of a step (``rows`` rows of ``min(N, BLOCK_N / SPLIT)`` elements, of x in
      the forward, of x and dy in the backward).
    - Little's law: to sustain the peak bandwidth ``B`` with latency ``L`` the GPU needs
      ``B L`` bytes in flight, ``B L / SMs`` per multiprocessor.
    - DRAM bytes: the ideal bytes, plus (backward) the float32 partial rows of dgamma and
      dbeta written and read back by the reduction. Re-reads of a row by the chunked path
      and by split programs, and the chunked backward's read-modify-write of its partial
      rows, are counted as cache traffic (``cache_bytes``), assumed served by L2.
    - Predicted fraction of peak: ``min(1, in flight / needed) x ideal / (DRAM bytes +
      cache bytes / L2_SPEEDUP)``. An upper bound: it ignores the time a program spends
      computing between its loads, the launch overhead, and the tail of the last wave.
    """
    from .triton_kernels import resources

    spec = GPU_SPECS[target]
    sms = spec["multiprocessors"]
    occ = resources.occupancy(launch.registers, launch.num_warps, launch.shared_bytes, target)
    direction = "fwd" if launch.kernel == "forward" else "bwd"
    tensors = 1 if direction == "fwd" else 2
    width = min(n, launch.block_n // max(launch.split, 1))
    step_bytes = launch.rows * width * element_size * tensors
    if launch.programs is None:
        active = float(occ["programs"])
    else:
        active = min(float(occ["programs"]), launch.programs / sms)
    ideal = ideal_bytes(m, n, element_size, direction)
    dram = ideal
    cache = 0
    if direction == "bwd":
        dram += 2 * 2 * launch.partial_rows * n * PARTIAL_BYTES  # 2 buffers, write + read
        if not launch.row_fits_block:
            cache += m * n * 2 * element_size  # x and dy read a second time
            cache += 2 * 2 * m * n * PARTIAL_BYTES  # partial rows read and written per row
        elif launch.split > 1:
            cache += m * n * 2 * element_size * launch.split  # every part reads the row...
            cache += m * n * 2 * element_size  # ...and its own part again
    elif not launch.row_fits_block:
        cache += 2 * m * n * element_size  # x read three times
    needed = spec["peak_gbps"] * 1e9 * latency_ns * 1e-9 / sms
    in_flight = active * step_bytes
    fraction = min(1.0, in_flight / needed) * ideal / (dram + cache / L2_SPEEDUP)
    return KernelModel(launch, target, m, n, element_size, occ["programs"], active,
                       occ["occupancy"], ideal, dram, cache, in_flight, needed, fraction)


def _table_row(table_rows: list[dict], **key) -> dict:
    for r in table_rows:
        if all(r.get(k, 1 if k in ("rows", "split") else None) == v for k, v in key.items()):
            return r
    raise KeyError(f"no compiled configuration {key}")


_DTYPE_NAMES = {4: "fp32", 2: "bf16"}


def package_launch(kernel: str, n: int, element_size: int, target: str, table_rows: list[dict],
                   m: int = 4096) -> Launch:
    """The launch ``ops`` makes today for rows of ``n`` (weight and bias on), with registers
    and shared memory from the compiled table ``table_rows`` (``aot``)."""
    from .triton_kernels import ops

    cap = ops.MAX_BLOCK_N if kernel == "forward" else ops.MAX_BLOCK_N_BACKWARD
    block_n, warps, rows, split, fits = ops.launch_config(n, cap, kernel, element_size)
    rows, split = (rows, split) if fits else (1, 1)
    flags = dict(has_weight=True, has_bias=True)
    if kernel == "backward":
        flags["compute_dw"] = True
    r = _table_row(table_rows, kernel=kernel, target=target, dtype=_DTYPE_NAMES[element_size],
                   block_n=block_n, num_warps=warps, row_fits_block=fits, rows=rows,
                   split=split, **flags)
    shared = r["shared_bytes"] + r["static_shared_bytes"]
    if kernel == "forward":
        return Launch(kernel, block_n, warps, rows, 1, fits, r["registers"], shared)
    from .triton_kernels import resources
    sms = GPU_SPECS[target]["multiprocessors"]
    resident = resources.occupancy(r["registers"], warps, shared, target)["programs"]
    groups = max(1, min(-(-m // rows),
                        sms * max(1, min(resident, ops.BACKWARD_PROGRAMS_PER_SM)) // split))
    return Launch(kernel, block_n, warps, rows, split, fits, r["registers"], shared,
                  programs=groups * split, partial_rows=groups)


def before_launch(kernel: str, n: int, element_size: int, target: str,
                  table_rows: list[dict]) -> Launch:
    """The launch of the kernels before issue 28 (``book/data/kernel_resources_before.json``):
    one row per program, warps = BLOCK_N / 256 (1 to 16), rows resident up to 16384
    (forward) and 8192 (backward, gamma held in registers), longer rows in chunks of 8192;
    the backward ran one program per multiprocessor, then two reductions."""
    cap = 16384 if kernel == "forward" else 8192
    fits = n <= cap
    block_n = min(1 << max(n - 1, 0).bit_length(), cap) if fits else 8192
    warps = min(max(block_n // 256, 1), 16)
    flags = dict(has_weight=True, has_bias=True)
    if kernel == "backward":
        flags["compute_dw"] = True
    r = _table_row(table_rows, kernel=kernel, target=target, dtype=_DTYPE_NAMES[element_size],
                   block_n=block_n, num_warps=warps, row_fits_block=fits, **flags)
    shared = r["shared_bytes"] + r["static_shared_bytes"]
    if kernel == "forward":
        return Launch(kernel, block_n, warps, 1, 1, fits, r["registers"], shared)
    sms = GPU_SPECS[target]["multiprocessors"]
    return Launch(kernel, block_n, warps, 1, 1, fits, r["registers"], shared, programs=sms,
                  partial_rows=sms)


def liger_launch(kernel: str, n: int, target: str, liger_rows: list[dict]) -> Launch:
    """Liger Kernel's launch (``peers.liger_compile_jobs``, compiled the same way): one row
    per program in the forward; in the backward one program per multiprocessor, each with
    its own float32 partial rows, summed afterwards by torch."""
    r = next(x for x in liger_rows if x["target"] == target
             and x["label"].startswith(f"liger {kernel} N={n} "))
    block_n = r["constants"]["BLOCK_SIZE"]
    shared = r["shared_bytes"] + r["static_shared_bytes"]
    if kernel == "forward":
        return Launch(kernel, block_n, r["num_warps"], 1, 1, True, r["registers"], shared)
    sms = GPU_SPECS[target]["multiprocessors"]
    return Launch(kernel, block_n, r["num_warps"], 1, 1, True, r["registers"], shared,
                  programs=sms, partial_rows=sms)


def format_models(models: list[tuple[str, KernelModel]]) -> str:
    """Text table of labelled models: launch, occupancy, bytes in flight against Little's
    law, DRAM bytes over ideal, and the predicted fraction of the datasheet peak."""
    lines = [f"{'':<8}{'kernel':<9}{'N':>6}{'warps':>6}{'regs':>5}{'res/SM':>7}{'act/SM':>7}"
             f"{'occ':>5}{'KB in flight':>13}{'KB needed':>10}{'DRAM/ideal':>11}"
             f"{'L2/ideal':>9}{'predicted':>10}"]
    for label, md in models:
        la = md.launch
        lines.append(f"{label:<8}{la.kernel:<9}{md.n:>6}{la.num_warps:>6}{la.registers:>5}"
                     f"{md.resident_per_sm:>7}{md.active_per_sm:>7.1f}{md.occupancy:>5.0%}"
                     f"{md.in_flight_per_sm / 1024:>13.1f}{md.needed_per_sm / 1024:>10.1f}"
                     f"{md.dram_bytes / md.ideal_bytes:>11.3f}"
                     f"{md.cache_bytes / md.ideal_bytes:>9.2f}{md.predicted_fraction:>10.0%}")
    return "\n".join(lines)
