"""Shared rules for the package's command-line tools: check outputs first, never clobber.

A tool that runs for minutes must refuse a bad output path *before* the work starts, and must
never silently replace a results file (the book renders some of them):

- :func:`check_output_path` raises :class:`OutputPathError` (one line naming the path) when
  the file could not be written, or when it exists and replacing it was not asked for;
- :func:`write_text_atomically` (and :func:`write_bytes_atomically`) write through a temporary
  file in the same folder, so an interrupted write never leaves half a file behind;
- :func:`positive_int` is an ``argparse`` type for counts that must be at least 1.
"""

from __future__ import annotations

import argparse
import os
import tempfile
from pathlib import Path

__all__ = ["OutputPathError", "check_output_path", "positive_int", "write_bytes_atomically",
           "write_text_atomically"]


class OutputPathError(ValueError):
    """An output path that cannot or may not be written; the message names the path."""


def _nearest_existing(path: Path) -> Path:
    for candidate in (path, *path.parents):
        if candidate.exists():
            return candidate
    return Path(os.sep)


def check_output_path(path: str | os.PathLike, *, force: bool = False,
                      option: str = "--out") -> Path:
    """Return ``path`` (a :class:`~pathlib.Path`) if a file can be written there now.

    Raises :class:`OutputPathError` if ``path`` is a folder, if it exists and ``force`` is
    False (replacing a file needs ``--force``), or if the file or the folder that would hold
    it cannot be written (tried for real, so it also holds for root and read-only disks).
    Nothing is created or changed; missing folders are created when the file is written.
    """
    path = Path(path).expanduser()
    if path.is_dir():
        raise OutputPathError(f"{option} {path}: is a folder, expected a file path")
    if path.exists():
        if not force:
            raise OutputPathError(f"{option} {path}: the file exists; pass --force to replace "
                                  "it, or choose a new path")
        try:
            with open(path, "ab"):  # opening for append changes nothing
                pass
        except OSError as exc:
            raise OutputPathError(f"{option} {path}: cannot write it ({exc.strerror})") from None
        return path
    folder = _nearest_existing(path.parent.absolute())
    if not folder.is_dir():
        raise OutputPathError(f"{option} {path}: cannot create it, {folder} is not a folder")
    try:
        with tempfile.TemporaryFile(dir=folder):
            pass
    except OSError as exc:
        raise OutputPathError(f"{option} {path}: cannot write in {folder} "
                              f"({exc.strerror})") from None
    return path


def write_text_atomically(path: str | os.PathLike, text: str) -> Path:
    """Write ``text`` (UTF-8, newlines as given) to ``path`` via a temporary file and a rename."""
    return write_bytes_atomically(path, text.encode("utf-8"))


def write_bytes_atomically(path: str | os.PathLike, data: bytes) -> Path:
    """Write ``data`` to ``path`` (folders created) via a temporary file and a rename."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.with_name(f".{path.name}.{os.getpid()}.tmp")  # same folder: same disk
    try:
        with open(temporary, "xb") as f:  # "x": never an existing file
            f.write(data)
        os.replace(temporary, path)
    except BaseException:
        temporary.unlink(missing_ok=True)
        raise
    return path


def positive_int(text: str) -> int:
    """``argparse`` type: an integer >= 1 (``parser.error`` names the option otherwise)."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number >= 1, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a whole number >= 1, got {value}")
    return value
