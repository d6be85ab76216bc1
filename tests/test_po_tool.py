"""The translators' tool (``publishing.book_i18n.po_tool``) used the way translators use it,
mistakes included (issue 24, item 7): it never loses a catalog or work in progress.

- ``todo -o`` onto a catalog is refused; a todo file with translations not applied yet is
  not replaced without ``--force``;
- ``apply`` with a broken or wrong file, swapped arguments or a missing file: one line,
  exit status 2, the catalog untouched; a blank translation is refused; an unedited todo
  leaves fuzzy messages fuzzy;
- ``check`` finds the repository's catalogs from a subfolder, says what it checked and fails
  when there was nothing to check;
- a write interrupted half-way (an exception, or SIGKILL) leaves the old catalog intact.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from layernorm_tutorial.publishing.book_i18n import catalogs, po_tool

ROOT = Path(__file__).resolve().parents[1]

CATALOG = textwrap.dedent('''\
    msgid ""
    msgstr ""
    "Content-Type: text/plain; charset=UTF-8\\n"

    msgid "The $H$ features of a row."
    msgstr ""

    #, fuzzy
    msgid "The mean of the row, changed."
    msgstr "行的均值。"

    msgid "Done already."
    msgstr "已经译好。"
    ''')


@pytest.fixture
def repo(tmp_path, monkeypatch):
    """A minimal book repository with one catalog; the current folder is its root."""
    for name in ("_config.yml", "_toc.yml"):
        (tmp_path / name).write_text("title: x\n", encoding="utf8")
    po = tmp_path / "locales" / "zh_CN" / "LC_MESSAGES" / "book" / "page.po"
    po.parent.mkdir(parents=True)
    po.write_text(CATALOG, encoding="utf8")
    (tmp_path / "book").mkdir()
    monkeypatch.chdir(tmp_path)
    return tmp_path


def _po(repo: Path) -> Path:
    return repo / "locales" / "zh_CN" / "LC_MESSAGES" / "book" / "page.po"


def _rows(po: Path) -> dict[str, tuple[str, bool]]:
    return {e.msgid: (e.msgstr, e.fuzzy) for e in catalogs.entries(po)}


def _one_line_error(capsys) -> str:
    err = capsys.readouterr().err.strip()
    assert err and "\n" not in err and "Traceback" not in err, err
    return err


# --------------------------------------------------------------------------------------
# todo
# --------------------------------------------------------------------------------------
@pytest.mark.parametrize("target", ["same", "other.po", "other.pot"])
def test_todo_never_writes_onto_a_catalog(repo, capsys, target):
    po = _po(repo)
    before = po.read_bytes()
    output = po if target == "same" else repo / target
    assert po_tool.main(["todo", str(po), "-o", str(output)]) == 2
    assert "catalog" in _one_line_error(capsys)
    assert po.read_bytes() == before
    assert output == po or not output.exists()


def test_todo_refuses_a_file_that_holds_a_catalog(repo, capsys):
    po = _po(repo)
    disguised = repo / "todo.json"
    disguised.write_bytes(po.read_bytes())
    assert po_tool.main(["todo", str(po), "-o", str(disguised)]) == 2
    _one_line_error(capsys)
    assert disguised.read_bytes() == po.read_bytes()


def test_todo_keeps_translations_that_are_not_applied_yet(repo, capsys):
    po, todo = _po(repo), repo / "todo.json"
    assert po_tool.main(["todo", str(po), "-o", str(todo)]) == 0
    # Re-running on an untouched todo list is fine (nothing to lose).
    assert po_tool.main(["todo", str(po), "-o", str(todo)]) == 0
    rows = json.loads(todo.read_text(encoding="utf8"))
    assert [r["msgid"] for r in rows] == ["The $H$ features of a row.",
                                          "The mean of the row, changed."]
    rows[0]["msgstr"] = "一行的 $H$ 个特征。"
    edited = json.dumps(rows, ensure_ascii=False)
    todo.write_text(edited, encoding="utf8")
    capsys.readouterr()
    assert po_tool.main(["todo", str(po), "-o", str(todo)]) == 2
    err = _one_line_error(capsys)
    assert "1 translation(s) not applied" in err and "--force" in err
    assert todo.read_text(encoding="utf8") == edited
    # Confirming a fuzzy translation as it is counts as work too.
    rows[0]["msgstr"] = ""
    rows[1]["fuzzy"] = False
    todo.write_text(json.dumps(rows, ensure_ascii=False), encoding="utf8")
    assert po_tool.main(["todo", str(po), "-o", str(todo)]) == 2
    assert po_tool.main(["todo", str(po), "-o", str(todo), "--force"]) == 0
    assert json.loads(todo.read_text(encoding="utf8"))[1]["fuzzy"] is True


def test_todo_refuses_to_replace_a_file_that_is_not_a_todo_list(repo, capsys):
    notes = repo / "notes.json"
    notes.write_text('{"my": ["notes"]}', encoding="utf8")
    assert po_tool.main(["todo", str(_po(repo)), "-o", str(notes)]) == 2
    _one_line_error(capsys)
    assert notes.read_text(encoding="utf8") == '{"my": ["notes"]}'


# --------------------------------------------------------------------------------------
# apply: bad input
# --------------------------------------------------------------------------------------
BAD_TODO_FILES = {
    "malformed JSON": '[{"msgid": "The $H$ features of a row.", "msgstr": "x"',
    "row without msgid": '[{"msgstr": "一行的 $H$ 个特征。"}]',
    "a number": "3",
    "a list of strings": '["The $H$ features of a row."]',
    "msgid not a string": '[{"msgid": 3, "msgstr": "x"}]',
    "msgstr not a string": '[{"msgid": "The $H$ features of a row.", "msgstr": null}]',
    "not UTF-8": b"\xff\xfe[]",
}


@pytest.mark.parametrize("case", sorted(BAD_TODO_FILES))
def test_apply_rejects_a_bad_todo_file_in_one_line(repo, capsys, case):
    po, todo = _po(repo), repo / "todo.json"
    content = BAD_TODO_FILES[case]
    if isinstance(content, bytes):
        todo.write_bytes(content)
    else:
        todo.write_text(content, encoding="utf8")
    before = po.read_bytes()
    assert po_tool.main(["apply", str(po), str(todo)]) == 2
    assert str(todo) in _one_line_error(capsys)
    assert po.read_bytes() == before


def test_apply_with_swapped_arguments_or_missing_files(repo, capsys):
    po, todo = _po(repo), repo / "todo.json"
    todo.write_text('[{"msgid": "Done already.", "msgstr": "好了。"}]', encoding="utf8")
    before = po.read_bytes()
    assert po_tool.main(["apply", str(todo), str(po)]) == 2
    assert "swapped" in _one_line_error(capsys)
    assert po_tool.main(["apply", str(po), str(repo / "missing.json")]) == 2
    assert "missing.json: no such file" in _one_line_error(capsys)
    assert po_tool.main(["apply", str(repo / "missing.po"), str(todo)]) == 2
    assert "missing.po: no such file" in _one_line_error(capsys)
    assert po_tool.main(["apply", str(repo), str(todo)]) == 2
    _one_line_error(capsys)
    assert po.read_bytes() == before


def test_apply_refuses_a_blank_translation(repo, capsys):
    po, todo = _po(repo), repo / "todo.json"
    todo.write_text(json.dumps([{"msgid": "The $H$ features of a row.", "msgstr": "  \n"}]),
                    encoding="utf8")
    assert po_tool.main(["apply", str(po), str(todo)]) == 1
    assert "blank translation" in capsys.readouterr().err
    assert _rows(po)["The $H$ features of a row."] == ("", False)
    # A blank translation already in a catalog counts as untranslated.
    entry = catalogs.Entry("x", "Some words.", "   ", False)
    assert po_tool.entry_problems(entry, {}) == ["untranslated"]


def test_applying_an_unedited_todo_leaves_fuzzy_messages_fuzzy(repo, capsys):
    po, todo = _po(repo), repo / "todo.json"
    assert po_tool.main(["todo", str(po), "-o", str(todo)]) == 0
    before = po.read_bytes()
    assert po_tool.main(["apply", str(po), str(todo)]) == 0
    assert "1 still fuzzy" in capsys.readouterr().err
    assert _rows(po)["The mean of the row, changed."] == ("行的均值。", True)
    assert po.read_bytes() == before  # nothing written at all
    # The translator keeps the old translation on purpose: "fuzzy": false.
    rows = json.loads(todo.read_text(encoding="utf8"))
    rows[1]["fuzzy"] = False
    todo.write_text(json.dumps(rows, ensure_ascii=False), encoding="utf8")
    assert po_tool.main(["apply", str(po), str(todo)]) == 0
    assert _rows(po)["The mean of the row, changed."] == ("行的均值。", False)
    # The untranslated message, left empty in the todo, is still untranslated.
    assert _rows(po)["The $H$ features of a row."] == ("", False)


def test_apply_writes_a_new_translation_of_a_fuzzy_message(repo):
    po, todo = _po(repo), repo / "todo.json"
    todo.write_text(json.dumps([{"msgid": "The mean of the row, changed.",
                                 "msgstr": "行的均值（已改）。", "fuzzy": True}],
                               ensure_ascii=False), encoding="utf8")
    assert po_tool.main(["apply", str(po), str(todo)]) == 0
    assert _rows(po)["The mean of the row, changed."] == ("行的均值（已改）。", False)


# --------------------------------------------------------------------------------------
# check
# --------------------------------------------------------------------------------------
def test_check_from_a_subfolder_checks_the_repositorys_catalogs(repo, monkeypatch, capsys):
    monkeypatch.chdir(repo / "book")
    assert po_tool.main(["check"]) == 1  # one untranslated, one fuzzy message
    captured = capsys.readouterr()
    assert "untranslated" in captured.out and "fuzzy" in captured.out
    assert "checked 1 catalog(s), 3 message(s)" in captured.err
    assert po_tool.main(["check", "--ignore-untranslated", str(_po(repo))]) == 1
    assert "checked 1 catalog(s)" in capsys.readouterr().err


def test_check_fails_when_it_checked_nothing(repo, tmp_path_factory, monkeypatch, capsys):
    empty = repo / "book"
    assert po_tool.main(["check", str(empty)]) == 2
    assert "nothing" in _one_line_error(capsys)
    assert po_tool.main(["check", str(repo / "no_such_folder")]) == 2
    assert "no such file or folder" in _one_line_error(capsys)
    monkeypatch.chdir(tmp_path_factory.mktemp("elsewhere"))
    assert po_tool.main(["check"]) == 2
    assert "not inside the book's repository" in _one_line_error(capsys)


def test_check_reports_what_it_checked_in_the_real_catalogs(monkeypatch, capsys):
    monkeypatch.chdir(ROOT / "book")
    po_tool.main(["check", "--ignore-untranslated"])
    err = capsys.readouterr().err
    count = len(catalogs.catalog_files(ROOT / "locales"))
    assert f"checked {count} catalog(s)" in err and "glossary terms from" in err, err


# --------------------------------------------------------------------------------------
# Interrupted writes
# --------------------------------------------------------------------------------------
def _todo_translating_the_first_message(repo: Path) -> Path:
    todo = repo / "todo.json"
    todo.write_text(json.dumps([{"msgid": "The $H$ features of a row.",
                                 "msgstr": "一行的 $H$ 个特征。"}], ensure_ascii=False),
                    encoding="utf8")
    return todo


def test_a_write_interrupted_half_way_leaves_the_old_catalog(repo, monkeypatch):
    po, todo = _po(repo), _todo_translating_the_first_message(repo)
    before = po.read_bytes()
    real_write_po = catalogs.write_po

    def half_then_interrupt(handle, catalog, **kwargs):
        real_write_po(handle, catalog, **kwargs)
        handle.truncate(len(before) // 2)
        handle.flush()
        raise KeyboardInterrupt

    monkeypatch.setattr(catalogs, "write_po", half_then_interrupt)
    with pytest.raises(KeyboardInterrupt):
        po_tool.main(["apply", str(po), str(todo)])
    assert po.read_bytes() == before
    assert sorted(p.name for p in po.parent.iterdir()) == ["page.po"]  # no temporary left


KILLED_APPLY = """
import sys, time
from layernorm_tutorial.publishing.book_i18n import catalogs, po_tool
real = catalogs.write_po
def slow(handle, catalog, **kwargs):
    real(handle, catalog, **kwargs)
    handle.truncate(100)
    handle.flush()
    print("writing", flush=True)
    time.sleep(60)
catalogs.write_po = slow
po_tool.main(["apply", sys.argv[1], sys.argv[2]])
"""


@pytest.mark.skipif(not hasattr(signal, "SIGKILL"), reason="needs POSIX SIGKILL")
def test_apply_killed_while_writing_leaves_the_old_catalog(repo):
    po, todo = _po(repo), _todo_translating_the_first_message(repo)
    before = po.read_bytes()
    process = subprocess.Popen([sys.executable, "-c", KILLED_APPLY, str(po), str(todo)],
                               cwd=repo, stdout=subprocess.PIPE, text=True,
                               env={**os.environ, "PYTHONPATH": str(ROOT)})
    try:
        assert process.stdout.readline().strip() == "writing"
        os.kill(process.pid, signal.SIGKILL)
    finally:
        process.kill()
        process.wait(timeout=30)
    assert po.read_bytes() == before
    catalogs.read_catalog(po)  # still a valid catalog
