"""Data-parallel normalization: synchronized batch norm on ``all_reduce``, a launcher, a counter.

In data-parallel training every process (rank) holds a copy of the model and a shard of the
batch. Batch norm computed per rank uses only the shard's statistics; *synchronized* batch
norm sums the per-channel statistics over all ranks so every rank normalizes with the
statistics of the full batch. Layer norm needs nothing from other ranks.

Contents
--------
SyncBatchNormFunction / sync_batch_norm / SyncBatchNorm
    batch norm whose statistics are all-reduced: forward sends (C + 1) + C numbers,
    backward 2C numbers, in three collectives. Without an initialized process group it is
    ordinary batch norm (as torch's SyncBatchNorm).
count_communication
    context manager counting the collectives (and their payload bytes) the package issues.
run_on_ranks
    run a module-level function in ``world_size`` gloo processes on 127.0.0.1, on a free
    port, with timeouts, process clean-up and the failing rank's traceback in the error.
data_parallel_experiment / full_batch_training
    the chapter's experiment: the same small network trained data-parallel with per-rank BN,
    synchronized BN and layer norm, and its single-process full-batch counterpart.
"""

from __future__ import annotations

import contextlib
import io
import multiprocessing
import os
import queue as queue_module
import socket
import time
import traceback
from dataclasses import dataclass, field
from datetime import timedelta

import torch
import torch.distributed as dist
from torch import nn

# ----------------------------------------------------------------------------------------
# Counting communication
# ----------------------------------------------------------------------------------------


@dataclass
class CommunicationLog:
    """Collectives issued inside :func:`count_communication`: one (tag, numel, bytes) each.

    ``bytes`` is the payload of the reduced buffer on one rank (a ring all-reduce moves about
    ``2 (W - 1) / W`` times that over the network per rank).
    """

    records: list = field(default_factory=list)

    def collectives(self, tag_prefix: str = "") -> int:
        return sum(1 for tag, _, _ in self.records if tag.startswith(tag_prefix))

    def bytes(self, tag_prefix: str = "") -> int:
        return sum(nbytes for tag, _, nbytes in self.records if tag.startswith(tag_prefix))

    def by_tag(self) -> dict:
        """``{tag: (number of collectives, payload bytes)}``."""
        summary: dict = {}
        for tag, _, nbytes in self.records:
            calls, total = summary.get(tag, (0, 0))
            summary[tag] = (calls + 1, total + nbytes)
        return summary


_ACTIVE_LOGS: list[CommunicationLog] = []


@contextlib.contextmanager
def count_communication():
    """Record every collective the package issues inside the ``with`` block."""
    log = CommunicationLog()
    _ACTIVE_LOGS.append(log)
    try:
        yield log
    finally:
        _ACTIVE_LOGS.remove(log)


def is_distributed() -> bool:
    """True when a torch.distributed process group is initialized in this process."""
    return dist.is_available() and dist.is_initialized()


def all_reduce_sum(tensor: torch.Tensor, tag: str, group=None) -> torch.Tensor:
    """Sum ``tensor`` over all ranks in place (no-op without a process group); count it."""
    if is_distributed():
        dist.all_reduce(tensor, op=dist.ReduceOp.SUM, group=group)
        for log in _ACTIVE_LOGS:
            log.records.append((tag, tensor.numel(), tensor.numel() * tensor.element_size()))
    return tensor


# ----------------------------------------------------------------------------------------
# Synchronized batch norm
# ----------------------------------------------------------------------------------------


def _channel_view(t: torch.Tensor, ndim: int) -> torch.Tensor:
    """Reshape a (C,) tensor to broadcast over (N, C, *spatial)."""
    return t.reshape(1, -1, *([1] * (ndim - 2)))


class SyncBatchNormFunction(torch.autograd.Function):
    """Batch norm over the union of all ranks' batches, with a hand-derived backward.

    Forward, x of shape (N_r, C, *spatial) on rank r, M = total count per channel:
        all_reduce [sum_r x, N_r * prod(spatial)]  ->  mean = S / M
        all_reduce [sum_r (x - mean)^2]            ->  var = Q / M   (biased, two-pass)
        xhat = (x - mean) / sqrt(var + eps);  y = weight * xhat + bias
    Backward, g = dy * weight:
        all_reduce [sum g, sum g * xhat]
        dx = (g - sum(g) / M - xhat * sum(g xhat) / M) / sqrt(var + eps)
    dweight = sum(dy * xhat) and dbias = sum(dy) stay local: data-parallel training averages
    them with the other parameter gradients. Returns (y, mean, var, count) with the last
    three non-differentiable (for the running statistics; count is M, summed over ranks).
    """

    @staticmethod
    def forward(ctx, x, weight, bias, eps, group):
        dims = tuple(d for d in range(x.dim()) if d != 1)
        local_count = x.numel() // x.shape[1]
        first = torch.cat([x.sum(dim=dims), x.new_tensor([float(local_count)])])
        all_reduce_sum(first, "sync_bn forward: sum and count", group)
        total = first[-1]
        mean = first[:-1] / total
        centered = x - _channel_view(mean, x.dim())
        second = (centered * centered).sum(dim=dims)
        all_reduce_sum(second, "sync_bn forward: sum of squares", group)
        var = second / total
        invstd = torch.rsqrt(var + eps)
        xhat = centered * _channel_view(invstd, x.dim())
        y = xhat
        if weight is not None:
            y = y * _channel_view(weight, x.dim())
        if bias is not None:
            y = y + _channel_view(bias, x.dim())
        ctx.save_for_backward(xhat, invstd, weight, total)
        ctx.group = group
        ctx.has_bias = bias is not None
        ctx.mark_non_differentiable(mean, var, total)
        return y, mean, var, total

    @staticmethod
    def backward(ctx, dy, _dmean, _dvar, _dcount):
        xhat, invstd, weight, total = ctx.saved_tensors
        dims = tuple(d for d in range(dy.dim()) if d != 1)
        g = dy if weight is None else dy * _channel_view(weight, dy.dim())
        sums = torch.cat([g.sum(dim=dims), (g * xhat).sum(dim=dims)])
        all_reduce_sum(sums, "sync_bn backward: gradient sums", ctx.group)
        c = dy.shape[1]
        mean_g = _channel_view(sums[:c] / total, dy.dim())
        mean_gx = _channel_view(sums[c:] / total, dy.dim())
        dx = (g - mean_g - xhat * mean_gx) * _channel_view(invstd, dy.dim())
        dweight = (dy * xhat).sum(dim=dims) if weight is not None else None
        dbias = dy.sum(dim=dims) if ctx.has_bias else None
        return dx, dweight, dbias, None, None


def sync_batch_norm(x, running_mean, running_var, weight=None, bias=None, training=True,
                    momentum=0.1, eps=1e-5, group=None):
    """Functional synchronized batch norm for x of shape (N, C, *spatial).

    Training: normalize with the statistics of all ranks' batches together and, if buffers are
    given, update them in place: running = (1 - momentum) * running + momentum * batch, with
    the unbiased variance var * M / (M - 1) of the global count M. Evaluation: use the
    running statistics (no communication).
    """
    if not isinstance(x, torch.Tensor) or x.dim() < 2:
        raise ValueError(f"x must be a tensor of shape (N, C, ...), got "
                         f"{getattr(x, 'shape', type(x).__name__)}")
    if not training:
        if running_mean is None or running_var is None:
            raise ValueError("evaluation mode needs running_mean and running_var")
        invstd = torch.rsqrt(running_var + eps)
        y = (x - _channel_view(running_mean, x.dim())) * _channel_view(invstd, x.dim())
        if weight is not None:
            y = y * _channel_view(weight, x.dim())
        if bias is not None:
            y = y + _channel_view(bias, x.dim())
        return y
    y, mean, var, count = SyncBatchNormFunction.apply(x, weight, bias, eps, group)
    if running_mean is not None and running_var is not None:
        total = float(count)  # all ranks' samples together; shards may differ in size
        with torch.no_grad():
            running_mean.mul_(1 - momentum).add_(momentum * mean)
            running_var.mul_(1 - momentum).add_(momentum * var * total / max(total - 1, 1))
    return y


class SyncBatchNorm(nn.Module):
    """Module with torch's BatchNorm buffers and state_dict keys, synchronized over ranks.

    ``momentum=None`` uses the cumulative average (factor 1 / num_batches_tracked), as torch.
    """

    def __init__(self, num_features: int, eps: float = 1e-5, momentum: float | None = 0.1,
                 affine: bool = True, track_running_stats: bool = True, process_group=None):
        super().__init__()
        self.num_features, self.eps, self.momentum = num_features, eps, momentum
        self.affine, self.track_running_stats = affine, track_running_stats
        self.process_group = process_group
        if affine:
            self.weight = nn.Parameter(torch.ones(num_features))
            self.bias = nn.Parameter(torch.zeros(num_features))
        else:
            self.register_parameter("weight", None)
            self.register_parameter("bias", None)
        if track_running_stats:
            self.register_buffer("running_mean", torch.zeros(num_features))
            self.register_buffer("running_var", torch.ones(num_features))
            self.register_buffer("num_batches_tracked", torch.tensor(0, dtype=torch.long))
        else:
            self.running_mean = self.running_var = self.num_batches_tracked = None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.dim() < 2 or x.shape[1] != self.num_features:
            raise ValueError(f"expected input of shape (N, {self.num_features}, ...), "
                             f"got {tuple(x.shape)}")
        if not self.training and self.track_running_stats:
            return sync_batch_norm(x, self.running_mean, self.running_var, self.weight,
                                   self.bias, False, 0.0, self.eps, self.process_group)
        factor = 0.0 if self.momentum is None else self.momentum
        if self.training and self.track_running_stats:
            self.num_batches_tracked.add_(1)
            if self.momentum is None:  # cumulative moving average
                factor = 1.0 / float(self.num_batches_tracked)
        buffers = (self.running_mean, self.running_var) if self.training else (None, None)
        return sync_batch_norm(x, *buffers, self.weight, self.bias, True, factor, self.eps,
                               self.process_group)


# ----------------------------------------------------------------------------------------
# Launcher
# ----------------------------------------------------------------------------------------


class DistributedRunError(RuntimeError):
    """A rank raised, died, or the run did not finish in time."""


def find_free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago (the OS picks it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _worker_entry(fn, rank, world_size, port, args, results, init_timeout):
    """Body of each worker process: join the group, run fn, report, always leave."""
    try:
        torch.set_num_threads(1)
        if "lo" in {name for _, name in socket.if_nameindex()}:
            os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")
        dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank,
                                world_size=world_size,
                                timeout=timedelta(seconds=init_timeout))
        try:
            value = fn(rank, world_size, *args)
        finally:
            dist.destroy_process_group()
        buffer = io.BytesIO()
        torch.save(value, buffer)
        results.put((rank, "ok", buffer.getvalue()))
    except BaseException:  # report everything, including KeyboardInterrupt, to the parent
        results.put((rank, "error", traceback.format_exc()))


def _stop(processes, grace: float = 1.0) -> None:
    """Give the processes ``grace`` seconds in total to exit, then terminate, then kill."""
    processes = [proc for proc in processes if proc.pid is not None]  # skip never-started
    deadline = time.monotonic() + grace
    for proc in processes:
        proc.join(timeout=max(deadline - time.monotonic(), 0.0))
    for proc in processes:
        if proc.is_alive():
            proc.terminate()
            proc.join(timeout=2.0)
        if proc.is_alive():
            proc.kill()
            proc.join()


def _run_once(fn, world_size, args, timeout, init_timeout):
    ctx = multiprocessing.get_context("forkserver")
    # The fork server is a fresh single-threaded interpreter that imports torch once; each
    # rank is then forked from it (fast, and safe: the server never ran torch's thread pools).
    ctx.set_forkserver_preload(["torch", __name__])
    results = ctx.Queue()
    port = find_free_port()
    processes = [ctx.Process(target=_worker_entry, daemon=True,
                             args=(fn, rank, world_size, port, args, results, init_timeout))
                 for rank in range(world_size)]
    values: dict = {}
    deadline = time.monotonic() + timeout
    try:
        for proc in processes:
            proc.start()
        while len(values) < world_size:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                missing = sorted(set(range(world_size)) - set(values))
                raise DistributedRunError(
                    f"ranks {missing} of {fn.__name__} did not finish within {timeout:.0f} s; "
                    "all processes were stopped")
            try:
                rank, status, payload = results.get(timeout=min(remaining, 0.2))
            except queue_module.Empty:
                for rank, proc in enumerate(processes):
                    if rank not in values and proc.exitcode not in (None, 0):
                        raise DistributedRunError(
                            f"rank {rank} of {fn.__name__} died with exit code "
                            f"{proc.exitcode} before reporting") from None
                continue
            if status == "error":
                raise DistributedRunError(f"rank {rank} of {fn.__name__} failed:\n{payload}")
            values[rank] = torch.load(io.BytesIO(payload), weights_only=False)
    finally:
        _stop(processes)
        results.close()
        results.cancel_join_thread()
    return [values[rank] for rank in range(world_size)]


def run_on_ranks(fn, world_size: int = 2, args: tuple = (), timeout: float = 60.0,
                 init_timeout: float = 20.0, port_retries: int = 2) -> list:
    """Run ``fn(rank, world_size, *args)`` in ``world_size`` gloo processes; return results.

    ``fn`` must be importable (defined at module level, e.g. in this package), because the
    processes are forked from multiprocessing's fork server, a fresh interpreter that imports
    ``fn`` by name (started on first use, shared by later calls). Each process joins a gloo group at
    ``tcp://127.0.0.1:<free port>`` (with ``init_timeout`` seconds for every collective),
    uses one thread, runs ``fn`` and sends back its return value. Returns the values in rank
    order. Raises :class:`DistributedRunError` naming the rank and quoting its traceback if
    one fails or dies, or if the run takes more than ``timeout`` seconds; in every case all
    processes are stopped before returning. A port taken between choosing and binding it is
    retried on another port ``port_retries`` times.
    """
    if world_size < 1:
        raise ValueError(f"world_size must be at least 1, got {world_size}")
    if not callable(fn) or "<locals>" in getattr(fn, "__qualname__", "<locals>") \
            or getattr(fn, "__module__", "__main__") == "__main__":
        raise ValueError("fn must be a module-level function of an importable module "
                         "(the worker processes import it by name)")
    for attempt in range(port_retries + 1):
        try:
            return _run_once(fn, world_size, args, timeout, init_timeout)
        except DistributedRunError as err:
            if "address already in use" not in str(err).lower() or attempt == port_retries:
                raise
    raise AssertionError("unreachable")


# ----------------------------------------------------------------------------------------
# The chapter's experiment
# ----------------------------------------------------------------------------------------

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
    LayerNorm.
    """
    from . import nn as lt_nn  # imported here: the core modules import nothing from us

    if variant not in VARIANTS:
        raise ValueError(f"variant must be one of {VARIANTS}, got {variant!r}")
    torch.manual_seed(config["seed"])
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

