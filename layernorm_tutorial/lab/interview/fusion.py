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
"""

from __future__ import annotations

from dataclasses import dataclass

from torch.utils._python_dispatch import TorchDispatchMode

__all__ = ["aten_ops", "KernelTraffic", "residual_norm_plan", "layer_norm_backward_plan",
           "bytes_per_element"]


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

