"""Tests for layernorm_tutorial.transformer: equivalence with torch's encoder layer."""

import pytest
import torch

from layernorm_tutorial import nn as ln_nn
from layernorm_tutorial import transformer as tr

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
