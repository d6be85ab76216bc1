"""What the compiled kernels ask of a GPU: checks, occupancy and the chapter's tables.

The rows come from ``aot.compile_report`` (or the stored table written by
``python -m layernorm_tutorial.triton_kernels.aot``). Per-multiprocessor limits are those of
the CUDA C++ Programming Guide's table of technical specifications per compute capability
(8.0: A100, 9.0: H100): 65536 32-bit registers, at most 64 resident warps and 32 resident
blocks (Triton programs), 164 KiB (8.0) or 228 KiB (9.0) of shared memory of which 1 KiB is
reserved per block; registers are allocated per warp in units of 256.
"""

from __future__ import annotations

import math
from collections import defaultdict
from pathlib import Path

from .._cli import StoredFileError, is_book_file, read_json_document

SM_LIMITS = {
    "sm_80": dict(gpu="A100", registers=65536, max_warps=64, max_blocks=32,
                  shared_bytes=164 * 1024, reserved_shared_per_block=1024),
    "sm_90": dict(gpu="H100", registers=65536, max_warps=64, max_blocks=32,
                  shared_bytes=228 * 1024, reserved_shared_per_block=1024),
}
REGISTER_ALLOCATION_UNIT = 256  # registers per warp are rounded up to a multiple of this
MAX_REGISTERS_PER_THREAD = 255


STORED_TABLE = Path(__file__).resolve().parents[2] / "book" / "data" / "kernel_resources.json"
# What writes each table of the book (named when the file is missing or broken).
_COMMANDS = {
    "kernel_resources.json": "python -m layernorm_tutorial.triton_kernels.aot "
                             "--out book/data/kernel_resources.json",
    "kernel_fused_resources.json": "python -m layernorm_tutorial.triton_kernels.fused_aot "
                                   "--out book/data/kernel_fused_resources.json",
    "kernel_fused_predictions.json": "python -m layernorm_tutorial.roofline --table "
                                     "book/data/kernel_fused_resources.json --out "
                                     "book/data/kernel_fused_predictions.json",
}


def load_table(path: str | Path | None = None) -> dict:
    """The stored table: ``{"command", "versions", "rows"}`` (see ``aot.main``).

    ``path`` defaults to the book's ``book/data/kernel_resources.json`` in this checkout, so
    a chapter run from any working directory finds it. ``FileNotFoundError`` /
    ``ValueError``: one line naming the file and what to do, for a file that is missing, not
    JSON, not an object, without ``command`` or with no ``rows``.
    """
    path = Path(path if path is not None else STORED_TABLE)
    table = read_json_document(path, required={"command": str, "rows": list},
                               command=_COMMANDS.get(path.name), what="table of compiled kernels")
    if not table["rows"]:
        raise StoredFileError(f"{path}: the table has no rows; "
                         + ("restore it (git checkout)" if is_book_file(path)
                            else "compile it again"))
    return table


def spill_bytes(row: dict) -> int:
    """Bytes per thread moved to and from local memory because registers ran out."""
    return row["spill_store_bytes"] + row["spill_load_bytes"] + row["local_bytes"]


def problems(row: dict) -> list[str]:
    """What is wrong with one compiled configuration (empty when it is fine): register
    spills or a stack frame, local memory, or more registers than a multiprocessor has for
    the program's warps."""
    found = []
    if spill_bytes(row) or row["stack_bytes"]:
        found.append(f"spills: {row['spill_store_bytes']} B stored, {row['spill_load_bytes']} "
                     f"B loaded, {row['stack_bytes']} B stack frame, {row['local_bytes']} B "
                     "local memory per thread")
    limits = SM_LIMITS[row["target"]]
    needed = row["registers"] * 32 * row["num_warps"]
    if needed > limits["registers"] or row["registers"] > MAX_REGISTERS_PER_THREAD:
        found.append(f"{row['registers']} registers x {32 * row['num_warps']} threads = "
                     f"{needed} > {limits['registers']} in the register file")
    return found


def occupancy(registers: int, num_warps: int, shared_bytes: int, target: str) -> dict:
    """Programs (blocks) and warps resident on one multiprocessor of ``target``.

    ``programs`` is the smallest of the four limits (registers, warps, shared memory,
    blocks), ``limit`` names the binding one, ``occupancy`` = resident warps / max warps."""
    return occupancy_for_limits(registers, num_warps, shared_bytes, SM_LIMITS[target])


def occupancy_for_limits(registers: int, num_warps: int, shared_bytes: int,
                         lim: dict) -> dict:
    """``occupancy`` for explicit per-multiprocessor limits ``lim`` (the keys of
    ``SM_LIMITS``; the launcher passes those of the GPU it runs on)."""
    per_warp = math.ceil(registers * 32 / REGISTER_ALLOCATION_UNIT) * REGISTER_ALLOCATION_UNIT
    bounds = {
        "registers": lim["registers"] // (per_warp * num_warps),
        "warps": lim["max_warps"] // num_warps,
        "shared memory": lim["shared_bytes"] // (shared_bytes + lim["reserved_shared_per_block"]),
        "blocks": lim["max_blocks"],
    }
    limit = min(bounds, key=bounds.get)
    programs = bounds[limit]
    return dict(programs=programs, warps=programs * num_warps, limit=limit,
                occupancy=programs * num_warps / lim["max_warps"])


def _path_key(row: dict) -> tuple:
    return (row["kernel"], row["block_n"], row["num_warps"], row["row_fits_block"],
            row["aligned"], row.get("rows", 1), row.get("split", 1))


def worst_per_path(rows: list[dict], target: str, dtype: str) -> list[dict]:
    """One row per (kernel, BLOCK_N, warps, row path) of ``target``/``dtype``: the largest
    registers, shared memory and spills over the weight/bias variants, with occupancy."""
    groups = defaultdict(list)
    for r in rows:
        if r["target"] == target and r["dtype"] == dtype:
            groups[_path_key(r)].append(r)
    order = {"forward": 0, "backward": 1, "reduce": 2}
    out = []
    for key in sorted(groups, key=lambda k: (order[k[0]], k[1], not k[3], not k[4])):
        g = groups[key]
        regs = max(r["registers"] for r in g)
        shared = max(r["shared_bytes"] + r["static_shared_bytes"] for r in g)
        kernel, block_n, warps, fits, aligned, rows, split = key
        out.append(dict(kernel=kernel, block_n=block_n, num_warps=warps, row_fits_block=fits,
                        aligned=aligned, rows=rows, split=split, variants=len(g),
                        registers=regs,
                        shared_bytes=shared,
                        spill_bytes=max(spill_bytes(r) + r["stack_bytes"] for r in g),
                        **occupancy(regs, warps, shared, target)))
    return out


def format_resource_table(rows: list[dict], target: str, dtype: str) -> str:
    """Text table of ``worst_per_path`` for one target and dtype."""
    lim = SM_LIMITS[target]
    lines = [f"{target} ({lim['gpu']}), {dtype}: per program, worst over weight/bias variants",
             f"{'kernel':<9}{'BLOCK_N':>8}{'warps':>6}  {'path':<8}{'regs':>5}"
             f"{'shared B':>9}{'spill B':>8}{'progs/SM':>9}{'occupancy':>10}  limited by"]
    for r in worst_per_path(rows, target, dtype):
        path = (f"{r['rows']} rows" if r["rows"] > 1 else f"row/{r['split']}"
                if r["split"] > 1 else "row") if r["row_fits_block"] else "chunks"
        lines.append(f"{r['kernel']:<9}{r['block_n']:>8}{r['num_warps']:>6}  {path:<8}"
                     f"{r['registers']:>5}{r['shared_bytes']:>9}{r['spill_bytes']:>8}"
                     f"{r['programs']:>9}{r['occupancy']:>10.0%}  {r['limit']}")
    return "\n".join(lines)


def row_key(row: dict) -> tuple:
    """Identity of a compiled configuration (kernel, target, dtype and all constants)."""
    return (row["kernel"], row["target"], row["dtype"], row["block_n"], row["num_warps"],
            row["row_fits_block"], row["has_weight"], row["has_bias"], row["compute_dw"],
            row["aligned"], row["block_g"], row.get("rows", 1), row.get("split", 1))


def summary(rows: list[dict]) -> str:
    """One line per target and dtype: configurations, most registers and shared memory,
    and how many configurations have a problem (``problems``)."""
    lines = [f"{'target':<7}{'dtype':<6}{'configs':>8}{'max regs':>9}  {'(kernel, BLOCK_N)':<20}"
             f"{'max shared B':>13}{'problems':>9}"]
    keys = dict.fromkeys((r["target"], r["dtype"]) for r in rows)
    for target, dtype in keys:
        sub = [r for r in rows if r["target"] == target and r["dtype"] == dtype]
        top = max(sub, key=lambda r: r["registers"])
        shared = max(r["shared_bytes"] + r["static_shared_bytes"] for r in sub)
        where = f"({top['kernel']}, {top['block_n']})"
        lines.append(f"{target:<7}{dtype:<6}{len(sub):>8}{top['registers']:>9}  {where:<20}"
                     f"{shared:>13}{sum(bool(problems(r)) for r in sub):>9}")
    return "\n".join(lines)


def format_ptx_counts(rows: list[dict]) -> str:
    """Memory instructions in the PTX of each row (see ``aot.ptx_instruction_counts``)."""
    names = ("ld_global", "ld_global_v4", "ld_global_v2", "st_global", "st_global_v4",
             "shfl_sync", "st_shared", "ld_shared", "bar_sync", "local")
    lines = [f"{'configuration':<44}" + "".join(f"{n.replace('_', '.'):>13}" for n in names)]
    for r in rows:
        label = (f"{r['kernel']} {r['target']} {r['dtype']} BLOCK_N={r['block_n']} "
                 f"{'aligned' if r['aligned'] else 'unaligned'}")
        lines.append(f"{label:<44}" + "".join(f"{r['ptx'][n]:>13}" for n in names))
    return "\n".join(lines)
