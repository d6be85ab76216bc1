"""Translators' tool for the book's .po catalogs (keeps them valid; never edit by hand).

    po_tool stats [PO|FOLDER ...]
    po_tool todo  locales/zh_CN/LC_MESSAGES/book/X.po [-o todo.json] [--force]
    po_tool apply locales/zh_CN/LC_MESSAGES/book/X.po todo.json [--force]
    po_tool prefill [PO|FOLDER ...]
    po_tool check [PO|FOLDER ...]

(``po_tool`` = ``python -m layernorm_tutorial.publishing.book_i18n.po_tool``. Without
catalogs named, the commands use every catalog of the repository the current folder is in,
``locales/zh_CN/LC_MESSAGES``, from any of its subfolders.)

``todo`` lists the untranslated and fuzzy messages as JSON: a list of objects with
``msgid``, the current ``msgstr``, ``fuzzy``, the ``protected`` parts that must appear
unchanged in the translation and a ``hint``. It never writes onto a catalog, and it does not
replace a todo file that holds translations not yet applied (``--force`` discards them).
Fill in ``msgstr`` and pass the same list to ``apply``: it checks every entry (protected
parts present, glossary terms used, not blank), writes the good ones (clearing their fuzzy
flag) and reports the others without writing them. A fuzzy message whose ``msgstr`` was left
as it is stays fuzzy; set its ``fuzzy`` to ``false`` to keep that translation. A file that is
not such a list, a missing file or swapped arguments stop ``apply`` with one line (exit
status 2) before anything is written; catalogs are always written atomically.
``prefill`` copies messages without prose (``{doc}`x```, display math, code names) into
their translation, and swaps each English heading of the interview chapters with the bold
Chinese title under it (the heading becomes the Chinese title, the bold line the English
question in italics). ``check`` reports every problem in the catalogs and what it checked
(exit status 1 if there is a problem, 2 if there was nothing to check).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from babel.messages.pofile import PoFileError

from layernorm_tutorial._cli import (
    OutputPathError,
    check_not_a_source,
    check_output_path,
    write_text_atomically,
)
from layernorm_tutorial.publishing.book_i18n import catalogs

LOCALES = Path("locales")
GLOSSARY = Path("book") / "glossary.md"
CATALOG_SUFFIXES = (".po", ".pot", ".mo")


class UsageError(Exception):
    """A mistake in the command line or in its files: reported in one line, exit status 2."""


def _root() -> Path:
    """The repository the current folder is in (or the current folder)."""
    return catalogs.book_root() or Path.cwd()


def _glossary_path() -> Path | None:
    path = _root() / GLOSSARY
    return path if path.is_file() else None


def _glossary_index() -> dict:
    path = _glossary_path()
    return catalogs.term_index(catalogs.glossary_terms(path)) if path else {}


def entry_problems(entry: catalogs.Entry, index: dict) -> list[str]:
    """Everything wrong with one message of a catalog (empty list: fine). A translation of
    blanks only counts as untranslated."""
    if not entry.msgstr.strip():
        return ["untranslated"]
    problems = ["fuzzy (check the translation, then clear the flag)"] if entry.fuzzy else []
    missing, extra = catalogs.missing_or_extra_tokens(entry.msgid, entry.msgstr)
    problems += [f"missing {token!r} (x{n})" for token, n in missing.items()]
    problems += [f"not in the English: {token!r} (x{n})" for token, n in extra.items()]
    if catalogs.literal_asterisks(entry.msgstr) > catalogs.literal_asterisks(entry.msgid):
        problems.append("bold/italic does not render: put a space or the punctuation outside "
                        "the ** or * (e.g. “**词**”之后, not **“词”**之后)")
    problems += catalogs.glossary_problems(entry, index)
    return problems


def _hint(msgid: str, fuzzy: bool) -> str:
    if catalogs.looks_untranslatable(msgid):
        return "no prose: copy unchanged"
    if fuzzy:
        return ("fuzzy: the English changed; edit msgstr, or set fuzzy to false to keep "
                "the translation as it is")
    return ""


# --------------------------------------------------------------------------------------
# Reading the files a translator names
# --------------------------------------------------------------------------------------
def _read_catalog(path: Path):
    if not path.exists():
        raise UsageError(f"{path}: no such file")
    if path.is_dir():
        raise UsageError(f"{path}: is a folder, expected a .po catalog")
    if path.suffix != ".po":
        hint = " (arguments swapped?)" if path.suffix == ".json" else ""
        raise UsageError(f"{path}: expected a .po catalog{hint}")
    try:
        return catalogs.read_catalog(path)
    except (PoFileError, UnicodeDecodeError, ValueError) as exc:
        raise UsageError(f"{path}: not a valid .po catalog ({exc})") from None
    except OSError as exc:
        raise UsageError(f"{path}: cannot read it ({exc.strerror})") from None


def _todo_rows(path: Path) -> list[dict]:
    """The rows of a todo file, checked: a list of objects with a string ``msgid``, a string
    ``msgstr`` (missing = not translated) and an optional boolean ``fuzzy``; or one object
    mapping msgids to translations. Raises UsageError (one line) otherwise."""
    if not path.exists():
        raise UsageError(f"{path}: no such file")
    if path.is_dir():
        raise UsageError(f"{path}: is a folder, expected the JSON list written by `todo`")
    if path.suffix in CATALOG_SUFFIXES:
        raise UsageError(f"{path}: is a catalog, expected the JSON list written by `todo` "
                         "(arguments swapped? usage: apply CATALOG.po TODO.json)")
    try:
        data = json.loads(path.read_text(encoding="utf8"))
    except json.JSONDecodeError as exc:
        raise UsageError(f"{path}: not valid JSON (line {exc.lineno}, column {exc.colno}: "
                         f"{exc.msg})") from None
    except UnicodeDecodeError:
        raise UsageError(f"{path}: not UTF-8 text, expected the JSON list written by "
                         "`todo`") from None
    except OSError as exc:
        raise UsageError(f"{path}: cannot read it ({exc.strerror})") from None
    if isinstance(data, dict) and all(isinstance(k, str) and isinstance(v, str)
                                      for k, v in data.items()):
        return [{"msgid": k, "msgstr": v} for k, v in data.items()]
    if not isinstance(data, list):
        raise UsageError(f"{path}: expected a JSON list of rows (objects with msgid and "
                         f"msgstr), got a {type(data).__name__}")
    for number, row in enumerate(data, start=1):
        where = f"{path}: row {number}"
        if not isinstance(row, dict):
            raise UsageError(f"{where}: expected an object with msgid and msgstr, got "
                             f"{type(row).__name__} {str(row)[:40]!r}")
        if not isinstance(row.get("msgid"), str):
            raise UsageError(f"{where}: has no msgid (a string)")
        if not isinstance(row.get("msgstr", ""), str):
            raise UsageError(f"{where}: msgstr must be a string, got "
                             f"{type(row['msgstr']).__name__}")
        if not isinstance(row.get("fuzzy", False), bool):
            raise UsageError(f"{where}: fuzzy must be true or false")
    return data


def _po_files(paths: list[Path]) -> list[Path]:
    """The catalogs named (files, or folders searched for .po files), or all of the
    repository's. Raises UsageError when a path does not exist or nothing is found."""
    if not paths:
        root = catalogs.book_root()
        if root is None:
            raise UsageError(f"{Path.cwd()} is not inside the book's repository (no "
                             "_config.yml and _toc.yml here or above): run from the "
                             "repository or name the .po files")
        paths = [root / LOCALES / "zh_CN" / "LC_MESSAGES"]
    found: list[Path] = []
    for path in paths:
        if path.is_dir():
            found += sorted(path.rglob("*.po"))
        elif path.is_file() and path.suffix == ".po":
            found.append(path)
        elif path.exists():
            raise UsageError(f"{path}: not a .po catalog")
        else:
            raise UsageError(f"{path}: no such file or folder")
    if not found:
        raise UsageError(f"no .po catalogs in {', '.join(str(p) for p in paths)}: nothing "
                         "to do")
    return list(dict.fromkeys(found))


# --------------------------------------------------------------------------------------
# Commands
# --------------------------------------------------------------------------------------
def _unapplied_edits(output: Path, catalog) -> int | None:
    """How many rows of an existing todo file differ from ``catalog`` (translations typed
    but not applied yet); None if the file is not a todo list at all."""
    try:
        rows = _todo_rows(output)
    except UsageError:
        return None
    edited = 0
    for row in rows:
        message = catalog.get(row["msgid"])
        current = (message.string or "") if message is not None else ""
        typed = row.get("msgstr", "")
        confirmed = message is not None and message.fuzzy and row.get("fuzzy") is False
        if (typed and typed != current) or confirmed:
            edited += 1
    return edited


def _check_todo_output(output: Path, po: Path, catalog, force: bool) -> Path:
    if output.suffix in CATALOG_SUFFIXES or (output.exists() and po.exists()
                                             and output.resolve() == po.resolve()):
        raise UsageError(f"-o {output}: is a translation catalog; `todo` writes JSON, "
                         "e.g. -o todo.json")
    if output.is_file() and not force:
        head = output.read_bytes()[:4096]
        if b'msgid "' in head:
            raise UsageError(f"-o {output}: holds a translation catalog; `todo` writes "
                             "JSON, e.g. -o todo.json")
        edited = _unapplied_edits(output, catalog)
        if edited is None:
            raise UsageError(f"-o {output}: exists and is not a todo list; pass --force to "
                             "replace it, or choose a new path")
        if edited:
            raise UsageError(f"-o {output}: holds {edited} translation(s) not applied yet: "
                             f"run `apply {po} {output}` first, or pass --force to discard "
                             "them")
    try:
        check_not_a_source(output, option="-o")
        return check_output_path(output, force=True, option="-o")
    except OutputPathError as exc:
        raise UsageError(str(exc)) from None


def cmd_todo(args) -> int:
    catalog = _read_catalog(args.po)
    if args.output:
        _check_todo_output(args.output, args.po, catalog, args.force)
    rows = []
    for entry in catalogs.entries(args.po):
        if entry.msgstr.strip() and not entry.fuzzy:
            continue
        rows.append({
            "msgid": entry.msgid,
            "msgstr": entry.msgstr,
            "fuzzy": entry.fuzzy,
            "protected": sorted(catalogs.markup_tokens(entry.msgid).elements()),
            "hint": _hint(entry.msgid, entry.fuzzy),
        })
    text = json.dumps(rows, ensure_ascii=False, indent=1)
    if args.output:
        write_text_atomically(args.output, text + "\n")
        print(f"{len(rows)} message(s) to translate -> {args.output}", file=sys.stderr)
    else:
        print(text)
    return 0


def cmd_apply(args) -> int:
    if args.po.suffix == ".json" and args.json.suffix in CATALOG_SUFFIXES:
        raise UsageError(f"arguments swapped: usage: apply CATALOG.po TODO.json (got "
                         f"{args.po} {args.json})")
    rows = _todo_rows(args.json)
    catalog = _read_catalog(args.po)
    index = _glossary_index()
    written = rejected = unchanged = still_fuzzy = 0
    for row in rows:
        msgid, msgstr = row["msgid"], row.get("msgstr", "")
        message = catalog.get(msgid)
        if message is None:
            print(f"not in {args.po}: {msgid[:70]!r}", file=sys.stderr)
            rejected += 1
            continue
        if not msgstr:
            unchanged += 1  # left empty: still to translate
            continue
        if not msgstr.strip():
            print(f"rejected {msgid[:70]!r}: blank translation", file=sys.stderr)
            rejected += 1
            continue
        if msgstr == (message.string or ""):
            if message.fuzzy and row.get("fuzzy") is False:
                pass  # the translator confirmed the old translation: clear the flag below
            else:
                unchanged += 1
                still_fuzzy += bool(message.fuzzy)
                continue
        problems = entry_problems(catalogs.Entry(str(args.po), msgid, msgstr, False), index)
        if problems and not args.force:
            print(f"rejected {msgid[:70]!r}: {'; '.join(problems)}", file=sys.stderr)
            rejected += 1
            continue
        message.string = msgstr
        message.flags.discard("fuzzy")
        message.previous_id = []
        written += 1
    if written:
        catalogs.write_catalog(args.po, catalog)
    note = (f" ({still_fuzzy} still fuzzy: edit the translation, or set \"fuzzy\": false "
            "to keep it)" if still_fuzzy else "")
    print(f"{args.po}: {written} written, {rejected} rejected, {unchanged} unchanged{note}",
          file=sys.stderr)
    return 1 if rejected else 0


def cmd_prefill(args) -> int:
    for po in _po_files(args.po):
        catalog = _read_catalog(po)
        copied = swapped = 0
        for message in catalog:
            if (message.id and isinstance(message.id, str) and not message.string
                    and catalogs.looks_untranslatable(message.id)):
                message.string = message.id
                copied += 1
        ids = [m.id for m in catalog if m.id and isinstance(m.id, str)]
        for heading, title in catalogs.interview_title_pairs(ids):
            new_heading, new_title = catalogs.swapped_titles(heading, title)
            for msgid, msgstr in ((heading, new_heading), (title, new_title)):
                message = catalog.get(msgid)
                if not message.string or message.fuzzy:
                    message.string = msgstr
                    message.flags.discard("fuzzy")
                    swapped += 1
        if copied or swapped:
            catalogs.write_catalog(po, catalog)
        print(f"{po}: {copied} message(s) without prose copied, {swapped} interview "
              "title message(s) swapped", file=sys.stderr)
    return 0


def cmd_check(args) -> int:
    files = _po_files(args.po)
    glossary = _glossary_path()
    index = _glossary_index()
    count = messages = 0
    for po in files:
        _read_catalog(po)  # one line, not a traceback, for a broken catalog
        for entry in catalogs.entries(po):
            messages += 1
            for problem in entry_problems(entry, index):
                if problem == "untranslated" and args.ignore_untranslated:
                    continue
                count += 1
                print(f"{po}: {entry.msgid[:60]!r}: {problem}")
    terms = (f"glossary terms from {glossary}" if glossary
             else "no book/glossary.md found: glossary terms not checked")
    where = files[0].parent if len(files) == 1 else Path(*_common_parts(files))
    print(f"checked {len(files)} catalog(s), {messages} message(s) in {where} ({terms}): "
          f"{count} problem(s)", file=sys.stderr)
    if not messages:
        print("nothing was checked: the catalogs hold no messages", file=sys.stderr)
        return 2
    return 1 if count else 0


def _common_parts(files: list[Path]) -> tuple[str, ...]:
    parts = [p.absolute().parent.parts for p in files]
    common = []
    for column in zip(*parts, strict=False):
        if len(set(column)) != 1:
            break
        common.append(column[0])
    return tuple(common) or (".",)


def cmd_stats(args) -> int:
    total = [0, 0, 0]
    for po in _po_files(args.po):
        _read_catalog(po)
        rows = catalogs.entries(po)
        done = sum(1 for e in rows if e.msgstr.strip() and not e.fuzzy)
        fuzzy = sum(1 for e in rows if e.fuzzy)
        print(f"{po}: {len(rows)} messages, {done} translated, {fuzzy} fuzzy, "
              f"{len(rows) - done - fuzzy} untranslated")
        for i, n in enumerate((len(rows), done, fuzzy)):
            total[i] += n
    print(f"total: {total[0]} messages, {total[1]} translated, {total[2]} fuzzy")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m layernorm_tutorial.publishing.book_i18n.po_tool",
        description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    todo = sub.add_parser("todo", help="untranslated and fuzzy messages as JSON")
    todo.add_argument("po", type=Path)
    todo.add_argument("-o", "--output", type=Path,
                      help="JSON file to write (never a catalog); default: standard output")
    todo.add_argument("--force", action="store_true",
                      help="replace OUTPUT even if it holds translations not applied yet")
    apply = sub.add_parser("apply", help="write translations from JSON into the catalog")
    apply.add_argument("po", type=Path)
    apply.add_argument("json", type=Path)
    apply.add_argument("--force", action="store_true", help="write entries with problems too")
    for name, helptext in (("prefill", "copy messages without prose"),
                           ("check", "report every problem"), ("stats", "counts per catalog")):
        command = sub.add_parser(name, help=helptext)
        command.add_argument("po", type=Path, nargs="*",
                             help=".po files or folders (default: the repository's catalogs)")
        if name == "check":
            command.add_argument("--ignore-untranslated", action="store_true")
    args = parser.parse_args(argv)
    try:
        return {"todo": cmd_todo, "apply": cmd_apply, "prefill": cmd_prefill,
                "check": cmd_check, "stats": cmd_stats}[args.command](args)
    except UsageError as exc:
        print(f"{parser.prog} {args.command}: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
