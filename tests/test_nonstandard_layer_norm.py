"""Tests for layernorm_tutorial.lab.backward.nonstandard_layer_norm: the tutorial-style (annotated)
LayerNorm."""

import math

import pytest
import torch

from layernorm_tutorial.lab.backward.nonstandard_layer_norm import (
    AnnotatedLayerNorm,
    annotated_from_torch,
    annotated_layer_norm,
    difference_vs_torch,
    predicted_relative_gap,
)


def _rand(*shape, seed=0):
    return torch.randn(*shape, dtype=torch.float64, generator=torch.Generator().manual_seed(seed))


def test_formula_unbiased_std_eps_outside():
    x = _rand(3, 4, 6)
    gamma, beta = _rand(6, seed=1), _rand(6, seed=2)
    eps = 1e-3
    expected = gamma * (x - x.mean(-1, keepdim=True)) / (x.std(-1, keepdim=True) + eps) + beta
    torch.testing.assert_close(annotated_layer_norm(x, gamma, beta, eps), expected)


def test_module_defaults_parameters_and_gradients():
    layer = AnnotatedLayerNorm(5).double()
    assert layer.eps == 1e-6
    assert set(dict(layer.named_parameters())) == {"gamma", "beta"}
    torch.testing.assert_close(layer.gamma, torch.ones(5, dtype=torch.float64))
    torch.testing.assert_close(layer.beta, torch.zeros(5, dtype=torch.float64))
    assert "unbiased" in repr(layer)
    x = _rand(2, 5).requires_grad_()
    assert torch.autograd.gradcheck(lambda t: layer(t), (x,))


def test_gap_to_torch_follows_the_unbiased_factor():
    H = 32
    x = _rand(8, H)
    ones, zeros = torch.ones(H, dtype=torch.float64), torch.zeros(H, dtype=torch.float64)
    ratio = annotated_layer_norm(x, ones, zeros, eps=0.0) / torch.nn.functional.layer_norm(
        x, (H,), eps=0.0)
    torch.testing.assert_close(ratio, torch.full_like(ratio, math.sqrt((H - 1) / H)))
    result = difference_vs_torch([4, 64, 1024], rows=16)
    assert result["median_rel"][0] > result["median_rel"][1] > result["median_rel"][2]
    for measured, predicted in zip(result["median_rel"], result["predicted_rel"], strict=True):
        assert abs(measured - predicted) / predicted < 0.1


def test_predicted_gap_is_about_one_over_two_h():
    assert abs(predicted_relative_gap(1000) * 2000 - 1) < 1e-3
    with pytest.raises(ValueError):
        predicted_relative_gap(1)


def test_loading_torch_weights():
    torch.manual_seed(0)
    source = torch.nn.LayerNorm(64)
    with torch.no_grad():
        source.weight.normal_()
        source.bias.normal_()
    x = torch.randn(10, 64)
    with pytest.raises(RuntimeError, match="gamma"):
        AnnotatedLayerNorm(64).load_state_dict(source.state_dict())
    plain = annotated_from_torch(source)
    compensated = annotated_from_torch(source, compensate_unbiased=True)
    raw_gap = (plain(x) - source(x)).abs().max().item()
    fixed_gap = (compensated(x) - source(x)).abs().max().item()
    assert fixed_gap < raw_gap / 10
    with pytest.raises(ValueError, match="one dimension"):
        annotated_from_torch(torch.nn.LayerNorm((2, 3)))


def test_bad_inputs():
    with pytest.raises(ValueError, match="features"):
        AnnotatedLayerNorm(1)
    with pytest.raises(ValueError, match="eps"):
        AnnotatedLayerNorm(4, eps=-1.0)
    with pytest.raises(RuntimeError, match="gamma"):
        annotated_layer_norm(torch.randn(2, 4), torch.ones(3), torch.zeros(4))
    with pytest.raises(ValueError, match="last dimension"):
        annotated_layer_norm(torch.randn(3, 1), torch.ones(1), torch.zeros(1))
