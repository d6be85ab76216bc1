"""``python -m layernorm_tutorial.lab.large_models``: recompute the chapter's stored results.

Options: ``--out PATH`` (default: the book's ``book/data/large_models_results.json``),
``--force`` to replace an existing file (refused otherwise, before any work starts),
``--workers N`` worker processes for the training runs (default: 2 on a machine with two
cores or more), ``--sections a,b`` to compute only some sections (for a quick check; the
book needs all), ``--update`` to keep the file's other sections. ``--sections`` without
``--update`` never replaces a file that holds other sections (it would drop them). A progress
bar counts the jobs and shows the time left; the timing section then runs alone. User errors
exit with status 2, Ctrl-C with ``interrupted`` and status 130.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from layernorm_tutorial._cli import (
    OutputPathError,
    StoredFileError,
    check_output_path,
    interruptible,
    positive_int,
)
from layernorm_tutorial.lab.common.stored_results import default_workers, refuse_other_book_file
from layernorm_tutorial.lab.large_models.results import (
    COMMITTED_PATH,
    SECTIONS,
    build_results,
    load_results,
    save_results,
)


def _sections_kept_elsewhere(path: Path, sections: list[str]) -> list[str]:
    """The sections of the results file at ``path`` (if any, and readable) not in
    ``sections``: what writing only ``sections`` over it would drop."""
    if not path.is_file():
        return []
    try:
        doc = load_results(path, complete=False)
    except StoredFileError:  # a broken file: nothing in it to keep
        return []
    return [s for s in SECTIONS if s in doc and s not in sections]


@interruptible
def main(argv=None) -> None:
    parser = argparse.ArgumentParser(prog="python -m layernorm_tutorial.lab.large_models",
                                     description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=COMMITTED_PATH, help="results JSON path")
    parser.add_argument("--force", action="store_true", help="replace the file if it exists")
    parser.add_argument("--workers", type=positive_int, default=default_workers(),
                        help="worker processes for the training runs (each one thread)")
    parser.add_argument("--update", action="store_true",
                        help="keep the other sections of the existing --out file "
                             "(needs --force and --sections)")
    parser.add_argument("--sections", default=None,
                        help=f"comma-separated subset of {', '.join(SECTIONS)}")
    args = parser.parse_args(argv)
    sections = None
    if args.sections is not None:
        sections = [s.strip() for s in args.sections.split(",") if s.strip()]
        if not sections:
            parser.error(f"--sections: no section given ({args.sections!r}); expected some "
                         f"of {', '.join(SECTIONS)}")
        unknown = [s for s in sections if s not in SECTIONS]
        if unknown:
            parser.error(f"--sections: unknown {', '.join(unknown)}; "
                         f"expected some of {', '.join(SECTIONS)}")
    refuse_other_book_file(parser, args.out, COMMITTED_PATH)
    try:
        check_output_path(args.out, force=args.force)
    except OutputPathError as err:
        parser.error(str(err))
    previous = None
    if args.update:
        if not (args.force and sections):
            parser.error("--update needs --force and --sections")
        try:
            previous = load_results(args.out, complete=False)
        except StoredFileError as err:
            parser.error(f"--update reads --out first: {err}")
    elif sections:
        dropped = _sections_kept_elsewhere(args.out, sections)
        if dropped:
            parser.error(f"--sections without --update would drop the other {len(dropped)} "
                         f"sections of {args.out} ({', '.join(dropped)}); add --update")
    try:
        results = build_results(sections, workers=args.workers, previous=previous)
    except StoredFileError as err:  # a stored file the runs read is missing or broken
        parser.error(str(err))
    path = save_results(results, args.out, overwrite=args.force)
    print(f"results written to {path.resolve()}")


if __name__ == "__main__":
    main()
