"""call_order sees the sub-layers of a real torch block in the order they run."""

import pytest
import torch
from torch import nn

from layernorm_tutorial.lab.common.transformer import TransformerEncoderBlock
from layernorm_tutorial.lab.residual.block_trace import call_order

KINDS = (nn.LayerNorm, nn.MultiheadAttention, nn.Linear)


def _torch_layer(norm_first):
    return nn.TransformerEncoderLayer(8, 2, 16, dropout=0.0, batch_first=True,
                                      norm_first=norm_first)


def test_post_ln_normalizes_after_each_branch():
    order = call_order(_torch_layer(False), torch.randn(2, 3, 8), kinds=KINDS)
    assert order == ["self_attn", "norm1", "linear1", "linear2", "norm2"]


def test_pre_ln_normalizes_before_each_branch():
    order = call_order(_torch_layer(True), torch.randn(2, 3, 8), kinds=KINDS)
    assert order == ["norm1", "self_attn", "norm2", "linear1", "linear2"]


def test_same_order_in_the_package_block_and_hooks_removed():
    block = TransformerEncoderBlock(8, 2, 16, norm_first=True)
    order = call_order(block, torch.randn(2, 3, 8),
                       kinds=(type(block.norm1), type(block.self_attn), nn.Linear))
    assert order == ["norm1", "self_attn", "norm2", "linear1", "linear2"]
    leaves = call_order(block, torch.randn(2, 3, 8))  # kinds=None: every leaf, dropouts too
    assert leaves == ["norm1", "self_attn.dropout", "self_attn.out_proj", "dropout1", "norm2",
                      "linear1", "dropout", "linear2", "dropout2"]
    assert all(not m._forward_pre_hooks for m in block.modules())


def test_hooks_removed_when_forward_raises_and_bad_module_rejected():
    layer = _torch_layer(False)
    with pytest.raises((AssertionError, RuntimeError)):  # torch asserts the embedding size
        call_order(layer, torch.randn(2, 3, 5))
    assert all(not m._forward_pre_hooks for m in layer.modules())
    with pytest.raises(TypeError, match="module"):
        call_order(lambda x: x, torch.randn(1))
