"""LayerNorm and BatchNorm in one network: a BN convolutional trunk with an LN attention head.

The rule of thumb "CNN -> BN, Transformer -> LN" suggests combining them where a network has
both parts. The model reads an ``(N, 1, 8, 8)`` digit::

    trunk: conv3x3(16) -> norm -> ReLU -> conv3x3(32) -> norm -> ReLU -> maxpool 2
           -> conv3x3(32) -> norm -> ReLU                       # (N, 32, 4, 4)
    head:  16 tokens of 32 features (+ learned position embedding)
           -> one pre-norm Transformer block (2 heads, FFN 64) -> norm -> mean over tokens
           -> Linear(10)

``trunk`` in ``("none", "bn", "ln_c")`` (``ln_c``: LayerNorm over the channels at each
position, ConvNeXt style); ``head`` in ``("none", "bn", "ln")`` is the norm of the block's
two sublayers and of the final token norm (``bn``: BatchNorm1d of every feature over the
batch *and* the 16 tokens, ``ln``: LayerNorm over each token's 32 features). Only the norms
change between variants; training is Adam at one fixed rate for every variant.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch
from torch import Tensor, nn

from layernorm_tutorial import nn as lnn
from layernorm_tutorial._seeding import seeded
from layernorm_tutorial.lab.common.transformer import TransformerEncoderBlock
from layernorm_tutorial.lab.evidence.data import EvidenceData, as_model_input, load_evidence_data
from layernorm_tutorial.lab.evidence.loop import train_for_steps
from layernorm_tutorial.lab.evidence.models import ChannelLayerNorm
from layernorm_tutorial.lab.evidence.runner import deterministic_torch, evaluate

__all__ = ["VARIANTS", "TokenBatchNorm", "HybridNet", "train_hybrid", "CombinationResult",
           "combination_sweep"]

# name -> (trunk norm, head norm)
VARIANTS = {
    "BN trunk + LN head": ("bn", "ln"),
    "BN everywhere": ("bn", "bn"),
    "LN everywhere": ("ln_c", "ln"),
    "no norm": ("none", "none"),
}
TRUNK_NORMS = ("none", "bn", "ln_c")
HEAD_NORMS = ("none", "bn", "ln")


class TokenBatchNorm(nn.Module):
    """BatchNorm of each of the ``D`` features over batch and tokens: ``(B, T, D) -> same``."""

    def __init__(self, d_model: int):
        super().__init__()
        self.norm = lnn.BatchNorm1d(d_model)

    def forward(self, x: Tensor) -> Tensor:
        b, t, d = x.shape
        return self.norm(x.reshape(b * t, d)).reshape(b, t, d)


def _trunk_norm(kind: str, channels: int, size: int) -> nn.Module:
    if kind == "bn":
        return lnn.BatchNorm2d(channels)
    if kind == "ln_c":
        return ChannelLayerNorm(channels)
    return nn.Identity()


def _head_norm(kind: str, d_model: int) -> nn.Module:
    if kind == "bn":
        return TokenBatchNorm(d_model)
    if kind == "ln":
        return lnn.LayerNorm(d_model)
    return nn.Identity()


class HybridNet(nn.Module):
    """Convolutional trunk + one-block attention head: ``(N, 1, 8, 8) -> (N, 10)`` logits."""

    def __init__(self, trunk: str = "bn", head: str = "ln", channels: int = 32):
        super().__init__()
        if trunk not in TRUNK_NORMS:
            raise ValueError(f"trunk must be one of {TRUNK_NORMS}, got {trunk!r}")
        if head not in HEAD_NORMS:
            raise ValueError(f"head must be one of {HEAD_NORMS}, got {head!r}")
        bias = trunk == "none"

        def block(c_in: int, c_out: int, size: int) -> list[nn.Module]:
            return [nn.Conv2d(c_in, c_out, 3, padding=1, bias=bias),
                    _trunk_norm(trunk, c_out, size), nn.ReLU()]

        self.trunk = nn.Sequential(*block(1, 16, 8), *block(16, channels, 8), nn.MaxPool2d(2),
                                   *block(channels, channels, 4))
        self.position = nn.Parameter(torch.zeros(1, 16, channels))
        self.block = TransformerEncoderBlock(channels, nhead=2, dim_feedforward=2 * channels,
                                             norm_first=True)
        self.block.norm1 = _head_norm(head, channels)
        self.block.norm2 = _head_norm(head, channels)
        self.final_norm = _head_norm(head, channels)
        self.classifier = nn.Linear(channels, 10)

    def forward(self, x: Tensor) -> Tensor:
        features = self.trunk(x)                                   # (N, C, 4, 4)
        tokens = features.flatten(2).transpose(1, 2) + self.position  # (N, 16, C)
        tokens = self.final_norm(self.block(tokens))
        return self.classifier(tokens.mean(dim=1))


def train_hybrid(variant: str, seed: int = 0, steps: int = 200, lr: float = 3e-3,
                 batch_size: int = 32, data: EvidenceData | None = None) -> dict:
    """Train one :data:`VARIANTS` entry with Adam; return its test and training accuracy.

    Returns ``{"variant", "seed", "steps", "finite", "test_acc", "train_acc"}`` (accuracies
    in evaluation mode, so BN uses its running statistics).
    """
    if variant not in VARIANTS:
        raise ValueError(f"variant must be one of {list(VARIANTS)}, got {variant!r}")
    data = load_evidence_data(seed) if data is None else data
    x_train = as_model_input(data.x_train, "cnn")
    x_test = as_model_input(data.x_test, "cnn")
    with deterministic_torch(), seeded(seed):
        model = HybridNet(*VARIANTS[variant])
        optimizer = torch.optim.Adam(model.parameters(), lr=lr)
        taken, finite = train_for_steps(model, optimizer, x_train, data.y_train, steps,
                                        batch_size, torch.Generator().manual_seed(30_000 + seed))
        test_acc = evaluate(model, x_test, data.y_test)[1]
        train_acc = evaluate(model, x_train, data.y_train)[1]
    return {"variant": variant, "seed": seed, "steps": taken, "finite": finite,
            "test_acc": test_acc, "train_acc": train_acc}


@dataclass(frozen=True)
class CombinationResult:
    """``test_acc[i, k]`` and ``train_acc[i, k]`` for ``variants[i]`` and ``seeds[k]``."""

    variants: tuple[str, ...]
    seeds: tuple[int, ...]
    test_acc: np.ndarray
    train_acc: np.ndarray


def combination_sweep(variants: Sequence[str] = tuple(VARIANTS),
                      seeds: Sequence[int] = (0, 1, 2, 3, 4), **kwargs) -> CombinationResult:
    """:func:`train_hybrid` for every (variant, seed); ``kwargs`` go to it."""
    if not variants or not seeds:
        raise ValueError("variants and seeds must each hold at least one value")
    data = kwargs.pop("data", None)   # default: each seed's own training split
    runs = [[train_hybrid(v, s, data=data, **kwargs) for s in seeds] for v in variants]
    return CombinationResult(tuple(variants), tuple(seeds),
                             np.array([[r["test_acc"] for r in row] for row in runs]),
                             np.array([[r["train_acc"] for r in row] for row in runs]))
