"""Translators' tool for the book's .po catalogs (keeps them valid; never edit by hand).

    po_tool stats
    po_tool todo  locales/zh_CN/LC_MESSAGES/book/X.po [-o todo.json]
    po_tool apply locales/zh_CN/LC_MESSAGES/book/X.po done.json
    po_tool prefill [PO ...]
    po_tool check [PO ...]

(``po_tool`` = ``python -m layernorm_tutorial.publishing.book_i18n.po_tool``, from the repository
root.)

``todo`` lists the untranslated and fuzzy messages as JSON: a list of objects with
``msgid``, the current ``msgstr``, ``fuzzy``, the ``protected`` parts that must appear
unchanged in the translation and a ``hint``. Fill in ``msgstr`` and pass the same list to
``apply``: it checks every entry (protected parts present, glossary terms used), writes the
good ones (clearing their fuzzy flag) and reports the others without writing them.
``prefill`` copies messages without prose (``{doc}`x```, display math, code names) into
their translation, and swaps each English heading of the interview chapters with the bold
Chinese title under it (the heading becomes the Chinese title, the bold line the English
question in italics). ``check`` reports every problem in the catalogs (exit status 1 if any).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from layernorm_tutorial.publishing.book_i18n import catalogs

DEFAULT_LOCALES = Path("locales")
GLOSSARY = Path("book/glossary.md")


def _glossary_index() -> dict:
    if not GLOSSARY.is_file():
        return {}
    return catalogs.term_index(catalogs.glossary_terms(GLOSSARY))


def entry_problems(entry: catalogs.Entry, index: dict) -> list[str]:
    """Everything wrong with one message of a catalog (empty list: fine)."""
    if not entry.msgstr:
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


def _hint(msgid: str) -> str:
    if catalogs.looks_untranslatable(msgid):
        return "no prose: copy unchanged"
    return ""


def cmd_todo(args) -> int:
    rows = []
    for entry in catalogs.entries(args.po):
        if entry.msgstr and not entry.fuzzy:
            continue
        rows.append({
            "msgid": entry.msgid,
            "msgstr": entry.msgstr,
            "fuzzy": entry.fuzzy,
            "protected": sorted(catalogs.markup_tokens(entry.msgid).elements()),
            "hint": _hint(entry.msgid),
        })
    text = json.dumps(rows, ensure_ascii=False, indent=1)
    if args.output:
        args.output.write_text(text + "\n", encoding="utf8")
        print(f"{len(rows)} message(s) to translate -> {args.output}", file=sys.stderr)
    else:
        print(text)
    return 0


def cmd_apply(args) -> int:
    rows = json.loads(args.json.read_text(encoding="utf8"))
    if isinstance(rows, dict):
        rows = [{"msgid": k, "msgstr": v} for k, v in rows.items()]
    catalog = catalogs.read_catalog(args.po)
    index = _glossary_index()
    written, rejected = 0, 0
    for row in rows:
        msgid, msgstr = row["msgid"], row.get("msgstr", "")
        message = catalog.get(msgid)
        if message is None:
            print(f"not in {args.po}: {msgid[:70]!r}", file=sys.stderr)
            rejected += 1
            continue
        if not msgstr:
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
    catalogs.write_catalog(args.po, catalog)
    print(f"{args.po}: {written} written, {rejected} rejected", file=sys.stderr)
    return 1 if rejected else 0


def _po_files(paths: list[Path]) -> list[Path]:
    return paths or catalogs.catalog_files(DEFAULT_LOCALES)


def cmd_prefill(args) -> int:
    for po in _po_files(args.po):
        catalog = catalogs.read_catalog(po)
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
        catalogs.write_catalog(po, catalog)
        print(f"{po}: {copied} message(s) without prose copied, {swapped} interview "
              "title message(s) swapped", file=sys.stderr)
    return 0


def cmd_check(args) -> int:
    index = _glossary_index()
    count = 0
    for po in _po_files(args.po):
        for entry in catalogs.entries(po):
            for problem in entry_problems(entry, index):
                if problem == "untranslated" and args.ignore_untranslated:
                    continue
                count += 1
                print(f"{po}: {entry.msgid[:60]!r}: {problem}")
    print(f"{count} problem(s)", file=sys.stderr)
    return 1 if count else 0


def cmd_stats(args) -> int:
    total = [0, 0, 0]
    for po in _po_files(args.po):
        rows = catalogs.entries(po)
        done = sum(1 for e in rows if e.msgstr and not e.fuzzy)
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
    todo.add_argument("-o", "--output", type=Path)
    apply = sub.add_parser("apply", help="write translations from JSON into the catalog")
    apply.add_argument("po", type=Path)
    apply.add_argument("json", type=Path)
    apply.add_argument("--force", action="store_true", help="write entries with problems too")
    for name, helptext in (("prefill", "copy messages without prose"),
                           ("check", "report every problem"), ("stats", "counts per catalog")):
        command = sub.add_parser(name, help=helptext)
        command.add_argument("po", type=Path, nargs="*")
        if name == "check":
            command.add_argument("--ignore-untranslated", action="store_true")
    args = parser.parse_args(argv)
    return {"todo": cmd_todo, "apply": cmd_apply, "prefill": cmd_prefill,
            "check": cmd_check, "stats": cmd_stats}[args.command](args)


if __name__ == "__main__":
    sys.exit(main())
