"""layernorm_tutorial.running_stats: the one batch-norm running-statistics update
(eq-running-stats), checked against torch's modules batch by batch, including Bessel's
correction and the momentum=None cumulative average."""

from __future__ import annotations

import pytest
import torch
from conftest import F64, assert_close, randn

from layernorm_tutorial import nn as ours_nn
from layernorm_tutorial.running_stats import momentum_factor, update_running_stats


def _batch_stats(x):
    dims = (0,) + tuple(range(2, x.dim()))
    return x.mean(dims), x.var(dims, unbiased=False), x.numel() // x.shape[1]


@pytest.mark.parametrize("momentum", [0.1, 0.5, None])
def test_update_follows_torch_batch_norm_over_several_batches(momentum):
    torch_bn = torch.nn.BatchNorm1d(3, momentum=momentum).to(F64).train()
    running_mean, running_var = torch.zeros(3, dtype=F64), torch.ones(3, dtype=F64)
    for t in range(1, 5):
        x = randn((4 + t, 3, 2), seed=t) * t + t
        torch_bn(x)
        mean, var, count = _batch_stats(x)
        update_running_stats(running_mean, running_var, mean, var, count, momentum,
                             num_batches_tracked=t)
        assert_close(running_mean, torch_bn.running_mean, f"running_mean after batch {t}")
        assert_close(running_var, torch_bn.running_var, f"running_var after batch {t}")


def test_bessel_correction_and_momentum_by_hand():
    """One update from (0, 1) with M = 4 values: mean m * mu_B, var (1-m) + m * 4/3 sigma_B^2."""
    x = torch.tensor([[1.0], [2.0], [3.0], [6.0]], dtype=F64)  # mu_B = 3, sigma_B^2 = 3.5
    running_mean, running_var = torch.zeros(1, dtype=F64), torch.ones(1, dtype=F64)
    update_running_stats(running_mean, running_var, x.mean(0), x.var(0, unbiased=False), 4,
                         0.25)
    assert running_mean.item() == pytest.approx(0.25 * 3.0)
    assert running_var.item() == pytest.approx(0.75 * 1.0 + 0.25 * 3.5 * 4 / 3)


def test_cumulative_average_is_the_plain_average_of_batch_statistics():
    means = [torch.tensor([float(v)], dtype=F64) for v in (2.0, 4.0, 9.0)]
    running_mean, running_var = torch.zeros(1, dtype=F64), torch.ones(1, dtype=F64)
    for t, mean in enumerate(means, start=1):
        update_running_stats(running_mean, running_var, mean, torch.ones(1, dtype=F64), 2,
                             None, num_batches_tracked=torch.tensor(t))
    assert running_mean.item() == pytest.approx(5.0)  # (2 + 4 + 9) / 3: first batch replaces
    assert running_var.item() == pytest.approx(2.0)   # unbiased 1 * 2/1 each time


def test_update_records_no_graph_and_accepts_any_stat_shape():
    x = randn((6, 2, 3), seed=5).requires_grad_(True)
    mean = x.mean((0, 2), keepdim=True)                            # (1, C, 1)
    var = x.var((0, 2), unbiased=False, keepdim=True)
    running_mean, running_var = torch.zeros(2, dtype=F64), torch.ones(2, dtype=F64)
    update_running_stats(running_mean, running_var, mean, var, 18, 0.1)
    assert not running_mean.requires_grad and not running_var.requires_grad
    assert running_mean.shape == running_var.shape == (2,)


def test_fp32_running_statistics_of_a_half_batch_keep_their_dtype():
    running_mean, running_var = torch.zeros(2), torch.ones(2)
    x = randn((5, 2), seed=6).half()
    update_running_stats(running_mean, running_var, x.float().mean(0),
                         x.float().var(0, unbiased=False), 5, 0.1)
    assert running_mean.dtype == running_var.dtype == torch.float32


def test_none_running_statistics_are_skipped():
    running_var = torch.ones(2, dtype=F64)
    update_running_stats(None, running_var, torch.zeros(2), torch.full((2,), 2.0), 3, 1.0)
    assert_close(running_var, torch.full((2,), 3.0, dtype=F64), "running_var")


@pytest.mark.parametrize(("momentum", "tracked", "expected"),
                         [(0.1, None, 0.1), (None, 4, 0.25), (None, torch.tensor(2), 0.5)])
def test_momentum_factor(momentum, tracked, expected):
    assert momentum_factor(momentum, tracked) == pytest.approx(expected)


def test_bad_arguments_are_refused_with_their_names():
    stats = (torch.zeros(2), torch.ones(2), torch.zeros(2), torch.ones(2))
    with pytest.raises(ValueError, match="count"):
        update_running_stats(*stats, 1, 0.1)
    with pytest.raises(ValueError, match="num_batches_tracked"):
        update_running_stats(*stats, 4, None)
    with pytest.raises(ValueError, match="num_batches_tracked"):
        momentum_factor(None, 0)
    with pytest.raises(TypeError, match="momentum"):
        momentum_factor("0.1")


def test_nn_batch_norm_with_cumulative_average_matches_torch():
    """The module path: num_batches_tracked counts, then the shared update uses 1/t."""
    ours = ours_nn.BatchNorm2d(3, momentum=None).to(F64)
    theirs = torch.nn.BatchNorm2d(3, momentum=None).to(F64)
    for t in range(3):
        x = randn((2, 3, 2, 2), seed=10 + t) + t
        ours(x)
        theirs(x)
    for key in ("running_mean", "running_var", "num_batches_tracked"):
        assert_close(getattr(ours, key), getattr(theirs, key), key)
