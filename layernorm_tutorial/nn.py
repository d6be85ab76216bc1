"""Thin ``nn.Module`` wrappers around :mod:`layernorm_tutorial.functional`.

Constructor arguments, parameter and buffer names, and therefore ``state_dict`` keys, are
those of the ``torch.nn`` modules of the same name, so ``load_state_dict`` works in both
directions. Each ``forward`` is one call to the functional implementation.
"""

from __future__ import annotations

import torch
from torch import nn

from . import functional
from ._validation import NumGroupsZeroError, as_int, as_shape
from .running_stats import momentum_factor

__all__ = ["LayerNorm", "RMSNorm", "DynamicTanh", "GroupNorm", "BatchNorm1d", "BatchNorm2d",
           "InstanceNorm2d"]


def _register_affine(module: nn.Module, shape, affine: bool, bias: bool | None,
                     factory) -> None:
    """Register ``weight`` (gamma) and ``bias`` (beta) of ``shape``, or None, as torch does.

    ``bias=None`` means the module has no bias at all (RMS norm): only ``weight`` is
    registered."""
    weight = nn.Parameter(torch.empty(shape, **factory)) if affine else None
    module.register_parameter("weight", weight)
    if bias is not None:
        module.register_parameter(
            "bias", nn.Parameter(torch.empty(shape, **factory)) if affine and bias else None)


def _reset_affine(module: nn.Module) -> None:
    """gamma = 1 and beta = 0: the normalization starts as a pure standardization."""
    if module.weight is not None:
        nn.init.ones_(module.weight)
    if getattr(module, "bias", None) is not None:
        nn.init.zeros_(module.bias)


class LayerNorm(nn.Module):
    """Layer norm over the trailing ``normalized_shape`` dims; weight (1s) and bias (0s)
    of shape ``normalized_shape``. Input ``(*, *normalized_shape)``, output the same."""

    def __init__(self, normalized_shape, eps: float = 1e-5, elementwise_affine: bool = True,
                 bias: bool = True, device=None, dtype=None):
        super().__init__()
        factory = {"device": device, "dtype": dtype}
        self.normalized_shape = as_shape(normalized_shape)
        self.eps = eps
        self.elementwise_affine = elementwise_affine
        _register_affine(self, self.normalized_shape, elementwise_affine, bias, factory)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        _reset_affine(self)

    def forward(self, input):
        return functional.layer_norm(input, self.normalized_shape, self.weight, self.bias, self.eps)

    def extra_repr(self) -> str:
        return (f"{self.normalized_shape}, eps={self.eps}, "
                f"elementwise_affine={self.elementwise_affine}, bias={self.bias is not None}")


class RMSNorm(nn.Module):
    """RMS norm over the trailing ``normalized_shape`` dims with a weight of 1s (no bias).
    ``eps=None`` uses the machine epsilon of the compute dtype, as torch does."""

    def __init__(self, normalized_shape, eps: float | None = None,
                 elementwise_affine: bool = True, device=None, dtype=None):
        super().__init__()
        self.normalized_shape = as_shape(normalized_shape)
        self.eps = eps
        self.elementwise_affine = elementwise_affine
        _register_affine(self, self.normalized_shape, elementwise_affine, None,
                         {"device": device, "dtype": dtype})
        self.reset_parameters()

    def reset_parameters(self) -> None:
        _reset_affine(self)

    def forward(self, input):
        return functional.rms_norm(input, self.normalized_shape, self.weight, self.eps)

    def extra_repr(self) -> str:
        return (f"{self.normalized_shape}, eps={self.eps}, "
                f"elementwise_affine={self.elementwise_affine}")


class DynamicTanh(nn.Module):
    r"""Dynamic Tanh (DyT, Zhu et al. 2025): ``weight * tanh(alpha * x) + bias``, element-wise.

    Parameters: ``alpha`` of shape ``(1,)`` initialized to ``alpha_init`` (0.5 in the paper
    for most models), ``weight`` (1s) and ``bias`` (0s) of shape ``normalized_shape`` when
    ``elementwise_affine`` (``bias=False`` drops the bias). Input ``(*, *normalized_shape)``,
    output the same. A drop-in for :class:`LayerNorm` that computes no statistics.
    """

    def __init__(self, normalized_shape, alpha_init: float = 0.5,
                 elementwise_affine: bool = True, bias: bool = True, device=None, dtype=None):
        super().__init__()
        if isinstance(alpha_init, bool) or not isinstance(alpha_init, (int, float)):
            raise TypeError(f"alpha_init must be a real number, got {alpha_init!r}")
        factory = {"device": device, "dtype": dtype}
        self.normalized_shape = as_shape(normalized_shape)
        self.alpha_init = float(alpha_init)
        self.elementwise_affine = elementwise_affine
        self.alpha = nn.Parameter(torch.empty(1, **factory))
        _register_affine(self, self.normalized_shape, elementwise_affine, bias, factory)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        nn.init.constant_(self.alpha, self.alpha_init)
        _reset_affine(self)

    def forward(self, input):
        return functional.dyt(input, self.alpha, self.weight, self.bias)

    def extra_repr(self) -> str:
        return (f"{self.normalized_shape}, alpha_init={self.alpha_init}, "
                f"elementwise_affine={self.elementwise_affine}, bias={self.bias is not None}")


class GroupNorm(nn.Module):
    """Group norm of an ``(N, C, *)`` input in ``num_groups`` groups of channels, with a
    per-channel weight and bias of shape ``(C,)``."""

    def __init__(self, num_groups: int, num_channels: int, eps: float = 1e-5,
                 affine: bool = True, device=None, dtype=None, *, bias: bool = True):
        super().__init__()
        if as_int(num_groups, "num_groups") == 0:  # torch: ZeroDivisionError
            raise NumGroupsZeroError("num_groups must be a positive int, got 0")
        num_groups = as_int(num_groups, "num_groups", minimum=1, error=ValueError)
        num_channels = as_int(num_channels, "num_channels", minimum=0)
        if num_channels % num_groups != 0:
            raise ValueError(
                f"num_channels ({num_channels}) must be divisible by num_groups "
                f"({num_groups})")
        self.num_groups, self.num_channels = num_groups, num_channels
        self.eps, self.affine = eps, affine
        _register_affine(self, (num_channels,), affine, bias,
                         {"device": device, "dtype": dtype})
        self.reset_parameters()

    def reset_parameters(self) -> None:
        _reset_affine(self)

    def forward(self, input):
        return functional.group_norm(input, self.num_groups, self.weight, self.bias, self.eps)

    def extra_repr(self) -> str:
        return (f"{self.num_groups}, {self.num_channels}, eps={self.eps}, "
                f"affine={self.affine}, bias={self.bias is not None}")


class _NormBase(nn.Module):
    """Parameters and running-statistics buffers shared by batch and instance norm."""

    def __init__(self, num_features: int, eps: float = 1e-5, momentum: float | None = 0.1,
                 affine: bool = True, track_running_stats: bool = True,
                 device=None, dtype=None, *, bias: bool = True):
        super().__init__()
        num_features = as_int(num_features, "num_features", minimum=0)
        factory = {"device": device, "dtype": dtype}
        self.num_features, self.eps, self.momentum = num_features, eps, momentum
        self.affine, self.track_running_stats = affine, track_running_stats
        _register_affine(self, (num_features,), affine, bias, factory)
        if track_running_stats:
            self.register_buffer("running_mean", torch.zeros(num_features, **factory))
            self.register_buffer("running_var", torch.ones(num_features, **factory))
            self.register_buffer(
                "num_batches_tracked", torch.tensor(0, dtype=torch.long, device=device))
        else:
            self.register_buffer("running_mean", None)
            self.register_buffer("running_var", None)
            self.register_buffer("num_batches_tracked", None)
        self.reset_parameters()

    def reset_running_stats(self) -> None:
        if self.track_running_stats:
            self.running_mean.zero_()
            self.running_var.fill_(1)
            self.num_batches_tracked.zero_()

    def reset_parameters(self) -> None:
        self.reset_running_stats()
        _reset_affine(self)

    def _check_input_dim(self, input) -> None:
        raise NotImplementedError

    def extra_repr(self) -> str:
        return (f"{self.num_features}, eps={self.eps}, momentum={self.momentum}, "
                f"affine={self.affine}, bias={self.bias is not None}, "
                f"track_running_stats={self.track_running_stats}")


class _BatchNorm(_NormBase):
    def forward(self, input):
        self._check_input_dim(input)
        # momentum=None: cumulative moving average, factor 1/(number of batches seen so far)
        factor = 0.0 if self.momentum is None else self.momentum
        if self.training and self.track_running_stats:
            self.num_batches_tracked.add_(1)
            factor = momentum_factor(self.momentum, self.num_batches_tracked)
        use_batch_stats = self.training or self.running_mean is None
        track = not self.training or self.track_running_stats
        return functional.batch_norm(
            input,
            self.running_mean if track else None,
            self.running_var if track else None,
            self.weight, self.bias, use_batch_stats, factor, self.eps,
        )


class BatchNorm1d(_BatchNorm):
    """Batch norm of a ``(N, C)`` or ``(N, C, L)`` input, per channel ``C``."""

    def _check_input_dim(self, input) -> None:
        if input.dim() not in (2, 3):
            raise ValueError(f"expected 2D or 3D input (got {input.dim()}D input)")


class BatchNorm2d(_BatchNorm):
    """Batch norm of a ``(N, C, H, W)`` input, per channel ``C``."""

    def _check_input_dim(self, input) -> None:
        if input.dim() != 4:
            raise ValueError(f"expected 4D input (got {input.dim()}D input)")


class InstanceNorm2d(_NormBase):
    """Instance norm of a ``(N, C, H, W)`` or unbatched ``(C, H, W)`` input.

    Defaults follow torch: ``affine=False`` and ``track_running_stats=False``.
    """

    def __init__(self, num_features: int, eps: float = 1e-5, momentum: float | None = 0.1,
                 affine: bool = False, track_running_stats: bool = False,
                 device=None, dtype=None, *, bias: bool = True):
        super().__init__(num_features, eps, momentum, affine, track_running_stats,
                         device, dtype, bias=bias)

    def forward(self, input):
        if input.dim() not in (3, 4):
            raise ValueError(f"expected 3D or 4D input (got {input.dim()}D input)")
        feature_dim = input.dim() - 3
        if input.size(feature_dim) != self.num_features and self.affine:
            raise ValueError(
                f"expected input's size at dim={feature_dim} to match num_features "
                f"({self.num_features}), but got: {input.size(feature_dim)}.")
        if input.dim() == 3:
            return self._normalize(input.unsqueeze(0)).squeeze(0)
        return self._normalize(input)

    def _normalize(self, input):
        return functional.instance_norm(
            input, self.running_mean, self.running_var, self.weight, self.bias,
            self.training or not self.track_running_stats,
            self.momentum if self.momentum is not None else 0.0, self.eps,
        )
