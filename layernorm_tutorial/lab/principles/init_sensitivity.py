r"""Does LayerNorm make a deep MLP insensitive to its initial weight scale? Many seeds at once.

The principles chapter compares a deep MLP on scikit-learn's digits with and without
LayerNorm, over several seeds, initial weight scales and learning rates. Trained one by one
(``training.train_classifier``) that grid takes minutes; here all its networks train *at
once*, as one ensemble:

* every member has the architecture of ``training.make_mlp``: ``depth`` blocks
  ``Linear -> [LayerNorm] -> ReLU`` and a ``Linear`` classifier;
* the weights of layer ``l`` of all ``M`` members are one tensor of shape ``(M, out, in)``,
  and one batched matrix product (``torch.baddbmm``) runs the layer for every member;
* the loss is the *sum* of the members' mean cross-entropies, so each member's gradient is
  exactly the gradient it would get alone, and SGD with momentum,
  :math:`b \leftarrow \mu b + g,\ p \leftarrow p - \eta_m b` (``torch.optim.SGD``'s rule),
  is applied per member with its own learning rate :math:`\eta_m`;
* each member draws its mini-batch order from its own seed exactly as ``train_classifier``
  does, so a member of the ensemble follows ``train_classifier`` on the same initial network
  to rounding error (the tests check it).

Typical use::

    data = training.load_digits_split()
    sweep = init_scale_sweep(data, scales=(0.25, 1, 4), lrs=(0.02,), seeds=(0, 1, 2))
    sweep.accuracy[1, 0]        # with LayerNorm, lr 0.02: (len(scales), len(seeds))
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch
from torch import nn

from layernorm_tutorial import functional
from layernorm_tutorial._seeding import seeded
from layernorm_tutorial.lab.common.training import DigitsData, TrainingResult
from layernorm_tutorial.nn import LayerNorm

__all__ = [
    "scaled_he_mlp",
    "MLPEnsemble",
    "train_ensemble",
    "InitScaleSweep",
    "init_scale_sweep",
]


def scaled_he_mlp(depth: int, width: int = 64, *, scale: float, layer_norm: bool,
                  seed: int = 0, in_features: int = 64, classes: int = 10) -> nn.Sequential:
    r"""``training.make_mlp``'s architecture with hidden weights ``scale`` times He's.

    Hidden ``Linear`` weights are drawn from
    :math:`N(0,\ \mathrm{scale}^2 \cdot 2/\mathrm{fan\_in})`. ``scale = 1`` is He
    initialisation, which keeps the signal's second moment constant through ReLU layers;
    without normalization each hidden layer multiplies it by about ``scale**2``. The
    classifier's weights come from :math:`N(0, 1/\mathrm{fan\_in})` whatever ``scale`` is;
    all biases are zero. With the same ``seed`` the weights of two scales differ only by the
    factor, and the nets with and without LayerNorm start from the same weights. The
    caller's global random state is left as it was.
    """
    if not isinstance(depth, int) or depth < 1:
        raise ValueError(f"depth must be a positive int, got {depth!r}")
    if not isinstance(width, int) or width < 2:
        raise ValueError(f"width must be an int >= 2, got {width!r}")
    if not (isinstance(scale, (int, float)) and math.isfinite(scale) and scale > 0):
        raise ValueError(f"scale must be a finite number > 0, got {scale!r}")
    generator = torch.Generator().manual_seed(seed)
    layers: list[nn.Module] = []
    fan_in = in_features
    with seeded(seed):          # nn.Linear's constructor draws from the global generator
        for _ in range(depth):
            linear = nn.Linear(fan_in, width)
            std = scale * math.sqrt(2.0 / fan_in)
            with torch.no_grad():
                linear.weight.copy_(std * torch.randn(width, fan_in, generator=generator))
                linear.bias.zero_()
            layers.append(linear)
            if layer_norm:
                layers.append(LayerNorm(width))
            layers.append(nn.ReLU())
            fan_in = width
        classifier = nn.Linear(fan_in, classes)
    with torch.no_grad():
        classifier.weight.copy_(torch.randn(classes, fan_in, generator=generator)
                                / math.sqrt(fan_in))
        classifier.bias.zero_()
    layers.append(classifier)
    return nn.Sequential(*layers)


def _blocks(model: nn.Sequential) -> tuple[list[nn.Linear], list[LayerNorm | None]]:
    """Split ``Linear -> [LayerNorm] -> ReLU`` blocks and the final ``Linear``; else raise."""
    linears: list[nn.Linear] = []
    norms: list[LayerNorm | None] = []
    modules = list(model)
    i = 0
    while i < len(modules) - 1:
        if not isinstance(modules[i], nn.Linear):
            raise ValueError(f"expected nn.Linear at position {i}, got {type(modules[i]).__name__}")
        linears.append(modules[i])
        i += 1
        if isinstance(modules[i], LayerNorm):
            norms.append(modules[i])
            i += 1
        else:
            norms.append(None)
        if i >= len(modules) or not isinstance(modules[i], nn.ReLU):
            raise ValueError(f"expected nn.ReLU at position {i} (Linear -> [LayerNorm] -> ReLU)")
        i += 1
    if i != len(modules) - 1 or not isinstance(modules[-1], nn.Linear):
        raise ValueError("expected the model to end with one nn.Linear classifier")
    linears.append(modules[-1])
    return linears, norms


class MLPEnsemble:
    """``M`` MLPs of one architecture stored as stacked tensors, run by batched products.

    Built from ``M`` models of ``training.make_mlp``'s form (``from_models``). Per hidden
    layer ``l``: ``weights[l]`` ``(M, out, in)``, ``biases[l]`` ``(M, out)``, and for the
    LayerNorm gain and bias ``gains[l]``, ``shifts[l]`` ``(M, out)`` (ones and zeros, and
    unused, for members without LayerNorm). ``layer_norm`` ``(M,)`` says which members
    normalize; their LayerNorm is ``functional.layer_norm`` over the ``out`` features.
    """

    def __init__(self, weights, biases, gains, shifts, layer_norm, eps: float = 1e-5):
        self.weights = [w.detach().clone().requires_grad_() for w in weights]
        self.biases = [b.detach().clone().requires_grad_() for b in biases]
        self.gains = [g.detach().clone().requires_grad_() for g in gains]
        self.shifts = [s.detach().clone().requires_grad_() for s in shifts]
        self.layer_norm = torch.as_tensor(layer_norm, dtype=torch.bool)
        self.eps = eps
        self._normalized = torch.nonzero(self.layer_norm).flatten()

    @classmethod
    def from_models(cls, models: Sequence[nn.Sequential]) -> MLPEnsemble:
        """Stack the parameters of ``models`` (same layer sizes; LayerNorm may differ)."""
        if len(models) == 0:
            raise ValueError("models must hold at least one nn.Sequential")
        parsed = [_blocks(m) for m in models]
        shapes = [[tuple(lin.weight.shape) for lin in linears] for linears, _ in parsed]
        if any(s != shapes[0] for s in shapes):
            raise ValueError(f"all models need the same layer sizes, got {shapes}")
        eps_values = {norm.eps for _, norms in parsed for norm in norms if norm is not None}
        if len(eps_values) > 1:
            raise ValueError(f"all LayerNorms need the same eps, got {sorted(eps_values)}")
        depth = len(shapes[0]) - 1
        uses_ln = []
        for _, norms in parsed:
            flags = {norm is not None for norm in norms}
            if len(flags) != 1:
                raise ValueError("a model must have LayerNorm in every hidden block or in none")
            uses_ln.append(flags.pop())

        def stack(getter):
            return [torch.stack([getter(p, layer) for p in parsed]) for layer in range(depth)]

        def norm_param(p, layer, name, fill):
            norm = p[1][layer]
            if norm is not None:
                return getattr(norm, name).detach()
            return torch.full_like(p[0][layer].bias, fill).detach()

        weights = stack(lambda p, layer: p[0][layer].weight.detach())
        weights.append(torch.stack([p[0][-1].weight.detach() for p in parsed]))
        biases = stack(lambda p, layer: p[0][layer].bias.detach())
        biases.append(torch.stack([p[0][-1].bias.detach() for p in parsed]))
        gains = stack(lambda p, layer: norm_param(p, layer, "weight", 1.0))
        shifts = stack(lambda p, layer: norm_param(p, layer, "bias", 0.0))
        eps = eps_values.pop() if eps_values else 1e-5
        return cls(weights, biases, gains, shifts, uses_ln, eps)

    @property
    def members(self) -> int:
        return self.weights[0].shape[0]

    def parameters(self) -> list[torch.Tensor]:
        return self.weights + self.biases + self.gains + self.shifts

    def member_parameters(self, m: int) -> list[torch.Tensor]:
        """Member ``m``'s tensors in the order of its ``nn.Sequential.parameters()``."""
        out = []
        for layer in range(len(self.weights) - 1):
            out += [self.weights[layer][m], self.biases[layer][m]]
            if self.layer_norm[m]:
                out += [self.gains[layer][m], self.shifts[layer][m]]
        return out + [self.weights[-1][m], self.biases[-1][m]]

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        """Logits ``(M, B, classes)`` of inputs ``(M, B, in)`` (member ``m`` sees ``x[m]``)."""
        h = x
        rows = self._normalized
        for layer in range(len(self.weights) - 1):
            h = torch.baddbmm(self.biases[layer][:, None, :], h,
                              self.weights[layer].transpose(1, 2))
            if len(rows) > 0:
                normed = functional.layer_norm(h[rows], h.shape[-1:], eps=self.eps)
                gain, shift = self.gains[layer][rows, None, :], self.shifts[layer][rows, None, :]
                normed = normed * gain + shift
                h = h.index_copy(0, rows, normed)
            h = torch.relu(h)
        return torch.baddbmm(self.biases[-1][:, None, :], h, self.weights[-1].transpose(1, 2))


def _member_losses(logits: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """Mean cross-entropy per member: logits ``(M, B, C)``, labels ``(M, B)`` -> ``(M,)``."""
    members, batch, classes = logits.shape
    per_sample = nn.functional.cross_entropy(logits.reshape(-1, classes), y.reshape(-1),
                                             reduction="none")
    return per_sample.reshape(members, batch).mean(1)


def train_ensemble(ensemble: MLPEnsemble, data: DigitsData, *, epochs: int,
                   lrs: Sequence[float], seeds: Sequence[int], batch_size: int = 64,
                   momentum: float = 0.9) -> list[TrainingResult]:
    """Train every member as ``training.train_classifier`` would; one result per member.

    ``lrs[m]`` and ``seeds[m]`` are member ``m``'s learning rate and batch-order seed. After
    every epoch the mean training loss and the test loss and accuracy are recorded; a member
    whose training loss is not finite stops there (its curves end, its parameters freeze),
    as ``train_classifier`` stops.
    """
    members = ensemble.members
    if len(lrs) != members or len(seeds) != members:
        raise ValueError(f"need one lr and one seed per member ({members}), got "
                         f"{len(lrs)} and {len(seeds)}")
    if epochs < 1 or batch_size < 1 or any(not lr > 0 for lr in lrs):
        raise ValueError(f"need epochs >= 1, batch_size >= 1, every lr > 0; got {epochs}, "
                         f"{batch_size}, {list(lrs)}")
    params = ensemble.parameters()
    buffers = [torch.zeros_like(p) for p in params]
    lr = torch.tensor(lrs, dtype=params[0].dtype)
    active = torch.ones(members, dtype=torch.bool)
    generators = {s: torch.Generator().manual_seed(s) for s in dict.fromkeys(seeds)}
    results = [TrainingResult() for _ in range(members)]
    n = len(data.y_train)
    x_test = data.x_test.to(params[0].dtype).expand(members, *data.x_test.shape)
    y_test = data.y_test.expand(members, -1)
    x_train = data.x_train.to(params[0].dtype)
    for _ in range(epochs):
        epoch_orders = {s: torch.randperm(n, generator=g) for s, g in generators.items()}
        orders = torch.stack([epoch_orders[s] for s in seeds])          # (M, n)
        total = torch.zeros(members, dtype=torch.float64)
        for start in range(0, n, batch_size):
            idx = orders[:, start:start + batch_size]                   # (M, b)
            losses = _member_losses(ensemble(x_train[idx]), data.y_train[idx])
            for p in params:
                p.grad = None
            losses.sum().backward()
            step = (lr * active).to(params[0].dtype)
            with torch.no_grad():
                for p, buf in zip(params, buffers, strict=True):
                    if p.grad is None:      # LayerNorm parameters when no member uses them
                        continue
                    buf.mul_(momentum).add_(p.grad)
                    p.sub_(step.view(-1, *([1] * (p.dim() - 1))) * buf)
            total += losses.detach().double() * idx.shape[1]
        with torch.no_grad():
            logits = ensemble(x_test)
            test_loss = _member_losses(logits, y_test)
            accuracy = (logits.argmax(-1) == y_test).double().mean(1)
        for m in torch.nonzero(active).flatten().tolist():
            results[m].train_loss.append(total[m].item() / n)
            results[m].test_loss.append(test_loss[m].item())
            results[m].test_accuracy = accuracy[m].item()
            if not np.isfinite(results[m].train_loss[-1]):
                active[m] = False
        if not active.any():
            break
    return results


@dataclass(frozen=True)
class InitScaleSweep:
    """Results of ``init_scale_sweep``; arrays are indexed ``[layer_norm, lr, scale, seed]``.

    ``layer_norm`` index 0 is without and 1 with LayerNorm. ``accuracy`` is the final test
    accuracy (a fraction), ``train_loss`` the last recorded mean training loss (nats), and
    ``diverged`` marks runs whose training loss became non-finite.
    """

    scales: tuple
    lrs: tuple
    seeds: tuple
    epochs: int
    accuracy: np.ndarray
    train_loss: np.ndarray
    diverged: np.ndarray

    def spread(self, layer_norm: bool, lr: float, quantity: str = "accuracy") -> dict:
        """Mean, std (ddof 0), min and max over seeds, one value per scale, for one curve."""
        values = getattr(self, quantity)[int(layer_norm), self.lrs.index(lr)]
        return {"mean": values.mean(-1), "std": values.std(-1), "min": values.min(-1),
                "max": values.max(-1)}


def init_scale_sweep(data: DigitsData, *, scales: Sequence[float], lrs: Sequence[float],
                     seeds: Sequence[int], depth: int = 8, width: int = 64, epochs: int = 15,
                     batch_size: int = 64) -> InitScaleSweep:
    """Train ``scaled_he_mlp`` for every (LayerNorm or not, lr, scale, seed), as one ensemble.

    A seed fixes the weight directions and the batch order: for one seed, all scales,
    learning rates and both variants start from the same weights up to the scale factor.
    """
    if not (scales and lrs and seeds):
        raise ValueError("scales, lrs and seeds must each hold at least one value")
    grid = [(ln, lr, scale, seed) for ln in (False, True) for lr in lrs for scale in scales
            for seed in seeds]
    models = [scaled_he_mlp(depth, width, scale=scale, layer_norm=ln, seed=seed)
              for ln, _, scale, seed in grid]
    results = train_ensemble(MLPEnsemble.from_models(models), data, epochs=epochs,
                             lrs=[g[1] for g in grid], seeds=[g[3] for g in grid],
                             batch_size=batch_size)
    shape = (2, len(lrs), len(scales), len(seeds))
    accuracy = np.array([r.test_accuracy for r in results]).reshape(shape)
    train_loss = np.array([r.train_loss[-1] for r in results]).reshape(shape)
    diverged = ~np.isfinite(train_loss)
    return InitScaleSweep(tuple(scales), tuple(lrs), tuple(seeds), epochs, accuracy,
                          train_loss, diverged)
