"""BatchNorm's textbook benefits next to the evidence chapter's stored verdicts.

:func:`benefit_rows` reads the evidence chapter's stored runs (``book/data/evidence_*.json``,
through :mod:`layernorm_tutorial.lab.evidence`) and returns, for each benefit an interviewer
expects in a list, the verdict rows of the claims that test it: the word, the effect and its
interval exactly as the evidence chapter prints them. A benefit the chapter does not test
gets no rows. Nothing is trained here.
"""

from __future__ import annotations

from layernorm_tutorial.lab.evidence import analysis, side_experiments
from layernorm_tutorial.lab.evidence.results import load_results

__all__ = ["BENEFITS", "benefit_rows", "format_rows"]

#: benefit -> (the evidence section's label, the prefixes of the claims that test it)
BENEFITS = {
    "trains with larger learning rates": ("evidence-lr", ("5. BN allows larger",)),
    "less sensitive to the initialization": ("evidence-bn-init", ("6. BN",)),
    "regularizes (smaller train-test gap)": ("evidence-gap", ("4. BN regularizes",)),
    "better accuracy than LN at moderate batch sizes":
        ("evidence-batch", ("1. MLP: BN beats LN",)),
    "reduces internal covariate shift": ("", ()),
}


def benefit_rows(doc: dict | None = None, side: dict | None = None) -> dict[str, list[dict]]:
    """``{benefit: [row, ...]}`` with each row ``{"claim", "setting", "word", "result"}``
    from the evidence chapter's verdict table (``doc``/``side``: the stored results, loaded
    when None)."""
    doc = load_results() if doc is None else doc
    side = side_experiments.load_side_results() if side is None else side
    rows = analysis.verdict_rows(doc) + analysis.side_verdict_rows(
        side_experiments.init_scale_result(side), side_experiments.combination_result(side))
    out = {}
    for benefit, (_, prefixes) in BENEFITS.items():
        out[benefit] = [{k: r[k] for k in ("claim", "setting", "word", "result")}
                        for r in rows if prefixes and r["claim"].startswith(prefixes)]
    return out


def format_rows(table: dict[str, list[dict]], width: int = 78) -> str:
    """The table as text lines within ``width`` characters: each benefit, then one line per
    verdict (setting and result), or "not tested by the evidence chapter"."""
    lines = []
    for benefit, rows in table.items():
        lines.append(benefit)
        if not rows:
            lines.append("    not tested by the evidence chapter")
        for r in rows:
            versus = r["claim"].partition(" than ")[2]        # claim 4 names its baseline
            setting = f"{r['setting']}, vs {versus}" if versus else r["setting"]
            text = f"    {setting}: {r['result']}"
            while len(text) > width:
                cut = text.rfind(" ", 0, width)
                lines.append(text[:cut])
                text = "      " + text[cut + 1:]
            lines.append(text)
    return "\n".join(lines)
