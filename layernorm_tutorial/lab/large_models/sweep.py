"""The learning-rate ladder of the QK-norm section, summarized for the page.

:func:`summarize_sweep` turns the stored ``qk_norm`` section (``{arm: {lr: [run per
seed]}}``) into a :class:`Sweep`: how many runs diverged per arm and rate, each seed's
bracket of its critical rate (the last rung that trained, the first that diverged: an
interval-censored outcome), the mean final loss and held-out accuracy per rate, the tables
the chapter prints (within 72 columns) and the values it glues. The verdicts come from the
claims registry (:func:`~layernorm_tutorial.lab.common.claims.judge_ladder`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from layernorm_tutorial.lab.common import claims
from layernorm_tutorial.lab.common.verdict import rung_bounds
from layernorm_tutorial.lab.large_models.qk_norm import diverged, first_diverged_lr

__all__ = ["Sweep", "summarize_sweep", "ARM_LABELS"]

ARM_LABELS = {"none": "no tool", "rmsnorm": "QK-norm", "softcap": "soft-cap",
              "zloss": "z-loss", "qkclip": "QK-Clip"}


@dataclass(frozen=True)
class Sweep:
    """``final``, ``accuracy``, ``last_logit``: ``{arm: {lr: (value per seed)}}``."""

    lrs: tuple[float, ...]
    seeds: tuple[int, ...]
    final: dict
    accuracy: dict
    last_logit: dict

    @property
    def arms(self) -> tuple[str, ...]:
        return tuple(self.final)

    def diverged(self, arm: str, lr: float) -> int:
        """How many seeds of ``arm`` diverged at ``lr`` (:func:`~.qk_norm.diverged`)."""
        return sum(diverged(v) for v in self.final[arm][lr])

    def first_diverged(self, arm: str) -> list[float]:
        """Per seed, the first rung at which the run diverged (``inf``: none did)."""
        return [first_diverged_lr({lr: self.final[arm][lr][i] for lr in self.lrs})
                for i in range(len(self.seeds))]

    def bounds(self, arm: str) -> list[tuple[float, float]]:
        """Per seed, ``(lo, hi]``: the bracket of the critical rate (``(top, inf)`` when the
        seed never diverged; ``(0, bottom]`` when it diverged on the first rung)."""
        return [rung_bounds(self.lrs, None if math.isinf(r) else r, "first_failure")
                for r in self.first_diverged(arm)]

    def mean(self, table: dict, arm: str, lr: float) -> float:
        """Mean over seeds of ``table[arm][lr]`` (a diverged run's inf loss stays inf)."""
        return float(np.mean(table[arm][lr]))

    def judge(self, claim_id: str, arm: str, baseline: str = "none"):
        """The registered ladder verdict "``arm`` raises the critical rate over
        ``baseline``" (:func:`~layernorm_tutorial.lab.common.claims.judge_ladder`)."""
        return claims.judge_ladder(claim_id, self.bounds(arm), self.bounds(baseline),
                                   setting=f"{arm} vs {baseline}")

    def table(self, arms=None) -> str:
        """Three blocks, one row per arm, one column per rate: runs diverged (of the
        seeds), mean final loss, mean held-out accuracy. At most 72 columns."""
        arms = tuple(arms or self.arms)
        head = f"{'lr':>10s}" + "".join(f"{lr:>9g}" for lr in self.lrs)
        lines = []
        for title, cell in (
                (f"runs diverged (of {len(self.seeds)})",
                 lambda a, lr: f"{self.diverged(a, lr):9d}"),
                ("mean final loss (nats per token)",
                 lambda a, lr: _num(self.mean(self.final, a, lr))),
                ("mean held-out accuracy",
                 lambda a, lr: f"{self.mean(self.accuracy, a, lr):9.2f}")):
            lines += [title, head]
            lines += [f"{ARM_LABELS.get(a, a):>10s}" + "".join(cell(a, lr) for lr in self.lrs)
                      for a in arms]
        return "\n".join(lines)

    def extremes(self, table: dict, arm: str, lr: float) -> tuple[float, float]:
        """The lowest and the highest value over seeds of ``table[arm][lr]``."""
        values = table[arm][lr]
        return float(min(values)), float(max(values))

    def range_table(self, arms=None, lrs=None) -> str:
        """The final loss of the lowest and of the highest seed, per arm and rate
        (``lrs``: some of the ladder's rates, all by default): where the arms' runs overlap,
        which the means of :meth:`table` hide. At most 72 columns for three rates."""
        arms = tuple(arms or self.arms)
        lrs = tuple(self.lrs if lrs is None else lrs)
        missing = [lr for lr in lrs if lr not in self.lrs]
        if missing:
            raise KeyError(f"lrs must be among the ladder's rates {self.lrs}, got {missing}")
        lines = [f"final loss, lowest to highest of the {len(self.seeds)} seeds",
                 f"{'lr':>10s}" + "".join(f"{lr:>14g}" for lr in lrs)]
        for a in arms:
            cells = []
            for lr in lrs:
                lo, hi = self.extremes(self.final, a, lr)
                cells.append(f"{_short(lo)}-{_short(hi)}".rjust(14))
            lines.append(f"{ARM_LABELS.get(a, a):>10s}" + "".join(cells))
        return "\n".join(lines)

    def brackets(self, arm: str) -> str:
        """``(0.1, 0.3] x5, (0.3, 1] x3``: the seeds' brackets of the critical rate."""
        counts: dict = {}
        for lo, hi in self.bounds(arm):
            counts[(lo, hi)] = counts.get((lo, hi), 0) + 1
        return ", ".join(f"({lo:g}, {hi:g}] x{n}" for (lo, hi), n in sorted(counts.items()))


def _short(x: float) -> str:
    return f"{x:.2f}" if math.isfinite(x) and abs(x) < 1e3 else f"{x:.1e}"


def _num(x: float) -> str:
    return f"{x:9.2f}" if math.isfinite(x) and abs(x) < 1e4 else f"{x:9.1e}"


def summarize_sweep(qk: dict) -> Sweep:
    """The stored ``qk_norm`` section as a :class:`Sweep` (rates sorted; a non-finite or
    missing final loss, stored as ``None``, is ``inf``)."""
    lrs = tuple(sorted(float(lr) for lr in qk["settings"]["lrs"]))
    final, accuracy, last_logit = {}, {}, {}
    for arm, by_lr in qk["runs"].items():
        runs = {lr: by_lr[_key(by_lr, lr)] for lr in lrs}
        final[arm] = {lr: tuple(_finite_or_inf(r["final_loss"]) for r in rs)
                      for lr, rs in runs.items()}
        accuracy[arm] = {lr: tuple(float(r["accuracy"]) for r in rs)
                         for lr, rs in runs.items()}
        last_logit[arm] = {lr: tuple(_finite_or_inf(r["max_logit"][-1]) for r in rs)
                           for lr, rs in runs.items()}
    return Sweep(lrs, tuple(qk["settings"]["seeds"]), final, accuracy, last_logit)


def _key(by_lr: dict, lr: float) -> str:
    for key in by_lr:
        if math.isclose(float(key), lr, rel_tol=1e-9):
            return key
    raise KeyError(f"no runs stored for the learning rate {lr:g}")


def _finite_or_inf(x) -> float:
    return math.inf if x is None or not math.isfinite(float(x)) else float(x)
