r"""Tools that keep attention and output logits bounded: QK-norm's bound, soft-capping,
z-loss and QK-Clip, each as a few lines whose property a cell can assert.

QK-norm (RMSNorm over ``d_h`` features, gains :math:`\gamma_q, \gamma_k`, :math:`\epsilon\to0`)
maps a query to :math:`\hat q = \gamma_q\odot\sqrt{d_h}\,q/\lVert q\rVert`, so

.. math:: |z| = \frac{|\hat q\cdot\hat k|}{\sqrt{d_h}}
          \le \max_i|\gamma_{q,i}\gamma_{k,i}|\,\frac{\lVert\sqrt{d_h}\,u\rVert
          \lVert\sqrt{d_h}\,v\rVert}{\sqrt{d_h}} = \max_i|\gamma_{q,i}\gamma_{k,i}|\sqrt{d_h}

(:math:`u, v` unit vectors), attained when q and k point along the coordinate of the largest
gain product. Swin Transformer V2's scaled cosine attention (:func:`scaled_cosine_logits`)
uses :math:`\cos(q, k)/\tau` with a learned :math:`\tau \ge 0.01` per head, so
:math:`|z| \le 100` whatever the weights. Soft-capping (Gemma 2) replaces a logit
:math:`z` by :math:`c\tanh(z/c)`,
bounded by :math:`c`. z-loss (PaLM) adds :math:`\lambda(\log Z)^2` with
:math:`Z = \sum_j e^{z_j}`, whose gradient :math:`2\lambda\log Z\,\mathrm{softmax}(z)` pulls
:math:`\log Z` to 0. QK-Clip (Kimi K2) rescales :math:`W_q, W_k` of a head by
:math:`\sqrt{\tau/S_{\max}}` each when its largest logit :math:`S_{\max}` exceeds :math:`\tau`.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

__all__ = ["qk_normed_logit", "qk_norm_logit_bound", "old_qk_norm_bound", "soft_cap",
           "z_loss", "z_loss_gradient", "qk_clip", "stored_qk_gain_growth",
           "scaled_cosine_logits"]


def _rms_normalize(v: Tensor, gamma: Tensor) -> Tensor:
    return gamma * v / v.pow(2).mean(-1, keepdim=True).sqrt()


def qk_normed_logit(q: Tensor, k: Tensor, gamma_q: Tensor, gamma_k: Tensor) -> Tensor:
    """The logit ``RMSNorm(q; gamma_q) . RMSNorm(k; gamma_k) / sqrt(d_h)`` (eps = 0) for
    ``q, k`` of shape ``(..., d_h)``; gains ``(d_h,)``."""
    return (_rms_normalize(q, gamma_q) * _rms_normalize(k, gamma_k)).sum(-1) / \
        math.sqrt(q.shape[-1])


def qk_norm_logit_bound(gamma_q: Tensor, gamma_k: Tensor) -> float:
    """The attainable bound ``max_i |gamma_q,i gamma_k,i| sqrt(d_h)``."""
    return (gamma_q * gamma_k).abs().max().item() * math.sqrt(gamma_q.numel())


def old_qk_norm_bound(gamma_q: Tensor, gamma_k: Tensor) -> float:
    """The bound the book once stated, ``||gamma_q|| ||gamma_k|| / sqrt(d_h)`` (wrong)."""
    return (gamma_q.norm() * gamma_k.norm()).item() / math.sqrt(gamma_q.numel())


def soft_cap(z: Tensor, cap: float) -> Tensor:
    """Gemma 2's logit soft-capping ``cap * tanh(z / cap)``; ``|out| <= cap`` (equal
    only where tanh rounds to 1 in floating point)."""
    if not cap > 0:
        raise ValueError(f"cap must be positive, got {cap!r}")
    return cap * torch.tanh(z / cap)


def z_loss(logits: Tensor, coef: float = 1e-4) -> Tensor:
    """PaLM's auxiliary loss ``coef * mean(logsumexp(logits)^2)`` over the leading axes of
    ``logits`` ``(..., V)``."""
    return coef * torch.logsumexp(logits, -1).pow(2).mean()


def z_loss_gradient(logits: Tensor, coef: float = 1e-4) -> Tensor:
    """Closed form of ``d z_loss / d logits``: ``2 coef log Z softmax(z) / n_rows``."""
    rows = logits.numel() // logits.shape[-1]
    log_z = torch.logsumexp(logits, -1, keepdim=True)
    return 2 * coef * log_z * torch.softmax(logits, -1) / rows


def qk_clip(w_q: Tensor, w_k: Tensor, max_logit: float, tau: float) -> tuple[Tensor, Tensor]:
    """QK-Clip for one head: when ``max_logit > tau`` multiply ``w_q`` and ``w_k`` by
    ``sqrt(tau / max_logit)`` each (so every logit of that head scales by
    ``tau / max_logit``); otherwise return them unchanged."""
    if not tau > 0:
        raise ValueError(f"tau must be positive, got {tau!r}")
    factor = min(1.0, tau / max_logit) ** 0.5 if max_logit > 0 else 1.0
    return w_q * factor, w_k * factor


def stored_qk_gain_growth(qk: dict, head_dim: int, arm: str = "rmsnorm") -> dict:
    """From the large-models chapter's stored QK-norm sweep (``results["qk_norm"]``): per
    learning rate, the smallest and largest *final* max |attention logit| over the seeds and
    what they imply for the gains: the product ``max_i |gamma_q,i gamma_k,i|`` is at least
    ``max_logit / sqrt(head_dim)``, against 1 at initialization."""
    if arm not in qk["runs"]:
        raise ValueError(f"arm must be one of {sorted(qk['runs'])}, got {arm!r}")
    out = {}
    for lr, runs in qk["runs"][arm].items():
        final = [run["max_logit"][-1] for run in runs]
        out[lr] = {"min_logit": min(final), "max_logit": max(final),
                   "min_gain_product": min(final) / math.sqrt(head_dim),
                   "max_gain_product": max(final) / math.sqrt(head_dim)}
    return out


def scaled_cosine_logits(q: Tensor, k: Tensor, log_inv_tau: Tensor,
                         tau_min: float = 0.01) -> Tensor:
    """Swin Transformer V2's attention logits ``cos(q_i, k_j) / tau`` for ``q`` ``(..., T, d)``
    and ``k`` ``(..., S, d)``: the learned parameter is ``log(1 / tau)`` (``log_inv_tau``,
    broadcast over the leading dimensions, one per head), clamped so that ``tau >= tau_min``;
    every logit is then at most ``1 / tau_min`` in magnitude. Returns ``(..., T, S)``."""
    if not tau_min > 0:
        raise ValueError(f"tau_min must be positive, got {tau_min!r}")
    cosine = torch.nn.functional.normalize(q, dim=-1) @ \
        torch.nn.functional.normalize(k, dim=-1).transpose(-2, -1)
    return cosine * torch.clamp(log_inv_tau, max=math.log(1 / tau_min)).exp()
