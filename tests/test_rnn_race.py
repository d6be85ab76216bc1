"""The RNN race: the learning rate is chosen on tuning seeds only, runs pair up by seed, the
stored file is what the command writes, and a stored run can be reproduced here."""

import json

import numpy as np
import pytest

from layernorm_tutorial._cli import OutputPathError
from layernorm_tutorial.lab.common import stored_results
from layernorm_tutorial.lab.common.verdict import MIN_SEEDS
from layernorm_tutorial.lab.rnn import __main__ as race_cli
from layernorm_tutorial.lab.rnn import race


def _fake_train(job):
    """Validation accuracy peaks at lr = 0.03 for every arm; LN arms are 0.05 ahead; seed
    noise. Test accuracy peaks elsewhere (lr = 1e-3): a rule that read it would choose
    differently."""
    arm, lr, seed, role, epochs = job
    base = 0.9 - 0.1 * abs(np.log10(lr / 0.03)) + (0.05 if arm.startswith("LN") else 0.0)
    acc = [base - 0.1 * (epochs - e) + 0.001 * seed for e in range(1, epochs + 1)]
    wrong = [0.99 - 0.1 * abs(np.log10(lr / 1e-3))] * epochs
    test = acc if role == "reported" else wrong
    return {"arm": arm, "lr": lr, "seed": seed, "role": role, "train_loss": [1.0] * epochs,
            "val_accuracy": acc, "test_accuracy": test}


def test_rate_chosen_on_tuning_seeds_and_grid_extended_past_a_winning_edge(monkeypatch):
    monkeypatch.setattr(race, "_train", _fake_train)
    result = race.run_race(arms=("RNN", "LN-RNN"), epochs=2, lr_grid=(1e-3, 3e-3, 1e-2),
                           tuning_seeds=(0, 1), reported_seeds=(2, 3, 4, 5, 6))
    # 1e-2 wins the first grid (an edge): 1e-2 * sqrt(10) is tried and wins at the edge
    # again, so 0.0316 * sqrt(10) is tried (three significant digits)
    tried = sorted({r["lr"] for r in result["runs"] if r["arm"] == "RNN"})
    assert tried == [1e-3, 3e-3, 1e-2, 0.0316, 0.0999]
    assert result["selected_lr"] == {"RNN": 0.0316, "LN-RNN": 0.0316}
    reported = [r for r in result["runs"] if r["role"] == "reported"]
    tuning = [r for r in result["runs"] if r["role"] == "tuning"]
    assert {r["seed"] for r in reported} == {2, 3, 4, 5, 6}
    assert {r["seed"] for r in tuning} == {0, 1}
    assert all(r["lr"] == result["selected_lr"][r["arm"]] for r in reported)


def test_verdicts_pair_reported_runs_by_seed(monkeypatch):
    monkeypatch.setattr(race, "_train", _fake_train)
    doc = race.run_race(arms=("RNN", "LN-RNN"), epochs=1, lr_grid=(0.03,), grid_extensions=0,
                        tuning_seeds=(0,), reported_seeds=(1, 2, 3, 4, 5))
    (v,) = race.verdicts(doc, 1, comparisons=(("LN-RNN", "RNN"),)).values()
    assert v.n == 5 and v.differences == pytest.approx((0.05,) * 5)
    assert v.word == "holds" and v.effect == pytest.approx(0.05)
    table = race.accuracy_table(doc, 1)
    assert table["RNN"] == pytest.approx([0.9 + 0.001 * s for s in (1, 2, 3, 4, 5)])


def test_a_real_stored_run_is_reproduced_exactly():
    doc = race.run_race(arms=("RNN",), epochs=1, lr_grid=(3e-3,), grid_extensions=0,
                        tuning_seeds=(0,), reported_seeds=(1, 2, 3, 4, 5))
    stored, again = race.check_stored_run(doc, "RNN", 3)
    assert stored == again and 0.0 < again[0] <= 1.0
    with pytest.raises(ValueError, match="no single reported run"):
        race.check_stored_run(doc, "LN-RNN", 3)


def test_unknown_arm_is_named():
    with pytest.raises(ValueError, match="arms must be names"):
        race.run_race(arms=("GRU",))


def test_committed_results_follow_the_rule():
    doc = stored_results.load_results(race.COMMITTED_PATH)
    assert doc["command"] == race.COMMAND and doc["config"]["threshold"] == race.THRESHOLD
    tuning, reported = set(doc["config"]["tuning_seeds"]), set(doc["config"]["reported_seeds"])
    assert not tuning & reported and len(reported) >= MIN_SEEDS
    for arm in race.ARMS:
        # the stored choice is the one the rule makes from the stored tuning runs
        assert doc["selected_lr"][arm] == race.select_lr(doc["runs"], arm)
        runs = [r for r in doc["runs"] if r["arm"] == arm and r["role"] == "reported"]
        assert sorted(r["seed"] for r in runs) == sorted(reported)
        assert all(r["lr"] == doc["selected_lr"][arm] for r in runs)
        assert all(len(r["test_accuracy"]) == doc["config"]["epochs"] for r in runs)


def test_cli_refuses_before_any_run(tmp_path, capsys):
    existing = tmp_path / "r.json"
    existing.write_text("{}")
    with pytest.raises(SystemExit):
        race_cli.main(["--out", str(existing)])
    assert "--force" in capsys.readouterr().err
    assert existing.read_text() == "{}"
    with pytest.raises(SystemExit):
        race_cli.main(["--tiny"])  # a smoke run never writes the book's file
    assert "--tiny needs --out" in capsys.readouterr().err


def test_cli_tiny_run_writes_a_results_file_with_provenance(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(race, "_train", _fake_train)
    out = tmp_path / "tiny.json"
    race_cli.main(["--tiny", "--workers", "1", "--out", str(out)])
    doc = stored_results.load_results(out)
    assert doc["command"] == race.COMMAND and doc["config"]["epochs"] == 1
    assert {r["arm"] for r in doc["runs"]} == {"RNN", "LN-RNN"}
    printed = capsys.readouterr().out
    assert printed.startswith(f"{len(doc['runs'])} runs in ") and str(out.resolve()) in printed
    with pytest.raises(SystemExit):  # the same path again needs --force
        race_cli.main(["--tiny", "--workers", "1", "--out", str(out)])
    race_cli.main(["--tiny", "--workers", "1", "--out", str(out), "--force"])


def test_stored_results_never_overwrite_without_force(tmp_path):
    doc = stored_results.provenance("cmd", {"a": 1}, 1.23456789)
    doc["x"] = [0.123456789, float("nan")]
    path = stored_results.save_results(doc, tmp_path / "d.json")
    back = stored_results.load_results(path)
    assert back["x"] == [0.12346, None] and back["seconds"] == 1.2346
    with pytest.raises(OutputPathError, match="--force"):
        stored_results.save_results(doc, path)
    stored_results.save_results({**doc, "x": 1}, path, overwrite=True)
    assert json.loads(path.read_text())["x"] == 1
    with pytest.raises(ValueError, match="provenance"):
        stored_results.save_results({"x": 1}, tmp_path / "e.json")
    with pytest.raises(FileNotFoundError, match="no results file"):
        stored_results.load_results(tmp_path / "missing.json")
    (tmp_path / "bad.json").write_text('{"x": 1}')
    with pytest.raises(ValueError, match="not a results file"):
        stored_results.load_results(tmp_path / "bad.json")


def test_rate_is_chosen_on_validation_accuracy_never_on_test_accuracy():
    runs = [_fake_train(("RNN", lr, s, "tuning", 1)) for lr in (1e-3, 0.03) for s in (0, 1)]
    assert race.select_lr(runs, "RNN") == 0.03  # test accuracy would pick 1e-3


def test_threshold_and_stamp_come_from_the_claims_registry():
    from layernorm_tutorial.lab.common import claims

    assert race.THRESHOLD == claims.threshold(race.CLAIM)
    doc = race.build_document({"selected_lr": {}, "runs": []}, 1.0)
    assert doc["claims"] == {race.CLAIM: claims.definition_hash(race.CLAIM)}
    assert "fixed test set" in doc["config"]["data"]


def test_family_is_every_pair_after_every_epoch_with_holm_marks(monkeypatch):
    monkeypatch.setattr(race, "_train", _fake_train)
    doc = race.run_race(arms=("RNN", "LN-RNN"), epochs=3, lr_grid=(0.03,),
                        grid_extensions=0, tuning_seeds=(0,),
                        reported_seeds=(1, 2, 3, 4, 5))
    family = race.family(doc, comparisons=(("LN-RNN", "RNN"),))
    assert race.doc_epochs(doc) == 3 and len(family) == 3
    assert [key[1] for key in family] == [1, 2, 3]
    # a constant 0.05 lead on every seed: an exact difference, p = 0, survives Holm
    assert all(v.word == "holds" and mark for v, mark in family.values())


def test_committed_race_tunes_on_validation_and_is_stamped():
    from layernorm_tutorial.lab.common import claims

    doc = stored_results.load_results(race.COMMITTED_PATH)
    assert doc["claims"] == {race.CLAIM: claims.definition_hash(race.CLAIM)}
    assert all("val_accuracy" in r for r in doc["runs"])
    assert doc["machine"]["date"] > claims.registration(race.CLAIM)[1]
