"""The claims registry (layernorm_tutorial.lab.common.claims): definitions fixed before the data."""

from __future__ import annotations

import json

import pytest

from layernorm_tutorial.lab.common import claims as C
from layernorm_tutorial.lab.common.stored_results import BOOK_DATA

RESULTS_FILES = sorted({c.results for c in C.CLAIMS})


def _load(name):
    return json.loads((BOOK_DATA / name).read_text())


@pytest.mark.parametrize("name", RESULTS_FILES)
def test_stored_results_were_judged_under_todays_definitions(name):
    """Fails when a registered claim (threshold, metric, direction, ...) differs from the one
    its stored results were judged under: change a definition only with a re-run."""
    judged = C.judged_hashes(_load(name), name)
    for c in C.CLAIMS:
        if c.results == name:
            assert c.id in judged, f"{name} records no judgement of {c.id}"
            assert judged[c.id] == C.definition_hash(c.id), (
                f"{c.id}: the registry's definition changed after {name} was judged")


def test_a_changed_threshold_changes_the_hash(monkeypatch):
    before = C.definition_hash("rnn.race")
    entry = C.claim("rnn.race")
    changed = C.Claim(**{**entry.__dict__, "threshold": 0.03})
    monkeypatch.setitem(C._BY_ID, "rnn.race", changed)
    assert C.definition_hash("rnn.race") != before
    # prose is not part of the definition
    reworded = C.Claim(**{**entry.__dict__, "statement": "other words", "note": "n"})
    monkeypatch.setitem(C._BY_ID, "rnn.race", reworded)
    assert C.definition_hash("rnn.race") == before


def test_stamp_records_the_hashes_and_refuses_unknown_ids():
    doc = C.stamp({"runs": []}, ["residual.depth"])
    assert doc["claims"] == {"residual.depth": C.definition_hash("residual.depth")}
    assert C.judged_hashes(doc, "anything.json") == doc["claims"]
    with pytest.raises(KeyError, match="claim_id"):
        C.stamp({}, ["no.such.claim"])


def test_lab_modules_read_their_thresholds_from_the_registry():
    from layernorm_tutorial.lab.evidence import analysis
    from layernorm_tutorial.lab.large_models import comparisons
    from layernorm_tutorial.lab.residual import sweep
    from layernorm_tutorial.lab.rnn import race

    assert race.THRESHOLD == C.threshold("rnn.race")
    assert sweep.THRESHOLD == C.threshold("residual.depth") == C.threshold("residual.warm-up")
    assert comparisons.ACCURACY_THRESHOLD == C.threshold("large_models.norms")
    assert comparisons.TIME_THRESHOLD == C.threshold("large_models.time")
    assert analysis.ACCURACY_THRESHOLD == C.threshold("evidence.2.rnn")
    assert analysis.RATE_THRESHOLD == C.threshold("evidence.5.rates")
    assert analysis.CONVERGED_TRAIN_ACC == C.parameter("evidence.3.ln-does-not-converge",
                                                       "converged_train_acc")


def test_registration_note_compares_with_the_first_run_of_the_seeds():
    """Not with a later re-run: DeepNorm's threshold came with its first data (F1 of the
    audit), so a re-run's later date does not make it "registered first"."""
    note = C.registration_note("large_models.norms", _load("large_models_results.json"))
    assert note.startswith("registered 2026-11-25 13:49 (8ac62eb), results")
    assert note.endswith("registered before the first run's commit (4ca9504), not "
                         "demonstrably before its runs")
    later = {"machine": {"date": "2030-01-01T00:00:00+00:00", "commit": "abcdef0"}}
    for cid in ("rnn.race", "large_models.deepnorm", "principles.ln-vs-he"):
        note = C.registration_note(cid, later)
        assert "registered first" not in note
        assert note.endswith(f"registered with the data (its first run, "
                             f"{C.registration(cid)[0]})")
    note = C.registration_note("large_models.qk-norm", later)
    assert note.endswith("registered after the first run of these seeds (4ca9504, "
                         "2026-11-25 14:37)")
    assert C.registration_note("evidence.x.per-digit", later).startswith("exploratory")


def test_confirmatory_files_are_registered_first_only_when_their_runs_started_later():
    commit, date = C.CONFIRMATIONS_REGISTERED
    doc = {"confirmatory": True, "started": {"date": "2030-01-01T00:00:00+00:00",
                                             "commit": "1234567abc"}}
    note = C.registration_note("rnn.race", doc)
    assert note == (f"confirmatory: registered {date[:16].replace('T', ' ')} ({commit}), runs "
                    "started 2030-01-01 00:00 (1234567) on fresh seeds 101-105: "
                    "registered first")
    doc["started"]["date"] = "2020-01-01T00:00:00+00:00"
    assert C.registration_note("rnn.race", doc).endswith("registered after the runs started")
    with pytest.raises(KeyError, match="start date"):
        C.registration_note("rnn.race", {"confirmatory": True})
    # a plan registered later prints its own registration and its own seeds
    later, later_date = C.confirmation_registered("large_models.qk-norm")
    assert later != commit and later_date > date
    doc["started"]["date"] = "2030-01-01T00:00:00+00:00"
    note = C.registration_note("large_models.qk-norm", doc)
    assert f"({later})" in note and "seeds 101-108: registered first" in note


def test_every_confirmation_uses_seeds_no_results_file_used_before():
    """The reported (and any fresh tuning) seeds of every plan appear in no earlier results
    file of the book."""
    used = set()

    def walk(obj):
        if isinstance(obj, dict):
            for k, v in obj.items():
                if "seed" in k.lower():
                    for x in (v if isinstance(v, list) else [v]):
                        if isinstance(x, int):
                            used.add(x)
                walk(v)
        elif isinstance(obj, list):
            for v in obj:
                walk(v)

    plans = {p.results for p in C.CONFIRMATIONS}
    for path in BOOK_DATA.glob("*.json"):
        if path.name not in plans and path.name != C.JUDGED_PATH.name:
            walk(json.loads(path.read_text()))
    assert used and max(used) < 99
    for p in C.CONFIRMATIONS:
        assert not used & (set(p.seeds) | set(p.tuning_seeds)), p.claim_id
        assert len(p.seeds) >= 5 and p.results.endswith("_confirmatory.json")
        assert p.results != C.claim(p.claim_id).results


@pytest.mark.parametrize("plan", C.CONFIRMATIONS, ids=lambda p: p.claim_id)
def test_stored_confirmatory_runs_carry_their_hash_machine_and_start(plan):
    path = BOOK_DATA / plan.results
    if not path.exists():
        pytest.skip(f"{plan.results} not run yet")
    doc = json.loads(path.read_text())
    assert doc["confirmatory"] is True
    assert doc["claims"][plan.claim_id] == C.confirmation_hash(plan.claim_id), (
        f"{plan.claim_id}: the confirmatory definition changed after {plan.results} ran")
    assert doc["machine"]["cpu"] and doc["machine"]["torch"] and doc["versions"]["torch"]
    assert doc["started"]["date"] > C.confirmation_registered(plan.claim_id)[1]
    assert doc["registration"][plan.claim_id]["seeds"] == list(plan.seeds)


def test_confirmation_hash_covers_the_plan_and_the_claim(monkeypatch):
    before = C.confirmation_hash("rnn.race")
    plan = C.confirmation("rnn.race")
    monkeypatch.setitem(C._CONFIRMATIONS, "rnn.race",
                        C.Confirmation(**{**plan.__dict__, "seeds": (1, 2, 3, 4, 5)}))
    assert C.confirmation_hash("rnn.race") != before
    monkeypatch.setitem(C._CONFIRMATIONS, "rnn.race", plan)
    entry = C.claim("rnn.race")
    monkeypatch.setitem(C._BY_ID, "rnn.race", C.Claim(**{**entry.__dict__, "threshold": 0.03}))
    assert C.confirmation_hash("rnn.race") != before
    with pytest.raises(KeyError, match="no registered confirmatory run"):
        C.confirmation("large_models.logit-tools")


def test_every_results_file_that_feeds_a_verdict_has_hashes_and_a_machine():
    """Its own stamp and machine, or the sidecar's record; a file whose machine was never
    recorded feeds only the exploratory verdict printed beside a stored confirmatory one."""
    names = set(RESULTS_FILES) | set(C.JUDGED) | {p.results for p in C.CONFIRMATIONS
                                                  if (BOOK_DATA / p.results).exists()}
    assert {"evidence_results.json", "evidence_side_results.json", "principles_training.json",
            "principles_ln_vs_he_replication.json"} <= names
    for name in sorted(names):
        doc = _load(name)
        C.judged_hashes(doc, name)   # raises when neither records hashes
        machine = doc.get("machine") or C.JUDGED.get(name, {}).get("machine")
        if machine is None:
            assert C.JUDGED[name]["note"], name
            fed = [c.id for c in C.CLAIMS if c.results == name]
            assert fed and all((BOOK_DATA / C.confirmation(c).results).exists() for c in fed), (
                f"{name} records no machine and some of its claims have no stored "
                "confirmatory run")


def test_the_guard_lives_in_a_data_file_not_in_the_registry_source():
    source = (C._REPO / C.REGISTRY_PATH).read_text()
    for rec in C.JUDGED.values():
        for h in rec["claims"].values():
            assert h not in source
    assert C.JUDGED_PATH.parent.parent == BOOK_DATA   # not a stored run: its own folder


def test_every_claim_is_well_formed():
    assert len({c.id for c in C.CLAIMS}) == len(C.CLAIMS)
    for c in C.CLAIMS:
        assert c.threshold > 0 and c.kind in ("paired", "ladder")
        assert c.id.startswith(c.chapter + ".")
        assert (BOOK_DATA / c.results).exists(), c.results
        if c.kind == "ladder":
            assert c.unit in ("log2", "decades")
    assert {c.chapter for c in C.CLAIMS} >= {"evidence", "principles", "rnn", "residual",
                                              "large_models"}
    assert any("0.005" in d for d in C.DISCLOSURES)


def test_judge_uses_the_registered_threshold_and_direction():
    v = C.judge("residual.depth", [1.0, 1.1, 1.0, 1.05, 1.0], [1.5, 1.6, 1.4, 1.5, 1.55],
                setting="6 blocks")
    assert v.threshold == 0.1 and v.effect == pytest.approx(0.48) and v.word == "holds"
    assert v.claim_id == "residual.depth" and v.claim.endswith("6 blocks")
    with pytest.raises(ValueError, match="judge_ladder"):
        C.judge("evidence.5.rates", [1] * 5, [1] * 5)
    lv = C.judge_ladder("large_models.qk-norm", [(0.3, float("inf"))] * 5, [(0.1, 0.3)] * 5)
    assert lv.word == "not shown" and lv.base == 10 and lv.too_few_seeds


def test_judge_takes_no_threshold_override_without_marking_it_exploratory():
    a, b = [1.0, 1.1, 1.0, 1.05, 1.0], [1.5, 1.6, 1.4, 1.5, 1.55]
    v = C.judge("residual.depth", a, b, threshold=0.5)
    assert v.exploratory and v.threshold == 0.5 and v.text().startswith("exploratory")
    assert not C.judge("residual.depth", a, b).exploratory
    assert not C.judge("residual.depth", a, b, threshold=0.1).exploratory   # the registered
    with pytest.raises(ValueError, match="budget is only for"):
        C.judge("residual.depth", a, b, budget=10)


def test_judge_scales_a_budget_threshold_by_the_registered_rule():
    steps = [30.0, 40, 35, 30, 45], [90.0, 99, 95, 99, 80]
    v = C.judge("evidence.5.ln-speed", *steps, budget=96)
    assert v.threshold == 6.0 and not v.exploratory
    # a threshold passed as such is an override, even when it equals fraction * budget
    assert C.judge("evidence.5.ln-speed", *steps, threshold=5.0).exploratory
    assert C.judge("evidence.5.ln-speed", *steps, threshold=6.0).exploratory
    with pytest.raises(ValueError, match="pass budget="):
        C.judge("evidence.5.ln-speed", *steps)
    with pytest.raises(ValueError, match="budget must be positive"):
        C.judge("evidence.5.ln-speed", *steps, budget=0)


def test_the_principles_replication_is_stamped_with_its_claim(monkeypatch):
    """Its writer records the claim it is judged under (the committed file predates this;
    its hash is in the sidecar)."""
    from layernorm_tutorial.lab.common import numerics_paths
    from layernorm_tutorial.lab.principles import ln_vs_he

    def fake(target, kwargs, paths, with_machine=False):
        return {p: {"result": {"x": [1.0]}, "machine": {"cpu": "test"}} for p in paths}

    monkeypatch.setattr(numerics_paths, "run_on_paths", fake)
    doc = {"lr": {"a": 0.1}, "reported_seeds": [2], "accuracy": {"a": [0.5]},
           "config": {"depth": 2, "epochs": 1}}
    out = ln_vs_he.replicate(doc)
    assert out["claims"] == {ln_vs_he.CLAIM_ID: C.definition_hash(ln_vs_he.CLAIM_ID)}
    assert C.judged_hashes(_load("principles_ln_vs_he_replication.json"),
                           "principles_ln_vs_he_replication.json") == out["claims"]


def test_every_judged_claim_is_confirmed_or_says_why_not():
    plans = {p.claim_id for p in C.CONFIRMATIONS}
    for c in C.CLAIMS:
        if not c.exploratory:
            assert (c.id in plans) != (c.id in C.UNCONFIRMED), c.id
    assert not plans & set(C.UNCONFIRMED)
    lines = C.confirmation_status("large_models")
    assert "large_models.deepnorm: confirmatory (large_models_confirmatory.json)" in lines
    assert any(line.startswith("large_models.time: not confirmed: timing") for line in lines)
    assert "evidence.x.per-digit: exploratory (post hoc)" in C.confirmation_status("evidence")
