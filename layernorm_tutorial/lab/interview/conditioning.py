r"""Normalization whose gain and bias come from outside: FiLM, conditional BN, SPADE,
StyleGAN2's weight demodulation.

All of them split a norm into a parameter-free standardization and an affine map whose
:math:`\gamma, \beta` are *predicted* from a condition instead of learned as constants:

* :func:`film`: feature-wise linear modulation (Perez et al., 2018),
  :math:`y_{n,c} = \gamma_{n,c}\,x_{n,c} + \beta_{n,c}`, one (gain, bias) per sample and
  channel, broadcast over the spatial axes.
* :class:`ConditionalBatchNorm2d`: BatchNorm's statistics (batch, running averages as
  usual), then :math:`(\gamma + \Delta\gamma(c))\,\hat x + (\beta + \Delta\beta(c))` with
  :math:`\Delta\gamma, \Delta\beta` from a linear map of the condition, initialized to zero
  so the layer starts as the plain BN it modulates (de Vries et al., 2017).
* :class:`SPADE`: the gain and bias are maps ``(N, C, H, W)`` computed by a small
  convolutional network from a segmentation map, ``normalized * (1 + gamma) + beta``
  (Park et al., 2019; NVlabs/SPADE ``models/networks/normalization.py``).
* :func:`uniform_label_map`, :func:`uniform_label_features`: the case SPADE's paper uses
  to explain why an ordinary conv -> InstanceNorm stack loses the layout: a map filled
  with one label gives a constant conv output, which InstanceNorm turns into zeros
  whatever the label.
* :func:`modulated_conv2d`: StyleGAN2's replacement for AdaIN (Karras et al., 2020,
  eqs. 1-3): scale the conv weight by the style, :math:`w'_{ijk} = s_i w_{ijk}`, then
  *demodulate*, :math:`w''_{ijk} = w'_{ijk}/\sqrt{\sum_{i,k} w'^2_{ijk} + \epsilon}`: the
  output has unit standard deviation in expectation for i.i.d. unit inputs, without
  computing any statistic of the actual activations.
"""

from __future__ import annotations

import torch
from torch import nn

from layernorm_tutorial import functional as LF

__all__ = ["film", "ConditionalBatchNorm2d", "SPADE", "uniform_label_map",
           "uniform_label_features",
           "modulated_weight", "modulated_conv2d"]


def film(x: torch.Tensor, gamma: torch.Tensor, beta: torch.Tensor) -> torch.Tensor:
    """``gamma[n, c] * x[n, c, ...] + beta[n, c]``. ``x`` ``(N, C, *)``, ``gamma`` and
    ``beta`` ``(N, C)``; output shaped like ``x``."""
    if x.dim() < 2 or gamma.shape != x.shape[:2] or beta.shape != x.shape[:2]:
        raise ValueError(f"gamma and beta must be (N, C) = {tuple(x.shape[:2])}, got "
                         f"{tuple(gamma.shape)} and {tuple(beta.shape)}")
    view = gamma.shape + (1,) * (x.dim() - 2)
    return gamma.reshape(view) * x + beta.reshape(view)


class ConditionalBatchNorm2d(nn.Module):
    r"""BatchNorm2d whose gain and bias are shifted per sample by a condition.

    ``forward(x, c)``: ``x`` ``(N, C, H, W)``, ``c`` ``(N, cond_dim)``; output ``(N, C, H,
    W)``. Statistics are BN's (batch statistics in training mode, running averages in
    evaluation mode); then :math:`y = (\gamma + \Delta\gamma)\hat x + (\beta + \Delta\beta)`
    with :math:`(\Delta\gamma, \Delta\beta) = W c + b`, ``W`` and ``b`` zero at
    initialization. ``gamma``/``beta`` are the (pretrained) BN affine parameters.
    """

    def __init__(self, num_features: int, cond_dim: int, eps: float = 1e-5,
                 momentum: float = 0.1):
        super().__init__()
        self.num_features, self.eps, self.momentum = num_features, eps, momentum
        self.gamma = nn.Parameter(torch.ones(num_features))
        self.beta = nn.Parameter(torch.zeros(num_features))
        self.register_buffer("running_mean", torch.zeros(num_features))
        self.register_buffer("running_var", torch.ones(num_features))
        self.delta = nn.Linear(cond_dim, 2 * num_features)
        nn.init.zeros_(self.delta.weight)
        nn.init.zeros_(self.delta.bias)

    def forward(self, x: torch.Tensor, c: torch.Tensor) -> torch.Tensor:
        if x.dim() != 4 or x.shape[1] != self.num_features:
            raise ValueError(f"x must be (N, {self.num_features}, H, W), got {tuple(x.shape)}")
        if c.dim() != 2 or c.shape[0] != x.shape[0]:
            raise ValueError(f"c must be (N, cond_dim) with N = {x.shape[0]}, got "
                             f"{tuple(c.shape)}")
        x_hat = LF.batch_norm(x, self.running_mean, self.running_var, None, None,
                              self.training, self.momentum, self.eps)
        d_gamma, d_beta = self.delta(c).chunk(2, dim=-1)
        return film(x_hat, self.gamma + d_gamma, self.beta + d_beta)


class SPADE(nn.Module):
    """Spatially-adaptive denormalization: a parameter-free norm, then a per-pixel gain
    and bias predicted from a segmentation map.

    ``forward(x, segmap)``: ``x`` ``(N, C, H, W)``, ``segmap`` ``(N, labels, H, W)``
    (one-hot, already at ``x``'s resolution); output ``(N, C, H, W)``:
    ``norm(x) * (1 + gamma(segmap)) + beta(segmap)`` with ``gamma``, ``beta`` from a shared
    ``kernel x kernel`` conv with ReLU into ``hidden`` channels, then one conv each.
    ``norm``: ``"instance"`` or ``"batch"`` (training-mode batch statistics).
    """

    def __init__(self, channels: int, labels: int, hidden: int = 16, kernel: int = 3,
                 norm: str = "instance", eps: float = 1e-5):
        super().__init__()
        if norm not in ("instance", "batch"):
            raise ValueError(f"norm must be 'instance' or 'batch', got {norm!r}")
        self.norm, self.eps = norm, eps
        pad = kernel // 2
        self.shared = nn.Sequential(nn.Conv2d(labels, hidden, kernel, padding=pad), nn.ReLU())
        self.to_gamma = nn.Conv2d(hidden, channels, kernel, padding=pad)
        self.to_beta = nn.Conv2d(hidden, channels, kernel, padding=pad)

    def modulation(self, segmap: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """``(gamma, beta)``, each ``(N, C, H, W)``: one value per pixel and channel."""
        h = self.shared(segmap)
        return self.to_gamma(h), self.to_beta(h)

    def forward(self, x: torch.Tensor, segmap: torch.Tensor) -> torch.Tensor:
        if x.dim() != 4 or segmap.dim() != 4 or segmap.shape[-2:] != x.shape[-2:]:
            raise ValueError(f"x and segmap must be (N, C, H, W) with the same H, W, got "
                             f"{tuple(x.shape)} and {tuple(segmap.shape)}")
        if self.norm == "instance":
            normalized = LF.instance_norm(x, eps=self.eps)
        else:
            normalized = LF.batch_norm(x, None, None, training=True, eps=self.eps)
        gamma, beta = self.modulation(segmap)
        return normalized * (1 + gamma) + beta


def uniform_label_map(label: int, labels: int, size: int = 8,
                      dtype=torch.float64) -> torch.Tensor:
    """A one-hot segmentation map ``(1, labels, size, size)`` filled with ``label``."""
    if not 0 <= label < labels:
        raise ValueError(f"label must be in [0, {labels}), got {label}")
    seg = torch.zeros(1, labels, size, size, dtype=dtype)
    seg[:, label] = 1.0
    return seg


def uniform_label_features(conv: nn.Conv2d, seg: torch.Tensor,
                           eps: float = 1e-5) -> tuple[torch.Tensor, torch.Tensor]:
    """``(conv(seg), InstanceNorm(conv(seg)))``. For a map of one label and a ``conv``
    whose output is constant on it (``padding_mode="replicate"``, or no padding), the
    features are constant per channel and their InstanceNorm is exactly zero."""
    features = conv(seg)
    return features, LF.instance_norm(features, eps=eps)


def modulated_weight(weight: torch.Tensor, style: torch.Tensor, demodulate: bool = True,
                     eps: float = 1e-8) -> torch.Tensor:
    r"""Per-sample conv weights ``(N, O, I, k, k)`` from ``weight`` ``(O, I, k, k)`` and
    ``style`` ``(N, I)``: :math:`w' = s_i w_{oik}`, then, if ``demodulate``,
    :math:`w'' = w' / \sqrt{\sum_{i,k} w'^2 + \epsilon}` per sample and output channel."""
    if weight.dim() != 4 or style.dim() != 2 or style.shape[1] != weight.shape[1]:
        raise ValueError(f"weight must be (O, I, k, k) and style (N, I), got "
                         f"{tuple(weight.shape)} and {tuple(style.shape)}")
    w = weight.unsqueeze(0) * style[:, None, :, None, None]
    if demodulate:
        w = w * torch.rsqrt(w.pow(2).sum(dim=(2, 3, 4), keepdim=True) + eps)
    return w


def modulated_conv2d(x: torch.Tensor, weight: torch.Tensor, style: torch.Tensor,
                     demodulate: bool = True, eps: float = 1e-8) -> torch.Tensor:
    """Convolve each sample of ``x`` ``(N, I, H, W)`` with its own modulated (and
    demodulated) weight (:func:`modulated_weight`), ``padding = k // 2``, as one grouped
    convolution. Output ``(N, O, H, W)``."""
    n, i, h, w_ = x.shape
    w = modulated_weight(weight, style, demodulate, eps)
    out = torch.nn.functional.conv2d(x.reshape(1, n * i, h, w_),
                                     w.reshape(-1, i, *weight.shape[2:]),
                                     padding=weight.shape[-1] // 2, groups=n)
    return out.reshape(n, weight.shape[0], h, w_)
