"""Tests for layernorm_tutorial.lab.common.transformer (equivalence with torch's encoder layer) and
the
residual chapter's experiments (layernorm_tutorial.lab.residual.experiments)."""

import numpy as np
import pytest
import torch

from layernorm_tutorial import nn as ln_nn
from layernorm_tutorial.lab.common import transformer as tr
from layernorm_tutorial.lab.residual import experiments

D, NHEAD, FF = 8, 2, 16


def _x(batch=3, steps=5, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(batch, steps, D, generator=g, dtype=torch.float64)


def _randomize_norms(module):
    # non-trivial gains and biases so the comparison checks where each norm sits
    g = torch.Generator().manual_seed(123)
    with torch.no_grad():
        for name, p in module.named_parameters():
            if "norm" in name:
                p.copy_(torch.rand(p.shape, generator=g, dtype=p.dtype) + 0.5)


@pytest.mark.parametrize("norm_first", [False, True])
@pytest.mark.parametrize("activation", ["relu", "gelu"])
def test_block_matches_torch_encoder_layer(norm_first, activation):
    torch.manual_seed(0)
    ref = torch.nn.TransformerEncoderLayer(D, NHEAD, FF, dropout=0.0, activation=activation,
                                           batch_first=True, norm_first=norm_first).double()
    _randomize_norms(ref)
    ours = tr.TransformerEncoderBlock(D, NHEAD, FF, activation=activation,
                                      norm_first=norm_first).double()
    ours.load_state_dict(ref.state_dict())
    x = _x().requires_grad_(True)
    x_ref = x.detach().clone().requires_grad_(True)
    out, out_ref = ours(x), ref(x_ref)
    torch.testing.assert_close(out, out_ref)
    upstream = torch.randn_like(out)
    out.backward(upstream)
    out_ref.backward(upstream)
    torch.testing.assert_close(x.grad, x_ref.grad)
    for (name, p), (_, q) in zip(ours.named_parameters(), ref.named_parameters(), strict=True):
        torch.testing.assert_close(p.grad, q.grad, msg=name)


@pytest.mark.parametrize("norm_first", [False, True])
def test_block_matches_torch_with_key_padding_mask(norm_first):
    torch.manual_seed(1)
    ref = torch.nn.TransformerEncoderLayer(D, NHEAD, FF, dropout=0.0, batch_first=True,
                                           norm_first=norm_first).double()
    ours = tr.TransformerEncoderBlock(D, NHEAD, FF, norm_first=norm_first).double()
    ours.load_state_dict(ref.state_dict())
    mask = torch.zeros(3, 5, dtype=torch.bool)
    mask[0, 3:] = True
    mask[2, 1:] = True
    x = _x()
    torch.testing.assert_close(ours(x, mask), ref(x, src_key_padding_mask=mask))


@pytest.mark.parametrize("norm_first", [False, True])
def test_stack_with_final_norm_matches_torch_encoder(norm_first):
    torch.manual_seed(2)
    layer = torch.nn.TransformerEncoderLayer(D, NHEAD, FF, dropout=0.0, batch_first=True,
                                             norm_first=norm_first)
    final = torch.nn.LayerNorm(D) if norm_first else None
    ref = torch.nn.TransformerEncoder(layer, 3, norm=final, enable_nested_tensor=False).double()
    _randomize_norms(ref)
    ours = tr.TransformerEncoder(3, D, NHEAD, FF, norm_first=norm_first).double()
    assert (ours.norm is not None) == norm_first  # the final LN exactly for pre-LN
    ours.load_state_dict(ref.state_dict())
    x = _x(seed=3)
    torch.testing.assert_close(ours(x), ref(x))


def test_block_is_built_on_the_package_norms():
    block = tr.TransformerEncoderBlock(D, NHEAD, FF)
    assert isinstance(block.norm1, ln_nn.LayerNorm)
    rms = tr.TransformerEncoderBlock(D, NHEAD, FF, norm="rmsnorm")
    assert isinstance(rms.norm1, ln_nn.RMSNorm)
    assert "norm1.bias" not in rms.state_dict()


@pytest.mark.parametrize("norm_first", [False, True])
def test_rmsnorm_drop_in_matches_torch_layer_with_rmsnorm(norm_first):
    torch.manual_seed(4)
    ref = torch.nn.TransformerEncoderLayer(D, NHEAD, FF, dropout=0.0, batch_first=True,
                                           norm_first=norm_first).double()
    ref.norm1 = torch.nn.RMSNorm(D, eps=1e-5).double()
    ref.norm2 = torch.nn.RMSNorm(D, eps=1e-5).double()
    _randomize_norms(ref)
    ours = tr.TransformerEncoderBlock(D, NHEAD, FF, norm_first=norm_first,
                                      norm="rmsnorm").double()
    ours.load_state_dict(ref.state_dict())
    x = _x(seed=5)
    torch.testing.assert_close(ours(x), ref(x))


def test_post_ln_output_is_normalized_and_pre_ln_residual_stream_is_not():
    torch.manual_seed(6)
    x = _x(seed=6) * 4 + 1
    post = tr.TransformerEncoderBlock(D, NHEAD, FF, norm_first=False).double()
    pre = tr.TransformerEncoderBlock(D, NHEAD, FF, norm_first=True).double()
    y = post(x)
    torch.testing.assert_close(y.mean(-1), torch.zeros(3, 5, dtype=torch.float64))
    torch.testing.assert_close(y.var(-1, unbiased=False),
                               torch.ones(3, 5, dtype=torch.float64), rtol=1e-4, atol=1e-4)
    assert pre(x).var(-1, unbiased=False).mean() > 4  # the x*4 input survives on the skip path


def test_token_transformer_shapes_and_bad_arguments():
    model = tr.TokenTransformer(vocab_size=10, num_classes=10, max_len=8, num_layers=2)
    tokens = torch.randint(0, 10, (4, 8))
    assert model(tokens).shape == (4, 8, 10)
    with pytest.raises(ValueError, match="norm must be"):
        tr.make_norm("batchnorm", D)
    with pytest.raises(ValueError, match="divisible"):
        tr.MultiHeadSelfAttention(10, 3)
    with pytest.raises(ValueError, match="activation"):
        tr.TransformerEncoderBlock(D, NHEAD, FF, activation="tanh")
    with pytest.raises(ValueError, match="x must have shape"):
        tr.TransformerEncoderBlock(D, NHEAD, FF)(torch.randn(4, D))
    with pytest.raises(ValueError, match="num_layers"):
        tr.TransformerEncoder(0, D, NHEAD)



@pytest.mark.parametrize("norm_first", [False, True])
@pytest.mark.parametrize("norm", ["layernorm", "rmsnorm"])
def test_block_gradients_match_float64_finite_differences(norm_first, norm):
    torch.manual_seed(7)
    block = tr.TransformerEncoderBlock(4, 2, 6, norm_first=norm_first, norm=norm).double()
    _randomize_norms(block)
    names = [n for n, _ in block.named_parameters()]
    params = tuple(p.detach().clone().requires_grad_(True) for _, p in block.named_parameters())
    x = torch.randn(2, 3, 4, dtype=torch.float64, requires_grad=True)

    def outputs(x, *ps):
        return torch.func.functional_call(block, dict(zip(names, ps, strict=True)), (x,))

    assert torch.autograd.gradcheck(outputs, (x, *params))

# ---- experiment helpers used by the residual chapter (tiny budgets) ----

def test_residual_variance_plain_resets_and_residual_accumulates():
    plain = experiments.residual_variance_by_depth(depth=6, width=64, batch_size=128,
                                                   architecture="plain")
    res = experiments.residual_variance_by_depth(depth=6, width=64, batch_size=128)
    assert plain["variance"].shape == (7,) and plain["branch_variance"].shape == (6,)
    assert np.all(np.abs(plain["variance"][1:] - 1) < 0.5)
    assert np.all(np.diff(res["variance"]) > 0.5)  # each block adds about Var(F) ~ 1
    np.testing.assert_allclose(res["variance"][1:], res["predicted"], rtol=0.15)
    assert res["input_correlation"][-1] > 0.2 > abs(plain["input_correlation"][-1])
    with pytest.raises(ValueError, match="architecture"):
        experiments.residual_variance_by_depth(depth=2, architecture="dense")


def test_residual_variance_without_norm_grows_geometrically():
    r = experiments.residual_variance_by_depth(depth=8, width=64, batch_size=128,
                                      architecture="residual_no_norm")
    assert r["variance"][-1] > 2 ** 5 * r["variance"][0]


def test_warmup_factor_is_linear_then_flat():
    assert [experiments.warmup_factor(s, 4) for s in range(6)] == [0.25, 0.5, 0.75, 1.0, 1.0, 1.0]
    assert experiments.warmup_factor(0, 0) == 1.0
    with pytest.raises(ValueError, match="warmup_steps"):
        experiments.warmup_factor(0, -1)


def test_reverse_task_batch_targets_are_reversed_inputs():
    tokens, targets = experiments.reverse_task_batch(5, 6, 8, torch.Generator().manual_seed(0))
    assert tokens.shape == targets.shape == (5, 6)
    assert torch.equal(targets, tokens.flip(1)) and int(tokens.max()) < 8


def test_gradient_norm_per_layer_and_training_are_deterministic():
    g1 = experiments.gradient_norm_per_layer(3, norm_first=False, seed=2)
    g2 = experiments.gradient_norm_per_layer(3, norm_first=False, seed=2)
    assert g1.shape == (3,) and np.all(g1 > 0) and np.array_equal(g1, g2)
    run = experiments.train_reverse_task(2, True, steps=4, lr=1e-3, warmup_steps=2, batch_size=8)
    again = experiments.train_reverse_task(2, True, steps=4, lr=1e-3, warmup_steps=2, batch_size=8)
    assert len(run["loss"]) == 4 and 0.0 <= run["accuracy"] <= 1.0
    assert run == again


def test_stack_output_spread_final_norm_restores_unit_scale():
    pre = experiments.stack_output_spread(4, norm_first=True, final_norm=True)
    bare = experiments.stack_output_spread(4, norm_first=True, final_norm=False)
    post = experiments.stack_output_spread(4, norm_first=False)
    assert abs(pre["output_std"] - 1) < 0.01 and abs(post["output_std"] - 1) < 0.01
    assert bare["output_std"] == bare["stream_std"] > 1.05
