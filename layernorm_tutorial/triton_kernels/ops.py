"""Host side of the fused LayerNorm: block sizes, launches, the autograd.Function, the API.

``layer_norm_forward`` and ``layer_norm_backward`` work on 2-D views ``(M, N)`` and accept
preallocated outputs (the benchmark uses them); ``layer_norm`` has the signature and
semantics of ``torch.nn.functional.layer_norm`` and is differentiable.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Sequence

import torch
import triton

from .._validation import check_layer_norm_args, compute_dtype
from ..autograd import normalization_backward
from ..functional import standardize
from .kernels import layer_norm_bwd_kernel, layer_norm_fwd_kernel, sum_partials_kernel

SUPPORTED_DTYPES = (torch.float32, torch.float16, torch.bfloat16)
MAX_BLOCK_N = 16384  # forward: longest row kept in registers; longer rows are walked in chunks
# Backward: rows of up to 8192 elements are held by one program (the row and two row-sized
# accumulators in registers); 16-bit rows of 8193-16384 by SPLIT = 2 programs that share the
# columns (16384 lanes in one program spill). Longer rows, and float32 rows over 8192, take
# the chunked path: on an H100 (tune.json) float32 rows of 16384 split 2 ways ran faster
# but spilled registers, and split 4 ways (no spills) ran slower than the chunks.
MAX_BLOCK_N_BACKWARD = 16384
BACKWARD_RESIDENT_BYTES = 32768  # longest backward row held in registers, in bytes
SPLIT_ABOVE = 8192  # backward rows longer than this (and resident) are split in 2
CHUNK_BLOCK_N = 8192  # rows longer than the cap are walked in chunks of at most this many
# Short rows: a program takes ROWS rows per step so that a step covers at least this many
# elements (bytes in flight, see ``roofline``).
FORWARD_TILE, BACKWARD_TILE = 4096, 4096
MAX_ROWS = 16
# Warps. Forward: 4, and 8 for rows of 16384 (with 4 warps they spill: 744 B per thread in
# 16-bit on sm_90, more in float32). On an H100 (tune.json) 8 or 16 warps were not faster for
# the shorter rows; for 16-bit rows of 16384 the spilling 4-warp version was about 15% faster.
# Backward: 8 for tiles of one or two rows of at least 4096 elements, else 4; 16 on the
# chunked path.
FORWARD_WARPS, FORWARD_LONG_ROW = 4, 16384
MAX_WARPS = 8
MAX_WARPS_BACKWARD, LONG_ROW_WARPS = 8, 16
BACKWARD_PROGRAMS_PER_SM = 2  # at most: more programs mean more partial rows to write/read
REDUCE_BLOCK_G = 32  # partial rows added per step of the dgamma/dbeta reduction
REDUCE_BLOCK_NS = (16, 32, 64, 128)  # its columns per program (``reduce_block_n``)
REDUCE_NUM_WARPS = 4  # warps per program of the column reduction
# The interpreter runs programs one after another in Python: fewer, wider tiles are faster.
INTERPRETER_REDUCE_BLOCK_N = 4096
INTERPRETER_PROGRAMS = 8  # backward programs under the interpreter (it runs them in turn)


def block_size(n: int, max_block_n: int = MAX_BLOCK_N) -> int:
    """Power-of-two block for rows of ``n`` elements: next_power_of_2(n), capped."""
    return min(triton.next_power_of_2(max(n, 1)), max_block_n)


def launch_config(n: int, max_block_n: int, kernel: str = "forward",
                  element_size: int = 4) -> tuple[int, int, int, int, bool]:
    """``(BLOCK_N, num_warps, ROWS, SPLIT, ROW_FITS_BLOCK)`` for rows of ``n`` elements of
    ``element_size`` bytes, block capped at ``max_block_n``: the one rule the launchers (and
    the ahead-of-time compile) use.

    A row of up to ``max_block_n`` elements is held in one block, ``ROWS`` rows at a time
    when rows are short (a ``ROWS x BLOCK_N`` tile of at least ``FORWARD_TILE`` or
    ``BACKWARD_TILE`` elements); in the backward, rows are resident up to
    ``BACKWARD_RESIDENT_BYTES`` and those over ``SPLIT_ABOVE`` are shared by ``SPLIT = 2``
    programs. A longer row is walked alone in chunks of ``min(max_block_n, CHUNK_BLOCK_N)``
    lanes. Warps: see the
    constants above."""
    if kernel not in ("forward", "backward"):
        raise ValueError(f"kernel: expected 'forward' or 'backward', got {kernel!r}")
    if kernel == "backward":
        max_block_n = min(max_block_n, BACKWARD_RESIDENT_BYTES // element_size)
    if n <= max_block_n:
        block_n, fits = block_size(n, max_block_n), True
        rows = min(max(FORWARD_TILE if kernel == "forward" else BACKWARD_TILE, block_n)
                   // block_n, MAX_ROWS)
    else:
        block_n, rows, fits = min(max_block_n, CHUNK_BLOCK_N), 1, False
    tile = rows * block_n
    split = 2 if kernel == "backward" and fits and block_n > SPLIT_ABOVE else 1
    if kernel == "forward":
        warps = MAX_WARPS if block_n >= FORWARD_LONG_ROW else FORWARD_WARPS
    elif not fits:
        warps = LONG_ROW_WARPS
    else:
        warps = MAX_WARPS_BACKWARD if tile >= 4096 and rows <= 2 else 4
    return block_n, warps, rows, split, fits


def device_limits(device: torch.device) -> dict:
    """Per-multiprocessor limits of a CUDA ``device`` (the keys of ``resources.SM_LIMITS``)."""
    from .resources import SM_LIMITS

    props = torch.cuda.get_device_properties(device)
    base = dict(SM_LIMITS["sm_80" if props.major < 9 else "sm_90"])
    base.update(gpu=props.name, multiprocessors=props.multi_processor_count)
    for key, attr in (("registers", "regs_per_multiprocessor"),
                      ("shared_bytes", "shared_memory_per_multiprocessor")):
        value = getattr(props, attr, None)
        if value:
            base[key] = int(value)
    threads = getattr(props, "max_threads_per_multi_processor", None)
    if threads:
        base["max_warps"] = int(threads) // 32
    return base


_RESIDENT_CACHE: dict = {}


def resident_programs(kernel, args: tuple, kwargs: dict, num_warps: int,
                      device: torch.device) -> int:
    """How many programs of ``kernel`` (with these arguments and constants) fit on one
    multiprocessor of ``device``: compiled first (``warmup``), then registers per thread and
    shared memory per program go through ``resources.occupancy``, the rule the ahead-of-time
    table uses."""
    from .resources import occupancy_for_limits

    key = (kernel.fn.__name__, device.index, num_warps,
           tuple(sorted((k, v) for k, v in kwargs.items())),
           tuple(a.dtype if isinstance(a, torch.Tensor) else type(a) for a in args))
    if key not in _RESIDENT_CACHE:
        try:
            compiled = kernel.warmup(*args, grid=(1,), num_warps=num_warps, **kwargs)
            compiled._init_handles()
            registers, shared = compiled.n_regs, compiled.metadata.shared
        except Exception as exc:  # a Triton without this API: one program per SM, said once
            warnings.warn(f"could not read the compiled kernel's resources ({exc}); "
                          "launching one backward program per multiprocessor", stacklevel=3)
            _RESIDENT_CACHE[key] = 1
            return 1
        _RESIDENT_CACHE[key] = occupancy_for_limits(registers, num_warps, shared,
                                                    device_limits(device))["programs"]
    return _RESIDENT_CACHE[key]


def _rows_view(t: torch.Tensor, m: int, n: int) -> torch.Tensor:
    """``t`` as an (m, n) matrix whose rows are contiguous (copies only when needed)."""
    t2 = t.reshape(m, n)
    if n > 1 and t2.stride(1) != 1:
        t2 = t2.contiguous()
    return t2


def layer_norm_forward(x2d: torch.Tensor, weight: torch.Tensor | None,
                       bias: torch.Tensor | None, eps: float = 1e-5, *,
                       out: torch.Tensor | None = None, mean: torch.Tensor | None = None,
                       rstd: torch.Tensor | None = None, max_block_n: int = MAX_BLOCK_N,
                       config: tuple[int, int, int, bool] | None = None):
    """Normalize each row of ``x2d`` (M, N): returns ``(y (M, N), mean (M,), rstd (M,))``.

    ``mean`` and ``rstd = 1 / sqrt(var + eps)`` are float32 whatever the input dtype; ``y``
    has the input's dtype. ``weight`` and ``bias`` are (N,) or None. Pass ``out``, ``mean``,
    ``rstd`` to reuse buffers; ``max_block_n`` (a power of two) lets tests force the chunked
    path on short rows; ``config`` overrides ``launch_config`` (tuning runs).

    Range (float32 statistics, as torch's kernels): the row's sum and the sum of squares of
    ``x - mean`` must be finite in float32. Once ``sqrt(sum((x - mean)**2))`` passes about
    1.8e19 (``sqrt`` of float32's largest value, e.g. every value 1e19 from the mean in a
    row of 4), ``var`` overflows, ``rstd`` is 0 and the row comes out as the bias (zeros
    without one), silently; a row whose sum overflows gives NaN.
    ``functional.layer_norm`` stays correct there (``functional.inverse_rms``).
    """
    m, n = x2d.shape
    if x2d.stride(1) != 1 and n > 1:
        raise ValueError("x2d: expected rows with unit stride (use .contiguous())")
    y = torch.empty_like(x2d, memory_format=torch.contiguous_format) if out is None else out
    mean = torch.empty(m, dtype=torch.float32, device=x2d.device) if mean is None else mean
    rstd = torch.empty(m, dtype=torch.float32, device=x2d.device) if rstd is None else rstd
    if m == 0 or n == 0:
        return y, mean.fill_(float("nan")), rstd.fill_(float("nan"))
    block_n, num_warps, rows, _, row_fits_block = config or launch_config(
        n, max_block_n, "forward", x2d.element_size())
    grid = (triton.cdiv(m, rows) if row_fits_block else m,)
    layer_norm_fwd_kernel[grid](
        x2d, y, weight if weight is not None else x2d, bias if bias is not None else x2d,
        mean, rstd, x2d.stride(0), y.stride(0), m, n, eps,
        HAS_WEIGHT=weight is not None, HAS_BIAS=bias is not None,
        BLOCK_N=block_n, ROWS=rows if row_fits_block else 1, ROW_FITS_BLOCK=row_fits_block,
        num_warps=num_warps,
    )
    return y, mean, rstd


def reduce_block_n(n: int, slabs: int, device: torch.device) -> int:
    """Columns per program of the dgamma/dbeta reduction: narrow enough that the launch has
    about two programs per multiprocessor (16 to 128 columns); wide under the interpreter."""
    if device.type != "cuda":
        return INTERPRETER_REDUCE_BLOCK_N
    sms = torch.cuda.get_device_properties(device).multi_processor_count
    per_program = max(slabs * n // (2 * sms), 1)
    low, high = REDUCE_BLOCK_NS[0], REDUCE_BLOCK_NS[-1]
    return min(max(1 << (per_program.bit_length() - 1), low), high)


def sum_partials(partial: torch.Tensor, dw: torch.Tensor | None, db: torch.Tensor | None,
                 block_n: int | None = None) -> None:
    """Column sums of the float32 slabs ``partial`` (2, G, N) into ``dw`` (slab 0) and ``db``
    (slab 1), each (N,) or None, in one launch and a fixed order."""
    _, g, n = partial.shape
    slabs = (dw is not None) + (db is not None)
    if n == 0 or slabs == 0:
        return
    block_n = block_n or reduce_block_n(n, slabs, partial.device)
    grid = (slabs * triton.cdiv(n, block_n),)
    sum_partials_kernel[grid](partial, dw if dw is not None else partial,
                              db if db is not None else partial, g, n,
                              COMPUTE_DW=dw is not None, COMPUTE_DB=db is not None,
                              BLOCK_G=REDUCE_BLOCK_G, BLOCK_N=block_n,
                              num_warps=REDUCE_NUM_WARPS)


def backward_programs(m: int, rows: int, device: torch.device, resident: int = 1,
                      per_sm: int = BACKWARD_PROGRAMS_PER_SM, split: int = 1) -> int:
    """How many program groups share the rows in the backward (each group is ``split``
    programs). On a GPU: ``resident`` programs fit on one multiprocessor (from the compiled
    resources), at most ``per_sm`` of them are used, times the multiprocessors, divided by
    ``split``; never more groups than the ``ceil(m / rows)`` row blocks. Under the
    interpreter, ``INTERPRETER_PROGRAMS // split``."""
    blocks = triton.cdiv(m, rows)
    if device.type == "cuda":
        sms = torch.cuda.get_device_properties(device).multi_processor_count
        target = sms * max(1, min(resident, per_sm)) // split
    else:
        target = INTERPRETER_PROGRAMS // split
    return max(1, min(blocks, target))


_BACKWARD_PLANS: dict = {}  # launch plans by shape, dtype, device and options (host time)


def _backward_plan(dy2d, x2d, weight, mean, rstd, dx, compute_dw, compute_db, max_block_n,
                   config, per_sm, num_programs):
    """``(constants, num_warps, programs)`` of the backward launch (see layer_norm_backward)."""
    m, n = x2d.shape
    block_n, num_warps, rows, split, row_fits_block = config or launch_config(
        n, max_block_n, "backward", x2d.element_size())
    rows, split = (rows, split) if row_fits_block else (1, 1)
    constants = dict(HAS_WEIGHT=weight is not None, COMPUTE_DW=compute_dw,
                     COMPUTE_DB=compute_db, BLOCK_N=block_n, ROWS=rows, SPLIT=split,
                     ROW_FITS_BLOCK=row_fits_block)
    groups = num_programs
    if groups is None:
        resident = 1
        if x2d.device.type == "cuda":
            probe = torch.empty((2, 1, n), dtype=torch.float32, device=x2d.device)
            w_arg = weight if weight is not None else x2d
            resident = resident_programs(
                layer_norm_bwd_kernel, (dx, dy2d, x2d, w_arg, mean, rstd, probe,
                                        x2d.stride(0), dy2d.stride(0), dx.stride(0), m, n),
                constants, num_warps, x2d.device)
        groups = backward_programs(m, rows, x2d.device, resident, per_sm, split)
    return constants, num_warps, groups * split


def layer_norm_backward(dy2d: torch.Tensor, x2d: torch.Tensor, weight: torch.Tensor | None,
                        mean: torch.Tensor, rstd: torch.Tensor, *, compute_dw: bool = True,
                        compute_db: bool = True, dx: torch.Tensor | None = None,
                        bias_dtype: torch.dtype | None = None,
                        num_programs: int | None = None,
                        max_block_n: int = MAX_BLOCK_N_BACKWARD,
                        config: tuple[int, int, int, bool] | None = None,
                        per_sm: int = BACKWARD_PROGRAMS_PER_SM):
    """Gradients of LayerNorm for rows (M, N): returns ``(dx, dweight or None, dbias or None)``.

    ``dx`` has the input's dtype; ``dweight``/``dbias`` (N,) are reduced in float32 and cast
    to the parameter's dtype (``dbias``: ``bias_dtype``, by default the weight's dtype, or the
    input's when ``weight`` is None). ``num_programs`` overrides how many program groups
    share the rows (``backward_programs``; tests use more groups than rows); ``config``
    overrides ``launch_config`` and ``per_sm`` the cap on programs per multiprocessor
    (tuning runs). Two launches: the
    backward kernel, then one reduction for both dweight and dbias.
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
    plan_key = (m, n, x2d.dtype, x2d.device, weight.dtype if weight is not None else None,
                compute_dw, compute_db,
                max_block_n, config, per_sm, num_programs, x2d.stride(0), dy2d.stride(0),
                dx.stride(0))
    plan = _BACKWARD_PLANS.get(plan_key)
    if plan is None:
        plan = _backward_plan(dy2d, x2d, weight, mean, rstd, dx, compute_dw, compute_db,
                              max_block_n, config, per_sm, num_programs)
        if len(_BACKWARD_PLANS) > 4096:  # many shapes: start over rather than grow
            _BACKWARD_PLANS.clear()
        _BACKWARD_PLANS[plan_key] = plan
    constants, num_warps, programs = plan
    w_arg = weight if weight is not None else x2d
    slabs = compute_dw or compute_db
    groups = programs // constants["SPLIT"]
    partial = torch.empty((2, groups, n) if slabs else (2, 1, 1), dtype=torch.float32,
                          device=x2d.device)
    layer_norm_bwd_kernel[(programs,)](
        dx, dy2d, x2d, w_arg, mean, rstd, partial, x2d.stride(0), dy2d.stride(0),
        dx.stride(0), m, n, num_warps=num_warps, **constants)
    dweight = torch.empty(n, dtype=param_dtype, device=x2d.device) if compute_dw else None
    dbias = (torch.empty(n, dtype=bias_dtype or param_dtype, device=x2d.device)
             if compute_db else None)
    if slabs:
        sum_partials(partial, dweight, dbias)
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
    (``_validation.check_layer_norm_args``: shapes, mixed dtypes, ``eps >= 0``; a size-0
    ``normalized_shape`` gives an empty output, as in torch).

    Range: float32 statistics overflow, silently, once a row's
    ``sqrt(sum((x - mean)**2))`` passes about 1.8e19: its ``rstd`` is 0 and the row comes
    out as ``bias`` (zeros without one), where torch's kernels give zeros or NaN and
    ``functional.layer_norm`` the correct values; see ``layer_norm_forward``.
    """
    shape, eps = check_layer_norm_args(input, normalized_shape, weight, bias, eps)
    _check_device_and_dtype(input, weight=weight, bias=bias)
    return TritonLayerNormFunction.apply(input, shape, weight, bias, eps)
