"""The checker for the Welford exercise of the backward chapter.

``check_welford_update(update)``: ``update(count, mean, m2, value) -> (count, mean, m2)``, one
value at a time (:func:`layernorm_tutorial.variance_algorithms.welford_update` is the
reference solution).
"""

from __future__ import annotations

import numpy as np

from layernorm_tutorial.lab.common.checking import (
    CheckResult,
    ReaderOutputError,
    checker,
    describe,
    reader_name,
    reader_tuple,
)

__all__ = ["check_welford_update"]


def _feed(update, values, count, mean, m2):
    """``(count, mean, m2)`` after feeding ``values`` one at a time; each return value must be
    a triple of numbers (:class:`ReaderOutputError` otherwise)."""
    for value in values:
        result = reader_tuple(update(count, mean, m2, value), update, 3,
                              "the triple (count, mean, m2)")
        for label, item in zip(("count", "mean", "m2"), result, strict=True):
            try:
                number = np.ndim(item) == 0 and not isinstance(item, str | bytes)
                float(item)
            except (TypeError, ValueError):
                number = False
            if not number:
                raise ReaderOutputError(f"{reader_name(update)} returned {describe(item)} as "
                                        f"{label}; return the triple (count, mean, m2) of "
                                        "numbers")
        count, mean, m2 = result
    return count, mean, m2


@checker(returns="the triple (count, mean, m2) of numbers")
def check_welford_update(update, *, seed: int = 0) -> CheckResult:
    """Check a one-value Welford update on a float64 stream and on a float32 stream far from 0."""
    rng = np.random.default_rng(seed)
    stream = rng.standard_normal(200) * 2 + 3
    try:
        count, mean, m2 = _feed(update, (float(v) for v in stream), 0, 0.0, 0.0)
    except Exception as error:
        return CheckResult(False, f"update raised {type(error).__name__}: {error}")
    if count != len(stream):
        return CheckResult(False, f"after {len(stream)} updates count is {count}: add 1 per value")
    if not np.isclose(float(mean), stream.mean(), rtol=1e-10, atol=1e-12):
        return CheckResult(False, "the running mean is wrong: mean_new = mean + delta / count_new "
                                  "with delta = value - mean")
    m2_expected = ((stream - stream.mean()) ** 2).sum()
    if not np.isclose(float(m2), m2_expected, rtol=1e-9):
        m2_old_mean = 0.0
        c, mu = 0, 0.0
        for value in stream:  # the common slip: delta * delta with the old mean twice
            c += 1
            delta = value - mu
            mu += delta / c
            m2_old_mean += delta * delta
        hint = ("m2 must be updated with delta * (value - mean_new), the old and the new mean"
                if np.isclose(float(m2), m2_old_mean, rtol=1e-9) else
                "m2 (the sum of squared deviations) is wrong")
        return CheckResult(False, hint)
    # float32, mean 1e4, std 1: the naive formula loses every digit here, Welford must not.
    values = (1e4 + rng.standard_normal(1000)).astype(np.float32)
    try:
        count, mean, m2 = _feed(update, values, 0, np.float32(0), np.float32(0))
    except Exception as error:
        return CheckResult(False, f"update raised {type(error).__name__} on the float32 stream: "
                                  f"{error}")
    variance = float(m2) / count
    reference = float(np.var(values.astype(np.float64)))
    relative = abs(variance - reference) / reference
    if not relative < 1e-2:
        return CheckResult(False, f"in float32 with mean 1e4 the variance is off by "
                                  f"{relative:.1%}: keep the update in terms of deviations from "
                                  f"the running mean (never accumulate sum(x**2))")
    return CheckResult(True, f"mean and m2 are exact in float64; float32 stream at mean 1e4 has "
                             f"relative variance error {relative:.1e}")
