"""The principles/backward exercises' checkers (one LayerNorm checker, the Welford checker)
accept the reference solutions and diagnose the usual mistakes."""

import numpy as np

from layernorm_tutorial import numpy_ref
from layernorm_tutorial.lab.backward.exercises import check_welford_update
from layernorm_tutorial.lab.principles.exercises import check_layer_norm
from layernorm_tutorial.variance_algorithms import welford_update


def _forward(x, gamma, beta, eps, *, ddof=0, eps_outside=False, axis=-1, affine=True):
    mean = x.mean(axis, keepdims=True)
    xshift = x - mean
    var = (xshift**2).sum(axis, keepdims=True) / (x.shape[axis] - ddof)
    denom = np.sqrt(var) + eps if eps_outside else np.sqrt(var + eps)
    norm = xshift / denom
    out = gamma * norm + beta if affine else norm
    return out, (norm, gamma, 1.0 / denom)


def test_forward_checker_passes_reference_and_diagnoses():
    assert check_layer_norm(numpy_ref.layer_norm_forward).passed
    assert check_layer_norm(lambda *a: _forward(*a)[0]).passed  # out alone is fine
    cases = {"unbiased": dict(ddof=1), "outside": dict(eps_outside=True),
             "axis 0": dict(axis=0), "gamma and beta": dict(affine=False)}
    for word, kwargs in cases.items():
        result = check_layer_norm(lambda x, g, b, e, kw=kwargs: _forward(x, g, b, e, **kw))
        assert not result.passed and word in result.message, (word, result.message)
    broken = check_layer_norm(lambda *a: 1 / 0)
    assert not broken.passed and "ZeroDivisionError" in broken.message


def _backward(dout, cache, *, terms=("mean", "norm")):
    norm, gamma, rstd = cache
    axes = tuple(range(dout.ndim - 1))
    dnorm = dout * gamma
    dx = dnorm.copy()
    if "mean" in terms:
        dx = dx - dnorm.mean(-1, keepdims=True)
    if "norm" in terms:
        dx = dx - norm * (dnorm * norm).mean(-1, keepdims=True)
    return rstd * dx, (dout * norm).sum(axes), dout.sum(axes)


def test_backward_checker_passes_reference_and_diagnoses():
    assert check_layer_norm(numpy_ref.layer_norm_forward, numpy_ref.layer_norm_backward).passed
    assert check_layer_norm(_forward, _backward).passed
    for terms, word in (((), "as constants"), (("norm",), "path through the mean"),
                        (("mean",), "path through the variance")):
        result = check_layer_norm(_forward, lambda d, c, t=terms: _backward(d, c, terms=t))
        assert not result.passed and word in result.message, (terms, result.message)

    def wrong_dbeta(dout, cache):
        dx, dgamma, dbeta = _backward(dout, cache)
        return dx, dgamma, dout.mean(tuple(range(dout.ndim - 1)))

    result = check_layer_norm(_forward, wrong_dbeta)
    assert not result.passed and "dbeta" in result.message


def test_welford_checker():
    assert check_welford_update(welford_update).passed

    def old_mean_twice(count, mean, m2, value):
        count += 1
        delta = value - mean
        return count, mean + delta / count, m2 + delta * delta

    result = check_welford_update(old_mean_twice)
    assert not result.passed and "new mean" in result.message

    def naive(count, mean, m2, value):  # goes through sum(x**2): loses digits in float32
        sum_of_squares = m2 + count * mean * mean + value * value
        count += 1
        mean_new = mean + (value - mean) / count
        return count, mean_new, sum_of_squares - count * mean_new * mean_new

    result = check_welford_update(naive)
    assert not result.passed and "float32" in result.message
