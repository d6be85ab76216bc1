"""``pytest`` uses every core (issue 24, item 10): pytest-xdist with ``--dist loadfile``, so
that each test file and each notebook stays in one worker (nbval runs a notebook's cells in
order, in one kernel); the notebooks still pass under it."""

from __future__ import annotations

import json
import shlex
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _addopts() -> list[str]:
    if sys.version_info >= (3, 11):
        import tomllib
    else:  # pragma: no cover
        import tomli as tomllib
    config = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf8"))
    return shlex.split(config["tool"]["pytest"]["ini_options"]["addopts"])


def test_pytest_uses_every_core_with_each_file_in_one_worker():
    options = _addopts()
    assert options[options.index("-n") + 1] == "auto"
    assert options[options.index("--dist") + 1] == "loadfile"
    requirements = (ROOT / "requirements.txt").read_text(encoding="utf8").split()
    assert any(r.startswith("pytest-xdist==") for r in requirements)
    ci = (ROOT / ".ci" / "run").read_text(encoding="utf8")
    assert "pytest -n 0 -m browser tests/browser" in ci  # one Chromium at a time


def _notebook(cells: list[tuple[str, str]]) -> dict:
    """A notebook whose code cells print the stored text (nbval compares it)."""
    return {
        "nbformat": 4, "nbformat_minor": 5,
        "metadata": {"kernelspec": {"name": "python3", "display_name": "Python 3",
                                    "language": "python"}},
        "cells": [{"cell_type": "code", "id": f"c{i}", "metadata": {}, "execution_count": i + 1,
                   "source": source,
                   "outputs": [{"output_type": "stream", "name": "stdout", "text": text}]
                   if text else []}
                  for i, (source, text) in enumerate(cells)],
    }


def test_notebooks_keep_one_kernel_under_the_configured_workers(tmp_path):
    """Later cells use the state of earlier ones: they pass only if every cell of a
    notebook runs in the same worker and kernel, in order."""
    for name in ("first", "second"):
        cells = [("import os\npid = os.getpid()\nsteps = []", "")]
        cells += [(f"steps.append({k})\nprint(pid == os.getpid(), steps)",
                   f"True {list(range(k + 1))}\n") for k in range(4)]
        (tmp_path / f"{name}.ipynb").write_text(json.dumps(_notebook(cells)), encoding="utf8")
    (tmp_path / "test_plain.py").write_text("def test_one():\n    assert 1\n", encoding="utf8")
    (tmp_path / "pytest.ini").write_text("[pytest]\n", encoding="utf8")
    options = [o for o in _addopts() if o not in ("--nbval-sanitize-with",
                                                    "tests/nbval_sanitize.cfg")]
    options[options.index("-n") + 1] = "2"  # two workers even on a one-core machine
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-c", str(tmp_path / "pytest.ini"), "--rootdir",
         str(tmp_path), *options, "-q", str(tmp_path)],
        cwd=tmp_path, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]
    assert "11 passed" in done.stdout, done.stdout[-2000:]
