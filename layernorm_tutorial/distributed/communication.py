"""The package's collectives, and a counter of them (calls and payload bytes).

Every collective the package issues goes through :func:`all_reduce_sum`, so
:func:`count_communication` can report how many calls a layer makes and how many bytes they
carry. Without an initialized process group the sum is over one rank: nothing is sent and
nothing is counted.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass, field

import torch
import torch.distributed as dist

__all__ = ["CommunicationLog", "all_reduce_sum", "count_communication", "is_distributed",
           "world_size"]


@dataclass
class CommunicationLog:
    """Collectives issued inside :func:`count_communication`: one (tag, numel, bytes) each.

    ``bytes`` is the payload of the reduced buffer on one rank (a ring all-reduce moves about
    ``2 (W - 1) / W`` times that over the network per rank).
    """

    records: list = field(default_factory=list)

    def collectives(self, tag_prefix: str = "") -> int:
        return sum(1 for tag, _, _ in self.records if tag.startswith(tag_prefix))

    def bytes(self, tag_prefix: str = "") -> int:
        return sum(nbytes for tag, _, nbytes in self.records if tag.startswith(tag_prefix))

    def by_tag(self) -> dict:
        """``{tag: (number of collectives, payload bytes)}``."""
        summary: dict = {}
        for tag, _, nbytes in self.records:
            calls, total = summary.get(tag, (0, 0))
            summary[tag] = (calls + 1, total + nbytes)
        return summary


_ACTIVE_LOGS: list[CommunicationLog] = []


@contextlib.contextmanager
def count_communication():
    """Record every collective the package issues inside the ``with`` block."""
    log = CommunicationLog()
    _ACTIVE_LOGS.append(log)
    try:
        yield log
    finally:
        _ACTIVE_LOGS.remove(log)


def is_distributed() -> bool:
    """True when a torch.distributed process group is initialized in this process."""
    return dist.is_available() and dist.is_initialized()


def world_size(group=None) -> int:
    """Number of ranks in ``group`` (the default group if None); 1 without a process group."""
    return dist.get_world_size(group) if is_distributed() else 1


def all_reduce_sum(tensor: torch.Tensor, tag: str, group=None) -> torch.Tensor:
    """Sum ``tensor`` over all ranks in place (no-op without a process group); count it."""
    if is_distributed():
        dist.all_reduce(tensor, op=dist.ReduceOp.SUM, group=group)
        for log in _ACTIVE_LOGS:
            log.records.append((tag, tensor.numel(), tensor.numel() * tensor.element_size()))
    return tensor
