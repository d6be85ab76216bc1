r"""GroupNorm's group count, and Weight Standardization (the partner of GroupNorm).

GroupNorm with ``G`` groups on ``(N, C, H, W)`` computes one mean and variance per sample
and group, over :math:`n = (C/G)\,H\,W` values; ``G = 1`` is LayerNorm over ``(C, H, W)``
and ``G = C`` is InstanceNorm. Two consequences of the choice of ``G``:

``elements_per_statistic(C, G, H, W)``   the :math:`n` of each statistic
``variance_noise(n)``                    :math:`\sqrt{2/(n-1)}`, the relative standard
                                         deviation of a variance estimated from :math:`n`
                                         Gaussian values: small groups on small maps are noisy
``channel_scale_change(x, G, c, s)``     how much the output changes when channel ``c`` is
                                         scaled by ``s``: GN keeps the *relative* scale of the
                                         channels within a group, InstanceNorm erases it
``contiguous_group_norm(x, G)``          GN built as a LayerNorm over each block of ``C/G``
                                         *consecutive* channels (how torch forms its groups)
``channel_permutation_change(x, G, p)``  how far GN is from commuting with a reordering ``p``
                                         of the channels: zero only if ``p`` keeps the groups

Weight Standardization (Qiao et al., 2019) standardizes each convolution filter, over its
input channels and kernel positions, before the convolution. As the authors' README writes
it (``torch.std_mean``, the unbiased standard deviation, :math:`\epsilon` added to it):

.. math:: \hat W_{o} = \frac{W_{o} - \mathrm{mean}(W_{o})}{\mathrm{std}(W_{o}) + \epsilon}

``weight_standardize(w)`` and ``ws_conv2d(x, w, ...)`` implement it.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from layernorm_tutorial import functional as LF

__all__ = ["elements_per_statistic", "variance_noise", "channel_scale_change",
           "contiguous_group_norm", "channel_permutation_change", "weight_standardize",
           "ws_conv2d"]


def elements_per_statistic(channels: int, groups: int, height: int, width: int) -> int:
    """Number of values behind each GroupNorm mean and variance: ``(C / G) * H * W``."""
    if groups < 1 or channels % groups:
        raise ValueError(f"groups must divide channels={channels}, got {groups}")
    return channels // groups * height * width


def variance_noise(n: int) -> float:
    r"""Relative standard deviation of the unbiased variance of ``n`` i.i.d. Gaussian
    values: :math:`\mathrm{sd}(s^2)/\sigma^2 = \sqrt{2/(n-1)}`."""
    if n < 2:
        raise ValueError(f"n must be >= 2, got {n}")
    return (2.0 / (n - 1)) ** 0.5


def channel_scale_change(x: torch.Tensor, groups: int, channel: int, factor: float,
                         eps: float = 0.0) -> float:
    """Max absolute change of the package's ``group_norm(x, groups)`` (no affine) when
    channel ``channel`` of ``x`` ``(N, C, *)`` is multiplied by ``factor > 0``: zero for
    ``groups = C`` (InstanceNorm divides each channel by its own scale), nonzero when the
    channel shares its group's statistics with other channels. ``eps`` defaults to 0 so
    that the invariance is exact (a positive eps breaks it at the level of eps / variance)."""
    if factor <= 0:
        raise ValueError(f"factor must be > 0, got {factor}")
    scaled = x.clone()
    scaled[:, channel] *= factor
    before, after = LF.group_norm(x, groups, eps=eps), LF.group_norm(scaled, groups, eps=eps)
    return (after - before).abs().max().item()


def contiguous_group_norm(x: torch.Tensor, groups: int, eps: float = 1e-5) -> torch.Tensor:
    r"""GroupNorm (no affine) of ``x`` ``(N, C, *)`` written as ``G`` separate LayerNorms,
    group ``g`` being the consecutive channels ``g C/G, ..., (g+1) C/G - 1``: each is
    normalized over its ``(C/G, *)`` values with the package's
    :func:`~layernorm_tutorial.functional.layer_norm`. It equals torch's ``group_norm``,
    which views ``x`` as ``(N, G, C/G * prod(*))``: its groups are blocks of neighbouring
    channels, not channels ``g, g + G, g + 2G, ...``."""
    if groups < 1 or x.shape[1] % groups:
        raise ValueError(f"groups must divide the {x.shape[1]} channels, got {groups}")
    blocks = x.split(x.shape[1] // groups, dim=1)
    return torch.cat([LF.layer_norm(b, tuple(b.shape[1:]), eps=eps) for b in blocks], dim=1)


def channel_permutation_change(x: torch.Tensor, groups: int, perm: torch.Tensor,
                               eps: float = 1e-5) -> float:
    """Max absolute difference between ``group_norm(x[:, perm])`` and
    ``group_norm(x)[:, perm]`` (package, no affine): 0 when the reordering ``perm`` of the
    ``C`` channels moves whole groups or stays inside them, nonzero when it mixes channels
    of different groups (a concatenation in another order, a channel shuffle)."""
    c = x.shape[1]
    if sorted(perm.tolist()) != list(range(c)):
        raise ValueError(f"perm must be a permutation of range({c}), got {perm.tolist()}")
    moved = LF.group_norm(x[:, perm], groups, eps=eps)
    return (moved - LF.group_norm(x, groups, eps=eps)[:, perm]).abs().max().item()


def weight_standardize(w: torch.Tensor, eps: float = 1e-5) -> torch.Tensor:
    r"""Each output filter ``w[o]`` standardized over all its other dims (input channels
    and kernel positions): ``(w - mean) / (std + eps)``, unbiased std, as in the authors'
    README. ``w`` ``(out, in, *kernel)``; returns the same shape, differentiable."""
    if w.dim() < 2:
        raise ValueError(f"w must have an output dim and at least one more, got shape "
                         f"{tuple(w.shape)}")
    dims = tuple(range(1, w.dim()))
    std, mean = torch.std_mean(w, dim=dims, keepdim=True)
    return (w - mean) / (std + eps)


def ws_conv2d(x: torch.Tensor, w: torch.Tensor, bias=None, eps: float = 1e-5,
              **conv_kwargs) -> torch.Tensor:
    """``conv2d(x, weight_standardize(w), bias, **conv_kwargs)``: ``x`` ``(N, in, H, W)``,
    ``w`` ``(out, in, kh, kw)``."""
    return F.conv2d(x, weight_standardize(w, eps), bias, **conv_kwargs)
