"""Nothing a command does destroys a reader's work; a broken stored file is one clear line.

Each test replays a case of the reliability probe (``reviews/reliability-probe-4.md``, defects
D2-D5, D9-D11, D14) on copies of the book's files in ``tmp_path``; the real ``book/data`` is
only read. Training is never run: the commands' run functions are replaced by stubs that fail
the test if the command gets that far (a refusal must come first).
"""

from __future__ import annotations

import importlib
import json
import shutil
from pathlib import Path

import pytest

from layernorm_tutorial import _cli, bench, kernel_tune, roofline
from layernorm_tutorial.lab.common import stored_results
from layernorm_tutorial.lab.evidence import live_checks, rejudge, side_experiments
from layernorm_tutorial.lab.evidence import results as evidence_results
from layernorm_tutorial.lab.large_models import __main__ as large_models_cli
from layernorm_tutorial.lab.large_models import results as large_models_results
from layernorm_tutorial.lab.principles import __main__ as principles_cli
from layernorm_tutorial.lab.principles import ln_vs_he
from layernorm_tutorial.lab.rnn import paths as rnn_paths
from layernorm_tutorial.lab.rnn import race

try:  # the kernel tables' commands need Triton (Linux only); elsewhere their tests skip
    from layernorm_tutorial.triton_kernels import aot, fused_aot, resources
except ImportError:
    aot = fused_aot = resources = None
needs_triton = pytest.mark.skipif(aot is None, reason="needs triton (Linux only)")

BOOK = Path(__file__).resolve().parents[1] / "book" / "data"


def _never(*args, **kwargs):
    raise AssertionError("the command started its work instead of refusing")


@pytest.fixture
def book_data(tmp_path, monkeypatch):
    """A stand-in for ``book/data/``: files placed here count as the book's."""
    folder = tmp_path / "checkout" / "book" / "data"
    folder.mkdir(parents=True)
    monkeypatch.setattr(_cli, "BOOK_DATA", folder)
    return folder


def _copy(name: str, folder: Path) -> Path:
    return Path(shutil.copy(BOOK / name, folder / name))


def _exit_code(fn, *args) -> int:
    """The status ``fn(*args)`` exits with (a KeyboardInterrupt escaping fails the test)."""
    try:
        fn(*args)
    except SystemExit as stop:
        return stop.code
    except KeyboardInterrupt:
        pytest.fail("KeyboardInterrupt escaped the command")
    pytest.fail("the command did not exit")


def _one_error_line(capsys) -> str:
    err = capsys.readouterr().err.strip().splitlines()
    assert err, "nothing on stderr"
    return err[-1]


# ---- D2: a smoke run never writes the book's file, --force or not ------------------------

SMOKE_COMMANDS = [
    ("layernorm_tutorial.lab.rnn.__main__", [], "_run", "rnn_race.json"),
    ("layernorm_tutorial.lab.rnn.paths", [], "_run", "rnn_paths.json"),
    ("layernorm_tutorial.lab.residual.__main__", [], "_run", "residual_runs.json"),
    ("layernorm_tutorial.lab.residual.paths", [], "_run", "residual_paths.json"),
    ("layernorm_tutorial.lab.ln_vs_bn.__main__", [], "_run", "ln_vs_bn_online_paths.json"),
    ("layernorm_tutorial.lab.principles.__main__", ["ln-vs-he"], "_ln_vs_he",
     "principles_ln_vs_he.json"),
    ("layernorm_tutorial.lab.principles.__main__", ["training"], "_training",
     "principles_training.json"),
]


@pytest.mark.parametrize(("module", "prefix", "run", "name"), SMOKE_COMMANDS,
                         ids=[f"{m.split('.')[2]}{'.paths' if 'paths' in m else ''}"
                              f"{' ' + p[0] if p else ''}" for m, p, _, _ in SMOKE_COMMANDS])
def test_tiny_never_writes_the_books_file_even_with_force(module, prefix, run, name,
                                                          monkeypatch, capsys):
    """Probes 101 and 107: ``--tiny --out book/data/<file> --force`` replaced the book's
    results with a smoke run. Also spelt with ``..`` (probe 132's form)."""
    cli = importlib.import_module(module)
    monkeypatch.setattr(cli, run, _never)
    book_file = BOOK / name
    before = book_file.read_bytes()
    for spelling in (book_file, book_file.parent / ".." / "data" / name):
        assert _exit_code(cli.main, [*prefix, "--tiny", "--out", str(spelling), "--force"]) == 2
        line = _one_error_line(capsys)
        assert "--tiny is a smoke run and never writes the book's results file" in line
    assert book_file.read_bytes() == before


def test_tiny_refuses_any_file_in_book_data(book_data, monkeypatch, capsys):
    """Not only the command's own file: a smoke run may not land anywhere in book/data."""
    cli = importlib.import_module("layernorm_tutorial.lab.rnn.__main__")
    monkeypatch.setattr(cli, "_run", _never)
    out = book_data / "rnn_smoke.json"
    assert _exit_code(cli.main, ["--tiny", "--out", str(out)]) == 2
    assert "never writes the book's results file" in _one_error_line(capsys)
    assert not out.exists()


OTHER_BOOK_FILE = [  # a full run whose --out is another command's book file (its input)
    ("layernorm_tutorial.lab.rnn.paths", [], "_run", "rnn_race.json"),
    ("layernorm_tutorial.lab.principles.__main__", ["replicate"], "_replicate",
     "principles_ln_vs_he.json"),
    ("layernorm_tutorial.lab.large_models.__main__", [], "build_results", "rnn_race.json"),
    ("layernorm_tutorial.lab.evidence.__main__", [], "run_sweep", "rnn_race.json"),
]


@pytest.mark.parametrize(("module", "prefix", "run", "name"), OTHER_BOOK_FILE,
                         ids=["rnn.paths", "principles replicate", "large_models", "evidence"])
def test_a_full_run_writes_no_other_book_file(module, prefix, run, name, monkeypatch, capsys):
    """D9's question asked of the lab: ``rnn.paths --out book/data/rnn_race.json --force``
    replaced the race it reads by its own document (likewise ``replicate`` its input)."""
    cli = importlib.import_module(module)
    monkeypatch.setattr(cli, run, _never)
    book_file = BOOK / name
    before = book_file.read_bytes()
    assert _exit_code(cli.main, [*prefix, "--out", str(book_file), "--force"]) == 2
    assert "another of the book's files" in _one_error_line(capsys)
    assert book_file.read_bytes() == before


def _fake_run(args):
    doc = stored_results.provenance("python -m fake", {"epochs": 1}, 0.5)
    return {**doc, "runs": [{"arm": "RNN"}]}, "1 run in 0 s"


def test_a_smoke_run_is_marked_and_refused_at_a_book_path(book_data, tmp_path, capsys):
    """The probe's follow-up to 107: the loader accepted the smoke run in the book's place
    and the chapter failed far away (KeyError 'LN-LSTM')."""
    out = tmp_path / "smoke.json"
    stored_results.results_command(["--tiny", "--out", str(out)], prog="fake",
                                   description="fake", default_out=tmp_path / "book.json",
                                   tiny_help="smoke run", run=_fake_run, workers=False)
    doc = json.loads(out.read_text())
    assert doc["config"] == {"epochs": 1, "tiny": True}
    assert stored_results.load_results(out)["runs"] == [{"arm": "RNN"}]  # fine elsewhere
    planted = Path(shutil.copy(out, book_data / "rnn_race.json"))
    with pytest.raises(ValueError, match="smoke run") as err:
        stored_results.load_results(planted)
    assert str(planted) in str(err.value) and "\n" not in str(err.value)
    assert "python -m layernorm_tutorial.lab.rnn" in str(err.value)
    full = tmp_path / "full.json"  # a full run is not marked
    stored_results.results_command(["--out", str(full)], prog="fake", description="fake",
                                   default_out=tmp_path / "book.json", tiny_help="smoke run",
                                   run=_fake_run, workers=False)
    assert json.loads(full.read_text())["config"] == {"epochs": 1}


def test_book_commands_name_each_files_real_command():
    from layernorm_tutorial.lab.ln_vs_bn import streaming
    from layernorm_tutorial.lab.principles import stored_training
    from layernorm_tutorial.lab.residual import paths as residual_paths
    from layernorm_tutorial.lab.residual import sweep

    pairs = [(race.COMMITTED_PATH, race.COMMAND), (rnn_paths.COMMITTED_PATH, rnn_paths.COMMAND),
             (sweep.COMMITTED_PATH, sweep.COMMAND),
             (residual_paths.COMMITTED_PATH, residual_paths.COMMAND),
             (streaming.PATHS_FILE, streaming.PATHS_COMMAND),
             (ln_vs_he.COMMITTED_PATH, ln_vs_he.COMMAND),
             (ln_vs_he.REPLICATION_PATH, ln_vs_he.REPLICATION_COMMAND),
             (stored_training.COMMITTED_PATH, stored_training.COMMAND),
             (rejudge.COMMITTED_PATH, rejudge.COMMAND),
             (live_checks.COMMITTED_PATH, live_checks.COMMAND),
             (large_models_results.COMMITTED_PATH, large_models_results.COMMAND)]
    for path, command in pairs:
        assert stored_results.BOOK_COMMANDS[path.name] == command
        assert json.loads(path.read_text())["command"].startswith(command)


def test_book_commands_name_each_confirmatory_files_plan():
    """The seven confirmatory results files: each listed with ``... confirmatory PLAN``,
    the plan that writes it, and the file records that command."""
    from layernorm_tutorial.lab.confirmatory import runs

    for plan, (name, _) in runs.PLANS.items():
        command = f"{runs.COMMAND} {plan}"
        assert stored_results.BOOK_COMMANDS[name] == command
        assert json.loads((stored_results.BOOK_DATA / name).read_text())["command"] == command


# ---- D3, D10: large_models --sections ------------------------------------------------------

def test_sections_without_update_never_drops_the_other_sections(tmp_path, monkeypatch,
                                                                capsys):
    """Probe 127: ``--force --sections architectures`` kept 1 of 9 sections."""
    monkeypatch.setattr(large_models_cli, "build_results", _never)
    out = _copy("large_models_results.json", tmp_path)
    before = out.read_bytes()
    code = _exit_code(large_models_cli.main,
                      ["--force", "--sections", "architectures", "--out", str(out)])
    line = _one_error_line(capsys)
    assert code == 2 and out.read_bytes() == before
    assert f"--sections without --update would drop the other 8 sections of {out}" in line
    assert line.endswith("add --update")


@pytest.mark.parametrize("sections", [",", " ", " , "])
def test_an_empty_sections_list_is_an_error_not_every_section(sections, tmp_path,
                                                              monkeypatch, capsys):
    """Probe 125: ``--sections ,`` started every section (hours)."""
    monkeypatch.setattr(large_models_cli, "build_results", _never)
    code = _exit_code(large_models_cli.main,
                      ["--sections", sections, "--out", str(tmp_path / "x.json")])
    line = _one_error_line(capsys)
    assert code == 2 and "--sections: no section given" in line
    assert ", ".join(large_models_results.SECTIONS) in line


def test_large_models_loader_refuses_a_partial_book_file(book_data, tmp_path):
    doc = json.loads((BOOK / "large_models_results.json").read_text())
    partial = {k: v for k, v in doc.items()
               if k not in large_models_results.SECTIONS or k == "architectures"}
    scratch = tmp_path / "architectures_only.json"
    scratch.write_text(json.dumps(partial))
    assert large_models_results.load_results(scratch)["architectures"]  # a --sections run
    planted = book_data / "large_models_results.json"
    planted.write_text(json.dumps(partial))
    with pytest.raises(ValueError, match="lacks the section") as err:
        large_models_results.load_results(planted)
    assert str(planted) in str(err.value) and "restore it (git checkout)" in str(err.value)


# ---- D4: every loader names the broken file and says what to do ----------------------------

def _bench_loader(path: Path):
    return bench.load_stored(path.name)


LOADERS = {  # loader, the book file it reads, a main section
    "stored_results": (stored_results.load_results, "rnn_race.json", "config"),
    "evidence.results": (evidence_results.load_results, "evidence_results.json", "runs"),
    "side_experiments": (side_experiments.load_side_results, "evidence_side_results.json",
                         "combinations"),
    "rejudge": (rejudge.load_rejudged, "evidence_rejudged.json", "items"),
    "live_checks": (live_checks.load_live_checks, "evidence_live_checks.json", "checks"),
    "large_models": (large_models_results.load_results, "large_models_results.json",
                     "qk_norm"),
    "bench": (_bench_loader, "gpu_bench_h100.json", "date"),
}
if resources is not None:
    LOADERS["resources"] = (resources.load_table, "kernel_resources.json", "rows")


def _corrupt(text: str, how: str, section: str) -> str:
    if how == "truncated":
        return text[: len(text) // 2]
    if how == "empty":
        return ""
    if how == "merge marker":
        return f"<<<<<<< HEAD\n{text}=======\n{text}>>>>>>> other\n"
    if how == "a list":
        return "[]"
    return json.dumps({k: v for k, v in json.loads(text).items() if k != section})


@pytest.mark.parametrize("how", ["truncated", "empty", "merge marker", "a list",
                                 "section removed", "missing"])
@pytest.mark.parametrize("loader", list(LOADERS))
def test_a_broken_stored_file_is_one_line_naming_it(loader, how, book_data, monkeypatch):
    """The probe's table of corrupted stored files: JSONDecodeError without the file's name,
    and three loaders that accepted a list or a document without its main section."""
    load, name, section = LOADERS[loader]
    monkeypatch.setattr(bench, "BOOK_DATA", book_data)
    path = book_data / name
    if how != "missing":
        path.write_text(_corrupt((BOOK / name).read_text(), how, section))
    with pytest.raises((ValueError, FileNotFoundError)) as err:
        load(path)
    message = str(err.value)
    assert isinstance(err.value, _cli.StoredFileError)
    assert str(path) in message and "\n" not in message
    assert "restore it (git checkout)" in message
    expected = {"truncated": "not valid JSON (line", "empty": "empty",
                "merge marker": "merge-conflict markers (line 1)", "a list": "JSON array",
                "section removed": section, "missing": ""}[how]
    assert expected in message


def test_the_loaders_still_read_the_books_files():
    for load, name, section in LOADERS.values():
        doc = load(BOOK / name)
        assert section in doc or (load is rejudge.load_rejudged and doc)


def test_a_broken_input_of_a_command_ends_it_with_one_line(book_data, tmp_path, monkeypatch,
                                                          capsys):
    """Probe 111 (and D4's reproduction): ``rnn.paths`` with an emptied rnn_race.json gave a
    JSONDecodeError traceback; probe 96: ``principles replicate`` likewise."""
    race_file = book_data / "rnn_race.json"
    race_file.write_text("")
    monkeypatch.setattr(race, "COMMITTED_PATH", race_file)
    monkeypatch.setattr(rnn_paths, "_on_paths", _never)
    assert _exit_code(rnn_paths.main, ["--tiny", "--out", str(tmp_path / "x.json")]) == 2
    line = _one_error_line(capsys)
    assert f"{race_file}: the file is empty" in line
    assert "re-run python -m layernorm_tutorial.lab.rnn" in line
    ln_file = book_data / "principles_ln_vs_he.json"
    ln_file.write_text('{"command": ')
    monkeypatch.setattr(ln_vs_he, "COMMITTED_PATH", ln_file)
    monkeypatch.setattr(ln_vs_he, "replicate", _never)
    assert _exit_code(principles_cli.main, ["replicate", "--out", str(tmp_path / "r.json")]) == 2
    assert f"{ln_file}: not valid JSON (line 1, column 13)" in _one_error_line(capsys)
    assert not (tmp_path / "x.json").exists() and not (tmp_path / "r.json").exists()


# ---- D5, D9: input files of commands checked first; no input doubles as an output --------

@pytest.fixture
def fused_table(tmp_path):
    return _copy("kernel_fused_resources.json", tmp_path)


@pytest.mark.parametrize("how", ["missing", "truncated", "no rows", "empty rows",
                                 "not a fused table"])
def test_roofline_checks_its_table(how, fused_table, tmp_path, capsys):
    """Probes 61-64: FileNotFoundError, JSONDecodeError, KeyError tracebacks."""
    if how == "not a fused table" and aot is None:
        pytest.skip("needs triton (Linux only): the fused launch rules")
    table = json.loads(fused_table.read_text())
    bad = tmp_path / "table.json"
    if how == "truncated":
        bad.write_text(fused_table.read_text()[:1000])
    elif how == "no rows":
        bad.write_text(json.dumps({k: v for k, v in table.items() if k != "rows"}))
    elif how == "empty rows":
        bad.write_text(json.dumps({**table, "rows": []}))
    elif how == "not a fused table":  # the other compiler's table: rows of other kernels
        bad.write_text((BOOK / "kernel_resources.json").read_text())
    out = tmp_path / "pred.json"
    assert _exit_code(roofline.main, ["--table", str(bad), "--out", str(out)]) == 2
    line = _one_error_line(capsys)
    assert line.startswith(f"python -m layernorm_tutorial.roofline: error: --table {bad}")
    assert not out.exists()


def test_roofline_never_writes_over_its_table(fused_table, capsys):
    """Probe 68: ``--table T --out T --force`` replaced the table by the predictions."""
    before = fused_table.read_bytes()
    for out in (fused_table, fused_table.parent / "." / fused_table.name):
        code = _exit_code(roofline.main,
                          ["--table", str(fused_table), "--out", str(out), "--force"])
        assert code == 2 and "it is the --table file" in _one_error_line(capsys)
    assert fused_table.read_bytes() == before


def test_bench_csv_and_json_may_not_name_one_file(tmp_path, monkeypatch, capsys):
    """Probe 59: the JSON silently replaced the CSV, and both were reported written."""
    monkeypatch.setattr(bench, "run_benchmark", _never)
    path = tmp_path / "p"
    path.write_text("mine")
    code = _exit_code(bench.main, ["--quick", "--csv", str(path), "--json",
                                   str(tmp_path / "." / "p"), "--force"])
    assert code == 2 and "--csv and --json name the same file" in _one_error_line(capsys)
    assert path.read_text() == "mine"


@needs_triton
@pytest.mark.parametrize("how", ["truncated", "no versions", "rows of another table"])
def test_fused_aot_reuse_checks_the_table_first(how, fused_table, monkeypatch, capsys):
    """Probes 78-79: JSONDecodeError, KeyError 'versions'."""
    monkeypatch.setattr(fused_aot, "compile_jobs", _never)
    table = json.loads(fused_table.read_text())
    if how == "truncated":
        fused_table.write_text(fused_table.read_text()[:500])
    elif how == "no versions":
        fused_table.write_text(json.dumps({k: v for k, v in table.items() if k != "versions"}))
    else:
        fused_table.write_text((BOOK / "kernel_resources.json").read_text())
    before = fused_table.read_bytes()
    assert _exit_code(fused_aot.main, ["--out", str(fused_table), "--reuse"]) == 2
    assert f"error: --reuse {fused_table}" in _one_error_line(capsys)
    assert fused_table.read_bytes() == before


@needs_triton
def test_fused_aot_reuse_with_nothing_to_compile_leaves_the_table_as_it_was(
        fused_table, monkeypatch, capsys):
    """Probe 80 and D14: the reused table had its command and seconds (59.1 -> 0.0) rewritten."""
    table = json.loads(fused_table.read_text())
    monkeypatch.setattr(aot, "versions", lambda: table["versions"])
    monkeypatch.setattr(fused_aot, "compile_jobs", _never)
    before = fused_table.read_bytes()
    fused_aot.main(["--out", str(fused_table), "--reuse"])
    assert "nothing to compile" in capsys.readouterr().out
    assert fused_table.read_bytes() == before


@pytest.mark.parametrize("how", ["missing", "truncated"])
def test_large_models_update_checks_the_file_it_updates(how, tmp_path, monkeypatch, capsys):
    """Probes 121-122: FileNotFoundError / JSONDecodeError after the path check passed."""
    monkeypatch.setattr(large_models_cli, "build_results", _never)
    out = tmp_path / "lm.json"
    if how == "truncated":
        out.write_text('{"command": "python -m')
    code = _exit_code(large_models_cli.main, ["--update", "--force", "--sections",
                                              "architectures", "--out", str(out)])
    line = _one_error_line(capsys)
    assert code == 2 and "--update reads --out first: " in line and str(out) in line


# ---- D11: the principles experiment is a real positional ---------------------------------

def test_principles_help_lists_the_experiments(capsys):
    """Probe 93: ``--help`` did not list ln-vs-he, training, replicate."""
    assert _exit_code(principles_cli.main, ["--help"]) == 0
    out = capsys.readouterr().out
    assert "{ln-vs-he,training,replicate}" in out
    assert all(f"{e}:" in out or f"{e} (default)" in out for e in principles_cli.EXPERIMENTS)


def test_principles_misspelt_experiment_names_the_choices(tmp_path, capsys):
    """Probe 86: ``trainig`` gave "unrecognized arguments"."""
    code = _exit_code(principles_cli.main, ["trainig", "--tiny", "--out", str(tmp_path / "x")])
    line = _one_error_line(capsys)
    assert code == 2 and "invalid choice: 'trainig'" in line
    assert "'ln-vs-he', 'training', 'replicate'" in line


@pytest.mark.parametrize(("argv", "expected"), [
    (["--tiny", "--out", "{out}", "training"], "_training"),   # probe 87: experiment last
    (["training", "--tiny", "--out", "{out}"], "_training"),
    (["--tiny", "--out", "{out}"], "_ln_vs_he"),               # the default is kept
])
def test_principles_experiment_before_or_after_the_options(argv, expected, tmp_path,
                                                           monkeypatch):
    ran = []

    def fake(name):
        def run(args):
            ran.append(name)
            return _fake_run(args)
        return run

    for name in ("_ln_vs_he", "_training", "_replicate"):
        monkeypatch.setattr(principles_cli, name, fake(name))
    out = tmp_path / "x.json"
    principles_cli.main([a.format(out=out) for a in argv])
    assert ran == [expected] and json.loads(out.read_text())["config"]["tiny"] is True


@pytest.mark.parametrize("flag", [["--tiny"], ["--workers", "2"]])
def test_principles_replicate_refuses_flags_it_would_ignore(flag, tmp_path, monkeypatch,
                                                            capsys):
    """D11: ``replicate --tiny`` ran the full replication."""
    monkeypatch.setattr(principles_cli, "_replicate", _never)
    code = _exit_code(principles_cli.main,
                      ["replicate", *flag, "--out", str(tmp_path / "r.json")])
    assert code == 2 and f"it takes no {flag[0]}" in _one_error_line(capsys)


# ---- D14 and Ctrl-C ------------------------------------------------------------------------

def test_bench_impls_error_lists_each_name_once(capsys):
    assert _exit_code(bench.main, ["--impls", "nope"]) == 2
    line = _one_error_line(capsys)
    listed = line[line.index("expected some of [") + len("expected some of ["):].rstrip("]")
    names = [n.strip(" '") for n in listed.split(",")]
    assert len(names) == len(set(names)) and {"torch", "compiled", "composite"} <= set(names)


def test_bench_table_names_every_op_in_full():
    rows = [dict(op=op, implementation=impl, shape="65536x1024", dtype="bfloat16",
                 direction=d, ms=0.1234, spread=0.03, gbps=3012.5, frac_copy=0.95,
                 check="ok") for op in bench.OPS for impl in ("triton_pipelined", "torch")
            for d in ("fwd", "bwd")]
    lines = bench.format_table(rows).splitlines()
    assert [line for line in lines if line.endswith(":")] == [f"{op}:" for op in bench.OPS]
    assert max(len(line) for line in lines) <= 80


def test_evidence_summary_counts_runs_as_its_progress_bar_does(tmp_path, monkeypatch,
                                                               capsys):
    """D14: "59 runs trained" while the bar had shown a total of 30 (the bar's total grows
    as each phase of the sweep adds runs); the summary says which count it gives."""
    cli = importlib.import_module("layernorm_tutorial.lab.evidence.__main__")
    monkeypatch.setattr(cli, "run_sweep", lambda *a, **k: {"trained": 59})
    monkeypatch.setattr(cli, "build_results", lambda *a, **k: {})
    monkeypatch.setattr(cli, "save_results", lambda doc, out, **k: Path(out))
    cli.main(["--tiny", "--workers", "1", "--out", str(tmp_path / "e.json")])
    out = capsys.readouterr().out
    assert "59 runs trained" in out and "progress bar's final count" in out


def test_kernel_tune_json_ends_with_a_newline(tmp_path, monkeypatch):
    import types

    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda *a: "stand-in GPU")
    monkeypatch.setattr(kernel_tune, "_ops",
                        lambda: types.SimpleNamespace(device_limits=lambda device: {}))
    monkeypatch.setattr(kernel_tune, "measure_latency_ns", lambda *a, **k: 500.0)
    monkeypatch.setattr(kernel_tune, "sweep", lambda **k: [])
    out = tmp_path / "tune.json"
    assert kernel_tune.main(["--out", str(out)]) == 0
    assert out.read_text().endswith("}\n")


def _interrupt(*args, **kwargs):
    raise KeyboardInterrupt


def test_ctrl_c_ends_a_command_with_interrupted_and_130(tmp_path, monkeypatch, capsys):
    """Ctrl-C: one word and status 130, not a traceback; nothing half-written."""
    out = tmp_path / "x.json"
    assert _exit_code(lambda: stored_results.results_command(
        ["--out", str(out)], prog="fake", description="fake", default_out=out,
        tiny_help="smoke", run=_interrupt, workers=False)) == 130
    assert _one_error_line(capsys) == "interrupted" and not out.exists()
    monkeypatch.setattr(large_models_cli, "build_results", _interrupt)
    assert _exit_code(large_models_cli.main, ["--sections", "timing", "--out", str(out)]) == 130
    assert _one_error_line(capsys) == "interrupted" and not out.exists()
    monkeypatch.setattr(bench, "run_benchmark", _interrupt)
    assert _exit_code(bench.main, ["--quick", "--csv", str(tmp_path / "b.csv")]) == 130
    assert _one_error_line(capsys) == "interrupted"
