"""Numerics paths: the same code on another CPU's arithmetic, without another CPU.

A training run is chaotic: a difference in the last bit of one reduction (the SIMD width of
torch's vectorized kernels, MKL's code path, the number of threads that split a sum) grows,
step by step, into a visibly different outcome of the same seed. A reader on an AVX-512 server,
an AMD laptop or Apple silicon runs a different *numerics path* from the machine that stored a
chapter's results. Every x86-64 machine can imitate the others through two environment
variables read when torch starts:

- ``ATEN_CPU_CAPABILITY=default|avx2|avx512`` picks torch's vectorized kernels;
- ``MKL_CBWR=COMPATIBLE|AVX2|...`` pins MKL's code path (conditional numerical reproducibility);
- ``OMP_NUM_THREADS`` sets how many threads split a reduction.

Because torch reads them once, at import, each path runs in a fresh Python process
(:func:`run_on_paths`), with its own torch.compile cache: inductor's cache is not keyed by
``ATEN_CPU_CAPABILITY``, so a kernel compiled for AVX-512 and reused on the AVX2 path returns
garbage, and on the default path fails to compile (``.ci/run`` gives each path its own
``TORCHINDUCTOR_CACHE_DIR`` for the same reason). The spread of one quantity across paths
(:func:`relative_spread`) is the *measured* tolerance at which a notebook compares a live
re-run with its stored run.

:func:`machine_info` describes the path this process runs on; it is part of every stored
run's provenance.
"""

from __future__ import annotations

import datetime as _dt
import json
import math
import os
import platform
import re
import subprocess
import sys
import tempfile
from collections.abc import Iterable, Mapping
from pathlib import Path

__all__ = ["PATHS", "MIXED_PATHS", "ALL_PATHS", "CI_PATHS", "machine_info", "run_on_paths",
           "relative_spread", "absolute_spread", "spread_record", "reduction_probe"]

#: name -> the environment that selects the path (added to the current environment).
PATHS: dict[str, dict[str, str]] = {
    "native": {},
    "native, 1 thread": {"OMP_NUM_THREADS": "1"},
    "default+compatible": {"ATEN_CPU_CAPABILITY": "default", "MKL_CBWR": "COMPATIBLE"},
    "avx2": {"ATEN_CPU_CAPABILITY": "avx2", "MKL_CBWR": "AVX2"},
    "avx2, 1 thread": {"ATEN_CPU_CAPABILITY": "avx2", "MKL_CBWR": "AVX2",
                       "OMP_NUM_THREADS": "1"},
}

#: Mixtures of torch's SIMD kernels with MKL's COMPATIBLE path: not in the default set that
#: the stored measurements cover, but runnable by name (a measurement that must cover them
#: names them; the principles chapter's live check does).
MIXED_PATHS: dict[str, dict[str, str]] = {
    "avx2+compatible": {"ATEN_CPU_CAPABILITY": "avx2", "MKL_CBWR": "COMPATIBLE"},
    "avx512+compatible": {"ATEN_CPU_CAPABILITY": "avx512", "MKL_CBWR": "COMPATIBLE"},
}
ALL_PATHS = {**PATHS, **MIXED_PATHS}

#: The non-native paths that CI runs the notebooks on (``.ci/run``).
CI_PATHS = ("default+compatible", "avx2, 1 thread")

_PATH_VARIABLES = ("ATEN_CPU_CAPABILITY", "MKL_CBWR", "OMP_NUM_THREADS")
_REPO = Path(__file__).resolve().parents[3]


def _cpu_model() -> str:
    """The CPU's model name (``/proc/cpuinfo`` on Linux, ``sysctl`` on macOS)."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.lower().startswith(("model name", "hardware", "cpu model")):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    if sys.platform == "darwin":
        try:
            return subprocess.run(["sysctl", "-n", "machdep.cpu.brand_string"], text=True,
                                  capture_output=True, timeout=5).stdout.strip()
        except (OSError, subprocess.SubprocessError):
            pass
    return platform.processor() or platform.machine()


def _library_versions() -> dict[str, str | None]:
    """MKL's and oneDNN's versions as torch reports them (``None`` where absent)."""
    import torch

    config = torch.__config__.show()
    mkl = re.search(r"Math Kernel Library Version ([\d.]+)(?:-Product Build (\d+))?", config)
    onednn = re.search(r"MKL-DNN v([\w.\-]+)", config)
    mkl_version = None
    if mkl:
        mkl_version = mkl.group(1) + (f" (build {mkl.group(2)})" if mkl.group(2) else "")
    return {"mkl": mkl_version, "onednn": onednn.group(1) if onednn else None}


def _git_commit() -> str | None:
    """The repository's HEAD commit (with ``+dirty`` when tracked files differ), or None."""
    try:
        head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=_REPO, text=True,
                              capture_output=True, timeout=10)
        if head.returncode != 0:
            return None
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"],
                               cwd=_REPO, text=True, capture_output=True, timeout=10)
        return head.stdout.strip() + ("+dirty" if dirty.stdout.strip() else "")
    except (OSError, subprocess.SubprocessError):
        return None


def machine_info() -> dict:
    """The numerics path of this process, for a stored run's provenance.

    Keys: ``cpu`` (model name), ``machine`` (architecture), ``os``, ``cpu_capability``
    (``torch.backends.cpu.get_cpu_capability()``), ``mkl``, ``onednn``, ``environment`` (the
    path variables that are set), ``torch_threads``, ``torch``, ``python``, ``date`` (UTC,
    ISO 8601) and ``commit``.
    """
    import torch

    return {
        "cpu": _cpu_model(),
        "machine": platform.machine(),
        "os": platform.system(),
        "cpu_capability": torch.backends.cpu.get_cpu_capability(),
        **_library_versions(),
        "environment": {k: os.environ[k] for k in _PATH_VARIABLES if k in os.environ},
        "torch_threads": torch.get_num_threads(),
        "torch": torch.__version__,
        "python": platform.python_version(),
        "date": _dt.datetime.now(_dt.timezone.utc).replace(microsecond=0).isoformat(),
        "commit": _git_commit(),
    }


_CHILD = """
import importlib, json, sys
target, out = sys.argv[1], sys.argv[2]
module, _, name = target.partition(":")
kwargs = json.load(sys.stdin)
result = getattr(importlib.import_module(module), name)(**kwargs)
from layernorm_tutorial.lab.common.numerics_paths import machine_info
with open(out, "w") as f:
    json.dump({"result": result, "machine": machine_info()}, f)
"""


def run_on_paths(target: str, kwargs: Mapping | None = None,
                 paths: Iterable[str] | None = None, *, timeout: float = 1800.0,
                 with_machine: bool = False, desc: str | None = None) -> dict:
    """``{path: target(**kwargs)}``, each call in a fresh process on one numerics path.

    Args:
        target: ``"package.module:function"``; the function takes JSON-able keyword
            arguments and returns JSON-able data (numbers, lists, dicts).
        kwargs: its keyword arguments.
        paths: names from :data:`PATHS` or :data:`MIXED_PATHS` (default: all of
            :data:`PATHS`).
        timeout: seconds allowed per path.
        with_machine: return ``{path: {"result": ..., "machine": machine_info()}}`` instead.
        desc: a label for a progress bar over the paths (on stderr; none if not given).

    Raises:
        ValueError: ``target`` is not ``"module:function"`` or a path name is unknown.
        RuntimeError: a child process failed (its last lines of stderr are in the message).
    """
    if not isinstance(target, str) or target.count(":") != 1 or target.startswith(":"):
        raise ValueError(f"target must be 'package.module:function', got {target!r}")
    names = list(PATHS if paths is None else paths)
    unknown = [n for n in names if n not in ALL_PATHS]
    if unknown:
        raise ValueError(f"paths must be names from {sorted(ALL_PATHS)}, got {unknown[0]!r}")
    payload = json.dumps(dict(kwargs or {}))
    results = {}
    bar = None
    if desc:
        from tqdm.auto import tqdm

        bar = tqdm(total=len(names), desc=desc, unit="path", file=sys.stderr)
    with tempfile.TemporaryDirectory(prefix="numerics_paths_") as tmp:
        for k, name in enumerate(names):
            out = Path(tmp) / "result.json"
            env = {k: v for k, v in os.environ.items() if k not in _PATH_VARIABLES}
            env.update(ALL_PATHS[name])
            env["TORCHINDUCTOR_CACHE_DIR"] = str(Path(tmp) / f"inductor-{k}")
            done = subprocess.run([sys.executable, "-c", _CHILD, target, str(out)],
                                  input=payload, text=True, capture_output=True, env=env,
                                  timeout=timeout, cwd=_REPO)
            if done.returncode != 0:
                tail = "\n".join(done.stderr.strip().splitlines()[-5:])
                raise RuntimeError(f"{target} failed on the path {name!r}:\n{tail}")
            record = json.loads(out.read_text())
            results[name] = record if with_machine else record["result"]
            if bar is not None:
                bar.set_postfix_str(name)
                bar.update(1)
    if bar is not None:
        bar.close()
    return results


def _flat(value) -> list[float]:
    if isinstance(value, Mapping):
        return [x for k in sorted(value) for x in _flat(value[k])]
    if isinstance(value, (list, tuple)):
        return [x for v in value for x in _flat(v)]
    return [float(value)]


def _columns(results: Mapping) -> list[list[float]]:
    if not results:
        raise ValueError("results must hold at least one path")
    flats = [_flat(v) for v in results.values()]
    if len({len(f) for f in flats}) != 1:
        raise ValueError("results must have the same structure on every path")
    return [list(col) for col in zip(*flats, strict=True)]


def absolute_spread(results: Mapping) -> float:
    """The largest ``max - min`` over paths, element by element, of the same structure."""
    return max(max(col) - min(col) for col in _columns(results))


def relative_spread(results: Mapping, floor: float = 1e-12) -> float:
    """The largest ``(max - min) / max(|values|)`` over paths, element by element.

    ``results`` maps a path name to numbers, lists or dicts of the same structure (what
    :func:`run_on_paths` returns); elements whose magnitude is below ``floor`` on every path
    count as equal. Non-finite values on any path give ``inf``, unless every path is NaN at
    that element (then equal)."""
    worst = 0.0
    for col in _columns(results):
        if all(math.isnan(x) for x in col):
            continue
        if not all(math.isfinite(x) for x in col):
            return math.inf
        scale = max(abs(x) for x in col)
        if scale >= floor:
            worst = max(worst, (max(col) - min(col)) / scale)
    return worst


def spread_record(quantity: str, target: str, kwargs: Mapping, results: Mapping) -> dict:
    """What a stored run keeps of a measured tolerance: the quantity, the call, each path's
    environment and values, the relative and absolute spreads, and this machine."""
    return {"quantity": quantity, "target": target, "kwargs": dict(kwargs),
            "paths": {name: ALL_PATHS[name] for name in results},
            "values": dict(results), "relative_spread": relative_spread(results),
            "absolute_spread": absolute_spread(results), "machine": machine_info()}


def reduction_probe(n: int = 4096, seed: int = 0) -> dict:
    """One float32 reduction and one matrix product on a fixed input, as this path computes
    them, with the path's CPU capability: the smallest example of a path-dependent result.

    Returns ``{"cpu_capability": str, "sum": float, "matmul_sum": float}``."""
    import torch

    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, generator=g, dtype=torch.float32)
    a = torch.randn(64, n // 64, generator=g, dtype=torch.float32)
    return {"cpu_capability": torch.backends.cpu.get_cpu_capability(),
            "sum": float(x.sum()), "matmul_sum": float((a @ a.T).sum())}
