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
