"""The performance model of the fused kernels (``roofline.kernel_model``) and the GPU
benchmark's bookkeeping (``bench.target_check``, ``bench.format_comparison``), on made-up
launches and rows where the right answer follows from the formulas, and on the stored
tables."""

import pytest
import torch

import layernorm_tutorial.triton_kernels  # noqa: F401  (interpreter first, see test_bench)
from layernorm_tutorial import bench, roofline
from layernorm_tutorial.triton_kernels import resources


def test_ideal_bytes_agree_with_the_benchmark():
    for dtype, size in ((torch.float32, 4), (torch.bfloat16, 2)):
        for direction in ("fwd", "bwd"):
            assert roofline.ideal_bytes(4096, 1000, size, direction) == bench.bytes_moved(
                4096, 1000, dtype, direction)
    with pytest.raises(ValueError, match="direction"):
        roofline.ideal_bytes(1, 1, 2, "up")


def _launch(**kw):
    base = dict(kernel="backward", block_n=1024, num_warps=4, rows=1, split=1,
                row_fits_block=True, registers=64, shared_bytes=0, programs=132,
                partial_rows=132)
    base.update(kw)
    return roofline.Launch(**base)


def test_littles_law_and_the_fixed_backward_grid():
    # 64 registers x 4 warps: 8 programs fit, but a grid of 132 programs runs one per SM.
    one = roofline.kernel_model(_launch(), 4096, 1024, 2, "sm_90")
    assert one.resident_per_sm == 8 and one.active_per_sm == 1.0
    assert one.in_flight_per_sm == 1024 * 2 * 2  # one row of x and dy, bf16
    spec = roofline.GPU_SPECS["sm_90"]
    assert one.needed_per_sm == pytest.approx(
        spec["peak_gbps"] * roofline.DEFAULT_LATENCY_NS / spec["multiprocessors"])
    partials = 2 * 2 * 132 * 1024 * 4
    assert one.dram_bytes == one.ideal_bytes + partials
    assert one.predicted_fraction == pytest.approx(
        one.in_flight_per_sm / one.needed_per_sm * one.ideal_bytes / one.dram_bytes)
    four = roofline.kernel_model(_launch(rows=4, programs=264, partial_rows=264), 4096, 1024,
                                 2, "sm_90")
    assert four.active_per_sm == 2.0 and four.in_flight_per_sm == 8 * one.in_flight_per_sm
    assert four.predicted_fraction > one.predicted_fraction
    assert four.predicted_fraction <= 1.0


def test_cache_traffic_of_chunks_and_splits_lowers_the_prediction():
    resident = roofline.kernel_model(_launch(block_n=8192), 4096, 8192, 2, "sm_90")
    chunked = roofline.kernel_model(_launch(block_n=4096, row_fits_block=False), 4096, 8192,
                                    2, "sm_90")
    assert resident.cache_bytes == 0 and chunked.cache_bytes > 0
    assert chunked.predicted_fraction < resident.predicted_fraction
    forward = roofline.kernel_model(_launch(kernel="forward", programs=None, partial_rows=0),
                                    4096, 1024, 2, "sm_90")
    assert forward.dram_bytes == forward.ideal_bytes  # no partial sums in the forward


def test_stored_tables_model_the_redesign():
    data = resources.STORED_TABLE.parent
    new = resources.load_table()["rows"]
    before = resources.load_table(data / "kernel_resources_before.json")["rows"]
    liger = resources.load_table(data / "kernel_liger_resources.json")["rows"]
    for target in ("sm_80", "sm_90"):
        for n in (1024, 2048, 4096, 8192, 16384):
            old = roofline.kernel_model(roofline.before_launch("backward", n, 2, target, before),
                                        4096, n, 2, target)
            now = roofline.kernel_model(roofline.package_launch("backward", n, 2, target, new),
                                        4096, n, 2, target)
            assert now.in_flight_per_sm >= old.in_flight_per_sm
            if n <= 2048 or n == 16384:  # short rows: in flight; long rows: no chunks
                assert now.predicted_fraction > old.predicted_fraction
            # (A100, N = 4096: one old program already meets Little's law there, so the
            # second program's partial rows make the new prediction a little lower.)
            roofline.kernel_model(roofline.liger_launch("backward", n, target, liger), 4096,
                                  n, 2, target)
        short = roofline.before_launch("backward", 1024, 2, target, before)
        assert short.programs == roofline.GPU_SPECS[target]["multiprocessors"]


def _row(impl, direction, gbps):
    return dict(implementation=impl, shape="8x8", dtype="float32", direction=direction,
                gbps=gbps / 2, kernel_gbps=gbps)


def test_target_check_reads_the_kernel_column():
    rows = [_row("triton", "fwd", 90.0), _row("liger", "fwd", 95.0),
            _row("triton", "bwd", 80.0), _row("liger", "bwd", 50.0)]
    checks = {c["direction"]: c for c in bench.target_check(rows, 100.0)}
    assert checks["fwd"]["met"] and not checks["fwd"]["ahead"]
    assert checks["bwd"]["met"] and checks["bwd"]["ahead"]
    assert checks["bwd"]["ours"] == pytest.approx(0.8) and checks["bwd"]["peer"] == 0.5
    eager = {c["direction"]: c for c in bench.target_check(rows, 100.0, column="gbps")}
    assert not eager["fwd"]["met"] and not eager["bwd"]["met"]
    table = bench.format_comparison(rows, 100.0)
    assert "Liger" in table and "45 (45%) / 90 (90%)" in table
