"""Ahead-of-time compile of the one-source norm kernels (``fused_kernels``) for sm_80/sm_90.

The same machinery as ``aot`` (``aot.compile_in_subprocess`` with
``aot.compile_function_report`` jobs: registers, shared memory, spills, PTX counts), over
the launches that ``fused.fused_launch_config`` can choose. The stored table::

    python -m layernorm_tutorial.triton_kernels.fused_aot \\
        --out book/data/kernel_fused_resources.json

Which variants: the compile-time flags multiply the configurations (forward: RMS or LN x
residual x weight x bias; backward: x dres x dw x db) and a full grid over three dtypes and
two targets is over a thousand compiles, hours on a 2-core machine. The table therefore
holds, for every dtype, target and launch the rule can choose (every ``BLOCK_N``, warps,
rows per tile, stages, both row paths), the *heaviest* variant of each norm: every tensor
flag on (LayerNorm: residual, weight, bias; RMSNorm: residual, weight; backward: the
residual's gradient, dgamma and dbeta). A flag removes loads, stores and accumulators, never
adds them; ``--variants all`` compiles every flag combination instead (and the test suite
compiles the lighter variants of the largest blocks to check that claim). The one-step
reduction of the partial rows is compiled for the partial-row counts of an A100 (108 -> 128
rows) and an H100 (132 -> 256 rows).
"""

from __future__ import annotations

import argparse
import json
import time
from concurrent.futures import ThreadPoolExecutor

from .._cli import (
    BOOK_DATA,
    OutputPathError,
    check_not_a_source,
    check_output_path,
    interruptible,
    positive_int,
    read_json_document,
    write_text_atomically,
)
from . import aot, fused

MODULE = f"{__package__}.fused_kernels"
FORWARD, BACKWARD, REDUCE = (f"{MODULE}:fused_norm_fwd_kernel", f"{MODULE}:fused_norm_bwd_kernel",
                             f"{MODULE}:fused_sum_partials_kernel")
ELEMENT_SIZE = {"fp32": 4, "fp16": 2, "bf16": 2}
PARTIAL_ROWS = {"sm_80": 108, "sm_90": 132}  # one partial row per multiprocessor


def launches(kernel: str, dtype: str) -> list[fused.FusedConfig]:
    """Every ``FusedConfig`` the rule picks for rows of 1 ... 64K elements of ``dtype``
    (it depends on ``n`` only through ``next_power_of_2(n)`` and the cap)."""
    lengths = [2 ** k for k in range(17)] + [65536 + 1]
    configs = {fused.fused_launch_config(n, kernel, ELEMENT_SIZE[dtype]) for n in lengths}
    return sorted(configs, key=lambda c: (not c.row_fits_block, c.block_n))


def _flags(kernel: str, variants: str) -> list[dict]:
    if kernel == "forward":
        every = [dict(IS_RMS=rms, HAS_RESIDUAL=res, HAS_WEIGHT=w, HAS_BIAS=b)
                 for rms in (False, True) for res in (True, False) for w in (True, False)
                 for b in ((False,) if rms else (True, False))]
    else:
        every = [dict(IS_RMS=rms, HAS_DRES=res, HAS_WEIGHT=w, COMPUTE_DW=dw, COMPUTE_DB=db)
                 for rms in (False, True) for res in (True, False) for w in (True, False)
                 for dw in ((True, False) if w else (False,))
                 for db in ((False,) if rms else (True, False))]
    return every if variants == "all" else every[:1] + [f for f in every if f["IS_RMS"]][:1]


def _types(kernel: str, dtype: str, aligned: bool) -> dict:
    t, f32, i = "*" + dtype, "*fp32", "i32"
    if kernel == "forward":
        return dict(X=t, R=t, Y=t, S=t, W=t, B=t, Mean=f32, Rstd=f32, stride_x=i,
                    stride_r=i, stride_y=i, stride_s=i, M=i, N=i, eps="fp32")
    if kernel == "backward":
        return dict(DX=t, DY=t, DS=t, X=t, W=t, Mean=f32, Rstd=f32, Partial=f32,
                    stride_dx=i, stride_dy=i, stride_ds=i, stride_x=i, M=i, N=i)
    return dict(Partial=f32, OutW=t, OutB=t, G=i, N=i)


def _label(kernel: str, constants: dict, num_warps: int) -> str:
    if kernel == "reduce":
        return (f"fused reduce BLOCK_G={constants['BLOCK_G']} BLOCK_N={constants['BLOCK_N']} "
                f"w={num_warps}")
    path = (f"{constants['ROWS']} rows" if constants["ROWS"] > 1 else "row") \
        if constants["ROW_FITS_BLOCK"] else "chunks"
    flags = "+".join(name for name, key in (("rms" if constants["IS_RMS"] else "ln", None),
                                            ("res", "HAS_RESIDUAL"), ("dres", "HAS_DRES"),
                                            ("w", "HAS_WEIGHT"), ("dw", "COMPUTE_DW"),
                                            ("b", "HAS_BIAS"), ("db", "COMPUTE_DB"))
                     if key is None or constants.get(key))
    return (f"fused {kernel} BLOCK_N={constants['BLOCK_N']} w={num_warps} "
            f"stages={constants['NUM_STAGES']} {path} {flags}")


def jobs(variants: str = "heaviest", dtypes=aot.DTYPES, targets=tuple(aot.TARGETS)) -> list[dict]:
    """``aot.compile_function_report`` keyword arguments for the table (see the module
    docstring), each with ``kernel``, ``dtype`` and ``constants`` kept for the row."""
    out = []
    for dtype in dtypes:
        for kernel, function in (("forward", FORWARD), ("backward", BACKWARD)):
            for cfg in launches(kernel, dtype):
                for flags in _flags(kernel, variants):
                    constants = dict(**flags, BLOCK_N=cfg.block_n,
                                     ROWS=cfg.rows,
                                     ROW_FITS_BLOCK=cfg.row_fits_block,
                                     NUM_STAGES=cfg.num_stages)
                    for target in targets:
                        out.append(dict(function=function, types=_types(kernel, dtype, True),
                                        constants=constants, target=target,
                                        num_warps=cfg.num_warps, aligned=cfg.block_n >= 16,
                                        label=_label(kernel, constants, cfg.num_warps),
                                        kernel=kernel, dtype=dtype))
        for target in targets:
            g = PARTIAL_ROWS[target]
            constants = dict(COMPUTE_DW=True, COMPUTE_DB=True,
                             BLOCK_G=1 << (g - 1).bit_length(),
                             BLOCK_N=fused.fused_reduce_block_n(g, 65536))
            out.append(dict(function=REDUCE, types=_types("reduce", dtype, True),
                            constants=constants, target=target, num_warps=4, aligned=True,
                            label=_label("reduce", constants, 4), kernel="reduce",
                            dtype=dtype))
    return out


def _job_key(job: dict) -> tuple:
    """A job (or a row compiled from it): kernel, dtype, target, warps and constants."""
    return (job["kernel"], job["dtype"], job["target"], job["num_warps"],
            tuple(sorted(job["constants"].items())))


def compile_jobs(job_list: list[dict], workers: int = 1, cache_dir=None) -> list[dict]:
    """Reports for ``job_list`` in order (``workers`` compiling processes), each with the
    job's ``kernel``, ``dtype`` and ``constants``."""
    keep = ("kernel", "dtype", "constants")
    calls = [{k: v for k, v in j.items() if k not in ("kernel", "dtype")} for j in job_list]
    shares = [calls[i::workers] for i in range(workers)]
    with ThreadPoolExecutor(workers) as pool:
        parts = list(pool.map(lambda s: aot.compile_in_subprocess(s, cache_dir=cache_dir),
                              shares))
    rows = [None] * len(calls)
    for i, part in enumerate(parts):
        rows[i::workers] = part
    return [dict(**{k: j[k] for k in keep}, **r) for j, r in zip(job_list, rows, strict=True)]


def _reusable(parser: argparse.ArgumentParser, out) -> dict:
    """The existing table at ``out`` for ``--reuse``, its shape checked (``parser.error``,
    one line, for a broken one) and its rows keyed by :func:`_job_key`."""
    try:
        table = read_json_document(out, required={"versions": dict, "rows": list},
                                   command="python -m layernorm_tutorial.triton_kernels."
                                           "fused_aot --force (without --reuse)",
                                   what="table of compiled kernels")
        keyed = {_job_key(r): r for r in table["rows"]}
    except (ValueError, KeyError, TypeError, AttributeError) as err:
        text = err if isinstance(err, ValueError) else (
            f"{out}: a row lacks {err} (not a fused_aot table); compile it again with --force "
            "(without --reuse)")
        parser.error(f"--reuse {text}")
    return {"table": table, "rows": keyed}


@interruptible
def main(argv=None) -> None:
    """Compile the table and write it (the output path checked first, as ``aot.main``).

    With ``--reuse``, the existing table is checked first (one line and exit status 2 for a
    broken one); when every job is reused and the table would not change, it is left as it
    was (its ``command`` and ``seconds`` describe the run that compiled it)."""
    parser = argparse.ArgumentParser(prog="python -m layernorm_tutorial.triton_kernels.fused_aot",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", required=True, help="JSON file to write the table to")
    parser.add_argument("--force", action="store_true", help="replace an existing file")
    parser.add_argument("--jobs", type=positive_int, default=1,
                        help="compiling processes in parallel (default 1)")
    parser.add_argument("--variants", choices=("heaviest", "all"), default="heaviest",
                        help="flag combinations per launch (default: the heaviest of each norm)")
    parser.add_argument("--reuse", action="store_true",
                        help="keep the rows of the existing --out table that the same triton and "
                             "ptxas compiled for a job still in the grid; compile the rest")
    args = parser.parse_args(argv)
    try:  # never another of the repository's files, --force or not
        check_not_a_source(args.out, own=(BOOK_DATA / "kernel_fused_resources.json",))
        out = check_output_path(args.out, force=args.force or args.reuse)
    except OutputPathError as err:
        parser.error(str(err))
    job_list = jobs(args.variants)
    existing = _reusable(parser, out) if args.reuse and out.exists() else None
    old = {}
    if existing is not None and existing["table"]["versions"] == aot.versions():
        old = existing["rows"]
    todo = [j for j in job_list if _job_key(j) not in old]
    start = time.perf_counter()
    fresh = iter(compile_jobs(todo, args.jobs) if todo else [])
    rows = [old[_job_key(j)] if _job_key(j) in old else next(fresh) for j in job_list]
    seconds = time.perf_counter() - start
    print(f"compiled {len(todo)}, reused {len(job_list) - len(todo)}")
    if not todo and old and rows == existing["table"]["rows"] \
            and existing["table"].get("variants") == args.variants:
        print(f"nothing to compile: {out} left as it was ({len(rows)} configurations)")
        return
    command = ("python -m layernorm_tutorial.triton_kernels.fused_aot --out " + args.out
               + ("" if args.variants == "heaviest" else " --variants all"))
    write_text_atomically(out, json.dumps(dict(
        command=command, variants=args.variants, seconds=round(seconds, 1),
        compiled=len(todo), reused=len(job_list) - len(todo),
        versions=aot.versions(), rows=rows), indent=1) + "\n")
    print(f"wrote {len(rows)} compiled configurations to {out} in {seconds:.0f} s")


if __name__ == "__main__":
    main()
