"""Online learning: a classifier that learns from a stream, one sample per step.

The book's batch-norm chapter uses it for the "batch size 1" case of online learning. The
stream is scikit-learn's digits training set in a seeded random order (``training.
load_digits_split``); at every step the model first *predicts* the incoming sample (the
"prequential" score of online learning: test, then train), then takes one optimizer step on
that single sample. A batch norm in training mode cannot take such a step: the variance of
one value per channel is zero (the package's ``BatchNorm1d`` raises ``ValueError``, as
torch's does); a layer norm normalizes the sample over its own features and trains as usual.
"""

from __future__ import annotations

import numpy as np
import torch
from torch import nn

from layernorm_tutorial.lab.common.stored_results import BOOK_DATA
from layernorm_tutorial.lab.common.training import DigitsData
from layernorm_tutorial.nn import BatchNorm1d, LayerNorm

__all__ = ["NORMS", "stream_mlp", "train_on_stream", "online_runs", "path_summary",
           "HEAD_IMAGES", "PATHS_FILE", "PATHS_COMMAND", "online_table", "online_glue",
           "OnlineCheck", "check_against_stored"]

#: The spread of :func:`path_summary` over the numerics paths, stored by ``PATHS_COMMAND``.
PATHS_FILE = BOOK_DATA / "ln_vs_bn_online_paths.json"
PATHS_COMMAND = "python -m layernorm_tutorial.lab.ln_vs_bn"

#: How many test images' final logits a numerics-path measurement keeps per run.
HEAD_IMAGES = 8

NORMS = ("layernorm", "batchnorm", "none")


def stream_mlp(norm: str, hidden: int = 64, in_features: int = 64, classes: int = 10,
               seed: int = 0) -> nn.Sequential:
    """``Linear(in_features, hidden) -> norm -> ReLU -> Linear(hidden, classes)``.

    ``norm`` is ``"layernorm"`` (the package's ``LayerNorm(hidden)``), ``"batchnorm"``
    (``BatchNorm1d(hidden)``) or ``"none"``. The linear layers' initial weights come from
    ``seed`` (the same for every ``norm``); the caller's global random state is untouched.
    """
    if norm not in NORMS:
        raise ValueError(f"norm must be one of {NORMS}, got {norm!r}")
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        first, last = nn.Linear(in_features, hidden), nn.Linear(hidden, classes)
    middle = {"layernorm": lambda: LayerNorm(hidden), "batchnorm": lambda: BatchNorm1d(hidden),
              "none": nn.Identity}[norm]()
    return nn.Sequential(first, middle, nn.ReLU(), last)


def train_on_stream(model: nn.Module, data: DigitsData, *, lr: float = 1e-2,
                    seed: int = 0, window: int = 200,
                    dtype: torch.dtype | None = None) -> dict:
    """One pass over ``data``'s training set, one sample per Adam step (batch size 1).

    The stream order is a permutation drawn from ``seed``. Before each step the model, in
    training mode, predicts the incoming sample ``x`` of shape ``(1, in_features)``.
    Returns NumPy arrays: ``prequential_accuracy`` (fraction of correct predictions in each
    consecutive ``window`` of the stream; a last, shorter window is dropped),
    ``checkpoints`` (stream positions, multiples of ``window``) and ``test_accuracy`` (the
    model's accuracy on ``data``'s test set, in evaluation mode, at each checkpoint).
    A ``ValueError`` from the model (batch norm in training mode at batch size 1) propagates.
    ``dtype`` (e.g. ``torch.float64``) converts the model and the data first; the default
    keeps the model's dtype. Also returned: ``test_logits``, the final model's logits on the
    test set, ``(n_test, classes)``.
    """
    if not lr > 0:
        raise ValueError(f"lr must be positive, got {lr!r}")
    if isinstance(window, bool) or not isinstance(window, int) or window < 1:
        raise ValueError(f"window must be a positive int, got {window!r}")
    if dtype is not None:
        model = model.to(dtype)
    dtype = next(model.parameters()).dtype
    x_train, x_test = data.x_train.to(dtype), data.x_test.to(dtype)
    optimizer = torch.optim.Adam(model.parameters(), lr=lr)
    order = torch.randperm(len(data.y_train), generator=torch.Generator().manual_seed(seed))
    correct, checkpoints, test_accuracy = [], [], []
    for position, index in enumerate(order.tolist(), start=1):
        model.train()
        x, y = x_train[index:index + 1], data.y_train[index:index + 1]        # (1, 64), (1,)
        logits = model(x)
        correct.append(bool(logits.argmax(dim=1) == y))                        # test ...
        loss = nn.functional.cross_entropy(logits, y)                          # ... then train
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        if position % window == 0:
            model.eval()
            with torch.no_grad():
                logits_test = model(x_test)
                predictions = logits_test.argmax(dim=1)
            checkpoints.append(position)
            test_accuracy.append(float((predictions == data.y_test).double().mean()))
    blocks = len(correct) // window
    prequential = np.array(correct[:blocks * window], dtype=float).reshape(blocks, window)
    model.eval()
    with torch.no_grad():
        logits_test = model(x_test)
    return {"prequential_accuracy": prequential.mean(axis=1),
            "checkpoints": np.array(checkpoints), "test_accuracy": np.array(test_accuracy),
            "test_logits": logits_test.numpy()}


def online_runs(norms=("layernorm", "none"), seeds=(0, 1, 2), float64: bool = True) -> dict:
    """The chapter's online-learning runs, JSON-able (for ``numerics_paths.run_on_paths``):
    ``{norm: [per seed {"prequential_accuracy", "test_accuracy", "test_logits"}]}`` on the
    digits' training stream, windows of a quarter of the stream, single-threaded; in float64
    by default, where a different numerics path changes the printed digits of none of them
    (``lab.ln_vs_bn`` measures it)."""
    from layernorm_tutorial.lab.common.training import load_digits_split

    torch.set_num_threads(1)
    digits = load_digits_split()
    quarter = len(digits.y_train) // 4
    dtype = torch.float64 if float64 else torch.float32
    out = {}
    for norm in norms:
        runs = [train_on_stream(stream_mlp(norm, seed=s), digits, seed=s, window=quarter,
                                dtype=dtype) for s in seeds]
        out[norm] = [{k: r[k].tolist() for k in ("prequential_accuracy", "test_accuracy",
                                                 "test_logits")} for r in runs]
    return out


def path_summary(float64: bool = True) -> dict:
    """What a numerics-path measurement keeps of :func:`online_runs`: per norm and seed the
    prequential and test accuracies and the final logits of the first ``HEAD_IMAGES`` test
    images (flattened). JSON-able, for ``numerics_paths.run_on_paths``."""
    runs = online_runs(float64=float64)
    return {norm: [{"prequential_accuracy": r["prequential_accuracy"],
                    "test_accuracy": r["test_accuracy"],
                    "logits_head": [v for row in r["test_logits"][:HEAD_IMAGES] for v in row]}
                   for r in per_seed] for norm, per_seed in runs.items()}


def online_table(runs: dict) -> str:
    """Per norm and seed: the fraction of the first and last quarter of the stream predicted
    correctly, and the test accuracy after the stream (within 80 columns)."""
    lines = ["fraction predicted correctly in the first and the last quarter of the",
             "stream, and test accuracy after one pass",
             f"{'norm':10s}{'seed':>5s}{'1st quarter':>13s}{'4th quarter':>13s}"
             f"{'test accuracy':>15s}"]
    for norm, per_seed in runs.items():
        for seed, run in enumerate(per_seed):
            preq = run["prequential_accuracy"]
            lines.append(f"{norm:10s}{seed:>5d}{preq[0]:>13.3f}{preq[-1]:>13.3f}"
                         f"{run['test_accuracy'][-1]:>15.3f}")
    return "\n".join(lines)


def online_glue(runs: dict) -> dict:
    """The values the chapter's prose quotes: layer norm's mean first- and last-quarter
    scores, and the range of each norm's final test accuracy."""
    def final(norm):
        acc = [r["test_accuracy"][-1] for r in runs[norm]]
        return f"{min(acc):.2f}–{max(acc):.2f}"

    ln = runs["layernorm"]
    return {"online_ln_first": f"{np.mean([r['prequential_accuracy'][0] for r in ln]):.2f}",
            "online_ln_last": f"{np.mean([r['prequential_accuracy'][-1] for r in ln]):.2f}",
            "online_ln_test": final("layernorm"), "online_none_test": final("none")}


class OnlineCheck:
    """A live :func:`online_runs` against the stored native-path values of the measurement
    file: the accuracies must be equal (their measured spread over the paths is 0), the
    first test images' logits within ``factor`` times their measured relative spread (at
    least ``floor``)."""

    def __init__(self, runs: dict, doc: dict, factor: float = 10.0, floor: float = 1e-12):
        record = doc["online"]
        stored = record["values"]["native"]
        self.paths = len(record["values"])
        self.spread = float(record["relative_spread"])
        self.tolerance = factor * max(self.spread, floor)
        self.factor, self.floor = factor, floor
        self.accuracies_equal = True
        self.logit_gap = 0.0
        for norm, per_seed in stored.items():
            for live, kept in zip(runs[norm], per_seed, strict=True):
                for key in ("prequential_accuracy", "test_accuracy"):
                    self.accuracies_equal &= bool(np.allclose(live[key], kept[key], rtol=0,
                                                              atol=1e-12))
                head = np.asarray(live["test_logits"][:HEAD_IMAGES], dtype=float).ravel()
                ref = np.asarray(kept["logits_head"], dtype=float)
                scale = np.maximum(np.abs(ref), 1e-12)
                self.logit_gap = max(self.logit_gap, float((np.abs(head - ref) / scale).max()))

    @property
    def passed(self) -> bool:
        return self.accuracies_equal and self.logit_gap <= self.tolerance

    def text(self) -> str:
        return ("this machine's run equals the stored one: the same accuracies, and the\n"
                f"  first test images' logits within {self.tolerance:.0e} (relative; "
                f"{self.factor:g} x the\n  spread {self.spread:.0e} measured over "
                f"{self.paths} numerics paths)")


def check_against_stored(runs: dict, doc: dict) -> OnlineCheck:
    """:class:`OnlineCheck`; raises ``AssertionError`` when this machine's run differs."""
    check = OnlineCheck(runs, doc)
    if not check.passed:
        raise AssertionError(f"the online runs differ from the stored ones: accuracies equal "
                             f"{check.accuracies_equal}, logit gap {check.logit_gap:.1e} "
                             f"against the tolerance {check.tolerance:.1e}")
    return check
