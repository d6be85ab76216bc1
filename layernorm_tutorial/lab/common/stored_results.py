"""Stored results files for chapters whose runs take minutes: write once, read in the notebook.

A chapter that judges a comparison on many seeds cannot train them inside the notebook (the
budget is well under a minute). Its runs live in a package command that writes a JSON file
in ``book/data/``; the notebook reads it. The file carries its own provenance: the command
that made it, the versions of Python, torch, NumPy and this package, the configuration and
the wall time. This module holds what those commands share:

- :func:`round_floats`: floats to a few significant digits (small files, stable diffs);
- :func:`provenance`: the header every file starts with;
- :func:`save_results` / :func:`load_results`: atomic write that never replaces a file unless
  asked (``--force``), and a read that checks the header;
- :func:`output_path_from_args`: the ``--out``/``--force`` rule of the package's commands,
  checked before any work starts.
"""

from __future__ import annotations

import argparse
import json
import math
import platform
from pathlib import Path

from layernorm_tutorial._cli import OutputPathError, check_output_path, write_text_atomically

__all__ = ["BOOK_DATA", "load_results", "output_path_from_args", "provenance", "round_floats",
           "save_results"]

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
    """The header of a results file: ``command``, ``versions``, ``config``, ``seconds``."""
    import numpy
    import torch

    from layernorm_tutorial import __version__

    versions = {"layernorm_tutorial": __version__, "torch": torch.__version__,
                "numpy": numpy.__version__, "python": platform.python_version()}
    return {"command": command, "versions": versions, "config": config, "seconds": seconds}


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
