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
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from layernorm_tutorial import functional
from layernorm_tutorial.autograd import normalization_backward

__all__ = ["SavedTensor", "saved_tensors", "unique_bytes", "layer_norm_saving_output"]


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
