"""Synchronized batch norm: batch statistics summed over all ranks with ``all_reduce``.

In data-parallel training every process (rank) holds a copy of the model and a shard of the
batch. Batch norm computed per rank uses only the shard's statistics; *synchronized* batch
norm sums the per-channel statistics over all ranks so every rank normalizes with the
statistics of the full batch. Forward sends (C + 1) + C numbers, backward 2C numbers, in
three collectives. Without an initialized process group it is ordinary batch norm (as
torch's ``SyncBatchNorm``). Layer norm needs nothing from other ranks.
"""

from __future__ import annotations

import torch
from torch import nn

from .._validation import (
    as_eps,
    as_int,
    check_batch_norm_eps,
    compute_dtype,
    verify_values_per_channel,
)
from ..running_stats import update_running_stats
from .communication import all_reduce_sum, world_size

__all__ = ["SyncBatchNorm", "SyncBatchNormFunction", "sync_batch_norm"]


def _channel_view(t: torch.Tensor, ndim: int) -> torch.Tensor:
    """Reshape a (C,) tensor to broadcast over (N, C, *spatial)."""
    return t.reshape(1, -1, *([1] * (ndim - 2)))


class SyncBatchNormFunction(torch.autograd.Function):
    """Batch norm over the union of all ranks' batches, with a hand-derived backward.

    Forward, x of shape (N_r, C, *spatial) on rank r, M = total count per channel:
        all_reduce [sum_r x, N_r * prod(spatial)]  ->  mean = S / M
        all_reduce [sum_r (x - mean)^2]            ->  var = Q / M   (biased, two-pass)
        xhat = (x - mean) / sqrt(var + eps);  y = weight * xhat + bias
    Backward, g = dy * weight:
        all_reduce [sum g, sum g * xhat]
        dx = (g - sum(g) / M - xhat * sum(g xhat) / M) / sqrt(var + eps)
    dweight = sum(dy * xhat) and dbias = sum(dy) stay local: data-parallel training averages
    them with the other parameter gradients. Returns (y, mean, var, count) with the last
    three non-differentiable (for the running statistics; count is M, summed over ranks).

    fp16/bf16 inputs are accumulated in fp32 (sums, the all-reduced buffers, xhat and the
    gradient sums): a half-precision sum of squares overflows (65504) after a few thousand
    rows of std 4. ``y`` and ``dx`` come back in the input's dtype, the parameter gradients
    in the parameters' dtypes, ``mean``, ``var`` and ``count`` in the accumulation dtype.
    Raises torch's ValueError when M = 1 (one value per channel across all ranks): every
    rank sees the same M after the first all-reduce, so all of them raise together.
    """

    @staticmethod
    def forward(ctx, x, weight, bias, eps, group):
        dims = tuple(d for d in range(x.dim()) if d != 1)
        acc = compute_dtype(x.dtype)
        xa = x.to(acc)
        local_count = x.numel() // x.shape[1]
        first = torch.cat([xa.sum(dim=dims), xa.new_tensor([float(local_count)])])
        all_reduce_sum(first, "sync_bn forward: sum and count", group)
        total = first[-1]
        verify_values_per_channel(int(total.item()), x.shape, world_size(group))
        mean = first[:-1] / total
        centered = xa - _channel_view(mean, x.dim())
        second = (centered * centered).sum(dim=dims)
        all_reduce_sum(second, "sync_bn forward: sum of squares", group)
        var = second / total
        invstd = torch.rsqrt(var + eps)
        xhat = centered * _channel_view(invstd, x.dim())
        y = _affine(xhat, weight, bias)
        ctx.save_for_backward(xhat, invstd, weight, total)
        ctx.group = group
        ctx.input_dtype = x.dtype
        ctx.bias_dtype = None if bias is None else bias.dtype
        ctx.mark_non_differentiable(mean, var, total)
        return y.to(x.dtype), mean, var, total

    @staticmethod
    def backward(ctx, dy, _dmean, _dvar, _dcount):
        xhat, invstd, weight, total = ctx.saved_tensors
        dims = tuple(d for d in range(dy.dim()) if d != 1)
        dy = dy.to(xhat.dtype)
        g = dy if weight is None else dy * _channel_view(weight.to(xhat.dtype), dy.dim())
        sums = torch.cat([g.sum(dim=dims), (g * xhat).sum(dim=dims)])
        all_reduce_sum(sums, "sync_bn backward: gradient sums", ctx.group)
        c = dy.shape[1]
        mean_g = _channel_view(sums[:c] / total, dy.dim())
        mean_gx = _channel_view(sums[c:] / total, dy.dim())
        dx = (g - mean_g - xhat * mean_gx) * _channel_view(invstd, dy.dim())
        dweight = None if weight is None else (dy * xhat).sum(dim=dims).to(weight.dtype)
        dbias = None if ctx.bias_dtype is None else dy.sum(dim=dims).to(ctx.bias_dtype)
        return dx.to(ctx.input_dtype), dweight, dbias, None, None


def _affine(xhat: torch.Tensor, weight, bias) -> torch.Tensor:
    """weight * xhat + bias per channel, in xhat's dtype (either parameter may be None)."""
    y = xhat
    if weight is not None:
        y = y * _channel_view(weight.to(xhat.dtype), xhat.dim())
    if bias is not None:
        y = y + _channel_view(bias.to(xhat.dtype), xhat.dim())
    return y


def sync_batch_norm(x, running_mean, running_var, weight=None, bias=None, training=True,
                    momentum=0.1, eps=1e-5, group=None, num_batches_tracked=None):
    """Functional synchronized batch norm for x of shape (N, C, *spatial).

    Training: normalize with the statistics of all ranks' batches together and, if buffers are
    given, update them in place by the book's running-statistics equation
    (:func:`~layernorm_tutorial.running_stats.update_running_stats`, with the unbiased
    variance var * M / (M - 1) of the global count M; ``momentum=None`` is the cumulative
    average and needs ``num_batches_tracked``, counting this batch). Evaluation: use the
    running statistics (no communication). ``eps`` must be positive in training and
    non-negative in evaluation, as in torch (ValueError otherwise); training needs more than
    one value per channel across all ranks (torch's ValueError otherwise).

    fp16/bf16 inputs are computed in fp32 and the output has the input's dtype, as torch's
    batch norm; the running statistics keep their own dtype.
    """
    if not isinstance(x, torch.Tensor) or x.dim() < 2:
        raise ValueError(f"x must be a tensor of shape (N, C, ...), got "
                         f"{getattr(x, 'shape', type(x).__name__)}")
    check_batch_norm_eps(eps, training)
    eps = as_eps(eps)
    if not training:
        if running_mean is None or running_var is None:
            raise ValueError("evaluation mode needs running_mean and running_var")
        acc = compute_dtype(x.dtype)
        invstd = torch.rsqrt(running_var.to(acc) + eps)
        xhat = (x.to(acc) - _channel_view(running_mean.to(acc), x.dim())) \
            * _channel_view(invstd, x.dim())
        return _affine(xhat, weight, bias).to(x.dtype)
    y, mean, var, count = SyncBatchNormFunction.apply(x, weight, bias, eps, group)
    # count: all ranks' values per channel together (shards may differ in size)
    update_running_stats(running_mean, running_var, mean, var, int(count), momentum,
                         num_batches_tracked)
    return y


class SyncBatchNorm(nn.Module):
    """Module with torch's BatchNorm buffers and state_dict keys, synchronized over ranks.

    ``momentum=None`` uses the cumulative average (factor 1 / num_batches_tracked), as torch.
    """

    def __init__(self, num_features: int, eps: float = 1e-5, momentum: float | None = 0.1,
                 affine: bool = True, track_running_stats: bool = True, process_group=None):
        super().__init__()
        num_features = as_int(num_features, "num_features", minimum=0)
        self.num_features, self.eps, self.momentum = num_features, eps, momentum
        self.affine, self.track_running_stats = affine, track_running_stats
        self.process_group = process_group
        if affine:
            self.weight = nn.Parameter(torch.ones(num_features))
            self.bias = nn.Parameter(torch.zeros(num_features))
        else:
            self.register_parameter("weight", None)
            self.register_parameter("bias", None)
        if track_running_stats:
            self.register_buffer("running_mean", torch.zeros(num_features))
            self.register_buffer("running_var", torch.ones(num_features))
            self.register_buffer("num_batches_tracked", torch.tensor(0, dtype=torch.long))
        else:
            self.running_mean = self.running_var = self.num_batches_tracked = None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.dim() < 2 or x.shape[1] != self.num_features:
            raise ValueError(f"expected input of shape (N, {self.num_features}, ...), "
                             f"got {tuple(x.shape)}")
        if not self.training and self.track_running_stats:
            return sync_batch_norm(x, self.running_mean, self.running_var, self.weight,
                                   self.bias, False, 0.0, self.eps, self.process_group)
        if self.training and self.track_running_stats:
            self.num_batches_tracked.add_(1)  # counts this batch, then the update
            return sync_batch_norm(x, self.running_mean, self.running_var, self.weight,
                                   self.bias, True, self.momentum, self.eps,
                                   self.process_group, self.num_batches_tracked)
        # no running statistics (or training without tracking them): batch statistics only
        return sync_batch_norm(x, None, None, self.weight, self.bias, True, 0.0, self.eps,
                               self.process_group)
