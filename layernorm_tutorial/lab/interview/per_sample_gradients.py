"""Per-sample gradients with ``torch.func``: why DP-SGD needs LayerNorm or GroupNorm.

Under BatchNorm a sample's gradient depends on the other samples of its batch; under
LayerNorm it does not. The model is a float64 ``Linear -> Norm -> ReLU -> Linear`` MLP whose
parameters are a dict of tensors, so ``torch.func.grad`` and ``vmap`` apply directly.
"""

from __future__ import annotations

import torch
from torch.func import grad, vmap

from layernorm_tutorial import functional

__all__ = [
    "init_mlp_params",
    "mlp_losses",
    "sample_gradient",
    "batchmate_influence",
    "per_sample_gradients",
]

_NORMS = ("layer", "batch", "none")


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
        h = functional.layer_norm(h, (h.shape[-1],), params["gamma"], params["beta"])
    elif norm == "batch":
        h = functional.batch_norm(h, None, None, params["gamma"], params["beta"], training=True)
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
