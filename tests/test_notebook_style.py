"""Code that fits the page: the HTML's code column shows about 80 characters, so no code line
of a chapter is longer (issue 33, item 7). Bookkeeping that would need longer lines belongs
in the package (see ../shared/reviews/notebook-code-style.md)."""

import json
from pathlib import Path

import pytest

BOOK = Path(__file__).resolve().parents[1] / "book"
NOTEBOOKS = sorted(BOOK.glob("*.ipynb"))
MAX_COLUMNS = 80


def long_lines(notebook: Path, limit: int = MAX_COLUMNS) -> list[str]:
    """``"code cell K, line L (N chars)"`` for every code line over ``limit`` characters."""
    cells = json.loads(notebook.read_text(encoding="utf8"))["cells"]
    code = [c for c in cells if c["cell_type"] == "code"]
    return [f"code cell {k}, line {n} ({len(line)} chars): {line[:60]}..."
            for k, cell in enumerate(code)
            for n, line in enumerate("".join(cell["source"]).splitlines(), start=1)
            if len(line) > limit]


def test_there_are_chapters():
    assert len(NOTEBOOKS) >= 10


@pytest.mark.parametrize("notebook", NOTEBOOKS, ids=lambda p: p.name)
def test_code_lines_fit_the_page(notebook):
    too_long = long_lines(notebook)
    assert not too_long, f"{notebook.name}: {len(too_long)} code lines over {MAX_COLUMNS} " \
                         "characters:\n" + "\n".join(too_long[:20])


def test_the_check_catches_a_long_line(tmp_path):
    notebook = tmp_path / "x.ipynb"
    notebook.write_text(json.dumps({"cells": [
        {"cell_type": "markdown", "source": ["x" * 200]},
        {"cell_type": "code", "source": ["short\n", "y" * 81]}]}))
    assert long_lines(notebook) == ["code cell 0, line 2 (81 chars): " + "y" * 60 + "..."]
