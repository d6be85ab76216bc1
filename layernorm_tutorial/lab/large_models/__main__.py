"""``python -m layernorm_tutorial.lab.large_models``: recompute the chapter's stored results.

Options: ``--out PATH`` (default: the book's ``book/data/large_models_results.json``),
``--force`` to replace an existing file (refused otherwise, before any work starts),
``--workers N`` to run sections side by side, ``--sections a,b`` to compute only some
sections (for a quick check; the book needs all).
"""

from __future__ import annotations

import argparse
from pathlib import Path

from layernorm_tutorial._cli import OutputPathError, check_output_path, positive_int
from layernorm_tutorial.lab.large_models.results import (
    COMMITTED_PATH,
    SECTIONS,
    build_results,
    save_results,
)


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(prog="python -m layernorm_tutorial.lab.large_models",
                                     description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=COMMITTED_PATH, help="results JSON path")
    parser.add_argument("--force", action="store_true", help="replace the file if it exists")
    parser.add_argument("--workers", type=positive_int, default=1,
                        help="processes running sections side by side (each one thread)")
    parser.add_argument("--sections", default=None,
                        help=f"comma-separated subset of {', '.join(SECTIONS)}")
    args = parser.parse_args(argv)
    sections = None
    if args.sections:
        sections = [s.strip() for s in args.sections.split(",") if s.strip()]
        unknown = [s for s in sections if s not in SECTIONS]
        if unknown:
            parser.error(f"--sections: unknown {', '.join(unknown)}; "
                         f"expected some of {', '.join(SECTIONS)}")
    try:
        check_output_path(args.out, force=args.force)
    except OutputPathError as err:
        parser.error(str(err))
    results = build_results(sections, workers=args.workers)
    path = save_results(results, args.out)
    print(f"results written to {path.resolve()}")


if __name__ == "__main__":
    main()
