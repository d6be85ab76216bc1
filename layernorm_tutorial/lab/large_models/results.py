"""The chapter's stored results: compute every slow section, write one JSON with provenance.

Sections: ``architectures``, ``qk_norm`` (QK-norm and the other logit-stability tools, one
learning-rate ladder), ``deepnorm``, ``comparisons`` (with ``alpha`` and
``per_token_map``), ``recipes``, ``timing``, ``sequence_parallel``, ``paths`` (the spread
of the live re-run's losses across numerics paths: the tolerance the notebook uses) and
``replication`` (the QK-norm verdict's seeds re-run on a second numerics path).

The training runs are single-threaded jobs in worker processes
(:func:`~layernorm_tutorial.lab.common.stored_results.run_jobs`, with a progress bar and
the time left); the timing runs alone afterwards, with no other job of this command
running beside it. :func:`load_results` reads the file back.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import numpy as np
import torch

from layernorm_tutorial._cli import StoredFileError, is_book_file
from layernorm_tutorial.lab.common import stored_results
from layernorm_tutorial.lab.common.numerics_paths import run_on_paths, spread_record

__all__ = ["COMMAND", "COMMITTED_PATH", "QK_SETTINGS", "DEEPNORM_SETTINGS", "SHAPE_SETTINGS",
           "LIVE_CHECK", "REPLICATION_PATH", "SECTIONS", "build_results", "load_results",
           "save_results"]

COMMITTED_PATH = stored_results.BOOK_DATA / "large_models_results.json"
COMMAND = "python -m layernorm_tutorial.lab.large_models"
QK_SETTINGS = {"lrs": [1e-2, 3e-2, 1e-1, 3e-1, 1.0], "seeds": [0, 1, 2, 3, 4, 5, 6, 7],
               "steps": 150, "warmup_steps": 10,
               "arms": ["none", "rmsnorm", "softcap", "zloss", "qkclip"]}
DEEPNORM_SETTINGS = {"num_layers": 12, "seeds": [0, 1, 2, 3, 4], "steps": 60, "lr": 1e-2,
                     "warmup_steps": 10}
SHAPE_SETTINGS = {"num_layers": 2, "lr": 1e-2, "steps": 200, "seed": 0}
#: The notebook's live re-run: the first steps of seed 0 at one learning rate, both arms.
LIVE_CHECK = {"lr": 0.1, "seed": 0, "steps": 20, "warmup_steps": 10,
              "arms": ["none", "rmsnorm"]}
#: The second numerics path on which the QK-norm verdict's seeds are re-run.
REPLICATION_PATH = "default+compatible"
SECTIONS = ("architectures", "qk_norm", "deepnorm", "comparisons", "recipes", "timing",
            "sequence_parallel", "paths", "replication")
_ROUND = stored_results.round_floats


def _rounded(values, digits: int = 5) -> list:
    return _ROUND([float(v) for v in np.asarray(values, float).tolist()], digits)


# ------------------------------------------------------------------ one job each
def _job(job: tuple):
    """One unit of work in a worker process (one thread): ``(kind, *args)``."""
    torch.set_num_threads(1)
    start = time.perf_counter()
    value = _JOBS[job[0]](*job[1:])
    return job, value, time.perf_counter() - start


def _architectures() -> dict:
    from layernorm_tutorial.lab.large_models import architectures as arch

    table = arch.architecture_table()
    for name in table:
        table[name]["default_config"] = arch.default_config_counts(name)
    return table


def _qk_cell(arm: str, lr: float) -> list:
    from layernorm_tutorial.lab.large_models import qk_norm

    s = QK_SETTINGS
    runs = [qk_norm.qk_run(arm, lr, seed, steps=s["steps"], warmup_steps=s["warmup_steps"])
            for seed in s["seeds"]]
    return [{"loss": _rounded(r["loss"]), "max_logit": _rounded(r["max_logit"]),
             "final_loss": r["final_loss"], "accuracy": r["accuracy"],
             "clipped": r["clipped"]} for r in runs]


def _deepnorm_arm(arm: str) -> list:
    from layernorm_tutorial.lab.large_models import deepnorm

    s = DEEPNORM_SETTINGS
    runs = [deepnorm.deepnorm_run(arm, s["num_layers"], seed, steps=s["steps"], lr=s["lr"],
                                  warmup_steps=s["warmup_steps"]) for seed in s["seeds"]]
    return [{"loss": _rounded(r["loss"]), "final_loss": r["final_loss"],
             "accuracy": r["accuracy"]} for r in runs]


def _norm_accuracy(norm: str, lr: float, seeds: tuple, alpha_init: float = 0.5) -> list:
    from layernorm_tutorial.lab.large_models import comparisons as cmp

    return [cmp.norm_run(norm, lr, s, alpha_init=alpha_init)["accuracy"] for s in seeds]


def _per_token_map() -> dict:
    from layernorm_tutorial.lab.large_models import comparisons as cmp

    s = SHAPE_SETTINGS
    trained = cmp.norm_run("layernorm", s["lr"], s["seed"], s["steps"],
                           num_layers=s["num_layers"])
    maps = cmp.per_token_map(trained["model"], s["seed"])
    for m in maps:
        m.update(cmp.tanh_fit(m["x"], m["y"]))
        m["x"], m["y"] = _rounded(m["x"], 4), _rounded(m["y"], 4)
    return {"settings": s, "accuracy": trained["accuracy"], "norms": maps}


def _recipes() -> dict:
    from layernorm_tutorial.lab.large_models import recipes

    decay = recipes.gamma_under_decay()
    for run in decay["runs"].values():
        run["mean_gamma"] = _rounded(run["mean_gamma"])
    decay["decay_only"] = _rounded(decay["decay_only"])
    return {"gamma_under_decay": decay}


_JOBS = {"architectures": _architectures, "qk": _qk_cell, "deepnorm": _deepnorm_arm,
         "accuracy": _norm_accuracy, "per_token_map": _per_token_map, "recipes": _recipes}


# ------------------------------------------------------------------ the sections
def _comparisons(workers: int, seconds: dict) -> dict:
    """Tune each norm's lr on the tuning seeds (widened grid), then the reported seeds and
    DyT's initial alpha at its chosen lr, and LayerNorm's per-token map."""
    from layernorm_tutorial.lab.large_models import comparisons as cmp

    tuning_seeds, reported = cmp.seed_plan()
    jobs = [("accuracy", n, lr, tuning_seeds) for n in cmp.NORMS for lr in cmp.LR_GRID]
    done = _run(jobs, workers, "comparisons: tuning", seconds, "comparisons")
    tuning = {n: {str(lr): done[("accuracy", n, lr, tuning_seeds)] for lr in cmp.LR_GRID}
              for n in cmp.NORMS}
    chosen = {n: cmp.choose_lr(tuning[n]) for n in cmp.NORMS}
    jobs = [("accuracy", n, chosen[n], reported) for n in cmp.NORMS]
    jobs += [("accuracy", "dyt", chosen["dyt"], reported, a) for a in cmp.ALPHAS
             if a != 0.5]
    jobs.append(("per_token_map",))
    done = _run(jobs, workers, "comparisons: reported seeds", seconds, "comparisons")
    accuracy = {n: done[("accuracy", n, chosen[n], reported)] for n in cmp.NORMS}
    alpha = {str(a): (accuracy["dyt"] if a == 0.5 else
                      done[("accuracy", "dyt", chosen["dyt"], reported, a)])
             for a in cmp.ALPHAS}
    main = {"tuning_seeds": list(tuning_seeds), "reported_seeds": list(reported),
            "lr_grid": list(cmp.LR_GRID), "tuning": tuning, "lr": chosen,
            "accuracy": accuracy, "steps": 150}
    return {"main": main,
            "alpha": {"accuracy": alpha, "lr": chosen["dyt"], "seeds": list(reported)},
            "per_token_map": done[("per_token_map",)]}


def _run(jobs: list, workers: int, desc: str, seconds: dict, section: str) -> dict:
    out = {}
    for job, value, took in stored_results.run_jobs(_job, jobs, workers, desc=desc):
        out[job] = value
        seconds[section] = round(seconds.get(section, 0.0) + took, 1)
    return out


def live_check_losses(lr: float, seed: int, steps: int, warmup_steps: int,
                      arms: list) -> dict:
    """The notebook's live re-run: ``{arm: [loss per step]}`` for the first ``steps`` of
    one seed (JSON-able, so :func:`~.numerics_paths.run_on_paths` can call it)."""
    from layernorm_tutorial.lab.large_models import qk_norm

    torch.set_num_threads(1)
    return {arm: [float(v) for v in qk_norm.qk_run(arm, lr, seed, steps=steps,
                                                    warmup_steps=warmup_steps)["loss"]]
            for arm in arms}


def replicate_qk(arms: list, lrs: list, seeds: list, steps: int,
                 warmup_steps: int) -> dict:
    """The QK-norm ladder's final losses, ``{arm: {lr: [final loss per seed]}}``, on
    whatever numerics path this process runs (for :func:`~.numerics_paths.run_on_paths`)."""
    from layernorm_tutorial.lab.large_models import qk_norm

    torch.set_num_threads(1)
    return {arm: {str(lr): [qk_norm.qk_run(arm, lr, s, steps=steps,
                                           warmup_steps=warmup_steps)["final_loss"]
                            for s in seeds] for lr in lrs} for arm in arms}


def _paths() -> dict:
    """The spread of the live re-run's losses across every numerics path."""
    target = "layernorm_tutorial.lab.large_models.results:live_check_losses"
    values = run_on_paths(target, LIVE_CHECK)
    record = spread_record("QK-norm sweep, first steps' training losses", target,
                           LIVE_CHECK, values)
    record["per_arm"] = {arm: spread_record(arm, target, LIVE_CHECK,
                                            {p: v[arm] for p, v in values.items()}
                                            )["relative_spread"]
                         for arm in LIVE_CHECK["arms"]}
    return record


def _replication(workers: int = 2) -> dict:
    """The QK-norm ladder of both arms re-run on :data:`REPLICATION_PATH`, one fresh
    process per arm (``workers`` of them at a time)."""
    from concurrent.futures import ThreadPoolExecutor

    s = QK_SETTINGS
    base = {"lrs": s["lrs"], "seeds": s["seeds"], "steps": s["steps"],
            "warmup_steps": s["warmup_steps"]}
    target = "layernorm_tutorial.lab.large_models.results:replicate_qk"

    def one(arm):
        out = run_on_paths(target, {"arms": [arm], **base}, [REPLICATION_PATH],
                           with_machine=True)
        return out[REPLICATION_PATH]

    arms = ["none", "rmsnorm"]
    with ThreadPoolExecutor(max(1, min(workers, len(arms)))) as pool:
        records = list(pool.map(one, arms))
    final = {arm: rec["result"][arm] for arm, rec in zip(arms, records, strict=True)}
    return {"path": REPLICATION_PATH, "kwargs": {"arms": arms, **base},
            "final_loss": final, "machine": records[0]["machine"]}


#: The registered claims each section's data judge (stamped into the file).
CLAIMS_BY_SECTION = {"qk_norm": ("large_models.qk-norm", "large_models.logit-tools"),
                     "comparisons": ("large_models.norms", "large_models.dyt-alpha"),
                     "deepnorm": ("large_models.deepnorm",),
                     "timing": ("large_models.time",)}


def build_results(sections=None, workers: int = 1, previous: dict | None = None) -> dict:
    """Run the sections (all by default) and return them with the provenance header.

    ``previous``: an earlier results document whose other sections are kept (``--update``);
    its header is kept under ``previous_runs`` with the names of the sections it made."""
    from layernorm_tutorial.lab.large_models import comparisons as cmp
    from layernorm_tutorial.lab.large_models import deepnorm
    from layernorm_tutorial.lab.large_models import sequence_parallel as sp

    torch.set_num_threads(1)
    chosen = list(sections or SECTIONS)
    data, seconds = {}, {}
    s = QK_SETTINGS
    jobs = []
    if "architectures" in chosen:
        jobs.append(("architectures",))
    if "qk_norm" in chosen:
        jobs += [("qk", arm, lr) for arm in s["arms"] for lr in s["lrs"]]
    if "deepnorm" in chosen:
        jobs += [("deepnorm", arm) for arm in deepnorm.ARMS]
    if "recipes" in chosen:
        jobs.append(("recipes",))
    done = {}
    for job, value, took in stored_results.run_jobs(_job, jobs, workers,
                                                    desc="large_models runs"):
        done[job] = value
        key = {"qk": "qk_norm"}.get(job[0], job[0])
        seconds[key] = round(seconds.get(key, 0.0) + took, 1)
    if "architectures" in chosen:
        data["architectures"] = done[("architectures",)]
    if "qk_norm" in chosen:
        data["qk_norm"] = {"settings": s, "runs": {
            arm: {str(lr): done[("qk", arm, lr)] for lr in s["lrs"]} for arm in s["arms"]}}
    if "deepnorm" in chosen:
        data["deepnorm"] = {"settings": DEEPNORM_SETTINGS,
                            "runs": {arm: done[("deepnorm", arm)] for arm in deepnorm.ARMS}}
    if "comparisons" in chosen:
        data["comparisons"] = _comparisons(workers, seconds)
    if "recipes" in chosen:
        data["recipes"] = done[("recipes",)]
    serial = {"timing": cmp.time_norms, "sequence_parallel": sp.sequence_parallel_check,
              "paths": _paths, "replication": lambda: _replication(workers)}
    for name, fn in serial.items():   # alone: no worker of this command runs beside them
        if name in chosen:
            print(f"{name} (alone) ...", file=sys.stderr, flush=True)
            data[name], seconds[name] = stored_results.timed(fn)
            seconds[name] = round(seconds[name], 1)
    kept = {}
    if previous is not None:
        old = {k: v for k, v in previous.items() if k in SECTIONS and k not in data}
        kept = {"sections": sorted(old), **{k: previous[k] for k in
                                            ("command", "config", "seconds", "machine")
                                            if k in previous}}
        data.update(old)
        chosen_all = sorted(set(chosen) | set(old))
    else:
        chosen_all = chosen
    data = {name: data[name] for name in SECTIONS if name in data}
    try:
        import transformers
        tf_version = transformers.__version__
    except ImportError:
        tf_version = None
    command = "python -m layernorm_tutorial.lab.large_models " + " ".join(sys.argv[1:])
    header = stored_results.provenance(command.strip(), {
        "sections": chosen, "workers": workers, "threads per job": 1,
        "transformers": tf_version, "qk_norm": s, "deepnorm": DEEPNORM_SETTINGS,
        "per_token_map": SHAPE_SETTINGS, "live_check": LIVE_CHECK,
        "replication_path": REPLICATION_PATH}, seconds)
    if kept:
        header["previous_runs"] = [*previous.get("previous_runs", []), kept]
    from layernorm_tutorial.lab.common import claims

    judged = [c for name in chosen_all for c in CLAIMS_BY_SECTION.get(name, ())]
    known = {c.id for c in claims.CLAIMS}
    return claims.stamp({**header, **data}, [c for c in judged if c in known])


def save_results(results: dict, path, overwrite: bool = False) -> Path:
    """Write ``results`` atomically (5 significant digits), refusing to replace a file
    unless ``overwrite``."""
    return stored_results.save_results(results, path, overwrite=overwrite)


def load_results(path=COMMITTED_PATH, *, complete: bool | None = None) -> dict:
    """Read the stored results, the provenance header and the sections checked first.

    ``complete``: every one of :data:`SECTIONS` must be there (default: for the book's file
    in ``book/data/``; elsewhere, a file of a ``--sections`` run, at least one section).
    ``FileNotFoundError`` / ``ValueError``: one line naming the file and what to do."""
    doc = stored_results.load_results(path, command=COMMAND)
    if complete is None:
        complete = is_book_file(path)
    missing = [name for name in SECTIONS if name not in doc]
    if (complete and missing) or len(missing) == len(SECTIONS):
        fix = "restore it (git checkout) or " if is_book_file(path) else ""
        raise StoredFileError(f"{path}: lacks the section(s) {', '.join(missing)}; {fix}re-run "
                              f"{COMMAND} (--update --force --sections ... adds them)")
    return doc
