"""Generated single-cell expression counts, shaped like the data of single-cell models.

A cell is a vector of ``n_genes`` molecule counts. Each cell type has an expression profile
``p`` (proportions over the genes, summing to 1: a shared background plus a set of marker
genes of its own), each cell a library size ``s`` (how many molecules were sequenced from it),
and its counts are ``Poisson(s * p)``. Real data adds over-dispersion, dropouts and batch
effects; the two properties used in the book are already here: cells of different types
have very different profiles, and library sizes vary by an order of magnitude between cells.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch
from torch import Tensor

__all__ = ["cell_type_profiles", "synthetic_counts"]


def cell_type_profiles(n_types: int = 4, n_genes: int = 500, markers: int = 25,
                       seed: int = 0) -> Tensor:
    """Expression proportions ``(n_types, n_genes)``, float64, each row summing to 1.

    A Gamma(0.5)-distributed background shared by all types; each type multiplies its own
    ``markers`` genes (disjoint between types) by 50.
    """
    if n_types * markers > n_genes:
        raise ValueError(f"n_types * markers ({n_types * markers}) must not exceed n_genes "
                         f"({n_genes})")
    rng = np.random.default_rng(seed)
    background = torch.from_numpy(rng.gamma(0.5, size=n_genes))            # float64
    profiles = background.repeat(n_types, 1)
    genes = torch.from_numpy(rng.permutation(n_genes))
    for t in range(n_types):
        profiles[t, genes[t * markers:(t + 1) * markers]] *= 50.0
    return profiles / profiles.sum(dim=1, keepdim=True)


def synthetic_counts(cell_types: Sequence[int], library_sizes: Sequence[float],
                     profiles: Tensor, seed: int = 0) -> Tensor:
    """Counts ``(n_cells, n_genes)`` float64: cell ``i`` is ``Poisson(library_sizes[i] *
    profiles[cell_types[i]])``, drawn from a generator seeded with ``seed``."""
    types = torch.as_tensor(cell_types, dtype=torch.long)
    sizes = torch.as_tensor(library_sizes, dtype=torch.float64)
    if types.dim() != 1 or types.shape != sizes.shape:
        raise ValueError("cell_types and library_sizes must be 1-D and of equal length, got "
                         f"{tuple(types.shape)} and {tuple(sizes.shape)}")
    if types.numel() and (types.min() < 0 or types.max() >= profiles.shape[0]):
        raise ValueError(f"cell_types must lie in 0..{profiles.shape[0] - 1}")
    if (sizes <= 0).any():
        raise ValueError("library_sizes must be positive")
    rates = sizes[:, None] * profiles[types]
    return torch.poisson(rates, generator=torch.Generator().manual_seed(seed))
