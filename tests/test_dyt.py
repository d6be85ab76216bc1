"""Dynamic Tanh: functional.dyt, nn.DynamicTanh, autograd.DyTFunction and numpy_ref against
the formula written in torch ops and autograd in float64, finite differences, bad input."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from layernorm_tutorial import autograd as A
from layernorm_tutorial import functional as F
from layernorm_tutorial import numpy_ref as R
from layernorm_tutorial.nn import DynamicTanh, LayerNorm

F64 = torch.float64


def _data(shape, seed=0):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(shape, generator=g, dtype=F64) * 3
    w = torch.randn(shape[-1], generator=g, dtype=F64)
    b = torch.randn(shape[-1], generator=g, dtype=F64)
    a = torch.tensor([0.7], dtype=F64)
    dy = torch.randn(shape, generator=g, dtype=F64)
    return x, a, w, b, dy


def _reference(x, a, w, b):
    """The paper's formula written directly in torch ops."""
    out = torch.tanh(a * x)
    if w is not None:
        out = out * w
    return out + b if b is not None else out


def _grads(fn, tensors, dy):
    leaves = [t.clone().requires_grad_(True) if t is not None else None for t in tensors]
    out = fn(*leaves)
    wanted = [t for t in leaves if t is not None]
    return (out, *torch.autograd.grad(out, wanted, dy))


@pytest.mark.parametrize("shape", [(4, 6), (2, 3, 5), (7,)])
@pytest.mark.parametrize("params", ["both", "weight", "bias", "none"])
@pytest.mark.parametrize("impl", [F.dyt, A.dyt])
def test_dyt_and_its_gradients_match_the_formula_under_autograd(shape, params, impl):
    x, a, w, b, dy = _data(shape, seed=len(shape))
    w = w if params in ("both", "weight") else None
    b = b if params in ("both", "bias") else None
    ours = _grads(impl, (x, a, w, b), dy)
    ref = _grads(_reference, (x, a, w, b), dy)
    assert len(ours) == len(ref)
    for got, want in zip(ours, ref, strict=True):
        torch.testing.assert_close(got, want, rtol=1e-12, atol=1e-12)


def test_gradcheck_and_double_backward_of_the_hand_derived_backward():
    x, a, w, b, _ = _data((3, 4), seed=1)
    inputs = tuple(t.requires_grad_(True) for t in (x * 0.3, a, w, b))
    assert torch.autograd.gradcheck(A.dyt, inputs)
    assert torch.autograd.gradgradcheck(A.dyt, inputs)


def test_a_number_alpha_works_and_gets_no_gradient():
    x, _, w, b, dy = _data((3, 4), seed=2)
    torch.testing.assert_close(F.dyt(x, 0.5, w, b), _reference(x, torch.tensor(0.5, dtype=F64),
                                                                 w, b))
    xx = x.clone().requires_grad_(True)
    (gx,) = torch.autograd.grad(A.dyt(xx, 0.5, w, b), xx, dy)
    torch.testing.assert_close(gx, dy * w * 0.5 * (1 - torch.tanh(0.5 * x) ** 2))


def test_bf16_input_is_computed_in_fp32_and_returned_in_bf16():
    x, a, w, b, _ = _data((8, 16), seed=3)
    xb = x.to(torch.bfloat16)
    out = F.dyt(xb, a.float(), w.float(), b.float())
    assert out.dtype == torch.bfloat16
    expected = _reference(xb.float(), a.float(), w.float(), b.float()).to(torch.bfloat16)
    torch.testing.assert_close(out, expected, rtol=0, atol=0)


def test_numpy_reference_matches_torch_autograd():
    x, a, w, b, dy = _data((5, 6), seed=4)
    out, cache = R.dyt_forward(x.numpy(), float(a), w.numpy(), b.numpy())
    dx, da, dw, db = R.dyt_backward(dy.numpy(), cache)
    ref = _grads(_reference, (x, a, w, b), dy)
    for got, want in zip((out, dx, da, dw, db), ref, strict=True):
        np.testing.assert_allclose(np.asarray(got).reshape(-1), want.detach().numpy().reshape(-1),
                                   rtol=1e-12, atol=1e-12)


def test_numpy_reference_matches_finite_differences():
    x, a, w, b, dy = _data((3, 4), seed=5)
    _, cache = R.dyt_forward(x.numpy(), 0.7, w.numpy(), b.numpy())
    dx, _, _, _ = R.dyt_backward(dy.numpy(), cache)
    numeric = R.numerical_gradient(lambda z: R.dyt_forward(z, 0.7, w.numpy(), b.numpy())[0],
                                   x.numpy(), dy.numpy())
    np.testing.assert_allclose(dx, numeric, rtol=1e-6, atol=1e-8)


def test_module_parameters_and_initial_values():
    m = DynamicTanh(6)
    assert [n for n, _ in m.named_parameters()] == ["alpha", "weight", "bias"]
    assert m.alpha.shape == (1,) and float(m.alpha.detach()) == 0.5
    assert torch.equal(m.weight, torch.ones(6)) and torch.equal(m.bias, torch.zeros(6))
    x = torch.randn(2, 3, 6)
    torch.testing.assert_close(m(x), torch.tanh(0.5 * x))
    bare = DynamicTanh((2, 3), alpha_init=2.0, elementwise_affine=False)
    assert bare.weight is None and bare.bias is None and float(bare.alpha.detach()) == 2.0
    assert DynamicTanh(4, bias=False).bias is None


def test_module_is_a_drop_in_for_layer_norm_shapes():
    x = torch.randn(2, 5, 8)
    assert DynamicTanh(8)(x).shape == LayerNorm(8)(x).shape


def test_output_is_bounded_by_gamma_and_beta_unlike_layer_norm():
    """tanh saturates: |y| <= |gamma| + |beta| for any input, however large."""
    x, a, w, b, _ = _data((4, 6), seed=6)
    y = F.dyt(x * 1e6, a, w, b)
    assert bool((y.abs() <= w.abs() + b.abs() + 1e-12).all())


@pytest.mark.parametrize("alpha,error", [(True, TypeError), ("0.5", TypeError),
                                         (torch.ones(2), RuntimeError),
                                         (torch.tensor(1), RuntimeError)])
def test_rejects_a_bad_alpha(alpha, error):
    with pytest.raises(error, match="alpha"):
        F.dyt(torch.randn(2, 3), alpha)


def test_rejects_bad_parameters():
    x = torch.randn(2, 3)
    with pytest.raises(RuntimeError, match=r"normalized_shape=\[4\]"):
        F.dyt(x, 0.5, torch.ones(4))
    with pytest.raises(RuntimeError, match="bias"):
        F.dyt(x, 0.5, torch.ones(3), torch.ones(2))
    with pytest.raises(TypeError, match="input"):
        F.dyt([1.0, 2.0], 0.5)
    with pytest.raises(RuntimeError, match="weight"):
        A.dyt(x, 0.5, torch.ones(3, dtype=F64))
    with pytest.raises(TypeError, match="alpha_init"):
        DynamicTanh(3, alpha_init="big")
