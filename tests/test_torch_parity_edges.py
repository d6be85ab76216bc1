"""Edge cases where the functional API once differed from ``torch.nn.functional`` (probe 4,
D12 and D13), each compared with torch itself, which runs first in every test.

1. ``instance_norm`` with ``eps=0``: torch's batch-statistics rule (ATen's ``InvStd``) gives
   ``rstd = 0`` for a zero variance, so a constant channel normalizes to 0 (the output is
   its bias), while layer and group norm give NaN.
2. A size-0 ``normalized_shape`` gives an empty output (layer and RMS norm); zero-size
   dimensions of batch, group and instance norm end as in torch.
3. Integer, bool and complex inputs raise NotImplementedError, torch's type;
   ``group_norm(x, 0)`` raises ZeroDivisionError, torch's type.
4. float32 rows whose variance (or mean square) overflows, about 1e19 from their mean,
   are normalized correctly: compared with torch in float64 (torch's float32 kernels return
   zeros or NaN there), and their gradients too (these underflowed from about 1e13).

Tests whose docstring says "guard" pin behaviour that already matched torch before these
changes; every other test failed on the code before them.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as TF
from conftest import F64, TOLERANCES, assert_close, assert_matches, evaluate, randn

from layernorm_tutorial import autograd as A
from layernorm_tutorial import functional as F
from layernorm_tutorial import nn as ours_nn

NAN_EQUAL = {"equal_nan": True}


# ------------------------------------------------------------- 1. instance_norm, eps = 0
def _with_constant_channels(dtype):
    """(2, 3, 5) input in which channel 1 of sample 0 and channel 2 of sample 1 are
    constant (zero variance); the others are random."""
    x = randn((2, 3, 5), seed=1)
    x[0, 1] = 3.0
    x[1, 2] = -2.0
    return x.to(dtype)


@pytest.mark.parametrize("dtype", [F64, torch.float32, torch.float16, torch.bfloat16])
@pytest.mark.parametrize("affine", [False, True])
@pytest.mark.parametrize("running", [False, True])
def test_instance_norm_eps_zero_constant_channel_matches_torch(dtype, affine, running):
    """Output (0, or the bias, on the constant channels), gradients (0 for the input on
    those channels) and running statistics all match torch's."""
    param_dtype = torch.float32 if dtype in (torch.float16, torch.bfloat16) else dtype
    kwargs = {"input": _with_constant_channels(dtype), "eps": 0.0}
    if affine:
        kwargs["weight"] = randn((3,), seed=2, dtype=param_dtype)
        kwargs["bias"] = randn((3,), seed=3, dtype=param_dtype)
    if running and dtype == param_dtype:
        # (torch rounds the running-statistics update of a 16-bit input to 16 bits, with
        # any eps; the package keeps it in fp32: not compared here)
        kwargs["running_mean"] = randn((3,), seed=4, dtype=param_dtype)
        kwargs["running_var"] = torch.ones(3, dtype=param_dtype)
    assert not TF.instance_norm(**kwargs).isnan().any()      # torch: no NaN at all
    assert_matches(F.instance_norm, TF.instance_norm, kwargs)
    constant = torch.zeros(2, 3, dtype=torch.bool)
    constant[0, 1] = constant[1, 2] = True
    bias = kwargs.get("bias", torch.zeros(3, dtype=param_dtype)).to(dtype)
    expected = bias.expand(2, 3)[constant][:, None].expand(-1, 5)
    assert torch.equal(F.instance_norm(**kwargs)[constant], expected)


def test_instance_norm_eps_zero_with_zero_running_variance_is_not_finite_like_torch():
    """With ``use_input_stats=False`` the running variance is used as given: 0 + eps = 0
    leaves the channel without a finite value in torch (NaN) and here (inf, NaN where x
    equals the running mean); the other channels match. A guard."""
    kwargs = {"input": _with_constant_channels(F64), "running_mean": torch.zeros(3, dtype=F64),
              "running_var": torch.tensor([1.0, 0.0, 2.0], dtype=F64),
              "use_input_stats": False, "eps": 0.0}
    theirs = TF.instance_norm(**kwargs)
    ours = F.instance_norm(**kwargs)
    assert theirs[:, 1].isnan().all() and not ours[:, 1].isfinite().any()
    assert_close(ours[:, [0, 2]], theirs[:, [0, 2]], "output")


@pytest.mark.parametrize("name", ["layer_norm", "group_norm"])
def test_layer_and_group_norm_eps_zero_constant_row_stay_nan_like_torch(name):
    """Only batch-statistics norms have torch's zero-variance rule: layer and group norm
    with eps=0 keep dividing 0 by 0. A guard."""
    x = _with_constant_channels(F64)
    args = (x, (5,)) if name == "layer_norm" else (x.reshape(6, 1, 5), 1)
    theirs = getattr(TF, name)(*args, eps=0.0)
    assert theirs.isnan().sum() == 10
    assert_close(getattr(F, name)(*args, eps=0.0), theirs, "output", **NAN_EQUAL)


# ------------------------------------------------------------- 2. size-0 normalized_shape
ZERO_SHAPES = [((3, 0), (0,)), ((3, 2, 0), (2, 0)), ((3, 0, 2), (0, 2)), ((0,), (0,)),
               ((0, 0), (0,))]


@pytest.mark.parametrize(("shape", "normalized_shape"), ZERO_SHAPES)
@pytest.mark.parametrize("dtype", [F64, torch.float16])
@pytest.mark.parametrize("module", [F, A], ids=["functional", "autograd"])
def test_zero_size_normalized_shape_gives_empty_output_like_torch(shape, normalized_shape,
                                                                  dtype, module):
    """Output (empty, the input's shape and dtype) and gradients (empty) as torch's."""
    param_dtype = torch.float32 if dtype == torch.float16 else dtype
    params = {"weight": torch.ones(normalized_shape, dtype=param_dtype),
              "bias": torch.zeros(normalized_shape, dtype=param_dtype)}
    ln = {"input": torch.empty(shape, dtype=dtype), "normalized_shape": normalized_shape,
          **params}
    assert_matches(module.layer_norm, TF.layer_norm, ln)
    rms = {"input": torch.empty(shape, dtype=dtype), "normalized_shape": normalized_shape,
           "weight": params["weight"]}
    assert_matches(module.rms_norm, TF.rms_norm, rms, ("input", "weight"))
    assert_matches(module.rms_norm, TF.rms_norm, {**rms, "eps": None}, ("input", "weight"))


def test_zero_size_normalized_shape_in_the_nn_modules_like_torch():
    x = torch.empty(3, 0)
    for ours, theirs in ((ours_nn.LayerNorm(0), torch.nn.LayerNorm(0)),
                         (ours_nn.RMSNorm(0), torch.nn.RMSNorm(0))):
        assert ours(x).shape == theirs(x).shape == (3, 0)


def test_negative_normalized_shape_raises_runtime_error_like_torch():
    x = randn((3, 4), seed=5)
    for name in ("layer_norm", "rms_norm"):
        with pytest.raises(RuntimeError):
            getattr(TF, name)(x, (-1,))
        with pytest.raises(RuntimeError, match=r"^normalized_shape must hold sizes >= 0, "
                                                r"got \[-1\]$"):
            getattr(F, name)(x, (-1,))


def _empty(*shape):
    return torch.empty(shape, dtype=F64)


# (id, function name, args, kwargs): zero-size dims of the channel norms
ZERO_SIZE_CHANNEL_CASES = [
    ("gn-no-channels", "group_norm", (_empty(2, 0, 3), 1), {}),
    ("gn-no-channels-affine", "group_norm", (_empty(2, 0, 3), 1, _empty(0), _empty(0)), {}),
    ("gn-no-channels-2-groups", "group_norm", (_empty(2, 0, 3), 2), {}),
    ("gn-empty-batch", "group_norm", (_empty(0, 4, 3), 2), {}),
    ("gn-empty-spatial", "group_norm", (_empty(2, 4, 0), 2), {}),
    ("gn-empty-2nd-spatial", "group_norm", (_empty(2, 4, 0, 3), 2), {}),
    ("gn-no-channels-2d", "group_norm", (_empty(2, 0), 1), {}),
    ("bn-train-no-channels", "batch_norm", (_empty(2, 0), _empty(0), _empty(0)),
     {"training": True}),
    ("bn-eval-no-channels", "batch_norm", (_empty(2, 0, 3), _empty(0), _empty(0)), {}),
    ("bn-train-empty-batch", "batch_norm", (_empty(0, 3), None, None), {"training": True}),
    ("bn-train-empty-spatial", "batch_norm", (_empty(1, 3, 0), None, None),
     {"training": True}),
    ("bn-train-batch-of-one-no-channels", "batch_norm", (_empty(1, 0), None, None),
     {"training": True}),
    ("in-no-channels", "instance_norm", (_empty(2, 0, 3),), {}),
    ("in-no-channels-running", "instance_norm", (_empty(2, 0, 3), _empty(0), _empty(0)), {}),
    ("in-empty-batch", "instance_norm", (_empty(0, 3, 5),), {}),
    ("in-empty-spatial", "instance_norm", (_empty(2, 3, 0),), {}),
    ("in-empty-2nd-spatial", "instance_norm", (_empty(2, 3, 0, 2),), {}),
    ("in-no-spatial-dims-no-channels", "instance_norm", (_empty(2, 0),), {}),
    ("in-one-spatial-no-channels", "instance_norm", (_empty(2, 0, 1),), {}),
]


@pytest.mark.parametrize(("case", "name", "args", "kwargs"), ZERO_SIZE_CHANNEL_CASES,
                         ids=[c[0] for c in ZERO_SIZE_CHANNEL_CASES])
def test_zero_size_channel_norms_end_like_torch(case, name, args, kwargs):
    """The same result (an empty tensor of the input's shape) or the same exception type.
    A guard."""
    try:
        theirs = getattr(TF, name)(*args, **kwargs)
    except Exception as error:  # noqa: BLE001 - torch's type is what is compared
        with pytest.raises(type(error)):
            getattr(F, name)(*args, **kwargs)
        return
    ours = getattr(F, name)(*args, **kwargs)
    assert ours.shape == theirs.shape and ours.dtype == theirs.dtype


# ------------------------------------------------------------- 3. exception types
NON_FLOAT_DTYPES = [torch.int64, torch.int32, torch.uint8, torch.bool, torch.complex64,
                    torch.complex128]
CALLS = {
    "layer_norm": lambda m, x: m.layer_norm(x, (4,)),
    "rms_norm": lambda m, x: m.rms_norm(x, (4,)),
    "group_norm": lambda m, x: m.group_norm(x, 3),
    "instance_norm": lambda m, x: m.instance_norm(x),
    "batch_norm_training": lambda m, x: m.batch_norm(x, None, None, training=True),
    "batch_norm_eval": lambda m, x: m.batch_norm(x, torch.zeros(3), torch.ones(3)),
}


@pytest.mark.parametrize("dtype", NON_FLOAT_DTYPES, ids=str)
@pytest.mark.parametrize("call", sorted(CALLS))
def test_non_float_input_raises_not_implemented_error_like_torch(call, dtype):
    x = torch.ones(2, 3, 4).to(dtype)
    if call == "rms_norm" and dtype.is_complex:
        # torch's composite rms_norm returns x / sqrt(mean(x**2) + eps) with complex
        # squares; the package refuses it (documented in _validation.check_tensor)
        assert CALLS[call](TF, x).dtype == dtype
    else:
        with pytest.raises(NotImplementedError):
            CALLS[call](TF, x)
    with pytest.raises(NotImplementedError,
                       match=rf"^input must have a floating-point dtype, got {dtype}$"):
        CALLS[call](F, x)
    if call in ("layer_norm", "rms_norm", "batch_norm_training", "batch_norm_eval"):
        with pytest.raises(NotImplementedError, match=r"^input must have a floating-point"):
            CALLS[call](A, x)


@pytest.mark.parametrize("groups", [0, np.int64(0), torch.tensor(0)],
                         ids=["int", "numpy", "tensor"])
def test_zero_num_groups_raises_the_type_torch_raises(groups):
    """torch: ZeroDivisionError for a Python 0 (it divides by it), RuntimeError for a NumPy
    or tensor 0; the package's one error is both, with a message naming the argument."""
    x = randn((2, 4, 3), seed=6)
    with pytest.raises(Exception) as theirs:
        TF.group_norm(x, groups)
    assert theirs.type is (ZeroDivisionError if isinstance(groups, int) else RuntimeError)
    with pytest.raises(theirs.type, match=r"^num_groups must be a positive int, got 0$"):
        F.group_norm(x, groups)
    with pytest.raises(ZeroDivisionError):
        F.group_norm(x, groups)
    with pytest.raises(RuntimeError):
        F.group_norm(x, groups)


def test_negative_num_groups_stays_a_runtime_error_like_torch():
    """A guard."""
    x = randn((2, 4, 3), seed=6)
    with pytest.raises(RuntimeError) as theirs:
        TF.group_norm(x, -2)
    with pytest.raises(RuntimeError, match=r"^num_groups must be a positive int, got -2$") \
            as ours:
        F.group_norm(x, -2)
    assert not isinstance(theirs.value, ZeroDivisionError)
    assert not isinstance(ours.value, ZeroDivisionError)


# ------------------------------------------------------------- 4. overflowing variance
SCALES = [2e19, 1e20, 1e30, 1e36]
FP32 = TOLERANCES[torch.float32]


def _large_rows(scale, shape=(4, 8), seed=7):
    """float32 rows of random values times ``scale``, about ``scale`` from their mean."""
    return (randn(shape, seed=seed) * scale).float()


def _against_float64(ours, reference, kwargs, grad_names, **tol):
    """``ours`` on the float32 ``kwargs`` against ``reference`` on their float64 copies:
    output and gradients, with float32 tolerances relative to the result's size."""
    wide = {k: v.double() if isinstance(v, torch.Tensor) else v for k, v in kwargs.items()}
    mine = evaluate(ours, kwargs, grad_names)
    ref = evaluate(reference, wide, grad_names)
    assert_close(mine.output.double(), ref.output, "output", dtype=torch.float32, **tol)
    for name, grad in ref.grads.items():
        scaled = grad / grad.abs().max().clamp_min(1e-300)   # gradients scale as 1/scale
        assert_close(mine.grads[name].double() / grad.abs().max().clamp_min(1e-300), scaled,
                     f"grad {name}", dtype=torch.float32, **tol)


@pytest.mark.parametrize("scale", SCALES)
@pytest.mark.parametrize("module", [F, A], ids=["functional", "autograd"])
def test_layer_norm_with_overflowing_variance_matches_torch_float64(scale, module):
    x = _large_rows(scale)
    theirs = TF.layer_norm(x, (8,))
    assert (theirs.isnan() | (theirs == 0)).all()               # torch fp32: zeros or NaN
    kwargs = {"input": x, "normalized_shape": (8,), "weight": randn((8,), 8).float(),
              "bias": randn((8,), 9).float()}
    _against_float64(module.layer_norm, TF.layer_norm, kwargs, ("input", "weight", "bias"))


@pytest.mark.parametrize("scale", SCALES)
@pytest.mark.parametrize("module", [F, A], ids=["functional", "autograd"])
def test_rms_norm_with_overflowing_mean_square_matches_torch_float64(scale, module):
    x = _large_rows(scale)
    assert (TF.rms_norm(x, (8,)) == 0).all()                    # torch fp32: zeros
    kwargs = {"input": x, "normalized_shape": (8,), "weight": randn((8,), 8).float()}
    _against_float64(module.rms_norm, TF.rms_norm, kwargs, ("input", "weight"))


@pytest.mark.parametrize("scale", [1e15, 1e17])
def test_gradients_of_large_rows_match_torch_float64(scale):
    """Below the overflow, autograd's ``rsqrt`` backward (``rstd**3``) underflowed in fp32
    from about 1e13: the elementary-op gradients of layer, RMS and group norm lost the
    variance term (14% wrong at 1e15, half at 1e16). torch's fp32 kernels are right here."""
    x = _large_rows(scale)
    weight, bias = randn((8,), 8).float(), randn((8,), 9).float()
    _against_float64(F.layer_norm, TF.layer_norm, {"input": x, "normalized_shape": (8,),
                                                   "weight": weight, "bias": bias},
                     ("input", "weight", "bias"))
    _against_float64(F.rms_norm, TF.rms_norm,
                     {"input": x, "normalized_shape": (8,), "weight": weight},
                     ("input", "weight"))
    _against_float64(F.group_norm, TF.group_norm,
                     {"input": x.reshape(4, 2, 4), "num_groups": 1, "weight": weight[:2],
                      "bias": bias[:2]}, ("input", "weight", "bias"))


@pytest.mark.parametrize("scale", [2e19, 1e30])
def test_channel_norms_with_overflowing_variance_match_torch_float64(scale):
    x = _large_rows(scale, (4, 6, 5))
    params = {"weight": randn((6,), 10).float(), "bias": randn((6,), 11).float()}
    grads = ("input", "weight", "bias")
    _against_float64(F.group_norm, TF.group_norm,
                     {"input": x, "num_groups": 3, **params}, grads)
    _against_float64(F.instance_norm, TF.instance_norm, {"input": x, **params}, grads)
    for module in (F, A):
        _against_float64(module.batch_norm, TF.batch_norm,
                         {"input": x, "running_mean": None, "running_var": None,
                          "training": True, **params}, grads)


def test_overflow_repair_leaves_ordinary_rows_bit_for_bit():
    """One overflowing row in the batch changes nothing in the others, and those equal
    ``rsqrt(var + eps)`` exactly (the formula before the repair existed)."""
    x = randn((5, 8), seed=12).float()
    alone = F.layer_norm(x, (8,))
    mixed_input = torch.cat([x, _large_rows(1e25, (1, 8))])
    mixed = F.layer_norm(mixed_input, (8,))
    assert torch.equal(mixed[:5], alone)
    assert mixed[5].isfinite().all() and mixed[5].abs().max() > 0.5
    _, xshift, var = F.moments(x, (1,))
    assert torch.equal(F.inverse_rms(xshift, var, (1,), 1e-5), torch.rsqrt(var + 1e-5))


def test_branch_free_repair_used_under_torch_compile_gives_the_same_values(monkeypatch):
    """Under torch.compile the repair is computed for every row with torch.where (no
    data-dependent branch): the same values, bit for bit on ordinary rows."""
    x = torch.cat([randn((5, 8), seed=13).float(), _large_rows(1e25, (1, 8))])
    eager = F.layer_norm(x, (8,))
    monkeypatch.setattr(torch.compiler, "is_compiling", lambda: True)
    branch_free = F.layer_norm(x, (8,))
    assert torch.equal(branch_free, eager)
    reference = TF.layer_norm(x.double(), (8,))
    assert_close(branch_free.double(), reference, "output", dtype=torch.float32)


def test_vmap_and_meta_tensors_take_the_branch_free_path():
    """``vmap`` cannot read a value (``.item()``) and meta tensors have none: the rescaling
    is computed branch-free there, with the same values as in eager mode. A guard (the
    eager check must not reach them)."""
    x = torch.cat([randn((3, 8), seed=15).float(), _large_rows(1e25, (1, 8))])
    for fn in (F.layer_norm, F.rms_norm):
        assert torch.equal(torch.func.vmap(lambda row, f=fn: f(row, (8,)))(x), fn(x, (8,)))
        assert fn(x.to("meta"), (8,)).shape == x.shape


def test_functional_layer_and_rms_norm_trace_without_graph_break():
    """The eager-mode check (``rstd.amin().item()``) must not split a torch.compile graph
    (without the ``is_compiling`` guard it splits it 4 times). A guard."""
    x = randn((4, 8), seed=14).float()
    for fn in (F.layer_norm, F.rms_norm):
        explanation = torch._dynamo.explain(fn)(x, (8,))
        assert explanation.graph_break_count == 0, explanation.break_reasons


def test_group_norm_module_with_zero_groups_raises_torchs_type():
    import torch

    from layernorm_tutorial import nn as lnn

    with pytest.raises(ZeroDivisionError):
        torch.nn.GroupNorm(0, 4)
    with pytest.raises(ZeroDivisionError, match="num_groups"):
        lnn.GroupNorm(0, 4)
