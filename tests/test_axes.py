"""The family's axis definitions agree with what torch's modules actually compute."""

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from layernorm_tutorial import axes

NCHW = (4, 6, 3, 5)
BTC = (3, 7, 6)


def torch_reference(x, name, layout, num_groups=None, eps=1e-5):
    """Normalized output of the torch op that ``name`` stands for (no affine)."""
    if layout == "BTC":
        if name == "layer":
            return F.layer_norm(x, x.shape[-1:], eps=eps)
        if name == "rms":
            return F.rms_norm(x, x.shape[-1:], eps=eps)
        xt = x.transpose(1, 2)
        return torch_reference(xt, name, "NCL", num_groups, eps).transpose(1, 2)
    if name == "batch":
        return F.batch_norm(x, None, None, training=True, eps=eps)
    if name == "layer":
        return F.layer_norm(x, x.shape[1:], eps=eps)
    if name == "instance":
        return F.instance_norm(x, eps=eps)
    if name == "group":
        return F.group_norm(x, num_groups, eps=eps)
    if name == "rms":
        return F.rms_norm(x, x.shape[1:], eps=eps)
    raise AssertionError(name)


@pytest.mark.parametrize("layout,shape", [("NCHW", NCHW), ("BTC", BTC)])
@pytest.mark.parametrize("name", axes.FAMILY)
def test_family_normalize_matches_torch(name, layout, shape):
    torch.manual_seed(0)
    x = torch.randn(shape, dtype=torch.float64) * 3 + 1
    groups = 3 if name == "group" else None
    got = axes.family_normalize(x, name, layout, num_groups=groups)
    want = torch_reference(x, name, layout, groups)
    torch.testing.assert_close(got, want, rtol=1e-10, atol=1e-10)


@pytest.mark.parametrize("layout,shape", [("NCHW", NCHW), ("BTC", BTC)])
@pytest.mark.parametrize("name", axes.FAMILY)
def test_statistic_index_groups_exactly_the_normalized_sets(name, layout, shape):
    """Within each id the normalized values have mean 0 (if centered) and mean square 1."""
    torch.manual_seed(1)
    x = torch.randn(shape, dtype=torch.float64) * 2 - 0.5
    groups = 2 if name == "group" else None
    y = axes.family_normalize(x, name, layout, num_groups=groups, eps=0.0).numpy()
    index = axes.statistic_index(name, shape, layout, num_groups=groups)
    n_stats = int(np.prod(axes.statistics_shape(name, shape, layout, groups)))
    assert sorted(np.unique(index)) == list(range(n_stats))
    counts = np.bincount(index.ravel())
    assert set(counts) == {axes.elements_per_statistic(name, shape, layout, groups)}
    sums = np.bincount(index.ravel(), weights=y.ravel())
    squares = np.bincount(index.ravel(), weights=(y * y).ravel())
    if axes.spec(name, layout).centers:
        np.testing.assert_allclose(sums / counts, 0.0, atol=1e-12)
    np.testing.assert_allclose(squares / counts, 1.0, rtol=1e-12)


def test_seed_nchw_example_shapes_match_torch_modules():
    shape = (20, 5, 10, 10)
    x = torch.randn(shape)
    ln = torch.nn.LayerNorm(x.shape[1:])
    bn = torch.nn.BatchNorm2d(5)
    gn = torch.nn.GroupNorm(5, 5)
    assert axes.parameter_shape("layer", shape) == tuple(ln.weight.shape) == (5, 10, 10)
    assert axes.parameter_shape("batch", shape) == tuple(bn.weight.shape) == (5,)
    assert axes.parameter_shape("group", shape) == tuple(gn.weight.shape)
    assert axes.statistics_shape("batch", shape) == tuple(bn.running_mean.shape) == (5,)
    assert axes.statistics_shape("layer", shape) == (20,)
    assert axes.statistics_shape("instance", shape) == (20, 5)
    assert axes.statistics_shape("group", shape, num_groups=5) == (20, 5)
    assert axes.elements_per_statistic("batch", shape) == 20 * 10 * 10
    assert axes.elements_per_statistic("layer", shape) == 5 * 10 * 10


def test_group_norm_limits_are_layer_and_instance_norm():
    x = torch.randn(NCHW, dtype=torch.float64)
    c = NCHW[1]
    torch.testing.assert_close(axes.family_normalize(x, "group", num_groups=1),
                               axes.family_normalize(x, "layer"))
    torch.testing.assert_close(axes.family_normalize(x, "group", num_groups=c),
                               axes.family_normalize(x, "instance"))
    assert (axes.statistic_index("group", NCHW, num_groups=c)
            == axes.statistic_index("instance", NCHW)).all()


def test_reduction_axes_positions():
    assert axes.reduction_axes("batch") == (0, 2, 3)
    assert axes.reduction_axes("layer") == (1, 2, 3)
    assert axes.reduction_axes("instance") == (2, 3)
    assert axes.reduction_axes("layer", "BTC") == (2,)
    assert axes.reduction_axes("batch", "BTC") == (0, 1)


def test_family_table_has_one_row_per_member():
    rows = axes.family_table((20, 5, 10, 10), num_groups=5)
    assert [r["member"] for r in rows] == [axes.DISPLAY_NAMES[n] for n in axes.FAMILY]
    assert rows[1]["parameter shape"] == (5, 10, 10)


@pytest.mark.parametrize("call,match", [
    (lambda: axes.spec("weight"), "name must be one of"),
    (lambda: axes.spec("layer", "NHWC"), "layout must be one of"),
    (lambda: axes.statistics_shape("layer", (2, 3)), "shape must have 4 dims"),
    (lambda: axes.statistics_shape("group", NCHW), "num_groups is required"),
    (lambda: axes.statistics_shape("group", NCHW, num_groups=4), "must divide"),
])
def test_bad_arguments_raise_clear_errors(call, match):
    with pytest.raises(ValueError, match=match):
        call()


def test_family_normalize_rejects_non_tensors():
    with pytest.raises(TypeError, match="x must be a torch.Tensor"):
        axes.family_normalize(np.zeros(NCHW), "layer")
