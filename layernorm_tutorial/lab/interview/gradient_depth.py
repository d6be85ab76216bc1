r"""Gradients through depth at initialization: a plain ReLU stack, the same stack with
BatchNorm or LayerNorm, and with residual connections (with and without a pre-norm).

Block :math:`l` computes, on a batch ``(N, D)`` in float64, with
:math:`W_l \sim \mathcal N(0, g^2\cdot 2/D)` (:math:`g = 1` is He initialization):

========== =====================================================
``plain``  :math:`h_{l+1} = \mathrm{relu}(W_l h_l)`
``batch``  :math:`h_{l+1} = \mathrm{relu}(\mathrm{BN}(W_l h_l))`
``layer``  :math:`h_{l+1} = \mathrm{relu}(\mathrm{LN}(W_l h_l))`
``residual`` :math:`h_{l+1} = h_l + \mathrm{relu}(W_l h_l)/\sqrt{L}`
``pre-ln`` :math:`h_{l+1} = h_l + \mathrm{relu}(W_l\,\mathrm{LN}(h_l))/\sqrt{L}`
========== =====================================================

:func:`hidden_gradient_norms` returns :math:`\lVert\partial\ell/\partial h_l\rVert` for
every depth :math:`l` with :math:`\ell = \langle h_L, r\rangle` for a fixed random
:math:`r`: a plain stack multiplies the gradient by about :math:`g` per block (vanishing for
:math:`g<1`, exploding for :math:`g>1`); a norm divides by the scale its input has, which
cancels :math:`g`; a residual adds the identity to every block's Jacobian.
"""

from __future__ import annotations

import math

import torch

from layernorm_tutorial import functional as LF

__all__ = ["KINDS", "hidden_gradient_norms", "first_to_last_ratio"]

KINDS = ("plain", "batch", "layer", "residual", "pre-ln")


def hidden_gradient_norms(kind: str, gain: float, depth: int = 30, width: int = 64,
                          batch: int = 64, seed: int = 0) -> list[float]:
    """``[||d loss / d h_0||, ..., ||d loss / d h_depth||]`` for the stack ``kind``."""
    if kind not in KINDS:
        raise ValueError(f"kind must be one of {KINDS}, got {kind!r}")
    if depth < 1:
        raise ValueError(f"depth must be at least 1, got {depth}")
    g = torch.Generator().manual_seed(seed)
    std = gain * math.sqrt(2 / width)
    weights = [torch.randn(width, width, generator=g, dtype=torch.float64) * std
               for _ in range(depth)]
    h = torch.randn(batch, width, generator=g, dtype=torch.float64)
    readout = torch.randn(batch, width, generator=g, dtype=torch.float64)
    states = [h.requires_grad_()]
    for w in weights:
        x = states[-1]
        if kind == "plain":
            nxt = torch.relu(x @ w.T)
        elif kind == "batch":
            nxt = torch.relu(LF.batch_norm(x @ w.T, None, None, training=True))
        elif kind == "layer":
            nxt = torch.relu(LF.layer_norm(x @ w.T, (width,)))
        elif kind == "residual":
            nxt = x + torch.relu(x @ w.T) / math.sqrt(depth)
        else:
            nxt = x + torch.relu(LF.layer_norm(x, (width,)) @ w.T) / math.sqrt(depth)
        nxt.retain_grad()
        states.append(nxt)
    (states[-1] * readout).sum().backward()
    return [s.grad.norm().item() for s in states]


def first_to_last_ratio(kind: str, gain: float, **kw) -> float:
    """``||d loss / d h_0|| / ||d loss / d h_L||``: below 1 the gradient shrank on its way
    down the stack, above 1 it grew."""
    norms = hidden_gradient_norms(kind, gain, **kw)
    return norms[0] / norms[-1]
