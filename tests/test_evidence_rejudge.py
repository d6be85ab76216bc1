"""The re-judged list: every stored verdict of the book under the three verdict rules."""

from __future__ import annotations

import json

import numpy as np
import pytest

from layernorm_tutorial.lab.common import verdict as V
from layernorm_tutorial.lab.evidence import rejudge, side_experiments
from layernorm_tutorial.lab.evidence.results import load_results


@pytest.mark.parametrize("low, high, mean, word", [
    (0.1, 2.0, 1.5, "holds"),
    (0.1, 2.0, 0.5, "not shown"),       # real but the mean is below the threshold
    (-2.0, -0.1, -0.2, "contradicted"),  # the first rule had no threshold on this side
    (-0.5, 0.5, 0.0, "not shown"),
])
def test_the_first_rule(low, high, mean, word):
    assert rejudge.v1_word(low, high, mean, 1.0) == word


@pytest.mark.parametrize("low, high, mean, v2, v3", [
    (0.5, 2.6, 1.6, "holds", "direction shown"),          # the estimate clears, L does not
    (-4.4, -0.4, -2.4, "contradicted", "reverse shown"),
    (0.1, 1.8, 0.9, "not shown", "direction shown"),      # L > 0, estimate below delta
    (1.2, 2.6, 1.9, "holds", "holds"),
    (-0.4, 0.6, 0.1, "too small to matter", "too small to matter"),
])
def test_the_second_rule_against_the_third(low, high, mean, v2, v3):
    assert rejudge.v2_word(low, high, mean, mean, 1.0) == v2
    assert V.decide(low, high, 1.0) == v3


def test_v1_and_v3_differ_where_the_rules_changed():
    v = rejudge.v1_verdict([1.0, 1.1, 0.9, 1.0, 1.05], [1.2, 1.3, 1.1, 1.25, 1.2], 1.0)
    assert v.word == "contradicted" and v.effect == pytest.approx(-0.2)
    assert V.decide(v.low, v.high, 1.0) == "too small to matter"


def test_v2_judgement_reproduces_the_second_rules_p():
    # v2 tested holds against zero, v3 against the threshold
    d = np.array([0.8, 1.5, 1.1, 1.6, 1.3])
    v = V.paired_verdict(d, np.zeros(5), threshold=1.0)
    word, p = rejudge.v2_judgement(v)
    assert word == "holds" and v.word == "direction shown"
    p_all = V.t_p_values(d, 1.0)
    assert p == pytest.approx(p_all["zero"]) and v.p == pytest.approx(p_all["zero"])
    w = V.paired_verdict(d + 1, np.zeros(5), threshold=1.0)
    assert w.word == "holds" and w.p == pytest.approx(V.t_p_values(d + 1, 1.0)["above"])
    assert rejudge.v2_judgement(w)[1] == pytest.approx(V.t_p_values(d + 1, 1.0)["zero"])


def test_v2_ladder_word_used_the_medians_bounds():
    ladder = [0.001, 0.003, 0.01, 0.03, 0.1, 0.3, 1.0]
    a = [V.rung_bounds(ladder, 0.3)] * 8
    b = [V.rung_bounds(ladder, 0.01)] * 7 + [V.rung_bounds(ladder, 0.1)]
    v = V.ladder_verdict(a, b, threshold=1.0)
    assert rejudge.v2_judgement(v)[0] == "holds" and v.word == "direction shown"


@pytest.fixture(scope="module")
def stored():
    return json.loads(rejudge.COMMITTED_PATH.read_text())


def test_stored_list_is_consistent(stored):
    items = stored["items"]
    assert stored["command"] == rejudge.COMMAND
    assert set(stored["config"]["results_judged"]) == set(rejudge.SOURCES)
    for i in items:
        for version in ("v2", "v3"):
            text = i[f"{version}_text"].removeprefix("exploratory, ")
            assert text.startswith(i[version] + ":"), i
        assert i["v1"] in V.WORDS and i["v2"] in V.WORDS and i["v3"] in V.WORDS
        if not i["family"]:
            assert not i["v2_mark"] and not i["v3_mark"]
        for version in ("v2", "v3"):
            assert not (i[f"{version}_mark"] and i[version] == "not shown")
    assert {i["run"] for i in items} == set(rejudge.RUNS)
    chapters = ("evidence", "principles", "rnn", "residual", "large_models")
    family = {c: sum(i["chapter"] == c and i["family"] and i["run"] == "earlier"
                     for i in items) for c in chapters}
    # the chapters' families (the audit's counts) and their marks under the second rule
    assert family == {"evidence": 32, "principles": 1, "rnn": 24, "residual": 9,
                      "large_models": 13}
    holm2 = {c: sum(i["v2_mark"] for i in items if i["chapter"] == c and i["run"] == "earlier")
             for c in family}
    assert holm2 == {"evidence": 6, "principles": 0, "rnn": 2, "residual": 9,
                     "large_models": 4}
    # the confirmatory runs: every registered claim with a confirmatory plan, in the family
    conf = {c: sum(i["chapter"] == c and i["run"] == "confirmatory" for i in items)
            for c in chapters}
    assert conf == {"evidence": 32, "principles": 1, "rnn": 24, "residual": 9,
                    "large_models": 8}
    assert all(i["family"] and not i["exploratory"] for i in items
               if i["run"] == "confirmatory")
    assert stored["config"]["method_version"] == V.METHOD_VERSION


def test_stored_list_is_what_the_stored_runs_give_now(stored):
    """The list equals what the rule computes from the stored files now (so a change of the
    rule or of a file without re-running the command fails here)."""
    fresh = rejudge.rejudge_all()
    keys = ("chapter", "setting", "family", "v1", "v2", "v3", "v2_mark", "v3_mark",
            "v3_text")
    assert [tuple(i[k] for k in keys) for i in fresh] == \
        [tuple(i[k] for k in keys) for i in stored["items"]]
    assert np.allclose([i["v3_p"] for i in fresh], [i["v3_p"] for i in stored["items"]],
                       rtol=1e-4)


def test_evidence_items_are_the_chapters_verdicts(stored):
    """The evidence family equals the rows of the chapter's verdict table."""
    from layernorm_tutorial.lab.evidence import analysis

    doc = load_results()
    rows = analysis.verdict_rows(doc) + analysis.side_verdict_rows(
        side_experiments.init_scale_result(side_experiments.load_side_results()),
        side_experiments.combination_result(side_experiments.load_side_results()))
    family = [i for i in stored["items"]
              if i["chapter"] == "evidence" and i["family"] and i["run"] == "earlier"]
    assert [i["v3"] for i in family] == [r["verdict"].word for r in rows]


def test_confirmatory_items_are_the_chapters_confirmatory_verdicts_and_marks(stored):
    """Each chapter's confirmatory items: the words, texts and marks of the confirmatory
    pairs the chapters print (lab.confirmatory.verdicts), large_models' marks over its
    whole family of 13 (8 confirmatory verdicts and the 5 without a confirmatory run)."""
    from layernorm_tutorial.lab.confirmatory import verdicts

    pairs = {"evidence": verdicts.evidence_pairs(), "principles": verdicts.principles_pairs(),
             "rnn": verdicts.rnn_pairs(), "residual": verdicts.residual_pairs(),
             "large_models": verdicts.large_models_chapter_pairs()}
    for chapter, ps in pairs.items():
        items = [i for i in stored["items"]
                 if i["chapter"] == chapter and i["run"] == "confirmatory"]
        assert [i["v3"] for i in items] == [p.confirmatory.word for p in ps], chapter
        assert [i["v3_mark"] for i in items] == [p.mark for p in ps], chapter
        assert [i["claim_id"] for i in items] == [p.claim_id for p in ps], chapter


def test_other_verdicts_count_in_a_family_without_being_items():
    """with_marks(others=...): verdicts outside the list raise the family's m."""
    d = np.array([0.8, 1.5, 1.1, 1.6, 1.3])
    v = V.paired_verdict(d + 0.6, np.zeros(5), threshold=1.0)   # holds, p about 0.004
    assert v.word == "holds" and 0.05 / 41 < v.p < 0.05
    item = rejudge._item("evidence", "x", v, {"digits": 2})
    alone = rejudge.with_marks([item])[0]["v3_mark"]
    crowded = rejudge.with_marks(
        [item], others={("evidence", "earlier"): [v] * 40})[0]["v3_mark"]
    assert alone and not crowded
    with pytest.raises(ValueError, match="run must be one of"):
        rejudge._item("evidence", "x", v, {"digits": 2}, run="later")


def test_changed_and_count_tables(stored):
    items = stored["items"]
    text = rejudge.changed_table(items)
    assert all(len(line) <= 80 for line in text.splitlines())
    assert text.count(" -> ") == len(rejudge.changed(items))
    assert "holds -> direction shown: +1.6 pts [+0.5, +2.6]" in text
    counts = rejudge.count_table(items).splitlines()
    assert counts[0].split()[:4] == ["chapter", "run", "verdicts", "family"]
    assert len(counts) == 11 and all(len(line) <= 80 for line in counts)
    conf = rejudge.changed_table(items, run="confirmatory")
    n_conf = len(rejudge.changed(items, run="confirmatory"))
    assert n_conf and conf.count(" -> ") == conf.count(", confirmatory: ") == n_conf
    assert "confirmatory" not in rejudge.changed_table(items, run="earlier")
