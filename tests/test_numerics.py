"""Numerical robustness of the core package (issue 2, "Numerics").

- no E[x^2] - E[x]^2 cancellation: x = 1e4 + N(0, 1) in float32 matches a float64 reference
  to ~1e-3 (the naive formula is off by O(1) or nan here, see test_known_wrong.py);
- constant rows with eps=1e-6 give exactly the bias (float32 and float64);
- all-zero fp16 input with eps=1e-12 (which underflows to 0 in fp16) gives finite output;
- RMS norm of fp16 values 300.0 does not overflow (300^2 = 90000 > 65504 = fp16 max).
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as TF
from conftest import (
    F64,
    OFFSET_TOL,
    assert_close,
    check_constant_rows_layer_norm,
    check_large_offset_layer_norm,
    check_zero_half_input_is_finite,
    evaluate,
    large_offset_input,
    randn,
)

from layernorm_tutorial import autograd as A
from layernorm_tutorial import functional as F
from layernorm_tutorial import numpy_ref as R

# ------------------------------------------------------------------------------ cancellation
LAYER_NORMS = {"functional": F.layer_norm, "autograd": A.layer_norm}


@pytest.mark.parametrize("impl", sorted(LAYER_NORMS))
def test_layer_norm_large_offset_float32_matches_float64(impl):
    check_large_offset_layer_norm(LAYER_NORMS[impl])


@pytest.mark.parametrize("impl", sorted(LAYER_NORMS))
def test_layer_norm_large_offset_float32_gradients_match_float64(impl):
    x = large_offset_input((8, 256))
    w, b = randn((256,), 1, torch.float32), randn((256,), 2, torch.float32)
    kwargs = {"input": x, "normalized_shape": (256,), "weight": w, "bias": b}
    mine = evaluate(LAYER_NORMS[impl], kwargs)
    ref = evaluate(TF.layer_norm, {k: v.double() if isinstance(v, torch.Tensor) else v
                                   for k, v in kwargs.items()})
    # outputs and gradients scale with |weight| and |upstream| (~3 at most here): compare
    # relative to the largest reference value
    for name, mine_t, ref_t in [("output", mine.output, ref.output),
                                *[(n, mine.grads[n], ref.grads[n]) for n in ref.grads]]:
        err = (mine_t.double() - ref_t).abs().max().item()
        scale = max(1.0, ref_t.abs().max().item())
        assert err < OFFSET_TOL * scale, f"{name}: max abs error {err:.2e} (scale {scale:.1f})"


def _batch_stat_cases():
    xb = large_offset_input((256, 3))
    xc = large_offset_input((2, 4, 128))
    return {
        "functional.batch_norm": (F.batch_norm, TF.batch_norm,
                                  {"input": xb, "running_mean": None, "running_var": None,
                                   "training": True}),
        "autograd.batch_norm": (A.batch_norm, TF.batch_norm,
                                {"input": xb, "running_mean": None, "running_var": None,
                                 "training": True}),
        "group_norm": (F.group_norm, TF.group_norm, {"input": xc, "num_groups": 2}),
        "instance_norm": (F.instance_norm, TF.instance_norm, {"input": xc}),
    }


@pytest.mark.parametrize("case", sorted(_batch_stat_cases()))
def test_other_norms_large_offset_float32_matches_float64(case):
    ours, theirs, kwargs = _batch_stat_cases()[case]
    out = ours(**kwargs)
    ref = theirs(**{k: v.double() if isinstance(v, torch.Tensor) else v
                    for k, v in kwargs.items()})
    err = (out.double() - ref).abs().max().item()
    # torch's own float32 kernels reach ~2e-3 here (sums over 256 values near 1e4)
    torch_err = (theirs(**kwargs).double() - ref).abs().max().item()
    assert err < max(OFFSET_TOL, 2 * torch_err), f"max abs error {err:.2e} (torch {torch_err:.2e})"


def test_batch_norm_running_variance_large_offset_float32():
    x = large_offset_input((256, 3))
    rm, rv = torch.zeros(3), torch.ones(3)
    F.batch_norm(x, rm, rv, training=True, momentum=1.0)
    expected = x.double().var(0, unbiased=True)
    assert_close(rv.double(), expected, "running_var", rtol=1e-2, atol=1e-2)


def test_numpy_layer_norm_large_offset_float32():
    x = large_offset_input((8, 256)).numpy()
    gamma, beta = np.ones(256, np.float32), np.zeros(256, np.float32)
    out, _ = R.layer_norm_forward(x, gamma, beta)
    ref = TF.layer_norm(torch.from_numpy(x).double(), (256,)).numpy()
    assert np.abs(out.astype(np.float64) - ref).max() < OFFSET_TOL


# ------------------------------------------------------------------------------ constant rows
@pytest.mark.parametrize("impl", sorted(LAYER_NORMS))
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_layer_norm_constant_rows_give_exactly_the_bias(impl, dtype):
    """A careful implementation returns exactly the bias for constant rows even where the
    floating-point mean of n copies of c is not c (see conftest.CONSTANTS)."""
    check_constant_rows_layer_norm(LAYER_NORMS[impl], dtype)


# ------------------------------------------------------------------------------ fp16 extremes
def _zero_input_cases():
    w3 = torch.ones(3, dtype=torch.float16)
    zeros3 = torch.zeros(3, dtype=torch.float16)
    return {
        "functional.layer_norm": lambda x, eps: F.layer_norm(x, (4,), eps=eps),
        "autograd.layer_norm": lambda x, eps: A.layer_norm(x, (4,), eps=eps),
        "rms_norm": lambda x, eps: F.rms_norm(x, (4,), eps=eps),
        "functional.batch_norm": lambda x, eps: F.batch_norm(x, None, None, training=True,
                                                             eps=eps),
        "autograd.batch_norm": lambda x, eps: A.batch_norm(x, None, None, training=True,
                                                           eps=eps),
        "batch_norm_eval": lambda x, eps: F.batch_norm(x, zeros3, zeros3, w3, training=False,
                                                       eps=eps),
        "group_norm": lambda x, eps: F.group_norm(x, 3, eps=eps),
        "instance_norm": lambda x, eps: F.instance_norm(x, eps=eps),
    }


@pytest.mark.parametrize("case", sorted(_zero_input_cases()))
def test_all_zero_half_input_with_tiny_eps_is_finite(case):
    """(torch 2.13's own CPU batch_norm/instance_norm return nan here; the package computes
    every norm in fp32 and must not.)"""
    check_zero_half_input_is_finite(_zero_input_cases()[case])


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_rms_norm_of_300_in_half_does_not_overflow(dtype):
    x = torch.full((2, 8), 300.0, dtype=dtype)
    weight = randn((8,), 7, dtype)
    out = F.rms_norm(x, (8,), weight)
    assert out.dtype == dtype and torch.isfinite(out).all(), out
    assert_close(out, weight.expand_as(out), "rms_norm(300) = weight", dtype=dtype)


def test_rms_norm_of_large_half_values_matches_float64():
    x = (500.0 * randn((4, 16), 8)).to(torch.float16)
    out = F.rms_norm(x, (16,))
    ref = TF.rms_norm(x.to(F64), (16,), eps=torch.finfo(torch.float16).eps)
    assert torch.isfinite(out).all()
    assert_close(out.to(F64), ref, "output", dtype=torch.float16)


@pytest.mark.parametrize("impl", sorted(LAYER_NORMS))
def test_layer_norm_gradients_of_large_half_values_are_finite(impl):
    kwargs = {"input": (300.0 * randn((3, 8), 9)).half(), "normalized_shape": (8,),
              "weight": randn((8,), 10, torch.float16), "bias": randn((8,), 11, torch.float16)}
    mine = evaluate(LAYER_NORMS[impl], kwargs)
    ref = evaluate(TF.layer_norm, {k: v.to(F64) if isinstance(v, torch.Tensor) else v
                                   for k, v in kwargs.items()})
    assert_close(mine.output.to(F64), ref.output, "output", dtype=torch.float16)
    for name, grad in mine.grads.items():
        assert grad.dtype == torch.float16 and torch.isfinite(grad).all(), name
