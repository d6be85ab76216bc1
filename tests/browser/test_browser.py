"""The built book as a reader's browser sees it (run after ``jupyter-book build .``).

``pytest -m browser tests/browser`` opens every page of the table of contents from
``_build/html`` in headless Chromium with all outside requests blocked, and checks:

- no console errors, no uncaught JavaScript errors, no failed or outside requests;
- every math element typeset by MathJax (served from the book itself), and no raw ``$$``,
  ``\\[`` or ``\\(`` left in the text outside code;
- every image loaded (``naturalWidth > 0``);
- every internal link points to an existing file, and its ``#anchor`` to an existing id;
- every notebook chapter offers its ``.ipynb`` for download;
- the search page finds "LayerNorm".

Screenshots of the landing page and of one chapter are saved in ``_build/screenshots/``.
"""

from __future__ import annotations

import pytest

from .conftest import (
    HTML_DIR,
    MATHJAX_TIMEOUT_MS,
    SCREENSHOT_DIR,
    broken_internal_link,
    chapter_docname,
    is_notebook,
    landing_docname,
    toc_docnames,
)

pytestmark = pytest.mark.browser

RAW_TEX_MARKERS = ("$$", "\\[", "\\(")

# Wait for MathJax (when the page loads it) and report the math elements it did not typeset.
MATH_STATUS_JS = """
async (timeoutMs) => {
  const mathElements = Array.from(document.querySelectorAll('.math'));
  const deadline = Date.now() + timeoutMs;
  while (!(window.MathJax && MathJax.startup && MathJax.startup.promise)) {
    if (mathElements.length === 0 || Date.now() > deadline) break;
    await new Promise(r => setTimeout(r, 100));
  }
  const loaded = !!(window.MathJax && MathJax.startup && MathJax.startup.promise);
  if (loaded) await MathJax.startup.promise;
  const untypeset = mathElements
    .filter(el => !el.querySelector('mjx-container'))
    .map(el => el.textContent.trim().slice(0, 80));
  return {count: mathElements.length, loaded: loaded, untypeset: untypeset,
          typeset: document.querySelectorAll('mjx-container').length};
}
"""

# Text of the page outside code, scripts and typeset math: where raw TeX must not remain.
PROSE_TEXT_JS = """
() => {
  const skip = 'pre, code, script, style, textarea, mjx-container, .highlight';
  const walker = document.createTreeWalker(document.body, NodeFilter.SHOW_TEXT);
  const chunks = [];
  for (let node = walker.nextNode(); node; node = walker.nextNode()) {
    const parent = node.parentElement;
    if (parent && !parent.closest(skip)) chunks.push(node.textContent);
  }
  return chunks.join(' ');
}
"""

# Wait for every image (lazy ones forced eager) and report those that did not load.
BROKEN_IMAGES_JS = """
async () => {
  const images = Array.from(document.images);
  images.forEach(img => { img.loading = 'eager'; });
  await Promise.all(images.map(img => img.complete ? null : new Promise(resolve => {
    img.addEventListener('load', resolve, {once: true});
    img.addEventListener('error', resolve, {once: true});
    setTimeout(resolve, 15000);
  })));
  return {count: images.length,
          broken: images.filter(img => !(img.complete && img.naturalWidth > 0))
                        .map(img => img.getAttribute('src'))};
}
"""

LINKS_JS = "() => Array.from(document.querySelectorAll('a[href]'), a => a.href)"


def _raw_tex_snippets(text: str) -> list[str]:
    text = " ".join(text.split())
    snippets = []
    for marker in RAW_TEX_MARKERS:
        start = text.find(marker)
        if start >= 0:
            snippets.append(f"{marker!r} in ...{text[max(0, start - 40) : start + 60]!r}...")
    return snippets


def rendering_problems(page, origin: str) -> tuple[list[str], list[str]]:
    """What is wrong with a loaded page of the built book (either edition): MathJax not
    loaded, math not typeset or raw TeX in the text, images that did not load, internal
    links that lead nowhere. Returns ``(problems, links)``, the links being every href."""
    problems: list[str] = []
    math = page.evaluate(MATH_STATUS_JS, MATHJAX_TIMEOUT_MS)
    if math["count"] and not math["loaded"]:
        problems.append(f"{math['count']} math elements but MathJax did not load")
    problems += [f"math not typeset: {tex!r}" for tex in math["untypeset"]]
    problems += [f"raw TeX in text: {s}" for s in _raw_tex_snippets(page.evaluate(PROSE_TEXT_JS))]

    images = page.evaluate(BROKEN_IMAGES_JS)
    problems += [f"image did not load: {src}" for src in images["broken"]]

    links = page.evaluate(LINKS_JS)
    for href in sorted(set(links)):
        reason = broken_internal_link(href, origin, HTML_DIR)
        if reason:
            problems.append(f"broken internal link: {reason}")
    return problems, links


@pytest.mark.parametrize("docname", toc_docnames())
def test_page_renders_offline_and_completely(docname, open_page, origin):
    """One page of the toc: loads offline with no errors, math typeset, images, links."""
    html_file = HTML_DIR / f"{docname}.html"
    assert html_file.is_file(), f"{docname} is in _toc.yml but {html_file} was not built"

    page, log = open_page(f"{docname}.html")
    problems, links = rendering_problems(page, origin)

    if is_notebook(docname):
        downloads = [h for h in links if h.split("#")[0].endswith(".ipynb")]
        if not downloads:
            problems.append("notebook chapter without a .ipynb download link")

    if docname in (landing_docname(), chapter_docname()):
        SCREENSHOT_DIR.mkdir(parents=True, exist_ok=True)
        kind = "landing" if docname == landing_docname() else "chapter"
        name = f"{kind}_{docname.split('/')[-1]}.png"
        page.screenshot(path=str(SCREENSHOT_DIR / name), full_page=True)

    # Events (console, failed requests) are collected until this point.
    problems = log.problems() + problems
    assert not problems, f"{docname}.html has {len(problems)} problem(s):\n" + "\n".join(
        f"  - {p}" for p in problems
    )


def test_index_redirects_to_landing_page(open_page):
    """``_build/html/index.html`` (what a reader opens first) leads to the landing page."""
    page, log = open_page("index.html")
    page.wait_for_url(f"**/{landing_docname()}.html", timeout=30_000, wait_until="load")
    page.locator("article h1").first.wait_for(state="visible", timeout=30_000)
    assert not log.problems(), "\n".join(log.problems())


def test_search_finds_layernorm(open_page):
    """The offline search index works: searching for LayerNorm lists at least one page."""
    page, log = open_page("search.html?q=LayerNorm")
    results = page.locator("#search-results ul.search li")
    results.first.wait_for(state="attached", timeout=60_000)
    found = results.count()
    titles = results.locator("a").all_inner_texts()
    assert found > 0, "search for 'LayerNorm' found no page"
    assert not log.problems(), "\n".join(log.problems())
    print(f"search for LayerNorm: {found} result(s): {titles[:5]}")
