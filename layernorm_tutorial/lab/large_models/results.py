"""The chapter's stored results: compute every slow section, write one JSON with provenance.

Sections (each a function of no arguments returning JSON-able data): ``architectures``,
``qk_norm``, ``deepnorm``, ``comparisons`` (with ``alpha`` and ``per_token_map``),
``recipes``, ``timing``, ``sequence_parallel``. :func:`load_results` reads the file back.
"""

from __future__ import annotations

import json
import platform
import subprocess
import sys
import time
from datetime import datetime, timezone
from pathlib import Path

import numpy as np
import torch

from layernorm_tutorial._cli import write_text_atomically

__all__ = ["COMMITTED_PATH", "QK_SETTINGS", "DEEPNORM_SETTINGS", "SHAPE_SETTINGS",
           "SECTIONS", "build_results", "load_results"]

COMMITTED_PATH = Path(__file__).resolve().parents[3] / "book" / "data" / \
    "large_models_results.json"
QK_SETTINGS = {"lrs": [1e-2, 3e-2, 1e-1, 3e-1], "seeds": [0, 1, 2, 3, 4], "steps": 150,
               "warmup_steps": 10}
DEEPNORM_SETTINGS = {"num_layers": 12, "seeds": [0, 1, 2, 3, 4], "steps": 60, "lr": 1e-2,
                     "warmup_steps": 10}
SHAPE_SETTINGS = {"num_layers": 6, "lr": 1e-2, "steps": 200, "seed": 2}


def _round(values, digits: int = 5):
    return [float(f"{v:.{digits}g}") for v in np.asarray(values, float).tolist()]


def _architectures() -> dict:
    from layernorm_tutorial.lab.large_models import architectures as arch

    table = arch.architecture_table()
    for name in table:
        table[name]["default_config"] = arch.default_config_counts(name)
    return table


def _qk_norm(arms=None) -> dict:
    from layernorm_tutorial.lab.large_models import qk_norm

    s = QK_SETTINGS
    sweep = qk_norm.qk_sweep(s["lrs"], s["seeds"], arms=arms or qk_norm.QK_ARMS,
                             steps=s["steps"], warmup_steps=s["warmup_steps"])
    return {"settings": s, "runs": {
        arm: {str(lr): [{"loss": _round(r["loss"]), "max_logit": _round(r["max_logit"]),
                         "final_loss": r["final_loss"], "accuracy": r["accuracy"]}
                        for r in runs] for lr, runs in by_lr.items()}
        for arm, by_lr in sweep.items()}}


def _deepnorm() -> dict:
    from layernorm_tutorial.lab.large_models import deepnorm

    s = DEEPNORM_SETTINGS
    runs = {arm: [deepnorm.deepnorm_run(arm, s["num_layers"], seed, steps=s["steps"],
                                        lr=s["lr"], warmup_steps=s["warmup_steps"])
                  for seed in s["seeds"]] for arm in deepnorm.ARMS}
    return {"settings": s, "runs": {arm: [{"loss": _round(r["loss"]),
                                           "final_loss": r["final_loss"],
                                           "accuracy": r["accuracy"]} for r in rs]
                                    for arm, rs in runs.items()}}


def _comparisons() -> dict:
    from layernorm_tutorial.lab.large_models import comparisons as cmp

    main = cmp.compare_norms()
    alpha = cmp.alpha_sensitivity(main["lr"]["dyt"], main["reported_seeds"])
    s = SHAPE_SETTINGS
    trained = cmp.norm_run("layernorm", s["lr"], s["seed"], s["steps"],
                           num_layers=s["num_layers"])
    maps = cmp.per_token_map(trained["model"], s["seed"])
    for m in maps:
        m.update(cmp.tanh_fit(m["x"], m["y"]))
        m["x"], m["y"] = _round(m["x"], 4), _round(m["y"], 4)
    return {"main": main, "alpha": alpha,
            "per_token_map": {"settings": s, "accuracy": trained["accuracy"], "norms": maps}}


def _recipes() -> dict:
    from layernorm_tutorial.lab.large_models import recipes

    decay = recipes.gamma_under_decay()
    for run in decay["runs"].values():
        run["mean_gamma"] = _round(run["mean_gamma"])
    decay["decay_only"] = _round(decay["decay_only"])
    return {"gamma_under_decay": decay}


def _timing() -> dict:
    from layernorm_tutorial.lab.large_models import comparisons as cmp

    return cmp.time_norms()


def _sequence_parallel() -> dict:
    from layernorm_tutorial.lab.large_models import sequence_parallel as sp

    return sp.sequence_parallel_check()


SECTIONS = {"architectures": _architectures, "qk_norm": _qk_norm, "deepnorm": _deepnorm,
            "comparisons": _comparisons, "recipes": _recipes, "timing": _timing,
            "sequence_parallel": _sequence_parallel}


def _git_commit() -> str:
    try:
        root = Path(__file__).resolve().parents[3]
        out = subprocess.run(["git", "rev-parse", "HEAD"], cwd=root, capture_output=True,
                             text=True, timeout=10)
        return out.stdout.strip() or "unknown"
    except (OSError, subprocess.SubprocessError):
        return "unknown"


def _task(name: str, part=None):
    """One unit of work in a worker process: a section, or one arm of the QK-norm sweep."""
    torch.set_num_threads(1)
    start = time.perf_counter()
    value = _qk_norm([part]) if name == "qk_norm" and part else SECTIONS[name]()
    return name, part, value, time.perf_counter() - start


def _tasks(chosen):
    from layernorm_tutorial.lab.large_models.qk_norm import QK_ARMS

    for name in chosen:
        if name == "qk_norm":
            yield from ((name, arm) for arm in QK_ARMS)
        elif name != "sequence_parallel":     # it starts its own processes: run it last, here
            yield name, None


def build_results(sections=None, progress: bool = True, workers: int = 1) -> dict:
    """Run the sections (all by default), each single-threaded, in ``workers`` processes
    (the QK-norm sweep split by arm), and return the results with provenance: command,
    commit, versions, date, seconds per section (summed over its parts)."""
    from concurrent.futures import ProcessPoolExecutor

    torch.set_num_threads(1)
    chosen = list(sections or SECTIONS)
    data, seconds = {}, {}

    def collect(name, part, value, took):
        seconds[name] = round(seconds.get(name, 0.0) + took, 1)
        if name == "qk_norm" and name in data:
            data[name]["runs"].update(value["runs"])
        else:
            data[name] = value
        if progress:
            print(f"{name}{' ' + part if part else ''}: {took:.0f} s", flush=True)

    tasks = list(_tasks(chosen))
    if workers > 1:
        with ProcessPoolExecutor(workers) as pool:
            for result in pool.map(_task, *zip(*tasks, strict=True)):
                collect(*result)
    else:
        for task in tasks:
            collect(*_task(*task))
    if "sequence_parallel" in chosen:
        collect(*_task("sequence_parallel"))
    data = {name: data[name] for name in chosen}
    try:
        import transformers
        tf_version = transformers.__version__
    except ImportError:
        tf_version = None
    provenance = {"command": "python -m layernorm_tutorial.lab.large_models " +
                  " ".join(sys.argv[1:]),
                  "commit": _git_commit(),
                  "date": datetime.now(timezone.utc).isoformat(timespec="seconds"),
                  "torch": torch.__version__, "transformers": tf_version,
                  "python": platform.python_version(), "machine": platform.machine(),
                  "threads": 1, "workers": workers, "seconds": seconds}
    return {"provenance": provenance, **data}


def save_results(results: dict, path) -> Path:
    """Write ``results`` as JSON atomically (the caller checked the path first)."""
    return write_text_atomically(path, json.dumps(results, indent=1, sort_keys=False) + "\n")


def load_results(path=COMMITTED_PATH) -> dict:
    """Read the stored results."""
    with open(path) as f:
        return json.load(f)
