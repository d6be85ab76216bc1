"""One training run, fully determined by its :class:`RunSpec`.

A run trains one model with Adam on the evidence data of its seed for a fixed number of epochs
(or a step cap, used only by the tests), in the order given by a seeded generator, and records a
learning curve plus final metrics. Everything random (the train/validation split,
initialization, data order) comes from ``spec.seed``, and the run executes single-threaded
with deterministic algorithms, so the same spec on the same machine gives bit-identical
numbers.
"""

from __future__ import annotations

import contextlib
import math
from dataclasses import asdict, dataclass

import numpy as np
import torch
import torch.nn.functional as F

from layernorm_tutorial._seeding import seeded
from layernorm_tutorial.lab.evidence.data import EvidenceData, as_model_input, load_evidence_data
from layernorm_tutorial.lab.evidence.models import build_model

__all__ = ["RunSpec", "deterministic_torch", "train_run", "train_model", "evaluate",
           "per_class_accuracy", "recalibrate_batch_norm", "FAILURE_LOSS", "run_failed"]

NUM_THREADS = 1
NUM_EVALS = 16
NUM_CLASSES = 10
# A run *fails* when its loss stops being finite or its final training loss (evaluation mode)
# is no better than guessing uniformly over the ten classes, ln 10.
FAILURE_LOSS = math.log(NUM_CLASSES)


@dataclass(frozen=True)
class RunSpec:
    """What one run trains: ``model`` in {mlp, cnn, rnn}, ``norm`` (see ``models.NORMS``),
    mini-batch size, Adam learning rate, seed, epochs, and an optional ``max_steps`` cap."""

    model: str
    norm: str
    batch_size: int
    lr: float
    seed: int
    epochs: int
    max_steps: int | None = None

    def total_steps(self, n_train: int) -> int:
        steps = self.epochs * (n_train // self.batch_size)
        return steps if self.max_steps is None else min(steps, self.max_steps)

    def as_dict(self) -> dict:
        return asdict(self)


@contextlib.contextmanager
def deterministic_torch(num_threads: int = NUM_THREADS):
    """Run the body with a fixed intra-op thread count and deterministic algorithms on;
    restore the caller's settings afterwards."""
    threads = torch.get_num_threads()
    det = torch.are_deterministic_algorithms_enabled()
    torch.set_num_threads(num_threads)
    torch.use_deterministic_algorithms(True)
    try:
        yield
    finally:
        torch.use_deterministic_algorithms(det)
        torch.set_num_threads(threads)


@torch.no_grad()
def evaluate(model: torch.nn.Module, x: torch.Tensor, y: torch.Tensor) -> tuple[float, float]:
    """Mean cross-entropy and accuracy of ``model`` in evaluation mode (BN uses its running
    statistics). A non-finite loss is returned as ``nan``."""
    was_training = model.training
    model.eval()
    logits = model(x)
    loss = float(F.cross_entropy(logits, y))
    accuracy = float((logits.argmax(dim=1) == y).float().mean())
    model.train(was_training)
    return (loss if math.isfinite(loss) else float("nan")), accuracy


@torch.no_grad()
def per_class_accuracy(model: torch.nn.Module, x: torch.Tensor, y: torch.Tensor) -> list[float]:
    """Accuracy on the images of each class ``0 .. 9`` (evaluation mode); ``nan`` for a class
    with no image in ``y``."""
    was_training = model.training
    model.eval()
    correct = model(x).argmax(dim=1) == y
    model.train(was_training)
    out = []
    for c in range(NUM_CLASSES):
        mask = y == c
        out.append(float(correct[mask].float().mean()) if mask.any() else float("nan"))
    return out


def run_failed(record: dict) -> bool:
    """``True`` when the run diverged (non-finite loss) or ended with a training loss of at
    least :data:`FAILURE_LOSS` (no better than chance); works on rounded records too."""
    loss = record["final"]["train_loss"]
    return bool(record["diverged"] or loss is None or not math.isfinite(loss)
                or loss >= FAILURE_LOSS)


def _eval_steps(total: int) -> list[int]:
    """``NUM_EVALS`` evenly spaced steps in ``(0, total]`` (no step 0: a per-time-step BN
    has no running statistics before its first training step)."""
    return sorted({int(s) for s in np.linspace(0, total, NUM_EVALS + 1)[1:].round()} - {0})


def train_run(spec: RunSpec, data: EvidenceData | None = None) -> dict:
    """Train the model of ``spec`` and return its record (a JSON-ready dict).

    The record is the second element of :func:`train_model`; see there for its keys.
    """
    return train_model(spec, data)[1]


def train_model(spec: RunSpec, data: EvidenceData | None = None):
    """Train the model of ``spec``; return ``(model, record)`` with the trained model in
    evaluation mode and its record (a JSON-ready dict).

    Record keys: ``spec`` (the RunSpec as a dict), ``steps`` (optimizer steps taken),
    ``diverged`` (a non-finite training loss stopped the run), ``curve`` (``step``,
    ``train_loss``, ``val_acc``, ``test_acc`` at 16 evenly spaced steps, evaluation mode),
    ``final`` (``train_loss``, ``train_acc``, ``val_loss``, ``val_acc``, ``test_loss``,
    ``test_acc`` in evaluation mode, ``val_acc_per_class`` and ``test_acc_per_class``: ten
    accuracies, one per digit, and ``minibatch_loss_last_epoch``: the mean training-mode
    loss over the last epoch's mini-batches, which for BN uses batch statistics).

    ``data`` defaults to the split of ``spec.seed`` (:func:`~.data.load_evidence_data`).
    """
    data = load_evidence_data(spec.seed) if data is None else data
    x_tr, y_tr = as_model_input(data.x_train, spec.model), data.y_train
    x_va, y_va = as_model_input(data.x_val, spec.model), data.y_val
    x_te, y_te = as_model_input(data.x_test, spec.model), data.y_test
    n = len(y_tr)
    if not 2 <= spec.batch_size <= n:
        raise ValueError(f"batch_size must be in [2, {n}], got {spec.batch_size}")
    if not spec.lr > 0:
        raise ValueError(f"lr must be positive, got {spec.lr}")
    total = spec.total_steps(n)
    per_epoch = n // spec.batch_size
    eval_at = set(_eval_steps(total))
    curve = {"step": [], "train_loss": [], "val_acc": [], "test_acc": []}

    def log(step: int) -> None:
        train_loss, _ = evaluate(model, x_tr, y_tr)
        curve["step"].append(step)
        curve["train_loss"].append(train_loss)
        curve["val_acc"].append(evaluate(model, x_va, y_va)[1])
        curve["test_acc"].append(evaluate(model, x_te, y_te)[1])

    # seeded: initialization drawn from spec.seed; the caller's global RNG state is restored
    with deterministic_torch(), seeded(spec.seed):
        model = build_model(spec.model, spec.norm)
        optimizer = torch.optim.Adam(model.parameters(), lr=spec.lr)
        order = torch.Generator().manual_seed(10_000 + spec.seed)
        model.train()
        step, diverged, recent = 0, False, []
        while step < total and not diverged:
            perm = torch.randperm(n, generator=order)
            recent = []
            for i in range(per_epoch):  # the last incomplete batch is dropped
                idx = perm[i * spec.batch_size:(i + 1) * spec.batch_size]
                loss = F.cross_entropy(model(x_tr[idx]), y_tr[idx])
                if not torch.isfinite(loss):
                    diverged = True
                    break
                optimizer.zero_grad()
                loss.backward()
                optimizer.step()
                recent.append(float(loss.detach()))
                step += 1
                if step in eval_at:
                    log(step)
                if step >= total:
                    break
        if diverged and step > 0 and (not curve["step"] or curve["step"][-1] != step):
            log(step)
        final = {}
        for name, x, y in (("train", x_tr, y_tr), ("val", x_va, y_va), ("test", x_te, y_te)):
            final[f"{name}_loss"], final[f"{name}_acc"] = evaluate(model, x, y)
        final["val_acc_per_class"] = per_class_accuracy(model, x_va, y_va)
        final["test_acc_per_class"] = per_class_accuracy(model, x_te, y_te)
        final["minibatch_loss_last_epoch"] = float(np.mean(recent)) if recent else float("nan")
    model.eval()
    return model, {"spec": spec.as_dict(), "steps": step, "diverged": diverged,
                   "curve": curve, "final": final}


@torch.no_grad()
def recalibrate_batch_norm(model: torch.nn.Module, x: torch.Tensor) -> int:
    """Replace every BatchNorm layer's running statistics by the exact statistics of ``x``.

    Each ``BatchNorm1d``/``BatchNorm2d`` of :mod:`layernorm_tutorial.nn` is reset and switched
    to a cumulative average (``momentum=None``); one forward pass of all of ``x`` in training
    mode then stores the mean and (unbiased) variance of its inputs over ``x``. Weights are not
    touched. The model is left in evaluation mode; returns the number of layers recalibrated.
    """
    from layernorm_tutorial import nn as lnn

    layers = [m for m in model.modules() if isinstance(m, (lnn.BatchNorm1d, lnn.BatchNorm2d))]
    saved = [m.momentum for m in layers]
    for m in layers:
        m.reset_running_stats()
        m.momentum = None
    model.train()
    with deterministic_torch():
        model(x)
    for m, momentum in zip(layers, saved, strict=True):
        m.momentum = momentum
    model.eval()
    return len(layers)
