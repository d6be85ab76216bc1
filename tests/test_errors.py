"""Bad input everywhere: the package raises the exception type torch raises for the same
mistake, and its message names the offending argument (and the expected size where there is
one). Each case runs torch first, so a change in torch's behaviour shows up here too."""

from __future__ import annotations

import ast
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.nn.functional as TF
from conftest import F64, randn

from layernorm_tutorial import _validation as V
from layernorm_tutorial import autograd as A
from layernorm_tutorial import distributed as D
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
    # issue 12, item 2: torch 2.13 refuses eps <= 0 in training mode
    ("bn-eps-zero-training", "batch_norm", (x(4, 3), ones(3), ones(3)),
     {"training": True, "eps": 0.0}, r"^batch_norm eps must be positive during training"),
    ("bn-eps-zero-training-no-stats", "batch_norm", (x(4, 3), None, None),
     {"training": True, "eps": 0}, r"^batch_norm eps must be positive during training"),
    ("bn-eps-negative-training", "batch_norm", (x(4, 3), None, None),
     {"training": True, "eps": -1e-5}, r"eps"),
    ("bn-eps-zero-tensor-training", "batch_norm", (x(4, 3), None, None),
     {"training": True, "eps": torch.tensor(0.0)}, r"eps must be positive"),
    ("bn-eps-negative-eval", "batch_norm", (x(4, 3), ones(3), ones(3)),
     {"training": False, "eps": -1.0}, r"eps"),
    # eps that is not a real number: torch's TypeError
    ("ln-eps-string", "layer_norm", (x(2, 3), (3,)), {"eps": "1e-5"}, r"eps"),
    ("ln-eps-complex", "layer_norm", (x(2, 3), (3,)), {"eps": 1e-5j}, r"eps"),
    ("bn-eps-string", "batch_norm", (x(4, 3), None, None), {"training": True, "eps": "0"},
     r"eps"),
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
    ("bn1d-eps-zero", "BatchNorm1d", (3, 0.0), (4, 3), r"eps must be positive"),
    ("bn2d-eps-zero", "BatchNorm2d", (3, 0), (2, 3, 2, 2), r"eps must be positive"),
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


# ------------------------------------------------------------------------------ eps types
# issue 12, item 3: torch accepts eps of any real-number type; so must we
EPS_VALUES = {
    "numpy-float32": np.float32(1e-3),
    "numpy-float64": np.float64(1e-3),
    "numpy-int": np.int64(1),
    "tensor-0d": torch.tensor(1e-3),
    "python-int": 1,
    "bool": True,
}

EPS_CALLS = {
    "layer_norm": lambda m, eps: m.layer_norm(x(3, 4), (4,), ones(4), ones(4), eps=eps),
    "batch_norm": lambda m, eps: m.batch_norm(x(5, 3), ones(3), ones(3), training=True,
                                              eps=eps),
    "batch_norm_eval": lambda m, eps: m.batch_norm(x(5, 3), ones(3), ones(3), eps=eps),
    "group_norm": lambda m, eps: m.group_norm(x(2, 4, 3), 2, eps=eps),
    "instance_norm": lambda m, eps: m.instance_norm(x(2, 3, 4), eps=eps),
    "rms_norm": lambda m, eps: m.rms_norm(x(3, 4), (4,), eps=eps),
}


@pytest.mark.parametrize("eps_kind", sorted(EPS_VALUES))
@pytest.mark.parametrize("call", sorted(EPS_CALLS))
def test_eps_of_any_real_number_type_is_accepted_like_torch(call, eps_kind):
    eps = EPS_VALUES[eps_kind]
    expected = EPS_CALLS[call](TF, eps)
    modules = (F, A) if call in ("layer_norm", "batch_norm", "batch_norm_eval") else (F,)
    for module in modules:
        torch.testing.assert_close(EPS_CALLS[call](module, eps), expected)


def test_negative_eps_is_refused_for_layer_norm():
    """torch returns NaN for eps = -1 on a constant row; the package refuses it up front
    (a documented difference)."""
    for module in (F, A):
        with pytest.raises(ValueError, match="eps must be a non-negative number, got -1"):
            module.layer_norm(x(2, 3), (3,), eps=-1)


def test_instance_and_group_norm_accept_eps_zero_like_torch():
    """Only batch norm's training mode refuses eps = 0 in torch 2.13."""
    inputs = x(2, 4, 3)
    torch.testing.assert_close(F.instance_norm(inputs, eps=0.0),
                               TF.instance_norm(inputs, eps=0.0))
    torch.testing.assert_close(F.group_norm(inputs, 2, eps=0.0),
                               TF.group_norm(inputs, 2, eps=0.0))


@pytest.mark.parametrize("shape", [np.int64(4), (np.int64(4),), [np.int32(3), np.int64(4)],
                                   torch.Size([4])], ids=["np-int", "tuple-np", "list-np",
                                                          "size"])
def test_numpy_integers_in_normalized_shape_are_accepted(shape):
    inputs = x(2, 3, 4)
    trailing = tuple(int(d) for d in np.atleast_1d(np.asarray(shape)))
    expected = TF.layer_norm(inputs, trailing)
    for fn in (F.layer_norm, A.layer_norm):
        torch.testing.assert_close(fn(inputs, shape), expected)
    torch.testing.assert_close(F.rms_norm(inputs, shape), TF.rms_norm(inputs, trailing))
    torch.testing.assert_close(ours_nn.LayerNorm(shape).to(F64)(inputs), expected)


@pytest.mark.parametrize("shape", [True, (4.0,), (True,)], ids=["bool", "float", "bool-in"])
def test_non_integer_normalized_shape_is_a_type_error(shape):
    with pytest.raises(TypeError, match="normalized_shape"):
        F.layer_norm(x(2, 4), shape)


# ------------------------------------------------------------------------------ mixed dtypes
# issue 12, item 4: torch on CPU refuses parameters whose dtype is neither the input's nor
# (for fp16/bf16 input) fp32, and parameters of different dtypes; so do we (RuntimeError).
F32, F16 = torch.float32, torch.float16


def _mixed_calls(input_dtype, param_dtype):
    inp = x(4, 3, 2).to(input_dtype)

    def p(n, scale=1.0):
        return (ones(n) * scale).to(param_dtype)

    return {
        "layer_norm-weight": ("layer_norm", (inp, (2,), p(2)), {}, "weight"),
        "layer_norm-bias": ("layer_norm", (inp, (2,), None, p(2, 0.0)), {}, "bias"),
        "batch_norm-weight": ("batch_norm", (inp, None, None, p(3)), {"training": True},
                              "weight"),
        "batch_norm-running_mean": ("batch_norm", (inp, p(3, 0.0), p(3)),
                                    {"training": True}, "running_mean"),
        "batch_norm-running-eval": ("batch_norm", (inp, p(3, 0.0), p(3)), {}, "running_mean"),
        "group_norm-weight": ("group_norm", (inp, 3, p(3)), {}, "weight"),
        "instance_norm-weight": ("instance_norm", (inp, None, None, p(3), p(3, 0.0)), {},
                                 "weight"),
    }


MIXED = [(i, w, case) for i, w in [(F32, F64), (F32, F16), (F64, F32), (F16, torch.bfloat16)]
         for case in sorted(_mixed_calls(F32, F64))]


@pytest.mark.parametrize(("input_dtype", "param_dtype", "case"), MIXED)
def test_mixed_dtypes_raise_like_torch(input_dtype, param_dtype, case):
    name, args, kwargs, argument = _mixed_calls(input_dtype, param_dtype)[case]
    with pytest.raises(RuntimeError, match="mixed dtype"):
        getattr(TF, name)(*args, **kwargs)
    modules = (F, A) if name in ("layer_norm", "batch_norm") else (F,)
    for module in modules:
        with pytest.raises(RuntimeError, match=rf"mixed dtypes: {argument} has dtype"):
            getattr(module, name)(*args, **kwargs)


def test_parameters_of_two_dtypes_raise_like_torch():
    args = (x(4, 3).half(), (3,), ones(3).float(), ones(3).half())
    with pytest.raises(RuntimeError, match="mixed dtype"):
        TF.layer_norm(*args)
    for module in (F, A):
        with pytest.raises(RuntimeError, match=r"weight=torch.float32, bias=torch.float16"):
            module.layer_norm(*args)


@pytest.mark.parametrize("dtype", [F16, torch.bfloat16])
def test_half_input_with_fp32_parameters_is_allowed_like_torch(dtype):
    inputs = x(4, 3, 2).to(dtype)
    w = ones(2).float() * 1.5
    torch.testing.assert_close(F.layer_norm(inputs, (2,), w), TF.layer_norm(inputs, (2,), w))
    rm, rv = torch.zeros(3), torch.ones(3)
    torch.testing.assert_close(F.batch_norm(inputs, rm.clone(), rv.clone(), training=True),
                               TF.batch_norm(inputs, rm.clone(), rv.clone(), training=True))


@pytest.mark.parametrize("module", ["LayerNorm", "BatchNorm1d", "GroupNorm"])
def test_fp64_input_into_an_fp32_module_raises_like_torch(module):
    ctor = (1, 3) if module == "GroupNorm" else ((2,) if module == "LayerNorm" else (3,))
    with pytest.raises(RuntimeError, match="mixed dtype"):
        getattr(torch.nn, module)(*ctor)(x(4, 3, 2))
    with pytest.raises(RuntimeError, match="mixed dtypes: .* has dtype torch.float32"):
        getattr(ours_nn, module)(*ctor)(x(4, 3, 2))


@pytest.mark.filterwarnings("ignore:Mismatch dtype between input and weight")
def test_rms_norm_allows_mixed_dtypes_like_torch():
    """torch's CPU rms_norm casts instead of raising; the package documents and matches it."""
    inputs32 = x(3, 4).float()
    for inputs, weight in [(inputs32, ones(4) * 2), (x(3, 4), ones(4).float() * 2)]:
        expected = TF.rms_norm(inputs, (4,), weight)
        out = F.rms_norm(inputs, (4,), weight)
        assert out.dtype == expected.dtype == inputs.dtype
        torch.testing.assert_close(out, expected)


# ------------------------------------------------------------------------------ integers
# issue 24, item 4: one rule for integer arguments (_validation.as_int), torch's rule:
# Python and NumPy integers and 0-d integer tensors; not bools, not floats.
INTEGERS = {"numpy-int64": np.int64(2), "numpy-int32": np.int32(2), "numpy-uint8": np.uint8(2),
            "tensor-0d": torch.tensor(2), "python": 2}
NOT_INTEGERS = {"float": 2.0, "numpy-float": np.float64(2.0), "bool": True,
                "numpy-bool": np.bool_(True), "tensor-float": torch.tensor(2.0),
                "tensor-1d": torch.tensor([2]), "tensor-bool": torch.tensor(True),
                "string": "2", "none": None}


@pytest.mark.parametrize("kind", sorted(INTEGERS))
def test_group_norm_accepts_numpy_and_tensor_integers_like_torch(kind):
    groups, inputs = INTEGERS[kind], x(2, 4, 3)
    expected = TF.group_norm(inputs, groups)
    torch.testing.assert_close(F.group_norm(inputs, groups), expected)
    module = ours_nn.GroupNorm(groups, INTEGERS[kind] * 2).to(F64)
    assert type(module.num_groups) is int and type(module.num_channels) is int
    torch.testing.assert_close(module(inputs), torch.nn.GroupNorm(groups, 4).to(F64)(inputs))


@pytest.mark.parametrize("kind", sorted(INTEGERS))
def test_num_features_accepts_numpy_and_tensor_integers_like_torch(kind):
    count = INTEGERS[kind] + 1  # 3 channels
    for cls in (ours_nn.BatchNorm1d, ours_nn.BatchNorm2d, ours_nn.InstanceNorm2d,
                D.SyncBatchNorm):
        module = cls(count)
        assert type(module.num_features) is int and module.num_features == 3
        assert torch.nn.BatchNorm1d(count).num_features == 3  # torch accepts it too


@pytest.mark.parametrize("kind", sorted(NOT_INTEGERS))
def test_num_groups_that_is_not_an_integer_is_a_type_error_like_torch(kind):
    groups = NOT_INTEGERS[kind]
    with pytest.raises(TypeError):
        TF.group_norm(x(2, 4, 3), groups)
    with pytest.raises(TypeError, match=r"^num_groups must be an int, got "):
        F.group_norm(x(2, 4, 3), groups)
    with pytest.raises(TypeError, match=r"^num_features must be an int, got "):
        ours_nn.BatchNorm1d(groups)


def test_negative_num_groups_raises_like_torch():
    with pytest.raises(RuntimeError):
        TF.group_norm(x(2, 4, 3), -1)
    for groups in (-1, 0, np.int64(0)):  # torch: ZeroDivisionError for a Python 0
        with pytest.raises(RuntimeError, match=rf"^num_groups must be a positive int, "
                                                rf"got {int(groups)}$"):
            F.group_norm(x(2, 4, 3), groups)
    with pytest.raises(ZeroDivisionError):
        TF.group_norm(x(2, 4, 3), 0)
    with pytest.raises(ZeroDivisionError, match=r"^num_groups must be a positive int, got 0$"):
        F.group_norm(x(2, 4, 3), 0)
    with pytest.raises(RuntimeError):
        torch.nn.BatchNorm1d(-1)
    with pytest.raises(RuntimeError, match=r"^num_features must be an int >= 0, got -1$"):
        ours_nn.BatchNorm1d(-1)


def test_as_int_is_the_one_rule():
    assert [V.as_int(v, "n") for v in INTEGERS.values()] == [2] * len(INTEGERS)
    assert all(type(V.as_int(v, "n")) is int for v in INTEGERS.values())
    for value in NOT_INTEGERS.values():
        with pytest.raises(TypeError, match="^n must be an int"):
            V.as_int(value, "n")
    with pytest.raises(ValueError, match="^n must be an int >= 3, got 2$"):
        V.as_int(2, "n", minimum=3, error=ValueError)


def _integer_isinstance_checks(source: str) -> list[int]:
    """Lines of ``isinstance(value, int)`` (or a tuple with ``int`` and no ``float``): an
    integer check. ``isinstance(value, (int, float))`` asks for a real number instead."""
    lines = []
    for node in ast.walk(ast.parse(source)):
        if (isinstance(node, ast.Call) and getattr(node.func, "id", None) == "isinstance"
                and len(node.args) == 2):
            names = {n.id for n in ast.walk(node.args[1]) if isinstance(n, ast.Name)}
            if "int" in names and "float" not in names:
                lines.append(node.lineno)
    return lines


def test_library_checks_integers_only_through_the_one_rule():
    """No ad-hoc ``isinstance(value, int)`` in the library: a new check goes through
    ``_validation`` (the lab's experiments are outside this rule's reach for now)."""
    package = Path(V.__file__).parent
    library = [p for p in package.rglob("*.py")
               if not {"lab", "publishing"} & set(p.relative_to(package).parts)
               and p.name != "_validation.py"]
    assert len(library) > 10
    ad_hoc = [f"{p.relative_to(package)}:{n}" for p in library
              for n in _integer_isinstance_checks(p.read_text())]
    assert ad_hoc == []
    assert _integer_isinstance_checks("isinstance(n, int) or isinstance(m, (int, np.integer))"
                                      " or isinstance(a, (int, float))") == [1, 1]
