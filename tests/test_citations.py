"""Every paragraph that names a real model, paper or codebase carries its source (issue 34).

The rule (the book's standards): a fact about a named model/paper/codebase cites its primary
source. In a chapter's markdown that means, in the same paragraph, at least one of

- a citation: a ``{cite}`` role, or the book's author-year link to the bibliography,
  ``{ref}`(Author, year) <bibliography-page>```;
- the traced code: a code literal naming a ``transformers`` class or module
  (``Gemma2Config``, ``DeepseekV3Attention``, ``modeling_olmo2.py``,
  ``transformers.models...``) or a codebase's file path (``megatron/core/...py``);
- a number or output from the page's own cells: a ``{glue}`` role, or words that point at a
  cell, table, figure or trace of the page ("the cell", "the table above", "traced").

The test reads the large-models and the two interview chapters and lists every paragraph
that names one of :data:`NAMES` and has none of these; the unit tests show that it catches
a planted uncited paragraph and accepts each kind of source.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

BOOK = Path(__file__).resolve().parents[1] / "book"
NOTEBOOKS = ("large_models", "interview", "interview_advanced", "interview_practice",
             "interview_deployment")

#: Models, papers and codebases whose facts need a source (word-bounded, case-sensitive).
NAMES = ("GPT-2", "GPT-3", "GPT-J", "GPT-NeoX", "BERT", "RoBERTa", "T5", "LLaMA", "Llama",
         "Qwen", "OLMo", "Gemma", "DeepSeek", "PaLM", "BLOOM", "GLM-130B", "ChatGLM",
         "ViT-22B", "Megatron", "Mistral", "Falcon", "Kimi", "nGPT", "DyT", "DeepNet",
         "DeepNorm", "Mix-LN", "Peri-LN", "PowerNorm", "Cohere", "torchtitan", "Whisper",
         "Conformer", "Chinchilla", "MuonClip", "QK-Clip")
# A name may carry a version ("Qwen3", "Gemma 3", "OLMo 2"); one that ends in a digit may not
# run on into more digits ("T50", "GPT-20x" are no names).
_NAME_RE = re.compile(r"(?<![\w-])(" + "|".join(
    re.escape(n) + (r"(?![\w])" if n[-1].isdigit() else r"(?![A-Za-z_])")
    for n in sorted(NAMES, key=len, reverse=True)) + r")")
#: A question (an interview question's bold title) states no fact.
_QUESTION = re.compile(r"^\*\*[^*]+[?？]\*\*$")

_CITE = re.compile(r"\{cite(:[a-z]+)?\}`|\{ref\}`[^`]*<bibliography-page>`")
_TRACED = re.compile(
    r"`[^`\n]*(transformers\.|modeling_\w+|configuration_\w+|"
    r"[A-Z][A-Za-z0-9]*(Config|Model|ForCausalLM|Attention|RMSNorm|LayerNorm|DecoderLayer|"
    r"Router|MoE|MLP|Block|Embeddings)\b|[\w/]*\w+\.py)[^`\n]*`")
# A bare "above" or "below" is no source ("as reported above" may point at nothing): the
# paragraph must name the cell, table, figure, trace or run it relies on.
_CELL = re.compile(r"\{glue(:[a-z]+)?\}`|\b(the|this|next|previous|each|first|second) "
                   r"(cell|cells|table|figure|trace|run|runs)\b|\btraced?\b",
                   re.IGNORECASE)


def paragraphs(markdown: str) -> list[str]:
    """Blank-line separated paragraphs of a markdown cell, without fenced code or display
    math blocks and without heading lines."""
    out, current, fence = [], [], None
    for line in markdown.splitlines():
        stripped = line.strip()
        if fence is None and (stripped.startswith("```") or stripped.startswith(":::")):
            fence = stripped[:3]
            continue
        if fence is not None:
            if stripped.startswith(fence) and stripped.strip("`:") == "":
                fence = None
            continue
        if stripped.startswith("#") or re.fullmatch(r"\(.*\)=", stripped):
            continue
        if not stripped:
            if current:
                out.append("\n".join(current))
            current = []
        else:
            current.append(line)
    if current:
        out.append("\n".join(current))
    return out


def has_source(paragraph: str) -> bool:
    """Whether the paragraph carries a citation, traced code or a cell reference."""
    return bool(_CITE.search(paragraph) or _TRACED.search(paragraph)
                or _CELL.search(paragraph))


def uncited(nb: dict) -> list[tuple[int, str, str]]:
    """``(cell index, first name found, paragraph start)`` for each paragraph of the
    notebook's markdown cells that names one of :data:`NAMES` and has no source."""
    found = []
    for index, cell in enumerate(nb["cells"]):
        if cell["cell_type"] != "markdown":
            continue
        for par in paragraphs("".join(cell["source"])):
            match = _NAME_RE.search(par)
            if match and not has_source(par) and not _QUESTION.match(par.strip()):
                found.append((index, match.group(1), " ".join(par.split())[:90]))
    return found


def _nb(*markdown: str) -> dict:
    return {"cells": [{"cell_type": "markdown", "source": m} for m in markdown]}


# ------------------------------------------------------------------ the rule itself
def test_a_planted_uncited_paragraph_is_caught():
    nb = _nb("Intro without names.\n\nGemma 2 caps its attention logits at 50.\n")
    assert uncited(nb) == [(0, "Gemma", "Gemma 2 caps its attention logits at 50.")]


@pytest.mark.parametrize("source", [
    "{cite}`gemma2024gemma2`",
    "{cite:t}`gemma2024gemma2`",
    "{ref}`(Gemma Team, 2024) <bibliography-page>`",
    "`transformers.Gemma2Config`",
    "`Gemma2Config.attn_logit_softcapping`",
    "`modeling_gemma2.py`",
    "`megatron/core/distributed/finalize_model_grads.py`",
    "`model.py` in karpathy/nanoGPT",
    "{glue:text}`lm-cap`",
    "as the cell above shows",
])
def test_each_kind_of_source_is_accepted(source):
    assert uncited(_nb(f"Gemma 2 caps its attention logits at 50 ({source}).")) == []


def test_names_are_matched_as_words_and_code_blocks_are_skipped():
    assert uncited(_nb("A Gemmaless sentence; T50 and GPT-20x are no names.")) == []
    assert uncited(_nb("```python\n# LLaMA uses RMSNorm\n```\n")) == []
    assert uncited(_nb(":::{admonition} x\nBERT here\n:::\n")) == []
    assert uncited(_nb("**Where does LLaMA put its norms?**")) == []
    assert [u[1] for u in uncited(_nb("LLaMA uses RMSNorm.\n\nQwen3 too."))] == \
        ["LLaMA", "Qwen"]


def test_a_bare_above_is_no_source():
    assert [u[1] for u in uncited(_nb("As said above, Gemma 2 caps its logits at 50."))] \
        == ["Gemma"]


def test_the_first_paragraph_does_not_lend_its_citation_to_the_second():
    nb = _nb("OLMo 2 {cite}`olmo2024olmo2` normalizes q and k.\n\nOLMo 2 also uses z-loss.")
    assert [u[0:2] for u in uncited(nb)] == [(0, "OLMo")]


# ------------------------------------------------------------------ the chapters
@pytest.mark.parametrize("name", NOTEBOOKS)
def test_every_named_model_paragraph_carries_its_source(name):
    nb = json.loads((BOOK / f"{name}.ipynb").read_text())
    missing = uncited(nb)
    assert not missing, f"{name}.ipynb: paragraphs naming a model/paper without a source " \
        "(cite it, trace it, or point at the cell):\n" + \
        "\n".join(f"  cell {i} ({n}): {text}" for i, n, text in missing)
