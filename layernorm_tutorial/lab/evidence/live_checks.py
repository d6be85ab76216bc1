"""The evidence chapter's live re-runs, measured on several numerics paths and stored.

A re-run of a stored training run is only bit-exact on the machine and numerics path that
wrote it; elsewhere the last bits of a reduction differ and training amplifies them. So the
chapter prints the *stored* numbers and checks its live re-runs against them at a tolerance
measured here: each re-run is repeated in a fresh process on every path of
:data:`~layernorm_tutorial.lab.common.numerics_paths.PATHS`
(:func:`~layernorm_tutorial.lab.common.numerics_paths.run_on_paths`), and the largest
difference from the stored run over the paths is stored with provenance in
``book/data/evidence_live_checks.json`` (``python -m layernorm_tutorial.lab.evidence.live_checks``).

Three checks (:data:`CHECKS`), each a module-level function returning JSON-able numbers:

- ``reruns`` (:func:`rerun_batch_256`): the ten MLPs at batch 256 and the LN RNN of the first
  reported seed, retrained from their stored specs; per run the largest accuracy difference and
  the largest relative loss difference from the stored record; and the test accuracy of each BN
  model after recalibrating its statistics on its own training images (the recalibration
  result is itself stored here: the main results file never held it);
- ``init_scale`` (:func:`rerun_init_scale`): BN at initialization scale 2, first seed;
- ``hybrid`` (:func:`rerun_hybrid`): BN trunk + LN head, first seed.

The notebook asserts that its live value lies within :func:`tolerance` of the stored one:
:data:`MULTIPLE` times the measured spread, and never less than :data:`FLOOR` (one test image,
the resolution of an accuracy on 449 images).
"""

from __future__ import annotations

import sys
import time

from layernorm_tutorial._cli import interruptible
from layernorm_tutorial.lab.common.stored_results import (
    BOOK_DATA,
    load_results,
    provenance,
    save_results,
)

__all__ = ["CHECKS", "COMMAND", "COMMITTED_PATH", "FLOOR", "MULTIPLE", "rerun_batch_256",
           "rerun_init_scale", "rerun_hybrid", "measure", "deviation", "tolerance",
           "loss_tolerance", "load_live_checks"]

COMMITTED_PATH = BOOK_DATA / "evidence_live_checks.json"
COMMAND = "python -m layernorm_tutorial.lab.evidence.live_checks"
MULTIPLE = 2.0
FLOOR = 1 / 449
_MODULE = "layernorm_tutorial.lab.evidence.live_checks"
CHECKS = {"reruns": f"{_MODULE}:rerun_batch_256",
          "init_scale": f"{_MODULE}:rerun_init_scale",
          "hybrid": f"{_MODULE}:rerun_hybrid"}


def _stored_reruns(doc: dict) -> list[dict]:
    from layernorm_tutorial.lab.evidence.results import find_runs

    return (find_runs(doc, "mlp_batch_size", "bn", 256)
            + find_runs(doc, "mlp_batch_size", "ln", 256) + find_runs(doc, "rnn", "ln", 32)[:1])


def rerun_batch_256() -> dict:
    """Retrain the stored batch-256 MLPs and the first LN RNN; returns ``runs`` (per run:
    ``name``, ``max_acc_diff``, ``max_loss_rel_diff`` from the stored record, ``test_acc``)
    and ``recalibrated`` (per BN seed: test accuracy after :func:`~.runner.
    recalibrate_batch_norm` on that seed's training images)."""
    import torch

    from layernorm_tutorial.lab.evidence import results
    from layernorm_tutorial.lab.evidence.data import load_evidence_data
    from layernorm_tutorial.lab.evidence.runner import (
        RunSpec,
        evaluate,
        recalibrate_batch_norm,
        train_model,
    )

    torch.set_num_threads(1)
    doc = results.load_results()
    runs, recalibrated = [], []
    for stored in _stored_reruns(doc):
        model, fresh = train_model(RunSpec(**stored["spec"]))
        fresh = results.round_floats(fresh)
        check = results.compare_runs(stored, fresh)
        s = stored["spec"]
        runs.append({"name": f"{s['model']} {s['norm']} batch {s['batch_size']} "
                             f"seed {s['seed']}",
                     "max_acc_diff": check["max_acc_diff"],
                     "max_loss_rel_diff": check["max_loss_rel_diff"],
                     "test_acc": fresh["final"]["test_acc"]})
        if s["norm"] == "bn":
            data = load_evidence_data(s["seed"])
            recalibrate_batch_norm(model, data.x_train)
            recalibrated.append(evaluate(model, data.x_test, data.y_test)[1])
    return {"runs": runs, "recalibrated": recalibrated}


def rerun_init_scale() -> dict:
    """BN at initialization scale 2 on the first seed of the side experiment."""
    import torch

    from layernorm_tutorial.lab.evidence import bn_init, side_experiments

    torch.set_num_threads(1)
    init = side_experiments.init_scale_result(side_experiments.load_side_results())
    return {"test_acc": bn_init.init_scale_accuracy("bn", 2.0, seed=init.seeds[0])}


def rerun_hybrid() -> dict:
    """BN trunk + LN head on the first seed of the side experiment."""
    import torch

    from layernorm_tutorial.lab.evidence import combinations, side_experiments

    torch.set_num_threads(1)
    combo = side_experiments.combination_result(side_experiments.load_side_results())
    out = combinations.train_hybrid("BN trunk + LN head", seed=combo.seeds[0])
    return {"test_acc": out["test_acc"]}


def _spread(values: list[float]) -> float:
    return max(values) - min(values)


def measure(paths=None) -> dict:
    """Run every check on every numerics path; returns ``{check: {"paths": {path: result},
    "spread": ...}}`` where ``spread`` holds the largest difference over the paths of each
    number the notebook compares (for ``reruns``: of the differences from the stored runs
    themselves, and of the recalibrated accuracies)."""
    from layernorm_tutorial.lab.common.numerics_paths import run_on_paths

    out = {}
    for name, target in CHECKS.items():
        res = run_on_paths(target, {}, paths)
        vals = list(res.values())
        if name == "reruns":
            spread = {
                "max_acc_diff": max(r["max_acc_diff"] for v in vals for r in v["runs"]),
                "max_loss_rel_diff": max(r["max_loss_rel_diff"] for v in vals
                                         for r in v["runs"]),
                "recalibrated": max(_spread([v["recalibrated"][i] for v in vals])
                                    for i in range(len(vals[0]["recalibrated"]))),
            }
        else:
            spread = {"test_acc": _spread([v["test_acc"] for v in vals])}
        out[name] = {"paths": res, "spread": spread}
    return out


def deviation(live: dict, name: str, stored: float) -> float:
    """The largest difference from ``stored`` over the numerics paths of the check ``name``
    (``init_scale`` or ``hybrid``): the stored runs came from another machine, so the spread
    that matters is the distance of every path from them, not only among the paths."""
    return max(abs(v["test_acc"] - stored) for v in live["checks"][name]["paths"].values())


def loss_tolerance(measured: float) -> float:
    """The relative loss tolerance: :data:`MULTIPLE` x the measured largest relative
    difference (at least 1e-4)."""
    return max(MULTIPLE * float(measured), 1e-4)


def tolerance(measured: float) -> float:
    """The tolerance of a live accuracy check: :data:`MULTIPLE` x the measured spread, at
    least :data:`FLOOR` (one test image)."""
    return max(MULTIPLE * float(measured), FLOOR)


def load_live_checks(path=COMMITTED_PATH) -> dict:
    """The stored measurement (provenance header and ``checks`` checked; a broken file is
    one line naming it and what to do)."""
    return load_results(path, command=COMMAND, sections={"checks": dict})


@interruptible
def main(argv=None) -> int:
    """Measure the live checks and write them (``--out``, default the book's file; no other
    file of the repository). A missing or broken input is one line, exit status 2; Ctrl-C
    prints ``interrupted``, status 130."""
    import argparse

    from layernorm_tutorial._cli import StoredFileError, output_path
    from layernorm_tutorial.lab.common.numerics_paths import PATHS
    from layernorm_tutorial.lab.common.stored_results import output_path_from_args

    parser = argparse.ArgumentParser(prog=COMMAND, description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=output_path, default=None,
                        help="where to write (default: book/data)")
    parser.add_argument("--force", action="store_true", help="replace an existing file")
    args = parser.parse_args(argv)
    path = output_path_from_args(parser, args, COMMITTED_PATH)
    start = time.perf_counter()
    try:
        checks = measure()
    except StoredFileError as err:  # an input of the measurement is missing or broken
        parser.error(str(err))
    config = {"paths": PATHS, "multiple": MULTIPLE, "floor": FLOOR,
              "checks": dict(CHECKS), "native": "the stored values are the native path's"}
    doc = {**provenance(COMMAND, config, time.perf_counter() - start), "checks": checks}
    save_results(doc, path, overwrite=args.force)
    for name, c in checks.items():
        print(f"{name}: spread over {len(c['paths'])} paths {c['spread']}")
    print(f"written to {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
