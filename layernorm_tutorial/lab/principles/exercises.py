"""The checker for the book's LayerNorm exercises: forward, and backward when given.

``check_layer_norm(forward, backward=None)``
    ``forward(x, gamma, beta, eps) -> (out, cache)`` normalizes over the last axis of ``x``
    (NumPy, shape ``(..., D)``; ``gamma``, ``beta`` of shape ``(D,)``); ``[out, cache]`` and,
    without a backward, ``out`` alone are accepted. ``backward(dout, cache) -> (dx, dgamma,
    dbeta)``.

The reader's results are compared with PyTorch in float64 at the precision of the reader's
output dtype (a float32 solution is compared at float32 precision). On failure the message
names a classic mistake only when it explains the output beyond doubt (see
:func:`layernorm_tutorial.lab.common.checking.diagnose`).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import torch
import torch.nn.functional as TF

from layernorm_tutorial.lab.common.checking import (
    FLOAT32_TOLERANCE,
    CheckResult,
    as_numpy,
    checker,
    diagnose,
    is_pair,
    output_dtype,
    reader_array,
    reader_tuple,
    tolerance,
    within,
)

__all__ = ["check_layer_norm"]

_HARD_CODED_EPS = (1e-5, 1e-6, 1e-8, 1e-12)


def _t(a) -> torch.Tensor:
    return torch.as_tensor(np.asarray(a, dtype=np.float64))


def _moments(x, axes, *, ddof: int = 0):
    mean = x.mean(axis=axes, keepdims=True)
    n = np.prod([x.shape[a] for a in np.atleast_1d(axes)])
    return mean, ((x - mean) ** 2).sum(axis=axes, keepdims=True) / (n - ddof)


def _forward_mistakes(x, gamma, beta, eps) -> dict[str, np.ndarray]:
    """Outputs of LayerNorm programs with one classic mistake each."""
    mean, var = _moments(x, -1)
    _, uvar = _moments(x, -1, ddof=1)
    xhat = (x - mean) / np.sqrt(var + eps)

    def affine(axes):
        m, v = _moments(x, axes)
        return gamma * (x - m) / np.sqrt(v + eps) + beta

    out = {}
    if x.ndim >= 2:
        out["statistics are taken over axis 0 (across the batch, like BatchNorm); LayerNorm "
            "reduces over the last axis, one mean/variance per sample"] = affine(0)
    if x.ndim >= 3:
        out["statistics are taken over axis 1; for a (B, T, D) input LayerNorm reduces over "
            "the last axis only: use axis=-1, not axis=1"] = affine(1)
        out["statistics are taken over all axes but the first (like LayerNorm(x.shape[1:])); "
            "here only the last axis is normalized"] = affine(tuple(range(1, x.ndim)))
    out["one mean/variance for the whole tensor; use one per row (axis=-1, keepdims=True)"] = \
        affine(tuple(range(x.ndim)))
    out["variance is unbiased (divides by D-1); LayerNorm uses the biased variance (divide by "
        "D, np.var's default ddof=0)"] = gamma * (x - mean) / np.sqrt(uvar + eps) + beta
    out["eps is added outside the square root, (x-mu)/(sqrt(var)+eps); use "
        "(x-mu)/sqrt(var+eps)"] = gamma * (x - mean) / (np.sqrt(var) + eps) + beta
    out["unbiased std with eps outside the square root (x.std(ddof=1) + eps, the "
        "'annotated' variant); LayerNorm uses sqrt(biased var + eps)"] = \
        gamma * (x - mean) / (np.sqrt(uvar) + eps) + beta
    with np.errstate(divide="ignore", invalid="ignore"):
        out["eps is missing: divide by sqrt(var + eps), not sqrt(var)"] = \
            gamma * (x - mean) / np.sqrt(var) + beta
    for fixed in _HARD_CODED_EPS:
        if fixed != eps:
            out[f"the eps argument is ignored (eps={fixed:g} is hard-coded): use the eps "
                "passed in"] = \
                gamma * (x - mean) / np.sqrt(var + fixed) + beta
    out["square root is missing: divide by sqrt(var + eps), not (var + eps)"] = \
        gamma * (x - mean) / (var + eps) + beta
    out["mean is not subtracted (that is RMSNorm-like); subtract the row mean first"] = \
        gamma * x / np.sqrt(var + eps) + beta
    out["gamma and beta are not applied: return gamma * x_hat + beta"] = xhat
    out["gamma (the gain) is not applied: return gamma * x_hat + beta"] = xhat + beta
    out["beta (the bias) is not added: return gamma * x_hat + beta"] = gamma * xhat
    out["gamma and beta are swapped: return gamma * x_hat + beta"] = beta * xhat + gamma
    return out


def _backward_reference(x, gamma, beta, eps, dout):
    xt, gt, bt = (_t(a).requires_grad_(True) for a in (x, gamma, beta))
    TF.layer_norm(xt, (x.shape[-1],), gt, bt, eps).backward(_t(dout))
    return xt.grad.numpy(), gt.grad.numpy(), bt.grad.numpy()


def _backward_mistakes(x, gamma, eps, dout) -> dict[str, dict[str, np.ndarray]]:
    """``{"dx"|"dgamma"|"dbeta": {message: prediction}}`` for classic backward mistakes."""
    mean, var = _moments(x, -1)
    rstd = 1.0 / np.sqrt(var + eps)
    xhat = (x - mean) * rstd
    g = dout * gamma
    lead = tuple(range(x.ndim - 1))
    g_mean, gx_mean = g.mean(-1, keepdims=True), (g * xhat).mean(-1, keepdims=True)
    return {
        "dx": {
            "dx treats the mean and variance as constants (dx = dout*gamma/sigma); they "
            "depend on x, which adds the terms -mean(g) and -x_hat*mean(g*x_hat)": g * rstd,
            "dx misses the path through the mean: subtract mean(g) over the row "
            "(g = dout*gamma)": rstd * (g - xhat * gx_mean),
            "dx misses the path through the variance: subtract x_hat*mean(g*x_hat) "
            "(g = dout*gamma)": rstd * (g - g_mean),
            "dx ignores gamma: the upstream gradient of x_hat is dout*gamma, not dout":
                rstd * (dout - dout.mean(-1, keepdims=True)
                        - xhat * (dout * xhat).mean(-1, keepdims=True)),
            "dx is not multiplied by rstd = 1/sqrt(var + eps)": g - g_mean - xhat * gx_mean,
            "dx sums over the row where it should average (a missing 1/D): the terms are "
            "-mean(g) and -x_hat*mean(g*x_hat)":
                rstd * (g - g.sum(-1, keepdims=True)
                        - xhat * (g * xhat).sum(-1, keepdims=True)),
            "dx has a factor 2 in the variance path: dsigma/dx_j = (x_j - mu) / (D sigma), "
            "the 2 of d(x**2) cancels the 1/2 of the square root":
                rstd * (g - g_mean - 2 * xhat * gx_mean),
        },
        "dgamma": {"dgamma must be sum(dout * x_hat) over all axes but the last, not "
                   "sum(dout)": dout.sum(lead)},
        "dbeta": {"dbeta must be sum(dout) over all axes but the last, not sum(dout * x_hat) "
                  "(that is dgamma)": (dout * xhat).sum(lead)},
    }


def _cases(rng):
    """(description, x, eps): shapes, one sample, D=3, tiny variance with a large eps, a
    constant row, rows far from zero."""
    cases = [(name, 2.0 * rng.standard_normal(shape) + 0.5, 1e-5)
             for name, shape in [("a (6, 7) batch", (6, 7)),
                                 ("a (2, 3, 5) sequence batch", (2, 3, 5)),
                                 ("a single sample of shape (1, 8)", (1, 8)),
                                 ("features of size D=3", (4, 3))]]
    cases.append(("rows with std ~1e-3 and eps=1e-2", 1e-3 * rng.standard_normal((3, 6)) + 1.0,
                  1e-2))
    const = rng.standard_normal((3, 5))
    const[1] = 2.5
    cases.append(("a constant row (zero variance)", const, 1e-5))
    return cases


def _fail(message: str) -> CheckResult:
    return CheckResult(False, message)


def _precision_note(dtype) -> str:
    if dtype == np.float64:
        return ""
    return f" (your output is {dtype.name}: compared at rtol {FLOAT32_TOLERANCE[0]:g})"


def _explain_failure(results, where: str, fallback) -> CheckResult:
    """Failure message for ``results = [(name, actual, expected, tol, mistakes)]``."""
    mistake = diagnose([(a, e, tol, m) for _, a, e, tol, m in results])
    if mistake is not None:
        return _fail(f"{where}: {mistake}")
    bad = [(name, a, e) for name, a, e, tol, _ in results if not within(a, e, tol)]
    name, actual, expected = bad[0]
    error = np.max(np.abs(as_numpy(actual) - as_numpy(expected)))
    if np.isfinite(error) and all(within(a, e, tolerance(e, np.float32)) for _, a, e in bad):
        return _fail(f"{where} agrees with torch only to about float32 precision (max abs "
                     f"error {error:.1e} on {name}): a float64 output should agree to ~1e-12;"
                     " compute in float64 (or return the float32 array, which is compared "
                     "at float32 precision)")
    detail = "NaN or inf" if not np.isfinite(error) else f"max abs error {error:.3e}"
    return _fail(f"{where} on {name}: {fallback(actual)} ({detail})")


def _run_forward(forward, cases, rng, need_cache: bool):
    """Forward results ``(name, out, expected, tol, mistakes)``, caches and inputs, or a
    CheckResult describing why the reader's forward could not be run."""
    results, runs = [], []
    for name, x, eps in cases:
        d = x.shape[-1]
        gamma, beta = rng.uniform(0.5, 2.0, d), rng.standard_normal(d)
        expected = TF.layer_norm(_t(x), (d,), _t(gamma), _t(beta), eps).numpy()
        try:
            result = forward(x.copy(), gamma.copy(), beta.copy(), eps)
        except Exception as exc:  # the reader's code may fail in any way
            if any(not within(a, e, tol) for _, a, e, tol, _ in results):
                mistake = diagnose([(a, e, tol, m) for _, a, e, tol, m in results])
                if mistake is not None:  # a mistake already explained the earlier cases
                    return _fail(f"forward: {mistake}")
            hint = ""
            if "broadcast" in str(exc):
                hint = " (hint: keep the reduced axis with keepdims=True so mean and var broadcast)"
            elif x.ndim == 3:
                hint = " (hint: write the code for any number of leading axes: axis=-1)"
            return _fail(f"forward raised {type(exc).__name__}: {exc} on {name}{hint}")
        if is_pair(result):
            out, cache = result
        elif need_cache:
            reader_tuple(result, forward, 2, "the pair (out, cache): the cache goes to backward")
        else:
            out, cache = result, None
        if reader_array(out, forward).shape != expected.shape:
            return _fail(f"forward on {name}: output shape {as_numpy(out).shape}, expected "
                         f"{expected.shape} (keep the input's shape; use keepdims=True)")
        tol = tolerance(expected, output_dtype(out))
        results.append((name, out, expected, tol, _forward_mistakes(x, gamma, beta, eps)))
        runs.append((name, x, gamma, beta, eps, cache))
    return results, runs


def _check_backward(backward, runs, rng) -> CheckResult | None:
    """None when dx, dgamma and dbeta match on every case, else the failure."""
    per_grad = {"dx": [], "dgamma": [], "dbeta": []}
    for name, x, gamma, beta, eps, cache in runs:
        dout = rng.standard_normal(x.shape)
        refs = dict(zip(per_grad, _backward_reference(x, gamma, beta, eps, dout), strict=True))
        try:
            grads = backward(dout.copy(), cache)
        except Exception as exc:
            return _fail(f"backward raised {type(exc).__name__}: {exc} on {name} (it must "
                         "return (dx, dgamma, dbeta))")
        grads = reader_tuple(grads, backward, 3, "the triple (dx, dgamma, dbeta)")
        mistakes = _backward_mistakes(x, gamma, eps, dout)
        for label, got in zip(per_grad, grads, strict=True):
            shape, want = reader_array(got, backward, what=label).shape, refs[label].shape
            if shape != want:
                detail = "sum over every axis except the last" if label != "dx" else "like x"
                if x.ndim == 3 and label != "dx" and shape == x.shape[1:]:
                    detail = "only axis 0 was summed: sum over all leading axes (0 and 1)"
                return _fail(f"backward on {name}: {label} has shape {shape}, expected "
                             f"{want} ({detail})")
            tol = tolerance(refs[label], output_dtype(got))
            per_grad[label].append((name, got, refs[label], tol, mistakes[label]))
    for label in ("dbeta", "dgamma", "dx"):
        results = per_grad[label]
        if all(within(a, e, tol) for _, a, e, tol, _ in results):
            continue

        def fallback(actual, label=label):
            text = f"{label} differs from autograd"
            sums = np.abs(as_numpy(actual).sum(-1)).max()
            if label == "dx" and sums > 1e-6:
                text += f"; each row of dx should sum to 0 (largest |row sum| {sums:.2e})"
            return text

        return _explain_failure(results, f"backward ({label})", fallback)
    return None


@checker(returns="(out, cache) from forward, out of the input's shape, and "
                 "(dx, dgamma, dbeta) from backward")
def check_layer_norm(forward: Callable, backward: Callable | None = None, *,
                     seed: int = 0) -> CheckResult:
    """Check a NumPy LayerNorm ``forward`` (and ``backward`` if given) against PyTorch.

    Cases: a (6, 7) batch; a (2, 3, 5) sequence batch; a single sample; a small feature size
    D=3 (tells biased from unbiased variance); rows with std ~1e-3 and eps=1e-2 (tells eps
    inside from eps outside the square root, and a hard-coded eps from the argument); a
    constant row (zero variance).
    """
    rng = np.random.default_rng(seed)
    cases = _cases(rng)
    ran = _run_forward(forward, cases, rng, need_cache=backward is not None)
    if isinstance(ran, CheckResult):
        return ran
    results, runs = ran
    if not all(within(a, e, tol) for _, a, e, tol, _ in results):
        return _explain_failure(results, "forward",
                                lambda _: "output differs from torch.nn.functional.layer_norm")
    note = _precision_note(output_dtype(results[0][1]))
    if backward is None:
        return CheckResult(True, f"forward matches torch.nn.functional.layer_norm on "
                           f"{len(cases)} cases (batches, a (B, T, D) input, one sample, D=3, "
                           f"tiny variance, a constant row){note}")
    failure = _check_backward(backward, runs, rng)
    if failure is not None:
        return failure
    return CheckResult(True, f"forward and backward match torch.nn.functional.layer_norm and "
                       f"autograd on {len(cases)} cases (batches, a (B, T, D) input, one "
                       f"sample, D=3, tiny variance, a constant row){note}")
