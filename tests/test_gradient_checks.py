"""Central finite differences (lab.backward.gradient_checks) against exact gradients."""

import pytest
import torch

from layernorm_tutorial.lab.backward.gradient_checks import central_differences


def test_matches_autograd_on_layer_norm_for_every_input():
    g = torch.Generator().manual_seed(0)
    x = torch.randn(3, 5, generator=g, dtype=torch.float64)
    w = torch.randn(5, generator=g, dtype=torch.float64)
    b = torch.randn(5, generator=g, dtype=torch.float64)
    dout = torch.randn(3, 5, generator=g, dtype=torch.float64)

    def loss(x_, w_, b_):
        return (dout * torch.nn.functional.layer_norm(x_, (5,), w_, b_)).sum()

    leaves = [t.clone().requires_grad_() for t in (x, w, b)]
    exact = torch.autograd.grad(loss(*leaves), leaves)
    numeric = central_differences(loss, (x, w, b))
    for got, want in zip(numeric, exact, strict=True):
        torch.testing.assert_close(got, want, rtol=1e-7, atol=1e-9)
    assert torch.equal(x, leaves[0].detach())          # inputs untouched


def test_a_wrong_gradient_is_caught():
    x = torch.linspace(-1, 1, 7, dtype=torch.float64)
    (numeric,) = central_differences(lambda t: (t**3).sum(), (x,))
    torch.testing.assert_close(numeric, 3 * x**2, rtol=1e-8, atol=1e-9)
    assert (numeric - 2 * x**2).abs().max() > 0.1


@pytest.mark.parametrize("args, error, match", [
    (((torch.ones(2),),), TypeError, r"tensors\[0\] must be a float64"),
    (((),), ValueError, "at least one"),
    (((torch.ones(2, dtype=torch.float64),), 0.0), ValueError, "h must be positive"),
])
def test_bad_arguments(args, error, match):
    with pytest.raises(error, match=match):
        central_differences(lambda t: t.sum(), *args)
