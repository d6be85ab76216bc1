"""A compact Transformer encoder block in post-LN and pre-LN form, on the package's LayerNorm.

Shapes are batch-first: ``x`` is ``(B, T, d_model)``. The two arrangements differ only in
where the normalization sits relative to the residual addition:

* post-LN (Vaswani et al., 2017, "Add & Norm"):
  ``x = LN(x + SelfAttn(x))``;  ``x = LN(x + FFN(x))``
* pre-LN (used by GPT-2, Radford et al., 2019; Wang et al., 2019 train deep translation
  encoders with it; analysed by Xiong et al., 2020):
  ``x = x + SelfAttn(LN(x))``;  ``x = x + FFN(LN(x))``, and a final LN after the last block,
  because nothing else normalizes the residual stream before the output head.

Parameter names follow ``torch.nn.TransformerEncoderLayer`` (``self_attn.in_proj_weight``,
``self_attn.out_proj.*``, ``linear1``, ``linear2``, ``norm1``, ``norm2``), so a torch layer's
``state_dict`` loads into :class:`TransformerEncoderBlock` unchanged and the two compute the
same function (tested). ``norm="rmsnorm"`` swaps in the package's RMSNorm as a drop-in.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as TF
from torch import Tensor, nn

from layernorm_tutorial.nn import LayerNorm, RMSNorm

__all__ = [
    "MultiHeadSelfAttention",
    "TokenTransformer",
    "TransformerEncoder",
    "TransformerEncoderBlock",
    "make_norm",
]

_NORMS = ("layernorm", "rmsnorm")


def make_norm(kind: str, d_model: int, eps: float = 1e-5) -> nn.Module:
    """The package's ``LayerNorm(d_model)`` or ``RMSNorm(d_model)`` by name."""
    if kind == "layernorm":
        return LayerNorm(d_model, eps=eps)
    if kind == "rmsnorm":
        return RMSNorm(d_model, eps=eps)
    raise ValueError(f"norm must be one of {_NORMS}, got {kind!r}")


class MultiHeadSelfAttention(nn.Module):
    """Scaled dot-product self-attention with ``nhead`` heads.

    ``[Q, K, V] = x W_in^T + b_in`` (``in_proj_weight (3D, D)``), per head
    ``softmax(Q K^T / sqrt(D / nhead)) V``, heads concatenated, then ``out_proj``.
    ``key_padding_mask (B, T)`` is True where a key is padding (it receives no attention).
    """

    def __init__(self, d_model: int, nhead: int, dropout: float = 0.0):
        super().__init__()
        if d_model % nhead != 0:
            raise ValueError(f"d_model ({d_model}) must be divisible by nhead ({nhead})")
        self.d_model, self.nhead = d_model, nhead
        self.in_proj_weight = nn.Parameter(torch.empty(3 * d_model, d_model))
        self.in_proj_bias = nn.Parameter(torch.zeros(3 * d_model))
        self.out_proj = nn.Linear(d_model, d_model)
        self.dropout = nn.Dropout(dropout)
        nn.init.xavier_uniform_(self.in_proj_weight)
        nn.init.zeros_(self.out_proj.bias)

    def forward(self, x: Tensor, key_padding_mask: Tensor | None = None) -> Tensor:
        b, t, d = x.shape
        q, k, v = TF.linear(x, self.in_proj_weight, self.in_proj_bias).chunk(3, dim=-1)
        head_dim = d // self.nhead
        q, k, v = (z.reshape(b, t, self.nhead, head_dim).transpose(1, 2) for z in (q, k, v))
        scores = q @ k.transpose(-2, -1) / math.sqrt(head_dim)  # (B, nhead, T, T)
        if key_padding_mask is not None:
            scores = scores.masked_fill(key_padding_mask[:, None, None, :], float("-inf"))
        weights = self.dropout(scores.softmax(dim=-1))
        out = (weights @ v).transpose(1, 2).reshape(b, t, d)
        return self.out_proj(out)


class TransformerEncoderBlock(nn.Module):
    """One encoder block; ``norm_first=False`` is post-LN, ``True`` is pre-LN.

    ``FFN(x) = linear2(dropout(activation(linear1(x))))`` with hidden size ``dim_feedforward``.
    ``forward(x (B, T, d_model), key_padding_mask=None) -> (B, T, d_model)``. With
    ``dropout=0`` (the default) it computes the same function as
    ``torch.nn.TransformerEncoderLayer(..., batch_first=True, norm_first=...)``.
    """

    def __init__(self, d_model: int, nhead: int, dim_feedforward: int = 2048,
                 dropout: float = 0.0, activation: str = "relu", norm_first: bool = False,
                 norm: str = "layernorm", eps: float = 1e-5):
        super().__init__()
        if activation not in ("relu", "gelu"):
            raise ValueError(f"activation must be 'relu' or 'gelu', got {activation!r}")
        self.norm_first = norm_first
        self.self_attn = MultiHeadSelfAttention(d_model, nhead, dropout)
        self.linear1 = nn.Linear(d_model, dim_feedforward)
        self.linear2 = nn.Linear(dim_feedforward, d_model)
        self.norm1 = make_norm(norm, d_model, eps)
        self.norm2 = make_norm(norm, d_model, eps)
        self.dropout = nn.Dropout(dropout)
        self.dropout1 = nn.Dropout(dropout)
        self.dropout2 = nn.Dropout(dropout)
        self.activation = TF.relu if activation == "relu" else TF.gelu

    def attention_branch(self, x: Tensor, key_padding_mask: Tensor | None = None) -> Tensor:
        return self.dropout1(self.self_attn(x, key_padding_mask))

    def feedforward_branch(self, x: Tensor) -> Tensor:
        return self.dropout2(self.linear2(self.dropout(self.activation(self.linear1(x)))))

    def forward(self, x: Tensor, key_padding_mask: Tensor | None = None
                ) -> Tensor:
        if x.dim() != 3:
            raise ValueError("x must have shape (batch, time, d_model), "
                             f"got {tuple(x.shape)}")
        mask = key_padding_mask
        if self.norm_first:  # pre-LN: the stream itself is never normalized
            x = x + self.attention_branch(self.norm1(x), mask)
            return x + self.feedforward_branch(self.norm2(x))
        # post-LN: Add & Norm
        x = self.norm1(x + self.attention_branch(x, mask))
        return self.norm2(x + self.feedforward_branch(x))


class TransformerEncoder(nn.Module):
    """``num_layers`` blocks, then an optional final norm (``norm`` attribute).

    ``final_norm=None`` means "a final norm exactly when ``norm_first``" (pre-LN needs one,
    post-LN already ends with one). Same layout as ``torch.nn.TransformerEncoder`` with
    ``layers.{i}.*`` and ``norm.*`` state_dict keys.
    """

    def __init__(self, num_layers: int, d_model: int, nhead: int, dim_feedforward: int = 2048,
                 dropout: float = 0.0, activation: str = "relu", norm_first: bool = False,
                 norm: str = "layernorm", final_norm: bool | None = None, eps: float = 1e-5):
        super().__init__()
        if num_layers <= 0:
            raise ValueError(f"num_layers must be a positive int, got {num_layers!r}")
        self.layers = nn.ModuleList(
            TransformerEncoderBlock(d_model, nhead, dim_feedforward, dropout, activation,
                                    norm_first, norm, eps)
            for _ in range(num_layers)
        )
        if final_norm is None:
            final_norm = norm_first
        self.norm = make_norm(norm, d_model, eps) if final_norm else None

    def forward(self, x: Tensor, key_padding_mask: Tensor | None = None) -> Tensor:
        for layer in self.layers:
            x = layer(x, key_padding_mask)
        return x if self.norm is None else self.norm(x)


class TokenTransformer(nn.Module):
    """Token + learned position embeddings, a :class:`TransformerEncoder`, a linear head.

    ``forward(tokens (B, T) long) -> logits (B, T, num_classes)``: one prediction per
    position, for the toy sequence tasks in the book's residual chapter.
    """

    def __init__(self, vocab_size: int, num_classes: int, max_len: int, num_layers: int,
                 d_model: int = 32, nhead: int = 2, dim_feedforward: int = 64,
                 norm_first: bool = True, norm: str = "layernorm",
                 final_norm: bool | None = None):
        super().__init__()
        self.embed = nn.Embedding(vocab_size, d_model)
        self.position = nn.Parameter(torch.randn(max_len, d_model) * 0.02)
        self.encoder = TransformerEncoder(num_layers, d_model, nhead, dim_feedforward,
                                          norm_first=norm_first, norm=norm,
                                          final_norm=final_norm)
        self.head = nn.Linear(d_model, num_classes)

    def forward(self, tokens: Tensor) -> Tensor:
        x = self.embed(tokens) + self.position[: tokens.shape[1]]
        return self.head(self.encoder(x))

