"""The interview question bank and its index page (issue 41).

Every bank entry is a real question with a source and names a card that exists in the
interview chapters; the index page lists every entry and is up to date with the bank.
"""

from __future__ import annotations

import json

import pytest

from layernorm_tutorial.lab.interview import bank as qbank
from layernorm_tutorial.publishing import flashcards

MIN_ENTRIES, MIN_SOURCES, MIN_KINDS = 150, 25, 4


@pytest.fixture(scope="module")
def the_bank() -> qbank.Bank:
    return qbank.load_bank()


@pytest.fixture(scope="module")
def cards() -> dict[str, flashcards.Question]:
    questions = []
    for chapter in flashcards.CHAPTERS:
        questions += flashcards.parse_questions(flashcards.BOOK_DIR / f"{chapter}.ipynb")
    return {q.label: q for q in questions}


def test_bank_size_sources_and_kinds(the_bank):
    counts = qbank.coverage(the_bank)
    assert counts["entries"] >= MIN_ENTRIES, counts
    assert counts["sources"] >= MIN_SOURCES, counts
    assert len(counts["kinds"]) >= MIN_KINDS, counts
    assert set(counts["languages"]) == {"en", "zh"}, counts


def test_every_entry_names_an_existing_card_and_a_source(the_bank, cards):
    unknown = sorted({e.card for e in the_bank.entries} - set(cards))
    assert not unknown, f"bank entries name cards that do not exist: {unknown}"
    for entry in the_bank.entries:
        assert qbank.source_url(entry.source).startswith(("https://", "http://")), entry.id
        assert entry.source_title, entry.id


def test_every_deck_chapter_is_searched_for_labels(cards):
    # the index links with {ref}: a label must be a card, not just any label
    assert set(cards) <= qbank.card_labels()


def test_index_page_is_up_to_date_and_lists_every_entry(the_bank):
    page = qbank.INDEX_PATH.read_text(encoding="utf-8")
    assert page == qbank.render_index(the_bank), (
        "book/interview_index.md is out of date: run "
        "python -m layernorm_tutorial.lab.interview.bank --force")
    for entry in the_bank.entries:
        assert f"{{ref}}`{entry.card}`" in page
        assert qbank.source_url(entry.source) in page


def test_index_page_is_in_the_toc():
    toc = (qbank.BOOK_DIR.parent / "_toc.yml").read_text(encoding="utf-8")
    assert "file: book/interview_index" in toc


def _write(tmp_path, entries):
    path = tmp_path / "bank.json"
    path.write_text(json.dumps({"entries": entries}), encoding="utf-8")
    return path


GOOD = {"id": "q1", "question": "What does LayerNorm normalize over?", "language": "en",
        "kind": "qa-site", "source": "https://stackoverflow.com/questions/1",
        "source_title": "a thread", "topic": "ln-basics", "card": "iq-what-is-ln"}


@pytest.mark.parametrize("change, message", [
    ({"topic": "astrology"}, "topic 'astrology'"),
    ({"kind": "rumour"}, "kind 'rumour'"),
    ({"language": "fr"}, "language 'fr'"),
    ({"source": "somewhere"}, "source 'somewhere'"),
    ({"card": "what-is-ln"}, "card 'what-is-ln'"),
    ({"question": ""}, "has no question"),
])
def test_a_bad_entry_is_refused_naming_the_file(tmp_path, change, message):
    path = _write(tmp_path, [{**GOOD, **change}])
    with pytest.raises(qbank.BankError, match=message) as info:
        qbank.load_bank(path)
    assert str(path) in str(info.value) and "\n" not in str(info.value)


def test_a_repeated_id_missing_file_and_broken_json_are_refused(tmp_path):
    with pytest.raises(qbank.BankError, match="more than once"):
        qbank.load_bank(_write(tmp_path, [GOOD, GOOD]))
    with pytest.raises(qbank.BankError, match="no such file"):
        qbank.load_bank(tmp_path / "absent.json")
    broken = tmp_path / "broken.json"
    broken.write_text('{"entries": [', encoding="utf-8")
    with pytest.raises(qbank.BankError, match="not valid JSON"):
        qbank.load_bank(broken)


def test_source_urls():
    assert qbank.source_url("github:o/r#12") == "https://github.com/o/r/issues/12"
    assert qbank.source_url("github:o/r/docs/a b.md") == \
        "https://github.com/o/r/blob/HEAD/docs/a%20b.md"
    assert qbank.source_url("https://x.org/p") == "https://x.org/p"


def test_command_refuses_to_overwrite_without_force(tmp_path, capsys):
    bank_path = _write(tmp_path, [GOOD])
    out = tmp_path / "index.md"
    assert qbank.main(["--bank", str(bank_path), "--out", str(out)]) == 0
    first = out.read_text(encoding="utf-8")
    assert "{ref}`iq-what-is-ln`" in first
    with pytest.raises(SystemExit) as info:
        qbank.main(["--bank", str(bank_path), "--out", str(out)])
    assert info.value.code == 2 and "--force" in capsys.readouterr().err
    assert qbank.main(["--bank", str(bank_path), "--out", str(out), "--check"]) == 0
    with pytest.raises(SystemExit):
        qbank.main(["--bank", str(bank_path), "--out", str(bank_path), "--force"])
    assert json.loads(bank_path.read_text(encoding="utf-8"))["entries"][0]["id"] == "q1"


def test_the_chinese_index_holds_every_generated_message(the_bank):
    from layernorm_tutorial.publishing.book_i18n import catalogs

    po = qbank.BOOK_DIR.parent / "locales/zh_CN/LC_MESSAGES/book/interview_index.po"
    rows = {e.msgid: e.msgstr for e in catalogs.entries(po) if not e.fuzzy}
    wanted = qbank.index_translations(the_bank)
    stale = [k[:60] for k, v in wanted.items() if rows.get(k) != v]
    assert not stale, ("interview_index.po is out of date with the bank: run the bank "
                       "command with --translations, then po_tool apply; " + repr(stale[:3]))
    assert all(e.question_zh for e in the_bank.entries)
