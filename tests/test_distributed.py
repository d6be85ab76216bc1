"""Synchronized batch norm, the gloo launcher and the communication counter.

The two-process tests start real gloo groups on 127.0.0.1 (a few seconds each). Worker
functions are defined at module level so the worker processes can import them.
"""

import multiprocessing
import socket
import time

import pytest
import torch
import torch.nn.functional as F

from layernorm_tutorial import distributed as D

# ---- workers (run inside the worker processes) ---------------------------------------------


def sync_bn_worker(rank, world_size, x_full, upstream, weight, bias, split):
    """Forward + backward of sync BN on this rank's rows [split[rank], split[rank + 1])."""
    rows = slice(split[rank], split[rank + 1])
    x = x_full[rows].clone().requires_grad_(True)
    w = weight.clone().requires_grad_(True)
    b = bias.clone().requires_grad_(True)
    running_mean, running_var = torch.zeros(x.shape[1], dtype=x.dtype), \
        torch.ones(x.shape[1], dtype=x.dtype)
    with D.count_communication() as log:
        y = D.sync_batch_norm(x, running_mean, running_var, w, b, training=True, momentum=0.5)
        y.backward(upstream[rows])
    return {"y": y.detach(), "dx": x.grad, "dw": w.grad, "db": b.grad,
            "running_mean": running_mean, "running_var": running_var,
            "log": log.by_tag()}


def failing_worker(rank, world_size):
    if rank == 1:
        raise ValueError("deliberate failure on rank 1")
    return rank


def sleeping_worker(rank, world_size):
    time.sleep(60)


# ---- single process ---------------------------------------------------------------------


@pytest.mark.parametrize("shape", [(6, 4), (3, 4, 5), (2, 3, 4, 5)])
def test_single_process_sync_bn_is_batch_norm(shape):
    torch.manual_seed(0)
    x = torch.randn(shape, dtype=torch.float64, requires_grad=True)
    w = torch.rand(shape[1], dtype=torch.float64, requires_grad=True)
    b = torch.randn(shape[1], dtype=torch.float64, requires_grad=True)
    rm, rv = torch.zeros(shape[1], dtype=torch.float64), torch.ones(shape[1], dtype=torch.float64)
    rm2, rv2 = rm.clone(), rv.clone()
    ours = D.sync_batch_norm(x, rm, rv, w, b, training=True, momentum=0.3)
    xs, ws, bs = (t.detach().clone().requires_grad_(True) for t in (x, w, b))
    theirs = F.batch_norm(xs, rm2, rv2, ws, bs, training=True, momentum=0.3)
    torch.testing.assert_close(ours, theirs, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(rm, rm2)
    torch.testing.assert_close(rv, rv2)
    upstream = torch.randn_like(ours)
    ours.backward(upstream)
    theirs.backward(upstream)
    for a, e in [(x.grad, xs.grad), (w.grad, ws.grad), (b.grad, bs.grad)]:
        torch.testing.assert_close(a, e, rtol=1e-10, atol=1e-12)


def test_sync_bn_gradcheck_single_process():
    torch.manual_seed(1)
    x = torch.randn(5, 3, 2, dtype=torch.float64, requires_grad=True)
    w = torch.rand(3, dtype=torch.float64, requires_grad=True)
    b = torch.randn(3, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(
        lambda x, w, b: D.SyncBatchNormFunction.apply(x, w, b, 1e-5, None)[0], (x, w, b))


def test_sync_bn_module_matches_torch_batchnorm_train_and_eval():
    torch.manual_seed(2)
    for momentum in (0.1, None):
        ours = D.SyncBatchNorm(4, momentum=momentum).double()
        theirs = torch.nn.BatchNorm1d(4, momentum=momentum).double()
        for _ in range(3):
            x = torch.randn(8, 4, dtype=torch.float64) * 3 + 2
            torch.testing.assert_close(ours(x), theirs(x))
        assert list(ours.state_dict()) == list(theirs.state_dict())
        for key, value in theirs.state_dict().items():
            torch.testing.assert_close(ours.state_dict()[key], value)
        ours.eval()
        theirs.eval()
        x = torch.randn(5, 4, dtype=torch.float64)
        torch.testing.assert_close(ours(x), theirs(x))


def test_counter_records_nothing_without_a_process_group():
    with D.count_communication() as log:
        D.sync_batch_norm(torch.randn(4, 3), None, None)
    assert log.collectives() == 0 and log.bytes() == 0


def test_bad_inputs():
    with pytest.raises(ValueError, match="shape \\(N, C, ...\\)"):
        D.sync_batch_norm(torch.randn(4), None, None)
    with pytest.raises(ValueError, match="expected input of shape \\(N, 3"):
        D.SyncBatchNorm(3)(torch.randn(2, 4))
    with pytest.raises(ValueError, match="module-level function"):
        D.run_on_ranks(lambda rank, world: rank)
    with pytest.raises(ValueError, match="world_size"):
        D.run_on_ranks(failing_worker, world_size=0)


def test_find_free_port_is_bindable():
    port = D.find_free_port()
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", port))


# ---- two gloo processes -----------------------------------------------------------------


@pytest.mark.parametrize("split", [(0, 4, 8), (0, 2, 8)], ids=["equal", "unequal"])
def test_two_rank_sync_bn_equals_full_batch_batch_norm(split):
    torch.manual_seed(3)
    x = torch.randn(8, 3, 4, dtype=torch.float64) * 2 + 1
    x[:4] += 3.0  # the shards have different statistics, so per-rank BN would differ
    upstream = torch.randn_like(x)
    w = torch.rand(3, dtype=torch.float64) + 0.5
    b = torch.randn(3, dtype=torch.float64)
    results = D.run_on_ranks(sync_bn_worker, 2, (x, upstream, w, b, split), timeout=60)

    xs, ws, bs = (t.clone().requires_grad_(True) for t in (x, w, b))
    rm, rv = torch.zeros(3, dtype=torch.float64), torch.ones(3, dtype=torch.float64)
    full = F.batch_norm(xs, rm, rv, ws, bs, training=True, momentum=0.5)
    full.backward(upstream)

    torch.testing.assert_close(torch.cat([r["y"] for r in results]), full.detach(),
                               rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(torch.cat([r["dx"] for r in results]), xs.grad,
                               rtol=1e-10, atol=1e-12)
    # parameter gradients are local: their sum over ranks is the full-batch gradient
    torch.testing.assert_close(results[0]["dw"] + results[1]["dw"], ws.grad)
    torch.testing.assert_close(results[0]["db"] + results[1]["db"], bs.grad)
    for r in results:
        torch.testing.assert_close(r["running_mean"], rm)
        torch.testing.assert_close(r["running_var"], rv)
        # 2 collectives forward ((C+1) then C numbers), 1 backward (2C numbers), float64
        assert r["log"] == {"sync_bn forward: sum and count": (1, 4 * 8),  # (C + 1) float64
                            "sync_bn forward: sum of squares": (1, 3 * 8),
                            "sync_bn backward: gradient sums": (1, 6 * 8)}


def test_failure_on_one_rank_raises_with_its_traceback_and_cleans_up():
    start = time.monotonic()
    with pytest.raises(D.DistributedRunError, match="rank 1 .*failed") as info:
        D.run_on_ranks(failing_worker, 2, timeout=60, init_timeout=10)
    assert "deliberate failure on rank 1" in str(info.value)
    assert time.monotonic() - start < 60
    assert multiprocessing.active_children() == []


def test_timeout_stops_every_process():
    with pytest.raises(D.DistributedRunError, match="did not finish within 3 s"):
        D.run_on_ranks(sleeping_worker, 2, timeout=3)
    assert multiprocessing.active_children() == []


def test_data_parallel_experiment_sync_bn_and_ln_match_full_batch_per_rank_bn_does_not():
    config = {"steps": 3}
    results = D.run_on_ranks(D.data_parallel_experiment, 2, (config,), timeout=60)
    for variant in D.VARIANTS:
        reference = D.full_batch_training(variant, config)["state_dict"]
        worst = max(float((r[variant]["state_dict"][k] - v).abs().max())
                    for r in results for k, v in reference.items() if v.is_floating_point())
        if variant == "per_rank_bn":
            assert worst > 1e-3
        else:
            assert worst < 1e-12
    per_step = results[0]["layer_norm"]["per_step"]
    assert list(per_step) == ["gradients (every variant)"]  # LN adds no collective
    assert len(results[0]["sync_bn"]["per_step"]) == 4
