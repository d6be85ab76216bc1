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
from layernorm_tutorial.lab.common.verdict import paired_verdict
from layernorm_tutorial.lab.evidence import __main__ as evidence_cli
from layernorm_tutorial.lab.evidence import analysis, experiments, results, runner
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


def _rows(x):
    return {tuple(row) for row in x.tolist()}


def test_each_seed_draws_its_own_split_and_the_test_set_is_shared():
    data = load_evidence_data()
    assert data.sizes() == {"train": 1078, "val": 270, "test": 449}
    assert sum(data.sizes().values()) == 1797
    assert load_evidence_data() is data and load_evidence_data(3) is load_evidence_data(3)
    torch.testing.assert_close(load_evidence_data(0).x_val, data.x_val)   # default: seed 0
    assert float(data.x_train.min()) >= 0.0 and float(data.x_train.max()) <= 1.0
    other = load_evidence_data(3)
    assert other.sizes() == data.sizes()
    torch.testing.assert_close(other.x_test, data.x_test)           # one test set, book-wide
    assert not torch.equal(other.y_val, data.y_val)                 # a different validation set
    # the same 1,348 non-test images, split differently
    assert _rows(torch.cat([other.x_train, other.x_val])) == \
        _rows(torch.cat([data.x_train, data.x_val]))
    with pytest.raises(ValueError, match="seed must be a non-negative int"):
        load_evidence_data(-1)


def test_a_run_uses_the_split_of_its_own_seed():
    spec = RunSpec("mlp", "ln", 32, 1e-2, 2, epochs=1, max_steps=3)
    assert train_run(spec) == train_run(spec, load_evidence_data(2))
    assert train_run(spec) != train_run(spec, load_evidence_data(0))


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


def test_the_ladder_alternates_one_and_three_per_decade():
    assert [experiments.ladder_rate(i) for i in range(-2, 7)] == \
        [1e-4, 3e-4, 1e-3, 3e-3, 1e-2, 3e-2, 0.1, 0.3, 1.0]
    assert experiments.ladder_rate(2, 128) == 0.02
    assert experiments.LR_GRID == (1e-3, 3e-3, 1e-2)


def test_seeds_follow_the_verdict_method():
    assert len(experiments.REPORTED_SEEDS) >= 5
    assert not set(experiments.TUNING_SEEDS) & set(experiments.REPORTED_SEEDS)
    for exp in experiments.EXPERIMENTS:
        assert exp.tuning_seeds == experiments.TUNING_SEEDS
        assert exp.reported_seeds == experiments.REPORTED_SEEDS
    assert all(r.seeds == experiments.REPORTED_SEEDS for r in experiments.RATE_RANGES)


def test_lr_grid_scales_with_the_square_root_of_the_batch():
    assert experiments.lr_grid(32) == experiments.LR_GRID
    assert experiments.lr_grid(128) == pytest.approx([2 * lr for lr in experiments.LR_GRID],
                                                     rel=1e-2)
    assert experiments.lr_grid(8) == pytest.approx([lr / 2 for lr in experiments.LR_GRID],
                                                   rel=1e-2)


def test_extend_rungs_steps_beyond_the_winning_edge_only():
    assert experiments.extend_rungs((0, 1, 2), 2) == 3
    assert experiments.extend_rungs((0, 1, 2), 0) == -1
    assert experiments.extend_rungs((0, 1, 2), 1) is None
    assert experiments.extend_rungs((0,), 0) is None


def test_sweep_tunes_on_tuning_seeds_and_reports_the_others():
    rnn = next(e for e in experiments.EXPERIMENTS if e.name == "rnn")
    exp = dataclasses.replace(rnn, norms=("ln",), tuning_seeds=(0,), reported_seeds=(1, 2),
                              rungs=(0, 1), epochs=1, max_steps=2, grid_extensions=1)
    sweep = experiments.run_sweep([exp], rate_ranges=())
    tuning = [r for r in sweep["runs"] if r["role"] == "tuning"]
    reported = [r for r in sweep["runs"] if r["role"] == "reported"]
    lrs = sorted(r["spec"]["lr"] for r in tuning)
    # with two rates the winner is always at an edge, so exactly one rate is added beyond it
    assert len(lrs) == 3 and (lrs[0] < 1e-3 or lrs[-1] > 3e-3)
    assert {r["spec"]["seed"] for r in tuning} == {0}
    assert sorted(r["spec"]["seed"] for r in reported) == [1, 2]
    chosen = sweep["selected_lr"][0]["lr"]
    assert chosen in lrs and {r["spec"]["lr"] for r in reported} == {chosen}
    assert sweep["selected_lr"][0]["rates_tried"] == lrs
    assert sweep["range_runs"] == []


def test_rate_range_extends_upwards_until_every_run_fails():
    rr = dataclasses.replace(experiments.RATE_RANGES[0], norms=("none",), rungs=(0,),
                             seeds=(1,), epochs=1, max_steps=2, extensions=2)
    sweep = experiments.run_sweep([], rate_ranges=(rr,))
    rungs = [r["rung"] for r in sweep["range_runs"]]
    # two steps at rate 1e-3 do not fail, so the ladder grows; it stops at the cap or a failure
    assert rungs[0] == 0 and rungs == list(range(len(rungs))) and 2 <= len(rungs) <= 3
    failed = [runner.run_failed(r) for r in sweep["range_runs"]]
    assert not failed[0] and (failed[-1] or len(rungs) == 3)
    assert all(not f for f in failed[1:-1])


def _fake(lr, val_acc, val_loss):
    return {"spec": {"lr": lr}, "final": {"val_acc": val_acc, "val_loss": val_loss}}


def test_select_lr_averages_over_the_tuning_seeds():
    records = [_fake(1e-3, 0.99, 0.1), _fake(1e-3, 0.80, 0.1),   # mean 0.895
               _fake(3e-3, 0.93, 0.1), _fake(3e-3, 0.92, 0.1)]   # mean 0.925
    assert experiments.select_lr(records) == 3e-3


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
    # two test images apart after both records were rounded to five digits: still accepted
    edge = json.loads(json.dumps(fresh))
    edge["final"]["test_acc"] = float(f"{fresh['final']['test_acc'] + 2 / 449 + 5e-6:.5g}")
    assert results.compare_runs(edge, fresh)["within_tolerance"]


@pytest.fixture(scope="module")
def tiny_sweep():
    """One seed, two rates, two optimizer steps per run, every experiment and norm."""
    exps = []
    for exp in experiments.tiny_experiments(max_steps=2):
        sizes = (4, 256) if exp.name == "mlp_batch_size" else exp.batch_sizes
        exps.append(dataclasses.replace(exp, batch_sizes=sizes))
    ranges = experiments.tiny_rate_ranges(max_steps=2)
    return exps, experiments.run_sweep(exps, workers=1, rate_ranges=ranges)


@pytest.fixture(scope="module")
def tiny_document(tiny_sweep):
    exps, sweep = tiny_sweep
    return exps, results.build_results(sweep, exps, seconds=1.0,
                                       rate_ranges=experiments.tiny_rate_ranges(max_steps=2))


def test_tiny_sweep_covers_every_experiment_norm_and_rate(tiny_document):
    exps, doc = tiny_document
    results.validate_results(doc)
    for exp in exps:
        runs = results.find_runs(doc, exp.name, selected=None, role=None)
        assert {r["spec"]["norm"] for r in runs} == {n for n, _ in exp.settings()}
        n_tuning = len(exp.settings()) * len(exp.rungs) * len(exp.tuning_seeds)
        assert len(runs) == n_tuning + len(exp.settings()) * len(exp.reported_seeds)
        assert all(r["steps"] == 2 for r in runs)
        chosen = results.find_runs(doc, exp.name)   # the reported runs, one seed per setting
        assert len(chosen) == len(exp.settings())
        assert {r["spec"]["seed"] for r in chosen} == set(exp.reported_seeds)
    for rr in experiments.tiny_rate_ranges(max_steps=2):
        runs = results.find_runs(doc, rr.name)
        assert len(runs) == len(rr.norms) * len(rr.rungs) * len(rr.seeds)
    assert doc["versions"]["torch"] == torch.__version__
    assert doc["seeds"] == [1] and doc["tuning_seeds"] == [0]


def test_results_file_round_trip_and_validation(tiny_document, tmp_path):
    _, doc = tiny_document
    path = results.save_results(doc, tmp_path / "r.json")
    assert results.load_results(path) == doc
    broken = json.loads(path.read_text())
    del broken["runs"][0]["final"]["test_acc"]
    with pytest.raises(ValueError, match="final lacks"):
        results.validate_results(broken)
    overlapping = json.loads(path.read_text())
    overlapping["seeds"] = overlapping["tuning_seeds"]
    with pytest.raises(ValueError, match="disjoint"):
        results.validate_results(overlapping)
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


def test_judge_pairs_the_two_arms_by_seed():
    def acc(experiment, norm, batch_size, seed):
        return 0.9 + (0.02 * seed if norm == "ln" else 0.0) + 0.01 * seed

    doc = synthetic_results(acc)
    v = analysis.judge(doc, "rnn", "ln", "bn", 32)
    d = [0.02 * s for s in experiments.REPORTED_SEEDS]
    expected = paired_verdict([0.9 + x for x in d], [0.9] * len(d), threshold=0.01)
    assert (v.effect, v.low, v.high, v.word) == pytest.approx(
        (expected.effect, expected.low, expected.high, expected.word))
    assert v.n == len(experiments.REPORTED_SEEDS)
    broken = json.loads(json.dumps(doc))
    broken["runs"] = [r for r in broken["runs"] if not (
        r["experiment"] == "rnn" and r["spec"]["norm"] == "bn" and r["spec"]["seed"] == 1)]
    with pytest.raises(ValueError, match="share their seeds"):
        analysis.judge(broken, "rnn", "ln", "bn", 32)


def test_thresholds_are_fixed_constants():
    assert analysis.ACCURACY_THRESHOLD == 0.01 and analysis.RATE_THRESHOLD == 1.0
    assert set(analysis.THRESHOLDS.values()) >= {analysis.ACCURACY_THRESHOLD,
                                                  analysis.RATE_THRESHOLD}


def test_steps_to_accuracy_uses_the_first_crossing_and_censors():
    run = {"curve": {"step": [10, 20, 30], "val_acc": [0.5, 0.91, 0.95]}, "steps": 30}
    assert analysis.steps_to_accuracy(run) == 20
    assert analysis.steps_to_accuracy(run, threshold=0.99) == math.inf
    assert analysis.steps_to_90(run) == 20
    never = {"curve": {"step": [10, 20, 30], "val_acc": [0.5, 0.6, 0.7]}, "steps": 30}
    assert analysis.steps_to_90(never) == 40   # the budget plus one logging interval


def test_verdicts_follow_the_numbers():
    def acc(experiment, norm, batch_size, seed):
        base = {"ln": 0.96, "bn": 0.90 if batch_size <= 8 else 0.97, "none": 0.95}.get(norm, 0.95)
        return base + 0.002 * seed

    def noisy(experiment, norm, batch_size, seed, size=0.05):  # a tie with seed noise
        return 0.95 + size * ((seed * (3 if norm == "bn" else 7)) % 5) / 5

    def small(experiment, norm, batch_size, seed):   # a tie with tiny noise: equivalence
        return noisy(experiment, norm, batch_size, seed, size=0.01)

    rows = analysis.verdict_rows(synthetic_results(acc))
    by_setting = {(r["claim"][:2], r["setting"]): r for r in rows}
    assert by_setting["1.", "MLP, batch 2"]["word"] == "holds"
    assert by_setting["1.", "MLP, batch 256"]["word"] == "holds"
    assert {"MLP, batch 16", "MLP, batch 32", "MLP, batch 64"} <= {s for _, s in by_setting}
    assert by_setting["2.", "row-by-row RNN, batch 32"]["word"] == "contradicted"
    ln_converges = next(r for r in rows if r["claim"] == "3. CNN: LN does not converge")
    assert ln_converges["word"] == "contradicted"   # synthetic LN fits 98-99 % of its training set
    # the interval always sits next to the word (a ladder row: the bounds of the rate ratio)
    assert all(r["result"].startswith(r["word"] + ": ")
               and ("[" in r["result"] or "ratio in (" in r["result"]) for r in rows)
    assert by_setting["1.", "MLP, batch 2"]["result"] == "holds: +6.0 pts [+6.0, +6.0], n = 5"
    table = analysis.verdict_markdown(rows)
    assert table.count("\n") == len(rows) + 1 and "{numref}`fig-evidence-batch-size`" in table
    noise = analysis.verdict_rows(synthetic_results(noisy))
    assert {r["word"] for r in noise if r["claim"].startswith(("1.", "2."))} == {"not shown"}
    tiny = analysis.verdict_rows(synthetic_results(small))
    assert {r["word"] for r in tiny if r["claim"].startswith(("1.", "2."))} == {
        "too small to matter"}


def test_rate_ranges_find_the_largest_good_rate_and_the_failure_rate():
    doc = synthetic_results()   # none fails above 0.01, LN above 0.1, BN above 0.3
    ln = analysis.rate_range(doc, "lr_range_mlp", "ln")
    assert ln.largest_good.tolist() == [0.1] * 5 and ln.failure.tolist() == [0.3] * 5
    none = analysis.rate_range(doc, "lr_range_mlp", "none")
    assert none.largest_good.tolist() == [0.01] * 5 and none.failure.tolist() == [0.03] * 5
    rows = {(r["claim"], r["setting"]): r for r in analysis.rate_rows(doc)}
    key = ("5. LN allows larger learning rates (vs none)",
           "MLP, batch 32: ratio of the largest rate within 1 pt of the best")
    v = rows[key]["verdict"]
    # LN's largest good rate lies in [0.1, 0.3), none's in [0.01, 0.03): ratio in (10/3, 30)
    assert v.median_low == pytest.approx(math.log2(0.1 / 0.03))
    assert v.median_high == pytest.approx(math.log2(0.3 / 0.01))
    # every seed agrees, but five seeds cannot decide a ladder (sign test p >= 0.0625)
    assert rows[key]["word"] == "not shown" and v.p == pytest.approx(0.0625)
    assert rows[key]["result"].startswith("not shown: ratio in (3.3, 30)")
    bounds = analysis.rate_bounds(ln, "failure")
    assert bounds.tolist() == [[0.1, 0.3]] * 5

    def dip(experiment, norm, lr, seed):   # 0.5 pt below the best is still "good"
        best = 0.95 if lr == 0.001 else 0.945
        return best if lr <= 0.1 else 0.1

    doc = synthetic_results(range_acc=dip)
    assert analysis.rate_range(doc, "lr_range_rnn", "bn").largest_good.tolist() == [0.1] * 5

    def never_fails(experiment, norm, lr, seed):
        return 0.95

    censored = analysis.rate_range(synthetic_results(range_acc=never_fails), "lr_range_mlp",
                                   "ln")
    top = max(censored.rates)
    # no run failed: the failure rate is only known to lie above the top of the ladder
    assert analysis.rate_bounds(censored, "failure").tolist() == [[top, math.inf]] * 5
    with pytest.raises(ValueError, match="field"):
        analysis.rate_bounds(censored, "best")


def test_per_class_verdicts_pair_each_digit_by_seed():
    def acc(experiment, norm, batch_size, seed):
        return 0.9 + (0.05 if norm == "bn" else 0.0) + 0.001 * seed

    verdicts = analysis.per_class_verdicts(synthetic_results(acc), "mlp_batch_size", "bn",
                                           "ln", 256)
    assert len(verdicts) == 10 and all(v.word == "holds" for v in verdicts)
    assert verdicts[3].effect == pytest.approx(0.05)
    with pytest.raises(ValueError, match="split"):
        analysis.per_class_verdicts(synthetic_results(acc), "mlp_batch_size", "bn", "ln", 256,
                                    split="train")


def test_committed_results_file_is_complete():
    assert RESULTS_FILE.exists(), (
        f"{RESULTS_FILE} is missing: the evidence chapter renders it; restore it from git or "
        "run python -m layernorm_tutorial.lab.evidence")
    doc = results.load_results(RESULTS_FILE)
    assert RESULTS_FILE.stat().st_size < 1_000_000
    names = {e["name"] for e in doc["config"]["experiments"]}
    assert names == {exp.name for exp in experiments.EXPERIMENTS}
    assert {r["name"] for r in doc["config"]["rate_ranges"]} == \
        {r.name for r in experiments.RATE_RANGES}
    assert len(doc["seeds"]) >= 5 and not set(doc["tuning_seeds"]) & set(doc["seeds"])
    for d in doc["selected_lr"]:
        runs = results.find_runs(doc, d["experiment"], d["norm"], d["batch_size"])
        assert [r["spec"]["seed"] for r in runs] == doc["seeds"]
        assert {r["spec"]["lr"] for r in runs} == {d["lr"]}
        tuning = results.find_runs(doc, d["experiment"], d["norm"], d["batch_size"],
                                   selected=None, role="tuning")
        # the rate was chosen on the tuning seeds only, among the rates tried there
        assert {r["spec"]["seed"] for r in tuning} == set(doc["tuning_seeds"])
        assert sorted({r["spec"]["lr"] for r in tuning}) == d["rates_tried"]
        assert experiments.select_lr(tuning) == d["lr"]
    for rr in doc["config"]["rate_ranges"]:
        for norm in rr["norms"]:   # the grid reaches past every seed's failure
            top = max(r["spec"]["lr"] for r in results.find_runs(doc, rr["name"], norm))
            at_top = [r for r in results.find_runs(doc, rr["name"], norm)
                      if r["spec"]["lr"] == top]
            assert len(at_top) == len(doc["seeds"]) and all(map(runner.run_failed, at_top))
    # full runs, not a smoke run's few capped steps
    assert all(r["spec"]["max_steps"] is None for r in doc["runs"] + doc["range_runs"])


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
