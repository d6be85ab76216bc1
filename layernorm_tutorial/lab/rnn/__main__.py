"""``python -m layernorm_tutorial.lab.rnn``: run the RNN chapter's race and store its results.

Options: ``--out PATH`` (default: the book's ``book/data/rnn_race.json``), ``--force`` to
replace an existing file (without it the command refuses before any run), ``--workers N``
single-threaded processes, ``--tiny`` a seconds-long smoke run (one epoch, two arms; needs
``--out``, never writes the book's file).
"""

from __future__ import annotations

import argparse
from pathlib import Path

from layernorm_tutorial._cli import positive_int
from layernorm_tutorial.lab.common.stored_results import output_path_from_args, save_results
from layernorm_tutorial.lab.rnn import race


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(prog=race.COMMAND, description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=None,
                        help=f"results JSON path (default: {race.COMMITTED_PATH})")
    parser.add_argument("--force", action="store_true", help="replace an existing file")
    parser.add_argument("--workers", type=positive_int, default=race.default_workers(),
                        help="worker processes, each single-threaded (>= 1)")
    parser.add_argument("--tiny", action="store_true",
                        help="smoke run (one epoch, two arms); requires --out")
    args = parser.parse_args(argv)
    if args.tiny and args.out is None:
        parser.error("--tiny needs --out: a smoke run never writes the book's results file")
    out = output_path_from_args(parser, args, race.COMMITTED_PATH)
    settings = (dict(arms=("RNN", "LN-RNN"), epochs=1, lr_grid=(3e-3,), grid_extensions=0)
                if args.tiny else {})
    result, seconds = race.timed_race(workers=args.workers, **settings)
    doc = race.build_document(result, seconds, **settings)
    path = save_results(doc, out, overwrite=args.force)
    print(f"{len(result['runs'])} runs in {seconds:.0f} s; results written to {path.resolve()}")


if __name__ == "__main__":
    main()
