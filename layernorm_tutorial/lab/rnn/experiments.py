"""The RNN chapter's experiments: signal propagation at initialization, and small training runs.

Everything here is CPU-sized and seeded: a function that draws random numbers takes a
``seed`` and leaves torch's global random state unchanged.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as TF
from torch import Tensor, nn

from layernorm_tutorial._seeding import seeded
from layernorm_tutorial.lab.common.training import (
    load_digits_split,
    load_digits_with_validation,
)
from layernorm_tutorial.lab.rnn.cells import (
    ElmanRNNCell,
    LayerNormElmanRNNCell,
    SequenceClassifier,
)

__all__ = [
    "load_digit_sequences",
    "load_digit_sequences_with_validation",
    "normalized_input_spread",
    "random_walk_sequences",
    "rnn_gradient_norms",
    "set_recurrent_scale",
    "train_sequence_classifier",
    "unrolled_dynamics",
]


def set_recurrent_scale(cell: ElmanRNNCell, scale: float, seed: int = 0) -> ElmanRNNCell:
    """Set ``W_hh = scale * G / sqrt(H)`` and ``W_xh = G' / sqrt(I)`` with Gaussian G, G'.

    The spectral radius of ``W_hh`` is then close to ``scale`` (circular law), so ``scale < 1``
    shrinks and ``scale > 1`` grows a linear recurrence. Biases are zeroed. Returns the cell.
    The Gaussians are drawn in float64, whose ``randn`` is the same on every CPU kernel path
    (float32's vectorized ``randn`` differs from the scalar one in the last bits).
    """
    g = torch.Generator().manual_seed(seed)
    h, i = cell.hidden_size, cell.input_size
    f64 = torch.float64  # float32 randn differs in the last bits between CPU kernels
    with torch.no_grad():
        cell.weight_hh.copy_(scale * torch.randn(h, h, generator=g, dtype=f64)
                             / math.sqrt(h))
        cell.weight_xh.copy_(torch.randn(h, i, generator=g, dtype=f64) / math.sqrt(i))
        cell.bias.zero_()
    return cell


def unrolled_dynamics(layer_norm: bool, recurrent_scale: float, steps: int = 150,
                      hidden_size: int = 64, input_size: int = 8, batch_size: int = 32,
                      nonlinearity: str = "tanh", inputs: str = "impulse",
                      seed: int = 0) -> dict:
    """Unroll a (LN-)Elman RNN at initialization and record how signals travel through time.

    ``inputs="impulse"`` feeds ``x_0 ~ N(0, I)`` and zeros afterwards (the RNN is then a
    ``steps``-deep weight-shared network applied to ``x_0``); ``"noise"`` feeds ``N(0, I)``
    at every step. Float64. Returns NumPy arrays indexed by step ``t = 1..steps``:

    * ``state_rms``: mean over the batch of ``||h_t|| / sqrt(H)``;
    * ``saturation``: fraction of units with ``|h_t| > 0.99`` (tanh's flat region, |z| > 2.65);
    * ``grad_norm``: mean over the batch of ``||dL/dh_t||`` for ``L = <v, h_T>`` with a
      random unit-variance ``v``; ``grad_norm[-1]`` is at distance 0 from the loss.
    """
    if inputs not in ("impulse", "noise"):
        raise ValueError(f"inputs must be 'impulse' or 'noise', got {inputs!r}")
    kind = LayerNormElmanRNNCell if layer_norm else ElmanRNNCell
    with seeded(seed):  # every random weight is then overwritten by set_recurrent_scale
        cell = kind(input_size, hidden_size, nonlinearity)
    cell = set_recurrent_scale(cell, recurrent_scale, seed).double()
    g = torch.Generator().manual_seed(seed + 1)
    x = torch.randn(batch_size, steps, input_size, generator=g, dtype=torch.float64)
    if inputs == "impulse":
        x[:, 1:] = 0.0
    h = cell.initial_state(batch_size, torch.float64)
    states = []
    for t in range(steps):
        h, _ = cell(x[:, t], h)
        h.retain_grad()
        states.append(h)
    v = torch.randn(batch_size, hidden_size, generator=g, dtype=torch.float64)
    (states[-1] * v).sum().backward()
    stacked = torch.stack([s.detach() for s in states], dim=1)  # (B, T, H)
    grads = torch.stack([s.grad for s in states], dim=1)
    return {
        "state_rms": (stacked.norm(dim=-1) / math.sqrt(hidden_size)).mean(0).numpy(),
        "saturation": (stacked.abs() > 0.99).double().mean(dim=(0, 2)).numpy(),
        "grad_norm": grads.norm(dim=-1).mean(0).numpy(),
    }


def rnn_gradient_norms(steps: int = 60, hidden: int = 32, weight_scale: float = 3.0,
                       use_layer_norm: bool = False, seed: int = 0):
    r"""Gradient norms :math:`\|\partial L/\partial h_t\|` of one tanh RNN, and its saturation.

    :func:`unrolled_dynamics` for a single sequence of noise inputs (``input_size = hidden``):
    ``h_t = tanh(LN(a_t))`` or ``tanh(a_t)`` with ``W_hh ~ N(0, weight_scale^2 / hidden)``.
    Returns ``(grad_norms (steps,), saturated_fraction)``, the fraction of all ``h_t``
    entries with ``|h_t| > 0.99`` (where tanh' < 0.02).
    """
    run = unrolled_dynamics(use_layer_norm, weight_scale, steps=steps, hidden_size=hidden,
                            input_size=hidden, batch_size=1, inputs="noise", seed=seed)
    return run["grad_norm"], float(run["saturation"].mean())


def normalized_input_spread(cell: nn.Module, x: Tensor) -> Tensor:
    """Per-step std (over batch and units) of what an Elman cell feeds its nonlinearity.

    Runs ``cell`` over ``x (B, T, I)`` without gradients in its current mode and returns a
    ``(T,)`` tensor. For a well-normalized cell the values stay near the gain (1 at init).
    """
    h = cell.initial_state(x.shape[0], x.dtype)
    spreads = []
    with torch.no_grad():
        for t in range(x.shape[1]):
            z = cell.pre_activation(cell.summed_inputs(x[:, t], h), t)
            spreads.append(z.std())
            h = cell._f(z)
    return torch.stack(spreads)


def random_walk_sequences(batch_size: int, steps: int, input_size: int = 4,
                          seed: int = 0) -> Tensor:
    """``x_t = x_{t-1} + e_t`` with ``e_t ~ N(0, I)``: inputs whose scale grows like sqrt(t).

    Shape ``(batch_size, steps, input_size)``, float32. Statistics change with t, so the
    statistics of one time step do not describe a later one.
    """
    g = torch.Generator().manual_seed(seed)
    return torch.randn(batch_size, steps, input_size, generator=g).cumsum(dim=1)


def load_digit_sequences(test_fraction: float = 0.25, seed: int = 0):
    """scikit-learn's 8x8 digits read row by row: 8 steps of 8 pixel intensities in [0, 1].

    Returns ``(x_train, y_train, x_test, y_test)``: float32 tensors ``(N, 8, 8)`` and int64
    labels, the split of :func:`layernorm_tutorial.lab.common.training.load_digits_split` (1797
    images).
    """
    data = load_digits_split(test_fraction, seed)
    return (data.x_train.reshape(-1, 8, 8), data.y_train,
            data.x_test.reshape(-1, 8, 8), data.y_test)


def load_digit_sequences_with_validation(seed: int = 0):
    """The digits read row by row, split as :func:`~layernorm_tutorial.lab.common.training.
    load_digits_with_validation`: the book's fixed test set (449 images, the same for every
    seed) and a train/validation split (1078 / 270) of the other images drawn from ``seed``.

    Returns ``(x_train, y_train, x_val, y_val, x_test, y_test)``; ``x_*`` float32
    ``(N, 8, 8)``, ``y_*`` int64 ``(N,)``.
    """
    d = load_digits_with_validation(seed)
    return (d.x_train.reshape(-1, 8, 8), d.y_train, d.x_val.reshape(-1, 8, 8), d.y_val,
            d.x_test.reshape(-1, 8, 8), d.y_test)


def _accuracy(model: nn.Module, x: Tensor, y: Tensor) -> float:
    with torch.no_grad():
        return float((model(x).argmax(dim=1) == y).float().mean())


def train_sequence_classifier(kind: str, data, hidden_size: int = 32, epochs: int = 10,
                              batch_size: int = 64, lr: float = 3e-3, seed: int = 0,
                              validation=None) -> dict:
    """Train ``SequenceClassifier(kind)`` with Adam on ``data = (x_tr, y_tr, x_te, y_te)``.

    Returns ``{"train_loss": [...], "test_accuracy": [...]}``: the mean training cross-entropy
    of each epoch and the test accuracy (evaluation mode) after each epoch, both as lists of
    floats of length ``epochs``; with ``validation = (x_val, y_val)`` also
    ``"val_accuracy"``, the accuracy on those images after each epoch. Fully determined by
    ``seed``.
    """
    x_tr, y_tr, x_te, y_te = data
    with seeded(seed):
        model = SequenceClassifier(kind, x_tr.shape[2], hidden_size, int(y_tr.max()) + 1)
    optimizer = torch.optim.Adam(model.parameters(), lr=lr)
    g = torch.Generator().manual_seed(seed)
    history = {"train_loss": [], "test_accuracy": []}
    for _ in range(epochs):
        model.train()
        perm = torch.randperm(len(y_tr), generator=g)
        total, count = 0.0, 0
        for start in range(0, len(perm) - 1, batch_size):
            idx = perm[start:start + batch_size]
            if len(idx) < 2:  # a batch of 1 has no batch statistics
                continue
            loss = TF.cross_entropy(model(x_tr[idx]), y_tr[idx])
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            total += float(loss.detach()) * len(idx)
            count += len(idx)
        model.eval()
        history["train_loss"].append(total / count)
        history["test_accuracy"].append(_accuracy(model, x_te, y_te))
        if validation is not None:
            history.setdefault("val_accuracy", []).append(_accuracy(model, *validation))
    return history
