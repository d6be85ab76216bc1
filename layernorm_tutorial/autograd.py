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
"""

from __future__ import annotations

import torch

from . import functional
from ._validation import (
    check_batch_norm_args,
    check_layer_norm_args,
    compute_dtype,
)

__all__ = ["LayerNormFunction", "BatchNormFunction", "layer_norm", "batch_norm",
           "normalization_backward"]


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


class LayerNormFunction(torch.autograd.Function):
    """Layer norm over the trailing ``len(normalized_shape)`` dims; see the module docstring."""

    @staticmethod
    def forward(ctx, input, normalized_shape, weight, bias, eps):
        dims = tuple(range(input.dim() - len(normalized_shape), input.dim()))
        x = input.to(compute_dtype(input.dtype))                    # (*, *normalized_shape)
        _, xshift, var = functional.moments(x, dims)                 # var: (*, 1, ..., 1)
        rstd = torch.rsqrt(var + eps)                                # (*, 1, ..., 1)
        norm = xshift * rstd                                         # x_hat, like x
        w = weight.to(x.dtype) if weight is not None else None
        out = norm * w if w is not None else norm
        if bias is not None:
            out = out + bias.to(x.dtype)
        ctx.save_for_backward(norm, rstd, weight)
        ctx.dims = dims
        ctx.has_bias = bias is not None
        return out.to(input.dtype)

    @staticmethod
    def backward(ctx, dout):
        norm, rstd, weight = ctx.saved_tensors
        dims = ctx.dims
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
        if ctx.has_bias and ctx.needs_input_grad[3]:
            dbias = sum_rows(g).to(dout.dtype)
        return dx, None, dweight, dbias, None


def layer_norm(input, normalized_shape, weight=None, bias=None, eps: float = 1e-5):
    """Layer norm with the hand-derived backward; signature of ``torch.nn.functional``."""
    shape = check_layer_norm_args(input, normalized_shape, weight, bias, eps)
    return LayerNormFunction.apply(input, shape, weight, bias, eps)


class BatchNormFunction(torch.autograd.Function):
    """Batch norm with hand-derived backward, training (batch statistics) or eval mode."""

    @staticmethod
    def forward(ctx, input, running_mean, running_var, weight, bias, training, momentum, eps):
        ndim = input.dim()
        dims = (0,) + tuple(range(2, ndim))
        stat_shape = (1, -1) + (1,) * (ndim - 2)
        x = input.to(compute_dtype(input.dtype))                    # (N, C, *)
        if training:
            mean, xshift, var = functional.moments(x, dims)          # (1, C, 1, ...)
            count = input.numel() // input.shape[1]                  # M per channel
            with torch.no_grad():
                if running_mean is not None:
                    running_mean.mul_(1 - momentum).add_(
                        momentum * mean.reshape(-1).to(running_mean.dtype))
                if running_var is not None:
                    running_var.mul_(1 - momentum).add_(
                        momentum * (var.reshape(-1) * count / (count - 1)).to(running_var.dtype))
        else:
            mean = running_mean.to(x.dtype).reshape(stat_shape)
            var = running_var.to(x.dtype).reshape(stat_shape)
            xshift = x - mean
        rstd = torch.rsqrt(var + eps)                                # (1, C, 1, ...)
        norm = xshift * rstd                                         # (N, C, *)
        w = weight.to(x.dtype).reshape(stat_shape) if weight is not None else None
        out = norm * w if w is not None else norm
        if bias is not None:
            out = out + bias.to(x.dtype).reshape(stat_shape)
        ctx.save_for_backward(norm, rstd, weight)
        ctx.dims, ctx.stat_shape = dims, stat_shape
        ctx.training, ctx.has_bias = training, bias is not None
        return out.to(input.dtype)

    @staticmethod
    def backward(ctx, dout):
        norm, rstd, weight = ctx.saved_tensors
        dims, stat_shape = ctx.dims, ctx.stat_shape
        g = dout.to(norm.dtype)
        w = weight.to(norm.dtype).reshape(stat_shape) if weight is not None else None
        dx = dweight = dbias = None
        if ctx.needs_input_grad[0]:
            if ctx.training:
                dx = normalization_backward(g, norm, rstd, w, dims)
            else:  # running statistics are constants: y is affine in x
                dx = g * rstd * w if w is not None else g * rstd
            dx = dx.to(dout.dtype)
        if weight is not None and ctx.needs_input_grad[3]:
            dweight = (g * norm).sum(dims).to(weight.dtype)
        if ctx.has_bias and ctx.needs_input_grad[4]:
            dbias = g.sum(dims).to(dout.dtype)
        return dx, None, None, dweight, dbias, None, None, None


def batch_norm(input, running_mean, running_var, weight=None, bias=None,
               training: bool = False, momentum: float = 0.1, eps: float = 1e-5):
    """Batch norm with the hand-derived backward; signature of ``torch.nn.functional``."""
    check_batch_norm_args(input, running_mean, running_var, weight, bias,
                          training, momentum, eps)
    if input.numel() == 0:
        return functional.batch_norm(input, running_mean, running_var, weight, bias,
                                     training, momentum, eps)
    return BatchNormFunction.apply(input, running_mean, running_var, weight, bias,
                                   bool(training), momentum, eps)
