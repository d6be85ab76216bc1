r"""What ``F.layer_norm`` already fuses, and what a custom kernel around it can still save.

:func:`aten_ops` lists the ATen operators a function dispatches (one per eager kernel
launch on a GPU): ``F.layer_norm`` is the single operator ``native_layer_norm``, while the
formula written out in tensor ops is about ten. The operators *around* a norm in a
Transformer block (dropout of the branch, the residual add, a cast or quantization of the
output) stay separate kernels, each with its own trip through memory.

:func:`residual_norm_plan` counts that traffic in bytes per element of the activation, for
the sequence ``dropout(branch) -> residual + . -> LayerNorm -> quantize``, unfused (one
kernel per step, the norm already fused) or fused into one kernel, and
:func:`layer_norm_backward_plan` does the same for the backward pass (the input gradient and
the gamma/beta gradients in two kernels, or in one pass). Bytes per element, with ``a`` the
activation's bytes (2 in bf16) and ``o`` the output's (1 for int8/fp8):

================  =============================  =============================
kernel            reads                          writes
================  =============================  =============================
dropout           branch ``a``                   ``a`` + mask 1
residual add      residual ``a`` + branch ``a``  ``a``
layer norm        stream ``a``                   ``a``
quantize          ``a``                          ``o``
fused (all four)  branch ``a`` + residual ``a``  stream ``a`` + mask 1 + ``o``
================  =============================  =============================

Per-row statistics and the parameters add a few bytes per *row*, not per element: left out.

Inference engines thread the residual through the norms: :func:`fused_add_rms_norm` adds the
sublayer's output to the residual and normalizes the sum in one op, returning both the
normalized value and the new residual (vLLM's ``RMSNorm.forward(x, residual)``), and
:func:`pre_norm_stack` checks that a Pre-LN stack rewritten this way computes the same
thing. :func:`post_add_pre_norm` is the sandwich-norm boundary of Gemma 2/3 (output norm of
one sublayer, residual add, input norm of the next) as one op.

:func:`channels_first_layer_norm` is ConvNeXt's LayerNorm over the channels of an NCHW
tensor written out (mean and variance over dim 1), :func:`permuted_layer_norm` the same
through ``permute`` and ``F.layer_norm`` (timm's ``LayerNorm2d``).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch.utils._python_dispatch import TorchDispatchMode

__all__ = ["aten_ops", "KernelTraffic", "residual_norm_plan", "layer_norm_backward_plan",
           "bytes_per_element", "fused_add_rms_norm", "post_add_pre_norm", "pre_norm_stack",
           "channels_first_layer_norm", "permuted_layer_norm"]


class _Recorder(TorchDispatchMode):
    def __init__(self):
        super().__init__()
        self.ops: list[str] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.ops.append(str(func.overloadpacket.__name__))
        return func(*args, **(kwargs or {}))


def aten_ops(fn, *args, **kwargs) -> list[str]:
    """Names of the ATen operators ``fn(*args, **kwargs)`` dispatches, in order (for example
    ``["native_layer_norm"]``). Eager PyTorch launches about one kernel per operator."""
    with _Recorder() as recorder:
        fn(*args, **kwargs)
    return recorder.ops


@dataclass(frozen=True)
class KernelTraffic:
    """One kernel of a plan: bytes read and written per element of the activation."""

    name: str
    reads: float
    writes: float

    @property
    def bytes(self) -> float:
        return self.reads + self.writes


def _check_bytes(**sizes) -> None:
    for name, value in sizes.items():
        if not value > 0:
            raise ValueError(f"{name} must be a positive number of bytes, got {value!r}")


def residual_norm_plan(*, fused: bool, dropout: bool = True, keep_mask: bool = True,
                       act_bytes: float = 2, out_bytes: float | None = None
                       ) -> list[KernelTraffic]:
    """Kernels of ``y = quantize(LayerNorm(residual + dropout(branch)))`` and their traffic.

    ``dropout=False`` leaves out the dropout step (most LLM recipes today), ``keep_mask=False``
    regenerates the mask in the backward from the random seed instead of storing one byte
    per element, ``out_bytes`` (e.g. 1 for int8 or fp8) adds the quantization step (None: the
    output stays in ``act_bytes``). The new residual stream is always written: the next block
    needs it. Returns the list of kernels (one when ``fused``).
    """
    _check_bytes(act_bytes=act_bytes, **({} if out_bytes is None else {"out_bytes": out_bytes}))
    a, mask = act_bytes, (1 if dropout and keep_mask else 0)
    out = a if out_bytes is None else out_bytes
    if fused:
        name = "+".join(k for k, on in (("dropout", dropout), ("add", True), ("layer_norm", True),
                                        ("quantize", out_bytes is not None)) if on)
        return [KernelTraffic(f"fused {name}", 2 * a, a + mask + out)]
    plan = []
    if dropout:
        plan.append(KernelTraffic("dropout", a, a + mask))
    plan.append(KernelTraffic("residual add", 2 * a, a))
    plan.append(KernelTraffic("layer_norm (F.layer_norm, one kernel)", a, a))
    if out_bytes is not None:
        plan.append(KernelTraffic("quantize", a, out_bytes))
    return plan


def layer_norm_backward_plan(*, single_pass: bool, act_bytes: float = 2) -> list[KernelTraffic]:
    """Kernels of LayerNorm's backward and their traffic per element.

    Two kernels (``single_pass=False``): one reads the saved activation and ``dy`` and writes
    ``dx``; a second reads both again for the column sums ``dgamma``, ``dbeta``. One pass
    accumulates per-block partial column sums while computing ``dx`` (then a tiny reduction
    of the partial sums, left out).
    """
    _check_bytes(act_bytes=act_bytes)
    a = act_bytes
    if single_pass:
        return [KernelTraffic("dx with partial dgamma/dbeta", 2 * a, a)]
    return [KernelTraffic("dx", 2 * a, a), KernelTraffic("dgamma, dbeta", 2 * a, 0)]


def bytes_per_element(plan) -> float:
    """Total bytes moved per element of the activation by a list of :class:`KernelTraffic`."""
    return float(sum(k.bytes for k in plan))



def _rms(x: torch.Tensor, weight: torch.Tensor, eps: float, offset: float) -> torch.Tensor:
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * (offset + weight)


def fused_add_rms_norm(x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor,
                       eps: float = 1e-6, offset: float = 0.0):
    """``(RMSNorm(x + residual), x + residual)`` for ``x, residual`` ``(..., D)`` and
    ``weight`` ``(D,)``; the gain is ``offset + weight`` (``offset=1`` for Gemma's ``1 + w``).
    One kernel in an engine (in place there: ``x`` becomes the output, ``residual`` the sum);
    out of place here."""
    if x.shape != residual.shape or weight.shape != x.shape[-1:]:
        raise ValueError(f"x and residual must have one shape (..., D) and weight (D,); got "
                         f"{tuple(x.shape)}, {tuple(residual.shape)}, {tuple(weight.shape)}")
    total = x + residual
    return _rms(total, weight, eps, offset), total


def post_add_pre_norm(branch: torch.Tensor, residual: torch.Tensor, w_post: torch.Tensor,
                      w_pre: torch.Tensor, eps: float = 1e-6, offset: float = 1.0):
    """The boundary between two sublayers of a sandwich-norm block as one op: ``h = residual
    + RMSNorm(branch; w_post)``, returns ``(RMSNorm(h; w_pre), h)``. Gains ``offset + w``
    (Gemma's ``1 + w`` by default). Reads ``branch`` and ``residual``, writes ``h`` and the
    next sublayer's input."""
    if branch.shape != residual.shape or w_post.shape != branch.shape[-1:] \
            or w_pre.shape != branch.shape[-1:]:
        raise ValueError("branch and residual must have one shape (..., D) and the gains (D,)")
    return fused_add_rms_norm(_rms(branch, w_post, eps, offset), residual, w_pre, eps, offset)


def pre_norm_stack(x: torch.Tensor, branches, weights, eps: float = 1e-6, fused: bool = False):
    """A Pre-LN (RMSNorm) stack ``h <- h + f_i(RMSNorm(h; w_i))`` for ``i = 0..L-1``, then a
    final RMSNorm with ``weights[L]``; ``len(weights) == len(branches) + 1``.

    ``fused=False`` runs it as written (an add, then a norm, at every boundary);
    ``fused=True`` as an engine does: the add of sublayer ``i`` is deferred into the norm of
    sublayer ``i + 1`` through :func:`fused_add_rms_norm`, which hands the residual on.
    Returns ``(output, ops)``: ``ops`` counts the separate add and norm steps (kernels)."""
    if len(weights) != len(branches) + 1:
        raise ValueError(f"need one weight per branch plus the final norm's, got "
                         f"{len(weights)} weights for {len(branches)} branches")
    ops = 0
    if not fused:
        h = x
        for f, w in zip(branches, weights[:-1], strict=True):
            h = h + f(_rms(h, w, eps, 0.0))
            ops += 2
        return _rms(h, weights[-1], eps, 0.0), ops + 1
    out, residual = _rms(x, weights[0], eps, 0.0), x   # the first norm has nothing to add
    ops += 1
    for i, f in enumerate(branches):
        out, residual = fused_add_rms_norm(f(out), residual, weights[i + 1], eps)
        ops += 1
    return out, ops


def _check_nchw(x: torch.Tensor, weight: torch.Tensor) -> None:
    if x.dim() != 4 or weight.shape != (x.shape[1],):
        raise ValueError(f"x must be (N, C, H, W) and weight (C,); got {tuple(x.shape)} and "
                         f"{tuple(weight.shape)}")


def channels_first_layer_norm(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor,
                              eps: float = 1e-6) -> torch.Tensor:
    """LayerNorm of each position of ``x`` ``(N, C, H, W)`` over its ``C`` channels, written out
    as mean and variance over dim 1 (ConvNeXt's ``channels_first`` branch); gains ``(C,)``."""
    _check_nchw(x, weight)
    mean = x.mean(1, keepdim=True)
    var = (x - mean).pow(2).mean(1, keepdim=True)
    return weight[:, None, None] * (x - mean) / torch.sqrt(var + eps) + bias[:, None, None]


def permuted_layer_norm(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor,
                        eps: float = 1e-6) -> torch.Tensor:
    """The same through ``permute(0, 2, 3, 1)``, ``F.layer_norm`` over the last dimension and
    ``permute(0, 3, 1, 2)`` (timm's ``LayerNorm2d``)."""
    _check_nchw(x, weight)
    y = torch.nn.functional.layer_norm(x.permute(0, 2, 3, 1), (x.shape[1],), weight, bias, eps)
    return y.permute(0, 3, 1, 2)
