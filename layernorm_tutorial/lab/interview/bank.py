"""The interview question bank: real questions, their sources, and the card that answers each.

The bank (``book/data/interview_bank.json``) holds questions about normalization that people
were actually asked in interviews, or actually asked on Q&A sites, in course exercises and in
the issue threads of major libraries. Each entry is the question in the book's own words, the
language and kind of its source, the source itself (a URL, ``github:owner/repo/path`` or
``github:owner/repo#N``), a topic id, and the label of the interview card that answers it.
Coverage is a property of how the interview chapters are built: every entry must name a card.

This module loads and checks the bank (:func:`load_bank`), counts it (:func:`coverage`) and
renders the question index page ``book/interview_index.md`` (:func:`render_index`); the page
is generated, never edited by hand::

    python -m layernorm_tutorial.lab.interview.bank --out book/interview_index.md --force
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import quote

from layernorm_tutorial._cli import (
    OutputPathError,
    check_not_a_source,
    check_output_path,
    is_book_file,
    write_text_atomically,
)

__all__ = ["BANK_PATH", "INDEX_PATH", "KINDS", "TOPICS", "Entry", "Topic", "Bank",
           "BankError", "load_bank", "source_url", "coverage", "card_labels",
           "render_index", "index_translations", "main"]

_REPO = Path(__file__).resolve().parents[3]
BANK_PATH = _REPO / "book" / "data" / "interview_bank.json"
INDEX_PATH = _REPO / "book" / "interview_index.md"
BOOK_DIR = _REPO / "book"

KINDS = {
    "interview-bank": ("interview question bank", "面试题库"),
    "interview-report": ("interview report", "面经"),
    "qa-site": ("Q&A site", "问答网站"),
    "course": ("course or coding exercise", "课程或编程练习"),
    "library-thread": ("library issue thread", "开源库 issue 讨论"),
}
LANGUAGES = ("en", "zh")
_REQUIRED = ("id", "question", "language", "kind", "source", "source_title", "topic", "card")
_SOURCE = re.compile(r"^(https?://\S+|github:[\w.-]+/[\w.-]+(/\S+|#\d+))$")
_URL_SAFE = "/:?#[]@!$&'()*+,;=%~"
_LABEL_LINE = re.compile(r"^\((?P<label>iq-[A-Za-z0-9_.:-]+)\)=\s*$", re.M)


@dataclass(frozen=True)
class Topic:
    """One group of the index: its id and its titles in English and Chinese."""

    id: str
    title: str
    title_zh: str


@dataclass(frozen=True)
class Entry:
    """One real question: where it was asked and which card answers it."""

    id: str
    question: str
    language: str
    kind: str
    source: str
    source_title: str
    topic: str
    card: str
    question_zh: str = ""


@dataclass(frozen=True)
class Bank:
    """The whole bank: topics in index order and entries in file order."""

    topics: tuple[Topic, ...]
    entries: tuple[Entry, ...]

    def by_topic(self) -> dict[str, list[Entry]]:
        """Topic id -> its entries, in the topics' order (every topic present)."""
        groups: dict[str, list[Entry]] = {t.id: [] for t in self.topics}
        for entry in self.entries:
            groups[entry.topic].append(entry)
        return groups


class BankError(ValueError):
    """A bank file that cannot be used; the message names the file and the entry."""


TOPICS = (
    Topic("ln-basics", "LayerNorm basics", "层归一化基础"),
    Topic("ln-vs-bn", "LayerNorm versus BatchNorm", "层归一化与批量归一化"),
    Topic("bn-mechanics", "How BatchNorm works", "批量归一化的机制"),
    Topic("bn-practice", "BatchNorm in practice", "批量归一化实战"),
    Topic("norm-family", "The rest of the family: IN, GN, WN, WS, LRN",
          "归一化家族的其他成员：IN、GN、WN、WS、LRN"),
    Topic("rmsnorm", "RMSNorm", "RMSNorm"),
    Topic("derivations", "Derivations and gradients", "推导与梯度"),
    Topic("transformer-placement", "Norm placement in Transformers",
          "Transformer 中归一化的位置"),
    Topic("llm-stability", "Stability of large models", "大模型的训练稳定性"),
    Topic("rnn", "Recurrent networks", "循环神经网络"),
    Topic("generative", "Conditioning and generative models", "条件归一化与生成模型"),
    Topic("no-norm", "Training without normalization", "不用归一化的训练"),
    Topic("debugging", "Training failures, debugging and testing",
          "训练故障、调试与测试"),
    Topic("inference-quantization", "Inference, folding and quantization",
          "推理、折叠与量化"),
    Topic("kernels", "Kernels and performance", "内核与性能"),
    Topic("fine-tuning", "Fine-tuning and the norm parameters", "微调与归一化参数"),
    Topic("coding", "Coding drills", "手写代码"),
    Topic("numerics", "Numerics and precision", "数值与精度"),
)


def _fail(path: Path, message: str) -> BankError:
    return BankError(f"{path}: {message}")


def _entry(raw: object, index: int, path: Path, topics: set[str]) -> Entry:
    if not isinstance(raw, dict):
        raise _fail(path, f"entry {index} is not an object")
    where = f"entry {raw.get('id', index)!r}"
    missing = [k for k in _REQUIRED if not isinstance(raw.get(k), str) or not raw[k].strip()]
    if missing:
        raise _fail(path, f"{where} has no {', '.join(missing)}")
    if raw["language"] not in LANGUAGES:
        raise _fail(path, f"{where}: language {raw['language']!r}, expected en or zh")
    if raw["kind"] not in KINDS:
        raise _fail(path, f"{where}: kind {raw['kind']!r}, expected one of {', '.join(KINDS)}")
    if raw["topic"] not in topics:
        raise _fail(path, f"{where}: topic {raw['topic']!r} is not a topic of the bank")
    if not _SOURCE.match(raw["source"]):
        raise _fail(path, f"{where}: source {raw['source']!r}, expected a URL, "
                          "github:owner/repo/path or github:owner/repo#N")
    if not raw["card"].startswith("iq-"):
        raise _fail(path, f"{where}: card {raw['card']!r}, expected an interview label iq-...")
    return Entry(raw["id"], raw["question"].strip(), raw["language"], raw["kind"],
                 raw["source"], raw["source_title"].strip(), raw["topic"], raw["card"],
                 (raw.get("question_zh") or "").strip())


def load_bank(path: str | Path = BANK_PATH) -> Bank:
    """Read and check the bank file.

    Raises :class:`BankError` (one line naming the file) when it is missing, not JSON, or an
    entry lacks a field, names an unknown kind, language or topic, or repeats an id.
    """
    path = Path(path)
    restore = "; restore it with git checkout" if is_book_file(path) else ""
    if path.is_dir():
        raise _fail(path, "is a folder, expected the bank JSON")
    try:
        document = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise _fail(path, f"no such file{restore}") from None
    except OSError as exc:
        raise _fail(path, f"cannot read it ({exc.strerror}){restore}") from None
    except UnicodeDecodeError:
        raise _fail(path, f"not UTF-8 text, so not the bank JSON{restore}") from None
    except json.JSONDecodeError as exc:
        raise _fail(path, f"not valid JSON (line {exc.lineno}, column {exc.colno})"
                          f"{restore}") from None
    if not isinstance(document, dict) or not isinstance(document.get("entries"), list):
        raise _fail(path, "expected an object with a list 'entries'")
    if not document["entries"]:
        raise _fail(path, "the list 'entries' is empty, expected the bank's questions")
    topic_ids = {t.id for t in TOPICS}
    entries = tuple(_entry(raw, i, path, topic_ids)
                    for i, raw in enumerate(document["entries"]))
    repeated = [k for k, n in Counter(e.id for e in entries).items() if n > 1]
    if repeated:
        raise _fail(path, f"entry id {repeated[0]!r} appears more than once")
    return Bank(TOPICS, entries)


def source_url(source: str) -> str:
    """The web address of a source: ``github:o/r/path`` -> its file on GitHub,
    ``github:o/r#N`` -> its issue or pull request (GitHub redirects between the two).
    Characters outside ASCII and spaces are percent-encoded, so the address is a valid
    Markdown link target."""
    if not source.startswith("github:"):
        return quote(source, safe=_URL_SAFE)
    repo_path = source[len("github:"):]
    if "#" in repo_path:
        repo, number = repo_path.split("#", 1)
        return f"https://github.com/{repo}/issues/{number}"
    owner, repo, rest = repo_path.split("/", 2)
    return f"https://github.com/{owner}/{repo}/blob/HEAD/{quote(rest, safe='/')}"


def _source_key(source: str) -> str:
    """What counts as one source: a page (URL without fragment), a repository's file, or
    one issue thread."""
    return source.split("#", 1)[0] if source.startswith("http") else source


def coverage(bank: Bank) -> dict[str, object]:
    """Counts the issue asks for: entries, distinct sources, kinds, languages, topics,
    cards used."""
    return {
        "entries": len(bank.entries),
        "sources": len({_source_key(e.source) for e in bank.entries}),
        "kinds": dict(Counter(e.kind for e in bank.entries)),
        "languages": dict(Counter(e.language for e in bank.entries)),
        "topics": dict(Counter(e.topic for e in bank.entries)),
        "cards": len({e.card for e in bank.entries}),
    }


def card_labels(book_dir: str | Path = BOOK_DIR,
                chapters: Iterable[str] | None = None) -> set[str]:
    """Every interview card label (``(iq-...)=``) in the book's interview notebooks."""
    book_dir = Path(book_dir)
    paths = ([book_dir / f"{c}.ipynb" for c in chapters] if chapters is not None
             else sorted(book_dir.glob("interview*.ipynb")))
    labels: set[str] = set()
    for path in paths:
        notebook = json.loads(path.read_text(encoding="utf-8"))
        for cell in notebook["cells"]:
            if cell["cell_type"] == "markdown":
                labels.update(_LABEL_LINE.findall("".join(cell["source"])))
    return labels


def _escape(text: str) -> str:
    """Markdown-safe inline text: no stray emphasis, link brackets or HTML; backticks stay
    code spans when they pair up."""
    text = re.sub(r"([*\[\]<>])", r"\\\1", text)
    return text if text.count("`") % 2 == 0 else text.replace("`", "\\`")


def _bullet(entry: Entry) -> str:
    kind = KINDS[entry.kind][0]
    language = "Chinese" if entry.language == "zh" else "English"
    return (f"- {_escape(entry.question)} **Answer:** {{ref}}`{entry.card}` · "
            f"*Source:* [{_escape(entry.source_title)}]({source_url(entry.source)}) "
            f"({kind}, {language})")


def _intro(counts: dict) -> tuple[str, str]:
    """The page's introduction, in English and Chinese."""
    en = (f"This page lists {counts['entries']} real questions about normalization, from "
          f"{counts['sources']} public sources: interview question banks, interview reports "
          "(including Chinese 面经), Q&A sites, course and coding exercises, and the issue "
          "threads of major libraries. Each is written in the book's own words, with a link "
          "to where it was asked and to the interview card that answers it. If you were "
          "asked something, find its topic below, then open the card: its short answer is "
          "what to say in twenty seconds, and its cell proves the claim.")
    zh = (f"本页收录了 {counts['entries']} 道关于归一化的真实问题，来自 {counts['sources']} "
          "个公开来源：面试题库、面经（包括中文面经）、问答网站、课程与编程练习，以及主流开源库的 "
          "issue 讨论。每道题都用本书自己的话改写，并附上提问出处的链接和解答它的面试题卡片。"
          "如果你在面试中被问到某个问题，先在下面找到它所属的主题，再打开对应的卡片：卡片的简答是"
          "二十秒内能说完的回答，卡片的单元格则验证其中的论断。")
    return en, zh


def _bullet_zh(entry: Entry) -> str:
    kind = KINDS[entry.kind][1]
    language = "中文" if entry.language == "zh" else "英文"
    return (f"{_escape(entry.question_zh)} **答案：**{{ref}}`{entry.card}` · "
            f"*来源：*[{_escape(entry.source_title)}]({source_url(entry.source)})"
            f"（{kind}，{language}）")


def index_translations(bank: Bank) -> dict[str, str]:
    """The Chinese of every message of the index page that depends on the bank (msgid ->
    msgstr, as the catalog ``interview_index.po`` holds them): the introduction, the
    table, the topic headings and one message per question (its ``question_zh``).

    Raises :class:`BankError` when an entry has no ``question_zh``."""
    missing = [e.id for e in bank.entries if not e.question_zh]
    if missing:
        raise BankError(f"entries without question_zh: {', '.join(missing[:5])}")
    counts = coverage(bank)
    en, zh = _intro(counts)
    messages = {en: zh, "kind of source": "来源类型", "questions": "问题数"}
    messages.update({english: chinese for english, chinese in KINDS.values()})
    messages.update({t.title: t.title_zh for t in bank.topics})
    messages.update({_bullet(e)[2:]: _bullet_zh(e) for e in bank.entries})
    return messages


def render_index(bank: Bank) -> str:
    """The question index page (MyST markdown): every entry grouped by topic, with its source
    and a link to the card that answers it (``{ref}`` shows the card's title)."""
    counts = coverage(bank)
    kinds = counts["kinds"]
    lines = [
        "(interview-index)=",
        "# Interview question index",
        "",
        "**面试问题索引**",
        "",
        "<!-- Generated by `python -m layernorm_tutorial.lab.interview.bank --out "
        "book/interview_index.md --force` from `book/data/interview_bank.json`; "
        "do not edit by hand. -->",
        "",
        _intro(counts)[0],
        "",
        "| kind of source | questions |",
        "|---|---|",
    ]
    lines += [f"| {KINDS[k][0]} | {kinds[k]} |" for k in KINDS if k in kinds]
    for topic in bank.topics:
        group = bank.by_topic()[topic.id]
        if not group:
            continue
        lines += ["", f"## {topic.title}", ""]
        lines += [_bullet(e) for e in sorted(group, key=lambda e: (e.card, e.id))]
    return "\n".join(lines) + "\n"


def main(argv: Sequence[str] | None = None) -> int:
    """Write the index page from the bank (``--check`` compares instead of writing)."""
    parser = argparse.ArgumentParser(
        prog="python -m layernorm_tutorial.lab.interview.bank",
        description="Write the interview question index page from the question bank.")
    parser.add_argument("--bank", default=str(BANK_PATH), help="the bank (JSON)")
    parser.add_argument("--out", default=str(INDEX_PATH), help="the page to write")
    parser.add_argument("--force", action="store_true", help="replace an existing page")
    parser.add_argument("--check", action="store_true",
                        help="only check that --out is up to date; exit 1 if not")
    parser.add_argument("--translations", metavar="JSON",
                        help="also write the page's Chinese messages as a po_tool apply file "
                             "(python -m layernorm_tutorial.publishing.book_i18n.po_tool "
                             "apply locales/zh_CN/LC_MESSAGES/book/interview_index.po JSON)")
    args = parser.parse_args(argv)
    for option, value in (("--bank", args.bank), ("--out", args.out),
                          ("--translations", args.translations)):
        if value is not None and not value:
            parser.error(f"{option}: empty path")
    if Path(args.bank).resolve() == Path(args.out).resolve():
        parser.error("--out is the --bank file; choose another page")
    try:
        bank = load_bank(args.bank)
        text = render_index(bank)
        if args.check:
            current = Path(args.out).read_text(encoding="utf-8") if Path(args.out).is_file() \
                else ""
            if current != text:
                print(f"{args.out} is out of date with {args.bank}; run without --check",
                      file=sys.stderr)
                return 1
            return 0
        check_not_a_source(args.out, own=(INDEX_PATH,))
        out = check_output_path(args.out, force=args.force)
        translations = None
        if args.translations:
            check_not_a_source(args.translations, option="--translations")
            target = check_output_path(args.translations, force=args.force,
                                       option="--translations")
            if target.resolve() in (Path(args.out).resolve(), Path(args.bank).resolve()):
                parser.error("--translations names the page or the bank; choose another file")
            translations = [{"msgid": k, "msgstr": v, "fuzzy": False}
                            for k, v in index_translations(bank).items()]
        write_text_atomically(out, text)
        if translations is not None:
            write_text_atomically(target, json.dumps(translations, ensure_ascii=False,
                                                     indent=1) + "\n")
    except (BankError, OutputPathError) as exc:
        parser.error(str(exc))
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    counts = coverage(bank)
    print(f"{out}: {counts['entries']} questions from {counts['sources']} sources")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
