"""``python -m layernorm_tutorial.lab.evidence``: run the full sweep and write the results file.

Options:

- ``--out PATH``: where to write. Default for the full sweep: the book's committed file
  ``book/data/evidence_results.json``; for ``--tiny``: a scratch file in the temporary folder
  (``TINY_PATH``), never the committed one.
- ``--force``: replace an existing results file (without it the command refuses to start).
- ``--workers N``: parallel single-threaded processes (default 2 on a multi-core machine).
- ``--tiny``: a seconds-long smoke run with capped steps.

Every output path is checked before the sweep starts; the last line says where the results
went.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

from layernorm_tutorial._cli import (
    OutputPathError,
    check_output_path,
    interruptible,
    is_book_file,
    positive_int,
)
from layernorm_tutorial.lab.common.stored_results import refuse_other_book_file
from layernorm_tutorial.lab.evidence.experiments import (
    EXPERIMENTS,
    RATE_RANGES,
    default_workers,
    run_sweep,
    tiny_experiments,
    tiny_rate_ranges,
)
from layernorm_tutorial.lab.evidence.results import COMMITTED_PATH, build_results, save_results

TINY_PATH = Path(tempfile.gettempdir()) / "layernorm_tutorial" / "evidence_results_tiny.json"


def _is_committed_file(path: Path) -> bool:
    """The book's results file, or any other file in ``book/data/``."""
    return path.expanduser().resolve() == COMMITTED_PATH.resolve() or is_book_file(path)


@interruptible
def main(argv=None) -> None:
    parser = argparse.ArgumentParser(prog="python -m layernorm_tutorial.lab.evidence",
                                     description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=None,
                        help=f"results JSON path (default: {COMMITTED_PATH}; with --tiny: "
                             f"{TINY_PATH})")
    parser.add_argument("--force", action="store_true",
                        help="replace the results file if it exists")
    parser.add_argument("--workers", type=positive_int, default=default_workers(),
                        help="worker processes, each single-threaded (>= 1)")
    parser.add_argument("--tiny", action="store_true",
                        help="smoke run: a few steps per run, written to a scratch file")
    args = parser.parse_args(argv)
    if args.tiny and args.out is not None and _is_committed_file(args.out):
        parser.error(f"--out {args.out}: --tiny is a smoke run and never writes the book's "
                     "results file; choose another --out")
    refuse_other_book_file(parser, args.out, COMMITTED_PATH)
    out = args.out or (TINY_PATH if args.tiny else COMMITTED_PATH)
    # The default scratch file of a smoke run may be replaced without --force.
    replace = args.force or (args.tiny and args.out is None)
    try:
        check_output_path(out, force=replace)
    except OutputPathError as err:
        parser.error(str(err))

    experiments = tiny_experiments() if args.tiny else EXPERIMENTS
    ranges = tiny_rate_ranges() if args.tiny else RATE_RANGES
    start = time.perf_counter()
    sweep = run_sweep(experiments, workers=args.workers, progress=True, rate_ranges=ranges)
    seconds = time.perf_counter() - start
    doc = build_results(sweep, experiments, seconds, rate_ranges=ranges, workers=args.workers)
    path = save_results(doc, out, overwrite=replace)
    kind = "smoke run (not the book's results)" if args.tiny else "sweep"
    # The bar's total grows phase by phase (rungs and seeds are added as the sweep learns
    # which rates win), so its first totals are not the number of runs; say so.
    print(f"{kind}: {sweep['trained']} runs trained in {seconds:.0f} s (the progress bar's "
          f"final count; its total grew as each phase added runs); results written to "
          f"{path.resolve()}")


if __name__ == "__main__":
    main()
