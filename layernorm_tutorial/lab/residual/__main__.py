"""``python -m layernorm_tutorial.lab.residual``: run the residual chapter's training runs.

Options: ``--out PATH`` (default: the book's ``book/data/residual_runs.json``), ``--force``
to replace an existing file (without it the command refuses before any run), ``--workers N``
single-threaded processes, ``--tiny`` a seconds-long smoke run (seed 0, 2 blocks, two schedules;
needs ``--out``, never writes the book's file).
"""

from __future__ import annotations

from layernorm_tutorial.lab.common.stored_results import results_command, timed
from layernorm_tutorial.lab.residual import sweep

TINY = dict(seeds=(0,), depths=(2,), schedule_layers=2, schedules=("no warm-up", "warm-up"))


def _run(args) -> tuple[dict, str]:
    settings = TINY if args.tiny else {}
    result, seconds = timed(sweep.run_sweep, workers=args.workers, **settings)
    doc = sweep.build_document(result, seconds, seeds=settings.get("seeds", sweep.SEEDS))
    return doc, f"{len(result['runs'])} runs in {seconds:.0f} s"


def main(argv=None) -> None:
    results_command(argv, prog=sweep.COMMAND, description=__doc__.splitlines()[0],
                    default_out=sweep.COMMITTED_PATH,
                    tiny_help="smoke run (seed 0, 2 blocks, two schedules)", run=_run,
                    digits=4)


if __name__ == "__main__":
    main()
