"""Does BatchNorm ease gradient problems and make training less sensitive to initialization?

The claim of the pros-and-cons lists, tested on a deep, narrow MLP of the evidence data::

    64 -> [Linear(width, no bias when normalized) -> norm -> ReLU] x depth -> Linear(10)

Every hidden weight matrix is drawn from He's normal initialization and multiplied by
``init_scale`` (``std = init_scale * sqrt(2 / fan_in)``), so ``init_scale = 1`` is the
standard choice and other values are a "poor" initialization. Two measurements:

- :func:`gradient_norms_at_init`: the Frobenius norm of ``dL/dW_l`` for every hidden layer
  ``l`` at initialization (cross-entropy on one fixed batch of training images). Without a
  norm, a ReLU net is positively homogeneous, so every ``dL/dW_l`` scales like
  ``init_scale ** (depth - 1)`` (times the loss's own dependence on the logits' size); a
  Linear without bias followed by BN or LN is scale invariant, ``norm(c W x) = norm(W x)``
  (up to eps), so its gradient scales like ``1 / c`` instead.
- :func:`init_scale_accuracy`: test accuracy after a fixed number of plain SGD steps (with
  momentum), for every (norm, init scale, seed). SGD, not Adam: Adam divides each step by the
  gradient's own size and would hide most of the effect of the initial scale.

Everything random comes from ``seed`` through a local generator and
:func:`~layernorm_tutorial._seeding.seeded`, so the caller's global RNG state survives.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from layernorm_tutorial import nn as lnn
from layernorm_tutorial._seeding import seeded
from layernorm_tutorial.lab.evidence.data import EvidenceData, load_evidence_data
from layernorm_tutorial.lab.evidence.loop import train_for_steps
from layernorm_tutorial.lab.evidence.runner import deterministic_torch, evaluate

__all__ = ["INIT_NORMS", "DeepMLP", "gradient_norms_at_init", "gradient_norm_table",
           "init_scale_accuracy",
           "InitScaleResult", "init_scale_sweep"]

INIT_NORMS = ("none", "bn", "ln")


class DeepMLP(nn.Module):
    """``(N, 64) -> (N, 10)`` logits through ``depth`` hidden layers of ``width`` units.

    ``norm`` in ``("none", "bn", "ln")`` picks the layer after every hidden Linear
    (``layernorm_tutorial.nn.BatchNorm1d`` or ``LayerNorm``); ``init_scale`` multiplies He's
    normal initialization of the hidden weights. ``hidden`` lists the hidden Linear layers.
    """

    def __init__(self, norm: str = "none", depth: int = 8, width: int = 64,
                 init_scale: float = 1.0):
        super().__init__()
        if norm not in INIT_NORMS:
            raise ValueError(f"norm must be one of {INIT_NORMS}, got {norm!r}")
        if not (isinstance(depth, int) and depth >= 1):
            raise ValueError(f"depth must be a positive int, got {depth!r}")
        if not init_scale > 0:
            raise ValueError(f"init_scale must be positive, got {init_scale!r}")
        self.hidden = nn.ModuleList()
        layers, fan_in = [], 64
        for _ in range(depth):
            linear = nn.Linear(fan_in, width, bias=norm == "none")
            with torch.no_grad():
                linear.weight.normal_(0.0, init_scale * math.sqrt(2.0 / fan_in))
                if linear.bias is not None:
                    linear.bias.zero_()
            norm_layer = {"bn": lambda: lnn.BatchNorm1d(width),
                          "ln": lambda: lnn.LayerNorm(width)}.get(norm, nn.Identity)()
            self.hidden.append(linear)
            layers += [linear, norm_layer, nn.ReLU()]
            fan_in = width
        layers.append(nn.Linear(fan_in, 10))
        self.net = nn.Sequential(*layers)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)


def _batch(data: EvidenceData, batch_size: int, seed: int):
    order = torch.randperm(len(data.y_train), generator=torch.Generator().manual_seed(seed))
    idx = order[:batch_size]
    return data.x_train[idx], data.y_train[idx]


def gradient_norms_at_init(norm: str, init_scale: float = 1.0, seed: int = 0, depth: int = 8,
                           width: int = 64, batch_size: int = 128,
                           data: EvidenceData | None = None) -> np.ndarray:
    """``|dL/dW_l|`` (Frobenius) for the ``depth`` hidden layers at initialization.

    Returns a float64 array of shape ``(depth,)``, layer 1 (next to the input) first. The
    loss is the mean cross-entropy of a freshly initialized :class:`DeepMLP` in training mode
    (BN uses the batch's statistics) on ``batch_size`` training images drawn with ``seed``.
    """
    data = load_evidence_data(seed) if data is None else data
    x, y = _batch(data, batch_size, seed)
    with deterministic_torch(), seeded(seed):
        model = DeepMLP(norm, depth, width, init_scale)
        model.train()
        F.cross_entropy(model(x), y).backward()
    return np.array([float(layer.weight.grad.norm()) for layer in model.hidden])


def init_scale_accuracy(norm: str, init_scale: float, seed: int = 0, steps: int = 150,
                        lr: float = 0.02, batch_size: int = 32, depth: int = 8,
                        width: int = 64, data: EvidenceData | None = None) -> float:
    """Test accuracy (evaluation mode) of a :class:`DeepMLP` after ``steps`` SGD steps.

    SGD with momentum 0.9 at rate ``lr``, cross-entropy, mini-batches of ``batch_size`` in an
    order drawn from ``seed``. A run whose loss stops being finite stops there and is
    evaluated with the weights it had.
    """
    data = load_evidence_data(seed) if data is None else data
    with deterministic_torch(), seeded(seed):
        model = DeepMLP(norm, depth, width, init_scale)
        optimizer = torch.optim.SGD(model.parameters(), lr=lr, momentum=0.9)
        train_for_steps(model, optimizer, data.x_train, data.y_train, steps, batch_size,
                        torch.Generator().manual_seed(20_000 + seed))
        accuracy = evaluate(model, data.x_test, data.y_test)[1]
    return accuracy


@dataclass(frozen=True)
class InitScaleResult:
    """``accuracy[i, j, k]``: test accuracy of ``norms[i]`` at ``scales[j]`` for ``seeds[k]``."""

    norms: tuple[str, ...]
    scales: tuple[float, ...]
    seeds: tuple[int, ...]
    accuracy: np.ndarray

    def mean(self) -> np.ndarray:
        """Mean over seeds, shape ``(len(norms), len(scales))``."""
        return self.accuracy.mean(axis=-1)

    def sd(self) -> np.ndarray:
        """Standard deviation over seeds (``ddof=1``), shape ``(len(norms), len(scales))``."""
        return self.accuracy.std(axis=-1, ddof=1)


def init_scale_sweep(norms: Sequence[str] = INIT_NORMS,
                     scales: Sequence[float] = (0.25, 0.5, 1.0, 2.0, 4.0),
                     seeds: Sequence[int] = (0, 1, 2, 3, 4), **kwargs) -> InitScaleResult:
    """:func:`init_scale_accuracy` for every (norm, scale, seed); ``kwargs`` go to it."""
    if len(seeds) < 1 or len(scales) < 1 or len(norms) < 1:
        raise ValueError("norms, scales and seeds must each hold at least one value")
    data = kwargs.pop("data", None)   # default: each seed's own training split
    acc = np.array([[[init_scale_accuracy(norm, scale, seed, data=data, **kwargs)
                      for seed in seeds] for scale in scales] for norm in norms])
    return InitScaleResult(tuple(norms), tuple(float(s) for s in scales), tuple(seeds), acc)


def gradient_norm_table(norms: Sequence[str] = INIT_NORMS,
                        scales: Sequence[float] = (0.5, 1.0, 2.0),
                        seeds: Sequence[int] = (0, 1, 2), **kwargs) -> np.ndarray:
    """:func:`gradient_norms_at_init` for every (norm, scale, seed).

    Returns an array of shape ``(len(norms), len(scales), len(seeds), depth)``.
    """
    if len(seeds) < 1 or len(scales) < 1 or len(norms) < 1:
        raise ValueError("norms, scales and seeds must each hold at least one value")
    data = kwargs.pop("data", None)   # default: each seed's own training split
    return np.array([[[gradient_norms_at_init(norm, scale, seed, data=data, **kwargs)
                       for seed in seeds] for scale in scales] for norm in norms])
