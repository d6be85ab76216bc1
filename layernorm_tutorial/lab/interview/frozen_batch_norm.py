r"""FrozenBatchNorm2d: a BatchNorm whose statistics and affine map are constants.

Detection and segmentation codebases fine-tune an ImageNet backbone with one or two images
per device; a BatchNorm in training mode would normalize with the statistics of that tiny
batch. They replace every ``BatchNorm2d`` by a module with the same four tensors held as
*buffers* (no parameters, no updates), which computes, per channel :math:`c`,

.. math::

    s_c = \frac{\gamma_c}{\sqrt{\bar\sigma^2_c + \epsilon}},\qquad
    y_{n,c,\dots} = s_c\,x_{n,c,\dots} + (\beta_c - \bar\mu_c\,s_c),

the evaluation-mode BatchNorm written as one per-channel scale and shift. These are the
semantics of ``torchvision.ops.misc.FrozenBatchNorm2d`` (buffers ``weight``, ``bias``,
``running_mean``, ``running_var``; ``eps=1e-5``); here they are built from elementary ops
and checked against :func:`layernorm_tutorial.functional.batch_norm` in evaluation mode.
"""

from __future__ import annotations

import torch
from torch import nn

from layernorm_tutorial import nn as lnn

__all__ = ["FrozenBatchNorm2d", "freeze_batch_norm"]


# torch's and the package's BatchNorm1d/2d/3d (not InstanceNorm, which shares a base in torch)
_BATCH_NORMS = (nn.BatchNorm1d, nn.BatchNorm2d, nn.BatchNorm3d, lnn._BatchNorm)


class FrozenBatchNorm2d(nn.Module):
    """Evaluation-mode BatchNorm with every tensor a buffer; input ``(N, C, *)``.

    ``train()`` changes nothing: the statistics are never updated and nothing is learned.
    """

    def __init__(self, num_features: int, eps: float = 1e-5):
        super().__init__()
        if not isinstance(num_features, int) or num_features < 1:
            raise ValueError(f"num_features must be a positive int, got {num_features!r}")
        self.eps = eps
        self.register_buffer("weight", torch.ones(num_features))
        self.register_buffer("bias", torch.zeros(num_features))
        self.register_buffer("running_mean", torch.zeros(num_features))
        self.register_buffer("running_var", torch.ones(num_features))

    @classmethod
    def from_batch_norm(cls, bn: nn.Module) -> FrozenBatchNorm2d:
        """A frozen copy of a BatchNorm module's affine map and running statistics."""
        if getattr(bn, "running_mean", None) is None:
            raise ValueError("bn must track running statistics (track_running_stats=True)")
        frozen = cls(bn.num_features, bn.eps).to(bn.running_mean.dtype)
        with torch.no_grad():
            if bn.weight is not None:
                frozen.weight.copy_(bn.weight)
            if bn.bias is not None:
                frozen.bias.copy_(bn.bias)
            frozen.running_mean.copy_(bn.running_mean)
            frozen.running_var.copy_(bn.running_var)
        return frozen

    def scale_and_shift(self) -> tuple[torch.Tensor, torch.Tensor]:
        """``(s, beta - mu * s)``, each of shape ``(C,)``."""
        scale = self.weight * torch.rsqrt(self.running_var + self.eps)
        return scale, self.bias - self.running_mean * scale

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.dim() < 2 or x.shape[1] != self.weight.numel():
            raise ValueError(f"x must have shape (N, {self.weight.numel()}, ...), got "
                             f"{tuple(x.shape)}")
        scale, shift = self.scale_and_shift()
        view = (1, -1) + (1,) * (x.dim() - 2)             # broadcast over N and space
        return x * scale.view(view) + shift.view(view)

    def extra_repr(self) -> str:
        return f"{self.weight.numel()}, eps={self.eps}"


def freeze_batch_norm(module: nn.Module) -> nn.Module:
    """Replace, in place, every BatchNorm1d/2d/3d child (at any depth) of ``module`` by a
    :class:`FrozenBatchNorm2d` copy; returns ``module`` (or the frozen copy when ``module``
    itself is a BatchNorm)."""
    if isinstance(module, _BATCH_NORMS):
        return FrozenBatchNorm2d.from_batch_norm(module)
    for name, child in module.named_children():
        setattr(module, name, freeze_batch_norm(child))
    return module
