r"""Why a fused norm kernel supports rows only up to some length: the register file, the
shared memory per block, and the chunked path that lifts the limit.

Limits of one NVIDIA multiprocessor (CUDA C++ Programming Guide, the technical
specifications per compute capability; 8.0: A100, 9.0: H100): 65536 32-bit registers,
at most 255 per thread and 1024 threads per block; shared memory per block 48 KB unless
the kernel opts in (``cudaFuncSetAttribute(..., cudaFuncAttributeMaxDynamicSharedMemorySize,
...)``), up to 163 KB (8.0) or 227 KB (9.0).

``values_per_thread(hidden, warps)``
    Elements of a row that each thread holds when ``warps`` warps keep the row in
    registers: ``hidden / (32 warps)``, times the number of row-sized arrays kept (``x``,
    ``gamma``, ``beta``: 3), at 4 bytes each, is the register floor of a row-resident kernel.
``register_file_share(registers, warps)``
    Registers of one block (per-warp allocation rounded up to 256) over the 65536 of a
    multiprocessor.
``stored_forward_registers(target, dtype)``
    The package's own row-resident forward kernels as compiled for ``target``
    (``book/data/kernel_resources.json``): ``BLOCK_N``, warps, registers per thread, spills.
``row_cache_shared_bytes(d, elem_bytes)``
    Shared memory of a fused add + RMSNorm kernel that keeps the float32 sum ``x + r`` of
    its row in shared memory (FlashInfer's ``FusedAddRMSNorm`` launcher, traced in
    ``include/flashinfer/norm.cuh``): ``4 (ceil(warps / 4) 4 + d)`` bytes with
    ``warps = ceil(min(1024, d / vec) / 32)``, ``vec = gcd(16 / elem_bytes, d)``.
``chunked_row_norm(x, chunk, kind, eps)``
    The length-independent path: the row is walked in chunks of ``chunk`` values, each
    chunk's (count, mean, M2) merged by Chan et al.'s formula (a second read of the row
    then normalizes it), so registers no longer grow with the row; the price is one more
    read per element.
"""

from __future__ import annotations

import math

import numpy as np

from layernorm_tutorial import variance_algorithms as va
from layernorm_tutorial._cli import BOOK_DATA, read_json_document

__all__ = ["REGISTERS_PER_SM", "MAX_REGISTERS_PER_THREAD", "MAX_THREADS_PER_BLOCK",
           "DEFAULT_SHARED_PER_BLOCK", "OPT_IN_SHARED_PER_BLOCK", "values_per_thread",
           "register_file_share", "stored_forward_registers", "row_cache_shared_bytes",
           "chunked_row_norm", "bytes_per_element"]

REGISTERS_PER_SM = 65536
MAX_REGISTERS_PER_THREAD = 255
MAX_THREADS_PER_BLOCK = 1024
REGISTER_ALLOCATION_UNIT = 256          # registers per warp are allocated in these units
DEFAULT_SHARED_PER_BLOCK = 48 * 1024
OPT_IN_SHARED_PER_BLOCK = {"sm_80": 163 * 1024, "sm_90": 227 * 1024}
WARP = 32
RESOURCE_TABLE = "kernel_resources.json"


def values_per_thread(hidden: int, warps: int) -> float:
    """Elements of one row held by each of the ``32 warps`` threads that share it."""
    if hidden < 1 or warps < 1:
        raise ValueError(f"hidden and warps must be >= 1, got {hidden}, {warps}")
    return hidden / (WARP * warps)


def register_file_share(registers: int, warps: int) -> float:
    """Share of a multiprocessor's 65536 registers that one block of ``warps`` warps at
    ``registers`` per thread takes (per-warp allocation rounded up to 256)."""
    if not 1 <= registers <= MAX_REGISTERS_PER_THREAD:
        raise ValueError(f"registers must be in [1, {MAX_REGISTERS_PER_THREAD}], got "
                         f"{registers}")
    per_warp = math.ceil(registers * WARP / REGISTER_ALLOCATION_UNIT) * REGISTER_ALLOCATION_UNIT
    return per_warp * warps / REGISTERS_PER_SM


def stored_forward_registers(target: str = "sm_90", dtype: str = "fp32") -> list[dict]:
    """The package's forward kernels with the whole row in one block, as compiled for
    ``target`` in ``dtype`` (read from ``book/data/kernel_resources.json``), weight and
    bias on, aligned rows, one row per program: one dict per ``BLOCK_N`` with ``block_n``,
    ``warps``, ``registers`` (per thread), ``spill_bytes`` and ``values`` (row values per
    thread)."""
    table = read_json_document(
        BOOK_DATA / RESOURCE_TABLE, required={"command": str, "rows": list},
        command="python -m layernorm_tutorial.triton_kernels.aot --out "
                "book/data/kernel_resources.json", what="table of compiled kernels")
    out = []
    for r in table["rows"]:
        if (r["target"], r["dtype"], r["kernel"]) != (target, dtype, "forward"):
            continue
        if not (r["row_fits_block"] and r["has_weight"] and r["has_bias"] and r["aligned"]
                and r.get("rows", 1) == 1 and r.get("split", 1) == 1):
            continue
        out.append(dict(block_n=r["block_n"], warps=r["num_warps"], registers=r["registers"],
                        spill_bytes=r["spill_store_bytes"] + r["spill_load_bytes"]
                        + r["stack_bytes"] + r["local_bytes"],
                        values=values_per_thread(r["block_n"], r["num_warps"])))
    if not out:
        raise ValueError(f"{RESOURCE_TABLE}: no row-resident forward kernel for "
                         f"{target}/{dtype}")
    return sorted(out, key=lambda r: r["block_n"])


def row_cache_shared_bytes(d: int, elem_bytes: int = 2) -> int:
    """Dynamic shared memory per block of a fused add + RMSNorm kernel that caches the
    float32 row sum in shared memory, with FlashInfer's launch arithmetic: ``vec =
    gcd(16 / elem_bytes, d)``, ``threads = min(1024, d / vec)``, ``warps = ceil(threads /
    32)``, bytes ``= 4 (ceil(warps / 4) 4 + d)`` (one float per warp, rounded to 4, then
    the row)."""
    if d < 1 or elem_bytes not in (1, 2, 4):
        raise ValueError(f"d must be >= 1 and elem_bytes 1, 2 or 4, got {d}, {elem_bytes}")
    vec = math.gcd(16 // elem_bytes, d)
    warps = math.ceil(min(MAX_THREADS_PER_BLOCK, d // vec) / WARP)
    return 4 * (math.ceil(warps / 4) * 4 + d)


def chunked_row_norm(x, chunk: int, kind: str = "layer", eps: float = 1e-5) -> np.ndarray:
    """LayerNorm or RMSNorm (no affine) of each row of ``x`` ``(rows, H)`` walked in
    chunks of ``chunk`` values: pass 1 merges each chunk's (count, mean, M2), or its sum
    of squares for RMSNorm, into the row's running state (Chan et al.); pass 2 reads the
    row again and normalizes it chunk by chunk. Arithmetic in ``x``'s dtype."""
    x = np.asarray(x)
    if x.ndim != 2 or x.shape[1] == 0 or not np.issubdtype(x.dtype, np.floating):
        raise ValueError(f"x must be a floating (rows, H) array with H > 0, got "
                         f"{x.dtype} {x.shape}")
    if chunk < 1:
        raise ValueError(f"chunk must be >= 1, got {chunk}")
    if kind not in ("layer", "rms"):
        raise ValueError(f"kind must be 'layer' or 'rms', got {kind!r}")
    hidden = x.shape[1]
    starts = range(0, hidden, chunk)
    if kind == "layer":
        state = va.WelfordState(0, np.zeros(x.shape[0], x.dtype), np.zeros(x.shape[0], x.dtype))
        for s in starts:                           # pass 1: statistics only
            part = x[:, s:s + chunk]
            mean = part.mean(axis=1)
            m2 = ((part - mean[:, None]) ** 2).sum(axis=1)
            state = va.welford_merge(state, va.WelfordState(part.shape[1], mean, m2))
        shift, mean_square = state.mean, state.m2 / hidden
    else:
        total = np.zeros(x.shape[0], x.dtype)
        for s in starts:
            total = total + (x[:, s:s + chunk] ** 2).sum(axis=1)
        shift, mean_square = np.zeros(x.shape[0], x.dtype), total / hidden
    rstd = 1 / np.sqrt(mean_square + eps)
    y = np.empty_like(x)
    for s in starts:                               # pass 2: read again, normalize, write
        y[:, s:s + chunk] = (x[:, s:s + chunk] - shift[:, None]) * rstd[:, None]
    return y


def bytes_per_element(elem_bytes: int, reads: int) -> int:
    """DRAM bytes per element of a norm's forward that reads the row ``reads`` times and
    writes it once (the row-resident kernel: 1 read; the chunked one: 2)."""
    if reads < 1:
        raise ValueError(f"reads must be >= 1, got {reads}")
    return (reads + 1) * elem_bytes
