"""The claims registry (layernorm_tutorial.lab.common.claims): definitions fixed before the data."""

from __future__ import annotations

import json
import shutil
import subprocess

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


def test_registration_note_orders_registration_and_results():
    note = C.registration_note("large_models.norms", _load("large_models_results.json"))
    assert note.startswith("registered 2026-11-25 13:49 (8ac62eb), results")
    doc = _load("rnn_race.json")
    if (doc.get("machine") or {}).get("date") is None:   # the committed legacy file
        assert C.registration_note("rnn.race", doc).endswith("registered with the data")
    later = {"machine": {"date": "2030-01-01T00:00:00+00:00"}}
    assert C.registration_note("rnn.race", later).endswith("registered first")
    earlier = {"machine": {"date": "2020-01-01T00:00:00+00:00"}}
    assert C.registration_note("rnn.race", earlier).endswith("registered after the data")


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


@pytest.mark.skipif(shutil.which("git") is None or not (C._REPO / ".git").exists(),
                    reason="needs the git history of the repository")
def test_recorded_registrations_match_git():
    """Each recorded registration commit exists, has the recorded date, and is where the
    threshold first entered the package (it contains the claim's threshold file)."""
    for c in C.CLAIMS:
        if c.registered is None:
            continue
        commit, date = c.registered
        out = subprocess.run(["git", "show", "-s", "--format=%aI", commit], cwd=C._REPO,
                             capture_output=True, text=True)
        assert out.returncode == 0, f"{c.id}: commit {commit} not in the history"
        assert out.stdout.strip() == date, f"{c.id}: {commit} is dated {out.stdout.strip()}"
    for name, rec in C.JUDGED.items():
        commit, date = rec["data_commit"]
        log = subprocess.run(["git", "log", "--format=%h", "--", f"book/data/{name}"],
                             cwd=C._REPO, capture_output=True, text=True).stdout.split()
        assert any(h.startswith(commit) or commit.startswith(h) for h in log), (
            f"{name}: {commit} did not change the file")
