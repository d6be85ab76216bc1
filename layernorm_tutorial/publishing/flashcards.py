r"""An Anki deck of the interview questions, generated from the interview chapters themselves.

::

    python -m layernorm_tutorial.publishing.flashcards --out layernorm_interview.apkg [--lang
    en|zh|both] [--force]

The notebooks are the single source: each question is a markdown cell of the form ::

    (iq-label)=
    ### English title

    **中文标题**

    :::{admonition} Model answer · 参考答案
    :class: dropdown

    **Short answer:** one or two sentences a candidate can say aloud.

    The fuller answer, with $math$ and {ref}`cross-references <label>`.
    :::

and becomes one note: the front shows the English and/or Chinese title, the back the short
answer, the full answer and a link to the question in the HTML book. ``--lang zh`` makes the
whole card Chinese: the answer is the Chinese edition's text (the translation catalogs in
``locales/``) and the link goes to the Chinese page. Inline math ``$...$`` becomes ``\(...\)``
and display math ``$$...$$`` becomes ``\[...\]``, the delimiters Anki's MathJax
reads (see :mod:`layernorm_tutorial.publishing.flashcard_html`). Each note's GUID derives
from the question's label and the deck and note-type ids are fixed, so importing an updated
deck updates the cards instead of duplicating them.

The deck is written through a temporary file in the folder of ``--out``, renamed when
complete, so an interruption leaves an existing deck as it was; an existing deck is
replaced only with ``--force``. Errors a user can fix end in one line and exit status 2.
"""

from __future__ import annotations

import argparse
import html
import os
import re
import sys
import tempfile
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from layernorm_tutorial._cli import OutputPathError, check_not_a_source
from layernorm_tutorial.publishing.flashcard_html import (
    MissingTranslation,
    Renderer,
    Translations,
    citations,
)

BOOK_DIR = Path(__file__).resolve().parents[2] / "book"
CHAPTERS = ("interview", "interview_advanced", "interview_practice", "interview_deployment")
DECK_ID = 1_734_905_117  # fixed: re-importing updates the same deck
MODEL_ID = 1_734_905_118  # fixed: the note type keeps its identity across versions
DECK_NAME = "Layer Normalization · 层归一化 interview questions"
SECTION_TAGS = {"fundamentals": "fundamentals", "derivations": "derivations",
                "systems": "systems", "traps": "traps"}

_LABEL = re.compile(r"^\((?P<label>[A-Za-z0-9_.:-]+)\)=\s*$", re.M)
_QUESTION = re.compile(r"^### +(?P<title>.+?)\s*$", re.M)
_SECTION = re.compile(r"^## +(?P<title>.+?)\s*$", re.M)
_CHINESE_TITLE = re.compile(r"^\*\*(?P<title>[^*\n]*[\u4e00-\u9fff][^*\n]*)\*\*\s*$", re.M)
_ANSWER = re.compile(
    r"^(?P<fence>:{3,})\{admonition\} *Model answer[^\n]*\n(?P<body>.*?)^(?P=fence)\s*$",
    re.M | re.S)
_OPTION = re.compile(r"^:[a-z-]+:.*$", re.M)
_SHORT_PREFIX = re.compile(r"^\*\*(Short answer|简答)[:：]?\*\*[:：]?\s*", re.I)
_CJK = re.compile(r"[\u4e00-\u9fff]")


class FlashcardError(ValueError):
    """A chapter or an argument the deck cannot be built from."""


@dataclass(frozen=True)
class Question:
    """One interview question as written in its chapter."""

    chapter: str        # notebook stem, e.g. "interview"
    label: str          # the MyST label before the heading, e.g. "iq-what-is-ln"
    section: str        # tag of the ``##`` section it sits in, e.g. "fundamentals"
    title_en: str
    title_zh: str
    short_answer: str   # MyST markdown: the first paragraph of the model answer, unprefixed
    answer: str         # MyST markdown: the rest of the model answer
    short_paragraph: str = ""  # that first paragraph as written ("**Short answer:** ...")


def _read_markdown_cells(path: Path) -> list[str]:
    import nbformat

    notebook = nbformat.read(path, as_version=4)
    return ["".join(cell.source) for cell in notebook.cells if cell.cell_type == "markdown"]


def _section_tag(heading: str) -> str:
    first_word = re.sub(r"[^a-z]", "", heading.split()[0].lower()) if heading.split() else ""
    return SECTION_TAGS.get(first_word, first_word or "general")


def parse_questions(path: Path | str) -> list[Question]:
    """Every question of one interview notebook, in order (see the module docstring).

    Raises :class:`FlashcardError` naming the notebook when it holds no question, or when a
    question lacks its label, Chinese title or model answer.
    """
    path = Path(path)
    questions: list[Question] = []
    section = "general"
    for source in _read_markdown_cells(path):
        for match in _SECTION.finditer(source):
            section = _section_tag(match.group("title"))
        heading = _QUESTION.search(source)
        answer = _ANSWER.search(source)
        if heading is None or answer is None:
            continue
        label = _LABEL.search(source[: heading.start()])
        zh = _CHINESE_TITLE.search(source, heading.end())
        if label is None or zh is None:
            missing = "label line `(label)=`" if label is None else "Chinese title **...**"
            raise FlashcardError(f"{path.name}: question {heading.group('title')!r} has no "
                                 f"{missing} before its model answer")
        body = _OPTION.sub("", answer.group("body")).strip()
        paragraphs = re.split(r"\n\s*\n", body, maxsplit=1)
        short = _SHORT_PREFIX.sub("", paragraphs[0].strip())
        rest = paragraphs[1].strip() if len(paragraphs) > 1 else ""
        questions.append(Question(path.stem, label.group("label"), section,
                                  heading.group("title").strip(), zh.group("title").strip(),
                                  short, rest, paragraphs[0].strip()))
    if not questions:
        raise FlashcardError(f"{path}: no interview questions found (expected a `### ` heading "
                             "and a `{admonition} Model answer` dropdown in one cell)")
    return questions


# --- MyST markdown -> Anki HTML ----------------------------------------------------------

def _titles_of(book_dir: Path) -> tuple[dict[str, str], dict[str, str]]:
    """Label -> section title and chapter -> title, read from every notebook of the book."""
    labels: dict[str, str] = {}
    chapters: dict[str, str] = {}
    for path in sorted(book_dir.glob("*.ipynb")):
        for source in _read_markdown_cells(path):
            for match in re.finditer(r"^\(([^)\s]+)\)=\s*\n+#+ +(.+?)\s*$", source, re.M):
                labels.setdefault(match.group(1), match.group(2))
            title = re.search(r"^# +(.+?)\s*$", source, re.M)
            if title and path.stem not in chapters:
                chapters[path.stem] = title.group(1)
    return labels, chapters


# --- the deck ---------------------------------------------------------------------------

_CSS = """.card { font-family: system-ui, sans-serif; font-size: 18px; text-align: left;
  max-width: 46em; margin: auto; line-height: 1.45; }
.zh { font-size: 20px; }  .en { font-weight: 600; }
.short { border-left: 4px solid #2a7ae2; padding: .3em .7em; background: #eef4fc; }
.answer table { border-collapse: collapse; } .answer td, .answer th { border: 1px solid #aaa;
  padding: 2px 6px; }
.link { font-size: 14px; margin-top: 1em; color: #555; }"""


def _front(question: Question, lang: str) -> str:
    parts = []
    if lang in ("en", "both"):
        parts.append(f'<div class="en">{html.escape(question.title_en)}</div>')
    if lang in ("zh", "both"):
        parts.append(f'<div class="zh">{html.escape(question.title_zh)}</div>')
    return "\n".join(parts)


def _note_type():
    import genanki

    return genanki.Model(
        MODEL_ID, "LayerNorm interview question (layernorm_tutorial)",
        fields=[{"name": n} for n in ("Label", "Front", "English", "Chinese", "Short answer",
                                      "Answer", "Link")],
        templates=[{
            "name": "Question -> answer",
            "qfmt": "{{Front}}",
            "afmt": '{{FrontSide}}<hr id="answer"><div class="short">{{Short answer}}</div>'
                    '<div class="answer">{{Answer}}</div><div class="link">{{Link}}</div>',
        }],
        css=_CSS,
        sort_field_index=1,
    )


def build_notes(questions: Iterable[Question], renderer: Renderer, lang: str = "both"):
    """One genanki note per question; the GUID is a hash of the question's label.

    A Chinese renderer (``renderer.translations``) writes the answer and the link in
    Chinese; a message without a translation is a :class:`FlashcardError`."""
    import genanki

    model = _note_type()
    chinese = renderer.translations is not None
    notes = []
    for q in questions:
        url = f"{renderer.page_url(q.chapter)}#{q.label}"
        title = q.title_zh if chinese else q.title_en
        link = (f'{"本书：" if chinese else "Book: "}<a href="{html.escape(url)}">'
                f"{html.escape(title)}</a> ({q.label})")
        try:
            if chinese:
                short = _SHORT_PREFIX.sub("", renderer.translations.of(q.chapter,
                                                                       q.short_paragraph))
                short_html = renderer.to_html(short, q.chapter, translated=True)
            else:
                short_html = renderer.to_html(q.short_answer, q.chapter)
            answer_html = renderer.to_html(q.answer, q.chapter)
        except MissingTranslation as exc:
            raise FlashcardError(f"{q.chapter}: question {q.label}: {exc}") from None
        fields = [q.label, _front(q, lang), html.escape(q.title_en), html.escape(q.title_zh),
                  short_html, answer_html, link]
        notes.append(genanki.Note(model=model, fields=fields, guid=genanki.guid_for(q.label),
                                  tags=[q.section, q.chapter]))
    return notes


def write_deck(out: Path | str, notebooks: Sequence[Path | str] | None = None, *,
               lang: str = "both", book_url: str | None = None,
               book_dir: Path | str | None = None, force: bool = False) -> int:
    """Write the ``.apkg`` deck to ``out`` and return the number of notes.

    An existing ``out`` is replaced only if ``force`` (:class:`FlashcardError` otherwise,
    before any work); the deck is written atomically (:func:`write_package_atomically`).

    ``notebooks`` defaults to the two interview chapters in ``book_dir`` (the repository's
    ``book/``). ``book_url`` is the root of the built HTML book, the folder with
    ``index.html`` (default: this checkout's ``_build/html`` as a ``file://`` URL); the
    cards link to ``{book_url}/book/<chapter>.html``, or with ``lang="zh"`` to the Chinese
    edition's ``{book_url}/zh/book/<chapter>.html``.
    """
    import genanki

    if lang not in ("en", "zh", "both"):
        raise FlashcardError(f"lang must be 'en', 'zh' or 'both', got {lang!r}")
    book_dir = Path(book_dir) if book_dir is not None else BOOK_DIR
    paths = [Path(p) for p in notebooks] if notebooks else [book_dir / f"{c}.ipynb"
                                                             for c in CHAPTERS]
    out = Path(out)
    check_writable(out, force=force)
    questions = [q for path in paths for q in parse_questions(path)]
    seen: dict[str, str] = {}
    for q in questions:
        if q.label in seen:
            raise FlashcardError(f"label {q.label!r} is used twice ({seen[q.label]}, {q.chapter})")
        seen[q.label] = q.chapter
    labels, chapters = _titles_of(book_dir)
    url = book_url or (book_dir.parent / "_build" / "html").resolve().as_uri()
    translations = Translations(book_dir.parent) if lang == "zh" else None
    renderer = Renderer(url.rstrip("/"), labels, chapters,
                        citations(book_dir.parent / "references.bib"),
                        _label_pages(book_dir), translations)
    deck = genanki.Deck(DECK_ID, DECK_NAME)
    for note in build_notes(questions, renderer, lang):
        deck.add_note(note)
    write_package_atomically(genanki.Package(deck), out)
    return len(questions)


def write_package_atomically(package, out: Path) -> Path:
    """Write a ``genanki.Package`` to ``out`` via ``.{name}.{pid}.tmp`` in the same folder
    and a rename: an interrupted write never leaves half a deck at ``out``.

    genanki builds the collection in a ``tempfile.mkstemp()`` SQLite file that it never
    deletes; it is made here in a temporary folder that is removed afterwards."""
    out = Path(out)
    temporary = out.with_name(f".{out.name}.{os.getpid()}.tmp")
    try:
        with tempfile.TemporaryDirectory(prefix="layernorm_tutorial_deck_") as scratch:
            saved, tempfile.tempdir = tempfile.tempdir, scratch
            try:
                package.write_to_file(str(temporary))
            finally:
                tempfile.tempdir = saved
        os.replace(temporary, out)
    except BaseException:
        temporary.unlink(missing_ok=True)
        raise
    return out


def _label_pages(book_dir: Path) -> dict[str, str]:
    pages: dict[str, str] = {}
    for path in sorted(book_dir.glob("*.ipynb")):
        for source in _read_markdown_cells(path):
            for match in _LABEL.finditer(source):
                pages.setdefault(match.group("label"), path.stem)
    return pages


def check_writable(out: Path, force: bool = False) -> None:
    """Fail before any work if ``out`` cannot be written (missing folder, no permission),
    or if it exists and ``force`` is False."""
    if out.suffix != ".apkg":
        raise FlashcardError(f"--out must end in .apkg, got {str(out)!r}")
    if out.is_dir():
        raise FlashcardError(f"--out {str(out)!r} is a directory, expected a .apkg file path")
    try:
        check_not_a_source(out)
    except OutputPathError as exc:
        raise FlashcardError(str(exc)) from None
    if out.exists() and not force:
        raise FlashcardError(f"--out {str(out)!r}: the file exists; pass --force to replace "
                             "it, or choose a new path")
    parent = out.parent if str(out.parent) else Path(".")
    if not parent.is_dir():
        raise FlashcardError(f"cannot write {str(out)!r}: folder {str(parent)!r} does not exist")
    existed = out.exists()
    try:
        with open(out, "ab"):
            pass
        if not existed:
            out.unlink()
    except OSError as exc:
        raise FlashcardError(f"cannot write {str(out)!r}: {exc.strerror}") from None


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m layernorm_tutorial.publishing.flashcards",
        description="Write an Anki deck (.apkg) of the book's interview questions.")
    parser.add_argument("--out", required=True, help="path of the .apkg file to write")
    parser.add_argument("--lang", choices=("en", "zh", "both"), default="both",
                        help="en: English cards; zh: Chinese cards (title, answer and link, "
                             "from the Chinese edition); both: both titles on the front, the "
                             "answer in English (default: both)")
    parser.add_argument("--book-url", default=None,
                        help="URL of the built HTML book's root, the folder with index.html, "
                             "for the cards' links (default: this checkout's _build/html)")
    parser.add_argument("--force", action="store_true",
                        help="replace an existing --out file")
    args = parser.parse_args(argv)
    if not args.out:
        print("error: --out: empty path", file=sys.stderr)
        return 2
    if args.book_url is not None and not args.book_url.strip():
        print("error: --book-url: empty, expected the URL of the built HTML book's root "
              "(or leave it out for this checkout's _build/html)", file=sys.stderr)
        return 2
    try:
        count = write_deck(args.out, lang=args.lang, book_url=args.book_url,
                           force=args.force)
    except FlashcardError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    print(f"wrote {count} notes to {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
