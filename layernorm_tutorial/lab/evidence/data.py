"""The data of the evidence chapter: scikit-learn's 8x8 digits, a fixed test set and a
train/validation split drawn by each seed.

The test set is the book-wide split of
:func:`layernorm_tutorial.lab.common.training.load_digits_split` (25 % of the 1,797 images,
seeded permutation with ``SPLIT_SEED``); it is the same for every seed, every experiment and
every chapter. The remaining 1,348 images are split into training and validation sets by a
permutation drawn from the run's seed, so two seeds differ in their initialization, their data
order *and* which images they train and validate on. The validation set is used only to choose
learning rates (on tuning seeds) and to measure rate ranges; the test set never influences any
choice.
"""

from __future__ import annotations

from functools import cache

import torch

from layernorm_tutorial.lab.common.training import (
    TEST_FRACTION,
    VALIDATION_FRACTION,
    DigitsSplits,
    load_digits_with_validation,
)
from layernorm_tutorial.lab.common.training import TEST_SPLIT_SEED as SPLIT_SEED

__all__ = ["EvidenceData", "load_evidence_data", "as_model_input", "SPLIT_SEED",
           "TEST_FRACTION", "VALIDATION_FRACTION"]

#: The evidence chapter's data are the book's shared splits
#: (:func:`~layernorm_tutorial.lab.common.training.load_digits_with_validation`).
EvidenceData = DigitsSplits


@cache
def load_evidence_data(seed: int = 0) -> EvidenceData:
    """Train / validation / test split (1078 / 270 / 449 images) of ``seed``.

    The test images are the same for every seed; the train/validation split is a permutation
    drawn from ``seed``. The same seed always returns the same (cached) tensors.
    """
    return load_digits_with_validation(seed)


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
