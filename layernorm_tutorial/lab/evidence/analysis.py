"""From run records to numbers: per-setting summaries, effect sizes and the verdict table.

Conventions. Every summary uses the runs at the setting's chosen learning rate (one per
seed). An *effect* is the difference of two means over seeds, oriented so that a positive
value is what the claim predicts, and its *spread* is the standard error of that difference,
``sqrt(sd_a^2 / n_a + sd_b^2 / n_b)`` (sd with ddof=1). A claimed difference **holds** when
the effect exceeds ``max(2 * SE, MIN_EFFECT)``; it is **reversed** when the effect is below
``-max(2 * SE, MIN_EFFECT)``; otherwise there is **no clear difference**. With three seeds this
is a coarse screen, not a significance test, and the chapter says so.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from layernorm_tutorial.lab.evidence.results import find_runs

__all__ = ["MIN_EFFECT", "CONVERGENCE_THRESHOLD", "Summary", "Effect", "values", "summarize",
           "effect", "classify", "steps_to_accuracy", "batch_size_curves", "chosen_lr",
           "verdict_rows", "side_verdict_rows", "verdict_markdown", "format_effect"]

MIN_EFFECT = 0.005            # half a percentage point: about two test images
CONVERGENCE_THRESHOLD = 0.9   # validation accuracy that counts as "converged" for claim 5


def _num(v) -> float:
    return float("nan") if v is None else float(v)


def values(runs: list[dict], metric: str) -> np.ndarray:
    """One value per run. ``metric`` is a key of ``final`` or ``"gap"`` (train accuracy minus
    test accuracy), ``"loss_gap"`` (test loss minus train loss) or ``"steps_to_90"``."""
    if metric == "gap":
        return np.array([_num(r["final"]["train_acc"]) - _num(r["final"]["test_acc"])
                         for r in runs])
    if metric == "loss_gap":
        return np.array([_num(r["final"]["test_loss"]) - _num(r["final"]["train_loss"])
                         for r in runs])
    if metric == "steps_to_90":
        return np.array([steps_to_accuracy(r) for r in runs], dtype=float)
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


@dataclass(frozen=True)
class Effect:
    """``mean(a) - mean(b)`` and its standard error."""

    value: float
    se: float
    a: Summary
    b: Summary


def effect(a, b) -> Effect:
    sa, sb = summarize(a), summarize(b)
    se = math.sqrt(sa.sd ** 2 / sa.n + sb.sd ** 2 / sb.n)
    return Effect(sa.mean - sb.mean, se, sa, sb)


def classify(e: Effect, min_effect: float = MIN_EFFECT) -> str:
    """``"holds"``, ``"reversed"`` or ``"no clear difference"`` (see the module docstring)."""
    bar = max(2 * e.se, min_effect)
    if not math.isfinite(e.value):
        return "no clear difference"
    if e.value > bar:
        return "holds"
    if e.value < -bar:
        return "reversed"
    return "no clear difference"


def steps_to_accuracy(run: dict, threshold: float = CONVERGENCE_THRESHOLD,
                      key: str = "val_acc") -> float:
    """First logged step at which ``curve[key] >= threshold``; ``inf`` if never reached
    (the run is censored at its budget)."""
    for step, acc in zip(run["curve"]["step"], run["curve"][key], strict=True):
        if acc is not None and acc >= threshold:
            return float(step)
    return math.inf


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


def format_effect(e: Effect) -> str:
    """``"+1.2 ± 0.4 pp"``: an accuracy effect and its SE in percentage points."""
    return _pp(e)


def _pp(e: Effect) -> str:
    return f"{100 * e.value:+.1f} ± {100 * e.se:.1f} pp"


def _row(claim, setting, result, effect_text, figure):
    return {"claim": claim, "setting": setting, "result": result, "effect": effect_text,
            "figure": figure}


def _diff_row(doc, claim, setting, exp, winner, loser, b, figure, metric="test_acc"):
    e = effect(values(find_runs(doc, exp, winner, b), metric),
               values(find_runs(doc, exp, loser, b), metric))
    verdict = {"holds": "holds", "reversed": "does not hold (reversed)",
               "no clear difference": "does not hold (no clear difference)"}[classify(e)]
    return _row(claim, setting, verdict, _pp(e), figure), e


def verdict_rows(doc: dict) -> list[dict]:
    """The verdict table: one row per (claim, setting) with result, effect ± SE and the
    label of the figure that shows it. Effects are test-accuracy differences in percentage
    points unless the row says otherwise."""
    rows = []
    fig_b, fig_cr = "fig-evidence-batch-size", "fig-evidence-cnn-rnn"
    fig_gap, fig_curves = "fig-evidence-gap", "fig-evidence-curves"
    sizes = sorted({r["spec"]["batch_size"] for r in find_runs(doc, "mlp_batch_size")})
    for b in sizes:
        small = b <= 8
        if not small and b < 128:
            continue
        claim = "1. MLP: LN beats BN at small batch" if small else \
            "1. MLP: BN beats LN at large batch"
        winner, loser = ("ln", "bn") if small else ("bn", "ln")
        rows.append(_diff_row(doc, claim, f"MLP, batch {b}", "mlp_batch_size", winner, loser,
                              b, fig_b)[0])
    rows.append(_diff_row(doc, "2. RNN: LN beats BN", "row-by-row RNN, batch 32", "rnn", "ln",
                          "bn", 32, fig_cr)[0])
    ln_train = summarize(values(find_runs(doc, "cnn", "ln", 32), "train_acc"))
    converged = ln_train.min >= 0.95
    rows.append(_row("3. CNN: LN does not converge", "CNN, LN over (C,H,W), batch 32",
                     "does not hold" if converged else
                     ("holds" if ln_train.max < 0.5 else "depends"),
                     f"final train accuracy {100 * ln_train.mean:.1f} % "
                     f"(min {100 * ln_train.min:.1f} %)", fig_cr))
    for other, label in (("ln", "LN over (C,H,W)"), ("gn", "GN"), ("ln_c", "LN over channels")):
        rows.append(_diff_row(doc, "3. CNN: BN beats the alternatives",
                              f"CNN, BN vs {label}", "cnn", "bn", other, 32, fig_cr)[0])
    for exp, b, name in (("mlp_batch_size", 32, "MLP"), ("cnn", 32, "CNN")):
        # positive effect = BN's train-test accuracy gap is smaller than the other's
        for other, label in (("none", "no norm"), ("ln", "LN")):
            rows.append(_diff_row(doc, f"4. BN regularizes: smaller train-test gap than {label}",
                                  f"{name}, batch {b}", exp, other, "bn", b, fig_gap,
                                  metric="gap")[0])
    for exp, name in (("mlp_batch_size", "MLP"), ("cnn", "CNN"), ("rnn", "RNN")):
        none = values(find_runs(doc, exp, "none", 32), "steps_to_90")
        ln = values(find_runs(doc, exp, "ln", 32), "steps_to_90")
        if not (np.all(np.isfinite(none)) and np.all(np.isfinite(ln))):
            result = "depends (a run never reached 90 %)"
            text = f"none {none.tolist()} vs LN {ln.tolist()} steps"
        else:
            e = effect(none, ln)
            bar = max(2 * e.se, 0.0)
            result = ("holds" if e.value > bar else
                      "does not hold (LN slower)" if e.value < -bar else
                      "does not hold (no clear difference)")
            text = (f"{e.value:+.0f} ± {e.se:.0f} steps to 90 % val. acc. "
                    f"(none {e.a.mean:.0f}, LN {e.b.mean:.0f})")
        rows.append(_row("5. LN speeds up convergence (vs none)", f"{name}, batch 32",
                         result, text, fig_curves))
    rows.append(_larger_lr_row(doc))
    return rows


def chosen_lr(doc: dict, experiment: str, norm: str, batch_size: int) -> float:
    """The learning rate the sweep chose for one setting."""
    for d in doc["selected_lr"]:
        if (d["experiment"], d["norm"], d["batch_size"]) == (experiment, norm, batch_size):
            return d["lr"]
    raise KeyError(f"no setting {experiment}/{norm}/batch {batch_size} in the results")


def _larger_lr_row(doc: dict) -> dict:
    """Claim 5's corollary "LN allows larger learning rates": compare the rates the sweep
    chose for LN and for no norm at batch 32 (seed 0 only, so there is no spread)."""
    pairs = {name: (chosen_lr(doc, exp, "ln", 32), chosen_lr(doc, exp, "none", 32))
             for exp, name in (("mlp_batch_size", "MLP"), ("cnn", "CNN"), ("rnn", "RNN"))}
    larger = [name for name, (ln, none) in pairs.items() if ln > none]
    result = ("holds" if len(larger) == len(pairs) else
              "does not hold (LN's best rate never larger)" if not larger else
              f"depends (larger only for {', '.join(larger)})")
    text = "; ".join(f"{name} LN {ln:g} vs none {none:g}" for name, (ln, none) in pairs.items())
    return _row("5. LN allows larger learning rates", "best Adam rate at batch 32 (seed 0)",
                result, text, "fig-evidence-lr")


def verdict_markdown(rows: list[dict]) -> str:
    """A Markdown (MyST) table of the verdict rows, figures as ``{numref}`` links."""
    lines = ["| Claim | Setting | Result | Effect (mean ± SE over seeds) | Figure |",
             "|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['claim']} | {r['setting']} | {r['result']} | {r['effect']} | "
                     f"{{numref}}`{r['figure']}` |")
    return "\n".join(lines)


_VERDICT = {"holds": "holds", "reversed": "does not hold (reversed)",
            "no clear difference": "does not hold (no clear difference)"}


def side_verdict_rows(init, combo, scales=(0.5, 2.0)) -> list[dict]:
    """Verdict rows for the side experiments: claim 6 (BN makes accuracy less sensitive to
    the initialization scale: BN minus no norm at each of ``scales``) from ``init``
    (``bn_init.InitScaleResult``), and claim 7 (BN trunk + LN head beats each single-norm
    network) from ``combo`` (``combinations.CombinationResult``)."""
    rows = []
    for scale in scales:
        j = init.scales.index(scale)
        e = effect(init.accuracy[init.norms.index("bn"), j],
                   init.accuracy[init.norms.index("none"), j])
        rows.append(_row("6. BN: less sensitive to the initialization (vs none)",
                         f"deep MLP, SGD, init scale {scale:g}", _VERDICT[classify(e)], _pp(e),
                         "fig-evidence-init-scale"))
    mixed = combo.test_acc[combo.variants.index("BN trunk + LN head")]
    for other in ("BN everywhere", "LN everywhere"):
        e = effect(mixed, combo.test_acc[combo.variants.index(other)])
        rows.append(_row("7. Combining: BN trunk + LN head beats a single norm",
                         f"conv + attention, vs {other}", _VERDICT[classify(e)], _pp(e),
                         "fig-evidence-combinations"))
    return rows
