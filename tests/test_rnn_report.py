"""The RNN chapter's bookkeeping (lab.rnn.report and lab.rnn.paths): tables within 80
columns, the values the prose quotes, chaotic settings read from the measurement, the live
check's tolerance rule and the replication table."""

import numpy as np
import pytest

from layernorm_tutorial.lab.common import stored_results
from layernorm_tutorial.lab.rnn import experiments, paths, race, report


def _run(rms_last=1.0, grads=(8.0, 4.0, 2.0), sat=0.01):
    steps = 150
    return {"state_rms": np.linspace(1.0, rms_last, steps),
            "grad_norm": np.geomspace(grads[0], grads[-1], steps),
            "saturation": np.full(steps, sat)}


def test_per_step_factor_is_the_geometric_mean_growth():
    g = 2.0 ** np.arange(11)[::-1]  # doubles per step going back from the loss
    assert report.per_step_factor(g) == pytest.approx(2.0)


def test_dynamics_rows_print_every_setting_but_the_chaotic_ones_within_80_columns():
    runs = {(f, ln, s): _run() for f in ("identity", "tanh") for ln in (False, True)
            for s in report.SCALES}
    skip = {report.setting_key("impulse", "tanh", False, 3.0)}
    text = report.dynamics_rows(runs, skip=skip)
    assert max(len(line) for line in text.splitlines()) <= 80
    assert text.count("chaotic: see below") == 1 and len(text.splitlines()) == 9
    grads = report.gradient_rows({("impulse", False, 3.0): _run(), ("noise", True, 0.5):
                                  _run()}, skip=skip)
    assert grads.count("chaotic: see below") == 2  # gradient and saturation lines
    assert max(len(line) for line in grads.splitlines()) <= 80


def test_chaotic_settings_are_those_whose_values_differ_between_paths():
    doc = {"dynamics": {"spread": {"a": 0.0, "b": 3e-3, "c": 1e-9}}}
    assert report.chaotic_settings(doc) == {"b"}


def test_stored_dynamics_measurement_marks_only_the_plain_tanh_rnn_at_scale_3():
    doc = stored_results.load_results(paths.COMMITTED_PATH)
    chaotic = report.chaotic_settings(doc)
    assert chaotic == {report.setting_key(m, "tanh", False, 3.0)
                       for m in ("impulse", "noise")}
    assert set(doc["dynamics"]["spread"]) == {report.setting_key(*k)
                                              for k in report.DYNAMICS_SETTINGS}


def test_recurrent_weights_are_drawn_in_float64():
    import torch

    from layernorm_tutorial.lab.rnn.cells import ElmanRNNCell

    cell = experiments.set_recurrent_scale(ElmanRNNCell(3, 4), 2.0, seed=5)
    g = torch.Generator().manual_seed(5)
    expected = 2.0 * torch.randn(4, 4, generator=g, dtype=torch.float64) / 2.0
    assert torch.equal(cell.weight_hh, expected.float())


def _doc():
    runs = []
    for arm in race.ARMS:
        for seed in (2, 3, 4, 5, 6):
            lead = 0.05 if arm.startswith("LN") else 0.0
            acc = [0.6 + lead + 0.01 * seed, 0.9 + lead / 5 + 0.013 * (seed % 2)]
            runs.append({"arm": arm, "lr": 0.01, "seed": seed, "role": "reported",
                         "train_loss": [1.5, 0.5], "test_accuracy": acc})
    return {"selected_lr": {a: 0.01 for a in race.ARMS}, "runs": runs}


def test_accuracy_and_verdict_tables_fit_and_glue_every_quoted_value():
    doc = _doc()
    table, values = report.accuracy_table(doc, epochs=(1, 2))
    assert max(len(line) for line in table.splitlines()) <= 80
    assert set(values) == {f"rnn-acc-{k}-{e}" for k in race.ARMS.values() for e in (1, 2)}
    table, values = report.verdict_table(doc, epochs=(1, 2))
    assert max(len(line) for line in table.splitlines()) <= 80
    assert "rnn-v-ln-lstm-bn-lstm-1" in values and len(values) == 8
    assert "Bonferroni" in table


def test_replication_table_compares_word_and_interval():
    doc = _doc()
    moved = _doc()
    for r in moved["runs"]:  # the replication: the LN-LSTM loses its lead after epoch 1
        if r["arm"] == "LN-LSTM":
            r["test_accuracy"] = [r["test_accuracy"][0], r["test_accuracy"][1] - 0.04]
    paths_doc = {"replication": {"path": "avx2", "selected_lr": moved["selected_lr"],
                                 "runs": moved["runs"],
                                 "machine": {"cpu_capability": "AVX2",
                                             "environment": {"MKL_CBWR": "AVX2"}}},
                 "tolerance": {"values": {"a": 1, "b": 1}, "loss_relative_spread": 1e-6}}
    rows = paths.replication_table(doc, paths_doc, epochs=(1, 2))
    first = [r for r in rows if r["epoch"] == 1]
    assert all(r["same_word"] and r["inside"] for r in first)
    moved_rows = [r for r in rows if r["epoch"] == 2 and r["pair"][0] == "LN-LSTM"]
    assert not any(r["inside"] for r in moved_rows)
    text, values = report.replication_lines(rows, paths_doc)
    assert max(len(line) for line in text.splitlines()) <= 80
    assert values["rnn-rep-n"] == "8" and int(values["rnn-rep-inside"]) < 8


def test_live_check_allows_a_multiple_of_the_measured_spread(monkeypatch):
    doc = _doc()
    paths_doc = {"tolerance": {"kwargs": {"arm": "LN-LSTM", "seed": 2, "epochs": 1},
                               "loss_relative_spread": 1e-5}}
    monkeypatch.setattr(race, "retrain", lambda arm, lr, seed, epochs: {
        "train_loss": [1.5 * (1 + 5e-5)], "test_accuracy": [0.65], "val_accuracy": [0.6]})
    check = paths.live_check(doc, paths_doc)
    assert check.allowed == pytest.approx(10 * 1e-5 + 5e-5)
    assert check.within and check.image_difference == round(0.02 * 449)
    assert "this machine's run" in check.report()
    monkeypatch.setattr(race, "retrain", lambda arm, lr, seed, epochs: {
        "train_loss": [1.6], "test_accuracy": [0.65], "val_accuracy": [0.6]})
    assert not paths.live_check(doc, paths_doc).within
    with pytest.raises(ValueError, match="no single reported run"):
        paths.live_check(doc, {"tolerance": {**paths_doc["tolerance"],
                                             "kwargs": {"arm": "LN-LSTM", "seed": 9,
                                                        "epochs": 1}}})


def test_committed_paths_file_replicates_every_reported_run():
    doc = stored_results.load_results(race.COMMITTED_PATH)
    pdoc = stored_results.load_results(paths.COMMITTED_PATH)
    rep = pdoc["replication"]
    assert rep["selected_lr"] == doc["selected_lr"]
    assert rep["machine"]["environment"] == {"ATEN_CPU_CAPABILITY": "default",
                                             "MKL_CBWR": "COMPATIBLE"}
    assert sorted((r["arm"], r["seed"]) for r in rep["runs"]) == sorted(
        (r["arm"], r["seed"]) for r in doc["runs"] if r["role"] == "reported")
    assert len(pdoc["tolerance"]["values"]) >= 3 and pdoc["tolerance"]["kwargs"]["seed"] in \
        doc["config"]["reported_seeds"]


def test_paths_are_run_with_their_machine_and_progress(monkeypatch):
    from layernorm_tutorial.lab.common import numerics_paths
    from layernorm_tutorial.lab.residual import paths as residual_paths

    calls = []

    def fake(target, kwargs, paths, with_machine=False, desc=None):
        calls.append((target, kwargs, paths, with_machine, desc))
        return {p: {"result": p, "machine": {"path": p}} for p in paths}

    monkeypatch.setattr(numerics_paths, "run_on_paths", fake)
    for module in (paths, residual_paths):
        calls.clear()
        out = module._on_paths("m:f", {"a": 1}, ["native", "avx2"], "test")
        assert out == {"native": {"result": "native", "machine": {"path": "native"}},
                       "avx2": {"result": "avx2", "machine": {"path": "avx2"}}}
        assert calls == [("m:f", {"a": 1}, ["native", "avx2"], True, "test")]


def test_dynamics_summary_prints_every_setting():
    out = report.dynamics_summary()
    assert set(out) == {report.setting_key(*k) for k in report.DYNAMICS_SETTINGS}
    row = out[report.setting_key("impulse", "tanh", True, 3.0)]
    assert len(row["saturation"]) == len(report.SATURATION_STEPS)
    assert row["grad_first"] > 1e4 * row["grad_last"] and row["factor"] > 1


def test_validation_accuracy_is_recorded_on_the_validation_images():
    x_tr, y_tr, x_val, y_val, x_te, y_te = experiments.load_digit_sequences_with_validation(3)
    assert x_tr.shape[1:] == (8, 8) and (len(y_tr), len(y_val), len(y_te)) == (1078, 270, 449)
    small = (x_tr[:128], y_tr[:128], x_te, y_te)
    a = experiments.train_sequence_classifier("ln_rnn", small, hidden_size=8, epochs=2,
                                              seed=1, validation=(x_te, y_te))
    b = experiments.train_sequence_classifier("ln_rnn", small, hidden_size=8, epochs=2,
                                              seed=1)
    assert a["val_accuracy"] == a["test_accuracy"] == b["test_accuracy"]
    assert "val_accuracy" not in b


def test_replication_changes_count_runs_per_arm():
    doc = _doc()
    moved = _doc()
    for r in moved["runs"]:
        if r["arm"] == "LN-LSTM" and r["seed"] in (2, 3):  # accuracy after epoch 2
            r["test_accuracy"] = [r["test_accuracy"][0], r["test_accuracy"][1] - 0.01]
            r["train_loss"] = [1.5, 0.51]
        if r["arm"] == "BN-RNN" and r["seed"] == 4:  # loss only
            r["train_loss"] = [1.5, 0.49]
    text, values = report.replication_changes(doc, {"replication": {"runs": moved["runs"]}})
    assert max(len(line) for line in text.splitlines()) <= 80
    assert values == {"rnn-rep-acc-arms": "LN-LSTM", "rnn-rep-loss-runs": "3",
                      "rnn-rep-runs": "30"}
    rows = {line.split()[0]: line.split()[1:] for line in text.splitlines()[2:]}
    assert rows["LN-LSTM"] == ["2", "0", "2"] and rows["BN-RNN"] == ["0", "0", "1"]
    same, _ = report.replication_changes(doc, {"replication": {"runs": doc["runs"]}})
    assert all(line.split()[1:] == ["0", "0", "0"] for line in same.splitlines()[2:])


def test_rate_grids_mark_the_choice_and_refuse_an_edge():
    doc = {"selected_lr": {"RNN": 0.01}, "runs": [
        {"arm": "RNN", "lr": lr, "role": "tuning"} for lr in (0.001, 0.01, 0.0316)]}
    text = report.rate_grids(doc)
    assert "RNN     0.001 [0.01] 0.0316" in text
    doc["selected_lr"]["RNN"] = 0.0316
    with pytest.raises(AssertionError, match="on an edge"):
        report.rate_grids(doc)


def test_registration_lines_carry_threshold_disclosure_and_dates():
    doc = stored_results.load_results(race.COMMITTED_PATH)
    text = report.registration_lines(doc)
    assert max(len(line) for line in text.splitlines()) <= 80
    assert text.startswith("threshold (claim rnn.race, in the registry): 2 points")
    assert "committed together with their data" in text and "registered " in text


def _pairs(doc, conf):
    """Pairs as lab.confirmatory.verdicts.rnn_pairs builds them, from two documents."""
    from layernorm_tutorial.lab.confirmatory import verdicts

    return verdicts.rnn_pairs(conf, doc)


def _claims_doc(doc):
    """A document the confirmatory pairing accepts (registered claim, a start date)."""
    return {**doc, "confirmatory": True, "started": {"date": "2026-11-28T14:00:00+00:00",
                                                     "commit": "abcdef0"}}


def test_pairs_table_prints_the_confirmatory_verdict_with_the_earlier_beside_it():
    earlier = _doc()
    conf = _claims_doc(_doc())
    for r in conf["runs"]:   # the fresh seeds: the LN arms' first-epoch lead is larger
        if r["arm"].startswith("LN"):
            r["test_accuracy"] = [r["test_accuracy"][0] + 0.03, r["test_accuracy"][1]]
    pairs = _pairs(earlier, conf)
    table, values = report.pairs_table(pairs, epochs=(1, 2))
    assert max(len(line) for line in table.splitlines()) <= 80
    assert table.count("confirmatory: ") == 8 and table.count("earlier run:  exploratory") == 8
    p = next(p for p in pairs if p.label == "LN-RNN vs RNN, epoch 1")
    assert values["rnn-v-ln-rnn-rnn-1"] == p.confirmatory.text(1, 100, " pts")
    assert values["rnn-e-ln-rnn-rnn-1"].startswith("exploratory, ")
    assert values["rnn-v-ln-rnn-rnn-1"] != values["rnn-e-ln-rnn-rnn-1"].removeprefix(
        "exploratory, ")
    assert "over this chapter's 8 verdicts" in table.replace("\n", " ")
    with pytest.raises(ValueError, match="no comparison"):
        report.pairs_table(pairs, epochs=(3,))


def test_best_decided_and_epoch_words_read_the_confirmatory_family():
    pairs = _pairs(_doc(), _claims_doc(_doc()))
    label, p, level = report.best_decided(pairs)
    assert level == pytest.approx(0.05 / 8)
    assert p == min(q.confirmatory.p for q in pairs if q.confirmatory.decided)
    words = report.epoch_words(pairs)
    assert words.count("epoch 1:") == 4 and words.endswith(f"of {len(pairs)}")
