"""The mini-batch loop shared by the evidence chapter's small side experiments."""

from __future__ import annotations

import torch
import torch.nn.functional as F

__all__ = ["train_for_steps"]


def train_for_steps(model: torch.nn.Module, optimizer: torch.optim.Optimizer,
                    x: torch.Tensor, y: torch.Tensor, steps: int, batch_size: int,
                    generator: torch.Generator) -> tuple[int, bool]:
    """Train ``model`` in training mode for ``steps`` optimizer steps of cross-entropy.

    ``x``: ``(n, ...)`` inputs, ``y``: ``(n,)`` labels. Each epoch visits the samples in an
    order drawn from ``generator`` and drops the last incomplete batch. Stops early at the
    first non-finite loss (no step is taken with it). Returns ``(steps_taken, finite)``.
    """
    if steps < 0 or not 1 <= batch_size <= len(y):
        raise ValueError(f"need steps >= 0 and 1 <= batch_size <= {len(y)}, "
                         f"got steps={steps}, batch_size={batch_size}")
    model.train()
    step, n = 0, len(y)
    while step < steps:
        perm = torch.randperm(n, generator=generator)
        for i in range(n // batch_size):
            idx = perm[i * batch_size:(i + 1) * batch_size]
            loss = F.cross_entropy(model(x[idx]), y[idx])
            if not torch.isfinite(loss):
                return step, False
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            step += 1
            if step >= steps:
                break
    return step, True
