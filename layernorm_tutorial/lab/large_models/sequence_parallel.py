r"""LayerNorm under sequence parallelism (Korthikanti et al. 2022, Megatron-LM).

The activations ``(B, T, D)`` between tensor-parallel regions are split along the sequence:
rank ``r`` holds ``x[:, r*T/W:(r+1)*T/W, :]``. LayerNorm's statistics are per token (over
``D``), so each rank normalizes its own tokens with **no communication**, and ``dx`` of a
token needs only that token. But gamma and beta are shared by all tokens:

.. math:: \frac{\partial L}{\partial\gamma} = \sum_{b,t} dy_{bt} \odot \hat x_{bt}
          = \sum_{r} \underbrace{\sum_{(b,t)\in r} dy_{bt} \odot \hat x_{bt}}_{\text{rank } r}

so each rank's local gradient is a partial sum and must be all-reduced (summed) across the
ranks before the optimizer step. :func:`sequence_parallel_check` shows both on gloo ranks.
"""

from __future__ import annotations

import torch
import torch.distributed as dist

from layernorm_tutorial import autograd as ln_autograd
from layernorm_tutorial.distributed import run_on_ranks

__all__ = ["full_problem", "sequence_parallel_rank", "sequence_parallel_check"]


def full_problem(seed: int = 0, shape=(2, 8, 16)):
    """The unsharded problem in float64: ``x, dy (B, T, D)``, ``gamma, beta (D,)``."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(shape, generator=g, dtype=torch.float64) * 2 + 1
    dy = torch.randn(shape, generator=g, dtype=torch.float64)
    gamma = 1 + 0.1 * torch.randn(shape[-1], generator=g, dtype=torch.float64)
    beta = 0.1 * torch.randn(shape[-1], generator=g, dtype=torch.float64)
    return x, dy, gamma, beta


def _layer_norm_grads(x, dy, gamma, beta):
    x, gamma, beta = (t.clone().requires_grad_(True) for t in (x, gamma, beta))
    y = ln_autograd.layer_norm(x, (x.shape[-1],), gamma, beta)
    y.backward(dy)
    return y.detach(), x.grad, gamma.grad, beta.grad


def sequence_parallel_rank(rank: int, world_size: int, seed: int = 0) -> dict:
    """Run on each rank: LayerNorm forward/backward on this rank's slice of the sequence;
    ``dgamma``/``dbeta`` before and after ``all_reduce(SUM)``; the number of collectives the
    forward issued (zero)."""
    x, dy, gamma, beta = full_problem(seed)
    t = x.shape[1] // world_size
    part = slice(rank * t, (rank + 1) * t)
    y, dx, dgamma, dbeta = _layer_norm_grads(x[:, part], dy[:, part], gamma, beta)
    local = (dgamma.clone(), dbeta.clone())
    dist.all_reduce(dgamma)              # the one collective LayerNorm needs: its gradients
    dist.all_reduce(dbeta)
    return {"rank": rank, "part": (part.start, part.stop), "y": y, "dx": dx,
            "local_dgamma": local[0], "local_dbeta": local[1],
            "dgamma": dgamma, "dbeta": dbeta, "forward_collectives": 0}


def sequence_parallel_check(world_size: int = 2, seed: int = 0) -> dict:
    """Compare the sharded runs with the unsharded one (all float64). Returns the largest
    absolute differences: ``forward`` (each rank's output vs the slice of the full output),
    ``dx`` (likewise), ``dgamma_local``/``dbeta_local`` (a rank's partial sum vs the full
    gradient: not small), ``dgamma_reduced``/``dbeta_reduced`` (after the all-reduce)."""
    results = run_on_ranks(sequence_parallel_rank, world_size, args=(seed,), timeout=120.0)
    x, dy, gamma, beta = full_problem(seed)
    y, dx, dgamma, dbeta = _layer_norm_grads(x, dy, gamma, beta)
    diff = {"forward": 0.0, "dx": 0.0, "dgamma_local": 0.0, "dbeta_local": 0.0,
            "dgamma_reduced": 0.0, "dbeta_reduced": 0.0}
    for r in results:
        part = slice(*r["part"])
        diff["forward"] = max(diff["forward"], float((r["y"] - y[:, part]).abs().max()))
        diff["dx"] = max(diff["dx"], float((r["dx"] - dx[:, part]).abs().max()))
        for name, full in (("dgamma", dgamma), ("dbeta", dbeta)):
            diff[f"{name}_local"] = max(diff[f"{name}_local"],
                                        float((r[f"local_{name}"] - full).abs().max()))
            diff[f"{name}_reduced"] = max(diff[f"{name}_reduced"],
                                          float((r[name] - full).abs().max()))
    diff["gradient_scale"] = float(dgamma.abs().max())
    diff["world_size"] = world_size
    return diff
