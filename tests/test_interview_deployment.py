"""The proofs of the interview's part 4 (generative models, deployment, kernels):
lab/interview/{conditioning, gan_norms, quantization, position_encoding, vector_kernels}."""

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
    conditioning,
    gan_norms,
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
                         r"vector_kernels|LF|lnn|va|classic_norms|adaln|outliers)\.",
                         code[0]), title


def test_every_paragraph_naming_a_model_carries_its_source():
    from test_citations import uncited

    missing = uncited({"cells": _cells()})
    assert not missing, missing


def test_the_chapter_is_in_the_table_of_contents_after_part_3():
    toc = (BOOK.parent / "_toc.yml").read_text()
    files = re.findall(r"file:\s*(\S+)", toc)
    assert files.index("book/interview_deployment") == files.index("book/interview_practice") + 1
