"""layernorm_tutorial.nn modules against their torch.nn counterparts: constructor arguments,
parameters, buffers and state_dict layout; load_state_dict in both directions; identical
outputs, gradients and running statistics in train and eval mode (float64)."""

from __future__ import annotations

import inspect
import re

import pytest
import torch
from conftest import F64, assert_close, randn

from layernorm_tutorial import nn as ours_nn

CLASSES = ["LayerNorm", "BatchNorm1d", "BatchNorm2d", "GroupNorm", "InstanceNorm2d", "RMSNorm"]

# (class name, positional args, keyword args, input shape)
CONFIGS = [
    ("LayerNorm", (4,), {}, (3, 2, 4)),
    ("LayerNorm", ((2, 4),), {}, (3, 2, 4)),
    ("LayerNorm", ([2, 4],), {"eps": 1e-3}, (3, 2, 4)),
    ("LayerNorm", (4,), {"elementwise_affine": False}, (3, 4)),
    ("LayerNorm", (4,), {"bias": False}, (3, 4)),
    ("BatchNorm1d", (3,), {}, (5, 3)),
    ("BatchNorm1d", (3,), {}, (4, 3, 2)),
    ("BatchNorm1d", (3,), {"momentum": None}, (5, 3)),
    ("BatchNorm1d", (3,), {"eps": 1e-3, "momentum": 0.3}, (5, 3, 2)),
    ("BatchNorm1d", (3,), {"affine": False}, (5, 3)),
    ("BatchNorm1d", (3,), {"track_running_stats": False}, (5, 3)),
    ("BatchNorm2d", (2,), {}, (3, 2, 2, 3)),
    ("BatchNorm2d", (2,), {"momentum": None}, (3, 2, 2, 3)),
    ("BatchNorm2d", (2,), {"affine": False, "track_running_stats": False}, (3, 2, 2, 3)),
    ("GroupNorm", (2, 4), {}, (2, 4, 3)),
    ("GroupNorm", (1, 3), {"eps": 1e-3}, (2, 3, 2, 2)),
    ("GroupNorm", (3, 3), {"affine": False}, (2, 3, 5)),
    ("InstanceNorm2d", (3,), {}, (2, 3, 2, 3)),
    ("InstanceNorm2d", (3,), {}, (3, 2, 3)),  # unbatched (C, H, W)
    ("InstanceNorm2d", (3,), {"affine": True}, (2, 3, 2, 3)),
    ("InstanceNorm2d", (3,), {"track_running_stats": True}, (2, 3, 2, 3)),
    ("InstanceNorm2d", (3,), {"affine": True, "track_running_stats": True, "momentum": 0.4},
     (2, 3, 3, 2)),
    ("InstanceNorm2d", (3,), {"track_running_stats": True, "momentum": None}, (2, 3, 2, 2)),
    ("RMSNorm", (4,), {}, (3, 4)),
    ("RMSNorm", ((2, 4),), {"eps": 1e-3}, (3, 2, 4)),
    ("RMSNorm", (4,), {"elementwise_affine": False}, (3, 4)),
]
CONFIG_IDS = [f"{c[0]}-{i}" for i, c in enumerate(CONFIGS)]


def make_pair(name, args, kwargs):
    """(ours, torch's) module, both in float64."""
    return (getattr(ours_nn, name)(*args, **kwargs).to(F64),
            getattr(torch.nn, name)(*args, **kwargs).to(F64))


def randomize(module: torch.nn.Module, seed: int) -> None:
    """Non-trivial parameters and running statistics (weight=1, bias=0 would hide mix-ups)."""
    with torch.no_grad():
        for i, (_, p) in enumerate(sorted(module.named_parameters())):
            p.copy_(randn(p.shape, seed + i))
        for name, b in module.named_buffers():
            if name.endswith("running_mean"):
                b.copy_(randn(b.shape, seed + 10))
            elif name.endswith("running_var"):
                b.copy_(0.5 + randn(b.shape, seed + 11).abs())
            elif name.endswith("num_batches_tracked"):
                b.fill_(3)


def assert_same_state(mine: torch.nn.Module, theirs: torch.nn.Module, when: str) -> None:
    a, b = mine.state_dict(), theirs.state_dict()
    assert list(a) == list(b), f"{when}: state_dict keys {list(a)} != {list(b)}"
    for key in b:
        assert a[key].dtype == b[key].dtype, f"{when}: {key} dtype {a[key].dtype} != {b[key].dtype}"
        assert_close(a[key], b[key], f"{when}: {key}")


def step(module: torch.nn.Module, x: torch.Tensor, seed: int):
    """Forward, then backward of <out, random upstream>; returns (out, {param: grad})."""
    module.zero_grad(set_to_none=True)
    x = x.clone().requires_grad_(True)
    out = module(x)
    upstream = randn(out.shape, seed)
    params = dict(module.named_parameters())
    grads = torch.autograd.grad(out, [x, *params.values()], upstream)
    return out.detach(), dict(zip(["input", *params], grads, strict=True))


def assert_same_behaviour(mine, theirs, shape, seed, steps=3):
    """Same outputs, gradients and state after ``steps`` forward/backward passes in the
    current mode (train or eval)."""
    for k in range(steps):
        x = 1.5 + 2.0 * randn(shape, seed + 100 * k)
        out_a, grads_a = step(mine, x, seed + 100 * k + 1)
        out_b, grads_b = step(theirs, x, seed + 100 * k + 1)
        mode = "train" if theirs.training else "eval"
        assert_close(out_a, out_b, f"{mode} step {k}: output")
        assert grads_a.keys() == grads_b.keys()
        for key in grads_b:
            assert_close(grads_a[key], grads_b[key], f"{mode} step {k}: gradient of {key}")
        assert_same_state(mine, theirs, f"{mode} step {k}")


# ------------------------------------------------------------------------------ layout
@pytest.mark.parametrize("name", CLASSES)
def test_constructor_signature_matches_torch(name):
    mine = inspect.signature(getattr(ours_nn, name).__init__).parameters
    theirs = inspect.signature(getattr(torch.nn, name).__init__).parameters
    assert list(mine) == list(theirs)
    for key, p in theirs.items():
        assert mine[key].default == p.default, f"default of {key}"
        assert mine[key].kind == p.kind, f"kind of {key}"


@pytest.mark.parametrize(("name", "args", "kwargs", "shape"), CONFIGS, ids=CONFIG_IDS)
def test_parameters_buffers_and_state_dict_match_torch(name, args, kwargs, shape):
    mine, theirs = make_pair(name, args, kwargs)
    assert isinstance(mine, torch.nn.Module)
    assert [n for n, _ in mine.named_parameters()] == [n for n, _ in theirs.named_parameters()]
    assert [n for n, _ in mine.named_buffers()] == [n for n, _ in theirs.named_buffers()]
    assert_same_state(mine, theirs, "fresh module")  # also compares initial values
    for attr in ("weight", "bias"):  # registered (possibly as None) exactly where torch does
        assert (attr in mine._parameters) == (attr in theirs._parameters), attr
    for attr in ("eps", "momentum", "affine", "track_running_stats", "num_features",
                 "num_groups", "num_channels", "normalized_shape", "elementwise_affine"):
        if hasattr(theirs, attr):
            assert getattr(mine, attr) == getattr(theirs, attr), attr


@pytest.mark.parametrize("name", ["LayerNorm", "BatchNorm1d", "GroupNorm", "RMSNorm"])
def test_dtype_keyword_creates_parameters_in_that_dtype(name):
    args = (2, 4) if name == "GroupNorm" else (4,)
    module = getattr(ours_nn, name)(*args, dtype=F64)
    assert all(p.dtype == F64 for p in module.parameters())


# ------------------------------------------------------------------------------ behaviour
@pytest.mark.parametrize(("name", "args", "kwargs", "shape"), CONFIGS, ids=CONFIG_IDS)
def test_train_then_eval_matches_torch(name, args, kwargs, shape):
    mine, theirs = make_pair(name, args, kwargs)
    randomize(theirs, seed=1)
    mine.load_state_dict(theirs.state_dict())
    assert_same_behaviour(mine.train(), theirs.train(), shape, seed=2)
    assert_same_behaviour(mine.eval(), theirs.eval(), shape, seed=3, steps=1)


@pytest.mark.parametrize(("name", "args", "kwargs", "shape"), CONFIGS, ids=CONFIG_IDS)
def test_load_state_dict_torch_to_ours(name, args, kwargs, shape):
    mine, theirs = make_pair(name, args, kwargs)
    randomize(theirs, seed=4)
    theirs.train()
    for k in range(2):  # evolve torch's running statistics and num_batches_tracked
        theirs(randn(shape, 6 + k))
    result = mine.load_state_dict(theirs.state_dict(), strict=True)
    assert not result.missing_keys and not result.unexpected_keys
    assert_same_state(mine, theirs, "after loading torch's state")
    assert_same_behaviour(mine.eval(), theirs.eval(), shape, seed=7, steps=1)
    assert_same_behaviour(mine.train(), theirs.train(), shape, seed=8, steps=2)


@pytest.mark.parametrize(("name", "args", "kwargs", "shape"), CONFIGS, ids=CONFIG_IDS)
def test_load_state_dict_ours_to_torch(name, args, kwargs, shape):
    mine, theirs = make_pair(name, args, kwargs)
    randomize(mine, seed=9)
    mine.train()
    for k in range(2):
        mine(randn(shape, 10 + k))
    result = theirs.load_state_dict(mine.state_dict(), strict=True)
    assert not result.missing_keys and not result.unexpected_keys
    assert_same_state(mine, theirs, "after loading our state")
    assert_same_behaviour(mine.eval(), theirs.eval(), shape, seed=11, steps=1)
    assert_same_behaviour(mine.train(), theirs.train(), shape, seed=12, steps=2)


def test_momentum_none_is_a_cumulative_average():
    """momentum=None: running_mean after k batches is the plain mean of the k batch means
    (torch: factor 1/num_batches_tracked), independent of torch's implementation."""
    module = ours_nn.BatchNorm1d(2, momentum=None).to(F64)
    batches = [randn((4, 2), seed=20 + k) + k for k in range(4)]
    for x in batches:
        module(x)
    assert int(module.num_batches_tracked) == len(batches)
    assert_close(module.running_mean, torch.stack([x.mean(0) for x in batches]).mean(0),
                 "running_mean")
    assert_close(module.running_var,
                 torch.stack([x.var(0, unbiased=True) for x in batches]).mean(0),
                 "running_var")


def test_batch_norm_eval_uses_running_statistics_and_train_uses_the_batch():
    module = ours_nn.BatchNorm2d(2).to(F64)
    randomize(module, seed=21)
    x = randn((3, 2, 2, 2), seed=22)
    rm, rv = module.running_mean.clone(), module.running_var.clone()
    w, b = module.weight.detach()[:, None, None], module.bias.detach()[:, None, None]
    out_eval = module.eval()(x)
    expected = (x - rm[:, None, None]) / torch.sqrt(rv[:, None, None] + module.eps) * w + b
    assert_close(out_eval, expected, "eval output")
    assert torch.equal(module.running_mean, rm), "eval must not update running stats"
    out_train = module.train()(x)
    mean = x.mean(dim=(0, 2, 3))[:, None, None]
    var = x.var(dim=(0, 2, 3), unbiased=False)[:, None, None]
    assert_close(out_train, (x - mean) / torch.sqrt(var + module.eps) * w + b, "train output")
    assert int(module.num_batches_tracked) == 4  # randomize() set 3


def test_batch_norm_without_running_stats_uses_batch_statistics_in_eval():
    module = ours_nn.BatchNorm1d(3, track_running_stats=False).to(F64).eval()
    x = randn((6, 3), seed=23)
    assert module.running_mean is None and module.running_var is None
    expected = (x - x.mean(0)) / torch.sqrt(x.var(0, unbiased=False) + module.eps)
    assert_close(module(x), expected * module.weight.detach() + module.bias.detach(), "output")


@pytest.mark.parametrize("momentum", [0.1, None])
def test_zero_size_batch_leaves_running_stats_alone_like_torch(momentum):
    mine, theirs = make_pair("BatchNorm1d", (3,), {"momentum": momentum})
    randomize(theirs, seed=24)
    mine.load_state_dict(theirs.state_dict())
    rm, rv = mine.running_mean.clone(), mine.running_var.clone()
    x = randn((0, 3), seed=25)
    assert mine(x).shape == (0, 3)
    theirs(x)
    assert torch.equal(mine.running_mean, rm) and torch.equal(mine.running_var, rv)
    assert_same_state(mine, theirs, "after an empty batch")  # num_batches_tracked as torch


def test_instance_norm_with_running_stats_uses_them_in_eval():
    mine, theirs = make_pair("InstanceNorm2d", (2,), {"track_running_stats": True})
    x = randn((3, 2, 2, 3), seed=26)
    mine(x)
    theirs(x)
    assert_same_state(mine, theirs, "after one training batch")
    y = randn((2, 2, 2, 3), seed=27)
    rm, rv = mine.running_mean[:, None, None], mine.running_var[:, None, None]
    assert_close(mine.eval()(y), (y - rm) / torch.sqrt(rv + mine.eps), "eval output")


def test_rms_norm_default_eps_is_none_and_matches_torch():
    mine, theirs = make_pair("RMSNorm", (4,), {})
    assert mine.eps is None
    x = torch.full((2, 4), 1e-9, dtype=F64)
    assert_close(mine(x), theirs(x), "output with eps=None")


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize(("name", "args", "shape"), [
    ("LayerNorm", (4,), (3, 4)), ("BatchNorm1d", (3,), (5, 3)), ("GroupNorm", (2, 4), (2, 4, 3)),
    ("InstanceNorm2d", (3,), (2, 3, 2, 3)), ("RMSNorm", (4,), (3, 4)),
])
def test_half_precision_modules_match_torch(name, args, shape, dtype):
    mine, theirs = make_pair(name, args, {})
    randomize(theirs, seed=28)
    mine.load_state_dict(theirs.state_dict())
    mine, theirs = mine.to(dtype), theirs.to(dtype)
    x = randn(shape, seed=29, dtype=dtype)
    out = mine(x)
    assert out.dtype == dtype
    assert_close(out, theirs(x), "output", dtype=dtype)
    assert_same_state(mine, theirs, "after a half-precision batch")


# ------------------------------------------------------------------------------ repr
@pytest.mark.parametrize(("name", "args", "kwargs", "shape"), CONFIGS, ids=CONFIG_IDS)
def test_repr_is_informative(name, args, kwargs, shape):
    """Loosely compared with torch's repr: the class name, the sizes and every setting
    torch shows (as key=value) must appear."""
    mine, theirs = make_pair(name, args, kwargs)
    text = repr(mine)
    assert text.startswith(name + "("), text
    theirs_extra = theirs.extra_repr()
    sizes = theirs_extra.split("=")[0].rsplit(",", 1)[0] if "=" in theirs_extra else theirs_extra
    for number in re.findall(r"\d+", sizes):
        assert number in text, f"size {number} missing from {text}"
    for key, value in re.findall(r"(\w+)=([^,]+)", theirs_extra):
        if key == "bias" and name != "LayerNorm":
            continue  # BatchNorm/GroupNorm/InstanceNorm's keyword-only bias flag: loosely
        assert f"{key}={value}" in text, f"{key}={value} missing from {text}"
