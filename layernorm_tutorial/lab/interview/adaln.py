r"""Adaptive LayerNorm with a zero-initialized gate (adaLN-Zero), the conditioning of DiT.

In a diffusion Transformer (Peebles and Xie, 2023) the LayerNorms have no learned
:math:`\gamma,\beta` of their own: a small network maps the conditioning vector :math:`c`
(timestep and class embeddings) to a shift, a scale and a gate per feature, per sample,

.. math::

    (\beta_c, s_c, \alpha_c) = W\,\mathrm{SiLU}(c) + b, \qquad
    y = x + \alpha_c \odot F\big(\hat x \odot (1 + s_c) + \beta_c\big),

with :math:`\hat x` the LayerNorm of :math:`x` without affine parameters. ``W`` and ``b``
start at zero, so at initialization :math:`\alpha_c = 0` and every block is the identity
(the "Zero" of adaLN-Zero). A DiT block does this twice (attention and MLP): six vectors per
sample. :class:`AdaLNZeroBlock` is one such residual sublayer, with an MLP as ``F``.
"""

from __future__ import annotations

import torch
from torch import nn

from layernorm_tutorial import nn as lnn

__all__ = ["AdaLNZeroBlock"]


class AdaLNZeroBlock(nn.Module):
    """One adaLN-Zero residual sublayer. Input ``x`` ``(B, T, dim)`` and condition ``c``
    ``(B, cond_dim)``; output ``(B, T, dim)``. See the module docstring for the formula."""

    def __init__(self, dim: int, cond_dim: int, hidden: int | None = None, eps: float = 1e-6):
        super().__init__()
        self.norm = lnn.LayerNorm(dim, eps=eps, elementwise_affine=False)
        self.modulation = nn.Linear(cond_dim, 3 * dim)
        hidden = 4 * dim if hidden is None else hidden
        self.branch = nn.Sequential(nn.Linear(dim, hidden), nn.GELU(), nn.Linear(hidden, dim))
        nn.init.zeros_(self.modulation.weight)
        nn.init.zeros_(self.modulation.bias)

    def modulations(self, c: torch.Tensor):
        """``(shift, scale, gate)``, each ``(B, 1, dim)``: one per sample, shared by its tokens."""
        if c.dim() != 2 or c.shape[1] != self.modulation.in_features:
            raise ValueError(f"c must be (B, {self.modulation.in_features}), got {tuple(c.shape)}")
        shift, scale, gate = self.modulation(nn.functional.silu(c)).unsqueeze(1).chunk(3, dim=-1)
        return shift, scale, gate

    def forward(self, x: torch.Tensor, c: torch.Tensor) -> torch.Tensor:
        if x.dim() != 3 or x.shape[0] != c.shape[0]:
            raise ValueError(f"x must be (B, T, dim) with B = {c.shape[0]} (the batch of c), "
                             f"got {tuple(x.shape)}")
        shift, scale, gate = self.modulations(c)
        return x + gate * self.branch(self.norm(x) * (1 + scale) + shift)
