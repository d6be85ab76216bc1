"""RMSNorm and the fused residual add + norm (``triton_kernels.fused``) against torch in float64.

Every case runs the Triton forward and backward (Triton's CPU interpreter without a GPU) and
compares the output, the new residual ``s`` and the gradients of input, residual, weight and
bias with torch's ``rms_norm`` / ``layer_norm`` of ``x + r`` in float64. The paths of the one
kernel source: multi-row tiles (short rows, a partly empty last tile), one resident row,
chunked rows (the statistics pass + normalize pass forward, the two-pass backward; forced on
short rows with ``max_block_n`` and taken by the rule for rows over the caps). Shapes are
small: the interpreter runs each program in Python.
"""

import pytest
import torch

pytest.importorskip("layernorm_tutorial.triton_kernels",
                    reason="Triton is not installed (Linux x86-64/aarch64 only)",
                    exc_type=ImportError)

from layernorm_tutorial.triton_kernels import (  # noqa: E402
    add_layer_norm,
    add_rms_norm,
    fused,
    pipelined_layer_norm,
    rms_norm,
)

F = torch.nn.functional
DEVICE = "cuda" if torch.cuda.is_available() else "cpu"
F64 = torch.float64
# Largest error relative to max(1, max |reference|), as in test_triton_kernels.py: a few
# units of the dtype's rounding (fp32 accumulation, one rounding to the dtype).
TOL = {torch.float32: 2e-5, torch.float16: 2e-3, torch.bfloat16: 1.6e-2}
FP32_EPS = torch.finfo(torch.float32).eps
KINDS = ("rms", "layer", "add_rms", "add_layer")


def _make(m, n, dtype, *, weight=True, bias=True, seed=0, shape=None):
    """x, r, w, b, dy, ds: float64 draws cast to ``dtype`` (x centred away from 0)."""
    g = torch.Generator().manual_seed(seed)
    shape = shape or (m, n)

    def draw(size, scale=1.0, shift=0.0):
        return (shift + scale * torch.randn(size, generator=g, dtype=F64)).to(dtype).to(DEVICE)

    x, r = draw(shape, 2.0, 1.0), draw(shape)
    w = draw(shape[-1:], 0.5, 1.0) if weight else None
    b = draw(shape[-1:]) if bias else None
    return x, r, w, b, draw(shape), draw(shape)


def _close(actual, expected, dtype, what):
    assert actual.shape == expected.shape, f"{what}: shape {actual.shape} != {expected.shape}"
    assert actual.dtype == dtype, f"{what}: dtype {actual.dtype}, expected {dtype}"
    err = (actual.double().cpu() - expected.cpu()).abs().max().item() if actual.numel() else 0.0
    scale = max(1.0, expected.abs().max().item() if expected.numel() else 0.0)
    assert err <= TOL[dtype] * scale, f"{what}: max error {err:.3e} > {TOL[dtype] * scale:.3e}"


def _ours(kind, x, r, w, b, eps):
    n = x.shape[-1]
    if kind == "rms":
        return rms_norm(x, (n,), w, eps), None
    if kind == "layer":
        return pipelined_layer_norm(x, (n,), w, b, 1e-5 if eps is None else eps), None
    if kind == "add_rms":
        return add_rms_norm(x, r, (n,), w, eps)
    return add_layer_norm(x, r, (n,), w, b, 1e-5 if eps is None else eps)


def _norm_ref(kind, s, w, b, eps):
    """torch's norm of ``s`` over the last dim, as ``kind`` asks."""
    n = s.shape[-1]
    if kind in ("add_layer", "layer"):
        return F.layer_norm(s, (n,), w, b, 1e-5 if eps is None else eps)
    return F.rms_norm(s, (n,), w, FP32_EPS if eps is None else eps)


def _reference(kind, x, r, w, b, eps):
    """``(norm(s), s)`` in torch, ``s = x`` for ``rms``, else ``x + r``."""
    s = x if kind in ("rms", "layer") else x + r
    return _norm_ref(kind, s, w, b, eps), s


def _check_sum(s, rounded):
    """``s`` is ``x + r`` rounded to the input's dtype: exactly for float32 and float16; for
    bfloat16 within one unit in the last place, because Triton 3.9's *interpreter* truncates
    float32 -> bfloat16 casts (``_convert_float`` ignores the rounding mode), where the GPU
    rounds to nearest even as torch does."""
    if s.dtype != torch.bfloat16 or s.is_cuda:
        assert torch.equal(s.double(), rounded), "s differs from x + r"
        return
    ulp = rounded.abs().clamp_min(1e-30).log2().floor().exp2() * 2.0 ** -7
    assert ((s.double() - rounded).abs() <= ulp).all(), "s differs from x + r by over 1 ulp"


def check(kind, x, r, w, b, dy, ds, eps=None, use_y=True, use_s=True):
    """Our forward and every gradient against torch in float64; ``use_y``/``use_s``: which
    outputs feed the loss (the other's gradient is absent, as when a block ignores it)."""
    dtype = x.dtype
    b = b if kind in ("add_layer", "layer") else None
    residual = kind.startswith("add_")
    named = [(k, t) for k, t in (("input", x), ("residual", r), ("weight", w), ("bias", b))
             if t is not None and (residual or k != "residual")]
    leaves = [t.detach().clone().requires_grad_() for _, t in named]
    by = dict(zip([k for k, _ in named], leaves, strict=True))
    y, s = _ours(kind, by["input"], by.get("residual"), by.get("weight"), by.get("bias"), eps)
    ref_leaves = [t.detach().double().requires_grad_() for _, t in named]
    rby = dict(zip([k for k, _ in named], ref_leaves, strict=True))
    # torch normalizes x + r rounded to the input's dtype (what the kernel stores and
    # normalizes), in float64, with a graph back to the leaves (the rounding has gradient 1).
    rounded = s_ref = rby["input"]
    if residual:
        rounded = (x + r).double()
        s_ref = rby["input"] + rby["residual"]
        s_ref = s_ref + (rounded - s_ref).detach()
    y_ref = _norm_ref(kind, s_ref, rby.get("weight"), rby.get("bias"), eps)
    _close(y.detach(), y_ref.detach(), dtype, "output")
    if s is not None:
        _check_sum(s.detach(), rounded)
    outs, grads, ref_outs, ref_grads = [], [], [], []
    if use_y:
        outs.append(y), grads.append(dy), ref_outs.append(y_ref), ref_grads.append(dy.double())
    if use_s and s is not None:
        outs.append(s), grads.append(ds), ref_outs.append(s_ref)
        ref_grads.append(ds.double())
    got = torch.autograd.grad(outs, leaves, grads, allow_unused=True, materialize_grads=True)
    want = torch.autograd.grad(ref_outs, ref_leaves, ref_grads, allow_unused=True,
                               materialize_grads=True)
    for (name, _), g, ref in zip(named, got, want, strict=True):
        _close(g, ref, dtype, f"gradient of {name}")


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
def test_multi_row_tiles_every_dtype(kind, dtype):
    # 7 rows of 100: 16 rows per tile, one partly empty tile; padding lanes 100..127.
    cfg = fused.fused_launch_config(100, "forward", 2)
    assert cfg.row_fits_block and cfg.rows > 7
    check(kind, *_make(7, 100, dtype, seed=1))


@pytest.mark.parametrize("kind", KINDS)
def test_one_resident_row_per_tile_and_several_tiles_per_program(kind):
    # Rows of 3000: one row per tile (BLOCK_N 4096), 9 tiles over 4 interpreter programs,
    # so each persistent program walks several tiles and accumulates dgamma across them.
    cfg = fused.fused_launch_config(3000, "backward", 4)
    assert cfg.row_fits_block and cfg.rows == 1
    check(kind, *_make(9, 3000, torch.float32, seed=2))


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_chunked_path_forced_on_short_rows(kind, dtype, monkeypatch):
    # Both kernels walk rows of 300 in chunks of 64 (a tail of 44): the Welford statistics
    # pass and the normalize pass forward, the two-pass backward with in-place partials.
    monkeypatch.setattr(fused, "FUSED_MAX_BLOCK_N", 64)
    monkeypatch.setattr(fused, "FUSED_MAX_BLOCK_N_BACKWARD", 64)
    assert not fused.fused_launch_config(300, "forward").row_fits_block
    backward = fused.fused_launch_config(300, "backward", 4)  # 2 rows per tile, 32 lanes
    assert backward.rows > 1 and 300 % backward.block_n and 5 % backward.rows
    check(kind, *_make(5, 300, dtype, seed=3))


@pytest.mark.parametrize("kind,weight,bias", [
    ("rms", False, False), ("add_rms", False, False), ("add_layer", False, False),
    ("add_layer", True, False), ("add_layer", False, True), ("layer", False, False),
    ("layer", True, False), ("layer", False, True)])
def test_weight_and_bias_variants_on_tiles_and_chunks(kind, weight, bias, monkeypatch):
    # (True, True) is every other test's case; RMSNorm has no bias.
    check(kind, *_make(6, 50, torch.float32, weight=weight, bias=bias, seed=4))
    monkeypatch.setattr(fused, "FUSED_MAX_BLOCK_N", 16)
    monkeypatch.setattr(fused, "FUSED_MAX_BLOCK_N_BACKWARD", 16)
    check(kind, *_make(6, 50, torch.float32, weight=weight, bias=bias, seed=4))


def test_rows_over_the_caps_take_the_chunked_paths_by_rule():
    # 16-bit rows of 16384 + 617: the forward's statistics + normalize pass and the chunked
    # backward, chosen by the launch rule (not forced), a masked tail chunk.
    n = fused.FUSED_MAX_BLOCK_N + 617
    for kernel in ("forward", "backward"):
        assert not fused.fused_launch_config(n, kernel, 2).row_fits_block
    assert fused.fused_launch_config(fused.FUSED_MAX_BLOCK_N, "forward", 2).row_fits_block
    check("add_rms", *_make(2, n, torch.bfloat16, seed=5))


def test_rows_between_the_backward_and_forward_caps():
    # 12000: resident in the forward (BLOCK_N 16384), chunked in the backward.
    n = 12000
    assert fused.fused_launch_config(n, "forward", 4).row_fits_block
    assert not fused.fused_launch_config(n, "backward", 4).row_fits_block
    check("add_layer", *_make(2, n, torch.float32, seed=6))


@pytest.mark.parametrize("use_y,use_s", [(True, False), (False, True)])
def test_only_one_output_feeds_the_loss(use_y, use_s):
    # A block that ignores s (last layer) or y: the other gradient never arrives.
    check("add_rms", *_make(5, 40, torch.float32, seed=7), use_y=use_y, use_s=use_s)


def test_explicit_eps_and_eps_none_follow_torch():
    x, r, w, _, dy, ds = _make(4, 33, torch.bfloat16, seed=8)
    check("add_rms", x, r, w, None, dy, ds, eps=0.1)
    # eps=None: float32's machine epsilon for a 16-bit input, as torch; a row of tiny values
    # makes the choice visible (bf16's eps would give a different output).
    tiny = torch.full((1, 33), 1e-4, dtype=torch.float32)
    ours = rms_norm(tiny, (33,))
    assert torch.equal(ours, F.rms_norm(tiny, (33,)))
    assert not torch.allclose(ours, F.rms_norm(tiny, (33,), eps=torch.finfo(torch.bfloat16).eps))


def test_forward_statistics_and_residual_buffers():
    x, r, w, b, _, _ = _make(5, 70, torch.float32, seed=9)
    y, s, mean, rstd = fused.fused_norm_forward(x, r, w, b, 1e-5, rms=False)
    s64 = (x + r).double()
    torch.testing.assert_close(mean.double(), s64.mean(1), rtol=1e-6, atol=1e-6)
    torch.testing.assert_close(rstd.double(), 1 / (s64.var(1, unbiased=False) + 1e-5).sqrt(),
                               rtol=1e-5, atol=0)
    _, none, no_mean, rstd_rms = fused.fused_norm_forward(x, None, w, None, 1e-5, rms=True)
    assert none is None and no_mean is None
    torch.testing.assert_close(rstd_rms.double(), 1 / (x.double().square().mean(1) + 1e-5)
                               .sqrt(), rtol=1e-5, atol=0)


def test_large_offset_rows_keep_their_variance_on_the_chunked_path(monkeypatch):
    # x = 1e4 + N(0, 1) in float32: per-lane Welford (no E[x^2] - E[x]^2) stays within the
    # error of float32 rounding of the inputs themselves (conftest.OFFSET_TOL, 2e-3).
    monkeypatch.setattr(fused, "FUSED_MAX_BLOCK_N", 64)
    g = torch.Generator().manual_seed(10)
    x = (1e4 + torch.randn(3, 300, generator=g, dtype=F64)).float()
    r = torch.zeros_like(x)
    y, _ = add_layer_norm(x, r, (300,))
    err = (y.double() - F.layer_norm(x.double(), (300,))).abs().max().item()
    assert err < 2e-3, err


def test_backward_is_deterministic_and_idle_programs_write_zeros():
    x, r, w, b, dy, ds = _make(3, 17, torch.float32, seed=11)
    y, s, mean, rstd = fused.fused_norm_forward(x, r, w, b, 1e-5, rms=False)
    # 8 programs for 3 rows: programs 3..7 get none; their partial rows must be zeros.
    first = fused.fused_norm_backward(dy, s, w, mean, rstd, rms=False, ds2d=ds, programs=8)
    again = fused.fused_norm_backward(dy, s, w, mean, rstd, rms=False, ds2d=ds, programs=8)
    fewer = fused.fused_norm_backward(dy, s, w, mean, rstd, rms=False, ds2d=ds, programs=1)
    for a, b2, c in zip(first, again, fewer, strict=True):
        assert torch.equal(a, b2)
        torch.testing.assert_close(a, c, rtol=1e-6, atol=1e-6)


def test_same_tensor_as_input_and_residual_gets_both_gradients():
    x = torch.randn(3, 20, dtype=torch.float32).requires_grad_()
    y, s = add_rms_norm(x, x, (20,))
    (y.sum() + 3 * s.sum()).backward()
    xr = x.detach().double().requires_grad_()
    s_ref = xr + xr
    (F.rms_norm(s_ref, (20,), eps=FP32_EPS).sum() + 3 * s_ref.sum()).backward()
    torch.testing.assert_close(x.grad.double(), xr.grad, rtol=1e-5, atol=1e-5)


def test_zero_rows_non_contiguous_and_multi_dimensional_shapes():
    x = torch.empty((0, 6)).requires_grad_()
    r = torch.empty((0, 6)).requires_grad_()
    w = torch.randn(6).requires_grad_()
    y, s = add_rms_norm(x, r, 6, w)
    assert y.shape == s.shape == (0, 6)
    dx, dr, dw = torch.autograd.grad(y, (x, r, w), torch.empty_like(y))
    assert dx.shape == dr.shape == (0, 6) and torch.equal(dw, torch.zeros(6))
    # Rows whose features are strided (a transposed view): copied to unit stride inside.
    x, r, w, b, dy, ds = _make(2, 17, torch.float32, seed=12, shape=(2, 5, 17))
    strided = [t.transpose(1, 2).contiguous().transpose(1, 2) for t in (x, r, dy, ds)]
    assert not strided[0].is_contiguous()
    check("add_layer", strided[0], strided[1], w, b, strided[2], strided[3])
    # normalized_shape (4, 5): 20 features per row.
    x, r, w, b, dy, _ = _make(0, 0, torch.float32, seed=13, shape=(2, 3, 4, 5))
    xs, rs = x.clone().requires_grad_(), r.clone().requires_grad_()
    y, s = add_layer_norm(xs, rs, (4, 5), w.expand(4, 5), None)
    xr = (x + r).double().requires_grad_()
    ref = F.layer_norm(xr, (4, 5), w.expand(4, 5).double())
    _close(y.detach(), ref.detach(), torch.float32, "output (normalized_shape (4, 5))")
    (gx,) = torch.autograd.grad(y, xs, dy)
    _close(gx, torch.autograd.grad(ref, xr, dy.double())[0], torch.float32, "gradient")


def test_bad_arguments_raise_one_line_errors_naming_them():
    x = torch.randn(2, 5)
    with pytest.raises(RuntimeError, match="residual: expected the input's shape"):
        add_rms_norm(x, torch.randn(2, 4), (5,))
    with pytest.raises(RuntimeError, match="residual: expected the input's dtype"):
        add_layer_norm(x, torch.randn(2, 5, dtype=torch.float16), (5,))
    with pytest.raises(TypeError, match="residual must be a torch.Tensor"):
        add_rms_norm(x, 1.0, (5,))
    with pytest.raises(RuntimeError, match="normalized_shape"):
        rms_norm(x, (4,))
    with pytest.raises(RuntimeError, match="weight"):
        add_rms_norm(x, x, (5,), torch.ones(4))
    with pytest.raises(TypeError, match="input: expected dtype"):
        rms_norm(x.double(), (5,))
    with pytest.raises(ValueError, match="eps"):
        add_rms_norm(x, x, (5,), eps=-1.0)
    with pytest.raises(TypeError, match="eps must be a real number"):
        add_layer_norm(x, x, (5,), eps=None)
    with pytest.raises(ValueError, match="bias: RMSNorm has no bias"):
        fused.fused_norm_forward(x, None, None, torch.ones(5), 1e-5, rms=True)
    with pytest.raises(ValueError, match="kernel"):
        fused.fused_launch_config(5, "sideways")
    with pytest.raises(RuntimeError) as caught:
        add_rms_norm(x, torch.randn(3, 5), (5,))
    assert "\n" not in str(caught.value)


@pytest.mark.parametrize("rms", [True, False])
def test_double_backward_path_passes_gradcheck_in_float64(rms):
    # The graph-carrying backward used under create_graph=True: its derivatives (the norm's
    # second derivatives, the residual's pass-through) checked by gradcheck in float64, and
    # its values equal torch's first-order gradients.
    g = torch.Generator().manual_seed(14)
    dy, ds, s = (torch.randn(3, 7, generator=g, dtype=F64, requires_grad=True)
                 for _ in range(3))
    w = torch.randn(7, generator=g, dtype=F64, requires_grad=True)

    def backward(*a):
        return tuple(t for t in fused.differentiable_fused_backward(*a, 1e-5, rms)
                     if t is not None)

    assert torch.autograd.gradcheck(backward, (dy, ds, s, w))
    sr, wr = s.detach().requires_grad_(), w.detach().requires_grad_()
    y = (F.rms_norm(sr, (7,), wr, 1e-5) if rms else F.layer_norm(sr, (7,), wr, None, 1e-5))
    ref = torch.autograd.grad([y, sr], (sr, wr), [dy.detach(), ds.detach()])
    got = backward(dy, ds, s, w)
    for a, r in zip(got, ref, strict=False):
        torch.testing.assert_close(a, r)


@pytest.mark.parametrize("kind", KINDS)
def test_gradient_penalty_matches_torch(kind):
    # create_graph=True through our op, then a backward through the gradients: the
    # second-order terms must reach input, residual and weight (float32 vs float64 torch).
    x, r, w, b, _, _ = _make(3, 17, torch.float32, seed=15)
    b = b if kind in ("add_layer", "layer") else None
    residual = kind.startswith("add_")

    def penalised(fn_kind, dtype, ours):
        ts = [t.detach().to(dtype).requires_grad_() for t in (x, r, w)]
        bb = b.detach().to(dtype).requires_grad_() if b is not None else None
        if ours:
            y, s = _ours(fn_kind, ts[0], ts[1], ts[2], bb, 1e-5)
        else:
            y, s = _reference(fn_kind, ts[0], ts[1], ts[2], bb, 1e-5)
        loss = (y * y).sum() + (s * s.detach().cos()).sum() if residual else (y * y).sum()
        leaves = (ts if residual else [ts[0], ts[2]]) + ([bb] if bb is not None else [])
        gx = torch.autograd.grad(loss, leaves[0], create_graph=True)[0]
        return torch.autograd.grad(loss + gx.pow(2).sum(), leaves)

    for got, ref in zip(penalised(kind, torch.float32, True), penalised(kind, F64, False),
                        strict=True):
        assert got.dtype == torch.float32
        torch.testing.assert_close(got.double(), ref, rtol=1e-4, atol=1e-4)


def test_launch_rule_covers_rows_up_to_64k():
    for n in (1, 100, 1024, 4096, 8192, 16384, 16385, 32768, 65536):
        for kernel in ("forward", "backward"):
            for size in (2, 4):
                cfg = fused.fused_launch_config(n, kernel, size)
                cap = fused.FUSED_MAX_BLOCK_N if kernel == "forward" else \
                    fused.FUSED_MAX_BLOCK_N_BACKWARD
                assert cfg.row_fits_block == (n <= cap)
                assert cfg.block_n >= min(n, cfg.block_n) and cfg.block_n & (cfg.block_n - 1) == 0
                assert cfg.rows * cfg.block_n <= max(fused.FUSED_TILE, cfg.block_n)
    assert fused.fused_reduce_block_n(132, 4096) == 16  # 256 partial rows x 16 in one step
    assert fused.fused_reduce_block_n(4, 8) == 16


def test_without_triton_the_package_raises_one_clear_import_error():
    # macOS and Windows have no triton wheel: the kernels package says so in one line, and
    # the performance model and the tuning command still import (issue 33 item 8).
    import subprocess
    import sys

    code = ("import sys; sys.modules['triton'] = None\n"
            "import layernorm_tutorial.roofline, layernorm_tutorial.kernel_tune\n"
            "try:\n    import layernorm_tutorial.triton_kernels\n"
            "except ImportError as err:\n    print(err)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True, timeout=300).stdout
    assert out.startswith("the Triton kernels need the triton package (Linux x86-64/aarch64 "
                          "only)"), out
    assert out.count("\n") == 1, out
