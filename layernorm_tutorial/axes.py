"""The normalization family as one computation with different reduction axes.

Batch, Layer, Instance, Group and RMS normalization all compute statistics of the input over a
set of axes and rescale every element with the statistics of the set it belongs to:

    mean = E[x]   over the reduced axes            (RMS norm skips this, mean := 0)
    var  = E[(x - mean)^2]  (biased, divide by the count)
    y    = (x - mean) / sqrt(var + eps)            (RMS norm: x / sqrt(E[x^2] + eps))

Only the set of reduced axes differs. This module is the single source of truth for those
sets, for two layouts:

* ``"NCHW"``: images, shape (N, C, H, W) - batch, channels, height, width;
* ``"BTC"``: sequences, shape (B, T, C) - batch, time steps (tokens), channels (features).

In ``"BTC"`` the members are the torch modules as they are applied to sequences:
``LayerNorm(C)`` and ``RMSNorm(C)`` on (B, T, C); ``BatchNorm1d``, ``InstanceNorm1d`` and
``GroupNorm`` on the transposed tensor (B, C, T). Group norm reduces over the channels of a
group, so its statistics are indexed by (sample, group) instead of (sample, channel).

The figure of the family chapter, its table and the tests all read from here.
"""

from __future__ import annotations

from dataclasses import dataclass
from math import prod

import numpy as np
import torch

from .functional import rms_norm, standardize

FAMILY = ("batch", "layer", "instance", "group", "rms")
LAYOUTS = {"NCHW": ("N", "C", "H", "W"), "BTC": ("B", "T", "C")}
DISPLAY_NAMES = {
    "batch": "Batch Norm",
    "layer": "Layer Norm",
    "instance": "Instance Norm",
    "group": "Group Norm",
    "rms": "RMS Norm",
}


@dataclass(frozen=True)
class NormSpec:
    """How one family member normalizes in one layout.

    Attributes
    ----------
    name: key in :data:`FAMILY`.
    layout: key in :data:`LAYOUTS`.
    reduced: names of the axes the statistics are taken over (for group norm the channel
        axis is reduced only within a group of ``C // G`` channels).
    parameter_dims: names of the axes the affine weight/bias vary along, with torch's
        usual construction (``LayerNorm(x.shape[1:])`` for images, ``LayerNorm(C)`` for
        sequences).
    centers: False for RMS norm, which divides by the root mean square and subtracts nothing.
    running_stats: True when the torch module keeps running statistics by default.
    torch_module: how the member is built in torch for this layout.
    """

    name: str
    layout: str
    reduced: tuple[str, ...]
    parameter_dims: tuple[str, ...]
    centers: bool
    running_stats: bool
    torch_module: str

    @property
    def grouped(self) -> bool:
        """True for group norm: channels are split into groups before reducing."""
        return self.name == "group"


_SPECS = {
    ("batch", "NCHW"): (("N", "H", "W"), ("C",), True, True, "BatchNorm2d(C)"),
    ("layer", "NCHW"): (("C", "H", "W"), ("C", "H", "W"), True, False,
                        "LayerNorm(x.shape[1:])"),
    ("instance", "NCHW"): (("H", "W"), ("C",), True, False, "InstanceNorm2d(C, affine=True)"),
    ("group", "NCHW"): (("C", "H", "W"), ("C",), True, False, "GroupNorm(G, C)"),
    ("rms", "NCHW"): (("C", "H", "W"), ("C", "H", "W"), False, False, "RMSNorm(x.shape[1:])"),
    ("batch", "BTC"): (("B", "T"), ("C",), True, True, "BatchNorm1d(C) on x.transpose(1, 2)"),
    ("layer", "BTC"): (("C",), ("C",), True, False, "LayerNorm(C)"),
    ("instance", "BTC"): (("T",), ("C",), True, False,
                          "InstanceNorm1d(C, affine=True) on x.transpose(1, 2)"),
    ("group", "BTC"): (("T", "C"), ("C",), True, False, "GroupNorm(G, C) on x.transpose(1, 2)"),
    ("rms", "BTC"): (("C",), ("C",), False, False, "RMSNorm(C)"),
}


def spec(name: str, layout: str = "NCHW") -> NormSpec:
    """Return the :class:`NormSpec` of family member ``name`` in ``layout``."""
    if name not in FAMILY:
        raise ValueError(f"name must be one of {FAMILY}, got {name!r}")
    if layout not in LAYOUTS:
        raise ValueError(f"layout must be one of {tuple(LAYOUTS)}, got {layout!r}")
    reduced, params, centers, running, module = _SPECS[(name, layout)]
    return NormSpec(name, layout, reduced, params, centers, running, module)


def _check_shape(shape, layout: str) -> tuple[int, ...]:
    shape = tuple(int(s) for s in shape)
    if len(shape) != len(LAYOUTS[layout]):
        raise ValueError(
            f"shape must have {len(LAYOUTS[layout])} dims {LAYOUTS[layout]} for layout "
            f"{layout!r}, got {shape}")
    return shape


def _check_groups(name: str, num_groups, channels: int) -> int:
    if name != "group":
        return 1
    if num_groups is None:
        raise ValueError("num_groups is required for group norm")
    if num_groups < 1 or channels % num_groups:
        raise ValueError(f"num_groups must divide the {channels} channels, got {num_groups}")
    return int(num_groups)


def reduction_axes(name: str, layout: str = "NCHW") -> tuple[int, ...]:
    """Positions (in ``layout``) of the axes that ``name`` reduces over.

    For group norm the channel axis is listed although only ``C // G`` channels are reduced
    together; :func:`statistics_shape` and :func:`statistic_index` account for the groups.
    """
    s = spec(name, layout)
    dims = LAYOUTS[layout]
    return tuple(dims.index(d) for d in s.reduced)


def statistics_shape(name: str, shape, layout: str = "NCHW", num_groups=None) -> tuple:
    """Shape of the mean (and variance) tensor computed for an input of ``shape``.

    Batch norm on (N, C, H, W) -> (C,); layer/RMS norm -> (N,); instance -> (N, C);
    group -> (N, G). In ``"BTC"``: batch -> (C,); layer/RMS -> (B, T); instance -> (B, C);
    group -> (B, G).
    """
    shape = _check_shape(shape, layout)
    s = spec(name, layout)
    dims = LAYOUTS[layout]
    groups = _check_groups(name, num_groups, shape[dims.index("C")])
    kept = []
    for d, n in zip(dims, shape, strict=True):
        if d == "C" and s.grouped:
            kept.append(groups)
        elif d not in s.reduced:
            kept.append(n)
    return tuple(kept)


def elements_per_statistic(name: str, shape, layout: str = "NCHW", num_groups=None) -> int:
    """How many input elements each mean/variance is computed from."""
    shape = _check_shape(shape, layout)
    return prod(shape) // prod(statistics_shape(name, shape, layout, num_groups))


def parameter_shape(name: str, shape, layout: str = "NCHW") -> tuple[int, ...]:
    """Shape of the affine weight (and bias) of torch's usual construction of ``name``.

    Example: for x of shape (20, 5, 10, 10), ``LayerNorm(x.shape[1:])`` has weight shape
    (5, 10, 10) and ``BatchNorm2d(5)`` has weight shape (5,).
    """
    shape = _check_shape(shape, layout)
    s = spec(name, layout)
    dims = LAYOUTS[layout]
    return tuple(shape[dims.index(d)] for d in s.parameter_dims)


def statistic_index(name: str, shape, layout: str = "NCHW", num_groups=None) -> np.ndarray:
    """Integer array of ``shape``: elements with the same value share one mean and variance.

    The ids run over ``range(prod(statistics_shape(...)))`` in C order of the statistics.
    This is what the family figure colours.
    """
    shape = _check_shape(shape, layout)
    s = spec(name, layout)
    dims = LAYOUTS[layout]
    groups = _check_groups(name, num_groups, shape[dims.index("C")])
    grids = np.meshgrid(*[np.arange(n) for n in shape], indexing="ij")
    index = np.zeros(shape, dtype=np.int64)
    for d, n, grid in zip(dims, shape, grids, strict=True):
        if d == "C" and s.grouped:
            index = index * groups + grid // (n // groups)
        elif d not in s.reduced:
            index = index * n + grid
    return index


def family_normalize(x: torch.Tensor, name: str, layout: str = "NCHW", num_groups=None,
                     eps: float = 1e-5) -> torch.Tensor:
    """Normalize ``x`` the way family member ``name`` does, without the affine step.

    One implementation for the whole family: group norm splits the channel axis into
    (G, C // G) and reduces the second factor; everybody else reduces the axes of
    :func:`reduction_axes`. Variance is biased; eps is inside the square root. The
    computation is :func:`~layernorm_tutorial.functional.standardize` (RMS norm:
    :func:`~layernorm_tutorial.functional.rms_norm`), the core every norm here uses.
    """
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"x must be a torch.Tensor, got {type(x).__name__}")
    s = spec(name, layout)
    shape = _check_shape(x.shape, layout)
    dims = list(LAYOUTS[layout])
    axes = list(reduction_axes(name, layout))
    if s.grouped:
        c = dims.index("C")
        groups = _check_groups(name, num_groups, shape[c])
        x_view = x.reshape(*shape[:c], groups, shape[c] // groups, *shape[c + 1:])
        # after splitting C into (G, C // G) at positions (c, c + 1), the within-group
        # channel axis c + 1 is reduced and every later axis moves one place right
        axes = [c + 1 if a == c else (a + 1 if a > c else a) for a in axes]
    else:
        x_view = x
    axes = tuple(axes)
    if s.centers:
        out = standardize(x_view, axes, eps).norm         # the package's one core
    else:  # RMS norm reduces the trailing axes in both layouts
        out = rms_norm(x_view, x_view.shape[min(axes):], None, eps)
    return out.reshape(shape)


def family_table(shape, layout: str = "NCHW", num_groups: int = 2) -> list[dict]:
    """One row per family member: reduced axes, statistics shape, count, parameter shape.

    Used by the chapter's table; ``num_groups`` is used for group norm only.
    """
    rows = []
    for name in FAMILY:
        s = spec(name, layout)
        groups = num_groups if name == "group" else None
        reduced = ", ".join(s.reduced)
        if s.grouped:
            reduced = reduced.replace("C", f"C/G (G={num_groups})")
        rows.append({
            "member": DISPLAY_NAMES[name],
            "reduces over": reduced,
            "statistics shape": statistics_shape(name, shape, layout, groups),
            "elements per statistic": elements_per_statistic(name, shape, layout, groups),
            "subtracts mean": s.centers,
            "parameter shape": parameter_shape(name, shape, layout),
            "running statistics": s.running_stats,
            "torch module": s.torch_module,
        })
    return rows
