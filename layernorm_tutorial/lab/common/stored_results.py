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
  asked (``--force``), and a read that checks the header and the main sections (a broken
  file is one line naming it and the command that remakes it, :data:`BOOK_COMMANDS`) and
  refuses a smoke run (``"tiny": true`` in its ``config``) found in the book's folder;
- :func:`output_path_from_args`: the ``--out``/``--force`` rule of the package's commands,
  checked before any work starts;
- :func:`results_command` (:func:`add_results_options` and :func:`run_results_command`
  for a command with more arguments): the whole command around a run (``--out``, ``--force``,
  ``--workers``, ``--tiny``; refuse before any work, write with provenance, print a summary;
  a smoke run never writes the book's file, not even with ``--force``);
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
from collections.abc import Callable, Iterable, Mapping
from concurrent.futures import ProcessPoolExecutor, as_completed
from pathlib import Path

from layernorm_tutorial._cli import (
    BOOK_DATA,
    OutputPathError,
    StoredFileError,
    StoredFileMissing,
    check_not_a_source,
    check_output_path,
    interruptible,
    is_book_file,
    output_path,
    positive_int,
    read_json_document,
    same_file,
    write_text_atomically,
)
from layernorm_tutorial.lab.common.numerics_paths import machine_info

__all__ = ["BOOK_COMMANDS", "BOOK_DATA", "require_known_names", "default_workers",
           "add_results_options", "is_smoke_run", "load_results", "MAIN_SECTIONS",
           "output_path_from_args", "provenance", "refuse_other_book_file", "results_command",
           "run_results_command", "round_floats", "run_jobs", "save_results", "timed"]

HEADER_KEYS = ("command", "versions", "config", "seconds")
#: The command that writes each of the lab's files in ``book/data/`` (named in the errors
#: of a loader that finds the file missing or broken).
BOOK_COMMANDS = {
    "evidence_results.json": "python -m layernorm_tutorial.lab.evidence",
    "evidence_side_results.json": "python -m layernorm_tutorial.lab.evidence.side_experiments",
    "evidence_live_checks.json": "python -m layernorm_tutorial.lab.evidence.live_checks",
    "evidence_rejudged.json": "python -m layernorm_tutorial.lab.evidence.rejudge",
    "large_models_results.json": "python -m layernorm_tutorial.lab.large_models",
    "ln_vs_bn_online_paths.json": "python -m layernorm_tutorial.lab.ln_vs_bn",
    "principles_ln_vs_he.json": "python -m layernorm_tutorial.lab.principles",
    "principles_ln_vs_he_replication.json":
        "python -m layernorm_tutorial.lab.principles replicate",
    "principles_training.json": "python -m layernorm_tutorial.lab.principles training",
    "residual_runs.json": "python -m layernorm_tutorial.lab.residual",
    "residual_paths.json": "python -m layernorm_tutorial.lab.residual.paths",
    "rnn_race.json": "python -m layernorm_tutorial.lab.rnn",
    "rnn_paths.json": "python -m layernorm_tutorial.lab.rnn.paths",
    # the confirmatory runs on fresh seeds (lab.confirmatory.runs.PLANS: file -> plan)
    "evidence_confirmatory.json": "python -m layernorm_tutorial.lab.confirmatory evidence",
    "evidence_side_confirmatory.json":
        "python -m layernorm_tutorial.lab.confirmatory evidence-side",
    "large_models_confirmatory.json":
        "python -m layernorm_tutorial.lab.confirmatory large_models",
    "large_models_qk_confirmatory.json":
        "python -m layernorm_tutorial.lab.confirmatory large_models_qk",
    "principles_ln_vs_he_confirmatory.json":
        "python -m layernorm_tutorial.lab.confirmatory principles",
    "residual_runs_confirmatory.json": "python -m layernorm_tutorial.lab.confirmatory residual",
    "rnn_race_confirmatory.json": "python -m layernorm_tutorial.lab.confirmatory rnn",
}


#: The main sections each of the lab's files in ``book/data/`` must hold besides the header
#: (:func:`load_results` checks them whatever ``sections`` its caller names: an incomplete
#: file is one line naming it, not a ``KeyError`` in a notebook). ``large_models_results.json``
#: is not here: a ``--sections`` run writes part of it, and its loader checks the rest.
MAIN_SECTIONS: dict[str, dict[str, type]] = {
    "evidence_results.json": {"runs": list, "selected_lr": list},
    "evidence_confirmatory.json": {"runs": list, "selected_lr": list},
    "evidence_side_results.json": {"init_scale": dict, "combinations": dict},
    "evidence_side_confirmatory.json": {"init_scale": dict, "combinations": dict},
    "evidence_live_checks.json": {"checks": dict},
    "evidence_rejudged.json": {"items": list},
    "large_models_confirmatory.json": {"comparisons": dict, "deepnorm": dict},
    "large_models_qk_confirmatory.json": {"qk_norm": dict},
    "ln_vs_bn_online_paths.json": {"online": dict},
    "principles_ln_vs_he.json": {"validation_accuracy": dict, "accuracy": dict},
    "principles_ln_vs_he_confirmatory.json": {"validation_accuracy": dict, "accuracy": dict},
    "principles_ln_vs_he_replication.json": {"original": dict, "accuracy": dict},
    "principles_training.json": {"runs": dict},
    "residual_runs.json": {"runs": list},
    "residual_runs_confirmatory.json": {"runs": list},
    "residual_paths.json": {"replication": dict},
    "rnn_race.json": {"runs": list, "selected_lr": dict},
    "rnn_race_confirmatory.json": {"runs": list, "selected_lr": dict},
    "rnn_paths.json": {"dynamics": dict, "replication": dict},
}


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


def is_smoke_run(doc: dict) -> bool:
    """True for a document written by a ``--tiny`` run (``"tiny": true`` in its config)."""
    config = doc.get("config")
    return isinstance(config, dict) and config.get("tiny") is True


def load_results(path: str | Path, *, command: str | None = None,
                 sections: Iterable[str] | Mapping[str, type] = ()) -> dict:
    """Read a results file written by :func:`save_results`, its shape checked first.

    ``command`` makes the file (default: the one :data:`BOOK_COMMANDS` lists for its name);
    ``sections``: the main keys it must hold besides the provenance header (a mapping also
    gives their types, e.g. ``{"items": list}``), added to those :data:`MAIN_SECTIONS` lists
    for a file of that name. Raises
    :class:`~layernorm_tutorial._cli.StoredFileMissing` (a ``FileNotFoundError``) naming the
    file and the command that makes it, :class:`~layernorm_tutorial._cli.StoredFileError` (a
    ``ValueError``; one line naming the file and what to do) for a file that is not JSON, not
    an object, lacks the header or a section, or is a smoke run (``--tiny``) found in
    ``book/data/``.
    """
    path = Path(path)
    command = command or BOOK_COMMANDS.get(path.name)
    restore = "restore it (git checkout) or " if is_book_file(path) else ""
    if not path.exists():
        raise StoredFileMissing(f"no results file at {path}: {restore}"
                                + (f"run {command} to make it" if command else
                                   "run the command named in the chapter to make it"))
    doc = read_json_document(path, command=command, what="results file")
    fix = restore + (f"re-run {command}" if command else "re-run the command that made it")
    if is_smoke_run(doc) and is_book_file(path):
        raise StoredFileError(f"{path}: holds a smoke run (--tiny), not the book's results; "
                              f"{restore or 'restore it (git checkout) or '}"
                              + (f"re-run {command}" if command else "re-run its command"))
    sections = {**MAIN_SECTIONS.get(path.name, {}),
                **(sections if isinstance(sections, Mapping)
                   else {key: object for key in sections})}
    missing = [k for k in (*HEADER_KEYS, *sections) if k not in doc]
    if missing:
        raise StoredFileError(f"{path}: not a results file (lacks {', '.join(missing)}); {fix}")
    kinds = {"config": dict, **sections}
    for key, kind in kinds.items():
        if not isinstance(doc[key], kind):
            raise StoredFileError(f"{path}: not a results file ({key} is a "
                                  f"{type(doc[key]).__name__}, expected a {kind.__name__}); "
                                  f"{fix}")
    return doc


def output_path_from_args(parser: argparse.ArgumentParser, args, default: Path) -> Path:
    """The ``--out`` path (``default`` if not given), checked before any work starts:
    an existing file needs ``--force``; a folder or an unwritable place stops the command
    with one line (``parser.error``), and so does any of the repository's sources or data
    files other than ``default`` (:func:`~layernorm_tutorial._cli.check_not_a_source`)."""
    out = default if args.out is None else args.out
    try:
        check_not_a_source(out, own=(default,))
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


def add_results_options(parser: argparse.ArgumentParser, *, default_out: Path | str,
                        tiny_help: str, workers: bool = True) -> None:
    """Add ``--out``, ``--force``, ``--workers`` (if ``workers``) and ``--tiny`` to
    ``parser``: the options of :func:`results_command` (``default_out``: the book's file, or
    a few words naming it)."""
    parser.add_argument("--out", type=output_path, default=None,
                        help=f"results JSON path (default: {default_out})")
    parser.add_argument("--force", action="store_true", help="replace an existing file")
    if workers:
        parser.add_argument("--workers", type=positive_int, default=default_workers(),
                            help="worker processes, each single-threaded (>= 1)")
    parser.add_argument("--tiny", action="store_true", help=f"{tiny_help}; requires --out")


def refuse_other_book_file(parser: argparse.ArgumentParser, out: Path | None,
                           default_out: Path) -> None:
    """``parser.error`` if ``out`` is a file in ``book/data/`` other than ``default_out``: the
    book's files are each written by their own command (the one that would be replaced
    may be this run's input, e.g. ``rnn.paths --out book/data/rnn_race.json``); also any
    other of the repository's sources or data files
    (:func:`~layernorm_tutorial._cli.check_not_a_source`), ``--force`` or not."""
    if out is None:
        return
    try:
        check_not_a_source(out, own=(default_out,))
    except OutputPathError as err:
        parser.error(str(err))


def run_results_command(parser: argparse.ArgumentParser, args: argparse.Namespace, *,
                        default_out: Path,
                        run: Callable[[argparse.Namespace], tuple[dict, str]],
                        digits: int = 5) -> Path:
    """The rest of :func:`results_command` once ``args`` are parsed: refuse a bad ``--out``
    (``parser.error``), then run, mark a smoke run, write and print the summary. A stored
    file the run reads that is missing or broken (:class:`~layernorm_tutorial._cli.
    StoredFileError`) ends it with that one line, exit status 2."""
    if args.tiny and args.out is None:
        parser.error("--tiny needs --out: a smoke run never writes the book's results file")
    if args.tiny and (is_book_file(args.out) or same_file(args.out, default_out)):
        parser.error(f"--out {args.out}: --tiny is a smoke run and never writes the book's "
                     "results file; choose another --out")
    refuse_other_book_file(parser, args.out, default_out)
    out = output_path_from_args(parser, args, default_out)
    return interruptible(_run_and_save)(parser, run, args, out, digits)


def _run_and_save(parser: argparse.ArgumentParser, run: Callable, args: argparse.Namespace,
                  out: Path, digits: int) -> Path:
    try:
        doc, summary = run(args)
    except StoredFileError as err:  # an input file of the run is missing or broken
        parser.error(str(err))
    if args.tiny:  # marks a smoke run: load_results refuses it in book/data/
        doc = {**doc, "config": {**doc["config"], "tiny": True}}
    path = save_results(doc, out, overwrite=args.force, digits=digits)
    print(f"{summary}; results written to {path.resolve()}")
    return path


def results_command(argv, *, prog: str, description: str, default_out: Path, tiny_help: str,
                    run: Callable[[argparse.Namespace], tuple[dict, str]],
                    workers: bool = True, digits: int = 5) -> Path:
    """The package's "run it and store the results" command.

    Options: ``--out PATH`` (default ``default_out``, the book's file), ``--force`` to replace
    an existing file, ``--workers N`` (if ``workers``; default :func:`default_workers`) and
    ``--tiny`` (a smoke run; needs an ``--out`` that is neither ``default_out`` nor any file
    in ``book/data/``, ``--force`` or not, and its document says ``"tiny": true`` in its
    ``config``). A full run writes no other file of ``book/data/`` than ``default_out``.
    The output path is checked before any work starts; then ``run(args)`` returns
    ``(doc, summary)``: the document (with its :func:`provenance` header) and a few words on
    what ran. The document is written with :func:`save_results` (``digits``
    significant digits) and ``"<summary>; results written to <path>"`` printed. Returns the
    path written. User errors exit with status 2; Ctrl-C prints ``interrupted``, status 130.
    """
    parser = argparse.ArgumentParser(prog=prog, description=description)
    add_results_options(parser, default_out=default_out, tiny_help=tiny_help, workers=workers)
    args = parser.parse_args(argv)
    return run_results_command(parser, args, default_out=default_out, run=run, digits=digits)
