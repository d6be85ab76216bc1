"""The proofs of the interview's part 4 (generative models, deployment, kernels):
lab/interview/{conditioning, gan_norms, magnitude_preserving, quantization, engine_precision,
position_encoding, vector_kernels, block_kernels, kernel_budgets, benchmark_reading}."""

import copy
import json
import re
from pathlib import Path

import numpy as np
import pytest
import torch
from torch import nn

from layernorm_tutorial import functional as LF
from layernorm_tutorial.lab.interview import (
    benchmark_reading,
    block_kernels,
    conditioning,
    engine_precision,
    gan_norms,
    kernel_budgets,
    magnitude_preserving,
    position_encoding,
    quantization,
    vector_kernels,
)

F64 = torch.float64
BOOK = Path(__file__).resolve().parents[1] / "book"


def _gen(seed):
    return torch.Generator().manual_seed(seed)


# --- conditioning: FiLM, conditional BN, SPADE, demodulation ------------------------------

def test_film_broadcasts_one_gain_and_bias_per_sample_and_channel():
    x = torch.randn(2, 3, 4, 5, generator=_gen(0), dtype=F64)
    g, b = torch.randn(2, 3, generator=_gen(1), dtype=F64), torch.randn(2, 3, dtype=F64)
    y = conditioning.film(x, g, b)
    for n in range(2):
        for c in range(3):
            torch.testing.assert_close(y[n, c], g[n, c] * x[n, c] + b[n, c])
    with pytest.raises(ValueError, match=r"\(N, C\)"):
        conditioning.film(x, g[:, :2], b)


def test_conditional_batch_norm_starts_as_torch_batch_norm_in_training_and_eval():
    torch.manual_seed(0)
    x = torch.randn(6, 4, 3, 3, dtype=F64) * 2 + 1
    c = torch.randn(6, 5, dtype=F64)
    cbn = conditioning.ConditionalBatchNorm2d(4, cond_dim=5).double()
    bn = nn.BatchNorm2d(4).double()
    torch.testing.assert_close(cbn(x, c), bn(x), rtol=0, atol=1e-12)
    torch.testing.assert_close(cbn.running_var, bn.running_var, rtol=0, atol=1e-12)
    cbn.eval(), bn.eval()
    torch.testing.assert_close(cbn(x, c), bn(x), rtol=0, atol=1e-12)


def test_conditional_batch_norm_conditions_only_the_affine_step():
    torch.manual_seed(1)
    x = torch.randn(5, 3, 4, 4, dtype=F64)
    cbn = conditioning.ConditionalBatchNorm2d(3, cond_dim=2).double()
    with torch.no_grad():
        cbn.delta.weight.normal_()
    c1, c2 = torch.randn(5, 2, dtype=F64), torch.randn(5, 2, dtype=F64)
    y1, y2 = cbn(x, c1), cbn(x, c2)
    assert (y1 - y2).abs().max() > 0.1
    x_hat = LF.batch_norm(x, None, None, training=True)
    for c, y in ((c1, y1), (c2, y2)):
        dg, db = cbn.delta(c).chunk(2, dim=-1)
        torch.testing.assert_close(conditioning.film(x_hat, cbn.gamma + dg, cbn.beta + db), y)
    with pytest.raises(ValueError, match="c must be"):
        cbn(x, c1[:4])


def test_a_uniform_label_map_is_washed_out_by_instance_norm_but_not_by_spade():
    torch.manual_seed(2)
    conv = nn.Conv2d(3, 5, 3, padding=1, padding_mode="replicate").double()
    spade = conditioning.SPADE(5, 3).double()
    outs = []
    for label in range(3):
        seg = conditioning.uniform_label_map(label, 3)
        feat, normed = conditioning.uniform_label_features(conv, seg)
        assert normed.abs().max() < 1e-12
        assert feat.std(dim=(2, 3)).max() < 1e-12          # constant per channel
        outs.append(spade(feat, seg)[0, :, 4, 4])
    assert min((outs[i] - outs[j]).abs().max() for i in range(3) for j in range(i)) > 1e-3
    with pytest.raises(ValueError, match="label must be"):
        conditioning.uniform_label_map(3, 3)


def test_spade_is_the_normalized_input_times_one_plus_gamma_plus_beta():
    torch.manual_seed(3)
    x = torch.randn(2, 4, 6, 6, dtype=F64)
    seg = torch.zeros(2, 3, 6, 6, dtype=F64)
    seg[:, 0, :3], seg[:, 2, 3:] = 1.0, 1.0
    for norm, normalize in (("instance", lambda t: LF.instance_norm(t)),
                            ("batch", lambda t: LF.batch_norm(t, None, None, training=True))):
        spade = conditioning.SPADE(4, 3, norm=norm).double()
        gamma, beta = spade.modulation(seg)
        assert gamma.shape == beta.shape == (2, 4, 6, 6)
        torch.testing.assert_close(spade(x, seg), normalize(x) * (1 + gamma) + beta)
    with pytest.raises(ValueError, match="norm must be"):
        conditioning.SPADE(4, 3, norm="layer")


def test_demodulated_weights_have_unit_norm_and_the_grouped_conv_is_per_sample():
    g = _gen(4)
    weight = torch.randn(5, 3, 3, 3, generator=g, dtype=F64)
    style = torch.rand(2, 3, generator=g, dtype=F64) * 4
    w = conditioning.modulated_weight(weight, style, eps=0.0)
    torch.testing.assert_close(w.pow(2).sum(dim=(2, 3, 4)), torch.ones(2, 5, dtype=F64))
    x = torch.randn(2, 3, 7, 7, generator=g, dtype=F64)
    y = conditioning.modulated_conv2d(x, weight, style)
    for n in range(2):
        ref = torch.nn.functional.conv2d(x[n:n + 1], conditioning.modulated_weight(
            weight, style)[n], padding=1)
        torch.testing.assert_close(y[n:n + 1], ref)
    torch.testing.assert_close(conditioning.modulated_conv2d(3 * x, weight, style), 3 * y)
    undemod = conditioning.modulated_weight(weight, style, demodulate=False)
    torch.testing.assert_close(undemod, weight.unsqueeze(0) * style[:, None, :, None, None])


# --- GAN critics: spectral norm, gradient penalty ------------------------------------------

@pytest.mark.parametrize("iterations", [1, 3])
@pytest.mark.parametrize("layer", ["linear", "conv"])
def test_spectral_normalize_matches_torch_parametrization_over_steps(layer, iterations):
    torch.manual_seed(5)
    module = (nn.Linear(12, 7) if layer == "linear" else nn.Conv2d(3, 6, 3)).double()
    sn = nn.utils.parametrizations.spectral_norm(copy.deepcopy(module),
                                                 n_power_iterations=iterations)
    state = sn.parametrizations.weight[0]
    u, v = state._u.clone(), state._v.clone()
    for _ in range(3):                    # every training-mode access is one step
        expected = sn.weight
        w, u, v, sigma = gan_norms.spectral_normalize(module.weight, u, v, iterations)
        torch.testing.assert_close(w, expected, rtol=0, atol=1e-12)
        torch.testing.assert_close(u, state._u, rtol=0, atol=1e-12)
        torch.testing.assert_close(v, state._v, rtol=0, atol=1e-12)


def test_the_power_iteration_estimate_never_exceeds_the_largest_singular_value():
    g = _gen(6)
    for _ in range(10):
        w = torch.randn(9, 5, generator=g, dtype=F64)
        u, v = torch.randn(9, generator=g, dtype=F64), torch.randn(5, generator=g, dtype=F64)
        _, _, _, sigma = gan_norms.spectral_normalize(w, u, v, 1)
        assert sigma <= torch.linalg.matrix_norm(w, 2) + 1e-12
    with pytest.raises(ValueError, match="iterations"):
        gan_norms.power_iteration(w, u, v, -1)


def test_conv_operator_norm_matches_the_dense_matrix_of_the_convolution():
    w = torch.randn(2, 3, 3, 3, generator=_gen(7), dtype=F64)
    size = 5
    dense = torch.autograd.functional.jacobian(
        lambda t: torch.nn.functional.conv2d(t, w, padding=1),
        torch.zeros(1, 3, size, size, dtype=F64)).reshape(2 * size * size, 3 * size * size)
    assert gan_norms.conv_operator_norm(w, size, iterations=500) == pytest.approx(
        torch.linalg.matrix_norm(dense, 2).item(), rel=1e-6)


def test_batch_norm_couples_the_samples_of_a_critic_and_layer_norm_does_not():
    x = torch.randn(4, 6, generator=_gen(8), dtype=F64)
    for norm, coupled in (("layer", False), ("batch", True), ("none", False)):
        critic = gan_norms.tiny_critic(norm)
        jac = gan_norms.cross_sample_jacobian(critic, x)
        cross = (jac - torch.diag(torch.diag(jac))).max()
        batched, own = gan_norms.penalty_gradients(critic, x)
        assert (cross > 1e-3) == coupled and ((batched - own).abs().max() > 1e-3) == coupled
    with pytest.raises(ValueError, match="norm must be"):
        gan_norms.tiny_critic("group")


def test_gradient_penalty_of_a_linear_critic_is_known_in_closed_form():
    critic = nn.Linear(4, 1, bias=False).double()
    with torch.no_grad():
        critic.weight.copy_(torch.tensor([[3.0, 0.0, 4.0, 0.0]]))   # gradient norm 5
    real, fake = torch.randn(3, 4, dtype=F64), torch.randn(3, 4, dtype=F64)
    penalty = gan_norms.gradient_penalty(critic, real, fake, torch.rand(3, dtype=F64))
    assert penalty.item() == pytest.approx(16.0)


# --- quantization and weight conventions ---------------------------------------------------

def test_gemma_trace_reads_the_zero_initial_weight_and_both_formulas():
    t = quantization.gemma_norms_traced()
    assert (t["initial_weight"] == 0).all()
    torch.testing.assert_close(t["gemma"], t["x_hat"] * (1 + t["w"]))
    torch.testing.assert_close(t["llama_with_gemma_weights"], t["x_hat"] * t["w"])


def test_storing_one_plus_w_in_bf16_loses_small_offsets():
    w = torch.tensor([0.001, -0.002, 0.003], dtype=F64)
    kept, rounded = quantization.gain_storage_error(w)
    assert kept <= 2**-8 * 0.003                    # bf16's relative rounding
    assert rounded == pytest.approx(0.003)          # 1.003 rounds to 1 in bf16


def test_int_layer_norm_traced_from_transformers_matches_layer_norm_within_mean_rounding():
    torch.manual_seed(0)
    hidden, scale = 256, torch.tensor([0.1])
    q = (torch.randn(2, 3, hidden) * 30).round().clamp(-127, 127)
    layer = quantization.traced_int_layer_norm(hidden)
    y, out_scale = layer(q * scale, scale)
    ref = LF.layer_norm((q * scale).double(), (hidden,), layer.weight.double(),
                        layer.bias.double())
    sigma_q = q.double().std(-1, correction=0).min().item()
    assert (y.double() - ref).abs().max() < layer.weight.max().item() / sigma_q
    assert out_scale.shape == (hidden,)


def test_int_layer_norm_overflow_shift_and_constant_row():
    layer = quantization.traced_int_layer_norm(64)
    scale = torch.tensor([1.0])
    layer.train()
    big = torch.full((1, 1, 64), 0.0)
    big[..., ::2], big[..., 1::2] = 20000.0, -20000.0      # sum of squares 64 * 4e8 > 2^32
    layer(big, scale)
    assert int(layer.shift) >= 1
    layer.eval()
    y, _ = layer(torch.full((1, 1, 64), 3.0), scale)
    assert y.isnan().all()


def test_integer_sqrt_is_exact_and_fast():
    import math

    rng = np.random.default_rng(4)
    worst = 0
    for n in [0, 1, 2, 3, 4, 8, 9, 15, 16, 2**31, 2**32 - 1, 10**30 + 7,
              *rng.integers(0, 2**32, 2000).tolist()]:
        root, steps = vector_kernels.integer_sqrt(n)
        assert root == math.isqrt(n)
        if n < 2**32:
            worst = max(worst, steps)
    assert worst <= 6
    for bad in (-1, 2.0, True):
        with pytest.raises(ValueError, match="non-negative integer"):
            vector_kernels.integer_sqrt(bad)


def test_layer_norm_is_rms_norm_after_mean_subtraction_and_rotations_commute_only_without_it():
    g = _gen(10)
    d = 12
    x = torch.randn(5, d, generator=g, dtype=F64) * 3 + 2
    m = quantization.mean_subtraction_matrix(d)
    torch.testing.assert_close(LF.layer_norm(x, (d,)), LF.rms_norm(x @ m, (d,), eps=1e-5))
    q = quantization.random_orthogonal(d, seed=3)
    torch.testing.assert_close(q.T @ q, torch.eye(d, dtype=F64))
    gamma = torch.rand(d, generator=g, dtype=F64) + 0.5
    assert quantization.commutation_gap(lambda t: LF.rms_norm(t, (d,), eps=1e-6), x, q) < 1e-12
    assert quantization.commutation_gap(lambda t: LF.rms_norm(t, (d,), gamma), x, q) > 0.1
    assert quantization.commutation_gap(lambda t: LF.layer_norm(t, (d,)), x, q) > 0.1
    perm = torch.eye(d, dtype=F64)[torch.randperm(d, generator=g)]
    assert quantization.commutation_gap(lambda t: LF.layer_norm(t, (d,)), x, perm) < 1e-12


def test_the_rotated_block_computes_the_same_output():
    g = _gen(11)
    d = 10
    h = torch.randn(4, 7, generator=g, dtype=F64)
    w_in, b_in = torch.randn(d, 7, generator=g, dtype=F64), torch.randn(d, generator=g,
                                                                           dtype=F64)
    gamma, beta = torch.rand(d, generator=g, dtype=F64) + 0.5, torch.randn(d, generator=g,
                                                                          dtype=F64)
    w_out, b_out = torch.randn(3, d, generator=g, dtype=F64), torch.randn(3, generator=g,
                                                                         dtype=F64)
    before = quantization.pre_norm_block(h, w_in, b_in, w_out, b_out, "layer", gamma, beta)
    r = quantization.rotate_pre_norm_block(w_in, b_in, gamma, beta, w_out, b_out,
                                           quantization.random_orthogonal(d))
    after = quantization.pre_norm_block(h, r.w_in, r.b_in, r.w_out, r.b_out, "rms")
    torch.testing.assert_close(after, before, rtol=0, atol=1e-12)
    # without the mean absorbed, the rotated stream under a plain RMSNorm is wrong
    q = quantization.random_orthogonal(d)
    wrong = quantization.pre_norm_block(h, q.T @ w_in, b_in @ q, (w_out * gamma) @ q,
                                        b_out + w_out @ beta, "rms")
    assert (wrong - before).abs().max() > 0.1
    with pytest.raises(ValueError, match="norm must be"):
        quantization.pre_norm_block(h, w_in, b_in, w_out, b_out, "group")


def test_smoothing_folds_into_the_norm_exactly_and_follows_the_formula():
    g = _gen(12)
    d = 8
    gamma, beta = torch.rand(d, generator=g, dtype=F64) + 0.5, torch.randn(d, generator=g,
                                                                          dtype=F64)
    gamma[2] = 30.0
    w1, w2 = torch.randn(4, d, generator=g, dtype=F64), torch.randn(6, d, generator=g,
                                                                    dtype=F64)
    h = torch.randn(50, d, generator=g, dtype=F64)
    acts = LF.layer_norm(h, (d,), gamma, beta)
    s = quantization.smoothing_factors(acts.abs().amax(0), [w1, w2], alpha=0.5)
    w_max = torch.maximum(w1.abs().amax(0), w2.abs().amax(0))
    torch.testing.assert_close(s, acts.abs().amax(0).sqrt() / w_max.sqrt())
    g2, b2, (v1, v2) = quantization.fold_smoothing_into_norm(gamma, beta, [w1, w2], s)
    acts2 = LF.layer_norm(h, (d,), g2, b2)
    for w, v in ((w1, v1), (w2, v2)):
        torch.testing.assert_close(acts2 @ v.T, acts @ w.T)
    assert quantization.channel_absmax_spread(acts2) < quantization.channel_absmax_spread(acts)
    with pytest.raises(ValueError, match="alpha"):
        quantization.smoothing_factors(acts.abs().amax(0), w1, alpha=1.5)


# --- QK-norm and RoPE -----------------------------------------------------------------------

def test_rope_matches_transformers_apply_rotary_pos_emb():
    from transformers.models.llama.modeling_llama import apply_rotary_pos_emb

    x = torch.randn(1, 2, 5, 8, generator=_gen(13), dtype=F64)
    positions = torch.arange(5)
    cos, sin = position_encoding.rope_cos_sin(positions, 8, 500.0)
    ref, _ = apply_rotary_pos_emb(x, x, cos[None], sin[None])
    torch.testing.assert_close(position_encoding.apply_rope(x, positions, 500.0), ref)
    torch.testing.assert_close(position_encoding.apply_rope(x, positions).norm(dim=-1),
                               x.norm(dim=-1))                # a rotation keeps norms
    with pytest.raises(ValueError, match="even"):
        position_encoding.rope_cos_sin(positions, 7)


def test_norm_then_rope_keeps_the_logit_relative_and_rope_then_gain_does_not():
    g = _gen(14)
    q, k = torch.randn(2, 8, generator=g, dtype=F64)
    gq, gk = torch.rand(2, 8, generator=g, dtype=F64) + 0.5
    paired = torch.cat([gq[:4], gq[:4]])

    def spread(gq_, gk_, order):
        s = [position_encoding.qk_score(q, k, m, m + 2, gq_, gk_, order) for m in (0, 4, 9)]
        return max(s) - min(s)

    assert spread(gq, gk, "norm-rope") < 1e-12
    assert spread(gq, gk, "rope-norm") > 1e-3
    assert spread(paired, paired, "rope-norm") < 1e-12
    with pytest.raises(ValueError, match="order"):
        position_encoding.qk_score(q, k, 0, 1, gq, gk, "both")


@pytest.mark.parametrize("name", ["Qwen3", "OLMo 2", "Gemma 3"])
def test_the_kv_cache_holds_normalized_then_rotated_keys(name):
    r = position_encoding.cached_key_order(name)
    assert r["norm_then_rope"] < 1e-6 < 0.1 < r["rope_then_norm"]
    assert r["k_norm_width"] == (16 if name == "OLMo 2" else 8)


# --- kernels below Triton -------------------------------------------------------------------

@pytest.mark.parametrize("hidden, width", [(37, 8), (32, 8), (5, 16), (64, 4), (1, 8)])
def test_simd_layer_norm_matches_torch_in_float64(hidden, width):
    x = np.random.default_rng(hidden).normal(2.0, 3.0, size=(3, hidden))
    ref = LF.layer_norm(torch.from_numpy(x), (hidden,)).numpy()
    np.testing.assert_allclose(vector_kernels.simd_layer_norm(x, width), ref, rtol=0,
                               atol=1e-12)


def test_an_unmasked_tail_adds_mean_squared_per_padded_lane():
    x = np.random.default_rng(0).normal(3.0, 2.0, size=(4, 21))   # 3 chunks of 8, 3 pads
    y = vector_kernels.simd_layer_norm(x, 8, eps=0.0, mask_tail=False)
    mu, var = x.mean(1, keepdims=True), x.var(1, keepdims=True)
    np.testing.assert_allclose(y, (x - mu) / np.sqrt(var + 3 * mu**2 / 21), rtol=1e-12)
    aligned = vector_kernels.simd_layer_norm(x[:, :16], 8, mask_tail=False)
    np.testing.assert_allclose(aligned, LF.layer_norm(torch.from_numpy(x[:, :16]),
                                                      (16,)).numpy(), atol=1e-12)


def test_simd_arguments_and_horizontal_sum():
    assert vector_kernels.horizontal_sum(np.arange(8.0)) == 28.0
    with pytest.raises(ValueError, match="power of 2"):
        vector_kernels.horizontal_sum(np.ones(6))
    with pytest.raises(ValueError, match="width"):
        vector_kernels.simd_layer_norm(np.ones((2, 4)), width=3)
    with pytest.raises(TypeError, match="floating"):
        vector_kernels.simd_layer_norm(np.ones((2, 4), dtype=int))


def test_newton_rsqrt_converges_quadratically_from_the_magic_guess():
    x = np.exp(np.random.default_rng(1).uniform(-30, 30, 20000)).astype(np.float32)
    exact = 1 / np.sqrt(x.astype(np.float64))
    guess = vector_kernels.magic_rsqrt_guess(x)
    e = np.abs(guess / exact - 1).max()
    assert 0.03 < e < 0.035
    ys = vector_kernels.newton_rsqrt(x, guess.astype(np.float64), 3)
    for before, after in zip(ys[:-1], ys[1:], strict=True):
        e_before = np.abs(before / exact - 1).max()
        e_after = np.abs(after / exact - 1).max()
        assert e_after <= abs(vector_kernels.newton_error_map(e_before)) * 1.01 + 1e-15
    assert np.abs(ys[3] / exact - 1).max() < 1e-10


def test_newton_rsqrt_goes_wrong_outside_its_basin():
    assert vector_kernels.newton_rsqrt(1.0, 2.0, 3)[-1] == -1.0      # x y0^2 = 4
    assert abs(vector_kernels.newton_rsqrt(1.0, 3.0, 4)[-1]) > 1e20  # x y0^2 = 9
    assert vector_kernels.newton_rsqrt(4.0, 0.6, 6)[-1] == pytest.approx(0.5)
    with pytest.raises(ValueError, match="positive"):
        vector_kernels.magic_rsqrt_guess(np.array([1.0, 0.0]))


def test_newton_error_map_is_the_exact_one_step_error():
    for e in (-0.3, -0.01, 0.02, 0.5):
        y = vector_kernels.newton_rsqrt(2.0, (1 + e) / np.sqrt(2.0), 1)[-1]
        assert y * np.sqrt(2.0) - 1 == pytest.approx(vector_kernels.newton_error_map(e),
                                                     abs=1e-15)


def test_warp_butterfly_gives_every_lane_the_same_sum_in_five_steps():
    v = np.random.default_rng(2).normal(3, 1, 32).astype(np.float32)
    steps = vector_kernels.warp_allreduce_xor(v)
    assert len(steps) == 6 and (steps[-1] == steps[-1][0]).all()
    assert steps[-1][0] == pytest.approx(v.astype(np.float64).sum(), rel=1e-6)
    down = vector_kernels.warp_reduce_down(v)
    assert len(down) == 6 and down[-1][0] == steps[-1][0]
    assert down[-1][1] != down[-1][0]
    with pytest.raises(ValueError, match="one number per lane"):
        vector_kernels.warp_allreduce_xor(np.ones(16, dtype=np.float32))


def test_tree_and_loop_round_differently_in_fp16():
    big = np.array([2048.0] + [1.0] * 31, dtype=np.float16)
    assert vector_kernels.warp_allreduce_xor(big)[-1][0] == 2078
    from layernorm_tutorial import variance_algorithms as va
    assert va.sequential_sum(big, np.float16) == 2048
    assert vector_kernels.pairwise_sum(np.ones(8), np.float16) == 8.0
    with pytest.raises(ValueError, match="power-of-2"):
        vector_kernels.pairwise_sum(np.ones(6))


def test_split_row_merge_is_exact_and_the_shortcuts_are_not():
    row = 1e4 + np.random.default_rng(3).normal(0, 1, 1000)
    s = vector_kernels.split_row_moments(row, 256, np.float64)
    assert s.counts == (256, 256, 256, 232)
    assert s.merged_mean == pytest.approx(row.mean(), rel=1e-14)
    assert s.merged_var == pytest.approx(row.var(), rel=1e-9)
    assert abs(s.mean_of_means - row.mean()) > 1e-4
    s32 = vector_kernels.split_row_moments(row, 256, np.float32)
    assert abs(s32.merged_var / s32.exact_var - 1) < 1e-3
    assert abs(s32.naive_var / s32.exact_var - 1) > 0.5
    even = vector_kernels.split_row_moments(row[:1024 - 24], 250, np.float64)
    assert even.mean_of_means == pytest.approx(even.merged_mean, rel=1e-14)
    with pytest.raises(ValueError, match="block_size"):
        vector_kernels.split_row_moments(row, 0)


# --- EDM2's magnitude-preserving layers -----------------------------------------------------

def test_silu_gain_is_the_papers_constant():
    grid = np.linspace(-12, 12, 200001)
    density = np.exp(-grid**2 / 2) / np.sqrt(2 * np.pi)
    silu = grid / (1 + np.exp(-grid))
    second = np.sum(silu**2 * density) * (grid[1] - grid[0])
    assert magnitude_preserving.silu_gain() == pytest.approx(np.sqrt(second), rel=1e-9)
    assert abs(magnitude_preserving.silu_gain() - magnitude_preserving.SILU_GAIN) < 5e-4


def test_mp_layers_keep_unit_variance_and_ignore_the_weight_scale():
    g = _gen(20)
    x = torch.randn(20000, 64, generator=g, dtype=F64)
    w = torch.randn(32, 64, generator=g, dtype=F64)
    wn = magnitude_preserving.mp_weight(w)
    torch.testing.assert_close(wn.norm(dim=1), torch.ones(32, dtype=F64))
    torch.testing.assert_close(magnitude_preserving.mp_weight(7.0 * w), wn, rtol=0, atol=1e-14)
    assert abs((x @ wn.T).var().item() - 1) < 0.05
    b = torch.randn(20000, 64, generator=g, dtype=F64)
    for t in (0.0, 0.3, 0.5, 1.0):
        assert abs(magnitude_preserving.mp_sum(x, b, t).var().item() - 1) < 0.05
    assert abs(magnitude_preserving.mp_silu(x).pow(2).mean().item() - 1) < 0.05
    with pytest.raises(ValueError, match="t must"):
        magnitude_preserving.mp_sum(x, b, 1.5)


def test_forced_weight_normalization_undoes_the_growth_of_a_step():
    g = _gen(21)
    w = torch.randn(8, 16, generator=g, dtype=F64, requires_grad=True)
    x = torch.randn(100, 16, generator=g, dtype=F64)
    loss = (x @ magnitude_preserving.mp_weight(w).T).pow(3).sum()
    (grad,) = torch.autograd.grad(loss, w)
    assert (grad * w).sum(dim=1).abs().max() < 1e-9 * grad.abs().max()   # orthogonal
    with torch.no_grad():
        stepped = w - 0.1 * grad
    assert (stepped.norm(dim=1) > w.norm(dim=1)).all()
    magnitude_preserving.force_normalize_(stepped)
    torch.testing.assert_close(stepped.norm(dim=1), torch.full((8,), 4.0, dtype=F64))


def test_pixel_norm_is_a_gainless_rms_norm_over_channels_and_local():
    g = _gen(22)
    x = torch.randn(2, 6, 5, 4, generator=g, dtype=F64)
    rms = LF.rms_norm(x.movedim(1, -1), (6,), eps=0.0).movedim(-1, 1)
    torch.testing.assert_close(magnitude_preserving.pixel_norm(x, eps=0.0), rms)
    spiked = x.clone()
    spiked[:, :, 0, 0] = 100.0
    far = (..., slice(1, None), slice(1, None))
    pn = magnitude_preserving.pixel_norm(spiked) - magnitude_preserving.pixel_norm(x)
    gn = LF.group_norm(spiked, 2) - LF.group_norm(x, 2)
    assert pn[far].abs().max() == 0 and gn[far].abs().max() > 0.1
    with pytest.raises(ValueError, match=r"\(N, C"):
        magnitude_preserving.pixel_norm(torch.ones(3))


def test_an_adm_main_path_grows_and_an_mp_one_does_not():
    x = torch.randn(256, 32, generator=_gen(23), dtype=F64)
    adm1, adm3 = (magnitude_preserving.residual_stack(x, 8, "adm", s) for s in (1.0, 3.0))
    mp1, mp3 = (magnitude_preserving.residual_stack(x, 8, "mp", s) for s in (1.0, 3.0))
    assert adm1[-1] > 1.5 * adm1[0] and adm3[-1] > 2 * adm1[-1]
    assert max(abs(a - b) for a, b in zip(mp1, mp3, strict=True)) < 1e-12
    assert all(0.7 < v < 1.4 for v in mp1)
    with pytest.raises(ValueError, match="design"):
        magnitude_preserving.residual_stack(x, 2, "unet")


# --- precision in an inference engine; SmoothQuant on Post-LN --------------------------------

def test_the_decomposed_graph_in_float64_is_layer_norm():
    x = np.random.default_rng(30).normal(2, 3, (3, 50))
    r = engine_precision.decomposed_layer_norm(x, np.float64)
    ref = LF.layer_norm(torch.from_numpy(x), (50,)).numpy()
    np.testing.assert_allclose(r["y"], ref, rtol=0, atol=1e-12)
    assert not r["nonfinite"]


def test_fp16_sums_of_squares_and_squares_overflow_where_fp32_statistics_do_not():
    rng = np.random.default_rng(31)
    x = np.stack([rng.normal(0, 6, 4096), rng.normal(0, 1, 4096)])
    x[1, 5] = 300.0                                     # 300^2 = 90000 > 65504
    ref = LF.layer_norm(torch.from_numpy(x), (4096,)).numpy()
    fp16 = engine_precision.decomposed_layer_norm(x, np.float16)
    sums32 = engine_precision.decomposed_layer_norm(x, np.float16, np.float32)
    fp32 = engine_precision.decomposed_layer_norm(x, np.float32)
    assert np.isinf(fp16["sum_squares"]).all() and (fp16["y"] == 0).all()
    assert np.isfinite(sums32["sum_squares"][0]) and np.isinf(sums32["squares_max"][1])
    assert np.abs(sums32["y"][0] - ref[0]).max() < 0.01 and (sums32["y"][1] == 0).all()
    out16 = fp32["y"].astype(np.float16).astype(np.float64)
    assert np.abs(out16 - ref).max() <= 2**-11 * np.abs(ref).max()
    with pytest.raises(ValueError, match="rows, H"):
        engine_precision.decomposed_layer_norm(np.ones(4))


def test_fp16_softmax_overflows_without_the_max_subtracted():
    assert np.isnan(engine_precision.fp16_softmax([12.0, 0.0], subtract_max=False)[0])
    p = engine_precision.fp16_softmax([12.0, 0.0, -3.0])
    ref = torch.softmax(torch.tensor([12.0, 0.0, -3.0], dtype=F64), 0).numpy()
    np.testing.assert_allclose(p, ref, rtol=0, atol=2e-3)
    ref11 = torch.softmax(torch.tensor([11.0, 0.0], dtype=F64), 0).numpy()
    np.testing.assert_allclose(engine_precision.fp16_softmax([11.0, 0.0], False), ref11,
                               rtol=0, atol=1e-3)          # e^11 < 65504: no overflow
    with pytest.raises(ValueError, match="1-D"):
        engine_precision.fp16_softmax([[1.0]])


def test_block_shares_count_the_matrix_multiplications():
    s = engine_precision.block_shares(8, 32, 16, 2)
    assert s["params_matmul"] == pytest.approx((4 * 64 + 2 * 8 * 32) / (4 * 64 + 512 + 32))
    assert s["params_matmul"] + s["params_norm"] == pytest.approx(1)
    assert s["flops_matmul"] + s["flops_norm_softmax"] == pytest.approx(1)
    big = engine_precision.block_shares(4096, 16384, 4096, 32)
    assert big["params_norm"] < 1e-4 and big["flops_norm_softmax"] < 0.01


def test_smoothing_a_post_ln_norm_divides_the_skip_unless_it_is_scaled_back():
    g = _gen(32)
    d = 12
    z = torch.randn(40, d, generator=g, dtype=F64) * 2 + 1
    gamma, beta = torch.rand(d, generator=g, dtype=F64) + 0.5, torch.randn(d, generator=g,
                                                                          dtype=F64)
    gamma[4] = 25.0
    w1, w2 = torch.randn(24, d, generator=g, dtype=F64), torch.randn(d, 24, generator=g,
                                                                     dtype=F64)
    acts = LF.layer_norm(z, (d,), gamma, beta)
    s = quantization.smoothing_factors(acts.abs().amax(0), w1)
    g2, b2, (v1,) = quantization.fold_smoothing_into_norm(gamma, beta, [w1], s)
    before = quantization.post_ln_block(z, gamma, beta, w1, w2)
    naive = quantization.post_ln_block(z, g2, b2, v1, w2)
    fixed = quantization.post_ln_block(z, g2, b2, v1, w2, skip_scale=s)
    assert (naive - before).abs().max() > 0.1
    torch.testing.assert_close(fixed, before, rtol=0, atol=1e-12)
    ones = torch.ones(d, dtype=F64)
    torch.testing.assert_close(quantization.post_ln_block(z, gamma, beta, w1, w2, ones),
                               before, rtol=0, atol=0)


# --- instance/batch norm defaults in evaluation mode --------------------------------------

@pytest.mark.parametrize("module", [nn, "ours"])
def test_batch_norm_without_running_stats_uses_batch_statistics_in_eval(module):
    from layernorm_tutorial import nn as lnn

    make = nn.BatchNorm2d if module is nn else lnn.BatchNorm2d
    x = torch.randn(5, 3, 4, 4, generator=_gen(33), dtype=F64) * 2 + 1
    bn = make(3, track_running_stats=False).double().eval()
    assert bn.running_mean is None
    torch.testing.assert_close(bn(x), LF.batch_norm(x, None, None, training=True),
                               rtol=0, atol=1e-12)
    flipped = make(3).double()
    flipped(x)
    flipped.track_running_stats = False
    flipped.eval()
    running = LF.batch_norm(x, flipped.running_mean, flipped.running_var, training=False)
    torch.testing.assert_close(flipped(x), running, rtol=0, atol=1e-12)
    assert (flipped(x) - LF.batch_norm(x, None, None, training=True)).abs().max() > 0.1


# --- a CUDA-style norm kernel, simulated -----------------------------------------------------

@pytest.mark.parametrize("kind", ["layer", "rms"])
@pytest.mark.parametrize("threads, vec, hidden", [(32, 4, 96), (128, 4, 4096), (1024, 1, 3000),
                                                  (64, 2, 130)])
def test_block_row_norm_matches_torch_in_float64(kind, threads, vec, hidden):
    rng = np.random.default_rng(hidden)
    x, r = rng.normal(2, 3, (3, hidden)), rng.normal(0, 1, (3, hidden))
    w, b = rng.normal(1, 0.2, hidden), rng.normal(0, 0.2, hidden)
    out = block_kernels.block_row_norm(x, r, w, b if kind == "layer" else None, kind=kind,
                                       threads=threads, vec=vec, acc_dtype=np.float64)
    s = torch.from_numpy(x + r)
    ref = (LF.layer_norm(s, (hidden,), torch.from_numpy(w), torch.from_numpy(b))
           if kind == "layer" else LF.rms_norm(s, (hidden,), torch.from_numpy(w), eps=1e-5))
    np.testing.assert_allclose(out.y, ref.numpy(), rtol=0, atol=1e-12)
    np.testing.assert_array_equal(out.residual, x + r)
    assert out.loads_per_thread == -(-hidden // vec // threads)
    assert out.warp_sums.shape == (threads // 32,) and out.shared_floats == threads // 32
    first = (x + r)[0] if kind == "layer" else ((x + r)[0] ** 2)
    assert out.thread_partials.sum() == pytest.approx(first.sum(), rel=1e-12)
    np.testing.assert_allclose(out.warp_sums, out.thread_partials.reshape(-1, 32).sum(1),
                               rtol=1e-12)


def test_thread_t_owns_chunks_t_t_plus_threads_and_so_on():
    hidden, threads, vec = 64 * 4 * 3, 64, 4
    x = np.zeros((1, hidden))
    x[0, 4 * 5:4 * 6] = 1.0                          # chunk 5
    x[0, 4 * (5 + 64):4 * (6 + 64)] = 2.0            # chunk 69 = 5 + threads
    out = block_kernels.block_row_norm(x, kind="rms", threads=threads, vec=vec,
                                       acc_dtype=np.float64)
    expected = np.zeros(threads)
    expected[5] = 4 * 1.0 + 4 * 4.0
    np.testing.assert_array_equal(out.thread_partials, expected)


def test_fp16_input_with_fp32_accumulation_stays_within_fp16_rounding():
    x = np.random.default_rng(5).normal(3, 2, (2, 1024)).astype(np.float16)
    out = block_kernels.block_row_norm(x, kind="layer")
    assert out.y.dtype == np.float16
    ref = LF.layer_norm(torch.from_numpy(x.astype(np.float64)), (1024,)).numpy()
    assert np.abs(out.y.astype(np.float64) - ref).max() < 2**-8


def test_block_row_norm_rejects_bad_launches():
    x = np.ones((2, 12))
    with pytest.raises(ValueError, match="multiple of 32"):
        block_kernels.block_row_norm(x, threads=48)
    with pytest.raises(ValueError, match="multiple of 32"):
        block_kernels.block_row_norm(x, threads=2048)
    with pytest.raises(ValueError, match="vec must divide"):
        block_kernels.block_row_norm(np.ones((2, 10)), vec=4)
    with pytest.raises(ValueError, match="kind"):
        block_kernels.block_row_norm(x, kind="group")
    with pytest.raises(ValueError, match="residual"):
        block_kernels.block_row_norm(x, np.ones((2, 8)))
    with pytest.raises(TypeError, match="floating"):
        block_kernels.block_row_norm(np.ones((2, 12), dtype=int))


@pytest.mark.parametrize("hidden, elem_bytes", [(4096, 4), (4098, 4), (4099, 4), (4096, 2),
                                                (4100, 2), (768, 2), (1, 1)])
def test_vector_width_keeps_every_row_aligned(hidden, elem_bytes):
    v = block_kernels.vector_width(hidden, elem_bytes)
    assert hidden % v == 0 and v * elem_bytes <= 16
    offsets = block_kernels.row_start_offsets(hidden, elem_bytes, rows=8)
    assert all(o % (v * elem_bytes) == 0 for o in offsets)
    wider = 2 * v
    if wider * elem_bytes <= 16:                   # the next width breaks some row
        assert hidden % wider or any(o % (wider * elem_bytes) for o in offsets)
    with pytest.raises(ValueError, match="elem_bytes"):
        block_kernels.vector_width(hidden, 3)


def test_row_offsets_and_warp_spans():
    assert block_kernels.row_start_offsets(4099, 4) == [0, 12, 8, 4]
    assert block_kernels.row_start_offsets(4096, 4) == [0, 0, 0, 0]
    assert block_kernels.warp_span_bytes(1) == 128
    assert block_kernels.warp_span_bytes(1, 16) == 512
    assert block_kernels.warp_span_bytes(768) == 31 * 768 * 4 + 4
    with pytest.raises(ValueError, match="lane_stride"):
        block_kernels.warp_span_bytes(0)


@pytest.mark.parametrize("row_blocks", [1, 2, 5, 37])
def test_column_batch_norm_matches_torch_for_any_split(row_blocks):
    x = np.random.default_rng(row_blocks).normal(1e3, 2, (37, 9))
    y, mean, var = block_kernels.column_batch_norm(x, row_blocks)
    t = torch.from_numpy(x)
    np.testing.assert_allclose(y, LF.batch_norm(t, None, None, training=True).numpy(),
                               rtol=0, atol=1e-9)
    np.testing.assert_allclose(mean, x.mean(0), rtol=1e-14)
    np.testing.assert_allclose(var, x.var(0), rtol=1e-9)
    with pytest.raises(ValueError, match="row_blocks"):
        block_kernels.column_batch_norm(x, 38)


def test_group_norm_as_rows_matches_torch_and_reads_a_view():
    rng = np.random.default_rng(6)
    x = rng.normal(2, 3, (2, 6, 4, 5))
    w, b = rng.normal(1, 0.3, 6), rng.normal(0, 0.3, 6)
    y, view = block_kernels.group_norm_rows(x, 3, w, b, acc_dtype=np.float64, threads=32)
    ref = LF.group_norm(torch.from_numpy(x), 3, torch.from_numpy(w), torch.from_numpy(b))
    np.testing.assert_allclose(y, ref.numpy(), rtol=0, atol=1e-12)
    assert view
    c, hw = 6, 20
    for g in range(3):
        for offset in range(2 * hw):
            flat = g * 2 * hw + offset                 # position within one sample
            assert block_kernels.channel_of_offset(offset, g, c, 3, hw) == flat // hw
    with pytest.raises(ValueError, match="contiguous"):
        block_kernels.group_norm_rows(np.asfortranarray(x), 3)
    with pytest.raises(ValueError, match="groups must divide"):
        block_kernels.group_norm_rows(x, 4)


# --- the hidden-size limit -------------------------------------------------------------------

def test_stored_register_counts_are_read_from_the_compile_table():
    data = json.loads((BOOK / "data" / "kernel_resources.json").read_text())
    rows = kernel_budgets.stored_forward_registers("sm_90", "fp32")
    assert [r["block_n"] for r in rows] == sorted(r["block_n"] for r in rows)
    for r in rows:
        match = [d for d in data["rows"] if d["target"] == "sm_90" and d["dtype"] == "fp32"
                 and d["kernel"] == "forward" and d["block_n"] == r["block_n"]
                 and d["row_fits_block"] and d["has_weight"] and d["has_bias"]
                 and d["aligned"] and d.get("rows", 1) == 1]
        assert len(match) == 1 and match[0]["registers"] == r["registers"]
        assert r["values"] == r["block_n"] / (32 * r["warps"])
        assert r["registers"] <= kernel_budgets.MAX_REGISTERS_PER_THREAD
    with pytest.raises(ValueError, match="no row-resident"):
        kernel_budgets.stored_forward_registers("sm_90", "fp8")


def test_register_file_share_rounds_per_warp():
    assert kernel_budgets.register_file_share(64, 32) == 1.0
    assert kernel_budgets.register_file_share(1, 1) == 256 / 65536
    assert kernel_budgets.register_file_share(234, 8) == 30 * 256 * 8 / 65536
    assert kernel_budgets.register_file_share(234, 16) > 1
    with pytest.raises(ValueError, match="registers"):
        kernel_budgets.register_file_share(300, 4)


@pytest.mark.parametrize("d, elem_bytes", [(16384, 2), (8192, 2), (4096, 4), (111, 2),
                                           (12288, 2)])
def test_row_cache_shared_bytes_follows_the_launch_arithmetic(d, elem_bytes):
    vec = np.gcd(16 // elem_bytes, d)
    threads = min(1024, d // vec)
    warps = -(-threads // 32)
    expected = 4 * (-(-warps // 4) * 4 + d)
    assert kernel_budgets.row_cache_shared_bytes(d, elem_bytes) == expected
    over = expected > kernel_budgets.DEFAULT_SHARED_PER_BLOCK
    assert over == (d >= 12288)


@pytest.mark.parametrize("kind", ["layer", "rms"])
@pytest.mark.parametrize("chunk", [1, 7, 64, 5000])
def test_chunked_row_norm_matches_torch(kind, chunk):
    x = np.random.default_rng(chunk).normal(50, 2, (3, 300))
    t = torch.from_numpy(x)
    ref = LF.layer_norm(t, (300,)) if kind == "layer" else LF.rms_norm(t, (300,), eps=1e-5)
    np.testing.assert_allclose(kernel_budgets.chunked_row_norm(x, chunk, kind), ref.numpy(),
                               rtol=0, atol=1e-10)
    with pytest.raises(ValueError, match="chunk"):
        kernel_budgets.chunked_row_norm(x, 0)
    assert kernel_budgets.bytes_per_element(2, 2) == 6


# --- reading a stored benchmark -------------------------------------------------------------

def test_kernel_shares_and_call_ratios_recompute_the_stored_rows():
    run = benchmark_reading.load_run()
    shares = benchmark_reading.kernel_shares(run, "bfloat16", "fwd")
    rows = [r for r in run["rows"] if r["dtype"] == "bfloat16" and r["direction"] == "fwd"]
    for r in rows:
        n = int(r["shape"].split("x")[1])
        assert shares[r["implementation"]][n] == r["kernel_gbps"] / run["device_copy_gbps"]
    assert max(shares["composite"].values()) < 0.1 < 0.5 < min(shares["compiled"].values())
    ratio = benchmark_reading.call_over_kernel(run, "compiled")
    for r in rows:
        if r["implementation"] == "compiled":
            n = int(r["shape"].split("x")[1])
            assert ratio[n] == r["median_ms"] / r["kernel_ms"]
    table = benchmark_reading.format_shares(shares)
    assert all(len(line) <= 80 for line in table.splitlines())
    with pytest.raises(ValueError, match="no stored rows"):
        benchmark_reading.kernel_shares(run, "float8")
    with pytest.raises(ValueError, match="no kernels-alone"):
        benchmark_reading.call_over_kernel(run, "numpy_ref")


# --- the chapter -----------------------------------------------------------------------------

def _cells():
    return json.loads((BOOK / "interview_deployment.ipynb").read_text())["cells"]


def test_every_question_has_a_short_answer_and_a_proof_cell_that_asserts():
    cells = _cells()
    starts = [i for i, c in enumerate(cells) if c["cell_type"] == "markdown"
              and "{admonition} Model answer" in "".join(c["source"])]
    assert len(starts) >= 16
    for n, i in enumerate(starts):
        source = "".join(cells[i]["source"])
        title = re.search(r"^### (.+)$", source, re.M).group(1)
        short = re.search(r"\*\*Short answer:\*\* (.+)", source).group(1)
        assert len(short.split()) <= 80, title
        end = starts[n + 1] if n + 1 < len(starts) else len(cells)
        code = ["".join(c["source"]) for c in cells[i + 1:end] if c["cell_type"] == "code"]
        assert len(code) == 1 and re.search(r"^\s*assert ", code[0], re.M), title
        assert re.search(r"\b(conditioning|gan_norms|quantization|position_encoding|"
                         r"vector_kernels|block_kernels|kernel_budgets|engine_precision|"
                         r"benchmark_reading|magnitude_preserving|LF|lnn|va|"
                         r"classic_norms|adaln|outliers)\.",
                         code[0]), title


def test_every_paragraph_naming_a_model_carries_its_source():
    from test_citations import uncited

    missing = uncited({"cells": _cells()})
    assert not missing, missing


def test_the_chapter_is_in_the_table_of_contents_after_part_3():
    toc = (BOOK.parent / "_toc.yml").read_text()
    files = re.findall(r"file:\s*(\S+)", toc)
    assert files.index("book/interview_deployment") == files.index("book/interview_practice") + 1


def test_gemma_norm_initialized_to_ones_doubles_the_output():
    from layernorm_tutorial.lab.interview import quantization

    assert abs(quantization.gemma_gain_with_ones_init() - 2.0) < 1e-5
