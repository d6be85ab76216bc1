r"""EDM2's magnitude-preserving layers: what keeps a diffusion U-Net's activations in check
once its GroupNorms are gone (Karras et al., 2024, "Analyzing and Improving the Training
Dynamics of Diffusion Models", sec. 2.2-2.5; code: ``training/networks_edm2.py`` in
NVlabs/edm2). Re-implemented from the paper's equations.

``mp_weight(w)``
    Weight normalization without a learned scale, scaled for unit output variance: each
    output unit's weight vector :math:`w_i` (a row of ``w`` ``(out, *fan_in)``) becomes
    :math:`w_i / \lVert w_i\rVert`, a unit vector. For inputs that are
    uncorrelated with unit variance, every output then has unit variance, whatever the
    stored weights' size: the weights' magnitude no longer reaches the activations.
``force_normalize_(w)``
    Forced weight normalization: rescale each stored :math:`w_i` to norm :math:`\sqrt n`
    before a training step. With :math:`\hat w = w/\lVert w\rVert` used in the forward,
    the gradient is orthogonal to :math:`w`, so an optimizer step lengthens :math:`w` and
    shrinks the effective learning rate; forcing the norm back keeps it fixed.
``mp_silu(x)``, ``SILU_GAIN``
    :math:`\mathrm{silu}(x) / 0.596`, where :math:`0.596 \approx
    E_{x\sim N(0,1)}[\mathrm{silu}(x)^2]^{1/2}` (:func:`silu_gain` computes it).
``mp_sum(a, b, t)``
    :math:`((1-t)a + t b) / \sqrt{(1-t)^2 + t^2}`: unit variance for uncorrelated
    unit-variance branches; ``t = 0.3`` in the encoder and decoder blocks.
``pixel_norm(x, eps)``
    Each pixel's channel vector divided by its RMS (EDM2's ``normalize(x, dim=1)``):
    RMSNorm over channels, without a gain, with :math:`\epsilon` added to the RMS.
``residual_stack(x, depth, design, weight_scale, seed)``
    A main path of ``depth`` residual blocks on ``(tokens, C)`` features, ADM-style (a
    GroupNorm, SiLU and linear layer twice in the residual branch, added to the main
    path) or magnitude-preserving (MP layers, ``mp_sum``); ``weight_scale`` multiplies
    every weight, as training that grows the weights would. Returns the main path's RMS
    after each block.
"""

from __future__ import annotations

import numpy as np
import torch

from layernorm_tutorial import functional as LF

__all__ = ["SILU_GAIN", "silu_gain", "mp_weight", "force_normalize_", "mp_silu", "mp_sum",
           "pixel_norm", "residual_stack"]

SILU_GAIN = 0.596   # the paper's constant


def silu_gain(points: int = 80) -> float:
    r""":math:`E[\mathrm{silu}(x)^2]^{1/2}` for :math:`x \sim N(0, 1)`, by Gauss-Hermite
    quadrature with ``points`` nodes."""
    nodes, weights = np.polynomial.hermite_e.hermegauss(points)
    silu = nodes / (1 + np.exp(-nodes))
    return float(np.sqrt((weights * silu**2).sum() / weights.sum()))


def mp_weight(w: torch.Tensor) -> torch.Tensor:
    """``w`` ``(out, *fan_in)`` with every output unit's vector scaled to norm 1 (EDM2:
    normalized to norm ``sqrt(fan_in)``, then times ``1 / sqrt(fan_in)``)."""
    if w.dim() < 2:
        raise ValueError(f"w must be (out, *fan_in), got shape {tuple(w.shape)}")
    flat = w.flatten(1)
    norm = flat.norm(dim=1, keepdim=True)
    return (flat / norm).reshape(w.shape)


@torch.no_grad()
def force_normalize_(w: torch.Tensor) -> torch.Tensor:
    """In place: each output unit's stored vector rescaled to norm ``sqrt(fan_in)``
    (unit variance per element); returns ``w``."""
    flat = w.view(w.shape[0], -1)
    flat.mul_(flat.shape[1] ** 0.5 / flat.norm(dim=1, keepdim=True))
    return w


def mp_silu(x: torch.Tensor) -> torch.Tensor:
    """SiLU divided by ``SILU_GAIN``: unit second moment for standard normal inputs."""
    return torch.nn.functional.silu(x) / SILU_GAIN


def mp_sum(a: torch.Tensor, b: torch.Tensor, t: float = 0.3) -> torch.Tensor:
    """Weighted sum ``(1 - t) a + t b`` divided by its standard deviation for
    uncorrelated unit-variance ``a``, ``b``."""
    if not 0 <= t <= 1:
        raise ValueError(f"t must be in [0, 1], got {t}")
    return torch.lerp(a, b, t) / ((1 - t) ** 2 + t**2) ** 0.5


def pixel_norm(x: torch.Tensor, eps: float = 1e-4) -> torch.Tensor:
    """``x`` ``(N, C, *spatial)`` divided, at every pixel, by ``eps`` plus the RMS of its
    ``C`` channels."""
    if x.dim() < 2:
        raise ValueError(f"x must be (N, C, ...), got shape {tuple(x.shape)}")
    rms = x.pow(2).mean(dim=1, keepdim=True).sqrt()
    return x / (eps + rms)


def residual_stack(x: torch.Tensor, depth: int, design: str, weight_scale: float = 1.0,
                   seed: int = 0, groups: int = 8) -> list[float]:
    """RMS of the main path after each of ``depth`` residual blocks on ``x`` ``(tokens,
    C)``. ``design="adm"``: ``x + W2 silu(GN(W1 silu(GN(x))))`` with He-initialized
    weights times ``weight_scale``; ``design="mp"``: ``mp_sum(x, W2' mp_silu(W1'
    mp_silu(x)), 0.3)`` with ``W' = mp_weight(weight_scale * W)``."""
    if design not in ("adm", "mp"):
        raise ValueError(f"design must be 'adm' or 'mp', got {design!r}")
    if depth < 1:
        raise ValueError(f"depth must be >= 1, got {depth}")
    g = torch.Generator().manual_seed(seed)
    channels = x.shape[1]
    out = []
    for _ in range(depth):
        w1, w2 = (torch.randn(channels, channels, generator=g, dtype=x.dtype)
                  * (2 / channels) ** 0.5 * weight_scale for _ in range(2))
        if design == "adm":
            h = torch.nn.functional.silu(LF.group_norm(x, groups)) @ w1.T
            x = x + torch.nn.functional.silu(LF.group_norm(h, groups)) @ w2.T
        else:
            h = mp_silu(mp_silu(x) @ mp_weight(w1).T) @ mp_weight(w2).T
            x = mp_sum(x, h, 0.3)
        out.append(float(x.pow(2).mean().sqrt()))
    return out
