"""The proofs of the interview's part 3 (training in practice) that need their own code."""

import math

import pytest
import torch
import torch.nn.functional as TF
from torch import nn

from layernorm_tutorial import functional as LF
from layernorm_tutorial import nn as lnn
from layernorm_tutorial.lab.interview import batch_norm_practice as bp
from layernorm_tutorial.lab.interview import bn_eval_debugging as dbg
from layernorm_tutorial.lab.interview import distribution_shift as ds
from layernorm_tutorial.lab.interview import group_standardization as gs
from layernorm_tutorial.lab.interview import mixed_precision_casts as casts
from layernorm_tutorial.lab.interview import norm_finetuning as ft
from layernorm_tutorial.lab.interview import norm_testing as nt
from layernorm_tutorial.lab.interview import normalizer_free as nf
from layernorm_tutorial.lab.interview import sharded_batch_norm
from layernorm_tutorial.lab.interview import sync_batch_norm_setup as sbn
from layernorm_tutorial.lab.interview import training_failures as tf
from layernorm_tutorial.lab.interview.saved_memory import layer_norm_saving_output

F64 = torch.float64


# --- training failures -------------------------------------------------------------------

@pytest.mark.parametrize("variance", [0.0, 1e-6, 1e-3, 1.0, 25.0])
@pytest.mark.parametrize("eps", [1e-5, 1e-12])
def test_gradient_gain_is_one_over_sqrt_var_plus_eps(variance, eps):
    gain = tf.gradient_gain(variance, eps)
    assert gain["measured"] == pytest.approx(gain["predicted"], rel=1e-9)
    assert gain["predicted"] == pytest.approx(1 / math.sqrt(variance + eps))


def test_gradient_gain_agrees_with_torch_layer_norm_backward():
    g = torch.Generator().manual_seed(3)
    x = (torch.randn(1, 16, generator=g, dtype=F64) * 1e-3 + 2).requires_grad_(True)
    dy = torch.randn(1, 16, generator=g, dtype=F64)
    (ours,) = torch.autograd.grad((LF.layer_norm(x, (16,)) * dy).sum(), x)
    (theirs,) = torch.autograd.grad((TF.layer_norm(x, (16,)) * dy).sum(), x)
    assert torch.allclose(ours, theirs, rtol=1e-10, atol=1e-12)
    with pytest.raises(ValueError, match="variance"):
        tf.gradient_gain(-1.0)


def _padded_batch():
    x = torch.randn(4, 8, dtype=F64, generator=torch.Generator().manual_seed(0))
    x[2] = 0.0
    return x


def test_find_nonfinite_names_the_norm_that_creates_a_backward_nan():
    torch.manual_seed(0)
    model = nn.Sequential(tf.EpsOutsideLayerNorm(8), nn.Linear(8, 8), nn.ReLU(),
                          lnn.LayerNorm(8), nn.Linear(8, 2)).to(F64)
    assert tf.find_nonfinite(model, _padded_batch()) == {"forward": None, "backward": "0"}
    model[0] = lnn.LayerNorm(8).to(F64)
    assert tf.find_nonfinite(model, _padded_batch()) == {"forward": None, "backward": None}
    assert all(not m._forward_hooks and not m._backward_hooks for m in model.modules())


def test_find_nonfinite_sees_a_forward_nan_and_removes_hooks_on_error():
    model = nn.Sequential(nn.Linear(8, 8), lnn.LayerNorm(8, eps=0.0)).to(F64)
    with torch.no_grad():
        model[0].weight.zero_()
        model[0].bias.fill_(1.0)                       # every row constant: 0/0 in the norm
    assert tf.find_nonfinite(model, _padded_batch())["forward"] == "1"
    with pytest.raises(RuntimeError):
        tf.find_nonfinite(model, torch.ones(2, 3, dtype=F64))    # wrong width
    assert all(not m._forward_hooks for m in model.modules())
    with pytest.raises(TypeError, match="model"):
        tf.find_nonfinite(lambda t: t, _padded_batch())


def test_anomaly_mode_names_the_square_root():
    x = _padded_batch().requires_grad_(True)
    message = tf.anomaly_message(lambda: tf.EpsOutsideLayerNorm(8)(x).sum())
    assert message.startswith("Function 'SqrtBackward0' returned nan values")
    assert tf.anomaly_message(lambda: LF.layer_norm(x, (8,)).sum()) is None


def test_eps_outside_layer_norm_is_finite_forward_and_nan_backward_on_a_constant_row():
    x = torch.zeros(1, 5, dtype=F64, requires_grad=True)
    y = tf.EpsOutsideLayerNorm(5)(x)
    assert torch.equal(y, torch.zeros_like(y))
    y.sum().backward()
    assert torch.isnan(x.grad).all()


def test_inplace_outcomes_depend_on_what_autograd_saved():
    w, b = torch.ones(8, dtype=F64), torch.zeros(8, dtype=F64)

    def torch_ln(t):
        return TF.layer_norm(t, (8,), w, b)

    def saving_output(t):
        return layer_norm_saving_output(t, (8,), w + 0.5, b)

    assert tf.inplace_outcome(torch_ln, "input")["status"] == "error"
    assert tf.inplace_outcome(torch_ln, "output") == {"status": "ok", "message": "",
                                                      "gradient_error": 0.0}
    assert tf.inplace_outcome(saving_output, "output")["status"] == "error"
    assert "modified by an inplace operation" in tf.inplace_outcome(torch_ln,
                                                                    "input")["message"]
    stashed = tf.inplace_outcome(tf.stashed_input_layer_norm, "input")
    assert stashed["status"] == "ok" and stashed["gradient_error"] > 0.1
    assert tf.inplace_outcome(tf.stashed_input_layer_norm, "output")["gradient_error"] < 1e-12
    with pytest.raises(ValueError, match="where"):
        tf.inplace_outcome(torch_ln, "weight")


def test_stashed_layer_norm_is_correct_without_inplace_edits():
    x = torch.randn(3, 6, dtype=F64, requires_grad=True)
    dy = torch.randn(3, 6, dtype=F64)
    (ours,) = torch.autograd.grad((tf.stashed_input_layer_norm(x) * dy).sum(), x)
    (theirs,) = torch.autograd.grad((TF.layer_norm(x, (6,)) * dy).sum(), x)
    assert torch.allclose(ours, theirs)


def _bn_model():
    torch.manual_seed(1)
    model = nn.Sequential(nn.Linear(4, 8), lnn.BatchNorm1d(8), nn.ReLU(), nn.Dropout(0.1),
                          nn.Linear(8, 2)).to(F64)
    for _ in range(5):
        model(torch.randn(16, 4, dtype=F64))
    return model


def test_no_grad_does_not_stop_running_statistics_and_evaluating_restores_modes():
    model = _bn_model()
    assert tf.mode_dependent_modules(model) == ["1", "3"]
    before = tf.buffers_of(model)
    with torch.no_grad():
        model(torch.randn(16, 4, dtype=F64) * 3 + 1)
    assert tf.max_buffer_change(before, model) > 0.1
    model[1].eval()                                    # a per-module choice
    before = tf.buffers_of(model)
    with tf.evaluating(model):
        assert tf.mode_dependent_modules(model) == [] and not torch.is_grad_enabled()
        model(torch.randn(16, 4, dtype=F64) * 3 + 1)
    assert tf.max_buffer_change(before, model) == 0.0
    assert tf.mode_dependent_modules(model, training=False) == ["1"]
    assert tf.mode_dependent_modules(model, training=True) == ["3"]
    model.train()                                      # undoes the per-module eval()
    assert tf.mode_dependent_modules(model, training=False) == []
    with pytest.raises(ValueError, match="snapshot"):
        tf.max_buffer_change({}, model)


# --- dtype casts in transformers' RMSNorm --------------------------------------------------

def test_traced_llama_forward_upcasts_then_casts_back_before_the_weight():
    lines = casts.traced_forward("LlamaRMSNorm")
    body = "\n".join(lines)
    assert "hidden_states.to(torch.float32)" in body
    assert "return self.weight * hidden_states.to(input_dtype)" in body
    with pytest.raises(ValueError, match="name"):
        casts.traced_forward("NoSuchNorm")


def test_without_upcast_fp16_rows_above_256_silently_become_zero():
    x = (torch.randn(8, 64, generator=torch.Generator().manual_seed(0)) * 300).half()
    w = torch.ones(64, dtype=torch.float16)
    assert torch.equal(casts.rms_norm_without_upcast(x, w), torch.zeros_like(x))
    ref = TF.rms_norm(x.double(), (64,), eps=1e-6)
    assert (casts.rms_norm_without_upcast(x.double(), w.double()) - ref).abs().max() < 1e-12


def test_cast_orders_one_rounding_vs_two():
    errors = casts.cast_order_errors()
    u = errors["unit_roundoff"]
    assert u == 2.0 ** -8
    assert errors["gemma"][0] <= u * (1 + 1e-6)
    assert u < errors["llama"][0] <= 2 * u + u * u
    assert errors["llama"][1] > errors["gemma"][1]


def test_llama_output_dtype_follows_promotion():
    assert casts.llama_output_dtype(torch.bfloat16, torch.bfloat16) == torch.bfloat16
    assert casts.llama_output_dtype(torch.float32, torch.bfloat16) == torch.float32


# --- how to test a norm ----------------------------------------------------------------------

def test_correct_layer_norms_pass_every_check():
    for fn in (TF.layer_norm, LF.layer_norm):
        assert all(nt.check_layer_norm(fn).values())


@pytest.mark.parametrize("bug, failing", [
    (nt.unbiased_layer_norm, {"torch parity"}),
    (nt.wrong_backward_layer_norm, {"gradcheck"}),
    (nt.eps_outside_layer_norm, {"torch parity", "constant row"}),
    (nt.batch_axis_layer_norm, {"torch parity", "invariances", "dx rows sum to 0"}),
])
def test_each_planted_bug_fails_exactly_its_checks(bug, failing):
    result = nt.check_layer_norm(bug)
    assert list(result) == list(nt.CHECKS)
    assert {name for name, ok in result.items() if not ok} == failing


def test_wrong_backward_has_the_right_forward_and_a_wrong_gradient():
    x = torch.randn(3, 5, dtype=F64, requires_grad=True)
    dy = torch.randn(3, 5, dtype=F64)
    y = nt.wrong_backward_layer_norm(x, (5,))
    assert torch.allclose(y, TF.layer_norm(x, (5,)))
    (wrong,) = torch.autograd.grad((y * dy).sum(), x)
    (right,) = torch.autograd.grad((TF.layer_norm(x, (5,)) * dy).sum(), x)
    assert (wrong - right).abs().max() > 1e-3


# --- BatchNorm in practice -------------------------------------------------------------------

def test_gradient_accumulation_is_exact_for_layer_norm_and_not_for_batch_norm():
    layer, batch = bp.accumulation_gap("layer"), bp.accumulation_gap("batch")
    assert layer["max_gap"] < 1e-12 < 1e-2 * batch["max_grad"] < batch["max_gap"]
    assert (batch["updates_full"], batch["updates_accumulated"]) == (1, 4)
    assert (layer["updates_full"], layer["updates_accumulated"]) == (0, 0)
    with pytest.raises(ValueError, match="micro_batches"):
        bp.accumulation_gap("batch", micro_batches=5)
    with pytest.raises(ValueError, match="norm"):
        bp.accumulation_gap("group")


def test_ghost_batch_norm_is_per_chunk_batch_norm_and_unsynchronized_data_parallel():
    x = torch.randn(16, 3, 2, dtype=F64) * 2 + 1
    w, b = torch.rand(3, dtype=F64) + 0.5, torch.randn(3, dtype=F64)
    ghost = bp.ghost_batch_norm(x, 4, w, b)
    expected = torch.cat([TF.batch_norm(c, None, None, w, b, training=True)
                          for c in x.split(4)])
    assert torch.allclose(ghost, expected, atol=1e-12)
    flat = torch.randn(16, 3, dtype=F64)
    assert torch.allclose(bp.ghost_batch_norm(flat, 4),
                          sharded_batch_norm.unsynchronized_batch_norm(flat, 4), atol=1e-12)
    assert torch.allclose(bp.ghost_batch_norm(x, 16), TF.batch_norm(x, None, None,
                                                                    training=True), atol=1e-12)
    with pytest.raises(ValueError, match="divide"):
        bp.ghost_batch_norm(x, 5)
    with pytest.raises(TypeError, match="int"):
        bp.ghost_batch_norm(x, 4.0)


def _renorm_inputs():
    g = torch.Generator().manual_seed(2)
    x = torch.randn(32, 3, 4, generator=g, dtype=F64) * 2 + 1
    return x, torch.tensor([0.5, 1.0, 2.0], dtype=F64), torch.tensor([2.0, 4.0, 0.5],
                                                                     dtype=F64)


def test_batch_renorm_limits():
    x, rm, rv = _renorm_inputs()
    y, r, d = bp.batch_renorm(x, rm, rv, r_max=1.0, d_max=0.0)
    assert torch.allclose(y, TF.batch_norm(x, None, None, training=True), atol=1e-12)
    assert torch.equal(r, torch.ones(3, dtype=F64)) and torch.equal(d.abs(), torch.zeros(3,
                                                                                  dtype=F64))
    y, r, d = bp.batch_renorm(x, rm, rv, r_max=1e3, d_max=1e3)
    assert torch.allclose(y, TF.batch_norm(x, rm, rv, training=False), atol=1e-12)
    w, b = torch.rand(3, dtype=F64) + 0.5, torch.randn(3, dtype=F64)
    y, _, _ = bp.batch_renorm(x, rm, rv, 1e3, 1e3, w, b)
    assert torch.allclose(y, TF.batch_norm(x, rm, rv, w, b, training=False), atol=1e-12)


def test_batch_renorm_clips_and_treats_r_and_d_as_constants():
    x, rm, rv = _renorm_inputs()
    _, r, d = bp.batch_renorm(x, rm, rv, r_max=1.5, d_max=0.5)
    assert (r <= 1.5).all() and (r >= 1 / 1.5).all() and (d.abs() <= 0.5).all()
    assert (r == 1.5).any() or (r == 1 / 1.5).any()
    xr = x.clone().requires_grad_(True)
    xb = x.clone().requires_grad_(True)
    dy = torch.randn_like(x)
    y, r, d = bp.batch_renorm(xr, rm, rv, 1.5, 0.5)
    (g_renorm,) = torch.autograd.grad((y * dy).sum(), xr)
    (g_bn,) = torch.autograd.grad((TF.batch_norm(xb, None, None, training=True)
                                   * (dy * r.view(1, 3, 1))).sum(), xb)
    assert torch.allclose(g_renorm, g_bn, atol=1e-12)
    with pytest.raises(ValueError, match="r_max"):
        bp.batch_renorm(x, rm, rv, 0.5, 0.0)


@pytest.mark.parametrize("momentum, steps", [(0.1, 50), (0.1, 3), (0.3, 40)])
def test_running_mean_lag_matches_the_closed_form(momentum, steps):
    out = bp.drifting_running_mean(steps=steps, momentum=momentum, drift=0.05)
    assert out["lag"] == pytest.approx(out["predicted_lag"], rel=1e-9, abs=1e-12)
    assert out["current_mean"] == pytest.approx(0.05 * steps, rel=1e-12)
    assert bp.predicted_ema_lag(0.1, 1.0, 10_000) == pytest.approx(9.0)
    with pytest.raises(ValueError, match="momentum"):
        bp.predicted_ema_lag(0.0, 1.0, 5)


def test_recomputed_statistics_remove_the_lag():
    out = bp.drifting_running_mean()
    ds.reestimate_statistics(out["model"], [out["batch"]])
    bn = out["model"][1]
    assert bn.running_mean.item() == pytest.approx(out["current_mean"], abs=1e-12)
    features = out["model"][0](out["batch"]).detach()
    assert bn.running_var.item() == pytest.approx(features.var().item(), rel=1e-12)


def test_class_sorted_batches_erase_the_class_signal_in_training_mode_only():
    sorted_x, sorted_y = bp.class_batches(sort_by_class=True)
    mixed_x, mixed_y = bp.class_batches(sort_by_class=False)
    assert torch.equal(sorted_x.reshape(-1).sort().values, mixed_x.reshape(-1).sort().values)
    assert all(len(set(b.tolist())) == 1 for b in sorted_y)
    bn = lnn.BatchNorm1d(1).to(F64)
    assert abs(bp.class_mean_gap(torch.stack([bn(b) for b in sorted_x]), sorted_y)) < 1e-12
    assert bp.class_mean_gap(torch.stack([bn(b) for b in mixed_x]), mixed_y) > 1.0
    bn.eval()
    out_sorted = bn(sorted_x.reshape(-1, 1))
    gap_raw = bp.class_mean_gap(sorted_x, sorted_y)
    assert bp.class_mean_gap(out_sorted, sorted_y) == pytest.approx(gap_raw, rel=1e-12)
    with pytest.raises(ValueError, match="batch"):
        bp.class_batches(sort_by_class=True, batch=7)


def test_shuffled_batch_norm_normalizes_each_key_with_another_subset():
    g = torch.Generator().manual_seed(0)
    keys = torch.randn(32, 4, dtype=F64)
    normalized, device = bp.shuffled_batch_norm(keys, 4, g)
    assert sorted(device.tolist()) == sorted((torch.arange(32) // 8).tolist())
    for dev in range(4):                  # each key is normalized with its device's chunk
        members = device == dev
        expected = TF.batch_norm(keys[members], None, None, training=True)
        assert torch.allclose(normalized[members], expected, atol=1e-12)
    assert (device != torch.arange(32) // 8).any()
    with pytest.raises(ValueError, match="devices"):
        bp.shuffled_batch_norm(keys, 5, g)


# --- group count and weight standardization ----------------------------------------------

def test_group_statistics_sizes_and_noise():
    assert gs.elements_per_statistic(2048, 32, 7, 7) == 64 * 49
    assert gs.elements_per_statistic(2048, 2048, 7, 7) == 49
    assert gs.variance_noise(3) == pytest.approx(1.0)
    g = torch.Generator().manual_seed(0)
    samples = torch.randn(20000, 49, generator=g, dtype=F64).var(1)
    assert samples.std().item() == pytest.approx(gs.variance_noise(49), rel=0.05)
    with pytest.raises(ValueError, match="groups"):
        gs.elements_per_statistic(30, 4, 1, 1)


def test_instance_norm_ignores_a_channels_scale_and_group_norm_does_not():
    x = torch.randn(2, 8, 5, 5, dtype=F64)
    assert gs.channel_scale_change(x, 8, 3, 10.0) < 1e-12
    assert gs.channel_scale_change(x, 2, 3, 10.0) > 0.1
    assert gs.channel_scale_change(x, 1, 3, 10.0) > 0.1
    assert torch.allclose(LF.group_norm(x, 8), TF.instance_norm(x), atol=1e-12)
    with pytest.raises(ValueError, match="factor"):
        gs.channel_scale_change(x, 2, 0, -1.0)


def test_weight_standardization_matches_the_readme_formula_and_is_invariant():
    w = torch.randn(6, 3, 3, 3, dtype=F64)
    ws = gs.weight_standardize(w)
    std, mean = torch.std_mean(w, dim=(1, 2, 3), keepdim=True)
    assert torch.allclose(ws, (w - mean) / (std + 1e-5))
    assert ws.mean((1, 2, 3)).abs().max() < 1e-12
    assert torch.allclose(gs.weight_standardize(3 * w + 2, eps=0.0),
                          gs.weight_standardize(w, eps=0.0), atol=1e-12)
    x = torch.randn(2, 3, 8, 8, dtype=F64)
    assert torch.allclose(gs.ws_conv2d(x + 5.0, w), gs.ws_conv2d(x, w), atol=1e-10)
    assert torch.allclose(gs.ws_conv2d(x, w, padding=1), TF.conv2d(x, ws, padding=1))
    with pytest.raises(ValueError, match="shape"):
        gs.weight_standardize(torch.ones(4))


# --- training without normalization -------------------------------------------------------

def test_zero_gamma_block_is_the_identity_and_only_the_last_bn_learns_first():
    torch.manual_seed(0)
    block = nf.ResidualBlock(8).to(F64)
    x = torch.relu(torch.randn(16, 8, dtype=F64))
    y = block(x)
    assert torch.equal(y, x)
    (y * torch.randn_like(y)).sum().backward()
    grads = {n: p.grad.abs().max().item() for n, p in block.named_parameters()}
    assert grads["bn2.weight"] > 0 and grads["bn2.bias"] > 0
    assert all(v == 0 for n, v in grads.items() if not n.startswith("bn2"))
    plain = nf.ResidualBlock(8, zero_init_last_gamma=False).to(F64)
    assert (plain(x) - x).abs().max() > 0.1


@pytest.mark.parametrize("mode, alpha, tolerance", [
    ("none", 1.0, 0.1), ("batchnorm", 1.0, 0.05), ("scaled", 0.25, 0.05), ("scaled", 0.0, 0)])
def test_residual_variance_follows_the_recursion(mode, alpha, tolerance):
    measured = nf.residual_variance(16, mode, alpha)
    predicted = nf.predicted_residual_variance(16, mode, alpha)
    assert measured[0] == pytest.approx(1.0, rel=1e-12)
    for m, p in zip(measured, predicted, strict=True):
        assert m == pytest.approx(p, rel=tolerance, abs=1e-12)
    with pytest.raises(ValueError, match="mode"):
        nf.residual_variance(3, "layernorm")


def test_rezero_and_layerscale_start_at_or_near_the_identity():
    torch.manual_seed(0)
    x = torch.randn(4, 8, dtype=F64)
    rezero, layerscale = nf.ReZeroBlock(8).to(F64), nf.LayerScaleBlock(8, 1e-5).to(F64)
    assert torch.equal(rezero(x), x)
    deviation = (layerscale(x) - x).abs().max().item()
    branch = layerscale.f(layerscale.norm(x)).abs().max().item()
    assert 0 < deviation <= 1e-5 * branch * (1 + 1e-9)
    (rezero(x) * torch.randn_like(x)).sum().backward()
    assert rezero.alpha.grad.abs() > 0
    assert all(p.grad.abs().max() == 0 for p in rezero.f.parameters())


def test_scaled_weight_standardization_rows_and_variance():
    g = torch.Generator().manual_seed(0)
    w = torch.randn(64, 128, generator=g, dtype=F64) * 5 + 3
    ws = nf.scaled_weight_standardize(w)
    assert ws.mean(1).abs().max() < 1e-12
    assert torch.allclose(ws.pow(2).sum(1), torch.ones(64, dtype=F64))
    gain = torch.rand(64, generator=g, dtype=F64) + 0.5
    assert torch.allclose(nf.scaled_weight_standardize(w, gain).pow(2).sum(1), gain ** 2)
    conv = torch.randn(8, 3, 3, 3, generator=g, dtype=F64)
    assert torch.allclose(nf.scaled_weight_standardize(conv).pow(2).sum((1, 2, 3)),
                          torch.ones(8, dtype=F64))


def test_nf_stack_variance_grows_by_alpha_squared_per_block():
    out = nf.nf_stack_variance(16, alpha=0.2)
    assert out["predicted"][-1] == pytest.approx(1 + 16 * 0.04)
    for m, p in zip(out["measured"], out["predicted"], strict=True):
        assert m == pytest.approx(p, rel=0.05)


def test_adaptive_gradient_clip_unitwise():
    g = torch.Generator().manual_seed(0)
    w = torch.randn(4, 6, generator=g, dtype=F64)
    scales = torch.tensor([[1e-3], [1e-2], [1.0], [10.0]], dtype=F64)
    grad = torch.randn(4, 6, generator=g, dtype=F64) * scales
    clipped = nf.adaptive_gradient_clip(grad, w, 0.01)
    ratio_before = grad.norm(dim=1) / w.norm(dim=1)
    ratio_after = clipped.norm(dim=1) / w.norm(dim=1)
    keep = ratio_before < 0.01
    assert torch.equal(clipped[keep], grad[keep])
    assert torch.allclose(ratio_after[~keep], torch.full_like(ratio_after[~keep], 0.01))
    cos = TF.cosine_similarity(clipped, grad, dim=1)
    assert torch.allclose(cos, torch.ones(4, dtype=F64))
    zero = nf.adaptive_gradient_clip(torch.ones(3, dtype=F64), torch.zeros(3, dtype=F64), 0.01)
    assert zero.norm().item() == pytest.approx(0.01 * 1e-3)      # eps keeps it trainable
    with pytest.raises(ValueError, match="shape"):
        nf.adaptive_gradient_clip(grad, w.T, 0.01)


# --- fine-tuning the norm parameters ---------------------------------------------------------

def test_parameter_counts_and_train_only_norms():
    model = nn.Sequential(nn.Linear(4, 4), lnn.LayerNorm(4), nn.Linear(4, 2))
    assert ft.parameter_counts(model) == {"norm": 8, "bias": 4 + 4 + 2, "total": 20 + 8 + 10}
    assert ft.train_only_norms(model) == ["1.weight", "1.bias"]
    assert [n for n, p in model.named_parameters() if p.requires_grad] == ["1.weight",
                                                                           "1.bias"]
    assert ft.train_only_norms(model, biases=True) == ["0.bias", "1.weight", "1.bias",
                                                       "2.bias"]


def test_meta_bert_base_norm_share():
    counts = ft.parameter_counts(ft.meta_model("BertModel", "BertConfig"))
    assert counts["norm"] == (2 * 12 + 1) * 2 * 768
    assert counts["norm"] / counts["total"] < 1e-3


def test_zero_learning_rate_finetuning_changes_the_model_only_through_bn_statistics():
    free = ft.zero_lr_finetune(keep_bn_eval=False)
    frozen = ft.zero_lr_finetune(keep_bn_eval=True)
    assert free["max_weight_change"] == 0 and frozen["max_weight_change"] == 0
    assert free["max_output_change"] > 0.1 and frozen["max_output_change"] == 0


def test_traced_llama_norm_keeps_fp16_rows_finite_where_the_uncast_formula_zeroes_them():
    x = (torch.randn(8, 64, generator=torch.Generator().manual_seed(1)) * 300).half()
    norm = casts.traced_norm("LlamaRMSNorm", 64).half()
    with torch.no_grad():
        y = norm(x)
    ref = TF.rms_norm(x.double(), (64,), eps=1e-6)
    assert y.dtype == torch.float16 and (y.double() - ref).abs().max() < 1e-2



# --- issue 41: BN debugging, SyncBN, tiny batches, accumulation, groups, no-norm scale ----

def test_bn_input_report_matches_the_buffers_and_restores_modes():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(3, 4), lnn.BatchNorm1d(4)).to(F64)
    x = torch.randn(32, 3, dtype=F64) * 2 + 1
    with torch.no_grad():
        model[1].running_mean.fill_(0.5)
        model[1].running_var.fill_(4.0)
    model.train()
    (row,) = dbg.bn_input_report(model, x)
    h = model[0](x).detach()
    mean_gap = ((h.mean(0) - 0.5).abs() / (4.0 + 1e-5) ** 0.5).max().item()
    var_gap = torch.log(h.var(0, correction=0) / 4.0).abs().max().item()
    assert row == {"name": "1", "updates": 0, "finite": True,
                   "mean_gap": pytest.approx(mean_gap, rel=1e-12),
                   "var_gap": pytest.approx(var_gap, rel=1e-12)}
    assert model.training and model[1].training                     # modes restored
    assert all(not m._forward_pre_hooks for m in model.modules())
    with pytest.raises(ValueError, match="BatchNorm"):
        dbg.bn_input_report(nn.Linear(3, 3), x)
    with pytest.raises(TypeError, match="model"):
        dbg.bn_input_report(lambda t: t, x)


def test_first_suspect_flags_non_finite_untouched_or_distant_statistics():
    ok = {"name": "a", "updates": 5, "finite": True, "mean_gap": 0.1, "var_gap": 0.2}
    assert dbg.first_suspect([ok]) is None
    assert dbg.first_suspect([ok, {**ok, "name": "b", "updates": 0}]) == "b"
    assert dbg.first_suspect([{**ok, "name": "c", "finite": False,
                               "mean_gap": math.nan}, ok]) == "c"
    assert dbg.first_suspect([{**ok, "var_gap": 3.0}]) == "a"
    assert dbg.first_suspect([{**ok, "var_gap": 3.0}], tolerance=5.0) is None


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_training_through_copies_never_updates_the_models_own_statistics(seed):
    x, y = dbg.make_task(512, seed=999)
    model = dbg.train_classifier(via_copies=True, seed=seed)
    assert int(model[1].num_batches_tracked) == 0
    assert torch.equal(model[1].running_mean, torch.zeros(16, dtype=F64))
    acc = dbg.accuracies(model, x, y)
    assert acc["batch_stats"] > 0.9 and acc["eval"] < 0.6           # chance in eval mode
    assert dbg.first_suspect(dbg.bn_input_report(model, x)) == "1"
    ds.reestimate_statistics(model, [dbg.make_task(64, seed=5000 + i)[0] for i in range(20)])
    assert dbg.accuracies(model, x, y)["eval"] > 0.9


def test_a_nan_batch_poisons_the_buffers_and_recomputing_them_cures_it():
    x, y = dbg.make_task(512, seed=999)
    model = dbg.train_classifier(via_copies=False, seed=0)
    assert int(model[1].num_batches_tracked) == 150
    weights = [p.clone() for p in model.parameters()]
    dbg.poison_statistics(model, x[:64])
    assert all(torch.equal(p, q) for p, q in zip(model.parameters(), weights, strict=True))
    (row,) = dbg.bn_input_report(model, x)
    assert not row["finite"] and dbg.first_suspect([row]) == "1"
    assert dbg.accuracies(model, x, y)["batch_stats"] > 0.9
    assert not torch.isfinite(model.eval()(x)).any()
    ds.reestimate_statistics(model, [dbg.make_task(64, seed=5000 + i)[0] for i in range(20)])
    assert dbg.first_suspect(dbg.bn_input_report(model, x)) is None


def test_convert_sync_batchnorm_keeps_the_same_tensors():
    model = nn.Sequential(nn.Conv2d(3, 4, 3), nn.BatchNorm2d(4), nn.ReLU(),
                          nn.Sequential(nn.BatchNorm2d(4)))
    converted, rows = sbn.convert(model)
    assert converted is model
    assert [(r["name"], r["before"], r["after"], r["same_tensors"]) for r in rows] == [
        ("1", "BatchNorm2d", "SyncBatchNorm", True),
        ("3.0", "BatchNorm2d", "SyncBatchNorm", True)]
    single, rows = sbn.convert(nn.BatchNorm1d(3))
    assert isinstance(single, nn.SyncBatchNorm) and rows[0]["same_tensors"]
    with pytest.raises(TypeError, match="model"):
        sbn.convert("not a model")


def test_sync_batch_norm_on_the_cpu_is_refused_by_ddp_and_by_its_forward():
    out = sbn.cpu_setup_errors()
    assert out["ddp"] == "SyncBatchNorm layers only work with GPU modules"
    assert out["train_forward"].startswith("SyncBatchNorm expected input tensor to be on GPU")
    assert out["eval_forward_ok"]
    assert not torch.distributed.is_initialized()                  # the group is gone


def test_sync_batch_norm_without_a_process_group_is_per_shard_batch_norm():
    x = torch.randn(16, 3, dtype=F64, generator=torch.Generator().manual_seed(2)) * 2 + 1
    assert sbn.unsynchronized_sync_batch_norm(x, 4) < 1e-12
    full = LF.batch_norm(x, None, None, training=True)
    assert (sharded_batch_norm.unsynchronized_batch_norm(x, 4) - full).abs().max() > 0.1
    with sbn.single_process_group():
        with pytest.raises(RuntimeError, match="already initialized"):
            with sbn.single_process_group():
                pass
        with pytest.raises(RuntimeError, match="process group"):
            sbn.unsynchronized_sync_batch_norm(x, 4)


@pytest.mark.parametrize("momentum,k", [(0.1, 8), (0.01, 4), (0.5, 3)])
def test_accumulated_micro_batches_decay_the_running_mean_k_times(momentum, k):
    out = bp.accumulation_running_mean(k, momentum)
    assert out["updates"] == k
    assert out["kept"] == pytest.approx((1 - momentum) ** k, rel=1e-12)
    corrected = bp.accumulation_running_mean(k, bp.micro_batch_momentum(momentum, k))
    assert corrected["kept"] == pytest.approx(1 - momentum, rel=1e-12)
    torch_bn = nn.BatchNorm1d(3, momentum=momentum).to(F64)       # torch agrees
    with torch.no_grad():
        torch_bn.running_mean.fill_(1.0)
    g = torch.Generator().manual_seed(0)
    for _ in range(k):
        xb = torch.randn(8, 3, generator=g, dtype=F64)
        torch_bn(xb - xb.mean(0))
    assert torch_bn.running_mean.max().item() == pytest.approx(out["kept"], rel=1e-12)
    with pytest.raises(ValueError, match="micro_batches"):
        bp.micro_batch_momentum(0.1, 0)
    with pytest.raises(ValueError, match="momentum"):
        bp.micro_batch_momentum(0.0, 4)


def test_small_batch_statistics_follow_the_formula_and_group_norm_ignores_the_batch():
    out = bp.small_batch_statistics([2, 8, 32], batches=300)
    for row in out.values():
        assert row["mean_std"] == pytest.approx(row["predicted"], rel=0.15)
        assert row["gn_alone_gap"] < 1e-12
    gaps = [out[n]["train_eval_gap"] for n in (2, 8, 32)]
    assert gaps[0] > gaps[1] > gaps[2] > 0
    with pytest.raises(ValueError, match="batch sizes"):
        bp.small_batch_statistics([1])


def test_group_norm_groups_are_contiguous_channels():
    x = torch.randn(2, 8, 3, 3, dtype=F64, generator=torch.Generator().manual_seed(4))
    for groups in (1, 2, 4, 8):
        ref = TF.group_norm(x, groups)
        assert (gs.contiguous_group_norm(x, groups) - ref).abs().max() < 1e-12
    interleaved = torch.cat([x[:, 0::2], x[:, 1::2]], dim=1)       # groups g, g + G, ...
    assert (gs.contiguous_group_norm(interleaved, 2)
            - TF.group_norm(x, 2)[:, list(range(0, 8, 2)) + list(range(1, 8, 2))]
            ).abs().max() > 0.1
    with pytest.raises(ValueError, match="groups"):
        gs.contiguous_group_norm(x, 3)


def test_channel_permutations_commute_with_group_norm_only_if_they_keep_the_groups():
    x = torch.randn(2, 8, 3, 3, dtype=F64, generator=torch.Generator().manual_seed(5))
    swap_groups = torch.tensor([4, 5, 6, 7, 0, 1, 2, 3])
    inside = torch.tensor([1, 0, 3, 2, 5, 4, 7, 6])
    shuffle = torch.tensor([0, 4, 1, 5, 2, 6, 3, 7])
    assert gs.channel_permutation_change(x, 2, swap_groups) < 1e-12
    assert gs.channel_permutation_change(x, 2, inside) < 1e-12
    assert gs.channel_permutation_change(x, 2, shuffle) > 0.1
    with pytest.raises(ValueError, match="permutation"):
        gs.channel_permutation_change(x, 2, torch.tensor([0, 0, 1, 2, 3, 4, 5, 6]))


def test_hard_coded_32_groups():
    with pytest.raises(ValueError, match="divisible"):
        nn.GroupNorm(32, 48)
    with pytest.raises(ValueError, match="divisible"):
        lnn.GroupNorm(32, 48)
    x = torch.randn(2, 32, 4, 4, dtype=F64, generator=torch.Generator().manual_seed(6))
    assert (TF.group_norm(x, 32) - TF.instance_norm(x)).abs().max() < 1e-12


def test_scale_sensitivity_without_and_with_a_norm():
    out = nf.scale_sensitivity([1, 3, 10])
    for s in (1, 3, 10):
        none, pre = out["none"][s], out["pre_ln"][s]
        assert none["branch"] == pytest.approx(s, rel=1e-12)
        assert none["grad"] == pytest.approx(s, rel=1e-12)
        assert none["logits"] == pytest.approx(s * s, rel=1e-12)
        assert all(v == pytest.approx(1, rel=1e-12) for v in pre.values())
    with pytest.raises(ValueError, match="scales"):
        nf.scale_sensitivity([0.0])


def _tiny_llama(**config):
    return ft.meta_model("LlamaForCausalLM", "LlamaConfig", hidden_size=64,
                         intermediate_size=128, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=4, vocab_size=100,
                         **config)


def test_kbit_upcast_report_counts_what_stays_unquantized():
    out = ft.kbit_upcast_report(_tiny_llama())
    assert out["kept"] == ["lm_head"]
    assert out["upcast"] == {"norm": (2 * 2 + 1) * 64, "embedding": 100 * 64,
                             "kept_linear": 100 * 64, "other": 0}
    assert out["extra_bytes"] == 2 * sum(out["upcast"].values())
    layer = 4 * 64 * 64 + 3 * 64 * 128                     # q, k, v, o and the MLP
    assert out["quantized"] == 2 * layer
    tied = ft.kbit_upcast_report(_tiny_llama(tie_word_embeddings=True))
    assert tied["upcast"]["embedding"] == 100 * 64 and tied["upcast"]["kept_linear"] == 0


@pytest.mark.parametrize("seed", range(5))
def test_upcasting_a_frozen_bf16_norm_changes_only_the_output_dtype(seed):
    out = ft.frozen_norm_upcast(hidden=96, seed=seed)
    assert out["weights_equal"] and out["rounded_equal"]
    assert out["dtypes"] == (torch.bfloat16, torch.float32)
    assert "same dtype" in out["next_linear_error"]


def test_requires_grad_false_does_not_freeze_bn_statistics():
    frozen_params = ft.zero_lr_finetune(keep_bn_eval=False, freeze_bn_params=True)
    assert frozen_params["max_output_change"] > 0.1
    assert frozen_params == ft.zero_lr_finetune(keep_bn_eval=False)


def test_a_norm_weight_without_a_gradient_silently_stays_put():
    out = ft.input_grad_only_step()
    assert out["input_grad_error"] < 1e-12
    assert out["weight_grad"] is None and out["weight_moved"] == 0
