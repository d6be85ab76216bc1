"""Shared machinery for exercise checkers: a result object, a tolerant comparison, the
diagnosis of classic mistakes, and :func:`checker`, which makes every checker survive any
return value of the reader's code (None, a wrong type, a wrong shape) with one sentence."""

from __future__ import annotations

import functools
import inspect
import numbers
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


# --------------------------------------------------------------------------- bad returns
# A reader's function may return anything: None (a forgotten ``return``), a string, an
# array of the wrong shape. Every public checker is wrapped by :func:`checker`, so that the
# reader always gets a failed CheckResult with one sentence, never a traceback from inside the
# checker.


class ReaderOutputError(BaseException):
    """What the reader's code returned cannot be checked; ``str(error)`` is one sentence.

    A BaseException on purpose: checkers wrap the reader's calls in ``except Exception`` to
    report the reader's own errors ("forward raised ..."), and must not swallow this one;
    :func:`checker` turns it into a failed :class:`CheckResult`.
    """


def reader_name(fn) -> str:
    """``your function `name``` (``your method `name``` for a method of the reader's class),
    ``your function`` for a lambda."""
    name = getattr(fn, "__name__", "")
    kind = "method" if inspect.ismethod(fn) else "function"
    return f"your {kind} `{name}`" if name.isidentifier() else f"your {kind}"


def describe(value) -> str:
    """A few words for a returned value: ``None``, ``a str ('abc')``, ``an array of shape
    (7,)``, ``a tuple of 2 items``."""
    if value is None:
        return "None"
    if hasattr(value, "shape") and hasattr(value, "dtype") and not np.isscalar(value):
        kind = "tensor" if hasattr(value, "detach") else "array"
        return f"{_article(kind)} of shape {tuple(value.shape)}"
    if isinstance(value, tuple | list):
        return f"a {type(value).__name__} of {len(value)} items"
    if isinstance(value, str | bytes | numbers.Number):
        text = repr(value)
        text = text if len(text) <= 30 else text[:27] + "..."
        return f"{_article(type(value).__name__)} ({text})"
    return _article(type(value).__name__)


def _article(noun: str) -> str:
    return ("an " if noun[:1].lower() in "aeiou" else "a ") + noun


def returned_none(fn) -> ReaderOutputError:
    """The one sentence for a forgotten ``return``."""
    return ReaderOutputError(f"{reader_name(fn)} returned None: did you forget `return`?")


def reader_array(value, fn, expected_shape=None, what: str = "the output") -> np.ndarray:
    """The reader's output ``value`` as a float64 array of ``expected_shape`` (any shape if
    None); raises :class:`ReaderOutputError` with one sentence for None, for a value that is
    not numbers, and for a wrong shape. ``what`` names the output ("the output", "dx")."""
    try:
        if value is None:  # np.asarray(None, float) would be NaN
            raise TypeError
        array = as_numpy(value)
    except (TypeError, ValueError, RuntimeError):
        raise ReaderOutputError(f"{reader_name(fn)} returned {describe(value)} as {what}, "
                                "not an array of numbers") from None
    if expected_shape is not None and array.shape != tuple(expected_shape):
        raise ReaderOutputError(f"{reader_name(fn)} returned {what} of shape {array.shape}, "
                                f"expected shape {tuple(expected_shape)}")
    return array


def reader_tuple(value, fn, length: int, what: str) -> tuple:
    """The reader's output as a tuple of ``length`` items (a tuple or a list); raises
    :class:`ReaderOutputError` otherwise. ``what`` names the items, e.g. ``"(mean, var)"``."""
    if value is None:
        raise returned_none(fn)
    if not (isinstance(value, tuple | list) and len(value) == length):
        raise ReaderOutputError(f"{reader_name(fn)} returned {describe(value)}; return "
                                f"{what}")
    return tuple(value)


def checker(returns: str):
    """Decorate a public exercise checker so that it survives any return value.

    The reader's callables among the arguments (functions, not classes) are watched: a call
    that returns None fails the check at once with "your function `f` returned None: did you
    forget `return`?". A :class:`ReaderOutputError` raised by the checker (for instance by
    :func:`reader_array`) becomes a failed CheckResult with its sentence; any other exception
    escaping the checker is blamed on the last value the reader returned, in one sentence
    that says what to return (``returns``, e.g. "an array of the input's shape").
    """
    def decorate(check):
        signature = inspect.signature(check)

        @functools.wraps(check)
        def run(*args, **kwargs):
            bound = signature.bind(*args, **kwargs)
            last: dict = {}
            for name, value in bound.arguments.items():
                if callable(value) and not isinstance(value, type):
                    bound.arguments[name] = _watched(value, last)
            try:
                return check(*bound.args, **bound.kwargs)
            except ReaderOutputError as error:
                return CheckResult(False, str(error))
            except Exception as error:  # the checker choked on what the reader returned
                lines = str(error).strip().splitlines()
                detail = f"{type(error).__name__}: {lines[0] if lines else ''}".rstrip(": ")
                what = (f"{reader_name(last['fn'])} returned {describe(last['value'])}"
                        if last else "your code produced something")
                return CheckResult(False, f"{what}, which the checker cannot use ({detail}); "
                                   f"it should return {returns}")

        run.returns = returns
        return run

    return decorate


def _watched(fn, last: dict):
    """``fn`` that records its last return value in ``last`` and refuses None."""
    @functools.wraps(fn)
    def call(*args, **kwargs):
        value = fn(*args, **kwargs)
        last["fn"], last["value"] = fn, value
        if value is None:
            raise returned_none(fn)
        return value

    return call
