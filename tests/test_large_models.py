"""lab/large_models: the mechanisms behind the chapter's experiments (QK-norm bounds the
logits, DeepNorm's residual weight and init, DyT swap, per-token linearity of LN, weight-decay
groups, autocast dtypes, sequence-parallel LayerNorm) and the results command's path rules."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from layernorm_tutorial.lab.common import claims, verdict
from layernorm_tutorial.lab.common.transformer import TransformerEncoderBlock
from layernorm_tutorial.lab.large_models import comparisons, deepnorm, qk_norm, recipes
from layernorm_tutorial.lab.large_models.__main__ import main as results_main
from layernorm_tutorial.lab.large_models.training import train_toy
from layernorm_tutorial.nn import DynamicTanh, LayerNorm


# ------------------------------------------------------------------ QK-norm
@pytest.mark.parametrize("scale", [1.0, 100.0])
def test_qk_norm_bounds_the_attention_logits_whatever_the_weights(scale):
    """With RMS-normalized q and k (unit gains) |q.k|/sqrt(d) <= sqrt(d); without, the logits
    grow with the square of the weights."""
    torch.manual_seed(0)
    x = torch.randn(2, 8, 32)
    logits = {}
    for arm in ("none", "rmsnorm"):
        torch.manual_seed(1)
        attn = qk_norm.QKAttention(32, 4, arm)
        with torch.no_grad():
            attn.qkv.weight.mul_(scale)
        attn(x)
        logits[arm] = float(attn.last_logits.abs().max())
    assert logits["rmsnorm"] <= math.sqrt(8) + 1e-4
    if scale > 1:
        assert logits["none"] > 100 * math.sqrt(8)


def test_qk_attention_rejects_an_unknown_norm():
    with pytest.raises(ValueError, match="qk_norm"):
        qk_norm.QKAttention(8, 2, "batchnorm")


def test_divergence_rule_and_largest_stable_lr():
    chance = math.log(16)
    assert qk_norm.diverged(math.inf) and qk_norm.diverged(chance)
    assert not qk_norm.diverged(chance - 0.5)
    assert qk_norm.largest_stable_lr({0.01: 1.0, 0.1: 1.2, 0.3: math.inf, 1.0: 0.5}) == 0.1
    assert qk_norm.largest_stable_lr({0.01: math.inf}) == 0.0


def test_training_is_deterministic_per_seed_and_records_the_probe():
    runs = [qk_norm.qk_run("rmsnorm", 1e-2, seed=3, steps=3, d_model=16, nhead=2,
                           dim_feedforward=16) for _ in range(2)]
    np.testing.assert_array_equal(runs[0]["loss"], runs[1]["loss"])
    assert runs[0]["max_logit"].shape == (3,)


# ------------------------------------------------------------------ DeepNorm
def test_deepnorm_constants():
    alpha, beta = deepnorm.deepnorm_constants(12)
    assert alpha == pytest.approx(24 ** 0.25) and beta == pytest.approx(96 ** -0.25)
    with pytest.raises(ValueError):
        deepnorm.deepnorm_constants(0)


def test_deepnorm_block_with_alpha_one_is_the_post_ln_block():
    torch.manual_seed(0)
    block = TransformerEncoderBlock(16, 2, 32, norm_first=False)
    x = torch.randn(2, 5, 16)
    reference = block(x)
    block.__class__ = deepnorm.DeepNormBlock
    block.alpha = 1.0
    torch.testing.assert_close(block(x), reference)
    block.alpha = 3.0
    assert not torch.allclose(block(x), reference)


def test_deepnorm_scales_the_branch_initialization_by_beta():
    torch.manual_seed(0)
    model = deepnorm.make_post_ln(12, deepnorm=True)
    _, beta = deepnorm.deepnorm_constants(12)
    block = model.encoder.layers[0]
    assert block.alpha == pytest.approx(24 ** 0.25)
    w = block.linear2.weight
    xavier_std = math.sqrt(2 / (w.shape[0] + w.shape[1]))
    assert float(w.detach().std()) == pytest.approx(beta * xavier_std, rel=0.15)
    with pytest.raises(ValueError, match="arm"):
        deepnorm.deepnorm_run("pre-LN", 2, 0)


# ------------------------------------------------------------------ comparisons
def test_dyt_model_has_no_layer_norm_left():
    model = comparisons.make_model("dyt", alpha_init=2.0)
    kinds = {type(m) for m in model.modules()}
    assert DynamicTanh in kinds and LayerNorm not in kinds
    assert float(model.encoder.norm.alpha.detach()) == 2.0
    with pytest.raises(ValueError, match="norm"):
        comparisons.make_model("batchnorm")


def test_layer_norm_is_linear_per_token():
    torch.manual_seed(0)
    model = comparisons.make_model("layernorm", num_layers=2)
    maps = comparisons.per_token_map(model, seed=0, n_sequences=4, max_points=50)
    assert [m["name"] for m in maps][-1] == "norm" and len(maps) == 5
    assert max(m["linear_per_token"] for m in maps) < 1e-12
    assert all(len(m["x"]) == 50 for m in maps)


def test_tanh_fit_tells_an_s_curve_from_a_line():
    x = np.linspace(-5, 5, 400)
    s_curve = comparisons.tanh_fit(x, 2 * np.tanh(0.8 * x))
    line = comparisons.tanh_fit(x, 0.3 * x + 1)
    assert s_curve["r2_tanh"] > 0.999 and s_curve["r2_linear"] < 0.95
    assert line["r2_linear"] > 0.999


def test_time_norms_returns_paired_rounds_and_one_summary_per_implementation():
    out = comparisons.time_norms(rows=8, features=16, rounds=5, repeats=1)
    assert all(len(v) == 5 for v in out["seconds"].values())
    assert set(out["summary"]) == {"torch", "package"}
    for who, s in out["summary"].items():
        ratio = np.array(out["seconds"][f"{who} rms_norm"]) / \
            np.array(out["seconds"][f"{who} layer_norm"])
        np.testing.assert_allclose(s["ratio"], ratio)
        assert s["mean_ratio"] == pytest.approx(ratio.mean())
        assert s["verdict"]["word"] in verdict.WORDS
        assert s["verdict"]["threshold"] == claims.threshold("large_models.time")


# ------------------------------------------------------------------ recipes
def test_param_groups_exclude_norm_parameters_and_biases():
    model = comparisons.make_model("layernorm")
    decay, no_decay = recipes.param_groups(model, 0.1)
    decayed = {id(p) for p in decay["params"]}
    assert decay["weight_decay"] == 0.1 and no_decay["weight_decay"] == 0.0
    for module in model.modules():
        if isinstance(module, LayerNorm):
            assert id(module.weight) not in decayed and id(module.bias) not in decayed
    assert id(model.head.weight) in decayed and id(model.head.bias) not in decayed
    assert len(decay["params"]) + len(no_decay["params"]) == len(list(model.parameters()))


def test_decay_on_gamma_shrinks_it_without_gradient():
    """With lr 0 for the loss (no gradient signal reaching gamma) AdamW's decay alone
    multiplies gamma by (1 - lr wd) each step."""
    model = torch.nn.Sequential(LayerNorm(4))
    opt = torch.optim.AdamW(model.parameters(), lr=0.1, weight_decay=0.5)
    for _ in range(3):
        opt.zero_grad()
        (model(torch.zeros(2, 4)) * 0).sum().backward()
        opt.step()
    torch.testing.assert_close(model[0].weight.detach(), torch.full((4,), 0.95 ** 3))


def test_autocast_gives_bf16_output_and_fp32_statistics():
    out = recipes.autocast_layer_norm()
    assert out["linear_out"] == "torch.bfloat16"
    assert out["layer_norm_out"] == "torch.bfloat16"
    assert out["kernel_mean"] == out["kernel_rstd"] == "torch.float32"


def test_bf16_accumulation_is_far_less_accurate_than_fp32():
    err = recipes.bf16_statistics_error(features=512)
    assert err["fp32"]["mean_rel_error"] < 1e-5
    assert err["bf16"]["mean_rel_error"] > 100 * max(err["fp32"]["mean_rel_error"], 1e-9)


def test_bf16_variance_error_comes_mostly_from_the_wrong_mean():
    """The chapter's sentence: the bf16 variance is many times too large, and the second
    pass around the exact mean is off by far less (the mean's error dominates)."""
    err = recipes.bf16_statistics_error(features=1024)["bf16"]
    assert err["var_ratio"] == pytest.approx(1 + err["var_rel_error"])
    assert err["var_ratio"] > 10
    assert err["var_rel_error_exact_mean"] < 0.05 * err["var_rel_error"]


def test_train_toy_stops_on_a_non_finite_loss():
    class Blowup(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.w = torch.nn.Parameter(torch.ones(1))

        def forward(self, tokens):
            return torch.full((*tokens.shape, 16), float("nan")) * self.w

    run = train_toy(Blowup, steps=5, lr=1e-3, seed=0)
    assert len(run["loss"]) == 1 and run["final_loss"] == math.inf


# ------------------------------------------------------------------ results command
def test_results_command_refuses_to_replace_a_file_without_force(tmp_path, capsys):
    out = tmp_path / "r.json"
    out.write_text("mine")
    with pytest.raises(SystemExit):
        results_main(["--out", str(out), "--sections", "timing"])
    assert "--force" in capsys.readouterr().err and out.read_text() == "mine"
    with pytest.raises(SystemExit):
        results_main(["--out", str(tmp_path / "new.json"), "--sections", "nope"])
    assert not (tmp_path / "new.json").exists()


def test_update_needs_force_and_sections(tmp_path, capsys):
    out = tmp_path / "r.json"
    out.write_text("{}")
    with pytest.raises(SystemExit):
        results_main(["--out", str(out), "--update", "--sections", "timing"])
    assert "--force" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        results_main(["--out", str(out), "--update", "--force"])
    assert "--update needs --force and --sections" in capsys.readouterr().err
    assert out.read_text() == "{}"
