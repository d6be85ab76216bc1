"""Stored results files for chapters whose runs take minutes: write once, read in the notebook.

A chapter that judges a comparison on many seeds cannot train them inside the notebook (the
budget is well under a minute). Its runs live in a package command that writes a JSON file
in ``book/data/``; the notebook reads it. The file carries its own provenance: the command
that made it, the versions of Python, torch, NumPy and this package, the configuration and
the wall time. This module holds what those commands share:

- :func:`round_floats`: floats to a few significant digits (small files, stable diffs);
- :func:`provenance`: the header every file starts with, including the numerics path that
  produced it (:func:`~layernorm_tutorial.lab.common.numerics_paths.machine_info`: CPU model,
  torch's CPU capability, MKL/oneDNN versions, threads, date, commit);
- :func:`save_results` / :func:`load_results`: atomic write that never replaces a file unless
  asked (``--force``), and a read that checks the header;
- :func:`output_path_from_args`: the ``--out``/``--force`` rule of the package's commands,
  checked before any work starts;
- :func:`results_command`: the whole command around a run (``--out``, ``--force``,
  ``--workers``, ``--tiny``; refuse before any work, write with provenance, print a summary);
- :func:`run_jobs`, :func:`default_workers`, :func:`timed`, :func:`require_known_names`: what the
  runs behind such commands share (single-threaded jobs in worker processes with a progress bar
  and the time left, wall time, names checked against a table).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import sys
import time
from collections.abc import Callable, Iterable
from concurrent.futures import ProcessPoolExecutor, as_completed
from pathlib import Path

from layernorm_tutorial._cli import (
    OutputPathError,
    check_output_path,
    positive_int,
    write_text_atomically,
)
from layernorm_tutorial.lab.common.numerics_paths import machine_info

__all__ = ["BOOK_DATA", "require_known_names", "default_workers", "load_results",
           "output_path_from_args", "provenance", "results_command", "round_floats",
           "run_jobs", "save_results", "timed"]

BOOK_DATA = Path(__file__).resolve().parents[3] / "book" / "data"
HEADER_KEYS = ("command", "versions", "config", "seconds")


def round_floats(obj, digits: int = 5):
    """Every float in a nested structure rounded to ``digits`` significant digits; non-finite
    floats become ``None`` (JSON has no NaN). Tuples become lists."""
    if isinstance(obj, float):
        return float(f"{obj:.{digits}g}") if math.isfinite(obj) else None
    if isinstance(obj, dict):
        return {k: round_floats(v, digits) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [round_floats(v, digits) for v in obj]
    return obj


def provenance(command: str, config: dict, seconds: float | None) -> dict:
    """The header of a results file: ``command``, ``versions``, ``config``, ``seconds`` and
    ``machine`` (the numerics path: :func:`~.numerics_paths.machine_info`)."""
    import numpy
    import torch

    from layernorm_tutorial import __version__

    versions = {"layernorm_tutorial": __version__, "torch": torch.__version__,
                "numpy": numpy.__version__, "python": platform.python_version()}
    return {"command": command, "versions": versions, "config": config, "seconds": seconds,
            "machine": machine_info()}


def save_results(doc: dict, path: str | Path, *, overwrite: bool = False,
                 digits: int = 5) -> Path:
    """Round ``doc`` and write it as JSON to ``path`` atomically.

    Raises :class:`~layernorm_tutorial._cli.OutputPathError` if ``path`` exists and
    ``overwrite`` is False, or cannot be written; ``ValueError`` if the header is missing.
    """
    missing = [k for k in HEADER_KEYS if k not in doc]
    if missing:
        raise ValueError(f"doc lacks the provenance keys {missing}: build it with provenance()")
    path = check_output_path(path, force=overwrite)
    text = json.dumps(round_floats(doc, digits), indent=1, sort_keys=False) + "\n"
    return write_text_atomically(path, text)


def load_results(path: str | Path) -> dict:
    """Read a results file written by :func:`save_results`; ``FileNotFoundError`` names the
    file and the command that makes it, ``ValueError`` a file without provenance."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"no results file at {path}: run the command named in the "
                                "chapter to make it")
    doc = json.loads(path.read_text())
    missing = [k for k in HEADER_KEYS if k not in doc]
    if missing:
        raise ValueError(f"{path}: not a results file (lacks {missing})")
    return doc


def output_path_from_args(parser: argparse.ArgumentParser, args, default: Path) -> Path:
    """The ``--out`` path (``default`` if not given), checked before any work starts:
    an existing file needs ``--force``; a folder or an unwritable place stops the command
    with one line (``parser.error``)."""
    out = args.out or default
    try:
        return check_output_path(out, force=args.force)
    except OutputPathError as err:
        parser.error(str(err))


def default_workers() -> int:
    """Two worker processes on a machine with at least two cores, otherwise one."""
    return 2 if (os.cpu_count() or 1) >= 2 else 1


def _show_progress(progress: bool | None) -> bool:
    """A bar on the terminal of a command; none inside a notebook's kernel (its stored
    outputs must not change) unless asked."""
    if progress is not None:
        return bool(progress)
    return "ipykernel" not in sys.modules


def run_jobs(fn: Callable, jobs: Iterable, workers: int = 1, *, desc: str | None = None,
             progress: bool | None = None) -> list:
    """``[fn(job) for job in jobs]``, in order; in ``workers`` processes when ``workers > 1``
    (``fn`` must then be a module-level function, and sets its own thread count).

    A tqdm bar (on stderr) counts finished jobs and estimates the time left; its postfix
    names the worker processes. It is shown by default except inside a notebook kernel
    (``progress=True``/``False`` decides).
    """
    jobs = list(jobs)
    bar = None
    if _show_progress(progress) and jobs:
        from tqdm.auto import tqdm

        bar = tqdm(total=len(jobs), desc=desc or getattr(fn, "__name__", "jobs"), unit="job",
                   file=sys.stderr, dynamic_ncols=True)
        bar.set_postfix_str(f"{max(1, workers)} worker{'s' if workers > 1 else ''}")
    try:
        if workers <= 1:
            results = []
            for job in jobs:
                results.append(fn(job))
                if bar is not None:
                    bar.update(1)
            return results
        results = [None] * len(jobs)
        with ProcessPoolExecutor(max_workers=workers) as pool:
            futures = {pool.submit(fn, job): k for k, job in enumerate(jobs)}
            for future in as_completed(futures):
                results[futures[future]] = future.result()
                if bar is not None:
                    bar.update(1)
        return results
    finally:
        if bar is not None:
            bar.close()


def timed(fn: Callable, **kwargs) -> tuple[object, float]:
    """``(fn(**kwargs), wall seconds)``."""
    start = time.perf_counter()
    result = fn(**kwargs)
    return result, time.perf_counter() - start


def require_known_names(names: Iterable, known, what: str) -> None:
    """``ValueError`` naming ``what`` and the allowed names for the first of ``names`` that is
    not in ``known``."""
    for name in names:
        if name not in known:
            raise ValueError(f"{what} must be names from {sorted(known)}, got {name!r}")


def results_command(argv, *, prog: str, description: str, default_out: Path, tiny_help: str,
                    run: Callable[[argparse.Namespace], tuple[dict, str]],
                    workers: bool = True, digits: int = 5) -> Path:
    """The package's "run it and store the results" command.

    Options: ``--out PATH`` (default ``default_out``, the book's file), ``--force`` to replace
    an existing file, ``--workers N`` (if ``workers``; default :func:`default_workers`) and
    ``--tiny`` (a smoke run; needs ``--out``, so it never writes the book's file). The output
    path is checked before any work starts; then ``run(args)`` returns ``(doc, summary)``:
    the document (with its :func:`provenance` header) and a few words on what ran. The
    document is written with :func:`save_results` (``digits`` significant digits) and
    ``"<summary>; results written to <path>"`` printed. Returns the path written.
    """
    parser = argparse.ArgumentParser(prog=prog, description=description)
    parser.add_argument("--out", type=Path, default=None,
                        help=f"results JSON path (default: {default_out})")
    parser.add_argument("--force", action="store_true", help="replace an existing file")
    if workers:
        parser.add_argument("--workers", type=positive_int, default=default_workers(),
                            help="worker processes, each single-threaded (>= 1)")
    parser.add_argument("--tiny", action="store_true", help=f"{tiny_help}; requires --out")
    args = parser.parse_args(argv)
    if args.tiny and args.out is None:
        parser.error("--tiny needs --out: a smoke run never writes the book's results file")
    out = output_path_from_args(parser, args, default_out)
    doc, summary = run(args)
    path = save_results(doc, out, overwrite=args.force, digits=digits)
    print(f"{summary}; results written to {path.resolve()}")
    return path
