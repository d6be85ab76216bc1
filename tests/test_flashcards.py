"""The Anki deck is built from the interview notebooks: one note per question, stable GUIDs."""

from __future__ import annotations

import json
import re
import sqlite3
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from layernorm_tutorial.publishing import flashcards

ROOT = Path(__file__).resolve().parents[1]
BOOK = ROOT / "book"
CJK = re.compile(r"[\u4e00-\u9fff]")


def _notes(apkg: Path, tmp_path: Path) -> list[dict]:
    """Read the notes of a deck with sqlite3, as Anki would (fields are split by 0x1f)."""
    with zipfile.ZipFile(apkg) as archive:
        assert "collection.anki2" in archive.namelist()
        archive.extract("collection.anki2", tmp_path)
    connection = sqlite3.connect(tmp_path / "collection.anki2")
    try:
        rows = connection.execute("select guid, tags, flds from notes").fetchall()
    finally:
        connection.close()
    names = ("label", "front", "english", "chinese", "short", "answer", "link")
    return [dict(guid=g, tags=t.split(), **dict(zip(names, f.split("\x1f"), strict=True)))
            for g, t, f in rows]


def _model_answers_in(path: Path) -> int:
    """An independent count: the model-answer dropdowns in a notebook's markdown cells."""
    cells = json.loads(path.read_text(encoding="utf-8"))["cells"]
    return sum("".join(c["source"]).count("{admonition} Model answer")
               for c in cells if c["cell_type"] == "markdown")


@pytest.fixture(scope="module")
def deck(tmp_path_factory):
    folder = tmp_path_factory.mktemp("deck")
    out = folder / "deck.apkg"
    count = flashcards.write_deck(out, book_url="https://example.org/layernorm")
    return out, count, _notes(out, folder)


def test_one_note_per_question_in_the_notebooks(deck):
    _, count, notes = deck
    expected = sum(_model_answers_in(BOOK / f"{c}.ipynb") for c in flashcards.CHAPTERS)
    assert expected >= 121          # issue 41: 121 questions in the four interview chapters
    assert set(flashcards.CHAPTERS) == {"interview", "interview_advanced",
                                        "interview_practice", "interview_deployment"}
    assert count == len(notes) == expected
    assert len({n["label"] for n in notes}) == len(notes)


def test_every_note_has_english_and_chinese_and_a_short_answer(deck):
    for note in deck[2]:
        assert note["english"] and not CJK.search(note["english"]), note["label"]
        assert CJK.search(note["chinese"]), note["label"]
        assert CJK.search(note["front"]) and note["english"] in note["front"]
        assert note["short"].strip() and note["short"] not in note["answer"], note["label"]
        assert f'example.org/layernorm/book/{note["tags"][1]}.html#{note["label"]}"' in note["link"]
        assert not re.search(r"\{(term|cite|ref|doc|eq|numref)[:a-z]*\}`", note["answer"]), \
            f"raw MyST role left in {note['label']}"
        assert ":class:" not in note["answer"] and ":::" not in note["answer"]


def test_tags_name_the_section(deck):
    tags = {t for note in deck[2] for t in note["tags"]}
    assert {"fundamentals", "derivations", "systems", "traps"} <= tags


def test_math_uses_anki_mathjax_delimiters(deck):
    notes = {n["label"]: n for n in deck[2]}
    answer = notes["iq-what-is-ln"]["answer"] + notes["iq-what-is-ln"]["short"]
    assert "\\[" in answer and "\\]" in answer and "\\(" in answer
    assert "\\frac{1}{H}" in answer
    for note in deck[2]:
        assert "$" not in re.sub(r"\\\(.*?\\\)|\\\[.*?\\\]", "", note["answer"], flags=re.S), \
            f"a dollar delimiter survived in {note['label']}"


def test_guids_are_stable_across_runs(deck, tmp_path):
    out = tmp_path / "again.apkg"
    flashcards.write_deck(out, book_url="https://example.org/layernorm")
    again = {n["label"]: n["guid"] for n in _notes(out, tmp_path)}
    first = {n["label"]: n["guid"] for n in deck[2]}
    assert again == first
    assert len(set(first.values())) == len(first)


def test_front_language_choice(tmp_path):
    out = tmp_path / "en.apkg"
    flashcards.write_deck(out, lang="en", book_url="https://example.org/layernorm")
    notes = _notes(out, tmp_path)
    assert all(not CJK.search(n["front"]) for n in notes)
    with pytest.raises(flashcards.FlashcardError, match="lang"):
        flashcards.write_deck(tmp_path / "x.apkg", lang="fr")


def _copy_with_an_added_question(tmp_path: Path) -> Path:
    notebook = json.loads((BOOK / "interview.ipynb").read_text(encoding="utf-8"))
    notebook["cells"].append({
        "cell_type": "markdown", "metadata": {}, "id": "added-question",
        "source": ["(iq-added-for-test)=\n", "### Is this question new?\n", "\n",
                   "**这是一个新问题吗？**\n", "\n",
                   ":::{admonition} Model answer · 参考答案\n", ":class: dropdown\n", "\n",
                   "**Short answer:** Yes, with $x^2$ in it.\n", "\n",
                   "The long answer cites {cite}`ba2016layer`.\n", ":::\n"]})
    copy = tmp_path / "interview.ipynb"
    copy.write_text(json.dumps(notebook), encoding="utf-8")
    return copy


def test_a_question_added_to_a_copy_of_the_notebook_appears(tmp_path):
    copy = _copy_with_an_added_question(tmp_path)
    out = tmp_path / "copy.apkg"
    count = flashcards.write_deck(out, [copy, BOOK / "interview_advanced.ipynb"],
                                  book_url="https://example.org/layernorm", book_dir=BOOK)
    notes = {n["label"]: n for n in _notes(out, tmp_path)}
    assert count == len(notes) and "iq-added-for-test" in notes
    added = notes["iq-added-for-test"]
    assert added["short"] == "<p>Yes, with \\(x^2\\) in it.</p>"
    assert "Ba" in added["answer"] and "2016" in added["answer"] and "{cite}" not in added["answer"]
    assert "这是一个新问题吗" in added["chinese"]


def test_a_chapter_without_questions_is_an_error_naming_it(tmp_path):
    empty = tmp_path / "empty_chapter.ipynb"
    empty.write_text(json.dumps({"cells": [{"cell_type": "markdown", "metadata": {}, "id": "only",
                                            "source": ["# Nothing to ask\n"]}],
                                 "metadata": {}, "nbformat": 4, "nbformat_minor": 5}))
    with pytest.raises(flashcards.FlashcardError, match="empty_chapter.ipynb"):
        flashcards.write_deck(tmp_path / "x.apkg", [empty], book_dir=BOOK)


def test_cli_checks_the_output_path_before_work(tmp_path):
    missing = tmp_path / "no" / "such" / "folder" / "deck.apkg"
    result = subprocess.run([sys.executable, "-m", "layernorm_tutorial.publishing.flashcards",
                             "--out", str(missing)], capture_output=True, text=True, timeout=120)
    assert result.returncode != 0
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and str(missing.parent) in lines[0]
    assert not missing.exists()
    wrong = subprocess.run([sys.executable, "-m", "layernorm_tutorial.publishing.flashcards",
                            "--out", str(tmp_path / "deck.txt")], capture_output=True, text=True,
                           timeout=120)
    assert wrong.returncode != 0 and ".apkg" in wrong.stderr


def test_cli_writes_the_deck(tmp_path):
    out = tmp_path / "deck.apkg"
    result = subprocess.run([sys.executable, "-m", "layernorm_tutorial.publishing.flashcards",
                             "--out", str(out), "--lang", "zh"], capture_output=True, text=True,
                            timeout=300, cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert str(out) in result.stdout and zipfile.is_zipfile(out)


def test_every_model_answer_opens_with_a_short_spoken_answer():
    """The card's back leads with the twenty-second answer the chapters promise."""
    for chapter in flashcards.CHAPTERS:
        cells = json.loads((BOOK / f"{chapter}.ipynb").read_text(encoding="utf-8"))["cells"]
        for cell in cells:
            source = "".join(cell["source"])
            if cell["cell_type"] != "markdown" or "{admonition} Model answer" not in source:
                continue
            body = source.split("{admonition} Model answer", 1)[1].split("\n", 1)[1]
            first = next(line for line in body.splitlines()
                         if line.strip() and not line.startswith(":"))
            assert first.startswith("**Short answer:**"), (chapter, first)
    questions = flashcards.parse_questions(BOOK / "interview.ipynb")
    assert all(0 < len(q.short_answer.split()) <= 80 for q in questions), \
        max(questions, key=lambda q: len(q.short_answer.split())).label


def test_default_links_point_to_the_pages_of_the_local_build(tmp_path):
    out = tmp_path / "local.apkg"
    flashcards.write_deck(out, lang="en")
    html_root = (ROOT / "_build" / "html").resolve().as_uri()
    hrefs = [h for n in _notes(out, tmp_path) for field in (n["answer"], n["link"])
             for h in re.findall(r'href="([^"]+)"', field)]
    assert len(hrefs) >= 40
    for href in hrefs:
        assert href.startswith(f"{html_root}/book/"), href
        stem = href.split("#")[0].rsplit("/", 1)[1].removesuffix(".html")
        assert any((BOOK / f"{stem}{suffix}").is_file() for suffix in (".ipynb", ".md")), href


@pytest.fixture(scope="module")
def chinese_deck(tmp_path_factory):
    folder = tmp_path_factory.mktemp("zh")
    out = folder / "zh.apkg"
    flashcards.write_deck(out, lang="zh", book_url="https://example.org/layernorm")
    return _notes(out, folder)


def test_chinese_cards_are_chinese_from_front_to_link(chinese_deck):
    for note in chinese_deck:
        label = note["label"]
        assert CJK.search(note["front"]) and note["english"] not in note["front"], label
        assert CJK.search(note["short"]) and CJK.search(note["answer"]), label
        assert not re.search(r"Short answer|简答", note["short"]), label
        assert f'example.org/layernorm/zh/book/{note["tags"][1]}.html#{label}"' in note["link"]
        assert "/zh/book/" in note["answer"] or "href" not in note["answer"], label
        assert not re.search(r"\{(term|cite|ref|doc|eq|numref)[:a-z]*\}`", note["answer"]), label
    what_is_ln = {n["label"]: n for n in chinese_deck}["iq-what-is-ln"]["answer"]
    assert "\\frac{1}{H}" in what_is_ln and "\\[" in what_is_ln


def test_chinese_cards_show_the_chinese_editions_text(chinese_deck):
    """The short answer of a card is the catalog's translation of that paragraph."""
    from layernorm_tutorial.publishing.book_i18n import catalogs

    po = ROOT / "locales" / "zh_CN" / "LC_MESSAGES" / "book" / "interview.po"
    translations = [e.msgstr for e in catalogs.entries(po) if e.msgstr.startswith("**简答**")]
    short = {n["label"]: n["short"] for n in chinese_deck}["iq-ln-vs-bn"]
    sentence = re.sub(r"<[^>]+>", "", short).strip()
    assert any(sentence[:20] in t for t in translations), sentence


def test_a_chinese_deck_with_an_untranslated_question_is_an_error(tmp_path):
    copy = _copy_with_an_added_question(tmp_path)
    with pytest.raises(flashcards.FlashcardError, match=r"iq-added-for-test.*interview\.po"):
        flashcards.write_deck(tmp_path / "zh.apkg", [copy], lang="zh", book_dir=BOOK)


# ------------------------------------------------------------------ issue 35 (part 1)
ISSUE_35_PART_1 = {
    "iq-bn-placement": "batchnorm", "iq-bn-benefits": "batchnorm",
    "iq-bn-learning-rate": "batchnorm", "iq-bn-regularize": "batchnorm",
    "iq-frozen-bn": "batchnorm", "iq-bn-shift": "batchnorm",
    "iq-weight-norm": "other", "iq-instance-norm-style": "other", "iq-lrn": "other",
    "iq-prmsnorm": "other", "iq-drill-rms": "coding",
}


def test_the_new_part_1_questions_are_cards_tagged_with_their_section(deck):
    """The questions that issue 35 added to part 1 land in the deck, each with a Chinese
    title and the tag of the section it sits in."""
    _, _, notes = deck
    by_label = {n["label"]: n for n in notes}
    for label, tag in ISSUE_35_PART_1.items():
        assert label in by_label, label
        note = by_label[label]
        assert tag in note["tags"], (label, note["tags"])
        assert CJK.search(note["chinese"]) and note["short"].strip(), label
    part_1 = flashcards.parse_questions(BOOK / "interview.ipynb")
    assert len(part_1) >= 32      # 21 before issue 35, 11 added


def test_the_warm_up_question_no_longer_promises_pre_ln_trains_without_it():
    """chapters-audit-2 item 5: the Pre-LN/Post-LN question asks whether Pre-LN still needs
    warm-up, and its answer names practice (LLaMA's warm-up) next to Xiong et al."""
    question = next(q for q in flashcards.parse_questions(BOOK / "interview.ipynb")
                    if q.label == "iq-pre-post")
    assert "without warm-up" not in question.title_en
    assert "still need warm-up" in question.title_en
    assert "Touvron et al." in question.short_paragraph + question.answer
    assert "Xiong et al." in question.short_paragraph + question.answer
