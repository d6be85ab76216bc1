r"""Why BatchNorm's batch statistics are noisy in NLP batches, and PowerNorm's forward pass
(Shen et al. 2020).

A padded NLP batch ``(B, T, C)`` holds sentences of different lengths; BatchNorm over tokens
must mask the padding, so its statistics come from a different number of real tokens in
every batch, and tokens of one sentence share that sentence's offset, so the effective
sample is closer to ``B`` sentences than to ``B*T`` tokens. :func:`padded_batches` makes
such batches (made-up data: a per-sentence offset plus per-token noise);
:func:`masked_batch_variance` is BatchNorm's per-channel variance over the real tokens,
:func:`padded_batch_variance` the same computed over every position, padding included.

PowerNorm normalizes by a **running quadratic mean** instead of the current batch's
variance, with no mean subtraction:

.. math:: y = \gamma\odot\frac{x}{\sqrt{\psi^2_{t-1}+\epsilon}} + \beta, \qquad
          \psi^2_t = \alpha\,\psi^2_{t-1} + (1-\alpha)\,\frac{1}{|B|}\sum_{i\in B} x_i^2

(masked: the mean of squares runs over the real tokens), so a token's output in the forward
pass does not depend on its batch-mates. Its backward replaces the exact gradient through the
batch statistic by a running approximation (not implemented here).
"""

from __future__ import annotations

import torch
from torch import Tensor

__all__ = ["padded_batches", "masked_batch_variance", "padded_batch_variance",
           "PowerNormForward"]


def padded_batches(num_batches: int, batch: int = 8, max_len: int = 32, channels: int = 4,
                   seed: int = 0, min_len: int = 2,
                   sentence_std: float = 1.0) -> tuple[Tensor, Tensor]:
    """``(x, mask)``: ``x`` ``(num_batches, batch, max_len, channels)`` float64, padding
    positions zero; ``mask`` ``(num_batches, batch, max_len)`` True on real tokens. Each
    sentence has a length uniform in ``[min_len, max_len]`` and an offset
    ~ N(0, ``sentence_std``^2) shared by its tokens, plus unit token noise;
    ``sentence_std=0`` gives independent tokens."""
    if not 1 <= min_len <= max_len:
        raise ValueError(f"min_len must be in [1, max_len={max_len}], got {min_len}")
    g = torch.Generator().manual_seed(seed)
    lengths = torch.randint(min_len, max_len + 1, (num_batches, batch), generator=g)
    mask = torch.arange(max_len) < lengths[..., None]
    offset = sentence_std * torch.randn(num_batches, batch, 1, channels, generator=g,
                                        dtype=torch.float64)
    noise = torch.randn(num_batches, batch, max_len, channels, generator=g,
                        dtype=torch.float64)
    return (offset + noise) * mask[..., None], mask


def masked_batch_variance(x: Tensor, mask: Tensor) -> Tensor:
    """BatchNorm's biased variance per channel over the real tokens of each batch:
    ``x`` ``(..., B, T, C)``, ``mask`` ``(..., B, T)`` -> ``(..., C)``."""
    m = mask[..., None].to(x.dtype)
    n = m.sum((-3, -2))
    mean = (x * m).sum((-3, -2)) / n
    return (((x - mean[..., None, None, :]) * m) ** 2).sum((-3, -2)) / n


def padded_batch_variance(x: Tensor) -> Tensor:
    """The same variance taken over every position, padding zeros included: ``(..., C)``."""
    return x.var((-3, -2), correction=0)


class PowerNormForward:
    """PowerNorm's forward pass for ``(B, T, C)`` inputs with a padding mask: normalize by the
    running quadratic mean ``psi2`` of the *previous* steps, then update ``psi2`` with this
    batch's masked mean of squares (``alpha`` = weight of the old value, as in the paper)."""

    def __init__(self, channels: int, alpha: float = 0.9, eps: float = 1e-5):
        if not 0 <= alpha < 1:
            raise ValueError(f"alpha must be in [0, 1), got {alpha!r}")
        self.alpha, self.eps = alpha, eps
        self.psi2 = torch.ones(channels, dtype=torch.float64)

    def __call__(self, x: Tensor, mask: Tensor, training: bool = True) -> Tensor:
        out = x / torch.sqrt(self.psi2 + self.eps)
        if training:
            m = mask[..., None].to(x.dtype)
            quadratic_mean = (x * x * m).sum((0, 1)) / m.sum((0, 1))
            self.psi2 = self.alpha * self.psi2 + (1 - self.alpha) * quadratic_mean
        return out * mask[..., None]
