"""BatchNorm's textbook benefits next to the evidence chapter's stored verdicts.

:func:`benefit_rows` reads the evidence chapter's stored runs (``book/data/evidence_*.json``,
through :mod:`layernorm_tutorial.lab.evidence`) and returns, for each benefit an interviewer
expects in a list, the verdict rows of the claims that test it: the word, the effect and its
interval exactly as the evidence chapter prints them, with the chapter's mark
(:data:`~layernorm_tutorial.lab.common.verdict.HOLM_MARK`: the word survives the correction
for many comparisons over the evidence chapter's whole family of verdicts, computed by
:mod:`~layernorm_tutorial.lab.common.verdict`). A benefit the chapter does not test gets no
rows. Nothing is trained here.
"""

from __future__ import annotations

import textwrap

from layernorm_tutorial.lab.common.verdict import HOLM_MARK
from layernorm_tutorial.lab.evidence import side_experiments
from layernorm_tutorial.lab.evidence.chapter import ChapterVerdicts
from layernorm_tutorial.lab.evidence.results import load_results

__all__ = ["BENEFITS", "chapter_verdicts", "benefit_rows", "words", "format_rows",
           "family_note", "optimizer"]

#: benefit -> (the evidence section's label, the prefixes of the claims that test it)
BENEFITS = {
    "trains with larger learning rates": ("evidence-lr", ("5. BN allows larger",)),
    "less sensitive to the initialization": ("evidence-bn-init", ("6. BN",)),
    "regularizes (smaller train-test gap)": ("evidence-gap", ("4. BN regularizes",)),
    "better accuracy than LN at moderate batch sizes (MLP)":
        ("evidence-batch", ("1. MLP: BN beats LN",)),
    "better accuracy than LN or GN in a CNN": ("evidence-cnn-rnn", ("3. CNN: BN beats",)),
    "makes saturating nonlinearities (sigmoid) usable": ("", ()),
    "reduces internal covariate shift": ("", ()),
}


def chapter_verdicts(doc: dict | None = None, side: dict | None = None) -> ChapterVerdicts:
    """Every confirmatory verdict of the evidence chapter with its mark, as that chapter
    computes them (``doc``/``side``: the stored results, loaded when None)."""
    doc = load_results() if doc is None else doc
    side = side_experiments.load_side_results() if side is None else side
    return ChapterVerdicts(doc, side_experiments.init_scale_result(side),
                           side_experiments.combination_result(side))


def benefit_rows(verdicts: ChapterVerdicts | None = None) -> dict[str, list[dict]]:
    """``{benefit: [row, ...]}`` with each row ``{"claim", "setting", "word", "holm",
    "result"}`` from the evidence chapter's verdict table (``result`` carries the mark,
    ``holm`` says whether the word survives the family's correction); ``verdicts``: the
    chapter's, computed from the stored results when None."""
    verdicts = chapter_verdicts() if verdicts is None else verdicts
    out = {}
    for benefit, (_, prefixes) in BENEFITS.items():
        out[benefit] = [{k: r[k] for k in ("claim", "setting", "word", "holm", "result")}
                        for r in verdicts.rows if prefixes and r["claim"].startswith(prefixes)]
    return out


def words(rows: list[dict]) -> dict[str, str]:
    """``{setting: word}`` for one benefit's rows, the word followed by the mark when it
    survives the family's correction (``"holds†"``); a claim that names its baseline ("... than LN")
    adds it to the setting (``"MLP, batch 32, vs LN"``)."""
    return {_setting(r): r["word"] + (HOLM_MARK if r["holm"] else "") for r in rows}


def _setting(r: dict) -> str:
    versus = r["claim"].partition(" than ")[2]        # claim 4 names its baseline
    return f"{r['setting']}, vs {versus}" if versus else r["setting"]


def format_rows(table: dict[str, list[dict]], width: int = 78) -> str:
    """The table as text lines within ``width`` characters: each benefit, then one line per
    verdict (setting and result, with its mark), or "not tested by the evidence
    chapter"."""
    lines = []
    for benefit, rows in table.items():
        lines.append(benefit)
        if not rows:
            lines.append("    not tested by the evidence chapter")
        for r in rows:
            text = f"    {_setting(r)}: {r['result']}"
            while len(text) > width:
                cut = text.rfind(" ", 0, width)
                lines.append(text[:cut])
                text = "      " + text[cut + 1:]
            lines.append(text)
    return "\n".join(lines)


def family_note(verdicts: ChapterVerdicts, width: int = 78) -> str:
    """What the mark means where only part of the family is printed: the evidence chapter's
    own sentence (which correction, over how many verdicts, how many survive), said of that
    chapter, and that a word without the mark is uncorrected."""
    sentence = verdicts.holm_sentence().replace("this chapter's", "the evidence chapter's")
    return textwrap.fill(f"{sentence} A word without {HOLM_MARK} is uncorrected.", width)


def optimizer(doc: dict | None = None) -> str:
    """The optimizer of the evidence chapter's main sweep (learning-rate ladders included),
    as its stored results record it."""
    doc = load_results() if doc is None else doc
    return doc["config"]["optimizer"]
