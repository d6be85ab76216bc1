r"""Outlier features and massive activations next to a norm: the mechanisms, on made-up rows.

Trained LLMs carry a few activations far larger than the rest (Dettmers et al. 2022, Sun et
al. 2024); nothing here trains a model, so these functions only show what a norm does with
such a value and what an outlier gain does to 8-bit quantization:

* :func:`row_with_massive_activation`: a token whose feature ``index`` is ``magnitude``
  times the typical size. After LayerNorm or RMSNorm the large feature takes almost all of
  the row's unit variance (:math:`\hat x_j \approx \sqrt{H-1}` for LN) and the other
  features all come out near :math:`-1/\sqrt{H-1}`, their differences shrunk by about
  ``magnitude / sqrt(H)``: the normalized token is nearly the same vector whatever its
  other features were.
* :func:`fake_quantize_int8`: symmetric int8 round trip with one scale per tensor, per row
  (token) or per column (channel), ``scale = max|x| / 127``. One channel scaled up by an
  outlier gain :math:`\gamma_j` sets the per-tensor and per-token scales, and every other
  channel loses resolution; per-channel scales, or folding :math:`\gamma` into the next
  layer, do not have that problem.
"""

from __future__ import annotations

import torch

__all__ = ["row_with_massive_activation", "fake_quantize_int8"]


def row_with_massive_activation(features: int = 64, magnitude: float = 1000.0, index: int = 0,
                                tokens: int = 1, seed: int = 0) -> torch.Tensor:
    """``tokens`` rows of ``features`` values ``N(0, 1)`` in float64, with feature ``index``
    set to ``magnitude`` in every row. Shape ``(tokens, features)``."""
    if not 0 <= index < features:
        raise ValueError(f"index must be in [0, {features}), got {index}")
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(tokens, features, generator=g, dtype=torch.float64)
    x[:, index] = magnitude
    return x


def fake_quantize_int8(x: torch.Tensor, per: str = "tensor") -> torch.Tensor:
    """Quantize ``x`` ``(rows, cols)`` to symmetric int8 and back (same shape and dtype).

    ``per``: ``"tensor"`` (one scale), ``"token"`` (one per row) or ``"channel"`` (one per
    column); ``scale = max|x| / 127`` over that group, values rounded to the nearest step.
    """
    if x.dim() != 2:
        raise ValueError(f"x must be (rows, cols), got shape {tuple(x.shape)}")
    dims = {"tensor": (0, 1), "token": (1,), "channel": (0,)}
    if per not in dims:
        raise ValueError(f"per must be 'tensor', 'token' or 'channel', got {per!r}")
    scale = x.abs().amax(dim=dims[per], keepdim=True).clamp_min(torch.finfo(x.dtype).tiny) / 127
    return torch.round(x / scale).clamp(-127, 127) * scale
