r"""QK-norm and attention-logit growth (Dehghani et al. 2023; Wortsman et al. 2024), and
the other logit-stability tools run on the same toy model.

A pre-norm Transformer whose attention may normalize queries and keys per head before the dot
product (OLMo 2, Qwen3, Gemma 3 do this with RMSNorm):

.. math:: z_{ij} = \frac{\mathrm{N}(q_i) \cdot \mathrm{N}(k_j)}{\sqrt{d_h}}, \qquad
          |z_{ij}| \le \max_c |\gamma_{q,c}\,\gamma_{k,c}|\,\sqrt{d_h}

for RMSNorm without a bias, since :math:`\|\hat q\|_2 = \|\hat k\|_2 = \sqrt{d_h}`
(up to epsilon) and :math:`|\sum_c \gamma_{q,c}\gamma_{k,c}\hat q_c\hat k_c| \le
\max_c|\gamma_{q,c}\gamma_{k,c}|\,\|\hat q\|\,\|\hat k\|`. With unit gains the bound is
:math:`\sqrt{d_h}`. (It is *not* :math:`\|\gamma_q\|\|\gamma_k\|/\sqrt{d_h}`: with
:math:`d_h = 16` and :math:`\gamma_q = \gamma_k = 4e_1` a logit reaches 64, that formula
gives 4.)

Without the norm, the logit :math:`q_i \cdot k_j = x_i W_q W_k^\top x_j^\top` is quadratic in
the weights, so a large learning rate that grows :math:`W_q, W_k` grows the logits faster;
the softmax saturates to one-hot and the loss stops falling or blows up. With it, a logit is
bounded by the gains times :math:`\sqrt{d_h}` whatever the weights do (the gains themselves
are trained and can grow).

The other tools (:data:`ARMS`): ``softcap`` (Gemma 2: ``c tanh(z / c)`` on the attention
logits, ``c = 50``, and on the output logits, ``c = 30``, the defaults of
``transformers.Gemma2Config``), ``zloss`` (PaLM: ``1e-4 * log(Z)^2`` added to the loss, Z
the softmax normalizer of the output logits; :class:`ZLoss`), ``qkclip`` (Kimi K2's QK-Clip:
after each optimizer step, a head whose largest logit of that step exceeds ``tau = 100``
has its query and key weights scaled by ``sqrt(tau / S_max)``; :func:`qk_clip`).

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

__all__ = ["QKAttention", "QKBlock", "QKTransformer", "ZLoss", "qk_clip", "qk_run",
           "qk_sweep", "diverged", "largest_stable_lr", "first_diverged_lr", "QK_ARMS",
           "TOOL_ARMS", "ARMS", "GEMMA2_SOFTCAP", "PALM_Z_LOSS", "KIMI_TAU",
           "DIVERGENCE_MARGIN"]

QK_ARMS = ("none", "rmsnorm")
TOOL_ARMS = ("softcap", "zloss", "qkclip")
# The constants of the papers and codebases, not tuned on this task:
GEMMA2_SOFTCAP = {"attention": 50.0, "final": 30.0}   # transformers.Gemma2Config defaults
PALM_Z_LOSS = 1e-4                                     # PaLM sec. 5: 1e-4 * log^2 Z
KIMI_TAU = 100.0                                       # Kimi K2's QK-Clip threshold
ARMS = {"none": {}, "rmsnorm": {"qk_norm": "rmsnorm"},
        "softcap": {"attn_softcap": GEMMA2_SOFTCAP["attention"],
                    "final_softcap": GEMMA2_SOFTCAP["final"]},
        "zloss": {"z_loss": PALM_Z_LOSS}, "qkclip": {"qk_clip_tau": KIMI_TAU}}


def _softcap(z: Tensor, cap: float | None) -> Tensor:
    """``cap * tanh(z / cap)`` (Gemma 2's soft-capping); ``z`` unchanged if ``cap`` is None."""
    return z if cap is None else cap * torch.tanh(z / cap)


class QKAttention(nn.Module):
    """Multi-head self-attention; ``qk_norm`` is ``"none"``, ``"rmsnorm"`` or ``"layernorm"``
    applied per head over ``head_dim`` to q and k (one gain vector of ``head_dim`` each);
    ``softcap`` (optional) soft-caps the logits, ``c tanh(z / c)``."""

    def __init__(self, d_model: int, nhead: int, qk_norm: str = "none",
                 softcap: float | None = None):
        super().__init__()
        if qk_norm not in ("none", "rmsnorm", "layernorm"):
            raise ValueError(f"qk_norm must be 'none', 'rmsnorm' or 'layernorm', "
                             f"got {qk_norm!r}")
        if d_model % nhead:
            raise ValueError(f"d_model ({d_model}) must be divisible by nhead ({nhead})")
        if softcap is not None and not softcap > 0:
            raise ValueError(f"softcap must be a positive number or None, got {softcap!r}")
        self.nhead, self.head_dim, self.softcap = nhead, d_model // nhead, softcap
        self.qkv = nn.Linear(d_model, 3 * d_model)
        self.out = nn.Linear(d_model, d_model)
        make = {"rmsnorm": lambda: RMSNorm(self.head_dim, eps=1e-6),
                "layernorm": lambda: LayerNorm(self.head_dim)}.get(qk_norm)
        self.q_norm = make() if make else None
        self.k_norm = make() if make else None
        self.last_logits: Tensor | None = None

    def forward(self, x: Tensor) -> Tensor:
        b, t, d = x.shape
        q, k, v = self.qkv(x).reshape(b, t, 3, self.nhead, self.head_dim
                                      ).permute(2, 0, 3, 1, 4)
        if self.q_norm is not None:  # (B, H, T, head_dim): normalized over head_dim
            q, k = self.q_norm(q), self.k_norm(k)
        logits = q @ k.transpose(-2, -1) / math.sqrt(self.head_dim)   # (B, H, T, T)
        self.last_logits = logits.detach()       # before the cap: what QK-Clip watches
        out = (_softcap(logits, self.softcap).softmax(-1) @ v)
        return self.out(out.transpose(1, 2).reshape(b, t, d))


class QKBlock(nn.Module):
    """Pre-LN block: ``x + Attn(LN(x))``, then ``x + FFN(LN(x))``."""

    def __init__(self, d_model: int, nhead: int, dim_feedforward: int, qk_norm: str,
                 softcap: float | None = None):
        super().__init__()
        self.norm1, self.norm2 = LayerNorm(d_model), LayerNorm(d_model)
        self.attn = QKAttention(d_model, nhead, qk_norm, softcap)
        self.ffn = nn.Sequential(nn.Linear(d_model, dim_feedforward), nn.GELU(),
                                 nn.Linear(dim_feedforward, d_model))

    def forward(self, x: Tensor) -> Tensor:
        x = x + self.attn(self.norm1(x))
        return x + self.ffn(self.norm2(x))


class ZLoss(torch.autograd.Function):
    r"""Identity on the output logits ``(..., V)`` whose backward adds the gradient of
    ``coef * mean_tokens(log Z)^2`` (PaLM's z-loss), :math:`\log Z = \mathrm{logsumexp}`
    over the vocabulary: ``d/dz = coef * 2 log Z * softmax(z) / n_tokens``. The training loop
    then minimizes cross-entropy + z-loss without knowing about it."""

    @staticmethod
    def forward(ctx, logits: Tensor, coef: float) -> Tensor:
        ctx.save_for_backward(logits)
        ctx.coef = coef
        return logits.view_as(logits)

    @staticmethod
    def backward(ctx, grad: Tensor):
        (logits,) = ctx.saved_tensors
        lse = torch.logsumexp(logits, -1, keepdim=True)
        n_tokens = logits.numel() // logits.shape[-1]
        extra = ctx.coef * 2 * lse * torch.softmax(logits, -1) / n_tokens
        return grad + extra, None


class QKTransformer(nn.Module):
    """Token and position embeddings, ``num_layers`` :class:`QKBlock` s, final LN, head.

    ``attn_softcap``/``final_softcap`` soft-cap the attention/output logits (Gemma 2);
    ``z_loss`` adds PaLM's z-loss through :class:`ZLoss`; ``qk_clip_tau`` is read by
    :func:`qk_clip` (called after each optimizer step by :func:`qk_run`)."""

    def __init__(self, vocab_size: int = 16, max_len: int = 8, num_layers: int = 2,
                 d_model: int = 64, nhead: int = 4, dim_feedforward: int = 128,
                 qk_norm: str = "none", attn_softcap: float | None = None,
                 final_softcap: float | None = None, z_loss: float = 0.0,
                 qk_clip_tau: float | None = None):
        super().__init__()
        self.embed = nn.Embedding(vocab_size, d_model)
        self.position = nn.Parameter(torch.randn(max_len, d_model) * 0.02)
        self.blocks = nn.ModuleList(
            QKBlock(d_model, nhead, dim_feedforward, qk_norm, attn_softcap)
            for _ in range(num_layers))
        self.norm = LayerNorm(d_model)
        self.head = nn.Linear(d_model, vocab_size)
        self.final_softcap, self.z_loss, self.qk_clip_tau = final_softcap, z_loss, qk_clip_tau

    def forward(self, tokens: Tensor) -> Tensor:
        x = self.embed(tokens) + self.position[: tokens.shape[1]]
        for block in self.blocks:
            x = block(x)
        logits = _softcap(self.head(self.norm(x)), self.final_softcap)
        if self.z_loss and self.training and torch.is_grad_enabled():
            logits = ZLoss.apply(logits, self.z_loss)
        return logits

    def max_attention_logit(self) -> float:
        """Largest ``|z_ij|`` over all layers, heads and positions of the last forward pass."""
        return max(float(b.attn.last_logits.abs().max()) for b in self.blocks)


@torch.no_grad()
def qk_clip(model: QKTransformer, tau: float) -> int:
    r"""Kimi K2's QK-Clip on every attention layer, from the logits of the last forward pass:
    for each head with :math:`S_{\max}^h = \max z^h > \tau`, scale that head's query and key
    rows of ``qkv`` (weights and biases) by :math:`\sqrt{\gamma_h}`,
    :math:`\gamma_h = \tau / S_{\max}^h`, so the same input gives logits times
    :math:`\gamma_h`. Returns the number of heads clipped."""
    clipped = 0
    for block in model.blocks:
        attn = block.attn
        d, hd = attn.nhead * attn.head_dim, attn.head_dim
        s_max = attn.last_logits.amax(dim=(0, 2, 3))                  # (H,)
        for h in torch.nonzero(s_max > tau).flatten().tolist():
            scale = math.sqrt(tau / float(s_max[h]))
            for offset in (0, d):                                      # q rows, k rows
                rows = slice(offset + h * hd, offset + (h + 1) * hd)
                attn.qkv.weight[rows] *= scale
                attn.qkv.bias[rows] *= scale
            clipped += 1
    return clipped


#: A run that trained ends at least this many nats below chance, ``ln(vocab)``.
DIVERGENCE_MARGIN = 0.05


def diverged(final_loss: float, vocab_size: int = 16) -> bool:
    """A run diverged when its final loss is not finite or not at least
    :data:`DIVERGENCE_MARGIN` nats below chance, ``ln(vocab)``."""
    return not (math.isfinite(final_loss)
                and final_loss < math.log(vocab_size) - DIVERGENCE_MARGIN)


def qk_run(arm: str, lr: float, seed: int, steps: int = 200, warmup_steps: int = 10,
           **model_kw) -> dict:
    """Train one :class:`QKTransformer` of arm ``arm`` (a key of :data:`ARMS`) on the reverse
    task; record loss and max logit per step (QK-Clip applied after each step).

    Returns ``loss`` and ``max_logit`` (NumPy, one per step), ``final_loss``, ``accuracy``
    and ``clipped`` (heads clipped over the run, 0 unless ``qkclip``).
    """
    if arm not in ARMS:
        raise ValueError(f"arm must be one of {tuple(ARMS)}, got {arm!r}")
    config = {**ARMS[arm], **model_kw}
    clipped = [0]

    def probe(model):
        top = model.max_attention_logit()
        if model.qk_clip_tau is not None:
            clipped[0] += qk_clip(model, model.qk_clip_tau)
        return top

    run = train_toy(lambda: QKTransformer(**config), steps=steps, lr=lr, seed=seed,
                    warmup_steps=warmup_steps, probe=probe)
    return {"loss": run["loss"], "max_logit": np.array(run["probe"]),
            "final_loss": run["final_loss"], "accuracy": run["accuracy"],
            "clipped": clipped[0]}


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


def first_diverged_lr(final_losses_by_lr: dict, vocab_size: int = 16) -> float:
    """The first learning rate of the sweep, in increasing order, at which the run diverged
    (``inf`` if none did): with :func:`largest_stable_lr` it brackets the seed's true
    largest stable rate (interval-censored)."""
    for lr in sorted(final_losses_by_lr):
        if diverged(final_losses_by_lr[lr], vocab_size):
            return lr
    return math.inf
