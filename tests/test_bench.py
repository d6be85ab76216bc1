"""The benchmark's bookkeeping on a tiny run: columns, ratios, bandwidth, CSV (no timing)."""

import csv

import pytest
import torch

# Imported at collection, before any test here runs torch.compile (which imports triton):
# without a GPU the kernels need Triton's interpreter switched on before triton's import.
import layernorm_tutorial.triton_kernels  # noqa: F401
from layernorm_tutorial import bench

FAST_IMPLS = ("numpy_ref", "composite", "torch_native")


@pytest.fixture(scope="module")
def report():
    return bench.run_benchmark(shapes=[(8, 32)], implementations=FAST_IMPLS, reps=3)


def test_bytes_moved_follows_the_formula():
    m, n = 4, 8
    assert bench.bytes_moved(m, n, torch.float16, "fwd") == m * n * 4 + n * 2 * 2 + 8 * m
    assert bench.bytes_moved(m, n, torch.float32, "bwd") == m * n * 12 + 3 * n * 4 + 8 * m
    with pytest.raises(ValueError, match="direction"):
        bench.bytes_moved(m, n, torch.float32, "sideways")


def test_arithmetic_intensity_halves_when_bytes_double():
    fp32 = bench.arithmetic_intensity(torch.float32, "fwd")
    assert fp32 == pytest.approx(bench.FLOPS_PER_ELEMENT["fwd"] / 8)
    assert bench.arithmetic_intensity(torch.bfloat16, "fwd") == pytest.approx(2 * fp32)


def test_rows_have_the_columns_and_consistent_ratios(report):
    assert len(report.rows) == len(FAST_IMPLS) * 2
    for row in report.rows:
        assert set(bench.COLUMNS) <= set(row)
        native = next(r for r in report.rows if r["implementation"] == "torch_native"
                      and r["direction"] == row["direction"])
        assert row["ratio_to_native"] == pytest.approx(native["median_ms"] / row["median_ms"])
        nbytes = bench.bytes_moved(8, 32, torch.float32, row["direction"])
        assert row["gbps"] == pytest.approx(nbytes / (row["median_ms"] * 1e-3) / 1e9)
        copy = report.copy_gbps[f"8x32 float32 {row['direction']}"]
        assert row["frac_copy"] == pytest.approx(row["gbps"] / copy)
    assert report.ratio("torch_native", "fwd") == pytest.approx(1.0)
    assert "CPU cores" in report.hardware


def test_table_and_csv(report, tmp_path):
    table = bench.format_table(report.rows)
    assert table.splitlines()[0].split()[:4] == ["implementation", "shape", "dtype", "dir"]
    assert all(impl in table for impl in FAST_IMPLS)
    path = bench.write_csv(report.rows, str(tmp_path / "sub" / "bench.csv"))
    with open(path) as f:
        rows = list(csv.DictReader(f))
    assert list(rows[0]) == list(bench.COLUMNS)
    assert len(rows) == len(report.rows)
    assert float(rows[0]["median_ms"]) == pytest.approx(report.rows[0]["median_ms"])


def test_a_failing_compile_is_reported_not_hidden(monkeypatch):
    def broken(*args, **kwargs):
        raise RuntimeError("no C++ compiler")

    monkeypatch.setattr(bench, "_compiled_composite", lambda: broken)
    rep = bench.run_benchmark(shapes=[(4, 16)], implementations=("compiled", "torch_native"),
                              reps=2)
    assert "no C++ compiler" in rep.errors["compiled"]
    assert {r["implementation"] for r in rep.rows} == {"torch_native"}


def test_command_line_insists_on_fifteen_repetitions():
    with pytest.raises(SystemExit):
        bench.main(["--reps", "3"])


def test_roofs_are_positive():
    assert bench.measure_matmul_gflops(n=64, reps=2) > 0
    assert bench.measure_copy_gbps(nbytes=1 << 16, reps=2) > 0


def test_triton_rows_use_the_kernels_with_preallocated_outputs():
    # On CPU the kernels run in the interpreter: this checks the callables the CUDA
    # benchmark times (not their speed).
    rep = bench.run_benchmark(shapes=[(4, 16)], implementations=("triton", "torch_native"),
                              reps=1)
    assert {r["implementation"] for r in rep.rows} == {"triton", "torch_native"}
    assert all(r["median_ms"] > 0 for r in rep.rows)
