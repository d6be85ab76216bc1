"""layernorm_tutorial.functional against torch.nn.functional.

Every property compares outputs, gradients w.r.t. input/weight/bias for a random upstream
gradient, and the tensor arguments after the call (running statistics) with torch's own op,
in float64 on random small shapes drawn by hypothesis. Low-precision dtypes are compared
with torch in the same dtype and with a float64 reference.
"""

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
    graph_node_names,
    group_norm_kwargs,
    instance_norm_kwargs,
    layer_norm_kwargs,
    non_contiguous,
    positive,
    randn,
)
from hypothesis import given

from layernorm_tutorial import functional as F


# ------------------------------------------------------------------------------ layer_norm
@given(layer_norm_kwargs())
def test_layer_norm_matches_torch(kwargs):
    assert_matches(F.layer_norm, TF.layer_norm, kwargs)


# ------------------------------------------------------------------------------ forward core
@pytest.mark.parametrize("normalized_shape", [(5,), (2, 5)])
def test_layer_norm_forward_cache_matches_torch_native_layer_norm(normalized_shape):
    """``(out, cache)``: torch's own forward returns (out, mean, rstd) in the same shapes."""
    x = randn((3, 2, 5), seed=50) * 3 + 7
    weight, bias = affine_params("both", normalized_shape, seed=50)
    out, cache = F.layer_norm_forward(x, normalized_shape, weight, bias, 1e-5)
    ref_out, ref_mean, ref_rstd = torch.native_layer_norm(x, normalized_shape, weight, bias,
                                                          1e-5)
    assert_close(out, ref_out, "out")
    assert_close(cache.mean, ref_mean, "mean")
    assert_close(cache.rstd, ref_rstd, "rstd")
    assert_close(cache.var, 1 / ref_rstd**2 - 1e-5, "var")
    assert_close(cache.norm, (x - ref_mean) * ref_rstd, "norm")


def test_layer_norm_forward_keeps_half_statistics_in_float32():
    x = randn((4, 8), seed=51).half()
    out, cache = F.layer_norm_forward(x, 8)
    assert out.dtype == torch.float16
    assert {cache.mean.dtype, cache.var.dtype, cache.rstd.dtype, cache.norm.dtype} == {
        torch.float32}


def test_standardize_over_non_trailing_dims_is_batch_norm_without_affine():
    x = randn((6, 3, 2), seed=52)
    cache = F.standardize(x, (0, 2), 1e-5)
    assert cache.mean.shape == cache.rstd.shape == (1, 3, 1)
    assert_close(cache.norm, TF.batch_norm(x, None, None, training=True), "norm")


def _affine_mode_cases():
    """Deterministic coverage of every affine mode for every function (hypothesis draws
    them too, but a small example budget need not hit each combination)."""
    x = randn((3, 4, 2, 3), seed=37)
    rm, rv = randn((4,), seed=38), positive((4,), seed=39)
    return {
        "layer_norm": (F.layer_norm, TF.layer_norm, {"input": x, "normalized_shape": (4, 2, 3)},
                       (4, 2, 3)),
        "batch_norm_train": (F.batch_norm, TF.batch_norm,
                             {"input": x, "running_mean": rm, "running_var": rv,
                              "training": True}, (4,)),
        "batch_norm_eval": (F.batch_norm, TF.batch_norm,
                            {"input": x, "running_mean": rm, "running_var": rv,
                             "training": False}, (4,)),
        "group_norm": (F.group_norm, torch_group_norm, {"input": x, "num_groups": 2}, (4,)),
        "instance_norm": (F.instance_norm, TF.instance_norm,
                          {"input": x, "running_mean": rm, "running_var": rv}, (4,)),
    }


@pytest.mark.parametrize("mode", ["both", "weight", "bias", "none"])
@pytest.mark.parametrize("case", ["layer_norm", "batch_norm_train", "batch_norm_eval",
                                  "group_norm", "instance_norm"])
def test_every_affine_mode_matches_torch(case, mode):
    ours, theirs, kwargs, param_shape = _affine_mode_cases()[case]
    weight, bias = affine_params(mode, param_shape, seed=40)
    assert_matches(ours, theirs, {**kwargs, "weight": weight, "bias": bias})


def test_layer_norm_default_arguments_match_torch():
    x = randn((3, 5), seed=0)
    assert_matches(lambda input: F.layer_norm(input, (5,)),
                   lambda input: TF.layer_norm(input, (5,)), {"input": x})


def test_layer_norm_over_chw_of_nchw_input():
    x = randn((2, 3, 4, 5), seed=1)
    weight, bias = affine_params("both", (3, 4, 5), seed=1)
    kwargs = {"input": x, "normalized_shape": (3, 4, 5), "weight": weight, "bias": bias}
    mine, _ = assert_matches(F.layer_norm, TF.layer_norm, kwargs)
    # independent statement of the semantics: each sample normalized over all of C, H, W
    flat = x.reshape(2, -1)
    xhat = (flat - flat.mean(1, keepdim=True)) / torch.sqrt(flat.var(1, unbiased=False,
                                                                       keepdim=True) + 1e-5)
    assert_close(mine.output, xhat.reshape(x.shape) * weight + bias, "output")


def test_layer_norm_normalized_shape_accepts_list_and_torch_size():
    x = randn((2, 3, 4), seed=2)
    expected = TF.layer_norm(x, (3, 4))
    for shape in ([3, 4], torch.Size([3, 4])):
        assert_close(F.layer_norm(x, shape), expected, f"output for {type(shape).__name__}")


@pytest.mark.parametrize("mode", ["both", "weight", "bias", "none"])
def test_layer_norm_one_feature_gives_exactly_the_bias(mode):
    x = randn((4, 1), seed=3)
    weight, bias = affine_params(mode, (1,), seed=3)
    out = F.layer_norm(x, (1,), weight, bias)
    expected = (bias if bias is not None else torch.zeros(1, dtype=F64)).expand(4, 1)
    assert torch.equal(out, expected), out


@pytest.mark.parametrize("batch", [(0,), (0, 3), (2, 0)])
def test_layer_norm_empty_batch(batch):
    x = randn((*batch, 4), seed=4)
    weight, bias = affine_params("both", (4,), seed=4)
    mine, _ = assert_matches(F.layer_norm, TF.layer_norm,
                             {"input": x, "normalized_shape": (4,), "weight": weight,
                              "bias": bias})
    assert mine.output.shape == x.shape
    assert torch.equal(mine.grads["weight"], torch.zeros(4, dtype=F64))


def test_layer_norm_non_contiguous_input():
    base = randn((5, 4, 3), seed=5)
    for x in (base.transpose(0, 2), non_contiguous(base), base[:, ::2]):
        assert not x.is_contiguous()
        shape = tuple(x.shape[-2:])
        weight, bias = affine_params("both", shape, seed=5)
        assert_matches(F.layer_norm, TF.layer_norm,
                       {"input": x, "normalized_shape": shape, "weight": weight, "bias": bias})


# ------------------------------------------------------------------------------ batch_norm
@given(batch_norm_kwargs())
def test_batch_norm_matches_torch(kwargs):
    assert_matches(F.batch_norm, TF.batch_norm, kwargs)


def test_batch_norm_default_arguments_match_torch():
    x = randn((4, 3), seed=6)
    rm, rv = randn((3,), seed=7), positive((3,), seed=8)
    assert_matches(lambda input, running_mean, running_var: F.batch_norm(input, running_mean,
                                                                         running_var),
                   lambda input, running_mean, running_var: TF.batch_norm(input, running_mean,
                                                                          running_var),
                   {"input": x, "running_mean": rm, "running_var": rv})


def test_batch_norm_training_normalizes_with_biased_batch_variance_and_updates_unbiased():
    """The semantics stated without torch: normalize with the batch mean and the *biased*
    variance; the running variance is updated with the *unbiased* variance."""
    n, c, length, momentum, eps = 3, 2, 2, 0.25, 1e-5
    x = randn((n, c, length), seed=9)
    rm, rv = randn((c,), seed=10), positive((c,), seed=11)
    rm0, rv0 = rm.clone(), rv.clone()
    out = F.batch_norm(x, rm, rv, training=True, momentum=momentum, eps=eps)

    per_channel = x.transpose(0, 1).reshape(c, -1)  # (C, N*L)
    mean = per_channel.mean(1)
    biased = per_channel.var(1, unbiased=False)
    unbiased = per_channel.var(1, unbiased=True)
    expected = (x - mean[:, None]) / torch.sqrt(biased[:, None] + eps)
    assert_close(out, expected, "output")
    assert_close(rm, (1 - momentum) * rm0 + momentum * mean, "running_mean")
    assert_close(rv, (1 - momentum) * rv0 + momentum * unbiased, "running_var")


def test_batch_norm_eval_uses_running_statistics():
    x = randn((5, 3, 2), seed=12)
    rm, rv = randn((3,), seed=13), positive((3,), seed=14)
    weight, bias = affine_params("both", (3,), seed=14)
    rm0, rv0 = rm.clone(), rv.clone()
    out = F.batch_norm(x, rm, rv, weight, bias, training=False, eps=1e-3)
    expected = ((x - rm0[:, None]) / torch.sqrt(rv0[:, None] + 1e-3)) * weight[:, None] \
        + bias[:, None]
    assert_close(out, expected, "output")
    assert torch.equal(rm, rm0) and torch.equal(rv, rv0), "eval must not touch running stats"


@pytest.mark.parametrize("shape", [(0, 3), (0, 3, 4), (0, 2, 2, 2)])
def test_batch_norm_zero_size_batch_leaves_running_stats_alone(shape):
    x = randn(shape, seed=15)
    c = shape[1]
    rm, rv = randn((c,), seed=16), positive((c,), seed=17)
    rm0, rv0 = rm.clone(), rv.clone()
    out = F.batch_norm(x, rm, rv, training=True, momentum=0.5)
    assert out.shape == x.shape
    assert torch.equal(rm, rm0) and torch.equal(rv, rv0)
    weight, bias = affine_params("both", (c,), seed=17)
    assert_matches(F.batch_norm, TF.batch_norm,
                   {"input": x, "running_mean": rm0, "running_var": rv0, "weight": weight,
                    "bias": bias, "training": True, "momentum": 0.5})


@pytest.mark.parametrize("momentum", [0.0, 1.0])
def test_batch_norm_momentum_extremes(momentum):
    x = randn((4, 2), seed=18)
    rm, rv = randn((2,), seed=19), positive((2,), seed=20)
    rm0, rv0 = rm.clone(), rv.clone()
    F.batch_norm(x, rm, rv, training=True, momentum=momentum)
    if momentum == 0.0:
        assert torch.equal(rm, rm0) and torch.equal(rv, rv0)
    else:
        assert_close(rm, x.mean(0), "running_mean")
        assert_close(rv, x.var(0, unbiased=True), "running_var")


# ------------------------------------------------------------------------------ group_norm
def torch_group_norm(input, num_groups, weight=None, bias=None, eps=1e-5):
    """torch's group_norm, working around a torch 2.13 bug: with bias but no weight, its
    backward w.r.t. bias fails ("tensor does not have a device"). weight=ones is the same
    function of (input, bias)."""
    if weight is None and bias is not None:
        weight = torch.ones(input.shape[1], dtype=input.dtype)
    return TF.group_norm(input, num_groups, weight, bias, eps)


@given(group_norm_kwargs())
def test_group_norm_matches_torch(kwargs):
    assert_matches(F.group_norm, torch_group_norm, kwargs)


def test_group_norm_default_arguments_match_torch():
    x = randn((2, 6, 3), seed=21)
    assert_matches(lambda input: F.group_norm(input, 3), lambda input: TF.group_norm(input, 3),
                   {"input": x})


def test_group_norm_empty_batch():
    x = randn((0, 4, 3), seed=36)
    weight, bias = affine_params("both", (4,), seed=36)
    kwargs = {"input": x, "num_groups": 2, "weight": weight, "bias": bias}
    assert_close(F.group_norm(**kwargs), TF.group_norm(**kwargs), "output")
    # torch 2.13's group_norm backward fails on an empty batch, so check ours directly
    mine = evaluate(F.group_norm, kwargs)
    assert mine.output.shape == (0, 4, 3)
    for name in ("input", "weight", "bias"):
        assert torch.equal(mine.grads[name], torch.zeros_like(kwargs[name])), name


def test_group_norm_extremes_are_layer_norm_and_instance_norm():
    x = randn((2, 4, 3), seed=22)
    assert_close(F.group_norm(x, 1), TF.layer_norm(x, (4, 3)), "group_norm with one group")
    assert_close(F.group_norm(x, 4), TF.instance_norm(x), "group_norm with C groups")


# ------------------------------------------------------------------------------ instance_norm
@given(instance_norm_kwargs())
def test_instance_norm_matches_torch(kwargs):
    assert_matches(F.instance_norm, TF.instance_norm, kwargs)


def test_instance_norm_default_arguments_match_torch():
    x = randn((2, 3, 4), seed=23)
    assert_matches(lambda input: F.instance_norm(input), lambda input: TF.instance_norm(input),
                   {"input": x})


def test_instance_norm_running_stats_average_the_per_instance_statistics():
    n, c, momentum = 3, 2, 0.5
    x = randn((n, c, 5), seed=24)
    rm, rv = randn((c,), seed=25), positive((c,), seed=26)
    rm0, rv0 = rm.clone(), rv.clone()
    F.instance_norm(x, rm, rv, momentum=momentum)
    assert_close(rm, (1 - momentum) * rm0 + momentum * x.mean(2).mean(0), "running_mean")
    assert_close(rv, (1 - momentum) * rv0 + momentum * x.var(2, unbiased=True).mean(0),
                 "running_var")


# ------------------------------------------------------------------------------ rms_norm
@given(layer_norm_kwargs(rms=True, allow_rms_eps_none=True))
def test_rms_norm_matches_torch(kwargs):
    assert_matches(F.rms_norm, TF.rms_norm, kwargs)


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
def test_rms_norm_default_eps_is_machine_epsilon_of_the_dtype(dtype):
    # tiny values, so that eps dominates the mean square and the default is visible
    x = torch.full((2, 4), 1e-9, dtype=dtype)
    eps = torch.finfo(dtype).eps
    expected = x / torch.sqrt(x.pow(2).mean(-1, keepdim=True) + eps)
    assert_close(F.rms_norm(x, (4,)), expected, "rms_norm with eps=None")
    assert_close(F.rms_norm(x, (4,)), TF.rms_norm(x, (4,)), "rms_norm vs torch")


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_rms_norm_default_eps_for_half_inputs_is_that_of_float32_like_torch(dtype):
    """torch takes eps=None as the machine epsilon of the *compute* dtype (fp32 for fp16/bf16):
    on x = 1e-4 the fp16 epsilon (9.8e-4) would give 0.003 instead of 0.278."""
    x = torch.full((2, 4), 1e-4, dtype=dtype)
    out = F.rms_norm(x, (4,))
    expected = x.float() / torch.sqrt(x.float().pow(2).mean(-1, keepdim=True)
                                      + torch.finfo(torch.float32).eps)
    assert_close(out, expected.to(dtype), "rms_norm with eps=None", dtype=dtype)
    assert_close(out, TF.rms_norm(x, (4,)), "rms_norm vs torch", dtype=dtype)


def test_rms_norm_formula():
    x = randn((3, 2, 4), seed=27)
    weight = randn((2, 4), seed=28)
    out = F.rms_norm(x, (2, 4), weight, eps=1e-6)
    ms = x.pow(2).mean(dim=(-2, -1), keepdim=True)
    assert_close(out, x / torch.sqrt(ms + 1e-6) * weight, "output")


# ------------------------------------------------------------------------------ low precision
def _low_precision_cases():
    x = randn((4, 3, 5), seed=29)
    w3, b3 = affine_params("both", (3,), seed=30)
    w5, b5 = affine_params("both", (5,), seed=31)
    rm, rv = randn((3,), seed=32), positive((3,), seed=33)
    return {
        "layer_norm": ("layer_norm", {"input": x, "normalized_shape": (5,), "weight": w5,
                                      "bias": b5}),
        "batch_norm_train": ("batch_norm", {"input": x, "running_mean": rm, "running_var": rv,
                                            "weight": w3, "bias": b3, "training": True}),
        "batch_norm_eval": ("batch_norm", {"input": x, "running_mean": rm, "running_var": rv,
                                           "weight": w3, "bias": b3, "training": False}),
        "group_norm": ("group_norm", {"input": x, "num_groups": 3, "weight": w3, "bias": b3}),
        "instance_norm": ("instance_norm", {"input": x, "running_mean": rm,
                                            "running_var": rv, "weight": w3, "bias": b3}),
        "rms_norm": ("rms_norm", {"input": x, "normalized_shape": (5,), "weight": w5}),
        "rms_norm_default_eps": ("rms_norm", {"input": x, "normalized_shape": (5,)}),
    }


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32])
@pytest.mark.parametrize("case", sorted(_low_precision_cases()))
def test_low_precision_returns_input_dtype_and_matches_torch(case, dtype):
    name, kwargs64 = _low_precision_cases()[case]
    kwargs = {k: v.to(dtype) if isinstance(v, torch.Tensor) else v
              for k, v in kwargs64.items()}
    ours, theirs = getattr(F, name), getattr(TF, name)
    mine, _ = assert_matches(ours, theirs, kwargs, dtype=dtype)
    assert mine.output.dtype == dtype
    assert all(g.dtype == dtype for g in mine.grads.values())
    # and against a float64 computation on the same (rounded) values
    upcast = {k: v.to(F64) if isinstance(v, torch.Tensor) else v for k, v in kwargs.items()}
    reference = evaluate(theirs, upcast, ())
    assert_close(mine.output.to(F64), reference.output, "output vs float64", dtype=dtype)


@pytest.mark.parametrize("training", [True, False])
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_batch_norm_half_input_with_float32_statistics_and_parameters(dtype, training):
    """Mixed precision as under autocast: fp16/bf16 activations, fp32 running statistics and
    affine parameters. Output in the input's dtype, statistics stay fp32, as torch."""
    weight, bias = affine_params("both", (3,), seed=41, dtype=torch.float32)
    kwargs = {"input": randn((4, 3, 5), seed=41, dtype=dtype),
              "running_mean": randn((3,), seed=42, dtype=torch.float32),
              "running_var": positive((3,), seed=43, dtype=torch.float32),
              "weight": weight, "bias": bias, "training": training}
    mine, _ = assert_matches(F.batch_norm, TF.batch_norm, kwargs, dtype=dtype)
    assert mine.output.dtype == dtype
    assert mine.tensors_after["running_var"].dtype == torch.float32


def test_half_layer_norm_is_computed_in_float32():
    """Values whose square overflows fp16 (300^2 = 90000 > 65504): a computation in fp16
    would produce inf/nan; computing in fp32 gives the exact normalized values."""
    x64 = torch.tensor([[300.0, -300.0, 100.0, -100.0]], dtype=F64)
    out = F.layer_norm(x64.half(), (4,))
    assert out.dtype == torch.float16 and torch.isfinite(out).all()
    assert_close(out.to(F64), TF.layer_norm(x64, (4,)), "output", dtype=torch.float16)


def test_functions_do_not_promote_float32_to_float64():
    x = randn((2, 3, 4), seed=34, dtype=torch.float32)
    assert F.layer_norm(x, (4,)).dtype == torch.float32
    assert F.rms_norm(x, (4,)).dtype == torch.float32
    assert F.group_norm(x, 3).dtype == torch.float32
    assert F.instance_norm(x).dtype == torch.float32
    assert F.batch_norm(x, None, None, training=True).dtype == torch.float32


def test_outputs_are_differentiable_by_autograd_for_every_function():
    x = randn((3, 2, 4), seed=35).requires_grad_(True)
    for out in (F.layer_norm(x, (4,)), F.rms_norm(x, (4,)), F.group_norm(x, 2),
                F.instance_norm(x), F.batch_norm(x, None, None, training=True)):
        assert out.requires_grad and out.grad_fn is not None


def test_functional_ops_do_not_call_torch_normalization_ops():
    """Issue 2: the package builds the norms from elementary ops. A call into torch's own
    kernels would show up as its backward node in the graph."""
    x = randn((3, 2, 4), seed=16).requires_grad_(True)
    w2 = torch.ones(2, dtype=F64, requires_grad=True)
    outputs = {
        "layer_norm": F.layer_norm(x, (4,)),
        "batch_norm": F.batch_norm(x, None, None, w2, training=True),
        "group_norm": F.group_norm(x, 2, w2),
        "instance_norm": F.instance_norm(x, weight=w2),
        "rms_norm": F.rms_norm(x, (4,)),
    }
    for name, out in outputs.items():
        names = graph_node_names(out)
        assert not any(n.startswith(TORCH_NATIVE_NORM_NODES) for n in names), (name, names)
