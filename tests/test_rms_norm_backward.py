"""The hand-derived RMS norm backward (autograd.RMSNormFunction and numpy_ref) against torch's
``rms_norm`` and autograd in float64, finite differences, and double backward."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as TF

from layernorm_tutorial import autograd as A
from layernorm_tutorial import numpy_ref as R

F64 = torch.float64
SHAPES = [((4, 6), (6,)), ((2, 3, 5), (5,)), ((2, 3, 4), (3, 4)), ((5,), (5,))]


def _data(shape, norm_shape, seed):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(shape, generator=g, dtype=F64) * 2 + 0.5
    w = torch.randn(norm_shape, generator=g, dtype=F64)
    dy = torch.randn(shape, generator=g, dtype=F64)
    return x, w, dy


def _grads(fn, x, w, dy):
    x = x.clone().requires_grad_(True)
    w = None if w is None else w.clone().requires_grad_(True)
    out = fn(x, w)
    inputs = (x,) if w is None else (x, w)
    return (out, *torch.autograd.grad(out, inputs, dy))


@pytest.mark.parametrize("shape,norm_shape", SHAPES)
@pytest.mark.parametrize("eps", [None, 1e-6, 0.3])
@pytest.mark.parametrize("affine", [True, False])
def test_matches_torch_rms_norm_and_its_gradients(shape, norm_shape, eps, affine):
    x, w, dy = _data(shape, norm_shape, seed=len(shape))
    w = w if affine else None
    ours = _grads(lambda x, w: A.rms_norm(x, norm_shape, w, eps), x, w, dy)
    ref = _grads(lambda x, w: TF.rms_norm(x, norm_shape, w, eps), x, w, dy)
    assert len(ours) == len(ref)
    for a, b in zip(ours, ref, strict=True):
        torch.testing.assert_close(a, b, rtol=1e-12, atol=1e-12)


def test_gradcheck_and_double_backward():
    x, w, _ = _data((3, 4, 5), (5,), seed=1)
    x.requires_grad_(True)
    w.requires_grad_(True)
    fn = lambda x, w: A.rms_norm(x, (5,), w, 1e-6)  # noqa: E731
    assert torch.autograd.gradcheck(fn, (x, w))
    assert torch.autograd.gradgradcheck(fn, (x, w))


def test_gradient_penalty_matches_torch():
    """create_graph=True: the gradient of ||dL/dx||^2 with respect to x and w."""
    x, w, dy = _data((4, 6), (6,), seed=2)
    results = []
    for fn in (A.rms_norm, TF.rms_norm):
        xx, ww = x.clone().requires_grad_(True), w.clone().requires_grad_(True)
        (gx,) = torch.autograd.grad((fn(xx, (6,), ww, 1e-5) * dy).sum(), xx, create_graph=True)
        results.append(torch.autograd.grad((gx**2).sum(), (xx, ww)))
    for a, b in zip(*results, strict=True):
        torch.testing.assert_close(a, b, rtol=1e-10, atol=1e-12)


def test_bf16_input_gives_bf16_output_and_gradient_close_to_torch():
    x, w, dy = _data((8, 16), (16,), seed=3)
    xb = x.to(torch.bfloat16).requires_grad_(True)
    out = A.rms_norm(xb, (16,), w.float())
    assert out.dtype == torch.bfloat16
    (gx,) = torch.autograd.grad(out, xb, dy.to(torch.bfloat16))
    xr = x.to(torch.bfloat16).requires_grad_(True)
    (gr,) = torch.autograd.grad(TF.rms_norm(xr, (16,), w.float()), xr, dy.to(torch.bfloat16))
    assert gx.dtype == torch.bfloat16
    torch.testing.assert_close(gx.float(), gr.float(), rtol=2e-2, atol=2e-2)


def test_rejects_a_weight_of_the_wrong_shape():
    with pytest.raises(RuntimeError, match="weight"):
        A.rms_norm(torch.randn(2, 4), (4,), torch.ones(3))


@pytest.mark.parametrize("shape", [(4, 6), (2, 3, 5)])
def test_numpy_reference_matches_torch_autograd(shape):
    x, w, dy = _data(shape, shape[-1:], seed=4)
    out, cache = R.rms_norm_forward(x.numpy(), w.numpy(), eps=1e-6)
    dx, dw = R.rms_norm_backward(dy.numpy(), cache)
    ref_out, ref_dx, ref_dw = _grads(lambda x, w: TF.rms_norm(x, shape[-1:], w, 1e-6), x, w, dy)
    np.testing.assert_allclose(out, ref_out.detach().numpy(), rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(dx, ref_dx.numpy(), rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(dw, ref_dw.numpy(), rtol=1e-10, atol=1e-12)


def test_numpy_reference_matches_finite_differences():
    x, w, dy = _data((3, 5), (5,), seed=5)
    _, cache = R.rms_norm_forward(x.numpy(), w.numpy())
    dx, _ = R.rms_norm_backward(dy.numpy(), cache)
    numeric = R.numerical_gradient(lambda z: R.rms_norm_forward(z, w.numpy())[0], x.numpy(),
                                   dy.numpy())
    np.testing.assert_allclose(dx, numeric, rtol=1e-6, atol=1e-8)


def test_rms_backward_is_layer_norm_backward_on_centred_rows():
    """With rows of zero mean, mean(g) is the only difference: the RMS formula equals LN's
    only when mean(gamma * dy) = 0 too; check the identity the chapter states."""
    x, w, dy = _data((4, 6), (6,), seed=6)
    x = x - x.mean(-1, keepdim=True)
    _, rc = R.rms_norm_forward(x.numpy(), w.numpy(), eps=1e-5)
    _, lc = R.layer_norm_forward(x.numpy(), w.numpy(), np.zeros(6), eps=1e-5)
    g = dy.numpy() * w.numpy()
    c2 = g.mean(-1, keepdims=True)
    dx_rms, _ = R.rms_norm_backward(dy.numpy(), rc)
    dx_ln, _, _ = R.layer_norm_backward(dy.numpy(), lc)
    np.testing.assert_allclose(dx_rms - c2 * lc[1], dx_ln, rtol=1e-10, atol=1e-12)


def test_numpy_reference_rejects_a_gamma_of_the_wrong_shape():
    with pytest.raises(ValueError, match="gamma"):
        R.rms_norm_forward(np.ones((2, 4)), np.ones(3))
