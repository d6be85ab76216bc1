"""The book's one verdict method (layernorm_tutorial.lab.common.verdict), replayed by hand."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats

from layernorm_tutorial.lab.common.verdict import MIN_SEEDS, paired_verdict, seed_plan


def test_interval_is_the_paired_t_interval():
    rng = np.random.default_rng(0)
    base = rng.normal(0.9, 0.02, size=7)
    claimed = base + rng.normal(0.01, 0.005, size=7)
    v = paired_verdict(claimed, base, threshold=0.005)
    d = claimed - base
    half = stats.t.ppf(0.975, 6) * d.std(ddof=1) / math.sqrt(7)
    assert v.effect == pytest.approx(d.mean())
    assert (v.low, v.high) == pytest.approx((d.mean() - half, d.mean() + half))
    # the same interval as scipy's paired test
    ci = stats.ttest_rel(claimed, base).confidence_interval(0.95)
    assert (v.low, v.high) == pytest.approx((ci.low, ci.high))


def test_lower_is_better_flips_the_sign():
    fast = np.array([10.0, 12, 11, 9, 10])
    slow = fast + 5
    v = paired_verdict(fast, slow, threshold=1, higher_is_better=False)
    assert v.word == "holds" and v.effect == pytest.approx(5)


def test_bad_inputs_are_refused_in_one_line():
    with pytest.raises(ValueError, match="at least 5 seeds"):
        paired_verdict([1, 2, 3], [1, 2, 3], threshold=0.1)
    with pytest.raises(ValueError, match="same length"):
        paired_verdict(np.ones(5), np.ones(6), threshold=0.1)
    with pytest.raises(ValueError, match="finite"):
        paired_verdict([1, 2, 3, 4, float("nan")], np.ones(5), threshold=0.1)
    with pytest.raises(ValueError, match="threshold"):
        paired_verdict(np.ones(5), np.ones(5), threshold=0)


def test_text_prints_the_interval_next_to_the_word():
    v = paired_verdict([0.95, 0.96, 0.97, 0.96, 0.95], [0.9, 0.91, 0.9, 0.92, 0.9],
                       threshold=0.01, claim="LN beats no norm")
    assert v.text(digits=1, scale=100, unit=" pts") == (
        f"holds: {v.effect * 100:+.1f} pts [{v.low * 100:+.1f}, {v.high * 100:+.1f}], n = 5")


def test_seed_plan_keeps_tuning_seeds_out_of_the_report():
    tuning, reported = seed_plan(6, 3, first=10)
    assert tuning == (10, 11, 12) and reported == tuple(range(13, 19))
    assert not set(tuning) & set(reported)
    with pytest.raises(ValueError, match="n_reported"):
        seed_plan(MIN_SEEDS - 1)


# ---- version 2: symmetric words, equivalence, ladders, Holm -----------------------------------

from layernorm_tutorial.lab.common import verdict as V  # noqa: E402


def _shifted(shift, sd=0.001, n=6, seed=1):
    """Two arms whose paired differences have mean exactly ``shift`` and spread ``sd``."""
    rng = np.random.default_rng(seed)
    base = rng.normal(0.9, 0.02, size=n)
    noise = rng.normal(0.0, sd, size=n)
    noise -= noise.mean()
    return base + shift + noise, base


@pytest.mark.parametrize("shift, sd, word", [
    (0.02, 0.001, "holds"),                 # L > 0, effect >= delta
    (-0.02, 0.001, "contradicted"),         # the mirror image
    (0.002, 0.001, "too small to matter"),  # interval inside (-delta, delta)
    (-0.002, 0.001, "too small to matter"),
    (0.0, 0.02, "not shown"),               # wide interval around 0
    (0.004, 0.003, "not shown"),            # real but small, interval reaches delta
    (-0.004, 0.003, "not shown"),           # the mirror: no longer 'contradicted'
])
def test_the_four_words_are_symmetric(shift, sd, word):
    threshold = 0.005
    claimed, base = _shifted(shift, sd)
    v = paired_verdict(claimed, base, threshold=threshold)
    assert v.word == word
    mirror = paired_verdict(base, claimed, threshold=threshold)
    swap = {"holds": "contradicted", "contradicted": "holds"}
    assert mirror.word == swap.get(word, word)
    assert (mirror.low, mirror.high) == pytest.approx((-v.high, -v.low))


def test_decide_table_edges():
    # exactly the conditions of the table, including the boundaries
    assert V.decide(0.1, 2.0, 1.0, 1.0, 1.0) == "holds"           # mean == delta
    assert V.decide(0.0, 2.0, 1.5, 1.5, 1.0) == "not shown"       # L == 0 is not > 0
    assert V.decide(-2.0, -0.1, -1.0, -1.0, 1.0) == "contradicted"
    assert V.decide(-0.99, 0.99, 0.0, 0.0, 1.0) == "too small to matter"
    assert V.decide(-1.0, 0.5, 0.0, 0.0, 1.0) == "not shown"      # L == -delta
    assert V.decide(0.2, 1.4, 0.8, 0.8, 1.0) == "not shown"       # significant, size open
    assert set(V.WORD_MEANINGS) == set(V.WORDS) and len(V.WORDS) == 4


def test_clears_threshold_and_p_values_agree_with_the_interval():
    claimed, base = _shifted(0.02, 0.004)
    v = paired_verdict(claimed, base, threshold=0.01)
    assert v.word == "holds" and v.clears_threshold == (v.low >= 0.01)
    d = claimed - base
    assert v.p == pytest.approx(stats.ttest_rel(claimed, base).pvalue)
    assert v.p < 0.05
    small = paired_verdict(*_shifted(0.001, 0.001), threshold=0.01)
    assert small.word == "too small to matter" and small.p < 0.05
    unclear = paired_verdict(*_shifted(0.0, 0.03), threshold=0.01)
    assert unclear.word == "not shown" and unclear.p >= 0.05
    assert v.effect == pytest.approx(d.mean())


def test_equivalence_p_is_below_alpha_exactly_when_the_interval_is_inside():
    rng = np.random.default_rng(5)
    for _ in range(200):
        d = rng.normal(rng.uniform(-0.02, 0.02), rng.uniform(0.001, 0.02), size=5)
        v = paired_verdict(d, np.zeros(5), threshold=0.01)
        _, peq = V._t_p_values(d, 0.01)
        inside = -0.01 < v.low and v.high < 0.01
        assert (peq < 0.05) == inside


def test_rung_bounds():
    ladder = [0.01, 0.03, 0.1, 0.3]
    assert V.rung_bounds(ladder, 0.3) == (0.1, 0.3)
    assert V.rung_bounds(ladder, 0.01) == (0.0, 0.01)
    assert V.rung_bounds(ladder, None) == (0.3, math.inf)
    assert V.rung_bounds(ladder, 0.1, "last_success") == (0.1, 0.3)
    assert V.rung_bounds(ladder, 0.3, "last_success") == (0.3, math.inf)
    assert V.rung_bounds(ladder, None, "last_success") == (0.0, 0.01)
    with pytest.raises(ValueError, match="rung"):
        V.rung_bounds(ladder, 0.2)
    with pytest.raises(ValueError, match="kind"):
        V.rung_bounds(ladder, 0.1, "middle")


def test_ladder_audit_example_rnn_bn_vs_none():
    # BN fails in (0.1, 0.3], none in (0.03, 0.1]: the ratio is anywhere in (1, 10)
    ladder = [0.001, 0.003, 0.01, 0.03, 0.1, 0.3, 1.0]
    bn = [V.rung_bounds(ladder, 0.3)] * 5
    none = [V.rung_bounds(ladder, 0.1)] * 5
    v = V.ladder_verdict(bn, none, threshold=1.0, base=2)
    assert v.median_low == pytest.approx(0.0) and v.median_high == pytest.approx(math.log2(10))
    assert v.word == "not shown" and v.too_few_seeds
    assert (v.low, v.high) == (-math.inf, math.inf)
    assert v.p == pytest.approx(0.0625)
    assert v.text(2) == ("not shown: ratio in (1, 10), 95% (0, inf), n = 5 "
                         "(too few seeds for a ladder)")


def test_ladder_audit_example_qk_norm_is_not_a_factor():
    # QK-norm never failed up to 0.3, no norm failed at 0.3: ratio in (1, inf) on every seed
    ladder = [0.01, 0.03, 0.1, 0.3]
    qk = [V.rung_bounds(ladder, None)] * 6
    none = [V.rung_bounds(ladder, 0.3)] * 6
    v = V.ladder_verdict(qk, none, threshold=0.25, base=10)
    assert v.low == pytest.approx(0.0) and v.high == math.inf
    # six seeds show the direction (p = 2/64) but not a quarter of a decade
    assert v.word == "not shown" and v.p == pytest.approx(2 / 64)


def test_ladder_holds_and_is_symmetric_with_enough_seeds():
    ladder = [0.001, 0.003, 0.01, 0.03, 0.1, 0.3, 1.0]
    a = [V.rung_bounds(ladder, 1.0)] * 6          # (0.3, 1]
    b = [V.rung_bounds(ladder, 0.03)] * 6         # (0.01, 0.03]: ratio in (10, 100)
    v = V.ladder_verdict(a, b, threshold=1.0)
    assert v.word == "holds" and v.low == pytest.approx(math.log2(10))
    w = V.ladder_verdict(b, a, threshold=1.0)
    assert w.word == "contradicted" and w.high == pytest.approx(-math.log2(10))
    same = V.ladder_verdict([(0.3, 1.0)] * 8, [(0.3, 1.0)] * 8, threshold=2.0)
    assert same.word == "too small to matter"   # ratio in (0.3, 3.3), within a factor of 4
    assert V.ladder_min_seeds() == 6


def test_ladder_refuses_bad_bounds():
    with pytest.raises(ValueError, match="shape"):
        V.ladder_verdict([(1, 2)] * 5, [(1, 2)] * 6, threshold=1)
    with pytest.raises(ValueError, match="lo <= hi"):
        V.ladder_verdict([(2, 1)] * 5, [(1, 2)] * 5, threshold=1)
    with pytest.raises(ValueError, match="threshold"):
        V.ladder_verdict([(1, 2)] * 5, [(1, 2)] * 5, threshold=-1)


def test_holm_against_a_hand_computation():
    # sorted 0.005, 0.01, 0.03, 0.04: x4 = 0.02, x3 = 0.03, x2 = 0.06, x1 -> max(.06, .04)
    assert V.holm_adjusted([0.01, 0.04, 0.03, 0.005]) == pytest.approx([0.03, 0.06, 0.06, 0.02])

    def fake(p, word="holds", exploratory=False):
        return V.Verdict("c", word, 1.0, 0.5, 1.5, 0.1, 5, (1.0,) * 5, p=p,
                         exploratory=exploratory)

    vs = [fake(0.01), fake(0.04), fake(0.03), fake(0.005), fake(0.001, exploratory=True),
          fake(0.001, word="not shown")]
    # five confirmatory p-values: 0.001, 0.005, 0.01, 0.03, 0.04 -> x5, x4, x3: 0.005, 0.02,
    # 0.03 survive; 0.03 x 2 = 0.06 stops
    assert V.holm(vs) == [True, False, False, True, False, False]
    assert "2 of the 4 decided" in V.holm_sentence(vs)


def test_verdict_table_fits_80_columns_and_marks_survivors():
    v = paired_verdict([0.95, 0.96, 0.97, 0.96, 0.95], [0.9, 0.91, 0.9, 0.92, 0.9],
                       threshold=0.01)
    w = paired_verdict([0.9, 0.91, 0.9, 0.92, 0.9], [0.9, 0.92, 0.89, 0.9, 0.91],
                       threshold=0.01)
    table = V.verdict_table([("LN beats no norm, a long label of a setting", v,
                              {"digits": 1, "scale": 100, "unit": " pts"}),
                             ("short", w, {})])
    assert all(len(line) <= 80 for line in table.splitlines())
    assert f"{V.HOLM_MARK} " + v.text(1, 100, " pts") in table
    assert "  " + w.text() in table
    assert "survives a Holm correction" in table


def test_exploratory_text_says_so():
    v = paired_verdict([0.95, 0.96, 0.97, 0.96, 0.95], [0.9, 0.91, 0.9, 0.92, 0.9],
                       threshold=0.01, exploratory=True)
    assert v.text().startswith("exploratory, holds:")
    assert V.holm([v]) == [False]


def test_holm_sentence_reads_right_for_one_verdict_and_none_decided():
    undecided = V.paired_verdict([1, 2, 3, 4, 5], [1.5, 1.0, 3.5, 3.0, 5.5], threshold=0.5)
    assert undecided.word == "not shown"
    sentence = V.holm_sentence([undecided])
    assert "this chapter's 1 verdict (" in sentence
    assert "no word is decided, so none is marked." in sentence
