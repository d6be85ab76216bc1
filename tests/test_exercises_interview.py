"""The interview drills' checkers pass correct code and name each classic mistake."""

import numpy as np
import pytest

from layernorm_tutorial import numpy_ref
from layernorm_tutorial.lab.ln_vs_bn.exercises import BatchNormWithRunningStats
from layernorm_tutorial.lab.ln_vs_bn.exercises import (
    check_running_statistics as check_batch_norm_running,
)
from layernorm_tutorial.lab.norm_family.group_norm_exercises import (
    check_group_norm,
    group_norm_via_reshape,
)
from layernorm_tutorial.lab.principles.exercises import check_layer_norm as check_layer_norm_numpy


# --------------------------------------------------------------------------- LayerNorm
def make_ln_forward(axis=-1, ddof=0, eps_outside=False, affine="both", center=True,
                    sqrt=True, use_eps=True, std_ddof1_outside=False):
    """A LayerNorm forward with one configurable mistake (defaults: correct)."""

    def forward(x, gamma, beta, eps):
        mean = x.mean(axis=axis, keepdims=True) if center else 0.0
        var = x.var(axis=axis, ddof=ddof, keepdims=True)
        e = eps if use_eps else 0.0
        if std_ddof1_outside:
            xhat = (x - mean) / (x.std(axis=axis, ddof=1, keepdims=True) + eps)
        elif eps_outside:
            xhat = (x - mean) / (np.sqrt(var) + e)
        elif not sqrt:
            xhat = (x - mean) / (var + e)
        else:
            xhat = (x - mean) / np.sqrt(var + e)
        out = {"both": gamma * xhat + beta, "none": xhat, "no_gamma": xhat + beta,
               "no_beta": gamma * xhat, "swapped": beta * xhat + gamma}[affine]
        return out, (xhat, x, gamma, eps)

    return forward


def correct_ln_backward(dout, cache):
    xhat, x, gamma, eps = cache
    rstd = 1 / np.sqrt(x.var(-1, keepdims=True) + eps)
    lead = tuple(range(x.ndim - 1))
    g = dout * gamma
    dx = rstd * (g - g.mean(-1, keepdims=True) - xhat * (g * xhat).mean(-1, keepdims=True))
    return dx, (dout * xhat).sum(lead), dout.sum(lead)


def test_layer_norm_checker_passes_reference_solution():
    result = check_layer_norm_numpy(numpy_ref.layer_norm_forward, numpy_ref.layer_norm_backward)
    assert result.passed, result.message
    assert str(result).startswith("PASS")


def test_layer_norm_checker_passes_independent_correct_code():
    assert check_layer_norm_numpy(make_ln_forward(), correct_ln_backward).passed


@pytest.mark.parametrize("kwargs, diagnosis", [
    (dict(axis=0), "axis 0"),
    (dict(axis=1), "use axis=-1, not axis=1"),
    (dict(axis=None), "whole tensor"),
    (dict(ddof=1), "unbiased"),
    (dict(eps_outside=True), "eps is added outside the square root"),
    (dict(std_ddof1_outside=True), "unbiased std with eps outside"),
    (dict(use_eps=False), "eps is missing"),
    (dict(sqrt=False), "square root is missing"),
    (dict(center=False), "mean is not subtracted"),
    (dict(affine="none"), "gamma and beta are not applied"),
    (dict(affine="no_gamma"), "gamma (the gain) is not applied"),
    (dict(affine="no_beta"), "beta (the bias) is not added"),
    (dict(affine="swapped"), "swapped"),
])
def test_layer_norm_checker_names_forward_mistake(kwargs, diagnosis):
    result = check_layer_norm_numpy(make_ln_forward(**kwargs), correct_ln_backward)
    assert not result.passed
    assert diagnosis in result.message, result.message


def test_layer_norm_checker_reports_exceptions_and_shapes():
    def crashes_on_3d(x, gamma, beta, eps):
        if x.ndim != 2:
            raise ValueError("expected a matrix")
        return make_ln_forward()(x, gamma, beta, eps)

    result = check_layer_norm_numpy(crashes_on_3d)
    assert not result.passed and "ValueError" in result.message and "axis=-1" in result.message

    def drops_keepdims(x, gamma, beta, eps):
        out, cache = make_ln_forward()(x, gamma, beta, eps)
        return out.reshape(-1), cache

    assert "output shape" in check_layer_norm_numpy(drops_keepdims).message

    def forgets_keepdims(x, gamma, beta, eps):
        xhat = (x - x.mean(-1)) / np.sqrt(x.var(-1) + eps)   # (6, 7) - (6,): broadcast error
        return gamma * xhat + beta, None

    assert "keepdims=True" in check_layer_norm_numpy(forgets_keepdims).message

    def returns_only_out(x, gamma, beta, eps):
        return make_ln_forward()(x, gamma, beta, eps)[0]

    assert check_layer_norm_numpy(returns_only_out).passed  # without a backward: out alone
    result = check_layer_norm_numpy(returns_only_out, correct_ln_backward)
    assert not result.passed and "(out, cache)" in result.message


def _backward_with(mistake):
    def backward(dout, cache):
        xhat, x, gamma, eps = cache
        rstd = 1 / np.sqrt(x.var(-1, keepdims=True) + eps)
        lead = tuple(range(x.ndim - 1))
        g = dout if mistake == "no_gamma" else dout * gamma
        mean_term = 0 if mistake in ("constants", "no_mean") else g.mean(-1, keepdims=True)
        var_term = 0 if mistake in ("constants", "no_var") else \
            xhat * (g * xhat).mean(-1, keepdims=True)
        dx = rstd * (g - mean_term - var_term)
        dgamma = dout.sum(lead) if mistake == "dgamma_no_xhat" else (dout * xhat).sum(lead)
        if mistake == "dgamma_axis0_only":
            dgamma = (dout * xhat).sum(0)
        dbeta = dout.sum(0) if mistake == "dbeta_axis0_only" else dout.sum(lead)
        if mistake == "dx_scaled":
            dx = 2 * dx
        return dx, dgamma, dbeta

    return backward


@pytest.mark.parametrize("mistake, diagnosis", [
    ("constants", "treats the mean and variance as constants"),
    ("no_mean", "misses the path through the mean"),
    ("no_var", "misses the path through the variance"),
    ("no_gamma", "dx ignores gamma"),
    ("dgamma_no_xhat", "dgamma must be sum(dout * x_hat)"),
    ("dgamma_axis0_only", "only axis 0 was summed"),
    ("dbeta_axis0_only", "dbeta has shape"),
    ("dx_scaled", "dx differs from autograd"),
])
def test_layer_norm_checker_names_backward_mistake(mistake, diagnosis):
    result = check_layer_norm_numpy(make_ln_forward(), _backward_with(mistake))
    assert not result.passed
    assert diagnosis in result.message, result.message


def test_layer_norm_checker_mentions_row_sums_for_unknown_dx_errors():
    result = check_layer_norm_numpy(make_ln_forward(), _backward_with("dx_scaled"))
    assert "row" not in result.message  # 2*dx still sums to zero per row

    def shifted(dout, cache):
        dx, dgamma, dbeta = correct_ln_backward(dout, cache)
        return dx + 0.1, dgamma, dbeta

    result = check_layer_norm_numpy(make_ln_forward(), shifted)
    assert "each row of dx should sum to 0" in result.message


# --------------------------------------------------------------------------- BatchNorm
def make_bn_class(stat_axis=0, norm_ddof=0, eps_outside=False, affine=True,
                  running_ddof=1, momentum_reversed=False, update="average",
                  eval_uses_batch=False, eval_updates=False, train_uses_running=False,
                  init_var=1.0):
    """A BatchNorm class with one configurable mistake (defaults: correct)."""

    class BN:
        def __init__(self, num_features, eps=1e-5, momentum=0.1):
            self.eps, self.momentum = eps, momentum
            self.gamma, self.beta = np.ones(num_features), np.zeros(num_features)
            self.running_mean = np.zeros(num_features)
            self.running_var = np.full(num_features, init_var)

        def _update(self, x):
            mean, var = x.mean(0), x.var(0, ddof=running_ddof)
            m = 1 - self.momentum if momentum_reversed else self.momentum
            if update == "average":
                self.running_mean = (1 - m) * self.running_mean + m * mean
                self.running_var = (1 - m) * self.running_var + m * var
            elif update == "replace":
                self.running_mean, self.running_var = mean, var

        def forward(self, x, training=True):
            if training or eval_uses_batch:
                mean = x.mean(stat_axis, keepdims=True)
                var = x.var(stat_axis, ddof=norm_ddof, keepdims=True)
            else:
                mean, var = self.running_mean, self.running_var
            if training and train_uses_running:
                mean, var = self.running_mean, self.running_var
            if training or eval_updates:
                self._update(x)
            denom = np.sqrt(var) + self.eps if eps_outside else np.sqrt(var + self.eps)
            xhat = (x - mean) / denom
            return self.gamma * xhat + self.beta if affine else xhat

    return BN


def test_batch_norm_checker_passes_reference_and_independent_solutions():
    result = check_batch_norm_running(BatchNormWithRunningStats)
    assert result.passed, result.message
    assert check_batch_norm_running(make_bn_class()).passed


@pytest.mark.parametrize("kwargs, diagnosis", [
    (dict(stat_axis=1), "per sample over the features"),
    (dict(norm_ddof=1), "normalizes with the unbiased variance"),
    (dict(eps_outside=True), "eps is added outside the square root"),
    (dict(affine=False), "gamma and beta are not applied"),
    (dict(train_uses_running=True), "training mode normalizes with the running statistics"),
    (dict(running_ddof=0), "updated with the biased batch variance"),
    (dict(momentum_reversed=True), "momentum convention reversed"),
    (dict(momentum_reversed=True, running_ddof=0), "momentum convention reversed"),
    (dict(update="replace"), "replaced by the batch statistic"),
    (dict(update="none"), "not updated in training mode"),
    (dict(eval_uses_batch=True), "evaluation mode normalizes with the batch's own statistics"),
    (dict(eval_updates=True), "must leave them untouched"),
    (dict(init_var=0.0), "running_var must start at 1"),
])
def test_batch_norm_checker_names_mistake(kwargs, diagnosis):
    result = check_batch_norm_running(make_bn_class(**kwargs))
    assert not result.passed
    assert diagnosis in result.message, result.message


def test_batch_norm_checker_reports_missing_attribute_and_bad_constructor():
    class NoRunning:
        def __init__(self, num_features, eps=1e-5, momentum=0.1):
            self.gamma, self.beta = np.ones(num_features), np.zeros(num_features)

    assert "no attribute 'running_mean'" in check_batch_norm_running(NoRunning).message

    class OnlyPositional:
        def __init__(self, num_features):
            pass

    assert "constructor" in check_batch_norm_running(OnlyPositional).message


# --------------------------------------------------------------------------- GroupNorm
def make_gn(kind="correct", ddof=0, eps_outside=False, affine="both"):
    """A GroupNorm with one configurable mistake (defaults: correct)."""

    def fn(x, num_groups, gamma, beta, eps):
        n, c = x.shape[:2]
        if kind == "strided":
            xg = x.reshape(n, c // num_groups, num_groups, -1).swapaxes(1, 2)
            axes = (2, 3)
        elif kind == "instance":
            xg, axes = x.reshape(n, c, -1), 2
        elif kind == "layer":
            xg, axes = x.reshape(n, 1, -1), 2
        elif kind == "batch_too":
            xg, axes = x.reshape(n, num_groups, -1), (0, 2)
        elif kind == "only_4d":
            h, w = x.shape[2], x.shape[3]
            xg, axes = x.reshape(n, num_groups, (c // num_groups) * h * w), 2
        else:
            xg, axes = x.reshape(n, num_groups, -1), 2
        mean = xg.mean(axes, keepdims=True)
        var = xg.var(axes, ddof=ddof, keepdims=True)
        denom = np.sqrt(var) + eps if eps_outside else np.sqrt(var + eps)
        xhat = (xg - mean) / denom
        if kind == "strided":
            xhat = xhat.swapaxes(1, 2)
        xhat = xhat.reshape(x.shape)
        shape = (1, c) + (1,) * (x.ndim - 2)
        g, b = gamma.reshape(shape), beta.reshape(shape)
        if affine == "last_axis":  # gamma broadcast against the last axis of x
            return gamma * xhat + beta
        return {"both": g * xhat + b, "none": xhat, "no_gamma": xhat + b,
                "no_beta": g * xhat}[affine]

    return fn


def test_group_norm_checker_passes_reference_and_independent_solutions():
    result = check_group_norm(group_norm_via_reshape)
    assert result.passed, result.message
    assert check_group_norm(make_gn()).passed


@pytest.mark.parametrize("kwargs, diagnosis", [
    (dict(kind="strided"), "assigned to groups by stride"),
    (dict(kind="instance"), "InstanceNorm"),
    (dict(kind="layer"), "LayerNorm / G=1"),
    (dict(kind="batch_too"), "pool the batch axis"),
    (dict(ddof=1), "unbiased"),
    (dict(eps_outside=True), "eps is added outside the square root"),
    (dict(affine="none"), "gamma and beta are not applied"),
    (dict(affine="no_gamma"), "gamma (the gain) is not applied"),
    (dict(affine="no_beta"), "beta (the bias) is not added"),
    (dict(affine="last_axis"), "broadcast over the last axis"),
    (dict(kind="only_4d"), "any number of spatial axes"),
])
def test_group_norm_checker_names_mistake(kwargs, diagnosis):
    result = check_group_norm(make_gn(**kwargs))
    assert not result.passed
    assert diagnosis in result.message, result.message
