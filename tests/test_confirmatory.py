"""Confirmatory runs (layernorm_tutorial.lab.confirmatory): registered fresh seeds, their own
results files, and the confirmatory verdict with the earlier one beside it."""

from __future__ import annotations

import json

import pytest

from layernorm_tutorial.lab.common import claims as C
from layernorm_tutorial.lab.common.stored_results import BOOK_DATA
from layernorm_tutorial.lab.confirmatory import runs, verdicts
from layernorm_tutorial.lab.confirmatory.__main__ import main


def test_every_plan_runs_the_confirmations_of_its_file_and_nothing_else():
    covered = [cid for plan in runs.PLANS for cid in runs.plan_claims(plan)]
    assert sorted(covered) == sorted(c.claim_id for c in C.CONFIRMATIONS)
    for plan in runs.PLANS:
        tuning, seeds = runs.plan_seeds(plan)
        assert min(seeds) > 100 and len(seeds) >= 5 and not set(tuning) & set(seeds)
        assert runs.plan_path(plan).name.endswith("_confirmatory.json")
    with pytest.raises(ValueError, match="plan must be one of"):
        runs.plan_claims("no-such-plan")


def test_a_plan_writes_its_seeds_stamp_and_provenance(tmp_path):
    out = tmp_path / "res.json"
    main(["residual", "--tiny", "--out", str(out), "--workers", "1"])
    doc = json.loads(out.read_text())
    assert doc["confirmatory"] is True and doc["config"]["tiny"] is True
    assert doc["claims"] == {cid: C.confirmation_hash(cid)
                             for cid in ("residual.warm-up", "residual.depth")}
    assert {r["seed"] for r in doc["runs"]} == set(C.CONFIRMATORY_SEEDS)
    assert doc["started"]["date"] <= doc["machine"]["date"]
    assert doc["machine"]["cpu"] and doc["versions"]["torch"]
    assert doc["command"] == "python -m layernorm_tutorial.lab.confirmatory residual --tiny"
    with pytest.raises(SystemExit) as err:      # never replaced without --force
        main(["residual", "--tiny", "--out", str(out)])
    assert err.value.code == 2


@pytest.mark.parametrize("plan", ["principles", "rnn", "large_models", "large_models_qk"])
def test_smoke_runs_of_the_other_plans_use_the_registered_seeds(plan, tmp_path):
    doc, summary = runs.run_plan(plan, workers=1, tiny=True)
    tuning, seeds = runs.plan_seeds(plan)
    assert doc["claims"] == {cid: C.confirmation_hash(cid) for cid in runs.plan_claims(plan)}
    assert str(list(seeds)) in summary and doc["config"]["tiny"] is True
    if plan == "principles":
        assert doc["reported_seeds"] == list(seeds) and doc["tuning_seeds"] == list(tuning)
    elif plan == "rnn":
        assert {r["seed"] for r in doc["runs"]} == set(seeds)
    elif plan == "large_models":
        pairs = verdicts.large_models_pairs(conf=doc)
        assert len(pairs) == 7 and all(p.confirmatory.n == len(seeds) for p in pairs)
    else:
        (pair,) = verdicts.qk_norm_pairs(conf=doc)
        assert pair.confirmatory.n == len(seeds) == 8 and not pair.confirmatory.too_few_seeds


def test_the_command_refuses_an_unknown_plan_and_a_tiny_run_into_the_book(capsys):
    with pytest.raises(SystemExit) as err:
        main(["bogus"])
    assert err.value.code == 2 and "PLAN must be one of" in capsys.readouterr().err
    with pytest.raises(SystemExit) as err:
        main(["residual", "--tiny"])
    assert err.value.code == 2


def test_evidence_sweep_with_fixed_rates_needs_every_setting():
    from layernorm_tutorial.lab.evidence import experiments as ex

    exps = ex.tiny_experiments(max_steps=1)
    with pytest.raises(KeyError, match="fixed_lr lacks"):
        ex.run_sweep(exps, rate_ranges=(), fixed_lr={})


def _stored(plan_file: str) -> bool:
    return (BOOK_DATA / plan_file).exists()


@pytest.mark.skipif(not _stored("rnn_race_confirmatory.json"), reason="rnn not run yet")
def test_rnn_pairs_judge_the_confirmatory_file_with_the_earlier_beside():
    from layernorm_tutorial.lab.rnn import race

    conf = verdicts.load("rnn_race_confirmatory.json")
    earlier = verdicts.load("rnn_race.json")
    pairs = verdicts.rnn_pairs(conf, earlier)
    assert len(pairs) == 24
    first = pairs[0]
    assert first.label == "LN-LSTM vs LSTM, epoch 1"
    assert first.confirmatory == race.verdicts(conf, 1)[("LN-LSTM", "LSTM")]
    assert first.exploratory.exploratory and not first.confirmatory.exploratory
    assert first.exploratory.effect == race.verdicts(earlier, 1)[("LN-LSTM", "LSTM")].effect
    assert first.exploratory_text.startswith("exploratory")
    assert first.registration.startswith("confirmatory: registered") and \
        first.registration.endswith("registered first")
    text = verdicts.pairs_text(pairs[:2])
    assert "confirmatory:" in text and "earlier run:  exploratory" in text
    assert max(len(line) for line in text.splitlines()) <= 80


def test_pairs_refuse_different_comparisons_and_unconfirmed_claims():
    v = C.judge("rnn.race", [0.5, 0.6, 0.55, 0.6, 0.5], [0.4, 0.5, 0.45, 0.5, 0.4])
    doc = {"confirmatory": True, "started": {"date": "2030-01-01T00:00:00+00:00",
                                             "commit": "abc"}}
    with pytest.raises(ValueError, match="different comparisons"):
        verdicts._pairs([("a", v)], [("b", v)], str, doc)
    exp = C.judge("evidence.x.recalibrated-bn", [1.0] * 5, [0.9, 0.8, 0.9, 0.8, 0.85])
    with pytest.raises(ValueError, match="exploratory"):
        verdicts._pairs([("a", exp)], [("a", exp)], str, doc)
    ladder = C.judge_ladder("large_models.logit-tools", [(0.3, float("inf"))] * 8,
                            [(0.1, 0.3)] * 8)
    with pytest.raises(KeyError, match="no registered confirmatory run"):
        verdicts._pairs([("a", ladder)], [("a", ladder)], str, doc)
    (pair,) = verdicts._pairs([("a", v)], [("a", v)], lambda x: x.word, doc)
    assert pair.mark == verdicts.holm([v])[0] and pair.exploratory.exploratory


def test_a_missing_confirmatory_file_names_the_command(monkeypatch, tmp_path):
    monkeypatch.setattr(verdicts, "BOOK_DATA", tmp_path)
    with pytest.raises(FileNotFoundError, match="lab.confirmatory"):
        verdicts.load("rnn_race_confirmatory.json")


@pytest.mark.skipif(not (_stored("evidence_confirmatory.json")
                         and _stored("evidence_side_confirmatory.json")),
                    reason="evidence confirmatory runs not stored yet")
def test_evidence_pairs_cover_the_chapter_family_in_its_order():
    from layernorm_tutorial.lab.evidence import analysis

    pairs = verdicts.evidence_pairs()
    earlier = analysis.verdict_rows(verdicts.load("evidence_results.json"))
    assert len(pairs) == len(earlier) + 5 == 32
    assert [p.label for p in pairs[:len(earlier)]] == [f"{r['claim']}: {r['setting']}"
                                                        for r in earlier]
    assert all(p.exploratory.exploratory and not p.confirmatory.exploratory for p in pairs)
    assert {p.confirmatory.n for p in pairs} == {len(C.CONFIRMATORY_SEEDS)}
    side = [p for p in pairs if p.claim_id.startswith(("evidence.6", "evidence.7"))]
    assert len(side) == 5 and all("registered first" in p.registration for p in side)


@pytest.mark.skipif(not _stored("large_models_confirmatory.json"),
                    reason="large_models confirmatory runs not stored yet")
def test_large_models_pairs_and_the_family_they_count_in():
    pairs = verdicts.large_models_pairs()
    assert [p.claim_id for p in pairs] == (["large_models.norms"] * 2
                                           + ["large_models.dyt-alpha"] * 2
                                           + ["large_models.deepnorm"] * 3)
    more = [p.confirmatory for p in pairs]   # a larger family never adds a mark
    fewer = verdicts.large_models_pairs(others=more)
    assert all(a.mark or not b.mark for a, b in zip(pairs, fewer, strict=True))


@pytest.mark.skipif(not (_stored("large_models_confirmatory.json")
                         and _stored("large_models_qk_confirmatory.json")),
                    reason="large_models confirmatory runs not stored yet")
def test_large_models_chapter_pairs_are_marked_over_the_whole_family_of_13():
    pairs = verdicts.large_models_chapter_pairs()
    rest = verdicts.large_models_unconfirmed()
    assert len(pairs) + len(rest) == 13 and pairs[-1].claim_id == "large_models.qk-norm"
    family = [p.confirmatory for p in pairs] + [v for _, v in rest]
    assert [p.mark for p in pairs] == [bool(m) for m in verdicts.holm(family)[:len(pairs)]]
    assert pairs[-1].confirmatory.n == 8
