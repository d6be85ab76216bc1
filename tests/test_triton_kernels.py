"""The fused Triton LayerNorm against torch in float64 (CPU interpreter when there is no GPU).

Every case checks the output and the three gradients (input, weight, bias) for a random
upstream gradient. Shapes are small because the interpreter runs each program in Python.
"""

import os
import subprocess
import sys

import numpy as np
import pytest
import torch

pytest.importorskip("layernorm_tutorial.triton_kernels",
                    reason="Triton is not installed (Linux x86-64/aarch64 only)",
                    exc_type=ImportError)

from layernorm_tutorial import functional  # noqa: E402
from layernorm_tutorial.triton_kernels import (  # noqa: E402
    MAX_BLOCK_N,
    layer_norm,
    layer_norm_backward,
    layer_norm_forward,
)
from layernorm_tutorial.triton_kernels._interpreter import arrange_backend  # noqa: E402
from layernorm_tutorial.triton_kernels.kernels import layer_norm_fwd_kernel  # noqa: E402
from layernorm_tutorial.triton_kernels.pitfalls import (  # noqa: E402
    grouped_partial_sums,
    row_statistics,
    sequential_sum,
)
from layernorm_tutorial.triton_kernels.source import excerpt  # noqa: E402

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"
# Largest allowed error relative to max(1, max |reference|): a few units of the dtype's
# rounding (outputs and gradients are rounded once to the input dtype; fp32 accumulation).
TOL = {torch.float32: 2e-5, torch.float16: 2e-3, torch.bfloat16: 1.6e-2}


def _make(shape, normalized_shape, dtype, with_weight=True, with_bias=True, seed=0):
    g = torch.Generator().manual_seed(seed)
    x = (3.0 + 2.0 * torch.randn(shape, generator=g, dtype=torch.float64))
    w = 1.0 + 0.5 * torch.randn(normalized_shape, generator=g, dtype=torch.float64)
    b = torch.randn(normalized_shape, generator=g, dtype=torch.float64)
    dy = torch.randn(shape, generator=g, dtype=torch.float64)
    cast = lambda t: t.to(dtype).to(DEVICE)  # noqa: E731
    return (cast(x), cast(w) if with_weight else None, cast(b) if with_bias else None, cast(dy))


def _close(actual, expected, dtype, what):
    assert actual.shape == expected.shape, f"{what}: shape {actual.shape} != {expected.shape}"
    assert actual.dtype == dtype, f"{what}: dtype {actual.dtype}, expected {dtype}"
    err = (actual.double().cpu() - expected.cpu()).abs().max().item() if actual.numel() else 0.0
    scale = max(1.0, expected.abs().max().item() if expected.numel() else 0.0)
    assert err <= TOL[dtype] * scale, f"{what}: max error {err:.3e} > {TOL[dtype] * scale:.3e}"


def _check_against_torch(x, normalized_shape, w, b, dy, eps=1e-5):
    """Triton forward + backward vs torch.nn.functional.layer_norm in float64."""
    dtype = x.dtype
    leaves = [t.detach().clone().requires_grad_() if t is not None else None for t in (x, w, b)]
    y = layer_norm(leaves[0], normalized_shape, leaves[1], leaves[2], eps)
    grads = torch.autograd.grad(y, [t for t in leaves if t is not None], dy)

    ref_leaves = [t.detach().double().requires_grad_() if t is not None else None
                  for t in (x, w, b)]
    y_ref = torch.nn.functional.layer_norm(ref_leaves[0], normalized_shape, ref_leaves[1],
                                           ref_leaves[2], eps)
    ref_grads = torch.autograd.grad(y_ref, [t for t in ref_leaves if t is not None],
                                    dy.double())
    _close(y, y_ref, dtype, "output")
    names = [n for n, t in zip(("dx", "dweight", "dbias"), (x, w, b), strict=True) if t is not None]
    for name, g, r in zip(names, grads, ref_grads, strict=True):
        _close(g, r, dtype, name)


@pytest.mark.parametrize("n", [1, 3, 17, 1000, 1024, 4099])
def test_matches_torch_for_row_lengths(n):
    x, w, b, dy = _make((4, n), (n,), torch.float32, seed=n)
    _check_against_torch(x, (n,), w, b, dy)


def test_row_longer_than_one_block_is_walked_in_chunks():
    n = MAX_BLOCK_N + 3617  # not a multiple of the block: the last chunk is masked
    x, w, b, dy = _make((2, n), (n,), torch.float32, seed=1)
    _check_against_torch(x, (n,), w, b, dy)


def test_chunked_path_on_short_rows_matches_single_block():
    x, w, b, dy = _make((3, 1000), (1000,), torch.float32, seed=2)
    y1, mean1, rstd1 = layer_norm_forward(x, w, b)
    y4, mean4, rstd4 = layer_norm_forward(x, w, b, max_block_n=256)  # 4 chunks, tail of 232
    torch.testing.assert_close(y4, y1, rtol=1e-6, atol=1e-6)
    torch.testing.assert_close(rstd4, rstd1, rtol=1e-6, atol=0)
    g1 = layer_norm_backward(dy, x, w, mean1, rstd1)
    g4 = layer_norm_backward(dy, x, w, mean1, rstd1, max_block_n=256, num_programs=2)
    for a, r in zip(g4, g1, strict=True):
        torch.testing.assert_close(a, r, rtol=1e-5, atol=1e-5)
    assert mean1.dtype == rstd1.dtype == torch.float32


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_half_precision_inputs(dtype):
    x, w, b, dy = _make((4, 1000), (1000,), dtype, seed=3)
    _check_against_torch(x, (1000,), w, b, dy)


def test_fewer_rows_than_backward_programs():
    # Programs 3..7 get no rows: their partial-sum rows must be zeros, not garbage.
    x, w, b, dy = _make((3, 17), (17,), torch.float32, seed=4)
    _, mean, rstd = layer_norm_forward(x, w, b)
    dx, dw, db = layer_norm_backward(dy, x, w, mean, rstd, num_programs=8)
    xr = x.double().requires_grad_()
    wr, br = w.double().requires_grad_(), b.double().requires_grad_()
    y_ref = torch.nn.functional.layer_norm(xr, (17,), wr, br)
    for g, r, name in zip((dx, dw, db), torch.autograd.grad(y_ref, (xr, wr, br), dy.double()),
                          ("dx", "dweight", "dbias"), strict=True):
        _close(g, r, torch.float32, name)


def test_backward_is_deterministic():
    x, w, b, dy = _make((6, 17), (17,), torch.float32, seed=5)
    _, mean, rstd = layer_norm_forward(x, w, b)
    first = layer_norm_backward(dy, x, w, mean, rstd, num_programs=4)
    second = layer_norm_backward(dy, x, w, mean, rstd, num_programs=4)
    for a, r in zip(first, second, strict=True):
        assert torch.equal(a, r)


def test_zero_size_batch():
    x = torch.empty((0, 5), device=DEVICE).requires_grad_()
    w = torch.randn(5, device=DEVICE).requires_grad_()
    b = torch.randn(5, device=DEVICE).requires_grad_()
    y = layer_norm(x, 5, w, b)
    assert y.shape == (0, 5)
    dx, dw, db = torch.autograd.grad(y, (x, w, b), torch.empty_like(y))
    assert dx.shape == (0, 5)
    assert torch.equal(dw, torch.zeros(5, device=DEVICE))
    assert torch.equal(db, torch.zeros(5, device=DEVICE))


def test_non_contiguous_input():
    base, w, b, dy = _make((2, 17, 5), (17,), torch.float32, seed=6)
    x = base.transpose(1, 2)  # (2, 5, 17): the normalized dim has stride 5
    assert not x.is_contiguous()
    _check_against_torch(x, (17,), w, b, dy.transpose(1, 2))


def test_multi_dimensional_normalized_shape():
    x, w, b, dy = _make((2, 3, 4, 5), (4, 5), torch.float32, seed=7)
    _check_against_torch(x, (4, 5), w, b, dy)


@pytest.mark.parametrize("with_weight,with_bias", [(False, False), (True, False), (False, True)])
def test_weight_and_bias_may_be_none(with_weight, with_bias):
    x, w, b, dy = _make((3, 17), (17,), torch.float32, with_weight, with_bias, seed=8)
    _check_against_torch(x, (17,), w, b, dy)


def test_bad_arguments_raise_like_torch():
    x = torch.randn(2, 5, device=DEVICE)
    with pytest.raises(RuntimeError, match="normalized_shape"):
        layer_norm(x, (4,))
    with pytest.raises(RuntimeError, match="weight"):
        layer_norm(x, (5,), weight=torch.ones(4, device=DEVICE))
    with pytest.raises(TypeError, match="dtype"):
        layer_norm(x.double(), (5,))


def test_padding_lanes_must_be_masked_out_of_the_variance():
    g = torch.Generator().manual_seed(9)
    x = (3.0 + torch.randn(4, 17, generator=g)).to(DEVICE)  # BLOCK_N = 32: 15 padding lanes
    true_var = x.double().var(dim=1, unbiased=False)
    _, var = row_statistics(x, "two_pass")
    _, bad = row_statistics(x, "two_pass_unmasked")
    torch.testing.assert_close(var.double().cpu(), true_var.cpu(), rtol=1e-5, atol=1e-6)
    assert ((bad.double() - true_var) / true_var).abs().min().item() > 1.0
    x16 = x[:, :16]  # a power of two: no padding, so the unmasked variant is right too
    torch.testing.assert_close(row_statistics(x16, "two_pass_unmasked")[1].double().cpu(),
                               x16.double().var(dim=1, unbiased=False).cpu(), rtol=1e-5,
                               atol=1e-6)


def test_one_pass_variance_cancels_for_a_large_mean():
    g = torch.Generator().manual_seed(10)
    x = (1e4 + torch.randn(4, 1024, generator=g)).to(DEVICE)  # std 1, mean 10^4
    true_var = x.double().var(dim=1, unbiased=False)
    _, two = row_statistics(x, "two_pass")
    _, one = row_statistics(x, "one_pass")
    assert ((two.double() - true_var) / true_var).abs().max().item() < 1e-4
    assert ((one.double() - true_var) / true_var).abs().max().item() > 0.1


@pytest.mark.skipif(torch.cuda.is_available(), reason="interpreter set-up applies without GPU")
def test_explicitly_disabled_interpreter_is_a_clear_error(monkeypatch):
    monkeypatch.setenv("TRITON_INTERPRET", "0")
    with pytest.raises(RuntimeError, match="TRITON_INTERPRET=1"):
        arrange_backend()


@pytest.mark.skipif(torch.cuda.is_available(), reason="interpreter set-up applies without GPU")
def test_importing_after_triton_without_interpreter_is_a_clear_error():
    code = (
        "import triton\n"
        "try:\n"
        "    import layernorm_tutorial.triton_kernels\n"
        "except RuntimeError as e:\n"
        "    assert 'before anything imports triton' in str(e), e\n"
        "else:\n"
        "    raise SystemExit('no RuntimeError')\n"
    )
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    result = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                            text=True, timeout=300)
    assert result.returncode == 0, result.stdout[-1000:] + result.stderr[-2000:]


def test_sixteen_bit_accumulator_stalls_where_float32_does_not():
    values = [3.0] * 4096  # exact sum 12288; float16 spacing there is 8 > 3
    assert sequential_sum(values, np.float32) == 12288.0
    assert abs(sequential_sum(values, np.float16) - 12288.0) > 1000.0
    assert sequential_sum([], np.float16) == 0.0


def test_source_excerpt_cuts_between_markers():
    text = excerpt(layer_norm_fwd_kernel, "if ROW_FITS_BLOCK:", "else:")
    assert text.startswith("if ROW_FITS_BLOCK:")
    assert "tl.where(mask, x - mean[:, None], 0.0)" in text and "for start" not in text
    with pytest.raises(ValueError, match="start"):
        excerpt(layer_norm_fwd_kernel, "no such line")


def test_sixteen_bit_partial_buffers_lose_precision():
    rng = np.random.default_rng(0)
    vals = rng.standard_normal((2048, 8)) + 1.0  # column sums about 2048
    exact = vals.sum(axis=0)
    fp32 = grouped_partial_sums(vals, 64, np.float32)
    fp16 = grouped_partial_sums(vals, 64, np.float16)
    assert np.abs(fp32 - exact).max() < 1e-3
    assert np.abs(fp16 - exact).max() > 10 * np.abs(fp32 - exact).max()
    few_rows = grouped_partial_sums(vals[:3], 64, np.float32)  # buffers 3..63 stay zero
    assert few_rows == pytest.approx(vals[:3].sum(0), rel=1e-5)


def test_parameter_gradients_keep_the_parameter_dtype():
    # Mixed precision (half input, float32 bias) is the one dtype mix the shared rule allows.
    x = torch.randn(3, 17, device=DEVICE).half().requires_grad_()
    bias = torch.randn(17, device=DEVICE, requires_grad=True)
    dy = torch.randn(3, 17, device=DEVICE).half()
    (db,) = torch.autograd.grad(layer_norm(x, 17, None, bias), (bias,), dy)
    assert db.dtype == torch.float32
    torch.testing.assert_close(db, dy.float().sum(0), rtol=1e-3, atol=1e-3)


@pytest.mark.parametrize("eps", [-1e-5, float("nan"), "1e-5"])
def test_bad_eps_is_refused_exactly_as_functional_does(eps):
    # Issue 12 item 3: the Triton path accepted a negative eps silently.
    x = torch.randn(2, 5, device=DEVICE)
    with pytest.raises((ValueError, TypeError)) as theirs:
        functional.layer_norm(x, (5,), eps=eps)
    with pytest.raises(theirs.type) as ours:
        layer_norm(x, (5,), eps=eps)
    assert str(ours.value) == str(theirs.value)


def test_eps_as_numpy_scalar_or_tensor_is_accepted():
    x, w, b, dy = _make((3, 17), (17,), torch.float32, seed=11)
    expected = layer_norm(x, (17,), w, b, 1e-3)
    for eps in (np.float32(1e-3), np.float64(1e-3), torch.tensor(1e-3)):
        torch.testing.assert_close(layer_norm(x, (17,), w, b, eps), expected, rtol=1e-6,
                                   atol=1e-6)


def test_mixed_dtypes_are_refused_like_functional():
    x = torch.randn(2, 5, device=DEVICE)
    with pytest.raises(RuntimeError, match="mixed dtypes"):
        layer_norm(x, (5,), weight=torch.ones(5, device=DEVICE).half())


def test_compile_only_flag_conflicts_with_the_interpreter(monkeypatch):
    monkeypatch.setenv("LAYERNORM_TRITON_COMPILE_ONLY", "1")
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    with pytest.raises(RuntimeError, match="unset TRITON_INTERPRET"):
        arrange_backend()



@pytest.mark.parametrize("upstream_has_graph", [True, False])
def test_gradient_penalty_matches_torch(upstream_has_graph):
    # Issue 24 item 1: a gradient penalty (create_graph=True, then a backward through x.grad)
    # through the Triton op silently dropped the second-order term (error 26.8 vs torch).
    x, w, b, _ = _make((3, 17), (17,), torch.float32, seed=12)

    def penalised_grads(fn, dtype):
        leaves = [t.detach().to(dtype).requires_grad_() for t in (x, w, b)]
        y = fn(leaves[0], (17,), leaves[1], leaves[2])
        loss = (y * y).sum() if upstream_has_graph else (y * y.detach().cos()).sum()
        (gx,) = torch.autograd.grad(loss, leaves[0], create_graph=True)
        return torch.autograd.grad(loss + gx.pow(2).sum(), leaves)

    ours = penalised_grads(layer_norm, torch.float32)
    ref = penalised_grads(torch.nn.functional.layer_norm, torch.float64)
    for g, r, name in zip(ours, ref, ("dx", "dweight", "dbias"), strict=True):
        assert g.dtype == torch.float32
        torch.testing.assert_close(g.double(), r, rtol=1e-4, atol=1e-4, msg=name)


def test_double_backward_path_passes_gradcheck_in_float64():
    # The graph-carrying backward (used when create_graph=True) is differentiated by autograd:
    # its own derivatives (the LayerNorm's second derivatives) checked in float64, and its
    # values equal torch's first-order gradients.
    from layernorm_tutorial.triton_kernels.ops import differentiable_backward

    g = torch.Generator().manual_seed(14)
    dy, x = (torch.randn(3, 7, generator=g, dtype=torch.float64, requires_grad=True)
             for _ in range(2))
    w = torch.randn(7, generator=g, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(lambda *a: differentiable_backward(*a, 1e-5), (dy, x, w))
    xr, wr = x.detach().requires_grad_(), w.detach().requires_grad_()
    br = torch.zeros(7, dtype=torch.float64, requires_grad=True)
    ref = torch.autograd.grad(torch.nn.functional.layer_norm(xr, (7,), wr, br), (xr, wr, br),
                              dy.detach())
    for a, r in zip(differentiable_backward(dy, x, w, 1e-5), ref, strict=True):
        torch.testing.assert_close(a, r)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
@pytest.mark.parametrize("n", [5, 100, 1000])
def test_several_rows_per_program_with_a_partial_last_tile(n, dtype):
    # Short rows are processed ROWS at a time (launch_config); 7 rows leave the last tile
    # partly empty in both kernels, and the backward's programs share uneven row blocks.
    from layernorm_tutorial.triton_kernels import ops

    for kernel in ("forward", "backward"):
        _, _, rows, _, fits = ops.launch_config(n, ops.MAX_BLOCK_N, kernel)
        assert fits and rows > 1 and 7 % rows != 0
    x, w, b, dy = _make((7, n), (n,), dtype, seed=n)
    _check_against_torch(x, (n,), w, b, dy)


@pytest.mark.parametrize("with_weight,with_bias", [(False, False), (True, False), (False, True)])
def test_weight_bias_variants_on_multi_row_tiles_and_chunks(with_weight, with_bias):
    # Every (HAS_WEIGHT, COMPUTE_DW, COMPUTE_DB) of the one dgamma/dbeta reduction launch,
    # on the multi-row path and on the chunked path.
    x, w, b, dy = _make((5, 300), (300,), torch.float32, with_weight, with_bias, seed=15)
    _check_against_torch(x, (300,), w, b, dy)
    _, mean, rstd = layer_norm_forward(x, w, b)
    whole = layer_norm_backward(dy, x, w, mean, rstd, compute_db=with_bias)
    chunks = layer_norm_backward(dy, x, w, mean, rstd, compute_db=with_bias, max_block_n=128,
                                 num_programs=3)
    for a, r in zip(chunks, whole, strict=True):
        assert (a is None) == (r is None)
        if a is not None:
            torch.testing.assert_close(a, r, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("with_weight,with_bias", [(True, True), (False, True), (True, False)])
def test_rows_split_between_two_programs(with_weight, with_bias):
    # SPLIT = 2 or 4: the programs of a group reduce the whole row, each writes its part of
    # dx and of the partial dgamma/dbeta. Forced on short rows (2 rows per step, 5 rows, 4
    # groups, one of them idle) and taken by the rule for a 16-bit row over 8192.
    from layernorm_tutorial.triton_kernels import ops

    x, w, b, dy = _make((5, 300), (300,), torch.float32, with_weight, with_bias, seed=16)
    _, mean, rstd = layer_norm_forward(x, w, b)
    whole = layer_norm_backward(dy, x, w, mean, rstd, compute_db=with_bias)
    for parts in (2, 4):
        split = layer_norm_backward(dy, x, w, mean, rstd, compute_db=with_bias,
                                    config=(512, 4, 2, parts, True), num_programs=4)
        for a, r in zip(split, whole, strict=True):
            assert (a is None) == (r is None)
            if a is not None:
                torch.testing.assert_close(a, r, rtol=1e-5, atol=1e-5)
    n = ops.SPLIT_ABOVE + 808
    assert ops.launch_config(n, ops.MAX_BLOCK_N_BACKWARD, "backward", 2)[3:] == (2, True)
    assert ops.launch_config(n, ops.MAX_BLOCK_N_BACKWARD, "backward", 4)[3:] == (1, False)
    if with_weight and with_bias:
        x, w, b, dy = _make((2, n), (n,), torch.bfloat16, seed=17)
        _check_against_torch(x, (n,), w, b, dy)


def test_pairwise_sum_is_a_tree_in_the_given_dtype():
    from layernorm_tutorial.triton_kernels.pitfalls import pairwise_sum

    assert pairwise_sum(np.full(4096, 3.0), np.float16) == 12288.0  # exact: every level is
    assert sequential_sum(np.full(4096, 3.0), np.float16) < 12288.0  # the loop stalls
    assert pairwise_sum([1.0, 2.0, 4.0], np.float32) == 7.0 and pairwise_sum([], np.float16) == 0
    values = np.random.default_rng(0).standard_normal(4096) + 3.0
    exact = values.sum()
    assert abs(pairwise_sum(values, np.float16) - exact) > abs(
        pairwise_sum(values, np.float32) - exact)
