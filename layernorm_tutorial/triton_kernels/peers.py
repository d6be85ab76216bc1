"""Other Triton LayerNorms run through this package's correctness cases, in the interpreter.

Peers:

- ``package``: ``triton_kernels.layer_norm`` (forward and backward);
- ``liger``: Liger Kernel's ``LigerLayerNormFunction`` (forward and backward), called as
  shipped;
- ``liger, float args``: the same, with the interpreter passing Python float arguments as
  float32 scalars, as the compiler does on a GPU (see ``float_args_as_scalars``);
- ``tutorial stats``: the statistics of the Triton tutorial's kernel structure
  (``pitfalls.row_statistics``, ``"two_pass"``), with the affine step done in torch, forward
  only; ``tutorial unmasked``: the same without the padding mask (``"two_pass_unmasked"``).

Every case has mean-3 inputs (so that a padding bug shows), 4 rows, and is compared with
``torch.nn.functional.layer_norm`` in float64. A peer that raises is reported with its error
message, not skipped.
"""

from __future__ import annotations

import contextlib
import warnings

import numpy as np
import torch

from . import ops, pitfalls

CASES = ((1, torch.float32), (3, torch.float32), (17, torch.float32), (1000, torch.float32),
         (4099, torch.float32), (ops.MAX_BLOCK_N + 3617, torch.float32),
         (1000, torch.float16))
TOLERANCE = {torch.float32: 2e-5, torch.float16: 2e-3}  # relative to max(1, max |reference|)
PEERS = ("package", "liger", "liger, float args", "tutorial stats", "tutorial unmasked")
EPS = 1e-5


@contextlib.contextmanager
def float_args_as_scalars():
    """Inside the block, Triton's interpreter passes a Python float kernel argument as a
    float32 scalar (what the compiled kernel receives), instead of as a Python float, which
    has no ``.to()``. Only the interpreter's argument conversion is replaced, then restored."""
    import triton.language as tl
    from triton.runtime import interpreter

    original = interpreter._implicit_cvt

    def convert(arg):
        if isinstance(arg, float):
            handle = interpreter.TensorHandle(np.array([arg], dtype=np.float32), tl.float32)
            return tl.tensor(handle, tl.float32)
        return original(arg)

    interpreter._implicit_cvt = convert
    try:
        yield
    finally:
        interpreter._implicit_cvt = original


def _inputs(n: int, dtype: torch.dtype, seed: int):
    g = torch.Generator().manual_seed(seed)
    x = 3.0 + 2.0 * torch.randn(4, n, generator=g, dtype=torch.float64)
    w = 1.0 + 0.5 * torch.randn(n, generator=g, dtype=torch.float64)
    b = torch.randn(n, generator=g, dtype=torch.float64)
    dy = torch.randn(4, n, generator=g, dtype=torch.float64)
    return x, w, b, dy


def _liger(x, w, b):
    with warnings.catch_warnings():  # liger's imports pull in tqdm.auto, which warns (with a
        # site-packages path) outside a widget-enabled Jupyter; the warning says nothing here
        warnings.filterwarnings("ignore", message="IProgress not found")
        from liger_kernel.ops.layer_norm import LigerLayerNormFunction

    return LigerLayerNormFunction.apply(x, w, b, EPS)


def _liger_float_args(x, w, b):
    with float_args_as_scalars():
        return _liger(x, w, b)


def _tutorial(method):
    def run(x, w, b):
        mean, var = pitfalls.row_statistics(x.detach(), method)
        xhat = (x.float() - mean[:, None]) / torch.sqrt(var[:, None] + EPS)
        return (xhat * w.float() + b.float()).to(x.dtype)
    return run


def _peer_function(peer: str):
    return {"package": lambda x, w, b: ops.layer_norm(x, (x.shape[-1],), w, b, EPS),
            "liger": _liger, "liger, float args": _liger_float_args,
            "tutorial stats": _tutorial("two_pass"),
            "tutorial unmasked": _tutorial("two_pass_unmasked")}[peer]


def _relative_error(actual: torch.Tensor, expected: torch.Tensor) -> float:
    scale = max(1.0, expected.abs().max().item())
    return (actual.double() - expected).abs().max().item() / scale


def run_case(peer: str, n: int, dtype: torch.dtype, seed: int = 0) -> dict:
    """One peer on one case: output and gradient errors vs float64 (None when not computed),
    whether all are within ``TOLERANCE``, or the error the peer raised."""
    x64, w64, b64, dy64 = _inputs(n, dtype, seed)
    leaves = [t.to(dtype).requires_grad_() for t in (x64, w64, b64)]
    refs = [t.to(dtype).double().requires_grad_() for t in (x64, w64, b64)]
    y_ref = torch.nn.functional.layer_norm(refs[0], (n,), refs[1], refs[2], EPS)
    grads_ref = torch.autograd.grad(y_ref, refs, dy64.to(dtype).double())
    row = dict(peer=peer, n=n, dtype=str(dtype).removeprefix("torch."), error=None,
               y=None, dx=None, dw=None, db=None)
    try:
        y = _peer_function(peer)(*leaves)
        row["y"] = _relative_error(y, y_ref)
        if peer not in ("tutorial stats", "tutorial unmasked"):
            grads = torch.autograd.grad(y, leaves, dy64.to(dtype))
            for name, g, r in zip(("dx", "dw", "db"), grads, grads_ref, strict=True):
                row[name] = _relative_error(g, r)
    except Exception as exc:  # a peer's failure is a result, reported with its message
        row["error"] = f"{type(exc).__name__}: {exc}".splitlines()[0][:160]
    errors = [row[k] for k in ("y", "dx", "dw", "db") if row[k] is not None]
    row["ok"] = row["error"] is None and all(e <= TOLERANCE[dtype] for e in errors)
    return row


def compare_peers(peers=PEERS, cases=CASES, seed: int = 0) -> list[dict]:
    """``run_case`` for every peer and case, in order."""
    return [run_case(p, n, d, seed) for n, d in cases for p in peers]


LIGER_MODULE = "liger_kernel.ops.layer_norm"


def liger_compile_jobs(ns=(4096, 8192, 16384), dtype: str = "bf16", target: str = "sm_90",
                       rows: int = 4096, multiprocessors: int = 132) -> list[dict]:
    """Jobs for ``aot.compile_in_subprocess``: Liger's forward and backward LayerNorm kernels
    as its launcher would specialize them for ``rows`` x ``n`` inputs on a GPU with
    ``multiprocessors`` SMs (block and warps from Liger's ``calculate_settings``; strides of
    1 become constants, as Triton's JIT makes them)."""
    from liger_kernel.ops.utils import calculate_settings

    t, f32 = "*" + dtype, "*fp32"
    jobs = []
    for n in ns:
        block, warps = calculate_settings(n)
        fwd_types = dict(Y_ptr=t, Y_row_stride="i32", X_ptr=t, X_row_stride="i32", W_ptr=t,
                         B_ptr=t, Mean_ptr=f32, RSTD_ptr=f32, n_cols="i32", eps="fp32")
        fwd_constants = dict(W_row_stride=1, B_row_stride=1, Mean_row_stride=1,
                             RSTD_row_stride=1, BLOCK_SIZE=block)
        bwd_types = dict(X_ptr=t, stride_x="i32", W_ptr=t, Mean_ptr=f32, RSTD_ptr=f32,
                         DX_ptr=t, stride_dx="i32", DW_ptr=f32, stride_dw="i32", DB_ptr=f32,
                         stride_db="i32", DY_ptr=t, stride_dy="i32", n_rows="i32",
                         n_cols="i32")
        bwd_constants = dict(stride_mean=1, stride_rstd=1,
                             rows_per_program=-(-rows // multiprocessors), BLOCK_SIZE=block,
                             COMPUTE_DW=True, COMPUTE_DB=True)
        for kernel, types, constants in (("forward", fwd_types, fwd_constants),
                                         ("backward", bwd_types, bwd_constants)):
            jobs.append(dict(function=f"{LIGER_MODULE}:_layer_norm_{kernel}_kernel",
                             types=types, constants=constants, target=target,
                             num_warps=warps, label=f"liger {kernel} N={n} BLOCK_SIZE={block}"))
    return jobs


def format_compiled_peers(rows: list[dict]) -> str:
    """Registers, spills and shared memory of compiled peer kernels (``aot`` reports)."""
    lines = [f"{'kernel':<40}{'warps':>6}{'regs':>6}{'spill B':>9}{'shared B':>10}"]
    for r in rows:
        spill = r["spill_store_bytes"] + r["spill_load_bytes"] + r["local_bytes"]
        lines.append(f"{r['label']:<40}{r['num_warps']:>6}{r['registers']:>6}{spill:>9}"
                     f"{r['shared_bytes'] + r['static_shared_bytes']:>10}")
    return "\n".join(lines)


def format_peer_table(rows: list[dict]) -> str:
    """Text table: largest relative error per case and peer (``-`` not computed), or the
    error raised (listed once per peer below the table)."""
    peers = list(dict.fromkeys(r["peer"] for r in rows))
    cases = list(dict.fromkeys((r["n"], r["dtype"]) for r in rows))
    by = {(r["peer"], r["n"], r["dtype"]): r for r in rows}
    width = 20
    lines = ["largest relative error vs float64 (output; gradients), 4 rows, mean-3 inputs",
             f"{'N':>6} {'dtype':<8}" + "".join(f"{p:>{width}}" for p in peers)]
    errors = {}
    for n, dtype in cases:
        cells = []
        for p in peers:
            r = by[(p, n, dtype)]
            if r["error"]:
                errors.setdefault(r["error"], []).append(p)
                cells.append("raised (see below)")
                continue
            grads = [r[k] for k in ("dx", "dw", "db") if r[k] is not None]
            text = f"{r['y']:.0e}" + (f"; {max(grads):.0e}" if grads else "")
            cells.append(("" if r["ok"] else "FAIL ") + text)
        lines.append(f"{n:>6} {dtype:<8}" + "".join(f"{c:>{width}}" for c in cells))
    for message, who in errors.items():
        lines.append(f"{', '.join(sorted(set(who)))}: {message}")
    return "\n".join(lines)
