r"""The normalization coding drill of part 1: LayerNorm, BatchNorm (training and evaluation
mode) and GroupNorm, forward and backward in NumPy, with a checker for each.

All three are one computation. Standardize ``x`` over a set of axes ``A`` (keeping them, so
the statistics broadcast), with the biased variance and :math:`\epsilon` inside the root,
then apply a per-feature affine map:

.. math::

    \mu = \langle x\rangle_A,\quad r = \frac1{\sqrt{\langle (x-\mu)^2\rangle_A + \epsilon}},
    \quad \hat x = (x-\mu)\,r,\quad y = \gamma\odot\hat x + \beta,

and, with :math:`g = \partial L/\partial y\odot\gamma`, the backward pass is LayerNorm's with
the means taken over the same axes,

.. math::

    \frac{\partial L}{\partial x} = r\big(g - \langle g\rangle_A
    - \hat x\,\langle g\odot\hat x\rangle_A\big),\qquad
    \frac{\partial L}{\partial\gamma} = \sum \frac{\partial L}{\partial y}\odot\hat x,\qquad
    \frac{\partial L}{\partial\beta} = \sum \frac{\partial L}{\partial y},

the sums running over every axis but the feature axis. LayerNorm: ``A`` = the last axis,
``gamma`` of shape ``(D,)``. BatchNorm on ``(N, C, *spatial)``: ``A`` = every axis but 1
(per channel); in training it also updates ``running = (1 - momentum) * running +
momentum * batch_statistic`` with the *unbiased* variance of the ``m = N * prod(spatial)``
values of a channel; in evaluation it normalizes with the running statistics, which are then
constants: :math:`\partial L/\partial x = g/\sqrt{\bar\sigma^2+\epsilon}`. GroupNorm:
reshape to ``(N, G, -1)`` (contiguous blocks of ``C / G`` channels), ``A`` = the last axis of
that view, ``gamma`` per channel; InstanceNorm is GroupNorm with ``G = C``.

The drill's functions return forward and backward at once:

* ``layer_norm(x, gamma, beta, dout, eps) -> (y, dx, dgamma, dbeta)``;
* ``batch_norm(x, gamma, beta, dout, running_mean, running_var, training, momentum, eps)
  -> (y, dx, dgamma, dbeta, new_running_mean, new_running_var)``;
* ``group_norm(x, num_groups, gamma, beta, dout, eps) -> (y, dx, dgamma, dbeta)``.

:func:`check_layer_norm`, :func:`check_batch_norm` and :func:`check_group_norm` compare every
output with ``torch.nn.functional`` and autograd in float64 and, on failure, name the classic
slip that explains the output beyond doubt (unbiased variance, eps outside the root, wrong
axes, a lost ``keepdims``, a biased ``running_var``, batch statistics in evaluation mode, the
statistics treated as constants in the backward, the training backward in evaluation mode,
...; see :func:`layernorm_tutorial.lab.common.checking.diagnose`).
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

__all__ = ["standardize", "standardize_backward", "layer_norm_reference",
           "batch_norm_reference", "group_norm_reference", "check_layer_norm",
           "check_batch_norm", "check_group_norm"]

_HARD_CODED_EPS = (1e-5, 1e-6)
_STATS_CONSTANT = ("treats the mean and variance as constants (dx = dout*gamma*rstd); "
                   "they depend on x, which adds -mean(g) - x_hat*mean(g*x_hat)")


# --------------------------------------------------------------------------- the solution
def standardize(x, axes, eps, *, ddof: int = 0):
    """``(x_hat, rstd)`` of ``x`` over ``axes`` (kept, size 1): biased variance (``ddof``
    only for the checker's mistake models), ``eps`` inside the root."""
    mean = x.mean(axis=axes, keepdims=True)
    count = np.prod([x.shape[a] for a in np.atleast_1d(axes)])
    var = ((x - mean) ** 2).sum(axis=axes, keepdims=True) / (count - ddof)
    rstd = 1.0 / np.sqrt(var + eps)
    return (x - mean) * rstd, rstd


def standardize_backward(g, xhat, rstd, axes):
    """``dL/dx`` of :func:`standardize` given ``g = dL/dx_hat`` (module formula)."""
    return rstd * (g - g.mean(axis=axes, keepdims=True)
                   - xhat * (g * xhat).mean(axis=axes, keepdims=True))


def _channel(v, ndim):
    """A ``(C,)`` vector shaped ``(1, C, 1, ...)`` to broadcast against ``(N, C, *)``."""
    return v.reshape((1, -1) + (1,) * (ndim - 2))


def _bn_axes(ndim):
    return (0,) + tuple(range(2, ndim))


def layer_norm_reference(x, gamma, beta, dout, eps=1e-5):
    """The LayerNorm part of the drill: ``(y, dx, dgamma, dbeta)`` for ``x`` ``(..., D)``."""
    xhat, rstd = standardize(x, -1, eps)
    lead = tuple(range(x.ndim - 1))
    dx = standardize_backward(dout * gamma, xhat, rstd, -1)
    return gamma * xhat + beta, dx, (dout * xhat).sum(axis=lead), dout.sum(axis=lead)


def batch_norm_reference(x, gamma, beta, dout, running_mean, running_var, training,
                         momentum=0.1, eps=1e-5):
    """The BatchNorm part: ``(y, dx, dgamma, dbeta, running_mean, running_var)`` for ``x``
    ``(N, C, *spatial)``, PyTorch's conventions (module docstring); the running statistics
    are returned (new arrays in training, the ones given in evaluation)."""
    axes, shape = _bn_axes(x.ndim), x.ndim
    gb, bb = _channel(gamma, shape), _channel(beta, shape)
    if training:
        xhat, rstd = standardize(x, axes, eps)
        dx = standardize_backward(dout * gb, xhat, rstd, axes)
        m = x.size // x.shape[1]                          # values per channel
        unbiased = x.var(axis=axes) * m / (m - 1)
        running_mean = (1 - momentum) * running_mean + momentum * x.mean(axis=axes)
        running_var = (1 - momentum) * running_var + momentum * unbiased
    else:                                                 # statistics are constants
        rstd = 1.0 / np.sqrt(_channel(running_var, shape) + eps)
        xhat = (x - _channel(running_mean, shape)) * rstd
        dx = dout * gb * rstd
    return (gb * xhat + bb, dx, (dout * xhat).sum(axis=axes), dout.sum(axis=axes),
            running_mean, running_var)


def group_norm_reference(x, num_groups, gamma, beta, dout, eps=1e-5):
    """The GroupNorm part: ``(y, dx, dgamma, dbeta)`` for ``x`` ``(N, C, *spatial)``."""
    n, c = x.shape[:2]
    if c % num_groups:
        raise ValueError(f"num_groups={num_groups} must divide the {c} channels")
    grouped = x.reshape(n, num_groups, -1)               # (N, G, C/G * prod(spatial))
    xhat_g, rstd = standardize(grouped, -1, eps)
    g = (dout * _channel(gamma, x.ndim)).reshape(grouped.shape)
    dx = standardize_backward(g, xhat_g, rstd, -1).reshape(x.shape)
    xhat = xhat_g.reshape(x.shape)
    axes = _bn_axes(x.ndim)
    return (_channel(gamma, x.ndim) * xhat + _channel(beta, x.ndim), dx,
            (dout * xhat).sum(axis=axes), dout.sum(axis=axes))


# --------------------------------------------------------------------------- mistake models
def _backward_slips(g, xhat, rstd, axes, dout_hat=None) -> dict[str, np.ndarray]:
    """dx of programs with one classic backward slip each (``g = dL/dx_hat``; ``dout_hat``:
    the same with gamma left out)."""
    def mean(a):
        return a.mean(axis=axes, keepdims=True)

    def total(a):
        return a.sum(axis=axes, keepdims=True)

    slips = {
        f"dx {_STATS_CONSTANT}": g * rstd,
        "dx misses the mean path: add -mean(g) (the mean depends on x)":
            rstd * (g - xhat * mean(g * xhat)),
        "dx misses the variance path: add -x_hat*mean(g*x_hat) (the variance depends on x)":
            rstd * (g - mean(g)),
        "dx sums over the normalized axes where it should average (a missing 1/m)":
            rstd * (g - total(g) - xhat * total(g * xhat)),
        "dx has a factor 2 in the variance path: d var/dx = 2(x - mu)/m, and the 2 cancels "
        "the 1/2 of the square root": rstd * (g - mean(g) - 2 * xhat * mean(g * xhat)),
    }
    if dout_hat is not None:
        slips["dx ignores gamma: the upstream gradient of x_hat is dout*gamma, not dout"] = \
            standardize_backward(dout_hat, xhat, rstd, axes)
    return slips


def _param_slips(dout, x, xhat, axes) -> dict[str, dict[str, np.ndarray]]:
    return {"dgamma": {"dgamma must be sum(dout * x_hat), not sum(dout)":
                       dout.sum(axis=axes),
                       "dgamma uses x instead of x_hat: sum(dout * x_hat)":
                       (dout * x).sum(axis=axes)},
            "dbeta": {"dbeta must be sum(dout), not sum(dout * x_hat)":
                      (dout * xhat).sum(axis=axes)}}


def _forward_slips(x, axes, eps, affine, *, wrong_axes) -> dict[str, np.ndarray]:
    """y of programs with one classic forward slip each; ``affine(x_hat)`` applies gamma and
    beta, ``wrong_axes`` maps a message to the axes a slip reduces over."""
    xhat, _ = standardize(x, axes, eps)
    mean = x.mean(axis=axes, keepdims=True)
    std = np.sqrt(((x - mean) ** 2).mean(axis=axes, keepdims=True))
    slips = {
        "the variance is unbiased (divides by m - 1); normalization uses the biased variance, "
        "divide by m": affine(standardize(x, axes, eps, ddof=1)[0]),
        "eps is added outside the square root; use sqrt(var + eps)":
            affine((x - mean) / (std + eps)),
        "the square root is missing: divide by sqrt(var + eps), not var + eps":
            affine((x - mean) / (std ** 2 + eps)),
        "the mean is not subtracted: x_hat = (x - mean) / sqrt(var + eps)":
            affine(x / np.sqrt(std ** 2 + eps)),
    }
    for message, wrong in wrong_axes.items():
        slips[message] = affine(standardize(x, wrong, eps)[0])
    with np.errstate(divide="ignore", invalid="ignore"):
        slips["eps is missing: divide by sqrt(var + eps)"] = affine((x - mean) / std)
    for fixed in _HARD_CODED_EPS:
        if fixed != eps:
            slips[f"the eps argument is ignored (eps={fixed:g} is hard-coded): use the eps "
                  "passed in"] = affine(standardize(x, axes, fixed)[0])
    return slips


# --------------------------------------------------------------------------- the checking
def _t(a) -> torch.Tensor:
    return torch.tensor(np.asarray(a, dtype=np.float64))


def _autograd(forward, x, gamma, beta, dout):
    """``(y, dx, dgamma, dbeta)`` of ``forward(x, gamma, beta)`` by torch autograd."""
    xt, gt, bt = (_t(a).requires_grad_(True) for a in (x, gamma, beta))
    y = forward(xt, gt, bt)
    y.backward(_t(dout))
    return tuple(t.numpy() for t in (y.detach(), xt.grad, gt.grad, bt.grad))


def _raise_hint(exc: Exception) -> str:
    if isinstance(exc, ValueError) and "broadcast" in str(exc):
        return (" (hint: a statistic lost its reduced axes and cannot broadcast against x: "
                "keep them with keepdims=True)")
    if isinstance(exc, np.exceptions.AxisError):
        return (" (hint: write the code for any number of axes: reduce over (0,) + "
                "tuple(range(2, x.ndim)) for BatchNorm, axis=-1 for LayerNorm)")
    return ""


def _failure(results, where: str, name_of: str) -> CheckResult:
    mistake = diagnose([(a, e, tol, m) for _, a, e, tol, m in results])
    if mistake is not None:
        return CheckResult(False, f"{where}: {mistake}")
    name, actual, expected = next((n, a, e) for n, a, e, tol, _ in results
                                  if not within(a, e, tol))
    error = np.max(np.abs(as_numpy(actual) - as_numpy(expected)))
    detail = f"max abs error {error:.3e}" if np.isfinite(error) else "NaN or inf"
    return CheckResult(False, f"{where} on {name}: differs from {name_of} ({detail})")


def _run(fn, cases, labels, order, name_of, shape_hint) -> CheckResult | None:
    """Run ``fn`` on every case and compare; None when everything matches.

    ``cases``: ``(name, args, refs, mistakes)`` with ``args`` the reader's arguments (copied
    before each call), ``refs`` and ``mistakes`` dicts keyed by output label. ``order``: the
    labels in the order their failures are reported."""
    per_output = {label: [] for label in labels}
    for name, args, refs, mistakes in cases:
        try:
            result = fn(*[a.copy() if isinstance(a, np.ndarray) else a for a in args])
        except Exception as exc:  # the reader's code may fail in any way
            return CheckResult(False, f"raised {type(exc).__name__}: {exc} on {name}"
                               f"{_raise_hint(exc)}")
        outputs = reader_tuple(result, fn, len(labels), "the tuple " + "(" +
                               ", ".join(labels) + ")")
        for label, got in zip(labels, outputs, strict=True):
            want = refs[label]
            if reader_array(got, fn, what=label).shape != want.shape:
                return CheckResult(False, f"on {name}: {label} has shape "
                                   f"{as_numpy(got).shape}, expected {want.shape} "
                                   f"({shape_hint(label)})")
            tol = tolerance(want, output_dtype(got))
            per_output[label].append((name, got, want, tol, mistakes.get(label, {})))
    for label, where in order:
        results = per_output[label]
        if not all(within(a, e, tol) for _, a, e, tol, _ in results):
            return _failure(results, where, name_of)
    return None


def _order(labels):
    where = {"y": "forward (y)", "running_mean": "running statistics (running_mean)",
             "running_var": "running statistics (running_var)"}
    first = [lb for lb in ("y", "running_mean", "running_var") if lb in labels]
    rest = [lb for lb in ("dbeta", "dgamma", "dx") if lb in labels]
    return [(lb, where.get(lb, f"backward ({lb})")) for lb in first + rest]


# --------------------------------------------------------------------------- LayerNorm
def _ln_cases(rng):
    shapes = [("a (6, 7) batch", (6, 7), 1e-5), ("a (2, 3, 5) (B, T, D) batch", (2, 3, 5), 1e-5),
              ("a single sample of shape (1, 8)", (1, 8), 1e-5),
              ("features of size D=3", (4, 3), 1e-5)]
    cases = [(name, 2.0 * rng.standard_normal(shape) + 0.7, eps) for name, shape, eps in shapes]
    cases.append(("rows with std ~1e-3 and eps=1e-2",
                  1e-3 * rng.standard_normal((3, 6)) + 1.0, 1e-2))
    return cases


def _ln_mistakes(x, gamma, beta, dout, eps) -> dict[str, dict[str, np.ndarray]]:
    """``{output label: {message: prediction}}`` for LayerNorm programs with one slip each."""
    lead = tuple(range(x.ndim - 1))
    wrong = {"the statistics are taken over axis 0 (across the batch); LayerNorm reduces "
             "over the last axis, one mean and variance per row": 0,
             "one mean and variance for the whole tensor; take one per row: axis=-1 with "
             "keepdims=True": tuple(range(x.ndim))}
    if x.ndim == 3:
        wrong["the statistics are taken over a hard-coded axis=1; for a (B, T, D) input "
              "LayerNorm reduces over the last axis only: use axis=-1"] = 1
    xhat, rstd = standardize(x, -1, eps)
    return {"y": _forward_slips(x, -1, eps, lambda h: gamma * h + beta, wrong_axes=wrong),
            "dx": _backward_slips(dout * gamma, xhat, rstd, -1, dout_hat=dout),
            **_param_slips(dout, x, xhat, lead)}


def _ln_case(name, x, eps, rng):
    d = x.shape[-1]
    gamma, beta = rng.uniform(0.5, 2.0, d), rng.standard_normal(d)
    dout = rng.standard_normal(x.shape)
    ref = _autograd(lambda a, g, b: TF.layer_norm(a, (d,), g, b, eps), x, gamma, beta, dout)
    refs = dict(zip(("y", "dx", "dgamma", "dbeta"), ref, strict=True))
    return name, (x, gamma, beta, dout, eps), refs, _ln_mistakes(x, gamma, beta, dout, eps)


@checker(returns="the tuple (y, dx, dgamma, dbeta): y and dx of the input's shape, dgamma "
                 "and dbeta (D,)")
def check_layer_norm(fn: Callable, *, seed: int = 0) -> CheckResult:
    """Check ``fn(x, gamma, beta, dout, eps) -> (y, dx, dgamma, dbeta)`` (LayerNorm over the
    last axis) against ``F.layer_norm`` and autograd in float64 on five cases: batches, a
    ``(B, T, D)`` input, one sample, ``D = 3``, rows with std ~1e-3 and ``eps = 1e-2``."""
    rng = np.random.default_rng(seed)
    cases = [_ln_case(name, x, eps, rng) for name, x, eps in _ln_cases(rng)]
    labels = ("y", "dx", "dgamma", "dbeta")
    failure = _run(fn, cases, labels, _order(labels), "torch.nn.functional.layer_norm and "
                   "autograd", lambda lb: "sum over every axis but the last"
                   if lb != "y" and lb != "dx" else "the input's shape")
    if failure is not None:            # a failed CheckResult is falsy: test for None
        return failure
    return CheckResult(True, f"y, dx, dgamma and dbeta match torch.nn.functional."
                       f"layer_norm and autograd on {len(cases)} cases ((N, D), "
                       "(B, T, D), one sample, D=3, tiny variance with eps=1e-2)")


# --------------------------------------------------------------------------- BatchNorm
def _bn_cases(rng):
    """(name, shape, training, momentum, eps, scale): 2-D and 4-D, a batch of three, a tiny
    channel variance with eps=1e-2, a momentum other than 0.1, evaluation mode."""
    return [("an (8, 5) batch, training", (8, 5), True, 0.1, 1e-5, 2.0),
            ("a (4, 3, 5, 6) feature map, training", (4, 3, 5, 6), True, 0.1, 1e-5, 2.0),
            ("a (3, 4) batch of three, training, momentum=0.3", (3, 4), True, 0.3, 1e-5, 2.0),
            ("a (3, 2, 4, 4) map with channel std ~1e-3 and eps=1e-2, training",
             (3, 2, 4, 4), True, 0.1, 1e-2, 1e-3),
            ("an (8, 5) batch, evaluation", (8, 5), False, 0.1, 1e-5, 2.0),
            ("a (4, 3, 5, 6) feature map, evaluation, eps=1e-2", (4, 3, 5, 6), False, 0.1,
             1e-2, 2.0)]


def _bn_torch(x, gamma, beta, dout, rm, rv, training, momentum, eps):
    rm_t, rv_t = _t(rm), _t(rv)
    ref = _autograd(lambda a, g, b: TF.batch_norm(a, rm_t, rv_t, g, b, training, momentum,
                                                  eps), x, gamma, beta, dout)
    return ref + (rm_t.numpy(), rv_t.numpy())


def _bn_case(name, shape, training, momentum, eps, scale, rng):
    c, nd = shape[1], len(shape)
    x = scale * rng.standard_normal(shape) + rng.normal(0.5, 1.0, c).reshape(
        (1, c) + (1,) * (nd - 2))
    gamma, beta = rng.uniform(0.5, 2.0, c), rng.standard_normal(c)
    rm, rv = rng.normal(0.0, 1.0, c), rng.uniform(0.5, 3.0, c)
    dout = rng.standard_normal(shape)
    labels = ("y", "dx", "dgamma", "dbeta", "running_mean", "running_var")
    args = (x, gamma, beta, dout, rm, rv, training, momentum, eps)
    refs = dict(zip(labels, _bn_torch(*args), strict=True))
    return name, args, refs, _bn_mistakes(*args)


def _bn_mistakes(x, gamma, beta, dout, rm, rv, training, momentum, eps):
    """``{output label: {message: prediction}}`` for BatchNorm programs with one slip each."""
    shape, c, nd = x.shape, x.shape[1], x.ndim
    axes, gb, bb = _bn_axes(nd), _channel(gamma, nd), _channel(beta, nd)

    def affine(h):
        return gb * h + bb

    batch_mean, batch_var = x.mean(axis=axes), x.var(axis=axes)
    m = x.size // c
    xhat, rstd = standardize(x, axes, eps)
    if training:
        wrong = {"the statistics are per sample (over the features, as LayerNorm); BatchNorm "
                 "takes one mean and variance per channel over the batch"
                 + (" and the spatial axes" if nd > 2 else ""): tuple(range(1, nd))}
        if nd > 2:
            wrong["the statistics are taken over axis 0 only (one per channel and position); "
                  "for (N, C, H, W) reduce over (0, 2, 3): every value of a channel"] = 0
            wrong["the statistics are per (sample, channel), over the spatial axes only (that "
                  "is InstanceNorm); BatchNorm also reduces over the batch axis 0"] = \
                tuple(range(2, nd))
        y_slips = _forward_slips(x, axes, eps, affine, wrong_axes=wrong)
        y_slips["training mode normalizes with the running statistics; in training use the "
                "batch statistics (and update the running ones)"] = affine(
            (x - _channel(rm, nd)) / np.sqrt(_channel(rv, nd) + eps))
        unbiased = batch_var * m / (m - 1)
        upd = {"mean": batch_mean, "var": unbiased}
        old = {"mean": rm, "var": rv}
        run_slips = {"mean": {}, "var": {}}
        for key in ("mean", "var"):
            run_slips[key]["the momentum convention is reversed: PyTorch's running = (1 - "
                           "momentum) * running + momentum * batch (the new batch weighs "
                           "momentum)"] = momentum * old[key] + (1 - momentum) * upd[key]
            run_slips[key]["the running statistics are not updated in training"] = old[key]
            run_slips[key]["the running statistics are replaced by the batch's; blend them: "
                           "(1 - momentum) * running + momentum * batch"] = upd[key]
            if momentum != 0.1:
                run_slips[key]["the momentum argument is ignored (0.1 is hard-coded)"] = \
                    0.9 * old[key] + 0.1 * upd[key]
        run_slips["var"]["running_var is updated with the biased batch variance; PyTorch "
                         "stores the unbiased one, var * m / (m - 1)"] = \
            (1 - momentum) * rv + momentum * batch_var
        if nd > 2:
            n = shape[0]
            run_slips["var"]["running_var's unbiased correction uses the batch size N; a "
                             "channel has m = N * H * W values, so the factor is m / (m - 1)"] \
                = (1 - momentum) * rv + momentum * batch_var * n / (n - 1)
        dx_slips = _backward_slips(dout * gb, xhat, rstd, axes, dout_hat=dout)
        mistakes = {"y": y_slips, "dx": dx_slips, "running_mean": run_slips["mean"],
                    "running_var": run_slips["var"], **_param_slips(dout, x, xhat, axes)}
    else:
        eval_hat = (x - _channel(rm, nd)) / np.sqrt(_channel(rv, nd) + eps)
        eval_rstd = 1.0 / np.sqrt(_channel(rv, nd) + eps)
        updated = {"mean": (1 - momentum) * rm + momentum * batch_mean,
                   "var": (1 - momentum) * rv + momentum * batch_var * m / (m - 1)}
        moved = ("evaluation mode updates the running statistics; in evaluation they are read, "
                 "not written (return them unchanged)")
        mistakes = {
            "y": {"evaluation mode normalizes with the batch statistics; use the running "
                  "statistics": affine(xhat),
                  "eps is added outside the square root of running_var; use "
                  "sqrt(running_var + eps)": affine((x - _channel(rm, nd))
                                                    / (np.sqrt(_channel(rv, nd)) + eps)),
                  "the square root of running_var is missing: divide by "
                  "sqrt(running_var + eps)": affine((x - _channel(rm, nd))
                                                    / (_channel(rv, nd) + eps))},
            "dx": {"dx uses the training formula in evaluation mode; there the statistics are "
                   "the running ones, constants: dx = dout * gamma / sqrt(running_var + eps)":
                   standardize_backward(dout * gb, eval_hat, eval_rstd, axes),
                   "dx is the training-mode gradient (batch statistics); in evaluation the "
                   "running statistics are constants: dx = dout * gamma / sqrt(running_var + "
                   "eps)": standardize_backward(dout * gb, xhat, rstd, axes)},
            "running_mean": {moved: updated["mean"]},
            "running_var": {moved: updated["var"]},
            **_param_slips(dout, x, eval_hat, axes)}
    return mistakes


def _bn_shape_hint(label):
    if label in ("y", "dx"):
        return "the input's shape"
    return "one value per channel: reduce over every axis but axis 1"


@checker(returns="the tuple (y, dx, dgamma, dbeta, running_mean, running_var): y and dx of "
                 "the input's shape, the others (C,)")
def check_batch_norm(fn: Callable, *, seed: int = 0) -> CheckResult:
    """Check ``fn(x, gamma, beta, dout, running_mean, running_var, training, momentum, eps)
    -> (y, dx, dgamma, dbeta, running_mean, running_var)`` (BatchNorm over every axis but 1,
    PyTorch's running-statistics conventions) against ``F.batch_norm`` and autograd in
    float64: training on ``(N, C)`` and ``(N, C, H, W)`` inputs, a batch of three with
    ``momentum = 0.3``, a tiny channel variance with ``eps = 1e-2``, and evaluation mode on
    ``(N, C)`` and on ``(N, C, H, W)`` with ``eps = 1e-2``."""
    rng = np.random.default_rng(seed)
    cases = [_bn_case(*spec, rng) for spec in _bn_cases(rng)]
    labels = ("y", "dx", "dgamma", "dbeta", "running_mean", "running_var")
    failure = _run(fn, cases, labels, _order(labels), "torch.nn.functional.batch_norm and "
                   "autograd", _bn_shape_hint)
    if failure is not None:            # a failed CheckResult is falsy: test for None
        return failure
    return CheckResult(True, "y, dx, dgamma, dbeta and the running statistics "
                       "match torch.nn.functional.batch_norm and autograd on "
                       f"{len(cases)} cases (training on (N, C) and (N, C, H, W), "
                       "a batch of three, momentum=0.3, tiny variance with eps=1e-2; "
                       "evaluation on (N, C) and on (N, C, H, W) with eps=1e-2)")


# --------------------------------------------------------------------------- GroupNorm
def _gn_cases(rng):
    """(name, shape, groups, eps, scale): groups of several channels, one spatial axis,
    G = C (InstanceNorm), G = 1, a tiny group variance with eps=1e-2."""
    return [("a (2, 6, 3, 4) map, G=3", (2, 6, 3, 4), 3, 1e-5, 2.0),
            ("a (3, 4, 5) sequence map, G=2", (3, 4, 5), 2, 1e-5, 2.0),
            ("a (2, 4, 2, 3) map, G=4 (InstanceNorm)", (2, 4, 2, 3), 4, 1e-5, 2.0),
            ("a (2, 6, 2, 2) map, G=1", (2, 6, 2, 2), 1, 1e-5, 2.0),
            ("a (2, 4, 3, 3) map with std ~1e-3 and eps=1e-2, G=2", (2, 4, 3, 3), 2, 1e-2,
             1e-3)]


def _gn_case(name, shape, groups, eps, scale, rng):
    c, nd = shape[1], len(shape)
    x = scale * rng.standard_normal(shape) + rng.normal(0.5, 1.0, c).reshape(
        (1, c) + (1,) * (nd - 2))
    gamma, beta = rng.uniform(0.5, 2.0, c), rng.standard_normal(c)
    dout = rng.standard_normal(shape)
    ref = _autograd(lambda a, g, b: TF.group_norm(a, groups, g, b, eps), x, gamma, beta, dout)
    refs = dict(zip(("y", "dx", "dgamma", "dbeta"), ref, strict=True))
    args = (x, groups, gamma, beta, dout, eps)
    return name, args, refs, _gn_mistakes(*args)


def _gn_mistakes(x, groups, gamma, beta, dout, eps):
    """``{output label: {message: prediction}}`` for GroupNorm programs with one slip each."""
    shape, (n, c), nd = x.shape, x.shape[:2], x.ndim
    gb, bb = _channel(gamma, nd), _channel(beta, nd)
    grouped = x.reshape(n, groups, -1)

    def affine_grouped(h):                   # x_hat in the (N, G, -1) view -> y
        return gb * h.reshape(shape) + bb

    slips = _forward_slips(grouped, -1, eps, affine_grouped, wrong_axes={})
    if 1 < groups < c:                       # G = C and G = 1 are those norms themselves
        per_channel = standardize(x, tuple(range(2, nd)), eps)[0]
        per_sample = standardize(x, tuple(range(1, nd)), eps)[0]
        strided = standardize(x.reshape(n, c // groups, groups, -1), (1, 3), eps)[0]
        slips["the statistics are per channel (that is InstanceNorm, G = C); a group pools "
              "C / G channels: reshape to (N, G, -1)"] = gb * per_channel + bb
        slips["the statistics pool the whole sample (that is LayerNorm, G = 1); reshape to "
              "(N, G, -1) and reduce over the last axis"] = gb * per_sample + bb
        slips["the channels are grouped by stride (channel c in group c % G); groups are "
              "contiguous blocks: x.reshape(N, G, -1)"] = gb * strided.reshape(shape) + bb
    pooled = standardize(grouped, (0, 2), eps)[0]
    slips["the batch axis is pooled into the statistics; each sample has its own: reduce "
          "only over the last axis of (N, G, -1)"] = affine_grouped(pooled)
    xhat_g, rstd = standardize(grouped, -1, eps)
    g = (dout * gb).reshape(grouped.shape)
    dx_slips = {k: v.reshape(shape) for k, v in _backward_slips(
        g, xhat_g, rstd, -1, dout_hat=dout.reshape(grouped.shape)).items()}
    return {"y": slips, "dx": dx_slips,
            **_param_slips(dout, x, xhat_g.reshape(shape), _bn_axes(nd))}


@checker(returns="the tuple (y, dx, dgamma, dbeta): y and dx of the input's shape, dgamma "
                 "and dbeta (C,)")
def check_group_norm(fn: Callable, *, seed: int = 0) -> CheckResult:
    """Check ``fn(x, num_groups, gamma, beta, dout, eps) -> (y, dx, dgamma, dbeta)``
    (GroupNorm over contiguous channel groups, per-channel affine) against ``F.group_norm``
    and autograd in float64: groups of several channels, one spatial axis, ``G = C``
    (InstanceNorm), ``G = 1``, a tiny group variance with ``eps = 1e-2``."""
    rng = np.random.default_rng(seed)
    cases = [_gn_case(*spec, rng) for spec in _gn_cases(rng)]
    labels = ("y", "dx", "dgamma", "dbeta")
    failure = _run(fn, cases, labels, _order(labels), "torch.nn.functional.group_norm and "
                   "autograd", _bn_shape_hint)
    if failure is not None:            # a failed CheckResult is falsy: test for None
        return failure
    return CheckResult(True, "y, dx, dgamma and dbeta match torch.nn.functional."
                       f"group_norm and autograd on {len(cases)} cases (G=3 and "
                       "G=2, one spatial axis, G=C (InstanceNorm), G=1, tiny "
                       "variance with eps=1e-2)")
