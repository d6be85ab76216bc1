r"""Stateless normalization functions with ``torch.nn.functional`` signatures.

Each function is built from elementary tensor ops (mean, subtraction, multiplication,
``rsqrt``), never from torch's own normalization kernels, and is differentiable by autograd.
All of them share one recipe; only the axes of the statistics differ:

.. math::

    \mu = \frac{1}{H}\sum_{i} x_i, \qquad
    \sigma^2 = \frac{1}{H}\sum_{i} (x_i - \mu)^2, \qquad
    \hat{x}_i = \frac{x_i - \mu}{\sqrt{\sigma^2 + \epsilon}}, \qquad
    y_i = \gamma_i \hat{x}_i + \beta_i

where the sums run over the ``H`` elements that share one set of statistics:

=============  ============================================  ==========================
function       statistics over (input ``(N, C, *)``)          gamma/beta shape
=============  ============================================  ==========================
layer_norm     the trailing ``normalized_shape`` dims          ``normalized_shape``
batch_norm     ``N`` and all spatial dims, per channel         ``(C,)``
instance_norm  all spatial dims, per sample and channel        ``(C,)``
group_norm     ``C/G`` channels and all spatial dims           ``(C,)``
rms_norm       trailing dims; no mean subtraction, no beta     ``normalized_shape``
=============  ============================================  ==========================

One core does the statistics for all of them: :func:`standardize` (mean, biased variance,
``rstd``, :math:`\hat{x}`), wrapped for layer norm by :func:`layer_norm_forward`, which
returns ``(out, cache)`` as the backward pass wants it. Batch and instance norm update their
running statistics with :func:`~layernorm_tutorial.running_stats.update_running_stats`.
``rstd`` comes from :func:`inverse_rms`, which stays correct where the variance overflows
(fp32 rows whose values lie about 1e19 or more from their mean, where torch's kernels return
zeros or NaN): every finite input whose centred values are finite is normalized correctly.

fp16 and bf16 inputs are computed in fp32 and returned in the input's dtype. Parameters and
running statistics must have the input's dtype, or fp32 for fp16/bf16 inputs, as torch's
CPU kernels require (RuntimeError otherwise); ``rms_norm`` casts instead, as torch does.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from ._validation import (
    as_eps,
    as_num_groups,
    as_shape,
    check_batch_norm_args,
    check_channels_input,
    check_dyt_args,
    check_instance_norm_args,
    check_layer_norm_args,
    check_normalized_shape,
    check_param,
    check_param_dtypes,
    check_tensor,
    compute_dtype,
    verify_batch_size,
)
from .running_stats import update_running_stats

__all__ = ["moments", "inverse_rms", "NormCache", "standardize", "layer_norm_forward",
           "layer_norm", "batch_norm", "group_norm", "instance_norm", "rms_norm", "dyt"]


def moments(x: torch.Tensor, dims: tuple[int, ...]):
    r"""Mean, centred input and biased variance of ``x`` over ``dims`` (kept as size-1 dims).

    Returns ``(mean, xshift, var)`` with ``xshift = x - mean`` (same shape as ``x``) and
    ``var = mean(xshift**2)``: the two-pass algorithm, never :math:`E[x^2] - E[x]^2`, which
    cancels catastrophically when :math:`|\mu| \gg \sigma`.

    Both passes run on data shifted by one element ``K`` of each group (Chan, Golub and
    LeVeque's shifted data): :math:`x - K` is exactly zero for a constant group, so a constant
    row normalizes to exactly zero instead of to rounding noise times :math:`1/\sqrt{\epsilon}`.
    """
    pivot = x
    for d in dims:
        pivot = pivot.narrow(d, 0, 1) if x.shape[d] > 0 else pivot.sum(d, keepdim=True)
    shifted = x - pivot                                   # same shape as x
    shifted_mean = shifted.mean(dims, keepdim=True)       # size-1 along dims
    xshift = shifted - shifted_mean                       # x - mean, same shape as x
    var = (xshift * xshift).mean(dims, keepdim=True)      # biased: divide by H
    mean = pivot + shifted_mean
    return mean, xshift, var


def _large_rstd(dtype: torch.dtype) -> float:
    """Below this ``rstd`` :func:`inverse_rms` rescales: :math:`2^{-e/4}` for the largest
    binary exponent ``e`` of ``dtype`` (:math:`2^{-32}` in fp32, :math:`2^{-256}` in fp64),
    i.e. rows whose root mean square passes about 4.3e9 in fp32."""
    return 2.0 ** -(math.frexp(torch.finfo(dtype).max)[1] // 4)


def _branch_free(t: torch.Tensor) -> bool:
    """True where :func:`inverse_rms` must not read a value to choose its path: under
    ``torch.compile`` (a data-dependent branch would split the graph), inside a
    ``torch.func`` transform (``vmap`` cannot read a value; functorch's interpreter stack,
    a private API, is not empty there) and on the meta device (no values)."""
    if torch.compiler.is_compiling() or t.is_meta:
        return True
    peek = getattr(torch._C._functorch, "peek_interpreter_stack", None)
    return peek is not None and peek() is not None


def inverse_rms(values: torch.Tensor, mean_square: torch.Tensor, dims: tuple[int, ...],
                eps: float) -> torch.Tensor:
    r"""``1 / sqrt(mean_square + eps)`` where ``mean_square = mean(values**2)`` over
    ``dims`` (size 1 along them), correct (value and gradient) also for very large rows.

    ``values`` is the centred input for layer, group, batch and instance norm (then
    ``mean_square`` is the variance) and the input itself for RMS norm. Two things fail
    for large rows in plain ``rsqrt(mean_square + eps)``:

    - the squares overflow once the root mean square of ``values`` passes
      :math:`\sqrt{\max}` (about 1.8e19 in fp32, 1.3e154 in fp64): ``rsqrt(inf)`` is 0 and
      the row normalizes to zeros, as torch's fp32 kernels do (zeros, or NaN from about
      5e19);
    - autograd's ``rsqrt`` backward forms :math:`\mathrm{rstd}^3`, which underflows in fp32
      once the root mean square passes about 1e13: the gradient loses the variance term (half
      of it wrong at 1e16).

    So rows whose ``rstd`` is below :math:`2^{-32}` (root mean square above about 4.3e9;
    :math:`2^{-256}` in fp64), or 0, are recomputed from ``values`` scaled by the power of
    two :math:`s = 2^{-e}` that brings their largest magnitude into :math:`[0.5, 1)`
    (``e >= 0``, taken without gradient; a power of two scales exactly):

    .. math:: \mathrm{rstd} = s \big/ \sqrt{\mathrm{mean}\big((s v)^2\big) + s^2\epsilon}.

    Every other row keeps ``rsqrt(mean_square + eps)`` bit for bit (NaN stays NaN). In eager
    mode the rescaling runs only when some row needs it (one check, the smallest ``rstd``;
    on a GPU it waits for the device); under ``torch.compile``, ``torch.func`` transforms
    (``vmap``) and on the meta device it is computed branch-free with ``torch.where``.
    The range then ends where ``values`` itself overflows (differences of about 3.4e38 in
    fp32: NaN, as in torch); above about 1e37 in fp32 ``rstd`` is subnormal and keeps fewer
    bits. Differentiable by autograd.
    """
    rstd = torch.rsqrt(mean_square + eps)                 # size 1 along dims
    threshold = _large_rstd(rstd.dtype)
    if values.numel() == 0 or (not _branch_free(rstd)
                               and rstd.amin().item() >= threshold):
        return rstd             # no large row (a NaN row makes amin NaN: the general path)
    large = rstd < threshold                              # includes overflow: rstd == 0
    magnitude = values.detach().abs().amax(dims, keepdim=True)
    exponent = torch.frexp(magnitude).exponent.clamp_min(0)   # magnitude < 2**exponent
    scale = torch.where(large, torch.ldexp(torch.ones_like(magnitude), -exponent), 1.0)
    scaled = values * scale                               # exact: a power of two
    small = (scaled * scaled).mean(dims, keepdim=True)    # mean_square * scale**2
    # ones on the other rows, so that no inf or NaN reaches autograd through torch.where
    small = torch.where(large, small, torch.ones_like(small))
    rescaled = torch.rsqrt(small + eps * scale * scale) * scale
    return torch.where(large, rescaled, rstd)


@dataclass(frozen=True)
class NormCache:
    """What the backward pass needs from the forward (llm.c's ``cache``), plus ``var`` for
    batch norm's running statistics. Read it by attribute: ``cache.rstd``."""

    mean: torch.Tensor  # size 1 along the reduced dims, else like x
    var: torch.Tensor   # biased variance, shape of mean
    rstd: torch.Tensor  # 1 / sqrt(var + eps), shape of mean
    norm: torch.Tensor  # x_hat = (x - mean) * rstd, shape of x


def standardize(x: torch.Tensor, dims: tuple[int, ...], eps: float) -> NormCache:
    r"""The one normalization step of the package: statistics of ``x`` over ``dims``.

    .. math:: \hat{x} = (x - \mu)\,\mathrm{rstd}, \qquad
              \mathrm{rstd} = 1/\sqrt{\sigma^2 + \epsilon}

    with :math:`\mu, \sigma^2` the mean and biased variance over ``dims`` (from
    :func:`moments`) and ``rstd`` from :func:`inverse_rms` (correct also where
    :math:`\sigma^2` overflows; ``var`` is then inf). No argument checks, no affine step, no
    dtype change: callers cast to the compute dtype first. Differentiable by autograd.
    """
    mean, xshift, var = moments(x, dims)                  # mean, var: size 1 along dims
    rstd = inverse_rms(xshift, var, dims, eps)            # eps inside the square root
    return NormCache(mean, var, rstd, xshift * rstd)      # norm: shape of x


def layer_norm_forward(input, normalized_shape, weight=None, bias=None, eps: float = 1e-5):
    r"""Layer norm forward returning ``(out, cache)``: the core behind every torch LN here.

    Shapes: ``input`` is ``(*, *normalized_shape)``; ``weight`` (gamma) and ``bias`` (beta)
    are ``normalized_shape`` or None. ``out`` has the shape and dtype of ``input``;
    ``cache`` is a :class:`NormCache` in the compute dtype (fp32 for fp16/bf16 inputs):
    ``mean`` and ``rstd`` of shape ``(*, 1, ..., 1)`` and ``norm`` of the input's shape.

    .. math:: y = \frac{x - \mu}{\sqrt{\sigma^2 + \epsilon}} \odot \gamma + \beta
    """
    shape, eps = check_layer_norm_args(input, normalized_shape, weight, bias, eps)
    dims = tuple(range(input.dim() - len(shape), input.dim()))
    x = input.to(compute_dtype(input.dtype))              # (*, *normalized_shape)
    cache = standardize(x, dims, eps)
    out = cache.norm
    if weight is not None:
        out = out * weight.to(x.dtype)
    if bias is not None:
        out = out + bias.to(x.dtype)
    return out.to(input.dtype), cache


def layer_norm(input, normalized_shape, weight=None, bias=None, eps: float = 1e-5):
    r"""Layer normalization over the trailing ``normalized_shape`` dimensions.

    Shapes: ``input`` is ``(*, *normalized_shape)``; ``weight`` (gamma) and ``bias`` (beta)
    are ``normalized_shape`` or None; the output has the shape and dtype of ``input``.

    .. math:: y = \frac{x - \mu}{\sqrt{\sigma^2 + \epsilon}} \odot \gamma + \beta

    with :math:`\mu, \sigma^2` the mean and biased variance over the ``H = prod(normalized_shape)``
    trailing elements of each row (one pair per row, shared by all its features).
    Parameters must have the input's dtype (or fp32 for fp16/bf16 input), as torch requires.

    Range: correct, output and autograd gradient, to the rounding of the compute dtype, for
    every finite row whose centred values :math:`x_i - \mu` are finite, also where
    :math:`\sigma^2` overflows (fp32 rows about 1e19 or more from their mean, where torch
    returns zeros or NaN; see :func:`inverse_rms`). With ``eps=0``, as in torch, a constant
    row gives NaN, fp32 rows whose spread is below about 1e-19 lose precision (their squares
    are subnormal) and those below about 4e-23 give inf or NaN (the squares underflow to 0).
    A size-0 ``normalized_shape`` gives an empty output, as in torch.
    """
    return layer_norm_forward(input, normalized_shape, weight, bias, eps)[0]


def _channel_view(t: torch.Tensor, ndim: int) -> torch.Tensor:
    """Reshape a per-channel vector ``(C,)`` to ``(1, C, 1, ..., 1)`` for an ``ndim`` input."""
    return t.reshape((1, -1) + (1,) * (ndim - 2))


def _channel_affine(norm, weight, bias):
    """``norm * weight + bias`` with per-channel ``(C,)`` parameters (either may be None)."""
    if weight is not None:
        norm = norm * _channel_view(weight.to(norm.dtype), norm.dim())
    if bias is not None:
        norm = norm + _channel_view(bias.to(norm.dtype), norm.dim())
    return norm


def batch_norm(input, running_mean, running_var, weight=None, bias=None,
               training: bool = False, momentum: float = 0.1, eps: float = 1e-5):
    r"""Batch normalization: per-channel statistics over the batch and spatial dimensions.

    Shapes: ``input`` is ``(N, C, *)``; ``running_mean``, ``running_var``, ``weight``,
    ``bias`` are ``(C,)`` or None. Output: shape and dtype of ``input``.

    Training (``training=True``, which needs ``eps > 0`` as in torch) normalizes with the
    batch's mean and *biased* variance over the ``M = N * prod(*)`` values of each channel
    and, when running statistics are given, updates them in place with the *unbiased*
    variance (:func:`~layernorm_tutorial.running_stats.update_running_stats`):

    .. math::

        \hat\mu \leftarrow (1-m)\,\hat\mu + m\,\mu_B, \qquad
        \hat\sigma^2 \leftarrow (1-m)\,\hat\sigma^2 + m\,\frac{M}{M-1}\sigma_B^2

    Evaluation (``training=False``) normalizes with ``running_mean`` and ``running_var``.
    """
    check_batch_norm_args(input, running_mean, running_var, weight, bias,
                          training, momentum, eps)
    return _batch_norm(input, running_mean, running_var, weight, bias,
                       training, momentum, as_eps(eps))


def _batch_norm(input, running_mean, running_var, weight, bias, training, momentum, eps):
    """:func:`batch_norm` without the argument checks (instance norm reuses it)."""
    if input.numel() == 0:  # like torch: nothing to normalize, running stats untouched
        return _channel_affine(input.clone(), weight, bias)
    dims = (0,) + tuple(range(2, input.dim()))
    x = input.to(compute_dtype(input.dtype))              # (N, C, *)
    if training:
        mean, xshift, var = moments(x, dims)              # mean, var: (1, C, 1, ...)
        update_running_stats(running_mean, running_var, mean, var,
                             input.numel() // input.shape[1], momentum)
        norm = xshift * _batch_rstd(xshift, var, dims, eps)
    else:
        mean = _channel_view(running_mean.to(x.dtype), x.dim())
        var = _channel_view(running_var.to(x.dtype), x.dim())
        norm = (x - mean) * torch.rsqrt(var + eps)
    return _channel_affine(norm, weight, bias).to(input.dtype)


def _batch_rstd(xshift, var, dims, eps: float) -> torch.Tensor:
    """``rstd`` from batch statistics by torch's rule (ATen's ``InvStd``): with ``eps == 0``
    a zero variance gives ``rstd = 0`` instead of ``1/0``, so a constant channel normalizes
    to 0 (the output is the bias) where layer and group norm give NaN. Only instance norm
    reaches it: training-mode ``batch_norm`` refuses ``eps = 0``."""
    if eps != 0:
        return inverse_rms(xshift, var, dims, eps)
    zero = var == 0
    # ones where var == 0, so that no 1/0 reaches autograd through torch.where
    rstd = inverse_rms(xshift, torch.where(zero, torch.ones_like(var), var), dims, eps)
    return torch.where(zero, torch.zeros_like(rstd), rstd)


def group_norm(input, num_groups: int, weight=None, bias=None, eps: float = 1e-5):
    r"""Group normalization: statistics over groups of ``C / G`` channels and all positions.

    Shapes: ``input`` is ``(N, C, *)`` with ``C`` divisible by ``num_groups = G``;
    ``weight`` and ``bias`` are ``(C,)`` or None. Output: shape and dtype of ``input``.

    Viewing the input as ``(N, G, C/G * prod(*))``, each of the ``N*G`` rows is normalized
    like layer norm, then a per-channel affine map is applied. ``G = 1`` is layer norm over
    ``(C, *)`` with per-channel affine; ``G = C`` is instance norm (except with ``eps=0``:
    a constant group gives NaN here, as in torch, 0 in :func:`instance_norm`).

    ``num_groups=0`` raises ZeroDivisionError, torch's type (with a message naming it).
    """
    check_tensor(input, "input")
    check_channels_input(input, "group_norm")
    num_groups = as_num_groups(num_groups)
    n, c = input.shape[:2]
    if c % num_groups != 0:
        raise RuntimeError(
            "Expected number of channels in input to be divisible by num_groups, but got "
            f"input of shape {list(input.shape)} and num_groups={num_groups}"
        )
    check_param(weight, "weight", (c,))
    check_param(bias, "bias", (c,))
    check_param_dtypes("group_norm", input, weight=weight, bias=bias)
    eps = as_eps(eps)
    verify_batch_size([n * c // num_groups, num_groups] + list(input.shape[2:]))
    group_size = (c // num_groups) * _prod(input.shape[2:])
    x = input.to(compute_dtype(input.dtype)).reshape(n, num_groups, group_size)
    norm = standardize(x, (2,), eps).norm.reshape(input.shape)   # rows of (N, G, group)
    return _channel_affine(norm, weight, bias).to(input.dtype)


def _prod(sizes) -> int:
    total = 1
    for s in sizes:
        total *= s
    return total


def instance_norm(input, running_mean=None, running_var=None, weight=None, bias=None,
                  use_input_stats: bool = True, momentum: float = 0.1, eps: float = 1e-5):
    r"""Instance normalization: statistics per sample and channel over the spatial dims.

    Shapes: ``input`` is ``(N, C, *)`` with at least one spatial dim; running statistics,
    ``weight`` and ``bias`` are ``(C,)`` or None. Output: shape and dtype of ``input``.

    Implemented as torch does: batch norm on the input viewed as ``(1, N*C, *)`` (each
    sample-channel pair becomes its own channel); running statistics, when given, are updated
    with the average over the batch of the per-instance updates. So, as in torch, with
    ``eps=0`` and ``use_input_stats=True`` a constant channel normalizes to 0 (the output is
    its bias), not to NaN as in layer and group norm: batch norm's rule, ``rstd = 0`` for a
    zero variance when ``eps == 0``. With running statistics (``use_input_stats=False``) a
    zero running variance and ``eps=0`` give non-finite values, as in torch (here ``inf``,
    or NaN where ``x`` equals the running mean; torch folds the statistics into one scale
    and shift per channel and gives NaN on the whole channel).
    """
    check_instance_norm_args(input, running_mean, running_var, weight, bias,
                             use_input_stats, momentum, eps)
    n, c = input.shape[:2]
    eps = as_eps(eps)
    folded = input.reshape((1, n * c) + tuple(input.shape[2:]))
    rm = running_mean.repeat(n) if running_mean is not None else None
    rv = running_var.repeat(n) if running_var is not None else None
    out = _batch_norm(
        folded, rm, rv,
        weight.repeat(n) if weight is not None else None,
        bias.repeat(n) if bias is not None else None,
        use_input_stats, momentum, eps,
    )
    if use_input_stats and n > 0:
        with torch.no_grad():
            if running_mean is not None:
                running_mean.copy_(rm.view(n, c).mean(0))
            if running_var is not None:
                running_var.copy_(rv.view(n, c).mean(0))
    return out.reshape(input.shape)


def rms_norm(input, normalized_shape, weight=None, eps=None):
    r"""Root-mean-square normalization (Zhang and Sennrich, 2019): no centring, no bias.

    Shapes: ``input`` is ``(*, *normalized_shape)``; ``weight`` is ``normalized_shape`` or
    None. Output: shape and dtype of ``input``.

    .. math:: y = \frac{x}{\sqrt{\frac{1}{H}\sum_i x_i^2 + \epsilon}} \odot \gamma

    ``eps=None`` means the machine epsilon of the compute dtype (fp32 for fp16/bf16 inputs),
    as in torch. Squares are taken in the compute dtype, so fp16 inputs near 300 (whose
    squares overflow fp16) stay finite, and where they overflow the compute dtype too
    (fp32 rows with a root mean square of about 1.8e19 or more, which torch normalizes to
    zeros) ``rstd`` is computed from scaled values (:func:`inverse_rms`): correct for every
    finite input. A size-0 ``normalized_shape`` gives an empty output, as in torch.

    Mixed dtypes are allowed, as in torch's CPU ``rms_norm`` (the one norm that does not
    refuse them): the weight is cast to the input's compute dtype and the output has the
    input's dtype.
    """
    check_tensor(input, "input")
    shape = as_shape(normalized_shape)
    check_normalized_shape(input, shape)
    check_param(weight, "weight", shape)
    eps = as_eps(eps)
    dims = tuple(range(input.dim() - len(shape), input.dim()))
    x = input.to(compute_dtype(input.dtype))
    if eps is None:
        eps = torch.finfo(x.dtype).eps
    mean_square = (x * x).mean(dims, keepdim=True)       # (*, 1, ..., 1)
    out = x * inverse_rms(x, mean_square, dims, eps)
    if weight is not None:
        out = out * weight.to(x.dtype)
    return out.to(input.dtype)


def dyt(input, alpha, weight=None, bias=None):
    r"""Dynamic Tanh (Zhu, Chen, He, LeCun and Liu, 2025): an element-wise stand-in for a norm.

    Shapes: ``input`` is ``(*, *S)``; ``alpha`` is a real number or a one-element tensor
    (a learnable scalar in :class:`~layernorm_tutorial.nn.DynamicTanh`); ``weight`` (gamma)
    and ``bias`` (beta) are None or of one shape ``S`` equal to the trailing dims of
    ``input``. Output: shape and dtype of ``input``.

    .. math:: y = \gamma \odot \tanh(\alpha x) + \beta

    No statistics are computed: every element is squashed on its own, so the cost is one
    pass with no reduction. fp16/bf16 inputs are computed in fp32; parameters must have the
    input's dtype or fp32 (as :func:`layer_norm`).
    """
    check_dyt_args(input, alpha, weight, bias)
    x = input.to(compute_dtype(input.dtype))
    a = alpha.to(x.dtype).reshape(()) if isinstance(alpha, torch.Tensor) else float(alpha)
    out = torch.tanh(a * x)
    if weight is not None:
        out = out * weight.to(x.dtype)
    if bias is not None:
        out = out + bias.to(x.dtype)
    return out.to(input.dtype)
