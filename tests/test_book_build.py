"""The book's build command (``publishing.book_build``), issue 24 items 8-10.

Item 8, mistakes a user makes, each answered in one line before any work:
run outside the repository; the Chinese title untranslated; catalogs with untranslated,
fuzzy or out-of-date messages (checked *before* the English build); ``gettext --output DIR``
writes only under DIR.

Item 9, the book is built from the outputs stored in the notebooks (which ``pytest``
re-executes and compares with nbval): ``_config.yml`` says so, the execution-times table is
read from the timings stored in each notebook, a notebook with cells never executed is
reported, and ``--execute`` builds with execution for a maintainer.

Sphinx itself is replaced by a recorder here (a real build takes tens of seconds and is
checked by the strict build of .ci/run); the real message extraction is checked by
tests/test_i18n.py's ``extracted`` fixture.
"""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import pytest
import yaml

from layernorm_tutorial.publishing import book_build

ROOT = Path(__file__).resolve().parents[1]


class Recorder:
    """Stands in for ``book_build._build`` (Sphinx): records each call, writes like Sphinx
    and myst-nb do (the output folder, the doctrees, ``<outdir>/../jupyter_execute``)."""

    def __init__(self, pots: dict[str, list[str]] | None = None):
        self.calls: list[tuple[str, Path, dict]] = []
        self.pots = pots or {}

    def __call__(self, root, builder, outdir, doctrees, overrides, strict, nitpicky,
                 keep_going, quiet=False, really_quiet=False):
        self.calls.append((builder, Path(outdir), dict(overrides)))
        outdir, doctrees = Path(outdir), Path(doctrees)
        (outdir / "_static").mkdir(parents=True, exist_ok=True)
        (outdir / "_static" / "mathjax.js").write_text("x", encoding="utf8")
        doctrees.mkdir(parents=True, exist_ok=True)
        (doctrees / "environment.pickle").write_bytes(b"x")
        (outdir.parent / "jupyter_execute").mkdir(parents=True, exist_ok=True)
        (outdir.parent / "jupyter_execute" / "page.ipynb").write_text("{}", encoding="utf8")
        if builder == "gettext":
            for page, ids in self.pots.items():
                pot = outdir / f"{page}.pot"
                pot.parent.mkdir(parents=True, exist_ok=True)
                pot.write_text(_po_text({i: "" for i in ids}), encoding="utf8")
        return 0

    def builders(self) -> list[str]:
        return [call[0] for call in self.calls]


def _po_text(messages: dict[str, str], fuzzy: tuple[str, ...] = ()) -> str:
    text = 'msgid ""\nmsgstr ""\n"Content-Type: text/plain; charset=UTF-8\\n"\n'
    for msgid, msgstr in messages.items():
        flag = "#, fuzzy\n" if msgid in fuzzy else ""
        text += f"\n{flag}msgid {json.dumps(msgid, ensure_ascii=False)}\n" \
                f"msgstr {json.dumps(msgstr, ensure_ascii=False)}\n"
    return text


TITLE = "A small book"
PAGE = {TITLE: "一本小书", "Some text.": "一些文字。"}


@pytest.fixture
def book(tmp_path, monkeypatch):
    """A book repository (config, table of contents, glossary, one catalog) in tmp_path,
    the current folder; Sphinx replaced by a Recorder that extracts PAGE's messages."""
    (tmp_path / "_config.yml").write_text(f"title: {TITLE}\n", encoding="utf8")
    (tmp_path / "_toc.yml").write_text("format: jb-book\nroot: book/intro\n", encoding="utf8")
    (tmp_path / "book").mkdir()
    (tmp_path / "book" / "glossary.md").write_text(
        "# Glossary\n\n```{glossary}\nLayer normalization\n  中文：层归一化。 Per row.\n```\n",
        encoding="utf8")
    po = tmp_path / "locales" / "zh_CN" / "LC_MESSAGES" / "book" / "intro.po"
    po.parent.mkdir(parents=True)
    po.write_text(_po_text(PAGE), encoding="utf8")
    recorder = Recorder({"book/intro": list(PAGE)})
    monkeypatch.setattr(book_build, "_build", recorder)
    monkeypatch.chdir(tmp_path)
    return tmp_path, po, recorder


def _one_line(capsys) -> str:
    err = capsys.readouterr().err.strip()
    assert err and "\n" not in err and "Traceback" not in err, err
    return err


# --------------------------------------------------------------------------------------
# Item 8
# --------------------------------------------------------------------------------------
def test_outside_the_repository_fails_in_one_line_naming_the_layout(tmp_path, monkeypatch,
                                                                     capsys):
    monkeypatch.chdir(tmp_path)
    recorder = Recorder()
    monkeypatch.setattr(book_build, "_build", recorder)
    for command in ([], ["html", "--lang", "en"], ["gettext"], ["update-po"]):
        assert book_build.main(command) == 2
        err = _one_line(capsys)
        assert "_config.yml" in err and "_toc.yml" in err and str(tmp_path) in err
    assert recorder.calls == []


def test_an_untranslated_title_fails_in_one_line_naming_the_catalog(book, capsys):
    root, po, recorder = book
    po.write_text(_po_text({**PAGE, TITLE: ""}), encoding="utf8")
    assert book_build.main(["--build-dir", str(root / "b")]) == 2
    err = _one_line(capsys)
    assert "locales/zh_CN/LC_MESSAGES/book/intro.po" in err and TITLE in err
    assert recorder.calls == []  # nothing built, not even the English edition
    assert book_build.main(["html", "--lang", "zh", "--no-translation-check"]) == 2
    assert "intro.po" in _one_line(capsys)


def test_unfinished_catalogs_stop_the_build_before_the_english_edition(book, capsys):
    root, po, recorder = book
    po.write_text(_po_text({**PAGE, "Some text.": "", "More text.": "更多。"},
                           fuzzy=("More text.",)), encoding="utf8")
    assert book_build.main([]) == 2
    err = _one_line(capsys)
    assert "book/intro.po (1 untranslated, 1 fuzzy)" in err
    assert recorder.calls == []


def test_stale_catalogs_stop_the_build_before_the_english_edition(book, capsys):
    root, po, recorder = book
    recorder.pots = {"book/intro": [*PAGE, "A new sentence."], "book/new_page": ["Hello."]}
    assert book_build.main([]) == 2
    err = _one_line(capsys)
    assert "book/intro (1 new message(s))" in err and "book/new_page (no catalog)" in err
    assert "update-po" in err
    assert recorder.builders() == ["gettext"]  # the extraction only: no HTML
    assert not (root / "_build" / ".translation-check").exists()


def test_complete_catalogs_build_the_english_then_the_chinese_edition(book, monkeypatch):
    root, po, recorder = book
    started = []
    monkeypatch.setattr(book_build, "_build_both_in_parallel",
                        lambda root, build, args: started.append(recorder.builders()) or 0)
    assert book_build.main(["check"]) == 0
    assert book_build.main([]) == 0
    assert started == [["gettext", "gettext"]]  # checked (extraction) before any HTML


def test_gettext_output_writes_only_under_the_folder(book, tmp_path_factory, capsys):
    root, po, recorder = book
    parent = tmp_path_factory.mktemp("parent")
    out = parent / "pots"
    assert book_build.main(["gettext", "--output", str(out)]) == 0
    assert sorted(p.name for p in parent.iterdir()) == ["pots"]
    assert sorted(p.relative_to(out).as_posix() for p in out.rglob("*")) == [
        "book", "book/intro.pot"]
    # A folder with other files in it is not written into without --force.
    (out / "notes.txt").write_text("mine", encoding="utf8")
    assert book_build.main(["gettext", "--output", str(out)]) == 2
    assert "notes.txt" in _one_line(capsys)
    assert book_build.main(["gettext", "--output", str(out), "--force"]) == 0
    assert (out / "notes.txt").read_text(encoding="utf8") == "mine"


# --------------------------------------------------------------------------------------
# Item 9
# --------------------------------------------------------------------------------------
def test_the_book_is_built_from_the_stored_outputs():
    config = yaml.safe_load((ROOT / "_config.yml").read_text(encoding="utf8"))
    assert config["execute"]["execute_notebooks"] == "off"
    assert "layernorm_tutorial.publishing.stored_outputs" in config["sphinx"]["config"][
        "extensions"]


def test_execute_is_one_flag_for_a_maintainer(book, monkeypatch):
    root, po, recorder = book
    assert book_build.main(["html", "--lang", "en"]) == 0
    assert "nb_execution_mode" not in recorder.calls[-1][2]  # _config.yml's "off"
    assert book_build.main(["html", "--lang", "en", "--execute"]) == 0
    assert recorder.calls[-1][2]["nb_execution_mode"] == "cache"
    recorder.calls.clear()
    cache = root / "_build" / ".jupyter_cache"
    cache.mkdir(parents=True)
    assert book_build.main(["--execute"]) == 0
    html = [c for c in recorder.calls if c[0] == "html"]
    assert [c[1] for c in html] == [root / "_build" / "html", root / "_build" / "html" / "zh"]
    assert all(c[2]["nb_execution_mode"] == "cache" for c in html)
    assert not cache.exists()  # executed afresh


def _cell(count, start, end, outputs=()):
    return {"cell_type": "code", "execution_count": count, "source": "x = 1",
            "outputs": list(outputs),
            "metadata": {"execution": {"iopub.execute_input": start,
                                       "shell.execute_reply": end}} if start else {}}


def test_the_execution_table_is_read_from_the_stored_timings():
    from layernorm_tutorial.publishing.stored_outputs import stored_run

    notebook = {"cells": [
        {"cell_type": "markdown", "source": "# Title"},
        _cell(1, "2026-01-02T10:00:00.000000Z", "2026-01-02T10:00:01.500000Z"),
        _cell(2, "2026-01-02T10:00:02.000000Z", "2026-01-02T10:00:12.250000Z"),
    ]}
    run = stored_run(notebook)
    assert run["runtime"] == pytest.approx(12.25)
    assert run["mtime"] == pytest.approx(1767348012.25)
    assert run["method"] == "stored" and run["succeeded"] and run["never_executed"] == []
    notebook["cells"].append(_cell(None, None, None))
    notebook["cells"].append(_cell(4, "2026-01-02T10:00:13Z", "2026-01-02T10:00:14Z",
                                   [{"output_type": "error", "ename": "ValueError",
                                     "evalue": "bad", "traceback": []}]))
    run = stored_run(notebook)
    assert run["never_executed"] == [3] and not run["succeeded"]
    assert run["error"] == "ValueError: bad"


def test_every_chapter_has_stored_outputs_to_build_from():
    toc = yaml.safe_load((ROOT / "_toc.yml").read_text(encoding="utf8"))
    from layernorm_tutorial.publishing.stored_outputs import stored_run

    files = [c["file"] for part in toc["parts"] for c in part["chapters"]]
    notebooks = [ROOT / f"{f}.ipynb" for f in files if (ROOT / f"{f}.ipynb").exists()]
    assert len(notebooks) >= 10
    problems = []
    for path in notebooks:
        run = stored_run(json.loads(path.read_text(encoding="utf8")))
        if run["never_executed"]:
            problems.append(f"{path.name}: cells {run['never_executed']} never executed")
        if run["runtime"] is None:
            problems.append(f"{path.name}: no stored execution timings")
    assert not problems, problems


def test_ci_builds_the_book_without_executing_it_again():
    run = (ROOT / ".ci" / "run").read_text(encoding="utf8")
    commands = [line.strip() for line in run.splitlines()
                if line.strip() and not line.strip().startswith("#")]
    assert "pytest" in commands  # nbval: every notebook executed once
    build = [c for c in commands if "layernorm_tutorial.publishing.book_build" in c]
    assert build and all("--execute" not in c for c in build)


def test_readme_says_pytest_reexecutes_what_the_book_shows():
    readme = (ROOT / "README.md").read_text(encoding="utf8")
    section = readme.split("## Two commands", 1)[1].split("\n## ", 1)[0]
    assert "re-executes every notebook" in textwrap.dedent(section).replace("\n", " ")


def test_translated_nodes_do_not_carry_the_build_environment_into_the_doctree():
    """Nodes parsed from a translated message point to their page, not to the small
    document of the message (whose settings hold the whole environment: every pickled
    Chinese doctree used to carry a copy of everything read before it)."""
    from types import SimpleNamespace

    from docutils import nodes
    from docutils.utils import new_document

    from layernorm_tutorial.publishing.book_i18n import sphinx_ext

    page, message = new_document("page.md"), new_document("page.md:3:<translated>")
    paragraph = nodes.paragraph("", "")
    text = nodes.Text("层归一化")
    paragraph += text
    page += paragraph
    paragraph.document, text.document = message, message  # as Sphinx's Locale leaves them
    sphinx_ext._reattach_translated_nodes(SimpleNamespace(config=SimpleNamespace(
        language="en")), page)
    assert paragraph.document is message  # the English edition is left alone
    sphinx_ext._reattach_translated_nodes(SimpleNamespace(config=SimpleNamespace(
        language="zh_CN")), page)
    assert paragraph.document is page and text.document is page


def test_the_chinese_search_splitter_keeps_its_latin_words_in_a_set():
    from sphinx.search.zh import SearchChinese

    from layernorm_tutorial.publishing.book_i18n import sphinx_ext

    sphinx_ext._chinese_search_terms_as_a_set()
    splitter = SearchChinese({})
    assert isinstance(SearchChinese.latin_terms, set)
    assert "LayerNorm" in splitter.split("层归一化 LayerNorm 与 BN")
    assert "LayerNorm" in SearchChinese.latin_terms
    assert splitter.stem("LayerNorm") == splitter.stemmer.stemWord("layernorm")
