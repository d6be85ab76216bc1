"""The checker for the weight-normalization exercise of the normalization-family chapter.

``check_weight_norm(fn)``: ``fn(v, g, dim) -> w`` with ``w = g * v / ||v||``, the norm taken
over every axis except ``dim`` (the whole tensor for ``dim=None``), as ``torch._weight_norm``.
"""

from __future__ import annotations

import torch

from layernorm_tutorial import weight_norm as wn
from layernorm_tutorial.lab.common.checking import CheckResult, allclose, checker, reader_array

__all__ = ["check_weight_norm", "reference_weight_norm"]


def reference_weight_norm(v: torch.Tensor, g: torch.Tensor, dim=0) -> torch.Tensor:
    """w = g * v / ||v||, the norm over every axis except ``dim`` (whole tensor if None)."""
    return wn.weight_norm(v, g, dim)


def _call(fn, *args):
    try:
        return fn(*args), None
    except Exception as err:  # the reader's bug is reported, not raised
        return None, CheckResult(False, f"your function raised {type(err).__name__}: {err}")


@checker(returns="w, a tensor of v's shape")
def check_weight_norm(fn) -> CheckResult:
    """``fn(v, g, dim)`` must equal ``torch._weight_norm`` for dim 0, 1 and None."""
    gen = torch.Generator().manual_seed(1)
    v = torch.randn(4, 3, 2, generator=gen, dtype=torch.float64)
    for dim in (0, 1, None):
        g = wn.norm_except_dim(v, dim) * 0 + 2.0
        got, error = _call(fn, v, g, dim)
        if error is not None:
            return error
        want = torch._weight_norm(v, g, -1 if dim is None else dim)
        got = torch.as_tensor(reader_array(got, fn, tuple(v.shape), f"w (dim={dim})"))
        if allclose(got, want, rtol=1e-9, atol=1e-12):
            continue
        if dim is not None:
            wrong = v * 2.0 / torch.sqrt((v * v).sum(dim=dim, keepdim=True))
            if allclose(got, wrong, rtol=1e-9, atol=1e-12):
                return CheckResult(False, f"dim={dim}: you took the norm along dim; it runs "
                                   "over every axis EXCEPT dim (one norm per slice along dim)")
        return CheckResult(False, f"dim={dim}: output differs from g * v / ||v|| (max |error| "
                           f"{float((torch.as_tensor(got) - want).abs().max()):.3g})")
    return CheckResult(True, "matches torch's weight norm for dim = 0, 1 and None")
