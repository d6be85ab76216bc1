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
    (0.02, 0.001, "holds"),                 # the whole interval clears delta
    (-0.02, 0.001, "contradicted"),         # the mirror image
    (0.002, 0.001, "too small to matter"),  # interval inside (-delta, delta)
    (-0.002, 0.001, "too small to matter"),
    (0.0, 0.02, "not shown"),               # wide interval around 0
    (0.004, 0.003, "direction shown"),      # real but small, interval reaches delta
    (-0.004, 0.003, "reverse shown"),       # the mirror
    (0.006, 0.003, "direction shown"),      # estimate >= delta, L < delta (v2: holds)
    (-0.006, 0.003, "reverse shown"),       # the mirror (v2: contradicted)
])
def test_the_six_words_are_symmetric(shift, sd, word):
    threshold = 0.005
    claimed, base = _shifted(shift, sd)
    v = paired_verdict(claimed, base, threshold=threshold)
    assert v.word == word
    mirror = paired_verdict(base, claimed, threshold=threshold)
    assert mirror.word == V.MIRROR[word]
    assert (mirror.low, mirror.high) == pytest.approx((-v.high, -v.low))


def _table_word(low, high, delta):
    """The table of the module docstring, written out condition by condition (no order)."""
    conditions = {
        "holds": delta <= low,
        "contradicted": high <= -delta,
        "too small to matter": -delta < low and high < delta,
        "direction shown": 0 < low < delta <= high,
        "reverse shown": low <= -delta < high < 0,
        "not shown": low <= 0 <= high and (low <= -delta or high >= delta),
    }
    met = [w for w, ok in conditions.items() if ok]
    assert len(met) == 1, (low, high, delta, met)   # disjoint and covering
    return met[0]


def test_decide_is_the_table_disjoint_covering_and_symmetric():
    delta = 1.0
    # every pair of ends on a grid that contains 0, +-delta and points around them
    ends = sorted({0.0, delta, -delta, 0.5, -0.5, 1.5, -1.5, 2.5, -2.5, 1e-9, -1e-9,
                   math.inf, -math.inf})
    for low in ends:
        for high in ends:
            if low > high:
                continue
            word = V.decide(low, high, delta)
            assert word == _table_word(low, high, delta)
            assert V.decide(-high, -low, delta) == V.MIRROR[word]
    rng = np.random.default_rng(3)
    for low, width, delta in zip(rng.normal(0, 2, 2000), rng.exponential(1.5, 2000),
                                 rng.uniform(0.1, 2, 2000), strict=True):
        word = V.decide(low, low + width, delta)
        assert word == _table_word(low, low + width, delta)
        assert V.decide(-low - width, -low, delta) == V.MIRROR[word]
    assert set(V.WORD_MEANINGS) == set(V.WORDS) == set(V.MIRROR) and len(V.WORDS) == 6
    assert V.METHOD_VERSION == 3


def test_no_word_hangs_on_the_point_estimate():
    # audit finding F5: intervals that do not clear delta, whose estimate does (v2: holds
    # or contradicted); version 3 gives the lesser words
    assert V.decide(0.078, 0.127, 0.1) == "direction shown"     # residual, 6 blocks
    assert V.decide(0.069, 0.140, 0.1) == "direction shown"     # residual, warm-up
    assert V.decide(-4.4, -0.4, 2.0) == "reverse shown"        # rnn, epoch 6 (pts)
    assert V.decide(0.5, 2.6, 1.0) == "direction shown"        # evidence, batch 32
    # and the boundaries: L == delta holds, H == -delta is contradicted, L == 0 is not > 0
    assert V.decide(1.0, 3.0, 1.0) == "holds"
    assert V.decide(-3.0, -1.0, 1.0) == "contradicted"
    assert V.decide(0.0, 3.0, 1.0) == "not shown"
    assert V.decide(-1.0, 0.5, 1.0) == "not shown"                   # L == -delta
    # too small to matter comes before direction shown (residual, pre-LN, first rate)
    assert V.decide(0.05, 0.08, 0.1) == "too small to matter"
    with pytest.raises(ValueError, match="low <= high"):
        V.decide(1.0, 0.0, 1.0)


def test_clears_threshold_and_p_values_agree_with_the_interval():
    claimed, base = _shifted(0.02, 0.004)
    v = paired_verdict(claimed, base, threshold=0.01)
    assert v.word == "holds" and v.clears_threshold and v.low >= 0.01
    d = claimed - base
    # the p behind holds tests mean <= delta: scipy's one-sided test, doubled
    one_sided = stats.ttest_1samp(d, 0.01, alternative="greater").pvalue
    assert v.p == pytest.approx(2 * one_sided)
    assert v.p < 0.05
    small = paired_verdict(*_shifted(0.001, 0.001), threshold=0.01)
    assert small.word == "too small to matter" and small.p < 0.05
    unclear = paired_verdict(*_shifted(0.0, 0.03), threshold=0.01)
    assert unclear.word == "not shown" and unclear.p >= 0.05
    direction = paired_verdict(*_shifted(0.012, 0.008), threshold=0.01)
    assert direction.word == "direction shown" and not direction.clears_threshold
    assert direction.p == pytest.approx(stats.ttest_rel(*_shifted(0.012, 0.008)).pvalue)
    assert v.effect == pytest.approx(d.mean())


def test_each_words_p_is_below_alpha_exactly_when_its_condition_holds():
    rng = np.random.default_rng(5)
    for _ in range(300):
        d = rng.normal(rng.uniform(-0.03, 0.03), rng.uniform(0.001, 0.02), size=5)
        v = paired_verdict(d, np.zeros(5), threshold=0.01)
        p = V.t_p_values(d, 0.01)
        assert (p["above"] <= 0.05) == (v.low >= 0.01)
        assert (p["below"] <= 0.05) == (v.high <= -0.01)
        assert (p["equivalence"] < 0.05) == (-0.01 < v.low and v.high < 0.01)
        assert (p["zero"] < 0.05) == (v.low > 0 or v.high < 0)
        # a decided word is exactly a p below 5%
        assert v.decided == (v.p <= 0.05)


@pytest.mark.parametrize("n, floor", [(5, 0.0625), (6, 0.03125), (8, 2 / 2 ** 8)])
def test_no_distribution_free_paired_test_decides_five_seeds(n, floor):
    got = V.distribution_free_floor(n)
    assert set(got) == {"sign test", "Wilcoxon signed-rank", "sign-flip permutation"}
    assert got == pytest.approx(dict.fromkeys(got, floor))
    # the signed-rank floor is scipy's own exact test on five positive differences
    assert stats.wilcoxon([0.3, 1.2, 0.7, 2.0, 0.1]).pvalue == pytest.approx(0.0625)
    with pytest.raises(ValueError, match="n must be"):
        V.distribution_free_floor(0)


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


def test_ladder_audit_example_qk_norm_is_a_direction_not_a_factor():
    # QK-norm never failed up to 0.3, no norm failed at 0.3: ratio in (1, inf) on every seed
    ladder = [0.01, 0.03, 0.1, 0.3]
    qk = [V.rung_bounds(ladder, None)] * 6
    none = [V.rung_bounds(ladder, 0.3)] * 6
    v = V.ladder_verdict(qk, none, threshold=0.25, base=10)
    assert v.low == pytest.approx(0.0) and v.high == math.inf
    # six seeds show the direction (p = 2/64; the open lower end 0 counts as above 0) but
    # not a quarter of a decade: version 2 said 'not shown', version 3 'direction shown'
    assert v.word == "direction shown" and v.p == pytest.approx(2 / 64)
    w = V.ladder_verdict(none, qk, threshold=0.25, base=10)
    assert w.word == "reverse shown" and w.p == pytest.approx(2 / 64)


def test_ladder_holds_and_is_symmetric_with_enough_seeds():
    ladder = [0.001, 0.003, 0.01, 0.03, 0.1, 0.3, 1.0]
    a = [V.rung_bounds(ladder, 1.0)] * 6          # (0.3, 1]
    b = [V.rung_bounds(ladder, 0.03)] * 6         # (0.01, 0.03]: ratio in (10, 100)
    v = V.ladder_verdict(a, b, threshold=1.0)
    assert v.word == "holds" and v.low == pytest.approx(math.log2(10))
    assert v.p == pytest.approx(2 / 64)
    w = V.ladder_verdict(b, a, threshold=1.0)
    assert w.word == "contradicted" and w.high == pytest.approx(-math.log2(10))
    same = V.ladder_verdict([(0.3, 1.0)] * 8, [(0.3, 1.0)] * 8, threshold=2.0)
    assert same.word == "too small to matter"   # ratio in (0.3, 3.3), within a factor of 4
    assert V.ladder_min_seeds() == 6


def test_ladder_holds_needs_the_interval_not_the_median():
    # seven seeds two rungs apart (ratio > 10), one seed one rung apart (ratio in (1, 10)):
    # the median's bounds clear a factor of two, the interval's lower end (the seed one rung
    # apart) does not, so version 2 said holds and version 3 says direction shown
    ladder = [0.001, 0.003, 0.01, 0.03, 0.1, 0.3, 1.0]
    a = [V.rung_bounds(ladder, 0.3)] * 8
    b = [V.rung_bounds(ladder, 0.01)] * 7 + [V.rung_bounds(ladder, 0.1)]
    v = V.ladder_verdict(a, b, threshold=1.0)
    assert v.median_low >= 1.0 and v.low < 1.0 < v.high
    assert v.word == "direction shown"


def test_ladder_open_ends_at_the_threshold_lie_beyond_it():
    # per-seed ratios in (1/2, 2) exactly: the open bounds say |log2 ratio| < 1 on every
    # seed, so with a threshold of one factor of two the interval is inside: too small
    v = V.ladder_verdict([(0.2, 0.4)] * 8, [(0.2, 0.4)] * 8, threshold=1.0)
    assert (v.low, v.high) == (-1.0, 1.0)
    assert v.word == "too small to matter" and v.p <= 0.05


def test_ladder_decided_exactly_when_its_sign_test_is_below_alpha():
    rng = np.random.default_rng(11)
    ladder = [0.001, 0.003, 0.01, 0.03, 0.1, 0.3, 1.0]
    for _ in range(300):
        n = int(rng.integers(6, 11))
        a, b = ([V.rung_bounds(ladder, float(x)) for x in rng.choice(ladder, size=n)]
                for _ in range(2))
        v = V.ladder_verdict(a, b, threshold=float(rng.choice([0.5, 1.0, 2.0])))
        assert v.decided == (v.p <= 0.05), v


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
    assert V.bonferroni_adjusted([0.01, 0.04, 0.3]) == pytest.approx([0.03, 0.12, 0.9])


def _fake(p, word="holds", exploratory=False):
    return V.Verdict("c", word, 1.0, 0.5, 1.5, 0.1, 5, (1.0,) * 5, p=p, exploratory=exploratory)


def test_family_marks_are_bonferroni_over_the_confirmatory_verdicts():
    vs = [_fake(0.01), _fake(0.04), _fake(0.03), _fake(0.005), _fake(0.001, exploratory=True),
          _fake(0.001, word="not shown")]
    # five confirmatory verdicts: marked when p <= 0.05 / 5 and the word is decided
    assert V.family_marks(vs) == [True, False, False, True, False, False]
    assert "2 of the 4 decided" in V.family_sentence(vs)
    assert "Bonferroni" in V.family_sentence(vs)
    # where Holm's step-down would mark the second verdict (0.04 <= 0.05 / 1), Bonferroni
    # does not (0.04 > 0.05 / 2): Holm's guarantee does not cover a test the word picks
    pair = [_fake(0.001, "direction shown"), _fake(0.04, "holds")]
    assert V.holm_adjusted([v.p for v in pair]) == pytest.approx([0.002, 0.04])
    assert V.family_marks(pair) == [True, False]
    assert V.holm is V.family_marks and V.HOLM_MARK == V.MARK   # the old names


def test_word_chosen_tests_need_bonferroni_not_holm():
    """Two claims whose true effect is exactly delta: each word is wrong only as *holds*
    (the whole interval above delta) or *too small to matter*, 2.5% each; the right word,
    *direction shown*, comes with a tiny p. Holm then tests every wrong word at the full 5%
    (the other claim's right word goes first), so it marks a wrong word about twice as often
    as it should; Bonferroni stays within 5%."""
    rng = np.random.default_rng(0)
    delta, n, reps = 1.0, 8, 1500
    wrong_holm = wrong_bonferroni = 0
    for _ in range(reps):
        vs = [paired_verdict(delta + rng.normal(0, 0.2, n), np.zeros(n), threshold=delta)
              for _ in range(2)]
        wrong = [v.word in ("holds", "too small to matter") for v in vs]
        holm_marks = [v.decided and a <= 0.05
                      for v, a in zip(vs, V.holm_adjusted([v.p for v in vs]), strict=True)]
        wrong_holm += any(w and m for w, m in zip(wrong, holm_marks, strict=True))
        wrong_bonferroni += any(w and m for w, m in zip(wrong, V.family_marks(vs),
                                                          strict=True))
    se = math.sqrt(0.05 * 0.95 / reps)
    assert wrong_bonferroni / reps <= 0.05 + 2 * se
    assert wrong_holm / reps > 0.05 + 2 * se


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
    assert "survives a Bonferroni correction" in table


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
