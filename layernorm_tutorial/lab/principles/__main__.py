"""``python -m layernorm_tutorial.lab.principles [EXPERIMENT]``: the principles chapter's runs.

``EXPERIMENT`` is one of

- ``ln-vs-he`` (default): LayerNorm against He init, judged
  (``book/data/principles_ln_vs_he.json``);
- ``training``: the nine-run demonstration and the init-scale sweep, with the spread of
  their first epoch over the numerics paths and every path's final outcomes
  (``book/data/principles_training.json``);
- ``replicate``: the ln-vs-he reported seeds re-run on a second numerics path
  (``book/data/principles_ln_vs_he_replication.json``).

Options (before or after the experiment): ``--out PATH`` (default: the book's file),
``--force`` to replace an existing file (without it the command refuses before any run),
``--workers N``, ``--tiny`` a seconds-long smoke run (needs ``--out``, never writes the book's
file). ``replicate`` re-runs the stored seeds in full: it has no ``--tiny`` and no
``--workers``. A progress bar shows the jobs left.
"""

from __future__ import annotations

import argparse

from layernorm_tutorial.lab.common.stored_results import (
    add_results_options,
    default_workers,
    load_results,
    provenance,
    run_jobs,
    run_results_command,
    timed,
)
from layernorm_tutorial.lab.principles import ln_vs_he, stored_training

EXPERIMENTS = ("ln-vs-he", "training", "replicate")


def _ln_vs_he(args):
    settings = dict(lr_grid=(0.02,), depth=2, epochs=1) if args.tiny else {}
    config = {"lr_grid": list(settings.get("lr_grid", ln_vs_he.LR_GRID)),
              "depth": settings.get("depth", 8), "epochs": settings.get("epochs", 15),
              "n_reported": 5, "n_tuning": 2, "first_seed": 0, "threads": 1,
              "tuning_data": "validation images in no reported seed's test set"}
    result, seconds = timed(ln_vs_he.run_comparison, workers=args.workers, **settings)
    runs = 2 * len(result["reported_seeds"]) + 2 * len(result["tuning_seeds"]) * len(
        result["lr_grid"])
    return ln_vs_he.build_document(result, seconds, config), f"{runs} runs in {seconds:.0f} s"


def _training(args):
    epochs = 1 if args.tiny else None
    paths = ("native", "default+compatible") if args.tiny else None

    def run():
        from layernorm_tutorial.lab.common import numerics_paths as npaths

        parts = run_jobs(_training_job, [(job, epochs) for job in stored_training.JOBS],
                         args.workers, desc="principles: stored run")
        runs = stored_training._assemble(parts)
        target = f"{stored_training.__name__}:first_epochs"
        kwargs = {"epochs": stored_training.CHECK_EPOCHS}
        spread = npaths.spread_record(
            "mean training loss of each run in its first epoch(s)", target, kwargs,
            npaths.run_on_paths(target, kwargs, paths))
        finals = run_jobs(_final_on_path, [(p, epochs) for p in (paths or npaths.PATHS)],
                          args.workers, desc="principles: every path, full budget")
        return {"runs": runs, "check": {"epochs": stored_training.CHECK_EPOCHS,
                                        "factor": stored_training.TOLERANCE_FACTOR,
                                        "floor": stored_training.TOLERANCE_FLOOR,
                                        "paths": spread},
                "outcomes_on_paths": dict(finals)}

    result, seconds = timed(run)
    config = {"demo": stored_training.DEMO, "sweep": stored_training.SWEEP,
              "trained_accuracy": stored_training.TRAINED_ACCURACY, "threads": 1,
              "tiny": bool(args.tiny)}
    doc = {**provenance(stored_training.COMMAND, config, seconds), **result}
    return doc, f"69 runs, the check on every path, in {seconds:.0f} s"


def _training_job(job_epochs):
    job, epochs = job_epochs
    return stored_training.run_job(job, epochs)


def _final_on_path(path_epochs):
    """``(path, final test accuracy of every run)`` on one numerics path."""
    from layernorm_tutorial.lab.common.numerics_paths import run_on_paths

    path, epochs = path_epochs
    target = f"{stored_training.__name__}:final_accuracies"
    return path, run_on_paths(target, {"epochs": epochs}, [path])[path]


def _replicate(args):
    original = load_results(ln_vs_he.COMMITTED_PATH)
    result, seconds = timed(ln_vs_he.replicate, doc=original)
    config = {"numerics_path": result["numerics_path"], "seeds": original["reported_seeds"],
              "of": ln_vs_he.COMMAND}
    doc = {**provenance(ln_vs_he.REPLICATION_COMMAND, config, seconds), **result}
    return doc, f"{2 * len(original['reported_seeds'])} runs in {seconds:.0f} s"


def main(argv=None) -> None:
    runs = {"ln-vs-he": (_ln_vs_he, ln_vs_he.COMMITTED_PATH),
            "training": (_training, stored_training.COMMITTED_PATH),
            "replicate": (_replicate, ln_vs_he.REPLICATION_PATH)}
    parser = argparse.ArgumentParser(
        prog="python -m layernorm_tutorial.lab.principles",
        description=__doc__.splitlines()[0],
        epilog="book files: " + "; ".join(f"{e}: {out.name}" for e, (_, out) in runs.items()))
    parser.add_argument("experiment", nargs="?", choices=EXPERIMENTS, default="ln-vs-he",
                        help="ln-vs-he (default): LayerNorm against He init, judged; training: "
                             "the nine-run demonstration and the init-scale sweep on every "
                             "numerics path; replicate: the ln-vs-he reported seeds re-run on "
                             "a second numerics path")
    add_results_options(parser, default_out="the experiment's file in book/data",
                        tiny_help="smoke run (ln-vs-he: 2 layers, 1 epoch, one rate; "
                                  "training: 1 epoch of every run, two numerics paths; "
                                  "replicate has none)")
    parser.set_defaults(workers=None)  # so that a --workers given to replicate is seen
    args = parser.parse_args(argv)
    if args.experiment == "replicate":
        for given, flag in ((args.tiny, "--tiny"), (args.workers is not None, "--workers")):
            if given:
                parser.error(f"{flag}: replicate re-runs the stored seeds in full, in one "
                             f"process on a second numerics path; it takes no {flag}")
    if args.workers is None:
        args.workers = default_workers()
    run, out = runs[args.experiment]
    run_results_command(parser, args, default_out=out, run=run,
                        digits=9 if args.experiment == "training" else 5)


if __name__ == "__main__":
    main()
