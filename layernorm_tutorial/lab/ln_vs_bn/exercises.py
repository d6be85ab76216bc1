"""Checkers and reference solutions for the BatchNorm exercises (LN-vs-BN and interview drills).

``check_running_statistics(solution)`` checks running statistics in either of the book's two
exercise forms:

* a class (the interview drill): ``cls(num_features, eps=1e-5, momentum=0.1)`` with NumPy
  attributes ``gamma``, ``beta``, ``running_mean``, ``running_var`` (shape ``(C,)``) and
  ``forward(x, training) -> out`` for ``x`` of shape ``(N, C)``;
* an update function (the LN-vs-BN exercise):
  ``fn(running_mean, running_var, batch, momentum, step) -> (new_mean, new_var)`` on torch
  tensors, ``momentum=None`` meaning the cumulative average.

Both follow torch's conventions, :eq:`eq-running-stats`
(:func:`layernorm_tutorial.running_stats.update_running_stats`): the batch is normalized with
its biased variance, ``running = (1 - momentum) * running + momentum * batch_stat`` with the
unbiased variance stored. ``check_masked_batch_norm`` and ``check_combine_statistics`` are the
LN-vs-BN chapter's other two exercises.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import torch
import torch.nn.functional as TF

from layernorm_tutorial import functional
from layernorm_tutorial.lab.common.checking import (
    CheckResult,
    allclose,
    as_numpy,
    checker,
    diagnose,
    output_dtype,
    reader_array,
    reader_tuple,
    returned_none,
    tolerance,
    within,
)
from layernorm_tutorial.running_stats import update_running_stats
from layernorm_tutorial.variance_algorithms import merge_moments

__all__ = [
    "BatchNormWithRunningStats",
    "check_combine_statistics",
    "check_masked_batch_norm",
    "check_running_statistics",
    "reference_combine_statistics",
    "reference_masked_batch_norm",
    "reference_running_update",
]


# ---- reference solutions ----------------------------------------------------------------
class BatchNormWithRunningStats:
    r"""NumPy BatchNorm for ``(N, C)`` inputs with PyTorch's running-statistics conventions.

    Training: normalize with the batch mean and *biased* variance over axis 0, then update
    the running statistics by :eq:`eq-running-stats` (the package's one update,
    :func:`~layernorm_tutorial.running_stats.update_running_stats`, which stores the
    *unbiased* variance). Evaluation: normalize with the running statistics, unchanged.
    """

    def __init__(self, num_features: int, eps: float = 1e-5, momentum: float = 0.1):
        if num_features < 1:
            raise ValueError(f"num_features must be a positive int, got {num_features}")
        self.eps, self.momentum = eps, momentum
        self.gamma = np.ones(num_features)
        self.beta = np.zeros(num_features)
        self.running_mean = np.zeros(num_features)
        self.running_var = np.ones(num_features)

    def forward(self, x, training: bool = True):
        x = np.asarray(x, dtype=np.float64)
        if x.ndim != 2 or x.shape[1] != self.gamma.shape[0]:
            raise ValueError(f"x must have shape (N, {self.gamma.shape[0]}), got {x.shape}")
        if training:
            if x.shape[0] < 2:
                raise ValueError("training needs at least 2 samples per batch (got 1): "
                                 "a single sample has no batch variance")
            mean, var = x.mean(axis=0), x.var(axis=0)    # (C,), biased: used to normalize
            running_mean, running_var = self.running_mean.copy(), self.running_var.copy()
            update_running_stats(torch.from_numpy(running_mean), torch.from_numpy(running_var),
                                 torch.from_numpy(mean), torch.from_numpy(var), x.shape[0],
                                 self.momentum)          # updates the two arrays in place
            self.running_mean, self.running_var = running_mean, running_var
        else:
            mean, var = self.running_mean, self.running_var
        return self.gamma * (x - mean) / np.sqrt(var + self.eps) + self.beta


def reference_running_update(running_mean, running_var, batch, momentum, step):
    """New ``(running_mean, running_var)`` after one training batch of shape ``(N, C)``.

    ``momentum=None`` means the cumulative average: factor ``1 / step``, where ``step``
    counts the batches seen including this one (:eq:`eq-running-stats`).
    """
    new_mean, new_var = running_mean.clone(), running_var.clone()
    update_running_stats(new_mean, new_var, batch.mean(dim=0), batch.var(dim=0, unbiased=False),
                         batch.shape[0], momentum, num_batches_tracked=step)
    return new_mean, new_var


def reference_masked_batch_norm(x, mask, eps: float = 1e-5):
    """Batch norm of x (B, T, C) per channel over the real tokens only (mask True = real).

    Padding positions are returned as 0.
    """
    real = x[mask]  # (number of real tokens, C)
    out = (x - real.mean(dim=0)) / torch.sqrt(real.var(dim=0, unbiased=False) + eps)
    return out * mask.unsqueeze(-1).to(x.dtype)


def reference_combine_statistics(counts, means, variances):
    """Merge per-rank (count, mean, biased variance) into the statistics of the union
    (:func:`layernorm_tutorial.variance_algorithms.merge_moments`, Chan et al. 1983)."""
    return merge_moments(means, variances, counts)


# ---- mistake models ---------------------------------------------------------------------
def _update_mistakes(label, old, batch_stat, m, biased_var=None) -> dict:
    """Running-statistic values after one update, for each classic mistake (``m`` the factor)."""
    out = {
        f"{label}: momentum convention reversed; momentum is the weight of the NEW batch in "
        "torch: running = (1 - momentum) * running + momentum * batch (momentum=0.1 keeps 90% "
        "of the old value)": m * old + (1 - m) * batch_stat,
        f"{label} is replaced by the batch statistic instead of averaged: "
        "running = (1 - momentum) * running + momentum * batch": batch_stat,
        f"{label} is not updated in training mode": old,
    }
    if biased_var is not None:
        out["running_var was updated with the biased batch variance; torch stores the "
            "UNBIASED one, var * N / (N - 1), although it normalizes with the biased one"] = \
            (1 - m) * old + m * biased_var
        out["running_var: momentum convention reversed and the biased variance"] = \
            m * old + (1 - m) * biased_var
        out["running_var holds a running standard deviation: store the running (unbiased) "
            "variance, and take the square root only when normalizing"] = \
            (1 - m) * old + m * np.sqrt(batch_stat)
        out["running_var holds a running (biased) standard deviation: store the running "
            "unbiased variance"] = (1 - m) * old + m * np.sqrt(biased_var)
    return out


def _moments(x, axis, ddof=0):
    return x.mean(axis=axis, keepdims=True), x.var(axis=axis, ddof=ddof, keepdims=True)


def _train_output_mistakes(x, gamma, beta, eps, running_mean, running_var) -> dict:
    mean, var = _moments(x, 0)
    _, uvar = _moments(x, 0, ddof=1)
    smean, svar = _moments(x, 1)
    xhat = (x - mean) / np.sqrt(var + eps)
    return {
        "training statistics are taken per sample over the features (axis 1, that is "
        "LayerNorm); BatchNorm reduces over the batch, axis 0":
            gamma * (x - smean) / np.sqrt(svar + eps) + beta,
        "training mode normalizes with the running statistics; it must use the current "
        "batch's mean and biased variance":
            gamma * (x - running_mean) / np.sqrt(running_var + eps) + beta,
        "training mode normalizes with the unbiased variance (N-1); normalize with the biased "
        "batch variance (divide by N)": gamma * (x - mean) / np.sqrt(uvar + eps) + beta,
        "eps is added outside the square root; use (x-mean)/sqrt(var+eps)":
            gamma * (x - mean) / (np.sqrt(var) + eps) + beta,
        "gamma and beta are not applied: return gamma * x_hat + beta": xhat,
        "gamma (the gain) is not applied": xhat + beta,
        "beta (the bias) is not added": gamma * xhat,
    }


def _eval_output_mistakes(x, gamma, beta, eps, running_mean, running_var, momentum) -> dict:
    mean, var = _moments(x, 0)
    out = {
        "evaluation mode normalizes with the batch's own statistics; it must use "
        "running_mean and running_var": gamma * (x - mean) / np.sqrt(var + eps) + beta,
        "evaluation mode: eps is added outside the square root":
            gamma * (x - running_mean) / (np.sqrt(running_var) + eps) + beta,
        "evaluation mode does not apply gamma and beta":
            (x - running_mean) / np.sqrt(running_var + eps),
    }
    if x.shape[0] > 1:
        rm = (1 - momentum) * running_mean + momentum * mean
        rv = (1 - momentum) * running_var + momentum * x.var(axis=0, ddof=1, keepdims=True)
        out["evaluation mode updates the running statistics with this batch before "
            "normalizing; in evaluation mode they must be used as they are, never updated"] = \
            gamma * (x - rm) / np.sqrt(rv + eps) + beta
    return out


def _verdict(where: str, got, expected, mistakes: dict, fallback: str) -> CheckResult | None:
    tol = tolerance(expected, output_dtype(got))
    if within(got, expected, tol):
        return None
    mistake = diagnose([(got, expected, tol, mistakes)])
    if mistake is None:
        error = np.max(np.abs(as_numpy(got) - as_numpy(expected)))
        mistake = f"{fallback} (max abs error {error:.3e})"
    return CheckResult(False, f"{where}: {mistake}")


def _call(fn, *args):
    try:
        value = fn(*args)
    except Exception as err:  # the reader's bug is reported, not raised
        return None, CheckResult(False, f"your code raised {type(err).__name__}: {err}")
    if value is None:  # also for a method of the reader's class, which checker() cannot watch
        raise returned_none(fn)
    return value, None


# ---- checkers ---------------------------------------------------------------------------
@checker(returns="the pair (new_running_mean, new_running_var) of shape (C,) (the class "
                 "form: forward returns an output of x's shape)")
def check_running_statistics(solution, *, seed: int = 0) -> CheckResult:
    """Check running statistics written as a class or as an update function (module doc)."""
    if isinstance(solution, type):
        return _check_class(solution, seed)
    return _check_update_function(solution, seed)


def _check_update_function(fn: Callable, seed: int) -> CheckResult:
    gen = torch.Generator().manual_seed(seed + 2)
    for momentum in (0.1, 0.5, None):
        rm = torch.zeros(3, dtype=torch.float64)
        rv = torch.ones(3, dtype=torch.float64)
        for step in range(1, 4):
            batch = torch.randn(5, 3, generator=gen, dtype=torch.float64) * 2 + step
            want_mean, want_var = reference_running_update(rm, rv, batch, momentum, step)
            result, error = _call(fn, rm.clone(), rv.clone(), batch.clone(), momentum, step)
            if error is not None:
                return error
            result = reader_tuple(result, fn, 2, "the pair (new_running_mean, new_running_var)")
            for label, value in zip(("new_running_mean", "new_running_var"), result,
                                    strict=True):
                reader_array(value, fn, (3,), label)
            m = momentum if momentum is not None else 1.0 / step
            b = batch.numpy()
            where = f"momentum={momentum}, step {step}"
            fallback = ("momentum=None is the cumulative average: use the factor 1/step "
                        "(step counts this batch too); {label} differs" if momentum is None
                        else "{label} differs from torch's BatchNorm1d")
            for label, got, want, old, stat, biased in (
                    ("running_mean", result[0], want_mean, rm.numpy(), b.mean(0), None),
                    ("running_var", result[1], want_var, rv.numpy(), b.var(0, ddof=1),
                     b.var(0))):
                failure = _verdict(where, got, want, _update_mistakes(
                    label, old, stat, m, biased), fallback.format(label=label))
                if failure is not None:
                    return failure
            rm, rv = want_mean, want_var
    return CheckResult(True, "running mean and variance match torch's BatchNorm1d for "
                       "momentum 0.1, 0.5 and None (cumulative average) over three steps")


def _check_initial_buffers(layer, c: int) -> CheckResult | None:
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
    return None


def _check_class(cls, seed: int) -> CheckResult:
    """Construct with C=4; three training steps (batches of 8, 5 and 2; a feature with tiny
    variance, a constant feature) checking outputs and running statistics; two evaluation
    steps (6 samples, 1 sample) with one feature's running variance set to 1e-6."""
    rng = np.random.default_rng(seed)
    c, eps, momentum = 4, 1e-5, 0.1
    try:
        layer = cls(c, eps=eps, momentum=momentum)
    except Exception as exc:
        return CheckResult(False, f"constructor cls(4, eps=1e-5, momentum=0.1) raised "
                           f"{type(exc).__name__}: {exc}")
    failure = _check_initial_buffers(layer, c)
    if failure is not None:
        return failure
    gamma, beta = rng.uniform(0.5, 2.0, c), rng.standard_normal(c)
    layer.gamma, layer.beta = gamma.copy(), beta.copy()
    t = torch.as_tensor
    rm, rv = torch.zeros(c, dtype=torch.float64), torch.ones(c, dtype=torch.float64)
    batches = [3.0 * rng.standard_normal((8, c)) + 1.0, rng.standard_normal((5, c)) - 2.0,
               rng.standard_normal((2, c))]
    batches[0][:, 3] *= 1e-3  # a feature with std ~3e-3: eps matters
    batches[2][:, 0] = 0.7  # a constant feature: zero batch variance
    for step, x in enumerate(batches, start=1):
        old_mean, old_var = rm.numpy().copy(), rv.numpy().copy()
        expected = TF.batch_norm(t(x), rm, rv, t(gamma), t(beta), training=True,
                                 momentum=momentum, eps=eps).numpy()
        where = f"training step {step} (batch of {x.shape[0]})"
        out, error = _call(layer.forward, x.copy(), True)
        if error is not None:
            return CheckResult(False, f"forward(x, training=True) at {where}: {error.message}")
        if reader_array(out, layer.forward).shape != x.shape:
            return CheckResult(False, f"{where}: output shape {as_numpy(out).shape}, "
                               f"expected {x.shape}")
        failure = _verdict(where, out, expected, _train_output_mistakes(
            x, gamma, beta, eps, old_mean, old_var), "output differs from "
            "F.batch_norm(training=True)")
        if failure is not None:
            return failure
        for label, got, ref, old, stat, biased in (
                ("running_mean", layer.running_mean, rm, old_mean, x.mean(0), None),
                ("running_var", layer.running_var, rv, old_var, x.var(0, ddof=1), x.var(0))):
            failure = _verdict(f"after {where}", got, ref, _update_mistakes(
                label, old, stat, momentum, biased), f"{label} differs from torch's update")
            if failure is not None:
                return failure
        # keep the reader's state aligned with the reference for the next step
        layer.running_mean, layer.running_var = rm.numpy().copy(), rv.numpy().copy()

    rv[3] = 1e-6  # a feature whose running variance is tiny: eps matters in evaluation
    layer.running_var = rv.numpy().copy()
    for where, x in [("evaluation on a batch of 6", rng.standard_normal((6, c)) + 0.3),
                     ("evaluation on a single sample", rng.standard_normal((1, c)))]:
        rm_before, rv_before = rm.numpy().copy(), rv.numpy().copy()
        expected = TF.batch_norm(t(x), rm, rv, t(gamma), t(beta), training=False,
                                 eps=eps).numpy()
        out, error = _call(layer.forward, x.copy(), False)
        if error is not None:
            return CheckResult(False, f"forward(x, training=False) in {where}: "
                               f"{error.message}")
        failure = _verdict(where, out, expected, _eval_output_mistakes(
            x, gamma, beta, eps, rm_before, rv_before, momentum),
            "output differs from F.batch_norm(training=False)")
        if failure is not None:
            return failure
        if not (allclose(layer.running_mean, rm_before) and
                allclose(layer.running_var, rv_before)):
            return CheckResult(False, f"{where}: the running statistics changed; evaluation "
                               "mode must leave them untouched")
    return CheckResult(True, "training outputs, running_mean/running_var updates (momentum "
                       "0.1, unbiased variance) and evaluation outputs match "
                       "torch.nn.functional.batch_norm over 3 training and 2 evaluation steps")


@checker(returns="an output of x's shape (B, T, C)")
def check_masked_batch_norm(fn) -> CheckResult:
    """``fn(x, mask)`` must normalize real tokens with statistics of real tokens only."""
    gen = torch.Generator().manual_seed(3)
    x = torch.randn(3, 6, 4, generator=gen, dtype=torch.float64) * 2 + 1
    lengths = torch.tensor([6, 3, 2])
    mask = torch.arange(6).unsqueeze(0) < lengths.unsqueeze(1)
    x = x * mask.unsqueeze(-1)  # padding positions hold zeros, as after embedding a pad id
    got, error = _call(fn, x, mask)
    if error is not None:
        return error
    want = reference_masked_batch_norm(x, mask)
    got = torch.as_tensor(reader_array(got, fn, tuple(x.shape)))
    if allclose(got[mask], want[mask], rtol=1e-6, atol=1e-8):
        return CheckResult(True, "real tokens are normalized with statistics of the 11 real "
                           "tokens only; padding does not leak in")
    plain = functional.batch_norm(x.transpose(1, 2), None, None, training=True).transpose(1, 2)
    if allclose(got[mask], plain[mask], rtol=1e-6, atol=1e-8):
        return CheckResult(False, "the statistics include the padding positions")
    return CheckResult(False, "real tokens' outputs differ from batch norm over the real tokens"
                       f" (max |error| {float((got[mask] - want[mask]).abs().max()):.3g})")


@checker(returns="the pair (mean, variance), each of shape (C,)")
def check_combine_statistics(fn) -> CheckResult:
    """``fn(counts, means, variances)`` must return the union's mean and biased variance."""
    gen = torch.Generator().manual_seed(4)
    shards = [torch.randn(n, 3, generator=gen, dtype=torch.float64) * s + o
              for n, s, o in ((5, 1.0, 0.0), (9, 2.0, 3.0), (2, 0.5, -1.0))]
    counts = [s.shape[0] for s in shards]
    means = torch.stack([s.mean(0) for s in shards])
    variances = torch.stack([s.var(0, unbiased=False) for s in shards])
    result, error = _call(fn, counts, means, variances)
    if error is not None:
        return error
    full = torch.cat(shards)
    mean, var = reader_tuple(result, fn, 2, "the pair (mean, variance)")
    mean, var = (reader_array(value, fn, (3,), label)
                 for value, label in ((mean, "the mean"), (var, "the variance")))
    if not allclose(mean, full.mean(0)):
        if allclose(mean, means.mean(0)):
            return CheckResult(False, "the mean averages the shard means without weighting "
                               "by their counts")
        return CheckResult(False, "the combined mean is wrong")
    if allclose(var, full.var(0, unbiased=False)):
        return CheckResult(True, "mean and variance equal those of the concatenated shards "
                           "(unequal shard sizes included)")
    within_shards = (torch.tensor(counts, dtype=torch.float64)[:, None] * variances).sum(0)
    if allclose(var, within_shards / full.shape[0]) or allclose(var, variances.mean(0)):
        return CheckResult(False, "the variance misses the between-shard term "
                           "n_r (m_r - mean)^2: averaging variances is not enough")
    return CheckResult(False, "the combined variance is wrong (biased variance of the union "
                       "expected)")
