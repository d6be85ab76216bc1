"""Which verdicts of a chapter are confirmatory: the lines and glue values the chapters print."""

from __future__ import annotations

import dataclasses

import pytest

from layernorm_tutorial.lab.common import claims
from layernorm_tutorial.lab.common import confirmation_report as C
from layernorm_tutorial.lab.confirmatory import verdicts as V


@pytest.fixture(scope="module")
def residual_pairs():
    return V.residual_pairs()


def test_seed_range():
    assert C.seed_range((101, 102, 103, 104, 105)) == "101–105"
    assert C.seed_range((99, 100)) == "99, 100"
    assert C.seed_range((1, 3, 4)) == "1, 3, 4"


@pytest.mark.parametrize("chapter", ["evidence", "principles", "rnn", "residual",
                                     "large_models"])
def test_every_claim_of_the_chapter_is_listed_with_its_status(chapter):
    text = C.confirmation_lines(chapter)
    assert all(len(line) <= 80 for line in text.splitlines())
    for c in claims.family(chapter):
        assert f"{c.id}: " in text
        if c.id in claims.UNCONFIRMED:   # the reason is printed (large_models: timing)
            assert claims.UNCONFIRMED[c.id].split(":")[0][:30] in text.replace("\n    ", " ")
    for commit, date, *_ in C.registered_claims(chapter):
        assert f"({commit}), before the runs" in text and date[:10] in text


def test_registration_lines_and_counts_come_from_the_pairs(residual_pairs):
    text = C.confirmation_lines("residual", residual_pairs)
    flat = text.replace("\n    ", " ")
    assert residual_pairs[0].registration.split(",")[0] in flat
    assert "registered first" in flat
    marked = sum(p.mark for p in residual_pairs)
    assert f"9 confirmatory, 9 of them decided, {marked} marked †" in flat


def test_principles_names_its_fresh_tuning_seeds():
    flat = C.confirmation_lines("principles").replace("\n    ", " ")
    assert "chosen again on fresh tuning seeds 99, 100" in flat


def test_exploratory_claims_say_why_they_have_no_confirmatory_run():
    flat = C.confirmation_lines("evidence").replace("\n    ", " ")
    assert "evidence.x.per-digit: exploratory (post hoc)" in flat
    assert "so no run can confirm them" in flat
    assert "so no run can confirm them" not in C.confirmation_lines("rnn")


def test_pairs_of_another_chapter_are_refused(residual_pairs):
    with pytest.raises(ValueError, match="is not a claim of 'rnn'"):
        C.confirmation_lines("rnn", residual_pairs)
    alien = dataclasses.replace(residual_pairs[0], claim_id="large_models.time")
    with pytest.raises(ValueError):
        C.confirmation_lines("residual", [alien])


def test_glue_names_the_one_registration():
    assert C.confirmation_glue("rnn", "rnn-conf") == {
        "rnn-conf-commit": claims.CONFIRMATIONS_REGISTERED[0],
        "rnn-conf-date": claims.CONFIRMATIONS_REGISTERED[1][:10],
        "rnn-conf-seeds": "101–105"}
    with pytest.raises(ValueError, match="expected one registration"):
        C.confirmation_glue("large_models")   # two commits: 6001863 and bdd19ed
