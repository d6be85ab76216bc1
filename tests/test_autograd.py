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
def test_layer_norm_gradcheck_wrt_input_weight_bias(mode, normalized_shape):
    weight, bias = affine_params(mode, normalized_shape, seed=10)
    gradcheck_wrt(A.layer_norm, {"input": randn((3, *normalized_shape), seed=10),
                              "weight": weight, "bias": bias},
               normalized_shape=normalized_shape)


@pytest.mark.parametrize("training", [True, False])
@pytest.mark.parametrize("shape", [(4, 3), (2, 3, 2), (2, 2, 2, 2)])
def test_batch_norm_gradcheck_wrt_input_weight_bias(training, shape):
    c = shape[1]
    weight, bias = affine_params("both", (c,), seed=11)
    gradcheck_wrt(A.batch_norm, {"input": randn(shape, seed=11), "weight": weight, "bias": bias,
                              "running_mean": randn((c,), seed=12),
                              "running_var": positive((c,), seed=13)},
               training=training, momentum=0.1, eps=1e-5)


def test_batch_norm_gradcheck_without_running_stats_or_affine():
    gradcheck_wrt(A.batch_norm, {"input": randn((5, 2), seed=14), "running_mean": None,
                              "running_var": None}, training=True)


# ------------------------------------------------------------------------------ double backward
def _leaves(tensors):
    return {k: v.detach().clone().requires_grad_(True) if isinstance(v, torch.Tensor) else v
            for k, v in tensors.items()}


@pytest.mark.parametrize("mode", ["both", "weight", "bias", "none"])
@pytest.mark.parametrize("normalized_shape", [(4,), (2, 3)])
def test_layer_norm_gradgradcheck(mode, normalized_shape):
    """Regression (issue 12, item 1): the backward must itself be differentiable."""
    weight, bias = affine_params(mode, normalized_shape, seed=30)
    names = ["input"] + [n for n, t in (("weight", weight), ("bias", bias)) if t is not None]
    given = {"input": randn((3, *normalized_shape), seed=30), "weight": weight, "bias": bias}
    leaves = [given[n].clone().requires_grad_(True) for n in names]

    def call(*values):
        kwargs = {**given, **dict(zip(names, values, strict=True))}
        return A.layer_norm(kwargs["input"], normalized_shape, kwargs["weight"], kwargs["bias"])

    assert torch.autograd.gradgradcheck(call, leaves, eps=1e-6, atol=1e-5, rtol=1e-4)


def _batch_norm_with_fresh_stats(batch_norm, training, seed):
    """``batch_norm(input, weight, bias)`` with copies of fixed running statistics, so that
    repeated calls (finite differences, two implementations) see the same statistics."""
    rm, rv = randn((3,), seed=seed), positive((3,), seed=seed + 1)

    def call(input, weight, bias):
        return batch_norm(input, rm.clone(), rv.clone(), weight, bias, training=training)

    return call


@pytest.mark.parametrize("training", [True, False])
def test_batch_norm_gradgradcheck(training):
    weight, bias = affine_params("both", (3,), seed=31)
    call = _batch_norm_with_fresh_stats(A.batch_norm, training, seed=32)
    leaves = [t.clone().requires_grad_(True) for t in (randn((5, 3, 2), seed=31), weight, bias)]
    assert torch.autograd.gradgradcheck(call, leaves, eps=1e-6, atol=1e-5, rtol=1e-4)


def _hessian_vector_products(fn, tensors, seed):
    """(H v) for the scalar <fn(**tensors), u>, w.r.t. every tensor leaf, with random u, v."""
    leaves = _leaves(tensors)
    names = [k for k, v in leaves.items() if isinstance(v, torch.Tensor) and v.requires_grad]
    out = fn(**leaves)
    upstream = randn(out.shape, seed=seed)
    grads = torch.autograd.grad((out * upstream).sum(), [leaves[n] for n in names],
                                create_graph=True)
    directions = [randn(leaves[n].shape, seed=seed + 1 + i) for i, n in enumerate(names)]
    inner = sum((g * d).sum() for g, d in zip(grads, directions, strict=True))
    hvps = torch.autograd.grad(inner, [leaves[n] for n in names], allow_unused=True)
    return {n: (h if h is not None else torch.zeros_like(leaves[n]))
            for n, h in zip(names, hvps, strict=True)}


@pytest.mark.parametrize("mode", ["both", "weight", "none"])
def test_layer_norm_hessian_vector_product_matches_torch(mode):
    """Regression (issue 12, item 1): with gamma requiring grad, the second-order term for
    the input was silently dropped (the saved x_hat and rstd carried no graph)."""
    weight, bias = affine_params(mode, (6,), seed=40)
    tensors = {"input": randn((4, 6), seed=40), "normalized_shape": (6,), "weight": weight,
               "bias": bias}
    mine = _hessian_vector_products(A.layer_norm, tensors, seed=41)
    ref = _hessian_vector_products(TF.layer_norm, tensors, seed=41)
    for name in mine:
        assert_close(mine[name], ref[name], f"Hv w.r.t. {name}")
    assert mine["input"].abs().max() > 1e-3  # a real second-order term, not zeros


@pytest.mark.parametrize("training", [True, False])
def test_batch_norm_hessian_vector_product_matches_torch(training):
    weight, bias = affine_params("both", (3,), seed=42)
    tensors = {"input": randn((5, 3, 2), seed=42), "weight": weight, "bias": bias}
    mine = _hessian_vector_products(_batch_norm_with_fresh_stats(A.batch_norm, training, 43),
                                    tensors, seed=45)
    ref = _hessian_vector_products(_batch_norm_with_fresh_stats(TF.batch_norm, training, 43),
                                   tensors, seed=45)
    for name in mine:
        assert_close(mine[name], ref[name], f"Hv w.r.t. {name}")


def test_plain_backward_uses_the_saved_cache_and_stays_first_order():
    """Without create_graph the gradient is a constant of the graph (no extra recompute
    graph is attached), and it still equals torch's."""
    x = randn((4, 5), seed=46).requires_grad_(True)
    (dx,) = torch.autograd.grad(A.layer_norm(x, (5,)).pow(3).sum(), x)
    (ref,) = torch.autograd.grad(TF.layer_norm(x, (5,)).pow(3).sum(), x)
    assert dx.grad_fn is None and not dx.requires_grad
    assert_close(dx, ref, "dx")


# ------------------------------------------------------------------------------ structure
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
