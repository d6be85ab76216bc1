"""The GPU-kernel chapter's helpers: the Triton cell guard, the stored H100 runs read with
their caveats, the LLM kernel's bytes and predictions, this machine's comparisons."""

from types import SimpleNamespace

import pytest
import torch

from layernorm_tutorial import bench
from layernorm_tutorial.lab.gpu_kernel import cpu_run, h100, llm, platform

try:  # the interpreter must be on before anything imports triton (see test_bench)
    import layernorm_tutorial.triton_kernels  # noqa: F401
    HAVE_TRITON = True
except ImportError:
    HAVE_TRITON = False


# ---- the guard ------------------------------------------------------------------------------


def test_marked_cells_print_one_reason_where_triton_is_missing():
    cell = ["# needs triton\n", "import triton\n"]
    (line,) = platform.transform(cell, "no module named 'triton'")
    printed = []
    exec(line, {"print": printed.append})  # noqa: S102 - the transformer's own output
    assert printed == [platform.skip_message("no module named 'triton'")]
    assert "Linux" in printed[0] and "no module named 'triton'" in printed[0]
    assert platform.transform(cell, None) == cell
    assert platform.transform(["x = 1\n"], "missing") == ["x = 1\n"]
    assert platform.transform([], "missing") == []


def test_the_guard_is_registered_once():
    shell = SimpleNamespace(input_transformers_cleanup=[len])
    for _ in range(2):
        reason = platform.skip_cells_without_triton(shell)
    assert len(shell.input_transformers_cleanup) == 2  # the existing hook and one guard
    guard = shell.input_transformers_cleanup[-1]
    assert guard(["# needs triton\n", "x\n"]) == (
        ["# needs triton\n", "x\n"] if reason is None else
        [f"print({platform.skip_message(reason)!r})\n"])
    assert (reason is None) == HAVE_TRITON


# ---- the stored H100 runs -------------------------------------------------------------------


@pytest.fixture(scope="module")
def runs():
    return h100.load_runs()


def test_the_tie_band_is_the_largest_move_of_unchanged_kernels(runs):
    first, second = runs
    moves = h100.run_to_run(first, second)
    assert len(moves) == 4 * 30  # four unchanged implementations, 30 cases each
    assert h100.tie_band(first, second) == max(abs(d) for d in moves)
    assert 0.0 < h100.tie_band(first, second) < 0.1
    assert h100.run_to_run(first, first) == [0.0] * 120


def test_no_l2_sized_or_above_copy_case_counts_as_met(runs):
    first, second = runs
    rows = h100.verdicts(second, h100.tie_band(first, second))
    assert len(rows) == 30
    band = h100.tie_band(first, second)
    for r in rows:
        ws = h100.working_set_bytes(r["shape"], r["dtype"], r["direction"])
        near = max(r["ours"], r["target"]) / min(r["ours"], r["target"]) - 1 <= band
        if ws <= h100.H100_L2_BYTES and r["ours"] >= r["target"]:
            assert r["outcome"] == "fits L2"
        elif r["ours"] > 1.0:
            assert r["outcome"] == "above copy"
        elif near:
            assert r["outcome"] == "within band"
        else:
            assert r["outcome"] == ("met" if r["ours"] >= r["target"] else "not met")
        if r["liger"] == "tie":
            assert abs(r["gap"]) <= band
    # an L2-sized case that misses its target is a miss (L2 only helps)
    assert any(r["outcome"] == "not met" and h100.working_set_bytes(
        r["shape"], r["dtype"], r["direction"]) <= h100.H100_L2_BYTES for r in rows)
    assert any(r["outcome"] == "within band" for r in rows)
    table = h100.format_verdicts(rows)
    assert max(len(line) for line in table.splitlines()) <= 80
    counts = h100.counts(rows)
    assert all(c["cases"] == 15 for c in counts.values())
    assert all(c["met"] + c["not met"] + c["within band"] + c["above copy"]
               + c["fits L2"] == 15 for c in counts.values())


def test_glue_values_are_the_counts(runs):
    first, second = runs
    rows = h100.verdicts(second, 0.05)
    glued = {}
    values = h100.glue_values(rows, 0.05, {"triton": (2.0, 117.0)},
                              lambda name, text, display: glued.__setitem__(name, text))
    assert glued == values and values["h100-tie-band"] == "5.0%"
    assert values["h100-gap-triton"] == "2 to 117"
    assert int(values["h100-fwd-met"]) == h100.counts(rows)["fwd"]["met"]


def test_launch_gaps_and_changed_cases(runs):
    first, second = runs
    lo, hi = h100.launch_gaps_us(second, "triton")
    assert 0 < lo < hi
    fwd, bwd = (h100.launch_gaps_us(second, "triton", d) for d in ("fwd", "bwd"))
    assert min(fwd[0], bwd[0]) == lo and max(fwd[1], bwd[1]) == hi
    assert h100.changed(first, first, 0.0) == []
    moved = h100.changed(first, second, h100.tie_band(first, second))
    assert all(abs(after / before - 1) > 0.04 for *_, before, after in moved)


# ---- the LLM kernel -------------------------------------------------------------------------


def test_bytes_table_and_predictions_follow_the_byte_counts():
    table = llm.bytes_table(torch.bfloat16)
    assert "add, then RMSNorm                10        12" in table
    assert "add + RMSNorm fused               8         8" in table
    fwd, bwd = llm.predict(4096, 4096, torch.bfloat16, 1000.0)
    assert fwd.fused_bytes == bench.bytes_moved(4096, 4096, torch.bfloat16, "fwd",
                                                op="add_rms_norm")
    assert fwd.speedup == pytest.approx(10 / 8, rel=1e-3)
    assert bwd.speedup == pytest.approx(12 / 8, rel=1e-3)
    assert fwd.fused_us == pytest.approx(fwd.fused_bytes / 1000.0 / 1e3)
    text = llm.format_predictions([fwd, bwd], 4096, 4096)
    assert max(len(line) for line in text.splitlines()) <= 80
    with pytest.raises(ValueError, match="gbps"):
        llm.predict(1, 1, torch.float32, 0.0)


def test_the_decoder_layer_adds_the_residual_then_normalizes():
    lines = llm.decoder_layer_lines().splitlines()
    add = lines.index("hidden_states = residual + hidden_states")
    assert "layernorm" in lines[add + 2]  # the sum becomes the residual, then is normalized


@pytest.mark.skipif(not HAVE_TRITON, reason="needs triton (Linux only)")
def test_kernel_checks_report_every_case():
    rows = llm.check_kernels(ns=(17,), dtypes=(torch.float32,), ops=("add_rms_norm",), m=2)
    (row,) = rows
    assert row["outputs"] == 5 and row["ok"] and row["torch_error"] < 1e-5
    assert row["tolerance"] == llm.CHAPTER_TOLERANCE[torch.float32] == 2e-5
    assert max(len(line) for line in llm.format_checks(rows).splitlines()) <= 80
    (strict,) = llm.check_kernels(ns=(17,), dtypes=(torch.float32,), ops=("add_rms_norm",),
                                  m=2, tolerance={torch.float32: 1e-12})
    assert not strict["ok"]  # the bound is the one applied


# ---- this machine's comparisons -------------------------------------------------------------


def test_comparisons_use_the_tie_rule():
    def row(impl, direction, runs_ms):
        return dict(op="layer_norm", implementation=impl, shape="s", dtype="float32",
                    direction=direction, runs_ms=runs_ms)
    rows = [row(i, d, t) for d in ("fwd", "bwd") for i, t in
            (("compiled", [1.0, 1.0, 1.0]), ("composite", [3.0, 3.1, 2.9]),
             ("torch", [1.01, 1.1, 0.95]))]
    out = cpu_run.comparisons(bench.BenchReport(rows=rows))
    words = {(r["a"], r["b"], r["direction"]): r["word"] for r in out}
    assert words[("compiled", "composite", "fwd")] == "faster"
    assert words[("compiled", "torch", "bwd")] == "tie"
    assert cpu_run.comparisons(bench.BenchReport(rows=rows[:1])) == []
    assert max(len(line) for line in cpu_run.format_comparisons(out).splitlines()) <= 80


@pytest.mark.skipif(not HAVE_TRITON, reason="needs triton (Linux only)")
def test_model_rows_put_before_after_and_liger_side_by_side():
    from layernorm_tutorial.triton_kernels import resources

    data = resources.STORED_TABLE.parent
    tables = {"after": resources.load_table()["rows"],
              "before": resources.load_table(data / "kernel_resources_before.json")["rows"],
              "Liger": resources.load_table(data / "kernel_liger_resources.json")["rows"]}
    rows = h100.model_rows("backward", "sm_90", tables, ns=(1024, 16384))
    assert [label for label, _ in rows] == ["before", "after", "Liger"] * 2
    assert [md.n for _, md in rows] == [1024] * 3 + [16384] * 3


def test_tuned_finds_exactly_one_configuration():
    tune = bench.load_stored("gpu_tune_h100.json")
    c = h100.tuned(tune, kernel="forward", n=16384, dtype="bf16", num_warps=4)
    assert c["graph_gbps"] > c["gbps"] > 0
    with pytest.raises(KeyError, match="match"):
        h100.tuned(tune, kernel="forward", n=16384)


def test_goals_and_roofline_points_skip_what_was_not_measured():
    rows = [dict(op="layer_norm", implementation=i, shape="s", dtype="float32",
                 direction=d, ms=ms, gbps=g, runs_ms=[ms] * 3)
            for i, d, ms, g in (("torch", "fwd", 1.0, 4.0), ("torch", "bwd", 1.0, 6.0),
                                ("compiled", "fwd", 0.5, 8.0))]
    report = bench.BenchReport(rows=rows)
    lines = cpu_run.goal_lines(report).splitlines()
    assert "compiled fwd at 2.00x torch's (goal 0.9x: met)" in lines[0]
    assert "compiled bwd not measured" in lines[1]
    points = cpu_run.roofline_points(report)
    assert [p[0] for p in points] == ["torch fwd", "torch bwd", "compiled fwd"]
    ai = bench.arithmetic_intensity(torch.float32, "fwd")
    assert points[2] == ("compiled fwd", ai, ai * 8.0)
    assert [r["direction"] for r in cpu_run.comparisons(report)] == ["fwd"]


def test_a_goal_within_the_spread_is_not_called_met_or_missed():
    assert cpu_run.goal_word(0.85, 0.9, 0.1) == "within the spread"
    assert cpu_run.goal_word(0.95, 0.9, 0.1) == "within the spread"
    assert cpu_run.goal_word(0.7, 0.9, 0.1) == "not met"
    assert cpu_run.goal_word(1.2, 0.9, 0.1) == "met"
    rows = [dict(op="layer_norm", implementation=i, shape="s", dtype="float32",
                 direction="fwd", ms=ms, spread=sp, gbps=1.0, runs_ms=[ms] * 3)
            for i, ms, sp in (("torch", 1.0, 0.05), ("compiled", 1.15, 0.3))]
    line = cpu_run.goal_lines(bench.BenchReport(rows=rows)).splitlines()[0]
    assert line.endswith("(goal 0.9x: within the spread)")


def test_prediction_ranges_split_resident_and_chunked_rows():
    def row(n, direction, path, fraction):
        return dict(op="add_rms_norm", target="sm_90", n=n, direction=direction,
                    path=path, predicted_fraction=fraction)
    rows = [row(1024, "fwd", "resident", 1.0), row(2048, "fwd", "resident", 1.0),
            row(4096, "fwd", "chunks", 0.891), row(1024, "bwd", "resident", 0.97),
            row(2048, "bwd", "chunks", 0.71), row(4096, "bwd", "chunks", 0.57),
            row(1024, "fwd", "resident", 0.5) | {"target": "sm_80"}]
    got = llm.prediction_ranges(rows)
    assert got == {"fwd-resident": "100%", "fwd-chunks": "89%", "fwd-chunks-from": "4096",
                   "bwd-resident": "97%", "bwd-chunks": "57% to 71%",
                   "bwd-chunks-from": "2048"}
    with pytest.raises(KeyError, match="rms_norm"):
        llm.prediction_ranges(rows, op="rms_norm")
    stored = bench.load_stored("kernel_fused_predictions.json")["rows"]
    assert set(llm.prediction_ranges(stored)) >= {"fwd-resident", "bwd-resident"}
