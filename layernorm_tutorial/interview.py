r"""Small, tested helpers behind the interview chapter's answers, and the drills' solutions.

Drill reference solutions (NumPy)
---------------------------------
BatchNormWithRunningStats   BatchNorm over axis 0 of ``(N, C)`` with PyTorch's running stats
group_norm_via_reshape      GroupNorm of ``(N, C, *)`` by reshaping to ``(N, G, -1)``

Demonstrations (torch, float64)
-------------------------------
fmt
    format a number for a notebook, printing round-off-sized values as "< floor" so the
    stored output does not depend on the machine's summation order.
init_mlp_params, mlp_losses, sample_gradient, batchmate_influence, per_sample_gradients
    per-sample gradients with ``torch.func``: under BatchNorm a sample's gradient depends
    on the other samples of its batch, under LayerNorm it does not (why DP-SGD needs LN/GN).
fold_affine_into_next_linear, fold_batch_norm_into_previous_linear
    inference-time folding of a normalization's affine map into a neighbouring Linear.
shard_moments, merge_moments, unsynchronized_batch_norm
    BatchNorm under data parallelism: per-device statistics versus synchronized ones.
norm_traffic
    bytes moved and flops of LayerNorm/RMSNorm, eager (one kernel per op) versus fused.
sequential_moments
    mean and variance accumulated one element at a time in a chosen floating-point dtype.
residual_stack_at_init
    weight-gradient norms and stream variances of a Pre-LN or Post-LN residual stack.
rnn_gradient_norms
    how the gradient of the last hidden state reaches earlier steps of a tanh RNN, with and
    without LayerNorm on the pre-activations.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
from torch.func import grad, vmap

from . import functional as LF

__all__ = [
    "fmt",
    "BatchNormWithRunningStats",
    "group_norm_via_reshape",
    "init_mlp_params",
    "mlp_losses",
    "sample_gradient",
    "batchmate_influence",
    "per_sample_gradients",
    "fold_affine_into_next_linear",
    "fold_batch_norm_into_previous_linear",
    "shard_moments",
    "merge_moments",
    "unsynchronized_batch_norm",
    "Traffic",
    "norm_traffic",
    "sequential_moments",
    "residual_stack_at_init",
    "rnn_gradient_norms",
]

_NORMS = ("layer", "batch", "none")


def fmt(value, floor: float = 1e-12, spec: str = ".1e") -> str:
    """``format(value, spec)``, or ``"< floor"`` when ``|value| < floor`` (round-off level)."""
    if hasattr(value, "detach"):
        value = value.detach()
    value = float(value)
    if abs(value) < floor:
        return f"< {floor:.0e}"
    return format(value, spec)


# =========================================================================== drill solutions
class BatchNormWithRunningStats:
    r"""NumPy BatchNorm for ``(N, C)`` inputs with PyTorch's running-statistics conventions.

    Training: normalize with the batch mean and *biased* variance over axis 0, then update
    ``running = (1 - momentum) * running + momentum * batch_stat`` using the *unbiased*
    variance :math:`\frac{N}{N-1}\sigma_B^2` for ``running_var``. Evaluation: normalize with
    the running statistics and leave them unchanged.
    """

    def __init__(self, num_features: int, eps: float = 1e-5, momentum: float = 0.1):
        if num_features < 1:
            raise ValueError(f"num_features must be a positive int, got {num_features}")
        self.eps, self.momentum = eps, momentum
        self.gamma = np.ones(num_features)
        self.beta = np.zeros(num_features)
        self.running_mean = np.zeros(num_features)
        self.running_var = np.ones(num_features)

    def forward(self, x, training: bool = True):
        x = np.asarray(x, dtype=np.float64)
        if x.ndim != 2 or x.shape[1] != self.gamma.shape[0]:
            raise ValueError(f"x must have shape (N, {self.gamma.shape[0]}), got {x.shape}")
        if training:
            n = x.shape[0]
            if n < 2:
                raise ValueError("training needs at least 2 samples per batch (got 1): "
                                 "a single sample has no batch variance")
            mean = x.mean(axis=0)                        # (C,)
            var = x.var(axis=0)                          # (C,) biased, used to normalize
            m = self.momentum
            self.running_mean = (1 - m) * self.running_mean + m * mean
            self.running_var = (1 - m) * self.running_var + m * var * n / (n - 1)
        else:
            mean, var = self.running_mean, self.running_var
        return self.gamma * (x - mean) / np.sqrt(var + self.eps) + self.beta


def group_norm_via_reshape(x, num_groups: int, gamma, beta, eps: float = 1e-5):
    r"""NumPy GroupNorm: ``x`` ``(N, C, *)`` -> ``(N, G, C/G * prod(*))``, normalize the last
    axis (biased variance, eps inside the root), reshape back, apply per-channel gamma/beta.
    """
    x = np.asarray(x, dtype=np.float64)
    n, c = x.shape[:2]
    if c % num_groups:
        raise ValueError(f"num_groups={num_groups} must divide the {c} channels")
    grouped = x.reshape(n, num_groups, -1)
    mean = grouped.mean(axis=-1, keepdims=True)
    var = grouped.var(axis=-1, keepdims=True)
    xhat = ((grouped - mean) / np.sqrt(var + eps)).reshape(x.shape)
    channel = (1, c) + (1,) * (x.ndim - 2)
    return xhat * np.reshape(gamma, channel) + np.reshape(beta, channel)


# =========================================================================== per-sample grads
def init_mlp_params(in_features: int = 6, hidden: int = 8, classes: int = 3,
                    seed: int = 0) -> dict[str, torch.Tensor]:
    """Float64 parameters of ``Linear -> Norm -> ReLU -> Linear`` (gamma/beta random)."""
    g = torch.Generator().manual_seed(seed)

    def randn(*shape):
        return torch.randn(*shape, generator=g, dtype=torch.float64)

    return {"w1": randn(hidden, in_features) / in_features ** 0.5, "b1": randn(hidden) * 0.1,
            "gamma": 1 + 0.1 * randn(hidden), "beta": 0.1 * randn(hidden),
            "w2": randn(classes, hidden) / hidden ** 0.5, "b2": randn(classes) * 0.1}


def mlp_losses(params: dict, x: torch.Tensor, y: torch.Tensor, norm: str) -> torch.Tensor:
    """Per-sample cross-entropy losses ``(N,)`` of the MLP on ``x`` ``(N, F)``, labels ``(N,)``.

    ``norm`` is "layer" (per-sample statistics), "batch" (training-mode batch statistics,
    no running averages) or "none".
    """
    if norm not in _NORMS:
        raise ValueError(f"norm must be one of {_NORMS}, got {norm!r}")
    h = x @ params["w1"].T + params["b1"]
    if norm == "layer":
        h = LF.layer_norm(h, (h.shape[-1],), params["gamma"], params["beta"])
    elif norm == "batch":
        h = LF.batch_norm(h, None, None, params["gamma"], params["beta"], training=True)
    logits = torch.relu(h) @ params["w2"].T + params["b2"]
    return torch.nn.functional.cross_entropy(logits, y, reduction="none")


def sample_gradient(params: dict, x, y, index: int, norm: str) -> dict[str, torch.Tensor]:
    """Gradient of sample ``index``'s loss, computed with the whole batch in the forward pass."""
    return grad(lambda p: mlp_losses(p, x, y, norm)[index])(params)


def _max_abs_difference(a: dict, b: dict) -> float:
    return max(float((a[k] - b[k]).abs().max()) for k in a)


def batchmate_influence(norm: str, batch_size: int = 8, seed: int = 0) -> float:
    """Largest change in sample 0's gradient when its batch-mates are replaced.

    Two batches share sample 0 (features and label) and differ in samples ``1..N-1``. Returns
    ``max |g_0(batch A) - g_0(batch B)|`` over all parameters: exactly 0 when sample 0's
    computation ignores the other samples (LayerNorm, no norm), positive under BatchNorm.
    """
    if batch_size < 2:
        raise ValueError(f"batch_size must be at least 2, got {batch_size}")
    g = torch.Generator().manual_seed(seed)
    params = init_mlp_params(seed=seed)
    xa = torch.randn(batch_size, 6, generator=g, dtype=torch.float64)
    ya = torch.randint(0, 3, (batch_size,), generator=g)
    xb, yb = xa.clone(), ya.clone()
    xb[1:] = torch.randn(batch_size - 1, 6, generator=g, dtype=torch.float64)
    yb[1:] = torch.randint(0, 3, (batch_size - 1,), generator=g)
    return _max_abs_difference(sample_gradient(params, xa, ya, 0, norm),
                               sample_gradient(params, xb, yb, 0, norm))


def per_sample_gradients(params: dict, x, y, norm: str) -> dict[str, torch.Tensor]:
    """Per-sample gradients by ``vmap(grad(...))``: each sample runs as a batch of one.

    Each entry has a leading axis of size N. This is how DP-SGD libraries compute gradients
    to clip; it equals the in-batch gradient of each sample only when samples do not interact
    (true for LayerNorm, false for BatchNorm, whose batch of one has zero variance).
    """
    def one(p, xi, yi):
        return mlp_losses(p, xi[None], yi[None], norm)[0]

    return vmap(grad(one), in_dims=(None, 0, 0))(params, x, y)


# =========================================================================== folding
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


# =========================================================================== data parallel
def shard_moments(x: torch.Tensor, num_shards: int):
    """Per-shard channel means and biased variances of ``x`` ``(N, C)`` split along N.

    Returns ``(means (K, C), variances (K, C), counts (K,))``, the statistics each of K
    data-parallel devices would compute on its own slice.
    """
    shards = torch.tensor_split(x, num_shards, dim=0)
    if any(s.shape[0] == 0 for s in shards):
        raise ValueError(f"num_shards={num_shards} exceeds the batch size {x.shape[0]}")
    means = torch.stack([s.mean(0) for s in shards])
    variances = torch.stack([s.var(0, correction=0) for s in shards])
    counts = torch.tensor([s.shape[0] for s in shards], dtype=x.dtype)
    return means, variances, counts


def merge_moments(means, variances, counts):
    r"""Combine per-shard moments into global ones (what SyncBatchNorm all-reduces).

    :math:`\mu = \sum_k n_k\mu_k / n`, :math:`\sigma^2 = \sum_k n_k(\sigma_k^2 +
    (\mu_k-\mu)^2) / n` (Chan, Golub and LeVeque). Returns ``(mean (C,), variance (C,))``.
    """
    w = counts[:, None] / counts.sum()
    mean = (w * means).sum(0)
    return mean, (w * (variances + (means - mean) ** 2)).sum(0)


def unsynchronized_batch_norm(x: torch.Tensor, num_shards: int, eps: float = 1e-5):
    """Training-mode BatchNorm (no affine) as K devices compute it without synchronization."""
    parts = [LF.batch_norm(s, None, None, training=True, eps=eps)
             for s in torch.tensor_split(x, num_shards, dim=0)]
    return torch.cat(parts, dim=0)


# =========================================================================== memory traffic
@dataclass(frozen=True)
class Traffic:
    """Estimated DRAM traffic and arithmetic of one normalization call."""

    bytes_moved: int
    flops: int
    kernels: int

    @property
    def intensity(self) -> float:
        """Arithmetic intensity in flop per byte."""
        return self.flops / self.bytes_moved


# Eager kernels as (name, full-size tensors read, full-size tensors written, row vectors
# read/written, parameter vectors read). One "full-size" tensor is rows*cols elements.
_EAGER_KERNELS = {
    "layer": [("mean = x.mean(-1)", 1, 0, 1, 0), ("xc = x - mean", 1, 1, 1, 0),
              ("sq = xc * xc", 1, 1, 0, 0), ("var = sq.mean(-1)", 1, 0, 1, 0),
              ("rstd = rsqrt(var + eps)", 0, 0, 2, 0), ("xhat = xc * rstd", 1, 1, 1, 0),
              ("t = xhat * gamma", 1, 1, 0, 1), ("y = t + beta", 1, 1, 0, 1)],
    "rms": [("sq = x * x", 1, 1, 0, 0), ("ms = sq.mean(-1)", 1, 0, 1, 0),
            ("rstd = rsqrt(ms + eps)", 0, 0, 2, 0), ("xhat = x * rstd", 1, 1, 1, 0),
            ("y = xhat * gamma", 1, 1, 0, 1)],
}
# flops per element: LN = sum, subtract, square, sum, scale, gain, bias; RMS = square, sum,
# scale, gain.
_FLOPS_PER_ELEMENT = {"layer": 7, "rms": 4}


def norm_traffic(rows: int, cols: int, *, kind: str = "layer", fused: bool = True,
                 dtype_bytes: int = 2, stat_bytes: int = 4) -> Traffic:
    """Bytes moved to and from DRAM and flops of a forward LayerNorm (``kind="layer"``) or
    RMSNorm (``kind="rms"``) over an ``(rows, cols)`` activation.

    Fused: one kernel reads x and the parameters once, writes y, and saves the per-row
    statistics for the backward pass (mean and rstd for LN, rstd for RMS) in fp32.
    Eager: one kernel per elementary op, each reading its inputs from DRAM and writing its
    output back (``_EAGER_KERNELS``). Activations use ``dtype_bytes`` per element.
    """
    if kind not in _EAGER_KERNELS:
        raise ValueError(f"kind must be 'layer' or 'rms', got {kind!r}")
    if rows < 1 or cols < 1:
        raise ValueError(f"rows and cols must be positive, got {rows} and {cols}")
    full = rows * cols * dtype_bytes
    flops = _FLOPS_PER_ELEMENT[kind] * rows * cols
    n_params = 2 if kind == "layer" else 1
    if fused:
        saved_stats = (2 if kind == "layer" else 1) * rows * stat_bytes
        return Traffic(2 * full + n_params * cols * dtype_bytes + saved_stats, flops, 1)
    total = 0
    for _, reads, writes, row_vectors, params in _EAGER_KERNELS[kind]:
        total += (reads + writes) * full + row_vectors * rows * stat_bytes
        total += params * cols * dtype_bytes
    return Traffic(total, flops, len(_EAGER_KERNELS[kind]))


# =========================================================================== precision
def sequential_moments(values, dtype) -> tuple[float, float]:
    """Mean and biased variance of a 1-D array, accumulating one element at a time in ``dtype``.

    Two passes (mean, then squared deviations), every partial sum rounded to ``dtype``, as a
    naive kernel that keeps its accumulator in the activation dtype would do. Returns floats.
    """
    v = np.asarray(values, dtype=dtype)
    if v.ndim != 1 or v.size == 0:
        raise ValueError(f"values must be a non-empty 1-D array, got shape {v.shape}")
    n = dtype(v.size)
    with np.errstate(over="ignore", invalid="ignore"):
        mean = np.add.accumulate(v, dtype=dtype)[-1] / n
        dev = (v - mean).astype(dtype)
        var = np.add.accumulate(dev * dev, dtype=dtype)[-1] / n
    return float(mean), float(var)


# =========================================================================== Pre-LN / Post-LN
def residual_stack_at_init(depth: int = 12, placement: str = "pre", width: int = 64,
                           batch: int = 32, seed: int = 0):
    r"""Weight-gradient norms and residual-stream variances of a residual MLP stack at init.

    Block ``l``: ``F(u) = W2 relu(W1 u)`` (He-initialized). ``placement="pre"``:
    ``x_{l+1} = x_l + F(LN(x_l))`` and a final LN; ``placement="post"``:
    ``x_{l+1} = LN(x_l + F(x_l))`` (the original Transformer's "Add & Norm"). The loss is
    ``sum(out * r)`` for a fixed random ``r`` of the output's shape.

    Returns ``(grad_norms, variances)``: ``grad_norms[l] = ||dL/dW2_l||_F`` (shape
    ``(depth,)``) and ``variances[l] = Var(x_l)`` over all entries (shape ``(depth + 1,)``).
    Xiong et al. (2020): Post-LN's last-block gradient does not shrink with depth, Pre-LN's
    shrinks like :math:`1/\sqrt{L}`, because its stream variance grows like :math:`L`.
    """
    if placement not in ("pre", "post"):
        raise ValueError(f"placement must be 'pre' or 'post', got {placement!r}")
    if depth < 1:
        raise ValueError(f"depth must be at least 1, got {depth}")
    g = torch.Generator().manual_seed(seed)

    def randn(*shape):
        return torch.randn(*shape, generator=g, dtype=torch.float64)

    x, upstream = randn(batch, width), randn(batch, width)
    w2s, variances = [], [float(x.var())]
    for _ in range(depth):
        w1 = randn(width, width) * (2 / width) ** 0.5
        w2 = (randn(width, width) / width ** 0.5).requires_grad_(True)
        w2s.append(w2)
        if placement == "pre":
            x = x + torch.relu(LF.layer_norm(x, (width,)) @ w1.T) @ w2.T
        else:
            x = LF.layer_norm(x + torch.relu(x @ w1.T) @ w2.T, (width,))
        variances.append(float(x.detach().var()))
    out = LF.layer_norm(x, (width,)) if placement == "pre" else x
    (out * upstream).sum().backward()
    return np.array([float(w.grad.norm()) for w in w2s]), np.array(variances)


# =========================================================================== RNN
def rnn_gradient_norms(steps: int = 60, hidden: int = 32, weight_scale: float = 3.0,
                       use_layer_norm: bool = False, seed: int = 0):
    r"""Gradient norms :math:`\|\partial L/\partial h_t\|` of a tanh RNN, and its saturation.

    ``a_t = W_hh h_{t-1} + W_xh x_t``; ``h_t = tanh(LN(a_t))`` or ``tanh(a_t)``, with
    ``W_hh ~ N(0, weight_scale^2 / hidden)``. The loss is ``sum(h_T * r)``. Returns
    ``(grad_norms (steps,), saturated_fraction)`` where ``saturated_fraction`` is the share
    of hidden units with ``|h_t| > 0.99`` over all steps (tanh' < 0.02 there).
    """
    g = torch.Generator().manual_seed(seed)
    w_hh = torch.randn(hidden, hidden, generator=g, dtype=torch.float64) \
        * weight_scale / hidden ** 0.5
    w_xh = torch.randn(hidden, hidden, generator=g, dtype=torch.float64) / hidden ** 0.5
    xs = torch.randn(steps, hidden, generator=g, dtype=torch.float64)
    upstream = torch.randn(hidden, generator=g, dtype=torch.float64)
    h = torch.zeros(hidden, dtype=torch.float64, requires_grad=True)
    states = []
    for t in range(steps):
        a = w_hh @ h + w_xh @ xs[t]
        if use_layer_norm:
            a = LF.layer_norm(a, (hidden,))
        h = torch.tanh(a)
        h.retain_grad()
        states.append(h)
    (states[-1] * upstream).sum().backward()
    norms = np.array([float(s.grad.norm()) for s in states])
    saturated = float(torch.stack([s.detach() for s in states]).abs().gt(0.99).double().mean())
    return norms, saturated
