"""The three model families of the evidence chapter, each with a switchable normalization.

Only the normalization layer changes between the variants of a family; widths, depth,
initialization and everything else stay the same. All norm layers are the package's own
modules (:mod:`layernorm_tutorial.nn`) and recurrent cells
(:mod:`layernorm_tutorial.lab.rnn.cells`).

``MLP``  64 -> [Linear(width) -> norm -> ReLU] x depth -> Linear(10); norms
         ``none`` / ``bn`` (BatchNorm1d: per feature, over the batch) / ``ln`` (LayerNorm:
         per sample, over the width features).
``CNN``  1x8x8 -> conv3x3(16) -> norm -> ReLU -> conv3x3(32) -> norm -> ReLU -> maxpool 2
         -> conv3x3(32) -> norm -> ReLU -> global average pool -> Linear(10); norms
         ``none`` / ``bn`` (BatchNorm2d: per channel over N, H, W) / ``ln`` (LayerNorm over
         (C, H, W) per sample, as in Ba et al.) / ``gn`` (GroupNorm, 4 groups) / ``ln_c``
         (LayerNorm over the C channels at each position separately, as ConvNeXt does).
``RNN``  the 8 rows of an image read as 8 time steps of 8 pixels by an Elman cell with 64
         tanh units, then Linear(10) on the last state; norms ``none`` / ``bn`` (per-time-step
         BatchNorm of the summed inputs) / ``ln`` (Ba et al.'s LN-RNN).
"""

from __future__ import annotations

from torch import Tensor, nn

from layernorm_tutorial import nn as lnn
from layernorm_tutorial.lab.rnn.cells import SequenceClassifier

__all__ = ["MLP", "CNN", "RowRNN", "ChannelLayerNorm", "NORMS", "build_model"]

NUM_CLASSES = 10
NORMS = {
    "mlp": ("none", "bn", "ln"),
    "cnn": ("none", "bn", "ln", "gn", "ln_c"),
    "rnn": ("none", "bn", "ln"),
}
CNN_GROUPS = 4


def _check_norm(model: str, norm: str) -> None:
    if norm not in NORMS[model]:
        raise ValueError(f"norm for the {model} must be one of {NORMS[model]}, got {norm!r}")


class ChannelLayerNorm(nn.Module):
    """LayerNorm over the channels of an ``(N, C, H, W)`` map, separately at every (h, w).

    This is the normalization of ConvNeXt (Liu et al., 2022): move channels last, apply
    ``LayerNorm(C)`` (one mean and variance per sample *and position*, C gains), move back.
    """

    def __init__(self, num_channels: int, eps: float = 1e-6):
        super().__init__()
        self.norm = lnn.LayerNorm(num_channels, eps=eps)

    def forward(self, x: Tensor) -> Tensor:
        return self.norm(x.permute(0, 2, 3, 1)).permute(0, 3, 1, 2)


def _feature_norm(norm: str, width: int) -> nn.Module:
    if norm == "bn":
        return lnn.BatchNorm1d(width)
    if norm == "ln":
        return lnn.LayerNorm(width)
    return nn.Identity()


def _map_norm(norm: str, channels: int, size: int) -> nn.Module:
    """The norm layer for a ``(N, channels, size, size)`` feature map."""
    if norm == "bn":
        return lnn.BatchNorm2d(channels)
    if norm == "ln":
        return lnn.LayerNorm((channels, size, size))
    if norm == "gn":
        return lnn.GroupNorm(CNN_GROUPS, channels)
    if norm == "ln_c":
        return ChannelLayerNorm(channels)
    return nn.Identity()


class MLP(nn.Module):
    """Fully connected classifier of flat 8x8 images: ``(N, 64) -> (N, 10)`` logits."""

    def __init__(self, norm: str = "none", width: int = 128, depth: int = 3):
        super().__init__()
        _check_norm("mlp", norm)
        self.norm = norm
        layers, fan_in = [], 64
        for _ in range(depth):
            # a bias before BN or LN is removed by the mean subtraction, so it is kept only
            # in the unnormalized net (the norm layer's own bias plays its role)
            layers += [nn.Linear(fan_in, width, bias=norm == "none"),
                       _feature_norm(norm, width), nn.ReLU()]
            fan_in = width
        layers.append(nn.Linear(fan_in, NUM_CLASSES))
        self.net = nn.Sequential(*layers)

    def forward(self, x: Tensor) -> Tensor:
        return self.net(x)


class CNN(nn.Module):
    """Small convolutional classifier of ``(N, 1, 8, 8)`` images -> ``(N, 10)`` logits."""

    def __init__(self, norm: str = "none", channels: tuple[int, int, int] = (16, 32, 32)):
        super().__init__()
        _check_norm("cnn", norm)
        self.norm = norm
        c1, c2, c3 = channels
        bias = norm == "none"

        def block(c_in: int, c_out: int, size: int) -> list[nn.Module]:
            return [nn.Conv2d(c_in, c_out, 3, padding=1, bias=bias),
                    _map_norm(norm, c_out, size), nn.ReLU()]

        self.net = nn.Sequential(
            *block(1, c1, 8), *block(c1, c2, 8), nn.MaxPool2d(2), *block(c2, c3, 4),
            nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(c3, NUM_CLASSES),
        )

    def forward(self, x: Tensor) -> Tensor:
        return self.net(x)


_RNN_CELLS = {"none": "rnn", "bn": "bn_rnn", "ln": "ln_rnn"}


class RowRNN(nn.Module):
    """Elman RNN reading an image row by row: ``(N, 8, 8)`` (time, pixels) -> ``(N, 10)``."""

    def __init__(self, norm: str = "none", hidden_size: int = 64):
        super().__init__()
        _check_norm("rnn", norm)
        self.norm = norm
        self.classifier = SequenceClassifier(_RNN_CELLS[norm], 8, hidden_size, NUM_CLASSES,
                                             **({"max_steps": 8} if norm == "bn" else {}))

    def forward(self, x: Tensor) -> Tensor:
        return self.classifier(x)


_FAMILIES = {"mlp": MLP, "cnn": CNN, "rnn": RowRNN}


def build_model(model: str, norm: str) -> nn.Module:
    """``build_model("cnn", "gn")`` -> a freshly initialized model (uses torch's global RNG)."""
    if model not in _FAMILIES:
        raise ValueError(f"model must be one of {sorted(_FAMILIES)}, got {model!r}")
    return _FAMILIES[model](norm)
