"""The RNN chapter's race on the digits, judged by the book's verdict method.

Six models (plain, LN and BN versions of an Elman RNN and of an LSTM, 32 units) read
scikit-learn's 8x8 digits row by row (:func:`~.experiments.
load_digit_sequences_with_validation`) and are trained with Adam for ``EPOCHS`` epochs
(:func:`~.experiments.train_sequence_classifier`). The rule
(:mod:`layernorm_tutorial.lab.common.verdict`):

1. **Data and seeds.** The book's fixed test set (449 images) is the same for every seed;
   seed ``s`` draws its own train/validation split (1078 / 270) of the other 1348 images and
   the initialization and batch order of every model, so the runs of two models pair up by
   seed. :func:`~layernorm_tutorial.lab.common.verdict.seed_plan` gives two tuning seeds and
   five reported seeds.
2. **Learning rate.** For each model, every rate of ``LR_GRID`` is trained on the tuning
   seeds; the rate with the best mean *validation* accuracy after ``EPOCHS`` epochs wins.
   Validation images are never test images, so no choice has seen the test set. A winner
   at an edge of the grid adds the next rate beyond it (factor ``GRID_STEP``), up to
   ``GRID_EXTENSIONS`` times.
3. **Runs.** The reported seeds at each model's chosen rate; the test accuracy after every
   epoch is recorded, so one run answers the question after one epoch and after ``EPOCHS``.
4. **Verdicts.** :func:`verdicts` compares the pairs of ``COMPARISONS`` after epoch 1 and
   after epoch ``EPOCHS`` with :func:`~layernorm_tutorial.lab.common.verdict.paired_verdict`
   and the threshold ``THRESHOLD`` (accuracy as a fraction), fixed before the runs. The
   intervals are conditional on the fixed test set: they leave out test-set sampling
   variance.

``python -m layernorm_tutorial.lab.rnn`` runs it and writes ``book/data/rnn_race.json``
(:data:`COMMITTED_PATH`); the chapter reads that file.
"""

from __future__ import annotations

import math

import numpy as np

from layernorm_tutorial.lab.common import claims, stored_results
from layernorm_tutorial.lab.common.stored_results import BOOK_DATA, provenance
from layernorm_tutorial.lab.common.verdict import Verdict, family_marks, seed_plan

__all__ = ["ARMS", "COMMITTED_PATH", "COMPARISONS", "EPOCHS", "LR_GRID", "THRESHOLD",
           "accuracy_table", "check_stored_run", "mean_curves", "retrain", "run_race",
           "select_lr", "verdicts", "family", "doc_epochs"]

ARMS = {"RNN": "rnn", "LN-RNN": "ln_rnn", "BN-RNN": "bn_rnn",
        "LSTM": "lstm", "LN-LSTM": "ln_lstm", "BN-LSTM": "bn_lstm"}
EPOCHS = 6
HIDDEN_SIZE = 32
BATCH_SIZE = 64
LR_GRID = (1e-3, 3e-3, 1e-2)
GRID_STEP = math.sqrt(10)
GRID_EXTENSIONS = 2
TUNING_SEEDS, REPORTED_SEEDS = seed_plan(5, 2, first=0)
CLAIM = "rnn.race"
THRESHOLD = claims.threshold(CLAIM)  # two points of test accuracy, in the registry
COMPARISONS = (("LN-LSTM", "LSTM"), ("LN-LSTM", "BN-LSTM"),
               ("LN-RNN", "RNN"), ("LN-RNN", "BN-RNN"))
COMMITTED_PATH = BOOK_DATA / "rnn_race.json"
COMMAND = "python -m layernorm_tutorial.lab.rnn"


def _train(job: tuple) -> dict:
    """One run: ``job = (arm, lr, seed, role, epochs)``; single-threaded."""
    import torch

    from layernorm_tutorial.lab.rnn.experiments import (
        load_digit_sequences_with_validation,
        train_sequence_classifier,
    )

    arm, lr, seed, role, epochs = job
    torch.set_num_threads(1)
    x_tr, y_tr, x_val, y_val, x_te, y_te = load_digit_sequences_with_validation(seed)
    history = train_sequence_classifier(ARMS[arm], (x_tr, y_tr, x_te, y_te),
                                        hidden_size=HIDDEN_SIZE, epochs=epochs,
                                        batch_size=BATCH_SIZE, lr=lr, seed=seed,
                                        validation=(x_val, y_val))
    return {"arm": arm, "lr": lr, "seed": seed, "role": role, **history}


def retrain(arm: str, lr: float, seed: int, epochs: int = 1) -> dict:
    """One run of the race, as the command trains it: ``{"train_loss", "val_accuracy",
    "test_accuracy"}`` per epoch (JSON-able; the target of ``run_on_paths``)."""
    run = _train((arm, lr, seed, "check", epochs))
    return {k: run[k] for k in ("train_loss", "val_accuracy", "test_accuracy")}


def _run_jobs(jobs: list, workers: int, desc: str) -> list:
    return stored_results.run_jobs(_train, jobs, workers, desc=desc)


def select_lr(runs: list, arm: str) -> float:
    """The rate with the best mean final *validation* accuracy over the tuning runs of
    ``arm`` (ties: the smaller rate). Test accuracies are never read."""
    by_lr: dict[float, list] = {}
    for r in runs:
        if r["arm"] == arm and r["role"] == "tuning":
            by_lr.setdefault(r["lr"], []).append(r["val_accuracy"][-1])
    if not by_lr:
        raise ValueError(f"no tuning runs for arm {arm!r}")
    return max(sorted(by_lr), key=lambda lr: np.mean(by_lr[lr]))


def _next_rate(tried: list, best: float) -> float | None:
    """One grid step (factor ``GRID_STEP``, three significant digits) beyond ``best`` when
    ``best`` is the largest or smallest rate tried; ``None`` when it is inside the grid."""
    if best == max(tried):
        return float(f"{best * GRID_STEP:.3g}")
    if best == min(tried):
        return float(f"{best / GRID_STEP:.3g}")
    return None


def run_race(*, arms=tuple(ARMS), epochs: int = EPOCHS, lr_grid=LR_GRID,
             tuning_seeds=TUNING_SEEDS, reported_seeds=REPORTED_SEEDS,
             grid_extensions: int = GRID_EXTENSIONS, workers: int = 1) -> dict:
    """Tune each arm's rate on ``tuning_seeds``, then train ``reported_seeds`` at it.

    Returns ``{"selected_lr": {arm: lr}, "runs": [...]}``; a run is ``{"arm", "lr",
    "seed", "role" ("tuning" or "reported"), "train_loss" (per epoch), "val_accuracy" and
    "test_accuracy" (after each epoch)}``.
    """
    stored_results.require_known_names(arms, ARMS, "arms")
    runs = _run_jobs([(a, lr, s, "tuning", epochs) for a in arms for lr in lr_grid
                      for s in tuning_seeds], workers, "rnn race: tuning")
    for _ in range(grid_extensions):
        extra = []
        for arm in arms:
            tried = sorted({r["lr"] for r in runs if r["arm"] == arm})
            lr = _next_rate(tried, select_lr(runs, arm))
            if lr is not None:
                extra += [(arm, lr, s, "tuning", epochs) for s in tuning_seeds]
        if not extra:
            break
        runs += _run_jobs(extra, workers, "rnn race: grid extension")
    selected = {arm: select_lr(runs, arm) for arm in arms}
    runs += _run_jobs([(a, selected[a], s, "reported", epochs) for a in arms
                       for s in reported_seeds], workers, "rnn race: reported seeds")
    return {"selected_lr": selected, "runs": runs}


def build_document(race: dict, seconds: float | None, **settings) -> dict:
    """The results file: provenance header, then ``selected_lr`` and ``runs``."""
    config = {"data": "sklearn.datasets.load_digits read row by row (8 steps of 8 pixels / 16);"
                      " the book's fixed test set (449 images, load_digits_split(0.25, seed=0))"
                      "; the other 1348 split into train/validation (1078 / 270) per seed",
              "model": f"SequenceClassifier, hidden size {HIDDEN_SIZE}",
              "optimizer": f"Adam, batches of {BATCH_SIZE}",
              "epochs": settings.get("epochs", EPOCHS),
              "lr_grid": list(settings.get("lr_grid", LR_GRID)),
              "lr_rule": ("best mean validation accuracy after the last epoch on the tuning "
                          f"seeds; a winner at an edge adds the next rate (x{GRID_STEP:.3g}), "
                          f"up to {GRID_EXTENSIONS} times"),
              "tuning_seeds": list(settings.get("tuning_seeds", TUNING_SEEDS)),
              "reported_seeds": list(settings.get("reported_seeds", REPORTED_SEEDS)),
              "threshold": THRESHOLD,
              "threads_per_run": 1}
    return claims.stamp({**provenance(COMMAND, config, seconds), **race}, [CLAIM])


def accuracy_table(doc: dict, epoch: int) -> dict[str, np.ndarray]:
    """``{arm: test accuracy after ``epoch`` (1-based) for each reported seed}``, seeds in
    increasing order."""
    table: dict[str, list] = {}
    for r in sorted(doc["runs"], key=lambda r: r["seed"]):
        if r["role"] == "reported":
            table.setdefault(r["arm"], []).append(r["test_accuracy"][epoch - 1])
    return {arm: np.array(v) for arm, v in table.items()}


def verdicts(doc: dict, epoch: int, comparisons=COMPARISONS) -> dict[tuple[str, str], Verdict]:
    """``{(a, b): "a beats b"}`` on the test accuracy after ``epoch``, judged through the
    claims registry (claim :data:`CLAIM`)."""
    table = accuracy_table(doc, epoch)
    return {(a, b): claims.judge(CLAIM, table[a], table[b],
                                 setting=f"{a} vs {b}, epoch {epoch}")
            for a, b in comparisons}


def family(doc: dict, comparisons=COMPARISONS
           ) -> dict[tuple[tuple[str, str], int], tuple[Verdict, bool]]:
    """The chapter's family: every comparison after every epoch,
    ``{(pair, epoch): (verdict, survives the family's Bonferroni correction)}``
    (:func:`~layernorm_tutorial.lab.common.verdict.family_marks`)."""
    judged = {(pair, epoch): v for epoch in range(1, doc_epochs(doc) + 1)
              for pair, v in verdicts(doc, epoch, comparisons).items()}
    marks = family_marks(list(judged.values()))
    return {key: (v, mark) for (key, v), mark in zip(judged.items(), marks, strict=True)}


def doc_epochs(doc: dict) -> int:
    """The number of epochs of the reported runs."""
    return len(next(r for r in doc["runs"] if r["role"] == "reported")["test_accuracy"])


def mean_curves(doc: dict) -> dict[str, dict[str, list[float]]]:
    """``{arm: {"train_loss": [...], "test_accuracy": [...]}}``: per-epoch means over the
    reported seeds (the input of :func:`~.plots.plot_learning_curves`)."""
    curves: dict[str, dict[str, list]] = {}
    for r in doc["runs"]:
        if r["role"] == "reported":
            arm = curves.setdefault(r["arm"], {"train_loss": [], "test_accuracy": []})
            arm["train_loss"].append(r["train_loss"])
            arm["test_accuracy"].append(r["test_accuracy"])
    return {arm: {k: np.mean(v, axis=0).tolist() for k, v in c.items()}
            for arm, c in curves.items()}


def check_stored_run(doc: dict, arm: str, seed: int, epochs: int = 1) -> tuple[list, list]:
    """Retrain the first ``epochs`` epochs of the stored reported run ``(arm, seed)`` here.

    Returns ``(stored, again)``: the test accuracies after each of those epochs, from the
    file and from the new run (the first epochs of a longer run are exactly a shorter run).
    """
    stored = [r for r in doc["runs"] if r["arm"] == arm and r["seed"] == seed
              and r["role"] == "reported"]
    if len(stored) != 1:
        raise ValueError(f"no single reported run for arm {arm!r} and seed {seed}")
    again = _train((arm, stored[0]["lr"], seed, "check", epochs))
    return stored[0]["test_accuracy"][:epochs], again["test_accuracy"]
