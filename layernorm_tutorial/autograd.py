r"""Layer norm and batch norm as ``torch.autograd.Function`` s with hand-derived backward passes.

The forward pass saves what the backward needs (``norm`` = :math:`\hat{x}` and ``rstd`` =
:math:`1/\sqrt{\sigma^2+\epsilon}`); the backward pass is the closed form below, computed with
plain tensor ops and no autograd. With :math:`g = \gamma \odot dy` (``dnorm``) and means taken
over the ``H`` elements that share one set of statistics,

.. math::

    dx = \mathrm{rstd} \cdot \Big( g - \underbrace{\mathrm{mean}(g)}_{c_2}
         - \hat{x} \cdot \underbrace{\mathrm{mean}(g \odot \hat{x})}_{c_1} \Big), \qquad
    d\gamma = \sum_{\text{rows}} dy \odot \hat{x}, \qquad
    d\beta = \sum_{\text{rows}} dy.

The two subtracted terms remove from :math:`g` its component along the all-ones direction
(the mean was subtracted) and along :math:`\hat{x}` (the variance was divided out): ``dx`` is
:math:`g` projected onto the subspace orthogonal to both, scaled by ``rstd``. Layer norm takes
the means over the normalized trailing dims; batch norm (training mode) over the batch and
spatial dims of each channel: the same formula on different axes.

Double backward. The backward is written in ordinary differentiable tensor ops, so it can
itself be differentiated (``create_graph=True``: Hessian-vector products, gradient
penalties, meta-learning). The saved ``norm`` and ``rstd`` were computed without a graph,
so when the backward runs with grad mode on it recomputes them from the saved input with
:func:`~layernorm_tutorial.functional.standardize`; a plain ``.backward()`` uses the saved
ones and costs no extra pass.
"""

from __future__ import annotations

import torch

from . import functional
from ._validation import (
    as_eps,
    as_shape,
    check_batch_norm_args,
    check_dyt_args,
    check_layer_norm_args,
    check_normalized_shape,
    check_param,
    check_tensor,
    compute_dtype,
)
from .running_stats import update_running_stats

__all__ = ["LayerNormFunction", "BatchNormFunction", "RMSNormFunction", "DyTFunction",
           "layer_norm", "batch_norm", "rms_norm", "dyt", "normalization_backward",
           "rms_norm_backward", "dyt_backward"]


def normalization_backward(dout, norm, rstd, weight, dims):
    r"""Closed-form input gradient shared by layer norm and training-mode batch norm.

    ``dout`` and ``norm`` (:math:`\hat x`) have the input's shape; ``rstd`` is broadcastable
    to it with size 1 along ``dims``; ``weight`` is broadcastable to it or None.
    Returns ``dx`` with the input's shape.
    """
    dnorm = dout * weight if weight is not None else dout          # g = gamma * dy
    c1 = (dnorm * norm).mean(dims, keepdim=True)                    # projection on x_hat
    c2 = dnorm.mean(dims, keepdim=True)                             # projection on ones
    return (dnorm - c2 - norm * c1) * rstd


def _norm_and_rstd(ctx, dims):
    """Saved ``(norm, rstd)``; when the backward itself is being differentiated (grad mode
    on: ``create_graph=True``), ``norm`` (and, for batch statistics, ``rstd``) are recomputed
    from the saved input so that they carry a graph back to it."""
    input, _, norm, rstd = ctx.saved_tensors
    if not torch.is_grad_enabled():
        return norm, rstd
    x = input.to(norm.dtype)
    if ctx.fixed_mean is None:
        cache = functional.standardize(x, dims, ctx.eps)
        return cache.norm, cache.rstd
    return (x - ctx.fixed_mean) * rstd, rstd  # eval-mode batch norm: constant statistics


class LayerNormFunction(torch.autograd.Function):
    """Layer norm over the trailing ``len(normalized_shape)`` dims; see the module docstring."""

    @staticmethod
    def forward(ctx, input, normalized_shape, weight, bias, eps):
        out, cache = functional.layer_norm_forward(input, normalized_shape, weight, bias, eps)
        ctx.save_for_backward(input, weight, cache.norm, cache.rstd)   # norm: like input
        ctx.dims = tuple(range(input.dim() - len(normalized_shape), input.dim()))
        ctx.eps, ctx.fixed_mean = eps, None
        ctx.bias_dtype = bias.dtype if bias is not None else None
        return out

    @staticmethod
    def backward(ctx, dout):
        weight = ctx.saved_tensors[1]
        dims = ctx.dims
        norm, rstd = _norm_and_rstd(ctx, dims)                       # rstd: (*, 1, ..., 1)
        batch_dims = tuple(range(norm.dim() - len(dims)))
        g = dout.to(norm.dtype)
        w = weight.to(norm.dtype) if weight is not None else None
        dx = dweight = dbias = None
        if ctx.needs_input_grad[0]:
            dx = normalization_backward(g, norm, rstd, w, dims).to(dout.dtype)
        # with no batch dims (input.dim() == len(normalized_shape)) there is nothing to sum,
        # and torch's .sum(()) would reduce *every* dim
        def sum_rows(t):
            return t.sum(batch_dims) if batch_dims else t

        if weight is not None and ctx.needs_input_grad[2]:
            dweight = sum_rows(g * norm).to(weight.dtype)
        if ctx.bias_dtype is not None and ctx.needs_input_grad[3]:
            dbias = sum_rows(g).to(ctx.bias_dtype)
        return dx, None, dweight, dbias, None


def layer_norm(input, normalized_shape, weight=None, bias=None, eps: float = 1e-5):
    """Layer norm with the hand-derived (and twice differentiable) backward; signature of
    ``torch.nn.functional``."""
    shape, eps = check_layer_norm_args(input, normalized_shape, weight, bias, eps)
    return LayerNormFunction.apply(input, shape, weight, bias, eps)


class BatchNormFunction(torch.autograd.Function):
    """Batch norm with hand-derived backward, training (batch statistics) or eval mode."""

    @staticmethod
    def forward(ctx, input, running_mean, running_var, weight, bias, training, momentum, eps):
        ndim = input.dim()
        dims = (0,) + tuple(range(2, ndim))
        stat_shape = (1, -1) + (1,) * (ndim - 2)
        x = input.to(compute_dtype(input.dtype))                    # (N, C, *)
        mean = None
        if training:
            cache = functional.standardize(x, dims, eps)             # stats: (1, C, 1, ...)
            update_running_stats(running_mean, running_var, cache.mean, cache.var,
                                 input.numel() // input.shape[1], momentum)
            norm, rstd = cache.norm, cache.rstd
        else:
            mean = running_mean.to(x.dtype).reshape(stat_shape).clone()  # (1, C, 1, ...)
            rstd = torch.rsqrt(running_var.to(x.dtype).reshape(stat_shape) + eps)
            norm = (x - mean) * rstd                                 # (N, C, *)
        w = weight.to(x.dtype).reshape(stat_shape) if weight is not None else None
        out = norm * w if w is not None else norm
        if bias is not None:
            out = out + bias.to(x.dtype).reshape(stat_shape)
        ctx.save_for_backward(input, weight, norm, rstd)
        ctx.dims, ctx.stat_shape, ctx.eps = dims, stat_shape, eps
        ctx.fixed_mean = mean  # None in training mode: the statistics depend on the input
        ctx.bias_dtype = bias.dtype if bias is not None else None
        return out.to(input.dtype)

    @staticmethod
    def backward(ctx, dout):
        weight = ctx.saved_tensors[1]
        dims, stat_shape = ctx.dims, ctx.stat_shape
        norm, rstd = _norm_and_rstd(ctx, dims)                       # rstd: (1, C, 1, ...)
        g = dout.to(norm.dtype)
        w = weight.to(norm.dtype).reshape(stat_shape) if weight is not None else None
        dx = dweight = dbias = None
        if ctx.needs_input_grad[0]:
            if ctx.fixed_mean is None:
                dx = normalization_backward(g, norm, rstd, w, dims)
            else:  # running statistics are constants: y is affine in x
                dx = g * rstd * w if w is not None else g * rstd
            dx = dx.to(dout.dtype)
        if weight is not None and ctx.needs_input_grad[3]:
            dweight = (g * norm).sum(dims).to(weight.dtype)
        if ctx.bias_dtype is not None and ctx.needs_input_grad[4]:
            dbias = g.sum(dims).to(ctx.bias_dtype)
        return dx, None, None, dweight, dbias, None, None, None


def batch_norm(input, running_mean, running_var, weight=None, bias=None,
               training: bool = False, momentum: float = 0.1, eps: float = 1e-5):
    """Batch norm with the hand-derived (and twice differentiable) backward; signature of
    ``torch.nn.functional``."""
    check_batch_norm_args(input, running_mean, running_var, weight, bias,
                          training, momentum, eps)
    if input.numel() == 0:
        return functional.batch_norm(input, running_mean, running_var, weight, bias,
                                     training, momentum, eps)
    return BatchNormFunction.apply(input, running_mean, running_var, weight, bias,
                                   bool(training), momentum, as_eps(eps))


# ------------------------------------------------------------------------------ RMS norm
def rms_norm_backward(dout, norm, rstd, weight, dims):
    r"""Closed-form input gradient of RMS norm :math:`y = \gamma \odot x\,r`,
    :math:`r = 1/\sqrt{\mathrm{mean}(x^2) + \epsilon}`, :math:`\hat x = x r`:

    .. math:: dx = r\,\big(g - \hat{x}\,\mathrm{mean}(g \odot \hat{x})\big),
              \qquad g = \gamma \odot dy.

    Layer norm's formula without the ``mean(g)`` term: no mean was subtracted, so only the
    component of ``g`` along :math:`\hat x` is removed (exact with :math:`\epsilon > 0`).
    ``dout`` and ``norm`` have the input's shape, ``rstd`` size 1 along ``dims``."""
    g = dout * weight if weight is not None else dout
    return (g - norm * (g * norm).mean(dims, keepdim=True)) * rstd


def _sum_leading(t, n_leading: int):
    """Sum over the first ``n_leading`` dims (no-op when there are none)."""
    return t.sum(tuple(range(n_leading))) if n_leading else t


def _rms_rstd(x, dims, eps):
    """``1 / sqrt(mean(x**2) + eps)`` over ``dims``, correct also where the mean square
    overflows (:func:`~layernorm_tutorial.functional.inverse_rms`), as in
    :func:`~layernorm_tutorial.functional.rms_norm`."""
    return functional.inverse_rms(x, (x * x).mean(dims, keepdim=True), dims, eps)


class RMSNormFunction(torch.autograd.Function):
    """RMS norm over the trailing ``len(normalized_shape)`` dims with the backward of
    :func:`rms_norm_backward`; twice differentiable like :class:`LayerNormFunction`."""

    @staticmethod
    def forward(ctx, input, normalized_shape, weight, eps):
        dims = tuple(range(input.dim() - len(normalized_shape), input.dim()))
        x = input.to(compute_dtype(input.dtype))
        eps = torch.finfo(x.dtype).eps if eps is None else eps
        rstd = _rms_rstd(x, dims, eps)                                # (*, 1, ..., 1)
        norm = x * rstd                                               # like input
        out = norm * weight.to(x.dtype) if weight is not None else norm
        ctx.save_for_backward(input, weight, norm, rstd)
        ctx.dims, ctx.eps = dims, eps
        return out.to(input.dtype)

    @staticmethod
    def backward(ctx, dout):
        input, weight, norm, rstd = ctx.saved_tensors
        dims = ctx.dims
        if torch.is_grad_enabled():  # create_graph: recompute with a graph back to the input
            x = input.to(norm.dtype)
            rstd = _rms_rstd(x, dims, ctx.eps)
            norm = x * rstd
        g = dout.to(norm.dtype)
        w = weight.to(norm.dtype) if weight is not None else None
        dx = dweight = None
        if ctx.needs_input_grad[0]:
            dx = rms_norm_backward(g, norm, rstd, w, dims).to(dout.dtype)
        if weight is not None and ctx.needs_input_grad[2]:
            dweight = _sum_leading(g * norm, norm.dim() - len(dims)).to(weight.dtype)
        return dx, None, dweight, None


def rms_norm(input, normalized_shape, weight=None, eps=None):
    """RMS norm with the hand-derived (twice differentiable) backward; signature and eps rule
    (``None``: machine epsilon of the compute dtype) of ``torch.nn.functional.rms_norm``."""
    check_tensor(input, "input")
    shape = as_shape(normalized_shape)
    check_normalized_shape(input, shape)
    check_param(weight, "weight", shape)
    return RMSNormFunction.apply(input, shape, weight, as_eps(eps))


# ------------------------------------------------------------------------------ DyT
def dyt_backward(dout, t, x, alpha, weight, n_leading: int):
    r"""Gradients of :math:`y = \gamma \odot \tanh(\alpha x) + \beta`, :math:`t = \tanh(\alpha x)`:

    .. math:: dx = dy \odot \gamma\,\alpha\,(1 - t^2), \quad
              d\alpha = \textstyle\sum dy \odot \gamma \odot x\,(1 - t^2), \quad
              d\gamma = \textstyle\sum_{\text{rows}} dy \odot t, \quad
              d\beta = \textstyle\sum_{\text{rows}} dy.

    No reduction couples the elements of a row (each is squashed on its own): ``dx`` is
    element-wise. Returns ``(dx, dalpha (0-d), dgamma, dbeta)``; ``dgamma`` is None without
    a weight. ``n_leading`` is the number of batch dims summed for ``dgamma``/``dbeta``."""
    g = dout * weight if weight is not None else dout
    slope = 1 - t * t                                              # tanh' at alpha x
    dx = g * alpha * slope
    dalpha = (g * x * slope).sum()
    dweight = _sum_leading(dout * t, n_leading) if weight is not None else None
    return dx, dalpha, dweight, _sum_leading(dout, n_leading)


class DyTFunction(torch.autograd.Function):
    """:func:`~layernorm_tutorial.functional.dyt` with the backward of :func:`dyt_backward`;
    twice differentiable (with grad mode on, ``tanh`` is recomputed with a graph)."""

    @staticmethod
    def forward(ctx, input, alpha, weight, bias):
        x = input.to(compute_dtype(input.dtype))
        a = alpha.to(x.dtype).reshape(())
        t = torch.tanh(a * x)
        out = t * weight.to(x.dtype) if weight is not None else t
        if bias is not None:
            out = out + bias.to(x.dtype)
        ctx.save_for_backward(input, alpha, weight, t)
        ctx.n_param_dims = weight.dim() if weight is not None else (
            bias.dim() if bias is not None else 0)
        ctx.bias_dtype = bias.dtype if bias is not None else None
        return out.to(input.dtype)

    @staticmethod
    def backward(ctx, dout):
        input, alpha, weight, t = ctx.saved_tensors
        x = input.to(t.dtype)
        a = alpha.to(t.dtype).reshape(())
        if torch.is_grad_enabled():  # create_graph: tanh with a graph back to x and alpha
            t = torch.tanh(a * x)
        g = dout.to(t.dtype)
        w = weight.to(t.dtype) if weight is not None else None
        dx, dalpha, dweight, dbias = dyt_backward(g, t, x, a, w, t.dim() - ctx.n_param_dims)
        return (dx.to(dout.dtype) if ctx.needs_input_grad[0] else None,
                dalpha.reshape(alpha.shape).to(alpha.dtype) if ctx.needs_input_grad[1] else None,
                dweight.to(weight.dtype) if dweight is not None and ctx.needs_input_grad[2]
                else None,
                dbias.to(ctx.bias_dtype) if ctx.bias_dtype is not None
                and ctx.needs_input_grad[3] else None)


def dyt(input, alpha, weight=None, bias=None):
    """DyT with the hand-derived (twice differentiable) backward; arguments as
    :func:`layernorm_tutorial.functional.dyt` (a number ``alpha`` gets no gradient)."""
    check_dyt_args(input, alpha, weight, bias)
    if not isinstance(alpha, torch.Tensor):
        alpha = torch.tensor(float(alpha), dtype=compute_dtype(input.dtype))
    return DyTFunction.apply(input, alpha, weight, bias)
