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


@pytest.fixture(scope="module")
def with_confirmatory(stored):
    from layernorm_tutorial.lab.confirmatory import verdicts as conf_verdicts

    doc, side, _ = stored
    conf = conf_verdicts.load("evidence_confirmatory.json")
    side_conf = conf_verdicts.load("evidence_side_confirmatory.json")
    runs = (conf, side_experiments.init_scale_result(side_conf),
            side_experiments.combination_result(side_conf))
    verdicts = chapter.ChapterVerdicts(doc, side_experiments.init_scale_result(side),
                                       side_experiments.combination_result(side), runs)
    return doc, verdicts, conf_verdicts.evidence_pairs(conf, doc, side_conf, side)


def test_confirmatory_verdicts_are_the_chapters_and_the_earlier_ones_exploratory(
        stored, with_confirmatory):
    _, _, plain = stored
    doc, verdicts, pairs = with_confirmatory
    assert [r["verdict"] for r in verdicts.rows] == [p.confirmatory for p in pairs]
    assert [r["holm"] for r in verdicts.rows] == [p.mark for p in pairs]
    assert [r["verdict"].word for r in verdicts.earlier_rows] == \
        [r["verdict"].word for r in plain.rows]
    assert all(r["verdict"].exploratory and not r["holm"]
               and r["result"].startswith("exploratory, ") for r in verdicts.earlier_rows)
    assert verdicts.said("7.", "conv + attention, vs LN") != \
        verdicts.said_earlier("7.", "conv + attention, vs LN")
    assert verdicts.earlier_row("1.", "MLP, batch 2")["verdict"].effect == \
        plain.row("1.", "MLP, batch 2")["verdict"].effect
    lines = verdicts.pair_lines("1.", "MLP, batch 2").splitlines()
    assert lines[1].startswith("  confirmatory: ") and lines[2].startswith("  earlier run:  ")
    assert max(len(line) for line in verdicts.pair_lines("").splitlines()) <= 80
    changed = verdicts.changed()
    assert changed == [(f"{c['claim']}, {c['setting']}", e["verdict"].word, c["word"])
                       for c, e in zip(verdicts.rows, verdicts.earlier_rows, strict=True)
                       if c["word"] != e["verdict"].word]
    assert "Earlier run (exploratory)" in verdicts.markdown().splitlines()[0]
    with pytest.raises(KeyError, match="no verdict row"):
        verdicts.pair_lines("9.")
    with pytest.raises(ValueError, match="confirmatory results file"):
        chapter.ChapterVerdicts(doc, *verdicts.confirmatory[1:], confirmatory=(
            doc, *verdicts.confirmatory[1:]))


def test_tables_with_a_confirmatory_run_print_both_runs(with_confirmatory):
    doc, verdicts, _ = with_confirmatory
    conf = verdicts.conf_doc
    table, glue = chapter.batch_size_table(doc, verdicts)
    assert "confirmatory: " in table and "earlier run:  exploratory" in table
    assert glue["claim1_2"] == verdicts.said("1.", "MLP, batch 2")
    assert glue["claim1_2_earlier"].startswith("exploratory, holds: +23.9 pts")
    assert glue["conf_mlp_bn_2"] == chapter.acc_text(conf, "mlp_batch_size", "bn", 2)
    for name, (table, glue) in {
            "accuracy": chapter.accuracy_table(doc, conf),
            "gap": chapter.gap_table(doc, conf),
            "speed": chapter.speed_table(doc, verdicts),
            "rate": chapter.rate_table(doc, verdicts),
            "combination": chapter.combination_table(verdicts.confirmatory[2], verdicts),
            "batch": chapter.batch_size_table(doc, verdicts)}.items():
        assert max(len(line) for line in table.splitlines()) <= 80, name
        assert any(k.startswith("conf_") for k in glue), name
    _, glue = chapter.rate_table(doc, verdicts)
    assert glue["claim5_rate_MLP_ln_good_earlier_seeds"] == "5 of 5 seeds below 1"
    assert glue["claim5_rate_MLP_ln_good_split"] == \
        "1 of 5 seeds above 1, 4 below, 0 undetermined"
    _, glue = chapter.combination_table(verdicts.confirmatory[2], verdicts)
    assert glue["combo_vs_LN"].startswith("holds: ")
    assert glue["combo_vs_LN_earlier"].startswith("exploratory, not shown: ")
    _, glue = chapter.speed_table(doc, verdicts)
    assert glue["conf_speed_rnn_none"] == "111 (2 never)"


def test_confirmatory_summary_and_threshold_history_of_the_earlier_rows(with_confirmatory):
    doc, verdicts, _ = with_confirmatory
    conf = verdicts.conf_doc
    from layernorm_tutorial.lab.confirmatory import verdicts as conf_verdicts

    text = chapter.confirmatory_summary(conf, conf_verdicts.load(
        "evidence_side_confirmatory.json"))
    assert text.splitlines()[0].startswith(
        f"confirmatory runs: {len(conf['runs']) + len(conf['range_runs'])} run records")
    assert "fresh seeds 101–105" in text and max(map(len, text.splitlines())) <= 80
    # the half-point history is the earlier run's: the same lines from its rows as from a
    # ChapterVerdicts without a confirmatory run
    plain = chapter.ChapterVerdicts(doc, *verdicts.confirmatory[1:])   # any init/combo
    assert chapter.threshold_change_all(verdicts.earlier_rows, old=0.005)[0].startswith(
        "1. MLP: BN beats LN at larger batch, MLP, batch 32: direction shown -> holds")
    assert [line for line in chapter.threshold_change_all(plain, old=0.005)
            if line.startswith("1.")] == [
        line for line in chapter.threshold_change_all(verdicts.earlier_rows, old=0.005)
        if line.startswith("1.")]


def test_verdict_list_prints_every_row_within_80_columns(stored, with_confirmatory):
    _, _, plain = stored
    _, verdicts, _ = with_confirmatory
    for v in (plain, verdicts):
        text = v.verdict_list()
        assert max(map(len, text.splitlines())) <= 80
        assert all(r["result"][:30] in text for r in v.rows)
        assert text.count("(threshold ") == len({r["claim"] for r in v.rows})
        assert "Bonferroni correction over this chapter's 32" in text.replace("\n", " ")
    lines = verdicts.verdict_list().splitlines()
    for head in ("    confirmatory: ", "    earlier run:  exploratory, "):
        assert sum(line.startswith(head) for line in lines) == len(verdicts.rows)
    assert "confirmatory: " not in plain.verdict_list()
