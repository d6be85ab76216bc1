"""layernorm_tutorial.numpy_ref: the NumPy forward/backward in the (out, cache) style.

Forward passes are compared with torch in float64; backward passes with the central-difference
``numerical_gradient`` (for a random upstream gradient ``dout``) and with torch's autograd.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as TF
from conftest import NUMERIC_GRAD_TOL, seeds
from hypothesis import given
from hypothesis import strategies as st

from layernorm_tutorial import numpy_ref as R

NUMERIC = NUMERIC_GRAD_TOL
EXACT = {"rtol": 1e-9, "atol": 1e-10}


def rng_arrays(seed: int, n: int, d: int, *, leading: tuple[int, ...] = ()):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((*leading, n, d))
    gamma = rng.standard_normal(d)
    beta = rng.standard_normal(d)
    dout = rng.standard_normal((*leading, n, d))
    return x, gamma, beta, dout


def torch_reference(kind: str, x, gamma, beta, dout, eps):
    """Output and (dx, dgamma, dbeta) from torch's own ops for upstream gradient ``dout``."""
    tx, tg, tb = (torch.from_numpy(a).requires_grad_(True) for a in (x, gamma, beta))
    if kind == "layer":
        out = TF.layer_norm(tx, (x.shape[-1],), tg, tb, eps)
    else:
        out = TF.batch_norm(tx, None, None, tg, tb, training=True, eps=eps)
    grads = torch.autograd.grad(out, (tx, tg, tb), torch.from_numpy(dout))
    return out.detach().numpy(), tuple(g.numpy() for g in grads)


shapes = st.tuples(seeds, st.integers(2, 5), st.integers(2, 6), st.sampled_from([1e-5, 1e-3]))


# ------------------------------------------------------------------------------ layer norm
@given(shapes)
def test_layer_norm_forward_and_backward_match_torch(case):
    seed, n, d, eps = case
    x, gamma, beta, dout = rng_arrays(seed, n, d)
    out, cache = R.layer_norm_forward(x, gamma, beta, eps)
    dx, dgamma, dbeta = R.layer_norm_backward(dout, cache)
    ref_out, (ref_dx, ref_dgamma, ref_dbeta) = torch_reference("layer", x, gamma, beta, dout,
                                                               eps)
    np.testing.assert_allclose(out, ref_out, **EXACT, err_msg="out")
    np.testing.assert_allclose(dx, ref_dx, **EXACT, err_msg="dx")
    np.testing.assert_allclose(dgamma, ref_dgamma, **EXACT, err_msg="dgamma")
    np.testing.assert_allclose(dbeta, ref_dbeta, **EXACT, err_msg="dbeta")


@given(shapes)
def test_layer_norm_backward_matches_numerical_gradient(case):
    seed, n, d, eps = case
    x, gamma, beta, dout = rng_arrays(seed, n, d)
    _, cache = R.layer_norm_forward(x, gamma, beta, eps)
    dx, dgamma, dbeta = R.layer_norm_backward(dout, cache)
    num_dx = R.numerical_gradient(lambda v: R.layer_norm_forward(v, gamma, beta, eps)[0],
                                  x, dout)
    num_dgamma = R.numerical_gradient(lambda v: R.layer_norm_forward(x, v, beta, eps)[0],
                                      gamma, dout)
    num_dbeta = R.numerical_gradient(lambda v: R.layer_norm_forward(x, gamma, v, eps)[0],
                                     beta, dout)
    np.testing.assert_allclose(dx, num_dx, **NUMERIC, err_msg="dx")
    np.testing.assert_allclose(dgamma, num_dgamma, **NUMERIC, err_msg="dgamma")
    np.testing.assert_allclose(dbeta, num_dbeta, **NUMERIC, err_msg="dbeta")


def test_layer_norm_normalizes_over_the_last_axis_of_a_3d_array():
    x, gamma, beta, dout = rng_arrays(0, 3, 4, leading=(2,))
    out, cache = R.layer_norm_forward(x, gamma, beta)
    ref_out, ref_grads = torch_reference("layer", x, gamma, beta, dout, 1e-5)
    np.testing.assert_allclose(out, ref_out, **EXACT)
    for name, mine, ref in zip(("dx", "dgamma", "dbeta"), R.layer_norm_backward(dout, cache),
                               ref_grads, strict=True):
        np.testing.assert_allclose(mine, ref, **EXACT, err_msg=name)


def test_layer_norm_default_eps_is_1e_5():
    x, gamma, beta, _ = rng_arrays(1, 3, 2)
    x[:, 1] = x[:, 0] + 1e-3  # tiny variance, so that eps visibly matters
    out, _ = R.layer_norm_forward(x, gamma, beta)
    ref = TF.layer_norm(torch.from_numpy(x), (2,), torch.from_numpy(gamma),
                        torch.from_numpy(beta), eps=1e-5).numpy()
    np.testing.assert_allclose(out, ref, **EXACT)


# ------------------------------------------------------------------------------ batch norm
@given(shapes)
def test_batch_norm_forward_and_backward_match_torch(case):
    seed, n, d, eps = case
    x, gamma, beta, dout = rng_arrays(seed, n, d)
    out, cache = R.batch_norm_forward(x, gamma, beta, eps)
    grads = R.batch_norm_backward(dout, cache)
    ref_out, ref_grads = torch_reference("batch", x, gamma, beta, dout, eps)
    np.testing.assert_allclose(out, ref_out, **EXACT, err_msg="out")
    for name, mine, ref in zip(("dx", "dgamma", "dbeta"), grads, ref_grads, strict=True):
        np.testing.assert_allclose(mine, ref, **EXACT, err_msg=name)


@given(shapes)
def test_batch_norm_backward_matches_numerical_gradient(case):
    seed, n, d, eps = case
    x, gamma, beta, dout = rng_arrays(seed, n, d)
    _, cache = R.batch_norm_forward(x, gamma, beta, eps)
    dx, dgamma, dbeta = R.batch_norm_backward(dout, cache)
    num_dx = R.numerical_gradient(lambda v: R.batch_norm_forward(v, gamma, beta, eps)[0],
                                  x, dout)
    num_dgamma = R.numerical_gradient(lambda v: R.batch_norm_forward(x, v, beta, eps)[0],
                                      gamma, dout)
    num_dbeta = R.numerical_gradient(lambda v: R.batch_norm_forward(x, gamma, v, eps)[0],
                                     beta, dout)
    np.testing.assert_allclose(dx, num_dx, **NUMERIC, err_msg="dx")
    np.testing.assert_allclose(dgamma, num_dgamma, **NUMERIC, err_msg="dgamma")
    np.testing.assert_allclose(dbeta, num_dbeta, **NUMERIC, err_msg="dbeta")


def test_batch_norm_uses_batch_statistics_over_axis_0():
    x, gamma, beta, _ = rng_arrays(2, 5, 3)
    out, _ = R.batch_norm_forward(x, gamma, beta, 1e-5)
    expected = (x - x.mean(0)) / np.sqrt(x.var(0) + 1e-5) * gamma + beta  # biased variance
    np.testing.assert_allclose(out, expected, **EXACT)


# ------------------------------------------------------------------------------ the helpers
def test_numerical_gradient_of_known_functions():
    rng = np.random.default_rng(3)
    x = rng.standard_normal((3, 4))
    dout = rng.standard_normal((3, 4))
    x_before = x.copy()
    np.testing.assert_allclose(R.numerical_gradient(lambda v: v**2, x, dout), 2 * x * dout,
                               **NUMERIC)
    np.testing.assert_array_equal(x, x_before)  # x restored after the perturbations
    a = rng.standard_normal((4, 2))
    dout2 = rng.standard_normal((3, 2))
    np.testing.assert_allclose(R.numerical_gradient(lambda v: v @ a, x, dout2), dout2 @ a.T,
                               **NUMERIC)


def test_numerical_gradient_step_size_is_a_parameter():
    x = np.array([0.5, -1.0, 2.0])
    dout = np.ones(3)
    # central differences are exact for quadratics, whatever the step
    np.testing.assert_allclose(R.numerical_gradient(lambda v: v**2, x, dout, h=1e-2), 2 * x,
                               rtol=1e-10)
    # ...and have an O(h^2) error for cubics: 3x^2 + h^2
    np.testing.assert_allclose(R.numerical_gradient(lambda v: v**3, x, dout, h=1e-2),
                               3 * x**2 + 1e-4, rtol=1e-8)


@pytest.mark.parametrize("kind", ["layer", "batch"])
def test_forward_and_backward_do_not_modify_their_arguments(kind):
    forward = R.layer_norm_forward if kind == "layer" else R.batch_norm_forward
    backward = R.layer_norm_backward if kind == "layer" else R.batch_norm_backward
    x, gamma, beta, dout = rng_arrays(4, 4, 3)
    copies = [a.copy() for a in (x, gamma, beta, dout)]
    out, cache = forward(x, gamma, beta)
    grads = backward(dout, cache)
    for before, after in zip(copies, (x, gamma, beta, dout), strict=True):
        np.testing.assert_array_equal(before, after)
    assert isinstance(out, np.ndarray) and out.shape == x.shape
    assert [g.shape for g in grads] == [x.shape, gamma.shape, beta.shape]
    assert all(isinstance(g, np.ndarray) for g in grads)
