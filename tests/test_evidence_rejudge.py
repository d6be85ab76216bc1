"""The re-judged list: every stored verdict under the first and the second verdict rule."""

from __future__ import annotations

import json

import numpy as np
import pytest

from layernorm_tutorial.lab.common.verdict import decide
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


def test_v1_and_v2_differ_only_where_the_rule_changed():
    v = rejudge.v1_verdict([1.0, 1.1, 0.9, 1.0, 1.05], [1.2, 1.3, 1.1, 1.25, 1.2], 1.0)
    assert v.word == "contradicted" and v.effect == pytest.approx(-0.2)
    assert decide(v.low, v.high, v.effect, v.effect, 1.0) == "too small to matter"


def test_stored_list_is_consistent():
    doc = json.loads(rejudge.COMMITTED_PATH.read_text())
    items = doc["items"]
    assert doc["command"] == rejudge.COMMAND and len(items) == 97
    assert all(i["changed"] == (i["old"] != i["new"]) for i in items)
    assert all(i["new_text"].removeprefix("exploratory, ").startswith(i["new"] + ":")
               for i in items)
    by_chapter = {c: sum(i["chapter"] == c for i in items)
                  for c in ("evidence", "principles", "rnn", "residual", "large_models")}
    assert by_chapter == {"evidence": 53, "principles": 1, "rnn": 24, "residual": 9,
                          "large_models": 10}
    assert not any(i["holm"] for i in items if i["exploratory"] or i["new"] == "not shown")


def test_evidence_items_recompute_from_the_stored_runs():
    """The evidence part of the list equals what the chapter computes from its files now."""
    stored = [i for i in json.loads(rejudge.COMMITTED_PATH.read_text())["items"]
              if i["chapter"] == "evidence"]
    fresh = rejudge.with_holm(rejudge.rejudge_evidence(
        load_results(), side_experiments.load_side_results()))
    assert [(i["setting"], i["old"], i["new"], i["holm"]) for i in fresh] == \
        [(i["setting"], i["old"], i["new"], i["holm"]) for i in stored]
    assert np.isclose([i["p"] for i in fresh], [i["p"] for i in stored], rtol=1e-4).all()
