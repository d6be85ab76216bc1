"""Numerics paths (lab/common/numerics_paths.py) and the progress of stored-run commands."""

import math

import pytest

from layernorm_tutorial.lab.common import numerics_paths, stored_results

PROBE = "layernorm_tutorial.lab.common.numerics_paths:reduction_probe"


def test_a_path_selects_torchs_kernels_in_a_fresh_process():
    results = numerics_paths.run_on_paths(PROBE, {"n": 1024},
                                          paths=["default+compatible"])
    assert results["default+compatible"]["cpu_capability"] == "DEFAULT"
    assert math.isfinite(results["default+compatible"]["sum"])


def test_with_machine_records_the_childs_path():
    results = numerics_paths.run_on_paths(PROBE, {"n": 1024}, paths=["avx2, 1 thread"],
                                          with_machine=True)
    machine = results["avx2, 1 thread"]["machine"]
    assert machine["environment"]["OMP_NUM_THREADS"] == "1"
    assert machine["torch_threads"] == 1


def test_bad_target_and_path_names_are_refused_in_one_line():
    with pytest.raises(ValueError, match="target must be"):
        numerics_paths.run_on_paths("no_colon", {})
    with pytest.raises(ValueError, match="paths must be names"):
        numerics_paths.run_on_paths(PROBE, {}, paths=["sse9"])


def test_a_failing_child_names_its_path():
    with pytest.raises(RuntimeError, match="'native'"):
        numerics_paths.run_on_paths(PROBE, {"n": -5}, paths=["native"])


def test_spreads_element_by_element():
    results = {"a": {"x": 1.0, "y": [10.0, 0.0]}, "b": {"x": 1.1, "y": [10.0, 0.0]}}
    assert numerics_paths.absolute_spread(results) == pytest.approx(0.1)
    assert numerics_paths.relative_spread(results) == pytest.approx(0.1 / 1.1)
    assert numerics_paths.relative_spread({"a": [1.0, 2.0], "b": [1.0, 2.0]}) == 0.0
    assert numerics_paths.relative_spread({"a": [1.0], "b": [math.inf]}) == math.inf
    with pytest.raises(ValueError, match="same structure"):
        numerics_paths.relative_spread({"a": [1.0], "b": [1.0, 2.0]})


def test_provenance_names_the_numerics_path():
    header = stored_results.provenance("cmd", {}, 1.0)
    machine = header["machine"]
    for key in ("cpu", "cpu_capability", "mkl", "onednn", "torch_threads", "torch",
                "python", "date", "commit"):
        assert key in machine
    import torch
    assert machine["cpu_capability"] == torch.backends.cpu.get_cpu_capability()
    assert machine["torch_threads"] == torch.get_num_threads()


def _square(x):
    return x * x


@pytest.mark.parametrize("workers", [1, 2])
def test_run_jobs_keeps_order_and_shows_progress(workers, capsys):
    assert stored_results.run_jobs(_square, [3, 1, 2], workers, desc="squares",
                                   progress=True) == [9, 1, 4]
    err = capsys.readouterr().err
    assert "squares" in err and "3/3" in err


def test_run_jobs_stays_quiet_when_asked(capsys):
    assert stored_results.run_jobs(_square, [2], progress=False) == [4]
    assert capsys.readouterr().err == ""


def test_ci_runs_the_notebooks_on_the_ci_paths():
    from pathlib import Path

    ci = (Path(__file__).resolve().parents[1] / ".ci" / "run").read_text()
    for name in numerics_paths.CI_PATHS:
        assignments = " ".join(f"{k}={v}" for k, v in numerics_paths.PATHS[name].items())
        assert f"{assignments} pytest -q book" in ci, name


def test_every_path_compiles_into_its_own_inductor_cache():
    from pathlib import Path

    results = numerics_paths.run_on_paths(
        "os:getenv", {"key": "TORCHINDUCTOR_CACHE_DIR"}, paths=["native", "avx2"])
    assert len(set(results.values())) == 2
    assert all(Path(v).name.startswith("inductor-") for v in results.values())
    ci = (Path(__file__).resolve().parents[1] / ".ci" / "run").read_text()
    assert ci.count("TORCHINDUCTOR_CACHE_DIR=") == len(numerics_paths.CI_PATHS)
