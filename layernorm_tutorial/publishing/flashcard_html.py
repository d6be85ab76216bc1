r"""MyST Markdown of the interview answers -> the HTML of an Anki card, in either edition.

The cards are rendered from the notebooks' MyST: roles become text or links into the HTML
book, ``$...$`` becomes ``\(...\)`` and ``$$...$$`` becomes ``\[...\]`` (the delimiters
Anki's MathJax reads). For the Chinese card, every paragraph, list item, heading and table
cell is first replaced by its translation from the Chinese edition's catalog
(``locales/zh_CN/LC_MESSAGES/book/<chapter>.po``), the same text the Chinese HTML shows.
"""

from __future__ import annotations

import html
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

LOCALE_CATALOGS = Path("locales") / "zh_CN" / "LC_MESSAGES"
ZH_SUBDIR = "zh"

_ROLE = re.compile(r"\{(?P<role>[a-z:]+)\}`(?P<content>[^`]+)`")
_COMMENT_LINE = re.compile(r"^%.*$\n?", re.M)


class MissingTranslation(LookupError):
    """A message of an interview answer has no (non-fuzzy) translation in its catalog."""


def message_key(text: str) -> str:
    """A paragraph as Sphinx's gettext builder writes its msgid: lines joined by spaces."""
    return " ".join(line.strip() for line in text.strip().splitlines())


@dataclass
class Translations:
    """The Chinese edition's messages of the pages that cards link to or quote."""

    root: Path
    _pages: dict[str, dict[str, str]] = field(default_factory=dict)

    def page(self, stem: str) -> dict[str, str]:
        if stem not in self._pages:
            from layernorm_tutorial.publishing.book_i18n.catalogs import entries

            po = self.root / LOCALE_CATALOGS / "book" / f"{stem}.po"
            if not po.is_file():
                raise MissingTranslation(f"no Chinese catalog {po} for the chapter {stem!r}")
            self._pages[stem] = {e.msgid: e.msgstr for e in entries(po)
                                 if e.msgstr and not e.fuzzy}
        return self._pages[stem]

    def of(self, stem: str, text: str) -> str:
        """The translation of ``text`` (one Markdown block of page ``stem``)."""
        key = message_key(text)
        translated = self.page(stem).get(key)
        if translated is None:
            raise MissingTranslation(
                f"{stem}.po has no translation of {key[:70]!r}: run `python -m "
                "layernorm_tutorial.publishing.book_build update-po` and translate it")
        return translated

    def title_or_same(self, stem: str, text: str) -> str:
        """A heading's translation, or the heading itself where the catalog has none."""
        try:
            return self.of(stem, text)
        except MissingTranslation:
            return text


def citations(bib_path: Path) -> dict[str, str]:
    """Citation key -> "Author et al. (year)", from the book's bibliography."""
    text = bib_path.read_text(encoding="utf-8") if bib_path.exists() else ""
    cites: dict[str, str] = {}
    for entry in re.finditer(r"@\w+\{([^,]+),(.*?)\n\}", text, re.S):
        authors = re.search(r"author\s*=\s*[{\"](.+?)[}\"],?\s*\n", entry.group(2), re.S)
        year = re.search(r"year\s*=\s*[{\"]?(\d{4})", entry.group(2))
        names = [a.strip() for a in (authors.group(1) if authors else "").split(" and ")]
        surname = names[0].split(",")[0].split()[-1].strip("{}") if names and names[0] else "?"
        who = surname if len(names) == 1 else (f"{surname} and {names[1].split(',')[0].strip('{}')}"
                                               if len(names) == 2 else f"{surname} et al.")
        cites[entry.group(1).strip()] = f"{who} ({year.group(1) if year else 'n.d.'})"
    return cites


@dataclass
class Renderer:
    """Turns the MyST of a model answer into the HTML of an Anki field.

    ``html_root`` is the URL of the built book's root (the folder with ``index.html``);
    chapter ``x`` is at ``{html_root}/book/x.html``, in Chinese at
    ``{html_root}/zh/book/x.html``. ``labels`` maps a label to its heading, ``chapters`` a
    chapter stem to its title and ``chapter_of_label`` a label to its chapter stem.
    With ``translations``, the card is Chinese.
    """

    html_root: str
    labels: dict[str, str]
    chapters: dict[str, str]
    citations: dict[str, str]
    chapter_of_label: dict[str, str]
    translations: Translations | None = None

    def page_url(self, stem: str) -> str:
        edition = f"{ZH_SUBDIR}/" if self.translations else ""
        return f"{self.html_root}/{edition}book/{stem}.html"

    def _title(self, stem: str, text: str) -> str:
        return self.translations.title_or_same(stem, text) if self.translations else text

    def _role(self, match: re.Match) -> str:
        role, content = match.group("role"), match.group("content")
        explicit = re.match(r"^(?P<text>.*?)\s*<(?P<target>[^>]+)>$", content, re.S)
        text, target = (explicit.group("text"), explicit.group("target")) if explicit \
            else (None, content)
        if role == "term":
            return text or target
        if role.startswith("cite"):
            return "; ".join(self.citations.get(k.strip(), k.strip()) for k in target.split(","))
        if role == "doc":
            name = target.split("/")[-1]
            shown = text or self._title(name, self.chapters.get(name, name))
            return f"[{shown}]({self.page_url(name)})"
        if role in ("ref", "numref"):
            page = self.chapter_of_label.get(target)
            shown = text or (self._title(page, self.labels[target])
                             if page and target in self.labels else target)
            return f"[{shown}]({self.page_url(page)}#{target})" if page else shown
        if role == "eq":
            return f"({target})"
        return text or target

    def to_html(self, myst: str, chapter: str = "", translated: bool = False) -> str:
        """HTML of ``myst``, blocks of chapter ``chapter``; for a Chinese card each block is
        replaced by its translation first, unless ``myst`` is ``translated`` already."""
        md = _markdown()
        tokens = md.parse(_COMMENT_LINE.sub("", myst))
        for token in tokens:
            if token.type != "inline" or not token.content.strip():
                continue
            text = token.content
            if self.translations is not None and not translated:
                text = self.translations.of(chapter, text)
            text = _ROLE.sub(self._role, text)
            token.content = text
            token.children = md.parseInline(text)[0].children
        return md.renderer.render(tokens, md.options, {}).strip()


def _markdown():
    from markdown_it import MarkdownIt
    from mdit_py_plugins.dollarmath import dollarmath_plugin

    md = MarkdownIt("commonmark", {"html": False}).enable("table")
    md.use(dollarmath_plugin, double_inline=True)
    # markdown-it refuses file: links by default, and the default book is a local build
    md.validateLink = lambda url: not url.strip().lower().startswith(  # type: ignore[method-assign]
        ("javascript:", "vbscript:", "data:"))
    inline: Callable = lambda _r, tokens, i, *_: f"\\({html.escape(tokens[i].content)}\\)"  # noqa: E731
    block: Callable = lambda _r, tokens, i, *_: f"\\[{html.escape(tokens[i].content)}\\]\n"  # noqa: E731
    md.add_render_rule("math_inline", inline)
    md.add_render_rule("math_block", block)
    md.add_render_rule("math_block_label", block)
    return md
