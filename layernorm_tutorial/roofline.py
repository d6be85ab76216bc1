"""Memory traffic and arithmetic of a normalization layer: why LayerNorm is bandwidth-bound.

:func:`norm_traffic` counts the bytes a forward LayerNorm or RMSNorm moves to and from DRAM
and the flops it performs, for an eager implementation (one kernel per elementary op) and a
fused one. Their ratio, the arithmetic intensity, sits far below a GPU's ridge point.

:func:`kernel_model` is a performance model of one launch of the fused Triton kernels (or of
a peer's, :func:`liger_launch`): bytes moved, bytes in flight per multiprocessor against
what Little's law asks for, occupancy from the compiled registers and shared memory, and
the predicted fraction of the datasheet bandwidth, for sm_80 and sm_90.

:func:`fused_model` does the same for the one-source kernels of ``triton_kernels.fused``
(RMSNorm, the fused residual add + norm): their ideal bytes (:func:`fused_ideal_bytes`: 8
bytes per element in bf16 for add + RMSNorm against 10 for the two apart), pipelined stages,
one partial row per SM, the chunked paths' re-reads and the L2 capacity they need.
:func:`fused_predictions` tabulates it per op, N, target and direction;
``python -m layernorm_tutorial.roofline --table ... --out ...`` stores the table with its
date (``book/data/kernel_fused_predictions.json``). Nothing here imports Triton: the model
reads compiled tables, and only the functions that look up a launch rule import
``triton_kernels``.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["FUSED_OPS", "GPU_SPECS", "FusedLaunch", "FusedModel", "KernelModel", "Launch",
           "Traffic", "before_launch", "format_fused_predictions", "format_models",
           "fused_ideal_bytes", "fused_launch", "fused_model", "fused_predictions",
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
    "sm_80": dict(gpu="A100 80GB SXM", peak_gbps=2039.0, multiprocessors=108,
                  l2_bytes=40 * 2**20),
    "sm_90": dict(gpu="H100 80GB SXM", peak_gbps=3350.0, multiprocessors=132,
                  l2_bytes=50 * 2**20),
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


# ---------------------------------------------------------------------------------------------
# The one-source kernels (``triton_kernels.fused``): RMSNorm and the fused residual add + norm.
# ---------------------------------------------------------------------------------------------
FUSED_OPS = ("layer_norm", "rms_norm", "add_layer_norm", "add_rms_norm")
# (full-size arrays, parameter vectors, float32 row statistics) an ideal kernel moves: the
# same counts as ``bench.bytes_moved`` (a test holds them equal). Forward: x (and r) read,
# y (and s) written; backward: dy, the normalized input (and ds) read, dx written.
_FUSED_TRAFFIC = {
    "layer_norm": {"fwd": (2, 2, 2), "bwd": (3, 3, 2)},
    "rms_norm": {"fwd": (2, 1, 1), "bwd": (3, 2, 1)},
    "add_layer_norm": {"fwd": (4, 2, 2), "bwd": (4, 3, 2)},
    "add_rms_norm": {"fwd": (4, 1, 1), "bwd": (4, 2, 1)},
}
# The add and the norm as separate kernels: the add reads x, r and writes s (3 arrays), the
# norm reads s and writes y (2); backward: the norm's (dy, s in, g out: 3), then g + ds (3).
_UNFUSED_ARRAYS = {"fwd": 3 + 2, "bwd": 3 + 3}
# One program per multiprocessor that neither overlaps its loads with its reductions and
# stores (one stage) nor shares the SM with another program idles the memory system for part
# of each step. The review of the H100 run (gpu-kernel-audit.md) measured 0.73-0.79 of the
# copy for such a forward (16K rows); the model takes the midpoint as the duty cycle.
UNPIPELINED_DUTY = 0.76
FUSED_FORWARD_PROGRAMS_PER_SM = 4  # as ``triton_kernels.fused`` (a test holds them equal)


def fused_ideal_bytes(m: int, n: int, element_size: int, direction: str,
                      op: str = "add_rms_norm", fused: bool = True) -> int:
    """The fewest DRAM bytes of ``op`` on an ``(m, n)`` input with parameters of the input's
    dtype: ``arrays * m*n*s + params * n*s + 4 * stats * m`` (``_FUSED_TRAFFIC``).
    ``fused=False`` (``add_*`` only): the add and the norm as two kernels, ``_UNFUSED_ARRAYS``
    full-size arrays. bf16 add + RMSNorm forward: 8 bytes per element fused, 10 unfused."""
    if op not in _FUSED_TRAFFIC:
        raise ValueError(f"op: expected one of {FUSED_OPS}, got {op!r}")
    if direction not in ("fwd", "bwd"):
        raise ValueError(f"direction: expected 'fwd' or 'bwd', got {direction!r}")
    arrays, params, stats = _FUSED_TRAFFIC[op][direction]
    if not fused:
        if not op.startswith("add_"):
            raise ValueError(f"op: only the add_* ops have an unfused form, got {op!r}")
        arrays = _UNFUSED_ARRAYS[direction]
    return m * n * arrays * element_size + n * params * element_size + 4 * stats * m


def _streams(op: str, direction: str) -> int:
    """Full-size tensors a program streams in from DRAM per step (x, r; dy, x, ds)."""
    residual = op.startswith("add_")
    return (1 + residual) if direction == "fwd" else (2 + residual)


@dataclass(frozen=True)
class FusedLaunch:
    """One launch of a one-source kernel: ``fused.FusedConfig`` plus the compiled resources
    (``fused_aot`` table) and the persistent grid."""

    kernel: str  # "forward" or "backward"
    block_n: int
    num_warps: int
    rows: int
    row_fits_block: bool
    num_stages: int
    registers: int
    shared_bytes: int
    programs: int  # of the persistent grid


def fused_launch(kernel: str, n: int, element_size: int, target: str, table_rows: list[dict],
                 op: str = "add_rms_norm", m: int = 4096) -> FusedLaunch:
    """The launch ``fused`` makes for rows of ``n`` (``fused.fused_launch_config``), with the
    registers and shared memory of the heaviest compiled variant of ``op``'s norm in
    ``table_rows`` (``fused_aot``) and its persistent grid: forward ``min(tiles, SMs x
    min(resident, FUSED_FORWARD_PROGRAMS_PER_SM))``, backward ``min(tiles, SMs)``, on the
    chunked paths also at most ``fused.chunked_programs`` (L2 capacity)."""
    from .triton_kernels import fused, resources

    cfg = fused.fused_launch_config(n, kernel, element_size)
    rows = cfg.rows
    rms = "rms" in op
    dtype = _DTYPE_NAMES[element_size]
    r = next((x for x in table_rows if x["kernel"] == kernel and x["target"] == target
              and x["dtype"] == dtype and x["constants"]["BLOCK_N"] == cfg.block_n
              and x["constants"]["ROW_FITS_BLOCK"] == cfg.row_fits_block
              and x["constants"]["IS_RMS"] == rms and x["num_warps"] == cfg.num_warps
              and x["constants"]["NUM_STAGES"] == cfg.num_stages), None)
    if r is None:
        raise KeyError(f"no compiled {kernel} configuration {cfg} for {target} {dtype}")
    shared = r["shared_bytes"] + r["static_shared_bytes"]
    sms = GPU_SPECS[target]["multiprocessors"]
    tiles = -(-m // rows)
    if kernel == "forward":
        resident = resources.occupancy(r["registers"], cfg.num_warps, shared, target)["programs"]
        programs = min(tiles, sms * max(1, min(resident, FUSED_FORWARD_PROGRAMS_PER_SM)))
        if not cfg.row_fits_block:
            programs = min(programs, fused.chunked_programs(
                n, 1, element_size, 1, 0, GPU_SPECS[target]["l2_bytes"]))
    else:
        programs = min(tiles, sms)
        if not cfg.row_fits_block:
            programs = min(programs, fused.chunked_programs(
                n, rows, element_size, 2, 1 if rms else 2, GPU_SPECS[target]["l2_bytes"]))
    return FusedLaunch(kernel, cfg.block_n, cfg.num_warps, rows, cfg.row_fits_block,
                       cfg.num_stages, r["registers"], shared, programs)


@dataclass(frozen=True)
class FusedModel:
    """What the model says of one launch of a one-source kernel: see ``fused_model``."""

    launch: FusedLaunch
    op: str
    target: str
    m: int
    n: int
    element_size: int
    resident_per_sm: int
    active_per_sm: float
    ideal_bytes: int
    dram_bytes: int
    cache_bytes: int
    working_set_bytes: int  # what the chunked paths keep for re-use (rows, partial rows)
    in_flight_per_sm: float
    needed_per_sm: float
    duty: float  # fraction of the time a program has loads outstanding
    predicted_fraction: float  # of the datasheet peak
    predicted_gbps: float  # ideal bytes / predicted time
    predicted_us: float


def fused_model(launch: FusedLaunch, m: int, n: int, element_size: int, target: str,
                op: str = "add_rms_norm", latency_ns: float = DEFAULT_LATENCY_NS) -> FusedModel:
    r"""The model of one launch of the one-source kernels, as ``kernel_model`` with three
    changes that follow the kernels' design:

    - bytes in flight per multiprocessor: active programs x ``stages`` tiles (the
      pipelined loop issues the loads of its next ``stages - 1`` tiles before it waits for
      the current one's) x ``rows x min(N, BLOCK_N)`` elements x the streamed tensors (x, r
      forward; dy, x, ds backward);
    - duty cycle: one stage and at most one program per multiprocessor leave the memory
      system idle while a tile is reduced and stored: ``UNPIPELINED_DUTY``; otherwise 1;
    - DRAM bytes: ideal, plus the backward's float32 partial rows (one per program, the
      programs at most one per SM) written and read back by the one-step reduction; cache
      traffic (L2): the chunked forward's second read of each row (s or x), the chunked
      backward's second read of x and dy and its read-modify-write of the partial rows
      (once per tile of ``rows`` rows). When what the programs keep for that re-use (their
      rows being re-read, and the backward's partial rows) exceeds the L2 cache
      (``GPU_SPECS[...]["l2_bytes"]``), that traffic is charged to DRAM instead.

    Predicted fraction of peak = ``min(1, in flight / needed) x duty x ideal / (DRAM + cache /
    L2_SPEEDUP)``; an upper bound, like ``kernel_model``'s (no launch overhead, no tail)."""
    from .triton_kernels import resources

    spec = GPU_SPECS[target]
    sms = spec["multiprocessors"]
    direction = "fwd" if launch.kernel == "forward" else "bwd"
    occ = resources.occupancy(launch.registers, launch.num_warps, launch.shared_bytes, target)
    active = min(float(occ["programs"]), launch.programs / sms)
    streams = _streams(op, direction)
    tiles_ahead = launch.num_stages
    step_bytes = launch.rows * min(n, launch.block_n) * element_size * streams
    in_flight = active * tiles_ahead * step_bytes
    needed = spec["peak_gbps"] * 1e9 * latency_ns * 1e-9 / sms
    duty = UNPIPELINED_DUTY if launch.num_stages == 1 and active <= 1.0 else 1.0
    ideal = fused_ideal_bytes(m, n, element_size, direction, op)
    dram, cache, working = ideal, 0, 0
    slabs = 1 if "rms" in op else 2
    if direction == "bwd":
        dram += slabs * 2 * launch.programs * n * PARTIAL_BYTES
        if not launch.row_fits_block:
            cache += m * n * 2 * element_size  # x and dy read a second time
            cache += slabs * 2 * m * n * PARTIAL_BYTES // launch.rows  # partials, per tile
            working = launch.programs * (launch.rows * n * 2 * element_size
                                         + slabs * n * PARTIAL_BYTES)
    elif not launch.row_fits_block:
        cache += m * n * element_size  # s (or x) read again by the normalize pass
        working = launch.programs * launch.rows * n * element_size
    if working > spec["l2_bytes"]:  # the re-used data does not stay in L2
        dram, cache = dram + cache, 0
    fraction = min(1.0, in_flight / needed) * duty * ideal / (dram + cache / L2_SPEEDUP)
    gbps = fraction * spec["peak_gbps"]
    return FusedModel(launch, op, target, m, n, element_size, occ["programs"], active, ideal,
                      dram, cache, working, in_flight, needed, duty, fraction, gbps,
                      ideal / (gbps * 1e9) * 1e6)


def fused_predictions(table_rows: list[dict], ns=(1024, 2048, 4096, 8192, 16384, 32768, 65536),
                      m: int = 4096, element_size: int = 2,
                      ops=("rms_norm", "add_rms_norm", "add_layer_norm")) -> list[dict]:
    """The model's predictions for the one-source kernels per ``op``, N, target and
    direction: predicted fraction of peak, GB/s and microseconds for an ``(m, N)`` input,
    and, for the fused add, the predicted time of the add and the norm run apart
    (``unfused_us``: their ideal bytes at the same fraction) and the speed-up."""
    out = []
    for target in GPU_SPECS:
        for op in ops:
            for n in ns:
                for kernel, direction in (("forward", "fwd"), ("backward", "bwd")):
                    md = fused_model(fused_launch(kernel, n, element_size, target, table_rows,
                                                  op, m), m, n, element_size, target, op)
                    row = dict(op=op, target=target, n=n, m=m, direction=direction,
                               block_n=md.launch.block_n, rows=md.launch.rows,
                               warps=md.launch.num_warps, stages=md.launch.num_stages,
                               path="resident" if md.launch.row_fits_block else "chunks",
                               programs=md.launch.programs, registers=md.launch.registers,
                               shared_bytes=md.launch.shared_bytes,
                               resident_per_sm=md.resident_per_sm,
                               kb_in_flight_per_sm=round(md.in_flight_per_sm / 1024, 1),
                               kb_needed_per_sm=round(md.needed_per_sm / 1024, 1),
                               dram_over_ideal=round(md.dram_bytes / md.ideal_bytes, 4),
                               l2_over_ideal=round(md.cache_bytes / md.ideal_bytes, 3),
                               working_set_mib=round(md.working_set_bytes / 2**20, 1),
                               duty=md.duty, predicted_fraction=round(md.predicted_fraction, 4),
                               predicted_gbps=round(md.predicted_gbps, 1),
                               predicted_us=round(md.predicted_us, 2),
                               bytes_per_element=round(md.ideal_bytes / (m * n), 3))
                    if op.startswith("add_"):
                        apart = fused_ideal_bytes(m, n, element_size, direction, op, False)
                        row["unfused_bytes_per_element"] = round(apart / (m * n), 3)
                        row["unfused_us"] = round(apart / (md.predicted_gbps * 1e9) * 1e6, 2)
                        row["speedup"] = round(row["unfused_us"] / row["predicted_us"], 3)
                    out.append(row)
    return out


def format_fused_predictions(rows: list[dict], target: str = "sm_90") -> str:
    """Text table of ``fused_predictions`` for one target."""
    lines = [f"{'op':<15}{'dir':<4}{'N':>6}{'path':>9}{'warps':>6}{'stages':>7}"
             f"{'progs':>6}{'KB fl/SM':>9}{'DRAM/id':>8}{'L2/id':>6}{'duty':>5}"
             f"{'pred':>6}{'GB/s':>7}{'us':>8}{'B/elem':>7}{'apart':>6}"]
    for r in rows:
        if r["target"] != target:
            continue
        apart = f"{r['unfused_bytes_per_element']:>6.0f}" if "unfused_us" in r else f"{'':>6}"
        lines.append(f"{r['op']:<15}{r['direction']:<4}{r['n']:>6}{r['path']:>9}{r['warps']:>6}"
                     f"{r['stages']:>7}{r['programs']:>6}{r['kb_in_flight_per_sm']:>9.1f}"
                     f"{r['dram_over_ideal']:>8.3f}{r['l2_over_ideal']:>6.2f}{r['duty']:>5.2f}"
                     f"{r['predicted_fraction']:>6.0%}{r['predicted_gbps']:>7.0f}"
                     f"{r['predicted_us']:>8.1f}{r['bytes_per_element']:>7.1f}{apart}")
    return "\n".join(lines)


def _git_commit() -> str | None:
    import subprocess
    from pathlib import Path

    try:
        return subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True,
                              check=True, cwd=Path(__file__).resolve().parent).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return None


def main(argv=None) -> None:
    """``python -m layernorm_tutorial.roofline --table T --out P``: write the model's
    predictions for the one-source kernels (``fused_predictions`` of the compiled table
    ``T``) to ``P`` with the date, the commit and the model's assumptions, so that a later
    GPU run is compared with what was predicted before it.

    ``T`` is checked before use (a JSON object with ``versions`` and a non-empty list of
    ``rows`` of the fused kernels) and ``P`` may not be ``T``: user errors are one line,
    exit status 2; Ctrl-C prints ``interrupted``, status 130."""
    from ._cli import interruptible

    return interruptible(_main)(argv)


def _main(argv=None) -> None:
    import argparse
    import datetime
    import json

    from ._cli import (
        BOOK_DATA,
        OutputPathError,
        check_not_a_source,
        check_output_path,
        read_json_document,
        same_file,
        write_text_atomically,
    )

    parser = argparse.ArgumentParser(prog="python -m layernorm_tutorial.roofline",
                                     description=main.__doc__.split("\n\n")[0])
    parser.add_argument("--table", required=True,
                        help="fused resource table (python -m ...triton_kernels.fused_aot)")
    parser.add_argument("--out", required=True, help="JSON file to write")
    parser.add_argument("--force", action="store_true", help="replace an existing file")
    args = parser.parse_args(argv)
    if same_file(args.out, args.table):
        parser.error(f"--out {args.out}: it is the --table file, which the predictions would "
                     "replace; choose another --out")
    try:  # never another of the repository's files (an input, too), --force or not
        check_not_a_source(args.out, own=(BOOK_DATA / "kernel_fused_predictions.json",))
        out = check_output_path(args.out, force=args.force)
    except OutputPathError as err:
        parser.error(str(err))
    make = "python -m layernorm_tutorial.triton_kernels.fused_aot --out PATH"
    try:
        table = read_json_document(args.table, required={"versions": dict, "rows": list},
                                   command=make, what="fused resource table")
    except (FileNotFoundError, ValueError) as err:
        parser.error(f"--table {err}")
    if not table["rows"]:
        parser.error(f"--table {args.table}: the table has no rows; make it with {make}")
    try:
        rows = fused_predictions(table["rows"])
    except (KeyError, TypeError, AttributeError) as err:
        parser.error(f"--table {args.table}: not a table of the fused kernels "
                     f"({' '.join(str(err).strip(chr(39)).split())}); make it with {make}")
    except ImportError as err:  # the launch configurations live in the Triton kernels
        parser.error(f"--table needs the Triton kernels' launch rules: {err}")
    write_text_atomically(out, json.dumps(dict(
        command=f"python -m layernorm_tutorial.roofline --table {args.table} --out {args.out}",
        date=datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        commit=_git_commit(), table_versions=table["versions"],
        assumptions=dict(latency_ns=DEFAULT_LATENCY_NS, l2_speedup=L2_SPEEDUP,
                         unpipelined_duty=UNPIPELINED_DUTY, gpus=GPU_SPECS, m=4096,
                         dtype="bf16", note="predictions before any GPU run of these kernels"),
        rows=rows), indent=1) + "\n")
    print(format_fused_predictions(rows))
    print(f"wrote {len(rows)} predictions to {out}")


if __name__ == "__main__":
    main()
