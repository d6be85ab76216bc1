"""The evidence chapter's helpers added by the chapter's audit (stored data only)."""

import math

import pytest

from layernorm_tutorial.lab.common.verdict import HOLM_MARK
from layernorm_tutorial.lab.evidence import chapter, load_results, side_experiments


@pytest.fixture(scope="module")
def stored():
    doc = load_results()
    side = side_experiments.load_side_results()
    init = side_experiments.init_scale_result(side)
    combo = side_experiments.combination_result(side)
    return doc, chapter.ChapterVerdicts(doc, init, combo)


def test_steps_ratio_and_ema_weight_come_from_the_stored_steps(stored):
    doc, verdicts = stored
    _, glue = chapter.batch_size_table(doc, verdicts)
    assert glue["steps_ratio_2_256"] == f"{1617 / 12:.0f}" != "128"
    table, glue = chapter.bn_mode_losses(doc)
    assert "LN train" in table and float(glue["ln2_train_mode"]) < float(glue["bn2_train_mode"])
    assert glue["ema_initial_weight"] == f"{0.9 ** 12:.2f}"


def test_gap_table_prints_training_accuracy_in_points(stored):
    doc, _ = stored
    table, glue = chapter.gap_table(doc)
    assert "mlp_batch_size" not in table and "MLP, batch 32" in table
    assert all(v.endswith(" pts") for k, v in glue.items() if k.startswith("gap_"))
    assert glue["train_mlp_batch_size_none"].startswith("94.7")


def test_threshold_change_all_finds_only_batch_32(stored):
    # version 3: at half a point only MLP batch 32 ([+0.5, +2.6]) clears the threshold;
    # claim 4's MLP gap (the word version 2 flipped) stays direction shown
    _, verdicts = stored
    changed = chapter.threshold_change_all(verdicts, old=0.005)
    assert len(changed) == 1 and changed[0].startswith("1.") and "batch 32" in changed[0]
    assert "direction shown -> holds" in changed[0]
    assert chapter.threshold_change_all(verdicts, old=0.01) == []


def test_digit_breakdown_widens_the_selected_interval(stored):
    doc, _ = stored
    for split in ("val", "test"):
        _, glue = chapter.digit_breakdown(doc, split)
        text = glue[f"b256_{split}_best"]
        assert "holds" not in text and "not shown" not in text and "99.5 %" in text
        lo = float(text.split("[")[1].split(",")[0])
        assert lo < 0                       # the choice among ten digits costs the lead
    assert glue["b256_test_best_digit"] == 8


def test_holm_note_and_sweep_glue(stored):
    doc, verdicts = stored
    note = verdicts.holm_note()
    assert note.startswith(HOLM_MARK) and max(map(len, note.splitlines())) <= 80
    g = chapter.sweep_glue(doc)
    assert int(g["sweep_cpu_minutes"]) == round(doc["sweep_seconds"] / 60 * g["sweep_workers"])
    assert math.isclose(chapter.test_set_se(doc, 0.95), math.sqrt(0.95 * 0.05 / 449))


def test_n_ladder_counts_the_rate_rows(stored):
    _, verdicts = stored
    assert verdicts.n_ladder() == 8 == sum("allows larger" in r["claim"] for r in verdicts.rows)
