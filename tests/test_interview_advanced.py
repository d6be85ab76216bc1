"""The proofs of the interview's part 2 that need their own code (lab/interview)."""

import functools
import math

import pytest
import torch

from layernorm_tutorial import functional as LF
from layernorm_tutorial.lab.interview import (
    deepnet,
    gradient_depth,
    ln_jacobians,
    logit_stability,
    placement,
    powernorm,
)

F64 = torch.float64


# --- QK-norm's bound, soft-capping, z-loss, QK-Clip -----------------------------------

def test_qk_norm_bound_holds_and_is_attained_while_the_old_formula_fails():
    d_h = 16
    gamma = torch.zeros(d_h, dtype=F64)
    gamma[0] = 4.0
    e1 = torch.eye(d_h, dtype=F64)[0]
    logit = logit_stability.qk_normed_logit(e1, e1, gamma, gamma).item()
    assert logit == pytest.approx(64.0)
    assert logit_stability.qk_norm_logit_bound(gamma, gamma) == pytest.approx(64.0)
    assert logit_stability.old_qk_norm_bound(gamma, gamma) == pytest.approx(4.0)


def test_qk_norm_bound_holds_for_random_gains_and_vectors():
    g = torch.Generator().manual_seed(0)
    for _ in range(20):
        gq, gk = torch.randn(8, generator=g, dtype=F64), torch.randn(8, generator=g, dtype=F64)
        q, k = torch.randn(50, 8, generator=g, dtype=F64), torch.randn(50, 8, generator=g,
                                                                         dtype=F64)
        z = logit_stability.qk_normed_logit(q, k, gq, gk)
        assert z.abs().max() <= logit_stability.qk_norm_logit_bound(gq, gk) + 1e-12


def test_qk_normed_logit_matches_torch_rms_norm():
    g = torch.Generator().manual_seed(1)
    q, k = torch.randn(3, 8, generator=g, dtype=F64), torch.randn(3, 8, generator=g, dtype=F64)
    gq, gk = torch.rand(8, generator=g, dtype=F64), torch.rand(8, generator=g, dtype=F64)
    ref = (torch.nn.functional.rms_norm(q, (8,), gq, eps=0.0)
           * torch.nn.functional.rms_norm(k, (8,), gk, eps=0.0)).sum(-1) / math.sqrt(8)
    assert torch.allclose(logit_stability.qk_normed_logit(q, k, gq, gk), ref)


def test_soft_cap_is_bounded_and_near_identity_for_small_logits():
    z = torch.linspace(-1e3, 1e3, 101, dtype=F64)
    capped = logit_stability.soft_cap(z, 30.0)
    assert capped.abs().max() <= 30.0
    small = torch.tensor([0.01, -0.3], dtype=F64)
    assert torch.allclose(logit_stability.soft_cap(small, 30.0), small, atol=1e-4)
    with pytest.raises(ValueError, match="cap"):
        logit_stability.soft_cap(z, 0.0)


def test_z_loss_gradient_closed_form_matches_autograd_and_vanishes_at_log_z_zero():
    logits = (torch.randn(4, 10, dtype=F64) * 2 + 3).requires_grad_()
    logit_stability.z_loss(logits, coef=1e-3).backward()
    assert torch.allclose(logits.grad, logit_stability.z_loss_gradient(logits.detach(), 1e-3))
    centred = torch.log_softmax(torch.randn(4, 10, dtype=F64), -1)   # log Z = 0 per row
    assert logit_stability.z_loss_gradient(centred).abs().max() < 1e-15


def test_qk_clip_scales_the_largest_logit_to_tau_and_leaves_small_heads_alone():
    g = torch.Generator().manual_seed(2)
    wq, wk = torch.randn(4, 8, generator=g, dtype=F64) * 5, torch.randn(4, 8, generator=g,
                                                                         dtype=F64) * 5
    x = torch.randn(6, 8, generator=g, dtype=F64)
    peak = ((x @ wq.T) @ (x @ wk.T).T).abs().max().item()
    q2, k2 = logit_stability.qk_clip(wq, wk, peak, tau=3.0)
    assert ((x @ q2.T) @ (x @ k2.T).T).abs().max().item() == pytest.approx(3.0)
    q3, k3 = logit_stability.qk_clip(wq, wk, 2.0, tau=3.0)
    assert torch.equal(q3, wq) and torch.equal(k3, wk)
    with pytest.raises(ValueError, match="tau"):
        logit_stability.qk_clip(wq, wk, peak, tau=0.0)


def test_stored_qk_gain_growth_reads_final_logits():
    qk = {"runs": {"rmsnorm": {"0.1": [{"max_logit": [1.0, 8.0]},
                                       {"max_logit": [2.0, 16.0]}]}}}
    growth = logit_stability.stored_qk_gain_growth(qk, head_dim=16)["0.1"]
    assert growth["min_logit"] == 8.0 and growth["max_gain_product"] == 4.0
    with pytest.raises(ValueError, match="arm"):
        logit_stability.stored_qk_gain_growth(qk, 16, arm="none")


# --- gradients through depth -----------------------------------------------------------

def test_plain_stack_scales_geometrically_and_layer_norm_cancels_the_gain():
    plain = [gradient_depth.first_to_last_ratio("plain", g, depth=10) for g in (0.5, 2.0)]
    assert plain[0] < 0.5 ** 10 * 10 and plain[1] > 2.0 ** 10 / 10
    layer = [gradient_depth.first_to_last_ratio("layer", g, depth=10) for g in (0.5, 2.0)]
    assert layer[0] == pytest.approx(layer[1], rel=1e-3)    # equal up to eps


def test_residual_identity_path_prevents_vanishing():
    assert gradient_depth.first_to_last_ratio("residual", 0.5, depth=20) > 1
    with pytest.raises(ValueError, match="kind"):
        gradient_depth.hidden_gradient_norms("dropout", 1.0)


# --- Jacobians of Post-LN and Pre-LN ----------------------------------------------------

def test_layer_norm_jacobian_closed_form_matches_autograd_with_gain():
    x = torch.randn(7, dtype=F64) * 3 + 1
    gamma = torch.rand(7, dtype=F64) + 0.5
    auto = torch.autograd.functional.jacobian(
        lambda v: LF.layer_norm(v, (7,), gamma, None, eps=1e-5), x)
    assert torch.allclose(ln_jacobians.layer_norm_jacobian(x, gamma), auto)
    with pytest.raises(ValueError, match="one vector"):
        ln_jacobians.layer_norm_jacobian(x[None])


@pytest.mark.parametrize("where", ["post", "pre"])
def test_block_jacobians_factor_as_derived_and_multiply_to_the_stack(where):
    stack = ln_jacobians.Stack(where, depth=4, width=6, seed=3)
    x0 = torch.randn(6, dtype=F64)
    product = torch.eye(6, dtype=F64)
    for block in ln_jacobians.block_jacobians(stack, x0):
        assert torch.allclose(block["autograd"], block["factored"])
        product = block["autograd"] @ product
    assert torch.allclose(product, ln_jacobians.stack_jacobian(stack, x0))
    rank = torch.linalg.matrix_rank(product).item()
    assert rank == (4 if where == "post" else 6)


def test_pre_ln_with_branches_off_is_the_identity_post_ln_is_not():
    x0 = torch.randn(6, dtype=F64)
    eye = torch.eye(6, dtype=F64)
    pre = ln_jacobians.stack_jacobian(ln_jacobians.Stack("pre", 3, 6, branch_scale=0.0), x0)
    post = ln_jacobians.stack_jacobian(ln_jacobians.Stack("post", 3, 6, branch_scale=0.0), x0)
    assert torch.equal(pre, eye) and not torch.allclose(post, eye)
    with pytest.raises(ValueError, match="placement"):
        ln_jacobians.Stack("sandwich", 2)


# --- PowerNorm -------------------------------------------------------------------------

def test_masked_batch_variance_matches_torch_over_the_real_tokens():
    x, mask = powernorm.padded_batches(3, batch=4, max_len=6, channels=2, seed=5)
    var = powernorm.masked_batch_variance(x, mask)
    for b in range(3):
        real = x[b][mask[b]]                                   # (tokens, C)
        assert torch.allclose(var[b], real.var(0, correction=0))
    assert (x[~mask] == 0).all()


def test_sentence_offsets_make_batch_variance_noisier_than_independent_tokens():
    x, mask = powernorm.padded_batches(300, seed=1)
    iid, _ = powernorm.padded_batches(300, seed=1, sentence_std=0.0)
    cv = lambda v: (v.std(0) / v.mean(0)).mean()              # noqa: E731
    assert cv(powernorm.masked_batch_variance(x, mask)) > \
        1.5 * cv(powernorm.masked_batch_variance(iid, mask))


def test_power_norm_forward_uses_past_statistics_only():
    x, mask = powernorm.padded_batches(2, batch=4, max_len=5, channels=3, seed=2)
    norm = powernorm.PowerNormForward(3, alpha=0.5)
    out = norm(x[0], mask[0])
    assert torch.allclose(out, x[0] / math.sqrt(1 + 1e-5))   # psi2 starts at 1
    m = mask[0][..., None].to(F64)
    quadratic = (x[0] ** 2 * m).sum((0, 1)) / m.sum((0, 1))
    assert torch.allclose(norm.psi2, 0.5 + 0.5 * quadratic)
    before = norm.psi2.clone()
    norm(x[1], mask[1], training=False)
    assert torch.equal(norm.psi2, before)
    with pytest.raises(ValueError, match="alpha"):
        powernorm.PowerNormForward(3, alpha=1.0)


# --- DeepNet constants ------------------------------------------------------------------

def test_deepnet_constants_follow_the_papers_table():
    enc = deepnet.deepnet_constants("encoder-only", encoder_layers=18)["encoder"]
    assert enc == pytest.approx((36 ** 0.25, 144 ** -0.25))
    both = deepnet.deepnet_constants("encoder-decoder", encoder_layers=2, decoder_layers=3)
    assert both["encoder"] == pytest.approx((0.81 * 48 ** (1 / 16), 0.87 * 48 ** (-1 / 16)))
    assert both["decoder"] == pytest.approx((9 ** 0.25, 36 ** -0.25))
    with pytest.raises(ValueError, match="decoder_layers"):
        deepnet.deepnet_constants("decoder-only")
    with pytest.raises(ValueError, match="architecture"):
        deepnet.deepnet_constants("prefix-lm", 2, 2)


def test_torchscale_encoder_beta_is_the_tables_constant_inverted():
    # torchscale: weights /= (N^4 M)^(1/16) / 1.15, i.e. gain 1.15 (N^4 M)^(-1/16)
    beta = deepnet.torchscale_encoder_beta(2, 3)
    assert beta == pytest.approx(1.15 * 48 ** (-1 / 16), rel=1e-12)
    table = deepnet.deepnet_constants("encoder-decoder", encoder_layers=2,
                                      decoder_layers=3)["encoder"][1]
    assert beta / table == pytest.approx(1.15 / 0.87, rel=1e-12)
    with pytest.raises(ValueError, match="decoder_layers"):
        deepnet.torchscale_encoder_beta(2, 0)


# --- placement table --------------------------------------------------------------------

def test_placement_lines_fit_80_columns_and_carry_the_counts():
    entry = {"rows": [{"block": "h.0", "position": "before attention", "kind": "LayerNorm",
                       "gain": "w", "eps": 1e-5},
                      {"block": None, "position": "final", "kind": "LayerNorm", "gain": "w",
                       "eps": 1e-5}],
             "default_config": {"hidden_size": 8, "layers": 2, "per_block": 16,
                                "norm_total": 48, "model_total": 4800}}
    lines = placement.placement_lines({"toy": entry})
    assert all(len(line) <= 80 for line in lines)
    assert "2.00 D per block" in " ".join(lines) and "(1.0000%)" in " ".join(lines)


# --- real models, traced from transformers (random weights, nothing downloaded) ----------

def test_traced_models_give_the_facts_the_answers_quote():
    from layernorm_tutorial.lab.interview import traced_models as tm

    norms = tm.parallel_block_norms()
    assert norms["GPT-J"] == ["ln_1"] and len(norms["GPT-NeoX"]) == len(norms["GPT-2"]) == 2
    block, x, pos = tm.tiny_gptj_block()
    with torch.no_grad():
        h = block.ln_1(x)
        y = x + block.attn(hidden_states=h, position_ids=pos)[0] + block.mlp(h)
        assert torch.allclose(y, block(x, position_ids=pos)[0])
    shapes = tm.qk_norm_shapes()
    assert shapes["OLMo 2"]["q_norm"] == (32,) and shapes["OLMo 2"]["k_norm"] == (16,)
    assert shapes["Qwen3"]["q_norm"] == shapes["Gemma 3"]["k_norm"] == (8,)
    defaults = tm.config_defaults()
    assert defaults["LlamaConfig().rms_norm_eps"] == 1e-6
    assert defaults["Gemma2Config().final_logit_softcapping"] == 30.0
    bloom = tm.bloom_embedding_norm()
    assert bloom["first_norm"] == "word_embeddings_layernorm" and bloom["input_is_embedding"]
    latents = tm.deepseek_v3_latent_norms()
    assert latents["kv_a_layernorm"]["input_width"] == latents["kv_lora_rank"]
    assert latents["q_a_layernorm"]["is_rms_norm"]
    router = tm.deepseek_v3_router()
    assert torch.allclose(router["norm_topk_prob=True"]["sum"], torch.tensor(2.5))
    assert not torch.allclose(router["norm_topk_prob=False"]["sum"], torch.tensor(2.5))
    assert len(tm.glm_norms()["Glm4Model"]) == 4


def test_softmax_routers_mixtral_renormalizes_the_top_k_qwen_moe_by_default_not():
    """Audit 2, F1: Mixtral's chosen weights sum to 1 and equal a softmax over the top-k
    logits (G = Softmax(TopK(x W))); Qwen2-MoE's default (norm_topk_prob=False) keeps the
    softmax over all experts, so its chosen weights sum to less than 1."""
    from layernorm_tutorial.lab.interview import traced_models as tm

    out = tm.softmax_routers(seed=3, tokens=6, experts=8, top_k=2)
    assert torch.allclose(out["Mixtral"], torch.ones(6), atol=1e-6)
    assert out["mixtral_vs_topk_softmax"] < 1e-6
    assert not out["norm_topk_prob"]
    assert bool((out["Qwen2-MoE"] < 1 - 1e-3).all()) and bool((out["Qwen2-MoE"] > 0).all())
    # with all experts chosen, the softmax over all of them sums to 1 as well
    full = tm.softmax_routers(seed=3, tokens=6, experts=4, top_k=4)
    assert torch.allclose(full["Qwen2-MoE"], torch.ones(6), atol=1e-6)


# --- issue 41 item 2: the extensions of part 2's cards ------------------------------------

def test_decay_rules_disagree_on_custom_norms_and_residual_gains():
    from layernorm_tutorial.lab.interview import decay_selection as ds

    model = ds.GainModel()
    sets = ds.no_decay_sets(model)
    gains = {"ln_1.weight", "resweight", "layer_scale"}
    assert gains <= sets["ndim < 2 (nanoGPT)"]
    assert "wte.weight" not in sets["ndim < 2 (nanoGPT)"]          # nanoGPT decays embeddings
    assert not gains & sets["type nn.LayerNorm + bias"]           # the custom class is missed
    assert {"ln_f.weight", "ln_f.bias", "branch.bias"} <= sets["type nn.LayerNorm + bias"]
    assert "neither" in sets["whitelist (minGPT)"]                 # minGPT refuses the model
    assert not gains & sets["transformers Trainer"]               # 'ln_1' matches no pattern


def test_whitelist_rule_exempts_embeddings_on_a_model_it_knows():
    from layernorm_tutorial.lab.interview import decay_selection as ds

    model = torch.nn.Sequential(torch.nn.Embedding(5, 4), torch.nn.LayerNorm(4),
                                torch.nn.Linear(4, 3))
    assert ds.by_whitelist(model) == {"0.weight", "1.weight", "1.bias", "2.bias"}
    assert "0.weight" not in ds.by_dimension(model)
    with pytest.raises(TypeError, match="model"):
        ds.by_dimension("not a model")


def test_transformers_trainer_rule_matches_norm_names():
    from layernorm_tutorial.lab.interview import decay_selection as ds

    class Named(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.input_layernorm = ds.CustomRMSNorm(4)
            self.proj = torch.nn.Linear(4, 4)

    assert ds.by_transformers_trainer(Named()) == {"input_layernorm.weight", "proj.bias"}


def test_geometry_layer_norm_projects_and_rescales_rms_norm_only_rescales():
    from layernorm_tutorial.lab.interview import norm_geometry as ng

    x = torch.randn(6, 8, dtype=F64, generator=torch.Generator().manual_seed(0)) * 2 + 1
    ln = ng.geometry(LF.layer_norm(x, (8,), eps=0.0))
    rms = ng.geometry(LF.rms_norm(x, (8,), eps=0.0))
    assert ln["cos_with_ones"] < 1e-12 and ln["off_sphere"] < 1e-12
    assert rms["off_sphere"] < 1e-12 and rms["cos_with_ones"] > 0.1
    with pytest.raises(ValueError, match="H >= 2"):
        ng.geometry(torch.ones(3, 1))


def test_mean_only_bn_keeps_shift_invariance_scale_only_bn_keeps_scale_invariance():
    from layernorm_tutorial.lab.interview import norm_geometry as ng

    x = torch.randn(32, 4, dtype=F64, generator=torch.Generator().manual_seed(1)) + 1
    mean_only = ng.invariances(ng.mean_only_batch_norm, x)
    scale_only = ng.invariances(ng.scale_only_batch_norm, x)
    assert mean_only["shift"] < 1e-12 < 0.1 < mean_only["scale"]
    assert scale_only["scale"] < 1e-12 < 0.1 < scale_only["shift"]
    with pytest.raises(ValueError, match="N >= 2"):
        ng.mean_only_batch_norm(torch.ones(1, 3))


def test_rms_norm_backward_needs_only_the_saved_rstd():
    from layernorm_tutorial.lab.interview import saved_memory

    g = torch.Generator().manual_seed(2)
    x = torch.randn(5, 12, dtype=F64, generator=g).requires_grad_()
    gamma = (torch.rand(12, dtype=F64, generator=g) + 0.5).requires_grad_()
    dy = torch.randn(5, 12, dtype=F64, generator=g)
    for eps in (1e-6, 0.5):
        y = LF.rms_norm(x, (12,), gamma, eps=eps)
        dx_ref, dg_ref = torch.autograd.grad(y, (x, gamma), dy)
        rstd = torch.rsqrt(x.detach().pow(2).mean(-1, keepdim=True) + eps)
        dx, dg = saved_memory.rms_norm_backward_from_rstd(dy, x.detach(), gamma.detach(), rstd)
        assert torch.allclose(dx, dx_ref, atol=1e-13) and torch.allclose(dg, dg_ref, atol=1e-13)
    with pytest.raises(ValueError, match="rstd"):
        saved_memory.rms_norm_backward_from_rstd(dy, x.detach(), gamma.detach(), rstd[:, 0])


def test_grouped_partial_sums_equal_the_column_sum_for_any_group_count():
    from layernorm_tutorial.lab.interview import saved_memory

    v = torch.randn(64, 10, dtype=F64, generator=torch.Generator().manual_seed(3))
    for groups in (1, 7, 64, 100):
        partials, total = saved_memory.grouped_partial_sums(v, groups)
        assert partials.shape == (min(groups, 64), 10)
        assert torch.allclose(total, v.sum(0), atol=1e-12)
    assert [saved_memory.triton_tutorial_group_size(n) for n in (512, 4096, 8192, 16384)] \
        == [256, 128, 96, 64]
    with pytest.raises(ValueError, match="groups"):
        saved_memory.grouped_partial_sums(v, 0)


def test_engine_residual_threading_computes_the_pre_ln_stack():
    from layernorm_tutorial.lab.interview import fusion

    g = torch.Generator().manual_seed(4)
    mats = [torch.randn(8, 8, dtype=F64, generator=g) for _ in range(3)]
    branches = [functools.partial(lambda h, w: torch.tanh(h @ w.T), w=m) for m in mats]
    weights = [torch.rand(8, dtype=F64, generator=g) + 0.5 for _ in range(4)]
    x = torch.randn(3, 8, dtype=F64, generator=g)
    plain, plain_ops = fusion.pre_norm_stack(x, branches, weights)
    fused, fused_ops = fusion.pre_norm_stack(x, branches, weights, fused=True)
    assert torch.allclose(plain, fused, atol=1e-12) and fused_ops < plain_ops
    out, residual = fusion.fused_add_rms_norm(x, 2 * x, weights[0])
    assert torch.equal(residual, 3 * x)
    with pytest.raises(ValueError, match="weight"):
        fusion.pre_norm_stack(x, branches, weights[:2])


def test_post_add_pre_norm_matches_gemma3_norm_modules():
    from layernorm_tutorial.lab.interview import fusion, traced_models

    norms = traced_models.gemma3_boundary_norms()
    g = torch.Generator().manual_seed(5)
    branch, residual = (torch.randn(3, 16, dtype=F64, generator=g) for _ in range(2))
    with torch.no_grad():
        h = residual + norms["post"](branch)
        expected = norms["pre"](h)
        out, new_residual = fusion.post_add_pre_norm(branch, residual, norms["post"].weight,
                                                     norms["pre"].weight, norms["eps"])
    # Gemma3RMSNorm computes in float32: agreement to float32 round-off
    assert (out - expected).abs().max() < 1e-5 and (new_residual - h).abs().max() < 1e-5


def test_channels_first_layer_norm_two_ways():
    from layernorm_tutorial.lab.interview import fusion

    g = torch.Generator().manual_seed(6)
    x = torch.randn(2, 4, 3, 5, dtype=F64, generator=g)
    w, b = torch.rand(4, dtype=F64, generator=g), torch.randn(4, dtype=F64, generator=g)
    a = fusion.channels_first_layer_norm(x, w, b)
    assert torch.allclose(a, fusion.permuted_layer_norm(x, w, b), atol=1e-12)
    normalized = (a - b[:, None, None]) / w[:, None, None]   # each position over its C
    assert normalized.mean(1).abs().max() < 1e-12
    assert fusion.aten_ops(fusion.permuted_layer_norm, x, w, b).count("native_layer_norm") == 1
    assert len(fusion.aten_ops(fusion.channels_first_layer_norm, x, w, b)) > 5
    with pytest.raises(ValueError, match="N, C, H, W"):
        fusion.channels_first_layer_norm(x[0], w, b)


def test_zero_initialized_layers_get_gradient_and_block_parameters_wait():
    from layernorm_tutorial.lab.interview import adaln

    g = torch.Generator().manual_seed(7)
    zero = adaln.zero_linear_gradients(torch.randn(4, 6, dtype=F64, generator=g),
                                       torch.randn(4, 3, dtype=F64, generator=g), 3)
    assert zero["output"] == 0 and zero["input_grad"] == 0 and zero["weight_grad"] > 0
    torch.manual_seed(8)
    block = adaln.AdaLNZeroBlock(8, cond_dim=4).double()
    grads = adaln.first_step_gradients(
        block, torch.randn(2, 3, 8, dtype=F64, generator=g),
        torch.randn(2, 4, dtype=F64, generator=g), torch.randn(2, 3, 8, dtype=F64, generator=g))
    assert grads["modulation.weight"] > 0
    assert all(v == 0 for k, v in grads.items() if k.startswith("branch"))


def test_scaled_cosine_logits_are_bounded_by_one_over_tau_min():
    g = torch.Generator().manual_seed(9)
    q, k = (1e3 * torch.randn(2, 5, 8, dtype=F64, generator=g) for _ in range(2))
    z = logit_stability.scaled_cosine_logits(q, k, torch.full((2, 1, 1), 20.0, dtype=F64))
    assert z.abs().max() <= 100 + 1e-9 and z.abs().max() > 50
    small = logit_stability.scaled_cosine_logits(q, k, torch.zeros(2, 1, 1, dtype=F64))
    assert small.abs().max() <= 1 + 1e-12
    with pytest.raises(ValueError, match="tau_min"):
        logit_stability.scaled_cosine_logits(q, k, torch.zeros(1), tau_min=0)
