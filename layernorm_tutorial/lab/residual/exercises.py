"""Checkers for the exercises of "Layer normalization with residual connections".

``check_block_arrangements(post_ln_block, pre_ln_block)``
    each ``block(x, attention, feedforward, norm1, norm2) -> y`` composes the given callables
    (``x`` is ``(B, T, D)``) in the post-LN or the pre-LN arrangement; compared with
    :class:`layernorm_tutorial.lab.common.transformer.TransformerEncoderBlock`.
``check_residual_variance_prediction(predict)``
    ``predict(v0, branch_variances) -> v`` with ``v[l-1]`` the predicted variance after block
    ``l`` of a residual stack whose branches add variances ``branch_variances`` (length L).
"""

from __future__ import annotations

import numpy as np
import torch

from layernorm_tutorial._seeding import seeded
from layernorm_tutorial.lab.common import transformer
from layernorm_tutorial.lab.common.checking import CheckResult, allclose, checker, reader_array

__all__ = [
    "check_block_arrangements",
    "check_residual_variance_prediction",
    "post_ln_block_reference",
    "pre_ln_block_reference",
    "predict_residual_variance_reference",
]


def post_ln_block_reference(x, attention, feedforward, norm1, norm2):
    """Post-LN ("Add & Norm"): normalize after each residual addition."""
    x = norm1(x + attention(x))
    return norm2(x + feedforward(x))


def pre_ln_block_reference(x, attention, feedforward, norm1, norm2):
    """Pre-LN: normalize the input of each branch; the skip path is left untouched."""
    x = x + attention(norm1(x))
    return x + feedforward(norm2(x))


def predict_residual_variance_reference(v0, branch_variances):
    """``v_{l+1} = v_l + Var(F(x_l))``: a running sum starting from ``v0``."""
    return v0 + np.cumsum(np.asarray(branch_variances, dtype=float))


def _block_and_parts(seed: int):
    with seeded(seed):
        block = transformer.TransformerEncoderBlock(8, 2, 16).double()
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in block.named_parameters():
            if "norm" in name:
                p.copy_(0.5 + torch.rand(p.shape, generator=g, dtype=p.dtype))
    x = 3 * torch.randn(2, 5, 8, generator=g, dtype=torch.float64) + 1
    return block, x


def _wrong_variants(x, att, ff, n1, n2):
    return {
        "the arrangements are swapped (this is the other one)": None,
        "only the branch is normalized (x + LN(F(x))): the norm must act on the sum (post-LN) "
        "or on the branch input (pre-LN)":
            (lambda y: y + n2(ff(y)))(x + n1(att(x))),
        "the residual connection is missing (y = LN(F(x)))": n2(ff(n1(att(x)))),
        "the same norm is used for both sublayers: use norm1 around attention and norm2 "
        "around the feed-forward network":
            (lambda y: n1(y + ff(y)))(n1(x + att(x))),
        "pre-LN adds the normalized input on the skip path (LN(x) + F(LN(x))): the skip path "
        "must carry x itself":
            (lambda y: n2(y) + ff(n2(y)))(n1(x) + att(n1(x))),
    }


@checker(returns="y, a tensor of x's shape (B, T, D)")
def check_block_arrangements(post_ln_block, pre_ln_block, *, seed: int = 0) -> CheckResult:
    """Check both arrangements against ``TransformerEncoderBlock(norm_first=False/True)``."""
    for name, fn, norm_first in (("post-LN", post_ln_block, False),
                                 ("pre-LN", pre_ln_block, True)):
        block, x = _block_and_parts(seed)
        block.norm_first = norm_first
        parts = (block.attention_branch, block.feedforward_branch, block.norm1, block.norm2)
        with torch.no_grad():
            expected = block(x)
            try:
                out = fn(x, *parts)
            except Exception as error:  # the reader's code may raise anything
                return CheckResult(False, f"{name} block raised {type(error).__name__}: {error}")
            out = reader_array(out, fn, what=f"the {name} output")
            if out.shape != tuple(expected.shape):
                return CheckResult(False, f"{name} block returns shape {out.shape}, expected "
                                          f"{tuple(expected.shape)} (same as x)")
            if allclose(out, expected, rtol=1e-7, atol=1e-9):
                continue
            variants = _wrong_variants(x, *parts)
            block.norm_first = not norm_first
            variants["the arrangements are swapped (this is the other one)"] = block(x)
            for hint, wrong in variants.items():
                if allclose(out, wrong, rtol=1e-7, atol=1e-9):
                    return CheckResult(False, f"{name} block: {hint}")
            return CheckResult(False, f"{name} block differs from TransformerEncoderBlock("
                                      f"norm_first={norm_first})")
    return CheckResult(True, "both arrangements match TransformerEncoderBlock (post-LN: "
                             "norm after each addition; pre-LN: norm on each branch input)")


@checker(returns="an array of L values, one per block")
def check_residual_variance_prediction(predict, *, seed: int = 0) -> CheckResult:
    """Check ``predict(v0, branch_variances)`` against the running-sum rule."""
    rng = np.random.default_rng(seed)
    v0 = float(rng.uniform(0.5, 2.0))
    branch = rng.uniform(0.5, 1.5, size=10)
    try:
        out = predict(v0, branch.copy())
    except Exception as error:  # the reader's code may raise anything
        return CheckResult(False, f"predict raised {type(error).__name__}: {error}")
    out = reader_array(out, predict)
    expected = predict_residual_variance_reference(v0, branch)
    if out.shape != expected.shape:
        if out.shape == (len(branch) + 1,):
            return CheckResult(False, "return v_1 .. v_L (one value per block), without v_0")
        return CheckResult(False, f"expected {len(branch)} values (one per block), got shape "
                                  f"{out.shape}")
    if allclose(out, expected):
        return CheckResult(True, "v_l = v_0 + sum of the branch variances up to block l")
    hints = {
        "this is the plain stack (v_{l+1} = Var(F(x_l))): with a skip connection the input's "
        "variance is kept and the branch's is added": branch,
        "v_0 is missing: the skip path carries the input's variance to every layer":
            np.cumsum(branch),
        "variances add, they do not multiply: v_{l+1} = v_l + Var(F(x_l))":
            v0 * np.cumprod(branch),
        "off by one: v_1 already includes the first branch":
            np.concatenate([[v0], v0 + np.cumsum(branch)[:-1]]),
    }
    for hint, wrong in hints.items():
        if allclose(out, wrong):
            return CheckResult(False, hint)
    return CheckResult(False, "the values differ from v_0 + cumulative sum of the branch "
                              "variances")
