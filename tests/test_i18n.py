"""The Chinese edition's translation catalogs (locales/zh_CN/LC_MESSAGES/book/*.po).

- every message translated, none fuzzy (an English edit without its translation fails here);
- the catalogs up to date with the sources: the messages are re-extracted into a temporary
  folder (gettext builder, notebooks not executed) and compared with the catalogs' ids;
- every role target, inline code, ``$...$``/``$$...$$``, URL, footnote and label of a
  message survives in its translation;
- the glossary's Chinese terms are the ones the translations use;
- the interview chapters' Chinese titles are the Chinese edition's headings.

Plus unit tests of the helpers behind those checks, the build and the language switch.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from layernorm_tutorial.publishing import book_build
from layernorm_tutorial.publishing.book_i18n import catalogs, po_tool, sphinx_ext

ROOT = Path(__file__).resolve().parents[1]
LOCALES = ROOT / "locales"
GLOSSARY_MD = ROOT / "book" / "glossary.md"
CATALOGS = catalogs.catalog_files(LOCALES)
GLOSSARY_INDEX = catalogs.term_index(catalogs.glossary_terms(GLOSSARY_MD))


def _name(path: Path) -> str:
    return path.relative_to(LOCALES / "zh_CN" / "LC_MESSAGES").as_posix()


def _report(problems: list[str], limit: int = 25) -> str:
    shown = "\n".join(f"  - {p}" for p in problems[:limit])
    more = f"\n  ... and {len(problems) - limit} more" if len(problems) > limit else ""
    return f"{len(problems)} problem(s):\n{shown}{more}"


def test_there_are_catalogs():
    assert CATALOGS, (
        f"no .po files under {LOCALES}: run "
        "`python -m layernorm_tutorial.publishing.book_build update-po`"
    )


# --------------------------------------------------------------------------------------
# The catalogs themselves
# --------------------------------------------------------------------------------------
@pytest.mark.parametrize("po", CATALOGS, ids=_name)
def test_every_message_is_translated_and_not_fuzzy(po):
    rows = catalogs.entries(po)
    untranslated = [e.msgid[:70] for e in rows if not e.msgstr]
    fuzzy = [e.msgid[:70] for e in rows if e.fuzzy]
    problems = [f"untranslated: {m!r}" for m in untranslated] + [f"fuzzy: {m!r}" for m in fuzzy]
    assert not problems, (
        f"{_name(po)}: {len(untranslated)} of {len(rows)} messages untranslated, "
        f"{len(fuzzy)} fuzzy (see README and locales/zh_CN/STYLE.md). " + _report(problems)
    )


@pytest.mark.parametrize("po", CATALOGS, ids=_name)
def test_markup_survives_translation(po):
    problems = []
    for entry in catalogs.entries(po):
        if not entry.msgstr or entry.fuzzy:
            continue  # reported by test_every_message_is_translated_and_not_fuzzy
        missing, extra = catalogs.missing_or_extra_tokens(entry.msgid, entry.msgstr)
        problems += [f"{entry.msgid[:50]!r}: {t!r} missing in the translation" for t in missing]
        problems += [f"{entry.msgid[:50]!r}: {t!r} not in the English" for t in extra]
        if catalogs.literal_asterisks(entry.msgstr) > catalogs.literal_asterisks(entry.msgid):
            problems.append(f"{entry.msgid[:50]!r}: bold/italic does not render in "
                            f"{entry.msgstr[:50]!r}")
    assert not problems, f"{_name(po)}: " + _report(problems)


@pytest.mark.parametrize("po", CATALOGS, ids=_name)
def test_glossary_terms_are_the_books_chinese_terms(po):
    problems = []
    for entry in catalogs.entries(po):
        problems += [f"{entry.msgid[:50]!r}: {p}"
                     for p in catalogs.glossary_problems(entry, GLOSSARY_INDEX)]
    assert not problems, f"{_name(po)}: " + _report(problems)


@pytest.mark.parametrize("po", CATALOGS, ids=_name)
def test_chinese_titles_are_the_headings(po):
    """An English heading followed by its bold Chinese title (``**...**``, every question of
    the interview chapters): in the Chinese edition the heading is that Chinese title, and
    the bold line the English question."""
    rows = {e.msgid: e.msgstr for e in catalogs.entries(po)}
    pairs = catalogs.interview_title_pairs(list(rows))
    if po.stem.startswith("interview") and po.stem != "interview_index":  # no cards there
        assert len(pairs) >= 10, f"{_name(po)}: only {len(pairs)} headings with a Chinese title"
    problems = []
    for heading, title in pairs:
        expected = catalogs.swapped_titles(heading, title)
        for msgid, want in zip((heading, title), expected, strict=True):
            if rows[msgid] and rows[msgid] != want:
                problems.append(f"{msgid!r} is translated as {rows[msgid]!r}, expected {want!r}")
    assert not problems, f"{_name(po)}: " + _report(problems)


# --------------------------------------------------------------------------------------
# One term per concept, and unambiguous "N 倍" (locales/zh_CN/STYLE.md)
# --------------------------------------------------------------------------------------
STYLE_MD = LOCALES / "zh_CN" / "STYLE.md"


def _term_table(style_md: Path = STYLE_MD) -> list[tuple[list[str], str, list[str]]]:
    """The rows of the style guide's "One term per concept" table:
    (English forms, the Chinese term, the renderings not to use)."""
    text = style_md.read_text(encoding="utf8")
    section = re.search(r"### One term per concept\n(?P<body>.*?)\n### ", text, re.S)
    assert section, f"{style_md}: no section '### One term per concept'"
    rows = []
    for line in section.group("body").splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if not line.startswith("|") or len(cells) != 3 or cells[0] in ("English", "---"):
            continue
        english = [e.strip() for e in cells[0].split(" / ") if e.strip()]
        avoid = [a.strip() for a in cells[2].split(",") if a.strip()]
        rows.append((english, cells[1], avoid))
    assert len(rows) >= 10, f"{style_md}: only {len(rows)} rows in the term table"
    return rows


TERM_TABLE = _term_table()


EXTERNAL_LINK = catalogs.EXTERNAL_LINK


def _shown(text: str) -> str:
    """What a reader sees of a message, for the term check: titled roles give their shown
    text, other roles, inline code and math are dropped."""
    def role(match):
        content = match.group("content")
        if match.group("name") in catalogs.TITLED_ROLES and catalogs.TARGET_IN_ANGLES.search(
                content):  # {ref}`title <target>` shows its title; {ref}`target`, the target's
            return " " + catalogs.TARGET_IN_ANGLES.sub("", content) + " "
        return " "
    text = catalogs.ROLE.sub(role, text)
    text = EXTERNAL_LINK.sub(" ", text)  # an external page's title is quoted as it is
    for pattern in (catalogs.CODE, catalogs.DISPLAY_MATH, catalogs.INLINE_MATH, catalogs.URL):
        text = pattern.sub(" ", text)
    return text


def _mentions(english_form: str, text: str) -> bool:
    return re.search(rf"(?i)(?<!\w){re.escape(english_form)}s?(?!\w)", text) is not None


def term_problems(msgid: str, msgstr: str, table=TERM_TABLE) -> list[str]:
    """Where a translation does not use the house term of a term its English contains."""
    if msgid.startswith("中文："):  # a glossary definition: its English follows the 中文 line
        msgid = msgid.split(". ", 1)[-1]
    if (not msgstr or catalogs.CJK.search(msgid) or not catalogs.CJK.search(msgstr)
            or msgstr.startswith(msgid + "（")):
        return []  # English lines, the Chinese titles, the glossary's headwords
    english, chinese = _shown(msgid), _shown(msgstr)
    problems = []
    for forms, term, avoid in table:
        if not any(_mentions(form, english) for form in forms):
            continue
        if term not in msgstr:
            problems.append(f"{forms[0]!r} should be translated as {term!r}")
        # an English gloss right after the term is fine: 前置 LN（Pre-LN）
        glossed = re.sub(rf"{re.escape(term)}\**（[^）；]*", " ", chinese)
        problems += [f"{forms[0]!r} translated as {bad!r}, use {term!r}" for bad in avoid
                     if (bad.lower() in glossed.lower() if bad.isascii() else bad in glossed)]
    return problems


# Comparisons by "N 倍" that a Chinese editor flags as ambiguous (STYLE.md, "Numbers").
_NUMBER = r"(?:\$[^$]+\$|[0-9.]+|[一二两三四五六七八九十百千万几多]+)"
AMBIGUOUS_TIMES = re.compile(
    rf"(?:小|少|低|慢|短|轻)了?\s?{_NUMBER}\s?倍"
    rf"|(?:大|多|高|长)了\s?[^，。；：！？\s]{{0,8}}?倍"
    rf"|(?:缩小|减小|减少|降低|下降|缩短)了?[^，。；：！？]{{0,16}}?倍"
    rf"|(?:增大|增加|增长|提高|提升|扩大)了?\s?约?\s?{_NUMBER}\s?倍"
)
GLUE_ROLE = re.compile(r"\{glue(?::\w+)?\}`[^`]+`")


def ambiguous_times(msgstr: str) -> list[str]:
    """Ambiguous "N 倍" phrases; a glued value counts as a number (it is one)."""
    text = GLUE_ROLE.sub("2", msgstr)
    text = catalogs.CODE.sub(" ", catalogs.ROLE.sub(" ", text))
    return [m.group(0) for m in AMBIGUOUS_TIMES.finditer(text)]


@pytest.mark.parametrize("po", CATALOGS, ids=_name)
def test_one_term_per_concept(po):
    problems = []
    for entry in catalogs.entries(po):
        if entry.fuzzy:
            continue  # reported by test_every_message_is_translated_and_not_fuzzy
        problems += [f"{entry.msgid[:50]!r}: {p}" for p in term_problems(entry.msgid,
                                                                          entry.msgstr)]
    assert not problems, (f"{_name(po)} (term table: locales/zh_CN/STYLE.md, 'One term per "
                          "concept'): " + _report(problems))


@pytest.mark.parametrize("po", CATALOGS, ids=_name)
def test_no_ambiguous_times_phrasing(po):
    problems = [f"{entry.msgid[:50]!r}: {hit!r} is ambiguous (is 大了三倍 3x or 4x?): write "
                "是原来的 N 倍 / 只有原来的 1/N / 乘以 x"
                for entry in catalogs.entries(po) if not entry.fuzzy
                for hit in ambiguous_times(entry.msgstr)]
    assert not problems, f"{_name(po)}: " + _report(problems)


def test_term_check_catches_a_variant_and_passes_the_house_term():
    msgid = "LN normalizes the summed inputs of each step; the Pre-LN block trains."
    bad = "LN 对每一步的汇总输入做归一化；Pre-LN 块可以训练。"
    good = "LN 对每一步的加权输入和做归一化；前置 LN 块可以训练。"
    problems = term_problems(msgid, bad)
    # both terms missing; variants 汇总输入 (which contains 总输入, also listed) and Pre-LN
    assert len(problems) == 5 and sum("should be translated" in p for p in problems) == 2
    assert term_problems(msgid, good) == []
    assert term_problems(msgid, good.replace("前置 LN 块", "**前置 LN**（Pre-LN）块")) == []
    # a term only in the target of a role, in math or in code does not count
    assert term_problems("See {ref}`the figure <fig-epoch>` and `n_epochs`.", "见图。") == []
    # a bare label is no shown text: {ref}`iq-qk-norm` shows the card's own (translated) title
    assert term_problems("Answer: {ref}`iq-qk-norm`.", "答案：{ref}`iq-qk-norm`。") == []
    # an external page's title stays as its source wrote it
    assert term_problems("Source: [What is layer normalization?](https://x.org/a).",
                         "来源：[What is layer normalization?](https://x.org/a)。") == []
    # the glossary's headwords name the alternatives on purpose
    assert term_problems("Memory-bound", "Memory-bound（访存受限，又称带宽受限）") == []


def test_interview_headings_show_the_house_terms():
    heading, title = catalogs.swapped_titles(
        "Pre-LN versus Post-LN?", "**Pre-LN 与 Post-LN 有何区别？批大小为 1 时呢？**")
    assert heading == "前置 LN 与后置 LN 有何区别？批量大小为 1 时呢？"
    assert title == "*Pre-LN versus Post-LN?*"
    assert catalogs.swapped_titles("x", "**Pre-LN？**", house=False)[0] == "Pre-LN？"
    # review findings 4 and 19: BN is folded (折叠), not fused; no 。 ending a heading
    folded = catalogs.swapped_titles("Why fold?", "**为什么 BN 可以融合进前面的卷积层？**")
    assert folded[0] == "为什么 BN 可以折叠进前面的卷积层？"
    assert catalogs.swapped_titles("Derive it.", "**推导 LayerNorm 的反向传播。**")[0] == \
        "推导 LayerNorm 的反向传播"
    assert catalogs.swapped_titles("x", "**融合算子节省了什么？**")[0] == "融合算子节省了什么？"


def test_ambiguity_check_flags_n_times_and_lets_plain_multiples_pass():
    for text in ("大了三倍", "小了十六倍", "至少比 He 初始化时小五倍", "缩小 $\\sqrt{3/4}$ 倍",
                 "梯度小 $c$ 倍", "慢几千倍", "方差每层约增大 4 倍"):
        assert ambiguous_times(text), text
    for text in ("是正确值的 3 倍", "只有原来的 1/16", "领先幅度小于两倍标准误", "放大 1000 倍",
                 "缩放 $c$ 倍", "批量大约要扩大到四倍", "乘以 $\\sqrt{3/4}$"):
        assert not ambiguous_times(text), text
    # the second review's two errors: a glued value between the verb and 倍
    for text in ("梯度每步增长约 {glue:text}`rnn-factor-ln-impulse` 倍",
                 "方差每个块增长约 {glue:text}`res-nonorm-growth` 倍"):
        assert ambiguous_times(text), text
    for text in ("梯度每步约乘以 {glue:text}`rnn-factor-ln-impulse`",
                 "每经过一个块，方差约变为原来的 {glue:text}`res-nonorm-growth` 倍"):
        assert not ambiguous_times(text), text


# --------------------------------------------------------------------------------------
# Random seeds, and link texts that are the titles of their targets
# --------------------------------------------------------------------------------------
def bare_seed(msgid: str, msgstr: str) -> bool:
    """A message about (random) seeds whose Chinese says a bare 种子, not 随机种子."""
    english = re.sub(r"(?i)seed notes?", " ", _shown(msgid))
    if not re.search(r"(?i)(?<!\w)seeds?(?!\w)", english) or not catalogs.CJK.search(msgstr):
        return False
    return re.search(r"(?<!随机)种子", _shown(msgstr)) is not None


@pytest.mark.parametrize("po", CATALOGS, ids=_name)
def test_a_seed_is_a_random_seed(po):
    problems = [entry.msgid[:60] for entry in catalogs.entries(po)
                if not entry.fuzzy and bare_seed(entry.msgid, entry.msgstr)]
    assert not problems, (f"{_name(po)}: a bare 种子 for 'seed' (write 随机种子, STYLE.md): "
                          + _report(problems))


QK_GLOSS = "查询-键归一化（QK-norm）"


def qk_gloss_problems(msgstrs: list[str]) -> list[str]:
    """The QK-norm gloss at most once per page, never followed by a second parenthesis."""
    problems = []
    count = sum(m.count(QK_GLOSS) for m in msgstrs)
    if count > 1:
        problems.append(f"the gloss {QK_GLOSS} appears {count} times (once per page)")
    problems += [f"two parentheses in a row: {m[m.index(QK_GLOSS + '（'):][:40]!r}"
                 for m in msgstrs if QK_GLOSS + "（" in m]
    return problems


@pytest.mark.parametrize("po", CATALOGS, ids=_name)
def test_qk_norm_is_glossed_once_per_page(po):
    problems = qk_gloss_problems([e.msgstr for e in catalogs.entries(po) if not e.fuzzy])
    assert not problems, f"{_name(po)}: " + _report(problems)


def test_the_qk_gloss_check():
    assert qk_gloss_problems(["查询-键归一化（QK-norm）（Qwen3、Gemma 3）"])
    assert qk_gloss_problems(["查询-键归一化（QK-norm）。", "用查询-键归一化（QK-norm）"])
    assert not qk_gloss_problems(["查询-键归一化（QK-norm）。", "QK-norm 限制 logit。"])


def test_the_seed_check():
    assert bare_seed("five seeds", "五个种子")
    assert not bare_seed("five seeds", "五个随机种子")
    assert not bare_seed("the seed notes", "原始笔记")


HEADING = re.compile(r"^\((?P<label>[\w:.-]+)\)=\n#+ (?P<title>.+)$", re.M)


def _headings() -> dict[str, str]:
    """label -> the English title of the heading right after it, and docname -> page title,
    for every page of the book."""
    titles = {}
    for page in sorted((ROOT / "book").iterdir()):
        if page.suffix == ".ipynb":
            cells = json.loads(page.read_text(encoding="utf8"))["cells"]
            text = "\n\n".join("".join(c["source"]) for c in cells
                                if c["cell_type"] == "markdown")
        elif page.suffix == ".md":
            text = page.read_text(encoding="utf8")
        else:
            continue
        first = re.search(r"^# (.+)$", text, re.M)
        if first:
            titles[page.stem] = first.group(1).strip()
        for match in HEADING.finditer(text):
            titles[match.group("label")] = match.group("title").strip()
    return titles


def _translations() -> dict[str, str]:
    return {e.msgid: e.msgstr for po in CATALOGS for e in catalogs.entries(po)
            if e.msgstr and not e.fuzzy}


LINK = re.compile(r"\{(?:doc|ref)\}`(?P<text>[^`<]+?)\s*<(?P<target>[^`>]+)>`")


def link_text_problems(msgid: str, msgstr: str, titles: dict[str, str],
                       chinese: dict[str, str]) -> list[str]:
    """Links whose English text is its target's title but whose Chinese text is not the
    target's Chinese title."""
    problems = []
    english_links = {m.group("target"): m.group("text").strip() for m in LINK.finditer(msgid)}
    for match in LINK.finditer(msgstr):
        target, shown = match.group("target"), match.group("text").strip()
        title = titles.get(target.split("/")[-1]) or titles.get(target)
        if not title or english_links.get(target) != title:
            continue
        want = chinese.get(title)
        if want and shown != want:
            problems.append(f"link to {target!r} reads {shown!r}, its title is {want!r}")
    return problems


@pytest.mark.parametrize("po", CATALOGS, ids=_name)
def test_link_texts_are_the_chinese_titles_of_their_targets(po):
    titles, chinese = _headings(), _translations()
    problems = [f"{e.msgid[:40]!r}: {p}" for e in catalogs.entries(po) if not e.fuzzy
                for p in link_text_problems(e.msgid, e.msgstr, titles, chinese)]
    assert not problems, f"{_name(po)}: " + _report(problems)


def test_the_link_text_check():
    titles = {"rnn": "Layer normalization in recurrent networks"}
    chinese = {"Layer normalization in recurrent networks": "循环神经网络中的层归一化"}
    msgid = "See {doc}`Layer normalization in recurrent networks <rnn>`."
    assert link_text_problems(msgid, "见{doc}`循环网络中的层归一化 <rnn>`。", titles, chinese)
    assert not link_text_problems(msgid, "见{doc}`循环神经网络中的层归一化 <rnn>`。", titles,
                                  chinese)
    # a link whose English text is not the title may say what it likes
    assert not link_text_problems("See {doc}`that chapter <rnn>`.", "见{doc}`该章 <rnn>`。",
                                  titles, chinese)


# --------------------------------------------------------------------------------------
# Up to date with the sources
# --------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def extracted(tmp_path_factory) -> Path:
    """The .pot files of the current sources (notebooks not executed)."""
    out = tmp_path_factory.mktemp("gettext") / "gettext"
    env = {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
    start = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-m", "layernorm_tutorial.publishing.book_build", "gettext",
         "--output", str(out)],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=900,
    )
    assert done.returncode == 0, (
        f"message extraction failed:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    )
    print(f"message extraction: {time.perf_counter() - start:.1f} s")
    # Only .pot files, and only under --output (no doctrees or jupyter_execute beside it).
    assert [p.name for p in out.parent.iterdir()] == ["gettext"]
    assert {p.suffix for p in out.rglob("*") if p.is_file()} == {".pot"}
    return out


def test_catalogs_are_up_to_date_with_the_sources(extracted):
    pots = {p.relative_to(extracted).with_suffix("").as_posix(): p
            for p in extracted.rglob("*.pot")}
    pos = {Path(_name(p)).with_suffix("").as_posix(): p for p in CATALOGS}
    problems = [f"{page}: no catalog" for page in sorted(pots.keys() - pos.keys())]
    problems += [f"{page}: catalog of a page that no longer exists"
                 for page in sorted(pos.keys() - pots.keys())]
    for page in sorted(pots.keys() & pos.keys()):
        source, catalog = catalogs.message_ids(pots[page]), catalogs.message_ids(pos[page])
        problems += [f"{page}: new message {m[:60]!r}" for m in sorted(source - catalog)]
        problems += [f"{page}: obsolete message {m[:60]!r}" for m in sorted(catalog - source)]
    assert not problems, (
        "the catalogs are out of date with the sources: run "
        "`python -m layernorm_tutorial.publishing.book_build update-po`, then translate. "
        + _report(problems)
    )


def _markdown_table_cells(notebook: Path) -> set[str]:
    """The cells of every pipe table in the notebook's Markdown (dropdowns included)."""
    import json
    import re

    cells = set()
    for cell in json.loads(notebook.read_text(encoding="utf-8"))["cells"]:
        if cell["cell_type"] != "markdown":
            continue
        for line in "".join(cell["source"]).splitlines():
            line = line.strip()
            if not line.startswith("|") or re.fullmatch(r"[|\s:-]+", line):
                continue
            cells.update(c.strip() for c in line.strip("|").split("|")
                         if re.search(r"[A-Za-z]", c))
    return cells


def test_every_table_cell_is_a_message_even_inside_a_dropdown(extracted):
    # MyST gives the paragraphs of a table nested in a directive no source, and Sphinx then
    # skips them as generated text: sphinx_ext's TableCellSource transform prevents that.
    problems = []
    for notebook in sorted((ROOT / "book").glob("*.ipynb")):
        pot = extracted / "book" / f"{notebook.stem}.pot"
        messages = catalogs.message_ids(pot) if pot.exists() else set()
        problems += [f"{notebook.stem}: table cell {cell!r} is not extracted"
                     for cell in sorted(_markdown_table_cells(notebook) - messages)]
    assert not problems, _report(problems)


def _exercise_titles_by_page() -> dict[str, list[str]]:
    """page name -> the titles of its ``{exercise}`` directives (every page of book/)."""
    pages = {}
    for page in sorted((ROOT / "book").glob("*.ipynb")):
        cells = json.loads(page.read_text(encoding="utf8"))["cells"]
        titles = [t for c in cells if c["cell_type"] == "markdown"
                  for t in catalogs.exercise_titles("".join(c["source"]))]
        if titles:
            pages[page.stem] = titles
    return pages


EXERCISE_TITLES = _exercise_titles_by_page()


def test_exercise_titles_are_extracted_as_messages(extracted):
    """Each ``{exercise}`` title is a message of its page, as it is written (not glued to
    sphinx-exercise's "Exercise", which its own catalog translates)."""
    assert sum(len(t) for t in EXERCISE_TITLES.values()) >= 30
    problems = []
    for page, titles in EXERCISE_TITLES.items():
        messages = catalogs.message_ids(extracted / "book" / f"{page}.pot")
        problems += [f"{page}: {t!r} is not extracted" for t in titles if t not in messages]
        problems += [f"{page}: {m!r} is a message" for m in messages
                     if m.startswith(("Exercise", "Solution to"))
                     and not m.startswith("Exercises")]
    assert not problems, _report(problems)


def exercise_title_problems(title: str, translations: dict[str, str]) -> list[str]:
    """Why the Chinese edition would show the exercise ``title`` (partly) in English: no
    finished translation, none with Chinese in it, or one that keeps the English half of
    a bilingual title ("English · 中文" shows the Chinese part alone)."""
    chinese = translations.get(title, "")
    if not chinese:
        return [f"{title!r} has no translation"]
    if chinese == title or not catalogs.CJK.search(chinese):
        return [f"{title!r} is left in English ({chinese!r})"]
    parts = catalogs.bilingual_parts(title)
    if parts and parts[0] in chinese:
        return [f"{title!r} keeps its English half in {chinese!r}"]
    return []


def test_the_exercise_title_check():
    assert exercise_title_problems("Invariance, exactly", {}) == [
        "'Invariance, exactly' has no translation"]
    assert exercise_title_problems("Invariance", {"Invariance": "Invariance"})
    assert exercise_title_problems("Do X · 做 X", {"Do X · 做 X": "Do X · 做 X"})
    assert not exercise_title_problems("Do X · 做 X", {"Do X · 做 X": "做 X"})
    assert not exercise_title_problems("Invariance", {"Invariance": "不变性"})


def test_every_exercise_title_is_translated_in_its_catalog():
    """Every exercise title (the HTML's "练习 2 (…)" and its solution's title) has a
    finished Chinese message in its page's catalog."""
    problems = []
    for page, titles in EXERCISE_TITLES.items():
        po = LOCALES / "zh_CN" / "LC_MESSAGES" / "book" / f"{page}.po"
        translations = {e.msgid: e.msgstr for e in catalogs.entries(po)
                        if e.msgstr and not e.fuzzy} if po.exists() else {}
        problems += [f"{page}: {p}" for t in titles
                     for p in exercise_title_problems(t, translations)]
    assert not problems, _report(problems)


SMALL_BOOK_PAGE = """# A page

````{exercise} Implement the forward pass
:label: ex-small-1

Write it.
````

````{solution} ex-small-1
:class: dropdown

Like this.
````
"""


def _sphinx(source: Path, builder: str, out: Path, *options: str) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "sphinx", "-b", builder, "-q", "-D", "nb_execution_mode=off",
         *options, str(source), str(out)],
        cwd=source, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]


def test_a_translated_exercise_title_in_the_html_and_in_the_extraction(tmp_path):
    """A small book with the book's extensions: gettext extracts the exercise's title
    (not "ExerciseImplement ...", not the solution's label), and the Chinese HTML shows
    the translated title in the exercise and in its solution."""
    source = tmp_path / "src"
    po = source / "locales" / "zh_CN" / "LC_MESSAGES" / "index.po"
    po.parent.mkdir(parents=True)
    (source / "conf.py").write_text(
        'extensions = ["myst_nb", "sphinx_exercise", '
        '"layernorm_tutorial.publishing.book_i18n.sphinx_ext"]\n'
        'locale_dirs = ["locales"]\ngettext_compact = False\ngettext_location = False\n'
        'exclude_patterns = ["_build", "locales"]\nhtml_theme = "basic"\n'
        'suppress_warnings = ["config.theme"]\n', encoding="utf8")
    (source / "index.md").write_text(SMALL_BOOK_PAGE, encoding="utf8")
    po.write_text('msgid ""\nmsgstr ""\n"Content-Type: text/plain; charset=UTF-8\\n"\n\n'
                  'msgid "Implement the forward pass"\nmsgstr "实现前向传播"\n',
                  encoding="utf8")
    _sphinx(source, "gettext", tmp_path / "pot")
    messages = catalogs.message_ids(tmp_path / "pot" / "index.pot")
    assert "Implement the forward pass" in messages
    assert not any(m.startswith(("Exercise", "Solution")) or "ex-small-1" in m
                   for m in messages), messages
    _sphinx(source, "html", tmp_path / "zh", "-D", "language=zh_CN")
    html = (tmp_path / "zh" / "index.html").read_text(encoding="utf8")
    titles = [re.sub(r"<[^>]+>|\s+", " ", t).strip()
              for t in re.findall(r'class="admonition-title">(.*?)</p>', html, re.S)]
    assert len(titles) == 2 and all("(实现前向传播)" in t for t in titles), titles
    assert "Implement the forward pass" not in html


# --------------------------------------------------------------------------------------
# The helpers behind the checks
# --------------------------------------------------------------------------------------
def test_markup_tokens_keep_targets_and_let_shown_text_change():
    english = ("The {term}`biased <Biased variance>` variance divides by $H$; see "
               "{doc}`backward`, {numref}`fig-x`, `x.mean()` and {cite}`ba2016layer`.")
    good = ("{term}`有偏 <Biased variance>` 方差除以 $H$；见 {doc}`backward`、{numref}`fig-x`、"
            "`x.mean()` 与 {cite}`ba2016layer`。")
    assert catalogs.missing_or_extra_tokens(english, good) == ({}, {})
    dropped_math = good.replace("$H$", "H")
    missing, _ = catalogs.missing_or_extra_tokens(english, dropped_math)
    assert dict(missing) == {"$H$": 1}
    changed_target = good.replace("fig-x", "fig-y")
    missing, extra = catalogs.missing_or_extra_tokens(english, changed_target)
    assert dict(missing) == {"{numref}fig-x": 1} and dict(extra) == {"{numref}fig-y": 1}
    translated_code = good.replace("`x.mean()`", "`x.均值()`")
    assert catalogs.missing_or_extra_tokens(english, translated_code)[0] == {"`x.mean()`": 1}


def test_markup_tokens_see_display_math_urls_and_labels():
    text = "See $$a+b$$ at <https://example.org/x> and [the paper](https://a.b/c)[^1].\n(lab)="
    tokens = catalogs.markup_tokens(text)
    assert tokens == {"$$a+b$$": 1, "https://example.org/x": 1, "](https://a.b/c)": 1,
                      "[^1]": 1, "(lab)=": 1}


def test_emphasis_that_does_not_render_is_seen():
    assert catalogs.literal_asterisks("**“归一化”**之后") == 4
    assert catalogs.literal_asterisks("“**归一化**”之后") == 0
    assert catalogs.literal_asterisks("**阅读。** HTML 与 `a**2` 和 $x^*$") == 0


def test_untranslatable_messages():
    assert catalogs.looks_untranslatable("{doc}`principles`")
    assert catalogs.looks_untranslatable("\\mu = \\frac{1}{H}\\sum_{i=1}^{H} x_i .")
    assert catalogs.looks_untranslatable("`num_features`, `num_channels`")
    assert not catalogs.looks_untranslatable("The **mean** of the row,")
    assert not catalogs.looks_untranslatable("{term}`Gain`")
    assert not catalogs.looks_untranslatable("**什么是层归一化？**")
    assert not catalogs.looks_untranslatable("no")  # a table cell: 否
    assert not catalogs.looks_untranslatable("N (or B·T)")
    assert catalogs.looks_untranslatable("dx, dy")


def test_glossary_chinese_forms():
    assert GLOSSARY_INDEX["layer normalization"].chinese == ("层归一化",)
    assert GLOSSARY_INDEX["bn"].chinese == ("批量归一化",)
    bessel = GLOSSARY_INDEX["unbiased variance"]
    assert bessel.accepted_for("Unbiased variance") == ("无偏方差",)
    assert bessel.accepted_for("Bessel's correction") == ("贝塞尔校正",)
    assert catalogs.chinese_forms("数值稳定项 ε") == ("数值稳定项",)
    assert catalogs.chinese_forms("后置 LN") == ("后置 LN",)


def test_glossary_aliases_are_free():
    assert GLOSSARY_INDEX["bn"].accepted_for("BN") == ()
    assert GLOSSARY_INDEX["running variance"].accepted_for("Running variance") == ()
    entry = catalogs.Entry("x", "Synchronized batch normalization reduces over devices.",
                           "同步批量归一化在各设备间归约。", False)
    assert catalogs.glossary_problems(entry, GLOSSARY_INDEX) == []
    # review finding 6: the headword, not "同步BN（跨卡同步批量归一化）", in running text
    sync = GLOSSARY_INDEX["syncbn"]
    assert sync.accepted_for("Synchronized batch normalization") == ("同步批量归一化",)
    assert sync.accepted_for("SyncBN") == ("同步 BN",)


def test_glossary_check_catches_a_different_term():
    entry = catalogs.Entry("x", "{term}`Layer normalization` keeps the mean.",
                           "{term}`层标准化 <Layer normalization>` 保留均值。", False)
    assert catalogs.glossary_problems(entry, GLOSSARY_INDEX)
    fixed = catalogs.Entry("x", entry.msgid, "{term}`层归一化 <Layer normalization>` 保留均值。",
                           False)
    assert catalogs.glossary_problems(fixed, GLOSSARY_INDEX) == []
    prose = catalogs.Entry("x", "Batch normalization uses the batch.", "BN 使用批量。", False)
    assert catalogs.glossary_problems(prose, GLOSSARY_INDEX)


def test_po_tool_round_trip(tmp_path, monkeypatch, capsys):
    po = tmp_path / "page.po"
    po.write_text('msgid ""\nmsgstr ""\n"Content-Type: text/plain; charset=UTF-8\\n"\n\n'
                  'msgid "The $H$ features of {term}`Layer normalization`."\nmsgstr ""\n\n'
                  'msgid "{doc}`backward`"\nmsgstr ""\n', encoding="utf8")
    monkeypatch.chdir(ROOT)
    assert po_tool.main(["prefill", str(po)]) == 0
    assert {e.msgid: e.msgstr for e in catalogs.entries(po)}["{doc}`backward`"] == "{doc}`backward`"
    todo = tmp_path / "todo.json"
    assert po_tool.main(["todo", str(po), "-o", str(todo)]) == 0
    import json

    rows = json.loads(todo.read_text(encoding="utf8"))
    assert [r["msgid"] for r in rows] == ["The $H$ features of {term}`Layer normalization`."]
    rows[0]["msgstr"] = "{term}`层归一化 <Layer normalization>` 的 H 个特征。"  # $H$ dropped
    todo.write_text(json.dumps(rows, ensure_ascii=False), encoding="utf8")
    assert po_tool.main(["apply", str(po), str(todo)]) == 1
    assert "missing '$H$'" in capsys.readouterr().err
    rows[0]["msgstr"] = "{term}`层归一化 <Layer normalization>` 的 $H$ 个特征。"
    todo.write_text(json.dumps(rows, ensure_ascii=False), encoding="utf8")
    assert po_tool.main(["apply", str(po), str(todo)]) == 0
    assert all(e.msgstr and not e.fuzzy for e in catalogs.entries(po))


def test_search_dictionary_makes_layer_norm_one_search_word(tmp_path):
    """Sphinx's Chinese splitter with the build's dictionary indexes 层归一化 as a word."""
    from sphinx.search.zh import SearchChinese

    text = catalogs.search_dictionary(list(GLOSSARY_INDEX.values()))
    assert "层归一化 " in text and "批量归一化 " in text
    path = tmp_path / "search_terms.txt"
    path.write_text(text, encoding="utf8")
    splitter = SearchChinese({"dict": str(path)})
    words = splitter.split("层归一化在每个样本内部计算均值和方差。")
    assert "层归一化" in words and "归一化" in words


def test_language_switch_urls_and_lang():
    to_zh = sphinx_ext.other_edition_url("book/principles", chinese=False)
    assert to_zh == "../zh/book/principles.html"
    to_en = sphinx_ext.other_edition_url("book/principles", chinese=True)
    assert to_en == "../../book/principles.html"
    assert sphinx_ext.other_edition_url("search", chinese=True) == "../search.html"
    assert sphinx_ext.html_lang("zh_CN") == "zh-CN"
    assert sphinx_ext.html_lang(None) == "en"


def test_an_untranslated_book_title_is_an_error(tmp_path):
    for name in ("_config.yml", "_toc.yml"):
        (tmp_path / name).write_text((ROOT / name).read_text(encoding="utf8"), encoding="utf8")
    po = tmp_path / "locales" / "zh_CN" / "LC_MESSAGES" / "book" / "intro.po"
    po.parent.mkdir(parents=True)
    po.write_text('msgid ""\nmsgstr ""\n"Content-Type: text/plain; charset=UTF-8\\n"\n',
                  encoding="utf8")
    with pytest.raises(ValueError, match="has no translation"):
        book_build.translated_title_and_author(tmp_path, "zh")


def test_chinese_overrides_set_language_catalogs_title_and_author(tmp_path):
    assert book_build.language_overrides(ROOT, "en", tmp_path) == {}
    zh = book_build.language_overrides(ROOT, "zh", tmp_path)
    assert zh["language"] == "zh_CN"
    assert zh["locale_dirs"] == [str(ROOT / "locales")]
    title = yaml.safe_load((ROOT / "_config.yml").read_text(encoding="utf8"))["title"]
    intro = {e.msgid: e.msgstr for e in catalogs.entries(LOCALES / "zh_CN" / "LC_MESSAGES"
                                                         / "book" / "intro.po")}
    assert zh["html_title"] == zh["project"] == intro[title] != title
    assert "作者" in zh["author"]
    for prompt in ("nb_code_prompt_show", "nb_code_prompt_hide", "togglebutton_hint",
                   "togglebutton_hint_hide"):
        assert catalogs.CJK.search(zh[prompt]), zh[prompt]
        assert not re.search(r"[A-Za-z]", zh[prompt]), zh[prompt]
    assert Path(zh["html_search_options"]["dict"]).read_text(encoding="utf8").count("\n") > 10
    assert book_build.html_dir(tmp_path, "zh") == tmp_path / "html" / "zh"
    with pytest.raises(ValueError, match="lang must be one of"):
        book_build.language_overrides(ROOT, "fr", tmp_path)
