"""The Chinese notebooks: generated from the English ones and the catalogs (issue 37)."""

import json
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

from layernorm_tutorial.publishing.book_i18n import notebooks as zn
from layernorm_tutorial.publishing.book_i18n.catalogs import (
    CJK,
    bilingual_parts,
    exercise_titles,
    markup_tokens,
)

ROOT = Path(__file__).resolve().parents[1]
PAGES = sorted(p for p in (ROOT / "book").iterdir()
               if p.suffix in zn.PAGE_SUFFIXES and (ROOT / zn.LOCALE / f"{p.stem}.po").is_file())
NOTEBOOKS = [p for p in PAGES if p.suffix == ".ipynb"]


def _as_notebook(page: Path) -> dict:
    if page.suffix == ".ipynb":
        return json.loads(page.read_text(encoding="utf8"))
    return {"cells": [{"cell_type": "markdown", "source": page.read_text(encoding="utf8")}]}


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_every_catalog_message_is_used_or_has_a_reason(page):
    _, translation = zn.translate_page(ROOT, page)
    reasons = zn.unused_messages(_as_notebook(page), translation)
    without = [m[:80] for m, why in reasons.items() if why is None]
    assert without == [], f"{page.name}: messages neither used nor explained: {without}"
    assert set(reasons.values()) <= set(zn.REASONS)


@pytest.mark.parametrize("page", NOTEBOOKS, ids=lambda p: p.name)
def test_code_outputs_and_metadata_are_identical(page):
    english = json.loads(page.read_text(encoding="utf8"))
    text, _ = zn.translate_page(ROOT, page)
    chinese = json.loads(text)
    assert chinese["metadata"] == english["metadata"]
    assert len(chinese["cells"]) == len(english["cells"])
    for en, zh in zip(english["cells"], chinese["cells"], strict=True):
        if en["cell_type"] == "markdown":
            assert zh["metadata"] == en["metadata"]
        else:
            assert zh == en


@pytest.mark.parametrize("page", NOTEBOOKS, ids=lambda p: p.name)
def test_roles_math_labels_and_glue_survive_in_every_cell(page):
    english = json.loads(page.read_text(encoding="utf8"))
    chinese = json.loads(zn.translate_page(ROOT, page)[0])
    for k, (en, zh) in enumerate(zip(english["cells"], chinese["cells"], strict=True)):
        if en["cell_type"] != "markdown":
            continue
        before = _tokens("".join(en["source"]))
        after = _tokens("".join(zh["source"]))
        assert after == before, (f"{page.name} cell {k}: lost {before - after}, "
                                 f"gained {after - before}")


def _tokens(text: str) -> Counter:
    """Markup that must survive, each token with its line breaks as single spaces (a
    message joins the lines of its paragraph). Fence lines (```` ``` ````, ``:::``) are
    left out: the token scanner would read a whole fenced block as one code span."""
    unfenced = "\n".join(line for line in text.split("\n")
                         if not line.lstrip().startswith(("```", ":::")))
    return Counter({" ".join(k.split()): n for k, n in markup_tokens(unfenced).items()})


def _translation(**messages):
    return zn.Translation(messages)


def test_units_are_replaced_with_their_markers_and_labels_kept():
    text = ("(lbl)=\n## Title\n\nA para\nover two lines.\n\n1. An item\n   continued,\n\n"
            "   $$x$$ (eq-x)\n\n| Head | `code` |\n|---|---|\n| cell one | two |\n")
    tr = _translation(**{"Title": "标题", "A para over two lines.": "一段。",
                         "An item continued,": "一项，", "Head": "表头",
                         "cell one": "单元一", "two": "二"})
    out = zn.translate_markdown(text, tr)
    assert out.startswith("(lbl)=\n## 标题\n\n一段。\n\n1. 一项，\n\n   $$x$$ (eq-x)\n")
    assert "| 表头 | `code` |" in out and "| 单元一 | 二 |" in out
    assert tr.used == {"Title", "A para over two lines.", "An item continued,", "Head",
                       "cell one", "two"}


def test_directive_titles_and_bodies_are_translated_options_kept():
    text = "```{admonition} Why\n:class: dropdown\n\nBecause.\n```\n"
    out = zn.translate_markdown(text, _translation(Why="为什么", **{"Because.": "因为。"}))
    assert out == "```{admonition} 为什么\n:class: dropdown\n\n因为。\n```\n"


def test_an_untranslated_unit_stays_in_english_and_is_reported():
    tr = _translation()
    assert zn.translate_markdown("Plain words.\n", tr) == "Plain words.\n"
    assert tr.untranslated == {"Plain words."}


def test_fuzzy_and_empty_translations_are_not_used(tmp_path):
    po = tmp_path / "x.po"
    po.write_text('msgid ""\nmsgstr ""\n"Content-Type: text/plain; charset=utf-8\\n"\n\n'
                  '#, fuzzy\nmsgid "A"\nmsgstr "甲"\n\nmsgid "B"\nmsgstr ""\n\n'
                  'msgid "C"\nmsgstr "丙"\n', encoding="utf8")
    assert zn.catalog_translations(po) == {"C": "丙"}


def test_the_command_refuses_an_existing_folder_without_force(tmp_path):
    out = tmp_path / "zh"
    out.mkdir()
    run = subprocess.run([sys.executable, "-m", "layernorm_tutorial.publishing.book_i18n."
                          "notebooks", "--out", str(out)], capture_output=True, text=True,
                         cwd=ROOT)
    assert run.returncode == 2 and "--force" in run.stderr.strip().splitlines()[-1]


def test_a_chinese_notebook_executes_and_passes_nbval(tmp_path):
    out = tmp_path / "book"
    zn.write_chinese_book(ROOT, out)
    chapter = out / "norm_family.ipynb"
    assert json.loads(chapter.read_text(encoding="utf8"))["cells"][0]["source"] != \
        json.loads((ROOT / "book" / chapter.name).read_text(encoding="utf8"))["cells"][0][
            "source"]
    ini = tmp_path / "pytest.ini"
    ini.write_text("[pytest]\n", encoding="utf8")
    run = subprocess.run(
        [sys.executable, "-m", "pytest", "-c", str(ini), "-p", "no:cacheprovider",
         "-p", "no:xdist", "-q", "--nbval", "--nbval-current-env",
         "--nbval-kernel-startup-timeout=300",
         "--nbval-sanitize-with", str(ROOT / "tests" / "nbval_sanitize.cfg"), str(chapter)],
        capture_output=True, text=True, cwd=tmp_path, timeout=900)
    assert run.returncode == 0, run.stdout[-3000:]


def test_a_solution_label_is_not_looked_up_or_counted_as_english():
    # ``{solution} ex-a-1`` names its exercise; only the body is prose.
    text = "````{solution} ex-a-1\n:class: dropdown\n\nBody.\n````\n"
    tr = _translation(**{"Body.": "正文。"})
    assert zn.translate_markdown(text, tr) == ("````{solution} ex-a-1\n:class: dropdown\n\n"
                                               "正文。\n````\n")
    assert tr.untranslated == set() and tr.used == {"Body."}


def test_an_exercise_title_is_translated_and_a_missing_one_reported():
    text = "````{exercise} Count the parameters\n:label: ex-a-1\n\nCount them.\n````\n"
    tr = _translation(**{"Count the parameters": "数一数参数", "Count them.": "数一数。"})
    assert zn.translate_markdown(text, tr).startswith("````{exercise} 数一数参数\n:label: ex-a-1\n")
    missing = _translation(**{"Count them.": "数一数。"})
    zn.translate_markdown(text, missing)
    assert missing.untranslated == {"Count the parameters"}


def _exercise_titles(notebook: dict) -> list[str]:
    return [title for cell in notebook["cells"] if cell["cell_type"] == "markdown"
            for title in exercise_titles(zn._cell_source(cell))]


WITH_EXERCISES = [p for p in NOTEBOOKS if _exercise_titles(_as_notebook(p))]


def english_left(english: str, chinese: str) -> str | None:
    """Why the Chinese title ``chinese`` of the exercise titled ``english`` is (partly)
    English, or None: unchanged, without a Chinese character, or keeping the English half
    of a bilingual title ("English · 中文")."""
    if chinese == english or not CJK.search(chinese):
        return "left in English"
    parts = bilingual_parts(english)
    if parts and parts[0] in chinese:
        return f"keeps the English half {parts[0]!r}"
    return None


def test_the_english_left_check():
    assert english_left("Invariance, exactly", "Invariance, exactly")
    assert english_left("Invariance, exactly", "Invariance") == "left in English"
    assert english_left("Do X · 做 X", "Do X · 做 X")
    assert english_left("Do X · 做 X", "做 X") is None
    assert english_left("Invariance, exactly", "精确的不变性") is None


def test_there_are_exercises_to_check():
    assert len(WITH_EXERCISES) >= 9 and sum(
        len(_exercise_titles(_as_notebook(p))) for p in WITH_EXERCISES) >= 30


@pytest.mark.parametrize("page", WITH_EXERCISES, ids=lambda p: p.name)
def test_every_exercise_title_is_chinese_in_the_generated_notebook(page):
    english = _exercise_titles(_as_notebook(page))
    text, translation = zn.translate_page(ROOT, page)
    chinese = _exercise_titles(json.loads(text))
    assert len(chinese) == len(english)
    problems = [f"{en!r}: {why}" for en, zh in zip(english, chinese, strict=True)
                if (why := english_left(en, zh))]
    assert not problems, f"{page.name}: exercise titles not in Chinese: {problems}"
    assert not set(english) & translation.untranslated
