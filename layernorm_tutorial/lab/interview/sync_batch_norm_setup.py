"""Using ``torch.nn.SyncBatchNorm`` with DistributedDataParallel: the conversion, the device
checks, and what BN computes when nothing is synchronized.

``convert(model)``
    ``SyncBatchNorm.convert_sync_batchnorm`` on ``model``: which modules changed class and
    whether the new modules hold the very same parameter and buffer tensors.
``cpu_setup_errors()``
    what torch says, under an initialized (one-process, gloo) process group, when a model
    with SyncBatchNorm stays on the CPU: DDP's constructor and the training-mode forward
    both raise; the evaluation-mode forward runs (no synchronization in evaluation).
``unsynchronized_sync_batch_norm(x, shards)``
    torch's ``SyncBatchNorm`` in training mode without a process group (what it computes
    under ``nn.DataParallel``, which starts none) applied to each shard, compared with
    ordinary batch norm on each shard: it is per-shard BN.
"""

from __future__ import annotations

import contextlib

import torch
import torch.distributed as dist
from torch import nn

from layernorm_tutorial.lab.interview import sharded_batch_norm

__all__ = ["convert", "single_process_group", "cpu_setup_errors",
           "unsynchronized_sync_batch_norm"]

F64 = torch.float64


def convert(model: nn.Module) -> tuple[nn.Module, list[dict]]:
    """Apply ``nn.SyncBatchNorm.convert_sync_batchnorm`` to ``model`` and report, for every
    ``BatchNorm*d`` it held, ``{"name", "before", "after", "same_tensors"}``:
    ``same_tensors`` is True when weight, bias, running mean and running variance of the new
    module are the old module's tensor objects (so a conversion done after the model was
    moved to its GPU keeps them there). Returns ``(converted model, rows)``; a container is
    converted in place and returned itself."""
    if not isinstance(model, nn.Module):
        raise TypeError(f"model must be an nn.Module, got {type(model).__name__}")
    before = {name: m for name, m in model.named_modules()
              if isinstance(m, nn.modules.batchnorm._BatchNorm)}
    converted = nn.SyncBatchNorm.convert_sync_batchnorm(model)
    rows = []
    for name, old in before.items():
        new = converted.get_submodule(name) if name else converted
        same = all(getattr(new, t) is getattr(old, t)
                   for t in ("weight", "bias", "running_mean", "running_var"))
        rows.append({"name": name, "before": type(old).__name__,
                     "after": type(new).__name__, "same_tensors": same})
    return converted, rows


@contextlib.contextmanager
def single_process_group():
    """A gloo process group of one process (rank 0, world size 1, an in-memory store) for
    the duration of the ``with`` block, destroyed afterwards. Refuses to run when a process
    group already exists (it would be replaced)."""
    if not dist.is_available():
        raise RuntimeError("torch.distributed is not available in this build of torch")
    if dist.is_initialized():
        raise RuntimeError("a default process group is already initialized; "
                           "single_process_group would replace it")
    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    try:
        yield
    finally:
        dist.destroy_process_group()


def _message(fn) -> str | None:
    try:
        fn()
    except ValueError as err:
        return str(err)
    return None


def cpu_setup_errors(seed: int = 0) -> dict:
    """Under :func:`single_process_group`, a ``Linear(4, 8) -> BatchNorm1d(8)`` model
    converted to SyncBatchNorm and left on the CPU. Returns ``{"ddp": message of DDP's
    constructor, "train_forward": message of the training-mode forward, "eval_forward_ok":
    whether the evaluation-mode forward equals BN with the running statistics}``; a
    message is None when nothing was raised."""
    with torch.random.fork_rng(devices=[]):          # leave the caller's generator alone
        torch.manual_seed(seed)
        model, _ = convert(nn.Sequential(nn.Linear(4, 8), nn.BatchNorm1d(8)).to(F64))
    x = torch.randn(6, 4, dtype=F64, generator=torch.Generator().manual_seed(seed))
    with single_process_group():
        ddp = _message(lambda: nn.parallel.DistributedDataParallel(model))
        model.train()
        train = _message(lambda: model(x))
        model.eval()
        with torch.no_grad():
            bn = model[1]
            expected = nn.functional.batch_norm(model[0](x), bn.running_mean, bn.running_var,
                                                bn.weight, bn.bias, training=False,
                                                eps=bn.eps)
            eval_ok = torch.equal(model(x), expected)
    return {"ddp": ddp, "train_forward": train, "eval_forward_ok": eval_ok}


def unsynchronized_sync_batch_norm(x: torch.Tensor, shards: int) -> float:
    """Max absolute difference between torch's ``SyncBatchNorm`` (training mode, no process
    group, default affine 1 and 0) applied to each of ``shards`` slices of ``x`` ``(N, C)``
    and the package's per-shard batch norm
    (:func:`~layernorm_tutorial.lab.interview.sharded_batch_norm.unsynchronized_batch_norm`):
    zero up to round-off, because with no process group torch falls back to ordinary BN."""
    if dist.is_available() and dist.is_initialized():
        raise RuntimeError("a process group is initialized; this check needs none")
    bn = nn.SyncBatchNorm(x.shape[1]).to(x.dtype).train()
    with torch.no_grad():
        torch_out = torch.cat([bn(s) for s in torch.tensor_split(x, shards)])
    local = sharded_batch_norm.unsynchronized_batch_norm(x, shards, eps=bn.eps)
    return (torch_out - local).abs().max().item()
