r"""Host side of the one-source norm kernels: RMSNorm and the fused residual add + norm.

Public functions (differentiable, twice):

- ``rms_norm(input, normalized_shape, weight=None, eps=None)``: the semantics of
  ``torch.nn.functional.rms_norm`` (``eps=None``: the machine epsilon of the compute dtype,
  float32 for 16-bit inputs);
- ``add_layer_norm(input, residual, normalized_shape, weight=None, bias=None, eps=1e-5)``
  and ``add_rms_norm(input, residual, normalized_shape, weight=None, eps=None)``: return
  ``(norm(s), s)`` with ``s = input + residual`` (rounded to the input's dtype), the new
  residual stream for the next block, in one pass over memory:

  .. math:: s = x + r, \qquad y = \frac{s - \mu}{\sqrt{\sigma^2 + \epsilon}}\,\gamma + \beta
            \quad (\mu = 0,\ \sigma^2 = \mathrm{mean}(s^2),\ \text{no}\ \beta
            \text{ for RMSNorm}).

  Bytes per element in 16-bit: read x and r, write s and y: 8, against 10 for an add
  (read 2, write 1) followed by a norm (read 1, write 1).

The backward of the fused add: with ``g = dL/dy`` and ``h = dL/ds`` (what the next block
sends back along the residual stream), ``dL/dx = dL/dr = dnorm(g) + h``, one tensor
returned for both.

``fused_norm_forward`` and ``fused_norm_backward`` work on 2-D ``(M, N)`` views and let tests
and the benchmark pick the path (``max_block_n``, ``config``, ``programs``).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import NamedTuple

import torch
import triton

from .._validation import (
    as_eps,
    as_shape,
    check_layer_norm_args,
    check_normalized_shape,
    check_param,
    check_tensor,
    compute_dtype,
)
from ..autograd import normalization_backward, rms_norm_backward
from ..functional import standardize
from .fused_kernels import (
    fused_norm_bwd_kernel,
    fused_norm_fwd_kernel,
    fused_sum_partials_kernel,
)
from .ops import SUPPORTED_DTYPES, _check_device_and_dtype, _rows_view, resident_programs

# Launch rules (``fused_launch_config``). Forward: rows of up to FUSED_MAX_BLOCK_N elements
# are held in registers (ROWS of them per tile when short); longer rows take the statistics
# pass + normalize pass in chunks of FUSED_CHUNK_BYTES. Backward: rows held up to
# FUSED_MAX_BLOCK_N_BACKWARD (x, dy and two 1-D accumulators in registers), longer in chunks.
FUSED_MAX_BLOCK_N = 16384
FUSED_MAX_BLOCK_N_BACKWARD = 8192
FUSED_CHUNK_BYTES = 8192  # chunks of 8 KiB per streamed tensor: 4096 16-bit, 2048 fp32 lanes
# Chunked backward: ROWS rows per tile (each ROWS x chunk / ROWS), as many as keep
# ROWS x N x element size within this many bytes per program (its rows, re-read in pass 2,
# stay in L2: 132 programs x 128 KiB = 17 MiB per streamed tensor).
FUSED_CHUNK_ROWS_BYTES = 128 * 1024
# ...and no more chunked programs than keep the rows they re-read (and the backward's partial
# rows) within this share of L2 (``chunked_programs``): above 32K elements, one program per SM
# (backward) or four (forward) would not.
FUSED_L2_SHARE = 0.75
FUSED_TILE = 4096  # elements per tile of short rows (bytes in flight, see ``roofline``)
FUSED_MAX_ROWS = 16
# Pipelining depth of the persistent loops: two stages, so that one tile's loads are in flight
# while the previous tile is reduced. The pipeliner stages the loaded tiles in shared memory
# (cp.async): a stage holds the tile of every streamed tensor (forward: x and r; backward:
# x, dy and ds), and two stages must fit in FUSED_STAGE_BUDGET bytes (an A100 has 164 KiB per
# multiprocessor); otherwise one stage (float32 rows of 16384 forward, 8192 backward).
FUSED_STAGES = 2
FUSED_STAGE_BUDGET = 128 * 1024
STREAMED_TENSORS = {"forward": 2, "backward": 3}
# Programs per multiprocessor of the persistent grids: the forward uses as many as fit (up to
# this); the backward one per SM (one partial row per SM, the review's rule).
FUSED_FORWARD_PROGRAMS_PER_SM = 4
FUSED_BACKWARD_PROGRAMS_PER_SM = 1
FUSED_INTERPRETER_PROGRAMS = 4  # the interpreter runs programs in turn: few suffice
FUSED_REDUCE_TILE = 4096  # partial rows x columns loaded in one step by the reduction


class FusedConfig(NamedTuple):
    """One launch of a fused norm kernel: the compile-time shape and warps."""

    block_n: int
    num_warps: int
    rows: int
    row_fits_block: bool
    num_stages: int


def fused_launch_config(n: int, kernel: str = "forward", element_size: int = 2,
                        max_block_n: int | None = None) -> FusedConfig:
    """The launch for rows of ``n`` elements of ``element_size`` bytes.

    Rows up to the cap (``FUSED_MAX_BLOCK_N`` forward, ``FUSED_MAX_BLOCK_N_BACKWARD``
    backward, or ``max_block_n``) are held in one ``next_power_of_2(n)`` block, ``ROWS``
    rows per tile so that a tile holds ``FUSED_TILE`` elements (at most ``FUSED_MAX_ROWS``
    rows); longer rows are walked in chunks of ``FUSED_CHUNK_BYTES`` of each tensor (4096
    16-bit or 2048 float32 elements, at most the cap), in the backward ``ROWS`` rows at a
    time (``FUSED_CHUNK_ROWS_BYTES``; the chunk is then split between the rows). Warps by tile
    size: forward 4 below 4096 elements, 8 up to 8192, 16 above; backward 4 below 2048, 8 up
    to 4096, 16 above; 8 on the chunked paths (fewer warps for the same tile spilled in the
    ahead-of-time compile, ``fused_aot``). Stages: ``FUSED_STAGES`` when two stages of the
    streamed tiles fit ``FUSED_STAGE_BUDGET``, else 1."""
    if kernel not in ("forward", "backward"):
        raise ValueError(f"kernel: expected 'forward' or 'backward', got {kernel!r}")
    cap = max_block_n or (FUSED_MAX_BLOCK_N if kernel == "forward"
                          else FUSED_MAX_BLOCK_N_BACKWARD)
    if n <= cap:
        block_n = min(triton.next_power_of_2(max(n, 1)), cap)
        rows = min(max(FUSED_TILE // block_n, 1), FUSED_MAX_ROWS)
        fits, tile = True, rows * block_n
        low, high = (4096, 8192) if kernel == "forward" else (2048, 4096)
        warps = 4 if tile < low else 8 if tile <= high else 16
    else:
        chunk = min(cap, FUSED_CHUNK_BYTES // element_size)
        rows = 1
        if kernel == "backward":  # rows per tile: the partial rows' traffic / ROWS
            whole = triton.next_power_of_2(n) * element_size
            rows = min(max(FUSED_CHUNK_ROWS_BYTES // whole, 1), FUSED_MAX_ROWS,
                       max(chunk // 32, 1))  # at least a warp's 32 lanes per row
        block_n, fits, warps, tile = chunk // rows, False, 8, chunk
    stage = tile * element_size * STREAMED_TENSORS[kernel]
    stages = FUSED_STAGES if FUSED_STAGES * stage <= FUSED_STAGE_BUDGET else 1
    return FusedConfig(block_n, warps, rows, fits, stages)


def _multiprocessors(device: torch.device) -> int:
    return torch.cuda.get_device_properties(device).multi_processor_count


def _grid(work: int, per_sm: int, device: torch.device, kernel, args, constants,
          num_warps: int) -> int:
    """Programs of a persistent launch: at most ``per_sm`` (and what fits) per multiprocessor,
    never more than ``work`` items; ``FUSED_INTERPRETER_PROGRAMS`` under the interpreter."""
    if device.type != "cuda":
        return max(1, min(work, FUSED_INTERPRETER_PROGRAMS))
    resident = resident_programs(kernel, args, constants, num_warps, device)
    return max(1, min(work, _multiprocessors(device) * max(1, min(resident, per_sm))))


def _check_rows(name: str, t: torch.Tensor, m: int, n: int) -> None:
    if t.shape != (m, n) or (n > 1 and t.stride(1) != 1):
        raise ValueError(f"{name}: expected shape ({m}, {n}) with unit-stride rows, "
                         f"got {tuple(t.shape)} with strides {t.stride()}")


def fused_norm_forward(x2d: torch.Tensor, residual2d: torch.Tensor | None,
                       weight: torch.Tensor | None, bias: torch.Tensor | None, eps: float,
                       *, rms: bool, max_block_n: int | None = None,
                       config: FusedConfig | None = None, programs: int | None = None):
    """Normalize the rows of ``x2d`` (+ ``residual2d``), (M, N): returns
    ``(y, s, mean, rstd)``.

    ``s = x + r`` in the input's dtype (None without a residual); ``mean`` (None for
    RMSNorm) and ``rstd`` (M,) float32. ``weight``/``bias`` are (N,) or None (``bias`` must
    be None for RMSNorm). ``max_block_n``, ``config`` and ``programs`` override the launch
    (tests force every path on small shapes)."""
    m, n = x2d.shape
    _check_rows("x2d", x2d, m, n)
    if residual2d is not None:
        _check_rows("residual2d", residual2d, m, n)
    if rms and bias is not None:
        raise ValueError("bias: RMSNorm has no bias, expected None")
    dev = x2d.device
    y = torch.empty((m, n), dtype=x2d.dtype, device=dev)
    s = torch.empty((m, n), dtype=x2d.dtype, device=dev) if residual2d is not None else None
    mean = None if rms else torch.empty(m, dtype=torch.float32, device=dev)
    rstd = torch.empty(m, dtype=torch.float32, device=dev)
    if m == 0 or n == 0:
        if s is not None:
            torch.add(x2d, residual2d, out=s)
        if mean is not None:
            mean.fill_(float("nan"))
        return y, s, mean, rstd.fill_(float("nan"))
    cfg = config or fused_launch_config(n, "forward", x2d.element_size(), max_block_n)
    rows = cfg.rows
    constants = dict(IS_RMS=rms, HAS_RESIDUAL=residual2d is not None,
                     HAS_WEIGHT=weight is not None, HAS_BIAS=bias is not None,
                     BLOCK_N=cfg.block_n, ROWS=rows, ROW_FITS_BLOCK=cfg.row_fits_block,
                     NUM_STAGES=cfg.num_stages)
    r_arg = residual2d if residual2d is not None else x2d
    s_arg = s if s is not None else y
    args = (x2d, r_arg, y, s_arg, weight if weight is not None else x2d,
            bias if bias is not None else x2d, mean if mean is not None else rstd, rstd,
            x2d.stride(0), r_arg.stride(0), y.stride(0), s_arg.stride(0), m, n, eps)
    grid = programs or _grid(triton.cdiv(m, rows), FUSED_FORWARD_PROGRAMS_PER_SM, dev,
                             fused_norm_fwd_kernel, args, constants, cfg.num_warps)
    if programs is None and not cfg.row_fits_block and dev.type == "cuda":
        l2 = getattr(torch.cuda.get_device_properties(dev), "L2_cache_size", 0)
        if l2:
            grid = min(grid, chunked_programs(n, 1, x2d.element_size(), 1, 0, l2))
    fused_norm_fwd_kernel[(grid,)](*args, num_warps=cfg.num_warps, **constants)
    return y, s, mean, rstd


def fused_reduce_block_n(g: int, n: int) -> int:
    """Columns per program of the one-step reduction: ``FUSED_REDUCE_TILE / next_pow2(G)``
    (at least 16), at most ``next_pow2(N)``."""
    block_g = triton.next_power_of_2(max(g, 1))
    return max(16, min(FUSED_REDUCE_TILE // block_g, triton.next_power_of_2(max(n, 1))))


def chunked_programs(n: int, rows: int, element_size: int, reread: int, slabs: int,
                     l2_bytes: int) -> int:
    """Most programs of a chunked path whose re-used data stays in L2: each keeps ``rows``
    rows of the ``reread`` tensors its second pass reads again (forward: s or x, 1;
    backward: x and dy, 2) and its ``slabs`` float32 partial rows (backward, read and written
    once per tile); together at most ``FUSED_L2_SHARE`` of the L2 cache (the rest serves the
    streaming loads). ``roofline.fused_launch`` uses the same rule."""
    per_program = rows * n * reread * element_size + slabs * n * 4
    return max(1, int(FUSED_L2_SHARE * l2_bytes) // per_program)


def fused_sum_partials(partial: torch.Tensor, dw: torch.Tensor | None,
                       db: torch.Tensor | None) -> None:
    """Column sums of the float32 slabs ``partial`` (2, G, N) into ``dw`` and ``db`` (each
    (N,) or None), every partial row loaded in one step, in a fixed order."""
    _, g, n = partial.shape
    slabs = (dw is not None) + (db is not None)
    if n == 0 or slabs == 0:
        return
    block_n = fused_reduce_block_n(g, n)
    fused_sum_partials_kernel[(slabs * triton.cdiv(n, block_n),)](
        partial, dw if dw is not None else partial, db if db is not None else partial, g, n,
        COMPUTE_DW=dw is not None, COMPUTE_DB=db is not None,
        BLOCK_G=triton.next_power_of_2(g), BLOCK_N=block_n, num_warps=4)


def fused_norm_backward(dy2d: torch.Tensor | None, x2d: torch.Tensor,
                        weight: torch.Tensor | None, mean: torch.Tensor | None,
                        rstd: torch.Tensor, *, rms: bool, ds2d: torch.Tensor | None = None,
                        compute_dw: bool = True, compute_db: bool = True,
                        bias_dtype: torch.dtype | None = None,
                        max_block_n: int | None = None, config: FusedConfig | None = None,
                        programs: int | None = None):
    """Gradients of the (fused) norm for rows (M, N): ``(dx, dweight or None, dbias or None)``.

    ``x2d`` is what was normalized (``s`` for the fused add), ``dy2d`` the gradient of ``y``
    (None: zeros), ``ds2d`` that of ``s`` (None: zeros), added to ``dx`` (which is then also
    the residual's gradient). ``dweight`` has the weight's dtype, ``dbias`` ``bias_dtype``
    (default the weight's, or the input's); both reduced in float32. ``compute_db`` is
    ignored for RMSNorm. Two launches: the persistent backward (one program per
    multiprocessor on a GPU), then the one-step reduction of the partial rows."""
    m, n = x2d.shape
    _check_rows("x2d", x2d, m, n)
    dev = x2d.device
    compute_dw = compute_dw and weight is not None
    compute_db = compute_db and not rms
    param_dtype = weight.dtype if weight is not None else x2d.dtype
    if dy2d is None:  # only s was used downstream: the norm's gradients are zero
        dx = (ds2d.to(x2d.dtype).clone() if ds2d is not None else torch.zeros_like(x2d))
        zeros = torch.zeros(n, dtype=param_dtype, device=dev)
        return (dx, zeros if compute_dw else None,
                zeros.to(bias_dtype or param_dtype) if compute_db else None)
    _check_rows("dy2d", dy2d, m, n)
    if ds2d is not None:
        _check_rows("ds2d", ds2d, m, n)
    dx = torch.empty((m, n), dtype=x2d.dtype, device=dev)
    dweight = torch.empty(n, dtype=param_dtype, device=dev) if compute_dw else None
    dbias = (torch.empty(n, dtype=bias_dtype or param_dtype, device=dev)
             if compute_db else None)
    if m == 0 or n == 0:
        for t in (dweight, dbias):
            if t is not None:
                t.zero_()
        return dx, dweight, dbias
    cfg = config or fused_launch_config(n, "backward", x2d.element_size(), max_block_n)
    rows = cfg.rows
    constants = dict(IS_RMS=rms, HAS_DRES=ds2d is not None, HAS_WEIGHT=weight is not None,
                     COMPUTE_DW=compute_dw, COMPUTE_DB=compute_db, BLOCK_N=cfg.block_n,
                     ROWS=rows, ROW_FITS_BLOCK=cfg.row_fits_block, NUM_STAGES=cfg.num_stages)
    ds_arg = ds2d if ds2d is not None else dy2d
    w_arg = weight if weight is not None else x2d
    probe = torch.empty((2, 1, n), dtype=torch.float32, device=dev)
    args = (dx, dy2d, ds_arg, x2d, w_arg, mean if mean is not None else rstd, rstd, probe,
            dx.stride(0), dy2d.stride(0), ds_arg.stride(0), x2d.stride(0), m, n)
    grid = programs or _grid(triton.cdiv(m, rows), FUSED_BACKWARD_PROGRAMS_PER_SM, dev,
                             fused_norm_bwd_kernel, args, constants, cfg.num_warps)
    if programs is None and not cfg.row_fits_block and dev.type == "cuda":
        l2 = getattr(torch.cuda.get_device_properties(dev), "L2_cache_size", 0)
        if l2:
            grid = min(grid, chunked_programs(n, rows, x2d.element_size(), 2,
                                              compute_dw + compute_db, l2))
    slabs = compute_dw or compute_db
    partial = torch.empty((2, grid, n) if slabs else (2, 1, 1), dtype=torch.float32,
                          device=dev)
    fused_norm_bwd_kernel[(grid,)](*args[:7], partial, *args[8:], num_warps=cfg.num_warps,
                                   **constants)
    if slabs:
        fused_sum_partials(partial, dweight, dbias)
    return dx, dweight, dbias


def differentiable_fused_backward(dy2d: torch.Tensor, ds2d: torch.Tensor | None,
                                  s2d: torch.Tensor, weight: torch.Tensor | None, eps: float,
                                  rms: bool):
    """``(dx, dweight, dbias)`` of the (fused) norm in differentiable torch ops, for
    ``create_graph=True``: the kernel's formulas (``autograd.normalization_backward``,
    ``autograd.rms_norm_backward``) with the statistics recomputed from ``s2d`` (which must
    carry the graph back to the input and residual). ``dx`` has ``s2d``'s dtype,
    ``dweight`` the weight's (None without one), ``dbias`` the compute dtype (None for
    RMSNorm)."""
    ct = compute_dtype(s2d.dtype)
    s = s2d.to(ct)
    g = dy2d.to(ct)
    w = weight.to(ct) if weight is not None else None
    if rms:
        rstd = torch.rsqrt((s * s).mean(1, keepdim=True) + eps)
        norm = s * rstd
        dx = rms_norm_backward(g, norm, rstd, w, (1,))
    else:
        cache = standardize(s, (1,), eps)
        norm = cache.norm
        dx = normalization_backward(g, norm, cache.rstd, w, (1,))
    if ds2d is not None:
        dx = dx + ds2d.to(ct)
    dweight = (g * norm).sum(0).to(weight.dtype) if weight is not None else None
    return dx.to(s2d.dtype), dweight, None if rms else g.sum(0)


class FusedNormFunction(torch.autograd.Function):
    """norm(input (+ residual)) over the trailing ``normalized_shape`` with the one-source
    Triton kernels; returns ``y`` alone without a residual, else ``(y, s)``.

    Twice differentiable as ``TritonLayerNormFunction``: a plain backward runs the Triton
    kernel; under ``create_graph=True`` the gradients come from
    ``differentiable_fused_backward``, with ``s`` recomputed from the saved input and
    residual so that the second-order terms reach them."""

    @staticmethod
    def forward(ctx, x, residual, normalized_shape, weight, bias, eps, rms):
        ctx.set_materialize_grads(False)
        n = math.prod(normalized_shape)
        m = x.numel() // n if n else 0
        x2d = _rows_view(x, m, n)
        r2d = _rows_view(residual, m, n) if residual is not None else None
        w = weight.reshape(n).contiguous() if weight is not None else None
        b = bias.reshape(n).contiguous() if bias is not None else None
        y, s, mean, rstd = fused_norm_forward(x2d, r2d, w, b, eps, rms=rms)
        ctx.save_for_backward(x, residual, s, weight, mean, rstd)
        ctx.x_shape, ctx.param_shape = x.shape, tuple(normalized_shape)
        ctx.has_bias, ctx.bias_dtype = bias is not None, bias.dtype if bias is not None else None
        ctx.eps, ctx.rms = eps, rms
        if s is None:
            return y.view(x.shape)
        return y.view(x.shape), s.view(x.shape)

    @staticmethod
    def backward(ctx, dy, ds=None):
        x, residual, s, weight, mean, rstd = ctx.saved_tensors
        n = math.prod(ctx.param_shape)
        m = x.numel() // n if n else 0
        need_x, need_r, _, need_w, need_b, _, _ = ctx.needs_input_grad
        w = weight.reshape(n) if weight is not None else None
        if torch.is_grad_enabled():  # create_graph=True: gradients with a graph
            s_graph = x + residual if residual is not None else x
            if dy is None:
                dy = torch.zeros_like(x)
            dx, dw, db = differentiable_fused_backward(
                dy.reshape(m, n), ds.reshape(m, n) if ds is not None else None,
                s_graph.reshape(m, n), w, ctx.eps, ctx.rms)
        else:
            normalized = s if s is not None else x
            dx, dw, db = fused_norm_backward(
                _rows_view(dy, m, n) if dy is not None else None,
                _rows_view(normalized, m, n), w.contiguous() if w is not None else None,
                mean, rstd, rms=ctx.rms,
                ds2d=_rows_view(ds, m, n) if ds is not None else None,
                compute_dw=need_w, compute_db=need_b and ctx.has_bias,
                bias_dtype=ctx.bias_dtype)
        dx = dx.view(ctx.x_shape)
        return (dx if need_x else None, dx if need_r and residual is not None else None, None,
                dw.view(ctx.param_shape) if need_w and dw is not None else None,
                db.to(ctx.bias_dtype).view(ctx.param_shape)
                if need_b and ctx.has_bias and db is not None else None, None, None)


def _check_residual(input: torch.Tensor, residual) -> None:
    check_tensor(residual, "residual")
    if residual.shape != input.shape:
        raise RuntimeError(f"residual: expected the input's shape {list(input.shape)}, got "
                           f"{list(residual.shape)}")
    if residual.dtype != input.dtype:
        raise RuntimeError(f"residual: expected the input's dtype {input.dtype}, got "
                           f"{residual.dtype}")
    if residual.device != input.device:
        raise RuntimeError(f"residual: expected device {input.device}, got {residual.device}")


def _rms_args(input, normalized_shape, weight, eps):
    """Checks of ``rms_norm`` (``functional.rms_norm``'s rules): ``(shape, eps)``."""
    check_tensor(input, "input")
    shape = as_shape(normalized_shape)
    check_normalized_shape(input, shape)
    check_param(weight, "weight", shape)
    _check_device_and_dtype(input, weight=weight)
    eps = as_eps(eps)
    return shape, torch.finfo(compute_dtype(input.dtype)).eps if eps is None else eps


def rms_norm(input: torch.Tensor, normalized_shape: int | Sequence[int],
             weight: torch.Tensor | None = None, eps: float | None = None) -> torch.Tensor:
    r"""``torch.nn.functional.rms_norm`` computed by the one-source Triton kernels.

    y = x / sqrt(mean(x^2) + eps) * weight over the last ``len(normalized_shape)`` dims of
    ``input`` (``(*, *normalized_shape)``); ``eps=None``: the machine epsilon of the compute
    dtype (float32 for 16-bit inputs), as torch. Output: the input's shape and dtype.
    Differentiable (twice) in input and weight.

    Range: the statistics are float32 and overflow, silently, once a row's
    ``sqrt(sum(x**2))`` passes about 1.8e19 (its sum of squares overflows float32): ``rstd`` is
    0 and the row comes out as zeros
    (``functional`` stays correct there: ``functional.inverse_rms``)."""
    shape, eps = _rms_args(input, normalized_shape, weight, eps)
    return FusedNormFunction.apply(input, None, shape, weight, None, eps, True)


def pipelined_layer_norm(input: torch.Tensor, normalized_shape: int | Sequence[int],
                         weight: torch.Tensor | None = None, bias: torch.Tensor | None = None,
                         eps: float = 1e-5) -> torch.Tensor:
    """``torch.nn.functional.layer_norm`` by the one-source kernels (persistent, pipelined
    loops; the variant ``IS_RMS=False, HAS_RESIDUAL=False``), next to ``layer_norm`` (the
    chapter's kernels, measured on the H100) so that the benchmark can compare the two.

    Range: the statistics are float32 and overflow, silently, once a row's
    ``sqrt(sum((x - mean)**2))`` passes about 1.8e19: ``rstd`` is 0 and the row comes out as
    the bias (zeros without one)
    (``functional`` stays correct there: ``functional.inverse_rms``)."""
    if eps is None:  # as torch.nn.functional.layer_norm
        raise TypeError("eps must be a real number, got None")
    shape, eps = check_layer_norm_args(input, normalized_shape, weight, bias, eps)
    _check_device_and_dtype(input, weight=weight, bias=bias)
    return FusedNormFunction.apply(input, None, shape, weight, bias, eps, False)


def add_layer_norm(input: torch.Tensor, residual: torch.Tensor,
                   normalized_shape: int | Sequence[int], weight: torch.Tensor | None = None,
                   bias: torch.Tensor | None = None, eps: float = 1e-5):
    """``(layer_norm(s), s)`` with ``s = input + residual`` (the input's dtype), fused: one
    read of input and residual, one write of ``s`` and of the output. ``residual`` must have
    the input's shape, dtype and device; the rest follows ``torch.nn.functional.layer_norm``.
    Differentiable (twice) in input, residual, weight and bias.

    Range: the statistics are float32 and overflow, silently, once a row's
    ``sqrt(sum((s - mean)**2))`` passes about 1.8e19: ``rstd`` is 0 and the row comes out as
    the bias (zeros without one)
    (``functional`` stays correct there: ``functional.inverse_rms``)."""
    if eps is None:  # as torch.nn.functional.layer_norm
        raise TypeError("eps must be a real number, got None")
    shape, eps = check_layer_norm_args(input, normalized_shape, weight, bias, eps)
    _check_residual(input, residual)
    _check_device_and_dtype(input, weight=weight, bias=bias)
    return FusedNormFunction.apply(input, residual, shape, weight, bias, eps, False)


def add_rms_norm(input: torch.Tensor, residual: torch.Tensor,
                 normalized_shape: int | Sequence[int], weight: torch.Tensor | None = None,
                 eps: float | None = None):
    """``(rms_norm(s), s)`` with ``s = input + residual`` (the input's dtype), fused: 8
    bytes per element in 16-bit instead of 10 for the add and the norm apart. Arguments as
    ``rms_norm`` plus ``residual`` (the input's shape, dtype and device). Differentiable
    (twice) in input, residual and weight.

    Range: the statistics are float32 and overflow, silently, once a row's
    ``sqrt(sum(s**2))`` passes about 1.8e19: ``rstd`` is 0 and the row comes out as zeros
    (``functional`` stays correct there: ``functional.inverse_rms``)."""
    shape, eps = _rms_args(input, normalized_shape, weight, eps)
    _check_residual(input, residual)
    return FusedNormFunction.apply(input, residual, shape, weight, None, eps, True)


__all__ = ["SUPPORTED_DTYPES", "FusedConfig", "FusedNormFunction", "add_layer_norm",
           "add_rms_norm", "differentiable_fused_backward", "fused_launch_config",
           "fused_norm_backward", "fused_norm_forward", "pipelined_layer_norm", "rms_norm"]
