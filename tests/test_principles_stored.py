"""The principles chapter's stored training run and its live check (lab.principles.
stored_training): the comparison rule, the summaries the prose quotes, the committed file."""

import math

import numpy as np
import pytest

from layernorm_tutorial.lab.common import numerics_paths
from layernorm_tutorial.lab.common.stored_results import load_results
from layernorm_tutorial.lab.principles import stored_training as st
from layernorm_tutorial.lab.principles.init_sensitivity import InitScaleSweep


def test_compare_first_epochs_divides_by_each_runs_tolerance():
    ratios = st.compare_first_epochs([1.0, 2.0002, math.nan, 3.0], [1.0, 2.0, math.nan, 3.3],
                                     [1e-6, 1e-3, 1e-6, 1e-1])
    assert ratios[0] == 0 and ratios[1] == pytest.approx(0.1) and ratios[2] == 0
    assert ratios[3] == pytest.approx(0.3 / 3.3 / 0.1)
    assert st.compare_first_epochs([math.nan], [1.0], [1.0]) == [math.inf]   # diverged here only
    with pytest.raises(ValueError, match="one value per run"):
        st.compare_first_epochs([1.0], [1.0, 2.0], [1.0])


def test_per_run_spread_handles_runs_that_diverge():
    values = {"a": [1.0, None, None, 2.0], "b": [1.1, None, 5.0, 2.0]}
    spread = st.per_run_spread(values)
    assert spread[0] == pytest.approx(0.1 / 1.1) and spread[1] == 0
    assert spread[2] == math.inf and spread[3] == 0


def _doc(spread_values, stored_losses):
    """A stored document with one demo run per arm and no sweep (for check_live)."""
    demo = {arm: [{"train_loss": [v], "test_loss": [v], "test_accuracy": 0.5}]
            for arm, v in zip(st.DEMO_ARMS, stored_losses, strict=True)}
    sweep = {key: {f"{lr:g}": [] for lr in st.SWEEP["lrs"]} for key in ("without", "with")}
    return {"runs": {"demo": demo, "sweep": sweep},
            "check": {"epochs": 1, "factor": 10.0, "floor": 1e-7,
                      "paths": {"values": spread_values}}}


def test_check_live_passes_within_the_measured_spread_and_fails_beyond():
    doc = _doc({"p": [2.0, 1.0, None], "q": [2.0 + 2e-6, 1.0, 3.0]}, [2.0, 1.0, None])
    check = st.check_live(doc, live=[2.0 + 1e-5, 1.0 + 5e-7, 7.0])
    assert check.passed and check.skipped == 1 and len(check.ratios) == 2
    assert "2 numerics paths" in check.text() and max(map(len, check.text().split("\n"))) <= 80
    assert "not compared: 1" in check.text()     # the skipped run is counted, always
    with pytest.raises(AssertionError, match="run 0"):
        st.check_live(doc, live=[2.0 + 3e-5, 1.0, 7.0])     # 10 x spread is 1e-5
    with pytest.raises(AssertionError, match="run 1"):
        st.check_live(doc, live=[2.0, 1.0 + 2e-6, 7.0])     # the floor 1e-7 x 10


def _sweep(accuracy):
    accuracy = np.asarray(accuracy, dtype=float)
    loss = np.where(accuracy < 0.11, np.nan, 0.1)
    return InitScaleSweep((0.5, 1.0, 2.0), (0.02,), (0, 1, 2), 15, accuracy, loss,
                          ~np.isfinite(loss))


def test_sweep_summary_words():
    # [layer_norm][lr][scale][seed]
    sweep = _sweep([[[[0.5, 0.6, 0.4], [0.9, 0.95, 0.9], [0.1, 0.1, 0.1]]],
                    [[[0.85, 0.9, 0.95], [0.9, 0.95, 0.9], [0.9, 0.5, 0.95]]]])
    s = st.SweepSummary(sweep)
    assert s.trained_scales(False, 0.02) == [1.0] and s.trained_scales(True, 0.02) == [0.5, 1.0]
    assert s.range_ratio(True, 0.02) == 2 and s.range_ratio(False, 0.02) == 1
    assert s.split_settings() == [(True, 0.02, 2.0, 2)]
    assert s.split_sentence() == "LN, lr 0.02, scale 2: 2/3"
    values = s.glue_values()
    assert values["trained_scales_with_LN_lr002"] == "0.5, 1"
    assert values["range_ratio_with_LN_lr002"] == "2" and values["diverged_without_LN"] == 3
    assert max(len(line) for line in s.table().splitlines()) <= 80


def test_committed_run_matches_the_code_and_its_check():
    doc = load_results(st.COMMITTED_PATH)
    assert doc["command"] == st.COMMAND and doc["machine"]["cpu_capability"]
    assert doc["config"]["demo"] == {**st.DEMO, "seeds": list(st.DEMO["seeds"])}
    assert doc["config"]["sweep"]["scales"] == list(st.SWEEP["scales"])
    assert doc["check"]["factor"] == st.TOLERANCE_FACTOR
    assert doc["check"]["floor"] == st.TOLERANCE_FLOOR
    extended = doc["check"]["paths"].get("extended", {}).get("paths", [])
    assert set(extended) <= set(numerics_paths.MIXED_PATHS)
    assert set(doc["check"]["paths"]["values"]) == set(numerics_paths.PATHS) | set(extended)
    assert set(doc["outcomes_on_paths"]) == set(numerics_paths.PATHS)
    stored = st._first_losses(doc["runs"], doc["check"]["epochs"])
    # the native path of the measurement is the stored run itself
    native = doc["check"]["paths"]["values"]["native"]
    assert st.compare_first_epochs(native, stored, [1e-7] * len(stored)) == [0.0] * len(stored)
    demo = st.DemoSummary(doc)
    assert demo.plain_stays_at_chance()
    sweep = st.sweep_from_document(doc)
    assert sweep.accuracy.shape == (2, 2, 5, 3)
    finals = doc["outcomes_on_paths"]["native"]["demo"]
    assert finals == {arm: [r["test_accuracy"] for r in runs]
                      for arm, runs in doc["runs"]["demo"].items()}


def test_paths_sentence_counts_the_paths():
    doc = {"config": {"sweep": {"scales": [1.0, 2.0]}},
           "outcomes_on_paths": {
               "a": {"sweep": {"with": {"0.02": [[0.9, 0.9], [0.9, 0.9]]}}},
               "b": {"sweep": {"with": {"0.02": [[0.9, 0.5], [0.9, 0.9]]}}}}}
    assert st.paths_trained_scales(doc, True, 0.02) == {"a": [1.0, 2.0], "b": [2.0]}
    assert st.paths_sentence(doc, True, 0.02) == "{1, 2}: 1; {2}: 1"


def test_unknown_job_is_named():
    with pytest.raises(ValueError, match="job must be one of"):
        st.run_job(("nope",))


def test_training_command_writes_every_part(tmp_path, monkeypatch):
    """The command with --tiny, numerics paths run in this process (a stub for
    run_on_paths: the subprocesses are what the numerics-paths tests cover)."""
    import importlib

    from layernorm_tutorial.lab.principles.__main__ import main

    def in_process(target, kwargs=None, paths=None, **_):
        module, _, name = target.partition(":")
        fn = getattr(importlib.import_module(module), name)
        return {p: fn(**(kwargs or {})) for p in paths}

    monkeypatch.setattr(numerics_paths, "run_on_paths", in_process)
    out = tmp_path / "training.json"
    main(["training", "--tiny", "--workers", "1", "--out", str(out)])
    doc = load_results(out)
    assert doc["command"] == st.COMMAND and doc["config"]["tiny"] is True
    assert set(doc["check"]["paths"]["values"]) == {"native", "default+compatible"}
    assert doc["check"]["paths"]["relative_spread"] == 0      # same process, same path
    assert set(doc["outcomes_on_paths"]) == {"native", "default+compatible"}
    assert st.check_live(doc).passed
    with pytest.raises(SystemExit):                # never replaces without --force
        main(["training", "--tiny", "--out", str(out)])
