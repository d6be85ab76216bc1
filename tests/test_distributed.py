"""Synchronized batch norm, the gloo launcher, the communication counter, the experiment.

The two-process tests start real gloo groups on 127.0.0.1 (a few seconds each). Worker
functions are defined at module level so the worker processes can import them.
"""

import multiprocessing
import os
import socket
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

from layernorm_tutorial import distributed as D
from layernorm_tutorial.lab.ln_vs_bn import distributed_training as experiment

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


def boom_worker(rank, world_size):
    """Rank 1 raises; rank 0 waits in a collective, which then fails for want of its peer."""
    if rank == 1:
        raise ValueError("boom on rank 1")
    t = torch.ones(3)
    torch.distributed.all_reduce(t)
    return t


def dying_worker(rank, world_size):
    if rank == 0:
        os._exit(3)  # no exception, no report: the process is simply gone
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
    assert 1024 <= port <= 65535  # an unprivileged port chosen by the OS, not 0
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", port))  # raises OSError if the port were taken
        assert sock.getsockname() == ("127.0.0.1", port)


@pytest.mark.parametrize("eps", [0.0, -1e-5])
def test_training_with_non_positive_eps_raises_like_torch(eps):
    x = torch.randn(4, 3)
    x[:, 0] = 2.0  # a constant channel: eps = 0 would divide 0 by 0
    with pytest.raises(ValueError) as torch_error:
        F.batch_norm(x, None, None, training=True, eps=eps)
    with pytest.raises(ValueError, match="eps") as ours:
        D.sync_batch_norm(x, None, None, training=True, eps=eps)
    if eps == 0:  # the package's one validator words it exactly as torch
        assert str(ours.value) == str(torch_error.value)
    with pytest.raises(ValueError, match="eps"):
        D.SyncBatchNorm(3, eps=eps)(x)


def test_evaluation_with_zero_eps_is_allowed_like_torch():
    x = torch.randn(4, 3, dtype=torch.float64)
    rm, rv = torch.randn(3, dtype=torch.float64), torch.rand(3, dtype=torch.float64) + 0.5
    torch.testing.assert_close(D.sync_batch_norm(x, rm, rv, training=False, eps=0.0),
                               F.batch_norm(x, rm, rv, training=False, eps=0.0))


def test_cumulative_average_through_the_functional_form():
    torch.manual_seed(4)
    rm, rv = torch.zeros(3, dtype=torch.float64), torch.ones(3, dtype=torch.float64)
    batches = [torch.randn(6, 3, dtype=torch.float64) * (t + 1) for t in range(3)]
    for t, x in enumerate(batches, start=1):
        D.sync_batch_norm(x, rm, rv, momentum=None, num_batches_tracked=t)
    torch.testing.assert_close(rm, torch.stack([x.mean(0) for x in batches]).mean(0))
    torch.testing.assert_close(rv, torch.stack([x.var(0) for x in batches]).mean(0))
    with pytest.raises(ValueError, match="num_batches_tracked"):
        D.sync_batch_norm(batches[0], rm, rv, momentum=None)


def test_build_model_keeps_the_callers_random_state():
    torch.manual_seed(123)
    expected = torch.rand(4)
    torch.manual_seed(123)
    first = experiment.build_model("sync_bn", experiment.DEFAULT_CONFIG)
    torch.testing.assert_close(torch.rand(4), expected)  # the reader's stream is untouched
    torch.manual_seed(7)
    second = experiment.build_model("sync_bn", experiment.DEFAULT_CONFIG)
    for key, value in first.state_dict().items():  # and the weights depend on config only
        torch.testing.assert_close(second.state_dict()[key], value)


def test_public_names_and_module_sizes():
    import layernorm_tutorial.distributed as package

    for name in ("SyncBatchNormFunction", "SyncBatchNorm", "sync_batch_norm",
                 "count_communication", "run_on_ranks", "DistributedRunError"):
        assert name in package.__all__ and hasattr(package, name)
    folder = Path(package.__file__).parent
    sizes = {p.name: len(p.read_text().splitlines()) for p in folder.glob("*.py")}
    assert {"sync_batch_norm.py", "launcher.py", "communication.py"} <= set(sizes)
    assert max(sizes.values()) <= 400, sizes


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


def test_the_root_cause_comes_first_not_the_knock_on_gloo_error():
    # Rank 0's all_reduce fails with gloo's "Connection closed by peer" when rank 1 leaves;
    # whichever report arrives first, the message must lead with rank 1's ValueError.
    for _ in range(3):
        with pytest.raises(D.DistributedRunError) as info:
            D.run_on_ranks(boom_worker, 2, timeout=60, init_timeout=10)
        message = str(info.value)
        first_line = message.splitlines()[0]
        assert first_line == "rank 1 of boom_worker failed: ValueError: boom on rank 1", message
        assert 'raise ValueError("boom on rank 1")' in message  # rank 1's traceback
        assert "other ranks:\n  rank 0" in message
        assert multiprocessing.active_children() == []


def test_a_rank_that_dies_while_running_is_named():
    start = time.monotonic()
    with pytest.raises(D.DistributedRunError) as info:
        D.run_on_ranks(dying_worker, 2, timeout=60, init_timeout=10, failure_grace=0.5)
    assert str(info.value).startswith(
        "rank 0 of dying_worker died with exit code 3 while running it")
    assert "rank 1: still running" in str(info.value)
    assert time.monotonic() - start < 30  # not the 60 s timeout
    assert multiprocessing.active_children() == []


def test_a_script_without_main_guard_gets_a_hint(tmp_path):
    script = tmp_path / "no_guard.py"
    script.write_text(textwrap.dedent("""\
        from layernorm_tutorial import distributed
        from layernorm_tutorial.lab.ln_vs_bn import distributed_training

        try:
            distributed.run_on_ranks(distributed_training.data_parallel_experiment, 2, timeout=60)
        except distributed.DistributedRunError as err:
            print(err)
    """))
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                          timeout=120, cwd=tmp_path,
                          env={**os.environ, "OMP_NUM_THREADS": "1"})
    first_line = done.stdout.splitlines()[0]
    assert first_line.startswith("rank 0 of data_parallel_experiment died with exit code"), \
        done.stdout + done.stderr
    assert 'if __name__ == "__main__":' in done.stdout


def test_timeout_stops_every_process():
    with pytest.raises(D.DistributedRunError, match="did not finish within 3 s"):
        D.run_on_ranks(sleeping_worker, 2, timeout=3)
    assert multiprocessing.active_children() == []


def test_data_parallel_experiment_sync_bn_and_ln_match_full_batch_per_rank_bn_does_not():
    config = {"steps": 3}
    results = D.run_on_ranks(experiment.data_parallel_experiment, 2, (config,), timeout=60)
    for variant in experiment.VARIANTS:
        reference = experiment.full_batch_training(variant, config)["state_dict"]
        worst = max(float((r[variant]["state_dict"][k] - v).abs().max())
                    for r in results for k, v in reference.items() if v.is_floating_point())
        if variant == "per_rank_bn":
            assert worst > 1e-3
        else:
            assert worst < 1e-12
    per_step = results[0]["layer_norm"]["per_step"]
    assert list(per_step) == ["gradients (every variant)"]  # LN adds no collective
    assert len(results[0]["sync_bn"]["per_step"]) == 4
