r"""Training residual networks without (or with fewer) normalization layers.

A residual stack :math:`x_{l+1} = x_l + \alpha\,f_l(x_l)` whose branch :math:`f_l` keeps the
variance of its input and is uncorrelated with it has

.. math:: \mathrm{Var}(x_{l+1}) = (1+\alpha^2)\,\mathrm{Var}(x_l)
          \quad\Rightarrow\quad \mathrm{Var}(x_L) = (1+\alpha^2)^L\,\mathrm{Var}(x_0),

which doubles per block at :math:`\alpha = 1` (no normalization). A BatchNorm at the end of
the branch makes the branch's variance 1 whatever the stream holds, so
:math:`\mathrm{Var}(x_L) = \mathrm{Var}(x_0) + L`: the skip path dominates more and more.
The normalizer-free recipes act on :math:`\alpha` or on the branch instead:

``ResidualBlock``            ResNet-style MLP block ``relu(x + BN(W2 relu(BN(W1 x))))``
                             with the last BN's gamma set to zero (Goyal et al., 2017)
``residual_variance``        the variance of every stream :math:`x_l` of a random linear
                             residual stack, ``mode`` ``"none"``, ``"batchnorm"`` or
                             ``"scaled"`` (branch multiplied by ``alpha``: SkipInit and
                             ReZero start at 0, Fixup-like scaling at :math:`L^{-1/2}`)
``ReZeroBlock``              ``x + alpha * f(x)``, one scalar ``alpha = 0`` (no norm)
``LayerScaleBlock``          ``x + lambda * f(LN(x))``, a per-channel ``lambda`` (CaiT)
``scaled_weight_standardize`` NFNets' Scaled WS: :math:`(W-\mu)\,g/\sqrt{N\,\sigma^2}`
``nf_stack_variance``        NF-ResNet's stack :math:`x + \alpha f(x/\beta_l)` with
                             :math:`\beta_l` from the analytic variance :math:`1+l\alpha^2`
``adaptive_gradient_clip``   NFNets' unit-wise adaptive gradient clipping
``scale_sensitivity``        how a Transformer-style block's branch output, weight gradient
                             and attention logits respond when the residual stream is
                             scaled by ``s``, without a norm (``s``, ``s``, ``s**2``) and
                             with a Pre-LN (1, 1, 1): the loop that a norm breaks
"""

from __future__ import annotations

import torch
from torch import nn

from layernorm_tutorial import functional as LF
from layernorm_tutorial import nn as lnn

__all__ = ["ResidualBlock", "residual_variance", "predicted_residual_variance",
           "ReZeroBlock", "LayerScaleBlock", "scaled_weight_standardize",
           "nf_stack_variance", "adaptive_gradient_clip", "scale_sensitivity"]

F64 = torch.float64
MODES = ("none", "batchnorm", "scaled")


class ResidualBlock(nn.Module):
    r"""A ResNet (v1) block on ``(N, width)`` features:
    :math:`\mathrm{relu}(x + \mathrm{BN}_2(W_2\,\mathrm{relu}(\mathrm{BN}_1(W_1 x))))`.

    ``zero_init_last_gamma=True`` sets :math:`\gamma` of ``bn2`` to 0 (Goyal et al., 2017):
    the branch then outputs :math:`\beta_2 = 0`, and the block is
    :math:`\mathrm{relu}(x)`, the identity on the non-negative inputs that a previous block's
    ReLU produces.
    """

    def __init__(self, width: int, zero_init_last_gamma: bool = True):
        super().__init__()
        self.fc1, self.bn1 = nn.Linear(width, width, bias=False), lnn.BatchNorm1d(width)
        self.fc2, self.bn2 = nn.Linear(width, width, bias=False), lnn.BatchNorm1d(width)
        if zero_init_last_gamma:
            nn.init.zeros_(self.bn2.weight)

    def forward(self, x):
        branch = self.bn2(self.fc2(torch.relu(self.bn1(self.fc1(x)))))
        return torch.relu(x + branch)


def predicted_residual_variance(depth: int, mode: str, alpha: float = 1.0) -> list[float]:
    r"""Mean square of :math:`x_0, \ldots, x_L` predicted for :func:`residual_variance` with
    :math:`\mathrm{E}[x_0^2] = 1`: :math:`(1+\alpha^2)^l` (``"none"`` is :math:`\alpha = 1`)
    or :math:`1 + l` (``"batchnorm"``)."""
    if mode not in MODES:
        raise ValueError(f"mode must be one of {MODES}, got {mode!r}")
    if mode == "batchnorm":
        return [1.0 + l for l in range(depth + 1)]
    a2 = 1.0 if mode == "none" else alpha * alpha
    return [(1.0 + a2) ** l for l in range(depth + 1)]


@torch.no_grad()
def residual_variance(depth: int, mode: str, alpha: float = 1.0, *, width: int = 256,
                      batch: int = 512, seed: int = 0) -> list[float]:
    r"""Mean square of every stream :math:`x_0, \ldots, x_L` (``depth + 1`` values) of a
    random linear residual stack, float64, :math:`x_0 \sim \mathcal N(0, 1)` of shape
    ``(batch, width)`` rescaled to mean square exactly 1, and branches :math:`W_l x` with
    :math:`W_l \sim \mathcal N(0, 1/\text{width})` (variance preserving):

    - ``"none"``: :math:`x_{l+1} = x_l + W_l x_l`;
    - ``"batchnorm"``: :math:`x_{l+1} = x_l + \mathrm{BN}(W_l x_l)` (batch statistics);
    - ``"scaled"``: :math:`x_{l+1} = x_l + \alpha\,W_l x_l`.
    """
    if mode not in MODES:
        raise ValueError(f"mode must be one of {MODES}, got {mode!r}")
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(batch, width, generator=g, dtype=F64)
    x = x / x.pow(2).mean().sqrt()                         # mean square exactly 1
    out = [x.pow(2).mean().item()]
    for _ in range(depth):
        w = torch.randn(width, width, generator=g, dtype=F64) / width ** 0.5
        branch = x @ w.T
        if mode == "batchnorm":
            branch = LF.batch_norm(branch, None, None, training=True)
        elif mode == "scaled":
            branch = alpha * branch
        x = x + branch
        out.append(x.pow(2).mean().item())
    return out


class _Branch(nn.Module):
    def __init__(self, dim: int, hidden: int):
        super().__init__()
        self.fc1, self.fc2 = nn.Linear(dim, hidden), nn.Linear(hidden, dim)

    def forward(self, x):
        return self.fc2(torch.relu(self.fc1(x)))


class ReZeroBlock(nn.Module):
    r"""ReZero (Bachlechner et al., 2021): :math:`x + \alpha\,f(x)` with one scalar
    :math:`\alpha` initialized to 0 and no normalization; ``f`` is a two-layer MLP. Input
    ``(*, dim)``."""

    def __init__(self, dim: int, hidden: int | None = None):
        super().__init__()
        self.f = _Branch(dim, hidden or 4 * dim)
        self.alpha = nn.Parameter(torch.zeros(()))

    def forward(self, x):
        return x + self.alpha * self.f(x)


class LayerScaleBlock(nn.Module):
    r"""LayerScale (Touvron et al., 2021, CaiT): a Pre-LN block
    :math:`x + \lambda \odot f(\mathrm{LN}(x))` with a per-channel :math:`\lambda` initialized
    to ``init`` (1e-5 or 1e-6 in the deep CaiT models); ``f`` is a two-layer MLP. Input
    ``(*, dim)``."""

    def __init__(self, dim: int, init: float = 1e-5, hidden: int | None = None):
        super().__init__()
        self.norm = lnn.LayerNorm(dim)
        self.f = _Branch(dim, hidden or 4 * dim)
        self.scale = nn.Parameter(torch.full((dim,), float(init)))

    def forward(self, x):
        return x + self.scale * self.f(self.norm(x))


def scaled_weight_standardize(w: torch.Tensor, gain: torch.Tensor | None = None,
                              eps: float = 1e-4) -> torch.Tensor:
    r"""NFNets' Scaled Weight Standardization of ``w`` ``(out, in, *kernel)``: each output
    unit :math:`o` over its :math:`N` fan-in values,

    .. math:: \hat W_o = g_o\,\frac{W_o - \mu_o}{\sqrt{\max(N\,\sigma_o^2,\ \epsilon)}}

    (biased :math:`\sigma_o^2`, as ``WSConv2D`` in DeepMind's ``nfnets/base.py``). Every row
    then has mean 0 and squared norm :math:`g_o^2`, so for a white input (i.i.d. entries,
    mean 0, variance :math:`v`) the output unit has variance :math:`g_o^2 v`, whatever
    :math:`W` was. ``gain`` ``(out,)`` defaults to ones.
    """
    dims = tuple(range(1, w.dim()))
    fan_in = w[0].numel()
    mean = w.mean(dims, keepdim=True)
    var = w.var(dims, keepdim=True, correction=0)
    scale = torch.rsqrt(torch.clamp(var * fan_in, min=eps))
    if gain is not None:
        scale = scale * gain.view((-1,) + (1,) * (w.dim() - 1))
    return (w - mean) * scale


@torch.no_grad()
def nf_stack_variance(depth: int, alpha: float = 0.2, *, width: int = 256, batch: int = 512,
                      seed: int = 0) -> dict:
    r"""NF-ResNet's signal propagation (Brock et al., 2021), on a linear stack.

    :math:`x_{l+1} = x_l + \alpha\,\hat W_l(x_l/\beta_l)` with Scaled-WS weights
    :math:`\hat W_l` and :math:`\beta_l = \sqrt{1 + l\alpha^2}`, the expected standard
    deviation of :math:`x_l` that DeepMind's ``nf_resnet.py`` computes analytically
    (``expected_std = (expected_std**2 + alpha**2)**0.5``). Each branch then receives a
    unit-variance input and adds :math:`\alpha^2` to the variance. Returns ``{"measured":
    [mean square of x_l], "predicted": [1 + l alpha^2]}`` for ``l = 0 .. depth``.
    """
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(batch, width, generator=g, dtype=F64)
    x = x / x.pow(2).mean().sqrt()                         # mean square exactly 1
    measured, predicted = [x.pow(2).mean().item()], [1.0]
    for l in range(depth):
        beta = (1.0 + l * alpha * alpha) ** 0.5
        w = scaled_weight_standardize(torch.randn(width, width, generator=g, dtype=F64))
        x = x + alpha * (x / beta) @ w.T
        measured.append(x.pow(2).mean().item())
        predicted.append(1.0 + (l + 1) * alpha * alpha)
    return {"measured": measured, "predicted": predicted}


def adaptive_gradient_clip(grad: torch.Tensor, weight: torch.Tensor, clipping: float,
                           eps: float = 1e-3) -> torch.Tensor:
    r"""NFNets' adaptive gradient clipping (AGC) of one parameter, unit-wise.

    For every output unit :math:`i` (row ``i`` of a ``(out, in, *)`` weight; the whole
    tensor for a vector or scalar), with Frobenius norms over that unit,

    .. math:: G_i \leftarrow \begin{cases}
              \lambda\,\dfrac{\max(\lVert W_i\rVert, \epsilon)}{\lVert G_i\rVert}\,G_i
              & \text{if } \lVert G_i\rVert \ge \lambda\max(\lVert W_i\rVert, \epsilon)\\
              G_i & \text{otherwise,}\end{cases}

    :math:`\lambda` = ``clipping``: no unit's step may exceed a fraction :math:`\lambda` of
    its weight's norm (the rule of ``nfnets/agc_optax.py``, transposed to PyTorch's
    ``(out, in)`` layout). ``eps`` keeps zero-initialized weights trainable. Returns a new
    tensor shaped like ``grad``.
    """
    if grad.shape != weight.shape:
        raise ValueError(f"grad and weight must have one shape, got {tuple(grad.shape)} "
                         f"and {tuple(weight.shape)}")
    if clipping <= 0:
        raise ValueError(f"clipping must be > 0, got {clipping}")
    dims = tuple(range(1, grad.dim())) if grad.dim() > 1 else tuple(range(grad.dim()))
    w_norm = weight.norm(dim=dims, keepdim=True) if dims else weight.abs()
    g_norm = grad.norm(dim=dims, keepdim=True) if dims else grad.abs()
    max_norm = clipping * torch.clamp(w_norm, min=eps)
    clipped = grad * (max_norm / torch.clamp(g_norm, min=1e-6))
    return torch.where(g_norm < max_norm, grad, clipped)


def scale_sensitivity(scales, *, width: int = 16, rows: int = 8, seed: int = 0) -> dict:
    r"""What a block sees when the residual stream :math:`x` is multiplied by :math:`s > 0`.

    The block has a bias-free MLP branch :math:`f(h) = W_2\,\mathrm{relu}(W_1 h)` and
    attention logits :math:`(W_q h)(W_k h)^\top/\sqrt{d}`, read from :math:`h = x` (no
    norm) or :math:`h = \mathrm{LN}(x)` (Pre-LN, the package's ``layer_norm`` with
    :math:`\epsilon = 0`, so that the invariance is exact). For each ``s`` in ``scales``
    and each ``mode`` in ``("none", "pre_ln")``, returns the ratios, relative to ``s = 1``,
    of the norm of the branch output, of the gradient of :math:`\langle g, f\rangle`
    with respect to :math:`W_1` (fixed upstream gradient :math:`g`: the size of an SGD
    step on :math:`W_1` at a fixed learning rate), and of the largest attention logit.
    ReLU is positively homogeneous, so without a norm the three are exactly
    :math:`s`, :math:`s` and :math:`s^2`; with Pre-LN they are 1. Shapes: ``rows`` tokens
    of ``width`` features, float64. Returns ``{mode: {s: {"branch", "grad", "logits"}}}``.
    """
    if any(s <= 0 for s in scales):
        raise ValueError(f"scales must be > 0, got {list(scales)}")
    g = torch.Generator().manual_seed(seed)
    x0 = torch.randn(rows, width, generator=g, dtype=F64)
    upstream = torch.randn(rows, width, generator=g, dtype=F64)
    w1, w2, wq, wk = (torch.randn(width, width, generator=g, dtype=F64) / width ** 0.5
                      for _ in range(4))

    def measure(x, mode):
        h = x if mode == "none" else LF.layer_norm(x, (width,), eps=0.0)
        first = w1.clone().requires_grad_(True)
        branch = torch.relu(h @ first.T) @ w2.T
        (grad,) = torch.autograd.grad((branch * upstream).sum(), first)
        logits = (h @ wq.T) @ (h @ wk.T).T / width ** 0.5
        return {"branch": branch.norm().item(), "grad": grad.norm().item(),
                "logits": logits.abs().max().item()}

    out = {}
    for mode in ("none", "pre_ln"):
        base = measure(x0, mode)
        out[mode] = {s: {k: v / base[k] for k, v in measure(s * x0, mode).items()}
                     for s in scales}
    return out
