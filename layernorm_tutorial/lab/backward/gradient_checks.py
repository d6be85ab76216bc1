r"""Central finite differences: the reference that assumes nothing about the backward pass.

For a scalar loss :math:`L(t_1, \dots, t_k)` of float64 tensors, each entry of each gradient
is estimated as

.. math:: \frac{\partial L}{\partial t_{j}} \approx
          \frac{L(t_j + h e) - L(t_j - h e)}{2h},

with error :math:`O(h^2)` from the Taylor series plus :math:`O(u |L| / h)` from rounding
(:math:`u = 2^{-53}`): about :math:`10^{-10}` relative at :math:`h = 10^{-6}`. The backward
chapter checks its hand-derived LayerNorm gradient against it.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch

__all__ = ["central_differences"]


def central_differences(loss: Callable[..., torch.Tensor], tensors: Sequence[torch.Tensor],
                        h: float = 1e-6) -> list[torch.Tensor]:
    """``[dL/dt for t in tensors]`` by central differences, each of ``t``'s shape.

    ``loss(*tensors)`` must return a scalar; every tensor must be float64 (in float32 the
    rounding term swamps the estimate). The inputs are not modified.
    """
    if not tensors:
        raise ValueError("tensors must hold at least one tensor")
    for k, t in enumerate(tensors):
        if not isinstance(t, torch.Tensor) or t.dtype != torch.float64:
            raise TypeError(f"tensors[{k}] must be a float64 tensor, got "
                            f"{getattr(t, 'dtype', type(t).__name__)}")
    if not h > 0:
        raise ValueError(f"h must be positive, got {h!r}")
    base = [t.detach().clone() for t in tensors]
    grads = []
    with torch.no_grad():
        for t in base:
            grad = torch.empty_like(t)
            flat, out = t.view(-1), grad.view(-1)
            for i in range(flat.numel()):
                old = flat[i].item()
                flat[i] = old + h
                up = float(loss(*base))
                flat[i] = old - h
                down = float(loss(*base))
                flat[i] = old
                out[i] = (up - down) / (2 * h)
            grads.append(grad)
    return grads
