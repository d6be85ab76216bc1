"""The results file: build it from a sweep, round it, write it, read it back and check it.

The file (``book/data/evidence_results.json``) holds everything needed to audit or redo the
sweep: the config of every experiment and rate range, the tuning and reported seeds, the
versions of Python, torch, NumPy, scikit-learn and this package, the learning rate chosen for
every setting (with the rates tried) and one record per run (spec, learning curve, final
metrics). Floats are rounded to ``DIGITS`` significant digits
so the file stays small; a re-run is compared after the same rounding.
"""

from __future__ import annotations

import json
import os
import platform
from pathlib import Path

from layernorm_tutorial._cli import (
    StoredFileError,
    StoredFileMissing,
    is_book_file,
    read_json_document,
    write_text_atomically,
)
from layernorm_tutorial.lab.common.stored_results import is_smoke_run, round_floats
from layernorm_tutorial.lab.evidence.data import (
    SPLIT_SEED,
    TEST_FRACTION,
    VALIDATION_FRACTION,
    load_evidence_data,
)
from layernorm_tutorial.lab.evidence.experiments import (
    EXPERIMENTS,
    LR_GRID,
    RATE_RANGES,
    REFERENCE_BATCH,
)
from layernorm_tutorial.lab.evidence.runner import NUM_EVALS, NUM_THREADS, RunSpec, train_run

__all__ = ["SCHEMA_VERSION", "COMMITTED_PATH", "DEFAULT_PATH", "TOLERANCE", "build_results",
           "round_floats", "save_results", "load_results", "validate_results", "find_runs", "rerun",
           "compare_runs"]

SCHEMA_VERSION = 2
DIGITS = 5
# The book's results file in this checkout (whatever the working directory).
COMMITTED_PATH = Path(__file__).resolve().parents[3] / "book" / "data" / "evidence_results.json"
DEFAULT_PATH = COMMITTED_PATH
# Same machine, same thread count: bit-identical. Across CPUs (different SIMD paths can
# change float32 rounding) a stored run is accepted when every final accuracy is within two
# test images and every final loss within 2 % of the stored one.
TOLERANCE = {"acc_abs": 2 / 449, "loss_rel": 0.02}

RECORD_KEYS = {"experiment", "spec", "steps", "diverged", "curve", "final"}
RUN_KEYS = RECORD_KEYS | {"role", "selected"}
RANGE_RUN_KEYS = RECORD_KEYS | {"rung"}
ROLES = ("tuning", "reported")
FINAL_KEYS = {"train_loss", "train_acc", "val_loss", "val_acc", "test_loss", "test_acc",
              "val_acc_per_class", "test_acc_per_class", "minibatch_loss_last_epoch"}
CURVE_KEYS = {"step", "train_loss", "val_acc", "test_acc"}




def _versions() -> dict:
    import numpy
    import sklearn
    import torch

    from layernorm_tutorial import __version__

    return {"layernorm_tutorial": __version__, "torch": torch.__version__,
            "numpy": numpy.__version__, "scikit_learn": sklearn.__version__,
            "python": platform.python_version(), "platform": platform.platform(),
            "cpu_count": os.cpu_count()}


def build_results(sweep: dict, experiments=EXPERIMENTS, seconds: float | None = None,
                  rate_ranges=RATE_RANGES, workers: int | None = None) -> dict:
    """Wrap the output of :func:`~.experiments.run_sweep` with config, seeds and versions."""
    data = load_evidence_data()
    tuning = sorted({s for exp in experiments for s in exp.tuning_seeds})
    reported = sorted({s for exp in experiments for s in exp.reported_seeds})
    config = {
        "data": {"source": "sklearn.datasets.load_digits (8x8, pixels / 16)",
                 "split_seed": SPLIT_SEED, "test_fraction": TEST_FRACTION,
                 "test_split": "fixed book-wide (load_digits_split, seed split_seed)",
                 "validation_split": "per seed: permutation of the remaining images drawn "
                                     "from the run's seed",
                 "validation_fraction_of_train": VALIDATION_FRACTION, "sizes": data.sizes()},
        "optimizer": "Adam (betas 0.9, 0.999; eps 1e-8; no weight decay)",
        "loss": "cross-entropy",
        "lr_rule": (f"grid {list(LR_GRID)} * sqrt(batch_size / {REFERENCE_BATCH}) on a "
                    "half-decade ladder (1, 3, 10, 30, ... x 1e-3); the tuning seeds at every "
                    "rate, best mean final validation accuracy wins; a winner at an edge of the "
                    "rates tried adds the next rung beyond it (up to grid_extensions times); "
                    "the reported seeds at the winner"),
        "rate_ranges": [r.as_dict() for r in rate_ranges],
        "workers": workers,
        "evaluations_per_run": NUM_EVALS,
        "num_threads": NUM_THREADS,
        "deterministic_algorithms": True,
        "last_incomplete_batch": "dropped",
        "experiments": [exp.as_dict() for exp in experiments],
    }
    doc = {"schema_version": SCHEMA_VERSION,
           "command": "python -m layernorm_tutorial.lab.evidence",
           "versions": _versions(), "config": config,
           "tuning_seeds": tuning, "seeds": reported,
           "tolerance": TOLERANCE, "sweep_seconds": seconds,
           "runs_trained": sweep.get("trained"),
           "selected_lr": sweep["selected_lr"], "runs": sweep["runs"],
           "range_runs": sweep["range_runs"]}
    return round_floats(doc)


def validate_results(doc: dict) -> None:
    """Raise ``ValueError`` naming the first problem if ``doc`` is not a results document."""
    for key in ("schema_version", "versions", "config", "tuning_seeds", "seeds", "tolerance",
                "selected_lr", "runs", "range_runs"):
        if key not in doc:
            raise ValueError(f"results document lacks the key {key!r}")
    if doc["schema_version"] != SCHEMA_VERSION:
        raise ValueError(f"schema_version must be {SCHEMA_VERSION}, got {doc['schema_version']}")
    if set(doc["tuning_seeds"]) & set(doc["seeds"]):
        raise ValueError("tuning seeds and reported seeds must be disjoint")
    for kind, runs, required in (("run", doc["runs"], RUN_KEYS),
                                 ("range run", doc["range_runs"], RANGE_RUN_KEYS)):
        for i, run in enumerate(runs):
            missing = required - run.keys()
            if missing:
                raise ValueError(f"{kind} {i} lacks {sorted(missing)}")
            for part, keys in (("final", FINAL_KEYS), ("curve", CURVE_KEYS)):
                if keys - run[part].keys():
                    raise ValueError(f"{kind} {i} {part} lacks "
                                     f"{sorted(keys - run[part].keys())}")
            lengths = {len(v) for v in run["curve"].values()}
            if len(lengths) != 1:
                raise ValueError(f"{kind} {i} curve arrays differ in length: {sorted(lengths)}")
            RunSpec(**run["spec"])  # raises TypeError on unknown or missing fields
    for i, run in enumerate(doc["runs"]):
        if run["role"] not in ROLES:
            raise ValueError(f"run {i} has role {run['role']!r}, expected one of {ROLES}")
    settings = {(d["experiment"], d["norm"], d["batch_size"]) for d in doc["selected_lr"]}
    for i, run in enumerate(doc["runs"]):
        s = run["spec"]
        if (run["experiment"], s["norm"], s["batch_size"]) not in settings:
            raise ValueError(f"run {i} belongs to no setting listed in selected_lr")


def save_results(doc: dict, path: str | Path = DEFAULT_PATH, *, overwrite: bool = False) -> Path:
    """Validate and write ``doc`` as compact JSON; returns the path.

    An existing file is replaced only with ``overwrite=True`` (``FileExistsError``
    otherwise): the default path is the book's committed results. The write goes through a
    temporary file, so an interrupted write leaves the old file intact.
    """
    validate_results(doc)
    path = Path(path)
    if path.exists() and not overwrite:
        raise FileExistsError(f"{path} exists: pass overwrite=True to replace it")
    return write_text_atomically(path, json.dumps(doc, separators=(",", ":")) + "\n")


def load_results(path: str | Path = DEFAULT_PATH) -> dict:
    """Read and validate a results file; ``FileNotFoundError`` / ``ValueError`` (a broken or
    invalid file) are one line naming the file and what to do."""
    path = Path(path)
    if not path.exists():
        raise StoredFileMissing(
            f"no results file at {path}: "
            + ("restore it (git checkout) or " if is_book_file(path) else "")
            + "run `python -m layernorm_tutorial.lab.evidence` first")
    command = "python -m layernorm_tutorial.lab.evidence"
    doc = read_json_document(path, command=command)
    if is_smoke_run(doc) and is_book_file(path):
        raise StoredFileError(f"{path}: holds a smoke run (--tiny), not the book's results; "
                              f"restore it (git checkout) or re-run {command}")
    try:
        validate_results(doc)
    except (ValueError, TypeError, KeyError, AttributeError) as err:
        fix = "restore it (git checkout) or " if is_book_file(path) else ""
        raise StoredFileError(f"{path}: not a valid results file ({type(err).__name__}: "
                              f"{' '.join(str(err).split())}); {fix}re-run {command}") from None
    return doc


def find_runs(doc: dict, experiment: str, norm: str | None = None,
              batch_size: int | None = None, selected: bool | None = True,
              role: str | None = "reported") -> list[dict]:
    """The runs of one experiment, optionally filtered by norm, batch size, ``selected``
    and ``role`` (default: the reported seeds at the chosen learning rate), sorted by norm,
    batch size, rate and seed. Rate-range experiments (``lr_range_*``) are looked up in
    ``range_runs``; there ``selected`` and ``role`` do not apply."""
    if experiment.startswith("lr_range"):
        return sorted((r for r in doc["range_runs"] if r["experiment"] == experiment
                       and (norm is None or r["spec"]["norm"] == norm)),
                      key=lambda r: (r["spec"]["norm"], r["spec"]["lr"], r["spec"]["seed"]))
    out = [r for r in doc["runs"] if r["experiment"] == experiment
           and (norm is None or r["spec"]["norm"] == norm)
           and (batch_size is None or r["spec"]["batch_size"] == batch_size)
           and (selected is None or r["selected"] == selected)
           and (role is None or r["role"] == role)]
    return sorted(out, key=lambda r: (r["spec"]["norm"], r["spec"]["batch_size"],
                                      r["spec"]["lr"], r["spec"]["seed"]))


def rerun(run: dict) -> dict:
    """Train the stored run's spec again and return the new record, rounded like the file."""
    return round_floats(train_run(RunSpec(**run["spec"])))


def compare_runs(stored: dict, fresh: dict, tolerance: dict = TOLERANCE) -> dict:
    """Largest final-metric differences between two records of the same spec.

    Returns ``{"max_acc_diff", "max_loss_rel_diff", "within_tolerance"}``; accuracies are
    compared in absolute terms (allowing for the rounding of both records), losses relative to
    the stored value.
    """
    if stored["spec"] != fresh["spec"]:
        raise ValueError("the two records are not runs of the same spec")
    acc = max(abs(stored["final"][k] - fresh["final"][k])
              for k in ("train_acc", "val_acc", "test_acc"))
    loss = max(abs(stored["final"][k] - fresh["final"][k]) / max(abs(stored["final"][k]), 1e-12)
               for k in ("train_loss", "val_loss", "test_loss"))
    # both records are rounded to DIGITS significant digits, which moves an accuracy (< 1) by
    # at most 0.5e-5 and so a difference by at most 1e-5
    slack = 10.0 ** -DIGITS
    return {"max_acc_diff": acc, "max_loss_rel_diff": loss,
            "within_tolerance": acc <= tolerance["acc_abs"] + slack
            and loss <= tolerance["loss_rel"]}
