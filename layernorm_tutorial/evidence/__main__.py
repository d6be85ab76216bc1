"""``python -m layernorm_tutorial.evidence``: run the full sweep and write the results file.

Options: ``--out PATH`` (default ``book/data/evidence_results.json``), ``--workers N``
(parallel single-threaded processes, default 2 on a multi-core machine), ``--tiny`` (a
seconds-long smoke run with capped steps, written to ``--out``).
"""

from __future__ import annotations

import argparse
import time

from .experiments import EXPERIMENTS, default_workers, run_sweep, tiny_experiments
from .results import DEFAULT_PATH, build_results, save_results


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(prog="python -m layernorm_tutorial.evidence",
                                     description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=str(DEFAULT_PATH), help="results JSON path")
    parser.add_argument("--workers", type=int, default=default_workers(),
                        help="worker processes (each single-threaded)")
    parser.add_argument("--tiny", action="store_true", help="smoke run: a few steps per run")
    args = parser.parse_args(argv)
    experiments = tiny_experiments() if args.tiny else EXPERIMENTS
    start = time.perf_counter()
    sweep = run_sweep(experiments, workers=args.workers, progress=True)
    seconds = time.perf_counter() - start
    path = save_results(build_results(sweep, experiments, seconds), args.out)
    print(f"{len(sweep['runs'])} runs in {seconds:.0f} s -> {path}")


if __name__ == "__main__":
    main()
