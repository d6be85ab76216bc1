r"""The book's one verdict method (version 3): how a comparison between two arms becomes a word.

Every comparison in the book (faster, more stable, better, allows larger learning rates) is
judged here and nowhere else; every judged claim is registered, with its threshold, in
:mod:`~layernorm_tutorial.lab.common.claims`. The rule, written down once (the evidence
chapter's section "How we judge a claim" shows it with the formula):

1. **Seeds.** Each arm runs on the same ``n >= 5`` reported seeds; seed ``s`` fixes the
   initialization *and* the train/validation split of both arms, so the runs pair up.
   Hyperparameters are chosen on *tuning* seeds that are never reported (:func:`seed_plan`).
2. **Effect.** The paired differences ``d_s = m_claimed(s) - m_baseline(s)``, oriented so that
   a positive ``d`` is what the claim predicts (sign flipped where lower is better). The
   effect is their mean :math:`\bar d`.
3. **Interval.** A two-sided 95% Student-t interval :math:`[L, H]` for the mean paired
   difference, :math:`\bar d \pm t_{0.975,\,n-1}\, s_d/\sqrt{n}` (``ddof=1``).
4. **Threshold.** A practical size :math:`\delta > 0` from the claims registry.
5. **Word.** Decided by the interval alone (never by the point estimate), symmetric in the
   two directions, first match in this order:

   ===================  =====================================  ============================
   word                 condition                              what it says
   ===================  =====================================  ============================
   holds                ``delta <= L``                         claimed direction, by at
                                                               least delta
   contradicted         ``H <= -delta``                        the mirror image
   too small to matter  ``-delta < L`` and ``H < delta``       no effect of size delta,
                                                               either way (equivalence,
                                                               TOST at 2.5% per side)
   direction shown      ``0 < L < delta <= H``                 claimed direction; its size
                                                               is open
   reverse shown        ``L <= -delta < H < 0``                the mirror image
   not shown            ``L <= 0 <= H``, and ``L <= -delta``   this experiment cannot tell
                        or ``H >= delta``
   ===================  =====================================  ============================

   (``[L, H]``: the interval; ``delta``: the threshold.) The six conditions, as written in
   the middle column, are disjoint and cover every interval; negating the interval swaps
   *holds* with *contradicted* and *direction shown* with *reverse shown*. Versions 1 and 2
   let *holds* follow the point estimate (``L > 0`` and :math:`\bar d \ge \delta`), so a word
   could flip on the third decimal of a mean of five numbers; version 3 asks the whole
   interval to clear :math:`\delta` and gives the interval that only excludes 0 the lesser
   word *direction shown* (``lab.evidence.rejudge`` re-judges every stored verdict under all
   three versions).

**Five seeds rest on normality.** The t interval assumes that the ``d_s`` are roughly normal.
No distribution-free paired test can do without that at ``n = 5``: with all five differences
of one sign the two-sided p-value of the sign test is :math:`2/2^5 = 0.0625`, and so is the
smallest p-value of the Wilcoxon signed-rank test and of the exact sign-flip permutation test
(:func:`distribution_free_floor`). Every decided word of a five-seed comparison of a
continuous metric therefore leans on the t model; six seeds lift the floor to 0.031 and eight
to 0.0078, so where a word matters and runs are cheap, more seeds are the remedy.

**Discrete outcomes** (a learning-rate ladder: the first rung that fails, the last that trains)
are interval-censored: each seed gives only the bounds of its ratio (:func:`rung_bounds`,
:func:`ladder_verdict`). Their interval is the distribution-free 95% interval for the median
log-ratio built from order statistics of those bounds, and the words follow the same table
with that interval as ``[L, H]`` (the bounds are open, so an end that equals 0 or
:math:`\pm\delta` counts as lying beyond it). With ``n = 5`` no such interval exists (the
floor above): five seeds cannot settle a ladder claim, whatever the data; six can.

**Many comparisons.** Each chapter is one family of ``m`` confirmatory verdicts.
:func:`family_marks` marks a decided word with :data:`MARK` when the p-value of the test
behind it (:attr:`Verdict.p`: for *holds* the test of ``mean <= delta``, for *contradicted*
of ``mean >= -delta``, for *too small to matter* the TOST, for *direction shown* and
*reverse shown* the test of ``mean = 0``) is at most ``alpha / m`` (Bonferroni). That test is
chosen by the word, and the marks are still valid: a marked word can be wrong only if its
claim's :math:`1 - \alpha/m` interval misses the true effect, which happens with probability
at most :math:`\alpha/m` per claim, so by the union bound the chance that any marked word of
the chapter is wrong is at most :math:`\alpha`. (Holm's step-down would mark more, but its
guarantee needs one hypothesis per claim fixed before the data, and here the word picks it.)
:func:`verdict_table` prints a chapter's verdicts with their marks.

The interval is printed next to the word wherever a verdict is shown (:meth:`Verdict.text`).
"""

from __future__ import annotations

import itertools
import math
import textwrap
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from scipy import stats

__all__ = ["METHOD_VERSION", "MIN_SEEDS", "CONFIDENCE", "ALPHA", "HOLDS", "CONTRADICTED",
           "TOO_SMALL", "DIRECTION_SHOWN", "REVERSE_SHOWN", "NOT_SHOWN", "WORDS",
           "WORD_MEANINGS", "DECIDED", "MIRROR", "MARK", "HOLM_MARK", "LADDER_TOO_FEW",
           "Verdict", "LadderVerdict", "decide", "t_p_values", "paired_verdict", "rung_bounds",
           "ladder_verdict", "ladder_min_seeds", "sign_test_p", "distribution_free_floor",
           "family_marks", "family_sentence", "bonferroni_adjusted", "holm", "holm_adjusted",
           "holm_sentence", "verdict_table", "seed_plan"]

#: The version of the rule (1: holds on the estimate, no threshold for contradicted; 2:
#: symmetric, too small to matter, ladders interval-censored; 3: words by the interval alone,
#: direction shown / reverse shown, Bonferroni marks).
METHOD_VERSION = 3
MIN_SEEDS = 5
CONFIDENCE = 0.95
ALPHA = 1 - CONFIDENCE

# The words (translated in the Chinese edition: keep them constants).
HOLDS = "holds"
CONTRADICTED = "contradicted"
TOO_SMALL = "too small to matter"
DIRECTION_SHOWN = "direction shown"
REVERSE_SHOWN = "reverse shown"
NOT_SHOWN = "not shown"
#: In the order of precedence.
WORDS = (HOLDS, CONTRADICTED, TOO_SMALL, DIRECTION_SHOWN, REVERSE_SHOWN, NOT_SHOWN)
DECIDED = (HOLDS, CONTRADICTED, TOO_SMALL, DIRECTION_SHOWN, REVERSE_SHOWN)
#: Each word's mirror image (the word of the negated interval).
MIRROR = {HOLDS: CONTRADICTED, CONTRADICTED: HOLDS, TOO_SMALL: TOO_SMALL,
          DIRECTION_SHOWN: REVERSE_SHOWN, REVERSE_SHOWN: DIRECTION_SHOWN, NOT_SHOWN: NOT_SHOWN}
#: One line per word: the exact condition (L, H: the 95% interval; delta: the registered
#: threshold).
WORD_MEANINGS = {
    HOLDS: "delta <= L: the claimed direction, by at least delta",
    CONTRADICTED: "H <= -delta: the opposite direction, by at least delta",
    TOO_SMALL: "-delta < L and H < delta: any effect is smaller than delta, both ways",
    DIRECTION_SHOWN: "0 < L < delta <= H: the claimed direction; its size is open",
    REVERSE_SHOWN: "L <= -delta < H < 0: the opposite direction; its size is open",
    NOT_SHOWN: "L <= 0 <= H, and L <= -delta or H >= delta: this experiment cannot tell",
}
MARK = "†"
HOLM_MARK = MARK  # the name before version 3 (the marks were Holm's)
LADDER_TOO_FEW = "too few seeds for a ladder"


def decide(low: float, high: float, threshold: float) -> str:
    """The word for the interval ``[low, high]`` against ``threshold`` (the module's table,
    first match in the order of :data:`WORDS`). The point estimate plays no part. Symmetric:
    ``decide(-high, -low, t) == MIRROR[decide(low, high, t)]``."""
    if math.isnan(low) or math.isnan(high) or low > high:
        raise ValueError(f"the interval must be [low, high] with low <= high, got "
                         f"[{low!r}, {high!r}]")
    if threshold <= low:
        return HOLDS
    if high <= -threshold:
        return CONTRADICTED
    if -threshold < low and high < threshold:
        return TOO_SMALL
    if low > 0:
        return DIRECTION_SHOWN
    if high < 0:
        return REVERSE_SHOWN
    return NOT_SHOWN


def _fmt(x: float, f: str, scale: float) -> str:
    if math.isinf(x):
        return "+inf" if x > 0 else "-inf"
    return f.format(x * scale)


@dataclass(frozen=True)
class Verdict:
    """A judged comparison. ``effect``, ``low`` and ``high`` are in the metric's units,
    oriented so that positive is the claimed direction; ``p`` is the two-sided p-value of the
    test behind the word (:func:`t_p_values`; :func:`family_marks` uses it)."""

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
        """Whether the whole interval lies beyond the threshold on one side (``low >=
        threshold`` or ``high <= -threshold``): since version 3, exactly *holds* and
        *contradicted*."""
        return self.low >= self.threshold or self.high <= -self.threshold

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


def t_p_values(d, threshold: float) -> dict[str, float]:
    """The p-values behind the words, for paired differences ``d`` (shape ``(n,)``), each
    below ``ALPHA`` exactly when the 95% t interval ``[L, H]`` meets the word's condition:

    - ``"zero"``: two-sided test of ``mean = 0`` (``< ALPHA`` iff ``L > 0`` or ``H < 0``);
    - ``"above"``: ``2 P(T >= (mean - delta)/se)``, the test of ``mean <= delta``
      (``<= ALPHA`` iff ``L >= delta``: *holds*);
    - ``"below"``: the mirror, ``mean >= -delta`` (*contradicted*);
    - ``"equivalence"``: twice the larger one-sided p of TOST against ``(-delta, delta)``
      (``< ALPHA`` iff the interval lies inside: *too small to matter*).
    """
    d = np.asarray(d, dtype=float)
    n = d.size
    se = d.std(ddof=1) / math.sqrt(n)
    mean = float(d.mean())
    if se == 0:
        return {"zero": 0.0 if mean != 0 else 1.0,
                "above": 0.0 if mean >= threshold else 1.0,
                "below": 0.0 if mean <= -threshold else 1.0,
                "equivalence": 0.0 if abs(mean) < threshold else 1.0}
    df = n - 1
    p_low = stats.t.sf((mean + threshold) / se, df)      # H0: mean <= -threshold
    p_high = stats.t.cdf((mean - threshold) / se, df)    # H0: mean >= +threshold
    return {"zero": float(2 * stats.t.sf(abs(mean) / se, df)),
            "above": float(min(1.0, 2 * stats.t.sf((mean - threshold) / se, df))),
            "below": float(min(1.0, 2 * stats.t.cdf((mean + threshold) / se, df))),
            "equivalence": float(min(1.0, 2 * max(p_low, p_high)))}


def _word_p(word: str, p: dict[str, float]) -> float:
    """The p-value of the test behind ``word`` (*not shown*: the smaller of the direction
    and equivalence tests, neither of which succeeded)."""
    return {HOLDS: p["above"], CONTRADICTED: p["below"], TOO_SMALL: p["equivalence"],
            DIRECTION_SHOWN: p["zero"], REVERSE_SHOWN: p["zero"]}.get(
                word, min(p["zero"], p["equivalence"]))


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
            in :mod:`~layernorm_tutorial.lab.common.claims`.
        higher_is_better: ``False`` for losses, steps or times (the sign of ``d`` is flipped).
        claim_id: the registry id, kept on the verdict; ``exploratory``: a post-hoc result
            (its text says so; :func:`family_marks` leaves it out).

    Returns:
        a :class:`Verdict`; its effect is :math:`\\bar d`, its interval
        :math:`\\bar d \\pm t_{0.975, n-1} s_d / \\sqrt{n}`, its word from :func:`decide` on
        that interval, its ``p`` from :func:`t_p_values` for that word.
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
    word = decide(low, high, threshold)
    return Verdict(claim, word, mean, low, high, threshold, n,
                   tuple(float(x) for x in d), p=_word_p(word, t_p_values(d, threshold)),
                   claim_id=claim_id, exploratory=exploratory)


# ---- how far five seeds go without the normal model ------------------------------------------


def distribution_free_floor(n: int) -> dict[str, float]:
    """The smallest two-sided p-value that each distribution-free paired test can reach with
    ``n`` pairs (all differences of one sign, distinct in size):

    - ``"sign test"``: :func:`sign_test_p` with ``n`` of ``n``, :math:`2/2^n`;
    - ``"Wilcoxon signed-rank"``: scipy's exact test on the differences ``1, ..., n``;
    - ``"sign-flip permutation"``: the exact permutation test of the mean, all :math:`2^n`
      sign flips of the same differences enumerated.

    All three are :math:`2/2^n`: 0.0625 at ``n = 5``, above 5% whatever the data.
    """
    if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or not 1 <= n <= 20:
        raise ValueError(f"n must be an integer from 1 to 20 (the number of pairs), got {n!r}")
    d = np.arange(1.0, n + 1)
    means = np.array([np.dot(signs, d) for signs in itertools.product((-1.0, 1.0), repeat=n)])
    observed = d.sum()
    return {
        "sign test": sign_test_p(n, n),
        "Wilcoxon signed-rank": float(stats.wilcoxon(d, method="exact").pvalue),
        "sign-flip permutation": float(np.mean(np.abs(means) >= observed - 1e-9)),
    }


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
    interval for the median (``-inf, +inf`` when ``n`` is too small), which decides the word;
    ``p``: the two-sided sign-test p-value behind the word."""

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

    Per seed the ratio claimed/baseline lies in ``(lo_c / hi_b, hi_c / lo_b)``. The interval
    is the order-statistic 95% interval for the median, ``[lo_(k), hi_(n-k+1)]``
    (conservative: lower ends from lower bounds, upper from upper), and the word is
    :func:`decide` on it, the ends open (an end at exactly 0 or ``+-threshold`` lies beyond
    it). The p behind each word is the sign test on the seeds whose bounds meet the word's
    condition (e.g. *holds*: ``lo >= threshold``), below 5% exactly when the interval does.
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
    # the bounds are open: an end that equals 0 or +-threshold already lies beyond it
    inner = math.nextafter(low, math.inf), math.nextafter(high, -math.inf)
    word = decide(*(inner if inner[0] <= inner[1] else (low, high)), threshold)
    count = {"zero": max(int((lo >= 0).sum()), int((hi <= 0).sum())),
             "above": int((lo >= threshold).sum()), "below": int((hi <= -threshold).sum())}
    p = {key: sign_test_p(c, n) for key, c in count.items()}
    p["equivalence"] = max(sign_test_p(int((hi <= threshold).sum()), n),
                           sign_test_p(int((lo >= -threshold).sum()), n))
    return LadderVerdict(claim, word, med_lo, med_hi, low, high, threshold, n,
                         tuple((float(x), float(y)) for x, y in zip(lo, hi, strict=True)),
                         base=float(base), p=_word_p(word, p), claim_id=claim_id,
                         exploratory=exploratory)


# ---- many comparisons: one family per chapter ------------------------------------------------


def bonferroni_adjusted(p_values: Sequence[float]) -> list[float]:
    """Bonferroni-adjusted p-values, ``min(1, m p)``, in the input's order."""
    p = [float(x) for x in p_values]
    if any(not (0 <= x <= 1) for x in p):
        raise ValueError(f"p_values must lie in [0, 1], got {p}")
    return [min(1.0, len(p) * x) for x in p]


def holm_adjusted(p_values: Sequence[float]) -> list[float]:
    """Holm's step-down adjusted p-values, in the input's order:
    ``adj_(i) = max_{j <= i} min(1, (m - j + 1) p_(j))`` over the sorted p-values (the marks
    of versions 1 and 2; see the module docstring for why version 3 uses Bonferroni)."""
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


def family_marks(verdicts: Sequence, alpha: float = ALPHA) -> list[bool]:
    """One mark per verdict: ``True`` when its word is decided (not *not shown*) and the p
    behind it is at most ``alpha / m``, ``m`` the family's confirmatory verdicts (Bonferroni;
    why this is valid although the word picks the test: the module docstring). Exploratory
    verdicts are not in the family and get ``False``."""
    family = [i for i, v in enumerate(verdicts) if not v.exploratory]
    adjusted = bonferroni_adjusted([verdicts[i].p for i in family])
    marks = [False] * len(verdicts)
    for i, adj in zip(family, adjusted, strict=True):
        marks[i] = verdicts[i].decided and adj <= alpha
    return marks


def family_sentence(verdicts: Sequence, alpha: float = ALPHA) -> str:
    """The sentence a chapter prints next to its verdicts."""
    marks = family_marks(verdicts, alpha)
    family = [v for v in verdicts if not v.exploratory]
    decided = sum(v.decided for v in family)
    noun = "verdict" if len(family) == 1 else "verdicts"
    if decided == 0:
        tail = "no word is decided, so none is marked"
    else:
        tail = f"{sum(marks)} of the {decided} decided word{'' if decided == 1 else 's'}"
    return (f"{MARK}: survives a Bonferroni correction over this chapter's {len(family)} "
            f"{noun} (family-wise error {100 * alpha:g}%): {tail}.")


#: The names before version 3, when the marks were Holm's (the chapters' modules call them).
holm = family_marks
holm_sentence = family_sentence


def verdict_table(rows: Sequence[tuple[str, object, dict]], width: int = 80,
                  alpha: float = ALPHA) -> str:
    """A chapter's verdicts as plain text within ``width`` columns: one line per
    ``(label, verdict, text_kwargs)`` with the family mark (:data:`MARK`), the word and
    its interval (``verdict.text(**text_kwargs)``), then :func:`family_sentence`. Long labels
    and texts wrap onto an indented second line."""
    verdicts = [v for _, v, _ in rows]
    marks = family_marks(verdicts, alpha)
    lines: list[str] = []
    label_w = min(34, max((len(label) for label, _, _ in rows), default=0))
    for (label, v, kw), mark in zip(rows, marks, strict=True):
        text = f"{MARK if mark else ' '} {v.text(**kw)}"
        line = f"{label:<{label_w}} {text}"
        if len(line) <= width:
            lines.append(line)
        else:
            lines += textwrap.wrap(label, width)
            lines += textwrap.wrap(text, width, initial_indent="    ",
                                   subsequent_indent="      ")
    lines += textwrap.wrap(family_sentence(verdicts, alpha), width)
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
