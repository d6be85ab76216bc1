"""Weight normalization agrees with torch's parametrizations.weight_norm, values and gradients."""

import copy

import pytest
import torch

from layernorm_tutorial import weight_norm as wn

SHAPES_AND_DIMS = [((5, 3), 0), ((5, 3), 1), ((5, 3), None), ((5, 3), -1), ((4, 3, 2, 2), 0),
                   ((4, 3, 2, 2), 1), ((4, 3, 2, 2), -2), ((6,), 0)]


@pytest.mark.parametrize("shape,dim", SHAPES_AND_DIMS)
def test_norm_except_dim_matches_torch(shape, dim):
    v = torch.randn(shape, dtype=torch.float64)
    want = torch.norm_except_dim(v, 2, -1 if dim is None else dim)
    got = wn.norm_except_dim(v, dim)
    assert got.shape == want.shape
    torch.testing.assert_close(got, want, rtol=1e-12, atol=0)


@pytest.mark.parametrize("shape,dim", SHAPES_AND_DIMS)
def test_weight_norm_forward_and_backward_match_torch(shape, dim):
    torch.manual_seed(0)
    v = torch.randn(shape, dtype=torch.float64, requires_grad=True)
    g = (torch.rand(wn.norm_except_dim(v, dim).shape, dtype=torch.float64) + 0.5)
    g.requires_grad_(True)
    v2, g2 = v.detach().clone().requires_grad_(True), g.detach().clone().requires_grad_(True)
    ours = wn.weight_norm(v, g, dim)
    theirs = torch._weight_norm(v2, g2, -1 if dim is None else dim)
    torch.testing.assert_close(ours, theirs, rtol=1e-12, atol=1e-12)
    upstream = torch.randn_like(ours)
    ours.backward(upstream)
    theirs.backward(upstream)
    torch.testing.assert_close(v.grad, v2.grad, rtol=1e-10, atol=1e-12)
    torch.testing.assert_close(g.grad, g2.grad, rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("factory,dim", [
    (lambda: torch.nn.Linear(7, 4), 0),
    (lambda: torch.nn.Linear(7, 4), None),
    (lambda: torch.nn.Conv2d(3, 5, 3), 0),
    (lambda: torch.nn.Conv2d(3, 5, 3), 1),
])
def test_module_parametrization_matches_torch(factory, dim):
    torch.manual_seed(1)
    base = factory().double()
    ours = wn.apply_weight_norm(copy.deepcopy(base), dim=dim)
    theirs = torch.nn.utils.parametrizations.weight_norm(copy.deepcopy(base), dim=dim)
    assert list(ours.state_dict()) == list(theirs.state_dict())
    for key, value in theirs.state_dict().items():
        torch.testing.assert_close(ours.state_dict()[key], value)
    x = torch.randn(2, 3, 6, 6, dtype=torch.float64) if isinstance(base, torch.nn.Conv2d) \
        else torch.randn(3, 7, dtype=torch.float64)
    # the re-parameterization does not change the function
    torch.testing.assert_close(ours(x), base(x), rtol=1e-12, atol=1e-12)
    upstream = torch.randn_like(base(x))
    ours(x).backward(upstream)
    theirs(x).backward(upstream)
    for (name, p), (name2, p2) in zip(ours.named_parameters(), theirs.named_parameters(),
                                      strict=True):
        assert name == name2
        torch.testing.assert_close(p.grad, p2.grad, rtol=1e-10, atol=1e-12)


def test_direction_gradient_is_orthogonal_to_v():
    """The key property of the re-parameterization: dL/dv is orthogonal to v (per row)."""
    v = torch.randn(4, 6, dtype=torch.float64, requires_grad=True)
    g = torch.ones(4, 1, dtype=torch.float64)
    wn.weight_norm(v, g, 0).backward(torch.randn(4, 6, dtype=torch.float64))
    torch.testing.assert_close((v.grad * v).sum(dim=1), torch.zeros(4, dtype=torch.float64),
                               atol=1e-12, rtol=0)


def test_decompose_round_trip_and_errors():
    w = torch.randn(3, 4, dtype=torch.float64)
    g, v = wn.decompose(w, 0)
    torch.testing.assert_close(wn.weight_norm(v, g, 0), w)
    with pytest.raises(IndexError, match="dim must be in"):
        wn.norm_except_dim(w, 2)
    with pytest.raises(ValueError, match="g must have shape"):
        wn.weight_norm(w, torch.ones(4, 3), 0)
    with pytest.raises(TypeError, match="v must be a torch.Tensor"):
        wn.norm_except_dim([1.0, 2.0])
    with pytest.raises(AttributeError, match="no tensor attribute"):
        wn.apply_weight_norm(torch.nn.ReLU())
