"""The residual chapter's runs on other CPUs' arithmetic: the measured tolerance of the
chapter's live check, and a replication of every stored run on a second numerics path.

Training is chaotic (:mod:`~layernorm_tutorial.lab.common.numerics_paths`): the same seed on
another CPU gives a slightly different loss curve. Two measurements:

1. **Tolerance.** :data:`CHECK` (one stored run, 30 steps) is retrained on every path of
   :data:`~layernorm_tutorial.lab.common.numerics_paths.PATHS`; the largest relative spread
   of its loss curve across paths is the measured tolerance of the chapter's live re-run
   (:func:`live_check` allows :data:`TOLERANCE_MULTIPLE` times it, plus the rounding of the
   stored file).
2. **Replication.** Every run of ``book/data/residual_runs.json`` is trained again on
   :data:`REPLICATION_PATH`; :func:`replication_table` judges the chapter's verdicts on those
   runs next to the stored ones (same word? effect inside the stored interval?).

``python -m layernorm_tutorial.lab.residual.paths`` writes both, with provenance, to
``book/data/residual_paths.json`` (:data:`COMMITTED_PATH`).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from layernorm_tutorial.lab.common import numerics_paths, stored_results
from layernorm_tutorial.lab.common.stored_results import BOOK_DATA, provenance
from layernorm_tutorial.lab.residual import sweep

__all__ = ["CHECK", "COMMITTED_PATH", "REPLICATION_PATH", "TOLERANCE_MULTIPLE", "LiveCheck",
           "live_check", "measure", "replication_table", "stored_losses"]

COMMITTED_PATH = BOOK_DATA / "residual_paths.json"
COMMAND = "python -m layernorm_tutorial.lab.residual.paths"
#: The live check: seed 0 of the 6-block post-LN model without warm-up.
CHECK = {"arrangement": "post-LN", "layers": 6, "schedule": "no warm-up", "seed": 0}
REPLICATION_PATH = "default+compatible"
#: The live re-run may differ from the stored one by this multiple of the measured spread.
TOLERANCE_MULTIPLE = 10
_DIGITS = 4  # significant digits of residual_runs.json (the command's save_results)


def stored_losses(seeds=sweep.SEEDS) -> list[dict]:
    """Every run of the stored sweep trained again in this process (the target of
    ``run_on_paths``): ``[{"arrangement", "layers", "schedule", "seed", "loss"}]``."""
    jobs = sweep._jobs(tuple(seeds), sweep.DEPTHS, tuple(sweep.SCHEDULES),
                       sweep.SCHEDULE_LAYERS)
    runs = stored_results.run_jobs(sweep._trace, jobs, 1, progress=False)
    keys = ("arrangement", "layers", "schedule", "seed", "loss")
    return [{k: r[k] for k in keys} for r in runs]


def _on_paths(target: str, kwargs: dict, paths, desc: str) -> dict:
    """``{path: {"result", "machine"}}``, one fresh process per path, with a progress bar."""
    return numerics_paths.run_on_paths(target, kwargs, paths, with_machine=True, desc=desc)


def measure(paths=None, replication_path: str = REPLICATION_PATH,
            seeds=sweep.SEEDS) -> dict:
    """Both measurements: ``{"tolerance": spread_record, "replication": {...}}``."""
    target = "layernorm_tutorial.lab.residual.sweep:retrain_losses"
    values = {p: r["result"] for p, r in _on_paths(
        target, CHECK, paths, "residual paths: live-check run").items()}
    tolerance = numerics_paths.spread_record(
        "post-LN, 6 blocks, no warm-up, seed 0: loss at each of the 30 steps (nats)",
        target, CHECK, values)
    replicated = _on_paths("layernorm_tutorial.lab.residual.paths:stored_losses",
                           {"seeds": list(seeds)}, [replication_path],
                           "residual paths: replication")[replication_path]
    return {"tolerance": tolerance,
            "replication": {"path": replication_path,
                            "environment": numerics_paths.PATHS[replication_path],
                            "machine": replicated["machine"],
                            "runs": replicated["result"]}}


def build_document(measured: dict, seconds: float | None) -> dict:
    config = {"stored_runs": sweep.COMMITTED_PATH.name, "check": CHECK,
              "tolerance_multiple": TOLERANCE_MULTIPLE,
              "replication_path": measured["replication"]["path"]}
    return {**provenance(COMMAND, config, seconds), **measured}


def replication_table(doc: dict, paths_doc: dict) -> list[dict]:
    """Per verdict of the chapter (:func:`~.sweep.all_verdicts`): the stored and the
    replicated verdict, whether the word is the same and whether the replicated effect lies
    inside the stored interval."""
    again = sweep.all_verdicts({"runs": paths_doc["replication"]["runs"]})
    rows = []
    for label, v in sweep.all_verdicts(doc).items():
        w = again[label]
        rows.append({"label": label, "stored": v, "replicated": w,
                     "same_word": v.word == w.word, "inside": v.low <= w.effect <= v.high})
    return rows


@dataclass(frozen=True)
class LiveCheck:
    """The chapter's live re-run of :data:`CHECK` next to the stored run."""

    stored: np.ndarray
    here: np.ndarray
    spread: float
    allowed: float

    @property
    def difference(self) -> float:
        """Largest relative difference of the loss over the steps, this machine vs file."""
        return float(np.max(np.abs(self.here - self.stored) / np.abs(self.stored)))

    @property
    def within(self) -> bool:
        return self.difference <= self.allowed

    def report(self) -> str:
        c = CHECK
        last = sweep.LAST
        return "\n".join([
            f"{c['arrangement']}, {c['layers']} blocks, {c['schedule']}, seed {c['seed']}:",
            f"  stored run         loss over the last {last} steps "
            f"{self.stored[-last:].mean():.3f} nats",
            f"  this machine's run loss over the last {last} steps "
            f"{self.here[-last:].mean():.3f} nats",
            f"  largest relative difference over the {len(self.here)} steps "
            f"{self.difference:.1e}; allowed {self.allowed:.1e}",
            f"  ({TOLERANCE_MULTIPLE} x the spread across numerics paths, {self.spread:.1e},"
            " + the file's rounding)"])


def live_check(doc: dict, paths_doc: dict) -> LiveCheck:
    """Retrain :data:`CHECK` here and compare its loss curve with the stored run."""
    c = paths_doc["tolerance"]["kwargs"]
    stored = sweep.select(doc, c["arrangement"], c["layers"], c["schedule"])
    stored = [r for r in stored if r["seed"] == c["seed"]]
    if len(stored) != 1:
        raise ValueError(f"no single stored run for {c}")
    here = np.array(sweep.retrain_losses(**c))
    spread = paths_doc["tolerance"]["relative_spread"]
    rounding = 0.5 * 10.0 ** (1 - _DIGITS)
    return LiveCheck(np.array(stored[0]["loss"]), here, spread,
                     TOLERANCE_MULTIPLE * spread + rounding)


def _run(args) -> tuple[dict, str]:
    settings = dict(paths=["native"], seeds=(0,)) if args.tiny else {}
    measured, seconds = stored_results.timed(measure, **settings)
    spread = measured["tolerance"]["relative_spread"]
    return (build_document(measured, seconds),
            f"loss spread {spread:.1e} over {len(measured['tolerance']['values'])} paths, "
            f"{len(measured['replication']['runs'])} runs replicated in {seconds:.0f} s")


def main(argv=None) -> None:
    stored_results.results_command(
        argv, prog=COMMAND, description=__doc__.splitlines()[0],
        default_out=COMMITTED_PATH, tiny_help="smoke run (native path only, seed 0)",
        run=_run, workers=False, digits=_DIGITS)


if __name__ == "__main__":
    main()
