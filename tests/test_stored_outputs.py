"""Stored notebook outputs hold nothing of the machine that ran them.

nbval compares outputs literally, so a path such as ``/home/me/venv/.../site-packages`` in a
warning passes on the author's machine and fails on every other (CI's venv is elsewhere).
"""

import json
import re
from pathlib import Path

import pytest

BOOK = Path(__file__).resolve().parents[1] / "book"
MACHINE_PATH = re.compile(r"site-packages|/work/|/home/|/tmp/|/root/")


@pytest.mark.parametrize("notebook", sorted(BOOK.glob("*.ipynb")), ids=lambda p: p.name)
def test_outputs_have_no_machine_paths(notebook):
    cells = json.loads(notebook.read_text(encoding="utf8"))["cells"]
    found = []
    for index, cell in enumerate(cells):
        for output in cell.get("outputs", []):
            texts = [output.get("text", "")] + [
                v for k, v in output.get("data", {}).items() if k.startswith("text/")]
            for text in texts:
                text = "".join(text) if isinstance(text, list) else str(text)
                if MACHINE_PATH.search(text):
                    found.append(f"cell {index}: {MACHINE_PATH.search(text).group(0)!r}")
    assert not found, f"{notebook.name}: outputs name paths of one machine: {found[:5]}"
