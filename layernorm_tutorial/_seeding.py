"""A seeded block that leaves the caller's global random state as it found it."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import torch

__all__ = ["seeded"]


@contextmanager
def seeded(seed: int) -> Iterator[None]:
    """Run the block with torch's global CPU generator seeded to ``seed``, then restore it.

    For code that must draw from the global generator (``nn.Module`` constructors do): the
    numbers inside are fixed by ``seed``, and a reader's own seeding survives the call.
    """
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        yield
