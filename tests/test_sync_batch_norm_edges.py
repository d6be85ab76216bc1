"""Synchronized batch norm at its edges (issue 24, items 2 and 3).

* Half precision: the per-channel sums, the all-reduced buffers and the gradient sums are
  accumulated in fp32. A float16 sum of squares of a few thousand rows of std 4 overflows
  (largest float16: 65504), which used to store ``inf`` in ``running_var``.
* One value per channel across all ranks: torch's ValueError, not an all-zero output.

The two-process tests start real gloo groups through the package's launcher (a few seconds
each); worker functions are at module level so the worker processes can import them.
"""

import pytest
import torch
import torch.nn.functional as F

from layernorm_tutorial import distributed as D

ONE_VALUE = r"^Expected more than 1 value per channel when training, got input size "


def half_batch(rows=4000, channels=8, seed=0):
    """float16 activations of std 4: their per-channel sum of squares exceeds 65504."""
    generator = torch.Generator().manual_seed(seed)
    x = torch.randn(rows, channels, generator=generator, dtype=torch.float64) * 4 + 1
    return x.half()


def float64_reference(x16, upstream, momentum=0.1):
    """torch's batch norm of the same float16 values, computed in float64."""
    x = x16.double().requires_grad_(True)
    rm, rv = torch.zeros(x.shape[1], dtype=torch.float64), torch.ones(x.shape[1],
                                                                    dtype=torch.float64)
    y = F.batch_norm(x, rm, rv, training=True, momentum=momentum)
    y.backward(upstream.double())
    return y.detach(), x.grad, rm, rv


# ---- workers (run inside the worker processes) ---------------------------------------------


def half_worker(rank, world_size, x_full, upstream, split):
    """Sync BN in float16 on rows [split[rank], split[rank + 1]) with fp32 buffers."""
    rows = slice(split[rank], split[rank + 1])
    x = x_full[rows].clone().requires_grad_(True)
    running_mean, running_var = torch.zeros(x.shape[1]), torch.ones(x.shape[1])
    with D.count_communication() as log:
        y = D.sync_batch_norm(x, running_mean, running_var, training=True, momentum=0.1)
        y.backward(upstream[rows])
    return {"y": y.detach(), "dx": x.grad, "running_mean": running_mean,
            "running_var": running_var, "log": log.by_tag()}


def one_value_worker(rank, world_size, channels):
    """Rank 0 holds one row, rank 1 none: one value per channel in all. Then each rank holds
    one row: two values per channel in all, which is enough, though each rank has only one."""
    outcome = {}
    x = torch.randn(1 if rank == 0 else 0, channels, dtype=torch.float64)
    try:
        D.sync_batch_norm(x, None, None, training=True)
        outcome["one in all"] = "no error"
    except ValueError as error:
        outcome["one in all"] = str(error)
    x = torch.full((1, channels), float(rank), dtype=torch.float64, requires_grad=True)
    running_mean = torch.zeros(channels, dtype=torch.float64)
    running_var = torch.ones(channels, dtype=torch.float64)
    y = D.sync_batch_norm(x, running_mean, running_var, training=True, momentum=1.0)
    outcome["two in all"] = (y.detach(), running_mean, running_var)
    return outcome


# ---- item 2: float16 -------------------------------------------------------------------


def test_float16_single_process_running_var_stays_finite_and_correct():
    x16 = half_batch()
    upstream = torch.randn(x16.shape, generator=torch.Generator().manual_seed(1)).half()
    ref_y, ref_dx, ref_rm, ref_rv = float64_reference(x16, upstream)
    module = D.SyncBatchNorm(x16.shape[1])
    inputs = x16.clone().requires_grad_(True)
    y = module(inputs)
    y.backward(upstream)
    assert y.dtype == inputs.grad.dtype == torch.float16  # the input's dtype, as torch
    assert module.running_var.dtype == torch.float32  # the buffers keep their dtype
    assert torch.isfinite(module.running_var).all(), module.running_var
    torch.testing.assert_close(module.running_var.double(), ref_rv, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(module.running_mean.double(), ref_rm, rtol=1e-5, atol=1e-6)
    # float16 outputs: at most a rounding of the float64 result (|y| < 8: ulp <= 2^-8)
    torch.testing.assert_close(y.double(), ref_y, rtol=0, atol=2 ** -8)
    torch.testing.assert_close(inputs.grad.double(), ref_dx, rtol=0, atol=2e-3)


def test_float16_module_with_float16_buffers_updates_them_as_torch_does():
    """A `.half()` module: torch blends the running statistics in fp32 and rounds once into
    the float16 buffer; so does the package (bit for bit)."""
    x16 = half_batch(seed=2)
    ours, theirs = D.SyncBatchNorm(8).half(), torch.nn.BatchNorm1d(8).half()
    for _ in range(3):
        y_ours, y_theirs = ours(x16), theirs(x16)
    assert y_ours.dtype == torch.float16 and ours.running_var.dtype == torch.float16
    assert torch.isfinite(ours.running_var).all(), ours.running_var
    assert torch.equal(ours.running_mean, theirs.running_mean)
    assert torch.equal(ours.running_var, theirs.running_var)
    torch.testing.assert_close(y_ours, y_theirs, rtol=0, atol=2 ** -8)


def test_float16_two_ranks_all_reduce_in_float32_and_equal_the_full_batch():
    x16 = half_batch(rows=3000, channels=4, seed=3)
    upstream = torch.randn(x16.shape, generator=torch.Generator().manual_seed(4)).half()
    split = (0, 1000, 3000)  # unequal shards
    results = D.run_on_ranks(half_worker, 2, (x16, upstream, split), timeout=60)
    ref_y, ref_dx, ref_rm, ref_rv = float64_reference(x16, upstream)
    y = torch.cat([r["y"] for r in results])
    dx = torch.cat([r["dx"] for r in results])
    assert y.dtype == dx.dtype == torch.float16
    torch.testing.assert_close(y.double(), ref_y, rtol=0, atol=2 ** -8)
    torch.testing.assert_close(dx.double(), ref_dx, rtol=0, atol=2e-3)
    for r in results:
        assert torch.isfinite(r["running_var"]).all(), r["running_var"]
        torch.testing.assert_close(r["running_mean"].double(), ref_rm, rtol=1e-5, atol=1e-6)
        torch.testing.assert_close(r["running_var"].double(), ref_rv, rtol=1e-5, atol=1e-6)
        # the reduced buffers are float32 (4 bytes a number), not float16
        assert r["log"] == {"sync_bn forward: sum and count": (1, (4 + 1) * 4),
                            "sync_bn forward: sum of squares": (1, 4 * 4),
                            "sync_bn backward: gradient sums": (1, 2 * 4 * 4)}


# ---- item 3: one value per channel --------------------------------------------------------


@pytest.mark.parametrize("shape", [(1, 3), (1, 3, 1)])
def test_one_value_per_channel_raises_torchs_value_error(shape):
    x = torch.randn(shape, dtype=torch.float64, requires_grad=True)
    with pytest.raises(ValueError, match=ONE_VALUE):
        F.batch_norm(x, None, None, training=True)
    expected = ONE_VALUE + rf"\[{', '.join(map(str, shape))}\]$"
    with pytest.raises(ValueError, match=expected):
        D.sync_batch_norm(x, None, None, training=True)
    module = D.SyncBatchNorm(3).double()
    with pytest.raises(ValueError, match=expected):
        module(x)
    assert torch.equal(module.running_var, torch.ones(3, dtype=torch.float64))  # untouched


def test_one_value_per_channel_is_counted_across_ranks():
    results = D.run_on_ranks(one_value_worker, 2, (3,), timeout=60)
    for rank, outcome in enumerate(results):
        message = outcome["one in all"]
        shape = "[1, 3]" if rank == 0 else "[0, 3]"  # each rank names its own input
        assert message == ("Expected more than 1 value per channel when training, got input "
                           f"size {shape} (1 value per channel across all 2 ranks)"), message
        # one row on each rank: two values per channel in all, normalized together
        y, running_mean, running_var = outcome["two in all"]
        expected = torch.full((1, 3), 1.0 if rank == 1 else -1.0, dtype=torch.float64)
        torch.testing.assert_close(y, expected, rtol=0, atol=1e-4)  # eps = 1e-5
        torch.testing.assert_close(running_mean, torch.full((3,), 0.5, dtype=torch.float64))
        torch.testing.assert_close(running_var, torch.full((3,), 0.5, dtype=torch.float64))
