"""The benchmark without timing assertions: the shape plan, the byte counts, the tie rule,
the float64 correctness check (it passes right kernels and fails wrong ones), what
``reps`` and ``runs`` mean (calls counted), the rows' arithmetic, and the command line
(bad arguments and output paths refused before any timing starts)."""

import csv
import json
import os
import subprocess
import sys
import time
from types import SimpleNamespace

import pytest
import torch

from layernorm_tutorial import bench

# Imported at collection, before any test here runs torch.compile (which imports triton):
# without a GPU the kernels need Triton's interpreter switched on before triton's import.
# Without triton (macOS, Windows) only the tests of the Triton kernels are skipped.
try:
    import layernorm_tutorial.triton_kernels  # noqa: F401
    HAVE_TRITON = True
except ImportError:
    HAVE_TRITON = False
needs_triton = pytest.mark.skipif(not HAVE_TRITON, reason="needs triton (Linux only)")

FAST_IMPLS = ("numpy_ref", "composite", "torch")
MiB = 2**20


@pytest.fixture(scope="module")
def report():
    return bench.run_benchmark(shapes=[(8, 32)], implementations=FAST_IMPLS, reps=2, runs=3,
                               check_shapes={32: 4})


# ---- byte counts and the shape plan ---------------------------------------------------------


def test_bytes_moved_follows_the_formula():
    m, n = 4, 8
    assert bench.bytes_moved(m, n, torch.float16, "fwd") == m * n * 4 + n * 2 * 2 + 8 * m
    assert bench.bytes_moved(m, n, torch.float32, "bwd") == m * n * 12 + 3 * n * 4 + 8 * m
    assert bench.bytes_moved(m, n, torch.bfloat16, "fwd", op="rms_norm") == \
        m * n * 4 + n * 2 + 4 * m
    assert bench.bytes_moved(m, n, torch.bfloat16, "fwd", op="add_rms_norm") == \
        m * n * 8 + n * 2 + 4 * m
    assert bench.bytes_moved(m, n, torch.bfloat16, "bwd", op="add_layer_norm") == \
        m * n * 8 + 3 * n * 2 + 8 * m
    with pytest.raises(ValueError, match="direction"):
        bench.bytes_moved(m, n, torch.float32, "sideways")
    with pytest.raises(ValueError, match="op"):
        bench.bytes_moved(m, n, torch.float32, "fwd", op="batch_norm")


def test_the_fused_add_saves_two_of_ten_bytes_in_bfloat16():
    bf16 = torch.bfloat16
    assert bench.bytes_per_element("add_rms_norm", bf16, "fwd", fused=False) == 10
    assert bench.bytes_per_element("add_rms_norm", bf16, "fwd") == 8
    assert bench.bytes_per_element("add_rms_norm", bf16, "bwd", fused=False) == 12
    assert bench.bytes_per_element("add_rms_norm", bf16, "bwd") == 8
    assert bench.bytes_per_element("rms_norm", bf16) == 4
    with pytest.raises(ValueError, match="unfused"):
        bench.bytes_per_element("rms_norm", bf16, fused=False)


def test_arithmetic_intensity_halves_when_bytes_double():
    fp32 = bench.arithmetic_intensity(torch.float32, "fwd")
    assert fp32 == pytest.approx(bench.FLOPS_PER_ELEMENT["fwd"] / 8)
    assert bench.arithmetic_intensity(torch.bfloat16, "fwd") == pytest.approx(2 * fp32)


@pytest.mark.parametrize("dtype", bench.GPU_DTYPES)
def test_shape_plan_puts_at_least_256_mib_in_every_tensor_with_the_fewest_rows(dtype):
    plan = bench.shape_plan(dtype)
    size = torch.empty((), dtype=dtype).element_size()
    assert [n for _, n in plan] == [1024 * 2**k for k in range(7)]  # 1K ... 64K
    for m, n in plan:
        assert m * n * size >= 256 * MiB > (m - 1) * n * size
    assert bench.shape_plan(torch.float32, [1000], min_bytes=4001) == [(2, 1000)]
    with pytest.raises(ValueError, match="min_bytes"):
        bench.shape_plan(dtype, min_bytes=0)


# ---- the tie rule ---------------------------------------------------------------------------


def test_the_check_runs_on_the_timed_shape_or_a_slice_of_its_rows():
    assert bench._check_rows(2048, 2048) == 2048
    assert bench._check_rows(131072, 1024) == 4096
    assert bench._check_rows(2048, 65536) == 64
    assert bench._check_rows(4, 2**23) == 1


def test_summarize_runs_gives_median_and_relative_range():
    assert bench.summarize_runs([1.0, 1.1, 0.9]) == (1.0, pytest.approx(0.2))
    with pytest.raises(ValueError, match="seconds"):
        bench.summarize_runs([])


def test_a_gap_under_the_spread_is_a_tie():
    noisy, fast = [1.0, 1.2, 0.9], [0.95, 0.95, 0.95]  # spread 30%; gap 5%
    assert bench.compare(fast, noisy)["word"] == "tie"
    steady_fast, steady_slow = [1.0, 1.01, 0.99], [1.5, 1.5, 1.51]  # spread 2%; gap 50%
    verdict = bench.compare(steady_fast, steady_slow)
    assert verdict["word"] == "faster" and verdict["gap"] == pytest.approx(0.5)
    assert bench.compare(steady_slow, steady_fast)["word"] == "slower"
    assert bench.compare([1.0] * 3, [1.02] * 3)["word"] == "faster"  # no spread: any gap
    assert bench.compare([1.0] * 3, [1.02] * 3, floor=0.03)["word"] == "tie"


# ---- the correctness check ------------------------------------------------------------------


@pytest.mark.parametrize("op", bench.OPS)
@pytest.mark.parametrize("impl", ["torch", "composite",
                                  pytest.param("triton", marks=needs_triton)])
def test_right_implementations_pass_the_float64_check(op, impl):
    errors = bench.check_outputs(bench.implementation(impl, op), op, 5, 33, torch.float32)
    expected = {"y", "dx", "dgamma"} | ({"s", "dr"} if op.startswith("add_") else set())
    expected |= {"dbeta"} if op.endswith("layer_norm") else set()
    assert set(errors) == expected
    assert max(errors.values()) <= bench.TOLERANCE[torch.float32]


def test_sixteen_bit_outputs_are_checked_at_the_dtypes_tolerance():
    for dtype in (torch.float16, torch.bfloat16):
        errors = bench.check_outputs(bench.implementation("torch", "add_rms_norm"),
                                     "add_rms_norm", 4, 40, dtype)
        assert 0 < max(errors.values()) <= bench.TOLERANCE[dtype]


def _wrong_dgamma(x, r, w, b):  # LayerNorm whose gamma gets no gradient
    return torch.nn.functional.layer_norm(x, (x.shape[-1],), w.detach(), b, bench.EPS)


def _wrong_sum(x, r, w, b):  # add + RMSNorm that returns x instead of x + r
    return torch.nn.functional.rms_norm(x + r, (x.shape[-1],), w, bench.EPS), x


def _wrong_eps(x, r, w, b):  # eps added outside the square root
    xc = x - x.mean(-1, keepdim=True)
    return xc / (xc.pow(2).mean(-1, keepdim=True).sqrt() + 1e-2) * w + b


@pytest.mark.parametrize("fn, op, output", [(_wrong_dgamma, "layer_norm", "dgamma"),
                                            (_wrong_sum, "add_rms_norm", "s"),
                                            (_wrong_eps, "layer_norm", "y")])
def test_wrong_implementations_fail_the_check(fn, op, output):
    errors = bench.check_outputs(fn, op, 4, 16, torch.float32)
    assert errors[output] > 10 * bench.TOLERANCE[torch.float32]


def test_an_output_of_the_wrong_dtype_is_refused():
    def upcast(x, r, w, b):
        return torch.nn.functional.layer_norm(x.double(), (x.shape[-1],), w.double(),
                                              b.double())
    with pytest.raises(TypeError, match="y: expected torch.float32"):
        bench.check_outputs(upcast, "layer_norm", 2, 8, torch.float32)


def test_a_failed_check_is_stored_and_marks_the_timing_row(monkeypatch):
    real = bench.implementation
    monkeypatch.setattr(bench, "implementation", lambda impl, op: _wrong_dgamma
                        if impl == "composite" else real(impl, op))
    rep = bench.run_benchmark(shapes=[(4, 16)], implementations=("composite", "torch"),
                              reps=1, check_shapes={16: 4})
    bad = [c for c in rep.checks if not c["ok"]]
    assert [(c["implementation"], c["output"]) for c in bad] == [("composite", "dgamma")]
    assert {r["implementation"]: r["check"] for r in rep.rows if r["direction"] == "fwd"} == \
        {"copy": "-", "composite": "FAIL", "torch": "ok"}


# ---- what reps and runs mean ----------------------------------------------------------------


def test_reps_and_runs_count_the_calls():
    calls = {"a": 0, "b": 0}

    def counter(name):
        def fn():
            calls[name] += 1
        return fn

    runs = bench._time_wall({"a": counter("a"), "b": counter("b")}, reps=7, runs=4, warmup=1)
    assert calls == {"a": 1 + 4 * 7, "b": 1 + 4 * 7}
    assert len(runs["a"]) == 4 and all(t >= 0 for t in runs["a"])


def test_run_benchmark_calls_each_forward_reps_times_per_run(monkeypatch):
    count = {"n": 0}
    real = bench.implementation

    def counted(impl, op):
        fn = real(impl, op)

        def wrapper(*args):
            count["n"] += 1
            return fn(*args)
        return wrapper if impl == "composite" else fn

    monkeypatch.setattr(bench, "implementation", counted)
    rep = bench.run_benchmark(shapes=[(4, 16)], implementations=("composite", "torch"),
                              reps=6, runs=3, check=False)
    # forward: one first call, one warm-up, 3 runs x 6 reps; backward: one graph build
    assert count["n"] == 1 + 1 + 3 * 6 + 1
    row = rep.row("composite", "fwd")
    assert len(row["runs_ms"]) == 3 and row["check"] == "-"


def test_fewer_than_three_runs_or_no_reps_are_refused():
    with pytest.raises(ValueError, match="runs"):
        bench.run_benchmark(shapes=[(2, 8)], runs=2)
    with pytest.raises(ValueError, match="reps"):
        bench.run_benchmark(shapes=[(2, 8)], reps=0)
    with pytest.raises(ValueError, match="op"):
        bench.run_benchmark(shapes=[(2, 8)], ops=["group_norm"])


# ---- the rows -------------------------------------------------------------------------------


def test_rows_have_the_columns_and_consistent_arithmetic(report):
    assert {r["implementation"] for r in report.rows} == {"copy", *FAST_IMPLS}
    for row in report.rows:
        assert set(bench.COLUMNS) <= set(row)
        assert row["timing"] == "wall" and len(row["runs_ms"]) == 3
        ms, spread = bench.summarize_runs(row["runs_ms"])
        assert row["ms"] == pytest.approx(ms) and row["spread"] == pytest.approx(spread)
        copy = report.row("copy", row["direction"])
        if row["implementation"] != "copy":
            nbytes = bench.bytes_moved(8, 32, torch.float32, row["direction"])
            assert row["gbps"] == pytest.approx(nbytes / (row["ms"] * 1e-3) / 1e9)
        assert row["frac_copy"] == pytest.approx(row["gbps"] / copy["gbps"])
    assert report.row("torch", "bwd")["check"] == "ok"
    assert report.row("numpy_ref", "fwd")["check"] == "-"  # not a torch callable: unchecked
    assert {c["implementation"] for c in report.checks} == {"composite", "torch"}
    assert report.compare("torch", "composite", "fwd")["word"] in ("faster", "slower", "tie")
    assert "CPU cores" in report.hardware and "torch" in report.software


def test_table_fits_80_columns_and_csv_and_json_round_trip(report, tmp_path):
    table = bench.format_table(report.rows)
    assert table.splitlines()[0].split()[:4] == ["impl", "shape", "dtype", "dir"]
    assert table.splitlines()[1] == "layer_norm:"   # each op named in full above its rows
    assert max(len(line) for line in table.splitlines()) <= 80
    assert max(len(line) for line in bench.format_checks(report.checks).splitlines()) <= 80
    path = bench.write_csv(report.rows, str(tmp_path / "sub" / "bench.csv"))
    with open(path) as f:
        rows = list(csv.DictReader(f))
    assert list(rows[0]) == list(bench.COLUMNS) and len(rows) == len(report.rows)
    doc = json.loads(bench.report_json(report, "cmd"))
    assert doc["command"] == "cmd" and len(doc["checks"]) == len(report.checks)
    assert doc["rows"][0]["runs_ms"] == report.rows[0]["runs_ms"]


def test_a_failing_compile_is_reported_not_hidden(monkeypatch):
    real = bench.implementation

    def broken(impl, op):
        if impl == "compiled":
            raise RuntimeError("no C++ compiler")
        return real(impl, op)

    monkeypatch.setattr(bench, "implementation", broken)
    rep = bench.run_benchmark(shapes=[(4, 16)], implementations=("compiled", "torch"),
                              reps=1, check=False)
    assert "no C++ compiler" in rep.errors["compiled layer_norm"]
    assert {r["implementation"] for r in rep.rows} == {"copy", "torch"}


def test_liger_has_no_fused_add_layer_norm():
    with pytest.raises(NotImplementedError, match="Liger"):
        bench.implementation("liger", "add_layer_norm")
    with pytest.raises(NotImplementedError, match="LayerNorm only"):
        bench.implementation("triton_pipelined", "rms_norm")


@needs_triton
def test_the_pipelined_layer_norm_passes_the_check():
    fn = bench.implementation("triton_pipelined", "layer_norm")
    errors = bench.check_outputs(fn, "layer_norm", 5, 1000, torch.float32)
    assert max(errors.values()) <= bench.TOLERANCE[torch.float32]


def test_the_kernel_sum_leaves_out_the_flush_and_host_events():
    from torch.autograd import DeviceType

    def event(name, us, device=DeviceType.CUDA):
        return SimpleNamespace(name=name, device_type=device,
                               time_range=SimpleNamespace(elapsed_us=lambda: us))
    prof = SimpleNamespace(events=lambda: [
        event("void at::native::vectorized_elementwise_kernel<bitwise_not_kernel>", 100.0),
        event("layer_norm_fwd_kernel", 7.0), event("sum_partials_kernel", 2.0),
        event("aten::layer_norm", 50.0, DeviceType.CPU)])
    assert bench._kernel_us(prof) == 9.0


def test_roofs_follow_their_formulas(monkeypatch):
    assert 1e-3 < bench.measure_matmul_gflops(n=64, reps=1) < 1e6
    assert 1e-3 < bench.measure_copy_gbps(nbytes=1 << 16, reps=1) < 1e5
    monkeypatch.setattr(bench, "_time_wall", lambda fns, reps, runs, warmup=1:
                        {name: [0.5, 0.4, 0.6] for name in fns})
    assert bench.measure_matmul_gflops(n=100) == pytest.approx(2 * 100**3 / 0.5 / 1e9)
    assert bench.measure_copy_gbps(nbytes=4096) == pytest.approx(2 * 4096 / 0.5 / 1e9)


def test_the_tie_rule_does_not_depend_on_the_order():
    fast, slow = [1.0, 1.0, 1.0], [3.1, 2.0, 4.0]  # spread of slow: 2.0 / 3.1 = 65%
    # b / a - 1 = -68% would fit under the 65% band one way round and not the other
    assert bench.compare(slow, fast)["word"] == "slower"
    assert bench.compare(fast, slow)["word"] == "faster"
    edge = [1.0, 1.3, 1.0]  # spread 30%, median 1.0
    assert bench.compare(edge, [1.25] * 3)["word"] == "tie"
    assert bench.compare([1.25] * 3, edge)["word"] == "tie"


def test_target_check_tie_is_symmetric():
    def rows(ours, peer):
        return [dict(implementation="triton", shape="s", dtype="d", direction="bwd",
                     kernel_gbps=ours),
                dict(implementation="liger", shape="s", dtype="d", direction="bwd",
                     kernel_gbps=peer)]
    (behind,) = bench.target_check(rows(100.0, 104.5), 100.0, tie=0.044)
    (ahead,) = bench.target_check(rows(104.5, 100.0), 100.0, tie=0.044)
    assert not behind["tie"] and not ahead["tie"] and ahead["ahead"]
    assert not behind["ahead"]


def test_stored_target_check_reports_ties():
    rows = [dict(implementation="triton", shape="s", dtype="d", direction="fwd",
                 kernel_gbps=102.0),
            dict(implementation="liger", shape="s", dtype="d", direction="fwd",
                 kernel_gbps=100.0)]
    (c,) = bench.target_check(rows, 100.0, tie=0.03)
    assert c["tie"] and not c["ahead"] and c["gap"] == pytest.approx(0.02)
    (c,) = bench.target_check(rows, 100.0)
    assert c["ahead"] and not c["tie"]


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


@pytest.mark.parametrize("argv, word", [
    (["--runs", "2"], "--runs"), (["--threads", "0"], "--threads"),
    (["--reps", "0"], "--reps"), (["--ops", "layer_norm,group_norm"], "--ops"),
    (["--dtypes", "fp8"], "--dtypes"), (["--ns", "1024,x"], "--ns"),
    (["--device", "cpu", "--ns", "1024"], "--ns"), (["--json", "x.json", "--no-check"],
                                                    "--json")])
def test_bad_arguments_are_usage_errors(no_timing, capsys, argv, word):
    assert word in _refusal(capsys, argv)


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


def test_arguments_reach_the_benchmark(monkeypatch, capsys, tmp_path):
    seen = {}

    def fake(**kw):
        seen.update(kw)
        return bench.BenchReport()
    monkeypatch.setattr(bench, "run_benchmark", fake)
    assert bench.main(["--reps", "9", "--runs", "4", "--ops", "rms_norm,add_rms_norm",
                       "--csv", str(tmp_path / "r.csv")]) == 0
    assert seen["reps"] == 9 and seen["runs"] == 4 and seen["check"]
    assert seen["ops"] == ["rms_norm", "add_rms_norm"]
    assert "4 runs of 9 calls" in capsys.readouterr().out


def test_csv_is_written_where_the_message_says(monkeypatch, capsys, tmp_path):
    rows = [dict(op="layer_norm", implementation="torch", shape="8x32", dtype="float32",
                 direction="fwd", ms=1.0, spread=0.1, gbps=2.0, frac_copy=0.5, check="ok",
                 timing="wall", runs_ms=[1.0, 1.1, 0.9], device="cpu")]
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


def test_the_compiled_backward_can_be_timed_again_and_again():
    # autograd.grad(..., retain_graph=True) per call: a compiled backward that donates its
    # buffers would refuse the second call (the benchmark switches donation off).
    rep = bench.run_benchmark(shapes=[(4, 16)], implementations=("compiled", "torch"),
                              reps=2, check_shapes={16: 4})
    assert rep.errors == {}
    assert rep.row("compiled", "bwd")["check"] == "ok"


def test_the_backward_callable_can_rebuild_its_forward():
    # On CUDA the graph timing rebuilds the forward on the capture stream; same gradients.
    case = bench._Case("add_rms_norm", 4, 16, torch.float32, "cpu")
    backward = case.backward(bench.implementation("torch", "add_rms_norm"))
    first, old = backward(), backward.outs[0]
    assert len(first) == 3  # dx, dr, dgamma
    backward.rebuild()
    assert backward.outs[0] is not old
    for a, b in zip(first, backward(), strict=True):
        torch.testing.assert_close(a, b)
