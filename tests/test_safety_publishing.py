"""Issue 40: nothing a publishing command does can destroy a reader's work.

Each test replays a reproduction of ``/work/shared/reviews/reliability-probe-4.md``
(defects D1, D6, D7, D8, D14) in a small repository made in ``tmp_path``, never in this
checkout:

- D1: ``book_i18n.notebooks --out <sources or repository> --force`` deleted the English
  chapters or the whole checkout; ``--force`` now replaces only a folder the command made.
- D6: a file, an unwritable place or the sources as an output folder of ``book_build`` or
  ``notebooks`` gave a Sphinx or ``shutil`` traceback; now one line and exit status 2.
- D7: Ctrl-C during ``book_build`` gave ``TypeError: int() argument ... 'KeyboardInterrupt'``.
- D8: ``flashcards`` replaced a deck without ``--force``, wrote it in place (an interrupted
  write left half a deck) and left genanki's SQLite file in the temp folder.
- D14: ``book_build`` printed torch's ``reduce_op`` FutureWarning on every run.
"""

from __future__ import annotations

import json
import os
import sys
import warnings
import zipfile
from pathlib import Path

import pytest

from layernorm_tutorial.publishing import book_build, flashcards
from layernorm_tutorial.publishing.book_i18n import notebooks as zn

PROC = Path("/proc")
on_linux = pytest.mark.skipif(not PROC.is_dir() or sys.platform != "linux",
                              reason="needs Linux's /proc as a place nothing can be written")


def _po(messages: dict[str, str]) -> str:
    text = 'msgid ""\nmsgstr ""\n"Content-Type: text/plain; charset=UTF-8\\n"\n'
    for msgid, msgstr in messages.items():
        text += f"\nmsgid {json.dumps(msgid, ensure_ascii=False)}\n" \
                f"msgstr {json.dumps(msgstr, ensure_ascii=False)}\n"
    return text


def _notebook(*markdown: str) -> str:
    cells = [{"cell_type": "markdown", "metadata": {}, "id": f"c{i}", "source": [text]}
             for i, text in enumerate(markdown)]
    return json.dumps({"cells": cells, "metadata": {}, "nbformat": 4, "nbformat_minor": 5})


@pytest.fixture
def repo(tmp_path, monkeypatch):
    """A small repository (config, table of contents, two pages with catalogs, a package
    folder, tests, .git) at ``tmp_path/outer/repo``, the current folder. Nested, so that
    ``--out ..`` names a folder inside ``tmp_path`` too."""
    root = tmp_path / "outer" / "repo"
    (root / "book").mkdir(parents=True)
    (root / "_config.yml").write_text("title: A small book\n", encoding="utf8")
    (root / "_toc.yml").write_text("format: jb-book\nroot: book/intro\n", encoding="utf8")
    (root / "book" / "intro.md").write_text("# A small book\n\nSome text.\n", encoding="utf8")
    (root / "book" / "chapter.ipynb").write_text(_notebook("# Chapter\n\nMore text.\n"),
                                                 encoding="utf8")
    catalogs = root / "locales" / "zh_CN" / "LC_MESSAGES" / "book"
    catalogs.mkdir(parents=True)
    (catalogs / "intro.po").write_text(_po({"A small book": "一本小书",
                                            "Some text.": "一些文字。"}), encoding="utf8")
    chapter = _po({"Chapter": "章节", "More text.": "更多文字。"})
    (catalogs / "chapter.po").write_text(chapter, encoding="utf8")
    for folder, name in (("layernorm_tutorial", "__init__.py"), ("tests", "test_x.py"),
                         (".git", "HEAD")):
        (root / folder).mkdir()
        (root / folder / name).write_text("mine\n", encoding="utf8")
    (tmp_path / "outer" / "notes.txt").write_text("a reader's notes\n", encoding="utf8")
    monkeypatch.chdir(root)
    return root


def _snapshot(folder: Path) -> dict[str, bytes]:
    return {p.relative_to(folder).as_posix(): p.read_bytes()
            for p in sorted(folder.rglob("*")) if p.is_file()}


def _interrupted_run(main, argv: list[str]) -> int:
    """``main(argv)``; a KeyboardInterrupt that escapes it fails the test (instead of
    stopping the whole pytest session)."""
    try:
        return main(argv)
    except KeyboardInterrupt:
        pytest.fail("KeyboardInterrupt escaped the command: expected 'interrupted', 130")


def _one_line(capsys) -> str:
    err = capsys.readouterr().err.strip()
    assert err and "\n" not in err and "Traceback" not in err, err
    return err


# --------------------------------------------------------------------------------------
# D1 and D6: the Chinese notebooks' --out
# --------------------------------------------------------------------------------------
@pytest.mark.parametrize("out", ["book", ".", "..", "{root}", "book/sub", "book/../book",
                                 "link-to-book", "locales", ".git"])
def test_notebooks_never_writes_over_the_sources_or_the_repository(repo, capsys, out):
    """Probe 21-22: ``--out book --force`` turned the English chapters into Chinese ones,
    ``--out <repo root> --force`` deleted the checkout (``--out ..`` by code reading)."""
    (repo / "link-to-book").symlink_to(repo / "book", target_is_directory=True)
    before = _snapshot(repo.parent)
    assert zn.main(["--out", out.format(root=repo), "--force", "--quiet"]) == 2
    err = _one_line(capsys)
    assert "--out" in err and ("sources" in err or "repository" in err), err
    assert _snapshot(repo.parent) == before
    assert not (repo / "book" / "sub").exists()
    assert not any(p.name.endswith(".partial") for p in repo.parent.rglob("*"))


def test_notebooks_force_replaces_only_a_folder_it_made(repo, capsys):
    mine = repo / "mine"
    mine.mkdir()
    (mine / "thesis.md").write_text("months of work\n", encoding="utf8")
    assert zn.main(["--out", "mine", "--force", "--quiet"]) == 2
    err = _one_line(capsys)
    assert "not a folder this command made" in err and "remove it yourself" in err
    assert (mine / "thesis.md").read_text(encoding="utf8") == "months of work\n"
    # A folder it made holds the marker and may be replaced with --force.
    assert zn.main(["--out", "zh", "--quiet"]) == 0
    assert (repo / "zh" / zn.MARKER).is_file()
    assert "一些文字。" in (repo / "zh" / "intro.md").read_text(encoding="utf8")
    (repo / "zh" / "stale.txt").write_text("from an older run\n", encoding="utf8")
    assert zn.main(["--out", "zh", "--quiet"]) == 2
    assert "--force" in _one_line(capsys)
    assert zn.main(["--out", "zh", "--force", "--quiet"]) == 0
    assert (repo / "zh" / zn.MARKER).is_file() and not (repo / "zh" / "stale.txt").exists()
    assert sorted(p.name for p in repo.iterdir() if p.name.startswith((".zh", "zh"))) == ["zh"]


@pytest.mark.parametrize("where", ["a-file", "a-file/sub",
                                   pytest.param("/proc/zh", marks=on_linux)])
def test_notebooks_out_that_cannot_be_a_folder_is_one_line(repo, capsys, where):
    """Probe 18: ``--out /proc/zh`` gave a FileNotFoundError traceback from copytree."""
    (repo / "a-file").write_text("not a folder\n", encoding="utf8")
    assert zn.main(["--out", where, "--force", "--quiet"]) == 2
    assert "--out" in _one_line(capsys)
    assert (repo / "a-file").read_text(encoding="utf8") == "not a folder\n"


def test_ctrl_c_keeps_the_existing_folder_and_removes_the_staging_folder(repo, capsys,
                                                                         monkeypatch):
    """Probe 20: an interrupted ``--force`` run left ``<out>.partial`` behind."""
    assert zn.main(["--out", "zh", "--quiet"]) == 0
    before = _snapshot(repo / "zh")
    real = zn.translate_page

    def interrupted(root, page):
        if page.name == "intro.md":  # the second page: the first one is written already
            raise KeyboardInterrupt
        return real(root, page)

    monkeypatch.setattr(zn, "translate_page", interrupted)
    capsys.readouterr()
    assert _interrupted_run(zn.main, ["--out", "zh", "--force", "--quiet"]) == 130
    assert "interrupted" in _one_line(capsys)
    assert _snapshot(repo / "zh") == before
    assert not (repo / "zh.partial").exists()


def test_an_interruption_between_the_two_renames_puts_the_old_folder_back(repo, monkeypatch):
    assert zn.main(["--out", "zh", "--quiet"]) == 0
    before = _snapshot(repo / "zh")
    real, calls = os.rename, []

    def rename(src, dst):
        calls.append((Path(src).name, Path(dst).name))
        if len(calls) == 2:  # after the old folder moved aside, before the new one moved in
            raise KeyboardInterrupt
        real(src, dst)

    monkeypatch.setattr(zn.os, "rename", rename)
    with pytest.raises(KeyboardInterrupt):
        zn.write_chinese_book(repo, repo / "zh", force=True)
    assert calls[1] == ("zh.partial", "zh")
    assert _snapshot(repo / "zh") == before
    assert sorted(p.name for p in repo.iterdir() if "zh" in p.name) == ["zh"]


def test_a_staging_folder_left_by_a_killed_run_is_removed_only_if_it_is_ours(repo, capsys):
    partial = repo / "zh.partial"
    partial.mkdir()
    (partial / "mine.txt").write_text("mine\n", encoding="utf8")
    assert zn.main(["--out", "zh", "--quiet"]) == 2
    assert "zh.partial" in _one_line(capsys)
    assert (partial / "mine.txt").is_file() and not (repo / "zh").exists()
    (partial / "mine.txt").unlink()
    (partial / zn.MARKER).write_text("", encoding="utf8")  # as a killed run leaves it
    assert zn.main(["--out", "zh", "--quiet"]) == 0
    assert (repo / "zh" / "chapter.ipynb").is_file() and not partial.exists()


# --------------------------------------------------------------------------------------
# D1 and D6: book_build's output folders, checked before Sphinx starts
# --------------------------------------------------------------------------------------
class FakeSphinx:
    """Stands in for ``book_build._build``: records the calls; gettext writes one .pot."""

    def __init__(self):
        self.calls = []

    def __call__(self, root, builder, outdir, doctrees, overrides, *args, **kwargs):
        self.calls.append(builder)
        if builder == "gettext":
            pot = Path(outdir) / "book" / "intro.pot"
            pot.parent.mkdir(parents=True, exist_ok=True)
            pot.write_text(_po({"Some text.": ""}), encoding="utf8")
        return 0


@pytest.fixture
def sphinx(monkeypatch):
    fake = FakeSphinx()
    monkeypatch.setattr(book_build, "_build", fake)
    return fake


@pytest.mark.parametrize("argv", [
    ["html", "--build-dir", "a-file"],                       # probe 8
    ["html", "--build-dir", "a-file/sub"],
    pytest.param(["html", "--build-dir", "/proc/nope"], marks=on_linux),   # probe 9
    pytest.param(["gettext", "--output", "/proc/pot"], marks=on_linux),    # probe 10
    ["gettext", "--output", "a-file"],
    ["html", "--build-dir", "."],
    ["html", "--build-dir", ".."],
    ["all", "--build-dir", "book"],
    ["check", "--build-dir", "locales/zh_CN"],
    ["gettext", "--output", "book", "--force"],
    ["gettext", "--output", "..", "--force"],
    ["gettext", "--output", "{root}", "--force"],
])
def test_book_build_refuses_a_bad_output_folder_before_sphinx(repo, sphinx, capsys, argv):
    (repo / "a-file").write_text("not a folder\n", encoding="utf8")
    before = _snapshot(repo.parent)
    assert book_build.main([a.format(root=repo) for a in argv]) == 2
    err = _one_line(capsys)
    assert err.startswith("book_build: ") and ("--build-dir" in err or "--output" in err)
    assert sphinx.calls == []
    assert _snapshot(repo.parent) == before


def test_gettext_force_removes_no_pot_file_it_did_not_write(repo, sphinx):
    out = repo / "shared"
    out.mkdir()
    (out / "notes.txt").write_text("mine\n", encoding="utf8")
    (out / "other_project.pot").write_text("msgid \"x\"\n", encoding="utf8")
    assert book_build.main(["gettext", "--output", "shared", "--force"]) == 0
    assert (out / "other_project.pot").read_text(encoding="utf8") == "msgid \"x\"\n"
    assert (out / "book" / "intro.pot").is_file()
    # A folder of .pot files only (an earlier extraction) is refreshed: stale ones go.
    pots = repo / "pots"
    (pots / "book").mkdir(parents=True)
    (pots / "book" / "deleted_page.pot").write_text("", encoding="utf8")
    assert book_build.main(["gettext", "--output", "pots"]) == 0
    assert sorted(p.name for p in pots.rglob("*.pot")) == ["intro.pot"]


def test_book_build_refuses_a_chinese_notebooks_folder_it_did_not_make(repo, sphinx, capsys):
    """The Chinese build replaces ``<build>/zh_notebooks/book``: only one it made."""
    mine = repo / "out" / "zh_notebooks" / "book"
    mine.mkdir(parents=True)
    (mine / "draft.ipynb").write_text("{}", encoding="utf8")
    assert book_build.main(["html", "--lang", "zh", "--build-dir", "out",
                            "--no-translation-check"]) == 2
    err = _one_line(capsys)
    assert "not a folder this command made" in err and "--build-dir" in err
    assert sphinx.calls == [] and (mine / "draft.ipynb").read_text(encoding="utf8") == "{}"


# --------------------------------------------------------------------------------------
# D7: Ctrl-C during book_build
# --------------------------------------------------------------------------------------
@pytest.mark.parametrize("how", ["returned", "raised"])
def test_ctrl_c_in_sphinx_ends_in_interrupted_and_130(repo, monkeypatch, capsys, how):
    """Probe 12: Sphinx's build_main *returns* the KeyboardInterrupt; ``int()`` of it was a
    TypeError traceback."""
    def build_sphinx(*args, **kwargs):
        if how == "raised":
            raise KeyboardInterrupt
        return KeyboardInterrupt()

    monkeypatch.setattr(book_build, "_import_jupyter_book_sphinx", lambda: build_sphinx)
    argv = ["html", "--lang", "en", "--build-dir", "out"]
    assert _interrupted_run(book_build.main, argv) == 130
    assert _one_line(capsys) == "book_build: interrupted"


def test_another_exception_returned_by_sphinx_is_a_failed_build(repo, monkeypatch, capsys):
    monkeypatch.setattr(book_build, "_import_jupyter_book_sphinx",
                        lambda: lambda *a, **k: RuntimeError("broken extension"))
    assert book_build.main(["html", "--lang", "en", "--build-dir", "out"]) == 1
    assert "broken extension" in capsys.readouterr().err


class FakeChild:
    """Stands in for the Chinese edition's process."""

    def __init__(self, interrupt_wait: bool):
        self.interrupt_wait, self.killed = interrupt_wait, False

    def kill(self):
        self.killed = True

    def wait(self):
        if self.interrupt_wait and not self.killed:
            raise KeyboardInterrupt
        return -9 if self.killed else 0


@pytest.mark.parametrize("when", ["during the English build", "while waiting for zh"])
def test_sigint_to_the_parent_alone_stops_the_chinese_build(repo, sphinx, monkeypatch, capsys,
                                                            when):
    """Probe 13: SIGINT reaching only the parent of ``all``."""
    child = FakeChild(interrupt_wait=when == "while waiting for zh")
    monkeypatch.setattr(book_build, "check_translations", lambda root, build: None)
    monkeypatch.setattr(book_build.subprocess, "Popen", lambda *a, **k: child)

    def english(root, lang, *args, **kwargs):
        if when == "during the English build":
            raise KeyboardInterrupt
        return 0

    monkeypatch.setattr(book_build, "build_html", english)
    assert _interrupted_run(book_build.main, ["all", "--build-dir", "out"]) == 130
    assert child.killed
    assert capsys.readouterr().err.strip().splitlines()[-1] == "book_build: interrupted"


# --------------------------------------------------------------------------------------
# D14: torch's reduce_op FutureWarning during the Sphinx run
# --------------------------------------------------------------------------------------
def test_the_reduce_op_warning_is_silenced_during_sphinx_and_only_it(repo, monkeypatch):
    import torch.distributed

    def touch_the_deprecated_alias():
        # what sphinx_external_toc's collectors.py does: isinstance() over gc objects
        isinstance(torch.distributed.reduce_op, int)

    with warnings.catch_warnings(record=True) as outside:
        warnings.simplefilter("always")
        touch_the_deprecated_alias()
    assert any("reduce_op" in str(w.message) for w in outside), "torch no longer warns"

    def build_sphinx(*args, **kwargs):
        touch_the_deprecated_alias()
        warnings.warn("another deprecation", FutureWarning, stacklevel=1)
        return 0

    monkeypatch.setattr(book_build, "_import_jupyter_book_sphinx", lambda: build_sphinx)
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        assert book_build._build(repo, "html", repo / "out", repo / "doctrees", {},
                                 False, False, False) == 0
    messages = [str(w.message) for w in seen]
    assert "another deprecation" in messages
    assert not any("reduce_op" in m for m in messages), messages


# --------------------------------------------------------------------------------------
# D8: the flashcards deck
# --------------------------------------------------------------------------------------
@pytest.fixture
def small_book(tmp_path, monkeypatch):
    """A book folder with one interview question, as the deck's default source."""
    book = tmp_path / "small" / "book"
    book.mkdir(parents=True)
    (book / "interview.ipynb").write_text(_notebook(
        "(iq-one)=\n### What is one?\n\n**一是什么？**\n\n"
        ":::{admonition} Model answer · 参考答案\n:class: dropdown\n\n"
        "**Short answer:** The first number, $1$.\n\nThe rest of the answer.\n:::\n"),
        encoding="utf8")
    monkeypatch.setattr(flashcards, "BOOK_DIR", book)
    monkeypatch.setattr(flashcards, "CHAPTERS", ("interview",))
    return book


def _deck_argv(out: Path, *more: str) -> list[str]:
    return ["--out", str(out), "--lang", "en", "--book-url", "https://example.org", *more]


def test_flashcards_replaces_an_existing_deck_only_with_force(small_book, tmp_path, capsys):
    """Probe 30: an existing deck was replaced without asking."""
    out = tmp_path / "deck.apkg"
    out.write_bytes(b"my reviewed deck")
    assert flashcards.main(_deck_argv(out)) == 2
    err = _one_line(capsys)
    assert "--force" in err and str(out) in err
    assert out.read_bytes() == b"my reviewed deck"
    assert flashcards.main(_deck_argv(out, "--force")) == 0
    with zipfile.ZipFile(out) as deck:
        assert {"collection.anki2", "media"} <= set(deck.namelist())


@pytest.mark.parametrize("name", ["deck.txt", "missing/deck.apkg", "folder.apkg"])
def test_flashcards_user_errors_exit_with_status_2(small_book, tmp_path, capsys, name):
    """Probe 25 and D14: the user errors of ``flashcards`` exited with status 1."""
    (tmp_path / "folder.apkg").mkdir()
    assert flashcards.main(_deck_argv(tmp_path / name)) == 2
    assert _one_line(capsys).startswith("error: ")


def test_an_interrupted_deck_write_keeps_the_existing_deck(small_book, tmp_path, capsys,
                                                           monkeypatch):
    """Probe 32: KeyboardInterrupt inside the zip write left a deck without its media."""
    out = tmp_path / "deck.apkg"
    out.write_bytes(b"my reviewed deck")

    def interrupted(self, name, data, *args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(zipfile.ZipFile, "writestr", interrupted)
    assert _interrupted_run(flashcards.main, _deck_argv(out, "--force")) == 130
    assert _one_line(capsys) == "interrupted"
    assert out.read_bytes() == b"my reviewed deck"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["deck.apkg", "small"]


def test_no_sqlite_file_is_left_in_the_temp_folder(small_book, tmp_path, monkeypatch):
    """Probe 33: genanki's mkstemp() database stayed in the temp folder after every run."""
    system_temp = tmp_path / "system-temp"
    system_temp.mkdir()
    monkeypatch.setattr("tempfile.tempdir", str(system_temp))
    out = tmp_path / "deck.apkg"
    assert flashcards.write_deck(out, lang="en", book_url="https://example.org") == 1
    assert zipfile.is_zipfile(out)
    assert list(system_temp.iterdir()) == []
    import tempfile
    assert tempfile.tempdir == str(system_temp)  # restored after the write


# ---- probe 6 (the final re-probe) ---------------------------------------------------

REPO = Path(__file__).resolve().parents[1]


def test_po_tool_todo_never_writes_over_a_repository_file_even_with_force(capsys):
    from layernorm_tutorial.publishing.book_i18n import po_tool

    readme = REPO / "README.md"
    before = readme.read_bytes()
    po = REPO / "locales/zh_CN/LC_MESSAGES/book/residual.po"
    assert po_tool.main(["todo", str(po), "-o", str(readme), "--force"]) == 2
    assert readme.read_bytes() == before
    assert "source or data files" in capsys.readouterr().err


def test_flashcards_never_writes_into_the_sources(tmp_path):
    from layernorm_tutorial.publishing import flashcards

    out = REPO / "book" / "probe6_deck.apkg"
    with pytest.raises(flashcards.FlashcardError, match="source or data files"):
        flashcards.check_writable(out)
    assert not out.exists()
    flashcards.check_writable(tmp_path / "deck.apkg")   # anywhere else is fine


def test_book_build_refuses_output_outside_gettext(capsys):
    from layernorm_tutorial.publishing import book_build

    assert book_build.main(["html", "--output", "README.md", "--no-translation-check"]) == 2
    assert "--output is for the gettext command" in capsys.readouterr().err
