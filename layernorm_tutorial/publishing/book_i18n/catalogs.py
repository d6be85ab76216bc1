"""The book's translation catalogs (``locales/<lang>/LC_MESSAGES/book/<page>.po``).

What the tests check and the translators' tool (``po_tool``) uses:

- :func:`markup_tokens`: the parts of a message that must survive translation unchanged:
  roles (``{term}`gain <Gain>``` counts as role ``term`` with target ``Gain``: the shown
  text may be translated, the target may not), inline code, ``$...$`` and ``$$...$$`` math,
  URLs and link targets, footnote references, labels ``(name)=``, substitutions ``{{ x }}``.
- :func:`glossary_terms`: the English terms of ``book/glossary.md`` and their Chinese
  forms (the ``中文：...`` line of each entry), the book's Chinese terminology.
- :func:`looks_untranslatable`: messages with no prose (a lone ``{doc}`x```, display math,
  a code name in a table cell): their translation is the message itself.
"""

from __future__ import annotations

import io
import re
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

from babel.messages.catalog import Catalog
from babel.messages.pofile import read_po, write_po

from layernorm_tutorial._cli import write_bytes_atomically

# Roles whose content is "shown text <target>": the shown text may be translated.
TITLED_ROLES = {"term", "doc", "ref", "numref", "download", "any", "eq"}

ROLE = re.compile(r"\{(?P<name>[a-zA-Z][\w:.+-]*)\}(?P<ticks>`+)(?P<content>.+?)(?P=ticks)", re.S)
CODE = re.compile(r"(?P<ticks>`+)(?P<content>.+?)(?P=ticks)", re.S)
DISPLAY_MATH = re.compile(r"\$\$.+?\$\$", re.S)
INLINE_MATH = re.compile(r"(?<![\\$])\$(?!\s)[^$]+?(?<![\s\\])\$(?!\$)")
#: A link to an external page, ``[title](https://...)``: its title is quoted as the page
#: has it (escaped brackets allowed inside), so term checks skip it.
EXTERNAL_LINK = re.compile(r"\[(?:\\.|[^\]\\])*\]\(https?://[^)\s]*\)")
LINK_TARGET = re.compile(r"\]\((?P<target>[^)\s]+)\)")
URL = re.compile(r"<?https?://[^\s)>]+>?")
FOOTNOTE = re.compile(r"\[\^[^\]]+\]")
LABEL = re.compile(r"^\([\w:.-]+\)=$", re.M)
SUBSTITUTION = re.compile(r"\{\{[^}]+\}\}")
TARGET_IN_ANGLES = re.compile(r"<(?P<target>[^<>]+)>\s*$", re.S)

CJK = re.compile(r"[\u3400-\u9fff]")
LATEX_COMMAND = re.compile(r"\\[a-zA-Z]+")
# A word to translate: three letters or more, or one of the two-letter English words a table
# cell or a short phrase may consist of ("no", "N (or B·T)"); other one- and two-letter
# tokens are symbols (x, dx, fp).
WORD = re.compile(r"[A-Za-z]{3,}|\b(?:no|or|of|on|in|to|by|is|as|at|if|an|be|do|up|we)\b")


def role_key(name: str, content: str) -> str:
    """How a role is compared: ``term:Gain`` for ``{term}`gain <Gain>```; the whole
    content for roles without a shown text (``cite``, ``glue``, ``math``...)."""
    if name in TITLED_ROLES:
        match = TARGET_IN_ANGLES.search(content)
        target = match.group("target") if match else content
        if name == "term":
            target = target.lower()
        return f"{{{name}}}{target.strip()}"
    return f"{{{name}}}`{content}`"


def markup_tokens(text: str) -> Counter:
    """The protected parts of a MyST message, as a multiset (see the module docstring)."""
    tokens: Counter = Counter()

    def take(pattern: re.Pattern, rest: str, key) -> str:
        for match in pattern.finditer(rest):
            tokens[key(match)] += 1
        return pattern.sub(" ", rest)

    rest = take(ROLE, text, lambda m: role_key(m.group("name"), m.group("content")))
    rest = take(CODE, rest, lambda m: f"`{m.group('content').strip()}`")
    rest = take(DISPLAY_MATH, rest, lambda m: m.group(0))
    rest = take(INLINE_MATH, rest, lambda m: m.group(0))
    rest = take(LINK_TARGET, rest, lambda m: f"]({m.group('target')})")
    rest = take(URL, rest, lambda m: m.group(0).strip("<>"))
    rest = take(FOOTNOTE, rest, lambda m: m.group(0))
    rest = take(LABEL, rest, lambda m: m.group(0))
    take(SUBSTITUTION, rest, lambda m: "".join(m.group(0).split()))
    return tokens


def missing_or_extra_tokens(msgid: str, msgstr: str) -> tuple[Counter, Counter]:
    """(tokens of ``msgid`` missing from ``msgstr``, tokens ``msgstr`` adds)."""
    source, target = markup_tokens(msgid), markup_tokens(msgstr)
    return source - target, target - source


def literal_asterisks(text: str) -> int:
    """How many ``*`` a Markdown renderer leaves as text (outside code and math): emphasis
    that does not render, e.g. ``**“归一化”**之后`` (CommonMark's flanking rules: bold that
    starts or ends with punctuation needs a space or punctuation outside it)."""
    from markdown_it import MarkdownIt

    text = DISPLAY_MATH.sub(" ", INLINE_MATH.sub(" ", ROLE.sub(" ", text)))
    html = MarkdownIt("commonmark").renderInline(text)
    return re.sub(r"<code>.*?</code>", " ", html, flags=re.S).count("*")


def prose(text: str) -> str:
    """``text`` without its protected parts and LaTeX commands: what a translator translates."""
    for pattern in (ROLE, CODE, DISPLAY_MATH, INLINE_MATH, URL, FOOTNOTE, LABEL, SUBSTITUTION):
        text = pattern.sub(" ", text)
    return LATEX_COMMAND.sub(" ", text)


def looks_untranslatable(msgid: str) -> bool:
    """True for a message with no words to translate: only roles that show their target's
    own (translated) title, code, math, numbers and punctuation, or display-math source.
    A message with Chinese in it is never copied (the interview chapters' Chinese titles
    are swapped with their English ones: see the translator guide)."""
    if CJK.search(msgid):
        return False
    shown_text = [
        m for m in ROLE.finditer(msgid)
        if m.group("name") in {"term"} or TARGET_IN_ANGLES.search(m.group("content"))
    ]
    if shown_text:
        return False
    return not WORD.search(prose(msgid))


# --------------------------------------------------------------------------------------
# Reading catalogs
# --------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Entry:
    """One message of a catalog."""

    catalog: str
    msgid: str
    msgstr: str
    fuzzy: bool


def read_catalog(path: Path) -> Catalog:
    with open(path, "rb") as handle:
        return read_po(handle, abort_invalid=True)


def write_catalog(path: Path, catalog: Catalog) -> None:
    """Write ``catalog`` to ``path`` atomically: the whole text is rendered first, then
    written to a temporary file beside ``path`` and renamed over it, so an interrupted
    write (an error, Ctrl-C, a kill) leaves the old catalog as it was."""
    buffer = io.BytesIO()
    write_po(buffer, catalog, width=76, omit_header=False, include_previous=True)
    write_bytes_atomically(path, buffer.getvalue())


def book_root(start: Path | None = None) -> Path | None:
    """The book's repository root: the folder holding ``_config.yml`` and ``_toc.yml``,
    ``start`` (default: the current folder) or one of its parents; None if there is none."""
    here = (start or Path.cwd()).resolve()
    for candidate in (here, *here.parents):
        if (candidate / "_config.yml").is_file() and (candidate / "_toc.yml").is_file():
            return candidate
    return None


def entries(path: Path) -> list[Entry]:
    """The messages of one .po file (the header entry excluded)."""
    catalog = read_catalog(path)
    return [
        Entry(str(path), message.id, message.string or "", message.fuzzy)
        for message in catalog
        if message.id and isinstance(message.id, str)
    ]


def catalog_files(locale_dir: Path, lang: str = "zh_CN") -> list[Path]:
    return sorted((locale_dir / lang / "LC_MESSAGES").rglob("*.po"))


def message_ids(po_or_pot: Path) -> set[str]:
    return {entry.msgid for entry in entries(po_or_pot)}


EXERCISE_TITLE = re.compile(
    r"^[ \t]*(?:`{3,}|:{3,})\{exercise(?:-start)?\}[ \t]*(?P<title>\S.*?)[ \t]*$", re.M)


def exercise_titles(markdown: str) -> list[str]:
    """The titles of the ``{exercise}`` directives in ``markdown`` (their argument: a
    message of the page; ``{solution}``'s argument is a label, not a title)."""
    return [match.group("title") for match in EXERCISE_TITLE.finditer(markdown)]


def bilingual_parts(title: str) -> tuple[str, str] | None:
    """``("Fundamentals", "基础")`` for a title written "English · 中文" (the Chinese
    edition shows the Chinese part alone); None for any other title."""
    english, sep, chinese = title.rpartition(" · ")
    if sep and CJK.search(chinese) and not CJK.search(english):
        return english.strip(), chinese.strip()
    return None


def is_chinese_title(msgid: str) -> bool:
    """A bold line with Chinese in it: ``**什么是层归一化？**`` (the interview chapters put
    one under each English question heading)."""
    return (msgid.startswith("**") and msgid.endswith("**") and len(msgid) > 4
            and bool(CJK.search(msgid)))


def interview_title_pairs(msgids: list[str]) -> list[tuple[str, str]]:
    """(English heading, bold Chinese title) for each heading followed by its Chinese
    title, in catalog order. In the Chinese edition the heading becomes the Chinese title
    and the bold line the English question in italics (see the translator guide)."""
    return [
        (heading, title) for heading, title in zip(msgids[:-1], msgids[1:], strict=True)
        if not CJK.search(heading) and not heading.startswith("*") and is_chinese_title(title)
    ]


# The Chinese edition's house terms (locales/zh_CN/STYLE.md, "One term per concept") that a
# Chinese title in an English source may predate: the Chinese heading shows the house term.
TITLE_TERMS = (
    ("是访存密集型（memory-bound）算子", "是访存受限的"),
    ("访存密集型", "访存受限"),
    ("Pre-LN", "前置 LN"),
    ("Post-LN", "后置 LN"),
    ("批大小", "批量大小"),
    ("新批次", "新批量"),
    ("DyT（Dynamic Tanh）", "DyT（动态双曲正切）"),
    # BN folded into a convolution is 折叠 (folding); 融合 is kernel fusion (融合算子).
    ("融合进前面的卷积层", "折叠进前面的卷积层"),
    (" Dropout ", " dropout "),
)


def house_terms(title: str) -> str:
    """``title`` with :data:`TITLE_TERMS` applied (no space left between a Chinese
    character and 前置/后置), without a final 。 (a heading ends without one; a
    question keeps its ？)."""
    for old, new in TITLE_TERMS:
        title = title.replace(old, new)
    title = re.sub(r"([\u3400-\u9fff]) (前置|后置) LN", r"\1\2 LN", title)
    return re.sub(r"。+$", "", title)


def swapped_titles(heading: str, title: str, house: bool = True) -> tuple[str, str]:
    """The translations of a pair: (Chinese title without the bold, with the house terms
    unless ``house`` is False; the English question in italics)."""
    chinese = title[2:-2].strip()
    return (house_terms(chinese) if house else chinese), f"*{heading}*"


# --------------------------------------------------------------------------------------
# The glossary's Chinese terms
# --------------------------------------------------------------------------------------
@dataclass(frozen=True)
class GlossaryEntry:
    """One glossary entry: its English headwords and the Chinese forms of its 中文 line."""

    headwords: tuple[str, ...]
    chinese: tuple[str, ...]

    def accepted_for(self, headword: str) -> tuple[str, ...]:
        """The Chinese forms a translation of ``headword`` must use. For ``A / B`` entries
        with as many headwords as Chinese forms, the form in the same position; else the
        entry's forms for its first headword, and none (free wording) for its aliases
        (``BN``, ``Running variance``)."""
        lowered = [h.lower() for h in self.headwords]
        if headword.lower() not in lowered:
            raise KeyError(headword)
        position = lowered.index(headword.lower())
        if len(self.chinese) > 1 and len(self.chinese) == len(self.headwords):
            return (self.chinese[position],)
        return self.chinese if position == 0 else ()


CHINESE_LINE = re.compile(r"^\s+中文：(?P<terms>.+?)[.。]\s")
PARENTHESES = re.compile(r"（[^）]*）|\([^)]*\)")


def chinese_forms(terms: str) -> tuple[str, ...]:
    """``批量归一化（BN）`` -> ``('批量归一化',)``; ``贝塞尔校正 / 无偏方差`` -> both;
    ``数值稳定项 ε`` -> ``('数值稳定项',)`` (a trailing symbol is not part of the term;
    a trailing Latin word is: ``后置 LN``)."""
    forms = []
    for part in PARENTHESES.sub("", terms).split("/"):
        part = part.strip()
        if CJK.search(part):
            part = re.sub(r"\s+[^\sA-Za-z\u3400-\u9fff]+$", "", part)
        if part:
            forms.append(part)
    return tuple(forms)


def glossary_terms(glossary_md: Path) -> list[GlossaryEntry]:
    """Parse the ``{glossary}`` block of ``glossary_md``: headword lines (not indented)
    followed by an indented definition whose first line starts with ``中文：``."""
    text = glossary_md.read_text(encoding="utf8")
    block = re.search(r"```\{glossary\}\n(?P<body>.*?)\n```", text, re.S)
    if block is None:
        raise ValueError(f"{glossary_md} has no ```{{glossary}} block")
    result: list[GlossaryEntry] = []
    headwords: list[str] = []
    for line in block.group("body").splitlines():
        if not line.strip() or line.startswith(":"):
            continue
        if not line[0].isspace():
            headwords.append(line.strip())
            continue
        match = CHINESE_LINE.match(line + " ")
        if headwords and match:
            result.append(GlossaryEntry(tuple(headwords), chinese_forms(match.group("terms"))))
        if headwords:
            headwords = []
    return result


def term_index(glossary: list[GlossaryEntry]) -> dict[str, GlossaryEntry]:
    """Lower-cased headword -> its entry."""
    return {h.lower(): entry for entry in glossary for h in entry.headwords}


def search_dictionary(glossary: list[GlossaryEntry]) -> str:
    """A jieba user dictionary (one word a line) with every Chinese glossary form, so that
    the Chinese search index has 层归一化 as one word (and its parts, as before)."""
    words = sorted({run for entry in glossary for form in entry.chinese
                    for run in re.findall(r"[\u3400-\u9fff]{2,}", form)})
    return "".join(f"{word} 20000 n\n" for word in words)


def _compact(text: str) -> str:
    return re.sub(r"\s+", "", text).lower()


def glossary_problems(entry: Entry, index: dict[str, GlossaryEntry]) -> list[str]:
    """Where a translated message does not use the glossary's Chinese form of a term that
    its English links with ``{term}`` or names in prose (multi-word headwords, longest
    first, so that "synchronized batch normalization" is not also "batch normalization")."""
    if not entry.msgstr or entry.fuzzy or entry.msgstr == entry.msgid:
        return []
    mentioned: list[str] = []
    for match in ROLE.finditer(entry.msgid):
        if match.group("name") == "term":
            target = TARGET_IN_ANGLES.search(match.group("content"))
            mentioned.append(target.group("target") if target else match.group("content"))
    # A message already in Chinese (the interview titles) gets the English as translation.
    text = "" if CJK.search(entry.msgid) else prose(EXTERNAL_LINK.sub(" ", entry.msgid)).lower()
    for headword in sorted((h for h in index if " " in h), key=len, reverse=True):
        pattern = re.compile(rf"\b{re.escape(headword)}s?\b")
        if pattern.search(text):
            mentioned.append(headword)
            text = pattern.sub(" ", text)
    problems = []
    translated = _compact(entry.msgstr)
    for headword in dict.fromkeys(h.strip() for h in mentioned):
        glossary_entry = index.get(headword.lower())
        if glossary_entry is None:
            continue  # an unknown term: the build reports it
        forms = glossary_entry.accepted_for(headword)
        if forms and not any(_compact(form) in translated for form in forms):
            problems.append(f"{headword!r} should be translated as {' or '.join(forms)}")
    return problems
