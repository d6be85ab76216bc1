"""The chapter's experiment: data-parallel training with per-rank BN, sync BN and layer norm.

The same small network (Linear -> norm -> ReLU -> Linear, float64) is trained data-parallel
on two ranks with each of three normalizations, and once in a single process on the whole
batch. Synchronized BN and layer norm reproduce the full-batch run to rounding; per-rank BN
does not, because each rank normalizes with its own shard's statistics. Run it with
``run_on_ranks(data_parallel_experiment, 2, (config,))`` and compare with
:func:`full_batch_training`.
"""

from __future__ import annotations

import torch
import torch.distributed as dist
from torch import nn

from layernorm_tutorial._seeding import seeded
from layernorm_tutorial.distributed.communication import (
    all_reduce_sum,
    count_communication,
    is_distributed,
)
from layernorm_tutorial.distributed.sync_batch_norm import SyncBatchNorm

__all__ = ["DEFAULT_CONFIG", "VARIANTS", "build_model", "data_parallel_experiment",
           "full_batch_training", "make_data"]

VARIANTS = ("per_rank_bn", "sync_bn", "layer_norm")
DEFAULT_CONFIG = {"batch_per_rank": 8, "features": 5, "hidden": 16, "steps": 5, "lr": 0.1,
                  "seed": 0}


def make_data(config: dict, world_size: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The full batch (world_size * batch_per_rank rows), identical on every rank (float64)."""
    gen = torch.Generator().manual_seed(config["seed"] + 1000)
    n = world_size * config["batch_per_rank"]
    x = torch.randn(n, config["features"], generator=gen, dtype=torch.float64) * 2 + 1
    w = torch.randn(config["features"], 1, generator=gen, dtype=torch.float64)
    y = torch.tanh(x @ w) + 0.1 * torch.randn(n, 1, generator=gen, dtype=torch.float64)
    return x, y


def build_model(variant: str, config: dict, synchronized: bool = True) -> nn.Module:
    """Linear -> norm -> ReLU -> Linear in float64, identical initial weights for every variant.

    ``per_rank_bn`` uses the package's BatchNorm1d, ``sync_bn`` :class:`SyncBatchNorm` (plain
    BN when ``synchronized`` is False or no group exists), ``layer_norm`` the package's
    LayerNorm. The initial weights depend on ``config["seed"]`` only; torch's global random
    state is left as it was.
    """
    from layernorm_tutorial import (
        nn as lt_nn,  # imported here: the core modules import nothing from us
    )

    if variant not in VARIANTS:
        raise ValueError(f"variant must be one of {VARIANTS}, got {variant!r}")
    with seeded(config["seed"]):  # fixed initial weights; the caller's global RNG is kept
        first = nn.Linear(config["features"], config["hidden"])
        last = nn.Linear(config["hidden"], 1)
    hidden = config["hidden"]
    if variant == "layer_norm":
        norm = lt_nn.LayerNorm(hidden)
    elif variant == "sync_bn" and synchronized:
        norm = SyncBatchNorm(hidden)
    else:
        norm = lt_nn.BatchNorm1d(hidden)
    return nn.Sequential(first, norm, nn.ReLU(), last).double()


def _average_gradients(model: nn.Module) -> None:
    """One all-reduce of all parameter gradients, flattened, divided by the world size."""
    grads = [p.grad for p in model.parameters()]
    flat = torch.cat([g.reshape(-1) for g in grads])
    all_reduce_sum(flat, "gradients (every variant)")
    flat /= dist.get_world_size() if is_distributed() else 1
    offset = 0
    for g in grads:
        g.copy_(flat[offset:offset + g.numel()].view_as(g))
        offset += g.numel()


def _train(model, x, y, config):
    """Plain SGD written out (torch.optim's first use imports the compiler stack: seconds)."""
    losses = []
    for _ in range(config["steps"]):
        model.zero_grad(set_to_none=False)
        loss = ((model(x) - y) ** 2).mean()
        loss.backward()
        _average_gradients(model)
        with torch.no_grad():
            for p in model.parameters():
                p -= config["lr"] * p.grad
        losses.append(loss.item())
    return losses


def data_parallel_experiment(rank: int, world_size: int, config: dict | None = None) -> dict:
    """Worker for :func:`run_on_ranks`: train every variant data-parallel on this rank's shard.

    Returns, per variant: the normalization layer's batch mean at step 0 (``batch_mean``),
    the state_dict after training, the local losses, and the communication per step
    (``{tag: (collectives, bytes)}`` divided by the number of steps).
    """
    config = {**DEFAULT_CONFIG, **(config or {})}
    x_full, y_full = make_data(config, world_size)
    n = config["batch_per_rank"]
    x, y = x_full[rank * n:(rank + 1) * n], y_full[rank * n:(rank + 1) * n]
    out = {"rank": rank}
    for variant in VARIANTS:
        model = build_model(variant, config)
        with torch.no_grad():
            out.setdefault("norm_input_mean", {})[variant] = model[0](x).mean(dim=0)
        with count_communication() as log:
            losses = _train(model, x, y, config)
        out[variant] = {
            "state_dict": {k: v.clone() for k, v in model.state_dict().items()},
            "losses": losses,
            "per_step": {tag: (calls / config["steps"], nbytes / config["steps"])
                         for tag, (calls, nbytes) in log.by_tag().items()},
        }
    return out


def full_batch_training(variant: str, config: dict | None = None, world_size: int = 2) -> dict:
    """Single-process counterpart: train ``variant`` on the whole batch; return its state_dict.

    ``sync_bn`` and ``per_rank_bn`` both become plain batch norm over the full batch here.
    """
    config = {**DEFAULT_CONFIG, **(config or {})}
    x, y = make_data(config, world_size)
    model = build_model(variant, config, synchronized=False)
    losses = _train(model, x, y, config)
    return {"state_dict": dict(model.state_dict()), "losses": losses}

