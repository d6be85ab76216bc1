r"""The geometry of LayerNorm and RMSNorm, and BatchNorm reduced to one of its two steps.

With :math:`\epsilon \to 0` and no affine map, for a row :math:`x \in \mathbb{R}^H`,

.. math::

    \mathrm{LN}(x) = \sqrt{H}\,\frac{Px}{\lVert Px\rVert},
    \quad P = I - \tfrac{1}{H}\mathbf{1}\mathbf{1}^\top,
    \qquad
    \mathrm{RMSNorm}(x) = \sqrt{H}\,\frac{x}{\lVert x\rVert}:

LayerNorm projects out the all-ones direction, then rescales onto the sphere of radius
:math:`\sqrt H`; RMSNorm only rescales, keeping the component along :math:`\mathbf 1`.
:func:`geometry` measures both facts on rows.

BatchNorm's two steps, taken alone over the batch axis of ``(N, C)``:
:func:`mean_only_batch_norm` (subtract the batch mean, the mean-only BN that Salimans and
Kingma pair with weight normalization) and :func:`scale_only_batch_norm` (divide by the
batch root mean square, no centring). :func:`invariances` says which of them forgets a
rescaling and which a shift of its input.
"""

from __future__ import annotations

import torch

__all__ = ["geometry", "mean_only_batch_norm", "scale_only_batch_norm", "invariances"]


def _check_rows(y: torch.Tensor, name: str) -> None:
    if not isinstance(y, torch.Tensor) or y.dim() < 1 or y.shape[-1] < 2:
        raise ValueError(f"{name} must be a tensor (..., H) with H >= 2, got "
                         f"{tuple(y.shape) if isinstance(y, torch.Tensor) else type(y)}")


def geometry(y: torch.Tensor) -> dict[str, float]:
    """For rows ``y`` ``(..., H)``: the largest ``|<y, 1>| / ||y||`` (cosine with the all-ones
    direction) and the largest ``| ||y|| / sqrt(H) - 1 |`` (distance from the sphere of radius
    sqrt(H), relative)."""
    _check_rows(y, "y")
    h = y.shape[-1]
    norm = y.norm(dim=-1)
    cosine = (y.sum(-1) / (norm * h ** 0.5)).abs().max()
    radius = (norm / h ** 0.5 - 1).abs().max()
    return {"cos_with_ones": float(cosine), "off_sphere": float(radius)}


def _check_batch(x: torch.Tensor) -> None:
    if not isinstance(x, torch.Tensor) or x.dim() != 2 or x.shape[0] < 2:
        raise ValueError("x must be a tensor (N, C) with N >= 2, got "
                         f"{tuple(x.shape) if isinstance(x, torch.Tensor) else type(x)}")


def mean_only_batch_norm(x: torch.Tensor) -> torch.Tensor:
    """``x - mean over the batch``, per feature: ``(N, C) -> (N, C)``; no division."""
    _check_batch(x)
    return x - x.mean(0, keepdim=True)


def scale_only_batch_norm(x: torch.Tensor, eps: float = 0.0) -> torch.Tensor:
    """``x / sqrt(mean over the batch of x^2 + eps)``, per feature: ``(N, C) -> (N, C)``;
    no centring."""
    _check_batch(x)
    return x * torch.rsqrt(x.pow(2).mean(0, keepdim=True) + eps)


def invariances(norm, x: torch.Tensor, scale: float = 3.0, shift: float = 2.0) -> dict:
    """Largest change of ``norm(x)`` when the input is multiplied by ``scale`` and when
    ``shift`` is added to every entry: ``{"scale": ..., "shift": ...}`` (0 = invariant)."""
    _check_batch(x)
    base = norm(x)
    return {"scale": float((norm(scale * x) - base).abs().max()),
            "shift": float((norm(x + shift) - base).abs().max())}
