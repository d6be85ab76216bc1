"""One small training loop for the chapter's toy runs: the book's reverse task, Adam(W).

The task is the residual chapter's: random token sequences and the same sequence reversed as
per-position targets (:func:`~layernorm_tutorial.lab.residual.experiments.reverse_task_batch`).
Seed ``s`` fixes the initialization (torch's global generator, forked) and the stream of
training batches; the held-out batch is drawn from seed ``s + 10_000``, so each seed has its
own train/evaluation data.
"""

from __future__ import annotations

import math

import numpy as np
import torch
from torch import nn

from layernorm_tutorial._seeding import seeded
from layernorm_tutorial.lab.residual.experiments import (
    reverse_task_batch,
    reverse_task_steps,
    warmup_factor,
)

__all__ = ["train_toy", "evaluate_accuracy", "DIVERGED_LOSS"]

# A run whose last losses are this far above chance (or not finite) counts as diverged.
DIVERGED_LOSS = 0.0  # margin above ln(vocab): loss >= ln(vocab) + 0.0 means "no better than chance"


def evaluate_accuracy(model: nn.Module, seq_len: int, vocab_size: int, seed: int,
                      n: int = 512) -> float:
    """Per-token accuracy on ``n`` held-out sequences drawn from ``seed + 10_000``."""
    tokens, targets = reverse_task_batch(n, seq_len, vocab_size,
                                         torch.Generator().manual_seed(seed + 10_000))
    with torch.no_grad():
        logits = model(tokens)
    if not torch.isfinite(logits).all():
        return 1.0 / vocab_size  # a diverged model is scored as chance
    return float((logits.argmax(-1) == targets).float().mean())


def train_toy(make_model, *, steps: int, lr: float, seed: int, warmup_steps: int = 0,
              weight_decay: float = 0.0, param_groups=None, seq_len: int = 8,
              vocab_size: int = 16, batch_size: int = 32, probe=None) -> dict:
    """Build ``make_model()`` under ``seed`` and train it with AdamW on the reverse task.

    ``lr * warmup_factor(step, warmup_steps)`` per step; ``param_groups(model)`` (optional)
    returns AdamW parameter groups (e.g. weight decay only on matrices). ``probe(model)``,
    if given, is called after every step and its values are collected under ``"probe"``.
    Stops early when the loss is not finite. Returns ``loss`` (per step, NumPy), ``probe``
    (list), ``accuracy`` (held-out, chance ``1/vocab_size``), ``final_loss`` (mean of the last
    5 losses, ``inf`` if the run blew up) and the trained ``model``.
    """
    with seeded(seed):
        model = make_model()
        groups = param_groups(model) if param_groups is not None else model.parameters()
        optimizer = torch.optim.AdamW(groups, lr=lr, weight_decay=weight_decay)
        schedule = torch.optim.lr_scheduler.LambdaLR(
            optimizer, lambda step: warmup_factor(step, warmup_steps))
        g = torch.Generator().manual_seed(seed + 1)
        probes = []

        def after_step(loss: float) -> bool:  # collect the probe; stop once the run blew up
            if probe is not None:
                probes.append(probe(model))
            return not math.isfinite(loss)

        losses = reverse_task_steps(model, optimizer, schedule, steps=steps,
                                    batch_size=batch_size, seq_len=seq_len,
                                    vocab_size=vocab_size, generator=g, after_step=after_step)
        accuracy = evaluate_accuracy(model, seq_len, vocab_size, seed)
    tail = losses[-5:]
    final = float(np.mean(tail)) if all(math.isfinite(v) for v in tail) else math.inf
    return {"loss": np.array(losses), "probe": probes, "accuracy": accuracy,
            "final_loss": final, "model": model}
