"""The cheat sheet prints well, in English and in Chinese: Chromium's print-to-PDF of that
page fits on two A4 pages, with no navigation, and with its math typeset (MathJax's fonts
embedded in the PDF)."""

from __future__ import annotations

import re

import pytest

from .conftest import MATHJAX_TIMEOUT_MS, SCREENSHOT_DIR, toc_docnames

pytestmark = pytest.mark.browser

CHEAT_SHEET = "book/cheat_sheet"
MAX_A4_PAGES = 2

WAIT_FOR_MATH_JS = """
async (timeoutMs) => {
  const deadline = Date.now() + timeoutMs;
  const untypeset = () => Array.from(document.querySelectorAll('.math'))
      .filter((el) => !el.querySelector('mjx-container')).length;
  while (untypeset() > 0 && Date.now() < deadline) {
    await new Promise((resolve) => setTimeout(resolve, 100));
  }
  return {math: document.querySelectorAll('mjx-container').length, untypeset: untypeset()};
}
"""

# What a reader must not find on paper: the navigation and the page's buttons.
VISIBLE_CHROME_JS = """
() => Array.from(document.querySelectorAll(
        '.bd-header, .bd-sidebar-primary, .bd-sidebar-secondary, .prev-next-area, '
        + '.article-header-buttons, .bd-footer'))
      .filter((el) => el.offsetParent !== null || getComputedStyle(el).display !== 'none')
      .map((el) => el.className)
"""


def _pdf_pages(pdf: bytes) -> int:
    return len(re.findall(rb"/Type\s*/Page(?![s\w])", pdf))


def test_cheat_sheet_is_in_the_book():
    assert CHEAT_SHEET in toc_docnames(), f"{CHEAT_SHEET} is not listed in _toc.yml"


@pytest.mark.parametrize("edition", ["", "zh/"], ids=["en", "zh"])
def test_cheat_sheet_prints_on_two_a4_pages_with_typeset_math(edition, open_page):
    page, log = open_page(f"{edition}{CHEAT_SHEET}.html")
    page.emulate_media(media="print")
    status = page.evaluate(WAIT_FOR_MATH_JS, MATHJAX_TIMEOUT_MS)
    assert status["math"] > 0 and status["untypeset"] == 0, status
    assert page.evaluate(VISIBLE_CHROME_JS) == [], "navigation would be printed"
    text = page.inner_text("article")
    assert "$$" not in text and "\\frac" not in text
    pdf = page.pdf(format="A4", print_background=False)
    SCREENSHOT_DIR.mkdir(parents=True, exist_ok=True)
    name = "cheat_sheet" + ("_" + edition.strip("/") if edition else "")
    (SCREENSHOT_DIR / f"{name}.pdf").write_bytes(pdf)
    pages = _pdf_pages(pdf)
    assert 1 <= pages <= MAX_A4_PAGES, f"{name} prints on {pages} A4 pages"
    # MathJax's CHTML output draws formulas with its own web fonts: they are embedded in the
    # PDF only if the math was typeset when the page was printed.
    assert re.search(rb"MJX[A-Z]*-?TEX|MJXZERO|MathJax", pdf), "no MathJax font in the PDF"
    assert not log.problems(), log.problems()


def test_page_counter_counts_pages():
    one = b"%PDF-1.4\n1 0 obj << /Type /Pages /Kids [2 0 R] >>\n2 0 obj << /Type /Page >>"
    two = one + b"\n3 0 obj << /Type /Page /Parent 1 0 R >>"
    assert (_pdf_pages(one), _pdf_pages(two)) == (1, 2)
