"""The proofs of the interview's part 2 that need their own code (lab/interview)."""

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
