r"""DeepNorm (Wang et al. 2022, "DeepNet"): post-LN with an up-weighted residual and a
down-scaled initialization, so that very deep post-LN stacks train.

A post-LN block computes ``x <- LN(x + G(x))``. DeepNorm computes

.. math:: x \leftarrow \mathrm{LN}(\alpha x + G(x)), \qquad
          \alpha = (2N)^{1/4}, \qquad \beta = (8N)^{-1/4}

for an encoder of ``N`` blocks, with the weights of the feed-forward layers and of the value
and output projections initialized with Xavier-normal gain :math:`\beta` (queries and keys
with gain 1). The residual dominates each sum, so each block's update moves the stream less
and the first steps of Adam cannot blow the model up.

Built on the book's :class:`~layernorm_tutorial.lab.common.transformer.TokenTransformer`
(post-LN form, ``norm_first=False``); only each block's residual weight and the
initialization change. Shapes: tokens ``(B, T)`` -> logits ``(B, T, vocab)``.
"""

from __future__ import annotations

import math

from torch import Tensor, nn

from layernorm_tutorial.lab.common.transformer import TokenTransformer, TransformerEncoderBlock
from layernorm_tutorial.lab.large_models.training import train_toy

__all__ = ["DeepNormBlock", "deepnorm_constants", "make_post_ln", "deepnorm_run", "ARMS"]

ARMS = ("post-LN", "post-LN + warm-up", "DeepNorm", "DeepNorm + warm-up")


def deepnorm_constants(num_layers: int) -> tuple[float, float]:
    """``(alpha, beta) = ((2N)^(1/4), (8N)^(-1/4))`` for an encoder of ``N`` blocks."""
    if num_layers < 1:
        raise ValueError(f"num_layers must be at least 1, got {num_layers}")
    return (2 * num_layers) ** 0.25, (8 * num_layers) ** -0.25


class DeepNormBlock(TransformerEncoderBlock):
    """Post-LN block with residual weight ``alpha``: ``x <- LN(alpha x + G(x))``."""

    alpha: float = 1.0

    def forward(self, x: Tensor, key_padding_mask: Tensor | None = None) -> Tensor:
        x = self.norm1(self.alpha * x + self.attention_branch(x, key_padding_mask))
        return self.norm2(self.alpha * x + self.feedforward_branch(x))


def _deepnorm_init(block: TransformerEncoderBlock, beta: float) -> None:
    d = block.self_attn.d_model
    w = block.self_attn.in_proj_weight.data                 # (3d, d): rows q, k, v
    nn.init.xavier_normal_(w[:d], gain=1.0)
    nn.init.xavier_normal_(w[d:2 * d], gain=1.0)
    nn.init.xavier_normal_(w[2 * d:], gain=beta)
    for linear in (block.self_attn.out_proj, block.linear1, block.linear2):
        nn.init.xavier_normal_(linear.weight, gain=beta)


def make_post_ln(num_layers: int, deepnorm: bool, vocab_size: int = 8, seq_len: int = 6,
                 d_model: int = 32, nhead: int = 2, dim_feedforward: int = 64) -> TokenTransformer:
    """The book's post-LN :class:`TokenTransformer`, optionally turned into DeepNorm."""
    model = TokenTransformer(vocab_size, vocab_size, seq_len, num_layers, d_model, nhead,
                             dim_feedforward, norm_first=False)
    if deepnorm:
        alpha, beta = deepnorm_constants(num_layers)
        for block in model.encoder.layers:
            block.__class__ = DeepNormBlock          # same parameters, new residual weight
            block.alpha = alpha
            _deepnorm_init(block, beta)
    return model


def deepnorm_run(arm: str, num_layers: int, seed: int, steps: int = 60, lr: float = 1e-2,
                 warmup_steps: int = 10, vocab_size: int = 8, seq_len: int = 6) -> dict:
    """One arm of :data:`ARMS` on the residual chapter's setting (Adam, lr 1e-2, vocab 8,
    length 6). Returns ``loss`` per step, ``final_loss`` and held-out ``accuracy``."""
    if arm not in ARMS:
        raise ValueError(f"arm must be one of {ARMS}, got {arm!r}")
    run = train_toy(lambda: make_post_ln(num_layers, arm.startswith("DeepNorm"), vocab_size,
                                         seq_len),
                    steps=steps, lr=lr, seed=seed,
                    warmup_steps=warmup_steps if "warm-up" in arm else 0,
                    seq_len=seq_len, vocab_size=vocab_size)
    return {"loss": run["loss"], "final_loss": run["final_loss"], "accuracy": run["accuracy"],
            "chance_loss": math.log(vocab_size)}
