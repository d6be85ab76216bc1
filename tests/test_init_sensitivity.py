"""The ensemble trainer reproduces train_classifier member by member; the sweep's bookkeeping."""

import copy
import math

import numpy as np
import pytest
import torch

from layernorm_tutorial.lab.common.training import (
    DigitsData,
    load_digits_split,
    make_mlp,
    train_classifier,
)
from layernorm_tutorial.lab.principles import init_sensitivity as isens


@pytest.fixture(scope="module")
def small_digits():
    """A float64 subset of the digits: 200 training and 100 test images."""
    d = load_digits_split(seed=0)
    return DigitsData(d.x_train[:200].double(), d.y_train[:200], d.x_test[:100].double(),
                      d.y_test[:100])


def test_member_follows_train_classifier(small_digits):
    # mixed members: with and without LayerNorm, two seeds, two learning rates
    specs = [(False, 0, 0.05), (True, 1, 0.02), (True, 0, 0.1), (False, 1, 0.02)]
    models = [make_mlp(3, 16, layer_norm=ln, seed=s, he_init=True).double()
              for ln, s, _ in specs]
    ensemble = isens.MLPEnsemble.from_models(models)
    results = isens.train_ensemble(ensemble, small_digits, epochs=3, batch_size=32,
                                   lrs=[lr for *_, lr in specs], seeds=[s for _, s, _ in specs])
    for m, (_, seed, lr) in enumerate(specs):
        alone = copy.deepcopy(models[m])
        expected = train_classifier(alone, small_digits, epochs=3, batch_size=32, lr=lr,
                                    seed=seed)
        np.testing.assert_allclose(results[m].train_loss, expected.train_loss, rtol=1e-10)
        np.testing.assert_allclose(results[m].test_loss, expected.test_loss, rtol=1e-10)
        assert results[m].test_accuracy == expected.test_accuracy
        for ours, theirs in zip(ensemble.member_parameters(m), alone.parameters(), strict=True):
            torch.testing.assert_close(ours, theirs, rtol=1e-9, atol=1e-12)


def test_diverging_member_stops_and_does_not_disturb_others(small_digits):
    models = [isens.scaled_he_mlp(6, 16, scale=s, layer_norm=False, seed=0) for s in (1.0, 8.0)]
    for model in models:
        model.double()
    results = isens.train_ensemble(isens.MLPEnsemble.from_models(models), small_digits,
                                   epochs=4, lrs=[0.05, 1e3], seeds=[0, 0])
    assert len(results[1].train_loss) < 4 and not math.isfinite(results[1].train_loss[-1])
    alone = isens.train_ensemble(isens.MLPEnsemble.from_models(models[:1]), small_digits,
                                 epochs=4, lrs=[0.05], seeds=[0])
    assert results[0].train_loss == alone[0].train_loss


def test_scaled_he_mlp_weights_and_global_rng():
    torch.manual_seed(123)
    state = torch.get_rng_state()
    small = isens.scaled_he_mlp(4, 256, scale=0.5, layer_norm=False, seed=3)
    large = isens.scaled_he_mlp(4, 256, scale=2.0, layer_norm=True, seed=3)
    assert torch.equal(torch.get_rng_state(), state)          # caller's RNG untouched
    small_linears = [m for m in small if isinstance(m, torch.nn.Linear)]
    large_linears = [m for m in large if isinstance(m, torch.nn.Linear)]
    for a, b in zip(small_linears[:-1], large_linears[:-1], strict=True):
        torch.testing.assert_close(4 * a.weight, b.weight)   # same directions, scale 4x
        assert a.bias.abs().max() == 0
    torch.testing.assert_close(small_linears[-1].weight, large_linears[-1].weight)
    std = small_linears[1].weight.std().item()
    assert abs(std / (0.5 * math.sqrt(2 / 256)) - 1) < 0.02
    with pytest.raises(ValueError, match="scale"):
        isens.scaled_he_mlp(2, scale=0.0, layer_norm=True)


def test_layer_norm_nets_start_identical_across_scales():
    x = torch.randn(5, 64, dtype=torch.float64)
    logits = []
    for scale in (0.25, 1.0, 4.0):
        model = isens.scaled_he_mlp(6, 32, scale=scale, layer_norm=True, seed=1).double()
        logits.append(isens.MLPEnsemble.from_models([model])(x[None])[0])
    # identical up to eps: the relative effect is about eps / var(h), 1e-5 / 0.125 at scale 0.25
    torch.testing.assert_close(logits[0], logits[1], rtol=1e-3, atol=1e-4)
    torch.testing.assert_close(logits[2], logits[1], rtol=1e-5, atol=1e-6)
    assert not torch.allclose(logits[0], logits[1], rtol=1e-9, atol=1e-12)  # eps is visible


def test_bad_arguments(small_digits):
    with pytest.raises(ValueError, match="same layer sizes"):
        isens.MLPEnsemble.from_models([make_mlp(2, 8, layer_norm=False),
                                       make_mlp(3, 8, layer_norm=False)])
    with pytest.raises(ValueError, match="at least one"):
        isens.MLPEnsemble.from_models([])
    with pytest.raises(ValueError, match="ReLU"):
        isens.MLPEnsemble.from_models([torch.nn.Sequential(torch.nn.Linear(4, 4),
                                                           torch.nn.Tanh(),
                                                           torch.nn.Linear(4, 2))])
    ensemble = isens.MLPEnsemble.from_models([make_mlp(2, 8, layer_norm=False)])
    with pytest.raises(ValueError, match="one lr and one seed"):
        isens.train_ensemble(ensemble, small_digits, epochs=1, lrs=[0.1, 0.1], seeds=[0])
    with pytest.raises(ValueError, match="lr > 0"):
        isens.train_ensemble(ensemble, small_digits, epochs=1, lrs=[0.0], seeds=[0])


def test_sweep_shapes_and_spread(small_digits):
    data = DigitsData(*(t.float() if t.is_floating_point() else t for t in (
        small_digits.x_train, small_digits.y_train, small_digits.x_test, small_digits.y_test)))
    sweep = isens.init_scale_sweep(data, scales=(0.5, 1.0), lrs=(0.05,), seeds=(0, 1, 2),
                                   depth=2, width=16, epochs=2)
    assert sweep.accuracy.shape == (2, 1, 2, 3) == sweep.train_loss.shape
    assert ((sweep.accuracy >= 0) & (sweep.accuracy <= 1)).all()
    spread = sweep.spread(layer_norm=True, lr=0.05)
    np.testing.assert_allclose(spread["mean"], sweep.accuracy[1, 0].mean(-1))
    assert (spread["min"] <= spread["mean"]).all() and (spread["mean"] <= spread["max"]).all()
    with pytest.raises(ValueError):
        isens.init_scale_sweep(data, scales=(), lrs=(0.05,), seeds=(0,))


# --- LayerNorm against He init, by the verdict method (lab.principles.ln_vs_he) -------------

from layernorm_tutorial.lab.common import claims, numerics_paths  # noqa: E402
from layernorm_tutorial.lab.common.stored_results import load_results  # noqa: E402
from layernorm_tutorial.lab.common.verdict import WORDS  # noqa: E402
from layernorm_tutorial.lab.principles import ln_vs_he  # noqa: E402
from layernorm_tutorial.lab.principles.__main__ import main as ln_vs_he_main  # noqa: E402


def test_learning_rate_is_chosen_on_tuning_seeds_only(monkeypatch):
    calls = []

    def fake_run_seed(seed, runs, depth, epochs, data=None):
        calls.append((seed, tuple(runs)))
        # tuning seeds are scored on validation images, reported seeds on their own test set
        assert (data is not None) == (seed < 2)
        # tuning seeds (0, 1) favour lr 0.01 for LN and 0.05 for He; reported seeds would
        # favour the opposite, so a leak of reported seeds into the choice would show
        best = {"default init + LayerNorm": 0.01, "He init": 0.05}
        if seed >= 2:
            best = {"default init + LayerNorm": 0.05, "He init": 0.01}
        return [0.9 if lr == best[arm] else 0.5 + 0.01 * seed for arm, lr in runs]

    monkeypatch.setattr(ln_vs_he, "_run_seed", fake_run_seed)
    result = ln_vs_he.run_comparison(lr_grid=(0.01, 0.05), depth=2, epochs=1)
    assert result["tuning_seeds"] == [0, 1] and result["reported_seeds"] == [2, 3, 4, 5, 6]
    assert result["lr"] == {"default init + LayerNorm": 0.01, "He init": 0.05}
    assert [seed for seed, _ in calls] == [0, 1, 2, 3, 4, 5, 6]
    reported_runs = {runs for seed, runs in calls if seed >= 2}
    assert reported_runs == {(("default init + LayerNorm", 0.01), ("He init", 0.05))}
    # on reported seed s: LN at 0.01 is not its best there (0.5 + 0.01 s), He at 0.05 neither
    assert result["accuracy"]["He init"] == pytest.approx([0.52, 0.53, 0.54, 0.55, 0.56])


def test_verdict_from_document_uses_the_stored_threshold_and_pairs():
    doc = {"arms": list(ln_vs_he.ARMS), "threshold": 0.01,
           "accuracy": {"default init + LayerNorm": [0.95, 0.96, 0.94, 0.97, 0.95],
                        "He init": [0.90, 0.90, 0.91, 0.90, 0.92]}}
    assert ln_vs_he.verdict_from_document(doc).word == "holds"
    doc["accuracy"] = {"default init + LayerNorm": doc["accuracy"]["He init"],
                       "He init": doc["accuracy"]["default init + LayerNorm"]}
    assert ln_vs_he.verdict_from_document(doc).word == "contradicted"
    doc["accuracy"]["default init + LayerNorm"] = [0.95, 0.96, 0.94, 0.97, 0.95]
    doc["accuracy"]["He init"] = [0.951, 0.958, 0.941, 0.969, 0.951]   # within 1 point
    assert ln_vs_he.verdict_from_document(doc).word == "too small to matter"
    doc["accuracy"]["He init"] = [0.90, 0.99, 0.91, 0.99, 0.95]         # wide, both ways
    assert ln_vs_he.verdict_from_document(doc).word == "not shown"
    assert ln_vs_he.verdict_from_document(doc).claim_id == ln_vs_he.CLAIM_ID


def test_command_writes_provenance_and_never_replaces_without_force(tmp_path, capsys):
    out = tmp_path / "ln_vs_he.json"
    ln_vs_he_main(["--tiny", "--out", str(out)])
    doc = __import__("json").loads(out.read_text())
    assert doc["command"] == ln_vs_he.COMMAND and doc["threshold"] == ln_vs_he.THRESHOLD
    assert set(doc["versions"]) >= {"torch", "numpy", "layernorm_tutorial"}
    assert len(doc["accuracy"]["He init"]) == 5
    before = out.read_text()
    with pytest.raises(SystemExit):
        ln_vs_he_main(["--tiny", "--out", str(out)])
    assert "--force" in capsys.readouterr().err and out.read_text() == before
    with pytest.raises(SystemExit):
        ln_vs_he_main(["--tiny"])                  # a smoke run never writes the book's file


def test_committed_results_match_the_code_that_makes_them():
    doc = load_results(ln_vs_he.COMMITTED_PATH)
    assert doc["command"] == ln_vs_he.COMMAND
    assert doc["threshold"] == ln_vs_he.THRESHOLD and doc["arms"] == list(ln_vs_he.ARMS)
    assert doc["lr_grid"] == list(ln_vs_he.LR_GRID) == doc["config"]["lr_grid"]
    assert doc["tuning_seeds"] == [0, 1] and doc["reported_seeds"] == [2, 3, 4, 5, 6]
    for arm in doc["arms"]:   # the stored choice is the argmax of the validation accuracy
        best = doc["lr_grid"][int(np.argmax(doc["validation_accuracy"][arm]))]
        assert doc["lr"][arm] == best
    assert doc["validation_images"] == len(ln_vs_he.tuning_split(0, doc["reported_seeds"]).y_test)
    verdict = ln_vs_he.verdict_from_document(doc)
    assert verdict.n == 5 and verdict.word in WORDS
    assert doc["claims"] == {ln_vs_he.CLAIM_ID: claims.definition_hash(ln_vs_he.CLAIM_ID)}
    assert "machine" in doc and doc["machine"]["cpu_capability"]


def test_tuning_split_is_disjoint_from_every_reported_test_set():
    reported = (2, 3, 4, 5, 6)
    x, y = ln_vs_he._digits_tensors()
    reported_test = set()
    for s in reported:
        data = load_digits_split(seed=s)
        train, test = ln_vs_he.split_indices(s)
        assert torch.equal(data.x_test, x[test]) and torch.equal(data.y_train, y[train])
        reported_test |= set(test.tolist())
    split = ln_vs_he.tuning_split(0, reported)
    validation = set(range(len(y))) - reported_test
    assert len(split.y_test) == len(validation) > 300
    assert len(split.y_train) == len(load_digits_split(seed=0).y_train)
    # the validation images are exactly those in no reported test set, in index order
    assert torch.equal(split.x_test, x[sorted(validation)])
    other = ln_vs_he.tuning_split(1, reported)
    assert torch.equal(other.x_test, split.x_test) and not torch.equal(other.x_train,
                                                                       split.x_train)
    with pytest.raises(ValueError, match="reported_seeds"):
        ln_vs_he.tuning_split(0, range(2, 40))   # no image left for validation


def test_replication_is_judged_with_the_registered_claim():
    doc = {"arms": list(ln_vs_he.ARMS), "threshold": 0.01, "lr": {"a": 0.01},
           "lr_grid": [0.001, 0.01, 0.1], "tuning_seeds": [0, 1],
           "reported_seeds": [2, 3, 4, 5, 6], "validation_images": 419,
           "validation_accuracy": {a: [0.5, 0.9, 0.4] for a in ln_vs_he.ARMS},
           "accuracy": {"default init + LayerNorm": [0.95, 0.96, 0.94, 0.97, 0.95],
                        "He init": [0.90, 0.90, 0.91, 0.90, 0.92]}}
    same = {"numerics_path": "avx2", "original": {"lr": doc["lr"], "accuracy": doc["accuracy"]},
            "accuracy": {"default init + LayerNorm": [0.95, 0.95, 0.94, 0.97, 0.96],
                         "He init": [0.90, 0.91, 0.91, 0.90, 0.92]}}
    rep = ln_vs_he.replication_from_documents(doc, same)
    assert rep.same_word and rep.effect_inside and rep.holds_up
    flipped = {**same, "accuracy": {"default init + LayerNorm": [0.91, 0.93, 0.94, 0.90, 0.93],
                                    "He init": [0.90, 0.91, 0.91, 0.90, 0.92]}}
    rep = ln_vs_he.replication_from_documents(doc, flipped)
    assert not rep.same_word and not rep.holds_up
    assert "path avx2" in rep.text()
    with pytest.raises(ValueError, match="replicate --force"):
        ln_vs_he.replication_from_documents({**doc, "lr": {"a": 0.02}}, same)


def test_stored_comparison_shows_the_verdict_within_80_columns():
    doc = load_results(ln_vs_he.COMMITTED_PATH)
    shown = ln_vs_he.StoredComparison(doc, load_results(ln_vs_he.REPLICATION_PATH))
    assert max(len(line) for line in shown.table().splitlines()) <= 80
    assert shown.verdict.word in shown.table() and "registered" in shown.table()
    # the registry's disclosure: the threshold was committed with earlier data
    assert "disclosed: " in shown.table() and "ca7ff54" in ln_vs_he.disclosure()
    values = shown.glue_values()
    assert values["lnhe_verdict"].endswith(shown.verdict.text(1, 100, " pts"))
    assert values["lnhe_rep_verdict"] == shown.replication.replicated.text(1, 100, " pts")
    assert "establish" in shown.conclusion() or "on both numerics paths" in shown.conclusion()
    assert shown.replication.original.word == shown.verdict.word


def test_committed_replication_re_ran_the_committed_results():
    doc = load_results(ln_vs_he.COMMITTED_PATH)
    rep = load_results(ln_vs_he.REPLICATION_PATH)
    assert rep["command"] == ln_vs_he.REPLICATION_COMMAND
    assert rep["original"] == {"lr": doc["lr"], "accuracy": doc["accuracy"]}
    env = numerics_paths.PATHS[rep["numerics_path"]]
    assert rep["path_machine"]["environment"] == env and env   # a path other than native


def test_stored_comparison_with_a_confirmatory_run_makes_its_verdict_the_chapters():
    doc = load_results(ln_vs_he.COMMITTED_PATH)
    rep = load_results(ln_vs_he.REPLICATION_PATH)
    conf = load_results(ln_vs_he.BOOK_DATA / "principles_ln_vs_he_confirmatory.json")
    shown = ln_vs_he.StoredComparison(doc, rep, conf)
    fresh = ln_vs_he.verdict_from_document(conf)
    assert shown.chapter_verdict() == fresh
    values = shown.glue_values()
    assert values["lnhe_verdict"].endswith(fresh.text(1, 100, " pts"))
    assert values["lnhe_word"] == fresh.word
    assert values["lnhe_stored_verdict"] == "exploratory, " + shown.verdict.text(1, 100, " pts")
    assert values["lnhe_conf_tuning_seeds"] == "99, 100"
    table = shown.confirmatory_table()
    assert max(len(line) for line in table.splitlines()) <= 80
    assert "confirmatory: " in table and "earlier run:  exploratory, " in table
    assert "registered first" in table.replace("\n  ", " ")
    # the stored run's table no longer calls its verdict the chapter's
    assert "verdict: exploratory, " in shown.table()
    # an arm whose chosen rate is an end of the grid is named
    assert ln_vs_he.edge_rates(conf) == {
        a: conf["lr"][a] for a in conf["arms"]
        if conf["lr"][a] in (conf["lr_grid"][0], conf["lr_grid"][-1])}
    for arm in ln_vs_he.edge_rates(conf):
        assert f"{arm}: the chosen rate" in table
    with pytest.raises(ValueError, match="confirmatory results file"):
        ln_vs_he.StoredComparison(doc, rep, doc)
    with pytest.raises(ValueError, match="no confirmatory run"):
        ln_vs_he.StoredComparison(doc, rep).confirmatory_table()
