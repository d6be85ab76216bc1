r"""The book's one verdict method: how a comparison between two arms becomes a word.

Every comparison in the book (faster, more stable, better, allows larger learning rates) is
judged here and nowhere else. The rule, written down once (the evidence chapter's section
"How we judge a claim" shows it with the formula):

1. **Seeds.** Each arm runs on the same ``n >= 5`` reported seeds; seed ``s`` fixes the
   initialization *and* the train/validation split of both arms, so the runs pair up.
   Hyperparameters (a learning rate, say) are chosen on *tuning* seeds that are never reported
   (:func:`seed_plan`).
2. **Effect.** The paired differences ``d_s = m_claimed(s) - m_baseline(s)``, oriented so that a
   positive ``d`` is what the claim predicts (for a metric where lower is better the sign is
   flipped). The effect is their mean :math:`\bar d`.
3. **Interval.** A two-sided 95% Student-t interval for the mean paired difference,
   :math:`\bar d \pm t_{0.975,\,n-1}\, s_d/\sqrt{n}`, with :math:`s_d` the sample standard
   deviation of the ``d_s`` (``ddof=1``).
4. **Threshold.** A practical size :math:`\delta > 0`, stated before the runs.
5. **Verdict.** *holds* when the interval excludes 0 on the claimed side (low > 0) and
   :math:`\bar d \ge \delta`; *contradicted* when the interval lies wholly on the other side
   (high < 0); *not shown* otherwise (the interval contains 0, or the effect is real but smaller
   than the threshold).

The interval is printed next to the word wherever a verdict is shown (:meth:`Verdict.text`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from scipy import stats

__all__ = ["MIN_SEEDS", "CONFIDENCE", "WORDS", "Verdict", "paired_verdict", "seed_plan"]

MIN_SEEDS = 5
CONFIDENCE = 0.95
WORDS = ("holds", "contradicted", "not shown")


@dataclass(frozen=True)
class Verdict:
    """A judged comparison. ``effect``, ``low`` and ``high`` are in the metric's units,
    oriented so that positive is the claimed direction."""

    claim: str
    word: str
    effect: float
    low: float
    high: float
    threshold: float
    n: int
    differences: tuple[float, ...]
    method: str = "paired t, 95%"

    def interval(self, digits: int = 3, scale: float = 1.0, unit: str = "") -> str:
        """``+0.012 [+0.004, +0.020]`` (scaled, e.g. ``scale=100, unit=" pts"``)."""
        f = f"{{:+.{digits}f}}"
        return (f"{f.format(self.effect * scale)}{unit} "
                f"[{f.format(self.low * scale)}, {f.format(self.high * scale)}]")

    def text(self, digits: int = 3, scale: float = 1.0, unit: str = "") -> str:
        """The word with its interval: ``holds: +0.012 [+0.004, +0.020], n = 5``."""
        return f"{self.word}: {self.interval(digits, scale, unit)}, n = {self.n}"

    def __str__(self) -> str:
        return self.text()


def paired_verdict(claimed, baseline, *, threshold: float, claim: str = "",
                   higher_is_better: bool = True, min_seeds: int = MIN_SEEDS) -> Verdict:
    """Judge "``claimed`` beats ``baseline``" from per-seed metrics, paired by seed.

    Args:
        claimed, baseline: shape ``(n,)``, the metric of each arm on the same ``n`` seeds.
        threshold: the practical size :math:`\\delta > 0` in the metric's units, fixed before
            the runs.
        higher_is_better: ``False`` for losses, steps or times (the sign of ``d`` is flipped).

    Returns:
        a :class:`Verdict`; its effect is :math:`\\bar d`, its interval
        :math:`\\bar d \\pm t_{0.975, n-1} s_d / \\sqrt{n}`.
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
    if not (isinstance(threshold, (int, float)) and math.isfinite(threshold) and threshold > 0):
        raise ValueError(f"threshold must be a positive number fixed before the runs, "
                         f"got {threshold!r}")
    d = (a - b) if higher_is_better else (b - a)
    n = d.size
    mean = float(d.mean())
    half = float(stats.t.ppf(0.5 + CONFIDENCE / 2, n - 1) * d.std(ddof=1) / math.sqrt(n))
    low, high = mean - half, mean + half
    if low > 0 and mean >= threshold:
        word = "holds"
    elif high < 0:
        word = "contradicted"
    else:
        word = "not shown"
    return Verdict(claim, word, mean, low, high, float(threshold), n,
                   tuple(float(x) for x in d))


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
