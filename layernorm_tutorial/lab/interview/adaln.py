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

Zero weights still learn. For :math:`y = Wh` with :math:`W = 0`,
:math:`\partial L/\partial W = (\partial L/\partial y)\,h^\top \neq 0` while
:math:`\partial L/\partial h = W^\top \partial L/\partial y = 0`: the zeroed layer moves at
the first step and the layers before it wait one step. :func:`zero_linear_gradients` shows
it for DiT's zero-initialized final layer, :func:`first_step_gradients` for the block.
"""

from __future__ import annotations

import torch
from torch import nn

from layernorm_tutorial import nn as lnn

__all__ = ["AdaLNZeroBlock", "first_step_gradients", "zero_linear_gradients"]


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


def first_step_gradients(block: AdaLNZeroBlock, x: torch.Tensor, c: torch.Tensor,
                         dy: torch.Tensor) -> dict[str, float]:
    """``{parameter name: norm of its gradient}`` for the loss ``sum(block(x, c) * dy)``, with
    the block as it is (at initialization: only the modulation layer's gradient is nonzero)."""
    block.zero_grad(set_to_none=True)
    (block(x, c) * dy).sum().backward()
    return {name: float(p.grad.norm()) if p.grad is not None else 0.0
            for name, p in block.named_parameters()}


def zero_linear_gradients(h: torch.Tensor, dy: torch.Tensor, out_features: int) -> dict:
    """Gradients through a zero-initialized ``nn.Linear(in, out_features)`` (DiT's final layer)
    applied to ``h`` ``(B, in)`` with upstream gradient ``dy`` ``(B, out_features)``: the norms
    of the weight's gradient, of the input's gradient, and the largest output (0 at init)."""
    if h.dim() != 2 or dy.shape != (h.shape[0], out_features):
        raise ValueError(f"h must be (B, in) and dy (B, {out_features}); got {tuple(h.shape)} "
                         f"and {tuple(dy.shape)}")
    layer = nn.Linear(h.shape[1], out_features).to(h.dtype)
    nn.init.zeros_(layer.weight)
    nn.init.zeros_(layer.bias)
    h = h.detach().requires_grad_()
    out = layer(h)
    (out * dy).sum().backward()
    return {"weight_grad": float(layer.weight.grad.norm()), "input_grad": float(h.grad.norm()),
            "output": float(out.detach().abs().max())}
