"""lab/large_models: the logit-stability tools, the QK-norm bound, the sweep summary, the
chapter's page helpers (tables within their width, registered verdicts, the live check at a
measured tolerance, the second-path replication) and the frontier mechanisms."""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.nn.functional as TF

from layernorm_tutorial.lab.common import claims
from layernorm_tutorial.lab.large_models import comparisons, frontier, page, qk_norm
from layernorm_tutorial.lab.large_models.results import CLAIMS_BY_SECTION
from layernorm_tutorial.lab.large_models.sweep import summarize_sweep
from layernorm_tutorial.nn import RMSNorm


# ------------------------------------------------------------------ the QK-norm bound
def test_qk_norm_bound_is_max_gain_product_times_sqrt_dh_not_the_norm_formula():
    """The review's counterexample: d_h = 16, gamma_q = gamma_k = 4 e_1, q = k = e_1:
    the logit is 64 = max|g_q g_k| sqrt(d_h); ||g_q|| ||g_k|| / sqrt(d_h) would say 4."""
    d_h = 16
    norm_q, norm_k = RMSNorm(d_h, eps=0.0), RMSNorm(d_h, eps=0.0)
    e1 = torch.zeros(d_h, dtype=torch.float64)
    e1[0] = 1.0
    with torch.no_grad():
        norm_q.weight.copy_(4 * e1)
        norm_k.weight.copy_(4 * e1)
    q_hat = norm_q.double()(e1.clone())
    k_hat = norm_k.double()(e1.clone())
    logit = float((q_hat @ k_hat).detach()) / math.sqrt(d_h)
    bound = float((norm_q.weight * norm_k.weight).abs().max()) * math.sqrt(d_h)
    wrong = float(norm_q.weight.norm() * norm_k.weight.norm()) / math.sqrt(d_h)
    assert logit == pytest.approx(64.0) and bound == pytest.approx(64.0)
    assert wrong == pytest.approx(4.0) and logit > wrong


def test_qk_norm_bound_holds_for_random_gains_and_inputs():
    g = torch.Generator().manual_seed(0)
    d_h = 8
    for _ in range(20):
        gq, gk = torch.randn(d_h, generator=g), torch.randn(d_h, generator=g)
        q, k = torch.randn(50, d_h, generator=g) * 30, torch.randn(50, d_h, generator=g)
        qh = gq * q / q.pow(2).mean(-1, keepdim=True).sqrt()
        kh = gk * k / k.pow(2).mean(-1, keepdim=True).sqrt()
        z = qh @ kh.T / math.sqrt(d_h)
        assert float(z.abs().max()) <= float((gq * gk).abs().max()) * math.sqrt(d_h) + 1e-4


def test_the_docstring_states_the_corrected_bound():
    doc = " ".join(qk_norm.__doc__.split())
    assert r"\max_c |\gamma_{q,c}\,\gamma_{k,c}|\,\sqrt{d_h}" in doc
    assert "with :math:`d_h = 16` and :math:`\\gamma_q = \\gamma_k = 4e_1` a logit " \
        "reaches 64" in doc


# ------------------------------------------------------------------ logit-stability tools
def test_logit_tools_mechanisms():
    out = frontier.logit_tools_check()
    assert out["softcap_max"] <= out["cap"]
    assert out["zloss_grad_error"] < 1e-12
    assert out["clip_before"] > out["tau"]
    assert out["clip_after"] == pytest.approx(out["tau"], rel=1e-9)


def test_zloss_is_the_identity_forward_and_off_in_eval():
    torch.manual_seed(0)
    model = qk_norm.QKTransformer(d_model=16, nhead=2, dim_feedforward=16, z_loss=0.1)
    tokens = torch.randint(0, 16, (2, 8))
    plain = qk_norm.QKTransformer(d_model=16, nhead=2, dim_feedforward=16)
    plain.load_state_dict(model.state_dict())
    torch.testing.assert_close(model(tokens), plain(tokens))
    model.eval()
    assert model(tokens).grad_fn is None or "ZLoss" not in type(model(tokens).grad_fn).__name__


def test_softcap_bounds_attention_and_output_logits():
    torch.manual_seed(0)
    model = qk_norm.QKTransformer(d_model=16, nhead=2, dim_feedforward=16,
                                  attn_softcap=5.0, final_softcap=3.0)
    with torch.no_grad():
        for p in model.parameters():
            p.mul_(20)
    out = model(torch.randint(0, 16, (2, 8)))
    assert float(out.abs().max()) <= 3.0
    with pytest.raises(ValueError, match="softcap"):
        qk_norm.QKAttention(16, 2, softcap=0.0)


@pytest.mark.parametrize("arm", list(qk_norm.ARMS))
def test_every_arm_trains_a_few_steps_deterministically(arm):
    runs = [qk_norm.qk_run(arm, 1e-2, seed=1, steps=3, d_model=16, nhead=2,
                           dim_feedforward=16) for _ in range(2)]
    np.testing.assert_array_equal(runs[0]["loss"], runs[1]["loss"])
    assert runs[0]["max_logit"].shape == (3,) and runs[0]["clipped"] >= 0


def test_qk_run_rejects_an_unknown_arm():
    with pytest.raises(ValueError, match="arm"):
        qk_norm.qk_run("layerscale", 1e-2, 0, steps=1)


def test_qk_clip_at_a_large_learning_rate_clips_heads():
    run = qk_norm.qk_run("qkclip", 1.0, seed=0, steps=20, d_model=16, nhead=2,
                         dim_feedforward=16, qk_clip_tau=5.0)
    assert run["clipped"] > 0


def test_first_diverged_lr_brackets_the_critical_rate():
    assert qk_norm.first_diverged_lr({0.01: 1.0, 0.1: 2.9, 0.3: math.inf}) == 0.1
    assert qk_norm.first_diverged_lr({0.01: 1.0}) == math.inf


# ------------------------------------------------------------------ the sweep summary
def _qk(final):
    """A stored-looking qk section from ``{arm: {lr: [final per seed]}}``."""
    lrs = sorted({lr for by in final.values() for lr in by})
    n = len(next(iter(next(iter(final.values())).values())))
    runs = {arm: {str(lr): [{"final_loss": x, "accuracy": 0.5, "max_logit": [1.0, 2.0],
                             "loss": [3.0]} for x in by[lr]] for lr in lrs}
            for arm, by in final.items()}
    return {"settings": {"lrs": lrs, "seeds": list(range(n))}, "runs": runs}


def test_sweep_counts_divergences_and_brackets_each_seed():
    ok, bad = 1.0, 5.0
    qk = _qk({"none": {0.01: [ok] * 6, 0.1: [bad] * 6, 1.0: [bad] * 6},
              "rmsnorm": {0.01: [ok] * 6, 0.1: [ok] * 6, 1.0: [ok] * 5 + [None]}})
    sweep = summarize_sweep(qk)
    assert sweep.diverged("none", 0.1) == 6 and sweep.diverged("rmsnorm", 1.0) == 1
    assert sweep.bounds("none") == [(0.01, 0.1)] * 6
    assert sweep.bounds("rmsnorm")[0] == (1.0, math.inf)
    assert sweep.bounds("rmsnorm")[5] == (0.1, 1.0)
    assert sweep.brackets("none") == "(0.01, 0.1] x6"
    assert all(len(line) <= 72 for line in sweep.table().splitlines())
    v = sweep.judge("large_models.qk-norm", "rmsnorm")
    assert v.median_low >= 0 and v.n == 6


def test_sweep_rejects_a_missing_rate():
    qk = _qk({"none": {0.01: [1.0] * 5}})
    qk["settings"]["lrs"].append(0.1)
    with pytest.raises(KeyError, match="0.1"):
        summarize_sweep(qk)


# ------------------------------------------------------------------ comparisons
def test_choose_lr_takes_the_best_mean_and_the_smaller_on_ties():
    assert comparisons.choose_lr({"0.01": [0.5, 0.7], "0.1": [0.9, 0.1]}) == 0.01
    assert comparisons.choose_lr({0.03: [0.2], 0.01: [0.9], 0.1: [0.95]}) == 0.1
    with pytest.raises(ValueError, match="tuning"):
        comparisons.choose_lr({})


def test_thresholds_come_from_the_registry():
    assert comparisons.ACCURACY_THRESHOLD == claims.threshold("large_models.norms")
    assert comparisons.TIME_THRESHOLD == claims.threshold("large_models.time")
    for ids in CLAIMS_BY_SECTION.values():
        assert all(cid.startswith("large_models.") for cid in ids)


# ------------------------------------------------------------------ page helpers
def test_tuning_table_marks_the_choice_and_an_edge():
    main = {"lr_grid": [0.01, 0.1, 1.0],
            "tuning": {"layernorm": {"0.01": [0.1], "0.1": [0.9], "1.0": [0.2]},
                       "dyt": {"0.01": [0.1], "0.1": [0.2], "1.0": [0.3]}},
            "lr": {"layernorm": 0.1, "dyt": 1.0}}
    text = page.tuning_table(main)
    lines = text.splitlines()
    assert "0.900*" in lines[1] and lines[1].endswith("0.1")
    assert lines[2].endswith("1 (edge)")
    assert all(len(line) <= page.WIDTH for line in lines)


def test_norm_verdicts_use_the_registered_claim():
    main = {"accuracy": {"layernorm": [0.5] * 5, "rmsnorm": [0.6, 0.62, 0.61, 0.6, 0.63],
                         "dyt": [0.2, 0.21, 0.2, 0.22, 0.2]}}
    v = page.norm_verdicts(main)
    assert v["rmsnorm"].word == "holds" and v["dyt"].word == "contradicted"
    assert v["rmsnorm"].claim_id == "large_models.norms"


def _results_for_live(stored_losses, per_arm):
    runs = {arm: {"0.1": [{"loss": losses, "final_loss": 1.0, "accuracy": 0.5,
                           "max_logit": [1.0]}]}
            for arm, losses in stored_losses.items()}
    return {"qk_norm": {"settings": {"lrs": [0.1], "seeds": [0]}, "runs": runs},
            "paths": {"kwargs": {"lr": 0.1, "seed": 0, "steps": 3}, "per_arm": per_arm}}


def test_live_check_accepts_a_gap_within_the_measured_spread_and_rejects_more():
    results = _results_for_live({"none": [2.0, 1.5, 1.0]}, {"none": 1e-2})
    ok = page.live_check(results, {"none": [2.0, 1.5, 1.02]})
    assert ok["none"]["ok"]
    assert ok["none"]["tolerance"] == pytest.approx(3e-2 + page.STORED_ROUNDING)
    assert ok["none"]["gap"] == pytest.approx(0.02 / 1.02)
    bad = page.live_check(results, {"none": [2.0, 1.5, 1.2]})
    assert not bad["none"]["ok"]
    assert "tolerance 3.0e-02" in page.live_check_lines(ok)
    rounded = _results_for_live({"none": [2.0001]}, {"none": 0.0})
    assert page.live_check(rounded, {"none": [2.0]})["none"]["ok"]   # storage rounding


def test_replication_compares_word_and_interval():
    ok, bad = 1.0, 5.0
    final = {"none": {0.01: [ok] * 6, 0.1: [bad] * 6},
             "rmsnorm": {0.01: [ok] * 6, 0.1: [ok] * 6}}
    qk = _qk(final)
    results = {"qk_norm": qk, "replication": {
        "path": "default+compatible", "kwargs": {"seeds": list(range(6))},
        "final_loss": {arm: {str(lr): v for lr, v in by.items()}
                       for arm, by in final.items()}}}
    rep = page.replication(results)
    assert rep["same_word"] and rep["inside"]
    assert rep["same_brackets"] == rep["brackets"] == 12
    assert "same word: yes" in page.replication_lines(rep)
    assert rep["loss_gap_max"] == 0 and rep["loss_gap_over_10pct"] == 0
    assert rep["runs"] == 24
    results["replication"]["final_loss"]["rmsnorm"]["0.1"] = [5.0] + [1.0] * 5
    changed = page.replication(results)
    assert changed["same_brackets"] == 11
    assert changed["loss_gap_over_10pct"] == 1 and changed["loss_gap_max"] == 4.0
    assert "1 of 24 runs differ by more than 10%" in page.replication_lines(changed)


def test_registration_note_uses_the_run_that_wrote_the_section():
    new = {"date": "2026-11-26T09:55:00+00:00", "commit": "9275606aaaa"}
    old = {"date": "2026-11-26T09:23:00+00:00", "commit": "e7da47bbbbb"}
    results = {"seconds": {"qk_norm": 1.0}, "machine": new,
               "previous_runs": [{"sections": ["comparisons", "timing"], "machine": old}]}
    assert page.section_run(results, "qk_norm")["machine"] is new
    assert page.section_run(results, "timing")["machine"] is old
    with pytest.raises(KeyError, match="section"):
        page.section_run(results, "deepnorm")
    assert "results 2026-11-26 09:23 (e7da47b)" in page.registration_note(
        "large_models.norms", results)
    assert "results 2026-11-26 09:55 (9275606)" in page.registration_note(
        "large_models.qk-norm", results)
    with pytest.raises(KeyError, match="claim_id"):
        page.registration_note("evidence.bn", results)


def test_settings_glue_reads_the_stored_settings():
    results = {"qk_norm": {"settings": {"steps": 150, "warmup_steps": 10}},
               "deepnorm": {"settings": {"num_layers": 12, "steps": 60, "lr": 0.01,
                                         "warmup_steps": 10, "seeds": [0, 1, 2]}},
               "comparisons": {"main": {"steps": 120, "tuning_seeds": [0, 1],
                                        "reported_seeds": [2, 3, 4, 5, 6]},
                               "per_token_map": {"settings": {"steps": 200,
                                                              "num_layers": 2}}}}
    g = page.settings_glue(results)
    assert (g["lm-cmp-steps"], g["lm-deep-lr"], g["lm-deep-nseeds"]) == ("120", "0.01", "3")
    assert (g["lm-qk-steps"], g["lm-s-steps"], g["lm-deep-layers"]) == ("150", "200", "12")


def test_provenance_lines_fit_the_page():
    results = {"command": "python -m layernorm_tutorial.lab.large_models --force",
               "config": {"workers": 2, "threads per job": 1, "transformers": "5"},
               "seconds": {"qk_norm": 600.0, "timing": 30.0},
               "machine": {"cpu": "AMD EPYC " + "x" * 60, "cpu_capability": "AVX512",
                           "torch": "2", "date": "2026-11-26T09:00:00+00:00",
                           "commit": "abc"},
               "previous_runs": [{"sections": ["deepnorm"], "seconds": {"deepnorm": 60.0},
                                  "machine": {"date": "2026-11-26", "commit": "def"}}]}
    text = page.provenance_lines(results)
    assert all(len(line) <= page.WIDTH for line in text.splitlines())
    assert "deepnorm" in text
    assert page.total_minutes(results) == pytest.approx(11.5)


# ------------------------------------------------------------------ frontier
def test_depth_growth_pre_ln_grows_and_layer_norm_scaling_grows_less():
    curves = {v: frontier.depth_growth(v, num_layers=12, d=16, tokens=64)
              for v in frontier.DEPTH_VARIANTS}
    pre, lns = curves["pre-LN"], curves["pre-LN + LN scaling"]
    assert pre["std"][-1] > pre["std"][0]
    assert all(a <= b + 1e-12 for a, b in zip(lns["std"], pre["std"], strict=True))
    mix = curves["Mix-LN"]["std"]
    assert all(abs(s - 1) < 0.01 for s in mix[:3])        # post-LN quarter: unit scale
    with pytest.raises(ValueError, match="variant"):
        frontier.depth_growth("post-LN")


def test_ngpt_states_and_weights_stay_on_the_sphere():
    out = frontier.ngpt_check(num_layers=3, d=8, steps=2)
    assert out["state_norm_deviation"] < 1e-12 and out["weight_row_deviation"] < 1e-12
    assert out["max_cosine"] <= 1 + 1e-12
    w = frontier.unit_rows(torch.randn(5, 3))
    torch.testing.assert_close(w.norm(dim=-1), torch.ones(5))


def test_ngpt_block_output_is_unit_norm():
    torch.manual_seed(0)
    block = frontier.NGPTBlock(8)
    h = TF.normalize(torch.randn(4, 8), dim=-1)
    torch.testing.assert_close(block(h).norm(dim=-1), torch.ones(4))


# ------------------------------------------------------------------ audit 2: the family
def _stored():
    from layernorm_tutorial.lab.large_models.results import load_results

    return load_results()


def test_chapter_verdicts_are_the_thirteen_registered_ones_in_table_order():
    rows = page.chapter_verdicts(_stored())
    keys = [k for k, _, _, _ in rows]
    assert keys == ["rmsnorm", "dyt", "alpha-0.1", "alpha-2.0", "time-torch", "time-package",
                    "qk-norm", "softcap", "zloss", "qkclip", "deepnorm-no-warm-up",
                    "deepnorm-warm-up", "deepnorm-needs-warm-up"]
    ids = {v.claim_id for _, _, v, _ in rows}
    assert ids == set(page.CLAIM_SECTIONS)
    assert not any(v.exploratory for _, _, v, _ in rows)


def test_family_marks_follow_the_whole_family_not_a_subset():
    """A verdict printed alone keeps the mark of the 13-verdict family: with m = 13 the
    Bonferroni bar is 0.05 / 13; the RMSNorm verdict (p about 0.02) would survive in a
    family of one."""
    rows = page.chapter_verdicts(_stored())
    marks = page.family_marks(rows)
    from layernorm_tutorial.lab.common import verdict

    expected = verdict.holm([v for _, _, v, _ in rows])
    assert list(marks.values()) == expected
    rms = next(v for k, _, v, _ in rows if k == "rmsnorm")
    assert verdict.holm([rms]) == [True] and not marks["rmsnorm"]
    text = page.verdict_lines(rows, ["rmsnorm", "time-torch"])
    lines = text.splitlines()
    assert lines[0].startswith("RMSNorm vs LayerNorm") and verdict.MARK not in lines[0]
    assert verdict.MARK in lines[1]
    assert "13 verdicts" in " ".join(lines[2:])
    with pytest.raises(KeyError, match="keys"):
        page.verdict_lines(rows, ["rmsnorm", "nope"])


def test_marked_text_puts_the_mark_first_only_on_a_surviving_word():
    rows = page.chapter_verdicts(_stored())
    marks = page.family_marks(rows)
    for key in marks:
        text = page.marked_text(rows, key)
        assert text.startswith("† ") == marks[key]
    with pytest.raises(KeyError, match="key"):
        page.marked_text(rows, "nope")


def test_correction_name_is_the_one_the_method_prints():
    from layernorm_tutorial.lab.common import verdict

    name = page.correction_name()
    assert f"{name} correction" in verdict.family_sentence([])


def test_confirmation_lines_say_whether_the_results_are_stored(tmp_path):
    results = _stored()
    text = page.confirmation_lines(results, data_dir=tmp_path)
    assert "large_models.deepnorm: confirmatory run registered" in text
    assert "large_models.time: no confirmatory run: timing rounds" in " ".join(text.split())
    flat = " ".join(text.split())
    assert "(bdd19ed) on fresh seeds 101-108" in flat     # registered later than the rest
    assert "not run yet" in text and ": stored" not in text
    (tmp_path / "large_models_confirmatory.json").write_text("{}")
    assert ": stored" in page.confirmation_lines(results, data_dir=tmp_path)
    assert all(len(line) <= page.WIDTH for line in text.splitlines())


def test_threshold_sensitivity_is_exploratory_and_changes_the_word():
    deep = {"runs": {"DeepNorm + warm-up": [{"accuracy": a} for a in
                                            (0.36, 0.37, 0.38, 0.37, 0.36)],
                     "post-LN + warm-up": [{"accuracy": a} for a in
                                           (0.345, 0.35, 0.36, 0.35, 0.35)]}}
    out = page.threshold_sensitivity(deep, "warm-up", (0.005, 0.03, 0.05))
    assert out[0.005].exploratory and out[0.03].exploratory
    assert not out[0.05].exploratory          # the registered threshold
    assert out[0.005].word == "holds" and out[0.03].word == "too small to matter"
    with pytest.raises(KeyError, match="key"):
        page.threshold_sensitivity(deep, "nope", (0.01,))


def test_accuracy_at_rate_is_paired_by_seed_and_exploratory():
    qk = _qk({"none": {0.1: [1.0] * 6}, "softcap": {0.1: [1.0] * 6}})
    for arm, acc in (("none", [0.1, 0.12, 0.11, 0.13, 0.1, 0.12]),
                     ("softcap", [0.3, 0.31, 0.3, 0.33, 0.29, 0.32])):
        for run, a in zip(qk["runs"][arm]["0.1"], acc, strict=True):
            run["accuracy"] = a
    v = page.accuracy_at_rate(qk, "softcap", 0.1)
    assert v.exploratory and v.word == "holds" and v.n == 6
    assert v.threshold == claims.threshold("large_models.norms")
    with pytest.raises(KeyError, match="lr"):
        page.accuracy_at_rate(qk, "softcap", 0.3)


def test_toy_parameter_counts_and_size_ratios():
    counts = page.toy_parameter_counts()
    assert counts["norm comparison"] < counts["QK-norm ladder"] < counts["DeepNorm stack"]
    assert min(counts.values()) > 10_000      # not "a few thousand"
    ratios = page.size_ratios(counts["QK-norm ladder"])
    assert ratios["Gemma 2"][0] == pytest.approx(2e9 / counts["QK-norm ladder"])
    with pytest.raises(ValueError, match="toy"):
        page.size_ratios(0)


def test_deviations_disclose_the_deepnorm_threshold():
    text = " ".join(page.DEVIATIONS)
    assert "5-point threshold was committed together with the first run" in text
    assert "registered first" not in text


def test_sweep_range_table_shows_the_extremes_per_rate():
    qk = _qk({"none": {0.03: [1.2, 2.5, 2.6], 0.1: [2.6, 2.7, 2.74]},
              "rmsnorm": {0.03: [0.0, 1.9, 1.5], 0.1: [0.0, 0.01, 0.02]}})
    sweep = summarize_sweep(qk)
    assert sweep.extremes(sweep.final, "none", 0.03) == (1.2, 2.6)
    text = sweep.range_table(lrs=[0.03, 0.1])
    assert "1.20-2.60" in text and "0.00-0.02" in text
    assert all(len(line) <= 72 for line in text.splitlines())
    with pytest.raises(KeyError, match="lrs"):
        sweep.range_table(lrs=[0.3])


def test_depth_growth_ordering_depends_on_the_branch_init():
    """With PyTorch's default init Peri-LN's stream grows fastest; with unit-gain branches
    pre-LN's grows as fast (the chapter's caveat)."""
    kw = {"num_layers": 24, "d": 32, "tokens": 128}
    default = {v: frontier.depth_growth(v, **kw)["std"][-1] for v in ("pre-LN", "Peri-LN")}
    unit = {v: frontier.depth_growth(v, branch_init="unit", **kw)["std"][-1]
            for v in ("pre-LN", "Peri-LN")}
    assert default["Peri-LN"] > 2 * default["pre-LN"]
    assert unit["pre-LN"] > 0.9 * unit["Peri-LN"]
    first = frontier.depth_growth("pre-LN", branch_init="unit", **kw)["relative_update"][0]
    assert first == pytest.approx(1.0, abs=0.1)
    with pytest.raises(ValueError, match="branch_init"):
        frontier.depth_growth("pre-LN", branch_init="xavier")


# ------------------------------------------------------------------ confirmatory runs
def _fake_pair(label, confirmatory, exploratory):
    from types import SimpleNamespace

    return SimpleNamespace(label=label, confirmatory=confirmatory,
                           exploratory=dataclasses.replace(exploratory, exploratory=True))


def test_with_confirmatory_replaces_the_confirmed_rows_and_keeps_the_earlier_ones():
    rows = page.chapter_verdicts(_stored())
    by_key = {k: v for k, _, v, _ in rows}
    fresh = claims.judge("large_models.norms", np.full(5, 0.99), np.full(5, 0.98) +
                         np.array([0, 1e-3, -1e-3, 2e-3, 0]), setting="rmsnorm vs layernorm")
    pairs = [_fake_pair("rmsnorm vs layernorm", fresh, by_key["rmsnorm"])]
    family, earlier = page.with_confirmatory(rows, pairs)
    assert list(earlier) == ["rmsnorm"] and earlier["rmsnorm"].exploratory
    fam = {k: (label, v) for k, label, v, _ in family}
    assert fam["rmsnorm"] == ("RMSNorm vs LayerNorm" + page.CONFIRMED, fresh)
    assert fam["dyt"][1] is by_key["dyt"]
    text = page.pair_lines(family, earlier, ["rmsnorm", "dyt"])
    assert "  confirmatory: " in text and "  earlier run:  exploratory, " in text
    assert text.count("earlier run") == 1
    assert "RMSNorm vs LayerNorm" in page.earlier_lines(family, earlier)
    with pytest.raises(KeyError, match="keys"):
        page.pair_lines(family, earlier, ["nope"])


def test_with_confirmatory_refuses_a_pair_of_another_run_or_an_unknown_label():
    rows = page.chapter_verdicts(_stored())
    by_key = {k: v for k, _, v, _ in rows}
    with pytest.raises(ValueError, match="not the chapter's"):
        page.with_confirmatory(rows, [_fake_pair("dyt vs layernorm", by_key["dyt"],
                                                 by_key["alpha-2.0"])])
    with pytest.raises(ValueError, match="unknown label"):
        page.with_confirmatory(rows, [_fake_pair("rms vs ln", by_key["dyt"],
                                                 by_key["dyt"])])


def test_confirmatory_keys_are_the_labels_of_the_confirmatory_module():
    """The keys follow lab.confirmatory.verdicts (large_models_pairs, qk_norm_pairs): every
    label maps to a row of the chapter, and the module's marks, given the rest of the
    chapter's family as ``others``, are the family's."""
    from layernorm_tutorial.lab.confirmatory import verdicts as cv

    data = Path(claims.__file__).resolve().parents[3] / "book" / "data"
    calls = [(fn, cid) for fn, cid in ((cv.large_models_pairs, "large_models.norms"),
                                       (cv.qk_norm_pairs, "large_models.qk-norm"))
             if (data / claims.confirmation(cid).results).is_file()]
    if not calls:
        pytest.skip("no large_models confirmatory results are stored (run "
                    "python -m layernorm_tutorial.lab.confirmatory large_models)")
    rows = page.chapter_verdicts(_stored())
    pairs = [p for fn, _ in calls for p in fn()]
    assert {p.label for p in pairs} <= set(page.CONFIRMATORY_KEYS)
    family, earlier = page.with_confirmatory(rows, pairs)
    marks = page.family_marks(family)
    assert len(family) == 13 and len(earlier) == len(pairs)
    for fn, _ in calls:
        own = fn()
        again = fn(others=page.others_for(family, own))
        assert all(p.mark == marks[page.CONFIRMATORY_KEYS[p.label]] for p in again)


def test_the_modules_chapter_pairs_carry_the_familys_marks():
    """lab.confirmatory.verdicts.large_models_chapter_pairs marks its 8 confirmatory verdicts
    over the chapter's 13; the page's family (with_confirmatory + family_marks) agrees."""
    from layernorm_tutorial.lab.confirmatory import verdicts as cv

    try:
        pairs = cv.large_models_chapter_pairs()
    except FileNotFoundError as err:
        pytest.skip(str(err))
    family, earlier = page.with_confirmatory(page.chapter_verdicts(_stored()), pairs)
    marks = page.family_marks(family)
    assert len(earlier) == len(pairs) == 8
    assert [p.mark for p in pairs] == [marks[page.CONFIRMATORY_KEYS[p.label]] for p in pairs]
