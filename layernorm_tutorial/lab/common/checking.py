"""Shared machinery for exercise checkers: a result object and a tolerant comparison."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class CheckResult:
    """Outcome of one checker run.

    ``passed`` is the verdict; ``message`` tells the reader what was checked or, on failure,
    what is wrong (for example "variance is unbiased: divide by N, not N-1").
    """

    passed: bool
    message: str

    def __bool__(self) -> bool:
        return self.passed

    def __str__(self) -> str:
        return ("PASS: " if self.passed else "FAIL: ") + self.message

    def _repr_pretty_(self, printer, cycle):  # IPython shows the verdict, not the dataclass
        printer.text(str(self))


def as_numpy(value) -> np.ndarray:
    """Convert a NumPy array, torch tensor or scalar to a float64 NumPy array."""
    if hasattr(value, "detach"):
        value = value.detach().cpu().numpy()
    return np.asarray(value, dtype=np.float64)


def allclose(actual, expected, *, rtol: float = 1e-6, atol: float = 1e-8) -> bool:
    """True when shapes agree and values match to the tolerances (NaNs never match)."""
    a, e = as_numpy(actual), as_numpy(expected)
    return a.shape == e.shape and bool(np.allclose(a, e, rtol=rtol, atol=atol))


# --------------------------------------------------------------------------- diagnosis
# A checker compares the reader's output with the correct one and, on failure, with the
# outputs of *mistake models* (programs with one classic error each). A mistake is named only
# when it tells, beyond doubt, what happened: on at least one case the mistake and the correct
# answer differ by far more than the tolerance (SEPARATION times), and on every case the
# reader's output sits much closer to the mistake than to the correct answer
# (within MATCH of their separation, or within the tolerance where they coincide).
SEPARATION, MATCH = 100.0, 0.01

FLOAT64_TOLERANCE = (1e-6, 1e-8)      # rtol, atol for float64 output
FLOAT32_TOLERANCE = (1e-4, 1e-5)      # for float32 / float16 output: its own precision


def is_pair(result) -> bool:
    """A length-2 tuple or list (``(out, cache)`` or ``[out, cache]``)."""
    return isinstance(result, tuple | list) and len(result) == 2


def output_dtype(value) -> np.dtype:
    """The floating dtype the reader's output was computed in (float64 for non-floats)."""
    if hasattr(value, "detach"):
        return {"torch.float32": np.dtype(np.float32), "torch.float16": np.dtype(np.float16),
                "torch.bfloat16": np.dtype(np.float16)}.get(str(value.dtype),
                                                           np.dtype(np.float64))
    dtype = np.asarray(value).dtype
    return dtype if dtype in (np.float32, np.float16) else np.dtype(np.float64)


def tolerance(expected, dtype=np.float64) -> float:
    """Absolute tolerance of a comparison with ``expected`` at the precision of ``dtype``."""
    rtol, atol = FLOAT64_TOLERANCE if np.dtype(dtype) == np.float64 else FLOAT32_TOLERANCE
    e = as_numpy(expected)
    scale = float(np.max(np.abs(e))) if e.size and np.all(np.isfinite(e)) else 1.0
    return atol + rtol * scale


def _distance(a, b) -> float:
    a, b = as_numpy(a), as_numpy(b)
    if a.shape != b.shape:
        return float("inf")
    if a.size == 0:
        return 0.0
    diff = np.abs(a - b)
    both_nan = np.isnan(a) & np.isnan(b)
    diff[both_nan] = 0.0
    return float(np.nanmax(np.where(np.isnan(diff), np.inf, diff)))


def within(actual, expected, tol: float) -> bool:
    """Same shape and ``max |actual - expected| <= tol`` (NaN matches only NaN)."""
    return _distance(actual, expected) <= tol


def diagnose(cases) -> str | None:
    """Name the mistake that explains the reader's outputs, or None.

    ``cases`` is a list of ``(actual, expected, tol, mistakes)`` with ``mistakes`` a dict
    ``message -> predicted output`` (None or a missing key: the model does not apply to that
    case). Returns the message of the closest mistake that explains every case where it
    applies, by the rule described above; None when no mistake does.
    """
    best, best_score = None, float("inf")
    messages = []
    for _, _, _, mistakes in cases:
        messages += [m for m in mistakes if m not in messages]
    for message in messages:
        separated, score, explains = False, 0.0, True
        for actual, expected, tol, mistakes in cases:
            predicted = mistakes.get(message)
            if predicted is None:
                continue
            sep = _distance(predicted, expected)
            dist = _distance(actual, predicted)
            if sep > SEPARATION * tol:
                separated = True
            if not dist <= max(10 * tol, MATCH * sep):
                explains = False
                break
            score = max(score, dist / max(sep, tol))
        if explains and separated and score < best_score:
            best, best_score = message, score
    return best
