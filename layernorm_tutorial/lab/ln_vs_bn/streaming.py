"""Online learning: a classifier that learns from a stream, one sample per step.

The book's batch-norm chapter uses it for the "batch size 1" case of online learning. The
stream is scikit-learn's digits training set in a seeded random order (``training.
load_digits_split``); at every step the model first *predicts* the incoming sample (the
"prequential" score of online learning: test, then train), then takes one optimizer step on
that single sample. A batch norm in training mode cannot take such a step: the variance of
one value per channel is zero (the package's ``BatchNorm1d`` raises ``ValueError``, as
torch's does); a layer norm normalizes the sample over its own features and trains as usual.
"""

from __future__ import annotations

import numpy as np
import torch
from torch import nn

from layernorm_tutorial.lab.common.training import DigitsData
from layernorm_tutorial.nn import BatchNorm1d, LayerNorm

__all__ = ["NORMS", "stream_mlp", "train_on_stream"]

NORMS = ("layernorm", "batchnorm", "none")


def stream_mlp(norm: str, hidden: int = 64, in_features: int = 64, classes: int = 10,
               seed: int = 0) -> nn.Sequential:
    """``Linear(in_features, hidden) -> norm -> ReLU -> Linear(hidden, classes)``.

    ``norm`` is ``"layernorm"`` (the package's ``LayerNorm(hidden)``), ``"batchnorm"``
    (``BatchNorm1d(hidden)``) or ``"none"``. The linear layers' initial weights come from
    ``seed`` (the same for every ``norm``); the caller's global random state is untouched.
    """
    if norm not in NORMS:
        raise ValueError(f"norm must be one of {NORMS}, got {norm!r}")
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        first, last = nn.Linear(in_features, hidden), nn.Linear(hidden, classes)
    middle = {"layernorm": lambda: LayerNorm(hidden), "batchnorm": lambda: BatchNorm1d(hidden),
              "none": nn.Identity}[norm]()
    return nn.Sequential(first, middle, nn.ReLU(), last)


def train_on_stream(model: nn.Module, data: DigitsData, *, lr: float = 1e-2,
                    seed: int = 0, window: int = 200) -> dict:
    """One pass over ``data``'s training set, one sample per Adam step (batch size 1).

    The stream order is a permutation drawn from ``seed``. Before each step the model, in
    training mode, predicts the incoming sample ``x`` of shape ``(1, in_features)``.
    Returns NumPy arrays: ``prequential_accuracy`` (fraction of correct predictions in each
    consecutive ``window`` of the stream; a last, shorter window is dropped),
    ``checkpoints`` (stream positions, multiples of ``window``) and ``test_accuracy`` (the
    model's accuracy on ``data``'s test set, in evaluation mode, at each checkpoint).
    A ``ValueError`` from the model (batch norm in training mode at batch size 1) propagates.
    """
    if not lr > 0:
        raise ValueError(f"lr must be positive, got {lr!r}")
    if isinstance(window, bool) or not isinstance(window, int) or window < 1:
        raise ValueError(f"window must be a positive int, got {window!r}")
    optimizer = torch.optim.Adam(model.parameters(), lr=lr)
    order = torch.randperm(len(data.y_train), generator=torch.Generator().manual_seed(seed))
    correct, checkpoints, test_accuracy = [], [], []
    for position, index in enumerate(order.tolist(), start=1):
        model.train()
        x, y = data.x_train[index:index + 1], data.y_train[index:index + 1]   # (1, 64), (1,)
        logits = model(x)
        correct.append(bool(logits.argmax(dim=1) == y))                        # test ...
        loss = nn.functional.cross_entropy(logits, y)                          # ... then train
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        if position % window == 0:
            model.eval()
            with torch.no_grad():
                predictions = model(data.x_test).argmax(dim=1)
            checkpoints.append(position)
            test_accuracy.append(float((predictions == data.y_test).double().mean()))
    blocks = len(correct) // window
    prequential = np.array(correct[:blocks * window], dtype=float).reshape(blocks, window)
    return {"prequential_accuracy": prequential.mean(axis=1),
            "checkpoints": np.array(checkpoints), "test_accuracy": np.array(test_accuracy)}
