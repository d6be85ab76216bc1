"""Checkers for the exercises of "Principles of Layer Normalization" and "The backward pass".

Each checker calls the reader's function on random inputs (NumPy float64 arrays) and edge
cases, compares with PyTorch in float64, and names the most likely mistake when it fails.

``check_layer_norm_forward(forward)``
    ``forward(x, gamma, beta, eps) -> (out, cache)`` (returning ``out`` alone is accepted).
``check_layer_norm_backward(forward, backward)``
    ``backward(dout, cache) -> (dx, dgamma, dbeta)`` with ``cache`` from the reader's forward.
``check_welford_update(update)``
    ``update(count, mean, m2, value) -> (count, mean, m2)``, one value at a time.
"""

from __future__ import annotations

import numpy as np
import torch

from ._checking import CheckResult, allclose, as_numpy

__all__ = ["check_layer_norm_forward", "check_layer_norm_backward", "check_welford_update"]


def _torch_layer_norm(x, gamma, beta, eps):
    t = torch.as_tensor
    H = x.shape[-1]
    return torch.nn.functional.layer_norm(t(x), (H,), t(gamma), t(beta), eps).numpy()


def _out_of(result):
    return result[0] if isinstance(result, tuple | list) else result


def _forward_cases(rng):
    """(description, x, gamma, beta, eps): ordinary rows, a 3-D tensor, nearly constant rows."""
    H = 8
    cases = [("a (4, 8) input", rng.standard_normal((4, H)) * 3 + 1,
              rng.standard_normal(H), rng.standard_normal(H), 1e-5),
             ("a (2, 3, 16) input", rng.standard_normal((2, 3, 16)),
              rng.standard_normal(16), rng.standard_normal(16), 1e-5),
             ("rows with std 1e-3 (eps matters)", 5 + 1e-3 * rng.standard_normal((3, H)),
              np.ones(H), np.zeros(H), 1e-5)]
    return cases


def _diagnose_forward(out, x, gamma, beta, eps):
    """Compare a wrong output with the usual mistakes and return a hint."""
    mean = x.mean(-1, keepdims=True)
    xshift = x - mean
    var_biased = (xshift**2).mean(-1, keepdims=True)
    var_unbiased = (xshift**2).sum(-1, keepdims=True) / (x.shape[-1] - 1)
    candidates = {
        "the variance is unbiased: LayerNorm divides by H, not H - 1":
            gamma * xshift / np.sqrt(var_unbiased + eps) + beta,
        "eps is added outside the square root: use sqrt(var + eps), not sqrt(var) + eps":
            gamma * xshift / (np.sqrt(var_biased) + eps) + beta,
        "gamma and beta are not applied (out = gamma * norm + beta)":
            xshift / np.sqrt(var_biased + eps),
        "eps is missing: use sqrt(var + eps)": gamma * xshift / np.sqrt(var_biased) + beta,
    }
    if x.ndim == 2:
        m0 = x.mean(0, keepdims=True)
        v0 = ((x - m0) ** 2).mean(0, keepdims=True)
        candidates["the statistics are taken over the batch (axis 0): LayerNorm normalizes "
                   "each row over its features (the last axis)"] = \
            gamma * (x - m0) / np.sqrt(v0 + eps) + beta
    for hint, wrong in candidates.items():
        if allclose(out, wrong, rtol=1e-6, atol=1e-9):
            return hint
    return "the values differ from torch.nn.functional.layer_norm"


def check_layer_norm_forward(forward, *, seed: int = 0) -> CheckResult:
    """Check ``forward(x, gamma, beta, eps)`` against ``torch.nn.functional.layer_norm``."""
    rng = np.random.default_rng(seed)
    for description, x, gamma, beta, eps in _forward_cases(rng):
        try:
            out = as_numpy(_out_of(forward(x.copy(), gamma.copy(), beta.copy(), eps)))
        except Exception as error:  # the reader's code may raise anything
            return CheckResult(False, f"forward raised {type(error).__name__} on {description}: "
                                      f"{error}")
        expected = _torch_layer_norm(x, gamma, beta, eps)
        if out.shape != expected.shape:
            return CheckResult(False, f"on {description} the output has shape {out.shape}, "
                                      f"expected {expected.shape} (same as x)")
        if not allclose(out, expected, rtol=1e-6, atol=1e-9):
            hint = _diagnose_forward(out, x, gamma, beta, eps)
            return CheckResult(False, f"on {description}: {hint}")
    return CheckResult(True, "forward matches torch.nn.functional.layer_norm on 2-D and 3-D "
                             "inputs and on nearly constant rows")


def _torch_grads(x, gamma, beta, eps, dout):
    xt = torch.tensor(x, requires_grad=True)
    gt = torch.tensor(gamma, requires_grad=True)
    bt = torch.tensor(beta, requires_grad=True)
    out = torch.nn.functional.layer_norm(xt, (x.shape[-1],), gt, bt, eps)
    out.backward(torch.tensor(dout))
    return xt.grad.numpy(), gt.grad.numpy(), bt.grad.numpy()


def _diagnose_dx(dx, x, gamma, eps, dout):
    mean = x.mean(-1, keepdims=True)
    xshift = x - mean
    rstd = 1.0 / np.sqrt((xshift**2).mean(-1, keepdims=True) + eps)
    norm = xshift * rstd
    dnorm = dout * gamma
    mean_term = dnorm.mean(-1, keepdims=True)
    norm_term = norm * (dnorm * norm).mean(-1, keepdims=True)
    candidates = {
        "dx is missing both projection terms: dx = rstd * (dnorm - mean(dnorm) - norm * "
        "mean(dnorm * norm))": rstd * dnorm,
        "dx is missing the term - mean(dnorm) (the gradient through the mean)":
            rstd * (dnorm - norm_term),
        "dx is missing the term - norm * mean(dnorm * norm) (the gradient through the variance)":
            rstd * (dnorm - mean_term),
        "dx ignores gamma: use dnorm = dout * gamma":
            rstd * (dout - dout.mean(-1, keepdims=True)
                    - norm * (dout * norm).mean(-1, keepdims=True)),
        "dx is not multiplied by rstd": dnorm - mean_term - norm_term,
    }
    for hint, wrong in candidates.items():
        if allclose(dx, wrong, rtol=1e-6, atol=1e-9):
            return hint
    return "dx differs from autograd"


def check_layer_norm_backward(forward, backward, *, seed: int = 0) -> CheckResult:
    """Check ``backward(dout, cache)`` against torch autograd with random upstream gradients."""
    rng = np.random.default_rng(seed)
    for shape in ((4, 8), (2, 3, 16)):
        H = shape[-1]
        x = rng.standard_normal(shape) * 2 + 0.5
        gamma, beta = rng.standard_normal(H), rng.standard_normal(H)
        dout = rng.standard_normal(shape)
        eps = 1e-5
        try:
            result = forward(x.copy(), gamma.copy(), beta.copy(), eps)
            if not isinstance(result, tuple | list) or len(result) != 2:
                return CheckResult(False, "forward must return a pair (out, cache)")
            grads = backward(dout.copy(), result[1])
        except Exception as error:
            return CheckResult(False, f"forward/backward raised {type(error).__name__} on an "
                                      f"input of shape {shape}: {error}")
        if not isinstance(grads, tuple | list) or len(grads) != 3:
            return CheckResult(False, "backward must return a triple (dx, dgamma, dbeta)")
        dx, dgamma, dbeta = (as_numpy(g) for g in grads)
        ex, egamma, ebeta = _torch_grads(x, gamma, beta, eps, dout)
        for name, got, expected, hint in (
                ("dbeta", dbeta, ebeta, "dbeta = dout summed over every axis except the last"),
                ("dgamma", dgamma, egamma,
                 "dgamma = (dout * norm) summed over every axis except the last")):
            if got.shape != expected.shape:
                return CheckResult(False, f"{name} has shape {got.shape}, expected "
                                          f"{expected.shape} (one value per feature)")
            if not allclose(got, expected, rtol=1e-6, atol=1e-9):
                return CheckResult(False, f"{name} is wrong for shape {shape}: {hint}")
        if dx.shape != ex.shape:
            return CheckResult(False, f"dx has shape {dx.shape}, expected {ex.shape}")
        if not allclose(dx, ex, rtol=1e-6, atol=1e-9):
            return CheckResult(False, f"for shape {shape}: {_diagnose_dx(dx, x, gamma, eps, dout)}")
    return CheckResult(True, "dx, dgamma and dbeta match torch autograd (float64, random upstream "
                             "gradients, 2-D and 3-D inputs)")


def check_welford_update(update, *, seed: int = 0) -> CheckResult:
    """Check a one-value Welford update on a float64 stream and on a float32 stream far from 0."""
    rng = np.random.default_rng(seed)
    stream = rng.standard_normal(200) * 2 + 3
    count, mean, m2 = 0, 0.0, 0.0
    try:
        for value in stream:
            count, mean, m2 = update(count, mean, m2, float(value))
    except Exception as error:
        return CheckResult(False, f"update raised {type(error).__name__}: {error}")
    if count != len(stream):
        return CheckResult(False, f"after {len(stream)} updates count is {count}: add 1 per value")
    if not np.isclose(float(mean), stream.mean(), rtol=1e-10, atol=1e-12):
        return CheckResult(False, "the running mean is wrong: mean_new = mean + delta / count_new "
                                  "with delta = value - mean")
    m2_expected = ((stream - stream.mean()) ** 2).sum()
    if not np.isclose(float(m2), m2_expected, rtol=1e-9):
        m2_old_mean = 0.0
        c, mu = 0, 0.0
        for value in stream:  # the common slip: delta * delta with the old mean twice
            c += 1
            delta = value - mu
            mu += delta / c
            m2_old_mean += delta * delta
        hint = ("m2 must be updated with delta * (value - mean_new), the old and the new mean"
                if np.isclose(float(m2), m2_old_mean, rtol=1e-9) else
                "m2 (the sum of squared deviations) is wrong")
        return CheckResult(False, hint)
    # float32, mean 1e4, std 1: the naive formula loses every digit here, Welford must not.
    values = (1e4 + rng.standard_normal(1000)).astype(np.float32)
    count, mean, m2 = 0, np.float32(0), np.float32(0)
    for value in values:
        count, mean, m2 = update(count, mean, m2, value)
    variance = float(m2) / count
    reference = float(np.var(values.astype(np.float64)))
    relative = abs(variance - reference) / reference
    if not relative < 1e-2:
        return CheckResult(False, f"in float32 with mean 1e4 the variance is off by "
                                  f"{relative:.1%}: keep the update in terms of deviations from "
                                  f"the running mean (never accumulate sum(x**2))")
    return CheckResult(True, f"mean and m2 are exact in float64; float32 stream at mean 1e4 has "
                             f"relative variance error {relative:.1e}")
