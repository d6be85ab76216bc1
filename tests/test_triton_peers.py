"""Peers (Liger Kernel, the Triton tutorial's structure) under the interpreter's cases."""

import pytest
import torch

pytest.importorskip("layernorm_tutorial.triton_kernels",
                    reason="Triton is not installed (Linux x86-64/aarch64 only)",
                    exc_type=ImportError)

from layernorm_tutorial.triton_kernels import peers  # noqa: E402


@pytest.fixture(scope="module")
def small():
    cases = ((3, torch.float32), (17, torch.float32), (1000, torch.float16))
    return peers.compare_peers(cases=cases)


def _row(rows, peer, n):
    (row,) = [r for r in rows if r["peer"] == peer and r["n"] == n]
    return row


def test_package_kernel_passes_every_case(small):
    for n in (3, 17, 1000):
        row = _row(small, "package", n)
        assert row["ok"] and row["error"] is None, row
        assert None not in (row["dx"], row["dw"], row["db"])


def test_unmasked_tutorial_statistics_fail_where_padding_exists(small):
    assert not _row(small, "tutorial unmasked", 17)["ok"]  # BLOCK_N 32, 15 padding lanes
    assert _row(small, "tutorial stats", 17)["ok"]
    assert _row(small, "tutorial unmasked", 17)["y"] > 0.1


def test_liger_errors_are_captured_not_hidden(small):
    # Liger's kernel reads eps.to(tl.float32): under the interpreter a float argument stays
    # a Python float. With floats passed as scalars, libdevice's rsqrt has no interpreter
    # implementation. Both are reported as errors, with the interpreter's message.
    liger = _row(small, "liger", 17)
    shim = _row(small, "liger, float args", 17)
    if liger["error"] is None:  # a future Liger or Triton that runs: it must then be right
        assert liger["ok"], liger
    else:
        assert "'float' object has no attribute 'to'" in liger["error"]
        assert not liger["ok"] and liger["y"] is None
    if shim["error"] is not None:
        assert "cannot convert None" in shim["error"] and not shim["ok"], shim


def test_float_args_shim_is_restored():
    from triton.runtime import interpreter

    before = interpreter._implicit_cvt
    with peers.float_args_as_scalars():
        assert interpreter._implicit_cvt is not before
    assert interpreter._implicit_cvt is before


def test_table_lists_each_error_once(small):
    text = peers.format_peer_table(small)
    assert text.count("'float' object has no attribute 'to'") <= 1
    assert "FAIL" in text  # the unmasked statistics
    assert len(text.splitlines()) >= 2 + 3


def test_liger_kernels_compile_as_its_launcher_specializes_them():
    from liger_kernel.ops.utils import calculate_settings

    from layernorm_tutorial.triton_kernels import aot

    jobs = peers.liger_compile_jobs(ns=(4096,))
    assert [j["num_warps"] for j in jobs] == [calculate_settings(4096)[1]] * 2
    rows = aot.compile_in_subprocess(jobs)
    assert [r["label"] for r in rows] == [j["label"] for j in jobs]
    for r in rows:
        assert r["registers"] > 0 and r["ptx"]["ld_global"] > 0, r
    assert "regs" in peers.format_compiled_peers(rows)
