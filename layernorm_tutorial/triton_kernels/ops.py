"""Host side of the fused LayerNorm: block sizes, launches, the autograd.Function, the API.

``layer_norm_forward`` and ``layer_norm_backward`` work on 2-D views ``(M, N)`` and accept
preallocated outputs (the benchmark uses them); ``layer_norm`` has the signature and
semantics of ``torch.nn.functional.layer_norm`` and is differentiable.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch
import triton

from .._validation import check_layer_norm_args, compute_dtype
from ..autograd import normalization_backward
from ..functional import standardize
from .kernels import layer_norm_bwd_kernel, layer_norm_fwd_kernel, sum_rows_kernel

SUPPORTED_DTYPES = (torch.float32, torch.float16, torch.bfloat16)
MAX_BLOCK_N = 16384  # forward: longest row kept in registers; longer rows are walked in chunks
MAX_BLOCK_N_BACKWARD = 8192  # backward: five row-sized blocks; 16384 spills (see aot)
CHUNK_BLOCK_N = 8192  # rows longer than the cap are walked in chunks of at most this many
REDUCE_BLOCK_G, REDUCE_BLOCK_N = 32, 128  # tile of the dgamma/dbeta column reduction
REDUCE_NUM_WARPS = 4  # warps per program of the column reduction
# The interpreter runs programs one after another in Python: fewer, wider tiles are faster.
INTERPRETER_REDUCE_BLOCK_N = 4096
INTERPRETER_PROGRAMS = 8  # backward programs under the interpreter (it runs them in turn)


def block_size(n: int, max_block_n: int = MAX_BLOCK_N) -> int:
    """Power-of-two block for rows of ``n`` elements: next_power_of_2(n), capped."""
    return min(triton.next_power_of_2(max(n, 1)), max_block_n)


def num_warps_for(block_n: int) -> int:
    """Warps per program: about 256 elements per warp, between 1 and 16 (not tuned on a GPU)."""
    return min(max(block_n // 256, 1), 16)


def launch_config(n: int, max_block_n: int) -> tuple[int, int, bool]:
    """``(BLOCK_N, num_warps, ROW_FITS_BLOCK)`` for rows of ``n`` elements, block capped at
    ``max_block_n``: the one rule both launchers (and the ahead-of-time compile test) use.

    A row of up to ``max_block_n`` elements is held in one block; a longer one is walked in
    chunks of ``min(max_block_n, CHUNK_BLOCK_N)`` lanes (16384-lane chunks spill registers
    on sm_90, see ``aot``)."""
    if n <= max_block_n:
        block_n = block_size(n, max_block_n)
    else:
        block_n = min(max_block_n, CHUNK_BLOCK_N)
    return block_n, num_warps_for(block_n), n <= block_n


def backward_programs(m: int, device: torch.device) -> int:
    """How many programs share the rows in the backward: one per SM on a GPU, at most ``m``."""
    if device.type == "cuda":
        target = torch.cuda.get_device_properties(device).multi_processor_count
    else:
        target = INTERPRETER_PROGRAMS
    return max(1, min(m, target))


def _rows_view(t: torch.Tensor, m: int, n: int) -> torch.Tensor:
    """``t`` as an (m, n) matrix whose rows are contiguous (copies only when needed)."""
    t2 = t.reshape(m, n)
    if n > 1 and t2.stride(1) != 1:
        t2 = t2.contiguous()
    return t2


def layer_norm_forward(x2d: torch.Tensor, weight: torch.Tensor | None,
                       bias: torch.Tensor | None, eps: float = 1e-5, *,
                       out: torch.Tensor | None = None, mean: torch.Tensor | None = None,
                       rstd: torch.Tensor | None = None, max_block_n: int = MAX_BLOCK_N):
    """Normalize each row of ``x2d`` (M, N): returns ``(y (M, N), mean (M,), rstd (M,))``.

    ``mean`` and ``rstd = 1 / sqrt(var + eps)`` are float32 whatever the input dtype; ``y``
    has the input's dtype. ``weight`` and ``bias`` are (N,) or None. Pass ``out``, ``mean``,
    ``rstd`` to reuse buffers; ``max_block_n`` (a power of two) lets tests force the chunked
    path on short rows.
    """
    m, n = x2d.shape
    if x2d.stride(1) != 1 and n > 1:
        raise ValueError("x2d: expected rows with unit stride (use .contiguous())")
    y = torch.empty_like(x2d, memory_format=torch.contiguous_format) if out is None else out
    mean = torch.empty(m, dtype=torch.float32, device=x2d.device) if mean is None else mean
    rstd = torch.empty(m, dtype=torch.float32, device=x2d.device) if rstd is None else rstd
    if m == 0 or n == 0:
        return y, mean.fill_(float("nan")), rstd.fill_(float("nan"))
    block_n, num_warps, row_fits_block = launch_config(n, max_block_n)
    layer_norm_fwd_kernel[(m,)](
        x2d, y, weight if weight is not None else x2d, bias if bias is not None else x2d,
        mean, rstd, x2d.stride(0), y.stride(0), n, eps,
        HAS_WEIGHT=weight is not None, HAS_BIAS=bias is not None,
        BLOCK_N=block_n, ROW_FITS_BLOCK=row_fits_block, num_warps=num_warps,
    )
    return y, mean, rstd


def sum_partials(partial: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """Column sums of a float32 (G, N) buffer, in a fixed order, cast to ``dtype``."""
    g, n = partial.shape
    out = torch.empty(n, dtype=dtype, device=partial.device)
    if n == 0:
        return out
    block_n = REDUCE_BLOCK_N if partial.device.type == "cuda" else INTERPRETER_REDUCE_BLOCK_N
    grid = (triton.cdiv(n, block_n),)
    sum_rows_kernel[grid](partial, out, g, n, BLOCK_G=REDUCE_BLOCK_G, BLOCK_N=block_n,
                          num_warps=REDUCE_NUM_WARPS)
    return out


def layer_norm_backward(dy2d: torch.Tensor, x2d: torch.Tensor, weight: torch.Tensor | None,
                        mean: torch.Tensor, rstd: torch.Tensor, *, compute_dw: bool = True,
                        compute_db: bool = True, dx: torch.Tensor | None = None,
                        bias_dtype: torch.dtype | None = None,
                        num_programs: int | None = None,
                        max_block_n: int = MAX_BLOCK_N_BACKWARD):
    """Gradients of LayerNorm for rows (M, N): returns ``(dx, dweight or None, dbias or None)``.

    ``dx`` has the input's dtype; ``dweight``/``dbias`` (N,) are reduced in float32 and cast
    to the parameter's dtype (``dbias``: ``bias_dtype``, by default the weight's dtype, or the
    input's when ``weight`` is None). ``num_programs`` overrides how many programs share the
    rows (tests use more programs than rows).
    """
    m, n = x2d.shape
    for name, t in (("x2d", x2d), ("dy2d", dy2d)):
        if t.shape != (m, n) or (n > 1 and t.stride(1) != 1):
            raise ValueError(f"{name}: expected shape ({m}, {n}) with unit-stride rows")
    dx = torch.empty_like(x2d, memory_format=torch.contiguous_format) if dx is None else dx
    param_dtype = weight.dtype if weight is not None else x2d.dtype
    compute_dw = compute_dw and weight is not None
    if m == 0 or n == 0:
        zeros = torch.zeros(n, dtype=param_dtype, device=x2d.device)
        return (dx, zeros if compute_dw else None,
                zeros.to(bias_dtype or param_dtype) if compute_db else None)
    programs = num_programs or backward_programs(m, x2d.device)
    f32 = dict(dtype=torch.float32, device=x2d.device)
    partial_dw = torch.empty((programs, n), **f32) if compute_dw else rstd
    partial_db = torch.empty((programs, n), **f32) if compute_db else rstd
    block_n, num_warps, row_fits_block = launch_config(n, max_block_n)
    layer_norm_bwd_kernel[(programs,)](
        dx, dy2d, x2d, weight if weight is not None else x2d, mean, rstd,
        partial_dw, partial_db, x2d.stride(0), dy2d.stride(0), dx.stride(0), m, n,
        HAS_WEIGHT=weight is not None, COMPUTE_DW=compute_dw, COMPUTE_DB=compute_db,
        BLOCK_N=block_n, ROW_FITS_BLOCK=row_fits_block, num_warps=num_warps,
    )
    dweight = sum_partials(partial_dw, param_dtype) if compute_dw else None
    dbias = sum_partials(partial_db, bias_dtype or param_dtype) if compute_db else None
    return dx, dweight, dbias


def differentiable_backward(dy2d: torch.Tensor, x2d: torch.Tensor, weight: torch.Tensor | None,
                            eps: float):
    """LayerNorm gradients ``(dx, dweight, dbias)`` for rows (M, N) in differentiable torch ops.

    The same formulas as the backward kernel (xhat = (x - mean) * rstd, wdy = w * dy,
    dx = (wdy - xhat * mean(xhat * wdy) - mean(wdy)) * rstd, dweight = sum_rows(dy * xhat),
    dbias = sum_rows(dy)), in float32 for 16-bit inputs, with mean and rstd recomputed from
    ``x2d`` so that autograd can differentiate the gradients again. ``dx`` has the input's
    dtype, ``dweight`` the weight's (None without a weight), ``dbias`` float32 or wider.
    """
    ct = compute_dtype(x2d.dtype)
    cache = standardize(x2d.to(ct), (1,), eps)
    g = dy2d.to(ct)
    w = weight.to(ct) if weight is not None else None
    dx = normalization_backward(g, cache.norm, cache.rstd, w, (1,)).to(x2d.dtype)
    dweight = (g * cache.norm).sum(0).to(weight.dtype) if weight is not None else None
    return dx, dweight, g.sum(0)


class TritonLayerNormFunction(torch.autograd.Function):
    """LayerNorm over the trailing ``normalized_shape`` with Triton forward and backward.

    Twice differentiable. A plain backward runs the Triton backward kernel, whose outputs
    carry no graph. When the backward itself is being differentiated (``create_graph=True``:
    gradient penalties, Hessian-vector products; grad mode is then on inside ``backward``)
    the gradients are computed instead by ``differentiable_backward`` in torch ops, which
    recompute the statistics from the saved input so that the second-order terms reach it.
    """

    @staticmethod
    def forward(ctx, x, normalized_shape, weight, bias, eps):
        n = math.prod(normalized_shape)
        m = x.numel() // n if n else 0
        x2d = _rows_view(x, m, n)
        w = weight.reshape(n).contiguous() if weight is not None else None
        b = bias.reshape(n).contiguous() if bias is not None else None
        y, mean, rstd = layer_norm_forward(x2d, w, b, eps)
        # The inputs themselves are saved (not the views made here without a graph), so that
        # a differentiable backward reaches them.
        ctx.save_for_backward(x, weight, mean, rstd)
        ctx.x_shape, ctx.has_bias = x.shape, bias is not None
        ctx.bias_dtype = bias.dtype if bias is not None else None
        ctx.param_shape = tuple(normalized_shape)
        ctx.eps = eps
        return y.view(x.shape)

    @staticmethod
    def backward(ctx, dy):
        x, weight, mean, rstd = ctx.saved_tensors
        n = math.prod(ctx.param_shape)
        m = x.numel() // n if n else 0
        x2d = _rows_view(x, m, n)
        w = weight.reshape(n).contiguous() if weight is not None else None
        need_dx, _, need_dw, need_db, _ = ctx.needs_input_grad
        if torch.is_grad_enabled():  # create_graph=True: gradients with a graph
            dx, dw, db = differentiable_backward(_rows_view(dy, m, n), x2d, w, ctx.eps)
            return (dx.view(ctx.x_shape) if need_dx else None, None,
                    dw.view(ctx.param_shape) if need_dw and w is not None else None,
                    db.to(ctx.bias_dtype).view(ctx.param_shape)
                    if need_db and ctx.has_bias else None, None)
        dx, dw, db = layer_norm_backward(
            _rows_view(dy, m, n), x2d, w, mean, rstd,
            compute_dw=need_dw, compute_db=need_db and ctx.has_bias, bias_dtype=ctx.bias_dtype)
        return (dx.view(ctx.x_shape) if need_dx else None, None,
                dw.view(ctx.param_shape) if dw is not None else None,
                db.view(ctx.param_shape) if db is not None else None, None)


def _check_device_and_dtype(input: torch.Tensor, **params) -> None:
    """What only the kernels need on top of layer_norm's shared checks: supported dtypes and
    parameters on the input's device."""
    if input.dtype not in SUPPORTED_DTYPES:
        raise TypeError(f"input: expected dtype float32, float16 or bfloat16, got {input.dtype}")
    for name, p in params.items():
        if p is None:
            continue
        if p.device != input.device:
            raise RuntimeError(f"{name}: expected device {input.device}, got {p.device}")
        if p.dtype not in SUPPORTED_DTYPES:
            raise TypeError(f"{name}: expected dtype float32, float16 or bfloat16, got {p.dtype}")


def layer_norm(input: torch.Tensor, normalized_shape: int | Sequence[int],
               weight: torch.Tensor | None = None, bias: torch.Tensor | None = None,
               eps: float = 1e-5) -> torch.Tensor:
    """``torch.nn.functional.layer_norm`` computed by the fused Triton kernels.

    Normalizes over the last ``len(normalized_shape)`` dimensions of ``input`` (shape
    ``(*, *normalized_shape)``): y = (x - mean) / sqrt(var + eps) * weight + bias, biased
    variance, statistics in float32. Input dtypes float32, float16, bfloat16; the output has
    the input's dtype and shape (contiguous). Differentiable in input, weight and bias.
    Arguments are checked by the same rules as ``functional.layer_norm``
    (``_validation.check_layer_norm_args``: shapes, mixed dtypes, ``eps >= 0``).
    """
    shape, eps = check_layer_norm_args(input, normalized_shape, weight, bias, eps)
    _check_device_and_dtype(input, weight=weight, bias=bias)
    return TritonLayerNormFunction.apply(input, shape, weight, bias, eps)
