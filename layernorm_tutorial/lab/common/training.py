"""Small, fast, seeded training runs for the book: a deep MLP on scikit-learn's digits.

The digits data set (1797 8x8 images, 10 classes) ships with scikit-learn, so nothing is
downloaded. A run of a 12-layer MLP for a few dozen epochs takes about a second on a laptop
CPU, small enough to execute inside a notebook.

Typical use::

    data = load_digits_split()
    runs = compare_layer_norm(data, depth=12, epochs=20)
    runs["with LayerNorm"].train_loss   # one mean training loss per epoch
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import torch
from torch import nn

from layernorm_tutorial._seeding import seeded
from layernorm_tutorial.nn import LayerNorm

__all__ = [
    "DigitsData",
    "DigitsSplits",
    "TrainingResult",
    "load_digits_split",
    "load_digits_with_validation",
    "provenance_line",
    "make_mlp",
    "train_classifier",
    "compare_layer_norm",
]


@dataclass(frozen=True)
class DigitsData:
    """Train/test split of the digits: ``x_*`` float32 (n, 64) in [0, 1], ``y_*`` int64 (n,)."""

    x_train: torch.Tensor
    y_train: torch.Tensor
    x_test: torch.Tensor
    y_test: torch.Tensor


@dataclass
class TrainingResult:
    """Per-epoch curves of one run and its final test accuracy (a fraction in [0, 1])."""

    train_loss: list = field(default_factory=list)
    test_loss: list = field(default_factory=list)
    test_accuracy: float = float("nan")


def load_digits_split(test_fraction: float = 0.25, seed: int = 0) -> DigitsData:
    """Load scikit-learn's digits, scale pixels from 0..16 to [0, 1], split at random.

    The split is a seeded permutation, so every call with the same seed returns the same data.
    """
    if not 0.0 < test_fraction < 1.0:
        raise ValueError(f"test_fraction must be in (0, 1), got {test_fraction}")
    from sklearn.datasets import load_digits

    digits = load_digits()
    x = torch.tensor(digits.data / 16.0, dtype=torch.float32)
    y = torch.tensor(digits.target, dtype=torch.int64)
    order = torch.randperm(len(y), generator=torch.Generator().manual_seed(seed))
    n_test = int(round(test_fraction * len(y)))
    test, train = order[:n_test], order[n_test:]
    return DigitsData(x[train], y[train], x[test], y[test])


@dataclass(frozen=True)
class DigitsSplits:
    """Train / validation / test digits: ``x_*`` float32 ``(n, 64)`` in [0, 1], ``y_*`` int64."""

    x_train: torch.Tensor
    y_train: torch.Tensor
    x_val: torch.Tensor
    y_val: torch.Tensor
    x_test: torch.Tensor
    y_test: torch.Tensor

    def sizes(self) -> dict:
        return {"train": len(self.y_train), "val": len(self.y_val), "test": len(self.y_test)}


#: The book's fixed test set is the test part of ``load_digits_split(0.25, seed=TEST_SPLIT_SEED)``.
TEST_SPLIT_SEED = 0
TEST_FRACTION = 0.25
#: The validation share of the 1348 images outside the test set.
VALIDATION_FRACTION = 0.2


def load_digits_with_validation(seed: int = 0) -> DigitsSplits:
    """The book's fixed test set (449 images) and a train/validation split (1078 / 270) of
    the other 1348 images drawn from ``seed``.

    The test images are the same for every seed (``load_digits_split(0.25, seed=0)``); the
    validation images never overlap them, so a rate chosen on validation data has not seen
    any test image. The train/validation permutation comes from a generator seeded with
    ``seed + 1``: the same split as the evidence chapter's ``load_evidence_data(seed)``.
    """
    if isinstance(seed, bool) or not isinstance(seed, int) or seed < 0:
        raise ValueError(f"seed must be a non-negative int, got {seed!r}")
    digits = load_digits_split(TEST_FRACTION, seed=TEST_SPLIT_SEED)
    n = len(digits.y_train)
    order = torch.randperm(n, generator=torch.Generator().manual_seed(seed + 1))
    n_val = int(round(VALIDATION_FRACTION * n))
    val, train = order[:n_val], order[n_val:]
    return DigitsSplits(digits.x_train[train], digits.y_train[train],
                        digits.x_train[val], digits.y_train[val],
                        digits.x_test, digits.y_test)


def make_mlp(depth: int, width: int = 64, *, layer_norm: bool, in_features: int = 64,
             classes: int = 10, seed: int = 0, he_init: bool = False) -> nn.Sequential:
    """``depth`` hidden blocks ``Linear -> [LayerNorm] -> ReLU``, then a ``Linear`` classifier.

    LayerNorm sits on the summed inputs of each hidden layer, as in Ba et al. (2016).
    Weights use PyTorch's default initialisation drawn from ``seed``, identical for the runs
    with and without LayerNorm (the LayerNorm layers have no random parameters).
    PyTorch's default draws weights with variance ``1 / (3 fan_in)``, so without
    normalization each ReLU layer shrinks the signal's second moment by about 6x until
    the random biases dominate;
    ``he_init=True`` uses variance ``2 / fan_in`` (He et al.), which keeps it constant.
    """
    if not isinstance(depth, int) or depth < 1:
        raise ValueError(f"depth must be a positive int, got {depth!r}")
    if not isinstance(width, int) or width < 2:
        raise ValueError(f"width must be an int >= 2, got {width!r}")
    with seeded(seed):  # nn.Linear draws its initial weights from the global generator
        layers: list[nn.Module] = []
        fan_in = in_features
        for _ in range(depth):
            linear = nn.Linear(fan_in, width)
            if he_init:
                nn.init.kaiming_normal_(linear.weight, nonlinearity="relu")
                nn.init.zeros_(linear.bias)
            layers.append(linear)
            if layer_norm:
                layers.append(LayerNorm(width))
            layers.append(nn.ReLU())
            fan_in = width
        layers.append(nn.Linear(fan_in, classes))
    return nn.Sequential(*layers)


def _evaluate(model: nn.Module, x: torch.Tensor, y: torch.Tensor) -> tuple[float, float]:
    model.eval()
    with torch.no_grad():
        logits = model(x)
        loss = nn.functional.cross_entropy(logits, y).item()
        accuracy = (logits.argmax(1) == y).double().mean().item()
    model.train()
    return loss, accuracy


def train_classifier(model: nn.Module, data: DigitsData, *, epochs: int = 20,
                     batch_size: int = 64, lr: float = 0.05, momentum: float = 0.9,
                     seed: int = 0) -> TrainingResult:
    """Mini-batch SGD with momentum on cross-entropy; the batch order is drawn from ``seed``.

    Records the mean training loss and the test loss after every epoch. A non-finite loss
    stops training early (the curves then end at that epoch).
    """
    if epochs < 1 or batch_size < 1 or lr <= 0:
        raise ValueError(f"need epochs >= 1, batch_size >= 1, lr > 0; got {epochs}, "
                         f"{batch_size}, {lr}")
    optimizer = torch.optim.SGD(model.parameters(), lr=lr, momentum=momentum)
    generator = torch.Generator().manual_seed(seed)
    result = TrainingResult()
    n = len(data.y_train)
    for _ in range(epochs):
        order = torch.randperm(n, generator=generator)
        total = 0.0
        for start in range(0, n, batch_size):
            idx = order[start:start + batch_size]
            loss = nn.functional.cross_entropy(model(data.x_train[idx]), data.y_train[idx])
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            total += loss.item() * len(idx)
        result.train_loss.append(total / n)
        test_loss, accuracy = _evaluate(model, data.x_test, data.y_test)
        result.test_loss.append(test_loss)
        result.test_accuracy = accuracy
        if not np.isfinite(result.train_loss[-1]):
            break
    return result


def compare_layer_norm(data: DigitsData, *, depth: int = 12, width: int = 64,
                       epochs: int = 20, lr: float = 0.05, seed: int = 0) -> dict:
    """Train the same MLP (same initial weights, same batches) without and with LayerNorm.

    Returns ``{"without LayerNorm": TrainingResult, "with LayerNorm": TrainingResult}``.
    """
    runs = {}
    for name, use_ln in (("without LayerNorm", False), ("with LayerNorm", True)):
        model = make_mlp(depth, width, layer_norm=use_ln, seed=seed)
        runs[name] = train_classifier(model, data, epochs=epochs, lr=lr, seed=seed)
    return runs


def provenance_line(doc: dict) -> str:
    """One line on where a stored results file was made: its command, CPU and numerics path
    (capability, MKL, threads), torch, date and commit (from its provenance header; files
    without a ``machine`` record say so)."""
    m = doc.get("machine")
    head = f"{doc['command']}, torch {doc['versions']['torch']}"
    if not m:
        return f"{head}; machine not recorded"
    env = ", ".join(f"{k}={v}" for k, v in m.get("environment", {}).items())
    path = f"{m['cpu_capability']}, MKL {m['mkl']}, {m['torch_threads']} threads"
    commit = (m.get("commit") or "?")[:7]
    return (f"{head}\n  on {m['cpu']} ({path}{', ' + env if env else ''}),"
            f"\n  {m['date'][:16].replace('T', ' ')} UTC, commit {commit}")
