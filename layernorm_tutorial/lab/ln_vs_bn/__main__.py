"""``python -m layernorm_tutorial.lab.ln_vs_bn``: how far the online-learning runs move with
the CPU's arithmetic.

The chapter trains its online-learning runs live, in float64. This command runs the same
runs (``streaming.path_summary``) on every numerics path of ``lab.common.numerics_paths``
and stores the spread, with provenance, in ``book/data/ln_vs_bn_online_paths.json``; the
notebook compares its live run with the stored one at that measured tolerance.

Options: ``--out PATH`` (default: the book's file), ``--force`` to replace it, ``--workers N``
(paths measured at once), ``--tiny`` (two paths, float32; needs ``--out``).
"""

from __future__ import annotations

from layernorm_tutorial.lab.common.stored_results import (
    provenance,
    results_command,
    run_jobs,
    timed,
)
from layernorm_tutorial.lab.ln_vs_bn.streaming import PATHS_COMMAND as COMMAND
from layernorm_tutorial.lab.ln_vs_bn.streaming import PATHS_FILE as COMMITTED_PATH

TARGET = "layernorm_tutorial.lab.ln_vs_bn.streaming:path_summary"


def _on_path(job):
    from layernorm_tutorial.lab.common.numerics_paths import run_on_paths

    path, float64 = job
    return path, run_on_paths(TARGET, {"float64": float64}, [path])[path]


def _run(args):
    from layernorm_tutorial.lab.common import numerics_paths as npaths

    paths = ("native", "default+compatible") if args.tiny else tuple(npaths.PATHS)
    float64 = not args.tiny

    def measure():
        results = dict(run_jobs(_on_path, [(p, float64) for p in paths], args.workers,
                                desc="ln_vs_bn: online runs on each path"))
        return npaths.spread_record(
            "online learning: accuracies and the first test images' final logits",
            TARGET, {"float64": float64}, results)

    record, seconds = timed(measure)
    config = {"float64": float64, "paths": list(paths), "threads": 1}
    doc = {**provenance(COMMAND, config, seconds), "online": record}
    return doc, f"online runs on {len(paths)} paths in {seconds:.0f} s"


def main(argv=None) -> None:
    results_command(argv, prog=COMMAND, description=__doc__.splitlines()[0],
                    default_out=COMMITTED_PATH, tiny_help="two paths, float32", run=_run,
                    digits=15)


if __name__ == "__main__":
    main()
