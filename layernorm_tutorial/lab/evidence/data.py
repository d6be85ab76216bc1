"""The data of the evidence chapter: scikit-learn's 8x8 digits with a fixed three-way split.

The test set is the book-wide split of
:func:`layernorm_tutorial.lab.common.training.load_digits_split`
(25 % of the 1,797 images, seeded permutation). A validation set is carved out of the
remaining training images with another fixed permutation; it is used only to choose each
method's learning rate, so the test set never influences any choice.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

import torch

from layernorm_tutorial.lab.common.training import load_digits_split

__all__ = ["EvidenceData", "load_evidence_data", "as_model_input"]

SPLIT_SEED = 0
TEST_FRACTION = 0.25
VALIDATION_FRACTION = 0.2


@dataclass(frozen=True)
class EvidenceData:
    """Flat images ``x_*`` float32 ``(n, 64)`` with pixels in [0, 1]; labels int64 ``(n,)``."""

    x_train: torch.Tensor
    y_train: torch.Tensor
    x_val: torch.Tensor
    y_val: torch.Tensor
    x_test: torch.Tensor
    y_test: torch.Tensor

    def sizes(self) -> dict:
        return {"train": len(self.y_train), "val": len(self.y_val), "test": len(self.y_test)}


@lru_cache(maxsize=1)
def load_evidence_data() -> EvidenceData:
    """Train / validation / test split (1078 / 270 / 449 images), the same on every call."""
    digits = load_digits_split(test_fraction=TEST_FRACTION, seed=SPLIT_SEED)
    n = len(digits.y_train)
    order = torch.randperm(n, generator=torch.Generator().manual_seed(SPLIT_SEED + 1))
    n_val = int(round(VALIDATION_FRACTION * n))
    val, train = order[:n_val], order[n_val:]
    return EvidenceData(
        digits.x_train[train], digits.y_train[train],
        digits.x_train[val], digits.y_train[val],
        digits.x_test, digits.y_test,
    )


def as_model_input(x: torch.Tensor, model: str) -> torch.Tensor:
    """Reshape flat images ``(n, 64)`` for a model family.

    ``"mlp"``: ``(n, 64)``; ``"cnn"``: ``(n, 1, 8, 8)`` (one channel); ``"rnn"``: ``(n, 8, 8)``
    read as 8 time steps (rows) of 8 pixels each.
    """
    if x.dim() != 2 or x.shape[1] != 64:
        raise ValueError(f"x must have shape (n, 64), got {tuple(x.shape)}")
    if model == "mlp":
        return x
    if model == "cnn":
        return x.reshape(-1, 1, 8, 8)
    if model == "rnn":
        return x.reshape(-1, 8, 8)
    raise ValueError(f"model must be one of 'mlp', 'cnn', 'rnn', got {model!r}")
