r"""What every "BatchNorm is the wrong choice here" case has in common: in training mode a
sample's output depends on the other samples of its batch.

For a batch ``x`` of shape ``(N, C, L)`` and a normalization ``norm``,
:func:`cross_sample_influence` returns :math:`\max_{c,c'} |\partial y_{0c\cdot}/\partial
x_{1c'\cdot}|`, the largest entry of the Jacobian of sample 0's output with respect to sample
1's input. It is 0 for every norm whose statistics come from one sample (LayerNorm,
GroupNorm, InstanceNorm, RMSNorm), for weight normalization (it normalizes weights, not
activations) and for BatchNorm in evaluation mode (fixed running statistics), and positive
only for training-mode BatchNorm. That coupling is what breaks per-sample gradients (DP-SGD,
a WGAN-GP critic's gradient penalty), leaks information between the samples of a batch
(contrastive learning), makes the output depend on batch size, padding and batch
composition, and needs synchronization across devices.
"""

from __future__ import annotations

import torch

from layernorm_tutorial import functional as LF
from layernorm_tutorial import weight_norm as wn

__all__ = ["NORMS", "cross_sample_influence"]

F64 = torch.float64


def _norms(channels: int, seed: int) -> dict:
    g = torch.Generator().manual_seed(seed)
    running_mean = torch.randn(channels, generator=g, dtype=F64)
    running_var = torch.rand(channels, generator=g, dtype=F64) + 0.5
    v = torch.randn(channels, channels, generator=g, dtype=F64)
    gain = torch.ones(channels, 1, dtype=F64)

    def weight_normalized(t):            # a 1x1 convolution with w = g v / |v|
        return torch.einsum("oc,ncl->nol", wn.weight_norm(v, gain, dim=0), t)

    return {
        "BatchNorm, training": lambda t: LF.batch_norm(t, None, None, training=True),
        "BatchNorm, evaluation": lambda t: LF.batch_norm(t, running_mean, running_var,
                                                         training=False),
        "LayerNorm": lambda t: LF.layer_norm(t, t.shape[1:]),
        "GroupNorm (G=2)": lambda t: LF.group_norm(t, 2),
        "InstanceNorm": lambda t: LF.instance_norm(t),
        "RMSNorm": lambda t: LF.rms_norm(t, t.shape[1:]),
        "weight norm": weight_normalized,
    }


NORMS = tuple(_norms(4, 0))


def cross_sample_influence(norm: str, *, batch: int = 6, channels: int = 4, length: int = 5,
                           seed: int = 0) -> float:
    """``max |d y[0] / d x[1]|`` for ``norm`` (one of :data:`NORMS`) on a float64 batch of
    shape ``(batch, channels, length)``."""
    table = _norms(channels, seed)
    if norm not in table:
        raise ValueError(f"norm must be one of {NORMS}, got {norm!r}")
    if batch < 2:
        raise ValueError(f"batch must be at least 2, got {batch}")
    g = torch.Generator().manual_seed(seed + 1)
    x = torch.randn(batch, channels, length, generator=g, dtype=F64) * 2.0 + 1.0
    fn = table[norm]

    def sample0(second):
        return fn(torch.cat([x[:1], second.unsqueeze(0), x[2:]]))[0]

    jac = torch.autograd.functional.jacobian(sample0, x[1].clone())
    return jac.abs().max().item()
