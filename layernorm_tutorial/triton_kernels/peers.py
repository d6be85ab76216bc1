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
