"""A schema-valid results document with made-up numbers, for tests of the analysis and plots.

Nothing is trained: every run's metrics come from a table of per-(experiment, norm) test
accuracies plus a small seed-dependent offset, so a test knows the right verdicts in advance.
"""

from __future__ import annotations

from layernorm_tutorial.lab.evidence.experiments import EXPERIMENTS, lr_grid
from layernorm_tutorial.lab.evidence.results import SCHEMA_VERSION, TOLERANCE, round_floats
from layernorm_tutorial.lab.evidence.runner import NUM_EVALS, RunSpec

__all__ = ["synthetic_results"]


def _record(exp, spec: RunSpec, test_acc: float, gap: float, selected: bool) -> dict:
    total = spec.total_steps(1078)
    steps = [round(total * (i + 1) / NUM_EVALS) for i in range(NUM_EVALS)]
    curve_acc = [test_acc * min(1.0, (i + 1) / 4) for i in range(NUM_EVALS)]
    return {
        "experiment": exp.name, "selected": selected, "spec": spec.as_dict(), "steps": total,
        "diverged": False,
        "curve": {"step": steps, "train_loss": [2.3 / (i + 1) for i in range(NUM_EVALS)],
                  "val_acc": curve_acc, "test_acc": curve_acc},
        "final": {"train_loss": 0.01, "train_acc": min(1.0, test_acc + gap),
                  "val_loss": 0.1, "val_acc": test_acc, "test_loss": 0.1 + gap,
                  "test_acc": test_acc, "minibatch_loss_last_epoch": 0.02},
    }


def synthetic_results(test_acc=None, gap: float = 0.02, seeds=(0, 1, 2),
                      experiments=EXPERIMENTS) -> dict:
    """``test_acc(experiment, norm, batch_size, seed) -> float`` sets each run's test
    accuracy (default: 0.95 for every norm, plus 0.001 * seed). The chosen rate of every
    setting is the middle of its grid; the other grid rates get seed-0 runs 0.1 worse."""
    if test_acc is None:
        def test_acc(experiment, norm, batch_size, seed):
            return 0.95 + 0.001 * seed
    runs, selected = [], []
    for exp in experiments:
        for norm, b in exp.settings():
            grid = lr_grid(b, exp.lr_base)
            best = grid[len(grid) // 2]
            selected.append({"experiment": exp.name, "norm": norm, "batch_size": b,
                             "lr": best})
            for lr in grid:
                if lr != best:
                    spec = RunSpec(exp.model, norm, b, lr, seeds[0], exp.epochs)
                    acc = test_acc(exp.name, norm, b, seeds[0]) - 0.1
                    runs.append(_record(exp, spec, acc, gap, False))
            for seed in seeds:
                spec = RunSpec(exp.model, norm, b, best, seed, exp.epochs)
                runs.append(_record(exp, spec, test_acc(exp.name, norm, b, seed), gap, True))
    return round_floats({
        "schema_version": SCHEMA_VERSION, "command": "synthetic", "versions": {},
        "config": {"experiments": [exp.as_dict() for exp in experiments]},
        "seeds": list(seeds), "tolerance": TOLERANCE, "sweep_seconds": None,
        "selected_lr": selected, "runs": runs,
    })
