"""Run a function in ``world_size`` gloo processes on this machine and collect the results.

:func:`run_on_ranks` starts the processes, gives each a rank in a gloo group on a free port of
127.0.0.1, waits with a deadline, and always stops every process before it returns. When a
rank fails, the error names the root cause first: one rank's exception usually makes the
healthy ranks fail too (their collective loses its peer: gloo's "Connection closed by peer"),
so the launcher keeps listening for a short grace period after the first failure and ranks
the reports: an ordinary exception, then a process that died, then communication errors.
"""

from __future__ import annotations

import io
import math
import multiprocessing
import os
import queue as queue_module
import socket
import time
import traceback
from datetime import timedelta

import torch
import torch.distributed as dist

__all__ = ["DistributedRunError", "find_free_port", "run_on_ranks"]

# Words in a gloo/c10d error that mark it as a knock-on of another rank's failure.
_COMMUNICATION_MARKERS = ("gloo", "connection closed by peer", "connection reset by peer",
                          "broken pipe", "c10d", "timed out")

_GUARD_HINT = (
    "Its process failed while starting, before it could run {name}. The usual cause is a "
    "script that calls run_on_ranks at top level without an `if __name__ == \"__main__\":` "
    "guard: each worker imports the main script again, which tries to start new processes. "
    "Put the call under that guard (or make sure {name} and its arguments can be imported "
    "and unpickled in a fresh interpreter); the worker's own traceback is on stderr")


class DistributedRunError(RuntimeError):
    """A rank raised, died, or the run did not finish in time."""


def find_free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago (the OS picks it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def is_communication_error(exc: BaseException) -> bool:
    """True for errors of the collectives themselves (a peer vanished, a collective timed
    out), which are usually the consequence of another rank's failure, not its cause."""
    dist_error = getattr(dist, "DistError", None)
    if dist_error is not None and isinstance(exc, dist_error):
        return True
    text = str(exc).lower()
    return isinstance(exc, (RuntimeError, OSError)) and any(
        marker in text for marker in _COMMUNICATION_MARKERS)


def _error_report(exc: BaseException) -> tuple[bool, str, str]:
    """(communication error?, one-line summary, full traceback) of an exception."""
    lines = str(exc).strip().splitlines()
    summary = f"{type(exc).__name__}: {lines[0] if lines else ''}".rstrip(": ")
    return is_communication_error(exc), summary, traceback.format_exc()


def _worker_entry(fn, rank, world_size, port, args, results, init_timeout):
    """Body of each worker process: say it started, join the group, run fn, report, leave.

    A failure of ``fn`` is reported *before* the group is destroyed, so the root cause is
    queued before the knock-on errors that leaving the group causes on the other ranks.
    """
    results.put((rank, "started", None))
    try:
        torch.set_num_threads(1)
        if "lo" in {name for _, name in socket.if_nameindex()}:
            os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")
        dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank,
                                world_size=world_size,
                                timeout=timedelta(seconds=init_timeout))
        try:
            value = fn(rank, world_size, *args)
        except BaseException as exc:
            results.put((rank, "error", _error_report(exc)))
            return
        finally:
            dist.destroy_process_group()
        buffer = io.BytesIO()
        torch.save(value, buffer)
        results.put((rank, "ok", buffer.getvalue()))
    except BaseException as exc:  # report everything, including KeyboardInterrupt
        results.put((rank, "error", _error_report(exc)))


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


def _failure_message(name, world_size, started, errors, dead) -> str:
    """The failure report, root cause first.

    Order: an exception that is not a communication error, then a process that died without
    reporting, then communication errors, then ranks still running when the run was stopped.
    """
    entries = []  # (priority, rank, headline, details)
    for rank, (is_comm, summary, text) in errors.items():
        entries.append((2 if is_comm else 0, rank, f"rank {rank} of {name} failed: {summary}",
                        text))
    for rank, code in dead.items():
        if rank in started:
            entries.append((1, rank, f"rank {rank} of {name} died with exit code {code} while "
                                     "running it (killed, out of memory, or a crash in native "
                                     "code)", ""))
        else:
            entries.append((1, rank, f"rank {rank} of {name} died with exit code {code} before "
                                     "reporting", _GUARD_HINT.format(name=name)))
    for rank in sorted(set(range(world_size)) - set(errors) - set(dead)):
        entries.append((3, rank, f"rank {rank}: still running when the run was stopped "
                                 "(probably waiting in a collective for a failed rank)", ""))
    entries.sort(key=lambda e: (e[0], e[1]))
    _, _, headline, details = entries[0]
    message = headline + (f"\n{details.rstrip()}" if details else "")
    others = [f"  {e[2]}" + (" (most likely a consequence of the failure above)"
                             if e[0] == 2 else "") for e in entries[1:]]
    if others:
        message += "\nother ranks:\n" + "\n".join(others)
    return message


def _run_once(fn, world_size, args, timeout, init_timeout, failure_grace):
    ctx = multiprocessing.get_context("forkserver")
    # The fork server is a fresh single-threaded interpreter that imports torch once; each
    # rank is then forked from it (fast, and safe: the server never ran torch's thread pools).
    ctx.set_forkserver_preload(["torch", __name__])
    results = ctx.Queue()
    port = find_free_port()
    processes = [ctx.Process(target=_worker_entry, daemon=True,
                             args=(fn, rank, world_size, port, args, results, init_timeout))
                 for rank in range(world_size)]
    name = fn.__name__
    started: set = set()
    values: dict = {}
    errors: dict = {}  # rank -> (is communication error, summary, traceback)
    dead: dict = {}  # rank -> exit code, for processes that ended without a final report
    seen_exited: set = set()
    deadline = time.monotonic() + timeout
    stop_listening = math.inf  # set to first failure + failure_grace
    try:
        for proc in processes:
            proc.start()
        while len(values) + len(errors) + len(dead) < world_size:
            now = time.monotonic()
            if now >= stop_listening:
                break
            if now >= deadline and not (errors or dead):
                missing = sorted(set(range(world_size)) - set(values))
                raise DistributedRunError(
                    f"ranks {missing} of {name} did not finish within {timeout:.0f} s; "
                    "all processes were stopped")
            wait = min(stop_listening if (errors or dead) else deadline, now + 0.2) - now
            try:
                rank, status, payload = results.get(timeout=max(wait, 0.01))
            except queue_module.Empty:
                for rank, proc in enumerate(processes):
                    reported = rank in values or rank in errors or rank in dead
                    if reported or proc.exitcode is None:
                        continue
                    if rank in seen_exited:  # exited a poll ago and still no report: dead
                        dead[rank] = proc.exitcode
                        stop_listening = min(stop_listening, time.monotonic() + failure_grace)
                    seen_exited.add(rank)
                continue
            if status == "started":
                started.add(rank)
            elif rank in values or rank in errors:
                continue  # only a rank's first report counts
            elif status == "ok":
                values[rank] = torch.load(io.BytesIO(payload), weights_only=False)
            else:
                errors[rank] = payload
                dead.pop(rank, None)
                stop_listening = min(stop_listening, time.monotonic() + failure_grace)
    finally:
        _stop(processes)
        results.close()
        results.cancel_join_thread()
    if errors or dead:
        raise DistributedRunError(_failure_message(name, world_size, started, errors, dead))
    return [values[rank] for rank in range(world_size)]


def run_on_ranks(fn, world_size: int = 2, args: tuple = (), timeout: float = 60.0,
                 init_timeout: float = 20.0, port_retries: int = 2,
                 failure_grace: float = 3.0) -> list:
    """Run ``fn(rank, world_size, *args)`` in ``world_size`` gloo processes; return results.

    ``fn`` must be importable (defined at module level, e.g. in this package), because the
    processes are forked from multiprocessing's fork server, a fresh interpreter that imports
    ``fn`` by name (started on first use, shared by later calls); a script that calls
    ``run_on_ranks`` must do so under ``if __name__ == "__main__":``. Each process joins a
    gloo group at ``tcp://127.0.0.1:<free port>`` (with ``init_timeout`` seconds for every
    collective), uses one thread, runs ``fn`` and sends back its return value. Returns the
    values in rank order.

    Raises :class:`DistributedRunError` if a rank fails or dies, or if the run takes more than
    ``timeout`` seconds; in every case all processes are stopped before returning. After the
    first failure the other ranks get ``failure_grace`` seconds to report, and the message
    starts with the root cause and its traceback (an ordinary exception before a process that
    died, before the communication errors it caused on healthy ranks), then lists the other
    ranks. A port taken between choosing and binding it is retried on another port
    ``port_retries`` times.
    """
    if world_size < 1:
        raise ValueError(f"world_size must be at least 1, got {world_size}")
    if not callable(fn) or "<locals>" in getattr(fn, "__qualname__", "<locals>") \
            or getattr(fn, "__module__", "__main__") == "__main__":
        raise ValueError("fn must be a module-level function of an importable module "
                         "(the worker processes import it by name)")
    if failure_grace < 0:
        raise ValueError(f"failure_grace must be non-negative seconds, got {failure_grace}")
    for attempt in range(port_retries + 1):
        try:
            return _run_once(fn, world_size, args, timeout, init_timeout, failure_grace)
        except DistributedRunError as err:
            if "address already in use" not in str(err).lower() or attempt == port_retries:
                raise
    raise AssertionError("unreachable")
