"""The benchmark's bookkeeping on a tiny run: columns, ratios, bandwidth, CSV (no timing),
and its command line: bad arguments and output paths refused before any timing starts."""

import csv
import os
import subprocess
import sys
import time

import pytest
import torch
import torch.nn.functional as F

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


def test_roofs_follow_their_formulas(monkeypatch):
    # A real run first: the numbers are finite and within physical reason for a CPU.
    assert 1e-3 < bench.measure_matmul_gflops(n=64, reps=2) < 1e6
    assert 1e-3 < bench.measure_copy_gbps(nbytes=1 << 16, reps=2) < 1e5
    # Then the arithmetic, with the timer replaced by a known time per call.
    monkeypatch.setattr(bench, "_time_interleaved", lambda fns, reps, warmup=2:
                        {name: 0.5 for name in fns})
    assert bench.measure_matmul_gflops(n=100, reps=2) == pytest.approx(2 * 100**3 / 0.5 / 1e9)
    assert bench.measure_copy_gbps(nbytes=4096, reps=2) == pytest.approx(2 * 4096 / 0.5 / 1e9)


@pytest.mark.parametrize("impl", ["triton", "torch_native"])
def test_timed_callables_reuse_preallocated_outputs_and_compute_layer_norm(impl):
    # On CPU the Triton kernels run in the interpreter: this checks the callables the CUDA
    # benchmark times (their results and their buffers), not their speed.
    case = bench._Case(4, 16, torch.float32, "cpu")
    forward = case.forward(impl)
    first, second = forward(), forward()
    assert first[0].data_ptr() == second[0].data_ptr()  # written into the same buffers
    assert first[2].data_ptr() == second[2].data_ptr()
    torch.testing.assert_close(second[0], F.layer_norm(case.x, (16,), case.w, case.b))
    backward = case.backward(impl)
    dx_first, dx_second = backward()[0], backward()[0]
    assert dx_first.data_ptr() == dx_second.data_ptr()
    x = case.x.clone().requires_grad_(True)
    F.layer_norm(x, (16,), case.w, case.b).backward(case.dy)
    torch.testing.assert_close(dx_second, x.grad)


def test_triton_rows_are_timed_on_cpu_in_the_interpreter():
    rep = bench.run_benchmark(shapes=[(4, 16)], implementations=("triton", "torch_native"),
                              reps=1)
    assert {r["implementation"] for r in rep.rows} == {"triton", "torch_native"}
    assert all(r["median_ms"] > 0 for r in rep.rows)


# ---- the command line refuses bad input before timing anything ----------------------------


@pytest.fixture
def no_timing(monkeypatch):
    """Make any start of the benchmark fail the test: refusals must come first."""
    def started(*args, **kwargs):
        raise AssertionError("the benchmark started despite a bad argument")

    monkeypatch.setattr(bench, "run_benchmark", started)


def _refusal(capsys, argv) -> str:
    with pytest.raises(SystemExit) as exit_info:
        bench.main(argv)
    assert exit_info.value.code == 2  # argparse's usage error
    return capsys.readouterr().err.strip().splitlines()[-1]


def test_zero_threads_is_a_usage_error(no_timing, capsys):
    assert "--threads" in _refusal(capsys, ["--threads", "0"])


def test_cuda_without_cuda_is_a_usage_error(no_timing, capsys, monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert "--device cuda" in _refusal(capsys, ["--device", "cuda"])


def test_unwritable_csv_is_refused_before_timing(no_timing, capsys, tmp_path):
    blocker = tmp_path / "a_file"
    blocker.write_text("")
    target = blocker / "x.csv"  # its folder would be a file: cannot be created
    line = _refusal(capsys, ["--csv", str(target)])
    assert str(target) in line and "not a folder" in line


def test_existing_csv_needs_force(no_timing, capsys, tmp_path):
    existing = tmp_path / "results.csv"
    existing.write_text("keep me\n")
    assert "--force" in _refusal(capsys, ["--csv", str(existing)])
    assert existing.read_text() == "keep me\n"


def test_csv_is_written_where_the_message_says(monkeypatch, capsys, tmp_path):
    rows = [dict(implementation="torch_native", shape="8x32", dtype="float32", direction="fwd",
                 median_ms=1.0, gbps=2.0, ratio_to_native=1.0, frac_copy=0.5, device="cpu")]
    monkeypatch.setattr(bench, "run_benchmark", lambda **kw: bench.BenchReport(rows=rows))
    existing = tmp_path / "results.csv"
    existing.write_text("old\n")
    assert bench.main(["--csv", str(existing), "--force"]) == 0
    assert f"CSV written to {existing}" in capsys.readouterr().out
    assert existing.read_text().splitlines()[0] == ",".join(bench.COLUMNS)
    assert [p.name for p in tmp_path.iterdir()] == ["results.csv"]  # no temporary left


def test_command_line_fails_within_seconds_on_an_unwritable_csv(tmp_path):
    blocker = tmp_path / "a_file"
    blocker.write_text("")
    start = time.monotonic()
    done = subprocess.run([sys.executable, "-m", "layernorm_tutorial.bench", "--quick",
                           "--csv", str(blocker / "x.csv")], capture_output=True, text=True,
                          timeout=120, cwd=tmp_path, env={**os.environ, "OMP_NUM_THREADS": "1"})
    assert done.returncode == 2, done.stderr
    assert str(blocker / "x.csv") in done.stderr.strip().splitlines()[-1]
    assert "Traceback" not in done.stderr and done.stdout == ""
    assert time.monotonic() - start < 60  # the quick benchmark alone takes longer
