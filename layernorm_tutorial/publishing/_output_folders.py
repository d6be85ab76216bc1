"""Output folders of the publishing commands: checked before any work, never the sources.

A command that writes a folder (the book build's ``--build-dir``, gettext's ``--output``,
the Chinese notebooks' ``--out``) calls :func:`check_output_folder` first. It resolves
symbolic links and ``..``, then refuses, in one line naming the option:

- the repository root, or any folder that holds it (``--out ..``, ``--out /``);
- a source folder of the repository (:data:`SOURCE_FOLDERS`: ``book/``, ``locales/``, the
  package, the tests, ``.git``) or any folder inside one (``--out book/sub``);
- a file where a folder is expected, or a place where the folder cannot be created or
  written (a missing parent that is a file, a read-only or virtual file system such as
  ``/proc``): tried for real, so it also holds for root.

Nothing is created or changed by the check.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

SOURCE_FOLDERS = ("book", "locales", "layernorm_tutorial", "tests", ".git")
"""Folders of the repository root that hold what people wrote: never an output."""


class OutputFolderError(ValueError):
    """An output folder that cannot or may not be written; the message is one line."""


def _nearest_existing(path: Path) -> Path:
    for candidate in (path, *path.parents):
        if candidate.exists():
            return candidate
    return Path(os.sep)


def check_output_folder(path: str | os.PathLike, *, option: str,
                        root: Path | None = None) -> Path:
    """Return ``path`` resolved (symbolic links and ``..`` followed) if a folder can be
    written there and it is none of the repository's sources (see the module docstring).

    ``root``: the repository root (the folder holding ``_config.yml``); None skips the
    source checks. Raises :class:`OutputFolderError` naming ``option`` and the path.
    """
    given = Path(path).expanduser()
    resolved = given.resolve()
    shown = f"{option} {given}" + (f" ({resolved})" if str(resolved) != str(given) else "")
    if root is not None:
        root = Path(root).resolve()
        if root.is_relative_to(resolved):
            raise OutputFolderError(
                f"{shown}: is the repository {root} or a folder that holds it; "
                "choose a folder for outputs (e.g. _build/...)")
        for name in SOURCE_FOLDERS:
            source = root / name
            if resolved.is_relative_to(source):
                raise OutputFolderError(
                    f"{shown}: lies in the sources ({source}); choose a folder for "
                    "outputs (e.g. _build/...)")
    if resolved.exists() and not resolved.is_dir():
        raise OutputFolderError(f"{shown}: is a file, expected a folder")
    existing = _nearest_existing(resolved)
    if not existing.is_dir():
        raise OutputFolderError(f"{shown}: cannot create it, {existing} is a file, "
                                "not a folder")
    try:
        with tempfile.TemporaryFile(dir=existing):
            pass
    except OSError as exc:
        raise OutputFolderError(f"{shown}: cannot write in {existing} "
                                f"({exc.strerror or exc})") from None
    return resolved
