r"""A norm whose own feature axis is split across devices (tensor parallelism).

Per-head norms (Qwen3's and Gemma 3's QK-norm) and norms over a replicated activation stay
local, but a norm over a feature axis that tensor parallelism splits (for example a
QK-norm over the whole query projection, as in OLMo 2, when the heads are split across
devices) needs the whole row's statistics. For RMSNorm one number per row is enough:

.. math::

    \langle x^2\rangle = \frac{1}{D}\sum_{r}
        \underbrace{\textstyle\sum_{j\in r} x_j^2}_{\text{device } r},
    \qquad y_j = \gamma_j\,x_j / \sqrt{\langle x^2\rangle + \epsilon}

so each device computes its partial sum of squares, one all-reduce adds them, and each
device normalizes its own features. :func:`feature_sharded_rms_norm` simulates the devices in
one process and returns the partial sums that the all-reduce would add.
"""

from __future__ import annotations

import torch

__all__ = ["feature_sharded_rms_norm"]


def feature_sharded_rms_norm(x: torch.Tensor, weight: torch.Tensor | None, num_shards: int,
                             eps: float = 1e-6):
    """RMSNorm over the last dim of ``x`` ``(*, D)`` computed as ``num_shards`` devices would,
    each holding a contiguous block of features. Returns ``(y, partial_sums)``: ``y`` like
    ``x``, and ``partial_sums`` ``(num_shards, *)``, each device's sum of squares per row
    (what the all-reduce adds)."""
    d = x.shape[-1]
    if not 1 <= num_shards <= d:
        raise ValueError(f"num_shards must be between 1 and the feature count {d}, "
                         f"got {num_shards}")
    if weight is not None and tuple(weight.shape) != (d,):
        raise ValueError(f"weight must have shape ({d},), got {tuple(weight.shape)}")
    shards = torch.tensor_split(x, num_shards, dim=-1)
    partial = torch.stack([(s * s).sum(-1) for s in shards])      # one number per row each
    rstd = torch.rsqrt(partial.sum(0, keepdim=False) / d + eps).unsqueeze(-1)  # all-reduce
    gains = torch.tensor_split(weight, num_shards) if weight is not None else [None] * num_shards
    outs = [s * rstd if g is None else s * rstd * g for s, g in zip(shards, gains, strict=True)]
    return torch.cat(outs, dim=-1), partial
