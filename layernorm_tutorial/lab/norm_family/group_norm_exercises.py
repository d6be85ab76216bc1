"""The checker for the book's GroupNorm exercises, and their reference solutions.

``check_group_norm(fn)`` accepts both forms the book asks for:

* ``fn(x, num_groups, gamma, beta, eps)`` (the interview drill) receives NumPy float64
  arrays: ``x`` of shape ``(N, C, *spatial)``, ``gamma`` and ``beta`` of shape ``(C,)``;
* ``fn(x, num_groups, eps)`` (the normalization-family exercise, no affine step) receives
  torch float64 tensors.

The form is read from the number of parameters of ``fn`` (five or more: the affine form).
The output is compared with ``torch.nn.functional.group_norm`` in float64, at the precision
of the output's dtype; a classic mistake is named only when it explains the output beyond
doubt (:func:`layernorm_tutorial.lab.common.checking.diagnose`).
"""

from __future__ import annotations

import inspect
from collections.abc import Callable

import numpy as np
import torch
import torch.nn.functional as TF

from layernorm_tutorial.lab.common.checking import (
    CheckResult,
    as_numpy,
    checker,
    diagnose,
    output_dtype,
    reader_array,
    tolerance,
    within,
)

__all__ = ["check_group_norm", "group_norm_via_reshape", "reference_group_norm"]


# ---- reference solutions ----------------------------------------------------------------
def group_norm_via_reshape(x, num_groups: int, gamma, beta, eps: float = 1e-5):
    r"""NumPy GroupNorm: ``x`` ``(N, C, *)`` -> ``(N, G, C/G * prod(*))``, normalize the last
    axis (biased variance, eps inside the root), reshape back, apply per-channel gamma/beta.
    """
    x = np.asarray(x, dtype=np.float64)
    n, c = x.shape[:2]
    if c % num_groups:
        raise ValueError(f"num_groups={num_groups} must divide the {c} channels")
    grouped = x.reshape(n, num_groups, -1)
    mean = grouped.mean(axis=-1, keepdims=True)
    var = grouped.var(axis=-1, keepdims=True)
    xhat = ((grouped - mean) / np.sqrt(var + eps)).reshape(x.shape)
    channel = (1, c) + (1,) * (x.ndim - 2)
    return xhat * np.reshape(gamma, channel) + np.reshape(beta, channel)


def reference_group_norm(x: torch.Tensor, num_groups: int, eps: float = 1e-5) -> torch.Tensor:
    """Group norm without affine for x of shape (N, C, *spatial): reshape, normalize, undo."""
    n = x.shape[0]
    grouped = x.reshape(n, num_groups, -1)  # contiguous blocks of C // G channels
    mean = grouped.mean(dim=-1, keepdim=True)
    var = ((grouped - mean) ** 2).mean(dim=-1, keepdim=True)
    return ((grouped - mean) / torch.sqrt(var + eps)).reshape(x.shape)


# ---- mistake models ---------------------------------------------------------------------
def _moments(x, axes, ddof=0):
    return x.mean(axis=axes, keepdims=True), x.var(axis=axes, ddof=ddof, keepdims=True)


def _mistakes(x, groups, gamma, beta, eps, affine: bool) -> dict[str, np.ndarray]:
    n, c = x.shape[:2]
    shape = (1, c) + (1,) * (x.ndim - 2)
    g, b = gamma.reshape(shape), beta.reshape(shape)

    def normalized(xg, axes, ddof=0, outside=False):
        mean, var = _moments(xg, axes, ddof)
        return (xg - mean) / ((np.sqrt(var) + eps) if outside else np.sqrt(var + eps))

    contiguous = x.reshape(n, groups, -1)
    xhat = normalized(contiguous, 2).reshape(x.shape)
    strided = x.reshape(n, c // groups, groups, -1)  # channel c goes to group c % groups
    out = {
        "channels are assigned to groups by stride (interleaved: channel c in group c % G); "
        "a group is a contiguous block of C // G channels: reshape to (N, G, C // G, ...)":
            g * normalized(strided, (1, 3)).reshape(x.shape) + b,
        "statistics are per channel (that is InstanceNorm): GroupNorm pools C // G channels "
        "and all spatial positions": g * normalized(x, tuple(range(2, x.ndim))) + b,
        "statistics are per sample over all channels (that is LayerNorm / G=1): num_groups "
        "is ignored": g * normalized(x, tuple(range(1, x.ndim))) + b,
        "statistics also pool the batch axis; each sample has its own statistics":
            g * normalized(contiguous, (0, 2)).reshape(x.shape) + b,
        "variance is unbiased (divides by n-1); GroupNorm uses the biased variance (divide "
        "by the count)": g * normalized(contiguous, 2, ddof=1).reshape(x.shape) + b,
        "eps is added outside the square root; use (x-mean)/sqrt(var+eps)":
            g * normalized(contiguous, 2, outside=True).reshape(x.shape) + b,
    }
    if affine:
        out["gamma and beta are not applied (shape (C,), one per channel)"] = xhat
        out["gamma (the gain) is not applied"] = xhat + b
        out["beta (the bias) is not added"] = g * xhat
        if x.shape[-1] == c:
            out["gamma and beta broadcast over the last axis; reshape them to (1, C, 1, ...) "
                "so they act per channel"] = gamma * xhat + beta
    return out


def _takes_affine(fn: Callable) -> bool:
    try:
        return len(inspect.signature(fn).parameters) >= 5
    except (TypeError, ValueError):  # no signature to read: assume the drill's form
        return True


_CASES = [("x of shape (2, 6, 3, 6), 3 groups", (2, 6, 3, 6), 3),
          ("x of shape (3, 8, 5), 4 groups", (3, 8, 5), 4),
          ("one sample (1, 4, 2, 2), 1 group", (1, 4, 2, 2), 1),
          ("one sample (1, 4, 2, 2), 4 groups (one channel each)", (1, 4, 2, 2), 4),
          ("volumes (2, 6, 2, 2, 2), 2 groups", (2, 6, 2, 2, 2), 2),
          ("x of shape (3, 6, 4, 5), 2 groups, channel blocks of different scales",
           (3, 6, 4, 5), 2),
          ("groups with std ~1e-3 (eps matters)", (2, 4, 3, 3), 2)]


def _diagnosis(results, final: bool = False) -> CheckResult | None:
    """The failure named by a mistake model (or, when ``final``, a generic one), or None."""
    bad = [(name, a, e) for name, a, e, tol, _ in results if not within(a, e, tol)]
    if not bad:
        return None
    mistake = diagnose([(a, e, tol, m) for _, a, e, tol, m in results])
    if mistake is None and final:
        name, a, e = bad[0]
        mistake = (f"on {name}: output differs from torch.nn.functional.group_norm "
                   f"(max abs error {np.max(np.abs(as_numpy(a) - e)):.3e})")
    return None if mistake is None else CheckResult(False, mistake)


@checker(returns="an output of the input's shape")
def check_group_norm(fn: Callable, *, seed: int = 0) -> CheckResult:
    """Check a GroupNorm ``fn`` in either form (module docstring) against PyTorch.

    Cases: (2, 6, 3, 6) with 3 groups (its width equals C, which exposes gamma broadcast over
    the wrong axis); (3, 8, 5) with 4 groups (a 1-D signal); one sample (1, 4, 2, 2) with
    G=1 (LayerNorm over C, H, W) and with G=C (InstanceNorm); (2, 6, 2, 2, 2) volumes;
    channel blocks of different scales (wrong groupings show); groups with std ~1e-3 (eps
    inside or outside the square root).
    """
    rng = np.random.default_rng(seed)
    affine, eps, results = _takes_affine(fn), 1e-5, []
    for name, shape, groups in _CASES:
        offsets = rng.standard_normal((1, shape[1]) + (1,) * (len(shape) - 2))
        x = 2.0 * rng.standard_normal(shape) + offsets
        x[:, shape[1] // 2:] *= 5.0
        if "eps matters" in name:
            x *= 1e-3
        gamma = rng.uniform(0.5, 2.0, shape[1]) if affine else np.ones(shape[1])
        beta = rng.standard_normal(shape[1]) if affine else np.zeros(shape[1])
        t = torch.as_tensor
        expected = TF.group_norm(t(x), groups, t(gamma), t(beta), eps).numpy()
        try:
            out = (fn(x.copy(), groups, gamma.copy(), beta.copy(), eps) if affine
                   else fn(t(x.copy()), groups, eps))
        except Exception as exc:  # the reader's code may fail in any way
            earlier = _diagnosis(results)
            if earlier is not None:  # a mistake already explained the earlier cases
                return earlier
            hint = ""
            if len(shape) != 4:
                hint = (" (hint: the code must work for any number of spatial axes: "
                        "reshape to (N, G, -1))")
            elif affine and (shape[-1] == shape[1] or isinstance(exc, ValueError)):
                hint = " (hint: reshape gamma and beta to (1, C, 1, 1))"
            return CheckResult(False, f"raised {type(exc).__name__}: {exc} on {name}{hint}")
        if reader_array(out, fn).shape != x.shape:
            return CheckResult(False, f"on {name}: output shape {as_numpy(out).shape}, "
                               f"expected {x.shape} (reshape back to the input's shape)")
        tol = tolerance(expected, output_dtype(out))
        results.append((name, out, expected, tol, _mistakes(x, groups, gamma, beta, eps,
                                                             affine)))
    failure = _diagnosis(results, final=True)
    if failure is not None:
        return failure
    return CheckResult(True, f"matches torch.nn.functional.group_norm on {len(_CASES)} cases "
                       "(2-D, 1-D and 3-D spatial inputs, G=1, G=C, width equal to C)")
