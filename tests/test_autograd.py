"""layernorm_tutorial.autograd: LayerNorm/BatchNorm as autograd.Functions with hand-derived
backward passes, checked against torch (outputs and gradients for random upstream gradients)
and with torch.autograd.gradcheck (finite differences in float64)."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as TF
from conftest import (
    F64,
    TORCH_NATIVE_NORM_NODES,
    affine_params,
    assert_close,
    assert_matches,
    batch_norm_kwargs,
    evaluate,
    gradcheck_wrt,
    graph_node_names,
    layer_norm_kwargs,
    positive,
    randn,
)
from hypothesis import given

from layernorm_tutorial import autograd as A
from layernorm_tutorial import functional as F


# ------------------------------------------------------------------------------ vs torch
@given(layer_norm_kwargs())
def test_layer_norm_matches_torch(kwargs):
    assert_matches(A.layer_norm, TF.layer_norm, kwargs)


@given(batch_norm_kwargs())
def test_batch_norm_matches_torch(kwargs):
    assert_matches(A.batch_norm, TF.batch_norm, kwargs)


def test_default_arguments_match_torch():
    x = randn((4, 3), seed=0)
    rm, rv = randn((3,), seed=1), positive((3,), seed=2)
    assert_matches(lambda input: A.layer_norm(input, (3,)),
                   lambda input: TF.layer_norm(input, (3,)), {"input": x})
    assert_matches(lambda input: A.batch_norm(input, rm, rv),
                   lambda input: TF.batch_norm(input, rm, rv), {"input": x})


@pytest.mark.parametrize("shape", [(1,), (4,), (2, 3)])
def test_layer_norm_input_without_batch_dims(shape):
    """Regression: with input.dim() == len(normalized_shape) the backward summed dweight
    over *all* dims (torch's .sum(()) reduces everything) and returned a scalar."""
    weight, bias = affine_params("both", shape, seed=20)
    kwargs = {"input": randn(shape, seed=20), "normalized_shape": shape, "weight": weight,
              "bias": bias}
    assert_matches(A.layer_norm, TF.layer_norm, kwargs)
    assert gradcheck_wrt(A.layer_norm, {k: v for k, v in kwargs.items()
                                        if k != "normalized_shape"}, normalized_shape=shape)


@pytest.mark.parametrize("mode", ["both", "weight", "bias", "none"])
def test_layer_norm_one_feature_gives_exactly_the_bias(mode):
    x = randn((3, 1), seed=3)
    weight, bias = affine_params(mode, (1,), seed=3)
    out = A.layer_norm(x, (1,), weight, bias)
    expected = (bias if bias is not None else torch.zeros(1, dtype=F64)).expand(3, 1)
    assert torch.equal(out, expected), out


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_low_precision_inputs_return_input_dtype(dtype):
    x = randn((4, 3, 5), seed=4)
    w5, b5 = affine_params("both", (5,), seed=5)
    w3, b3 = affine_params("both", (3,), seed=6)
    cases = [
        (A.layer_norm, TF.layer_norm,
         {"input": x, "normalized_shape": (5,), "weight": w5, "bias": b5}),
        (A.batch_norm, TF.batch_norm,
         {"input": x, "running_mean": randn((3,), seed=7), "running_var": positive((3,), 8),
          "weight": w3, "bias": b3, "training": True}),
    ]
    for ours, theirs, kwargs64 in cases:
        kwargs = {k: v.to(dtype) if isinstance(v, torch.Tensor) else v
                  for k, v in kwargs64.items()}
        mine, _ = assert_matches(ours, theirs, kwargs, dtype=dtype)
        assert mine.output.dtype == dtype
        assert all(g.dtype == dtype for g in mine.grads.values())


def test_autograd_and_functional_agree():
    x = randn((3, 2, 4), seed=9)
    weight, bias = affine_params("both", (2, 4), seed=9)
    kwargs = {"input": x, "normalized_shape": (2, 4), "weight": weight, "bias": bias}
    assert_matches(A.layer_norm, F.layer_norm, kwargs)


# ------------------------------------------------------------------------------ gradcheck
@pytest.mark.parametrize("mode", ["both", "weight", "bias", "none"])
@pytest.mark.parametrize("normalized_shape", [(4,), (2, 3)])
def test_layer_normgradcheck_wrt(mode, normalized_shape):
    weight, bias = affine_params(mode, normalized_shape, seed=10)
    gradcheck_wrt(A.layer_norm, {"input": randn((3, *normalized_shape), seed=10),
                              "weight": weight, "bias": bias},
               normalized_shape=normalized_shape)


@pytest.mark.parametrize("training", [True, False])
@pytest.mark.parametrize("shape", [(4, 3), (2, 3, 2), (2, 2, 2, 2)])
def test_batch_normgradcheck_wrt(training, shape):
    c = shape[1]
    weight, bias = affine_params("both", (c,), seed=11)
    gradcheck_wrt(A.batch_norm, {"input": randn(shape, seed=11), "weight": weight, "bias": bias,
                              "running_mean": randn((c,), seed=12),
                              "running_var": positive((c,), seed=13)},
               training=training, momentum=0.1, eps=1e-5)


def test_batch_norm_gradcheck_without_running_stats_or_affine():
    gradcheck_wrt(A.batch_norm, {"input": randn((5, 2), seed=14), "running_mean": None,
                              "running_var": None}, training=True)


# ------------------------------------------------------------------------------ structure
def test_functions_are_autograd_functions():
    assert issubclass(A.LayerNormFunction, torch.autograd.Function)
    assert issubclass(A.BatchNormFunction, torch.autograd.Function)


def test_backward_runs_through_the_hand_written_functions():
    x = randn((4, 3), seed=15).requires_grad_(True)
    ln_nodes = graph_node_names(A.layer_norm(x, (3,)))
    bn_nodes = graph_node_names(A.batch_norm(x, None, None, training=True))
    assert "LayerNormFunctionBackward" in ln_nodes, ln_nodes
    assert "BatchNormFunctionBackward" in bn_nodes, bn_nodes
    for names in (ln_nodes, bn_nodes):
        assert not any(n.startswith(TORCH_NATIVE_NORM_NODES) for n in names), names


def test_running_stats_are_updated_like_torch():
    x = randn((6, 2, 3), seed=17)
    kwargs = {"input": x, "running_mean": randn((2,), seed=18),
              "running_var": positive((2,), seed=19), "training": True, "momentum": 0.3}
    mine = evaluate(A.batch_norm, kwargs)
    ref = evaluate(TF.batch_norm, kwargs)
    for key in ("running_mean", "running_var"):
        assert_close(mine.tensors_after[key], ref.tensors_after[key], key)
