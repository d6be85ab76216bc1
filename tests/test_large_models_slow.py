"""lab/large_models pieces that import ``transformers`` (tens of seconds) or start gloo
processes: the traced norm placement and sequence-parallel LayerNorm."""

from __future__ import annotations

import pytest

from layernorm_tutorial.lab.large_models import architectures as arch
from layernorm_tutorial.lab.large_models import sequence_parallel as sp


@pytest.fixture(scope="module")
def table():
    return arch.architecture_table(["GPT-2", "BERT", "LLaMA", "OLMo 2", "Gemma 3"])


def _rows(table, name):
    return {r["module"]: r for r in table[name]["rows"]}


def test_traced_positions_and_kinds(table):
    gpt2 = _rows(table, "GPT-2")
    assert gpt2["h.0.ln_1"]["position"] == "before attention"
    assert gpt2["h.0.ln_2"]["position"] == "before MLP"
    assert gpt2["ln_f"]["position"] == "final"
    assert {r["kind"] for r in gpt2.values()} == {"LayerNorm"}
    bert = _rows(table, "BERT")
    assert bert["embeddings.LayerNorm"]["position"] == "embeddings"
    assert bert["encoder.layer.0.output.LayerNorm"]["position"] == "after MLP + residual"
    llama = _rows(table, "LLaMA")
    # named "post_attention", traced as the pre-norm of the MLP
    assert llama["model.layers.0.post_attention_layernorm"]["position"] == "before MLP"
    assert {r["kind"] for r in llama.values()} == {"RMSNorm"}
    olmo = _rows(table, "OLMo 2")
    assert olmo["model.layers.0.post_attention_layernorm"]["position"] == \
        "on the output of attention"
    assert olmo["model.layers.0.self_attn.k_norm"]["position"] == "inside attention (k)"
    gemma = _rows(table, "Gemma 3")
    assert gemma["model.layers.0.pre_feedforward_layernorm"]["position"] == "before MLP"
    assert gemma["model.layers.0.post_feedforward_layernorm"]["position"] == \
        "on the output of MLP"
    assert {r["gain"] for r in gemma.values()} == {"1 + w"}
    assert {r["gain"] for r in llama.values()} == {"w"}


def test_norm_parameter_counts(table):
    counts = table["GPT-2"]["counts"]
    assert counts["per_block"] == {"h.0": 64, "h.1": 64}      # 2 LNs x (gamma + beta) x 16
    assert counts["outside_blocks"] == 32 and counts["norm_total"] == 160
    assert table["LLaMA"]["counts"]["norm_total"] == 5 * 16    # 2 per block + final, no beta


def test_sequence_parallel_layer_norm_matches_the_unsharded_run():
    diff = sp.sequence_parallel_check(world_size=2, seed=0)
    assert diff["forward"] < 1e-12 and diff["dx"] < 1e-12
    assert diff["dgamma_reduced"] < 1e-12 and diff["dbeta_reduced"] < 1e-12
    assert diff["dgamma_local"] > 0.1 * diff["gradient_scale"]
