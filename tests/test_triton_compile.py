"""The Triton kernels compiled for real GPUs (sm_80, sm_90) on this CPU-only machine.

``aot.compile_in_subprocess`` compiles in a fresh process in which the kernels are defined
for Triton's compiler (this process runs them in the interpreter). One subprocess compiles
the fresh grid below; Triton's cache lives in a directory shared by this session's tests.

Two checks:

- a fresh compile of every distinct code path the launchers can pick (each warp count at its
  smallest and largest block, both row paths, the largest blocks in every dtype and target,
  every weight/bias variant at the largest row block, the column reduction everywhere) must
  compile, spill nothing, and fit the register file;
- the stored table of the full grid (``book/data/kernel_resources.json``, which the chapter
  prints) must cover exactly the configurations ``ops`` can choose today, pass the same
  checks, and agree with the fresh compile wherever both have a row.
"""

from __future__ import annotations

import time
from importlib.metadata import version
from pathlib import Path

import pytest

pytest.importorskip("layernorm_tutorial.triton_kernels",
                    reason="Triton is not installed (Linux x86-64/aarch64 only)",
                    exc_type=ImportError)

from layernorm_tutorial.triton_kernels import aot, ops, resources  # noqa: E402

STORED = Path(__file__).resolve().parents[1] / "book" / "data" / "kernel_resources.json"
MEASURED = ("registers", "shared_bytes", "static_shared_bytes", "local_bytes", "stack_bytes",
            "spill_store_bytes", "spill_load_bytes", "ptx")


def _fresh_jobs():
    """Every distinct code path, kept small enough for a CPU test run."""
    jobs = []
    for kernel in ("forward", "backward"):
        for dtype in aot.DTYPES:
            configs = aot.launch_configs(kernel, dtype)
            full = [c for c in configs if c.has_weight and c.has_bias
                    and (kernel == "forward" or c.compute_dw)]
            if dtype == "bf16":
                # sm_90: the largest block of every (warps, rows, split, path), and the first
                # aligned block
                last = {}
                for c in full:
                    last[(c.num_warps, c.rows, c.split, c.row_fits_block)] = c
                jobs += [(kernel, "sm_90", dtype, c) for c in full
                         if c in last.values() or c.block_n == 16]
            # the largest resident block (most registers per thread) and the chunked path,
            # on every target
            largest = max(c.block_n for c in full if c.row_fits_block)
            jobs += [(kernel, t, dtype, c) for c in full
                     if (c.block_n == largest and c.row_fits_block) or not c.row_fits_block
                     for t in aot.TARGETS if (t, dtype) != ("sm_90", "bf16")]
        # every weight/bias variant on the largest row-resident float32 block
        configs = aot.launch_configs(kernel, "fp32")
        largest = max(c.block_n for c in configs if c.row_fits_block)
        jobs += [(kernel, "sm_90", "fp32", c) for c in configs
                 if c.block_n == largest and c.row_fits_block
                 and not (c.has_weight and c.has_bias and (kernel == "forward" or c.compute_dw))]
    reduce = aot.launch_configs("reduce")
    jobs += [("reduce", "sm_90", "bf16", c) for c in reduce]
    jobs += [("reduce", t, d, reduce[0]) for t in aot.TARGETS for d in aot.DTYPES
             if (t, d) != ("sm_90", "bf16")]
    return list(dict.fromkeys(jobs))


# A configuration ops no longer launches because it spills (the backward with a 16384-lane
# row block): compiled alongside, so that the spill check is shown to be able to fail.
NEGATIVE_CONTROL = ("backward", "sm_90", "fp32",
                    aot.Config("backward", 16384, 16, True, True, True, True))


@pytest.fixture(scope="session")
def compiled(tmp_path_factory):
    jobs = [*_fresh_jobs(), NEGATIVE_CONTROL]
    start = time.perf_counter()
    rows = aot.compile_in_subprocess(jobs, cache_dir=tmp_path_factory.mktemp("triton_cache"))
    print(f"compiled {len(rows)} kernel configurations in {time.perf_counter() - start:.1f} s")
    return rows


@pytest.fixture(scope="session")
def fresh(compiled):
    return compiled[:-1]


@pytest.fixture(scope="session")
def stored():
    return resources.load_table(STORED)


def test_launch_configs_follow_ops_heuristics():
    for dtype, size in (("fp32", 4), ("bf16", 2)):
        triples = aot.launch_triples("forward", dtype)
        for n in (1, 17, 1000, 4099, ops.MAX_BLOCK_N, ops.MAX_BLOCK_N + 1, 10 ** 6):
            assert ops.launch_config(n, ops.MAX_BLOCK_N, "forward", size) in triples
        assert {fits for *_, fits in triples} == {True, False}
        backward = aot.launch_triples("backward", dtype)
        for n in (1, 1000, 8192, 8193, 16384, 16385, 10 ** 6):
            assert ops.launch_config(n, ops.MAX_BLOCK_N_BACKWARD, "backward", size) in backward
        resident = max(b for b, _, _, _, fits in backward if fits)
        assert resident * size == ops.BACKWARD_RESIDENT_BYTES
        assert {fits for *_, fits in backward} == {True, False}
        assert all(w <= ops.MAX_WARPS_BACKWARD for _, w, _, _, fits in backward if fits)
    assert {split for *_, split, _ in aot.launch_triples("backward", "bf16")} == {1, 2}
    flags = {(c.has_weight, c.compute_dw, c.has_bias) for c in aot.launch_configs("backward")}
    assert len(flags) == 6 and (False, True, True) not in flags  # no dgamma without gamma
    reduce_flags = {(c.compute_dw, c.has_bias) for c in aot.launch_configs("reduce")}
    assert reduce_flags == {(True, True), (True, False), (False, True)}


def test_every_fresh_configuration_compiles_without_spills(fresh):
    assert len(fresh) == len(_fresh_jobs())
    bad = {aot.Config(**{k: r[k] for k in aot.Config.__dataclass_fields__}).label()
           + f" {r['target']} {r['dtype']}": resources.problems(r) for r in fresh}
    bad = {k: v for k, v in bad.items() if v}
    assert not bad, bad


def test_aligned_rows_load_with_vector_instructions(fresh):
    # an aligned row of 16 lanes or more per thread group: every global load of x is 16 bytes
    for r in fresh:
        if r["kernel"] == "forward" and r["block_n"] >= 1024:
            assert r["ptx"]["ld_global_v4"] > 0, r
            assert r["ptx"]["local"] == 0


def test_stored_table_covers_exactly_what_ops_can_launch(stored):
    assert stored["versions"]["triton"] == version("triton"), (
        "the stored table was compiled by another triton: regenerate it with "
        + stored["command"])
    expected = {resources.row_key(dict(target=t, dtype=d, **c.__dict__))
                for _, t, d, c in aot.full_grid()}
    have = [resources.row_key(r) for r in stored["rows"]]
    assert len(have) == len(set(have))
    assert set(have) == expected, (
        f"missing {sorted(expected - set(have))[:5]}, extra {sorted(set(have) - expected)[:5]}"
        f": regenerate with {stored['command']} --force")


def test_stored_table_has_no_spills_and_fits_the_register_file(stored):
    bad = [(resources.row_key(r), resources.problems(r)) for r in stored["rows"]
           if resources.problems(r)]
    assert not bad, bad[:5]


def test_stored_table_agrees_with_a_fresh_compile(stored, fresh):
    table = {resources.row_key(r): r for r in stored["rows"]}
    for r in fresh:
        old = table[resources.row_key(r)]
        assert {k: old[k] for k in MEASURED} == {k: r[k] for k in MEASURED}, r


def test_the_spilling_configuration_is_caught(compiled):
    row = compiled[-1]
    assert (row["kernel"], row["block_n"], row["row_fits_block"]) == ("backward", 16384, True)
    assert any("spills" in p for p in resources.problems(row)), row
    assert row["spill_store_bytes"] > 0 and row["local_bytes"] == 0  # LOCAL alone misses it


def test_occupancy_limits():
    # 64 registers x 32 lanes = 2048 per warp; 16 warps -> 32768: two programs fit.
    occ = resources.occupancy(64, 16, 0, "sm_90")
    assert occ == dict(programs=2, warps=32, limit="registers", occupancy=0.5)
    assert resources.occupancy(32, 1, 0, "sm_90")["limit"] == "blocks"
    assert resources.occupancy(16, 4, 100_000, "sm_80")["limit"] == "shared memory"
    assert resources.occupancy(128, 16, 0, "sm_90")["programs"] == 1


def test_compiling_in_the_interpreter_process_is_refused():
    with pytest.raises(RuntimeError, match="compile_in_subprocess"):
        aot.compile_report("reduce", "sm_90", "fp32", aot.launch_configs("reduce")[0])


def test_stored_table_is_found_from_any_working_directory(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert resources.STORED_TABLE == STORED
    assert resources.load_table() == resources.load_table(STORED)


def _run_aot_cli(*args):
    import subprocess
    import sys

    start = time.perf_counter()
    result = subprocess.run([sys.executable, "-m", "layernorm_tutorial.triton_kernels.aot",
                             *args], capture_output=True, text=True, timeout=120)
    return result, time.perf_counter() - start


@pytest.mark.parametrize("case", ["folder with --force", "unwritable", "existing file"])
def test_aot_cli_checks_the_output_path_before_compiling(tmp_path, case):
    # Issue 24 item 6: a bad --out used to fail only after minutes of compilation.
    if case == "folder with --force":
        args, expected = ["--out", str(tmp_path), "--force"], "is a folder"
    elif case == "unwritable":
        locked = tmp_path / "locked"
        locked.mkdir(mode=0o500)
        target = locked / "table.json"
        import os
        if os.access(locked, os.W_OK):  # root can write anywhere: use a path under a file
            (tmp_path / "file").write_text("")
            target = tmp_path / "file" / "table.json"
        args, expected = ["--out", str(target)], "--out"
    else:
        (tmp_path / "t.json").write_text("{}")
        args, expected = ["--out", str(tmp_path / "t.json")], "pass --force"
    result, seconds = _run_aot_cli(*args)
    assert result.returncode == 2
    last = result.stderr.strip().splitlines()[-1]  # argparse: usage, then one error line
    assert last.startswith("python -m layernorm_tutorial.triton_kernels.aot: error: --out")
    assert expected in last and "Traceback" not in result.stderr
    assert seconds < 30, f"took {seconds:.0f} s: the path must be checked before compiling"
    if case == "existing file":
        assert (tmp_path / "t.json").read_text() == "{}"


# ------------------------------------------------------------------------------------------
# The one-source kernels (fused_aot): the stored table holds the heaviest flag variant of
# each norm for every launch; the lighter variants of the largest blocks, compiled here,
# must spill nothing either and need no more shared memory than the heaviest.
# ------------------------------------------------------------------------------------------
def _fused_variant_jobs():
    from layernorm_tutorial.triton_kernels import fused_aot

    largest = {"forward": 16384, "backward": 8192}
    return [j for j in fused_aot.jobs("all", dtypes=("bf16",), targets=("sm_90",))
            if j["kernel"] != "reduce" and j["constants"]["ROW_FITS_BLOCK"]
            and j["constants"]["BLOCK_N"] == largest[j["kernel"]]
            and (j["kernel"] == "forward" or j["constants"]["HAS_DRES"])]


@pytest.fixture(scope="session")
def fused_variants(tmp_path_factory):
    from layernorm_tutorial.triton_kernels import fused_aot

    start = time.perf_counter()
    rows = fused_aot.compile_jobs(_fused_variant_jobs(),
                                  cache_dir=tmp_path_factory.mktemp("triton_fused_cache"))
    print(f"compiled {len(rows)} fused variants in {time.perf_counter() - start:.1f} s")
    return rows


def test_fused_flag_variants_of_the_largest_blocks_fit_like_the_heaviest(fused_variants):
    assert len(fused_variants) == len(_fused_variant_jobs()) > 10
    bad = {r["label"]: resources.problems(r) for r in fused_variants if resources.problems(r)}
    assert not bad, bad
    for kernel in ("forward", "backward"):
        for rms in (False, True):
            group = [r for r in fused_variants
                     if r["kernel"] == kernel and r["constants"]["IS_RMS"] == rms]
            heaviest = group[0]  # fused_aot lists every flag on first
            assert all(v for k, v in heaviest["constants"].items()
                       if k.startswith(("HAS_", "COMPUTE_"))
                       and not (rms and k in ("HAS_BIAS", "COMPUTE_DB"))), heaviest["label"]
            assert max(r["shared_bytes"] for r in group) == heaviest["shared_bytes"], [
                (r["label"], r["shared_bytes"]) for r in group]


def test_fused_aot_cli_checks_the_output_path_before_compiling(tmp_path, capsys):
    from layernorm_tutorial.triton_kernels import fused_aot

    existing = tmp_path / "table.json"
    existing.write_text("{}")
    for argv in (["--out", str(existing)], ["--out", str(tmp_path)]):
        with pytest.raises(SystemExit):
            fused_aot.main(argv)
    assert existing.read_text() == "{}"
    assert "--force" in capsys.readouterr().err
