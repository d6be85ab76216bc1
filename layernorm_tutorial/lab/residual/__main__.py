"""``python -m layernorm_tutorial.lab.residual``: run the residual chapter's training runs.

Options: ``--out PATH`` (default: the book's ``book/data/residual_runs.json``), ``--force``
to replace an existing file (without it the command refuses before any run), ``--workers N``
single-threaded processes, ``--tiny`` a seconds-long smoke run (seed 0, 2 blocks, two schedules;
needs ``--out``, never writes the book's file).
"""

from __future__ import annotations

import argparse
from pathlib import Path

from layernorm_tutorial._cli import positive_int
from layernorm_tutorial.lab.common.stored_results import output_path_from_args, save_results
from layernorm_tutorial.lab.residual import sweep


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(prog=sweep.COMMAND, description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=None,
                        help=f"results JSON path (default: {sweep.COMMITTED_PATH})")
    parser.add_argument("--force", action="store_true", help="replace an existing file")
    parser.add_argument("--workers", type=positive_int, default=sweep.default_workers(),
                        help="worker processes, each single-threaded (>= 1)")
    parser.add_argument("--tiny", action="store_true",
                        help="smoke run (seed 0, 2 blocks, two schedules); requires --out")
    args = parser.parse_args(argv)
    if args.tiny and args.out is None:
        parser.error("--tiny needs --out: a smoke run never writes the book's results file")
    out = output_path_from_args(parser, args, sweep.COMMITTED_PATH)
    settings = (dict(seeds=(0,), depths=(2,), schedule_layers=2,
                     schedules=("no warm-up", "warm-up"))
                if args.tiny else {})
    result, seconds = sweep.timed_sweep(workers=args.workers, **settings)
    doc = sweep.build_document(result, seconds, seeds=settings.get("seeds", sweep.SEEDS))
    path = save_results(doc, out, overwrite=args.force, digits=4)
    print(f"{len(result['runs'])} runs in {seconds:.0f} s; results written to {path.resolve()}")


if __name__ == "__main__":
    main()
