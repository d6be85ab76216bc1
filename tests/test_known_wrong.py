"""The checks can fail: deliberately wrong implementations are rejected by the very helpers the
real tests use (conftest.assert_matches, gradcheck_wrt, the numerics checks, the numerical
gradient tolerance), while the package passes the same checks on the same inputs.

Each wrong variant is a small, plausible mistake:
eps outside the square root, unbiased variance, the wrong axis, a missing affine step,
E[x^2] - E[x]^2, fp16 arithmetic, a naive mean for constant rows, batch statistics in eval,
a biased running variance, a backward pass that drops a term.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as TF
from conftest import (
    NUMERIC_GRAD_TOL,
    affine_params,
    assert_matches,
    check_constant_rows_layer_norm,
    check_large_offset_layer_norm,
    check_zero_half_input_is_finite,
    gradcheck_wrt,
    positive,
    randn,
)

from layernorm_tutorial import autograd as A
from layernorm_tutorial import functional
from layernorm_tutorial import numpy_ref as R


def _affine(y, weight, bias):
    if weight is not None:
        y = y * weight
    if bias is not None:
        y = y + bias
    return y


def _dims(input, normalized_shape):
    return tuple(range(input.dim() - len(normalized_shape), input.dim()))


# ------------------------------------------------------------------------------ wrong LNs
def ln_eps_outside_sqrt(input, normalized_shape, weight=None, bias=None, eps=1e-5):
    d = _dims(input, normalized_shape)
    mu = input.mean(d, keepdim=True)
    sigma = (input - mu).pow(2).mean(d, keepdim=True).sqrt()
    return _affine((input - mu) / (sigma + eps), weight, bias)


def ln_unbiased_variance(input, normalized_shape, weight=None, bias=None, eps=1e-5):
    d = _dims(input, normalized_shape)
    var = input.var(d, unbiased=True, keepdim=True)
    return _affine((input - input.mean(d, keepdim=True)) / torch.sqrt(var + eps), weight, bias)


def ln_wrong_axis(input, normalized_shape, weight=None, bias=None, eps=1e-5):
    """Statistics over the batch axis (batch norm's axis) instead of the features."""
    mu = input.mean(0, keepdim=True)
    var = input.var(0, unbiased=False, keepdim=True)
    return _affine((input - mu) / torch.sqrt(var + eps), weight, bias)


def ln_missing_affine(input, normalized_shape, weight=None, bias=None, eps=1e-5):
    return TF.layer_norm(input, normalized_shape, None, None, eps)


def ln_naive_variance(input, normalized_shape, weight=None, bias=None, eps=1e-5):
    """var = E[x^2] - E[x]^2: exact in real arithmetic, catastrophic in float32 at 1e4."""
    d = _dims(input, normalized_shape)
    mu = input.mean(d, keepdim=True)
    var = (input * input).mean(d, keepdim=True) - mu * mu
    return _affine((input - mu) / torch.sqrt(var + eps), weight, bias)


def ln_naive_mean(input, normalized_shape, weight=None, bias=None, eps=1e-5):
    """Correct two-pass formula, but without the shift that makes constant rows exact."""
    d = _dims(input, normalized_shape)
    xc = input - input.mean(d, keepdim=True)
    return _affine(xc / torch.sqrt(xc.pow(2).mean(d, keepdim=True) + eps), weight, bias)


def ln_in_half(input, normalized_shape, weight=None, bias=None, eps=1e-5):
    """Statistics in the input dtype even for fp16: eps=1e-12 underflows to 0."""
    d = _dims(input, normalized_shape)
    xc = input - input.mean(d, keepdim=True)
    var = xc.pow(2).mean(d, keepdim=True)
    return _affine(xc / torch.sqrt(var + torch.tensor(eps, dtype=input.dtype)), weight, bias)


LN_EXAMPLE = {
    "input": randn((4, 6), seed=0),
    "normalized_shape": (6,),
    "weight": affine_params("both", (6,), seed=0)[0],
    "bias": affine_params("both", (6,), seed=0)[1],
    "eps": 1e-5,
}


@pytest.mark.parametrize("wrong", [ln_eps_outside_sqrt, ln_unbiased_variance, ln_wrong_axis,
                                   ln_missing_affine], ids=lambda f: f.__name__)
def test_comparison_with_torch_rejects_wrong_layer_norms(wrong):
    assert_matches(functional.layer_norm, TF.layer_norm, LN_EXAMPLE)  # the package passes
    with pytest.raises(AssertionError, match="output differs"):
        assert_matches(wrong, TF.layer_norm, LN_EXAMPLE)


def test_eps_outside_sqrt_is_caught_even_with_large_variance():
    """The smallest of these errors: relative ~eps / (2 var). With var ~ 4 it is ~1e-6,
    still 10x above the float64 tolerance."""
    example = {**LN_EXAMPLE, "input": 2.0 * LN_EXAMPLE["input"]}
    assert_matches(functional.layer_norm, TF.layer_norm, example)
    with pytest.raises(AssertionError):
        assert_matches(ln_eps_outside_sqrt, TF.layer_norm, example)


def test_naive_variance_passes_float64_comparison_but_fails_the_numerics_check():
    """E[x^2] - E[x]^2 agrees with torch on N(0, 1) data in float64: only the large-offset
    float32 check (test_numerics) exposes it."""
    assert_matches(ln_naive_variance, TF.layer_norm, LN_EXAMPLE)
    check_large_offset_layer_norm(functional.layer_norm)
    with pytest.raises(AssertionError, match="max abs error"):
        check_large_offset_layer_norm(ln_naive_variance)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_constant_rows_check_rejects_a_naive_mean(dtype):
    check_constant_rows_layer_norm(functional.layer_norm, dtype)
    with pytest.raises(AssertionError, match="differ from the bias"):
        check_constant_rows_layer_norm(ln_naive_mean, dtype)


def test_zero_half_input_check_rejects_fp16_arithmetic():
    check_zero_half_input_is_finite(lambda x, eps: functional.layer_norm(x, (4,), eps=eps))
    with pytest.raises(AssertionError):
        check_zero_half_input_is_finite(lambda x, eps: ln_in_half(x, (4,), eps=eps))


# ------------------------------------------------------------------------------ wrong BNs
def bn_unbiased_normalization(input, running_mean, running_var, weight=None, bias=None,
                              training=False, momentum=0.1, eps=1e-5):
    """Normalizes with the unbiased batch variance (the running-update variance)."""
    dims = (0, *range(2, input.dim()))
    shape = (1, -1) + (1,) * (input.dim() - 2)
    out = TF.batch_norm(input, running_mean, running_var, None, None, training, momentum, eps)
    if training:
        n = input.numel() // input.shape[1]
        var = input.var(dims, unbiased=False)
        out = out * torch.sqrt((var + eps) / (var * n / (n - 1) + eps)).reshape(shape)
    return _affine(out, None if weight is None else weight.reshape(shape),
                   None if bias is None else bias.reshape(shape))


def bn_biased_running_update(input, running_mean, running_var, weight=None, bias=None,
                             training=False, momentum=0.1, eps=1e-5):
    """Correct output, but updates running_var with the biased batch variance."""
    out = TF.batch_norm(input, None, None, weight, bias, training, momentum, eps)
    if training and running_var is not None:
        dims = (0, *range(2, input.dim()))
        with torch.no_grad():
            running_mean.mul_(1 - momentum).add_(momentum * input.mean(dims))
            running_var.mul_(1 - momentum).add_(momentum * input.var(dims, unbiased=False))
    return out


def bn_batch_stats_in_eval(input, running_mean, running_var, weight=None, bias=None,
                           training=False, momentum=0.1, eps=1e-5):
    """Ignores the running statistics in eval mode."""
    return TF.batch_norm(input, None, None, weight, bias, True, momentum, eps)


def bn_example(training):
    weight, bias = affine_params("both", (3,), seed=1)
    return {"input": randn((5, 3, 2), seed=1), "running_mean": randn((3,), seed=2),
            "running_var": positive((3,), seed=3), "weight": weight, "bias": bias,
            "training": training, "momentum": 0.1, "eps": 1e-5}


@pytest.mark.parametrize(("wrong", "training", "what"), [
    (bn_unbiased_normalization, True, "output differs"),
    (bn_biased_running_update, True, "running_var after the call"),
    (bn_batch_stats_in_eval, False, "output differs"),
], ids=["unbiased-normalization", "biased-running-update", "batch-stats-in-eval"])
def test_comparison_with_torch_rejects_wrong_batch_norms(wrong, training, what):
    example = bn_example(training)
    assert_matches(functional.batch_norm, TF.batch_norm, example)
    with pytest.raises(AssertionError, match=what):
        assert_matches(wrong, TF.batch_norm, example)


# ------------------------------------------------------------------------------ wrong backward
class LayerNormMissingTerm(torch.autograd.Function):
    """Correct forward; the backward forgets the projection on x_hat:
    dx = rstd * (g - mean(g)) instead of rstd * (g - mean(g) - x_hat * mean(g * x_hat))."""

    @staticmethod
    def forward(ctx, x, eps):
        mu = x.mean(-1, keepdim=True)
        rstd = torch.rsqrt((x - mu).pow(2).mean(-1, keepdim=True) + eps)
        ctx.save_for_backward(rstd)
        return (x - mu) * rstd

    @staticmethod
    def backward(ctx, g):
        (rstd,) = ctx.saved_tensors
        return rstd * (g - g.mean(-1, keepdim=True)), None


def ln_wrong_backward(input, normalized_shape, weight=None, bias=None, eps=1e-5):
    return LayerNormMissingTerm.apply(input, eps)


def test_random_upstream_gradient_and_gradcheck_catch_a_wrong_backward():
    example = {"input": randn((4, 6), seed=4), "normalized_shape": (6,), "eps": 1e-5}
    # with upstream = ones (what .sum().backward() does) the dropped term is
    # x_hat * mean(x_hat) = 0, so the wrong backward looks right:
    assert_matches(ln_wrong_backward, TF.layer_norm, example, upstream="ones")
    # a random upstream gradient exposes it, and so does gradcheck ...
    with pytest.raises(AssertionError, match="gradient w.r.t. input"):
        assert_matches(ln_wrong_backward, TF.layer_norm, example)
    assert not gradcheck_wrt(ln_wrong_backward, example, raise_exception=False)
    # ... while the package's hand-written backward passes both
    assert_matches(A.layer_norm, TF.layer_norm, example)
    assert gradcheck_wrt(A.layer_norm, example)


def numpy_ln_backward_missing_mean(dout, cache):
    """Drops the mean(g) term of dx (as if the mean were a constant)."""
    norm, rstd, gamma = cache
    dnorm = dout * gamma
    dx = (dnorm - norm * (dnorm * norm).mean(-1, keepdims=True)) * rstd
    return dx, (dout * norm).sum(0), dout.sum(0)


def test_numerical_gradient_catches_a_wrong_numpy_backward():
    rng = np.random.default_rng(5)
    x, dout = rng.standard_normal((3, 5)), rng.standard_normal((3, 5))
    gamma, beta = rng.standard_normal(5), rng.standard_normal(5)
    _, cache = R.layer_norm_forward(x, gamma, beta)
    numeric = R.numerical_gradient(lambda v: R.layer_norm_forward(v, gamma, beta)[0], x, dout)
    np.testing.assert_allclose(R.layer_norm_backward(dout, cache)[0], numeric,
                               **NUMERIC_GRAD_TOL)
    with pytest.raises(AssertionError):
        np.testing.assert_allclose(numpy_ln_backward_missing_mean(dout, cache)[0], numeric,
                                   **NUMERIC_GRAD_TOL)
