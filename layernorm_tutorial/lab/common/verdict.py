r"""The book's one verdict method (version 2): how a comparison between two arms becomes a word.

Every comparison in the book (faster, more stable, better, allows larger learning rates) is
judged here and nowhere else; every judged claim is registered, with its threshold, in
:mod:`~layernorm_tutorial.lab.common.claims` before its runs. The rule, written down once
(the evidence chapter's section "How we judge a claim" shows it with the formula):

1. **Seeds.** Each arm runs on the same ``n >= 5`` reported seeds; seed ``s`` fixes the
   initialization *and* the train/validation split of both arms, so the runs pair up.
   Hyperparameters are chosen on *tuning* seeds that are never reported (:func:`seed_plan`).
2. **Effect.** The paired differences ``d_s = m_claimed(s) - m_baseline(s)``, oriented so that
   a positive ``d`` is what the claim predicts (sign flipped where lower is better). The
   effect is their mean :math:`\bar d`.
3. **Interval.** A two-sided 95% Student-t interval :math:`[L, H]` for the mean paired
   difference, :math:`\bar d \pm t_{0.975,\,n-1}\, s_d/\sqrt{n}` (``ddof=1``).
4. **Threshold.** A practical size :math:`\delta > 0` from the claims registry.
5. **Word.** Symmetric in the two directions, with an outcome for "too small to matter":

   ===================  ===========================================  ============================
   word                 condition                                    what it says
   ===================  ===========================================  ============================
   holds                ``L > 0`` and ``d >= delta``                 claimed direction, estimate
                                                                     at least delta
   contradicted         ``H < 0`` and ``d <= -delta``                the mirror image
   too small to matter  ``-delta < L`` and ``H < delta``             no effect of size delta,
                                                                     either way (equivalence,
                                                                     TOST at 2.5% per side)
   not shown            otherwise                                    this experiment cannot tell
   ===================  ===========================================  ============================

   (``[L, H]``: the interval; ``d``: the estimate :math:`\bar d`; ``delta``: the threshold.)

   The four conditions never overlap. *holds* does not say that the whole interval clears
   :math:`\delta`: :attr:`Verdict.clears_threshold` (:math:`L \ge \delta`, or :math:`H \le
   -\delta` for *contradicted*) says that, and the interval is always printed next to the word.
   A significant effect whose estimate falls short of :math:`\delta` while its interval still
   reaches :math:`\delta` is *not shown*: its size is not settled.

**Discrete outcomes** (a learning-rate ladder: the first rung that fails, the last that trains)
are interval-censored: each seed gives only the bounds of its ratio (:func:`rung_bounds`,
:func:`ladder_verdict`). Their interval is the distribution-free 95% interval for the median
log-ratio built from order statistics of those bounds, and the words follow the same table with
the median's bounds in place of :math:`\bar d` (*holds* needs the median's lower bound to reach
:math:`\delta`, *contradicted* its upper bound to reach :math:`-\delta`). With ``n = 5`` no
such interval exists (the smallest two-sided sign-test p-value is :math:`2/2^5 = 0.0625`):
five seeds cannot settle a ladder claim, whatever the data; six can.

**Many comparisons.** Each chapter is one family. :func:`holm` marks the verdicts whose word
survives Holm's step-down correction at a family-wise 5% (p-values: :attr:`Verdict.p`), and
:func:`verdict_table` prints a chapter's verdicts with the mark :data:`HOLM_MARK`.

The interval is printed next to the word wherever a verdict is shown (:meth:`Verdict.text`).
"""

from __future__ import annotations

import math
import textwrap
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from scipy import stats

__all__ = ["MIN_SEEDS", "CONFIDENCE", "ALPHA", "HOLDS", "CONTRADICTED", "TOO_SMALL", "NOT_SHOWN",
           "WORDS", "WORD_MEANINGS", "DECIDED", "HOLM_MARK", "LADDER_TOO_FEW", "Verdict",
           "LadderVerdict", "decide", "paired_verdict", "rung_bounds", "ladder_verdict",
           "ladder_min_seeds", "sign_test_p", "holm", "holm_adjusted", "holm_sentence",
           "verdict_table", "seed_plan"]

MIN_SEEDS = 5
CONFIDENCE = 0.95
ALPHA = 1 - CONFIDENCE

# The words (translated in the Chinese edition: keep them constants).
HOLDS = "holds"
CONTRADICTED = "contradicted"
TOO_SMALL = "too small to matter"
NOT_SHOWN = "not shown"
WORDS = (HOLDS, CONTRADICTED, TOO_SMALL, NOT_SHOWN)
DECIDED = (HOLDS, CONTRADICTED, TOO_SMALL)
#: One line per word: the exact condition (L, H: the 95% interval; d: the estimate;
#: delta: the registered threshold).
WORD_MEANINGS = {
    HOLDS: "L > 0 and d >= delta: the claimed direction, estimate at least delta",
    CONTRADICTED: "H < 0 and d <= -delta: the opposite direction, estimate at least delta",
    TOO_SMALL: "-delta < L and H < delta: any effect is smaller than delta, both ways",
    NOT_SHOWN: "otherwise: this experiment cannot tell",
}
HOLM_MARK = "†"
LADDER_TOO_FEW = "too few seeds for a ladder"


def decide(low: float, high: float, estimate_low: float, estimate_high: float,
           threshold: float) -> str:
    """The word for an interval ``[low, high]`` and an estimate known to lie in
    ``[estimate_low, estimate_high]`` (equal for a mean), against ``threshold`` (see the
    module's table). Symmetric: negating everything swaps *holds* and *contradicted*."""
    if low > 0 and estimate_low >= threshold:
        return HOLDS
    if high < 0 and estimate_high <= -threshold:
        return CONTRADICTED
    if -threshold < low and high < threshold:
        return TOO_SMALL
    return NOT_SHOWN


def _fmt(x: float, f: str, scale: float) -> str:
    if math.isinf(x):
        return "+inf" if x > 0 else "-inf"
    return f.format(x * scale)


@dataclass(frozen=True)
class Verdict:
    """A judged comparison. ``effect``, ``low`` and ``high`` are in the metric's units,
    oriented so that positive is the claimed direction; ``p`` is the two-sided p-value of the
    test behind the word (:func:`holm` uses it)."""

    claim: str
    word: str
    effect: float
    low: float
    high: float
    threshold: float
    n: int
    differences: tuple[float, ...]
    method: str = "paired t, 95%"
    p: float = float("nan")
    claim_id: str = ""
    exploratory: bool = False

    @property
    def decided(self) -> bool:
        """Whether the word is one of :data:`DECIDED` (anything but *not shown*)."""
        return self.word in DECIDED

    @property
    def clears_threshold(self) -> bool:
        """Whether the whole interval lies beyond the threshold on the word's side
        (``low >= threshold`` for *holds*, ``high <= -threshold`` for *contradicted*)."""
        if self.word == HOLDS:
            return self.low >= self.threshold
        if self.word == CONTRADICTED:
            return self.high <= -self.threshold
        return False

    def interval(self, digits: int = 3, scale: float = 1.0, unit: str = "") -> str:
        """``+0.012 [+0.004, +0.020]`` (scaled, e.g. ``scale=100, unit=" pts"``)."""
        f = f"{{:+.{digits}f}}"
        return (f"{_fmt(self.effect, f, scale)}{unit} "
                f"[{_fmt(self.low, f, scale)}, {_fmt(self.high, f, scale)}]")

    def text(self, digits: int = 3, scale: float = 1.0, unit: str = "") -> str:
        """The word with its interval: ``holds: +0.012 [+0.004, +0.020], n = 5``; an
        exploratory result says so first."""
        head = "exploratory, " if self.exploratory else ""
        return f"{head}{self.word}: {self.interval(digits, scale, unit)}, n = {self.n}"

    def __str__(self) -> str:
        return self.text()


def _t_p_values(d: np.ndarray, threshold: float) -> tuple[float, float]:
    """``(p_zero, p_equivalence)``: the two-sided p of "mean = 0" and twice the larger of the
    two one-sided p-values of TOST against ``(-threshold, threshold)`` (so ``< ALPHA`` exactly
    when the 95% interval lies inside it)."""
    n = d.size
    se = d.std(ddof=1) / math.sqrt(n)
    mean = d.mean()
    if se == 0:
        p0 = 0.0 if mean != 0 else 1.0
        peq = 0.0 if abs(mean) < threshold else 1.0
        return p0, peq
    df = n - 1
    p0 = float(2 * stats.t.sf(abs(mean) / se, df))
    p_low = stats.t.sf((mean + threshold) / se, df)      # H0: mean <= -threshold
    p_high = stats.t.cdf((mean - threshold) / se, df)    # H0: mean >= +threshold
    return p0, float(min(1.0, 2 * max(p_low, p_high)))


def _word_p(word: str, p_zero: float, p_eq: float) -> float:
    if word in (HOLDS, CONTRADICTED):
        return p_zero
    if word == TOO_SMALL:
        return p_eq
    return min(p_zero, p_eq)


def _check_threshold(threshold) -> float:
    if isinstance(threshold, bool) or not (
            isinstance(threshold, (int, float)) and math.isfinite(threshold) and threshold > 0):
        raise ValueError(f"threshold must be a positive number fixed before the runs, "
                         f"got {threshold!r}")
    return float(threshold)


def paired_verdict(claimed, baseline, *, threshold: float, claim: str = "",
                   higher_is_better: bool = True, min_seeds: int = MIN_SEEDS,
                   claim_id: str = "", exploratory: bool = False) -> Verdict:
    """Judge "``claimed`` beats ``baseline``" from per-seed metrics, paired by seed.

    Args:
        claimed, baseline: shape ``(n,)``, the metric of each arm on the same ``n`` seeds.
        threshold: the practical size :math:`\\delta > 0` in the metric's units, registered
            before the runs (:mod:`~layernorm_tutorial.lab.common.claims`).
        higher_is_better: ``False`` for losses, steps or times (the sign of ``d`` is flipped).
        claim_id: the registry id, kept on the verdict; ``exploratory``: a post-hoc result
            (its text says so; :func:`holm` leaves it out).

    Returns:
        a :class:`Verdict`; its effect is :math:`\\bar d`, its interval
        :math:`\\bar d \\pm t_{0.975, n-1} s_d / \\sqrt{n}`, its word from :func:`decide`.
    """
    a = np.asarray(claimed, dtype=float)
    b = np.asarray(baseline, dtype=float)
    if a.ndim != 1 or a.shape != b.shape:
        raise ValueError(f"claimed and baseline must be 1-D of the same length (one value per "
                         f"seed), got shapes {a.shape} and {b.shape}")
    if a.size < min_seeds:
        raise ValueError(f"a verdict needs at least {min_seeds} seeds per arm, got {a.size}")
    if not (np.isfinite(a).all() and np.isfinite(b).all()):
        raise ValueError("claimed and baseline must be finite: score a diverged run explicitly "
                         "(e.g. chance accuracy) before judging")
    threshold = _check_threshold(threshold)
    d = (a - b) if higher_is_better else (b - a)
    n = d.size
    mean = float(d.mean())
    half = float(stats.t.ppf(0.5 + CONFIDENCE / 2, n - 1) * d.std(ddof=1) / math.sqrt(n))
    low, high = mean - half, mean + half
    word = decide(low, high, mean, mean, threshold)
    p0, peq = _t_p_values(d, threshold)
    return Verdict(claim, word, mean, low, high, threshold, n,
                   tuple(float(x) for x in d), p=_word_p(word, p0, peq), claim_id=claim_id,
                   exploratory=exploratory)


# ---- discrete outcomes: learning-rate ladders ------------------------------------------------


def rung_bounds(rungs: Sequence[float], rung: float | None, kind: str = "first_failure"
                ) -> tuple[float, float]:
    """The bounds ``(lo, hi)`` that a ladder outcome puts on the true critical value.

    ``rungs``: the ladder (increasing). ``kind="first_failure"``: ``rung`` is the first rung
    at which the run failed (``None``: it never failed), so the critical rate lies in
    ``(previous rung, rung]`` (``(0, rung]`` at the bottom, ``(top, inf)`` when censored).
    ``kind="last_success"``: ``rung`` is the largest rung that still worked (``None``: none
    did), so the critical rate lies in ``[rung, next rung)`` (``[top, inf)`` at the top,
    ``(0, bottom)`` when none worked).
    """
    r = sorted(float(x) for x in rungs)
    if not r or r[0] <= 0:
        raise ValueError(f"rungs must be positive learning rates, got {list(rungs)!r}")
    if kind not in ("first_failure", "last_success"):
        raise ValueError(f"kind must be 'first_failure' or 'last_success', got {kind!r}")
    if rung is None:
        return (r[-1], math.inf) if kind == "first_failure" else (0.0, r[0])
    matches = [i for i, x in enumerate(r) if math.isclose(x, float(rung), rel_tol=1e-9)]
    if not matches:
        raise ValueError(f"rung must be one of the ladder's rungs {r}, got {rung!r}")
    i = matches[0]
    if kind == "first_failure":
        return (r[i - 1] if i > 0 else 0.0, r[i])
    return (r[i], r[i + 1] if i + 1 < len(r) else math.inf)


def sign_test_p(successes: int, n: int) -> float:
    """Two-sided exact sign-test p-value when ``successes`` of ``n`` seeds agree (ties and
    undetermined seeds counted against): ``min(1, 2 P(Binomial(n, 1/2) >= successes))``."""
    return float(min(1.0, 2 * stats.binom.sf(successes - 1, n, 0.5)))


def ladder_min_seeds(alpha: float = ALPHA) -> int:
    """The fewest seeds for which all seeds agreeing reaches two-sided ``p < alpha``
    (6 at 5%: ``2 / 2**6 = 0.031``; five seeds give at best 0.0625)."""
    n = 1
    while sign_test_p(n, n) >= alpha:
        n += 1
    return n


def _median_interval_rank(n: int) -> int | None:
    """The largest ``k`` with ``P(x_(k) <= median <= x_(n-k+1)) >= CONFIDENCE`` (order
    statistics), or ``None`` when even ``k = 1`` falls short (``n <= 5``)."""
    best = None
    for k in range(1, n // 2 + 1):
        if 1 - 2 * stats.binom.cdf(k - 1, n, 0.5) >= CONFIDENCE:
            best = k
    return best


@dataclass(frozen=True)
class LadderVerdict:
    """A judged ladder comparison, in log units of base ``base`` (2: factors of two, 10:
    decades). ``bounds``: per seed, the open interval ``(lo, hi)`` of the log-ratio
    claimed/baseline (oriented: positive is the claimed direction); ``median_low`` and
    ``median_high`` bound the median log-ratio; ``low, high``: the distribution-free 95%
    interval for the median (``-inf, +inf`` when ``n`` is too small); ``p``: the two-sided
    sign-test p-value behind the word."""

    claim: str
    word: str
    median_low: float
    median_high: float
    low: float
    high: float
    threshold: float
    n: int
    bounds: tuple[tuple[float, float], ...]
    base: float = 2.0
    p: float = float("nan")
    claim_id: str = ""
    exploratory: bool = False
    method: str = "interval-censored ladder, sign test"

    @property
    def decided(self) -> bool:
        return self.word in DECIDED

    @property
    def too_few_seeds(self) -> bool:
        """Whether ``n`` is below :func:`ladder_min_seeds`: no data could decide."""
        return self.n < ladder_min_seeds()

    @property
    def effect(self) -> float:
        """The midpoint of the median's bounds when both are finite, else the finite one."""
        lo, hi = self.median_low, self.median_high
        if math.isfinite(lo) and math.isfinite(hi):
            return (lo + hi) / 2
        return lo if math.isfinite(lo) else hi

    def ratio(self, x: float) -> float:
        return 0.0 if x == -math.inf else (math.inf if x == math.inf else self.base ** x)

    def interval(self, digits: int = 3, scale: float = 1.0, unit: str = "") -> str:
        """``ratio in (1, 10), 95% (0, inf)``: the median ratio's bounds and its interval,
        as ratios (``digits`` significant digits; ``scale``/``unit`` are ignored)."""
        def g(x):
            r = self.ratio(x)
            return "inf" if math.isinf(r) else f"{r:.{digits}g}"
        return (f"ratio in ({g(self.median_low)}, {g(self.median_high)}), "
                f"95% ({g(self.low)}, {g(self.high)})")

    def text(self, digits: int = 3, scale: float = 1.0, unit: str = "") -> str:
        """``not shown: ratio in (1, 10), 95% (0, inf), n = 5 (too few seeds for a ladder)``."""
        head = "exploratory, " if self.exploratory else ""
        tail = f" ({LADDER_TOO_FEW})" if self.too_few_seeds else ""
        return f"{head}{self.word}: {self.interval(digits)}, n = {self.n}{tail}"

    def __str__(self) -> str:
        return self.text()


def ladder_verdict(claimed, baseline, *, threshold: float, base: float = 2.0,
                   claim: str = "", higher_is_better: bool = True, claim_id: str = "",
                   exploratory: bool = False) -> LadderVerdict:
    """Judge "``claimed`` tolerates a larger rate than ``baseline``" from ladder outcomes.

    Args:
        claimed, baseline: per seed, the bounds ``(lo, hi)`` of each arm's critical rate
            (:func:`rung_bounds`), paired by seed; shape ``(n, 2)``.
        threshold: the practical size in log-``base`` units (1 with ``base=2``: a factor of
            two; 0.25 with ``base=10``: a quarter of a decade).
        higher_is_better: ``False`` when a smaller critical rate is the claim.

    Per seed the ratio claimed/baseline lies in ``(lo_c / hi_b, hi_c / lo_b)``; the words
    follow :func:`decide` with the median's bounds and the order-statistic 95% interval
    ``[lo_(k), hi_(n-k+1)]`` (conservative: lower ends from lower bounds, upper from upper).
    """
    a = np.asarray(claimed, dtype=float)
    b = np.asarray(baseline, dtype=float)
    if a.ndim != 2 or a.shape[1] != 2 or a.shape != b.shape:
        raise ValueError(f"claimed and baseline must have shape (n, 2) (bounds per seed), "
                         f"got {a.shape} and {b.shape}")
    if a.shape[0] < MIN_SEEDS:
        raise ValueError(f"a verdict needs at least {MIN_SEEDS} seeds per arm, got {a.shape[0]}")
    if (a[:, 0] > a[:, 1]).any() or (b[:, 0] > b[:, 1]).any() or (a < 0).any() or (b < 0).any():
        raise ValueError("bounds must be (lo, hi) with 0 <= lo <= hi")
    threshold = _check_threshold(threshold)
    with np.errstate(divide="ignore"):
        lo = np.log(a[:, 0] / b[:, 1]) / math.log(base)
        hi = np.log(a[:, 1] / b[:, 0]) / math.log(base)
    lo = np.where(np.isnan(lo), -math.inf, lo)
    hi = np.where(np.isnan(hi), math.inf, hi)
    if not higher_is_better:
        lo, hi = -hi, -lo
    n = lo.size
    med_lo, med_hi = float(np.median(lo)), float(np.median(hi))
    k = _median_interval_rank(n)
    if k is None:
        low, high = -math.inf, math.inf
    else:
        low, high = float(np.sort(lo)[k - 1]), float(np.sort(hi)[n - k])
    # the bounds are open: a lower end of exactly 0 already means a ratio above 1
    tiny = math.ulp(1.0)
    word = decide(tiny if low == 0 else low, -tiny if high == 0 else high, med_lo, med_hi,
                  threshold)
    p_dir = sign_test_p(max(int((lo >= 0).sum()), int((hi <= 0).sum())), n)
    p_eq = max(sign_test_p(int((hi <= threshold).sum()), n),
               sign_test_p(int((lo >= -threshold).sum()), n))
    return LadderVerdict(claim, word, med_lo, med_hi, low, high, threshold, n,
                         tuple((float(x), float(y)) for x, y in zip(lo, hi, strict=True)),
                         base=float(base), p=_word_p(word, p_dir, p_eq), claim_id=claim_id,
                         exploratory=exploratory)


# ---- many comparisons: Holm per family (chapter) ---------------------------------------------


def holm_adjusted(p_values: Sequence[float]) -> list[float]:
    """Holm's step-down adjusted p-values, in the input's order:
    ``adj_(i) = max_{j <= i} min(1, (m - j + 1) p_(j))`` over the sorted p-values."""
    p = [float(x) for x in p_values]
    if any(not (0 <= x <= 1) for x in p):
        raise ValueError(f"p_values must lie in [0, 1], got {p}")
    m = len(p)
    order = sorted(range(m), key=lambda i: p[i])
    adjusted = [0.0] * m
    running = 0.0
    for rank, i in enumerate(order):
        running = max(running, min(1.0, (m - rank) * p[i]))
        adjusted[i] = running
    return adjusted


def holm(verdicts: Sequence, alpha: float = ALPHA) -> list[bool]:
    """One mark per verdict: ``True`` when its word is decided (not *not shown*) and survives
    Holm's correction over the family's confirmatory verdicts at family-wise ``alpha``.
    Exploratory verdicts are not in the family and get ``False``."""
    family = [i for i, v in enumerate(verdicts) if not v.exploratory]
    adjusted = holm_adjusted([verdicts[i].p for i in family])
    marks = [False] * len(verdicts)
    for i, adj in zip(family, adjusted, strict=True):
        marks[i] = verdicts[i].decided and adj <= alpha
    return marks


def holm_sentence(verdicts: Sequence, alpha: float = ALPHA) -> str:
    """The sentence a chapter prints next to its verdicts."""
    marks = holm(verdicts, alpha)
    family = [v for v in verdicts if not v.exploratory]
    decided = sum(v.decided for v in family)
    noun = "verdict" if len(family) == 1 else "verdicts"
    if decided == 0:
        tail = "no word is decided, so none is marked"
    else:
        tail = f"{sum(marks)} of the {decided} decided word{'' if decided == 1 else 's'}"
    return (f"{HOLM_MARK}: survives a Holm correction over this chapter's {len(family)} "
            f"{noun} (family-wise error {100 * alpha:g}%): {tail}.")


def verdict_table(rows: Sequence[tuple[str, object, dict]], width: int = 80,
                  alpha: float = ALPHA) -> str:
    """A chapter's verdicts as plain text within ``width`` columns: one line per
    ``(label, verdict, text_kwargs)`` with the Holm mark (:data:`HOLM_MARK`), the word and
    its interval (``verdict.text(**text_kwargs)``), then :func:`holm_sentence`. Long labels
    and texts wrap onto an indented second line."""
    verdicts = [v for _, v, _ in rows]
    marks = holm(verdicts, alpha)
    lines: list[str] = []
    label_w = min(34, max((len(label) for label, _, _ in rows), default=0))
    for (label, v, kw), mark in zip(rows, marks, strict=True):
        text = f"{HOLM_MARK if mark else ' '} {v.text(**kw)}"
        line = f"{label:<{label_w}} {text}"
        if len(line) <= width:
            lines.append(line)
        else:
            lines += textwrap.wrap(label, width)
            lines += textwrap.wrap(text, width, initial_indent="    ",
                                   subsequent_indent="      ")
    lines += textwrap.wrap(holm_sentence(verdicts, alpha), width)
    return "\n".join(lines)


def seed_plan(n_reported: int = MIN_SEEDS, n_tuning: int = 2, first: int = 0
              ) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """Disjoint seeds: ``(tuning, reported)``. Hyperparameters are chosen on ``tuning`` (never
    reported); the verdict uses ``reported`` only. Seed ``s`` fixes the data split and the
    initialization of every arm.

    >>> seed_plan(5, 2, first=100)
    ((100, 101), (102, 103, 104, 105, 106))
    """
    if n_reported < MIN_SEEDS:
        raise ValueError(f"n_reported must be at least {MIN_SEEDS}, got {n_reported}")
    if n_tuning < 1:
        raise ValueError(f"n_tuning must be at least 1, got {n_tuning}")
    tuning = tuple(range(first, first + n_tuning))
    reported = tuple(range(first + n_tuning, first + n_tuning + n_reported))
    return tuning, reported
