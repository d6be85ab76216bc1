"""From run records to numbers: per-setting summaries, paired verdicts and the verdict table.

Every comparison is judged by the book's one verdict method (version 3,
:mod:`layernorm_tutorial.lab.common.verdict`): the two arms' values on the same reported seeds
(same split, same initialization seed) are paired, the effect is the mean paired difference
oriented so that positive is what the claim predicts, its 95 % Student-t interval is printed
next to the word, and the interval decides the word (*holds*, *contradicted*, *too small to
matter*, *direction shown*, *reverse shown* or *not shown*). Learning-rate ladders are
interval-censored (:func:`rate_rows`,
:func:`~layernorm_tutorial.lab.common.verdict.ladder_verdict`). The thresholds are those of the
claims registry (:mod:`layernorm_tutorial.lab.common.claims`, ids ``evidence.*``); the verdict
table marks the verdicts that survive the Bonferroni correction over the chapter
(:func:`holm_rows`, named before version 3: the marks are Bonferroni's).

Summaries (:func:`summarize`) are descriptive only (mean, sd over the reported seeds).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from layernorm_tutorial.lab.common import claims
from layernorm_tutorial.lab.common.verdict import (
    MARK,
    LadderVerdict,
    Verdict,
    family_marks,
    paired_verdict,
    rung_bounds,
)
from layernorm_tutorial.lab.evidence.results import find_runs
from layernorm_tutorial.lab.evidence.runner import run_failed

__all__ = ["ACCURACY_THRESHOLD", "GAP_THRESHOLD", "SPEED_THRESHOLD", "RATE_THRESHOLD",
           "CONVERGED_TRAIN_ACC", "GOOD_RATE_TOLERANCE", "CONVERGENCE_THRESHOLD", "THRESHOLDS",
           "Summary", "values", "summarize", "paired_values", "judge", "steps_to_accuracy",
           "steps_to_90", "RateRangeSummary", "rate_range", "batch_size_curves", "chosen_lr",
           "verdict_cell", "verdict_rows", "side_verdict_rows", "verdict_markdown",
           "per_class_verdicts", "rate_bounds", "gapped_good_rates", "rate_rows", "holm_rows"]

# ---- practical thresholds: read from the claims registry -------------------------------------
# one percentage point of accuracy (about 4.5 test images)
ACCURACY_THRESHOLD = claims.threshold("evidence.2.rnn")
# one point of train-minus-test accuracy gap
GAP_THRESHOLD = claims.threshold("evidence.4.bn-regularizes")
# steps to 90 %: one logging interval, as a fraction of the budget
SPEED_THRESHOLD = claims.threshold("evidence.5.ln-speed")
# learning rates: log2 units, i.e. a factor of two
RATE_THRESHOLD = claims.threshold("evidence.5.rates")
# "converged": final training accuracy of at least 95 %
CONVERGED_TRAIN_ACC = claims.parameter("evidence.3.ln-does-not-converge", "converged_train_acc")
# a "good" rate: validation accuracy within one point of the best
GOOD_RATE_TOLERANCE = claims.parameter("evidence.5.rates", "good_rate_tolerance")
# validation accuracy that counts as "converged" for claim 5
CONVERGENCE_THRESHOLD = claims.parameter("evidence.5.ln-speed", "validation_accuracy_level")
THRESHOLDS = {"accuracy": ACCURACY_THRESHOLD, "gap": GAP_THRESHOLD,
              "speed (fraction of the budget)": SPEED_THRESHOLD,
              "learning rate (log2)": RATE_THRESHOLD,
              "converged training accuracy": CONVERGED_TRAIN_ACC}


def _num(v) -> float:
    return float("nan") if v is None else float(v)


def values(runs: list[dict], metric: str) -> np.ndarray:
    """One value per run. ``metric`` is a key of ``final`` or ``"gap"`` (train accuracy minus
    test accuracy), ``"loss_gap"`` (test loss minus train loss) or ``"steps_to_90"``
    (:func:`steps_to_90`: censored runs count as the budget plus one interval)."""
    if metric == "gap":
        return np.array([_num(r["final"]["train_acc"]) - _num(r["final"]["test_acc"])
                         for r in runs])
    if metric == "loss_gap":
        return np.array([_num(r["final"]["test_loss"]) - _num(r["final"]["train_loss"])
                         for r in runs])
    if metric == "steps_to_90":
        return np.array([steps_to_90(r) for r in runs], dtype=float)
    return np.array([_num(r["final"][metric]) for r in runs])


@dataclass(frozen=True)
class Summary:
    """Mean, sample standard deviation (ddof=1; 0 for one run), min, max and count."""

    mean: float
    sd: float
    min: float
    max: float
    n: int


def summarize(x) -> Summary:
    x = np.asarray(x, dtype=float)
    if x.size == 0:
        raise ValueError("summarize needs at least one value")
    sd = float(np.std(x, ddof=1)) if x.size > 1 else 0.0
    return Summary(float(np.mean(x)), sd, float(np.min(x)), float(np.max(x)), int(x.size))


def paired_values(doc: dict, experiment: str, claimed: str, baseline: str,
                  batch_size: int | None = None, metric: str = "test_acc"):
    """``(claimed_values, baseline_values)`` of two norms on the same reported seeds, in seed
    order; ``ValueError`` if the two arms were not run on the same seeds."""
    a = find_runs(doc, experiment, claimed, batch_size)
    b = find_runs(doc, experiment, baseline, batch_size)
    seeds_a = [r["spec"]["seed"] for r in a]
    seeds_b = [r["spec"]["seed"] for r in b]
    if seeds_a != seeds_b or not seeds_a:
        raise ValueError(f"{experiment}: {claimed} and {baseline} must share their seeds to "
                         f"pair, got {seeds_a} and {seeds_b}")
    a = sorted(a, key=lambda r: r["spec"]["seed"])
    b = sorted(b, key=lambda r: r["spec"]["seed"])
    return values(a, metric), values(b, metric)


def judge(doc: dict, experiment: str, claimed: str, baseline: str, batch_size: int,
          metric: str = "test_acc", threshold: float = ACCURACY_THRESHOLD, claim: str = "",
          higher_is_better: bool = True, claim_id: str = "",
          exploratory: bool = False) -> Verdict:
    """``paired_verdict`` of "``claimed`` beats ``baseline``" on ``metric`` at one setting
    (with ``claim_id``: that claim's registered threshold, direction and status)."""
    a, b = paired_values(doc, experiment, claimed, baseline, batch_size, metric)
    if claim_id:
        c = claims.claim(claim_id)
        threshold, higher_is_better = c.threshold, c.higher_is_better
        exploratory = exploratory or c.exploratory
    return paired_verdict(a, b, threshold=threshold, claim=claim,
                          higher_is_better=higher_is_better, claim_id=claim_id,
                          exploratory=exploratory)


def steps_to_accuracy(run: dict, threshold: float = CONVERGENCE_THRESHOLD,
                      key: str = "val_acc") -> float:
    """First logged step at which ``curve[key] >= threshold``; ``inf`` if never reached
    (the run is censored at its budget)."""
    for step, acc in zip(run["curve"]["step"], run["curve"][key], strict=True):
        if acc is not None and acc >= threshold:
            return float(step)
    return math.inf


def steps_to_90(run: dict) -> float:
    """:func:`steps_to_accuracy` at 90 %, with a run that never gets there scored as its
    budget plus one logging interval (a lower bound on its true value, so a verdict that a
    method is *faster* than a censored one is conservative)."""
    s = steps_to_accuracy(run)
    if math.isfinite(s):
        return s
    steps = run["curve"]["step"]
    budget = steps[-1] if steps else run["steps"]
    return float(budget + budget / max(len(steps), 1))


def batch_size_curves(doc: dict, metric: str = "test_acc", experiment: str = "mlp_batch_size"):
    """``{norm: (batch_sizes, means, sds)}`` over the batch sizes of ``experiment``."""
    out = {}
    runs = find_runs(doc, experiment)
    for norm in sorted({r["spec"]["norm"] for r in runs}, key=["none", "bn", "ln"].index):
        sizes = sorted({r["spec"]["batch_size"] for r in runs if r["spec"]["norm"] == norm})
        stats = [summarize(values(find_runs(doc, experiment, norm, b), metric)) for b in sizes]
        out[norm] = (np.array(sizes), np.array([s.mean for s in stats]),
                     np.array([s.sd for s in stats]))
    return out


def chosen_lr(doc: dict, experiment: str, norm: str, batch_size: int) -> float:
    """The learning rate the tuning seeds chose for one setting."""
    for d in doc["selected_lr"]:
        if (d["experiment"], d["norm"], d["batch_size"]) == (experiment, norm, batch_size):
            return d["lr"]
    raise KeyError(f"no setting {experiment}/{norm}/batch {batch_size} in the results")


# ---- learning-rate ranges (claim 5: "allows larger learning rates") --------------------------


@dataclass(frozen=True)
class RateRangeSummary:
    """One norm of a rate-range experiment, per reported seed (arrays of shape ``(n,)``):
    ``best_rate`` (highest validation accuracy), ``best_acc``, ``largest_good`` (the largest
    rate whose validation accuracy is within :data:`GOOD_RATE_TOLERANCE` of that seed's best)
    and ``failure`` (the smallest rate above the best one at which the run failed,
    :func:`~.runner.run_failed`; ``inf`` if none failed: censored)."""

    norm: str
    seeds: tuple[int, ...]
    rates: tuple[float, ...]
    val_acc: np.ndarray          # (n_seeds, n_rates)
    failed: np.ndarray           # (n_seeds, n_rates) bool
    best_rate: np.ndarray
    best_acc: np.ndarray
    largest_good: np.ndarray
    failure: np.ndarray


def rate_range(doc: dict, experiment: str, norm: str,
               tolerance: float = GOOD_RATE_TOLERANCE) -> RateRangeSummary:
    """Summarize the rate range of ``norm`` in ``experiment`` (``"lr_range_mlp"``, ...)."""
    runs = find_runs(doc, experiment, norm)
    if not runs:
        raise KeyError(f"no runs of {experiment}/{norm} in the results")
    rates = tuple(sorted({r["spec"]["lr"] for r in runs}))
    seeds = tuple(sorted({r["spec"]["seed"] for r in runs}))
    by = {(r["spec"]["seed"], r["spec"]["lr"]): r for r in runs}
    missing = [(s, lr) for s in seeds for lr in rates if (s, lr) not in by]
    if missing:
        raise ValueError(f"{experiment}/{norm}: the grid is incomplete, missing {missing[:3]}")
    acc = np.array([[_num(by[s, lr]["final"]["val_acc"]) for lr in rates] for s in seeds])
    failed = np.array([[run_failed(by[s, lr]) for lr in rates] for s in seeds])
    r = np.array(rates)
    best_i = acc.argmax(axis=1)
    best_acc = acc.max(axis=1)
    good = acc >= best_acc[:, None] - tolerance
    largest_good = np.array([r[np.nonzero(row)[0].max()] for row in good])
    failure = np.array([next((r[j] for j in range(b + 1, len(r)) if failed[i, j]), math.inf)
                        for i, b in enumerate(best_i)])
    return RateRangeSummary(norm, seeds, rates, acc, failed, r[best_i], best_acc, largest_good,
                            failure)


def gapped_good_rates(summary: RateRangeSummary, tolerance: float = GOOD_RATE_TOLERANCE
                      ) -> list[tuple[int, tuple[float, ...]]]:
    """The seeds whose good rates (validation accuracy within ``tolerance`` of the seed's
    best) skip a rung of the ladder, with those rates: ``[(seed, (rate, ...)), ...]``. The
    bracket of the largest good rate (:func:`rate_bounds`) assumes that a seed is good up to
    a critical rate and not above it; on these seeds that assumption fails."""
    good = summary.val_acc >= summary.best_acc[:, None] - tolerance
    out = []
    for seed, row in zip(summary.seeds, good, strict=True):
        idx = np.nonzero(row)[0]
        if idx.max() - idx.min() + 1 != idx.size:
            out.append((seed, tuple(summary.rates[j] for j in idx)))
    return out


def rate_bounds(summary: RateRangeSummary, field: str) -> np.ndarray:
    """Per seed, the bounds ``(lo, hi)`` that the ladder puts on ``field``: the largest good
    rate lies in ``[rung, next rung)`` (``[top, inf)`` at the top), the failure rate in
    ``(previous rung, rung]`` (``(top, inf)`` when no run failed: censored). Shape ``(n, 2)``."""
    if field == "largest_good":
        return np.array([rung_bounds(summary.rates, x, "last_success")
                         for x in summary.largest_good])
    if field == "failure":
        return np.array([rung_bounds(summary.rates, x if math.isfinite(x) else None,
                                     "first_failure") for x in summary.failure])
    raise ValueError(f"field must be 'largest_good' or 'failure', got {field!r}")


def _rate_verdict(a: RateRangeSummary, b: RateRangeSummary, field: str, claim: str
                  ) -> LadderVerdict:
    """Interval-censored ladder verdict of ``a`` against ``b`` on ``field`` (claim 5)."""
    if a.seeds != b.seeds:
        raise ValueError(f"rate ranges must share their seeds, got {a.seeds} and {b.seeds}")
    v = claims.judge_ladder("evidence.5.rates", rate_bounds(a, field), rate_bounds(b, field))
    return LadderVerdict(**{**v.__dict__, "claim": claim})


# ---- the verdict table ------------------------------------------------------------------------


def verdict_cell(v: Verdict | LadderVerdict, kind: str = "accuracy") -> str:
    """The word with its interval, in the unit of ``kind``: ``accuracy``/``gap`` in
    percentage points, ``steps``, or ``log2`` (learning rates: a ladder verdict, printed as
    the bounds of the rate ratio)."""
    if kind in ("accuracy", "gap"):
        return v.text(digits=1, scale=100, unit=" pts")
    if kind == "steps":
        return v.text(digits=0, unit=" steps")
    if kind == "log2":
        return v.text(digits=2)
    raise ValueError(f"kind must be accuracy, gap, steps or log2, got {kind!r}")


def _threshold_text(v: Verdict | LadderVerdict, kind: str) -> str:
    if kind in ("accuracy", "gap"):
        return f"{100 * v.threshold:g} pts"
    if kind == "steps":
        return f"{v.threshold:.0f} steps"
    return f"×{2 ** v.threshold:g}"


def _row(claim: str, setting: str, v, kind: str, figure: str) -> dict:
    return {"claim": claim, "setting": setting, "word": v.word,
            "result": verdict_cell(v, kind), "threshold": _threshold_text(v, kind),
            "figure": figure, "verdict": v, "claim_id": v.claim_id}


SMALL_BATCH = 8   # claim 1: "small" means at most this many samples


def verdict_rows(doc: dict) -> list[dict]:
    """The verdict table: one row per (claim, setting) with the word and its interval
    (``result``), the threshold, the label of the figure that shows it and the registry id
    (``claim_id``). Effects are test-accuracy differences in percentage points unless the
    row says otherwise; every comparison is paired by seed (:func:`judge`)."""
    rows = []
    fig_b, fig_cr = "fig-evidence-batch-size", "fig-evidence-cnn-rnn"
    fig_gap, fig_curves = "fig-evidence-gap", "fig-evidence-curves"
    sizes = sorted({r["spec"]["batch_size"] for r in find_runs(doc, "mlp_batch_size")})
    for b in sizes:
        small = b <= SMALL_BATCH
        claim = ("1. MLP: LN beats BN at small batch" if small else
                 "1. MLP: BN beats LN at larger batch")
        cid = "evidence.1.small-batch" if small else "evidence.1.large-batch"
        winner, loser = ("ln", "bn") if small else ("bn", "ln")
        v = judge(doc, "mlp_batch_size", winner, loser, b, claim=claim, claim_id=cid)
        rows.append(_row(claim, f"MLP, batch {b}", v, "accuracy", fig_b))
    claim = "2. RNN: LN beats BN"
    rows.append(_row(claim, "row-by-row RNN, batch 32",
                     judge(doc, "rnn", "ln", "bn", 32, claim=claim, claim_id="evidence.2.rnn"),
                     "accuracy", fig_cr))
    # "LN does not converge": LN's final training accuracy below the converged level
    claim = "3. CNN: LN does not converge"
    ln_train = values(find_runs(doc, "cnn", "ln", 32), "train_acc")
    v = claims.judge("evidence.3.ln-does-not-converge",
                     np.full(ln_train.size, CONVERGED_TRAIN_ACC), ln_train)
    v = Verdict(**{**v.__dict__, "claim": claim})
    rows.append(_row(claim, f"CNN, LN over (C,H,W): {100 * CONVERGED_TRAIN_ACC:g} % minus "
                     "final train acc.", v, "accuracy", fig_cr))
    for other, label in (("ln", "LN over (C,H,W)"), ("gn", "GN"), ("ln_c", "LN over channels")):
        claim = "3. CNN: BN beats the alternatives"
        rows.append(_row(claim, f"CNN, BN vs {label}",
                         judge(doc, "cnn", "bn", other, 32, claim=claim,
                               claim_id="evidence.3.bn-beats"), "accuracy", fig_cr))
    for exp, name in (("mlp_batch_size", "MLP"), ("cnn", "CNN")):
        # positive effect = BN's train-test accuracy gap is smaller than the other's
        for other, label in (("none", "no norm"), ("ln", "LN")):
            claim = f"4. BN regularizes: smaller train-test gap than {label}"
            # lower gap is better: the other network's gap minus BN's
            v = judge(doc, exp, "bn", other, 32, metric="gap", claim=claim,
                      claim_id="evidence.4.bn-regularizes")
            rows.append(_row(claim, f"{name}, batch 32", v, "gap", fig_gap))
    for exp, name in (("mlp_batch_size", "MLP"), ("cnn", "CNN"), ("rnn", "RNN")):
        budget = find_runs(doc, exp, "ln", 32)[0]["steps"]
        claim = "5. LN speeds up convergence (vs none)"
        v = claims.judge("evidence.5.ln-speed",
                         *paired_values(doc, exp, "ln", "none", 32, "steps_to_90"),
                         budget=budget)
        v = Verdict(**{**v.__dict__, "claim": claim})
        rows.append(_row(claim, f"{name}, batch 32: steps to 90 % val. acc. "
                         f"(budget {budget})", v, "steps", fig_curves))
    rows += rate_rows(doc)
    return rows


def rate_rows(doc: dict) -> list[dict]:
    """Claim 5's "LN allows larger learning rates" and BN's "allows higher learning rates"
    (003.5): each seed's largest good rate and its failure rate are rungs of a ladder, so
    they are judged as interval-censored outcomes (:func:`rate_bounds`,
    :func:`~layernorm_tutorial.lab.common.verdict.ladder_verdict`) against no normalization,
    paired by seed, for the MLP and the RNN at batch 32."""
    rows = []
    experiments = sorted({r["experiment"] for r in doc["range_runs"]})
    for exp in experiments:
        name = exp.removeprefix("lr_range_").upper()
        ranges = {n: rate_range(doc, exp, n) for n in ("none", "bn", "ln")}
        for norm, label in (("ln", "LN"), ("bn", "BN")):
            claim = f"5. {label} allows larger learning rates (vs none)"
            for field, what in (("largest_good", "largest rate within 1 pt of the best"),
                                ("failure", "rate at which training fails")):
                v = _rate_verdict(ranges[norm], ranges["none"], field, claim)
                rows.append(_row(claim, f"{name}, batch 32: ratio of the {what}", v, "log2",
                                 "fig-evidence-lr"))
    return rows


def holm_rows(rows: list[dict]) -> list[dict]:
    """The rows with ``holm`` (``True`` when the word survives the family correction over the
    confirmatory rows, the chapter's family: Bonferroni since verdict method v3,
    :func:`~layernorm_tutorial.lab.common.verdict.family_marks`; the key keeps its old name)
    and ``result`` prefixed by the mark."""
    marks = family_marks([r["verdict"] for r in rows])
    return [{**r, "holm": m, "result": (f"{MARK} " if m else "") + r["result"]}
            for r, m in zip(rows, marks, strict=True)]


def verdict_markdown(rows: list[dict], earlier: list[dict] | None = None) -> str:
    """A Markdown (MyST) table of the verdict rows, figures as ``{numref}`` links.
    ``earlier``: the same comparisons judged on an earlier run (exploratory), printed in a
    column beside the verdict (``rows`` are then the confirmatory verdicts)."""
    if earlier is None:
        lines = ["| Claim | Setting | Verdict: effect [95 % interval], seeds | Threshold | "
                 "Figure |", "|---|---|---|---|---|"]
        for r in rows:
            lines.append(f"| {r['claim']} | {r['setting']} | {r['result']} | "
                         f"{r['threshold']} | {{numref}}`{r['figure']}` |")
        return "\n".join(lines)
    if [(r["claim"], r["setting"]) for r in rows] != [(e["claim"], e["setting"])
                                                      for e in earlier]:
        raise ValueError("earlier must judge the same comparisons as rows, in their order")
    lines = ["| Claim | Setting | Verdict (confirmatory): effect [95 % interval], seeds | "
             "Earlier run (exploratory) | Threshold | Figure |", "|---|---|---|---|---|---|"]
    for r, e in zip(rows, earlier, strict=True):
        lines.append(f"| {r['claim']} | {r['setting']} | {r['result']} | "
                     f"{e['result'].removeprefix('exploratory, ')} | {r['threshold']} | "
                     f"{{numref}}`{r['figure']}` |")
    return "\n".join(lines)


def side_verdict_rows(init, combo, scales=(0.5, 2.0)) -> list[dict]:
    """Verdict rows for the side experiments: claim 6 (BN makes accuracy less sensitive to
    the initialization scale: BN minus no norm at each of ``scales``) from ``init``
    (``bn_init.InitScaleResult``), and claim 7 (BN trunk + LN head beats each single-norm
    network, and no normalization where that variant was run) from ``combo``
    (``combinations.CombinationResult``). Both are paired by seed."""
    rows = []
    for scale in scales:
        j = init.scales.index(scale)
        claim = "6. BN: less sensitive to the initialization (vs none)"
        v = claims.judge("evidence.6.bn-init", init.accuracy[init.norms.index("bn"), j],
                         init.accuracy[init.norms.index("none"), j])
        v = Verdict(**{**v.__dict__, "claim": claim})
        rows.append(_row(claim, f"deep MLP, SGD, init scale {scale:g}", v, "accuracy",
                         "fig-evidence-init-scale"))
    mixed = combo.test_acc[combo.variants.index("BN trunk + LN head")]
    others = [v for v in ("BN everywhere", "LN everywhere", "no norm") if v in combo.variants]
    for other in others:
        claim = ("7. Combining: BN trunk + LN head beats a single norm" if other != "no norm"
                 else "7. Combining: BN trunk + LN head beats no norm")
        v = claims.judge("evidence.7.combining", mixed,
                         combo.test_acc[combo.variants.index(other)])
        v = Verdict(**{**v.__dict__, "claim": claim})
        rows.append(_row(claim, f"conv + attention, vs {other}", v, "accuracy",
                         "fig-evidence-combinations"))
    return rows


def per_class_verdicts(doc: dict, experiment: str, claimed: str, baseline: str,
                       batch_size: int, split: str = "test") -> list[Verdict]:
    """Ten paired verdicts, one per digit: ``claimed`` minus ``baseline`` accuracy on the
    images of that class of ``split`` (``"test"`` or ``"val"``), paired by seed. Exploratory:
    the breakdown was chosen after the batch-256 results were seen (claim
    ``evidence.x.per-digit``), so every verdict's text says so."""
    if split not in ("test", "val"):
        raise ValueError(f"split must be 'test' or 'val', got {split!r}")
    a, b = (np.array([r["final"][f"{split}_acc_per_class"]
                      for r in sorted(find_runs(doc, experiment, n, batch_size),
                                      key=lambda r: r["spec"]["seed"])], dtype=float)
            for n in (claimed, baseline))
    if a.shape != b.shape:
        raise ValueError(f"{claimed} and {baseline} must share their seeds to pair")
    return [Verdict(**{**claims.judge("evidence.x.per-digit", a[:, c], b[:, c]).__dict__,
                       "claim": f"digit {c}"}) for c in range(a.shape[1])]
