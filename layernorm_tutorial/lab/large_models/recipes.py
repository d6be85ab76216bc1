r"""What today's training recipes do with the norm parameters.

* :func:`param_groups`: the usual AdamW split, weight decay on matrices only; gains
  (gamma), shifts (beta), biases and DyT's alpha get none.
* :func:`gamma_under_decay`: the mean gain of every LayerNorm over a run, with decay on all
  parameters and with the split. Decoupled decay multiplies every decayed parameter by
  :math:`(1 - \eta\lambda)` each step, pulling gamma toward 0, which the gradient must undo.
* :func:`autocast_layer_norm`: what ``torch.autocast("cpu", dtype=torch.bfloat16)`` gives a
  layer_norm: dtype of the output and of the statistics torch's kernel returns.
* :func:`bf16_statistics_error`: the error of a row's mean and variance computed in bf16
  versus fp32 (why the statistics are accumulated in fp32).
"""

from __future__ import annotations

import numpy as np
import torch
import torch.nn.functional as TF
from torch import nn

from layernorm_tutorial._seeding import seeded
from layernorm_tutorial.lab.large_models.comparisons import make_model
from layernorm_tutorial.lab.large_models.training import train_toy
from layernorm_tutorial.nn import DynamicTanh, LayerNorm, RMSNorm

__all__ = ["param_groups", "is_norm_parameter", "gamma_under_decay", "autocast_layer_norm",
           "bf16_statistics_error"]

_NORM_TYPES = (LayerNorm, RMSNorm, DynamicTanh, nn.LayerNorm, nn.RMSNorm)


def is_norm_parameter(model: nn.Module) -> dict:
    """``{parameter name: True if it belongs to a norm module or is a bias}``."""
    flags = {}
    for module_name, module in model.named_modules():
        for name, _ in module.named_parameters(recurse=False):
            full = f"{module_name}.{name}" if module_name else name
            flags[full] = isinstance(module, _NORM_TYPES) or name.endswith("bias")
    return flags


def param_groups(model: nn.Module, weight_decay: float) -> list[dict]:
    """Two AdamW groups: decay for every other parameter, none for norm parameters and
    biases (the recipe of GPT-2/LLaMA-style training code)."""
    flags = is_norm_parameter(model)
    named = dict(model.named_parameters())
    return [{"params": [p for n, p in named.items() if not flags[n]],
             "weight_decay": weight_decay},
            {"params": [p for n, p in named.items() if flags[n]], "weight_decay": 0.0}]


def _mean_gamma(model: nn.Module) -> float:
    gains = [m.weight.detach().reshape(-1) for m in model.modules() if isinstance(m, LayerNorm)]
    return float(torch.cat(gains).mean())


def gamma_under_decay(steps: int = 300, lr: float = 1e-2, weight_decay: float = 0.1,
                      seed: int = 0) -> dict:
    """Mean LayerNorm gain per step with decay on everything vs the split of
    :func:`param_groups`, and the decay-only curve ``(1 - lr wd)^t`` for reference."""
    runs = {}
    for arm, groups in (("decay on all parameters", None),
                        ("no decay on norms and biases",
                         lambda m: param_groups(m, weight_decay))):
        run = train_toy(lambda: make_model("layernorm"), steps=steps, lr=lr, seed=seed,
                        weight_decay=weight_decay, param_groups=groups, probe=_mean_gamma,
                        vocab_size=16, seq_len=8)
        runs[arm] = {"mean_gamma": list(run["probe"]), "accuracy": run["accuracy"]}
    t = np.arange(1, steps + 1)
    return {"runs": runs, "decay_only": list((1 - lr * weight_decay) ** t), "lr": lr,
            "weight_decay": weight_decay}


def autocast_layer_norm(seed: int = 0) -> dict:
    """A Linear then a layer_norm under CPU bf16 autocast: dtypes of the Linear's output, the
    layer_norm's output (with fp32 gamma/beta), and of the mean and rstd torch's kernel
    computes for a bf16 input (``torch.native_layer_norm``)."""
    with seeded(seed):
        linear = nn.Linear(16, 16)
        norm = nn.LayerNorm(16)
        x = torch.randn(4, 16)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        h = linear(x)
        y = norm(h)
        y_functional = TF.layer_norm(h, (16,))
    _, mean, rstd = torch.native_layer_norm(h, (16,), norm.weight, norm.bias, 1e-5)
    return {"input": str(x.dtype), "linear_out": str(h.dtype), "layer_norm_out": str(y.dtype),
            "layer_norm_functional_out": str(y_functional.dtype), "kernel_mean": str(mean.dtype),
            "kernel_rstd": str(rstd.dtype), "gamma": str(norm.weight.dtype)}


def bf16_statistics_error(features: int = 4096, offset: float = 10.0, seed: int = 0) -> dict:
    """A row ``offset + N(0, 1)`` of ``features`` values, stored in bf16: its mean and
    variance (two passes: the mean, then the mean of the squared deviations from it)
    accumulated in bf16 (sequential sums) and in fp32, relative to fp64.

    ``var_ratio``: computed variance over the true one. ``bf16`` also holds
    ``var_rel_error_exact_mean``: the second pass in bf16 around the exact (fp64) mean
    rounded to bf16, which separates the error of the bf16 mean from that of the bf16 sum
    of squares."""
    g = torch.Generator().manual_seed(seed)
    x = (offset + torch.randn(features, generator=g, dtype=torch.float64)).to(torch.bfloat16)
    exact = x.double()
    true_mean, true_var = float(exact.mean()), float(exact.var(unbiased=False))

    def sequential(values, dtype):
        total = torch.zeros((), dtype=dtype)
        for v in values.to(dtype):
            total = total + v           # one rounding per addition, like a naive kernel
        return total / values.numel()

    out = {}
    for name, dtype in (("bf16", torch.bfloat16), ("fp32", torch.float32)):
        mean = sequential(x, dtype)
        var = sequential((x.to(dtype) - mean) ** 2, dtype)
        out[name] = {"mean_rel_error": abs(float(mean) - true_mean) / abs(true_mean),
                     "var_rel_error": abs(float(var) - true_var) / true_var,
                     "var_ratio": float(var) / true_var}
    exact_mean = torch.tensor(true_mean, dtype=torch.bfloat16)
    var = sequential((x - exact_mean) ** 2, torch.bfloat16)
    out["bf16"]["var_rel_error_exact_mean"] = abs(float(var) - true_var) / true_var
    out["features"], out["offset"] = features, offset
    return out
