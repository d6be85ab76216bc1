"""``python -m layernorm_tutorial.lab.rnn``: run the RNN chapter's race and store its results.

Options: ``--out PATH`` (default: the book's ``book/data/rnn_race.json``), ``--force`` to
replace an existing file (without it the command refuses before any run), ``--workers N``
single-threaded processes, ``--tiny`` a seconds-long smoke run (one epoch, two arms; needs
``--out``, never writes the book's file).
"""

from __future__ import annotations

from layernorm_tutorial.lab.common.stored_results import results_command, timed
from layernorm_tutorial.lab.rnn import race

TINY = dict(arms=("RNN", "LN-RNN"), epochs=1, lr_grid=(3e-3,), grid_extensions=0)


def _run(args) -> tuple[dict, str]:
    settings = TINY if args.tiny else {}
    result, seconds = timed(race.run_race, workers=args.workers, **settings)
    return (race.build_document(result, seconds, **settings),
            f"{len(result['runs'])} runs in {seconds:.0f} s")


def main(argv=None) -> None:
    results_command(argv, prog=race.COMMAND, description=__doc__.splitlines()[0],
                    default_out=race.COMMITTED_PATH,
                    tiny_help="smoke run (one epoch, two arms)", run=_run)


if __name__ == "__main__":
    main()
