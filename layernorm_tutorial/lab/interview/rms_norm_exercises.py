r"""The RMSNorm coding drill: forward and backward in NumPy, in one function, and its checker.

The drill: write ``rms_norm(x, gamma, dout, eps) -> (y, dx, dgamma)`` for ``x`` of shape
``(..., H)`` and ``gamma`` of shape ``(H,)``, with

.. math::

    r = \sqrt{\tfrac1H\textstyle\sum_i x_i^2 + \epsilon},\quad \hat x = x/r,\quad
    y = \gamma\odot\hat x,\qquad
    \frac{\partial L}{\partial x} = \frac1r\big(g - \hat x\,\langle g\odot\hat x\rangle\big),
    \ g = \frac{\partial L}{\partial y}\odot\gamma,\qquad
    \frac{\partial L}{\partial\gamma} = \sum_{\text{rows}}\frac{\partial L}{\partial y}
    \odot\hat x,

``dout`` being :math:`\partial L/\partial y` (shape of ``x``) and :math:`\langle\cdot\rangle`
a mean over the last axis. :func:`check_rms_norm` compares the three outputs with
``torch.nn.functional.rms_norm`` and autograd in float64 on several cases and, on failure,
names the classic mistake that explains the output (LayerNorm's centring, the L2 norm for
the RMS, the mean of x for the mean of its squares, eps outside the root, a hard-coded axis,
the RMS treated as a constant in the backward, a sum for a mean or a factor 2 in its
derivative, a lost ``keepdims``, ...).
"""

from __future__ import annotations

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
    reader_tuple,
    tolerance,
    within,
)

__all__ = ["rms_norm_reference", "check_rms_norm"]

_HARD_CODED_EPS = (1e-5, 1e-6, 1e-8)


def rms_norm_reference(x, gamma, dout, eps=1e-6):
    """The drill's solution: ``(y, dx, dgamma)`` (NumPy, float64), formulas above."""
    r = np.sqrt((x * x).mean(axis=-1, keepdims=True) + eps)      # (..., 1)
    xhat = x / r
    g = dout * gamma
    dx = (g - xhat * (g * xhat).mean(axis=-1, keepdims=True)) / r
    lead = tuple(range(x.ndim - 1))
    return gamma * xhat, dx, (dout * xhat).sum(axis=lead)


def _torch_reference(x, gamma, dout, eps):
    xt = torch.tensor(x, dtype=torch.float64, requires_grad=True)
    gt = torch.tensor(gamma, dtype=torch.float64, requires_grad=True)
    y = TF.rms_norm(xt, (x.shape[-1],), gt, eps)
    y.backward(torch.tensor(dout, dtype=torch.float64))
    return y.detach().numpy(), xt.grad.numpy(), gt.grad.numpy()


def _forward_mistakes(x, gamma, eps) -> dict[str, np.ndarray]:
    """Outputs of RMSNorm programs with one classic mistake each."""
    ms = (x * x).mean(-1, keepdims=True)
    centred = x - x.mean(-1, keepdims=True)

    def over(axes):                 # the right formula with the mean square over ``axes``
        return gamma * x / np.sqrt((x * x).mean(axes, keepdims=True) + eps)

    out = {
        "the mean is subtracted (that is LayerNorm); RMSNorm divides x itself by the RMS":
            gamma * centred / np.sqrt((centred ** 2).mean(-1, keepdims=True) + eps),
        "divides by the standard deviation (centred); RMSNorm uses the root mean square "
        "of x, sqrt(mean(x**2) + eps)":
            gamma * x / np.sqrt((centred ** 2).mean(-1, keepdims=True) + eps),
        "divides by the L2 norm (sum of squares); the RMS uses the mean of the squares, "
        "sum / H": gamma * x / np.sqrt((x * x).sum(-1, keepdims=True) + eps),
        "eps is added outside the square root; use sqrt(mean(x**2) + eps)":
            gamma * x / (np.sqrt(ms) + eps),
        "square root is missing: divide by sqrt(mean(x**2) + eps)": gamma * x / (ms + eps),
        "divides by the mean absolute value; use sqrt(mean(x**2) + eps)":
            gamma * x / (np.abs(x).mean(-1, keepdims=True) + eps),
        "takes the root of the mean absolute value, sqrt(mean(|x|) + eps); square first: "
        "sqrt(mean(x**2) + eps)": gamma * x / np.sqrt(np.abs(x).mean(-1, keepdims=True) + eps),
        "gamma is not applied: y = gamma * x / rms": x / np.sqrt(ms + eps),
        "one RMS for the whole tensor; take one per row: mean over axis=-1 with "
        "keepdims=True": over(tuple(range(x.ndim))),
    }
    with np.errstate(divide="ignore", invalid="ignore"):
        out["eps is missing: divide by sqrt(mean(x**2) + eps)"] = gamma * x / np.sqrt(ms)
        out["takes the mean of x, not of its squares: the RMS is sqrt(mean(x**2) + eps), "
            "not sqrt(mean(x) + eps)"] = \
            gamma * x / np.sqrt(x.mean(-1, keepdims=True) + eps)
    if x.ndim >= 2:
        out["the mean square is taken over axis 0 (across the batch); RMSNorm reduces over "
            "the last axis, one RMS per row"] = over(0)
    if x.ndim >= 3:
        out["the mean square is taken over a hard-coded axis=1; for a (B, T, H) input "
            "RMSNorm reduces over the last axis only: use axis=-1"] = over(1)
    for fixed in _HARD_CODED_EPS:
        if fixed != eps:
            out[f"the eps argument is ignored (eps={fixed:g} is hard-coded): use the eps "
                "passed in"] = gamma * x / np.sqrt(ms + fixed)
    return out


def _backward_mistakes(x, gamma, dout, eps) -> dict[str, dict[str, np.ndarray]]:
    """``{"dx"|"dgamma": {message: prediction}}`` for classic backward mistakes."""
    r = np.sqrt((x * x).mean(-1, keepdims=True) + eps)
    xhat, g = x / r, dout * gamma
    lead = tuple(range(x.ndim - 1))
    gx = (g * xhat).mean(-1, keepdims=True)
    with np.errstate(divide="ignore", invalid="ignore"):
        r0 = np.sqrt((x * x).mean(-1, keepdims=True))
        no_eps = (g - x / r0 * (g * x / r0).mean(-1, keepdims=True)) / r0
        dgamma_no_eps = (dout * x / r0).sum(lead)
    return {
        "dx": {
            "dx treats the RMS as a constant (dx = dout*gamma/rms); r depends on x, which "
            "adds the term -x_hat*mean(g*x_hat)": g / r,
            "dx uses LayerNorm's formula (subtracts mean(g)); RMSNorm has no mean, so only "
            "the term -x_hat*mean(g*x_hat) remains": (g - g.mean(-1, keepdims=True)
                                                      - xhat * gx) / r,
            "dx ignores gamma: the upstream gradient of x_hat is dout*gamma, not dout":
                (dout - xhat * (dout * xhat).mean(-1, keepdims=True)) / r,
            "dx is not divided by rms = sqrt(mean(x**2) + eps)": g - xhat * gx,
            "dx sums g*x_hat over the row where it should average (a missing 1/H): "
            "dr/dx_j = x_j / (H r), so the term is -x_hat*mean(g*x_hat)":
                (g - xhat * (g * xhat).sum(-1, keepdims=True)) / r,
            "dx has a factor 2 in the RMS derivative: dr/dx_j = x_j / (H r), the 2 of "
            "d(x**2) cancels the 1/2 of the square root": (g - 2 * xhat * gx) / r,
            "dx leaves eps out of r in the backward; use the forward's r = "
            "sqrt(mean(x**2) + eps)": no_eps,
        },
        "dgamma": {"dgamma must be sum(dout * x_hat) over all axes but the last, not "
                   "sum(dout)": dout.sum(lead),
                   "dgamma uses x instead of x_hat: sum(dout * x / rms) over all axes but the "
                   "last": (dout * x).sum(lead),
                   "dgamma leaves eps out of r in the backward; use the forward's r = "
                   "sqrt(mean(x**2) + eps)": dgamma_no_eps},
    }


def _cases(rng):
    """(description, x, eps): batches, a sequence batch, one sample, H=3, rows with RMS
    ~1e-3 and eps=1e-2, a zero row; inputs have a non-zero mean, so centring shows."""
    cases = [(name, 2.0 * rng.standard_normal(shape) + 0.7, 1e-6)
             for name, shape in [("a (6, 7) batch", (6, 7)),
                                 ("a (2, 3, 5) sequence batch", (2, 3, 5)),
                                 ("a single sample of shape (1, 8)", (1, 8)),
                                 ("features of size H=3", (4, 3))]]
    cases.append(("rows with RMS ~1e-3 and eps=1e-2",
                  1e-3 * (rng.standard_normal((3, 6)) + 0.7), 1e-2))
    zero = rng.standard_normal((3, 5)) + 0.7
    zero[1] = 0.0
    cases.append(("a row of zeros", zero, 1e-6))
    return cases


def _raise_hint(exc: Exception, x: np.ndarray) -> str:
    """A hint for an exception raised by the reader's code on input ``x``."""
    if isinstance(exc, ValueError) and "broadcast" in str(exc):
        return (" (hint: the mean square lost its axis; keep it with "
                "mean(axis=-1, keepdims=True) so it broadcasts against x)")
    if x.ndim == 3:
        return " (hint: write the code for any number of leading axes: axis=-1)"
    return ""


def _failure(results, where: str) -> CheckResult:
    mistake = diagnose([(a, e, tol, m) for _, a, e, tol, m in results])
    if mistake is not None:
        return CheckResult(False, f"{where}: {mistake}")
    name, actual, expected = next((n, a, e) for n, a, e, tol, _ in results
                                  if not within(a, e, tol))
    error = np.max(np.abs(as_numpy(actual) - as_numpy(expected)))
    detail = f"max abs error {error:.3e}" if np.isfinite(error) else "NaN or inf"
    return CheckResult(False, f"{where} on {name}: differs from torch.nn.functional.rms_norm "
                       f"and autograd ({detail})")


@checker(returns="the triple (y, dx, dgamma): y and dx of the input's shape, dgamma (H,)")
def check_rms_norm(fn: Callable, *, seed: int = 0) -> CheckResult:
    """Check ``fn(x, gamma, dout, eps) -> (y, dx, dgamma)`` against ``F.rms_norm`` and
    autograd in float64 (module docstring). Cases: a (6, 7) batch, a (2, 3, 5) sequence
    batch, one sample, H=3, rows with RMS ~1e-3 and eps=1e-2 (eps inside the root, a
    hard-coded eps), a row of zeros."""
    rng = np.random.default_rng(seed)
    per_output = {"y": [], "dx": [], "dgamma": []}
    cases = _cases(rng)
    for name, x, eps in cases:
        h = x.shape[-1]
        gamma, dout = rng.uniform(0.5, 2.0, h), rng.standard_normal(x.shape)
        refs = dict(zip(per_output, _torch_reference(x, gamma, dout, eps), strict=True))
        try:
            result = fn(x.copy(), gamma.copy(), dout.copy(), eps)
        except Exception as exc:  # the reader's code may fail in any way
            hint = _raise_hint(exc, x)
            return CheckResult(False, f"raised {type(exc).__name__}: {exc} on {name}{hint}")
        outputs = reader_tuple(result, fn, 3, "the triple (y, dx, dgamma)")
        backward = _backward_mistakes(x, gamma, dout, eps)
        mistakes = {"y": _forward_mistakes(x, gamma, eps), **backward}
        for label, got in zip(per_output, outputs, strict=True):
            want = refs[label]
            if reader_array(got, fn, what=label).shape != want.shape:
                detail = "sum over every axis except the last" if label == "dgamma" \
                    else "the input's shape"
                return CheckResult(False, f"on {name}: {label} has shape "
                                   f"{as_numpy(got).shape}, expected {want.shape} ({detail})")
            tol = tolerance(want, output_dtype(got))
            per_output[label].append((name, got, want, tol, mistakes[label]))
    for label, where in (("y", "forward (y)"), ("dgamma", "backward (dgamma)"),
                         ("dx", "backward (dx)")):
        results = per_output[label]
        if not all(within(a, e, tol) for _, a, e, tol, _ in results):
            return _failure(results, where)
    return CheckResult(True, f"y, dx and dgamma match torch.nn.functional.rms_norm and "
                       f"autograd on {len(cases)} cases (batches, a (B, T, H) input, one "
                       "sample, H=3, tiny RMS with eps=1e-2, a row of zeros)")
