"""Does LayerNorm on PyTorch's default initialisation beat He initialisation without it?

The principles chapter shows, on three seeds, that both repair the poor initial scale of an
8-layer MLP on the digits. Whether one is *better* is a comparison, judged here by the
book's verdict method (``lab.common.verdict``): seeds from ``seed_plan`` (two tuning seeds,
five reported), seed ``s`` fixing the train/test split, the initial weights of both arms and
the mini-batch order; each arm's learning rate chosen on the tuning seeds only; the paired
difference of the final test accuracies on the reported seeds, with a 95 % t interval, against
a threshold of one point fixed before the runs. The runs take about a minute of CPU, so
``python -m layernorm_tutorial.lab.principles`` stores them in ``book/data/``.
"""

from __future__ import annotations

import time
from collections.abc import Sequence

import numpy as np

from layernorm_tutorial.lab.common.stored_results import BOOK_DATA, provenance
from layernorm_tutorial.lab.common.training import load_digits_split, make_mlp
from layernorm_tutorial.lab.common.verdict import Verdict, paired_verdict, seed_plan
from layernorm_tutorial.lab.principles.init_sensitivity import MLPEnsemble, train_ensemble

__all__ = ["ARMS", "THRESHOLD", "LR_GRID", "COMMAND", "COMMITTED_PATH", "run_comparison",
           "build_document", "verdict_from_document"]

#: The two arms as ``make_mlp`` keyword arguments; the claim is that the first beats the second.
ARMS = {"default init + LayerNorm": {"layer_norm": True},
        "He init": {"layer_norm": False, "he_init": True}}
#: Practical size of "beats": one point of test accuracy (a fraction), fixed before the runs.
THRESHOLD = 0.01
#: Learning rates tried on the tuning seeds (SGD with momentum 0.9, batch 64).
LR_GRID = (0.001, 0.002, 0.005, 0.01, 0.02, 0.05)
COMMAND = "python -m layernorm_tutorial.lab.principles"
COMMITTED_PATH = BOOK_DATA / "principles_ln_vs_he.json"


def _run_seed(seed: int, runs: list[tuple[str, float]], depth: int, epochs: int) -> list[float]:
    """Final test accuracy of each (arm, lr) run on seed ``seed``'s split, as one ensemble."""
    data = load_digits_split(seed=seed)
    models = [make_mlp(depth, seed=seed, **ARMS[arm]) for arm, _ in runs]
    results = train_ensemble(MLPEnsemble.from_models(models), data, epochs=epochs,
                             lrs=[lr for _, lr in runs], seeds=[seed] * len(runs))
    return [r.test_accuracy for r in results]


def run_comparison(*, lr_grid: Sequence[float] = LR_GRID, depth: int = 8, epochs: int = 15,
                   n_reported: int = 5, n_tuning: int = 2, first_seed: int = 0) -> dict:
    """Train both arms and return a JSON-ready dict.

    Keys: ``arms``, ``lr_grid``, ``tuning_seeds``, ``reported_seeds``, ``tuning_accuracy``
    (arm -> one mean test accuracy over the tuning seeds per rate of ``lr_grid``), ``lr``
    (arm -> the rate chosen, the first best on ties) and ``accuracy`` (arm -> one final test
    accuracy per reported seed, paired by seed across arms).
    """
    if not lr_grid:
        raise ValueError("lr_grid must hold at least one learning rate")
    tuning, reported = seed_plan(n_reported, n_tuning, first=first_seed)
    arms = list(ARMS)
    grid_runs = [(arm, lr) for arm in arms for lr in lr_grid]
    tuned = np.array([_run_seed(s, grid_runs, depth, epochs) for s in tuning])
    tuned = tuned.mean(0).reshape(len(arms), len(lr_grid))
    chosen = {arm: float(lr_grid[int(np.argmax(tuned[k]))]) for k, arm in enumerate(arms)}
    final = np.array([_run_seed(s, [(arm, chosen[arm]) for arm in arms], depth, epochs)
                      for s in reported])
    return {"arms": arms, "lr_grid": [float(lr) for lr in lr_grid],
            "tuning_seeds": list(tuning), "reported_seeds": list(reported),
            "tuning_accuracy": {arm: tuned[k].tolist() for k, arm in enumerate(arms)},
            "lr": chosen,
            "accuracy": {arm: final[:, k].tolist() for k, arm in enumerate(arms)}}


def build_document(result: dict, seconds: float, config: dict) -> dict:
    """The results file: provenance header, the threshold fixed before the runs, the runs."""
    return {**provenance(COMMAND, config, seconds), "threshold": THRESHOLD, **result}


def verdict_from_document(doc: dict) -> Verdict:
    """``paired_verdict`` of the first arm against the second, on the stored accuracies."""
    first, second = doc["arms"]
    return paired_verdict(doc["accuracy"][first], doc["accuracy"][second],
                          threshold=doc["threshold"],
                          claim=f"{first} reaches a higher test accuracy than {second}")


def timed_comparison(**settings) -> tuple[dict, float]:
    """``run_comparison(**settings)`` and its wall time in seconds."""
    start = time.perf_counter()
    result = run_comparison(**settings)
    return result, time.perf_counter() - start
