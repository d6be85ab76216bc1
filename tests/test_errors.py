"""Bad input everywhere: the package raises the exception type torch raises for the same
mistake, and its message names the offending argument (and the expected size where there is
one). Each case runs torch first, so a change in torch's behaviour shows up here too."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as TF
from conftest import F64, randn

from layernorm_tutorial import autograd as A
from layernorm_tutorial import functional as F
from layernorm_tutorial import nn as ours_nn
from layernorm_tutorial import numpy_ref as R


def x(*shape):
    return randn(shape, seed=0)


def ones(n):
    return torch.ones(n, dtype=F64)


# (case id, function name, args, kwargs, regex the message must match)
FUNCTIONAL_CASES = [
    # layer_norm
    ("ln-shape-mismatch", "layer_norm", (x(2, 3, 4), (5,)), {}, r"normalized_shape.*5"),
    ("ln-shape-too-long", "layer_norm", (x(3, 4), (2, 3, 4)), {}, r"normalized_shape"),
    ("ln-shape-empty", "layer_norm", (x(3, 4), ()), {}, r"normalized_shape"),
    ("ln-weight-shape", "layer_norm", (x(2, 5), (5,), ones(3)), {}, r"weight.*5|5.*weight"),
    ("ln-bias-shape", "layer_norm", (x(2, 5), (5,), None, ones(3)), {}, r"bias.*5|5.*bias"),
    ("ln-weight-2d", "layer_norm", (x(2, 3, 4), (3, 4), ones(4)), {}, r"weight"),
    ("ln-input-list", "layer_norm", ([[1.0, 2.0]], (2,)), {}, r"input"),
    ("ln-weight-list", "layer_norm", (x(2, 2), (2,), [1.0, 1.0]), {}, r"weight"),
    # rms_norm
    ("rms-shape-mismatch", "rms_norm", (x(2, 3, 4), (5,)), {}, r"normalized_shape.*5"),
    ("rms-shape-empty", "rms_norm", (x(3, 4), ()), {}, r"normalized_shape"),
    ("rms-weight-shape", "rms_norm", (x(2, 5), (5,), ones(3)), {}, r"weight.*5|5.*weight"),
    ("rms-input-list", "rms_norm", ([[1.0, 2.0]], (2,)), {}, r"input"),
    # batch_norm
    ("bn-running-mean-length", "batch_norm", (x(4, 3), ones(2), ones(3)),
     {"training": True}, r"running_mean.*3|3.*running_mean"),
    ("bn-running-var-length", "batch_norm", (x(4, 3), ones(3), ones(2)),
     {"training": True}, r"running_var.*3|3.*running_var"),
    ("bn-running-mean-length-eval", "batch_norm", (x(4, 3), ones(2), ones(2)),
     {"training": False}, r"running_mean"),
    ("bn-weight-length", "batch_norm", (x(4, 3), None, None, ones(2)),
     {"training": True}, r"weight.*3|3.*weight"),
    ("bn-bias-length", "batch_norm", (x(4, 3), None, None, None, ones(2)),
     {"training": True}, r"bias.*3|3.*bias"),
    ("bn-one-value-per-channel", "batch_norm", (x(1, 3), ones(3), ones(3)),
     {"training": True}, r"1 value per channel.*input|input.*1 value per channel"),
    ("bn-one-value-per-channel-3d", "batch_norm", (x(1, 3, 1), None, None),
     {"training": True}, r"value per channel"),
    ("bn-eval-without-running-stats", "batch_norm", (x(4, 3), None, None),
     {"training": False}, r"running_mean"),
    ("bn-input-1d", "batch_norm", (x(4), ones(4), ones(4)), {"training": True}, r"input"),
    ("bn-input-list", "batch_norm", ([[1.0, 2.0]], None, None), {"training": False}, r"input"),
    ("bn-momentum-none", "batch_norm", (x(4, 3), ones(3), ones(3)),
     {"training": True, "momentum": None}, r"momentum"),
    ("bn-momentum-none-eval", "batch_norm", (x(4, 3), ones(3), ones(3)),
     {"training": False, "momentum": None}, r"momentum"),
    # group_norm
    ("gn-not-divisible", "group_norm", (x(2, 6, 4), 4), {}, r"num_groups"),
    ("gn-weight-length", "group_norm", (x(2, 6, 4), 3, ones(5)), {}, r"weight.*6|6.*weight"),
    ("gn-bias-length", "group_norm", (x(2, 6, 4), 3, None, ones(5)), {}, r"bias.*6|6.*bias"),
    ("gn-input-1d", "group_norm", (x(6), 3), {}, r"input|dimensions"),
    ("gn-one-value-per-group", "group_norm", (x(1, 3), 3), {}, r"value per channel"),
    # instance_norm
    ("in-one-spatial-element", "instance_norm", (x(2, 6, 1),), {}, r"spatial"),
    ("in-no-spatial-dim", "instance_norm", (x(2, 6),), {}, r"spatial"),
    ("in-running-mean-length", "instance_norm", (x(2, 6, 4), ones(5), ones(5)), {},
     r"running_mean"),
    ("in-weight-length", "instance_norm", (x(2, 6, 4), None, None, ones(5)), {}, r"weight"),
    ("in-no-running-stats-without-input-stats", "instance_norm", (x(2, 6, 4),),
     {"use_input_stats": False}, r"running_mean"),
    ("in-momentum-none", "instance_norm", (x(2, 6, 4), ones(6), ones(6)),
     {"momentum": None}, r"momentum"),
]


@pytest.mark.parametrize(("case", "name", "args", "kwargs", "match"), FUNCTIONAL_CASES,
                         ids=[c[0] for c in FUNCTIONAL_CASES])
def test_functional_raises_like_torch(case, name, args, kwargs, match):
    with pytest.raises(Exception) as torch_error:
        getattr(TF, name)(*args, **kwargs)
    with pytest.raises(torch_error.type, match=match):
        getattr(F, name)(*args, **kwargs)


AUTOGRAD_CASES = [c for c in FUNCTIONAL_CASES if c[1] in ("layer_norm", "batch_norm")]


@pytest.mark.parametrize(("case", "name", "args", "kwargs", "match"), AUTOGRAD_CASES,
                         ids=[c[0] for c in AUTOGRAD_CASES])
def test_autograd_raises_like_torch(case, name, args, kwargs, match):
    with pytest.raises(Exception) as torch_error:
        getattr(TF, name)(*args, **kwargs)
    with pytest.raises(torch_error.type, match=match):
        getattr(A, name)(*args, **kwargs)


NON_TENSOR_INPUT = {
    "group_norm": (([[1.0, 2.0]], 1), {}),
    "instance_norm": (([[[1.0, 2.0]]],), {}),
    "batch_norm_training": (([[1.0, 2.0]], None, None), {"training": True}),
}


@pytest.mark.parametrize("case", sorted(NON_TENSOR_INPUT))
def test_non_tensor_input_is_a_type_error(case):
    """torch 2.13 fails here with an AttributeError from inside its Python wrapper; a
    TypeError naming ``input`` is the clear version of that."""
    args, kwargs = NON_TENSOR_INPUT[case]
    name = case.removesuffix("_training")
    with pytest.raises(AttributeError):
        getattr(TF, name)(*args, **kwargs)
    modules = (F, A) if name == "batch_norm" else (F,)
    for module in modules:
        with pytest.raises(TypeError, match="input"):
            getattr(module, name)(*args, **kwargs)


@pytest.mark.parametrize("name", ["layer_norm", "rms_norm"])
def test_normalized_shape_of_wrong_type_is_a_type_error(name):
    with pytest.raises(TypeError, match="normalized_shape"):
        getattr(F, name)(x(2, 4), "4")


# ------------------------------------------------------------------------------ nn modules
MODULE_CASES = [
    ("bn1d-1d-input", "BatchNorm1d", (3,), (3,), r"input"),
    ("bn1d-4d-input", "BatchNorm1d", (3,), (2, 3, 4, 5), r"input"),
    ("bn2d-3d-input", "BatchNorm2d", (3,), (2, 3, 4), r"input"),
    ("bn2d-5d-input", "BatchNorm2d", (3,), (2, 3, 4, 5, 6), r"input"),
    ("in2d-2d-input", "InstanceNorm2d", (3,), (2, 3), r"input"),
    ("in2d-5d-input", "InstanceNorm2d", (3,), (1, 3, 4, 5, 2), r"input"),
    ("bn1d-wrong-channels", "BatchNorm1d", (3,), (4, 5), r"running_mean|num_features|input"),
    ("bn1d-one-value-per-channel", "BatchNorm1d", (3,), (1, 3), r"value per channel"),
    ("ln-wrong-trailing-shape", "LayerNorm", (5,), (4, 4), r"normalized_shape"),
    ("rms-wrong-trailing-shape", "RMSNorm", (5,), (4, 4), r"normalized_shape"),
    ("gn-wrong-channels", "GroupNorm", (2, 6), (2, 4, 3), r"weight|num_channels|input"),
]


@pytest.mark.parametrize(("case", "name", "ctor_args", "shape", "match"), MODULE_CASES,
                         ids=[c[0] for c in MODULE_CASES])
def test_modules_reject_bad_input_like_torch(case, name, ctor_args, shape, match):
    with pytest.raises(Exception) as torch_error:
        getattr(torch.nn, name)(*ctor_args).to(F64).train()(x(*shape))
    assert torch_error.type in (ValueError, RuntimeError), torch_error.type
    with pytest.raises(torch_error.type, match=match):
        getattr(ours_nn, name)(*ctor_args).to(F64).train()(x(*shape))


def test_instance_norm_module_with_affine_rejects_wrong_channel_count_like_torch():
    with pytest.raises(ValueError, match="num_features"):
        torch.nn.InstanceNorm2d(3, affine=True)(x(2, 4, 4, 5))
    with pytest.raises(ValueError, match="num_features"):
        ours_nn.InstanceNorm2d(3, affine=True).to(F64)(x(2, 4, 4, 5))


def test_group_norm_module_rejects_indivisible_channels_at_construction():
    with pytest.raises(ValueError, match="num_channels"):
        torch.nn.GroupNorm(4, 6)
    with pytest.raises(ValueError, match=r"num_channels.*6|6.*num_channels"):
        ours_nn.GroupNorm(4, 6)


# ------------------------------------------------------------------------------ numpy_ref
@pytest.mark.parametrize("forward", ["layer_norm_forward", "batch_norm_forward"])
@pytest.mark.parametrize("bad", ["gamma", "beta"])
def test_numpy_ref_rejects_wrong_parameter_shape(forward, bad):
    xs = np.ones((4, 3)) + np.arange(12).reshape(4, 3)
    params = {"gamma": np.ones(3), "beta": np.zeros(3)}
    params[bad] = np.ones(2)
    with pytest.raises(ValueError, match=rf"{bad}.*\(3,\)|\(3,\).*{bad}"):
        getattr(R, forward)(xs, params["gamma"], params["beta"])


def test_numpy_batch_norm_rejects_a_single_row():
    with pytest.raises(ValueError, match="x"):
        R.batch_norm_forward(np.ones((1, 3)), np.ones(3), np.zeros(3))
