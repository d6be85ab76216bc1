r"""QK-norm and attention-logit growth (Dehghani et al. 2023; Wortsman et al. 2023).

A pre-norm Transformer whose attention may normalize queries and keys per head before the dot
product (OLMo 2, Qwen3, Gemma 3 do this with RMSNorm):

.. math:: z_{ij} = \frac{\mathrm{N}(q_i) \cdot \mathrm{N}(k_j)}{\sqrt{d_h}}, \qquad
          |z_{ij}| \le \frac{\|\gamma_q\|\,\|\gamma_k\|}{\sqrt{d_h}} \cdot \ldots

Without the norm, the logit :math:`q_i \cdot k_j = x_i W_q W_k^\top x_j^\top` is quadratic in
the weights, so a large learning rate that grows :math:`W_q, W_k` grows the logits faster;
the softmax saturates to one-hot and the loss stops falling or blows up. With it, a logit is
bounded by the norm's gain times :math:`\sqrt{d_h}` whatever the weights do.

Shapes: tokens ``(B, T)`` -> logits ``(B, T, vocab)``; attention logits ``(B, H, T, T)``.
The largest absolute attention logit of the last forward pass is kept in
``model.max_attention_logit()``.
"""

from __future__ import annotations

import math

import numpy as np
import torch
from torch import Tensor, nn

from layernorm_tutorial.lab.large_models.training import train_toy
from layernorm_tutorial.nn import LayerNorm, RMSNorm

__all__ = ["QKAttention", "QKBlock", "QKTransformer", "qk_run", "qk_sweep", "diverged",
           "largest_stable_lr", "QK_ARMS"]

QK_ARMS = ("none", "rmsnorm")


class QKAttention(nn.Module):
    """Multi-head self-attention; ``qk_norm`` is ``"none"``, ``"rmsnorm"`` or ``"layernorm"``
    applied per head over ``head_dim`` to q and k (one gain vector of ``head_dim`` each)."""

    def __init__(self, d_model: int, nhead: int, qk_norm: str = "none"):
        super().__init__()
        if qk_norm not in ("none", "rmsnorm", "layernorm"):
            raise ValueError(f"qk_norm must be 'none', 'rmsnorm' or 'layernorm', got {qk_norm!r}")
        if d_model % nhead:
            raise ValueError(f"d_model ({d_model}) must be divisible by nhead ({nhead})")
        self.nhead, self.head_dim = nhead, d_model // nhead
        self.qkv = nn.Linear(d_model, 3 * d_model)
        self.out = nn.Linear(d_model, d_model)
        make = {"rmsnorm": lambda: RMSNorm(self.head_dim, eps=1e-6),
                "layernorm": lambda: LayerNorm(self.head_dim)}.get(qk_norm)
        self.q_norm = make() if make else None
        self.k_norm = make() if make else None
        self.last_logits: Tensor | None = None

    def forward(self, x: Tensor) -> Tensor:
        b, t, d = x.shape
        q, k, v = self.qkv(x).reshape(b, t, 3, self.nhead, self.head_dim).permute(2, 0, 3, 1, 4)
        if self.q_norm is not None:  # (B, H, T, head_dim): normalized over head_dim
            q, k = self.q_norm(q), self.k_norm(k)
        logits = q @ k.transpose(-2, -1) / math.sqrt(self.head_dim)   # (B, H, T, T)
        self.last_logits = logits.detach()
        out = (logits.softmax(-1) @ v).transpose(1, 2).reshape(b, t, d)
        return self.out(out)


class QKBlock(nn.Module):
    """Pre-LN block: ``x + Attn(LN(x))``, then ``x + FFN(LN(x))``."""

    def __init__(self, d_model: int, nhead: int, dim_feedforward: int, qk_norm: str):
        super().__init__()
        self.norm1, self.norm2 = LayerNorm(d_model), LayerNorm(d_model)
        self.attn = QKAttention(d_model, nhead, qk_norm)
        self.ffn = nn.Sequential(nn.Linear(d_model, dim_feedforward), nn.GELU(),
                                 nn.Linear(dim_feedforward, d_model))

    def forward(self, x: Tensor) -> Tensor:
        x = x + self.attn(self.norm1(x))
        return x + self.ffn(self.norm2(x))


class QKTransformer(nn.Module):
    """Token and position embeddings, ``num_layers`` :class:`QKBlock` s, final LN, head."""

    def __init__(self, vocab_size: int = 16, max_len: int = 8, num_layers: int = 2,
                 d_model: int = 64, nhead: int = 4, dim_feedforward: int = 128,
                 qk_norm: str = "none"):
        super().__init__()
        self.embed = nn.Embedding(vocab_size, d_model)
        self.position = nn.Parameter(torch.randn(max_len, d_model) * 0.02)
        self.blocks = nn.ModuleList(QKBlock(d_model, nhead, dim_feedforward, qk_norm)
                                    for _ in range(num_layers))
        self.norm = LayerNorm(d_model)
        self.head = nn.Linear(d_model, vocab_size)

    def forward(self, tokens: Tensor) -> Tensor:
        x = self.embed(tokens) + self.position[: tokens.shape[1]]
        for block in self.blocks:
            x = block(x)
        return self.head(self.norm(x))

    def max_attention_logit(self) -> float:
        """Largest ``|z_ij|`` over all layers, heads and positions of the last forward pass."""
        return max(float(b.attn.last_logits.abs().max()) for b in self.blocks)


def diverged(final_loss: float, vocab_size: int = 16) -> bool:
    """A run diverged when its final loss is not finite or not below chance, ``ln(vocab)``."""
    return not (math.isfinite(final_loss) and final_loss < math.log(vocab_size) - 0.05)


def qk_run(qk_norm: str, lr: float, seed: int, steps: int = 200, warmup_steps: int = 10,
           **model_kw) -> dict:
    """Train one :class:`QKTransformer` on the reverse task; record loss and max logit per step.

    Returns ``loss`` and ``max_logit`` (NumPy, one per step), ``final_loss``, ``accuracy``.
    """
    run = train_toy(lambda: QKTransformer(qk_norm=qk_norm, **model_kw), steps=steps, lr=lr,
                    seed=seed, warmup_steps=warmup_steps,
                    probe=lambda m: m.max_attention_logit())
    return {"loss": run["loss"], "max_logit": np.array(run["probe"]),
            "final_loss": run["final_loss"], "accuracy": run["accuracy"]}


def qk_sweep(lrs, seeds, arms=QK_ARMS, steps: int = 200, **kw) -> dict:
    """Every arm at every learning rate and seed: ``{arm: {lr: [run, ...]}}`` (runs as in
    :func:`qk_run`, one per seed in order)."""
    return {arm: {float(lr): [qk_run(arm, lr, s, steps=steps, **kw) for s in seeds]
                  for lr in lrs} for arm in arms}


def largest_stable_lr(final_losses_by_lr: dict, vocab_size: int = 16) -> float:
    """Largest learning rate of the sweep below which no run diverged (for one seed and arm):
    ``{lr: final_loss}`` -> the last lr, in increasing order, before the first divergence
    (0.0 if the smallest already diverged)."""
    stable = 0.0
    for lr in sorted(final_losses_by_lr):
        if diverged(final_losses_by_lr[lr], vocab_size):
            break
        stable = lr
    return stable
