"""A compact Transformer encoder block in post-LN and pre-LN form, on the package's LayerNorm.

Shapes are batch-first: ``x`` is ``(B, T, d_model)``. The two arrangements differ only in
where the normalization sits relative to the residual addition:

* post-LN (Vaswani et al., 2017, "Add & Norm"):
  ``x = LN(x + SelfAttn(x))``;  ``x = LN(x + FFN(x))``
* pre-LN (Xiong et al., 2020):
  ``x = x + SelfAttn(LN(x))``;  ``x = x + FFN(LN(x))``, and a final LN after the last block,
  because nothing else normalizes the residual stream before the output head.

Parameter names follow ``torch.nn.TransformerEncoderLayer`` (``self_attn.in_proj_weight``,
``self_attn.out_proj.*``, ``linear1``, ``linear2``, ``norm1``, ``norm2``), so a torch layer's
``state_dict`` loads into :class:`TransformerEncoderBlock` unchanged and the two compute the
same function (tested). ``norm="rmsnorm"`` swaps in the package's RMSNorm as a drop-in.
"""

from __future__ import annotations

import math

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor, nn

from .nn import LayerNorm, RMSNorm

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
        q, k, v = F.linear(x, self.in_proj_weight, self.in_proj_bias).chunk(3, dim=-1)
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
        self.activation = F.relu if activation == "relu" else F.gelu

    def attention_branch(self, x: Tensor, key_padding_mask: Tensor | None = None) -> Tensor:
        return self.dropout1(self.self_attn(x, key_padding_mask))

    def feedforward_branch(self, x: Tensor) -> Tensor:
        return self.dropout2(self.linear2(self.dropout(self.activation(self.linear1(x)))))

    def forward(self, x: Tensor, key_padding_mask: Tensor | None = None) -> Tensor:
        if x.dim() != 3:
            raise ValueError(f"x must have shape (batch, time, d_model), got {tuple(x.shape)}")
        if self.norm_first:  # pre-LN: the residual stream itself is never normalized
            x = x + self.attention_branch(self.norm1(x), key_padding_mask)
            return x + self.feedforward_branch(self.norm2(x))
        x = self.norm1(x + self.attention_branch(x, key_padding_mask))  # post-LN: Add & Norm
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


# --------------------------------------------------------------------------------------------
# Experiments used by the book's residual chapter (CPU-sized)
# --------------------------------------------------------------------------------------------


def _mlp_branch(width: int, generator: torch.Generator, with_norm: bool):
    """``F(x) = W2 relu(W1 LN(x))`` (or without LN), He-initialized W1, ``Var(W2) = 1/width``."""
    w1 = torch.randn(width, width, generator=generator, dtype=torch.float64) * math.sqrt(2 / width)
    w2 = torch.randn(width, width, generator=generator, dtype=torch.float64) / math.sqrt(width)
    norm = LayerNorm(width).double() if with_norm else None

    def branch(x: Tensor) -> Tensor:
        z = norm(x) if norm is not None else x
        return torch.relu(z @ w1.T) @ w2.T

    return branch


def residual_variance_by_depth(depth: int = 40, width: int = 256, batch_size: int = 512,
                               architecture: str = "residual", seed: int = 0) -> dict:
    """Track the activation variance ``v_l = Var(x_l)`` through a random deep stack.

    ``architecture``: ``"plain"`` (``x_{l+1} = F(x_l)``, LN at the start of every F),
    ``"residual"`` (``x_{l+1} = x_l + F(x_l)``, LN inside F: the pre-LN arrangement) or
    ``"residual_no_norm"`` (``x_{l+1} = x_l + F(x_l)`` without LN). F is a two-layer ReLU MLP
    (see :func:`_mlp_branch`). ``x_0 ~ N(0, 1)``, float64, no training.

    Returns NumPy arrays: ``variance`` (``depth + 1`` values, ``v_0 .. v_depth``),
    ``branch_variance`` (``Var(F(x_l))``, ``depth`` values), ``predicted`` (``depth``
    values, ``v_l + Var(F(x_l))`` for residual stacks and ``Var(F(x_l))`` for plain ones,
    each computed from the measured quantities of layer ``l``) and ``input_correlation``
    (``depth + 1`` values, the correlation of the entries of ``x_l`` with those of ``x_0``).
    """
    if architecture not in ("plain", "residual", "residual_no_norm"):
        raise ValueError("architecture must be 'plain', 'residual' or 'residual_no_norm', "
                         f"got {architecture!r}")
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(batch_size, width, generator=g, dtype=torch.float64)
    x0 = x.clone()
    variance, branch_variance, predicted = [float(x.var())], [], []
    correlation = [1.0]
    with torch.no_grad():
        for _ in range(depth):
            f = _mlp_branch(width, g, with_norm=architecture != "residual_no_norm")(x)
            branch_variance.append(float(f.var()))
            if architecture == "plain":
                predicted.append(float(f.var()))
                x = f
            else:
                predicted.append(float(x.var()) + float(f.var()))
                x = x + f
            variance.append(float(x.var()))
            correlation.append(float(torch.corrcoef(torch.stack([x.flatten(),
                                                                 x0.flatten()]))[0, 1]))
    return {"variance": np.array(variance), "branch_variance": np.array(branch_variance),
            "predicted": np.array(predicted), "input_correlation": np.array(correlation)}


def reverse_task_batch(batch_size: int, seq_len: int = 8, vocab_size: int = 16,
                       generator: torch.Generator | None = None):
    """Toy task: random tokens ``(B, T)`` and the same sequence reversed as per-position targets."""
    tokens = torch.randint(0, vocab_size, (batch_size, seq_len), generator=generator)
    return tokens, tokens.flip(dims=[1])


def gradient_norm_per_layer(num_layers: int, norm_first: bool, d_model: int = 32,
                            nhead: int = 2, dim_feedforward: int = 64, seq_len: int = 8,
                            vocab_size: int = 16, batch_size: int = 64, seed: int = 0):
    """At initialization, ``||dL/dW||`` of each block's FFN output weight ``linear2.weight``.

    ``L`` is the cross-entropy of a :class:`TokenTransformer` on one batch of the reverse task;
    pre-LN models get the final LN. This is the quantity of Xiong et al. (2020), Fig. 3.
    Returns a NumPy array of ``num_layers`` norms, layer 1 (nearest the input) first.
    """
    torch.manual_seed(seed)
    model = TokenTransformer(vocab_size, vocab_size, seq_len, num_layers, d_model, nhead,
                             dim_feedforward, norm_first=norm_first)
    tokens, targets = reverse_task_batch(batch_size, seq_len, vocab_size,
                                         torch.Generator().manual_seed(seed + 1))
    logits = model(tokens)
    F.cross_entropy(logits.reshape(-1, vocab_size), targets.reshape(-1)).backward()
    return np.array([float(layer.linear2.weight.grad.norm()) for layer in model.encoder.layers])


def warmup_factor(step: int, warmup_steps: int) -> float:
    """Linear warm-up: ``min(1, (step + 1) / warmup_steps)``; 1 when ``warmup_steps == 0``."""
    if warmup_steps < 0:
        raise ValueError(f"warmup_steps must be >= 0, got {warmup_steps!r}")
    return 1.0 if warmup_steps == 0 else min(1.0, (step + 1) / warmup_steps)


def train_reverse_task(num_layers: int, norm_first: bool, steps: int = 100, lr: float = 1e-3,
                       warmup_steps: int = 0, d_model: int = 32, nhead: int = 2,
                       dim_feedforward: int = 64, seq_len: int = 8, vocab_size: int = 16,
                       batch_size: int = 32, seed: int = 0) -> dict:
    """Train a small :class:`TokenTransformer` with Adam to reverse token sequences.

    Learning rate ``lr * warmup_factor(step, warmup_steps)``. Fresh random batches each step
    (a seeded generator), so there is no overfitting. Returns ``{"loss": [...] (one per step),
    "accuracy": float}``: the per-token accuracy on a held-out batch of 512 sequences after
    training (chance is ``1 / vocab_size``).
    """
    torch.manual_seed(seed)
    model = TokenTransformer(vocab_size, vocab_size, seq_len, num_layers, d_model, nhead,
                             dim_feedforward, norm_first=norm_first)
    optimizer = torch.optim.Adam(model.parameters(), lr=lr, fused=True)  # fewer kernel calls
    schedule = torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda step: warmup_factor(step, warmup_steps))
    g = torch.Generator().manual_seed(seed + 1)
    losses = []
    for _ in range(steps):
        tokens, targets = reverse_task_batch(batch_size, seq_len, vocab_size, g)
        loss = F.cross_entropy(model(tokens).reshape(-1, vocab_size), targets.reshape(-1))
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        schedule.step()
        losses.append(float(loss.detach()))
    tokens, targets = reverse_task_batch(512, seq_len, vocab_size,
                                         torch.Generator().manual_seed(seed + 10_000))
    with torch.no_grad():
        accuracy = float((model(tokens).argmax(-1) == targets).float().mean())
    return {"loss": losses, "accuracy": accuracy}


def stack_output_spread(num_layers: int, norm_first: bool, final_norm: bool | None = None,
                        d_model: int = 32, nhead: int = 2, dim_feedforward: int = 64,
                        seq_len: int = 8, batch_size: int = 64, seed: int = 0) -> dict:
    """At initialization, the spread of the residual stream before and after the final norm.

    Runs a :class:`TransformerEncoder` on ``N(0, 1)`` inputs ``(batch_size, seq_len, d_model)``
    and returns ``{"stream_std": ..., "output_std": ...}``: the standard deviation of the
    last block's output (the residual stream) and of the encoder's output (after the final
    norm, if any), both as floats.
    """
    torch.manual_seed(seed)
    encoder = TransformerEncoder(num_layers, d_model, nhead, dim_feedforward,
                                 norm_first=norm_first, final_norm=final_norm)
    x = torch.randn(batch_size, seq_len, d_model, generator=torch.Generator().manual_seed(seed))
    with torch.no_grad():
        stream = x
        for layer in encoder.layers:
            stream = layer(stream)
        out = stream if encoder.norm is None else encoder.norm(stream)
    return {"stream_std": float(stream.std()), "output_std": float(out.std())}
