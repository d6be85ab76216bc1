"""Argument checks shared by the functional, autograd and nn layers.

Every check raises the exception type torch raises for the same mistake, with a message that
names the offending argument and says what was expected. Where torch has no check of its own
and returns instead, the docstring of the check says so (a negative ``eps``, ``as_eps``;
complex input to ``rms_norm``, ``check_tensor``).
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
    """``value`` must be a floating-point tensor.

    Not a tensor: TypeError. An integer, bool or complex tensor: NotImplementedError, the
    type of torch's "not implemented for 'Long'" (a RuntimeError subclass) for every norm
    here. One exception in torch: its composite ``rms_norm`` returns a complex result,
    ``x / sqrt(mean(x**2) + eps)`` with complex squares (not ``|x|**2``), which is no
    normalization; the package refuses it like the other dtypes."""
    if not isinstance(value, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got {type(value).__name__}")
    if not (value.is_floating_point()):
        raise NotImplementedError(
            f"{name} must have a floating-point dtype, got {value.dtype}")


def _is_integer(value) -> bool:
    """The package's one rule for an integer argument, torch's: Python and NumPy integers
    (``numbers.Integral``) and 0-d integer tensors, but not bools (Python, NumPy or tensor)
    and not floats, even integral ones such as ``2.0``."""
    if isinstance(value, torch.Tensor):
        return (value.dim() == 0 and not value.is_floating_point()
                and not value.is_complex() and value.dtype != torch.bool)
    return isinstance(value, numbers.Integral) and not isinstance(value, bool)


def as_int(value, name: str, minimum: int | None = None, error=RuntimeError) -> int:
    """``value`` as a Python int, by the package's one rule for integer arguments.

    Accepts what torch accepts for an ``int`` argument (Python and NumPy integers, 0-d
    integer tensors); anything else, bools and floats included, raises TypeError (torch's
    type). A value below ``minimum`` raises ``error`` (RuntimeError by default, torch's type
    for a negative size), naming the argument and the smallest value allowed."""
    if not _is_integer(value):
        what = (f"a tensor of shape {list(value.shape)} and dtype {value.dtype}"
                if isinstance(value, torch.Tensor) else
                f"{value!r} ({type(value).__name__})")
        raise TypeError(f"{name} must be an int, got {what}")
    number = int(value)
    if minimum is not None and number < minimum:
        expected = "a positive int" if minimum == 1 else f"an int >= {minimum}"
        raise error(f"{name} must be {expected}, got {number}")
    return number


class NumGroupsZeroError(ZeroDivisionError, RuntimeError):
    """``num_groups=0``. torch's ``group_norm`` fails there with a bare ZeroDivisionError
    (it divides the channel count by ``num_groups``); this subclass of it carries a message
    naming the argument and is also the RuntimeError that a negative count raises."""


def as_num_groups(num_groups) -> int:
    """``num_groups`` of ``group_norm`` as a positive Python int (the rule of
    :func:`as_int`): 0 raises :class:`NumGroupsZeroError` (a ZeroDivisionError, torch's
    type), a negative count RuntimeError (torch's type)."""
    number = as_int(num_groups, "num_groups")
    if number <= 0:
        error = NumGroupsZeroError if number == 0 else RuntimeError
        raise error(f"num_groups must be a positive int, got {number}")
    return number


def as_shape(normalized_shape) -> tuple[int, ...]:
    """Turn an int, a NumPy integer, or a sequence of them (list, tuple, torch.Size) into a
    tuple of Python ints: the one rule for ``normalized_shape`` in the whole package."""
    if _is_integer(normalized_shape):
        return (int(normalized_shape),)
    if isinstance(normalized_shape, Sequence) and all(
        _is_integer(d) for d in normalized_shape
    ):
        return tuple(int(d) for d in normalized_shape)
    raise TypeError(
        "normalized_shape must be an int or a sequence of ints, "
        f"got {normalized_shape!r}"
    )


def check_normalized_shape(input: torch.Tensor, shape: tuple[int, ...]) -> None:
    """The trailing dimensions of ``input`` must equal ``normalized_shape``.

    A size of 0 is allowed, as in torch: ``layer_norm(torch.empty(3, 0), (0,))`` returns an
    empty tensor. A negative size raises RuntimeError (torch's type)."""
    if len(shape) == 0:
        raise RuntimeError("normalized_shape must have at least one dimension, got []")
    if any(d < 0 for d in shape):
        raise RuntimeError(f"normalized_shape must hold sizes >= 0, got {list(shape)}")
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
    verify_values_per_channel(values, size)


def verify_values_per_channel(values: int, size: Sequence[int], world_size: int = 1) -> None:
    """Torch's ValueError when the training statistics of a channel rest on one value.

    ``values`` is the number of values behind each channel's statistics (summed over all
    ranks for synchronized batch norm), ``size`` this process's input size, ``world_size``
    the number of ranks that contributed (named in the message when more than one)."""
    if values != 1:
        return
    where = f" (1 value per channel across all {world_size} ranks)" if world_size > 1 else ""
    raise ValueError(
        f"Expected more than 1 value per channel when training, got input size "
        f"{list(size)}{where}"
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


def as_eps(eps, name: str = "eps"):
    """``eps`` as a Python float (None stays None, for rms_norm's default).

    Any real number is accepted, as torch accepts it: Python and NumPy scalars, 0-d tensors,
    and bools (``True`` is 1.0). Non-numbers raise TypeError (torch's type), negative values
    ValueError (torch would return NaN instead)."""
    if eps is None:
        return None
    if isinstance(eps, torch.Tensor):
        if eps.numel() != 1 or eps.is_complex():
            raise TypeError(f"{name} must be a real number, got a tensor of shape "
                            f"{list(eps.shape)} and dtype {eps.dtype}")
        eps = eps.item()
    if not isinstance(eps, numbers.Real):
        raise TypeError(f"{name} must be a real number, got {eps!r}")
    value = float(eps)
    if not value >= 0:  # also refuses NaN
        raise ValueError(f"{name} must be a non-negative number, got {eps!r}")
    return value


def check_batch_norm_eps(eps, training: bool) -> None:
    """Torch's rule: training-mode batch norm needs ``eps > 0`` (a constant channel would
    divide 0 by 0); evaluation mode needs ``eps >= 0``. Same ValueError text as torch 2.13."""
    value = as_eps(eps)
    if training and value <= 0.0:
        shown = eps if isinstance(eps, numbers.Real) else value
        raise ValueError(f"batch_norm eps must be positive during training, but got {shown}")


def check_param_dtypes(fn: str, input: torch.Tensor, **params) -> None:
    """Torch's CPU rule for mixed dtypes, with a message naming the argument.

    Every parameter that is not None (weight, bias, running statistics) must have the input's
    dtype, or fp32 when the input is fp16/bf16 (mixed precision); and all of them must share
    one dtype. Torch raises RuntimeError("mixed dtype (CPU): ...") otherwise."""
    allowed = {input.dtype, compute_dtype(input.dtype)}
    given = {name: p.dtype for name, p in params.items() if isinstance(p, torch.Tensor)}
    for name, dtype in given.items():
        if dtype not in allowed:
            expected = " or ".join(str(d) for d in sorted(allowed, key=str))
            raise RuntimeError(
                f"{fn}: mixed dtypes: {name} has dtype {dtype} but input has dtype "
                f"{input.dtype}; expected {name} of dtype {expected} (convert one of them "
                "with .to(dtype))")
    if len(set(given.values())) > 1:
        listed = ", ".join(f"{name}={dtype}" for name, dtype in given.items())
        raise RuntimeError(f"{fn}: mixed dtypes: parameters must share one dtype, got {listed}")


def check_momentum(momentum, name: str = "momentum") -> None:
    """Functional batch/instance norm need a number (torch raises TypeError for None; the nn
    modules turn ``momentum=None`` into a cumulative-average factor before calling them)."""
    if isinstance(momentum, bool) or not isinstance(momentum, (numbers.Real, torch.Tensor)):
        raise TypeError(
            f"{name} must be a float, got {momentum!r} (momentum=None, the cumulative "
            "average, is handled by the nn modules)"
        )


def check_channel_norm_args(fn, input, running_mean, running_var, weight, bias,
                            momentum) -> None:
    """Checks shared by batch and instance norm: an ``(N, C, *)`` input and per-channel
    ``(C,)`` running statistics and parameters of a compatible dtype."""
    check_tensor(input, "input")
    check_channels_input(input, fn)
    num_channels = input.shape[1]
    check_running_stat(running_mean, "running_mean", num_channels)
    check_running_stat(running_var, "running_var", num_channels)
    check_param(weight, "weight", (num_channels,))
    check_param(bias, "bias", (num_channels,))
    check_param_dtypes(fn, input, running_mean=running_mean, running_var=running_var,
                       weight=weight, bias=bias)
    check_momentum(momentum)


def check_batch_norm_args(input, running_mean, running_var, weight, bias,
                          training, momentum, eps) -> None:
    """All argument checks of ``batch_norm`` (functional and hand-derived autograd alike)."""
    check_channel_norm_args("batch_norm", input, running_mean, running_var, weight, bias,
                            momentum)
    if training:
        verify_batch_size(input.shape)
    elif running_mean is None or running_var is None:
        raise RuntimeError(
            "batch_norm: running_mean and running_var must be tensors when training=False"
        )
    check_batch_norm_eps(eps, training)  # after the batch-size check, in torch's order


def check_instance_norm_args(input, running_mean, running_var, weight, bias,
                             use_input_stats, momentum, eps) -> None:
    """All argument checks of ``instance_norm`` (eps = 0 is allowed, as in torch)."""
    check_channel_norm_args("instance_norm", input, running_mean, running_var, weight, bias,
                            momentum)
    as_eps(eps)
    if use_input_stats:
        verify_spatial_size(input.shape)
    elif running_mean is None or running_var is None:
        raise RuntimeError("instance_norm: running_mean and running_var must be tensors "
                           "when use_input_stats=False")


def check_layer_norm_args(input, normalized_shape, weight, bias, eps):
    """All argument checks of ``layer_norm`` (functional, hand-derived autograd and Triton).

    Returns ``(shape, eps)``: ``normalized_shape`` as a tuple of ints and ``eps`` as a float."""
    check_tensor(input, "input")
    shape = as_shape(normalized_shape)
    check_normalized_shape(input, shape)
    check_param(weight, "weight", shape)
    check_param(bias, "bias", shape)
    check_param_dtypes("layer_norm", input, weight=weight, bias=bias)
    return shape, as_eps(eps)


def check_dyt_args(input, alpha, weight, bias) -> tuple[int, ...]:
    """All argument checks of ``dyt`` (functional and hand-derived autograd).

    ``alpha`` is a real number (not a bool) or a one-element floating-point tensor;
    ``weight`` and ``bias`` are None or tensors of one shared shape that must equal the
    trailing dimensions of ``input``. Returns that trailing shape (``()`` without
    parameters)."""
    check_tensor(input, "input")
    if isinstance(alpha, torch.Tensor):
        if not alpha.is_floating_point():
            raise RuntimeError(f"alpha must have a floating-point dtype, got {alpha.dtype}")
        if alpha.numel() != 1:
            raise RuntimeError(f"alpha must hold one value (shape [] or [1]), got shape "
                               f"{list(alpha.shape)}")
    elif isinstance(alpha, bool) or not isinstance(alpha, numbers.Real):
        raise TypeError(f"alpha must be a real number or a one-element tensor, got {alpha!r}")
    shape: tuple[int, ...] = ()
    for name, param in (("weight", weight), ("bias", bias)):
        if param is None:
            continue
        if not isinstance(param, torch.Tensor):
            raise TypeError(f"{name} must be a torch.Tensor or None, got {type(param).__name__}")
        if param.dim() == 0:
            raise RuntimeError(f"{name} must have at least one dimension, got a 0-d tensor")
        if shape and tuple(param.shape) != shape:
            raise RuntimeError(f"Expected bias to have the shape of weight {list(shape)}, "
                               f"but got bias of shape {list(param.shape)}")
        shape = tuple(param.shape)
    if shape:
        check_normalized_shape(input, shape)
    check_param_dtypes("dyt", input, weight=weight, bias=bias)
    return shape
