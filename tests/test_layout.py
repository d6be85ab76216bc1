"""The package's three rooms (library, lab, publishing), checked with import-linter.

The contracts live in pyproject.toml ([tool.importlinter]); ``lint-imports`` also runs in
.ci/run. These tests run it, check that it catches a planted violation, and check that every
top-level library module is named in the library contract, so a new module cannot escape it.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import tomllib

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "layernorm_tutorial"
ROOMS = {"lab", "publishing"}


def _lint_imports(cwd: Path, pythonpath: Path | None = None) -> subprocess.CompletedProcess:
    env = None
    if pythonpath is not None:
        import os
        env = {**os.environ, "PYTHONPATH": str(pythonpath)}
    lint = Path(sys.executable).with_name("lint-imports")
    command = [str(lint)] if lint.exists() else [sys.executable, "-m", "importlinter.cli"]
    return subprocess.run(command + ["--no-cache"], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=120)


def _contracts() -> list[dict]:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf8"))
    return config["tool"]["importlinter"]["contracts"]


def test_the_import_contracts_are_kept():
    done = _lint_imports(ROOT)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "3 kept, 0 broken" in done.stdout


def test_every_library_module_is_under_the_library_contract():
    library = {f"layernorm_tutorial.{p.stem}" for p in PACKAGE.iterdir()
               if (p.suffix == ".py" and p.stem != "__init__")
               or (p.is_dir() and (p / "__init__.py").exists() and p.name not in ROOMS)}
    contract = next(c for c in _contracts() if c["name"].startswith("The library"))
    assert set(contract["source_modules"]) == library
    assert set(contract["forbidden_modules"]) == {f"layernorm_tutorial.{r}" for r in ROOMS}


@pytest.mark.parametrize("module, planted", [
    ("functional.py", "import layernorm_tutorial.lab.common.training\n"),
    ("lab/rnn/cells.py", "import layernorm_tutorial.publishing.flashcards\n"),
    ("lab/common/figure.py", "import layernorm_tutorial.lab.rnn.plots\n"),  # a cycle in lab
])
def test_a_planted_violation_is_caught(tmp_path, module, planted):
    copy = tmp_path / "layernorm_tutorial"
    shutil.copytree(PACKAGE, copy, ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(ROOT / "pyproject.toml", tmp_path / "pyproject.toml")
    target = copy / module
    target.write_text(planted + target.read_text(encoding="utf8"), encoding="utf8")
    done = _lint_imports(tmp_path, pythonpath=tmp_path)
    assert done.returncode != 0, done.stdout
    assert "BROKEN" in done.stdout
