"""Checkers for the three coding drills of the interview chapter.

Each checker runs the reader's NumPy code on random inputs and edge cases, compares it with
PyTorch in float64, and on failure names the mistake. Diagnoses come from *mistake models*:
for every classic error (statistics over the wrong axis, unbiased variance, eps outside the
square root, missing gain/bias, wrong running-variance update, ...) the checker computes what
a program with exactly that error would return; if the reader's output matches one of them,
the message names it.

Drills and the signatures the reader implements
-----------------------------------------------
1. ``check_layer_norm_numpy(forward, backward)``
   ``forward(x, gamma, beta, eps) -> (out, cache)`` normalizes over the last axis of ``x``
   (shape ``(..., D)``; ``gamma``, ``beta`` of shape ``(D,)``);
   ``backward(dout, cache) -> (dx, dgamma, dbeta)``.
2. ``check_batch_norm_running(cls)``: ``cls(num_features, eps=1e-5, momentum=0.1)`` has NumPy
   attributes ``gamma``, ``beta``, ``running_mean``, ``running_var`` (shape ``(C,)``) and
   ``forward(x, training) -> out`` for ``x`` of shape ``(N, C)``, with PyTorch's conventions
   (``running = (1 - momentum) * running + momentum * batch_stat``, unbiased batch variance
   in ``running_var``, biased variance for normalizing).
3. ``check_group_norm(fn)``: ``fn(x, num_groups, gamma, beta, eps) -> out`` for ``x`` of shape
   ``(N, C, *spatial)`` and ``gamma``, ``beta`` of shape ``(C,)``.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import torch
import torch.nn.functional as F

from ._checking import CheckResult, allclose, as_numpy

__all__ = ["check_layer_norm_numpy", "check_batch_norm_running", "check_group_norm"]

_RTOL, _ATOL = 1e-6, 1e-8


# --------------------------------------------------------------------------- helpers
def _t(a: np.ndarray) -> torch.Tensor:
    return torch.as_tensor(np.asarray(a, dtype=np.float64))


def _describe_error(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}"


def _match_mistake(actual, mistakes: list[tuple[str, np.ndarray]]) -> str | None:
    """Return the message of the first mistake model whose output equals ``actual``."""
    for message, predicted in mistakes:
        if predicted is not None and allclose(actual, predicted, rtol=1e-5, atol=1e-7):
            return message
    return None


def _max_error(actual, expected) -> str:
    a, e = as_numpy(actual), as_numpy(expected)
    if a.shape != e.shape:
        return f"shape {a.shape}, expected {e.shape}"
    if not np.all(np.isfinite(a)):
        return "output contains NaN or inf"
    return f"max abs error {np.max(np.abs(a - e)):.3e}"


def _moments(x: np.ndarray, axes, *, unbiased: bool = False):
    mean = x.mean(axis=axes, keepdims=True)
    n = np.prod([x.shape[a] for a in np.atleast_1d(axes)])
    var = ((x - mean) ** 2).sum(axis=axes, keepdims=True) / (n - 1 if unbiased else n)
    return mean, var


# --------------------------------------------------------------------------- drill 1: LN
def _ln_forward_mistakes(x, gamma, beta, eps) -> list[tuple[str, np.ndarray]]:
    """Outputs of LayerNorm programs with one classic mistake each (normalizing last axis)."""
    last = x.ndim - 1
    mean, var = _moments(x, last)
    _, uvar = _moments(x, last, unbiased=True)
    xhat = (x - mean) / np.sqrt(var + eps)
    out = []
    if x.ndim >= 2:
        bmean, bvar = _moments(x, 0)
        out.append(("statistics are taken over axis 0 (across the batch, like BatchNorm); "
                    "LayerNorm reduces over the last axis, one mean/variance per sample",
                    gamma * (x - bmean) / np.sqrt(bvar + eps) + beta))
    if x.ndim >= 3:
        m1, v1 = _moments(x, 1)
        out.append(("statistics are taken over axis 1; for a (B, T, D) input LayerNorm "
                    "reduces over the last axis only: use axis=-1, not axis=1",
                    gamma * (x - m1) / np.sqrt(v1 + eps) + beta))
        rest = tuple(range(1, x.ndim))
        mr, vr = _moments(x, rest)
        out.append(("statistics are taken over all axes but the first (like "
                    "LayerNorm(x.shape[1:])); here only the last axis is normalized",
                    gamma * (x - mr) / np.sqrt(vr + eps) + beta))
    ma, va = _moments(x, tuple(range(x.ndim)))
    out.append(("one mean/variance for the whole tensor; use one per row (axis=-1, "
                "keepdims=True)", gamma * (x - ma) / np.sqrt(va + eps) + beta))
    out += [
        ("variance is unbiased (divides by D-1); LayerNorm uses the biased variance "
         "(divide by D, np.var's default ddof=0)",
         gamma * (x - mean) / np.sqrt(uvar + eps) + beta),
        ("eps is added outside the square root, (x-mu)/(sqrt(var)+eps); "
         "use (x-mu)/sqrt(var+eps)", gamma * (x - mean) / (np.sqrt(var) + eps) + beta),
        ("unbiased std with eps outside the square root (x.std(ddof=1) + eps, the "
         "'annotated' variant); LayerNorm uses sqrt(biased var + eps)",
         gamma * (x - mean) / (np.sqrt(uvar) + eps) + beta),
        ("eps is missing: divide by sqrt(var + eps), not sqrt(var)",
         gamma * (x - mean) / np.sqrt(var) + beta),
        ("square root is missing: divide by sqrt(var + eps), not (var + eps)",
         gamma * (x - mean) / (var + eps) + beta),
        ("mean is not subtracted (that is RMSNorm-like); subtract the row mean first",
         gamma * x / np.sqrt(var + eps) + beta),
        ("gamma and beta are not applied: return gamma * x_hat + beta", xhat),
        ("gamma (the gain) is not applied: return gamma * x_hat + beta", xhat + beta),
        ("beta (the bias) is not added: return gamma * x_hat + beta", gamma * xhat),
        ("gamma and beta are swapped: return gamma * x_hat + beta", beta * xhat + gamma),
    ]
    return out


def _ln_backward_reference(x, gamma, beta, eps, dout):
    xt = _t(x).requires_grad_(True)
    gt = _t(gamma).requires_grad_(True)
    bt = _t(beta).requires_grad_(True)
    F.layer_norm(xt, (x.shape[-1],), gt, bt, eps).backward(_t(dout))
    return xt.grad.numpy(), gt.grad.numpy(), bt.grad.numpy()


def _ln_backward_mistakes(x, gamma, eps, dout) -> list[tuple[str, np.ndarray]]:
    """dx of LayerNorm backward programs with one classic mistake each."""
    mean, var = _moments(x, -1)
    rstd = 1.0 / np.sqrt(var + eps)
    xhat = (x - mean) * rstd
    g = dout * gamma
    g_mean = g.mean(-1, keepdims=True)
    gx_mean = (g * xhat).mean(-1, keepdims=True)
    return [
        ("dx treats the mean and variance as constants (dx = dout*gamma/sigma); they depend "
         "on x, which adds the terms -mean(g) and -x_hat*mean(g*x_hat)", g * rstd),
        ("dx misses the path through the mean: subtract mean(g) over the row "
         "(g = dout*gamma)", rstd * (g - xhat * gx_mean)),
        ("dx misses the path through the variance: subtract x_hat*mean(g*x_hat) "
         "(g = dout*gamma)", rstd * (g - g_mean)),
        ("dx ignores gamma: the upstream gradient of x_hat is dout*gamma, not dout",
         rstd * (dout - dout.mean(-1, keepdims=True)
                 - xhat * (dout * xhat).mean(-1, keepdims=True))),
    ]


def _call_ln(forward, x, gamma, beta, eps):
    result = forward(x.copy(), gamma.copy(), beta.copy(), eps)
    if not (isinstance(result, tuple) and len(result) == 2):
        raise TypeError("forward must return a pair (out, cache)")
    return result


def check_layer_norm_numpy(forward: Callable, backward: Callable | None = None,
                           *, seed: int = 0) -> CheckResult:
    """Check a NumPy LayerNorm ``forward`` (and ``backward`` if given) against PyTorch.

    Cases: a (6, 7) batch; a (2, 3, 5) sequence batch; a single sample; a constant row
    (zero variance); a row with tiny variance and a large eps (tells eps inside from eps
    outside the square root); a small feature size D=3 (tells biased from unbiased variance).
    """
    rng = np.random.default_rng(seed)
    cases = []
    for name, shape, eps in [("a (6, 7) batch", (6, 7), 1e-5),
                             ("a (2, 3, 5) sequence batch", (2, 3, 5), 1e-5),
                             ("a single sample of shape (1, 8)", (1, 8), 1e-5),
                             ("features of size D=3", (4, 3), 1e-5)]:
        cases.append((name, 2.0 * rng.standard_normal(shape) + 0.5, eps))
    tiny = 1e-3 * rng.standard_normal((3, 6)) + 1.0
    cases.append(("rows with std ~1e-3 and eps=1e-2", tiny, 1e-2))
    const = rng.standard_normal((3, 5))
    const[1] = 2.5
    cases.append(("a constant row (zero variance)", const, 1e-5))

    for name, x, eps in cases:
        d = x.shape[-1]
        gamma = rng.uniform(0.5, 2.0, d)
        beta = rng.standard_normal(d)
        expected = F.layer_norm(_t(x), (d,), _t(gamma), _t(beta), eps).numpy()
        try:
            out, cache = _call_ln(forward, x, gamma, beta, eps)
        except Exception as exc:  # the reader's code may fail in any way
            hint = ""
            if "broadcast" in str(exc):
                hint = " (hint: keep the reduced axis with keepdims=True so mean and var broadcast)"
            elif x.ndim == 3:
                hint = " (hint: write the code for any number of leading axes: axis=-1)"
            return CheckResult(False, f"forward raised {_describe_error(exc)} on {name}{hint}")
        if as_numpy(out).shape != expected.shape:
            return CheckResult(False, f"forward on {name}: output shape "
                               f"{as_numpy(out).shape}, expected {expected.shape} "
                               "(keep the input's shape; use keepdims=True)")
        if not allclose(out, expected, rtol=_RTOL, atol=_ATOL):
            mistake = _match_mistake(out, _ln_forward_mistakes(x, gamma, beta, eps))
            if mistake is None:
                mistake = ("output differs from torch.nn.functional.layer_norm "
                           f"({_max_error(out, expected)})")
            return CheckResult(False, f"forward on {name}: {mistake}")
        if backward is None:
            continue
        dout = rng.standard_normal(x.shape)
        dx_ref, dg_ref, db_ref = _ln_backward_reference(x, gamma, beta, eps, dout)
        try:
            grads = backward(dout.copy(), cache)
            dx, dgamma, dbeta = grads
        except Exception as exc:
            return CheckResult(False, f"backward raised {_describe_error(exc)} on {name} "
                               "(it must return (dx, dgamma, dbeta))")
        if as_numpy(dx).shape != x.shape:
            return CheckResult(False, f"backward on {name}: dx has shape "
                               f"{as_numpy(dx).shape}, expected {x.shape}")
        if not allclose(dx, dx_ref, rtol=1e-5, atol=1e-7):
            mistake = _match_mistake(dx, _ln_backward_mistakes(x, gamma, eps, dout))
            if mistake is None:
                sums = np.abs(as_numpy(dx).sum(-1)).max()
                mistake = f"dx differs from autograd ({_max_error(dx, dx_ref)})"
                if sums > 1e-6:
                    mistake += (f"; each row of dx should sum to 0 (largest |row sum| "
                                f"{sums:.2e})")
            return CheckResult(False, f"backward on {name}: {mistake}")
        for label, got, ref, wrong in [
            ("dgamma", dgamma, dg_ref,
             [("dgamma must be sum(dout * x_hat) over all axes but the last, "
               "not sum(dout)", dout.reshape(-1, x.shape[-1]).sum(0))]),
            ("dbeta", dbeta, db_ref, []),
        ]:
            got_shape = as_numpy(got).shape
            if got_shape != (x.shape[-1],):
                detail = "sum over every axis except the last"
                if x.ndim == 3 and got_shape == x.shape[1:]:
                    detail = "only axis 0 was summed: sum over all leading axes (0 and 1)"
                return CheckResult(False, f"backward on {name}: {label} has shape "
                                   f"{got_shape}, expected {(x.shape[-1],)} ({detail})")
            if not allclose(got, ref, rtol=1e-5, atol=1e-7):
                mistake = _match_mistake(got, wrong) or _max_error(got, ref)
                return CheckResult(False, f"backward on {name}: {label}: {mistake}")
    what = "forward and backward match" if backward is not None else "forward matches"
    return CheckResult(True, f"{what} torch.nn.functional.layer_norm on {len(cases)} cases "
                       "(batches, a (B, T, D) input, one sample, D=3, tiny variance, "
                       "a constant row)")


# --------------------------------------------------------------------------- drill 2: BN
def _bn_train_mistakes(x, gamma, beta, eps, running_mean, running_var):
    mean, var = _moments(x, 0)
    _, uvar = _moments(x, 0, unbiased=True)
    smean, svar = _moments(x, 1)
    xhat = (x - mean) / np.sqrt(var + eps)
    return [
        ("training statistics are taken per sample over the features (axis 1, that is "
         "LayerNorm); BatchNorm reduces over the batch, axis 0",
         gamma * (x - smean) / np.sqrt(svar + eps) + beta),
        ("training mode normalizes with the running statistics; it must use the "
         "current batch's mean and biased variance",
         gamma * (x - running_mean) / np.sqrt(running_var + eps) + beta),
        ("training mode normalizes with the unbiased variance (N-1); normalize with the "
         "biased batch variance (divide by N)", gamma * (x - mean) / np.sqrt(uvar + eps) + beta),
        ("eps is added outside the square root; use (x-mean)/sqrt(var+eps)",
         gamma * (x - mean) / (np.sqrt(var) + eps) + beta),
        ("gamma and beta are not applied: return gamma * x_hat + beta", xhat),
        ("gamma (the gain) is not applied", xhat + beta),
        ("beta (the bias) is not added", gamma * xhat),
    ]


def _running_update_mistakes(old, batch_biased, batch_unbiased, momentum, *, is_var):
    """Running-statistic values after one update, for each classic mistake."""
    out = []
    if is_var:
        out.append(("running_var was updated with the biased batch variance; PyTorch "
                    "stores the unbiased one, var * N / (N - 1)",
                    (1 - momentum) * old + momentum * batch_biased))
    new = batch_unbiased if is_var else batch_biased
    label = "running_var" if is_var else "running_mean"
    out += [
        (f"{label}: momentum convention reversed; PyTorch uses running = (1 - momentum) * "
         "running + momentum * batch (momentum=0.1 keeps 90% of the old value)",
         momentum * old + (1 - momentum) * new),
        (f"{label} is replaced by the batch statistic instead of averaged: "
         "running = (1 - momentum) * running + momentum * batch", new),
        (f"{label} is not updated in training mode", old),
    ]
    if is_var:
        out.append(("running_var: momentum convention reversed and biased variance",
                    momentum * old + (1 - momentum) * batch_biased))
    return out


def check_batch_norm_running(cls: Callable, *, seed: int = 0) -> CheckResult:
    """Check a NumPy BatchNorm class with running statistics against PyTorch's conventions.

    Sequence: construct with C=4, check initial buffers; set random gamma/beta; three
    training steps (batch sizes 8, 5 and 2, one constant feature) checking outputs and
    running statistics after each; one evaluation step (which must use and not change the
    running statistics); a batch of size 1 in evaluation mode.
    """
    rng = np.random.default_rng(seed)
    c, eps, momentum = 4, 1e-5, 0.1
    try:
        layer = cls(c, eps=eps, momentum=momentum)
    except Exception as exc:
        return CheckResult(False, f"constructor cls(4, eps=1e-5, momentum=0.1) raised "
                           f"{_describe_error(exc)}")
    for name, value in [("gamma", 1.0), ("beta", 0.0), ("running_mean", 0.0),
                        ("running_var", 1.0)]:
        if not hasattr(layer, name):
            return CheckResult(False, f"the layer has no attribute {name!r}")
        got = as_numpy(getattr(layer, name))
        if got.shape != (c,):
            return CheckResult(False, f"{name} has shape {got.shape}, expected ({c},): one "
                               "value per feature (channel)")
        if not np.allclose(got, value):
            return CheckResult(False, f"{name} must start at {value:g} for every feature "
                               f"(got {np.round(got, 4).tolist()})")
    gamma = rng.uniform(0.5, 2.0, c)
    beta = rng.standard_normal(c)
    layer.gamma, layer.beta = gamma.copy(), beta.copy()
    rm_ref, rv_ref = torch.zeros(c, dtype=torch.float64), torch.ones(c, dtype=torch.float64)

    batches = [3.0 * rng.standard_normal((8, c)) + 1.0,
               rng.standard_normal((5, c)) - 2.0,
               rng.standard_normal((2, c))]
    batches[2][:, 0] = 0.7  # a constant feature: zero batch variance
    for step, x in enumerate(batches, start=1):
        old_mean, old_var = rm_ref.numpy().copy(), rv_ref.numpy().copy()
        expected = F.batch_norm(_t(x), rm_ref, rv_ref, _t(gamma), _t(beta), training=True,
                                momentum=momentum, eps=eps).numpy()
        where = f"training step {step} (batch of {x.shape[0]})"
        try:
            out = layer.forward(x.copy(), training=True)
        except Exception as exc:
            return CheckResult(False, f"forward(x, training=True) raised "
                               f"{_describe_error(exc)} at {where}")
        if as_numpy(out).shape != x.shape:
            return CheckResult(False, f"{where}: output shape {as_numpy(out).shape}, "
                               f"expected {x.shape}")
        if not allclose(out, expected, rtol=_RTOL, atol=_ATOL):
            mistake = _match_mistake(out, _bn_train_mistakes(x, gamma, beta, eps,
                                                             old_mean, old_var))
            return CheckResult(False, f"{where}: " + (mistake or "output differs from "
                               f"F.batch_norm(training=True) ({_max_error(out, expected)})"))
        mean, var = _moments(x, 0)
        _, uvar = _moments(x, 0, unbiased=True)
        for label, got, ref, old, b, ub, is_var in [
            ("running_mean", layer.running_mean, rm_ref, old_mean, mean[0], mean[0], False),
            ("running_var", layer.running_var, rv_ref, old_var, var[0], uvar[0], True),
        ]:
            if not allclose(got, ref, rtol=_RTOL, atol=_ATOL):
                mistake = _match_mistake(got, _running_update_mistakes(
                    old, b, ub, momentum, is_var=is_var))
                return CheckResult(False, f"after {where}: " + (mistake or f"{label} "
                                   f"differs from PyTorch's update ({_max_error(got, ref)})"))
        # keep the reader's state aligned with the reference for the next step
        layer.running_mean = rm_ref.numpy().copy()
        layer.running_var = rv_ref.numpy().copy()

    for where, x in [("evaluation on a batch of 6", rng.standard_normal((6, c)) + 0.3),
                     ("evaluation on a single sample", rng.standard_normal((1, c)))]:
        rm_before, rv_before = rm_ref.numpy().copy(), rv_ref.numpy().copy()
        expected = F.batch_norm(_t(x), rm_ref, rv_ref, _t(gamma), _t(beta), training=False,
                                eps=eps).numpy()
        try:
            out = layer.forward(x.copy(), training=False)
        except Exception as exc:
            return CheckResult(False, f"forward(x, training=False) raised "
                               f"{_describe_error(exc)} in {where}")
        if not allclose(out, expected, rtol=_RTOL, atol=_ATOL):
            mean, var = _moments(x, 0)
            wrong = [("evaluation mode normalizes with the batch's own statistics; it must "
                      "use running_mean and running_var",
                      gamma * (x - mean) / np.sqrt(var + eps) + beta),
                     ("evaluation mode: eps is added outside the square root",
                      gamma * (x - rm_before) / (np.sqrt(rv_before) + eps) + beta),
                     ("evaluation mode does not apply gamma and beta",
                      (x - rm_before) / np.sqrt(rv_before + eps))]
            mistake = _match_mistake(out, wrong)
            return CheckResult(False, f"{where}: " + (mistake or "output differs from "
                               f"F.batch_norm(training=False) ({_max_error(out, expected)})"))
        if not (allclose(layer.running_mean, rm_before) and
                allclose(layer.running_var, rv_before)):
            return CheckResult(False, f"{where}: the running statistics changed; evaluation "
                               "mode must leave them untouched")
    return CheckResult(True, "training outputs, running_mean/running_var updates (momentum "
                       "0.1, unbiased variance) and evaluation outputs match "
                       "torch.nn.functional.batch_norm over 3 training and 2 evaluation steps")


# --------------------------------------------------------------------------- drill 3: GN
def _gn_mistakes(x, groups, gamma, beta, eps):
    n, c = x.shape[:2]
    shape = (1, c) + (1,) * (x.ndim - 2)
    g, b = gamma.reshape(shape), beta.reshape(shape)

    def normalize_grouped(xg, axes, unbiased=False, outside=False):
        mean, var = _moments(xg, axes, unbiased=unbiased)
        if outside:
            return (xg - mean) / (np.sqrt(var) + eps)
        return (xg - mean) / np.sqrt(var + eps)

    contiguous = x.reshape(n, groups, -1)
    xhat = normalize_grouped(contiguous, 2).reshape(x.shape)
    strided = x.reshape(n, c // groups, groups, -1)  # channel c goes to group c % groups
    strided_hat = normalize_grouped(strided, (1, 3)).reshape(x.shape)
    spatial = tuple(range(2, x.ndim))
    mistakes = [
        ("channels are assigned to groups by stride (channel c in group c % G); groups are "
         "contiguous blocks: reshape to (N, G, C // G, ...)", g * strided_hat + b),
        ("statistics are per channel (that is InstanceNorm); GroupNorm pools C // G "
         "channels and all spatial positions", g * normalize_grouped(x, spatial) + b),
        ("statistics are per sample over all channels (that is LayerNorm / G=1); use "
         "num_groups groups", g * normalize_grouped(x, tuple(range(1, x.ndim))) + b),
        ("statistics also pool the batch axis; each sample has its own statistics",
         g * normalize_grouped(contiguous, (0, 2)).reshape(x.shape) + b),
        ("variance is unbiased (divides by n-1); GroupNorm uses the biased variance",
         g * normalize_grouped(contiguous, 2, unbiased=True).reshape(x.shape) + b),
        ("eps is added outside the square root; use (x-mean)/sqrt(var+eps)",
         g * normalize_grouped(contiguous, 2, outside=True).reshape(x.shape) + b),
        ("gamma and beta are not applied (shape (C,), one per channel)", xhat),
        ("gamma (the gain) is not applied", xhat + b),
        ("beta (the bias) is not added", g * xhat),
    ]
    if x.shape[-1] == c:
        mistakes.append(("gamma and beta broadcast over the last axis; reshape them to "
                         "(1, C, 1, ...) so they act per channel",
                         gamma * xhat + beta))
    return mistakes


def check_group_norm(fn: Callable, *, seed: int = 0) -> CheckResult:
    """Check a NumPy GroupNorm ``fn(x, num_groups, gamma, beta, eps)`` against PyTorch.

    Cases: (2, 6, 3, 6) with 3 groups (its width equals C, which exposes gamma broadcast over
    the wrong axis); (3, 8, 5) with 4 groups (a 1-D signal); one sample (1, 4, 2, 2) with
    G=1 (LayerNorm over C, H, W) and with G=C (InstanceNorm); (2, 6, 2, 2, 2) volumes.
    """
    rng = np.random.default_rng(seed)
    cases = [("x of shape (2, 6, 3, 6), 3 groups", (2, 6, 3, 6), 3),
             ("x of shape (3, 8, 5), 4 groups", (3, 8, 5), 4),
             ("one sample (1, 4, 2, 2), 1 group", (1, 4, 2, 2), 1),
             ("one sample (1, 4, 2, 2), 4 groups (one channel each)", (1, 4, 2, 2), 4),
             ("volumes (2, 6, 2, 2, 2), 2 groups", (2, 6, 2, 2, 2), 2)]
    eps = 1e-5
    for name, shape, groups in cases:
        x = 2.0 * rng.standard_normal(shape) + rng.standard_normal((1, shape[1]) +
                                                                 (1,) * (len(shape) - 2))
        gamma = rng.uniform(0.5, 2.0, shape[1])
        beta = rng.standard_normal(shape[1])
        expected = F.group_norm(_t(x), groups, _t(gamma), _t(beta), eps).numpy()
        try:
            out = fn(x.copy(), groups, gamma.copy(), beta.copy(), eps)
        except Exception as exc:
            hint = ""
            if len(shape) != 4:
                hint = (" (hint: the code must work for any number of spatial axes: "
                        "reshape to (N, G, -1))")
            elif shape[-1] == shape[1] or isinstance(exc, ValueError):
                hint = " (hint: reshape gamma and beta to (1, C, 1, 1))"
            return CheckResult(False, f"raised {_describe_error(exc)} on {name}{hint}")
        if as_numpy(out).shape != x.shape:
            return CheckResult(False, f"on {name}: output shape {as_numpy(out).shape}, "
                               f"expected {x.shape} (reshape back to the input's shape)")
        if not allclose(out, expected, rtol=_RTOL, atol=_ATOL):
            mistake = _match_mistake(out, _gn_mistakes(x, groups, gamma, beta, eps))
            return CheckResult(False, f"on {name}: " + (mistake or "output differs from "
                               f"torch.nn.functional.group_norm ({_max_error(out, expected)})"))
    return CheckResult(True, f"matches torch.nn.functional.group_norm on {len(cases)} cases "
                       "(2-D, 1-D and 3-D spatial inputs, G=1, G=C, width equal to C)")
