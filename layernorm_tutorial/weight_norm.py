"""Weight normalization (Salimans and Kingma, 2016): normalize the weights, not the activations.

A weight tensor ``w`` is re-parameterized as a magnitude ``g`` and a direction ``v``:

    w = g * v / ||v||

where the norm is taken over every axis except ``dim`` (``dim=0``: one norm per output unit
of a Linear or Conv layer) or over the whole tensor (``dim=None``). The function the layer
computes is unchanged by the re-parameterization; only the coordinates the optimizer moves in
change. Unlike batch or layer norm, nothing here looks at the data.

Semantics follow ``torch.nn.utils.parametrizations.weight_norm``: ``g`` keeps the shape of
``v`` with size 1 on every reduced axis (a 0-dim tensor for the whole-tensor norm), and, as
in torch, ``dim=-1`` means the whole tensor, not the last axis.
"""

from __future__ import annotations

import torch
from torch import nn
from torch.nn.utils import parametrize


def _reduced_dims(ndim: int, dim: int | None) -> tuple[int, ...] | None:
    """Axes the norm runs over; None means the whole tensor."""
    if dim is None or dim == -1:
        return None
    if not -ndim <= dim < ndim:
        raise IndexError(f"dim must be in [{-ndim}, {ndim - 1}] or None, got {dim}")
    dim = dim % ndim
    return tuple(d for d in range(ndim) if d != dim)


def norm_except_dim(v: torch.Tensor, dim: int | None = 0) -> torch.Tensor:
    """Euclidean norm of ``v`` over every axis except ``dim`` (keepdims); whole tensor if None.

    Shape: ``v.shape`` with 1 on each reduced axis, or ``()`` for the whole-tensor norm.
    Equals ``torch.norm_except_dim(v, 2, dim)``.
    """
    if not isinstance(v, torch.Tensor):
        raise TypeError(f"v must be a torch.Tensor, got {type(v).__name__}")
    dims = _reduced_dims(v.dim(), dim)
    if dims is None:
        return torch.sqrt((v * v).sum())
    if not dims:  # a 1-D tensor normalized "per element": each norm is |v_i|
        return torch.sqrt(v * v)
    return torch.sqrt((v * v).sum(dim=dims, keepdim=True))


def weight_norm(v: torch.Tensor, g: torch.Tensor, dim: int | None = 0) -> torch.Tensor:
    """Return ``w = g * v / ||v||`` with the norm over all axes except ``dim``.

    ``g`` must broadcast against the norm's shape (normally it has exactly that shape, as
    returned by :func:`decompose`). Equals ``torch._weight_norm(v, g, dim)``.
    """
    norm = norm_except_dim(v, dim)
    if not isinstance(g, torch.Tensor):
        raise TypeError(f"g must be a torch.Tensor, got {type(g).__name__}")
    try:
        torch.broadcast_shapes(g.shape, norm.shape)
    except RuntimeError as err:
        raise ValueError(f"g must have shape {tuple(norm.shape)} (the norm's shape for "
                         f"dim={dim}), got {tuple(g.shape)}") from err
    return v * (g / norm)


def decompose(w: torch.Tensor, dim: int | None = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """Split a weight into ``(g, v)`` with ``weight_norm(v, g, dim) == w``: g = ||w||, v = w."""
    return norm_except_dim(w, dim), w


class WeightNormParametrization(nn.Module):
    """Parametrization module: ``forward(g, v)`` builds the weight, ``right_inverse`` splits it.

    Registered with ``torch.nn.utils.parametrize`` it stores ``g`` as ``original0`` and ``v``
    as ``original1``, the same state-dict keys torch's own weight_norm produces.
    """

    def __init__(self, dim: int | None = 0) -> None:
        super().__init__()
        self.dim = dim

    def forward(self, weight_g: torch.Tensor, weight_v: torch.Tensor) -> torch.Tensor:
        return weight_norm(weight_v, weight_g, self.dim)

    def right_inverse(self, weight: torch.Tensor):
        return decompose(weight, self.dim)


def apply_weight_norm(module: nn.Module, name: str = "weight", dim: int | None = 0) -> nn.Module:
    """Re-parameterize ``module.<name>`` as ``g * v / ||v||`` (in place); return the module.

    After the call ``module.parametrizations.<name>.original0`` is ``g`` and ``original1`` is
    ``v``, as with ``torch.nn.utils.parametrizations.weight_norm``; the module computes the
    same function as before.
    """
    if not isinstance(getattr(module, name, None), torch.Tensor):
        raise AttributeError(f"module has no tensor attribute {name!r} to re-parameterize")
    parametrize.register_parametrization(module, name, WeightNormParametrization(dim),
                                         unsafe=True)
    return module
