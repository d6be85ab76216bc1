"""Tests of the evidence package: models, runner, lr selection, sweep, results file, analysis."""

from __future__ import annotations

import dataclasses
import json
import math
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

from layernorm_tutorial import nn as lnn
from layernorm_tutorial.lab.evidence import __main__ as evidence_cli
from layernorm_tutorial.lab.evidence import analysis, experiments, results
from layernorm_tutorial.lab.evidence.data import as_model_input, load_evidence_data
from layernorm_tutorial.lab.evidence.models import CNN, MLP, NORMS, ChannelLayerNorm, build_model
from layernorm_tutorial.lab.evidence.runner import (
    RunSpec,
    evaluate,
    recalibrate_batch_norm,
    train_model,
    train_run,
)
from layernorm_tutorial.lab.evidence.synthetic import synthetic_results

RESULTS_FILE = Path(__file__).resolve().parents[1] / "book" / "data" / "evidence_results.json"


def test_split_is_fixed_and_disjoint():
    data = load_evidence_data()
    assert data.sizes() == {"train": 1078, "val": 270, "test": 449}
    assert sum(data.sizes().values()) == 1797
    assert load_evidence_data() is data   # cached: every run sees the same tensors
    assert float(data.x_train.min()) >= 0.0 and float(data.x_train.max()) <= 1.0


@pytest.mark.parametrize("model", ["mlp", "cnn", "rnn"])
def test_every_variant_maps_images_to_ten_logits(model):
    x = as_model_input(load_evidence_data().x_test[:5], model)
    for norm in NORMS[model]:
        torch.manual_seed(0)
        net = build_model(model, norm).train()
        assert net(x).shape == (5, 10)


def test_variants_use_the_package_norm_modules():
    assert sum(isinstance(m, lnn.BatchNorm1d) for m in MLP("bn").modules()) == 3
    assert sum(isinstance(m, lnn.LayerNorm) for m in MLP("ln").modules()) == 3
    ln_cnn = [m for m in CNN("ln").modules() if isinstance(m, lnn.LayerNorm)]
    assert [m.normalized_shape for m in ln_cnn] == [(16, 8, 8), (32, 8, 8), (32, 4, 4)]
    assert sum(isinstance(m, lnn.GroupNorm) for m in CNN("gn").modules()) == 3
    assert sum(isinstance(m, lnn.BatchNorm2d) for m in CNN("bn").modules()) == 3
    # only the norm changes: the unnormalized nets differ by their biases only
    assert not any(isinstance(m, (lnn.LayerNorm, lnn.BatchNorm1d)) for m in MLP().modules())


def test_unknown_norm_or_model_raises():
    with pytest.raises(ValueError, match="norm for the mlp"):
        MLP("gn")
    with pytest.raises(ValueError, match="model must be one of"):
        build_model("transformer", "ln")
    with pytest.raises(ValueError, match="shape"):
        as_model_input(torch.zeros(3, 8, 8), "cnn")


def test_channel_layer_norm_is_layer_norm_over_channels_per_position():
    torch.manual_seed(1)
    x = torch.randn(3, 6, 4, 5, dtype=torch.float64)
    norm = ChannelLayerNorm(6).double()
    with torch.no_grad():
        norm.norm.weight.uniform_(0.5, 1.5)
        norm.norm.bias.normal_()
    expected = F.layer_norm(x.permute(0, 2, 3, 1), (6,), norm.norm.weight, norm.norm.bias,
                            1e-6).permute(0, 3, 1, 2)
    torch.testing.assert_close(norm(x), expected)
    y = norm(x)
    # one mean per sample and position, but not per sample over the whole map
    centred = (y - norm.norm.bias.view(1, 6, 1, 1)) / norm.norm.weight.view(1, 6, 1, 1)
    torch.testing.assert_close(centred.mean(dim=1), torch.zeros(3, 4, 5, dtype=torch.float64))


def test_lr_grid_scales_with_the_square_root_of_the_batch():
    assert experiments.lr_grid(32) == experiments.LR_GRID
    assert experiments.lr_grid(128) == pytest.approx([2 * lr for lr in experiments.LR_GRID],
                                                     rel=1e-2)
    assert experiments.lr_grid(8) == pytest.approx([lr / 2 for lr in experiments.LR_GRID],
                                                   rel=1e-2)


def test_extend_grid_steps_beyond_the_winning_edge_only():
    grid = (1e-3, 3e-3, 1e-2)
    assert experiments.extend_grid(grid, 1e-2) == pytest.approx(1e-2 * math.sqrt(10), rel=1e-2)
    assert experiments.extend_grid(grid, 1e-3) == pytest.approx(1e-3 / math.sqrt(10), rel=1e-2)
    assert experiments.extend_grid(grid, 3e-3) is None
    assert experiments.extend_grid((1e-3,), 1e-3) is None


def test_sweep_extends_the_grid_when_the_winner_is_at_an_edge():
    rnn = next(e for e in experiments.EXPERIMENTS if e.name == "rnn")
    exp = dataclasses.replace(rnn, norms=("ln",), seeds=(0,), lr_base=(1e-3, 3e-3), epochs=1,
                              max_steps=2, grid_extensions=1)
    sweep = experiments.run_sweep([exp])
    lrs = sorted(r["spec"]["lr"] for r in sweep["runs"])
    # with two rates the winner is always at an edge, so exactly one rate is added beyond it
    assert len(lrs) == 3 and (lrs[0] < 1e-3 or lrs[-1] > 3e-3)
    assert sweep["selected_lr"][0]["lr"] in lrs


def _fake(lr, val_acc, val_loss):
    return {"spec": {"lr": lr}, "final": {"val_acc": val_acc, "val_loss": val_loss}}


def test_select_lr_prefers_validation_accuracy_then_loss_then_smaller_rate():
    assert experiments.select_lr([_fake(1e-3, 0.90, 0.3), _fake(3e-3, 0.95, 0.4)]) == 3e-3
    assert experiments.select_lr([_fake(1e-3, 0.95, 0.3), _fake(3e-3, 0.95, 0.2)]) == 3e-3
    assert experiments.select_lr([_fake(3e-3, 0.95, 0.2), _fake(1e-3, 0.95, 0.2)]) == 1e-3
    assert experiments.select_lr([_fake(1e-3, 0.95, math.nan), _fake(3e-3, 0.95, 1.0)]) == 3e-3
    with pytest.raises(ValueError):
        experiments.select_lr([])


def test_train_run_rejects_bad_specs():
    with pytest.raises(ValueError, match="batch_size"):
        train_run(RunSpec("mlp", "bn", 1, 1e-3, 0, 1, max_steps=1))
    with pytest.raises(ValueError, match="lr"):
        train_run(RunSpec("mlp", "ln", 8, 0.0, 0, 1, max_steps=1))


def test_tiny_run_is_bit_reproducible_and_learns():
    spec = RunSpec("mlp", "bn", 16, 1e-2, 3, epochs=1, max_steps=12)
    first, second = train_run(spec), train_run(spec)
    assert first == second
    assert first["steps"] == 12 and len(first["curve"]["step"]) == 12
    assert first["curve"]["train_loss"][-1] < math.log(10)   # below chance level
    other_seed = train_run(dataclasses.replace(spec, seed=4))
    assert other_seed["final"] != first["final"]


def test_train_run_keeps_the_callers_random_state():
    spec = RunSpec("mlp", "ln", 32, 1e-2, 1, epochs=1, max_steps=2)
    torch.manual_seed(99)
    expected = torch.rand(3)
    torch.manual_seed(99)
    record = train_run(spec)
    torch.testing.assert_close(torch.rand(3), expected)  # the reader's stream goes on
    torch.manual_seed(5)
    assert train_run(spec) == record  # and the run depends on spec.seed only


def test_train_model_returns_the_model_behind_the_record():
    spec = RunSpec("cnn", "gn", 32, 3e-3, 0, epochs=1, max_steps=3)
    model, record = train_model(spec)
    assert record == train_run(spec)
    data = load_evidence_data()
    loss, acc = evaluate(model, as_model_input(data.x_test, "cnn"), data.y_test)
    assert (loss, acc) == (record["final"]["test_loss"], record["final"]["test_acc"])


def test_recalibrated_batch_norm_holds_the_exact_statistics_of_the_data():
    model, _ = train_model(RunSpec("mlp", "bn", 64, 1e-2, 0, epochs=1, max_steps=5))
    x = load_evidence_data().x_train
    weights = {k: v.clone() for k, v in model.state_dict().items() if "running" not in k}
    assert recalibrate_batch_norm(model, x) == 3
    first_linear, first_bn = model.net[0], model.net[1]
    with torch.no_grad():
        pre = first_linear(x)
    torch.testing.assert_close(first_bn.running_mean, pre.mean(0))
    torch.testing.assert_close(first_bn.running_var, pre.var(0, unbiased=True))
    assert first_bn.momentum == 0.1 and not model.training
    after = model.state_dict()
    assert all(torch.equal(v, after[k]) for k, v in weights.items() if "num_batches" not in k)
    assert recalibrate_batch_norm(MLP("ln"), x) == 0


def test_rerun_of_a_stored_run_agrees_within_tolerance():
    stored = results.round_floats(train_run(RunSpec("rnn", "ln", 32, 3e-3, 0, 1, max_steps=4)))
    fresh = results.rerun(stored)
    check = results.compare_runs(stored, fresh)
    assert check["within_tolerance"] and check["max_acc_diff"] == 0.0
    tampered = json.loads(json.dumps(stored))
    tampered["final"]["test_acc"] += 0.05
    assert not results.compare_runs(tampered, fresh)["within_tolerance"]


@pytest.fixture(scope="module")
def tiny_sweep():
    """One seed, two rates, two optimizer steps per run, every experiment and norm."""
    exps = []
    for exp in experiments.tiny_experiments(max_steps=2):
        sizes = (4, 256) if exp.name == "mlp_batch_size" else exp.batch_sizes
        exps.append(dataclasses.replace(exp, batch_sizes=sizes))
    return exps, experiments.run_sweep(exps, workers=1)


@pytest.fixture(scope="module")
def tiny_document(tiny_sweep):
    exps, sweep = tiny_sweep
    return exps, results.build_results(sweep, exps, seconds=1.0)


def test_tiny_sweep_covers_every_experiment_norm_and_rate(tiny_document):
    exps, doc = tiny_document
    results.validate_results(doc)
    for exp in exps:
        runs = results.find_runs(doc, exp.name, selected=None)
        assert {r["spec"]["norm"] for r in runs} == set(exp.norms)
        assert len(runs) == len(exp.settings()) * len(exp.lr_base)
        assert all(r["steps"] == 2 for r in runs)
        chosen = results.find_runs(doc, exp.name)   # one selected run per setting (1 seed)
        assert len(chosen) == len(exp.settings())
    assert doc["versions"]["torch"] == torch.__version__
    assert doc["seeds"] == [0]


def test_results_file_round_trip_and_validation(tiny_document, tmp_path):
    _, doc = tiny_document
    path = results.save_results(doc, tmp_path / "r.json")
    assert results.load_results(path) == doc
    broken = json.loads(path.read_text())
    del broken["runs"][0]["final"]["test_acc"]
    with pytest.raises(ValueError, match="final lacks"):
        results.validate_results(broken)
    with pytest.raises(ValueError, match="lacks the key"):
        results.validate_results({k: v for k, v in doc.items() if k != "seeds"})
    with pytest.raises(FileNotFoundError, match="python -m layernorm_tutorial.lab.evidence"):
        results.load_results(tmp_path / "missing.json")


def test_save_results_never_replaces_a_file_unless_asked(tiny_document, tmp_path):
    _, doc = tiny_document
    path = tmp_path / "r.json"
    path.write_text("keep me")
    with pytest.raises(FileExistsError, match="overwrite=True"):
        results.save_results(doc, path)
    assert path.read_text() == "keep me"
    results.save_results(doc, path, overwrite=True)
    assert results.load_results(path) == doc
    assert [p.name for p in tmp_path.iterdir()] == ["r.json"]  # no temporary file left
    assert results.DEFAULT_PATH == RESULTS_FILE  # the default is the book's file, protected


def test_round_floats_keeps_five_significant_digits_and_drops_nan():
    assert results.round_floats({"a": [0.123456789, float("nan")], "b": 3}) == \
        {"a": [0.12346, None], "b": 3}


def test_effect_and_classification():
    e = analysis.effect([0.9, 0.91, 0.92], [0.8, 0.81, 0.82])
    assert e.value == pytest.approx(0.1)
    assert e.se == pytest.approx(math.sqrt(2 * 0.01 ** 2 / 3))
    assert analysis.classify(e) == "holds"
    assert analysis.classify(analysis.effect([0.8, 0.81], [0.9, 0.91])) == "reversed"
    assert analysis.classify(analysis.effect([0.9, 0.95], [0.9, 0.94])) == "no clear difference"


def test_steps_to_accuracy_uses_the_first_crossing_and_censors():
    run = {"curve": {"step": [10, 20, 30], "val_acc": [0.5, 0.91, 0.95]}}
    assert analysis.steps_to_accuracy(run) == 20
    assert analysis.steps_to_accuracy(run, threshold=0.99) == math.inf


def test_verdicts_follow_the_numbers():
    def acc(experiment, norm, batch_size, seed):
        base = {"ln": 0.96, "bn": 0.90 if batch_size <= 8 else 0.97, "none": 0.95}.get(norm, 0.95)
        return base + 0.002 * seed

    rows = analysis.verdict_rows(synthetic_results(acc))
    by_setting = {(r["claim"][:2], r["setting"]): r["result"] for r in rows}
    assert by_setting["1.", "MLP, batch 2"] == "holds"
    assert by_setting["1.", "MLP, batch 256"] == "holds"
    assert by_setting["2.", "row-by-row RNN, batch 32"] == "does not hold (reversed)"
    assert by_setting["3.", "CNN, LN over (C,H,W), batch 32"] == "does not hold"
    table = analysis.verdict_markdown(rows)
    assert table.count("\n") == len(rows) + 1 and "{numref}`fig-evidence-batch-size`" in table


def test_committed_results_file_is_complete():
    assert RESULTS_FILE.exists(), (
        f"{RESULTS_FILE} is missing: the evidence chapter renders it; restore it from git or "
        "run python -m layernorm_tutorial.lab.evidence")
    doc = results.load_results(RESULTS_FILE)
    assert RESULTS_FILE.stat().st_size < 200_000
    names = {e["name"] for e in doc["config"]["experiments"]}
    assert names == {exp.name for exp in experiments.EXPERIMENTS}
    for d in doc["selected_lr"]:
        runs = results.find_runs(doc, d["experiment"], d["norm"], d["batch_size"])
        assert [r["spec"]["seed"] for r in runs] == doc["seeds"]
        assert {r["spec"]["lr"] for r in runs} == {d["lr"]}
    assert len(doc["seeds"]) >= 3
    # full runs, not a smoke run's few capped steps
    assert all(r["spec"]["max_steps"] is None for r in doc["runs"])


# ---- the command line: never loses the book's results, refuses bad input up front ----------


@pytest.fixture
def no_sweep(monkeypatch):
    """Make any start of the sweep fail the test: refusals must come before the work."""
    def started(*args, **kwargs):
        raise AssertionError("the sweep started despite a bad argument")

    monkeypatch.setattr(evidence_cli, "run_sweep", started)


@pytest.fixture
def committed_file_untouched():
    before = RESULTS_FILE.stat().st_mtime_ns, RESULTS_FILE.read_bytes()
    yield
    assert (RESULTS_FILE.stat().st_mtime_ns, RESULTS_FILE.read_bytes()) == before


def _refusal(capsys, argv) -> str:
    with pytest.raises(SystemExit) as exit_info:
        evidence_cli.main(argv)
    assert exit_info.value.code == 2  # argparse's usage error
    return capsys.readouterr().err.strip().splitlines()[-1]


def test_full_run_does_not_replace_the_books_results_without_force(
        no_sweep, committed_file_untouched, capsys):
    line = _refusal(capsys, ["--workers", "1"])
    assert str(RESULTS_FILE) in line and "--force" in line


@pytest.mark.parametrize("force", [[], ["--force"]], ids=["plain", "force"])
def test_a_smoke_run_never_writes_the_books_results(no_sweep, committed_file_untouched, capsys,
                                                    force):
    line = _refusal(capsys, ["--tiny", "--out", str(RESULTS_FILE), *force])
    assert "never writes the book's results" in line


def test_a_smoke_run_writes_a_scratch_file_and_says_where(
        tiny_sweep, committed_file_untouched, monkeypatch, capsys, tmp_path):
    _, sweep = tiny_sweep
    monkeypatch.setattr(evidence_cli, "run_sweep", lambda *args, **kwargs: sweep)
    scratch = tmp_path / "scratch" / "tiny.json"
    monkeypatch.setattr(evidence_cli, "TINY_PATH", scratch)
    monkeypatch.chdir(tmp_path)  # a relative default would land in tmp_path/book
    evidence_cli.main(["--tiny", "--workers", "1"])
    evidence_cli.main(["--tiny", "--workers", "1"])  # its own scratch file: replaced freely
    out = capsys.readouterr().out.strip().splitlines()
    assert out[-1].endswith(f"results written to {scratch.resolve()}")
    assert "smoke run" in out[-1]
    results.load_results(scratch)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["scratch"]


def test_an_existing_out_needs_force_and_force_replaces_it(tiny_sweep, monkeypatch, capsys,
                                                         tmp_path):
    existing = tmp_path / "mine.json"
    existing.write_text("keep me")
    monkeypatch.setattr(evidence_cli, "run_sweep", lambda *args, **kwargs: 1 / 0)
    line = _refusal(capsys, ["--out", str(existing), "--workers", "1"])
    assert str(existing) in line and "--force" in line
    assert existing.read_text() == "keep me"
    monkeypatch.setattr(evidence_cli, "run_sweep", lambda *args, **kwargs: tiny_sweep[1])
    evidence_cli.main(["--out", str(existing), "--force", "--workers", "1"])
    assert capsys.readouterr().out.strip().endswith(f"results written to {existing.resolve()}")
    results.load_results(existing)


def test_an_unwritable_out_is_refused_before_the_sweep(no_sweep, capsys, tmp_path):
    blocker = tmp_path / "a_file"
    blocker.write_text("")
    line = _refusal(capsys, ["--out", str(blocker / "x.json"), "--workers", "1"])
    assert str(blocker / "x.json") in line and "not a folder" in line


@pytest.mark.parametrize("workers", ["-3", "0", "two"])
def test_bad_worker_counts_are_usage_errors(no_sweep, capsys, tmp_path, workers):
    line = _refusal(capsys, ["--workers", workers, "--out", str(tmp_path / "x.json")])
    assert "--workers" in line and workers in line


def test_command_line_fails_within_seconds_on_an_unwritable_out(tmp_path):
    blocker = tmp_path / "a_file"
    blocker.write_text("")
    target = blocker / "x.json"
    start = time.monotonic()
    done = subprocess.run([sys.executable, "-m", "layernorm_tutorial.lab.evidence", "--out",
                           str(target), "--workers", "1"], capture_output=True, text=True,
                          timeout=120, cwd=tmp_path, env={**os.environ, "OMP_NUM_THREADS": "1"})
    assert done.returncode == 2, done.stderr
    assert str(target) in done.stderr.strip().splitlines()[-1]
    assert "Traceback" not in done.stderr and done.stdout == ""
    assert time.monotonic() - start < 60  # the sweep itself takes hours
