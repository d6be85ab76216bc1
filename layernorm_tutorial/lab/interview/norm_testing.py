r"""How to test a LayerNorm implementation: five checks, and three bugs that each slips past
some of them.

A candidate implementation has ``torch.nn.functional.layer_norm``'s signature,
``fn(x, normalized_shape, weight, bias, eps)``. :func:`check_layer_norm` runs, in float64:

``torch parity``     output equal to ``torch.nn.functional.layer_norm`` (weight, bias, eps)
                     to 1e-10 on rows of different scales
``gradcheck``        ``torch.autograd.gradcheck``: the backward agrees with finite
                     differences *of the candidate's own forward*
``invariances``      output unchanged by a per-row shift, and (with eps = 0) by a positive
                     per-row scale
``dx rows sum to 0`` the input gradient of every row sums to zero (:math:`dx \perp 1`)
``constant row``     a constant row gives a finite output and a finite gradient

and returns ``{check: passed}``. The planted bugs show that no single check is enough:

``unbiased_layer_norm``        divides by :math:`H-1` (passes all but torch parity)
``wrong_backward_layer_norm``  right forward, backward without the
                               :math:`\hat x\,\overline{g\hat x}` term (caught only by
                               gradcheck)
``eps_outside_layer_norm``     :math:`(x-\mu)/(\sigma+\epsilon)` (caught by parity and by
                               the constant row's NaN gradient)
``batch_axis_layer_norm``      statistics over the batch axis instead of the features
                               (caught by parity and by the invariances)
"""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn.functional as F

from layernorm_tutorial import functional as LF

__all__ = ["CHECKS", "check_layer_norm", "unbiased_layer_norm", "wrong_backward_layer_norm",
           "eps_outside_layer_norm", "batch_axis_layer_norm"]

F64 = torch.float64
CHECKS = ("torch parity", "gradcheck", "invariances", "dx rows sum to 0", "constant row")


def _dims(x, normalized_shape):
    shape = (normalized_shape,) if isinstance(normalized_shape, int) else tuple(normalized_shape)
    return tuple(range(x.dim() - len(shape), x.dim()))


def _affine(y, weight, bias):
    if weight is not None:
        y = y * weight
    if bias is not None:
        y = y + bias
    return y


def unbiased_layer_norm(x, normalized_shape, weight=None, bias=None, eps=1e-5):
    """LayerNorm with the *unbiased* variance (divides by H - 1): a plausible slip."""
    dims = _dims(x, normalized_shape)
    mean = x.mean(dims, keepdim=True)
    var = x.var(dims, keepdim=True, correction=1)
    return _affine((x - mean) / torch.sqrt(var + eps), weight, bias)


def eps_outside_layer_norm(x, normalized_shape, weight=None, bias=None, eps=1e-5):
    r"""LayerNorm with :math:`\epsilon` added to the biased standard deviation."""
    dims = _dims(x, normalized_shape)
    mean = x.mean(dims, keepdim=True)
    std = x.var(dims, keepdim=True, correction=0).sqrt()
    return _affine((x - mean) / (std + eps), weight, bias)


def batch_axis_layer_norm(x, normalized_shape, weight=None, bias=None, eps=1e-5):
    """Normalizes each feature over the leading (batch) dims instead of each row over its
    features: BatchNorm's axis by mistake (a transposed tensor, a wrong ``dim``)."""
    dims = tuple(range(x.dim() - len(_dims(x, normalized_shape))))
    mean = x.mean(dims, keepdim=True)
    var = x.var(dims, keepdim=True, correction=0)
    return _affine((x - mean) / torch.sqrt(var + eps), weight, bias)


class _WrongBackward(torch.autograd.Function):
    r"""Correct forward; backward :math:`dx = r\,(g' - \bar{g'})` with :math:`g' = g\gamma`,
    missing the term :math:`-r\,\hat x\,\overline{g'\hat x}` (a classic derivation slip)."""

    @staticmethod
    def forward(ctx, x, dims, weight, bias, eps):
        cache = LF.standardize(x, dims, eps)
        ctx.save_for_backward(cache.norm, cache.rstd, weight)
        ctx.dims, ctx.has_bias = dims, bias is not None
        return _affine(cache.norm, weight, bias)

    @staticmethod
    def backward(ctx, dy):
        norm, rstd, weight = ctx.saved_tensors
        gw = dy * weight if weight is not None else dy
        dx = rstd * (gw - gw.mean(ctx.dims, keepdim=True))          # the slip: no xhat term
        rows = tuple(range(dy.dim() - len(ctx.dims)))
        dweight = (dy * norm).sum(rows) if weight is not None else None
        dbias = dy.sum(rows) if ctx.has_bias else None
        return dx, None, dweight, dbias, None


def wrong_backward_layer_norm(x, normalized_shape, weight=None, bias=None, eps=1e-5):
    """LayerNorm whose forward is right and whose hand-written backward drops a term."""
    return _WrongBackward.apply(x, _dims(x, normalized_shape), weight, bias, eps)


def check_layer_norm(fn: Callable, *, features: int = 6, seed: int = 0) -> dict[str, bool]:
    """Run the five checks of the module docstring on ``fn`` (float64) and return
    ``{check name: passed}`` in the order of :data:`CHECKS`. An exception raised by ``fn``
    inside a check counts as a failure of that check."""
    g = torch.Generator().manual_seed(seed)
    shape = (features,)
    scales = torch.tensor([[0.01], [1.0], [30.0]], dtype=F64)
    x = torch.randn(3, features, generator=g, dtype=F64) * scales + 2.0
    w = torch.rand(features, generator=g, dtype=F64) + 0.5
    b = torch.randn(features, generator=g, dtype=F64)
    dy = torch.randn(3, features, generator=g, dtype=F64)

    def parity():
        return torch.allclose(fn(x, shape, w, b, 1e-5), F.layer_norm(x, shape, w, b, 1e-5),
                              rtol=1e-10, atol=1e-10)

    def gradcheck():
        inputs = (x.clone().requires_grad_(True), w.clone().requires_grad_(True),
                  b.clone().requires_grad_(True))
        return torch.autograd.gradcheck(lambda xi, wi, bi: fn(xi, shape, wi, bi, 1e-5),
                                        inputs, raise_exception=False)

    def invariances():
        shift = torch.randn(3, 1, generator=g, dtype=F64)
        scale = torch.rand(3, 1, generator=g, dtype=F64) * 10 + 0.1
        base = fn(x, shape, w, b, 1e-5)
        shifted = torch.allclose(fn(x + shift, shape, w, b, 1e-5), base, atol=1e-9)
        unscaled = fn(x, shape, w, b, 0.0)
        scaled = torch.allclose(fn(x * scale, shape, w, b, 0.0), unscaled, atol=1e-9)
        return shifted and scaled

    def rows_sum_to_zero():
        xi = x.clone().requires_grad_(True)
        (dx,) = torch.autograd.grad((fn(xi, shape, w, b, 1e-5) * dy).sum(), xi)
        return bool((dx.sum(-1).abs() < 1e-9).all())

    def constant_row():
        xi = torch.zeros(1, features, dtype=F64, requires_grad=True)   # padding
        y = fn(xi, shape, w, b, 1e-5)
        (dx,) = torch.autograd.grad((y * dy[:1]).sum(), xi)
        return bool(torch.isfinite(y).all() and torch.isfinite(dx).all())

    results = {}
    for name, check in zip(CHECKS, (parity, gradcheck, invariances, rows_sum_to_zero,
                                    constant_row), strict=True):
        try:
            results[name] = bool(check())
        except (RuntimeError, ValueError):
            results[name] = False
    return results
