"""The evidence chapter's bookkeeping helpers (lab.evidence.chapter, lab.evidence.live_checks)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from layernorm_tutorial.lab.common.verdict import HOLM_MARK
from layernorm_tutorial.lab.evidence import chapter, live_checks, load_results, side_experiments


@pytest.fixture(scope="module")
def stored():
    doc = load_results()
    side = side_experiments.load_side_results()
    init = side_experiments.init_scale_result(side)
    combo = side_experiments.combination_result(side)
    return doc, side, chapter.ChapterVerdicts(doc, init, combo)


def test_chapter_verdicts_carry_holm_marks_over_the_whole_family(stored):
    _, _, verdicts = stored
    rows = verdicts.rows
    assert len(rows) == 32                                     # 27 main + 5 side rows
    marked = [r for r in rows if r["result"].startswith(HOLM_MARK)]
    assert len(marked) == verdicts.survivors() == sum(r["holm"] for r in rows)
    assert all(r["word"] != "not shown" for r in marked)
    # version 3: the audit's six Holm survivors less CNN BN vs GN, whose size test
    # (mean <= 1 pt, p = 0.002) misses Bonferroni's 0.05 / 32
    assert sorted((r["claim"][:2], r["setting"][:10]) for r in marked) == [
        ("1.", "MLP, batch"), ("5.", "CNN, batch"), ("5.", "RNN, batch"),
        ("6.", "deep MLP, "), ("6.", "deep MLP, ")]
    words = [r["word"] for r in rows]
    assert words.count("direction shown") == 4 and words.count("holds") == 8
    sentence = verdicts.holm_sentence().replace("\n", " ")
    assert "Bonferroni correction over this chapter's 32 verdicts" in sentence
    with pytest.raises(KeyError, match="no verdict row"):
        verdicts.row("9.", "nothing")


def test_tables_and_glue(stored):
    doc, side, verdicts = stored
    table, glue = chapter.batch_size_table(doc, verdicts)
    assert glue["claim1_2"].startswith(HOLM_MARK + " holds: +23.9 pts")
    assert glue["steps_256"] == 12 and table.count("\n") == 8
    table, glue = chapter.rate_table(doc, verdicts)
    assert glue["claim5_rate_RNN_bn_fail"].startswith("not shown: ratio in (1, 10)")
    assert glue["claim5_rate_MLP_ln_good_seeds"] == "5 of 5 seeds below 1"
    assert glue["range_mlp_bn_fail"] == "3"
    text = chapter.registry_table(doc, side)
    assert "registered after the first run" in text and "exploratory: chosen after" in text
    change = chapter.threshold_change(doc)
    # claim 4's interval [+0.1, +1.8] reaches neither threshold: the same lesser word
    assert change[0.005] == change[0.01] and change[0.01].startswith("direction shown")
    speed, glue = chapter.exploratory_speed(doc)
    assert all(v.startswith("exploratory, ") for v in glue.values())


def test_live_check_line_compares_and_prints_only_stored_numbers():
    line = chapter.live_check_line("run", 0.9755, 0.9777, 0.0022, 0.0045)
    assert "0.9755" in line and "0.9777" not in line
    with pytest.raises(AssertionError, match="run: live re-run"):
        chapter.live_check_line("run", 0.9755, 0.9900, 0.0022, 0.0045)


def test_tolerances():
    assert live_checks.tolerance(0.0) == pytest.approx(1 / 449)
    assert live_checks.tolerance(0.01) == pytest.approx(0.02)
    assert live_checks.loss_tolerance(0.0033) == pytest.approx(0.0066)
    fake = {"checks": {"hybrid": {"paths": {"a": {"test_acc": 0.97}, "b": {"test_acc": 0.98}}}}}
    assert live_checks.deviation(fake, "hybrid", 0.975) == pytest.approx(0.005)
    assert not math.isnan(live_checks.deviation(fake, "hybrid", 0.98))


def test_stored_live_checks_cover_every_path_and_check():
    from layernorm_tutorial.lab.common.numerics_paths import CI_PATHS

    live = live_checks.load_live_checks()
    assert set(live["checks"]) == set(live_checks.CHECKS)
    for check in live["checks"].values():   # the paths CI runs the notebook on, at least
        assert set(check["paths"]) >= {"native", *CI_PATHS}
    reruns = live["checks"]["reruns"]["paths"]["native"]
    assert len(reruns["runs"]) == 11 and len(reruns["recalibrated"]) == 5
    assert np.all(np.array(reruns["recalibrated"]) > 0.5)


def test_gapped_good_rates_finds_a_seed_that_skips_a_rung(stored):
    from layernorm_tutorial.lab.evidence import analysis

    doc, _, verdicts = stored
    summary = analysis.rate_range(doc, "lr_range_mlp", "bn")
    # audit F8: seed 4 is good at 0.001, 0.003 and 0.03 but not at 0.01
    assert analysis.gapped_good_rates(summary) == [(4, (0.001, 0.003, 0.03))]
    assert analysis.gapped_good_rates(analysis.rate_range(doc, "lr_range_rnn", "ln")) == []
    # a synthetic seed whose good rates are contiguous is not reported
    acc = summary.val_acc.copy()
    acc[summary.seeds.index(4), summary.rates.index(0.01)] = acc[summary.seeds.index(4)].max()
    fixed = analysis.RateRangeSummary(**{**summary.__dict__, "val_acc": acc})
    assert analysis.gapped_good_rates(fixed) == []
    _, glue = chapter.rate_table(doc, verdicts)
    assert glue["claim5_gapped"] == "MLP BN seed 4 (0.001 0.003 0.03)"
    assert glue["claim5_gapped_n"] == 1
