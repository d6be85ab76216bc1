r"""Three normalizations interviewers ask about by name, from elementary ops.

``local_response_norm(a, n, k, alpha, beta)``
    AlexNet's Local Response Normalization (Krizhevsky et al., 2012, sec. 3.3): each
    activation is divided by a power of the summed squares of its ``n`` neighbouring channels
    at the same position,

    .. math::

        b^i_{x,y} = a^i_{x,y}\Big/\Big(k + \alpha\sum_{j=\max(0,\,i-\lfloor n/2\rfloor)}
        ^{\min(C-1,\,i+\lfloor (n-1)/2\rfloor)} (a^j_{x,y})^2\Big)^{\beta}.

    ``torch.nn.functional.local_response_norm`` *averages* the squares (it multiplies by
    :math:`\alpha/n`), so AlexNet's ``alpha`` is torch's ``alpha / n``.
``partial_rms_norm(x, p)``
    pRMSNorm (Zhang and Sennrich, 2019): RMSNorm whose root mean square is estimated from the
    first :math:`k = \lceil pH\rceil` of the :math:`H` features,
    :math:`\overline{\mathrm{RMS}}(x) = \sqrt{\tfrac1k\sum_{i\le k} x_i^2 + \epsilon}`,
    :math:`y = \gamma\odot x/\overline{\mathrm{RMS}}(x)`. ``partial_rms_error`` measures how
    far that estimate lies from the full RMS.
``adain(content, style)``
    Adaptive instance normalization (Huang and Belongie, 2017):
    :math:`\mathrm{AdaIN}(x, y) = \sigma(y)\,\frac{x-\mu(x)}{\sigma(x)} + \mu(y)`, statistics
    per sample and channel over the spatial axes: instance norm with the gain and bias taken
    from the style features. ``adain_blend`` is their content-style trade-off at test time,
    :math:`(1-\alpha) f(c) + \alpha\,\mathrm{AdaIN}(f(c), f(s))` on encoder features.
``style_adain(x, y_s, y_b)``
    StyleGAN's AdaIN (Karras et al., 2019, sec. 2): the style is a vector
    :math:`y = (y_s, y_b)` made from the latent :math:`w` by a learned affine map, and
    :math:`\mathrm{AdaIN}(x_i, y) = y_{s,i}\,\frac{x_i-\mu(x_i)}{\sigma(x_i)} + y_{b,i}`
    per feature map :math:`x_i`.
"""

from __future__ import annotations

import math

import torch

from layernorm_tutorial import functional as LF

__all__ = ["local_response_norm", "partial_rms_norm", "partial_rms_error",
           "predicted_partial_rms_error", "adain", "adain_blend", "style_adain",
           "channel_mean_std"]

F64 = torch.float64


def local_response_norm(a: torch.Tensor, n: int = 5, k: float = 2.0, alpha: float = 1e-4,
                        beta: float = 0.75) -> torch.Tensor:
    """AlexNet's LRN over the channels of ``a`` (shape ``(N, C, *)``); defaults are the
    paper's constants (n=5, k=2, alpha=1e-4, beta=0.75). Returns a tensor shaped like ``a``."""
    if a.dim() < 3:
        raise ValueError(f"a must have shape (N, C, ...) with at least 3 dims, got "
                         f"{tuple(a.shape)}")
    if not isinstance(n, int) or n < 1:
        raise ValueError(f"n must be a positive int, got {n!r}")
    squares = a * a                                              # (N, C, *)
    before, after = n // 2, (n - 1) // 2
    pad = torch.zeros_like(squares[:, :1]).expand(-1, before + after, *a.shape[2:])
    padded = torch.cat([pad[:, :before], squares, pad[:, before:]], dim=1)
    cumulative = torch.cumsum(padded, dim=1)                     # window sums by differences
    zero = torch.zeros_like(cumulative[:, :1])
    cumulative = torch.cat([zero, cumulative], dim=1)
    channels = a.shape[1]
    window = cumulative[:, n:n + channels] - cumulative[:, :channels]   # (N, C, *)
    return a / (k + alpha * window) ** beta


def partial_rms_norm(x: torch.Tensor, p: float, weight: torch.Tensor | None = None,
                     eps: float = 1e-8) -> torch.Tensor:
    """pRMSNorm over the last axis of ``x`` (shape ``(..., H)``), RMS from the first
    ``ceil(p * H)`` features; ``p`` in (0, 1], ``weight`` of shape ``(H,)`` or None."""
    if not 0 < p <= 1:
        raise ValueError(f"p must be in (0, 1], got {p}")
    k = math.ceil(p * x.shape[-1])
    rms = torch.sqrt(x[..., :k].pow(2).mean(-1, keepdim=True) + eps)   # (..., 1)
    y = x / rms
    return y if weight is None else y * weight


def predicted_partial_rms_error(k: int, hidden: int) -> float:
    r"""Mean relative error :math:`E|\widehat{\mathrm{RMS}}/\mathrm{RMS}-1|` for i.i.d.
    zero-mean normal features when the RMS of ``hidden`` features is estimated from the first
    ``k``, to first order in :math:`1/k`: the ratio's relative standard deviation is
    :math:`\sqrt{(1-k/H)/(2k)}` (the estimate shares its ``k`` features with the full RMS),
    and the mean absolute value of a normal is :math:`\sqrt{2/\pi}` times its standard
    deviation, giving :math:`\sqrt{(1-k/H)/(\pi k)}`."""
    if not 1 <= k <= hidden:
        raise ValueError(f"k must be in [1, hidden={hidden}], got {k}")
    return math.sqrt((1 - k / hidden) / (math.pi * k))


def partial_rms_error(ps=(0.0625, 0.125, 0.25, 0.5, 1.0), *, hidden: int = 1024,
                      rows: int = 2000, outlier: float | None = None,
                      seed: int = 0) -> dict[float, float]:
    """``{p: mean |RMS_p / RMS - 1|}`` over ``rows`` standard-normal rows of ``hidden``
    features; with ``outlier``, the last feature of every row is set to that value (a
    massive activation that the first ``p H`` features never see when ``p < 1``)."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(rows, hidden, generator=g, dtype=F64)
    if outlier is not None:
        x[:, -1] = outlier
    full = x.pow(2).mean(-1).sqrt()
    errors = {}
    for p in ps:
        k = math.ceil(p * hidden)
        estimate = x[:, :k].pow(2).mean(-1).sqrt()
        errors[p] = (estimate / full - 1).abs().mean().item()
    return errors


def channel_mean_std(x: torch.Tensor, eps: float = 1e-5) -> tuple[torch.Tensor, torch.Tensor]:
    """Per (sample, channel) mean and ``sqrt(var + eps)`` over the spatial axes of an
    ``(N, C, *)`` tensor, each shaped ``(N, C, 1, ...)``."""
    dims = tuple(range(2, x.dim()))
    mean = x.mean(dims, keepdim=True)
    return mean, torch.sqrt(x.var(dims, keepdim=True, correction=0) + eps)


def adain(content: torch.Tensor, style: torch.Tensor, eps: float = 1e-5) -> torch.Tensor:
    """AdaIN: ``content`` instance-normalized, then scaled by the style's per-channel std
    and shifted by its mean. ``content`` ``(N, C, *)``, ``style`` ``(N, C, *)`` (spatial
    sizes may differ)."""
    if content.shape[:2] != style.shape[:2]:
        raise ValueError(f"content and style must share (N, C), got {tuple(content.shape)} "
                         f"and {tuple(style.shape)}")
    mean_s, std_s = channel_mean_std(style, eps)
    return LF.instance_norm(content, eps=eps) * std_s + mean_s


def adain_blend(content: torch.Tensor, style: torch.Tensor, alpha: float,
                eps: float = 1e-5) -> torch.Tensor:
    """Huang and Belongie's content-style trade-off on encoder features: ``(1 - alpha) *
    content + alpha * adain(content, style)``, ``alpha`` in [0, 1] (0: the content features
    unchanged, 1: full stylization)."""
    if not 0 <= alpha <= 1:
        raise ValueError(f"alpha must be in [0, 1], got {alpha}")
    return (1 - alpha) * content + alpha * adain(content, style, eps)


def style_adain(x: torch.Tensor, y_s: torch.Tensor, y_b: torch.Tensor,
                eps: float = 1e-8) -> torch.Tensor:
    """StyleGAN's AdaIN: each feature map of ``x`` ``(N, C, *)`` instance-normalized, then
    scaled by ``y_s`` and shifted by ``y_b`` (both ``(N, C)``, one style per sample)."""
    if y_s.shape != x.shape[:2] or y_b.shape != x.shape[:2]:
        raise ValueError(f"y_s and y_b must have shape {tuple(x.shape[:2])}, got "
                         f"{tuple(y_s.shape)} and {tuple(y_b.shape)}")
    shape = tuple(x.shape[:2]) + (1,) * (x.dim() - 2)
    return LF.instance_norm(x, eps=eps) * y_s.reshape(shape) + y_b.reshape(shape)
