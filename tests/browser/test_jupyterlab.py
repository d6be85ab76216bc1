"""The chapters as a reader runs them: JupyterLab + jupyterlab-myst in headless Chromium.

``pytest -m browser tests/browser`` (``.ci/run`` runs it after the book build) starts
JupyterLab the way the README tells readers to (``--LabApp.app_settings_dir=book/.lab_settings``,
the project's ``overrides.json``) on a free port with a token, with temporary user settings,
workspaces, config and runtime folders, on a temporary COPY of ``book/`` (so nothing a test
does can be saved into the repository). It opens every notebook chapter of ``_toc.yml`` and,
once every markdown cell is rendered, fails on:

- a raw MyST role (``{cite}``, ``{doc}``, ...), directive fence, directive option
  (``:class: dropdown``) or label line (``(name)=``) in the rendered text;
- a directive shown as a code block, an "Unknown Directive", a citation that JupyterLab
  cannot resolve (shown as its raw key), a cross-reference that it cannot resolve (except
  ``{numref}`` to a figure made by a code cell, which JupyterLab cannot number: listed);
- a model answer, solution or other dropdown that is open when the page loads;
- the "get notified about official Jupyter news?" prompt.

It runs one fast chapter (Run All) and fails on any error output, and saves a screenshot of
the interview chapter in ``_build/screenshots/jupyterlab_interview.png``.

``JUPYTERLAB_BOOK_DIR=/some/copy/of/book`` checks notebooks elsewhere (e.g. converted copies).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from .conftest import REPO_ROOT, SCREENSHOT_DIR, toc_docnames

pytestmark = pytest.mark.browser

BOOK_DIR = Path(os.environ.get("JUPYTERLAB_BOOK_DIR", REPO_ROOT / "book")).resolve()
# written by the book build (python -m layernorm_tutorial.publishing.book_build)
ZH_BOOK_DIR = REPO_ROOT / "_build" / "zh_notebooks" / "book"
ZH_CHAPTER = "principles"
# the override the README passes to `jupyter lab`
LAB_SETTINGS = REPO_ROOT / "book" / ".lab_settings"
RUN_ALL_CHAPTER = "interview"  # a fast chapter (seconds) for the Run All check
SCREENSHOT_CHAPTER = "interview"
SERVER_START_S = 120
RENDER_TIMEOUT_S = 120
RUN_ALL_TIMEOUT_S = 300


def chapter_names() -> list[str]:
    """Notebook chapters in toc order (``interview`` for ``book/interview``)."""
    names = [d.split("/")[-1] for d in toc_docnames()]
    return [n for n in names if (REPO_ROOT / "book" / f"{n}.ipynb").is_file()]


def notebook_facts(path: Path) -> dict:
    nb = json.loads(path.read_text(encoding="utf8"))
    cells = nb["cells"]
    figures = set()
    for cell in cells:
        mystnb = cell.get("metadata", {}).get("mystnb", {})
        for kind in ("figure", "table"):
            if (mystnb.get(kind) or {}).get("name"):
                figures.add(mystnb[kind]["name"])
    return {
        "cells": len(cells),
        "markdown": sum(c["cell_type"] == "markdown" for c in cells),
        "code": sum(c["cell_type"] == "code" for c in cells),
        "figures": figures,
    }


# --------------------------------------------------------------------------------------
# JupyterLab server on a copy of the book, with throw-away settings
# --------------------------------------------------------------------------------------
def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _write_settings(settings_dir: Path) -> None:
    """User settings for the test only. The news prompt is NOT set here: the project's
    overrides.json must suppress it."""
    files = {
        # Every cell in the DOM (JupyterLab 4 virtualizes long notebooks by default).
        "@jupyterlab/notebook-extension/tracker": {"windowingMode": "none"},
        # Never write into the served copy behind the test's back.
        "@jupyterlab/docmanager-extension/plugin": {"autosave": False},
        # No request to PyPI for a newer JupyterLab during the test.
        "@jupyterlab/apputils-extension/notification": {"checkForUpdates": False},
    }
    for name, values in files.items():
        path = settings_dir / f"{name}.jupyterlab-settings"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(values), encoding="utf8")


@pytest.fixture(scope="module")
def lab(tmp_path_factory):
    """``{"url": ..., "token": ...}`` of a JupyterLab serving a copy of the book."""
    yield from _serve(tmp_path_factory, BOOK_DIR)


@pytest.fixture(scope="module")
def lab_zh(tmp_path_factory):
    """The same, serving the Chinese notebooks that the book build wrote."""
    yield from _serve(tmp_path_factory, ZH_BOOK_DIR)


def _serve(tmp_path_factory, book_dir: Path):
    if not book_dir.is_dir():
        pytest.fail(f"no notebook folder {book_dir} (the book build writes the Chinese one)",
                    pytrace=False)
    tmp = tmp_path_factory.mktemp("jupyterlab")
    root = tmp / "book"
    shutil.copytree(book_dir, root, ignore=shutil.ignore_patterns(".ipynb_checkpoints", "_build"))
    _write_settings(tmp / "user-settings")
    port, token = _free_port(), os.urandom(12).hex()
    env = dict(
        os.environ,
        JUPYTERLAB_SETTINGS_DIR=str(tmp / "user-settings"),
        JUPYTERLAB_WORKSPACES_DIR=str(tmp / "workspaces"),
        JUPYTER_CONFIG_DIR=str(tmp / "config"),
        JUPYTER_RUNTIME_DIR=str(tmp / "runtime"),
        OMP_NUM_THREADS=os.environ.get("OMP_NUM_THREADS", "1"),
        MKL_NUM_THREADS=os.environ.get("MKL_NUM_THREADS", "1"),
    )
    command = [
        sys.executable, "-m", "jupyterlab", "--no-browser",
        "--ServerApp.ip=127.0.0.1", f"--ServerApp.port={port}", "--ServerApp.port_retries=0",
        f"--IdentityProvider.token={token}", f"--ServerApp.root_dir={root}",
        f"--LabApp.app_settings_dir={LAB_SETTINGS}",
        "--LabApp.extension_manager=readonly",
    ]  # fmt: skip
    if hasattr(os, "getuid") and os.getuid() == 0:
        command.append("--allow-root")  # CI containers run as root
    log_path = tmp / "jupyterlab.log"
    with open(log_path, "w", encoding="utf8") as log:
        server = subprocess.Popen(command, env=env, stdout=log, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + SERVER_START_S
        while True:
            if server.poll() is not None:
                pytest.fail(f"JupyterLab exited ({server.returncode}):\n{log_path.read_text()}")
            try:
                urllib.request.urlopen(f"{url}/api/status?token={token}", timeout=2)
                break
            except OSError:
                if time.monotonic() > deadline:
                    pytest.fail(f"JupyterLab did not start:\n{log_path.read_text()}")
                time.sleep(0.3)
        yield {"url": url, "token": token, "root": root, "log": log_path}
    finally:
        server.terminate()  # also shuts the kernels down
        try:
            server.wait(timeout=30)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait(timeout=30)


def _shutdown_kernels(lab) -> None:
    """Stop the kernels that opening a notebook starts (they hold memory between tests)."""
    headers = {"Authorization": f"token {lab['token']}"}
    request = urllib.request.Request(f"{lab['url']}/api/sessions", headers=headers)
    with urllib.request.urlopen(request, timeout=10) as response:
        sessions = json.load(response)
    for session in sessions:
        kill = urllib.request.Request(
            f"{lab['url']}/api/sessions/{session['id']}", headers=headers, method="DELETE"
        )
        urllib.request.urlopen(kill, timeout=30).close()


def _wait_for_idle_kernel(lab) -> None:
    """Wait until the notebook's kernel has started and is idle."""
    headers = {"Authorization": f"token {lab['token']}"}
    deadline = time.monotonic() + RENDER_TIMEOUT_S
    while time.monotonic() < deadline:
        request = urllib.request.Request(f"{lab['url']}/api/sessions", headers=headers)
        with urllib.request.urlopen(request, timeout=10) as response:
            states = [s["kernel"]["execution_state"] for s in json.load(response)]
        if states and all(state == "idle" for state in states):
            return
        time.sleep(0.5)
    pytest.fail(f"the kernel did not become idle in {RENDER_TIMEOUT_S} s")


@pytest.fixture
def open_notebook(browser, lab):
    """``open_notebook(name) -> page``: the notebook in a fresh browser context, outside
    requests blocked and recorded in ``page.blocked``."""
    yield from _opener(browser, lab)


@pytest.fixture
def open_zh_notebook(browser, lab_zh):
    """:func:`open_notebook` for the Chinese notebooks."""
    yield from _opener(browser, lab_zh)


def _opener(browser, lab):
    contexts = []

    def _open(name: str):
        context = browser.new_context(viewport={"width": 1280, "height": 900})
        contexts.append(context)
        blocked: list[str] = []

        def route(route_request):
            url = route_request.request.url
            if url.startswith((lab["url"] + "/", "data:", "blob:")):
                route_request.continue_()
            else:
                blocked.append(url)
                route_request.abort("blockedbyclient")

        context.route("**/*", route)
        page = context.new_page()
        page.set_default_timeout(RENDER_TIMEOUT_S * 1000)
        page.blocked = blocked
        page.goto(f"{lab['url']}/lab/tree/{name}.ipynb?reset&token={lab['token']}")
        return page

    yield _open
    for context in contexts:
        context.close()
    _shutdown_kernels(lab)


# --------------------------------------------------------------------------------------
# What the page shows
# --------------------------------------------------------------------------------------
# Resolves once the notebook has `cells` cells and every markdown cell is rendered.
WAIT_RENDERED_JS = """
async ([cells, timeoutMs]) => {
  const deadline = Date.now() + timeoutMs;
  const state = () => {
    const nb = document.querySelector('.jp-NotebookPanel:not(.lm-mod-hidden) .jp-Notebook');
    if (!nb) return 'no notebook';
    const all = nb.querySelectorAll('.jp-Cell');
    if (all.length !== cells) return `${all.length}/${cells} cells in the page`;
    const md = Array.from(nb.querySelectorAll('.jp-MarkdownCell'));
    const pending = md.filter(c => !c.classList.contains('jp-mod-rendered')
      || !c.querySelector('.myst, .jp-RenderedMarkdown')).length;
    return pending ? `${pending} markdown cells not rendered` : 'ok';
  };
  let last = state();
  while (last !== 'ok' && Date.now() < deadline) {
    await new Promise(r => setTimeout(r, 250));
    last = state();
  }
  return last;
}
"""

# Per markdown cell: prose text (math and code left out), code blocks that are directives,
# open <details>, unresolved references, and the whole visible text.
MARKDOWN_CELLS_JS = """
() => Array.from(document.querySelectorAll(
    '.jp-NotebookPanel:not(.lm-mod-hidden) .jp-Notebook .jp-MarkdownCell')).map((cell, i) => {
  const out = cell.querySelector('.myst, .jp-RenderedMarkdown');
  if (!out) return {index: i, missing: true};
  const skip = 'code, pre, mjx-container, .MathJax, .katex, script, style';
  const walker = document.createTreeWalker(out, NodeFilter.SHOW_TEXT);
  const prose = [];
  for (let n = walker.nextNode(); n; n = walker.nextNode()) {
    if (n.parentElement && !n.parentElement.closest(skip)) prose.push(n.textContent);
  }
  const notFound = Array.from(out.querySelectorAll('[title$="Not Found"]'))
    .map(e => ({kind: e.getAttribute('title'), text: e.textContent.trim()}));
  return {
    index: i,
    prose: prose.join(''),
    visible: out.innerText,
    directiveCode: Array.from(out.querySelectorAll('code[class*="language-{"]'))
      .map(e => e.className),
    openDetails: Array.from(out.querySelectorAll('details[open] > summary'))
      .map(e => e.innerText.trim()),
    closedDetails: out.querySelectorAll('details:not([open])').length,
    notFound: notFound,
  };
})
"""

RAW_PATTERNS = {
    "raw MyST role": re.compile(r"\{[a-z][\w.+-]*(?::[\w.+-]+)*\}"),
    "directive fence": re.compile(r"(?:^|\n)[ \t]*(?:`{3,}|:{3,})"),
    "directive option": re.compile(r"(?:^|\s):[a-z][a-z-]*:[ \t]+\S"),
    "label line": re.compile(r"(?:^|\s)\([\w.:-]+\)="),
}


def _snippet(text: str, match: re.Match) -> str:
    return " ".join(text[max(0, match.start() - 30) : match.end() + 40].split())


def markdown_problems(cells: list[dict], figures: set[str]) -> tuple[list[str], list[str]]:
    """(problems, notes) for the rendered markdown cells of one notebook."""
    problems, notes = [], []
    for cell in cells:
        where = f"markdown cell {cell['index']}"
        if cell.get("missing"):
            problems.append(f"{where}: not rendered")
            continue
        for kind, pattern in RAW_PATTERNS.items():
            for match in pattern.finditer(cell["prose"]):
                problems.append(f"{where}: {kind}: ...{_snippet(cell['prose'], match)}...")
        for cls in cell["directiveCode"]:
            problems.append(f"{where}: directive shown as a code block ({cls})")
        if "Unknown Directive" in cell["visible"]:
            problems.append(f"{where}: 'Unknown Directive' box")
        for title in cell["openDetails"]:
            problems.append(f"{where}: expanded on load: {title!r}")
        for item in cell["notFound"]:
            if item["kind"] == "Cross Reference Not Found" and item["text"] in figures:
                notes.append(f"{where}: unnumbered figure reference {item['text']!r}")
            else:
                problems.append(f"{where}: {item['kind']}: shows the raw key {item['text']!r}")
    return problems, notes


NEWS_PROMPT = "official Jupyter news"


@pytest.mark.parametrize("name", chapter_names())
def test_chapter_renders_in_jupyterlab(name, open_notebook):
    facts = notebook_facts(BOOK_DIR / f"{name}.ipynb")
    page = open_notebook(name)
    state = page.evaluate(WAIT_RENDERED_JS, [facts["cells"], RENDER_TIMEOUT_S * 1000])
    assert state == "ok", f"{name}.ipynb did not render in JupyterLab: {state}"
    cells = page.evaluate(MARKDOWN_CELLS_JS)
    assert len(cells) == facts["markdown"], (len(cells), facts["markdown"])
    problems, notes = markdown_problems(cells, facts["figures"])
    if NEWS_PROMPT in page.locator("body").inner_text():
        problems.append("JupyterLab asks about Jupyter news "
                        "(book/.lab_settings/overrides.json unused?)")
    problems += [f"request outside the server (blocked): {u}" for u in page.blocked]
    folded = sum(c.get("closedDetails", 0) for c in cells)
    print(f"{name}: {len(cells)} markdown cells, {folded} folded dropdowns, notes: {len(notes)}")
    for note in notes:
        print(f"  note: {note}")
    if name == SCREENSHOT_CHAPTER:
        answer = page.locator(".jp-MarkdownCell summary").first
        if answer.count():
            answer.scroll_into_view_if_needed()
        SCREENSHOT_DIR.mkdir(parents=True, exist_ok=True)
        page.screenshot(path=str(SCREENSHOT_DIR / f"jupyterlab_{name}.png"))
    assert not problems, f"{name}.ipynb in JupyterLab: {len(problems)} problem(s):\n" + "\n".join(
        f"  - {p}" for p in problems
    )


# Code cells' prompts and error outputs after Run All.
RUN_STATE_JS = """
() => {
  const nb = document.querySelector('.jp-NotebookPanel:not(.lm-mod-hidden) .jp-Notebook');
  const prompts = Array.from(nb.querySelectorAll('.jp-CodeCell .jp-InputArea-prompt'))
    .map(p => p.textContent.trim());
  const errors = Array.from(nb.querySelectorAll(
      '.jp-OutputArea-output[data-mime-type="application/vnd.jupyter.stderr"]'))
    .map(e => e.innerText).filter(t => /Traceback|Error\\b/.test(t))
    .map(t => t.slice(0, 1500));
  return {prompts, errors};
}
"""


def test_run_all_cells_without_errors(open_notebook, lab):
    """Clear the outputs, Run All, wait for every code cell to finish: no error output."""
    facts = notebook_facts(BOOK_DIR / f"{RUN_ALL_CHAPTER}.ipynb")
    page = open_notebook(RUN_ALL_CHAPTER)
    state = page.evaluate(WAIT_RENDERED_JS, [facts["cells"], RENDER_TIMEOUT_S * 1000])
    assert state == "ok", state
    _wait_for_idle_kernel(lab)

    def menu(top: str, item: str) -> None:
        page.locator(".lm-MenuBar-itemLabel", has_text=re.compile(f"^{top}$")).click()
        page.locator(".lm-Menu-itemLabel", has_text=re.compile(f"^{item}$")).click()

    menu("Edit", "Clear Outputs of All Cells")
    page.wait_for_function(
        "() => Array.from(document.querySelectorAll('.jp-CodeCell .jp-InputArea-prompt'))"
        ".every(p => !/\\d/.test(p.textContent))"
    )
    start = time.monotonic()
    menu("Run", "Run All Cells")
    deadline = start + RUN_ALL_TIMEOUT_S
    while True:
        run = page.evaluate(RUN_STATE_JS)
        done = len(run["prompts"]) == facts["code"] and all(
            re.fullmatch(r"\[\d+\]:", p) for p in run["prompts"]
        )
        if done or run["errors"] or time.monotonic() > deadline:
            break
        time.sleep(0.5)
    print(f"Run All of {RUN_ALL_CHAPTER}: {time.monotonic() - start:.1f} s")
    assert not run["errors"], "error output after Run All:\n" + "\n---\n".join(run["errors"])
    assert done, f"Run All did not finish in {RUN_ALL_TIMEOUT_S} s: prompts {run['prompts']}"
    counts = [int(p[1:-2]) for p in run["prompts"]]
    assert counts == list(range(1, len(counts) + 1)), f"cells ran out of order: {counts}"


HEADINGS_JS = """
() => Array.from(document.querySelectorAll(
    '.jp-NotebookPanel:not(.lm-mod-hidden) .jp-MarkdownCell h1, '
    + '.jp-NotebookPanel:not(.lm-mod-hidden) .jp-MarkdownCell h2'))
  .map(h => h.innerText.trim())
"""
CJK = re.compile(r"[\u3400-\u9fff]")


def test_a_chinese_chapter_renders_in_jupyterlab(open_zh_notebook):
    """The Chinese notebook of one chapter: every markdown cell rendered, its headings in
    Chinese, no raw MyST, no unresolved reference."""
    facts = notebook_facts(ZH_BOOK_DIR / f"{ZH_CHAPTER}.ipynb")
    page = open_zh_notebook(ZH_CHAPTER)
    state = page.evaluate(WAIT_RENDERED_JS, [facts["cells"], RENDER_TIMEOUT_S * 1000])
    assert state == "ok", f"Chinese {ZH_CHAPTER}.ipynb did not render: {state}"
    headings = page.evaluate(HEADINGS_JS)
    assert headings, "no headings rendered"
    english = [h for h in headings if not CJK.search(h)]
    assert len(english) <= len(headings) // 4, f"headings left in English: {english}"
    cells = page.evaluate(MARKDOWN_CELLS_JS)
    problems, _ = markdown_problems(cells, facts["figures"])
    problems += [f"request outside the server (blocked): {u}" for u in page.blocked]
    SCREENSHOT_DIR.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(SCREENSHOT_DIR / f"jupyterlab_zh_{ZH_CHAPTER}.png"))
    assert not problems, "\n".join(problems)
