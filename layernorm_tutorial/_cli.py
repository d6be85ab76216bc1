"""Shared rules for the package's command-line tools: check outputs first, never clobber.

A tool that runs for minutes must refuse a bad output path *before* the work starts, and must
never silently replace a results file (the book renders some of them):

- :func:`check_output_path` raises :class:`OutputPathError` (one line naming the path) when
  the file could not be written, or when it exists and replacing it was not asked for;
- :func:`write_text_atomically` (and :func:`write_bytes_atomically`) write through a temporary
  file in the same folder, so an interrupted write never leaves half a file behind;
- :func:`positive_int` is an ``argparse`` type for counts that must be at least 1.

A tool must also never destroy what a reader has, nor fail far from the cause:

- :func:`read_json_document` reads a stored JSON document and checks its shape; a missing,
  empty, broken or incomplete file is one line naming the file and what to do;
- :func:`is_book_file` tells whether a path lies in the book's ``book/data/`` (the files the
  chapters render; a smoke run must never land there);
- :func:`check_not_a_source` refuses an output that is one of the repository's sources or
  data files (``book/``, the package, ``tests/``, ``locales/``, the top-level files, anything
  git tracks) other than the command's own default output, ``--force`` or not;
- :func:`same_file` finds two path arguments that name one file (an input read and then
  overwritten, or two outputs written over each other);
- :func:`interruptible` ends a command on Ctrl-C with ``interrupted`` and exit status 130.
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import sys
import tempfile
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path

__all__ = ["BOOK_DATA", "REPO", "OutputPathError", "StoredFileError", "StoredFileMissing",
           "check_not_a_source", "check_output_path", "interruptible", "is_book_file",
           "output_path", "positive_int", "read_json_document", "same_file",
           "write_bytes_atomically", "write_text_atomically"]

#: The repository this package lives in (whatever the working directory).
REPO = Path(__file__).resolve().parents[1]
#: The book's stored results in this checkout (whatever the working directory).
BOOK_DATA = REPO / "book" / "data"
#: Folders of the repository that hold only sources or data (never a command's output).
SOURCE_FOLDERS = ("book", "layernorm_tutorial", "tests", "locales", ".git")
#: Top-level files of the repository that are sources.
SOURCE_FILES = ("README.md", "pyproject.toml", "requirements.txt", "_config.yml", "_toc.yml",
                "references.bib")


class OutputPathError(ValueError):
    """An output path that cannot or may not be written; the message names the path."""


class StoredFileError(ValueError):
    """A stored file (results, table) that is broken or of the wrong shape; the message is
    one line naming the file and what to do. A command turns it into ``parser.error``."""


class StoredFileMissing(FileNotFoundError, StoredFileError):
    """A stored file that is not there (a ``FileNotFoundError`` and a
    :class:`StoredFileError`); the message names the file and what makes it."""


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
    An empty path is refused (``--out: empty path``), never taken for the working folder.
    """
    if not os.fspath(path):
        raise OutputPathError(f"{option}: empty path")
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


def _tracked_by_git(path: Path, repo: Path) -> bool:
    """True if git tracks ``path`` in ``repo`` (False without git or outside a checkout)."""
    import subprocess

    try:
        done = subprocess.run(["git", "-C", str(repo), "ls-files", "--error-unmatch", "--",
                               str(path.relative_to(repo))], capture_output=True, timeout=30)
    except (OSError, subprocess.SubprocessError):
        return False
    return done.returncode == 0


def check_not_a_source(path: str | os.PathLike, *, own: Iterable[str | os.PathLike] = (),
                       option: str = "--out") -> None:
    """Raise :class:`OutputPathError` (one line) if ``path`` is one of the repository's
    sources or data files, which no command may replace, ``--force`` or not.

    Refused (compared once resolved): any path in ``book/`` (the pages, ``book/data/``),
    the package, ``tests/``, ``locales/`` or ``.git/``; a top-level source
    (:data:`SOURCE_FILES`); any other file git tracks. ``own``: the command's own default
    output(s), which it may replace (with ``--force``). Paths outside :data:`REPO` pass.
    """
    target = Path(path).expanduser().resolve()
    repo = Path(REPO).resolve()
    if any(target == Path(o).expanduser().resolve() for o in own):
        return
    if repo != target and repo not in target.parents:
        return
    book_data = Path(BOOK_DATA).resolve()
    if book_data in target.parents:
        mine = [Path(o).name for o in own
                if book_data in Path(o).expanduser().resolve().parents]
        writes = (f"writes only {', '.join(mine)} in book/data" if mine
                  else "writes no file of book/data")
        raise OutputPathError(f"{option} {path}: another of the book's files; this command "
                              f"{writes} (choose a path outside it)")
    parts = target.relative_to(repo).parts
    if (parts and parts[0] in SOURCE_FOLDERS) or (len(parts) == 1 and parts[0] in SOURCE_FILES) \
            or (target.is_file() and _tracked_by_git(target, repo)):
        raise OutputPathError(f"{option} {path}: one of the repository's source or data "
                              "files, never an output; choose a path outside the sources "
                              f"(e.g. in {tempfile.gettempdir()})")


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


def output_path(text: str) -> Path:
    """``argparse`` type of an output option: a :class:`~pathlib.Path`, never empty
    (``Path("")`` would be the working folder): ``argument --out: empty path``."""
    if not text:
        raise argparse.ArgumentTypeError("empty path")
    return Path(text)


def is_book_file(path: str | os.PathLike) -> bool:
    """True if ``path`` (resolved: ``..``, links, ``~``) is in the book's :data:`BOOK_DATA`."""
    return Path(BOOK_DATA).resolve() in Path(path).expanduser().resolve().parents


def same_file(a: str | os.PathLike, b: str | os.PathLike) -> bool:
    """True if the paths ``a`` and ``b`` name one file (compared once resolved)."""
    return Path(a).expanduser().resolve() == Path(b).expanduser().resolve()


_JSON_TYPES = {dict: "object", list: "array", str: "string", int: "number", float: "number",
               bool: "true/false", type(None): "null"}


def _json_type(value) -> str:
    return _JSON_TYPES.get(type(value), type(value).__name__)


def _remedy(path: Path, command: str | None, missing: bool = False) -> str:
    """What to do about a bad stored file: restore a book file, re-run its command."""
    fixes = ["restore it (git checkout)"] if is_book_file(path) else []
    if command:
        fixes.append(f"{'make it with' if missing and not fixes else 're-run'} {command}")
    return " or ".join(fixes) or "check the path and the file"


def read_json_document(path: str | os.PathLike, *,
                       required: Iterable[str] | Mapping[str, type | tuple] = (),
                       command: str | None = None, what: str = "results file") -> dict:
    """The JSON object stored at ``path``, its shape checked before anyone uses it.

    ``required``: the keys the document must hold (a mapping also gives each key's type,
    e.g. ``{"rows": list}``). ``command`` is what makes the file; it goes into the errors.
    Raises :class:`StoredFileMissing` (a ``FileNotFoundError``: no such file) or
    :class:`StoredFileError` (a ``ValueError``: a folder, unreadable, not UTF-8, empty,
    merge-conflict markers, not valid JSON, not a JSON object, a required key missing or of
    the wrong type), each one line naming the file and what to do, e.g.
    ``book/data/rnn_race.json: not valid JSON (line 1, column 1); restore it (git checkout)
    or re-run python -m layernorm_tutorial.lab.rnn``.
    """
    path = Path(path)
    if path.is_dir():
        raise StoredFileError(f"{path}: is a folder, expected a JSON {what}")
    if not path.exists():
        raise StoredFileMissing(f"{path}: no such {what}; "
                                f"{_remedy(path, command, missing=True)}")
    fix = _remedy(path, command)
    try:
        text = path.read_bytes().decode("utf-8")
    except OSError as exc:
        raise StoredFileError(f"{path}: cannot read it ({exc.strerror}); {fix}") from None
    except UnicodeDecodeError:
        raise StoredFileError(f"{path}: not UTF-8 text, so not a JSON {what}; {fix}") from None
    if not text.strip():
        raise StoredFileError(f"{path}: the file is empty, expected a JSON {what}; {fix}")
    conflict = next((n for n, line in enumerate(text.splitlines(), 1)
                     if line.startswith(("<<<<<<< ", ">>>>>>> "))), None)
    if conflict is not None:
        raise StoredFileError(f"{path}: holds git merge-conflict markers (line {conflict}); "
                              f"{fix}")
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as err:
        raise StoredFileError(f"{path}: not valid JSON (line {err.lineno}, column "
                              f"{err.colno}); {fix}") from None
    if not isinstance(doc, dict):
        raise StoredFileError(f"{path}: expected a JSON object (a {what}), got a JSON "
                              f"{_json_type(doc)}; {fix}")
    missing = [key for key in required if key not in doc]
    if missing:
        raise StoredFileError(f"{path}: not a complete {what}, it lacks "
                              f"{', '.join(missing)}; {fix}")
    if isinstance(required, Mapping):
        for key, kind in required.items():
            if not isinstance(doc[key], kind):
                expected = " or ".join(_JSON_TYPES.get(k, k.__name__) for k in
                                       (kind if isinstance(kind, tuple) else (kind,)))
                raise StoredFileError(f"{path}: {key} should be a JSON {expected}, got a "
                                      f"JSON {_json_type(doc[key])}; {fix}")
    return doc


def interruptible(main: Callable) -> Callable:
    """Decorate a command's ``main``: Ctrl-C (``KeyboardInterrupt``) prints ``interrupted``
    on stderr and exits with status 130 (128 + SIGINT), instead of a traceback."""
    @functools.wraps(main)
    def run(*args, **kwargs):
        try:
            return main(*args, **kwargs)
        except KeyboardInterrupt:
            print("interrupted", file=sys.stderr, flush=True)
            raise SystemExit(130) from None
    return run
