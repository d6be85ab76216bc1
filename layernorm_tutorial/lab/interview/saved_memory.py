r"""What a LayerNorm keeps for its backward pass, and a variant that keeps only its output.

:func:`saved_tensors` records every tensor autograd saves while a function runs (through
``torch.autograd.graph.saved_tensors_hooks``), so a cell can show that ``torch``'s
``F.layer_norm`` keeps its **input** (plus the per-row mean and rstd), and that the
``Linear`` after it keeps the LayerNorm's **output**: two full activations for one block.

:func:`layer_norm_saving_output` is the memory-efficient LayerNorm of NVIDIA apex
(``memory_efficient=True``): it saves the output :math:`y` (which the next layer keeps
anyway) and ``rstd``, and recomputes :math:`\hat x = (y - \beta)/\gamma` in the backward,

.. math::

    dx = \mathrm{rstd}\,\big(g - \langle g\rangle - \hat x\,\langle g\odot\hat x\rangle\big),
    \quad g = \gamma\odot dy, \qquad d\gamma = \textstyle\sum_{\text{rows}} dy\odot\hat x,
    \quad d\beta = \textstyle\sum_{\text{rows}} dy,

so the LayerNorm adds only one number per row to what the block already stores. The price:
:math:`\gamma` must have no zero (and tiny entries lose precision in the division).

:func:`rms_norm_backward_from_rstd` is RMSNorm's backward from the saved ``rstd`` alone: it
takes no ``eps``, because :math:`\epsilon` enters the backward only through
:math:`\mathrm{rstd} = 1/\sqrt{\langle x^2\rangle + \epsilon}`.
:func:`grouped_partial_sums` is the two-stage column sum of :math:`d\gamma` in the Triton
tutorial's LayerNorm backward: row ``i`` adds into partial row ``i mod G``, then the ``G``
partial rows are summed; :func:`triton_tutorial_group_size` is that tutorial's choice of
``G`` from the row length.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from layernorm_tutorial import functional
from layernorm_tutorial.autograd import normalization_backward

__all__ = ["SavedTensor", "saved_tensors", "unique_bytes", "layer_norm_saving_output",
           "rms_norm_backward_from_rstd", "grouped_partial_sums", "triton_tutorial_group_size"]


@dataclass(frozen=True)
class SavedTensor:
    """One tensor autograd saved: its shape, dtype, bytes and the storage it lives in."""

    shape: tuple[int, ...]
    dtype: torch.dtype
    numel: int
    nbytes: int
    storage: int  # address of the underlying storage: equal for views of one tensor

    def is_storage_of(self, tensor: torch.Tensor) -> bool:
        """True when this saved tensor shares ``tensor``'s storage (it *is* that tensor)."""
        return self.storage == tensor.untyped_storage().data_ptr()


def saved_tensors(fn, *args, **kwargs):
    """Run ``fn(*args, **kwargs)`` and record what autograd saves for the backward pass.

    Returns ``(output, saved)`` with ``saved`` a list of :class:`SavedTensor` in the order
    autograd packed them. Nothing is copied: the hooks only look at the tensors.
    """
    saved: list[SavedTensor] = []

    def pack(t: torch.Tensor):
        saved.append(SavedTensor(tuple(t.shape), t.dtype, t.numel(), t.numel() * t.element_size(),
                                 t.untyped_storage().data_ptr()))
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        out = fn(*args, **kwargs)
    return out, saved


def unique_bytes(saved, *, ignore=()) -> int:
    """Bytes of the distinct storages in ``saved`` (a list of :class:`SavedTensor`), each
    storage counted once, leaving out those shared with a tensor in ``ignore`` (for
    example the parameters, to count activations only)."""
    skip = {t.untyped_storage().data_ptr() for t in ignore}
    sizes: dict[int, int] = {}
    for s in saved:
        if s.storage not in skip:
            sizes[s.storage] = max(sizes.get(s.storage, 0), s.nbytes)
    return sum(sizes.values())


class _LayerNormSavingOutput(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, normalized_shape, weight, bias, eps):
        dims = tuple(range(x.dim() - len(normalized_shape), x.dim()))
        cache = functional.standardize(x, dims, eps)
        y = cache.norm * weight + bias
        ctx.save_for_backward(y, weight, bias, cache.rstd)   # the output, not x or x_hat
        ctx.dims = dims
        return y

    @staticmethod
    def backward(ctx, dy):
        y, weight, bias, rstd = ctx.saved_tensors
        xhat = (y - bias) / weight                            # recomputed from the output
        dx = normalization_backward(dy, xhat, rstd, weight, ctx.dims)
        rows = tuple(range(y.dim() - len(ctx.dims)))
        dweight = (dy * xhat).sum(rows) if rows else dy * xhat
        dbias = dy.sum(rows) if rows else dy
        return dx, None, dweight, dbias, None


def layer_norm_saving_output(x, normalized_shape, weight, bias, eps: float = 1e-5):
    r"""LayerNorm over the trailing ``normalized_shape`` dims that saves its output for the
    backward pass (see the module docstring). Shapes: ``x`` ``(*, *normalized_shape)``,
    ``weight`` and ``bias`` ``normalized_shape`` (both required), same floating dtype as
    ``x``. Returns ``y`` like ``x``.

    Raises ``ValueError`` when ``weight`` has a zero entry (x_hat cannot be recovered).
    """
    shape = (normalized_shape,) if isinstance(normalized_shape, int) else tuple(normalized_shape)
    if weight is None or bias is None:
        raise ValueError("weight and bias are required: x_hat is recovered as (y - bias) / weight")
    if tuple(weight.shape) != shape or tuple(bias.shape) != shape:
        raise ValueError(f"weight and bias must have shape {shape}, got {tuple(weight.shape)} "
                         f"and {tuple(bias.shape)}")
    if tuple(x.shape[x.dim() - len(shape):]) != shape:
        raise ValueError(f"input must end with normalized_shape {shape}, got {tuple(x.shape)}")
    if bool((weight == 0).any()):
        raise ValueError("weight must have no zero entry: x_hat is recovered as "
                         "(y - bias) / weight")
    return _LayerNormSavingOutput.apply(x, shape, weight, bias, float(eps))


def rms_norm_backward_from_rstd(dy: torch.Tensor, x: torch.Tensor, gamma: torch.Tensor,
                                rstd: torch.Tensor):
    r"""``(dx, dgamma)`` of ``y = gamma * x * rstd`` for rows ``x`` ``(M, N)``, ``dy`` ``(M, N)``,
    ``gamma`` ``(N,)`` and the forward's saved ``rstd`` ``(M, 1)``:

    .. math:: \hat x = x\,\mathrm{rstd},\quad g = \gamma\odot dy,\quad
              dx = \mathrm{rstd}\,(g - \hat x\,\langle g\odot\hat x\rangle),\quad
              d\gamma = \textstyle\sum_{\text{rows}} dy\odot\hat x.

    No ``eps`` argument: it is already inside ``rstd``."""
    if x.dim() != 2 or dy.shape != x.shape or gamma.shape != x.shape[-1:] \
            or rstd.shape != (x.shape[0], 1):
        raise ValueError("expected x, dy (M, N), gamma (N,), rstd (M, 1); got "
                         f"{tuple(x.shape)}, {tuple(dy.shape)}, {tuple(gamma.shape)}, "
                         f"{tuple(rstd.shape)}")
    x_hat = x * rstd
    g = gamma * dy
    dx = rstd * (g - x_hat * (g * x_hat).mean(-1, keepdim=True))
    return dx, (dy * x_hat).sum(0)


def grouped_partial_sums(values, groups: int):
    """Column sums of ``values`` ``(M, N)`` in two stages: row ``i`` is added into partial row
    ``i % groups`` (``groups`` partial rows, what each program of the Triton tutorial's
    backward accumulates under a lock), then the partial rows are summed. Returns
    ``(partials (groups, N), sums (N,))``; works for numpy arrays and torch tensors."""
    if not isinstance(groups, int) or groups < 1:
        raise ValueError(f"groups must be a positive int, got {groups!r}")
    partials = [values[g::groups].sum(0) for g in range(min(groups, len(values)))]
    stack = torch.stack if isinstance(values, torch.Tensor) else np.stack
    stacked = stack(partials)
    return stacked, stacked.sum(0)


def triton_tutorial_group_size(n: int) -> int:
    """The Triton LayerNorm tutorial's number of partial rows for dgamma/dbeta
    (``GROUP_SIZE_M``) for rows of length ``n``: 256 up to 1024, 128 up to 4096, 96 up to
    8192, 64 beyond."""
    if not isinstance(n, int) or n < 1:
        raise ValueError(f"n must be a positive int, got {n!r}")
    return 256 if n <= 1024 else 128 if n <= 4096 else 96 if n <= 8192 else 64
