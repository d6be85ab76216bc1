"""A common non-standard LayerNorm, kept as a named variant so it can be measured.

Many tutorials (and the "core code" of one of the book's source notes) write LayerNorm as

    out = gamma * (x - mean) / (std + eps) + beta,   std = sqrt(sum (x - mean)^2 / (H - 1)),
    eps = 1e-6,

which differs from ``torch.nn.LayerNorm`` (and from Ba et al.) in three ways:

1. ``std`` is the *unbiased* estimate (divide by H - 1, torch's default for ``Tensor.std``),
   where LayerNorm uses the biased one (divide by H);
2. ``eps`` is added to the standard deviation, *outside* the square root, where torch
   computes ``sqrt(var + eps)``;
3. the default ``eps`` is 1e-6 instead of 1e-5, and the parameters are called
   ``gamma``/``beta`` instead of ``weight``/``bias``.

For rows whose std is far above ``eps`` the first difference dominates: the variant's output
is smaller by the factor ``sqrt((H - 1) / H)``, a relative gap of about ``1 / (2H)``
(``predicted_relative_gap``). For nearly constant rows the eps placement dominates.
"""

from __future__ import annotations

import math

import torch
from torch import nn

__all__ = [
    "annotated_layer_norm",
    "AnnotatedLayerNorm",
    "predicted_relative_gap",
    "annotated_from_torch",
    "difference_vs_torch",
]


def annotated_layer_norm(x: torch.Tensor, gamma: torch.Tensor, beta: torch.Tensor,
                         eps: float = 1e-6) -> torch.Tensor:
    """Functional form of the variant over the last dimension.

    Shapes: ``x`` (..., H), ``gamma`` and ``beta`` (H,) -> (..., H).
    ``gamma * (x - mean) / (std_unbiased + eps) + beta``.
    """
    if x.dim() == 0 or x.shape[-1] < 2:
        raise ValueError(f"x must have a last dimension of size >= 2 (the unbiased std divides "
                         f"by H - 1), got shape {tuple(x.shape)}")
    H = x.shape[-1]
    for name, p in (("gamma", gamma), ("beta", beta)):
        if tuple(p.shape) != (H,):
            raise RuntimeError(f"{name} must have shape ({H},), got {tuple(p.shape)}")
    mean = x.mean(-1, keepdim=True)
    xshift = x - mean
    std = (xshift.pow(2).sum(-1, keepdim=True) / (H - 1)).sqrt()  # unbiased
    return gamma * xshift / (std + eps) + beta


class AnnotatedLayerNorm(nn.Module):
    """The tutorial-style LayerNorm: unbiased std, eps outside the square root, eps=1e-6.

    Parameters ``gamma`` (init 1) and ``beta`` (init 0), shape (features,). Input (..., features).
    Not interchangeable with ``torch.nn.LayerNorm``: see the module docstring.
    """

    def __init__(self, features: int, eps: float = 1e-6):
        super().__init__()
        if not isinstance(features, int) or features < 2:
            raise ValueError(f"features must be an int >= 2, got {features!r}")
        if eps < 0:
            raise ValueError(f"eps must be >= 0, got {eps}")
        self.features = features
        self.eps = eps
        self.gamma = nn.Parameter(torch.ones(features))
        self.beta = nn.Parameter(torch.zeros(features))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return annotated_layer_norm(x, self.gamma, self.beta, self.eps)

    def extra_repr(self) -> str:
        return f"{self.features}, eps={self.eps}, std=unbiased, eps_outside_sqrt=True"


def predicted_relative_gap(H: int) -> float:
    """``1 - sqrt((H - 1) / H)``: relative shortfall of the variant when std >> eps."""
    if H < 2:
        raise ValueError(f"H must be >= 2, got {H}")
    return 1.0 - math.sqrt((H - 1) / H)


def annotated_from_torch(layer: nn.Module, *, compensate_unbiased: bool = False,
                         eps: float = 1e-6) -> AnnotatedLayerNorm:
    """Build the variant from a trained ``torch.nn.LayerNorm`` over one dimension.

    The state_dict keys differ (``weight``/``bias`` vs ``gamma``/``beta``), so the weights are
    copied by name. With ``compensate_unbiased=True`` gamma is multiplied by
    ``sqrt(H / (H - 1))``, which cancels the unbiased-std factor; what remains is the eps
    placement, negligible unless a row's std is comparable to ``sqrt(eps)``.
    """
    weight = getattr(layer, "weight", None)
    shape = tuple(getattr(layer, "normalized_shape", ()))
    if weight is None or len(shape) != 1:
        raise ValueError("layer must be a LayerNorm over one dimension with "
                         "elementwise_affine=True")
    H = shape[0]
    variant = AnnotatedLayerNorm(H, eps=eps)
    scale = math.sqrt(H / (H - 1)) if compensate_unbiased else 1.0
    with torch.no_grad():
        variant.gamma.copy_(weight.detach() * scale)
        bias = getattr(layer, "bias", None)
        variant.beta.copy_(bias.detach() if bias is not None else torch.zeros(H))
    return variant


def difference_vs_torch(feature_sizes, *, rows: int = 64, seed: int = 0,
                        dtype: torch.dtype = torch.float64) -> dict:
    """Measure the variant against ``torch.nn.functional.layer_norm`` for several H.

    For each H: standard-normal input (rows, H), gamma = 1, beta = 0, default eps of each.
    Returns arrays keyed ``"H"``, ``"max_abs"`` (max |variant - torch|), ``"median_rel"``
    (median of |variant - torch| / |torch|) and ``"predicted_rel"`` (``predicted_relative_gap``).
    """
    import numpy as np

    sizes = [int(h) for h in feature_sizes]
    if not sizes or min(sizes) < 2:
        raise ValueError(f"feature_sizes must be a non-empty sequence of ints >= 2, got {sizes}")
    generator = torch.Generator().manual_seed(seed)
    max_abs, median_rel = [], []
    for H in sizes:
        x = torch.randn(rows, H, generator=generator, dtype=dtype)
        gamma, beta = torch.ones(H, dtype=dtype), torch.zeros(H, dtype=dtype)
        ours = annotated_layer_norm(x, gamma, beta)
        reference = torch.nn.functional.layer_norm(x, (H,), gamma, beta)
        gap = (ours - reference).abs()
        max_abs.append(gap.max().item())
        median_rel.append((gap / reference.abs()).median().item())
    return {
        "H": np.asarray(sizes),
        "max_abs": np.asarray(max_abs),
        "median_rel": np.asarray(median_rel),
        "predicted_rel": np.asarray([predicted_relative_gap(H) for H in sizes]),
    }
