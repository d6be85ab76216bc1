"""A card of the Anki deck, rendered in headless Chromium as Anki's reviewer would show it.

The deck is written with its links pointing at the local server of the built book. One
card per language is read back from the ``.apkg`` (sqlite3, as Anki does), laid out with the
note type's answer template and CSS, and typeset with the book's offline MathJax. Checked:
every formula typeset, no raw delimiter left, the card's links reach pages of the built book
(the Chinese card's the Chinese edition), nothing outside requested. Screenshots go to
``_build/screenshots/flashcard_<lang>.png``.
"""

from __future__ import annotations

import sqlite3
import zipfile

import pytest

from layernorm_tutorial.publishing import flashcards

from .conftest import MATHJAX_TIMEOUT_MS, SCREENSHOT_DIR

pytestmark = pytest.mark.browser

LABEL = "iq-what-is-ln"  # display and inline math, a table-free answer, cross-references
FIELDS = ("label", "front", "english", "chinese", "short", "answer", "link")

# The note type's answer side ({{FrontSide}}<hr id=answer>...), in a page of its own.
CARD_PAGE = """<!DOCTYPE html>
<html lang="{lang}"><head><meta charset="utf-8"><title>{label}</title>
<style>{css}</style>
<script>window.MathJax = {{tex: {{inlineMath: [['\\\\(', '\\\\)']],
  displayMath: [['\\\\[', '\\\\]']]}}}};</script>
<script defer src="../_static/mathjax/tex-chtml.js"></script>
</head><body><div class="card">
{front}<hr id="answer"><div class="short">{short}</div>
<div class="answer">{answer}</div><div class="link">{link}</div>
</div></body></html>
"""


def _note(apkg, folder, label: str) -> dict:
    with zipfile.ZipFile(apkg) as archive:
        archive.extract("collection.anki2", folder)
    connection = sqlite3.connect(folder / "collection.anki2")
    try:
        rows = connection.execute("select flds from notes").fetchall()
    finally:
        connection.close()
    notes = [dict(zip(FIELDS, row[0].split("\x1f"), strict=True)) for row in rows]
    return next(note for note in notes if note["label"] == label)


@pytest.mark.parametrize("lang", ["both", "zh"])
def test_a_card_renders_with_typeset_math_and_working_links(lang, built_html, origin,
                                                            open_page, tmp_path):
    apkg = tmp_path / f"{lang}.apkg"
    flashcards.write_deck(apkg, lang=lang, book_url=origin)
    note = _note(apkg, tmp_path, LABEL)
    page_dir = built_html / "_flashcard_test"
    page_dir.mkdir(exist_ok=True)
    card = page_dir / f"{lang}.html"
    card.write_text(CARD_PAGE.format(
        lang="zh-CN" if lang == "zh" else "en", label=LABEL, css=flashcards._CSS,
        front=note["front"], short=note["short"], answer=note["answer"], link=note["link"]),
        encoding="utf8")
    try:
        page, log = open_page(f"_flashcard_test/{lang}.html")
        page.wait_for_function("() => window.MathJax && MathJax.startup && "
                               "MathJax.startup.promise", timeout=MATHJAX_TIMEOUT_MS)
        page.evaluate("() => MathJax.startup.promise")
        text = page.inner_text(".card")
        formulas = page.locator("mjx-container").count()
        assert formulas >= 3, formulas
        assert "\\(" not in text and "\\[" not in text and "$" not in text, text[:300]
        hrefs = page.locator(".card a").evaluate_all("links => links.map(a => a.href)")
        edition = f"{origin}/zh/book/" if lang == "zh" else f"{origin}/book/"
        assert hrefs and all(h.startswith(edition) for h in hrefs), hrefs
        for href in set(h.split("#")[0] for h in hrefs):
            assert page.request.get(href).status == 200, href
        if lang == "zh":
            assert sum("\u4e00" <= c <= "\u9fff" for c in text) > 50
        SCREENSHOT_DIR.mkdir(parents=True, exist_ok=True)
        page.screenshot(path=str(SCREENSHOT_DIR / f"flashcard_{lang}.png"), full_page=True)
        assert not log.problems(), log.problems()
    finally:
        card.unlink(missing_ok=True)
        if not any(page_dir.iterdir()):
            page_dir.rmdir()
