"""PyTorch's defaults of the norm modules (eps, momentum, parameters), as the cheat sheet
prints them, checked against the package's modules and functional ops."""

from __future__ import annotations

import torch

from layernorm_tutorial import functional as LF
from layernorm_tutorial import nn as lnn

__all__ = ["norm_defaults"]


def norm_defaults(width: int = 8, seed: int = 0) -> list[str]:
    """One line per module (``LayerNorm``, ``BatchNorm1d``, ``GroupNorm(2, width)``,
    ``RMSNorm``): its ``eps``, ``momentum`` where it has one, and its parameters' shapes;
    then float32's machine epsilon. Checks that ``RMSNorm``'s ``eps=None`` is that epsilon
    for float32 input and that LayerNorm starts at gain 1, bias 0 (AssertionError if not)."""
    modules = {"LayerNorm": lnn.LayerNorm(width), "BatchNorm1d": lnn.BatchNorm1d(width),
               "GroupNorm": lnn.GroupNorm(2, width), "RMSNorm": lnn.RMSNorm(width)}
    lines = []
    for name, module in modules.items():
        extra = f", momentum {module.momentum}" if hasattr(module, "momentum") else ""
        params = {k: tuple(v.shape) for k, v in module.named_parameters()}
        eps = module.eps
        if eps is None:
            eps = "None (= machine eps of the dtype it computes in)"
        lines.append(f"{name:11s}: eps {eps}{extra}; parameters {params}")
    x = torch.randn(3, width, generator=torch.Generator().manual_seed(seed))
    machine_eps = torch.finfo(x.dtype).eps
    lines.append(f"float32 machine epsilon: {machine_eps:.3g}")
    rms, ln = modules["RMSNorm"], modules["LayerNorm"]
    assert torch.equal(rms(x), LF.rms_norm(x, (width,), rms.weight, eps=machine_eps))
    assert torch.all(ln.weight == 1) and torch.all(ln.bias == 0)
    return lines
