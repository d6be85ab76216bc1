"""The Chinese edition (``_build/html/zh``) in headless Chromium, offline.

Run after ``python -m layernorm_tutorial.publishing.book_build`` with
``pytest -m browser tests/browser``.
For every page of the table of contents, in Chinese:

- no console errors, no failed or outside requests; math typeset by MathJax, no raw TeX;
- every image loaded, every internal link resolves (including the switch to English);
- as many glued values (``{glue}`` numbers from the cells) as the English page;
- ``<html lang="zh-CN">``; the page's heading is Chinese when its catalog is translated;
- the language switch leads to the same page in English, and back;
- the Chinese search for 层归一化 finds the principles chapter;
- no English prose is left outside code, outputs, math, the bibliography and the English
  question lines under the Chinese interview titles (checked on the files).

Screenshots of two Chinese pages go to ``_build/screenshots/zh_*.png``.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from layernorm_tutorial.publishing.book_i18n import catalogs

from .conftest import (
    HTML_DIR,
    REPO_ROOT,
    SCREENSHOT_DIR,
    landing_docname,
    toc_docnames,
)
from .test_browser import rendering_problems

pytestmark = pytest.mark.browser

ZH = "zh"
ZH_HTML_DIR = HTML_DIR / ZH
CATALOG_DIR = REPO_ROOT / "locales" / "zh_CN" / "LC_MESSAGES"
PRINCIPLES = "book/principles"
SCREENSHOT_PAGES = {landing_docname(), PRINCIPLES}
CJK = re.compile(r"[\u3400-\u9fff]")


def _fully_translated(docname: str) -> bool:
    po = CATALOG_DIR / f"{docname}.po"
    return po.is_file() and all(e.msgstr and not e.fuzzy for e in catalogs.entries(po))


@pytest.fixture(scope="session")
def built_zh(built_html: Path) -> Path:
    if not (ZH_HTML_DIR / "index.html").is_file():
        pytest.fail(
            f"No Chinese edition in {ZH_HTML_DIR}: build both editions with "
            "`python -m layernorm_tutorial.publishing.book_build`.",
            pytrace=False,
        )
    return ZH_HTML_DIR


@pytest.mark.parametrize("docname", toc_docnames())
def test_chinese_page_renders_offline_and_completely(docname, built_zh, open_page, origin):
    html_file = built_zh / f"{docname}.html"
    assert html_file.is_file(), f"{docname} is in _toc.yml but {html_file} was not built"

    page, log = open_page(f"{ZH}/{docname}.html")
    problems: list[str] = []

    lang = page.evaluate("() => document.documentElement.lang")
    if lang != "zh-CN":
        problems.append(f"<html lang={lang!r}>, expected 'zh-CN'")

    rendering, _ = rendering_problems(page, origin)
    problems += rendering

    english = f"{origin}/{docname}.html"
    switch = page.locator("a.language-switch")
    if switch.count() != 1:
        problems.append(f"{switch.count()} language switches, expected 1")
    elif switch.evaluate("a => a.href") != english:
        problems.append(f"the language switch leads to {switch.evaluate('a => a.href')}, "
                        f"expected {english}")

    english_html = (HTML_DIR / f"{docname}.html").read_text(encoding="utf8")
    glued = english_html.count('class="pasted-text"')
    glued_zh = html_file.read_text(encoding="utf8").count('class="pasted-text"')
    if glued_zh != glued:
        problems.append(f"{glued_zh} glued values, the English page has {glued}")

    heading = page.locator("article h1").first.inner_text()
    if _fully_translated(docname) and not CJK.search(heading):
        problems.append(f"the catalog is translated but the heading is {heading!r}")

    if docname in SCREENSHOT_PAGES:
        SCREENSHOT_DIR.mkdir(parents=True, exist_ok=True)
        page.screenshot(path=str(SCREENSHOT_DIR / f"zh_{docname.split('/')[-1]}.png"),
                        full_page=True)

    problems = log.problems() + problems
    assert not problems, f"zh/{docname}.html has {len(problems)} problem(s):\n" + "\n".join(
        f"  - {p}" for p in problems
    )


def test_language_switch_both_ways(built_zh, open_page, origin):
    """English page -> 中文 -> the same page in Chinese -> English -> back where we began."""
    page, log = open_page(f"{PRINCIPLES}.html")
    assert page.evaluate("() => document.documentElement.lang") == "en"
    to_zh = page.locator("a.language-switch")
    assert to_zh.inner_text().strip() == "中文"
    to_zh.click()
    page.wait_for_url(f"{origin}/{ZH}/{PRINCIPLES}.html", wait_until="load")
    assert page.evaluate("() => document.documentElement.lang") == "zh-CN"
    to_en = page.locator("a.language-switch")
    assert to_en.inner_text().strip() == "English"
    to_en.click()
    page.wait_for_url(f"{origin}/{PRINCIPLES}.html", wait_until="load")
    assert page.evaluate("() => document.documentElement.lang") == "en"
    assert not log.problems(), "\n".join(log.problems())


def test_every_english_page_links_to_its_chinese_page(built_zh):
    """Checked on the files (fast): each toc page's switch points to an existing zh page."""
    missing = []
    for docname in toc_docnames():
        html = (HTML_DIR / f"{docname}.html").read_text(encoding="utf8")
        target = "../" * docname.count("/") + f"{ZH}/{docname}.html"
        if f'href="{target}"' not in html or not (built_zh / f"{docname}.html").is_file():
            missing.append(docname)
    assert not missing, f"English pages without a working switch to Chinese: {missing}"


def test_chinese_search_finds_the_principles_chapter(built_zh, open_page, origin):
    page, log = open_page(f"{ZH}/search.html?q=层归一化")
    results = page.locator("#search-results ul.search li")
    results.first.wait_for(state="attached", timeout=60_000)
    hrefs = results.locator("a").evaluate_all("links => links.map(a => a.href)")
    titles = results.locator("a").all_inner_texts()
    assert any(h.split("#")[0].split("?")[0] == f"{origin}/{ZH}/{PRINCIPLES}.html"
               for h in hrefs), f"search for 层归一化 did not find {PRINCIPLES}: {titles}"
    assert not log.problems(), "\n".join(log.problems())
    print(f"search for 层归一化: {len(hrefs)} result(s): {titles[:5]}")


def test_sidebar_part_captions_are_translated(built_zh):
    """The captions of _toc.yml's parts (translated in the root page's catalog) label the
    Chinese edition's navigation (checked on the files)."""
    toc_catalog = CATALOG_DIR / f"{landing_docname()}.po"
    translations = {e.msgid: e.msgstr for e in catalogs.entries(toc_catalog)}
    html = (built_zh / f"{landing_docname()}.html").read_text(encoding="utf8")
    captions = re.findall(r'<span class="caption-text">([^<]*)</span>', html)
    assert captions, "no part captions in the Chinese navigation"
    english = [c for c in captions if not CJK.search(c)]
    untranslated = [c for c in english if not translations.get(c)]
    assert not english, (
        f"English part captions in the Chinese navigation: {english} "
        f"(untranslated in {toc_catalog.name}: {untranslated})"
    )


ENGLISH_WORD = re.compile(r"[A-Za-z]{3,}")
NOT_PROSE = ("div.cell_output", "div.cell_input", "div.highlight", "pre", "code", ".math",
             "span.math", "div.math", "script", "style", "a.headerlink", "sup", "cite")
PAGES_THAT_STAY_ENGLISH = {"book/bibliography"}  # the references are cited as published
ENGLISH_LABELS = ("Click to show", "Click to hide", "Show code cell", "Hide code cell")


def english_prose(html: str) -> list[str]:
    """Blocks of the article (paragraphs, list items, headings, table cells, captions) with
    four or more English words and no Chinese character. Code, outputs, math and
    all-italic lines (the English question under each Chinese interview title) are not
    prose to translate."""
    from bs4 import BeautifulSoup

    article = BeautifulSoup(html, "html.parser").select_one("article")
    if article is None:
        return ["<no article element>"]
    for element in article.select(", ".join(NOT_PROSE)):
        element.decompose()
    blocks = []
    for element in article.find_all(["p", "li", "h1", "h2", "h3", "h4", "td", "th",
                                     "figcaption", "dt", "dd", "summary", "caption"]):
        if element.find(["p", "li", "table"]):
            continue  # its own blocks are checked
        text = " ".join(element.get_text(" ").split())
        emphasized = " ".join(" ".join(e.get_text(" ") for e in element.find_all("em")).split())
        if CJK.search(text) or text == emphasized:
            continue
        if len(ENGLISH_WORD.findall(text)) >= 4:
            blocks.append(text[:100])
    return blocks


def test_no_english_prose_is_left_in_the_chinese_pages(built_zh):
    """Checked on the files: text outside the catalogs (a glued English string, a
    theme or myst-nb label, a table the extraction missed) shows up here."""
    problems = []
    for docname in toc_docnames():
        if docname in PAGES_THAT_STAY_ENGLISH:
            continue
        html = (built_zh / f"{docname}.html").read_text(encoding="utf8")
        problems += [f"{docname}: {block!r}" for block in english_prose(html)]
        problems += [f"{docname}: the label {label!r} (set by a script or a template)"
                     for label in ENGLISH_LABELS if label in html]
    assert not problems, "English prose in the Chinese edition:\n" + "\n".join(problems)
