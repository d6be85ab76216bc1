"""The performance model of the fused kernels (``roofline.kernel_model``) and the GPU
benchmark's bookkeeping (``bench.target_check``, ``bench.format_comparison``), on made-up
launches and rows where the right answer follows from the formulas, and on the stored
tables."""

import pytest
import torch

pytest.importorskip("layernorm_tutorial.triton_kernels",
                    reason="Triton is not installed (Linux x86-64/aarch64 only)",
                    exc_type=ImportError)  # (also: the interpreter first, see test_bench)

from layernorm_tutorial import bench, roofline  # noqa: E402
from layernorm_tutorial.triton_kernels import fused, resources  # noqa: E402


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


# ------------------------------------------------------------------------------------------
# The one-source kernels: RMSNorm and the fused residual add + norm
# ------------------------------------------------------------------------------------------
FUSED_TABLE = resources.STORED_TABLE.parent / "kernel_fused_resources.json"


def test_fused_ideal_bytes_agree_with_the_benchmark_and_count_8_against_10():
    for op in roofline.FUSED_OPS:
        for dtype, size in ((torch.float32, 4), (torch.bfloat16, 2)):
            for direction in ("fwd", "bwd"):
                assert roofline.fused_ideal_bytes(4096, 1000, size, direction, op) == \
                    bench.bytes_moved(4096, 1000, dtype, direction, op=op)
    m, n = 1 << 20, 1 << 16  # large: parameters and statistics vanish per element
    per_element = {fused_: roofline.fused_ideal_bytes(m, n, 2, "fwd", "add_rms_norm", fused_)
                   / (m * n) for fused_ in (True, False)}
    assert per_element[True] == pytest.approx(8, rel=1e-4)
    assert per_element[False] == pytest.approx(10, rel=1e-4)
    with pytest.raises(ValueError, match="only the add_"):
        roofline.fused_ideal_bytes(1, 1, 2, "fwd", "rms_norm", fused=False)
    with pytest.raises(ValueError, match="op"):
        roofline.fused_ideal_bytes(1, 1, 2, "fwd", "batch_norm")
    assert roofline.FUSED_FORWARD_PROGRAMS_PER_SM == fused.FUSED_FORWARD_PROGRAMS_PER_SM


def _fused_launch(**kw):
    base = dict(kernel="backward", block_n=1024, num_warps=8, rows=4, row_fits_block=True,
                num_stages=2, registers=64, shared_bytes=0, programs=132)
    base.update(kw)
    return roofline.FusedLaunch(**base)


def test_fused_model_pipelining_partials_and_chunks():
    m, n = 4096, 1024
    piped = roofline.fused_model(_fused_launch(), m, n, 2, "sm_90")
    # one program per SM, two stages of a 4-row tile of dy, s, ds (bf16)
    assert piped.active_per_sm == 1.0 and piped.duty == 1.0
    assert piped.in_flight_per_sm == 2 * 4 * 1024 * 2 * 3
    assert piped.dram_bytes == piped.ideal_bytes + 2 * 132 * n * 4  # one slab for RMSNorm
    single = roofline.fused_model(_fused_launch(num_stages=1), m, n, 2, "sm_90")
    assert single.duty == roofline.UNPIPELINED_DUTY
    assert single.predicted_fraction < piped.predicted_fraction
    ln = roofline.fused_model(_fused_launch(), m, n, 2, "sm_90", op="add_layer_norm")
    assert ln.dram_bytes - ln.ideal_bytes == 2 * (piped.dram_bytes - piped.ideal_bytes)
    more_partials = roofline.fused_model(_fused_launch(programs=264), m, n, 2, "sm_90")
    assert more_partials.dram_bytes > piped.dram_bytes
    chunks = roofline.fused_model(_fused_launch(kernel="forward", row_fits_block=False,
                                                block_n=4096, rows=1), m, 65536, 2, "sm_90")
    assert chunks.cache_bytes == m * 65536 * 2  # the normalize pass re-reads s
    resident = roofline.fused_model(_fused_launch(kernel="forward", block_n=65536, rows=1),
                                    m, 65536, 2, "sm_90")
    assert resident.cache_bytes == 0 and chunks.predicted_fraction < resident.predicted_fraction
    # chunked backward: the partial rows' read-modify-write once per tile of `rows` rows;
    # when the re-used rows and partials exceed L2 the model charges them to DRAM
    one, four = (roofline.fused_model(_fused_launch(row_fits_block=False, block_n=4096 // r,
                                                    rows=r), m, 16384, 2, "sm_90")
                 for r in (1, 4))
    assert one.cache_bytes - four.cache_bytes == 2 * m * 16384 * 4 * 3 // 4
    assert four.predicted_fraction > one.predicted_fraction
    assert four.working_set_bytes <= roofline.GPU_SPECS["sm_90"]["l2_bytes"]
    big = roofline.fused_model(_fused_launch(row_fits_block=False, block_n=2048, rows=1),
                               m, 65536, 4, "sm_90", op="add_layer_norm")
    assert big.working_set_bytes > roofline.GPU_SPECS["sm_90"]["l2_bytes"]
    assert big.cache_bytes == 0 and big.dram_bytes > big.ideal_bytes * 2
    assert piped.predicted_us == pytest.approx(
        piped.ideal_bytes / (piped.predicted_fraction * 3350e9) * 1e6)


@pytest.fixture(scope="module")
def fused_table():
    return resources.load_table(FUSED_TABLE)


def test_fused_table_has_no_spills_and_covers_every_launch(fused_table):
    rows = fused_table["rows"]
    bad = [(r["label"], r["target"], r["dtype"], resources.problems(r)) for r in rows
           if resources.problems(r)]
    assert not bad, bad[:5]
    have = {(r["kernel"], r["target"], r["dtype"], r["num_warps"],
             tuple(sorted(r["constants"].items()))) for r in rows}
    from layernorm_tutorial.triton_kernels import fused_aot

    want = {(j["kernel"], j["target"], j["dtype"], j["num_warps"],
             tuple(sorted(j["constants"].items()))) for j in fused_aot.jobs()}
    assert have == want, (f"missing {sorted(want - have)[:3]}, extra {sorted(have - want)[:3]}"
                          f": regenerate with {fused_table['command']} --force")
    for sm, limit in (("sm_80", 164 * 1024), ("sm_90", 228 * 1024)):
        assert max(r["shared_bytes"] for r in rows if r["target"] == sm) <= limit


def test_fused_predictions_per_n(fused_table):
    rows = roofline.fused_predictions(fused_table["rows"])
    by = {(r["op"], r["target"], r["n"], r["direction"]): r for r in rows}
    for target in ("sm_80", "sm_90"):
        for n in (1024, 4096, 16384, 32768, 65536):
            fwd = by[("add_rms_norm", target, n, "fwd")]
            assert fwd["bytes_per_element"] == pytest.approx(8, rel=0.01)
            assert fwd["unfused_bytes_per_element"] == pytest.approx(10, rel=0.01)
            assert fwd["speedup"] == pytest.approx(10 / 8, rel=0.01)
            assert 0 < fwd["predicted_fraction"] <= 1
            bwd = by[("add_rms_norm", target, n, "bwd")]
            assert bwd["programs"] <= roofline.GPU_SPECS[target]["multiprocessors"]
        assert by[("add_rms_norm", target, 65536, "fwd")]["path"] == "chunks"
        assert by[("add_rms_norm", target, 16384, "fwd")]["path"] == "resident"
        # the chunked backward at 64K: fewer programs than SMs, so that what they re-use
        # (rows re-read, partial rows) stays within L2
        long = by[("add_layer_norm", target, 65536, "bwd")]
        assert long["programs"] < roofline.GPU_SPECS[target]["multiprocessors"]
        assert long["working_set_mib"] * 2**20 <= roofline.GPU_SPECS[target]["l2_bytes"]
        assert long["l2_over_ideal"] > 0 and long["dram_over_ideal"] < 1.1
    text = roofline.format_fused_predictions(rows)
    assert "add_rms_norm" in text and "65536" in text


def test_stored_predictions_are_what_the_model_computes_today(fused_table):
    # book/data/kernel_fused_predictions.json was written before any GPU ran these kernels
    # (its date and commit say when); it must still be what the code computes from the table.
    stored = resources.load_table(FUSED_TABLE.parent / "kernel_fused_predictions.json")
    assert stored["rows"] == roofline.fused_predictions(fused_table["rows"]), (
        "stale: regenerate with " + stored["command"] + " --force")
    assert stored["assumptions"]["latency_ns"] == roofline.DEFAULT_LATENCY_NS


def test_predictions_cli_writes_once_and_refuses_to_overwrite(tmp_path, capsys):
    out = tmp_path / "predictions.json"
    roofline.main(["--table", str(FUSED_TABLE), "--out", str(out)])
    written = resources.load_table(out)
    assert written["rows"] == roofline.fused_predictions(resources.load_table(FUSED_TABLE)["rows"])
    with pytest.raises(SystemExit):
        roofline.main(["--table", str(FUSED_TABLE), "--out", str(out)])
    assert "--force" in capsys.readouterr().err
