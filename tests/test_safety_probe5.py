"""Replays of the reliability probe 5 (``probe5_report.md``, defects D1-D12).

Every test works on copies under ``tmp_path``: a fake repository (``_cli.REPO`` and
``_cli.BOOK_DATA`` pointed at it) stands for the checkout, so a command that would replace a
file replaces the copy, never the real book. The work a command would start is replaced by a
stub that fails the test, so a missing refusal shows at once.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from layernorm_tutorial import _cli, bench, kernel_tune, roofline
from layernorm_tutorial._cli import StoredFileError
from layernorm_tutorial.lab.common import claims, stored_results
from layernorm_tutorial.lab.confirmatory import __main__ as confirmatory_cli
from layernorm_tutorial.lab.confirmatory import verdicts
from layernorm_tutorial.lab.evidence import live_checks, rejudge, side_experiments
from layernorm_tutorial.lab.evidence import results as evidence_results
from layernorm_tutorial.lab.interview import bank, placement
from layernorm_tutorial.publishing import flashcards

ROOT = Path(__file__).resolve().parents[1]
BOOK = ROOT / "book" / "data"


def _work_started(*args, **kwargs):
    raise AssertionError("the command started its work instead of refusing --out")


@pytest.fixture
def repo(tmp_path, monkeypatch):
    """A fake checkout: copies of two book files, README.md and functional.py."""
    fake = tmp_path / "repo"
    (fake / "book" / "data").mkdir(parents=True)
    (fake / "layernorm_tutorial").mkdir()
    for name in ("rnn_paths.json", "evidence_results.json"):
        shutil.copy(BOOK / name, fake / "book" / "data" / name)
    shutil.copy(ROOT / "README.md", fake / "README.md")
    shutil.copy(ROOT / "layernorm_tutorial" / "functional.py",
                fake / "layernorm_tutorial" / "functional.py")
    monkeypatch.setattr(_cli, "REPO", fake, raising=False)
    monkeypatch.setattr(_cli, "BOOK_DATA", fake / "book" / "data")
    return fake


def _status(fn, argv) -> int:
    try:
        return fn(argv)
    except SystemExit as stop:
        return stop.code


def _stub_work(monkeypatch):
    monkeypatch.setattr(rejudge, "rejudge_all", _work_started)
    monkeypatch.setattr(live_checks, "measure", _work_started)
    monkeypatch.setattr(side_experiments, "run_side_experiments", _work_started)
    monkeypatch.setattr(bench, "run_benchmark", _work_started)


COMMANDS = {  # name: (main, extra arguments)
    "rejudge": (rejudge.main, []),
    "live_checks": (live_checks.main, []),
    "side_experiments": (side_experiments.main, []),
    "roofline": (roofline.main, ["--table", str(BOOK / "kernel_fused_resources.json")]),
    "bank": (bank.main, []),
    "kernel_tune": (kernel_tune.main, []),
    "bench --json": (bench.main, ["--device", "cpu"]),
}
TARGETS = ("book/data/rnn_paths.json", "README.md", "layernorm_tutorial/functional.py")


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_no_command_replaces_another_repository_file_even_with_force(
        repo, monkeypatch, capsys, command, target):
    """D1, D10: ``--out book/data/rnn_paths.json --force`` (or README.md, functional.py)
    replaced the file; now one line, exit 2, the file untouched."""
    _stub_work(monkeypatch)
    main, extra = COMMANDS[command]
    path = repo / target
    before = path.read_bytes()
    option = "--json" if command == "bench --json" else "--out"
    assert _status(main, [*extra, option, str(path), "--force"]) == 2
    err = capsys.readouterr().err
    assert str(path) in err
    assert "another of the book's files" in err or "source or data files" in err
    assert path.read_bytes() == before


def test_rejudge_never_overwrites_its_own_input(repo, monkeypatch, capsys):
    """D2: ``rejudge --out book/data/evidence_results.json --force`` replaced its input."""
    _stub_work(monkeypatch)
    path = repo / "book" / "data" / "evidence_results.json"
    before = path.read_bytes()
    assert _status(rejudge.main, ["--out", str(path), "--force"]) == 2
    assert "another of the book's files" in capsys.readouterr().err
    assert path.read_bytes() == before


def test_a_command_still_writes_its_own_default_file(repo, monkeypatch):
    """The rule keeps each command's own book file writable (with --force)."""
    own = repo / "book" / "data" / "evidence_rejudged.json"
    _cli.check_not_a_source(own, own=(own,))
    with pytest.raises(_cli.OutputPathError, match="writes only evidence_rejudged.json"):
        _cli.check_not_a_source(repo / "book" / "data" / "rnn_paths.json", own=(own,))
    _cli.check_not_a_source(Path(os.sep) / "tmp" / "elsewhere.json")  # outside: fine


def test_rejudge_turns_a_broken_input_into_one_line(tmp_path, monkeypatch, capsys):
    """D3: a truncated rnn_race.json gave a StoredFileError traceback."""
    data = tmp_path / "data"
    shutil.copytree(BOOK, data)
    broken = data / "rnn_race.json"
    broken.write_bytes(broken.read_bytes()[:3000])
    monkeypatch.setattr(rejudge, "BOOK_DATA", data)
    monkeypatch.setattr(evidence_results, "DEFAULT_PATH", data / "evidence_results.json")
    assert _status(rejudge.main, ["--out", str(tmp_path / "rj.json")]) == 2
    err = capsys.readouterr().err
    assert "rnn_race.json: not valid JSON" in err and "Traceback" not in err
    assert not (tmp_path / "rj.json").exists()


def _copy_package(tmp_path: Path) -> Path:
    fake = tmp_path / "checkout"
    shutil.copytree(ROOT / "layernorm_tutorial", fake / "layernorm_tutorial",
                    ignore=shutil.ignore_patterns("__pycache__"))
    (fake / "book" / "data" / "registry").mkdir(parents=True)
    return fake


def test_help_works_with_the_claims_sidecar_broken(tmp_path):
    """D4: ``echo '{"bad' > claims_judged.json`` made even ``lab.rnn --help`` a traceback."""
    fake = _copy_package(tmp_path)
    (fake / "book" / "data" / "registry" / "claims_judged.json").write_text('{"bad\n')
    env = {**os.environ, "PYTHONPATH": str(fake)}
    done = subprocess.run([sys.executable, "-m", "layernorm_tutorial.lab.rnn", "--help"],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert "usage" in done.stdout


@pytest.mark.parametrize("text", ['{"bad', "", "[]", '{"results": {}}'])
def test_a_broken_claims_sidecar_is_one_line_when_used(tmp_path, monkeypatch, text):
    """D4: truncated, empty, ``[]``, a section removed: one line naming the file."""
    path = tmp_path / "claims_judged.json"
    path.write_text(text)
    monkeypatch.setattr(claims, "JUDGED_PATH", path)
    with pytest.raises(StoredFileError, match="claims_judged.json"):
        "rnn_race.json" in claims.JUDGED  # noqa: B015 - the lookup reads the file
    with pytest.raises(StoredFileError, match="claims_judged.json"):
        dict(claims.FIRST_DATA)


def test_the_claims_sidecar_reads_as_before():
    assert claims.JUDGED and claims.FIRST_DATA
    stored = json.loads(claims.JUDGED_PATH.read_text())
    assert dict(claims.JUDGED) == stored["results"]
    assert dict(claims.FIRST_DATA) == stored["first_data"]


def _spoil(path: Path, how: str) -> None:
    text = path.read_text()
    if how == "truncated":
        path.write_text(text[:2000])
    elif how == "list":
        path.write_text("[]")
    elif how == "section removed":
        doc = json.loads(text)
        del doc["runs"]
        path.write_text(json.dumps(doc))
    elif how == "tiny":
        doc = json.loads(text)
        doc["config"]["tiny"] = True
        path.write_text(json.dumps(doc))


@pytest.mark.parametrize("how", ["truncated", "list", "section removed", "tiny"])
def test_confirmatory_load_checks_the_file(tmp_path, monkeypatch, how):
    """D5: a bare json.loads gave JSONDecodeError tracebacks or accepted a broken file."""
    name = "rnn_race_confirmatory.json"
    shutil.copy(BOOK / name, tmp_path / name)
    _spoil(tmp_path / name, how)
    monkeypatch.setattr(verdicts, "BOOK_DATA", tmp_path)
    monkeypatch.setattr(_cli, "BOOK_DATA", tmp_path)
    with pytest.raises(StoredFileError, match=name):
        verdicts.load(name)


@pytest.mark.parametrize("how", ["truncated", "list", "tiny"])
def test_placement_checks_the_large_models_file(tmp_path, monkeypatch, how):
    """D5: ``interview.placement.stored_large_models`` read the file with a bare json.loads."""
    from layernorm_tutorial.lab.large_models import results as lm_results

    path = tmp_path / "large_models_results.json"
    shutil.copy(BOOK / path.name, path)
    _spoil(path, how)
    monkeypatch.setattr(lm_results, "COMMITTED_PATH", path)
    monkeypatch.setattr(_cli, "BOOK_DATA", tmp_path)
    with pytest.raises(StoredFileError, match="large_models_results.json"):
        placement.stored_large_models()


@pytest.mark.parametrize("name, section", [
    ("rnn_race.json", "runs"), ("residual_runs.json", "runs"),
    ("rnn_paths.json", "dynamics"), ("residual_paths.json", "replication"),
    ("principles_training.json", "runs"), ("principles_ln_vs_he.json", "validation_accuracy"),
    ("principles_ln_vs_he_replication.json", "original"),
    ("ln_vs_bn_online_paths.json", "online")])
def test_the_shared_loader_refuses_an_incomplete_file(tmp_path, name, section):
    """D6: with no ``sections``, only the header was checked; the notebook failed later."""
    doc = json.loads((BOOK / name).read_text())
    del doc[section]
    path = tmp_path / name
    path.write_text(json.dumps(doc))
    with pytest.raises(StoredFileError, match=f"{name}.*lacks {section}"):
        stored_results.load_results(path)


def test_evidence_loader_refuses_a_smoke_run_in_the_book(repo):
    """D7: ``config.tiny = true`` in book/data/evidence_results.json was accepted."""
    path = repo / "book" / "data" / "evidence_results.json"
    _spoil(path, "tiny")
    with pytest.raises(StoredFileError, match="smoke run"):
        evidence_results.load_results(path)


def _interrupt(*args, **kwargs):
    raise KeyboardInterrupt


@pytest.mark.parametrize("command, work", [("rejudge", "rejudge_all"),
                                           ("live_checks", "measure"),
                                           ("side_experiments", "run_side_experiments")])
def test_ctrl_c_is_one_word_and_130(tmp_path, monkeypatch, capsys, command, work):
    """D8: Ctrl-C during the run was a KeyboardInterrupt traceback."""
    module = {"rejudge": rejudge, "live_checks": live_checks,
              "side_experiments": side_experiments}[command]
    monkeypatch.setattr(module, work, _interrupt)
    try:
        status = _status(module.main, ["--out", str(tmp_path / "c.json")])
    except KeyboardInterrupt:  # the old code: a traceback (and it would stop pytest)
        pytest.fail("Ctrl-C escaped main as a KeyboardInterrupt")
    assert status == 130
    assert capsys.readouterr().err.strip() == "interrupted"


def test_bank_folder_is_one_line(tmp_path, capsys):
    """D9: ``--bank book`` was an IsADirectoryError traceback."""
    assert _status(bank.main, ["--bank", str(tmp_path), "--out", str(tmp_path / "i.md")]) == 2
    assert "is a folder, expected the bank JSON" in capsys.readouterr().err


def test_a_missing_bank_outside_the_book_gets_no_git_advice(tmp_path, capsys):
    """D9: a missing ``/tmp/none.json`` said "restore it with git checkout"."""
    missing = tmp_path / "none.json"
    assert _status(bank.main, ["--bank", str(missing), "--out", str(tmp_path / "i.md")]) == 2
    err = capsys.readouterr().err
    assert "no such file" in err and "git checkout" not in err


def test_confirmatory_help_exits_0(capsys):
    """D11: ``lab.confirmatory --help`` was an error (exit 2)."""
    assert _status(confirmatory_cli.main, ["--help"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("usage:") and "PLAN" in out


def test_an_empty_bank_is_an_error(tmp_path, capsys):
    """D12: a bank with ``"entries": []`` wrote an empty page, exit 0."""
    doc = json.loads((BOOK / "interview_bank.json").read_text())
    doc["entries"] = []
    empty = tmp_path / "bank.json"
    empty.write_text(json.dumps(doc))
    out = tmp_path / "i.md"
    assert _status(bank.main, ["--bank", str(empty), "--out", str(out)]) == 2
    assert "'entries' is empty" in capsys.readouterr().err
    assert not out.exists()


def test_flashcards_refuses_an_empty_book_url(tmp_path, capsys):
    """D12: ``--book-url ""`` was accepted (cards with broken links)."""
    out = tmp_path / "d.apkg"
    assert _status(flashcards.main, ["--out", str(out), "--book-url", ""]) == 2
    assert "--book-url" in capsys.readouterr().err
    assert not out.exists()


@pytest.mark.parametrize("command", ["rejudge", "live_checks", "side_experiments", "bank",
                                     "flashcards", "roofline"])
def test_an_empty_out_is_refused_the_same_way(monkeypatch, capsys, command):
    """D12: ``--out ""`` was the working folder, the default, or accepted."""
    _stub_work(monkeypatch)
    main, extra = {**COMMANDS, "flashcards": (flashcards.main, [])}[command]
    assert _status(main, [*extra, "--out", ""]) == 2
    assert "--out: empty path" in capsys.readouterr().err
