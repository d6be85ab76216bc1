"""The mechanisms behind part 1's BatchNorm, LRN, pRMSNorm, AdaIN and test-shift questions,
and the RMSNorm drill's checker (issue 35, sections 1 and 2)."""

import math

import numpy as np
import pytest
import torch
import torch.nn.functional as TF

from layernorm_tutorial import functional as LF
from layernorm_tutorial import nn as lnn
from layernorm_tutorial.lab.common.verdict import HOLM_MARK
from layernorm_tutorial.lab.interview import bn_evidence as be
from layernorm_tutorial.lab.interview import bn_mechanisms as bm
from layernorm_tutorial.lab.interview import classic_norms as cn
from layernorm_tutorial.lab.interview import distribution_shift as ds
from layernorm_tutorial.lab.interview import rms_norm_exercises as rms_drill
from layernorm_tutorial.lab.interview.frozen_batch_norm import (
    FrozenBatchNorm2d,
    freeze_batch_norm,
)

F64 = torch.float64


# --------------------------------------------------------------------------- FrozenBatchNorm
def _trained_bn(channels=3):
    bn = lnn.BatchNorm2d(channels).double()
    with torch.no_grad():
        bn.weight.uniform_(0.5, 2.0)
        bn.bias.normal_()
    for _ in range(3):
        bn(torch.randn(4, channels, 5, 5, dtype=F64) * 2 + 1)
    return bn


def test_frozen_batch_norm_equals_eval_mode_batch_norm_in_any_mode():
    bn = _trained_bn()
    frozen = FrozenBatchNorm2d.from_batch_norm(bn)
    x = torch.randn(2, 3, 4, 4, dtype=F64)
    expected = LF.batch_norm(x, bn.running_mean, bn.running_var, bn.weight, bn.bias,
                             training=False, eps=bn.eps)
    frozen.train()
    torch.testing.assert_close(frozen(x), expected.detach(), rtol=0, atol=1e-12)
    assert list(frozen.parameters()) == []
    assert {name for name, _ in frozen.named_buffers()} == {
        "weight", "bias", "running_mean", "running_var"}
    stats = frozen.running_mean.clone()
    frozen(x * 5 + 3)
    assert torch.equal(frozen.running_mean, stats)


def test_freeze_batch_norm_replaces_nested_modules_and_keeps_the_function():
    model = torch.nn.Sequential(torch.nn.Conv2d(2, 3, 3).double(), _trained_bn(),
                                torch.nn.Sequential(torch.nn.ReLU(), _trained_bn()))
    model.eval()
    x = torch.randn(2, 2, 6, 6, dtype=F64)
    expected = model(x).detach()
    freeze_batch_norm(model)
    assert isinstance(model[1], FrozenBatchNorm2d) and isinstance(model[2][1], FrozenBatchNorm2d)
    model.train()
    torch.testing.assert_close(model(x), expected, rtol=0, atol=1e-12)


def test_frozen_batch_norm_rejects_bad_input():
    with pytest.raises(ValueError, match="num_features"):
        FrozenBatchNorm2d(0)
    with pytest.raises(ValueError, match=r"\(N, 3"):
        FrozenBatchNorm2d(3)(torch.randn(2, 4, 5, 5))
    with pytest.raises(ValueError, match="running statistics"):
        FrozenBatchNorm2d.from_batch_norm(lnn.BatchNorm2d(3, track_running_stats=False))


# --------------------------------------------------------------------------- BN mechanisms
def test_bn_before_relu_makes_the_linear_bias_redundant_and_halves_the_units():
    before, after = bm.placement("bn_relu"), bm.placement("relu_bn")
    assert before["bias_grad"] < 1e-10 < 1.0 < after["bias_grad"]
    assert abs(before["zero_fraction"] - 0.5) < 0.01 and before["min_value"] == 0.0
    assert abs(before["mean"] - 1 / math.sqrt(2 * math.pi)) < 0.01
    assert after["zero_fraction"] == 0.0 and after["min_value"] < 0
    assert abs(after["std"] - 1) < 1e-3 and abs(after["mean"]) < 1e-12
    assert before["scale_change"] < 1e-5 < after["scale_change"]   # BN after the Linear
    with pytest.raises(ValueError, match="order"):
        bm.placement("relu")


def test_batch_noise_shrinks_like_one_over_sqrt_batch():
    noise = bm.batch_noise((16, 256), x0=1.0)
    for size, std in noise.items():
        assert std == pytest.approx(bm.predicted_batch_noise(1.0, size), rel=0.1)
    assert noise[16] / noise[256] == pytest.approx(4.0, rel=0.15)


@pytest.mark.parametrize(("p", "mean"), [(0.1, 0.0), (0.5, 0.0), (0.5, 1.0)])
def test_dropout_before_bn_shifts_the_evaluation_variance_as_predicted(p, mean):
    shift = bm.dropout_variance_shift(p, mean=mean)
    assert shift["train_var"] == pytest.approx(1.0, abs=1e-3)
    assert shift["eval_var"] == pytest.approx(shift["predicted"], rel=0.03)
    assert bm.dropout_variance_shift(0.0)["eval_var"] == pytest.approx(1.0, rel=0.03)
    with pytest.raises(ValueError, match="p must be"):
        bm.dropout_variance_shift(1.0)


def _whole_model_reestimation(model, batches):
    """The old recipe: the whole model in training mode while BN re-learns its statistics
    (dropout switched back on)."""
    bn = model[1]
    bn.reset_running_stats()
    bn.momentum = None
    model.train()
    with torch.no_grad():
        for x in batches:
            model(x)
    model.eval()


@pytest.mark.parametrize("p", [0.1, 0.5])
def test_reestimating_with_only_bn_in_training_mode_removes_the_variance_shift(p):
    """BN's running variance against the variance of what BN receives at inference (dropout
    off): the fixed re-estimation matches them, the whole-model recipe keeps 1/(1-p)."""
    torch.manual_seed(0)
    features = 32

    def batch():
        return torch.randn(512, features, dtype=F64)

    def model():
        return torch.nn.Sequential(torch.nn.Dropout(p),
                                   lnn.BatchNorm1d(features, momentum=None).double())

    def ratio(m):
        with torch.no_grad():
            seen = torch.cat([batch() for _ in range(8)]).var(0)    # dropout off: x itself
        return (m[1].running_var / seen).mean().item()

    for reestimate, expected in ((ds.reestimate_statistics, 1.0),
                                 (_whole_model_reestimation, 1 / (1 - p))):
        m = model()
        m.train()
        with torch.no_grad():
            for _ in range(20):
                m(batch())                          # training fills BN with dropout on
        assert ratio(m) == pytest.approx(1 / (1 - p), rel=0.03)
        m.eval()
        reestimate(m, [batch() for _ in range(20)])
        assert ratio(m) == pytest.approx(expected, rel=0.03), reestimate
        m.eval()
        with torch.no_grad():
            out_var = m(batch()).var(0, correction=0).mean().item()
        assert out_var == pytest.approx(1 / expected, rel=0.03), reestimate


def test_reestimation_restores_every_module_mode_and_momentum():
    model = torch.nn.Sequential(torch.nn.Dropout(0.5), lnn.BatchNorm1d(4, momentum=0.3),
                                torch.nn.Linear(4, 4), torch.nn.BatchNorm1d(4)).double()
    model.train()
    model[2].eval()                                  # a mixed state, restored as it was
    modes = [m.training for m in model.modules()]
    ds.reestimate_statistics(model, [torch.randn(16, 4, dtype=F64) for _ in range(3)])
    assert [m.training for m in model.modules()] == modes
    assert model[1].momentum == 0.3 and model[3].momentum == 0.1
    assert model[1].num_batches_tracked.item() == 3
    with pytest.raises(ValueError, match="track_running_stats=False"):
        ds.reestimate_statistics(torch.nn.BatchNorm1d(4, track_running_stats=False),
                                 [torch.randn(8, 4)])


@pytest.mark.parametrize(("p", "mean"), [(0.5, 0.0), (0.2, 1.0)])
def test_dropout_remedy_bn_only_restores_the_variance_update_bn_does_not(p, mean):
    out = bm.dropout_remedy(p, mean=mean, features=32, batch=512, batches=20)
    shifted = 1 / bm.predicted_eval_variance(p, mean)       # running var / var at inference
    for name in ("before", "whole_model"):                 # torch's update_bn: model.train()
        assert out[name]["var_ratio"] == pytest.approx(shifted, rel=0.03), name
        assert out[name]["eval_var"] == pytest.approx(1 / shifted, rel=0.03), name
    assert out["bn_only"]["var_ratio"] == pytest.approx(1.0, abs=0.02)
    assert out["bn_only"]["eval_var"] == pytest.approx(1.0, abs=0.02)


def test_the_dropout_functions_leave_the_global_random_state_alone():
    torch.manual_seed(5)
    expected = torch.rand(3)
    torch.manual_seed(5)
    bm.dropout_variance_shift(0.5, batch=64, batches=2)
    bm.dropout_remedy(0.5, batch=64, batches=2)
    assert torch.equal(torch.rand(3), expected)


def test_weights_feeding_bn_are_scale_invariant_with_a_1_over_c_gradient():
    out = bm.weight_scale_invariance(c=7.0, lr=0.05)
    assert out["loss_change"] < 1e-9 and abs(out["cosine"]) < 1e-12
    assert out["grad_ratio"] == pytest.approx(7.0, rel=1e-9)
    assert abs(out["norm_growth"]) < 1e-9 and out["direction_gap"] < 1e-12


def test_weight_norm_is_batch_independent_but_does_not_standardize():
    out = bm.weight_norm_vs_batch_norm()
    wn, bn = out["weight_norm"], out["batch_norm"]
    assert wn["mates_change"] == 0.0 < 0.1 < bn["mates_change"]
    assert wn["input_x10"] == pytest.approx(10.0) and bn["input_x10"] == pytest.approx(1.0)
    assert wn["v_x10_change"] < 1e-12 and bn["v_x10_change"] < 1e-5
    assert bn["output_std"] == pytest.approx(1.0, abs=1e-6) and wn["output_std"] > 1.5


def test_one_bn_layer_is_weight_norm_on_whitened_inputs_only():
    out = bm.whitened_equivalence()
    assert out["whitened"] < 1e-9 < 1.0 < out["raw"]


# --------------------------------------------------------------------------- BN evidence
def test_bn_benefits_carry_the_evidence_chapters_family_marks():
    verdicts = be.chapter_verdicts()
    table = be.benefit_rows(verdicts)
    by_setting = {(r["claim"], r["setting"]): r for r in verdicts.rows}
    printed = [r for rows in table.values() for r in rows]
    assert printed and all(
        r["holm"] == by_setting[(r["claim"], r["setting"])]["holm"]
        and r["result"].startswith(HOLM_MARK) == r["holm"] for r in printed)
    assert any(r["holm"] for r in printed) and not all(r["holm"] for r in printed)
    text = be.format_rows(table)
    assert text.count(HOLM_MARK) == sum(r["holm"] for r in printed)
    assert all(len(line) <= 78 for line in text.splitlines())
    assert table["reduces internal covariate shift"] == []
    marked = {s: w for rows in table.values() for s, w in be.words(rows).items()}
    assert all(w.endswith(HOLM_MARK) == by_setting_holm for w, by_setting_holm in zip(
        marked.values(), [r["holm"] for r in printed], strict=True))
    note = " ".join(be.family_note(verdicts).split())
    assert f"the evidence chapter's {len(verdicts.rows)} verdicts" in note
    assert "this chapter" not in note and note.endswith("is uncorrected.")


# --------------------------------------------------------------------------- test shift
def test_shift_breaks_running_statistics_and_reestimation_restores_them():
    bn, train, test = ds.shifted_channels()
    assert max(ds.channel_stats(bn(train[0]))) < 0.1
    assert max(ds.channel_stats(bn(test[0]))) > 0.4
    with ds.test_batch_statistics(bn):
        assert max(ds.channel_stats(bn(test[0]))) < 1e-4
    assert not bn.training and bn.running_mean is not None        # restored
    ds.reestimate_statistics(bn, test)
    assert max(ds.channel_stats(bn(test[0]))) < 0.1 and not bn.training
    assert bn.momentum == 0.1 or bn.momentum is None


def test_test_batch_statistics_make_a_prediction_depend_on_its_batch_mates():
    bn, _, test = ds.shifted_channels()
    change = ds.batch_mate_change(bn, test[0], test[1])
    assert change["running"] == 0.0 < 0.01 < change["test_batch"]
    assert not bn.training and bn.running_mean is not None        # restored
    with pytest.raises(ValueError, match="share a shape"):
        ds.batch_mate_change(bn, test[0], test[1][:3])


def test_tent_updates_only_the_bn_affine_parameters_and_lowers_the_entropy():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(6, 8), lnn.BatchNorm1d(8), torch.nn.ReLU(),
                                torch.nn.Linear(8, 4)).double().eval()
    x = torch.randn(32, 6, dtype=F64) * 2 + 1
    out = ds.tent_step(model, x, lr=0.05)
    assert out["updated"] == ["1.weight", "1.bias"]
    assert out["entropy_after"] < out["entropy_before"]
    assert not model[1].training
    with pytest.raises(ValueError, match="no BatchNorm"):
        ds.tent_step(torch.nn.Linear(3, 2), torch.randn(2, 3))
    with pytest.raises(ValueError, match="no BatchNorm"):
        ds.reestimate_statistics(torch.nn.Linear(3, 2), [torch.randn(2, 3)])


# --------------------------------------------------------------------------- classic norms
@pytest.mark.parametrize("n", [1, 2, 5, 6])
def test_alexnet_lrn_is_torch_lrn_with_alpha_times_n(n):
    a = torch.randn(2, 7, 3, 3, dtype=F64) * 10
    ours = cn.local_response_norm(a, n, k=2.0, alpha=1e-4, beta=0.75)
    torch.testing.assert_close(ours, TF.local_response_norm(a, n, alpha=n * 1e-4, beta=0.75,
                                                            k=2.0), rtol=1e-12, atol=0)
    with pytest.raises(ValueError, match="at least 3 dims"):
        cn.local_response_norm(torch.randn(3, 4))


def test_partial_rms_error_follows_the_prediction_and_breaks_on_an_outlier():
    errors = cn.partial_rms_error(hidden=1024)
    for p, err in errors.items():
        k = math.ceil(p * 1024)
        assert err == pytest.approx(cn.predicted_partial_rms_error(k, 1024), rel=0.15, abs=1e-12)
    outlier = cn.partial_rms_error((0.25, 1.0), outlier=100.0)
    assert outlier[0.25] > 0.5 and outlier[1.0] == 0.0
    x = torch.randn(3, 16, dtype=F64)
    torch.testing.assert_close(cn.partial_rms_norm(x, 1.0, eps=0.0),
                               LF.rms_norm(x, (16,), eps=0.0))
    with pytest.raises(ValueError, match="p must be"):
        cn.partial_rms_norm(x, 0.0)


def test_adain_gives_the_content_the_style_statistics():
    content = torch.randn(2, 3, 8, 8, dtype=F64) * 3 + 1
    style = torch.randn(2, 3, 5, 5, dtype=F64) * 4 + 2
    out = cn.adain(content, style)
    mean_o, std_o = cn.channel_mean_std(out)
    mean_s, std_s = cn.channel_mean_std(style)
    torch.testing.assert_close(mean_o, mean_s, rtol=0, atol=1e-12)
    torch.testing.assert_close(std_o, std_s, rtol=1e-4, atol=0)
    with pytest.raises(ValueError, match="share"):
        cn.adain(content, style[:, :2])


# --------------------------------------------------------------------------- the drill
def test_rms_norm_drill_passes_the_reference_and_float32_and_names_every_mistake():
    assert rms_drill.check_rms_norm(rms_drill.rms_norm_reference).passed
    rng = np.random.default_rng(0)
    x = rng.standard_normal((2, 3, 5)) + 0.7
    for message in rms_drill._forward_mistakes(x, np.ones(5), 1e-2):
        def reader(x, gamma, dout, eps, message=message):
            y, dx, dg = rms_drill.rms_norm_reference(x, gamma, dout, eps)
            with np.errstate(all="ignore"):
                return rms_drill._forward_mistakes(x, gamma, eps).get(message, y), dx, dg
        result = rms_drill.check_rms_norm(reader)
        assert not result.passed and message in result.message, result.message
    for label in ("dx", "dgamma"):
        for message in rms_drill._backward_mistakes(x, np.ones(5), x, 1e-5)[label]:
            def reader(x, gamma, dout, eps, label=label, message=message):
                y, dx, dg = rms_drill.rms_norm_reference(x, gamma, dout, eps)
                grads = {"dx": dx, "dgamma": dg}
                grads[label] = rms_drill._backward_mistakes(x, gamma, dout, eps)[label][message]
                return y, grads["dx"], grads["dgamma"]
            result = rms_drill.check_rms_norm(reader)
            assert not result.passed and message in result.message, result.message


def test_rms_norm_drill_accepts_float32_and_reports_shapes():
    def float32(x, gamma, dout, eps):
        outs = rms_drill.rms_norm_reference(x.astype(np.float32), gamma.astype(np.float32),
                                            dout.astype(np.float32), np.float32(eps))
        return tuple(np.asarray(o, np.float32) for o in outs)

    assert rms_drill.check_rms_norm(float32).passed

    def dgamma_unsummed(x, gamma, dout, eps):
        y, dx, _ = rms_drill.rms_norm_reference(x, gamma, dout, eps)
        return y, dx, dout * y / gamma

    result = rms_drill.check_rms_norm(dgamma_unsummed)
    assert not result.passed and "dgamma has shape" in result.message


# --------------------------------------------------------------------------- issue 41
def test_frozen_statistics_let_the_bias_run_away_while_the_loss_stays_put():
    from layernorm_tutorial.lab.interview import batch_statistics as bs

    frozen = bs.runaway_bias(False, steps=20)
    steps = np.diff(frozen["bias_norm"])
    assert steps.min() > 0.1 and np.ptp(steps) < 1e-9            # the same step, every step
    assert frozen["bias_norm"][-1] > 10
    assert np.ptp(frozen["loss"]) < 1e-12                         # the loss never moves
    through = bs.runaway_bias(True, steps=20)
    assert max(through["bias_grad"]) < 1e-12 and max(through["bias_norm"]) < 1e-12
    assert through["loss"][0] == pytest.approx(frozen["loss"][0], abs=1e-9)
    with pytest.raises(ValueError, match="steps"):
        bs.runaway_bias(True, steps=0)


def test_whitening_needs_more_samples_than_features_and_couples_them():
    from layernorm_tutorial.lab.interview import whitening as wh

    assert [wh.covariance_rank(m, 16) for m in (4, 8, 16, 17, 64)] == [3, 7, 15, 16, 16]
    few, many = wh.whitened_covariance(8, 16), wh.whitened_covariance(64, 16)
    assert many["whitened_gap"] < 1e-6 < 0.5 < few["whitened_gap"]
    for result in (few, many):          # BN's per-feature variances are 1 at any batch size
        assert result["standardized_gap"] < 1e-9 and result["standardized_offdiag"] > 0.1
    coupling = wh.feature_coupling()
    assert coupling["batch_norm"] == 0.0 and coupling["whitening"] > 0.1
    x = torch.randn(40, 3, dtype=F64) @ torch.randn(3, 3, dtype=F64)
    white = wh.zca_whiten(x, eps=0.0)
    torch.testing.assert_close(white.T @ white / 40, torch.eye(3, dtype=F64))
    with pytest.raises(ValueError, match=r"\(m, d\)"):
        wh.zca_whiten(x[0])
    with pytest.raises(ValueError, match="m >= 2"):
        wh.covariance_rank(1, 3)


def test_only_training_mode_batch_norm_couples_the_samples_of_a_batch():
    from layernorm_tutorial.lab.interview import batch_coupling as bc

    influence = {norm: bc.cross_sample_influence(norm) for norm in bc.NORMS}
    assert influence.pop("BatchNorm, training") > 1e-3
    assert set(influence.values()) == {0.0}
    assert len(influence) == 6
    with pytest.raises(ValueError, match="norm must be one of"):
        bc.cross_sample_influence("PowerNorm")
    with pytest.raises(ValueError, match="batch"):
        bc.cross_sample_influence("LayerNorm", batch=1)


def test_ln_lstm_follows_ba_et_al_and_cannot_be_had_by_wrapping_a_fused_lstm():
    from layernorm_tutorial.lab.interview import ln_lstm

    assert ln_lstm.equations_gap() < 1e-12
    change = ln_lstm.projection_scale_change(10.0)
    assert change["ln_lstm"] < 1e-9 < 0.1 < change["wrapped_lstm"]
    assert ln_lstm.projection_scale_change(1.0) == {"ln_lstm": 0.0, "wrapped_lstm": 0.0}
    per_gate, joint = ln_lstm.gate_block_means(True), ln_lstm.gate_block_means(False)
    assert per_gate.abs().max() < 1e-12                   # each block pinned to mean 0
    assert joint.abs().min() > 0.05                       # blocks keep their own levels
    assert joint.mean(1).abs().max() < 1e-12              # only their average is 0
    assert joint[:, 1].min() > 0                          # the forget gate's lean survives
    cell = ln_lstm.cell_magnitude_change(5.0)
    assert cell["with_cell_ln"] < 1e-12 < 0.1 < cell["without_cell_ln"]
    torch.manual_seed(0)
    expected = torch.rand(1)
    torch.manual_seed(0)
    ln_lstm.projection_scale_change()
    assert torch.rand(1) == expected                      # the global generator is untouched


def test_weight_norm_gradient_is_scaled_and_projected_and_only_grows_v():
    out = bm.weight_norm_gradient(lr=0.3)
    assert out["formula_gap"] < 1e-12 and out["cosine"] < 1e-12
    assert out["norm_growth"] < 1e-12
    assert out["grad_ratio"] == pytest.approx(10.0, rel=1e-12)


def test_preactivation_units_keep_an_identity_skip_path_and_an_unnormalized_stream():
    out = bm.preactivation_units((1, 4, 16))
    assert out["identity_gap"]["pre_activation"] == 0.0
    assert out["identity_gap"]["original"] > 0.5                # ReLU after the add
    stds = [out["stream_std"][d] for d in (1, 4, 16)]
    assert stds[0] > 1 and stds[0] < stds[1] < stds[2]


def test_style_adain_sets_the_statistics_whatever_the_input_and_the_blend_interpolates():
    x = torch.randn(2, 3, 6, 6, dtype=F64) * 3 + 1
    y_s = torch.rand(2, 3, dtype=F64) + 0.5
    y_b = torch.randn(2, 3, dtype=F64)
    out = cn.style_adain(x, y_s, y_b)
    mean, std = cn.channel_mean_std(out, eps=0.0)
    torch.testing.assert_close(mean[..., 0, 0], y_b, rtol=0, atol=1e-12)
    torch.testing.assert_close(std[..., 0, 0], y_s, rtol=1e-6, atol=0)
    rescaled = x * torch.tensor([5.0, 0.2, 2.0], dtype=F64).view(1, 3, 1, 1) - 7.0
    torch.testing.assert_close(cn.style_adain(rescaled, y_s, y_b), out, rtol=0, atol=1e-6)
    other = torch.randn(2, 3, 6, 6, dtype=F64)
    assert (cn.style_adain(other, y_s, y_b) - out).abs().max() > 0.5    # the pattern stays
    with pytest.raises(ValueError, match="y_s and y_b"):
        cn.style_adain(x, y_s[:, :2], y_b)
    style = torch.randn(2, 3, 4, 4, dtype=F64) * 2 + 3
    torch.testing.assert_close(cn.adain_blend(x, style, 0.0), x)
    torch.testing.assert_close(cn.adain_blend(x, style, 1.0), cn.adain(x, style))
    torch.testing.assert_close(cn.adain_blend(x, style, 0.5),
                               0.5 * (x + cn.adain(x, style)))
    with pytest.raises(ValueError, match="alpha"):
        cn.adain_blend(x, style, 1.5)
