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


@pytest.mark.parametrize("shift, threshold, word", [
    (0.02, 0.005, "holds"),          # interval above 0, effect above threshold
    (0.002, 0.005, "not shown"),     # real but smaller than the practical size
    (0.0, 0.005, "not shown"),       # interval contains 0
    (-0.02, 0.005, "contradicted"),  # interval wholly on the other side
])
def test_the_three_words(shift, threshold, word):
    rng = np.random.default_rng(1)
    base = rng.normal(0.9, 0.02, size=6)
    noise = rng.normal(0.0, 0.001, size=6)
    noise -= noise.mean()
    v = paired_verdict(base + shift + noise, base, threshold=threshold)
    assert v.word == word
    assert v.text().startswith(word)


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
