"""Chinese notebooks from the English ones and the catalogs: one source of truth, two languages.

The Chinese HTML is built by Sphinx from the English notebooks and the catalogs
(``locales/zh_CN/LC_MESSAGES/book/<page>.po``), message by message. A reader who downloads a
notebook or opens the chapters in JupyterLab needs the same translation *in the notebook*.
This module writes it: every markdown cell is parsed with the parser MyST uses
(markdown-it with the book's extensions), and each unit that Sphinx's gettext extracts
(a heading, a paragraph, a list item's paragraph, a table cell, a definition term, a
directive's title and body, recursively) is replaced by its translation, with its list
marker or indentation kept. MyST roles, math, glue and labels are inside the messages and
stay intact because the translations keep them (``po_tool`` checks that). Code cells,
outputs and metadata are copied unchanged, so a Chinese notebook executes exactly the code
of the English one.

Not every catalog message has a place in a notebook's markdown: display math (the same in
both languages), captions kept in a code cell's metadata (JupyterLab does not show them, and
code cells stay identical) and text that a code cell prints (its outputs stay identical).
:func:`unused_messages` sorts the messages a notebook did not use into those reasons; any
message left without a reason is a defect of this module (the tests fail on it).

The generated notebooks are build outputs, never committed:
``python -m layernorm_tutorial.publishing.book_i18n.notebooks --out DIR`` writes a copy of
``book/`` whose notebooks and pages are in Chinese (the book build writes
``_build/zh_notebooks/book`` and puts each chapter into the Chinese HTML's download button).
``--out`` is never the repository, a folder holding it, or a folder in its sources
(``book/``, ``locales/``, ...); ``--force`` replaces only a folder this command made (it
holds the marker file ``.layernorm_tutorial_zh_notebooks``). The copy is written to
``<out>.partial`` and renamed when complete: Ctrl-C leaves an existing folder whole and
removes the staging folder.
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import shutil
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path

from layernorm_tutorial.publishing._output_folders import OutputFolderError, check_output_folder
from layernorm_tutorial.publishing.book_i18n.catalogs import book_root, read_catalog

__all__ = ["MARKER", "OutputFolderError", "Translation", "catalog_translations",
           "check_out_folder", "translate_markdown", "translate_notebook",
           "translate_page", "unused_messages", "write_chinese_book", "main"]

MYST_EXTENSIONS = {"amsmath", "dollarmath", "colon_fence", "deflist", "substitution"}
LOCALE = Path("locales") / "zh_CN" / "LC_MESSAGES" / "book"
PAGE_SUFFIXES = (".ipynb", ".md")
LABEL_ARGUMENTS = frozenset({"solution", "solution-start"})
"""Directives whose argument is a label (sphinx-exercise's ``{solution} ex-x-1`` names its
exercise), not prose: no message, never looked up, not counted as left in English. Every
other directive's argument is a title (``{admonition}``, ``{exercise}``), a message of
the page."""


@dataclass
class Translation:
    """The messages of one page: ``messages[msgid] = msgstr`` (translated, not fuzzy), and
    the message ids this page's notebook used (filled by :func:`translate_markdown`)."""

    messages: Mapping[str, str]
    used: set[str] = field(default_factory=set)
    untranslated: set[str] = field(default_factory=set)


def catalog_translations(po_path: Path) -> dict[str, str]:
    """``{msgid: msgstr}`` of a catalog's finished messages (non-empty, not fuzzy)."""
    catalog = read_catalog(Path(po_path))
    return {m.id: m.string for m in catalog
            if m.id and isinstance(m.id, str) and m.string and not m.fuzzy}


@lru_cache(maxsize=1)
def _parser():
    from markdown_it.renderer import RendererHTML
    from myst_parser.config.main import MdParserConfig
    from myst_parser.parsers.mdit import create_md_parser

    return create_md_parser(MdParserConfig(enable_extensions=MYST_EXTENSIONS), RendererHTML)


def _message_id(text: str) -> str:
    """How Sphinx's gettext turns a node's source into a message id."""
    return text.replace("\n", " ").strip()


def _lookup(text: str, translation: Translation) -> str | None:
    key = _message_id(text)
    if not key:
        return None
    found = translation.messages.get(key)
    if found is None:
        translation.untranslated.add(key)
        return None
    translation.used.add(key)
    return found


def _options_end(body: list[str]) -> int:
    """Index of the first body line after a directive's options (``:key: value`` lines, or
    a ``---`` YAML block)."""
    if body and body[0].strip() == "---":
        for k in range(1, len(body)):
            if body[k].strip() == "---":
                return k + 1
        return 0
    k = 0
    while k < len(body) and body[k].lstrip().startswith(":") and not body[k].startswith("::"):
        k += 1
    return k


def translate_markdown(text: str, translation: Translation) -> str:
    """``text`` (MyST markdown) with every translatable unit replaced by its translation.

    Units without a finished translation stay in English (and are listed in
    ``translation.untranslated``); everything that is not a message (labels, math blocks,
    code fences, directive options, list markers) is kept byte for byte.
    """
    lines = text.split("\n")
    tokens = _parser().parse(text)
    line_edits: dict[int, list[tuple[str, str]]] = {}   # in-line replacements, in order
    block_edits: list[tuple[int, int, list[str]]] = []  # (start, end, new lines)
    parent_types: list[str] = []
    for token in tokens:
        if token.nesting == 1:
            parent_types.append(token.type)
        elif token.nesting == -1:
            parent_types.pop()
            continue
        if token.type == "inline" and token.map is not None:
            target = _lookup(token.content, translation)
            if target is None:
                continue
            start = token.map[0]
            parent = parent_types[-1] if parent_types else ""
            if parent in ("th_open", "td_open"):
                line_edits.setdefault(start, []).append((token.content, target))
                continue
            content_lines = token.content.split("\n")
            first = lines[start]
            offset = first.find(content_lines[0])
            if offset < 0:
                continue  # the source does not hold the content verbatim: keep English
            prefix = first[:offset]
            one_line = " ".join(target.split("\n")) if parent == "heading_open" else \
                target.replace("\n", "\n" + " " * len(prefix))
            block_edits.append((start, start + len(content_lines), [prefix + one_line]))
        elif token.type in ("fence", "colon_fence") and token.map is not None \
                and token.info.strip().startswith("{"):
            start, end = token.map
            name, _, argument = token.info.strip().partition("}")
            argument = argument.strip()
            if argument and name.strip().lstrip("{") not in LABEL_ARGUMENTS:
                target = _lookup(argument, translation)
                if target is not None:
                    line_edits.setdefault(start, []).append((argument, target))
            closed = end - 1 > start and lines[end - 1].strip().startswith(
                lines[start].strip()[:3])
            body_start, body_end = start + 1, end - 1 if closed else end
            body = lines[body_start:body_end]
            keep = _options_end(body)
            inner = "\n".join(body[keep:])
            if name.strip() == "{glossary":
                translated = _translate_glossary(inner, translation)
            else:
                translated = translate_markdown(inner, translation)
            if translated != inner:
                block_edits.append((body_start + keep, body_end, translated.split("\n")))
    for number, replacements in line_edits.items():
        line, cursor = lines[number], 0
        for old, new in replacements:
            at = line.find(old, cursor)
            if at < 0:
                continue
            line = line[:at] + new + line[at + len(old):]
            cursor = at + len(new)
        lines[number] = line
    for start, end, new in sorted(block_edits, key=lambda e: e[0], reverse=True):
        lines[start:end] = new
    return "\n".join(lines)


def _translate_glossary(body: str, translation: Translation) -> str:
    """A ``{glossary}`` body: entries of term lines, then an indented definition. The
    definitions are translated (as markdown) and start with the Chinese headword (the
    translation of the entry's first term, in bold); the term lines stay in English,
    because ``{term}`` roles name their target by the English term."""
    out, definition, headwords = [], [], []

    def flush():
        if definition:
            indent = min(len(x) - len(x.lstrip()) for x in definition if x.strip())
            text = "\n".join(x[indent:] for x in definition)
            translated = translate_markdown(text, translation)
            if headwords:
                translated = f"**{headwords[0]}** {translated}"
            headwords.clear()
            out.extend(" " * indent + x if x else x for x in translated.split("\n"))
            definition.clear()

    for line in body.split("\n"):
        if line.startswith((" ", "\t")) or (not line.strip() and definition):
            definition.append(line)
        else:
            flush()
            term = _message_id(line)
            if term in translation.messages:
                translation.used.add(term)
                if translation.messages[term] != term and not headwords:
                    headwords.append(translation.messages[term])
            out.append(line)
    flush()
    return "\n".join(out)


def _cell_source(cell: Mapping) -> str:
    source = cell.get("source", "")
    return "".join(source) if isinstance(source, list) else source


def translate_notebook(notebook: Mapping, translation: Translation) -> dict:
    """A copy of ``notebook`` whose markdown cells are translated; code and raw cells,
    outputs and metadata unchanged."""
    result = copy.deepcopy(dict(notebook))
    for cell in result["cells"]:
        if cell["cell_type"] != "markdown":
            continue
        text = translate_markdown(_cell_source(cell), translation)
        cell["source"] = text.splitlines(keepends=True)
    return result


def _math_blocks(text: str) -> list[str]:
    out = []
    for token in _parser().parse(text):
        if token.type.startswith("math_block") or token.type == "amsmath":
            out.append(token.content)
        elif token.type in ("fence", "colon_fence") and token.info.strip().startswith("{"):
            out.extend(_math_blocks(token.content))
            if token.info.strip().startswith("{math}"):
                out.append(token.content)
    return out


def _strings(obj) -> list[str]:
    if isinstance(obj, str):
        return [obj]
    if isinstance(obj, list):
        if all(isinstance(x, str) for x in obj):
            return ["".join(obj)]
        return [s for x in obj for s in _strings(x)]
    if isinstance(obj, Mapping):
        return [s for x in obj.values() for s in _strings(x)]
    return []


REASONS = {
    "math": "display math: the same in both languages",
    "code-metadata": "a caption in a code cell's metadata (code cells stay identical; "
                     "JupyterLab does not show it, the HTML shows it translated)",
    "output": "text printed by a code cell (outputs stay identical)",
    "toc": "a part caption of _toc.yml (the HTML's sidebar; a notebook has none)",
}
# A glossary term line is "used" although it stays in English: the ``{term}`` roles of
# every page name their target by it.


def _squeezed(text: str) -> str:
    """``text`` without whitespace: display math is compared whatever its line breaks."""
    return "".join(text.split())


def _toc_captions() -> set[str]:
    root = book_root()
    toc = (root / "_toc.yml") if root else None
    if toc is None or not toc.is_file():
        return set()
    return {line.split(":", 1)[1].strip() for line in toc.read_text().splitlines()
            if line.strip().startswith("- caption:")}


def unused_messages(notebook: Mapping, translation: Translation) -> dict[str, str | None]:
    """Each finished message of the page that the notebook did not use, with the key of
    its reason in :data:`REASONS`, or None where no reason applies."""
    markdown = "\n\n".join(_cell_source(c) for c in notebook["cells"]
                           if c["cell_type"] == "markdown")
    math = {_squeezed(m) for m in _math_blocks(markdown)}
    captions = _toc_captions()
    metadata = " ".join(_message_id(s) for c in notebook["cells"] if c["cell_type"] == "code"
                        for s in _strings(c.get("metadata", {})))
    outputs = " ".join(_message_id(s) for c in notebook["cells"] if c["cell_type"] == "code"
                       for s in _strings(c.get("outputs", [])))
    reasons = {}
    for msgid in translation.messages:
        if msgid in translation.used:
            continue
        if _squeezed(msgid) in math:
            reasons[msgid] = "math"
        elif msgid in captions:
            reasons[msgid] = "toc"
        elif msgid in metadata:
            reasons[msgid] = "code-metadata"
        elif msgid in outputs:
            reasons[msgid] = "output"
        else:
            reasons[msgid] = None
    return reasons


def _page_translation(root: Path, page: Path) -> Translation:
    po = root / LOCALE / f"{page.stem}.po"
    return Translation(catalog_translations(po) if po.is_file() else {})


def translate_page(root: Path, page: Path) -> tuple[str, Translation]:
    """The Chinese text of ``book/<page>`` (.ipynb or .md) and what it used."""
    translation = _page_translation(root, page)
    text = page.read_text(encoding="utf8")
    if page.suffix == ".ipynb":
        notebook = translate_notebook(json.loads(text), translation)
        return json.dumps(notebook, ensure_ascii=False, indent=1) + "\n", translation
    return translate_markdown(text, translation), translation


MARKER = ".layernorm_tutorial_zh_notebooks"
"""The file this command writes into every folder it makes: ``--force`` replaces only a
folder that holds it, never one a person made."""
_MARKER_TEXT = ("Written by python -m layernorm_tutorial.publishing.book_i18n.notebooks: "
                "a generated copy of book/ in Chinese; --force may replace this folder.\n")


def check_out_folder(root: Path, out: Path | str, *, force: bool = False,
                     option: str = "--out") -> Path:
    """``out`` resolved, if :func:`write_chinese_book` may write it now; nothing changes.

    Raises :class:`OutputFolderError` (one line naming ``option``) when ``out`` is or holds
    the repository, lies in its sources (``book/``, ...), is a file or cannot be written
    (:func:`check_output_folder`); when it exists and ``force`` is False; and when it
    exists without the :data:`MARKER` file, i.e. this command did not make it: ``--force``
    replaces only a folder this command made.
    """
    resolved = check_output_folder(out, option=option, root=root)
    if resolved.exists():
        if not force:
            raise OutputFolderError(f"{option} {out}: exists; pass --force to replace it "
                                    "(only a folder this command made), or choose a new "
                                    "folder")
        if not (resolved / MARKER).is_file():
            raise OutputFolderError(f"{option} {out}: not a folder this command made (no "
                                    f"{MARKER} file in it); remove it yourself or choose "
                                    f"another {option}")
    staging = _staging(resolved)
    if staging.exists() and not (staging / MARKER).is_file():
        raise OutputFolderError(f"{option} {out}: {staging} exists and this command did not "
                                "make it; remove it yourself or choose another "
                                f"{option}")
    return resolved


def _staging(out: Path) -> Path:
    return out.with_name(out.name + ".partial")


def _replace_folder(staging: Path, out: Path) -> None:
    """Put the finished ``staging`` folder at ``out``; an existing ``out`` (checked to hold
    the marker) is moved aside first and deleted last, so an interruption leaves either
    the old folder or the new one at ``out``, never neither."""
    old = out.with_name(f".{out.name}.replaced-{os.getpid()}")
    try:
        if out.exists():
            os.rename(out, old)
        os.rename(staging, out)
    except BaseException:
        if old.exists() and not out.exists():
            os.rename(old, out)
        raise
    shutil.rmtree(old, ignore_errors=True)


def write_chinese_book(root: Path, out: Path, *, force: bool = False,
                       report: Callable[[str], None] | None = None,
                       option: str = "--out") -> dict[str, Translation]:
    """Copy ``root/book`` to ``out`` with every page that has a catalog in Chinese.

    ``out`` is checked first (:func:`check_out_folder`): it must not exist unless
    ``force``, and then only a folder this function made (it holds :data:`MARKER`) is
    replaced. The copy is written to ``<out>.partial`` and renamed to ``out`` when
    complete; on any error or interruption the staging folder is removed and an existing
    ``out`` is left as it was. Returns each translated page's :class:`Translation`.
    """
    out = check_out_folder(root, out, force=force, option=option)
    staging = _staging(out)
    if staging.exists():  # left by a killed run; it holds the marker (checked above)
        shutil.rmtree(staging)
    done = {}
    try:
        staging.mkdir(parents=True)
        (staging / MARKER).write_text(_MARKER_TEXT, encoding="utf8")
        shutil.copytree(root / "book", staging, dirs_exist_ok=True,
                        ignore=shutil.ignore_patterns(".ipynb_checkpoints", "_build",
                                                      "__pycache__", "conftest.py", MARKER))
        for page in sorted((root / "book").iterdir()):
            if page.suffix not in PAGE_SUFFIXES or \
                    not (root / LOCALE / f"{page.stem}.po").is_file():
                continue
            text, translation = translate_page(root, page)
            (staging / page.name).write_text(text, encoding="utf8")
            done[page.name] = translation
            if report:
                report(f"{page.name}: {len(translation.used)} messages used, "
                       f"{len(translation.untranslated)} units left in English")
        _replace_folder(staging, out)
    except BaseException:
        if (staging / MARKER).is_file():
            shutil.rmtree(staging, ignore_errors=True)
        raise
    return done


def main(argv: list[str] | None = None) -> int:
    """The command; user errors end in one line and exit status 2, Ctrl-C in 130."""
    parser = argparse.ArgumentParser(
        prog="python -m layernorm_tutorial.publishing.book_i18n.notebooks",
        description="Write the Chinese notebooks and pages: a copy of book/ in Chinese, "
                    "from the English sources and the catalogs.")
    parser.add_argument("--out", type=Path, required=True,
                        help="folder to create (the Chinese copy of book/); never the "
                             "repository or a folder of its sources")
    parser.add_argument("--force", action="store_true",
                        help=f"replace an existing folder that this command made (it holds "
                             f"a {MARKER} file); any other folder is refused")
    parser.add_argument("--quiet", action="store_true", help="print only the result")
    args = parser.parse_args(argv)
    root = book_root()
    if root is None:
        parser.error("run inside the book's repository (no _toc.yml above this folder)")
    try:
        pages = write_chinese_book(root, args.out, force=args.force,
                                   report=None if args.quiet else print)
    except OutputFolderError as exc:
        print(f"{parser.prog}: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"{parser.prog}: interrupted", file=sys.stderr)
        return 130
    print(f"{len(pages)} Chinese pages written to {args.out.resolve()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
