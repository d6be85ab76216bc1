"""Argument checks shared by the functional, autograd and nn layers.

Every check raises the exception type torch raises for the same mistake, with a message that
names the offending argument and says what was expected.
"""

from __future__ import annotations

import numbers
from collections.abc import Sequence

import torch

HALF_DTYPES = (torch.float16, torch.bfloat16)


def compute_dtype(dtype: torch.dtype) -> torch.dtype:
    """Dtype in which statistics are accumulated: fp32 for fp16/bf16 inputs, else the input's."""
    return torch.float32 if dtype in HALF_DTYPES else dtype


def check_tensor(value, name: str) -> None:
    if not isinstance(value, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got {type(value).__name__}")
    if not (value.is_floating_point()):
        raise RuntimeError(f"{name} must have a floating-point dtype, got {value.dtype}")


def as_shape(normalized_shape) -> tuple[int, ...]:
    """Turn an int, list, tuple or torch.Size into a tuple of ints."""
    if isinstance(normalized_shape, int):
        return (normalized_shape,)
    if isinstance(normalized_shape, Sequence) and all(
        isinstance(d, int) for d in normalized_shape
    ):
        return tuple(normalized_shape)
    raise TypeError(
        "normalized_shape must be an int or a sequence of ints, "
        f"got {normalized_shape!r}"
    )


def check_normalized_shape(input: torch.Tensor, shape: tuple[int, ...]) -> None:
    """The trailing dimensions of ``input`` must equal ``normalized_shape``."""
    if len(shape) == 0:
        raise RuntimeError("normalized_shape must have at least one dimension, got []")
    if any(d <= 0 for d in shape):
        raise RuntimeError(f"normalized_shape must be positive, got {list(shape)}")
    if input.dim() < len(shape) or tuple(input.shape[input.dim() - len(shape):]) != shape:
        raise RuntimeError(
            f"Given normalized_shape={list(shape)}, expected input with shape "
            f"[*, {', '.join(map(str, shape))}], but got input of size {list(input.shape)}"
        )


def check_param(param, name: str, expected: tuple[int, ...]) -> None:
    """An optional affine parameter must be a tensor of exactly ``expected`` shape."""
    if param is None:
        return
    if not isinstance(param, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor or None, got {type(param).__name__}")
    if tuple(param.shape) != expected:
        raise RuntimeError(
            f"Expected {name} to have shape {list(expected)}, "
            f"but got {name} of shape {list(param.shape)}"
        )


def check_channels_input(input: torch.Tensor, fn: str) -> None:
    """Batch, instance and group norm need an (N, C, *) input."""
    if input.dim() < 2:
        raise RuntimeError(
            f"{fn}: expected input of shape (N, C, *) with at least 2 dimensions, "
            f"but got input of size {list(input.shape)}"
        )


def verify_batch_size(size: Sequence[int]) -> None:
    """Training-mode statistics need more than one value per channel (torch's rule)."""
    values = size[0]
    for d in size[2:]:
        values *= d
    if values == 1:
        raise ValueError(
            f"Expected more than 1 value per channel when training, got input size {list(size)}"
        )


def verify_spatial_size(size: Sequence[int]) -> None:
    """Instance statistics need more than one spatial element (torch's rule)."""
    values = 1
    for d in size[2:]:
        values *= d
    if values == 1:
        raise ValueError(
            f"Expected more than 1 spatial element when training, got input size {list(size)}"
        )


def check_running_stat(stat, name: str, num_channels: int) -> None:
    if stat is None:
        return
    if not isinstance(stat, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor or None, got {type(stat).__name__}")
    if stat.numel() != num_channels:
        raise RuntimeError(
            f"{name} should contain {num_channels} elements (one per channel of input "
            f"dimension 1), not {stat.numel()}"
        )


def check_eps(eps, name: str = "eps") -> None:
    if eps is not None and not (isinstance(eps, (int, float)) and eps >= 0):
        raise ValueError(f"{name} must be a non-negative number, got {eps!r}")


def check_momentum(momentum, name: str = "momentum") -> None:
    """Functional batch/instance norm need a number (torch raises TypeError for None; the nn
    modules turn ``momentum=None`` into a cumulative-average factor before calling them)."""
    if isinstance(momentum, bool) or not isinstance(momentum, (numbers.Real, torch.Tensor)):
        raise TypeError(
            f"{name} must be a float, got {momentum!r} (momentum=None, the cumulative "
            "average, is handled by the nn modules)"
        )


def check_batch_norm_args(input, running_mean, running_var, weight, bias,
                          training, momentum, eps) -> None:
    """All argument checks of ``batch_norm`` (functional and hand-derived autograd alike)."""
    check_tensor(input, "input")
    check_channels_input(input, "batch_norm")
    num_channels = input.shape[1]
    check_running_stat(running_mean, "running_mean", num_channels)
    check_running_stat(running_var, "running_var", num_channels)
    check_param(weight, "weight", (num_channels,))
    check_param(bias, "bias", (num_channels,))
    check_eps(eps)
    check_momentum(momentum)
    if training:
        verify_batch_size(input.shape)
    elif running_mean is None or running_var is None:
        raise RuntimeError(
            "batch_norm: running_mean and running_var must be tensors when training=False"
        )


def check_layer_norm_args(input, normalized_shape, weight, bias, eps) -> tuple[int, ...]:
    """All argument checks of ``layer_norm`` (functional and hand-derived autograd alike).

    Returns ``normalized_shape`` as a tuple of ints."""
    check_tensor(input, "input")
    shape = as_shape(normalized_shape)
    check_normalized_shape(input, shape)
    check_param(weight, "weight", shape)
    check_param(bias, "bias", shape)
    check_eps(eps)
    return shape
