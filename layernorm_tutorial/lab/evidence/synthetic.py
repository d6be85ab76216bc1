"""A schema-valid results document with made-up numbers, for tests of the analysis and plots.

Nothing is trained: every run's metrics come from a function of (experiment, norm, batch size,
seed), so a test knows the right verdicts in advance. Rate ranges come from a function of
(experiment, norm, rate, seed) giving the final validation accuracy; a run at or below
:data:`FAILED_ACC` is recorded as failed (training loss above ln 10).
"""

from __future__ import annotations

from layernorm_tutorial.lab.evidence.experiments import (
    EXPERIMENTS,
    RATE_RANGES,
    REPORTED_SEEDS,
    TUNING_SEEDS,
    ladder_rate,
)
from layernorm_tutorial.lab.evidence.results import SCHEMA_VERSION, TOLERANCE, round_floats
from layernorm_tutorial.lab.evidence.runner import NUM_EVALS, RunSpec

__all__ = ["synthetic_results", "FAILED_ACC"]

FAILED_ACC = 0.1


def _record(spec: RunSpec, test_acc: float, gap: float) -> dict:
    total = spec.total_steps(1078)
    steps = [round(total * (i + 1) / NUM_EVALS) for i in range(NUM_EVALS)]
    curve_acc = [test_acc * min(1.0, (i + 1) / 4) for i in range(NUM_EVALS)]
    failed = test_acc <= FAILED_ACC
    return {
        "spec": spec.as_dict(), "steps": total, "diverged": False,
        "curve": {"step": steps, "train_loss": [2.3 / (i + 1) for i in range(NUM_EVALS)],
                  "val_acc": curve_acc, "test_acc": curve_acc},
        "final": {"train_loss": 2.4 if failed else 0.01, "train_acc": min(1.0, test_acc + gap),
                  "val_loss": 0.1, "val_acc": test_acc, "test_loss": 0.1 + gap,
                  "test_acc": test_acc, "val_acc_per_class": [test_acc] * 10,
                  "test_acc_per_class": [test_acc] * 10, "minibatch_loss_last_epoch": 0.02},
    }


def _default_range_acc(experiment, norm, lr, seed):
    """Every norm peaks at 0.95 below its failure rate: none fails above 0.01, LN above 0.1,
    BN above 0.3 (plus a seed-dependent wobble)."""
    limit = {"none": 0.01, "ln": 0.1, "bn": 0.3}[norm]
    return 0.95 + 0.001 * seed if lr <= limit else FAILED_ACC


def synthetic_results(test_acc=None, gap: float = 0.02, tuning=TUNING_SEEDS,
                      reported=REPORTED_SEEDS, experiments=EXPERIMENTS,
                      range_acc=None, rate_ranges=RATE_RANGES) -> dict:
    """``test_acc(experiment, norm, batch_size, seed) -> float`` sets each run's test
    accuracy (default: 0.95 for every norm, plus 0.001 * seed). The chosen rate of every
    setting is the middle of its grid; the tuning seeds' runs at the other rates are 0.1
    worse. ``range_acc(experiment, norm, lr, seed)`` sets the rate-range runs."""
    if test_acc is None:
        def test_acc(experiment, norm, batch_size, seed):
            return 0.95 + 0.001 * seed
    range_acc = range_acc or _default_range_acc
    runs, selected, range_runs = [], [], []
    for exp in experiments:
        for norm, b in exp.settings():
            grid = [ladder_rate(i, b) for i in exp.rungs]
            best = grid[len(grid) // 2]
            selected.append({"experiment": exp.name, "norm": norm, "batch_size": b,
                             "lr": best, "rates_tried": grid})
            for lr in grid:
                for seed in tuning:
                    spec = RunSpec(exp.model, norm, b, lr, seed, exp.epochs)
                    acc = test_acc(exp.name, norm, b, seed) - (0 if lr == best else 0.1)
                    runs.append({"experiment": exp.name, "role": "tuning",
                                 "selected": lr == best, **_record(spec, acc, gap)})
            for seed in reported:
                spec = RunSpec(exp.model, norm, b, best, seed, exp.epochs)
                runs.append({"experiment": exp.name, "role": "reported", "selected": True,
                             **_record(spec, test_acc(exp.name, norm, b, seed), gap)})
    for rr in rate_ranges:
        for norm in rr.norms:
            for rung in rr.rungs:
                lr = ladder_rate(rung, rr.batch_size)
                for seed in reported:
                    spec = RunSpec(rr.model, norm, rr.batch_size, lr, seed, rr.epochs)
                    range_runs.append({"experiment": rr.name, "rung": rung,
                                       **_record(spec, range_acc(rr.name, norm, lr, seed),
                                                 gap)})
    return round_floats({
        "schema_version": SCHEMA_VERSION, "command": "synthetic", "versions": {},
        "config": {"experiments": [exp.as_dict() for exp in experiments],
                   "rate_ranges": [rr.as_dict() for rr in rate_ranges]},
        "tuning_seeds": list(tuning), "seeds": list(reported), "tolerance": TOLERANCE,
        "sweep_seconds": None, "selected_lr": selected, "runs": runs,
        "range_runs": range_runs,
    })
