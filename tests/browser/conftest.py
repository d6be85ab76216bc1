"""Fixtures for the real-browser test of the built book (``pytest -m browser tests/browser``).

The built HTML (``_build/html``) is served by a local HTTP server on 127.0.0.1 and opened in
Debian's headless Chromium, driven by Playwright for Python. Every request that does not go
to that local server is aborted and recorded, so a page that needs the network fails.

Nothing here is skipped: a missing Chromium or a missing build is a test failure whose
message says how to fix it.
"""

from __future__ import annotations

import functools
import http.server
import os
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import unquote, urlsplit

import pytest
import yaml

REPO_ROOT = Path(__file__).resolve().parents[2]
# BOOK_HTML_DIR lets you test a build made elsewhere (jupyter-book build --path-output X
# writes X/_build/html); screenshots go next to it, in <...>/_build/screenshots.
HTML_DIR = Path(os.environ.get("BOOK_HTML_DIR", REPO_ROOT / "_build" / "html")).resolve()
SCREENSHOT_DIR = HTML_DIR.parent / "screenshots"
TOC_FILE = REPO_ROOT / "_toc.yml"

CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]
INSTALL_HINT = "apt-get update && apt-get install -y chromium"
BUILD_HINT = "jupyter-book build ."

# Milliseconds: generous, because CI machines are slow and MathJax typesets big pages.
NAVIGATION_TIMEOUT_MS = 60_000
MATHJAX_TIMEOUT_MS = 60_000


# --------------------------------------------------------------------------------------
# The table of contents: which pages the book has
# --------------------------------------------------------------------------------------
def _toc_files(entries: list[dict]) -> Iterator[str]:
    """Yield every ``file:`` of a jb-book toc (chapters and nested sections), in order."""
    for entry in entries or []:
        if "file" in entry:
            yield entry["file"]
        yield from _toc_files(entry.get("sections", []))


def toc_docnames() -> list[str]:
    """Docnames (paths without suffix, e.g. ``book/intro``) of the root and every chapter."""
    toc = yaml.safe_load(TOC_FILE.read_text(encoding="utf8"))
    names = [toc["root"]]
    for part in toc.get("parts", []):
        names.extend(_toc_files(part.get("chapters", [])))
    names.extend(_toc_files(toc.get("chapters", [])))
    return [_strip_source_suffix(name) for name in names]


def _strip_source_suffix(name: str) -> str:
    for suffix in (".md", ".ipynb"):
        if name.endswith(suffix):
            return name[: -len(suffix)]
    return name


def landing_docname() -> str:
    """The root of the toc: the landing page."""
    return toc_docnames()[0]


def chapter_docname() -> str:
    """The chapter to screenshot: the first notebook chapter in the toc (else the first page
    after the landing page)."""
    names = toc_docnames()
    for name in names[1:]:
        if (REPO_ROOT / f"{name}.ipynb").is_file():
            return name
    return names[1] if len(names) > 1 else names[0]


def is_notebook(docname: str) -> bool:
    return (REPO_ROOT / f"{docname}.ipynb").is_file()


# --------------------------------------------------------------------------------------
# Preconditions that fail (never skip) with a fix in the message
# --------------------------------------------------------------------------------------
@pytest.fixture(scope="session")
def built_html() -> Path:
    if not (HTML_DIR / "index.html").is_file():
        pytest.fail(
            f"No built book in {HTML_DIR}: run `{BUILD_HINT}` first "
            "(the browser test checks the HTML that the build produced).",
            pytrace=False,
        )
    return HTML_DIR


@pytest.fixture(scope="session")
def chromium_executable() -> Path:
    if not CHROMIUM.is_file():
        pytest.fail(
            f"Chromium is missing ({CHROMIUM} not found). Install Debian's Chromium with "
            f"`{INSTALL_HINT}` (as root), then run `pytest -m browser tests/browser` again.",
            pytrace=False,
        )
    return CHROMIUM


# --------------------------------------------------------------------------------------
# A local HTTP server for _build/html
# --------------------------------------------------------------------------------------
class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, format, *args):  # noqa: A002 - signature from the base class
        pass


@pytest.fixture(scope="session")
def origin(built_html: Path) -> Iterator[str]:
    """``http://127.0.0.1:<free port>`` serving ``_build/html``."""
    handler = functools.partial(_QuietHandler, directory=str(built_html))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


# --------------------------------------------------------------------------------------
# Chromium through Playwright, with every outside request blocked and recorded
# --------------------------------------------------------------------------------------
@pytest.fixture(scope="session")
def browser(chromium_executable: Path):
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        chromium = playwright.chromium.launch(
            executable_path=str(chromium_executable), headless=True, args=CHROMIUM_ARGS
        )
        try:
            yield chromium
        finally:
            chromium.close()


@dataclass
class PageLog:
    """Everything that went wrong while a page loaded, as human-readable lines."""

    console_errors: list[str] = field(default_factory=list)
    page_errors: list[str] = field(default_factory=list)
    failed_requests: list[str] = field(default_factory=list)
    blocked_requests: list[str] = field(default_factory=list)

    def problems(self) -> list[str]:
        return (
            [f"console error: {m}" for m in self.console_errors]
            + [f"uncaught JavaScript error: {m}" for m in self.page_errors]
            + [f"failed request: {m}" for m in self.failed_requests]
            + [f"request outside _build/html (blocked): {m}" for m in self.blocked_requests]
        )


@pytest.fixture
def open_page(browser, origin: str):
    """``open_page(path) -> (page, log)``: a fresh browser context per call, loading
    ``origin/path`` with outside requests blocked; ``log`` collects what went wrong."""
    contexts = []

    def _open(path: str):
        context = browser.new_context(viewport={"width": 1280, "height": 900})
        contexts.append(context)
        log = PageLog()

        def route(route_request):
            url = route_request.request.url
            if url == origin or url.startswith(origin + "/") or url.startswith(("data:", "blob:")):
                route_request.continue_()
            else:
                log.blocked_requests.append(url)
                route_request.abort("blockedbyclient")

        context.route("**/*", route)
        page = context.new_page()
        page.set_default_timeout(NAVIGATION_TIMEOUT_MS)

        def on_console(message):
            if message.type == "error":
                log.console_errors.append(f"{message.text} ({message.location.get('url', '')})")

        page.on("console", on_console)
        page.on("pageerror", lambda exc: log.page_errors.append(str(exc)))

        def on_request_failed(request):
            if request.url.startswith(origin):  # outside requests are logged as blocked
                log.failed_requests.append(f"{request.url} ({request.failure})")

        def on_response(response):
            if response.status >= 400:
                log.failed_requests.append(f"{response.url} (HTTP {response.status})")

        page.on("requestfailed", on_request_failed)
        page.on("response", on_response)
        page.goto(f"{origin}/{path}", wait_until="load")
        return page, log

    yield _open
    for context in contexts:
        context.close()


# --------------------------------------------------------------------------------------
# Link targets on disk: files and the ids inside HTML files
# --------------------------------------------------------------------------------------
class _IdCollector(HTMLParser):
    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.ids: set[str] = set()

    def handle_starttag(self, tag, attrs):
        for name, value in attrs:
            if value and (name == "id" or (tag == "a" and name == "name")):
                self.ids.add(value)


@functools.cache
def anchors_in(html_file: Path) -> frozenset[str]:
    collector = _IdCollector()
    collector.feed(html_file.read_text(encoding="utf8", errors="replace"))
    return frozenset(collector.ids)


def broken_internal_link(href: str, origin: str, html_dir: Path) -> str | None:
    """Why the resolved link ``href`` (absolute URL) is broken, or None if it is fine or
    not internal. Internal = served from ``origin``; its file must exist under ``html_dir``
    and its ``#fragment`` (if any) must be an id on the target page."""
    if not href.startswith(origin + "/"):
        return None
    parts = urlsplit(href)
    rel = unquote(parts.path).lstrip("/")
    target = (html_dir / rel) if rel else html_dir
    if target.is_dir():
        target = target / "index.html"
    try:
        target.resolve().relative_to(html_dir.resolve())
    except ValueError:
        return f"{href}: points outside _build/html"
    if not target.is_file():
        return f"{href}: file {target.relative_to(html_dir)} does not exist"
    fragment = unquote(parts.fragment)
    if fragment and target.suffix == ".html" and fragment not in anchors_in(target):
        return f"{href}: no element with id '{fragment}' on {target.relative_to(html_dir)}"
    return None
