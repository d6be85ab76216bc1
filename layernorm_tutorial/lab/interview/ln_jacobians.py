r"""The gradient path of Post-LN and Pre-LN stacks, as products of Jacobians.

LayerNorm's Jacobian at :math:`x\in\mathbb R^H` (gain :math:`\gamma`,
:math:`r = 1/\sqrt{\sigma^2+\epsilon}`, :math:`\hat x = (x-\mu)\,r`) is

.. math:: J_{\mathrm{LN}}(x) = \mathrm{diag}(\gamma)\;r\,\Big(I - \tfrac1H\mathbf 1\mathbf 1^\top
          - \tfrac1H\hat x\hat x^\top\Big),

a projection that removes the directions :math:`\mathbf 1` and :math:`\hat x`, scaled by
:math:`r`. With a branch :math:`F_l(v) = W_{2,l}\tanh(W_{1,l}v)` the two placements are

.. math:: \text{Post-LN: } x_{l+1} = \mathrm{LN}(x_l + F_l(x_l)),\quad
          \frac{\partial x_{l+1}}{\partial x_l} = J_{\mathrm{LN}}(u_l)\,(I + J_{F_l}(x_l)),
          \quad u_l = x_l + F_l(x_l)

.. math:: \text{Pre-LN: } x_{l+1} = x_l + F_l(\mathrm{LN}(x_l)),\quad
          \frac{\partial x_{l+1}}{\partial x_l} = I + J_{F_l}(\mathrm{LN}(x_l))\,
          J_{\mathrm{LN}}(x_l)

and the Jacobian of the whole stack is the product of the blocks' (chain rule). Every
factor of the Post-LN product passes through a LayerNorm Jacobian; the Pre-LN product
contains the identity, the path that skips every branch.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

from layernorm_tutorial import functional as LF

__all__ = ["layer_norm_jacobian", "Stack", "block_jacobians", "stack_jacobian"]


def layer_norm_jacobian(x: Tensor, gamma: Tensor | None = None, eps: float = 1e-5) -> Tensor:
    """``J[i, j] = d LN(x)_i / d x_j`` for one vector ``x`` ``(H,)`` in closed form
    (see the module docstring); ``(H, H)``."""
    if x.dim() != 1:
        raise ValueError(f"x must be one vector of shape (H,), got shape {tuple(x.shape)}")
    h = x.numel()
    r = torch.rsqrt(x.var(correction=0) + eps)
    xhat = (x - x.mean()) * r
    eye = torch.eye(h, dtype=x.dtype)
    j = r * (eye - torch.ones(h, h, dtype=x.dtype) / h - torch.outer(xhat, xhat) / h)
    return j if gamma is None else gamma[:, None] * j


class Stack:
    """``depth`` blocks of width ``width`` in float64, branch ``F(v) = W2 tanh(W1 v)`` with
    ``W ~ N(0, 1/width)``; ``placement`` is ``"post"`` or ``"pre"``. ``branch_scale``
    multiplies every branch (0 switches all branches off)."""

    def __init__(self, placement: str, depth: int, width: int = 8, seed: int = 0,
                 branch_scale: float = 1.0):
        if placement not in ("post", "pre"):
            raise ValueError(f"placement must be 'post' or 'pre', got {placement!r}")
        g = torch.Generator().manual_seed(seed)
        std = 1 / math.sqrt(width)
        self.placement, self.width, self.scale = placement, width, branch_scale
        self.weights = [(torch.randn(width, width, generator=g, dtype=torch.float64) * std,
                         torch.randn(width, width, generator=g, dtype=torch.float64) * std)
                        for _ in range(depth)]

    def branch(self, index: int, v: Tensor) -> Tensor:
        w1, w2 = self.weights[index]
        return self.scale * (torch.tanh(v @ w1.T) @ w2.T)

    def ln(self, v: Tensor) -> Tensor:
        return LF.layer_norm(v, (self.width,))

    def block(self, index: int, x: Tensor) -> Tensor:
        if self.placement == "post":
            return self.ln(x + self.branch(index, x))
        return x + self.branch(index, self.ln(x))

    def forward(self, x: Tensor) -> list[Tensor]:
        """``[x_0, x_1, ..., x_depth]``."""
        states = [x]
        for i in range(len(self.weights)):
            states.append(self.block(i, states[-1]))
        return states


def _jacobian(f, x: Tensor) -> Tensor:
    return torch.autograd.functional.jacobian(f, x)


def block_jacobians(stack: Stack, x0: Tensor) -> list[dict]:
    """Per block ``l``: the autograd Jacobian ``d x_{l+1} / d x_l`` (``"autograd"``), the
    same from the closed-form factors of the module docstring (``"factored"``), and the
    LayerNorm Jacobian inside it (``"ln"``) with the input it was taken at (``"ln_input"``)."""
    out = []
    states = stack.forward(x0)
    eye = torch.eye(stack.width, dtype=x0.dtype)
    for i, x in enumerate(states[:-1]):
        full = _jacobian(lambda v, i=i: stack.block(i, v), x)
        if stack.placement == "post":
            u = x + stack.branch(i, x)
            j_ln = layer_norm_jacobian(u)
            j_f = _jacobian(lambda v, i=i: stack.branch(i, v), x)
            factored, ln_input = j_ln @ (eye + j_f), u
        else:
            j_ln = layer_norm_jacobian(x)
            j_f = _jacobian(lambda v, i=i: stack.branch(i, v), stack.ln(x))
            factored, ln_input = eye + j_f @ j_ln, x
        out.append({"autograd": full, "factored": factored, "ln": j_ln,
                    "ln_input": ln_input})
    return out


def stack_jacobian(stack: Stack, x0: Tensor) -> Tensor:
    """``d x_depth / d x_0`` by autograd through the whole stack: ``(H, H)``."""
    return _jacobian(lambda v: stack.forward(v)[-1], x0)
