"""Compile the fused LayerNorm's kernels for NVIDIA GPUs ahead of time, on a machine without one.

Triton's interpreter runs a kernel's logic on the CPU, but it accepts code that the GPU
compiler rejects or compiles badly (spilling registers to memory, for example). Triton can
compile for a GPU that is not there::

    triton.compile(ASTSource(fn=kernel, signature=..., constexprs=..., attrs=...),
                   target=GPUTarget("cuda", 90, 32), options={"num_warps": 16})

returns PTX and a cubin. For each compiled kernel ``compile_report`` records what the GPU
would run: registers per thread, shared memory and local memory per program (from
``cuobjdump -res-usage`` on Triton's cubin), the stack frame and the bytes of register
spills (from ``ptxas -v`` on the same PTX with Triton's flags), and a count of the memory
instructions in the PTX (vector loads, warp shuffles, shared-memory traffic).

``launch_configs`` lists every configuration the launchers in ``ops`` can choose, read from
``ops.launch_config`` (nothing is copied). The signature mirrors Triton's JIT specialization:
tensors are 16-byte aligned (torch allocates them so) and, for an *aligned* row
(``N`` and the row strides multiples of 16), so are the integer arguments. Not covered: the
JIT turns an integer argument equal to 1 (``N = 1``, ``M = 1``) into a constant, which only
simplifies the kernel.

The kernels must be defined for the compiler, not the interpreter, which the package
switches on when it is imported without a GPU. ``compile_in_subprocess`` therefore compiles
in a fresh Python process with ``LAYERNORM_TRITON_COMPILE_ONLY=1`` and no
``TRITON_INTERPRET``. The book's stored table is produced by::

    python -m layernorm_tutorial.triton_kernels.aot --out book/data/kernel_resources.json

The one-source kernels of ``fused`` (RMSNorm, fused add + norm) have their own table,
``fused_aot`` (``book/data/kernel_fused_resources.json``), built with the same functions.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import re
import subprocess
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from .._cli import (
    BOOK_DATA,
    OutputPathError,
    check_not_a_source,
    check_output_path,
    interruptible,
    positive_int,
    write_text_atomically,
)
from . import INTERPRETED, ops
from ._interpreter import COMPILE_ONLY_FLAG

KERNELS = ("forward", "backward", "reduce")
TARGETS = {"sm_80": 80, "sm_90": 90}  # A100, H100
DTYPES = ("fp32", "fp16", "bf16")
_KERNEL_NAMES = {"forward": "layer_norm_fwd_kernel", "backward": "layer_norm_bwd_kernel",
                 "reduce": "sum_partials_kernel"}


@dataclass(frozen=True)
class Config:
    """One launch configuration of one kernel (the compile-time constants and warps).

    ``has_bias`` is ``HAS_BIAS`` for the forward and ``COMPUTE_DB`` for the backward;
    ``compute_dw`` is the backward's ``COMPUTE_DW``. ``aligned``: ``N`` and the strides are
    multiples of 16, so Triton's JIT marks them divisible by 16 (rows of 1000 are not).
    ``block_g`` is the reduction's ``BLOCK_G``; ``rows`` the forward's and backward's ``ROWS``
    (rows per program step). For the reduction, ``compute_dw``/``has_bias`` are its
    ``COMPUTE_DW``/``COMPUTE_DB``.
    """

    kernel: str
    block_n: int
    num_warps: int
    row_fits_block: bool = True
    has_weight: bool = True
    has_bias: bool = True
    compute_dw: bool = False
    aligned: bool = True
    block_g: int = 0
    rows: int = 1
    split: int = 1

    def label(self) -> str:
        """Short text for tables, e.g. ``BLOCK_N=8192 w=8 row w+b``."""
        if self.kernel == "reduce":
            return f"BLOCK_G={self.block_g} BLOCK_N={self.block_n} w={self.num_warps}"
        path = (f"{self.rows} rows" if self.rows > 1 else
                f"row/{self.split}" if self.split > 1 else "row") if self.row_fits_block \
            else "chunks"
        flags = "+".join(f for f, on in (("w", self.has_weight), ("dw", self.compute_dw),
                                          ("b", self.has_bias)) if on) or "none"
        tail = "" if self.aligned else " unaligned"
        return f"BLOCK_N={self.block_n} w={self.num_warps} {path} {flags}{tail}"


ELEMENT_SIZE = {"fp32": 4, "fp16": 2, "bf16": 2}


def launch_triples(kernel: str, dtype: str = "fp32") -> list[tuple[int, int, int, int, bool]]:
    """Every ``(BLOCK_N, num_warps, ROWS, SPLIT, ROW_FITS_BLOCK)`` that ``ops`` can choose
    for ``kernel`` on ``dtype`` rows.

    ``ops.launch_config(n, cap, kernel, size)`` depends on ``n`` only through
    ``next_power_of_2(n)`` and ``n <= cap``: powers of two up to the cap and one row longer
    than the cap cover it."""
    cap = {"forward": ops.MAX_BLOCK_N, "backward": ops.MAX_BLOCK_N_BACKWARD}[kernel]
    lengths = [2 ** k for k in range(cap.bit_length())] + [cap + 1]
    return sorted({ops.launch_config(n, cap, kernel, ELEMENT_SIZE[dtype]) for n in lengths},
                  key=lambda t: (t[0], not t[4]))


def launch_configs(kernel: str, dtype: str = "fp32") -> list[Config]:
    """All configurations of ``kernel`` that the launchers in ``ops`` can pick on a GPU for
    ``dtype`` rows.

    Forward: every block/warps/rows choice, both row paths, with and without weight and
    bias. Backward: the same (and the split of the longest rows) with every
    (HAS_WEIGHT, COMPUTE_DW, COMPUTE_DB) the autograd function can ask for. Reduction: every
    column width ``ops.reduce_block_n`` can pick, with dgamma and dbeta, or one of them.
    Rows are aligned when they can be (``N >= 16``)."""
    if kernel == "reduce":
        return [Config("reduce", block_n, ops.REDUCE_NUM_WARPS, block_g=ops.REDUCE_BLOCK_G,
                       has_weight=dw, compute_dw=dw, has_bias=db)
                for block_n in ops.REDUCE_BLOCK_NS
                for dw, db in ((True, True), (True, False), (False, True))]
    if kernel == "forward":
        flags = [dict(has_weight=w, has_bias=b) for w in (True, False) for b in (True, False)]
    elif kernel == "backward":
        flags = [dict(has_weight=w, compute_dw=dw, has_bias=db)
                 for w in (True, False) for dw in ((True, False) if w else (False,))
                 for db in (True, False)]
    else:
        raise ValueError(f"kernel: expected one of {KERNELS}, got {kernel!r}")
    return [Config(kernel, block_n, warps, fits, aligned=block_n >= 16,
                   rows=rows if fits else 1, split=split if fits else 1, **f)
            for block_n, warps, rows, split, fits in launch_triples(kernel, dtype)
            for f in flags]


def _arg_types(kernel: str, dtype: str, config: Config) -> tuple[dict, dict]:
    """Triton types of the runtime arguments, and the compile-time constants, by name."""
    t, f32 = "*" + dtype, "*fp32"
    if kernel == "forward":
        types = dict(X=t, Y=t, W=t, B=t, Mean=f32, Rstd=f32, stride_x="i32", stride_y="i32",
                     M="i32", N="i32", eps="fp32")
        constants = dict(HAS_WEIGHT=config.has_weight, HAS_BIAS=config.has_bias,
                         BLOCK_N=config.block_n, ROWS=config.rows,
                         ROW_FITS_BLOCK=config.row_fits_block)
    elif kernel == "backward":
        types = dict(DX=t, DY=t, X=t, W=t, Mean=f32, Rstd=f32, Partial=f32,
                     stride_x="i32", stride_dy="i32", stride_dx="i32", M="i32", N="i32")
        constants = dict(HAS_WEIGHT=config.has_weight, COMPUTE_DW=config.compute_dw,
                         COMPUTE_DB=config.has_bias, BLOCK_N=config.block_n, ROWS=config.rows,
                         SPLIT=config.split, ROW_FITS_BLOCK=config.row_fits_block)
    else:
        types = dict(Partial=f32, OutW=t, OutB=t, G="i32", N="i32")
        constants = dict(COMPUTE_DW=config.compute_dw, COMPUTE_DB=config.has_bias,
                         BLOCK_G=config.block_g, BLOCK_N=config.block_n)
    return types, constants


def _kernel(kernel: str):
    from . import kernels

    return getattr(kernels, _KERNEL_NAMES[kernel])


def _tool(name: str) -> str:
    import triton

    return str(Path(triton.__file__).parent / "backends" / "nvidia" / "bin" / name)


def _ptxas_path(capability: int) -> str:
    from triton.backends.nvidia.compiler import get_ptxas

    return get_ptxas(capability).path


def _ptxas_spills(ptx: str, capability: int) -> dict:
    """``ptxas -v`` (Triton's flags) on ``ptx``: stack frame and spill bytes per thread."""
    from triton.backends.nvidia.compiler import sm_arch_from_capability

    with tempfile.TemporaryDirectory() as tmp:
        source = Path(tmp) / "kernel.ptx"
        source.write_text(ptx)
        result = subprocess.run(
            [_ptxas_path(capability), "-lineinfo", "-v", "--regAllocOptLevel=2",
             f"--gpu-name={sm_arch_from_capability(capability)}", str(source),
             "-o", str(source.with_suffix(".o"))],
            capture_output=True, text=True, check=True)
    log = result.stderr
    stack = re.search(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill "
                      r"loads", log)
    if stack is None:
        raise RuntimeError(f"unexpected ptxas -v output:\n{log}")
    return dict(stack_bytes=int(stack[1]), spill_store_bytes=int(stack[2]),
                spill_load_bytes=int(stack[3]))


def _cuobjdump_usage(cubin: bytes) -> dict:
    """``cuobjdump -res-usage``: registers per thread; static shared, local, stack bytes."""
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "kernel.cubin"
        path.write_bytes(cubin)
        out = subprocess.run([_tool("cuobjdump"), "-res-usage", str(path)],
                             capture_output=True, text=True, check=True).stdout
    fields = dict(re.findall(r"\b(REG|STACK|SHARED|LOCAL):(\d+)", out))
    if len(fields) != 4:
        raise RuntimeError(f"unexpected cuobjdump -res-usage output:\n{out}")
    return dict(registers=int(fields["REG"]), static_shared_bytes=int(fields["SHARED"]),
                local_bytes=int(fields["LOCAL"]), cuobjdump_stack_bytes=int(fields["STACK"]))


_PTX_PATTERNS = {
    "ld_global_v4": r"\bld\.global(?:\.\w+)*\.v4\b",
    "ld_global_v2": r"\bld\.global(?:\.\w+)*\.v2\b",
    "ld_global": r"\bld\.global\b",
    "st_global_v4": r"\bst\.global(?:\.\w+)*\.v4\b",
    "st_global_v2": r"\bst\.global(?:\.\w+)*\.v2\b",
    "st_global": r"\bst\.global\b",
    "shfl_sync": r"\bshfl\.sync\b",
    "st_shared": r"\bst\.shared\b",
    "ld_shared": r"\bld\.shared\b",
    "bar_sync": r"\bbar\.sync\b|\bbarrier\.sync\b",
    "local": r"\b(?:ld|st)\.local\b",
}


def ptx_instruction_counts(ptx: str) -> dict:
    """Static counts of memory instructions in ``ptx``.

    ``ld_global`` and ``st_global`` count every global load/store; ``*_v4``/``*_v2`` the
    vector ones among them (4 or 2 registers moved by one instruction, 16 or 8 bytes for
    32-bit words). ``shfl_sync`` are warp shuffles (reductions inside a warp, in registers),
    ``st_shared``/``ld_shared``/``bar_sync`` the exchange between warps through shared
    memory, ``local`` loads and stores to local memory (spills)."""
    body = "\n".join(line.split("//")[0] for line in ptx.splitlines())
    return {name: len(re.findall(pattern, body)) for name, pattern in _PTX_PATTERNS.items()}


def _require_compile_mode() -> None:
    if INTERPRETED:
        raise RuntimeError(
            "The kernels were defined for Triton's CPU interpreter in this process, so they "
            "cannot be compiled for a GPU here: use compile_in_subprocess, or run with "
            f"{COMPILE_ONLY_FLAG}=1 and without TRITON_INTERPRET.")


def _compile(fn, types: dict, constants: dict, aligned: bool, target: str, num_warps: int):
    """``triton.compile`` of ``fn`` with runtime argument ``types`` and ``constants`` by name,
    specialized as Triton's JIT would for 16-byte aligned tensors (and, when ``aligned``,
    integer arguments divisible by 16)."""
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    _require_compile_mode()
    if target not in TARGETS:
        raise ValueError(f"target: expected one of {list(TARGETS)}, got {target!r}")
    signature = {name: types.get(name, "constexpr") for name in fn.arg_names}
    divisible = [i for i, name in enumerate(fn.arg_names) if types.get(name, "").startswith("*")
                 or (aligned and types.get(name) in ("i32", "i64"))]
    attrs = {(i,): [["tt.divisibility", 16]] for i in divisible}
    source = ASTSource(fn=fn, signature=signature, constexprs=constants, attrs=attrs)
    return triton.compile(source, target=GPUTarget("cuda", TARGETS[target], 32),
                          options={"num_warps": num_warps})


def compile_kernel(kernel: str, target: str, dtype: str, config: Config):
    """``triton.compile`` of one kernel configuration for ``target`` ("sm_80", "sm_90")."""
    if dtype not in DTYPES or config.kernel != kernel:
        raise ValueError(f"expected dtype in {DTYPES} and a {kernel} config, got {dtype!r} "
                         f"and a {config.kernel!r} config")
    types, constants = _arg_types(kernel, dtype, config)
    return _compile(_kernel(kernel), types, constants, config.aligned, target,
                    config.num_warps)


def _resources(compiled, target: str) -> dict:
    return dict(**_cuobjdump_usage(compiled.asm["cubin"]),
                shared_bytes=int(compiled.metadata.shared),
                **_ptxas_spills(compiled.asm["ptx"], TARGETS[target]),
                ptx=ptx_instruction_counts(compiled.asm["ptx"]))


def compile_report(kernel: str, target: str, dtype: str, config: Config) -> dict:
    """Compile one configuration and return its resources (one row of the table).

    Keys: the configuration, ``registers`` (per thread), ``shared_bytes`` (per program,
    what Triton's launcher reserves: scratch for reductions and layout changes),
    ``static_shared_bytes``, ``local_bytes``, ``stack_bytes``, ``spill_store_bytes``,
    ``spill_load_bytes`` (per thread), ``ptx`` (``ptx_instruction_counts``). Must run in a
    process where the kernels are defined for the compiler (see ``compile_in_subprocess``).
    """
    compiled = compile_kernel(kernel, target, dtype, config)
    return dict(target=target, dtype=dtype, **dataclasses.asdict(config),
                **_resources(compiled, target))


def compile_function_report(function: str, types: dict, constants: dict, target: str,
                            num_warps: int, aligned: bool = True, label: str = "") -> dict:
    """Resources of any ``@triton.jit`` kernel, named ``"module:name"`` (a peer's, say):
    ``types`` of its runtime arguments and ``constants`` by name, as in ``compile_report``.
    Must run in compile mode, like ``compile_report``."""
    import importlib

    module, name = function.split(":")
    fn = getattr(importlib.import_module(module), name)
    compiled = _compile(fn, types, constants, aligned, target, num_warps)
    return dict(function=function, label=label, target=target, num_warps=num_warps,
                **_resources(compiled, target))


def full_grid() -> list[tuple[str, str, str, Config]]:
    """Every (kernel, target, dtype, config) the launchers can produce."""
    return [(c.kernel, target, dtype, c) for kernel in KERNELS for dtype in DTYPES
            for c in launch_configs(kernel, dtype) for target in TARGETS]


def compile_in_subprocess(jobs, *, cache_dir: str | os.PathLike | None = None,
                          timeout: float | None = None) -> list[dict]:
    """Reports for ``jobs``, in order, computed in a fresh Python process that defines the
    kernels for Triton's compiler.

    A job is ``(kernel, target, dtype, config)`` (``compile_report``) or a dict of the
    keyword arguments of ``compile_function_report``. ``cache_dir`` becomes that process's
    ``TRITON_CACHE_DIR`` (default: Triton's own). ``timeout`` (seconds) defaults to 30 per
    job, at least 1800: a busy shared CPU can take many seconds per configuration."""
    timeout = timeout if timeout is not None else max(1800.0, 30.0 * len(jobs))
    jobs = [job if isinstance(job, dict) else
            dict(kernel=job[0], target=job[1], dtype=job[2], config=dataclasses.asdict(job[3]))
            for job in jobs]
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env[COMPILE_ONLY_FLAG] = "1"
    env.setdefault("TRITON_DEFAULT_FP_FUSION", "1")  # Triton 3.9's default, stated
    if cache_dir is not None:
        env["TRITON_CACHE_DIR"] = str(cache_dir)
    with tempfile.TemporaryDirectory() as tmp:
        request, answer = Path(tmp) / "jobs.json", Path(tmp) / "reports.json"
        request.write_text(json.dumps(jobs))
        code = (f"from {__package__} import aot; "
                f"aot._compile_file({str(request)!r}, {str(answer)!r})")
        result = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                                text=True, timeout=timeout)
        if result.returncode != 0:
            raise RuntimeError(f"ahead-of-time compilation failed:\n{result.stderr[-4000:]}")
        return json.loads(answer.read_text())


def _compile_file(request: str, answer: str) -> None:
    reports = []
    for job in json.loads(Path(request).read_text()):
        if "function" in job:
            reports.append(compile_function_report(**job))
        else:
            reports.append(compile_report(job["kernel"], job["target"], job["dtype"],
                                          Config(**job["config"])))
    Path(answer).write_text(json.dumps(reports))


def versions() -> dict:
    """Triton and ptxas versions: the compiled numbers are deterministic for these."""
    import triton

    def ptxas_version(capability):
        out = subprocess.run([_ptxas_path(capability), "--version"], capture_output=True,
                             text=True, check=True).stdout
        return out.strip().splitlines()[-1]

    return dict(triton=triton.__version__,
                ptxas={t: ptxas_version(c) for t, c in TARGETS.items()})


@interruptible
def main(argv=None) -> None:
    """Compile the full grid and write the table; the output path is checked before any
    compilation (the shared ``_cli`` rule: a folder, an existing file without ``--force``, or
    a place that cannot be written ends the command in one line, within seconds)."""
    parser = argparse.ArgumentParser(prog="python -m layernorm_tutorial.triton_kernels.aot",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", required=True, help="JSON file to write the table to")
    parser.add_argument("--force", action="store_true", help="replace an existing file")
    parser.add_argument("--jobs", type=positive_int, default=1,
                        help="compiling processes in parallel (default 1)")
    args = parser.parse_args(argv)
    try:  # never another of the repository's files, --force or not
        check_not_a_source(args.out, own=(BOOK_DATA / "kernel_resources.json",))
        out = check_output_path(args.out, force=args.force)
    except OutputPathError as err:
        parser.error(str(err))
    grid = full_grid()
    shares = [grid[i::args.jobs] for i in range(args.jobs)]
    with ThreadPoolExecutor(args.jobs) as pool:  # each share compiles in its own process
        parts = list(pool.map(compile_in_subprocess, shares))
    rows = [None] * len(grid)
    for i, part in enumerate(parts):
        rows[i::args.jobs] = part
    write_text_atomically(out, json.dumps(dict(
        command="python -m layernorm_tutorial.triton_kernels.aot --out " + args.out,
        versions=versions(), rows=rows), indent=1) + "\n")
    print(f"wrote {len(rows)} compiled configurations to {out}")

if __name__ == "__main__":
    main()
