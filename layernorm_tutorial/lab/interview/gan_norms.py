r"""Norms in GAN critics and discriminators: spectral normalization, why a gradient-penalty
critic avoids BatchNorm, InstanceNorm's defaults.

Spectral normalization (Miyato et al., 2018) divides a weight by its largest singular
value, estimated by power iteration with a vector ``u`` kept from one training step to the
next (as ``torch.nn.utils.parametrizations.spectral_norm`` does):

.. math::

    v \leftarrow \frac{W^\top u}{\lVert W^\top u\rVert},\quad
    u \leftarrow \frac{W v}{\lVert W v\rVert},\quad
    \hat\sigma = u^\top W v,\quad W_{\mathrm{SN}} = W/\hat\sigma .

``u`` and ``v`` are unit vectors, so :math:`\hat\sigma \le \sigma_{\max}(W)` always: an
estimate from too few iterations *under*-estimates :math:`\sigma` and leaves
:math:`\sigma_{\max}(W_{\mathrm{SN}}) \ge 1`. A convolution's weight ``(O, I, k, k)`` is
reshaped to ``(O, I k k)``; the largest singular value of that matrix is not the
convolution's own operator norm (:func:`conv_operator_norm` measures the latter).

A WGAN-GP critic (Gulrajani et al., 2017) penalizes :math:`(\lVert\nabla_x D(x)\rVert -
1)^2` for each sample ``x`` separately. :func:`cross_sample_jacobian` measures how much
critic output ``i`` depends on input ``j != i``: zero for a per-sample network (LayerNorm),
not zero with training-mode BatchNorm, whose statistics mix the batch; then the gradient
of ``D(x).sum()`` that a penalty implementation takes is no longer each sample's own
gradient (:func:`penalty_gradients`).
"""

from __future__ import annotations

import torch
from torch import nn

from layernorm_tutorial import nn as lnn

__all__ = ["power_iteration", "spectral_normalize", "conv_operator_norm", "tiny_critic",
           "cross_sample_jacobian", "penalty_gradients", "gradient_penalty"]


def _normalize(t: torch.Tensor, eps: float) -> torch.Tensor:
    return t / t.norm().clamp_min(eps)


def _as_matrix(weight: torch.Tensor, dim: int) -> torch.Tensor:
    if weight.dim() < 2:
        raise ValueError(f"weight must have at least 2 dimensions, got {weight.dim()}")
    if dim != 0:
        weight = weight.movedim(dim, 0)
    return weight.flatten(1)


def power_iteration(matrix: torch.Tensor, u: torch.Tensor, v: torch.Tensor,
                    iterations: int, eps: float = 1e-12):
    """``iterations`` rounds of ``u = normalize(W v)``, ``v = normalize(W^T u)`` (torch's
    order) on ``matrix`` ``(h, w)`` from ``u`` ``(h,)``, ``v`` ``(w,)``. Returns ``(u, v,
    sigma)`` with ``sigma = u @ W @ v``."""
    if iterations < 0:
        raise ValueError(f"iterations must be >= 0, got {iterations}")
    for _ in range(iterations):
        u = _normalize(matrix @ v, eps)
        v = _normalize(matrix.T @ u, eps)
    return u, v, u @ (matrix @ v)


def spectral_normalize(weight: torch.Tensor, u: torch.Tensor, v: torch.Tensor,
                       iterations: int = 1, dim: int = 0, eps: float = 1e-12):
    """One training-mode forward of spectral normalization: reshape ``weight`` to a matrix
    (``dim`` first, the rest flattened), run :func:`power_iteration` from the stored ``u``,
    ``v`` and return ``(weight / sigma, u, v, sigma)``; the new ``u``, ``v`` are what the
    next step starts from."""
    u, v, sigma = power_iteration(_as_matrix(weight, dim).detach(), u, v, iterations, eps)
    return weight / sigma, u, v, sigma


def conv_operator_norm(weight: torch.Tensor, size: int, iterations: int = 200,
                       padding: int | None = None, seed: int = 0) -> float:
    """Largest singular value of the linear map ``x -> conv2d(x, weight)`` on inputs
    ``(1, I, size, size)`` (stride 1, ``padding`` default ``k // 2``), by power iteration
    with the transposed convolution as the adjoint."""
    pad = weight.shape[-1] // 2 if padding is None else padding
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(1, weight.shape[1], size, size, generator=g, dtype=weight.dtype)
    sigma = torch.zeros((), dtype=weight.dtype)
    for _ in range(iterations):
        x = _normalize(x, 1e-30)
        y = torch.nn.functional.conv2d(x, weight, padding=pad)
        sigma = y.norm()
        x = torch.nn.functional.conv_transpose2d(y, weight, padding=pad)
    return float(sigma)


def tiny_critic(norm: str, features: int = 6, hidden: int = 16, seed: int = 0) -> nn.Module:
    """``Linear(features, hidden) -> norm -> ReLU -> Linear(hidden, 1)`` in float64,
    training mode, weights drawn after ``torch.manual_seed(seed)``; ``norm`` is
    ``"layer"`` (the package's LayerNorm), ``"batch"`` (BatchNorm1d) or ``"none"``."""
    norms = {"layer": lambda: lnn.LayerNorm(hidden), "batch": lambda: lnn.BatchNorm1d(hidden),
             "none": nn.Identity}
    if norm not in norms:
        raise ValueError(f"norm must be 'layer', 'batch' or 'none', got {norm!r}")
    torch.manual_seed(seed)
    return nn.Sequential(nn.Linear(features, hidden), norms[norm](), nn.ReLU(),
                         nn.Linear(hidden, 1)).double()


def cross_sample_jacobian(critic: nn.Module, x: torch.Tensor) -> torch.Tensor:
    """``(B, B)`` matrix of ``|| d critic(x)[i] / d x[j] ||`` (Frobenius over x[j]'s
    features) for a critic returning ``(B,)`` or ``(B, 1)`` on ``x`` ``(B, *)``. Off the
    diagonal it is zero exactly when no output depends on another sample's input."""
    def outputs(inp):
        return critic(inp).reshape(inp.shape[0])

    jac = torch.autograd.functional.jacobian(outputs, x)      # (B, B, *features)
    return jac.flatten(2).norm(dim=-1)


def penalty_gradients(critic: nn.Module, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """``(batched, alone)``: the input gradients a gradient-penalty implementation takes,
    ``grad(critic(x).sum(), x)`` on the whole batch, and each sample's gradient with the
    sample passed through the critic alongside the batch but its own output only
    differentiated, i.e. the diagonal blocks of the Jacobian. Both ``(B, *)``."""
    x = x.detach().requires_grad_(True)
    batched, = torch.autograd.grad(critic(x).sum(), x)
    jac = torch.autograd.functional.jacobian(lambda t: critic(t).reshape(t.shape[0]),
                                             x.detach())
    idx = torch.arange(x.shape[0])
    return batched, jac[idx, idx]


def gradient_penalty(critic: nn.Module, real: torch.Tensor, fake: torch.Tensor,
                     alpha: torch.Tensor) -> torch.Tensor:
    r"""WGAN-GP's penalty :math:`\mathbb E[(\lVert\nabla_{\hat x} D(\hat x)\rVert_2-1)^2]` at
    :math:`\hat x = \alpha\,\mathrm{real} + (1-\alpha)\,\mathrm{fake}`; ``alpha`` ``(B,)``.
    The gradient is ``grad(D(x_hat).sum(), x_hat)``, which is each sample's own gradient
    only when the critic treats the samples independently."""
    shape = (-1,) + (1,) * (real.dim() - 1)
    x_hat = (alpha.reshape(shape) * real + (1 - alpha.reshape(shape)) * fake).detach()
    x_hat.requires_grad_(True)
    grad, = torch.autograd.grad(critic(x_hat).sum(), x_hat, create_graph=True)
    return ((grad.flatten(1).norm(dim=1) - 1) ** 2).mean()
