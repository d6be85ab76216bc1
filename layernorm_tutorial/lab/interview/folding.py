"""Inference-time folding of a normalization's affine map into a neighbouring Linear layer."""

from __future__ import annotations

import torch

__all__ = ["fold_affine_into_next_linear", "fold_batch_norm_into_previous_linear"]


def fold_affine_into_next_linear(gamma, beta, weight, bias):
    r"""Fold a normalization's gain/bias into the Linear that follows it.

    ``weight @ (gamma * xhat + beta) + bias == weight' @ xhat + bias'`` with
    ``weight' = weight * gamma`` (scale column j by gamma_j) and
    ``bias' = bias + weight @ beta``. Shapes: gamma, beta ``(D,)``, weight ``(O, D)``,
    bias ``(O,)``. Returns ``(weight', bias')``.
    """
    if weight.shape[-1] != gamma.shape[0] or beta.shape != gamma.shape:
        raise ValueError(f"weight must be (O, {gamma.shape[0]}) and beta ({gamma.shape[0]},), "
                         f"got {tuple(weight.shape)} and {tuple(beta.shape)}")
    return weight * gamma, bias + weight @ beta


def fold_batch_norm_into_previous_linear(weight, bias, running_mean, running_var, gamma,
                                         beta, eps: float = 1e-5):
    r"""Fold an inference-mode BatchNorm into the Linear (or 1x1 conv) before it.

    With :math:`s = \gamma / \sqrt{\hat\sigma^2 + \epsilon}`:
    ``weight' = s[:, None] * weight`` and ``bias' = s * (bias - running_mean) + beta``.
    Shapes: weight ``(C, D)``, all vectors ``(C,)``. Returns ``(weight', bias')``.
    LayerNorm cannot be folded this way: its statistics change with every input.
    """
    scale = gamma / torch.sqrt(running_var + eps)
    return scale[:, None] * weight, scale * (bias - running_mean) + beta
